//! Sluice CLI building blocks, with no dependency on the rest of Sluice:
//!
//! - [`CommandTree`]: VPP-style command paths where every word may be abbreviated to a unique
//!   prefix (`sh int`, `set int ip addr`), `?` help, one-line errors that quote the offending
//!   token (``unknown input `frob'``);
//! - [`Args`]: the tokenizer (words, `"quoted strings"`, `{ ... }` groups) and the argument
//!   cursor handlers use to read keywords and numbers;
//! - [`script`]: splitting `exec` scripts and startup-config files into commands, brace
//!   blocks spanning lines;
//! - [`macros`]: `define` variables and their `$(name)` expansion;
//! - [`conf`]: the startup.conf parser (VPP brace syntax) with `file:line` errors and a
//!   [`conf::SectionCursor`] for typed validation;
//! - [`proto`]: the framing of the CLI socket shared by `sluice` and `sluicectl`;
//! - [`Interrupt`]: the stop request long-running handlers check.
//!
//! Nothing here panics on user input: garbage lines and files give a clean error. Only
//! registering a command wrongly (twice, empty path) panics, at start-up.
//!
//! ```
//! use sluice_cli::{Args, CliError, CommandTree};
//!
//! fn state(n: &mut u32, a: &mut Args) -> Result<String, CliError> {
//!     let _ifname = a.word("interface")?;
//!     let up = if a.keyword("up") { true } else if a.keyword("down") { false } else {
//!         return Err(CliError::new("expected up or down"));
//!     };
//!     a.finish()?;
//!     *n += 1;
//!     Ok(format!("{up}"))
//! }
//!
//! let mut t = CommandTree::new();
//! t.add("set interface state", "set interface state <interface> up|down", state);
//! let mut calls = 0;
//! assert_eq!(t.execute(&mut calls, "set int st pg0 up").unwrap(), "true");
//! assert_eq!(t.execute(&mut calls, "set int st pg0 up now").unwrap_err().msg,
//!            "unknown input `now'");
//! assert_eq!(calls, 1);
//! ```

pub mod args;
pub mod conf;
pub mod error;
pub mod interrupt;
pub mod macros;
pub mod proto;
pub mod script;
pub mod tree;

pub use args::Args;
pub use error::CliError;
pub use interrupt::Interrupt;
pub use tree::{CommandTree, Handler};
