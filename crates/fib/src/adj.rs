//! Adjacencies: what to do with a packet once the FIB chose it (rewrite and send, punt to the
//! local stack, resolve a neighbour first, drop).
//!
//! The read side ([`AdjTable`]) is shared by every thread; each slot is a seqlock over atomic
//! words, so a reader never sees a half-written adjacency and never takes a lock. Only the
//! main thread writes ([`Adjacencies`]).

use sluice_infra::hash::FastState;
use std::collections::HashMap;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Adjacency kinds.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AdjKind {
    /// Drop (unused slots read as this).
    Drop = 0,
    /// For this router: `ip4-local`.
    Local = 1,
    /// A connected subnet: the destination itself must be resolved (ARP) first.
    Glean = 2,
    /// A resolved neighbour: write `rewrite` in front of the IP header and send on `tx_if`.
    Rewrite = 3,
    /// A neighbour (`nh`) not resolved yet: ask for it and drop.
    Incomplete = 4,
    /// A node the lookup hands the packet to as it is (VPP's DPO to a node, e.g. an SRv6
    /// local SID's `sr-localsid`): `nh` is the lookup node's next arc to it, `tx_if` the
    /// interface it serves; no rewrite, no hop-limit / TTL decrement.
    Node = 5,
}

impl AdjKind {
    fn from_u8(v: u8) -> AdjKind {
        match v {
            1 => AdjKind::Local,
            2 => AdjKind::Glean,
            3 => AdjKind::Rewrite,
            4 => AdjKind::Incomplete,
            5 => AdjKind::Node,
            _ => AdjKind::Drop,
        }
    }
}

/// One adjacency.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Adj {
    /// Kind.
    pub kind: AdjKind,
    /// Output interface.
    pub tx_if: u32,
    /// L3 MTU of the output interface.
    pub mtu: u16,
    /// Ethernet header to prepend (dst MAC, src MAC, EtherType).
    pub rewrite: [u8; 14],
    /// Next hop (host order) for Incomplete; the interface address for Glean.
    pub nh: u32,
}

impl Adj {
    /// A drop adjacency.
    pub const DROP: Adj = Adj {
        kind: AdjKind::Drop,
        tx_if: 0,
        mtu: 0,
        rewrite: [0; 14],
        nh: 0,
    };
}

const CHUNK: usize = 4096;
/// Most adjacencies a table holds.
pub const MAX_ADJ: usize = 1 << 22;

#[derive(Default)]
struct Slot {
    seq: AtomicU32,
    w0: AtomicU64,
    w1: AtomicU64,
    w2: AtomicU64,
    w3: AtomicU64,
}

/// The read side, shared by all threads.
pub struct AdjTable {
    chunks: Box<[OnceLock<Box<[Slot]>>]>,
}

impl AdjTable {
    fn slot(&self, i: u32) -> Option<&Slot> {
        let c = self.chunks.get(i as usize / CHUNK)?.get()?;
        c.get(i as usize % CHUNK)
    }

    /// Reads adjacency `i` (a consistent copy; `Adj::DROP` for an unknown index).
    #[inline(always)]
    pub fn get(&self, i: u32) -> Adj {
        let Some(s) = self.slot(i) else {
            return Adj::DROP;
        };
        loop {
            let s1 = s.seq.load(Ordering::Acquire);
            if s1 & 1 != 0 {
                std::hint::spin_loop();
                continue;
            }
            let (w0, w1, w2, w3) = (
                s.w0.load(Ordering::Relaxed),
                s.w1.load(Ordering::Relaxed),
                s.w2.load(Ordering::Relaxed),
                s.w3.load(Ordering::Relaxed),
            );
            fence(Ordering::Acquire);
            if s.seq.load(Ordering::Relaxed) == s1 {
                let mut rewrite = [0u8; 14];
                rewrite[..8].copy_from_slice(&w1.to_le_bytes());
                rewrite[8..].copy_from_slice(&w2.to_le_bytes()[..6]);
                return Adj {
                    kind: AdjKind::from_u8(w0 as u8),
                    tx_if: (w0 >> 8) as u32,
                    mtu: (w0 >> 40) as u16,
                    rewrite,
                    nh: w3 as u32,
                };
            }
        }
    }

    /// The kind only (one load): what `ip4-lookup` dispatches on.
    #[inline(always)]
    pub fn kind(&self, i: u32) -> AdjKind {
        match self.slot(i) {
            Some(s) => AdjKind::from_u8(s.w0.load(Ordering::Acquire) as u8),
            None => AdjKind::Drop,
        }
    }

    fn put(&self, i: u32, a: &Adj) {
        let Some(s) = self.slot(i) else { return };
        let seq = s.seq.load(Ordering::Relaxed);
        s.seq.store(seq.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        let w0 = a.kind as u64 | ((a.tx_if as u64) << 8) | ((a.mtu as u64) << 40);
        let mut b1 = [0u8; 8];
        b1.copy_from_slice(&a.rewrite[..8]);
        let mut b2 = [0u8; 8];
        b2[..6].copy_from_slice(&a.rewrite[8..]);
        let w2 = u64::from_le_bytes(b2);
        s.w0.store(w0, Ordering::Relaxed);
        s.w1.store(u64::from_le_bytes(b1), Ordering::Relaxed);
        s.w2.store(w2, Ordering::Relaxed);
        s.w3.store(a.nh as u64, Ordering::Relaxed);
        s.seq.store(seq.wrapping_add(2), Ordering::Release);
    }
}

/// Key of a shared adjacency: (kind, interface, next hop).
pub type AdjKey = (AdjKind, u32, u32);

/// The writer side (main thread).
pub struct Adjacencies {
    table: Arc<AdjTable>,
    by_key: HashMap<AdjKey, u32, FastState>,
    values: Vec<Adj>,
}

impl Default for Adjacencies {
    fn default() -> Self {
        Self::new()
    }
}

impl Adjacencies {
    /// An empty table; index 0 is the drop adjacency.
    pub fn new() -> Self {
        let mut a = Adjacencies {
            table: Arc::new(AdjTable {
                chunks: (0..MAX_ADJ / CHUNK).map(|_| OnceLock::new()).collect(),
            }),
            by_key: HashMap::default(),
            values: Vec::new(),
        };
        a.alloc(Adj::DROP);
        a
    }

