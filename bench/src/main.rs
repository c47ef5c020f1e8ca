//! `sluice-bench`: engine benchmarks run in-process on the real graph runtime and packet
//! generator, configured through the real CLI.
//!
//! ```text
//! cargo run --release -p sluice-bench -- engine [--runs 5] [--packets 20000000] [--json FILE]
//! ```
//!
//! - (a) `pg -> null-sink`: Mpps on one core.
//! - (b) `pg -> 10 pass-through nodes -> null-sink`: clocks per packet per node at vector sizes
//!   256, 32 and 1 (the batching effect).
//! - (c) handoff queue: Mpps between two threads (raw queue), and `pg worker 0 -> null-sink`
//!   through the graph (generation on main, processing on the worker).
//!
//! Each case runs `--runs` times; min/median/max are reported. Nothing here is a test.
//!
//! `sluice-bench run --suite smoke|default|full [...]` runs the end-to-end RFC 2544 harness
//! instead (Sluice tester, Sluice and Linux DUTs in network namespaces; `python/sluice_bench`,
//! docs/benchmarking.md).

mod acl;
mod ip4;
mod ip6;
mod l2;
mod memif;
mod nat;
mod stats;
mod tunnel;

use clap::Parser;
use sluice_buffer::{BufIdx, Buffer, PageSize, PoolConfig};
use sluice_cli::CommandTree;
use sluice_graph::{
    CpuConfig, Cx, Next, NodeIndex, NodeKind, NodeRegistration, PacketNode, PerPacket, Vlib,
};
use sluice_vnet::plugin::{assemble, Plugin, PluginsConfig, RegisterError, Registrar, Staged};
use std::fmt::Write as _;
use std::time::Instant;

#[derive(Parser, Debug)]
#[command(name = "sluice-bench", about = "Sluice engine benchmarks")]
pub struct Opts {
    /// Which benchmark: engine (all), null, chain, handoff, ip4, ip6, ip6-lpm, l2, memif, nat, acl, stats, tunnel; or `run
    /// --suite smoke|default|full` for the end-to-end RFC 2544 harness (python/sluice_bench).
    #[arg(default_value = "engine")]
    what: String,
    /// Repetitions per case.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Packets per run.
    #[arg(long, default_value_t = 20_000_000)]
    packets: u64,
    /// Write results as JSON here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Skip the large-FIB cases.
    #[arg(long)]
    quick: bool,
    /// ip4: only the cases whose name contains this (`1 route`; `2 next hops`, `4 next hops`:
    /// routes via 2 or 4 next hops, packets alternating, which only `--only` runs; the
    /// 255k/1M/real-table cases never run with `--only`);
    /// ip6, ip6-lpm: run only the FIBs whose name contains this (e.g. `real`, `255k`, `/64`;
    /// `host` the host-table cases, which only `--only` runs);
    /// l2: only the cases whose name contains this (`xconnect`, `1 MAC`, `1M MACs`, `learning`);
    /// tunnel: only the cases whose name contains this (e.g. `vxlan decap`).
    /// nat: the cases `<sessions> <direction>` containing it (`1000 in2out`); acl: that rule
    /// count, `stateful` (one permit+reflect rule), `stateful-tcp` (the same, TCP ACKs of
    /// established flows), `stateful-<rules>` or
    /// `stateful-100k-flows` (10k rules, 100,000 tracked flows; only so), `stateful-miss`
    /// (10k rules, every packet denied: no session, no rule; only so), `session-rebuild`
    /// (the time of the session create that rebuilds the buckets; only so); memif: the case of
    /// that name (`64`, `1500`, `64 zc`, `64 s2m`, `64 zc s2m`, ...).
    #[arg(long)]
    only: Option<String>,
    /// ip4: also run the 1-route case with counter features enabled on the `ip4-unicast`
    /// (pg0) and `ip4-output` (pg1) arcs (the price of enabled features).
    #[arg(long)]
    features: bool,
    /// ip4, ip6, l2, memif: keep each case's inputs in this directory (its pcap as
    /// `<family>-<n>.pcap`, ip4/ip6 routes as `<family>-<n>.routes`, one prefix a line) so
    /// another dataplane can replay the same work (the harness's VPP rows).
    #[arg(long)]
    keep_inputs: Option<std::path::PathBuf>,
}

