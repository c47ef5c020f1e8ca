//! A bucketed hash table with `u64` keys and `u64` values (VPP's `bihash_8_8` class) for the
//! L2 FIB (MAC learning: key = MAC(48) | bridge-domain(16)) and flow tables (ACL sessions;
//! NAT44's owner-only sessions use [`crate::flowtab::FlowTable`]).
//!
//! Workers read the shared [`BihashTable`] without a lock and without ever waiting; the main
//! thread owns the writer, [`Bihash`] (`&mut self`), and publishes every change with atomic
//! stores, so forwarding never stops for a table update.
//!
//! # Layout
//!
//! The table is a power-of-two array of 128-byte buckets (two cache lines, 128-byte aligned):
//!
//! ```text
//! line 0: meta | key0 key1 key2 key3 key4 key5 key6      (8 + 7 x 8 = 64 bytes)
//! line 1: val0 val1 val2 val3 val4 val5 val6 | (pad)     (7 x 8 + 8 = 64 bytes)
//! ```
//!
//! `meta` packs an occupancy mask (bits 0..7, one per slot), an *overflow count* (bits
//! 8..24: how many entries homed at this bucket or before it live further on because this
//! bucket was full when they were inserted) and a version (bits 24..64, bumped by every
//! change of `meta`). All key and value slots are meaningful, so any `u64` is a valid key or
//! value; emptiness lives only in the occupancy mask.
//!
//! A key's home bucket is the top `log2(buckets)` bits of `hash(key)`. An insert takes the
//! first free slot in the home bucket or, when it is full, in the next buckets of its probe
//! sequence (home + 1, + 3, + 6, ...: triangular steps, which avoid the pile-ups of plain
//! linear probing; at most [`MAX_PROBE`] buckets) and increments the overflow count of every
//! full bucket it passed. A lookup scans the home bucket and moves on only while the overflow
//! count is non-zero, so a miss usually touches one bucket. Entries never move while an array
//! is live; a remove clears the occupancy bit and decrements the counts on the way back to the
//! home bucket. Measured with random keys at the 3/4 growth point: 93% of entries sit in their
//! home bucket, 98% within two, and a miss reads a second bucket in 23% of the cases; the
//! longest probe seen with 5.5M entries was the full 16 buckets, so at tens of millions of
//! entries a full window may occasionally double the array a little before the 3/4 load.
//!
//! # Reader protocol (per-bucket version check)
//!
//! A reader loads `meta` (acquire), compares the keys of the occupied slots, loads the value
//! of the match, then re-loads `meta` after an acquire fence; if `meta` changed it retries
//! that bucket. The writer never has an "in progress" state a reader must wait for:
//! - insert into a free slot: release fence, store key and value, then store the new `meta`
//!   with the bit set (release);
//! - remove: store the new `meta` with the bit cleared (release); the slot is left as is;
//! - replace the value of an existing key: one atomic store of the value (a reader sees the
//!   old or the new value of that key, never a value of another key).
//!
//! A slot can only change owner through a remove and a later insert; the remove's `meta`
//! store precedes the insert's release fence, so a reader that read a new key or value also
//! sees a changed `meta` and retries. A key/value pair therefore never tears, and a reader
//! never blocks (it retries only a bucket that the writer changed while it was reading it).
//!
//! # Growth and reclamation
//!
//! When an insert would push the load above 3/4 of the slots, or a key finds no free slot
//! within [`MAX_PROBE`] buckets, the writer builds a complete new array (double the size, or
//! the same size at low load), with a fresh hash seed, publishes it with one atomic pointer
//! swap, and retires the old array with [`Retired`]: it is freed only once [`Epochs::passed`]
//! says every worker went through a quiescent point. Readers load the array pointer once per
//! lookup and use the old or the new array; the old one is frozen after the swap, so it is a
//! consistent (slightly stale) snapshot. Arrays are reference-counted (`Arc`): the published
//! pointer holds one count, the retired list holds it while the grace period runs. If the
//! writer is dropped with arrays still retired, they move to the shared table and are freed
//! when the last reader drops it.
//!
//! **Contract for readers** (the one the FIB already relies on): a thread may call
//! [`BihashTable::lookup`] only if it is counted by the [`Epochs`] passed to the writer and it
//! calls [`Epochs::quiesce`] only between lookups (the dispatcher does so once per loop) or is
//! [`Epochs::offline`]; thread 0 is the writer itself. A thread that reads without taking part
//! in the epochs may touch a freed array.
//!
//! # Hash
//!
//! One folded 64×64→128-bit multiply of the 8-byte key, then a multiply-shift of that:
//! `(fold(key ^ k0, k1) * k3) >> (64 - log2(buckets))`, where `fold` xors the product's
//! halves (as wyhash and foldhash do), keyed with 256 bits drawn from
//! `std::collections::hash_map::RandomState` for every array (so every table, and every
//! rebuild of a table, gets a new key). The home is the product's *top* bits, which depend
//! on every bit of the fold (a product's low bits depend only on its inputs' low bits: a
//! plain keyed multiply masked to its low bits, or a single fold masked so, puts
//! sequential MACs or one MAC in many bridge domains into a few buckets). Without the key,
//! an attacker who controls the keys (source MACs on a bridge) cannot aim them at one
//! bucket: no linear step precedes the first multiply, so which keys collide depends on the
//! key (a multiply-shift alone is universal but linear: one colliding difference found would
//! give a family of colliding keys); and if bad luck ever fills a probe window at low load,
//! the rebuild re-keys instead of growing. Cost: about 5 instructions (two multiplies, one
//! shift) where [`FoldedKeyHash`]'s two folds and a mask took 8, and SipHash-1-3 (this
//! table's hash until issue 23's round 3) 70. MAC-shaped keys (sequential, differing in one
//! or two bytes, one MAC in 65,536 bridge domains) spread over the buckets as random keys do
//! (chi-square test in `mac_keys_spread_over_buckets`, through the table's own home
//! function). It has no cryptanalysis behind it as SipHash has: an attacker who could learn
//! a table's key could aim keys at one bucket, which costs probes and, at worst, a
//! re-keying rebuild; every hit is still an exact key compare.
//!
//! A table made with [`Bihash::with_limit_prehashed`] takes keys that are already digests of
//! a secret-keyed hash (ACL sessions store [`FoldedKeyHash`] digests of their 5-tuples, as
//! NAT44's `FlowTable` does; [`WideKeyHash`], SipHash, is the conservative choice kept for tables that want
//! a MAC-grade keyed hash): it
//! spreads them with one multiply by a fresh odd key per array instead of hashing them again
//! (an attacker cannot aim digests it cannot compute).
//!
//! # Cost and memory
//!
//! A lookup is one hash plus, almost always, one bucket: the first cache line (meta and keys,
//! compared without branches) and, on a hit, the value in the adjacent line (the
//! adjacent-line prefetcher usually brings both in together); at most [`MAX_PROBE`] buckets.
//! Measured with SipHash (2.6 GHz Xeon VM, 4 KiB pages, random keys): 10k entries (in cache) 13 ns per
//! `lookup`, 10 ns per key with `lookup_x4`; 1M entries 50 ns and 33 ns per key; 4M entries
//! 110 ns and 76 ns per key (DRAM and TLB misses dominate there).
//!
//! [`BihashTable::lookup_many`] does a vector of keys (a frame's worth) [`BATCH`] at a time:
//! the hashes first, each prefetching its home bucket, then the lookups, so the misses of a
//! table bigger than the caches overlap (NAT44's session lookups). [`BihashTable::snapshot`]
//! splits the same two steps for a node that hashes in one pass over its frame and looks up
//! in the next (`l2-input`, whose 1M-MAC FIB is bigger than the caches). An array of
//! 2 MiB or more is an anonymous mapping advised for transparent hugepages
//! ([`crate::epoch::ZeroedArray`]): 1M entries take 16 TLB entries instead of 8,192.
//!
//! A bucket holds 7 entries in 128 bytes, 18.3 bytes per slot. With the load kept between 3/8
//! and 3/4 (the array doubles at 3/4), that is 24 to 49 bytes per entry (1,000,000 entries:
//! 262,144 buckets, 32 MiB, 33.6 bytes per entry); during a resize the old array stays
//! allocated until its grace period is over. Removing entries never shrinks the array
//! ([`Bihash::clear`] goes back to the initial size).

use crate::epoch::{Epochs, Retired, ZeroValid, ZeroedArray};
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{fence, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Entries per bucket.
pub const SLOTS: usize = 7;
/// Most buckets a key may be placed away from its home bucket, counting the home bucket.
pub const MAX_PROBE: usize = 16;
/// Smallest array (buckets).
pub const MIN_BUCKETS: usize = 16;
/// Largest array (buckets): 2^26 x 128 bytes = 8 GiB, about 350M entries at full load.
pub const MAX_BUCKETS: usize = 1 << 26;
/// The array grows when an insert would take the load above `LOAD_NUM / LOAD_DEN`.
const LOAD_NUM: usize = 3;
const LOAD_DEN: usize = 4;

const OCC_MASK: u64 = (1 << SLOTS) - 1;
const OVF_SHIFT: u32 = 8;
const OVF_MASK: u64 = 0xffff;
const VER_SHIFT: u32 = 24;
const VER_ONE: u64 = 1 << VER_SHIFT;

#[inline(always)]
fn occupancy(m: u64) -> u64 {
    m & OCC_MASK
}

#[inline(always)]
fn overflow(m: u64) -> u64 {
    (m >> OVF_SHIFT) & OVF_MASK
}

/// The next `meta` after `m`: a bumped version with the given occupancy and overflow count.
#[inline(always)]
fn next_meta(m: u64, occ: u64, ovf: u64) -> u64 {
    ((m & !(VER_ONE - 1)).wrapping_add(VER_ONE)) | (ovf << OVF_SHIFT) | occ
}

/// Why an insert failed (the table is unchanged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BihashError {
    /// The table already holds its configured maximum number of entries.
    EntryLimit(usize),
    /// The table would have to grow beyond [`MAX_BUCKETS`].
    MaxSize,
    /// The allocator refused the memory for a bigger array.
    OutOfMemory,
}

impl std::fmt::Display for BihashError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BihashError::EntryLimit(n) => write!(f, "hash table is full ({n} entries)"),
            BihashError::MaxSize => {
                write!(f, "hash table cannot grow beyond {MAX_BUCKETS} buckets")
            }
            BihashError::OutOfMemory => f.write_str("out of memory growing the hash table"),
        }
    }
}

impl std::error::Error for BihashError {}

#[inline(always)]
fn sip_round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17) ^ v[2];
    v[2] = v[2].rotate_left(32);
}

