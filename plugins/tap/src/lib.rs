//! tap interfaces (VPP's `create tap`): a Linux tap device whose host side lives in the
//! kernel (optionally moved into a network namespace and addressed there) and whose other
//! side is a Sluice interface `tap<N>` — the kernel-facing interface for punting to Linux and
//! for attaching Linux hosts without a veth.
//!
//! CLI (VPP syntax):
//! - `create tap [id <n>] [hw-addr <mac>] [num-rx-queues <n>] [num-tx-queues <n>]
//!   [host-if-name <name>] [host-ns <netns>] [host-bridge <br>] [host-mac-addr <mac>]
//!   [host-mtu-size <n>] [host-ip4-addr <a/len>] [host-ip6-addr <a/len>] [host-ip4-gw <a>]
//!   [host-ip6-gw <a>] [gso|no-gso]` creates `tap<N>` and prints its name (`gso`, the
//!   default, as in VPP's syntax); VPP's `tun`, `persist`, `attach`, `gro-coalesce`, `csum-offload`, ring sizes and `if-name`
//!   are refused with a one-line "not supported" error;
//! - `delete tap <interface>`;
//! - `show tap`: host side, queues with their thread, mode and rx counters.
//!
//! Per interface: max(`num-rx-queues`, `num-tx-queues`) fds on `/dev/net/tun` with
//! `IFF_TAP | IFF_NO_PI | IFF_VNET_HDR` (`IFF_MULTI_QUEUE` for more than one: the kernel
//! picks the queue of each frame it sends by flow hash, or the queue Sluice last sent that
//! flow on), a 10-byte `virtio_net_hdr` on every frame, offloads on (`TUNSETOFFLOAD` with
//! `TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_USO4 | TUN_F_USO6`, without USO on a kernel
//! that lacks it): the kernel hands Sluice partial checksums and TCP/UDP GSO aggregates
//! whole, which `virtio-input` keeps as one buffer chain (docs/interfaces.md, "GSO
//! aggregates"); `no-gso` turns them off (`TUNSETOFFLOAD 0`: the kernel segments and
//! checksums first). Since the kernel may
//! deliver on any queue fd, every fd is an rx queue (so `num-tx-queues` above
//! `num-rx-queues` raises the rx queues too); thread t transmits on queue
//! `t mod num-tx-queues` (default: every queue). The rx queues are placed round-robin on the
//! workers (main without workers) and follow `set interface rx-mode|rx-placement` (see
//! [`sluice_vnet::devices::fdq`]).
//!
//! The host side is configured by running iproute2's `ip` (`ip link set <if> netns <ns>`,
//! then, with `-n <ns>`: `link set <if> address|mtu|master`, `addr add`, `link set <if> up`,
//! `route add default via`): set-up only, never on the data path, and the errors `ip`
//! prints are passed on in one line. The device disappears when Sluice closes its fds
//! (delete, exit, or a failed create: whatever was set up on the host side goes with it).
//! `host-mtu-size` is also the Sluice side's MTU, as in VPP.
//!
//! Nodes: see [`node`].

pub mod api;
pub mod node;

use node::{QueueStats, TapInput, TapQueue, TapTx, TxEntry, INPUT, TX};
use sluice_cli::{Args, CliError, CommandTree};
use sluice_graph::{GraphBuilder, NodeKind, NodeRegistration, RxMode, RxModeState, Vlib};
use sluice_vnet::devices::fdq::{self, FdDriver, Placed};
use sluice_vnet::devices::linux::{linux_name, random_mac, RxPlacement};
use sluice_vnet::error::{VnetError, VnetResult};
use sluice_vnet::interface::{fmt_mac, Interfaces, SwIfIndex};
use sluice_vnet::rxq::RxQueueInfo;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::Arc;

/// Most rx queues per interface.
pub const MAX_QUEUES: u32 = 16;

/// `host-mtu-size` range (Linux's IPv4 minimum .. Sluice's largest interface MTU).
pub const HOST_MTU: std::ops::RangeInclusive<u32> = 68..=9216;

