//! The tester's graph nodes.
//!
//! `tester-tx` (input, one instance per thread; a stream runs on one thread):
//! - for each running stream on this thread (latency streams first, so their frames lead
//!   the vector handed to the driver), asks the stream's [`Pacer`] how many packets are
//!   due (at most one vector of 256), allocates them, writes Ethernet/IPv4/UDP or
//!   Ethernet/IPv6/UDP headers from the stream's template (source address and port varied
//!   over `flows` values round-robin), the signature with its sequence number (IPv6: then the
//!   UDP checksum), then — after the whole vector is built, as late as this node can — the tx
//!   timestamp (one TSC read per vector; IPv6: folded into the UDP checksum), and sends the
//!   vector straight to `interface-output`.
//! - sets: `tx_if` = the stream's interface, `rx_if` = 0 (`local0`: locally generated);
//!   starts traces (`trace add tester-tx N`).
//! - next: `interface-output` (0).
//! - counters: `alloc_fail` (error: buffer pool exhausted; the packets count as the
//!   stream's `tx-fail`).
//! - tx-fail: packets the driver refused (its interface's `tx-error` counter on this thread,
//!   e.g. af_packet's tx ring full or frame too big) are attributed, on the next poll, to the
//!   streams of that interface in proportion to what each sent in the previous poll.
//!
//! `tester-rx` (internal): receives every frame of an interface with `set interface
//! tester-rx <if>` (an `ethernet-input` redirect).
//! - uses: the frame from its Ethernet header; `rx_tsc` when a driver set it (receive time),
//!   else the TSC read once when the node is called.
//! - sets: `error` on drops.
//! - next: `error-drop` (0) for frames that are not tester frames; tester frames are
//!   accounted to their stream (rx packets/bytes, sequence, latency, jitter) and freed.
//! - counters: `received` (info: tester frames accounted), `not_tester` (error: not a tester
//!   frame: other EtherType/protocol, truncated, bad magic, later fragment),
//!   `unknown_stream` (error: no such stream), `stale` (info: frame of an earlier run of the
//!   stream, arriving after `tester start` restarted it).

use super::frame6::{self, Ip6Frame};
use super::hist::Histogram;
use super::seq::{Seen, SeqTracker};
use super::sig::{self, Sig};
use sluice_buffer::{BufIdx, Buffer};
use sluice_graph::{Cx, GraphBuilder, NodeFn, NodeKind, NodeRegistration, TraceRecord, FRAME_SIZE};
use sluice_infra::clock::rdtsc;
use sluice_vnet::interface::{counter, IfCounters};
use sluice_vnet::pg::stream::{Fields, Pacer, Range, Synth};
use std::any::Any;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Tx node name.
pub const TX: &str = "tester-tx";
/// Rx node name.
pub const RX: &str = "tester-rx";

sluice_graph::arcs! {
    /// `tester-tx`'s next arcs.
    pub enum TxNext {
        /// Every frame, to the port.
        Output => sluice_vnet::output::NAME,
    }
}

sluice_graph::counters! {
    /// `tester-tx`'s counters.
    pub enum TxCounter {
        /// Buffer allocation failure (the tester's tx-fail).
        AllocFail => error("alloc_fail", "buffer allocation failure (tester tx-fail)"),
    }
}

sluice_graph::arcs! {
    /// `tester-rx`'s next arcs.
    pub enum RxNext {
        /// Frames that are not the tester's, or consumed.
        Drop => "error-drop",
    }
}

sluice_graph::counters! {
    /// `tester-rx`'s counters.
    pub enum RxCounter {
        /// Not a tester frame.
        NotTester => error("not_tester", "not a tester frame"),
        /// A tester frame of an unknown stream.
        UnknownStream => error("unknown_stream", "tester frame of an unknown stream"),
        /// Tester frames received.
        Received => info("received", "tester frames received"),
        /// Tester frames of an earlier run.
        Stale => info("stale", "tester frames of an earlier run"),
    }
}

/// After a `duration` stream's deadline, packets due before it may still leave for this long.
const CATCH_UP_GRACE_S: f64 = 0.01;

/// Offset of the signature in a generated IPv4 frame (Ethernet 14 + IPv4 20 + UDP 8).
pub const SIG_OFFSET: usize = 42;

