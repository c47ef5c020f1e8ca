//! memif: shared-memory packet interfaces, wire-compatible with VPP, libmemif and DPDK's
//! net_memif (protocol 2.0). See `docs/memif.md`.
//!
//! Nodes (details in [`node`]):
//! - `memif-input` (input): rx rings -> Sluice buffers -> `ethernet-input` (ethernet mode) or
//!   `ip4-input` / `ip6-input` (ip mode); drops via `error-drop`.
//! - `memif-tx` (internal): Sluice buffers -> tx ring; frees every buffer.
//! - `memif-process` (process, main thread): sockets and the handshake ([`ctl`]), every 2 ms
//!   while a handshake is in flight, every 20 ms otherwise while memif interfaces exist.
//!
//! The control plane publishes a connection to the data path as an `Arc<DataConn>` (mapped
//! regions, rings, eventfds) behind a generation counter and wakes every graph thread; data-path
//! nodes pick it up at their next poll, and the memory is unmapped when the last reference
//! goes. Rx placement and rx mode of each queue (`set interface rx-placement|rx-mode`) are
//! atomics in [`IfShared`], published the same way.

pub mod api;
pub mod ctl;
pub mod gso;
pub mod node;
pub mod proto;
pub mod shm;
pub mod sock;

use ctl::{Ctl, IfCfg, State};
use proto::Mode;
use shm::Ring;
use sluice_buffer::{BufIdx, BufferPool};
use sluice_cli::{Args, CliError, CommandTree};
use sluice_graph::{
    GraphBuilder, Next, NodeFn, NodeKind, NodeRegistration, RxMode, Shared, Suspend, Vlib, Wake,
};
use sluice_vnet::error::{VnetError, VnetResult};
use sluice_vnet::interface::{IfCounters, Interfaces, SwIfIndex};
use sluice_vnet::rxq::{RxDriver, RxQueueInfo};
use std::any::Any;
use std::fmt::Write as _;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Input node name.
pub const INPUT: &str = "memif-input";
/// Tx node name.
pub const TX: &str = "memif-tx";
/// Control-plane process node name.
pub const PROCESS: &str = "memif-process";

/// One ring as the data path uses it.
pub struct Queue {
    /// The ring.
    pub ring: Ring,
    /// Its interrupt eventfd.
    pub int_fd: OwnedFd,
    /// Serialises threads sharing the queue.
    pub lock: AtomicBool,
    /// rx: next slot to consume (master: last head seen; slave: last tail seen).
    pub last: AtomicU16,
    /// Slave only: offset in region 0 of the buffer of slot 0 (slot i: + i * buffer_size).
    pub buf_base: u64,
    /// Zero-copy only (else empty): per slot, the Sluice buffer it holds, as `BufIdx + 1`
    /// (0: none). M2S: the fresh buffer handed to the master; S2M: the head of the packet's
    /// chain, on the packet's last slot. Written under the queue lock; the descriptors the
    /// peer may rewrite are never used to find a buffer.
    pub shadow: Box<[AtomicU32]>,
    /// rx: how long the polling thread took to look at the ring again after a poll that
    /// received packets (`show memif`).
    pub gaps: PollGaps,
}

/// Buckets of [`PollGaps`]: `[k]` counts gaps of less than 2^k µs, the last one the rest.
pub const GAP_BUCKETS: usize = 14;

/// A log2 histogram of the gaps between consecutive polls of an rx ring while it receives:
/// a gap longer than the ring holds at the offered rate is where the peer found it full.
/// Written by the one polling thread (relaxed loads and stores, no atomic RMW), read by
/// `show memif`.
#[derive(Default)]
pub struct PollGaps {
    /// Counts by log2 of the gap in microseconds (see [`GAP_BUCKETS`]).
    pub buckets: [AtomicU64; GAP_BUCKETS],
    /// The longest gap, in TSC ticks.
    pub max_tsc: AtomicU64,
}

impl PollGaps {
    /// The multiplier [`PollGaps::record`] takes for a clock of `hz` TSC ticks per second:
    /// microseconds per tick in 32.32 fixed point, rounded up (so exactly 1 µs of ticks
    /// counts as 1 µs).
    pub fn us_mult(hz: f64) -> u64 {
        (4_294_967_296.0 * 1e6 / hz).ceil() as u64
    }

