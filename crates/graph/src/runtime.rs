//! One thread's graph instance and the dispatcher loop (VPP's `vlib_main_loop`).
//!
//! Each thread owns a [`ThreadGraph`]: one instance of every node, one input queue per node,
//! the pending list, a buffer cache and (on the main thread) the process-node timer wheel.
//! Buffers move between nodes as `u32` indices appended to the target node's queue; a node is
//! called with at most [`FRAME_SIZE`] of them at a time.

use crate::handoff::HandoffQueue;
use crate::node::{
    FrameScratch, Next, NodeFn, NodeIndex, NodeKind, Suspend, TraceRecord, Wake, SCRATCH_AHEAD,
};
use crate::pcap::PcapTrace;
use crate::registry::{NodeSnapshot, Registry};
use crate::stats::NodeStats;
use crate::trace::{pack_index, TraceEntry, TraceShared};
use crate::wake::{self, Epoll, Waker, WAKE_TOKEN};
use crate::FRAME_SIZE;
use sluice_buffer::{flags, Arena, BufIdx, Buffer, BufferCache, BufferPool, Stamp};
use sluice_infra::clock::{rdtsc, Clock};
use sluice_infra::timer::{TimerHandle, TimerWheel};
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// State shared by every thread: clock, trace, pcap capture, handoff queues, wake-ups.
pub struct Shared {
    /// Calibrated TSC clock.
    pub clock: Clock,
    /// Packet trace.
    pub trace: TraceShared,
    /// `pcap trace`.
    pub pcap: PcapTrace,
    /// `handoff[from][to]`: single-producer single-consumer queues between threads.
    pub handoff: Vec<Vec<Arc<HandoffQueue>>>,
    /// Number of threads (main + workers).
    pub n_threads: usize,
    /// Quiescent-state counters: bumped by each thread between loops, so tables written by
    /// the main thread can reclaim memory once every worker moved on.
    pub epochs: Arc<sluice_infra::epoch::Epochs>,
    /// One wake-up eventfd per thread (see [`crate::wake`]).
    pub wakers: Vec<Waker>,
    /// Dispatcher loops run, per thread (the statistics segment's `/sys/loops`).
    pub loops: Box<[crate::stats::PaddedCounter]>,
    /// A worker's busy round that found no work yields the CPU ([`crate::Vlib::set_poll_yield`]).
    pub poll_yield: std::sync::atomic::AtomicBool,
}

impl Shared {
    /// Shared state for `n_threads` threads with handoff queues of `ring` entries.
    pub fn new(clock: Clock, n_threads: usize, ring: usize) -> std::io::Result<Shared> {
        Ok(Shared {
            clock,
            trace: TraceShared::default(),
            pcap: PcapTrace::default(),
            handoff: (0..n_threads)
                .map(|_| {
                    (0..n_threads)
                        .map(|_| Arc::new(HandoffQueue::new(ring)))
                        .collect()
                })
                .collect(),
            n_threads,
            epochs: Arc::new(sluice_infra::epoch::Epochs::new(n_threads)),
            wakers: (0..n_threads)
                .map(|_| Waker::new())
                .collect::<std::io::Result<_>>()?,
            loops: (0..n_threads.max(1)).map(|_| Default::default()).collect(),
            poll_yield: Default::default(),
        })
    }

    /// Wakes thread `t` (control-plane work was posted for it).
    pub fn wake(&self, t: usize) {
        if let Some(w) = self.wakers.get(t) {
            w.wake();
        }
    }

    /// Wakes every thread (shared data-path state changed, e.g. a memif connection).
    pub fn wake_all(&self) {
        for w in &self.wakers {
            w.wake();
        }
    }

    /// Hands buffers from thread `from` to node `node` on thread `to` and wakes `to` if it
    /// sleeps. Returns how many the queue took (the caller drops and counts the rest).
    #[inline]
    pub fn handoff_enqueue(
        &self,
        from: usize,
        to: usize,
        bufs: &[BufIdx],
        node: NodeIndex,
    ) -> usize {
        let n = self.handoff[from][to].enqueue(bufs, node);
        if n > 0 {
            self.wakers[to].wake_if_sleeping();
        }
        n
    }
}

/// How many counters of a node are accumulated locally and flushed once per call.
const FAST_COUNTERS: usize = 32;

/// Everything of a thread's graph except the node instances (so a node can borrow it while
/// it runs).
pub struct ThreadState {
    thread: usize,
    pool: Arc<BufferPool>,
    bufs: BufferCache,
    queues: Vec<Vec<BufIdx>>,
    pending: Vec<u32>,
    in_pending: Vec<bool>,
    nexts: Vec<Vec<NodeIndex>>,
    kinds: Vec<NodeKind>,
    stats: Vec<Arc<NodeStats>>,
    error_base: Vec<u16>,
    err_map: Vec<(NodeIndex, u16)>,
    scratch: [u64; FAST_COUNTERS],
    scratch_dirty: bool,
    shared: Arc<Shared>,
    signals: Vec<(NodeIndex, u64)>,
    now_tsc: u64,
    drop_node: Option<NodeIndex>,
    epoll: Epoll,
    irq_pending: Vec<bool>,
    irq_tokens: Vec<(u32, u32)>,
    /// Nodes that asked for prompt collection of this thread's epoll while it is busy
    /// ([`Cx::want_prompt_irqs`]).
    prompt_irqs: Vec<NodeIndex>,
    /// The frame scratch the thread's nodes share ([`Cx::take_frame_scratch`]); `None`
    /// while a node holds it.
    frame_scratch: Option<Box<FrameScratch>>,
    /// A frame handed on unchanged (see [`Handed`]).
    hand: Handed,
}

/// What the dispatcher knows of a frame handed on unchanged, so that the node it goes to
/// need not compare it with the addresses in the frame scratch ([`Cx::resolve_frame`]).
///
/// A node that resolved its whole frame (`Cx::resolve_frame` of the slice the dispatcher
/// gave it, which it cannot change while it runs) notes the scratch's stamp
/// (`FrameAddrs::stamp`: which resolve wrote the addresses). When it then sends that
/// whole slice along one arc to a node whose queue was empty (`Cx::enqueue_all`,
/// `Cx::enqueue_to_next` with one next for all), the dispatcher records the target and the
/// stamp; any later push to that target forgets it (its queue no longer holds exactly the
/// frame). When the dispatcher takes the target's queue it gives the stamp to that node's
/// call: if the scratch still carries it (no resolve wrote it since, whatever node ran in
/// between), it holds this very frame's addresses.
#[derive(Clone, Copy)]
struct Handed {
    /// The running node's frame (address and length of the slice the dispatcher gave it;
    /// 0, 0: none, an input or process node).
    frame: (usize, usize),
    /// The stamp of the scratch after the running node resolved that frame (`NONE`: it
    /// did not).
    frame_stamp: Stamp,
    /// The node whose queue holds exactly a frame handed on whole (`u32::MAX`: none), and
    /// the stamp of its addresses.
    to: u32,
    to_stamp: Stamp,
    /// For the running node: the stamp of its frame's addresses, when it was handed on
    /// whole (`NONE`: not).
    hint: Stamp,
}

