//! Sluice CLI building blocks (no dependency on the rest of Sluice):
//!
//! - [`CommandTree`]: VPP-style command paths with unique-prefix abbreviation, `?` help;
//! - [`Args`]: tokenizer + argument cursor for handlers, errors quoting the token;
//! - [`script`]: splitting `exec` scripts, brace blocks spanning lines;
//! - [`conf`]: the startup.conf parser (`file:line` errors);
//! - [`proto`]: the framing of the CLI socket shared by `sluice` and `sluicectl`.

pub mod args;
pub mod conf;
pub mod error;
pub mod proto;
pub mod script;
pub mod tree;

pub use args::Args;
pub use error::CliError;
pub use tree::{CommandTree, Handler};