/// TSC → nanoseconds of the tester clock (the TSC since the graph's clock started).
#[derive(Copy, Clone, Debug, Default)]
pub struct NsClock {
    tsc0: u64,
    ns_per_tick: f64,
}

impl NsClock {
    /// From the graph's calibrated clock.
    pub fn new(c: &sluice_infra::clock::Clock) -> NsClock {
        NsClock {
            tsc0: c.start_tsc(),
            ns_per_tick: 1e9 / c.hz(),
        }
    }
    /// Nanoseconds at TSC `tsc`.
    #[inline(always)]
    pub fn ns(&self, tsc: u64) -> u64 {
        (tsc.wrapping_sub(self.tsc0) as f64 * self.ns_per_tick) as u64
    }
}

/// Counters of one stream's transmit side, written by the thread that runs it (plain
/// stores), read by `show tester`.
#[derive(Default, Debug)]
pub struct TxShared {
    /// Packets the stream tried to send (including tx-fail).
    pub attempted: AtomicU64,
    /// Bytes of those packets.
    pub bytes: AtomicU64,
    /// Packets that did not leave: driver refused them (ring full, too big) or no buffer.
    pub fail: AtomicU64,
    /// TSC of `tester start`.
    pub start_tsc: AtomicU64,
    /// TSC when the stream stopped (0 while running).
    pub stop_tsc: AtomicU64,
    /// Running (or about to account its last failures).
    pub running: AtomicBool,
}

/// What a stream sends (immutable while it exists).
#[derive(Clone, Debug)]
pub struct TxTemplate {
    /// Headers and payload pattern of the largest frame; `size` bytes (IPv4 streams).
    pub synth: Arc<Synth>,
    /// IPv6 streams: their frame template (then `synth` is unused and `src`/`dst` are
    /// offsets from its base addresses).
    pub ip6: Option<Arc<Ip6Frame>>,
    /// Frame size (no FCS).
    pub size: usize,
    /// Flows: source address over `src`, then source port upwards, round-robin.
    pub flows: u64,
    /// Source addresses.
    pub src: Range,
    /// Destination addresses (one, or a range walked by [`DstWalk`]).
    pub dst: Range,
    /// How the destination walks `dst`.
    pub dst_walk: DstWalk,
    /// First UDP source port.
    pub sport: u16,
    /// UDP destination port.
    pub dport: u16,
    /// Packets per second.
    pub rate: f64,
    /// Packets to send (None: until stopped).
    pub count: Option<u64>,
    /// Seconds to send (None: until stopped or `count`).
    pub duration: Option<f64>,
    /// Latency stream.
    pub latency: bool,
}

impl TxTemplate {
    /// Offset of the signature in this stream's frames.
    #[inline(always)]
    pub fn sig_offset(&self) -> usize {
        if self.ip6.is_some() {
            frame6::SIG_OFFSET
        } else {
            SIG_OFFSET
        }
    }

    /// The frame bytes after the first `head` (continued in a buffer chain).
    fn tail(&self, head: usize) -> &[u8] {
        match &self.ip6 {
            Some(f) => &f.template[head..self.size],
            None => &self.synth.template[head..self.size],
        }
    }

    /// Header fields of packet `seq`.
    #[inline(always)]
    pub fn fields(&self, seq: u64) -> Fields {
        let f = seq % self.flows;
        let n_src = self.src.count();
        Fields {
            src: self.src.start + (f % n_src) as u32,
            dst: self.dst.start + self.dst_walk.index(seq) as u32,
            sport: self.sport.wrapping_add((f / n_src) as u16),
            dport: self.dport,
        }
    }
}

/// The destination of packet `seq` in a range of `n` addresses: index `(seq * step) mod n`
/// with `step` coprime to `n` near `n / φ` (golden-ratio stepping). Every `n` consecutive
/// packets visit every address once, and consecutive packets land far apart, so even a short
/// trial spreads over the whole range (e.g. over every /24 route of a FIB-scale table)
/// instead of walking the first few prefixes address by address.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct DstWalk {
    n: u64,
    step: u64,
}

