//! Packet-generator stream definitions: pcap replay and synthetic IPv4/UDP streams whose
//! addresses, ports and sizes increment per packet, parsed from VPP's
//! `packet-generator new { ... }` syntax.

use sluice_cli::{Args, CliError};
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::Arc;

/// An inclusive range of values that increments per packet (wrapping to the start).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Range {
    /// First value.
    pub start: u32,
    /// Last value.
    pub end: u32,
}

impl Range {
    /// A single value.
    pub fn fixed(v: u32) -> Self {
        Range { start: v, end: v }
    }
    /// Number of values.
    pub fn count(&self) -> u64 {
        (self.end - self.start) as u64 + 1
    }
    /// Value for packet `seq`.
    #[inline(always)]
    pub fn at(&self, seq: u64) -> u32 {
        if self.start == self.end {
            self.start
        } else {
            self.start + (seq % self.count()) as u32
        }
    }
}

/// A synthetic IPv4/UDP stream template.
#[derive(Clone, Debug, PartialEq)]
pub struct Synth {
    /// Ethernet header (dst, src) when the stream starts at L2.
    pub eth: Option<([u8; 6], [u8; 6])>,
    /// Source addresses.
    pub src: Range,
    /// Destination addresses.
    pub dst: Range,
    /// UDP source ports.
    pub sport: Range,
    /// UDP destination ports.
    pub dport: Range,
    /// IPv4 TTL.
    pub ttl: u8,
    /// Frame sizes (bytes, including the Ethernet header when present).
    pub size: Range,
    /// Payload bytes (incrementing pattern) when no size is given.
    pub payload: usize,
    /// Template of the largest packet, payload filled.
    pub template: Vec<u8>,
}

const ETH: usize = 14;
const IP: usize = 20;
const UDP: usize = 8;

impl Synth {
    fn l3(&self) -> usize {
        if self.eth.is_some() {
            ETH
        } else {
            0
        }
    }

    /// Smallest packet this stream can produce (headers only).
    pub fn min_len(&self) -> usize {
        self.l3() + IP + UDP
    }

    /// Builds the template for the largest size.
    pub fn build_template(&mut self) {
        let max = self.size.end as usize;
        let mut t = vec![0u8; max];
        let l3 = self.l3();
        if let Some((d, s)) = self.eth {
            t[0..6].copy_from_slice(&d);
            t[6..12].copy_from_slice(&s);
            t[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        }
        t[l3] = 0x45;
        t[l3 + 8] = self.ttl;
        t[l3 + 9] = 17;
        for (i, b) in t[l3 + IP + UDP..].iter_mut().enumerate() {
            *b = i as u8;
        }
        self.template = t;
    }

    /// Writes packet `seq` into `out` (at least `size.end` bytes) and returns its length.
    #[inline(always)]
    pub fn fill(&self, seq: u64, out: &mut [u8]) -> usize {
        let len = self.size.at(seq) as usize;
        let fields = Fields {
            src: self.src.at(seq),
            dst: self.dst.at(seq),
            sport: self.sport.at(seq) as u16,
            dport: self.dport.at(seq) as u16,
        };
        self.fill_with(len, len, fields, out);
        len
    }

    /// Writes the first `head` bytes (at most the template's length) of a `len`-byte packet
    /// with the given addresses and ports into `out`: the template, then the IPv4 total
    /// length, addresses and header checksum and the UDP ports and length (checksum 0). A
    /// packet longer than `head` continues with `template[head..len]` (in a buffer chain).
    #[inline(always)]
    pub fn fill_with(&self, len: usize, head: usize, f: Fields, out: &mut [u8]) {
        out[..head].copy_from_slice(&self.template[..head]);
        let l3 = self.l3();
        let ip = &mut out[l3..head];
        ip[2..4].copy_from_slice(&((len - l3) as u16).to_be_bytes());
        ip[12..16].copy_from_slice(&f.src.to_be_bytes());
        ip[16..20].copy_from_slice(&f.dst.to_be_bytes());
        ip[10..12].copy_from_slice(&[0, 0]);
        let c = sluice_wire::checksum::internet_checksum(&ip[..IP]);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        let udp = &mut ip[IP..];
        udp[0..2].copy_from_slice(&f.sport.to_be_bytes());
        udp[2..4].copy_from_slice(&f.dport.to_be_bytes());
        udp[4..6].copy_from_slice(&((len - l3 - IP) as u16).to_be_bytes());
        // UDP checksum 0: allowed for IPv4 (RFC 768).
    }
}

/// The per-packet header fields of a synthetic packet.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Fields {
    /// IPv4 source address.
    pub src: u32,
    /// IPv4 destination address.
    pub dst: u32,
    /// UDP source port.
    pub sport: u16,
    /// UDP destination port.
    pub dport: u16,
}

