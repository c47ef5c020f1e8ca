//! AF_PACKET host interfaces (VPP's `af_packet` plugin): attach Sluice to a Linux network
//! interface (veth, a NIC the kernel owns, a bridge port) through PACKET_MMAP rings.
//!
//! CLI (VPP syntax):
//! - `create host-interface [v2] name <linux-if> [num-rx-queues <n>] [num-tx-queues <n>]
//!   [hw-addr <mac>] [qdisc-bypass-disable] [cksum-gso-disable]` creates `host-<linux-if>`
//!   and prints its name (`v2`: TPACKET_V2 rx rings, one wake-up per packet instead of per
//!   block: low latency; `cksum-gso-disable`: GSO aggregates are cut into segments before
//!   this interface's tx instead of handed to the kernel whole);
//! - `delete host-interface name <linux-if>`;
//! - `show af_packet` (alias `show af-packet`): sockets, rings, queue placement, kernel drops.
//!
//! Per interface: `num-rx-queues` TPACKET_V3 (or V2) rx sockets (joined in a `PACKET_FANOUT_HASH`
//! group when more than one, so the kernel spreads flows over them), `num-tx-queues`
//! TPACKET_V2 tx sockets (default: one per thread, so no thread waits for another;
//! `PACKET_QDISC_BYPASS` unless `qdisc-bypass-disable`; GSO aggregates go through the qdisc
//! on a `PACKET_VNET_HDR` socket of their own, so the kernel can cut them). The Linux interface is set up and
//! put in promiscuous mode for as long as the rx socket is open. The Sluice interface gets
//! its own MAC (`hw-addr`, or a random locally administered `02:fe:..`), as in VPP, and the
//! Linux interface's MTU.
//!
//! rx queue placement: with worker threads, rx queues go round-robin over the workers (the
//! main thread polls them when there are none); `set interface rx-placement` moves a queue
//! (its ring and read position) from one thread's `af-packet-input` to another's, and
//! `set interface rx-mode` switches it between polling, interrupt and adaptive
//! (`sluice_vnet::rxq`).
//!
//! Delete is safe while traffic flows: the interface stops transmitting at once
//! (`interface-output` drops what still carries its index), every thread drops its
//! reference to the rings at a safe point between two dispatcher loops, and the sockets are
//! closed and the rings unmapped when the last reference goes.
//!
//! Nodes: see [`node`].

pub mod api;
pub mod node;
pub mod ring;

use node::{AfInput, AfTx, RxPoll, TxEntry, INPUT, TX};
use ring::{RxGeometry, RxRing, TxGeometry, TxRing};
use sluice_cli::{Args, CliError, CommandTree};
use sluice_graph::{GraphBuilder, NodeKind, NodeRegistration, RxMode, RxModeState, Vlib};
use sluice_vnet::devices::fdq::{self, FdDriver, Placed};
use sluice_vnet::devices::linux::{linux_if, linux_name, random_mac, RxPlacement};
use sluice_vnet::error::{VnetError, VnetResult};
use sluice_vnet::interface::{counter, fmt_mac, Interfaces, SwIfIndex};
use sluice_vnet::rxq::RxQueueInfo;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Most rx or tx queues per interface.
pub const MAX_QUEUES: u32 = 16;

/// One host interface, as the control plane knows it.
pub struct AfDev {
    /// Linux interface name.
    pub host: String,
    /// Linux ifindex.
    pub ifindex: u32,
    /// Sluice interface.
    pub sw_if: SwIfIndex,
    /// rx queues.
    pub rx: Vec<RxPlace>,
    /// tx queues.
    pub tx: Arc<Vec<Arc<TxRing>>>,
    /// Fanout group id when there is more than one rx queue.
    pub fanout: Option<u16>,
    /// How it was created (`show running-config`).
    pub args: CreateArgs,
}

/// One rx queue: its ring, the thread polling it and its mode.
pub struct RxPlace {
    /// The ring.
    pub ring: Arc<RxRing>,
    /// Thread polling it.
    pub thread: usize,
    /// Rx mode.
    pub mode: RxMode,
}

