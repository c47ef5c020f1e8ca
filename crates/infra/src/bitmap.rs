//! A fixed-size bitmap (VPP's `clib_bitmap`, without the growth).
//!
//! Bits are stored in `u64` words; searches skip whole zero words, so scanning a mostly empty
//! bitmap costs one load and compare per 64 bits.

/// A bitmap of a fixed number of bits, all clear at creation.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Bitmap {
    words: Box<[u64]>,
    nbits: usize,
}

impl Bitmap {
    /// A bitmap of `nbits` bits, all clear.
    pub fn new(nbits: usize) -> Bitmap {
        Bitmap {
            words: vec![0u64; nbits.div_ceil(64)].into_boxed_slice(),
            nbits,
        }
    }

    /// Number of bits (set or not).
    #[inline]
    pub fn len(&self) -> usize {
        self.nbits
    }

    /// Whether the bitmap holds no bits at all (`len() == 0`).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.nbits == 0
    }

    /// Sets bit `i`.
    ///
    /// # Panics
    /// If `i >= len()`.
    #[inline]
    pub fn set(&mut self, i: usize) {
        assert!(i < self.nbits, "bit {i} out of range {}", self.nbits);
        self.words[i / 64] |= 1u64 << (i % 64);
    }

    /// Clears bit `i`.
    ///
    /// # Panics
    /// If `i >= len()`.
    #[inline]
    pub fn clear(&mut self, i: usize) {
        assert!(i < self.nbits, "bit {i} out of range {}", self.nbits);
        self.words[i / 64] &= !(1u64 << (i % 64));
    }

    /// Whether bit `i` is set; `false` for any `i >= len()`.
    #[inline]
    pub fn test(&self, i: usize) -> bool {
        i < self.nbits && self.words[i / 64] & (1u64 << (i % 64)) != 0
    }

    /// Clears every bit.
    pub fn clear_all(&mut self) {
        self.words.fill(0);
    }

    /// The lowest set bit.
    #[inline]
    pub fn first_set(&self) -> Option<usize> {
        self.next_set(0)
    }

    /// The lowest set bit at or above `from`.
    #[inline]
    pub fn next_set(&self, from: usize) -> Option<usize> {
        if from >= self.nbits {
            return None;
        }
        let mut w = from / 64;
        // Mask off the bits below `from` in its word.
        let mut bits = self.words[w] & (u64::MAX << (from % 64));
        loop {
            if bits != 0 {
                // Bits past `nbits` are never set, so no range check is needed.
                return Some(w * 64 + bits.trailing_zeros() as usize);
            }
            w += 1;
            bits = *self.words.get(w)?;
        }
    }

    /// Number of set bits.
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The set bits, lowest first.
    pub fn iter_ones(&self) -> IterOnes<'_> {
        IterOnes {
            words: &self.words,
            word: 0,
            bits: self.words.first().copied().unwrap_or(0),
        }
    }
}

/// Iterator over the set bits of a [`Bitmap`], lowest first.
#[derive(Clone, Debug)]
pub struct IterOnes<'a> {
    words: &'a [u64],
    word: usize,
    bits: u64,
}

impl Iterator for IterOnes<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        while self.bits == 0 {
            self.word += 1;
            self.bits = *self.words.get(self.word)?;
        }
        let b = self.bits.trailing_zeros() as usize;
        self.bits &= self.bits - 1;
        Some(self.word * 64 + b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn set_clear_test_across_word_boundaries() {
        let mut b = Bitmap::new(130);
        assert_eq!(b.len(), 130);
        assert_eq!(b.first_set(), None);
        for i in [0, 63, 64, 127, 129] {
            b.set(i);
        }
        assert!(b.test(63) && b.test(64) && b.test(129));
        assert!(!b.test(1) && !b.test(128));
        assert!(!b.test(130), "out of range reads as clear");
        assert_eq!(b.count(), 5);
        assert_eq!(b.iter_ones().collect::<Vec<_>>(), vec![0, 63, 64, 127, 129]);
        assert_eq!(b.next_set(1), Some(63));
        assert_eq!(b.next_set(65), Some(127));
        assert_eq!(b.next_set(130), None);
        b.clear(0);
        b.clear(63);
        assert_eq!(b.first_set(), Some(64));
        b.clear_all();
        assert_eq!(b.count(), 0);
        assert_eq!(b.iter_ones().next(), None);
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn set_out_of_range_panics() {
        Bitmap::new(64).set(64);
    }

    #[test]
    fn empty_bitmap() {
        let b = Bitmap::new(0);
        assert!(b.is_empty());
        assert_eq!(b.first_set(), None);
        assert_eq!(b.iter_ones().count(), 0);
    }

    proptest! {
        #[test]
        fn matches_a_set_oracle(
            n in 1usize..300,
            ops in proptest::collection::vec((any::<bool>(), 0usize..300), 0..200),
            probe in 0usize..310,
        ) {
            let mut b = Bitmap::new(n);
            let mut o = BTreeSet::new();
            for (set, i) in ops {
                let i = i % n;
                if set { b.set(i); o.insert(i); } else { b.clear(i); o.remove(&i); }
            }
            prop_assert_eq!(b.count(), o.len());
            prop_assert_eq!(b.iter_ones().collect::<Vec<_>>(), o.iter().copied().collect::<Vec<_>>());
            prop_assert_eq!(b.first_set(), o.iter().next().copied());
            prop_assert_eq!(b.next_set(probe), o.range(probe..).next().copied());
            prop_assert_eq!(b.test(probe), o.contains(&probe));
        }
    }
}
