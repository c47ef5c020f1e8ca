//! The route tables both address families share: routes with paths per source, the best
//! source installed in the family's LPM (one path directly, several through a load-balance
//! object), recursive static routes (a next hop resolved through the table, following its
//! cover as routes change), VRF tables ([`Vrfs`]: one LPM per table, published to the data
//! plane by FIB index), static-route editing for the `ip route` CLI, and the
//! `show ip[6] fib` rendering. IPv4 and IPv6 differ only in the LPM ([`Lpm`]) and the address
//! type.

use crate::error::{VnetError, VnetResult};
use crate::events::{EventLog, VnetEvent};
use sluice_cli::{Args, CliError};
use sluice_fib::adj::{Adj, AdjKind};
use sluice_fib::ip4::LpmError;
use sluice_fib::lb::{LbTable, LoadBalances};
use sluice_graph::Vlib;
use sluice_infra::epoch::{Epochs, Retired};
use smallvec::{smallvec, SmallVec};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::sync::{Arc, OnceLock};

use crate::interface::SwIfIndex;

/// LPM values at or above this are load-balance indices (ECMP); below, adjacency indices.
pub const LB_FLAG: u32 = 1 << 23;

/// The adjacency an LPM value `v` leaves by for flow hash `hash`: `v` itself, or for a
/// load-balance ([`LB_FLAG`]) its bucket for `hash`.
#[inline(always)]
pub(crate) fn adj_for(lbs: &LbTable, v: u32, hash: u32) -> u32 {
    match v >= LB_FLAG {
        true => lbs.pick(v & (LB_FLAG - 1), hash),
        false => v,
    }
}

/// FIB indices (VRF tables per family, table 0 included).
pub const MAX_FIBS: usize = 1024;

/// How deep a change propagates through recursive routes (loops stop here at the latest).
const MAX_RECURSION: u32 = 16;

/// Why a route was installed.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    /// The router's own address (host route).
    Local,
    /// A connected subnet of an interface address.
    Connected,
    /// A learned or static neighbour (host route).
    Adjacency,
    /// Configured with `ip route`.
    Static,
}

impl Source {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Source::Local => "local",
            Source::Connected => "connected",
            Source::Adjacency => "adjacency",
            Source::Static => "static",
        }
    }
}

/// Paths (adjacency, weight) of one source or installed: up to two inline, more on the
/// heap (a route of a loaded table allocates nothing beside its map entry).
pub type PathList = SmallVec<[(u32, u32); 2]>;

/// Paths per source, in source order (the best first): the sources present, inline when
/// there is one (a map, or a slot per source, would make every route of a million-route
/// table larger or allocate per route — the largest cost of loading one).
#[derive(Clone, Debug, Default)]
pub struct Sources(SmallVec<[(Source, PathList); 1]>);

impl Sources {
    /// The paths of `src`.
    pub fn get(&self, src: &Source) -> Option<&PathList> {
        self.0.iter().find(|e| e.0 == *src).map(|e| &e.1)
    }

    /// Whether `src` has paths.
    pub fn contains_key(&self, src: &Source) -> bool {
        self.0.iter().any(|e| e.0 == *src)
    }

    /// Sets the paths of `src`.
    pub fn insert(&mut self, src: Source, paths: PathList) {
        match self.0.iter().position(|e| e.0 >= src) {
            Some(i) if self.0[i].0 == src => self.0[i].1 = paths,
            Some(i) => self.0.insert(i, (src, paths)),
            None => self.0.push((src, paths)),
        }
    }

    /// Takes the paths of `src` out.
    pub fn remove(&mut self, src: &Source) -> Option<PathList> {
        let i = self.0.iter().position(|e| e.0 == *src)?;
        Some(self.0.remove(i).1)
    }

    /// No source has paths.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Removes every source.
    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// (source, paths), best source first.
    pub fn iter(&self) -> impl Iterator<Item = (&Source, &PathList)> {
        self.0.iter().map(|(s, p)| (s, p))
    }

    /// The sources with paths, best first.
    pub fn keys(&self) -> impl Iterator<Item = &Source> {
        self.iter().map(|(s, _)| s)
    }

    /// The paths, best source first.
    pub fn values(&self) -> impl Iterator<Item = &PathList> {
        self.iter().map(|(_, p)| p)
    }
}

/// A route: paths (adjacency, weight) per source; the best source's paths are installed.
/// Static routes may also have recursive next hops (`vias`), resolved through the table.
#[derive(Clone, Debug, Default)]
pub struct Route {
    /// Paths by source (the lowest source wins, as VPP's source priorities).
    pub by_source: Sources,
    /// Recursive static next hops (address, weight).
    pub vias: Vec<(u128, u32)>,
    /// The paths installed (after recursion): what the data plane forwards over.
    pub installed: PathList,
    /// The LPM value installed (adjacency, or `LB_FLAG | load-balance`).
    value: u32,
}

impl Route {
    /// The static source as configured: whether it is a drop route, and its attached paths
    /// (adjacency, weight).
    pub fn static_paths(&self) -> (bool, Vec<(u32, u32)>) {
        let direct = self.by_source.get(&Source::Static);
        let drop = direct.is_some_and(|d| d.iter().any(|p| p.0 == 0));
        let adjs = direct
            .map(|d| d.iter().copied().filter(|p| p.0 != 0).collect())
            .unwrap_or_default();
        (drop, adjs)
    }

    /// The route's sources (a route with only recursive next hops is static).
    pub fn sources(&self) -> Vec<Source> {
        let mut v: Vec<Source> = self.by_source.keys().copied().collect();
        if !self.vias.is_empty() && !v.contains(&Source::Static) {
            v.push(Source::Static);
        }
        v
    }
}

/// A next hop of a static route as the CLI resolved it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Hop<A> {
    /// Through this adjacency (attached next hop, or an explicit interface).
    Adj(u32),
    /// Recursive: through whatever route covers this address in the same table.
    Via(A),
}

/// The longest-prefix-match structure of one address family.
pub trait Lpm: Sized {
    /// Address type (host order).
    type Addr: Copy + Ord + Eq + std::hash::Hash + std::fmt::Debug + Into<u128> + 'static;
    /// The shared read side.
    type Table: Send + Sync + 'static;
    /// Address width in bits.
    const BITS: u8;
    /// An empty LPM.
    fn create() -> Self;
    /// The shared read side.
    fn read_side(&self) -> Arc<Self::Table>;
    /// `addr` with its host bits below `len` cleared.
    fn mask(addr: Self::Addr, len: u8) -> Self::Addr;
    /// Adds or replaces a prefix.
    fn insert(&mut self, e: &Epochs, p: Self::Addr, len: u8, v: u32) -> Result<(), LpmError>;
    /// Removes a prefix.
    fn remove(&mut self, e: &Epochs, p: Self::Addr, len: u8);
    /// Longest-prefix match.
    fn lookup(&self, a: Self::Addr) -> Option<u32>;
    /// The address from its u128 form (recursive next hops are stored as u128).
    fn from_u128(a: u128) -> Self::Addr;
    /// The prefixes every table of this family drops while no route has them (VPP's
    /// special FIB entries): installed in the LPM when the table is created and put back
    /// when the last source of a route at one of them goes. A miss drops already, so the
    /// default route is not among them.
    const DROP_SPECIALS: &'static [(Self::Addr, u8)];
}

impl Lpm for sluice_fib::ip4::Ip4Lpm {
    type Addr = u32;
    type Table = sluice_fib::ip4::Ip4Table;
    const BITS: u8 = 32;
    fn create() -> Self {
        sluice_fib::ip4::Ip4Lpm::new()
    }
    fn read_side(&self) -> Arc<Self::Table> {
        self.table().clone()
    }
    fn mask(a: u32, len: u8) -> u32 {
        sluice_fib::ip4::mask(a, len)
    }
    fn insert(&mut self, e: &Epochs, p: u32, len: u8, v: u32) -> Result<(), LpmError> {
        sluice_fib::ip4::Ip4Lpm::insert(self, e, p, len, v)
    }
    fn remove(&mut self, e: &Epochs, p: u32, len: u8) {
        sluice_fib::ip4::Ip4Lpm::remove(self, e, p, len);
    }
    fn lookup(&self, a: u32) -> Option<u32> {
        sluice_fib::ip4::Ip4Lpm::lookup(self, a)
    }
    fn from_u128(a: u128) -> u32 {
        a as u32
    }
    /// 0.0.0.0/32, multicast 224.0.0.0/4, class E 240.0.0.0/4, broadcast 255.255.255.255/32.
    const DROP_SPECIALS: &'static [(u32, u8)] =
        &[(0, 32), (0xe000_0000, 4), (0xf000_0000, 4), (u32::MAX, 32)];
}

impl Lpm for sluice_fib::ip6::Ip6Lpm {
    type Addr = u128;
    type Table = sluice_fib::ip6::Ip6Table;
    const BITS: u8 = 128;
    fn create() -> Self {
        sluice_fib::ip6::Ip6Lpm::new()
    }
    fn read_side(&self) -> Arc<Self::Table> {
        self.table().clone()
    }
    fn mask(a: u128, len: u8) -> u128 {
        sluice_fib::ip6::mask(a, len)
    }
    fn insert(&mut self, e: &Epochs, p: u128, len: u8, v: u32) -> Result<(), LpmError> {
        sluice_fib::ip6::Ip6Lpm::insert(self, e, p, len, v)
    }
    fn remove(&mut self, e: &Epochs, p: u128, len: u8) {
        sluice_fib::ip6::Ip6Lpm::remove(self, e, p, len);
    }
    fn lookup(&self, a: u128) -> Option<u32> {
        sluice_fib::ip6::Ip6Lpm::lookup(self, a)
    }
    fn from_u128(a: u128) -> u128 {
        a
    }
    const DROP_SPECIALS: &'static [(u128, u8)] = &[];
}

