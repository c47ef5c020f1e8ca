//! `example`: the plugin docs/writing-a-plugin.md walks through (VPP's `sample` plugin in
//! spirit). It is disabled by default; `plugins { plugin example { enable } }` turns it on.
//!
//! It adds one feature node to the `ip4-unicast` arc, a startup.conf section and two CLI
//! commands, all through [`sluice_vnet::plugin::Registrar`] — no core crate names it:
//!
//! ```text
//! example { min-ttl 5 }                                  # startup.conf
//! set interface feature pg0 example-ttl-check arc ip4-unicast
//! example min-ttl 10
//! show example
//! ```
//!
//! `example-ttl-check`:
//! - uses: the IPv4 header at `current_data` (ip4-input checked it), `rx_if`.
//! - sets: `error` when it drops.
//! - next: `error-drop` when the TTL is below the minimum; otherwise the next feature enabled
//!   on the rx interface's `ip4-unicast` arc, by default `ip4-lookup`.
//! - counters: `ttl_low` (error, dropped), `passed` (info).

use sluice_buffer::Buffer;
use sluice_cli::conf::{ConfError, Section, SectionCursor};
use sluice_cli::{Args, CliError};
use sluice_graph::{Cx, Next, NodeKind, NodeRegistration, PacketNode, PerPacket, Vlib};
use sluice_vnet::feature::{FeatureDef, FeatureNext};
use sluice_vnet::plugin::{Plugin, RegisterError, Registrar, Staged};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// The node's name.
pub const NODE: &str = "example-ttl-check";

sluice_graph::arcs! {
    /// Next arcs of `example-ttl-check`.
    enum TtlNext {
        /// `error-drop`.
        Drop => "error-drop",
        /// `ip4-lookup`: the arc's end, taken when no other feature follows.
        Lookup => "ip4-lookup",
    }
}

sluice_graph::counters! {
    /// Counters of `example-ttl-check`.
    enum TtlCounter {
        /// Dropped: TTL below the minimum.
        TtlLow => error("ttl_low", "ip4 TTL below the example plugin's minimum"),
        /// Passed on.
        Passed => info("passed", "ip4 TTL at or above the minimum"),
    }
}

/// The configuration: `example { min-ttl <n> }` at start, `example min-ttl <n>` at run time.
/// A `Vlib` extension; the nodes share the value.
#[derive(Default)]
pub struct ExampleConfig {
    min_ttl: Arc<AtomicU8>,
}

/// The per-thread node.
struct TtlCheck {
    min_ttl: Arc<AtomicU8>,
    features: Arc<FeatureNext>,
    slot: usize,
    min: u8,
}

impl PacketNode for TtlCheck {
    #[inline(always)]
    fn begin_frame(&mut self, _cx: &mut Cx) {
        self.min = self.min_ttl.load(Ordering::Relaxed);
    }

    #[inline(always)]
    fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        // ip4-input guaranteed a full IPv4 header; `get` keeps this safe regardless.
        let ttl = b.data().get(8).copied().unwrap_or(0);
        if ttl < self.min {
            b.hdr.error = cx.error(TtlCounter::TtlLow);
            return TtlNext::Drop.next();
        }
        cx.count(TtlCounter::Passed, 1);
        self.features
            .next(self.slot, b.hdr.rx_if, TtlNext::Lookup.next())
    }
}

/// The plugin.
pub struct ExamplePlugin;

/// This plugin, for the daemon's plugin list (`sluice_plugins::all()`).
pub static PLUGIN: ExamplePlugin = ExamplePlugin;

impl Plugin for ExamplePlugin {
    fn name(&self) -> &'static str {
        "example"
    }
    fn version(&self) -> &'static str {
        env!("CARGO_PKG_VERSION")
    }
    fn description(&self) -> &'static str {
        "Example plugin: drop IPv4 below a minimum TTL (docs/writing-a-plugin.md)"
    }
    fn default_enabled(&self) -> bool {
        false
    }
    fn config_sections(&self) -> &'static [&'static str] {
        &["example"]
    }
    fn configure(&self, staged: &mut Staged, s: &Section, file: &str) -> Result<(), ConfError> {
        let mut c = SectionCursor::new(s, file);
        while let Some(k) = c.next_key() {
            match k.text.as_str() {
                "min-ttl" => {
                    let v = c.value_u64(k)?;
                    let v = u8::try_from(v)
                        .map_err(|_| c.error(k, &format!("min-ttl {v} out of range 0..255")))?;
                    staged
                        .get_mut::<ExampleConfig>()
                        .min_ttl
                        .store(v, Ordering::Relaxed);
                }
                _ => return Err(c.unknown(k)),
            }
        }
        Ok(())
    }
    fn register(&self, r: &mut Registrar) -> Result<(), RegisterError> {
        let slot = r.feature(FeatureDef {
            arc: "ip4-unicast",
            node: NODE,
            runs_before: &[],
            runs_after: &["ip4-source-check-via-rx"],
            takes_gso: false,
        })?;
        let features = r.feature_table();
        // The nodes and the configuration (startup.conf, then the CLI) share one cell.
        let cell = r.staged.get_mut::<ExampleConfig>().min_ttl.clone();
        r.node(
            NodeRegistration::new(NODE, NodeKind::Internal, move |_| {
                Box::new(PerPacket::new(TtlCheck {
                    min_ttl: cell.clone(),
                    features: features.clone(),
                    slot,
                    min: 0,
                }))
            })
            .nexts(TtlNext::NAMES)
            .counters(TtlCounter::DESCS),
        );
        r.cli(
            "example min-ttl",
            "example min-ttl <0-255> — drop IPv4 below this TTL where example-ttl-check is enabled",
            cli_min_ttl,
        );
        r.cli(
            "show example",
            "show example — the example plugin's setting",
            cli_show,
        );
        Ok(())
    }
}

fn cli_min_ttl(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let v = a.u32("minimum TTL")?;
    a.finish()?;
    let v =
        u8::try_from(v).map_err(|_| CliError::new(format!("min-ttl `{v}' out of range 0..255")))?;
    vm.ext_mut::<ExampleConfig>()
        .min_ttl
        .store(v, Ordering::Relaxed);
    Ok(String::new())
}

fn cli_show(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    let v = vm
        .ext_mut::<ExampleConfig>()
        .min_ttl
        .load(Ordering::Relaxed);
    Ok(format!("example: min-ttl {v}\n"))
}

#[cfg(test)]
mod tests {
    use sluice_vnet::plugin::PluginEntry;
    use sluice_vnet::testing::{pkt, NodeTest};

    /// The node alone (docs/writing-a-node.md, "Testing a node"): packets at or above the
    /// minimum TTL go on to `ip4-lookup`, the others are dropped and counted.
    #[test]
    fn drops_below_the_minimum_ttl_and_passes_the_rest() {
        let entry = PluginEntry {
            plugin: &super::PLUGIN,
            enabled: true,
        };
        let mut t = NodeTest::with_plugins(&[entry], super::NODE);
        t.cli("example min-ttl 10");
        let mut low = pkt("UDP: 10.0.0.2 -> 10.0.1.2\nUDP: 1 -> 2");
        low[8] = 9;
        let mut ok = low.clone();
        ok[8] = 10;
        t.run(&[low, ok.clone()]);
        let passed = t.arc("ip4-lookup");
        assert_eq!(passed.len(), 1);
        assert_eq!(passed[0].data, ok);
        assert_eq!(t.drops(), [(super::NODE.to_string(), "ttl_low")]);
        t.assert_counters(&[("ttl_low", 1), ("passed", 1)]);
        t.assert_no_leaks();
    }
}
