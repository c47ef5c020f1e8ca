//! Lock-free single-producer single-consumer handoff queues between threads.
//!
//! Each entry carries a buffer index and the node that should process it on the receiving
//! thread. Slots are atomics (plain moves on x86-64), so the queue has no `unsafe` and stays
//! sound even if misused; head and tail live on separate cache lines.

use crate::node::{Next, NodeIndex};
use crate::{CounterId, Cx};
use sluice_buffer::BufIdx;
use std::sync::atomic::{AtomicU64, Ordering};

#[repr(align(64))]
struct Padded(AtomicU64);

/// A bounded ring of (buffer, target node) pairs from one thread to another.
pub struct HandoffQueue {
    slots: Box<[AtomicU64]>,
    mask: u64,
    head: Padded,
    tail: Padded,
    congestion: Padded,
}

impl HandoffQueue {
    /// A queue with room for `size` entries (rounded up to a power of two, at least 2).
    pub fn new(size: usize) -> Self {
        let size = size.max(2).next_power_of_two();
        HandoffQueue {
            slots: (0..size).map(|_| AtomicU64::new(0)).collect(),
            mask: size as u64 - 1,
            head: Padded(AtomicU64::new(0)),
            tail: Padded(AtomicU64::new(0)),
            congestion: Padded(AtomicU64::new(0)),
        }
    }

    /// Capacity.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Entries waiting.
    pub fn len(&self) -> usize {
        (self.head.0.load(Ordering::Acquire) - self.tail.0.load(Ordering::Acquire)) as usize
    }

    /// Room left for the producer.
    pub fn free_slots(&self) -> usize {
        self.capacity() - self.len()
    }

    /// Whether no entry waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Times a producer found the queue full (`congestion drop` in VPP).
    pub fn congestion(&self) -> u64 {
        self.congestion.0.load(Ordering::Relaxed)
    }

    /// Producer side: enqueues as many entries as fit; returns how many. The caller must drop
    /// and count the rest. Only one thread may produce. The consumer may be asleep: use
    /// [`crate::Shared::handoff_enqueue`], which also wakes it.
    pub fn enqueue(&self, bufs: &[BufIdx], node: NodeIndex) -> usize {
        let head = self.head.0.load(Ordering::Relaxed);
        let tail = self.tail.0.load(Ordering::Acquire);
        let free = self.slots.len() as u64 - (head - tail);
        let n = (bufs.len() as u64).min(free);
        if n < bufs.len() as u64 {
            self.congestion.0.fetch_add(1, Ordering::Relaxed);
        }
        for (k, b) in bufs[..n as usize].iter().enumerate() {
            let v = ((node.0 as u64) << 32) | b.0 as u64;
            self.slots[((head + k as u64) & self.mask) as usize].store(v, Ordering::Relaxed);
        }
        self.head.0.store(head + n, Ordering::Release);
        n as usize
    }

    /// Consumer side: dequeues up to `out.len()` entries; returns how many. Only one thread
    /// may consume.
    pub fn dequeue(&self, out: &mut [(BufIdx, NodeIndex)]) -> usize {
        let tail = self.tail.0.load(Ordering::Relaxed);
        let head = self.head.0.load(Ordering::Acquire);
        let n = ((head - tail) as usize).min(out.len());
        for (k, o) in out[..n].iter_mut().enumerate() {
            let v = self.slots[((tail + k as u64) & self.mask) as usize].load(Ordering::Relaxed);
            *o = (BufIdx(v as u32), NodeIndex((v >> 32) as u32));
        }
        self.tail.0.store(tail + n as u64, Ordering::Release);
        n
    }
}

impl Cx<'_> {
    /// Hands `bufs` to the running node on thread `to` through the handoff queue from this
    /// thread ([`crate::Shared::handoff_enqueue`], which wakes it), counts what the queue
    /// took in `handoff`, and sends what a full queue refused to `drop` (the node's
    /// `error-drop` arc) with error `congestion` (VPP's `congestion drop`). Returns how many
    /// the queue took: the refused ones are the rest of `bufs`, still this thread's until
    /// `error-drop` frees them. Out of line: called once per frame at most, and inlined it
    /// changed the code of the callers' frame functions (NAT44 node 514.3 -> 519.0 instr/pkt
    /// on its plain path; 514.0 out of line).
    #[inline(never)]
    pub fn handoff_or_drop(
        &mut self,
        to: usize,
        bufs: &[BufIdx],
        handoff: impl CounterId,
        congestion: impl CounterId,
        drop: Next,
    ) -> usize {
        let node = self.node();
        let took = self.shared().handoff_enqueue(self.thread(), to, bufs, node);
        self.count(handoff, took as u64);
        let lost = &bufs[took..];
        if !lost.is_empty() {
            let e = self.error(congestion);
            let arena = self.arena();
            for &bi in lost {
                // SAFETY: the queue refused these buffers: the running node still owns
                // them; one header at a time.
                unsafe { arena.header_mut(bi) }.error = e;
            }
            self.enqueue_all(drop, lost);
        }
        took
    }
}
