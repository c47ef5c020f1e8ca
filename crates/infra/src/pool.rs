//! A pool of objects with stable `u32` indices and a free list (VPP's `pool_get`/`pool_put`).
//!
//! Removing an element frees its slot for reuse by a later insert; the indices of the other
//! elements never change, so they can be stored elsewhere (in buffer metadata, other tables)
//! instead of pointers. Slots are reused most-recently-freed first, which keeps the pool dense
//! and the reused slot warm in cache.

/// A pool of `T` addressed by `u32` index.
#[derive(Clone, Debug)]
pub struct Pool<T> {
    slots: Vec<Option<T>>,
    free: Vec<u32>,
}

impl<T> Default for Pool<T> {
    fn default() -> Self {
        Pool::new()
    }
}

impl<T> Pool<T> {
    /// An empty pool.
    pub const fn new() -> Pool<T> {
        Pool {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    /// An empty pool with room for `n` elements before it reallocates.
    pub fn with_capacity(n: usize) -> Pool<T> {
        Pool {
            slots: Vec::with_capacity(n),
            free: Vec::new(),
        }
    }

    /// Stores `v` and returns its index, reusing a freed slot if there is one.
    ///
    /// # Panics
    /// If the pool already has `u32::MAX` slots.
    pub fn insert(&mut self, v: T) -> u32 {
        if let Some(i) = self.free.pop() {
            self.slots[i as usize] = Some(v);
            return i;
        }
        let i = u32::try_from(self.slots.len())
            .ok()
            .filter(|&i| i != u32::MAX)
            .expect("pool index space exhausted");
        self.slots.push(Some(v));
        i
    }

    /// Removes and returns the element at `i`; `None` if `i` is free or out of range.
    pub fn remove(&mut self, i: u32) -> Option<T> {
        let v = self.slots.get_mut(i as usize)?.take()?;
        self.free.push(i);
        Some(v)
    }

    /// The element at `i`, if live.
    #[inline]
    pub fn get(&self, i: u32) -> Option<&T> {
        self.slots.get(i as usize)?.as_ref()
    }

    /// The element at `i`, writable, if live.
    #[inline]
    pub fn get_mut(&mut self, i: u32) -> Option<&mut T> {
        self.slots.get_mut(i as usize)?.as_mut()
    }

    /// Hints the CPU to fetch the cache lines of slot `i` (every line its bytes reach, for
    /// a slot of up to 256 bytes; the first ones of a wider slot) ahead of a [`Pool::get`]
    /// of it, so that a frame's random reads of elements overlap their misses. No bound
    /// check and no effect for a free or out-of-range `i`: a prefetch never faults and the
    /// address is only computed (wrapping), never dereferenced. The offsets are constants
    /// of the slot size (no branch on the slot's alignment).
    #[inline(always)]
    pub fn prefetch(&self, i: u32) {
        let size = std::mem::size_of::<Option<T>>();
        let p = self.slots.as_ptr().wrapping_add(i as usize) as *const u8;
        // Bytes 0, 64, 128, 192 below the size, and the last byte: whatever the alignment,
        // every line of the slot holds one of them.
        for off in [0, 64, 128, 192] {
            if off < size {
                crate::prefetch(p.wrapping_add(off));
            }
        }
        if size > 1 && size <= 256 {
            crate::prefetch(p.wrapping_add(size - 1));
        }
    }

    /// Whether `i` holds a live element.
    #[inline]
    pub fn contains(&self, i: u32) -> bool {
        self.get(i).is_some()
    }

    /// Number of live elements.
    #[inline]
    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Whether the pool holds no live element.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of slots, live or free (one more than the highest index ever handed out).
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// The live elements with their indices, in index order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &T)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|v| (i as u32, v)))
    }

    /// The live elements with their indices, writable, in index order.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (u32, &mut T)> + '_ {
        self.slots
            .iter_mut()
            .enumerate()
            .filter_map(|(i, s)| s.as_mut().map(|v| (i as u32, v)))
    }

    /// Removes every element and forgets all slots.
    pub fn clear(&mut self) {
        self.slots.clear();
        self.free.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn indices_are_stable_and_freed_slots_reused() {
        let mut p = Pool::new();
        let a = p.insert("a");
        let b = p.insert("b");
        let c = p.insert("c");
        assert_eq!((a, b, c), (0, 1, 2));
        assert_eq!(p.remove(b), Some("b"));
        assert_eq!(p.remove(b), None, "double remove is harmless");
        assert_eq!(p.get(b), None);
        assert_eq!(p.get(c), Some(&"c"), "other indices unchanged");
        assert_eq!(p.len(), 2);
        let d = p.insert("d");
        assert_eq!(d, b, "freed slot reused");
        assert_eq!(p.slots(), 3, "no growth while a slot was free");
        *p.get_mut(d).unwrap() = "D";
        assert_eq!(
            p.iter().collect::<Vec<_>>(),
            vec![(0, &"a"), (1, &"D"), (2, &"c")]
        );
        assert_eq!(p.get(99), None);
        assert_eq!(p.remove(99), None);
        p.clear();
        assert!(p.is_empty());
    }

    /// A smoke test: prefetching a free, live, past-the-end or huge index neither panics nor
    /// changes the pool. (Whether the hint fetches anything is not observable here; the
    /// benchmarks show it.)
    #[test]
    fn prefetch_of_any_index_is_harmless() {
        let mut p: Pool<[u64; 18]> = Pool::new();
        p.prefetch(0);
        let a = p.insert([1; 18]);
        p.prefetch(a);
        p.prefetch(a + 1);
        p.prefetch(u32::MAX);
        assert_eq!(p.get(a), Some(&[1; 18]));
    }

    proptest! {
        #[test]
        fn matches_a_map_oracle(ops in proptest::collection::vec((any::<bool>(), 0u32..40), 0..300)) {
            let mut p = Pool::new();
            let mut o: BTreeMap<u32, u32> = BTreeMap::new();
            for (k, (ins, x)) in ops.into_iter().enumerate() {
                if ins {
                    let i = p.insert(k as u32);
                    prop_assert!(o.insert(i, k as u32).is_none(), "index {} handed out twice", i);
                } else {
                    prop_assert_eq!(p.remove(x), o.remove(&x));
                }
                prop_assert_eq!(p.len(), o.len());
            }
            let live: Vec<(u32, u32)> = p.iter().map(|(i, v)| (i, *v)).collect();
            prop_assert_eq!(live, o.into_iter().collect::<Vec<_>>());
        }
    }
}
