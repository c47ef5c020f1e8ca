//! `policer`: token-bucket policers (VPP's policer CLI) on interface input and output.
//!
//! ```text
//! configure policer name <n> [type 1r2c|1r3c|2r3c-2698|2r3c-4115] cir <r> cb <b>
//!     [eir <r>] [eb <b>] [rate kbps|pps] [round closest|up|down]
//!     [conform-action <a>] [exceed-action <a>] [violate-action <a>]
//!     (<a>: transmit | drop | mark-and-transmit <dscp>; `policer add name ...` is the same)
//! policer del name <n>
//! policer input [unapply] name <n> <interface>
//! policer output [unapply] name <n> <interface>
//! show policer [name <n>]
//! test policer clock manual|real|advance <usec>      # Sluice only: a deterministic clock
//! ```
//!
//! Buckets are exact integer arithmetic ([`bucket`]): no rounding, so `round` is accepted
//! and has no effect. Bytes counted are the IP packet's (L3) length. Defaults as VPP's:
//! type 1r2c, rate kbps, conform transmit, exceed drop, violate drop.
//!
//! Threads: a policer's buckets and counters sit behind one mutex; a node takes it once per
//! run of consecutive packets of the frame policed by the same policer (so workers sharing
//! a policer serialise on it per run, never per packet, and stay exact).
//!
//! Nodes, one per family and direction, each a feature of the arc named:
//! `policer-input-ip4` (`ip4-unicast`), `policer-input-ip6` (`ip6-unicast`),
//! `policer-output-ip4` (`ip4-output`), `policer-output-ip6` (`ip6-output`).
//! - uses: input: the IP header at `current_data` and `rx_if`; output: the IP header after
//!   the 14-byte Ethernet header the rewrite wrote, and `tx_if`.
//! - does: colours the packet with the interface's policer and applies the colour's action;
//!   `mark-and-transmit` rewrites the DSCP (IPv4: header checksum updated incrementally).
//! - next: `drop` (`error-drop`) for dropping actions and malformed packets; `pass`: the arc's
//!   next feature or its end (`ip4-lookup`/`ip6-lookup`, `interface-output`).
//! - counters: `conform`, `exceed`, `violate` (info: packets by colour); drops: `drop`
//!   (the colour's action is drop), `malformed` (no IP header).

pub mod api;
pub mod bucket;

use bucket::{Bucket, Kind, Params, RateType};
use sluice_buffer::BufIdx;
use sluice_cli::{Args, CliError};
use sluice_graph::{Cx, NodeFn, NodeKind, NodeRegistration, Vlib, FRAME_SIZE};
use sluice_vnet::error::{VnetError, VnetResult};
use sluice_vnet::feature::{FeatureDef, FeatureNext};
use sluice_vnet::plugin::{Plugin, RegisterError, Registrar};
use sluice_vnet::Interfaces;
use std::any::Any;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// The nodes: (name, arc, IPv6, output, next arc names in [`PolicerNext`] order).
const NODES: [(&str, &str, bool, bool, &[&str]); 4] = [
    (
        "policer-input-ip4",
        "ip4-unicast",
        false,
        false,
        PolicerNext::NAMES,
    ),
    (
        "policer-input-ip6",
        "ip6-unicast",
        true,
        false,
        &["error-drop", "ip6-lookup"],
    ),
    (
        "policer-output-ip4",
        "ip4-output",
        false,
        true,
        &["error-drop", "interface-output"],
    ),
    (
        "policer-output-ip6",
        "ip6-output",
        true,
        true,
        &["error-drop", "interface-output"],
    ),
];

sluice_graph::counters! {
    /// The policer nodes' counters.
    pub enum PolicerCounter {
        /// Conform packets.
        Conform => info("conform", "conform packets"),
        /// Exceed packets.
        Exceed => info("exceed", "exceed packets"),
        /// Violate packets.
        Violate => info("violate", "violate packets"),
        /// Dropped by the policer action.
        Drop => error("drop", "dropped by the policer action"),
        /// Packet too short for its IP header.
        Malformed => error("malformed", "packet too short for its IP header"),
    }
}

sluice_graph::arcs! {
    /// The policer nodes' next arcs (the IPv4 input nodes' targets; the others' in [`NODES`]).
    pub enum PolicerNext {
        /// Dropped packets.
        Drop => "error-drop",
        /// The arc's next feature or its end.
        Pass => "ip4-lookup",
    }
}

