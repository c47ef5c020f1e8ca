//! What IPv4 and IPv6 share above the route tables, written once: the control-plane trait
//! [`IpControl`] (implemented by `ip4::Ip4Control` and `ip6::Ip6Control`), the actions
//! over it (static routes, neighbours, table and neighbour queries) and the
//! `ip4-neighbor-process` / `ip6-neighbor-process` node ([`NeighborProcess`]). The families
//! differ only in the address type, the LPM ([`Lpm`]) and a few hooks.

use crate::error::{VnetError, VnetResult};
use crate::interface::SwIfIndex;
use crate::neighbor::{Aging, Entries};
use crate::routes::{no_table, Hop, Lpm, RoutePaths, Vrfs};
use sluice_fib::adj::{Adj, AdjKind, Adjacencies};
use sluice_fib::lb::LoadBalances;
use sluice_graph::{Cx, NodeFn, Suspend, Vlib, Wake};
use std::any::Any;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

/// The host-order address of a family's control plane (`u32`, `u128`).
pub type Addr<C> = <<C as IpControl>::L as Lpm>::Addr;

/// Locks a control-plane mutex, recovering it if a holder panicked.
pub(crate) fn lock<T>(c: &Mutex<T>) -> MutexGuard<'_, T> {
    match c.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// One address family's control plane (main thread): its tables, interface addresses,
/// neighbours and adjacencies, as the shared actions need them.
pub trait IpControl: crate::neighbor::Table<Addr<Self>> + Send + Sized + 'static {
    /// The family's LPM.
    type L: Lpm + Send;
    /// The standard address type (`Ipv4Addr`, `Ipv6Addr`).
    type Ip: Copy + std::fmt::Display + From<Addr<Self>> + Into<Addr<Self>> + Into<IpAddr> + 'static;
    /// The read side the family's nodes share.
    type Shared: Send + Sync + 'static;
    /// An aging probe frame (Ethernet header included).
    type Probe: AsRef<[u8]>;
    /// `IPv4` / `IPv6`, as errors name the family.
    const NAME: &'static str;
    /// The Ethernet type of the family (a point-to-point adjacency's rewrite).
    const ETHERTYPE: u16;

    /// The control plane of the running daemon.
    fn control(vm: &mut Vlib) -> VnetResult<Arc<Mutex<Self>>>;
    /// The tables.
    fn vrfs(&self) -> &Vrfs<Self::L>;
    /// The tables, to edit.
    fn vrfs_mut(&mut self) -> &mut Vrfs<Self::L>;
    /// The adjacencies, to add to.
    fn adjs_mut(&mut self) -> &mut Adjacencies;
    /// The interface addresses (interface, address, length), in the order they were added.
    fn addrs(&self) -> &[(u32, Addr<Self>, u8)];
    /// The neighbours.
    fn neighbors(&self) -> &Entries<Addr<Self>>;
    /// The neighbours' aging state.
    fn aging(&self) -> &Aging<(u32, Addr<Self>)>;
    /// The FIB index of an interface's table.
    fn if_fib(&self, i: u32) -> u32;
    /// The MTU of interface `i` (for its adjacencies).
    fn if_mtu(&self, i: u32) -> u16;
    /// The neighbour adjacency for (interface, next hop).
    fn nbr_adj(&mut self, i: u32, nh: Addr<Self>) -> VnetResult<u32>;
    /// The glean adjacency of interface `i` (resolves each destination).
    fn glean_adj(&mut self, i: u32) -> VnetResult<u32>;
    /// Applies the neighbours the data plane learned; returns how many it took.
    fn apply_learned(&mut self) -> usize;
    /// Ages the neighbours; returns the probes to send (interface, frame).
    fn age_neighbors(&mut self) -> Vec<(u32, Self::Probe)>;
    /// Why `nh` cannot be a recursive next hop (IPv6 link-local: it needs its interface).
    fn check_recursive(_nh: Addr<Self>) -> VnetResult {
        Ok(())
    }

    /// The standard address of `a`, None if `a` is of the other family.
    fn from_ip(a: IpAddr) -> Option<Self::Ip> {
        let v: u128 = match a {
            IpAddr::V4(x) if Self::L::BITS == 32 => u32::from(x).into(),
            IpAddr::V6(x) if Self::L::BITS == 128 => u128::from(x),
            _ => return None,
        };
        Some(Self::Ip::from(Self::L::from_u128(v)))
    }

    /// The interface whose subnet in table `fib` holds `nh` (the longest).
    fn connected_if(&self, fib: u32, nh: Addr<Self>) -> Option<u32> {
        let m = <Self::L as Lpm>::mask;
        self.addrs()
            .iter()
            .filter(|&&(i, a, l)| m(a, l) == m(nh, l) && self.if_fib(i) == fib)
            .max_by_key(|&&(_, _, l)| l)
            .map(|&(i, _, _)| i)
    }

    /// The receive adjacency of interface `i` (`via local`).
    fn local_adj(&mut self, i: u32) -> VnetResult<u32> {
        let mtu = self.if_mtu(i);
        self.adjs_mut()
            .find_or_add((AdjKind::Local, i, 0), || Adj {
                kind: AdjKind::Local,
                tx_if: i,
                mtu,
                rewrite: [0; 14],
                nh: 0,
            })
            .ok_or_else(|| VnetError::Full("adjacency table full".into()))
    }

    /// The one adjacency of point-to-point interface `i` (`IfAttr::p2p`); neighbour
    /// adjacencies never use key 0.
    fn p2p_adj(&mut self, i: u32) -> VnetResult<u32> {
        let mtu = self.if_mtu(i);
        self.adjs_mut()
            .find_or_add((AdjKind::Rewrite, i, 0), || {
                crate::interface::p2p_adj(i, mtu, Self::ETHERTYPE)
            })
            .ok_or_else(|| VnetError::Full("adjacency table full".into()))
    }
}

