//! Who holds the buffer pool's buffers: the pool's own counts, and those lent out to code
//! outside the graph that gives them back by itself (a driver library's caches and device
//! rings: the dpdk plugin under zero copy), which the pool counts as in use.

use crate::Vlib;

/// A lender's count of the pool's buffers it holds now.
pub type LentCount = fn(&Vlib) -> u64;

/// The registered lenders, by name ([`register_buffer_lender`]).
#[derive(Default)]
pub struct BufferLenders(Vec<(&'static str, LentCount)>);

/// Registers `count`, the pool's buffers `who` holds now: [`buffer_use`] shows them as `lent`,
/// apart from `used`; `show buffers detail` one line per lender. Registering `who` again
/// replaces its count (a plugin started twice counts once).
pub fn register_buffer_lender(vm: &mut Vlib, who: &'static str, count: LentCount) {
    let l = &mut vm.ext_mut::<BufferLenders>().0;
    match l.iter_mut().find(|(w, _)| *w == who) {
        Some(e) => e.1 = count,
        None => l.push((who, count)),
    }
}

/// Each registered lender with the buffers it holds now.
pub fn buffer_lenders(vm: &Vlib) -> Vec<(&'static str, u64)> {
    vm.ext::<BufferLenders>().map_or(Vec::new(), |l| {
        l.0.iter().map(|&(who, count)| (who, count(vm))).collect()
    })
}

/// Buffers lent out now, over every registered lender.
pub fn buffers_lent(vm: &Vlib) -> u64 {
    vm.ext::<BufferLenders>()
        .map_or(0, |l| l.0.iter().map(|(_, count)| count(vm)).sum())
}

/// The pool's buffers by holder: `total = free + cached + used + lent`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BufferUse {
    /// Buffers in the pool.
    pub total: u64,
    /// On the pool's free list.
    pub free: u64,
    /// In per-thread caches.
    pub cached: u64,
    /// In the graph's hands (frames, queues, rings, streams).
    pub used: u64,
    /// Held by registered lenders ([`register_buffer_lender`]).
    pub lent: u64,
    /// Allocation requests that could not be satisfied in full.
    pub alloc_failures: u64,
}

/// The pool's buffers now, those lent out apart from those in use.
pub fn buffer_use(vm: &Vlib) -> BufferUse {
    let lent = buffers_lent(vm);
    let s = vm.pool.stats();
    // Lenders and the pool are read one after the other while workers run: a buffer a
    // lender counts may reach the graph (or go back) in between, so the sum can exceed
    // `in_use` for a moment; clamped, `used` never wraps.
    let lent = lent.min(s.in_use);
    BufferUse {
        total: s.total,
        free: s.free,
        cached: s.cached,
        used: s.in_use - lent,
        lent,
        alloc_failures: s.alloc_failures,
    }
}
