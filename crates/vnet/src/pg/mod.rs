//! Packet generator (VPP's pg): interfaces `pg<N>`, streams replayed from pcap files or
//! synthesised (IPv4/UDP with incrementing fields), and pcap capture of what the graph sends
//! out of a pg interface.
//!
//! Nodes:
//! - `pg-input` (input): for each enabled stream on this thread, allocates up to a frame of
//!   buffers (batch), writes the packets, and sends them to the stream's node (an arc added
//!   with `add_next` when the stream is created) or, for `worker N` streams, through the
//!   handoff queue to that worker. A pcap stream's burst is resolved into the thread's frame
//!   scratch (`Arena::resolve`) and handed on with its stamp (`Cx::enqueue_all_resolved`):
//!   the node it goes to keeps its addresses there without comparing the indices (a burst
//!   that lost a packet is not handed, only found there by the compare).
//!   - sets: `rx_if` = the stream's pg interface, `tx_if` = the stream's tx interface
//!     (`tx-interface <if>` or `node <if>-output`) when it has one, else 0; the rest of the
//!     header as a fresh buffer's; starts traces.
//!   - counters: `alloc_fail` (buffer pool exhausted: packets not generated, or no buffers
//!     for a long packet's tail: the packet is freed, not sent, and not counted in rx),
//!     `too_long` (a pcap packet longer than one buffer chain holds,
//!     [`sluice_buffer::ALLOC_WITH_MAX_BUFFERS`] buffers, ~128 KiB with 2 KiB buffers:
//!     dropped the same way on every pass, though the pool is not empty),
//!     `handoff_congestion` (handoff queue full: packets dropped).
//!   - a stream's `sent` (`show packet-generator`, the `limit` it runs to) counts every
//!     packet it got a buffer for, including those then dropped (`alloc_fail` for a tail,
//!     `too_long`, `handoff_congestion`): their place in the pcap is passed. The pg
//!     interface's `rx packets` counts only the packets sent on.
//!   - also: `rx packets`/`rx bytes` of the pg interface, `pcap trace rx`.
//! - `pg-tx` (internal): the transmit side of every pg interface: writes packets to the
//!   interface's capture file when one is set (`packet-generator capture`), then frees them
//!   (`Cx::free_frame`: a frame handed on by `interface-output` through its addresses).
//!   - uses: `tx_if`. next: none. counters: `captured`, `capture_error`.

pub mod build;
pub mod stream;

use crate::devices::TraceHead;
use crate::error::{VnetError, VnetResult};
use crate::interface::{counter, IfCounters, Interfaces};
use crate::pg::stream::{Pacer, Source, StreamDef};
use crate::SwIfIndex;
use sluice_buffer::{copy_small, BufIdx, Buffer, BufferHeader, Stamp, COPY_SMALL_MAX};
use sluice_cli::{Args, CliError, CommandTree};
use sluice_graph::pcap::{point, PcapSink};
use sluice_graph::{
    Cx, GraphBuilder, Next, NodeFn, NodeIndex, NodeKind, NodeRegistration, TraceRecord, Vlib,
    FRAME_SIZE, SCRATCH_AHEAD,
};
use sluice_infra::clock::rdtsc;
use std::any::Any;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Largest vector pg produces per stream per poll.
pub const FRAME: usize = FRAME_SIZE;
/// Input node name.
pub const INPUT: &str = "pg-input";
/// Tx node name.
pub const TX: &str = "pg-tx";

sluice_graph::counters! {
    /// `pg-input`'s counters.
    pub enum InputCounter {
        /// Buffer allocation failure.
        AllocFail => error("alloc_fail", "buffer allocation failure"),
        /// A pcap packet longer than one buffer chain holds (`BufferCache::alloc_with`).
        TooLong => error("too_long", "pcap packet too long for a buffer chain"),
        /// Handoff queue full.
        HandoffCongestion => error("handoff_congestion", "handoff queue full"),
    }
}

/// Runtime state of one stream on the thread that generates it.
pub struct StreamRt {
    id: u32,
    /// What the stream replays: its definition's source, a short pcap repeated
    /// ([`replay_source`]).
    source: Source,
    /// A pcap source's prefix sums of packet lengths (`pcap_end[i]`: the bytes of its
    /// first `i` packets; `len + 1` entries): a run of packets' bytes in one subtraction.
    /// Empty for a synthesised source.
    pcap_end: Vec<u64>,
    next: Next,
    node: NodeIndex,
    rx_if: u32,
    /// What every buffer header of the stream starts as: [`BufferHeader::TEMPLATE`] with
    /// `rx_if` and (`tx-interface`, for streams starting at an output node) `tx_if`. Built
    /// once: `gen` copies it to a local whose contents the compiler does not know, and the
    /// burst's loop writes each header's first line as four 16-byte loads and stores (a
    /// template built in `gen` was folded into seven stores of constants and of its two
    /// fields, reloaded from the stack per packet: 10 instructions, now 8).
    tmpl: BufferHeader,
    limit: u64,
    sent: u64,
    rate: Option<f64>,
    start_tsc: u64,
    maxframe: usize,
    handoff_to: Option<usize>,
    shared_sent: Arc<AtomicU64>,
    /// Paced: packets that fell due during a stall past the catch-up cap, never sent.
    skipped: u64,
    shared_skipped: Arc<AtomicU64>,
    enabled: Arc<AtomicBool>,
    counters: Arc<IfCounters>,
}

