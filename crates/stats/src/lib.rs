//! Sluice's statistics segment (VPP's stats segment) and Prometheus exporter.
//!
//! The daemon keeps counting where it always did — per-thread node statistics and counters
//! (`sluice_graph::stats`), per-thread interface counters (`sluice_vnet::interface`), the
//! buffer pool's counts — and its main thread copies them, every `statseg { update-interval }`,
//! into a shared-memory segment (a sealed memfd) with VPP's names: `/if/rx`, `/if/drops`,
//! `/err/<node>/<counter>`, `/sys/node/clocks`, `/nodes/<node>/calls`, `/sys/vector_rate`,
//! `/buffer-pools/<pool>/cached`... Workers pay nothing for it: no store, no fence, no cache
//! line they write is shared with the segment.
//!
//! Other processes get the segment's fd from the stats socket (`statseg { socket-name }`,
//! `SCM_RIGHTS`), map it read-only and read it with [`reader::StatClient`] (Rust, used by
//! `sluicectl stats`) or `python/sluice_stats` (Python), without locks: a sequence lock
//! ([`layout`]) makes every snapshot consistent (all values from one update, never torn), and
//! the writer never waits for readers.
//!
//! `metrics { listen <ip:port> }` serves `GET /metrics` in the Prometheus text format
//! ([`prometheus`]) from a thread of its own ([`http`]) that reads the segment like any other
//! reader: a scrape never touches the main thread.
//!
//! - [`layout`]: the binary layout (shared with the Python reader);
//! - [`shm`]: the memfd, its mappings and fd passing;
//! - [`writer`]: the single writer's directory layout and value stores;
//! - [`reader`]: snapshots and name patterns;
//! - [`prometheus`]: the text exposition with VPP's exporter (v2) names;
//! - [`http`]: the small, bounded HTTP server;
//! - `collector` (feature `collector`, the daemon's side): what is copied from the runtime,
//!   the stats socket, `show statistics segment`.

pub mod http;
pub mod layout;
pub mod prometheus;
pub mod reader;
pub mod shm;
pub mod writer;

#[cfg(feature = "collector")]
pub mod collector;

#[cfg(test)]
mod tests;

pub use reader::{Stat, StatClient, StatValue};

use std::path::PathBuf;

/// Errors of the segment, its readers and the exporter.
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    /// A system call failed.
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
    /// The stats socket cannot be served.
    #[error("{0}")]
    Socket(String),
    /// The entries do not fit in the segment.
    #[error("statistics segment full: {need} bytes needed, {size} available (statseg {{ size }})")]
    Full {
        /// Bytes the layout needs.
        need: usize,
        /// Segment size.
        size: usize,
    },
    /// An entry cannot be laid out.
    #[error("statistics segment: {0}")]
    Layout(String),
    /// What was mapped is not a segment this reader understands.
    #[error("not a Sluice statistics segment: {0}")]
    NotSegment(String),
    /// The segment's contents are inconsistent (read while stable).
    #[error("corrupt statistics segment: {0}")]
    Corrupt(String),
    /// The writer kept the segment busy for longer than a reader waits.
    #[error("statistics segment busy (the writer kept updating it)")]
    Busy,
}

/// The default stats socket: `stats.sock` beside the default CLI socket
/// (`/run/sluice/stats.sock` as root, else under `$XDG_RUNTIME_DIR/sluice/` or
/// `/tmp/sluice-<uid>/`).
pub fn default_stats_socket() -> PathBuf {
    stats_socket_beside(&sluice_cli::proto::default_cli_socket())
}

/// The stats socket of a daemon whose CLI socket is `cli`: `stats.sock` in the same directory.
pub fn stats_socket_beside(cli: &std::path::Path) -> PathBuf {
    cli.with_file_name("stats.sock")
}
