//! The daemon's side of the segment: what is copied from the runtime, when, and the stats
//! socket that hands the segment to readers.
//!
//! The main thread copies, every `statseg { update-interval }` (1 s by default), from the
//! counters the runtime keeps anyway — nothing is counted twice, and workers do no extra
//! work: they keep bumping their own per-thread slots.
//!
//! | entries | copied from |
//! |---|---|
//! | `/if/names`, `/if/rx`, `/if/tx` (combined), `/if/drops`, `/if/punt`, `/if/ip4`, `/if/ip6`, `/if/rx-miss`, `/if/tx-error` `[thread][sw_if_index]` | `Interface::counters` (`IfCounters`, `show interface`) |
//! | `/interfaces/<name>/<counter>` | symlinks to the item of the vectors above |
//! | `/sys/node/names`, `/sys/node/{calls,vectors,clocks,suspends}` `[thread][node]` | `NodeStats` (`show runtime`) |
//! | `/nodes/<node>/{calls,vectors,clocks,suspends}` | symlinks to the item of the vectors above |
//! | `/err/<node>/<counter>` `[thread][0]` | node counters (`show errors`) |
//! | `/buffer-pools/default-numa-0/{cached,used,available,alloc-failures,lent}` | `sluice_graph::buffer_use` (`show buffers`: `used` without the buffers lent to a driver library, `lent` those) |
//! | `/sys/num_worker_threads`, `/sys/heartbeat`, `/sys/boottime`, `/sys/last_update`, `/sys/update_interval` | the runtime |
//! | `/sys/vector_rate`, `/sys/vector_rate_per_worker`, `/sys/input_rate` | deltas of `NodeStats` over the last interval |
//! | `/sys/loops`, `/sys/loops_per_worker` | `Shared::loops` (one counter per thread) |
//!
//! When interfaces or nodes are added or deleted, the next update lays the directory out
//! again (a new epoch) in the same write section that stores the values, so a reader never
//! sees the new layout with zeros in it. If the entries do not fit in `statseg { size }`,
//! the symlinks, then the per-node vectors are left out, with one warning.

use crate::http::ServerCounters;
use crate::shm;
use crate::writer::{Segment, Shape, Spec, Writer};
use crate::StatsError;
use sluice_cli::{Args, CliError, CommandTree};
use sluice_graph::{NodeKind, Vlib};
use sluice_infra::unix_socket::{OwnedListener, SocketPerms};
use sluice_vnet::interface::{counter, Interfaces};
use std::fmt::Write as _;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// `statseg { ... }`.
#[derive(Clone, Debug, PartialEq)]
pub struct StatsConfig {
    /// `socket-name`: where readers get the segment (default: `stats.sock` beside the CLI
    /// socket).
    pub socket: Option<PathBuf>,
    /// `size`: segment size in bytes.
    pub size: usize,
    /// `update-interval`: seconds between two copies.
    pub interval: f64,
    /// `per-node-counters on|off`: the `/sys/node/*` vectors and `/nodes/*` symlinks.
    pub per_node_counters: bool,
    /// `disable` (Sluice's own key): no segment, no stats socket.
    pub disabled: bool,
}

/// Default segment size (VPP's default, 32 MiB; only the pages written are backed).
pub const DEFAULT_SIZE: usize = 32 << 20;
/// Default update interval, seconds.
pub const DEFAULT_INTERVAL: f64 = 1.0;
/// Bounds of `update-interval`, seconds.
pub const INTERVAL_RANGE: std::ops::RangeInclusive<f64> = 0.001..=3600.0;

impl Default for StatsConfig {
    fn default() -> Self {
        StatsConfig {
            socket: None,
            size: DEFAULT_SIZE,
            interval: DEFAULT_INTERVAL,
            per_node_counters: true,
            disabled: false,
        }
    }
}

/// Interface counters exported as simple vectors: (path, `counter` index).
const IF_SIMPLE: [(&str, usize); 6] = [
    ("drops", counter::DROPS),
    ("punt", counter::PUNT),
    ("ip4", counter::IP4),
    ("ip6", counter::IP6),
    ("rx-miss", counter::RX_MISS),
    ("tx-error", counter::TX_ERROR),
];
/// Node statistics vectors.
const NODE_STATS: [&str; 4] = ["calls", "vectors", "clocks", "suspends"];
/// Buffer pool scalars.
const POOL: &str = "default-numa-0";
const POOL_STATS: [&str; 5] = ["cached", "used", "available", "alloc-failures", "lent"];

