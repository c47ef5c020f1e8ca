//! Adjacencies: what to do with a packet once the FIB chose it (rewrite and send, punt to the
//! local stack, resolve a neighbour first, drop).
//!
//! The read side ([`AdjTable`]) is shared by every thread; each slot is a seqlock over atomic
//! words, so a reader never sees a half-written adjacency and never takes a lock. Only the
//! main thread writes ([`Adjacencies`]).

use sluice_infra::hash::FastState;
use std::collections::HashMap;
use std::sync::atomic::{fence, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

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

/// One adjacency's words behind its seqlock: `w0` the kind, interface and MTU; `w1`, `w2`
/// the Ethernet header after two zero bytes ([`AdjRewrite::eth`], the rewrite nodes' form:
/// read as it is stored); `w3` the next hop. A cache line each (an adjacency read is one
/// line; the index times 64 is one shift).
#[repr(align(64))]
struct Slot {
    seq: AtomicU32,
    w0: AtomicU64,
    w1: AtomicU64,
    w2: AtomicU64,
    w3: AtomicU64,
}

impl Slot {
    const fn zero() -> Slot {
        Slot {
            seq: AtomicU32::new(0),
            w0: AtomicU64::new(0),
            w1: AtomicU64::new(0),
            w2: AtomicU64::new(0),
            w3: AtomicU64::new(0),
        }
    }

    /// A consistent copy of the four words (the seqlock's read side).
    #[inline(always)]
    fn read(&self) -> [u64; 4] {
        loop {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 & 1 != 0 {
                std::hint::spin_loop();
                continue;
            }
            let w = [
                self.w0.load(Ordering::Relaxed),
                self.w1.load(Ordering::Relaxed),
                self.w2.load(Ordering::Relaxed),
                self.w3.load(Ordering::Relaxed),
            ];
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s1 {
                return w;
            }
        }
    }
}

/// The adjacency a slot's words hold (see [`Slot`]).
#[inline(always)]
fn adj_of([w0, w1, w2, w3]: [u64; 4]) -> Adj {
    let mut rewrite = [0u8; 14];
    rewrite[..6].copy_from_slice(&w1.to_le_bytes()[2..]);
    rewrite[6..].copy_from_slice(&w2.to_le_bytes());
    Adj {
        kind: AdjKind::from_u8(w0 as u8),
        tx_if: (w0 >> 8) as u32,
        mtu: (w0 >> 40) as u16,
        rewrite,
        nh: w3 as u32,
    }
}

/// A slot's words in the rewrite nodes' form: the stored Ethernet words as they are.
#[inline(always)]
fn rewrite_of([w0, w1, w2, _]: [u64; 4]) -> AdjRewrite {
    let mut eth = [0u8; 16];
    eth[..8].copy_from_slice(&w1.to_le_bytes());
    eth[8..].copy_from_slice(&w2.to_le_bytes());
    AdjRewrite {
        tx_if: (w0 >> 8) as u32,
        mtu: (w0 >> 40) as u16,
        eth,
    }
}

/// `CHUNK` slots: a table's unit of allocation.
struct Chunk([Slot; CHUNK]);

/// The chunk every index of a table reads before its chunk exists, and every index past
/// [`MAX_ADJ`]: all zeros, the drop adjacency. Never written ([`AdjTable::put`] only
/// writes allocated indices).
static EMPTY: Chunk = Chunk([const { Slot::zero() }; CHUNK]);

/// An adjacency in the form the rewrite nodes use: what [`AdjTable::rewrite`] reads.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct AdjRewrite {
    /// Output interface.
    pub tx_if: u32,
    /// L3 MTU of the output interface.
    pub mtu: u16,
    /// The Ethernet header (`Adj::rewrite`) after two zero bytes: one 16-byte store two
    /// bytes before the packet.
    pub eth: [u8; 16],
}

/// The read side, shared by all threads.
pub struct AdjTable {
    /// `MAX_ADJ / CHUNK` pointers, each to [`EMPTY`] or to a chunk leaked by
    /// `Adjacencies::alloc` (set once, from `EMPTY`; freed by `Drop`, as a `Box`).
    chunks: Box<[AtomicPtr<Chunk>]>,
}

impl Drop for AdjTable {
    fn drop(&mut self) {
        for c in self.chunks.iter_mut() {
            let p = *c.get_mut();
            if !std::ptr::eq(p, &EMPTY) {
                // SAFETY: a pointer other than `EMPTY` was allocated zeroed with `Chunk`'s
                // layout by `Adjacencies::alloc` (a valid `Chunk`, as a `Box` allocates it)
                // and is freed only here, once (`&mut self`: no reader).
                drop(unsafe { Box::from_raw(p) });
            }
        }
    }
}

impl AdjTable {
    fn new() -> Self {
        let empty = std::ptr::from_ref(&EMPTY).cast_mut();
        AdjTable {
            chunks: (0..MAX_ADJ / CHUNK)
                .map(|_| AtomicPtr::new(empty))
                .collect(),
        }
    }

