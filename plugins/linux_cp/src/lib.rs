//! linux-cp: the Linux control plane (VPP's `linux_cp` plugin). Each paired Sluice
//! interface gets a Linux tap "twin" with the same MAC and MTU; what Sluice receives for
//! its own addresses and does not handle itself is punted to the twin, what Linux sends out
//! of the twin leaves through the paired interface, and a netlink listener applies what
//! Linux learns (addresses, routes, neighbours, link state) to Sluice — so a routing suite
//! (BIRD, FRR) running on Linux routes through Sluice.
//!
//! CLI (VPP syntax):
//! - `lcp create <interface> host-if <name> [netns <ns>]`: creates the twin (a tap
//!   interface, `tap<N>` on the Sluice side) and the pair;
//! - `lcp delete <interface>`: removes pair and twin;
//! - `lcp default netns <ns>` (`lcp default netns` alone: Sluice's own): namespace of twins
//!   created without `netns`;
//! - `show lcp`: pairs, and per namespace the sync state and counters.
//!
//! startup.conf: `linux-cp { default netns <ns> netlink-rcvbuf <bytes> }` (the event
//! socket's receive buffer, default 64 MiB: smaller overruns sooner, which the tests use).
//!
//! Data path (see [`node`]): while pairs exist, `punt` hands its packets to
//! `linux-cp-punt` (`sluice_graph::nodes::set_punt_handler`, a hook this plugin added to
//! the core); the paired interface is marked `punt_host` so UDP to closed ports is punted
//! rather than refused and ARP/ND for its addresses is copied to the twin; the twin's frames are redirected from
//! `ethernet-input` to `linux-cp-xc`. On paired interfaces `ip6-input` also admits every
//! ff02::/16 group (OSPFv3) and `ethernet-input` punts OSI frames (IS-IS). Admin state, MTU
//! and MAC: Sluice → Linux by a 100 ms check of the paired interfaces (`linux-cp-process`),
//! Linux → Sluice by netlink. Netlink: [`sync`]. API: [`api`] (`api/lcp.api`).

pub mod api;
pub mod netlink;
pub mod node;
pub mod sync;

use sluice_cli::conf::{ConfError, Section, SectionCursor};
use sluice_cli::{Args, CliError, CommandTree};
use sluice_graph::{Cx, NodeFn, NodeKind, NodeRegistration, Suspend, Vlib, Wake};
use sluice_vnet::devices::linux::linux_name;
use sluice_vnet::interface::{Interfaces, SwIfIndex};
use sluice_vnet::plugin::{Plugin, RegisterError, Registrar, Staged};
use std::any::Any;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// A pair.
#[derive(Clone, Debug)]
pub struct Pair {
    /// The Sluice interface.
    pub phy: SwIfIndex,
    /// Its twin's Sluice side (`tap<N>`).
    pub tap: SwIfIndex,
    /// The twin's Linux name.
    pub host_if: String,
    /// Its namespace (`None`: Sluice's own).
    pub netns: Option<String>,
    /// The paired interface's admin state, MTU and MAC last mirrored to Linux.
    mirrored: (bool, u32, [u8; 6]),
}

/// linux-cp state (a `Vlib` extension).
#[derive(Default)]
pub struct LcpMain {
    pairs: Vec<Pair>,
    default_netns: Option<String>,
    listeners: HashMap<Option<String>, sync::Listener>,
    ns: HashMap<Option<String>, sync::NsState>,
    failed: HashMap<Option<String>, String>,
    stats: sync::Stats,
    n_pairs: Arc<AtomicUsize>,
    rcvbuf: Option<usize>,
}

/// Staged startup configuration.
#[derive(Default)]
pub struct LcpConfig {
    default_netns: Option<String>,
    rcvbuf: Option<usize>,
}

/// The plugin.
pub struct LinuxCpPlugin;

/// This plugin, for the daemon's plugin list (`sluice_plugins::all()`).
pub static PLUGIN: LinuxCpPlugin = LinuxCpPlugin;

const PROCESS: &str = "linux-cp-process";

/// Driver name of the twins' Sluice side (`show hardware-interfaces`, running-config).
pub const DRIVER: &str = "linux-cp";

