//! Quiescent-state tracking for deferred reclamation (read-mostly tables updated by the main
//! thread while workers read them without locks).
//!
//! Every worker bumps its counter once per dispatcher loop (outside any lookup) and parks with
//! its counter set to [`OFFLINE`]. Memory retired by the writer may be reused once every
//! worker's counter differs from the snapshot taken at retirement (or the worker is offline).

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// Counter value of a thread that is parked (holds no references).
pub const OFFLINE: u64 = u64::MAX;

/// One counter per thread.
#[derive(Debug)]
pub struct Epochs {
    counters: Box<[AtomicU64]>,
}

impl Epochs {
    /// Counters for `threads` threads.
    pub fn new(threads: usize) -> Self {
        Epochs {
            counters: (0..threads.max(1)).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Thread `t` passed a quiescent point (between two loops).
    #[inline(always)]
    pub fn quiesce(&self, t: usize) {
        if let Some(c) = self.counters.get(t) {
            let v = c.load(Ordering::Relaxed);
            if v == OFFLINE {
                c.store(0, Ordering::Release);
                // Ordering: waking up is a store (the counter) followed by loads (the
                // published pointers), and the writer does the mirror image: a pointer swap,
                // then the counters' snapshot ([`Self::snapshot`]). Release/acquire orders
                // neither store before the following load (a store buffer lets the load pass
                // it), so without a fence on both sides the writer can read OFFLINE while
                // this thread already loaded the old pointer, and free it under us. With a
                // SeqCst fence here and one in `snapshot`, either our loads see the new
                // pointer or the writer's snapshot sees us awake. Paid only on wake-up.
                fence(Ordering::SeqCst);
            } else {
                c.store(v.wrapping_add(1), Ordering::Release);
            }
        }
    }

    /// Thread `t` goes to sleep holding no references.
    pub fn offline(&self, t: usize) {
        if let Some(c) = self.counters.get(t) {
            c.store(OFFLINE, Ordering::Release);
        }
    }

    /// The counters now, taken after whatever the writer unpublished before the call.
    pub fn snapshot(&self) -> Vec<u64> {
        // Ordering: pairs with the fence of a thread waking up in [`Self::quiesce`]: the
        // writer's swap/store of a pointer (before this call) is ordered before the loads of
        // the counters below, so a thread read as OFFLINE here cannot have loaded the old
        // pointer (see there). Control plane only.
        fence(Ordering::SeqCst);
        self.counters
            .iter()
            .map(|c| c.load(Ordering::Acquire))
            .collect()
    }

    /// Whether every thread passed a quiescent point since `snap` (thread 0, the writer, is
    /// skipped: it never reads concurrently with its own writes).
    pub fn passed(&self, snap: &[u64]) -> bool {
        self.counters.iter().zip(snap).skip(1).all(|(c, &s)| {
            let v = c.load(Ordering::Acquire);
            v == OFFLINE || s == OFFLINE || v != s
        })
    }
}

/// Items waiting for a grace period.
#[derive(Debug, Default)]
pub struct Retired<T> {
    items: Vec<(Vec<u64>, T)>,
}

impl<T> Retired<T> {
    /// An empty list.
    pub fn new() -> Self {
        Retired { items: Vec::new() }
    }
    /// Retires `item` now.
    pub fn retire(&mut self, e: &Epochs, item: T) {
        self.items.push((e.snapshot(), item));
    }
    /// Takes the items whose grace period is over.
    pub fn reclaim(&mut self, e: &Epochs) -> Vec<T> {
        let (done, wait): (Vec<_>, Vec<_>) = self.items.drain(..).partition(|(s, _)| e.passed(s));
        self.items = wait;
        done.into_iter().map(|(_, t)| t).collect()
    }
    /// Takes every item, grace period over or not (for an owner handing them to whoever
    /// outlives the readers).
    pub fn drain_all(&mut self) -> Vec<T> {
        self.items.drain(..).map(|(_, t)| t).collect()
    }
    /// Items still waiting.
    pub fn len(&self) -> usize {
        self.items.len()
    }
    /// Nothing waits.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// An anonymous, zero-filled, private mapping whose length is a multiple of 2 MiB, advised
/// for transparent hugepages (`MADV_HUGEPAGE`): a random access into a large table costs one
/// TLB entry per 2 MiB instead of per 4 KiB where the kernel allows it. Pages are backed
/// only when touched.
pub struct ZeroedMap {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is owned by this value; what is stored in it decides the rest (its
// users access it through atomics or through references tied to `&self`).
unsafe impl Send for ZeroedMap {}
// SAFETY: as above.
unsafe impl Sync for ZeroedMap {}

impl ZeroedMap {
    /// Hugepage size the length is rounded to.
    pub const HUGE: usize = 2 << 20;

    /// At least `bytes` zeroed bytes, or the OS's error when the region cannot be mapped
    /// (address-space limit, strict overcommit).
    pub fn try_new(bytes: usize) -> std::io::Result<Self> {
        let len = bytes
            .max(1)
            .checked_next_multiple_of(Self::HUGE)
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::OutOfMemory))?;
        // SAFETY: anonymous private mapping with no address hint; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: advice on our own mapping; failure (no THP) is harmless.
        unsafe {
            libc::madvise(p, len, libc::MADV_HUGEPAGE);
        }
        Ok(ZeroedMap {
            ptr: p as *mut u8,
            len,
        })
    }

    /// The start of the mapping (page-aligned).
    #[inline(always)]
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Its length in bytes (a multiple of [`ZeroedMap::HUGE`]).
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never empty (for clippy's `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl Drop for ZeroedMap {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping; no reference outlives `self`.
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.len);
        }
    }
}

/// Types whose all-zero bit pattern is a valid value (integers, atomics, floats and arrays or
/// `repr(C)` structs of them), which a [`ZeroedArray`] may hold.
///
/// # Safety
/// Every field of the type must accept the all-zero bit pattern (no references, no
/// `NonZero*`, no enum without a zero discriminant; a `bool` reads `false`), and the type
/// must need no drop (a mapped array's elements are never dropped).
pub unsafe trait ZeroValid {}

// SAFETY: plain integers and atomics of them (no drop glue; zero is a valid value).
unsafe impl ZeroValid for u32 {}
// SAFETY: as above.
unsafe impl ZeroValid for u64 {}
// SAFETY: as above.
unsafe impl ZeroValid for AtomicU32 {}
// SAFETY: as above.
unsafe impl ZeroValid for AtomicU64 {}

/// A fixed-length array allocated zeroed (never written here: untouched pages cost no
/// memory) and, from 2 MiB on, in a [`ZeroedMap`] advised for transparent hugepages: a
/// random access into a table of many MiB then costs a TLB entry per 2 MiB rather than per
/// 4 KiB. Smaller arrays are on the heap (`alloc_zeroed`; a map rounds up to 2 MiB).
///
/// The one container of the kind: the bihash's and the flow tables' bucket arrays, NAT44's
/// flow records, the ACL sessions and the FIBs' tables ([`ZeroedAtomicU32s`]).
pub struct ZeroedArray<T: ZeroValid> {
    /// The elements' start: `_map`'s, or a heap block owned here (freed in the drop).
    ptr: *mut T,
    len: usize,
    /// The mapping, when the array is mapped.
    _map: Option<ZeroedMap>,
}

// SAFETY: the array owns its elements (`ptr` points into `_map` or a heap block owned here)
// and hands out references only through `&self`/`&mut self`, as a `Box<[T]>` does.
unsafe impl<T: ZeroValid + Send> Send for ZeroedArray<T> {}
// SAFETY: as above.
unsafe impl<T: ZeroValid + Sync> Sync for ZeroedArray<T> {}

impl<T: ZeroValid> ZeroedArray<T> {
    /// `len` zeroed elements.
    ///
    /// # Panics
    /// If the memory cannot be had (see [`Self::try_new`]).
    pub fn new(len: usize) -> Self {
        Self::try_new(len).unwrap_or_else(|e| panic!("cannot allocate {len} elements: {e}"))
    }

