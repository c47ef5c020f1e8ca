//! IPv6 tester frames: Ethernet/IPv6/UDP with the signature at the start of the UDP payload
//! and the mandatory UDP checksum (RFC 8200 §8.1: zero is not allowed over IPv6).
//!
//! Layout: 14 Ethernet + 40 IPv6 (hop limit 64, no extension headers) + 8 UDP, signature at
//! byte 62, so the smallest frame is [`MIN_SIZE`] = 84 bytes; the rest of the payload is the
//! same incrementing byte pattern as IPv4 frames.
//!
//! The checksum is computed per packet without summing the whole payload: the sum of the
//! payload after the signature (fixed per stream) and of the pseudo-header's length and next
//! header are taken once; per packet only the addresses, the UDP header and the signature
//! (62 bytes) are summed. The tx timestamp is written after the checksum (as late as the
//! node can, see `node`), and [`Ip6Frame::stamp`] folds it into the checksum incrementally
//! (RFC 1624): the timestamp starts at an even offset of the UDP header, so its four 16-bit
//! words add as they are.

use super::sig;
use sluice_vnet::pg::stream::Fields;
use sluice_wire::checksum::{combine, sum};

/// Offset of the IPv6 header.
const L3: usize = 14;
/// Offset of the source address.
const SRC: usize = L3 + 8;
/// Offset of the UDP header.
const UDP: usize = L3 + 40;
/// Offset of the signature.
pub const SIG_OFFSET: usize = UDP + 8;
/// Smallest IPv6 tester frame (FCS excluded).
pub const MIN_SIZE: usize = SIG_OFFSET + sig::LEN;
/// Offset of the UDP checksum.
const CSUM: usize = UDP + 6;

/// The IPv6 frame template of one stream (one frame size).
#[derive(Clone, Debug)]
pub struct Ip6Frame {
    /// The frame (`size` bytes): headers without addresses/ports/checksum, payload pattern.
    pub template: Vec<u8>,
    /// Source address of flow offset 0.
    pub src: u128,
    /// Destination address of offset 0.
    pub dst: u128,
    /// Sum of the pseudo-header's upper-layer length and next header and of the payload
    /// after the signature (constant per stream).
    fixed_sum: u16,
}