/// `pg-input` instance: the streams this thread generates.
#[derive(Default)]
pub struct PgInput {
    streams: Vec<StreamRt>,
    hz: f64,
}

#[derive(Copy, Clone)]
struct PgTrace {
    stream: u32,
    rx_if: u32,
    len: u16,
    head: TraceHead,
}

impl TraceRecord for PgTrace {
    fn format(&self, out: &mut String) {
        let _ = write!(
            out,
            "stream {}, {} bytes, sw_if_index {}",
            self.stream, self.len, self.rx_if
        );
        self.head.format(out);
    }
}

/// How many packets paced stream `s` may send at TSC `now` (one frame at most): what fell
/// due, but after a stall at most two of its frames, never its whole backlog at full speed (a
/// receiver sized for the rate would drop the burst). The rest of what fell due is skipped
/// (counted in `skipped`) and the schedule moves on. Unpaced: one frame.
fn paced_want(s: &mut StreamRt, now: u64, hz: f64) -> usize {
    let Some(rate) = s.rate else {
        return FRAME;
    };
    let cap = (2 * s.maxframe.min(FRAME) as u64).max(1);
    let mut p = Pacer::new(rate, hz, s.start_tsc);
    let mut allowed = p.allowed(now, s.sent);
    if allowed > cap {
        s.skipped += allowed - cap;
        s.shared_skipped.store(s.skipped, Ordering::Relaxed);
        allowed = p.bound(now, s.sent, allowed, cap);
        s.start_tsc = p.start_tsc();
    }
    allowed.min(FRAME as u64) as usize
}

/// [`Buffer::write_packet`] (the packet at the data start), inline for a packet of at most
/// [`COPY_SMALL_MAX`] bytes ([`copy_small`]: two overlapping fixed-size copies, without
/// `memcpy`'s call, its length dispatch and the registers the call makes the loop spill).
/// Longer, or in a data area shorter than [`COPY_SMALL_MAX`] bytes (`PoolConfig` allows none
/// under 256 today): `write_packet`. Returns the bytes copied.
#[inline(always)]
fn write_short(v: &mut Buffer<'_>, p: &[u8]) -> usize {
    let n = p.len();
    v.hdr.current_data = 0;
    let d = v.raw_data_mut();
    if n > COPY_SMALL_MAX || d.len() < COPY_SMALL_MAX {
        return v.write_packet(p);
    }
    let copied = copy_small(d, p);
    // The tests above rule out a failed copy. (Not a fallback to `write_packet`: that
    // cost pg-input 2 instructions a packet, 64.3 -> 66.3, with the compiler keeping it.)
    debug_assert!(copied, "{n} bytes not copied into {}", d.len());
    v.hdr.current_length = n as u16;
    n
}

impl PgInput {
    /// A packet longer than its first buffer `b`: the rest of it (`tail`) in a chain. Without
    /// buffers for the tail the packet is freed (not sent cut short) and counted in
    /// `alloc_fail`: false.
    #[cold]
    #[inline(never)]
    fn chain_tail(cx: &mut Cx, b: BufIdx, tail: &[u8]) -> bool {
        match cx.bufs().alloc_with(tail) {
            Some(t) => {
                cx.bufs().chain_append(b, t);
                true
            }
            None => {
                let per = cx.pool().data_size();
                let reason = if tail.len().div_ceil(per) > sluice_buffer::ALLOC_WITH_MAX_BUFFERS {
                    InputCounter::TooLong
                } else {
                    InputCounter::AllocFail
                };
                cx.count(reason, 1);
                cx.free(&[b]);
                false
            }
        }
    }

