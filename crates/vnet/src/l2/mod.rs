//! L2 switching: cross-connects and bridge domains with MAC learning, move detection, aging
//! and flooding. The L2 FIB is an `infra::bihash` read lock-free by every worker; learning
//! events go through a queue to the main thread (one lock per frame that has any), which owns all writes.
//!
//! This module holds the state shared by the nodes, the bridge-domain/L2 FIB control plane
//! and the CLI. Nodes, one file each:
//! - `input.rs`: `l2-input` (internal), the per-packet cross-connect/bridging decision.
//! - `learn.rs`: `l2-learn-process` (process, main thread), learning and aging.

mod input;
mod learn;

pub use input::{L2Counter, L2Input, L2Next};
pub use learn::{LearnCounter, LearnProcess};

use crate::error::{VnetError, VnetResult};
use crate::interface::{Interfaces, SwIfIndex};
use input::BdFlags;
use sluice_cli::{Args, CliError, CommandTree};
use sluice_graph::{NodeKind, NodeRegistration, Vlib};
use sluice_infra::bihash::{Bihash, BihashTable};
use sluice_infra::epoch::Epochs;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

/// `l2-input`.
pub const L2_INPUT: &str = "l2-input";
/// `l2-learn-process`.
pub const LEARN_PROCESS: &str = "l2-learn-process";

const STATIC: u64 = 1 << 32;

/// Most entries the L2 FIB holds (what `show bridge-domain` reports as the learn limit).
const L2FIB_CAPACITY: usize =
    sluice_infra::bihash::MAX_BUCKETS * sluice_infra::bihash::SLOTS * 3 / 4;

/// L2 FIB key: MAC (48 bits) and bridge domain (16 bits).
#[inline(always)]
pub fn key(mac: &[u8], bd: u16) -> u64 {
    let mut k = [0u8; 8];
    k[2..8].copy_from_slice(&mac[..6]);
    u64::from_be_bytes(k) | ((bd as u64) << 48)
}

fn value(sw_if: u32, is_static: bool, stamp: u32) -> u64 {
    sw_if as u64 | if is_static { STATIC } else { 0 } | ((stamp as u64 & 0xff_ffff) << 40)
}

/// Per-bridge-domain settings as the data plane sees them.
#[derive(Clone, Debug, Default)]
pub struct BdCfg {
    /// Learn source MACs.
    pub learn: bool,
    /// Forward known unicast.
    pub forward: bool,
    /// Flood broadcast/multicast.
    pub flood: bool,
    /// Flood unknown unicast.
    pub uu_flood: bool,
    /// Member interfaces.
    pub members: Vec<u32>,
    /// Split-horizon group of each member (same index; 0 = none): a frame received on a
    /// member of group g is never sent to another member of group g.
    pub shg: Vec<u8>,
    /// The BVI (also a member), if any.
    pub bvi: Option<u32>,
}

impl BdCfg {
    /// The split-horizon group of member `i` (0: none, or not a member).
    #[inline(always)]
    fn shg_of(&self, i: u32) -> u8 {
        match self.members.iter().position(|&m| m == i) {
            Some(k) => self.shg.get(k).copied().unwrap_or(0),
            None => 0,
        }
    }

    /// Whether a frame from `rx` (split-horizon group `g`) may leave through member `k`.
    #[inline(always)]
    fn may_send(&self, k: usize, rx: u32, g: u8) -> bool {
        self.members[k] != rx && (g == 0 || self.shg.get(k).copied().unwrap_or(0) != g)
    }
}

/// State shared by the L2 nodes of every thread.
pub struct L2Shared {
    /// The L2 FIB read side.
    pub fib: Arc<BihashTable>,
    /// Learning events (key, rx interface) for the main thread.
    pub learned: Mutex<Vec<(u64, u32)>>,
}

/// Control plane (main thread).
pub struct L2Control {
    fib: Bihash,
    shared: Arc<L2Shared>,
    epochs: Option<Arc<Epochs>>,
    bds: BTreeMap<u16, BdState>,
    started: f64,
    /// The learning queue's other half: swapped with `L2Shared::learned` on each drain, so
    /// both keep their capacity and a worker's push does not allocate.
    learn_spare: Vec<(u64, u32)>,
}

/// A bridge domain as configured.
#[derive(Clone, Debug)]
pub struct BdState {
    /// Data-plane settings.
    pub cfg: BdCfg,
    /// MAC age in minutes (0 = never).
    pub mac_age: u32,
    /// BVI interface, if any.
    pub bvi: Option<u32>,
}