sluice_graph::arcs! {
    /// `pass-<i>`'s next arcs.
    enum PassNext<next> {
        /// The next pass-through node, or `null-sink` after the last.
        Next => next,
    }
}

/// Pass-through node: touches the buffer header like a real node reading metadata.
struct Pass;
impl PacketNode for Pass {
    // Like l2-patch: metadata only, so only headers are prefetched.
    const PREFETCH_DATA: bool = false;
    #[inline(always)]
    fn process_one(&mut self, _cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        b.hdr.feature_cursor = b.hdr.feature_cursor.wrapping_add(1);
        PassNext::Next.next()
    }
}

const CHAIN: usize = 10;

/// The benchmark's own nodes (the pass-through chain), registered through the plugin
/// boundary like any plugin's.
struct BenchPlugin;
static BENCH_PLUGIN: BenchPlugin = BenchPlugin;

impl Plugin for BenchPlugin {
    fn name(&self) -> &'static str {
        "bench"
    }
    fn version(&self) -> &'static str {
        env!("CARGO_PKG_VERSION")
    }
    fn description(&self) -> &'static str {
        "benchmark pass-through nodes"
    }
    fn register(&self, r: &mut Registrar) -> Result<(), RegisterError> {
        for i in 0..CHAIN {
            let next = if i + 1 < CHAIN {
                format!("pass-{}", i + 1)
            } else {
                "null-sink".to_string()
            };
            r.node(
                NodeRegistration::new(&format!("pass-{i}"), NodeKind::Internal, |_| {
                    Box::new(PerPacket::new(Pass))
                })
                .nexts(&PassNext::names(&next)),
            );
        }
        Ok(())
    }
}

pub(crate) fn build(workers: usize) -> (Vlib, CommandTree<Vlib>) {
    build_pool(
        workers,
        std::env::var_os("SLUICE_BENCH_SHARED_BUFFERS").is_some_and(|v| v == "1"),
    )
}

/// [`build`] with the buffer data array shared (`buffers { shared }`) or not.
pub(crate) fn build_pool(workers: usize, shared: bool) -> (Vlib, CommandTree<Vlib>) {
    let cpu = CpuConfig {
        main_core: Some(0),
        workers: (0..workers).map(|_| Some(1)).collect(),
    };
    let pool = PoolConfig {
        buffers: 16384,
        // SLUICE_BENCH_DATA_SIZE: another buffer data size (the data stride follows it), to
        // measure how the arena's layout maps onto the caches.
        data_size: env_usize("SLUICE_BENCH_DATA_SIZE").unwrap_or(2048),
        page_size: PageSize::Default,
        // `buffers { shared }` (memfd-backed data array): SLUICE_BENCH_SHARED_BUFFERS=1 to
        // measure what it costs; memif zero-copy needs it.
        shared,
    };
    let mut plugins = sluice_plugins::all();
    plugins.push(&BENCH_PLUGIN);
    let entries = PluginsConfig::default().entries(&plugins);
    let mut staged = Staged::default();
    // SLUICE_BENCH_CLOCK_SLOWDOWN: the runtime's clock runs that many times slower. Under
    // callgrind (code 50–100× slower) `1000` lets per-second state — NAT's LRU stamps, which
    // decide its established path — see the packets per second of a full-speed run.
    // Timers and processes (NAT's walk, pg's pacing, rx-mode windows) then run as many times
    // less often. 0 stops the benchmark (it would otherwise mean 1 without a word).
    if let Some(f) = env_usize("SLUICE_BENCH_CLOCK_SLOWDOWN") {
        assert!(
            f >= 1,
            "SLUICE_BENCH_CLOCK_SLOWDOWN={f}: the slowdown is a factor of 1 or more"
        );
        staged.put(sluice_infra::clock::Clock::calibrate().slowed(f as f64));
    }
    let a = assemble(&entries, &cpu, &pool, staged).expect("runtime");
    (a.vm, a.cli)
}