/// SipHash-C-D of the 8-byte little-endian message `m` under the key `(k0, k1)` (the
/// tests' check of [`sip_round`] against std).
#[cfg(test)]
fn siphash_u64<const C: usize, const D: usize>(k0: u64, k1: u64, m: u64) -> u64 {
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    // The message block, then the final block (length 8 in the top byte, no tail bytes).
    for b in [m, 8u64 << 56] {
        v[3] ^= b;
        for _ in 0..C {
            sip_round(&mut v);
        }
        v[0] ^= b;
    }
    v[2] ^= 0xff;
    for _ in 0..D {
        sip_round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

/// A keyed hash of 16-byte keys into 64 bits (SipHash-1-3 of two little-endian words under
/// a fresh random key), for tables whose keys are wider than this table's 8 bytes: store the
/// digest as the key and the full key beside the value, and compare it after a hit. The
/// session tables (NAT44, ACL) now use the cheaper [`FoldedKeyHash`]. Without the key an attacker cannot make two chosen keys
/// collide; a collision between honest keys has probability 2^-64.
#[derive(Clone, Copy, Debug)]
pub struct WideKeyHash {
    k0: u64,
    k1: u64,
}

impl Default for WideKeyHash {
    fn default() -> Self {
        WideKeyHash::new()
    }
}

impl WideKeyHash {
    /// A hasher with a fresh random key.
    pub fn new() -> WideKeyHash {
        let (k0, k1) = fresh_key();
        WideKeyHash { k0, k1 }
    }

    /// The digest of the 16-byte key `(a, b)`.
    #[inline(always)]
    pub fn hash(&self, a: u64, b: u64) -> u64 {
        let mut v = [
            self.k0 ^ 0x736f_6d65_7073_6575,
            self.k1 ^ 0x646f_7261_6e64_6f6d,
            self.k0 ^ 0x6c79_6765_6e65_7261,
            self.k1 ^ 0x7465_6462_7974_6573,
        ];
        for m in [a, b, 16u64 << 56] {
            v[3] ^= m;
            sip_round(&mut v);
            v[0] ^= m;
        }
        v[2] ^= 0xff;
        for _ in 0..3 {
            sip_round(&mut v);
        }
        v[0] ^ v[1] ^ v[2] ^ v[3]
    }
}

/// The 128-bit product of `x` and `y` with its halves xored (one `mul` on x86-64, `mul` and
/// `umulh` on aarch64): every output bit depends on every input bit.
#[inline(always)]
pub fn folded_multiply(x: u64, y: u64) -> u64 {
    let p = x as u128 * y as u128;
    p as u64 ^ (p >> 64) as u64
}

/// A keyed hash of 16-byte keys into 64 bits for the same use as [`WideKeyHash`], about a
/// tenth of its instructions: each word xored with a secret random key, the folded 128-bit
/// product of the two ([`folded_multiply`]), then a second keyed fold that spreads it. No
/// linear step precedes the multiply, so, unlike a CRC (whose collisions do not depend on
/// its seed), two colliding keys cannot be found without the key; but it has no
/// cryptanalysis behind it as SipHash has. Tables that store the digest as the key (NAT44
/// sessions) refuse a second live key with the same digest: with this hash an attacker who
/// could learn the key could block a tuple he can predict, nothing more (every hit is
/// confirmed against the full key).
#[derive(Clone, Copy, Debug)]
pub struct FoldedKeyHash {
    k: [u64; 4],
}

impl Default for FoldedKeyHash {
    fn default() -> Self {
        FoldedKeyHash::new()
    }
}

impl FoldedKeyHash {
    /// A hasher with a fresh random key.
    pub fn new() -> FoldedKeyHash {
        let (k0, k1) = fresh_key();
        let (k2, k3) = fresh_key();
        FoldedKeyHash {
            k: [k0, k1, k2, k3 | 1],
        }
    }

    /// The digest of the 16-byte key `(a, b)`.
    #[inline(always)]
    pub fn hash(&self, a: u64, b: u64) -> u64 {
        let h = folded_multiply(a ^ self.k[0], b ^ self.k[1]);
        folded_multiply(h ^ self.k[2], self.k[3])
    }
}

/// A fresh 128-bit hash key from std's per-process random source.
fn fresh_key() -> (u64, u64) {
    let s = RandomState::new();
    (
        s.hash_one(0x736c_7569_6365_u64),
        s.hash_one(0x6269_6861_7368_u64),
    )
}

#[derive(Default)]
#[repr(C, align(128))]
struct Bucket {
    meta: AtomicU64,
    keys: [AtomicU64; SLOTS],
    /// The seven slots' values and an eighth that is never used (the line's padding, so
    /// that a slot index masked with 7 needs no bounds check).
    values: [AtomicU64; SLOTS + 1],
}

const _: () = assert!(std::mem::size_of::<Bucket>() == 128);

impl Bucket {
    /// Writer only: stores a new `meta` (release).
    #[inline(always)]
    fn set_meta(&self, occ: u64, ovf: u64) {
        let m = self.meta.load(Ordering::Relaxed);
        self.meta.store(next_meta(m, occ, ovf), Ordering::Release);
    }

    /// Writer only: changes the overflow count by `delta`.
    #[inline(always)]
    fn add_overflow(&self, delta: i64) {
        let m = self.meta.load(Ordering::Relaxed);
        let ovf = overflow(m).wrapping_add_signed(delta) & OVF_MASK;
        self.set_meta(occupancy(m), ovf);
    }

    /// The slot holding `key` among those occupied in `m`.
    #[inline(always)]
    fn slot_of(&self, key: u64, m: u64) -> Option<usize> {
        // All seven keys compared without branches (the matching slot is random, a branch
        // per slot would mispredict), then only the occupied ones kept.
        let hit = self.key_bits(key) & KEY_BIT_OCC[occupancy(m) as usize];
        (hit != 0).then(|| (hit.trailing_zeros() as usize - KEY_BIT_FIRST) / KEY_BIT_STRIDE)
    }

    /// Bit [`KEY_BIT_FIRST`] + [`KEY_BIT_STRIDE`] × `i` set when key slot `i` holds `key`
    /// (occupied or not; other bits may be set too, [`KEY_BIT_OCC`] clears them).
    /// SSE2 (part of every x86-64): four aligned 16-byte loads cover `meta` and the seven
    /// keys — the bucket's first cache line only, never the values' — compared as 32-bit
    /// halves; two packs narrow each half's result to a byte, one `movemask` gathers them,
    /// and a lane matches where both its halves do (bit 2 × lane, `meta` being lane 0):
    /// about 18 instructions instead of the scalar loop's 30.
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(miri)))]
    #[inline(always)]
    fn key_bits(&self, key: u64) -> u32 {
        use std::arch::x86_64::*;
        let p = (self as *const Bucket).cast::<__m128i>();
        // SAFETY: SSE2 is enabled (the cfg). The loads read bytes 0..64 of this 128-byte,
        // 128-aligned bucket (`meta` and keys 0..6), all inside `self` and 16-aligned.
        // They are plain loads of memory the writer updates with atomic stores: formally a
        // data race, which this relies on being benign as a seqlock reader's is — an x86
        // load never invents a value, only returns an old or new one per 8 bytes, and
        // every lookup re-checks `meta` after reading and discards what it read if the
        // bucket changed (the module's reader protocol). The writer-side lookups
        // (`find_from`, `get_unshared`) do not re-check: they run only while no writer can
        // change the array (`&Bihash` held; insert and remove take `&mut`), so there is no
        // race for them to discard. Miri builds take the scalar path.
        unsafe {
            let k = _mm_set1_epi64x(key as i64);
            let c = |i: usize| _mm_cmpeq_epi32(_mm_load_si128(p.add(i)), k);
            let halves = _mm_packs_epi16(_mm_packs_epi32(c(0), c(1)), _mm_packs_epi32(c(2), c(3)));
            let m = _mm_movemask_epi8(halves) as u32;
            m & m >> 1
        }
    }

    /// [`Bucket::key_bits`] without SIMD.
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2", not(miri))))]
    #[inline(always)]
    fn key_bits(&self, key: u64) -> u32 {
        self.key_bits_scalar(key)
    }

    /// Bit `i` set when key slot `i` holds `key`: one compare per slot.
    #[cfg(any(
        test,
        not(all(target_arch = "x86_64", target_feature = "sse2", not(miri)))
    ))]
    #[inline(always)]
    fn key_bits_scalar(&self, key: u64) -> u32 {
        let mut hit = 0u32;
        for (i, k) in self.keys.iter().enumerate() {
            hit |= ((k.load(Ordering::Relaxed) == key) as u32) << i;
        }
        hit
    }
}

const SSE2: bool = cfg!(all(
    target_arch = "x86_64",
    target_feature = "sse2",
    not(miri)
));

/// How far apart [`Bucket::key_bits`] puts the slots' bits.
const KEY_BIT_STRIDE: usize = if SSE2 { 2 } else { 1 };

/// Where [`Bucket::key_bits`] puts slot 0's bit (after `meta`'s lane with SSE2).
const KEY_BIT_FIRST: usize = if SSE2 { 2 } else { 0 };

/// An occupancy mask with its bits moved to [`Bucket::key_bits`]'s positions.
const KEY_BIT_OCC: [u32; 1 << SLOTS] = {
    let mut t = [0u32; 1 << SLOTS];
    let mut occ = 0;
    while occ < t.len() {
        let mut i = 0;
        while i < SLOTS {
            if occ & (1 << i) != 0 {
                t[occ] |= 1 << (KEY_BIT_FIRST + i * KEY_BIT_STRIDE);
            }
            i += 1;
        }
        occ += 1;
    }
    t
};

// SAFETY: atomics only (a zero bucket is an empty one: no entry, no overflow, version 0),
// no drop glue.
unsafe impl ZeroValid for Bucket {}

/// One bucket array with its hash key.
struct Array {
    /// The buckets, zeroed (empty): on the heap, or from 2 MiB on mapped and advised for
    /// transparent hugepages ([`ZeroedArray`]: a big table's random lookups take one TLB
    /// entry per 2 MiB instead of per 4 KiB, and a small table does not take a hugepage).
    buckets: ZeroedArray<Bucket>,
    mask: usize,
    /// `64 - log2(buckets)`: a key's home is the top bits of its hash ([`Array::home`]).
    shift: u32,
    /// This array's secret key (a rebuild draws a new one).
    key: FoldedKeyHash,
    /// Keys are already keyed digests ([`Bihash::with_limit_prehashed`]).
    prehashed: bool,
}

impl Array {
    /// `n` (a power of two) empty buckets with a fresh hash key.
    fn new(n: usize, prehashed: bool) -> Result<Array, BihashError> {
        debug_assert!(n.is_power_of_two());
        let buckets = ZeroedArray::try_new(n).map_err(|_| BihashError::OutOfMemory)?;
        Ok(Array {
            buckets,
            mask: n - 1,
            shift: 64 - n.trailing_zeros(),
            key: FoldedKeyHash::new(),
            prehashed,
        })
    }

    /// `key`'s home bucket: the top bits of a keyed multiply by an odd key (multiply-shift,
    /// whose top bits depend on every bit of what is multiplied, where a product's low bits
    /// depend only on its low bits). A plain key is first folded, `fold(key ^ k0, k1)` (the
    /// 128-bit product's halves xored, [`folded_multiply`]), so that no key difference is
    /// linear in the home (with `x * k` alone, one colliding difference `d` found would put
    /// a whole family of keys `x + j·d` in one bucket); about 5 instructions. A prehashed
    /// key (a secret-keyed digest already) is multiplied directly, `(key ^ k0) * k3` (a
    /// rebuild with a new key regroups the buckets).
    #[inline(always)]
    fn home(&self, key: u64) -> usize {
        let h = if self.prehashed {
            (key ^ self.key.k[0]).wrapping_mul(self.key.k[3])
        } else {
            folded_multiply(key ^ self.key.k[0], self.key.k[1]).wrapping_mul(self.key.k[3])
        };
        (h >> self.shift) as usize
    }

    /// The `d`-th bucket of the probe sequence from `home`: home + 0, 1, 3, 6, 10, ...
    /// (triangular numbers, which visit every bucket of a power-of-two array once in the
    /// first `n` steps, so the first [`Array::probe_limit`] buckets are distinct).
    #[inline(always)]
    fn at(&self, home: usize, d: usize) -> usize {
        home.wrapping_add(d * (d + 1) / 2) & self.mask
    }

    /// Hints the CPU to fetch bucket `b`'s first line (`meta` and keys; the values' line
    /// is its 128-byte pair, which the adjacent-line prefetcher usually brings along).
    #[inline(always)]
    fn prefetch(&self, b: usize) {
        crate::prefetch(self.buckets.as_ptr().wrapping_add(b));
    }

    #[inline(always)]
    fn probe_limit(&self) -> usize {
        MAX_PROBE.min(self.buckets.len())
    }

