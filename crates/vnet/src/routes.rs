//! The route table both address families share: routes with paths per source, the best
//! source installed in the family's LPM (one path directly, several through a load-balance
//! object), static-route editing for the `ip route` CLI, and the `show ip[6] fib` rendering.
//! IPv4 and IPv6 differ only in the LPM ([`Lpm`]) and the address type.

use sluice_cli::{Args, CliError};
use sluice_fib::adj::{Adj, AdjKind};
use sluice_fib::lb::{LbTable, LoadBalances};
use sluice_graph::Vlib;
use sluice_infra::epoch::Epochs;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;

use crate::interface::SwIfIndex;

/// LPM values at or above this are load-balance indices (ECMP); below, adjacency indices.
pub const LB_FLAG: u32 = 1 << 23;

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

/// A route: paths (adjacency, weight) per source; the best source's paths are installed.
#[derive(Clone, Debug)]
pub struct Route {
    /// Paths by source (the lowest source wins, as VPP's source priorities).
    pub by_source: BTreeMap<Source, Vec<(u32, u32)>>,
}

/// The longest-prefix-match structure of one address family.
pub trait Lpm {
    /// Address type (host order).
    type Addr: Copy + Ord + Eq + std::hash::Hash + std::fmt::Debug;
    /// `addr` with its host bits below `len` cleared.
    fn mask(addr: Self::Addr, len: u8) -> Self::Addr;
    /// Adds or replaces a prefix.
    fn insert(&mut self, e: &Epochs, p: Self::Addr, len: u8, v: u32) -> Result<(), String>;
    /// Removes a prefix.
    fn remove(&mut self, e: &Epochs, p: Self::Addr, len: u8);
    /// Longest-prefix match.
    fn lookup(&self, a: Self::Addr) -> Option<u32>;
}

impl Lpm for sluice_fib::ip4::Ip4Lpm {
    type Addr = u32;
    fn mask(a: u32, len: u8) -> u32 {
        sluice_fib::ip4::mask(a, len)
    }
    fn insert(&mut self, e: &Epochs, p: u32, len: u8, v: u32) -> Result<(), String> {
        sluice_fib::ip4::Ip4Lpm::insert(self, e, p, len, v).map_err(|e| e.to_string())
    }
    fn remove(&mut self, e: &Epochs, p: u32, len: u8) {
        sluice_fib::ip4::Ip4Lpm::remove(self, e, p, len);
    }
    fn lookup(&self, a: u32) -> Option<u32> {
        sluice_fib::ip4::Ip4Lpm::lookup(self, a)
    }
}

impl Lpm for sluice_fib::ip6::Ip6Lpm {
    type Addr = u128;
    fn mask(a: u128, len: u8) -> u128 {
        sluice_fib::ip6::mask(a, len)
    }
    fn insert(&mut self, e: &Epochs, p: u128, len: u8, v: u32) -> Result<(), String> {
        sluice_fib::ip6::Ip6Lpm::insert(self, e, p, len, v).map_err(|e| e.to_string())
    }
    fn remove(&mut self, e: &Epochs, p: u128, len: u8) {
        sluice_fib::ip6::Ip6Lpm::remove(self, e, p, len);
    }
    fn lookup(&self, a: u128) -> Option<u32> {
        sluice_fib::ip6::Ip6Lpm::lookup(self, a)
    }
}

/// Routes of one family (main thread).
pub struct RouteTable<L: Lpm> {
    /// The LPM the best paths are installed in.
    pub lpm: L,
    lbs: LoadBalances,
    epochs: Arc<Epochs>,
    /// Every route by (prefix, length).
    pub routes: BTreeMap<(L::Addr, u8), Route>,
    /// Load-balance object of each ECMP route.
    pub route_lb: HashMap<(L::Addr, u8), u32>,
    // Load-balance objects no route points at any more (kept, not reused, until epoch-based
    // reuse exists; bounded by route churn).
    lb_retired: Vec<u32>,
}