fn lock(c: &Arc<Mutex<L2Control>>) -> MutexGuard<'_, L2Control> {
    match c.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// Handle to the control plane (a `Vlib` extension).
#[derive(Default)]
pub struct L2Main {
    ctl: Option<Arc<Mutex<L2Control>>>,
}

/// Registers `l2-input` and `l2-learn-process`; `features` is the feature-arc next table
/// (`l2-input` starts the `l2-output` arc).
pub fn register(r: &mut crate::plugin::Registrar) {
    let slot = crate::ip4::nodes::arc_slot(r, L2_INPUT);
    let features = r.feature_table();
    let b = &mut r.graph;
    let fib = Bihash::new();
    let shared = Arc::new(L2Shared {
        fib: fib.table().clone(),
        learned: Mutex::new(Vec::new()),
    });
    let ctl = Arc::new(Mutex::new(L2Control {
        fib,
        shared: shared.clone(),
        epochs: None,
        bds: BTreeMap::new(),
        started: 0.0,
        learn_spare: Vec::new(),
    }));
    b.register(
        NodeRegistration::new(L2_INPUT, NodeKind::Internal, move |_| {
            Box::new(L2Input::new(shared.clone(), features.clone(), slot))
        })
        .nexts(L2Next::NAMES)
        .counters(L2Counter::DESCS),
    );
    b.register(
        NodeRegistration::new(LEARN_PROCESS, NodeKind::Process, move |_| {
            Box::new(LearnProcess {
                ctl: ctl.clone(),
                last_age: 0.0,
            })
        })
        .counters(LearnCounter::DESCS),
    );
}

/// Completes the control plane once the runtime exists.
pub fn init(vm: &mut Vlib) {
    let Some(i) = vm.registry.find(LEARN_PROCESS) else {
        return;
    };
    let Some(ctl) = vm.main.node_mut::<LearnProcess>(i).map(|p| p.ctl.clone()) else {
        return;
    };
    {
        let mut c = lock(&ctl);
        c.epochs = Some(vm.shared.epochs.clone());
        c.started = vm.shared.clock.now_secs();
    }
    vm.ext_mut::<L2Main>().ctl = Some(ctl);
}

fn control(vm: &mut Vlib) -> VnetResult<Arc<Mutex<L2Control>>> {
    vm.ext_mut::<L2Main>()
        .ctl
        .clone()
        .ok_or_else(|| VnetError::System("l2 not initialised".into()))
}

/// Pushes a bridge domain's data-plane settings to every thread.
fn publish(vm: &mut Vlib, bd: u16, cfg: Option<BdCfg>) {
    let Some(node) = vm.registry.find(L2_INPUT) else {
        return;
    };
    vm.foreach_thread(move |tg| {
        if let Some(n) = tg.node_mut::<L2Input>(node) {
            let i = bd as usize;
            if n.st.bds.len() <= i {
                n.st.bds.resize(i + 1, None);
                n.st.flags.resize(i + 1, BdFlags::default());
            }
            n.st.flags[i] = BdFlags::of(cfg.as_ref());
            n.st.bds[i] = cfg.clone();
        }
    });
}

/// Registers the L2 CLI.
pub fn register_cli(t: &mut CommandTree<Vlib>) {
    t.add(
        "create bridge-domain",
        "create bridge-domain <id> [learn 0|1] [forward 0|1] [flood 0|1] [uu-flood 0|1] [mac-age <minutes>] [del]",
        cli_create_bd,
    );
    t.add(
        "set interface l2 bridge",
        "set interface l2 bridge <interface> <bridge-domain-id> [bvi] [shg <split-horizon-group>]",
        cli_set_bridge,
    );
    t.add(
        "show bridge-domain",
        "show bridge-domain [<id> [detail|int]]",
        cli_show_bd,
    );
    t.add(
        "show l2fib",
        "show l2fib [verbose | all | bd_id <id>]",
        cli_show_l2fib,
    );
    t.add(
        "set interface l2 tag-rewrite",
        "set interface l2 tag-rewrite <interface> pop 1|pop 2 — sub-interface tags (always popped on input, pushed on output)",
        cli_tag_rewrite,
    );
    t.add(
        "l2fib add",
        "l2fib add <mac> <bridge-domain-id> <interface> [static]",
        cli_l2fib_add,
    );
    t.add(
        "l2fib del",
        "l2fib del <mac> <bridge-domain-id>",
        cli_l2fib_del,
    );
    t.add(
        "test l2fib age",
        "test l2fib age <bridge-domain-id> [advance <minutes>] — run the MAC aging pass now, as if the clock were <minutes> ahead (debug)",
        cli_test_age,
    );
}

