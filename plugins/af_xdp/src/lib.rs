//! AF_XDP interfaces (VPP's `af_xdp` plugin): attach Sluice to a Linux network interface
//! through AF_XDP sockets, fed by an XDP program that redirects the interface's packets to
//! them before the kernel stack sees them.
//!
//! CLI (VPP syntax):
//! - `create interface af_xdp host-if <linux-if> [name <n>] [num-rx-queues <n>|all]
//!   [rx-queue-size <n>] [tx-queue-size <n>] [zero-copy|no-zero-copy] [prog <file>]
//!   [umem auto|arena|own]`
//!   creates `<linux-if>/<instance>` (or `<n>`) and prints its name;
//! - `delete interface af_xdp <name>`;
//! - `show af_xdp` (alias `show af-xdp`): mode, queues, rings, UMEM, kernel counters.
//!
//! Per interface: an `XSKMAP` and the built-in redirect program (see [`bpf`]; loaded with
//! the `bpf(2)` syscall from Rust, no libbpf/libxdp) or, with `prog <file>`, the XDP program
//! of an eBPF object file ([`elf`]) whose `xsks_map` becomes that XSKMAP, attached through a bpf_link in native
//! mode or, when the driver refuses, generic mode; one AF_XDP socket per rx queue, each with
//! bound with `XDP_USE_NEED_WAKEUP` in zero-copy mode if the driver grants it, else copy mode.
//! The UMEM ([`arena`], [`xsk`]) is the buffer pool's data array itself when it fits what
//! RLIMIT_MEMLOCK leaves (`umem arena`, chosen by `umem auto`, the default): registered once
//! and shared by every af_xdp socket, packets are received into and sent from graph buffers
//! with no copy. Otherwise (`umem own`) each socket has its own small UMEM and packets are
//! copied, one memcpy each. Queues beyond the device's are clamped with a message.
//! The Linux interface is set up and put in promiscuous mode (an AF_PACKET membership that
//! ends with the interface). The Sluice interface gets its own MAC, as af_packet does.
//!
//! Each socket also transmits: thread t uses socket `t % queues`, under a spin lock taken
//! once per frame (uncontended when queues >= threads).
//!
//! Delete is safe while traffic flows: the interface stops transmitting at once, every
//! thread drops its rx queues and tx entry at a safe point, then the program is detached
//! (closing the link), the sockets closed and the UMEMs unmapped.

pub mod api;
pub mod arena;
pub mod node;
use sluice_bpf::{bpf, elf};
pub mod xsk;

use node::{AfXdpInput, AfXdpTx, RxQueue, TxEntry, INPUT};
use sluice_cli::{Args, CliError, CommandTree};
use sluice_graph::rxmode::{RxMode, RxModeState};
use sluice_graph::{GraphBuilder, NodeIndex, NodeKind, NodeRegistration, Vlib};
use sluice_vnet::devices::fdq::{self, FdDriver, Placed};
use sluice_vnet::devices::linux::{linux_if, linux_name, random_mac, RxPlacement};
use sluice_vnet::error::{VnetError, VnetResult};
use sluice_vnet::interface::{counter, fmt_mac, Interfaces, SwIfIndex};
use sluice_vnet::rxq::RxQueueInfo;
use std::fmt::Write as _;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Weak};
use xsk::{UmemSpec, XskGeometry, XskStats, ZcMode, MAX_RING, MIN_RING};

/// Driver name (`show hardware-interfaces`).
pub const DRIVER: &str = "af_xdp";
/// Most rx queues per interface.
pub const MAX_QUEUES: u32 = 16;
/// Default rx / tx ring sizes: 512 + 512 frames of 2 KiB = 2 MiB of UMEM per queue, so four
/// queues fit the common 8 MiB RLIMIT_MEMLOCK.
pub const DEFAULT_RING: u32 = 512;
/// Largest L3 MTU: a copy-mode frame holds 2048 - 256 bytes of packet.
pub const MAX_MTU: u32 = (xsk::FRAME_SIZE - 256 - 14 - 8) as u32;

/// How many rx queues to open.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Queues {
    /// This many (clamped to the device's).
    N(u32),
    /// One per device queue.
    All,
}

/// Which UMEM an interface's sockets use (`umem auto|arena|own`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum UmemChoice {
    /// The buffer arena when it fits, else per-socket UMEMs (the default).
    Auto,
    /// The buffer arena or fail.
    Arena,
    /// Per-socket UMEMs (copy).
    Own,
}

/// Options of `create interface af_xdp`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateArgs {
    /// Linux interface.
    pub host: String,
    /// Sluice interface name (default `<host>/<instance>`).
    pub name: Option<String>,
    /// rx queues.
    pub queues: Queues,
    /// rx (and fill) ring entries.
    pub rx_size: u32,
    /// tx (and completion) ring entries.
    pub tx_size: u32,
    /// Zero-copy policy.
    pub mode: ZcMode,
    /// Generic (skb) XDP even where the driver has native XDP.
    pub generic: bool,
    /// `prog <file>`: an eBPF object file instead of the built-in program.
    pub prog: Option<String>,
    /// UMEM policy.
    pub umem: UmemChoice,
}