/// What to do with a packet of a colour.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Drop.
    Drop,
    /// Forward unchanged.
    Transmit,
    /// Set the DSCP and forward.
    MarkAndTransmit(u8),
}

/// DSCP names VPP accepts.
const DSCP_NAMES: [(&str, u8); 21] = [
    ("CS0", 0),
    ("CS1", 8),
    ("AF11", 10),
    ("AF12", 12),
    ("AF13", 14),
    ("CS2", 16),
    ("AF21", 18),
    ("AF22", 20),
    ("AF23", 22),
    ("CS3", 24),
    ("AF31", 26),
    ("AF32", 28),
    ("AF33", 30),
    ("CS4", 32),
    ("AF41", 34),
    ("AF42", 36),
    ("AF43", 38),
    ("CS5", 40),
    ("EF", 46),
    ("CS6", 48),
    ("CS7", 56),
];

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::Drop => f.write_str("drop"),
            Action::Transmit => f.write_str("transmit"),
            Action::MarkAndTransmit(d) => match DSCP_NAMES.iter().find(|(_, v)| v == d) {
                Some((n, _)) => write!(f, "mark-and-transmit {n}"),
                None => write!(f, "mark-and-transmit {d}"),
            },
        }
    }
}

/// A policer's configuration.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Rates, bursts, algorithm.
    pub params: Params,
    /// Actions for conform, exceed, violate.
    pub actions: [Action; 3],
}

/// A policer's mutable state.
pub struct State {
    /// The buckets.
    pub bucket: Bucket,
    /// Packets by colour.
    pub pkts: [u64; 3],
    /// Bytes by colour.
    pub bytes: [u64; 3],
}

/// A policer.
pub struct Policer {
    /// Its name.
    pub name: String,
    /// Its configuration.
    pub cfg: Config,
    /// Buckets and counters.
    pub state: Mutex<State>,
}

/// What the nodes read: the policer of each interface and direction.
#[derive(Default)]
pub struct Bindings {
    input: Vec<Option<Arc<Policer>>>,
    output: Vec<Option<Arc<Policer>>>,
}

/// The time source: the TSC, or a manual nanosecond clock (`test policer clock`).
#[derive(Default)]
pub struct TimeSource {
    manual: AtomicBool,
    ns: AtomicU64,
}

impl TimeSource {
    /// (now in ticks, ticks per second).
    #[inline(always)]
    pub fn now(&self, clock: &sluice_infra::clock::Clock) -> (u64, u64) {
        if self.manual.load(Ordering::Relaxed) {
            (self.ns.load(Ordering::Relaxed), 1_000_000_000)
        } else {
            (clock.now_tsc(), clock.hz() as u64)
        }
    }
}

/// Shared state (a `Vlib` extension through [`PolicerMain`]).
#[derive(Default)]
pub struct Shared {
    threads: OnceLock<Box<[Mutex<Arc<Bindings>>]>>,
    /// The clock.
    pub time: TimeSource,
}

