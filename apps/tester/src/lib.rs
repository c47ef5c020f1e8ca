//! The traffic tester (like TRex or MoonGen on DPDK, built on Sluice itself): streams of
//! Ethernet/IPv4/UDP or Ethernet/IPv6/UDP frames sent at a paced rate out of any interface, each frame carrying a
//! signature (stream, sequence number, tx timestamp); frames received on interfaces put in
//! tester-rx mode are matched to their stream for loss, reordering, duplicates, latency
//! (log-linear histogram, merged over threads) and jitter. The contract with the RFC 2544
//! harness is the CLI below and `show tester json` (python/sluice_bench/tester.py reads it); the method, timestamp
//! points and measured accuracy are in `docs/benchmarking.md` ("The tester").
//!
//! CLI:
//! - `tester stream add name <s> interface <if> size <bytes> rate <pps> [duration <secs> |
//!   count <n>] dst-mac <mac> [src-mac <mac>] [ip6] src <ip>[-<ip>] dst <ip>[-<ip>]
//!   [sport <n>] [dport <n>] [flows <n>] [latency] [worker <n>]` (IPv4 or IPv6 addresses; an
//!   IPv6 range spans at most 2^32 addresses; IPv6 frames are at least 84 bytes)
//! - `tester stream del name <s>`
//! - `tester start [name <s>]`, `tester stop [name <s>]`, `tester clear`
//! - `set interface tester-rx <if> [disable]`
//! - `show tester [json]`
//!
//! Nodes: `tester-tx`, `tester-rx` (see [`node`]). Streams are sent by one thread each (the
//! main thread, or worker `n` with `worker <n>`); every thread receives.

pub mod frame6;
pub mod hist;
pub mod node;
pub mod seq;
pub mod sig;

use frame6::Ip6Frame;
use node::{DstWalk, RxStats, TesterRx, TesterTx, TxShared, TxStream, TxTemplate, RX, TX};
use sluice_cli::{Args, CliError, CommandTree};
use sluice_graph::{GraphBuilder, NodeIndex, Vlib};
use sluice_infra::clock::rdtsc;
use sluice_vnet::interface::Interfaces;
use sluice_vnet::pg::stream::{Range, Synth};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Smallest frame: Ethernet + IPv4 + UDP headers + signature (64 with FCS excluded).
pub const MIN_SIZE: usize = node::SIG_OFFSET + sig::LEN;
/// Largest frame.
pub const MAX_SIZE: usize = 9000;

/// A stream as the control plane knows it.
struct StreamCfg {
    name: String,
    id: u16,
    thread: usize,
    if_name: String,
    tx_if: u32,
    tpl: TxTemplate,
    shared: Arc<TxShared>,
}

/// Tester control-plane state (a `Vlib` extension).
#[derive(Default)]
pub struct TesterMain {
    streams: Vec<StreamCfg>,
    generation: u8,
}

/// The `tester` plugin.
pub struct TesterPlugin;

/// This plugin, for the daemon's plugin list (`sluice_plugins::all()`).
pub static PLUGIN: TesterPlugin = TesterPlugin;

impl sluice_vnet::plugin::Plugin for TesterPlugin {
    fn name(&self) -> &'static str {
        "tester"
    }
    fn version(&self) -> &'static str {
        env!("CARGO_PKG_VERSION")
    }
    fn description(&self) -> &'static str {
        "Traffic tester: paced streams with sequence, loss and latency (tester ...)"
    }
    fn register(
        &self,
        r: &mut sluice_vnet::plugin::Registrar,
    ) -> Result<(), sluice_vnet::plugin::RegisterError> {
        register(&mut r.graph);
        register_cli(&mut r.cli);
        Ok(())
    }
}

/// Registers the tester nodes.
pub fn register(b: &mut GraphBuilder) {
    node::register(b);
}