impl DstWalk {
    /// The walk over `n` (≥ 1, ≤ 2^32) addresses.
    pub fn new(n: u64) -> DstWalk {
        fn gcd(mut a: u64, mut b: u64) -> u64 {
            while b != 0 {
                (a, b) = (b, a % b);
            }
            a
        }
        let n = n.max(1);
        let mut step = ((n as f64) * 0.618_033_988_749_895) as u64 % n;
        step = step.max(1);
        while gcd(step, n) != 1 {
            step += 1;
        }
        DstWalk { n, step }
    }
    /// Index of packet `seq`'s destination in the range.
    #[inline(always)]
    pub fn index(&self, seq: u64) -> u64 {
        if self.n == 1 {
            0
        } else {
            // Both factors < n ≤ 2^32: the product fits in u64.
            (seq % self.n) * self.step % self.n
        }
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum State {
    Stopped,
    Running,
    /// Finished sending; one more poll accounts the failures of its last vector.
    Draining,
}

/// One stream on the thread that sends it.
pub struct TxStream {
    pub(super) id: u16,
    tpl: TxTemplate,
    tx_if: u32,
    counters: Arc<IfCounters>,
    pub(super) shared: Arc<TxShared>,
    state: State,
    flags: u16,
    pacer: Pacer,
    deadline: Option<u64>,
    /// How long after the deadline a late sender may still catch up (TSC ticks).
    grace: u64,
    limit: u64,
    sent: u64,
    // Reported counters (zeroed by `tester clear` without disturbing the pacing).
    rep_attempted: u64,
    rep_bytes: u64,
    rep_fail: u64,
    last_batch: u64,
}

impl TxStream {
    /// A stopped stream.
    pub fn new(
        id: u16,
        tpl: TxTemplate,
        tx_if: u32,
        counters: Arc<IfCounters>,
        shared: Arc<TxShared>,
    ) -> TxStream {
        TxStream {
            id,
            tpl,
            tx_if,
            counters,
            shared,
            state: State::Stopped,
            flags: 0,
            pacer: Pacer::new(1.0, 1.0, 0),
            deadline: None,
            grace: 0,
            limit: 0,
            sent: 0,
            rep_attempted: 0,
            rep_bytes: 0,
            rep_fail: 0,
            last_batch: 0,
        }
    }

    fn publish(&self) {
        self.shared
            .attempted
            .store(self.rep_attempted, Ordering::Relaxed);
        self.shared.bytes.store(self.rep_bytes, Ordering::Relaxed);
        self.shared.fail.store(self.rep_fail, Ordering::Relaxed);
    }

    /// Zeroes the reported counters.
    pub fn clear(&mut self) {
        self.rep_attempted = 0;
        self.rep_bytes = 0;
        self.rep_fail = 0;
        self.publish();
    }

    /// (Re)starts the stream: sequence from 0, counters zeroed, `generation` in the flags.
    pub fn start(&mut self, generation: u8, hz: f64) {
        let now = rdtsc();
        self.flags = (generation as u16) << 8
            | if self.tpl.latency {
                sig::FLAG_LATENCY
            } else {
                0
            };
        self.pacer = Pacer::new(self.tpl.rate, hz, now);
        self.deadline = self.tpl.duration.map(|d| now + (d * hz) as u64);
        self.grace = (CATCH_UP_GRACE_S * hz) as u64;
        self.limit = match (self.tpl.count, self.tpl.duration) {
            (Some(c), _) => c,
            (None, Some(d)) => (d * self.tpl.rate).ceil() as u64,
            (None, None) => u64::MAX,
        };
        self.sent = 0;
        self.last_batch = 0;
        self.clear();
        self.state = if self.limit > 0 {
            State::Running
        } else {
            State::Draining
        };
        self.shared.start_tsc.store(now, Ordering::Relaxed);
        self.shared.stop_tsc.store(0, Ordering::Relaxed);
        self.shared.running.store(true, Ordering::Relaxed);
    }

    /// Stops sending (the next poll accounts the last failures).
    pub fn stop(&mut self) {
        if self.state == State::Running {
            self.finish(rdtsc());
        }
    }

    fn finish(&mut self, now: u64) {
        self.state = State::Draining;
        self.shared.stop_tsc.store(now.max(1), Ordering::Relaxed);
    }
}

#[derive(Copy, Clone)]
struct TxTrace {
    stream: u16,
    seq: u64,
    len: u16,
    tx_if: u32,
}

impl TraceRecord for TxTrace {
    fn format(&self, out: &mut String) {
        let _ = write!(
            out,
            "TESTER: stream {} seq {} {} bytes tx sw_if_index {}",
            self.stream, self.seq, self.len, self.tx_if
        );
    }
}

/// `tester-tx` instance: the streams this thread sends.
#[derive(Default)]
pub struct TesterTx {
    pub(super) streams: Vec<TxStream>,
    /// Per interface: `tx-error` of this thread at the last poll.
    ifaces: Vec<(u32, Arc<IfCounters>, u64)>,
    clock: Option<(NsClock, f64)>,
}

impl TesterTx {
    /// Adds a stream (stopped) and starts watching its interface's `tx-error`.
    pub fn add(&mut self, s: TxStream, thread: usize) {
        if !self.ifaces.iter().any(|i| i.0 == s.tx_if) {
            let base = s.counters.get(thread, counter::TX_ERROR);
            self.ifaces.push((s.tx_if, s.counters.clone(), base));
        }
        // Latency streams are generated first in every poll, so their frames lead the vector
        // and leave first from the driver's batch (their tx timestamp error is smallest).
        let at = if s.tpl.latency {
            self.streams.iter().take_while(|o| o.tpl.latency).count()
        } else {
            self.streams.len()
        };
        self.streams.insert(at, s);
    }

    /// Removes a stream.
    pub fn remove(&mut self, id: u16) {
        self.streams.retain(|s| s.id != id);
        let streams = &self.streams;
        self.ifaces
            .retain(|i| streams.iter().any(|s| s.tx_if == i.0));
    }

    /// A stream by id.
    pub fn stream_mut(&mut self, id: u16) -> Option<&mut TxStream> {
        self.streams.iter_mut().find(|s| s.id == id)
    }

    /// Attributes the `tx-error` seen on each interface since the last poll to the streams
    /// that sent on it, in proportion to their last vector.
    fn account_failures(&mut self, thread: usize) {
        for (tx_if, counters, last) in self.ifaces.iter_mut() {
            let now = counters.get(thread, counter::TX_ERROR);
            let mut d = now.wrapping_sub(*last);
            *last = now;
            if d == 0 || d > 1 << 40 {
                continue;
            }
            let weight: u64 = self
                .streams
                .iter()
                .filter(|s| s.tx_if == *tx_if)
                .map(|s| s.last_batch)
                .sum();
            let mut on_if = self
                .streams
                .iter_mut()
                .filter(|s| s.tx_if == *tx_if && s.state != State::Stopped)
                .peekable();
            while let Some(s) = on_if.next() {
                let share = if on_if.peek().is_none() || weight == 0 {
                    d
                } else {
                    (d * s.last_batch / weight).min(d)
                };
                s.rep_fail += share;
                s.publish();
                d -= share;
            }
        }
    }

    fn gen(&mut self, cx: &mut Cx, si: usize, clock: NsClock) -> usize {
        let s = &mut self.streams[si];
        match s.state {
            State::Stopped => return 0,
            State::Draining => {
                s.state = State::Stopped;
                s.last_batch = 0;
                s.shared.running.store(false, Ordering::Relaxed);
                return 0;
            }
            State::Running => {}
        }
        s.last_batch = 0;
        let now = rdtsc();
        // Past the deadline, packets that were due before it still leave (catch-up after a
        // late poll, e.g. the thread was descheduled), for at most `grace`; then the stream
        // ends. A `duration` trial sends `rate x duration` unless the sender cannot keep up.
        let due_at = s.deadline.map_or(now, |d| now.min(d));
        if s.deadline.is_some_and(|d| now >= d + s.grace) {
            s.finish(now);
            return 0;
        }
        let want = (s.limit - s.sent)
            .min(FRAME_SIZE as u64)
            .min(s.pacer.allowed(due_at, s.sent)) as usize;
        if want == 0 {
            if due_at < now {
                s.finish(now);
            }
            return 0;
        }
        let mut idx = [BufIdx(0); FRAME_SIZE];
        let mut got = cx.bufs().alloc(&mut idx[..want]);
        let pool = cx.pool_ref();
        let size = s.tpl.size;
        let head = size.min(pool.data_size());
        let mut traced = cx.trace_budget();
        let mut k = 0;
        while k < got {
            let b = idx[k];
            let seq = s.sent + k as u64;
            // SAFETY: freshly allocated by this node; one view at a time.
            let mut v = unsafe { pool.buffer(b) };
            v.set_len(0);
            let out = v.raw_data_mut();
            let sig = Sig {
                stream: s.id,
                flags: s.flags,
                seq,
                tx_ns: 0,
            };
            match &s.tpl.ip6 {
                None => {
                    s.tpl.synth.fill_with(size, head, s.tpl.fields(seq), out);
                    sig::write(&mut out[SIG_OFFSET..], &sig);
                }
                Some(f6) => {
                    f6.fill_with(head, s.tpl.fields(seq), out);
                    sig::write(&mut out[frame6::SIG_OFFSET..], &sig);
                    f6.checksum(out);
                }
            }
            v.set_len(head);
            v.hdr.tx_if = s.tx_if;
            if traced > 0 {
                cx.trace_start(
                    &mut v,
                    TxTrace {
                        stream: s.id,
                        seq,
                        len: size as u16,
                        tx_if: s.tx_if,
                    },
                );
                traced -= 1;
            }
            if size > head {
                // Jumbo frame: the rest of the payload pattern in a buffer chain.
                match cx.bufs().alloc_with(s.tpl.tail(head)) {
                    Some(tail) => cx.bufs().chain_append(b, tail),
                    None => {
                        // No buffer for the tail: drop this packet, keep the vector dense.
                        cx.bufs().free(&[b]);
                        idx.copy_within(k + 1..got, k);
                        got -= 1;
                        continue;
                    }
                }
            }
            k += 1;
        }
        // The timestamp, as late as this node can take it: after the vector is built, just
        // before it is handed to interface-output and the driver.
        let ts = clock.ns(rdtsc()).to_be_bytes();
        let ip6 = s.tpl.ip6.is_some();
        for &b in &idx[..got] {
            // SAFETY: allocated above and still owned by this node; one view at a time.
            let mut v = unsafe { pool.buffer(b) };
            if ip6 {
                Ip6Frame::stamp(v.data_mut(), &ts);
                continue;
            }
            let at = SIG_OFFSET + sig::TS_OFFSET;
            if let Some(t) = v.data_mut().get_mut(at..at + 8) {
                t.copy_from_slice(&ts);
            }
        }
        if got < want {
            cx.count(TxCounter::AllocFail, (want - got) as u64);
        }
        cx.enqueue_all(TxNext::Output.next(), &idx[..got]);
        s.sent += want as u64;
        s.last_batch = got as u64;
        s.rep_attempted += want as u64;
        s.rep_bytes += (want * size) as u64;
        s.rep_fail += (want - got) as u64;
        s.publish();
        if s.sent >= s.limit {
            s.finish(now);
        }
        got
    }
}

impl NodeFn for TesterTx {
    fn poll(&mut self, cx: &mut Cx) -> usize {
        let (clock, _) = *self.clock.get_or_insert_with(|| {
            let c = &cx.shared().clock;
            (NsClock::new(c), c.hz())
        });
        self.account_failures(cx.thread());
        let mut n = 0;
        for i in 0..self.streams.len() {
            n += self.gen(cx, i, clock);
        }
        n
    }
    fn active(&self) -> bool {
        self.streams.iter().any(|s| s.state != State::Stopped)
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// Receive statistics of one stream on one thread.
#[derive(Clone, Debug, Default)]
pub struct RxStats {
    /// Run generation accepted.
    pub generation: u8,
    /// Tester frames received (duplicates included).
    pub packets: u64,
    /// Their bytes (as received, L2 header included).
    pub bytes: u64,
    /// Received below the highest sequence number seen (first time).
    pub reordered: u64,
    /// Received again.
    pub duplicate: u64,
    /// Latency (rx time - tx timestamp) of every non-duplicate frame.
    pub latency: Histogram,
    /// Sum of |D| (RFC 3550 transit-time differences of consecutive frames), ns.
    pub jitter_sum: u64,
    /// Number of differences in `jitter_sum`.
    pub jitter_n: u64,
    last_transit: Option<u64>,
    seq: SeqTracker,
}

impl RxStats {
    /// Forgets everything except the generation.
    pub fn clear(&mut self) {
        *self = RxStats {
            generation: self.generation,
            ..RxStats::default()
        };
    }

    /// Adds another thread's statistics (sequence state is per thread and not merged).
    pub fn merge(&mut self, o: &RxStats) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.reordered += o.reordered;
        self.duplicate += o.duplicate;
        self.latency.merge(&o.latency);
        self.jitter_sum += o.jitter_sum;
        self.jitter_n += o.jitter_n;
    }

    /// Accounts one frame.
    #[inline(always)]
    pub fn record(&mut self, s: &Sig, rx_ns: u64, len: u64) {
        self.packets += 1;
        self.bytes += len;
        match self.seq.record(s.seq) {
            Seen::Duplicate => {
                self.duplicate += 1;
                return;
            }
            Seen::Reordered => self.reordered += 1,
            Seen::InOrder => {}
        }
        let transit = rx_ns.saturating_sub(s.tx_ns);
        self.latency.record(transit);
        if let Some(prev) = self.last_transit {
            self.jitter_sum += transit.abs_diff(prev);
            self.jitter_n += 1;
        }
        self.last_transit = Some(transit);
    }
}

#[derive(Copy, Clone)]
struct RxTrace {
    sig: Option<Sig>,
    latency_ns: u64,
}

impl TraceRecord for RxTrace {
    fn format(&self, out: &mut String) {
        match self.sig {
            Some(s) => {
                let _ = write!(
                    out,
                    "TESTER: stream {} seq {} generation {} latency {} ns",
                    s.stream,
                    s.seq,
                    s.generation(),
                    self.latency_ns
                );
            }
            None => out.push_str("TESTER: not a tester frame"),
        }
    }
}

/// `tester-rx` instance: per-stream statistics of this thread, indexed by stream id.
#[derive(Default)]
pub struct TesterRx {
    pub(super) streams: Vec<Option<Box<RxStats>>>,
    clock: Option<NsClock>,
}

impl TesterRx {
    /// Installs (or replaces) a stream's statistics.
    pub fn set(&mut self, id: u16, st: Option<Box<RxStats>>) {
        let i = id as usize;
        if self.streams.len() <= i {
            self.streams.resize_with(i + 1, || None);
        }
        self.streams[i] = st;
    }

    /// A stream's statistics.
    pub fn get_mut(&mut self, id: u16) -> Option<&mut RxStats> {
        self.streams.get_mut(id as usize)?.as_deref_mut()
    }
}

impl NodeFn for TesterRx {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        let clock = *self
            .clock
            .get_or_insert_with(|| NsClock::new(&cx.shared().clock));
        let now_ns = clock.ns(rdtsc());
        let pool = cx.pool_ref();
        let (e_not, e_unknown) = (
            cx.error(RxCounter::NotTester),
            cx.error(RxCounter::UnknownStream),
        );
        let mut drops = [BufIdx(0); FRAME_SIZE];
        let mut frees = [BufIdx(0); FRAME_SIZE];
        let (mut nd, mut nf, mut stale) = (0, 0, 0u64);
        for &bi in frame {
            // SAFETY: this node owns the frame; one view at a time.
            let b: Buffer<'_> = unsafe { pool.buffer(bi) };
            let stamped = b.hdr.flags & sluice_buffer::flags::RX_TSC != 0;
            let rx_ns = if stamped && b.hdr.rx_tsc != 0 {
                clock.ns(b.hdr.rx_tsc)
            } else {
                now_ns
            };
            let parsed = sig::parse_frame(b.data());
            let mut latency_ns = 0;
            let ok = match parsed {
                Err(_) => {
                    b.hdr.error = e_not;
                    false
                }
                Ok(s) => match self
                    .streams
                    .get_mut(s.stream as usize)
                    .and_then(|o| o.as_deref_mut())
                {
                    None => {
                        b.hdr.error = e_unknown;
                        false
                    }
                    Some(st) if st.generation != s.generation() => {
                        stale += 1;
                        true
                    }
                    Some(st) => {
                        latency_ns = rx_ns.saturating_sub(s.tx_ns);
                        st.record(&s, rx_ns, b.total_len() as u64);
                        true
                    }
                },
            };
            if b.hdr.is_traced() {
                cx.trace(
                    &b,
                    RxTrace {
                        sig: parsed.ok(),
                        latency_ns,
                    },
                );
            }
            if ok {
                frees[nf] = bi;
                nf += 1;
            } else {
                drops[nd] = bi;
                nd += 1;
            }
        }
        cx.count(RxCounter::Received, nf as u64 - stale);
        cx.count(RxCounter::Stale, stale);
        cx.free(&frees[..nf]);
        cx.enqueue_all(RxNext::Drop.next(), &drops[..nd]);
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// Registers `tester-tx` and `tester-rx`.
pub fn register(b: &mut GraphBuilder) {
    b.register(
        NodeRegistration::new(TX, NodeKind::Input, |_| Box::new(TesterTx::default()))
            .nexts(TxNext::NAMES)
            .counters(TxCounter::DESCS),
    );
    b.register(
        NodeRegistration::new(RX, NodeKind::Internal, |_| Box::new(TesterRx::default()))
            .nexts(RxNext::NAMES)
            .counters(RxCounter::DESCS),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(seq: u64, tx_ns: u64) -> Sig {
        Sig {
            stream: 1,
            flags: 0,
            seq,
            tx_ns,
        }
    }

    #[test]
    fn rx_stats_count_latency_jitter_and_sequence() {
        let mut st = RxStats::default();
        // transit times 100, 110, 90 -> |D| = 10, 20.
        st.record(&sig(0, 1000), 1100, 64);
        st.record(&sig(2, 2000), 2110, 64);
        st.record(&sig(1, 3000), 3090, 64); // reordered
        st.record(&sig(1, 3000), 3090, 64); // duplicate: not in latency/jitter
        assert_eq!((st.packets, st.bytes), (4, 256));
        assert_eq!((st.reordered, st.duplicate), (1, 1));
        assert_eq!(st.latency.count(), 3);
        let s = st.latency.summary().unwrap();
        assert_eq!((s.min, s.max), (90, 110));
        assert_eq!((st.jitter_sum, st.jitter_n), (30, 2));
        // A receive time before the tx timestamp counts as 0, never underflows.
        st.record(&sig(9, 5000), 10, 64);
        assert_eq!(st.latency.summary().unwrap().min, 0);
        let mut m = RxStats::default();
        m.merge(&st);
        m.merge(&st);
        assert_eq!((m.packets, m.latency.count(), m.jitter_n), (10, 8, 6));
        st.generation = 5;
        st.clear();
        assert_eq!((st.generation, st.packets, st.latency.count()), (5, 0, 0));
    }

    #[test]
    fn flows_vary_source_address_then_port() {
        let t = TxTemplate {
            synth: Arc::new(Synth {
                eth: None,
                src: Range::fixed(0),
                dst: Range::fixed(0),
                sport: Range::fixed(0),
                dport: Range::fixed(0),
                ttl: 64,
                size: Range::fixed(64),
                payload: 0,
                template: Vec::new(),
            }),
            ip6: None,
            size: 64,
            flows: 6,
            src: Range {
                start: 100,
                end: 102,
            },
            dst: Range::fixed(7),
            dst_walk: DstWalk::new(1),
            sport: 1000,
            dport: 2000,
            rate: 1.0,
            count: None,
            duration: None,
            latency: false,
        };
        let got: Vec<(u32, u16)> = (0..7)
            .map(|s| {
                let f = t.fields(s);
                (f.src, f.sport)
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (100, 1000),
                (101, 1000),
                (102, 1000),
                (100, 1001),
                (101, 1001),
                (102, 1001),
                (100, 1000)
            ]
        );
    }

    #[test]
    fn dst_range_visits_every_address_once_per_lap_spread_out() {
        for n in [1u64, 2, 3, 10, 256, 1000, 65_280_000] {
            let w = DstWalk::new(n);
            let lap = n.min(5000);
            let mut seen = std::collections::HashSet::new();
            for s in 0..lap {
                let i = w.index(s);
                assert!(i < n);
                assert!(seen.insert(i), "n {n}: index {i} twice in the first {lap}");
                assert_eq!(w.index(s + n), i, "n {n}: the walk repeats with period n");
            }
        }
        // 255k /24 routes (the FIB scenario): 10,000 packets touch thousands of distinct /24s,
        // not the 40 that address-by-address stepping would.
        let w = DstWalk::new(255_000 * 256);
        let prefixes: std::collections::HashSet<u64> =
            (0..10_000).map(|s| w.index(s) >> 8).collect();
        assert!(prefixes.len() > 9_000, "{} prefixes", prefixes.len());
    }
}
