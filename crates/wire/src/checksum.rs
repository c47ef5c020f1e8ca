//! The Internet checksum (RFC 1071), IPv4 pseudo-header sums (RFC 768 / RFC 793) and
//! incremental updates (RFC 1624).
//!
//! Two kinds of 16-bit values appear here. A *sum* is the folded ones'-complement sum of the
//! data ([`sum`], [`combine`], [`pseudo_header_v4`]); a *checksum* is the complement of a sum,
//! the value stored in a header ([`internet_checksum`]). A header holding a correct checksum
//! sums to `0xffff` (RFC 1071 §1: "the result is checked ... all 1 bits").

use std::net::Ipv4Addr;

/// Ones'-complement sum of `data` as big-endian 16-bit words, folded to 16 bits (not
/// inverted). An odd trailing byte is padded with a zero byte (RFC 1071 §1).
///
/// The loop adds 8 bytes per step into a 64-bit accumulator: RFC 1071 §2 (A) and (C) allow
/// summing in any order and width as long as the carries are folded back in at the end
/// (§2 (B), byte-order independence, is why loading words big-endian is enough).
#[inline]
pub fn sum(data: &[u8]) -> u16 {
    let mut acc: u64 = 0;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let v = u64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        // Add the two 32-bit halves; each add is < 2^33, so the accumulator cannot overflow
        // for any buffer shorter than 2^31 chunks (16 GiB).
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

/// Ones'-complement sum of a 20-byte IPv4 header without options (the common case), as five
/// 32-bit words; equal to [`sum`] over the same bytes.
#[inline(always)]
pub fn sum_ip4_header(h: &[u8; 20]) -> u16 {
    let w = |i: usize| u32::from_be_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]) as u64;
    fold(w(0) + w(4) + w(8) + w(12) + w(16))
}

/// Whether a 20-byte IPv4 header (no options) carries a correct checksum: the same answer as
/// `sum_ip4_header(h) == 0xffff`, cheaper. The header is loaded as two 64-bit words and one
/// 32-bit word in native byte order (ones'-complement sums are byte-order independent, RFC
/// 1071 §2 (B)) and added with end-around carry in 64 bits (an add and two add-with-carry);
/// since 2^16 ≡ 1 (mod 0xffff), the 16-bit ones'-complement sum is 0xffff exactly when that
/// total is a non-zero multiple of 0xffff — one multiply-based modulo instead of a fold loop.
/// Tested without a division: multiplying by the inverse of 0xffff modulo 2^64 maps the
/// multiples of 0xffff (0 to 2^64 - 1 = 0xffff · 0x1_0001_0001_0001) one to one onto
/// 0..=0x1_0001_0001_0001 and every other total above, so `total · inverse - 1` is below
/// 0x1_0001_0001_0001 exactly for the non-zero multiples (0 wraps to the top): one multiply
/// and one compare, where `total % 0xffff == 0 && total != 0` left a second test, or a full
/// remainder, to the compiler.
#[inline(always)]
pub fn ip4_header_valid(h: &[u8; 20]) -> bool {
    nonzero_multiple_of_ffff(header_total(h))
}

/// [`ip4_header_valid`] of a header the caller knows is not all zeros (e.g. it has checked
/// the first byte is `0x45`): the same answer with one instruction less. The total of a
/// non-zero header is non-zero (a carry out is added back as 1), so only the multiples test
/// is left: `total · inverse` at most 0x1_0001_0001_0001, without the `- 1` that moves an
/// all-zero header's total out of that range.
#[inline(always)]
pub fn ip4_header_valid_nonzero(h: &[u8; 20]) -> bool {
    let s = header_total(h);
    debug_assert!(s != 0 || *h == [0; 20]);
    s.wrapping_mul(INVERSE) <= MULTIPLES
}