/// The data plane's view of a family's tables: the LPM read side of every FIB index, set once
/// per index and never removed (a deleted table is emptied and its index reused), so a lookup
/// is one atomic load and no lock.
pub struct FibSlots<T> {
    slots: Box<[OnceLock<Arc<T>>]>,
}

impl<T> Default for FibSlots<T> {
    fn default() -> Self {
        FibSlots {
            slots: (0..MAX_FIBS).map(|_| OnceLock::new()).collect(),
        }
    }
}

impl<T> FibSlots<T> {
    /// The table of FIB index `fib` (None: no such table).
    #[inline(always)]
    pub fn get(&self, fib: u32) -> Option<&T> {
        self.slots.get(fib as usize)?.get().map(|t| &**t)
    }

    fn publish(&self, fib: u32, t: Arc<T>) {
        if let Some(s) = self.slots.get(fib as usize) {
            let _ = s.set(t);
        }
    }
}

/// Load-balance objects of a family (shared by its tables), reused after a grace period.
pub struct Lbs {
    lbs: LoadBalances,
    retired: Retired<u32>,
    epochs: Arc<Epochs>,
}

impl Lbs {
    /// Wraps the writer side.
    pub fn new(lbs: LoadBalances, epochs: Arc<Epochs>) -> Self {
        Lbs {
            lbs,
            retired: Retired::new(),
            epochs,
        }
    }

    /// The read side.
    pub fn table(&self) -> &Arc<LbTable> {
        self.lbs.table()
    }

    fn alloc(&mut self) -> Option<u32> {
        for i in self.retired.reclaim(&self.epochs) {
            self.lbs.free(i);
        }
        self.lbs.alloc()
    }

    fn retire(&mut self, i: u32) {
        self.retired.retire(&self.epochs, i);
    }
}

/// [`RouteTable::install_direct`]'s outcome: Ok((changed, the LPM's result)).
type DirectResult = Result<(bool, Result<(), RouteError>), RouteError>;

/// Why a route-table edit failed (its text only at the CLI and API edges, through
/// [`VnetError`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// The LPM refused the prefix: out of groups, or a bad length or value.
    #[error(transparent)]
    Lpm(#[from] LpmError),
    /// No load-balance object left for an ECMP route.
    #[error("load-balance table full")]
    LoadBalanceFull,
    /// As many tables as the FIB holds.
    #[error("too many tables (at most {0})")]
    TooManyTables(usize),
    /// Table 0 is never deleted.
    #[error("table 0 cannot be deleted")]
    DefaultTable,
    /// No table at this FIB index.
    #[error("no FIB index {0}")]
    NoFib(u32),
    /// No table with this id.
    #[error("no table {0}")]
    NoTable(u32),
}

impl From<RouteError> for VnetError {
    fn from(e: RouteError) -> Self {
        let text = e.to_string();
        match e {
            RouteError::Lpm(LpmError::BadLength(_) | LpmError::BadValue(_))
            | RouteError::DefaultTable => VnetError::Invalid(text),
            RouteError::NoFib(_) | RouteError::NoTable(_) => VnetError::NoTable(text),
            RouteError::Lpm(LpmError::Full)
            | RouteError::LoadBalanceFull
            | RouteError::TooManyTables(_) => VnetError::Full(text),
        }
    }
}

/// What a route forwards over: (adjacency, weight) paths, and a load-balance object to share.
type Effective = (PathList, Option<u32>);

/// Routes of one table of one family (main thread).
pub struct RouteTable<L: Lpm> {
    /// The LPM the best paths are installed in.
    pub lpm: L,
    epochs: Arc<Epochs>,
    /// Every route by (prefix, length).
    pub routes: BTreeMap<(L::Addr, u8), Route>,
    /// Load-balance object each ECMP route owns.
    pub route_lb: HashMap<(L::Addr, u8), u32>,
    /// Routes with recursive next hops, by next hop (what to re-resolve when a route changes).
    by_via: BTreeMap<L::Addr, BTreeSet<(L::Addr, u8)>>,
    // Load-balance objects to retire once the current change has propagated.
    unused_lbs: Vec<u32>,
    /// Drop entries of this table beside [`Lpm::DROP_SPECIALS`] (VPP's connected subnets'
    /// network and broadcast /32s), with how many addresses want each: in the LPM while
    /// no route has their prefix.
    drops: HashMap<(L::Addr, u8), u32>,
}

/// The LPM value for `paths`: the shared load-balance `share`, the single path's adjacency,
/// or the route's own load-balance object (allocated on first use) set to the paths. A route
/// that stops owning one queues it in `unused` for retirement.
fn lpm_value<K: Eq + std::hash::Hash>(
    route_lb: &mut HashMap<K, u32>,
    unused: &mut Vec<u32>,
    lbs: &mut Lbs,
    key: K,
    paths: &[(u32, u32)],
    share: Option<u32>,
) -> Result<u32, RouteError> {
    if share.is_some() || paths.len() == 1 {
        // Hashing costs: most tables own no load-balance object at all.
        if !route_lb.is_empty() {
            if let Some(own) = route_lb.remove(&key) {
                unused.push(own);
            }
        }
        return Ok(share.map_or(paths[0].0, |lb| LB_FLAG | lb));
    }
    let lb = match route_lb.get(&key) {
        Some(&l) => l,
        None => {
            let l = lbs.alloc().ok_or(RouteError::LoadBalanceFull)?;
            route_lb.insert(key, l);
            l
        }
    };
    lbs.lbs.set(lb, paths);
    Ok(LB_FLAG | lb)
}

impl<L: Lpm> RouteTable<L> {
    /// An empty table over `lpm`.
    pub fn new(mut lpm: L, epochs: Arc<Epochs>) -> Self {
        for &(p, l) in L::DROP_SPECIALS {
            // Adjacency 0 is the drop adjacency; an empty LPM has room for a few prefixes.
            let _ = lpm.insert(&epochs, p, l, 0);
        }
        RouteTable {
            lpm,
            epochs,
            routes: BTreeMap::new(),
            route_lb: HashMap::new(),
            by_via: BTreeMap::new(),
            unused_lbs: Vec::new(),
            drops: HashMap::new(),
        }
    }

    /// Whether `key` drops when no route has it.
    fn is_drop(&self, key: &(L::Addr, u8)) -> bool {
        L::DROP_SPECIALS.contains(key) || self.drops.contains_key(key)
    }

