//! A single-writer hash from 64-bit keyed digests to `u32` values in one-cache-line buckets,
//! for per-thread flow tables read only by their writer (NAT44's and the stateful ACL's
//! sessions).
//!
//! Where [`crate::bihash::Bihash`] keeps a bucket's keys and values on two lines (so that any
//! `u64` is a key and a value, and lock-free readers can check a version), a flow table whose
//! one reader is its writer, and whose values are `u32` indexes, fits a bucket in one line:
//!
//! ```text
//! tag0 .. tag6 | meta | val0 .. val6 | (pad)       (7 x 4 + 4 + 7 x 4 + 4 = 64 bytes, 64-aligned)
//! tag = the digest's high 32 bits; meta = occupancy (bits 0..7) | overflow count << 8
//! ```
//!
//! The tags and `meta` are compared with one SSE2 compare per 16 bytes.
//!
//! A digest's home bucket is its low bits (`digest & mask`): the digests are already outputs
//! of a secret-keyed hash ([`crate::bihash::FoldedKeyHash`]), so they are not hashed again and
//! nobody can aim them at a bucket. The tag only filters: a lookup's value is a candidate
//! (an entry of another digest with the same tag in the probed buckets matches too, about
//! 2^-32 a slot), which the caller confirms by the full key it keeps with the value (NAT44's
//! flow records hold their key words); [`FlowTable::find`] tries every candidate. The values
//! are the identity: equal digests may coexist, a remove names its value.
//!
//! The array is sized once (zeroed, in hugepages from 2 MiB on: [`crate::epoch::ZeroedArray`]), for at
//! most `entries` keys at about 4 a bucket (7 slots): it never grows or moves, so an entry's
//! value is stable while it lives. An insert that finds its home full takes the next bucket
//! with a free slot (linear probing, wrapping from the last bucket to the first) and
//! increments the overflow count of every full bucket it passed; a lookup moves on only while
//! the count is non-zero, so a miss usually reads one line; a remove decrements the counts
//! again.

use crate::epoch::{ZeroValid, ZeroedArray};

/// Entry slots per bucket.
pub const SLOTS: usize = 7;

/// Average entries per bucket at the table's capacity (the sizing; 4 of 7 slots: a bucket
/// overflows (8 or more homed in it, Poisson) with a probability of about 5 % at full load,
/// 0.1 % at half).
const FILL: usize = 4;

#[derive(Copy, Clone, Default)]
#[repr(C, align(64))]
struct Bucket {
    /// The entries' tags (their digests' high 32 bits).
    tags: [u32; SLOTS],
    /// Occupancy (bit `i`: slot `i`) and, from bit [`OVF_SHIFT`], the overflow count:
    /// entries homed at this bucket or before it that live after it.
    meta: u32,
    /// The entries' values.
    vals: [u32; SLOTS],
    _pad: u32,
}

const OCC: u32 = (1 << SLOTS) - 1;
const OVF_SHIFT: u32 = 8;

impl Bucket {
    /// Bit `i` set when slot `i` is occupied and holds `tag`. SSE2 (every x86-64): the tags
    /// and `meta` are two aligned 16-byte loads, compared as 32-bit lanes, their signs
    /// gathered by two `movmskps` (`meta`'s lane is masked off by the occupancy).
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(miri)))]
    #[inline(always)]
    fn hits(&self, tag: u32) -> u32 {
        use std::arch::x86_64::*;
        let p = (self as *const Bucket).cast::<__m128i>();
        // SAFETY: SSE2 is enabled (the cfg); the loads read bytes 0..32 of this 64-byte,
        // 64-aligned bucket (`tags` and `meta`), inside `self` and 16-aligned.
        let m = unsafe {
            let t = _mm_set1_epi32(tag as i32);
            let lo = _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(_mm_load_si128(p), t)));
            let hi = _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(
                _mm_load_si128(p.add(1)),
                t,
            )));
            (lo | hi << 4) as u32
        };
        m & self.meta & OCC
    }

    /// [`Bucket::hits`] without SIMD.
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2", not(miri))))]
    #[inline(always)]
    fn hits(&self, tag: u32) -> u32 {
        let mut m = 0;
        for (i, &t) in self.tags.iter().enumerate() {
            m |= ((t == tag) as u32) << i;
        }
        m & self.meta & OCC
    }

    #[inline(always)]
    fn overflowed(&self) -> bool {
        self.meta >> OVF_SHIFT != 0
    }
}