impl<L: Lpm> RouteTable<L> {
    /// An empty table over `lpm`.
    pub fn new(lpm: L, lbs: LoadBalances, epochs: Arc<Epochs>) -> Self {
        RouteTable {
            lpm,
            lbs,
            epochs,
            routes: BTreeMap::new(),
            route_lb: HashMap::new(),
            lb_retired: Vec::new(),
        }
    }

    /// The load-balance read side.
    pub fn lb_table(&self) -> &Arc<LbTable> {
        self.lbs.table()
    }

    /// One path of one source (None removes the source).
    pub fn set_route(
        &mut self,
        p: L::Addr,
        len: u8,
        src: Source,
        adj: Option<u32>,
    ) -> Result<(), String> {
        self.set_paths(p, len, src, adj.map(|a| vec![(a, 1)]).unwrap_or_default())
    }

    /// Replaces the paths of one source of a route (no paths: the source is removed) and
    /// installs the best source: one path directly, several through a load-balance object.
    pub fn set_paths(
        &mut self,
        p: L::Addr,
        len: u8,
        src: Source,
        paths: Vec<(u32, u32)>,
    ) -> Result<(), String> {
        let key = (L::mask(p, len), len);
        let r = self.routes.entry(key).or_insert_with(|| Route {
            by_source: BTreeMap::new(),
        });
        if paths.is_empty() {
            r.by_source.remove(&src);
        } else {
            r.by_source.insert(src, paths);
        }
        let best = r.by_source.values().next().cloned();
        match best {
            Some(paths) if paths.len() == 1 => {
                if let Some(lb) = self.route_lb.remove(&key) {
                    self.lb_retired.push(lb);
                }
                self.lpm.insert(&self.epochs, key.0, len, paths[0].0)
            }
            Some(paths) => {
                let lb = match self.route_lb.get(&key) {
                    Some(&l) => l,
                    None => {
                        let l = self.lbs.alloc().ok_or("load-balance table full")?;
                        self.route_lb.insert(key, l);
                        l
                    }
                };
                self.lbs.set(lb, &paths);
                self.lpm.insert(&self.epochs, key.0, len, LB_FLAG | lb)
            }
            None => {
                self.routes.remove(&key);
                if let Some(lb) = self.route_lb.remove(&key) {
                    self.lb_retired.push(lb);
                }
                self.lpm.remove(&self.epochs, key.0, len);
                Ok(())
            }
        }
    }

    /// The adjacency a lookup of `a` uses (an ECMP route: its first bucket's).
    pub fn lookup_adj(&self, a: L::Addr) -> Option<u32> {
        self.lpm.lookup(a).map(|v| {
            if v >= LB_FLAG {
                self.lbs.table().pick(v & (LB_FLAG - 1), 0)
            } else {
                v
            }
        })
    }

    /// `ip route add|del` on one prefix: with `del`, removes the given paths (all without
    /// paths); otherwise adds the paths to the static ones (ECMP, as VPP does) or makes the
    /// route a drop route. Err(None) = deleting a route that has no static paths.
    pub fn edit_static(
        &mut self,
        p: L::Addr,
        len: u8,
        del: bool,
        drop: bool,
        paths: &[(u32, u32)],
    ) -> Result<(), Option<String>> {
        let key = (L::mask(p, len), len);
        let current: Vec<(u32, u32)> = self
            .routes
            .get(&key)
            .and_then(|r| r.by_source.get(&Source::Static))
            .cloned()
            .unwrap_or_default();
        let new_paths = if del {
            if current.is_empty() {
                return Err(None);
            }
            if paths.is_empty() {
                Vec::new()
            } else {
                current
                    .iter()
                    .copied()
                    .filter(|c| !paths.iter().any(|r| r.0 == c.0))
                    .collect()
            }
        } else if drop {
            vec![(0, 1)]
        } else {
            let mut v: Vec<(u32, u32)> = current.into_iter().filter(|c| c.0 != 0).collect();
            for r in paths {
                match v.iter_mut().find(|c| c.0 == r.0) {
                    Some(c) => c.1 = r.1,
                    None => v.push(*r),
                }
            }
            v
        };
        self.set_paths(key.0, len, Source::Static, new_paths)
            .map_err(Some)
    }

