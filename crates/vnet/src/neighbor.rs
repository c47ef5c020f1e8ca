//! Neighbour-table policy shared by ARP (IPv4) and ND (IPv6): VPP's
//! `set ip neighbor-config ip4|ip6 [limit <n>] [age <seconds>] [recycle|norecycle]`.
//!
//! - **limit**: at most `limit` neighbours per family. A new dynamic (learned) entry beyond
//!   it is refused, or with `recycle` replaces the oldest dynamic entry. Static entries are
//!   always accepted (and count).
//! - **age**: a dynamic entry not refreshed for `age` seconds is probed once (unicast ARP
//!   request / neighbor solicitation to its MAC); if nothing refreshes it within
//!   [`PROBE_WAIT`] it is removed. 0 (the default, as in VPP) never ages. Static entries
//!   never age.
//!
//! The families' control planes ([`crate::ip4::Ip4Control`], [`crate::ip6::Ip6Control`])
//! own an [`Aging`] each; their `*-neighbor-process` nodes run [`Aging::scan`] and send the
//! probes.

use crate::error::{VnetError, VnetResult};
use crate::interface::SwIfIndex;
use crate::ip4::Ip4Control;
use crate::ip6::Ip6Control;
use crate::ip_family::{neighbor_add_del, neighbor_rows, with_aging};
use sluice_cli::{Args, CliError, CommandTree};
use sluice_graph::{CounterDesc, Cx, Vlib};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::Hash;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// How long a probed entry has to answer before it is removed.
pub const PROBE_WAIT: Duration = Duration::from_secs(1);

/// A neighbour learned by the data plane, applied by the main thread.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Learned<A> {
    /// Interface it was heard on.
    pub sw_if: u32,
    /// Its address.
    pub ip: A,
    /// Its MAC.
    pub mac: [u8; 6],
    /// May create an entry (false: only an existing entry is updated — gratuitous ARP, as
    /// VPP, and unsolicited neighbour advertisements, RFC 4861 §7.2.5).
    pub create: bool,
    /// May replace an existing entry's different MAC (false: an NA with the Override flag
    /// clear, which RFC 4861 §7.2.5 says must not update the cache).
    pub override_mac: bool,
    /// Confirms the neighbour is reachable now: restarts its aging (false: an NA without
    /// the Solicited flag; a changed MAC is recorded but the entry stays as stale as it was).
    pub reachable: bool,
}

impl<A> Learned<A> {
    /// An ARP packet or neighbour solicitation from the neighbour itself: creates, updates
    /// and refreshes (`create` false: gratuitous ARP).
    pub fn heard(sw_if: u32, ip: A, mac: [u8; 6], create: bool) -> Self {
        Learned {
            sw_if,
            ip,
            mac,
            create,
            override_mac: true,
            reachable: true,
        }
    }

    /// A neighbour advertisement with its Solicited and Override flags (RFC 4861 §7.2.5):
    /// only a solicited one (the answer to our solicitation) may create an entry.
    pub fn advert(sw_if: u32, ip: A, mac: [u8; 6], solicited: bool, override_mac: bool) -> Self {
        Learned {
            sw_if,
            ip,
            mac,
            create: solicited,
            override_mac,
            reachable: solicited,
        }
    }
}

/// `set ip neighbor-config` values of one family.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct NeighborConfig {
    /// Maximum number of neighbours.
    pub limit: usize,
    /// Seconds without refresh before a dynamic entry is probed (0 = never).
    pub age: u32,
    /// At the limit, replace the oldest dynamic entry instead of refusing a new one.
    pub recycle: bool,
}

impl Default for NeighborConfig {
    fn default() -> Self {
        NeighborConfig {
            limit: 50_000,
            age: 0,
            recycle: false,
        }
    }
}

#[derive(Copy, Clone, Debug)]
struct Dynamic {
    updated: Instant,
    probed: Option<Instant>,
}

/// Whether a new dynamic entry may be added.
#[derive(Debug, PartialEq, Eq)]
pub enum Admit<K> {
    /// Yes.
    Yes,
    /// Yes, after removing this (oldest) dynamic entry.
    Evict(K),
    /// No: the limit is reached and recycling is off.
    Refuse,
}

/// What a scan found.
#[derive(Debug, PartialEq, Eq)]
pub struct Scan<K> {
    /// Stale entries to probe now.
    pub probe: Vec<K>,
    /// Entries still stale after their probe: remove them.
    pub expire: Vec<K>,
}