/// `show running-config`: a twin is recreated by `lcp create` (in interface order, so the
/// twin gets the same `tap<N>` on replay).
fn creator(vm: &mut Vlib, sw: SwIfIndex) -> Option<String> {
    let p = vm
        .ext_mut::<LcpMain>()
        .pairs
        .iter()
        .find(|p| p.tap == sw)?
        .clone();
    let phy = vm.ext_mut::<Interfaces>().get(p.phy)?.name.clone();
    Some(format!(
        "lcp create {phy} host-if {}{}",
        p.host_if,
        p.netns
            .as_ref()
            .map(|n| format!(" netns {n}"))
            .unwrap_or_default()
    ))
}

impl Plugin for LinuxCpPlugin {
    fn name(&self) -> &'static str {
        "linux_cp"
    }
    fn version(&self) -> &'static str {
        env!("CARGO_PKG_VERSION")
    }
    fn description(&self) -> &'static str {
        "Linux control plane: tap twins, punt, netlink sync (lcp)"
    }
    fn config_sections(&self) -> &'static [&'static str] {
        &["linux-cp"]
    }
    fn configure(&self, staged: &mut Staged, s: &Section, file: &str) -> Result<(), ConfError> {
        let mut c = SectionCursor::new(s, file);
        while let Some(k) = c.next_key() {
            match k.text.as_str() {
                "default" => {
                    let w = c.value(k)?;
                    if w.text != "netns" {
                        return Err(c.unknown(w));
                    }
                    let ns = c.value(w)?;
                    let n = linux_name("netns", &ns.text).map_err(|e| c.error(ns, &e.msg))?;
                    staged.get_mut::<LcpConfig>().default_netns = Some(n);
                }
                "netlink-rcvbuf" => {
                    let v = c.value_u64(k)?;
                    if !(4096..=1 << 30).contains(&v) {
                        return Err(c.error(
                            k,
                            &format!("netlink-rcvbuf {v} out of range 4096..1073741824"),
                        ));
                    }
                    staged.get_mut::<LcpConfig>().rcvbuf = Some(v as usize);
                }
                _ => return Err(c.unknown(k)),
            }
        }
        Ok(())
    }
    fn register(&self, r: &mut Registrar) -> Result<(), RegisterError> {
        node::register(&mut r.graph);
        r.graph.register(
            NodeRegistration::new(PROCESS, NodeKind::Process, |_| {
                Box::new(Process {
                    poster: None,
                    n_pairs: Arc::new(AtomicUsize::new(0)),
                })
            })
            .counters(ProcessCounter::DESCS),
        );
        register_cli(&mut r.cli);
        api::register(&mut r.api);
        Ok(())
    }
    fn init(&self, vm: &mut Vlib) -> Result<(), String> {
        let c = std::mem::take(vm.ext_mut::<LcpConfig>());
        let m = vm.ext_mut::<LcpMain>();
        m.default_netns = c.default_netns;
        m.rcvbuf = c.rcvbuf;
        sluice_vnet::runconf::register_creator(vm, DRIVER, creator);
        let poster = vm.main_poster();
        let n = vm.ext_mut::<LcpMain>().n_pairs.clone();
        if let Some(p) = vm.registry.find(PROCESS) {
            if let Some(pr) = vm.main.node_mut::<Process>(p) {
                pr.poster = Some(poster);
                pr.n_pairs = n;
            }
        }
        Ok(())
    }
}

sluice_graph::counters! {
    /// `linux-cp-process`'s counters.
    enum ProcessCounter {
        /// Admin-state checks posted to the main loop.
        Checks => info("checks", "admin-state checks"),
    }
}

/// `linux-cp-process`: every 100 ms while pairs exist, has the main loop compare each
/// paired interface with its twin (admin state to mirror to Linux, interface deleted).
/// - next: none. counters: `checks` (info).
struct Process {
    poster: Option<sluice_graph::MainPoster>,
    n_pairs: Arc<AtomicUsize>,
}