/// `--only <w>` against the cases a benchmark can run with these options: when no name
/// contains `w` (is `w`, when `exact`) the benchmark stops with exit code 2, naming `w` and
/// listing the cases, rather than print an empty table (its ratios NaN). `engine` runs
/// several benchmarks, each taking what matches: no check there.
pub(crate) fn check_only(o: &Opts, cases: &[&str], exact: bool) {
    let Some(w) = o.only.as_deref() else { return };
    if o.what == "engine" {
        return;
    }
    if cases
        .iter()
        .any(|c| if exact { *c == w } else { c.contains(w) })
    {
        return;
    }
    let how = if exact { "is" } else { "contains" };
    eprintln!(
        "sluice-bench {}: --only {w:?} matches no case (no case name {how} it); the cases: {}",
        o.what,
        cases
            .iter()
            .map(|c| format!("{c:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    std::process::exit(2);
}

/// A numeric environment knob of the benchmark (`None` when unset). A value that is not a
/// number stops the benchmark: a mistyped knob would otherwise measure the default quietly.
pub(crate) fn env_usize(name: &str) -> Option<usize> {
    let v = std::env::var(name).ok()?;
    match v.trim().parse() {
        Ok(n) => Some(n),
        Err(e) => panic!("{name}={v:?}: not a number ({e})"),
    }
}

pub(crate) fn cli(vm: &mut Vlib, t: &CommandTree<Vlib>, cmd: &str) -> String {
    t.execute(vm, cmd)
        .unwrap_or_else(|e| panic!("bench setup command `{cmd}' failed: {e}"))
}

struct Run {
    mpps: f64,
    clocks: Vec<(String, f64, f64)>, // node, clocks/packet, vectors/call
}

/// Runs one stream to completion on the main thread and reads per-node statistics.
fn run_stream(
    vm: &mut Vlib,
    t: &CommandTree<Vlib>,
    node: &str,
    packets: u64,
    maxframe: usize,
    worker: Option<usize>,
) -> Run {
    let _ = t.execute(vm, "packet-generator delete s");
    let w = worker.map(|w| format!(" worker {w}")).unwrap_or_default();
    cli(
        vm,
        t,
        &format!(
            "packet-generator new {{ name s limit {packets} size 64-64 node {node} interface pg0 maxframe {maxframe}{w} data {{ IP4: 02:fe:00:00:00:01 -> 02:fe:00:00:00:02 UDP: 10.0.0.1 - 10.0.3.232 -> 10.1.0.1 UDP: 1024 - 1087 -> 53 incrementing 18 }} }}"
        ),
    );
    cli(vm, t, "clear runtime");
    let null = vm.registry.find("null-sink").unwrap();
    let before = total_vectors(vm, null);
    cli(vm, t, "packet-generator enable");
    let t0 = Instant::now();
    while sluice_vnet::pg::any_enabled(vm) {
        vm.run_main_once();
    }
    // Wait for workers to finish what was handed off.
    while total_vectors(vm, null) < before + packets && t0.elapsed().as_secs() < 120 {
        vm.run_main_once();
    }
    let dt = t0.elapsed().as_secs_f64();
    let mut clocks = Vec::new();
    for n in vm.registry.nodes() {
        for (th, s) in n.stats.per_thread.iter().enumerate() {
            let (c, v, calls) = (s.clocks.get(), s.vectors.get(), s.calls.get());
            if v > 0 {
                let name = if th == 0 {
                    n.name.clone()
                } else {
                    format!("{} (wk{})", n.name, th - 1)
                };
                clocks.push((name, c as f64 / v as f64, v as f64 / calls as f64));
            }
        }
    }
    Run {
        mpps: packets as f64 / dt / 1e6,
        clocks,
    }
}

pub(crate) fn total_vectors(vm: &Vlib, n: NodeIndex) -> u64 {
    vm.registry
        .node(n)
        .stats
        .per_thread
        .iter()
        .map(|s| s.vectors.get())
        .sum()
}

/// The directory for a benchmark's inputs: `--keep-inputs` (kept), else a temporary one
/// named `<tag>-<pid>` (removed by [`done_with_inputs`]).
pub(crate) fn inputs_dir(o: &Opts, tag: &str) -> std::path::PathBuf {
    let dir = o
        .keep_inputs
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("{tag}-{}", std::process::id())));
    let _ = std::fs::create_dir_all(&dir);
    dir
}

/// Removes the inputs directory unless `--keep-inputs` asked to keep it.
pub(crate) fn done_with_inputs(o: &Opts, dir: &std::path::Path) {
    if o.keep_inputs.is_none() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// With `--keep-inputs`, writes a case's routes there (`<prefix>/<len>` a line).
pub(crate) fn keep_routes(o: &Opts, file: &str, routes: impl Iterator<Item = String>) {
    let Some(dir) = &o.keep_inputs else { return };
    let mut s = String::new();
    for r in routes {
        s.push_str(&r);
        s.push('\n');
    }
    if let Err(e) = std::fs::write(dir.join(file), s) {
        eprintln!("sluice-bench: cannot keep {file}: {e}");
    }
}

/// Writes frames to a pcap file (inputs for pcap-replay streams).
pub(crate) fn write_pcap(path: &std::path::Path, frames: &[Vec<u8>]) {
    let f = std::fs::File::create(path).expect("pcap file");
    let mut w = pcap_file::pcap::PcapWriter::new(f).expect("pcap writer");
    // SLUICE_BENCH_PCAP_PACKETS=<n>: only the first n frames (a short pcap, as the pg and
    // Python tests replay: pg-input's burst then wraps around the pcap many times).
    let n =
        env_usize("SLUICE_BENCH_PCAP_PACKETS").map_or(frames.len(), |n| n.clamp(1, frames.len()));
    for fr in &frames[..n] {
        w.write_packet(&pcap_file::pcap::PcapPacket::new(
            std::time::Duration::ZERO,
            fr.len() as u32,
            fr,
        ))
        .expect("pcap write");
    }
}

/// Result columns of the FIB-scale tables, after the case's own columns.
pub(crate) const FIB_COLS: [&str; 5] = ["Mpps min", "median", "max", "× 1 route", "path clk/pkt"];

/// Writes a Markdown table header: the `lead` columns, one per node of `path`, the `tail`
/// columns.
pub(crate) fn table_header(out: &mut String, lead: &[&str], path: &[&str], tail: &[&str]) {
    let cols: Vec<&str> = lead.iter().chain(path).chain(tail).copied().collect();
    let _ = writeln!(out, "| {} |", cols.join(" | "));
    let _ = writeln!(out, "|{}", "---|".repeat(cols.len()));
}

/// The per-node clocks/packet as table cells (`12.3 | 4.5 | ...`) and their sum (the path's
/// clocks/packet).
pub(crate) fn clock_cells(node_clocks: &[(String, f64)]) -> (f64, String) {
    let cells: Vec<String> = node_clocks.iter().map(|x| format!("{:.1}", x.1)).collect();
    (node_clocks.iter().map(|x| x.1).sum(), cells.join(" | "))
}

pub(crate) fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[0], v[v.len() / 2], v[v.len() - 1])
}

