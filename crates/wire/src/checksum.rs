//! Internet checksum (RFC 1071) and incremental update (RFC 1624).

/// Ones'-complement sum of `data` as big-endian 16-bit words, folded to 16 bits (not inverted).
#[inline]
pub fn sum(data: &[u8]) -> u16 {
    let mut acc: u64 = 0;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let v = u64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        // Add the four 16-bit words via two 32-bit halves (carries accumulate above bit 32).
        acc += (v >> 32) + (v & 0xffff_ffff);
    }
    let rest = chunks.remainder();
    let mut words = rest.chunks_exact(2);
    for w in &mut words {
        acc += u16::from_be_bytes([w[0], w[1]]) as u64;
    }
    if let [b] = words.remainder() {
        acc += (*b as u64) << 8;
    }
    fold(acc)
}

/// Folds a wide ones'-complement accumulator to 16 bits.
#[inline(always)]
pub fn fold(mut acc: u64) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The Internet checksum of `data`: the inverted ones'-complement sum. Over a header whose
/// checksum field is correct, the result is 0.
#[inline]
pub fn internet_checksum(data: &[u8]) -> u16 {
    !sum(data)
}

/// RFC 1624 eqn. 3: the new checksum after a 16-bit field changes from `old` to `new`,
/// `HC' = ~(~HC + ~m + m')`. Never yields -0 (0xffff) from a valid +0 input.
#[inline]
pub fn update_u16(csum: u16, old: u16, new: u16) -> u16 {
    let acc = (!csum as u64) + (!old as u64) + new as u64;
    !fold(acc)
}

/// Incremental update for a 32-bit field (e.g. an IPv4 address), as two 16-bit words.
#[inline]
pub fn update_u32(csum: u16, old: u32, new: u32) -> u16 {
    let c = update_u16(csum, (old >> 16) as u16, (new >> 16) as u16);
    update_u16(c, old as u16, new as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3 example: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
        assert_eq!(
            sum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0xddf2
        );
        assert_eq!(sum(&[0x01]), 0x0100, "odd length pads with zero");
    }

    #[test]
    fn known_ipv4_header() {
        // A real IPv4 header (checksum 0xb861).
        let h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(internet_checksum(&h), 0);
        let mut z = h;
        z[10] = 0;
        z[11] = 0;
        assert_eq!(internet_checksum(&z), 0xb861);
    }

    proptest::proptest! {
        #[test]
        fn incremental_matches_full(mut hdr in proptest::collection::vec(proptest::num::u8::ANY, 20..=20), new_ttl: u8, new_addr: u32) {
            hdr[10] = 0; hdr[11] = 0;
            let c = internet_checksum(&hdr);
            hdr[10..12].copy_from_slice(&c.to_be_bytes());
            let old_w = u16::from_be_bytes([hdr[8], hdr[9]]);
            hdr[8] = new_ttl;
            let new_w = u16::from_be_bytes([hdr[8], hdr[9]]);
            let c2 = update_u16(c, old_w, new_w);
            let old_a = u32::from_be_bytes([hdr[12], hdr[13], hdr[14], hdr[15]]);
            hdr[12..16].copy_from_slice(&new_addr.to_be_bytes());
            let c3 = update_u32(c2, old_a, new_addr);
            hdr[10..12].copy_from_slice(&c3.to_be_bytes());
            // Valid either as +0 or -0 representation: the folded sum is all ones.
            proptest::prop_assert_eq!(sum(&hdr), 0xffff);
        }
    }
}
