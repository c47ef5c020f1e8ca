//! tap interfaces (VPP's `create tap`): a Linux tap device whose host side lives in the
//! kernel (optionally moved into a network namespace and addressed there) and whose other
//! side is a Sluice interface `tap<N>` — the kernel-facing interface for punting to Linux and
//! for attaching Linux hosts without a veth.
//!
//! CLI (VPP syntax):
//! - `create tap [id <n>] [hw-addr <mac>] [host-if-name <name>] [host-ns <netns>]
//!   [host-ip4-addr <a/len>] [host-ip6-addr <a/len>] [num-rx-queues <n>]` creates `tap<N>`
//!   and prints its name;
//! - `delete tap <interface>`;
//! - `show tap`.
//!
//! Per interface: `num-rx-queues` fds on `/dev/net/tun` with `IFF_TAP | IFF_NO_PI |
//! IFF_VNET_HDR` (`IFF_MULTI_QUEUE` for more than one; the kernel spreads flows over them),
//! a 10-byte `virtio_net_hdr` on every frame, offloads off (`TUNSETOFFLOAD 0`: the kernel
//! segments and checksums before handing frames to Sluice). Thread t transmits on queue
//! `t mod queues`. The rx queues are placed round-robin on the workers (main without
//! workers) and follow `set interface rx-mode|rx-placement` (see [`crate::fdq`]).
//!
//! The host side is configured by running iproute2's `ip` (`ip link set <if> netns <ns>`,
//! `ip -n <ns> addr add ...`, `ip -n <ns> link set <if> up`): set-up only, never on the data
//! path, and the errors `ip` prints are passed on. The device disappears when Sluice closes
//! its fds (delete, exit).
//!
//! Nodes: see [`node`].

pub mod node;

use crate::fdq::{self, FdDriver, Placed};
use crate::linux::{linux_name, random_mac, RxPlacement};
use node::{TapInput, TapQueue, TapTx, TxEntry, INPUT, TX};
use sluice_cli::{Args, CliError, CommandTree};
use sluice_graph::{
    CounterDesc, GraphBuilder, NodeKind, NodeRegistration, RxMode, RxModeState, Vlib,
};
use sluice_vnet::interface::{fmt_mac, Interfaces, SwIfIndex};
use sluice_vnet::rxq::RxQueueInfo;
use std::fmt::Write as _;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::Arc;

/// Most rx queues per interface.
pub const MAX_QUEUES: u32 = 16;

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
    /// Queue fds (queue q = fds[q]).
    pub fds: Arc<Vec<Arc<OwnedFd>>>,
    /// Thread and mode of each rx queue.
    pub rx: Vec<(usize, RxMode)>,
}

/// tap control-plane state (a `Vlib` extension).
#[derive(Default)]
pub struct TapMain {
    devs: Vec<TapDev>,
    placement: RxPlacement,
}

/// The tap driver's rx-queue operations ([`crate::fdq`]).
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

/// Registers `virtio-input` and `tap-tx`.
pub fn register(b: &mut GraphBuilder) {
    b.register(
        NodeRegistration::new(INPUT, NodeKind::Input, |_| Box::new(TapInput::default()))
            .nexts(&[sluice_vnet::ip4::nodes::ETHERNET_INPUT])
            .counters(&[
                CounterDesc::error("no_buffers", "no free buffers (rx-miss)"),
                CounterDesc::error("gso_dropped", "GSO frame from the kernel dropped"),
                CounterDesc::info("csum_completed", "partial L4 checksums completed"),
                CounterDesc::error("short", "frame shorter than an Ethernet header"),
                CounterDesc::error("read_error", "readv failed"),
            ]),
    );
    b.register(
        NodeRegistration::new(TX, NodeKind::Internal, |_| Box::new(TapTx::default())).counters(&[
            CounterDesc::error("full", "tap queue full (EAGAIN)"),
            CounterDesc::error("write_error", "writev failed"),
            CounterDesc::error("no_interface", "tap interface deleted"),
        ]),
    );
}

