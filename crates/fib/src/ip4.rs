//! IPv4 longest-prefix match: DIR-24-8 (a 2^24-entry first level indexed by the top 24 bits,
//! 256-entry second-level groups for prefixes longer than /24).
//!
//! Lookups are one or two relaxed/acquire atomic loads, no lock, from any thread. Only the
//! main thread writes (`&mut self`): entries are updated in place with atomic stores; a new
//! second-level group is filled before it is published; a group that is no longer needed is
//! retired and reused only after every worker passed a quiescent point.
//!
//! Entry encoding (u32): bit 31 valid, bit 30 extended (low 24 bits = group index),
//! bits 24..=29 depth (prefix length that set the entry), bits 0..=23 value.

use crate::groups::{GroupAlloc, GroupStore};
use sluice_infra::epoch::{Epochs, ZeroedAtomicU32s};
use sluice_infra::hash::FastState;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};

const VALID: u32 = 1 << 31;
const EXT: u32 = 1 << 30;
const VALUE_MASK: u32 = 0x00ff_ffff;
/// Largest value an entry can carry.
pub const MAX_VALUE: u32 = VALUE_MASK;

#[inline(always)]
fn leaf(depth: u8, value: u32) -> u32 {
    VALID | ((depth as u32) << 24) | (value & VALUE_MASK)
}

#[inline(always)]
fn depth_of(e: u32) -> u8 {
    ((e >> 24) & 0x3f) as u8
}

/// The read side of the table, shared by every thread (`Arc<Ip4Table>`): lookups only.
pub struct Ip4Table {
    tbl24: ZeroedAtomicU32s,
    groups: GroupStore,
}

/// The IPv4 LPM: the shared [`Ip4Table`] plus the writer's bookkeeping (main thread only).
pub struct Ip4Lpm {
    table: std::sync::Arc<Ip4Table>,
    alloc: GroupAlloc,
    routes: [HashMap<u32, u32, FastState>; 33],
    n_routes: usize,
}

/// Why an insert failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LpmError {
    /// Prefix length above 32.
    BadLength(u8),
    /// Value does not fit in 24 bits.
    BadValue(u32),
    /// No second-level group left.
    Full,
}

impl std::fmt::Display for LpmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LpmError::BadLength(l) => write!(f, "prefix length {l} > 32"),
            LpmError::BadValue(v) => write!(f, "value {v} does not fit in 24 bits"),
            LpmError::Full => f.write_str("IPv4 FIB is full (no second-level group left)"),
        }
    }
}

impl std::error::Error for LpmError {}

/// Masks an address to a prefix length.
#[inline(always)]
pub fn mask(addr: u32, len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        addr & (u32::MAX << (32 - len as u32))
    }
}

impl Ip4Table {
    #[inline(always)]
    pub(crate) fn group(&self, g: u32) -> &[AtomicU32] {
        self.groups.group(g)
    }

    /// Longest-prefix match: the value of the longest prefix covering `addr`.
    #[inline(always)]
    pub fn lookup(&self, addr: u32) -> Option<u32> {
        let mut e = self.tbl24.as_slice()[(addr >> 8) as usize].load(Ordering::Acquire);
        if e & EXT != 0 {
            e = self.groups.entry(e & VALUE_MASK, addr as u8);
        }
        (e & VALID != 0).then_some(e & VALUE_MASK)
    }

    /// Where the first-level entries are, for a node ahead of the lookup to prefetch the
    /// entries of its packets' destinations (`ip4-input`), one register per frame.
    #[inline(always)]
    pub fn entry_prefetch(&self) -> Ip4EntryPrefetch {
        Ip4EntryPrefetch(self.tbl24.as_slice().as_ptr() as usize)
    }

    /// Four lookups at once (independent loads overlap in the memory system).
    #[inline(always)]
    pub fn lookup_x4(&self, a: [u32; 4]) -> [Option<u32>; 4] {
        self.lookup_x4_or(a, u32::MAX)
            .map(|r| (r != u32::MAX).then_some(r))
    }

    /// [`Ip4Table::lookup_x4`] with `miss` (not a 24-bit value) in place of `None`: plain
    /// words, no `Option`s to unpack through the stack in the caller.
    #[inline(always)]
    pub fn lookup_x4_or(&self, a: [u32; 4], miss: u32) -> [u32; 4] {
        // As an array (one length compare per call) the four indices, 24-bit by
        // construction, need no bound checks.
        let Ok(t) = <&[_; 1 << 24]>::try_from(self.tbl24.as_slice()) else {
            return a.map(|a| self.lookup(a).unwrap_or(miss));
        };
        let e = [
            t[(a[0] >> 8) as usize].load(Ordering::Acquire),
            t[(a[1] >> 8) as usize].load(Ordering::Acquire),
            t[(a[2] >> 8) as usize].load(Ordering::Acquire),
            t[(a[3] >> 8) as usize].load(Ordering::Acquire),
        ];
        let mut out = [miss; 4];
        for i in 0..4 {
            let mut x = e[i];
            if x & EXT != 0 {
                x = self.groups.entry(x & VALUE_MASK, a[i] as u8);
            }
            out[i] = if x & VALID != 0 { x & VALUE_MASK } else { miss };
        }
        out
    }
}

