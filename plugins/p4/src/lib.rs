//! `sluice-p4`: P4-16 programs (v1model subset) compiled into Sluice graph nodes.
//!
//! The front end (`lexer`, `parser`, `compile`) turns source text into a pre-resolved
//! [`ir::Program`]; `code` compiles that into closures specialised for their operands; `table`
//! and `exact` hold the run-time match tables; `exec` (per packet) and `vec` (per frame) run
//! the program on packets; `gen` compiles it to Rust (`sluice-p4c`, the modules in
//! `generated`); `node` puts it in the graph (one node, or one per pipeline segment) and
//! `control` holds the loaded programs and the actions on them, which the `p4 ...` commands
//! (`cli`) and the API messages (`api`) call. See docs/p4.md.

pub mod api;
pub mod ast;
pub mod cli;
pub mod code;
pub mod compile;
pub mod control;
pub mod error;
pub mod exact;
pub mod exec;
pub mod gen;
pub mod generated;
pub mod ir;
pub mod lexer;
pub mod node;
pub mod parser;
pub mod table;
pub mod vec;

pub use compile::compile;
pub use error::{CompileError, P4Error};

/// Registers the commands (nodes are added at run time by `p4 load`).
pub fn register_cli(t: &mut sluice_cli::CommandTree<sluice_graph::Vlib>) {
    cli::register_cli(t);
}

/// The plugin (`plugins { plugin p4 { disable } }`): the `p4 ...` commands; the program
/// nodes are added to the graph by `p4 load` at run time.
pub struct P4Plugin;

/// This plugin, for the daemon's plugin list (`sluice_plugins::all()`).
pub static PLUGIN: P4Plugin = P4Plugin;

impl sluice_vnet::plugin::Plugin for P4Plugin {
    fn name(&self) -> &'static str {
        "p4"
    }
    fn version(&self) -> &'static str {
        env!("CARGO_PKG_VERSION")
    }
    fn description(&self) -> &'static str {
        "P4-16 (v1model subset) programs compiled into graph nodes (docs/p4.md)"
    }
    fn register(
        &self,
        r: &mut sluice_vnet::plugin::Registrar,
    ) -> Result<(), sluice_vnet::plugin::RegisterError> {
        register_cli(&mut r.cli);
        api::register(&mut r.api);
        Ok(())
    }
}
