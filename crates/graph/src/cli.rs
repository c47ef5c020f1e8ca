//! CLI commands of the runtime: `show runtime|errors|node|trace|buffers|threads`,
//! `clear runtime|errors|trace`, `trace add`, `pcap trace`.

use crate::node::{NodeIndex, NodeKind};
use crate::pcap::{point, PcapTraceConfig};
use crate::trace::format_time;
use crate::vlib::Vlib;
use sluice_cli::{Args, CliError, CommandTree};
use std::fmt::Write;

/// Registers the runtime's commands.
pub fn register(t: &mut CommandTree<Vlib>) {
    t.add(
        "show runtime",
        "show runtime [verbose] [max] — per-node calls, vectors, clocks per packet, per thread",
        show_runtime,
    );
    t.add(
        "clear runtime",
        "clear runtime — reset node statistics",
        clear_runtime,
    );
    t.add(
        "show errors",
        "show errors [verbose] — node counters",
        show_errors,
    );
    t.add(
        "clear errors",
        "clear errors — reset node counters",
        clear_errors,
    );
    t.add(
        "show node",
        "show node <name> — node type and next arcs",
        show_node,
    );
    t.add(
        "trace add",
        "trace add <input-graph-node> <count> [filter] [verbose] — trace the next packets from an input node (with `filter', only those matching `classify filter trace')",
        trace_add,
    );
    t.add(
        "classify filter trace",
        "classify filter trace mask l3 ip4 [src] [dst] [proto] [l4 [src_port] [dst_port]] match l3 ip4 [src <a>] [dst <a>] [proto <n>] [l4 [src_port <n>] [dst_port <n>]] | del — which packets `trace add <node> <n> filter' traces",
        classify_filter_trace,
    );
    t.add(
        "trace filter",
        "trace filter include|exclude <node> <count> | none — show only the traced packets that went (include) or did not go (exclude) through a node, at most count per thread",
        trace_filter,
    );
    t.add(
        "show trace",
        "show trace [max <n>] — traced packets",
        show_trace,
    );
    t.add(
        "clear trace",
        "clear trace — forget traced packets",
        clear_trace,
    );
    t.add(
        "pcap trace",
        "pcap trace [rx] [tx] [drop] [max <n>] [max-bytes-per-pkt <n>] [intfc <if>|any] [file <name>] | off | status",
        pcap_trace,
    );
    t.add(
        "pcap dispatch trace",
        "pcap dispatch trace on [max <n>] [file <name>] [buffer-trace <input-node> <n>] | off | status — every node's packets in VPP's dispatch-trace pcap format",
        pcap_dispatch_trace,
    );
    t.add(
        "show buffers",
        "show buffers — buffer pool totals",
        show_buffers,
    );
    crate::diag::register(t);
}

fn fmt_clocks(v: f64) -> String {
    format!("{v:.2e}")
}

