//! Feature arcs: named, ordered lists of optional nodes spliced into a path per interface
//! (docs/architecture.md, "Feature arcs").
//!
//! | arc | from | to | keyed by |
//! |---|---|---|---|
//! | `ip4-unicast` | `ip4-input` | `ip4-lookup` | rx interface |
//! | `ip6-unicast` | `ip6-input` | `ip6-lookup` | rx interface |
//! | `ip4-output` | `ip4-rewrite` | `interface-output` | tx interface |
//! | `ip6-output` | `ip6-rewrite` | `interface-output` | tx interface |
//! | `l2-input` | `ethernet-input` | `l2-input` | rx interface |
//! | `l2-output` | `l2-input` | `interface-output` | tx interface |
//!
//! The control plane orders an interface's enabled features with `runs_before`/`runs_after`
//! (a cycle is an error naming it), adds the graph arcs it needs, and writes, for every node of
//! the chain, the arc to take next for that interface into a shared table of atomics. Nodes
//! read it lock-free: `FeatureNext::next(slot, sw_if_index, default)`. Start nodes cache the
//! answer with other per-interface state they already cache per frame (`ip4-rewrite` with
//! its adjacency, `ethernet-input` with the rx interface's L2 mode, `l2-input` per tx
//! interface), so an arc with nothing enabled costs no extra load per packet.
//!
//! Every arc has a counter feature `<arc>-count` ([`FeatureCount`]): per-interface packets
//! and bytes that crossed the arc, shown by `show interface features` and reset by
//! `clear interfaces`.

use sluice_buffer::{Buffer, BufferHeader};
use sluice_cli::{Args, CliError, CommandTree};
use sluice_graph::stats::Counter;
use sluice_graph::{
    order_features, Cx, FeatureOrder, GraphBuilder, Next, NodeKind, NodeRegistration, PacketNode,
    PerPacket, Vlib,
};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// Interfaces the tables cover.
pub const MAX_IFS: usize = crate::interface::MAX_IFS;
/// Nodes that can take part in feature arcs (start nodes, features and counters of every
/// registered arc; a registration past it is refused with [`FeatureError::TooMany`]).
pub const MAX_SLOTS: usize = 128;

/// Per (node slot, interface): the next arc index + 1 (0 = the node's default arc); per
/// slot, how many interfaces have a non-default entry.
///
/// A slot's row is [`MAX_IFS`] entries, and no interface index reaches `MAX_IFS`:
/// [`crate::interface::create`] refuses the interface past it (deleted interfaces keep
/// their index), and [`FeatureNext::set`] writes no entry past a row. The `rx_if`/`tx_if`
/// an arc is keyed by is an interface's index (set by the input nodes, the adjacencies, L2
/// modes and bridge members), so a lookup never lands in another slot's row; no node pays
/// for a check. (A mask of the index into its row was tried: one `and` in a lookup made
/// only while an arc has features, but its inlining cost `l2-input` 2 instr/pkt on L2
/// cross-connect, 3.9 on a bridge, with no feature enabled; as did a spare entry per row.)
pub struct FeatureNext {
    t: Box<[AtomicU16]>,
    used: Box<[AtomicU32]>,
}

impl Default for FeatureNext {
    fn default() -> Self {
        FeatureNext {
            t: (0..MAX_SLOTS * MAX_IFS)
                .map(|_| AtomicU16::new(0))
                .collect(),
            used: (0..MAX_SLOTS).map(|_| AtomicU32::new(0)).collect(),
        }
    }
}

impl FeatureNext {
    /// The arc node `slot` takes for a packet of interface `sw_if` (rx or tx, as the arc is
    /// keyed), or `default`. `sw_if` is an interface's index, below [`MAX_IFS`] (see
    /// [`FeatureNext`]).
    #[inline(always)]
    pub fn next(&self, slot: usize, sw_if: u32, default: Next) -> Next {
        match self.t.get(slot * MAX_IFS + sw_if as usize) {
            Some(v) => match v.load(Ordering::Relaxed) {
                0 => default,
                n => Next(n - 1),
            },
            None => default,
        }
    }

    /// Whether node `slot` has a non-default next for any interface (nodes read it once
    /// per frame to skip the per-packet lookup while an arc is empty everywhere).
    #[inline(always)]
    pub fn any(&self, slot: usize) -> bool {
        self.used
            .get(slot)
            .is_some_and(|u| u.load(Ordering::Relaxed) != 0)
    }