    fn gen(&mut self, cx: &mut Cx, si: usize) -> usize {
        let hz = self.hz;
        let s = &mut self.streams[si];
        if !s.enabled.load(Ordering::Relaxed) {
            return 0;
        }
        // `add_stream` refuses an empty pcap; never allocate buffers without a packet.
        if matches!(&s.source, Source::Pcap(p) if p.is_empty()) {
            return 0;
        }
        let mut want = (s.limit - s.sent).min(s.maxframe as u64) as usize;
        if s.rate.is_some() {
            want = want.min(paced_want(s, rdtsc(), hz));
        }
        if let Some(to) = s.handoff_to {
            // Back-pressure, like a device ring: generate only what the worker can take.
            want = want.min(cx.shared().handoff[cx.thread()][to].free_slots());
        }
        if want == 0 {
            return 0;
        }
        let mut idx = [BufIdx(0); FRAME];
        // SAFETY: the loop below writes every header of idx[..got] (`reset_from`) first
        // thing, before anything can leave it.
        let got = unsafe { cx.bufs().alloc_raw(&mut idx[..want]) };
        if got < want {
            cx.count(InputCounter::AllocFail, (want - got) as u64);
        }
        if got == 0 {
            return 0;
        }
        let arena = cx.arena();
        // What every header of the burst starts as: one 64-byte copy per packet, written
        // once (the packet's length is the only other store).
        let tmpl = s.tmpl;
        let mut bytes = 0u64;
        let mut traced = cx.trace_budget();
        // The pcap packet of the frame's first buffer; then one after the other, wrapping
        // (no division per packet).
        let mut at = match &s.source {
            Source::Pcap(pkts) => (s.sent % pkts.len() as u64) as usize,
            _ => 0,
        };
        // What goes out: idx[..out] (the stream's count advances by `got` all the same: a
        // dropped packet's place in the pcap is passed).
        let mut out = got;
        // The stamp of the burst's addresses when it was resolved into the frame scratch
        // and idx[..out] is still that frame: ethernet-input then gets it handed on
        // (`Cx::enqueue_all_resolved`: no compare of the indices there).
        let mut stamp = Stamp::NONE;
        // One loop per source kind (no per-packet match), tracing in a pass of its own.
        match &s.source {
            Source::Synth(syn) => {
                for (k, &b) in idx[..got].iter().enumerate() {
                    // SAFETY: freshly allocated by this node; one view at a time.
                    let mut v = unsafe { arena.buffer(b) };
                    v.hdr.reset_from(&tmpl);
                    let n = syn.fill(s.sent + k as u64, v.raw_data_mut());
                    v.set_len(n);
                    bytes += n as u64;
                }
            }
            Source::Pcap(pkts) => {
                // The packets as a local slice: not reloaded through the `Arc` per packet.
                let pkts: &[Vec<u8>] = pkts;
                // The burst's addresses resolved in one pass into the thread's frame
                // scratch: the loop loads each buffer's two addresses (no bound check, no
                // multiply by the stride, the arena's layout not kept live), and the node
                // the burst goes to finds them there (`Arena::resolve` keeps a frame it
                // already holds) instead of resolving them again.
                let mut sc = cx.take_frame_scratch();
                let addrs = &mut sc.addrs;
                arena.resolve(&idx[..got], SCRATCH_AHEAD, addrs);
                let addrs = &*addrs;
                stamp = addrs.stamp();
                // Packets dropped for want of buffers for their tail are marked `GONE`
                // and left out after the loop.
                const GONE: BufIdx = BufIdx(u32::MAX);
                let mut dropped = false;
                // The burst in runs of consecutive pcap packets (the pcap wraps between
                // runs): each packet's bytes come with its buffer, no index test or wrap
                // per packet; the run's bytes from the prefix sums.
                let mut k = 0;
                while k < got {
                    // at < pkts.len(): the pcap is not empty (checked above).
                    let run = (got - k).min(pkts.len() - at);
                    let ps = &pkts[at..at + run];
                    bytes += s.pcap_end[at + run] - s.pcap_end[at];
                    for (j, (slot, p)) in idx[k..k + run].iter_mut().zip(ps).enumerate() {
                        let b = *slot;
                        // SAFETY: freshly allocated by this node; `addrs` was resolved from
                        // `idx[..got]` above and `k + j` is `b`'s place there; one view at
                        // a time.
                        let mut v = unsafe { arena.buffer_at(addrs, k + j, b) };
                        v.hdr.reset_from(&tmpl);
                        let n = write_short(&mut v, p);
                        if n < p.len() && !Self::chain_tail(cx, b, &p[n..]) {
                            *slot = GONE;
                            dropped = true;
                            bytes -= p.len() as u64;
                        }
                    }
                    k += run;
                    at += run;
                    if at == pkts.len() {
                        at = 0;
                    }
                }
                cx.put_frame_scratch(sc);
                if dropped {
                    // idx no longer holds the indices resolved: not handed on.
                    stamp = Stamp::NONE;
                    // Compacted in place (order kept): a write index behind the read one.
                    let mut w = 0;
                    for r in 0..got {
                        let b = idx[r];
                        if b != GONE {
                            idx[w] = b;
                            w += 1;
                        }
                    }
                    out = w;
                }
            }
        }
        for &b in &idx[..out] {
            if traced == 0 {
                break;
            }
            // SAFETY: as above.
            let mut v = unsafe { arena.buffer(b) };
            let len = v.total_len();
            let head = TraceHead::new(v.data());
            let started = cx.trace_start(
                &mut v,
                PgTrace {
                    stream: s.id,
                    rx_if: s.rx_if,
                    len: len.min(u16::MAX as usize) as u16,
                    head,
                },
            );
            if started {
                traced -= 1;
            }
        }
        let t = cx.thread();
        s.counters.add(t, counter::RX_PACKETS, out as u64);
        s.counters.add(t, counter::RX_BYTES, bytes);
        cx.pcap_capture(point::RX, &idx[..out], false);
        match s.handoff_to {
            // SAFETY: `stamp` is NONE or was read right after the resolve of idx[..got],
            // and then nothing dropped (out == got) or changed idx.
            None => unsafe { cx.enqueue_all_resolved(s.next, &idx[..out], stamp) },
            Some(to) => {
                let n = cx.shared().handoff_enqueue(t, to, &idx[..out], s.node);
                if n < out {
                    cx.count(InputCounter::HandoffCongestion, (out - n) as u64);
                    cx.free(&idx[n..out]);
                }
            }
        }
        s.sent += got as u64;
        s.shared_sent.store(s.sent, Ordering::Relaxed);
        if s.sent >= s.limit {
            s.enabled.store(false, Ordering::Relaxed);
        }
        got
    }
}

