//! The general form of VPP's `packet-generator new { ... data { ... } }`: a stack of header
//! lines built into fixed packets, replayed by `pg-input` (the IPv4/UDP streams whose
//! addresses and ports increment are [`super::stream::Synth`]).
//!
//! Lines, as in VPP's scripts (each one header, outermost first):
//!
//! - `IP4: <src-mac> -> <dst-mac> [vlan <id>]`, `IP6: ...`: Ethernet (type IPv4 / IPv6);
//! - `UDP: <src> -> <dst>`, `TCP: ...`, `ICMP: ...`, `ICMP6: ...`, `GRE: ...`: an IPv4 or
//!   IPv6 header (by the address syntax) carrying that protocol, `ttl <n>` after it;
//! - `UDP: <sport> -> <dport> [length <n>] [checksum <n>]`;
//! - `TCP: <sport> -> <dport> [SYN] [ACK] [FIN] [RST] [PSH] [URG] [window <n>] [seq <n>]
//!   [checksum <n>]`;
//! - `ICMP echo_request|echo_reply` (also after `ICMP6:`) `[id <n>] [seq <n>] [checksum <n>]`;
//! - `incrementing <n>` / `fixed <n>`: a payload of n bytes 0, 1, 2, ...;
//! - `hex 0x<bytes>`: raw bytes (a whole packet, or a payload after headers).
//!
//! Lengths and checksums are computed unless given. `size a-b` makes one packet per size
//! (the payload grows or shrinks; at most [`MAX_SIZES`] sizes), replayed in turn.
//! What VPP can do and this cannot (ranges of addresses outside IPv4/UDP, `GRE` payload
//! types, MPLS, options) is refused with the token.

use sluice_cli::{Args, CliError};
use sluice_wire::checksum;
use std::net::{IpAddr, Ipv6Addr};

/// Most distinct sizes one stream may cycle through.
pub const MAX_SIZES: usize = 4096;

#[derive(Clone, Debug)]
enum Layer {
    Eth {
        src: [u8; 6],
        dst: [u8; 6],
        vlan: Option<u16>,
        ty: u16,
    },
    Ip {
        src: IpAddr,
        dst: IpAddr,
        proto: u8,
        ttl: u8,
    },
    Udp {
        sport: u16,
        dport: u16,
        length: Option<u16>,
        checksum: Option<u16>,
    },
    Tcp {
        sport: u16,
        dport: u16,
        flags: u8,
        window: u16,
        seq: u32,
        checksum: Option<u16>,
    },
    Icmp {
        ty: u8,
        id: u16,
        seq: u16,
        checksum: Option<u16>,
    },
    Raw(Vec<u8>),
}

/// A parsed data block.
#[derive(Clone, Debug)]
pub struct Template {
    layers: Vec<Layer>,
    /// Payload bytes (incrementing pattern) after the headers.
    pub payload: usize,
}

fn mac(a: &mut Args) -> Result<[u8; 6], CliError> {
    let w = a.word("MAC address")?;
    super::stream::parse_mac(&w).ok_or_else(|| CliError::new(format!("bad MAC address `{w}'")))
}

fn arrow(a: &mut Args, after: &str) -> Result<(), CliError> {
    if a.keyword("->") {
        Ok(())
    } else {
        Err(CliError::new(format!("expected `->' after {after}")))
    }
}

fn u16_arg(a: &mut Args, what: &str) -> Result<u16, CliError> {
    let w = a.word(what)?;
    parse_num(&w)
        .and_then(|v| u16::try_from(v).ok())
        .ok_or_else(|| CliError::new(format!("bad {what} `{w}'")))
}

fn parse_num(w: &str) -> Option<u64> {
    match w.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => w.parse().ok(),
    }
}

fn hex(w: &str) -> Result<Vec<u8>, CliError> {
    let h = w.strip_prefix("0x").unwrap_or(w);
    if h.is_empty() || h.len() % 2 != 0 || !h.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(CliError::new(format!(
            "bad hex data `{}' (0x followed by pairs of hex digits)",
            sluice_cli::error::clip(w)
        )));
    }
    Ok((0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap_or(0))
        .collect())
}