/// Registers the rx-queue operations.
pub fn init(vm: &mut Vlib) {
    sluice_vnet::rxq::register_driver(vm, fdq::rx_driver::<Tap>());
}

/// Registers the tap CLI.
pub fn register_cli(t: &mut CommandTree<Vlib>) {
    t.add(
        "create tap",
        "create tap [id <n>] [hw-addr <mac>] [host-if-name <name>] [host-ns <netns>] [host-ip4-addr <a/len>] [host-ip6-addr <a/len>] [num-rx-queues <n>]",
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
    /// rx queues (1 default).
    pub rx_queues: u32,
}

fn prefix(a: &mut Args, v6: bool) -> Result<String, CliError> {
    let w = a.word("address/length")?;
    let ok = w.split_once('/').is_some_and(|(ip, len)| {
        let max = if v6 { 128 } else { 32 };
        let ip_ok = if v6 {
            ip.parse::<std::net::Ipv6Addr>().is_ok()
        } else {
            ip.parse::<std::net::Ipv4Addr>().is_ok()
        };
        ip_ok && len.parse::<u8>().is_ok_and(|l| l <= max)
    });
    if !ok {
        return Err(CliError::new(format!(
            "bad {} prefix `{}'",
            if v6 { "IPv6" } else { "IPv4" },
            sluice_cli::error::clip(&w)
        )));
    }
    Ok(w)
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
            c.hw_addr = Some(crate::af_packet::hw_addr_arg(a)?);
        } else if a.keyword("host-if-name") {
            c.host_if = Some(linux_name("host-if-name", &a.word("host interface name")?)?);
        } else if a.keyword("host-ns") {
            c.host_ns = Some(linux_name("host-ns", &a.word("namespace name")?)?);
        } else if a.keyword("host-ip4-addr") {
            c.host_ip4 = Some(prefix(a, false)?);
        } else if a.keyword("host-ip6-addr") {
            c.host_ip6 = Some(prefix(a, true)?);
        } else if a.keyword("num-rx-queues") {
            let n = a.u32("num-rx-queues")?;
            if n == 0 || n > MAX_QUEUES {
                return Err(CliError::new(format!(
                    "num-rx-queues `{n}' out of range 1..{MAX_QUEUES}"
                )));
            }
            c.rx_queues = n;
        } else {
            a.finish()?;
        }
    }
    Ok(c)
}

/// Opens one queue of tap device `name`.
fn open_queue(name: &str, multi: bool) -> Result<OwnedFd, String> {
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
    let hdr: libc::c_int = node::VNET_HDR_LEN as libc::c_int;
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
        if libc::ioctl(fd.as_raw_fd(), libc::TUNSETOFFLOAD, 0 as libc::c_ulong) < 0 {
            return Err(ioctl_err("TUNSETOFFLOAD"));
        }
    }
    Ok(fd)
}

