//! Load-balance objects: a route with several paths points at one of these; `ip4-lookup`
//! picks a bucket with the packet's flow hash, so one flow always takes one path (ECMP).
//! Weighted paths get buckets in proportion to their weights.
//!
//! Read side shared by all threads, each slot a seqlock over atomics (no lock, never torn);
//! written only by the main thread.

use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

/// Buckets per load-balance object.
pub const BUCKETS: usize = 64;
const CHUNK: usize = 1024;
/// Most load-balance objects.
pub const MAX_LB: usize = 1 << 20;

struct Slot {
    seq: AtomicU32,
    n: AtomicU32,
    buckets: [AtomicU32; BUCKETS],
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            seq: AtomicU32::new(0),
            n: AtomicU32::new(0),
            buckets: std::array::from_fn(|_| AtomicU32::new(0)),
        }
    }
}

/// The read side.
pub struct LbTable {
    chunks: Box<[OnceLock<Box<[Slot]>>]>,
}

impl LbTable {
    fn slot(&self, i: u32) -> Option<&Slot> {
        self.chunks
            .get(i as usize / CHUNK)?
            .get()?
            .get(i as usize % CHUNK)
    }

    /// The adjacency for `hash` in load-balance `i` (0, the drop adjacency, if unknown).
    #[inline(always)]
    pub fn pick(&self, i: u32, hash: u32) -> u32 {
        let Some(s) = self.slot(i) else { return 0 };
        loop {
            let s1 = s.seq.load(Ordering::Acquire);
            if s1 & 1 != 0 {
                std::hint::spin_loop();
                continue;
            }
            let n = s.n.load(Ordering::Relaxed).clamp(1, BUCKETS as u32);
            let a = s.buckets[(hash % n) as usize].load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if s.seq.load(Ordering::Relaxed) == s1 {
                return a;
            }
        }
    }
}

impl LbTable {
    /// How many buckets load-balance `i` has (0 if unknown): bucket `k` (below the count) is
    /// `pick(i, k)`.
    pub fn bucket_count(&self, i: u32) -> u32 {
        self.slot(i)
            .map_or(0, |s| s.n.load(Ordering::Acquire).min(BUCKETS as u32))
    }
}

/// The writer side.
pub struct LoadBalances {
    table: Arc<LbTable>,
    free: Vec<u32>,
    next: u32,
}

impl Default for LoadBalances {
    fn default() -> Self {
        Self::new()
    }
}

/// Spreads `paths` (adjacency, weight) over at most [`BUCKETS`] buckets in proportion to the
/// weights (each path gets at least one bucket).
pub fn buckets_for(paths: &[(u32, u32)]) -> Vec<u32> {
    let total: u64 = paths.iter().map(|p| p.1.max(1) as u64).sum();
    let n = BUCKETS
        .min(((total as usize).max(paths.len())).next_power_of_two())
        .max(paths.len().min(BUCKETS));
    let mut out = Vec::with_capacity(n);
    let mut acc = 0u64;
    for (k, &(adj, w)) in paths.iter().enumerate().take(BUCKETS) {
        acc += w.max(1) as u64;
        let upto = if k + 1 == paths.len() {
            n
        } else {
            ((acc * n as u64) / total) as usize
        };
        let upto = upto
            .max(out.len() + 1)
            .min(n - (paths.len() - 1 - k).min(n));
        while out.len() < upto {
            out.push(adj);
        }
    }
    while out.len() < n {
        out.push(paths.last().map(|p| p.0).unwrap_or(0));
    }
    out
}

impl LoadBalances {
    /// An empty set (index 0 is never handed out).
    pub fn new() -> Self {
        LoadBalances {
            table: Arc::new(LbTable {
                chunks: (0..MAX_LB / CHUNK).map(|_| OnceLock::new()).collect(),
            }),
            free: Vec::new(),
            next: 1,
        }
    }

    /// The shared read side.
    pub fn table(&self) -> &Arc<LbTable> {
        &self.table
    }

    /// Allocates a load-balance object.
    pub fn alloc(&mut self) -> Option<u32> {
        if let Some(i) = self.free.pop() {
            return Some(i);
        }
        let i = self.next;
        if i as usize >= MAX_LB {
            return None;
        }
        self.next += 1;
        self.table.chunks[i as usize / CHUNK]
            .get_or_init(|| (0..CHUNK).map(|_| Slot::default()).collect());
        Some(i)
    }

    /// Frees an object. The caller guarantees no table points at it any more and that the
    /// grace period passed (or accepts that a late reader sees the next user's buckets, which
    /// are valid adjacencies too).
    pub fn free(&mut self, i: u32) {
        self.free.push(i);
    }

    /// Sets the paths of load-balance `i`; counts a FIB change ([`crate::changes`]).
    pub fn set(&mut self, i: u32, paths: &[(u32, u32)]) {
        let Some(s) = self.table.slot(i) else { return };
        let b = buckets_for(paths);
        let seq = s.seq.load(Ordering::Relaxed);
        s.seq.store(seq.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        for (k, a) in b.iter().enumerate() {
            s.buckets[k].store(*a, Ordering::Relaxed);
        }
        s.n.store(b.len() as u32, Ordering::Relaxed);
        s.seq.store(seq.wrapping_add(2), Ordering::Release);
        crate::changed();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_and_spread() {
        let b = buckets_for(&[(5, 1), (6, 1)]);
        assert_eq!(b.len(), 2);
        assert_eq!(b.iter().filter(|&&a| a == 5).count(), 1);
        let b = buckets_for(&[(5, 1), (6, 3)]);
        assert_eq!(b.len(), 4);
        assert_eq!(b.iter().filter(|&&a| a == 6).count(), 3);
        let b = buckets_for(&[(1, 1), (2, 1), (3, 1)]);
        assert_eq!(b.len(), 4);
        for a in 1..=3 {
            assert!(b.contains(&a), "{b:?}");
        }
        let many: Vec<(u32, u32)> = (0..100).map(|i| (i, 1)).collect();
        assert_eq!(buckets_for(&many).len(), BUCKETS);
    }

    #[test]
    fn pick_is_stable_per_hash_and_spreads() {
        let mut l = LoadBalances::new();
        let i = l.alloc().unwrap();
        l.set(i, &[(10, 1), (20, 1), (30, 1), (40, 1)]);
        let t = l.table().clone();
        let mut seen = std::collections::HashSet::new();
        for h in 0..1000u32 {
            let a = t.pick(i, h.wrapping_mul(2654435761));
            assert_eq!(a, t.pick(i, h.wrapping_mul(2654435761)));
            seen.insert(a);
        }
        assert_eq!(seen.len(), 4);
        assert_eq!(t.pick(9999, 1), 0);
    }
}