fn ip_pair(a: &mut Args, proto: u8) -> Result<Layer, CliError> {
    let w = a.word("source address")?;
    let src: IpAddr = w
        .parse()
        .map_err(|_| CliError::new(format!("expected an IP address, got `{w}'")))?;
    arrow(a, "the source address")?;
    let w = a.word("destination address")?;
    let dst: IpAddr = w
        .parse()
        .map_err(|_| CliError::new(format!("expected an IP address, got `{w}'")))?;
    if src.is_ipv4() != dst.is_ipv4() {
        return Err(CliError::new(format!(
            "`{w}' is not of the source address's family"
        )));
    }
    if a.peek() == Some("-") {
        return Err(CliError::new(
            "address ranges are only supported in IPv4/UDP streams (UDP: a - b -> c)",
        ));
    }
    // ICMP: over IPv6 means ICMPv6.
    let proto = if proto == 1 && src.is_ipv6() {
        58
    } else {
        proto
    };
    Ok(Layer::Ip {
        src,
        dst,
        proto,
        ttl: 64,
    })
}

fn is_ip(w: Option<&str>) -> bool {
    w.is_some_and(|w| w.parse::<IpAddr>().is_ok())
}

/// Parses a `data { ... }` block.
pub fn parse(text: &str) -> Result<Template, CliError> {
    let mut a = Args::new(text);
    let mut t = Template {
        layers: Vec::new(),
        payload: 0,
    };
    while !a.is_empty() {
        let eth = if a.keyword("IP4:") {
            Some(0x0800)
        } else if a.keyword("IP6:") {
            Some(0x86dd)
        } else {
            None
        };
        if let Some(ty) = eth {
            let src = mac(&mut a)?;
            arrow(&mut a, "the source MAC")?;
            let dst = mac(&mut a)?;
            let vlan = if a.keyword("vlan") {
                Some(u16_arg(&mut a, "VLAN id")?)
            } else {
                None
            };
            t.layers.push(Layer::Eth { src, dst, vlan, ty });
        } else if a.keyword("UDP:") {
            if is_ip(a.peek()) {
                t.layers.push(ip_pair(&mut a, 17)?);
            } else {
                let sport = u16_arg(&mut a, "source port")?;
                arrow(&mut a, "the source port")?;
                let dport = u16_arg(&mut a, "destination port")?;
                t.layers.push(Layer::Udp {
                    sport,
                    dport,
                    length: None,
                    checksum: None,
                });
            }
        } else if a.keyword("TCP:") {
            if is_ip(a.peek()) {
                t.layers.push(ip_pair(&mut a, 6)?);
            } else {
                let sport = u16_arg(&mut a, "source port")?;
                arrow(&mut a, "the source port")?;
                let dport = u16_arg(&mut a, "destination port")?;
                t.layers.push(Layer::Tcp {
                    sport,
                    dport,
                    flags: 0,
                    window: 65535,
                    seq: 0,
                    checksum: None,
                });
            }
        } else if a.keyword("ICMP:") || a.keyword("ICMP6:") {
            t.layers.push(ip_pair(&mut a, 1)?);
        } else if a.keyword("GRE:") {
            t.layers.push(ip_pair(&mut a, 47)?);
            // VPP names the GRE payload type after the addresses.
            return Err(CliError::new(
                "GRE: headers are not supported by the packet generator; give the packet with `hex 0x...'",
            ));
        } else if a.keyword("ICMP") {
            let w = a.word("echo_request|echo_reply")?;
            let v6 = matches!(t.layers.last(), Some(Layer::Ip { proto: 58, .. }));
            let ty = match (w.as_str(), v6) {
                ("echo_request", false) => 8,
                ("echo_reply", false) => 0,
                ("echo_request", true) => 128,
                ("echo_reply", true) => 129,
                _ => {
                    return Err(CliError::new(format!(
                        "unknown ICMP type `{w}' (echo_request, echo_reply)"
                    )))
                }
            };
            t.layers.push(Layer::Icmp {
                ty,
                id: 0,
                seq: 0,
                checksum: None,
            });
        } else if a.keyword("ttl") {
            let v = u16_arg(&mut a, "ttl")?;
            match t
                .layers
                .iter_mut()
                .rev()
                .find(|l| matches!(l, Layer::Ip { .. }))
            {
                Some(Layer::Ip { ttl, .. }) => *ttl = v.min(255) as u8,
                _ => return Err(CliError::new("`ttl' must follow an IP header line")),
            }
        } else if a.keyword("length") {
            let v = u16_arg(&mut a, "length")?;
            match t.layers.last_mut() {
                Some(Layer::Udp { length, .. }) => *length = Some(v),
                _ => {
                    return Err(CliError::new(
                        "`length' must follow a `UDP: <port> -> <port>' line",
                    ))
                }
            }
        } else if a.keyword("checksum") {
            let v = u16_arg(&mut a, "checksum")?;
            match t.layers.last_mut() {
                Some(Layer::Udp { checksum, .. })
                | Some(Layer::Tcp { checksum, .. })
                | Some(Layer::Icmp { checksum, .. }) => *checksum = Some(v),
                _ => {
                    return Err(CliError::new(
                        "`checksum' must follow a UDP, TCP or ICMP header line",
                    ))
                }
            }
        } else if let Some(key) = ["id", "seq", "window"]
            .into_iter()
            .find(|k| a.peek() == Some(*k))
        {
            a.word(key)?;
            let w = a.word(key)?;
            let v = parse_num(&w).ok_or_else(|| CliError::new(format!("bad {key} `{w}'")))?;
            match (t.layers.last_mut(), key) {
                (Some(Layer::Icmp { id, .. }), "id") => *id = v as u16,
                (Some(Layer::Icmp { seq, .. }), "seq") => *seq = v as u16,
                (Some(Layer::Tcp { seq, .. }), "seq") => *seq = v as u32,
                (Some(Layer::Tcp { window, .. }), "window") => *window = v as u16,
                _ => return Err(CliError::new(format!("`{key}' does not apply here"))),
            }
        } else if let Some(f) = tcp_flag(a.peek()) {
            a.word("flag")?;
            match t.layers.last_mut() {
                Some(Layer::Tcp { flags, .. }) => *flags |= f,
                _ => {
                    return Err(CliError::new(
                        "TCP flags must follow a `TCP: <port> -> <port>' line",
                    ))
                }
            }
        } else if a.keyword("incrementing") || a.keyword("fixed") {
            t.payload = a.u32("payload bytes")? as usize;
        } else if a.keyword("hex") {
            let w = a.word("hex data")?;
            t.layers.push(Layer::Raw(hex(&w)?));
        } else {
            a.finish()?;
        }
    }
    if t.layers.is_empty() {
        return Err(CliError::new("data { } has no header line"));
    }
    Ok(t)
}

