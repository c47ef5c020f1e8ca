//! A fast keyed hasher for tables keyed by integers (prefixes, indices) on the control
//! plane: a multiply-xorshift over the key's words, seeded per table from std's random
//! keys, about a tenth of SipHash's instructions for a `u32`. The seed keeps the layout out
//! of reach of whoever chooses the keys (routes learned from a peer); it is not a MAC.
//!
//! ```
//! use std::collections::HashMap;
//! let mut m: HashMap<u32, u32, sluice_infra::hash::FastState> = HashMap::default();
//! m.insert(10 << 24, 1);
//! assert_eq!(m.get(&(10 << 24)), Some(&1));
//! ```

use std::hash::{BuildHasher, Hasher};

const K: u64 = 0x9e37_79b9_7f4a_7c15;

/// Builds [`FastHasher`]s with one random seed per instance (per table).
#[derive(Clone, Copy, Debug)]
pub struct FastState {
    seed: u64,
}

impl Default for FastState {
    fn default() -> Self {
        FastState {
            seed: std::collections::hash_map::RandomState::new().hash_one(K),
        }
    }
}

impl BuildHasher for FastState {
    type Hasher = FastHasher;
    #[inline(always)]
    fn build_hasher(&self) -> FastHasher {
        FastHasher(self.seed)
    }
}

/// The hasher of [`FastState`].
#[derive(Clone, Copy, Debug)]
pub struct FastHasher(u64);

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
    }
    #[inline(always)]
    fn write_u8(&mut self, x: u8) {
        self.write_u64(x.into());
    }
    #[inline(always)]
    fn write_u16(&mut self, x: u16) {
        self.write_u64(x.into());
    }
    #[inline(always)]
    fn write_u32(&mut self, x: u32) {
        self.write_u64(x.into());
    }
    #[inline(always)]
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0 ^ x).wrapping_mul(K).rotate_left(23);
    }
    #[inline(always)]
    fn write_u128(&mut self, x: u128) {
        self.write_u64(x as u64);
        self.write_u64((x >> 64) as u64);
    }
    #[inline(always)]
    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
    #[inline(always)]
    fn finish(&self) -> u64 {
        // The table takes its bucket from the low bits and its tag from the top ones: both
        // depend on every bit of the key.
        let h = self.0 ^ (self.0 >> 32);
        let h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h ^ (h >> 29)
    }
}

/// A hasher for keys that are hashes already (a digest, a `TypeId`): a `u64` is its own
/// hash. Use it as `BuildHasherDefault<PreHashed>`; anything written as bytes is folded
/// in 8 bits at a time (rotate and xor), which is only good enough for such keys: never
/// for keys an attacker chooses (DESIGN §1.1).
#[derive(Default, Clone, Copy, Debug)]
pub struct PreHashed(u64);

impl Hasher for PreHashed {
    #[inline(always)]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    #[inline(always)]
    fn write_u64(&mut self, x: u64) {
        self.0 ^= x;
    }
    #[inline(always)]
    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::FastState;
    use std::collections::{HashMap, HashSet};
    use std::hash::BuildHasher;

    #[test]
    fn consecutive_keys_spread_over_buckets_and_tags() {
        let s = FastState::default();
        // Prefixes 256 apart (the /24s of a table) fill the low bits and the top 7 bits.
        let low: HashSet<u64> = (0..4096u32).map(|i| s.hash_one(i << 8) & 4095).collect();
        let top: HashSet<u64> = (0..4096u32).map(|i| s.hash_one(i << 8) >> 57).collect();
        assert!(low.len() > 2400, "{}", low.len());
        assert_eq!(top.len(), 128);
        let mut m: HashMap<u128, u32, FastState> = HashMap::default();
        for i in 0..1000u128 {
            m.insert(i << 64, i as u32);
        }
        assert!((0..1000u128).all(|i| m[&(i << 64)] == i as u32));
        assert_ne!(
            FastState::default().hash_one(1u32),
            s.hash_one(1u32),
            "seeded"
        );
    }
}