/// MTU of both sides without `host-mtu-size`.
pub const DEFAULT_MTU: u32 = 1500;

/// One tap interface, as the control plane knows it.
pub struct TapDev {
    /// `tap<id>`.
    pub id: u32,
    /// Sluice interface.
    pub sw_if: SwIfIndex,
    /// Linux name of the host side.
    pub host_if: String,
    /// Namespace of the host side (`None`: Sluice's own).
    pub host_ns: Option<String>,
    /// Linux bridge the host side is a port of.
    pub host_bridge: Option<String>,
    /// MTU of both sides.
    pub mtu: u32,
    /// Queue fds (queue q = fds[q]).
    pub fds: Arc<Vec<Arc<OwnedFd>>>,
    /// Queues transmitted on (the first `n_tx` fds).
    pub n_tx: usize,
    /// Thread and mode of each rx queue.
    pub rx: Vec<(usize, RxMode)>,
    /// Counters of each rx queue.
    pub stats: Vec<Arc<QueueStats>>,
    /// How it was created (`show running-config`).
    pub args: CreateArgs,
}

/// tap control-plane state (a `Vlib` extension).
#[derive(Default)]
pub struct TapMain {
    devs: Vec<TapDev>,
    placement: RxPlacement,
}

/// The tap driver's rx-queue operations ([`sluice_vnet::devices::fdq`]).
pub struct Tap;

impl FdDriver for Tap {
    type Queue = TapQueue;
    type Node = TapInput;
    const INPUT: &'static str = INPUT;
    fn set(n: &mut TapInput) -> &mut fdq::QueueSet<TapQueue> {
        &mut n.queues
    }
    fn placements(vm: &mut Vlib) -> Vec<RxQueueInfo> {
        let m = vm.ext_mut::<TapMain>();
        m.devs
            .iter()
            .flat_map(|d| {
                d.rx.iter()
                    .enumerate()
                    .map(|(q, &(thread, mode))| RxQueueInfo {
                        sw_if: d.sw_if,
                        queue: q as u16,
                        thread,
                        mode,
                    })
            })
            .collect()
    }
    fn record(vm: &mut Vlib, i: RxQueueInfo) {
        let m = vm.ext_mut::<TapMain>();
        if let Some(r) = m
            .devs
            .iter_mut()
            .find(|d| d.sw_if == i.sw_if)
            .and_then(|d| d.rx.get_mut(i.queue as usize))
        {
            *r = (i.thread, i.mode);
        }
    }
}

/// The `tap` plugin.
pub struct TapPlugin;

/// This plugin, for the daemon's plugin list (`sluice_plugins::all()`).
pub static PLUGIN: TapPlugin = TapPlugin;

impl sluice_vnet::plugin::Plugin for TapPlugin {
    fn name(&self) -> &'static str {
        "tap"
    }
    fn version(&self) -> &'static str {
        env!("CARGO_PKG_VERSION")
    }
    fn description(&self) -> &'static str {
        "Linux tap interfaces (create tap)"
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

/// Registers `virtio-input` and `tap-tx`.
pub fn register(b: &mut GraphBuilder) {
    b.register(
        NodeRegistration::new(INPUT, NodeKind::Input, |_| Box::new(TapInput::default()))
            .nexts(node::RxNext::NAMES)
            .counters(node::RxCounter::DESCS),
    );
    b.register(
        NodeRegistration::new(TX, NodeKind::Internal, |_| Box::new(TapTx::default()))
            .counters(node::TxCounter::DESCS),
    );
}

/// Registers the rx-queue operations.
pub fn init(vm: &mut Vlib) {
    sluice_vnet::runconf::register_creator(vm, "tap", api::creator);
    sluice_vnet::rxq::register_driver(vm, fdq::rx_driver::<Tap>());
}

