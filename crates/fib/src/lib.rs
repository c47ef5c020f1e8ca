//! The Sluice FIB: tables read lock-free by every worker and written only by the main thread
//! (atomic stores, seqlocks, deferred reclamation).
//!
//! - [`ip4`]: IPv4 longest-prefix match (DIR-24-8).
//! - [`ip6`]: IPv6 longest-prefix match (24-bit first level, 8-bit strides).
//! - [`adj`]: adjacencies (rewrite, local, glean, incomplete, drop).
//! - [`lb`]: load-balance objects for ECMP routes (flow-hash buckets, weighted).

pub mod adj;
mod groups;
pub mod ip4;
pub mod ip6;
pub mod lb;

use std::sync::atomic::AtomicU32;

/// Where a table's first level is (`Ip4Table::entry_prefetch`, `Ip6Table::entry_prefetch`:
/// both are `1 << 24` entries of 4 bytes indexed by the address's top 24 bits), for a node
/// ahead of the lookup to prefetch its packets' entries. Kept as a number: only ever a
/// prefetch hint, never dereferenced (so it is `Send`, and the default, 0, or a table since
/// replaced, only wastes the prefetch).
#[derive(Clone, Copy, Debug, Default)]
pub struct FirstLevelPrefetch(usize);

impl FirstLevelPrefetch {
    fn of(level: &[AtomicU32]) -> Self {
        debug_assert_eq!(level.len(), 1 << 24);
        FirstLevelPrefetch(level.as_ptr() as usize)
    }

    /// Starts loading the first-level entry of the address whose first four bytes (in
    /// network order) are `top`: an IPv4 address, or an IPv6 address's first 32 bits. Every
    /// value has one (indexed by its top 24 bits): no bound check.
    #[inline(always)]
    pub fn prefetch(self, top: u32) {
        let entry = self.0.wrapping_add((top >> 8) as usize * 4);
        sluice_infra::prefetch(entry as *const u8);
    }
}