/// Xorshift generator for reproducible synthetic tables and traffic.
pub(crate) struct Rng(pub u64);
impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Lines of the real routing table in `../shared/data`, if present.
pub(crate) fn real_table_lines() -> Option<impl Iterator<Item = String>> {
    use std::io::BufRead;
    let paths = [
        "../shared/data/full-table-prefixes-2024.txt.gz",
        "../../shared/data/full-table-prefixes-2024.txt.gz",
    ];
    let f = paths.iter().find_map(|p| std::fs::File::open(p).ok())?;
    let r = std::io::BufReader::new(flate2::read::GzDecoder::new(f));
    Some(r.lines().map_while(Result::ok))
}

/// Per-node clocks/packet as a JSON object (`{"ip4-input": 13.4, ...}`), in path order.
pub(crate) fn nodes_json(nodes: &[(String, f64)]) -> String {
    let items: Vec<String> = nodes
        .iter()
        .map(|(n, c)| format!("\"{n}\": {c:.2}"))
        .collect();
    format!("{{{}}}", items.join(", "))
}

/// A measured path: Mpps (min, median, max) and median clocks/packet of each node of it.
pub(crate) struct PathResult {
    pub mpps: (f64, f64, f64),
    pub node_clocks: Vec<(String, f64)>,
}

impl PathResult {
    /// The median clocks/packet of node `name` of the path (panics if the path lacks it).
    pub fn clocks_of(&self, name: &str) -> f64 {
        self.node_clocks
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("{name} not on the measured path"))
            .1
    }
}