impl Handed {
    const NONE: Handed = Handed {
        frame: (0, 0),
        frame_stamp: Stamp::NONE,
        to: u32::MAX,
        to_stamp: Stamp::NONE,
        hint: Stamp::NONE,
    };

    /// Whether `bs` is the running node's frame (the very slice, not equal values).
    #[inline(always)]
    fn is_frame(&self, bs: &[BufIdx]) -> bool {
        self.frame == (bs.as_ptr() as usize, bs.len())
    }
}

/// The context handed to a node while it runs.
pub struct Cx<'a> {
    st: &'a mut ThreadState,
    node: NodeIndex,
}

impl<'a> Cx<'a> {
    /// Thread index (0 = main).
    #[inline(always)]
    pub fn thread(&self) -> usize {
        self.st.thread
    }

    /// The node being run.
    #[inline(always)]
    pub fn node(&self) -> NodeIndex {
        self.node
    }

    /// The buffer pool.
    #[inline(always)]
    pub fn pool(&self) -> &BufferPool {
        &self.st.pool
    }

    /// The buffer pool, borrowed for the whole context lifetime (no reference-count traffic,
    /// and usable while the context is borrowed mutably).
    #[inline(always)]
    pub fn pool_ref(&self) -> &'a BufferPool {
        // SAFETY: the thread state owns an Arc to the pool for the thread's lifetime, which
        // covers 'a; the pool is never moved out of the Arc.
        unsafe { &*Arc::as_ptr(&self.st.pool) }
    }

    /// The pool's address arithmetic, for a per-frame loop over buffers (plain values the
    /// compiler keeps in registers; see [`Arena`]).
    #[inline(always)]
    pub fn arena(&self) -> Arena<'a> {
        self.pool_ref().arena()
    }

    /// The thread's frame scratch (a frame's buffer addresses and next arcs), shared by
    /// its nodes, to give back with [`Cx::put_frame_scratch`] at the end of the frame. A
    /// frame handed on whole keeps its addresses from node to node ([`Arena::resolve`]).
    /// If a node already holds it (never on the dispatcher's path), a fresh one (~6 KiB
    /// allocated per call): debug builds stop there, as a node that does not give it back
    /// would otherwise cost an allocation per frame unnoticed.
    #[inline(always)]
    pub fn take_frame_scratch(&mut self) -> Box<FrameScratch> {
        debug_assert!(
            self.st.frame_scratch.is_some(),
            "frame scratch taken while already held (not given back?)"
        );
        self.st.frame_scratch.take().unwrap_or_default()
    }

    /// A node's frame prologue: the frame cut to [`FRAME_SIZE`] (the dispatcher's contract,
    /// which debug builds check; the cut lets the compiler drop the per-packet loop's bound
    /// checks), the thread's frame scratch ([`Cx::take_frame_scratch`], to give back with
    /// [`Cx::put_frame_scratch`]) and the frame's addresses resolved into it, with
    /// [`SCRATCH_AHEAD`] entries after it as every node asks, so that the next node keeps
    /// those of a frame handed on whole ([`Arena::resolve`]; panics on an index outside the
    /// arena). Returns the arena, the frame and the scratch.
    #[inline(always)]
    #[track_caller]
    pub fn resolve_frame<'f>(
        &mut self,
        frame: &'f [BufIdx],
    ) -> (Arena<'a>, &'f [BufIdx], Box<FrameScratch>) {
        let arena = self.arena();
        debug_assert!(frame.len() <= FRAME_SIZE, "frame of {}", frame.len());
        let frame = &frame[..frame.len().min(FRAME_SIZE)];
        let mut s = self.take_frame_scratch();
        if self.st.hand.is_frame(frame) {
            // SAFETY: `hint` is the stamp a node read right after resolving the frame it
            // handed on whole, and this frame holds the same indices: the dispatcher gave
            // the hint for the queue that received exactly that frame (`Handed`).
            unsafe { arena.resolve_stamped(frame, SCRATCH_AHEAD, &mut s.addrs, self.st.hand.hint) };
            self.st.hand.frame_stamp = s.addrs.stamp();
        } else {
            arena.resolve(frame, SCRATCH_AHEAD, &mut s.addrs);
        }
        (arena, frame, s)
    }

    /// The frame scratch with `frame`'s addresses when the node before handed this
    /// node's frame on unchanged and no resolve wrote the scratch since (see
    /// [`Cx::resolve_frame`]); `None` otherwise (nothing taken). For a node whose own loop
    /// needs no addresses: it uses these when they come free. Give the scratch back with
    /// [`Cx::put_frame_scratch`].
    #[inline(always)]
    pub fn handed_frame<'f>(
        &mut self,
        frame: &'f [BufIdx],
    ) -> Option<(Arena<'a>, &'f [BufIdx], Box<FrameScratch>)> {
        let h = self.st.hand;
        let arena = self.arena();
        let s = self.st.frame_scratch.as_ref()?;
        if !(h.is_frame(frame) && arena.holds_stamped(frame, SCRATCH_AHEAD, &s.addrs, h.hint)) {
            return None;
        }
        debug_assert!(frame.len() <= FRAME_SIZE, "frame of {}", frame.len());
        let frame = &frame[..frame.len().min(FRAME_SIZE)];
        self.st.hand.frame_stamp = h.hint;
        Some((arena, frame, self.take_frame_scratch()))
    }

    /// Gives back the scratch of [`Cx::take_frame_scratch`].
    #[inline(always)]
    pub fn put_frame_scratch(&mut self, s: Box<FrameScratch>) {
        self.st.frame_scratch = Some(s);
    }

    /// This thread's buffer cache (batch alloc/free).
    #[inline(always)]
    pub fn bufs(&mut self) -> &mut BufferCache {
        &mut self.st.bufs
    }

    /// A view of a buffer this node owns.
    ///
    /// # Safety
    /// `b` must be owned by the running node (in its frame or freshly allocated by it), and no
    /// other view of it may be alive.
    #[inline(always)]
    pub unsafe fn buffer(&self, b: BufIdx) -> Buffer<'a> {
        // SAFETY: the pool outlives the context (the thread state holds an Arc to it for the
        // thread's lifetime), so extending the borrow to 'a is sound; ownership of `b` is the
        // caller's contract.
        unsafe { self.pool_ref().buffer(b) }
    }

    /// Shared state (clock, trace, pcap).
    #[inline(always)]
    pub fn shared(&self) -> &Arc<Shared> {
        &self.st.shared
    }

    /// TSC at the start of this dispatch round.
    #[inline(always)]
    pub fn now_tsc(&self) -> u64 {
        self.st.now_tsc
    }

    /// Seconds since the clock was calibrated.
    pub fn now_secs(&self) -> f64 {
        self.st.shared.clock.now_secs()
    }

    /// Number of next arcs of the running node.
    pub fn n_nexts(&self) -> usize {
        self.st.nexts[self.node.0 as usize].len()
    }

    /// Sends one buffer along arc `next`.
    #[inline(always)]
    pub fn enqueue(&mut self, next: Next, b: BufIdx) {
        let target = self.target(next);
        self.st.push(target, std::slice::from_ref(&b));
    }

    /// Sends buffers along one arc.
    #[inline(always)]
    pub fn enqueue_all(&mut self, next: Next, bs: &[BufIdx]) {
        if bs.is_empty() {
            return;
        }
        let target = self.target(next);
        self.st.push_whole(target, bs);
    }

    /// [`Cx::enqueue_all`] of a frame this node resolved into the frame scratch itself
    /// (an input node's burst, which the dispatcher does not know as a frame): `stamp` is
    /// the scratch's [`sluice_buffer::FrameAddrs::stamp`] read right after that resolve.
    /// The node `next` leads to gets the frame handed on unchanged (its
    /// [`Cx::resolve_frame`] keeps the addresses without comparing the indices) when its
    /// queue was empty and no resolve writes the scratch before it runs.
    ///
    /// # Safety
    /// `stamp` is [`Stamp::NONE`] or was read from the frame scratch right after a resolve
    /// of a frame whose indices are `bs`'s (the same values, in order; the node changed
    /// none since), as [`Arena::resolve_stamped`] asks of its stamp.
    #[inline]
    pub unsafe fn enqueue_all_resolved(&mut self, next: Next, bs: &[BufIdx], stamp: Stamp) {
        if bs.is_empty() {
            return;
        }
        let target = self.target(next);
        self.st.push_stamped(target, bs, stamp);
    }

    /// Frees this node's frame (a node at the end of the path: a tx node that has sent
    /// it). A frame handed on unchanged ([`Cx::handed_frame`]) is freed through the
    /// addresses the node before resolved ([`BufferCache::free_at`]: no bound check
    /// pass, the heads' flags read through them); any other as [`Cx::free`].
    #[inline]
    pub fn free_frame(&mut self, frame: &[BufIdx]) {
        match self.handed_frame(frame) {
            Some((_, handed, s)) => {
                // SAFETY: `handed_frame` gives the scratch only when it holds the
                // addresses of `handed` (the frame, cut to `FRAME_SIZE`) in this thread's
                // arena, the pool of `bufs`; the node owns its frame and hands it over.
                unsafe { self.st.bufs.free_at(handed, &s.addrs) };
                self.put_frame_scratch(s);
                let rest = &frame[handed.len()..];
                if !rest.is_empty() {
                    self.st.bufs.free(rest);
                }
            }
            None => self.st.bufs.free(frame),
        }
    }

    /// Sends `bufs[i]` along arc `nexts[i]`. Fast path when every packet takes the same arc
    /// (one copy of the whole vector); otherwise runs of equal arcs are copied together.
    #[inline]
    pub fn enqueue_to_next(&mut self, bufs: &[BufIdx], nexts: &[u16]) {
        let n = bufs.len().min(nexts.len());
        if n == 0 {
            return;
        }
        let first = nexts[0];
        // Branch-free (vectorised) test of the whole vector, no early exit.
        if nexts[..n].iter().fold(0, |d, &x| d | (x ^ first)) == 0 {
            let t = self.target(Next(first));
            self.st.push_whole(t, &bufs[..n]);
            return;
        }
        let mut start = 0;
        while start < n {
            let cur = nexts[start];
            let mut end = start + 1;
            while end < n && nexts[end] == cur {
                end += 1;
            }
            let t = self.target(Next(cur));
            self.st.push(t, &bufs[start..end]);
            start = end;
        }
    }

    /// Sends buffers directly to a node by index (used by handoff and input nodes whose
    /// targets are chosen at runtime).
    #[inline]
    pub fn enqueue_to_node(&mut self, node: NodeIndex, bs: &[BufIdx]) {
        if (node.0 as usize) < self.st.queues.len() {
            self.st.push(node, bs);
        } else {
            self.drop_unhandled(bs);
        }
    }

    #[inline(always)]
    fn target(&self, next: Next) -> NodeIndex {
        match self.st.nexts[self.node.0 as usize].get(next.0 as usize) {
            Some(&t) => t,
            // An arc index the node never declared: a bug in the node. Debug builds (the
            // tests) stop on it; release builds send the packets to the drop node, counted
            // as `unhandled`, rather than anywhere else.
            None => {
                debug_assert!(
                    false,
                    "node #{} sent a packet along arc {}, but declared only {} arcs",
                    self.node.0,
                    next.0,
                    self.st.nexts[self.node.0 as usize].len()
                );
                self.st.drop_node.unwrap_or(self.node)
            }
        }
    }

    /// In debug builds, stops on a counter the running node did not declare.
    #[inline(always)]
    fn check_counter(&self, i: usize) {
        debug_assert!(
            i < self.st.stats[self.node.0 as usize].per_thread[self.st.thread]
                .counters
                .len(),
            "node #{} used counter {i}, which it did not declare",
            self.node.0
        );
    }

    /// The graph-wide error code of the running node's counter `c` (store it in `b.hdr.error`
    /// before sending the packet to `error-drop`).
    #[inline(always)]
    pub fn error(&self, c: impl crate::CounterId) -> u16 {
        let i = c.index();
        self.check_counter(i);
        self.st.error_base[self.node.0 as usize] + i as u16
    }

    /// Adds `n` to the running node's counter `c` (flushed once per call).
    #[inline(always)]
    pub fn count(&mut self, c: impl crate::CounterId, n: u64) {
        let i = c.index();
        self.check_counter(i);
        if i < FAST_COUNTERS {
            self.st.scratch[i] += n;
            self.st.scratch_dirty = true;
        } else if let Some(c) = self.st.stats[self.node.0 as usize].per_thread[self.st.thread]
            .counters
            .get(i)
        {
            c.add(n);
        }
    }

    /// Counts a packet against a graph-wide error code (what `error-drop` does).
    #[inline]
    pub fn count_error_code(&mut self, code: u16, n: u64) {
        if let Some(&(node, local)) = self.st.err_map.get(code as usize) {
            if let Some(c) = self.st.stats[node.0 as usize].per_thread[self.st.thread]
                .counters
                .get(local as usize)
            {
                c.add(n);
            }
        }
    }

    /// Frees buffers (and their chains).
    #[inline]
    pub fn free(&mut self, bs: &[BufIdx]) {
        self.st.bufs.free(bs);
    }

    /// Frees buffers a node could not handle, counting them on `error-drop`'s
    /// "unhandled" counter.
    pub fn drop_unhandled(&mut self, bs: &[BufIdx]) {
        if let Some(d) = self.st.drop_node {
            let unhandled = crate::CounterId::index(crate::nodes::ErrorDropCounter::Unhandled);
            if let Some(c) = self.st.stats[d.0 as usize].per_thread[self.st.thread]
                .counters
                .get(unhandled)
            {
                c.add(bs.len() as u64);
            }
        }
        self.st.bufs.free(bs);
    }

    /// Signals an event to a process node (delivered on the main thread's next loop).
    pub fn signal(&mut self, node: NodeIndex, data: u64) {
        self.st.signals.push((node, data));
    }

    /// Registers `fd` with this thread's epoll for the running node (interrupt and adaptive
    /// rx modes): when it becomes readable the thread wakes and polls the node, which gets
    /// `token` from [`Cx::take_irqs`]. Level-triggered: the node must consume what made the
    /// fd readable (read an eventfd, release ring blocks) or it fires again.
    pub fn irq_register(&mut self, fd: RawFd, token: u32) -> std::io::Result<()> {
        self.st
            .epoll
            .add(fd, ((self.node.0 as u64) << 32) | token as u64)
    }

    /// Removes `fd` from this thread's epoll. Call before the fd is closed or the queue
    /// leaves this thread.
    pub fn irq_unregister(&mut self, fd: RawFd) {
        self.st.epoll.del(fd);
    }

    /// Asks (`on`) or stops asking that this thread's epoll events be collected often
    /// while the thread is busy (the main loop: every 50 µs), not only at its 1 ms check:
    /// for a node whose fds carry requests someone waits on (the host stack's control
    /// sockets while an application is attached). Each ask costs a busy thread a
    /// zero-timeout `epoll_wait` per collection, so a node asks only while it helps.
    pub fn want_prompt_irqs(&mut self, on: bool) {
        let v = &mut self.st.prompt_irqs;
        match (on, v.iter().position(|&n| n == self.node)) {
            (true, None) => v.push(self.node),
            (false, Some(i)) => {
                v.swap_remove(i);
            }
            _ => {}
        }
    }

    /// Moves the tokens of the running node's fds that fired since its last poll into `out`.
    pub fn take_irqs(&mut self, out: &mut Vec<u32>) {
        let me = self.node.0;
        if self.st.irq_tokens.is_empty() {
            return;
        }
        self.st.irq_tokens.retain(|&(n, t)| {
            if n == me {
                out.push(t);
                false
            } else {
                true
            }
        });
    }

    /// How many more packets this (input) node should mark for tracing.
    #[inline]
    pub fn trace_budget(&self) -> u32 {
        let t = &self.st.shared.trace;
        if !t.budget_any.load(Ordering::Relaxed) {
            return 0;
        }
        t.lock().budget.get(&self.node).copied().unwrap_or(0)
    }

    /// Starts tracing a packet produced by this input node (within its budget), recording
    /// the first entry with `rec`. False: not traced (no budget, or the node was added with
    /// `filter` and the packet does not match the `classify filter trace`); the caller's
    /// budget is then unchanged.
    pub fn trace_start<R: TraceRecord>(&mut self, b: &mut Buffer<'_>, rec: R) -> bool {
        let t = &self.st.shared.trace;
        let mut s = t.lock();
        if s.filtered.contains(&self.node)
            && !s.filter.as_ref().is_some_and(|f| f.matches(b.data()))
        {
            return false;
        }
        let Some(left) = s.budget.get_mut(&self.node) else {
            return false;
        };
        if *left == 0 {
            return false;
        }
        *left -= 1;
        if s.budget.values().all(|&v| v == 0) {
            t.budget_any.store(false, Ordering::Relaxed);
        }
        let i = s.packets.len();
        s.packets.push(vec![TraceEntry {
            node: self.node,
            tsc: rdtsc(),
            thread: self.st.thread as u16,
            rec: Some(Box::new(rec)),
            data: Vec::new(),
            error: 0,
        }]);
        b.hdr.flags |= flags::TRACED;
        b.hdr.trace_index = pack_index(s.generation, i);
        true
    }

    /// Attaches a record to a traced packet's entry for the running node.
    #[inline]
    pub fn trace<R: TraceRecord>(&mut self, b: &Buffer<'_>, rec: R) {
        if !b.hdr.is_traced() {
            return;
        }
        let mut s = self.st.shared.trace.lock();
        if let Some(e) = TraceShared::entries_mut(&mut s, b.hdr.trace_index) {
            match e.last_mut() {
                Some(last) if last.node == self.node && last.rec.is_none() => {
                    last.rec = Some(Box::new(rec))
                }
                _ => e.push(TraceEntry {
                    node: self.node,
                    tsc: rdtsc(),
                    thread: self.st.thread as u16,
                    rec: Some(Box::new(rec)),
                    data: Vec::new(),
                    error: 0,
                }),
            }
        }
    }

    /// Captures a frame at a `pcap trace` point if that point is enabled. `by_tx` selects the
    /// interface filter field (tx_if instead of rx_if).
    #[inline]
    pub fn pcap_capture(&mut self, pt: u8, frame: &[BufIdx], by_tx: bool) {
        let sh = self.st.shared.clone();
        if sh.pcap.points.load(Ordering::Relaxed) & pt == 0 {
            return;
        }
        let now = sh.clock.now_secs() + sh.clock_epoch_offset();
        // All packets' bytes in one buffer (two allocations per frame, not one per packet).
        let mut bytes = Vec::new();
        let mut meta = Vec::with_capacity(frame.len());
        for &bi in frame {
            let start = bytes.len();
            self.st.bufs.copy_chain(bi, &mut bytes, start + 65536);
            // SAFETY: the running node owns the frame; this short-lived shared view reads
            // two header fields.
            let h = unsafe { self.st.pool.header(bi) };
            let intf = if by_tx { h.tx_if } else { h.rx_if };
            meta.push((intf, start, (bytes.len() - start) as u32));
        }
        sh.pcap.capture(
            pt,
            meta.iter()
                .map(|&(i, s, l)| (i, now, &bytes[s..s + l as usize], l)),
        );
    }
}

