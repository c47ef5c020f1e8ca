//! The plugin boundary: how a feature outside the core joins the graph, the CLI, the
//! feature arcs and startup.conf without the core naming it (VPP's `VLIB_PLUGIN_REGISTER`,
//! `VLIB_REGISTER_NODE`, `VNET_FEATURE_INIT`, `VLIB_CLI_COMMAND`, `VLIB_CONFIG_FUNCTION`, made
//! explicit).
//!
//! A plugin is a crate under `plugins/` that exposes a value implementing [`Plugin`]. The
//! daemon's plugin list (`sluice_plugins::all()`) is built from those values; [`assemble`]
//! registers the core (the runtime's nodes and CLI, then vnet), then every enabled plugin
//! through one [`Registrar`], builds the graph and runs each plugin's `init`. A disabled
//! plugin registers nothing: its nodes, CLI commands and feature placements are absent, and
//! its startup.conf sections are refused with an error saying it is disabled.
//!
//! Registration order is the list's order; arcs are declared by vnet before any plugin
//! registers, so a plugin can place features on every vnet arc (`ip4-unicast`,
//! `ip4-output`, `l2-input`, ...) and may declare arcs of its own.

use crate::feature::{ArcDef, FeatureDef, FeatureError, FeatureNext, FeatureRegistry};
use sluice_buffer::PoolConfig;
use sluice_cli::conf::{ConfError, Section};
use sluice_cli::{Args, CliError, CommandTree};
use sluice_graph::{CpuConfig, GraphBuilder, NodeRegistration, Vlib, VlibError};
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

/// A CLI handler, as [`CommandTree::add`] takes it.
pub type CliHandler = fn(&mut Vlib, &mut Args) -> Result<String, CliError>;

/// A plugin. Implementations are `static` values in their crate (`pub static PLUGIN`).
pub trait Plugin: Sync {
    /// Unique name (`memif`, `af_packet`): what `plugins { plugin <name> { disable } }` and
    /// `show plugins` use. VPP's file name (`memif_plugin.so`) is accepted for it too.
    fn name(&self) -> &'static str;
    /// Version (`env!("CARGO_PKG_VERSION")`).
    fn version(&self) -> &'static str;
    /// One line for `show plugins`.
    fn description(&self) -> &'static str;
    /// Whether it is enabled when startup.conf does not say (`plugin default { disable }`
    /// turns every plugin off unless enabled by name).
    fn default_enabled(&self) -> bool {
        true
    }
    /// The startup.conf sections it owns (`dpdk`, `linux-cp`, ...).
    fn config_sections(&self) -> &'static [&'static str] {
        &[]
    }
    /// Validates one of its sections (called for each, in file order, before the runtime
    /// exists) and keeps the typed result in `staged`, which becomes the runtime's extension
    /// map: `init` and CLI handlers read it with `vm.ext::<T>()`.
    fn configure(
        &self,
        staged: &mut Staged,
        section: &Section,
        file: &str,
    ) -> Result<(), ConfError> {
        let _ = staged;
        Err(ConfError {
            file: file.to_string(),
            line: section.line,
            msg: format!(
                "plugin `{}' does not take a `{}' section",
                self.name(),
                section.name
            ),
        })
    }
    /// Registers its nodes, feature placements and CLI commands.
    fn register(&self, r: &mut Registrar) -> Result<(), RegisterError>;
    /// Runs once the runtime exists (every plugin registered, graph built, vnet initialised).
    fn init(&self, vm: &mut Vlib) -> Result<(), String> {
        let _ = vm;
        Ok(())
    }
}

/// Why registration failed.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    /// A feature-arc declaration or placement was refused.
    #[error("{owner}: {err}")]
    Feature {
        /// Who registered it (`vnet` or the plugin's name).
        owner: &'static str,
        /// Why.
        err: FeatureError,
    },
    /// Anything else a plugin refuses to register for (its own words).
    #[error("{owner}: {msg}")]
    Other {
        /// The plugin.
        owner: &'static str,
        /// Why.
        msg: String,
    },
}