/// One socket as the control plane knows it.
struct QueueInfo {
    xsk: Arc<xsk::Xsk>,
    thread: usize,
    mode: RxMode,
    /// Kernel drop counters already folded into rx-miss.
    seen: XskStats,
}

/// One af_xdp interface.
pub struct XdpDev {
    /// Linux interface.
    pub host: String,
    /// Linux ifindex.
    pub ifindex: u32,
    /// Sluice interface.
    pub sw_if: SwIfIndex,
    /// Sluice interface name.
    pub name: String,
    /// Instance number in the default name.
    pub instance: u32,
    /// Queues of the device.
    pub dev_queues: u32,
    /// Ring sizes.
    pub geo: XskGeometry,
    /// Native (driver) XDP, else generic.
    pub native: bool,
    /// Why native mode was not used.
    pub fallback: Option<String>,
    /// The XDP program: built-in or file and section.
    pub program: String,
    /// Whether the sockets use the buffer arena as UMEM.
    pub arena: bool,
    /// Why this UMEM was chosen.
    pub umem_why: String,
    /// How it was created (`show running-config`).
    pub args: CreateArgs,
    queues: Vec<QueueInfo>,
    // Dropped in this order: the link detaches the program, then the map, then the
    // promiscuous membership ends; the sockets go with the last `Arc<Xsk>`.
    _link: bpf::Link,
    _map: bpf::XskMap,
    _promisc: OwnedFd,
}

/// af_xdp control-plane state (a `Vlib` extension).
#[derive(Default)]
pub struct AfXdpMain {
    devs: Vec<XdpDev>,
    placement: RxPlacement,
    /// Every socket that uses the buffer arena as UMEM, also those of deleted interfaces a
    /// busy worker still holds: while one lives the arena is registered, and a new socket
    /// shares it through a live one.
    arena_socks: Vec<Weak<xsk::Xsk>>,
}

/// The `af_xdp` plugin.
pub struct AfXdpPlugin;

/// This plugin, for the daemon's plugin list (`sluice_plugins::all()`).
pub static PLUGIN: AfXdpPlugin = AfXdpPlugin;

impl sluice_vnet::plugin::Plugin for AfXdpPlugin {
    fn name(&self) -> &'static str {
        "af_xdp"
    }
    fn version(&self) -> &'static str {
        env!("CARGO_PKG_VERSION")
    }
    fn description(&self) -> &'static str {
        "AF_XDP interfaces (create interface af_xdp)"
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
        init(vm);
        Ok(())
    }
}

/// Registers `af_xdp-input` (the tx nodes are added per interface at runtime).
pub fn register(b: &mut GraphBuilder) {
    b.register(
        NodeRegistration::new(INPUT, NodeKind::Input, |_| Box::new(AfXdpInput::default()))
            .nexts(node::RxNext::NAMES)
            .counters(node::RxCounter::DESCS),
    );
}

/// The af_xdp driver's rx-queue operations ([`sluice_vnet::devices::fdq`]).
pub struct AfXdp;

impl FdDriver for AfXdp {
    type Queue = RxQueue;
    type Node = AfXdpInput;
    const INPUT: &'static str = INPUT;
    fn set(n: &mut AfXdpInput) -> &mut fdq::QueueSet<RxQueue> {
        &mut n.queues
    }
    fn placements(vm: &mut Vlib) -> Vec<RxQueueInfo> {
        let m = vm.ext_mut::<AfXdpMain>();
        m.devs
            .iter()
            .flat_map(|d| {
                d.queues.iter().map(|q| RxQueueInfo {
                    sw_if: d.sw_if,
                    queue: q.xsk.queue as u16,
                    thread: q.thread,
                    mode: q.mode,
                })
            })
            .collect()
    }
    fn record(vm: &mut Vlib, i: RxQueueInfo) {
        let m = vm.ext_mut::<AfXdpMain>();
        if let Some(q) = m
            .devs
            .iter_mut()
            .find(|d| d.sw_if == i.sw_if)
            .and_then(|d| d.queues.iter_mut().find(|q| q.xsk.queue as u16 == i.queue))
        {
            q.thread = i.thread;
            q.mode = i.mode;
        }
    }
}

/// Adds the driver's lines to `show hardware-interfaces` and registers the rx-queue
/// operations (`set interface rx-mode|rx-placement`).
pub fn init(vm: &mut Vlib) {
    sluice_vnet::rxq::register_driver(vm, fdq::rx_driver::<AfXdp>());
    sluice_vnet::runconf::register_creator(vm, DRIVER, api::creator);
    vm.ext_mut::<Interfaces>()
        .hw_details
        .push((DRIVER, hw_detail));
}