/// The control plane.
#[derive(Default)]
pub struct PolicerMain {
    /// Shared with the nodes.
    pub shared: Arc<Shared>,
    /// Policers by name.
    pub policers: BTreeMap<String, Arc<Policer>>,
    /// Input bindings: sw_if_index -> policer name.
    pub input: BTreeMap<u32, String>,
    /// Output bindings.
    pub output: BTreeMap<u32, String>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl Shared {
    fn threads(&self) -> &[Mutex<Arc<Bindings>>] {
        self.threads.get().map(|t| &t[..]).unwrap_or(&[])
    }
}

/// The IP packet's length and, when `dscp` is given, rewrites its DSCP. `None`: no IP
/// header.
#[inline(always)]
fn len_and_mark(d: &mut [u8], v6: bool, dscp: Option<u8>) -> Option<u32> {
    if v6 {
        let h = d.get_mut(..40)?;
        let len = 40 + u16::from_be_bytes([h[4], h[5]]) as u32;
        if let Some(v) = dscp {
            // Traffic class: the low 4 bits of byte 0 and the high 4 of byte 1.
            let tc = (h[0] << 4) | (h[1] >> 4);
            let tc = (v << 2) | (tc & 3);
            h[0] = (h[0] & 0xf0) | (tc >> 4);
            h[1] = (h[1] & 0x0f) | (tc << 4);
        }
        Some(len)
    } else {
        let h = d.get_mut(..20)?;
        let len = u16::from_be_bytes([h[2], h[3]]) as u32;
        if let Some(v) = dscp {
            let old = u16::from_be_bytes([h[0], h[1]]);
            h[1] = (v << 2) | (h[1] & 3);
            let new = u16::from_be_bytes([h[0], h[1]]);
            let c = u16::from_be_bytes([h[10], h[11]]);
            let c = sluice_wire::checksum::update_u16(c, old, new);
            h[10..12].copy_from_slice(&c.to_be_bytes());
        }
        Some(len)
    }
}

struct PolicerNode {
    v6: bool,
    out: bool,
    shared: Arc<Shared>,
    features: Arc<FeatureNext>,
    slot: usize,
    nexts: Vec<u16>,
}

impl NodeFn for PolicerNode {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        let arena = cx.arena();
        let n = frame.len().min(FRAME_SIZE);
        let frame = &frame[..n];
        let binds = match self.shared.threads().get(cx.thread()) {
            Some(t) => lock(t).clone(),
            None => Arc::default(),
        };
        let list = if self.out {
            &binds.output
        } else {
            &binds.input
        };
        let clock = cx.shared().clock;
        let (now, _) = self.shared.time.now(&clock);
        let off = if self.out { 14 } else { 0 };
        let mut counts = [0u64; 3];
        let mut held: Option<(*const Policer, MutexGuard<'_, State>)> = None;
        self.nexts.clear();
        for &bi in frame {
            // SAFETY: the dispatcher hands this node exclusive ownership of every index in
            // `frame`; each index appears once and the view lives only for this iteration.
            let mut b = unsafe { arena.buffer(bi) };
            let sw = if self.out { b.hdr.tx_if } else { b.hdr.rx_if };
            let pass = self
                .features
                .next(self.slot, sw, PolicerNext::Pass.next())
                .0;
            let Some(p) = list.get(sw as usize).and_then(|p| p.as_ref()) else {
                self.nexts.push(pass);
                continue;
            };
            let Some(len) = b
                .data_mut()
                .get_mut(off..)
                .and_then(|d| len_and_mark(d, self.v6, None))
            else {
                b.hdr.error = cx.error(PolicerCounter::Malformed);
                self.nexts.push(PolicerNext::Drop as u16);
                continue;
            };
            if held.as_ref().map(|h| h.0) != Some(Arc::as_ptr(p)) {
                // Release the previous policer before taking the next (never two at once).
                drop(held.take());
            }
            let st = &mut held
                .get_or_insert_with(|| (Arc::as_ptr(p), lock(&p.state)))
                .1;
            let c = st.bucket.police(len, now) as usize;
            st.pkts[c] += 1;
            st.bytes[c] += len as u64;
            counts[c] += 1;
            match p.cfg.actions[c] {
                Action::Drop => {
                    b.hdr.error = cx.error(PolicerCounter::Drop);
                    self.nexts.push(PolicerNext::Drop as u16);
                }
                Action::Transmit => self.nexts.push(pass),
                Action::MarkAndTransmit(d) => {
                    if let Some(h) = b.data_mut().get_mut(off..) {
                        len_and_mark(h, self.v6, Some(d));
                    }
                    self.nexts.push(pass);
                }
            }
        }
        drop(held);
        let by_colour = [
            PolicerCounter::Conform,
            PolicerCounter::Exceed,
            PolicerCounter::Violate,
        ];
        for (&c, &k) in by_colour.iter().zip(&counts) {
            if k > 0 {
                cx.count(c, k);
            }
        }
        cx.enqueue_to_next(frame, &self.nexts);
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// The plugin.
pub struct PolicerPlugin;

/// This plugin, for the daemon's plugin list.
pub static PLUGIN: PolicerPlugin = PolicerPlugin;

const PARAMS_HELP: &str = "[type 1r2c | 1r3c | 2r3c-2698 | 2r3c-4115] [cir <cir>] [cb <cb>] [eir <eir>] [eb <eb>] [rate kbps | pps] [round closest | up | down] [conform-action drop | transmit | mark-and-transmit <dscp>] [exceed-action drop | transmit | mark-and-transmit <dscp>] [violate-action drop | transmit | mark-and-transmit <dscp>]";

impl Plugin for PolicerPlugin {
    fn name(&self) -> &'static str {
        "policer"
    }
    fn version(&self) -> &'static str {
        env!("CARGO_PKG_VERSION")
    }
    fn description(&self) -> &'static str {
        "Policers (token buckets: 1r2c, RFC 2697, 2698, 4115)"
    }
    fn register(&self, r: &mut Registrar) -> Result<(), RegisterError> {
        let shared = r.staged.get_mut::<PolicerMain>().shared.clone();
        let features = r.feature_table();
        for (name, arc, v6, out, arcs) in NODES {
            let slot = r.feature(FeatureDef {
                arc,
                node: name,
                runs_before: &[],
                runs_after: &[],
                // Meters single packets.
                takes_gso: false,
            })?;
            let (sh, f) = (shared.clone(), features.clone());
            r.node(
                NodeRegistration::new(name, NodeKind::Internal, move |_| {
                    Box::new(PolicerNode {
                        v6,
                        out,
                        shared: sh.clone(),
                        features: f.clone(),
                        slot,
                        nexts: Vec::with_capacity(FRAME_SIZE),
                    })
                })
                .nexts(arcs)
                .counters(PolicerCounter::DESCS),
            );
        }
        r.cli(
            "configure policer",
            &format!("configure policer name <name> {PARAMS_HELP}"),
            cli_add,
        );
        r.cli(
            "policer add",
            &format!("policer add name <name> {PARAMS_HELP}"),
            cli_add,
        );
        r.cli("policer del", "policer del name <name>", cli_del);
        r.cli(
            "policer input",
            "policer input [unapply] name <name> <interface>",
            cli_input,
        );
        r.cli(
            "policer output",
            "policer output [unapply] name <name> <interface>",
            cli_output,
        );
        r.cli("show policer", "show policer [name <name>]", cli_show);
        r.cli(
            "test policer clock",
            "test policer clock manual | real | advance <usec>",
            cli_clock,
        );
        api::register(&mut r.api);
        Ok(())
    }
    fn init(&self, vm: &mut Vlib) -> Result<(), String> {
        let n = vm.n_threads();
        let _ = vm
            .ext_mut::<PolicerMain>()
            .shared
            .threads
            .set((0..n).map(|_| Mutex::new(Arc::default())).collect());
        const FEATURES: [&str; 4] = [NODES[0].0, NODES[1].0, NODES[2].0, NODES[3].0];
        sluice_vnet::runconf::register_section(vm, "policer", running_config, &FEATURES);
        Ok(())
    }
}