    /// Records a gap of `tsc` ticks, `us_mult` = [`PollGaps::us_mult`] (integer only: one
    /// multiply, a shift and a leading-zero count).
    #[inline]
    pub fn record(&self, tsc: u64, us_mult: u64) {
        let us = tsc.saturating_mul(us_mult) >> 32;
        let k = (u64::BITS - us.leading_zeros()).min(GAP_BUCKETS as u32 - 1) as usize;
        let b = &self.buckets[k];
        b.store(b.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        if tsc > self.max_tsc.load(Ordering::Relaxed) {
            self.max_tsc.store(tsc, Ordering::Relaxed);
        }
    }

    /// `show memif`'s line: the non-empty buckets and the longest gap; None before any gap.
    pub fn format(&self, hz: f64) -> Option<String> {
        let mut o = String::new();
        for (k, b) in self.buckets.iter().enumerate() {
            let n = b.load(Ordering::Relaxed);
            if n == 0 {
                continue;
            }
            if k + 1 == GAP_BUCKETS {
                let _ = write!(o, " >={}:{n}", 1u64 << (k - 1));
            } else {
                let _ = write!(o, " <{}:{n}", 1u64 << k);
            }
        }
        if o.is_empty() {
            return None;
        }
        let max = self.max_tsc.load(Ordering::Relaxed) as f64 * 1e6 / hz;
        Some(format!("poll gaps while receiving (us):{o}, max {max:.1}"))
    }
}

impl Queue {
    /// Buffers this ring holds (zero-copy; 0 in copy mode). S2M counts packets (chain heads).
    pub fn held(&self) -> usize {
        self.shadow
            .iter()
            .filter(|s| s.load(Ordering::Relaxed) != 0)
            .count()
    }
    /// Zero-copy S2M ring (caller holds the queue lock): moves the packets the master consumed
    /// since the last look (old `tail` .. new `tail`) from the shadow array to `out`; `head` is
    /// the ring's head as the caller read it. Returns false, taking nothing, when the peer's
    /// `tail` is inconsistent (past `head`, or the ring reset): the transmit path then takes
    /// everything back and resynchronises.
    pub(crate) fn reclaim_tx(&self, head: u16, out: &mut Vec<BufIdx>) -> bool {
        let rs = self.ring.size();
        let mask = rs - 1;
        let tail = self.ring.tail();
        let last = self.last.load(Ordering::Relaxed);
        let inflight = head.wrapping_sub(last);
        let consumed = tail.wrapping_sub(last);
        if inflight > rs || consumed > inflight {
            return false;
        }
        for j in 0..consumed {
            // The caller holds the queue lock: a load and a store, not an atomic swap.
            let s = &self.shadow[(last.wrapping_add(j) & mask) as usize];
            let v = s.load(Ordering::Relaxed);
            if v != 0 {
                s.store(0, Ordering::Relaxed);
                out.push(BufIdx(v - 1));
            }
        }
        self.last.store(tail, Ordering::Relaxed);
        true
    }
    /// Takes every buffer out of the shadow array.
    pub(crate) fn take_all(&self, out: &mut Vec<BufIdx>) {
        for s in self.shadow.iter() {
            let v = s.swap(0, Ordering::Relaxed);
            if v != 0 {
                out.push(BufIdx(v - 1));
            }
        }
    }
}

/// A live connection's memory: regions (unmapped on drop), rx and tx queues.
pub struct DataConn {
    /// Mapped regions.
    pub regions: Vec<shm::Region>,
    /// Rings we receive on (master: S2M; slave: M2S).
    pub rx: Vec<Queue>,
    /// Rings we transmit on (master: M2S; slave: S2M).
    pub tx: Vec<Queue>,
    /// Our role.
    pub is_slave: bool,
    /// Slave: size of each shared buffer.
    pub buffer_size: u32,
    /// Slave zero-copy: the buffer pool whose data array is region 1. Buffers still held by
    /// the rings are freed to it when the connection is dropped (after the data path let go).
    pub zc: Option<Arc<BufferPool>>,
    /// Both ends agreed to pass GSO aggregates whole ([`gso`]).
    pub gso: bool,
}

impl Drop for DataConn {
    fn drop(&mut self) {
        let Some(pool) = &self.zc else {
            return;
        };
        let mut held = Vec::new();
        for q in self.rx.iter().chain(self.tx.iter()) {
            q.take_all(&mut held);
        }
        if !held.is_empty() {
            let mut c = pool.cache();
            c.free(&held);
        }
    }
}

#[cfg(test)]
impl DataConn {
    /// A connection for unit tests: `rx`/`tx` queues over `regions`, copy mode, 2048-byte
    /// buffers, no GSO (tests set the public fields they need otherwise).
    pub(crate) fn for_test(
        regions: Vec<shm::Region>,
        rx: Vec<Queue>,
        tx: Vec<Queue>,
        is_slave: bool,
    ) -> DataConn {
        DataConn {
            regions,
            rx,
            tx,
            is_slave,
            buffer_size: 2048,
            zc: None,
            gso: false,
        }
    }
}

/// What the data path knows of one interface.
pub struct IfShared {
    /// Interface index.
    pub sw_if_index: u32,
    /// Ethernet or IP.
    pub mode: Mode,
    /// Interface counters.
    pub counters: Arc<IfCounters>,
    /// Bumped whenever `conn` or the rx placement/modes change.
    pub gen: AtomicU64,
    conn: Mutex<Option<Arc<DataConn>>>,
    /// Per rx queue: thread + 1 in bits 0-15 (0: default placement), rx mode code in 16-23.
    rxq: [AtomicU32; ctl::MAX_QUEUES],
    /// Wakes the graph threads when the data path must look at a change.
    threads: Option<Arc<Shared>>,
    /// The interface table's link state (`Interface::link_handle`): up exactly while a
    /// connection is published, set by the control plane as it connects and disconnects.
    link: Arc<AtomicBool>,
    /// `gso` interfaces: where [`gso::follow`] posts whether the interface takes aggregates.
    gso: Option<sluice_graph::MainPoster>,
}

impl IfShared {
    /// Data-path state of a new interface.
    pub fn new(
        sw_if_index: u32,
        mode: Mode,
        counters: Arc<IfCounters>,
        threads: Option<Arc<Shared>>,
        link: Arc<AtomicBool>,
    ) -> IfShared {
        IfShared {
            sw_if_index,
            mode,
            counters,
            gen: AtomicU64::new(0),
            conn: Mutex::new(None),
            rxq: std::array::from_fn(|_| AtomicU32::new(0)),
            threads,
            link,
            gso: None,
        }
    }
    /// Makes the interface take GSO aggregates while a connection agreed to them.
    pub fn with_gso(mut self, poster: sluice_graph::MainPoster) -> IfShared {
        self.gso = Some(poster);
        self
    }
    /// The current connection.
    pub fn current(&self) -> Option<Arc<DataConn>> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
    /// Publishes (or withdraws) the connection, and with it the interface's link state.
    pub fn publish(&self, c: Option<Arc<DataConn>>) {
        let up = c.is_some();
        if let Some(p) = &self.gso {
            gso::follow(p, self.sw_if_index, c.as_deref());
        }
        *self.conn.lock().unwrap_or_else(|p| p.into_inner()) = c;
        self.link.store(up, Ordering::Release);
        self.changed();
    }
    fn changed(&self) {
        self.gen.fetch_add(1, Ordering::AcqRel);
        if let Some(t) = &self.threads {
            t.wake_all();
        }
    }
    /// The thread polling rx queue `q` among `n_threads` (default: main without workers,
    /// else worker `q mod workers`).
    pub fn rx_thread(&self, q: usize, n_threads: usize) -> usize {
        let v = self.rxq.get(q).map_or(0, |a| a.load(Ordering::Acquire)) & 0xffff;
        match v as usize {
            t1 if t1 >= 1 && t1 <= n_threads => t1 - 1,
            _ if n_threads <= 1 => 0,
            _ => 1 + q % (n_threads - 1),
        }
    }
    /// The rx mode of queue `q`.
    pub fn rx_mode(&self, q: usize) -> RxMode {
        let v = self.rxq.get(q).map_or(0, |a| a.load(Ordering::Acquire));
        RxMode::from_code((v >> 16) as u8)
    }
    /// Sets queue `q`'s placement and mode and makes the data path apply them.
    pub fn set_rx(&self, q: usize, thread: usize, mode: RxMode) {
        if let Some(a) = self.rxq.get(q) {
            a.store(
                (thread as u32 + 1).min(0xffff) | (mode.code() as u32) << 16,
                Ordering::Release,
            );
            self.changed();
        }
    }
}

/// State shared by the memif nodes of every thread.
#[derive(Default)]
pub struct MemifShared {
    ifs: Mutex<Vec<Arc<IfShared>>>,
    /// Bumped whenever the interface list changes.
    pub gen: AtomicU64,
    /// `memif-input -> ip6-input`, when that node exists.
    pub ip6_next: OnceLock<Next>,
}

impl MemifShared {
    fn list(&self) -> Vec<Arc<IfShared>> {
        self.ifs.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
    fn add(&self, i: Arc<IfShared>) {
        self.ifs.lock().unwrap_or_else(|p| p.into_inner()).push(i);
        self.gen.fetch_add(1, Ordering::AcqRel);
    }
    fn remove(&self, sw: u32) {
        self.ifs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|i| i.sw_if_index != sw);
        self.gen.fetch_add(1, Ordering::AcqRel);
    }
}

/// `memif-process`: runs the control plane, and takes back the zero-copy tx buffers the
/// masters consumed (so an interface that stopped transmitting does not hold them until its
/// next transmit).
pub struct MemifProcess {
    ctl: Arc<Mutex<Ctl>>,
    reclaimed: Vec<BufIdx>,
}

impl NodeFn for MemifProcess {
    fn process(&mut self, cx: &mut sluice_graph::Cx, _wake: Wake) -> Suspend {
        let now = cx.now_secs();
        let mut c = self.ctl.lock().unwrap_or_else(|p| p.into_inner());
        c.poll(now);
        c.reclaim_tx(&mut self.reclaimed);
        if !self.reclaimed.is_empty() {
            cx.free(&self.reclaimed);
            self.reclaimed.clear();
        }
        Suspend::Timeout(c.tick())
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// memif state reachable from the CLI (a `Vlib` extension).
#[derive(Default)]
pub struct MemifMain {
    ctl: Option<Arc<Mutex<Ctl>>>,
    /// How each interface was created (`show running-config`), by sw_if_index.
    created: std::collections::BTreeMap<u32, CreateIf>,
}

/// The `memif` plugin.
pub struct MemifPlugin;

/// This plugin, for the daemon's plugin list (`sluice_plugins::all()`).
pub static PLUGIN: MemifPlugin = MemifPlugin;

impl sluice_vnet::plugin::Plugin for MemifPlugin {
    fn name(&self) -> &'static str {
        "memif"
    }
    fn version(&self) -> &'static str {
        env!("CARGO_PKG_VERSION")
    }
    fn description(&self) -> &'static str {
        "Packet Memory Interface (memif)"
    }
    fn register(
        &self,
        r: &mut sluice_vnet::plugin::Registrar,
    ) -> Result<(), sluice_vnet::plugin::RegisterError> {
        register(&mut r.graph);
        register_cli(&mut r.cli);
        api::register(&mut r.api);
        Ok(())
    }
    fn init(&self, vm: &mut Vlib) -> Result<(), String> {
        init(vm)
    }
}