    /// Slot `i`: a slot of `EMPTY` (zeros, the drop adjacency) when its chunk does not
    /// exist. One bound test, no other branch: the read every adjacency change costs.
    #[inline(always)]
    fn slot(&self, i: u32) -> &Slot {
        let c = match self.chunks.get(i as usize / CHUNK) {
            Some(c) => c.load(Ordering::Acquire).cast_const(),
            None => std::ptr::from_ref(&EMPTY),
        };
        // SAFETY: `c` is `EMPTY` (static) or a chunk from `Adjacencies::alloc`, published with
        // `Release` after its initialisation and freed only when the table is dropped,
        // which `&self` outlives.
        let c = unsafe { &*c };
        &c.0[i as usize % CHUNK]
    }

    /// Reads adjacency `i` (a consistent copy; `Adj::DROP` for an unknown index).
    #[inline(always)]
    pub fn get(&self, i: u32) -> Adj {
        adj_of(self.slot(i).read())
    }

    /// Reads adjacency `i` in the rewrite nodes' form (a consistent copy; zeros for an
    /// unknown index): its Ethernet header is stored in that form, nothing is converted.
    #[inline(always)]
    pub fn rewrite(&self, i: u32) -> AdjRewrite {
        rewrite_of(self.slot(i).read())
    }

    /// Reads adjacency `i` in both forms from one consistent copy: what a checked path that
    /// needs the whole `Adj` and the fast path's form beside it reads (no conversion back).
    #[inline(always)]
    pub fn get_with_rewrite(&self, i: u32) -> (Adj, AdjRewrite) {
        let w = self.slot(i).read();
        (adj_of(w), rewrite_of(w))
    }

    /// The kind only (one load): what `ip4-lookup` dispatches on.
    #[inline(always)]
    pub fn kind(&self, i: u32) -> AdjKind {
        AdjKind::from_u8(self.slot(i).w0.load(Ordering::Acquire) as u8)
    }

