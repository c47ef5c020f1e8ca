//! `sluice-p4`: P4-16 programs (v1model subset) compiled into Sluice graph nodes.
//!
//! The front end (`lexer`, `parser`, `compile`) turns source text into a pre-resolved
//! [`ir::Program`]; `table` holds the run-time match tables; `exec` runs the program on packets
//! (one tight interpreter over the resolved form); `node` puts it in the graph (one node, or
//! one per pipeline segment) and `cli` gives the `p4 ...` commands. See docs/p4.md.

pub mod ast;
pub mod cli;
pub mod compile;
pub mod error;
pub mod exec;
pub mod ir;
pub mod lexer;
pub mod node;
pub mod parser;
pub mod table;

pub use compile::compile;
pub use error::CompileError;

/// Registers the commands (nodes are added at run time by `p4 load`).
pub fn register_cli(t: &mut sluice_cli::CommandTree<sluice_graph::Vlib>) {
    cli::register_cli(t);
}