/// What [`replay_path`] replays and measures: [`Replay::new`] and the fields to change.
pub(crate) struct Replay<'a> {
    /// The frames, replayed in a loop.
    pub pcap: &'a std::path::Path,
    /// The pg interface receiving them (`pg0`).
    pub source: &'a str,
    /// The node the stream starts at (`None`: the stream's default).
    pub node: Option<&'a str>,
    /// The nodes whose clocks/packet are measured, in order.
    pub path: &'a [&'a str],
    /// The case's name (in a failed run's message).
    pub name: &'a str,
    /// Where the path ends ([`Sink::Tx`]).
    pub sink: Sink,
    /// Called ahead of each run (warm-up included), e.g. to flush learned state so every
    /// run starts from the same table (nothing).
    pub before: &'a dyn Fn(&mut Vlib, &CommandTree<Vlib>),
    /// Called once the runs are done, ahead of the leak check, e.g. to take down what
    /// holds buffers by design (nothing).
    pub after: &'a dyn Fn(&mut Vlib, &CommandTree<Vlib>),
}

impl<'a> Replay<'a> {
    /// `pcap` from pg0 into the stream's default node, measuring `path`, ending at pg-tx,
    /// nothing called before or after the runs.
    pub(crate) fn new(pcap: &'a std::path::Path, path: &'a [&'a str], name: &'a str) -> Self {
        Replay {
            pcap,
            source: "pg0",
            node: None,
            path,
            name,
            sink: Sink::Tx,
            before: &|_, _| {},
            after: &|_, _| {},
        }
    }
}

/// Where a [`replay_path`] path ends, and so whether a dropped packet fails the run.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Sink {
    /// `pg-tx`: a forwarding path; any packet dropped on the way panics ("the path is not
    /// what it claims").
    Tx,
    /// `error-drop`: a path whose every packet is dropped by design; drops are not checked
    /// (the caller's `after` checks their reasons).
    Drop,
}

impl Sink {
    fn node(self) -> &'static str {
        match self {
            Sink::Tx => "pg-tx",
            Sink::Drop => "error-drop",
        }
    }
}

/// Called as each measured run of [`replay_path`] starts (after its warm-up run): with
/// callgrind's `--zero-before=measured_run_starts` the profile counts only the last measured
/// run (`--packets` / 2 packets), not the setup (e.g. NAT's session creations) or the
/// warm-up before it.
#[inline(never)]
#[no_mangle]
pub extern "C" fn measured_run_starts() {
    std::hint::black_box(());
}

/// Replays `r.pcap` from `r.source` (into `r.node`, else the stream's default) once to
/// warm up and then `o.runs` times, `o.packets / 2` packets each, on the main thread, each
/// run ending when the [`Sink`] node has seen its packets; reads the clocks/packet of every
/// node of `r.path` from the runtime statistics. Fails if anything reached `error-drop`
/// (the path is not what it claims; unless the sink is `error-drop`) or buffers leaked.
pub(crate) fn replay_path(
    o: &Opts,
    mut vm: Vlib,
    t: &CommandTree<Vlib>,
    r: Replay<'_>,
) -> PathResult {
    let Replay {
        pcap,
        source,
        node,
        path,
        name,
        sink,
        before,
        after,
    } = r;
    let drop_sink = sink == Sink::Drop;
    let sink = vm.registry.find(sink.node()).expect("sink node");
    let packets = o.packets / 2;
    let node = node.map(|n| format!(" node {n}")).unwrap_or_default();
    // SLUICE_BENCH_MAXFRAME: smaller frames from pg-input (and so through the whole path),
    // to measure what the frame's working set costs in the caches.
    let maxframe = env_usize("SLUICE_BENCH_MAXFRAME")
        .map(|m| format!(" maxframe {m}"))
        .unwrap_or_default();
    let mut mpps = Vec::new();
    let mut clocks: Vec<Vec<f64>> = vec![Vec::new(); path.len()];
    for run in 0..=o.runs {
        before(&mut vm, t);
        let _ = t.execute(&mut vm, "packet-generator delete s");
        cli(
            &mut vm,
            t,
            &format!(
                "packet-generator new pcap {} source {source} name s limit {packets}{node}{maxframe}",
                pcap.display()
            ),
        );
        cli(&mut vm, t, "clear runtime");
        if run > 0 {
            measured_run_starts();
        }
        let before = total_vectors(&vm, sink);
        cli(&mut vm, t, "packet-generator enable");
        let t1 = Instant::now();
        while total_vectors(&vm, sink) < before + packets && t1.elapsed().as_secs() < 120 {
            vm.run_main_once();
        }
        let dt = t1.elapsed().as_secs_f64();
        if run == 0 {
            continue; // warm-up
        }
        mpps.push(packets as f64 / dt / 1e6);
        for (k, n) in path.iter().enumerate() {
            let i = vm.registry.find(n).expect("node");
            let s = &vm.registry.node(i).stats.per_thread[0];
            clocks[k].push(s.clocks.get() as f64 / s.vectors.get().max(1) as f64);
        }
    }
    let drops: u64 = vm
        .registry
        .find("error-drop")
        .map(|i| vm.registry.node(i).stats.per_thread[0].vectors.get())
        .unwrap_or(0);
    assert!(
        drop_sink || drops == 0,
        "{name}: packets dropped, the path is not what it claims"
    );
    after(&mut vm, t);
    vm.stop_workers();
    assert_eq!(vm.pool.stats().in_use, 0, "benchmark leaked buffers");
    PathResult {
        mpps: stats(mpps),
        node_clocks: path
            .iter()
            .zip(clocks)
            .map(|(n, c)| (n.to_string(), stats(c).1))
            .collect(),
    }
}