/// The header as two 64-bit words and one 32-bit word in native byte order, added with
/// end-around carry: ≡ the 16-bit ones'-complement sum (mod 0xffff), 0 only for an all-zero
/// header.
#[inline(always)]
fn header_total(h: &[u8; 20]) -> u64 {
    let a = u64::from_ne_bytes(core::array::from_fn(|k| h[k]));
    let b = u64::from_ne_bytes(core::array::from_fn(|k| h[8 + k]));
    let c = u32::from_ne_bytes(core::array::from_fn(|k| h[16 + k])) as u64;
    // A carry out of bit 63 is worth 2^64 ≡ 1 (mod 0xffff): added back. The last add cannot
    // carry (after a carry the sum is below 2^32 + 1), and a non-zero total stays non-zero.
    let (s, c1) = a.overflowing_add(b);
    let (s, c2) = s.overflowing_add(c + c1 as u64);
    s + c2 as u64
}

/// The modular inverse of 0xffff (`0xffff · INVERSE ≡ 1 (mod 2^64)`).
const INVERSE: u64 = 0xfffe_fffe_fffe_ffff;
/// `(2^64 - 1) / 0xffff`: the multiples of 0xffff below 2^64 map to 0 ..= MULTIPLES.
const MULTIPLES: u64 = 0x1_0001_0001_0001;

/// `s % 0xffff == 0 && s != 0` in one multiply and one compare: multiplying by the modular
/// inverse of 0xffff maps the multiples `k · 0xffff` (k = 0 ..= (2^64 - 1) / 0xffff) to `k`
/// and every other value above them; subtracting 1 moves 0 to the top.
#[inline(always)]
fn nonzero_multiple_of_ffff(s: u64) -> bool {
    const _: () = assert!(0xffff * MULTIPLES == u64::MAX && 0xffffu64.wrapping_mul(INVERSE) == 1);
    s.wrapping_mul(INVERSE).wrapping_sub(1) < MULTIPLES
}

/// TTL decrement with the RFC 1624 incremental checksum update, on the IPv4 header's bytes
/// 8..12 (TTL, protocol, checksum), loaded and stored as one little-endian word `w` (TTL in
/// the low byte, protocol, checksum bytes in the high half): the TTL loses one and the
/// checksum gains 0x0100 in ones' complement (end-around carry; a result of 0xffff becomes
/// 0). Equal to decrementing byte 8 and applying [`update_u16`] to the TTL/protocol word; the
/// TTL must be at least 1.
///
/// Read little-endian, the checksum bytes are the checksum byte-swapped, and adding 0x0100 to
/// it is adding 1 to them (ones' complement sums do not depend on byte order, RFC 1071 §2
/// (B)): `w + 0xffff` takes 1 from the TTL byte (no borrow: it is at least 1) and carries 1
/// into the high half. Its end-around carry is one more when the swapped checksum is 0xfffe
/// or 0xffff (`w >= 0xfffe_0000`): 0xfffe becomes 0, 0xffff becomes 1. One load, no byte
/// swap, one compare, a conditional move and one store (a caller that has just read the
/// bytes for the TTL check shares that load).
#[inline(always)]
pub fn ip4_ttl_decrement(bytes: &mut [u8; 4]) {
    *bytes = ip4_ttl_decremented(u32::from_le_bytes(*bytes)).to_le_bytes();
}

/// [`ip4_ttl_decrement`] of the word already loaded (`w`, bytes 8..12 read little-endian,
/// TTL at least 1): the word to store. For a caller that tests the TTL in the same register
/// (`w as u8`), so that the bytes are loaded once.
#[inline(always)]
pub fn ip4_ttl_decremented(w: u32) -> u32 {
    if w >= 0xfffe_0000 {
        w.wrapping_add(0x1_ffff)
    } else {
        w + 0xffff
    }
}

/// Folds a wide ones'-complement accumulator to 16 bits (end-around carry, RFC 1071 §2 (C)).
#[inline(always)]
pub fn fold(mut acc: u64) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// Ones'-complement sum of two partial sums (RFC 1071 §2 (C), "parallel summation"). Both
/// parts must start at an even byte offset of the whole (otherwise swap the bytes of the odd
/// part's sum first, RFC 1071 §2 (B)).
#[inline(always)]
pub fn combine(a: u16, b: u16) -> u16 {
    fold(a as u64 + b as u64)
}

