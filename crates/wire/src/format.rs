//! One-line packet decodes for `show trace` (VPP style). Never panics on any input.

use std::fmt::Write;

fn mac(b: &[u8]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        b[0], b[1], b[2], b[3], b[4], b[5]
    )
}

/// Decodes an Ethernet frame's headers (Ethernet, VLAN tags, IPv4, UDP/TCP/ICMP) as a few
/// indented lines.
pub fn describe_ethernet(bytes: &[u8]) -> String {
    let mut out = String::new();
    if bytes.len() < 14 {
        let _ = write!(out, "truncated ethernet frame ({} bytes)", bytes.len());
        return out;
    }
    let mut et = u16::from_be_bytes([bytes[12], bytes[13]]);
    let mut off = 14;
    let mut tags = String::new();
    while (et == 0x8100 || et == 0x88a8) && bytes.len() >= off + 4 {
        let tci = u16::from_be_bytes([bytes[off], bytes[off + 1]]);
        let _ = write!(tags, " vlan {}", tci & 0xfff);
        et = u16::from_be_bytes([bytes[off + 2], bytes[off + 3]]);
        off += 4;
    }
    let name = match et {
        0x0800 => "IP4".to_string(),
        0x86dd => "IP6".to_string(),
        0x0806 => "ARP".to_string(),
        v => format!("0x{v:04x}"),
    };
    let _ = write!(
        out,
        "{name}: {} -> {}{tags}",
        mac(&bytes[6..12]),
        mac(&bytes[0..6])
    );
    if et == 0x0800 {
        out.push('\n');
        describe_ipv4(&bytes[off..], &mut out);
    }
    out
}

/// Decodes an IPv4 header and its UDP/TCP/ICMP header.
pub fn describe_ipv4(b: &[u8], out: &mut String) {
    if b.len() < 20 || b[0] >> 4 != 4 {
        out.push_str("  truncated or non-IPv4 header");
        return;
    }
    let ihl = ((b[0] & 0xf) as usize) * 4;
    let proto = b[9];
    let pname = match proto {
        1 => "ICMP".to_string(),
        6 => "TCP".to_string(),
        17 => "UDP".to_string(),
        p => format!("proto {p}"),
    };
    let _ = write!(
        out,
        "  {pname}: {}.{}.{}.{} -> {}.{}.{}.{}\n    tos 0x{:02x}, ttl {}, length {}, checksum 0x{:04x}",
        b[12], b[13], b[14], b[15], b[16], b[17], b[18], b[19],
        b[1],
        b[8],
        u16::from_be_bytes([b[2], b[3]]),
        u16::from_be_bytes([b[10], b[11]])
    );
    if ihl < 20 || b.len() < ihl + 4 {
        return;
    }
    let l4 = &b[ihl..];
    match proto {
        17 | 6 => {
            let _ = write!(
                out,
                "\n  {pname}: {} -> {}",
                u16::from_be_bytes([l4[0], l4[1]]),
                u16::from_be_bytes([l4[2], l4[3]])
            );
            if proto == 17 && l4.len() >= 8 {
                let _ = write!(
                    out,
                    "\n    length {}, checksum 0x{:04x}",
                    u16::from_be_bytes([l4[4], l4[5]]),
                    u16::from_be_bytes([l4[6], l4[7]])
                );
            }
        }
        1 => {
            let _ = write!(out, "\n  ICMP type {} code {}", l4[0], l4[1]);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_udp_frame() {
        let mut f = vec![0u8; 60];
        f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[12] = 0x08;
        f[14] = 0x45;
        f[22] = 64;
        f[23] = 17;
        f[26..30].copy_from_slice(&[10, 0, 0, 1]);
        f[30..34].copy_from_slice(&[10, 1, 0, 1]);
        f[34..36].copy_from_slice(&1024u16.to_be_bytes());
        f[36..38].copy_from_slice(&53u16.to_be_bytes());
        let s = describe_ethernet(&f);
        assert!(
            s.starts_with("IP4: 02:00:00:00:00:01 -> 02:00:00:00:00:02"),
            "{s}"
        );
        assert!(s.contains("UDP: 10.0.0.1 -> 10.1.0.1"), "{s}");
        assert!(s.contains("ttl 64"), "{s}");
        assert!(s.contains("UDP: 1024 -> 53"), "{s}");
    }

    proptest::proptest! {
        #[test]
        fn never_panics(b in proptest::collection::vec(proptest::num::u8::ANY, 0..100)) {
            let _ = describe_ethernet(&b);
            let mut s = String::new();
            describe_ipv4(&b, &mut s);
        }
    }
}