fn setup_pg(vm: &mut Vlib, t: &CommandTree<Vlib>) {
    cli(vm, t, "create packet-generator interface pg0");
    cli(vm, t, "set interface state pg0 up");
}

fn bench_null(o: &Opts, out: &mut String, json: &mut Vec<String>) {
    let (mut vm, t) = build(0);
    setup_pg(&mut vm, &t);
    // Warm-up.
    run_stream(&mut vm, &t, "null-sink", o.packets / 10 + 1, 256, None);
    let mut mpps = Vec::new();
    let mut pg = Vec::new();
    let mut null = Vec::new();
    for _ in 0..o.runs {
        let r = run_stream(&mut vm, &t, "null-sink", o.packets, 256, None);
        mpps.push(r.mpps);
        for (n, c, _) in &r.clocks {
            if n == "pg-input" {
                pg.push(*c);
            }
            if n == "null-sink" {
                null.push(*c);
            }
        }
    }
    let (a, m, b) = stats(mpps.clone());
    let _ = writeln!(out, "## (a) pg -> null-sink, 64-byte IPv4/UDP, one core\n");
    let _ = writeln!(out, "| metric | min | median | max |\n|---|---|---|---|");
    let _ = writeln!(out, "| Mpps | {a:.2} | {m:.2} | {b:.2} |");
    let (a2, m2, b2) = stats(pg);
    let _ = writeln!(
        out,
        "| pg-input clocks/packet | {a2:.1} | {m2:.1} | {b2:.1} |"
    );
    let (a3, m3, b3) = stats(null);
    let _ = writeln!(
        out,
        "| null-sink clocks/packet | {a3:.1} | {m3:.1} | {b3:.1} |\n"
    );
    json.push(format!(
        "\"pg_null_mpps\": {{\"min\": {a:.3}, \"median\": {m:.3}, \"max\": {b:.3}, \"runs\": {mpps:?}}}"
    ));
    vm.stop_workers();
    assert_eq!(vm.pool.stats().in_use, 0, "benchmark leaked buffers");
}