/// Dynamic-entry bookkeeping of one family; keys are (interface, address).
pub struct Aging<K> {
    /// The configuration.
    pub cfg: NeighborConfig,
    dynamic: HashMap<K, Dynamic>,
}

impl<K> Default for Aging<K> {
    fn default() -> Self {
        Aging {
            cfg: NeighborConfig::default(),
            dynamic: HashMap::new(),
        }
    }
}

impl<K: Copy + Eq + Hash + Ord> Aging<K> {
    /// Whether a new dynamic entry may join a table of `total` entries.
    pub fn admit(&self, total: usize) -> Admit<K> {
        if total < self.cfg.limit {
            return Admit::Yes;
        }
        if !self.cfg.recycle {
            return Admit::Refuse;
        }
        // The least recently refreshed dynamic entry (ties: the smallest key).
        match self.dynamic.iter().min_by_key(|(k, d)| (d.updated, **k)) {
            Some((k, _)) => Admit::Evict(*k),
            None => Admit::Refuse,
        }
    }

    /// A dynamic entry was learned or refreshed now.
    pub fn touch(&mut self, k: K, now: Instant) {
        self.dynamic.insert(
            k,
            Dynamic {
                updated: now,
                probed: None,
            },
        );
    }

    /// When a dynamic entry was last learned or refreshed.
    pub fn updated(&self, k: &K) -> Option<Instant> {
        self.dynamic.get(k).map(|d| d.updated)
    }

    /// Stops tracking an entry (removed, or now static).
    pub fn forget(&mut self, k: &K) {
        self.dynamic.remove(k);
    }

    /// Entries to probe and to remove at `now`. `is_dynamic` tells whether the table still
    /// has the key as a dynamic entry (others are dropped from the bookkeeping).
    pub fn scan(&mut self, now: Instant, is_dynamic: impl Fn(&K) -> bool) -> Scan<K> {
        let mut s = Scan {
            probe: Vec::new(),
            expire: Vec::new(),
        };
        self.dynamic.retain(|k, _| is_dynamic(k));
        if self.cfg.age == 0 {
            return s;
        }
        let age = Duration::from_secs(self.cfg.age as u64);
        for (k, d) in self.dynamic.iter_mut() {
            match d.probed {
                None if now.saturating_duration_since(d.updated) >= age => {
                    d.probed = Some(now);
                    s.probe.push(*k);
                }
                Some(p) if now.saturating_duration_since(p) >= PROBE_WAIT => s.expire.push(*k),
                _ => {}
            }
        }
        for k in &s.expire {
            self.dynamic.remove(k);
        }
        s.probe.sort();
        s.expire.sort();
        s
    }
}

/// A family's neighbour table: (interface, address) → (MAC, static).
pub type Entries<A> = HashMap<(u32, A), ([u8; 6], bool), sluice_infra::hash::FastState>;

/// What [`apply`] and [`age`] need from a family's control plane.
pub trait Table<A: Copy + Eq + Hash + Ord> {
    /// The entries and the aging state.
    fn split(&mut self) -> (&Entries<A>, &mut Aging<(u32, A)>);
    /// Adds or updates an entry, static or dynamic (adjacency, host route).
    fn add(&mut self, i: u32, ip: A, mac: [u8; 6], is_static: bool) -> VnetResult;
    /// Removes an entry (its adjacency becomes incomplete); false if absent.
    fn remove(&mut self, i: u32, ip: A) -> bool;
}

/// Applies one neighbour learned on a connected subnet of its interface: static entries are
/// kept, gratuitous ARP and unsolicited NAs only update existing entries, an NA without the
/// Override flag never changes a MAC, new entries obey the limit.
pub fn apply<A: Copy + Eq + Hash + Ord, T: Table<A>>(t: &mut T, l: Learned<A>, now: Instant) {
    let k = (l.sw_if, l.ip);
    let (entries, aging) = t.split();
    match entries.get(&k) {
        Some(&(_, true)) => return,
        Some(&(mac, false)) => {
            if (mac != l.mac && !l.override_mac) || (mac == l.mac && !l.reachable) {
                return; // nothing to record (RFC 4861 §7.2.5)
            }
        }
        None if !l.create => return,
        None => match aging.admit(entries.len()) {
            Admit::Yes => {}
            Admit::Evict(old) => {
                t.remove(old.0, old.1);
            }
            Admit::Refuse => return,
        },
    }
    if t.add(l.sw_if, l.ip, l.mac, false).is_ok() && l.reachable {
        t.split().1.touch(k, now);
    }
}