/// Renders `show runtime`.
pub fn show_runtime(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    let mut verbose = false;
    while !args.is_empty() {
        if args.keyword("verbose") || args.keyword("max") || args.keyword("summary") {
            verbose = true;
        } else {
            args.finish()?;
        }
    }
    let now = vm.shared.clock.now_secs();
    let dt = (now - vm.runtime_cleared_secs).max(1e-9);
    let drop = vm.registry.find("error-drop");
    let punt = vm.registry.find("punt");
    let mut out = String::new();
    let procs: Vec<(NodeIndex, &'static str)> = vm
        .registry
        .nodes()
        .iter()
        .filter_map(|n| vm.main.process_state(n.index).map(|s| (n.index, s)))
        .collect();
    for t in 0..vm.n_threads() {
        // Input nodes' state on this thread as VPP shows it: "polling", or "interrupt wait"
        // when every queue it has here is interrupt-driven (rx mode interrupt, or adaptive
        // while idle).
        let inputs = vm.on_thread(t, |tg| tg.input_states()).unwrap_or_default();
        let core = vm
            .thread_core(t)
            .map(|c| format!(" (lcore {c})"))
            .unwrap_or_default();
        let _ = writeln!(out, "Thread {} {}{}", t, vm.thread_name(t), core);
        let (mut vin, mut vdrop, mut vpunt, mut vint, mut cint) = (0u64, 0u64, 0u64, 0u64, 0u64);
        for n in vm.registry.nodes() {
            let s = &n.stats.per_thread[t];
            match n.kind {
                NodeKind::Input | NodeKind::PreInput => vin += s.vectors.get(),
                NodeKind::Internal => {
                    vint += s.vectors.get();
                    cint += s.calls.get();
                }
                NodeKind::Process => {}
            }
            if Some(n.index) == drop {
                vdrop += s.vectors.get();
            }
            if Some(n.index) == punt {
                vpunt += s.vectors.get();
            }
        }
        let vrate = if cint > 0 {
            vint as f64 / cint as f64
        } else {
            0.0
        };
        let _ = writeln!(
            out,
            "Time {:.1}, average vectors/node {:.2}, last clear {:.1}s ago",
            now - vm.start_secs,
            vrate,
            dt
        );
        let _ = writeln!(
            out,
            "  vector rates in {:.4e}, out {:.4e}, drop {:.4e}, punt {:.4e}",
            vin as f64 / dt,
            vin.saturating_sub(vdrop + vpunt) as f64 / dt,
            vdrop as f64 / dt,
            vpunt as f64 / dt
        );
        let _ = writeln!(
            out,
            "{:<32}{:>16}{:>16}{:>16}{:>16}{:>16}{:>16}",
            "Name", "State", "Calls", "Vectors", "Suspends", "Clocks", "Vectors/Call"
        );
        for n in vm.registry.nodes() {
            let s = &n.stats.per_thread[t];
            let (calls, vectors, susp, clocks) = (
                s.calls.get(),
                s.vectors.get(),
                s.suspends.get(),
                s.clocks.get(),
            );
            if calls == 0 && !(verbose && n.kind == NodeKind::Process && t == 0) {
                continue;
            }
            let state = match n.kind {
                NodeKind::Input | NodeKind::PreInput => {
                    match inputs.iter().find(|x| x.0 == n.index) {
                        Some((_, false)) => "interrupt wait",
                        _ => "polling",
                    }
                }
                NodeKind::Internal => "active",
                NodeKind::Process => procs
                    .iter()
                    .find(|p| p.0 == n.index)
                    .map(|p| p.1)
                    .unwrap_or("done"),
            };
            let per = if vectors > 0 {
                clocks as f64 / vectors as f64
            } else if calls > 0 {
                clocks as f64 / calls as f64
            } else {
                0.0
            };
            let vpc = if calls > 0 {
                vectors as f64 / calls as f64
            } else {
                0.0
            };
            let _ = writeln!(
                out,
                "{:<32}{:>16}{:>16}{:>16}{:>16}{:>16}{:>16.2}",
                n.name,
                state,
                calls,
                vectors,
                susp,
                fmt_clocks(per),
                vpc
            );
        }
        if t + 1 < vm.n_threads() {
            out.push_str("---------------\n");
        }
    }
    Ok(out)
}

fn clear_runtime(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    args.finish()?;
    for n in vm.registry.nodes() {
        n.stats.clear_runtime();
    }
    vm.runtime_cleared_secs = vm.shared.clock.now_secs();
    Ok(String::new())
}

/// Renders `show errors`.
pub fn show_errors(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    let verbose = args.keyword("verbose");
    args.finish()?;
    let mut out = format!(
        "{:>12}  {:<30}  {:<46}  {:<8}\n",
        "Count", "Node", "Reason", "Severity"
    );
    for n in vm.registry.nodes() {
        for (i, c) in n.counters.iter().enumerate() {
            let total = n.stats.counter_total(i);
            if total == 0 && !verbose {
                continue;
            }
            let _ = writeln!(
                out,
                "{:>12}  {:<30}  {:<46}  {:<8}",
                total,
                n.name,
                c.description,
                c.severity.as_str()
            );
        }
    }
    Ok(out)
}

fn clear_errors(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    args.finish()?;
    for n in vm.registry.nodes() {
        n.stats.clear_counters();
    }
    Ok(String::new())
}

fn lookup_node(vm: &Vlib, name: &str) -> Result<NodeIndex, CliError> {
    vm.registry
        .find(name)
        .ok_or_else(|| CliError::new(format!("unknown node `{name}'")))
}

fn show_node(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    let name = args.word("node name")?;
    args.finish()?;
    let i = lookup_node(vm, &name)?;
    let n = vm.registry.node(i);
    let mut out = format!(
        "node {}, type {}, index {}, counters {}\n",
        n.name,
        n.kind.as_str(),
        i.0,
        n.counters.len()
    );
    if n.nexts.is_empty() {
        out.push_str("  no next nodes\n");
    } else {
        out.push_str("  next nodes:\n");
        let _ = writeln!(
            out,
            "    {:>10}  {:>10}  {:<32}",
            "next-index", "node-index", "Node"
        );
        for (k, t) in n.nexts.iter().enumerate() {
            let _ = writeln!(
                out,
                "    {:>10}  {:>10}  {:<32}",
                k,
                t.0,
                vm.registry.node(*t).name
            );
        }
    }
    for c in &n.counters {
        let _ = writeln!(
            out,
            "  counter {} ({}): {}",
            c.name,
            c.severity.as_str(),
            c.description
        );
    }
    Ok(out)
}

/// Why a trace or pcap action failed (the CLI prints it; the API maps it to a code).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    /// No node of that name.
    #[error("unknown node `{0}'")]
    NoSuchNode(String),
    /// `trace add` of a node that is not an input node.
    #[error("node `{0}' is not an input node")]
    NotInput(String),
    /// A bad value.
    #[error("{0}")]
    Invalid(String),
    /// The capture file could not be created.
    #[error("{0}")]
    Capture(String),
}