/// Releases packets at a fixed rate measured against the TSC: at `t` seconds after the start,
/// `floor(t * rate) + 1` packets may have left (the first one at once). With
/// [`Pacer::allowed`] a sender that falls behind catches up on all it owes, so the long-run
/// rate is exact; with [`Pacer::allowed_bounded`] it catches up on at most a cap and skips
/// the rest.
#[derive(Copy, Clone, Debug)]
pub struct Pacer {
    start_tsc: u64,
    per_tick: f64,
}

impl Pacer {
    /// A pacer for `rate` packets per second on a `hz` TSC, starting at `start_tsc`.
    pub fn new(rate: f64, hz: f64, start_tsc: u64) -> Pacer {
        Pacer {
            start_tsc,
            per_tick: rate / hz,
        }
    }

    /// How many more packets may leave at TSC `now` when `sent` already have.
    #[inline(always)]
    pub fn allowed(&self, now: u64, sent: u64) -> u64 {
        let due = (now.wrapping_sub(self.start_tsc) as f64 * self.per_tick) as u64 + 1;
        due.saturating_sub(sent)
    }

    /// [`Pacer::allowed`] with a bounded catch-up: a sender that fell more than `cap`
    /// packets behind (it lost its core) is owed `cap`, and the schedule moves on so that
    /// what was due during the stall is never sent late. The offered rate then falls short
    /// instead of the sender bursting at full speed until it has caught up, which a
    /// receiver sized for the configured rate cannot absorb. VPP's pg forgets all past one
    /// frame; Sluice's pg allows two (`cap`).
    #[inline]
    pub fn allowed_bounded(&mut self, now: u64, sent: u64, cap: u64) -> u64 {
        let owed = self.allowed(now, sent);
        self.bound(now, sent, owed, cap)
    }

    /// The bounded catch-up of [`Pacer::allowed_bounded`] for a sender that has already
    /// asked [`Pacer::allowed`] (`owed`, at the same `now` and `sent`): `owed` if at most
    /// `cap`, else `cap` (but for the rounding of one tick) with the schedule moved on.
    #[inline]
    pub fn bound(&mut self, now: u64, sent: u64, owed: u64, cap: u64) -> u64 {
        // At least one: with 0 the schedule would start after `now`.
        let cap = cap.max(1);
        if owed <= cap {
            return owed;
        }
        // Start later by the time the excess took, rounded up: `allowed` is then at most
        // `cap`, and exactly `cap` but for the rounding of one tick.
        self.start_tsc = self
            .start_tsc
            .wrapping_add(((owed - cap) as f64 / self.per_tick).ceil() as u64);
        self.allowed(now, sent).min(cap)
    }

    /// The TSC the schedule counts from (moved by [`Pacer::allowed_bounded`]).
    pub fn start_tsc(&self) -> u64 {
        self.start_tsc
    }
}