/// Hands every thread the bindings in force.
fn publish(m: &PolicerMain) {
    let resolve = |b: &BTreeMap<u32, String>| {
        let mut v: Vec<Option<Arc<Policer>>> = Vec::new();
        for (&sw, name) in b {
            if v.len() <= sw as usize {
                v.resize(sw as usize + 1, None);
            }
            v[sw as usize] = m.policers.get(name).cloned();
        }
        v
    };
    let b = Arc::new(Bindings {
        input: resolve(&m.input),
        output: resolve(&m.output),
    });
    for t in m.shared.threads() {
        *lock(t) = b.clone();
    }
}

fn new_policer(
    time: &TimeSource,
    clock: &sluice_infra::clock::Clock,
    name: &str,
    cfg: Config,
) -> Arc<Policer> {
    let (now, hz) = time.now(clock);
    Arc::new(Policer {
        name: name.to_string(),
        cfg,
        state: Mutex::new(State {
            bucket: Bucket::new(cfg.params, hz, now),
            pkts: [0; 3],
            bytes: [0; 3],
        }),
    })
}

/// Adds policer `name` or replaces its configuration (its buckets start full, its counters
/// at zero), VPP's `policer add` / `configure policer`.
pub fn policer_add(vm: &mut Vlib, name: &str, cfg: Config) -> VnetResult {
    if name.is_empty() || name.len() > 63 {
        return Err(VnetError::invalid(format!(
            "name `{name}': 1 to 63 characters"
        )));
    }
    cfg.params.validate().map_err(|e| VnetError::invalid(e.0))?;
    let clock = vm.shared.clock;
    let m = vm.ext_mut::<PolicerMain>();
    let p = new_policer(&m.shared.time, &clock, name, cfg);
    m.policers.insert(name.to_string(), p);
    publish(m);
    Ok(())
}