/// Why assembling the runtime failed.
#[derive(Debug, thiserror::Error)]
pub enum AssembleError {
    /// Registration refused something.
    #[error(transparent)]
    Register(#[from] RegisterError),
    /// The graph or the runtime could not be built.
    #[error(transparent)]
    Runtime(#[from] VlibError),
    /// A plugin's `init` failed.
    #[error("plugin `{plugin}': {msg}")]
    Init {
        /// The plugin.
        plugin: &'static str,
        /// Its message.
        msg: String,
    },
}

/// What everything registers into: the graph's nodes, the CLI, the feature arcs.
pub struct Registrar {
    /// Nodes.
    pub graph: GraphBuilder,
    /// CLI commands.
    pub cli: CommandTree<Vlib>,
    /// Feature arcs and the features placed on them.
    pub features: FeatureRegistry,
    /// API messages: a plugin adds its schema modules, handlers and event sources
    /// (`r.api.module(&mymod::MODULE); r.api.request(handler);`, see `docs/api.md`).
    pub api: sluice_api::ApiRegistry,
    /// The configuration the plugins' sections produced ([`Plugin::configure`]); it becomes
    /// the runtime's extension map once everything registered, so a plugin can hand its
    /// nodes state shared with its configuration (an `Arc` in its config type).
    pub staged: Staged,
    owner: &'static str,
}

impl Default for Registrar {
    fn default() -> Self {
        Self::new()
    }
}

impl Registrar {
    /// An empty registrar.
    pub fn new() -> Self {
        Registrar {
            graph: GraphBuilder::new(),
            cli: CommandTree::new(),
            features: FeatureRegistry::default(),
            api: sluice_api::ApiRegistry::new(),
            staged: Staged::default(),
            owner: "core",
        }
    }

    /// Who is registering now (named in errors).
    pub fn owner(&self) -> &'static str {
        self.owner
    }

    /// Sets who registers next.
    pub fn set_owner(&mut self, owner: &'static str) {
        self.owner = owner;
    }

    /// Registers a node.
    pub fn node(&mut self, reg: NodeRegistration) {
        self.graph.register(reg);
    }

    /// Registers a CLI command.
    pub fn cli(&mut self, path: &str, help: &str, handler: CliHandler) {
        self.cli.add(path, help, handler);
    }

    /// Declares a feature arc and registers its counter feature `<arc>-count` (and its
    /// GSO cutting node, [`ArcDef::gso`]).
    pub fn arc(&mut self, a: ArcDef) -> Result<(), RegisterError> {
        self.features
            .add_arc(a)
            .map_err(|err| RegisterError::Feature {
                owner: self.owner,
                err,
            })?;
        crate::feature::register_count(&mut self.graph, &self.features, &a);
        crate::gso::register_feature(&mut self.graph, &self.features, &a);
        Ok(())
    }

    /// Places a feature node on an arc, ordered by its `runs_before`/`runs_after`; returns
    /// the node's slot in [`Registrar::feature_table`] (`table.next(slot, sw_if, default)`).
    pub fn feature(&mut self, f: FeatureDef) -> Result<usize, RegisterError> {
        self.features
            .add_feature(f)
            .map_err(|err| RegisterError::Feature {
                owner: self.owner,
                err,
            })
    }

    /// The slot of a node taking part in an arc (start node or feature).
    pub fn feature_slot(&self, node: &str) -> Option<usize> {
        self.features.slot(node)
    }

    /// The next-arc table feature nodes read.
    pub fn feature_table(&self) -> Arc<FeatureNext> {
        self.features.table()
    }

    /// A registration error of the current owner.
    pub fn error(&self, msg: impl Into<String>) -> RegisterError {
        RegisterError::Other {
            owner: self.owner,
            msg: msg.into(),
        }
    }
}

/// Typed plugin configuration gathered while startup.conf is read, before the runtime
/// exists; it becomes the runtime's extension map (`vm.ext::<T>()`).
#[derive(Default)]
pub struct Staged {
    map: HashMap<TypeId, Box<dyn Any>>,
}

impl Staged {
    /// The value of type `T`, created with `Default` on first use.
    pub fn get_mut<T: Default + 'static>(&mut self) -> &mut T {
        self.map
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Box::<T>::default())
            .downcast_mut()
            .expect("type map entry has the type of its key")
    }

    /// The value of type `T`, if set.
    pub fn get<T: 'static>(&self) -> Option<&T> {
        self.map.get(&TypeId::of::<T>())?.downcast_ref()
    }

    /// Sets the value of type `T`.
    pub fn put<T: 'static>(&mut self, v: T) {
        self.map.insert(TypeId::of::<T>(), Box::new(v));
    }

    /// Removes and returns the value of type `T`, if set.
    pub fn take<T: 'static>(&mut self) -> Option<T> {
        let v = self.map.remove(&TypeId::of::<T>())?;
        v.downcast().ok().map(|b| *b)
    }

    fn install(self, vm: &mut Vlib) {
        for (id, v) in self.map {
            vm.put_ext_any(id, v);
        }
    }
}