/// `ip neighbor <if> <ip> <mac> [static]`: a static entry, or without `static` (as VPP) a
/// dynamic one that ages like a learned entry. A dynamic entry does not replace a static one
/// (VPP refuses that too); a static one replaces either. `token` is the address as typed.
pub fn add<A: Copy + Eq + Hash + Ord, T: Table<A>>(
    t: &mut T,
    i: u32,
    ip: A,
    mac: [u8; 6],
    is_static: bool,
    token: &str,
) -> VnetResult {
    let k = (i, ip);
    if !is_static && t.split().0.get(&k).is_some_and(|e| e.1) {
        return Err(VnetError::Exists(format!(
            "neighbor `{token}' is static: delete it first or add `static'"
        )));
    }
    t.add(i, ip, mac, is_static)?;
    let aging = t.split().1;
    if is_static {
        aging.forget(&k);
    } else {
        aging.touch(k, Instant::now());
    }
    Ok(())
}

/// Why a neighbour may not be added (RFC 1812 §3.3.2, RFC 4861 §7.2.5): a broadcast or
/// multicast MAC, or an unspecified, loopback, multicast or broadcast address. The text
/// names the token.
fn unusable(ip: IpAddr, mac: [u8; 6]) -> Option<String> {
    if mac[0] & 1 != 0 {
        let m = crate::interface::fmt_mac(&mac);
        return Some(format!(
            "`{m}' is a broadcast/multicast MAC, not a neighbour's"
        ));
    }
    let why = match ip {
        IpAddr::V4(a) => crate::ip4::martian_address(a.into(), false),
        IpAddr::V6(a) if a.is_unspecified() => Some("unspecified"),
        IpAddr::V6(a) if a.is_loopback() => Some("loopback"),
        IpAddr::V6(a) if a.is_multicast() => Some("multicast"),
        IpAddr::V6(_) => None,
    }?;
    Some(format!("`{ip}' is not a neighbour's address ({why})"))
}

/// `ip neighbor [del] <if> <ip> <mac> [static]` of either family.
pub fn add_del(
    vm: &mut Vlib,
    is_add: bool,
    i: SwIfIndex,
    ip: IpAddr,
    mac: [u8; 6],
    is_static: bool,
) -> VnetResult {
    if is_add {
        if let Some(why) = unusable(ip, mac) {
            return Err(VnetError::invalid(why));
        }
    }
    match ip {
        IpAddr::V4(a) => neighbor_add_del::<Ip4Control>(vm, is_add, i, a.into(), mac, is_static),
        IpAddr::V6(a) => neighbor_add_del::<Ip6Control>(vm, is_add, i, a.into(), mac, is_static),
    }
}

/// Ages the table at `now`: removes entries still stale after their probe and returns the
/// probes to send: (interface, address, MAC).
pub fn age<A: Copy + Eq + Hash + Ord, T: Table<A>>(
    t: &mut T,
    now: Instant,
) -> Vec<(u32, A, [u8; 6])> {
    let (entries, aging) = t.split();
    let scan = aging.scan(now, |k| entries.get(k).is_some_and(|e| !e.1));
    let probes = scan
        .probe
        .iter()
        .filter_map(|k| entries.get(k).map(|e| (k.0, k.1, e.0)))
        .collect();
    for (i, ip) in scan.expire {
        t.remove(i, ip);
    }
    probes
}

sluice_graph::arcs! {
    /// The `*-neighbor-process` nodes' next arcs.
    pub enum ProcessNext {
        /// Aging probes.
        Output => crate::output::NAME,
    }
}

sluice_graph::counters! {
    /// The `*-neighbor-process` nodes' counters.
    pub enum ProcessCounter {
        /// Neighbours learned.
        Learned => info("learned", "neighbours learned"),
        /// Aging probes sent.
        ProbesSent => info("probes_sent", "neighbour aging probes sent"),
        /// No buffer for a probe.
        NoBuffer => error("no_buffer", "no buffer for a neighbour aging probe"),
    }
}