/// The [`IpControl`] methods a family's control plane provides by fields (`vrfs`, `adjs`,
/// `addrs`, `neighbors`, `aging`) and inherent methods of the same names (`if_fib`,
/// `if_mtu`, `nbr_adj`, `glean_adj`, `apply_learned`, `age_neighbors`): used inside its
/// `impl IpControl`, with its LPM and address types.
macro_rules! ip_control_fields {
    ($lpm:ty, $addr:ty) => {
        fn vrfs(&self) -> &$crate::routes::Vrfs<$lpm> {
            &self.vrfs
        }
        fn vrfs_mut(&mut self) -> &mut $crate::routes::Vrfs<$lpm> {
            &mut self.vrfs
        }
        fn adjs_mut(&mut self) -> &mut sluice_fib::adj::Adjacencies {
            &mut self.adjs
        }
        fn addrs(&self) -> &[(u32, $addr, u8)] {
            &self.addrs
        }
        fn neighbors(&self) -> &$crate::neighbor::Entries<$addr> {
            &self.neighbors
        }
        fn aging(&self) -> &$crate::neighbor::Aging<(u32, $addr)> {
            &self.aging
        }
        fn if_fib(&self, i: u32) -> u32 {
            Self::if_fib(self, i)
        }
        fn if_mtu(&self, i: u32) -> u16 {
            Self::if_mtu(self, i)
        }
        fn nbr_adj(&mut self, i: u32, nh: $addr) -> VnetResult<u32> {
            Self::nbr_adj(self, i, nh)
        }
        fn glean_adj(&mut self, i: u32) -> VnetResult<u32> {
            Self::glean_adj(self, i)
        }
        fn apply_learned(&mut self) -> usize {
            Self::apply_learned(self)
        }
        fn age_neighbors(&mut self) -> Vec<(u32, Self::Probe)> {
            Self::age_neighbors(self)
        }
    };
}
pub(crate) use ip_control_fields;