/// af_packet control-plane state (a `Vlib` extension).
#[derive(Default)]
pub struct AfPacketMain {
    devs: Vec<AfDev>,
    placement: RxPlacement,
}

/// The `af_packet` plugin.
pub struct AfPacketPlugin;

/// This plugin, for the daemon's plugin list (`sluice_plugins::all()`).
pub static PLUGIN: AfPacketPlugin = AfPacketPlugin;

impl sluice_vnet::plugin::Plugin for AfPacketPlugin {
    fn name(&self) -> &'static str {
        "af_packet"
    }
    fn version(&self) -> &'static str {
        env!("CARGO_PKG_VERSION")
    }
    fn description(&self) -> &'static str {
        "AF_PACKET host interfaces (create host-interface)"
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

/// Registers `af-packet-input` and `af-packet-tx`.
pub fn register(b: &mut GraphBuilder) {
    b.register(
        NodeRegistration::new(INPUT, NodeKind::Input, |_| Box::new(AfInput::default()))
            .nexts(node::RxNext::NAMES)
            .counters(node::RxCounter::DESCS),
    );
    b.register(
        NodeRegistration::new(TX, NodeKind::Internal, |_| Box::new(AfTx::default()))
            .counters(node::TxCounter::DESCS),
    );
}

/// Registers the af_packet CLI.
pub fn register_cli(t: &mut CommandTree<Vlib>) {
    t.add(
        "create host-interface",
        "create host-interface [v2] name <linux-if> [num-rx-queues <n>] [num-tx-queues <n>] [hw-addr <mac>] [qdisc-bypass-disable] [cksum-gso-disable]",
        cli_create,
    );
    t.add(
        "delete host-interface",
        "delete host-interface name <linux-if>",
        cli_delete,
    );
    t.add(
        "show af_packet",
        "show af_packet — host interfaces: sockets, rings, rx placement, kernel drops",
        cli_show,
    );
    t.add(
        "show af-packet",
        "show af-packet — same as `show af_packet'",
        cli_show,
    );
}

/// Options of `create host-interface`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateArgs {
    /// Linux interface name.
    pub host: String,
    /// rx queues.
    pub rx_queues: u32,
    /// tx queues (`None`: one per thread).
    pub tx_queues: Option<u32>,
    /// MAC of the Sluice interface.
    pub hw_addr: Option<[u8; 6]>,
    /// Bypass the qdisc layer on transmit.
    pub qdisc_bypass: bool,
    /// TPACKET_V2 rx rings (per-packet hand-over) instead of V3 blocks.
    pub v2: bool,
    /// Send GSO aggregates whole (`cksum-gso-disable` clears it: they are cut into
    /// segments by `gso-segment` first).
    pub gso: bool,
}

fn parse_create(a: &mut Args) -> Result<CreateArgs, CliError> {
    let mut host = None;
    let mut rx_queues = 1;
    let mut tx_queues = None;
    let mut hw_addr = None;
    let mut qdisc_bypass = true;
    let mut v2 = false;
    let mut gso = true;
    let queues = |a: &mut Args, what: &str| -> Result<u32, CliError> {
        let n = a.u32(what)?;
        if n == 0 || n > MAX_QUEUES {
            return Err(CliError::new(format!(
                "{what} {n} out of range 1..{MAX_QUEUES}"
            )));
        }
        Ok(n)
    };
    while !a.is_empty() {
        if a.keyword("name") {
            host = Some(a.word("Linux interface name")?);
        } else if a.keyword("num-rx-queues") {
            rx_queues = queues(a, "num-rx-queues")?;
        } else if a.keyword("num-tx-queues") {
            tx_queues = Some(queues(a, "num-tx-queues")?);
        } else if a.keyword("hw-addr") {
            hw_addr = Some(sluice_vnet::devices::hw_addr_arg(a)?);
        } else if a.keyword("qdisc-bypass-disable") {
            qdisc_bypass = false;
        } else if a.keyword("v2") {
            v2 = true;
        } else if a.keyword("cksum-gso-disable") {
            gso = false;
        } else if let Some(w @ "mode") = a.peek() {
            return Err(CliError::new(format!(
                "`{w}' is not supported by Sluice's af_packet (always Ethernet mode)"
            )));
        } else {
            a.finish()?;
        }
    }
    let host = host.ok_or_else(|| CliError::new("missing `name <linux-if>'"))?;
    let host = linux_name("Linux interface name", &host)?;
    Ok(CreateArgs {
        host,
        rx_queues,
        tx_queues,
        hw_addr,
        qdisc_bypass,
        v2,
        gso,
    })
}

