//! Packet fix-ups the rx path does while copying frames out of the ring: re-inserting the
//! VLAN tag the kernel stripped into `tp_vlan_tci`, and completing partial L4 checksums
//! (`TP_STATUS_CSUMNOTREADY`). Safe code on byte slices; nothing here panics on any input.

use sluice_wire::checksum;
use std::net::{Ipv4Addr, Ipv6Addr};

const ET_VLAN: u16 = 0x8100;
const ET_QINQ: u16 = 0x88a8;
const ET_IPV4: u16 = 0x0800;
const ET_IPV6: u16 = 0x86dd;
const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;

/// The 4-byte 802.1Q header (TPID, TCI) for a tag the kernel reported.
pub fn vlan_header(tpid: Option<u16>, tci: u16) -> [u8; 4] {
    let t = tpid.filter(|&t| t != 0).unwrap_or(ET_VLAN).to_be_bytes();
    let c = tci.to_be_bytes();
    [t[0], t[1], c[0], c[1]]
}

/// Copies `pkt` into `dst`, inserting `tag` after the two MAC addresses when given (and the
/// frame has them). Returns the bytes written, at most `dst.len()`.
pub fn copy_frame(dst: &mut [u8], pkt: &[u8], tag: Option<[u8; 4]>) -> usize {
    match tag {
        Some(t) if pkt.len() >= 12 => {
            let total = (pkt.len() + 4).min(dst.len());
            let mut w = 0;
            for piece in [&pkt[..12], &t[..], &pkt[12..]] {
                let n = piece.len().min(total - w);
                dst[w..w + n].copy_from_slice(&piece[..n]);
                w += n;
            }
            w
        }
        _ => {
            let n = pkt.len().min(dst.len());
            dst[..n].copy_from_slice(&pkt[..n]);
            n
        }
    }
}

fn be16(d: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*d.get(at)?, *d.get(at + 1)?]))
}

/// Completes the TCP or UDP checksum of an Ethernet frame (up to two VLAN tags, IPv4 or
/// IPv6 with hop-by-hop / routing / destination-options headers) whose checksum the sender
/// left to "hardware" (`CHECKSUM_PARTIAL`): the field is recomputed from scratch over the
/// pseudo-header and the L4 segment (RFC 768, RFC 793 §3.1, RFC 8200 §8.1). Returns whether
/// the frame was a TCP/UDP packet it could complete; other frames are left unchanged.
pub fn complete_l4_checksum(f: &mut [u8]) -> bool {
    let mut off = 12;
    let mut et = match be16(f, off) {
        Some(e) => e,
        None => return false,
    };
    for _ in 0..2 {
        if et != ET_VLAN && et != ET_QINQ {
            break;
        }
        off += 4;
        et = match be16(f, off) {
            Some(e) => e,
            None => return false,
        };
    }
    let l3 = off + 2;
    match et {
        ET_IPV4 => complete_v4(f, l3),
        ET_IPV6 => complete_v6(f, l3),
        _ => false,
    }
}

fn complete_v4(f: &mut [u8], l3: usize) -> bool {
    let Some(h) = f.get(l3..l3 + 20) else {
        return false;
    };
    if h[0] >> 4 != 4 {
        return false;
    }
    let ihl = (h[0] & 0xf) as usize * 4;
    let total = u16::from_be_bytes([h[2], h[3]]) as usize;
    let frag = u16::from_be_bytes([h[6], h[7]]);
    if ihl < 20 || total < ihl || frag & 0x3fff != 0 {
        return false; // malformed, or a fragment: no complete L4 segment here
    }
    let proto = h[9];
    let src = Ipv4Addr::new(h[12], h[13], h[14], h[15]);
    let dst = Ipv4Addr::new(h[16], h[17], h[18], h[19]);
    let (l4, end) = (l3 + ihl, l3 + total);
    if end > f.len() {
        return false;
    }
    let l4len = end - l4;
    let Ok(len16) = u16::try_from(l4len) else {
        return false;
    };
    let pseudo = checksum::pseudo_header_v4(src, dst, proto, len16);
    complete_l4(&mut f[l4..end], proto, pseudo)
}

fn complete_v6(f: &mut [u8], l3: usize) -> bool {
    let Some(h) = f.get(l3..l3 + 40) else {
        return false;
    };
    if h[0] >> 4 != 6 {
        return false;
    }
    let payload = u16::from_be_bytes([h[4], h[5]]) as usize;
    let mut nh = h[6];
    let mut s = [0u8; 16];
    let mut d = [0u8; 16];
    s.copy_from_slice(&h[8..24]);
    d.copy_from_slice(&h[24..40]);
    let end = l3 + 40 + payload;
    if end > f.len() {
        return false;
    }
    let mut p = l3 + 40;
    for _ in 0..8 {
        match nh {
            0 | 43 | 60 => {
                let (Some(&next), Some(&len)) = (f.get(p), f.get(p + 1)) else {
                    return false;
                };
                nh = next;
                p += (len as usize + 1) * 8;
                if p > end {
                    return false;
                }
            }
            _ => break,
        }
    }
    let l4len = end - p;
    let pseudo = sluice_wire::ipv6::pseudo_header_sum(
        Ipv6Addr::from(s),
        Ipv6Addr::from(d),
        nh,
        l4len as u32,
    );
    complete_l4(&mut f[p..end], nh, pseudo)
}

