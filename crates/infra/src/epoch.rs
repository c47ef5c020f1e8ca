//! Quiescent-state tracking for deferred reclamation (read-mostly tables updated by the main
//! thread while workers read them without locks).
//!
//! Every worker bumps its counter once per dispatcher loop (outside any lookup) and parks with
//! its counter set to [`OFFLINE`]. Memory retired by the writer may be reused once every
//! worker's counter differs from the snapshot taken at retirement (or the worker is offline).

use std::sync::atomic::{AtomicU64, Ordering};

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
            let n = if v == OFFLINE { 0 } else { v.wrapping_add(1) };
            c.store(n, Ordering::Release);
        }
    }

    /// Thread `t` goes to sleep holding no references.
    pub fn offline(&self, t: usize) {
        if let Some(c) = self.counters.get(t) {
            c.store(OFFLINE, Ordering::Release);
        }
    }

    /// The counters now.
    pub fn snapshot(&self) -> Vec<u64> {
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
    /// Items still waiting.
    pub fn len(&self) -> usize {
        self.items.len()
    }
    /// Nothing waits.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// A fixed-length array of `AtomicU32` allocated zeroed and lazily (untouched pages cost no
/// memory), for large sparse tables such as DIR-24-8's 16M-entry first level. The region is an
/// anonymous mapping advised for transparent hugepages (`MADV_HUGEPAGE`), so a random lookup
/// costs one TLB entry per 2 MiB instead of per 4 KiB where the kernel allows it.
pub struct ZeroedAtomicU32s {
    ptr: *mut AtomicU32Compat,
    len: usize,
    map_len: usize,
}

type AtomicU32Compat = std::sync::atomic::AtomicU32;

// SAFETY: the mapping is owned by this value and only accessed through atomics.
unsafe impl Send for ZeroedAtomicU32s {}
// SAFETY: as above; all access is through `&AtomicU32`.
unsafe impl Sync for ZeroedAtomicU32s {}

impl ZeroedAtomicU32s {
    /// `n` zeroed entries.
    ///
    /// # Panics
    /// If the address space cannot be mapped (see [`Self::try_new`]).
    pub fn new(n: usize) -> Self {
        Self::try_new(n).unwrap_or_else(|e| panic!("cannot map {} entries: {e}", n))
    }

    /// `n` zeroed entries, or the OS's error when the region cannot be mapped (address-space
    /// limit, strict overcommit). Only pages written later take memory.
    pub fn try_new(n: usize) -> std::io::Result<Self> {
        const HUGE: usize = 2 << 20;
        let bytes = n
            .max(1)
            .checked_mul(4)
            .map(|b| b.div_ceil(HUGE) * HUGE)
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::OutOfMemory))?;
        // SAFETY: anonymous private mapping with no address hint; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
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
            libc::madvise(p, bytes, libc::MADV_HUGEPAGE);
        }
        Ok(ZeroedAtomicU32s {
            ptr: p as *mut AtomicU32Compat,
            len: n,
            map_len: bytes,
        })
    }

    /// The entries.
    #[inline(always)]
    pub fn as_slice(&self) -> &[AtomicU32Compat] {
        // SAFETY: the mapping holds at least `len` zero-initialised u32s (a valid AtomicU32
        // bit pattern), is 4-aligned (page-aligned) and lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for ZeroedAtomicU32s {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping; no reference outlives `self`.
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.map_len);
        }
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
    fn zeroed_atomics_too_big_is_an_error() {
        // More than the address space: an error to fall back from, not a panic.
        assert!(ZeroedAtomicU32s::try_new(usize::MAX / 2).is_err());
        assert!(ZeroedAtomicU32s::try_new(1 << 60).is_err());
    }
}
