//! Sluice infrastructure (VPP's vppinfra): the calibrated TSC [`clock`], the hierarchical
//! [`timer`] wheel, index [`pool`]s with free lists, fixed-size [`bitmap`]s and
//! [`epoch`]-based deferred reclamation for tables read without locks, listening
//! [`unix_socket`]s, [`seqpacket`] control channels, a fast keyed [`hash`]er for integer keys, [`shm`] regions and eventfds, single-writer flow tables in one-line buckets ([`flowtab`]), and
//! control-plane [`files`] opened safely. Depends on nothing of ours.

#![warn(missing_docs)]

pub mod bihash;
pub mod bitmap;
pub mod clock;
pub mod epoch;
pub mod files;
pub mod flowtab;
pub mod hash;
pub mod pool;
pub mod seqpacket;
pub mod shm;
pub mod testing;
pub mod timer;
pub mod unix_socket;

/// Hints the CPU to bring the cache line at `p` into the L1 cache (a no-op off x86-64).
/// Tables read at random a frame at a time (hash buckets, per-flow entries) prefetch the
/// lines of later packets a stage before they read them, so the misses overlap.
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and has no architectural effect; `p` is only an
    // address, never dereferenced (any value, even dangling or null, is allowed).
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(p as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
