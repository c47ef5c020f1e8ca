//! DPDK poll-mode drivers as Sluice interfaces (VPP's `dpdk` plugin), written against the
//! plugin boundary alone: no core crate names it.
//!
//! The `dpdk` startup.conf section ([`config`], VPP's syntax) lists PCI devices (`dev`) and
//! virtual devices (`vdev`); at start the plugin loads Debian's libdpdk through its C shim
//! ([`sys`]), starts EAL ([`eal`]; without hugepages unless `huge-dir` says otherwise), creates
//! the mbuf pools, and turns every port into an interface
//! named as VPP names it (`TenGigabitEthernet2/0/1`, `Ethernet0` for a virtual device) or by
//! the device's `name`. Each port gets its rx queues (RSS over them when there are several),
//! placed round-robin on the worker threads like every driver's, and one tx queue per thread
//! unless `num-tx-queues` says otherwise.
//!
//! On virtual devices Sluice's buffers are the mbufs (zero copy, [`zc`]: each buffer has an
//! mbuf header of its own in the mempool `sluice_zc`, whose operations are Sluice's buffer
//! pool); PCI devices and drivers that hand IOVAs to the other end copy between mbufs and
//! Sluice buffers in both directions (docs/interfaces.md says why). Link state comes from the device's link-state-change
//! interrupt where it has one and is polled every second by `dpdk-process` otherwise.
//!
//! CLI: `show hardware-interfaces` (PMD, link speed and duplex, queues, RSS, device and
//! extended statistics), `show dpdk version` (DPDK version and EAL arguments), `show dpdk
//! buffer` (the mbuf pools). Nodes: see [`node`].
//!
//! Builds without DPDK: build.rs detects libdpdk with pkg-config; without it the plugin still
//! registers, `show plugins` says that DPDK support is not built, and a `dpdk` section stops
//! start-up with a one-line error saying so.

pub mod config;
pub mod eal;
pub mod node;
pub mod port;
pub mod sys;
pub mod zc;

use config::DpdkConfig;
use node::{
    DpdkInput, DpdkProcess, DpdkTx, RxQ, TxEntry, TxLock, Watch, Watched, INPUT, PROCESS, TX,
};
use port::{LinkState, Pool};
use sluice_cli::conf::{ConfError, Section};
use sluice_cli::{Args, CliError};
use sluice_graph::{NodeKind, NodeRegistration, RxMode, RxModeState, Vlib};
use sluice_vnet::devices::fdq::{self, FdDriver, Placed};
use sluice_vnet::devices::linux::RxPlacement;
use sluice_vnet::error::VnetError;
use sluice_vnet::interface::{fmt_mac, Interfaces, SwIfIndex};
use sluice_vnet::plugin::{Plugin, RegisterError, Registrar, Staged};
use sluice_vnet::rxq::RxQueueInfo;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use sys::Api;

/// Driver name (`show hardware-interfaces`).
pub const DRIVER: &str = "dpdk";

/// Default descriptors per queue.
pub const DEFAULT_DESC: u16 = 1024;

/// Per-lcore mbuf cache of the pools.
const POOL_CACHE: u32 = 256;

/// The virtual-device drivers that copy packet data through an mbuf's `buf_addr` (its
/// virtual address), so they can receive into and transmit from Sluice's buffers (zero
/// copy). Others do not: `net_af_xdp` (umem zero-copy), `net_virtio_user` and `net_memif`
/// (`zero-copy=yes`) hand the mbuf's IOVA or their own shared memory to the other end.
const ZERO_COPY_DRIVERS: [&str; 6] = [
    "net_ring",
    "net_null",
    "net_pcap",
    "net_tap",
    "net_af_packet",
    "net_vhost",
];

/// Whether the driver named (or a vdev named after it: `net_ring0`) can use zero copy.
fn zero_copy_driver(name: &str) -> bool {
    ZERO_COPY_DRIVERS.iter().any(|d| name.starts_with(d))
}

/// One rx queue's placement, as the control plane records it.
pub struct RxPlace {
    /// Thread polling it.
    pub thread: usize,
    /// Rx mode (always polling).
    pub mode: RxMode,
}

/// One DPDK port, as the control plane knows it.
pub struct Port {
    /// DPDK port id.
    pub port_id: u16,
    /// Interface name.
    pub name: String,
    /// Sluice interface.
    pub sw_if: SwIfIndex,
    /// The device as the configuration names it (PCI address or vdev spec).
    pub dev: String,
    /// Device information at start.
    pub info: sys::PortInfo,
    /// Queues and descriptors as configured on the device.
    pub conf: sys::PortConf,
    /// Link state.
    pub link: Arc<LinkState>,
    /// rx queues.
    pub rx: Vec<RxPlace>,
    /// Threads share tx queues.
    pub tx_shared: bool,
}