/// Registers the memif nodes.
pub fn register(b: &mut GraphBuilder) {
    let sh = Arc::new(MemifShared::default());
    let ctl = Arc::new(Mutex::new(Ctl::new(sh.clone())));
    let s1 = sh.clone();
    b.register(
        NodeRegistration::new(INPUT, NodeKind::Input, move |t| {
            Box::new(node::MemifInput::new(s1.clone(), t))
        })
        .nexts(node::RxNext::NAMES)
        .counters(node::RxCounter::DESCS),
    );
    let s2 = sh.clone();
    b.register(
        NodeRegistration::new(TX, NodeKind::Internal, move |_| {
            Box::new(node::MemifTx::new(s2.clone()))
        })
        .counters(node::TxCounter::DESCS),
    );
    b.register(NodeRegistration::new(
        PROCESS,
        NodeKind::Process,
        move |_| {
            Box::new(MemifProcess {
                ctl: ctl.clone(),
                reclaimed: Vec::new(),
            })
        },
    ));
}

/// Connects the CLI to the control plane; adds the `ip6-input` arc when it exists.
///
/// An error when that arc cannot be added, or a worker did not take it within
/// [`Vlib::thread_wait`] ([`sluice_graph::GraphError::NotTaken`]): `ip6_next` is set only
/// here, so going on without it would drop every IPv6 packet of ip-mode memif
/// (`ip6_no_node`) for good.
pub fn init(vm: &mut Vlib) -> Result<(), String> {
    sluice_vnet::runconf::register_creator(vm, "memif", api::creator);
    let Some(p) = vm.registry.find(PROCESS) else {
        return Ok(());
    };
    let Some(ctl) = vm.main.node_mut::<MemifProcess>(p).map(|n| n.ctl.clone()) else {
        return Ok(());
    };
    let sh = ctl.lock().unwrap_or_else(|e| e.into_inner()).shared.clone();
    if vm.registry.find("ip6-input").is_some() {
        let n = vm
            .add_next_by_name(INPUT, "ip6-input")
            .map_err(|e| format!("{INPUT} -> ip6-input: {e}"))?;
        let _ = sh.ip6_next.set(n);
    }
    vm.ext_mut::<MemifMain>().ctl = Some(ctl);
    sluice_vnet::rxq::register_driver(
        vm,
        RxDriver {
            node: INPUT,
            queues: rx_queues,
            set_mode: |vm, sw, q, mode| {
                let (sh, nt) = rx_iface(vm, sw, q)?;
                sh.set_rx(q as usize, sh.rx_thread(q as usize, nt), mode);
                Ok(())
            },
            place: |vm, sw, q, t| {
                let (sh, _) = rx_iface(vm, sw, q)?;
                sh.set_rx(q as usize, t, sh.rx_mode(q as usize));
                Ok(())
            },
        },
    );
    Ok(())
}

