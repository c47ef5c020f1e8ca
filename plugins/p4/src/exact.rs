//! Exact-match index for table keys of up to 64 bits (one copy per worker, written only by
//! the control plane through the owning node's thread, so no concurrency here).
//!
//! - keys of at most [`DIRECT_BITS`] bits: a direct array indexed by the key (one load);
//! - wider keys: open addressing with linear probing over a power-of-two array kept at most
//!   half full, home slot from a multiplicative (Fibonacci) hash of the key XOR a random
//!   per-table seed; deletion shifts the following entries back (no tombstones), so a miss
//!   stops at the first empty slot.
//!
//! Lookups cannot lengthen probe sequences (only inserts do, and entries come from the
//! control plane), and the random seed keeps a program's author from choosing colliding
//! keys; the bihash's keyed SipHash costs ~170 instructions per lookup for the same job.

use std::hash::BuildHasher;

/// Keys this wide or narrower use a direct array.
pub const DIRECT_BITS: u16 = 16;
const EMPTY: u32 = u32::MAX;

/// Whether keys of `bits` bits use a direct array (`ir::Table::direct_exact`).
pub fn is_direct(bits: u32) -> bool {
    bits <= DIRECT_BITS as u32
}

/// A direct array: key -> entry id, one load. A table keeps it outside its index's enum
/// (`TableRt::lookup_direct`), so generated code reads it without matching the index kind;
/// the tables with another index keep an empty one (every key misses).
pub struct Direct(Box<[u32]>);

impl Direct {
    /// An array for keys of `bits` (<= [`DIRECT_BITS`]) bits.
    pub fn new(bits: u16) -> Direct {
        Direct(vec![EMPTY; 1usize << bits.min(DIRECT_BITS)].into_boxed_slice())
    }

    /// An array holding no key (tables with another index).
    pub fn empty() -> Direct {
        Direct(Box::new([]))
    }

    #[inline(always)]
    pub fn get(&self, k: u64) -> Option<u32> {
        match self.0.get(k as usize) {
            Some(&id) if id != EMPTY => Some(id),
            _ => None,
        }
    }

    /// Inserts or replaces (nothing for a key outside the array).
    pub fn insert(&mut self, k: u64, id: u32) {
        if let Some(x) = self.0.get_mut(k as usize) {
            *x = id;
        }
    }

    pub fn remove(&mut self, k: u64) {
        if let Some(x) = self.0.get_mut(k as usize) {
            *x = EMPTY;
        }
    }
}

/// Open addressing, linear probing, at most half full.
pub struct OpenHash {
    keys: Box<[u64]>,
    ids: Box<[u32]>,
    seed: u64,
    /// 64 - log2(capacity).
    shift: u32,
    len: usize,
}

impl Default for OpenHash {
    fn default() -> OpenHash {
        OpenHash::new()
    }
}

impl OpenHash {
    /// An empty table with a random seed.
    pub fn new() -> OpenHash {
        Self::with_bits(
            4,
            std::collections::hash_map::RandomState::new().hash_one(0u64),
        )
    }

    fn with_bits(bits: u32, seed: u64) -> OpenHash {
        OpenHash {
            keys: vec![0; 1 << bits].into_boxed_slice(),
            ids: vec![EMPTY; 1 << bits].into_boxed_slice(),
            seed,
            shift: 64 - bits,
            len: 0,
        }
    }

    #[inline(always)]
    fn home(&self, k: u64) -> usize {
        ((k ^ self.seed).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shift) as usize
    }

    #[inline(always)]
    fn mask(&self) -> usize {
        self.ids.len() - 1
    }

    #[inline(always)]
    pub fn get(&self, k: u64) -> Option<u32> {
        let m = self.mask();
        let mut i = self.home(k);
        loop {
            let id = self.ids[i & m];
            if id == EMPTY {
                return None;
            }
            if self.keys[i & m] == k {
                return Some(id);
            }
            i += 1;
        }
    }

    /// Inserts or replaces.
    pub fn insert(&mut self, k: u64, id: u32) {
        if (self.len + 1) * 2 > self.ids.len() {
            let mut n = OpenHash::with_bits(64 - self.shift + 1, self.seed);
            for (&key, &v) in self.keys.iter().zip(self.ids.iter()) {
                if v != EMPTY {
                    n.insert(key, v);
                }
            }
            *self = n;
        }
        let m = self.mask();
        let mut i = self.home(k) & m;
        while self.ids[i] != EMPTY {
            if self.keys[i] == k {
                self.ids[i] = id;
                return;
            }
            i = (i + 1) & m;
        }
        self.keys[i] = k;
        self.ids[i] = id;
        self.len += 1;
    }

    pub fn remove(&mut self, k: u64) {
        let m = self.mask();
        let mut i = self.home(k) & m;
        loop {
            if self.ids[i] == EMPTY {
                return;
            }
            if self.keys[i] == k {
                break;
            }
            i = (i + 1) & m;
        }
        // Backward-shift deletion: move back every following entry whose home is not in
        // (i, j].
        let mut j = i;
        loop {
            self.ids[i] = EMPTY;
            loop {
                j = (j + 1) & m;
                if self.ids[j] == EMPTY {
                    self.len -= 1;
                    return;
                }
                let h = self.home(self.keys[j]) & m;
                let between = if i <= j {
                    i < h && h <= j
                } else {
                    i < h || h <= j
                };
                if !between {
                    break;
                }
            }
            self.keys[i] = self.keys[j];
            self.ids[i] = self.ids[j];
            i = j;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// The index a table of `bits`-bit keys uses.
    enum Ix {
        D(Direct),
        H(OpenHash),
    }

    impl Ix {
        fn get(&self, k: u64) -> Option<u32> {
            match self {
                Ix::D(d) => d.get(k),
                Ix::H(h) => h.get(k),
            }
        }
        fn insert(&mut self, k: u64, id: u32) {
            match self {
                Ix::D(d) => d.insert(k, id),
                Ix::H(h) => h.insert(k, id),
            }
        }
        fn remove(&mut self, k: u64) {
            match self {
                Ix::D(d) => d.remove(k),
                Ix::H(h) => h.remove(k),
            }
        }
    }

    #[test]
    fn random_ops_match_a_hashmap() {
        for bits in [8u16, 32, 48, 64] {
            let mut x = if is_direct(bits as u32) {
                Ix::D(Direct::new(bits))
            } else {
                Ix::H(OpenHash::new())
            };
            let mut r = HashMap::new();
            let mut s = 0x1234_5678_9abc_def1u64;
            for n in 0..20000u32 {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                // A small key space so inserts, replaces and removes collide often.
                let k = (s % 300) * if bits > 16 { 0x0101_0101_0101 } else { 1 };
                let k = if bits < 64 {
                    k & ((1u64 << bits) - 1)
                } else {
                    k
                };
                if s >> 62 == 0 {
                    x.remove(k);
                    r.remove(&k);
                } else {
                    x.insert(k, n);
                    r.insert(k, n);
                }
                let q = (s >> 20) % 300 * if bits > 16 { 0x0101_0101_0101 } else { 1 };
                let q = if bits < 64 {
                    q & ((1u64 << bits) - 1)
                } else {
                    q
                };
                assert_eq!(x.get(q), r.get(&q).copied(), "bits {bits} key {q}");
            }
            for (k, v) in &r {
                assert_eq!(x.get(*k), Some(*v));
            }
        }
    }
}