fn cli_test_age(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let bd = bd_arg(a)?;
    let advance = if a.keyword("advance") {
        a.u32("minutes")?
    } else {
        0
    };
    a.finish()?;
    let now = vm.shared.clock.now_secs() + advance as f64 * 60.0;
    let c = control(vm)?;
    let mut ctl = lock(&c);
    if !ctl.bds.contains_key(&bd) {
        return Err(CliError::new(format!(
            "no bridge domain `{}'",
            bd_id_shown(bd)
        )));
    }
    let n = ctl.age(now, Some(bd));
    Ok(format!("aged {n} entries\n"))
}

fn flag(a: &mut Args, what: &str) -> Result<bool, CliError> {
    match a.u32(what)? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(CliError::new(format!("{what}: expected 0 or 1, got `{v}'"))),
    }
}

/// The internal id of VPP's default bridge domain 0 (internal id 0 means "not bridged").
pub const BD0: u16 = u16::MAX;

/// A bridge domain's id as the user gave it (`BD0` is 0).
pub fn bd_id_shown(bd: u16) -> u32 {
    if bd == BD0 {
        0
    } else {
        bd as u32
    }
}

/// A bridge-domain id: 0 (VPP's default domain) to 65534.
fn bd_arg(a: &mut Args) -> Result<u16, CliError> {
    let w = a.word("bridge-domain id")?;
    match w.parse::<u16>() {
        Ok(0) => Ok(BD0),
        Ok(v) if v != BD0 => Ok(v),
        _ => Err(CliError::new(format!(
            "bridge-domain id 0..65534 expected, got `{w}'"
        ))),
    }
}

/// A new bridge domain's settings (VPP's defaults: learn, forward, flood, uu-flood on).
fn default_bd() -> BdState {
    BdState {
        cfg: BdCfg {
            learn: true,
            forward: true,
            flood: true,
            uu_flood: true,
            members: Vec::new(),
            shg: Vec::new(),
            bvi: None,
        },
        mac_age: 0,
        bvi: None,
    }
}

/// A bridge domain's settings (`create bridge-domain <id> [learn 0|1] ...`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct BdSettings {
    /// Learn source MACs.
    pub learn: bool,
    /// Forward by the L2 FIB.
    pub forward: bool,
    /// Flood broadcast/multicast.
    pub flood: bool,
    /// Flood unknown unicast.
    pub uu_flood: bool,
    /// MAC age in minutes (0: never).
    pub mac_age: u32,
}

impl Default for BdSettings {
    fn default() -> Self {
        BdSettings {
            learn: true,
            forward: true,
            flood: true,
            uu_flood: true,
            mac_age: 0,
        }
    }
}

/// A bridge domain id as the user gives it (0, VPP's default domain, to 65534) to the
/// internal id (0 is `BD0`).
pub fn bd_id(id: u32) -> VnetResult<u16> {
    match u16::try_from(id) {
        Ok(0) => Ok(BD0),
        Ok(v) if v != BD0 => Ok(v),
        _ => Err(VnetError::invalid(format!(
            "bridge-domain id 0..65534 expected, got `{id}'"
        ))),
    }
}

/// One bridge domain as dumped: id, settings, members (interface, split-horizon group), BVI.
pub type BdDump = (u16, BdSettings, Vec<(u32, u8)>, Option<u32>);

/// The bridge domains.
pub fn bridge_domains(vm: &mut Vlib) -> Vec<BdDump> {
    let Ok(c) = control(vm) else {
        return Vec::new();
    };
    let ctl = lock(&c);
    ctl.bds
        .iter()
        .map(|(&id, b)| {
            (
                id,
                BdSettings {
                    learn: b.cfg.learn,
                    forward: b.cfg.forward,
                    flood: b.cfg.flood,
                    uu_flood: b.cfg.uu_flood,
                    mac_age: b.mac_age,
                },
                b.cfg
                    .members
                    .iter()
                    .map(|&m| (m, b.cfg.shg_of(m)))
                    .collect(),
                b.bvi,
            )
        })
        .collect()
}