/// Deletes a policer (not while an interface uses it).
pub fn policer_del(vm: &mut Vlib, name: &str) -> VnetResult {
    let m = vm.ext_mut::<PolicerMain>();
    if !m.policers.contains_key(name) {
        return Err(VnetError::NotFound(format!(
            "policer `{name}' does not exist"
        )));
    }
    if m.input.values().chain(m.output.values()).any(|n| n == name) {
        return Err(VnetError::InUse(format!(
            "policer `{name}' is applied to an interface"
        )));
    }
    m.policers.remove(name);
    publish(m);
    Ok(())
}

/// Applies (or removes) policer `name` on an interface's input or output.
pub fn policer_apply(vm: &mut Vlib, name: &str, sw: u32, out: bool, apply: bool) -> VnetResult {
    if vm
        .ext_mut::<Interfaces>()
        .get(sluice_vnet::SwIfIndex(sw))
        .is_none()
    {
        return Err(VnetError::NoSuchInterface(sw));
    }
    let m = vm.ext_mut::<PolicerMain>();
    if !m.policers.contains_key(name) {
        return Err(VnetError::NotFound(format!(
            "policer `{name}' does not exist"
        )));
    }
    let b = if out { &mut m.output } else { &mut m.input };
    let changed = if apply {
        b.insert(sw, name.to_string()).is_none()
    } else {
        if b.get(&sw).map(String::as_str) != Some(name) {
            return Err(VnetError::NotFound(format!(
                "policer `{name}' is not applied there"
            )));
        }
        b.remove(&sw);
        true
    };
    publish(m);
    if changed {
        for (node, arc, _, o, _) in NODES {
            if o == out {
                sluice_vnet::feature::set_feature(vm, sw, arc, node, apply)
                    .map_err(|e| VnetError::System(e.to_string()))?;
            }
        }
    }
    Ok(())
}

fn parse_action(a: &mut Args, what: &str) -> Result<Action, CliError> {
    let w = a.word(what)?;
    Ok(match w.as_str() {
        "drop" => Action::Drop,
        "transmit" => Action::Transmit,
        "mark-and-transmit" => {
            let d = a.word("dscp")?;
            let v = DSCP_NAMES
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(&d))
                .map(|&(_, v)| v)
                .or_else(|| d.parse::<u8>().ok().filter(|&v| v < 64))
                .ok_or_else(|| CliError::new(format!("unknown dscp `{d}'")))?;
            Action::MarkAndTransmit(v)
        }
        _ => {
            return Err(CliError::new(format!(
                "expected drop|transmit|mark-and-transmit, got `{w}'"
            )))
        }
    })
}

fn cli_add(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    if !a.keyword("name") {
        return Err(CliError::new("expected name <name>"));
    }
    let name = a.word("policer name")?;
    let mut p = Params {
        kind: Kind::OneRateTwoColor,
        rate_type: RateType::Kbps,
        cir: 0,
        eir: 0,
        cb: 0,
        eb: 0,
    };
    let mut actions = [Action::Transmit, Action::Drop, Action::Drop];
    while !a.is_empty() {
        let w = a.word("option")?;
        match w.as_str() {
            "type" => {
                let t = a.word("type")?;
                p.kind = Kind::parse(&t).ok_or_else(|| {
                    CliError::new(format!("expected 1r2c|1r3c|2r3c-2698|2r3c-4115, got `{t}'"))
                })?;
            }
            "cir" => p.cir = a.u64("cir")?,
            "eir" => p.eir = a.u64("eir")?,
            "cb" => p.cb = a.u64("cb")?,
            "eb" => p.eb = a.u64("eb")?,
            "rate" => {
                let r = a.word("kbps|pps")?;
                p.rate_type = match r.as_str() {
                    "kbps" => RateType::Kbps,
                    "pps" => RateType::Pps,
                    _ => return Err(CliError::new(format!("expected kbps|pps, got `{r}'"))),
                };
            }
            "round" => {
                let r = a.word("closest|up|down")?;
                if !matches!(r.as_str(), "closest" | "up" | "down") {
                    return Err(CliError::new(format!(
                        "expected closest|up|down, got `{r}'"
                    )));
                }
            }
            "color-aware" => {
                return Err(CliError::new(
                    "`color-aware': only color-blind policers are supported",
                ))
            }
            "conform-action" => actions[0] = parse_action(a, "conform action")?,
            "exceed-action" => actions[1] = parse_action(a, "exceed action")?,
            "violate-action" => actions[2] = parse_action(a, "violate action")?,
            _ => return Err(CliError::unknown_input(&w)),
        }
    }
    policer_add(vm, &name, Config { params: p, actions })?;
    Ok(String::new())
}