impl From<TraceError> for CliError {
    fn from(e: TraceError) -> Self {
        CliError::new(e.to_string())
    }
}

fn trace_add(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    let name = args.word("input node name")?;
    let count = args.u32("packet count")?;
    let mut filter = false;
    loop {
        if args.keyword("filter") {
            filter = true;
        } else if !args.keyword("verbose") {
            break;
        }
    }
    args.finish()?;
    trace_add_node(vm, &name, count)?;
    if let Some(i) = vm.registry.find(&name) {
        vm.shared.trace.set_filtered(i, filter);
    }
    Ok(String::new())
}

/// `trace filter include|exclude <node> <count>` / `trace filter none`.
fn trace_filter(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    if args.keyword("none") {
        args.finish()?;
        vm.shared.trace.lock().node_filter = None;
        return Ok(String::new());
    }
    let include = if args.keyword("include") {
        true
    } else if args.keyword("exclude") {
        false
    } else {
        return Err(CliError::new(format!(
            "expected include, exclude or none, got `{}'",
            args.peek().unwrap_or("")
        )));
    };
    let name = args.word("node name")?;
    let count = args.u32("count")?;
    args.finish()?;
    let node = vm
        .registry
        .find(&name)
        .ok_or_else(|| TraceError::NoSuchNode(name.clone()))?;
    vm.shared.trace.lock().node_filter = Some(crate::trace::NodeFilter {
        include,
        node,
        count,
    });
    Ok(String::new())
}

/// `classify filter trace mask l3 ip4 <fields> [l4 <ports>] match l3 ip4 <values> [l4 <values>]`
/// or `classify filter trace del`.
fn classify_filter_trace(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    if args.keyword("del") {
        // VPP also accepts the mask after `del`.
        let _ = args.rest();
        vm.shared.trace.set_filter(None);
        return Ok(String::new());
    }
    let f = parse_trace_filter(args)?;
    vm.shared.trace.set_filter(Some(f));
    Ok(String::new())
}

/// The mask and match of `classify filter trace` (see [`crate::trace::TraceFilter`]).
pub fn parse_trace_filter(args: &mut Args) -> Result<crate::trace::TraceFilter, CliError> {
    use crate::trace::TraceFilter;
    let mut mask = [false; 5];
    const FIELDS: [&str; 5] = ["src", "dst", "proto", "src_port", "dst_port"];
    if !args.keyword("mask") {
        return Err(CliError::new(format!(
            "expected `mask', got `{}'",
            args.peek().unwrap_or("")
        )));
    }
    while let Some(w) = args.peek().map(str::to_string) {
        match w.as_str() {
            "l3" | "ip4" | "l4" => {}
            "match" => break,
            _ => match FIELDS.iter().position(|f| *f == w) {
                Some(k) => mask[k] = true,
                None => return Err(CliError::new(format!("unknown mask field `{w}'"))),
            },
        }
        args.word("mask field")?;
    }
    if !args.keyword("match") {
        return Err(CliError::new("expected `match'".to_string()));
    }
    if !mask.contains(&true) {
        return Err(CliError::new("empty mask".to_string()));
    }
    let mut val = [0u32; 5];
    while let Some(w) = args.peek().map(str::to_string) {
        args.word("match field")?;
        if matches!(w.as_str(), "l3" | "ip4" | "l4") {
            continue;
        }
        let k = FIELDS
            .iter()
            .position(|f| *f == w)
            .ok_or_else(|| CliError::new(format!("unknown match field `{w}'")))?;
        if !mask[k] {
            return Err(CliError::new(format!("`{w}' is not in the mask")));
        }
        let v = args.word("match value")?;
        let bad = || CliError::new(format!("bad {w} `{v}'"));
        val[k] = match k {
            0 | 1 => u32::from(v.parse::<std::net::Ipv4Addr>().map_err(|_| bad())?),
            2 => u32::from(v.parse::<u8>().map_err(|_| bad())?),
            _ => u32::from(v.parse::<u16>().map_err(|_| bad())?),
        };
    }
    let pick = |k: usize| mask[k].then_some(val[k]);
    Ok(TraceFilter {
        src: pick(0),
        dst: pick(1),
        proto: pick(2).map(|v| v as u8),
        sport: pick(3).map(|v| v as u16),
        dport: pick(4).map(|v| v as u16),
    })
}