impl NodeFn for Process {
    fn process(&mut self, cx: &mut Cx, _wake: Wake) -> Suspend {
        if self.n_pairs.load(Ordering::Relaxed) > 0 {
            if let Some(p) = &self.poster {
                cx.count(ProcessCounter::Checks, 1);
                p.post(Box::new(check_pairs));
            }
        }
        Suspend::Timeout(0.1)
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// Mirrors admin state to Linux and deletes pairs whose interface (or twin, `delete tap`)
/// is gone.
fn check_pairs(vm: &mut Vlib) {
    let mut m = vm.take_ext::<LcpMain>();
    let mut gone = Vec::new();
    for p in m.pairs.iter_mut() {
        let tap_alive = vm.ext_mut::<Interfaces>().get(p.tap).is_some();
        let Some((up, mtu, mac)) = vm
            .ext_mut::<Interfaces>()
            .get(p.phy)
            .map(|i| (i.admin_up, i.mtu, i.mac))
            .filter(|_| tap_alive)
        else {
            gone.push(p.phy);
            continue;
        };
        if (up, mtu, mac) != p.mirrored {
            let old = std::mem::replace(&mut p.mirrored, (up, mtu, mac));
            let idx = linux_ifindex(&m.ns, p);
            if let (Some(i), Some(l)) = (idx, m.listeners.get(&p.netns)) {
                // Linux's last known state of the twin: when the change came from Linux
                // (netlink set the interface's state), it is not echoed back — an echo could
                // land after a later change in Linux and undo it.
                let (linux_up, linux_mac) =
                    m.ns.get_mut(&p.netns)
                        .map(|s| (s.linux_up.insert(i, up), s.linux_mac.insert(i, mac)))
                        .unwrap_or_default();
                let _ = l.cmd.send(sync::Cmd::SetLink(sync::LinkChange {
                    index: i,
                    up: (old.0 != up && linux_up != Some(up)).then_some(up),
                    mtu: (old.1 != mtu).then_some(mtu),
                    mac: (old.2 != mac && linux_mac != Some(mac)).then_some(mac),
                }));
            }
        }
    }
    vm.put_ext(m);
    for phy in gone {
        log::info!("linux-cp: interface {} deleted: removing its pair", phy.0);
        if let Err(e) = delete_pair(vm, phy) {
            log::warn!("linux-cp: {e}");
        }
    }
}

/// Applies a batch the netlink thread of `ns` posted (received at `at`).
pub(crate) fn apply_batch(vm: &mut Vlib, tag: sync::Tag, items: Vec<sync::Item>, at: Instant) {
    let mut m = vm.take_ext::<LcpMain>();
    let ns = tag.ns;
    if m.listeners.get(&ns).map(|l| l.id) != Some(tag.id) {
        // Posted by a listener stopped since (its namespace's last pair was deleted).
        vm.put_ext(m);
        return;
    }
    let deleting: std::collections::HashSet<u32> = items
        .iter()
        .filter_map(|i| match i {
            sync::Item::M(netlink::Msg::Link {
                del: true, index, ..
            }) => Some(*index),
            _ => None,
        })
        .collect();
    let mut st = m.ns.remove(&ns).unwrap_or_default();
    let names: HashMap<String, SwIfIndex> = m
        .pairs
        .iter()
        .filter(|p| p.netns == ns)
        .map(|p| (p.host_if.clone(), p.phy))
        .collect();
    let mut deleted = Vec::new();
    for it in items {
        match it {
            sync::Item::M(msg) => {
                if let sync::After::TwinDeleted(sw) = sync::apply(
                    vm,
                    &mut st,
                    &mut m.stats,
                    msg,
                    |n| names.get(n).copied(),
                    &deleting,
                ) {
                    deleted.push(sw);
                }
            }
            sync::Item::ResyncBegin => sync::resync_begin(&mut st, &mut m.stats),
            sync::Item::ResyncEnd => sync::resync_end(vm, &mut st, &mut m.stats),
            sync::Item::Overrun => m.stats.overruns += 1,
            sync::Item::Failed(e) => {
                log::warn!("linux-cp: {e}");
                m.failed.insert(ns.clone(), e);
            }
        }
    }
    m.stats.batches += 1;
    let lag = at.elapsed();
    m.stats.last_lag = lag;
    m.stats.max_lag = m.stats.max_lag.max(lag);
    m.ns.insert(ns, st);
    vm.put_ext(m);
    for sw in deleted {
        log::info!(
            "linux-cp: twin of interface {} deleted in Linux: removing the pair",
            sw.0
        );
        if let Err(e) = delete_pair(vm, sw) {
            log::warn!("linux-cp: {e}");
        }
    }
}

/// Errors of the pair actions.
#[derive(Debug, thiserror::Error)]
pub enum LcpError {
    /// No such interface.
    #[error("unknown interface `{0}'")]
    NoInterface(String),
    /// Already paired.
    #[error("`{0}' already has a Linux twin")]
    Exists(String),
    /// Not paired.
    #[error("`{0}' has no Linux twin")]
    NotPaired(String),
    /// The twin could not be made (or deleted).
    #[error(transparent)]
    Tap(#[from] sluice_vnet::error::VnetError),
    /// The data path could not be wired.
    #[error("{0}")]
    Graph(String),
    /// A Linux interface or namespace name Linux would refuse.
    #[error("{0}")]
    BadName(String),
}

/// The Linux ifindex of `p`'s twin, once the listener of its namespace has seen it.
fn linux_ifindex(ns: &HashMap<Option<String>, sync::NsState>, p: &Pair) -> Option<u32> {
    ns.get(&p.netns).and_then(|s| {
        s.ifindex
            .iter()
            .find(|(_, &sw)| sw == p.phy)
            .map(|(&i, _)| i)
    })
}

/// `lcp default netns [<ns>]`: the namespace of twins created without one (`None`:
/// Sluice's own).
pub fn set_default_netns(vm: &mut Vlib, ns: Option<String>) {
    vm.ext_mut::<LcpMain>().default_netns = ns;
}

fn set_maps(vm: &mut Vlib) {
    let pairs = vm.ext_mut::<LcpMain>().pairs.clone();
    let n = vm.ext_mut::<Interfaces>().list.len();
    let mut fwd = vec![node::NONE; n];
    let mut back = vec![node::NONE; n];
    for p in &pairs {
        if let Some(x) = fwd.get_mut(p.phy.0 as usize) {
            *x = p.tap.0;
        }
        if let Some(x) = back.get_mut(p.tap.0 as usize) {
            *x = p.phy.0;
        }
    }
    let (punt, xc) = (vm.registry.find(node::PUNT), vm.registry.find(node::XC));
    vm.foreach_thread(move |tg| {
        if let Some(n) = punt.and_then(|i| tg.node_mut::<node::LcpPunt>(i)) {
            n.pairs.map = fwd.clone();
        }
        if let Some(n) = xc.and_then(|i| tg.node_mut::<node::LcpXc>(i)) {
            n.pairs.map = back.clone();
        }
    });
    let np = pairs.len();
    vm.ext_mut::<LcpMain>().n_pairs.store(np, Ordering::Relaxed);
    // `punt` hands its packets to linux-cp only while pairs exist: without them, punting
    // is exactly what it was without the plugin.
    let handler = if np > 0 { punt } else { None };
    if let Err(e) = sluice_graph::nodes::set_punt_handler(vm, handler) {
        log::warn!("linux-cp: punt handler: {e}");
    }
}

/// The IPv4 link-local multicast block, received by the router so routing protocols
/// (OSPF's 224.0.0.5/6, VRRP, IGMP, ...) reach `ip4-local` and are punted to the twins.
const MCAST_LOCAL: (std::net::Ipv4Addr, u8) = (std::net::Ipv4Addr::new(224, 0, 0, 0), 24);

/// Adds (or removes, when no pair is left in the table) `224.0.0.0/24 via local` in the
/// IPv4 table of `phy`.
fn mcast_route(vm: &mut Vlib, phy: SwIfIndex, add: bool) {
    let table = sluice_vnet::ip4::if_table_id(vm, phy.0);
    if !add {
        let others = vm.ext_mut::<LcpMain>().pairs.clone();
        if others
            .iter()
            .any(|p| sluice_vnet::ip4::if_table_id(vm, p.phy.0) == table)
        {
            return;
        }
    }
    let paths = sluice_vnet::routes::RoutePaths::<std::net::Ipv4Addr> {
        table,
        local: add,
        ..Default::default()
    };
    let (p, len) = MCAST_LOCAL;
    let w = format!("{p}/{len}");
    if let Err(e) = sluice_vnet::ip4::route_add_del(vm, add, 1, p.into(), len, &paths) {
        log::warn!("linux-cp: ip route {w} via local: {e}");
    }
}

/// `lcp create <if> host-if <name> [netns <ns>]`: the twin's Sluice side.
pub fn create_pair(
    vm: &mut Vlib,
    ifname: &str,
    host_if: &str,
    netns: Option<String>,
) -> Result<SwIfIndex, LcpError> {
    let (phy, mac, mtu, up) = {
        let ifs = vm.ext_mut::<Interfaces>();
        let sw = ifs
            .find(ifname)
            .ok_or_else(|| LcpError::NoInterface(ifname.into()))?;
        let i = ifs
            .get(sw)
            .ok_or_else(|| LcpError::NoInterface(ifname.into()))?;
        (sw, i.mac, i.mtu, i.admin_up)
    };
    if vm.ext_mut::<LcpMain>().pairs.iter().any(|p| p.phy == phy) {
        return Err(LcpError::Exists(ifname.into()));
    }
    let netns = netns.or_else(|| vm.ext_mut::<LcpMain>().default_netns.clone());
    let args = sluice_tap::CreateArgs {
        host_if: Some(host_if.to_string()),
        host_ns: netns.clone(),
        host_mac: Some(mac),
        host_mtu: Some(mtu.clamp(*sluice_tap::HOST_MTU.start(), *sluice_tap::HOST_MTU.end())),
        rx_queues: 1,
        driver: Some(DRIVER),
        ..sluice_tap::CreateArgs::default()
    };
    let tap_name = sluice_tap::create(vm, &args)?;
    let tap = vm
        .ext_mut::<Interfaces>()
        .find(&tap_name)
        .ok_or_else(|| sluice_vnet::error::VnetError::System(format!("`{tap_name}' vanished")))?;
    let wire = |vm: &mut Vlib| -> Result<(), String> {
        sluice_vnet::interface::set_admin_state(vm, tap, true).map_err(|e| e.to_string())?;
        let xc = vm.registry.find(node::XC).ok_or("linux-cp-xc missing")?;
        sluice_vnet::set_rx_redirect(vm, tap, Some(xc)).map_err(|e| e.to_string())?;
        sluice_vnet::set_punt_host(vm, phy, true).map_err(|e| e.to_string())
    };
    if let Err(e) = wire(vm) {
        let _ = sluice_tap::delete(vm, &tap_name);
        return Err(LcpError::Graph(e));
    }
    let poster = vm.main_poster();
    let m = vm.ext_mut::<LcpMain>();
    m.pairs.push(Pair {
        phy,
        tap,
        host_if: host_if.to_string(),
        netns: netns.clone(),
        // The twin as the tap plugin made it.
        mirrored: (true, args.host_mtu.unwrap_or(mtu), mac),
    });
    if !m.listeners.contains_key(&netns) {
        m.failed.remove(&netns);
        match sync::start(netns.clone(), poster, m.rcvbuf.unwrap_or(sync::RCVBUF)) {
            Ok(l) => {
                m.listeners.insert(netns.clone(), l);
            }
            Err(e) => log::warn!("linux-cp: {e}"),
        }
    } else {
        // A running listener learns the new twin from its RTM_NEWLINK (the tap was just
        // created); nothing to do.
    }
    let _ = up; // mirrored by the next check (100 ms)
    set_maps(vm);
    mcast_route(vm, phy, true);
    log::info!(
        "linux-cp: {ifname} paired with Linux `{host_if}'{} ({tap_name})",
        netns
            .as_ref()
            .map(|n| format!(" in namespace `{n}'"))
            .unwrap_or_default()
    );
    Ok(tap)
}

/// Deletes the pair of `phy` (its twin goes with it).
pub fn delete_pair(vm: &mut Vlib, phy: SwIfIndex) -> Result<(), LcpError> {
    let m = vm.ext_mut::<LcpMain>();
    let Some(pos) = m.pairs.iter().position(|p| p.phy == phy) else {
        return Err(LcpError::NotPaired(phy.0.to_string()));
    };
    let p = m.pairs.remove(pos);
    if let Some(s) = m.ns.get_mut(&p.netns) {
        s.forget_interface(phy);
    }
    if !m.pairs.iter().any(|q| q.netns == p.netns) {
        // The listener stops at its next wake-up; batches it still posts are dropped.
        m.listeners.remove(&p.netns);
        m.ns.remove(&p.netns);
    }
    set_maps(vm);
    mcast_route(vm, phy, false);
    let _ = sluice_vnet::set_punt_host(vm, phy, false);
    let _ = sluice_vnet::set_rx_redirect(vm, p.tap, None);
    let tap_name = vm
        .ext_mut::<Interfaces>()
        .get(p.tap)
        .map(|i| i.name.clone());
    if let Some(t) = tap_name {
        sluice_tap::delete(vm, &t)?;
    }
    Ok(())
}

fn cli_create(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let ifname = a.word("interface")?;
    let (mut host, mut ns) = (None, None);
    while !a.is_empty() {
        if a.keyword("host-if") {
            host = Some(linux_name("host-if", &a.word("host interface name")?)?);
        } else if a.keyword("netns") {
            ns = Some(linux_name("netns", &a.word("namespace name")?)?);
        } else {
            a.finish()?;
        }
    }
    let host = host.ok_or_else(|| CliError::new("expected `host-if <name>'"))?;
    create_pair(vm, &ifname, &host, ns).map_err(|e| CliError::new(e.to_string()))?;
    Ok(String::new())
}

fn cli_delete(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let ifname = a.word("interface")?;
    a.finish()?;
    let sw = vm
        .ext_mut::<Interfaces>()
        .find(&ifname)
        .ok_or_else(|| CliError::new(format!("unknown interface `{ifname}'")))?;
    delete_pair(vm, sw).map_err(|e| match e {
        LcpError::NotPaired(_) => CliError::new(format!("`{ifname}' has no Linux twin")),
        e => CliError::new(e.to_string()),
    })?;
    Ok(String::new())
}

fn cli_default(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    if !a.keyword("netns") {
        a.finish()?;
    }
    let ns = match a.is_empty() {
        true => None,
        false => Some(linux_name("netns", &a.word("namespace name")?)?),
    };
    a.finish()?;
    set_default_netns(vm, ns);
    Ok(String::new())
}

fn cli_show(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    let m = vm.take_ext::<LcpMain>();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "lcp default netns {}",
        m.default_netns.as_deref().unwrap_or("-")
    );
    for p in &m.pairs {
        let ifs = vm.ext_mut::<Interfaces>();
        let name = |i: SwIfIndex| ifs.get(i).map(|x| x.name.clone()).unwrap_or_default();
        let idx = linux_ifindex(&m.ns, p);
        let _ = writeln!(
            out,
            "itf-pair: {} {} {} netns {} linux-ifindex {}",
            name(p.phy),
            name(p.tap),
            p.host_if,
            p.netns.as_deref().unwrap_or("-"),
            idx.map(|i| i.to_string()).unwrap_or_else(|| "?".into()),
        );
    }
    for ns in m.listeners.keys() {
        let st = m.ns.get(ns);
        let (a, n) = st.map(|s| s.n_addrs_neighs()).unwrap_or_default();
        let _ = writeln!(
            out,
            "netlink {}: routes {} addresses {} neighbors {}{}",
            ns.as_deref().unwrap_or("(sluice's namespace)"),
            st.map(|s| s.n_routes()).unwrap_or(0),
            a,
            n,
            m.failed
                .get(ns)
                .map(|e| format!(" FAILED: {e}"))
                .unwrap_or_default()
        );
    }
    let s = &m.stats;
    let _ = writeln!(
        out,
        "sync: batches {} messages {} routes added {} deleted {} addresses {} neighbors {} links {} unknown-interface {} unknown-table {} ignored {} errors {} resyncs {} overruns {} lag last {:.3} ms max {:.3} ms",
        s.batches,
        s.msgs,
        s.routes_add,
        s.routes_del,
        s.addrs,
        s.neighs,
        s.links,
        s.unknown_if,
        s.unknown_table,
        s.ignored,
        s.errors,
        s.resyncs,
        s.overruns,
        s.last_lag.as_secs_f64() * 1e3,
        s.max_lag.as_secs_f64() * 1e3,
    );
    vm.put_ext(m);
    Ok(out)
}

/// Registers the CLI.
pub fn register_cli(t: &mut CommandTree<Vlib>) {
    t.add(
        "lcp create",
        "lcp create <interface> host-if <name> [netns <ns>]",
        cli_create,
    );
    t.add("lcp delete", "lcp delete <interface>", cli_delete);
    t.add(
        "lcp default",
        "lcp default netns [<ns>] — namespace of new twins",
        cli_default,
    );
    t.add("show lcp", "show lcp — pairs, netlink sync state", cli_show);
}