const _: () = assert!(std::mem::size_of::<Bucket>() == 64);

// SAFETY: integers only (a zero bucket is an empty one).
unsafe impl ZeroValid for Bucket {}

/// Why an insert failed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FlowTableError {
    /// The table holds its capacity already.
    Full,
}

/// The table (see the module documentation).
pub struct FlowTable {
    buckets: ZeroedArray<Bucket>,
    mask: usize,
    len: usize,
    cap: usize,
}

impl FlowTable {
    /// A table for at most `entries` keys (at least 1 bucket; its memory is allocated here,
    /// 16 to 32 bytes an entry: 64 bytes a bucket at 4 entries a bucket, the bucket count
    /// rounded up to a power of two).
    ///
    /// # Panics
    /// If the memory cannot be had (see [`FlowTable::try_with_capacity`]).
    pub fn with_capacity(entries: usize) -> FlowTable {
        Self::try_with_capacity(entries)
            .unwrap_or_else(|e| panic!("cannot allocate a flow table of {entries} entries: {e}"))
    }

    /// [`FlowTable::with_capacity`], or the error when the bucket array cannot be allocated
    /// or mapped (size overflow, address-space limit, strict overcommit).
    pub fn try_with_capacity(entries: usize) -> std::io::Result<FlowTable> {
        let n = entries
            .div_ceil(FILL)
            .max(1)
            .checked_next_power_of_two()
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::OutOfMemory))?;
        Ok(FlowTable {
            buckets: ZeroedArray::try_new(n)?,
            mask: n - 1,
            len: 0,
            cap: entries,
        })
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No entry.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The most entries it takes.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Buckets.
    pub fn buckets(&self) -> usize {
        self.buckets.len()
    }

    /// Bytes of the bucket array.
    pub fn memory_bytes(&self) -> usize {
        self.buckets.len() * std::mem::size_of::<Bucket>()
    }

    /// Hints the CPU to fetch `digest`'s home bucket (one line) ahead of its
    /// [`FlowTable::get`].
    #[inline(always)]
    pub fn prefetch(&self, digest: u64) {
        crate::prefetch(
            self.buckets
                .as_ptr()
                .wrapping_add(digest as usize & self.mask),
        );
    }

    /// The first value stored under `digest`'s tag from its home on: a candidate (another
    /// digest with the same home and tag, or an entry that overflowed into the home with the
    /// same tag, would be found too: about 2^-32 a slot), which the caller confirms by the
    /// full key it keeps with the value. The home bucket inline, a probe past an overflowed
    /// home out of line.
    #[inline(always)]
    pub fn get(&self, digest: u64) -> Option<u32> {
        let b = &self.buckets[digest as usize & self.mask];
        let m = b.hits((digest >> 32) as u32);
        if m != 0 {
            Some(b.vals[m.trailing_zeros() as usize])
        } else if !b.overflowed() {
            None
        } else {
            self.find(digest, |_| true)
        }
    }

    /// The first value stored under `digest`'s tag from its home on that `is` accepts (the
    /// caller's full key compare): the exact lookup, every candidate tried.
    #[inline(never)]
    pub fn find(&self, digest: u64, is: impl Fn(u32) -> bool) -> Option<u32> {
        self.locate(digest, is)
            .map(|(b, s)| self.buckets[b].vals[s])
    }

    /// Bucket and slot of the first entry with `digest`'s tag from its home on whose value
    /// `is` accepts.
    fn locate(&self, digest: u64, is: impl Fn(u32) -> bool) -> Option<(usize, usize)> {
        let tag = (digest >> 32) as u32;
        let mut b = digest as usize & self.mask;
        for _ in 0..self.buckets.len() {
            let bk = &self.buckets[b];
            let mut m = bk.hits(tag);
            while m != 0 {
                let s = m.trailing_zeros() as usize;
                if is(bk.vals[s]) {
                    return Some((b, s));
                }
                m &= m - 1;
            }
            if !bk.overflowed() {
                return None;
            }
            b = (b + 1) & self.mask;
        }
        None
    }

    /// Stores `value` under `digest` (values are the identity: the caller stores each value
    /// once; digests may repeat).
    pub fn insert(&mut self, digest: u64, value: u32) -> Result<(), FlowTableError> {
        if self.len >= self.cap {
            return Err(FlowTableError::Full);
        }
        let mut b = digest as usize & self.mask;
        // `len` < `cap` ≤ 4 × buckets < 7 × buckets: some bucket has a free slot.
        loop {
            let bk = &mut self.buckets[b];
            let free = !bk.meta & OCC;
            if free != 0 {
                let s = free.trailing_zeros() as usize;
                bk.tags[s] = (digest >> 32) as u32;
                bk.vals[s] = value;
                bk.meta |= 1 << s;
                self.len += 1;
                return Ok(());
            }
            bk.meta += 1 << OVF_SHIFT;
            b = (b + 1) & self.mask;
        }
    }

    /// Removes `value` stored under `digest`; whether it was there.
    pub fn remove(&mut self, digest: u64, value: u32) -> bool {
        let Some((at, s)) = self.locate(digest, |v| v == value) else {
            return false;
        };
        self.buckets[at].meta &= !(1 << s);
        let mut b = digest as usize & self.mask;
        while b != at {
            self.buckets[b].meta -= 1 << OVF_SHIFT;
            b = (b + 1) & self.mask;
        }
        self.len -= 1;
        true
    }

    /// Every entry's (home bucket, tag) and value, in bucket order (tests, statistics).
    pub fn iter(&self) -> impl Iterator<Item = (usize, u32, u32)> + '_ {
        self.buckets.iter().enumerate().flat_map(|(i, b)| {
            (0..SLOTS)
                .filter(move |s| b.meta >> s & 1 != 0)
                .map(move |s| (i, b.tags[s], b.vals[s]))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Bucket {
        fn overflow(&self) -> u32 {
            self.meta >> OVF_SHIFT
        }
    }

    fn mix(i: u64) -> u64 {
        crate::bihash::folded_multiply(i ^ 0x9e37_79b9_7f4a_7c15, 0xbf58_476d_1ce4_e5b9)
    }

    #[test]
    fn insert_get_remove_at_capacity_with_overflows() {
        let n = 10_000;
        let mut t = FlowTable::with_capacity(n);
        for i in 0..n as u64 {
            t.insert(mix(i), i as u32).expect("insert");
        }
        assert_eq!(t.len(), n);
        assert_eq!(t.insert(mix(n as u64), 0), Err(FlowTableError::Full));
        // 10,000 keys in 4,096 buckets (2.44 a bucket of 7 slots): some homes overflowed, so the
        // probe path is exercised.
        assert!(t.buckets.iter().any(|b| b.overflow() > 0));
        for i in 0..n as u64 {
            assert_eq!(t.get(mix(i)), Some(i as u32), "key {i}");
        }
        assert_eq!(t.get(mix(n as u64 + 1)), None);
        // Remove the even keys: the odd ones (some living past their home) stay found.
        for i in (0..n as u64).step_by(2) {
            assert!(t.remove(mix(i), i as u32));
            assert!(!t.remove(mix(i), i as u32));
        }
        for i in 0..n as u64 {
            let want = (i % 2 == 1).then_some(i as u32);
            assert_eq!(t.get(mix(i)), want, "key {i}");
        }
        for i in (1..n as u64).step_by(2) {
            assert!(t.remove(mix(i), i as u32));
        }
        assert!(t.is_empty());
        assert!(
            t.buckets.iter().all(|b| b.overflow() == 0),
            "counts back to 0"
        );
    }

    #[test]
    fn a_full_home_probes_on_and_a_removal_keeps_the_later_entry() {
        // 16 buckets; keys homed at bucket 3 (same low bits), tags 1..=9: 7 fit, 2 overflow.
        let mut t = FlowTable::with_capacity(64);
        let k = |tag: u64| tag << 32 | 3;
        for tag in 1..=9 {
            t.insert(k(tag), tag as u32 * 10).expect("insert");
        }
        assert_eq!(t.buckets[3].overflow(), 2);
        assert_eq!(t.get(k(9)), Some(90));
        // Freeing a home slot leaves the overflowed entry reachable (the count is not 0).
        assert!(t.remove(k(1), 10));
        assert_eq!(t.get(k(8)), Some(80));
        assert!(t.remove(k(8), 80));
        assert_eq!(t.buckets[3].overflow(), 1);
        assert_eq!(t.get(k(9)), Some(90));
        // Any value, tag and home (the occupancy bits say what is live).
        t.insert(k(0), 0).expect("insert 0");
        t.insert(u64::MAX, u32::MAX).expect("insert max");
        assert_eq!(t.get(k(0)), Some(0));
        assert_eq!(t.get(u64::MAX), Some(u32::MAX));
        assert_eq!(t.iter().count(), 9);
    }

    #[test]
    fn the_last_bucket_overflows_into_the_first() {
        // 16 buckets; keys homed at bucket 15 (the mask), tags 1..=9: 7 fit, 2 wrap to 0.
        let mut t = FlowTable::with_capacity(64);
        let k = |tag: u64| tag << 32 | 15;
        for tag in 1..=9 {
            t.insert(k(tag), tag as u32 * 10).expect("insert");
        }
        assert_eq!(t.buckets[15].overflow(), 2);
        assert_eq!(
            t.buckets[0].meta & OCC,
            0b11,
            "the overflow took bucket 0's first slots"
        );
        // A key homed at bucket 0 lives beside them and counts no overflow.
        t.insert(5 << 32, 5).expect("insert at 0");
        assert_eq!(t.buckets[0].overflow(), 0);
        for tag in 1..=9 {
            assert_eq!(t.get(k(tag)), Some(tag as u32 * 10), "tag {tag}");
        }
        assert_eq!(t.get(k(10)), None);
        assert_eq!(t.get(5 << 32), Some(5));
        assert!(t.remove(k(8), 80));
        assert_eq!(t.buckets[15].overflow(), 1);
        assert_eq!(t.get(k(9)), Some(90));
        assert!(t.remove(k(9), 90));
        assert_eq!(t.buckets[15].overflow(), 0);
        assert_eq!(t.get(5 << 32), Some(5));
        assert_eq!(t.len(), 8);
    }

    #[test]
    fn equal_digests_coexist_and_find_tries_each_candidate() {
        let mut t = FlowTable::with_capacity(64);
        let d = 7 << 32 | 5;
        for v in [11, 12, 13] {
            t.insert(d, v).expect("insert");
        }
        assert_eq!(t.get(d), Some(11), "the first candidate");
        assert_eq!(t.find(d, |v| v == 13), Some(13));
        assert_eq!(t.find(d, |v| v == 14), None);
        assert!(t.remove(d, 12));
        assert!(!t.remove(d, 12), "a remove names its value");
        assert_eq!(t.find(d, |v| v == 13), Some(13));
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn memory_is_the_bucket_array() {
        assert_eq!(FlowTable::with_capacity(1 << 20).memory_bytes(), 16 << 20);
        assert!(FlowTable::try_with_capacity(usize::MAX / 2).is_err());
    }
}