/// `trace add <node> <count>`: traces the next `count` packets from input node `name`.
pub fn trace_add_node(vm: &mut Vlib, name: &str, count: u32) -> Result<(), TraceError> {
    let i = vm
        .registry
        .find(name)
        .ok_or_else(|| TraceError::NoSuchNode(name.to_string()))?;
    if !matches!(
        vm.registry.node(i).kind,
        NodeKind::Input | NodeKind::PreInput
    ) {
        return Err(TraceError::NotInput(name.to_string()));
    }
    vm.shared.trace.add(i, count);
    Ok(())
}

/// One traced packet of [`traced_packets`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TracedPacket {
    /// The thread that received it.
    pub thread: usize,
    /// Its number on that thread (1-based, as `show trace`'s `Packet N`).
    pub number: usize,
    /// `HH:MM:SS:usec: <node>` and the node's indented decode, per node it went through.
    pub text: String,
}

/// The traced packets, at most `max` per thread, by thread (`show trace`, `trace_dump`).
pub fn traced_packets(vm: &Vlib, max: usize) -> Vec<TracedPacket> {
    let clock = vm.shared.clock;
    let decode = vm.ext::<crate::trace::TraceDecoder>().and_then(|d| d.0);
    let store = vm.shared.trace.lock();
    let mut by_thread: Vec<Vec<usize>> = vec![Vec::new(); vm.n_threads()];
    for (i, p) in store.packets.iter().enumerate() {
        let t = p.first().map(|e| e.thread as usize).unwrap_or(0);
        if let Some(v) = by_thread.get_mut(t) {
            // `trace filter include|exclude <node> <count>`: at most count per thread of
            // the packets that went (include) or did not go (exclude) through the node.
            if let Some(nf) = &store.node_filter {
                let visited = p.iter().any(|e| e.node == nf.node);
                if visited != nf.include || v.len() >= nf.count as usize {
                    continue;
                }
            }
            v.push(i);
        }
    }
    let mut out = Vec::new();
    for (t, pkts) in by_thread.iter().enumerate() {
        for (k, &pi) in pkts.iter().take(max).enumerate() {
            let mut text = String::new();
            for e in &store.packets[pi] {
                let secs = clock.secs_at(e.tsc);
                let _ = writeln!(
                    text,
                    "{}: {}",
                    format_time(secs),
                    vm.registry.node(e.node).name
                );
                let name = &vm.registry.node(e.node).name;
                let mut s = String::new();
                if let Some(r) = &e.rec {
                    r.format(&mut s);
                } else if name == "error-drop" {
                    // VPP names the reason: `<node>: <counter description>`.
                    if let Some((n, c)) = vm.registry.error_of(e.error) {
                        let node = vm.registry.node(n);
                        if let Some(d) = node.counters.get(c as usize) {
                            s = format!("{}: {}", node.name, d.description);
                        }
                    }
                } else if let (Some(f), false) = (decode, e.data.is_empty()) {
                    s = f(name, &e.data);
                }
                for line in s.lines() {
                    let _ = writeln!(text, "  {line}");
                }
            }
            out.push(TracedPacket {
                thread: t,
                number: k + 1,
                text,
            });
        }
    }
    out
}