    /// Adds (`add`) or removes one want of the drop entry `p`/`len` (see `drops`).
    pub fn set_drop(&mut self, p: L::Addr, len: u8, add: bool) -> Result<(), RouteError> {
        let key = (L::mask(p, len), len);
        let was = self.is_drop(&key);
        let n = self.drops.entry(key).or_default();
        if add {
            *n += 1;
        } else {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.drops.remove(&key);
            }
        }
        if self.routes.contains_key(&key) {
            return Ok(());
        }
        match (was, self.is_drop(&key)) {
            (false, true) => Ok(self.lpm.insert(&self.epochs, key.0, key.1, 0)?),
            (true, false) => {
                self.lpm.remove(&self.epochs, key.0, key.1);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// One path of one source (None removes the source).
    pub fn set_route(
        &mut self,
        lbs: &mut Lbs,
        p: L::Addr,
        len: u8,
        src: Source,
        adj: Option<u32>,
    ) -> Result<(), RouteError> {
        let paths = adj.map(|a| smallvec![(a, 1)]).unwrap_or_default();
        self.set_paths(lbs, p, len, src, paths)
    }

    /// Replaces the paths of one source of a route (no paths: the source is removed) and
    /// installs the result.
    pub fn set_paths(
        &mut self,
        lbs: &mut Lbs,
        p: L::Addr,
        len: u8,
        src: Source,
        paths: PathList,
    ) -> Result<(), RouteError> {
        let key = (L::mask(p, len), len);
        let r = self.routes.entry(key).or_default();
        if paths.is_empty() {
            r.by_source.remove(&src);
        } else {
            r.by_source.insert(src, paths);
        }
        self.reinstall(lbs, key)
    }

    /// Installs `key` and propagates to the recursive routes it may cover, then retires the
    /// load-balance objects nothing points at any more.
    fn reinstall(&mut self, lbs: &mut Lbs, key: (L::Addr, u8)) -> Result<(), RouteError> {
        let r = self.install(lbs, key, 0);
        self.retire_unused(lbs);
        r
    }

    /// Retires the load-balance objects the last change left unused.
    fn retire_unused(&mut self, lbs: &mut Lbs) {
        if !self.unused_lbs.is_empty() {
            for lb in std::mem::take(&mut self.unused_lbs) {
                lbs.retire(lb);
            }
        }
    }

    /// The route covering `a` that a recursive path of `from` resolves through: the longest
    /// match other than `from` itself (None: unresolved, or a loop through `from`).
    fn cover(&self, a: L::Addr, from: (L::Addr, u8)) -> Option<(L::Addr, u8)> {
        (0..=L::BITS)
            .rev()
            .map(|l| (L::mask(a, l), l))
            .find(|k| self.routes.contains_key(k))
            .filter(|&k| k != from)
    }

    /// What `key` forwards over: its best source's paths, with recursive next hops resolved
    /// (static); and, when its only path is one recursive next hop through an ECMP route,
    /// that route's load-balance object to share.
    fn effective(&self, key: (L::Addr, u8)) -> Option<Effective> {
        let r = self.routes.get(&key)?;
        if let Some((&src, paths)) = r.by_source.iter().next() {
            if src != Source::Static {
                return Some((paths.clone(), None));
            }
        }
        let direct = r.by_source.get(&Source::Static);
        if direct.is_none() && r.vias.is_empty() {
            return None;
        }
        let mut out: PathList = direct.cloned().unwrap_or_default();
        let mut share = None;
        for &(nh, w) in &r.vias {
            let Some(c) = self.cover(L::from_u128(nh), key) else {
                continue;
            };
            let Some(cr) = self.routes.get(&c) else {
                continue;
            };
            // A next hop on a connected subnet is attached, not recursive: the CLI resolves
            // it to its neighbour when the route is added; one that becomes attached later
            // stays unresolved rather than glean for the wrong address.
            if matches!(
                cr.by_source.keys().next(),
                Some(Source::Connected) | Some(Source::Local)
            ) {
                continue;
            }
            if r.vias.len() == 1 && direct.is_none() {
                share = self
                    .route_lb
                    .get(&c)
                    .copied()
                    .or_else(|| (cr.value >= LB_FLAG).then_some(cr.value & (LB_FLAG - 1)));
            }
            out.extend(
                cr.installed
                    .iter()
                    .map(|&(a, cw)| (a, cw.saturating_mul(w))),
            );
        }
        if out.is_empty() {
            share = None;
            out.push((0, 1)); // unresolved: drop
        }
        Some((out, share))
    }

    /// Installs route `r` (= `key`) when it has no recursive next hops: it forwards over its
    /// best source's paths. None: it has recursive next hops or no paths (the slow path).
    /// Ok((changed, the LPM's result)); Err: no load-balance object (nothing changed). Takes
    /// the table's fields apart so a caller holding `r` needs no second map access.
    #[allow(clippy::too_many_arguments)]
    fn install_direct(
        r: &mut Route,
        key: (L::Addr, u8),
        route_lb: &mut HashMap<(L::Addr, u8), u32>,
        unused: &mut Vec<u32>,
        lbs: &mut Lbs,
        lpm: &mut L,
        epochs: &Epochs,
    ) -> Option<DirectResult> {
        if !r.vias.is_empty() {
            return None;
        }
        let paths = r.by_source.values().next()?.clone();
        Some(
            lpm_value(route_lb, unused, lbs, key, &paths, None).map(|value| {
                let changed = r.value != value || r.installed != paths;
                r.value = value;
                r.installed = paths;
                (
                    changed,
                    lpm.insert(epochs, key.0, key.1, value)
                        .map_err(RouteError::from),
                )
            }),
        )
    }

    fn install(&mut self, lbs: &mut Lbs, key: (L::Addr, u8), depth: u32) -> Result<(), RouteError> {
        // Fast path (every route without recursive next hops, e.g. `ip route add count`): it
        // forwards over its best source's paths, computed and stored with one map access.
        if let Some(r) = self.routes.get_mut(&key) {
            if let Some(res) = Self::install_direct(
                r,
                key,
                &mut self.route_lb,
                &mut self.unused_lbs,
                lbs,
                &mut self.lpm,
                &self.epochs,
            ) {
                return self.after_direct(lbs, key, depth, res);
            }
        }
        // What was installed, moved out rather than cloned (`effective` never reads the
        // route's own installed paths: a route is never its own cover).
        let before = self
            .routes
            .get_mut(&key)
            .map(|r| (r.value, std::mem::take(&mut r.installed)));
        let (res, changed) = match self.effective(key) {
            None => {
                self.routes.remove(&key);
                if let Some(lb) = self.route_lb.remove(&key) {
                    self.unused_lbs.push(lb);
                }
                let res = if self.is_drop(&key) {
                    // Back to the special entry: drop.
                    self.lpm.insert(&self.epochs, key.0, key.1, 0)
                } else {
                    self.lpm.remove(&self.epochs, key.0, key.1);
                    Ok(())
                };
                (res.map_err(RouteError::from), before.is_some())
            }
            Some((paths, share)) => {
                let value = match lpm_value(
                    &mut self.route_lb,
                    &mut self.unused_lbs,
                    lbs,
                    key,
                    &paths,
                    share,
                ) {
                    Ok(v) => v,
                    Err(e) => {
                        // Unchanged: put back what was installed.
                        if let (Some(r), Some((v, p))) = (self.routes.get_mut(&key), before) {
                            r.value = v;
                            r.installed = p;
                        }
                        return Err(e);
                    }
                };
                let changed = before.is_none_or(|(v, p)| v != value || p != paths);
                if let Some(r) = self.routes.get_mut(&key) {
                    r.value = value;
                    r.installed = paths;
                }
                let res = self.lpm.insert(&self.epochs, key.0, key.1, value);
                (res.map_err(RouteError::from), changed)
            }
        };
        self.propagate(lbs, key, depth, changed)?;
        res
    }

    /// After [`Self::install_direct`]: propagates a change and returns the LPM's result.
    fn after_direct(
        &mut self,
        lbs: &mut Lbs,
        key: (L::Addr, u8),
        depth: u32,
        res: DirectResult,
    ) -> Result<(), RouteError> {
        let (changed, res) = res?;
        self.propagate(lbs, key, depth, changed)?;
        res
    }

    /// After `key` changed: re-installs the recursive routes whose next hop it may cover.
    fn propagate(
        &mut self,
        lbs: &mut Lbs,
        key: (L::Addr, u8),
        depth: u32,
        changed: bool,
    ) -> Result<(), RouteError> {
        if changed && depth < MAX_RECURSION && !self.by_via.is_empty() {
            // Recursive routes whose next hop this prefix covers may resolve differently now.
            let hi = L::mask(key.0, key.1).into() | host_mask(L::BITS, key.1);
            let deps: Vec<(L::Addr, u8)> = self
                .by_via
                .range(key.0..=L::from_u128(hi))
                .flat_map(|(_, ks)| ks.iter().copied())
                .filter(|&k| k != key)
                .collect();
            for d in deps {
                self.install(lbs, d, depth + 1)?;
            }
        }
        Ok(())
    }

    /// The adjacency a lookup of `a` uses (an ECMP route: its first bucket's).
    pub fn lookup_adj(&self, lbs: &Lbs, a: L::Addr) -> Option<u32> {
        self.lpm.lookup(a).map(|v| adj_for(lbs.table(), v, 0))
    }

    /// `ip route add|del` on one prefix: with `del`, removes the given paths (all without
    /// paths); otherwise adds the paths to the static ones (ECMP, as VPP does) or makes the
    /// route a drop route. Err(None) = deleting a route that has no static paths.
    pub fn edit_static(
        &mut self,
        lbs: &mut Lbs,
        p: L::Addr,
        len: u8,
        del: bool,
        drop: bool,
        hops: &[(Hop<L::Addr>, u32)],
    ) -> Result<(), Option<RouteError>> {
        let key = (L::mask(p, len), len);
        // The static paths and next hops are moved out and written back below (no copies);
        // when there are none, nothing was moved.
        // One map access: a route is created here if needed (and removed again when a `del`
        // finds nothing to delete).
        let r = self.routes.entry(key).or_default();
        let mut direct = r.by_source.remove(&Source::Static).unwrap_or_default();
        let mut vias = std::mem::take(&mut r.vias);
        let old_vias = vias.clone();
        if del {
            if direct.is_empty() && vias.is_empty() {
                if r.by_source.is_empty() {
                    self.routes.remove(&key);
                }
                return Err(None);
            }
            if hops.is_empty() {
                direct.clear();
                vias.clear();
            }
            for &(h, _) in hops {
                match h {
                    Hop::Adj(a) => direct.retain(|c| c.0 != a),
                    Hop::Via(nh) => vias.retain(|c| c.0 != nh.into()),
                }
            }
        } else if drop {
            direct = smallvec![(0, 1)];
            vias.clear();
        } else {
            direct.retain(|c| c.0 != 0);
            for &(h, w) in hops {
                match h {
                    Hop::Adj(a) => match direct.iter_mut().find(|c| c.0 == a) {
                        Some(c) => c.1 = w,
                        None => direct.push((a, w)),
                    },
                    Hop::Via(nh) => match vias.iter_mut().find(|c| c.0 == nh.into()) {
                        Some(c) => c.1 = w,
                        None => vias.push((nh.into(), w)),
                    },
                }
            }
        }
        let new_vias = (!vias.is_empty()).then(|| vias.clone());
        r.vias = vias;
        if !direct.is_empty() {
            r.by_source.insert(Source::Static, direct);
        }
        if !old_vias.is_empty() || new_vias.is_some() {
            self.index_vias(key, &old_vias, new_vias.as_deref().unwrap_or_default());
        } else if let Some(res) = Self::install_direct(
            r,
            key,
            &mut self.route_lb,
            &mut self.unused_lbs,
            lbs,
            &mut self.lpm,
            &self.epochs,
        ) {
            // No recursive next hops before or after: installed through `r`, without looking
            // the route up again.
            let res = self.after_direct(lbs, key, 0, res);
            self.retire_unused(lbs);
            return res.map_err(Some);
        }
        self.reinstall(lbs, key).map_err(Some)
    }

    /// Moves `key` from the recursive-route index of its `old` next hops to that of `new`.
    fn index_vias(&mut self, key: (L::Addr, u8), old: &[(u128, u32)], new: &[(u128, u32)]) {
        for &(nh, _) in old {
            let nh = L::from_u128(nh);
            if let Some(s) = self.by_via.get_mut(&nh) {
                s.remove(&key);
                if s.is_empty() {
                    self.by_via.remove(&nh);
                }
            }
        }
        for &(nh, _) in new {
            self.by_via.entry(L::from_u128(nh)).or_default().insert(key);
        }
    }

    /// Removes the static paths through any of `adjs` (an interface being deleted).
    pub fn drop_static_paths(&mut self, lbs: &mut Lbs, adjs: &[u32]) {
        let keys: Vec<(L::Addr, u8)> = self.routes.keys().copied().collect();
        for (p, l) in keys {
            let paths = self
                .routes
                .get(&(p, l))
                .and_then(|r| r.by_source.get(&Source::Static))
                .cloned();
            if let Some(paths) = paths {
                if paths.iter().any(|x| adjs.contains(&x.0)) {
                    let kept: PathList =
                        paths.into_iter().filter(|x| !adjs.contains(&x.0)).collect();
                    let _ = self.set_paths(lbs, p, l, Source::Static, kept);
                }
            }
        }
    }

    /// Removes every route (a table being deleted).
    fn clear(&mut self, lbs: &mut Lbs) {
        let keys: Vec<(L::Addr, u8)> = self.routes.keys().copied().collect();
        self.by_via.clear();
        for k in keys {
            if let Some(r) = self.routes.get_mut(&k) {
                r.by_source.clear();
                r.vias.clear();
            }
            let _ = self.reinstall(lbs, k);
        }
        for (k, _) in std::mem::take(&mut self.drops) {
            if !L::DROP_SPECIALS.contains(&k) {
                self.lpm.remove(&self.epochs, k.0, k.1);
            }
        }
    }

    /// `show ip[6] fib` body in VPP's format (from after `f.after`, at most `f.budget` routes:
    /// returns the last entry shown when it stopped early): the routes selected by `f.filter` ((addr, host
    /// length) = the longest match of addr; (prefix, len) = exactly that prefix; None = all)
    /// merged with the special entries VPP creates in every table (`f.specials`, shown where
    /// no route has their prefix), in (address, length) order; each as
    /// `<prefix>` / `  unicast-ip4-chain` / `  [@0]: dpo-load-balance: [...]` / one
    /// `    [<bucket>] <dpo>` line per load-balance bucket. With `f.detail`, the route's
    /// sources and recursive next hops follow the prefix line.
    pub fn show(&self, out: &mut String, f: &ShowFib<'_, L::Addr>) -> Option<(L::Addr, u8)> {
        let mut specials: Vec<&((L::Addr, u8), String)> = f
            .specials
            .iter()
            .filter(|(k, _)| !self.routes.contains_key(k))
            .collect();
        specials.sort_by_key(|(k, _)| *k);
        let wanted = |k: (L::Addr, u8)| {
            f.filter.is_none_or(|(p, l)| k == (L::mask(p, l), l)) && f.after.is_none_or(|a| k > a)
        };
        if let Some((a, _)) = f.filter.filter(|&(_, l)| l == L::BITS) {
            // The longest match of `a` among routes and special entries.
            let best = (0..=L::BITS)
                .rev()
                .map(|m| (L::mask(a, m), m))
                .find(|k| self.routes.contains_key(k) || specials.iter().any(|(s, _)| s == k));
            match best.and_then(|k| self.routes.get_key_value(&k)) {
                Some((k, r)) => self.show_route(out, f, *k, r),
                None => {
                    if let Some((k, d)) = best.and_then(|k| specials.iter().find(|(s, _)| *s == k))
                    {
                        show_special(out, f, *k, d);
                    }
                }
            }
            return None;
        }
        let mut sp = specials.into_iter().filter(|(k, _)| wanted(*k)).peekable();
        let routes = match (f.filter, f.after) {
            (Some((p, l)), _) => {
                let k = (L::mask(p, l), l);
                self.routes.range(k..=k)
            }
            (None, Some(a)) => self
                .routes
                .range((std::ops::Bound::Excluded(a), std::ops::Bound::Unbounded)),
            (None, None) => self.routes.range(..),
        };
        // Stop after `budget` routes: the last entry shown is where to go on.
        let (mut left, mut last) = (f.budget, None);
        for (&k, r) in routes {
            if left == 0 {
                return last;
            }
            while let Some((s, d)) = sp.next_if(|(s, _)| *s < k) {
                show_special(out, f, *s, d);
            }
            self.show_route(out, f, k, r);
            (left, last) = (left - 1, Some(k));
        }
        for (s, d) in sp {
            show_special(out, f, *s, d);
        }
        None
    }

    /// One route of [`RouteTable::show`].
    fn show_route(&self, out: &mut String, f: &ShowFib<'_, L::Addr>, k: (L::Addr, u8), r: &Route) {
        let (p, l) = k;
        let _ = writeln!(out, "{}", (f.prefix)(p, l));
        if f.detail {
            let srcs: Vec<&str> = r.sources().iter().map(|s| s.as_str()).collect();
            let _ = writeln!(out, "  source: {}", srcs.join(", "));
            for &(nh, w) in &r.vias {
                let a = (f.prefix)(L::from_u128(nh), L::BITS);
                let a = a.split('/').next().unwrap_or_default();
                let wt = if w != 1 {
                    format!(" weight {w}")
                } else {
                    String::new()
                };
                let _ = writeln!(out, "    via {a} recursive{wt}");
            }
        }
        let buckets = if r.installed.len() > 1 {
            sluice_fib::lb::buckets_for(&r.installed)
        } else {
            vec![r.installed.first().map_or(0, |x| x.0)]
        };
        // The load-balance index: the shared object of an ECMP route, else the adjacency.
        let index = if r.value >= LB_FLAG {
            r.value & (LB_FLAG - 1)
        } else {
            r.value
        };
        lb_line(out, f.proto, index, buckets.len());
        for (b, &ai) in buckets.iter().enumerate() {
            let _ = writeln!(out, "    [{b}] {}", (f.dpo)(ai, p, l));
        }
    }

    /// `show ip[6] fib summary` body: route counts by prefix length.
    pub fn summary(&self, out: &mut String) {
        let mut by_len: BTreeMap<u8, usize> = BTreeMap::new();
        for &(_, l) in self.routes.keys() {
            *by_len.entry(l).or_default() += 1;
        }
        let _ = writeln!(out, "    Prefix length         Count");
        for (l, n) in by_len.iter().rev() {
            let _ = writeln!(out, "{l:>15}{n:>16}");
        }
    }
}

/// The low `bits - len` bits set (the host part of a /len prefix).
fn host_mask(bits: u8, len: u8) -> u128 {
    let h = bits.saturating_sub(len) as u32;
    if h >= 128 {
        u128::MAX
    } else {
        (1u128 << h) - 1
    }
}

/// Where a streamed `show ip[6] fib` stopped ([`Vrfs::show_tables`]).
#[derive(Clone, Copy, Debug)]
pub struct FibCursor<A> {
    /// The FIB index to go on in.
    pub fib: u32,
    /// The last entry shown in it.
    pub after: Option<(A, u8)>,
    /// Something was shown.
    pub started: bool,
    /// Everything was shown.
    pub done: bool,
}

impl<A> Default for FibCursor<A> {
    fn default() -> Self {
        FibCursor {
            fib: 0,
            after: None,
            started: false,
            done: false,
        }
    }
}

/// What [`RouteTable::show`] renders and how.
pub struct ShowFib<'a, A> {
    /// `ip4` or `ip6` (the chain and load-balance protocol).
    pub proto: &'static str,
    /// Routes to show (see [`RouteTable::show`]).
    pub filter: Option<(A, u8)>,
    /// Sources and recursive next hops too (`detail`, or a prefix asked for).
    pub detail: bool,
    /// VPP's special entries of this table: prefix and the DPO text they forward to.
    pub specials: Vec<((A, u8), String)>,
    /// Start after this entry (a streamed reply going on).
    pub after: Option<(A, u8)>,
    /// Most routes to show (`usize::MAX`: all).
    pub budget: usize,
    /// A prefix as text.
    pub prefix: &'a dyn Fn(A, u8) -> String,
    /// The DPO of a bucket: adjacency index and the route's prefix → `[@5]: ipv4 via ...`.
    pub dpo: &'a dyn Fn(u32, A, u8) -> String,
}

/// `  unicast-ip4-chain` and the load-balance line of a `show ip[6] fib` entry (no per-route
/// counters: `to:[0:0]`).
fn lb_line(out: &mut String, proto: &str, index: u32, buckets: usize) {
    let _ = writeln!(
        out,
        "  unicast-{proto}-chain\n  [@0]: dpo-load-balance: [proto:{proto} index:{index} buckets:{buckets} uRPF:{index} to:[0:0]]"
    );
}

/// A special entry of [`RouteTable::show`].
fn show_special<A: Copy>(out: &mut String, f: &ShowFib<'_, A>, (p, l): (A, u8), dpo: &str) {
    let _ = writeln!(out, "{}", (f.prefix)(p, l));
    if f.detail {
        let _ = writeln!(out, "  source: special");
    }
    lb_line(out, f.proto, 0, 1);
    let _ = writeln!(out, "    [0] {dpo}");
}

/// One table: its user-facing id (None: deleted, the index free for reuse) and routes.
pub struct Vrf<L: Lpm> {
    /// Table id (`ip table add <id>`); table 0 is the default.
    pub id: Option<u32>,
    /// The routes.
    pub rt: RouteTable<L>,
}

/// Every table of a family (main thread): FIB index → table, the shared load-balance
/// objects, and the data plane's [`FibSlots`].
pub struct Vrfs<L: Lpm> {
    tables: Vec<Vrf<L>>,
    /// Load-balance objects (all tables).
    pub lbs: Lbs,
    slots: Arc<FibSlots<L::Table>>,
    epochs: Arc<Epochs>,
    events: Option<Arc<EventLog>>,
}

impl<L: Lpm> Vrfs<L> {
    /// Table 0 over `lpm0` (already published in `slots` at index 0).
    pub fn new(
        lpm0: L,
        lbs: LoadBalances,
        epochs: Arc<Epochs>,
        slots: Arc<FibSlots<L::Table>>,
    ) -> Self {
        slots.publish(0, lpm0.read_side());
        Vrfs {
            tables: vec![Vrf {
                id: Some(0),
                rt: RouteTable::new(lpm0, epochs.clone()),
            }],
            lbs: Lbs::new(lbs, epochs.clone()),
            slots,
            epochs,
            events: None,
        }
    }