/// Where a stream's packets come from.
#[derive(Clone, Debug)]
pub enum Source {
    /// Packets read from a pcap file, replayed in order.
    Pcap(Arc<Vec<Vec<u8>>>),
    /// Synthetic IPv4/UDP.
    Synth(Arc<Synth>),
}

/// A stream definition as configured by the CLI.
#[derive(Clone, Debug)]
pub struct StreamDef {
    /// Name.
    pub name: String,
    /// pg interface the packets appear to arrive on.
    pub interface: Option<String>,
    /// First node.
    pub node: Option<String>,
    /// Packets to send (None: pcap file length, or unlimited for synthetic streams).
    pub limit: Option<u64>,
    /// Packets per second (None: as fast as possible).
    pub rate: Option<f64>,
    /// Largest vector per poll.
    pub maxframe: usize,
    /// Worker the packets are handed off to.
    pub worker: Option<usize>,
    /// Packet source.
    pub source: Source,
    /// Interface the packets are sent on when they start at an output node (`tx-interface
    /// <if>`, or the `<if>` of `node <if>-output`).
    pub tx_interface: Option<String>,
}

/// Reads every packet of a pcap file.
pub fn read_pcap(path: &Path) -> Result<Vec<Vec<u8>>, String> {
    let f =
        std::fs::File::open(path).map_err(|e| format!("cannot open `{}': {e}", path.display()))?;
    let mut r = pcap_file::pcap::PcapReader::new(std::io::BufReader::new(f))
        .map_err(|e| format!("`{}' is not a pcap file: {e}", path.display()))?;
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.map_err(|e| format!("`{}': bad pcap record: {e}", path.display()))?;
        out.push(p.data.into_owned());
    }
    Ok(out)
}

pub(crate) fn parse_mac(s: &str) -> Option<[u8; 6]> {
    // aa:bb:cc:dd:ee:ff, or VPP's dotted form of three 16-bit groups (1.2.3, 0001.0002.0003).
    let mut m = [0u8; 6];
    if s.contains(':') {
        let parts: Vec<&str> = s.split(':').collect();
        if parts.len() != 6 {
            return None;
        }
        for (i, p) in parts.iter().enumerate() {
            m[i] = u8::from_str_radix(p, 16).ok()?;
        }
        return Some(m);
    }
    let parts: Vec<&str> = s.split('.').collect();
    if parts.len() != 3 {
        return None;
    }
    for (i, p) in parts.iter().enumerate() {
        let v = u16::from_str_radix(p, 16).ok()?;
        m[2 * i..2 * i + 2].copy_from_slice(&v.to_be_bytes());
    }
    Some(m)
}

fn parse_ip_range(a: &mut Args) -> Result<Range, CliError> {
    let w = a.word("IPv4 address")?;
    let start: Ipv4Addr = w
        .parse()
        .map_err(|_| CliError::new(format!("expected IPv4 address, got `{w}'")))?;
    let mut r = Range::fixed(u32::from(start));
    if a.keyword("-") {
        let w = a.word("IPv4 address")?;
        let end: Ipv4Addr = w
            .parse()
            .map_err(|_| CliError::new(format!("expected IPv4 address, got `{w}'")))?;
        if u32::from(end) < r.start {
            return Err(CliError::new(format!(
                "address range ends before it starts at `{w}'"
            )));
        }
        r.end = u32::from(end);
    }
    Ok(r)
}

fn parse_port_range(a: &mut Args) -> Result<Range, CliError> {
    let p = a.u32("port")?;
    let mut r = Range::fixed(p);
    if a.keyword("-") {
        r.end = a.u32("port")?;
    }
    if r.start > 65535 || r.end > 65535 || r.end < r.start {
        return Err(CliError::new(format!(
            "bad port range {}-{}",
            r.start, r.end
        )));
    }
    Ok(r)
}

