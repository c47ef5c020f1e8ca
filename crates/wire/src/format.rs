//! Packet decodes for `show trace`, in VPP's style: one header per line, nested headers
//! indented by two more spaces, field lines under a header indented by two further spaces.
//!
//! ```text
//! IP4: 02:fe:00:00:00:01 -> 02:fe:00:00:00:02
//!   UDP: 10.0.0.1 -> 10.0.1.1
//!     tos 0x00, ttl 64, length 46, checksum 0x65be
//!     fragment id 0x0000
//!   UDP: 1024 -> 1024
//!     length 26, checksum 0x9a67
//! ```
//!
//! Every function here takes arbitrary bytes and never panics; what cannot be decoded is
//! described (`truncated ...`, `unknown ethertype 0x...`).

use crate::arp::ArpRepr;
use crate::ethernet::{parse_tags, EtherType, EthernetFrame};
use crate::icmp::IcmpPacket;
use crate::ipv4::{IpProtocol, Ipv4Packet};
use crate::udp::UdpPacket;
use crate::WireError;
use std::fmt::Write;

/// Decodes an Ethernet frame: the Ethernet header (with VLAN tags), then IPv4 (with UDP, TCP
/// ports or ICMP) or ARP, one header per line.
pub fn describe_ethernet(bytes: &[u8]) -> String {
    let mut out = String::new();
    let Ok(f) = EthernetFrame::new_checked(bytes) else {
        let _ = write!(out, "truncated ethernet frame ({} bytes)", bytes.len());
        return out;
    };
    let tags = parse_tags(bytes);
    let (et, l3) = match tags {
        Ok(t) => (t.ethertype, t.l3_offset),
        Err(_) => (f.ethertype(), bytes.len()),
    };
    let _ = write!(out, "{et}: {} -> {}", f.src(), f.dst());
    match tags {
        Ok(t) => {
            if let Some((tpid, vid)) = t.outer {
                let kind = if tpid == EtherType::QINQ {
                    "802.1ad"
                } else {
                    "802.1q"
                };
                let _ = write!(out, " {kind} vlan {vid}");
            }
            if let Some(vid) = t.inner {
                let _ = write!(out, " 802.1q vlan {vid}");
            }
        }
        Err(_) => out.push_str(" truncated vlan tag"),
    }
    let l3 = bytes.get(l3..).unwrap_or(&[]);
    match et {
        EtherType::IPV4 => {
            out.push('\n');
            describe_ipv4(l3, &mut out);
        }
        EtherType::ARP => {
            out.push('\n');
            describe_arp(l3, &mut out);
        }
        EtherType::IPV6 => {}
        other if other.name().is_none() => {
            let _ = write!(out, "\n  unknown ethertype 0x{:04x}", other.0);
        }
        _ => {}
    }
    out
}

/// Appends the decode of an IPv4 header and its UDP/TCP/ICMP header to `out` (indented by two
/// spaces, as under an Ethernet line).
pub fn describe_ipv4(b: &[u8], out: &mut String) {
    let p = match Ipv4Packet::new_checked(b) {
        Ok(p) => p,
        Err(WireError::BadVersion) => {
            let v = b.first().map_or(0, |v| v >> 4);
            let _ = write!(out, "  IP4: bad version {v}");
            return;
        }
        Err(e) => {
            let _ = write!(out, "  IP4: {e} header ({} bytes)", b.len());
            return;
        }
    };
    let proto = p.protocol();
    let _ = write!(
        out,
        "  {proto}: {} -> {}\n    tos 0x{:02x}, ttl {}, length {}, checksum 0x{:04x}",
        p.src(),
        p.dst(),
        p.dscp_ecn(),
        p.ttl(),
        p.total_len(),
        p.checksum()
    );
    if !p.verify_checksum() {
        let _ = write!(out, " (should be 0x{:04x})", p.compute_checksum());
    }
    if p.dont_frag() {
        out.push_str(" dont-fragment");
    }
    if p.more_frags() {
        out.push_str(" more-fragment");
    }
    let _ = write!(out, "\n    fragment id 0x{:04x}", p.ident());
    if p.frag_offset() != 0 {
        let _ = write!(out, " offset {}", p.frag_offset());
    }
    if p.check_len().is_err() {
        let _ = write!(
            out,
            "\n    truncated: {} bytes of {}",
            b.len(),
            p.total_len()
        );
    }
    if p.frag_offset() != 0 {
        return; // no transport header in a non-first fragment
    }
    let l4 = p.payload();
    match proto {
        IpProtocol::UDP => match UdpPacket::new_checked(l4) {
            Ok(u) => {
                let _ = write!(
                    out,
                    "\n  UDP: {} -> {}\n    length {}, checksum 0x{:04x}",
                    u.src_port(),
                    u.dst_port(),
                    u.len(),
                    u.checksum()
                );
            }
            Err(_) => out.push_str("\n  UDP: truncated header"),
        },
        IpProtocol::TCP => match l4.get(..4) {
            Some(h) => {
                let _ = write!(
                    out,
                    "\n  TCP: {} -> {}",
                    u16::from_be_bytes([h[0], h[1]]),
                    u16::from_be_bytes([h[2], h[3]])
                );
            }
            None => out.push_str("\n  TCP: truncated header"),
        },
        IpProtocol::ICMP => match IcmpPacket::new_checked(l4) {
            Ok(m) => {
                let name = match m.kind() {
                    0 => "echo_reply".to_string(),
                    3 => "destination_unreachable".to_string(),
                    8 => "echo_request".to_string(),
                    11 => "time_exceeded".to_string(),
                    12 => "parameter_problem".to_string(),
                    k => format!("type {k}"),
                };
                let csum = u16::from_be_bytes([l4[2], l4[3]]);
                let _ = write!(
                    out,
                    "\n  ICMP {name} code {} checksum 0x{csum:04x}",
                    m.code()
                );
            }
            Err(_) => out.push_str("\n  ICMP: truncated header"),
        },
        _ => {}
    }
}

