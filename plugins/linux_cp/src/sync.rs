//! Netlink sync: one listener thread per network namespace with pairs reads rtnetlink
//! (links, addresses, routes, neighbours), dumps the whole state at start and after a
//! receive-buffer overrun (`ENOBUFS`), and hands what it read in batches to the main loop
//! (`sluice_graph::MainPoster`), which applies them through the actions the CLI and the API
//! use (`set interface ip address`, `ip route`, `ip neighbor`, `set interface state|mtu`).
//! The data path is never blocked: the thread only parses and posts; the main loop applies
//! a batch (at most [`BATCH`] messages) per iteration.
//!
//! What is applied, for twins of a pair only (by Linux ifindex, learned from link
//! messages; anything else is counted `unknown_interface` and not applied):
//! - link: `IFF_UP` changes → the paired interface's admin state; MTU changes → its MTU;
//!   deletion of the twin → the pair is deleted.
//! - addresses (not IPv6 link-local: Sluice makes its own) → interface addresses.
//! - routes of the main table (→ Sluice table 0) or of table N (→ Sluice table N, which must
//!   exist, else `unknown_table`): unicast with one or more next hops (ECMP with weights),
//!   blackhole/unreachable/prohibit as drop routes. Routes the kernel makes for addresses
//!   (`proto kernel`) and the local table are left out: Sluice makes its own.
//! - neighbours with a MAC (permanent/noarp → static), failed or deleted → removed.
//!
//! A resync (start, overrun) is mark-and-sweep: what was installed from this namespace
//! and is not in the new dump is removed.

use crate::netlink::{self, nud, rtn, Hop, Msg};
use sluice_graph::{MainPoster, Vlib};
use sluice_vnet::interface::SwIfIndex;
use sluice_vnet::routes::RoutePaths;
use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest a batch waits for more messages of a burst before it is handed over.
pub const COALESCE: Duration = Duration::from_millis(2);

/// Most messages in one batch handed to the main loop.
pub const BATCH: usize = 8192;

/// Receive buffer asked for the event socket by default (forced past `rmem_max` as root;
/// `linux-cp { netlink-rcvbuf <bytes> }`).
pub const RCVBUF: usize = 64 << 20;

/// One item of a batch.
#[derive(Debug)]
pub enum Item {
    /// A message.
    M(Msg),
    /// A full dump starts (mark).
    ResyncBegin,
    /// It ended (sweep).
    ResyncEnd,
    /// The listener failed (namespace missing, socket error).
    Failed(String),
    /// The receive buffer overran.
    Overrun,
}

/// What changed on a paired interface, to mirror onto its Linux twin (ifindex `index`).
#[derive(Debug, Clone, Copy)]
pub struct LinkChange {
    /// The twin's ifindex.
    pub index: u32,
    /// New admin state.
    pub up: Option<bool>,
    /// New MTU.
    pub mtu: Option<u32>,
    /// New MAC address.
    pub mac: Option<[u8; 6]>,
}

/// Requests from the main loop to the listener thread.
pub enum Cmd {
    /// Set a twin's link (ifindex) up or down and/or its MTU (Sluice → Linux).
    SetLink(LinkChange),
}

/// A listener thread.
pub struct Listener {
    /// Requests to it.
    pub cmd: mpsc::Sender<Cmd>,
    /// Unique id: batches of an earlier listener of the same namespace are dropped.
    pub id: u64,
    stop: Arc<AtomicBool>,
}