/// Registers the tester CLI.
pub fn register_cli(t: &mut CommandTree<Vlib>) {
    t.add(
        "tester stream add",
        "tester stream add name <s> interface <if> size <bytes> rate <pps> [duration <secs> | count <n>] dst-mac <mac> [src-mac <mac>] [ip6] src <ip>[-<ip>] dst <ip>[-<ip>] [sport <n>] [dport <n>] [flows <n>] [latency] [worker <n>]",
        cli_stream_add,
    );
    t.add(
        "tester stream del",
        "tester stream del name <s>",
        cli_stream_del,
    );
    t.add(
        "tester start",
        "tester start [name <s>] — (re)start streams: sequence from 0, statistics zeroed",
        cli_start,
    );
    t.add(
        "tester stop",
        "tester stop [name <s>] — stop sending (receive keeps counting)",
        cli_stop,
    );
    t.add(
        "tester clear",
        "tester clear — zero every stream's statistics",
        cli_clear,
    );
    t.add(
        "set interface tester-rx",
        "set interface tester-rx <interface> [disable] — every received frame goes to tester-rx",
        cli_set_rx,
    );
    t.add(
        "show tester",
        "show tester [json] — per-stream tx, rx, loss, latency, jitter",
        cli_show,
    );
}

fn node_index(vm: &Vlib, name: &str) -> Result<NodeIndex, CliError> {
    vm.registry
        .find(name)
        .ok_or_else(|| CliError::new(format!("node `{name}' missing")))
}

/// An address range of a stream: IPv4 (absolute), or IPv6 as a base and a range of
/// offsets (0..n-1, n ≤ 2^32) so flows and the destination walk work the same for both.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum AddrRange {
    V4(Range),
    V6(u128, Range),
}

impl AddrRange {
    fn range(&self) -> Range {
        match *self {
            AddrRange::V4(r) | AddrRange::V6(_, r) => r,
        }
    }
    fn is_v6(&self) -> bool {
        matches!(self, AddrRange::V6(..))
    }
}

fn parse_ip(w: &str) -> Result<u128, CliError> {
    if w.contains(':') {
        w.parse::<Ipv6Addr>()
            .map(u128::from)
            .map_err(|_| CliError::new(format!("expected IPv6 address, got `{w}'")))
    } else {
        w.parse::<Ipv4Addr>()
            .map(|a| u32::from(a) as u128)
            .map_err(|_| CliError::new(format!("expected IPv4 address, got `{w}'")))
    }
}

/// `<ip>`, `<ip>-<ip>` or `<ip> - <ip>`, IPv4 or IPv6 (`what`: "source", "destination").
fn parse_ip_range(a: &mut Args, what: &str) -> Result<AddrRange, CliError> {
    let w = a.word(&format!("{what} IP address"))?;
    let (lo_w, hi_w) = match w.split_once('-') {
        Some((l, h)) => (l.to_string(), Some(h.to_string())),
        None if a.keyword("-") => (w.clone(), Some(a.word("IP address")?)),
        None => (w.clone(), None),
    };
    let v6 = lo_w.contains(':');
    let lo = parse_ip(&lo_w)?;
    let hi = match &hi_w {
        Some(h) => {
            if h.contains(':') != v6 {
                return Err(CliError::new(format!(
                    "address range mixes IPv4 and IPv6 at `{h}'"
                )));
            }
            let v = parse_ip(h)?;
            if v < lo {
                return Err(CliError::new(format!(
                    "address range ends before it starts at `{h}'"
                )));
            }
            if v - lo > u32::MAX as u128 {
                return Err(CliError::new(format!(
                    "address range spans more than 2^32 addresses at `{h}'"
                )));
            }
            v
        }
        None => lo,
    };
    Ok(if v6 {
        AddrRange::V6(
            lo,
            Range {
                start: 0,
                end: (hi - lo) as u32,
            },
        )
    } else {
        AddrRange::V4(Range {
            start: lo as u32,
            end: hi as u32,
        })
    })
}

fn parse_port(a: &mut Args, what: &str) -> Result<u16, CliError> {
    let save = a.peek().unwrap_or_default().to_string();
    let v = a.u32(what)?;
    u16::try_from(v).map_err(|_| CliError::new(format!("expected {what}, got `{save}'")))
}

fn mac_arg(a: &mut Args) -> Result<[u8; 6], CliError> {
    sluice_vnet::devices::parse_mac(&a.word("MAC address")?)
}