/// Registers the af_xdp CLI.
pub fn register_cli(t: &mut CommandTree<Vlib>) {
    t.add(
        "create interface af_xdp",
        "create interface af_xdp host-if <linux-if> [name <ifname>] [num-rx-queues <n>|all] [rx-queue-size <n>] [tx-queue-size <n>] [zero-copy|no-zero-copy] [generic-xdp] [prog <file>] [umem auto|arena|own]",
        cli_create,
    );
    t.add(
        "delete interface af_xdp",
        "delete interface af_xdp <interface>",
        cli_delete,
    );
    t.add(
        "show af_xdp",
        "show af_xdp — AF_XDP interfaces: XDP mode and program, copy/zero-copy, queues, rings, kernel counters",
        cli_show,
    );
    t.add(
        "show af-xdp",
        "show af-xdp — same as `show af_xdp'",
        cli_show,
    );
}

fn ring_size(a: &mut Args, what: &str) -> Result<u32, CliError> {
    let n = a.u32(what)?;
    if !n.is_power_of_two() || !(MIN_RING..=MAX_RING).contains(&n) {
        return Err(CliError::new(format!(
            "{what} `{n}' must be a power of two from {MIN_RING} to {MAX_RING}"
        )));
    }
    Ok(n)
}

fn parse_create(a: &mut Args) -> Result<CreateArgs, CliError> {
    let mut host = None;
    let mut name = None;
    let mut queues = Queues::N(1);
    let mut rx_size = DEFAULT_RING;
    let mut tx_size = DEFAULT_RING;
    let mut mode = ZcMode::Auto;
    let mut generic = false;
    let mut prog = None;
    let mut umem = UmemChoice::Auto;
    while !a.is_empty() {
        if a.keyword("host-if") {
            host = Some(a.word("Linux interface name")?);
        } else if a.keyword("name") {
            let n = a.word("interface name")?;
            if n.is_empty() || n.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(CliError::new(format!("bad interface name `{n}'")));
            }
            name = Some(n);
        } else if a.keyword("num-rx-queues") {
            if a.keyword("all") {
                queues = Queues::All;
            } else {
                let n = a.u32("num-rx-queues")?;
                if n == 0 || n > MAX_QUEUES {
                    return Err(CliError::new(format!(
                        "num-rx-queues `{n}' out of range 1..{MAX_QUEUES} (or `all')"
                    )));
                }
                queues = Queues::N(n);
            }
        } else if a.keyword("rx-queue-size") {
            rx_size = ring_size(a, "rx-queue-size")?;
        } else if a.keyword("tx-queue-size") {
            tx_size = ring_size(a, "tx-queue-size")?;
        } else if a.keyword("zero-copy") {
            mode = ZcMode::ZeroCopy;
        } else if a.keyword("no-zero-copy") {
            mode = ZcMode::Copy;
        } else if a.keyword("generic-xdp") {
            generic = true;
        } else if a.keyword("prog") {
            prog = Some(a.word("program file")?);
        } else if a.keyword("umem") {
            let w = a.word("umem auto|arena|own")?;
            umem = match w.as_str() {
                "auto" => UmemChoice::Auto,
                "arena" => UmemChoice::Arena,
                "own" => UmemChoice::Own,
                _ => {
                    return Err(CliError::new(format!(
                        "umem `{}': expected auto, arena or own",
                        sluice_cli::error::clip(&w)
                    )))
                }
            };
        } else if let Some(
            w @ ("netns" | "no-syscall-lock" | "mac-reuse" | "multi-buffer" | "no-multi-buffer"),
        ) = a.peek()
        {
            return Err(CliError::new(format!(
                "`{w}' is not supported by Sluice's af_xdp yet"
            )));
        } else if host.is_none() {
            // VPP also accepts the Linux interface without `host-if'.
            host = Some(a.word("Linux interface name")?);
        } else {
            a.finish()?;
        }
    }
    let host = host.ok_or_else(|| CliError::new("missing `host-if <linux-if>'"))?;
    let host = linux_name("Linux interface name", &host)?;
    Ok(CreateArgs {
        host,
        name,
        queues,
        rx_size,
        tx_size,
        mode,
        generic,
        prog,
        umem,
    })
}

/// Most bytes read from a `prog` file (eBPF objects are kilobytes; this keeps `/dev/zero`
/// or a mistyped multi-gigabyte path from stalling the control plane).
const MAX_PROG_FILE: u64 = 16 << 20;