/// Which listener a batch comes from.
#[derive(Clone)]
pub struct Tag {
    /// Namespace (`None`: Sluice's own).
    pub ns: Option<String>,
    /// [`Listener::id`].
    pub id: u64,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Counters of `show lcp`.
#[derive(Default, Debug, Clone)]
pub struct Stats {
    /// Batches applied.
    pub batches: u64,
    /// Messages applied (or ignored by rule).
    pub msgs: u64,
    /// Routes added / deleted.
    pub routes_add: u64,
    /// Routes deleted.
    pub routes_del: u64,
    /// Addresses added/deleted.
    pub addrs: u64,
    /// Neighbours added/deleted.
    pub neighs: u64,
    /// Link changes applied.
    pub links: u64,
    /// Messages for interfaces that are not twins (not applied).
    pub unknown_if: u64,
    /// Routes for tables Sluice does not have (not applied).
    pub unknown_table: u64,
    /// Messages left out by rule (kernel routes, local table, link-local, ...).
    pub ignored: u64,
    /// Actions that failed (logged).
    pub errors: u64,
    /// Full dumps (start and after overruns).
    pub resyncs: u64,
    /// Receive-buffer overruns.
    pub overruns: u64,
    /// Time from receiving the last batch to applying it.
    pub last_lag: Duration,
    /// Largest such time.
    pub max_lag: Duration,
}

/// What was installed from one namespace (for replace, delete and the resync sweep).
#[derive(Default)]
pub struct NsState {
    /// Linux ifindex → paired Sluice interface.
    pub ifindex: HashMap<u32, SwIfIndex>,
    /// Last IFF_UP seen per ifindex.
    pub linux_up: HashMap<u32, bool>,
    /// Last MAC seen per ifindex.
    pub linux_mac: HashMap<u32, [u8; 6]>,
    routes: HashMap<(u32, IpAddr, u8), Installed>,
    addrs: HashSet<(u32, IpAddr, u8)>,
    neighs: HashSet<(u32, IpAddr)>,
    resync: Option<Seen>,
}

#[derive(Default)]
struct Seen {
    routes: HashSet<(u32, IpAddr, u8)>,
    addrs: HashSet<(u32, IpAddr, u8)>,
    neighs: HashSet<(u32, IpAddr)>,
}

/// Paths of an installed route: (gateway, interface, weight); empty = drop.
type Installed = Vec<(Option<IpAddr>, u32, u32)>;

impl NsState {
    /// Routes installed from this namespace.
    pub fn n_routes(&self) -> usize {
        self.routes.len()
    }
    /// Addresses and neighbours installed.
    pub fn n_addrs_neighs(&self) -> (usize, usize) {
        (self.addrs.len(), self.neighs.len())
    }
    /// Forgets what was installed through `sw` (its pair is deleted: Sluice removed the
    /// interface's addresses and neighbours, or keeps them as configuration).
    pub fn forget_interface(&mut self, sw: SwIfIndex) {
        self.ifindex.retain(|_, s| *s != sw);
        self.addrs.retain(|a| a.0 != sw.0);
        self.neighs.retain(|n| n.0 != sw.0);
    }
}

/// Starts the listener of namespace `ns` (`None`: Sluice's own).
pub fn start(ns: Option<String>, poster: MainPoster, rcvbuf: usize) -> Result<Listener, String> {
    static IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let id = IDS.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let tag = Tag { ns, id };
    std::thread::Builder::new()
        .name("sluice_lcp_nl".into())
        .spawn(move || run(tag, poster, rx, st, rcvbuf))
        .map_err(|e| format!("cannot start the netlink thread: {e}"))?;
    Ok(Listener { cmd: tx, id, stop })
}

fn post(poster: &MainPoster, ns: &Tag, items: Vec<Item>, at: Instant) {
    let ns = ns.clone();
    poster.post(Box::new(move |vm: &mut Vlib| {
        crate::apply_batch(vm, ns, items, at)
    }));
}

/// A full dump, handed over between `ResyncBegin` and `ResyncEnd`; redone (up to 5 times)
/// when the kernel flags it inconsistent or a receive fails.
fn resync(req: &mut netlink::Socket, poster: &MainPoster, ns: &Tag) {
    let mut last = String::new();
    for attempt in 0..5 {
        let at = Instant::now();
        let mut items = vec![Item::ResyncBegin];
        let mut n = 0usize;
        let r = req.dump_all(|m| {
            n += 1;
            items.push(Item::M(m));
            if items.len() >= BATCH {
                post(poster, ns, std::mem::take(&mut items), at);
            }
        });
        match r {
            Ok(true) => {
                log::debug!("linux-cp: dump of {n} messages");
                items.push(Item::ResyncEnd);
                post(poster, ns, items, at);
                return;
            }
            Ok(false) => last = "dump interrupted by changes (NLM_F_DUMP_INTR)".into(),
            Err(e) => last = format!("netlink dump: {e}"),
        }
        log::info!("linux-cp: {last}; dumping again (attempt {})", attempt + 2);
        post(poster, ns, items, at);
        std::thread::sleep(Duration::from_millis(50));
    }
    post(poster, ns, vec![Item::Failed(last)], Instant::now());
}

fn run(
    ns: Tag,
    poster: MainPoster,
    cmd: mpsc::Receiver<Cmd>,
    stop: Arc<AtomicBool>,
    rcvbuf: usize,
) {
    let fail = |e: String| post(&poster, &ns, vec![Item::Failed(e)], Instant::now());
    if let Some(n) = &ns.ns {
        if let Err(e) = netlink::enter_netns(n) {
            return fail(format!("namespace `{n}': {e}"));
        }
    }
    let (ev, mut req) = match (
        netlink::Socket::open(netlink::GROUPS, rcvbuf),
        netlink::Socket::open(0, 1 << 20),
    ) {
        (Ok(e), Ok(r)) => (e, r),
        (Err(e), _) | (_, Err(e)) => return fail(format!("netlink socket: {e}")),
    };
    req.set_recv_timeout(5);
    log::info!(
        "linux-cp: netlink listener in namespace {}, receive buffer {} bytes",
        ns.ns.as_deref().unwrap_or("(sluice's)"),
        ev.rcvbuf()
    );
    resync(&mut req, &poster, &ns);
    let mut buf = vec![0u8; 1 << 16];
    let mut parsed = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        while let Ok(c) = cmd.try_recv() {
            match c {
                Cmd::SetLink(c) => {
                    if let Err(e) = req.set_link(&c) {
                        log::warn!("linux-cp: set {c:?}: {e}");
                    }
                }
            }
        }
        let mut pfd = libc::pollfd {
            fd: ev.raw(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, 50) };
        let at = Instant::now();
        let mut items = Vec::new();
        let mut overrun = false;
        loop {
            match ev.recv(&mut buf, true) {
                Ok(0) if overrun || items.is_empty() || at.elapsed() >= COALESCE => break,
                Ok(0) => {
                    // A burst (a routing daemon installing a table) arrives faster than
                    // one message per wake-up: gather it for up to COALESCE so the main
                    // loop applies few large batches rather than many tiny ones.
                    // SAFETY: one valid pollfd.
                    unsafe { libc::poll(&mut pfd, 1, 1) };
                }
                Ok(n) => {
                    parsed.clear();
                    netlink::parse(&buf[..n], &mut parsed);
                    items.extend(parsed.drain(..).map(|(m, _)| Item::M(m)));
                    if items.len() >= BATCH {
                        post(&poster, &ns, std::mem::take(&mut items), at);
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    // Keep reading until the queue is empty before the resync: the kernel
                    // reports ENOBUFS once per congestion episode and clears the episode
                    // only when the queue drains, so overruns during a dump taken with a
                    // non-empty queue would go unreported and their events stay lost.
                    overrun = true;
                }
                Err(e) => {
                    log::warn!("linux-cp: netlink receive: {e}");
                    break;
                }
            }
        }
        if overrun {
            items.push(Item::Overrun);
        }
        if !items.is_empty() {
            post(&poster, &ns, items, at);
        }
        if overrun {
            // Events were lost: read the whole state again; the main loop sweeps what is
            // gone.
            resync(&mut req, &poster, &ns);
        }
    }
}

fn sluice_table(t: u32) -> u32 {
    if t == netlink::RT_TABLE_MAIN {
        0
    } else {
        t
    }
}

fn mask(a: IpAddr, len: u8) -> IpAddr {
    match a {
        IpAddr::V4(v) => {
            let m = if len == 0 {
                0
            } else {
                u32::MAX << (32 - len.min(32))
            };
            IpAddr::V4((u32::from(v) & m).into())
        }
        IpAddr::V6(v) => {
            let m = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len.min(128))
            };
            IpAddr::V6((u128::from(v) & m).into())
        }
    }
}

