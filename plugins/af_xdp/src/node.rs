//! The af_xdp graph nodes.
//!
//! `af_xdp-input` (input): polls every AF_XDP rx queue placed on this thread. Per queue and
//! call it takes up to [`FRAME_SIZE`] descriptors from the rx ring, then, by UMEM:
//! - per-socket UMEM (copy): copies each packet out of the UMEM into a Sluice buffer (one
//!   memcpy per packet; a chain if the buffer is smaller), releases the descriptors and
//!   gives the frames straight back to the kernel through the fill ring;
//! - buffer arena (zero-copy, [`super::arena`]): each descriptor names the graph buffer the
//!   kernel wrote the packet into; it is bounds-checked and must be one this queue gave the
//!   kernel, and goes to the graph as is (no copy). The fill ring is then topped up with
//!   fresh buffers from the thread's cache, so that the queue holds at most rx-queue-size
//!   buffers (fill ring + kernel); a buffer pool too empty to refill is counted
//!   (`fill ring refills deferred`) and the kernel drops what it cannot place (`show af_xdp`,
//!   folded into `rx-miss`).
//!
//! In both, the kernel is woken with `recvfrom` only when it set `XDP_RING_NEED_WAKEUP`.
//! - uses: nothing (produces packets).
//! - sets: `rx_if` = the af_xdp interface; `current_data` = 0 at the Ethernet header (arena:
//!   where the kernel put it, 0 too), `current_length`; starts traces
//!   (`trace add af_xdp-input N`).
//! - next: `ethernet-input` (0) for every packet.
//! - counters: `no_buffers` (error, copy: buffer pool exhausted; the packet is dropped, its
//!   frame recycled, and counted as the interface's `rx-miss`), `bad_desc` (error: a
//!   descriptor outside the UMEM, across a frame, empty, or (arena) naming a buffer this
//!   queue did not give the kernel or a packet that does not fit it: dropped; a buffer of
//!   ours is freed, any other left alone).
//! - also: interface `rx packets` / `rx bytes` / `rx-miss`, `pcap trace rx`; the socket's
//!   ring counters (`XskCounters`: polls, empty polls, batch-size histogram, deferred
//!   refills, `recvfrom` calls), shown by `show af_xdp`.
//! - busy polling: a queue in polling mode whose socket has a NAPI id (checked once, at the
//!   first packet) calls `recvfrom` on every poll, so the kernel runs the device's NAPI
//!   (XDP and the copy into the UMEM) in this thread (`SO_PREFER_BUSY_POLL`).
//! - rx mode (`set interface rx-mode`, per queue, [`sluice_vnet::devices::fdq`]): polling (the node is active
//!   while a queue's rx ring has entries and for 10 ms after its last packet, and asks for a
//!   poll every 10 ms when idle), interrupt (the socket is in the thread's epoll: the kernel
//!   makes it readable when its rx ring is not empty, so the thread sleeps until a packet
//!   arrives), adaptive (interrupt while idle, polling under load). Queues move between
//!   threads with `set interface rx-placement`.
//! - tx kicks: every poll first retries the kicks of this thread's tx sockets that the
//!   kernel refused (`<interface>-tx` below); while one is pending the node asks for a poll
//!   every 1 ms, also in interrupt mode (the thread's `epoll_wait` times out for it).
//!
//! `<interface>-tx` (internal, one per af_xdp interface, as VPP's per-interface tx nodes):
//! - uses: the packet (whole chain); `tx_if` is this interface (`interface-output` chose
//!   this node by it).
//! - sets: nothing. Per-socket UMEM: every buffer is freed after its bytes were copied into
//!   a UMEM tx frame. Buffer arena: a single-buffer packet's own buffer goes in the tx ring
//!   (address = its packet start) and stays the socket's until its completion comes back,
//!   then it is freed; a chain is copied into one fresh buffer (`chain_copied`) which is sent
//!   instead, the chain freed.
//! - next: none.
//! - per call: reaps the completion ring (sent frames back to the free list; arena: sent
//!   buffers freed), copies (or, arena, queues) the frame's packets, publishes them,
//!   reaps again, and kicks the kernel with `sendto`
//!   only when the tx ring has `XDP_RING_NEED_WAKEUP` set. When the kernel leaves
//!   descriptors in the ring (send buffer full, device busy or down: EAGAIN/EBUSY after the
//!   bounded retries, ENOBUFS, ENETDOWN, ENXIO) the socket is marked pending
//!   ([`sluice_vnet::devices::linux::KickState`]); the `af_xdp-input` of each thread transmitting on it kicks
//!   it again every 1 ms until the ring is empty, and gives the descriptors up (counted; the
//!   ring cannot take them back from the kernel) when none has left for 1 s.
//! - counters: `ring_full` (error: no free tx frame or tx ring slot; dropped, never waited
//!   for), `too_big` (error: larger than a UMEM frame), `no_interface` (error: interface
//!   deleted while the packet was in flight), `send_error` (error: the kick failed otherwise;
//!   the frames stay queued and are retried like refused ones), `kick_retries` (info: kicks
//!   retried for descriptors a refused kick left), `kick_dropped` (error: descriptors given
//!   up after their kicks kept failing), `chain_copied` (info, arena: chained packets copied
//!   into one buffer), `no_buffers` (error, arena: no buffer to copy a chain into),
//!   `in_flight` (error, arena: a buffer handed over while already in the tx ring; dropped,
//!   not freed).
//! - also: interface `tx-error` for `ring_full`, `too_big`, `kick_dropped` and (arena)
//!   `no_buffers`/`in_flight` drops (taken off `tx packets`/`tx bytes`); for a packet sent on
//!   a VLAN sub-interface, these drops (but `kick_dropped`) also correct the sub-interface's
//!   counters; the socket's tx kicks, busy kicks, kick
//!   retries, completions and frames in flight (`show af_xdp`).