/// Entry indices of one layout.
#[derive(Default)]
struct Map {
    workers: usize,
    vector_rate: usize,
    input_rate: usize,
    heartbeat: usize,
    boottime: usize,
    last_update: usize,
    interval: usize,
    vrate_per_worker: usize,
    loops: usize,
    loops_per_worker: usize,
    pool: [usize; 5],
    if_rx: usize,
    if_tx: usize,
    if_simple: [usize; 6],
    nodes: Option<[usize; 4]>,
    errs: Vec<(usize, usize, usize)>,
}

/// What makes the directory change: interfaces (count, deleted) and nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Shape0 {
    ifs: usize,
    deleted: usize,
    nodes: usize,
}

/// Per-thread sums of the previous update, for rates.
#[derive(Default, Clone)]
struct Prev {
    at: f64,
    vectors: Vec<u64>,
    calls: Vec<u64>,
    input: Vec<u64>,
    loops: Vec<u64>,
}

/// The stats socket: a thread that hands a read-only fd of the segment to each client.
struct SocketServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl SocketServer {
    fn start(path: &Path, perms: &SocketPerms, fd: OwnedFd) -> Result<SocketServer, String> {
        // The project's one way to bind a Unix socket: checked directory, stale socket
        // replaced, a live one or a non-socket refused, mode and group set.
        let l = OwnedListener::bind(path, perms).map_err(|e| e.to_string())?;
        l.set_nonblocking(true).map_err(|e| e.to_string())?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::Builder::new()
            .name("sluice_stats".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    let mut p = libc::pollfd {
                        fd: l.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: one live pollfd.
                    unsafe { libc::poll(&mut p, 1, 200) };
                    while let Ok((c, _)) = l.accept() {
                        // A blocking send of one byte and an fd: the socket buffer takes it.
                        let _ = c.set_nonblocking(false);
                        let _ = c.set_write_timeout(Some(std::time::Duration::from_secs(1)));
                        if let Err(e) = shm::send_fd(&c, fd.as_raw_fd()) {
                            log::debug!("stats socket: {e}");
                        }
                    }
                }
            })
            .map_err(|e| format!("cannot start the stats socket thread: {e}"))?;
        Ok(SocketServer {
            path: path.to_path_buf(),
            stop,
            handle: Some(handle),
        })
    }
}

impl Drop for SocketServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        // The thread's OwnedListener unlinked the socket (if it is still ours).
    }
}

/// The segment and its collector (a `Vlib` extension: [`StatsExt`]).
pub struct StatsSegment {
    seg: Segment,
    cfg: StatsConfig,
    map: Map,
    shape: Option<Shape0>,
    /// 0: everything; 1: no symlinks; 2: no symlinks, no per-node vectors.
    level: u8,
    prev: Prev,
    next_due: f64,
    boottime: f64,
    last_clocks: u64,
    total_clocks: u64,
    server: Option<SocketServer>,
    metrics: Option<(std::net::SocketAddr, Arc<ServerCounters>)>,
}

/// The `Vlib` extension holding the segment (`None` when disabled or not started).
#[derive(Default)]
pub struct StatsExt(pub Option<StatsSegment>);

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn shape_of(vm: &Vlib) -> Shape0 {
    let (ifs, deleted) = vm.ext::<Interfaces>().map_or((0, 0), |i| {
        (i.list.len(), i.list.iter().filter(|i| i.deleted).count())
    });
    Shape0 {
        ifs,
        deleted,
        nodes: vm.registry.nodes().len(),
    }
}