/// The plugin's runtime state (a `Vlib` extension).
#[derive(Default)]
pub struct DpdkMain {
    /// The loaded shim (DPDK started).
    pub api: Option<&'static Api>,
    /// EAL's arguments.
    pub eal_args: Vec<String>,
    /// Ports, in configuration order.
    pub ports: Vec<Port>,
    /// Receive mbufs: `sluice_zc` (Sluice's buffers) under zero copy, else a pool of its own.
    pub rx_pool: Option<Pool>,
    /// Transmit mbufs (copies).
    pub tx_pool: Option<Pool>,
    /// Zero copy is on (`rx_pool` is `sluice_zc`).
    pub zero_copy: bool,
    placement: RxPlacement,
}

/// The `dpdk` plugin.
pub struct DpdkPlugin;

/// This plugin, for the daemon's plugin list (`sluice_plugins::all()`).
pub static PLUGIN: DpdkPlugin = DpdkPlugin;

#[cfg(sluice_dpdk)]
const DESCRIPTION: &str = "DPDK poll-mode drivers (dpdk section; libdpdk loaded at start)";
#[cfg(not(sluice_dpdk))]
const DESCRIPTION: &str =
    "DPDK poll-mode drivers: NOT BUILT (no libdpdk at build time, or SLUICE_DPDK=0)";

/// The one-line answer to a `dpdk` section in a build without DPDK.
pub fn not_built() -> String {
    format!(
        "DPDK support is not built into this binary ({}); install dpdk-dev (pkg-config libdpdk) and rebuild",
        sys::NOT_BUILT_WHY
    )
}

impl Plugin for DpdkPlugin {
    fn name(&self) -> &'static str {
        "dpdk"
    }
    fn version(&self) -> &'static str {
        env!("CARGO_PKG_VERSION")
    }
    fn description(&self) -> &'static str {
        DESCRIPTION
    }
    fn config_sections(&self) -> &'static [&'static str] {
        &["dpdk"]
    }
    fn configure(&self, staged: &mut Staged, s: &Section, file: &str) -> Result<(), ConfError> {
        if sys::SHIM.is_none() {
            return Err(ConfError {
                file: file.to_string(),
                line: s.line,
                msg: not_built(),
            });
        }
        config::parse(staged.get_mut::<DpdkConfig>(), s, file)
    }
    fn register(&self, r: &mut Registrar) -> Result<(), RegisterError> {
        r.node(
            NodeRegistration::new(INPUT, NodeKind::Input, |_| Box::new(DpdkInput::default()))
                .nexts(node::RxNext::NAMES)
                .counters(node::RxCounter::DESCS),
        );
        r.node(
            NodeRegistration::new(TX, NodeKind::Internal, |_| Box::new(DpdkTx::default()))
                .counters(node::TxCounter::DESCS),
        );
        let watch = r.staged.get_mut::<Watch>().clone();
        r.node(NodeRegistration::new(
            PROCESS,
            NodeKind::Process,
            move |_| {
                Box::new(DpdkProcess {
                    watch: watch.clone(),
                })
            },
        ));
        r.cli(
            "show dpdk version",
            "show dpdk version — DPDK version and EAL arguments",
            cli_version,
        );
        r.cli(
            "show dpdk buffer",
            "show dpdk buffer — the DPDK mbuf pools",
            cli_buffer,
        );
        Ok(())
    }
    fn init(&self, vm: &mut Vlib) -> Result<(), String> {
        let cfg = vm.ext_mut::<DpdkConfig>().clone();
        if sys::SHIM.is_none() {
            log::info!("dpdk: {}", not_built());
            return Ok(());
        }
        if !cfg.present {
            return Ok(());
        }
        if cfg.devs.is_empty() && cfg.vdevs.is_empty() {
            log::info!("dpdk: the `dpdk' section names no device; DPDK not started");
            return Ok(());
        }
        start(vm, &cfg)
    }
}

/// The [`FdDriver`] of the dpdk rx queues (placement through `sluice_vnet::devices::fdq`).
pub struct Dpdk;