/// `count` consecutive prefixes of length `len` from `p`: the k-th (None past the end of the
/// address space).
fn nth_prefix<L: Lpm>(p: L::Addr, len: u8) -> impl Fn(u32) -> Option<L::Addr> {
    let base: u128 = L::mask(p, len).into();
    let step: u128 = if len == 0 {
        0
    } else {
        1u128 << (L::BITS - len) as u32
    };
    move |k| {
        let a = (k as u128).checked_mul(step)?.checked_add(base)?;
        (L::BITS == 128 || a >> L::BITS as u32 == 0).then(|| L::from_u128(a))
    }
}

/// A prefix as errors name it: `address/length`.
struct Shown<T>(T, u8);

impl<T: std::fmt::Display> std::fmt::Display for Shown<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.0, self.1)
    }
}

/// Why a route edit of several prefixes stopped: the error and, when it concerns one
/// prefix, its position in the list (the prefixes before it stay edited).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixError {
    /// The prefix the error concerns (None: the paths or the table, before any prefix).
    pub index: Option<usize>,
    /// The error.
    pub error: VnetError,
}

/// `ip route [add|del] [count <n>] <p>/<len> <paths>`: [`routes_add_del`] of one prefix.
pub fn route_add_del<C: IpControl>(
    vm: &mut Vlib,
    is_add: bool,
    count: u32,
    p: Addr<C>,
    len: u8,
    paths: &RoutePaths<C::Ip>,
) -> VnetResult {
    routes_add_del::<C>(vm, is_add, count, &[(p, len)], paths).map_err(|e| e.error)
}

/// `ip route [add|del] [count <n>] <p>/<len> <paths>` of each prefix of `prefixes`
/// (`count` consecutive ones from each) with the same paths, resolved once:
/// `ip_route_add_del_multi`. The first failure stops the edit (the prefixes before it stay
/// edited). A next hop with an interface, or on a connected subnet, is attached (its
/// neighbour's adjacency); any other resolves recursively through the table.
pub fn routes_add_del<C: IpControl>(
    vm: &mut Vlib,
    is_add: bool,
    count: u32,
    prefixes: &[(Addr<C>, u8)],
    paths: &RoutePaths<C::Ip>,
) -> Result<(), PrefixError> {
    let bits = C::L::BITS;
    if let Some(k) = prefixes.iter().position(|&(_, len)| len > bits) {
        let (p, len) = prefixes[k];
        return Err(PrefixError {
            index: Some(k),
            error: VnetError::invalid(format!(
                "bad prefix length in `{}'",
                Shown(C::Ip::from(p), len)
            )),
        });
    }
    let at = |index: usize| {
        move |error| PrefixError {
            index: Some(index),
            error,
        }
    };
    let none = |error| PrefixError { index: None, error };
    for &(_, i, wt) in &paths.paths {
        if let Some(i) = i {
            crate::interface::check(vm, i).map_err(none)?;
        }
        if wt == 0 {
            return Err(none(VnetError::invalid("weight must be at least 1")));
        }
    }
    if count > 1 {
        crate::routes::check_route_count(count, !is_add)
            .map_err(|e| none(VnetError::invalid(e.msg)))?;
    }
    let intr = vm
        .ext::<sluice_cli::Interrupt>()
        .copied()
        .unwrap_or_default();
    let c = C::control(vm).map_err(none)?;
    let mut ctl = lock(&c);
    let fib = ctl
        .vrfs()
        .fib_of(paths.table)
        .ok_or_else(|| none(no_table(paths.table)))?;
    let mut resolved = paths
        .resolve(!is_add, |nh, intf| {
            let nh: Addr<C> = nh.into();
            match intf.map(|i| i.0).or_else(|| ctl.connected_if(fib, nh)) {
                Some(i) => ctl.nbr_adj(i, nh).map(Hop::Adj),
                None => {
                    C::check_recursive(nh)?;
                    crate::routes::check_resolve_via(paths, ctl.vrfs(), fib, nh, bits)?;
                    Ok(Hop::Via(nh))
                }
            }
        })
        .map_err(none)?;
    // `via <interface>`: a host route's neighbour is the destination itself; a wider
    // prefix gleans (resolves each destination) on the interface. `via local`: receive.
    let local = if paths.local {
        Some(ctl.local_adj(0).map_err(none)?)
    } else {
        None
    };
    if paths.via_if.is_empty() {
        resolved.extend(local.map(|l| (Hop::Adj(l), 1)));
    }
    for (k, &(p, len)) in prefixes.iter().enumerate() {
        let mut r;
        let resolved = if paths.via_if.is_empty() {
            &resolved
        } else {
            r = resolved.clone();
            for &(i, wt) in &paths.via_if {
                let adj = if len == bits {
                    ctl.nbr_adj(i.0, p)
                } else {
                    ctl.glean_adj(i.0)
                };
                let adj = adj.map_err(at(k))?;
                r.push((Hop::Adj(adj), wt));
            }
            r.extend(local.map(|l| (Hop::Adj(l), 1)));
            &r
        };
        ctl.vrfs_mut()
            .apply_static(
                fib,
                count.max(1),
                nth_prefix::<C::L>(p, len),
                len,
                !is_add,
                paths.drop,
                resolved,
                &Shown(C::Ip::from(p), len),
                &|| intr.requested(),
            )
            .map_err(at(k))?;
    }
    Ok(())
}