fn tcp_flag(w: Option<&str>) -> Option<u8> {
    Some(match w? {
        "FIN" => 0x01,
        "SYN" => 0x02,
        "RST" => 0x04,
        "PSH" => 0x08,
        "ACK" => 0x10,
        "URG" => 0x20,
        _ => return None,
    })
}

impl Template {
    /// Length of the packet without payload.
    pub fn header_len(&self) -> usize {
        self.layers.iter().map(layer_len).sum()
    }

    /// Builds the packet of `size` bytes (None: headers + the payload given).
    pub fn build(&self, size: Option<usize>) -> Vec<u8> {
        let hl = self.header_len();
        let total = size.unwrap_or(hl + self.payload).max(hl);
        let mut p = vec![0u8; total];
        for (i, b) in p[hl..].iter_mut().enumerate() {
            *b = i as u8;
        }
        // Offsets of each layer.
        let mut offs = Vec::with_capacity(self.layers.len());
        let mut o = 0;
        for l in &self.layers {
            offs.push(o);
            o += layer_len(l);
        }
        // Inner layers first: checksums cover what follows.
        for k in (0..self.layers.len()).rev() {
            let off = offs[k];
            let ip = self.layers[..k].iter().rev().find_map(|l| match l {
                Layer::Ip { src, dst, .. } => Some((*src, *dst)),
                _ => None,
            });
            write_layer(&self.layers[k], &mut p, off, ip);
        }
        p
    }
}

fn layer_len(l: &Layer) -> usize {
    match l {
        Layer::Eth { vlan, .. } => 14 + if vlan.is_some() { 4 } else { 0 },
        Layer::Ip { src, .. } => {
            if src.is_ipv4() {
                20
            } else {
                40
            }
        }
        Layer::Udp { .. } => 8,
        Layer::Tcp { .. } => 20,
        Layer::Icmp { .. } => 8,
        Layer::Raw(b) => b.len(),
    }
}