/// rx queues: the connected ring count, or the configured one while not connected.
fn rx_queues(vm: &mut Vlib) -> Vec<RxQueueInfo> {
    let nt = vm.n_threads();
    let Ok(c) = ctl(vm) else {
        return Vec::new();
    };
    let g = lock(&c);
    let mut v = Vec::new();
    for x in &g.ifs {
        let n =
            x.sh.current()
                .map_or(x.cfg.rx_queues as usize, |c| c.rx.len());
        for q in 0..n.min(ctl::MAX_QUEUES) {
            v.push(RxQueueInfo {
                sw_if: SwIfIndex(x.sh.sw_if_index),
                queue: q as u16,
                thread: x.sh.rx_thread(q, nt),
                mode: x.sh.rx_mode(q),
            });
        }
    }
    v
}

fn rx_iface(vm: &mut Vlib, sw: SwIfIndex, q: u16) -> VnetResult<(Arc<IfShared>, usize)> {
    let nt = vm.n_threads();
    let c = ctl(vm)?;
    let g = lock(&c);
    let x = g
        .ifs
        .iter()
        .find(|x| x.sh.sw_if_index == sw.0)
        .ok_or_else(|| {
            VnetError::Invalid(format!("sw_if_index {} is not a memif interface", sw.0))
        })?;
    if q as usize >= ctl::MAX_QUEUES {
        return Err(VnetError::Invalid(format!("queue `{q}' out of range")));
    }
    Ok((x.sh.clone(), nt))
}