fn cli_create_bd(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let bd = bd_arg(a)?;
    if bd == BD0 {
        return Err(CliError::new(
            "No operations on the default bridge domain are supported",
        ));
    }
    let mut st = bridge_domains(vm)
        .into_iter()
        .find(|b| b.0 == bd)
        .map(|b| b.1)
        .unwrap_or_default();
    let mut del = false;
    while !a.is_empty() {
        if a.keyword("learn") {
            st.learn = flag(a, "learn")?;
        } else if a.keyword("forward") {
            st.forward = flag(a, "forward")?;
        } else if a.keyword("flood") {
            st.flood = flag(a, "flood")?;
        } else if a.keyword("uu-flood") {
            st.uu_flood = flag(a, "uu-flood")?;
        } else if a.keyword("mac-age") {
            st.mac_age = a.u32("mac-age minutes")?;
        } else if a.keyword("del") {
            del = true;
        } else if a.keyword("arp-term") || a.keyword("arp-ufwd") {
            flag(a, "arp")?;
        } else {
            a.finish()?;
        }
    }
    bridge_domain_add_del(vm, bd_id_shown(bd), (!del).then_some(st))?;
    Ok(String::new())
}

/// Creates or updates bridge domain `bd` with `settings` (members are kept), or deletes it
/// (`None`; it must have no members).
pub fn bridge_domain_add_del(vm: &mut Vlib, bd: u32, settings: Option<BdSettings>) -> VnetResult {
    let bd = bd_id(bd)?;
    if bd == BD0 {
        return Err(VnetError::invalid(
            "No operations on the default bridge domain are supported",
        ));
    }
    let c = control(vm)?;
    let Some(st) = settings else {
        let mut ctl = lock(&c);
        if ctl.bds.get(&bd).is_some_and(|b| !b.cfg.members.is_empty()) {
            return Err(VnetError::InUse(format!(
                "bridge domain {bd} still has interfaces"
            )));
        }
        if ctl.bds.remove(&bd).is_none() {
            return Err(VnetError::NotFound(format!("no bridge domain {bd}")));
        }
        drop(ctl);
        publish(vm, bd, None);
        return Ok(());
    };
    let cfg = {
        let mut ctl = lock(&c);
        let b = ctl.bds.entry(bd).or_insert_with(default_bd);
        b.cfg.learn = st.learn;
        b.cfg.forward = st.forward;
        b.cfg.flood = st.flood;
        b.cfg.uu_flood = st.uu_flood;
        b.mac_age = st.mac_age;
        b.cfg.clone()
    };
    publish(vm, bd, Some(cfg));
    Ok(())
}

fn remove_member(vm: &mut Vlib, c: &Arc<Mutex<L2Control>>, i: u32) {
    let changed: Vec<(u16, BdCfg)> = {
        let mut ctl = lock(c);
        ctl.bds
            .iter_mut()
            .filter(|(_, b)| b.cfg.members.contains(&i))
            .map(|(&id, b)| {
                if let Some(k) = b.cfg.members.iter().position(|&m| m == i) {
                    b.cfg.members.remove(k);
                    if k < b.cfg.shg.len() {
                        b.cfg.shg.remove(k);
                    }
                }
                if b.bvi == Some(i) {
                    b.bvi = None;
                    b.cfg.bvi = None;
                }
                (id, b.cfg.clone())
            })
            .collect()
    };
    // Static entries pointing at the interface (the BVI's own MAC) go with it.
    {
        let mut ctl = lock(c);
        if let Some(ep) = ctl.epochs.clone() {
            let stale: Vec<u64> = ctl
                .fib
                .iter()
                .filter(|&(_, v)| v as u32 == i && v & STATIC != 0)
                .map(|(k, _)| k)
                .collect();
            for k in stale {
                ctl.fib.remove(&ep, k);
            }
        }
    }
    for (id, cfg) in changed {
        publish(vm, id, Some(cfg));
    }
}

fn cli_set_bridge(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let i = crate::cli::interface_arg(vm, a)?;
    let bd = bd_arg(a)?;
    let bvi = a.keyword("bvi");
    let shg = if a.keyword("shg") {
        let w = a.u32("split-horizon group")?;
        u8::try_from(w)
            .map_err(|_| CliError::new(format!("split-horizon group `{w}' out of range (0-255)")))?
    } else {
        0
    };
    a.finish()?;
    set_bridge(vm, i, bd_id_shown(bd), bvi, shg)?;
    Ok(String::new())
}

