//! The buffer arena: a header array and a data array of fixed-stride buffers, a global free
//! list and per-thread caches.
//!
//! Buffer `i` is `headers[i]` (a 128-byte [`BufferHeader`] in a private array) plus
//! `data[i * stride ..]` = `[headroom][data: data_size]` in the data array, the stride rounded
//! up to a cache line. Keeping the headers apart lets the data array be handed to a peer
//! (memif zero-copy, AF_XDP-style UMEM registration) without exposing any metadata. Both arrays
//! are backed by 2 MiB hugepages when asked for and available, else by ordinary 4 KiB pages
//! (one log line says which). With `shared` the data array is a memfd mapped `MAP_SHARED`
//! whose fd [`BufferPool::shared_fd`] exposes.

use crate::header::{flags, BufIdx, BufferHeader};
use crate::Buffer;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Headroom in front of the data area, for encapsulations written in place.
pub const HEADROOM: usize = 256;
const _: () = assert!(HEADROOM >= 128);
/// Default data bytes per buffer.
pub const DEFAULT_DATA_SIZE: usize = 2048;
/// Largest data size per buffer (larger frames use chains).
pub const MAX_DATA_SIZE: usize = 16384;
/// Default number of buffers.
pub const DEFAULT_BUFFERS: u32 = 16384;
/// Buffers moved between a thread cache and the global free list at once.
pub const CACHE_BATCH: usize = 256;
/// A thread cache holding more than this returns a batch to the global list.
pub const CACHE_HIGH: usize = 4 * CACHE_BATCH;

/// Page size asked for in `buffers { page-size ... }`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PageSize {
    /// Try 2 MiB hugepages, fall back to 4 KiB pages.
    Default,
    /// 4 KiB pages.
    Small,
    /// 2 MiB hugepages; fall back to 4 KiB pages with a warning when none are reserved.
    Huge2M,
}

/// Configuration of a buffer pool (`buffers { ... }` in startup.conf).
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// Number of buffers (`buffers-per-numa`).
    pub buffers: u32,
    /// Data bytes per buffer (`default data-size`).
    pub data_size: usize,
    /// Backing page size (`page-size`).
    pub page_size: PageSize,
    /// Back the data array by a memfd mapped `MAP_SHARED` (`buffers { shared }`), so that it
    /// can be handed to a peer process (memif zero-copy).
    pub shared: bool,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            buffers: DEFAULT_BUFFERS,
            data_size: DEFAULT_DATA_SIZE,
            page_size: PageSize::Default,
            shared: false,
        }
    }
}

/// Error creating a pool.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// The configuration is out of range.
    #[error("invalid buffer configuration: {0}")]
    Config(String),
    /// mmap failed.
    #[error("cannot map {bytes} bytes for buffers: {err}")]
    Map {
        /// Size asked for.
        bytes: usize,
        /// OS error.
        err: std::io::Error,
    },
}

/// What backs the arena.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Backing {
    /// 2 MiB hugepages.
    Huge2M,
    /// 4 KiB pages.
    Small4K,
}

/// Totals shown by `show buffers`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Buffers in the arena.
    pub total: u64,
    /// Buffers on the global free list.
    pub free: u64,
    /// Buffers held by per-thread caches.
    pub cached: u64,
    /// Buffers in use (owned by frames, queues, rings, streams).
    pub in_use: u64,
    /// Allocation requests that could not be satisfied in full.
    pub alloc_failures: u64,
}

/// A preallocated arena of buffers shared by all threads.
pub struct BufferPool {
    /// Where buffer `i`'s header and data are (the `n` private headers, the `n * stride`
    /// bytes of headroom + data).
    arena: Arena<'static>,
    /// Keeps the header array mapped.
    _hdr_map: Mapping,
    data: *mut u8,
    data_map: Mapping,
    n: u32,
    stride: usize,
    data_size: usize,
    backing: Backing,
    free: Mutex<Vec<u32>>,
    free_count: AtomicU64,
    cached: Mutex<Vec<Arc<AtomicU64>>>,
    alloc_failures: AtomicU64,
    /// Debug builds: whether each buffer is free or owned (the ownership check, see `FREE`).
    #[cfg(debug_assertions)]
    _owner: Box<[core::sync::atomic::AtomicU8]>,
}

// SAFETY: the arena is plain memory; concurrent access to one buffer is excluded by the ownership
// protocol of buffer indices (an index is owned by exactly one frame, queue or cache at a time).
unsafe impl Send for BufferPool {}
// SAFETY: see above; shared state other than buffer memory is behind a Mutex or atomics.
unsafe impl Sync for BufferPool {}

impl BufferPool {
    /// Maps the arena and puts every buffer on the free list.
    pub fn new(cfg: &PoolConfig) -> Result<Arc<BufferPool>, PoolError> {
        if cfg.buffers == 0 || cfg.buffers > (1 << 26) {
            return Err(PoolError::Config(format!(
                "buffers-per-numa {} out of range 1..{}",
                cfg.buffers,
                1u32 << 26
            )));
        }
        if !(256..=MAX_DATA_SIZE).contains(&cfg.data_size) {
            return Err(PoolError::Config(format!(
                "data-size {} out of range 256..{}",
                cfg.data_size, MAX_DATA_SIZE
            )));
        }
        let stride = (HEADROOM + cfg.data_size).div_ceil(64) * 64;
        let n = cfg.buffers as usize;
        let data_map = if cfg.shared {
            map_shared(stride * n, cfg.page_size)?
        } else {
            map_private(stride * n, cfg.page_size, "buffer data")?
        };
        let hdr_map = map_private(
            core::mem::size_of::<BufferHeader>() * n,
            if data_map.backing == Backing::Huge2M {
                PageSize::Default
            } else {
                PageSize::Small
            },
            "buffer headers",
        )?;
        let backing = data_map.backing;
        #[cfg(debug_assertions)]
        let owner: Box<[core::sync::atomic::AtomicU8]> = (0..n)
            .map(|_| core::sync::atomic::AtomicU8::new(FREE))
            .collect();
        let pool = BufferPool {
            arena: Arena {
                hdrs: hdr_map.ptr as *mut BufferHeader,
                data: data_map.ptr,
                n: cfg.buffers,
                stride: stride as u32,
                mem_len: (HEADROOM + cfg.data_size) as u32,
                _pool: core::marker::PhantomData,
                #[cfg(debug_assertions)]
                owner: owner.as_ptr(),
            },
            _hdr_map: hdr_map,
            data: data_map.ptr,
            data_map,
            n: cfg.buffers,
            stride,
            data_size: cfg.data_size,
            backing,
            // Reverse order so the first allocations get the lowest indices.
            free: Mutex::new((0..cfg.buffers).rev().collect()),
            free_count: AtomicU64::new(cfg.buffers as u64),
            cached: Mutex::new(Vec::new()),
            alloc_failures: AtomicU64::new(0),
            #[cfg(debug_assertions)]
            _owner: owner,
        };
        Ok(Arc::new(pool))
    }