    /// Reader: [`Array::get_from`] with its first bucket inline and the rest (a bucket
    /// changed while read, an overflowed home) out of line: a hit in its home bucket or a miss
    /// in a home that never overflowed — nearly every lookup at this load — runs no probe
    /// loop and keeps fewer values live in the caller.
    #[inline(always)]
    fn get_home(&self, key: u64, b: usize) -> Option<u64> {
        let bk = &self.buckets[b];
        let m = bk.meta.load(Ordering::Acquire);
        let v = bk
            .slot_of(key, m)
            .map(|i| bk.values[i].load(Ordering::Relaxed));
        fence(Ordering::Acquire);
        if bk.meta.load(Ordering::Relaxed) == m && (v.is_some() || overflow(m) == 0) {
            return v;
        }
        self.get_cold(key, b)
    }

    /// [`Snapshot::get_many`]'s loop, out of line (the frame function that calls it keeps
    /// its registers for its own passes): [`Array::get_home`] of each key, the array's
    /// buckets and mask held in registers (the acquire loads of `meta` would make the loop
    /// reload them from `self` for every key), the bucket [`BATCH`] keys ahead prefetched.
    #[inline(never)]
    fn get_many(&self, keys: &[u64], homes: &[Home], out: &mut [Option<u64>]) {
        let (buckets, mask) = (&self.buckets[..], self.mask);
        for (i, ((o, &k), &Home(h))) in out.iter_mut().zip(keys).zip(homes).enumerate() {
            if let Some(&Home(a)) = homes.get(i + BATCH) {
                crate::prefetch(buckets.as_ptr().wrapping_add(a as usize & mask));
            }
            let b = h as usize & mask;
            let Some(bk) = buckets.get(b) else {
                *o = None;
                continue;
            };
            let m = bk.meta.load(Ordering::Acquire);
            let v = bk
                .slot_of(k, m)
                .map(|i| bk.values[i & SLOTS].load(Ordering::Relaxed));
            fence(Ordering::Acquire);
            *o = if bk.meta.load(Ordering::Relaxed) == m && (v.is_some() || overflow(m) == 0) {
                v
            } else {
                self.get_cold(k, b)
            };
        }
    }

    /// [`Array::get_home`]'s slow path: the whole lookup again.
    #[cold]
    #[inline(never)]
    fn get_cold(&self, key: u64, b: usize) -> Option<u64> {
        self.get_from(key, b, self.buckets[b].meta.load(Ordering::Acquire))
    }

    /// Reader: looks `key` up starting at bucket `b`, whose `meta` was loaded (acquire) as `m`.
    #[inline(always)]
    fn get_from(&self, key: u64, home: usize, mut m: u64) -> Option<u64> {
        let mut b = home;
        for d in 1..=self.probe_limit() {
            let bk = &self.buckets[b];
            loop {
                let v = bk
                    .slot_of(key, m)
                    .map(|i| bk.values[i].load(Ordering::Relaxed));
                fence(Ordering::Acquire);
                if bk.meta.load(Ordering::Relaxed) == m {
                    if v.is_some() || overflow(m) == 0 {
                        return v;
                    }
                    break;
                }
                // The writer changed this bucket while we read it: read it again.
                m = bk.meta.load(Ordering::Acquire);
            }
            b = self.at(home, d);
            m = self.buckets[b].meta.load(Ordering::Acquire);
        }
        None
    }

    #[inline(always)]
    fn get(&self, key: u64) -> Option<u64> {
        let b = self.home(key);
        self.get_from(key, b, self.buckets[b].meta.load(Ordering::Acquire))
    }

    /// The writer's lookup ([`Bihash::get_unshared`]): `key`'s value without the reader
    /// protocol's version check (no writer can change the array meanwhile), its home bucket
    /// inline and an overflowed home's probe out of line.
    #[inline(always)]
    fn get_unshared(&self, key: u64) -> Option<u64> {
        let home = self.home(key);
        let bk = &self.buckets[home];
        let m = bk.meta.load(Ordering::Relaxed);
        if let Some(i) = bk.slot_of(key, m) {
            return Some(bk.values[i].load(Ordering::Relaxed));
        }
        if overflow(m) == 0 {
            return None;
        }
        self.get_unshared_cold(key, home)
    }

    /// [`Array::get_unshared`]'s probe past an overflowed home bucket.
    #[cold]
    #[inline(never)]
    fn get_unshared_cold(&self, key: u64, home: usize) -> Option<u64> {
        self.find_from(key, home)
            .map(|(_, b, i, _)| self.buckets[b].values[i].load(Ordering::Relaxed))
    }

    /// Writer: where `key` is: (home, bucket, slot, distance from home).
    fn find(&self, key: u64) -> Option<(usize, usize, usize, usize)> {
        self.find_from(key, self.home(key))
    }

    /// Writer: [`Array::find`] with `key`'s home computed already.
    fn find_from(&self, key: u64, home: usize) -> Option<(usize, usize, usize, usize)> {
        for d in 0..self.probe_limit() {
            let b = self.at(home, d);
            let bk = &self.buckets[b];
            let m = bk.meta.load(Ordering::Relaxed);
            if let Some(i) = bk.slot_of(key, m) {
                return Some((home, b, i, d));
            }
            if overflow(m) == 0 {
                return None;
            }
        }
        None
    }

    /// Writer: stores a key known to be absent; its distance from home, or `None` if the
    /// probe window is full (nothing changed then).
    fn place(&self, key: u64, value: u64) -> Option<usize> {
        self.place_from(key, value, self.home(key))
    }

    /// Writer: [`Array::place`] with `key`'s home computed already.
    fn place_from(&self, key: u64, value: u64, home: usize) -> Option<usize> {
        for d in 0..self.probe_limit() {
            let b = self.at(home, d);
            let bk = &self.buckets[b];
            let occ = occupancy(bk.meta.load(Ordering::Relaxed));
            if occ == OCC_MASK {
                continue;
            }
            // Count the detour first, so a reader that can see the entry can reach it.
            for e in 0..d {
                self.buckets[self.at(home, e)].add_overflow(1);
            }
            let i = (!occ).trailing_zeros() as usize;
            // Orders earlier `meta` stores (the remove that freed this slot) before the new
            // key and value: a reader that sees either also sees a changed `meta`.
            fence(Ordering::Release);
            bk.keys[i].store(key, Ordering::Relaxed);
            bk.values[i].store(value, Ordering::Relaxed);
            let m = bk.meta.load(Ordering::Relaxed);
            bk.set_meta(occupancy(m) | 1 << i, overflow(m));
            return Some(d);
        }
        None
    }

    /// Writer: frees slot `i` of bucket `b`, `d` buckets away from `home`.
    fn unlink(&self, home: usize, b: usize, i: usize, d: usize) {
        let bk = &self.buckets[b];
        let m = bk.meta.load(Ordering::Relaxed);
        bk.set_meta(occupancy(m) & !(1 << i), overflow(m));
        for e in 0..d {
            self.buckets[self.at(home, e)].add_overflow(-1);
        }
    }

    /// Writer (or a frozen array): every entry.
    fn entries(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.buckets.iter().flat_map(|bk| {
            let occ = occupancy(bk.meta.load(Ordering::Relaxed));
            (0..SLOTS)
                .filter(move |i| occ & (1 << i) != 0)
                .map(move |i| {
                    (
                        bk.keys[i].load(Ordering::Relaxed),
                        bk.values[i].load(Ordering::Relaxed),
                    )
                })
        })
    }
}

/// The read side, shared by every thread (`Arc<BihashTable>`): lock-free lookups.
pub struct BihashTable {
    /// The published array: a pointer from `Arc::into_raw`, owning one strong count.
    cur: AtomicPtr<Array>,
    /// Arrays still retired when the writer was dropped (freed with the table).
    graveyard: Mutex<Vec<Arc<Array>>>,
}

impl BihashTable {
    fn new(a: Arc<Array>) -> BihashTable {
        BihashTable {
            cur: AtomicPtr::new(Arc::into_raw(a).cast_mut()),
            graveyard: Mutex::new(Vec::new()),
        }
    }

    #[inline(always)]
    fn array(&self) -> &Array {
        let p = self.cur.load(Ordering::Acquire);
        // SAFETY: `p` came from `Arc::into_raw` of a fully built array (published with
        // release, loaded with acquire) and that strong count is given up only by
        // `Bihash::publish`, which hands it to `Retired`: it is dropped after every reader
        // thread passed a quiescent point, and readers quiesce only between lookups (module
        // contract), or when the table itself is dropped. The reference is used within the
        // lookup that took it, or, through [`BihashTable::snapshot`] (an `unsafe fn`), by a
        // caller that promised not to reach a quiescent point while it holds it.
        unsafe { &*p }
    }

    /// The value stored for `key`.
    #[inline(always)]
    pub fn lookup(&self, key: u64) -> Option<u64> {
        self.array().get(key)
    }

    /// Four lookups at once: the four hashes first (independent dependency chains), then one
    /// load of each home bucket's first cache line so the four misses overlap, then the probes.
    #[inline(always)]
    pub fn lookup_x4(&self, keys: [u64; 4]) -> [Option<u64>; 4] {
        let a = self.array();
        let b = keys.map(|k| a.home(k));
        let m = b.map(|b| a.buckets[b].meta.load(Ordering::Acquire));
        [
            a.get_from(keys[0], b[0], m[0]),
            a.get_from(keys[1], b[1], m[1]),
            a.get_from(keys[2], b[2], m[2]),
            a.get_from(keys[3], b[3], m[3]),
        ]
    }

    /// Lookups of many keys (a frame's worth): `out[i]` = the value stored for `keys[i]`
    /// (the shorter of the two decides how many). Keys go through in chunks of
    /// [`BATCH`]: the chunk's hashes first (independent dependency chains that overlap),
    /// each prefetching its home bucket, then the chunk's lookups, which find the buckets
    /// in cache: in a table bigger than the caches the misses of a whole chunk overlap
    /// instead of stalling each lookup in turn. All keys are looked up in one array.
    #[inline]
    pub fn lookup_many(&self, keys: &[u64], out: &mut [Option<u64>]) {
        let a = self.array();
        let mut home = [0usize; BATCH];
        for (ks, os) in keys.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            for (h, &k) in home.iter_mut().zip(ks) {
                *h = a.home(k);
                a.prefetch(*h);
            }
            for ((o, &k), &h) in os.iter_mut().zip(ks).zip(&home) {
                *o = a.get_from(k, h, a.buckets[h].meta.load(Ordering::Acquire));
            }
        }
    }

    /// Hints the CPU to fetch both lines of `key`'s home bucket (keys, then values) ahead
    /// of its [`BihashTable::lookup`], for callers that know their keys long before they
    /// look them up (a frame's parse pass): in a table larger than the caches the miss
    /// overlaps the work on the packets before it. It reads the published array's pointer,
    /// hash keys, mask and buckets pointer (to compute the address), no bucket. No effect
    /// on the table; a key stored away from its home costs its later buckets' misses as usual.
    #[inline(always)]
    pub fn prefetch(&self, key: u64) {
        self.home(key, true);
    }

    /// `key`'s home bucket in the published array, and (`fetch`) a hint to the CPU to
    /// fetch both its lines.
    #[inline(always)]
    fn home(&self, key: u64, fetch: bool) -> u32 {
        let a = self.array();
        let b = a.home(key);
        if fetch {
            a.prefetch(b);
            // The values' line too: not left to the adjacent-line prefetcher here.
            crate::prefetch(
                a.buckets
                    .as_ptr()
                    .wrapping_add(b)
                    .cast::<u8>()
                    .wrapping_add(64),
            );
        }
        // MAX_BUCKETS is 2^26: a bucket index fits 32 bits.
        b as u32
    }

    /// Buckets of the published array.
    pub fn buckets(&self) -> usize {
        self.array().buckets.len()
    }

    /// The published array, for lookups split in two steps over a frame (the way VPP's
    /// nodes use `clib_bihash_search_inline_with_hash`): [`Snapshot::home`] of every key
    /// first (its hash; the home bucket prefetched), then [`Snapshot::get`] of each, which
    /// finds its bucket in cache. A node does the first step in its pass over the packets'
    /// headers and the second in its pass of decisions, with no vector of keys in between.
    ///
    /// The snapshot is the array of the moment: a reader that holds it across a resize reads
    /// the old, frozen array (a consistent, slightly stale copy).
    ///
    /// # Safety
    ///
    /// The borrow ties the snapshot to the table, not to the array's grace period: once the
    /// writer replaced the array, the old one is freed after every reader thread passed a
    /// quiescent point. The calling thread must therefore not reach a quiescent point
    /// ([`Epochs::quiesce`], or anything that reports one for it) while the snapshot, a copy
    /// of it or a [`Home`] from it is still in use (a node takes one per frame and drops it
    /// before the frame ends; the dispatcher quiesces only between frames).
    #[inline(always)]
    pub unsafe fn snapshot(&self) -> Snapshot<'_> {
        Snapshot { a: self.array() }
    }
}