/// Registers the memif CLI.
pub fn register_cli(t: &mut CommandTree<Vlib>) {
    t.add(
        "create memif socket",
        "create memif socket [id <id>] [filename <path>|@<abstract-name>]",
        cli_create_socket,
    );
    t.add(
        "delete memif socket",
        "delete memif socket id <id>",
        cli_delete_socket,
    );
    t.add(
        "create interface memif",
        "create interface memif [id <id>] [socket-id <socket-id>] [ring-size <size>] [buffer-size <size>] [hw-addr <mac-address>] <master|slave> [rx-queues <number>] [tx-queues <number>] [mode ethernet|ip] [secret <string>] [zero-copy] [gso]",
        cli_create_if,
    );
    t.add(
        "delete interface memif",
        "delete interface memif <interface>",
        cli_delete_if,
    );
    t.add(
        "show memif",
        "show memif [<interface>] [descriptors]",
        cli_show,
    );
}

fn ctl(vm: &mut Vlib) -> VnetResult<Arc<Mutex<Ctl>>> {
    vm.ext_mut::<MemifMain>()
        .ctl
        .clone()
        .ok_or_else(|| VnetError::System("memif not initialised".into()))
}

fn lock(c: &Arc<Mutex<Ctl>>) -> std::sync::MutexGuard<'_, Ctl> {
    c.lock().unwrap_or_else(|p| p.into_inner())
}

fn cli_create_socket(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let mut id = None;
    let mut path = None;
    while !a.is_empty() {
        if a.keyword("id") {
            id = Some(a.u32("socket id")?);
        } else if a.keyword("filename") {
            path = Some(a.word("socket filename")?);
        } else {
            a.finish()?;
        }
    }
    let id = id.ok_or_else(|| CliError::new("missing `id <n>'"))?;
    let path = path.ok_or_else(|| CliError::new("missing `filename <path>'"))?;
    create_socket(vm, id, &path)?;
    Ok(String::new())
}

/// `create memif socket id <id> filename <path>|@<abstract>` (a relative name is under
/// /run/vpp, as VPP).
pub fn create_socket(vm: &mut Vlib, id: u32, path: &str) -> VnetResult {
    if path.is_empty() || path.len() > 100 || path == "@" {
        return Err(VnetError::invalid(format!("bad socket filename `{path}'")));
    }
    let path = if path.starts_with('@') || path.starts_with('/') {
        path.to_string()
    } else {
        // VPP resolves relative names in its run directory.
        format!("/run/vpp/{path}")
    };
    let c = ctl(vm)?;
    let r = lock(&c).add_socket(id, &path).map_err(VnetError::from_text);
    r
}

fn cli_delete_socket(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let _ = a.keyword("id");
    let id = a.u32("socket id")?;
    a.finish()?;
    delete_socket(vm, id)?;
    Ok(String::new())
}

/// `delete memif socket id <id>`.
pub fn delete_socket(vm: &mut Vlib, id: u32) -> VnetResult {
    let c = ctl(vm)?;
    let r = lock(&c).del_socket(id).map_err(VnetError::from_text);
    r
}

/// Options of `create interface memif`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateIf {
    /// Interface id.
    pub id: u32,
    /// Socket id.
    pub socket_id: u32,
    /// Ring size (a power of 2, 2..16384).
    pub ring_size: u32,
    /// Buffer size (128..65535).
    pub buffer_size: u32,
    /// MAC (default 02:fe:6d:<socket>:<id>).
    pub hw_addr: Option<[u8; 6]>,
    /// Slave (true) or master.
    pub slave: bool,
    /// rx queues (1..).
    pub rx_queues: u32,
    /// tx queues (1..).
    pub tx_queues: u32,
    /// IP mode rather than Ethernet.
    pub ip_mode: bool,
    /// Shared secret (at most 24 bytes).
    pub secret: String,
    /// Zero-copy (slave only, needs `buffers { shared }`).
    pub zero_copy: bool,
    /// Offer/accept GSO aggregates whole with a Sluice peer ([`gso`]; ethernet mode, copy).
    pub gso: bool,
}

impl Default for CreateIf {
    fn default() -> Self {
        CreateIf {
            id: 0,
            socket_id: 0,
            ring_size: 1024,
            buffer_size: 2048,
            hw_addr: None,
            slave: false,
            rx_queues: 1,
            tx_queues: 1,
            ip_mode: false,
            secret: String::new(),
            zero_copy: false,
            gso: false,
        }
    }
}