/// The transport checksum of `seg` under an IP pseudo-header.
fn l4_sum(ip: Option<(IpAddr, IpAddr)>, proto: u8, seg: &[u8]) -> u16 {
    let len = seg.len();
    let pseudo = match ip {
        Some((IpAddr::V4(s), IpAddr::V4(d))) => checksum::pseudo_header_v4(s, d, proto, len as u16),
        Some((IpAddr::V6(s), IpAddr::V6(d))) => {
            let mut ph = Vec::with_capacity(40);
            ph.extend_from_slice(&s.octets());
            ph.extend_from_slice(&d.octets());
            ph.extend_from_slice(&(len as u32).to_be_bytes());
            ph.extend_from_slice(&[0, 0, 0, proto]);
            checksum::sum(&ph)
        }
        _ => 0,
    };
    !checksum::combine(pseudo, checksum::sum(seg))
}

fn write_layer(l: &Layer, p: &mut [u8], off: usize, ip: Option<(IpAddr, IpAddr)>) {
    let total = p.len();
    match l {
        Layer::Eth { src, dst, vlan, ty } => {
            p[off..off + 6].copy_from_slice(dst);
            p[off + 6..off + 12].copy_from_slice(src);
            let mut o = off + 12;
            if let Some(v) = vlan {
                p[o..o + 2].copy_from_slice(&0x8100u16.to_be_bytes());
                p[o + 2..o + 4].copy_from_slice(&(v & 0x0fff).to_be_bytes());
                o += 4;
            }
            p[o..o + 2].copy_from_slice(&ty.to_be_bytes());
        }
        Layer::Ip {
            src: IpAddr::V4(s),
            dst: IpAddr::V4(d),
            proto,
            ttl,
        } => {
            let h = &mut p[off..off + 20];
            h[0] = 0x45;
            h[2..4].copy_from_slice(&((total - off).min(65535) as u16).to_be_bytes());
            h[8] = *ttl;
            h[9] = *proto;
            h[12..16].copy_from_slice(&s.octets());
            h[16..20].copy_from_slice(&d.octets());
            let c = checksum::internet_checksum(h);
            h[10..12].copy_from_slice(&c.to_be_bytes());
        }
        Layer::Ip {
            src,
            dst,
            proto,
            ttl,
            ..
        } => {
            let (s, d) = match (src, dst) {
                (IpAddr::V6(s), IpAddr::V6(d)) => (*s, *d),
                _ => (Ipv6Addr::UNSPECIFIED, Ipv6Addr::UNSPECIFIED),
            };
            let h = &mut p[off..off + 40];
            h[0] = 0x60;
            h[4..6].copy_from_slice(&((total - off - 40).min(65535) as u16).to_be_bytes());
            h[6] = *proto;
            h[7] = *ttl;
            h[8..24].copy_from_slice(&s.octets());
            h[24..40].copy_from_slice(&d.octets());
        }
        Layer::Udp {
            sport,
            dport,
            length,
            checksum: ck,
        } => {
            p[off..off + 2].copy_from_slice(&sport.to_be_bytes());
            p[off + 2..off + 4].copy_from_slice(&dport.to_be_bytes());
            let len = length.unwrap_or((total - off).min(65535) as u16);
            p[off + 4..off + 6].copy_from_slice(&len.to_be_bytes());
            let c = match ck {
                Some(c) => *c,
                None => match l4_sum(ip, 17, &p[off..]) {
                    0 => 0xffff,
                    c => c,
                },
            };
            p[off + 6..off + 8].copy_from_slice(&c.to_be_bytes());
        }
        Layer::Tcp {
            sport,
            dport,
            flags,
            window,
            seq,
            checksum: ck,
        } => {
            p[off..off + 2].copy_from_slice(&sport.to_be_bytes());
            p[off + 2..off + 4].copy_from_slice(&dport.to_be_bytes());
            p[off + 4..off + 8].copy_from_slice(&seq.to_be_bytes());
            p[off + 12] = 5 << 4;
            p[off + 13] = *flags;
            p[off + 14..off + 16].copy_from_slice(&window.to_be_bytes());
            let c = ck.unwrap_or_else(|| l4_sum(ip, 6, &p[off..]));
            p[off + 16..off + 18].copy_from_slice(&c.to_be_bytes());
        }
        Layer::Icmp {
            ty,
            id,
            seq,
            checksum: ck,
        } => {
            p[off] = *ty;
            p[off + 4..off + 6].copy_from_slice(&id.to_be_bytes());
            p[off + 6..off + 8].copy_from_slice(&seq.to_be_bytes());
            let c = ck.unwrap_or_else(|| {
                if *ty >= 128 {
                    l4_sum(ip, 58, &p[off..])
                } else {
                    checksum::internet_checksum(&p[off..])
                }
            });
            p[off + 2..off + 4].copy_from_slice(&c.to_be_bytes());
        }
        Layer::Raw(b) => p[off..off + b.len()].copy_from_slice(b),
    }
}