use super::arena::{ArenaGeo, RxDesc};
use super::xsk::{RxRings, TxFull, TxRings, Xsk, FRAME_SIZE as UMEM_FRAME};
use sluice_buffer::{BufIdx, BufferPool};
use sluice_graph::pcap::point;
use sluice_graph::{Cx, NodeFn, TraceRecord, FRAME_SIZE};
use sluice_vnet::devices::fdq::{FdQueue, QueueSet};
use sluice_vnet::devices::linux::{KickSet, KICK_DROPPED, KICK_RETRIES};
use sluice_vnet::devices::TraceHead;
use sluice_vnet::interface::{counter, IfCounterTable, IfCounters};
use std::any::Any;
use std::fmt::Write as _;
use std::sync::Arc;

/// Input node name.
pub const INPUT: &str = "af_xdp-input";

sluice_graph::arcs! {
    /// `af_xdp-input`'s next arcs.
    pub enum RxNext {
        /// Every frame, to `ethernet-input`.
        Ethernet => sluice_vnet::ethernet::ETHERNET_INPUT,
    }
}

sluice_graph::counters! {
    /// `af_xdp-input`'s counters.
    pub enum RxCounter {
        /// No free buffers (rx-miss).
        NoBuffers => error("no_buffers", "no free buffers (rx-miss)"),
        /// Bad rx descriptor.
        BadDesc => error("bad_desc", "bad rx descriptor (outside the UMEM)"),
    }
}

sluice_graph::counters! {
    /// The counters of a `<interface>-tx` node.
    pub enum TxCounter {
        /// Tx ring full.
        RingFull => error("ring_full", "tx ring full"),
        /// Packet larger than a UMEM frame.
        TooBig => error("too_big", "packet larger than a UMEM frame"),
        /// The interface was deleted.
        NoInterface => error("no_interface", "af_xdp interface deleted"),
        /// Tx kick failed.
        SendError => error("send_error", "tx kick (sendto) failed"),
        /// Kicks retried ([`sluice_vnet::devices::linux::KICK_RETRIES`]).
        KickRetry => info(KICK_RETRIES.name, KICK_RETRIES.description),
        /// Frames given up ([`sluice_vnet::devices::linux::KICK_DROPPED`]).
        KickDropped => error(KICK_DROPPED.name, KICK_DROPPED.description),
        /// Chained packets copied into one buffer.
        ChainCopied => info("chain_copied", "chained packets copied into one buffer (buffer arena UMEM)"),
        /// No buffer to copy a chained packet into.
        TxNoBuffers => error("no_buffers", "no buffer to copy a chained packet into"),
        /// Buffer already in the tx ring.
        InFlight => error("in_flight", "buffer already in the tx ring (dropped)"),
    }
}