/// Runs `ip <args>` (host-side set-up).
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run `ip' (iproute2): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}' failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Configures the host side: namespace, addresses, up.
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
    if let Some(a) = &c.host_ip4 {
        run(&["addr", "add", a, "dev", host_if])?;
    }
    if let Some(a) = &c.host_ip6 {
        run(&["-6", "addr", "add", a, "dev", host_if, "nodad"])?;
    }
    run(&["link", "set", "dev", host_if, "up"])
}

fn cli_create(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let c = parse_create(a)?;
    let name = create(vm, &c).map_err(CliError::new)?;
    Ok(format!("{name}\n"))
}

/// Creates a tap interface; returns its Sluice name (`tap<id>`).
pub fn create(vm: &mut Vlib, c: &CreateArgs) -> Result<String, String> {
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
        return Err(format!("interface `{name}' already exists"));
    }
    let host_if = c.host_if.clone().unwrap_or_else(|| name.clone());
    let tx_node = vm
        .registry
        .find(TX)
        .ok_or_else(|| "tap-tx is not registered".to_string())?;
    // Device and host side first: nothing in Sluice changes if they fail (closing the fds
    // removes the device).
    let mut fds = Vec::new();
    for q in 0..c.rx_queues {
        let fd = open_queue(&host_if, c.rx_queues > 1)
            .map_err(|e| format!("tap `{host_if}' queue {q}: {e}"))?;
        fds.push(Arc::new(fd));
    }
    host_setup(c, &host_if)?;
    let fds = Arc::new(fds);

    let mac = c
        .hw_addr
        .unwrap_or_else(|| random_mac(crate::linux::seed(id)));
    let sw = sluice_vnet::create_interface(vm, &name, "tap", mac, Some(tx_node))?;
    let counters = {
        let ifs = vm.ext_mut::<Interfaces>();
        let i = ifs
            .get_mut(sw)
            .ok_or_else(|| "interface vanished".to_string())?;
        i.mtu = 1500;
        i.counters.clone()
    };
    sluice_vnet::ip4::sync_all_interfaces(vm);
    let entry = TxEntry {
        fds: fds.clone(),
        counters: counters.clone(),
        subs: vm.ext_mut::<Interfaces>().counter_table.clone(),
    };
    crate::set_tx_entry(vm, tx_node, sw, Some(entry), |n: &mut TapTx| &mut n.table);
    let hz = vm.shared.clock.hz();
    let mut rx = Vec::new();
    for (q, fd) in fds.iter().enumerate() {
        let n_workers = vm.n_workers();
        let thread = vm.ext_mut::<TapMain>().placement.next_thread(n_workers);
        let tq = TapQueue::new(sw.0, q as u16, fd.clone(), counters.clone());
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
        fds,
        rx,
    });
    log::info!(
        "{name}: Linux tap `{host_if}'{}, {} queue(s), mac {}",
        c.host_ns
            .as_ref()
            .map(|n| format!(" in namespace `{n}'"))
            .unwrap_or_default(),
        c.rx_queues,
        fmt_mac(&mac)
    );
    Ok(name)
}

fn cli_delete(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let name = a.word("interface")?;
    a.finish()?;
    delete(vm, &name).map_err(CliError::new)?;
    Ok(String::new())
}

/// Deletes tap interface `name` (also while traffic flows): Sluice stops sending to it, every
/// thread lets go of its queues at a safe point, and the last reference closes the fds, which
/// removes the Linux device.
pub fn delete(vm: &mut Vlib, name: &str) -> Result<(), String> {
    let sw = vm
        .ext_mut::<Interfaces>()
        .find(name)
        .ok_or_else(|| format!("unknown interface `{name}'"))?;
    let pos = vm
        .ext_mut::<TapMain>()
        .devs
        .iter()
        .position(|d| d.sw_if == sw)
        .ok_or_else(|| format!("`{name}' is not a tap interface"))?;
    sluice_vnet::loopback::delete_interface(vm, sw);
    fdq::remove_interface::<Tap>(vm, sw);
    if let Some(tx) = vm.registry.find(TX) {
        crate::set_tx_entry::<TapTx, TxEntry>(vm, tx, sw, None, |n| &mut n.table);
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
            "{sw_name} (sw_if_index {}): host-if-name {} host-ns {}",
            d.sw_if.0,
            d.host_if,
            d.host_ns.as_deref().unwrap_or("-")
        );
        for (q, (fd, (t, mode))) in d.fds.iter().zip(&d.rx).enumerate() {
            let _ = writeln!(
                out,
                "  queue {q}: fd {} thread {t} ({}) {}",
                fd.as_raw_fd(),
                vm.thread_name(*t),
                mode.as_str()
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
            }
        );
        assert_eq!(parse("").unwrap().rx_queues, 1);
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
    }
}