fn is_link_local(a: IpAddr) -> bool {
    matches!(a, IpAddr::V6(v) if v.segments()[0] & 0xffc0 == 0xfe80)
}

/// The `ip route` paths of `paths` in family `A` (`fam` picks a gateway of that family).
fn route_paths<A>(
    add: bool,
    table: u32,
    paths: &Installed,
    fam: impl Fn(IpAddr) -> Option<A>,
) -> RoutePaths<A> {
    let mut p = RoutePaths::<A> {
        table,
        drop: add && paths.is_empty(),
        ..RoutePaths::default()
    };
    for &(gw, sw, wt) in paths {
        match gw {
            Some(g) => {
                if let Some(g) = fam(g) {
                    p.paths.push((g, Some(SwIfIndex(sw)), wt));
                }
            }
            None => p.via_if.push((SwIfIndex(sw), wt)),
        }
    }
    p
}

/// Calls `ip route` (either family) for one prefix with `paths`.
fn route_action(
    vm: &mut Vlib,
    add: bool,
    table: u32,
    dst: IpAddr,
    len: u8,
    paths: &Installed,
) -> sluice_vnet::error::VnetResult {
    match dst {
        IpAddr::V4(d) => {
            let p = route_paths(add, table, paths, |g| match g {
                IpAddr::V4(g) => Some(g),
                IpAddr::V6(_) => None,
            });
            sluice_vnet::ip4::route_add_del(vm, add, 1, d.into(), len, &p)
        }
        IpAddr::V6(d) => {
            let p = route_paths(add, table, paths, |g| match g {
                IpAddr::V6(g) => Some(g),
                IpAddr::V4(_) => None,
            });
            sluice_vnet::ip6::route_add_del(vm, add, 1, d.into(), len, &p)
        }
    }
}