fn cli_del(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    if !a.keyword("name") {
        return Err(CliError::new("expected name <name>"));
    }
    let name = a.word("policer name")?;
    a.finish()?;
    policer_del(vm, &name)?;
    Ok(String::new())
}

fn cli_bind(vm: &mut Vlib, a: &mut Args, out: bool) -> Result<String, CliError> {
    let apply = !a.keyword("unapply");
    let _ = a.keyword("apply");
    if !a.keyword("name") {
        return Err(CliError::new("expected name <name>"));
    }
    let name = a.word("policer name")?;
    let ifn = a.word("interface")?;
    a.finish()?;
    let sw = vm
        .ext_mut::<Interfaces>()
        .find(&ifn)
        .ok_or_else(|| CliError::new(format!("unknown interface `{ifn}'")))?
        .0;
    policer_apply(vm, &name, sw, out, apply)?;
    Ok(String::new())
}

fn cli_input(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    cli_bind(vm, a, false)
}

fn cli_output(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    cli_bind(vm, a, true)
}

/// The policer plugin's part of `show running-config`: every policer, then the interfaces
/// each is applied to.
pub fn running_config(vm: &mut Vlib) -> Vec<String> {
    let mut out = Vec::new();
    let m = vm.ext_mut::<PolicerMain>();
    for (name, p) in &m.policers {
        let (pr, a) = (&p.cfg.params, &p.cfg.actions);
        let mut l = format!(
            "configure policer name {name} type {} cir {} cb {}",
            pr.kind.name(),
            pr.cir,
            pr.cb
        );
        if pr.eir != 0 || pr.eb != 0 {
            l.push_str(&format!(" eir {} eb {}", pr.eir, pr.eb));
        }
        l.push_str(match pr.rate_type {
            RateType::Kbps => " rate kbps",
            RateType::Pps => " rate pps",
        });
        l.push_str(&format!(
            " conform-action {} exceed-action {} violate-action {}",
            a[0], a[1], a[2]
        ));
        out.push(l);
    }
    let binds: Vec<(&str, u32, String)> = m
        .input
        .iter()
        .map(|(&sw, n)| ("input", sw, n.clone()))
        .chain(m.output.iter().map(|(&sw, n)| ("output", sw, n.clone())))
        .collect();
    for (dir, sw, n) in binds {
        let ifn = vm
            .ext_mut::<Interfaces>()
            .get(sluice_vnet::SwIfIndex(sw))
            .map_or_else(|| format!("sw_if_index-{sw}"), |i| i.name.clone());
        out.push(format!("policer {dir} name {n} {ifn}"));
    }
    out
}

/// A policer's `show policer` text (tokens as of tick `now`).
pub fn format_policer(p: &Policer, now: u64, out: &mut String) {
    let c = &p.cfg;
    let pr = &c.params;
    let st = lock(&p.state);
    let (tc, te) = st.bucket.tokens_at(now);
    let _ = writeln!(
        out,
        "Name \"{}\" Type {} cir {} eir {} cb {} eb {}",
        p.name,
        pr.kind.name(),
        pr.cir,
        pr.eir,
        pr.cb,
        pr.eb
    );
    let _ = writeln!(
        out,
        "Rate type {}, color-blind, conform action {}, exceed action {}, violate action {}",
        match pr.rate_type {
            RateType::Kbps => "kbps",
            RateType::Pps => "pps",
        },
        c.actions[0],
        c.actions[1],
        c.actions[2]
    );
    let _ = writeln!(out, "Tokens: committed {tc} excess {te}");
    let _ = writeln!(
        out,
        "conform {} packets/{} bytes, exceed {} packets/{} bytes, violate {} packets/{} bytes",
        st.pkts[0], st.bytes[0], st.pkts[1], st.bytes[1], st.pkts[2], st.bytes[2]
    );
}