    /// Records route additions and removals in `log` (while it is enabled).
    pub fn set_events(&mut self, log: Arc<EventLog>) {
        self.events = Some(log);
    }

    /// The address of a prefix of this family.
    pub fn ip(a: L::Addr) -> std::net::IpAddr {
        let v: u128 = a.into();
        if L::BITS == 32 {
            std::net::IpAddr::V4(std::net::Ipv4Addr::from(v as u32))
        } else {
            std::net::IpAddr::V6(std::net::Ipv6Addr::from(v))
        }
    }

    /// The event log, when it records.
    fn recording(&self) -> Option<&Arc<EventLog>> {
        self.events.as_ref().filter(|l| l.enabled())
    }

    /// Records that `key` of table `fib` appeared or disappeared (`had`: it existed before).
    fn note(&self, fib: u32, key: (L::Addr, u8), had: bool) {
        let Some(log) = self.recording() else { return };
        let has = self.rt(fib).is_some_and(|rt| rt.routes.contains_key(&key));
        if had != has {
            log.push(VnetEvent::Route {
                table_id: self.id_of(fib).unwrap_or(0),
                addr: Self::ip(key.0),
                len: key.1,
                added: has,
            });
        }
    }

    fn has(&self, fib: u32, key: (L::Addr, u8)) -> bool {
        self.recording().is_some() && self.rt(fib).is_some_and(|rt| rt.routes.contains_key(&key))
    }