/// The directory for the runtime as it is now, at `level` (see [`StatsSegment`]).
fn specs(vm: &Vlib, per_node: bool, level: u8) -> (Vec<Spec>, Map) {
    let th = vm.n_threads() as u32;
    let mut v: Vec<Spec> = Vec::new();
    let mut m = Map::default();
    let add = |v: &mut Vec<Spec>, name: String, shape: Shape| {
        v.push(Spec::new(name, shape));
        v.len() - 1
    };
    let per_thread = Shape::Simple { rows: th, cols: 1 };
    let gauges = Shape::Gauges { rows: th, cols: 1 };
    m.workers = add(&mut v, "/sys/num_worker_threads".into(), Shape::Scalar);
    m.vector_rate = add(&mut v, "/sys/vector_rate".into(), Shape::Scalar);
    m.input_rate = add(&mut v, "/sys/input_rate".into(), Shape::Scalar);
    m.heartbeat = add(&mut v, "/sys/heartbeat".into(), Shape::Scalar);
    m.boottime = add(&mut v, "/sys/boottime".into(), Shape::Scalar);
    m.last_update = add(&mut v, "/sys/last_update".into(), Shape::Scalar);
    m.interval = add(&mut v, "/sys/update_interval".into(), Shape::Scalar);
    m.vrate_per_worker = add(&mut v, "/sys/vector_rate_per_worker".into(), gauges.clone());
    m.loops = add(&mut v, "/sys/loops".into(), per_thread.clone());
    m.loops_per_worker = add(&mut v, "/sys/loops_per_worker".into(), gauges);
    for (k, s) in POOL_STATS.iter().enumerate() {
        m.pool[k] = add(&mut v, format!("/buffer-pools/{POOL}/{s}"), Shape::Scalar);
    }
    // Interfaces.
    let ifs: Vec<(String, bool)> = vm.ext::<Interfaces>().map_or(Vec::new(), |i| {
        i.list.iter().map(|i| (i.name.clone(), i.deleted)).collect()
    });
    let n_if = ifs.len() as u32;
    let names = ifs
        .iter()
        .map(|(n, d)| if *d { String::new() } else { n.clone() })
        .collect();
    add(&mut v, "/if/names".into(), Shape::Names(names));
    let comb = Shape::Combined {
        rows: th,
        cols: n_if,
    };
    let simple = Shape::Simple {
        rows: th,
        cols: n_if,
    };
    m.if_rx = add(&mut v, "/if/rx".into(), comb.clone());
    m.if_tx = add(&mut v, "/if/tx".into(), comb);
    for (k, (s, _)) in IF_SIMPLE.iter().enumerate() {
        m.if_simple[k] = add(&mut v, format!("/if/{s}"), simple.clone());
    }
    if level == 0 {
        for (i, (name, deleted)) in ifs.iter().enumerate() {
            if *deleted {
                continue;
            }
            let links = [("rx", m.if_rx), ("tx", m.if_tx)]
                .into_iter()
                .chain(IF_SIMPLE.iter().map(|(s, _)| *s).zip(m.if_simple));
            for (s, target) in links {
                add(
                    &mut v,
                    format!("/interfaces/{name}/{s}"),
                    Shape::Symlink {
                        target,
                        item: i as u32,
                    },
                );
            }
        }
    }
    // Nodes.
    let nodes = vm.registry.nodes();
    if per_node && level < 2 {
        add(
            &mut v,
            "/sys/node/names".into(),
            Shape::Names(nodes.iter().map(|n| n.name.clone()).collect()),
        );
        let shape = Shape::Simple {
            rows: th,
            cols: nodes.len() as u32,
        };
        let mut idx = [0; 4];
        for (k, s) in NODE_STATS.iter().enumerate() {
            idx[k] = add(&mut v, format!("/sys/node/{s}"), shape.clone());
        }
        m.nodes = Some(idx);
        if level == 0 {
            for (i, n) in nodes.iter().enumerate() {
                for (k, s) in NODE_STATS.iter().enumerate() {
                    add(
                        &mut v,
                        format!("/nodes/{}/{s}", n.name),
                        Shape::Symlink {
                            target: idx[k],
                            item: i as u32,
                        },
                    );
                }
            }
        }
    }
    // Node counters (`show errors`).
    for (i, n) in nodes.iter().enumerate() {
        for (c, d) in n.counters.iter().enumerate() {
            let e = add(
                &mut v,
                format!("/err/{}/{}", n.name, d.name),
                per_thread.clone(),
            );
            m.errs.push((i, c, e));
        }
    }
    (v, m)
}

impl StatsSegment {
    /// Creates the segment, fills it once and serves it on `socket`. `socket_required`: a
    /// socket that cannot be served is an error (else a warning: the segment still feeds
    /// `/metrics`).
    pub fn start(
        vm: &mut Vlib,
        cfg: &StatsConfig,
        socket: &Path,
        perms: &SocketPerms,
        socket_required: bool,
    ) -> Result<(), StatsError> {
        if cfg.disabled {
            return Ok(());
        }
        let seg = Segment::create(cfg.size, vm.n_threads())?;
        let now = vm.shared.clock.now_secs();
        let mut s = StatsSegment {
            seg,
            cfg: cfg.clone(),
            map: Map::default(),
            shape: None,
            level: 0,
            prev: Prev::default(),
            next_due: now,
            boottime: unix_now() - (now - vm.start_secs),
            last_clocks: 0,
            total_clocks: 0,
            server: None,
            metrics: None,
        };
        // Filled before it is served: a client that connects at once finds every entry.
        s.update(vm);
        let fd = shm::readonly_fd(s.seg.fd())
            .map_err(|e| StatsError::Io("cannot reopen the statistics segment".into(), e))?;
        s.server = match SocketServer::start(socket, perms, fd) {
            Ok(s) => Some(s),
            Err(e) if socket_required => {
                return Err(StatsError::Socket(format!(
                    "cannot serve the stats socket {}: {e}",
                    socket.display()
                )))
            }
            Err(e) => {
                log::warn!(
                    "statistics segment not served on {}: {e} (set statseg {{ socket-name <path> }})",
                    socket.display()
                );
                None
            }
        };
        s.next_due = now + s.cfg.interval;
        vm.put_ext(StatsExt(Some(s)));
        Ok(())
    }

