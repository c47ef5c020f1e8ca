//! memif data-path nodes.
//!
//! `memif-input` (input): polls the rx rings of connected memif interfaces placed on this
//! thread (queue q: main thread without workers, else worker `q % workers`, or where
//! `set interface rx-placement` put it), copies each packet out of shared memory into Sluice
//! buffers (descriptor chains -> buffer chains), and returns the slots (master: advances
//! `tail`; slave: refills `head` with its own buffers).
//! - rx modes (`set interface rx-mode`, `sluice_graph::rxmode`): polling sets the ring's
//!   `MASK_INT` flag (the peer does not signal) and polls while busy and every 10 ms when
//!   idle, and clears it while the thread sleeps (`prepare_sleep`: the peer's next burst
//!   wakes it through the eventfd, watched in every mode; the first poll after the wake
//!   sets it again before receiving); interrupt clears `MASK_INT` and registers the ring's
//!   interrupt eventfd with the thread's epoll, so the thread sleeps until the peer signals;
//!   adaptive does the same while idle and sets `MASK_INT` while it polls under load.
//! - records the gap from each poll that received packets to the next look at the ring in
//!   the queue's `PollGaps` (`show memif`: poll gaps while receiving).
//! - copy mode: single-descriptor packets are parsed, bounds-checked and copied in batches
//!   (`parse_single`, `copy_batch`); chains, bad descriptors and a dry pool take the general
//!   path (`rx_general`).
//! - zero-copy slave (`zero-copy` on the slave, M2S ring): no copy; the master wrote into
//!   buffers the slave lent it, recorded per slot in a shadow array, and the descriptor's
//!   region and offset are not trusted: each slot's buffer comes from the shadow array
//!   (`rx_zc_single`, its length checked against the buffer), chained or bad slots take the
//!   general path; the ring is refilled with fresh buffers. A refill the exhausted pool
//!   stops short (`fill_short`) is retried at every poll, but its empty slots count as work
//!   (`active`, `prepare_sleep`) only while the pool's free list has buffers or from half a
//!   poll tick after it stopped on, so that the 10 ms tick (`poll_interval` asks for it in
//!   every rx mode while starved) retries it: the buffers may come back to a thread's cache,
//!   which the free list does not show, and a master with no slot left sends nothing to wake
//!   the thread.
//! - sets: `rx_if`, `current_data`/`current_length`, chains; starts traces.
//! - next: `ethernet-input` (arc 0) in ethernet mode; in ip mode `ip4-input` (arc 1) for
//!   version 4, `ip6-input` (added at init when that node exists) for version 6, else
//!   `error-drop` (arc 2).
//! - GSO (`gso` on both ends, [`crate::gso`]): a descriptor chain flagged `DESC_FLAG_GSO`
//!   becomes a buffer chain with flag `GSO` and its metadata (rx general path; the batch
//!   stops at any descriptor with a flag set). memif-tx writes the flag and metadata on the
//!   first descriptor of an aggregate (tx general path; the fast path takes no aggregate).
//! - counters: `gso` (info: aggregates received whole), `bad_gso` (flagged aggregate whose
//!   headers do not match: dropped), `bad_desc` (descriptor outside its region, empty or oversized packet:
//!   dropped in the ring), `bad_ring` (peer moved head/tail past the ring: resynchronised),
//!   `no_buffer` (buffer pool exhausted: packet dropped, interface `rx-miss`),
//!   `fill_short` (info: zero-copy M2S slots a refill left empty for want of buffers, retried),
//!   `ip6_no_node` and `bad_ip_version` (ip mode drops via `error-drop`).
//!   Interface counters `rx packets`/`rx bytes`/`rx-miss`; `pcap trace rx`.
//!
//! `memif-tx` (internal): copies every packet of the frame into free slots of the tx ring of
//! its `tx_if` (queue = thread % tx queues), chaining descriptors for packets larger than a
//! slot, publishes the ring once per frame, signals the peer's eventfd unless it set
//! `MASK_INT` (read after a full fence, so a peer that unmasks and then checks the ring
//! cannot miss the packets), and frees the buffers. Never waits for ring space.
//! - uses: `tx_if`, buffer chains. next: none.
//! - counters: `not_connected`, `ring_full`, `gso_refused` (an aggregate on a connection
//!   that did not agree to GSO, in the moment after a reconnect before the interface
//!   stopped taking them), `bad_desc` (peer handed out a slot outside its region),
//!   `too_long` (more than 64 buffers, an aggregate the peer would drop (over
//!   `gso::MAX_LEN` bytes or 64 slots), or nothing to send: an empty packet, in ip mode one
//!   of no more than its Ethernet header, shorter ones included, on every path); each also
//!   counts interface `tx-error`. `interrupts_sent` (info): eventfd signals to the peer,
//!   counted on the signal path only.
//! - zero-copy slave: the buffers stay in the S2M ring until the master consumed them; they
//!   are taken back at the next transmit on the queue and by `memif-process` (every 20 ms),
//!   so an idle interface holds none for long.

use super::shm::{Desc, Region, Ring, DESC_FLAG_NEXT, RING_FLAG_MASK_INT};
use super::{DataConn, IfShared, MemifShared, Queue};
use crate::proto::Mode;
use sluice_buffer::{flags, BufIdx, Buffer, BufferHeader, BufferPool, HEADROOM};
use sluice_graph::pcap::point;
use sluice_graph::rxmode::{RxMode, RxModeState, POLL_TICK_SECS};
use sluice_graph::{Cx, Next, NodeFn, TraceRecord, FRAME_SIZE};
use sluice_vnet::interface::counter;
use std::any::Any;
use std::fmt::Write as _;
use std::os::fd::AsRawFd;
use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, Weak};

sluice_graph::arcs! {
    /// `memif-input`'s next arcs (`ip6-input` is added at init when that node exists).
    pub(crate) enum RxNext {
        /// Ethernet mode.
        Eth => sluice_vnet::ethernet::ETHERNET_INPUT,
        /// ip mode, IPv4.
        Ip4 => sluice_vnet::ip4::nodes::IP4_INPUT,
        /// ip mode drops.
        Drop => "error-drop",
    }
}

sluice_graph::counters! {
    /// `memif-input`'s counters.
    pub(crate) enum RxCounter {
        /// Descriptor outside its region, empty or oversized packet (dropped in the ring).
        BadDesc => error("bad_desc", "bad descriptor (outside region, empty or oversized)"),
        /// The peer moved its ring index past the ring (resynchronised).
        BadRing => error("bad_ring", "peer moved ring index past the ring"),
        /// Buffer pool exhausted (interface `rx-miss`).
        NoBuffer => error("no_buffer", "no buffer (rx-miss)"),
        /// ip mode: IPv6 packet and no `ip6-input`.
        Ip6NoNode => error("ip6_no_node", "ip6 packet in ip mode, no ip6-input"),
        /// ip mode: neither IPv4 nor IPv6.
        BadIp => error("bad_ip_version", "ip mode packet is neither ip4 nor ip6"),
        /// GSO aggregates received whole (`gso` on both ends).
        Gso => info("gso", "GSO aggregates received whole"),
        /// A flagged aggregate whose headers do not match its metadata (dropped).
        BadGso => error("bad_gso", "GSO aggregate not TCP/UDP as its descriptor says"),
        /// Zero-copy: M2S slots a refill left empty for want of buffers (retried).
        FillShort => info("fill_short", "zero-copy slots a refill left empty (each retry counts)"),
    }
}

sluice_graph::counters! {
    /// `memif-tx`'s counters: failures (each also counts interface `tx-error`), then
    /// `interrupts_sent`.
    pub(crate) enum TxCounter {
        /// Interface not connected.
        NotConnected => error("not_connected", "interface not connected"),
        /// No free slot left in the ring.
        RingFull => error("ring_full", "tx ring full"),
        /// A GSO aggregate on a connection that did not agree to GSO.
        GsoRefused => error("gso_refused", "GSO aggregate, peer did not agree to GSO"),
        /// The peer handed out a slot outside its region.
        BadDesc => error("bad_desc", "peer handed out a bad descriptor"),
        /// Empty packet (ip mode: no byte past its Ethernet header), a chain of more than
        /// 64 buffers, or a GSO aggregate the peer would drop (over `gso::MAX_LEN` bytes or
        /// 64 slots).
        TooLong => error(
            "too_long",
            "packet empty (ip mode: <= 14 bytes), chained over 64 buffers, or GSO aggregate too big"
        ),
        /// Eventfd signals to the peer (its rx ring unmasked); not a failure.
        InterruptsSent => info("interrupts_sent", "interrupts sent"),
    }
}

/// Failures per `memif-tx` counter, indexed by `TxCounter` (`InterruptsSent` stays 0).
type TxFails = [u64; TxCounter::DESCS.len()];

/// Largest packet accepted from a ring.
const MAX_PKT: u64 = 65535;
/// Most buffers of one packet on tx (and descriptors of one packet on rx).
pub(crate) const MAX_SEGS: usize = 64;

struct IfRt {
    sh: Arc<IfShared>,
    gen: u64,
    /// The connection, held (memif-input: it polls whenever the view is stale, so it lets
    /// go of a dead connection promptly).
    conn: Option<Arc<DataConn>>,
    /// The connection, not held (memif-tx: it may not run again for a long time, and a dead
    /// connection's zero-copy buffers are freed only when the last holder lets go).
    weak: Weak<DataConn>,
}

/// Per-thread cache of the interface list and their connections.
struct View {
    sh: Arc<MemifShared>,
    /// Keep strong references in `conn` (else only `weak`).
    hold: bool,
    gen: u64,
    ifs: Vec<IfRt>,
    /// sw_if_index -> position in `ifs`.
    by_sw: Vec<Option<u32>>,
}

impl View {
    fn new(sh: Arc<MemifShared>, hold: bool) -> View {
        View {
            sh,
            hold,
            gen: u64::MAX,
            ifs: Vec::new(),
            by_sw: Vec::new(),
        }
    }
    fn stale(&self) -> bool {
        self.sh.gen.load(Ordering::Acquire) != self.gen
            || self
                .ifs
                .iter()
                .any(|i| i.sh.gen.load(Ordering::Acquire) != i.gen)
    }
    fn refresh(&mut self) {
        let g = self.sh.gen.load(Ordering::Acquire);
        if g != self.gen {
            self.gen = g;
            let list = self.sh.list();
            self.ifs = list
                .into_iter()
                .map(|sh| IfRt {
                    sh,
                    gen: u64::MAX,
                    conn: None,
                    weak: Weak::new(),
                })
                .collect();
            self.by_sw.clear();
            for (k, i) in self.ifs.iter().enumerate() {
                let s = i.sh.sw_if_index as usize;
                if self.by_sw.len() <= s {
                    self.by_sw.resize(s + 1, None);
                }
                self.by_sw[s] = Some(k as u32);
            }
        }
        for i in self.ifs.iter_mut() {
            let g = i.sh.gen.load(Ordering::Acquire);
            if g != i.gen {
                i.gen = g;
                let c = i.sh.current();
                i.weak = c.as_ref().map_or_else(Weak::new, Arc::downgrade);
                i.conn = if self.hold { c } else { None };
            }
        }
    }
}

/// An rx queue this thread polls.
struct RxQ {
    /// Position of the interface in the view.
    k: usize,
    /// Queue index.
    qi: usize,
    /// epoll token: sw_if_index << 8 | queue.
    token: u32,
    /// The interrupt eventfd while registered with this thread's epoll.
    fd: Option<std::os::fd::RawFd>,
    mode: RxModeState,
    /// TSC of the last poll when it received packets, else 0 (`Queue::gaps`).
    busy_at: u64,
    /// Polling mode: `prepare_sleep` unmasked the ring (the peer signals while the thread
    /// sleeps); the next poll masks it again.
    unmasked: bool,
    /// Zero-copy slave: TSC of the poll whose refill stopped short for want of buffers, else
    /// 0 ([`RxQ::pending`]).
    starved_at: u64,
}

impl RxQ {
    /// Whether the ring has work that can progress at TSC `now` ([`rx_pending`]): while the
    /// last refill is starved, the slots to refill count only once the pool's free list has
    /// buffers again or `retry` TSC cycles (half a poll tick) have passed since (buffers freed
    /// into a thread's cache are not on the free list; the poll tick retries for them).
    fn pending(&self, conn: &DataConn, q: &Queue, now: u64, retry: u64) -> bool {
        if self.starved_at != 0
            && now.wrapping_sub(self.starved_at) < retry
            && conn.zc.as_ref().is_some_and(|p| p.free_len() == 0)
        {
            return q.ring.tail() != q.last.load(Ordering::Relaxed);
        }
        rx_pending(conn, q)
    }
}

