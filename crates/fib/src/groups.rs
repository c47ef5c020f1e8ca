//! The 256-entry groups both LPMs hang below their first level: a read side that is one
//! flat, lazily backed region of address space (group `g` is entries `g*256 .. g*256+256`,
//! so reading an entry is one load at a computed offset, no chunk table to go through; the
//! region is advised for transparent hugepages and never moves or shrinks while the table
//! lives, so readers need no lock) and a writer-side allocator that reuses a retired group
//! only after every worker passed a quiescent point.

use crate::ip4::LpmError;
use sluice_infra::epoch::{Epochs, Retired, ZeroedAtomicU32s};
use std::sync::atomic::{AtomicU32, Ordering};

const GROUP: usize = 256;
/// Most groups a table can hold: 2M groups, 2 GiB (the real IPv6 table needs 38k). Group
/// indices would fit 2^24, but reserving 16 GiB per table made `ethernet-input` 2–3 clocks
/// per packet slower in the 1-route IPv6 benchmark (same instructions; 4 GiB too, 2 GiB not).
pub const MAX_GROUPS: usize = 1 << 21;
/// The store gives up halving its reservation below this many groups.
const MIN_GROUPS: usize = 1 << 12;

/// Read side: group index -> its 256 entries.
pub(crate) struct GroupStore {
    entries: ZeroedAtomicU32s,
    capacity: usize,
}

impl GroupStore {
    /// Reserves address space for [`MAX_GROUPS`] groups (2 GiB, none of it backed until
    /// written); where the address space is limited (RLIMIT_AS, strict overcommit) settles
    /// for the largest power-of-two share it gets.
    pub(crate) fn new() -> Self {
        let mut capacity = MAX_GROUPS;
        loop {
            match ZeroedAtomicU32s::try_new(capacity * GROUP) {
                Ok(entries) => return GroupStore { entries, capacity },
                Err(e) if capacity <= MIN_GROUPS => {
                    panic!("cannot map {capacity} LPM groups: {e}")
                }
                Err(_) => capacity /= 2,
            }
        }
    }

    /// Group `g` (empty beyond the capacity: published indices are always inside it).
    #[inline(always)]
    pub(crate) fn group(&self, g: u32) -> &[AtomicU32] {
        let off = g as usize * GROUP;
        self.entries.as_slice().get(off..off + GROUP).unwrap_or(&[])
    }

    /// Entry `i` of group `g` (0, an empty entry, beyond the capacity).
    #[inline(always)]
    pub(crate) fn entry(&self, g: u32, i: u8) -> u32 {
        entry_in(self.entries(), g, i)
    }

    /// Every group's entries, for loops that hoist the slice out of [`entry_in`] calls.
    #[inline(always)]
    pub(crate) fn entries(&self) -> &[AtomicU32] {
        self.entries.as_slice()
    }
}

/// Entry `i` of group `g` in [`GroupStore::entries`] (0, an empty entry, beyond them).
#[inline(always)]
pub(crate) fn entry_in(entries: &[AtomicU32], g: u32, i: u8) -> u32 {
    entries
        .get((g as usize) << 8 | i as usize)
        .map_or(0, |x| x.load(Ordering::Acquire))
}

/// Writer side (main thread).
pub(crate) struct GroupAlloc {
    n_groups: usize,
    free: Vec<u32>,
    retired: Retired<u32>,
}

impl GroupAlloc {
    pub(crate) fn new() -> Self {
        GroupAlloc {
            n_groups: 0,
            free: Vec::new(),
            retired: Retired::new(),
        }
    }

    /// A group with every entry set to `fill` (not yet published).
    pub(crate) fn alloc(
        &mut self,
        store: &GroupStore,
        epochs: &Epochs,
        fill: u32,
    ) -> Result<u32, LpmError> {
        self.free.extend(self.retired.reclaim(epochs));
        let g = match self.free.pop() {
            Some(g) => g,
            None => {
                if self.n_groups >= store.capacity {
                    return Err(LpmError::Full);
                }
                let g = self.n_groups as u32;
                self.n_groups += 1;
                g
            }
        };
        for x in store.group(g) {
            x.store(fill, Ordering::Relaxed);
        }
        Ok(g)
    }

    /// A group no entry points at any more; reusable once every worker moved on.
    pub(crate) fn retire(&mut self, epochs: &Epochs, g: u32) {
        self.retired.retire(epochs, g);
    }

    /// Groups allocated and not freed or retired.
    pub(crate) fn in_use(&self) -> usize {
        self.n_groups - self.free.len() - self.retired.len()
    }
}