/// `set interface l2 bridge <if> <bd> [bvi] [shg <n>]`: the interface joins the bridge domain
/// (leaving any other and any cross-connect); a BVI must be a loopback.
pub fn set_bridge(vm: &mut Vlib, i: SwIfIndex, bd: u32, bvi: bool, shg: u8) -> VnetResult {
    crate::interface::check(vm, i)?;
    crate::interface::check_l2(vm, i)?;
    let bd = bd_id(bd)?;
    let bvi_mac = if bvi {
        let ifs = vm.ext_mut::<Interfaces>();
        match ifs.get(i) {
            Some(x) if x.driver == "loopback" => Some(x.mac),
            _ => {
                return Err(VnetError::invalid(
                    "a BVI must be a loopback interface (create loopback interface)",
                ))
            }
        }
    } else {
        None
    };
    let c = control(vm)?;
    // As VPP: a missing bridge domain is created with its defaults.
    let created = match lock(&c).bds.entry(bd) {
        std::collections::btree_map::Entry::Vacant(e) => Some(e.insert(default_bd()).cfg.clone()),
        std::collections::btree_map::Entry::Occupied(_) => None,
    };
    if let Some(cfg) = created {
        publish(vm, bd, Some(cfg));
    }
    if bvi
        && lock(&c)
            .bds
            .get(&bd)
            .is_some_and(|b| b.bvi.is_some_and(|x| x != i.0))
    {
        return Err(VnetError::Exists(format!(
            "bridge domain {} already has a BVI",
            bd_id_shown(bd)
        )));
    }
    remove_member(vm, &c, i.0);
    let cfg = {
        let mut ctl = lock(&c);
        if let (Some(mac), Some(ep)) = (bvi_mac, ctl.epochs.clone()) {
            // The BVI's MAC is a static entry: frames to it are routed, never flooded.
            ctl.fib
                .insert(&ep, key(&mac, bd), value(i.0, true, 0))
                .map_err(|e| VnetError::Full(e.to_string()))?;
        }
        let Some(b) = ctl.bds.get_mut(&bd) else {
            return Err(VnetError::NotFound(format!("no bridge domain {bd}")));
        };
        b.cfg.members.push(i.0);
        b.cfg.shg.push(shg);
        if bvi {
            b.bvi = Some(i.0);
            b.cfg.bvi = Some(i.0);
        }
        b.cfg.clone()
    };
    publish(vm, bd, Some(cfg));
    crate::interface::with_if_attr(vm, i.0, |x| {
        x.l2_xc.store(0, Ordering::Relaxed);
        x.l2_bd.store(bd as u32, Ordering::Relaxed);
    });
    crate::interface::changed(vm, i, crate::interface::IfChange::L2Mode);
    Ok(())
}

/// `set interface l3`: leaves any bridge domain.
pub fn leave_bridge(vm: &mut Vlib, i: SwIfIndex) {
    if let Ok(c) = control(vm) {
        remove_member(vm, &c, i.0);
    }
    // A change (and a hook call) only if it was in a bridge domain: `set interface l3` or
    // `l2 xconnect` of an interface that was not report their own change once.
    let was = crate::interface::with_if_attr(vm, i.0, |x| x.l2_bd.swap(0, Ordering::Relaxed));
    if was.is_some_and(|bd| bd != 0) {
        crate::interface::changed(vm, i, crate::interface::IfChange::L2Mode);
    }
}

/// VPP's `%=Ns`: `t` centred in `n` columns (the extra space on the right).
fn centre(t: &str, n: usize) -> String {
    format!("{t:^n$}")
}

/// The tag rewrite of a bridged interface as VPP's `VLAN-Tag-Rewrite` column: Sluice pops
/// a sub-interface's tags on input and pushes them on output.
fn vtr_of(vm: &mut Vlib, i: u32) -> &'static str {
    match vm.ext_mut::<crate::subif::SubIfs>().subs.get(&i) {
        Some((s, _)) if s.inner != 0 => "pop-2",
        Some(_) => "pop-1",
        None => "none",
    }
}