    /// Number of buffers in the arena.
    pub fn len(&self) -> u32 {
        self.n
    }

    /// Always false: a pool has at least one buffer.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Data bytes per buffer (not counting headroom).
    pub fn data_size(&self) -> usize {
        self.data_size
    }

    /// Distance between two buffers in the data array (headroom + data, cache-line rounded).
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// What backs the data array.
    pub fn backing(&self) -> Backing {
        self.backing
    }

    /// Base address and mapped length of the data array (headroom + data of every buffer, no
    /// headers), for drivers that hand it to a peer or a device (memif zero-copy regions,
    /// UMEM-style registration).
    pub fn region(&self) -> (*mut u8, usize) {
        (self.data, self.data_map.len)
    }

    /// Offset of buffer `idx`'s headroom in the data array ([`BufferPool::region`]); its data
    /// area starts [`HEADROOM`] bytes later. `None` for an index outside the pool.
    #[inline(always)]
    pub fn data_offset(&self, idx: BufIdx) -> Option<usize> {
        (idx.0 < self.n).then(|| idx.0 as usize * self.stride)
    }

    /// The memfd behind the data array when the pool was created `shared`.
    pub fn shared_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        self.data_map.fd.as_ref().map(|f| f.as_raw_fd())
    }

    /// Buffers on the shared free list (not counting the threads' caches): one relaxed
    /// load, for a data path that only asks whether the free list is empty. [`stats`]
    /// (which also sums the caches under a mutex) has the full picture.
    ///
    /// [`stats`]: BufferPool::stats
    pub fn free_len(&self) -> u64 {
        self.free_count.load(Ordering::Relaxed)
    }

    /// Current totals. `in_use` is exact when no thread is allocating concurrently.
    pub fn stats(&self) -> PoolStats {
        let free = self.free_count.load(Ordering::Relaxed);
        let cached: u64 = self
            .cached
            .lock()
            .map(|v| v.iter().map(|c| c.load(Ordering::Relaxed)).sum())
            .unwrap_or(0);
        let total = self.n as u64;
        PoolStats {
            total,
            free,
            cached,
            in_use: total.saturating_sub(free + cached),
            alloc_failures: self.alloc_failures.load(Ordering::Relaxed),
        }
    }

    /// Creates a per-thread cache drawing on this pool.
    pub fn cache(self: &Arc<Self>) -> BufferCache {
        let counter = Arc::new(AtomicU64::new(0));
        if let Ok(mut v) = self.cached.lock() {
            v.push(counter.clone());
        }
        BufferCache {
            pool: self.clone(),
            bufs: Vec::with_capacity(CACHE_HIGH + CACHE_BATCH * 2),
            counter,
        }
    }

    /// The pool's address arithmetic as plain values, for a node's per-frame loop (see
    /// [`Arena`]).
    #[inline(always)]
    pub fn arena(&self) -> Arena<'_> {
        self.arena
    }

    /// Shared access to a buffer's header.
    ///
    /// # Safety
    /// The caller must own `idx` (no other thread or live [`Buffer`] may write to it).
    #[inline(always)]
    pub unsafe fn header(&self, idx: BufIdx) -> &BufferHeader {
        // SAFETY: forwarded contract.
        unsafe { self.arena.header(idx) }
    }

    /// A mutable view of a buffer: header plus headroom and data.
    ///
    /// # Safety
    /// The caller must own `idx` exclusively for the lifetime of the view: an index appears in
    /// at most one frame/queue/cache at a time and no second view of it may exist.
    #[inline(always)]
    pub unsafe fn buffer(&self, idx: BufIdx) -> Buffer<'_> {
        // SAFETY: forwarded contract.
        unsafe { self.arena.buffer(idx) }
    }

    /// Hints the CPU to fetch a buffer's header (and first data line) ahead of use.
    #[inline(always)]
    pub fn prefetch(&self, idx: BufIdx) {
        self.arena.prefetch(idx)
    }

    /// Hints the CPU to fetch a buffer's header only (nodes that read metadata only).
    #[inline(always)]
    pub fn prefetch_header(&self, idx: BufIdx) {
        self.arena.prefetch_header(idx)
    }

    fn take_global(&self, out: &mut Vec<u32>, want: usize) -> usize {
        let mut free = match self.free.lock() {
            Ok(f) => f,
            Err(p) => p.into_inner(),
        };
        let n = want.min(free.len());
        let at = free.len() - n;
        out.extend_from_slice(&free[at..]);
        free.truncate(at);
        self.free_count.store(free.len() as u64, Ordering::Relaxed);
        n
    }

    fn give_global(&self, from: &[u32]) {
        let mut free = match self.free.lock() {
            Ok(f) => f,
            Err(p) => p.into_inner(),
        };
        free.extend_from_slice(from);
        self.free_count.store(free.len() as u64, Ordering::Relaxed);
    }
}

/// Where a pool's buffers are: the header array, the data array, the buffer count and the
/// data stride, copied out of the pool.
///
/// A node takes it once per frame ([`BufferPool::arena`]) and resolves every packet through
/// it. Unlike `&BufferPool` (which holds a mutex and atomics, so the compiler must assume
/// any store may change it) these are plain values it keeps in registers across the loop:
/// an index costs one bound compare, one shift for the header and one multiply for the data.
#[derive(Copy, Clone)]
pub struct Arena<'a> {
    hdrs: *mut BufferHeader,
    data: *mut u8,
    /// The buffer count. Invariant: `n <= 2^31` ([`Arena::holds`] relies on it;
    /// `BufferPool::new` caps it at 2^26).
    n: u32,
    stride: u32,
    /// `HEADROOM + data_size`: the length of a buffer's view.
    mem_len: u32,
    _pool: core::marker::PhantomData<&'a BufferPool>,
    /// Debug builds: the pool's ownership table (`n` entries).
    #[cfg(debug_assertions)]
    owner: *const core::sync::atomic::AtomicU8,
}

/// Ownership state of a buffer in debug builds: on the free list or in a cache.
#[cfg(debug_assertions)]
const FREE: u8 = 0;
/// Ownership state of a buffer in debug builds: allocated (a frame, queue, ring, stream).
#[cfg(debug_assertions)]
const OWNED: u8 = 1;