/// Appends the decode of an Ethernet/IPv4 ARP packet to `out` (VPP's shape: operation, then
/// sender and target `mac/ip`).
pub fn describe_arp(b: &[u8], out: &mut String) {
    match ArpRepr::parse(b) {
        Ok(a) => {
            let op = match a.op {
                1 => "request".to_string(),
                2 => "reply".to_string(),
                o => format!("opcode {o}"),
            };
            let _ = write!(
                out,
                "  ARP: {op}, type ethernet/IP4, address size 6/4\n    {}/{} -> {}/{}",
                a.sha, a.spa, a.tha, a.tpa
            );
        }
        Err(e) => {
            let _ = write!(out, "  ARP: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A 60-byte IPv4/UDP frame (64 on the wire with the FCS); both checksums were computed
    /// independently of this crate.
    const FRAME: [u8; 60] = [
        0x02, 0xfe, 0x00, 0x00, 0x00, 0x02, 0x02, 0xfe, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00, 0x45,
        0x00, 0x00, 0x2e, 0x00, 0x00, 0x00, 0x00, 0x40, 0x11, 0x65, 0xbe, 0x0a, 0x00, 0x00, 0x01,
        0x0a, 0x00, 0x01, 0x01, 0x04, 0x00, 0x04, 0x00, 0x00, 0x1a, 0x9a, 0x67, 0x00, 0x01, 0x02,
        0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11,
    ];

    #[test]
    fn decodes_udp_frame_exactly() {
        assert_eq!(
            describe_ethernet(&FRAME),
            "IP4: 02:fe:00:00:00:01 -> 02:fe:00:00:00:02\n  \
             UDP: 10.0.0.1 -> 10.0.1.1\n    \
             tos 0x00, ttl 64, length 46, checksum 0x65be\n    \
             fragment id 0x0000\n  \
             UDP: 1024 -> 1024\n    \
             length 26, checksum 0x9a67"
        );
    }

    #[test]
    fn flags_bad_checksum_and_vlan() {
        let mut f = Vec::from(&FRAME[..12]);
        f.extend([0x81, 0x00, 0x00, 0x64]); // 802.1q vlan 100
        f.extend(&FRAME[12..]);
        f[24] = 0x40; // DF (IPv4 header at 18 after the tag)
        let s = describe_ethernet(&f);
        assert!(
            s.starts_with("IP4: 02:fe:00:00:00:01 -> 02:fe:00:00:00:02 802.1q vlan 100\n"),
            "{s}"
        );
        assert!(
            s.contains("checksum 0x65be (should be 0x25be) dont-fragment"),
            "{s}"
        );
    }

    #[test]
    fn decodes_arp_and_icmp() {
        let mut f = vec![0xff; 6];
        f.extend([2, 0xfe, 0, 0, 0, 1, 0x08, 0x06]);
        f.extend([0, 1, 8, 0, 6, 4, 0, 1, 2, 0xfe, 0, 0, 0, 1, 10, 0, 0, 1]);
        f.extend([0, 0, 0, 0, 0, 0, 10, 0, 0, 2]);
        let s = describe_ethernet(&f);
        assert!(
            s.starts_with("ARP: 02:fe:00:00:00:01 -> ff:ff:ff:ff:ff:ff\n"),
            "{s}"
        );
        assert!(
            s.ends_with("request, type ethernet/IP4, address size 6/4\n    02:fe:00:00:00:01/10.0.0.1 -> 00:00:00:00:00:00/10.0.0.2"),
            "{s}"
        );

        let mut icmp = FRAME;
        icmp[23] = 1;
        icmp[34] = 8;
        let s = describe_ethernet(&icmp);
        assert!(s.contains("  ICMP: 10.0.0.1 -> 10.0.1.1\n"), "{s}");
        assert!(
            s.ends_with("  ICMP echo_request code 0 checksum 0x0400"),
            "{s}"
        );
    }

    #[test]
    fn garbage_is_described_not_decoded() {
        assert_eq!(
            describe_ethernet(&[1, 2, 3]),
            "truncated ethernet frame (3 bytes)"
        );
        let mut f = FRAME;
        f[12..14].copy_from_slice(&[0x88, 0xcc]);
        assert!(describe_ethernet(&f).ends_with("\n  unknown ethertype 0x88cc"));
        let s = describe_ethernet(&FRAME[..30]);
        assert!(s.ends_with("\n  IP4: truncated header (16 bytes)"), "{s}");
        let mut v6 = FRAME;
        v6[14] = 0x65;
        assert!(describe_ethernet(&v6).ends_with("IP4: bad version 6"));
        let s = describe_ethernet(&FRAME[..40]);
        assert!(s.contains("truncated: 26 bytes of 46"), "{s}");
        assert!(s.ends_with("\n  UDP: truncated header"), "{s}");
    }

    proptest! {
        #[test]
        fn never_panics(b in proptest::collection::vec(any::<u8>(), 0..100)) {
            let _ = describe_ethernet(&b);
            let mut s = String::new();
            describe_ipv4(&b, &mut s);
            describe_arp(&b, &mut s);
        }

        #[test]
        fn never_panics_on_mutated_valid_frames(i in 0usize..60, v: u8, cut in 0usize..=60) {
            let mut f = FRAME;
            f[i] = v;
            let _ = describe_ethernet(&f[..cut]);
        }
    }
}