/// `show bridge-domain [<id> [detail|int]]`, VPP's columns. Sluice has no sequence numbers
/// (BSN, ISN: 0), ARP termination or learn limit (Learn-limit: the L2 FIB's size).
fn cli_show_bd(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let only = if a.is_empty() { None } else { Some(bd_arg(a)?) };
    let detail = a.keyword("detail") || a.keyword("det");
    let intf = a.keyword("int");
    a.finish()?;
    if only == Some(BD0) {
        return Err(CliError::new(
            "No operations on the default bridge domain are supported",
        ));
    }
    let nm = crate::interface::names(vm);
    let c = control(vm)?;
    let bds: Vec<(u16, BdState)> = {
        let ctl = lock(&c);
        if let Some(o) = only {
            if !ctl.bds.contains_key(&o) {
                return Err(CliError::new(format!("No such bridge domain {o}")));
            }
        }
        // As VPP, the default domain 0 is not listed.
        ctl.bds
            .iter()
            .filter(|(id, _)| only.is_none_or(|o| o == **id) && **id != BD0)
            .map(|(id, b)| (*id, b.clone()))
            .collect()
    };
    let learned: BTreeMap<u16, usize> = {
        let ctl = lock(&c);
        let mut m = BTreeMap::new();
        for (k, v) in ctl.fib.iter() {
            if v & STATIC == 0 {
                *m.entry((k >> 48) as u16).or_default() += 1;
            }
        }
        m
    };
    let mut out = String::new();
    let onoff = |b: bool| if b { "on" } else { "off" };
    for (n, (id, b)) in bds.iter().enumerate() {
        if n == 0 {
            let _ = writeln!(
                out,
                "{} {} {} {} {} {} {} {} {} {} {} {} {}",
                centre("BD-ID", 8),
                centre("Index", 7),
                centre("BSN", 4),
                centre("Age(min)", 9),
                centre("Learning", 9),
                centre("U-Forwrd", 9),
                centre("UU-Flood", 11),
                centre("Flooding", 9),
                centre("ARP-Term", 9),
                centre("arp-ufwd", 9),
                centre("Learn-count", 8),
                centre("Learn-limit", 8),
                centre("BVI-Intf", 11)
            );
        }
        let age = if b.mac_age == 0 {
            "off".to_string()
        } else {
            b.mac_age.to_string()
        };
        let bvi = b
            .cfg
            .bvi
            .and_then(|i| nm.get(&i).cloned())
            .unwrap_or_else(|| "N/A".into());
        let _ = writeln!(
            out,
            "{} {} {} {} {} {} {} {} {} {} {} {} {}",
            centre(&bd_id_shown(*id).to_string(), 8),
            centre(&id.to_string(), 7),
            centre("0", 4),
            centre(&age, 9),
            centre(onoff(b.cfg.learn), 9),
            centre(onoff(b.cfg.forward), 9),
            centre(if b.cfg.uu_flood { "flood" } else { "drop" }, 11),
            centre(onoff(b.cfg.flood), 9),
            centre("off", 9),
            centre("off", 9),
            centre(&learned.get(id).copied().unwrap_or(0).to_string(), 8),
            centre(&L2FIB_CAPACITY.to_string(), 8),
            centre(&bvi, 11)
        );
        if detail || intf {
            for (k, m) in b.cfg.members.iter().enumerate() {
                if k == 0 {
                    let _ = writeln!(
                        out,
                        "\n{}{}{}{}{}{}{}",
                        centre("Interface", 30),
                        centre("If-idx", 7),
                        centre("ISN", 5),
                        centre("SHG", 5),
                        centre("BVI", 5),
                        centre("TxFlood", 9),
                        centre("VLAN-Tag-Rewrite", 30)
                    );
                }
                let vtr = vtr_of(vm, *m);
                let _ = writeln!(
                    out,
                    "{}{}{}{}{}{}{}",
                    centre(&nm.get(m).cloned().unwrap_or_default(), 30),
                    centre(&m.to_string(), 7),
                    centre("0", 5),
                    centre(&b.cfg.shg_of(*m).to_string(), 5),
                    centre(if b.cfg.bvi == Some(*m) { "*" } else { "-" }, 5),
                    centre("*", 9),
                    centre(vtr, 30)
                );
            }
        }
    }
    Ok(out)
}