impl Ip6Frame {
    /// The template of `size`-byte frames (`size` ≥ [`MIN_SIZE`]) from `mac_src` to `mac_dst`.
    pub fn new(size: usize, mac_dst: [u8; 6], mac_src: [u8; 6], src: u128, dst: u128) -> Self {
        let size = size.max(MIN_SIZE);
        let mut t = vec![0u8; size];
        t[0..6].copy_from_slice(&mac_dst);
        t[6..12].copy_from_slice(&mac_src);
        t[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
        t[L3] = 0x60;
        let udp_len = (size - UDP) as u16;
        t[L3 + 4..L3 + 6].copy_from_slice(&udp_len.to_be_bytes());
        t[L3 + 6] = 17;
        t[L3 + 7] = 64;
        t[UDP + 4..UDP + 6].copy_from_slice(&udp_len.to_be_bytes());
        for (i, b) in t[SIG_OFFSET..].iter_mut().enumerate() {
            *b = i as u8;
        }
        // Pseudo-header: upper-layer length (32 bits) and next header; the UDP length field
        // itself is in the per-packet sum of the UDP header.
        let fixed_sum = combine(combine(udp_len, 17), sum(&t[MIN_SIZE..]));
        Ip6Frame {
            template: t,
            src,
            dst,
            fixed_sum,
        }
    }

    /// Writes the first `head` bytes of frame `f` (offsets `f.src`/`f.dst` from the base
    /// addresses, ports) into `out`; the signature is written next by the caller, then
    /// [`checksum`](Self::checksum). The frame continues with `template[head..]` (a chain).
    #[inline(always)]
    pub fn fill_with(&self, head: usize, f: Fields, out: &mut [u8]) {
        out[..head].copy_from_slice(&self.template[..head]);
        let src = self.src.wrapping_add(f.src as u128);
        let dst = self.dst.wrapping_add(f.dst as u128);
        out[SRC..SRC + 16].copy_from_slice(&src.to_be_bytes());
        out[SRC + 16..SRC + 32].copy_from_slice(&dst.to_be_bytes());
        out[UDP..UDP + 2].copy_from_slice(&f.sport.to_be_bytes());
        out[UDP + 2..UDP + 4].copy_from_slice(&f.dport.to_be_bytes());
    }

    /// Fills the UDP checksum of a frame written by [`fill_with`](Self::fill_with) whose
    /// signature is in place (timestamp included, or 0 to be [`stamp`](Self::stamp)ed later).
    #[inline(always)]
    pub fn checksum(&self, out: &mut [u8]) {
        out[CSUM..CSUM + 2].copy_from_slice(&[0, 0]);
        // Addresses, UDP header and signature: contiguous, from an even offset.
        let s = combine(self.fixed_sum, sum(&out[SRC..MIN_SIZE]));
        let c = !s;
        // A computed 0 is sent as 0xffff (RFC 768; 0 would mean "no checksum").
        let c = if c == 0 { 0xffff } else { c };
        out[CSUM..CSUM + 2].copy_from_slice(&c.to_be_bytes());
    }

    /// Writes the tx timestamp `ts` (big-endian ns) into a frame checksummed with a zero
    /// timestamp, updating the checksum (the timestamp words are added to the sum).
    #[inline(always)]
    pub fn stamp(data: &mut [u8], ts: &[u8; 8]) {
        let at = SIG_OFFSET + sig::TS_OFFSET;
        if data.len() < at + 8 {
            return;
        }
        data[at..at + 8].copy_from_slice(ts);
        let old = u16::from_be_bytes([data[CSUM], data[CSUM + 1]]);
        let c = !combine(!old, sum(ts));
        let c = if c == 0 { 0xffff } else { c };
        data[CSUM..CSUM + 2].copy_from_slice(&c.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_wire::ipv6::pseudo_header_sum;
    use std::net::Ipv6Addr;

    /// The UDP checksum of an IPv6 frame computed the slow way: pseudo-header + whole UDP.
    pub(crate) fn udp6_valid(f: &[u8]) -> bool {
        let a = |o: usize| Ipv6Addr::from(<[u8; 16]>::try_from(&f[o..o + 16]).unwrap());
        let udp = &f[UDP..];
        let ph = pseudo_header_sum(a(SRC), a(SRC + 16), 17, udp.len() as u32);
        combine(ph, sum(udp)) == 0xffff && f[CSUM..CSUM + 2] != [0, 0]
    }

    #[test]
    fn checksum_is_correct_before_and_after_the_timestamp_for_every_size() {
        let src: u128 = "2001:db8::1".parse::<Ipv6Addr>().unwrap().into();
        let dst: u128 = "2001:db8:1::ffff:ffff".parse::<Ipv6Addr>().unwrap().into();
        for size in [MIN_SIZE, 85, 100, 511, 1514, 9000] {
            let t = Ip6Frame::new(size, [2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1], src, dst);
            let mut out = vec![0u8; size];
            let mut x = 12345u64;
            for seq in 0..200u64 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let f = Fields {
                    src: (x >> 40) as u32,
                    dst: (x >> 8) as u32, // carries into the upper 64 bits
                    sport: (x >> 20) as u16,
                    dport: seq as u16,
                };
                t.fill_with(size, f, &mut out);
                sig::write(
                    &mut out[SIG_OFFSET..],
                    &sig::Sig {
                        stream: 3,
                        flags: 0x0501,
                        seq,
                        tx_ns: 0,
                    },
                );
                t.checksum(&mut out);
                assert!(udp6_valid(&out), "size {size} seq {seq} before stamp");
                Ip6Frame::stamp(&mut out, &x.to_be_bytes());
                assert!(udp6_valid(&out), "size {size} seq {seq} after stamp");
                let s = sig::parse_frame(&out).unwrap();
                assert_eq!((s.seq, s.tx_ns), (seq, x));
            }
            assert_eq!(u16::from_be_bytes([out[18], out[19]]) as usize, size - 54);
        }
    }

    #[test]
    fn truncated_or_mangled_ip6_frames_are_rejected_without_panicking() {
        let t = Ip6Frame::new(MIN_SIZE, [2; 6], [4; 6], 1, 2);
        let mut f = t.template.clone();
        sig::write(
            &mut f[SIG_OFFSET..],
            &sig::Sig {
                stream: 1,
                flags: 0,
                seq: 5,
                tx_ns: 9,
            },
        );
        assert_eq!(sig::parse_frame(&f).unwrap().seq, 5);
        for n in 0..f.len() {
            assert!(sig::parse_frame(&f[..n]).is_err(), "truncated at {n}");
        }
        let mut bad = f.clone();
        bad[20] = 6; // TCP
        assert_eq!(sig::parse_frame(&bad), Err(sig::NotTester::Headers));
        let mut bad = f.clone();
        bad[19] -= 4; // payload length cuts the signature
        assert_eq!(sig::parse_frame(&bad), Err(sig::NotTester::Short));
        // A Fragment header (first fragment) in front of UDP is walked; a later one is not.
        let mut fr = f[..54].to_vec();
        fr[20] = 44;
        fr.extend_from_slice(&[17, 0, 0, 0, 0, 0, 0, 1]);
        fr.extend_from_slice(&f[54..]);
        fr[19] += 8;
        assert_eq!(sig::parse_frame(&fr).unwrap().seq, 5);
        fr[56] = 0x01; // fragment offset 32
        assert_eq!(sig::parse_frame(&fr), Err(sig::NotTester::Fragment));
    }
}
