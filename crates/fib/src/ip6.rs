//! IPv6 longest-prefix match: a multibit trie with a 2^24-entry first level indexed by the
//! top 24 bits (64 MiB of address space, backed by the OS only where written, THP-advised —
//! IPv4's DIR-24-8 first level) and 256-entry groups (8-bit strides) below it, leaf-pushed,
//! so a lookup is one load per level actually used: a /24 or shorter costs 1 load, a /32 2,
//! a /48 4, a /64 6, whatever the number of routes. Memory grows with the number of distinct
//! 8-bit-aligned parents (the real Internet table of 160k prefixes needs ~38k groups =
//! ~37 MiB), not with a hash per prefix length — VPP's per-length hash probes every length
//! present and slows down as the table grows.
//!
//! [`Ip6Table::lookup_many`] (what `ip6-lookup` calls for a frame) walks the vector level by
//! level without data-dependent branches while at least 1/8 of it still descends, so the
//! core overlaps the loads of many packets; addresses go in as the packet's bytes.
//!
//! The /128 routes are also in an exact-match host table (open addressing, one hash probe):
//! an address still descending after the /64 level tries it before the 8 levels left, so a
//! host route (an SRv6 local SID, an interface address) costs the levels down to /64 and a
//! probe instead of 14 levels; an address whose descent ends at /64 or earlier never probes
//! (a /128 keeps its path extended to the last level, so it has none), and neither does any
//! lookup while no /128 exists. The trie still holds every route: a probe that misses goes
//! on down and the answer is the longest match either way (property test against an
//! oracle). End.DX4 (SID a /128): `ip6-lookup` 346 → 248 instructions per packet.
//!
//! Same concurrency model as [`crate::ip4`]: lookups are plain acquire loads from any thread,
//! the main thread writes (`&mut self`) with atomic stores, a new group is filled before it
//! is published, and a group no longer needed is reused only after every worker passed a
//! quiescent point. The host table is an array of atomic slots: a new address is written
//! into a never-used slot before its value is published (release), a removed one leaves its
//! slot marked removed until the array is rebuilt (growth, or 3/4 of it used), a rebuilt
//! array is published with one pointer store and the old one freed after a grace period.
//!
//! Entry encoding (u32): top byte 0 = empty; 1..=129 = leaf, prefix length + 1, low 24 bits
//! the value; 0xff = extended, low 24 bits the group index.

use crate::groups::{entry_in, GroupAlloc, GroupStore};
use sluice_infra::epoch::{Epochs, Retired, ZeroedAtomicU32s};
use sluice_infra::hash::FastState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

const EXT: u32 = 0xff00_0000;
const VALUE_MASK: u32 = 0x00ff_ffff;
/// Largest value an entry can carry.
pub const MAX_VALUE: u32 = VALUE_MASK;
const ROOT_BITS: u32 = 24;
const ROOT_BYTES: usize = ROOT_BITS as usize / 8;

pub use crate::ip4::LpmError;

/// After how many address bytes a lookup still descending tries the host table: a /128 route
/// keeps its address's trie path extended down to the last level, so an address that reached
/// a leaf at /64 or earlier has no host route and never pays the probe.
const HOST_BYTES: usize = 8;
/// Value of a host slot never used (ends a probe).
const SLOT_EMPTY: u32 = u32::MAX;
/// Value of a host slot whose route was removed (a probe goes on past it).
const SLOT_REMOVED: u32 = u32::MAX - 1;

/// One slot of the host table: the address (two words) and the value, or [`SLOT_EMPTY`] /
/// [`SLOT_REMOVED`]. The writer fills a slot's address before it publishes the value
/// (release), and a slot keeps its address for the life of its array (a removed slot is
/// reused only by a rebuild), so an address never tears under a reader.
struct HostSlot {
    hi: AtomicU64,
    lo: AtomicU64,
    value: AtomicU32,
}

/// The exact-match table of the /128 routes, in front of the trie: open addressing with
/// linear probing over a power-of-two array, keyed by [`FastState`] (a seed per array), kept
/// at most 3/4 full counting removed slots; rebuilt (from the writer's map, into a new array
/// published by one pointer store) when an insert would pass that.
struct HostArray {
    hash: FastState,
    mask: usize,
    slots: Box<[HostSlot]>,
}

impl HostArray {
    fn new(cap: usize) -> Self {
        HostArray {
            hash: FastState::default(),
            mask: cap - 1,
            slots: (0..cap)
                .map(|_| HostSlot {
                    hi: AtomicU64::new(0),
                    lo: AtomicU64::new(0),
                    value: AtomicU32::new(SLOT_EMPTY),
                })
                .collect(),
        }
    }

    #[inline(always)]
    fn home(&self, addr: u128) -> usize {
        self.hash.hash_one(addr) as usize & self.mask
    }

    /// The value of the /128 route `addr`.
    #[inline(always)]
    fn get(&self, addr: u128) -> Option<u32> {
        let (hi, lo) = ((addr >> 64) as u64, addr as u64);
        let mut i = self.home(addr);
        for _ in 0..=self.mask {
            let s = &self.slots[i];
            let v = s.value.load(Ordering::Acquire);
            if v == SLOT_EMPTY {
                return None;
            }
            if v != SLOT_REMOVED
                && s.hi.load(Ordering::Relaxed) == hi
                && s.lo.load(Ordering::Relaxed) == lo
            {
                return Some(v);
            }
            i = (i + 1) & self.mask;
        }
        None
    }

    /// Writer: the live slot of `addr`, or else the first never-used slot of its probe
    /// sequence (`Err`).
    fn find(&self, addr: u128) -> Result<usize, Option<usize>> {
        let (hi, lo) = ((addr >> 64) as u64, addr as u64);
        let mut i = self.home(addr);
        for _ in 0..=self.mask {
            let s = &self.slots[i];
            let v = s.value.load(Ordering::Relaxed);
            if v == SLOT_EMPTY {
                return Err(Some(i));
            }
            if v != SLOT_REMOVED
                && s.hi.load(Ordering::Relaxed) == hi
                && s.lo.load(Ordering::Relaxed) == lo
            {
                return Ok(i);
            }
            i = (i + 1) & self.mask;
        }
        Err(None)
    }