impl NodeFn for PgInput {
    fn poll(&mut self, cx: &mut Cx) -> usize {
        if self.hz == 0.0 {
            self.hz = cx.shared().clock.hz();
        }
        let mut n = 0;
        for i in 0..self.streams.len() {
            n += self.gen(cx, i);
        }
        n
    }
    fn active(&self) -> bool {
        self.streams
            .iter()
            .any(|s| s.enabled.load(Ordering::Relaxed))
    }
    fn poll_interval(&self) -> Option<f64> {
        // Active while a stream is enabled; streams are enabled through the thread's mailbox,
        // which wakes it. Nothing to poll otherwise.
        None
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// One interface's capture file.
struct Capture {
    sink: PcapSink,
    limit: Option<u64>,
}

/// State shared by every thread's `pg-tx`.
#[derive(Default)]
pub struct PgShared {
    any_capture: AtomicBool,
    captures: Mutex<HashMap<u32, Capture>>,
    clock_offset: Mutex<f64>,
}

/// `pg-tx` instance.
#[derive(Default)]
pub struct PgTx {
    shared: Option<Arc<PgShared>>,
}

sluice_graph::counters! {
    /// `pg-tx`'s counters.
    pub enum TxCounter {
        /// Packets written to the capture file.
        Captured => info("captured", "packets written to capture file"),
        /// Capture file write error.
        CaptureError => error("capture_error", "capture file write error"),
    }
}

impl NodeFn for PgTx {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        if let Some(sh) = self
            .shared
            .as_ref()
            .filter(|s| s.any_capture.load(Ordering::Relaxed))
        {
            let pool = cx.pool_ref();
            let off = *sh.clock_offset.lock().unwrap_or_else(|p| p.into_inner());
            let ts = cx.now_secs() + off;
            let mut caps = sh.captures.lock().unwrap_or_else(|p| p.into_inner());
            let (mut ok, mut err) = (0u64, 0u64);
            let mut bytes = Vec::new();
            for &b in frame {
                // SAFETY: this node owns the frame; read-only header access.
                let tx = unsafe { pool.header(b) }.tx_if;
                let Some(c) = caps.get_mut(&tx) else { continue };
                bytes.clear();
                cx.bufs().copy_chain(b, &mut bytes, 65535);
                match c.sink.write(ts, &bytes, bytes.len() as u32) {
                    Ok(()) => ok += 1,
                    Err(_) => err += 1,
                }
                if c.limit.is_some_and(|l| c.sink.written >= l) {
                    let _ = c.sink.flush();
                    caps.remove(&tx);
                }
            }
            for c in caps.values_mut() {
                let _ = c.sink.flush();
            }
            if caps.is_empty() {
                sh.any_capture.store(false, Ordering::Relaxed);
            }
            cx.count(TxCounter::Captured, ok);
            cx.count(TxCounter::CaptureError, err);
        }
        // A frame handed on by interface-output (the usual one) is freed through the
        // addresses resolved before it.
        cx.free_frame(frame);
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// A stream as the control plane knows it.
pub struct StreamInfo {
    id: u32,
    def: StreamDef,
    thread: usize,
    sent: Arc<AtomicU64>,
    /// Paced: packets skipped after stalls (`StreamRt::skipped`).
    skipped: Arc<AtomicU64>,
    enabled: Arc<AtomicBool>,
}

/// pg control-plane state (a `Vlib` extension).
#[derive(Default)]
pub struct PgMain {
    streams: Vec<StreamInfo>,
    next_id: u32,
    shared: Option<Arc<PgShared>>,
}

/// Registers `pg-input` and `pg-tx`.
pub fn register(b: &mut GraphBuilder) {
    b.register(
        NodeRegistration::new(INPUT, NodeKind::Input, |_| Box::new(PgInput::default()))
            .counters(InputCounter::DESCS),
    );
    b.register(
        NodeRegistration::new(TX, NodeKind::Internal, |_| Box::new(PgTx::default()))
            .counters(TxCounter::DESCS),
    );
}

/// Connects the pg-tx instances to the shared capture state.
pub fn init(vm: &mut Vlib) {
    crate::runconf::register_creator(vm, "pg", |vm, sw| {
        let name = vm.ext_mut::<Interfaces>().get(sw)?.name.clone();
        Some(format!("create packet-generator interface {name}"))
    });
    let sh = Arc::new(PgShared::default());
    *sh.clock_offset.lock().unwrap_or_else(|p| p.into_inner()) = vm.shared.clock_epoch_offset();
    vm.ext_mut::<PgMain>().shared = Some(sh.clone());
    if let Some(tx) = vm.registry.find(TX) {
        vm.foreach_thread(move |tg| {
            if let Some(n) = tg.node_mut::<PgTx>(tx) {
                n.shared = Some(sh.clone());
            }
        });
    }
}

/// Registers the pg CLI.
pub fn register_cli(t: &mut CommandTree<Vlib>) {
    t.add(
        "create packet-generator interface",
        "create packet-generator interface pg<N>",
        cli_create_if,
    );
    t.add(
        "packet-generator new",
        "packet-generator new { name <s> limit <n> rate <pps> size <a>-<b> node <node> interface pg<N> [worker <n>] data { ... } } | pcap <file> source pg<N> name <s> [limit <n>] [maxframe <n>] [worker <n>] [node <node>]",
        cli_new,
    );
    t.add(
        "packet-generator enable",
        "packet-generator enable [<name>] — start streams",
        cli_enable,
    );
    t.alias("packet-generator enable-stream", "packet-generator enable");
    t.add(
        "packet-generator disable",
        "packet-generator disable [<name>] — stop streams",
        cli_disable,
    );
    t.alias(
        "packet-generator disable-stream",
        "packet-generator disable",
    );
    t.add(
        "packet-generator delete",
        "packet-generator delete <name>",
        cli_delete,
    );
    t.add(
        "packet-generator capture",
        "packet-generator capture pg<N> pcap <file> [count <n>] | pg<N> disable",
        cli_capture,
    );
    t.add(
        "show packet-generator",
        "show packet-generator — streams, enabled, packets sent",
        cli_show,
    );
}

fn cli_create_if(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let mut name = a.word("interface name (pg<N>)")?;
    if name == "interface" {
        name = a.word("interface name (pg<N>)")?;
    }
    a.finish()?;
    let n: u32 = name
        .strip_prefix("pg")
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| CliError::new(format!("expected pg<N>, got `{name}'")))?;
    create_interface(vm, n)?;
    Ok(format!("{name}\n"))
}

/// `create packet-generator interface pg<n>` (an existing one is returned as it is); MAC
/// 02:fe:00:00:nn:nn.
pub fn create_interface(vm: &mut Vlib, n: u32) -> VnetResult<SwIfIndex> {
    let name = format!("pg{n}");
    if let Some(i) = vm.ext_mut::<Interfaces>().find(&name) {
        return Ok(i);
    }
    let tx = vm.registry.find(TX);
    let mac = [0x02, 0xfe, 0, 0, (n >> 8) as u8, n as u8];
    crate::interface::create(vm, &name, "pg", mac, tx)
}

fn cli_new(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let def = match a.peek() {
        Some(_) if a.next_is_group() && a.remaining() == 1 => {
            // One brace group: `packet-generator new { ... }`.
            let body = a.word("stream definition")?;
            stream::parse_new(&mut Args::new(&body), vm.pool.data_size())?
        }
        _ => stream::parse_new(a, vm.pool.data_size())?,
    };
    add_stream(vm, def)?;
    Ok(String::new())
}

/// A pcap shorter than this is replayed as copies of itself (see [`replay_source`]).
const SHORT_PCAP: usize = 32;

/// The source pg-input replays ([`StreamRt::source`]): `source` itself, except a pcap of
/// fewer than [`SHORT_PCAP`] packets, repeated until it holds at least a frame. pg-input
/// writes a burst in runs that end where the pcap wraps, and each run costs about 30
/// instructions to set up: a 1-packet pcap replayed as is paid that per packet (pg-input
/// 57.3 → 90.4 instructions a packet). Repeated, a burst is at most two runs. The packets
/// and their order are the same: packet `sent % len` of the copies is packet
/// `sent % (pcap's len)` of the pcap, as the copies hold a whole number of it.
fn replay_source(source: &Source) -> Source {
    match source {
        Source::Pcap(p) if !p.is_empty() && p.len() < SHORT_PCAP => {
            let copies = FRAME.div_ceil(p.len());
            let pkts = p.iter().cycle().take(copies * p.len()).cloned().collect();
            Source::Pcap(Arc::new(pkts))
        }
        s => s.clone(),
    }
}

/// [`StreamRt::pcap_end`] of `source`.
fn pcap_end(source: &Source) -> Vec<u64> {
    match source {
        Source::Pcap(p) => std::iter::once(0)
            .chain(p.iter().scan(0u64, |sum, p| {
                *sum += p.len() as u64;
                Some(*sum)
            }))
            .collect(),
        Source::Synth(_) => Vec::new(),
    }
}

/// Creates a stream (disabled) and installs it on the thread that generates it.
pub fn add_stream(vm: &mut Vlib, def: StreamDef) -> VnetResult {
    if matches!(&def.source, Source::Pcap(p) if p.is_empty()) {
        return Err(VnetError::invalid(format!(
            "stream `{}': the pcap has no packets",
            def.name
        )));
    }
    if vm
        .ext_mut::<PgMain>()
        .streams
        .iter()
        .any(|s| s.def.name == def.name)
    {
        return Err(VnetError::Exists(format!(
            "stream `{}' already exists",
            def.name
        )));
    }
    let if_name = def.interface.clone().unwrap_or_else(|| "pg0".to_string());
    let (rx_if, counters) = {
        let ifs = vm.ext_mut::<Interfaces>();
        let i = ifs.find(&if_name).ok_or_else(|| {
            VnetError::NotFound(format!(
                "unknown interface `{if_name}' (create it with `create packet-generator interface {if_name}')"
            ))
        })?;
        let intf = ifs.get(i).ok_or(VnetError::NoSuchInterface(i.0))?;
        (i.0, intf.counters.clone())
    };
    // VPP's per-interface output nodes: `node <if>-output` is `interface-output` with the
    // packets' tx interface set to <if>.
    let mut tx_name = def.tx_interface.clone();
    let node_name = match &def.node {
        Some(n) if vm.registry.find(n).is_none() && n.ends_with("-output") => {
            tx_name = Some(n.trim_end_matches("-output").to_string());
            crate::output::NAME.to_string()
        }
        Some(n) => n.clone(),
        None if vm.registry.find("ethernet-input").is_some() => "ethernet-input".to_string(),
        None => crate::l2patch::NAME.to_string(),
    };
    let tx_if = match &tx_name {
        None => None,
        Some(t) => Some(
            vm.ext_mut::<Interfaces>()
                .find(t)
                .ok_or_else(|| VnetError::invalid(format!("unknown interface `{t}'")))?
                .0,
        ),
    };
    let node = vm
        .registry
        .find(&node_name)
        .ok_or_else(|| VnetError::invalid(format!("unknown node `{node_name}'")))?;
    if vm.registry.node(node).kind != NodeKind::Internal {
        return Err(VnetError::invalid(format!(
            "node `{node_name}' is not an internal node"
        )));
    }
    let handoff_to = match def.worker {
        None => None,
        Some(w) if w < vm.n_workers() => Some(w + 1),
        Some(w) => {
            return Err(VnetError::invalid(format!(
                "worker {w} does not exist ({} workers)",
                vm.n_workers()
            )))
        }
    };
    let input = vm
        .registry
        .lookup(INPUT)
        .map_err(|e| VnetError::System(e.to_string()))?;
    let next = vm
        .add_next(input, node)
        .map_err(|e| VnetError::System(e.to_string()))?;
    let limit = def.limit.unwrap_or(match &def.source {
        Source::Pcap(p) => p.len() as u64,
        Source::Synth(_) => u64::MAX,
    });
    let pg = vm.ext_mut::<PgMain>();
    let id = pg.next_id;
    pg.next_id += 1;
    let sent = Arc::new(AtomicU64::new(0));
    let skipped = Arc::new(AtomicU64::new(0));
    let enabled = Arc::new(AtomicBool::new(false));
    let source = replay_source(&def.source);
    let rt = StreamRt {
        id,
        pcap_end: pcap_end(&source),
        source,
        next,
        node,
        rx_if,
        tmpl: {
            let mut t = BufferHeader::TEMPLATE;
            t.rx_if = rx_if;
            if let Some(tx) = tx_if {
                t.tx_if = tx;
            }
            t
        },
        limit,
        sent: 0,
        rate: def.rate,
        start_tsc: 0,
        maxframe: def.maxframe,
        handoff_to,
        shared_sent: sent.clone(),
        skipped: 0,
        shared_skipped: skipped.clone(),
        enabled: enabled.clone(),
        counters,
    };
    // Generated on the main thread; `worker N` streams are handed off from there.
    let thread = 0;
    pg.streams.push(StreamInfo {
        id,
        def,
        thread,
        sent,
        skipped,
        enabled,
    });
    vm.on_thread(thread, move |tg| {
        if let Some(p) = tg.node_mut::<PgInput>(input) {
            p.streams.push(rt);
        }
    });
    Ok(())
}

/// The streams called `name` (all when `None`): (id, thread).
fn select(vm: &mut Vlib, name: Option<&str>) -> VnetResult<Vec<(u32, usize)>> {
    let pg = vm.ext_mut::<PgMain>();
    let v: Vec<(u32, usize)> = pg
        .streams
        .iter()
        .filter(|s| name.is_none_or(|n| n == s.def.name))
        .map(|s| (s.id, s.thread))
        .collect();
    if let (Some(n), true) = (name, v.is_empty()) {
        return Err(VnetError::NotFound(format!("unknown stream `{n}'")));
    }
    Ok(v)
}

fn set_enabled(vm: &mut Vlib, sel: Vec<(u32, usize)>, on: bool) {
    let input = match vm.registry.find(INPUT) {
        Some(i) => i,
        None => return,
    };
    for (id, thread) in sel {
        vm.on_thread(thread, move |tg| {
            if let Some(p) = tg.node_mut::<PgInput>(input) {
                for s in p.streams.iter_mut().filter(|s| s.id == id) {
                    if on {
                        s.sent = 0;
                        s.shared_sent.store(0, Ordering::Relaxed);
                        s.skipped = 0;
                        s.shared_skipped.store(0, Ordering::Relaxed);
                        s.start_tsc = rdtsc();
                    }
                    s.enabled.store(on && s.limit > 0, Ordering::Relaxed);
                }
            }
        });
    }
}

/// `packet-generator enable|disable [<name>]`: starts (from its first packet) or stops the
/// stream called `name`, or every stream.
pub fn enable_disable(vm: &mut Vlib, name: Option<&str>, on: bool) -> VnetResult {
    let sel = select(vm, name)?;
    set_enabled(vm, sel, on);
    Ok(())
}

fn cli_enable(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let name = a.opt_word();
    a.finish()?;
    enable_disable(vm, name.as_deref(), true)?;
    Ok(String::new())
}

fn cli_disable(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let name = a.opt_word();
    a.finish()?;
    enable_disable(vm, name.as_deref(), false)?;
    Ok(String::new())
}

fn cli_delete(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let name = a.word("stream name")?;
    a.finish()?;
    delete_stream(vm, &name)?;
    Ok(String::new())
}

/// `packet-generator delete <name>`.
pub fn delete_stream(vm: &mut Vlib, name: &str) -> VnetResult {
    let pg = vm.ext_mut::<PgMain>();
    let Some(pos) = pg.streams.iter().position(|s| s.def.name == name) else {
        return Err(VnetError::NotFound(format!("unknown stream `{name}'")));
    };
    let s = pg.streams.remove(pos);
    let (id, thread) = (s.id, s.thread);
    if let Some(input) = vm.registry.find(INPUT) {
        vm.on_thread(thread, move |tg| {
            if let Some(p) = tg.node_mut::<PgInput>(input) {
                p.streams.retain(|s| s.id != id);
            }
        });
    }
    Ok(())
}

fn cli_capture(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let idx = crate::cli::interface_arg(vm, a)?;
    if a.keyword("disable") {
        a.finish()?;
        capture(vm, idx, None, None)?;
        return Ok(String::new());
    }
    let mut file = None;
    let mut count = None;
    while !a.is_empty() {
        if a.keyword("pcap") {
            file = Some(a.word("pcap file")?);
        } else if a.keyword("count") {
            count = Some(a.u64("count")?);
        } else {
            a.finish()?;
        }
    }
    let file = file.ok_or_else(|| CliError::new("missing `pcap <file>'"))?;
    capture(vm, idx, Some(&file), count)?;
    Ok(String::new())
}

/// `packet-generator capture <if> pcap <file> [count <n>]` (`file` None: `... disable`):
/// what the interface transmits is written to a pcap file, confined to the capture directory
/// (`unix { capture-dir }`, `sluice_graph::pcap`).
pub fn capture(
    vm: &mut Vlib,
    idx: SwIfIndex,
    file: Option<&str>,
    count: Option<u64>,
) -> VnetResult {
    crate::interface::check(vm, idx)?;
    let sh = vm
        .ext_mut::<PgMain>()
        .shared
        .clone()
        .ok_or_else(|| VnetError::System("pg not initialised".into()))?;
    let Some(file) = file else {
        let mut caps = sh.captures.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(mut c) = caps.remove(&idx.0) {
            let _ = c.sink.flush();
        }
        if caps.is_empty() {
            sh.any_capture.store(false, Ordering::Relaxed);
        }
        return Ok(());
    };
    let dir = vm
        .ext::<sluice_graph::pcap::CaptureDir>()
        .cloned()
        .unwrap_or_default();
    let sink =
        PcapSink::create_in(&dir.0, file, 65535).map_err(|e| VnetError::invalid(e.to_string()))?;
    let mut caps = sh.captures.lock().unwrap_or_else(|p| p.into_inner());
    caps.insert(idx.0, Capture { sink, limit: count });
    sh.any_capture.store(true, Ordering::Relaxed);
    Ok(())
}

fn cli_show(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let _ = a.keyword("verbose");
    a.finish()?;
    let pg = vm.ext_mut::<PgMain>();
    let mut out = format!(
        "{:<20}{:>10}{:>16}  {}\n",
        "Name", "Enabled", "Count", "Parameters"
    );
    for s in &pg.streams {
        let mut params = Vec::new();
        match &s.def.source {
            Source::Pcap(p) => params.push(format!("pcap {} packets", p.len())),
            Source::Synth(syn) => params.push(format!("size {}-{}", syn.size.start, syn.size.end)),
        }
        if let Some(l) = s.def.limit {
            params.push(format!("limit {l}"));
        }
        if let Some(r) = s.def.rate {
            params.push(format!("rate {r:.2e} pps"));
            let n = s.skipped.load(Ordering::Relaxed);
            params.push(format!("skipped {n}"));
        }
        if let Some(w) = s.def.worker {
            params.push(format!("worker {w}"));
        }
        let _ = writeln!(
            out,
            "{:<20}{:>10}{:>16}  {}",
            s.def.name,
            if s.enabled.load(Ordering::Relaxed) {
                "Yes"
            } else {
                "No"
            },
            s.sent.load(Ordering::Relaxed),
            params.join(", ")
        );
    }
    Ok(out)
}

/// Whether any stream is still enabled (used by the daemon's `--run-until-done`).
pub fn any_enabled(vm: &mut Vlib) -> bool {
    vm.ext_mut::<PgMain>()
        .streams
        .iter()
        .any(|s| s.enabled.load(Ordering::Relaxed))
}

/// The streams: (name, interface name, enabled, packets sent, limit).
pub fn streams(vm: &mut Vlib) -> Vec<(String, String, bool, u64, u64)> {
    vm.ext_mut::<PgMain>()
        .streams
        .iter()
        .map(|s| {
            (
                s.def.name.clone(),
                s.def.interface.clone().unwrap_or_else(|| "pg0".into()),
                s.enabled.load(Ordering::Relaxed),
                s.sent.load(Ordering::Relaxed),
                s.def.limit.unwrap_or(match &s.def.source {
                    Source::Pcap(p) => p.len() as u64,
                    Source::Synth(_) => u64::MAX,
                }),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_graph::{Next, NodeIndex};

    fn paced(rate: f64, maxframe: usize) -> StreamRt {
        StreamRt {
            id: 0,
            source: Source::Pcap(Arc::new(Vec::new())),
            pcap_end: vec![0],
            next: Next(0),
            node: NodeIndex(0),
            rx_if: 0,
            tmpl: BufferHeader::TEMPLATE,
            limit: u64::MAX,
            sent: 0,
            rate: Some(rate),
            start_tsc: 1_000,
            maxframe,
            handoff_to: None,
            shared_sent: Arc::default(),
            skipped: 0,
            shared_skipped: Arc::default(),
            enabled: Arc::default(),
            counters: Arc::new(IfCounters::new(1)),
        }
    }

    #[test]
    fn write_short_copies_every_length_as_write_packet() {
        use sluice_buffer::{BufferPool, PageSize, PoolConfig};
        for data_size in [256, 2048] {
            let pool = BufferPool::new(&PoolConfig {
                buffers: 2,
                data_size,
                page_size: PageSize::Small,
                shared: false,
            })
            .expect("pool");
            let mut c = pool.cache();
            let mut one = [BufIdx(0)];
            assert_eq!(c.alloc(&mut one), 1);
            for len in 0..=300usize {
                let p: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
                // SAFETY: the test owns the buffer; one view at a time.
                let mut v = unsafe { pool.buffer(one[0]) };
                // A stale packet in the buffer (bytes and offset) that the copy must replace.
                v.hdr.reset();
                v.write_packet(&[0xee; 300]);
                v.hdr.current_data = -3;
                let n = write_short(&mut v, &p);
                assert_eq!(n, len.min(data_size), "len {len}, data size {data_size}");
                assert_eq!(v.hdr.current_data, 0);
                assert_eq!(v.data(), &p[..n], "len {len}, data size {data_size}");
            }
            c.free(&one);
            drop(c);
            assert_eq!(pool.stats().in_use, 0);
        }
    }

    #[test]
    fn paced_stream_sends_at_most_two_frames_after_a_stall_and_counts_the_rest() {
        // 10 Mpps on a 1 GHz TSC: 10 packets per microsecond.
        let hz = 1e9;
        for maxframe in [FRAME, 32] {
            let cap = 2 * maxframe;
            let mut s = paced(1e7, maxframe);
            // A 10 ms stall: 100,000 packets fell due.
            let mut now = 1_000 + 10_000_000;
            let mut burst = 0;
            for _ in 0..100 {
                let n = paced_want(&mut s, now, hz);
                assert!(n <= FRAME, "{n}");
                s.sent += n as u64;
                burst += n;
            }
            // The cap, but for the rounding of one tick.
            assert!(
                burst <= cap && burst + 1 >= cap,
                "{burst} (maxframe {maxframe})"
            );
            assert!(
                s.skipped.abs_diff(100_001 - cap as u64) <= 1,
                "{}",
                s.skipped
            );
            assert_eq!(s.shared_skipped.load(Ordering::Relaxed), s.skipped);
            // Then only what falls due: 1 µs later, about 10 packets.
            now += 1_000;
            let n = paced_want(&mut s, now, hz);
            assert!(n <= 11, "{n} after the burst (maxframe {maxframe})");
        }
        // Keeping up: nothing skipped.
        let mut s = paced(1e7, FRAME);
        for k in 1..1_000u64 {
            let n = paced_want(&mut s, 1_000 + k * 1_000, hz);
            s.sent += n as u64;
        }
        assert_eq!(s.skipped, 0);
        assert!(s.sent.abs_diff(9_991) <= 1, "{}", s.sent);
    }
}