/// `ip neighbor [del] <if> <ip> <mac> [static]`: a neighbour is never one of the router's
/// own addresses.
pub fn neighbor_add_del<C: IpControl>(
    vm: &mut Vlib,
    is_add: bool,
    i: SwIfIndex,
    ip: Addr<C>,
    mac: [u8; 6],
    is_static: bool,
) -> VnetResult {
    crate::interface::check(vm, i)?;
    let c = C::control(vm)?;
    let mut ctl = lock(&c);
    let shown = C::Ip::from(ip);
    if !is_add {
        if !ctl.remove(i.0, ip) {
            return Err(VnetError::NotFound(format!("no neighbor {shown}")));
        }
        return Ok(());
    }
    if ctl.addrs().iter().any(|&(_, a, _)| a == ip) {
        return Err(VnetError::invalid(format!(
            "`{shown}' is one of this router's addresses, not a neighbour's"
        )));
    }
    crate::neighbor::add(&mut *ctl, i.0, ip, mac, is_static, &shown.to_string())
}

/// Runs `f` on the control plane; None before it is initialised.
fn with<C: IpControl, R>(vm: &mut Vlib, f: impl FnOnce(&mut C) -> R) -> Option<R> {
    let c = C::control(vm).ok()?;
    let mut ctl = lock(&c);
    Some(f(&mut ctl))
}

/// The FIB index of table `id`.
pub fn fib_index<C: IpControl>(vm: &mut Vlib, id: u32) -> Option<u32> {
    with::<C, _>(vm, |c| c.vrfs().fib_of(id)).flatten()
}

/// The adjacency of neighbour `nh` on interface `i`, created if needed (VPP's
/// `adj_nbr_add_or_lock`): Rewrite when the neighbour's MAC is known, else Incomplete,
/// which `ip4-glean`/`ip6-glean` resolve and which turns Rewrite in place when the
/// neighbour is learned. For cross-connects that name their next hop (SRv6 End.DX4/DX6).
pub fn neighbor_adjacency<C: IpControl>(vm: &mut Vlib, i: u32, nh: Addr<C>) -> VnetResult<u32> {
    let c = C::control(vm)?;
    let mut ctl = lock(&c);
    ctl.nbr_adj(i, nh)
}

/// Number of routes (benchmarks, tests).
pub fn route_count<C: IpControl>(vm: &mut Vlib) -> usize {
    with::<C, _>(vm, |c| c.vrfs().route_count()).unwrap_or(0)
}

/// The tables: (table id, FIB index, routes).
pub fn tables<C: IpControl>(vm: &mut Vlib) -> Vec<(u32, u32, usize)> {
    with::<C, _>(vm, |c| c.vrfs().tables()).unwrap_or_default()
}