fn cli_stream_add(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let (mut name, mut intf, mut size, mut rate) = (None, None, None, None);
    let (mut duration, mut count, mut dst_mac, mut src_mac) = (None, None, None, None);
    let (mut src, mut dst, mut sport, mut dport) = (None, None, 1024u16, 1024u16);
    let (mut flows, mut latency, mut worker, mut ip6) = (None, false, None, false);
    let mut dst_word = String::new();
    while !a.is_empty() {
        if a.keyword("name") {
            name = Some(a.word("stream name")?);
        } else if a.keyword("interface") {
            intf = Some(a.word("interface")?);
        } else if a.keyword("size") {
            let w = a.peek().unwrap_or_default().to_string();
            let s = a.u32("frame size")? as usize;
            if !(MIN_SIZE..=MAX_SIZE).contains(&s) {
                return Err(CliError::new(format!(
                    "frame size `{w}' out of range {MIN_SIZE}..{MAX_SIZE}"
                )));
            }
            size = Some((s, w));
        } else if a.keyword("rate") {
            let w = a.peek().unwrap_or_default().to_string();
            let r = a.f64("rate (packets per second)")?;
            if r <= 0.0 || r > 1e9 {
                return Err(CliError::new(format!("rate `{w}' out of range (0, 1e9]")));
            }
            rate = Some(r);
        } else if a.keyword("duration") {
            let w = a.peek().unwrap_or_default().to_string();
            let d = a.f64("duration (seconds)")?;
            if d <= 0.0 || d > 1e6 {
                return Err(CliError::new(format!("duration `{w}' out of range")));
            }
            duration = Some(d);
        } else if a.keyword("count") {
            count = Some(a.u64("packet count")?);
        } else if a.keyword("dst-mac") {
            dst_mac = Some(mac_arg(a)?);
        } else if a.keyword("src-mac") {
            src_mac = Some(mac_arg(a)?);
        } else if a.keyword("src") {
            src = Some(parse_ip_range(a, "source")?);
        } else if a.keyword("dst") {
            dst_word = a.peek().unwrap_or_default().to_string();
            dst = Some(parse_ip_range(a, "destination")?);
        } else if a.keyword("sport") {
            sport = parse_port(a, "UDP source port")?;
        } else if a.keyword("dport") {
            dport = parse_port(a, "UDP destination port")?;
        } else if a.keyword("flows") {
            let w = a.peek().unwrap_or_default().to_string();
            let f = a.u32("number of flows")?;
            if f == 0 {
                return Err(CliError::new(format!("flows `{w}' must be at least 1")));
            }
            flows = Some(f as u64);
        } else if a.keyword("latency") {
            latency = true;
        } else if a.keyword("ip6") {
            ip6 = true;
        } else if a.keyword("worker") {
            worker = Some(a.u32("worker")? as usize);
        } else {
            a.finish()?;
        }
    }
    fn need<T>(v: Option<T>, what: &str) -> Result<T, CliError> {
        v.ok_or_else(|| CliError::new(format!("missing `{what}'")))
    }
    let name: String = need(name, "name <s>")?;
    let if_name: String = need(intf, "interface <if>")?;
    let (size, size_word) = need(size, "size <bytes>")?;
    let rate = need(rate, "rate <pps>")?;
    let dst_mac = need(dst_mac, "dst-mac <mac>")?;
    let src: AddrRange = need(src, "src <ip>[-<ip>]")?;
    let dst: AddrRange = need(dst, "dst <ip>[-<ip>]")?;
    if src.is_v6() != dst.is_v6() {
        return Err(CliError::new(format!(
            "`dst {dst_word}': source and destination must both be IPv4 or both IPv6"
        )));
    }
    if ip6 && !src.is_v6() {
        return Err(CliError::new("`ip6' needs IPv6 `src' and `dst' addresses"));
    }
    let ip6 = src.is_v6();
    if ip6 && size < frame6::MIN_SIZE {
        return Err(CliError::new(format!(
            "frame size `{size_word}' out of range {}..{MAX_SIZE} for IPv6",
            frame6::MIN_SIZE
        )));
    }
    let (src6, dst6) = match (src, dst) {
        (AddrRange::V6(s, _), AddrRange::V6(d, _)) => (s, d),
        _ => (0, 0),
    };
    let (src, dst) = (src.range(), dst.range());
    if duration.is_some() && count.is_some() {
        return Err(CliError::new("give `duration' or `count', not both"));
    }
    let flows = flows.unwrap_or(src.count());
    if sport as u64 + (flows - 1) / src.count() > 65535 {
        return Err(CliError::new(format!(
            "{flows} flows over {} source addresses need source ports above 65535 (lower `sport')",
            src.count()
        )));
    }
    let thread = match worker {
        None => 0,
        Some(w) if w < vm.n_workers() => w + 1,
        Some(w) => {
            return Err(CliError::new(format!(
                "worker {w} does not exist ({} workers)",
                vm.n_workers()
            )))
        }
    };
    if vm
        .ext_mut::<TesterMain>()
        .streams
        .iter()
        .any(|s| s.name == name)
    {
        return Err(CliError::new(format!("stream `{name}' already exists")));
    }
    let (tx_if, counters, if_mac) = {
        let ifs = vm.ext_mut::<Interfaces>();
        let i = ifs
            .find(&if_name)
            .ok_or_else(|| CliError::new(format!("unknown interface `{if_name}'")))?;
        let intf = ifs
            .get(i)
            .ok_or_else(|| CliError::new(format!("unknown interface `{if_name}'")))?;
        if intf.tx_node.is_none() {
            return Err(CliError::new(format!(
                "interface `{if_name}' cannot transmit"
            )));
        }
        (i.0, intf.counters.clone(), intf.mac)
    };
    let tm = vm.ext_mut::<TesterMain>();
    let id = (0..=u16::MAX)
        .find(|i| tm.streams.iter().all(|s| s.id != *i))
        .ok_or_else(|| CliError::new("too many streams"))?;
    let mut synth = Synth {
        eth: Some((dst_mac, src_mac.unwrap_or(if_mac))),
        src: Range::fixed(src.start),
        dst: Range::fixed(dst.start),
        sport: Range::fixed(sport as u32),
        dport: Range::fixed(dport as u32),
        ttl: 64,
        size: Range::fixed(size as u32),
        payload: 0,
        template: Vec::new(),
    };
    let src_mac = src_mac.unwrap_or(if_mac);
    let ip6 = ip6.then(|| Arc::new(Ip6Frame::new(size, dst_mac, src_mac, src6, dst6)));
    if ip6.is_none() {
        synth.build_template();
    }
    let tpl = TxTemplate {
        synth: Arc::new(synth),
        ip6,
        size,
        flows,
        src,
        dst,
        dst_walk: DstWalk::new(dst.count()),
        sport,
        dport,
        rate,
        count,
        duration,
        latency,
    };
    let shared = Arc::new(TxShared::default());
    let stream = TxStream::new(id, tpl.clone(), tx_if, counters, shared.clone());
    tm.streams.push(StreamCfg {
        name,
        id,
        thread,
        if_name,
        tx_if,
        tpl,
        shared,
    });
    let (txn, rxn) = (node_index(vm, TX)?, node_index(vm, RX)?);
    vm.foreach_thread(move |tg| {
        if let Some(r) = tg.node_mut::<TesterRx>(rxn) {
            r.set(id, Some(Box::default()));
        }
    });
    vm.on_thread(thread, move |tg| {
        if let Some(t) = tg.node_mut::<TesterTx>(txn) {
            t.add(stream, thread);
        }
    });
    Ok(String::new())
}