/// Registers the tap CLI.
pub fn register_cli(t: &mut CommandTree<Vlib>) {
    t.add(
        "create tap",
        "create tap [id <n>] [hw-addr <mac>] [num-rx-queues <n>] [num-tx-queues <n>] [host-if-name <name>] [host-ns <netns>] [host-bridge <br>] [host-mac-addr <mac>] [host-mtu-size <n>] [host-ip4-addr <a/len>] [host-ip6-addr <a/len>] [host-ip4-gw <a>] [host-ip6-gw <a>] [gso|no-gso]",
        cli_create,
    );
    t.add("delete tap", "delete tap <interface>", cli_delete);
    t.add(
        "show tap",
        "show tap — tap interfaces, host side, queues",
        cli_show,
    );
}

/// Options of `create tap`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CreateArgs {
    /// Instance number (`tap<id>`); default: the lowest free.
    pub id: Option<u32>,
    /// MAC of the Sluice side.
    pub hw_addr: Option<[u8; 6]>,
    /// Linux name of the host side (default `tap<id>`).
    pub host_if: Option<String>,
    /// Namespace to move the host side into.
    pub host_ns: Option<String>,
    /// Address for the host side.
    pub host_ip4: Option<String>,
    /// IPv6 address for the host side.
    pub host_ip6: Option<String>,
    /// IPv4 default route of the host side.
    pub host_ip4_gw: Option<Ipv4Addr>,
    /// IPv6 default route of the host side.
    pub host_ip6_gw: Option<Ipv6Addr>,
    /// MAC of the host side (default: the kernel's random one).
    pub host_mac: Option<[u8; 6]>,
    /// MTU of the host side and of the Sluice side (default [`DEFAULT_MTU`]).
    pub host_mtu: Option<u32>,
    /// Existing Linux bridge (in `host_ns` if given) to make the host side a port of.
    pub host_bridge: Option<String>,
    /// rx queues (1 default).
    pub rx_queues: u32,
    /// tx queues (default: as many as rx queues).
    pub tx_queues: Option<u32>,
    /// Driver name of the Sluice interface (default `tap`): another plugin creating taps for
    /// its own use (linux-cp's twins) names itself, so `show running-config` asks it how to
    /// recreate them.
    pub driver: Option<&'static str>,
    /// `no-gso`: offloads off (`TUNSETOFFLOAD 0`): the kernel segments and checksums
    /// before handing frames to Sluice.
    pub no_gso: bool,
}

impl CreateArgs {
    /// Queue fds to open (at least one): every one is read, the first `tx_queues` are
    /// written.
    pub fn n_fds(&self) -> u32 {
        self.rx_queues.max(self.tx_queues.unwrap_or(0)).max(1)
    }
}

/// Whether `w` is `<address>/<len>` of the family.
pub(crate) fn valid_prefix(w: &str, v6: bool) -> bool {
    w.split_once('/').is_some_and(|(ip, len)| {
        let max = if v6 { 128 } else { 32 };
        let ip_ok = if v6 {
            ip.parse::<std::net::Ipv6Addr>().is_ok()
        } else {
            ip.parse::<std::net::Ipv4Addr>().is_ok()
        };
        ip_ok && len.parse::<u8>().is_ok_and(|l| l <= max)
    })
}

fn prefix(a: &mut Args, v6: bool) -> Result<String, CliError> {
    let w = a.word("address/length")?;
    let ok = valid_prefix(&w, v6);
    if !ok {
        return Err(CliError::new(format!(
            "bad {} prefix `{}'",
            if v6 { "IPv6" } else { "IPv4" },
            sluice_cli::error::clip(&w)
        )));
    }
    Ok(w)
}

/// A `what <value>` argument parsed as `T`; the error names option and token.
fn parsed<T: std::str::FromStr>(a: &mut Args, what: &str) -> Result<T, CliError> {
    let w = a.word(what)?;
    w.parse()
        .map_err(|_| CliError::new(format!("bad {what} `{}'", sluice_cli::error::clip(&w))))
}