/// Renders `show trace`.
pub fn show_trace(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    let mut max = 50usize;
    if args.keyword("max") {
        max = args.u32("max packets")? as usize;
    }
    args.finish()?;
    let pkts = traced_packets(vm, max);
    if pkts.is_empty() {
        return Ok("No packets in trace buffer\n".to_string());
    }
    let mut out = String::new();
    for (k, p) in pkts.iter().enumerate() {
        if k == 0 || pkts[k - 1].thread != p.thread {
            let _ = writeln!(
                out,
                "------------------- Start of thread {} {} -------------------",
                p.thread,
                vm.thread_name(p.thread)
            );
        }
        let _ = writeln!(out, "Packet {}\n", p.number);
        out.push_str(&p.text);
        out.push('\n');
    }
    Ok(out)
}

fn clear_trace(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    args.finish()?;
    vm.shared.trace.clear();
    Ok(String::new())
}

/// Resolves an interface name to its index for `pcap trace intfc`. Set by the interface
/// layer; without it only `any` is accepted.
pub type IfResolver = fn(&Vlib, &str) -> Option<u32>;

/// Interface name resolution installed by the interface layer.
#[derive(Default)]
pub struct IfNames {
    /// Resolver, if an interface layer is present.
    pub resolve: Option<IfResolver>,
}

fn pcap_trace(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    if args.keyword("off") {
        args.finish()?;
        return Ok(pcap_trace_off(vm) + "\n");
    }
    if args.keyword("status") {
        args.finish()?;
        return Ok(vm.shared.pcap.status() + "\n");
    }
    let mut cfg = PcapTraceConfig {
        points: 0,
        max: 100,
        max_bytes_per_pkt: 512,
        intfc: None,
        file: String::new(),
    };
    let mut file: Option<String> = None;
    while !args.is_empty() {
        if args.keyword("rx") {
            cfg.points |= point::RX;
        } else if args.keyword("tx") {
            cfg.points |= point::TX;
        } else if args.keyword("drop") {
            cfg.points |= point::DROP;
        } else if args.keyword("max") {
            cfg.max = args.u64("max packets")?.max(1);
        } else if args.keyword("max-bytes-per-pkt") {
            cfg.max_bytes_per_pkt = args.u32("bytes")?.clamp(32, 65536);
        } else if args.keyword("intfc") {
            let name = args.word("interface")?;
            if name != "any" {
                let r = vm.ext::<IfNames>().and_then(|r| r.resolve);
                let idx = r.and_then(|f| f(vm, &name));
                match idx {
                    Some(i) => cfg.intfc = Some(i),
                    None => return Err(CliError::new(format!("unknown interface `{name}'"))),
                }
            }
        } else if args.keyword("file") {
            file = Some(args.word("file name")?);
        } else if args.keyword("preallocate-data") || args.keyword("free-data") {
        } else {
            args.finish()?;
        }
    }
    cfg.file = file.unwrap_or_default();
    pcap_trace_on(vm, cfg)?;
    Ok(String::new())
}

/// `pcap trace [rx] [tx] [drop] ... [file <name>]`: starts writing the packets at `cfg.points`
/// to `cfg.file` in the capture directory (empty: VPP's default name for the points).
pub fn pcap_trace_on(vm: &mut Vlib, mut cfg: PcapTraceConfig) -> Result<(), TraceError> {
    if cfg.points == 0 {
        return Err(TraceError::Invalid(
            "pcap trace: choose at least one of rx, tx, drop (or off, status)".into(),
        ));
    }
    if cfg.file.is_empty() {
        cfg.file = match cfg.points {
            point::RX => "rx.pcap",
            point::TX => "tx.pcap",
            point::DROP => "drop.pcap",
            _ => "rxandtx.pcap",
        }
        .to_string();
    }
    // VPP writes under /tmp; Sluice under the capture directory (`unix { capture-dir }`).
    let dir = vm
        .ext::<crate::pcap::CaptureDir>()
        .cloned()
        .unwrap_or_default();
    vm.shared
        .pcap
        .start(&dir.0, cfg)
        .map_err(|e| TraceError::Capture(e.to_string()))
}

/// `pcap trace off`: stops the capture; the summary line (`Write N packets to <file>`, or
/// that none was running).
pub fn pcap_trace_off(vm: &mut Vlib) -> String {
    vm.shared.pcap.stop()
}