    /// The stats socket, when served.
    pub fn socket(&self) -> Option<&Path> {
        self.server.as_ref().map(|s| s.path.as_path())
    }

    /// A new read-only view of the segment (for the metrics thread).
    pub fn reader(&self) -> Result<crate::StatClient, StatsError> {
        let fd = shm::readonly_fd(self.seg.fd())
            .map_err(|e| StatsError::Io("cannot reopen the statistics segment".into(), e))?;
        crate::StatClient::from_fd(&fd)
    }

    /// Records the metrics server for `show statistics segment`.
    pub fn set_metrics(&mut self, addr: std::net::SocketAddr, c: Arc<ServerCounters>) {
        self.metrics = Some((addr, c));
    }

    /// Copies every counter into the segment (laying the directory out again first when
    /// interfaces or nodes changed).
    pub fn update(&mut self, vm: &Vlib) {
        let t0 = sluice_infra::clock::rdtsc();
        let shape = shape_of(vm);
        let n_threads = vm.n_threads();
        let mut w = self.seg.write();
        if self.shape != Some(shape) {
            let mut level = 0;
            loop {
                let (sp, map) = specs(vm, self.cfg.per_node_counters, level);
                match w.layout(&sp) {
                    Ok(()) => {
                        self.map = map;
                        break;
                    }
                    Err(e) if level < 2 => {
                        if level >= self.level {
                            log::warn!(
                                "{e}; leaving out {}",
                                if level == 0 {
                                    "the /interfaces and /nodes symlinks"
                                } else {
                                    "the per-node vectors too"
                                }
                            );
                        }
                        level += 1;
                    }
                    Err(e) => {
                        log::warn!("{e}; statistics segment not updated");
                        self.map = Map::default();
                        break;
                    }
                }
            }
            self.level = level;
            self.shape = Some(shape);
        }
        if w.placed(self.map.workers).is_some() {
            fill(
                &mut w,
                &self.map,
                vm,
                n_threads,
                &mut self.prev,
                self.boottime,
                &self.cfg,
            );
        }
        drop(w);
        self.last_clocks = sluice_infra::clock::rdtsc().wrapping_sub(t0);
        self.total_clocks = self.total_clocks.wrapping_add(self.last_clocks);
    }
}