impl Shared {
    /// Offset from clock seconds to Unix time, for pcap timestamps.
    pub fn clock_epoch_offset(&self) -> f64 {
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        unix - self.clock.now_secs()
    }
}

impl ThreadState {
    #[inline(always)]
    fn push(&mut self, target: NodeIndex, bs: &[BufIdx]) {
        if self.hand.to == target.0 {
            self.hand.to = u32::MAX;
        }
        let t = target.0 as usize;
        let q = &mut self.queues[t];
        q.extend_from_slice(bs);
        if !self.in_pending[t] {
            self.in_pending[t] = true;
            self.pending.push(target.0);
        }
    }
}

impl ThreadState {
    /// [`ThreadState::push`] of what may be the running node's whole frame: if it is, and
    /// the node resolved it and `target`'s queue was empty, `target` gets it handed on
    /// unchanged ([`Handed`]).
    #[inline(always)]
    fn push_whole(&mut self, target: NodeIndex, bs: &[BufIdx]) {
        // The test after the push, in this order: written as `push_stamped` of the stamp
        // (`is_frame` first), interface-output's four-packet loop lost 0.3 instructions a
        // packet to the code around it (callgrind, session 18).
        self.push(target, bs);
        let h = &mut self.hand;
        if !h.frame_stamp.is_none()
            && h.is_frame(bs)
            && self.queues[target.0 as usize].len() == bs.len()
        {
            h.to = target.0;
            h.to_stamp = h.frame_stamp;
        }
    }