/// The packets of a stream: one per size in `size` (or one of headers + payload).
pub fn packets(t: &Template, size: Option<(u32, u32)>) -> Result<Vec<Vec<u8>>, CliError> {
    let hl = t.header_len();
    match size {
        None => Ok(vec![t.build(None)]),
        Some((lo, hi)) => {
            if (lo as usize) < hl {
                return Err(CliError::new(format!(
                    "size {lo} is smaller than the headers ({hl} bytes)"
                )));
            }
            let n = (hi - lo) as usize + 1;
            if n > MAX_SIZES {
                return Err(CliError::new(format!(
                    "size {lo}-{hi}: at most {MAX_SIZES} sizes for this kind of stream"
                )));
            }
            Ok((lo..=hi).map(|s| t.build(Some(s as usize))).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_wire::checksum::internet_checksum;
    use std::net::Ipv4Addr;

    fn v4(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[test]
    fn icmp_echo_request_over_ipv4() {
        let t = parse("ICMP: 1.2.3.4 -> 5.6.7.8\n ICMP echo_request\n incrementing 100").unwrap();
        let p = t.build(None);
        assert_eq!(p.len(), 20 + 8 + 100);
        assert_eq!(p[9], 1);
        assert_eq!(&p[12..16], &v4("1.2.3.4").octets());
        assert_eq!(internet_checksum(&p[..20]), 0);
        assert_eq!(p[20], 8);
        assert_eq!(internet_checksum(&p[20..]), 0);
        let sized = packets(&t, Some((64, 64))).unwrap();
        assert_eq!(sized[0].len(), 64);
        assert_eq!(internet_checksum(&sized[0][20..]), 0);
    }

    #[test]
    fn ethernet_ipv6_icmp6_and_udp_with_explicit_fields() {
        let t = parse("IP6: 1.2.3 -> 4.5.6\nICMP: 3002::2 -> 3001::2\nICMP echo_request").unwrap();
        let p = t.build(None);
        assert_eq!(&p[12..14], &[0x86, 0xdd]);
        assert_eq!(p[14 + 6], 58);
        assert_eq!(p[54], 128);
        assert_eq!(
            l4_sum(
                Some(("3002::2".parse().unwrap(), "3001::2".parse().unwrap())),
                58,
                &p[54..]
            ),
            0
        );
        let t = parse("UDP: 192.168.1.2 -> 192.168.2.2\nUDP: 4321 -> 1234\n length 128 checksum 0 incrementing 1").unwrap();
        let p = t.build(None);
        assert_eq!(&p[24..26], &128u16.to_be_bytes());
        assert_eq!(&p[26..28], &[0, 0]);
        assert_eq!(p.len(), 29);
    }

    #[test]
    fn tcp_flags_and_hex() {
        let t = parse("TCP: 192.168.1.2 -> 192.168.1.1\nTCP: 32415 -> 80\nSYN\nincrementing 100")
            .unwrap();
        let p = t.build(None);
        assert_eq!(p[20 + 13], 0x02);
        assert_eq!(
            l4_sum(
                Some((v4("192.168.1.2").into(), v4("192.168.1.1").into())),
                6,
                &p[20..]
            ),
            0
        );
        let t = parse("hex 0x00010203040500020406080a0800").unwrap();
        assert_eq!(t.build(None), hex("00010203040500020406080a0800").unwrap());
        assert_eq!(packets(&t, Some((20, 21))).unwrap()[1].len(), 21);
    }

    #[test]
    fn errors_name_the_token() {
        assert_eq!(
            parse("ICMP bogus").unwrap_err().msg,
            "unknown ICMP type `bogus' (echo_request, echo_reply)"
        );
        assert_eq!(
            parse("ICMP: bogus").unwrap_err().msg,
            "expected an IP address, got `bogus'"
        );
        assert!(parse("ICMP: 1.1.1.1 -> 2.2.2.2 ICMP bogus")
            .unwrap_err()
            .msg
            .contains("`bogus'"));
        assert!(parse("hex 0xabc").unwrap_err().msg.contains("`0xabc'"));
        assert!(parse("frob").unwrap_err().msg.contains("`frob'"));
        assert!(parse("ICMP: 1.1.1.1 -> ::2").is_err());
        assert!(parse("length 5").is_err());
        assert!(parse("").is_err());
    }
}