    /// Sets (`Some`) or clears node `slot`'s next for interface `sw_if`; nothing past the
    /// table (an index at or past [`MAX_IFS`] would be another slot's entry).
    fn set(&self, slot: usize, sw_if: u32, next: Option<Next>) {
        if sw_if as usize >= MAX_IFS {
            return;
        }
        let (Some(v), Some(used)) = (
            self.t.get(slot * MAX_IFS + sw_if as usize),
            self.used.get(slot),
        ) else {
            return;
        };
        let new = next.map(|n| n.0 + 1).unwrap_or(0);
        let old = v.swap(new, Ordering::Relaxed);
        match (old, new) {
            (0, n) if n != 0 => {
                used.fetch_add(1, Ordering::Relaxed);
            }
            (o, 0) if o != 0 => {
                used.fetch_sub(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

/// A node's feature next for its packets (`ip4-input` as the arc's start, and the NAT44
/// nodes for the feature after theirs; not `ip6-input`, which reads [`FeatureNext::next`]
/// per packet on purpose, as this made its plain path slower, 56.4 -> 59.5 instr/pkt):
/// whether the arc has features on any interface is read once per frame
/// ([`ArcRun::begin_frame`]; the node keeps it and tests it per packet), and an interface's
/// next feature once per run of packets of that interface ([`ArcRun::next`]), not per
/// packet (a frame usually comes from one rx interface). The node's default arc is passed
/// to every call (a constant there) rather than kept: a load per packet.
#[derive(Clone, Copy, Debug)]
pub struct ArcRun {
    slot: usize,
    sw_if: u32,
    next: Next,
}

impl ArcRun {
    /// For the node of slot `slot`.
    pub fn new(slot: usize) -> Self {
        ArcRun {
            slot,
            sw_if: u32::MAX,
            next: Next(0),
        }
    }

    /// Forgets the last run's interface (the table may have changed between frames) and
    /// says whether the arc has features on any interface (else the node sends every
    /// packet to `default` without calling [`ArcRun::next`]).
    #[inline(always)]
    pub fn begin_frame(&mut self, t: &FeatureNext, default: Next) -> bool {
        // Beyond the table: its entry is `default`, so the cached `next` is right for it.
        self.sw_if = u32::MAX;
        self.next = default;
        t.any(self.slot)
    }

    /// The next arc of a packet of interface `sw_if`: the last packet's when it is of the
    /// same interface, else read from `t` (`default`: the node's arc when the interface has
    /// no feature, the same in every call of a frame).
    #[inline(always)]
    pub fn next(&mut self, t: &FeatureNext, sw_if: u32, default: Next) -> Next {
        if sw_if != self.sw_if {
            self.sw_if = sw_if;
            self.next = t.next(self.slot, sw_if, default);
        }
        self.next
    }
}

/// Which interface of a packet selects an arc's features.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ArcKey {
    /// The interface it was received on (`rx_if`).
    Rx,
    /// The interface it will be sent on (`tx_if`).
    Tx,
}

impl ArcKey {
    /// The packet's interface this key selects.
    #[inline(always)]
    pub fn sw_if(self, b: &Buffer<'_>) -> u32 {
        self.of(b.hdr)
    }

    /// The same from a buffer header.
    #[inline(always)]
    pub fn of(self, h: &BufferHeader) -> u32 {
        match self {
            ArcKey::Rx => h.rx_if,
            ArcKey::Tx => h.tx_if,
        }
    }
}

/// A feature arc.
#[derive(Clone, Copy, Debug)]
pub struct ArcDef {
    /// Arc name (`ip4-unicast`).
    pub name: &'static str,
    /// Node the arc starts from (its default arc leads to `end`).
    pub start: &'static str,
    /// Node the arc ends at.
    pub end: &'static str,
    /// Interface whose configuration applies.
    pub key: ArcKey,
    /// The arc's counter feature (`<arc>-count`).
    pub count: &'static str,
    /// The node that cuts GSO aggregates into segments before the first enabled feature
    /// that does not take them ([`FeatureDef::takes_gso`]). `None`: the arc's features see
    /// aggregates whole.
    pub gso: Option<GsoCut>,
}

/// An arc's GSO cutting node (a [`crate::gso`] node).
#[derive(Clone, Copy, Debug)]
pub struct GsoCut {
    /// Node name.
    pub node: &'static str,
    /// Whether packets on the arc start at their L3 header (the Ethernet header
    /// `current_data - l2_hdr_offset` bytes before); else at their Ethernet header.
    pub at_l3: bool,
}

/// A feature: a node on an arc with ordering constraints.
#[derive(Clone, Copy, Debug)]
pub struct FeatureDef {
    /// Arc name.
    pub arc: &'static str,
    /// Node name.
    pub node: &'static str,
    /// Features it must run before.
    pub runs_before: &'static [&'static str],
    /// Features it must run after.
    pub runs_after: &'static [&'static str],
    /// Whether it takes GSO aggregates (flag `GSO`: one buffer chain standing for many
    /// TCP/UDP segments, its L4 checksum a partial seed) as they are. A feature that does
    /// not is given segments: the arc's [`ArcDef::gso`] node runs before it.
    pub takes_gso: bool,
}

/// `ip4-output`.
pub const IP4_OUTPUT: &str = "ip4-output";
/// `ip6-output`.
pub const IP6_OUTPUT: &str = "ip6-output";
/// `l2-input` (the arc; the node of the same name is its end).
pub const L2_INPUT_ARC: &str = "l2-input";
/// `l2-output`.
pub const L2_OUTPUT: &str = "l2-output";

/// The arcs vnet declares (plugins may declare more through [`FeatureRegistry::add_arc`]).
pub const VNET_ARCS: &[ArcDef] = &[
    ArcDef {
        name: "ip4-unicast",
        start: crate::ip4::nodes::IP4_INPUT,
        end: crate::ip4::nodes::IP4_LOOKUP,
        key: ArcKey::Rx,
        count: "ip4-unicast-count",
        gso: Some(GsoCut {
            node: crate::gso::IP4_NAME,
            at_l3: true,
        }),
    },
    ArcDef {
        name: "ip6-unicast",
        start: crate::ip6::nodes::IP6_INPUT,
        end: crate::ip6::nodes::IP6_LOOKUP,
        key: ArcKey::Rx,
        count: "ip6-unicast-count",
        gso: Some(GsoCut {
            node: crate::gso::IP6_NAME,
            at_l3: true,
        }),
    },
    ArcDef {
        name: IP4_OUTPUT,
        start: crate::ip4::nodes::IP4_REWRITE,
        end: crate::output::NAME,
        key: ArcKey::Tx,
        count: "ip4-output-count",
        gso: Some(GsoCut {
            node: "ip4-output-gso-segment",
            at_l3: false,
        }),
    },
    ArcDef {
        name: IP6_OUTPUT,
        start: crate::ip6::nodes::IP6_REWRITE,
        end: crate::output::NAME,
        key: ArcKey::Tx,
        count: "ip6-output-count",
        gso: Some(GsoCut {
            node: "ip6-output-gso-segment",
            at_l3: false,
        }),
    },
    ArcDef {
        name: L2_INPUT_ARC,
        start: crate::ethernet::ETHERNET_INPUT,
        end: crate::l2::L2_INPUT,
        key: ArcKey::Rx,
        count: "l2-input-count",
        gso: Some(GsoCut {
            node: "l2-input-gso-segment",
            at_l3: false,
        }),
    },
    ArcDef {
        name: L2_OUTPUT,
        start: crate::l2::L2_INPUT,
        end: crate::output::NAME,
        key: ArcKey::Tx,
        count: "l2-output-count",
        gso: Some(GsoCut {
            node: "l2-output-gso-segment",
            at_l3: false,
        }),
    },
];

/// A feature with no ordering constraints that does not take GSO aggregates.
pub const fn plain(arc: &'static str, node: &'static str) -> FeatureDef {
    FeatureDef {
        arc,
        node,
        runs_before: &[],
        runs_after: &[],
        takes_gso: false,
    }
}

/// Why an arc or feature registration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeatureError {
    /// Two arcs with one name.
    #[error("feature arc `{0}' registered twice")]
    DuplicateArc(&'static str),
    /// A feature on an arc nobody registered.
    #[error("feature `{node}' is placed on unknown arc `{arc}'")]
    UnknownArc {
        /// The feature node.
        node: &'static str,
        /// The arc it names.
        arc: &'static str,
    },
    /// A node registered twice as a feature or arc start.
    #[error("node `{0}' already takes part in a feature arc")]
    DuplicateNode(&'static str),
    /// More participants than [`MAX_SLOTS`].
    #[error("too many feature-arc nodes (at most {MAX_SLOTS}): `{0}' refused")]
    TooMany(&'static str),
}

/// Every arc and feature registered by vnet and the plugins, with the table slot of every
/// node taking part (start nodes, features, counters), built at registration time and read
/// by the control plane afterwards (a `Vlib` extension through [`FeatureMain`]).
pub struct FeatureRegistry {
    arcs: Vec<ArcDef>,
    features: Vec<FeatureDef>,
    slots: Vec<&'static str>,
    table: Arc<FeatureNext>,
}

impl Default for FeatureRegistry {
    fn default() -> Self {
        FeatureRegistry {
            arcs: Vec::new(),
            features: Vec::new(),
            slots: Vec::new(),
            table: Arc::new(FeatureNext::default()),
        }
    }
}

impl FeatureRegistry {
    /// The shared next table the nodes read.
    pub fn table(&self) -> Arc<FeatureNext> {
        self.table.clone()
    }

    /// The registered arcs, in registration order.
    pub fn arcs(&self) -> &[ArcDef] {
        &self.arcs
    }

    /// The arc called `name`.
    pub fn arc(&self, name: &str) -> Option<&ArcDef> {
        self.arcs.iter().find(|a| a.name == name)
    }

    /// Table slot of a node taking part in arcs (start nodes, features, counters).
    pub fn slot(&self, node: &str) -> Option<usize> {
        self.slots.iter().position(|n| *n == node)
    }

    fn add_slot(&mut self, node: &'static str) -> Result<usize, FeatureError> {
        if self.slot(node).is_some() {
            return Err(FeatureError::DuplicateNode(node));
        }
        if self.slots.len() >= MAX_SLOTS {
            return Err(FeatureError::TooMany(node));
        }
        self.slots.push(node);
        Ok(self.slots.len() - 1)
    }

    /// Declares an arc: its start node and its counter feature get slots. The counter node
    /// itself is registered by [`crate::plugin::Registrar::arc`].
    pub fn add_arc(&mut self, a: ArcDef) -> Result<(), FeatureError> {
        if self.arc(a.name).is_some() {
            return Err(FeatureError::DuplicateArc(a.name));
        }
        // A node may start several arcs (`l2-input` starts `l2-output` and ends `l2-input`):
        // one slot serves them all, since a packet is on one arc at a time there.
        if self.slot(a.start).is_none() {
            self.add_slot(a.start)?;
        }
        self.add_slot(a.count)?;
        if let Some(g) = a.gso {
            self.add_slot(g.node)?;
        }
        self.arcs.push(a);
        Ok(())
    }

    /// Places a feature node on an arc; returns its slot in the next table.
    pub fn add_feature(&mut self, f: FeatureDef) -> Result<usize, FeatureError> {
        if self.arc(f.arc).is_none() {
            return Err(FeatureError::UnknownArc {
                node: f.node,
                arc: f.arc,
            });
        }
        let s = self.add_slot(f.node)?;
        self.features.push(f);
        Ok(s)
    }

    /// Every feature of an arc: the registered ones, then its counter (which may run
    /// anywhere on the arc; it runs last among features without constraints; it counts an
    /// aggregate as one packet).
    fn features_of<'a>(&'a self, arc: &'a ArcDef) -> impl Iterator<Item = FeatureDef> + 'a {
        self.features
            .iter()
            .filter(move |f| f.arc == arc.name)
            .copied()
            .chain(std::iter::once(FeatureDef {
                takes_gso: true,
                ..plain(arc.name, arc.count)
            }))
    }

    /// Whether feature `node` of arc `arc` takes GSO aggregates.
    fn takes_gso(&self, arc: &ArcDef, node: &str) -> bool {
        self.features_of(arc)
            .find(|f| f.node == node)
            .is_none_or(|f| f.takes_gso)
    }

    /// The arc a feature node is on.
    fn arc_of(&self, node: &str) -> Option<&ArcDef> {
        self.arcs.iter().find(|a| {
            a.count == node
                || self
                    .features
                    .iter()
                    .any(|f| f.node == node && f.arc == a.name)
        })
    }
}

/// Per-interface packet and byte counts of one thread.
pub struct IfCounts {
    c: Box<[[Counter; 2]]>,
}

impl Default for IfCounts {
    fn default() -> Self {
        IfCounts {
            c: (0..MAX_IFS).map(|_| Default::default()).collect(),
        }
    }
}

/// `<arc>-count`: counts the packets and bytes crossing an arc, per interface.
///
/// - uses: `rx_if` or `tx_if` (the arc's key); the buffer's total length.
/// - sets: nothing.
/// - next: the next feature enabled on the arc for the interface, by default the arc's end
///   (arc 0: `ip4-lookup`, `ip6-lookup`, `interface-output` or `l2-input`).
/// - counters: none in `show errors`; per-interface packets/bytes in
///   `show interface features <if>`, reset by `clear interfaces`.
pub struct FeatureCount {
    features: Arc<FeatureNext>,
    slot: usize,
    key: ArcKey,
    mine: Arc<IfCounts>,
    /// Every thread's counts (for `show`/`clear`).
    all: Arc<Mutex<Vec<Arc<IfCounts>>>>,
}

impl PacketNode for FeatureCount {
    const PREFETCH_DATA: bool = false;

    #[inline(always)]
    fn process_one(&mut self, _cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        let i = self.key.sw_if(b);
        if let Some(c) = self.mine.c.get(i as usize) {
            c[0].add(1);
            c[1].add(b.total_len() as u64);
        }
        self.features.next(self.slot, i, CountNext::End.next())
    }
}

sluice_graph::arcs! {
    /// A counter feature's next arc (the arc's end node, `ArcDef::end`: where a packet goes
    /// when no later feature is enabled).
    pub enum CountNext<end> {
        /// The arc's end node.
        End => end,
    }
}

/// Registers arc `arc`'s counter feature (`<arc>-count`); the arc is declared in `reg`.
pub fn register_count(b: &mut GraphBuilder, reg: &FeatureRegistry, arc: &ArcDef) {
    let all: Arc<Mutex<Vec<Arc<IfCounts>>>> = Default::default();
    let Some(slot) = reg.slot(arc.count) else {
        return;
    };
    let features = reg.table();
    let key = arc.key;
    b.register(
        NodeRegistration::new(arc.count, NodeKind::Internal, move |_| {
            let mine = Arc::new(IfCounts::default());
            if let Ok(mut a) = all.lock() {
                a.push(mine.clone());
            }
            Box::new(PerPacket::new(FeatureCount {
                features: features.clone(),
                slot,
                key,
                mine,
                all: all.clone(),
            }))
        })
        .nexts(&CountNext::names(arc.end)),
    );
}

/// Packets and bytes an arc's counter feature saw on an interface (summed over threads).
pub fn counts(vm: &mut Vlib, arc: &ArcDef, sw_if: u32) -> (u64, u64) {
    let mut r = (0, 0);
    for t in counters_of(vm, arc) {
        if let Some(c) = t.c.get(sw_if as usize) {
            r.0 += c[0].get();
            r.1 += c[1].get();
        }
    }
    r
}

fn counters_of(vm: &mut Vlib, arc: &ArcDef) -> Vec<Arc<IfCounts>> {
    let Some(i) = vm.registry.find(arc.count) else {
        return Vec::new();
    };
    vm.main
        .node_mut::<FeatureCount>(i)
        .and_then(|n| n.all.lock().ok().map(|a| a.clone()))
        .unwrap_or_default()
}

/// Resets every arc counter (`clear interfaces`).
pub fn clear_counts(vm: &mut Vlib) {
    for arc in registry(vm).arcs() {
        for t in counters_of(vm, arc) {
            for c in t.c.iter() {
                c[0].clear();
                c[1].clear();
            }
        }
    }
}

/// Control-plane state (a `Vlib` extension).
#[derive(Default)]
pub struct FeatureMain {
    /// Every arc and feature (set when the graph is assembled).
    pub registry: Option<Arc<FeatureRegistry>>,
    enabled: BTreeMap<(u32, &'static str), BTreeSet<String>>,
    /// Interfaces whose driver may receive GSO aggregates ([`set_aggregate_source`]):
    /// while there is none, no packet is an aggregate and no chain has a cutting node.
    sources: BTreeSet<u32>,
    /// Chains whose rewrite for a new [`set_aggregate_source`] state failed (an arc a worker
    /// did not take in time): the table still holds their old chain. Every later
    /// [`set_feature`] or [`set_aggregate_source`] tries them again first, stopping at the
    /// first that fails ([`rewrite_stale`]); a chain written whole leaves the set.
    stale: BTreeSet<(u32, &'static str)>,
}

/// Says whether interface `sw_if`'s driver may receive GSO aggregates (af_packet with
/// `PACKET_VNET_HDR`, tap with offloads, memif with `gso`: the drivers that call
/// [`crate::offload::Gso::set_meta`]). An arc's cutting node ([`ArcDef::gso`]) is put in the
/// feature chains only while some interface may: an aggregate can reach any interface's
/// chain (a BVI, a tunnel, a tx arc), so the test is global. When the first source comes,
/// every chain is written again, under traffic ([`write_chain`] keeps every intermediate
/// state a whole chain).
///
/// A source stays registered until exit: no driver calls this with `on == false` when its
/// interface is deleted, as aggregates it received may still be queued (in frames, handoff
/// queues, tx rings) and would then reach a chain without its cutting node. `false` is for
/// tests.
pub fn set_aggregate_source(vm: &mut Vlib, sw_if: u32, on: bool) {
    set_source(vm, sw_if, on, &mut |vm, from, to| {
        vm.add_next_by_name(from, to)
    });
}

/// The interfaces registered by [`set_aggregate_source`], in index order.
pub fn aggregate_sources(vm: &mut Vlib) -> Vec<u32> {
    vm.ext_mut::<FeatureMain>()
        .sources
        .iter()
        .copied()
        .collect()
}

/// How a chain's arcs are added: [`Vlib::add_next_by_name`] (a worker barrier when the arc
/// is new); tests pass one that looks at the chains in the meantime.
type Link<'a> = dyn FnMut(&mut Vlib, &str, &str) -> Result<Next, sluice_graph::GraphError> + 'a;

fn set_source(vm: &mut Vlib, sw_if: u32, on: bool, link: &mut Link) {
    rewrite_stale(vm, link);
    let fm = vm.ext_mut::<FeatureMain>();
    let had = !fm.sources.is_empty();
    if on {
        fm.sources.insert(sw_if);
    } else {
        fm.sources.remove(&sw_if);
    }
    let has = !fm.sources.is_empty();
    if had == has {
        return;
    }
    let keys: Vec<(u32, &'static str)> = fm.enabled.keys().copied().collect();
    vm.ext_mut::<FeatureMain>().stale.extend(keys);
    rewrite_stale(vm, link);
}

/// Writes again the chains of [`FeatureMain::stale`]; those that fail stay there. It stops
/// at the first failure: a worker still late fails every arc, each after
/// [`Vlib::thread_wait`].
fn rewrite_stale(vm: &mut Vlib, link: &mut Link) {
    let keys: Vec<(u32, &'static str)> =
        vm.ext_mut::<FeatureMain>().stale.iter().copied().collect();
    for (sw, arc) in keys {
        if let Err(e) = write_chain(vm, sw, arc, link) {
            log::warn!(
                "feature arc {arc} of interface {sw} (written again at the next change): {e}"
            );
            break;
        }
    }
}

/// Installs the registry built at registration (`plugin::assemble`).
pub fn init(vm: &mut Vlib, registry: Arc<FeatureRegistry>) {
    vm.ext_mut::<FeatureMain>().registry = Some(registry);
}

/// The registry (an empty one before [`init`]).
pub fn registry(vm: &mut Vlib) -> Arc<FeatureRegistry> {
    vm.ext_mut::<FeatureMain>()
        .registry
        .get_or_insert_with(Default::default)
        .clone()
}

/// Enables or disables a feature on an interface and rewires the chain. On an error (an
/// arc a worker did not take in time, [`sluice_graph::GraphError::NotTaken`]) nothing
/// changed: the feature keeps its former state and the table its old chain.
pub fn set_feature(
    vm: &mut Vlib,
    sw_if: u32,
    arc: &str,
    feature: &str,
    on: bool,
) -> crate::error::VnetResult {
    use crate::error::VnetError;
    crate::interface::check(vm, crate::SwIfIndex(sw_if))?;
    let reg = registry(vm);
    let a = reg
        .arc(arc)
        .ok_or_else(|| VnetError::invalid(format!("unknown feature arc `{arc}'")))?;
    if !reg.features_of(a).any(|f| f.node == feature) {
        let hint = match reg.arc_of(feature) {
            Some(o) => format!(" (it is on arc `{}')", o.name),
            None => String::new(),
        };
        return Err(VnetError::invalid(format!(
            "unknown feature `{feature}' on arc `{arc}'{hint}"
        )));
    }
    let link = &mut |vm: &mut Vlib, from: &str, to: &str| vm.add_next_by_name(from, to);
    rewrite_stale(vm, link);
    let set = vm
        .ext_mut::<FeatureMain>()
        .enabled
        .entry((sw_if, a.name))
        .or_default();
    let changed = if on {
        set.insert(feature.to_string())
    } else {
        set.remove(feature)
    };
    let r = write_chain(vm, sw_if, a.name, link);
    if r.is_err() && changed {
        // Every error comes before the first store: the table holds the old chain.
        let set = vm
            .ext_mut::<FeatureMain>()
            .enabled
            .entry((sw_if, a.name))
            .or_default();
        if on {
            set.remove(feature);
        } else {
            set.insert(feature.to_string());
        }
    }
    r
}

/// Writes interface `sw_if`'s chain of arc `arc` into the next table from its enabled
/// features (and the arc's cutting node while aggregates may exist).
///
/// Workers read the table while it is written, so every state between two stores is a
/// whole chain, old or new: every arc is added first (`link`, a worker barrier that may
/// last while packets run), then the entries are stored from the last link to the first
/// (the start's entry last: until then packets take the old chain, whose links are
/// unchanged or already lead into the new chain's rest), and only then are the entries of
/// nodes that left the chain reset (no packet reaches them any more but those in flight,
/// which take the arc's end as before).
fn write_chain(vm: &mut Vlib, sw_if: u32, arc: &str, link: &mut Link) -> crate::error::VnetResult {
    use crate::error::VnetError;
    let reg = registry(vm);
    let a = reg
        .arc(arc)
        .ok_or_else(|| VnetError::invalid(format!("unknown feature arc `{arc}'")))?;
    let table = reg.table();
    let fm = vm.ext_mut::<FeatureMain>();
    let cut = !fm.sources.is_empty();
    let set = fm
        .enabled
        .get(&(sw_if, a.name))
        .cloned()
        .unwrap_or_default();
    let order = ordered(&reg, a, &set).map_err(|e| VnetError::invalid(e.msg))?;
    // The new chain (nothing enabled: none, the start node takes its default arc).
    let mut chain: Vec<String> = Vec::new();
    if !order.is_empty() {
        chain.push(a.start.to_string());
        chain.extend(order);
        // Aggregates are cut before the first feature that does not take them.
        if let Some(g) = a.gso.filter(|_| cut) {
            if let Some(i) = chain[1..].iter().position(|f| !reg.takes_gso(a, f)) {
                chain.insert(i + 1, g.node.to_string());
            }
        }
        chain.push(a.end.to_string());
    }
    // Every arc first: the barriers run while the table still holds the old chain.
    let mut links = Vec::with_capacity(chain.len());
    for w in chain.windows(2) {
        let next = link(vm, &w[0], &w[1]).map_err(|e| VnetError::System(e.to_string()))?;
        links.push((reg.slot(&w[0]), next));
    }
    // Then the entries, last link first.
    for (slot, next) in links.into_iter().rev() {
        if let Some(s) = slot {
            table.set(s, sw_if, Some(next));
        }
    }
    // Last, the nodes out of the chain (the start node too when nothing is enabled).
    for x in std::iter::once(a.start)
        .chain(reg.features_of(a).map(|f| f.node))
        .chain(a.gso.map(|g| g.node))
    {
        if chain.iter().any(|c| c == x) {
            continue;
        }
        if let Some(s) = reg.slot(x) {
            table.set(s, sw_if, None);
        }
    }
    vm.ext_mut::<FeatureMain>().stale.remove(&(sw_if, a.name));
    Ok(())
}

/// The enabled features of interface `sw_if`: (arc, feature) in the order they run.
pub fn enabled(vm: &mut Vlib, sw_if: u32) -> Vec<(&'static str, String)> {
    let reg = registry(vm);
    let mut out = Vec::new();
    for arc in reg.arcs() {
        let set = vm
            .ext_mut::<FeatureMain>()
            .enabled
            .get(&(sw_if, arc.name))
            .cloned()
            .unwrap_or_default();
        for f in ordered(&reg, arc, &set).unwrap_or_default() {
            out.push((arc.name, f));
        }
    }
    out
}

/// The enabled features of an arc in the order they run.
fn ordered(
    reg: &FeatureRegistry,
    a: &ArcDef,
    enabled: &BTreeSet<String>,
) -> Result<Vec<String>, CliError> {
    let feats: Vec<FeatureOrder> = reg
        .features_of(a)
        .filter(|x| enabled.contains(x.node))
        .map(|x| FeatureOrder {
            name: x.node.to_string(),
            runs_before: x.runs_before.iter().map(|s| s.to_string()).collect(),
            runs_after: x.runs_after.iter().map(|s| s.to_string()).collect(),
        })
        .collect();
    order_features(a.name, &feats).map_err(|e| CliError::new(e.to_string()))
}

/// Registers the feature CLI.
pub fn register_cli(t: &mut CommandTree<Vlib>) {
    t.add(
        "set interface feature",
        "set interface feature <interface> <feature> arc <arc> [disable]",
        cli_set,
    );
    t.add(
        "show interface features",
        "show interface features <interface> — enabled features per arc, in order, with the counter features' packets/bytes",
        cli_show,
    );
}

fn cli_set(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let i = crate::cli::interface_arg(vm, a)?;
    let feature = a.word("feature name")?;
    if !a.keyword("arc") {
        return Err(CliError::new("expected `arc <arc-name>'"));
    }
    let arc = a.word("arc name")?;
    let disable = a.keyword("disable");
    a.finish()?;
    set_feature(vm, i.0, &arc, &feature, !disable)?;
    Ok(String::new())
}

fn cli_show(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let i = crate::cli::interface_arg(vm, a)?;
    a.finish()?;
    let mut out = String::from("Feature paths configured on the interface:\n");
    let reg = registry(vm);
    for arc in reg.arcs() {
        let _ = writeln!(out, "{}:", arc.name);
        let set = vm
            .ext_mut::<FeatureMain>()
            .enabled
            .get(&(i.0, arc.name))
            .cloned()
            .unwrap_or_default();
        let order = ordered(&reg, arc, &set)?;
        for f in &order {
            if f == arc.count {
                let (p, by) = counts(vm, arc, i.0);
                let _ = writeln!(out, "  {f} (packets {p}, bytes {by})");
            } else {
                let _ = writeln!(out, "  {f}");
            }
        }
        if order.is_empty() {
            out.push_str("  none configured\n");
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_table_defaults_and_counts_non_default_entries() {
        let t = FeatureNext::default();
        assert_eq!(t.next(3, 7, Next(1)), Next(1));
        assert!(!t.any(3));
        t.set(3, 7, Some(Next(4)));
        t.set(3, 8, Some(Next(0)));
        assert_eq!(
            (t.next(3, 7, Next(1)), t.next(3, 8, Next(1))),
            (Next(4), Next(0))
        );
        assert_eq!(t.next(2, 7, Next(1)), Next(1), "other slots untouched");
        t.set(3, 7, Some(Next(5)));
        assert!(t.any(3));
        t.set(3, 7, None);
        assert!(t.any(3), "interface 8 still has an entry");
        t.set(3, 8, None);
        t.set(3, 8, None);
        assert!(!t.any(3));
        // Out of range: ignored, never a panic.
        t.set(MAX_SLOTS, 0, Some(Next(1)));
        assert_eq!(t.next(MAX_SLOTS, u32::MAX, Next(2)), Next(2));
    }

    /// Nothing is written past a row: it would be another slot's entry (the next row's
    /// first interfaces), read by that node as an arc of its own.
    #[test]
    fn no_entry_is_written_past_the_table() {
        let t = FeatureNext::default();
        t.set(2, MAX_IFS as u32, Some(Next(6)));
        t.set(2, MAX_IFS as u32 + 1, Some(Next(6)));
        t.set(2, u32::MAX, Some(Next(6)));
        assert!(!t.any(2), "slot 2 has no entry");
        assert!(!t.any(3));
        assert_eq!(
            t.next(3, 0, Next(1)),
            Next(1),
            "slot 3's interface 0 untouched"
        );
        assert_eq!(
            t.next(3, 1, Next(1)),
            Next(1),
            "slot 3's interface 1 untouched"
        );
        t.set(2, MAX_IFS as u32 - 1, Some(Next(6)));
        assert_eq!(
            t.next(2, MAX_IFS as u32 - 1, Next(1)),
            Next(6),
            "the last interface"
        );
        assert_eq!(t.next(3, 0, Next(1)), Next(1));
    }

    #[test]
    fn arcs_and_features_get_their_own_slots() {
        let mut r = FeatureRegistry::default();
        for a in VNET_ARCS {
            r.add_arc(*a).expect("vnet arc");
        }
        let f = r
            .add_feature(plain("ip4-unicast", "test-feature"))
            .expect("feature");
        let mut seen = BTreeSet::new();
        for a in VNET_ARCS {
            seen.insert(r.slot(a.start).expect("start has a slot"));
            assert!(seen.insert(r.slot(a.count).expect("counter has a slot")));
            assert_eq!(r.arc_of(a.count).map(|x| x.name), Some(a.name));
        }
        assert!(seen.insert(f));
        assert_eq!(
            r.arc_of("test-feature").map(|x| x.name),
            Some("ip4-unicast")
        );
        assert!(seen.iter().all(|&s| s < MAX_SLOTS));
        // Refusals name what was refused.
        assert_eq!(
            r.add_arc(VNET_ARCS[0]),
            Err(FeatureError::DuplicateArc("ip4-unicast"))
        );
        assert_eq!(
            r.add_feature(plain("no-such-arc", "x")),
            Err(FeatureError::UnknownArc {
                node: "x",
                arc: "no-such-arc"
            })
        );
        assert_eq!(
            r.add_feature(plain("ip6-unicast", "test-feature")),
            Err(FeatureError::DuplicateNode("test-feature"))
        );
    }

    /// The nodes a packet of interface `sw` takes on arc `arc` from its start to its end
    /// (an entry of 0: the node's default arc, the arc's end), as the workers read them.
    fn walk(vm: &mut Vlib, sw: u32, arc: &str) -> Vec<String> {
        let reg = registry(vm);
        let a = reg.arc(arc).expect("arc");
        let table = reg.table();
        let mut at = a.start.to_string();
        let mut seen = vec![at.clone()];
        while at != a.end && seen.len() < 16 {
            let slot = reg.slot(&at).expect("a chain node has a slot");
            let from = vm.registry.lookup(&at).expect("node");
            at = match table.next(slot, sw, Next(u16::MAX)) {
                Next(u16::MAX) => a.end.to_string(),
                Next(n) => {
                    let to = vm.registry.node(from).nexts[n as usize];
                    vm.registry.node(to).name.clone()
                }
            };
            seen.push(at.clone());
        }
        seen
    }

    /// The first source of aggregates rewrites every chain while workers forward: at every
    /// arc added (a worker barrier, packets still running) and at the end, a packet of
    /// loop0 on `ip4-unicast` passes its feature before `ip4-lookup` (the old order reset
    /// the entries first, then stored `ip4-input -> ip4-gso-segment` before adding
    /// `ip4-gso-segment -> feature`: packets skipped the feature in between).
    #[test]
    fn a_chain_is_whole_at_every_step_of_its_rewrite() {
        let check = "ip4-source-check-via-rx";
        let (mut vm, _cli) = crate::testing::configured(
            &[],
            0,
            64,
            &[
                "create loopback interface",
                &format!("set interface feature loop0 {check} arc ip4-unicast"),
            ],
        );
        let sw = vm
            .ext_mut::<crate::Interfaces>()
            .find("loop0")
            .expect("loop0")
            .0;
        let plain = ["ip4-input", check, "ip4-lookup"];
        assert_eq!(walk(&mut vm, sw, "ip4-unicast"), plain);
        let mut barriers = 0;
        let mut link = |vm: &mut Vlib, from: &str, to: &str| {
            barriers += 1;
            let w = walk(vm, sw, "ip4-unicast");
            assert!(w.iter().any(|n| n == check), "{from} -> {to}: {w:?}");
            vm.add_next_by_name(from, to)
        };
        set_source(&mut vm, 77, true, &mut link);
        assert_eq!(barriers, 3, "3 links");
        let cut = ["ip4-input", crate::gso::IP4_NAME, check, "ip4-lookup"];
        assert_eq!(walk(&mut vm, sw, "ip4-unicast"), cut);
        // And back (the last source gone: tests only).
        let mut link = |vm: &mut Vlib, from: &str, to: &str| {
            let w = walk(vm, sw, "ip4-unicast");
            assert!(w.iter().any(|n| n == check), "{from} -> {to}: {w:?}");
            vm.add_next_by_name(from, to)
        };
        set_source(&mut vm, 77, false, &mut link);
        assert_eq!(walk(&mut vm, sw, "ip4-unicast"), plain);
    }

    /// A rewrite a stuck worker did not take (`GraphError::NotTaken`) is not lost: the
    /// first aggregate source's chains stay old and whole and are written again at the next
    /// change once the worker answers; a feature whose chain was not written is an error and
    /// stays disabled.
    #[test]
    fn a_chain_a_worker_did_not_take_is_written_again() {
        use std::time::Duration;
        let check = crate::rpf::IP4_SOURCE_CHECK;
        let (mut vm, _cli) = crate::testing::configured(
            &[],
            1,
            64,
            &[
                "create loopback interface",
                &format!("set interface feature loop0 {check} arc ip4-unicast"),
            ],
        );
        let sw = vm
            .ext_mut::<crate::Interfaces>()
            .find("loop0")
            .expect("loop0")
            .0;
        let plain = ["ip4-input", check, "ip4-lookup"];
        assert_eq!(walk(&mut vm, sw, "ip4-unicast"), plain);
        let (stuck, late) =
            sluice_graph::testing::StuckWorkers::hold(&mut vm, Duration::from_millis(200));
        assert_eq!(late, [1]);
        set_aggregate_source(&mut vm, 77, true);
        assert_eq!(walk(&mut vm, sw, "ip4-unicast"), plain, "the old chain");
        let ip6 = crate::rpf::IP6_SOURCE_CHECK;
        let e = set_feature(&mut vm, sw, "ip6-unicast", ip6, true).expect_err("not taken");
        assert!(e.to_string().contains("did not take"), "{e}");
        assert!(
            !enabled(&mut vm, sw).iter().any(|(_, f)| f == ip6),
            "{:?}",
            enabled(&mut vm, sw)
        );
        // The worker answers: the next change writes the chain the first source wants.
        stuck.release(&mut vm);
        set_aggregate_source(&mut vm, 78, true);
        let cut = ["ip4-input", crate::gso::IP4_NAME, check, "ip4-lookup"];
        assert_eq!(walk(&mut vm, sw, "ip4-unicast"), cut);
        assert!(vm.ext_mut::<FeatureMain>().stale.is_empty());
        set_feature(&mut vm, sw, "ip6-unicast", ip6, true).expect("taken");
        assert!(enabled(&mut vm, sw).iter().any(|(_, f)| f == ip6));
        vm.stop_workers();
    }

    #[test]
    fn slots_are_bounded() {
        let mut r = FeatureRegistry::default();
        r.add_arc(VNET_ARCS[0]).expect("arc");
        let names: Vec<&'static str> = (0..MAX_SLOTS)
            .map(|i| &*Box::leak(format!("f{i}").into_boxed_str()))
            .collect();
        let mut last = Ok(0);
        for n in names {
            last = r.add_feature(plain("ip4-unicast", n));
            if last.is_err() {
                break;
            }
        }
        assert!(matches!(last, Err(FeatureError::TooMany(_))));
    }
}