fn bench_chain(o: &Opts, out: &mut String, json: &mut Vec<String>) {
    let (mut vm, t) = build(0);
    setup_pg(&mut vm, &t);
    let _ = writeln!(
        out,
        "## (b) pg -> {CHAIN} pass-through nodes -> null-sink: clocks/packet per node\n"
    );
    let _ = writeln!(
        out,
        "| vector size | per pass node min | median | max | chain Mpps median | pg-input clk/pkt median |\n|---|---|---|---|---|---|"
    );
    for vs in [256usize, 32, 1] {
        let pk = if vs == 1 {
            o.packets / 20
        } else {
            o.packets / 2
        }
        .max(1000);
        run_stream(&mut vm, &t, "pass-0", pk / 10 + 1, vs, None);
        let mut per_node = Vec::new();
        let mut mpps = Vec::new();
        let mut pgc = Vec::new();
        for _ in 0..o.runs {
            let r = run_stream(&mut vm, &t, "pass-0", pk, vs, None);
            mpps.push(r.mpps);
            let pass: Vec<f64> = r
                .clocks
                .iter()
                .filter(|(n, _, _)| n.starts_with("pass-"))
                .map(|(_, c, _)| *c)
                .collect();
            per_node.push(pass.iter().sum::<f64>() / pass.len() as f64);
            if let Some((_, c, _)) = r.clocks.iter().find(|(n, _, _)| n == "pg-input") {
                pgc.push(*c);
            }
        }
        let (a, m, b) = stats(per_node.clone());
        let (_, mm, _) = stats(mpps);
        let (_, pm, _) = stats(pgc);
        let _ = writeln!(
            out,
            "| {vs} | {a:.2} | {m:.2} | {b:.2} | {mm:.2} | {pm:.1} |"
        );
        json.push(format!(
            "\"chain_clocks_per_node_v{vs}\": {{\"min\": {a:.3}, \"median\": {m:.3}, \"max\": {b:.3}, \"runs\": {per_node:?}}}"
        ));
    }
    out.push('\n');
    vm.stop_workers();
    assert_eq!(vm.pool.stats().in_use, 0, "benchmark leaked buffers");
}

fn bench_handoff(o: &Opts, out: &mut String, json: &mut Vec<String>) {
    use sluice_graph::handoff::HandoffQueue;
    use std::sync::Arc;
    let _ = writeln!(out, "## (c) handoff between two threads\n");
    let _ = writeln!(out, "| case | min Mpps | median | max |\n|---|---|---|---|");
    let mut raw = Vec::new();
    for _ in 0..o.runs {
        let q = Arc::new(HandoffQueue::new(sluice_graph::HANDOFF_RING));
        let q2 = q.clone();
        let n = o.packets;
        let t0 = Instant::now();
        let prod = std::thread::spawn(move || {
            let _ = sluice_graph::pin_to_core(0);
            let chunk: Vec<BufIdx> = (0..256).map(BufIdx).collect();
            let mut sent = 0u64;
            while sent < n {
                let k = ((n - sent) as usize).min(256);
                sent += q2.enqueue(&chunk[..k], NodeIndex(1)) as u64;
            }
        });
        let _ = sluice_graph::pin_to_core(1);
        let mut got = 0u64;
        let mut buf = [(BufIdx(0), NodeIndex(0)); 256];
        while got < n {
            got += q.dequeue(&mut buf) as u64;
        }
        prod.join().unwrap();
        raw.push(n as f64 / t0.elapsed().as_secs_f64() / 1e6);
    }
    let (a, m, b) = stats(raw.clone());
    let _ = writeln!(
        out,
        "| raw queue, 256-entry batches | {a:.2} | {m:.2} | {b:.2} |"
    );
    json.push(format!(
        "\"handoff_raw_mpps\": {{\"min\": {a:.3}, \"median\": {m:.3}, \"max\": {b:.3}, \"runs\": {raw:?}}}"
    ));

    let (mut vm, t) = build(1);
    setup_pg(&mut vm, &t);
    run_stream(&mut vm, &t, "null-sink", o.packets / 10 + 1, 256, Some(0));
    let mut g = Vec::new();
    for _ in 0..o.runs {
        g.push(run_stream(&mut vm, &t, "null-sink", o.packets / 2, 256, Some(0)).mpps);
    }
    let (a, m, b) = stats(g.clone());
    let _ = writeln!(
        out,
        "| pg (main) -> handoff -> null-sink (worker 0) | {a:.2} | {m:.2} | {b:.2} |\n"
    );
    json.push(format!(
        "\"handoff_graph_mpps\": {{\"min\": {a:.3}, \"median\": {m:.3}, \"max\": {b:.3}, \"runs\": {g:?}}}"
    ));
    let congestion = vm
        .registry
        .find("pg-input")
        .map(|i| vm.registry.node(i).stats.counter_total(1))
        .unwrap_or(0);
    let _ = writeln!(out, "handoff congestion drops during the graph runs: {congestion} (packets counted as delivered only when the worker's null-sink saw them)\n");
    vm.stop_workers();
    assert_eq!(vm.pool.stats().in_use, 0, "benchmark leaked buffers");
}