/// A reader's hold on one array of a [`BihashTable`] ([`BihashTable::snapshot`]).
#[derive(Clone, Copy)]
pub struct Snapshot<'a> {
    a: &'a Array,
}

/// A key's home bucket in the array of the [`Snapshot`] that computed it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Home(u32);

impl Snapshot<'_> {
    /// `key`'s home bucket; hints the CPU to fetch it.
    #[inline(always)]
    pub fn home(&self, key: u64) -> Home {
        let h = self.home_only(key);
        self.prefetch(h);
        h
    }

    /// `key`'s home bucket, not prefetched (a caller that prefetches it later, a fixed
    /// distance ahead of its lookups, with [`Snapshot::prefetch`]).
    #[inline(always)]
    pub fn home_only(&self, key: u64) -> Home {
        // MAX_BUCKETS is 2^26: a bucket index fits 32 bits.
        Home(self.a.home(key) as u32)
    }

    /// Hints the CPU to fetch bucket `home` (masked into this array).
    #[inline(always)]
    pub fn prefetch(&self, home: Home) {
        self.a.prefetch(home.0 as usize & self.a.mask);
    }

    /// The value stored for `key`, whose home this snapshot computed as `home`. (A `home`
    /// of another snapshot or another key is masked into this array and finds nothing or
    /// what the key's real home would, never another key's value.)
    #[inline(always)]
    pub fn get(&self, key: u64, home: Home) -> Option<u64> {
        self.a.get_home(key, home.0 as usize & self.a.mask)
    }

    /// [`BihashTable::lookup_many`] with the homes already computed (by this snapshot):
    /// `out[i]` = the value stored for `keys[i]`, home `homes[i]` (the shortest of the three
    /// decides how many), each bucket prefetched [`BATCH`] keys before its lookup. The
    /// caller prefetches the first [`BATCH`] (when it computed their homes, say).
    #[inline(always)]
    pub fn get_many(&self, keys: &[u64], homes: &[Home], out: &mut [Option<u64>]) {
        self.a.get_many(keys, homes, out)
    }
}

/// Keys [`BihashTable::lookup_many`] hashes (and whose buckets it prefetches) before it
/// reads the first of them.
pub const BATCH: usize = 16;

impl Drop for BihashTable {
    fn drop(&mut self) {
        let p = *self.cur.get_mut();
        // SAFETY: `p` came from `Arc::into_raw` and its strong count is still owned by the
        // table (every publish swaps in a new one); no reader is left (`&mut self`).
        drop(unsafe { Arc::from_raw(p) });
    }
}

impl std::fmt::Debug for BihashTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BihashTable")
            .field("buckets", &self.buckets())
            .finish()
    }
}

/// The writer (main thread): inserts, removes, growth, reclamation, iteration and stats.
pub struct Bihash {
    table: Arc<BihashTable>,
    /// The published array (the writer's own count).
    cur: Arc<Array>,
    retired: Retired<Arc<Array>>,
    len: usize,
    max_entries: usize,
    initial_buckets: usize,
    max_probe: usize,
    resizes: u64,
}

impl Default for Bihash {
    fn default() -> Self {
        Bihash::new()
    }
}

/// Buckets needed to hold `entries` at the growth threshold.
fn buckets_for(entries: usize) -> usize {
    let slots = entries.saturating_mul(LOAD_DEN).div_ceil(LOAD_NUM);
    slots
        .div_ceil(SLOTS)
        .max(MIN_BUCKETS)
        .checked_next_power_of_two()
        .unwrap_or(MAX_BUCKETS)
        .min(MAX_BUCKETS)
}

impl Bihash {
    /// An empty table of [`MIN_BUCKETS`] buckets.
    pub fn new() -> Bihash {
        Bihash::with_limit(0, usize::MAX)
    }

    /// An empty table sized to hold `entries` without growing.
    pub fn with_capacity(entries: usize) -> Bihash {
        Bihash::with_limit(entries, usize::MAX)
    }

    /// An empty table sized for `entries` that refuses new keys beyond `max_entries`
    /// ([`BihashError::EntryLimit`]; e.g. a bridge domain's learn limit or a NAT session cap).
    ///
    /// # Panics
    /// If the initial array cannot be allocated.
    pub fn with_limit(entries: usize, max_entries: usize) -> Bihash {
        Bihash::build(entries, max_entries, false)
    }

    /// [`Bihash::with_limit`] for keys that are already digests of a secret-keyed hash
    /// (e.g. [`WideKeyHash`] of a wider key): the table spreads them with one multiply
    /// instead of hashing them again. Keys an attacker can choose must not go
    /// into such a table.
    ///
    /// # Panics
    /// If the initial array cannot be allocated.
    pub fn with_limit_prehashed(entries: usize, max_entries: usize) -> Bihash {
        Bihash::build(entries, max_entries, true)
    }

    fn build(entries: usize, max_entries: usize, prehashed: bool) -> Bihash {
        let n = buckets_for(entries.min(max_entries));
        let cur = Arc::new(Array::new(n, prehashed).expect("allocating the initial hash table"));
        Bihash {
            table: Arc::new(BihashTable::new(Arc::clone(&cur))),
            cur,
            retired: Retired::new(),
            len: 0,
            max_entries,
            initial_buckets: n,
            max_probe: 0,
            resizes: 0,
        }
    }

    /// The shared read side (give a clone to every worker).
    pub fn table(&self) -> &Arc<BihashTable> {
        &self.table
    }

    /// The value stored for `key` (the writer's own view; same as [`BihashTable::lookup`]).
    pub fn get(&self, key: u64) -> Option<u64> {
        self.cur.get(key)
    }

    /// [`Bihash::get`] without the reader protocol: while `&self` is held no insert or
    /// remove can run (they take `&mut self`), so the array cannot change under the lookup
    /// and the version check and its retry are skipped; the home bucket is read inline and a
    /// probe past it (an overflowed home) out of line. Same result as [`Bihash::get`]; for a
    /// writer that does its own per-packet lookups (NAT44's per-thread sessions, behind
    /// their thread's lock). No prefetch: a caller with a table bigger than the caches
    /// prefetches the home bucket ahead ([`BihashTable::prefetch`]). [`Bihash::get`] could
    /// use it too (it has `&self` as well; left for later, not measured).
    #[inline(always)]
    pub fn get_unshared(&self, key: u64) -> Option<u64> {
        self.cur.get_unshared(key)
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No entry.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Entries the current array takes before it grows (3/4 of its slots).
    pub fn capacity(&self) -> usize {
        self.cur.buckets.len() * SLOTS * LOAD_NUM / LOAD_DEN
    }

    /// The configured entry limit (`usize::MAX`: none).
    pub fn max_entries(&self) -> usize {
        self.max_entries
    }

    /// Buckets in the current array.
    pub fn buckets(&self) -> usize {
        self.cur.buckets.len()
    }

    /// Longest probe, in buckets (1: in its home bucket), that an entry needed since the
    /// array was last rebuilt; 0 for a table never written.
    pub fn max_probe(&self) -> usize {
        self.max_probe
    }

    /// Arrays built to replace the published one (growth, re-keying, [`Bihash::clear`]).
    pub fn resizes(&self) -> u64 {
        self.resizes
    }

    /// Bytes of the current bucket array.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.cur.buckets)
    }

    /// Old arrays waiting for their grace period.
    pub fn retired_pending(&self) -> usize {
        self.retired.len()
    }

    /// Frees the old arrays whose grace period is over; returns how many.
    pub fn reclaim(&mut self, epochs: &Epochs) -> usize {
        if self.retired.is_empty() {
            return 0;
        }
        self.retired.reclaim(epochs).len()
    }

    /// A snapshot of every (key, value), unordered.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.cur.entries()
    }

    /// Adds `key` or replaces its value; returns the old value.
    pub fn insert(
        &mut self,
        epochs: &Epochs,
        key: u64,
        value: u64,
    ) -> Result<Option<u64>, BihashError> {
        self.insert_unless(epochs, key, value, |_| false)
    }

    /// Adds `key`, or replaces its value unless `keep` says to keep the old one; returns the
    /// old value (kept or replaced). One hash of `key` (a `get` then an `insert` hash it
    /// three times) unless the array is rebuilt on the way.
    pub fn insert_unless(
        &mut self,
        epochs: &Epochs,
        key: u64,
        value: u64,
        keep: impl FnOnce(u64) -> bool,
    ) -> Result<Option<u64>, BihashError> {
        self.reclaim(epochs);
        let home = self.cur.home(key);
        if let Some((_, b, i, _)) = self.cur.find_from(key, home) {
            let slot = &self.cur.buckets[b].values[i];
            let old = slot.load(Ordering::Relaxed);
            if !keep(old) {
                slot.store(value, Ordering::Release);
            }
            return Ok(Some(old));
        }
        // `home` holds until the array is rebuilt (a new size or a new hash key).
        let mut home = Some(home);
        if self.len >= self.max_entries {
            return Err(BihashError::EntryLimit(self.max_entries));
        }
        if self.len >= self.capacity() && self.buckets() < MAX_BUCKETS {
            // Best effort: if the bigger array cannot be had, keep filling this one.
            if self.rebuild(epochs, self.buckets() * 2).is_ok() {
                home = None;
            }
        }
        let mut tries = 0;
        loop {
            let h = home.unwrap_or_else(|| self.cur.home(key));
            if let Some(d) = self.cur.place_from(key, value, h) {
                self.max_probe = self.max_probe.max(d + 1);
                self.len += 1;
                return Ok(None);
            }
            // No free slot within MAX_PROBE buckets of home. At low load that is bad luck (or
            // keys aimed at one bucket): re-key at the same size; otherwise double.
            tries += 1;
            let n = self.buckets();
            let low = tries == 1 && self.len < self.capacity() / 2;
            let target = if low || n >= MAX_BUCKETS { n } else { n * 2 };
            if tries > 4 && target == n {
                return Err(BihashError::MaxSize);
            }
            self.rebuild(epochs, target)?;
            home = None;
        }
    }

    /// Removes `key`; returns its value.
    pub fn remove(&mut self, epochs: &Epochs, key: u64) -> Option<u64> {
        self.reclaim(epochs);
        let (home, b, i, d) = self.cur.find(key)?;
        let v = self.cur.buckets[b].values[i].load(Ordering::Relaxed);
        self.cur.unlink(home, b, i, d);
        self.len -= 1;
        Some(v)
    }

    /// Removes every entry (publishes an empty array of the initial size).
    pub fn clear(&mut self, epochs: &Epochs) {
        self.reclaim(epochs);
        if let Ok(a) = Array::new(self.initial_buckets, self.cur.prehashed) {
            self.publish(epochs, a);
            self.len = 0;
            self.max_probe = 0;
            self.resizes += 1;
        } else {
            // Cannot allocate: empty the current array in place instead.
            let keys: Vec<u64> = self.iter().map(|(k, _)| k).collect();
            for k in keys {
                self.remove(epochs, k);
            }
        }
    }

    /// Builds an array of at least `n` buckets holding every entry, with a fresh key, and
    /// publishes it. On error nothing changed.
    fn rebuild(&mut self, epochs: &Epochs, mut n: usize) -> Result<(), BihashError> {
        loop {
            if n > MAX_BUCKETS {
                return Err(BihashError::MaxSize);
            }
            let a = Array::new(n, self.cur.prehashed)?;
            let mut longest = 0;
            let mut ok = true;
            for (k, v) in self.cur.entries() {
                match a.place(k, v) {
                    Some(d) => longest = longest.max(d + 1),
                    None => {
                        ok = false;
                        break;
                    }
                }
            }
            if ok {
                self.publish(epochs, a);
                self.max_probe = longest;
                self.resizes += 1;
                return Ok(());
            }
            n *= 2;
        }
    }

    /// Makes `a` the array readers see and retires the old one.
    fn publish(&mut self, epochs: &Epochs, a: Array) {
        let a = Arc::new(a);
        let raw = Arc::into_raw(Arc::clone(&a)).cast_mut();
        let old = self.table.cur.swap(raw, Ordering::AcqRel);
        // SAFETY: `old` came from `Arc::into_raw` (table construction or an earlier publish)
        // and the strong count it stands for is taken back exactly once, here, after the swap
        // made it unreachable for new lookups. Lookups still running on it are covered by
        // retiring that count until the grace period is over.
        let old = unsafe { Arc::from_raw(old) };
        self.cur = a;
        self.retired.retire(epochs, old);
    }
}