/// One rx queue as polled by one thread: the socket and its rx half.
pub struct RxQueue {
    /// Sluice interface.
    pub sw_if: u32,
    /// Device queue.
    pub queue: u16,
    // `rings` points into `xsk`'s mappings: declared first, so dropped first.
    rings: RxRings,
    /// The socket (shared with the control plane and the tx node).
    pub xsk: Arc<Xsk>,
    /// Interface counters.
    pub counters: Arc<IfCounters>,
    /// Whether busy polling drives this queue's NAPI in polling mode: unknown until the
    /// first packet (the kernel records the socket's NAPI id then), then whether the socket
    /// has busy polling and a NAPI id (veth on some kernels registers its XDP queue without
    /// one; a `recvfrom` per poll would then be a wasted system call).
    busy: Option<bool>,
}

impl RxQueue {
    /// A queue to be polled by one thread.
    pub fn new(sw_if: u32, xsk: Arc<Xsk>, rings: RxRings, counters: Arc<IfCounters>) -> Self {
        RxQueue {
            sw_if,
            queue: xsk.queue as u16,
            rings,
            xsk,
            counters,
            busy: None,
        }
    }
}

impl FdQueue for RxQueue {
    fn id(&self) -> (u32, u16) {
        (self.sw_if, self.queue)
    }
    // The XSK is readable (EPOLLIN) while its rx ring has entries.
    fn fd(&self) -> std::os::fd::RawFd {
        self.xsk.fd()
    }
}

/// `af_xdp-input` instance: the rx queues this thread polls.
#[derive(Default)]
pub struct AfXdpInput {
    /// Queues placed on this thread, with their rx modes.
    pub queues: QueueSet<RxQueue>,
    /// The tx socket this thread transmits on, per interface (kicks to retry).
    pub kicks: KickSet<Arc<Xsk>>,
}

#[derive(Copy, Clone)]
struct RxTrace {
    sw_if: u32,
    queue: u16,
    len: u16,
    head: TraceHead,
}

impl TraceRecord for RxTrace {
    fn format(&self, out: &mut String) {
        let _ = write!(
            out,
            "af_xdp: sw_if_index {} queue {} len {}",
            self.sw_if, self.queue, self.len
        );
        self.head.format(out);
    }
}

/// Copies `pkt` into `b`, chaining a second buffer when it does not fit one (only with a
/// buffer data size below the 1792 bytes a UMEM frame can carry). False: no buffer.
fn copy_in(cx: &mut Cx, pool: &BufferPool, b: BufIdx, pkt: &[u8]) -> bool {
    let ds = pool.data_size();
    let head = pkt.len().min(ds);
    {
        // SAFETY: `b` was just allocated by this node and is not yet enqueued; one view.
        let mut v = unsafe { pool.buffer(b) };
        v.write_packet(&pkt[..head]);
    }
    if head < pkt.len() {
        let Some(tail) = cx.bufs().alloc_with(&pkt[head..]) else {
            return false;
        };
        cx.bufs().chain_append(b, tail);
    }
    true
}