/// The streams named by an optional `name <s>` (all without it).
fn select(vm: &mut Vlib, a: &mut Args) -> Result<Vec<(u16, usize, u32)>, CliError> {
    let name = if a.keyword("name") {
        Some(a.word("stream name")?)
    } else {
        None
    };
    a.finish()?;
    let v: Vec<_> = vm
        .ext_mut::<TesterMain>()
        .streams
        .iter()
        .filter(|s| name.as_ref().is_none_or(|n| *n == s.name))
        .map(|s| (s.id, s.thread, s.tx_if))
        .collect();
    match name {
        Some(n) if v.is_empty() => Err(CliError::new(format!("unknown stream `{n}'"))),
        _ => Ok(v),
    }
}

fn cli_stream_del(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    if !a.is_empty() && a.peek() != Some("name") {
        // `tester stream del <s>` works too.
        let n = a.word("stream name")?;
        a.finish()?;
        return delete(vm, &n);
    }
    let sel = select(vm, a)?;
    if sel.len() != 1 {
        return Err(CliError::new("missing `name <s>'"));
    }
    let n = vm
        .ext_mut::<TesterMain>()
        .streams
        .iter()
        .find(|s| s.id == sel[0].0)
        .map(|s| s.name.clone())
        .unwrap_or_default();
    delete(vm, &n)
}