// The debug-build buffer ownership check. Every buffer is either free (on the free list or
// in a thread's cache) or owned; allocation and free move it between the two and a view of a
// buffer needs it owned. So a double free, a use after free and an index never allocated
// stop the (test) run at the faulty call, naming the buffer, instead of two owners silently
// sharing it later. Release builds keep no state and check nothing.
#[cfg(debug_assertions)]
impl Arena<'_> {
    #[inline]
    fn owner(&self, idx: BufIdx) -> &core::sync::atomic::AtomicU8 {
        assert!(idx.0 < self.n, "buffer index {} out of range", idx.0);
        // SAFETY: idx < n and the table holds n entries, kept alive by the pool the arena
        // borrows.
        unsafe { &*self.owner.add(idx.0 as usize) }
    }

    /// Asserts that `idx` is allocated (a view of a free buffer is a use after free).
    #[inline]
    fn check_owned(&self, idx: BufIdx) {
        let st = self.owner(idx).load(Ordering::Relaxed);
        assert!(
            st == OWNED,
            "buffer {} used while free (use after free, or never allocated)",
            idx.0
        );
    }

    /// Marks `idx` allocated (it must have been free).
    #[inline]
    fn mark_owned(&self, idx: BufIdx) {
        let was = self.owner(idx).swap(OWNED, Ordering::Relaxed);
        assert!(was == FREE, "buffer {} allocated while in use", idx.0);
    }

    /// Marks `idx` free (it must have been allocated: else a double free).
    #[inline]
    fn mark_free(&self, idx: BufIdx) {
        let was = self.owner(idx).swap(FREE, Ordering::Relaxed);
        assert!(was == OWNED, "buffer {} freed twice (double free)", idx.0);
    }
}

impl<'a> Arena<'a> {
    /// Pointer to the header of a checked index.
    #[inline(always)]
    fn hdr_ptr(&self, idx: BufIdx) -> *mut BufferHeader {
        assert!(idx.0 < self.n, "buffer index {} out of range", idx.0);
        // SAFETY: idx < n, checked above.
        unsafe { self.hdr_ptr_unchecked(idx) }
    }

    /// Pointer to the header of an index the caller has checked.
    ///
    /// # Safety
    /// `idx < n`.
    #[inline(always)]
    unsafe fn hdr_ptr_unchecked(&self, idx: BufIdx) -> *mut BufferHeader {
        debug_assert!(idx.0 < self.n, "buffer index {} out of range", idx.0);
        // SAFETY: idx < n (the caller's contract), and the header array holds n headers.
        unsafe { self.hdrs.add(idx.0 as usize) }
    }

    /// Whether every index of `frame` is a buffer of this arena: one branch-free pass over
    /// the frame, so that a node's per-packet loop can then resolve its indices with
    /// [`Arena::buffer_unchecked`] / [`Arena::header_mut_unchecked`], no bound check per
    /// packet.
    #[inline]
    pub fn holds(self, frame: &[BufIdx]) -> bool {
        // An index below n (n <= 2^31, the invariant of `n`) has bit 31 clear and `idx - n`
        // (wrapping) bit 31 set; any other index fails one of the two. So one OR over the
        // frame (vectorised: SSE2 has no unsigned vector compare) says whether all are in.
        let n = self.n;
        debug_assert!(n <= 1 << 31, "arena of {n} buffers: holds needs n <= 2^31");
        let bad = frame
            .iter()
            .fold(0u32, |bad, b| bad | b.0 | !b.0.wrapping_sub(n));
        bad >> 31 == 0
    }

    /// Panics unless every index of `frame` is a buffer of this arena ([`Arena::holds`]): a
    /// node's one bound check per frame, after which its per-packet loop may resolve the
    /// frame's indices with the unchecked accessors.
    #[inline]
    #[track_caller]
    pub fn check_frame(self, frame: &[BufIdx]) {
        assert!(
            self.holds(frame),
            "a frame holds a buffer index out of range"
        );
    }