fn pcap_dispatch_trace(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    if args.keyword("off") {
        args.finish()?;
        // VPP's wording.
        return Ok(match vm.shared.trace.dispatch_stop() {
            Some(s) => format!(
                "Write {} packets to {}, and stop capture...\n",
                s.written,
                s.path.display()
            ),
            None => "pcap dispatch capture not enabled\n".to_string(),
        });
    }
    if args.keyword("status") {
        args.finish()?;
        let g = vm
            .shared
            .trace
            .dispatch
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        return Ok(match g.as_ref() {
            Some(c) => format!(
                "pcap dispatch capture on: {} of {} packets written to {}\n",
                c.sink.written,
                c.max,
                c.sink.path().display()
            ),
            None => "pcap dispatch capture is off\n".to_string(),
        });
    }
    let _ = args.keyword("on");
    let (mut max, mut file, mut buffer_trace) = (100u64, "dispatch.pcap".to_string(), None);
    while !args.is_empty() {
        if args.keyword("max") {
            max = args.u64("max packets")?.max(1);
        } else if args.keyword("file") {
            file = args.word("file name")?;
        } else if args.keyword("buffer-trace") {
            let node = args.word("input node name")?;
            buffer_trace = Some((node, args.u32("packet count")?));
        } else if args.keyword("post-mortem") {
            return Err(CliError::new(
                "pcap dispatch trace: post-mortem is not supported",
            ));
        } else {
            args.finish()?;
        }
    }
    pcap_dispatch_on(
        vm,
        max,
        &file,
        buffer_trace.as_ref().map(|(n, c)| (n.as_str(), *c)),
    )?;
    Ok(String::new())
}

/// `pcap dispatch trace on max <max> file <file> [buffer-trace <node> <n>]`: writes every
/// packet every node receives to `file` in the capture directory, in VPP's dispatch-trace
/// format ([`crate::trace::DispatchCapture`]); `buffer-trace` also traces `n` packets from an
/// input node (`trace add`), whose trace text then goes with their records.
pub fn pcap_dispatch_on(
    vm: &mut Vlib,
    max: u64,
    file: &str,
    buffer_trace: Option<(&str, u32)>,
) -> Result<(), TraceError> {
    if vm
        .shared
        .trace
        .dispatch_on
        .load(std::sync::atomic::Ordering::Acquire)
    {
        return Err(TraceError::Invalid(
            "pcap dispatch trace is already on (pcap dispatch trace off first)".into(),
        ));
    }
    if let Some((node, n)) = buffer_trace {
        trace_add_node(vm, node, n)?;
    }
    let dir = vm
        .ext::<crate::pcap::CaptureDir>()
        .cloned()
        .unwrap_or_default();
    let sink = crate::pcap::PcapSink::create_in_linktype(
        &dir.0,
        file,
        65535,
        pcap_file::DataLink::Unknown(crate::trace::LINKTYPE_VPP_DISPATCH),
    )
    .map_err(|e| TraceError::Capture(e.to_string()))?;
    let nodes = vm
        .registry
        .nodes()
        .iter()
        .map(|n| (n.name.clone(), crate::trace::proto_hint(&n.name)))
        .collect();
    vm.shared
        .trace
        .dispatch_start(crate::trace::DispatchCapture { sink, max, nodes });
    Ok(())
}

/// Renders `show buffers`: `Used` is in the graph's hands (frames, queues, rings), `Lent`
/// held outside it by registered lenders ([`crate::register_buffer_lender`]); with `Free` and
/// `Cached` they add up to `Total`.
pub fn show_buffers(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    let detail = args.keyword("detail");
    args.finish()?;
    let s = crate::buffer_use(vm);
    let backing = match vm.pool.backing() {
        sluice_buffer::Backing::Huge2M => "2M hugepages",
        sluice_buffer::Backing::Small4K => "4K pages",
    };
    let mut out = format!(
        "{:<16}{:>6}{:>6}{:>8}{:>11}{:>10}{:>10}{:>10}{:>10}{:>14}{:>10}\n",
        "Pool Name",
        "Index",
        "NUMA",
        "Size",
        "Data Size",
        "Total",
        "Free",
        "Cached",
        "Used",
        "Alloc-Fail",
        "Lent"
    );
    let _ = writeln!(
        out,
        "{:<16}{:>6}{:>6}{:>8}{:>11}{:>10}{:>10}{:>10}{:>10}{:>14}{:>10}",
        "default-numa-0",
        0,
        0,
        vm.pool.stride(),
        vm.pool.data_size(),
        s.total,
        s.free,
        s.cached,
        s.used,
        s.alloc_failures,
        s.lent
    );
    let _ = writeln!(out, "memory: {backing}");
    if detail {
        for (who, n) in crate::buffer_lenders(vm) {
            let _ = writeln!(out, "lent to {who}: {n}");
        }
    }
    Ok(out)
}