fn queues(a: &mut Args, what: &str) -> Result<u32, CliError> {
    let n = a.u32(what)?;
    if n == 0 || n > MAX_QUEUES {
        return Err(CliError::new(format!(
            "{what} `{n}' out of range 1..{MAX_QUEUES}"
        )));
    }
    Ok(n)
}

fn parse_create(a: &mut Args) -> Result<CreateArgs, CliError> {
    let mut c = CreateArgs {
        rx_queues: 1,
        ..CreateArgs::default()
    };
    while !a.is_empty() {
        if a.keyword("id") {
            c.id = Some(a.u32("tap id")?);
        } else if a.keyword("hw-addr") {
            c.hw_addr = Some(sluice_vnet::devices::hw_addr_arg(a)?);
        } else if a.keyword("host-if-name") {
            c.host_if = Some(linux_name("host-if-name", &a.word("host interface name")?)?);
        } else if a.keyword("host-ns") {
            c.host_ns = Some(linux_name("host-ns", &a.word("namespace name")?)?);
        } else if a.keyword("host-ip4-addr") {
            c.host_ip4 = Some(prefix(a, false)?);
        } else if a.keyword("host-ip6-addr") {
            c.host_ip6 = Some(prefix(a, true)?);
        } else if a.keyword("host-ip4-gw") {
            c.host_ip4_gw = Some(parsed(a, "host-ip4-gw")?);
        } else if a.keyword("host-ip6-gw") {
            c.host_ip6_gw = Some(parsed(a, "host-ip6-gw")?);
        } else if a.keyword("host-mac-addr") {
            c.host_mac = Some(sluice_vnet::devices::unicast_mac_arg(a, "host-mac-addr")?);
        } else if a.keyword("host-mtu-size") {
            let n = a.u32("host-mtu-size")?;
            if !HOST_MTU.contains(&n) {
                return Err(CliError::new(format!(
                    "host-mtu-size `{n}' out of range {}..{}",
                    HOST_MTU.start(),
                    HOST_MTU.end()
                )));
            }
            c.host_mtu = Some(n);
        } else if a.keyword("host-bridge") {
            c.host_bridge = Some(linux_name("host-bridge", &a.word("bridge name")?)?);
        } else if a.keyword("num-rx-queues") {
            c.rx_queues = queues(a, "num-rx-queues")?;
        } else if a.keyword("num-tx-queues") {
            c.tx_queues = Some(queues(a, "num-tx-queues")?);
        } else if a.keyword("no-gso") {
            c.no_gso = true;
        } else if a.keyword("gso") {
            // The default (VPP's `gso`).
            c.no_gso = false;
        } else if let Some(
            w @ ("tun" | "persist" | "attach" | "gro-coalesce" | "csum-offload" | "rx-ring-size"
            | "tx-ring-size" | "if-name" | "packed" | "in-order" | "consistent-qp"),
        ) = a.peek()
        {
            return Err(CliError::new(format!(
                "`{w}' is not supported yet by Sluice's tap (Ethernet taps)"
            )));
        } else {
            a.finish()?;
        }
    }
    Ok(c)
}

/// Offloads asked of the kernel with GSO on: partial checksums, TCP aggregates over IPv4 and
/// IPv6, UDP (`UDP_SEGMENT`) aggregates; without the last two on a kernel older than 6.2.
const OFFLOADS: [libc::c_uint; 2] = [
    libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6 | libc::TUN_F_USO4 | libc::TUN_F_USO6,
    libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6,
];