fn cli_create(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let c = parse_create(a)?;
    let name = create(vm, &c)?;
    Ok(format!("{name}\n"))
}

/// Creates a host interface; returns its Sluice name (`host-<linux-if>`).
pub fn create(vm: &mut Vlib, c: &CreateArgs) -> VnetResult<String> {
    let name = format!("host-{}", c.host);
    if vm.ext_mut::<Interfaces>().find(&name).is_some() {
        return Err(VnetError::Exists(format!(
            "interface `{name}' already exists"
        )));
    }
    let (ifindex, mtu) = linux_if::host(&c.host)?;
    linux_if::set_up(&c.host).map_err(|e| linux_if::refused(&c.host, e))?;
    let tx_node = vm
        .registry
        .find(TX)
        .ok_or_else(|| VnetError::System("af-packet-tx is not registered".into()))?;
    // Sockets first: nothing in Sluice changes if one of them fails.
    let seed = sluice_vnet::devices::linux::seed(ifindex);
    let fanout = (c.rx_queues > 1).then(|| (seed as u16) ^ (ifindex as u16).rotate_left(8));
    let mut rx = Vec::new();
    let rx_geo = if c.v2 {
        RxGeometry::v2_for_mtu(mtu)
    } else {
        RxGeometry::default()
    };
    for q in 0..c.rx_queues {
        let r = RxRing::open(ifindex, rx_geo, fanout, true)
            .map_err(|e| VnetError::Invalid(format!("`{}' rx queue {q}: {e}", c.host)))?;
        rx.push(Arc::new(r));
    }
    if let Some(first) = rx.first() {
        first
            .set_promiscuous(ifindex)
            .map_err(|e| linux_if::refused(&c.host, e))?;
    }
    let n_tx = c.tx_queues.unwrap_or(vm.n_threads() as u32).max(1);
    let geo = TxGeometry::for_mtu(mtu);
    let mut tx = Vec::new();
    for q in 0..n_tx {
        tx.push(Arc::new(
            TxRing::open(ifindex, geo, c.qdisc_bypass)
                .map_err(|e| VnetError::Invalid(format!("`{}' tx queue {q}: {e}", c.host)))?,
        ));
    }
    let tx = Arc::new(tx);

    let mac = c.hw_addr.unwrap_or_else(|| random_mac(seed));
    let sw = sluice_vnet::create_interface(vm, &name, "af_packet", mac, Some(tx_node))?;
    let counters = {
        let ifs = vm.ext_mut::<Interfaces>();
        let i = ifs
            .get_mut(sw)
            .ok_or_else(|| VnetError::System("interface vanished".into()))?;
        i.mtu = mtu.clamp(64, 9216);
        i.counters.clone()
    };
    sluice_vnet::interface::sync_all(vm);

    let entry = TxEntry {
        queues: tx.clone(),
        counters: counters.clone(),
        subs: vm.ext_mut::<Interfaces>().counter_table.clone(),
    };
    sluice_vnet::devices::set_tx_entry(vm, tx_node, sw, Some(entry), |n: &mut AfTx| &mut n.table);
    sluice_vnet::output::set_gso(vm, sw, c.gso && tx.iter().all(|q| q.takes_gso()));
    // Its rx ring may hand the kernel's GRO aggregates over whole (`PACKET_VNET_HDR`, when
    // the kernel took it).
    sluice_vnet::feature::set_aggregate_source(vm, sw.0, rx.iter().any(|r| r.vnet_hdr()));
    set_kicks(vm, sw, Some((tx.clone(), counters.clone())));
    let mut placed = Vec::new();
    for (q, r) in rx.into_iter().enumerate() {
        let n_workers = vm.n_workers();
        let thread = vm
            .ext_mut::<AfPacketMain>()
            .placement
            .next_thread(n_workers);
        let mode = RxModeState::new(RxMode::Polling, vm.shared.clock.hz());
        let poll = RxPoll::new(sw.0, q as u16, r.clone(), counters.clone());
        fdq::put::<AfPacket>(vm, thread, Placed::new(poll, mode))?;
        placed.push(RxPlace {
            ring: r,
            thread,
            mode: RxMode::Polling,
        });
    }
    vm.ext_mut::<AfPacketMain>().devs.push(AfDev {
        host: c.host.clone(),
        ifindex,
        sw_if: sw,
        rx: placed,
        tx,
        fanout,
        args: c.clone(),
    });
    log::info!(
        "{name}: attached to Linux `{}' (ifindex {ifindex}), {} rx / {n_tx} tx queues, mac {}",
        c.host,
        c.rx_queues,
        fmt_mac(&mac)
    );
    Ok(name)
}