/// One run of a `*-neighbor-process` node: applies the learned neighbours (`apply` returns
/// how many: `learned`) and, every [`AGE_INTERVAL`], sends the probes `age` returns.
pub fn process_tick<F: AsRef<[u8]>>(
    cx: &mut Cx,
    last_age: &mut f64,
    apply: impl FnOnce() -> usize,
    age: impl FnOnce() -> Vec<(u32, F)>,
) {
    let n = apply();
    cx.count(ProcessCounter::Learned, n as u64);
    if cx.now_secs() - *last_age >= AGE_INTERVAL {
        *last_age = cx.now_secs();
        send_probes(cx, age());
    }
}

/// Sends aging probes from a `*-neighbor-process` node ([`ProcessNext`]): each (interface,
/// frame) is copied into a new buffer. Counts `probes_sent` per probe and `no_buffer` per
/// allocation failure.
fn send_probes<F: AsRef<[u8]>>(cx: &mut Cx, probes: impl IntoIterator<Item = (u32, F)>) {
    for (i, frame) in probes {
        let Some(b) = cx.bufs().alloc_one() else {
            cx.count(ProcessCounter::NoBuffer, 1);
            continue;
        };
        // SAFETY: `b` was just allocated here and has no other view.
        let mut v = unsafe { cx.buffer(b) };
        v.write_packet(frame.as_ref());
        v.hdr.tx_if = i;
        v.hdr.rx_if = i;
        cx.enqueue(ProcessNext::Output.next(), b);
        cx.count(ProcessCounter::ProbesSent, 1);
    }
}

/// Counters of the `*-neighbor-process` nodes (in this order).
pub const PROCESS_COUNTERS: &[CounterDesc] = ProcessCounter::DESCS;

/// How often the `*-neighbor-process` nodes age their table (seconds).
pub const AGE_INTERVAL: f64 = 0.1;

/// Registers `set ip neighbor-config` and `show ip neighbor-config`.
pub fn register_cli(t: &mut CommandTree<Vlib>) {
    t.alias("set ip neighbor", "ip neighbor");
    t.add(
        "show ip neighbors",
        "show ip neighbors [<interface>] — IPv4 and IPv6 neighbours",
        cli_show_all,
    );
    t.alias("show ip neighbor", "show ip neighbors");
    t.add(
        "show ip4 neighbors",
        "show ip4 neighbors [<interface>] — IPv4 neighbours",
        cli_show_ip4,
    );
    t.alias("show ip4 neighbor", "show ip4 neighbors");
    t.add(
        "show ip6 neighbors",
        "show ip6 neighbors [<interface>] — IPv6 neighbours",
        cli_show_ip6,
    );
    t.alias("show ip6 neighbor", "show ip6 neighbors");
    t.add(
        "set ip neighbor-config",
        "set ip neighbor-config ip4|ip6 [limit <n>] [age <seconds>] [recycle|norecycle]",
        cli_set,
    );
    t.add(
        "show ip neighbor-config",
        "show ip neighbor-config — neighbour limit, age and recycling per family",
        cli_show,
    );
}

/// A neighbour as `show ip neighbors` prints it.
#[derive(Clone, Debug)]
pub struct Row {
    /// Interface.
    pub sw_if: u32,
    /// Address.
    pub ip: std::net::IpAddr,
    /// MAC address.
    pub mac: [u8; 6],
    /// Configured (`static`), not learned.
    pub is_static: bool,
    /// Time since a dynamic entry was learned or refreshed.
    pub age: Option<std::time::Duration>,
}

/// VPP's table: `Age IP Flags Ethernet Interface`, sorted by interface then address (the
/// age of a static entry is `-`; VPP prints the header only when there are entries).
fn show_rows(vm: &mut Vlib, a: &mut Args, v4: bool, v6: bool) -> Result<String, CliError> {
    let only = if a.is_empty() {
        None
    } else {
        Some(crate::cli::interface_arg(vm, a)?)
    };
    a.finish()?;
    let mut rows = Vec::new();
    if v4 {
        rows.extend(neighbor_rows::<Ip4Control>(vm));
    }
    if v6 {
        rows.extend(neighbor_rows::<Ip6Control>(vm));
    }
    rows.retain(|r| only.is_none_or(|o| o.0 == r.sw_if));
    rows.sort_by_key(|r| (r.sw_if, r.ip));
    let ifs = vm.ext_mut::<crate::interface::Interfaces>();
    let mut out = format!(
        "{:^12}{:^40}{:^6}{:^20}{:^24}\n",
        "Age", "IP", "Flags", "Ethernet", "Interface"
    );
    for r in rows {
        let name = ifs
            .get(crate::interface::SwIfIndex(r.sw_if))
            .map(|i| i.name.clone())
            .unwrap_or_default();
        let age = r
            .age
            .map(|d| format!("{:.4}", d.as_secs_f64()))
            .unwrap_or_else(|| "-".into());
        let _ = writeln!(
            out,
            "{age:^12}{:^40}{:^6}{:^20}{name}",
            r.ip.to_string(),
            if r.is_static { "S" } else { "D" },
            sluice_wire::Mac(r.mac).to_string(),
        );
    }
    Ok(out)
}