fn count_err(st: &mut Stats, what: &str, r: sluice_vnet::error::VnetResult) {
    if let Err(e) = r {
        st.errors += 1;
        log::warn!("linux-cp: {what}: {e}");
    }
}

/// Applies one route message.
fn route(vm: &mut Vlib, ns: &mut NsState, st: &mut Stats, m: Msg) {
    let Msg::Route {
        del,
        append,
        table,
        dst,
        len,
        kind,
        proto,
        hops,
    } = m
    else {
        return;
    };
    let drop_kind = matches!(kind, rtn::BLACKHOLE | rtn::UNREACHABLE | rtn::PROHIBIT);
    if table == netlink::RT_TABLE_LOCAL
        || !(kind == rtn::UNICAST || drop_kind)
        || (proto == netlink::RTPROT_KERNEL && kind == rtn::UNICAST)
        || (dst.is_ipv6() && is_link_local(dst))
    {
        st.ignored += 1;
        return;
    }
    let table = sluice_table(table);
    let key = (table, mask(dst, len), len);
    let mut paths: Installed = Vec::new();
    if !drop_kind {
        for Hop { gw, oif, weight } in &hops {
            let Some(sw) = oif.and_then(|o| ns.ifindex.get(&o)) else {
                st.unknown_if += 1;
                return;
            };
            paths.push((*gw, sw.0, (*weight).max(1)));
        }
        if paths.is_empty() {
            st.ignored += 1;
            return;
        }
    }
    if let Some(s) = ns.resync.as_mut() {
        s.routes.insert(key);
    }
    let (dst, len) = (key.1, key.2);
    if del {
        let Some(old) = ns.routes.get(&key).cloned() else {
            st.ignored += 1;
            return;
        };
        let all = paths.is_empty() || old.iter().all(|p| paths.contains(p));
        let none = Vec::new();
        let r = route_action(vm, false, table, dst, len, if all { &none } else { &paths });
        count_err(st, &format!("route del {dst}/{len}"), r);
        if all {
            ns.routes.remove(&key);
        } else if let Some(o) = ns.routes.get_mut(&key) {
            o.retain(|p| !paths.contains(p));
        }
        st.routes_del += 1;
        return;
    }
    if let Some(old) = ns.routes.get(&key) {
        if append && !old.is_empty() && !paths.is_empty() {
            paths.retain(|p| !old.contains(p));
            let r = route_action(vm, true, table, dst, len, &paths);
            count_err(st, &format!("route append {dst}/{len}"), r);
            if let Some(o) = ns.routes.get_mut(&key) {
                o.extend(paths);
            }
            return;
        }
        if *old == paths {
            return;
        }
        let r = route_action(vm, false, table, dst, len, &Vec::new());
        count_err(st, &format!("route replace {dst}/{len}"), r);
    }
    match route_action(vm, true, table, dst, len, &paths) {
        Ok(()) => {
            st.routes_add += 1;
            ns.routes.insert(key, paths);
        }
        Err(sluice_vnet::error::VnetError::NoTable(e)) => {
            st.unknown_table += 1;
            log::debug!("linux-cp: route {dst}/{len}: {e}");
        }
        Err(e) => {
            st.errors += 1;
            log::warn!("linux-cp: route add {dst}/{len}: {e}");
        }
    }
}