/// Sets or clears interface `sw`'s tx queues in every thread's kick set.
fn set_kicks(vm: &mut Vlib, sw: SwIfIndex, q: Option<sluice_vnet::devices::TxQueues<Arc<TxRing>>>) {
    let (Some(input), Some(tx)) = (vm.registry.find(INPUT), vm.registry.find(TX)) else {
        return;
    };
    sluice_vnet::devices::set_kick_entry(
        vm,
        input,
        tx,
        sw,
        q,
        |n: &mut AfInput| &mut n.kicks,
        node::TxCounter::KickRetry,
        node::TxCounter::KickDropped,
    );
}

/// The af_packet driver's rx-queue operations ([`sluice_vnet::devices::fdq`]).
pub struct AfPacket;

impl FdDriver for AfPacket {
    type Queue = RxPoll;
    type Node = AfInput;
    const INPUT: &'static str = INPUT;
    fn set(n: &mut AfInput) -> &mut fdq::QueueSet<RxPoll> {
        &mut n.queues
    }
    fn placements(vm: &mut Vlib) -> Vec<RxQueueInfo> {
        let m = vm.ext_mut::<AfPacketMain>();
        m.devs
            .iter()
            .flat_map(|d| {
                d.rx.iter().enumerate().map(|(q, p)| RxQueueInfo {
                    sw_if: d.sw_if,
                    queue: q as u16,
                    thread: p.thread,
                    mode: p.mode,
                })
            })
            .collect()
    }
    fn record(vm: &mut Vlib, i: RxQueueInfo) {
        let m = vm.ext_mut::<AfPacketMain>();
        if let Some(p) = m
            .devs
            .iter_mut()
            .find(|d| d.sw_if == i.sw_if)
            .and_then(|d| d.rx.get_mut(i.queue as usize))
        {
            p.thread = i.thread;
            p.mode = i.mode;
        }
    }
}

/// Registers the rx-queue operations (`set interface rx-mode|rx-placement`).
pub fn init(vm: &mut Vlib) {
    sluice_vnet::rxq::register_driver(vm, fdq::rx_driver::<AfPacket>());
    sluice_vnet::runconf::register_creator(vm, "af_packet", api::creator);
}

fn cli_delete(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let _ = a.keyword("name");
    let host = a.word("Linux interface name")?;
    a.finish()?;
    delete(vm, &host)?;
    Ok(String::new())
}

/// Deletes the host interface attached to Linux interface `host`.
pub fn delete(vm: &mut Vlib, host: &str) -> VnetResult {
    let pos = vm
        .ext_mut::<AfPacketMain>()
        .devs
        .iter()
        .position(|d| d.host == host)
        .ok_or_else(|| VnetError::NotFound(format!("no host interface on `{host}'")))?;
    let sw = vm.ext_mut::<AfPacketMain>().devs[pos].sw_if;
    // Stop transmitting and forwarding to it, then take the rings away from every thread at
    // a safe point; the last reference closes the sockets and unmaps the rings.
    sluice_vnet::loopback::delete_interface(vm, sw);
    fdq::remove_interface::<AfPacket>(vm, sw);
    set_kicks(vm, sw, None);
    if let Some(tx) = vm.registry.find(TX) {
        sluice_vnet::devices::set_tx_entry::<AfTx, TxEntry>(vm, tx, sw, None, |n| &mut n.table);
    }
    let dev = vm.ext_mut::<AfPacketMain>().devs.remove(pos);
    if dev.rx.iter().any(|p| Arc::strong_count(&p.ring) > 1) || Arc::strong_count(&dev.tx) > 1 {
        // A worker did not answer in time: it drops its reference when it does.
        log::warn!("host-{host}: rings released late (a worker is busy)");
    }
    Ok(())
}