fn fill(
    w: &mut Writer,
    m: &Map,
    vm: &Vlib,
    n_threads: usize,
    prev: &mut Prev,
    boottime: f64,
    cfg: &StatsConfig,
) {
    // Interfaces.
    if let Some(ifs) = vm.ext::<Interfaces>() {
        for (i, itf) in ifs.list.iter().enumerate() {
            let c = &itf.counters;
            for t in 0..n_threads {
                w.set_combined(
                    m.if_rx,
                    t,
                    i,
                    c.get(t, counter::RX_PACKETS),
                    c.get(t, counter::RX_BYTES),
                );
                w.set_combined(
                    m.if_tx,
                    t,
                    i,
                    c.get(t, counter::TX_PACKETS),
                    c.get(t, counter::TX_BYTES),
                );
                for (k, (_, ci)) in IF_SIMPLE.iter().enumerate() {
                    w.set_simple(m.if_simple[k], t, i, c.get(t, *ci));
                }
            }
        }
    }
    // Nodes, and the sums for the rates.
    let mut sum = Prev {
        at: vm.shared.clock.now_secs(),
        vectors: vec![0; n_threads],
        calls: vec![0; n_threads],
        input: vec![0; n_threads],
        loops: vec![0; n_threads],
    };
    for (i, n) in vm.registry.nodes().iter().enumerate() {
        for (t, s) in n.stats.per_thread.iter().enumerate().take(n_threads) {
            let v = [
                s.calls.get(),
                s.vectors.get(),
                s.clocks.get(),
                s.suspends.get(),
            ];
            if let Some(idx) = m.nodes {
                for k in 0..4 {
                    w.set_simple(idx[k], t, i, v[k]);
                }
            }
            match n.kind {
                NodeKind::Internal => {
                    sum.calls[t] += v[0];
                    sum.vectors[t] += v[1];
                }
                NodeKind::Input | NodeKind::PreInput => sum.input[t] += v[1],
                NodeKind::Process => {}
            }
        }
    }
    for &(node, c, e) in &m.errs {
        if let Some(n) = vm.registry.nodes().get(node) {
            for (t, s) in n.stats.per_thread.iter().enumerate().take(n_threads) {
                w.set_simple(e, t, 0, s.counters.get(c).map_or(0, |x| x.get()));
            }
        }
    }
    // System.
    for t in 0..n_threads {
        sum.loops[t] = vm.shared.loops.get(t).map_or(0, |l| l.0.get());
        w.set_simple(m.loops, t, 0, sum.loops[t]);
    }
    let dt = sum.at - prev.at;
    let d = |a: &[u64], b: &[u64], t: usize| {
        a.get(t)
            .copied()
            .unwrap_or(0)
            .saturating_sub(b.get(t).copied().unwrap_or(0))
    };
    if prev.vectors.len() == n_threads && dt > 0.0 {
        let (mut vv, mut cc, mut ii) = (0, 0, 0);
        for t in 0..n_threads {
            let (v, c) = (
                d(&sum.vectors, &prev.vectors, t),
                d(&sum.calls, &prev.calls, t),
            );
            vv += v;
            cc += c;
            ii += d(&sum.input, &prev.input, t);
            w.set_gauge(
                m.vrate_per_worker,
                t,
                0,
                if c > 0 { v as f64 / c as f64 } else { 0.0 },
            );
            w.set_gauge(
                m.loops_per_worker,
                t,
                0,
                d(&sum.loops, &prev.loops, t) as f64 / dt,
            );
        }
        w.set_scalar(
            m.vector_rate,
            if cc > 0 { vv as f64 / cc as f64 } else { 0.0 },
        );
        w.set_scalar(m.input_rate, ii as f64 / dt);
    }
    *prev = sum;
    let p = sluice_graph::buffer_use(vm);
    for (k, v) in [p.cached, p.used, p.free, p.alloc_failures, p.lent]
        .into_iter()
        .enumerate()
    {
        w.set_scalar(m.pool[k], v as f64);
    }
    w.set_scalar(m.workers, n_threads.saturating_sub(1) as f64);
    w.set_scalar(m.boottime, boottime);
    w.set_scalar(m.last_update, unix_now());
    w.set_scalar(m.interval, cfg.interval);
    // The heartbeat counts updates, this one included.
    w.set_scalar(m.heartbeat, w.update_number() as f64);
}

/// Runs the update when due; returns the seconds until the next one (`None`: no segment).
/// Called from the daemon's main loop.
pub fn tick(vm: &mut Vlib) -> Option<f64> {
    let now = vm.shared.clock.now_secs();
    let due = vm.ext::<StatsExt>()?.0.as_ref()?.next_due;
    if now < due {
        return Some(due - now);
    }
    let mut e = vm.take_ext::<StatsExt>();
    let mut left = None;
    if let Some(s) = e.0.as_mut() {
        s.update(vm);
        // Keep the cadence, but never try to catch up on missed updates.
        s.next_due = (due + s.cfg.interval).max(now + s.cfg.interval * 0.5);
        left = Some(s.next_due - now);
    }
    vm.put_ext(e);
    left
}

/// Registers `show statistics segment`.
pub fn register_cli(t: &mut CommandTree<Vlib>) {
    t.add(
        "show statistics segment",
        "show statistics segment — the stats segment: socket, size, entries, update cost",
        show_segment,
    );
}