/// The Internet checksum of `data`: the complement of its ones'-complement sum. Over a header
/// whose checksum field is correct, the result is 0.
#[inline]
pub fn internet_checksum(data: &[u8]) -> u16 {
    !sum(data)
}

/// Sum (not inverted) of the IPv4 pseudo-header used by UDP (RFC 768) and TCP (RFC 793 §3.1):
/// source, destination, zero byte, protocol, and the transport length.
#[inline]
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, length: u16) -> u16 {
    let s = u32::from(src);
    let d = u32::from(dst);
    fold(
        (s >> 16) as u64
            + (s & 0xffff) as u64
            + (d >> 16) as u64
            + (d & 0xffff) as u64
            + protocol as u64
            + length as u64,
    )
}

/// The new checksum after a 16-bit word of the checksummed data changes from `old` to `new`,
/// by RFC 1624 eqn. 3: `HC' = ~(~HC + ~m + m')`.
///
/// Eqn. 3 rather than eqn. 2 (`HC' = HC - ~m - m'`) because eqn. 2 can produce the -0
/// representation `0xffff` where a full recomputation gives `0x0000` (RFC 1624 §3, §5 example).
/// With eqn. 3 the ones'-complement sum inside the brackets is never +0 unless all three terms
/// are zero, so `0xffff` comes out only if `HC = 0xffff, m = 0xffff, m' = 0` — an input
/// checksum that a full computation could not have produced unless the data summed to 0.
/// Either way the header stays valid: its sum is all ones.
///
/// UDP over IPv4 uses a stored checksum of 0 to mean "none" (RFC 768); callers must not
/// update it then.
#[inline]
pub fn update_u16(csum: u16, old: u16, new: u16) -> u16 {
    !fold((!csum) as u64 + (!old) as u64 + new as u64)
}