impl AfXdpInput {
    /// Takes up to `budget` packets from queue `qi`; returns how many went to the graph.
    fn poll_queue(&mut self, cx: &mut Cx, qi: usize, budget: usize) -> usize {
        let p = &mut self.queues.list[qi];
        let q = &mut p.q;
        let n = q.rings.rx.peek(budget.min(FRAME_SIZE) as u32) as usize;
        q.xsk.counters.rx_poll(n);
        if q.busy.is_none() && n > 0 {
            q.busy = Some(q.xsk.busy_poll && q.xsk.napi_id() != 0);
        }
        let busy = p.mode.is_polling() && q.busy == Some(true);
        if q.rings.arena.is_some() {
            return poll_arena(cx, q, n, busy);
        }
        if n == 0 {
            q.xsk.rx_wakeup(&q.rings, busy);
            return 0;
        }
        let pool = cx.pool_ref();
        let mut fresh = [BufIdx(0); FRAME_SIZE];
        let got = cx.bufs().alloc(&mut fresh[..n]);
        let mut out = [BufIdx(0); FRAME_SIZE];
        let (mut used, mut bytes, mut miss, mut bad) = (0usize, 0u64, 0u64, 0u64);
        let mut traced = cx.trace_budget();
        let t = cx.thread();
        for i in 0..n {
            let d = q.rings.rx.read(i as u32);
            match q.xsk.rx_frame(&d) {
                None => bad += 1,
                Some(_) if used >= got => miss += 1,
                Some(pkt) => {
                    let b = fresh[used];
                    if !copy_in(cx, pool, b, pkt) {
                        miss += 1;
                    } else {
                        used += 1;
                        bytes += pkt.len() as u64;
                        // SAFETY: owned by this node until enqueued; one view.
                        let mut v = unsafe { pool.buffer(b) };
                        v.hdr.rx_if = q.sw_if;
                        if traced > 0 {
                            let head = TraceHead::new(pkt);
                            let rec = RxTrace {
                                sw_if: q.sw_if,
                                queue: q.queue,
                                len: pkt.len() as u16,
                                head,
                            };
                            if cx.trace_start(&mut v, rec) {
                                traced -= 1;
                            }
                        }
                        out[used - 1] = b;
                    }
                }
            }
            // The packet was copied (or dropped): its frame goes back to the kernel.
            let base = d.addr - d.addr % UMEM_FRAME as u64;
            if q.xsk.is_rx_frame(base) {
                q.rings.recycle.push(base);
            }
        }
        q.rings.rx.release(n as u32);
        let r = &mut q.rings;
        let k = r.fill.reserve(r.recycle.len() as u32);
        for (i, &a) in r.recycle[..k as usize].iter().enumerate() {
            r.fill.write(i as u32, a);
        }
        r.fill.submit(k);
        r.recycle.drain(..k as usize);
        if !r.recycle.is_empty() {
            q.xsk.counters.fill_short.add(r.recycle.len() as u64);
        }
        q.xsk.rx_wakeup(&q.rings, busy);
        if used < got {
            cx.free(&fresh[used..got]);
        }
        if miss > 0 {
            q.counters.add(t, counter::RX_MISS, miss);
            cx.count(RxCounter::NoBuffers, miss);
        }
        cx.count(RxCounter::BadDesc, bad);
        deliver(cx, q, &out[..used], bytes);
        used
    }
}

/// The packets a poll of `q` received (`bytes` in all) go to the graph: interface rx
/// counters, `pcap trace rx`, `ethernet-input`.
fn deliver(cx: &mut Cx, q: &RxQueue, out: &[BufIdx], bytes: u64) {
    if out.is_empty() {
        return;
    }
    let t = cx.thread();
    q.counters.add(t, counter::RX_PACKETS, out.len() as u64);
    q.counters.add(t, counter::RX_BYTES, bytes);
    cx.pcap_capture(point::RX, out, false);
    cx.enqueue_all(RxNext::Ethernet.next(), out);
}

/// [`AfXdpInput::poll_queue`] for a queue whose UMEM is the buffer arena, after the `n`
/// descriptors were peeked: the received buffers go to the graph as they are, the fill ring
/// is topped up with fresh ones (also when nothing arrived).
fn poll_arena(cx: &mut Cx, q: &mut RxQueue, n: usize, busy: bool) -> usize {
    let arena = cx.arena();
    let mut traced = cx.trace_budget();
    let mut out = [BufIdx(0); FRAME_SIZE];
    let mut ours_bad = [BufIdx(0); FRAME_SIZE];
    let (mut used, mut nob, mut bad, mut bytes) = (0usize, 0usize, 0u64, 0u64);
    let RxRings {
        rx,
        fill,
        arena: ra,
        ..
    } = &mut q.rings;
    let Some(ra) = ra.as_mut() else { return 0 };
    for i in 0..n {
        let d = rx.read(i as u32);
        match ra.geo.rx_desc(d.addr, d.len) {
            RxDesc::Packet {
                idx,
                current_data,
                len,
            } if ra.held.take(idx) => {
                // SAFETY: the kernel handed `idx` back through the rx ring and it was
                // one this queue gave it (its held bit was set, now cleared): this node
                // owns it until it is enqueued; one view at a time.
                let mut v = unsafe { arena.buffer(idx) };
                v.hdr.current_data = current_data;
                v.hdr.current_length = len;
                v.hdr.rx_if = q.sw_if;
                bytes += len as u64;
                if traced > 0 {
                    let rec = RxTrace {
                        sw_if: q.sw_if,
                        queue: q.queue,
                        len,
                        head: TraceHead::new(v.data()),
                    };
                    if cx.trace_start(&mut v, rec) {
                        traced -= 1;
                    }
                }
                out[used] = idx;
                used += 1;
            }
            RxDesc::Bad(Some(idx)) if ra.held.take(idx) => {
                bad += 1;
                ours_bad[nob] = idx;
                nob += 1;
            }
            _ => bad += 1,
        }
    }
    rx.release(n as u32);
    // Top the fill ring up so that the queue holds at most rx-queue-size buffers.
    let want = q.xsk.geo.rx_size.saturating_sub(ra.held.count());
    let room = fill.reserve(want);
    let mut w = 0u32;
    while w < room {
        let k = ((room - w) as usize).min(FRAME_SIZE);
        let mut fresh = [BufIdx(0); FRAME_SIZE];
        let got = cx.bufs().alloc(&mut fresh[..k]);
        for &b in &fresh[..got] {
            // A fresh buffer is never held; if it were (a double free elsewhere), it is
            // already the kernel's and must not be given twice.
            if ra.held.give(b) {
                fill.write(w, ra.geo.fill_addr(b));
                w += 1;
            }
        }
        if got < k {
            q.xsk.counters.fill_short.add((room - w) as u64);
            break;
        }
    }
    fill.submit(w);
    q.xsk
        .counters
        .rx_held
        .store(ra.held.count() as u64, std::sync::atomic::Ordering::Relaxed);
    q.xsk.rx_wakeup(&q.rings, busy);
    cx.free(&ours_bad[..nob]);
    cx.count(RxCounter::BadDesc, bad);
    deliver(cx, q, &out[..used], bytes);
    used
}