impl std::fmt::Debug for Staged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Staged({} entries)", self.map.len())
    }
}

/// A plugin and whether startup.conf enabled it.
#[derive(Clone, Copy)]
pub struct PluginEntry {
    /// The plugin.
    pub plugin: &'static dyn Plugin,
    /// Enabled?
    pub enabled: bool,
}

/// `plugins { ... }`: which plugins run.
#[derive(Clone, Debug, Default)]
pub struct PluginsConfig {
    /// `plugin default { disable }`.
    pub default_disable: bool,
    /// `plugin <name> { enable|disable }`, by Sluice name.
    pub explicit: Vec<(String, bool)>,
}

impl PluginsConfig {
    /// Resolves the list against the configuration.
    pub fn entries(&self, all: &[&'static dyn Plugin]) -> Vec<PluginEntry> {
        all.iter()
            .map(|&p| {
                let by_name = self
                    .explicit
                    .iter()
                    .rev()
                    .find(|(n, _)| n == p.name())
                    .map(|&(_, on)| on);
                let enabled = by_name.unwrap_or(!self.default_disable && p.default_enabled());
                PluginEntry { plugin: p, enabled }
            })
            .collect()
    }
}

/// The Sluice name of a plugin as written in startup.conf: `memif_plugin.so` and `memif`
/// both name `memif`.
pub fn plugin_name(w: &str) -> &str {
    w.strip_suffix(".so")
        .map(|s| s.strip_suffix("_plugin").unwrap_or(s))
        .unwrap_or(w)
}

/// What `show plugins` lists (a `Vlib` extension set by [`assemble`]).
#[derive(Default)]
pub struct PluginList {
    entries: Vec<PluginEntry>,
}

impl PluginList {
    /// The plugins and whether each is enabled.
    pub fn entries(&self) -> &[PluginEntry] {
        &self.entries
    }
}

/// The runtime and its CLI, assembled.
pub struct Assembled {
    /// The runtime.
    pub vm: Vlib,
    /// Every command of the core and the enabled plugins.
    pub cli: CommandTree<Vlib>,
    /// Every API message of the core and the enabled plugins.
    pub api: sluice_api::ApiRegistry,
}

/// Registers the core and every enabled plugin, builds the runtime, installs the staged
/// configuration and runs every `init`: what the daemon, the benchmarks and the tests call.
///
/// A [`Clock`](sluice_infra::clock::Clock) in `staged` is not installed like the rest: it
/// replaces the runtime's calibrated clock (a benchmark's [`Clock::slowed`] one; the clock is
/// picked out of `staged` by its type, so any staged `Clock` does this).
///
/// [`Clock::slowed`]: sluice_infra::clock::Clock::slowed
pub fn assemble(
    plugins: &[PluginEntry],
    cpu: &CpuConfig,
    buffers: &PoolConfig,
    staged: Staged,
) -> Result<Assembled, AssembleError> {
    let mut r = Registrar::new();
    r.staged = staged;
    sluice_graph::nodes::register(&mut r.graph);
    sluice_graph::cli::register(&mut r.cli);
    r.set_owner("vnet");
    crate::register(&mut r)?;
    crate::api::register(&mut r.api);
    r.cli(
        "show plugins",
        "show plugins — plugins, their versions and whether they are enabled",
        cli_show_plugins,
    );
    for e in plugins.iter().filter(|e| e.enabled) {
        r.set_owner(e.plugin.name());
        e.plugin.register(&mut r)?;
    }
    let Registrar {
        graph,
        cli,
        features,
        mut staged,
        api,
        ..
    } = r;
    // A staged `Clock` (a benchmark's slowed one) replaces the calibrated one.
    let mut vm = match staged.take::<sluice_infra::clock::Clock>() {
        Some(clock) => Vlib::with_clock(graph, cpu, buffers, clock)?,
        None => Vlib::new(graph, cpu, buffers)?,
    };
    staged.install(&mut vm);
    crate::feature::init(&mut vm, Arc::new(features));
    vm.ext_mut::<PluginList>().entries = plugins.to_vec();
    crate::init(&mut vm);
    for e in plugins.iter().filter(|e| e.enabled) {
        e.plugin.init(&mut vm).map_err(|msg| AssembleError::Init {
            plugin: e.plugin.name(),
            msg,
        })?;
    }
    Ok(Assembled { vm, cli, api })
}

fn cli_show_plugins(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    let mut out = String::from(" Plugins (linked into this binary):\n\n");
    let _ = writeln!(
        out,
        "     {:<20} {:<10} {:<9} Description",
        "Plugin", "Version", "State"
    );
    for (i, e) in vm.ext_mut::<PluginList>().entries.iter().enumerate() {
        let _ = writeln!(
            out,
            " {:>3}. {:<20} {:<10} {:<9} {}",
            i + 1,
            e.plugin.name(),
            e.plugin.version(),
            if e.enabled { "enabled" } else { "disabled" },
            e.plugin.description()
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct P(&'static str, bool);
    impl Plugin for P {
        fn name(&self) -> &'static str {
            self.0
        }
        fn version(&self) -> &'static str {
            "1"
        }
        fn description(&self) -> &'static str {
            "test"
        }
        fn default_enabled(&self) -> bool {
            self.1
        }
        fn register(&self, _r: &mut Registrar) -> Result<(), RegisterError> {
            Ok(())
        }
    }
    static A: P = P("a", true);
    static B: P = P("b", false);

    #[test]
    fn plugin_names_accept_vpp_file_names() {
        assert_eq!(plugin_name("memif_plugin.so"), "memif");
        assert_eq!(plugin_name("memif"), "memif");
        assert_eq!(plugin_name("odd.so"), "odd");
    }

    #[test]
    fn enablement_follows_default_then_name() {
        let all: [&'static dyn Plugin; 2] = [&A, &B];
        let on = |c: &PluginsConfig| -> Vec<bool> {
            c.entries(&all).iter().map(|e| e.enabled).collect()
        };
        assert_eq!(on(&PluginsConfig::default()), [true, false]);
        let c = PluginsConfig {
            default_disable: true,
            explicit: vec![("b".into(), true)],
        };
        assert_eq!(on(&c), [false, true]);
        let c = PluginsConfig {
            default_disable: false,
            explicit: vec![("a".into(), true), ("a".into(), false)],
        };
        assert_eq!(on(&c), [false, false], "the last word wins");
    }

    #[test]
    fn a_staged_clock_replaces_the_calibrated_one() {
        use sluice_infra::clock::Clock;
        let mut staged = Staged::default();
        staged.put(Clock::with_hz(1e9).slowed(10.0));
        let cpu = CpuConfig::default();
        let pool = sluice_graph::testing::test_pool();
        let a = assemble(&[], &cpu, &pool, staged).unwrap_or_else(|e| panic!("assemble: {e}"));
        assert_eq!(a.vm.shared.clock.hz(), 1e10);
    }
}