    /// Writer: fills never-used slot `i` and publishes it.
    fn fill(&self, i: usize, addr: u128, value: u32) {
        let s = &self.slots[i];
        s.hi.store((addr >> 64) as u64, Ordering::Relaxed);
        s.lo.store(addr as u64, Ordering::Relaxed);
        s.value.store(value, Ordering::Release);
    }
}

#[inline(always)]
fn leaf(depth: u8, value: u32) -> u32 {
    ((depth as u32 + 1) << 24) | (value & VALUE_MASK)
}

#[inline(always)]
fn is_ext(e: u32) -> bool {
    e & EXT == EXT
}

/// Prefix length of a leaf entry (None for empty or extended entries).
#[inline(always)]
fn depth_of(e: u32) -> Option<u8> {
    let t = e >> 24;
    (1..=129).contains(&t).then(|| (t - 1) as u8)
}

/// Masks an address to a prefix length.
#[inline(always)]
pub fn mask(addr: u128, len: u8) -> u128 {
    if len == 0 {
        0
    } else if len >= 128 {
        addr
    } else {
        addr & (u128::MAX << (128 - len as u32))
    }
}

/// The read side of the table, shared by every thread (`Arc<Ip6Table>`): lookups only.
pub struct Ip6Table {
    root: ZeroedAtomicU32s,
    groups: GroupStore,
    /// The /128 routes' [`HostArray`] (null while there is none): `Box::into_raw`, replaced
    /// by the writer only, an old array freed after a grace period ([`Ip6Lpm`]'s `retired`)
    /// or with the table.
    hosts: AtomicPtr<HostArray>,
    /// Arrays still in their grace period when the writer was dropped: freed with the table.
    graveyard: Mutex<Vec<HostArray>>,
}