    /// `len` zeroed elements, or `OutOfMemory` / the OS's error when the size overflows or
    /// the memory cannot be allocated or mapped (address-space limit, strict overcommit).
    pub fn try_new(len: usize) -> std::io::Result<Self> {
        const {
            assert!(std::mem::align_of::<T>() <= 4096);
            assert!(std::mem::size_of::<T>() > 0);
            assert!(!std::mem::needs_drop::<T>());
        };
        let oom = || std::io::Error::from(std::io::ErrorKind::OutOfMemory);
        let layout = std::alloc::Layout::array::<T>(len).map_err(|_| oom())?;
        if layout.size() >= ZeroedMap::HUGE {
            let map = ZeroedMap::try_new(layout.size())?;
            return Ok(ZeroedArray {
                ptr: map.as_ptr() as *mut T,
                len,
                _map: Some(map),
            });
        }
        let ptr = if len == 0 {
            std::ptr::NonNull::<T>::dangling().as_ptr()
        } else {
            // SAFETY: `layout` has a non-zero size (`len` > 0, `T` is not zero-sized).
            let p = unsafe { std::alloc::alloc_zeroed(layout) } as *mut T;
            if p.is_null() {
                return Err(oom());
            }
            p
        };
        Ok(ZeroedArray {
            ptr,
            len,
            _map: None,
        })
    }