impl FdDriver for Dpdk {
    type Queue = RxQ;
    type Node = DpdkInput;
    const INPUT: &'static str = INPUT;
    fn set(n: &mut DpdkInput) -> &mut fdq::QueueSet<RxQ> {
        &mut n.queues
    }
    fn placements(vm: &mut Vlib) -> Vec<RxQueueInfo> {
        vm.ext_mut::<DpdkMain>()
            .ports
            .iter()
            .flat_map(|p| {
                p.rx.iter().enumerate().map(|(q, r)| RxQueueInfo {
                    sw_if: p.sw_if,
                    queue: q as u16,
                    thread: r.thread,
                    mode: r.mode,
                })
            })
            .collect()
    }
    fn record(vm: &mut Vlib, i: RxQueueInfo) {
        if let Some(r) = vm
            .ext_mut::<DpdkMain>()
            .ports
            .iter_mut()
            .find(|p| p.sw_if == i.sw_if)
            .and_then(|p| p.rx.get_mut(i.queue as usize))
        {
            r.thread = i.thread;
            r.mode = i.mode;
        }
    }
}

fn polling_only(
    _vm: &mut Vlib,
    _sw: SwIfIndex,
    _q: u16,
    mode: RxMode,
) -> sluice_vnet::error::VnetResult {
    if mode == RxMode::Polling {
        return Ok(());
    }
    Err(VnetError::NotSupported(format!(
        "rx-mode `{}' is not supported on dpdk interfaces (they poll; no rx interrupts are enabled)",
        mode.as_str()
    )))
}

/// The mbufs to create: (receive, transmit), from the queues of every device.
fn pool_sizes(cfg: &DpdkConfig, ports: &[(u16, u16, u16, u16)], threads: usize) -> (u32, u32) {
    let (rx, tx) = pool_needs(ports, threads);
    (cfg.num_mbufs.unwrap_or(rx.max(4096)), tx.max(4096))
}

/// Mbufs the descriptors of every queue and every thread's cache and bursts can hold, for
/// receive and for transmit.
fn pool_needs(ports: &[(u16, u16, u16, u16)], threads: usize) -> (u32, u32) {
    let burst = threads as u32 * (POOL_CACHE + 2 * sluice_graph::FRAME_SIZE as u32);
    let rx: u32 = ports
        .iter()
        .map(|&(q, d, _, _)| q as u32 * d as u32)
        .sum::<u32>()
        + burst;
    let tx: u32 = ports
        .iter()
        .map(|&(_, _, q, d)| q as u32 * d as u32)
        .sum::<u32>()
        + burst;
    (rx, tx)
}

/// Sluice buffers DPDK can hold for good under zero copy: every thread's mempool cache full
/// to its flush threshold (1.5 times its size) plus `descs` rx and tx descriptors.
fn zc_held(descs: u64, threads: usize) -> u64 {
    threads as u64 * u64::from(POOL_CACHE) * 3 / 2 + descs
}

/// What zero copy warns about: `num-mbufs` (sizes nothing: the receive mbufs are Sluice's
/// buffers), and DPDK's descriptors and caches able to hold more than half of Sluice's
/// `total` buffers.
fn zc_warnings(cfg: &DpdkConfig, descs: u64, threads: usize, total: u64) -> Vec<String> {
    let mut w = Vec::new();
    if let Some(n) = cfg.num_mbufs {
        w.push(format!(
            "`num-mbufs {n}' ignored under zero copy (the receive mbufs are Sluice's buffers)"
        ));
    }
    let held = zc_held(descs, threads);
    if held > total / 2 {
        w.push(format!(
            "zero copy: DPDK's descriptors and mempool caches can hold {held} of Sluice's \
             {total} buffers, more than half: raise buffers-per-numa or lower num-rx-desc/num-tx-desc"
        ));
    }
    w
}

/// Memory EAL needs without hugepages: the pools plus room for the PMDs' own allocations.
fn mem_mb(rx: u32, tx: u32) -> u32 {
    // One mbuf: 2176 bytes of buffer, its 128-byte header and the mempool's object header.
    let bytes = (rx as u64 + tx as u64) * (2176 + 128 + 64);
    (bytes >> 20) as u32 + 192
}