/// Opens one queue of tap device `name`, with the kernel's offloads (GSO aggregates and
/// partial checksums handed over as they are, described by the `virtio_net_hdr`) unless
/// `no_gso`.
fn open_queue(name: &str, multi: bool, no_gso: bool) -> Result<OwnedFd, String> {
    // SAFETY: plain open(2) of a NUL-terminated path; the result is checked and owned.
    let fd = unsafe {
        libc::open(
            c"/dev/net/tun".as_ptr(),
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(format!("/dev/net/tun: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: fd was just opened and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is plain data; zeroed is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    let mut flags = libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_VNET_HDR;
    if multi {
        flags |= libc::IFF_MULTI_QUEUE;
    }
    ifr.ifr_ifru.ifru_flags = flags as libc::c_short;
    let hdr: libc::c_int = sluice_vnet::offload::VNET_HDR_LEN as libc::c_int;
    let ioctl_err = |what: &str| format!("{what}: {}", std::io::Error::last_os_error());
    // SAFETY: TUNSETIFF reads and writes the ifreq we pass; the others read an int or take
    // an integer argument.
    unsafe {
        if libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut ifr) < 0 {
            return Err(ioctl_err("TUNSETIFF"));
        }
        if libc::ioctl(fd.as_raw_fd(), libc::TUNSETVNETHDRSZ, &hdr) < 0 {
            return Err(ioctl_err("TUNSETVNETHDRSZ"));
        }
        let wanted: &[libc::c_uint] = if no_gso { &[0] } else { &OFFLOADS };
        if !wanted
            .iter()
            .any(|&f| libc::ioctl(fd.as_raw_fd(), libc::TUNSETOFFLOAD, f as libc::c_ulong) == 0)
        {
            return Err(ioctl_err("TUNSETOFFLOAD"));
        }
    }
    Ok(fd)
}

/// Runs `ip <args>` (host-side set-up); an error is one line quoting the command.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run `ip' (iproute2): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        Err(format!(
            "`ip {}' failed: {}",
            args.join(" "),
            err.split('\n')
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join("; ")
        ))
    }
}

/// Configures the host side: namespace, MAC, MTU, bridge port, addresses, up, default
/// routes. On error the caller closes the fds, which removes the device and with it all of
/// this.
fn host_setup(c: &CreateArgs, host_if: &str) -> Result<(), String> {
    let mut pre: Vec<&str> = Vec::new();
    if let Some(ns) = &c.host_ns {
        ip(&["link", "set", "dev", host_if, "netns", ns])?;
        pre = vec!["-n", ns];
    }
    let run = |rest: &[&str]| {
        let mut v = pre.clone();
        v.extend_from_slice(rest);
        ip(&v)
    };
    if let Some(m) = &c.host_mac {
        run(&["link", "set", "dev", host_if, "address", &fmt_mac(m)])?;
    }
    if let Some(m) = c.host_mtu {
        run(&["link", "set", "dev", host_if, "mtu", &m.to_string()])?;
    }
    if let Some(br) = &c.host_bridge {
        run(&["link", "set", "dev", host_if, "master", br])?;
    }
    if let Some(a) = &c.host_ip4 {
        run(&["addr", "add", a, "dev", host_if])?;
    }
    if let Some(a) = &c.host_ip6 {
        run(&["-6", "addr", "add", a, "dev", host_if, "nodad"])?;
    }
    run(&["link", "set", "dev", host_if, "up"])?;
    if let Some(gw) = c.host_ip4_gw {
        let gw = gw.to_string();
        run(&["route", "add", "default", "via", &gw, "dev", host_if])?;
    }
    if let Some(gw) = c.host_ip6_gw {
        let gw = gw.to_string();
        run(&["-6", "route", "add", "default", "via", &gw, "dev", host_if])?;
    }
    Ok(())
}

fn cli_create(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let c = parse_create(a)?;
    let name = create(vm, &c)?;
    Ok(format!("{name}\n"))
}