    /// The FIB index of table `id`.
    pub fn fib_of(&self, id: u32) -> Option<u32> {
        self.tables
            .iter()
            .position(|t| t.id == Some(id))
            .map(|i| i as u32)
    }

    /// The table id of FIB index `fib`.
    pub fn id_of(&self, fib: u32) -> Option<u32> {
        self.tables.get(fib as usize).and_then(|t| t.id)
    }

    /// Creates table `id` (no-op if it exists); its FIB index.
    pub fn add_table(&mut self, id: u32) -> Result<u32, RouteError> {
        if let Some(f) = self.fib_of(id) {
            return Ok(f);
        }
        if let Some(f) = self.tables.iter().position(|t| t.id.is_none()) {
            self.tables[f].id = Some(id);
            return Ok(f as u32);
        }
        let f = self.tables.len();
        if f >= MAX_FIBS {
            return Err(RouteError::TooManyTables(MAX_FIBS));
        }
        let lpm = L::create();
        self.slots.publish(f as u32, lpm.read_side());
        self.tables.push(Vrf {
            id: Some(id),
            rt: RouteTable::new(lpm, self.epochs.clone()),
        });
        Ok(f as u32)
    }

    /// Deletes table `id` and its routes (table 0 cannot be deleted).
    pub fn del_table(&mut self, id: u32) -> Result<(), RouteError> {
        if id == 0 {
            return Err(RouteError::DefaultTable);
        }
        let f = self.fib_of(id).ok_or(RouteError::NoTable(id))?;
        let Vrf { rt, id } = &mut self.tables[f as usize];
        rt.clear(&mut self.lbs);
        *id = None;
        Ok(())
    }

    /// The routes of FIB index `fib`.
    pub fn rt(&self, fib: u32) -> Option<&RouteTable<L>> {
        self.tables
            .get(fib as usize)
            .filter(|t| t.id.is_some())
            .map(|t| &t.rt)
    }

    /// The live tables: (id, FIB index, routes).
    pub fn iter(&self) -> impl Iterator<Item = (u32, u32, &RouteTable<L>)> {
        self.tables
            .iter()
            .enumerate()
            .filter_map(|(f, t)| t.id.map(|id| (id, f as u32, &t.rt)))
    }

    fn rt_mut(&mut self, fib: u32) -> Result<(&mut RouteTable<L>, &mut Lbs), RouteError> {
        match self.tables.get_mut(fib as usize) {
            Some(t) if t.id.is_some() => Ok((&mut t.rt, &mut self.lbs)),
            _ => Err(RouteError::NoFib(fib)),
        }
    }

    /// [`RouteTable::set_route`] in table `fib`.
    pub fn set_route(
        &mut self,
        fib: u32,
        p: L::Addr,
        len: u8,
        src: Source,
        adj: Option<u32>,
    ) -> Result<(), RouteError> {
        let key = (L::mask(p, len), len);
        let had = self.has(fib, key);
        let (rt, lbs) = self.rt_mut(fib)?;
        let r = rt.set_route(lbs, p, len, src, adj);
        self.note(fib, key, had);
        r
    }

    /// [`RouteTable::set_drop`] in table `fib`.
    pub fn set_drop(&mut self, fib: u32, p: L::Addr, len: u8, add: bool) -> Result<(), RouteError> {
        self.rt_mut(fib)?.0.set_drop(p, len, add)
    }

    /// `ip route [add|del] [count n] <prefix>/<len> <paths>` in table `fib`: `nth(k)` is the
    /// k-th prefix (None: past the address space), `w` the prefix as typed (for errors).
    /// Deleting a single route that has no static paths is an error; with a count, such
    /// prefixes are skipped. `stop` is checked every 4096 routes: true ends the loop with an
    /// error saying how far it got.
    #[allow(clippy::too_many_arguments)]
    pub fn apply_static(
        &mut self,
        fib: u32,
        count: u32,
        nth: impl Fn(u32) -> Option<L::Addr>,
        len: u8,
        del: bool,
        drop: bool,
        hops: &[(Hop<L::Addr>, u32)],
        w: &dyn std::fmt::Display,
        stop: &dyn Fn() -> bool,
    ) -> VnetResult {
        self.rt_mut(fib)?;
        for k in 0..count {
            if k % 4096 == 4095 && stop() {
                return Err(VnetError::System(format!(
                    "interrupted after {k} of {count} routes"
                )));
            }
            let q = nth(k).ok_or_else(|| {
                VnetError::invalid(format!(
                    "count {count} runs past the end of the address space"
                ))
            })?;
            let key = (L::mask(q, len), len);
            let had = self.has(fib, key);
            let (rt, lbs) = self.rt_mut(fib)?;
            match rt.edit_static(lbs, q, len, del, drop, hops) {
                Ok(()) => {}
                Err(None) if count == 1 => {
                    return Err(VnetError::NotFound(format!("no route `{w}'")));
                }
                Err(None) => {}
                Err(Some(e)) => return Err(e.into()),
            }
            self.note(fib, key, had);
        }
        Ok(())
    }

    /// The adjacency a lookup of `a` in table `fib` uses.
    pub fn lookup_adj(&self, fib: u32, a: L::Addr) -> Option<u32> {
        self.rt(fib)?.lookup_adj(&self.lbs, a)
    }

    /// Removes the static paths through any of `adjs` in every table.
    pub fn drop_static_paths(&mut self, adjs: &[u32]) {
        for t in self.tables.iter_mut().filter(|t| t.id.is_some()) {
            t.rt.drop_static_paths(&mut self.lbs, adjs);
        }
    }

    /// Routes in every table.
    pub fn route_count(&self) -> usize {
        self.iter().map(|(_, _, rt)| rt.routes.len()).sum()
    }

    /// `show ip[6] fib [table <id>] ...`: the header line of each selected table (by
    /// `header(id, fib, rt)`) followed by `body(fib, rt, after, budget)` (which returns where it
    /// stopped, see [`RouteTable::show`]), going on from `cur` for at most `budget` routes;
    /// `cur.done` once every table is shown.
    pub fn show_tables(
        &self,
        table: Option<u32>,
        cur: &mut FibCursor<L::Addr>,
        budget: usize,
        mut header: impl FnMut(&mut String, u32, u32, &RouteTable<L>),
        mut body: impl FnMut(
            &mut String,
            u32,
            &RouteTable<L>,
            Option<(L::Addr, u8)>,
            usize,
        ) -> Option<(L::Addr, u8)>,
    ) -> Result<String, CliError> {
        let mut out = String::new();
        if let Some(id) = table {
            if self.fib_of(id).is_none() {
                return Err(CliError::new(format!("no table {id}")));
            }
        }
        for (id, fib, rt) in self.iter() {
            if table.is_some_and(|t| t != id) || (cur.started && fib < cur.fib) {
                continue;
            }
            let going_on = cur.started && fib == cur.fib && cur.after.is_some();
            if !going_on {
                header(&mut out, id, fib, rt);
            }
            let after = if going_on { cur.after } else { None };
            if let Some(k) = body(&mut out, fib, rt, after, budget) {
                *cur = FibCursor {
                    fib,
                    after: Some(k),
                    started: true,
                    done: false,
                };
                return Ok(out);
            }
            // This table is done: a later call starts at the next one.
            *cur = FibCursor {
                fib: fib + 1,
                after: None,
                started: true,
                done: false,
            };
        }
        cur.done = true;
        Ok(out)
    }
}

/// Parses `<address>[/<len>]` of a family whose addresses parse as `T` (`Ipv4Addr`,
/// `Ipv6Addr`) and are `bits` long; without a length, a host prefix. Errors name the word.
pub fn parse_prefix<T: std::str::FromStr>(
    w: &str,
    bits: u8,
    family: &str,
) -> Result<(T, u8), CliError> {
    let (a, l) = match w.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (w, None),
    };
    let addr: T = a
        .parse()
        .map_err(|_| CliError::new(format!("expected {family} prefix, got `{w}'")))?;
    let len = match l {
        Some(l) => l
            .parse::<u8>()
            .ok()
            .filter(|&l| l <= bits)
            .ok_or_else(|| CliError::new(format!("bad prefix length in `{w}'")))?,
        None => bits,
    };
    Ok((addr, len))
}