fn start(vm: &mut Vlib, cfg: &DpdkConfig) -> Result<(), String> {
    let threads = vm.n_threads();
    // The checks EAL would fail on less clearly.
    for d in &cfg.devs {
        eal::check_pci(&d.addr)?;
    }
    if let Some(dir) = &cfg.huge_dir {
        let mi = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        eal::check_hugepages(dir, &mi)?;
    }
    let shim = sys::SHIM.ok_or_else(not_built)?;
    let api = Api::load(shim)?;
    // Queue counts per device as far as the configuration says (the device may lower them).
    let wanted: Vec<(u16, u16, u16, u16)> = cfg
        .devs
        .iter()
        .chain(&cfg.vdevs)
        .map(|d| {
            let o = d.opts.over(&cfg.default);
            (
                o.rx_queues.unwrap_or(1),
                o.rx_desc.unwrap_or(DEFAULT_DESC),
                o.tx_queues.unwrap_or(threads as u16),
                o.tx_desc.unwrap_or(DEFAULT_DESC),
            )
        })
        .collect();
    let (n_rx, n_tx) = pool_sizes(cfg, &wanted, threads);
    let descs: u64 = wanted
        .iter()
        .map(|&(rq, rd, tq, td)| u64::from(rq) * u64::from(rd) + u64::from(tq) * u64::from(td))
        .sum();
    // Zero copy: virtual devices whose drivers copy through the mbuf's virtual address only
    // (a PCI device's DMA cannot reach Sluice's arena).
    let copy_why = if cfg.no_zero_copy {
        Some("no-zero-copy".to_string())
    } else if !cfg.devs.is_empty() {
        Some("PCI devices cannot reach Sluice's buffers".to_string())
    } else {
        cfg.vdevs
            .iter()
            .find(|v| !zero_copy_driver(&v.addr))
            .map(|v| {
                format!(
                    "vdev {}: its driver does not copy through the mbuf's virtual address",
                    v.addr
                )
            })
    };
    if copy_why.is_none() {
        for w in zc_warnings(cfg, descs, threads, vm.pool.len() as u64) {
            log::warn!("dpdk: {w}");
        }
    }
    // Under zero copy no `sluice_rx' is created: EAL memory for the transmit mbufs only.
    let rx_mem = if copy_why.is_none() { 0 } else { n_rx };
    let args = eal::args(cfg, &eal::allowed_cpus(), mem_mb(rx_mem, n_tx));
    eal::init(api, &args)?;
    let r = start_devices(vm, cfg, api, &args, n_rx, n_tx, copy_why);
    eal::remove_runtime_dir(api);
    r
}

fn start_devices(
    vm: &mut Vlib,
    cfg: &DpdkConfig,
    api: &'static Api,
    args: &[String],
    n_rx: u32,
    n_tx: u32,
    copy_why: Option<String>,
) -> Result<(), String> {
    let pci_drivers: Vec<Option<String>> = cfg
        .devs
        .iter()
        .map(|d| eal::check_pci(&d.addr).ok().flatten())
        .collect();
    for w in &cfg.ignored {
        log::warn!("dpdk: `{w}' accepted for VPP compatibility and ignored");
    }
    // Every Sluice thread becomes an lcore, so the mempool caches serve it.
    vm.foreach_thread(move |_| {
        // SAFETY: registers the calling thread with EAL (idempotent for the main lcore).
        if unsafe { (api.thread_register)() } < 0 {
            log::warn!("dpdk: no lcore left for a thread; its mbuf operations bypass the cache");
        }
    });
    zc::arena(api, &vm.pool);
    let zc_pool = match &copy_why {
        None => zc::init(api, &vm.pool, POOL_CACHE)
            .map_err(|e| log::warn!("dpdk: no zero copy ({e}): receive and transmit copy"))
            .ok(),
        Some(why) => {
            log::info!("dpdk: receive and transmit copy ({why})");
            None
        }
    };
    let zero_copy = zc_pool.is_some();
    let rx_pool = match zc_pool {
        Some(mp) => Pool(mp),
        None => create_pool(api, "sluice_rx", n_rx)?,
    };
    let tx_pool = create_pool(api, "sluice_tx", n_tx)?;
    {
        let m = vm.ext_mut::<DpdkMain>();
        m.api = Some(api);
        m.eal_args = args.to_vec();
        m.rx_pool = Some(rx_pool);
        m.tx_pool = Some(tx_pool);
        m.zero_copy = zero_copy;
    }
    sluice_graph::register_buffer_lender(vm, "dpdk", lent_buffers);
    for v in &cfg.vdevs {
        eal::probe(api, v.vdev.as_deref().unwrap_or(&v.addr))?;
    }
    sluice_vnet::rxq::register_driver(
        vm,
        sluice_vnet::rxq::RxDriver {
            set_mode: polling_only,
            ..fdq::rx_driver::<Dpdk>()
        },
    );
    vm.ext_mut::<Interfaces>()
        .hw_details
        .push((DRIVER, hw_detail));
    for (i, d) in cfg.devs.iter().chain(&cfg.vdevs).enumerate() {
        let what = d.vdev.as_deref().unwrap_or(&d.addr);
        let port = eal::port_by_name(api, &d.addr).ok_or_else(|| match pci_drivers.get(i) {
            Some(drv) if d.vdev.is_none() => eal::pci_not_found(&d.addr, drv.as_deref()),
            _ => format!("vdev {what}: DPDK created no port for it"),
        })?;
        add_port(vm, api, cfg, d, port, rx_pool, tx_pool).map_err(|e| {
            format!(
                "{} {what}: {e}",
                if d.vdev.is_some() { "vdev" } else { "dev" }
            )
        })?;
    }
    let names: Vec<String> = vm
        .ext_mut::<DpdkMain>()
        .ports
        .iter()
        .map(|p| format!("{} ({}, port {})", p.name, p.dev, p.port_id))
        .collect();
    log::info!(
        "dpdk: {} ({} mbufs rx, {} tx); EAL {}; interfaces: {}",
        api.running_version(),
        n_rx,
        n_tx,
        args[1..].join(" "),
        if names.is_empty() {
            "none".into()
        } else {
            names.join(", ")
        }
    );
    Ok(())
}