    /// [`ThreadState::push`] of a frame whose addresses carry `stamp` (`NONE`: none known):
    /// if `target`'s queue was empty, `target` gets it handed on unchanged ([`Handed`]).
    /// The caller vouches for `stamp` as [`Arena::resolve_stamped`] asks.
    #[inline(always)]
    fn push_stamped(&mut self, target: NodeIndex, bs: &[BufIdx], stamp: Stamp) {
        self.push(target, bs);
        if !stamp.is_none() && self.queues[target.0 as usize].len() == bs.len() {
            self.hand.to = target.0;
            self.hand.to_stamp = stamp;
        }
    }
}

/// Process-node bookkeeping on the main thread.
struct ProcState {
    node: NodeIndex,
    waiting: Suspend,
    started: bool,
    timer: Option<TimerHandle>,
    events: Vec<u64>,
}

/// One thread's graph: node instances + state + dispatcher.
pub struct ThreadGraph {
    fns: Vec<Option<Box<dyn NodeFn>>>,
    st: ThreadState,
    inputs: Vec<NodeIndex>,
    procs: Vec<ProcState>,
    wheel: TimerWheel<u32>,
    spare: Vec<BufIdx>,
    expired: Vec<u32>,
    events: Vec<libc::epoll_event>,
    /// Dispatcher loops run.
    pub loops: u64,
}