/// What the main loop must do after a message (needs the pair table).
pub enum After {
    /// Nothing more.
    Nothing,
    /// The twin with this ifindex was deleted in Linux.
    TwinDeleted(SwIfIndex),
}

/// Applies one message of namespace state `ns`; `twin_index(name)` maps a link name to its
/// pair's interface.
/// `deleting`: links deleted later in the same batch (their last "down" is the kernel
/// closing the device, not an admin change to mirror).
pub fn apply(
    vm: &mut Vlib,
    ns: &mut NsState,
    st: &mut Stats,
    m: Msg,
    twin: impl Fn(&str) -> Option<SwIfIndex>,
    deleting: &HashSet<u32>,
) -> After {
    st.msgs += 1;
    match m {
        Msg::Link {
            del,
            index,
            name,
            up,
            mtu,
            mac,
            ..
        } => {
            let Some(sw) = ns.ifindex.get(&index).copied().or_else(|| twin(&name)) else {
                return After::Nothing;
            };
            if del {
                ns.ifindex.remove(&index);
                ns.linux_up.remove(&index);
                ns.linux_mac.remove(&index);
                return After::TwinDeleted(sw);
            }
            ns.ifindex.insert(index, sw);
            if deleting.contains(&index) {
                return After::Nothing;
            }
            let prev = ns.linux_up.insert(index, up);
            if prev.is_some_and(|p| p != up) {
                st.links += 1;
                let r = sluice_vnet::interface::set_admin_state(vm, sw, up);
                count_err(st, "set interface state", r);
            }
            if let Some(mtu) = mtu {
                let cur = vm
                    .ext_mut::<sluice_vnet::Interfaces>()
                    .get(sw)
                    .map(|i| i.mtu);
                if cur.is_some_and(|c| c != mtu) && sluice_vnet::interface::MTU_RANGE.contains(&mtu)
                {
                    st.links += 1;
                    let r = sluice_vnet::interface::set_mtu(vm, sw, mtu);
                    count_err(st, "set interface mtu", r);
                }
            }
            // A unicast MAC given to the twin in Linux becomes the interface's.
            if let Some(mac) = mac.filter(|m| m[0] & 1 == 0 && *m != [0; 6]) {
                let prev = ns.linux_mac.insert(index, mac);
                let cur = vm
                    .ext_mut::<sluice_vnet::Interfaces>()
                    .get(sw)
                    .map(|i| i.mac);
                if prev.is_some_and(|p| p != mac) && cur.is_some_and(|c| c != mac) {
                    st.links += 1;
                    let r = sluice_vnet::interface::set_mac(vm, sw, mac);
                    count_err(st, "set interface mac address", r);
                }
            }
        }
        Msg::Addr {
            del,
            index,
            addr,
            len,
        } => {
            let Some(&sw) = ns.ifindex.get(&index) else {
                st.unknown_if += 1;
                return After::Nothing;
            };
            if is_link_local(addr) {
                st.ignored += 1;
                return After::Nothing;
            }
            let key = (sw.0, addr, len);
            if let Some(s) = ns.resync.as_mut() {
                s.addrs.insert(key);
            }
            if del != ns.addrs.contains(&key) {
                return After::Nothing;
            }
            let r = match addr {
                IpAddr::V4(a) => sluice_vnet::ip4::address_add_del(vm, sw, !del, a.into(), len),
                IpAddr::V6(a) => sluice_vnet::ip6::address_add_del(vm, sw, !del, a.into(), len),
            };
            st.addrs += 1;
            count_err(st, &format!("address {addr}/{len}"), r);
            if del {
                ns.addrs.remove(&key);
            } else {
                ns.addrs.insert(key);
            }
        }
        m @ Msg::Route { .. } => route(vm, ns, st, m),
        Msg::Neigh {
            del,
            index,
            ip,
            mac,
            state,
        } => {
            let Some(&sw) = ns.ifindex.get(&index) else {
                st.unknown_if += 1;
                return After::Nothing;
            };
            // Linux keeps NOARP entries for multicast groups (224.0.0.5 on an OSPF
            // interface): not neighbours, and a host route for them would hide the group
            // from `224.0.0.0/24 via local`.
            let group = match ip {
                IpAddr::V4(v) => v.is_multicast() || v.is_broadcast() || v.is_unspecified(),
                IpAddr::V6(v) => v.is_multicast() || v.is_unspecified(),
            } || mac.is_some_and(|m| m[0] & 1 != 0);
            if group {
                st.ignored += 1;
                return After::Nothing;
            }
            let key = (sw.0, ip);
            let gone = del || state & (nud::FAILED | nud::INCOMPLETE) != 0 || mac.is_none();
            if gone {
                if ns.neighs.remove(&key) {
                    st.neighs += 1;
                    let r = sluice_vnet::neighbor::add_del(vm, false, sw, ip, [0; 6], false);
                    count_err(st, &format!("neighbor del {ip}"), r);
                }
                return After::Nothing;
            }
            if let Some(s) = ns.resync.as_mut() {
                s.neighs.insert(key);
            }
            let is_static = state & (nud::PERMANENT | nud::NOARP) != 0;
            st.neighs += 1;
            let r = sluice_vnet::neighbor::add_del(
                vm,
                true,
                sw,
                ip,
                mac.unwrap_or_default(),
                is_static,
            );
            count_err(st, &format!("neighbor {ip}"), r);
            ns.neighs.insert(key);
        }
        Msg::Done | Msg::Error(_) => st.ignored += 1,
    }
    After::Nothing
}