fn delete(vm: &mut Vlib, name: &str) -> Result<String, CliError> {
    let tm = vm.ext_mut::<TesterMain>();
    let pos = tm
        .streams
        .iter()
        .position(|s| s.name == name)
        .ok_or_else(|| CliError::new(format!("unknown stream `{name}'")))?;
    let s = tm.streams.remove(pos);
    let (id, thread) = (s.id, s.thread);
    let (txn, rxn) = (node_index(vm, TX)?, node_index(vm, RX)?);
    vm.on_thread(thread, move |tg| {
        if let Some(t) = tg.node_mut::<TesterTx>(txn) {
            t.remove(id);
        }
    });
    vm.foreach_thread(move |tg| {
        if let Some(r) = tg.node_mut::<TesterRx>(rxn) {
            r.set(id, None);
        }
    });
    Ok(String::new())
}

fn cli_start(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let sel = select(vm, a)?;
    for &(_, _, tx_if) in &sel {
        let ifs = vm.ext_mut::<Interfaces>();
        match ifs.get(sluice_vnet::SwIfIndex(tx_if)) {
            Some(i) if i.admin_up => {}
            Some(i) => {
                return Err(CliError::new(format!(
                    "interface `{}' is down (set interface state {} up)",
                    i.name, i.name
                )))
            }
            None => return Err(CliError::new("a stream's interface was deleted")),
        }
    }
    // A new run generation per start, so late frames of the previous run are not counted.
    let tm = vm.ext_mut::<TesterMain>();
    let gens: Vec<(u16, usize, u8)> = sel
        .iter()
        .map(|&(id, thread, _)| {
            tm.generation = tm.generation.wrapping_add(1).max(1);
            (id, thread, tm.generation)
        })
        .collect();
    let (txn, rxn) = (node_index(vm, TX)?, node_index(vm, RX)?);
    let g = gens.clone();
    vm.foreach_thread(move |tg| {
        if let Some(r) = tg.node_mut::<TesterRx>(rxn) {
            for &(id, _, gen) in &g {
                if let Some(st) = r.get_mut(id) {
                    st.generation = gen;
                    st.clear();
                }
            }
        }
    });
    let hz = vm.shared.clock.hz();
    for (id, thread, gen) in gens {
        vm.on_thread(thread, move |tg| {
            if let Some(s) = tg.node_mut::<TesterTx>(txn).and_then(|t| t.stream_mut(id)) {
                s.start(gen, hz);
            }
        });
    }
    Ok(String::new())
}

fn cli_stop(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let sel = select(vm, a)?;
    let txn = node_index(vm, TX)?;
    for (id, thread, _) in sel {
        vm.on_thread(thread, move |tg| {
            if let Some(s) = tg.node_mut::<TesterTx>(txn).and_then(|t| t.stream_mut(id)) {
                s.stop();
            }
        });
    }
    Ok(String::new())
}

fn cli_clear(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    let (txn, rxn) = (node_index(vm, TX)?, node_index(vm, RX)?);
    vm.foreach_thread(move |tg| {
        if let Some(r) = tg.node_mut::<TesterRx>(rxn) {
            for st in r.streams.iter_mut().flatten() {
                st.clear();
            }
        }
        if let Some(t) = tg.node_mut::<TesterTx>(txn) {
            for s in t.streams.iter_mut() {
                s.clear();
            }
        }
    });
    Ok(String::new())
}

