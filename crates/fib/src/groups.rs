//! The 256-entry groups both LPMs hang below their first level: a read side of 2 MiB chunks
//! on transparent hugepages (allocated once, never freed while the table lives, so readers
//! need no lock) and a writer-side allocator that reuses a retired group only after every
//! worker passed a quiescent point.

use crate::ip4::LpmError;
use sluice_infra::epoch::{Epochs, Retired, ZeroedAtomicU32s};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

// 2 MiB chunks: a lookup descending through several groups costs few TLB misses.
const GROUPS_PER_CHUNK: usize = 2048;
const MAX_CHUNKS: usize = 8192;
/// Most groups a table can hold (group indices fit in 24 bits).
pub const MAX_GROUPS: usize = GROUPS_PER_CHUNK * MAX_CHUNKS;

/// Read side: group index -> its 256 entries.
pub(crate) struct GroupStore {
    chunks: Box<[OnceLock<ZeroedAtomicU32s>]>,
}

impl GroupStore {
    pub(crate) fn new() -> Self {
        GroupStore {
            chunks: (0..MAX_CHUNKS).map(|_| OnceLock::new()).collect(),
        }
    }

    /// Group `g` (empty for an index never allocated: published indices always are).
    #[inline(always)]
    pub(crate) fn group(&self, g: u32) -> &[AtomicU32] {
        let c = g as usize / GROUPS_PER_CHUNK;
        let off = (g as usize % GROUPS_PER_CHUNK) * 256;
        match self.chunks.get(c).and_then(|c| c.get()) {
            Some(chunk) => &chunk.as_slice()[off..off + 256],
            None => &[],
        }
    }
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
                if self.n_groups >= MAX_GROUPS {
                    return Err(LpmError::Full);
                }
                let g = self.n_groups as u32;
                self.n_groups += 1;
                store.chunks[g as usize / GROUPS_PER_CHUNK]
                    .get_or_init(|| ZeroedAtomicU32s::new(GROUPS_PER_CHUNK * 256));
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