/// Starts a resync of `ns` (mark).
pub fn resync_begin(ns: &mut NsState, st: &mut Stats) {
    st.resyncs += 1;
    ns.resync = Some(Seen::default());
}

/// Ends it: removes what was installed and is not in the dump (sweep).
pub fn resync_end(vm: &mut Vlib, ns: &mut NsState, st: &mut Stats) {
    let Some(seen) = ns.resync.take() else {
        return;
    };
    let gone: Vec<_> = ns
        .routes
        .keys()
        .filter(|k| !seen.routes.contains(k))
        .copied()
        .collect();
    for k in gone {
        ns.routes.remove(&k);
        st.routes_del += 1;
        let r = route_action(vm, false, k.0, k.1, k.2, &Vec::new());
        count_err(st, "resync route del", r);
    }
    let gone: Vec<_> = ns.addrs.difference(&seen.addrs).copied().collect();
    for (sw, a, l) in gone {
        ns.addrs.remove(&(sw, a, l));
        st.addrs += 1;
        let r = match a {
            IpAddr::V4(v) => {
                sluice_vnet::ip4::address_add_del(vm, SwIfIndex(sw), false, v.into(), l)
            }
            IpAddr::V6(v) => {
                sluice_vnet::ip6::address_add_del(vm, SwIfIndex(sw), false, v.into(), l)
            }
        };
        count_err(st, "resync address del", r);
    }
    let gone: Vec<_> = ns.neighs.difference(&seen.neighs).copied().collect();
    for (sw, ip) in gone {
        ns.neighs.remove(&(sw, ip));
        st.neighs += 1;
        let r = sluice_vnet::neighbor::add_del(vm, false, SwIfIndex(sw), ip, [0; 6], false);
        count_err(st, "resync neighbor del", r);
    }
}