    /// An arena of `n` buffers and no memory (null pointers), for testing [`Arena::holds`]
    /// at any size; for `holds` only: resolving any index through it is undefined behaviour.
    #[cfg(test)]
    pub(crate) fn empty_of_len(n: u32) -> Arena<'static> {
        assert!(n <= 1 << 31, "an arena holds at most 2^31 buffers");
        Arena {
            hdrs: core::ptr::null_mut(),
            data: core::ptr::null_mut(),
            n,
            stride: 0,
            mem_len: 0,
            _pool: core::marker::PhantomData,
            #[cfg(debug_assertions)]
            owner: core::ptr::null(),
        }
    }

    /// Shared access to a buffer's header.
    ///
    /// # Safety
    /// The caller must own `idx` (no other thread or live [`Buffer`] may write to it).
    #[inline(always)]
    pub unsafe fn header(self, idx: BufIdx) -> &'a BufferHeader {
        #[cfg(debug_assertions)]
        self.check_owned(idx);
        // SAFETY: in the header array (checked), 128-aligned; initialised at map time (zero
        // pages) or by alloc; the arena borrows the pool, which keeps it mapped.
        unsafe { &*self.hdr_ptr(idx) }
    }

    /// The header of a buffer being freed (its chain is walked after the ownership check
    /// marked it free).
    ///
    /// # Safety
    /// As [`Arena::header`].
    #[inline(always)]
    unsafe fn header_of_freed(self, idx: BufIdx) -> &'a BufferHeader {
        // SAFETY: as in `header`.
        unsafe { &*self.hdr_ptr(idx) }
    }

    /// Mutable access to a buffer's header only (nodes that do not touch packet bytes).
    ///
    /// # Safety
    /// As [`Arena::buffer`]: the caller owns `idx` exclusively and holds no other view of it.
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn header_mut(self, idx: BufIdx) -> &'a mut BufferHeader {
        assert!(idx.0 < self.n, "buffer index {} out of range", idx.0);
        // SAFETY: idx checked; the rest is the caller's contract.
        unsafe { self.header_mut_unchecked(idx) }
    }

    /// [`Arena::header_mut`] without the bound check, for an index of a frame that
    /// [`Arena::holds`].
    ///
    /// # Safety
    /// As [`Arena::header_mut`], and `idx` is inside the arena (checked with
    /// [`Arena::holds`] for its whole frame; a debug assert checks it again).
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn header_mut_unchecked(self, idx: BufIdx) -> &'a mut BufferHeader {
        #[cfg(debug_assertions)]
        self.check_owned(idx);
        // SAFETY: in the header array (the caller's contract), 128-aligned, initialised;
        // exclusivity is the caller's contract.
        unsafe { &mut *self.hdr_ptr_unchecked(idx) }
    }

    /// A mutable view of a buffer: header plus headroom and data.
    ///
    /// # Safety
    /// The caller must own `idx` exclusively for the lifetime of the view: an index appears in
    /// at most one frame/queue/cache at a time and no second view of it may exist.
    #[inline(always)]
    pub unsafe fn buffer(self, idx: BufIdx) -> Buffer<'a> {
        #[cfg(debug_assertions)]
        self.check_owned(idx);
        // SAFETY: idx checked by hdr_ptr; exclusivity is the caller's contract.
        unsafe { self.view(self.hdr_ptr(idx), idx) }
    }

    /// [`Arena::buffer`] without the bound check, for an index of a frame that
    /// [`Arena::holds`] (a node's per-packet loop: one check per frame instead of one per
    /// packet).
    ///
    /// # Safety
    /// As [`Arena::buffer`], and `idx` is inside the arena (checked with [`Arena::holds`]
    /// for its whole frame; a debug assert checks it again).
    #[inline(always)]
    pub unsafe fn buffer_unchecked(self, idx: BufIdx) -> Buffer<'a> {
        #[cfg(debug_assertions)]
        self.check_owned(idx);
        // SAFETY: the data array is a mapping, never null. Told so, the compiler drops the
        // null test of a view's `Option<&mut [u8; N]>` windows. (Not in `buffer`: there it
        // made the register allocation of l2-input's loop worse, +4 instructions a packet.)
        unsafe { core::hint::assert_unchecked(!self.data.is_null()) };
        // SAFETY: idx < n (the caller's contract); exclusivity is the caller's contract.
        unsafe { self.view(self.hdr_ptr_unchecked(idx), idx) }
    }

    /// The view of buffer `idx` whose header is `hdr`.
    ///
    /// # Safety
    /// `idx < n`, `hdr` is its header, and the caller owns the buffer exclusively.
    #[inline(always)]
    unsafe fn view(self, hdr: *mut BufferHeader, idx: BufIdx) -> Buffer<'a> {
        // SAFETY: the header is in the header array and `stride >= HEADROOM + data_size` bytes
        // at `idx * stride` lie in the data array (idx < n); the caller guarantees exclusive
        // ownership of this buffer.
        unsafe {
            let mem = core::slice::from_raw_parts_mut(
                self.data.add(idx.0 as usize * self.stride as usize),
                self.mem_len as usize,
            );
            Buffer::from_parts(&mut *hdr, mem)
        }
    }

    /// Hints the CPU to fetch a buffer's header line and the line where its packet starts
    /// (the data area, after the headroom) ahead of use. No bound check: a prefetch of any
    /// address never faults, and the addresses are only computed (wrapping), not dereferenced.
    #[inline(always)]
    pub fn prefetch(self, idx: BufIdx) {
        let i = idx.0 as usize;
        sluice_infra::prefetch(self.hdrs.wrapping_add(i) as *const u8);
        sluice_infra::prefetch(self.data.wrapping_add(i * self.stride as usize + HEADROOM));
    }

    /// Resolves a frame's buffers to their addresses in one pass (vectorised: a shift, a
    /// multiply and two adds per packet) into `out`'s first `frame.len()` entries, and
    /// repeats the last packet's addresses in the `ahead` entries after them, so that a
    /// per-packet loop prefetching `ahead` packets on needs no test for the frame's end.
    /// Panics unless every index is a buffer of this arena ([`Arena::check_frame`]) and
    /// `frame.len() + ahead <= N`.
    ///
    /// When `out` already holds this frame, resolved in an arena of this layout with at
    /// least `ahead` entries after it (a frame handed on whole from node to node, the
    /// thread's nodes sharing one `FrameAddrs`), it is kept: one compare of the indices
    /// (vectorised, branch-free) instead of the bound check and the address pass. The
    /// addresses are a function of the index and the layout only, so they cannot be stale.
    #[inline]
    #[track_caller]
    pub fn resolve<const N: usize>(self, frame: &[BufIdx], ahead: usize, out: &mut FrameAddrs<N>) {
        if out.holds(self, frame, ahead) {
            return;
        }
        self.resolve_anew(frame, ahead, out);
    }

    /// [`Arena::resolve`] for a frame that may be the one `out` was stamped with
    /// (`stamp`, from [`FrameAddrs::stamp`] after an earlier resolve of it, or
    /// [`Stamp::NONE`]): when
    /// `out` still carries that stamp (no resolve wrote it since), it holds `frame`'s
    /// addresses and is kept without the compare of the indices; only the length, the
    /// first and last index, the entries after the frame and the arena's layout are
    /// looked at. Otherwise as [`Arena::resolve`].
    ///
    /// # Safety
    /// A `stamp` other than [`Stamp::NONE`] must have been read from a `FrameAddrs` right after it resolved a
    /// frame whose indices are `frame`'s (the same values, in order): a stamp says which
    /// resolve wrote the addresses, not what frame the caller holds.
    #[inline]
    #[track_caller]
    pub unsafe fn resolve_stamped<const N: usize>(
        self,
        frame: &[BufIdx],
        ahead: usize,
        out: &mut FrameAddrs<N>,
        stamp: Stamp,
    ) {
        if self.holds_stamped(frame, ahead, out, stamp) {
            debug_assert!(
                out.holds(self, frame, ahead),
                "stamped addresses of another frame"
            );
            return;
        }
        self.resolve(frame, ahead, out);
    }

    /// Whether `out` carries `stamp` (not [`Stamp::NONE`]: no resolve wrote it since the one that
    /// gave it) and the length, first and last index of `frame`, with `ahead` entries
    /// after it, in this arena: [`Arena::resolve_stamped`]'s test. For a `stamp` as that
    /// function asks, true says `out` holds `frame`'s addresses, as if
    /// [`Arena::resolve`] had just resolved it.
    #[inline(always)]
    pub fn holds_stamped<const N: usize>(
        self,
        frame: &[BufIdx],
        ahead: usize,
        out: &FrameAddrs<N>,
        stamp: Stamp,
    ) -> bool {
        stamp.n != 0 && out.stamp() == stamp && out.holds_ends(self, frame, ahead)
    }

    /// The address pass of [`Arena::resolve`], without its memo.
    #[track_caller]
    fn resolve_anew<const N: usize>(self, frame: &[BufIdx], ahead: usize, out: &mut FrameAddrs<N>) {
        self.check_frame(frame);
        let n = frame.len();
        assert!(
            n.checked_add(ahead).is_some_and(|m| m <= N),
            "a frame of {n} packets and {ahead} ahead does not fit {N} addresses"
        );
        let stride = self.stride as usize;
        for ((h, d), bi) in out.hdr.iter_mut().zip(&mut out.data).zip(frame) {
            *h = self.hdrs.wrapping_add(bi.0 as usize);
            *d = self.data.wrapping_add(bi.0 as usize * stride);
        }
        if let Some(last) = n.checked_sub(1) {
            let (h, d) = (out.hdr[last], out.data[last]);
            out.hdr[n..n + ahead].fill(h);
            out.data[n..n + ahead].fill(d);
        }
        out.idx[..n].copy_from_slice(frame);
        out.layout = self.layout();
        out.len = n;
        out.filled = if n == 0 { 0 } else { n + ahead };
        out.resolves += 1;
    }

    /// What a buffer's addresses depend on besides its index (the key of
    /// [`Arena::resolve`]'s memo, with the count its bound check used).
    #[inline(always)]
    fn layout(self) -> Layout {
        Layout {
            hdrs: self.hdrs,
            data: self.data,
            n: self.n,
            stride: self.stride,
            mem_len: self.mem_len,
        }
    }

    /// The view of the `i`-th buffer of a frame resolved by [`Arena::resolve`].
    ///
    /// # Safety
    /// `addrs` was last filled by [`Arena::resolve`] of this arena, from a frame whose
    /// `i`-th index is `idx`, and `i` is below that frame's length; the caller owns `idx` as
    /// [`Arena::buffer`] requires. Debug builds check `i` against that length and entry `i`
    /// against `idx`'s address in this arena.
    #[inline(always)]
    pub unsafe fn buffer_at<const N: usize>(
        self,
        addrs: &FrameAddrs<N>,
        i: usize,
        idx: BufIdx,
    ) -> Buffer<'a> {
        self.check_at(addrs, i, idx);
        // SAFETY: resolve computed both addresses from an index it checked (below n), so
        // the header is in the header array and `mem_len` bytes at the data address lie in
        // the data array; exclusivity is the caller's contract.
        unsafe {
            let data = *addrs.data.get_unchecked(i);
            core::hint::assert_unchecked(!data.is_null());
            Buffer::from_parts(
                &mut **addrs.hdr.get_unchecked(i),
                core::slice::from_raw_parts_mut(data, self.mem_len as usize),
            )
        }
    }

    /// Debug builds: `i` is below the resolved frame's length and entry `i` is `idx`'s
    /// (what [`Arena::buffer_at`] and [`Arena::header_at`] ask of their caller).
    #[inline(always)]
    fn check_at<const N: usize>(self, addrs: &FrameAddrs<N>, i: usize, idx: BufIdx) {
        #[cfg(debug_assertions)]
        self.check_owned(idx);
        debug_assert!(i < addrs.len, "packet {i} of a frame of {}", addrs.len);
        debug_assert!(
            idx.0 < self.n && addrs.hdr[i] == self.hdrs.wrapping_add(idx.0 as usize),
            "entry {i} is not buffer {} of this arena",
            idx.0
        );
        let _ = (addrs, i, idx);
    }

    /// The header of the `i`-th buffer of a frame resolved by [`Arena::resolve`] (a node
    /// that reads and writes metadata only).
    ///
    /// # Safety
    /// As [`Arena::buffer_at`].
    #[inline(always)]
    pub unsafe fn header_at<const N: usize>(
        self,
        addrs: &FrameAddrs<N>,
        i: usize,
        idx: BufIdx,
    ) -> &'a mut BufferHeader {
        self.check_at(addrs, i, idx);
        // SAFETY: resolve computed the address from an index it checked (below n): a
        // header of the header array; exclusivity is the caller's contract.
        unsafe { &mut **addrs.hdr.get_unchecked(i) }
    }

    /// Hints the CPU to fetch a buffer's header only (nodes that read metadata only).
    #[inline(always)]
    pub fn prefetch_header(self, idx: BufIdx) {
        sluice_infra::prefetch(self.hdrs.wrapping_add(idx.0 as usize) as *const u8);
    }
}