impl Drop for Ip6Table {
    fn drop(&mut self) {
        let p = *self.hosts.get_mut();
        if !p.is_null() {
            // SAFETY: a non-null `hosts` came from `Box::into_raw` and is owned by the table
            // (the writer retires an array only after swapping it out); `&mut self` means no
            // reader is left.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

const ROOT_SIZE: usize = 1 << ROOT_BITS;

/// First-level index of an address (its top `ROOT_BITS` bits).
#[inline(always)]
fn root_index(a: &[u8; 16]) -> usize {
    (u32::from_be_bytes([a[0], a[1], a[2], a[3]]) >> (32 - ROOT_BITS)) as usize
}

/// All ones for an extended entry, else zero.
#[inline(always)]
fn ext_mask(e: u32) -> u32 {
    0u32.wrapping_sub(is_ext(e) as u32)
}

impl Ip6Table {
    #[inline(always)]
    fn group(&self, g: u32) -> &[AtomicU32] {
        self.groups.group(g)
    }

    /// The value of a fully descended entry (a leaf, or empty: no extended entry is left
    /// after the last level).
    #[inline(always)]
    fn result(e: u32) -> Option<u32> {
        (e >> 24 != 0 && !is_ext(e)).then_some(e & VALUE_MASK)
    }

    #[inline(always)]
    fn root(&self) -> &[AtomicU32; ROOT_SIZE] {
        self.root
            .as_slice()
            .try_into()
            .expect("the first level has ROOT_SIZE entries")
    }

    /// The host table, if any /128 route exists.
    #[inline(always)]
    fn hosts(&self) -> Option<&HostArray> {
        let p = self.hosts.load(Ordering::Acquire);
        // SAFETY: a non-null pointer is a live `Box<HostArray>`: the writer frees an array it
        // swapped out only after every reader thread passed a quiescent point (the table's
        // reader contract, as for its groups), and the current one only with the table.
        (!p.is_null()).then(|| unsafe { &*p })
    }

    /// The live slots of the host array, counted (tests: it agrees with the writer's /128
    /// routes).
    #[cfg(test)]
    fn host_slots_live(&self) -> usize {
        self.hosts().map_or(0, |h| {
            h.slots
                .iter()
                .filter(|s| s.value.load(Ordering::Relaxed) < SLOT_REMOVED)
                .count()
        })
    }

    /// Longest-prefix match: the value of the longest prefix covering `addr`.
    #[inline(always)]
    pub fn lookup(&self, addr: u128) -> Option<u32> {
        let a = addr.to_be_bytes();
        let e = self.root()[root_index(&a)].load(Ordering::Acquire);
        Self::result(finish(
            self.groups.entries(),
            self.hosts(),
            e,
            &a,
            ROOT_BYTES,
        ))
    }

    /// Lookups for a whole vector of addresses in network byte order (as they sit in the
    /// packets). `out[i]` gets the value, or `u32::MAX` when no prefix covers `addrs[i]`.
    ///
    /// The vector goes through the first level, then level by level through the groups
    /// without a branch for as long as at least 1/8 of it still descends: an address that
    /// already reached a leaf reads entry 0 of group 0 (always in cache) and keeps its leaf.
    /// Nothing a packet's bytes decide is a branch there, so the core runs ahead and keeps the
    /// independent loads of many packets in flight. When /128 routes exist, the addresses
    /// still descending after the /64 level try the host table first (one hash probe instead
    /// of up to 8 more levels) and only its misses go on. The few addresses that need more
    /// levels finish with a loop (a branch each).
    #[inline]
    pub fn lookup_many(&self, addrs: &[[u8; 16]], out: &mut [u32]) {
        let root = self.root();
        let groups = self.groups.entries();
        let hosts = self.hosts();
        let n = addrs.len().min(out.len());
        let (addrs, out) = (&addrs[..n], &mut out[..n]);
        let mut m = 0;
        for (a, o) in addrs.iter().zip(out.iter_mut()) {
            let e = root[root_index(a)].load(Ordering::Acquire);
            *o = e;
            m += is_ext(e) as usize;
        }
        let stop = if hosts.is_some() { HOST_BYTES } else { 16 };
        let (mut k, mut m) = descend_many(groups, addrs, out, ROOT_BYTES, stop, m);
        let mut hosts = hosts;
        if let Some(h) = hosts.filter(|_| k == HOST_BYTES && m * 8 >= n && m > 0) {
            m = 0;
            for (a, o) in addrs.iter().zip(out.iter_mut()) {
                if is_ext(*o) {
                    match h.get(u128::from_be_bytes(*a)) {
                        Some(v) => *o = leaf(128, v),
                        None => m += 1,
                    }
                }
            }
            hosts = None; // probed: the rest only descends
            (k, m) = descend_many(groups, addrs, out, k, 16, m);
        }
        if m > 0 {
            for (a, o) in addrs.iter().zip(out.iter_mut()) {
                *o = Self::result(finish(groups, hosts, *o, a, k)).unwrap_or(u32::MAX);
            }
        } else {
            // Every address reached its leaf: one branchless pass (vectorised).
            for o in out.iter_mut() {
                *o = Self::result(*o).unwrap_or(u32::MAX);
            }
        }
    }
}

/// Descends the vector level by level from address byte `k` without a branch per address,
/// up to byte `stop` and while at least 1/8 of it (`m` of the addresses) still descends;
/// returns the byte reached and how many addresses still descend.
#[inline(always)]
fn descend_many(
    groups: &[AtomicU32],
    addrs: &[[u8; 16]],
    out: &mut [u32],
    mut k: usize,
    stop: usize,
    mut m: usize,
) -> (usize, usize) {
    let n = addrs.len();
    while k < stop && m * 8 >= n && m > 0 {
        m = 0;
        for (a, o) in addrs.iter().zip(out.iter_mut()) {
            let e = *o;
            let x = ext_mask(e);
            let i = (((e & VALUE_MASK) << 8) | a[k] as u32) & x;
            let e = (entry_in(groups, i >> 8, i as u8) & x) | (e & !x);
            *o = e;
            m += is_ext(e) as usize;
        }
        k += 1;
    }
    (k, m)
}

/// Finishes one address from entry `e` at address byte `k`: down to the /64 level, the host
/// table (if given and not passed yet), then the remaining levels.
#[inline(always)]
fn finish(groups: &[AtomicU32], hosts: Option<&HostArray>, e: u32, a: &[u8; 16], k: usize) -> u32 {
    match hosts {
        Some(h) if k <= HOST_BYTES => {
            let e = descend_range(groups, e, a, k, HOST_BYTES);
            if is_ext(e) {
                if let Some(v) = h.get(u128::from_be_bytes(*a)) {
                    return leaf(128, v);
                }
            }
            descend_range(groups, e, a, HOST_BYTES, 16)
        }
        _ => descend_range(groups, e, a, k, 16),
    }
}

/// Follows group pointers from `e`, through address bytes `from..to`, down to a leaf.
#[inline(always)]
fn descend_range(groups: &[AtomicU32], mut e: u32, a: &[u8; 16], from: usize, to: usize) -> u32 {
    for &b in a.get(from..to).unwrap_or(&[]) {
        if !is_ext(e) {
            break;
        }
        e = entry_in(groups, e & VALUE_MASK, b);
    }
    e
}

/// The IPv6 LPM: the shared [`Ip6Table`] plus the writer's bookkeeping (main thread only).
pub struct Ip6Lpm {
    table: std::sync::Arc<Ip6Table>,
    alloc: GroupAlloc,
    routes: Vec<HashMap<u128, u32, FastState>>,
    n_routes: usize,
    /// Slots of the current host array in use, removed ones included (a rebuild resets it).
    host_used: usize,
    /// Host arrays swapped out, freed after their grace period.
    retired: Retired<Box<HostArray>>,
}

impl Drop for Ip6Lpm {
    fn drop(&mut self) {
        // Readers may still hold the table: the arrays in their grace period go with it.
        let left = self.retired.drain_all();
        self.table
            .graveyard
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(left.into_iter().map(|h| *h));
    }
}

impl Default for Ip6Lpm {
    fn default() -> Self {
        Self::new()
    }
}

/// Where an entry lives: the root (index) or a group (group, index).
#[derive(Copy, Clone)]
enum Slot {
    Root(usize),
    Group(u32, usize),
}

impl Ip6Lpm {
    /// An empty table.
    pub fn new() -> Self {
        Ip6Lpm {
            table: std::sync::Arc::new(Ip6Table {
                root: ZeroedAtomicU32s::new(1 << ROOT_BITS),
                groups: GroupStore::new(),
                hosts: AtomicPtr::new(std::ptr::null_mut()),
                graveyard: Mutex::new(Vec::new()),
            }),
            alloc: GroupAlloc::new(),
            routes: (0..=128).map(|_| HashMap::default()).collect(),
            n_routes: 0,
            host_used: 0,
            retired: Retired::new(),
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

    /// Groups in use.
    pub fn groups_in_use(&self) -> usize {
        self.alloc.in_use()
    }

    /// Bytes of groups in use and of the host table (the first level,
    /// [`Self::first_level_bytes`], not counted).
    pub fn memory_bytes(&self) -> usize {
        self.groups_in_use() * 256 * 4 + self.host_table_bytes()
    }

    /// Slots of the host table (zero without one: no /128 route).
    pub fn host_slots(&self) -> usize {
        self.table.hosts().map_or(0, |h| h.slots.len())
    }

    /// Bytes of the host table's current array (arrays in their grace period not counted).
    pub fn host_table_bytes(&self) -> usize {
        self.table.hosts().map_or(0, |h| {
            std::mem::size_of::<HostArray>() + std::mem::size_of_val(&*h.slots)
        })
    }

    /// Size of the first level: address space reserved up front, backed by the OS only
    /// where entries were written (a default route writes all of it).
    pub fn first_level_bytes(&self) -> usize {
        ROOT_SIZE * 4
    }

    /// The shared read side (give a clone to every thread).
    pub fn table(&self) -> &std::sync::Arc<Ip6Table> {
        &self.table
    }

    /// Longest-prefix match (see [`Ip6Table::lookup`]).
    pub fn lookup(&self, addr: u128) -> Option<u32> {
        self.table.lookup(addr)
    }

    /// The value stored for exactly this prefix.
    pub fn get(&self, prefix: u128, len: u8) -> Option<u32> {
        self.routes
            .get(len as usize)?
            .get(&mask(prefix, len))
            .copied()
    }

    /// All prefixes (prefix, len, value), unordered.
    pub fn iter(&self) -> impl Iterator<Item = (u128, u8, u32)> + '_ {
        self.routes
            .iter()
            .enumerate()
            .flat_map(|(l, m)| m.iter().map(move |(&p, &v)| (p, l as u8, v)))
    }

    fn entry(&self, s: Slot) -> &AtomicU32 {
        match s {
            Slot::Root(i) => &self.table.root.as_slice()[i],
            Slot::Group(g, i) => &self.table.group(g)[i],
        }
    }

    fn alloc_group(&mut self, epochs: &Epochs, fill: u32) -> Result<u32, LpmError> {
        self.alloc.alloc(&self.table.groups, epochs, fill)
    }

    /// Adds or replaces a prefix; counts a FIB change ([`crate::changes`]).
    pub fn insert(
        &mut self,
        epochs: &Epochs,
        prefix: u128,
        len: u8,
        value: u32,
    ) -> Result<(), LpmError> {
        self.insert_prefix(epochs, prefix, len, value)?;
        crate::changed();
        Ok(())
    }

    fn insert_prefix(
        &mut self,
        epochs: &Epochs,
        prefix: u128,
        len: u8,
        value: u32,
    ) -> Result<(), LpmError> {
        if len > 128 {
            return Err(LpmError::BadLength(len));
        }
        if value > MAX_VALUE {
            return Err(LpmError::BadValue(value));
        }
        self.reclaim(epochs);
        let p = mask(prefix, len);
        // Walk down to the level holding the prefix, extending entries on the way (allocate
        // first: a failure leaves the table as it was, apart from unused groups).
        let mut slot = Slot::Root((p >> (128 - ROOT_BITS)) as usize);
        let mut end = ROOT_BITS; // bits consumed once this slot's level is resolved
        while (len as u32) > end {
            let e = self.entry(slot).load(Ordering::Relaxed);
            let g = if is_ext(e) {
                e & VALUE_MASK
            } else {
                let g = self.alloc_group(epochs, e)?;
                // Publish after filling: readers see the old leaf or the full group.
                self.entry(slot).store(EXT | g, Ordering::Release);
                g
            };
            let idx = ((p >> (128 - end - 8)) & 0xff) as usize;
            slot = Slot::Group(g, idx);
            end += 8;
        }
        if self.routes[len as usize].insert(p, value).is_none() {
            self.n_routes += 1;
        }
        // The prefix covers 2^(end - len) slots of this level.
        let n = 1usize << (end - len as u32);
        self.paint_range(slot, n, leaf(len, value), &|d| d <= len);
        if len == 128 {
            self.host_insert(epochs, p, value);
        }
        Ok(())
    }

    /// Adds or replaces `addr` in the host table (already in `routes[128]`).
    fn host_insert(&mut self, epochs: &Epochs, addr: u128, value: u32) {
        if let Some(h) = self.table.hosts() {
            match h.find(addr) {
                Ok(i) => return h.slots[i].value.store(value, Ordering::Release),
                Err(Some(i)) if (self.host_used + 1) * 4 <= h.slots.len() * 3 => {
                    self.host_used += 1;
                    return h.fill(i, addr, value);
                }
                Err(_) => {}
            }
        }
        self.host_rebuild(epochs);
    }

    /// Removes `addr` from the host table (already gone from `routes[128]`).
    fn host_remove(&mut self, epochs: &Epochs, addr: u128) {
        if self.routes[128].is_empty() {
            return self.host_rebuild(epochs);
        }
        if let Some(h) = self.table.hosts() {
            if let Ok(i) = h.find(addr) {
                h.slots[i].value.store(SLOT_REMOVED, Ordering::Release);
            }
        }
        // Removals alone never reach the insert's 3/4 rebuild, but every miss walks past
        // removed slots: rebuild (smaller) once live routes are under a quarter of the used
        // slots.
        if self.routes[128].len() * 4 < self.host_used {
            self.host_rebuild(epochs);
        }
    }

    /// Publishes a new host array built from `routes[128]` (none when it is empty), at most
    /// half full, and retires the old one.
    fn host_rebuild(&mut self, epochs: &Epochs) {
        self.reclaim(epochs);
        let live = self.routes[128].len();
        let new = if live == 0 {
            std::ptr::null_mut()
        } else {
            let h = HostArray::new((live * 2).next_power_of_two().max(16));
            for (&a, &v) in &self.routes[128] {
                if let Err(Some(i)) = h.find(a) {
                    h.fill(i, a, v);
                }
            }
            Box::into_raw(Box::new(h))
        };
        self.host_used = live;
        let old = self.table.hosts.swap(new, Ordering::AcqRel);
        // Ordering: the swap must be ordered before the counters' snapshot `retire` takes (a
        // store then loads): a worker waking up stores its counter then loads `hosts`, and
        // without a SeqCst fence on both sides each can miss the other's store, so a worker
        // read as asleep would still hold the old array when it is freed. The writer's fence
        // opens `Epochs::snapshot` (so every retiring writer has it: groups, bihash), the
        // worker's is in `Epochs::quiesce` on wake-up.
        if !old.is_null() {
            // SAFETY: `old` came from `Box::into_raw` and was the published array; it is no
            // longer reachable from the table, and the grace period keeps it alive for the
            // readers that loaded it before the swap.
            self.retired.retire(epochs, unsafe { Box::from_raw(old) });
        }
    }

    /// Frees the swapped-out host arrays whose grace period is over (every worker passed a
    /// quiescent point since the swap); the number left waiting. Every insert and remove
    /// does it first, so an array waits for the next write to the table, whatever it
    /// changes, not for the next rebuild of the host array (which may never come, and the
    /// arrays would then wait for the writer's drop and the table's in the graveyard).
    /// `epochs` must be the set the table's readers quiesce on, as for `insert`/`remove`.
    pub fn reclaim(&mut self, epochs: &Epochs) -> usize {
        if !self.retired.is_empty() {
            drop(self.retired.reclaim(epochs));
        }
        self.retired.len()
    }

    /// Removes a prefix (counted as a FIB change, [`crate::changes`]); returns its value.
    pub fn remove(&mut self, epochs: &Epochs, prefix: u128, len: u8) -> Option<u32> {
        let v = self.remove_prefix(epochs, prefix, len)?;
        crate::changed();
        Some(v)
    }

    fn remove_prefix(&mut self, epochs: &Epochs, prefix: u128, len: u8) -> Option<u32> {
        if len > 128 {
            return None;
        }
        self.reclaim(epochs);
        let p = mask(prefix, len);
        let v = self.routes[len as usize].remove(&p)?;
        self.n_routes -= 1;
        if len == 128 {
            self.host_remove(epochs, p);
        }
        // The longest shorter prefix covering this one takes over its entries.
        let mut repl = 0;
        for l in (0..len).rev() {
            if let Some(&cv) = self.routes[l as usize].get(&mask(p, l)) {
                repl = leaf(l, cv);
                break;
            }
        }
        // Find the slot range of the prefix (it exists: insert created the path).
        let mut path = Vec::new();
        let mut slot = Slot::Root((p >> (128 - ROOT_BITS)) as usize);
        let mut end = ROOT_BITS;
        while (len as u32) > end {
            let e = self.entry(slot).load(Ordering::Relaxed);
            if !is_ext(e) {
                // Already collapsed into a shorter leaf: nothing of ours is left below.
                return Some(v);
            }
            path.push(slot);
            let g = e & VALUE_MASK;
            slot = Slot::Group(g, ((p >> (128 - end - 8)) & 0xff) as usize);
            end += 8;
        }
        let n = 1usize << (end - len as u32);
        self.paint_range(slot, n, repl, &|d| d == len);
        // Fold groups that became uniform, inside the range and then up the path.
        for k in 0..n {
            let s = match slot {
                Slot::Root(i) => Slot::Root(i + k),
                Slot::Group(g, i) => Slot::Group(g, i + k),
            };
            self.collapse(epochs, s, end, true);
        }
        // Up the path only the group on it changed: no need to look at its siblings.
        let mut level_end = end;
        while let Some(s) = path.pop() {
            level_end -= 8;
            self.collapse(epochs, s, level_end, false);
        }
        Some(v)
    }

    /// Writes `new` into `n` consecutive slots from `start` (and every group below them)
    /// wherever the current leaf's depth satisfies `take` (or the entry is empty).
    fn paint_range(&self, start: Slot, n: usize, new: u32, take: &dyn Fn(u8) -> bool) {
        for k in 0..n {
            let s = match start {
                Slot::Root(i) => Slot::Root(i + k),
                Slot::Group(g, i) => Slot::Group(g, i + k),
            };
            self.paint_entry(self.entry(s), new, take);
        }
    }

    fn paint_entry(&self, x: &AtomicU32, new: u32, take: &dyn Fn(u8) -> bool) {
        let e = x.load(Ordering::Relaxed);
        if is_ext(e) {
            for y in self.table.group(e & VALUE_MASK) {
                self.paint_entry(y, new, take);
            }
        } else if depth_of(e).is_none_or(take) {
            x.store(new, Ordering::Release);
        }
    }

    /// If the entry at `s` (a slot of a level ending at bit `end`) points to a group whose
    /// entries are all one leaf no longer than `end`, puts that leaf back in the slot and
    /// retires the group (children first when `deep`).
    fn collapse(&mut self, epochs: &Epochs, s: Slot, end: u32, deep: bool) {
        let e = self.entry(s).load(Ordering::Relaxed);
        if !is_ext(e) {
            return;
        }
        let g = e & VALUE_MASK;
        if deep {
            for i in 0..256 {
                self.collapse(epochs, Slot::Group(g, i), end + 8, true);
            }
        }
        let grp = self.table.group(g);
        let first = grp[0].load(Ordering::Relaxed);
        if is_ext(first) || depth_of(first).is_some_and(|d| d as u32 > end) {
            return;
        }
        if grp.iter().all(|x| x.load(Ordering::Relaxed) == first) {
            self.entry(s).store(first, Ordering::Release);
            self.alloc.retire(epochs, g);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The /128 routes the table says it serves, checked against a scan of its array.
    fn hosts_counted(t: &Ip6Lpm) -> usize {
        let n = t.routes[128].len();
        assert_eq!(n, t.table().host_slots_live(), "routes and array agree");
        n
    }
    use proptest::prelude::*;

    fn a(s: &str) -> u128 {
        u128::from(s.parse::<std::net::Ipv6Addr>().unwrap())
    }

    fn oracle(routes: &[(u128, u8, u32)], x: u128) -> Option<u32> {
        routes
            .iter()
            .filter(|&&(p, l, _)| mask(x, l) == p)
            .max_by_key(|&&(_, l, _)| l)
            .map(|&(_, _, v)| v)
    }

    #[test]
    fn basic_lpm() {
        let e = Epochs::new(1);
        let mut t = Ip6Lpm::new();
        assert_eq!(t.lookup(a("2001:db8::1")), None);
        t.insert(&e, 0, 0, 1).unwrap();
        t.insert(&e, a("2001:db8::"), 32, 2).unwrap();
        t.insert(&e, a("2001:db8:1::"), 48, 3).unwrap();
        t.insert(&e, a("2001:db8:1:2::"), 64, 4).unwrap();
        t.insert(&e, a("2001:db8:1:2::1"), 128, 5).unwrap();
        t.insert(&e, a("2000::"), 3, 6).unwrap();
        t.insert(&e, a("2001:db8:1:2:8000::"), 65, 7).unwrap();
        assert_eq!(t.lookup(a("::1")), Some(1));
        assert_eq!(t.lookup(a("3fff::1")), Some(6));
        assert_eq!(t.lookup(a("2001:db8:ffff::1")), Some(2));
        assert_eq!(t.lookup(a("2001:db8:1:ffff::1")), Some(3));
        assert_eq!(t.lookup(a("2001:db8:1:2::2")), Some(4));
        assert_eq!(t.lookup(a("2001:db8:1:2::1")), Some(5));
        assert_eq!(t.lookup(a("2001:db8:1:2:8000::1")), Some(7));
        let xs = [a("::1"), a("2001:db8:1:2::1"), a("3fff::"), a("2001:db8::")];
        let mut got = [0; 4];
        t.table().lookup_many(&xs.map(u128::to_be_bytes), &mut got);
        assert_eq!(got, [1, 5, 6, 2]);
        assert!(t.groups_in_use() > 0);
        assert_eq!(t.remove(&e, a("2001:db8:1:2::1"), 128), Some(5));
        assert_eq!(t.lookup(a("2001:db8:1:2::1")), Some(4));
        assert_eq!(t.remove(&e, a("2001:db8:1:2:8000::"), 65), Some(7));
        assert_eq!(t.remove(&e, a("2001:db8:1:2::"), 64), Some(4));
        assert_eq!(t.remove(&e, a("2001:db8:1::"), 48), Some(3));
        assert_eq!(t.lookup(a("2001:db8:1:2::1")), Some(2));
        assert_eq!(t.remove(&e, a("2001:db8::"), 32), Some(2));
        assert_eq!(t.lookup(a("2001:db8:1:2::1")), Some(6));
        assert_eq!(t.groups_in_use(), 0, "every group collapsed and retired");
        assert_eq!(t.remove(&e, a("2000::"), 3), Some(6));
        assert_eq!(t.remove(&e, 0, 0), Some(1));
        assert_eq!(t.lookup(a("2001:db8:1:2::1")), None);
        assert!(t.is_empty());
        assert!(t.insert(&e, 0, 129, 1).is_err());
        assert!(t.insert(&e, 0, 8, 1 << 24).is_err());
        assert_eq!(t.remove(&e, 0, 8), None);
    }

    /// `lookup_many` against `lookup` for one vector.
    fn check_many(t: &Ip6Lpm, xs: &[u128]) {
        let bytes: Vec<[u8; 16]> = xs.iter().map(|x| x.to_be_bytes()).collect();
        let mut got = vec![0; xs.len()];
        t.table().lookup_many(&bytes, &mut got);
        for (x, g) in xs.iter().zip(got) {
            assert_eq!(Some(g).filter(|&v| v != u32::MAX), t.lookup(*x), "{x:x}");
        }
    }

    #[test]
    fn vectors_of_every_depth_mix() {
        let e = Epochs::new(1);
        let mut t = Ip6Lpm::new();
        t.insert(&e, a("2001::"), 16, 1).unwrap();
        for k in 0..100u128 {
            t.insert(&e, a("2001:db8::") + (k << 80), 48, 2).unwrap();
        }
        t.insert(&e, a("2001:db8::1"), 128, 3).unwrap();
        let shallow = a("2001:1::1");
        let mid = a("2001:db8:5::1");
        let deep = a("2001:db8::1");
        // First level only; every address through every level without a branch; most
        // addresses done at /48 and a few finishing with the loop; nothing routed.
        check_many(&t, &[shallow; 256]);
        check_many(&t, &[deep; 256]);
        let mut v = vec![mid; 250];
        v.extend([deep; 6]);
        check_many(&t, &v);
        v.extend([shallow; 100]);
        check_many(&t, &v);
        check_many(&t, &[a("3001::1"), deep, a("2001:db8::2")]);
        check_many(&t, &[]);
    }

    #[test]
    fn first_level_boundary() {
        // Prefixes ending just before, at and just after the 24-bit first level.
        let e = Epochs::new(1);
        let mut t = Ip6Lpm::new();
        t.insert(&e, a("2001:c00::"), 23, 1).unwrap();
        t.insert(&e, a("2001:d00::"), 24, 2).unwrap();
        t.insert(&e, a("2001:d00::"), 25, 3).unwrap();
        t.insert(&e, a("2001:d80::"), 25, 4).unwrap();
        assert_eq!(t.lookup(a("2001:d00::1")), Some(3));
        assert_eq!(t.lookup(a("2001:d80::1")), Some(4));
        assert_eq!(t.lookup(a("2001:dff::1")), Some(4));
        assert_eq!(t.lookup(a("2001:c00::1")), Some(1));
        assert_eq!(t.lookup(a("2001:e00::1")), None);
        assert_eq!(t.remove(&e, a("2001:d80::"), 25), Some(4));
        assert_eq!(t.lookup(a("2001:d80::1")), Some(2));
        assert_eq!(t.remove(&e, a("2001:d00::"), 25), Some(3));
        assert_eq!(
            t.groups_in_use(),
            0,
            "the /24's group folded back into the first level"
        );
        assert_eq!(t.remove(&e, a("2001:d00::"), 24), Some(2));
        assert_eq!(t.lookup(a("2001:d00::1")), Some(1));
    }

    #[test]
    fn host_routes_go_through_the_host_table() {
        let e = Epochs::new(2);
        let mut t = Ip6Lpm::new();
        let base = a("fc00:1::");
        t.insert(&e, a("fc00::"), 16, 1).unwrap();
        t.insert(&e, base, 64, 2).unwrap();
        assert_eq!(hosts_counted(&t), 0);
        // Enough /128s for several rebuilds, then removals leaving removed slots behind.
        for k in 0..200u128 {
            t.insert(&e, base + k, 128, 100 + k as u32).unwrap();
        }
        assert_eq!(hosts_counted(&t), 200);
        for k in (0..200u128).step_by(2) {
            assert_eq!(t.remove(&e, base + k, 128), Some(100 + k as u32));
        }
        t.insert(&e, base + 7, 128, 7).unwrap(); // replaced in place
        t.insert(&e, base + 4, 128, 4).unwrap(); // back after a removal
        assert_eq!(hosts_counted(&t), 101);
        let xs: Vec<u128> = (0..210u128).map(|k| base + k).collect();
        for &x in &xs {
            let k = (x - base) as u32;
            let want = match k {
                4 => 4,
                7 => 7,
                k if k < 200 && k % 2 == 1 => 100 + k,
                _ => 2,
            };
            assert_eq!(t.lookup(x), Some(want), "{x:x}");
        }
        check_many(&t, &xs);
        // A /128 below a longer-than-/64 prefix, and an address of that prefix without one.
        t.insert(&e, base + 0x100, 120, 3).unwrap();
        assert_eq!(t.lookup(base + 0x101), Some(3));
        t.insert(&e, base + 0x101, 128, 5).unwrap();
        assert_eq!(t.lookup(base + 0x101), Some(5));
        check_many(&t, &[base + 0x101; 64]);
        check_many(&t, &[base + 0x102; 64]);
        // Every host gone: no host table left.
        let hosts: Vec<u128> = t.iter().filter(|r| r.1 == 128).map(|r| r.0).collect();
        for h in hosts {
            t.remove(&e, h, 128).unwrap();
        }
        assert_eq!(hosts_counted(&t), 0);
        assert!(t.table().hosts().is_none());
        assert_eq!(t.lookup(base + 0x101), Some(3));
        // Arrays retired with a reader still behind: they outlive the writer with the table.
        let table = std::sync::Arc::clone(t.table());
        let e2 = Epochs::new(2);
        for k in 0..40u128 {
            t.insert(&e2, base + k, 128, 9).unwrap();
        }
        let waiting = t.retired.len();
        assert!(
            waiting > 0,
            "nobody quiesced: the rebuilds' old arrays wait"
        );
        drop(t);
        assert_eq!(
            table.graveyard.lock().unwrap().len(),
            waiting,
            "the writer handed them to the table"
        );
        assert_eq!(table.lookup(base + 39), Some(9));
    }

    /// Removals alone shrink the host array once live /128s are under a quarter of its used
    /// slots (so misses do not walk a table of removed slots), and lookups stay right.
    #[test]
    fn removals_alone_rebuild_the_host_array_smaller() {
        let e = Epochs::new(1);
        let mut t = Ip6Lpm::new();
        let base = a("fc00:1::");
        t.insert(&e, base, 64, 2).unwrap();
        for k in 0..256u128 {
            t.insert(&e, base + k, 128, 100 + k as u32).unwrap();
        }
        let full = t.host_slots();
        for k in 8..256u128 {
            t.remove(&e, base + k, 128).unwrap();
        }
        assert!(
            t.host_slots() < full,
            "{} slots, was {full}",
            t.host_slots()
        );
        assert_eq!(hosts_counted(&t), 8);
        for k in 0..300u128 {
            let want = if k < 8 { 100 + k as u32 } else { 2 };
            assert_eq!(t.lookup(base + k), Some(want), "{k}");
        }
    }

    #[test]
    fn host_arrays_are_freed_after_their_grace_period() {
        let e = Epochs::new(2);
        let mut t = Ip6Lpm::new();
        let base = a("fc00:1::");
        let mut k = 0u128;
        // Inserts hosts until the host array is rebuilt (a new pointer published).
        let mut rebuild = |t: &mut Ip6Lpm| {
            let old = t.table.hosts.load(Ordering::Relaxed);
            while t.table.hosts.load(Ordering::Relaxed) == old {
                t.insert(&e, base + k, 128, 1 + k as u32).unwrap();
                k += 1;
            }
        };
        rebuild(&mut t); // the first array: nothing retired
        assert_eq!(t.retired.len(), 0);
        assert_eq!(t.host_slots(), 16);
        assert_eq!(
            t.memory_bytes(),
            t.groups_in_use() * 1024 + t.host_table_bytes()
        );
        assert!(t.host_table_bytes() >= 16 * 20);
        rebuild(&mut t);
        rebuild(&mut t);
        assert_eq!(t.retired.len(), 2, "worker 1 has not moved");
        e.quiesce(1);
        rebuild(&mut t);
        assert_eq!(
            t.retired.len(),
            1,
            "the two freed, the one just swapped out waits"
        );
        rebuild(&mut t);
        assert_eq!(t.retired.len(), 2);
        e.offline(1);
        rebuild(&mut t);
        assert_eq!(t.retired.len(), 1, "an offline worker holds nothing");
        for j in 0..k {
            assert_eq!(t.lookup(base + j), Some(1 + j as u32));
        }
    }

    /// A swapped-out host array is freed by the first write after its grace period, not
    /// only by the next rebuild of the host array: the last /128 removed (a table emptied)
    /// retires the last array, and routes of other lengths never rebuild one.
    #[test]
    fn host_arrays_are_freed_by_any_write_after_their_grace_period() {
        let e = Epochs::new(2);
        let mut t = Ip6Lpm::new();
        let base = a("fc00:1::");
        for k in 0..40u128 {
            t.insert(&e, base + k, 128, 1 + k as u32).unwrap();
        }
        let waiting = t.retired.len();
        assert!(
            waiting > 0,
            "worker 1 has not moved: the rebuilds' arrays wait"
        );
        e.quiesce(1);
        t.insert(&e, base, 64, 2).unwrap();
        assert_eq!(t.retired.len(), 0, "a /64 insert frees them");
        for k in 0..40u128 {
            t.remove(&e, base + k, 128).unwrap();
        }
        assert!(t.table().hosts().is_none());
        let waiting = t.retired.len();
        assert!(
            waiting > 0,
            "the arrays the removals swapped out wait for worker 1"
        );
        assert_eq!(t.reclaim(&e), waiting, "worker 1 has not moved since");
        e.quiesce(1);
        assert_eq!(t.remove(&e, base, 64), Some(2));
        assert_eq!(t.retired.len(), 0, "a /64 removal frees it");
        e.quiesce(1);
        assert_eq!(t.reclaim(&e), 0);
        assert_eq!(t.lookup(base + 1), None);
    }

    fn prefix() -> impl Strategy<Value = (u128, u8)> {
        // Lengths spread over every level boundary; addresses from a small space so
        // prefixes overlap and nest.
        (
            // /17../32 straddle the 24-bit first level (painted ranges of it, or groups right
            // below it) and get their own weight.
            prop_oneof![1 => Just(0u8), 1 => 1u8..=8, 4 => 9u8..=16, 6 => 17u8..=32, 6 => 33u8..=48, 5 => 49u8..=64, 3 => 65u8..=127, 3 => Just(128u8)],
            0u64..1 << 10,
            any::<u64>(),
        )
            .prop_map(|(l, hi, lo)| {
                let top = 0x2001_0db8u128 << 96;
                let addr = top | ((hi as u128) << 70) | ((lo as u128) & 0x3f_ffff);
                let addr = if l < 16 {
                    addr ^ ((hi as u128) << 118)
                } else if l <= 32 {
                    // Vary bits 20..28 from the top: both sides of the first level's end.
                    addr ^ ((hi as u128 & 0xff) << 100)
                } else {
                    addr
                };
                (mask(addr, l), l)
            })
    }

    /// Mostly /128s (the host table) under a few shorter prefixes, over a small space so
    /// they collide, get removed, replaced and added again.
    fn host_heavy() -> impl Strategy<Value = (u128, u8)> {
        (
            prop_oneof![1 => Just(32u8), 1 => Just(64u8), 1 => 65u8..=127, 6 => Just(128u8)],
            0u128..4,
            0u128..64,
        )
            .prop_map(|(l, hi, lo)| {
                let addr = (0xfc00u128 << 112) | (hi << 64) | (lo * 0x0100_0000_0001);
                (mask(addr, l), l)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn matches_naive_oracle(
            adds in proptest::collection::vec(prefix(), 1..80),
            dels in proptest::collection::vec(0usize..100, 0..40),
            probes in proptest::collection::vec(prefix(), 1..200),
        ) {
            let e = Epochs::new(1);
            let mut t = Ip6Lpm::new();
            let mut model: Vec<(u128, u8, u32)> = Vec::new();
            for (k, &(p, l)) in adds.iter().enumerate() {
                t.insert(&e, p, l, k as u32).unwrap();
                model.retain(|r| !(r.0 == p && r.1 == l));
                model.push((p, l, k as u32));
            }
            for &d in &dels {
                if model.is_empty() { break; }
                let (p, l, v) = model.remove(d % model.len());
                prop_assert_eq!(t.remove(&e, p, l), Some(v));
            }
            prop_assert_eq!(t.len(), model.len());
            for &(p, _) in &probes {
                for x in [p, p | 1, p | (1u128 << 64), p ^ (1u128 << 100)] {
                    prop_assert_eq!(t.lookup(x), oracle(&model, x), "addr {:x}", x);
                }
            }
            let mut many: Vec<u128> = probes.iter().map(|p| p.0 | 1).collect();
            many.extend([0, u128::MAX]);
            let bytes: Vec<[u8; 16]> = many.iter().map(|x| x.to_be_bytes()).collect();
            let want: Vec<Option<u32>> = many.iter().map(|&x| oracle(&model, x)).collect();
            // Vectors of several sizes: how many addresses still descend decides when the
            // branchless passes stop.
            for size in [1, 7, 256] {
                for (c, w) in bytes.chunks(size).zip(want.chunks(size)) {
                    let mut got = vec![0u32; c.len()];
                    t.table().lookup_many(c, &mut got);
                    let got: Vec<Option<u32>> =
                        got.iter().map(|&g| Some(g).filter(|&v| v != u32::MAX)).collect();
                    prop_assert_eq!(&got[..], w);
                }
            }
            // Removing everything leaves no group behind.
            for (p, l, _) in model.drain(..) {
                t.remove(&e, p, l);
            }
            prop_assert_eq!(t.groups_in_use(), 0);
        }

        #[test]
        fn host_table_matches_the_oracle(
            ops in proptest::collection::vec((host_heavy(), any::<bool>()), 1..300),
        ) {
            let e = Epochs::new(2);
            let mut t = Ip6Lpm::new();
            let mut model: Vec<(u128, u8, u32)> = Vec::new();
            for (k, &((p, l), add)) in ops.iter().enumerate() {
                if add || !model.iter().any(|r| r.0 == p && r.1 == l) {
                    t.insert(&e, p, l, k as u32).unwrap();
                    model.retain(|r| !(r.0 == p && r.1 == l));
                    model.push((p, l, k as u32));
                } else {
                    t.remove(&e, p, l).unwrap();
                    model.retain(|r| !(r.0 == p && r.1 == l));
                }
            }
            let hosts = model.iter().filter(|r| r.1 == 128).count();
            prop_assert_eq!(hosts_counted(&t), hosts);
            let xs: Vec<u128> = ops.iter().flat_map(|((p, _), _)| [*p, p | 1, p ^ (1 << 40)]).collect();
            for &x in &xs {
                prop_assert_eq!(t.lookup(x), oracle(&model, x), "addr {:x}", x);
            }
            let bytes: Vec<[u8; 16]> = xs.iter().map(|x| x.to_be_bytes()).collect();
            for size in [1, 5, 64, 256] {
                for (c, xc) in bytes.chunks(size).zip(xs.chunks(size)) {
                    let mut got = vec![0u32; c.len()];
                    t.table().lookup_many(c, &mut got);
                    for (g, &x) in got.iter().zip(xc) {
                        prop_assert_eq!(Some(*g).filter(|&v| v != u32::MAX), oracle(&model, x));
                    }
                }
            }
        }
    }
}
