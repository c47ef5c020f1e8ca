//! Node-level tests of vnet nodes (and plugins' nodes): the whole vnet graph assembled
//! in-process, one node under test whose next nodes are captured ([`sluice_graph::testing`]),
//! configured through the real CLI, packets written from `packet-generator` templates.
//!
//! ```
//! use sluice_vnet::testing::{pkt, NodeTest};
//! let mut t = NodeTest::new("ip4-input");
//! t.run(&[pkt("UDP: 10.0.0.2 -> 10.0.1.2\nUDP: 1 -> 2\nincrementing 10")]);
//! assert_eq!(t.arc("ip4-lookup").len(), 1);
//! t.assert_counters(&[]);
//! t.assert_no_leaks();
//! ```

use crate::plugin::{assemble, Plugin, PluginEntry, Staged};
use sluice_cli::CommandTree;
use sluice_graph::testing::{test_pool, Harness};
use sluice_graph::{CpuConfig, Vlib};
use std::ops::{Deref, DerefMut};

/// `plugin`, enabled: an entry for [`configured`] and [`NodeTest::with_plugins`].
pub fn enabled(plugin: &'static dyn Plugin) -> PluginEntry {
    PluginEntry {
        plugin,
        enabled: true,
    }
}

/// vnet and `plugins` assembled with `workers` worker threads and a pool of `buffers`
/// buffers, configured by the CLI lines `cmds`: the runtime and its CLI, for tests that
/// drive threads themselves (handoff between threads, a full queue).
///
/// # Panics
/// When the runtime cannot be assembled or a command fails, naming it (test bugs).
pub fn configured(
    plugins: &[PluginEntry],
    workers: usize,
    buffers: u32,
    cmds: &[&str],
) -> (Vlib, CommandTree<Vlib>) {
    let cpu = CpuConfig {
        main_core: None,
        workers: vec![None; workers],
    };
    let pool = sluice_buffer::PoolConfig {
        buffers,
        ..test_pool()
    };
    let a = assemble(plugins, &cpu, &pool, Staged::default())
        .unwrap_or_else(|e| panic!("assemble: {e}"));
    let (mut vm, cli) = (a.vm, a.cli);
    for c in cmds {
        cli.execute(&mut vm, c)
            .unwrap_or_else(|e| panic!("`{c}': {e}"));
    }
    (vm, cli)
}

/// The vnet graph with one node under test (see the module doc). Dereferences to its
/// [`Harness`].
pub struct NodeTest {
    /// The harness around the assembled runtime.
    pub h: Harness,
    /// The CLI of vnet and the enabled plugins.
    pub cli: CommandTree<Vlib>,
}

impl NodeTest {
    /// vnet alone, node `node` under test.
    pub fn new(node: &str) -> NodeTest {
        Self::with_plugins(&[], node)
    }

    /// vnet and `plugins`, node `node` under test.
    ///
    /// # Panics
    /// When the runtime cannot be assembled or the node does not exist (test bugs).
    pub fn with_plugins(plugins: &[PluginEntry], node: &str) -> NodeTest {
        let a = assemble(
            plugins,
            &CpuConfig::default(),
            &test_pool(),
            Staged::default(),
        )
        .unwrap_or_else(|e| panic!("assemble: {e}"));
        NodeTest {
            h: Harness::new(a.vm, node),
            cli: a.cli,
        }
    }

    /// [`configured`] (`workers` worker threads, `buffers` buffers, the CLI lines `cmds`),
    /// node `node` under test: for a test that drives the threads itself (a handoff between
    /// threads, a full queue).
    ///
    /// # Panics
    /// When the runtime cannot be assembled, a command fails or the node does not exist
    /// (test bugs).
    pub fn with_workers(
        plugins: &[PluginEntry],
        workers: usize,
        buffers: u32,
        cmds: &[&str],
        node: &str,
    ) -> NodeTest {
        let (vm, cli) = configured(plugins, workers, buffers, cmds);
        NodeTest {
            h: Harness::new(vm, node),
            cli,
        }
    }

    /// Runs CLI commands (one a line) and returns the last one's output.
    ///
    /// # Panics
    /// When a command fails, naming it.
    pub fn cli(&mut self, cmds: &str) -> String {
        let mut out = String::new();
        for c in cmds.lines().map(str::trim).filter(|c| !c.is_empty()) {
            out = self
                .cli
                .execute(&mut self.h.vm, c)
                .unwrap_or_else(|e| panic!("`{c}' failed: {e}"));
        }
        out
    }

    /// The `sw_if_index` of interface `name`.
    ///
    /// # Panics
    /// When there is no such interface.
    pub fn sw_if(&mut self, name: &str) -> u32 {
        self.h
            .vm
            .ext_mut::<crate::Interfaces>()
            .find(name)
            .unwrap_or_else(|| panic!("no interface `{name}'"))
            .0
    }
}

impl Deref for NodeTest {
    type Target = Harness;
    fn deref(&self) -> &Harness {
        &self.h
    }
}

impl DerefMut for NodeTest {
    fn deref_mut(&mut self) -> &mut Harness {
        &mut self.h
    }
}

/// A packet from a `packet-generator` `data { ... }` template (see [`crate::pg::build`]).
///
/// # Panics
/// When the template does not parse (a test bug).
pub fn pkt(template: &str) -> Vec<u8> {
    crate::pg::build::parse(template)
        .unwrap_or_else(|e| panic!("template: {}", e.msg))
        .build(None)
}