/// Parses an address of a family (`T` = `Ipv4Addr` or `Ipv6Addr`); errors name the word.
pub fn parse_addr<T: std::str::FromStr>(w: &str, family: &str) -> Result<T, CliError> {
    w.parse::<T>()
        .map_err(|_| CliError::new(format!("expected {family} address, got `{w}'")))
}

/// The error for a table id that does not exist.
pub fn no_table(id: u32) -> VnetError {
    VnetError::NoTable(format!(
        "no table {id} (create it with `ip table add {id}')"
    ))
}

/// Parses `ip[6] table [add|del] <id>`: (is_add, id).
pub fn parse_table(a: &mut Args) -> Result<(bool, u32), CliError> {
    let del = a.keyword("del");
    if !del {
        a.keyword("add");
    }
    let id = a.u32("table id")?;
    a.finish()?;
    Ok((!del, id))
}

/// Creates (no-op if it exists) or deletes table `id` of a family; `bound` maps FIB indices
/// to an interface routed in them (a table in use cannot be deleted).
pub fn table_add_del<L: Lpm>(
    vrfs: &mut Vrfs<L>,
    bound: &BTreeMap<u32, String>,
    id: u32,
    is_add: bool,
) -> VnetResult {
    if is_add {
        return Ok(vrfs.add_table(id).map(|_| ())?);
    }
    let fib = vrfs.fib_of(id).ok_or_else(|| no_table(id))?;
    if let Some(n) = bound.get(&fib).filter(|_| fib != 0) {
        return Err(VnetError::InUse(format!("table {id} is in use by {n}")));
    }
    Ok(vrfs.del_table(id)?)
}

/// A parsed `show ip[6] fib [table <id>] [<prefix>] [summary]`.
#[derive(Clone, Copy, Debug)]
pub struct ShowArgs<A> {
    /// Only this table.
    pub table: Option<u32>,
    /// Only routes matching this prefix (see [`RouteTable::show`]).
    pub filter: Option<(A, u8)>,
    /// Counts by prefix length instead of routes.
    pub summary: bool,
    /// `detail`: sources and recursive next hops too (always with a prefix).
    pub detail: bool,
}

/// One piece of `show ip[6] fib`: at most `budget` routes from the cursor.
pub type ShowPart<A> =
    fn(&mut Vlib, &ShowArgs<A>, &mut FibCursor<A>, usize) -> Result<String, CliError>;

/// Runs `show ip[6] fib` through `part` (one piece of at most `budget` routes from a cursor):
/// in one piece, or — when the CLI server can stream the reply — the first piece now and the
/// rest from a producer the server calls as the client reads ([`sluice_graph::reply`]).
pub fn stream_show<A: Copy + Send + 'static>(
    vm: &mut Vlib,
    sa: ShowArgs<A>,
    part: ShowPart<A>,
) -> Result<String, CliError> {
    let mut cur = FibCursor::default();
    if !sluice_graph::reply::allowed(vm) {
        return part(vm, &sa, &mut cur, usize::MAX);
    }
    let first = part(vm, &sa, &mut cur, crate::ip4::FIB_CHUNK)?;
    if !cur.done {
        sluice_graph::reply::set_producer(
            vm,
            Box::new(move |vm| {
                if cur.done {
                    return None;
                }
                // A table deleted meanwhile ends the reply with what was shown.
                part(vm, &sa, &mut cur, crate::ip4::FIB_CHUNK).ok()
            }),
        );
    }
    Ok(first)
}

/// Parses `show ip[6] fib [table <id>] [<prefix>] [summary]`.
pub fn parse_show_args<A>(
    a: &mut Args,
    parse_prefix: impl Fn(&str) -> Result<(A, u8), CliError>,
) -> Result<ShowArgs<A>, CliError> {
    let mut s = ShowArgs {
        table: None,
        filter: None,
        summary: false,
        detail: false,
    };
    while !a.is_empty() {
        if a.keyword("summary") {
            s.summary = true;
        } else if a.keyword("detail") {
            s.detail = true;
        } else if a.keyword("table") {
            s.table = Some(a.u32("table id")?);
        } else {
            let w = a.word("prefix")?;
            s.filter = Some(parse_prefix(&w)?);
        }
    }
    Ok(s)
}

/// A parsed `ip route` command's paths: (next hop, interface, weight), `drop`, and the
/// table (`table <id>`, 0 when not given).
pub struct RoutePaths<A> {
    /// `via <nh> [<interface>] [weight <w>]`, in order.
    pub paths: Vec<(A, Option<SwIfIndex>, u32)>,
    /// `drop` / `via drop`.
    pub drop: bool,
    /// `table <id>`.
    pub table: u32,
    /// `via <interface> [weight <w>]`: attached paths without a next-hop address.
    pub via_if: Vec<(SwIfIndex, u32)>,
    /// `via local`: the router receives the packets.
    pub local: bool,
    /// `resolve-via-host`: a recursive next hop must be covered by a host route.
    pub resolve_via_host: bool,
    /// `resolve-via-attached` (`resolve-via-connected`): a recursive next hop must be on a
    /// connected subnet.
    pub resolve_via_attached: bool,
    /// `del` / `add` after the prefix (VPP takes them anywhere): `Some(true)` = delete.
    pub del: Option<bool>,
    /// `count <n>` after the prefix.
    pub count: Option<u32>,
}

impl<A> Default for RoutePaths<A> {
    fn default() -> Self {
        RoutePaths {
            paths: Vec::new(),
            drop: false,
            table: 0,
            via_if: Vec::new(),
            local: false,
            resolve_via_host: false,
            resolve_via_attached: false,
            del: None,
            count: None,
        }
    }
}

impl<A> RoutePaths<A> {
    /// Whether the command names any path (a next hop, an interface, `local` or `drop`).
    pub fn has_path(&self) -> bool {
        !self.paths.is_empty() || !self.via_if.is_empty() || self.local || self.drop
    }
}

/// Most routes one `ip route add|del count <n>` may touch.
pub const MAX_ROUTE_COUNT: u32 = 1 << 22;

/// Memory one route is assumed to need (route entry, FIB leaves, load-balance slot): the
/// daemon's RSS grew by 219 bytes per route adding 1M /32s (release build; 403 before
/// routes kept their paths inline), with room for the worst case (ECMP, recursive).
pub const ROUTE_BYTES_ESTIMATE: u64 = 1024;

/// `MemAvailable` from `/proc/meminfo`, in bytes.
fn mem_available() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let l = s.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = l.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Refuses a `count` above [`MAX_ROUTE_COUNT`], or one whose estimated memory
/// ([`ROUTE_BYTES_ESTIMATE`] per route) exceeds half of the memory available now.
pub fn check_route_count(count: u32, del: bool) -> Result<(), CliError> {
    check_route_count_with(count, del, mem_available())
}

/// [`check_route_count`] against `avail` bytes available (`None`: unknown, not checked).
fn check_route_count_with(count: u32, del: bool, avail: Option<u64>) -> Result<(), CliError> {
    if count > MAX_ROUTE_COUNT {
        return Err(CliError::new(format!(
            "count {count}: at most {MAX_ROUTE_COUNT} routes per command"
        )));
    }
    if !del {
        let need = count as u64 * ROUTE_BYTES_ESTIMATE;
        if let Some(avail) = avail {
            if need > avail / 2 {
                return Err(CliError::new(format!(
                    "count {count}: about {} MiB needed, {} MiB available (refusing more than half)",
                    need >> 20,
                    avail >> 20
                )));
            }
        }
    }
    Ok(())
}

/// Parses the path part of `ip route` (after the prefix), next hops with `parse_nh`.
/// `table` is the table id given before the prefix, if any.
pub fn parse_paths<A>(
    vm: &mut Vlib,
    a: &mut Args,
    table: Option<u32>,
    parse_nh: impl Fn(&str) -> Result<A, CliError>,
) -> Result<RoutePaths<A>, CliError> {
    let mut rp = RoutePaths {
        paths: Vec::new(),
        drop: false,
        table: 0,
        via_if: Vec::new(),
        local: false,
        resolve_via_host: false,
        resolve_via_attached: false,
        del: None,
        count: None,
    };
    let mut table = table;
    // What `weight` applies to: the last next hop (false) or the last `via <interface>`.
    let mut last_is_if = false;
    while !a.is_empty() {
        if a.keyword("via") {
            if a.keyword("drop") {
                rp.drop = true;
                continue;
            }
            if a.keyword("local") {
                rp.local = true;
                continue;
            }
            let t = a.word("next hop")?;
            match parse_nh(&t) {
                Ok(nh) => {
                    rp.paths.push((nh, None, 1));
                    last_is_if = false;
                }
                // `via <interface>`: an attached path (VPP's interface route).
                Err(e) => match vm.ext_mut::<crate::interface::Interfaces>().find(&t) {
                    Some(i) => {
                        rp.via_if.push((i, 1));
                        last_is_if = true;
                    }
                    None => return Err(e),
                },
            }
        } else if a.keyword("drop") {
            rp.drop = true;
        } else if a.keyword("table") {
            table = Some(a.u32("table id")?);
        } else if a.keyword("del") {
            rp.del = Some(true);
        } else if a.keyword("add") {
            rp.del = Some(false);
        } else if a.keyword("count") {
            rp.count = Some(a.u32("count")?.max(1));
        } else if a.keyword("resolve-via-host") {
            rp.resolve_via_host = true;
        } else if a.keyword("resolve-via-attached") || a.keyword("resolve-via-connected") {
            rp.resolve_via_attached = true;
        } else if a.keyword("weight") {
            let wt = a.u32("weight")?;
            if wt == 0 {
                return Err(CliError::new("weight must be at least 1"));
            }
            let last = if last_is_if {
                rp.via_if.last_mut().map(|l| &mut l.1)
            } else {
                rp.paths.last_mut().map(|l| &mut l.2)
            };
            match last {
                Some(l) => *l = wt,
                None => return Err(CliError::new("`weight' must follow `via <next-hop>'")),
            }
        } else if !last_is_if && rp.paths.last().is_some_and(|l| l.1.is_none()) {
            let i = crate::cli::interface_arg(vm, a)?;
            if let Some(last) = rp.paths.last_mut() {
                last.1 = Some(i);
            }
        } else {
            a.finish()?;
        }
    }
    rp.table = table.unwrap_or(0);
    Ok(rp)
}