/// The address of an [`Ip4Table`]'s first level ([`Ip4Table::entry_prefetch`]), kept as
/// a number: only ever used as a prefetch hint, never dereferenced (so it is `Send`, and
/// the default, 0, or a table since replaced, only wastes the prefetch).
#[derive(Clone, Copy, Debug, Default)]
pub struct Ip4EntryPrefetch(usize);

impl Ip4EntryPrefetch {
    /// Starts loading the first-level entry a lookup of `addr` reads first. Every 32-bit
    /// address has one (the first level's `1 << 24` entries are indexed by its top 24 bits):
    /// no bound check.
    #[inline(always)]
    pub fn prefetch(self, addr: u32) {
        let entry = self.0.wrapping_add((addr >> 8) as usize * 4);
        sluice_infra::prefetch(entry as *const u8);
    }
}

impl Default for Ip4Lpm {
    fn default() -> Self {
        Self::new()
    }
}

impl Ip4Lpm {
    /// An empty table (the first level is allocated lazily by the OS).
    pub fn new() -> Self {
        Ip4Lpm {
            table: std::sync::Arc::new(Ip4Table {
                tbl24: ZeroedAtomicU32s::new(1 << 24),
                groups: GroupStore::new(),
            }),
            alloc: GroupAlloc::new(),
            routes: std::array::from_fn(|_| HashMap::default()),
            n_routes: 0,
        }
    }

    /// Number of prefixes.
    pub fn len(&self) -> usize {
        self.n_routes
    }

    /// No prefix.
    pub fn is_empty(&self) -> bool {
        self.n_routes == 0
    }

    /// Second-level groups in use.
    pub fn groups_in_use(&self) -> usize {
        self.alloc.in_use()
    }

    /// The shared read side (give a clone to every thread).
    pub fn table(&self) -> &std::sync::Arc<Ip4Table> {
        &self.table
    }

    /// Longest-prefix match (see [`Ip4Table::lookup`]).
    pub fn lookup(&self, addr: u32) -> Option<u32> {
        self.table.lookup(addr)
    }

    /// Four lookups (see [`Ip4Table::lookup_x4`]).
    pub fn lookup_x4(&self, a: [u32; 4]) -> [Option<u32>; 4] {
        self.table.lookup_x4(a)
    }

    fn group(&self, g: u32) -> &[AtomicU32] {
        self.table.group(g)
    }

    /// The value stored for exactly this prefix.
    pub fn get(&self, prefix: u32, len: u8) -> Option<u32> {
        self.routes
            .get(len as usize)?
            .get(&mask(prefix, len))
            .copied()
    }