fn cli_show(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let only = if a.keyword("name") {
        Some(a.word("policer name")?)
    } else {
        None
    };
    a.finish()?;
    let clock = vm.shared.clock;
    let m = vm.ext_mut::<PolicerMain>();
    let (now, _) = m.shared.time.now(&clock);
    let mut out = String::new();
    for (name, p) in &m.policers {
        if only.as_ref().is_some_and(|o| o != name) {
            continue;
        }
        format_policer(p, now, &mut out);
        for (dir, b) in [("input", &m.input), ("output", &m.output)] {
            let ifs: Vec<String> = b
                .iter()
                .filter(|(_, n)| *n == name)
                .map(|(i, _)| i.to_string())
                .collect();
            if !ifs.is_empty() {
                let _ = writeln!(out, "  applied {dir} on sw_if_index: {}", ifs.join(" "));
            }
        }
    }
    if let Some(o) = only {
        if out.is_empty() {
            return Err(CliError::new(format!("policer `{o}' does not exist")));
        }
    }
    Ok(out)
}

fn cli_clock(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let w = a.word("manual|real|advance")?;
    let clock = vm.shared.clock;
    let m = vm.ext_mut::<PolicerMain>();
    let t = &m.shared.time;
    match w.as_str() {
        "manual" | "real" => {
            a.finish()?;
            t.ns.store(0, Ordering::Relaxed);
            t.manual.store(w == "manual", Ordering::Relaxed);
            // Buckets restart full on the new clock.
            let shared = m.shared.clone();
            for p in m.policers.values_mut() {
                *p = new_policer(&shared.time, &clock, &p.name, p.cfg);
            }
            publish(m);
        }
        "advance" => {
            let us = a.u64("microseconds")?;
            a.finish()?;
            if !t.manual.load(Ordering::Relaxed) {
                return Err(CliError::new(
                    "`advance': the clock is real (test policer clock manual first)",
                ));
            }
            t.ns.fetch_add(us.saturating_mul(1000), Ordering::Relaxed);
        }
        _ => {
            return Err(CliError::new(format!(
                "expected manual|real|advance, got `{w}'"
            )))
        }
    }
    Ok(String::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four threads police one policer as the node does (the lock taken per run of
    /// packets): the bucket hands out exactly `cb` conforming packets in total.
    #[test]
    fn threads_sharing_a_policer_stay_exact() {
        let params = Params {
            kind: Kind::OneRateTwoColor,
            rate_type: RateType::Pps,
            cir: 1,
            eir: 0,
            cb: 1000,
            eb: 0,
        };
        let p = Arc::new(Policer {
            name: "t".into(),
            cfg: Config {
                params,
                actions: [Action::Transmit, Action::Drop, Action::Drop],
            },
            state: Mutex::new(State {
                bucket: Bucket::new(params, 1_000_000_000, 0),
                pkts: [0; 3],
                bytes: [0; 3],
            }),
        });
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let p = p.clone();
                std::thread::spawn(move || {
                    let mut conform = 0u64;
                    for _ in 0..100 {
                        let mut st = lock(&p.state);
                        for _ in 0..8 {
                            let c = st.bucket.police(64, 0) as usize;
                            st.pkts[c] += 1;
                            conform += (c == 0) as u64;
                        }
                    }
                    conform
                })
            })
            .collect();
        let total: u64 = hs.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(total, 1000);
        let st = lock(&p.state);
        assert_eq!((st.pkts[0], st.pkts[1]), (1000, 2200));
    }

    #[test]
    fn mark_rewrites_dscp_and_keeps_the_checksum_valid() {
        let mut h = [
            0x45u8, 0x01, 0, 40, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        let c = sluice_wire::checksum::internet_checksum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        assert_eq!(len_and_mark(&mut h, false, Some(46)), Some(40));
        assert_eq!(h[1], (46 << 2) | 1, "ECN bits kept");
        assert_eq!(sluice_wire::checksum::internet_checksum(&h), 0);
        let mut h6 = [0u8; 40];
        h6[0] = 0x6a;
        h6[1] = 0xb0;
        h6[5] = 8;
        assert_eq!(len_and_mark(&mut h6, true, Some(10)), Some(48));
        let tc = (h6[0] << 4) | (h6[1] >> 4);
        assert_eq!((tc >> 2, tc & 3, h6[0] >> 4), (10, 0xab & 3, 6));
        assert_eq!(len_and_mark(&mut [0u8; 19], false, None), None);
    }
}