impl ThreadGraph {
    /// Instantiates every node of `reg` for thread `thread` (process nodes only on thread 0,
    /// main-only nodes only on thread 0).
    pub fn new(
        reg: &Registry,
        thread: usize,
        pool: Arc<BufferPool>,
        shared: Arc<Shared>,
    ) -> std::io::Result<Self> {
        let now = shared.clock.now_secs();
        let epoll = Epoll::new()?;
        if let Some(w) = shared.wakers.get(thread) {
            epoll.add(w.raw_fd(), WAKE_TOKEN)?;
        }
        let mut tg = ThreadGraph {
            fns: Vec::new(),
            st: ThreadState {
                thread,
                bufs: pool.cache(),
                pool,
                queues: Vec::new(),
                pending: Vec::with_capacity(64),
                in_pending: Vec::new(),
                nexts: Vec::new(),
                kinds: Vec::new(),
                stats: Vec::new(),
                error_base: Vec::new(),
                err_map: reg.error_table().to_vec(),
                scratch: [0; FAST_COUNTERS],
                scratch_dirty: false,
                shared,
                signals: Vec::new(),
                now_tsc: rdtsc(),
                drop_node: reg.find("error-drop"),
                epoll,
                irq_pending: Vec::new(),
                irq_tokens: Vec::new(),
                prompt_irqs: Vec::new(),
                frame_scratch: Some(Box::default()),
                hand: Handed::NONE,
            },
            inputs: Vec::new(),
            procs: Vec::new(),
            wheel: TimerWheel::new(1e-3, now),
            spare: Vec::with_capacity(FRAME_SIZE * 4),
            expired: Vec::new(),
            events: vec![libc::epoll_event { events: 0, u64: 0 }; 64],
            loops: 0,
        };
        for n in reg.nodes() {
            tg.instantiate(reg, n.index);
        }
        Ok(tg)
    }

    /// Instantiates node `i` (used by [`ThreadGraph::new`]).
    pub fn instantiate(&mut self, reg: &Registry, i: NodeIndex) {
        self.instantiate_snapshot(&reg.snapshot(i));
    }