fn show_segment(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    let hz = vm.shared.clock.hz();
    let Some(s) = vm.ext::<StatsExt>().and_then(|e| e.0.as_ref()) else {
        return Ok("statistics segment disabled (statseg { disable })\n".into());
    };
    let mut o = String::new();
    let _ = writeln!(
        o,
        "socket: {}",
        s.socket()
            .map_or("(not served)".into(), |p| p.display().to_string())
    );
    let _ = writeln!(
        o,
        "size: {} bytes, used: {} bytes, entries: {}, epoch: {}",
        s.seg.size(),
        s.seg.used(),
        s.seg.entries(),
        s.seg.epoch()
    );
    let updates = s.seg.updates().max(1);
    let _ = writeln!(
        o,
        "updates: {}, interval: {} s, last update: {:.1} us, average: {:.1} us",
        s.seg.updates(),
        s.cfg.interval,
        s.last_clocks as f64 / hz * 1e6,
        s.total_clocks as f64 / updates as f64 / hz * 1e6
    );
    let _ = writeln!(
        o,
        "per-node counters: {}{}",
        if s.cfg.per_node_counters { "on" } else { "off" },
        match s.level {
            0 => "",
            1 => " (segment full: no /interfaces or /nodes symlinks)",
            _ => " (segment full: no symlinks, no per-node vectors)",
        }
    );
    if let Some((addr, c)) = &s.metrics {
        let _ = writeln!(
            o,
            "metrics: http://{addr}/metrics, scrapes: {}, client errors: {}, refused: {}, timeouts: {}",
            c.scrapes.load(Ordering::Relaxed),
            c.client_errors.load(Ordering::Relaxed),
            c.refused.load(Ordering::Relaxed),
            c.timeouts.load(Ordering::Relaxed)
        );
    }
    Ok(o)
}

/// Starts `metrics { listen }`: a [`crate::http::MetricsServer`] whose thread renders the
/// exposition from its own read-only view of the segment.
pub fn start_metrics(
    vm: &mut Vlib,
    addr: std::net::SocketAddr,
    prefix: &str,
) -> Result<crate::http::MetricsServer, StatsError> {
    let Some(seg) = vm.ext_mut::<StatsExt>().0.as_mut() else {
        return Err(StatsError::Layout(
            "metrics need the statistics segment (remove statseg { disable })".into(),
        ));
    };
    let mut client = seg.reader()?;
    let opts = crate::prometheus::Options {
        prefix: prefix.to_string(),
    };
    let render: crate::http::Render = Box::new(move || {
        let stats = client
            .dump_where(|e| e.kind != crate::layout::Kind::Symlink)
            .map_err(|e| e.to_string())?;
        Ok(crate::prometheus::render(&stats, &opts, unix_now()))
    });
    let srv = crate::http::MetricsServer::start(addr, crate::http::Limits::default(), render)
        .map_err(|e| StatsError::Io(format!("cannot listen on {addr} for metrics"), e))?;
    seg.set_metrics(srv.local_addr(), srv.counters.clone());
    Ok(srv)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_graph::{CpuConfig, GraphBuilder};

    /// The pool's `used` leaves out the buffers a lender holds; `lent` says how many.
    #[test]
    fn pool_used_leaves_out_lent_buffers() {
        let mut b = GraphBuilder::new();
        sluice_graph::nodes::register(&mut b);
        let mut vm = Vlib::new(
            b,
            &CpuConfig::default(),
            &sluice_graph::testing::test_pool(),
        )
        .expect("runtime");
        let dir = std::env::temp_dir().join(format!("sluice-stats-lent-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let perms = SocketPerms {
            mode: 0o600,
            group: None,
        };
        StatsSegment::start(
            &mut vm,
            &StatsConfig::default(),
            &dir.join("s.sock"),
            &perms,
            true,
        )
        .expect("segment");
        let held: Vec<_> = (0..7)
            .map(|_| vm.main.bufs().alloc_one().expect("a free buffer"))
            .collect();
        fn five(_: &Vlib) -> u64 {
            5
        }
        sluice_graph::register_buffer_lender(&mut vm, "test", five);
        let mut ext = vm.take_ext::<StatsExt>();
        let seg = ext.0.as_mut().expect("segment");
        seg.update(&vm);
        let mut r = seg.reader().expect("reader");
        let got = |r: &mut crate::StatClient, what: &str| {
            let path = format!("/buffer-pools/{POOL}/{what}");
            let d = r.dump(&[format!("^{path}$")]).expect("dump");
            match d.as_slice() {
                [s] => match s.value {
                    crate::StatValue::Scalar(v) => v,
                    ref v => panic!("{path}: {v:?}"),
                },
                _ => panic!("{path}: {} entries", d.len()),
            }
        };
        assert_eq!(got(&mut r, "used"), 2.0, "used without the lent");
        assert_eq!(got(&mut r, "lent"), 5.0);
        drop(r);
        drop(ext);
        vm.main.bufs().free(&held);
        assert_eq!(vm.pool.stats().in_use, 0);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