    /// The shared read side.
    pub fn table(&self) -> &Arc<AdjTable> {
        &self.table
    }

    fn alloc(&mut self, a: Adj) -> Option<u32> {
        let i = self.values.len();
        if i >= MAX_ADJ {
            return None;
        }
        self.table.chunks[i / CHUNK].get_or_init(|| (0..CHUNK).map(|_| Slot::default()).collect());
        self.values.push(a);
        self.table.put(i as u32, &a);
        Some(i as u32)
    }

    /// The adjacency for `key`, created with `make` if it does not exist.
    pub fn find_or_add(&mut self, key: AdjKey, make: impl FnOnce() -> Adj) -> Option<u32> {
        if let Some(&i) = self.by_key.get(&key) {
            return Some(i);
        }
        let i = self.alloc(make())?;
        self.by_key.insert(key, i);
        Some(i)
    }

    /// Finds an adjacency by key.
    pub fn find(&self, key: &AdjKey) -> Option<u32> {
        self.by_key.get(key).copied()
    }

    /// Replaces adjacency `i` (readers see the old or the new one, never a mix); counts a
    /// FIB change ([`crate::changes`]).
    pub fn update(&mut self, i: u32, a: Adj) {
        if let Some(v) = self.values.get_mut(i as usize) {
            *v = a;
            self.table.put(i, &a);
            crate::changed();
        }
    }

    /// Rewrites every adjacency for which `f` returns a new value (interface MAC or MTU
    /// changes); returns how many changed.
    pub fn refresh(&mut self, f: impl Fn(&Adj) -> Option<Adj>) -> usize {
        let mut n = 0;
        for i in 0..self.values.len() {
            if let Some(a) = f(&self.values[i]) {
                if a != self.values[i] {
                    self.update(i as u32, a);
                    n += 1;
                }
            }
        }
        n
    }

    /// The writer's copy of adjacency `i`.
    pub fn get(&self, i: u32) -> Option<&Adj> {
        self.values.get(i as usize)
    }

    /// Every adjacency with its key.
    pub fn iter(&self) -> impl Iterator<Item = (&AdjKey, &Adj)> + '_ {
        self.by_key
            .iter()
            .filter_map(move |(k, &i)| self.values.get(i as usize).map(|a| (k, a)))
    }

    /// Number of adjacencies (including the drop adjacency).
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Only the drop adjacency exists.
    pub fn is_empty(&self) -> bool {
        self.values.len() <= 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_update() {
        let mut t = Adjacencies::new();
        let a = Adj {
            kind: AdjKind::Rewrite,
            tx_if: 7,
            mtu: 1500,
            rewrite: [2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0],
            nh: 0x0a000102,
        };
        let i = t
            .find_or_add((AdjKind::Rewrite, 7, 0x0a000102), || a)
            .unwrap();
        assert_eq!(
            t.find_or_add((AdjKind::Rewrite, 7, 0x0a000102), || Adj::DROP),
            Some(i)
        );
        let r = t.table().clone();
        assert_eq!(r.get(i), a);
        assert_eq!(r.kind(i), AdjKind::Rewrite);
        let mut b = a;
        b.rewrite[0] = 9;
        b.nh = 0xffffffff;
        t.update(i, b);
        assert_eq!(r.get(i), b);
        assert_eq!(r.get(0), Adj::DROP);
        assert_eq!(r.get(1 << 30), Adj::DROP);
    }

    #[test]
    fn concurrent_readers_never_see_a_torn_adjacency() {
        let mut t = Adjacencies::new();
        let mk = |x: u8| Adj {
            kind: AdjKind::Rewrite,
            tx_if: x as u32,
            mtu: x as u16,
            rewrite: [x; 14],
            nh: x as u32 * 0x01010101,
        };
        let i = t.find_or_add((AdjKind::Rewrite, 1, 1), || mk(0)).unwrap();
        let r = t.table().clone();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reads = Arc::new(AtomicU64::new(0));
        let (s2, r2) = (stop.clone(), reads.clone());
        let h = std::thread::spawn(move || {
            while !s2.load(Ordering::Relaxed) {
                let a = r.get(i);
                let x = a.rewrite[0];
                assert!(a.rewrite.iter().all(|&y| y == x), "torn rewrite {a:?}");
                assert_eq!(a.tx_if, x as u32);
                assert_eq!(a.nh, x as u32 * 0x01010101);
                r2.fetch_add(1, Ordering::Relaxed);
            }
            r2.load(Ordering::Relaxed)
        });
        // Keep writing while the reader reads (bounded so a stuck reader cannot hang the test).
        let mut k = 0u32;
        while reads.load(Ordering::Relaxed) < 200_000 && k < 50_000_000 {
            t.update(i, mk(k as u8));
            k += 1;
        }
        stop.store(true, Ordering::Relaxed);
        assert!(h.join().unwrap() > 0);
    }
}