    /// The `ip route [add|del] [count n] <prefix>/<len> <paths>` loop: `nth(k)` is the k-th
    /// prefix (None: past the address space), `w` the prefix as typed (for errors).
    #[allow(clippy::too_many_arguments)]
    pub fn apply_static(
        &mut self,
        count: u32,
        nth: impl Fn(u32) -> Option<L::Addr>,
        len: u8,
        del: bool,
        drop: bool,
        resolved: &[(u32, u32)],
        w: &str,
    ) -> Result<(), CliError> {
        for k in 0..count {
            let q = nth(k).ok_or_else(|| {
                CliError::new(format!(
                    "count {count} runs past the end of the address space"
                ))
            })?;
            match self.edit_static(q, len, del, drop, resolved) {
                Ok(()) => {}
                Err(None) if count == 1 => {
                    return Err(CliError::new(format!("no route `{w}'")));
                }
                Err(None) => {}
                Err(Some(e)) => return Err(CliError::new(e)),
            }
        }
        Ok(())
    }

    /// Removes the static paths through any of `adjs` (an interface being deleted).
    pub fn drop_static_paths(&mut self, adjs: &[u32]) {
        let keys: Vec<(L::Addr, u8)> = self.routes.keys().copied().collect();
        for (p, l) in keys {
            let paths = self
                .routes
                .get(&(p, l))
                .and_then(|r| r.by_source.get(&Source::Static))
                .cloned();
            if let Some(paths) = paths {
                if paths.iter().any(|x| adjs.contains(&x.0)) {
                    let kept: Vec<(u32, u32)> =
                        paths.into_iter().filter(|x| !adjs.contains(&x.0)).collect();
                    let _ = self.set_paths(p, l, Source::Static, kept);
                }
            }
        }
    }