/// A plain mbuf pool.
fn create_pool(api: &Api, name: &str, n: u32) -> Result<Pool, String> {
    let c = std::ffi::CString::new(name).map_err(|e| e.to_string())?;
    // SAFETY: NUL-terminated name; EAL is initialised.
    let p = unsafe { (api.pool_create)(c.as_ptr(), n, POOL_CACHE, -1) };
    if p.is_null() {
        return Err(format!(
            "cannot create the {n}-mbuf pool `{name}' (not enough DPDK memory: raise `socket-mem')"
        ));
    }
    Ok(Pool(p))
}

/// Why a port could not be added: the device (text from DPDK or its configuration) or the
/// interface made for it (typed; text only where `init` reports it).
#[derive(Debug, thiserror::Error)]
enum PortError {
    /// The device refused its setup or the configuration does not fit it.
    #[error("{0}")]
    Device(String),
    /// The interface or its rx placement failed.
    #[error(transparent)]
    Vnet(#[from] VnetError),
}

impl From<String> for PortError {
    fn from(e: String) -> Self {
        PortError::Device(e)
    }
}

fn add_port(
    vm: &mut Vlib,
    api: &'static Api,
    cfg: &DpdkConfig,
    d: &config::DevConfig,
    port: u16,
    rx_pool: Pool,
    tx_pool: Pool,
) -> Result<(), PortError> {
    let threads = vm.n_threads();
    let info = port::info(api, port)?;
    let o = d.opts.over(&cfg.default);
    let n_rxq = o.rx_queues.unwrap_or(1);
    if n_rxq > info.max_rx_queues.max(1) {
        return Err(format!(
            "num-rx-queues {n_rxq} is more than the device's {}",
            info.max_rx_queues
        )
        .into());
    }
    let n_txq = match o.tx_queues {
        Some(n) if n > info.max_tx_queues.max(1) => {
            return Err(format!(
                "num-tx-queues {n} is more than the device's {}",
                info.max_tx_queues
            )
            .into())
        }
        Some(n) => n,
        None => (threads as u16).min(info.max_tx_queues.max(1)),
    };
    let mut conf = sys::PortConf {
        n_rxq,
        n_txq,
        n_rxd: o.rx_desc.unwrap_or(DEFAULT_DESC),
        n_txd: o.tx_desc.unwrap_or(DEFAULT_DESC),
        rss_hf: port::rss_hf(n_rxq, info.rss_offloads),
        lsc_intr: info.lsc_intr,
        // Sluice filters by MAC in ethernet-input (and needs every frame for L2 modes and
        // sub-interfaces, which no core hook announces to a driver).
        promisc: 1,
    };
    let name = o.name.clone().unwrap_or_else(|| {
        port::vpp_name(
            &sys::cstr(&info.driver),
            info.speed_capa,
            &sys::cstr(&info.bus),
            &sys::cstr(&info.dev_name),
            port,
            info.switch_port,
        )
    });
    if vm.ext_mut::<Interfaces>().find(&name).is_some() {
        return Err(format!("interface name `{name}' is taken; give the device a `name'").into());
    }
    let tx_node = vm
        .registry
        .find(TX)
        .ok_or_else(|| PortError::Device("dpdk-tx is not registered".into()))?;
    port::setup(api, port, &mut conf, rx_pool)?;
    // Some virtual devices (net_ring) have no MAC: give the interface a locally
    // administered one (the device runs promiscuous, so it needs none of its own).
    let mac = if info.mac == [0; 6] {
        sluice_vnet::devices::linux::random_mac(sluice_vnet::devices::linux::seed(port.into()))
    } else {
        info.mac
    };
    let sw = match sluice_vnet::create_interface(vm, &name, DRIVER, mac, Some(tx_node)) {
        Ok(sw) => sw,
        Err(e) => {
            // The interface table is full (or the name was taken meanwhile): the port was
            // started for nothing; stop it so it does not receive into the pool unread.
            port::close(api, port);
            return Err(e.into());
        }
    };
    let (counters, link_flag) = {
        let ifs = vm.ext_mut::<Interfaces>();
        let i = ifs.get_mut(sw).ok_or(VnetError::NoSuchInterface(sw.0))?;
        i.mtu = u32::from(info.mtu).clamp(64, 9216);
        (i.counters.clone(), i.link_handle())
    };
    sluice_vnet::interface::sync_all(vm);
    let link = Arc::new(LinkState {
        api,
        port,
        name: name.clone(),
        up: link_flag,
        speed: AtomicU32::new(0),
        duplex: AtomicU8::new(0),
        events: AtomicU64::new(0),
        interrupt: info.lsc_intr != 0,
    });
    // The state now (counted as no event), then changes as they come.
    link.refresh();
    link.events.store(0, Ordering::Relaxed);
    if link.interrupt {
        if let Err(e) = port::register_lsc(&link) {
            log::warn!("{name}: link-state interrupts unavailable ({e}); polling the link");
        }
    }
    if let Ok(mut w) = vm.ext_mut::<Watch>().0.lock() {
        w.push(Watched {
            link: link.clone(),
            counters: counters.clone(),
            seen_miss: 0,
        });
    }
    // A PCI device DMAs from IOVAs, and Sluice's arena is not mapped for it (that needs
    // rte_extmem_register + rte_dev_dma_map on pinned memory); a virtual device's driver
    // must copy through the mbuf's virtual address ([`ZERO_COPY_DRIVERS`]). Others copy.
    let driver = sys::cstr(&info.driver);
    let zc_on = vm.ext_mut::<DpdkMain>().zero_copy;
    let zero_copy = zc_on && sys::cstr(&info.bus) != "pci" && zero_copy_driver(&driver);
    if zc_on && !zero_copy {
        log::info!("{name}: transmit copies (driver {driver} cannot take Sluice's buffers)");
    }
    let entry = TxEntry {
        api,
        port,
        queues: Arc::new((0..conf.n_txq).map(|_| TxLock::default()).collect()),
        shared: (conf.n_txq as usize) < threads,
        pool: tx_pool,
        zero_copy,
        counters: counters.clone(),
        subs: vm.ext_mut::<Interfaces>().counter_table.clone(),
    };
    sluice_vnet::devices::set_tx_entry(vm, tx_node, sw, Some(entry), |n: &mut DpdkTx| &mut n.table);
    let hz = vm.shared.clock.hz();
    let mut rx = Vec::new();
    for q in 0..conf.n_rxq {
        let n_workers = vm.n_workers();
        let thread = vm.ext_mut::<DpdkMain>().placement.next_thread(n_workers);
        let rq = RxQ {
            api,
            port,
            queue: q,
            sw_if: sw.0,
            counters: counters.clone(),
        };
        fdq::put::<Dpdk>(
            vm,
            thread,
            Placed::new(rq, RxModeState::new(RxMode::Polling, hz)),
        )?;
        rx.push(RxPlace {
            thread,
            mode: RxMode::Polling,
        });
    }
    vm.ext_mut::<DpdkMain>().ports.push(Port {
        port_id: port,
        name,
        sw_if: sw,
        dev: d.vdev.clone().unwrap_or_else(|| d.addr.clone()),
        info,
        conf,
        link,
        rx,
        tx_shared: (conf.n_txq as usize) < threads,
    });
    Ok(())
}

/// Non-zero extended statistics of a port, by name.
pub fn xstats(api: &Api, port: u16) -> Vec<(String, u64)> {
    let mut n = 64usize;
    for _ in 0..3 {
        let mut names = vec![0 as std::ffi::c_char; n * 64];
        let mut vals = vec![0u64; n];
        // SAFETY: `names` holds n 64-byte slots, `vals` n values.
        let r = unsafe { (api.xstats)(port, names.as_mut_ptr(), vals.as_mut_ptr(), n as i32) };
        if r < 0 {
            return Vec::new();
        }
        let r = r as usize;
        if r > n {
            n = r;
            continue;
        }
        return (0..r)
            .filter(|&i| vals[i] != 0)
            .map(|i| (sys::cstr(&names[i * 64..(i + 1) * 64]), vals[i]))
            .collect();
    }
    Vec::new()
}

fn hw_detail(vm: &mut Vlib, sw: SwIfIndex) -> String {
    let names: Vec<String> = (0..vm.n_threads()).map(|t| vm.thread_name(t)).collect();
    let m = vm.ext_mut::<DpdkMain>();
    let (Some(api), Some(p)) = (m.api, m.ports.iter().find(|p| p.sw_if == sw)) else {
        return String::new();
    };
    let mut out = String::new();
    let l = &p.link;
    let up = l.up.load(Ordering::Relaxed);
    let _ = writeln!(
        out,
        "  carrier: {}{}, link events {} ({})",
        if up { "up" } else { "down" },
        if up {
            format!(
                " {} {}",
                port::fmt_speed(l.speed.load(Ordering::Relaxed)),
                if l.duplex.load(Ordering::Relaxed) != 0 {
                    "full-duplex"
                } else {
                    "half-duplex"
                }
            )
        } else {
            String::new()
        },
        l.events.load(Ordering::Relaxed),
        if l.interrupt {
            "interrupt"
        } else {
            "polled every second"
        }
    );
    let i = &p.info;
    let _ = writeln!(
        out,
        "  dpdk: pmd {} device {} (bus {}) port {} numa {}, mac {}, mtu {} (max {})",
        sys::cstr(&i.driver),
        sys::cstr(&i.dev_name),
        sys::cstr(&i.bus),
        p.port_id,
        i.numa,
        fmt_mac(&i.mac),
        i.mtu,
        i.max_mtu
    );
    let _ = writeln!(
        out,
        "  rx: {} queue(s) of max {}, {} descs each, rss {}",
        p.conf.n_rxq,
        i.max_rx_queues,
        p.conf.n_rxd,
        port::rss_names(p.conf.rss_hf)
    );
    for (q, r) in p.rx.iter().enumerate() {
        let _ = writeln!(
            out,
            "    queue {q}: thread {} ({}) {}",
            r.thread,
            names.get(r.thread).map(String::as_str).unwrap_or("?"),
            r.mode.as_str()
        );
    }
    let _ = writeln!(
        out,
        "  tx: {} queue(s) of max {}, {} descs each{}",
        p.conf.n_txq,
        i.max_tx_queues,
        p.conf.n_txd,
        if p.tx_shared {
            ", shared by threads (locked)"
        } else {
            ", one per thread"
        }
    );
    let mut s = sys::Stats::default();
    // SAFETY: valid out pointer; the port lives as long as the process.
    if unsafe { (api.stats_get)(p.port_id, &mut s) } == 0 {
        let _ = writeln!(
            out,
            "  device stats: ipackets {} ibytes {} opackets {} obytes {} imissed {} ierrors {} oerrors {} rx_nombuf {}",
            s.ipackets, s.ibytes, s.opackets, s.obytes, s.imissed, s.ierrors, s.oerrors, s.rx_nombuf
        );
    }
    let xs = xstats(api, p.port_id);
    if !xs.is_empty() {
        let _ = writeln!(out, "  extended stats:");
        for (n, v) in xs {
            let _ = writeln!(out, "    {n:<40}{v:>20}");
        }
    }
    out
}

fn cli_version(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    if sys::SHIM.is_none() {
        return Ok(format!("{}\n", not_built()));
    }
    let m = vm.ext_mut::<DpdkMain>();
    let Some(api) = m.api else {
        return Ok(format!(
            "DPDK support built against {}; not started (no `dpdk' section)\n",
            sys::BUILT_VERSION
        ));
    };
    Ok(format!(
        "DPDK Version:             {} (built against {})\nDPDK EAL init args:       {}\n",
        api.running_version(),
        sys::BUILT_VERSION,
        m.eal_args[1..].join(" ")
    ))
}

fn cli_buffer(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    let m = vm.ext_mut::<DpdkMain>();
    let Some(api) = m.api else {
        return Ok("DPDK is not started\n".into());
    };
    let mut out = format!(
        "{:<12}{:>10}{:>12}{:>10}\n",
        "name", "size", "available", "in use"
    );
    // The zero-copy mempool's size and counts are Sluice's pool's: `lent` below.
    let rx = m.rx_pool.filter(|_| !m.zero_copy);
    for (name, p) in [("sluice_rx", rx), ("sluice_tx", m.tx_pool)] {
        if let Some(p) = p {
            // SAFETY: live pools (never freed).
            let (size, avail, used) = unsafe {
                (
                    (api.pool_size)(p.0),
                    (api.pool_avail)(p.0),
                    (api.pool_in_use)(p.0),
                )
            };
            let _ = writeln!(out, "{name:<12}{size:>10}{avail:>12}{used:>10}");
        }
    }
    let _ = writeln!(
        out,
        "receive: {}",
        if m.zero_copy {
            format!(
                "zero-copy (mempool sluice_zc: Sluice's buffers), {} lent to DPDK now \
                 (mempool caches, device queues)",
                zc::lent(api)
            )
        } else {
            "copies into Sluice buffers".into()
        }
    );
    Ok(out)
}

/// Sluice buffers DPDK holds now (zero copy: in the mempool's per-lcore caches and device
/// queues): what a leak check subtracts from the pool's `in_use`.
pub fn lent_buffers(vm: &Vlib) -> u64 {
    vm.ext::<DpdkMain>().and_then(|m| m.api).map_or(0, zc::lent)
}

/// The most Sluice buffers DPDK can hold for good (zero copy): [`zc_held`] over every rx and
/// tx descriptor of every port. A leak check asserts [`lent_buffers`] stays within it, so
/// that what it subtracts from the pool's `in_use` cannot hide a leak larger than DPDK's own
/// holdings.
pub fn lent_bound(vm: &mut Vlib) -> u64 {
    let threads = vm.n_threads();
    let descs: u64 = vm
        .ext_mut::<DpdkMain>()
        .ports
        .iter()
        .map(|p| {
            let c = &p.conf;
            u64::from(c.n_rxq) * u64::from(c.n_rxd) + u64::from(c.n_txq) * u64::from(c.n_txd)
        })
        .sum();
    zc_held(descs, threads)
}

/// For benchmarks only: writes `frames` round-robin into every mbuf's data of the receive
/// pool, so that a PMD that does not write packet data (net_null) "receives" them. With
/// zero-copy receive the mbufs are every Sluice buffer, free or not: refused unless no
/// Sluice buffer is in use outside DPDK and no worker runs (nothing in flight to overwrite);
/// the data then changes at every receive and is forwarded in place (a benchmark refreshes
/// it by other means).
pub fn fill_rx_pool(vm: &mut Vlib, frames: &[Vec<u8>]) -> Result<(), String> {
    let m = vm.ext_mut::<DpdkMain>();
    let (Some(api), Some(pool), zero_copy) = (m.api, m.rx_pool, m.zero_copy) else {
        return Err("DPDK is not started".into());
    };
    if zero_copy {
        let outside = sluice_graph::buffer_use(vm).used;
        if outside > 0 || vm.n_threads() > 1 {
            return Err(format!(
                "zero copy: filling the receive pool would overwrite every Sluice buffer, and \
                 {outside} are in use outside DPDK ({} threads)",
                vm.n_threads()
            ));
        }
    }
    let bytes: Vec<u8> = frames.iter().flatten().copied().collect();
    let lens: Vec<u16> = frames.iter().map(|f| f.len() as u16).collect();
    // SAFETY: `bytes` holds the frames whose lengths `lens` gives; the pool is live.
    unsafe { (api.pool_fill)(pool.0, bytes.as_ptr(), lens.as_ptr(), lens.len() as u32) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_copy_only_for_drivers_copying_through_the_virtual_address() {
        for n in [
            "net_ring0",
            "net_null1",
            "net_tap0",
            "net_af_packet0",
            "net_vhost0",
        ] {
            assert!(zero_copy_driver(n), "{n}");
        }
        for n in [
            "net_af_xdp0",
            "net_virtio_user0",
            "net_memif0",
            "eth_ring0",
            "",
            "net_",
        ] {
            assert!(!zero_copy_driver(n), "{n}");
        }
    }

    #[test]
    fn zero_copy_warns_of_num_mbufs_and_a_pool_too_small() {
        let cfg = DpdkConfig::default();
        // One thread: 384 in its cache; 1024 rx + 1024 tx descriptors.
        assert!(zc_warnings(&cfg, 2048, 1, 8192).is_empty());
        let w = zc_warnings(&cfg, 2048, 1, 4096);
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("can hold 2432 of Sluice's 4096"), "{w:?}");
        let cfg = DpdkConfig {
            num_mbufs: Some(50000),
            ..Default::default()
        };
        let w = zc_warnings(&cfg, 2048, 1, 8192);
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("`num-mbufs 50000' ignored"), "{w:?}");
    }

    #[test]
    fn pools_are_sized_from_the_queues() {
        let cfg = DpdkConfig::default();
        // Two ports, 2 rx queues x 1024 and 2 tx queues x 512, two threads.
        let (rx, tx) = pool_sizes(&cfg, &[(2, 1024, 2, 512), (2, 1024, 2, 512)], 2);
        let burst = 2 * (256 + 512);
        assert_eq!(rx, 4096 + burst);
        assert_eq!(tx, 4096.max(2048 + burst));
        let cfg = DpdkConfig {
            num_mbufs: Some(50000),
            ..Default::default()
        };
        assert_eq!(pool_sizes(&cfg, &[], 1).0, 50000);
        assert_eq!(mem_mb(0, 0), 192);
        assert!(mem_mb(16384, 16384) > 192 + 70);
    }

    #[test]
    fn not_built_is_one_line() {
        assert!(!DESCRIPTION.is_empty());
        let e = not_built();
        assert!(e.starts_with("DPDK support is not built into this binary"));
        assert!(!e.contains('\n'));
    }
}