/// Where a `prog` name without `/` is looked up, as VPP (libxdp's `LIBXDP_OBJECT_PATH`,
/// then the usual install directories); a name with `/` is a path (relative to the daemon's
/// working directory).
fn prog_dirs() -> Vec<std::path::PathBuf> {
    let mut d: Vec<std::path::PathBuf> = std::env::var_os("LIBXDP_OBJECT_PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    d.push("/usr/lib/bpf".into());
    d.push(format!("/usr/lib/{}-linux-gnu/bpf", std::env::consts::ARCH).into());
    d
}

/// Reads and parses the object file of `prog <file>`.
fn read_prog(file: &str) -> Result<(std::path::PathBuf, elf::Object), String> {
    use std::io::Read as _;
    let path = if file.contains('/') {
        std::path::PathBuf::from(file)
    } else {
        let dirs = prog_dirs();
        dirs.iter()
            .map(|d| d.join(file))
            .find(|p| p.is_file())
            .ok_or_else(|| {
                let where_: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
                format!(
                    "not found in {} (a name with `/' is a path)",
                    where_.join(", ")
                )
            })?
    };
    let f = std::fs::File::open(&path).map_err(|e| format!("cannot open: {e}"))?;
    let meta = f.metadata().map_err(|e| format!("cannot open: {e}"))?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let mut data = Vec::new();
    f.take(MAX_PROG_FILE + 1)
        .read_to_end(&mut data)
        .map_err(|e| format!("cannot read: {e}"))?;
    if data.len() as u64 > MAX_PROG_FILE {
        return Err(format!(
            "larger than {} MiB, not an eBPF object",
            MAX_PROG_FILE >> 20
        ));
    }
    Ok((path, elf::parse(&data)?))
}

fn cli_create(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let c = parse_create(a)?;
    let (name, note) = create(vm, &c)?;
    Ok(match note {
        Some(n) => format!("{name}\n{n}\n"),
        None => format!("{name}\n"),
    })
}

/// The tx node of interface `name`: `<name>-tx`, added on first use and reused when an
/// interface of that name is created again.
fn tx_node(vm: &mut Vlib, name: &str) -> VnetResult<NodeIndex> {
    let tx = format!("{name}-tx");
    if let Some(i) = vm.registry.find(&tx) {
        return Ok(i);
    }
    vm.add_node(
        NodeRegistration::new(&tx, NodeKind::Internal, |_| Box::new(AfXdpTx::default()))
            .counters(node::TxCounter::DESCS),
    )
    .map_err(|e| VnetError::System(format!("cannot add node `{tx}': {e}")))
}

/// Creates an af_xdp interface; returns its name and a note (queue count clamped).
pub fn create(vm: &mut Vlib, c: &CreateArgs) -> VnetResult<(String, Option<String>)> {
    let instance = {
        let m = vm.ext_mut::<AfXdpMain>();
        (0..)
            .find(|i| !m.devs.iter().any(|d| d.instance == *i))
            .unwrap_or(0)
    };
    let name = c
        .name
        .clone()
        .unwrap_or_else(|| format!("{}/{instance}", c.host));
    if vm.ext_mut::<Interfaces>().find(&name).is_some() {
        return Err(VnetError::Exists(format!(
            "interface `{name}' already exists"
        )));
    }
    if vm
        .ext_mut::<AfXdpMain>()
        .devs
        .iter()
        .any(|d| d.host == c.host)
    {
        return Err(VnetError::Exists(format!(
            "Linux interface `{}' already has an af_xdp interface",
            c.host
        )));
    }
    let (ifindex, mtu) = linux_if::host(&c.host)?;
    let dev_queues = linux_if::rx_queues(&c.host);
    let (nq, note) = match c.queues {
        Queues::All => (dev_queues.min(MAX_QUEUES), None),
        Queues::N(n) if n > dev_queues => (
            dev_queues,
            Some(format!(
                "num-rx-queues {n} clamped to {dev_queues}: `{}' has {dev_queues} rx queue(s)",
                c.host
            )),
        ),
        Queues::N(n) => (n, None),
    };
    if let Some(n) = &note {
        log::warn!("{name}: {n}");
    }
    let geo = XskGeometry {
        rx_size: c.rx_size,
        tx_size: c.tx_size,
    };
    let (use_arena, umem_why, share) = choose_umem(vm, c, ifindex, nq, geo)?;
    // The program file is read and checked before anything changes.
    let object = match &c.prog {
        Some(f) => {
            let clip = sluice_cli::error::clip(f);
            let (path, o) =
                read_prog(f).map_err(|e| VnetError::Invalid(format!("prog `{clip}': {e}")))?;
            if !o.others.is_empty() {
                log::info!(
                    "{name}: {}: loading {}, not the other XDP section(s) {}",
                    path.display(),
                    o.describe(),
                    o.others.join(", ")
                );
            }
            Some((clip, path, o))
        }
        None => None,
    };
    linux_if::set_up(&c.host).map_err(|e| linux_if::refused(&c.host, e))?;

    // Kernel objects first: nothing in Sluice changes if one of them fails.
    let map = bpf::XskMap::create(dev_queues).map_err(|e| linux_if::refused(&c.host, e))?;
    // The program before the sockets: a closed AF_XDP socket frees its queue only later (the
    // kernel defers it), so a refused program must not have bound one.
    let (prog, program) = match &object {
        None => (
            bpf::Program::load_redirect(&map).map_err(|e| linux_if::refused(&c.host, e))?,
            "built-in (bpf_redirect_map(xsks_map, rx_queue_index, XDP_PASS))".to_string(),
        ),
        Some((clip, path, o)) => {
            let p = bpf::load_object(o, &map).map_err(|e| {
                if !e.log.is_empty() {
                    log::error!(
                        "{name}: prog {}: {} refused; verifier log:\n{}",
                        path.display(),
                        o.describe(),
                        e.log.trim_end()
                    );
                }
                VnetError::Invalid(format!(
                    "prog `{clip}': {}: {}{}",
                    o.describe(),
                    e.message,
                    if e.log.is_empty() {
                        ""
                    } else {
                        " (verifier log in the daemon log)"
                    }
                ))
            })?;
            let maps: Vec<&str> = o.maps.iter().map(|m| m.name.as_str()).collect();
            (
                p,
                format!(
                    "{} {}, {} instructions, maps {}",
                    path.display(),
                    o.describe(),
                    o.insns.len(),
                    maps.join(" ")
                ),
            )
        }
    };
    let mut socks: Vec<(Arc<xsk::Xsk>, xsk::RxRings)> = Vec::new();
    let pool = vm.pool.clone();
    let huge = pool.backing() == sluice_buffer::Backing::Huge2M;
    for q in 0..nq {
        let spec = if use_arena {
            UmemSpec::Arena {
                pool: pool.clone(),
                // The first socket registers the arena unless a live one already did.
                share: share
                    .as_ref()
                    .or(socks.first().map(|(x, _)| x))
                    .map(|x| x.fd()),
                // Driver zero-copy DMA needs a chunk in contiguous memory: a 2304-byte chunk
                // crosses 4 KiB pages.
                zero_copy: huge && c.mode != ZcMode::Copy,
            }
        } else {
            UmemSpec::Own
        };
        let (x, rings) = xsk::Xsk::open(ifindex, q, geo, c.mode, &spec)
            .map_err(|e| VnetError::Invalid(format!("`{}' queue {q}: {e}", c.host)))?;
        map.set(q, x.fd())
            .map_err(|e| VnetError::Invalid(format!("`{}' queue {q}: {e}", c.host)))?;
        socks.push((Arc::new(x), rings));
    }
    drop(share);
    if use_arena {
        let m = vm.ext_mut::<AfXdpMain>();
        m.arena_socks
            .extend(socks.iter().map(|(x, _)| Arc::downgrade(x)));
    }
    let (link, fallback) =
        bpf::attach_xdp(&prog, ifindex, c.generic).map_err(|e| linux_if::refused(&c.host, e))?;
    drop(prog);
    if let Some(why) = &fallback {
        log::warn!("{name}: {why}");
    }
    let promisc = sluice_vnet::devices::linux::promiscuous_socket(ifindex)
        .map_err(|e| linux_if::refused(&c.host, e))?;
    let tx_node = tx_node(vm, &name)?;
    vm.registry
        .find(INPUT)
        .ok_or_else(|| VnetError::System("af_xdp-input is not registered".into()))?;

    let mac = random_mac(sluice_vnet::devices::linux::seed(ifindex));
    let sw = sluice_vnet::create_interface(vm, &name, DRIVER, mac, Some(tx_node))?;
    let counters = {
        let ifs = vm.ext_mut::<Interfaces>();
        let i = ifs
            .get_mut(sw)
            .ok_or_else(|| VnetError::System("interface vanished".into()))?;
        i.mtu = mtu.clamp(64, MAX_MTU);
        i.counters.clone()
    };
    if mtu > MAX_MTU {
        log::warn!(
            "{name}: Linux MTU {mtu} is larger than an af_xdp frame carries; Sluice uses {MAX_MTU}"
        );
    }
    sluice_vnet::interface::sync_all(vm);

    let entry = TxEntry {
        queues: Arc::new(socks.iter().map(|(x, _)| x.clone()).collect()),
        counters: counters.clone(),
        subs: vm.ext_mut::<Interfaces>().counter_table.clone(),
    };
    let kicks = (entry.queues.clone(), counters.clone());
    vm.foreach_thread(move |tg| {
        if let Some(n) = tg.node_mut::<AfXdpTx>(tx_node) {
            n.entry = Some(entry.clone());
        }
    });
    set_kicks(vm, tx_node, sw, Some(kicks));
    let mut queues = Vec::new();
    let zero_copy = socks.first().is_some_and(|(x, _)| x.zero_copy);
    for (x, rings) in socks {
        let n_workers = vm.n_workers();
        let thread = vm.ext_mut::<AfXdpMain>().placement.next_thread(n_workers);
        let hz = vm.shared.clock.hz();
        let rxq = RxQueue::new(sw.0, x.clone(), rings, counters.clone());
        fdq::put::<AfXdp>(
            vm,
            thread,
            Placed::new(rxq, RxModeState::new(RxMode::Polling, hz)),
        )?;
        queues.push(QueueInfo {
            xsk: x,
            thread,
            mode: RxMode::Polling,
            seen: XskStats::default(),
        });
    }
    log::info!("{name}: {umem_why}");
    log::info!(
        "{name}: attached to Linux `{}' (ifindex {ifindex}), {} XDP, {}, {nq} of {dev_queues} queue(s), rings rx {} tx {}, mac {}, program {program}",
        c.host,
        if link.native() { "native" } else { "generic" },
        if zero_copy { "zero-copy" } else { "copy mode" },
        geo.rx_size,
        geo.tx_size,
        fmt_mac(&mac)
    );
    vm.ext_mut::<AfXdpMain>().devs.push(XdpDev {
        host: c.host.clone(),
        ifindex,
        sw_if: sw,
        name: name.clone(),
        instance,
        dev_queues,
        geo,
        native: link.native(),
        fallback,
        program,
        arena: use_arena,
        umem_why,
        args: c.clone(),
        queues,
        _link: link,
        _map: map,
        _promisc: promisc,
    });
    Ok((name, note))
}

/// Sets or clears interface `sw`'s tx sockets in every thread's kick set (`tx`: its tx
/// node, which counts the retries).
fn set_kicks(
    vm: &mut Vlib,
    tx: NodeIndex,
    sw: SwIfIndex,
    q: Option<sluice_vnet::devices::TxQueues<Arc<xsk::Xsk>>>,
) {
    let Some(input) = vm.registry.find(INPUT) else {
        return;
    };
    sluice_vnet::devices::set_kick_entry(
        vm,
        input,
        tx,
        sw,
        q,
        |n: &mut AfXdpInput| &mut n.kicks,
        node::TxCounter::KickRetry,
        node::TxCounter::KickDropped,
    );
}

fn cli_delete(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let name = a.word("interface")?;
    a.finish()?;
    delete(vm, &name)?;
    Ok(String::new())
}

/// Deletes the af_xdp interface `name`.
pub fn delete(vm: &mut Vlib, name: &str) -> VnetResult {
    let pos = vm
        .ext_mut::<AfXdpMain>()
        .devs
        .iter()
        .position(|d| d.name == name)
        .ok_or_else(|| VnetError::NotFound(format!("no af_xdp interface `{name}'")))?;
    let sw = vm.ext_mut::<AfXdpMain>().devs[pos].sw_if;
    // Stop transmitting and forwarding to it, then take the queues away from every thread at
    // a safe point; the program is detached and the sockets closed when the last reference
    // goes.
    sluice_vnet::loopback::delete_interface(vm, sw);
    fdq::remove_interface::<AfXdp>(vm, sw);
    let tx = vm.registry.find(&format!("{name}-tx"));
    if let Some(tx) = tx {
        set_kicks(vm, tx, sw, None);
    }
    vm.foreach_thread(move |tg| {
        if let Some(n) = tx.and_then(|i| tg.node_mut::<AfXdpTx>(i)) {
            n.entry = None;
        }
    });
    let dev = vm.ext_mut::<AfXdpMain>().devs.remove(pos);
    if dev.queues.iter().any(|q| Arc::strong_count(&q.xsk) > 1) {
        // A worker did not answer in time: it drops its reference when it does.
        log::warn!("{name}: sockets released late (a worker is busy)");
    }
    Ok(())
}

fn mode_line(d: &XdpDev) -> String {
    let zc = d.queues.first().is_some_and(|q| q.xsk.zero_copy);
    format!(
        "{} XDP, {}, {} of {} queue(s), rx-queue-size {} tx-queue-size {}\n  umem: {}",
        if d.native { "native" } else { "generic" },
        if zc { "zero-copy" } else { "copy mode" },
        d.queues.len(),
        d.dev_queues,
        d.geo.rx_size,
        d.geo.tx_size,
        if d.arena {
            "buffer arena (zero-copy into graph buffers)".to_string()
        } else {
            format!(
                "per-socket umem (copy), {} KiB per queue",
                d.geo.umem_bytes() >> 10
            )
        }
    )
}

/// Whether an interface's sockets use the buffer arena as UMEM (with why, for the log)
/// and a live socket already sharing it, if any; checks the per-socket UMEMs against
/// RLIMIT_MEMLOCK otherwise. `umem arena` that cannot be is a one-line error.
fn choose_umem(
    vm: &mut Vlib,
    c: &CreateArgs,
    ifindex: u32,
    nq: u32,
    geo: XskGeometry,
) -> VnetResult<(bool, String, Option<Arc<xsk::Xsk>>)> {
    let pool = vm.pool.clone();
    let ag = arena::ArenaGeo::of(&pool);
    let region = pool.region().1;
    let m = vm.ext_mut::<AfXdpMain>();
    m.arena_socks.retain(|w| w.strong_count() > 0);
    // Not a socket of this device (one of a deleted interface a busy worker still holds):
    // sharing with a socket on the same device and queue is another kernel path (one fill
    // ring for both), which Sluice does not use.
    let share = m
        .arena_socks
        .iter()
        .filter_map(Weak::upgrade)
        .find(|x| x.ifindex != ifindex);
    // The UMEMs are pinned memory: the whole process's are checked against RLIMIT_MEMLOCK
    // before asking, so the answer is a clear message rather than a refused registration.
    let own: usize = m
        .devs
        .iter()
        .filter(|d| !d.arena)
        .map(|d| d.geo.umem_bytes() * d.queues.len())
        .sum();
    let limit = xsk::memlock_limit();
    let why_not = if c.mode == ZcMode::ZeroCopy
        && (share.is_some() || pool.backing() != sluice_buffer::Backing::Huge2M)
    {
        Some(
            "driver zero-copy on the buffer arena needs the buffers on 2 MiB hugepages and              this interface to register the arena (the first one using it)"
                .to_string(),
        )
    } else {
        arena::arena_fits(&ag, region, share.is_some(), own, limit)
    };
    let arena = match (c.umem, &why_not) {
        (UmemChoice::Own, _) => false,
        (UmemChoice::Arena, Some(w)) => {
            return Err(VnetError::Invalid(format!("umem `arena': {w}")))
        }
        (UmemChoice::Arena, None) | (UmemChoice::Auto, None) => true,
        (UmemChoice::Auto, Some(_)) => false,
    };
    if arena {
        let how = match &share {
            Some(x) => format!(
                "already registered, shared through the socket of queue {}",
                x.queue
            ),
            None => format!("{} KiB registered", region >> 10),
        };
        return Ok((
            true,
            format!(
                "UMEM = the buffer arena (zero-copy into graph buffers): {} buffers x {} B, chunk {} B, {how}",
                ag.n, ag.stride, ag.chunk
            ),
            share,
        ));
    }
    let pinned = own + if share.is_some() { region } else { 0 };
    let want = geo.umem_bytes() * nq as usize;
    if let Some(limit) = limit {
        if (pinned + want) as u64 > limit {
            return Err(VnetError::Invalid(format!(
                "UMEM of {} KiB ({nq} queue(s) x (rx-queue-size {} + tx-queue-size {}) x {} B) \
                 plus {} KiB of other af_xdp interfaces exceeds the locked-memory limit \
                 (RLIMIT_MEMLOCK {} KiB): lower the ring sizes or num-rx-queues",
                want >> 10,
                geo.rx_size,
                geo.tx_size,
                xsk::FRAME_SIZE,
                pinned >> 10,
                limit >> 10
            )));
        }
    }
    let why = match (c.umem, why_not) {
        (UmemChoice::Own, _) => "asked for (`umem own')".to_string(),
        (_, Some(w)) => format!("the buffer arena cannot be the UMEM: {w}"),
        (_, None) => String::new(),
    };
    Ok((
        false,
        format!(
            "per-socket UMEMs (packets copied), {} KiB per queue: {why}",
            geo.umem_bytes() >> 10
        ),
        None,
    ))
}

fn hw_detail(vm: &mut Vlib, sw: SwIfIndex) -> String {
    let m = vm.ext_mut::<AfXdpMain>();
    match m.devs.iter().find(|d| d.sw_if == sw) {
        Some(d) => format!(
            "  af_xdp: Linux `{}' ifindex {}\n  {}\n  XDP program: {}\n",
            d.host,
            d.ifindex,
            mode_line(d),
            d.program
        ),
        None => String::new(),
    }
}

fn cli_show(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let _ = a.keyword("verbose");
    a.finish()?;
    let names: Vec<String> = (0..vm.n_threads()).map(|t| vm.thread_name(t)).collect();
    let mut out = String::new();
    let mut m = vm.take_ext::<AfXdpMain>();
    for d in &mut m.devs {
        let counters = vm
            .ext_mut::<Interfaces>()
            .get(d.sw_if)
            .map(|i| i.counters.clone());
        let Some(counters) = counters else { continue };
        let _ = writeln!(
            out,
            "{} (sw_if_index {}): Linux `{}' ifindex {}",
            d.name, d.sw_if.0, d.host, d.ifindex
        );
        let _ = writeln!(out, "  {}", mode_line(d));
        let _ = writeln!(out, "  {}", d.umem_why);
        let _ = writeln!(out, "  XDP program: {}", d.program);
        if let Some(why) = &d.fallback {
            let _ = writeln!(out, "  {why}");
        }
        let mut new_drops = 0;
        for q in &mut d.queues {
            let s = q.xsk.stats().unwrap_or(q.seen);
            new_drops += (s.rx_dropped + s.rx_ring_full)
                .saturating_sub(q.seen.rx_dropped + q.seen.rx_ring_full);
            q.seen = s;
            let _ = writeln!(
                out,
                "    queue {}: fd {} thread {} ({}) {}, kernel rx dropped {} ring full {} fill ring empty {} invalid rx/tx descs {}/{}",
                q.xsk.queue,
                q.xsk.fd(),
                q.thread,
                names.get(q.thread).map(String::as_str).unwrap_or("?"),
                q.mode.as_str(),
                s.rx_dropped,
                s.rx_ring_full,
                s.rx_fill_ring_empty_descs,
                s.rx_invalid_descs,
                s.tx_invalid_descs
            );
            let napi = q.xsk.napi_id();
            let _ = writeln!(
                out,
                "      napi id {napi}{}",
                match (q.xsk.busy_poll, napi) {
                    (false, _) => " (busy polling refused by the kernel)",
                    (true, 0) =>
                        " (none recorded: no busy polling, the kernel's NAPI does the receive work)",
                    (true, _) => " (busy polled in polling mode)",
                }
            );
            for l in q.xsk.counters.format(d.arena).lines() {
                let _ = writeln!(out, "      {l}");
            }
            let k = &q.xsk.kick;
            let _ = writeln!(
                out,
                "      tx kick retries {}, frames given up {}{}",
                k.retries.load(std::sync::atomic::Ordering::Relaxed),
                k.given_up.load(std::sync::atomic::Ordering::Relaxed),
                if k.pending() {
                    ", frames waiting for a kick"
                } else {
                    ""
                }
            );
        }
        // Kernel drops at the socket are this interface's rx-miss too (thread 0's slot: the
        // CLI runs on the main thread, the only writer of that slot).
        counters.add(0, counter::RX_MISS, new_drops);
    }
    vm.put_ext(m);
    if out.is_empty() {
        out.push_str("no af_xdp interfaces\n");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<CreateArgs, String> {
        parse_create(&mut Args::new(s)).map_err(|e| e.to_string())
    }

    #[test]
    fn create_arguments() {
        let c = parse("host-if veth0 name x0 num-rx-queues all rx-queue-size 1024 tx-queue-size 256 no-zero-copy").unwrap();
        assert_eq!(
            c,
            CreateArgs {
                host: "veth0".into(),
                name: Some("x0".into()),
                queues: Queues::All,
                rx_size: 1024,
                tx_size: 256,
                mode: ZcMode::Copy,
                generic: false,
                prog: None,
                umem: UmemChoice::Auto,
            }
        );
        let d = parse("host-if eth1 num-rx-queues 2 zero-copy").unwrap();
        assert_eq!(
            (d.queues, d.rx_size, d.tx_size, d.mode),
            (Queues::N(2), DEFAULT_RING, DEFAULT_RING, ZcMode::ZeroCopy)
        );
        assert!(parse("host-if eth1 generic-xdp").unwrap().generic);
        assert_eq!(
            parse("host-if eth1 prog /tmp/p.o").unwrap().prog.as_deref(),
            Some("/tmp/p.o")
        );
        // VPP's positional form.
        assert_eq!(parse("eth2").unwrap().host, "eth2");
    }

    #[test]
    fn bad_arguments_name_the_token() {
        assert!(parse("").unwrap_err().contains("missing `host-if"));
        assert!(parse("host-if x bogus-word")
            .unwrap_err()
            .contains("`bogus-word'"));
        assert!(parse("host-if x num-rx-queues 0")
            .unwrap_err()
            .contains("num-rx-queues `0'"));
        assert!(parse("host-if x rx-queue-size 1000")
            .unwrap_err()
            .contains("`1000'"));
        assert!(parse("host-if x tx-queue-size 8192")
            .unwrap_err()
            .contains("`8192'"));
        assert!(parse("host-if x prog")
            .unwrap_err()
            .contains("program file"));
        assert!(parse("host-if x netns foo")
            .unwrap_err()
            .contains("`netns'"));
        assert!(parse("host-if averyveryverylongname")
            .unwrap_err()
            .contains("bad Linux interface name"));
    }

    #[test]
    fn prog_files_are_checked_before_anything_changes() {
        let fixture = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../crates/bpf/tests/data/xdp_drop_icmp.o"
        );
        let (path, o) = read_prog(fixture).unwrap();
        assert_eq!(path, std::path::PathBuf::from(fixture));
        assert_eq!(o.section, "xdp");
        let e = |f: &str| read_prog(f).map(|_| ()).unwrap_err();
        assert!(e("/nonexistent/x.o").contains("cannot open"));
        assert!(e("/dev/zero").contains("not a regular file"));
        assert!(e("/").contains("not a regular file"));
        assert!(e("no-such-prog-file.o").contains("not found in"));
        assert!(e("/proc/self/status").contains("not an ELF object"));
    }

    #[test]
    fn default_rings_fit_four_queues_in_8_mib() {
        let g = XskGeometry {
            rx_size: DEFAULT_RING,
            tx_size: DEFAULT_RING,
        };
        assert!(g.umem_bytes() * 4 <= 8 << 20);
    }
}