fn cli_create_if(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let mut c = CreateIf::default();
    let mut role = None;
    while !a.is_empty() {
        if a.keyword("id") {
            c.id = a.u32("interface id")?;
        } else if a.keyword("socket-id") {
            c.socket_id = a.u32("socket id")?;
        } else if a.keyword("ring-size") {
            c.ring_size = a.u32("ring size")?;
        } else if a.keyword("buffer-size") {
            c.buffer_size = a.u32("buffer size")?;
        } else if a.keyword("hw-addr") {
            c.hw_addr = Some(sluice_vnet::devices::parse_mac(&a.word("MAC address")?)?);
        } else if a.keyword("master") {
            role = Some(false);
        } else if a.keyword("slave") {
            role = Some(true);
        } else if a.keyword("rx-queues") {
            c.rx_queues = a.u32("rx-queues")?;
        } else if a.keyword("tx-queues") {
            c.tx_queues = a.u32("tx-queues")?;
        } else if a.keyword("mode") {
            let w = a.word("mode")?;
            c.ip_mode = match w.as_str() {
                "ethernet" => false,
                "ip" => true,
                _ => return Err(CliError::new(format!("unknown mode `{w}' (ethernet|ip)"))),
            };
        } else if a.keyword("zero-copy") {
            c.zero_copy = true;
        } else if a.keyword("gso") {
            c.gso = true;
        } else if a.keyword("secret") {
            c.secret = a.word("secret")?;
        } else {
            a.finish()?;
        }
    }
    c.slave = role.ok_or_else(|| CliError::new("missing `master' or `slave'"))?;
    let (_, name) = create_if(vm, &c)?;
    Ok(format!("{name}\n"))
}

/// `create interface memif ...`: `memif<socket>/<id>`, link down until the peer connects.
pub fn create_if(vm: &mut Vlib, o: &CreateIf) -> VnetResult<(sluice_vnet::SwIfIndex, String)> {
    let n = o.ring_size;
    if !n.is_power_of_two() || !(2..=1 << proto::MAX_LOG2_RING_SIZE).contains(&n) {
        return Err(VnetError::invalid(format!(
            "ring-size `{n}' must be a power of 2 between 2 and 16384"
        )));
    }
    if !(128..=65535).contains(&o.buffer_size) {
        return Err(VnetError::invalid(format!(
            "buffer-size `{}' must be between 128 and 65535",
            o.buffer_size
        )));
    }
    for (what, q) in [("rx-queues", o.rx_queues), ("tx-queues", o.tx_queues)] {
        if q == 0 || q as usize > ctl::MAX_QUEUES {
            return Err(VnetError::invalid(format!(
                "{what} `{q}' must be between 1 and {}",
                ctl::MAX_QUEUES
            )));
        }
    }
    if o.secret.len() > proto::SECRET_SZ {
        return Err(VnetError::invalid(format!(
            "secret `{}' longer than 24 bytes",
            o.secret
        )));
    }
    let mut cfg = IfCfg {
        id: o.id,
        socket_id: o.socket_id,
        log2_ring: n.trailing_zeros() as u8,
        buffer_size: o.buffer_size,
        mac: [0; 6],
        slave: o.slave,
        rx_queues: o.rx_queues as u8,
        tx_queues: o.tx_queues as u8,
        mode: if o.ip_mode { Mode::Ip } else { Mode::Ethernet },
        secret: o.secret.clone(),
        zero_copy: None,
        gso: o.gso,
    };
    // The mode first: sizes matter only where `gso' can be used at all.
    if o.gso && (o.ip_mode || o.zero_copy) {
        return Err(VnetError::invalid(format!(
            "`gso' is for ethernet mode without zero-copy (not with `{}')",
            if o.ip_mode { "mode ip" } else { "zero-copy" }
        )));
    }
    if o.gso && o.slave && o.buffer_size < gso::MIN_BUFFER_SIZE {
        return Err(VnetError::invalid(format!(
            "buffer-size `{}' too small for `gso' (at least {}: a 64 KiB aggregate in {} slots)",
            o.buffer_size,
            gso::MIN_BUFFER_SIZE,
            node::MAX_SEGS
        )));
    }
    if o.gso && o.slave && !gso::ring_fits(n as u64, o.buffer_size) {
        return Err(VnetError::invalid(format!(
            "ring-size `{n}' too small for `gso' with buffer-size {} (ring-size x buffer-size \
             at least {}: two 64 KiB aggregates)",
            o.buffer_size,
            2 * gso::MAX_LEN
        )));
    }
    if o.zero_copy {
        if !cfg.slave {
            return Err(VnetError::invalid(
                "`zero-copy' is slave-only (a master always copies into the slave's buffers)",
            ));
        }
        if vm.pool.shared_fd().is_none() {
            return Err(VnetError::NotSupported(
                "`zero-copy' needs a shared buffer arena: add `buffers { shared }' to startup.conf"
                    .into(),
            ));
        }
        if vm.pool.region().1 > u32::MAX as usize {
            return Err(VnetError::NotSupported(
                "`zero-copy' needs a buffer arena under 4 GiB (memif offsets are 32-bit)".into(),
            ));
        }
        cfg.zero_copy = Some(ctl::ZeroCopy(vm.pool.clone()));
    }
    let c = ctl(vm)?;
    let name = format!("memif{}/{}", cfg.socket_id, cfg.id);
    {
        let g = lock(&c);
        if !g.sockets.contains_key(&cfg.socket_id) {
            return Err(VnetError::NotFound(format!(
                "socket-id `{}' does not exist (create memif socket id {} filename <path>)",
                cfg.socket_id, cfg.socket_id
            )));
        }
        if g.ifs.iter().any(|x| x.name == name) {
            return Err(VnetError::Exists(format!(
                "interface `{name}' already exists"
            )));
        }
        if let Some(x) = g
            .ifs
            .iter()
            .find(|x| x.cfg.socket_id == cfg.socket_id && x.cfg.slave != cfg.slave)
        {
            return Err(VnetError::InUse(format!(
                "socket-id `{}' is used by {} as {}; one socket cannot be master and slave",
                cfg.socket_id,
                x.name,
                if x.cfg.slave { "slave" } else { "master" }
            )));
        }
    }
    // As VPP: a random locally administered MAC unless `hw-addr` is given (a MAC derived
    // from socket-id/id would be the same on both ends of a pair).
    cfg.mac = o.hw_addr.unwrap_or_else(|| {
        sluice_vnet::devices::linux::random_mac(sluice_vnet::devices::linux::seed(
            cfg.socket_id << 16 ^ cfg.id,
        ))
    });
    let tx = vm.registry.find(TX);
    let idx = sluice_vnet::create_interface(vm, &name, "memif", cfg.mac, tx)?;
    let (counters, link) = {
        let ifs = vm.ext_mut::<Interfaces>();
        let i = ifs.get_mut(idx).ok_or(VnetError::NoSuchInterface(idx.0))?;
        i.set_link_up(false);
        (i.counters.clone(), i.link_handle())
    };
    let mut sh = IfShared::new(idx.0, cfg.mode, counters, Some(vm.shared.clone()), link);
    if o.gso {
        sh = sh.with_gso(vm.main_poster());
    }
    let sh = Arc::new(sh);
    lock(&c).add_iface(name.clone(), cfg, sh);
    vm.ext_mut::<MemifMain>().created.insert(idx.0, o.clone());
    // A peer that agrees `gso' sends aggregates (decided at connection time; never
    // without the option).
    sluice_vnet::feature::set_aggregate_source(vm, idx.0, o.gso);
    Ok((idx, name))
}