    /// The elements.
    #[inline(always)]
    pub fn as_slice(&self) -> &[T] {
        // SAFETY: `ptr` is the mapping's start or the heap block's (or dangling and aligned
        // for `len` = 0), which holds `len` × size_of::<T>() zero-filled or since written
        // bytes (all-zero is a valid `T`, `T: ZeroValid`) and is aligned for `T` (the
        // allocator's layout; a mapping is page-aligned and T's alignment is at most 4096,
        // checked in `try_new`); either lives as long as `self`, and `&self` excludes a
        // `&mut` from `as_mut_slice`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The elements, mutable.
    #[inline(always)]
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as in `as_slice`; `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the elements are in a [`ZeroedMap`] (from 2 MiB on), not on the heap.
    pub fn is_mapped(&self) -> bool {
        self._map.is_some()
    }
}

impl<T: ZeroValid> Drop for ZeroedArray<T> {
    fn drop(&mut self) {
        if self._map.is_none() && self.len != 0 {
            // SAFETY: a heap array's block was allocated in `try_new` with exactly this
            // layout (it was valid then) and is freed once, here; its elements need no drop
            // (`T: ZeroValid`). A mapped array's mapping is unmapped by `_map`'s drop.
            unsafe {
                std::alloc::dealloc(
                    self.ptr as *mut u8,
                    std::alloc::Layout::array::<T>(self.len).unwrap_unchecked(),
                );
            }
        }
    }
}

impl<T: ZeroValid> std::ops::Deref for ZeroedArray<T> {
    type Target = [T];
    #[inline(always)]
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T: ZeroValid> std::ops::DerefMut for ZeroedArray<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [T] {
        self.as_mut_slice()
    }
}

/// A fixed-length array of `AtomicU32` allocated zeroed and lazily (untouched pages cost no
/// memory), for large sparse tables such as DIR-24-8's 16M-entry first level: a
/// [`ZeroedArray`] (in a [`ZeroedMap`], transparent hugepages where the kernel allows them,
/// from 2 MiB on).
pub struct ZeroedAtomicU32s(ZeroedArray<AtomicU32>);

impl ZeroedAtomicU32s {
    /// `n` zeroed entries.
    ///
    /// # Panics
    /// If the memory cannot be had (see [`Self::try_new`]).
    pub fn new(n: usize) -> Self {
        Self::try_new(n).unwrap_or_else(|e| panic!("cannot map {} entries: {e}", n))
    }

    /// `n` zeroed entries, or the error when the memory cannot be allocated or mapped
    /// (address-space limit, strict overcommit). Only pages written later take memory.
    pub fn try_new(n: usize) -> std::io::Result<Self> {
        ZeroedArray::try_new(n).map(ZeroedAtomicU32s)
    }

    /// The entries.
    #[inline(always)]
    pub fn as_slice(&self) -> &[AtomicU32] {
        self.0.as_slice()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grace_periods() {
        let e = Epochs::new(3);
        let mut r = Retired::new();
        r.retire(&e, 7);
        assert!(r.reclaim(&e).is_empty(), "workers have not moved");
        e.quiesce(1);
        assert!(r.reclaim(&e).is_empty(), "worker 2 has not moved");
        e.offline(2);
        assert_eq!(r.reclaim(&e), vec![7]);
        e.quiesce(2);
        r.retire(&e, 8);
        e.quiesce(1);
        e.quiesce(2);
        assert_eq!(r.reclaim(&e), vec![8]);
        r.retire(&e, 9);
        r.retire(&e, 10);
        assert_eq!(r.drain_all(), vec![9, 10], "whatever the counters");
        assert!(r.is_empty());
    }

    #[test]
    fn zeroed_atomics() {
        let z = ZeroedAtomicU32s::new(1 << 20);
        assert_eq!(z.as_slice().len(), 1 << 20);
        assert_eq!(z.as_slice()[12345].load(Ordering::Relaxed), 0);
        z.as_slice()[5].store(9, Ordering::Relaxed);
        assert_eq!(z.as_slice()[5].load(Ordering::Relaxed), 9);
    }

    #[test]
    fn zeroed_arrays_start_zero_small_on_the_heap_large_mapped() {
        let mut empty = ZeroedArray::<u64>::new(0);
        assert!(empty.is_empty() && empty.as_mut_slice().is_empty());
        let mut small = ZeroedArray::<u64>::new(1000);
        assert!(!small.is_mapped());
        let mut large = ZeroedArray::<u64>::new(3 << 17); // 3 MiB
        assert!(large.is_mapped());
        for a in [&mut small, &mut large] {
            assert!(a.iter().all(|&x| x == 0));
            let n = a.len();
            a[n - 1] = 7;
            a[0] = 5;
            assert_eq!((a[0], a[n - 1], a.len()), (5, 7, n));
        }
        assert!(ZeroedArray::<u64>::try_new(usize::MAX / 4).is_err());
    }

    #[test]
    fn zeroed_atomics_too_big_is_an_error() {
        // More than the address space: an error to fall back from, not a panic.
        assert!(ZeroedAtomicU32s::try_new(usize::MAX / 2).is_err());
        assert!(ZeroedAtomicU32s::try_new(1 << 60).is_err());
    }
}