/// Creates a tap interface; returns its Sluice name (`tap<id>`).
pub fn create(vm: &mut Vlib, c: &CreateArgs) -> VnetResult<String> {
    let id = match c.id {
        Some(id) => id,
        None => {
            let ifs = vm.ext_mut::<Interfaces>();
            (0..)
                .find(|i| ifs.find(&format!("tap{i}")).is_none())
                .unwrap_or(0)
        }
    };
    let name = format!("tap{id}");
    if vm.ext_mut::<Interfaces>().find(&name).is_some() {
        return Err(VnetError::Exists(format!(
            "interface `{name}' already exists"
        )));
    }
    let host_if = c.host_if.clone().unwrap_or_else(|| name.clone());
    let tx_node = vm
        .registry
        .find(TX)
        .ok_or_else(|| VnetError::System("tap-tx is not registered".into()))?;
    // Device and host side first: nothing in Sluice changes if they fail (closing the fds
    // removes the device).
    let n_fds = c.n_fds();
    let mut fds = Vec::new();
    for q in 0..n_fds {
        let fd = open_queue(&host_if, n_fds > 1, c.no_gso)
            .map_err(|e| VnetError::Invalid(format!("tap `{host_if}' queue {q}: {e}")))?;
        fds.push(Arc::new(fd));
    }
    host_setup(c, &host_if).map_err(VnetError::Invalid)?;
    let n_tx = c.tx_queues.unwrap_or(n_fds) as usize;
    let tx_fds = Arc::new(fds[..n_tx].to_vec());
    let fds = Arc::new(fds);
    let mtu = c.host_mtu.unwrap_or(DEFAULT_MTU);

    let mac = c
        .hw_addr
        .unwrap_or_else(|| random_mac(sluice_vnet::devices::linux::seed(id)));
    let driver = c.driver.unwrap_or("tap");
    let sw = sluice_vnet::create_interface(vm, &name, driver, mac, Some(tx_node))?;
    let counters = {
        let ifs = vm.ext_mut::<Interfaces>();
        let i = ifs
            .get_mut(sw)
            .ok_or_else(|| VnetError::System("interface vanished".into()))?;
        i.mtu = mtu;
        i.counters.clone()
    };
    sluice_vnet::interface::sync_all(vm);
    let entry = TxEntry {
        fds: tx_fds,
        counters: counters.clone(),
        subs: vm.ext_mut::<Interfaces>().counter_table.clone(),
    };
    sluice_vnet::devices::set_tx_entry(vm, tx_node, sw, Some(entry), |n: &mut TapTx| &mut n.table);
    sluice_vnet::output::set_gso(vm, sw, true);
    // With offloads on, the kernel hands aggregates over whole.
    sluice_vnet::feature::set_aggregate_source(vm, sw.0, !c.no_gso);
    let hz = vm.shared.clock.hz();
    let mut rx = Vec::new();
    let mut stats = Vec::new();
    for (q, fd) in fds.iter().enumerate() {
        let n_workers = vm.n_workers();
        let thread = vm.ext_mut::<TapMain>().placement.next_thread(n_workers);
        let st = Arc::new(QueueStats::default());
        stats.push(st.clone());
        let tq = TapQueue::new(sw.0, q as u16, fd.clone(), counters.clone(), st);
        fdq::put::<Tap>(
            vm,
            thread,
            Placed::new(tq, RxModeState::new(RxMode::Polling, hz)),
        )?;
        rx.push((thread, RxMode::Polling));
    }
    vm.ext_mut::<TapMain>().devs.push(TapDev {
        id,
        sw_if: sw,
        host_if: host_if.clone(),
        host_ns: c.host_ns.clone(),
        host_bridge: c.host_bridge.clone(),
        mtu,
        fds,
        n_tx,
        rx,
        stats,
        args: c.clone(),
    });
    if n_fds > c.rx_queues {
        log::info!("{name}: num-tx-queues {n_fds}: the kernel delivers on every queue, so {n_fds} rx queues");
    }
    log::info!(
        "{name}: Linux tap `{host_if}'{}, {n_fds} rx / {n_tx} tx queue(s), mtu {mtu}, mac {}",
        c.host_ns
            .as_ref()
            .map(|n| format!(" in namespace `{n}'"))
            .unwrap_or_default(),
        fmt_mac(&mac)
    );
    Ok(name)
}

fn cli_delete(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let name = a.word("interface")?;
    a.finish()?;
    delete(vm, &name)?;
    Ok(String::new())
}