/// [`update_u16`] for a 32-bit field (e.g. an IPv4 address or a TCP sequence number): both
/// 16-bit halves in one step, RFC 1624 eqn. 3.
#[inline]
pub fn update_u32(csum: u16, old: u32, new: u32) -> u16 {
    let acc = (!csum) as u64
        + (!(old >> 16) & 0xffff) as u64
        + (!old & 0xffff) as u64
        + (new >> 16) as u64
        + (new & 0xffff) as u64;
    !fold(acc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ttl_decrement_matches_rfc1624_update_for_every_checksum() {
        for ttl in [1u32, 2, 64, 255] {
            for proto in [6u32, 17] {
                for c in 0..=0xffffu32 {
                    let bytes = [ttl as u8, proto as u8, (c >> 8) as u8, c as u8];
                    let old = (ttl << 8 | proto) as u16;
                    let new = old - 0x100;
                    let want = update_u16(c as u16, old, new);
                    let [w0, w1] = want.to_be_bytes();
                    let mut got = bytes;
                    ip4_ttl_decrement(&mut got);
                    assert_eq!(
                        got,
                        [ttl as u8 - 1, proto as u8, w0, w1],
                        "ttl {ttl} checksum {c:#x}"
                    );
                }
            }
        }
    }

    proptest! {
        #[test]
        fn ip4_header_valid_agrees_with_the_fold(mut h in proptest::array::uniform20(any::<u8>()), fix in any::<bool>()) {
            if fix {
                h[10] = 0;
                h[11] = 0;
                let c = !sum(&h);
                h[10..12].copy_from_slice(&c.to_be_bytes());
            }
            prop_assert_eq!(ip4_header_valid(&h), sum_ip4_header(&h) == 0xffff);
            if h != [0; 20] {
                prop_assert_eq!(ip4_header_valid_nonzero(&h), sum_ip4_header(&h) == 0xffff);
            }
        }
    }

    /// The total against the remainder it replaces: any `u64`, and the values around both
    /// ends of the compare (0, 0xffff and its neighbours, the largest multiples, `u64::MAX`).
    fn multiple_of_ffff_agrees(s: u64) -> bool {
        nonzero_multiple_of_ffff(s) == (s % 0xffff == 0 && s != 0)
    }

    proptest! {
        #[test]
        fn nonzero_multiple_of_ffff_is_the_remainder_test(s in any::<u64>(), k in 0..=0x1_0001_0001_0001u64, d in -2i64..=2) {
            prop_assert!(multiple_of_ffff_agrees(s), "{:#x}", s);
            let m = (k * 0xffff).wrapping_add_signed(d);
            prop_assert!(multiple_of_ffff_agrees(m), "{:#x}", m);
        }
    }

    #[test]
    fn nonzero_multiple_of_ffff_at_the_ends() {
        for s in [
            0,
            1,
            0xfffe,
            0xffff,
            0x1_0000,
            0x1_fffe,
            u64::MAX - 0xffff,
            u64::MAX - 1,
        ] {
            assert!(multiple_of_ffff_agrees(s), "{s:#x}");
        }
        assert!(!nonzero_multiple_of_ffff(0));
        assert!(nonzero_multiple_of_ffff(0xffff));
        assert!(nonzero_multiple_of_ffff(u64::MAX));
        assert!(!nonzero_multiple_of_ffff(0x1_0000));
    }

    /// Headers whose 64-bit total is at either end of the compare.
    #[test]
    fn ip4_header_valid_at_the_ends_of_the_compare() {
        let mut h = [0u8; 20];
        h[..2].copy_from_slice(&[0xff, 0xff]);
        assert!(ip4_header_valid(&h), "total 0xffff");
        let mut h = [0u8; 20];
        h[..8].fill(0xff);
        assert!(ip4_header_valid(&h), "total u64::MAX");
        let mut h = [0u8; 20];
        h[2] = 1;
        assert!(!ip4_header_valid(&h), "total 0x1_0000");
        h[2] = 0;
        h[1] = 1;
        assert!(!ip4_header_valid(&h), "total 0x100");
    }

    /// `ip4_header_valid_nonzero` at both ends of its compare (the largest total, the
    /// smallest multiple, their neighbours) and on headers with carries out of bit 63.
    #[test]
    fn ip4_header_valid_nonzero_at_the_ends() {
        let cases: [(&[(usize, u8)], bool); 6] = [
            (&[(0, 0xff), (1, 0xff)], true),
            (&[(1, 1)], false),
            (&[(2, 1)], false),
            (&[(0, 0xff), (1, 0xfe)], false),
            (&[(19, 1)], false),
            (&[(0, 0x45)], false),
        ];
        for (bytes, want) in cases {
            let mut h = [0u8; 20];
            for &(i, v) in bytes {
                h[i] = v;
            }
            assert_eq!(ip4_header_valid_nonzero(&h), want, "{h:?}");
            assert_eq!(ip4_header_valid(&h), want, "{h:?}");
        }
        for fill in [&[0xffu8; 8][..], &[0xff; 16], &[0xff; 20]] {
            let mut h = [0u8; 20];
            h[..fill.len()].copy_from_slice(fill);
            assert!(ip4_header_valid_nonzero(&h), "{} bytes of ones", fill.len());
        }
        // Carries out of bit 63 in both adds, total 0xffff · k.
        let mut h = [0xffu8; 20];
        h[19] = 0xfe;
        assert_eq!(ip4_header_valid_nonzero(&h), sum_ip4_header(&h) == 0xffff);
    }

    #[test]
    fn ip4_header_valid_edge_cases() {
        assert!(!ip4_header_valid(&[0; 20]), "all zero: sum 0, not 0xffff");
        assert!(ip4_header_valid(&[0xff; 20]));
        let mut h = [0u8; 20];
        h[0] = 0x45;
        h[10] = 0xba;
        h[11] = 0xff;
        assert!(ip4_header_valid(&h));
        h[11] = 0xfe;
        assert!(!ip4_header_valid(&h));
    }

    /// Headers of nearly all-ones bytes: the 64-bit adds carry (once or twice), which random
    /// headers seldom do. Every byte position with every value against the fold.
    #[test]
    fn ip4_header_valid_with_carries() {
        for base in [0xffu8, 0xfe, 0x80] {
            for i in 0..20 {
                for v in 0..=255u8 {
                    let mut h = [base; 20];
                    h[i] = v;
                    assert_eq!(
                        ip4_header_valid(&h),
                        sum_ip4_header(&h) == 0xffff,
                        "{h:02x?}"
                    );
                }
            }
        }
    }

    /// A bit-at-a-time reference: the RFC 1071 definition, words one by one.
    fn reference_sum(data: &[u8]) -> u16 {
        let mut s: u32 = 0;
        for (i, b) in data.iter().enumerate() {
            s += if i % 2 == 0 {
                (*b as u32) << 8
            } else {
                *b as u32
            };
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }

    #[test]
    fn rfc1071_numerical_example() {
        // RFC 1071 §3: bytes 00 01 f2 03 f4 f5 f6 f7 sum to ddf2 (with carries 2 folded in).
        assert_eq!(
            sum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0xddf2
        );
        assert_eq!(
            internet_checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0x220d
        );
        assert_eq!(sum(&[0x01]), 0x0100, "odd length pads with zero");
        assert_eq!(sum(&[]), 0);
    }

    #[test]
    fn known_ipv4_header() {
        // A captured IPv4 header: 192.168.0.1 -> 192.168.0.199, UDP, checksum 0xb861.
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

    #[test]
    fn rfc1624_minus_zero_case() {
        // RFC 1624 §3: a header whose other words sum to 0xcd7a with checksum 0xdd2f; the
        // word 0x5555 changes to 0x3285. Eqn. 2 would give -0 (0xffff); eqn. 3 and a full
        // recomputation give +0 (0x0000).
        assert_eq!(update_u16(0xdd2f, 0x5555, 0x3285), 0x0000);
        // A full recompute over a buffer with the same sums agrees.
        let data = [0xcd, 0x7a, 0x32, 0x85];
        assert_eq!(internet_checksum(&data), 0x0000);
    }

    #[test]
    fn pseudo_header_matches_byte_layout() {
        let (s, d) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 1, 1));
        let bytes = [10, 0, 0, 1, 10, 0, 1, 1, 0, 17, 0, 26];
        assert_eq!(pseudo_header_v4(s, d, 17, 26), sum(&bytes));
    }

    proptest! {
        #[test]
        fn fast_sum_matches_reference(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            prop_assert_eq!(sum(&data), reference_sum(&data));
        }

        #[test]
        fn combine_of_even_split_equals_whole(data in proptest::collection::vec(any::<u8>(), 0..200), cut: usize) {
            let cut = (cut % (data.len() + 1)) & !1;
            prop_assert_eq!(combine(sum(&data[..cut]), sum(&data[cut..])), sum(&data));
        }

        #[test]
        fn incremental_matches_full_recompute(
            mut hdr in proptest::collection::vec(any::<u8>(), 20..=20),
            word in 0usize..10,
            new_word: u16,
            new_addr: u32,
        ) {
            prop_assume!(word != 5); // the checksum field itself
            hdr[10] = 0;
            hdr[11] = 0;
            let c = internet_checksum(&hdr);
            hdr[10..12].copy_from_slice(&c.to_be_bytes());

            let old_w = u16::from_be_bytes([hdr[2 * word], hdr[2 * word + 1]]);
            hdr[2 * word..2 * word + 2].copy_from_slice(&new_word.to_be_bytes());
            let c2 = update_u16(c, old_w, new_word);
            let old_a = u32::from_be_bytes([hdr[12], hdr[13], hdr[14], hdr[15]]);
            hdr[12..16].copy_from_slice(&new_addr.to_be_bytes());
            let c3 = update_u32(c2, old_a, new_addr);

            hdr[10] = 0;
            hdr[11] = 0;
            let full = internet_checksum(&hdr);
            // RFC 1624 eqn. 3 gives exactly the full recomputation (never -0 for +0).
            prop_assert_eq!(c3, full);
        }
    }
}