fn cli_show_all(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    show_rows(vm, a, true, true)
}

fn cli_show_ip4(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    show_rows(vm, a, true, false)
}

fn cli_show_ip6(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    show_rows(vm, a, false, true)
}

fn cli_set(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let v6 = if a.keyword("ip4") {
        false
    } else if a.keyword("ip6") {
        true
    } else {
        let w = a.word("ip4|ip6")?;
        return Err(CliError::new(format!("expected ip4 or ip6, got `{w}'")));
    };
    let mut cfg = config(vm, v6)?;
    while !a.is_empty() {
        if a.keyword("limit") {
            cfg.limit = a.u32("limit")? as usize;
        } else if a.keyword("age") {
            cfg.age = a.u32("age (seconds)")?;
        } else if a.keyword("recycle") {
            cfg.recycle = true;
        } else if a.keyword("norecycle") {
            cfg.recycle = false;
        } else {
            let w = a.word("option")?;
            return Err(CliError::new(format!(
                "unknown option `{w}' (limit, age, recycle, norecycle)"
            )));
        }
    }
    set_config(vm, v6, cfg)?;
    Ok(String::new())
}

/// The neighbour policy of a family.
pub fn config(vm: &mut Vlib, v6: bool) -> VnetResult<NeighborConfig> {
    if v6 {
        with_aging::<Ip6Control, _>(vm, |a| a.cfg)
    } else {
        with_aging::<Ip4Control, _>(vm, |a| a.cfg)
    }
}

/// `set ip neighbor-config ip4|ip6 ...`: sets a family's neighbour policy.
pub fn set_config(vm: &mut Vlib, v6: bool, cfg: NeighborConfig) -> VnetResult {
    if v6 {
        with_aging::<Ip6Control, _>(vm, |a| a.cfg = cfg)
    } else {
        with_aging::<Ip4Control, _>(vm, |a| a.cfg = cfg)
    }
}