/// `sluice-bench run ...`: the end-to-end RFC 2544 harness (`python/sluice_bench`). Prepares
/// the pinned virtualenv (`scripts/venv.sh`) and replaces this process with
/// `.venv/bin/python -m sluice_bench run ...`, passing the directory of this binary so the
/// harness finds the `sluice` and `sluice-bench` built next to it.
fn exec_harness(args: &[std::ffi::OsString]) -> ! {
    use std::os::unix::process::CommandExt;
    let repo = std::env::var_os("SLUICE_REPO")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
    let venv = repo.join("scripts/venv.sh");
    match std::process::Command::new("bash")
        .arg(&venv)
        .current_dir(&repo)
        .status()
    {
        Ok(s) if s.success() => {}
        Ok(s) => {
            eprintln!("sluice-bench: {} failed ({s})", venv.display());
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("sluice-bench: cannot run {}: {e}", venv.display());
            std::process::exit(1);
        }
    }
    let mut cmd = std::process::Command::new(repo.join(".venv/bin/python"));
    cmd.arg("-m").arg("sluice_bench").arg("run").args(args);
    cmd.env("PYTHONPATH", repo.join("python"));
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.to_path_buf()))
    {
        cmd.env("SLUICE_BENCH_BIN_DIR", dir);
    }
    let e = cmd.exec();
    eprintln!("sluice-bench: cannot start the Python harness: {e}");
    std::process::exit(1);
}

fn main() {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv.get(1).map(|a| a == "run").unwrap_or(false) {
        exec_harness(&argv[2..]);
    }
    let o = Opts::parse();
    let mut out = String::new();
    let mut json = Vec::new();
    let clock = sluice_infra::clock::Clock::calibrate();
    let _ = writeln!(
        out,
        "# Sluice engine benchmark\n\nTSC {:.3} GHz, {} runs per case, {} packets per run, {} cores\n",
        clock.hz() / 1e9,
        o.runs,
        o.packets,
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    match o.what.as_str() {
        "engine" => {
            bench_null(&o, &mut out, &mut json);
            bench_chain(&o, &mut out, &mut json);
            bench_handoff(&o, &mut out, &mut json);
            ip4::bench_ip4(&o, &mut out, &mut json);
            ip6::bench_ip6(&o, &mut out, &mut json);
            l2::bench_l2(&o, &mut out, &mut json);
        }
        "null" => bench_null(&o, &mut out, &mut json),
        "chain" => bench_chain(&o, &mut out, &mut json),
        "handoff" => bench_handoff(&o, &mut out, &mut json),
        "ip4" => ip4::bench_ip4(&o, &mut out, &mut json),
        "ip6" => ip6::bench_ip6(&o, &mut out, &mut json),
        "ip6-lpm" => ip6::bench_ip6_lpm(&o, &mut out, &mut json),
        "l2" => l2::bench_l2(&o, &mut out, &mut json),
        "memif" => memif::bench_memif(&o, &mut out, &mut json),
        "nat" => nat::bench_nat(&o, &mut out, &mut json),
        "acl" => acl::bench_acl(&o, &mut out, &mut json),
        "stats" => stats::bench_stats(&o, &mut out, &mut json),
        "tunnel" => tunnel::bench_tunnel(&o, &mut out, &mut json),
        w => {
            eprintln!(
                "sluice-bench: unknown benchmark `{w}\' (engine, null, chain, handoff, ip4, ip6, ip6-lpm, l2, memif, nat, acl, stats, tunnel, run)"
            );
            std::process::exit(2);
        }
    }
    print!("{out}");
    if let Some(p) = &o.json {
        let body = format!(
            "{{\n  \"tsc_ghz\": {:.4},\n  {}\n}}\n",
            clock.hz() / 1e9,
            json.join(",\n  ")
        );
        if let Err(e) = std::fs::write(p, body) {
            eprintln!("sluice-bench: cannot write {}: {e}", p.display());
        }
    }
}