/// `memif-input` instance.
pub struct MemifInput {
    view: View,
    thread: usize,
    qs: Vec<RxQ>,
    irqs: Vec<u32>,
    pre: Vec<BufIdx>,
    out: Vec<BufIdx>,
    nexts: Vec<u16>,
    segs: [(*const u8, usize); MAX_SEGS],
    /// The single-descriptor packets of the burst being received (`parse_single`).
    pkts: Vec<RxPkt>,
    /// Zero-copy rx: the buffers and lengths of the packet being received.
    zc_idx: Vec<BufIdx>,
    zc_len: Vec<u32>,
    /// Zero-copy rx: fresh buffers for refilling.
    fill: Vec<BufIdx>,
    /// Zero-copy rx: the last `refill_zc` stopped short for want of buffers
    /// (`RxQ::starved_at`).
    fill_short: bool,
    /// Half of `POLL_TICK_SECS` in TSC cycles of the thread's clock (`RxQ::pending`): the
    /// tick's wake-up finds it passed even with some error in the clock's calibration.
    retry: u64,
    /// `PollGaps::us_mult` of the thread's clock (`Queue::gaps`).
    us_mult: u64,
}

// SAFETY: `segs` and `pkts` hold pointers into shared mappings only during one `poll` call;
// between calls they are stale values that are never dereferenced.
unsafe impl Send for MemifInput {}

impl MemifInput {
    pub(crate) fn new(sh: Arc<MemifShared>, thread: usize) -> Self {
        MemifInput {
            view: View::new(sh, true),
            thread,
            qs: Vec::new(),
            irqs: Vec::new(),
            pre: vec![BufIdx(0); FRAME_SIZE],
            out: Vec::with_capacity(FRAME_SIZE),
            nexts: Vec::with_capacity(FRAME_SIZE),
            segs: [(std::ptr::null(), 0); MAX_SEGS],
            pkts: vec![RxPkt::default(); FRAME_SIZE],
            zc_idx: Vec::new(),
            zc_len: Vec::new(),
            fill: Vec::new(),
            fill_short: false,
            retry: 0,
            us_mult: 0,
        }
    }

    /// Picks up connection, placement and mode changes: unregisters the eventfds of the old
    /// queues (still open: the view holds their connection), refreshes the view, then takes
    /// the queues placed on this thread, registering their eventfds and setting `MASK_INT`
    /// as their modes want.
    fn reconcile(&mut self, cx: &mut Cx) {
        for q in self.qs.drain(..) {
            if let Some(fd) = q.fd {
                cx.irq_unregister(fd);
            }
        }
        self.view.refresh();
        let nt = cx.shared().n_threads;
        let hz = cx.shared().clock.hz();
        self.us_mult = super::PollGaps::us_mult(hz);
        self.retry = (POLL_TICK_SECS * hz / 2.0) as u64;
        for (k, i) in self.view.ifs.iter().enumerate() {
            let Some(conn) = i.conn.as_ref() else {
                continue;
            };
            for (qi, q) in conn.rx.iter().enumerate() {
                if i.sh.rx_thread(qi, nt) != self.thread {
                    continue;
                }
                let mode = RxModeState::new(i.sh.rx_mode(qi), hz);
                let token = (i.sh.sw_if_index << 8) | qi as u32;
                // Every mode watches the eventfd: polling mode unmasks the ring while the
                // thread sleeps (`prepare_sleep`).
                let fd = q.int_fd.as_raw_fd();
                let fd = match cx.irq_register(fd, token) {
                    Ok(()) => Some(fd),
                    Err(e) => {
                        log::warn!("memif: rx queue {qi}: cannot watch its eventfd: {e}");
                        mode.wants_fd().then_some(fd)
                    }
                };
                set_mask(q, &mode);
                self.qs.push(RxQ {
                    k,
                    qi,
                    token,
                    fd,
                    mode,
                    busy_at: 0,
                    unmasked: false,
                    starved_at: 0,
                });
            }
        }
    }
}

/// Masks the peer's interrupts on our rx ring, or unmasks them ([`unmask`]), as the queue's
/// state wants.
fn set_mask(q: &Queue, mode: &RxModeState) {
    if mode.interrupts() {
        unmask(q);
    } else {
        q.ring.set_flags(q.ring.flags() | RING_FLAG_MASK_INT);
    }
}

/// Clears `MASK_INT` on our rx ring, then a full fence: the flag store is ordered before the
/// caller's next look at the ring (the peer writes the ring, then reads the flag), so a burst
/// published meanwhile is either seen by that look or signalled.
fn unmask(q: &Queue) {
    q.ring.set_flags(q.ring.flags() & !RING_FLAG_MASK_INT);
    fence(Ordering::SeqCst);
}

/// Consumes an eventfd's pending interrupts (non-blocking).
fn drain_eventfd(fd: std::os::fd::RawFd) {
    let mut v: u64 = 0;
    // SAFETY: reads 8 bytes into a local from an fd owned by a live connection.
    unsafe { libc::read(fd, &mut v as *mut u64 as *mut libc::c_void, 8) };
}

#[derive(Copy, Clone)]
struct RxTrace {
    sw_if_index: u32,
    queue: u16,
    len: u32,
}

impl TraceRecord for RxTrace {
    fn format(&self, out: &mut String) {
        let _ = write!(
            out,
            "memif: hw_if_index {} next-index ? queue {} length {}",
            self.sw_if_index, self.queue, self.len
        );
    }
}