/// `resolve-via-host` / `resolve-via-attached` for a recursive next hop `nh` in table `fib`:
/// checked when the route is configured (VPP also re-checks when the covering routes
/// change; Sluice does not).
pub fn check_resolve_via<A, L: Lpm>(
    paths: &RoutePaths<A>,
    vrfs: &Vrfs<L>,
    fib: u32,
    nh: L::Addr,
    host_len: u8,
) -> crate::error::VnetResult {
    if paths.resolve_via_attached {
        return Err(crate::error::VnetError::invalid(format!(
            "next hop {} is not on a connected subnet (resolve-via-attached)",
            fmt_addr::<L>(nh)
        )));
    }
    if paths.resolve_via_host
        && !vrfs
            .rt(fib)
            .is_some_and(|rt| rt.routes.contains_key(&(nh, host_len)))
    {
        return Err(crate::error::VnetError::invalid(format!(
            "next hop {} has no host route (resolve-via-host)",
            fmt_addr::<L>(nh)
        )));
    }
    Ok(())
}

fn fmt_addr<L: Lpm>(a: L::Addr) -> String {
    let v: u128 = a.into();
    if L::BITS == 32 {
        std::net::Ipv4Addr::from(v as u32).to_string()
    } else {
        std::net::Ipv6Addr::from(v).to_string()
    }
}

impl<A: std::fmt::Display + Copy> RoutePaths<A> {
    /// The paths as (hop, weight), each next hop resolved by `hop(nh, interface)`; an error
    /// unless there is a path, `drop`, or `del`.
    pub fn resolve<B>(
        &self,
        del: bool,
        mut hop: impl FnMut(A, Option<SwIfIndex>) -> VnetResult<Hop<B>>,
    ) -> VnetResult<Vec<(Hop<B>, u32)>> {
        let mut out = Vec::with_capacity(self.paths.len());
        for &(nh, intf, wt) in &self.paths {
            out.push((hop(nh, intf)?, wt));
        }
        if !del && !self.has_path() {
            return Err(VnetError::invalid("missing `via <next-hop>' (or `drop')"));
        }
        Ok(out)
    }
}

/// Renders an adjacency as `show ip[6] fib` does: `ipv4`/`ipv6` is the family, `via` the
/// next hop text (empty when unknown), `ifn` the interface name.
pub fn fmt_adj(family: &str, a: &Adj, i: u32, via: &str, ifn: &str) -> String {
    match a.kind {
        AdjKind::Drop => format!("[@{i}]: dpo-drop {}", family.replace('v', "")),
        AdjKind::Local => format!("[@{i}]: dpo-receive on {ifn}"),
        AdjKind::Glean if via.is_empty() => format!("[@{i}]: {family}-glean: {ifn}"),
        AdjKind::Glean => format!("[@{i}]: {family}-glean: [src:{via}] {ifn}"),
        AdjKind::Incomplete => format!("[@{i}]: {family} via {via} {ifn}: incomplete"),
        AdjKind::Node => format!(
            "[@{i}]: {family} to-node {ifn}: mtu:{} next:{} arc:{}",
            a.mtu, a.tx_if, a.nh
        ),
        AdjKind::Rewrite => {
            let hex: String = a.rewrite.iter().map(|b| format!("{b:02x}")).collect();
            format!(
                "[@{i}]: {family} via {via} {ifn}: mtu:{} next:{} {hex}",
                a.mtu, a.tx_if
            )
        }
    }
}

/// The DPO an adjacency is in a `show ip[6] fib` entry, as VPP prints it: `family` is
/// `ipv4`/`ipv6`, `via` the next hop text, `ifn` the interface name, `addr` and `prefix` the
/// route's address and prefix (a receive DPO names the address, a glean its subnet).
pub fn fmt_dpo(family: &str, a: &Adj, via: &str, ifn: &str, addr: &str, prefix: &str) -> String {
    let hex = |r: &[u8]| -> String { r.iter().map(|b| format!("{b:02x}")).collect() };
    match a.kind {
        AdjKind::Drop => format!("[@0]: dpo-drop {}", family.replace('v', "")),
        AdjKind::Local => format!("[@2]: dpo-receive: {addr} on {ifn}"),
        AdjKind::Glean => {
            let ethertype = if family == "ipv4" { "0806" } else { "86dd" };
            format!(
                "[@4]: {family}-glean: [src:{prefix}] {ifn}: mtu:{} next:{} flags:[] ffffffffffff{}{ethertype}",
                a.mtu,
                a.tx_if,
                hex(&a.rewrite[6..12])
            )
        }
        AdjKind::Incomplete => format!("[@3]: arp-{family}: via {via} {ifn}"),
        AdjKind::Node => format!("[@6]: {family}-to-node {ifn}: next:{}", a.tx_if),
        AdjKind::Rewrite => format!(
            "[@5]: {family} via {via} {ifn}: mtu:{} next:{} flags:[] {}",
            a.mtu,
            a.tx_if,
            hex(&a.rewrite)
        ),
    }
}

/// A configured path of a static route, as `ip route add` takes it back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StaticPath {
    /// `via <next hop> [<interface>]` (None: recursive).
    Via(std::net::IpAddr, Option<u32>),
    /// `via <interface>`: attached, each destination resolved on the interface (a glean or
    /// point-to-point adjacency).
    Interface(u32),
    /// `via local`: received by the router.
    Local,
}

/// A route as dumps and `show running-config` see it.
#[derive(Clone, Debug, Default)]
pub struct RouteInfo {
    /// Prefix address.
    pub addr: Option<std::net::IpAddr>,
    /// Prefix length.
    pub len: u8,
    /// Its sources.
    pub sources: Vec<Source>,
    /// The static source is a drop route.
    pub drop: bool,
    /// The static paths as configured, with their weights.
    pub paths: Vec<(StaticPath, u32)>,
    /// Paths the data plane forwards over.
    pub installed: usize,
}

impl<L: Lpm> Vrfs<L> {
    /// Calls `f` with every route of table `id`; `adj_path(adj)` gives an attached path as
    /// configured (None: not one, e.g. the drop adjacency).
    pub fn for_each_route(
        &self,
        id: u32,
        adj_path: impl Fn(u32) -> Option<StaticPath>,
        mut f: impl FnMut(&RouteInfo),
    ) -> VnetResult {
        let fib = self.fib_of(id).ok_or_else(|| no_table(id))?;
        let Some(rt) = self.rt(fib) else {
            return Err(no_table(id));
        };
        let mut info = RouteInfo::default();
        for (&(p, l), r) in &rt.routes {
            info.addr = Some(Self::ip(p));
            info.len = l;
            info.sources = r.sources();
            let (drop, adjs) = r.static_paths();
            info.drop = drop;
            info.paths.clear();
            for (a, w) in adjs {
                if let Some(p) = adj_path(a) {
                    info.paths.push((p, w));
                }
            }
            for &(nh, w) in &r.vias {
                info.paths
                    .push((StaticPath::Via(Self::ip(L::from_u128(nh)), None), w));
            }
            info.installed = r.installed.len();
            f(&info);
        }
        Ok(())
    }