/// A frame's buffer addresses, header and data area, resolved once per frame by
/// [`Arena::resolve`]: a per-packet loop then loads the two addresses of its packet and of
/// the packet it prefetches instead of computing them (with the arena's base addresses and
/// stride, which it would otherwise keep in registers or reload from the stack). `N` is the
/// frame capacity plus the prefetch distance.
pub struct FrameAddrs<const N: usize> {
    hdr: [*mut BufferHeader; N],
    data: [*mut u8; N],
    /// The indices of the frame last resolved (its first `len`), and the layout of the
    /// arena it was resolved in: [`Arena::resolve`] keeps the addresses of the same frame.
    idx: [BufIdx; N],
    layout: Layout,
    /// The length of the frame last resolved (debug checks of [`Arena::buffer_at`]).
    len: usize,
    /// This `FrameAddrs` among all (a value no other had, from [`OWNERS`]) and the resolves
    /// that wrote it so far: its [`FrameAddrs::stamp`].
    owner: u64,
    resolves: u64,
    /// The entries the last resolve wrote: the frame and the repeated ones after it (debug
    /// checks of [`FrameAddrs::prefetch`], and the memo of [`Arena::resolve`]).
    filled: usize,
}

/// An arena's base addresses, buffer count, stride and view length (see
/// [`Arena::resolve`]).
#[derive(Copy, Clone, PartialEq, Eq)]
struct Layout {
    hdrs: *mut BufferHeader,
    data: *mut u8,
    n: u32,
    stride: u32,
    mem_len: u32,
}

impl Layout {
    /// No arena's (null bases): what a fresh `FrameAddrs` holds.
    const NONE: Layout = Layout {
        hdrs: core::ptr::null_mut(),
        data: core::ptr::null_mut(),
        n: 0,
        stride: 0,
        mem_len: 0,
    };
}