/// The table id of an interface.
pub fn if_table_id<C: IpControl>(vm: &mut Vlib, i: u32) -> u32 {
    with::<C, _>(vm, |c| c.vrfs().id_of(c.if_fib(i)))
        .flatten()
        .unwrap_or(0)
}

/// The addresses of an interface, in the order they were added.
pub fn addresses<C: IpControl>(vm: &mut Vlib, i: u32) -> Vec<(Addr<C>, u8)> {
    with::<C, _>(vm, |c| {
        c.addrs()
            .iter()
            .filter(|x| x.0 == i)
            .map(|x| (x.1, x.2))
            .collect()
    })
    .unwrap_or_default()
}

/// The neighbours: (interface, address, MAC, static), sorted.
pub fn neighbors<C: IpControl>(vm: &mut Vlib) -> Vec<(u32, IpAddr, [u8; 6], bool)> {
    let mut v: Vec<_> = with::<C, _>(vm, |c| {
        c.neighbors()
            .iter()
            .map(|(&(i, ip), &(mac, st))| (i, C::Ip::from(ip).into(), mac, st))
            .collect()
    })
    .unwrap_or_default();
    v.sort();
    v
}

/// Every neighbour, for `show ip neighbors` (`crate::neighbor`).
pub fn neighbor_rows<C: IpControl>(vm: &mut Vlib) -> Vec<crate::neighbor::Row> {
    let now = std::time::Instant::now();
    with::<C, _>(vm, |c| {
        c.neighbors()
            .iter()
            .map(|(&(i, ip), &(mac, is_static))| crate::neighbor::Row {
                sw_if: i,
                ip: C::Ip::from(ip).into(),
                mac,
                is_static,
                age: c.aging().updated(&(i, ip)).map(|t| now.duration_since(t)),
            })
            .collect()
    })
    .unwrap_or_default()
}

/// Runs `f` on the neighbour aging state (`set ip neighbor-config ip4|ip6`).
pub fn with_aging<C: IpControl, R>(
    vm: &mut Vlib,
    f: impl FnOnce(&mut Aging<(u32, Addr<C>)>) -> R,
) -> VnetResult<R> {
    let c = C::control(vm)?;
    let mut ctl = lock(&c);
    Ok(f(ctl.split().1))
}

/// Applies learned neighbours now (the process node does this every 10 ms).
pub fn apply_learned<C: IpControl>(vm: &mut Vlib) -> usize {
    with::<C, _>(vm, |c| c.apply_learned()).unwrap_or(0)
}

/// Gives the family's adjacencies their interface's current MAC (the rewrite's source) and
/// MTU: `attrs` by interface.
pub(crate) fn refresh_adjs<C: IpControl>(vm: &mut Vlib, attrs: &HashMap<u32, ([u8; 6], u16)>) {
    with::<C, _>(vm, |c| c.adjs_mut().refresh(|a| refresh_adj(a, attrs)));
}

/// An adjacency with its interface's current MAC and MTU (None: not an interface adjacency).
fn refresh_adj(a: &Adj, attrs: &HashMap<u32, ([u8; 6], u16)>) -> Option<Adj> {
    if a.kind == AdjKind::Drop {
        return None;
    }
    let &(mac, mtu) = attrs.get(&a.tx_if)?;
    let mut n = *a;
    n.mtu = mtu;
    if a.kind != AdjKind::Local {
        n.rewrite[6..12].copy_from_slice(&mac);
    }
    Some(n)
}

/// What a family's control plane is built from: its LPM, adjacencies, load balances and the
/// nodes' shared state, made at registration.
pub type Pending<C> = (
    <C as IpControl>::L,
    Adjacencies,
    LoadBalances,
    Arc<<C as IpControl>::Shared>,
);

/// Control-plane pieces created at registration and completed by the family's `init`; held
/// by the main-thread instance of its `*-neighbor-process` node.
pub struct CtlSlot<C: IpControl> {
    /// What the control plane is built from (taken by `init`).
    pub(crate) pending: Option<Pending<C>>,
    /// The control plane once initialised.
    pub ctl: Option<Arc<Mutex<C>>>,
}