    /// Instantiates a node from a registry snapshot (nodes added at runtime on workers).
    pub fn instantiate_snapshot(&mut self, info: &NodeSnapshot) {
        let i = info.index;
        let ix = i.0 as usize;
        while self.fns.len() <= ix {
            self.fns.push(None);
            self.st.queues.push(Vec::with_capacity(FRAME_SIZE));
            self.st.in_pending.push(false);
            self.st.nexts.push(Vec::new());
            self.st.kinds.push(NodeKind::Internal);
            self.st.stats.push(info.stats.clone());
            self.st.error_base.push(0);
            self.st.irq_pending.push(false);
        }
        let here = self.st.thread == 0 || info.on_workers;
        let here = here && !(info.kind == NodeKind::Process && self.st.thread != 0);
        self.fns[ix] = here.then(|| (info.factory)(self.st.thread));
        self.st.nexts[ix] = info.nexts.clone();
        self.st.kinds[ix] = info.kind;
        self.st.stats[ix] = info.stats.clone();
        self.st.error_base[ix] = info.error_base;
        self.st.err_map = info.err_map.clone();
        if here && matches!(info.kind, NodeKind::Input | NodeKind::PreInput) {
            // Pre-input nodes first, then inputs, each in registration order.
            self.inputs.push(i);
            let kinds = &self.st.kinds;
            self.inputs
                .sort_by_key(|n| (kinds[n.0 as usize] != NodeKind::PreInput, n.0));
        }
        if here && info.kind == NodeKind::Process {
            let h = self.wheel.start(self.st.shared.clock.now_secs(), 0.0, i.0);
            self.procs.push(ProcState {
                node: i,
                waiting: Suspend::Timeout(0.0),
                started: false,
                timer: Some(h),
                events: Vec::new(),
            });
        }
    }

    /// Replaces node `i`'s next arcs (after `add_next`).
    pub fn set_nexts(&mut self, i: NodeIndex, nexts: Vec<NodeIndex>) {
        if let Some(n) = self.st.nexts.get_mut(i.0 as usize) {
            *n = nexts;
        }
    }

    /// Whether another thread handed this thread buffers that wait in a queue.
    pub fn has_inbound_handoff(&self) -> bool {
        let me = self.st.thread;
        (0..self.st.shared.n_threads).any(|f| !self.st.shared.handoff[f][me].is_empty())
    }

    /// Thread index.
    pub fn thread(&self) -> usize {
        self.st.thread
    }

