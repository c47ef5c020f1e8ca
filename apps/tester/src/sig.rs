//! The tester signature: 22 bytes at the start of the UDP payload of every tester frame.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `0x534C4345` ("SLCE"), big-endian |
//! | 4 | 2 | stream id |
//! | 6 | 2 | flags: bit 0 = latency stream; bits 8..15 = run generation (stale-run filter) |
//! | 8 | 6 | sequence number (48 bits; per stream and run, from 0) |
//! | 14 | 8 | tx timestamp: nanoseconds of the tester's clock (TSC since the daemon started) |
//!
//! All fields big-endian. 22 bytes so a 64-byte frame (14 Ethernet + 20 IPv4 + 8 UDP + 22)
//! carries it (IPv6: 14 + 40 + 8 + 22 = 84 bytes at least). Parsing ([`parse_frame`]) goes
//! through the `wire` views and never panics. A frame the DUT put into VXLAN (UDP port 4789,
//! the benchmark's `vxlan-encap` scenario) is looked into once: the signature of the inner
//! Ethernet frame counts.

use sluice_wire::ethernet::{parse_tags, EtherType};
use sluice_wire::ipv4::{IpProtocol, Ipv4Packet};
use sluice_wire::ipv6::{next_header, Ipv6Packet};
use sluice_wire::udp::UdpPacket;

/// "SLCE".
pub const MAGIC: u32 = 0x534C_4345;
/// Signature length.
pub const LEN: usize = 22;
/// Offset of the tx timestamp inside the signature.
pub const TS_OFFSET: usize = 14;
/// Flag: the frame belongs to a latency stream.
pub const FLAG_LATENCY: u16 = 1;
/// Largest sequence number (48 bits).
pub const SEQ_MASK: u64 = (1 << 48) - 1;

/// A parsed signature.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Sig {
    /// Stream id.
    pub stream: u16,
    /// Flags.
    pub flags: u16,
    /// Sequence number.
    pub seq: u64,
    /// tx timestamp, ns.
    pub tx_ns: u64,
}

impl Sig {
    /// The run generation (flags bits 8..15).
    #[inline(always)]
    pub fn generation(&self) -> u8 {
        (self.flags >> 8) as u8
    }
}

/// Why a frame is not a tester frame.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum NotTester {
    /// Not Ethernet/[VLAN]/IPv4|IPv6/UDP, or truncated headers.
    Headers,
    /// A non-first IPv4 or IPv6 fragment.
    Fragment,
    /// UDP payload shorter than the signature.
    Short,
    /// Wrong magic.
    Magic,
}

/// Writes a signature (timestamp included) into `out[..LEN]`.
#[inline(always)]
pub fn write(out: &mut [u8], s: &Sig) {
    let Some(o) = out.get_mut(..LEN) else { return };
    o[0..4].copy_from_slice(&MAGIC.to_be_bytes());
    o[4..6].copy_from_slice(&s.stream.to_be_bytes());
    o[6..8].copy_from_slice(&s.flags.to_be_bytes());
    o[8..14].copy_from_slice(&(s.seq & SEQ_MASK).to_be_bytes()[2..8]);
    o[14..22].copy_from_slice(&s.tx_ns.to_be_bytes());
}

/// Parses the signature of a signature slice (`sig[..LEN]`).
#[inline(always)]
pub fn parse(sig: &[u8]) -> Result<Sig, NotTester> {
    let s: &[u8; LEN] = sig
        .get(..LEN)
        .and_then(|s| s.try_into().ok())
        .ok_or(NotTester::Short)?;
    if u32::from_be_bytes([s[0], s[1], s[2], s[3]]) != MAGIC {
        return Err(NotTester::Magic);
    }
    let mut seq = [0u8; 8];
    seq[2..8].copy_from_slice(&s[8..14]);
    let mut ts = [0u8; 8];
    ts.copy_from_slice(&s[14..22]);
    Ok(Sig {
        stream: u16::from_be_bytes([s[4], s[5]]),
        flags: u16::from_be_bytes([s[6], s[7]]),
        seq: u64::from_be_bytes(seq),
        tx_ns: u64::from_be_bytes(ts),
    })
}