impl<C: IpControl> Default for CtlSlot<C> {
    fn default() -> Self {
        CtlSlot {
            pending: None,
            ctl: None,
        }
    }
}

impl<C: IpControl> CtlSlot<C> {
    /// A slot holding what `init` builds the control plane from.
    pub(crate) fn new(pending: Pending<C>) -> Self {
        CtlSlot {
            pending: Some(pending),
            ctl: None,
        }
    }
}

/// Takes what the control plane is built from out of the `node` process node's slot (None
/// if the node is absent or `init` ran already); `build` makes the control plane, which is
/// stored in the slot and returned.
pub(crate) fn init_slot<C: IpControl>(
    vm: &mut Vlib,
    node: &str,
    build: impl FnOnce(&mut Vlib, Pending<C>) -> C,
) -> Option<Arc<Mutex<C>>> {
    let idx = vm.registry.find(node)?;
    let slot = vm
        .main
        .node_mut::<NeighborProcess<C>>(idx)
        .map(|n| n.slot.clone())?;
    let mut s = lock(&slot);
    let pending = s.pending.take()?;
    let ctl = Arc::new(Mutex::new(build(vm, pending)));
    s.ctl = Some(ctl.clone());
    Some(ctl)
}

// ---------------------------------------------------------------------------------------
/// `ip4-neighbor-process` / `ip6-neighbor-process`: every 10 ms applies the neighbours the
/// data plane learned (`arp-input`, `ip6-local`: adjacency update + host route); every
/// 100 ms ages dynamic neighbours (`set ip neighbor-config ip4|ip6 age`): sends unicast
/// probes (ARP request, neighbor solicitation) to stale ones, removes those still stale
/// after their probe. Main thread only.
///
/// - next: `interface-output` (0) for probes (`tx_if` = the neighbour's interface).
/// - counters: `learned` (info), `probes_sent` (info), `no_buffer` (probe not sent).
pub struct NeighborProcess<C: IpControl> {
    /// Control-plane slot (see the family's `init`).
    pub slot: Arc<Mutex<CtlSlot<C>>>,
    last_age: f64,
}

impl<C: IpControl> NeighborProcess<C> {
    /// The node over `slot`.
    pub fn new(slot: Arc<Mutex<CtlSlot<C>>>) -> Self {
        NeighborProcess {
            slot,
            last_age: 0.0,
        }
    }
}

impl<C: IpControl> NodeFn for NeighborProcess<C> {
    fn process(&mut self, cx: &mut Cx, _wake: Wake) -> Suspend {
        let ctl = lock(&self.slot).ctl.clone();
        if let Some(c) = ctl {
            crate::neighbor::process_tick(
                cx,
                &mut self.last_age,
                || lock(&c).apply_learned(),
                || lock(&c).age_neighbors(),
            );
        }
        Suspend::Timeout(0.01)
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::nth_prefix;
    use sluice_fib::ip4::Ip4Lpm;
    use sluice_fib::ip6::Ip6Lpm;

    #[test]
    fn consecutive_prefixes_stop_at_the_end_of_the_address_space() {
        let n = nth_prefix::<Ip4Lpm>(0xffff_fe05, 24);
        assert_eq!(n(0), Some(0xffff_fe00));
        assert_eq!(n(1), Some(0xffff_ff00));
        assert_eq!(n(2), None);
        let n = nth_prefix::<Ip4Lpm>(0x0a00_0001, 0);
        assert_eq!((n(0), n(7)), (Some(0), Some(0)));
        let n = nth_prefix::<Ip6Lpm>(u128::MAX, 127);
        assert_eq!(n(0), Some(u128::MAX - 1));
        assert_eq!(n(1), None);
        let n = nth_prefix::<Ip6Lpm>(1 << 64, 64);
        assert_eq!(n(3), Some(4 << 64));
    }
}