#[cfg(test)]
impl<const N: usize> FrameAddrs<N> {
    /// Entry `i` (header and data address) and the length of the frame last resolved.
    pub(crate) fn entry(&self, i: usize) -> (*mut BufferHeader, *mut u8) {
        (self.hdr[i], self.data[i])
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

// SAFETY: plain addresses; they are dereferenced only through `Arena::buffer_at`, whose
// caller owns the buffer on its own thread.
unsafe impl<const N: usize> Send for FrameAddrs<N> {}

impl<const N: usize> Default for FrameAddrs<N> {
    fn default() -> Self {
        FrameAddrs {
            hdr: [core::ptr::null_mut(); N],
            data: [core::ptr::null_mut(); N],
            idx: [BufIdx(0); N],
            layout: Layout::NONE,
            len: 0,
            filled: 0,
            owner: OWNERS.fetch_add(1, core::sync::atomic::Ordering::Relaxed) + 1,
            resolves: 0,
        }
    }
}

/// The last owner number given to a `FrameAddrs` (one per `FrameAddrs` made, not per
/// resolve: no atomic on the frame path); 64 bits never wrap.
static OWNERS: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// Which resolve wrote a [`FrameAddrs`]: its owner (unique among all `FrameAddrs`) and the
/// count of its resolves (never wraps), so no two resolves anywhere have the same stamp.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Stamp {
    owner: u64,
    n: u64,
}

impl Stamp {
    /// No resolve's: what a `FrameAddrs` that never resolved carries; matches nothing in
    /// [`Arena::holds_stamped`].
    pub const NONE: Stamp = Stamp { owner: 0, n: 0 };

    /// Whether this is [`Stamp::NONE`].
    #[inline(always)]
    pub fn is_none(self) -> bool {
        self.n == 0
    }
}

impl<const N: usize> FrameAddrs<N> {
    /// Whether these are the addresses of `frame` in `arena` with at least `ahead` entries
    /// after it: the same length, layout and indices (compared without an early exit, so
    /// the compare vectorises), which the resolve that wrote them checked.
    #[inline(always)]
    fn holds(&self, arena: Arena<'_>, frame: &[BufIdx], ahead: usize) -> bool {
        // The first and last indices first: a different frame usually differs there, and
        // then costs no pass over the indices.
        self.holds_ends(arena, frame, ahead)
            && self.idx[..frame.len()]
                .iter()
                .zip(frame)
                .fold(0, |d, (a, b)| d | (a.0 ^ b.0))
                == 0
    }

    /// [`FrameAddrs::holds`] but for the indices between the first and the last.
    #[inline(always)]
    fn holds_ends(&self, arena: Arena<'_>, frame: &[BufIdx], ahead: usize) -> bool {
        let n = frame.len();
        let Some(old) = self.idx.get(..n) else {
            return false;
        };
        self.len == n
            && old.first() == frame.first()
            && old.last() == frame.last()
            && self.filled.checked_sub(n).is_some_and(|more| more >= ahead)
            && self.layout == arena.layout()
    }

    /// Which resolve wrote these addresses: every resolve that computes them anew (not one
    /// that finds them already here) gives them a stamp no resolve had before;
    /// [`Stamp::NONE`] before the first. Read right after resolving a frame, it lets
    /// [`Arena::resolve_stamped`] keep them for the same frame without comparing it.
    #[inline(always)]
    pub fn stamp(&self) -> Stamp {
        if self.resolves == 0 {
            return Stamp::NONE;
        }
        Stamp {
            owner: self.owner,
            n: self.resolves,
        }
    }

    /// Hints the CPU to fetch the `i`-th buffer's header line and, with `data`, the line
    /// where its packet starts (after the headroom). `i` is below the frame's length plus
    /// the `ahead` of the last [`Arena::resolve`] (debug builds check): entries past those
    /// are stale or null (a prefetch of them would be harmless but useless).
    #[inline(always)]
    pub fn prefetch(&self, i: usize, data: bool) {
        debug_assert!(
            i < self.filled,
            "prefetch of entry {i}, {} resolved",
            self.filled
        );
        sluice_infra::prefetch(self.hdr[i] as *const u8);
        if data {
            sluice_infra::prefetch(self.data[i].wrapping_add(HEADROOM));
        }
    }
}

/// One mapping of the arena (unmapped when dropped).
struct Mapping {
    ptr: *mut u8,
    len: usize,
    backing: Backing,
    /// The memfd of a shared mapping.
    fd: Option<std::os::fd::OwnedFd>,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len came from a successful mmap and nothing refers to the mapping once
        // the pool (its owner) is gone: caches hold an Arc of the pool.
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.len);
        }
    }
}

const HUGE: usize = 2 << 20;

/// `mmap` of `len` bytes, read/write, no address hint.
fn mmap(len: usize, flags: libc::c_int, fd: libc::c_int) -> Option<*mut u8> {
    // SAFETY: a fresh mapping with no address hint; the result is checked.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            fd,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p as *mut u8)
}

/// Private anonymous memory: 2 MiB hugepages when asked for and reserved, else 4 KiB pages
/// with transparent hugepages requested.
fn map_private(bytes: usize, page: PageSize, what: &str) -> Result<Mapping, PoolError> {
    if page != PageSize::Small {
        let len = bytes.div_ceil(HUGE) * HUGE;
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB;
        if let Some(ptr) = mmap(len, flags, -1) {
            log::info!("{what}: {} MiB on 2 MiB hugepages", len >> 20);
            return Ok(Mapping {
                ptr,
                len,
                backing: Backing::Huge2M,
                fd: None,
            });
        }
        log::info!(
            "{what}: no 2 MiB hugepages reserved ({}), using 4 KiB pages (transparent hugepages requested)",
            std::io::Error::last_os_error()
        );
    } else {
        log::info!("{what}: using 4 KiB pages (page-size 4k)");
    }
    let len = bytes.div_ceil(4096) * 4096;
    let ptr =
        mmap(len, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1).ok_or_else(|| PoolError::Map {
            bytes: len,
            err: std::io::Error::last_os_error(),
        })?;
    // Ask for transparent hugepages where the kernel allows it (fewer TLB misses); harmless
    // when THP is off.
    // SAFETY: advice on our own fresh mapping.
    unsafe {
        libc::madvise(ptr as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
    }
    Ok(Mapping {
        ptr,
        len,
        backing: Backing::Small4K,
        fd: None,
    })
}

/// A memfd mapped `MAP_SHARED` (`buffers { shared }`): on 2 MiB hugepages (`MFD_HUGETLB`) when
/// asked for and reserved, else on 4 KiB shmem pages, which get transparent hugepages only when
/// `/sys/kernel/mm/transparent_hugepage/shmem_enabled` allows it. Sealed against shrinking, so
/// a peer holding the fd cannot make our accesses fault.
fn map_shared(bytes: usize, page: PageSize) -> Result<Mapping, PoolError> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let fail = |len: usize| PoolError::Map {
        bytes: len,
        err: std::io::Error::last_os_error(),
    };
    let create = |flags: libc::c_uint, len: usize| -> Option<OwnedFd> {
        // SAFETY: a NUL-terminated constant name; the result is checked.
        let fd = unsafe {
            libc::memfd_create(
                c"sluice-buffers".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING | flags,
            )
        };
        if fd < 0 {
            return None;
        }
        // SAFETY: fd was just created and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: plain syscalls on an fd we own.
        let ok = unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) == 0 };
        ok.then_some(fd)
    };
    let try_map = |fd: OwnedFd, len: usize, backing: Backing| -> Option<Mapping> {
        let ptr = mmap(len, libc::MAP_SHARED, fd.as_raw_fd())?;
        // SAFETY: fcntl on an fd we own; hugetlbfs memfds may refuse sealing, which only
        // matters once the fd is handed out (then the peer is trusted not to shrink it).
        unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) };
        Some(Mapping {
            ptr,
            len,
            backing,
            fd: Some(fd),
        })
    };
    if page != PageSize::Small {
        let len = bytes.div_ceil(HUGE) * HUGE;
        if let Some(m) =
            create(libc::MFD_HUGETLB, len).and_then(|fd| try_map(fd, len, Backing::Huge2M))
        {
            log::info!(
                "buffer data: {} MiB shared memfd on 2 MiB hugepages",
                len >> 20
            );
            return Ok(m);
        }
        log::info!(
            "buffer data: no 2 MiB hugepages reserved ({}), shared memfd on 4 KiB pages",
            std::io::Error::last_os_error()
        );
    }
    let len = bytes.div_ceil(4096) * 4096;
    let fd = create(0, len).ok_or_else(|| fail(len))?;
    let m = try_map(fd, len, Backing::Small4K).ok_or_else(|| fail(len))?;
    // Transparent hugepages for shmem only where shmem_enabled allows (`advise`/`always`).
    // SAFETY: advice on our own fresh mapping.
    unsafe {
        libc::madvise(m.ptr as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
    }
    log::info!("buffer data: {} MiB shared memfd on 4 KiB pages", len >> 20);
    Ok(m)
}