/// Parses a `data { ... }` block: `IP4: <mac> -> <mac>`, `UDP: <ip4>[ - <ip4>] -> <ip4>[ - <ip4>]`,
/// `UDP: <port>[ - <port>] -> <port>[ - <port>]`, `ttl <n>`, `incrementing <n>`.
pub fn parse_data(text: &str) -> Result<Synth, CliError> {
    let mut a = Args::new(text);
    let mut s = Synth {
        eth: None,
        src: Range::fixed(0x0a00_0001),
        dst: Range::fixed(0x0a00_0101),
        sport: Range::fixed(1234),
        dport: Range::fixed(5678),
        ttl: 64,
        size: Range::fixed(0),
        payload: 18,
        template: Vec::new(),
    };
    let mut udp_lines = 0;
    while !a.is_empty() {
        if a.keyword("IP4:") {
            // VPP order: "IP4: <src-mac> -> <dst-mac>".
            let sm = a.word("MAC address")?;
            let src =
                parse_mac(&sm).ok_or_else(|| CliError::new(format!("bad MAC address `{sm}'")))?;
            if !a.keyword("->") {
                return Err(CliError::new("expected `->' after source MAC"));
            }
            let dm = a.word("MAC address")?;
            let dst =
                parse_mac(&dm).ok_or_else(|| CliError::new(format!("bad MAC address `{dm}'")))?;
            s.eth = Some((dst, src));
        } else if a.keyword("UDP:") {
            if udp_lines == 0 {
                s.src = parse_ip_range(&mut a)?;
                if !a.keyword("->") {
                    return Err(CliError::new("expected `->' after source address"));
                }
                s.dst = parse_ip_range(&mut a)?;
            } else {
                s.sport = parse_port_range(&mut a)?;
                if !a.keyword("->") {
                    return Err(CliError::new("expected `->' after source port"));
                }
                s.dport = parse_port_range(&mut a)?;
            }
            udp_lines += 1;
        } else if a.keyword("ttl") {
            s.ttl = a.u32("ttl")?.min(255) as u8;
        } else if a.keyword("incrementing") || a.keyword("fixed") {
            s.payload = a.u32("payload bytes")? as usize;
        } else {
            a.finish()?;
        }
    }
    Ok(s)
}