/// Deletes tap interface `name` (also while traffic flows): Sluice stops sending to it, every
/// thread lets go of its queues at a safe point, and the last reference closes the fds, which
/// removes the Linux device.
pub fn delete(vm: &mut Vlib, name: &str) -> VnetResult {
    let sw = vm
        .ext_mut::<Interfaces>()
        .find(name)
        .ok_or_else(|| VnetError::NotFound(format!("unknown interface `{name}'")))?;
    let pos = vm
        .ext_mut::<TapMain>()
        .devs
        .iter()
        .position(|d| d.sw_if == sw)
        .ok_or_else(|| VnetError::Invalid(format!("`{name}' is not a tap interface")))?;
    sluice_vnet::loopback::delete_interface(vm, sw);
    fdq::remove_interface::<Tap>(vm, sw);
    if let Some(tx) = vm.registry.find(TX) {
        sluice_vnet::devices::set_tx_entry::<TapTx, TxEntry>(vm, tx, sw, None, |n| &mut n.table);
    }
    vm.ext_mut::<TapMain>().devs.remove(pos);
    Ok(())
}

fn cli_show(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    let mut out = String::new();
    let m = vm.take_ext::<TapMain>();
    for d in &m.devs {
        let sw_name = vm
            .ext_mut::<Interfaces>()
            .get(d.sw_if)
            .map(|i| i.name.clone())
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{sw_name} (sw_if_index {}): host-if-name {} host-ns {} host-bridge {} mtu {}",
            d.sw_if.0,
            d.host_if,
            d.host_ns.as_deref().unwrap_or("-"),
            d.host_bridge.as_deref().unwrap_or("-"),
            d.mtu
        );
        let _ = writeln!(out, "  rx queues {} tx queues {}", d.fds.len(), d.n_tx);
        for (q, ((fd, (t, mode)), st)) in d.fds.iter().zip(&d.rx).zip(&d.stats).enumerate() {
            let _ = writeln!(
                out,
                "  queue {q}: fd {} thread {t} ({}) {} rx packets {} rx bytes {}",
                fd.as_raw_fd(),
                vm.thread_name(*t),
                mode.as_str(),
                st.rx_packets.get(),
                st.rx_bytes.get()
            );
        }
    }
    vm.put_ext(m);
    if out.is_empty() {
        out.push_str("no tap interfaces\n");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<CreateArgs, String> {
        parse_create(&mut Args::new(s)).map_err(|e| e.to_string())
    }

    /// A tap with offloads may receive aggregates (a source, the GSO cutting nodes in the
    /// chains); one with `no-gso` may not. Its host side in a namespace of the test's.
    #[test]
    fn a_tap_is_a_source_of_aggregates_unless_no_gso() {
        let ns = format!("stns{}", std::process::id() % 100_000);
        let ip = |args: &[&str]| {
            std::process::Command::new("ip")
                .args(args)
                .status()
                .is_ok_and(|s| s.success())
        };
        if !std::path::Path::new("/dev/net/tun").exists() || !ip(&["netns", "add", &ns]) {
            eprintln!("skipped: no /dev/net/tun or no netns");
            return;
        }
        let entry = sluice_vnet::plugin::PluginEntry {
            plugin: &PLUGIN,
            enabled: true,
        };
        let (mut vm, _cli) = sluice_vnet::testing::configured(&[entry], 0, 256, &[]);
        let mut made = Vec::new();
        for (id, extra) in [(0, ""), (1, " no-gso")] {
            let c = parse(&format!(
                "id {id} host-if-name stsrc{id} host-ns {ns}{extra}"
            ));
            made.push(c.and_then(|c| create(&mut vm, &c).map_err(|e| e.to_string())));
        }
        let sources = sluice_vnet::feature::aggregate_sources(&mut vm);
        let find = |vm: &mut Vlib, n: &str| vm.ext_mut::<Interfaces>().find(n).map(|s| s.0);
        let tap0 = find(&mut vm, "tap0");
        drop(vm);
        ip(&["netns", "del", &ns]);
        assert!(made.iter().all(|m| m.is_ok()), "{made:?}");
        assert_eq!(sources, [tap0.expect("tap0")]);
    }

    #[test]
    fn create_arguments() {
        let c = parse("id 3 hw-addr 02:00:00:00:00:09 host-if-name vtap3 host-ns blue host-ip4-addr 10.0.0.2/24 host-ip6-addr fd00::2/64 num-rx-queues 2").unwrap();
        assert_eq!(
            c,
            CreateArgs {
                id: Some(3),
                hw_addr: Some([2, 0, 0, 0, 0, 9]),
                host_if: Some("vtap3".into()),
                host_ns: Some("blue".into()),
                host_ip4: Some("10.0.0.2/24".into()),
                host_ip6: Some("fd00::2/64".into()),
                rx_queues: 2,
                ..CreateArgs::default()
            }
        );
        let c = parse("");
        assert_eq!(c.as_ref().map(|c| (c.rx_queues, c.n_fds())), Ok((1, 1)));
        let c = parse("host-bridge br0 host-mac-addr 02:aa:00:00:00:01 host-mtu-size 9000 host-ip4-gw 10.0.0.1 host-ip6-gw fd00::1 num-rx-queues 2 num-tx-queues 4 no-gso").unwrap();
        assert_eq!(
            c,
            CreateArgs {
                host_bridge: Some("br0".into()),
                host_mac: Some([2, 0xaa, 0, 0, 0, 1]),
                host_mtu: Some(9000),
                host_ip4_gw: Some(Ipv4Addr::new(10, 0, 0, 1)),
                host_ip6_gw: Some("fd00::1".parse().unwrap()),
                rx_queues: 2,
                tx_queues: Some(4),
                no_gso: true,
                ..CreateArgs::default()
            }
        );
        assert_eq!(c.n_fds(), 4);
        let c = parse("num-rx-queues 4 num-tx-queues 1").unwrap();
        assert_eq!((c.n_fds(), c.tx_queues), (4, Some(1)));
    }

    #[test]
    fn bad_arguments_name_the_token() {
        assert!(parse("bogus").unwrap_err().contains("`bogus'"));
        assert!(parse("id x").unwrap_err().contains("`x'"));
        assert!(parse("num-rx-queues 0").unwrap_err().contains("`0'"));
        assert!(parse("host-ip4-addr 10.0.0.300/24")
            .unwrap_err()
            .contains("`10.0.0.300/24'"));
        assert!(parse("host-ip6-addr 10.0.0.1/24")
            .unwrap_err()
            .contains("`10.0.0.1/24'"));
        assert!(parse("host-if-name averyveryverylongname")
            .unwrap_err()
            .contains("host-if-name"));
        assert!(parse("hw-addr 01:00:5e:00:00:01")
            .unwrap_err()
            .contains("multicast"));
        for (line, token) in [
            ("host-ip4-gw 10.0.0.256", "`10.0.0.256'"),
            ("host-ip4-gw fd00::1", "`fd00::1'"),
            ("host-ip6-gw 10.0.0.1", "`10.0.0.1'"),
            ("host-ip6-gw", "expected host-ip6-gw"),
            ("host-mtu-size 67", "`67'"),
            ("host-mtu-size 9217", "`9217'"),
            ("host-mtu-size big", "`big'"),
            (
                "host-mac-addr 03:00:00:00:00:01",
                "host-mac-addr `03:00:00:00:00:01'",
            ),
            ("host-mac-addr 02:00:00:00:00", "`02:00:00:00:00'"),
            ("host-bridge a/b", "host-bridge `a/b'"),
            ("num-tx-queues 0", "`0'"),
            ("num-tx-queues 17", "`17'"),
            ("tun", "`tun' is not supported"),
            ("id 1 persist", "`persist' is not supported"),
            ("gro-coalesce", "`gro-coalesce' is not supported"),
        ] {
            let e = parse(line).unwrap_err();
            assert!(e.contains(token), "`{line}': {e}");
            assert!(!e.contains('\n'), "`{line}': {e}");
        }
    }
}