    /// Writes allocated adjacency `i` (never a slot of `EMPTY`: `alloc` made its chunk).
    /// Checked in release builds too: a write into `EMPTY` would make every unmade index
    /// stop reading as drop. Control plane only; the data path never writes.
    fn put(&self, i: u32, a: &Adj) {
        assert!(
            self.chunks
                .get(i as usize / CHUNK)
                .is_some_and(|c| !std::ptr::eq(c.load(Ordering::Relaxed), &EMPTY)),
            "adjacency {i} written before its chunk was made"
        );
        let s = self.slot(i);
        let seq = s.seq.load(Ordering::Relaxed);
        s.seq.store(seq.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        let w0 = a.kind as u64 | ((a.tx_if as u64) << 8) | ((a.mtu as u64) << 40);
        let mut b1 = [0u8; 8];
        b1[2..].copy_from_slice(&a.rewrite[..6]);
        let mut b2 = [0u8; 8];
        b2.copy_from_slice(&a.rewrite[6..]);
        s.w0.store(w0, Ordering::Relaxed);
        s.w1.store(u64::from_le_bytes(b1), Ordering::Relaxed);
        s.w2.store(u64::from_le_bytes(b2), Ordering::Relaxed);
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
            table: Arc::new(AdjTable::new()),
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
        let c = &self.table.chunks[i / CHUNK];
        if std::ptr::eq(c.load(Ordering::Relaxed), &EMPTY) {
            // Zeroed like `EMPTY`, then published (`Release`: a reader that sees the
            // pointer sees the zeros); only this thread writes the pointers.
            let layout = std::alloc::Layout::new::<Chunk>();
            // SAFETY: `Chunk` is not zero-sized.
            let new = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<Chunk>();
            if new.is_null() {
                std::alloc::handle_alloc_error(layout);
            }
            // `new` is a `Chunk` (atomics only: all zeros is a valid value) allocated with
            // the global allocator and its layout, as `Box::from_raw` in `Drop` frees it.
            c.store(new, Ordering::Release);
        }
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

    /// Indices of chunks not made yet, past the table and across a chunk's boundary: the
    /// drop adjacency until written, then their own; the rewrite form is the same words.
    #[test]
    fn chunks_read_as_drop_until_made_and_the_rewrite_form_matches() {
        let mut t = Adjacencies::new();
        let r = t.table().clone();
        let far = CHUNK as u32 + 1;
        assert_eq!(r.get(far), Adj::DROP);
        assert_eq!(r.kind(far), AdjKind::Drop);
        assert_eq!(r.get(MAX_ADJ as u32), Adj::DROP);
        assert_eq!(r.get(u32::MAX), Adj::DROP);
        let zero = AdjRewrite {
            tx_if: 0,
            mtu: 0,
            eth: [0; 16],
        };
        assert_eq!(r.rewrite(far), zero);
        let mk = |k: u32| Adj {
            kind: AdjKind::Rewrite,
            tx_if: k,
            mtu: 1500,
            rewrite: std::array::from_fn(|j| (k as u8).wrapping_add(j as u8)),
            nh: k,
        };
        for k in 1..=CHUNK as u32 + 2 {
            assert_eq!(t.find_or_add((AdjKind::Rewrite, k, k), || mk(k)), Some(k));
        }
        for k in [1, CHUNK as u32 - 1, CHUNK as u32, far] {
            assert_eq!(r.get(k), mk(k), "{k}");
            let w = r.rewrite(k);
            assert_eq!((w.tx_if, w.mtu), (k, 1500));
            assert_eq!(w.eth[..2], [0, 0]);
            assert_eq!(w.eth[2..], mk(k).rewrite, "{k}");
            assert_eq!(r.get_with_rewrite(k), (mk(k), w), "{k}");
        }
        assert_eq!(r.get(far + 2), Adj::DROP, "written up to far + 1 only");
        drop(t);
        assert_eq!(r.get(far), mk(far), "the read side outlives the writer");
    }

    /// An adjacency every byte of which is `x` (a torn read mixes two of them).
    fn uniform(x: u8) -> Adj {
        Adj {
            kind: AdjKind::Rewrite,
            tx_if: x as u32,
            mtu: x as u16,
            rewrite: [x; 14],
            nh: x as u32 * 0x01010101,
        }
    }

    #[test]
    fn concurrent_readers_never_see_a_torn_adjacency() {
        let mut t = Adjacencies::new();
        let mk = uniform;
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
                // The rewrite nodes' form, read the same way.
                let w = r.rewrite(i);
                let x = w.eth[2];
                assert_eq!(w.eth[..2], [0, 0], "{w:?}");
                assert!(w.eth[2..].iter().all(|&y| y == x), "torn eth {w:?}");
                assert_eq!((w.tx_if, w.mtu), (x as u32, x as u16), "torn {w:?}");
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

    /// Readers at the allocation frontier (the last allocated index, the next one, one chunk
    /// past it) while the writer allocates across chunk boundaries and keeps updating: an
    /// index reads as drop (zeros) or as a whole adjacency, never torn, and an index the
    /// writer has published as allocated never reads as zero (the chunk's zeros are visible
    /// before its pointer, its words before the frontier).
    #[test]
    fn readers_at_the_allocation_frontier_never_see_a_torn_or_missing_adjacency() {
        let mk = uniform;
        let mut t = Adjacencies::new();
        let r = t.table().clone();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // Highest index allocated, stored (`Release`) after `find_or_add` returned.
        let hi = Arc::new(AtomicU32::new(0));
        let readers: Vec<_> = (0..2u32)
            .map(|th| {
                let (r, stop, hi) = (r.clone(), stop.clone(), hi.clone());
                std::thread::spawn(move || {
                    let (mut n, mut j) = (0u64, th);
                    while !stop.load(Ordering::Relaxed) {
                        let h = hi.load(Ordering::Acquire);
                        for i in [1, h, h + 1, h + CHUNK as u32, j % (h + 2)] {
                            let w = r.rewrite(i);
                            let x = w.eth[2];
                            assert_eq!(w.eth[..2], [0, 0], "{i}: {w:?}");
                            assert!(w.eth[2..].iter().all(|&y| y == x), "torn eth {i}: {w:?}");
                            assert_eq!((w.tx_if, w.mtu), (x as u32, x as u16), "torn {i}: {w:?}");
                            if (1..=h).contains(&i) {
                                assert_ne!(x, 0, "allocated {i} read as zero (frontier {h})");
                            }
                            let a = r.get(i);
                            assert!(a.rewrite.iter().all(|&y| y == a.rewrite[0]), "{i}: {a:?}");
                            assert_eq!(a.tx_if, a.rewrite[0] as u32, "{i}: {a:?}");
                            n += 1;
                        }
                        j = j.wrapping_mul(1664525).wrapping_add(1013904223);
                    }
                    n
                })
            })
            .collect();
        // Four chunk boundaries; every allocation followed by updates of index 1 and of the
        // new index (values never zero, so zero means "not written").
        let mut k = 0u32;
        let end = 4 * CHUNK as u32 + 16;
        for i in 1..end {
            let x = (i % 255 + 1) as u8;
            assert_eq!(t.find_or_add((AdjKind::Rewrite, i, i), || mk(x)), Some(i));
            hi.store(i, Ordering::Release);
            for _ in 0..4 {
                k = k.wrapping_add(1);
                t.update(1, mk((k % 255 + 1) as u8));
                t.update(i, mk((k % 253 + 1) as u8));
            }
        }
        stop.store(true, Ordering::Relaxed);
        for h in readers {
            assert!(h.join().unwrap() > 0);
        }
        assert_eq!(t.len(), end as usize);
    }
}