    /// Shared state.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.st.shared
    }

    /// The thread's buffer cache.
    pub fn bufs(&mut self) -> &mut BufferCache {
        &mut self.st.bufs
    }

    /// The concrete instance of node `i` on this thread, if it runs here.
    pub fn node_mut<T: 'static>(&mut self, i: NodeIndex) -> Option<&mut T> {
        self.fns
            .get_mut(i.0 as usize)?
            .as_mut()?
            .as_any()
            .downcast_mut::<T>()
    }

    /// Replaces node `i`'s instance on this thread (the node-level test harness,
    /// [`crate::testing`], puts capture nodes in place of a node's next nodes). Returns the
    /// previous instance; nothing when the node does not run on this thread.
    pub fn replace_node(&mut self, i: NodeIndex, f: Box<dyn NodeFn>) -> Option<Box<dyn NodeFn>> {
        self.fns.get_mut(i.0 as usize)?.replace(f)
    }

    /// Runs `f` with node `i`'s instance and a context for it (control-plane operations that
    /// need to allocate or free buffers, e.g. deleting a stream).
    pub fn with_node<T: 'static, R>(
        &mut self,
        i: NodeIndex,
        f: impl FnOnce(&mut T, &mut Cx) -> R,
    ) -> Option<R> {
        let node = self
            .fns
            .get_mut(i.0 as usize)?
            .as_mut()?
            .as_any()
            .downcast_mut::<T>()?;
        let mut cx = Cx {
            st: &mut self.st,
            node: i,
        };
        Some(f(node, &mut cx))
    }

    /// Injects buffers into node `i`'s queue (tests, handoff, control plane).
    pub fn inject(&mut self, i: NodeIndex, bs: &[BufIdx]) {
        self.st.push(i, bs);
    }

    /// Whether some input node wants to be polled (else the thread may sleep).
    pub fn wants_poll(&self) -> bool {
        self.inputs.iter().any(|&i| {
            self.st.irq_pending[i.0 as usize]
                || self.fns[i.0 as usize].as_ref().is_some_and(|f| f.active())
        }) || !self.st.pending.is_empty()
            || !self.st.signals.is_empty()
    }

    /// Every input node on this thread and whether it is polled now ([`NodeFn::polling`]).
    pub fn input_states(&self) -> Vec<(NodeIndex, bool)> {
        self.inputs
            .iter()
            .filter_map(|&i| Some((i, self.fns[i.0 as usize].as_ref()?.polling())))
            .collect()
    }

    /// Seconds until the next process-node timer, if any.
    pub fn next_timer_in(&self) -> Option<f64> {
        self.wheel
            .next_deadline()
            .map(|d| (d - self.st.shared.clock.now_secs()).max(0.0))
    }

    /// The shortest `poll_interval` of this thread's input nodes: how often an idle thread
    /// must still poll (queues in polling rx mode). `None`: every input is interrupt-driven.
    pub fn idle_poll_interval(&self) -> Option<f64> {
        self.inputs
            .iter()
            .filter_map(|&i| self.fns[i.0 as usize].as_ref()?.poll_interval())
            .reduce(f64::min)
    }

    /// How long an idle thread may sleep: until its next timer or poll tick (`None`: until an
    /// fd fires or another thread wakes it).
    pub fn sleep_timeout(&self) -> Option<f64> {
        match (self.next_timer_in(), self.idle_poll_interval()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// This thread's epoll fd (readable when the thread should wake; the main thread polls it
    /// with its CLI sockets).
    pub fn irq_fd(&self) -> RawFd {
        self.st.epoll.raw_fd()
    }

    /// Announces that the thread is about to sleep (to other threads, and through each
    /// input node's [`NodeFn::prepare_sleep`] to its producers) and re-checks for work that
    /// raced with the announcement. Returns false when there is work (the thread's own
    /// announcement is withdrawn; the nodes' are withdrawn by the nodes at their next poll);
    /// otherwise the caller checks its own conditions and then calls [`ThreadGraph::wait`].
    pub fn prepare_sleep(&mut self) -> bool {
        self.st.shared.wakers[self.st.thread].set_sleeping(true);
        let idle = !self.wants_poll()
            && !self.has_inbound_handoff()
            && self.inputs.iter().all(|&i| {
                self.fns[i.0 as usize]
                    .as_mut()
                    .is_none_or(|f| f.prepare_sleep())
            });
        if !idle {
            self.st.shared.wakers[self.st.thread].set_sleeping(false);
        }
        idle
    }

    /// Whether a node asked for prompt collection of this thread's epoll events while it
    /// is busy ([`Cx::want_prompt_irqs`]).
    pub fn wants_prompt_irqs(&self) -> bool {
        !self.st.prompt_irqs.is_empty()
    }

    /// Waits in `epoll_wait` up to `timeout` seconds (`None`: until woken; `Some(0.0)`: just
    /// collect what is ready), then records which input nodes' fds fired so the next loop
    /// polls them. Ends a sleep announced by [`ThreadGraph::prepare_sleep`].
    pub fn wait(&mut self, timeout: Option<f64>) {
        let n = self
            .st
            .epoll
            .wait(&mut self.events, wake::timeout_ms(timeout));
        let w = &self.st.shared.wakers[self.st.thread];
        w.set_sleeping(false);
        for e in &self.events[..n] {
            let data = e.u64;
            if data == WAKE_TOKEN {
                w.drain();
                continue;
            }
            let node = (data >> 32) as u32;
            if let Some(p) = self.st.irq_pending.get_mut(node as usize) {
                *p = true;
                self.st.irq_tokens.push((node, data as u32));
            }
        }
    }

    /// Signals an event to a process node from the control plane.
    pub fn signal(&mut self, node: NodeIndex, data: u64) {
        self.st.signals.push((node, data));
    }

    /// One dispatcher loop: input nodes, pending frames, due process nodes. Returns the number
    /// of packets processed by input and internal nodes.
    pub fn run_once(&mut self) -> usize {
        self.loops += 1;
        if let Some(l) = self.st.shared.loops.get(self.st.thread) {
            l.0.add(1);
        }
        self.st.shared.epochs.quiesce(self.st.thread);
        self.st.now_tsc = rdtsc();
        let mut work = 0;
        for k in 0..self.inputs.len() {
            let i = self.inputs[k];
            let ix = i.0 as usize;
            let Some(f) = self.fns[ix].as_mut() else {
                continue;
            };
            let irq = self.st.irq_pending[ix];
            if !irq && !f.active() {
                continue;
            }
            let t0 = rdtsc();
            let mut cx = Cx {
                st: &mut self.st,
                node: i,
            };
            let n = f.poll(&mut cx);
            let t1 = rdtsc();
            flush_scratch(&mut self.st, ix);
            if irq {
                self.st.irq_pending[ix] = false;
                if !self.st.irq_tokens.is_empty() {
                    self.st.irq_tokens.retain(|&(n, _)| n != i.0);
                }
            }
            if n > 0 {
                let s = &self.st.stats[ix].per_thread[self.st.thread];
                s.calls.add(1);
                s.vectors.add(n as u64);
                s.clocks.add(t1.wrapping_sub(t0));
                work += n;
            }
        }
        work += self.drain();
        if !self.procs.is_empty() {
            self.run_processes();
            work += self.drain();
        }
        work
    }

    /// Runs pending frames until no node has work. Returns the packets processed.
    pub fn drain(&mut self) -> usize {
        let mut work = 0;
        let mut k = 0;
        while k < self.st.pending.len() {
            let ix = self.st.pending[k] as usize;
            k += 1;
            self.st.in_pending[ix] = false;
            // Take the node's queue; the node gets the spare (empty, with capacity).
            let mut q = std::mem::take(&mut self.spare);
            std::mem::swap(&mut q, &mut self.st.queues[ix]);
            if q.is_empty() {
                self.spare = q;
                continue;
            }
            work += q.len();
            // A frame handed on unchanged: its stamp for the node's call (`Handed`).
            let mut hint = Stamp::NONE;
            if self.st.hand.to == ix as u32 {
                self.st.hand.to = u32::MAX;
                if q.len() <= FRAME_SIZE {
                    hint = self.st.hand.to_stamp;
                }
            }
            let trace_on = self.st.shared.trace.active.load(Ordering::Relaxed);
            for chunk in q.chunks(FRAME_SIZE) {
                if trace_on {
                    self.trace_visit(ix, chunk);
                }
                match self.fns[ix].as_mut() {
                    Some(f) => {
                        let t0 = rdtsc();
                        self.st.hand.frame = (chunk.as_ptr() as usize, chunk.len());
                        self.st.hand.frame_stamp = Stamp::NONE;
                        self.st.hand.hint = hint;
                        let mut cx = Cx {
                            st: &mut self.st,
                            node: NodeIndex(ix as u32),
                        };
                        f.frame(&mut cx, chunk);
                        self.st.hand.frame = (0, 0);
                        self.st.hand.frame_stamp = Stamp::NONE;
                        self.st.hand.hint = Stamp::NONE;
                        let t1 = rdtsc();
                        let s = &self.st.stats[ix].per_thread[self.st.thread];
                        s.calls.add(1);
                        s.vectors.add(chunk.len() as u64);
                        s.clocks.add(t1.wrapping_sub(t0));
                        flush_scratch(&mut self.st, ix);
                    }
                    None => {
                        // Node not instantiated on this thread: count and free.
                        let mut cx = Cx {
                            st: &mut self.st,
                            node: NodeIndex(ix as u32),
                        };
                        cx.drop_unhandled(chunk);
                    }
                }
            }
            q.clear();
            self.spare = q;
        }
        self.st.pending.clear();
        work
    }

    /// `pcap dispatch trace`: a record per packet of the frame `ix` is about to receive.
    fn dispatch_capture(&mut self, ix: usize, chunk: &[BufIdx]) {
        let shared = &self.st.shared;
        let pool = &self.st.pool;
        let mut g = shared
            .trace
            .dispatch
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let Some(cap) = g.as_mut() else { return };
        let (name, hint) = cap.nodes.get(ix).cloned().unwrap_or_default();
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        for &b in chunk {
            if cap.sink.written >= cap.max {
                break;
            }
            // SAFETY: the dispatcher owns the frame between nodes; the view is dropped
            // before the frame goes to the node.
            let buf = unsafe { pool.buffer(b) };
            let trace = buf.hdr.is_traced().then(|| {
                let mut s = shared.trace.lock();
                let mut text = String::new();
                for e in TraceShared::entries_mut(&mut s, buf.hdr.trace_index)
                    .map(|e| &e[..])
                    .unwrap_or_default()
                {
                    let n = cap.nodes.get(e.node.0 as usize).map_or("?", |n| &n.0);
                    text.push_str(n);
                    text.push('\n');
                    if let Some(r) = &e.rec {
                        let mut t = String::new();
                        r.format(&mut t);
                        for l in t.lines() {
                            text.push_str("  ");
                            text.push_str(l);
                            text.push('\n');
                        }
                    }
                }
                text
            });
            let rec = crate::trace::dispatch_record(
                &name,
                hint,
                b.0,
                buf.hdr,
                trace.as_deref(),
                buf.data(),
            );
            // VPP's cap: 16 KiB a record.
            let n = rec.len().min(16384);
            let _ = cap.sink.write(ts, &rec[..n], rec.len() as u32);
        }
    }

    fn trace_visit(&mut self, ix: usize, chunk: &[BufIdx]) {
        if self.st.shared.trace.dispatch_on.load(Ordering::Relaxed) {
            self.dispatch_capture(ix, chunk);
        }
        let pool = &self.st.pool;
        let mut any = false;
        for &b in chunk {
            // SAFETY: the dispatcher owns the frame between nodes; read-only header access.
            if unsafe { pool.header(b) }.is_traced() {
                any = true;
                break;
            }
        }
        if !any {
            return;
        }
        let mut s = self.st.shared.trace.lock();
        for &b in chunk {
            // SAFETY: as above; the view is dropped before the frame goes to the node.
            let buf = unsafe { pool.buffer(b) };
            if !buf.hdr.is_traced() {
                continue;
            }
            if let Some(e) = TraceShared::entries_mut(&mut s, buf.hdr.trace_index) {
                if e.len() < 64 {
                    let d = buf.data();
                    e.push(TraceEntry {
                        node: NodeIndex(ix as u32),
                        tsc: rdtsc(),
                        thread: self.st.thread as u16,
                        rec: None,
                        data: d[..d.len().min(crate::trace::SNAPSHOT)].to_vec(),
                        error: buf.hdr.error,
                    });
                }
            }
        }
    }

    fn run_processes(&mut self) {
        let now = self.st.shared.clock.now_secs();
        self.expired.clear();
        self.wheel.advance(now, &mut self.expired);
        let mut wakes: Vec<(usize, Wake)> = Vec::new();
        for &n in &self.expired {
            if let Some(p) = self.procs.iter().position(|p| p.node.0 == n) {
                self.procs[p].timer = None;
                let w = if self.procs[p].started {
                    Wake::Timeout
                } else {
                    self.procs[p].started = true;
                    Wake::Start
                };
                wakes.push((p, w));
            }
        }
        for (node, data) in std::mem::take(&mut self.st.signals) {
            if let Some(p) = self.procs.iter().position(|p| p.node == node) {
                self.procs[p].events.push(data);
            }
        }
        for (p, ps) in self.procs.iter().enumerate() {
            if !ps.events.is_empty()
                && matches!(ps.waiting, Suspend::Event | Suspend::EventOrTimeout(_))
            {
                wakes.push((p, Wake::Event(ps.events[0])));
            }
        }
        for (p, wake) in wakes {
            if matches!(self.procs[p].waiting, Suspend::Done) {
                continue;
            }
            if let Wake::Event(_) = wake {
                self.procs[p].events.remove(0);
                if let Some(h) = self.procs[p].timer.take() {
                    self.wheel.cancel(h);
                }
            }
            let node = self.procs[p].node;
            let ix = node.0 as usize;
            let Some(f) = self.fns[ix].as_mut() else {
                continue;
            };
            let t0 = rdtsc();
            let mut cx = Cx {
                st: &mut self.st,
                node,
            };
            let s = f.process(&mut cx, wake);
            let t1 = rdtsc();
            flush_scratch(&mut self.st, ix);
            let stats = &self.st.stats[ix].per_thread[self.st.thread];
            stats.calls.add(1);
            stats.clocks.add(t1.wrapping_sub(t0));
            if s != Suspend::Done {
                stats.suspends.add(1);
            }
            let now = self.st.shared.clock.now_secs();
            self.procs[p].waiting = s;
            match s {
                Suspend::Timeout(d) | Suspend::EventOrTimeout(d) => {
                    self.procs[p].timer = Some(self.wheel.start(now, d.max(0.0), node.0));
                }
                Suspend::Event | Suspend::Done => {}
            }
        }
    }

    /// Process-node state names for `show runtime`.
    pub fn process_state(&self, i: NodeIndex) -> Option<&'static str> {
        self.procs
            .iter()
            .find(|p| p.node == i)
            .map(|p| match p.waiting {
                Suspend::Timeout(_) => "time wait",
                Suspend::Event => "event wait",
                Suspend::EventOrTimeout(_) => "any wait",
                Suspend::Done => "done",
            })
    }

    /// Kind of node `i`.
    pub fn kind(&self, i: NodeIndex) -> NodeKind {
        self.st.kinds[i.0 as usize]
    }

    /// Whether node `i` runs on this thread.
    pub fn has_node(&self, i: NodeIndex) -> bool {
        self.fns.get(i.0 as usize).is_some_and(|f| f.is_some())
    }

    /// Drains every inbound handoff queue of this thread into the target nodes. Returns the
    /// number of buffers taken.
    pub fn poll_handoff(&mut self) -> usize {
        let shared = self.st.shared.clone();
        let me = self.st.thread;
        let mut got = 0;
        for from in 0..shared.n_threads {
            let q = &shared.handoff[from][me];
            // The main loop calls this on every round: an empty queue costs one load, not
            // the zeroing of a frame's worth of scratch (2 KiB, 4% of a busy-polling main
            // thread's time under single-stream TCP through af_packet).
            if q.is_empty() {
                continue;
            }
            let mut tmp = [(BufIdx(0), NodeIndex(0)); FRAME_SIZE];
            loop {
                let n = q.dequeue(&mut tmp);
                if n == 0 {
                    break;
                }
                got += n;
                for &(b, node) in &tmp[..n] {
                    if (node.0 as usize) < self.st.queues.len() {
                        self.st.push(node, &[b]);
                    } else {
                        let mut cx = Cx {
                            st: &mut self.st,
                            node,
                        };
                        cx.drop_unhandled(&[b]);
                    }
                }
            }
        }
        got
    }

    /// Frees everything still queued (shutdown) and returns cached buffers to the pool.
    pub fn shutdown(&mut self) {
        for q in self.st.queues.iter_mut() {
            self.st.bufs.free(q);
            q.clear();
        }
        self.st.pending.clear();
        for f in self.st.in_pending.iter_mut() {
            *f = false;
        }
        // No queue holds a handed frame any more.
        self.st.hand = Handed::NONE;
        self.st.bufs.flush();
    }
}

#[inline(always)]
fn flush_scratch(st: &mut ThreadState, ix: usize) {
    if !st.scratch_dirty {
        return;
    }
    let counters = &st.stats[ix].per_thread[st.thread].counters;
    for (i, v) in st.scratch.iter_mut().enumerate() {
        if *v != 0 {
            if let Some(c) = counters.get(i) {
                c.add(*v);
            }
            *v = 0;
        }
    }
    st.scratch_dirty = false;
}