/// Finds and parses the signature of an Ethernet frame: up to two VLAN tags, IPv4 (any
/// header length, first fragment only) or IPv6 (extension headers walked, first fragment
/// only), UDP, signature at the start of the UDP payload. The DUT may have rewritten MACs,
/// TTL/hop limit, addresses and ports: only the payload matters (the UDP checksum is not
/// verified).
#[inline]
pub fn parse_frame(frame: &[u8]) -> Result<Sig, NotTester> {
    parse_frame_in(frame, true)
}

/// UDP destination port of VXLAN (RFC 7348).
pub const VXLAN_PORT: u16 = 4789;

/// The signature at the start of a UDP payload; when it is not there and `outer` and the
/// datagram is VXLAN (port 4789, I flag set), the signature of the inner frame.
#[inline(always)]
fn udp_sig(udp: &UdpPacket<&[u8]>, outer: bool) -> Result<Sig, NotTester> {
    let r = parse(udp.payload());
    if r.is_ok() || !outer || udp.dst_port() != VXLAN_PORT {
        return r;
    }
    match udp.payload() {
        [flags, _, _, _, _, _, _, _, inner @ ..] if flags & 0x08 != 0 => {
            parse_frame_in(inner, false)
        }
        _ => r,
    }
}

fn parse_frame_in(frame: &[u8], outer: bool) -> Result<Sig, NotTester> {
    let tags = parse_tags(frame).map_err(|_| NotTester::Headers)?;
    let l3 = frame.get(tags.l3_offset..).ok_or(NotTester::Headers)?;
    if tags.ethertype == EtherType::IPV4 {
        let ip = Ipv4Packet::new_checked(l3).map_err(|_| NotTester::Headers)?;
        if ip.protocol() != IpProtocol::UDP {
            return Err(NotTester::Headers);
        }
        if ip.frag_offset() != 0 {
            return Err(NotTester::Fragment);
        }
        let udp = UdpPacket::new_checked(ip.payload()).map_err(|_| NotTester::Headers)?;
        udp_sig(&udp, outer)
    } else if tags.ethertype == EtherType::IPV6 {
        let ip = Ipv6Packet::new_checked(l3).map_err(|_| NotTester::Headers)?;
        let (nh, off) = ip.walk_extensions().map_err(|_| NotTester::Headers)?;
        if nh == next_header::FRAGMENT {
            return Err(NotTester::Fragment);
        }
        if nh != next_header::UDP {
            return Err(NotTester::Headers);
        }
        // The payload per its length field (clamped to the frame), from the UDP header on.
        let end = 40 + ip.payload().len();
        let b = l3.get(off..end).ok_or(NotTester::Headers)?;
        let udp = UdpPacket::new_checked(b).map_err(|_| NotTester::Headers)?;
        udp_sig(&udp, outer)
    } else {
        Err(NotTester::Headers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 64-byte tester frame built by hand.
    fn frame() -> Vec<u8> {
        let mut f = vec![0u8; 64];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&50u16.to_be_bytes());
        f[22] = 64;
        f[23] = 17;
        f[38..40].copy_from_slice(&30u16.to_be_bytes());
        write(
            &mut f[42..],
            &Sig {
                stream: 7,
                flags: FLAG_LATENCY | 3 << 8,
                seq: 0x0123_4567_89ab,
                tx_ns: 0x1122_3344_5566_7788,
            },
        );
        f
    }

    #[test]
    fn round_trip_and_layout() {
        let f = frame();
        assert_eq!(&f[42..46], b"SLCE");
        assert_eq!(&f[50..56], &[0x01, 0x23, 0x45, 0x67, 0x89, 0xab]);
        let s = parse_frame(&f).unwrap();
        assert_eq!(s.stream, 7);
        assert_eq!(s.generation(), 3);
        assert_eq!(s.flags & FLAG_LATENCY, FLAG_LATENCY);
        assert_eq!(s.seq, 0x0123_4567_89ab);
        assert_eq!(s.tx_ns, 0x1122_3344_5566_7788);
        // A VLAN tag in front (added by the DUT) is skipped.
        let mut t = f[..12].to_vec();
        t.extend_from_slice(&[0x81, 0x00, 0x00, 0x64]);
        t.extend_from_slice(&f[12..]);
        assert_eq!(parse_frame(&t).unwrap(), s);
        // IPv4 options are skipped.
        let mut o = f[..14].to_vec();
        o.push(0x46);
        o.extend_from_slice(&f[15..34]);
        o.extend_from_slice(&[1, 1, 1, 0]);
        o.extend_from_slice(&f[34..]);
        o[16..18].copy_from_slice(&54u16.to_be_bytes());
        assert_eq!(parse_frame(&o).unwrap(), s);
    }

    /// `inner` inside Ethernet/IPv4/UDP to `port`/VXLAN header with `flags`.
    fn vxlan(inner: &[u8], port: u16, flags: u8) -> Vec<u8> {
        let mut f = vec![0u8; 50];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&((36 + inner.len()) as u16).to_be_bytes());
        f[22] = 64;
        f[23] = 17;
        f[36..38].copy_from_slice(&port.to_be_bytes());
        f[38..40].copy_from_slice(&((16 + inner.len()) as u16).to_be_bytes());
        f[42] = flags;
        f[49] = 0; // VNI 1 in bytes 46..49
        f[48] = 1;
        f.extend_from_slice(inner);
        f
    }

    #[test]
    fn a_frame_inside_vxlan_is_counted_by_its_inner_signature() {
        let f = frame();
        let s = parse_frame(&f).unwrap();
        let v = vxlan(&f, VXLAN_PORT, 0x08);
        assert_eq!(parse_frame(&v), Ok(s));
        // Not VXLAN: another port, or the I flag clear.
        assert_eq!(parse_frame(&vxlan(&f, 4790, 0x08)), Err(NotTester::Magic));
        assert_eq!(
            parse_frame(&vxlan(&f, VXLAN_PORT, 0)),
            Err(NotTester::Magic)
        );
        // Looked into once only: VXLAN in VXLAN is not a tester frame.
        assert_eq!(
            parse_frame(&vxlan(&v, VXLAN_PORT, 0x08)),
            Err(NotTester::Magic)
        );
        // A truncated inner frame is an error, never a panic.
        for n in 0..v.len() {
            assert!(parse_frame(&v[..n]).is_err(), "truncated at {n}");
        }
    }

    #[test]
    fn malformed_frames_are_rejected_without_panicking() {
        let f = frame();
        // Every truncation.
        for n in 0..f.len() {
            let r = parse_frame(&f[..n]);
            assert!(r.is_err(), "truncated at {n} parsed: {r:?}");
        }
        let mut bad = f.clone();
        bad[42] ^= 1;
        assert_eq!(parse_frame(&bad), Err(NotTester::Magic));
        let mut bad = f.clone();
        bad[23] = 6; // TCP
        assert_eq!(parse_frame(&bad), Err(NotTester::Headers));
        let mut bad = f.clone();
        bad[20] = 0x00;
        bad[21] = 0x10; // fragment offset 128
        assert_eq!(parse_frame(&bad), Err(NotTester::Fragment));
        let mut bad = f.clone();
        bad[12] = 0x86;
        bad[13] = 0xdd; // IPv6 EtherType on an IPv4 packet: version 4
        assert_eq!(parse_frame(&bad), Err(NotTester::Headers));
        let mut bad = f.clone();
        bad[14] = 0x44; // IHL 4
        assert_eq!(parse_frame(&bad), Err(NotTester::Headers));
        let mut bad = f.clone();
        bad[14] = 0x4f; // IHL 15: header longer than the frame's IPv4 part allows for UDP
        assert!(parse_frame(&bad).is_err());
        let mut bad = f.clone();
        bad[38..40].copy_from_slice(&20u16.to_be_bytes()); // UDP length leaves 12 bytes
        assert_eq!(parse_frame(&bad), Err(NotTester::Short));
        let mut bad = f.clone();
        bad[16..18].copy_from_slice(&40u16.to_be_bytes()); // IPv4 length cuts the signature
        assert_eq!(parse_frame(&bad), Err(NotTester::Short));
        // Random garbage of every length never panics.
        let mut x = 99u64;
        for n in 0..600 {
            let g: Vec<u8> = (0..n % 120)
                .map(|_| {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    (x >> 56) as u8
                })
                .collect();
            let _ = parse_frame(&g);
            let mut h = f.clone();
            h.truncate(14 + n % 50);
            h.extend_from_slice(&g);
            let _ = parse_frame(&h);
        }
    }
}