/// Parses the body of `packet-generator new { ... }` (or the same keywords on one line).
pub fn parse_new(a: &mut Args, max_size: usize) -> Result<StreamDef, CliError> {
    let mut name = None;
    let mut interface = None;
    let mut node = None;
    let mut limit = None;
    let mut rate = None;
    let mut maxframe = crate::pg::FRAME;
    let mut worker = None;
    let mut size: Option<(u32, u32)> = None;
    let mut synth: Option<Synth> = None;
    let mut built: Option<super::build::Template> = None;
    let mut pcap: Option<String> = None;
    let mut tx_interface = None;
    while !a.is_empty() {
        if a.keyword("name") {
            name = Some(a.word("stream name")?);
        } else if a.keyword("limit") {
            // As VPP: `limit 0` and `limit -1` mean no limit.
            limit = Some(if a.keyword("-1") {
                u64::MAX
            } else {
                match a.u64("limit")? {
                    0 => u64::MAX,
                    n => n,
                }
            });
        } else if a.keyword("tx-interface") {
            tx_interface = Some(a.word("interface")?);
        } else if a.keyword("rate") {
            let r = a.f64("rate")?;
            if r <= 0.0 || !r.is_finite() {
                return Err(CliError::new(format!("bad rate `{r}'")));
            }
            rate = Some(r);
        } else if a.keyword("size") {
            size = Some(a.range_u32("size")?);
        } else if a.keyword("node") {
            node = Some(a.word("node name")?);
        } else if a.keyword("interface") || a.keyword("source") {
            interface = Some(a.word("interface")?);
        } else if a.keyword("maxframe") {
            maxframe = (a.u32("maxframe")? as usize).clamp(1, crate::pg::FRAME);
        } else if a.keyword("worker") {
            worker = Some(a.u32("worker")? as usize);
        } else if a.keyword("pcap") {
            pcap = Some(a.word("pcap file")?);
        } else if a.keyword("data") {
            let block = a.word("data { ... }")?;
            // IPv4/UDP with incrementing fields is generated per packet; anything else
            // (IP6:, ICMP:, TCP:, hex, length, checksum, ...) is built once per size.
            match parse_data(&block) {
                Ok(s) => synth = Some(s),
                Err(_) => built = Some(super::build::parse(&block)?),
            }
        } else {
            a.finish()?;
        }
    }
    let name = name.ok_or_else(|| CliError::new("stream needs `name <name>'"))?;
    if let Some(t) = built {
        if pcap.is_some() {
            return Err(CliError::new(
                "give either `pcap <file>' or `data { ... }', not both",
            ));
        }
        let pkts = super::build::packets(&t, size)?;
        if let Some(big) = pkts.iter().map(|p| p.len()).max().filter(|&l| l > max_size) {
            return Err(CliError::new(format!(
                "size {big} is larger than a buffer ({max_size} bytes)"
            )));
        }
        return Ok(StreamDef {
            name,
            interface,
            node,
            limit: Some(limit.unwrap_or(u64::MAX)),
            rate,
            maxframe,
            worker,
            source: Source::Pcap(Arc::new(pkts)),
            tx_interface,
        });
    }
    let source = match (pcap, synth) {
        (Some(_), Some(_)) => {
            return Err(CliError::new(
                "give either `pcap <file>' or `data { ... }', not both",
            ))
        }
        (Some(p), None) => {
            let pkts = read_pcap(Path::new(&p)).map_err(CliError::new)?;
            if pkts.is_empty() {
                return Err(CliError::new(format!("pcap file `{p}' has no packets")));
            }
            Source::Pcap(Arc::new(pkts))
        }
        (None, Some(mut s)) => {
            let min = s.min_len() as u32;
            let (lo, hi) = size.unwrap_or((min + s.payload as u32, min + s.payload as u32));
            if lo < min {
                return Err(CliError::new(format!(
                    "size {lo} is smaller than the headers ({min} bytes)"
                )));
            }
            if hi as usize > max_size {
                return Err(CliError::new(format!(
                    "size {hi} is larger than a buffer ({max_size} bytes)"
                )));
            }
            s.size = Range { start: lo, end: hi };
            s.build_template();
            Source::Synth(Arc::new(s))
        }
        (None, None) => {
            return Err(CliError::new(
                "stream needs `data { ... }' or `pcap <file>'",
            ))
        }
    };
    Ok(StreamDef {
        tx_interface,
        name,
        interface,
        node,
        limit,
        rate,
        maxframe,
        worker,
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_pacer_never_releases_more_than_its_cap_after_a_stall() {
        // 16.2 Mpps on a 3 GHz TSC; the sender polls every 1 µs and sends all it may.
        let hz = 3e9;
        let mut p = Pacer::new(16.2e6, hz, 1_000);
        let (mut now, mut sent, mut most) = (1_000u64, 0u64, 0u64);
        let step = |p: &mut Pacer, now: u64, sent: &mut u64, most: &mut u64| {
            let n = p.allowed_bounded(now, *sent, 512);
            *most = (*most).max(n);
            *sent += n;
        };
        // Keeping up: exact, in bursts of the due packets only.
        for _ in 0..10_000 {
            now += 3_000;
            step(&mut p, now, &mut sent, &mut most);
        }
        let exact = (10_000.0 * 1e-6 * 16.2e6) as u64 + 1;
        assert!(sent.abs_diff(exact) <= 1, "{sent} vs {exact}");
        assert!(most <= 17, "{most}");
        // Stalls of 1 µs .. 10 ms (up to 162,000 packets due): the cap, never more.
        for stall_us in [1u64, 40, 100, 1_000, 10_000] {
            now += stall_us * 3_000;
            let n = p.allowed_bounded(now, sent, 512);
            assert!(n <= 512, "{n} after {stall_us} us");
            // More than the cap fell due: the cap (but for the rounding of one tick).
            if stall_us * 16 > 512 {
                assert!(n >= 511, "{n} after {stall_us} us");
            }
            sent += n;
            // Right after, only what falls due: no second burst.
            now += 3_000;
            let n = p.allowed_bounded(now, sent, 512);
            assert!(n <= 17, "{n} after the burst of a {stall_us} us stall");
            sent += n;
        }
        // And the rate goes on from there.
        let before = sent;
        for _ in 0..1_000 {
            now += 3_000;
            step(&mut p, now, &mut sent, &mut most);
        }
        assert!((sent - before).abs_diff(16_200) <= 1, "{}", sent - before);
        // The unbounded pacer would have released the whole backlog at once.
        let q = Pacer::new(16.2e6, hz, 1_000);
        assert!(q.allowed(now, sent) > 150_000);
        // A cap of 0 is taken as 1.
        let mut p = Pacer::new(1e6, 1e9, 0);
        assert_eq!(p.allowed_bounded(1_000_000_000, 0, 0), 1);
    }

    #[test]
    fn synthetic_packets_increment_and_checksum() {
        let mut s = parse_data(
            "IP4: 2.3.4 -> 5.6.7 UDP: 10.0.0.1 - 10.0.0.3 -> 10.1.0.1 UDP: 1000 - 1001 -> 53 incrementing 30",
        )
        .unwrap();
        s.size = Range { start: 64, end: 66 };
        s.build_template();
        let mut buf = [0u8; 128];
        let n0 = s.fill(0, &mut buf);
        assert_eq!(n0, 64);
        assert_eq!(&buf[0..6], &[0, 5, 0, 6, 0, 7], "dst MAC");
        assert_eq!(&buf[6..12], &[0, 2, 0, 3, 0, 4], "src MAC");
        assert_eq!(&buf[26..30], &[10, 0, 0, 1]);
        assert_eq!(
            u16::from_be_bytes([buf[16], buf[17]]),
            50,
            "ip total length"
        );
        assert_eq!(
            sluice_wire::checksum::internet_checksum(&buf[14..34]),
            0,
            "valid ip checksum"
        );
        assert_eq!(u16::from_be_bytes([buf[34], buf[35]]), 1000);
        let n1 = s.fill(1, &mut buf);
        assert_eq!(n1, 65);
        assert_eq!(&buf[26..30], &[10, 0, 0, 2]);
        assert_eq!(u16::from_be_bytes([buf[34], buf[35]]), 1001);
        assert_eq!(sluice_wire::checksum::internet_checksum(&buf[14..34]), 0);
        s.fill(3, &mut buf);
        assert_eq!(&buf[26..30], &[10, 0, 0, 1], "wraps");
    }

    #[test]
    fn data_errors_quote_the_token() {
        assert_eq!(
            parse_data("UDP: 10.0.0.300 -> 1.1.1.1").unwrap_err().msg,
            "expected IPv4 address, got `10.0.0.300'"
        );
        assert_eq!(
            parse_data("IP4: zz -> 1.2.3").unwrap_err().msg,
            "bad MAC address `zz'"
        );
        assert!(parse_data("bogus").unwrap_err().msg.contains("`bogus'"));
    }

    #[test]
    fn new_requires_name_and_source() {
        let mut a = Args::new("limit 10 node null-sink");
        assert!(parse_new(&mut a, 2048).unwrap_err().msg.contains("name"));
        let mut a = Args::new("name s limit 10");
        assert!(parse_new(&mut a, 2048).unwrap_err().msg.contains("data"));
        let mut a = Args::new("name s size 20-20 data { UDP: 1.1.1.1 -> 2.2.2.2 }");
        assert!(parse_new(&mut a, 2048).unwrap_err().msg.contains("smaller"));
    }
}