    /// All prefixes (prefix, len, value), unordered.
    pub fn iter(&self) -> impl Iterator<Item = (u32, u8, u32)> + '_ {
        self.routes
            .iter()
            .enumerate()
            .flat_map(|(l, m)| m.iter().map(move |(&p, &v)| (p, l as u8, v)))
    }

    fn alloc_group(&mut self, epochs: &Epochs, fill: u32) -> Result<u32, LpmError> {
        self.alloc.alloc(&self.table.groups, epochs, fill)
    }

    /// Adds or replaces a prefix; counts a FIB change ([`crate::changes`]).
    pub fn insert(
        &mut self,
        epochs: &Epochs,
        prefix: u32,
        len: u8,
        value: u32,
    ) -> Result<(), LpmError> {
        if len > 32 {
            return Err(LpmError::BadLength(len));
        }
        if value > MAX_VALUE {
            return Err(LpmError::BadValue(value));
        }
        let p = mask(prefix, len);
        // A prefix longer than /24 may need a group: allocate first so a failure changes nothing.
        if len > 24 {
            let i = (p >> 8) as usize;
            let e = self.table.tbl24.as_slice()[i].load(Ordering::Relaxed);
            if e & EXT == 0 {
                let g = self.alloc_group(epochs, e)?;
                // Publish after filling: readers see the old leaf or the full group.
                self.table.tbl24.as_slice()[i].store(VALID | EXT | g, Ordering::Release);
            }
        }
        if self.routes[len as usize].insert(p, value).is_none() {
            self.n_routes += 1;
        }
        self.paint(p, len, leaf(len, value), |d| d <= len);
        crate::changed();
        Ok(())
    }

    /// Removes a prefix (counted as a FIB change, [`crate::changes`]); returns its value.
    pub fn remove(&mut self, epochs: &Epochs, prefix: u32, len: u8) -> Option<u32> {
        if len > 32 {
            return None;
        }
        let p = mask(prefix, len);
        let v = self.routes[len as usize].remove(&p)?;
        self.n_routes -= 1;
        // The longest shorter prefix covering this one takes over its entries.
        let mut repl = 0;
        for l in (0..len).rev() {
            if let Some(&cv) = self.routes[l as usize].get(&mask(p, l)) {
                repl = leaf(l, cv);
                break;
            }
        }
        self.paint(p, len, repl, |d| d == len);
        self.collapse(epochs, p, len);
        crate::changed();
        Some(v)
    }

    /// Writes `new` to every entry of the prefix's range whose depth satisfies `take`.
    fn paint(&self, p: u32, len: u8, new: u32, take: impl Fn(u8) -> bool) {
        let t = self.table.tbl24.as_slice();
        let upd = |x: &AtomicU32| {
            let e = x.load(Ordering::Relaxed);
            if e & VALID == 0 || take(depth_of(e)) {
                x.store(new, Ordering::Release);
            }
        };
        if len <= 24 {
            let start = (p >> 8) as usize;
            let n = 1usize << (24 - len);
            for x in &t[start..start + n] {
                let e = x.load(Ordering::Relaxed);
                if e & EXT != 0 {
                    for y in self.group(e & VALUE_MASK) {
                        upd(y);
                    }
                } else {
                    upd(x);
                }
            }
        } else {
            let e = t[(p >> 8) as usize].load(Ordering::Relaxed);
            if e & EXT == 0 {
                return;
            }
            let g = self.group(e & VALUE_MASK);
            let start = (p & 0xff) as usize;
            let n = 1usize << (32 - len);
            for y in &g[start..start + n] {
                upd(y);
            }
        }
    }

    /// Folds groups in the range back into the first level when all their entries are one
    /// leaf of depth <= 24.
    fn collapse(&mut self, epochs: &Epochs, p: u32, len: u8) {
        let (start, n) = if len <= 24 {
            ((p >> 8) as usize, 1usize << (24 - len))
        } else {
            ((p >> 8) as usize, 1)
        };
        for i in start..start + n {
            let e = self.table.tbl24.as_slice()[i].load(Ordering::Relaxed);
            if e & EXT == 0 {
                continue;
            }
            let g = e & VALUE_MASK;
            let grp = self.group(g);
            let first = grp[0].load(Ordering::Relaxed);
            if depth_of(first) > 24 && first & VALID != 0 {
                continue;
            }
            if grp.iter().all(|x| x.load(Ordering::Relaxed) == first) {
                self.table.tbl24.as_slice()[i].store(first, Ordering::Release);
                self.alloc.retire(epochs, g);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn oracle(routes: &[(u32, u8, u32)], a: u32) -> Option<u32> {
        routes
            .iter()
            .filter(|&&(p, l, _)| mask(a, l) == p)
            .max_by_key(|&&(_, l, _)| l)
            .map(|&(_, _, v)| v)
    }

    #[test]
    fn lookup_x4_or_misses() {
        let e = Epochs::new(1);
        let mut t = Ip4Lpm::new();
        t.insert(&e, 0x0a000000, 8, 2).unwrap();
        t.insert(&e, 0x0a010180, 25, 5).unwrap();
        const MISS: u32 = u32::MAX;
        let a = [0x0b000000, 0x0a010101, 0x0a010181, 0x0c000001];
        assert_eq!(t.table().lookup_x4_or(a, MISS), [MISS, 2, 5, MISS]);
        assert_eq!(t.lookup_x4(a), [None, Some(2), Some(5), None]);
    }

    #[test]
    fn basic_lpm() {
        let e = Epochs::new(1);
        let mut t = Ip4Lpm::new();
        assert_eq!(t.lookup(0x0a000001), None);
        t.insert(&e, 0, 0, 1).unwrap();
        t.insert(&e, 0x0a000000, 8, 2).unwrap();
        t.insert(&e, 0x0a010000, 16, 3).unwrap();
        t.insert(&e, 0x0a010100, 24, 4).unwrap();
        t.insert(&e, 0x0a010180, 25, 5).unwrap();
        t.insert(&e, 0x0a0101ff, 32, 6).unwrap();
        assert_eq!(t.lookup(0x0b000000), Some(1));
        assert_eq!(t.lookup(0x0a020000), Some(2));
        assert_eq!(t.lookup(0x0a01ff00), Some(3));
        assert_eq!(t.lookup(0x0a010101), Some(4));
        assert_eq!(t.lookup(0x0a010181), Some(5));
        assert_eq!(t.lookup(0x0a0101ff), Some(6));
        assert_eq!(
            t.lookup_x4([0x0b000000, 0x0a010101, 0x0a0101ff, 0x0a010181]),
            [Some(1), Some(4), Some(6), Some(5)]
        );
        assert_eq!(t.remove(&e, 0x0a010180, 25), Some(5));
        assert_eq!(t.lookup(0x0a010181), Some(4));
        assert_eq!(t.remove(&e, 0x0a0101ff, 32), Some(6));
        assert_eq!(t.lookup(0x0a0101ff), Some(4));
        assert_eq!(t.groups_in_use(), 0, "group collapsed and retired");
        assert_eq!(t.remove(&e, 0x0a010100, 24), Some(4));
        assert_eq!(t.lookup(0x0a010101), Some(3));
        assert_eq!(t.remove(&e, 0, 0), Some(1));
        assert_eq!(t.lookup(0x0b000000), None);
        assert_eq!(t.len(), 2);
        assert!(t.insert(&e, 0, 33, 1).is_err());
        assert!(t.insert(&e, 0, 8, 1 << 24).is_err());
    }

    fn prefix() -> impl Strategy<Value = (u32, u8)> {
        // Lengths concentrated like a real table, plus the edges /0 and /32; addresses within
        // a small space so prefixes overlap.
        (
            prop_oneof![1 => Just(0u8), 10 => 8u8..=16, 20 => 16u8..=24, 10 => Just(24u8), 10 => 25u8..=32, 5 => Just(32u8)],
            0u32..1 << 12,
        )
            .prop_map(|(l, a)| {
                let addr = (a << 20) | (a.wrapping_mul(2654435761) & 0xfffff);
                (mask(addr, l), l)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn matches_naive_oracle(
            adds in proptest::collection::vec(prefix(), 1..120),
            dels in proptest::collection::vec(0usize..200, 0..60),
            probes in proptest::collection::vec(0u32..1 << 12, 1..300),
        ) {
            let e = Epochs::new(1);
            let mut t = Ip4Lpm::new();
            let mut model: Vec<(u32, u8, u32)> = Vec::new();
            for (i, &(p, l)) in adds.iter().enumerate() {
                t.insert(&e, p, l, i as u32).unwrap();
                model.retain(|&(q, m, _)| !(q == p && m == l));
                model.push((p, l, i as u32));
            }
            for d in dels {
                if model.is_empty() { break; }
                let (p, l, v) = model.remove(d % model.len());
                prop_assert_eq!(t.remove(&e, p, l), Some(v));
            }
            for a in probes {
                for addr in [(a << 20) | (a.wrapping_mul(2654435761) & 0xfffff), a << 20, (a << 20) | 0xff, a.wrapping_mul(2654435761)] {
                    prop_assert_eq!(t.lookup(addr), oracle(&model, addr), "addr {:#x}", addr);
                }
            }
            prop_assert_eq!(t.len(), model.len());
        }

        /// Against a reference LPM, through both lookups: prefixes of every length packed
        /// into four /8s (so /16s are whole leaves, mixed, or empty), random deletions,
        /// random destinations inside those /8s.
        #[test]
        fn x4_matches_reference_lpm(
            adds in proptest::collection::vec((prop_oneof![1 => 0u8..8, 30 => 8u8..=32], 0u32..4, any::<u32>()), 1..100),
            dels in proptest::collection::vec(0usize..200, 0..80),
            probes in proptest::collection::vec((0u32..4, any::<u32>()), 4..400),
        ) {
            let e = Epochs::new(1);
            let mut t = Ip4Lpm::new();
            let mut model: Vec<(u32, u8, u32)> = Vec::new();
            // The /8s 10, 11, 20, 21; the host part's top bits few, so prefixes nest.
            let place = |s: u32, r: u32| [10u32, 11, 20, 21][s as usize] << 24 | (r & 0x0303_ffff) >> 8 | (r & 0xff) << 16;
            for (i, &(l, s, r)) in adds.iter().enumerate() {
                let p = mask(place(s, r), l);
                t.insert(&e, p, l, i as u32).unwrap();
                model.retain(|&(q, m, _)| !(q == p && m == l));
                model.push((p, l, i as u32));
            }
            for d in dels {
                if model.is_empty() { break; }
                let (p, l, v) = model.remove(d % model.len());
                prop_assert_eq!(t.remove(&e, p, l), Some(v));
            }
            let addrs: Vec<u32> = probes.iter().map(|&(s, r)| place(s, r)).collect();
            for c in addrs.chunks_exact(4) {
                let a = [c[0], c[1], c[2], c[3]];
                let want = a.map(|x| oracle(&model, x).unwrap_or(u32::MAX));
                prop_assert_eq!(t.table().lookup_x4_or(a, u32::MAX), want, "addrs {:x?}", a);
                for x in a {
                    prop_assert_eq!(t.lookup(x), oracle(&model, x), "addr {:#x}", x);
                }
            }
        }
    }
}
