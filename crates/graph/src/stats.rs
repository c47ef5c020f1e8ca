//! Per-node, per-thread runtime statistics and counters.
//!
//! Each thread writes only its own slot (a relaxed load + store, no locked instruction);
//! readers on the main thread sum the slots ("per-thread counters summed on read").

use std::sync::atomic::{AtomicU64, Ordering};

/// A counter written by one thread and read by others.
#[derive(Default, Debug)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n` (single writer: load + store, not an atomic RMW).
    #[inline(always)]
    pub fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }
    /// Subtracts `n`, stopping at zero (single writer, as `add`; a `clear` between the add
    /// and the subtraction must not wrap the counter).
    #[inline(always)]
    pub fn sub(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).saturating_sub(n),
            Ordering::Relaxed,
        );
    }
    /// Current value.
    #[inline(always)]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    /// Resets to zero (readers only; the writer's next add may race and win, which is fine
    /// for `clear` semantics).
    pub fn clear(&self) {
        self.0.store(0, Ordering::Relaxed)
    }
}

/// A [`Counter`] alone on its cache line, for counters that different threads bump often (a
/// per-thread array of them shares no line between threads).
#[derive(Default, Debug)]
#[repr(align(64))]
pub struct PaddedCounter(pub Counter);

/// One thread's statistics for one node.
#[derive(Default, Debug)]
pub struct ThreadNodeStats {
    /// Times the node was called with work (input nodes: polls that produced packets).
    pub calls: Counter,
    /// Packets processed.
    pub vectors: Counter,
    /// Process-node suspends.
    pub suspends: Counter,
    /// TSC clocks spent.
    pub clocks: Counter,
    /// Node counters (`show errors`).
    pub counters: Box<[Counter]>,
}

/// All threads' statistics for one node.
#[derive(Debug)]
pub struct NodeStats {
    /// Indexed by thread.
    pub per_thread: Box<[ThreadNodeStats]>,
}

impl NodeStats {
    /// Zeroed statistics for `threads` threads and `counters` node counters.
    pub fn new(threads: usize, counters: usize) -> Self {
        NodeStats {
            per_thread: (0..threads.max(1))
                .map(|_| ThreadNodeStats {
                    counters: (0..counters).map(|_| Counter::default()).collect(),
                    ..Default::default()
                })
                .collect(),
        }
    }

    /// Sum of counter `i` over all threads.
    pub fn counter_total(&self, i: usize) -> u64 {
        self.per_thread
            .iter()
            .filter_map(|t| t.counters.get(i))
            .map(Counter::get)
            .sum()
    }

    /// Resets calls, vectors, suspends and clocks on every thread.
    pub fn clear_runtime(&self) {
        for t in self.per_thread.iter() {
            t.calls.clear();
            t.vectors.clear();
            t.suspends.clear();
            t.clocks.clear();
        }
    }

    /// Resets node counters on every thread.
    pub fn clear_counters(&self) {
        for t in self.per_thread.iter() {
            for c in t.counters.iter() {
                c.clear();
            }
        }
    }
}