fn cli_delete_if(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let name = a.word("interface")?;
    a.finish()?;
    delete_if(vm, &name)?;
    Ok(String::new())
}

/// `delete interface memif <name>`.
pub fn delete_if(vm: &mut Vlib, name: &str) -> VnetResult {
    let c = ctl(vm)?;
    let sw = lock(&c)
        .del_iface(name)
        .ok_or_else(|| VnetError::NotFound(format!("unknown memif interface `{name}'")))?;
    vm.ext_mut::<MemifMain>().created.remove(&sw);
    sluice_vnet::loopback::delete_interface(vm, sluice_vnet::SwIfIndex(sw));
    Ok(())
}

fn cli_show(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let mut only = None;
    let mut descs = false;
    while !a.is_empty() {
        if a.keyword("descriptors") {
            descs = true;
        } else {
            only = Some(a.word("interface")?);
        }
    }
    let hz = vm.shared.clock.hz();
    let c = ctl(vm)?;
    let g = lock(&c);
    if let Some(n) = &only {
        if !g.ifs.iter().any(|x| &x.name == n) {
            return Err(CliError::new(format!("unknown memif interface `{n}'")));
        }
    }
    let mut o = String::new();
    if only.is_none() {
        let _ = writeln!(o, "sockets\n  {:<6}{:<12}filename", "id", "listener");
        for (id, s) in &g.sockets {
            let l = if s.listening() {
                "yes"
            } else if s.listen_err.is_some() {
                "error"
            } else {
                "no"
            };
            let _ = writeln!(o, "  {:<6}{:<12}{}", id, l, s.path);
        }
        if g.errors > 0 {
            let _ = writeln!(o, "protocol errors: {}", g.errors);
        }
    }
    for x in g
        .ifs
        .iter()
        .filter(|x| only.as_ref().is_none_or(|n| *n == x.name))
    {
        let state = match x.state {
            State::Connected => "connected",
            State::Connecting => "connecting",
            State::Disconnected => "disconnected",
        };
        let _ = writeln!(o, "interface {}", x.name);
        let _ = writeln!(o, "  remote-name \"{}\"", x.remote_name);
        let _ = writeln!(o, "  remote-interface \"{}\"", x.remote_if_name);
        let _ = writeln!(
            o,
            "  socket-id {} id {} mode {}",
            x.cfg.socket_id,
            x.cfg.id,
            x.cfg.mode.as_str()
        );
        let _ = writeln!(
            o,
            "  flags {}{}{} {}",
            if x.cfg.slave { "slave" } else { "master" },
            if x.cfg.zero_copy.is_some() {
                " zero-copy"
            } else {
                ""
            },
            if x.cfg.gso { " gso" } else { "" },
            state
        );
        if x.cfg.gso {
            let agreed = x.sh.current().map(|c| c.gso);
            let _ = writeln!(
                o,
                "  gso {}",
                match agreed {
                    Some(true) => "agreed (aggregates pass whole)",
                    Some(false) => "not agreed by the peer (aggregates cut before memif-tx)",
                    None => "offered",
                }
            );
        }
        let _ = writeln!(
            o,
            "  link {}",
            if x.state == State::Connected {
                "up"
            } else {
                "down"
            }
        );
        let _ = writeln!(o, "  connects {}", x.connects);
        if !x.last_reason.is_empty() {
            let _ = writeln!(o, "  last disconnect reason \"{}\"", x.last_reason);
        }
        let _ = writeln!(
            o,
            "  ring-size {} buffer-size {} secret {}",
            1u32 << x.cfg.log2_ring,
            x.cfg.buffer_size,
            if x.cfg.secret.is_empty() { "no" } else { "yes" }
        );
        if let Some(conn) = x.sh.current() {
            let _ = writeln!(
                o,
                "  regions {} rx-queues {} tx-queues {}",
                conn.regions.len(),
                conn.rx.len(),
                conn.tx.len()
            );
            for (dir, list) in [("rx", &conn.rx), ("tx", &conn.tx)] {
                for (i, q) in list.iter().enumerate() {
                    let r = q.ring;
                    let kind = match (conn.is_slave, dir) {
                        (true, "rx") | (false, "tx") => "M2S",
                        _ => "S2M",
                    };
                    let _ = writeln!(
                        o,
                        "  {dir} queue {i} ({kind}): ring-size {} head {} tail {} flags 0x{:04x} interrupts {}",
                        r.size(),
                        r.head(),
                        r.tail(),
                        r.flags(),
                        if r.flags() & shm::RING_FLAG_MASK_INT != 0 { "masked" } else { "enabled" }
                    );
                    if let Some(g) = (dir == "rx").then(|| q.gaps.format(hz)).flatten() {
                        let _ = writeln!(o, "    {g}");
                    }
                    if conn.zc.is_some() {
                        let what = if dir == "rx" { "buffers" } else { "packets" };
                        let _ = writeln!(o, "    zero-copy: {what} held {}", q.held());
                    }
                    if descs {
                        let _ = writeln!(
                            o,
                            "    {:>5} {:>6} {:>6} {:>10} {:>10}",
                            "id", "flags", "region", "offset", "length"
                        );
                        for s in 0..r.size() {
                            let d = r.desc(s);
                            let _ = writeln!(
                                o,
                                "    {:>5} 0x{:04x} {:>6} {:>10} {:>10}",
                                s, d.flags, d.region, d.offset, d.length
                            );
                        }
                    }
                }
            }
        }
    }
    Ok(o)
}