impl NodeFn for AfXdpInput {
    fn poll(&mut self, cx: &mut Cx) -> usize {
        self.kicks.run(cx);
        let mut n = 0;
        let now = cx.now_tsc();
        for qi in 0..self.queues.list.len() {
            let got = self.poll_queue(cx, qi, FRAME_SIZE);
            self.queues.list[qi].mode.account(got, now);
            n += got;
        }
        n
    }

    fn active(&self) -> bool {
        // Without queues of its own (most threads, most of the time) no clock read.
        if self.queues.list.is_empty() && !self.kicks.pending() {
            return false;
        }
        let now = sluice_infra::clock::rdtsc();
        self.kicks.due(now)
            || self
                .queues
                .list
                .iter()
                .any(|p| p.q.rings.rx.has_entries() || p.mode.busy(now) || p.q.rings.needs_refill())
    }

    fn poll_interval(&self) -> Option<f64> {
        sluice_vnet::devices::linux::min_interval(
            self.queues.poll_interval(),
            self.kicks.poll_interval(),
        )
    }

    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// An af_xdp interface as seen by its tx node on one thread.
#[derive(Clone)]
pub struct TxEntry {
    /// The interface's sockets; thread t transmits on `queues[t % len]`.
    pub queues: Arc<Vec<Arc<Xsk>>>,
    /// Interface counters.
    pub counters: Arc<IfCounters>,
    /// Every interface's counters (VLAN sub-interfaces of this one, for refused packets).
    pub subs: Arc<IfCounterTable>,
}

/// `<interface>-tx` instance.
#[derive(Default)]
pub struct AfXdpTx {
    /// The interface (`None` once it is deleted).
    pub entry: Option<TxEntry>,
}

impl NodeFn for AfXdpTx {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        let pool = cx.pool_ref();
        let t = cx.thread();
        let Some(e) = &self.entry else {
            cx.count(TxCounter::NoInterface, frame.len() as u64);
            cx.free(frame);
            return;
        };
        let Some(q) = e.queues.get(t % e.queues.len().max(1)) else {
            cx.count(TxCounter::NoInterface, frame.len() as u64);
            cx.free(frame);
            return;
        };
        if let Some(geo) = q.arena {
            return tx_arena(cx, e, q, geo, frame);
        }
        let (mut full, mut big, mut lost) = (0u64, 0u64, 0u64);
        let mut g = q.tx_lock();
        q.tx_reap(&mut g);
        for &b in frame {
            // SAFETY: owned by this node; short-lived read-only header access.
            let h = unsafe { pool.header(b) };
            let len = h.total_len();
            if len > UMEM_FRAME {
                big += 1;
                lost += len as u64;
                e.subs.sub_tx_failed(t, h);
                continue;
            }
            match q.tx_push(&mut g, |dst| {
                sluice_vnet::devices::linux::copy_chain_into(pool, b, dst)
            }) {
                Ok(()) => {}
                Err(TxFull::RingFull | TxFull::InFlight) => {
                    full += 1;
                    lost += len as u64;
                    e.subs.sub_tx_failed(t, h);
                }
            }
        }
        if q.tx_submit(&mut g, cx.now_tsc()).is_err() {
            cx.count(TxCounter::SendError, 1);
        }
        drop(g);
        if full + big > 0 {
            e.counters.tx_failed(t, full + big, lost);
            cx.count(TxCounter::RingFull, full);
            cx.count(TxCounter::TooBig, big);
        }
        cx.free(frame);
    }

    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// Frees the buffers whose completions came back (under the tx lock: the list is the
/// socket's).
fn free_done(cx: &mut Cx, g: &mut TxRings) {
    if let Some(ra) = g.arena.as_mut() {
        if !ra.done.is_empty() {
            cx.free(&ra.done);
            ra.done.clear();
        }
    }
}

/// `<interface>-tx` for a socket whose UMEM is the buffer arena: the packets' own buffers go
/// in the tx ring (chains are copied into one buffer first) and are freed when their
/// completions come back.
fn tx_arena(cx: &mut Cx, e: &TxEntry, q: &Xsk, geo: ArenaGeo, frame: &[BufIdx]) {
    let pool = cx.pool_ref();
    let arena = cx.arena();
    let t = cx.thread();
    let ds = pool.data_size();
    // Buffers to free at the end: refused packets, and chains once copied.
    let mut drop = [BufIdx(0); 2 * FRAME_SIZE];
    let mut nd = 0;
    let (mut full, mut big, mut lost, mut copied, mut nobuf, mut twice) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let mut g = q.tx_lock();
    q.tx_reap(&mut g);
    free_done(cx, &mut g);
    for &b in frame {
        // SAFETY: owned by this node; short-lived read-only header access.
        let h = unsafe { arena.header(b) };
        let len = h.total_len();
        if len > ds {
            big += 1;
            lost += len as u64;
            e.subs.sub_tx_failed(t, h);
            drop[nd] = b;
            nd += 1;
            continue;
        }
        let (sb, cd) = if h.next().is_some() {
            let Some(c) = cx.bufs().alloc_one() else {
                nobuf += 1;
                lost += len as u64;
                e.subs.sub_tx_failed(t, h);
                drop[nd] = b;
                nd += 1;
                continue;
            };
            // SAFETY: `c` was just allocated by this node; `b`'s chain is read through
            // separate views inside `copy_chain_into`, never `c`.
            let mut v = unsafe { arena.buffer(c) };
            let n = sluice_vnet::devices::linux::copy_chain_into(pool, b, v.raw_data_mut());
            v.set_len(n);
            copied += 1;
            drop[nd] = b;
            nd += 1;
            (c, 0)
        } else {
            (b, h.current_data)
        };
        // SAFETY: `sb` is owned by this node (its frame or just allocated).
        let plen = unsafe { arena.header(sb) }.current_length as u32;
        match q.tx_push_buf(&mut g, sb, geo.tx_addr(sb, cd), plen) {
            Ok(()) => {}
            Err(TxFull::RingFull) => {
                full += 1;
                lost += len as u64;
                e.subs.sub_tx_failed(t, h);
                drop[nd] = sb;
                nd += 1;
            }
            Err(TxFull::InFlight) => {
                // Already the kernel's: counted, not freed (it is freed at its completion).
                twice += 1;
                lost += len as u64;
                e.subs.sub_tx_failed(t, h);
            }
        }
    }
    if q.tx_submit(&mut g, cx.now_tsc()).is_err() {
        cx.count(TxCounter::SendError, 1);
    }
    // Copy mode completes during `sendto` when the peer took the frame at once.
    q.tx_reap(&mut g);
    free_done(cx, &mut g);
    std::mem::drop(g);
    if full + big + nobuf + twice > 0 {
        e.counters.tx_failed(t, full + big + nobuf + twice, lost);
        cx.count(TxCounter::RingFull, full);
        cx.count(TxCounter::TooBig, big);
        cx.count(TxCounter::TxNoBuffers, nobuf);
        cx.count(TxCounter::InFlight, twice);
    }
    cx.count(TxCounter::ChainCopied, copied);
    cx.free(&drop[..nd]);
}