/// Most buffers [`BufferCache::alloc_with`] chains for one packet (128 KiB with the default
/// 2 KiB of data per buffer); a longer packet gets `None` though the pool is not empty.
pub const ALLOC_WITH_MAX_BUFFERS: usize = 64;

/// A per-thread cache of free buffers. Allocation and free are batch operations; the global
/// free list is touched once per [`CACHE_BATCH`] buffers.
pub struct BufferCache {
    pool: Arc<BufferPool>,
    bufs: Vec<u32>,
    counter: Arc<AtomicU64>,
}

impl BufferCache {
    /// The pool this cache draws on.
    pub fn pool(&self) -> &Arc<BufferPool> {
        &self.pool
    }

    /// Buffers currently held by this cache.
    pub fn cached(&self) -> usize {
        self.bufs.len()
    }

    #[inline(always)]
    fn publish(&self) {
        self.counter
            .store(self.bufs.len() as u64, Ordering::Relaxed);
    }

    /// Allocates up to `out.len()` buffers with fresh headers. Returns how many were allocated;
    /// fewer means the pool is exhausted (counted in `alloc_failures`).
    #[inline]
    pub fn alloc(&mut self, out: &mut [BufIdx]) -> usize {
        // SAFETY: every header handed out is reset below, before anyone else sees it.
        let n = unsafe { self.alloc_raw(out) };
        let arena = self.pool.arena();
        for &b in &out[..n] {
            // SAFETY: just allocated, so this cache owns it exclusively.
            unsafe { arena.header_mut(b) }.reset();
        }
        n
    }

    /// [`Self::alloc`] without the header reset: each header's first cache line holds what
    /// the buffer's last user left. For an input node that writes every header anyway
    /// ([`BufferHeader::reset_from`] a template of its own, then the length), so that a
    /// buffer's header is written once instead of twice, in one loop.
    ///
    /// # Safety
    /// The caller writes the header's first line of every buffer of `out[..n]` with
    /// [`BufferHeader::reset_from`] or [`BufferHeader::reset`] before the buffer is freed,
    /// handed on, or its header read other than through the `header_mut` used to reset it:
    /// a stale `NEXT_PRESENT` would make a free walk into buffers owned by others.
    #[inline]
    pub unsafe fn alloc_raw(&mut self, out: &mut [BufIdx]) -> usize {
        let want = out.len();
        if self.bufs.len() < want {
            let need = want - self.bufs.len() + CACHE_BATCH;
            self.pool.take_global(&mut self.bufs, need);
        }
        let n = want.min(self.bufs.len());
        if n < want {
            self.pool.alloc_failures.fetch_add(1, Ordering::Relaxed);
        }
        let at = self.bufs.len() - n;
        #[cfg(debug_assertions)]
        let arena = self.pool.arena();
        for (o, &b) in out[..n].iter_mut().zip(self.bufs[at..].iter().rev()) {
            *o = BufIdx(b);
            #[cfg(debug_assertions)]
            arena.mark_owned(*o);
        }
        self.bufs.truncate(at);
        self.publish();
        n
    }

    /// Allocates one buffer.
    pub fn alloc_one(&mut self) -> Option<BufIdx> {
        let mut one = [BufIdx(0)];
        (self.alloc(&mut one) == 1).then_some(one[0])
    }

    /// Frees buffers and every buffer chained behind them.
    #[inline]
    pub fn free(&mut self, idxs: &[BufIdx]) {
        let arena = self.pool.arena();
        assert!(arena.holds(idxs), "freeing a buffer index out of range");
        // A double free panics here, before the fold below reads a header that another
        // thread may own by now.
        #[cfg(debug_assertions)]
        for &b in idxs {
            arena.mark_free(b);
        }
        // The heads in one copy, then whatever is chained behind them. One pass ORs the
        // heads' flags: a frame of single buffers (the usual case) is not walked again.
        self.bufs.extend(idxs.iter().map(|b| b.0));
        let heads = idxs.iter().fold(0, |f, &b| {
            // SAFETY: the caller hands over ownership; b is in the arena (holds, above).
            f | unsafe { &*arena.hdr_ptr_unchecked(b) }.flags
        });
        self.free_tails(idxs, heads);
    }