/// `show l2fib verbose|all|bd_id <id>`: VPP's table. Sluice keeps no entry sequence
/// numbers (BSN-ISN `0/0`) nor filter entries; BD-Idx is the bridge domain's id.
fn show_l2fib_verbose(vm: &mut Vlib, only: Option<u16>) -> Result<String, CliError> {
    let nm = crate::interface::names(vm);
    let c = control(vm)?;
    let now_min = {
        let ctl = lock(&c);
        ((vm.shared.clock.now_secs() - ctl.started).max(0.0) / 60.0) as u32
    };
    let ctl = lock(&c);
    let mut v: Vec<(u64, u64)> = ctl
        .fib
        .iter()
        .filter(|(k, _)| only.is_none_or(|o| (k >> 48) as u16 == o))
        .collect();
    v.sort();
    let total = ctl.fib.iter().count();
    let learned = ctl.fib.iter().filter(|(_, v)| v & STATIC == 0).count();
    let mut out = String::new();
    for (n, (k, val)) in v.iter().enumerate() {
        if n == 0 {
            let _ = writeln!(
                out,
                "{}{}{}{}{}{}{}{}{}",
                centre("Mac-Address", 19),
                centre("BD-Idx", 7),
                centre("If-Idx", 7),
                centre("BSN-ISN", 8),
                centre("Age(min)", 9),
                centre("static", 7),
                centre("filter", 7),
                centre("bvi", 5),
                centre("Interface-Name", 30)
            );
        }
        let m = (k & 0xffff_ffff_ffff).to_be_bytes();
        let bd = (k >> 48) as u16;
        let sw = *val as u32;
        let is_static = val & STATIC != 0;
        let b = ctl.bds.get(&bd);
        let age = if is_static {
            "no".to_string()
        } else if b.is_none_or(|b| b.mac_age == 0) {
            "-".to_string()
        } else {
            let stamp = ((val >> 40) & 0xff_ffff) as u32 / 60;
            now_min.saturating_sub(stamp).to_string()
        };
        let bvi = b.is_some_and(|b| b.cfg.bvi == Some(sw));
        let _ = writeln!(
            out,
            "{}{}{} {}{}{}{}{}{}",
            centre(
                &sluice_wire::Mac([m[2], m[3], m[4], m[5], m[6], m[7]]).to_string(),
                19
            ),
            centre(&bd_id_shown(bd).to_string(), 7),
            centre(&sw.to_string(), 7),
            centre("0/0", 8),
            centre(&age, 9),
            centre(if is_static { "*" } else { "-" }, 7),
            centre("-", 7),
            centre(if bvi { "*" } else { "-" }, 5),
            centre(&nm.get(&sw).cloned().unwrap_or_else(|| "N/A".into()), 30)
        );
    }
    if total == 0 {
        out.push_str("no l2fib entries\n");
    } else {
        let _ = writeln!(
            out,
            "L2FIB total/learned entries: {total}/{learned}  Last scan time: 0.0000e0sec  Learn limit: {L2FIB_CAPACITY} "
        );
    }
    Ok(out)
}

/// `set interface l2 tag-rewrite <interface> disable|pop 1|pop 2|push ...|translate ...`.
/// Sluice always pops a sub-interface's own tags on input and pushes them back on output,
/// so `pop` matching the sub-interface's tag count is accepted as what it already does;
/// anything else cannot be followed and says so.
fn cli_tag_rewrite(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let i = crate::cli::interface_arg(vm, a)?;
    let depth = match vm.ext_mut::<crate::subif::SubIfs>().subs.get(&i.0) {
        Some((s, _)) if s.inner != 0 => 2,
        Some(_) => 1,
        None => 0,
    };
    if a.keyword("pop") {
        let n = a.u32("1|2")?;
        a.finish()?;
        if n == depth {
            return Ok(String::new());
        }
        return Err(CliError::new(format!(
            "set interface l2 tag-rewrite pop {n}: Sluice pops exactly a sub-interface's own tags ({depth} here); create the sub-interface with the tags to pop (create sub-interfaces)"
        )));
    }
    let what = a.word("disable|pop|push|translate")?;
    Err(CliError::new(format!(
        "set interface l2 tag-rewrite {what}: not supported; a bridged sub-interface (create sub-interfaces <if> <id> dot1q <vlan>) has its tag popped on input and pushed on output"
    )))
}