    /// `show ip[6] fib` body: the routes selected by `filter` ((addr, host length) = the
    /// longest match of addr; (prefix, len) = exactly that prefix; None = all), each with its
    /// sources and installed paths rendered by `adj`.
    pub fn show(
        &self,
        out: &mut String,
        filter: Option<(L::Addr, u8)>,
        host_len: u8,
        prefix: impl Fn(L::Addr, u8) -> String,
        adj: impl Fn(u32) -> String,
    ) {
        let shown: Vec<(&(L::Addr, u8), &Route)> = match filter {
            Some((a, l)) if l == host_len => self
                .routes
                .iter()
                .filter(|(&(p, m), _)| L::mask(a, m) == p)
                .max_by_key(|(&(_, m), _)| m)
                .into_iter()
                .collect(),
            Some((p, l)) => self
                .routes
                .iter()
                .filter(|(&(q, m), _)| q == L::mask(p, l) && m == l)
                .collect(),
            None => self.routes.iter().collect(),
        };
        for (&(p, l), r) in shown {
            let srcs: Vec<&str> = r.by_source.keys().map(|s| s.as_str()).collect();
            let _ = writeln!(out, "{}", prefix(p, l));
            let _ = writeln!(out, "  source: {}", srcs.join(", "));
            if let Some(paths) = r.by_source.values().next() {
                if let Some(lb) = self.route_lb.get(&(p, l)) {
                    let _ = writeln!(out, "    load-balance [@{lb}]: {} paths", paths.len());
                }
                for &(ai, wt) in paths {
                    let w = if paths.len() > 1 {
                        format!(" weight {wt}")
                    } else {
                        String::new()
                    };
                    let _ = writeln!(out, "    {}{w}", adj(ai));
                }
            }
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

/// Parses `show ip[6] fib [table 0] [<prefix>] [summary]`: (prefix filter, summary).
pub fn parse_show_args<A>(
    a: &mut Args,
    parse_prefix: impl Fn(&str) -> Result<(A, u8), CliError>,
) -> Result<(Option<(A, u8)>, bool), CliError> {
    let mut filter = None;
    let mut summary = false;
    while !a.is_empty() {
        if a.keyword("summary") {
            summary = true;
        } else if a.keyword("table") {
            let t = a.u32("table id")?;
            if t != 0 {
                return Err(CliError::new(format!(
                    "no table {t} (only table 0 exists yet)"
                )));
            }
        } else {
            let w = a.word("prefix")?;
            filter = Some(parse_prefix(&w)?);
        }
    }
    Ok((filter, summary))
}

/// A parsed `ip route` command's paths: (next hop, interface, weight), and `drop`.
pub struct RoutePaths<A> {
    /// `via <nh> [<interface>] [weight <w>]`, in order.
    pub paths: Vec<(A, Option<SwIfIndex>, u32)>,
    /// `drop` / `via drop`.
    pub drop: bool,
}

/// Parses the path part of `ip route` (after the prefix), next hops with `parse_nh`.
pub fn parse_paths<A>(
    vm: &mut Vlib,
    a: &mut Args,
    parse_nh: impl Fn(&str) -> Result<A, CliError>,
) -> Result<RoutePaths<A>, CliError> {
    let mut paths: Vec<(A, Option<SwIfIndex>, u32)> = Vec::new();
    let mut drop = false;
    while !a.is_empty() {
        if a.keyword("via") {
            if a.keyword("drop") {
                drop = true;
                continue;
            }
            let t = a.word("next hop")?;
            paths.push((parse_nh(&t)?, None, 1));
        } else if a.keyword("drop") {
            drop = true;
        } else if a.keyword("weight") {
            let wt = a.u32("weight")?;
            if wt == 0 {
                return Err(CliError::new("weight must be at least 1"));
            }
            match paths.last_mut() {
                Some(last) => last.2 = wt,
                None => return Err(CliError::new("`weight' must follow `via <next-hop>'")),
            }
        } else if paths.last().is_some_and(|l| l.1.is_none()) {
            let i = crate::cli::interface_arg(vm, a)?;
            if let Some(last) = paths.last_mut() {
                last.1 = Some(i);
            }
        } else {
            a.finish()?;
        }
    }
    Ok(RoutePaths { paths, drop })
}

impl<A: std::fmt::Display + Copy> RoutePaths<A> {
    /// The paths as (adjacency, weight), each next hop resolved by `adj(nh, interface)`;
    /// an error unless there is a path, `drop`, or `del`.
    pub fn resolve(
        &self,
        del: bool,
        mut adj: impl FnMut(A, Option<SwIfIndex>) -> Result<u32, CliError>,
    ) -> Result<Vec<(u32, u32)>, CliError> {
        let mut out = Vec::with_capacity(self.paths.len());
        for &(nh, intf, wt) in &self.paths {
            out.push((adj(nh, intf)?, wt));
        }
        if !del && !self.drop && out.is_empty() {
            return Err(CliError::new("missing `via <next-hop>' (or `drop')"));
        }
        Ok(out)
    }
}

/// The error for a next hop that needs an interface.
pub fn not_connected(nh: impl std::fmt::Display) -> CliError {
    CliError::new(format!(
        "next hop {nh} is not on a connected subnet (give an interface)"
    ))
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
        AdjKind::Rewrite => {
            let hex: String = a.rewrite.iter().map(|b| format!("{b:02x}")).collect();
            format!(
                "[@{i}]: {family} via {via} {ifn}: mtu:{} next:{} {hex}",
                a.mtu, a.tx_if
            )
        }
    }
}
