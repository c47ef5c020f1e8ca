//! Zero copy: Sluice's buffer pool behind DPDK's mempool `sluice_zc`.
//!
//! The shim gives every Sluice buffer an mbuf header of its own and makes them one mempool
//! whose operations call back here: a dequeue (a device's receive, or a cache refill)
//! allocates Sluice buffers, an enqueue (a cache flush after transmits) frees them. The
//! mempool's per-lcore caches sit in front, so these callbacks run once per cache refill or
//! flush, not per packet; each thread allocates and frees through a buffer cache of its own
//! (flushed when the thread ends). Buffers DPDK holds (in those caches, in device rings) count
//! as in use in Sluice's pool: [`lent`] says how many (`show buffers`: `Lent`).

use crate::sys::{Api, RteMempool};
use sluice_buffer::{BufIdx, BufferCache, BufferPool};
use std::cell::RefCell;
use std::ffi::c_uint;
use std::sync::{Arc, OnceLock};

static POOL: OnceLock<Arc<BufferPool>> = OnceLock::new();

/// A thread's cache for the callbacks, given back to the pool when the thread ends.
struct Cache(BufferCache);

impl Drop for Cache {
    fn drop(&mut self) {
        self.0.flush();
    }
}

thread_local! {
    static CACHE: RefCell<Option<Cache>> = const { RefCell::new(None) };
}

/// Runs `f` on this thread's cache, or, when there is none to be had (the thread-local is
/// being destroyed at thread exit, or the cache is busy: a callback inside a callback), on a
/// cache of its own that is flushed to the pool's free list when dropped: a callback never
/// fails for want of a cache (a free that freed nothing would lose the buffers DPDK has
/// already counted as given back). `None` only before [`init`].
fn with_cache<R>(f: impl FnOnce(&mut BufferCache) -> R) -> Option<R> {
    let pool = POOL.get()?;
    let mut f = Some(f);
    let r = CACHE
        .try_with(|c| {
            let mut c = c.try_borrow_mut().ok()?;
            let c = c.get_or_insert_with(|| Cache(pool.cache()));
            Some((f.take()?)(&mut c.0))
        })
        .ok()
        .flatten();
    match (r, f) {
        (Some(r), _) => Some(r),
        (None, Some(f)) => Some(f(&mut pool.cache())),
        (None, None) => None,
    }
}

unsafe extern "C" fn buf_alloc(idx: *mut u32, n: c_uint) -> c_uint {
    // A panic must not unwind into C: it allocates nothing instead.
    std::panic::catch_unwind(|| {
        with_cache(|c| {
            // SAFETY: the shim passes room for `n` indices; BufIdx is a transparent u32.
            let out = unsafe { std::slice::from_raw_parts_mut(idx as *mut BufIdx, n as usize) };
            c.alloc(out) as c_uint
        })
        .unwrap_or(0)
    })
    .unwrap_or(0)
}

unsafe extern "C" fn buf_free(idx: *const u32, n: c_uint) {
    let _ = std::panic::catch_unwind(|| {
        with_cache(|c| {
            // SAFETY: the shim passes `n` indices of buffers DPDK gives back (single mbufs).
            let bufs = unsafe { std::slice::from_raw_parts(idx as *const BufIdx, n as usize) };
            // DPDK freed the mbufs one by one: a buffer that went out as a chain's head still
            // says so in its header, which nothing reads (allocation resets the header) but
            // `free_no_next`'s debug check of single buffers.
            #[cfg(debug_assertions)]
            for &b in bufs {
                // SAFETY: DPDK handed the buffer back: owned here, one view at a time.
                unsafe { c.pool().arena().header_mut(b) }.flags &=
                    !sluice_buffer::flags::NEXT_PRESENT;
            }
            c.free_no_next(bufs);
        });
    });
}

unsafe extern "C" fn buf_avail() -> c_uint {
    POOL.get()
        .map(|p| {
            let s = p.stats();
            (s.free + s.cached).min(u64::from(u32::MAX)) as c_uint
        })
        .unwrap_or(0)
}

/// Tells the shim where Sluice's buffers are (receive and transmit copy into and out of
/// them by index).
pub fn arena(api: &Api, pool: &Arc<BufferPool>) {
    let (base, _) = pool.region();
    // SAFETY: the arena stays mapped for the life of the process (the pool is shared by every
    // graph and never dropped while DPDK runs); stride and sizes describe it.
    unsafe {
        (api.arena)(
            base,
            pool.stride() as u64,
            sluice_buffer::HEADROOM as u16,
            pool.data_size() as u16,
        )
    };
}

/// Sets up `sluice_zc` over `pool` (once per process: DPDK is never started twice), after
/// [`arena`].
pub fn init(api: &Api, pool: &Arc<BufferPool>, cache: u32) -> Result<*mut RteMempool, String> {
    if POOL.set(pool.clone()).is_err() {
        return Err("zero copy is set up already".into());
    }
    let mut mp = std::ptr::null_mut();
    // SAFETY: the pool is kept in POOL for the life of the process and is the arena given to
    // `arena`; the callbacks have the shim's signatures; `mp` is a valid out pointer.
    let r = unsafe { (api.zc_init)(pool.len(), cache, buf_alloc, buf_free, buf_avail, &mut mp) };
    if r != 0 {
        return Err(api.error(r));
    }
    Ok(mp)
}

/// Sluice buffers DPDK holds now (mempool caches, device rings).
pub fn lent(api: &Api) -> u64 {
    // SAFETY: reads two counters.
    unsafe { (api.zc_lent)() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_buffer::{PageSize, PoolConfig};

    /// With the thread's cache busy (or gone), the callbacks still allocate and free, through
    /// a cache of their own flushed to the pool.
    #[test]
    fn callbacks_work_without_the_thread_cache() {
        let pool = BufferPool::new(&PoolConfig {
            buffers: 256,
            data_size: 2048,
            page_size: PageSize::Small,
            shared: false,
        })
        .unwrap();
        assert!(POOL.set(pool.clone()).is_ok());
        let mut idx = [0u32; 8];
        CACHE.with(|c| {
            let _busy = c.borrow_mut();
            // SAFETY: room for 8 indices.
            let got = unsafe { buf_alloc(idx.as_mut_ptr(), 8) };
            assert_eq!(got, 8);
            assert_eq!(pool.stats().in_use, 8);
            // SAFETY: the 8 buffers just allocated, given back once.
            unsafe { buf_free(idx.as_ptr(), 8) };
        });
        assert_eq!(pool.stats().in_use, 0, "buffers lost");
    }
}