fn cli_set_rx(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let w = a.word("interface name")?;
    let i = vm
        .ext_mut::<Interfaces>()
        .find(&w)
        .ok_or_else(|| CliError::new(format!("unknown interface `{w}'")))?;
    let disable = a.keyword("disable");
    a.finish()?;
    let node = if disable {
        None
    } else {
        Some(node_index(vm, RX)?)
    };
    sluice_vnet::set_rx_redirect(vm, i, node)?;
    Ok(String::new())
}

/// Everything `show tester` prints about one stream.
struct Report {
    name: String,
    interface: String,
    size: usize,
    rate: f64,
    flows: u64,
    latency_stream: bool,
    ip_version: u8,
    tx_packets: u64,
    tx_bytes: u64,
    tx_fail: u64,
    rx: RxStats,
    lost: u64,
    running: bool,
    elapsed_s: f64,
    offered_rate_pps: f64,
}

impl Report {
    fn jitter_ns(&self) -> Option<f64> {
        (self.rx.jitter_n > 0).then(|| self.rx.jitter_sum as f64 / self.rx.jitter_n as f64)
    }
}

/// Per-stream statistics: tx counters from the sending thread, rx statistics of every
/// thread merged (read on each thread between two dispatcher loops).
fn reports(vm: &mut Vlib) -> Result<Vec<Report>, CliError> {
    let rxn = node_index(vm, RX)?;
    let mut rx: HashMap<u16, RxStats> = HashMap::new();
    for t in 0..vm.n_threads() {
        let got = vm.on_thread(t, move |tg| {
            tg.node_mut::<TesterRx>(rxn)
                .map(|r| {
                    r.streams
                        .iter()
                        .enumerate()
                        .filter_map(|(i, s)| s.as_ref().map(|s| (i as u16, (**s).clone())))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        });
        for (id, st) in got.unwrap_or_default() {
            rx.entry(id).or_default().merge(&st);
        }
    }
    let hz = vm.shared.clock.hz();
    let now = rdtsc();
    let tm = vm.ext_mut::<TesterMain>();
    Ok(tm
        .streams
        .iter()
        .map(|s| {
            let sh = &s.shared;
            let attempted = sh.attempted.load(Ordering::Relaxed);
            let fail = sh.fail.load(Ordering::Relaxed).min(attempted);
            let bytes = sh.bytes.load(Ordering::Relaxed);
            let (start, stop) = (
                sh.start_tsc.load(Ordering::Relaxed),
                sh.stop_tsc.load(Ordering::Relaxed),
            );
            let running = sh.running.load(Ordering::Relaxed);
            let elapsed_s = if start == 0 {
                0.0
            } else {
                let end = if stop != 0 { stop } else { now };
                end.saturating_sub(start) as f64 / hz
            };
            let rxs = rx.remove(&s.id).unwrap_or_default();
            let tx_packets = attempted - fail;
            let unique = rxs.packets - rxs.duplicate.min(rxs.packets);
            Report {
                name: s.name.clone(),
                interface: s.if_name.clone(),
                size: s.tpl.size,
                rate: s.tpl.rate,
                flows: s.tpl.flows,
                latency_stream: s.tpl.latency,
                ip_version: if s.tpl.ip6.is_some() { 6 } else { 4 },
                tx_packets,
                tx_bytes: bytes.saturating_sub(fail * s.tpl.size as u64),
                tx_fail: fail,
                lost: tx_packets.saturating_sub(unique),
                rx: rxs,
                running,
                elapsed_s,
                offered_rate_pps: if elapsed_s > 0.0 {
                    attempted as f64 / elapsed_s
                } else {
                    0.0
                },
            }
        })
        .collect())
}

fn cli_show(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let json = a.keyword("json");
    a.finish()?;
    let reps = reports(vm)?;
    Ok(if json {
        format_json(&reps)
    } else {
        format_text(&reps)
    })
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

fn format_text(reps: &[Report]) -> String {
    let mut out = String::new();
    if reps.is_empty() {
        out.push_str("no tester streams\n");
    }
    for r in reps {
        let l = r.rx.latency.summary();
        let _ = writeln!(
            out,
            "{}: interface {}, IPv{}, size {}, rate {} pps, flows {}{}, {}, elapsed {:.3} s, offered {:.1} pps",
            r.name,
            r.interface,
            r.ip_version,
            r.size,
            r.rate,
            r.flows,
            if r.latency_stream { ", latency stream" } else { "" },
            if r.running { "running" } else { "stopped" },
            r.elapsed_s,
            r.offered_rate_pps
        );
        let _ = writeln!(
            out,
            "  tx packets {}  tx bytes {}  tx-fail {}",
            r.tx_packets, r.tx_bytes, r.tx_fail
        );
        let _ = writeln!(
            out,
            "  rx packets {}  rx bytes {}  lost {}  reordered {}  duplicate {}",
            r.rx.packets, r.rx.bytes, r.lost, r.rx.reordered, r.rx.duplicate
        );
        let _ = writeln!(
            out,
            "  latency ns: min {} avg {} max {} p50 {} p90 {} p99 {} p99.9 {}  jitter ns {}",
            opt(l.map(|l| l.min)),
            l.map_or("-".to_string(), |l| format!("{:.0}", l.avg)),
            opt(l.map(|l| l.max)),
            opt(l.map(|l| l.p50)),
            opt(l.map(|l| l.p90)),
            opt(l.map(|l| l.p99)),
            opt(l.map(|l| l.p999)),
            r.jitter_ns().map_or("-".to_string(), |j| format!("{j:.0}")),
        );
    }
    out
}

/// A JSON string literal.
fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// A JSON number (finite) or null.
fn json_f64(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.3}"),
        _ => "null".to_string(),
    }
}

fn json_u64(v: Option<u64>) -> String {
    v.map_or_else(|| "null".to_string(), |v| v.to_string())
}

/// `{"streams": {name: {...}}}` on one line (the contract with the harness).
fn format_json(reps: &[Report]) -> String {
    let mut o = String::from("{\"streams\": {");
    for (i, r) in reps.iter().enumerate() {
        let l = r.rx.latency.summary();
        if i > 0 {
            o.push_str(", ");
        }
        let _ = write!(
            o,
            "{}: {{\"interface\": {}, \"ip_version\": {}, \"size\": {}, \"rate_pps\": {}, \"flows\": {}, \"latency_stream\": {}, \
             \"tx_packets\": {}, \"tx_bytes\": {}, \"tx_fail\": {}, \"rx_packets\": {}, \"rx_bytes\": {}, \
             \"lost\": {}, \"reordered\": {}, \"duplicate\": {}, \
             \"latency_ns\": {{\"min\": {}, \"avg\": {}, \"max\": {}, \"p50\": {}, \"p90\": {}, \"p99\": {}, \"p999\": {}}}, \
             \"jitter_ns\": {}, \"histogram\": {{\"bucket_scheme\": {}, \"counts\": [",
            json_str(&r.name),
            json_str(&r.interface),
            r.ip_version,
            r.size,
            json_f64(Some(r.rate)),
            r.flows,
            r.latency_stream,
            r.tx_packets,
            r.tx_bytes,
            r.tx_fail,
            r.rx.packets,
            r.rx.bytes,
            r.lost,
            r.rx.reordered,
            r.rx.duplicate,
            json_u64(l.map(|l| l.min)),
            json_f64(l.map(|l| l.avg)),
            json_u64(l.map(|l| l.max)),
            json_u64(l.map(|l| l.p50)),
            json_u64(l.map(|l| l.p90)),
            json_u64(l.map(|l| l.p99)),
            json_u64(l.map(|l| l.p999)),
            json_f64(r.jitter_ns()),
            json_str(hist::SCHEME),
        );
        for (k, (lo, c)) in r.rx.latency.nonzero().enumerate() {
            if k > 0 {
                o.push_str(", ");
            }
            let _ = write!(o, "[{lo}, {c}]");
        }
        let _ = write!(
            o,
            "]}}, \"running\": {}, \"elapsed_s\": {}, \"offered_rate_pps\": {}}}",
            r.running,
            format_args!("{:.6}", r.elapsed_s),
            json_f64(Some(r.offered_rate_pps)),
        );
    }
    o.push_str("}}\n");
    o
}

#[cfg(test)]
mod tests;