fn complete_l4(seg: &mut [u8], proto: u8, pseudo: u16) -> bool {
    let at = match proto {
        PROTO_TCP if seg.len() >= 20 => 16,
        PROTO_UDP if seg.len() >= 8 => 6,
        _ => return false,
    };
    seg[at] = 0;
    seg[at + 1] = 0;
    let mut c = !checksum::combine(pseudo, checksum::sum(seg));
    if proto == PROTO_UDP && c == 0 {
        c = 0xffff; // RFC 768: a computed zero is sent as all ones
    }
    seg[at..at + 2].copy_from_slice(&c.to_be_bytes());
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip4_udp(payload: &[u8], vlan: bool) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
        if vlan {
            f.extend_from_slice(&[0x81, 0x00, 0x00, 0x0a]);
        }
        f.extend_from_slice(&[0x08, 0x00]);
        let total = 20 + 8 + payload.len();
        let mut ip = vec![
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0,
            1,
            0x40,
            0,
            64,
            17,
            0,
            0,
            10,
            0,
            0,
            1,
            10,
            0,
            0,
            2,
        ];
        let c = checksum::internet_checksum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&ip);
        let ul = 8 + payload.len();
        f.extend_from_slice(&[
            0x30,
            0x39,
            0x00,
            0x35,
            (ul >> 8) as u8,
            ul as u8,
            0xaa,
            0xbb,
        ]);
        f.extend_from_slice(payload);
        f
    }

    /// Verifies an L4 checksum by summing pseudo-header + segment: all ones when correct.
    fn udp4_ok(f: &[u8], l3: usize) -> bool {
        let seg = &f[l3 + 20..];
        let p = checksum::pseudo_header_v4(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            17,
            seg.len() as u16,
        );
        checksum::combine(p, checksum::sum(seg)) == 0xffff
    }

    #[test]
    fn completes_ipv4_udp_plain_and_tagged() {
        for vlan in [false, true] {
            let mut f = ip4_udp(b"hello, sluice", vlan);
            let l3 = if vlan { 18 } else { 14 };
            assert!(!udp4_ok(&f, l3));
            assert!(complete_l4_checksum(&mut f));
            assert!(udp4_ok(&f, l3), "vlan {vlan}");
        }
    }

    #[test]
    fn completes_ipv6_tcp_behind_hop_by_hop() {
        let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x86, 0xdd];
        let tcp_len = 20 + 5;
        let payload = 8 + tcp_len;
        f.extend_from_slice(&[0x60, 0, 0, 0, 0, payload as u8, 0, 64]);
        let src = [0xfdu8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let dst = [0xfdu8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        f.extend_from_slice(&src);
        f.extend_from_slice(&dst);
        f.extend_from_slice(&[6, 0, 1, 4, 0, 0, 0, 0]); // hop-by-hop: next TCP, PadN
        let mut tcp = vec![0u8; 20];
        tcp[12] = 0x50;
        tcp[16] = 0x12; // garbage "partial" checksum
        tcp.extend_from_slice(b"abcde");
        f.extend_from_slice(&tcp);
        assert!(complete_l4_checksum(&mut f));
        let seg = &f[14 + 40 + 8..];
        let p = sluice_wire::ipv6::pseudo_header_sum(
            Ipv6Addr::from(src),
            Ipv6Addr::from(dst),
            6,
            seg.len() as u32,
        );
        assert_eq!(checksum::combine(p, checksum::sum(seg)), 0xffff);
    }

    #[test]
    fn leaves_other_frames_alone_and_never_panics() {
        let mut arp = vec![0xffu8; 12];
        arp.extend_from_slice(&[0x08, 0x06]);
        arp.extend_from_slice(&[0u8; 28]);
        let before = arp.clone();
        assert!(!complete_l4_checksum(&mut arp));
        assert_eq!(arp, before);
        // Every truncation of a valid frame, and lying length fields.
        let f = ip4_udp(b"payload", true);
        for n in 0..f.len() {
            let mut t = f[..n].to_vec();
            let _ = complete_l4_checksum(&mut t);
        }
        let mut lie = f.clone();
        lie[18 + 2] = 0xff; // IPv4 total length far beyond the frame
        assert!(!complete_l4_checksum(&mut lie));
        let mut frag = ip4_udp(b"x", false);
        frag[14 + 6] = 0x20; // MF set
        assert!(!complete_l4_checksum(&mut frag));
    }

    #[test]
    fn vlan_reinsertion() {
        let pkt: Vec<u8> = (0u8..20).collect();
        let mut out = [0u8; 64];
        let n = copy_frame(&mut out, &pkt, Some(vlan_header(None, 0x0064)));
        assert_eq!(n, 24);
        assert_eq!(&out[..12], &pkt[..12]);
        assert_eq!(&out[12..16], &[0x81, 0x00, 0x00, 0x64]);
        assert_eq!(&out[16..24], &pkt[12..]);
        assert_eq!(vlan_header(Some(0x88a8), 5), [0x88, 0xa8, 0, 5]);
        // Destination too small: truncated, no panic.
        let mut small = [0u8; 14];
        assert_eq!(copy_frame(&mut small, &pkt, Some([1, 2, 3, 4])), 14);
        assert_eq!(copy_frame(&mut small, &pkt, None), 14);
        // Runt: no tag inserted.
        assert_eq!(copy_frame(&mut out, &pkt[..6], Some([1, 2, 3, 4])), 6);
    }
}