/// Holds a queue's spin lock (uncontended on the usual one-thread-per-queue placement).
pub(crate) struct QGuard<'a>(&'a Queue);
impl<'a> QGuard<'a> {
    /// The lock if it is free (for work that can wait for the next try).
    pub(crate) fn try_lock(q: &'a Queue) -> Option<QGuard<'a>> {
        q.lock
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            .then_some(QGuard(q))
    }
    fn lock(q: &'a Queue) -> QGuard<'a> {
        while q
            .lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
        QGuard(q)
    }
}
impl Drop for QGuard<'_> {
    fn drop(&mut self) {
        self.0.lock.store(false, Ordering::Release);
    }
}

/// Whether rx ring `q` holds descriptors not yet consumed or (slave) slots to refill: a
/// master may reset the M2S ring indices when it connects (DPDK's server does), so the
/// slave must refill even before the first packet.
fn rx_pending(conn: &DataConn, q: &Queue) -> bool {
    let last = q.last.load(Ordering::Relaxed);
    if conn.is_slave {
        q.ring.tail() != last || q.ring.head().wrapping_sub(last) != q.ring.size()
    } else {
        q.ring.head() != last
    }
}

impl NodeFn for MemifInput {
    fn poll(&mut self, cx: &mut Cx) -> usize {
        if self.view.stale() {
            self.reconcile(cx);
        }
        self.irqs.clear();
        cx.take_irqs(&mut self.irqs);
        for &t in &self.irqs {
            if let Some(fd) = self.qs.iter().find(|q| q.token == t).and_then(|q| q.fd) {
                drain_eventfd(fd);
            }
        }
        let now = cx.now_tsc();
        let mut total = 0;
        for j in 0..self.qs.len() {
            let (k, qi) = (self.qs[j].k, self.qs[j].qi);
            let Some(conn) = self.view.ifs[k].conn.clone() else {
                continue;
            };
            let sh = self.view.ifs[k].sh.clone();
            let Some(q) = conn.rx.get(qi) else {
                continue;
            };
            // Mask again before receiving: the peer would otherwise signal every burst it
            // sends during the whole receive. (No drain here: the eventfd may come from the
            // peer without O_NONBLOCK, so it is read only when epoll reported it readable.)
            let rq = &mut self.qs[j];
            if rq.unmasked {
                rq.unmasked = false;
                set_mask(q, &rq.mode);
            }
            // Every poll retries a starved refill (this thread's cache may have buffers).
            self.fill_short = false;
            let n = if rx_pending(&conn, q) {
                self.rx_queue(cx, &sh, &conn, qi, q)
            } else {
                0
            };
            let rq = &mut self.qs[j];
            rq.starved_at = if self.fill_short { now.max(1) } else { 0 };
            if rq.busy_at != 0 {
                q.gaps.record(now.wrapping_sub(rq.busy_at), self.us_mult);
            }
            rq.busy_at = if n > 0 { now } else { 0 };
            if rq.mode.account(n, now) {
                set_mask(q, &rq.mode);
            }
            total += n;
        }
        total
    }
    fn active(&self) -> bool {
        if self.view.stale() {
            return true;
        }
        if self.qs.is_empty() {
            return false;
        }
        let now = sluice_infra::clock::rdtsc();
        self.qs.iter().any(|q| {
            q.mode.busy(now)
                || self.view.ifs[q.k].conn.as_ref().is_some_and(|c| {
                    c.rx.get(q.qi)
                        .is_some_and(|r| q.pending(c, r, now, self.retry))
                })
        })
    }
    fn poll_interval(&self) -> Option<f64> {
        self.qs
            .iter()
            .any(|q| q.mode.needs_tick() || q.starved_at != 0)
            .then_some(POLL_TICK_SECS)
    }
    fn polling(&self) -> bool {
        self.qs.iter().any(|q| q.mode.is_polling())
    }
    /// Polling-mode queues let the peer wake the sleeping thread: `MASK_INT` cleared, then
    /// (after a full fence, as in interrupt mode) one more look at the ring. Without it a
    /// queue idle for `BUSY_SECS` was looked at only every `POLL_TICK_SECS` (10 ms: the
    /// whole ring and more lost at any rate when traffic started or resumed). The next poll
    /// masks the ring again.
    fn prepare_sleep(&mut self) -> bool {
        let mut idle = true;
        let now = sluice_infra::clock::rdtsc();
        for rq in self.qs.iter_mut() {
            if rq.mode.mode() != RxMode::Polling || rq.fd.is_none() {
                continue;
            }
            let Some(conn) = self.view.ifs[rq.k].conn.as_ref() else {
                continue;
            };
            let Some(q) = conn.rx.get(rq.qi) else {
                continue;
            };
            unmask(q);
            rq.unmasked = true;
            idle &= !rq.pending(conn, q, now, self.retry);
        }
        idle
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

impl MemifInput {
    fn rx_queue(
        &mut self,
        cx: &mut Cx,
        sh: &IfShared,
        conn: &DataConn,
        qi: usize,
        q: &Queue,
    ) -> usize {
        if let Some(pool) = conn.zc.as_ref() {
            return self.rx_queue_zc(cx, sh, pool, qi, q);
        }
        let _g = QGuard::lock(q);
        let ring = q.ring;
        let rs = ring.size();
        let cur = q.last.load(Ordering::Relaxed);
        let prod = if conn.is_slave {
            ring.tail()
        } else {
            ring.head()
        };
        let n_slots = prod.wrapping_sub(cur);
        if n_slots > rs {
            // The peer moved its index past the ring: resynchronise, count, carry on.
            cx.count(RxCounter::BadRing, 1);
            q.last.store(prod, Ordering::Relaxed);
            if !conn.is_slave {
                ring.set_tail(prod);
            }
            return 0;
        }
        let pool = cx.pool_ref();
        self.out.clear();
        self.nexts.clear();
        let mut st = RxBurst {
            cur,
            n_slots,
            want: (n_slots as usize).min(FRAME_SIZE),
            bytes: 0,
            misses: 0,
            bad: 0,
            traced: cx.trace_budget(),
        };
        let ip6 = self.view.sh.ip6_next.get().copied();
        // Ethernet mode, nothing traced: every packet takes the same arc and only needs its
        // rx_if, so the burst is copied without a per-packet `deliver`.
        let plain = sh.mode != Mode::Ip && st.traced == 0;
        let ds = pool.data_size();
        let regs = &conn.regions[..];
        let sw = sh.sw_if_index;
        loop {
            // Batch: parse the descriptors of whole single-descriptor packets (validating each
            // and prefetching its bytes), then allocate their buffers and copy them.
            let lim = (st.want - self.out.len() - st.misses as usize).min(st.n_slots as usize);
            let f = parse_single(ring, st.cur, regs, ds, &mut self.pkts[..lim]);
            let at = self.out.len();
            let dst_idx = if plain {
                self.out.resize(at + f, BufIdx(0));
                &mut self.out[at..]
            } else {
                &mut self.pre[..f]
            };
            // SAFETY: copy_batch writes the header of every buffer allocated here, before
            // anything else.
            let got = unsafe { cx.bufs().alloc_raw(dst_idx) };
            // SAFETY: `dst_idx[..got]` were allocated from `pool` just now (owned by this
            // node) and `pkts[..got]` validated by `parse_single`.
            let bytes = unsafe { copy_batch(pool, &dst_idx[..got], &self.pkts[..got], sw) };
            st.bytes += bytes;
            if plain {
                self.out.truncate(at + got);
                self.nexts.resize(self.out.len(), RxNext::Eth as u16);
            } else {
                for j in 0..got {
                    let b = self.pre[j];
                    // SAFETY: owned (allocated above), one view at a time.
                    let v = unsafe { pool.buffer(b) };
                    let len = v.hdr.current_length as u64;
                    self.deliver(cx, v, sh, qi, b, len, ip6, &mut st.traced);
                }
            }
            st.cur = st.cur.wrapping_add(got as u16);
            st.n_slots -= got as u16;
            if self.out.len() + (st.misses as usize) >= st.want || st.n_slots == 0 {
                break;
            }
            // The packet at `cur` is chained, bad, or finds no buffer: the general path. When
            // the pool ran dry (`got < f`) the rest waits for the next poll instead of being
            // parsed again here for every slot.
            let starved = got < f;
            if !self.rx_general(cx, pool, conn, ring, sh, qi, ip6, &mut st) || starved {
                break;
            }
        }
        // Return the slots.
        q.last.store(st.cur, Ordering::Relaxed);
        if conn.is_slave {
            refill(conn, q);
        } else {
            ring.set_tail(st.cur);
        }
        self.flush_rx(cx, sh, st.bytes, st.misses, st.bad)
    }

    /// Receives the one packet at `st.cur` that the batch did not take: a descriptor chain
    /// (copied into a buffer chain), a bad descriptor (counted and dropped), or a packet no
    /// buffer is left for (counted as a miss). Returns false when the packet is not complete
    /// in the ring yet (the producer publishes whole packets: the rest comes next poll).
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    #[cold]
    fn rx_general(
        &mut self,
        cx: &mut Cx,
        pool: &BufferPool,
        conn: &DataConn,
        ring: Ring,
        sh: &IfShared,
        qi: usize,
        ip6: Option<Next>,
        st: &mut RxBurst,
    ) -> bool {
        // Find the packet's descriptors and validate every one before copying (the pointers
        // are taken once, so a peer rewriting descriptors meanwhile cannot move a copy out of
        // bounds).
        let mut k: u16 = 0;
        let mut total = 0u64;
        let mut ok = true;
        let mut first = (0u16, 0u32);
        let complete = loop {
            if k >= st.n_slots {
                break false;
            }
            let d = ring.desc(st.cur.wrapping_add(k));
            if k == 0 {
                first = (d.flags, d.metadata);
            }
            let src = conn
                .regions
                .get(d.region as usize)
                .and_then(|r| r.range(d.offset as u64, d.length as u64));
            match src {
                Some(p) if (k as usize) < MAX_SEGS => {
                    self.segs[k as usize] = (p as *const u8, d.length as usize)
                }
                _ => ok = false,
            }
            k += 1;
            total += d.length as u64;
            if d.flags & DESC_FLAG_NEXT == 0 {
                break true;
            }
        };
        if !complete {
            return false;
        }
        st.cur = st.cur.wrapping_add(k);
        st.n_slots -= k;
        let agg = crate::gso::rx_flagged(conn, first.0);
        let max = if agg { crate::gso::MAX_LEN } else { MAX_PKT };
        if !ok || total == 0 || total > max {
            st.bad += 1;
            return true;
        }
        let Some(head) = cx.bufs().alloc_one() else {
            st.misses += 1;
            return true;
        };
        if !copy_in(cx, pool, &self.segs[..k as usize], head, total) {
            st.misses += 1;
            return true;
        }
        if agg {
            // SAFETY: `head` is owned by this node (just received); one view at a time, and
            // this one ends with the statement, before `head` may go back to the pool.
            let marked =
                crate::gso::rx_mark(&mut unsafe { pool.buffer(head) }, first.1, total as usize);
            if !marked {
                cx.count(RxCounter::BadGso, 1);
                cx.free(&[head]);
                return true;
            }
            cx.count(RxCounter::Gso, 1);
        }
        // SAFETY: as above; the only view of `head` now.
        let v = unsafe { pool.buffer(head) };
        self.deliver(cx, v, sh, qi, head, total, ip6, &mut st.traced);
        st.bytes += total;
        true
    }

    /// Sets a received packet's `rx_if`, picks its next arc (ip mode: by IP version), starts
    /// its trace and queues it for enqueueing.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn deliver(
        &mut self,
        cx: &mut Cx,
        mut v: Buffer<'_>,
        sh: &IfShared,
        qi: usize,
        head: BufIdx,
        total: u64,
        ip6: Option<Next>,
        traced: &mut u32,
    ) {
        v.hdr.rx_if = sh.sw_if_index;
        let next = match sh.mode {
            Mode::Ip => match v.data().first().map(|b| b >> 4) {
                Some(4) => RxNext::Ip4.next(),
                Some(6) if ip6.is_some() => ip6.unwrap_or(RxNext::Drop.next()),
                Some(6) => {
                    v.hdr.error = cx.error(RxCounter::Ip6NoNode);
                    RxNext::Drop.next()
                }
                _ => {
                    v.hdr.error = cx.error(RxCounter::BadIp);
                    RxNext::Drop.next()
                }
            },
            _ => RxNext::Eth.next(),
        };
        if *traced > 0
            && cx.trace_start(
                &mut v,
                RxTrace {
                    sw_if_index: sh.sw_if_index,
                    queue: qi as u16,
                    len: total as u32,
                },
            )
        {
            *traced -= 1;
        }
        self.out.push(head);
        self.nexts.push(next.0);
    }

    /// Counts a poll's packets and drops and hands the packets to the next nodes.
    fn flush_rx(&mut self, cx: &mut Cx, sh: &IfShared, bytes: u64, misses: u64, bad: u64) -> usize {
        let t = cx.thread();
        let n = self.out.len();
        if bad > 0 {
            cx.count(RxCounter::BadDesc, bad);
        }
        if misses > 0 {
            cx.count(RxCounter::NoBuffer, misses);
            sh.counters.add(t, counter::RX_MISS, misses);
        }
        if n > 0 {
            sh.counters.add(t, counter::RX_PACKETS, n as u64);
            sh.counters.add(t, counter::RX_BYTES, bytes);
            cx.pcap_capture(point::RX, &self.out, false);
            cx.enqueue_to_next(&self.out, &self.nexts);
        }
        n
    }

    /// Zero-copy slave rx (M2S ring): the master wrote packets into the buffers we handed out.
    /// Each slot's buffer comes from the shadow array, never from the descriptor's
    /// region/offset (which the master may rewrite); only `length` and the `NEXT` flag are
    /// read from the descriptor, and the length is checked against the data size. Then the
    /// consumed slots are refilled with fresh buffers.
    fn rx_queue_zc(
        &mut self,
        cx: &mut Cx,
        sh: &IfShared,
        pool: &BufferPool,
        qi: usize,
        q: &Queue,
    ) -> usize {
        let _g = QGuard::lock(q);
        let ring = q.ring;
        let rs = ring.size();
        let mask = rs - 1;
        let ds = pool.data_size();
        let mut cur = q.last.load(Ordering::Relaxed);
        let prod = ring.tail();
        let mut n_slots = prod.wrapping_sub(cur);
        if n_slots > rs {
            // The master moved tail past the ring: resynchronise (the shadow array keeps
            // every buffer, so nothing leaks), count, refill.
            cx.count(RxCounter::BadRing, 1);
            cur = prod;
            n_slots = 0;
        }
        self.out.clear();
        self.nexts.clear();
        let (mut bytes, mut bad) = (0u64, 0u64);
        let mut traced = cx.trace_budget();
        let ip6 = self.view.sh.ip6_next.get().copied();
        // Ethernet mode, nothing traced: whole single-descriptor packets in one pass.
        let plain = sh.mode != Mode::Ip && traced == 0;
        while self.out.len() < FRAME_SIZE && n_slots > 0 {
            if plain {
                let at = self.out.len();
                let max = (FRAME_SIZE - at).min(n_slots as usize);
                self.out.resize(at + max, BufIdx(0));
                let (got, b) = rx_zc_single(
                    ring,
                    &q.shadow,
                    cur,
                    pool,
                    sh.sw_if_index,
                    &mut self.out[at..],
                );
                self.out.truncate(at + got);
                self.nexts.resize(at + got, RxNext::Eth as u16);
                bytes += b;
                cur = cur.wrapping_add(got as u16);
                n_slots -= got as u16;
                if got == max {
                    continue;
                }
            }
            // A chain, a bad slot, or (not plain) any packet: one at a time.
            // How many descriptors the packet spans (published whole by the master).
            let mut k: u16 = 0;
            let complete = loop {
                if k >= n_slots {
                    break false;
                }
                let d = ring.desc(cur.wrapping_add(k));
                k += 1;
                if d.flags & DESC_FLAG_NEXT == 0 {
                    break true;
                }
            };
            if !complete {
                break;
            }
            let mut ok = k as usize <= MAX_SEGS;
            let mut total = 0u64;
            self.zc_idx.clear();
            self.zc_len.clear();
            for j in 0..k {
                let slot = cur.wrapping_add(j);
                let len = ring.desc(slot).length;
                let b = q.shadow[(slot & mask) as usize].swap(0, Ordering::Relaxed);
                if b == 0 {
                    ok = false; // a slot we never handed out
                    continue;
                }
                ok &= len as usize <= ds;
                total += len as u64;
                self.zc_idx.push(BufIdx(b - 1));
                self.zc_len.push(len);
            }
            cur = cur.wrapping_add(k);
            n_slots -= k;
            if !ok || total == 0 || total > MAX_PKT {
                bad += 1;
                cx.free(&self.zc_idx);
                continue;
            }
            let head = self.zc_idx[0];
            for (j, (&b, &len)) in self.zc_idx.iter().zip(&self.zc_len).enumerate() {
                // SAFETY: `b` came out of the shadow array, so this node owns it; one view at
                // a time. The peer may still write its bytes: zero-copy trusts the peer for
                // packet bytes (docs/memif.md), never for metadata.
                let mut v = unsafe { pool.buffer(b) };
                v.hdr.current_data = 0;
                v.set_len(len as usize);
                if let Some(n) = self.zc_idx.get(j + 1) {
                    v.hdr.next_buffer = n.0;
                    v.hdr.flags |= flags::NEXT_PRESENT;
                }
            }
            if k > 1 {
                // SAFETY: owned head; the views above are gone.
                let h = unsafe { pool.buffer(head) };
                h.hdr.total_length_not_including_first_buffer =
                    (total - self.zc_len[0] as u64) as u32;
                h.hdr.flags |= flags::TOTAL_LENGTH_VALID;
            }
            // SAFETY: `head` came out of the shadow array (owned); the views above are gone.
            let v = unsafe { pool.buffer(head) };
            self.deliver(cx, v, sh, qi, head, total, ip6, &mut traced);
            bytes += total;
        }
        q.last.store(cur, Ordering::Relaxed);
        self.refill_zc(cx, pool, q);
        self.flush_rx(cx, sh, bytes, 0, bad)
    }

    /// Zero-copy slave: hands every free M2S slot to the master with a buffer (the one the
    /// shadow array still holds for it, else a fresh one): `{region 1, offset: the buffer's
    /// data area (behind the headroom, so encapsulation still works in place), length: data
    /// size}`. Stops early, to retry at the next poll, when the pool is exhausted
    /// (`fill_short`: the slots left empty are counted).
    fn refill_zc(&mut self, cx: &mut Cx, pool: &BufferPool, q: &Queue) {
        let ring = q.ring;
        let rs = ring.size();
        let mask = rs - 1;
        let head = ring.head();
        let used = head.wrapping_sub(q.last.load(Ordering::Relaxed));
        if used > rs {
            return;
        }
        let n = rs - used;
        let slot = |i: u16| &q.shadow[(head.wrapping_add(i) & mask) as usize];
        let empty = (0..n)
            .filter(|&i| slot(i).load(Ordering::Relaxed) == 0)
            .count();
        self.fill.resize(empty, BufIdx(0));
        let got = cx.bufs().alloc(&mut self.fill);
        let mut fresh = self.fill[..got].iter();
        let mut filled = 0u16;
        for i in 0..n {
            let s = slot(i);
            let b = match s.load(Ordering::Relaxed) {
                0 => match fresh.next() {
                    Some(b) => {
                        s.store(b.0 + 1, Ordering::Relaxed);
                        *b
                    }
                    None => {
                        self.fill_short = true;
                        cx.count(RxCounter::FillShort, u64::from(n - i));
                        break;
                    }
                },
                v => BufIdx(v - 1),
            };
            let off = pool.data_offset(b).unwrap_or(0) + HEADROOM;
            ring.set_desc(
                head.wrapping_add(i),
                Desc {
                    flags: 0,
                    region: 1,
                    length: pool.data_size() as u32,
                    offset: off as u32,
                    metadata: 0,
                },
            );
            filled += 1;
        }
        if filled > 0 {
            ring.set_head(head.wrapping_add(filled));
        }
    }
}

/// Zero-copy slave rx fast path: takes the packets from slot `cur` on (at most `out.len()`)
/// while each is one descriptor of 1..=data size bytes in a slot we handed a buffer out for:
/// the buffer (from the shadow array, never from the descriptor) gets its length and
/// `rx_if` and goes to `out`. Returns (packets, bytes); the slot it stops at is the general
/// path's. Kept out of line so that its loop has the registers to itself.
#[inline(never)]
fn rx_zc_single(
    ring: Ring,
    shadow: &[std::sync::atomic::AtomicU32],
    cur: u16,
    pool: &BufferPool,
    sw: u32,
    out: &mut [BufIdx],
) -> (usize, u64) {
    let arena = pool.arena();
    let ds = pool.data_size();
    let mask = (ring.size() - 1) as usize;
    let mut bytes = 0u64;
    for (i, o) in out.iter_mut().enumerate() {
        let slot = cur.wrapping_add(i as u16);
        // The header of a buffer a few slots on (last touched when it was handed out).
        let ahead = shadow[(slot.wrapping_add(4) as usize) & mask].load(Ordering::Relaxed);
        arena.prefetch_header(BufIdx(ahead.wrapping_sub(1)));
        let d = ring.desc(slot);
        let len = d.length;
        let s = &shadow[slot as usize & mask];
        let b = s.load(Ordering::Relaxed);
        // One compare for 1..=ds (0 wraps to the top); a slot never handed out holds 0.
        if d.flags & DESC_FLAG_NEXT != 0 || len.wrapping_sub(1) as usize >= ds || b == 0 {
            return (i, bytes);
        }
        // Taken out of the ring (the queue lock is held: a plain store will do).
        s.store(0, Ordering::Relaxed);
        let b = BufIdx(b - 1);
        // SAFETY: `b` came out of the shadow array, so this node owns it (and it is a buffer
        // of the pool: only pool buffers are put there); no other view of it exists. Its
        // header was reset when it was handed out and nobody else writes it: the peer writes
        // packet bytes only.
        let h = unsafe { arena.header_mut(b) };
        h.current_data = 0;
        h.current_length = len as u16;
        h.rx_if = sw;
        *o = b;
        bytes += len as u64;
    }
    (out.len(), bytes)
}

/// Zero-copy slave tx fast path of [`tx_ring_zc`]: while a slot is free and the packet at the
/// start of `bufs` is one non-empty buffer, writes one descriptor pointing at its bytes in
/// region 1 (the data array; ip mode skips `l2` bytes) and keeps the buffer in the slot's
/// shadow entry. Returns how many; the packet it stops at (if any) is the caller's.
#[inline(never)]
fn tx_zc_single(
    pool: &BufferPool,
    ring: Ring,
    shadow: &[std::sync::atomic::AtomicU32],
    l2: usize,
    bufs: &[BufIdx],
    slot: &mut u16,
    free: &mut u16,
) -> usize {
    let arena = pool.arena();
    let stride = pool.stride();
    // A buffer's packet bytes lie in its first `end` bytes (headroom + data area).
    let end = HEADROOM + pool.data_size();
    let mask = (ring.size() - 1) as usize;
    let n = bufs.len().min(*free as usize);
    let mut s = *slot;
    let mut i = 0;
    while i < n {
        let b = bufs[i];
        if let Some(&nb) = bufs.get(i + 4) {
            arena.prefetch_header(nb);
        }
        // SAFETY: the frame's buffers are owned by this node; read-only header access.
        let Some((start, len)) = single_span(unsafe { arena.header(b) }, end, l2) else {
            break;
        };
        ring.set_desc(
            s,
            Desc {
                flags: 0,
                region: 1,
                length: len as u32,
                // The arena is at most 4 GiB (checked when zero-copy is configured).
                offset: (b.0 as usize * stride + start) as u32,
                metadata: 0,
            },
        );
        shadow[s as usize & mask].store(b.0 + 1, Ordering::Relaxed);
        s = s.wrapping_add(1);
        i += 1;
    }
    *slot = s;
    *free -= i as u16;
    i
}

/// The bytes a tx fast path sends of a one-buffer packet: (their start in the buffer,
/// counted from the start of its headroom, and their length), `l2` bytes (ip mode: the
/// Ethernet header the rewrite added) skipped. `None`, leaving the packet to the general
/// path, for a chain, a packet not inside the buffer's first `end` bytes (headroom + data
/// area), or one with no byte past `l2` (empty, or in ip mode no more than an Ethernet
/// header: the general path drops it as `too_long`).
#[inline(always)]
fn single_span(h: &BufferHeader, end: usize, l2: usize) -> Option<(usize, usize)> {
    // A GSO aggregate needs its descriptor flag: the general path.
    if h.flags & (flags::NEXT_PRESENT | flags::GSO) != 0 {
        return None;
    }
    // current_data >= -HEADROOM: a more negative one wraps to a huge start and fails the
    // check.
    let start = (HEADROOM as isize + h.current_data as isize) as usize;
    let blen = h.current_length as usize;
    if start > end || blen > end - start || blen <= l2 {
        return None;
    }
    Some((start + l2, blen - l2))
}

/// Copies `n` bytes from `src` to `dst` in 64-byte blocks (rounded up, so up to 63 bytes
/// past `n` are read and written) when `room` bytes are readable at `src` and writable at
/// `dst` and the packet is small (at most 4 blocks); else with `copy_nonoverlapping`
/// (libc's memcpy, which is as wide and better for long copies). Inlined, a 64-byte frame
/// is four 16-byte loads and four stores instead of a call into memcpy's size dispatch,
/// behind one compare.
///
/// # Safety
/// `n >= 1` (both callers' fast paths take no empty packet); `src..src+max(n, room')`
/// readable and `dst..dst+max(n, room')` writable, where room' is `n` rounded up to 64
/// when that is <= `room`, else `n`; the ranges do not overlap.
#[inline(always)]
unsafe fn copy_wide(dst: *mut u8, src: *const u8, n: usize, room: usize) {
    const W: usize = 64;
    debug_assert!(n > 0);
    // n >= 1, so r >= W: the first block is always due.
    let r = (n + W - 1) & !(W - 1);
    if n <= 4 * W && r <= room {
        // Straight-line blocks (a loop gets unrolled 8x with a remainder loop, which costs
        // more than the copy for one or two blocks).
        let block = |o: usize| {
            // SAFETY: o + W <= r <= room on both sides (caller's contract).
            unsafe {
                let x = std::ptr::read_unaligned(src.add(o) as *const [u8; W]);
                std::ptr::write_unaligned(dst.add(o) as *mut [u8; W], x);
            }
        };
        block(0);
        if r > W {
            block(W);
            if r > 2 * W {
                block(2 * W);
                if r > 3 * W {
                    block(3 * W);
                }
            }
        }
    } else {
        // SAFETY: n <= room on both sides (caller's contract).
        unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
    }
}

/// Copies the single-descriptor packets `pkts` into the fresh buffers `bufs` (pairwise) and
/// writes their headers: a fresh header with `rx_if` (one 64-byte template copy) and
/// `current_length`. Returns the bytes copied. Kept out of line so that its loop has the
/// registers to itself. Postcondition: writes the header of every buffer of `bufs`
/// (`reset_from`) before anything can fail, so that [`sluice_buffer::BufferCache::alloc_raw`]'s buffers
/// are never seen with a stale header.
///
/// # Safety
/// Every buffer of `bufs` is owned by the caller (allocated from `pool`, header not yet
/// initialised or fresh, no other view), and every packet of `pkts` was validated by
/// [`parse_single`].
#[inline(never)]
unsafe fn copy_batch(pool: &BufferPool, bufs: &[BufIdx], pkts: &[RxPkt], sw: u32) -> u64 {
    let arena = pool.arena();
    let (data, _) = pool.region();
    let stride = pool.stride();
    let mut tmpl = BufferHeader::TEMPLATE;
    tmpl.rx_if = sw;
    let mut bytes = 0u64;
    for (&b, p) in bufs.iter().zip(pkts) {
        // SAFETY: owned (caller's contract), no other view; `header_mut` checks that `b` is
        // a buffer of `pool`.
        let h = unsafe { arena.header_mut(b) };
        h.reset_from(&tmpl);
        h.current_length = p.len as u16;
        // SAFETY: `b` is a buffer of `pool` (checked above) owned by the caller; its data
        // area (ds bytes behind the headroom, where current_data 0 puts the packet) is ours.
        let dst = unsafe { data.add(b.0 as usize * stride + HEADROOM) };
        // SAFETY: `p` was bounds-checked by `parse_single` (1 <= len <= ds, src..src+room
        // readable, room <= ds); the destination holds ds bytes.
        unsafe { copy_wide(dst, p.src, p.len as usize, p.room as usize) };
        bytes += p.len as u64;
    }
    bytes
}

/// Copies the packet in `segs` (bounds-checked pointers into mapped regions) into `head`,
/// chaining freshly allocated buffers. On allocation failure frees what it used (including
/// `head`) and returns false.
fn copy_in(
    cx: &mut Cx,
    pool: &BufferPool,
    segs: &[(*const u8, usize)],
    head: BufIdx,
    total: u64,
) -> bool {
    let ds = pool.data_size();
    let mut cur_b = head;
    let mut fill = 0usize;
    // SAFETY: `head` is owned by the caller and handed to us; views are created one at a time
    // for distinct buffers of the chain being built.
    let mut v = unsafe { pool.buffer(cur_b) };
    v.hdr.current_data = 0;
    let mut head_len = 0usize;
    for &(src, len) in segs {
        let mut off = 0usize;
        while off < len {
            if fill == ds {
                v.set_len(fill);
                if cur_b == head {
                    head_len = fill;
                }
                let Some(nb) = cx.bufs().alloc_one() else {
                    cx.free(&[head]);
                    return false;
                };
                v.hdr.next_buffer = nb.0;
                v.hdr.flags |= flags::NEXT_PRESENT;
                // SAFETY: `nb` was just taken from this node's allocation.
                v = unsafe { pool.buffer(nb) };
                v.hdr.current_data = 0;
                cur_b = nb;
                fill = 0;
            }
            let n = (len - off).min(ds - fill);
            let dst = &mut v.raw_data_mut()[fill..fill + n];
            // SAFETY: `src..src+len` was bounds-checked against its mapped region by the
            // caller; the destination is a slice of an owned buffer of length n.
            unsafe { std::ptr::copy_nonoverlapping(src.add(off), dst.as_mut_ptr(), n) };
            fill += n;
            off += n;
        }
    }
    v.set_len(fill);
    if cur_b != head {
        // SAFETY: owned head, a different buffer from the one `v` views.
        let h = unsafe { pool.buffer(head) };
        h.hdr.total_length_not_including_first_buffer = (total as usize - head_len) as u32;
        h.hdr.flags |= flags::TOTAL_LENGTH_VALID;
    }
    true
}

/// A single-descriptor packet validated by [`parse_single`]: where its bytes are, how many,
/// and how many may be read from there (to the region's end, at most a buffer's data size).
#[derive(Copy, Clone)]
struct RxPkt {
    src: *const u8,
    len: u32,
    room: u32,
}

impl Default for RxPkt {
    fn default() -> Self {
        RxPkt {
            src: std::ptr::null(),
            len: 0,
            room: 0,
        }
    }
}

/// State of one rx burst (one queue, one poll).
struct RxBurst {
    /// Next slot to consume, and how many published slots remain from it.
    cur: u16,
    n_slots: u16,
    /// Most packets to deliver (a frame).
    want: usize,
    bytes: u64,
    misses: u64,
    bad: u64,
    traced: u32,
}

/// Parses the published descriptors from `cur` into `out` while each holds a whole packet
/// (no `NEXT`) of 1..=`ds` bytes inside its region, prefetching each packet's first line;
/// returns how many (`out.len()` at most). The descriptor that stops it is left for the
/// general path.
#[inline(never)]
fn parse_single(ring: Ring, cur: u16, regs: &[Region], ds: usize, out: &mut [RxPkt]) -> usize {
    // The region of the previous descriptor, kept in registers: a peer puts its buffers in
    // one region, so the lookup is redone only when the region changes.
    let mut rid = u16::MAX;
    let (mut base, mut size) = (std::ptr::null::<u8>(), 0u64);
    for (i, o) in out.iter_mut().enumerate() {
        let d = ring.desc(cur.wrapping_add(i as u16));
        let len = d.length;
        // One compare for 1..=ds (0 wraps to the top).
        // Any flag (`NEXT`, Sluice's GSO flag) takes the general path.
        if d.flags != 0 || len.wrapping_sub(1) as usize >= ds {
            return i;
        }
        if d.region != rid {
            let Some((r, b)) = regs
                .get(d.region as usize)
                .and_then(|r| Some((r, r.range(0, 0)?)))
            else {
                return i;
            };
            rid = d.region;
            base = b;
            size = r.size() as u64;
        }
        // offset and length are u32, so the sum cannot overflow a u64.
        let off = d.offset as u64;
        if off + len as u64 > size {
            return i;
        }
        // In the region (checked above): off + len <= size.
        let src = base.wrapping_add(off as usize);
        sluice_infra::prefetch(src);
        *o = RxPkt {
            src,
            len,
            room: (size - off).min(ds as u64) as u32,
        };
    }
    out.len()
}

/// Slave rx: hands every consumed slot back to the master with its own buffer.
fn refill(conn: &DataConn, q: &Queue) {
    let ring = q.ring;
    let rs = ring.size();
    let head = ring.head();
    let last_tail = q.last.load(Ordering::Relaxed);
    let used = head.wrapping_sub(last_tail);
    if used > rs {
        return;
    }
    let n = rs - used;
    let bs = conn.buffer_size;
    let mask = rs - 1;
    for i in 0..n {
        let slot = head.wrapping_add(i);
        ring.set_desc(
            slot,
            Desc {
                flags: 0,
                region: 0,
                length: bs,
                offset: (q.buf_base + (slot & mask) as u64 * bs as u64) as u32,
                metadata: 0,
            },
        );
    }
    ring.set_head(head.wrapping_add(n));
}

/// `memif-tx` instance.
pub struct MemifTx {
    view: View,
    /// Buffers to free at the end of the frame (all of them in copy mode; in zero-copy mode
    /// the ones not left in the ring plus the ones the master consumed).
    done: Vec<BufIdx>,
    /// Whether `done` may hold a buffer chain: else (every packet went the fast path, which
    /// takes single buffers only) it is freed without reading the headers again.
    done_chains: bool,
}

impl MemifTx {
    pub(crate) fn new(sh: Arc<MemifShared>) -> Self {
        MemifTx {
            view: View::new(sh, false),
            done: Vec::with_capacity(FRAME_SIZE),
            done_chains: false,
        }
    }
}

impl NodeFn for MemifTx {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        if self.view.stale() {
            self.view.refresh();
        }
        let pool = cx.pool_ref();
        let mut s = 0;
        while s < frame.len() {
            // SAFETY: this node owns the frame; read-only header access.
            let tx = unsafe { pool.header(frame[s]) }.tx_if;
            s += self.tx_run(cx, pool, tx, &frame[s..]);
        }
        if self.done_chains {
            cx.free(&self.done);
        } else {
            cx.bufs().free_no_next(&self.done);
        }
        self.done.clear();
        self.done_chains = false;
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// How many packets at the start of `bufs` go out on `tx`.
fn run_len(pool: &BufferPool, bufs: &[BufIdx], tx: u32) -> usize {
    bufs.iter()
        // SAFETY: the frame's buffers are owned by this node; read-only header access.
        .position(|&b| unsafe { pool.header(b) }.tx_if != tx)
        .unwrap_or(bufs.len())
}

impl MemifTx {
    /// Transmits the packets at the start of `bufs` that go out on `tx` (at least the first);
    /// returns how many that was.
    fn tx_run(&mut self, cx: &mut Cx, pool: &BufferPool, tx: u32, bufs: &[BufIdx]) -> usize {
        let t = cx.thread();
        let rt = self
            .view
            .by_sw
            .get(tx as usize)
            .copied()
            .flatten()
            .and_then(|k| self.view.ifs.get(k as usize));
        let Some(rt) = rt else {
            let n = run_len(pool, bufs, tx);
            cx.count(TxCounter::NotConnected, n as u64);
            self.done.extend_from_slice(&bufs[..n]);
            self.done_chains = true;
            return n;
        };
        let Some(conn) = rt.weak.upgrade() else {
            let n = run_len(pool, bufs, tx);
            cx.count(TxCounter::NotConnected, n as u64);
            let lost = sluice_vnet::devices::total_bytes(pool, &bufs[..n]);
            rt.sh.counters.tx_failed(t, n as u64, lost);
            self.done.extend_from_slice(&bufs[..n]);
            self.done_chains = true;
            return n;
        };
        let q = &conn.tx[t % conn.tx.len()];
        let r = if conn.zc.is_some() {
            let n = run_len(pool, bufs, tx);
            self.done_chains = true;
            tx_ring_zc(pool, q, rt.sh.mode, &bufs[..n], &mut self.done)
        } else {
            let r = tx_ring(pool, &conn, q, rt.sh.mode, tx, bufs);
            self.done.extend_from_slice(&bufs[..r.consumed]);
            self.done_chains |= !r.single;
            r
        };
        let failed: u64 = r.fails.iter().sum();
        for (&c, &n) in TxCounter::ALL.iter().zip(r.fails.iter()) {
            if n > 0 {
                cx.count(c, n);
            }
        }
        if failed > 0 {
            rt.sh.counters.tx_failed(t, failed, r.lost);
        }
        if r.sent > 0 {
            // The ring index was published (release store); order it before reading the flag.
            fence(Ordering::SeqCst);
            if q.ring.flags() & RING_FLAG_MASK_INT == 0 {
                super::shm::signal(q.int_fd.as_raw_fd());
                cx.count(TxCounter::InterruptsSent, 1);
            }
        }
        r.consumed
    }
}

/// What a transmit on one ring did.
pub(crate) struct TxResult {
    /// Packets taken from the frame (sent or failed).
    pub(crate) consumed: usize,
    /// Packets written to the ring.
    pub(crate) sent: usize,
    /// Failures per `memif-tx` counter.
    pub(crate) fails: TxFails,
    /// Bytes of the packets not sent (as `interface-output` counted them).
    lost: u64,
    /// Every packet taken went the fast path (single buffers, no chain behind any).
    single: bool,
}

/// Copies the packets at the start of `bufs` that go out on `tx` into free slots of the ring
/// and publishes it once. One-buffer packets that fit a slot take [`tx_fast`]; chains and
/// errors go through [`tx_general`]. A full ring or a bad slot fails the rest of the run.
pub(crate) fn tx_ring(
    pool: &BufferPool,
    conn: &DataConn,
    q: &Queue,
    mode: Mode,
    tx: u32,
    bufs: &[BufIdx],
) -> TxResult {
    let _g = QGuard::lock(q);
    let ring = q.ring;
    let rs = ring.size();
    let mut r = TxResult {
        consumed: 0,
        sent: 0,
        fails: [0; TxCounter::DESCS.len()],
        lost: 0,
        single: true,
    };
    // Free slots and the index we advance.
    let (mut slot, mut free) = if conn.is_slave {
        let head = ring.head();
        let used = head.wrapping_sub(ring.tail());
        (head, rs.saturating_sub(used))
    } else {
        let tail = ring.tail();
        let f = ring.head().wrapping_sub(tail);
        (tail, if f > rs { 0 } else { f })
    };
    // ip mode carries no L2 header: the one the IPv4 rewrite added is skipped.
    let l2 = if mode == Mode::Ip { 14 } else { 0 };
    let mut i = 0;
    loop {
        let n = if conn.is_slave {
            tx_fast::<true>(pool, conn, q, tx, l2, &bufs[i..], &mut slot, &mut free)
        } else {
            tx_fast::<false>(pool, conn, q, tx, l2, &bufs[i..], &mut slot, &mut free)
        };
        r.sent += n;
        i += n;
        // SAFETY: the frame's buffers are owned by this node; read-only header access.
        if i == bufs.len() || unsafe { pool.header(bufs[i]) }.tx_if != tx {
            break;
        }
        let b = bufs[i];
        r.single = false;
        match tx_general(pool, conn, q, mode, b, &mut slot, &mut free) {
            Ok(()) => r.sent += 1,
            Err(e @ (TxCounter::TooLong | TxCounter::GsoRefused)) => {
                r.fails[e as usize] += 1;
                r.lost += sluice_vnet::devices::total_bytes(pool, &[b]);
            }
            Err(e) => {
                // The rest of the run cannot go either.
                let n = run_len(pool, &bufs[i..], tx);
                r.fails[e as usize] += n as u64;
                r.lost += sluice_vnet::devices::total_bytes(pool, &bufs[i..i + n]);
                i += n;
                break;
            }
        }
        i += 1;
    }
    r.consumed = i;
    if r.sent > 0 {
        if conn.is_slave {
            ring.set_head(slot);
        } else {
            ring.set_tail(slot);
        }
    }
    r
}

/// The single-buffer fast path of [`tx_ring`] (`SLAVE`: the slot is our own buffer; else the
/// slave handed it out in the descriptor): copies packets from the start of `bufs` while each
/// goes out on `tx`, is one buffer, fits its slot and a slot is free: one descriptor read (master), one
/// bounds check, one wide copy, one descriptor write. Returns how many; the packet it stops
/// at (if any) is the caller's.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn tx_fast<const SLAVE: bool>(
    pool: &BufferPool,
    conn: &DataConn,
    q: &Queue,
    tx: u32,
    l2: usize,
    bufs: &[BufIdx],
    slot: &mut u16,
    free: &mut u16,
) -> usize {
    let ring = q.ring;
    let mask = ring.size() - 1;
    let arena = pool.arena();
    let (data, _) = pool.region();
    let stride = pool.stride();
    // A buffer's packet bytes lie in its first `end` bytes (headroom + data area).
    let end = HEADROOM + pool.data_size();
    let regs = &conn.regions[..];
    let (buf_base, bs) = (q.buf_base, conn.buffer_size);
    let n = bufs.len().min(*free as usize);
    let mut s = *slot;
    let mut i = 0;
    while i < n {
        let b = bufs[i];
        if let Some(&nb) = bufs.get(i + 2) {
            arena.prefetch(nb);
        }
        // SAFETY: the frame's buffers are owned by this node; read-only header access.
        let h = unsafe { arena.header(b) };
        if h.tx_if != tx {
            break;
        }
        let Some((start, len)) = single_span(h, end, l2) else {
            break;
        };
        let (region, off, cap) = if SLAVE {
            (0u16, (buf_base + (s & mask) as u64 * bs as u64) as u32, bs)
        } else {
            // The slave's descriptors a few slots on (written by its core).
            ring.prefetch_desc(s.wrapping_add(8));
            let d = ring.desc(s);
            (d.region, d.offset, d.length)
        };
        // 1 <= len (single_span) <= cap.
        if len > cap as usize {
            break;
        }
        let Some(dst) = regs
            .get(region as usize)
            .and_then(|r| r.range(off as u64, cap as u64))
        else {
            break;
        };
        // SAFETY: `b` is below the pool's size (`arena.header` checked it) and owned; its
        // bytes lie at start .. start + len <= end of its buffer (`single_span`).
        let src = unsafe { data.add(b.0 as usize * stride + start) };
        // Readable behind the packet: the rest of its buffer; writable: the slot.
        let room = (end - start).min(cap as usize);
        // SAFETY: dst..dst+cap is inside a mapped region (checked); src..src+room is in the
        // buffer (as above); len <= room.
        unsafe { copy_wide(dst, src, len, room) };
        if SLAVE {
            ring.set_desc(
                s,
                Desc {
                    flags: 0,
                    region,
                    length: len as u32,
                    offset: off,
                    metadata: 0,
                },
            );
        } else {
            // The slave wrote region and offset; only the length changes.
            ring.set_desc_head(s, 0, region, len as u32);
        }
        s = s.wrapping_add(1);
        i += 1;
    }
    *slot = s;
    *free -= i as u16;
    i
}

/// Copies one packet the fast path does not take (a buffer chain, a packet larger than a
/// slot, or one that meets a bad slot or a full ring) into as many slots as it needs,
/// chaining descriptors with `NEXT`. On failure nothing of the packet stays in the ring.
#[cold]
#[inline(never)]
fn tx_general(
    pool: &BufferPool,
    conn: &DataConn,
    q: &Queue,
    mode: Mode,
    b: BufIdx,
    slot: &mut u16,
    free: &mut u16,
) -> Result<(), TxCounter> {
    let ring = q.ring;
    let mask = ring.size() - 1;
    // SAFETY: the caller owns `b`; read-only header access.
    let (mut first_flags, mut meta) = crate::gso::tx_desc(unsafe { pool.header(b) });
    if first_flags != 0 && !conn.gso {
        return Err(TxCounter::GsoRefused);
    }
    let mut segs: [(*const u8, usize); MAX_SEGS] = [(std::ptr::null(), 0); MAX_SEGS];
    let at = |_, v: &Buffer<'_>, skip: usize| v.data()[skip..].as_ptr();
    // An aggregate the peer's memif-input would drop (longer than `gso::MAX_LEN`, or in
    // more than `MAX_SEGS` slots) is not sent.
    let agg = first_flags != 0;
    let Some((_, total)) = gather(pool, b, mode, &mut segs, at)
        .filter(|&(_, t)| t > 0 && !(agg && t as u64 > crate::gso::MAX_LEN))
    else {
        return Err(TxCounter::TooLong);
    };
    // Written back only when the whole packet is in the ring.
    let (mut s, mut free_) = (*slot, *free);
    let mut si = 0;
    let mut soff = 0;
    let mut left = total;
    let mut slots = 0;
    while left > 0 {
        if agg && slots == MAX_SEGS {
            return Err(TxCounter::TooLong);
        }
        slots += 1;
        if free_ == 0 {
            return Err(TxCounter::RingFull);
        }
        // Destination slot: our own buffer (slave) or the one the slave handed out.
        let (region, off, cap) = if conn.is_slave {
            let bs = conn.buffer_size;
            (
                0u16,
                (q.buf_base + (s & mask) as u64 * bs as u64) as u32,
                bs as usize,
            )
        } else {
            let d = ring.desc(s);
            (d.region, d.offset, d.length as usize)
        };
        let dst = conn
            .regions
            .get(region as usize)
            .and_then(|r| r.range(off as u64, cap as u64));
        let Some(dst) = dst.filter(|_| cap > 0) else {
            return Err(TxCounter::BadDesc);
        };
        let mut w = 0;
        while w < cap && left > 0 {
            let (p, l) = segs[si];
            let n = (l - soff).min(cap - w);
            // SAFETY: dst..dst+cap is inside a mapped region (checked above); the source is a
            // live buffer slice of length l >= soff + n.
            unsafe { std::ptr::copy_nonoverlapping(p.add(soff), dst.add(w), n) };
            w += n;
            soff += n;
            left -= n;
            if soff == l {
                si += 1;
                soff = 0;
            }
        }
        ring.set_desc(
            s,
            Desc {
                flags: if left > 0 { DESC_FLAG_NEXT } else { 0 } | first_flags,
                region,
                length: w as u32,
                offset: off,
                metadata: meta,
            },
        );
        (first_flags, meta) = (0, 0);
        s = s.wrapping_add(1);
        free_ -= 1;
    }
    *slot = s;
    *free = free_;
    Ok(())
}

/// Gathers packet `b`'s buffer chain into `segs`, one (start, length) per buffer with bytes
/// to send, `start` being `at(buffer, its view, bytes skipped)`: a pointer to copy from, or
/// the bytes' offset in the pool's data array for zero-copy. In ip mode the packet's first
/// 14 bytes, the Ethernet header the rewrite added, are skipped (ip mode carries no L2
/// header), across buffers if the first is shorter. Returns (segments, bytes): 0 bytes for
/// an empty packet or, in ip mode, one of no more than an Ethernet header (the callers drop
/// both as `too_long`, as the fast paths leave them); `None` when the chain has more than
/// `MAX_SEGS` buffers.
#[inline(always)]
fn gather<T: Copy>(
    pool: &BufferPool,
    b: BufIdx,
    mode: Mode,
    segs: &mut [(T, usize); MAX_SEGS],
    at: impl Fn(BufIdx, &Buffer<'_>, usize) -> T,
) -> Option<(usize, usize)> {
    let mut ns = 0;
    let mut nbuf = 0;
    let mut total = 0usize;
    let mut l2 = if mode == Mode::Ip { 14 } else { 0 };
    let mut cur = Some(b);
    while let Some(x) = cur {
        if nbuf == MAX_SEGS {
            return None;
        }
        nbuf += 1;
        // SAFETY: the frame's buffers (and their chains) are owned by this node.
        let v = unsafe { pool.buffer(x) };
        let len = v.data().len();
        let skip = l2.min(len);
        l2 -= skip;
        if len > skip {
            segs[ns] = (at(x, &v, skip), len - skip);
            ns += 1;
            total += len - skip;
        }
        cur = v.hdr.next();
    }
    Some((ns, total))
}

/// Zero-copy slave tx (S2M ring): first takes back the packets the master consumed (old
/// `tail` .. new `tail`; resynchronises, taking back everything, when the peer's indices are
/// inconsistent), then writes one descriptor per buffer of each packet pointing at the buffer's
/// bytes in region 1 (chains: `NEXT`), and keeps the chain's head in the shadow slot of the
/// packet's last descriptor. Buffers to free (consumed, or not sent) go to `done`. Returns
/// (packets sent, failures per tx counter).
fn tx_ring_zc(
    pool: &BufferPool,
    q: &Queue,
    mode: Mode,
    bufs: &[BufIdx],
    done: &mut Vec<BufIdx>,
) -> TxResult {
    let _g = QGuard::lock(q);
    let ring = q.ring;
    let rs = ring.size();
    let mask = rs - 1;
    let mut fails: TxFails = [0; TxCounter::DESCS.len()];
    let mut slot = ring.head();
    if !q.reclaim_tx(slot, done) {
        q.take_all(done);
        slot = ring.tail();
        q.last.store(slot, Ordering::Relaxed);
    }
    let mut free = rs - slot.wrapping_sub(q.last.load(Ordering::Relaxed));
    let mut sent = 0;
    let mut segs = [(0usize, 0usize); MAX_SEGS];
    // Bytes of the packets not sent (as `interface-output` counted them).
    let mut lost = 0u64;
    // A descriptor points at the bytes in region 1, the pool's data array.
    let at = |x, v: &Buffer<'_>, skip| pool.data_offset(x).unwrap_or(0) + v.headroom() + skip;
    // ip mode carries no L2 header: the one the IPv4 rewrite added is skipped.
    let l2 = if mode == Mode::Ip { 14 } else { 0 };
    let mut i = 0;
    while i < bufs.len() {
        let n = tx_zc_single(pool, ring, &q.shadow, l2, &bufs[i..], &mut slot, &mut free);
        sent += n;
        i += n;
        let Some(&b) = bufs.get(i) else {
            break;
        };
        // A chain, an empty packet, or a full ring: one at a time.
        let Some((ns, _)) = gather(pool, b, mode, &mut segs, at).filter(|&(_, t)| t > 0) else {
            fails[TxCounter::TooLong as usize] += 1;
            lost += sluice_vnet::devices::total_bytes(pool, &[b]);
            done.push(b);
            i += 1;
            continue;
        };
        if ns > free as usize {
            fails[TxCounter::RingFull as usize] += (bufs.len() - i) as u64;
            lost += sluice_vnet::devices::total_bytes(pool, &bufs[i..]);
            done.extend_from_slice(&bufs[i..]);
            break;
        }
        for (j, &(off, len)) in segs[..ns].iter().enumerate() {
            let last_seg = j + 1 == ns;
            ring.set_desc(
                slot,
                Desc {
                    flags: if last_seg { 0 } else { DESC_FLAG_NEXT },
                    region: 1,
                    length: len as u32,
                    offset: off as u32,
                    metadata: 0,
                },
            );
            if last_seg {
                q.shadow[(slot & mask) as usize].store(b.0 + 1, Ordering::Relaxed);
            }
            slot = slot.wrapping_add(1);
            free -= 1;
        }
        sent += 1;
        i += 1;
    }
    if sent > 0 {
        ring.set_head(slot);
    }
    TxResult {
        consumed: bufs.len(),
        sent,
        fails,
        lost,
        single: false,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    /// [`sluice_graph::testing::test_pool`] with `buffers` buffers.
    pub(crate) fn pool(buffers: u32) -> sluice_buffer::PoolConfig {
        sluice_buffer::PoolConfig {
            buffers,
            ..sluice_graph::testing::test_pool()
        }
    }

    /// The daemon's assembly with the memif plugin, main thread only, a private pool of
    /// `buffers` buffers: the runtime and its commands.
    pub(crate) fn runtime(
        buffers: u32,
    ) -> (
        sluice_graph::Vlib,
        sluice_cli::CommandTree<sluice_graph::Vlib>,
    ) {
        let cpu = sluice_graph::CpuConfig {
            main_core: None,
            workers: Vec::new(),
        };
        let plugins: Vec<&'static dyn sluice_vnet::plugin::Plugin> = vec![&crate::PLUGIN];
        let entries = sluice_vnet::plugin::PluginsConfig::default().entries(&plugins);
        let a = sluice_vnet::plugin::assemble(&entries, &cpu, &pool(buffers), Default::default())
            .expect("runtime");
        (a.vm, a.cli)
    }

    /// A ring of 16 slots at the start of region 0 (8 KiB) and a second region of 4 KiB.
    fn setup() -> (Vec<Region>, Ring) {
        let regs = vec![
            Region::create("parse0", 8192).unwrap(),
            Region::create("parse1", 4096).unwrap(),
        ];
        let ring = Ring::new(&regs[0], 0, 4).unwrap();
        (regs, ring)
    }

    fn desc(ring: Ring, slot: u16, flags: u16, region: u16, length: u32, offset: u32) {
        ring.set_desc(
            slot,
            Desc {
                flags,
                region,
                length,
                offset,
                metadata: 0,
            },
        );
    }

    /// Every malformed descriptor stops the batch at itself (left to `rx_general`, which
    /// drops and counts it), after the good ones before it, wherever it stands: the good
    /// ones are parsed with their source, length and readable room, and nothing past the
    /// bad one is taken. Region changes within a batch are followed.
    #[test]
    fn parse_single_stops_at_each_malformed_descriptor() {
        let (regs, ring) = setup();
        let ds = 2048;
        let base0 = regs[0].range(0, 0).unwrap() as *const u8;
        let base1 = regs[1].range(0, 0).unwrap() as *const u8;
        // (flags, region, length, offset) of each malformed case.
        let bad: [(u16, u16, u32, u32, &str); 8] = [
            (0, 2, 60, 1024, "unknown region"),
            (0, 0, 60, 0xFFFF_FF00, "offset past the region"),
            (0, 0, u32::MAX, 1024, "offset + length past u32"),
            (0, 0, 0, 1024, "empty"),
            (DESC_FLAG_NEXT, 0, 30, 1024, "chained (general path)"),
            (0, 0, 30, 8192 - 10, "runs past the region's end"),
            (0, 1, 60, 4096 - 59, "runs past the second region's end"),
            (0, 0, ds as u32 + 1, 1024, "longer than a buffer"),
        ];
        let mut out = [RxPkt::default(); 8];
        for (at, &(fl, rg, len, off, why)) in bad.iter().enumerate() {
            // `at` good packets (alternating regions), then the bad one, then a good one.
            for i in 0..at as u16 {
                desc(ring, i, 0, i % 2, 60, 1024 + 64 * i as u32);
            }
            desc(ring, at as u16, fl, rg, len, off);
            desc(ring, at as u16 + 1, 0, 0, 60, 2048);
            let n = parse_single(ring, 0, &regs, ds, &mut out);
            assert_eq!(n, at, "{why}: stops at the bad descriptor");
            for (i, p) in out[..n].iter().enumerate() {
                let (b, size) = if i % 2 == 0 {
                    (base0, 8192)
                } else {
                    (base1, 4096)
                };
                let off = 1024 + 64 * i;
                assert_eq!(p.src, b.wrapping_add(off), "{why}: packet {i}");
                assert_eq!(p.len, 60);
                assert_eq!(p.room as usize, (size - off).min(ds));
            }
        }
        // From a ring index that wraps (u16) the slots are the same ones.
        desc(ring, 0xFFFF, 0, 1, 100, 4096 - 100);
        desc(ring, 0, 0, 0, 0, 0);
        assert_eq!(parse_single(ring, 0xFFFF, &regs, ds, &mut out), 1);
        assert_eq!(out[0].room, 100, "readable up to the region's end");
        // Stops at `out.len()` with every descriptor good.
        for i in 0..16 {
            desc(ring, i, 0, 0, 64, 4096 + 64 * i as u32);
        }
        assert_eq!(parse_single(ring, 3, &regs, ds, &mut out[..5]), 5);
        assert_eq!(out[4].src, base0.wrapping_add(4096 + 64 * 7));
    }

    /// A pool of 64 buffers of 2 KiB and 16 of them allocated (one per slot of the ring of
    /// [`setup`]), and an empty shadow array for that ring.
    fn zc_setup() -> (
        Arc<BufferPool>,
        sluice_buffer::BufferCache,
        Vec<BufIdx>,
        Box<[AtomicU32]>,
    ) {
        let pool = BufferPool::new(&pool(64)).unwrap();
        let mut cache = pool.cache();
        let mut bufs = vec![BufIdx(0); 16];
        assert_eq!(cache.alloc(&mut bufs), 16);
        let shadow = (0..16).map(|_| AtomicU32::new(0)).collect();
        (pool, cache, bufs, shadow)
    }

    /// Frees the buffers of [`zc_setup`] (plain single buffers again) and checks that none
    /// leaked.
    fn zc_teardown(pool: &BufferPool, mut cache: sluice_buffer::BufferCache, bufs: &[BufIdx]) {
        for &b in bufs {
            // SAFETY: the test owns every buffer of `bufs`; no view of it is alive.
            unsafe { pool.arena().header_mut(b) }.reset();
        }
        cache.free(bufs);
        drop(cache);
        assert_eq!(pool.stats().in_use, 0, "buffers leaked");
    }

    /// The copying rx fast path (`parse_single`, `alloc_raw`, `copy_batch`) leaves no part
    /// of a recycled buffer's header stale: buffers whose last user left a chain flag, a
    /// negative `current_data` and an error come back with exactly the template's header
    /// plus `rx_if` and the length, the packet bytes copied, and free without a leak.
    #[test]
    fn rx_copy_batch_writes_the_whole_header() {
        let (regs, ring) = setup();
        let (pool, mut cache, bufs, _shadow) = zc_setup();
        zc_teardown(&pool, cache, &bufs);
        cache = pool.cache();
        // Dirty three buffers' headers, chained 0 -> 1 -> 2, and free them (whole chain).
        let mut dirty = [BufIdx(0); 3];
        assert_eq!(cache.alloc(&mut dirty), 3);
        for (i, &b) in dirty.iter().enumerate() {
            // SAFETY: the test owns this buffer (allocated above); no other view is alive.
            let h = unsafe { pool.arena().header_mut(b) };
            (h.current_data, h.current_length, h.error) = (-14, 1000, 3);
            if i < 2 {
                h.flags |= flags::NEXT_PRESENT;
                h.next_buffer = dirty[i + 1].0;
            }
        }
        cache.free(&dirty[..1]);
        assert_eq!(pool.stats().in_use, 0);
        // Three single-descriptor packets of 60, 64 and 100 bytes.
        let lens = [60u32, 64, 100];
        let base = regs[0].range(0, 0).unwrap();
        for (i, &len) in lens.iter().enumerate() {
            let off = 1024 + 128 * i as u32;
            for j in 0..len {
                // SAFETY: inside region 0 (8 KiB), which the test owns.
                unsafe { *base.add((off + j) as usize) = (i as u32 * 7 + j) as u8 };
            }
            desc(ring, i as u16, 0, 0, len, off);
        }
        let mut pkts = [RxPkt::default(); 3];
        assert_eq!(parse_single(ring, 0, &regs, pool.data_size(), &mut pkts), 3);
        let mut got = [BufIdx(0); 3];
        // SAFETY: copy_batch writes the header of every buffer allocated here.
        let n = unsafe { cache.alloc_raw(&mut got) };
        assert_eq!(n, 3);
        let mut recycled = got.to_vec();
        recycled.sort();
        let mut was = dirty.to_vec();
        was.sort();
        assert_eq!(recycled, was, "the dirty buffers are reused");
        let sw = 5;
        // SAFETY: `got` allocated from `pool` just now; `pkts` validated by parse_single.
        let bytes = unsafe { copy_batch(&pool, &got, &pkts, sw) };
        assert_eq!(bytes, 224);
        for (i, &b) in got.iter().enumerate() {
            // SAFETY: the test owns this buffer; no other view is alive.
            let v = unsafe { pool.buffer(b) };
            let mut want = BufferHeader::TEMPLATE;
            want.rx_if = sw;
            want.current_length = lens[i] as u16;
            want.rx_tsc = v.hdr.rx_tsc;
            assert_eq!(
                *v.hdr, want,
                "packet {i}: header fresh but for rx_if and length"
            );
            let data = v.data();
            assert_eq!(data.len(), lens[i] as usize);
            assert!(data
                .iter()
                .enumerate()
                .all(|(j, &x)| x == (i * 7 + j) as u8));
        }
        cache.free(&got);
        drop(cache);
        assert_eq!(pool.stats().in_use, 0, "buffers leaked");
    }

    /// The zero-copy rx fast path takes a slot only when its packet is one descriptor of
    /// 1..=data size bytes in a slot we handed a buffer out for: every other slot stops the
    /// batch at itself (left to the general path, which drops and counts it), after the good
    /// ones before it, wherever it stands and from wherever `cur` starts (wrapping the ring
    /// and u16). The taken slots' shadow entries are cleared and their buffers get length
    /// and `rx_if` (the descriptor's region and offset are never used); nothing at or past
    /// the bad slot is touched.
    #[test]
    fn rx_zc_single_stops_at_each_malformed_descriptor() {
        let (_regs, ring) = setup();
        let (pool, cache, bufs, shadow) = zc_setup();
        let ds = pool.data_size() as u32;
        let mask = ring.size() - 1;
        let sw = 7;
        // Lengths of the good packets, in turn (both ends of 1..=ds).
        let good = |i: usize| [1, ds, 60, 1500][i % 4];
        // (flags, length, shadow entry held) of each malformed slot.
        let bad: [(u16, u32, bool, &str); 6] = [
            (0, 0, true, "empty"),
            (0, ds + 1, true, "longer than a buffer"),
            (0, 0x1_0000 + 60, true, "longer than a u16"),
            (0, u32::MAX, true, "length wraps"),
            (DESC_FLAG_NEXT, 60, true, "chained (general path)"),
            (0, 60, false, "a slot never handed out"),
        ];
        let mut out = [BufIdx(u32::MAX); 16];
        for cur in [0u16, 5, 0xFFFD] {
            for (at, &(fl, len, held, why)) in bad.iter().enumerate() {
                // Every slot holds its buffer, whose header shows any write.
                for (s, &b) in shadow.iter().zip(&bufs) {
                    s.store(b.0 + 1, Ordering::Relaxed);
                    // SAFETY: the test owns `b`; no other view of it.
                    let h = unsafe { pool.arena().header_mut(b) };
                    (h.current_data, h.current_length, h.rx_if) = (99, 9999, 0);
                }
                // `at` good packets (region and offset garbage: the buffer is the shadow's),
                // then the bad one, then a good one.
                for i in 0..at {
                    let r = 0xFFFF - i as u16;
                    desc(ring, cur.wrapping_add(i as u16), 0, r, good(i), u32::MAX);
                }
                let s = cur.wrapping_add(at as u16);
                desc(ring, s, fl, 0, len, 0);
                if !held {
                    shadow[(s & mask) as usize].store(0, Ordering::Relaxed);
                }
                desc(ring, s.wrapping_add(1), 0, 0, 60, 0);
                out.fill(BufIdx(u32::MAX));
                let (n, bytes) = rx_zc_single(ring, &shadow, cur, &pool, sw, &mut out[..8]);
                let why = format!("{why} after {at} from {cur:#x}");
                assert_eq!(n, at, "{why}: stops at the bad slot");
                let sum: u64 = (0..at).map(|i| good(i) as u64).sum();
                assert_eq!(bytes, sum, "{why}: bytes");
                assert!(out[at..].iter().all(|&b| b == BufIdx(u32::MAX)), "{why}");
                for j in 0..ring.size() {
                    let idx = (cur.wrapping_add(j) & mask) as usize;
                    let (b, j) = (bufs[idx], j as usize);
                    let entry = shadow[idx].load(Ordering::Relaxed);
                    // SAFETY: the test owns `b`; no other view of it.
                    let h = unsafe { pool.header(b) };
                    let meta = (h.current_data, h.current_length, h.rx_if);
                    if j < at {
                        assert_eq!(entry, 0, "{why}: slot {j} taken out of the ring");
                        assert_eq!(out[j], b, "{why}: slot {j}'s buffer");
                        assert_eq!(meta, (0, good(j) as u16, sw), "{why}: slot {j}");
                    } else {
                        let held = j != at || held;
                        let want = if held { b.0 + 1 } else { 0 };
                        assert_eq!(entry, want, "{why}: slot {j} untouched");
                        assert_eq!(meta, (99, 9999, 0), "{why}: slot {j}'s buffer untouched");
                    }
                }
            }
        }
        // Every slot good: stops at `out.len()`, then takes the whole ring.
        for (i, s) in shadow.iter().enumerate() {
            s.store(bufs[i].0 + 1, Ordering::Relaxed);
            desc(ring, i as u16, 0, 0, 64, 0);
        }
        let (n, bytes) = rx_zc_single(ring, &shadow, 0xFFFE, &pool, sw, &mut out[..5]);
        assert_eq!((n, bytes), (5, 5 * 64));
        assert_eq!(out[..5], [14, 15, 0, 1, 2].map(|i| bufs[i]));
        let left: Vec<usize> = (0..16)
            .filter(|&i| shadow[i].load(Ordering::Relaxed) != 0)
            .collect();
        assert_eq!(
            left,
            (3..14).collect::<Vec<_>>(),
            "only the five slots taken"
        );
        for i in [14, 15, 0, 1, 2] {
            shadow[i].store(bufs[i].0 + 1, Ordering::Relaxed);
        }
        let (n, _) = rx_zc_single(ring, &shadow, 3, &pool, sw, &mut out);
        assert_eq!(n, 16);
        assert!(shadow.iter().all(|s| s.load(Ordering::Relaxed) == 0));
        zc_teardown(&pool, cache, &bufs);
    }

    /// The zero-copy tx fast path writes a descriptor only for a packet in one buffer whose
    /// bytes lie inside that buffer and are not empty once ip mode skips the 14-byte Ethernet
    /// header: any other packet (a chain, a start below the headroom or past the buffer, a
    /// length past its end, nothing to send) stops the batch at itself, for the general path
    /// (which sends the chain or drops and counts the rest). Each packet sent gets a
    /// descriptor pointing at its bytes in region 1 (where the general path's `gather` puts
    /// them) and its buffer in the slot's shadow entry; the slot and free count advance by
    /// as many; nothing at or past the stop is written, from wherever the slot starts
    /// (wrapping the ring and u16), and a full ring stops it too.
    #[test]
    fn tx_zc_single_stops_at_each_packet_for_the_general_path() {
        let (_regs, ring) = setup();
        let (pool, cache, bufs, shadow) = zc_setup();
        let ds = pool.data_size();
        let (hr, dsi) = (HEADROOM as i16, ds as i16);
        let mask = ring.size() - 1;
        const UNTOUCHED: u32 = 0xDEAD;
        let sentinel = Desc {
            flags: 0x55,
            region: 0x55,
            length: 0x55,
            offset: 0x55,
            metadata: 0x55,
        };
        // (current_data, current_length) of the good packets, in turn: at the start of the
        // data area, of the headroom, ending at the buffer's end, the whole buffer, 15 bytes
        // (one left in ip mode).
        let good = |i: usize| {
            [
                (0, 60),
                (-hr, 60),
                (dsi - 60, 60),
                (-hr, (HEADROOM + ds) as u16),
                (-14, 15),
            ][i % 5]
        };
        // (current_data, current_length, flags) of each packet the fast path must leave.
        let mut bad: Vec<(i16, u16, u32, &str)> = vec![
            (0, 60, flags::NEXT_PRESENT, "a chain"),
            (0, 0, 0, "empty"),
            (-hr - 1, 60, 0, "starts below the headroom"),
            (i16::MIN, 60, 0, "current_data at its minimum"),
            (dsi + 1, 0, 0, "starts past the buffer"),
            (dsi, 1, 0, "starts at the buffer's end"),
            (0, ds as u16 + 1, 0, "runs past the buffer's end"),
            (-hr, (HEADROOM + ds) as u16 + 1, 0, "longer than the buffer"),
            (i16::MAX, u16::MAX, 0, "both at their maximum"),
        ];
        for l2 in [0, 14] {
            if l2 == 14 {
                bad.push((-14, 14, 0, "ip mode: the Ethernet header only"));
                bad.push((-14, 10, 0, "ip mode: shorter than the Ethernet header"));
            }
            for slot0 in [0u16, 9, 0xFFFB] {
                for (at, &(cd, cl, fl, why)) in bad.iter().enumerate() {
                    for (i, s) in shadow.iter().enumerate() {
                        s.store(UNTOUCHED, Ordering::Relaxed);
                        ring.set_desc(i as u16, sentinel);
                    }
                    // `at` good packets, the bad one, a good one.
                    let set = |b: BufIdx, (cd, cl): (i16, u16), fl| {
                        // SAFETY: the test owns `b`; no other view of it.
                        let h = unsafe { pool.arena().header_mut(b) };
                        (h.current_data, h.current_length, h.flags) = (cd, cl, fl);
                    };
                    for (i, &b) in bufs[..at].iter().enumerate() {
                        set(b, good(i), 0);
                    }
                    set(bufs[at], (cd, cl), fl);
                    set(bufs[at + 1], good(0), 0);
                    let (mut slot, mut free) = (slot0, ring.size());
                    let frame = &bufs[..at + 2];
                    let n = tx_zc_single(&pool, ring, &shadow, l2, frame, &mut slot, &mut free);
                    let why = format!("{why} after {at} from {slot0:#x}, l2 {l2}");
                    assert_eq!(n, at, "{why}: stops at the packet");
                    assert_eq!(slot, slot0.wrapping_add(at as u16), "{why}: slot");
                    assert_eq!(free, ring.size() - at as u16, "{why}: free");
                    for j in 0..ring.size() {
                        let s = slot0.wrapping_add(j);
                        let (entry, d) = (
                            shadow[(s & mask) as usize].load(Ordering::Relaxed),
                            ring.desc(s),
                        );
                        let j = j as usize;
                        if j < at {
                            let (cd, cl) = good(j);
                            let off = pool.data_offset(bufs[j]).unwrap()
                                + (HEADROOM as isize + cd as isize) as usize
                                + l2;
                            let want = Desc {
                                flags: 0,
                                region: 1,
                                length: (cl as usize - l2) as u32,
                                offset: off as u32,
                                metadata: 0,
                            };
                            assert_eq!(d, want, "{why}: packet {j}'s descriptor");
                            assert_eq!(entry, bufs[j].0 + 1, "{why}: packet {j} held");
                        } else {
                            assert_eq!(d, sentinel, "{why}: slot {j} untouched");
                            assert_eq!(entry, UNTOUCHED, "{why}: slot {j} untouched");
                        }
                    }
                }
            }
        }
        // A full ring stops it: as many as the free slots, then none.
        for (i, &b) in bufs.iter().enumerate() {
            // SAFETY: the test owns `b`; no other view of it.
            let h = unsafe { pool.arena().header_mut(b) };
            (h.current_data, h.current_length, h.flags) = (0, 60, 0);
            shadow[i].store(0, Ordering::Relaxed);
        }
        let (mut slot, mut free) = (0xFFFF, 3);
        assert_eq!(
            tx_zc_single(&pool, ring, &shadow, 0, &bufs, &mut slot, &mut free),
            3
        );
        assert_eq!((slot, free), (2, 0));
        assert_eq!(
            tx_zc_single(&pool, ring, &shadow, 0, &bufs, &mut slot, &mut free),
            0
        );
        assert_eq!((slot, free), (2, 0));
        let held: Vec<u32> = shadow.iter().map(|s| s.load(Ordering::Relaxed)).collect();
        let mut want = vec![0; 16];
        (want[15], want[0], want[1]) = (bufs[0].0 + 1, bufs[1].0 + 1, bufs[2].0 + 1);
        assert_eq!(held, want);
        zc_teardown(&pool, cache, &bufs);
    }

    /// In ip mode a packet of no more than its 14-byte Ethernet header (shorter ones
    /// included, in one buffer or a chain) is dropped as `too_long` by both transmit paths,
    /// copy (`tx_ring`: the fast path leaves it to `tx_general`) and zero-copy (`tx_ring_zc`:
    /// `tx_zc_single` leaves it to `gather`), and a longer one loses exactly 14 bytes, across
    /// buffers when its first is shorter; in ethernet mode only the empty packet is dropped.
    /// The bytes in the ring are the packet's, after the skipped ones.
    #[test]
    fn short_frames_are_dropped_alike_on_every_tx_path() {
        let pool = BufferPool::new(&pool(64)).unwrap();
        let mut cache = pool.cache();
        let tx = 5;
        // Buffer lengths of each packet: one buffer of 60, 10, 14, 0 and 15 bytes, chains of
        // 10 + 50 and 10 + 4.
        let shapes: [&[usize]; 7] = [&[60], &[10], &[14], &[0], &[10, 50], &[10, 4], &[15]];
        let bytes_of = |k: usize| -> Vec<u8> {
            let n: usize = shapes[k].iter().sum();
            (0..n).map(|i| (k * 40 + i) as u8).collect()
        };
        let build = |cache: &mut sluice_buffer::BufferCache| -> Vec<BufIdx> {
            (0..shapes.len())
                .map(|k| {
                    let all = bytes_of(k);
                    let mut at = 0;
                    let mut head = None;
                    for &l in shapes[k] {
                        let b = cache.alloc_with(&all[at..at + l]).unwrap();
                        at += l;
                        match head {
                            None => head = Some(b),
                            Some(h) => cache.chain_append(h, b),
                        }
                    }
                    let h = head.unwrap();
                    // SAFETY: the test owns `h`; no other view of it.
                    unsafe { pool.arena().header_mut(h) }.tx_if = tx;
                    h
                })
                .collect()
        };
        // Either path: `sent` packets written, `dropped` counted as too_long, nothing else.
        let counted = |r: &TxResult, why: &str, sent: usize, dropped: u64| {
            assert_eq!(r.sent, sent, "{why}: sent");
            assert_eq!(
                r.fails[TxCounter::TooLong as usize],
                dropped,
                "{why}: too_long"
            );
            assert_eq!(
                r.fails.iter().sum::<u64>(),
                dropped,
                "{why}: no other failure"
            );
        };
        // (mode, packets sent with their bytes, too_long drops)
        for (mode, l2, sent, dropped) in [
            (Mode::Ip, 14, vec![0, 4, 6], 4),
            (Mode::Ethernet, 0, vec![0, 1, 2, 4, 5, 6], 1),
        ] {
            let want: Vec<Vec<u8>> = sent.iter().map(|&k| bytes_of(k)[l2..].to_vec()).collect();
            // Copy mode, as a slave: 16 slots of 256 bytes behind the ring in region 0.
            let region = Region::create("short-tx", 8192).unwrap();
            let ring = Ring::new(&region, 0, 4).unwrap();
            let base = crate::shm::ring_bytes(4) as u64;
            let q = Queue::new(ring, crate::shm::eventfd().unwrap(), 0, base);
            let mut conn = DataConn::for_test(vec![region], Vec::new(), vec![q], true);
            conn.buffer_size = 256;
            let bufs = build(&mut cache);
            let r = tx_ring(&pool, &conn, &conn.tx[0], mode, tx, &bufs);
            let why = format!("copy, {mode:?}");
            assert_eq!(r.consumed, bufs.len(), "{why}");
            counted(&r, &why, sent.len(), dropped);
            assert_eq!(ring.head(), sent.len() as u16, "{why}: one slot a packet");
            for (s, w) in want.iter().enumerate() {
                let d = ring.desc(s as u16);
                assert_eq!(
                    (d.flags, d.length as usize),
                    (0, w.len()),
                    "{why}: slot {s}"
                );
                let p = conn.regions[0]
                    .range(d.offset as u64, d.length as u64)
                    .unwrap();
                // SAFETY: the test's own mapping, in bounds (range checked it).
                let got = unsafe { std::slice::from_raw_parts(p, w.len()) };
                assert_eq!(got, &w[..], "{why}: slot {s}'s bytes");
            }
            cache.free(&bufs);
            drop(conn);

            // Zero-copy, as a slave: descriptors point into the pool's data array.
            let region = Region::create("short-tx-zc", 8192).unwrap();
            let ring = Ring::new(&region, 0, 4).unwrap();
            let mut q = Queue::new(ring, crate::shm::eventfd().unwrap(), 0, 0);
            q.shadow = (0..16).map(|_| AtomicU32::new(0)).collect();
            let bufs = build(&mut cache);
            let mut done = Vec::new();
            let r = tx_ring_zc(&pool, &q, mode, &bufs, &mut done);
            let why = format!("zero-copy, {mode:?}");
            counted(&r, &why, sent.len(), dropped);
            assert_eq!(
                done.len() as u64,
                dropped,
                "{why}: the dropped ones to free"
            );
            let (data, len) = pool.region();
            let mut s = 0u16;
            for (k, w) in want.iter().enumerate() {
                // The packet's descriptors, up to the one without NEXT.
                let mut got = Vec::new();
                loop {
                    let d = ring.desc(s);
                    s += 1;
                    assert_eq!(d.region, 1, "{why}: packet {k}");
                    assert!(d.length > 0, "{why}: packet {k}: no empty descriptor");
                    assert!(d.offset as usize + d.length as usize <= len, "{why}");
                    // SAFETY: inside the pool's data array (checked above), owned by the test.
                    got.extend_from_slice(unsafe {
                        std::slice::from_raw_parts(data.add(d.offset as usize), d.length as usize)
                    });
                    if d.flags & DESC_FLAG_NEXT == 0 {
                        break;
                    }
                }
                assert_eq!(&got, w, "{why}: packet {k}'s bytes");
            }
            assert_eq!(ring.head(), s, "{why}: published");
            q.take_all(&mut done);
            cache.free(&done);
        }
        drop(cache);
        assert_eq!(pool.stats().in_use, 0, "buffers leaked");
    }

    /// A zero-copy slave memif interface in interrupt rx mode (no poll tick of its own) on
    /// the main thread (no workers, 256 buffers of the pool) whose refill starved: every
    /// buffer is taken (returned, for the test to free), the 16-slot M2S ring got none, and
    /// the rx mode's busy time has passed. Returns the runtime, `memif-input`, the interface
    /// and the buffers held.
    fn starved_zc_slave(
        tag: &str,
    ) -> (
        sluice_graph::Vlib,
        sluice_graph::NodeIndex,
        Arc<IfShared>,
        Vec<BufIdx>,
    ) {
        let (mut vm, t) = runtime(256);
        let node = vm.registry.find(crate::INPUT).unwrap();
        vm.run_main_once();
        assert!(
            !vm.main.node_mut::<MemifInput>(node).unwrap().active(),
            "no interface"
        );
        let sock = format!("@sluice-zcstarve-{tag}-{}", std::process::id());
        for c in [
            format!("create memif socket id 1 filename {sock}"),
            "create interface memif id 0 socket-id 1 master".into(),
            "set interface state memif1/0 up".into(),
            "set interface rx-mode memif1/0 interrupt".into(),
        ] {
            t.execute(&mut vm, &c)
                .unwrap_or_else(|e| panic!("`{c}': {e}"));
        }
        let sw = {
            let ifs = vm.ext::<sluice_vnet::Interfaces>().unwrap();
            ifs.find("memif1/0").unwrap()
        };
        let (sh, _) = crate::rx_iface(&mut vm, sw, 0).unwrap();
        // Every buffer taken (the main thread's cache first, then the free list).
        let mut held = Vec::new();
        vm.main.with_node::<MemifInput, _>(node, |_, cx| loop {
            let mut b = [BufIdx(0); 64];
            let n = cx.bufs().alloc(&mut b);
            if n == 0 {
                break;
            }
            held.extend_from_slice(&b[..n]);
        });
        let pool = vm.pool.clone();
        assert_eq!(pool.stats().free, 0);
        assert_eq!(pool.free_len(), 0);
        let region = Region::create(&format!("zc-starve-{tag}"), 8192).unwrap();
        let ring = Ring::new(&region, 0, 4).unwrap();
        let mut q = crate::Queue::new(ring, crate::shm::eventfd().unwrap(), 0, 0);
        q.shadow = (0..16).map(|_| AtomicU32::new(0)).collect();
        let mut conn = DataConn::for_test(vec![region], vec![q], Vec::new(), true);
        conn.zc = Some(pool);
        sh.publish(Some(Arc::new(conn)));
        // Past the rx mode's busy time after the connection came up.
        let busy = std::time::Duration::from_secs_f64(sluice_graph::rxmode::BUSY_SECS * 3.0);
        for _ in 0..2 {
            vm.run_main_once();
            std::thread::sleep(busy);
        }
        vm.run_main_once();
        assert_eq!(
            sh.current().unwrap().rx[0].ring.head(),
            0,
            "nothing refilled"
        );
        (vm, node, sh, held)
    }

    /// Ends a `starved_zc_slave` test: frees `held`, disconnects, and checks that no buffer
    /// leaked.
    fn end_starved(mut vm: sluice_graph::Vlib, sh: Arc<IfShared>, held: Vec<BufIdx>) {
        let pool = vm.pool.clone();
        let mut c = pool.cache();
        c.free(&held);
        drop(c);
        sh.publish(None);
        for _ in 0..4 {
            vm.run_main_once();
        }
        drop(vm);
        assert_eq!(pool.stats().in_use, 0, "buffers leaked");
    }

    /// A zero-copy slave whose pool is exhausted has slots it cannot refill: that is no work
    /// (`active` false, so the thread may sleep; `poll_interval` asks for the tick) until
    /// buffers are on the free list again or the tick has passed; `fill_short` counts the
    /// slots left empty.
    #[test]
    fn a_starved_zero_copy_refill_is_not_work_until_the_pool_has_buffers() {
        let tick = std::time::Duration::from_secs_f64(POLL_TICK_SECS);
        let (mut vm, node, sh, mut held) = starved_zc_slave("free");
        let active =
            |vm: &mut sluice_graph::Vlib| vm.main.node_mut::<MemifInput>(node).unwrap().active();
        // Looked at within half a tick of the starved poll (retried while the machine is too
        // slow to look that soon).
        let mut looked = false;
        for _ in 0..100 {
            let t0 = std::time::Instant::now();
            vm.run_main_once();
            let a = active(&mut vm);
            if t0.elapsed() < tick / 4 {
                assert!(!a, "an exhausted pool: the refill cannot progress");
                looked = true;
                break;
            }
        }
        assert!(looked, "never looked within the tick");
        assert_eq!(
            vm.main
                .node_mut::<MemifInput>(node)
                .unwrap()
                .poll_interval(),
            Some(POLL_TICK_SECS),
            "a starved refill asks for the tick"
        );
        let head = || sh.current().unwrap().rx[0].ring.head();
        assert_eq!(head(), 0, "nothing refilled");
        let short = vm
            .registry
            .node(node)
            .stats
            .counter_total(RxCounter::FillShort as usize);
        assert!(short >= 16, "fill_short {short}");
        // Buffers back on the pool's free list: the refill is work again, and is done.
        let pool = vm.pool.clone();
        let mut c = pool.cache();
        c.free(&held.split_off(held.len() - 32));
        c.flush();
        drop(c);
        assert!(active(&mut vm), "buffers free again");
        vm.run_main_once();
        assert_eq!(head(), 16, "every slot refilled");
        std::thread::sleep(std::time::Duration::from_secs_f64(
            sluice_graph::rxmode::BUSY_SECS * 3.0,
        ));
        assert!(!active(&mut vm), "nothing left to do");
        assert_eq!(
            vm.main
                .node_mut::<MemifInput>(node)
                .unwrap()
                .poll_interval(),
            None,
            "interrupt mode asks for no tick once refilled"
        );
        end_starved(vm, sh, held);
    }

    /// The buffers a starved refill waits for may come back to a thread's cache, where the
    /// pool's free list does not show them: the poll tick still retries the refill (a master
    /// with no slot left sends nothing, so no interrupt would).
    #[test]
    fn a_starved_zero_copy_refill_takes_buffers_freed_into_the_thread_cache() {
        let (mut vm, node, sh, held) = starved_zc_slave("cache");
        vm.main
            .with_node::<MemifInput, _>(node, |_, cx| cx.bufs().free(&held));
        assert_eq!(
            vm.pool.free_len(),
            0,
            "the buffers stay in the main thread's cache"
        );
        std::thread::sleep(std::time::Duration::from_secs_f64(POLL_TICK_SECS * 2.0));
        vm.run_main_once();
        assert_eq!(
            sh.current().unwrap().rx[0].ring.head(),
            16,
            "every slot refilled after the tick"
        );
        end_starved(vm, sh, Vec::new());
    }
}