/// The sockets: (id, filename).
pub fn sockets(vm: &mut Vlib) -> Vec<(u32, String)> {
    let Ok(c) = ctl(vm) else {
        return Vec::new();
    };
    let g = lock(&c);
    g.sockets
        .iter()
        .map(|(k, s)| (*k, s.path.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only an interface with `gso` may receive aggregates, so only it puts the GSO
    /// cutting nodes in the feature chains.
    #[test]
    fn only_a_gso_interface_is_a_source_of_aggregates() {
        let dir = std::env::temp_dir().join(format!("sluice-memif-src-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let entry = sluice_vnet::plugin::PluginEntry {
            plugin: &PLUGIN,
            enabled: true,
        };
        let sock = format!("create memif socket id 1 filename {}/s.sock", dir.display());
        let (mut vm, _cli) = sluice_vnet::testing::configured(
            &[entry],
            0,
            256,
            &[
                &sock,
                "create interface memif id 0 socket-id 1 master",
                "create interface memif id 1 socket-id 1 master gso",
            ],
        );
        let sw = |vm: &mut Vlib, name: &str| vm.ext_mut::<Interfaces>().find(name).unwrap().0;
        let gso = sw(&mut vm, "memif1/1");
        sw(&mut vm, "memif1/0");
        assert_eq!(sluice_vnet::feature::aggregate_sources(&mut vm), [gso]);
        drop(vm);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn poll_gaps_bucket_by_log2_microseconds() {
        let g = PollGaps::default();
        assert_eq!(g.format(1e9), None);
        // A 1 GHz clock: 1000 ticks per µs.
        for tsc in [500, 999, 1_000, 3_999, 100_000, 10_000_000_000] {
            g.record(tsc, PollGaps::us_mult(1e9));
        }
        let n = |k: usize| g.buckets[k].load(Ordering::Relaxed);
        assert_eq!((n(0), n(1), n(2), n(7)), (2, 1, 1, 1));
        assert_eq!(n(GAP_BUCKETS - 1), 1);
        // A 3 GHz clock: 2999 ticks are under 1 µs, 3000 are 1 µs, 6000 are 2 µs.
        let h = PollGaps::default();
        for tsc in [2_999, 3_000, 5_999, 6_000] {
            h.record(tsc, PollGaps::us_mult(3e9));
        }
        let m = |k: usize| h.buckets[k].load(Ordering::Relaxed);
        assert_eq!((m(0), m(1), m(2)), (1, 2, 1));
        assert_eq!(
            g.format(1e9).as_deref(),
            Some("poll gaps while receiving (us): <1:2 <2:1 <4:1 <128:1 >=4096:1, max 10000000.0")
        );
    }
}