fn cli_show(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    let mut out = String::new();
    for (name, v6) in [("ip4", false), ("ip6", true)] {
        let c = config(vm, v6)?;
        let _ = writeln!(
            out,
            "{name}:\n  limit:{}, age:{}, recycle:{}",
            c.limit, c.age, c.recycle as u8
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_entries_are_probed_then_expire_unless_refreshed() {
        let mut a: Aging<(u32, u32)> = Aging::default();
        a.cfg.age = 2;
        let t0 = Instant::now();
        a.touch((1, 10), t0);
        a.touch((1, 11), t0);
        let all = |_: &(u32, u32)| true;
        assert!(a.scan(t0 + Duration::from_secs(1), all).probe.is_empty());
        let s = a.scan(t0 + Duration::from_secs(2), all);
        assert_eq!(s.probe, vec![(1, 10), (1, 11)]);
        assert!(s.expire.is_empty());
        // Not probed twice; (1, 11) answers the probe.
        let t1 = t0 + Duration::from_millis(2500);
        a.touch((1, 11), t1);
        assert_eq!(
            a.scan(t1, all),
            Scan {
                probe: vec![],
                expire: vec![]
            }
        );
        let s = a.scan(t0 + Duration::from_secs(3), all);
        assert_eq!(s.expire, vec![(1, 10)]);
        // Entries the table no longer has as dynamic are dropped, never reported.
        let s = a.scan(t0 + Duration::from_secs(60), |_| false);
        assert!(s.probe.is_empty() && s.expire.is_empty());
    }

    #[test]
    fn age_zero_never_ages() {
        let mut a: Aging<(u32, u32)> = Aging::default();
        let t0 = Instant::now();
        a.touch((1, 10), t0);
        let s = a.scan(t0 + Duration::from_secs(1_000_000), |_| true);
        assert!(s.probe.is_empty() && s.expire.is_empty());
    }

    #[test]
    fn limit_refuses_or_recycles_the_oldest() {
        let mut a: Aging<(u32, u32)> = Aging::default();
        a.cfg.limit = 2;
        let t0 = Instant::now();
        assert_eq!(a.admit(1), Admit::Yes);
        a.touch((1, 20), t0 + Duration::from_secs(1));
        a.touch((1, 10), t0);
        assert_eq!(a.admit(2), Admit::Refuse);
        a.cfg.recycle = true;
        assert_eq!(a.admit(2), Admit::Evict((1, 10)));
        a.forget(&(1, 10));
        assert_eq!(a.admit(2), Admit::Evict((1, 20)));
    }

    /// A table with nothing but the entries (no adjacencies).
    #[derive(Default)]
    struct Plain {
        entries: Entries<u32>,
        aging: Aging<(u32, u32)>,
    }

    impl Table<u32> for Plain {
        fn split(&mut self) -> (&Entries<u32>, &mut Aging<(u32, u32)>) {
            (&self.entries, &mut self.aging)
        }
        fn add(&mut self, i: u32, ip: u32, mac: [u8; 6], st: bool) -> VnetResult {
            self.entries.insert((i, ip), (mac, st));
            Ok(())
        }
        fn remove(&mut self, i: u32, ip: u32) -> bool {
            self.entries.remove(&(i, ip)).is_some()
        }
    }

    const M1: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const M2: [u8; 6] = [2, 0, 0, 0, 0, 2];

    #[test]
    fn unsolicited_advert_updates_but_never_creates() {
        let mut t = Plain::default();
        let t0 = Instant::now();
        // RFC 4861 §7.2.5: no entry, S clear: discarded (even with O set).
        apply(&mut t, Learned::advert(1, 10, M1, false, true), t0);
        assert!(t.entries.is_empty());
        // A solicited NA (answer to our NS) creates.
        apply(&mut t, Learned::advert(1, 10, M1, true, true), t0);
        assert_eq!(t.entries[&(1, 10)], (M1, false));
        // S clear, O clear, another MAC: the cache is not updated.
        apply(&mut t, Learned::advert(1, 10, M2, false, false), t0);
        assert_eq!(t.entries[&(1, 10)].0, M1);
        // S set, O clear, another MAC: not updated either.
        apply(&mut t, Learned::advert(1, 10, M2, true, false), t0);
        assert_eq!(t.entries[&(1, 10)].0, M1);
        // S clear, O set: the MAC moves, but the entry is not confirmed reachable (its
        // aging clock keeps running from the last confirmation).
        let t1 = t0 + Duration::from_secs(5);
        apply(&mut t, Learned::advert(1, 10, M2, false, true), t1);
        assert_eq!(t.entries[&(1, 10)].0, M2);
        t.aging.cfg.age = 5;
        assert_eq!(t.aging.scan(t1, |_| true).probe, vec![(1, 10)]);
        // A static entry is never touched by adverts.
        t.entries.insert((1, 11), (M1, true));
        apply(&mut t, Learned::advert(1, 11, M2, true, true), t1);
        assert_eq!(t.entries[&(1, 11)], (M1, true));
    }

    #[test]
    fn cli_entries_are_dynamic_unless_static() {
        let mut t = Plain::default();
        t.aging.cfg.age = 1;
        add(&mut t, 1, 10, M1, false, "10").unwrap();
        assert_eq!(t.entries[&(1, 10)], (M1, false));
        let later = Instant::now() + Duration::from_secs(2);
        assert_eq!(t.aging.scan(later, |_| true).probe, vec![(1, 10)]);
        // Made static: no longer aged; and a dynamic add may not replace it.
        add(&mut t, 1, 10, M1, true, "10").unwrap();
        assert_eq!(t.entries[&(1, 10)], (M1, true));
        let e = add(&mut t, 1, 10, M2, false, "10.0.0.1").unwrap_err();
        assert!(e.to_string().contains("`10.0.0.1'"), "{e}");
        let s = t
            .aging
            .scan(later + Duration::from_secs(9), |k| !t.entries[k].1);
        assert!(s.probe.is_empty() && s.expire.is_empty());
    }
}