impl Drop for Bihash {
    fn drop(&mut self) {
        if self.retired.is_empty() {
            return;
        }
        // Readers may still be inside a lookup on a retired array: hand them to the table,
        // which frees them when the last reader drops it. With a single-thread `Epochs` every
        // grace period counts as over (thread 0 is skipped), so this takes them all.
        let all = self.retired.reclaim(&Epochs::new(1));
        if let Ok(mut g) = self.table.graveyard.lock() {
            g.extend(all);
        }
    }
}

impl std::fmt::Debug for Bihash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bihash")
            .field("len", &self.len)
            .field("buckets", &self.buckets())
            .field("max_probe", &self.max_probe)
            .field("resizes", &self.resizes)
            .field("retired_pending", &self.retired.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;
    use std::sync::atomic::AtomicBool;

    /// A bijection on u64 (distinct inputs give distinct keys).
    fn mix(mut x: u64) -> u64 {
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    }

    /// The SIMD key compare finds the same slots as one compare per slot, for keys that
    /// match a slot, only its low or high half, or the value beside the last key.
    #[test]
    fn key_bits_match_the_scalar_compare() {
        let b = Bucket::default();
        for round in 0..20_000u64 {
            let key = mix(round);
            let near = [
                key,
                key ^ 1,
                key ^ (1 << 63),
                key & 0xffff_ffff,
                key & !0xffff_ffff,
                mix(round + 1),
            ];
            for i in 0..SLOTS {
                let r = mix(round * 16 + i as u64);
                b.keys[i].store(near[(r % 6) as usize], Ordering::Relaxed);
                b.values[i].store(if r & 64 != 0 { key } else { r }, Ordering::Relaxed);
            }
            // `meta` shares the first load with key 0: a meta equal to the key matches
            // nothing.
            b.meta.store(
                if round & 1 != 0 { key } else { mix(round) },
                Ordering::Relaxed,
            );
            let want = b.key_bits_scalar(key);
            let got = b.key_bits(key) & KEY_BIT_OCC[OCC_MASK as usize];
            let spread = (0..SLOTS)
                .filter(|i| want & (1 << i) != 0)
                .fold(0, |a, i| a | 1 << (KEY_BIT_FIRST + i * KEY_BIT_STRIDE));
            assert_eq!(got, spread, "round {round}");
            for occ in [0, OCC_MASK, mix(round) & OCC_MASK] {
                let slot = (want & occ as u32 != 0).then(|| (want & occ as u32).trailing_zeros());
                // Meta's other bits (overflow count, version) change nothing.
                let m = occ | mix(round + 7) & !OCC_MASK;
                assert_eq!(b.slot_of(key, m).map(|s| s as u32), slot);
            }
        }
    }

    #[test]
    #[allow(deprecated)]
    fn siphash_matches_std() {
        use std::hash::{Hasher, SipHasher};
        for i in 0..1000u64 {
            let (k0, k1, m) = (mix(i), mix(i + 7777), mix(i + 99999));
            let mut s = SipHasher::new_with_keys(k0, k1);
            s.write(&m.to_le_bytes());
            assert_eq!(siphash_u64::<2, 4>(k0, k1, m), s.finish());
        }
        // SipHash-1-3 differs from 2-4 and depends on the key.
        assert_ne!(siphash_u64::<1, 3>(1, 2, 3), siphash_u64::<2, 4>(1, 2, 3));
        assert_ne!(siphash_u64::<1, 3>(1, 2, 3), siphash_u64::<1, 3>(1, 3, 3));
    }

    /// SipHash-c-d of a message of whole 8-byte words, written from the paper's
    /// definition, checked against std for 2-4 and used as the oracle for [`WideKeyHash`].
    fn siphash_words(c: usize, d: usize, k0: u64, k1: u64, words: &[u64]) -> u64 {
        let mut v = [
            k0 ^ 0x736f_6d65_7073_6575,
            k1 ^ 0x646f_7261_6e64_6f6d,
            k0 ^ 0x6c79_6765_6e65_7261,
            k1 ^ 0x7465_6462_7974_6573,
        ];
        let len = (words.len() as u64 * 8) << 56;
        for &m in words.iter().chain([len].iter()) {
            v[3] ^= m;
            for _ in 0..c {
                sip_round(&mut v);
            }
            v[0] ^= m;
        }
        v[2] ^= 0xff;
        for _ in 0..d {
            sip_round(&mut v);
        }
        v[0] ^ v[1] ^ v[2] ^ v[3]
    }

    #[test]
    #[allow(deprecated)]
    fn wide_key_hash_is_siphash13_of_16_bytes() {
        use std::hash::{Hasher, SipHasher};
        for i in 0..200u64 {
            let (k0, k1, a, b) = (mix(i), mix(i + 1), mix(i + 2), mix(i + 3));
            let mut s = SipHasher::new_with_keys(k0, k1);
            s.write(&a.to_le_bytes());
            s.write(&b.to_le_bytes());
            assert_eq!(siphash_words(2, 4, k0, k1, &[a, b]), s.finish());
            let h = WideKeyHash { k0, k1 };
            assert_eq!(h.hash(a, b), siphash_words(1, 3, k0, k1, &[a, b]));
        }
        // Both words count, in order; fresh hashers have different keys.
        let h = WideKeyHash::new();
        assert_ne!(h.hash(1, 2), h.hash(2, 1));
        assert_ne!(h.hash(1, 2), WideKeyHash::new().hash(1, 2));
    }

    #[test]
    fn folded_key_hash_spreads_and_depends_on_everything() {
        let h = FoldedKeyHash::new();
        // Both words count, in order; fresh hashers have different keys.
        assert_ne!(h.hash(1, 2), h.hash(2, 1));
        assert_ne!(h.hash(1, 2), FoldedKeyHash::new().hash(1, 2));
        // Every single-bit change of a key changes the digest, and flips about half of its
        // bits on average (no bit of the key is lost or stays local).
        let mut flips = 0u32;
        for i in 0..128u32 {
            let (a, b) = (mix(u64::from(i)), mix(u64::from(i) + 500));
            let (a2, b2) = if i < 64 {
                (a ^ 1 << i, b)
            } else {
                (a, b ^ 1 << (i - 64))
            };
            let d = h.hash(a, b) ^ h.hash(a2, b2);
            assert_ne!(d, 0, "bit {i}");
            flips += d.count_ones();
        }
        let mean = f64::from(flips) / 128.0;
        assert!((24.0..40.0).contains(&mean), "mean bit flips {mean}");
        // No collision among 100k tuple-like keys (neighbouring ports and addresses).
        let mut seen = std::collections::HashSet::new();
        for i in 0..100_000u64 {
            assert!(seen.insert(h.hash(0x0a00_0010_1400_0000 + ((i % 16) << 32) + i, i / 16)));
        }
    }

    /// How `keys` fall into the `1 << bits` buckets `bucket` puts them in: (the chi-square
    /// statistic over its degrees of freedom, 1 on average for random keys; the most keys in
    /// one bucket).
    fn spread(bucket: impl Fn(u64) -> usize, keys: &[u64], bits: u32) -> (f64, usize) {
        let mut n = vec![0usize; 1 << bits];
        for &k in keys {
            n[bucket(k)] += 1;
        }
        let mean = keys.len() as f64 / n.len() as f64;
        let chi: f64 = n.iter().map(|&c| (c as f64 - mean).powi(2) / mean).sum();
        (chi / n.len() as f64, n.into_iter().max().unwrap_or(0))
    }

    /// MAC-shaped keys an attacker may send as a flood (sequential MACs, MACs that differ in
    /// one or two bytes, one MAC in many bridge domains) spread over the buckets as random
    /// keys do, for tables of 64 to 16k buckets, under each of several fresh keys.
    #[test]
    fn mac_keys_spread_over_buckets() {
        let mac = |m: u64, bd: u64| (m & 0xffff_ffff_ffff) | bd << 48;
        let base = 0x0200_5e10_2030u64;
        let mut sets: Vec<(String, Vec<u64>)> = vec![
            (
                "sequential".into(),
                (0..1 << 16).map(|i| mac(base + i, 1)).collect(),
            ),
            (
                "bridge domains".into(),
                (0..1 << 16).map(|i| mac(base, i)).collect(),
            ),
            (
                "stride 2^24".into(),
                (0..1 << 16).map(|i| mac(base + (i << 24), 1)).collect(),
            ),
        ];
        for byte in 0..6 {
            let one = (0..256).map(|i| mac(base ^ i << (8 * byte), 7)).collect();
            sets.push((format!("byte {byte}"), one));
        }
        for byte in 0..5 {
            let two = (0..1 << 16)
                .map(|i| mac(base ^ i << (8 * byte), 7))
                .collect();
            sets.push((format!("bytes {byte}-{}", byte + 1), two));
        }
        for _ in 0..8 {
            let arrays: Vec<Array> = [6, 8, 10, 12, 14]
                .map(|bits| Array::new(1 << bits, false).unwrap())
                .into();
            for (name, keys) in &sets {
                for a in &arrays {
                    let bits = a.mask.count_ones();
                    // Four keys a bucket on average. Random keys give a chi-square per degree
                    // of freedom of 1 ± sqrt(2 / buckets) (six of those allowed here) and
                    // fewer than 24 keys in any bucket (P < 1e-6 over all these runs).
                    let Some(keys) = keys.get(..4 << bits) else {
                        continue;
                    };
                    let (chi, most) = spread(|k| a.home(k), keys, bits);
                    let bound = 1.0 + 6.0 * (2.0 / f64::from(1u32 << bits)).sqrt();
                    assert!(chi <= bound, "{name}, 2^{bits} buckets: chi2/dof {chi:.3}");
                    assert!(most < 24, "{name}, 2^{bits} buckets: {most} in one bucket");
                }
            }
        }
        // Through the table: 100k sequential MACs sit near their home buckets (at most 4
        // away in most runs, 5 seen once in ~40: the figure depends on the fresh key, so the
        // bound leaves room), and the table grows only by doubling: a hash that clustered
        // them would fill the 16-bucket probe window and re-key, which the check below sees.
        let e = Epochs::new(1);
        let mut t = Bihash::new();
        for i in 0..100_000 {
            t.insert(&e, mac(base + i, 1), i).unwrap();
        }
        assert!(t.max_probe() <= 6, "max probe {}", t.max_probe());
        assert_eq!(
            1 << t.resizes(),
            t.buckets() / MIN_BUCKETS,
            "only doublings"
        );
    }

    #[test]
    fn thread_safety() {
        fn shared<T: Send + Sync>() {}
        fn movable<T: Send>() {}
        shared::<BihashTable>();
        movable::<Bihash>();
    }

    #[test]
    fn basics() {
        let e = Epochs::new(1);
        let mut h = Bihash::new();
        assert!(h.is_empty());
        assert_eq!(h.max_probe(), 0);
        assert_eq!(h.get(5), None);
        // Every u64 is a valid key and value (no sentinel).
        for k in [0, 1, u64::MAX, 0x0011_2233_4455_0001] {
            assert_eq!(h.insert(&e, k, k ^ 0xdead), Ok(None));
        }
        assert_eq!(h.insert(&e, 0, 0), Ok(Some(0xdead)));
        assert_eq!(h.get(0), Some(0));
        assert_eq!(h.table().lookup(u64::MAX), Some(u64::MAX ^ 0xdead));
        assert_eq!(h.len(), 4);
        assert_eq!(h.remove(&e, 1), Some(1 ^ 0xdead));
        assert_eq!(h.remove(&e, 1), None);
        assert_eq!(h.get(1), None);
        let mut all: Vec<_> = h.iter().collect();
        all.sort_unstable();
        assert_eq!(
            all,
            vec![
                (0, 0),
                (0x0011_2233_4455_0001, 0x0011_2233_4455_0001 ^ 0xdead),
                (u64::MAX, u64::MAX ^ 0xdead)
            ]
        );
        assert_eq!(h.buckets(), MIN_BUCKETS);
        assert_eq!(h.capacity(), MIN_BUCKETS * SLOTS * 3 / 4);
        assert_eq!(h.memory_bytes(), MIN_BUCKETS * 128);
        assert_eq!(h.max_probe(), 1);
        h.clear(&e);
        assert!(h.is_empty());
        assert_eq!(h.get(0), None);
        assert_eq!(h.table().lookup(0), None);
        assert!(format!("{h:?}").contains("len: 0"));
    }

    #[test]
    fn entry_limit() {
        let e = Epochs::new(1);
        let mut h = Bihash::with_limit(10, 3);
        for k in 0..3 {
            h.insert(&e, k, k).unwrap();
        }
        assert_eq!(h.insert(&e, 3, 3), Err(BihashError::EntryLimit(3)));
        assert_eq!(
            h.insert(&e, 2, 9),
            Ok(Some(2)),
            "replacing is still allowed"
        );
        assert_eq!(h.remove(&e, 0), Some(0));
        assert_eq!(h.insert(&e, 3, 3), Ok(None));
        assert_eq!(h.len(), 3);
        assert_eq!(
            BihashError::EntryLimit(3).to_string(),
            "hash table is full (3 entries)"
        );
    }

    #[test]
    fn with_capacity_does_not_grow() {
        let e = Epochs::new(1);
        let mut h = Bihash::with_capacity(10_000);
        assert!(h.capacity() >= 10_000);
        for i in 0..10_000 {
            h.insert(&e, mix(i), i).unwrap();
        }
        assert_eq!(h.resizes(), 0);
    }

    #[test]
    fn insert_unless_keeps_or_replaces_across_resizes() {
        let e = Epochs::new(1);
        let mut h = Bihash::new();
        // Odd values are "static": never replaced.
        for i in 0..50_000u64 {
            assert_eq!(
                h.insert_unless(&e, mix(i), i << 1 | (i & 1), |_| true),
                Ok(None)
            );
        }
        assert!(h.resizes() >= 8);
        for i in 0..50_000u64 {
            let old = i << 1 | (i & 1);
            let r = h.insert_unless(&e, mix(i), 7 << 40 | i << 1, |v| v & 1 != 0);
            assert_eq!(r, Ok(Some(old)));
        }
        // Each key once more, a new key inserted after each (which grows the array between
        // updates: an update after a rebuild hashes into the new array).
        let before = h.resizes();
        for j in 0..50_000u64 {
            let want = if j & 1 != 0 {
                j << 1 | 1
            } else {
                7 << 40 | j << 1
            };
            assert_eq!(
                h.insert_unless(&e, mix(j), 9, |v| v & 1 != 0),
                Ok(Some(want))
            );
            let n = j + 50_000;
            assert_eq!(h.insert_unless(&e, mix(n), 9, |_| true), Ok(None));
        }
        assert!(h.resizes() > before, "the array grew during the updates");
        assert_eq!(h.len(), 100_000);
        // SAFETY: no other thread; the table is not written while `s` is used.
        let s = unsafe { h.table().snapshot() };
        let mut overflowed = 0;
        for i in 0..100_000u64 {
            let k = mix(i);
            let want = if i < 50_000 && i & 1 != 0 {
                i << 1 | 1
            } else {
                9
            };
            assert_eq!(s.get(k, s.home_only(k)), Some(want));
            assert_eq!(s.get(!k, s.home_only(!k)), None);
            let b = s.home_only(k).0 as usize & s.a.mask;
            overflowed += (overflow(s.a.buckets[b].meta.load(Ordering::Relaxed)) != 0) as u32;
        }
        // Some lookups went past their home bucket (`get_home`'s slow path).
        assert!(overflowed > 0);
        // get_many finds the same, past overflowed homes too.
        let keys: Vec<u64> = (0..100_000u64).flat_map(|i| [mix(i), !mix(i)]).collect();
        let homes: Vec<Home> = keys.iter().map(|&k| s.home_only(k)).collect();
        let want: Vec<Option<u64>> = keys
            .iter()
            .zip(&homes)
            .map(|(&k, &h)| s.get(k, h))
            .collect();
        let mut out = vec![None; keys.len()];
        s.get_many(&keys, &homes, &mut out);
        assert!(out == want, "get_many");
    }

    #[test]
    fn grows_across_several_resizes() {
        let e = Epochs::new(1);
        let mut h = Bihash::new();
        let mut last = h.buckets();
        let mut growths = 0;
        for i in 0..100_000u64 {
            assert_eq!(h.insert(&e, mix(i), !i), Ok(None));
            if h.buckets() != last {
                assert_eq!(h.buckets(), last * 2);
                last = h.buckets();
                growths += 1;
                // Everything inserted so far survived the rebuild.
                for j in (0..=i).step_by(97) {
                    assert_eq!(h.get(mix(j)), Some(!j));
                }
            }
            assert!(h.len() <= h.capacity());
        }
        assert!(growths >= 8, "only {growths} growths");
        assert!(h.resizes() >= growths);
        assert!(h.max_probe() >= 1 && h.max_probe() <= MAX_PROBE);
        for i in 0..100_000u64 {
            assert_eq!(h.table().lookup(mix(i)), Some(!i));
        }
        assert_eq!(h.len(), 100_000);
    }

    #[test]
    fn prehashed_digests_grow_remove_and_clear() {
        let e = Epochs::new(1);
        let w = WideKeyHash::new();
        let mut h = Bihash::with_limit_prehashed(0, usize::MAX);
        for i in 0..50_000u64 {
            assert_eq!(h.insert(&e, w.hash(i, !i), i), Ok(None));
        }
        assert!(h.resizes() >= 6, "grew through rebuilds");
        for i in 0..50_000u64 {
            assert_eq!(h.table().lookup(w.hash(i, !i)), Some(i));
        }
        for i in (0..50_000u64).step_by(2) {
            assert_eq!(h.remove(&e, w.hash(i, !i)), Some(i));
        }
        assert_eq!(h.len(), 25_000);
        assert_eq!(h.get(w.hash(1, !1)), Some(1));
        assert_eq!(h.get(w.hash(2, !2)), None);
        assert!(h.max_probe() <= MAX_PROBE);
        // Snapshot::get_many on a pre-hashed table: the kept digests found with their
        // values, the removed and never inserted ones missed (a wrong home would miss them
        // all), far past the look-ahead.
        {
            // SAFETY: no other thread; the table is not written while `s` is used.
            let s = unsafe { h.table().snapshot() };
            let keys: Vec<u64> = (0..50_000u64)
                .flat_map(|i| [w.hash(i, !i), w.hash(i, i ^ 0x5a5a)])
                .collect();
            let homes: Vec<Home> = keys.iter().map(|&k| s.home_only(k)).collect();
            let mut out = vec![Some(7); keys.len()];
            s.get_many(&keys, &homes, &mut out);
            for (j, (&k, &v)) in keys.iter().zip(&out).enumerate() {
                let i = j as u64 / 2;
                let want = (j % 2 == 0 && i % 2 == 1).then_some(i);
                assert_eq!(v, want, "key {j}");
                assert_eq!(v, s.get(k, s.home_only(k)), "key {j}");
            }
        }
        h.clear(&e);
        assert!(h.is_empty());
        assert_eq!(
            h.insert(&e, w.hash(7, 7), 7),
            Ok(None),
            "still pre-hashed after clear"
        );
        assert!(h.cur.prehashed);
    }

    #[test]
    fn one_million_entries() {
        let e = Epochs::new(1);
        let mut h = Bihash::new();
        let n = 1_000_000u64;
        // Keys shaped like the L2 FIB's: random MACs in a handful of bridge domains.
        let key = |i: u64| (mix(i) & 0xffff_ffff_ffff_0000) | (i % 5);
        let mut keys: Vec<u64> = (0..n).map(key).collect();
        keys.sort_unstable();
        keys.dedup();
        for (i, &k) in keys.iter().enumerate() {
            assert_eq!(h.insert(&e, k, i as u64), Ok(None));
        }
        assert_eq!(h.len(), keys.len());
        let t = Arc::clone(h.table());
        for (i, &k) in keys.iter().enumerate() {
            assert_eq!(t.lookup(k), Some(i as u64));
        }
        for (c, chunk) in keys.chunks_exact(4).enumerate() {
            let r = t.lookup_x4([chunk[0], chunk[1], chunk[2], chunk[3]]);
            for (j, v) in r.into_iter().enumerate() {
                assert_eq!(v, Some((c * 4 + j) as u64));
            }
        }
        for (i, &k) in keys.iter().enumerate().step_by(2) {
            assert_eq!(h.remove(&e, k), Some(i as u64));
        }
        for (i, &k) in keys.iter().enumerate() {
            let want = (i % 2 == 1).then_some(i as u64);
            assert_eq!(t.lookup(k), want);
        }
        assert_eq!(h.len(), keys.len() / 2);
        assert!(h.max_probe() <= MAX_PROBE);
        eprintln!(
            "1M: {} buckets, {} bytes/entry at full size, max probe {}, {} resizes",
            h.buckets(),
            h.memory_bytes() as f64 / keys.len() as f64,
            h.max_probe(),
            h.resizes()
        );
    }

    #[test]
    fn old_array_freed_only_after_grace_period() {
        let e = Epochs::new(3);
        let mut h = Bihash::new();
        let old = Arc::downgrade(&h.cur);
        let mut i = 0;
        while h.resizes() == 0 {
            h.insert(&e, mix(i), i).unwrap();
            i += 1;
        }
        assert_eq!(h.retired_pending(), 1);
        // A reader still on the old array finds a frozen, consistent copy.
        let o = old.upgrade().expect("old array alive");
        assert_eq!(o.get(mix(0)), Some(0));
        drop(o);
        assert_eq!(h.reclaim(&e), 0, "no worker moved");
        assert!(old.upgrade().is_some());
        e.quiesce(1);
        h.insert(&e, u64::MAX, 1).unwrap();
        assert_eq!(h.retired_pending(), 1, "worker 2 has not moved");
        assert!(old.upgrade().is_some());
        e.quiesce(2);
        assert_eq!(h.reclaim(&e), 1);
        assert_eq!(h.retired_pending(), 0);
        assert!(old.upgrade().is_none(), "freed once every worker passed");

        // An offline worker does not hold reclamation back; a parked one with an old
        // snapshot does until it moves.
        let cur = Arc::downgrade(&h.cur);
        e.offline(2);
        h.clear(&e);
        assert!(h.remove(&e, 0).is_none());
        assert!(cur.upgrade().is_some(), "worker 1 has not moved");
        e.quiesce(1);
        assert_eq!(h.reclaim(&e), 1);
        assert!(cur.upgrade().is_none());
    }

    #[test]
    fn writer_dropped_while_readers_hold_the_table() {
        let e = Epochs::new(2);
        let mut h = Bihash::new();
        for i in 0..1000 {
            h.insert(&e, mix(i), i).unwrap();
        }
        assert!(h.retired_pending() > 0);
        let t = Arc::clone(h.table());
        let old = Arc::downgrade(&h.cur);
        drop(h);
        assert!(old.upgrade().is_some(), "published array kept by the table");
        for i in 0..1000 {
            assert_eq!(t.lookup(mix(i)), Some(i));
        }
        assert!(!t.graveyard.lock().unwrap().is_empty());
        drop(t);
        assert!(old.upgrade().is_none());
    }

    #[test]
    fn probe_window_overflow_rekeys_the_table() {
        // Keys aimed at one home bucket (possible only with the table's secret key) fill the
        // probe window; the table must rebuild with a new key and keep every entry.
        let e = Epochs::new(1);
        // Big enough that the window fills before the load reaches the growth point.
        let mut h = Bihash::with_capacity(300);
        assert!(h.buckets() > MAX_PROBE && h.capacity() > SLOTS * MAX_PROBE);
        let key = h.cur.key;
        let aimed: Vec<u64> = (0..)
            .map(mix)
            .filter(|&k| h.cur.home(k) == 3)
            .take(SLOTS * MAX_PROBE + 1)
            .collect();
        for (i, &k) in aimed.iter().enumerate() {
            h.insert(&e, k, i as u64).unwrap();
            if i < SLOTS * MAX_PROBE {
                assert_eq!(h.resizes(), 0);
                assert_eq!(h.max_probe(), i / SLOTS + 1);
            }
        }
        assert!(h.resizes() >= 1);
        assert_ne!(h.cur.key.k, key.k, "re-keyed");
        assert!(h.max_probe() < MAX_PROBE);
        for (i, &k) in aimed.iter().enumerate() {
            assert_eq!(h.get(k), Some(i as u64));
        }
        // Removing from the middle of the chain keeps the rest reachable.
        let mut h = Bihash::new();
        let mask = h.cur.mask;
        let chain: Vec<u64> = (0..)
            .map(mix)
            .filter(|&k| h.cur.home(k) == mask)
            .take(SLOTS * 3)
            .collect();
        for &k in &chain {
            h.insert(&e, k, k).unwrap();
        }
        assert_eq!(h.max_probe(), 3, "wraps around the end of the array");
        for &k in &chain[..SLOTS] {
            assert_eq!(h.remove(&e, k), Some(k));
        }
        for &k in &chain[SLOTS..] {
            assert_eq!(h.get(k), Some(k));
        }
        // The home bucket's overflow count still routes lookups past it.
        assert_eq!(
            overflow(h.cur.buckets[mask].meta.load(Ordering::Relaxed)),
            14
        );
        for &k in &chain[SLOTS..] {
            assert_eq!(h.remove(&e, k), Some(k));
        }
        assert!(h
            .cur
            .buckets
            .iter()
            .all(|b| b.meta.load(Ordering::Relaxed) & 0xff_ffff == 0));
    }

    /// A snapshot held across inserts that grow the table, re-key it at the same size and
    /// replace or remove values keeps reading the array it was taken from (frozen once
    /// replaced): its homes still find the old values. Reader thread 1 never quiesces, so
    /// no replaced array is freed meanwhile.
    #[test]
    fn snapshot_held_across_growth_and_rekey_reads_the_old_array() {
        let e = Epochs::new(2);
        // Growth.
        let mut h = Bihash::new();
        for i in 0..100u64 {
            h.insert(&e, mix(i), i).unwrap();
        }
        let t = Arc::clone(h.table());
        // SAFETY: thread 1 (the reader of this test) does not quiesce before `s` and its
        // homes are last used.
        let s = unsafe { t.snapshot() };
        let homes: Vec<Home> = (0..100u64).map(|i| s.home(mix(i))).collect();
        let (buckets, resizes) = (h.buckets(), h.resizes());
        for i in 100..10_000u64 {
            h.insert(&e, mix(i), i).unwrap();
        }
        for i in 0..50u64 {
            assert_eq!(h.insert(&e, mix(i), !i), Ok(Some(i)));
            assert_eq!(h.remove(&e, mix(i + 50)), Some(i + 50));
        }
        assert!(h.buckets() > buckets && h.resizes() > resizes, "grew");
        assert!(h.retired_pending() > 0, "nothing reclaimed");
        for (i, &hm) in (0..100u64).zip(&homes) {
            assert_eq!(s.get(mix(i), hm), Some(i), "old value of key {i}");
            assert_eq!(t.lookup(mix(i)), (i < 50).then_some(!i), "new table");
        }
        assert_eq!(s.get(mix(5000), s.home(mix(5000))), None, "inserted after");
        e.quiesce(1);
        assert!(h.reclaim(&e) > 0);
        assert_eq!(h.retired_pending(), 0, "freed once the reader moved");

        // Re-key at the same size: keys aimed at one bucket fill the probe window.
        // (Few entries: at low load a full window re-keys instead of doubling.)
        let mut h = Bihash::with_capacity(300);
        for i in 0..20u64 {
            h.insert(&e, mix(i), i).unwrap();
        }
        let key = h.cur.key;
        let t = Arc::clone(h.table());
        // SAFETY: as above, thread 1 does not quiesce while `s` is in use.
        let s = unsafe { t.snapshot() };
        let homes: Vec<Home> = (0..20u64).map(|i| s.home_only(mix(i))).collect();
        let buckets = h.buckets();
        for k in (1000..)
            .map(mix)
            .filter(|&k| s.home_only(k) == Home(3))
            .take(SLOTS * MAX_PROBE + 1)
        {
            h.insert(&e, k, 0).unwrap();
        }
        for i in 0..20u64 {
            h.insert(&e, mix(i), !i).unwrap();
        }
        assert_eq!(h.buckets(), buckets, "same size");
        assert_ne!(h.cur.key.k, key.k, "re-keyed");
        for (i, &hm) in (0..20u64).zip(&homes) {
            s.prefetch(hm);
            assert_eq!(s.get(mix(i), hm), Some(i), "old value of key {i}");
            assert_eq!(t.lookup(mix(i)), Some(!i));
        }
    }

    /// [`Snapshot::get`] with a home from another snapshot (another array size and hash
    /// key), of another key, or out of range finds the key's own value or nothing, never
    /// another key's value; [`Home::default`] is a valid home (bucket 0).
    #[test]
    fn snapshot_get_with_a_foreign_home_never_finds_another_key() {
        let e = Epochs::new(2);
        let mut h = Bihash::new();
        let n = 3000u64;
        for i in 0..200u64 {
            h.insert(&e, mix(i), i).unwrap();
        }
        let t = Arc::clone(h.table());
        // SAFETY: thread 1 does not quiesce while either snapshot is in use.
        let small = unsafe { t.snapshot() };
        for i in 200..n {
            h.insert(&e, mix(i), i).unwrap();
        }
        // SAFETY: as above.
        let big = unsafe { t.snapshot() };
        assert_ne!(small.a.mask, big.a.mask);
        let (mut own_hits, mut default_hits) = (0, 0);
        for i in 0..n + 100 {
            let k = mix(i);
            let homes = [
                small.home_only(k),
                big.home_only(k),
                big.home_only(mix(i + 1)),
                small.home_only(mix(i ^ 0x55)),
                Home(u32::MAX),
                Home(i as u32),
                Home::default(),
            ];
            for (s, all) in [(&small, 200), (&big, n)] {
                for hm in homes {
                    let got = s.get(k, hm);
                    assert!(
                        got.is_none() || got == Some(i),
                        "key {i}, home {hm:?}: {got:?}"
                    );
                    s.prefetch(hm);
                }
                // Its own home finds it (keys inserted into the small array after the
                // snapshot, before it was replaced, may be there or not).
                if i < all || i >= n {
                    assert_eq!(s.get(k, s.home(k)), (i < all).then_some(i));
                }
                if s.home_only(k) == Home::default() && (i < all || i >= n) {
                    assert_eq!(s.get(k, Home::default()), (i < all).then_some(i));
                    default_hits += 1;
                }
                own_hits += usize::from(s.get(k, homes[0]).is_some());
            }
        }
        // Whether a present key lives in bucket 0 depends on the random hash key (none does
        // in about 1 run in 500): an absent key homed there is looked up in every run.
        for s in [&small, &big] {
            let k = (n + 100..)
                .map(mix)
                .find(|&k| s.home_only(k) == Home::default())
                .expect("some key is homed in bucket 0");
            assert_eq!(s.get(k, Home::default()), None);
            default_hits += 1;
        }
        assert!(default_hits >= 2);
        assert!(own_hits > 0);
        // Home::default() on an empty table.
        let empty = Bihash::new();
        // SAFETY: no quiescent point in this test.
        let s = unsafe { empty.table().snapshot() };
        s.prefetch(Home::default());
        assert_eq!(s.get(0, Home::default()), None);
        assert_eq!(s.get(mix(1), Home::default()), None);
    }

    #[test]
    fn lookup_x4_and_lookup_many_agree_with_lookup() {
        let e = Epochs::new(1);
        let mut h = Bihash::new();
        for i in 0..5000u64 {
            h.insert(&e, mix(i), i * 3).unwrap();
        }
        for i in (0..5000u64).step_by(3) {
            h.remove(&e, mix(i));
        }
        let t = h.table();
        for i in 0..2000u64 {
            // Hits, misses (removed and never inserted) mixed in one vector.
            let keys = [mix(i), mix(i + 5000), mix(4999 - i), mix(i * 2)];
            assert_eq!(t.lookup_x4(keys), keys.map(|k| t.lookup(k)));
        }
        // lookup_many: hits and misses mixed, lengths around and across the batch size, and an output
        // shorter than the keys (only that many are looked up).
        let keys: Vec<u64> = (0..300u64).map(|i| mix(i * 37 % 9000)).collect();
        for n in [0, 1, BATCH - 1, BATCH, BATCH + 1, 3 * BATCH + 5, 300] {
            let mut out = vec![Some(7); n];
            t.lookup_many(&keys, &mut out);
            let want: Vec<_> = keys[..n].iter().map(|&k| t.lookup(k)).collect();
            assert_eq!(out, want, "n = {n}");
        }
        let mut out = vec![Some(7); 10];
        t.lookup_many(&keys[..4], &mut out);
        assert_eq!(&out[4..], &[Some(7); 6], "only four keys looked up");
        // Snapshot::get_many: the same, with the homes given (past the look-ahead too), and
        // the shortest of keys, homes and output deciding how many.
        // SAFETY: this thread never quiesces while `s` or its homes are in use.
        let s = unsafe { t.snapshot() };
        let homes: Vec<Home> = keys.iter().map(|&k| s.home_only(k)).collect();
        for n in [0, 1, BATCH - 1, BATCH, BATCH + 1, 3 * BATCH + 5, 300] {
            let mut out = vec![Some(7); n];
            s.get_many(&keys, &homes, &mut out);
            let want: Vec<_> = keys[..n].iter().map(|&k| t.lookup(k)).collect();
            assert_eq!(out, want, "n = {n}");
            let mut out = vec![Some(7); 300];
            s.get_many(&keys, &homes[..n], &mut out);
            assert_eq!(out[..n], want, "n = {n} homes");
            assert!(out[n..].iter().all(|&v| v == Some(7)), "only {n} looked up");
        }
    }

    /// A smoke test: prefetching any key's bucket (present, absent, the range's edges) neither
    /// panics nor changes what lookups find. (Whether the hint fetches anything is not
    /// observable here; the NAT benchmark at 100k sessions shows it.)
    #[test]
    fn prefetch_of_any_key_is_harmless() {
        let e = Epochs::new(1);
        let mut h = Bihash::with_limit_prehashed(64, 64);
        for i in 0..40u64 {
            h.insert(&e, mix(i), i).unwrap();
        }
        let t = h.table();
        for k in [0, u64::MAX, mix(3), mix(1000)] {
            t.prefetch(k);
        }
        for i in 0..40u64 {
            assert_eq!(t.lookup(mix(i)), Some(i));
        }
        assert_eq!(t.lookup(mix(1000)), None);
    }

    /// The writer's lookup without the version check finds what the reader's finds, for
    /// keys in their home bucket, keys pushed past a full home (its probe out of line) and
    /// absent keys, before and after removes.
    #[test]
    fn unshared_lookup_matches_the_readers() {
        let e = Epochs::new(1);
        let mut h = Bihash::with_limit_prehashed(3000, 3000);
        for i in 0..3000u64 {
            h.insert(&e, mix(i), i).unwrap();
        }
        assert!(
            h.max_probe() > 1,
            "no key left its home: the probe path is not tested"
        );
        for i in (0..3000u64).step_by(3) {
            h.remove(&e, mix(i));
        }
        for i in 0..4000u64 {
            let want = (i < 3000 && i % 3 != 0).then_some(i);
            assert_eq!(h.get_unshared(mix(i)), want, "key {i}");
            assert_eq!(h.table().lookup(mix(i)), want, "key {i}");
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, u64),
        /// `insert_unless` keeping an odd old value.
        InsertUnless(u64, u64),
        Remove(u64),
        Lookup(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        // A small key space (so keys repeat: replacements, removes of present keys), spread
        // over the whole u64 range including its edges.
        let key = prop_oneof![
            8 => (0u64..200).prop_map(mix),
            1 => Just(0u64),
            1 => Just(u64::MAX),
        ];
        prop_oneof![
            5 => (key.clone(), any::<u64>()).prop_map(|(k, v)| Op::Insert(k, v)),
            3 => (key.clone(), any::<u64>()).prop_map(|(k, v)| Op::InsertUnless(k, v)),
            3 => key.clone().prop_map(Op::Remove),
            2 => key.prop_map(Op::Lookup),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        #[test]
        fn matches_hashmap_model(ops in proptest::collection::vec(op(), 1..600)) {
            let e = Epochs::new(1);
            let mut h = Bihash::new();
            let mut model: HashMap<u64, u64> = HashMap::new();
            for op in ops {
                match op {
                    Op::Insert(k, v) => prop_assert_eq!(h.insert(&e, k, v), Ok(model.insert(k, v))),
                    Op::InsertUnless(k, v) => {
                        let old = model.get(&k).copied();
                        if old.is_none_or(|o| o & 1 == 0) {
                            model.insert(k, v);
                        }
                        prop_assert_eq!(h.insert_unless(&e, k, v, |o| o & 1 != 0), Ok(old));
                    }
                    Op::Remove(k) => prop_assert_eq!(h.remove(&e, k), model.remove(&k)),
                    Op::Lookup(k) => {
                        prop_assert_eq!(h.get(k), model.get(&k).copied());
                        prop_assert_eq!(h.get_unshared(k), model.get(&k).copied());
                        prop_assert_eq!(h.table().lookup(k), model.get(&k).copied());
                    }
                }
                prop_assert_eq!(h.len(), model.len());
            }
            let mut got: Vec<_> = h.iter().collect();
            got.sort_unstable();
            let mut want: Vec<_> = model.iter().map(|(&k, &v)| (k, v)).collect();
            want.sort_unstable();
            prop_assert_eq!(got, want);
            let t = h.table();
            for k in (0u64..200).map(mix).collect::<Vec<_>>().chunks_exact(4) {
                let keys = [k[0], k[1], k[2], k[3]];
                prop_assert_eq!(t.lookup_x4(keys), keys.map(|k| model.get(&k).copied()));
            }
            let keys: Vec<u64> = (0u64..200).map(mix).collect();
            let mut out = vec![None; keys.len()];
            t.lookup_many(&keys, &mut out);
            let want: Vec<_> = keys.iter().map(|k| model.get(k).copied()).collect();
            prop_assert_eq!(out, want);
        }
    }

    #[test]
    fn reader_never_sees_torn_pairs_under_hot_slot_reuse() {
        // A small table where every remove is followed by an insert of another key that
        // lands in the slot just freed: the reader hammers the same keys meanwhile.
        let e = Arc::new(Epochs::new(2));
        let mut h = Bihash::with_capacity(MIN_BUCKETS * SLOTS / 2);
        let vc = |k: u64| k.rotate_left(7) ^ 0x1234_5678;
        let keys: Vec<u64> = (0..96).map(|i| mix(i + 5_000_000)).collect();
        for &k in &keys[..48] {
            h.insert(&e, k, vc(k)).unwrap();
        }
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (t, e, stop, keys) = (
                Arc::clone(h.table()),
                Arc::clone(&e),
                Arc::clone(&stop),
                keys.clone(),
            );
            std::thread::spawn(move || {
                let (mut hits, mut snap_hits) = (0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    {
                        // One snapshot a pass, dropped before the quiescent point: its
                        // `get` reads home buckets the writer rewrites meanwhile (so
                        // `get_home`'s "meta changed" way to `get_cold` runs too).
                        // SAFETY: no quiescent point while `s` is in use.
                        let s = unsafe { t.snapshot() };
                        for c in keys.chunks_exact(4) {
                            let ks = [c[0], c[1], c[2], c[3]];
                            let homes = ks.map(|k| s.home(k));
                            let r = t.lookup_x4(ks);
                            let mut many = [None; 4];
                            t.lookup_many(&ks, &mut many);
                            for (((&k, x4), m), h) in ks.iter().zip(r).zip(many).zip(homes) {
                                assert!(m.is_none() || m == Some(vc(k)), "many {k:#x}: {m:x?}");
                                let v = t.lookup(k);
                                assert!(v.is_none() || v == Some(vc(k)), "{k:#x}: {v:x?}");
                                assert!(x4.is_none() || x4 == Some(vc(k)), "x4 {k:#x}: {x4:x?}");
                                let g = s.get(k, h);
                                assert!(g.is_none() || g == Some(vc(k)), "get {k:#x}: {g:x?}");
                                hits += v.is_some() as u64;
                                snap_hits += g.is_some() as u64;
                            }
                        }
                    }
                    e.quiesce(1);
                }
                e.offline(1);
                (hits, snap_hits)
            })
        };
        let start = std::time::Instant::now();
        let mut i = 0usize;
        while start.elapsed() < std::time::Duration::from_millis(200) {
            for _ in 0..1000 {
                let (out, inn) = (keys[i % 96], keys[(i + 48) % 96]);
                assert_eq!(h.remove(&e, out), Some(vc(out)));
                assert_eq!(h.insert(&e, inn, vc(inn)), Ok(None));
                i += 1;
            }
        }
        stop.store(true, Ordering::Relaxed);
        let (hits, snap_hits) = reader.join().expect("reader panicked");
        assert!(hits > 0 && snap_hits > 0);
        assert_eq!(h.resizes(), 0);
    }

    #[test]
    fn reader_never_sees_torn_or_wrong_values() {
        let e = Arc::new(Epochs::new(2));
        let mut h = Bihash::new();
        // Fixed keys (never removed) whose values flip between two key-specific values, and
        // churned keys whose only value is key-specific too: a reader that pairs a key with
        // another key's value, or misses a fixed key, fails.
        let fixed: Vec<u64> = (0..64).map(mix).collect();
        let va = |k: u64| k.rotate_left(17) ^ 0xaaaa;
        let vb = |k: u64| k.rotate_left(31) ^ 0x5555;
        let vc = |k: u64| k.rotate_left(7) ^ 0x1234_5678;
        const CHURN_BASE: u64 = 1_000;
        const CHURN_SPAN: u64 = 200_000;
        for &k in &fixed {
            h.insert(&e, k, va(k)).unwrap();
        }
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (t, e, stop, fixed) = (
                Arc::clone(h.table()),
                Arc::clone(&e),
                Arc::clone(&stop),
                fixed.clone(),
            );
            std::thread::spawn(move || {
                let (mut passes, mut churn_hits, mut j) = (0u64, 0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    {
                        // One snapshot a pass (held across the writer's rebuilds: it reads
                        // the old array then, which must still hold every fixed key),
                        // dropped before the quiescent point.
                        // SAFETY: no quiescent point while `s` is in use.
                        let s = unsafe { t.snapshot() };
                        for c in fixed.chunks_exact(4) {
                            let keys = [c[0], c[1], c[2], c[3]];
                            let r = t.lookup_x4(keys);
                            for (&k, x4) in keys.iter().zip(r) {
                                let v = t.lookup(k);
                                assert!(v == Some(va(k)) || v == Some(vb(k)), "{k:#x}: {v:x?}");
                                assert!(x4 == Some(va(k)) || x4 == Some(vb(k)), "x4 {k:#x}");
                                let g = s.get(k, s.home_only(k));
                                assert!(g == Some(va(k)) || g == Some(vb(k)), "get {k:#x}");
                            }
                        }
                        for _ in 0..64 {
                            let keys: [u64; 4] = std::array::from_fn(|i| {
                                mix(CHURN_BASE + (j * 4 + i as u64) * 7919 % CHURN_SPAN)
                            });
                            j += 1;
                            let r = t.lookup_x4(keys);
                            for (&k, x4) in keys.iter().zip(r) {
                                let v = t.lookup(k);
                                assert!(v.is_none() || v == Some(vc(k)), "{k:#x}: {v:x?}");
                                assert!(x4.is_none() || x4 == Some(vc(k)), "x4 {k:#x}: {x4:x?}");
                                let g = s.get(k, s.home_only(k));
                                assert!(g.is_none() || g == Some(vc(k)), "get {k:#x}: {g:x?}");
                                churn_hits += v.is_some() as u64;
                            }
                        }
                    }
                    e.quiesce(1);
                    passes += 1;
                }
                e.offline(1);
                (passes, churn_hits)
            })
        };
        // A sliding window of churned keys (every insert past the window removes the oldest,
        // so freed slots are reused at once by other keys), growing phase by phase so the
        // array is rebuilt repeatedly; the fixed values flip all along.
        let mut live = std::collections::VecDeque::new();
        let mut next = 0u64;
        for phase in 0..7 {
            let window = 500usize << phase;
            for _ in 0..CHURN_SPAN / 7 {
                let k = mix(CHURN_BASE + next);
                next += 1;
                assert_eq!(h.insert(&e, k, vc(k)), Ok(None));
                live.push_back(k);
                if live.len() > window {
                    let old = live.pop_front().unwrap();
                    assert_eq!(h.remove(&e, old), Some(vc(old)));
                }
                if next % 16 == 0 {
                    let k = fixed[(next / 16) as usize % fixed.len()];
                    let v = if (next / 16 / 64) % 2 == 0 {
                        vb(k)
                    } else {
                        va(k)
                    };
                    assert!(h.insert(&e, k, v).unwrap().is_some());
                }
            }
        }
        // Let the reader make progress on the final array too.
        std::thread::sleep(std::time::Duration::from_millis(20));
        stop.store(true, Ordering::Relaxed);
        let (passes, churn_hits) = reader.join().expect("reader panicked");
        assert!(passes > 0 && churn_hits > 0, "reader ran");
        assert!(h.resizes() >= 6, "resizes {}", h.resizes());
        assert_eq!(h.len(), fixed.len() + live.len());
        // The reader is offline: everything retired can go.
        h.reclaim(&e);
        assert_eq!(h.retired_pending(), 0);
    }
}