    /// The live tables: (table id, FIB index, routes).
    pub fn tables(&self) -> Vec<(u32, u32, usize)> {
        self.iter()
            .map(|(id, fib, rt)| (id, fib, rt.routes.len()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn route_errors_keep_their_category_to_the_api() {
        use super::{LpmError, RouteError, VnetError};
        use sluice_api::Retval;
        let api = |e: RouteError| VnetError::from(e).retval();
        assert_eq!(api(RouteError::Lpm(LpmError::Full)), Retval::NoResources);
        assert_eq!(api(RouteError::LoadBalanceFull), Retval::NoResources);
        assert_eq!(
            api(RouteError::Lpm(LpmError::BadLength(33))),
            Retval::InvalidValue
        );
        assert_eq!(api(RouteError::DefaultTable), Retval::InvalidValue);
        assert_eq!(api(RouteError::NoTable(7)), Retval::NoSuchTable);
        assert_eq!(
            VnetError::from(RouteError::NoTable(7)).to_string(),
            "no table 7"
        );
    }

    #[test]
    fn route_count_is_bounded_and_checked_against_memory_first() {
        use super::check_route_count_with as check;
        let msg = |r: Result<(), sluice_cli::CliError>| r.unwrap_err().msg;
        assert_eq!(
            msg(check(u32::MAX, false, None)),
            "count 4294967295: at most 4194304 routes per command"
        );
        assert!(check(1 << 20, false, Some(4 << 30)).is_ok());
        // 1M routes need ~1 GiB: refused with 1.5 GiB available, before anything is added.
        assert_eq!(
            msg(check(1 << 20, false, Some(3 << 29))),
            "count 1048576: about 1024 MiB needed, 1536 MiB available (refusing more than half)"
        );
        assert!(
            check(1 << 20, true, Some(0)).is_ok(),
            "a delete frees memory"
        );
    }
    use super::*;
    use sluice_fib::ip4::Ip4Lpm;

    #[test]
    fn a_route_with_few_paths_is_small_and_allocates_nothing() {
        // The size of a million-route table: the map's entries are routes.
        assert!(
            std::mem::size_of::<Route>() <= 96,
            "{}",
            std::mem::size_of::<Route>()
        );
        let mut s = Sources::default();
        s.insert(Source::Static, smallvec![(3, 1), (4, 2)]);
        s.insert(Source::Local, smallvec![(1, 1)]);
        s.insert(Source::Adjacency, smallvec![(2, 1)]);
        assert!(!s.0.spilled() || s.0.len() > 1);
        assert!(s.get(&Source::Static).is_some_and(|p| !p.spilled()));
        let order: Vec<Source> = s.keys().copied().collect();
        assert_eq!(order, [Source::Local, Source::Adjacency, Source::Static]);
        s.insert(Source::Local, smallvec![(9, 1)]);
        assert_eq!(s.values().next().map(|p| p[0]), Some((9, 1)));
        assert_eq!(s.remove(&Source::Adjacency).map(|p| p.len()), Some(1));
        assert!(!s.contains_key(&Source::Adjacency));
        s.clear();
        assert!(s.is_empty());
    }

    fn table() -> (RouteTable<Ip4Lpm>, Lbs) {
        let e = Arc::new(Epochs::new(1));
        (
            RouteTable::new(Ip4Lpm::new(), e.clone()),
            Lbs::new(LoadBalances::new(), e),
        )
    }

    fn ip(a: [u8; 4]) -> u32 {
        u32::from_be_bytes(a)
    }

    fn add(rt: &mut RouteTable<Ip4Lpm>, lbs: &mut Lbs, p: [u8; 4], len: u8, h: Hop<u32>) {
        rt.edit_static(lbs, ip(p), len, false, false, &[(h, 1)])
            .unwrap();
    }

    fn del(rt: &mut RouteTable<Ip4Lpm>, lbs: &mut Lbs, p: [u8; 4], len: u8, h: Hop<u32>) {
        rt.edit_static(lbs, ip(p), len, true, false, &[(h, 1)])
            .unwrap();
    }

    #[test]
    fn special_entries_drop_under_a_default_route() {
        let (mut rt, mut lbs) = table();
        add(&mut rt, &mut lbs, [0, 0, 0, 0], 0, Hop::Adj(5));
        for a in [
            [224, 1, 2, 3],
            [240, 0, 0, 1],
            [255, 255, 255, 255],
            [0, 0, 0, 0],
        ] {
            assert_eq!(rt.lookup_adj(&lbs, ip(a)), Some(0), "{a:?} drops");
        }
        assert_eq!(rt.lookup_adj(&lbs, ip([8, 8, 8, 8])), Some(5));
        assert!(rt.routes.len() == 1, "special entries are no routes");
        // A more specific route wins (linux-cp's 224.0.0.0/24 via local).
        add(&mut rt, &mut lbs, [224, 0, 0, 0], 24, Hop::Adj(6));
        assert_eq!(rt.lookup_adj(&lbs, ip([224, 0, 0, 5])), Some(6));
        assert_eq!(rt.lookup_adj(&lbs, ip([224, 1, 0, 5])), Some(0));
        // A route at the special prefix replaces it; deleting it puts the drop back.
        add(&mut rt, &mut lbs, [224, 0, 0, 0], 4, Hop::Adj(7));
        assert_eq!(rt.lookup_adj(&lbs, ip([224, 1, 0, 5])), Some(7));
        del(&mut rt, &mut lbs, [224, 0, 0, 0], 4, Hop::Adj(7));
        assert_eq!(rt.lookup_adj(&lbs, ip([224, 1, 0, 5])), Some(0));
        del(&mut rt, &mut lbs, [224, 0, 0, 0], 24, Hop::Adj(6));
        assert_eq!(rt.lookup_adj(&lbs, ip([224, 0, 0, 5])), Some(0));
        // A subnet's broadcast /32: wanted twice, a route over it, gone with the last want.
        let bc = ip([10, 0, 1, 255]);
        add(&mut rt, &mut lbs, [10, 0, 1, 0], 24, Hop::Adj(8));
        rt.set_drop(bc, 32, true).unwrap();
        rt.set_drop(bc, 32, true).unwrap();
        assert_eq!(rt.lookup_adj(&lbs, bc), Some(0));
        add(&mut rt, &mut lbs, [10, 0, 1, 255], 32, Hop::Adj(9));
        assert_eq!(rt.lookup_adj(&lbs, bc), Some(9));
        del(&mut rt, &mut lbs, [10, 0, 1, 255], 32, Hop::Adj(9));
        assert_eq!(rt.lookup_adj(&lbs, bc), Some(0));
        rt.set_drop(bc, 32, false).unwrap();
        assert_eq!(rt.lookup_adj(&lbs, bc), Some(0), "still wanted once");
        rt.set_drop(bc, 32, false).unwrap();
        assert_eq!(rt.lookup_adj(&lbs, bc), Some(8), "the subnet's route again");
        rt.set_drop(bc, 32, true).unwrap();
        rt.clear(&mut lbs);
        assert_eq!(
            rt.lookup_adj(&lbs, bc),
            None,
            "a cleared table forgets its drops"
        );
        assert_eq!(rt.lookup_adj(&lbs, ip([8, 8, 8, 8])), None);
        assert_eq!(rt.lookup_adj(&lbs, ip([240, 0, 0, 1])), Some(0));
    }

    #[test]
    fn recursive_route_follows_its_cover() {
        let (mut rt, mut lbs) = table();
        let via = Hop::Via(ip([172, 16, 0, 1]));
        add(&mut rt, &mut lbs, [10, 50, 0, 0], 16, via);
        let dst = ip([10, 50, 1, 1]);
        assert_eq!(rt.lookup_adj(&lbs, dst), Some(0), "unresolved: drop");
        add(&mut rt, &mut lbs, [172, 16, 0, 0], 24, Hop::Adj(5));
        assert_eq!(rt.lookup_adj(&lbs, dst), Some(5));
        add(&mut rt, &mut lbs, [172, 16, 0, 1], 32, Hop::Adj(7));
        assert_eq!(rt.lookup_adj(&lbs, dst), Some(7), "the more specific cover");
        del(&mut rt, &mut lbs, [172, 16, 0, 1], 32, Hop::Adj(7));
        assert_eq!(rt.lookup_adj(&lbs, dst), Some(5));
        del(&mut rt, &mut lbs, [172, 16, 0, 0], 24, Hop::Adj(5));
        assert_eq!(rt.lookup_adj(&lbs, dst), Some(0));
        // A chain: 10.50/16 via 172.16.0.1, covered by 172.16/16 via 192.0.2.1, covered
        // by 192.0.2.0/24 via adjacency 9.
        add(
            &mut rt,
            &mut lbs,
            [172, 16, 0, 0],
            16,
            Hop::Via(ip([192, 0, 2, 1])),
        );
        assert_eq!(rt.lookup_adj(&lbs, dst), Some(0));
        add(&mut rt, &mut lbs, [192, 0, 2, 0], 24, Hop::Adj(9));
        assert_eq!(
            rt.lookup_adj(&lbs, dst),
            Some(9),
            "resolved two levels down"
        );
        // Removing the recursive route leaves nothing behind.
        rt.edit_static(&mut lbs, ip([10, 50, 0, 0]), 16, true, false, &[])
            .unwrap();
        assert_eq!(rt.lookup_adj(&lbs, dst), None);
        assert!(!rt.routes.contains_key(&(ip([10, 50, 0, 0]), 16)));
    }

    #[test]
    fn loops_resolve_to_drop_and_terminate() {
        let (mut rt, mut lbs) = table();
        // Each resolves only through the other (or itself).
        add(
            &mut rt,
            &mut lbs,
            [10, 0, 0, 0],
            8,
            Hop::Via(ip([11, 0, 0, 1])),
        );
        add(
            &mut rt,
            &mut lbs,
            [11, 0, 0, 0],
            8,
            Hop::Via(ip([10, 0, 0, 1])),
        );
        add(
            &mut rt,
            &mut lbs,
            [12, 0, 0, 0],
            8,
            Hop::Via(ip([12, 0, 0, 1])),
        );
        for a in [[10, 1, 1, 1], [11, 1, 1, 1], [12, 1, 1, 1]] {
            assert_eq!(rt.lookup_adj(&lbs, ip(a)), Some(0), "{a:?}");
        }
    }

    #[test]
    fn single_via_through_ecmp_cover_shares_its_load_balance() {
        let (mut rt, mut lbs) = table();
        add(&mut rt, &mut lbs, [172, 16, 0, 0], 24, Hop::Adj(5));
        add(&mut rt, &mut lbs, [172, 16, 0, 0], 24, Hop::Adj(6));
        let cover = rt.route_lb[&(ip([172, 16, 0, 0]), 24)];
        for k in 0..100u8 {
            add(
                &mut rt,
                &mut lbs,
                [10, k, 0, 0],
                16,
                Hop::Via(ip([172, 16, 0, 1])),
            );
        }
        assert_eq!(
            rt.route_lb.len(),
            1,
            "no load-balance object per recursive route"
        );
        let v = rt.lpm.lookup(ip([10, 42, 0, 1])).unwrap();
        assert_eq!(v, LB_FLAG | cover);
        // The cover drops to one path: every dependent follows to the adjacency.
        del(&mut rt, &mut lbs, [172, 16, 0, 0], 24, Hop::Adj(5));
        assert!(rt.route_lb.is_empty());
        for k in 0..100u8 {
            assert_eq!(rt.lpm.lookup(ip([10, k, 0, 1])), Some(6));
        }
    }
}