fn cli_show_l2fib(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    // `verbose`, `all` and `bd_id` print VPP's table; plain `show l2fib` Sluice's short one
    // (VPP prints only the entry count).
    let mut verbose = false;
    let mut only = None;
    while !a.is_empty() {
        if a.keyword("all") || a.keyword("verbose") {
            verbose = true;
        } else if a.keyword("bd_id") || a.keyword("bd-id") {
            only = Some(bd_arg(a)?);
            verbose = true;
        } else {
            a.finish()?;
        }
    }
    if verbose {
        return show_l2fib_verbose(vm, only);
    }
    let nm = crate::interface::names(vm);
    let c = control(vm)?;
    let ctl = lock(&c);
    let mut v: Vec<(u64, u64)> = ctl
        .fib
        .iter()
        .filter(|(k, _)| only.is_none_or(|o| (k >> 48) as u16 == o))
        .collect();
    v.sort();
    let mut out = format!(
        "{:<20}{:>6}{:>16}{:>8}\n",
        "Mac-Address", "BD-Idx", "Interface", "Static"
    );
    for (k, val) in &v {
        let m = (k & 0xffff_ffff_ffff).to_be_bytes();
        let _ = writeln!(
            out,
            "{:<20}{:>6}{:>16}{:>8}",
            sluice_wire::Mac([m[2], m[3], m[4], m[5], m[6], m[7]]).to_string(),
            bd_id_shown((k >> 48) as u16),
            nm.get(&(*val as u32)).cloned().unwrap_or_default(),
            if val & STATIC != 0 { "yes" } else { "no" }
        );
    }
    let _ = writeln!(out, "{} l2fib entries", v.len());
    Ok(out)
}

fn parse_mac(a: &mut Args) -> Result<[u8; 6], CliError> {
    let w = a.word("MAC address")?;
    w.parse::<sluice_wire::Mac>()
        .map(|m| m.0)
        .map_err(|_| CliError::new(format!("bad MAC address `{w}'")))
}

fn cli_l2fib_add(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let mac = parse_mac(a)?;
    let bd = bd_arg(a)?;
    let i = crate::cli::interface_arg(vm, a)?;
    let st = a.keyword("static");
    a.finish()?;
    l2fib_add(vm, mac, bd_id_shown(bd), i, st)?;
    Ok(String::new())
}

/// `l2fib add <mac> <bd> <if> [static]`.
pub fn l2fib_add(
    vm: &mut Vlib,
    mac: [u8; 6],
    bd: u32,
    i: SwIfIndex,
    is_static: bool,
) -> VnetResult {
    crate::interface::check(vm, i)?;
    let bd = bd_id(bd)?;
    let c = control(vm)?;
    let mut ctl = lock(&c);
    if !ctl.bds.contains_key(&bd) {
        return Err(VnetError::NotFound(format!(
            "bridge domain {} does not exist",
            bd_id_shown(bd)
        )));
    }
    let ep = ctl
        .epochs
        .clone()
        .ok_or_else(|| VnetError::System("l2 not initialised".into()))?;
    let now = (vm.shared.clock.now_secs() - ctl.started).max(0.0) as u32;
    ctl.fib
        .insert(&ep, key(&mac, bd), value(i.0, is_static, now))
        .map(|_| ())
        .map_err(|e| VnetError::Full(e.to_string()))
}

fn cli_l2fib_del(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let mac = parse_mac(a)?;
    let bd = bd_arg(a)?;
    a.finish()?;
    l2fib_del(vm, mac, bd_id_shown(bd))?;
    Ok(String::new())
}

/// `l2fib del <mac> <bd>`.
pub fn l2fib_del(vm: &mut Vlib, mac: [u8; 6], bd: u32) -> VnetResult {
    let bd = bd_id(bd)?;
    let c = control(vm)?;
    let mut ctl = lock(&c);
    let ep = ctl
        .epochs
        .clone()
        .ok_or_else(|| VnetError::System("l2 not initialised".into()))?;
    ctl.fib
        .remove(&ep, key(&mac, bd))
        .map(|_| ())
        .ok_or_else(|| {
            VnetError::NotFound(format!(
                "no l2fib entry {} in bd {}",
                sluice_wire::Mac(mac),
                bd_id_shown(bd)
            ))
        })
}

/// The L2 FIB of bridge domain `only` (all when `None`): (MAC, bridge domain, interface,
/// static), sorted.
pub fn l2fib_entries(vm: &mut Vlib, only: Option<u16>) -> Vec<([u8; 6], u16, u32, bool)> {
    let Ok(c) = control(vm) else {
        return Vec::new();
    };
    let ctl = lock(&c);
    let mut v: Vec<(u64, u64)> = ctl
        .fib
        .iter()
        .filter(|(k, _)| only.is_none_or(|o| (k >> 48) as u16 == o))
        .collect();
    v.sort();
    v.into_iter()
        .map(|(k, val)| {
            let m = (k & 0xffff_ffff_ffff).to_be_bytes();
            (
                [m[2], m[3], m[4], m[5], m[6], m[7]],
                (k >> 48) as u16,
                val as u32,
                val & STATIC != 0,
            )
        })
        .collect()
}
