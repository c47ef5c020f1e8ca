//! Feature arcs: named, ordered lists of optional nodes spliced into a path per interface
//! (DESIGN.md §3). `ip4-unicast` runs between `ip4-input` and `ip4-lookup`.
//!
//! The control plane orders an interface's enabled features with `runs_before`/`runs_after`
//! (a cycle is an error naming it), adds the graph arcs it needs, and writes, for every node of
//! the chain, the arc to take next for that interface into a shared table of atomics. Nodes
//! read it lock-free: `FeatureNext::next(slot, sw_if_index)`.

use sluice_cli::{Args, CliError, CommandTree};
use sluice_graph::{order_features, FeatureOrder, Next, Vlib};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;

/// Interfaces the tables cover.
pub const MAX_IFS: usize = crate::ip4::MAX_IFS;
/// Nodes that can take part in feature arcs.
pub const MAX_SLOTS: usize = 16;

/// Per (node slot, interface): the next arc index + 1 (0 = the node's default arc).
pub struct FeatureNext {
    t: Box<[AtomicU16]>,
}

impl Default for FeatureNext {
    fn default() -> Self {
        FeatureNext {
            t: (0..MAX_SLOTS * MAX_IFS)
                .map(|_| AtomicU16::new(0))
                .collect(),
        }
    }
}

impl FeatureNext {
    /// The arc node `slot` takes for a packet received on `sw_if`, or `default`.
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

    fn set(&self, slot: usize, sw_if: u32, next: Option<Next>) {
        if let Some(v) = self.t.get(slot * MAX_IFS + sw_if as usize) {
            v.store(next.map(|n| n.0 + 1).unwrap_or(0), Ordering::Relaxed);
        }
    }
}

/// A feature arc.
pub struct ArcDef {
    /// Arc name (`ip4-unicast`).
    pub name: &'static str,
    /// Node the arc starts from (its default arc leads to `end`).
    pub start: &'static str,
    /// Node the arc ends at.
    pub end: &'static str,
}

/// A feature: a node on an arc with ordering constraints.
pub struct FeatureDef {
    /// Arc name.
    pub arc: &'static str,
    /// Node name.
    pub node: &'static str,
    /// Features it must run before.
    pub runs_before: &'static [&'static str],
    /// Features it must run after.
    pub runs_after: &'static [&'static str],
}

/// The arcs and features Sluice has.
pub const ARCS: &[ArcDef] = &[
    ArcDef {
        name: "ip4-unicast",
        start: crate::ip4::nodes::IP4_INPUT,
        end: crate::ip4::nodes::IP4_LOOKUP,
    },
    ArcDef {
        name: "ip6-unicast",
        start: crate::ip6::nodes::IP6_INPUT,
        end: crate::ip6::nodes::IP6_LOOKUP,
    },
];

/// Registered features.
pub const FEATURES: &[FeatureDef] = &[FeatureDef {
    arc: "ip4-unicast",
    node: crate::ip4::nodes::IP4_SOURCE_CHECK,
    runs_before: &[],
    runs_after: &[],
}];

/// Table slot of a node taking part in arcs (start nodes and features).
pub fn slot_of(node: &str) -> Option<usize> {
    let mut names: Vec<&str> = ARCS.iter().map(|a| a.start).collect();
    names.extend(FEATURES.iter().map(|f| f.node));
    names.iter().position(|n| *n == node)
}

/// Control-plane state (a `Vlib` extension).
#[derive(Default)]
pub struct FeatureMain {
    /// Shared next table (also held by the nodes).
    pub table: Option<Arc<FeatureNext>>,
    enabled: BTreeMap<(u32, &'static str), BTreeSet<&'static str>>,
}

/// Installs the shared table (from `vnet::init`).
pub fn init(vm: &mut Vlib, table: Arc<FeatureNext>) {
    vm.ext_mut::<FeatureMain>().table = Some(table);
}

/// Enables or disables a feature on an interface and rewires the chain.
pub fn set_feature(
    vm: &mut Vlib,
    sw_if: u32,
    arc: &str,
    feature: &str,
    on: bool,
) -> Result<(), CliError> {
    let a = ARCS
        .iter()
        .find(|a| a.name == arc)
        .ok_or_else(|| CliError::new(format!("unknown feature arc `{arc}'")))?;
    let f = FEATURES
        .iter()
        .find(|f| f.node == feature && f.arc == arc)
        .ok_or_else(|| CliError::new(format!("unknown feature `{feature}' on arc `{arc}'")))?;
    let fm = vm.ext_mut::<FeatureMain>();
    let table = fm
        .table
        .clone()
        .ok_or_else(|| CliError::new("feature arcs not initialised"))?;
    let set = fm.enabled.entry((sw_if, a.name)).or_default();
    if on {
        set.insert(f.node);
    } else {
        set.remove(f.node);
    }
    let enabled: Vec<FeatureOrder> = FEATURES
        .iter()
        .filter(|x| x.arc == a.name && set.contains(x.node))
        .map(|x| FeatureOrder {
            name: x.node.to_string(),
            runs_before: x.runs_before.iter().map(|s| s.to_string()).collect(),
            runs_after: x.runs_after.iter().map(|s| s.to_string()).collect(),
        })
        .collect();
    let order = order_features(a.name, &enabled).map_err(|e| CliError::new(e.to_string()))?;
    // Reset every participant's entry for this interface, then write the chain.
    for x in FEATURES.iter().filter(|x| x.arc == a.name) {
        if let Some(s) = slot_of(x.node) {
            table.set(s, sw_if, None);
        }
    }
    let mut chain: Vec<String> = vec![a.start.to_string()];
    chain.extend(order);
    chain.push(a.end.to_string());
    for w in chain.windows(2) {
        let next = vm
            .add_next_by_name(&w[0], &w[1])
            .map_err(|e| CliError::new(e.to_string()))?;
        if let Some(s) = slot_of(&w[0]) {
            table.set(s, sw_if, Some(next));
        }
    }
    Ok(())
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
        "show interface features <interface> — enabled features per arc, in order",
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
    let fm = vm.ext_mut::<FeatureMain>();
    let mut out = String::from("Feature paths configured on the interface:\n");
    for arc in ARCS {
        let _ = writeln!(out, "{}:", arc.name);
        let set = fm.enabled.get(&(i.0, arc.name));
        let mut any = false;
        for f in FEATURES.iter().filter(|f| f.arc == arc.name) {
            if set.is_some_and(|s| s.contains(f.node)) {
                let _ = writeln!(out, "  {}", f.node);
                any = true;
            }
        }
        if !any {
            out.push_str("  none configured\n");
        }
    }
    Ok(out)
}