/// `on`, or `off (<why>)`: whether the interface hands GSO aggregates to the kernel whole.
fn gso_state(d: &AfDev) -> String {
    gso_text(d.args.gso, d.tx.iter().find_map(|t| t.gso_error()))
}

/// [`gso_state`] from `create host-interface`'s choice and a tx queue's socket error.
fn gso_text(wanted: bool, err: Option<&std::io::Error>) -> String {
    match (wanted, err) {
        (false, _) => "off (cksum-gso-disable)".into(),
        (true, Some(e)) => format!("off ({e})"),
        (true, None) => "on".into(),
    }
}

fn cli_show(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let _ = a.keyword("verbose");
    a.finish()?;
    let names: Vec<String> = (0..vm.n_threads()).map(|t| vm.thread_name(t)).collect();
    let mut out = String::new();
    let m = vm.take_ext::<AfPacketMain>();
    for d in &m.devs {
        let sw_name = vm
            .ext_mut::<Interfaces>()
            .get(d.sw_if)
            .map(|i| (i.name.clone(), i.counters.clone()));
        let Some((sw_name, counters)) = sw_name else {
            continue;
        };
        let _ = writeln!(
            out,
            "{sw_name} (sw_if_index {}): Linux `{}' ifindex {}",
            d.sw_if.0, d.host, d.ifindex
        );
        let g = d.rx.first().map(|p| p.ring.geometry()).unwrap_or_default();
        let ring = if g.v2 {
            format!("TPACKET_V2, {} frames x {} B", g.slots(), g.frame_size)
        } else {
            format!(
                "TPACKET_V3, {} blocks x {} KiB, block timeout {} ms",
                g.block_nr,
                g.block_size >> 10,
                g.retire_ms
            )
        };
        let _ = writeln!(
            out,
            "  rx: {} queue(s), {ring}, fanout {}",
            d.rx.len(),
            match d.fanout {
                Some(id) => format!("hash (group {id})"),
                None => "none".into(),
            }
        );
        let mut new_drops = 0;
        for (q, p) in d.rx.iter().enumerate() {
            let (r, t) = (&p.ring, &p.thread);
            let before = r.stats.drops.load(Ordering::Relaxed);
            let _ = r.update_stats();
            new_drops += r.stats.drops.load(Ordering::Relaxed) - before;
            let _ = writeln!(
                out,
                "    queue {q}: fd {} thread {t} ({}) {}, kernel packets {} drops {}",
                r.fd(),
                names.get(*t).map(String::as_str).unwrap_or("?"),
                p.mode.as_str(),
                r.stats.packets.load(Ordering::Relaxed),
                r.stats.drops.load(Ordering::Relaxed)
            );
        }
        // Ring-full drops in the kernel are this interface's rx-miss too (thread 0's slot:
        // the CLI runs on the main thread, the only writer of that slot).
        counters.add(0, counter::RX_MISS, new_drops);
        let tg = d.tx.first().map(|t| (t.geometry(), t.qdisc_bypass));
        if let Some((tg, bypass)) = tg {
            let _ = writeln!(
                out,
                "  tx: {} queue(s), TPACKET_V2, {} frames x {} B, qdisc bypass {}, gso {}",
                d.tx.len(),
                tg.frame_nr,
                tg.frame_size,
                if bypass { "on" } else { "off" },
                gso_state(d)
            );
        }
        for (q, r) in d.tx.iter().enumerate() {
            let k = &r.kick;
            let _ = writeln!(
                out,
                "    queue {q}: kick retries {}, frames given up {}{}",
                k.retries.load(Ordering::Relaxed),
                k.given_up.load(Ordering::Relaxed),
                if k.pending() {
                    ", frames waiting for a kick"
                } else {
                    ""
                }
            );
        }
    }
    vm.put_ext(m);
    if out.is_empty() {
        out.push_str("no host interfaces\n");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<CreateArgs, String> {
        parse_create(&mut Args::new(s)).map_err(|e| e.to_string())
    }

    /// An af_packet interface whose rx ring took `PACKET_VNET_HDR` (every kernel this runs
    /// on) may receive GRO aggregates: a source. On a veth pair of the test's.
    #[test]
    fn a_host_interface_is_a_source_of_aggregates() {
        let n = std::process::id() % 100_000;
        let (a, b) = (format!("sapa{n}"), format!("sapb{n}"));
        let ip = |args: &[&str]| {
            std::process::Command::new("ip")
                .args(args)
                .status()
                .is_ok_and(|s| s.success())
        };
        if !ip(&["link", "add", &a, "type", "veth", "peer", "name", &b]) {
            eprintln!("skipped: cannot make a veth pair");
            return;
        }
        ip(&["link", "set", &a, "up"]);
        let entry = sluice_vnet::plugin::PluginEntry {
            plugin: &PLUGIN,
            enabled: true,
        };
        let (mut vm, _cli) = sluice_vnet::testing::configured(&[entry], 0, 256, &[]);
        let made = parse(&format!("name {a}"))
            .and_then(|c| create(&mut vm, &c).map_err(|e| e.to_string()));
        let sources = sluice_vnet::feature::aggregate_sources(&mut vm);
        let sw = made
            .as_ref()
            .ok()
            .and_then(|name| vm.ext_mut::<Interfaces>().find(name.trim()).map(|s| s.0));
        vm.stop_workers();
        drop(vm);
        ip(&["link", "del", &a]);
        assert!(made.is_ok(), "{made:?}");
        assert_eq!(sources, [sw.expect("the interface")]);
    }

    #[test]
    fn create_arguments() {
        let c = parse("name veth0 num-rx-queues 2 num-tx-queues 3 hw-addr 02:00:00:00:00:09 qdisc-bypass-disable").unwrap();
        assert_eq!(
            c,
            CreateArgs {
                host: "veth0".into(),
                rx_queues: 2,
                tx_queues: Some(3),
                hw_addr: Some([2, 0, 0, 0, 0, 9]),
                qdisc_bypass: false,
                v2: false,
                gso: true,
            }
        );
        assert!(!parse("name eth1 cksum-gso-disable").unwrap().gso);
        assert_eq!(gso_text(true, None), "on");
        assert_eq!(gso_text(false, None), "off (cksum-gso-disable)");
        let e = std::io::Error::from_raw_os_error(libc::EPERM);
        assert!(gso_text(true, Some(&e)).starts_with("off (Operation not permitted"));
        let d = parse("name eth1").unwrap();
        assert_eq!((d.rx_queues, d.tx_queues, d.qdisc_bypass), (1, None, true));
        assert!(!d.v2);
        assert!(parse("v2 name eth1").unwrap().v2);
    }

    #[test]
    fn bad_arguments_name_the_token() {
        assert!(parse("").unwrap_err().contains("missing `name"));
        assert!(parse("name x bogus").unwrap_err().contains("`bogus'"));
        assert!(parse("name x num-rx-queues 0")
            .unwrap_err()
            .contains("num-rx-queues 0"));
        assert!(parse("name x num-tx-queues 99").unwrap_err().contains("99"));
        assert!(parse("name x hw-addr zz:zz")
            .unwrap_err()
            .contains("`zz:zz'"));
        assert!(parse("name x hw-addr 01:00:5e:00:00:01")
            .unwrap_err()
            .contains("multicast"));
        assert!(parse("name averyveryverylongname")
            .unwrap_err()
            .contains("bad Linux interface name"));
        assert!(parse("name x mode ip").unwrap_err().contains("`mode'"));
    }
}
