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
use crate::icmpv6::{self, Icmpv6Packet, NdiscRepr};
use crate::ipv4::{IpProtocol, Ipv4Packet};
use crate::ipv6::{next_header, Ipv6Packet};
use crate::tcp::TcpPacket;
use crate::udp::UdpPacket;
use crate::WireError;
use std::fmt::Write;

/// Decodes an Ethernet frame: the Ethernet header (with VLAN tags), then IPv4 (with UDP, TCP
/// ports or ICMP), IPv6 (with UDP, TCP or ICMPv6) or ARP, one header per line.
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
        EtherType::IPV6 => {
            out.push('\n');
            describe_ipv6(l3, &mut out);
        }
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

/// Appends the decode of an IPv6 header, its extension-header chain and its UDP/TCP/ICMPv6
/// header to `out` (indented by two spaces, as under an Ethernet line), in VPP's shape:
///
/// ```text
///   ICMP6: fe80::1 -> ff02::1:ff00:2
///     tos 0x00, flow label 0x0, hop limit 255, payload length 32
///   ICMP6 neighbor_solicitation code 0 checksum 0x7999
///     target fe80::2 source lladdr 02:fe:00:00:00:01
/// ```
pub fn describe_ipv6(b: &[u8], out: &mut String) {
    let p = match Ipv6Packet::new_checked(b) {
        Ok(p) => p,
        Err(WireError::BadVersion) => {
            let v = b.first().map_or(0, |v| v >> 4);
            let _ = write!(out, "  IP6: bad version {v}");
            return;
        }
        Err(e) => {
            let _ = write!(out, "  IP6: {e} header ({} bytes)", b.len());
            return;
        }
    };
    let walk = p.walk_extensions();
    let upper = match walk {
        Ok((nh, _)) => IpProtocol(nh),
        Err(_) => p.next_header(),
    };
    let _ = write!(
        out,
        "  {upper}: {} -> {}\n    tos 0x{:02x}, flow label 0x{:x}, hop limit {}, payload length {}",
        p.src(),
        p.dst(),
        p.traffic_class(),
        p.flow_label(),
        p.hop_limit(),
        p.payload_len()
    );
    if p.check_len().is_err() {
        let _ = write!(
            out,
            "\n    truncated: {} bytes of {}",
            b.len().saturating_sub(40),
            p.payload_len()
        );
    }
    let (nh, off) = match walk {
        Ok(w) => w,
        Err(e) => {
            let _ = write!(out, "\n    extension headers: {e}");
            return;
        }
    };
    if off > 40 {
        let _ = write!(out, "\n    extension headers: {} bytes", off - 40);
    }
    if nh == next_header::FRAGMENT {
        out.push_str("\n    non-first fragment");
        return;
    }
    let end = (40 + p.payload_len() as usize).min(b.len());
    let l4 = b.get(off..end).unwrap_or(&[]);
    match nh {
        next_header::UDP => match UdpPacket::new_checked(l4) {
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
        next_header::TCP => match TcpPacket::new_checked(l4) {
            Ok(t) => {
                let _ = write!(
                    out,
                    "\n  TCP: {} -> {}\n    seq 0x{:08x} ack 0x{:08x} flags {} window {}, checksum 0x{:04x}",
                    t.src_port(),
                    t.dst_port(),
                    t.seq_number(),
                    t.ack_number(),
                    t.flags(),
                    t.window(),
                    t.checksum()
                );
            }
            Err(WireError::Truncated) => out.push_str("\n  TCP: truncated header"),
            Err(e) => {
                let _ = write!(out, "\n  TCP: {e}");
            }
        },
        next_header::ICMPV6 => match Icmpv6Packet::new_checked(l4) {
            Ok(m) => {
                let name = icmpv6::kind::name(m.kind())
                    .map_or_else(|| format!("type {}", m.kind()), str::to_string);
                let _ = write!(
                    out,
                    "\n  ICMP6 {name} code {} checksum 0x{:04x}",
                    m.code(),
                    m.checksum()
                );
                if !m.verify_checksum(p.src(), p.dst()) {
                    let _ = write!(
                        out,
                        " (should be 0x{:04x})",
                        m.compute_checksum(p.src(), p.dst())
                    );
                }
                describe_ndisc(&m, out);
            }
            Err(_) => out.push_str("\n  ICMP6: truncated header"),
        },
        _ => {}
    }
}

/// The line under an ND message: target, link-layer address, RA fields.
fn describe_ndisc(m: &Icmpv6Packet<&[u8]>, out: &mut String) {
    if !matches!(
        m.kind(),
        icmpv6::kind::ROUTER_SOLICIT
            | icmpv6::kind::ROUTER_ADVERT
            | icmpv6::kind::NEIGHBOR_SOLICIT
            | icmpv6::kind::NEIGHBOR_ADVERT
    ) {
        return;
    }
    let ll = |l: Option<crate::Mac>, what: &str| {
        l.map_or(String::new(), |m| format!(" {what} lladdr {m}"))
    };
    let _ = match NdiscRepr::parse(m) {
        Ok(NdiscRepr::RouterSolicit { lladdr }) => match lladdr {
            Some(m) => write!(out, "\n    source lladdr {m}"),
            None => Ok(()),
        },
        Ok(NdiscRepr::RouterAdvert {
            hop_limit,
            flags,
            router_lifetime,
            lladdr,
            mtu,
            prefixes,
            ..
        }) => {
            let _ = write!(
                out,
                "\n    hop limit {hop_limit} flags 0x{:02x} router lifetime {router_lifetime}{}",
                flags.0,
                ll(lladdr, "source")
            );
            if let Some(mtu) = mtu {
                let _ = write!(out, " mtu {mtu}");
            }
            for pi in prefixes {
                let _ = write!(out, " prefix {}/{}", pi.prefix, pi.prefix_len);
            }
            Ok(())
        }
        Ok(NdiscRepr::NeighborSolicit { target, lladdr }) => {
            write!(out, "\n    target {target}{}", ll(lladdr, "source"))
        }
        Ok(NdiscRepr::NeighborAdvert {
            flags,
            target,
            lladdr,
        }) => write!(
            out,
            "\n    target {target} flags 0x{:02x}{}",
            flags.0,
            ll(lladdr, "target")
        ),
        Err(e) => write!(out, "\n    neighbor discovery: {e}"),
    };
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

    /// An IPv6 neighbor solicitation fe80::1 -> ff02::1:ff00:2 in an Ethernet frame (the
    /// ICMPv6 checksum computed independently of this crate).
    fn ns_frame() -> Vec<u8> {
        let mut f = vec![0x33, 0x33, 0xff, 0, 0, 2, 2, 0xfe, 0, 0, 0, 1, 0x86, 0xdd];
        f.extend([0x60, 0, 0, 0, 0, 32, 58, 255]);
        f.extend([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        f.extend([0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 2]);
        f.extend([0x87, 0x00, 0x79, 0x99, 0, 0, 0, 0]);
        f.extend([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        f.extend([1, 1, 2, 0xfe, 0, 0, 0, 1]);
        f
    }

    #[test]
    fn decodes_ipv6_neighbor_solicitation() {
        assert_eq!(
            describe_ethernet(&ns_frame()),
            "IP6: 02:fe:00:00:00:01 -> 33:33:ff:00:00:02\n  \
             ICMP6: fe80::1 -> ff02::1:ff00:2\n    \
             tos 0x00, flow label 0x0, hop limit 255, payload length 32\n  \
             ICMP6 neighbor_solicitation code 0 checksum 0x7999\n    \
             target fe80::2 source lladdr 02:fe:00:00:00:01"
        );
        let mut f = ns_frame();
        f[56] = 0x7a;
        let s = describe_ethernet(&f);
        assert!(s.contains("checksum 0x7a99 (should be 0x7999)"), "{s}");
        f[79] = 0; // option length 0: RFC 4861 §4.6
        let s = describe_ethernet(&f);
        assert!(
            s.ends_with("neighbor discovery: malformed ndisc option length"),
            "{s}"
        );
    }

    #[test]
    fn decodes_ipv6_udp_tcp_and_fragments() {
        let mut f = ns_frame();
        f.truncate(54);
        f[18..20].copy_from_slice(&[0, 28]);
        f[20] = next_header::DEST_OPTS;
        f.extend([17, 0, 1, 4, 0, 0, 0, 0]); // DO -> UDP
        f.extend([0x04, 0x00, 0x00, 0x35, 0x00, 0x14, 0x12, 0x34]);
        f.extend([0; 12]);
        let s = describe_ethernet(&f);
        assert!(s.contains("\n  UDP: fe80::1 -> ff02::1:ff00:2\n"), "{s}");
        assert!(s.contains("\n    extension headers: 8 bytes\n"), "{s}");
        assert!(
            s.ends_with("\n  UDP: 1024 -> 53\n    length 20, checksum 0x1234"),
            "{s}"
        );
        f[54] = next_header::TCP;
        let s = describe_ethernet(&f[..80]);
        assert!(s.ends_with("\n  TCP: truncated header"), "{s}");
        let s = describe_ethernet(&f);
        assert!(s.ends_with("\n  TCP: malformed tcp data offset"), "{s}");
        f[74] = 0x50;
        f[75] = 0x12;
        let s = describe_ethernet(&f);
        assert!(s.contains("\n  TCP: 1024 -> 53\n    seq 0x00141234"), "{s}");
        assert!(s.contains("flags SYN ACK window 0"), "{s}");
        f[20] = next_header::FRAGMENT;
        f[56..58].copy_from_slice(&[0x05, 0xc8]);
        let s = describe_ethernet(&f);
        assert!(s.ends_with("\n    non-first fragment"), "{s}");
        f[20] = next_header::ROUTING;
        f[55] = 9;
        let s = describe_ethernet(&f);
        assert!(s.ends_with("\n    extension headers: truncated"), "{s}");
        let s = describe_ethernet(&f[..40]);
        assert!(s.ends_with("\n  IP6: truncated header (26 bytes)"), "{s}");
        let s = describe_ethernet(&f[..60]);
        assert!(s.contains("truncated: 6 bytes of 28"), "{s}");
        f[14] = 0x45;
        assert!(describe_ethernet(&f).ends_with("IP6: bad version 4"));
    }

    proptest! {
        #[test]
        fn never_panics(b in proptest::collection::vec(any::<u8>(), 0..100)) {
            let _ = describe_ethernet(&b);
            let mut s = String::new();
            describe_ipv4(&b, &mut s);
            describe_ipv6(&b, &mut s);
            describe_arp(&b, &mut s);
        }

        #[test]
        fn ipv6_never_panics_on_mutated_ns(i in 0usize..86, v: u8, cut in 0usize..=86) {
            let mut f = ns_frame();
            f[i] = v;
            let _ = describe_ethernet(&f[..cut]);
        }

        #[test]
        fn never_panics_on_mutated_valid_frames(i in 0usize..60, v: u8, cut in 0usize..=60) {
            let mut f = FRAME;
            f[i] = v;
            let _ = describe_ethernet(&f[..cut]);
        }
    }
}