    /// [`Self::free`] of a frame whose addresses `addrs` holds (a node's frame resolved by
    /// [`Arena::resolve`], or handed on with them): the resolve checked the indices, so no
    /// bound check pass, and the heads' flags are read through the resolved addresses.
    ///
    /// # Safety
    /// `addrs` was last filled by [`Arena::resolve`] of this cache's pool's arena from a
    /// frame whose indices are `idxs` (the same values, in order), and the caller hands
    /// over ownership of every buffer of `idxs` (as [`Self::free`]). Debug builds check
    /// every entry.
    #[inline]
    pub unsafe fn free_at<const N: usize>(&mut self, idxs: &[BufIdx], addrs: &FrameAddrs<N>) {
        #[cfg(debug_assertions)]
        for (i, &b) in idxs.iter().enumerate() {
            let arena = self.pool.arena();
            arena.check_at(addrs, i, b);
            arena.mark_free(b);
        }
        self.bufs.extend(idxs.iter().map(|b| b.0));
        let heads = addrs.hdr[..idxs.len()].iter().fold(0, |f, &h| {
            // SAFETY: the resolve computed `h` from an index it checked: a header of the
            // arena, owned by the caller (this function's contract).
            f | unsafe { &*h }.flags
        });
        self.free_tails(idxs, heads);
    }

    /// The end of [`Self::free`]: the buffers chained behind `idxs` (when `heads`, the OR
    /// of their heads' flags, says some are), then the cache's high-water mark.
    #[inline(always)]
    fn free_tails(&mut self, idxs: &[BufIdx], heads: u32) {
        let arena = self.pool.arena();
        if heads & flags::NEXT_PRESENT != 0 {
            for &b in idxs {
                // SAFETY: the caller hands over ownership of the chain.
                let mut next = unsafe { arena.header_of_freed(b) }.next();
                while let Some(n) = next {
                    self.bufs.push(n.0);
                    #[cfg(debug_assertions)]
                    arena.mark_free(n);
                    // SAFETY: chain members are owned with their head.
                    next = unsafe { arena.header_of_freed(n) }.next();
                }
            }
        }
        if self.bufs.len() > CACHE_HIGH {
            let keep = CACHE_HIGH - CACHE_BATCH;
            self.pool.give_global(&self.bufs[keep..]);
            self.bufs.truncate(keep);
        }
        self.publish();
    }

    /// Frees single buffers: the caller knows that none has a chain behind it (VPP's
    /// `vlib_buffer_free_no_next`), so their headers are not read. A chained buffer passed
    /// here leaks its tail (never memory unsafety).
    #[inline]
    pub fn free_no_next(&mut self, idxs: &[BufIdx]) {
        #[cfg(debug_assertions)]
        for &b in idxs {
            let arena = self.pool.arena();
            // SAFETY: the caller hands over ownership.
            debug_assert!(unsafe { arena.header_of_freed(b) }.next().is_none());
            arena.mark_free(b);
        }
        self.bufs.extend(idxs.iter().map(|b| b.0));
        if self.bufs.len() > CACHE_HIGH {
            let keep = CACHE_HIGH - CACHE_BATCH;
            self.pool.give_global(&self.bufs[keep..]);
            self.bufs.truncate(keep);
        }
        self.publish();
    }

    /// Returns every cached buffer to the global free list.
    pub fn flush(&mut self) {
        self.pool.give_global(&self.bufs);
        self.bufs.clear();
        self.publish();
    }

    /// Appends `tail` (a buffer or chain) at the end of the chain starting at `head` and updates
    /// the head's total length.
    pub fn chain_append(&mut self, head: BufIdx, tail: BufIdx) {
        // SAFETY: the caller owns both chains; views are used one at a time.
        unsafe {
            let tail_len = {
                let t = self.pool.buffer(tail);
                t.hdr.current_length as u32 + t.chain_rest_len()
            };
            let mut last = head;
            while let Some(n) = self.pool.header(last).next() {
                last = n;
            }
            let l = self.pool.buffer(last);
            l.hdr.next_buffer = tail.0;
            l.hdr.flags |= flags::NEXT_PRESENT;
            let h = self.pool.buffer(head);
            let rest = h.chain_rest_len() + tail_len;
            h.hdr.total_length_not_including_first_buffer = rest;
            h.hdr.flags |= flags::TOTAL_LENGTH_VALID;
        }
    }

    /// Total packet length of the chain starting at `head`.
    pub fn chain_len(&self, head: BufIdx) -> usize {
        let mut len = 0usize;
        let mut cur = Some(head);
        while let Some(b) = cur {
            // SAFETY: the caller owns the chain.
            let h = unsafe { self.pool.header(b) };
            len += h.current_length as usize;
            cur = h.next();
        }
        len
    }

    /// Copies the packet bytes of a whole chain into `out` (at most `max` bytes).
    pub fn copy_chain(&self, head: BufIdx, out: &mut Vec<u8>, max: usize) {
        let mut cur = Some(head);
        while let Some(b) = cur {
            // SAFETY: the caller owns the chain; the view is dropped before the next one.
            let v = unsafe { self.pool.buffer(b) };
            let d = v.data();
            let room = max.saturating_sub(out.len());
            out.extend_from_slice(&d[..d.len().min(room)]);
            cur = v.hdr.next();
            if out.len() >= max {
                break;
            }
        }
    }

    /// Writes `bytes` into newly allocated buffers, chaining as many as needed. Returns the head,
    /// or `None` (nothing leaked) when the pool is exhausted or `bytes` needs more than
    /// [`ALLOC_WITH_MAX_BUFFERS`] buffers.
    pub fn alloc_with(&mut self, bytes: &[u8]) -> Option<BufIdx> {
        let per = self.pool.data_size;
        let nbuf = bytes.len().div_ceil(per).max(1);
        let mut idx = [BufIdx(0); ALLOC_WITH_MAX_BUFFERS];
        if nbuf > idx.len() {
            return None;
        }
        let got = self.alloc(&mut idx[..nbuf]);
        if got < nbuf {
            // Partial allocation: give back what we got.
            self.free(&idx[..got]);
            return None;
        }
        for (i, chunk) in bytes.chunks(per).enumerate() {
            // SAFETY: freshly allocated, owned here.
            let b = unsafe { self.pool.buffer(idx[i]) };
            b.mem[HEADROOM..HEADROOM + chunk.len()].copy_from_slice(chunk);
            b.hdr.current_length = chunk.len() as u16;
            if i + 1 < nbuf {
                b.hdr.next_buffer = idx[i + 1].0;
                b.hdr.flags |= flags::NEXT_PRESENT;
            }
        }
        if nbuf > 1 {
            // SAFETY: owned here.
            let h = unsafe { self.pool.buffer(idx[0]) };
            h.hdr.total_length_not_including_first_buffer = (bytes.len() - per) as u32;
            h.hdr.flags |= flags::TOTAL_LENGTH_VALID;
        }
        Some(idx[0])
    }
}

impl Drop for BufferCache {
    fn drop(&mut self) {
        self.flush();
        if let Ok(mut v) = self.pool.cached.lock() {
            v.retain(|c| !Arc::ptr_eq(c, &self.counter));
        }
    }
}
