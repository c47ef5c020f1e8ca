//! The Sluice FIB: tables read lock-free by every worker and written only by the main thread
//! (atomic stores, seqlocks, deferred reclamation).
//!
//! - [`ip4`]: IPv4 longest-prefix match (DIR-24-8).
//! - [`ip6`]: IPv6 longest-prefix match (24-bit first level, 8-bit strides).
//! - [`adj`]: adjacencies (rewrite, local, glean, incomplete, drop).
//! - [`lb`]: load-balance objects for ECMP routes (flow-hash buckets, weighted).
//! - [`changes`]: the change count, for readers that cache what a lookup returned.

pub mod adj;
mod groups;
pub mod ip4;
pub mod ip6;
pub mod lb;

use std::sync::atomic::{AtomicU64, Ordering};

/// Every change to what a lookup returns — an insert or remove in any `Ip4Lpm`/`Ip6Lpm`
/// (every table of either family, the P4 plugin's LPM tables included), an adjacency or
/// load-balance rewritten in place — adds one to this count, after the change is visible.
/// A reader that caches a lookup's result with the count it read *before* the lookup
/// ([`changes`]) may reuse the result while the count is the same: a change made during its
/// lookup shows as a new count on its next read. One count for the
/// process (every `Vlib`, both families, tables that are not the FIB's): a change anywhere
/// only costs the cachers one lookup each, and reading it is one load of a line the workers
/// do not write. A write that changes nothing (removing an absent prefix, an insert refused)
/// does not count; `tests/changes.rs` checks each kind, in a process of its own.
static CHANGES: AtomicU64 = AtomicU64::new(0);

/// The FIB change count ([`CHANGES`]; acquire: a reader that sees a count sees the tables as
/// they were when it was reached).
#[inline(always)]
pub fn changes() -> u64 {
    CHANGES.load(Ordering::Acquire)
}

/// Counts a change (release: after the change's own stores).
#[inline]
pub(crate) fn changed() {
    CHANGES.fetch_add(1, Ordering::Release);
}
