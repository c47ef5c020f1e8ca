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

/// Every change to what a lookup returns — an LPM insert or remove (any table, either
/// family), an adjacency or load-balance rewritten in place — adds one to this count,
/// after the change is visible. A reader that caches a lookup's result with the count it
/// read *before* the lookup ([`changes`]) may reuse the result while the count is the same:
/// a change made during its lookup shows as a new count on its next read. One count for the
/// process (every `Vlib`, both families): a change anywhere only costs the cachers one
/// lookup each, and reading it is one load of a line the workers do not write.
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

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_infra::epoch::Epochs;

    /// Every write that can change what a lookup returns moves the count (other tests of
    /// this process may move it too: each step checks that it moved, not by how much).
    #[test]
    fn every_fib_write_counts_a_change() {
        let e = Epochs::new(1);
        let step = |what: &str, f: &mut dyn FnMut()| {
            let before = changes();
            f();
            assert!(changes() > before, "{what} counts no change");
        };
        let mut t4 = ip4::Ip4Lpm::new();
        step("ip4 insert", &mut || {
            t4.insert(&e, 0x0a00_0000, 8, 1).unwrap()
        });
        step("ip4 remove", &mut || {
            t4.remove(&e, 0x0a00_0000, 8);
        });
        let mut t6 = ip6::Ip6Lpm::new();
        step("ip6 insert", &mut || {
            t6.insert(&e, 1 << 127, 128, 1).unwrap()
        });
        step("ip6 remove", &mut || {
            t6.remove(&e, 1 << 127, 128);
        });
        let mut a = adj::Adjacencies::new();
        let i = a
            .find_or_add((adj::AdjKind::Rewrite, 1, 2), || adj::Adj::DROP)
            .unwrap();
        step("adjacency update", &mut || a.update(i, adj::Adj::DROP));
        let mut l = lb::LoadBalances::new();
        let k = l.alloc().unwrap();
        step("load-balance set", &mut || l.set(k, &[(1, 1), (2, 1)]));
    }
}
