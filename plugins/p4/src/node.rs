//! `p4-<name>` (and `p4-<name>-s<k>`): a loaded P4 program as graph nodes.
//!
//! - uses: `rx_if` (as `standard_metadata.ingress_port`), the packet bytes of the first
//!   buffer (the parser sees only those: a chained packet's tail is payload).
//! - sets: `tx_if` (`egress_spec`) on forwarded packets; the packet start and length when
//!   the emitted headers are longer or shorter than the parsed ones; `error` on drops.
//! - next: `error-drop` (arc 0) when the program drops (`mark_to_drop`, egress_spec 511),
//!   the parser loops, the headroom is too short for the emitted headers, or no program is
//!   loaded; `interface-output` (arc 1) with `tx_if` = egress_spec; `punt` (arc 2) for
//!   egress_spec 510 (CPU port); the next segment's node (arc 3) in multi-node mode.
//! - counters: `forwarded`, `punted` (info); `dropped`, `parser_loop`, `no_headroom`,
//!   `not_loaded` (error, drop reasons); `parser_too_short`, `parser_no_match`,
//!   `parser_reject` (info: v1model continues into ingress with `parser_error` set).
//!
//! Modes. Single: one node runs parser, verify, ingress, egress, compute and deparser, on
//! the first of: the program's generated module (`sluice-p4c`, `generated::ALL`) when its
//! fingerprint matches what was compiled; else the vector executor (`vec`, a frame at a
//! time) when it supports the program; else the per-packet closure executor (`code`, two
//! packets interleaved unless `no-dual`). `no-gen` skips the generated module; `no-vector`
//! skips both the generated module and the vector executor. With generated code that
//! allows it (`GenEntry::guess`: the first ingress table is looked up early, and its key
//! is header fields at fixed offsets) and a first table that is a DIR-24-8 or holds at
//! least [`SPLIT_ENTRIES`] entries, the node runs in stages ([`frame_staged`],
//! [`stage_pays`]): a few packets ahead of the one it runs, it guesses the first table's
//! key from the packet's bytes and looks it up, and each packet's pipeline uses the guess
//! when it was right (a DIR-24-8, of any size: only the guess's first-level entry
//! prefetched, [`prefetched`]); `show p4 program` counts those frames on its `staged:` line.
//! Multi: the ingress control's top-level statements are cut into segments, one per table
//! application (PVPP's one node per table, plus whatever runs between tables), each segment a
//! node; the packet state travels between them in a per-thread side table indexed by buffer
//! index (one uncontended lock per frame and node, never per packet); segments run the
//! generated module's phases when the program has one whose phases match the segments
//! (each segment takes its frame's keys first, then looks them up together), else the
//! closure executor. Auto: both exist (its single path runs what single mode would, the
//! generated module included); per frame, a cost model ([`split_pays`]) chooses, and it
//! runs every frame in one node: no split was measured faster than single (session 17).
//! Use multi for a split.
//!
//! Tables and counters are per thread (in each node instance); the control plane keeps a
//! master copy and replays every change on every thread (`vm.foreach_thread`).

use crate::exec::{emit, emit_len, Ctx, Exec, ParseEnd, Shared, ThreadState, Verdict};
use crate::ir::{
    Lv, Program, Un, E, ERR_NO_ERROR, ERR_NO_MATCH, ERR_PACKET_TOO_SHORT, META_MAX, S,
};
use crate::vec::{VCode, VOut, VState};
use sluice_buffer::{BufIdx, Buffer};
use sluice_graph::{Cx, FrameScratch, NodeFn, FRAME_SIZE, SCRATCH_AHEAD};
use std::any::Any;
use std::sync::{Arc, Mutex};

sluice_graph::arcs! {
    /// A P4 node's next arcs (a segment's arc to the next segment is added at runtime when
    /// that segment exists: `NodeState::seg_next`).
    pub enum P4Next {
        /// Dropped by the program or malformed.
        Drop => "error-drop",
        /// Sent to a port.
        Output => sluice_vnet::output::NAME,
        /// Sent to the CPU port.
        Punt => "punt",
    }
}

sluice_graph::counters! {
    /// A P4 node's counters.
    pub enum P4Counter {
        /// Sent to an interface.
        Forwarded => info("forwarded", "P4 packets sent to an interface"),
        /// Sent to the CPU port.
        Punted => info("punted", "P4 packets sent to the CPU port"),
        /// Dropped by the program.
        Dropped => error("dropped", "P4 program dropped the packet"),
        /// Parser looped too long.
        ParserLoop => error("parser_loop", "P4 parser looped too long"),
        /// No headroom for the deparsed headers.
        NoHeadroom => error("no_headroom", "P4 deparser: no headroom for the headers"),
        /// No program loaded.
        NotLoaded => error("not_loaded", "no P4 program loaded"),
        /// Parser error PacketTooShort.
        TooShort => info("parser_too_short", "P4 parser error PacketTooShort"),
        /// Parser error NoMatch.
        NoMatch => info("parser_no_match", "P4 parser error NoMatch"),
        /// Parser rejected.
        Reject => info("parser_reject", "P4 parser rejected"),
    }
}

/// How a program is placed in the graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Single,
    Multi,
    Auto,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Single => "single",
            Mode::Multi => "multi",
            Mode::Auto => "auto",
        }
    }
}

/// Per-thread packet state between segment nodes (multi-node mode), one per buffer of the
/// pool, sized at load ([`Side::new`]): a segment never allocates.
#[derive(Default)]
pub struct Side {
    /// The closure executor's packet states (empty when the generated code runs segments).
    pub ctxs: Vec<Ctx>,
    /// The generated code's packet states (`Vec<Generated::St>`), when it runs the segments.
    pub gen: Option<Box<dyn Any + Send>>,
}

impl Side {
    /// The side table of one thread for a program placed in `mode` with `segs` segment
    /// nodes, `nbuf` buffers in the pool: one packet state per buffer for whichever
    /// executor runs the segments ([`seg_gen`]) in multi mode; empty in single and auto
    /// mode, where no frame runs split ([`split_pays`] is never true: a rule that makes
    /// auto split must allocate here for it, `seg_gen(gen, segs)` with `segs > 1`).
    pub fn new(
        mode: Mode,
        gen: Option<&crate::generated::GenEntry>,
        segs: usize,
        nbuf: usize,
    ) -> Self {
        if mode != Mode::Multi {
            return Side::default();
        }
        match seg_gen(gen, segs) {
            Some(g) => Side {
                gen: Some((g.states)(nbuf)),
                ..Side::default()
            },
            None => Side {
                ctxs: (0..nbuf).map(|_| Ctx::default()).collect(),
                ..Side::default()
            },
        }
    }
}

/// The generated module that runs the segment nodes: the program's, when its phases are
/// the `segs` segments (the same cuts).
pub fn seg_gen(
    gen: Option<&crate::generated::GenEntry>,
    segs: usize,
) -> Option<&crate::generated::GenEntry> {
    gen.filter(|g| g.segs == segs)
}

/// The generated code's side-table states for `n` buffers (`GenEntry::states`).
pub fn gen_states<G: crate::gen::rt::Generated>(n: usize) -> Box<dyn Any + Send> {
    Box::new(vec![G::blank(); n])
}

/// What every node of a program shares (read-only on the data path except the side tables).
pub struct Loaded {
    pub prog: Arc<Program>,
    /// `prog` compiled to closures.
    pub code: crate::code::Code,
    /// `prog` compiled for the vector executor, or why it runs on the per-packet one.
    pub vcode: Result<VCode, String>,
    /// The program's generated code (`sluice-p4c`), run instead in single mode.
    pub gen: Option<&'static crate::generated::GenEntry>,
    pub shared: Arc<Shared>,
    /// Ingress statement ranges, one per segment node.
    pub segments: Vec<(usize, usize)>,
    pub mode: Mode,
    /// The parser and verify touch no register or meter
    /// (`Program::parse_verify_stateless`): auto mode may split the program.
    pub parse_pure: bool,
    /// One side table per thread.
    pub side: Box<[Mutex<Side>]>,
}

/// Auto mode's choices (entry node): frames run split and in one node; and, in any mode,
/// the frames the single node ran in stages ([`frame_staged`]).
#[derive(Default, Debug, Clone, Copy)]
pub struct Auto {
    pub split: u64,
    pub single: u64,
    pub staged: u64,
}

/// The table size from which the single node stages its first table's lookups
/// ([`stage_pays`]): an exact or ternary first table of at least this many entries is
/// guessed and looked up a few packets ahead. (Auto mode no longer uses it to split,
/// [`split_pays`].)
pub const SPLIT_ENTRIES: usize = 4096;

/// Action records in use (`TableRt::recs_in_use`) from which a table's records are taken
/// to miss the cache, so that the staged and segment lookups prefetch each hit's record
/// ([`frame_staged`], [`lookup_batch`]). Records, not entries ([`SPLIT_ENTRIES`] counts
/// those): entries with the same action and parameters share one record, so a table of
/// 100k routes over a few next hops keeps its few records in cache.
pub const PREFETCH_RECORDS: usize = 4096;

/// Whether auto mode splits the program's next frame: never. Every case measured ran
/// slower split than in one node (docs/p4.md, session 17): the l2 switch with a `dmac` of
/// 4,096 entries took 329.9 instructions and 16.0 D1 misses per packet split against 154.5
/// and 4.3 in one node (callgrind cache-sim), because the split writes each packet's state
/// to the side table, reads it back and walks every buffer twice, while the table's index
/// (12 bytes a slot) stays in L2; the router at 1 and 100k routes runs single too (the
/// single node batches its first table itself, [`frame_staged`]). A split could pay only
/// when a later table's index no longer fits the last-level cache; a rule for that must
/// count the index's bytes against the LL size, be measured at that size (cache-sim and a
/// quiet clock) showing auto <= single, and come with a test. Mode multi still splits
/// every frame on request.
pub fn split_pays(_l: &Loaded, _ts: &ThreadState) -> bool {
    false
}

/// Whether the single node runs generated code `g` in stages ([`frame_staged`]): when
/// the generated code allows it (`GenEntry::guess`: the first ingress table is looked up
/// early, on a key guessed from the packet's bytes) and the early lookups pay for the
/// guesses: the first table is a DIR-24-8 (whose first level misses the L1 cache even
/// with one route: a /8 spreads its destinations over 65,536 entries), or holds at least
/// [`SPLIT_ENTRIES`] entries. An exact or ternary first table of a few entries stays in
/// cache: staging would only guess every key for nothing.
pub fn stage_pays(g: &crate::generated::GenEntry, ts: &ThreadState) -> bool {
    g.guess
        && g.pre
            .first()
            .copied()
            .flatten()
            .and_then(|t| ts.tables.get(t as usize))
            .is_some_and(|t| t.lpm32().is_some() || t.len() >= SPLIT_ENTRIES)
}

/// One node instance (per thread).
pub struct P4Node {
    /// Segment index (0: the entry node).
    pub seg: usize,
    pub thread: usize,
    pub st: Option<NodeState>,
    nexts: [u16; FRAME_SIZE],
    /// Reused allocations for the vector executor's per-frame buffer views.
    scratch_b: Vec<[usize; 3]>,
    scratch_p: Vec<[usize; 2]>,
}

/// An empty vector of another element type reusing `v`'s allocation when the layouts match
/// (std collects in place), so per-frame vectors of borrowed views allocate only once.
fn recycle<T, U>(mut v: Vec<T>) -> Vec<U> {
    v.clear();
    v.into_iter().filter_map(|_| None).collect()
}

/// A node's per-thread state.
pub struct NodeState {
    pub loaded: Arc<Loaded>,
    pub ts: ThreadState,
    /// Arc to the next segment's node (None: last segment).
    pub seg_next: Option<u16>,
    pub auto: Auto,
    ctx: [Box<Ctx>; 2],
    /// The vector executor's columns (created at the first frame).
    vs: Option<Box<VState>>,
}

impl NodeState {
    /// State for a node of `loaded`.
    pub fn new(loaded: Arc<Loaded>, ts: ThreadState, seg_next: Option<u16>) -> Self {
        NodeState {
            loaded,
            ts,
            seg_next,
            auto: Auto::default(),
            ctx: [Box::default(), Box::default()],
            vs: None,
        }
    }
}

impl P4Node {
    /// An instance with no program.
    pub fn new(seg: usize, thread: usize) -> Self {
        P4Node {
            seg,
            thread,
            st: None,
            nexts: [0; FRAME_SIZE],
            scratch_b: Vec::new(),
            scratch_p: Vec::new(),
        }
    }
}

/// Writes the emitted headers in front of the payload; false if the headroom is short.
#[inline(always)]
fn deparse(p: &Program, c: &Ctx, b: &mut Buffer<'_>) -> bool {
    let n = emit_len(p, c);
    let pos = c.pos as usize;
    if n > pos {
        if b.push_front(n - pos).is_none() {
            return false;
        }
    } else if n < pos && !b.advance(pos - n) {
        return false;
    }
    emit(p, c, b.data_mut());
    true
}

#[inline(always)]
fn parse_count(cx: &mut Cx, pe: ParseEnd) {
    if let ParseEnd::Error(e) = pe {
        match e {
            ERR_PACKET_TOO_SHORT => cx.count(P4Counter::TooShort, 1),
            ERR_NO_MATCH => cx.count(P4Counter::NoMatch, 1),
            ERR_NO_ERROR => cx.count(P4Counter::Reject, 1),
            _ => cx.count(P4Counter::Reject, 1),
        }
    }
}

/// Turns a verdict into a next arc (and deparses packets that leave).
#[inline(always)]
fn verdict_next(cx: &mut Cx, p: &Program, c: &Ctx, b: &mut Buffer<'_>, v: Verdict) -> u16 {
    if v == Verdict::Drop {
        b.hdr.error = cx.error(P4Counter::Dropped);
        return P4Next::Drop as u16;
    }
    if !deparse(p, c, b) {
        b.hdr.error = cx.error(P4Counter::NoHeadroom);
        return P4Next::Drop as u16;
    }
    match v {
        Verdict::Port(port) => {
            b.hdr.tx_if = port;
            cx.count(P4Counter::Forwarded, 1);
            P4Next::Output as u16
        }
        _ => {
            cx.count(P4Counter::Punted, 1);
            P4Next::Punt as u16
        }
    }
}

/// The whole pipeline on one packet.
#[inline(always)]
fn run_one(cx: &mut Cx, ex: &mut Exec<'_>, c: &mut Ctx, b: &mut Buffer<'_>) -> u16 {
    let len = b.total_len();
    ex.pkt_len = len as u64;
    ex.begin(c, b.hdr.rx_if, len as u32);
    match ex.pipeline(c, b.data()) {
        Err(_) => {
            b.hdr.error = cx.error(P4Counter::ParserLoop);
            P4Next::Drop as u16
        }
        Ok((v, pe)) => {
            // Parser errors (and rejects) are counted; the packet continued (v1model).
            parse_count(cx, pe);
            let p = ex.prog;
            verdict_next(cx, p, c, b, v)
        }
    }
}

impl P4Node {
    /// The whole pipeline over the frame, one step at a time (`vec`).
    fn frame_vec(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        let st = self.st.as_mut().expect("checked");
        let l = st.loaded.clone();
        let Ok(vc) = &l.vcode else {
            return;
        };
        let vs = st.vs.get_or_insert_with(|| VState::new(vc));
        let arena = cx.arena();
        let n = frame.len().min(FRAME_SIZE);
        let mut bufs: Vec<Buffer<'_>> = recycle(std::mem::take(&mut self.scratch_b));
        // SAFETY: the dispatcher hands this node exclusive ownership of every index in
        // `frame`; indices are distinct, so the views do not alias, and they live only for
        // this call.
        bufs.extend(frame[..n].iter().map(|&bi| unsafe { arena.buffer(bi) }));
        vs.now_ns = (cx.now_secs() * 1e9) as u64;
        for (i, b) in bufs.iter().enumerate() {
            vs.inport[i] = b.hdr.rx_if;
            vs.plen[i] = b.total_len() as u32;
        }
        let mut out = [VOut::Drop; FRAME_SIZE];
        {
            let mut pk: Vec<&mut [u8]> = recycle(std::mem::take(&mut self.scratch_p));
            pk.extend(bufs.iter_mut().map(|b| b.data_mut()));
            vc.run_frame(vs, &mut pk, &mut st.ts, &l.shared, &mut out[..n]);
            self.scratch_p = recycle(pk);
        }
        let mut sent = Sent::default();
        let zero = [0u64; FRAME_SIZE];
        let perr = vc.parser_errors(vs).unwrap_or(&zero);
        for (i, b) in bufs.iter_mut().enumerate() {
            let pe = perr[i];
            if pe != 0 || vs.rejected[i] {
                parse_count(cx, ParseEnd::Error(pe));
            }
            self.nexts[i] = sent.next(cx, b, out[i]);
        }
        self.scratch_b = recycle(bufs);
        sent.count(cx);
        cx.enqueue_to_next(frame, &self.nexts[..n]);
    }

    fn frame_single(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        let st = self.st.as_mut().expect("checked");
        let l = st.loaded.clone();
        if let Some(g) = l.gen {
            let n = frame.len();
            let f = if stage_pays(g, &st.ts) {
                st.auto.staged += 1;
                g.staged
            } else {
                g.frame
            };
            f(cx, &mut st.ts, &l.shared, frame, &mut self.nexts[..n]);
            cx.enqueue_to_next(frame, &self.nexts[..n]);
            return;
        }
        if l.vcode.is_ok() {
            return self.frame_vec(cx, frame);
        }
        let now_ns = (cx.now_secs() * 1e9) as u64;
        let arena = cx.arena();
        let mut ex = Exec {
            prog: &l.prog,
            code: &l.code,
            ts: &mut st.ts,
            shared: &l.shared,
            now_ns,
            pkt_len: 0,
        };
        let [c0, c1] = &mut st.ctx;
        let n = frame.len();
        let nexts = &mut self.nexts[..n];
        if l.prog.opts.dual {
            let mut i = 0;
            while i + 1 < n {
                if let Some(&a) = frame.get(i + 2) {
                    arena.prefetch(a);
                }
                if let Some(&a) = frame.get(i + 3) {
                    arena.prefetch(a);
                }
                // SAFETY: the dispatcher hands this node exclusive ownership of every index
                // in `frame`; indices are distinct, so the two views do not alias, and they
                // live only for this iteration.
                let (mut b0, mut b1) =
                    unsafe { (arena.buffer(frame[i]), arena.buffer(frame[i + 1])) };
                nexts[i] = run_one(cx, &mut ex, c0, &mut b0);
                nexts[i + 1] = run_one(cx, &mut ex, c1, &mut b1);
                i += 2;
            }
            if i < n {
                // SAFETY: as above.
                let mut b = unsafe { arena.buffer(frame[i]) };
                nexts[i] = run_one(cx, &mut ex, c0, &mut b);
            }
        } else {
            for (nx, &bi) in nexts.iter_mut().zip(frame) {
                // SAFETY: as above; one view at a time.
                let mut b = unsafe { arena.buffer(bi) };
                *nx = run_one(cx, &mut ex, c0, &mut b);
            }
        }
        cx.enqueue_to_next(frame, &self.nexts[..n]);
    }

    /// Multi-node: this node's segment on every packet of the frame.
    fn frame_segment(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        let st = self.st.as_mut().expect("checked");
        let l = st.loaded.clone();
        let now_ns = (cx.now_secs() * 1e9) as u64;
        let arena = cx.arena();
        let Ok(mut side) = l.side[self.thread.min(l.side.len() - 1)].lock() else {
            // A panic elsewhere poisoned the side table: drop the frame, counted.
            let n = frame.len();
            for (nx, &bi) in self.nexts[..n].iter_mut().zip(frame) {
                // SAFETY: exclusive ownership of the frame's indices, one view at a time.
                let b = unsafe { arena.buffer(bi) };
                b.hdr.error = cx.error(P4Counter::NotLoaded);
                *nx = P4Next::Drop as u16;
            }
            cx.enqueue_to_next(frame, &self.nexts[..n]);
            return;
        };
        let n = frame.len();
        // The generated code's phases are these segments (the same cuts): run them.
        if let Some(g) = seg_gen(l.gen, l.segments.len()) {
            let next = st.seg_next;
            let nexts = &mut self.nexts[..n];
            (g.segment)(
                cx, &mut st.ts, &l.shared, &mut side, self.seg, next, frame, nexts,
            );
            drop(side);
            cx.enqueue_to_next(frame, &self.nexts[..n]);
            return;
        }
        let mut ex = Exec {
            prog: &l.prog,
            code: &l.code,
            ts: &mut st.ts,
            shared: &l.shared,
            now_ns,
            pkt_len: 0,
        };
        let (from, to) = l.segments[self.seg];
        let last = st.seg_next.is_none();
        for i in 0..n {
            let bi = frame[i];
            if let Some(&a) = frame.get(i + 2) {
                arena.prefetch(a);
            }
            // SAFETY: exclusive ownership of the frame's indices, one view at a time.
            let mut b = unsafe { arena.buffer(bi) };
            let Some(c) = side.ctxs.get_mut(bi.0 as usize) else {
                b.hdr.error = cx.error(P4Counter::NotLoaded);
                self.nexts[i] = P4Next::Drop as u16;
                continue;
            };
            let len = b.total_len();
            ex.pkt_len = len as u64;
            if self.seg == 0 {
                ex.begin(c, b.hdr.rx_if, len as u32);
                let pe = ex.parse(c, b.data());
                if pe == ParseEnd::Loop {
                    b.hdr.error = cx.error(P4Counter::ParserLoop);
                    self.nexts[i] = P4Next::Drop as u16;
                    continue;
                }
                parse_count(cx, pe);
                ex.verify(c);
            }
            ex.ingress_range(c, from, to);
            self.nexts[i] = match st.seg_next {
                Some(nx) if !last => nx,
                _ => {
                    let v = ex.finish(c);
                    verdict_next(cx, &l.prog, c, &mut b, v)
                }
            };
        }
        drop(side);
        cx.enqueue_to_next(frame, &self.nexts[..n]);
    }
}

/// Single mode on a program's generated code (`gen`): the whole pipeline per packet in
/// code specialised for the program, the next arc of each packet into `nexts`.
pub fn frame_generated<G: crate::gen::rt::Generated>(
    cx: &mut Cx,
    ts: &mut ThreadState,
    sh: &Shared,
    frame: &[BufIdx],
    nexts: &mut [u16],
) {
    let (arena, now, scratch) = begin_frame(cx, frame);
    let addrs = &scratch.addrs;
    let mut sent = Sent::default();
    for (i, (nx, &bi)) in nexts.iter_mut().zip(frame).enumerate() {
        addrs.prefetch(i + 2, true);
        // SAFETY: the dispatcher hands this node exclusive ownership of every index in
        // `frame`, resolved into `addrs` ([`begin_frame`]); one view at a time, living
        // for this iteration only.
        let mut b = unsafe { arena.buffer_at(addrs, i, bi) };
        let len = b.total_len() as u32;
        let rx = b.hdr.rx_if;
        let (o, pe) = G::packet_buf(ts, sh, now, &mut b, rx, len);
        parse_count(cx, pe);
        *nx = sent.next(cx, &mut b, o);
    }
    end_frame(cx, scratch, sent);
}

/// The set-up of the generated code's loops over a frame ([`frame_generated`],
/// [`prefetched`], [`pipelined`]; [`end_frame`] is the tear-down): the arena,
/// the time (ns) and the thread's scratch holding the frame's buffer addresses, resolved
/// once (a compare when `ethernet-input` handed this frame on whole: it resolved it there)
/// and checked there. Two functions rather than one taking the loop as a closure: the loop
/// stays the one written out in its function (as a closure it compiled to 8 more
/// instructions per packet in the router's node at 1 route, 223.1 against 215.2).
#[inline(always)]
fn begin_frame<'a>(
    cx: &mut Cx<'a>,
    frame: &[BufIdx],
) -> (sluice_buffer::Arena<'a>, u64, Box<FrameScratch>) {
    let arena = cx.arena();
    let now = (cx.now_secs() * 1e9) as u64;
    let mut scratch = cx.take_frame_scratch();
    arena.resolve(frame, SCRATCH_AHEAD, &mut scratch.addrs);
    (arena, now, scratch)
}

/// The tear-down of [`begin_frame`]: the scratch given back and the frame's forwarded and
/// punted packets counted.
#[inline(always)]
fn end_frame(cx: &mut Cx, scratch: Box<FrameScratch>, sent: Sent) {
    cx.put_frame_scratch(scratch);
    sent.count(cx);
}

/// Multi mode on a program's generated code: segment `k` (the generated code's ingress
/// phase `k`; the first also parses, the last also runs egress and compute) on every
/// packet of the frame, the packet state (`Generated::St`, a few hundred bytes) in the
/// side table by buffer index; `next` is the arc to the next segment's node
/// ([`seg_pass`]).
#[allow(clippy::too_many_arguments)]
pub fn frame_segment_generated<G: crate::gen::rt::Generated>(
    cx: &mut Cx,
    ts: &mut ThreadState,
    sh: &Shared,
    side: &mut Side,
    k: usize,
    next: Option<u16>,
    frame: &[BufIdx],
    nexts: &mut [u16],
) {
    let arena = cx.arena();
    let now = (cx.now_secs() * 1e9) as u64;
    let n = frame.len().min(FRAME_SIZE);
    let (frame, nexts) = (&frame[..n], &mut nexts[..n]);
    let Some(sts) = side
        .gen
        .as_mut()
        .and_then(|g| g.downcast_mut::<Vec<G::St>>())
        .filter(|v| frame.iter().all(|bi| (bi.0 as usize) < v.len()))
    else {
        // No states, another program's or too few: cannot happen (`Side::new` made one
        // per buffer of the pool at load for this program).
        for (nx, &bi) in nexts.iter_mut().zip(frame) {
            // SAFETY: exclusive ownership of the frame's indices, one view at a time.
            let b = unsafe { arena.buffer(bi) };
            b.hdr.error = cx.error(P4Counter::NotLoaded);
            *nx = P4Next::Drop as u16;
        }
        return;
    };
    let mut sent = Sent::default();
    seg_pass::<G>(cx, ts, sh, now, k, sts, frame, nexts, next, &mut sent);
    sent.count(cx);
}

/// How many packets ahead of the one it runs the staged single node ([`frame_staged`])
/// guesses the first table's key and looks it up (for a DIR-24-8 only prefetches its
/// first-level entry, [`prefetched`]): the lookup's loads have that many
/// packets' work to complete in.
pub const STAGE: usize = 4;

// The staged loop prefetches `STAGE + 2` packets ahead through the frame's resolved
// addresses, which hold `SCRATCH_AHEAD` entries past its end.
const _: () = assert!(STAGE + 2 < SCRATCH_AHEAD);

/// Single mode on a program's generated code, in stages, in one pass over the frame: at
/// packet `i`, the first ingress table's key of packet `i + STAGE` is guessed from its
/// bytes (`Generated::key_guess_buf`: the key's header fields where the parser puts them)
/// and looked up (a DIR-24-8: its first-level entry only prefetched, [`prefetched`]), so the lookup's cache misses overlap the packets in between; packet
/// `i` then runs its whole pipeline on its own guess (`packet_pre_buf`; after a prefetch,
/// the plain `packet_buf`, whose own lookup finds the entry in cache), which it uses when
/// the key it computes where the table is applied is the guessed one (a packet the guess
/// was wrong for, one whose table is not applied, or a short one, costs nothing but the
/// guess). [`frame_generated`] runs each packet's whole pipeline at once: one chain of
/// dependent loads after another. Runs when the generated code guesses
/// (`GenEntry::guess`) and the lookups miss the cache ([`stage_pays`]).
pub fn frame_staged<G: crate::gen::rt::Generated>(
    cx: &mut Cx,
    ts: &mut ThreadState,
    sh: &Shared,
    frame: &[BufIdx],
    nexts: &mut [u16],
) {
    let first = G::PRE.first().copied().flatten().map(usize::from);
    let table = first.and_then(|t| ts.tables.get(t));
    // Records of a large table miss the cache too: the guess prefetches its record (a
    // table whose entries share a few records keeps them in cache). Records in use, not
    // `recs.len()`, which only grows (freed records stay until reused).
    let big = table.is_some_and(|t| t.recs_in_use() >= PREFETCH_RECORDS);
    // A DIR-24-8, of any size, is not looked up ahead: the one pass only prefetches the
    // first-level entry of the key guessed `STAGE` packets ahead ([`prefetched`]: the
    // router's node 209.1 instructions a packet at 1 route, against 215.2 looking it up
    // ahead and carrying the result to the packet; 209.1 at 100k routes against 223.0
    // in two passes over groups of 32 packets, the group's lookups four at a time, with
    // as many cache misses by callgrind's simulation). Any other index is looked up
    // ahead, through the table.
    match table.and_then(|t| t.lpm32()).map(|l| l.table().clone()) {
        Some(l) => prefetched::<G>(cx, ts, sh, frame, nexts, l.entry_prefetch()),
        None => pipelined::<G>(cx, ts, sh, frame, nexts, first, big, |ts, k| {
            first
                .and_then(|t| ts.tables.get(t))
                .and_then(|t| t.lookup64(k))
        }),
    }
}

/// [`frame_staged`] on a DIR-24-8 first table (`pf`: its first level), in one
/// pass: at packet `i`, the first-level entry of packet `i + STAGE`'s guessed key is
/// prefetched (as `ip4-input` does for `ip4-lookup`), and packet `i` runs its whole
/// pipeline (`packet_buf`), whose lookup where the table is applied finds that entry in
/// cache. Nothing is looked up ahead, so there is no ring of guesses to carry and no guess
/// to compare with the key the packet computes (a wrong guess only wastes its prefetch).
/// Nor is the hit's action record prefetched: routes share records (100k routes to one
/// next hop read one), and a table of many records (direct counters: one per entry)
/// reads its record where the table is applied.
#[inline(never)]
fn prefetched<G: crate::gen::rt::Generated>(
    cx: &mut Cx,
    ts: &mut ThreadState,
    sh: &Shared,
    frame: &[BufIdx],
    nexts: &mut [u16],
    pf: sluice_fib::ip4::Ip4EntryPrefetch,
) {
    let (arena, now, scratch) = begin_frame(cx, frame);
    let addrs = &scratch.addrs;
    let mut sent = Sent::default();
    let ahead = |i: usize| {
        if let Some(&bi) = frame.get(i) {
            // SAFETY: exclusive ownership of the frame's indices, resolved into `addrs`
            // ([`begin_frame`]; `i` is below the frame's length); this view ends before any
            // other is made.
            let b = unsafe { arena.buffer_at(addrs, i, bi) };
            if let Some(k) = G::key_guess_buf(&b) {
                pf.prefetch(k as u32);
            }
        }
    };
    for j in 0..STAGE {
        ahead(j);
    }
    for (i, (nx, &bi)) in nexts.iter_mut().zip(frame).enumerate() {
        addrs.prefetch(i + STAGE + 2, true);
        ahead(i + STAGE);
        // SAFETY: as above; one view at a time.
        let mut b = unsafe { arena.buffer_at(addrs, i, bi) };
        let (len, rx) = (b.total_len() as u32, b.hdr.rx_if);
        let (o, pe) = G::packet_buf(ts, sh, now, &mut b, rx, len);
        parse_count(cx, pe);
        *nx = sent.next(cx, &mut b, o);
    }
    end_frame(cx, scratch, sent);
}

/// [`frame_staged`]'s pass with `look` as the first table's lookup.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn pipelined<G: crate::gen::rt::Generated>(
    cx: &mut Cx,
    ts: &mut ThreadState,
    sh: &Shared,
    frame: &[BufIdx],
    nexts: &mut [u16],
    first: Option<usize>,
    big: bool,
    look: impl Fn(&ThreadState, u64) -> Option<u32>,
) {
    let (arena, now, scratch) = begin_frame(cx, frame);
    let addrs = &scratch.addrs;
    let mut sent = Sent::default();
    let guess = |ts: &ThreadState, i: usize| {
        let &bi = frame.get(i)?;
        // SAFETY: exclusive ownership of the frame's indices, resolved into `addrs`
        // ([`begin_frame`]; `i` is below the frame's length); this view ends before any
        // other is made.
        let b = unsafe { arena.buffer_at(addrs, i, bi) };
        let k = G::key_guess_buf(&b)?;
        let id = look(ts, k);
        if big {
            if let Some(t) = first.and_then(|t| ts.tables.get(t)) {
                t.prefetch_rec(id);
            }
        }
        Some((k, id))
    };
    let packets = nexts.iter_mut().zip(frame);
    stage_ring!(ts, guess, None, packets, |i, (nx, &bi), pre| {
        addrs.prefetch(i + STAGE + 2, true);
    } {
        // SAFETY: as above; one view at a time.
        let mut b = unsafe { arena.buffer_at(addrs, i, bi) };
        let (len, rx) = (b.total_len() as u32, b.hdr.rx_if);
        let (o, pe) = G::packet_pre_buf(ts, sh, now, &mut b, rx, len, pre);
        parse_count(cx, pe);
        *nx = sent.next(cx, &mut b, o);
    });
    end_frame(cx, scratch, sent);
}

/// The staged loop's order ([`frame_staged`]): `guess($s, j)` for packets `0..STAGE`
/// first (into a ring of `STAGE` slots, each starting as `$none`), then for each packet
/// `$i` of `$packets` (bound to `$p`) `$first`, the guess of packet `$i + STAGE` into the
/// ring and `$body` with `$pre` the guess made for packet `$i` itself (`guess` answers for
/// indices past the frame too). A macro, so the loop is the one written out: 223.1
/// instructions per packet in the router's node at 1 route as before it was factored out
/// (a function taking closures, or the prefetch after the guess: 225–226).
macro_rules! stage_ring {
    (
        $s:ident, $guess:ident, $none:expr, $packets:expr,
        |$i:ident, $p:pat, $pre:ident| $first:block $body:block
    ) => {{
        let mut ring = [$none; STAGE];
        for (j, g) in ring.iter_mut().enumerate() {
            *g = $guess($s, j);
        }
        for ($i, $p) in $packets.enumerate() {
            $first
            let $pre = std::mem::replace(&mut ring[$i % STAGE], $guess($s, $i + STAGE));
            $body
        }
    }};
}
// Used above its definition, in `pipelined`.
use stage_ring;

/// One packet as [`frame_staged`] runs it (its key guessed and looked up, then
/// `packet_pre` on the guess), for tests; `packet` when the program does not guess.
pub fn packet_staged<G: crate::gen::rt::Generated>(
    ts: &mut ThreadState,
    sh: &Shared,
    now: u64,
    d: &mut [u8],
    inport: u32,
    plen: u32,
) -> (VOut, ParseEnd) {
    if !G::GUESS {
        return G::packet(ts, sh, now, d, inport, plen);
    }
    let first = G::PRE.first().copied().flatten().map(usize::from);
    let pre = G::key_guess(d).map(|k| {
        let t = first.and_then(|t| ts.tables.get(t));
        (k, t.and_then(|t| t.lookup64(k)))
    });
    G::packet_pre(ts, sh, now, d, inport, plen, pre)
}

/// [`packet_staged`] on a wrong guess: a key the packet's is not, paired with a miss, so
/// a packet that used it would take the first table's default action (tests: a guess is
/// used only for its own key).
pub fn packet_misguessed<G: crate::gen::rt::Generated>(
    ts: &mut ThreadState,
    sh: &Shared,
    now: u64,
    d: &mut [u8],
    inport: u32,
    plen: u32,
) -> (VOut, ParseEnd) {
    let pre = G::key_guess(d).map(|k| (!k, None));
    G::packet_pre(ts, sh, now, d, inport, plen, pre)
}

/// The ids of the first `n` keys in table `table` (none when it has no table): four at a
/// time into a DIR-24-8, so their cache misses overlap as in `ip4-lookup`, and, for a
/// table of many action records, a prefetch of each hit's record before the actions read it.
#[inline(always)]
fn lookup_batch(
    ts: &ThreadState,
    table: Option<u16>,
    keys: &[u64],
    ids: &mut [Option<u32>],
    n: usize,
) {
    let Some(t) = table.and_then(|t| ts.tables.get(t as usize)) else {
        return;
    };
    match t.lpm32() {
        Some(l) => {
            // The last chunk's keys past `n` are stale: looked up, never used.
            for (o, c) in ids
                .chunks_exact_mut(4)
                .zip(keys.chunks_exact(4))
                .take(n.div_ceil(4))
            {
                o.copy_from_slice(&l.lookup_x4([c[0], c[1], c[2], c[3]].map(|x| x as u32)));
            }
        }
        None => {
            for (o, &x) in ids.iter_mut().zip(&keys[..n]) {
                *o = t.lookup64(x);
            }
        }
    }
    if t.recs_in_use() >= PREFETCH_RECORDS {
        // Records of a large table miss the cache too: start loading the frame's (a table
        // whose entries share a few records keeps them in cache). Records in use, not
        // `recs.len()`, which only grows (freed records stay until reused).
        for &id in &ids[..n] {
            t.prefetch_rec(id);
        }
    }
}

/// Segment `k` of a generated program on the packets of `frame`, the state of buffer `bi`
/// at `sts[bi]` (the per-buffer side table), the next arc of each into `nexts` (`next`
/// when the pipeline continues past the segment).
///
/// Three passes: every packet's key of the segment's table (`seg_key`; the first segment
/// parses here); the lookups ([`lookup_batch`]); then each packet's phase (`seg_run`) on
/// its entry.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn seg_pass<G: crate::gen::rt::Generated>(
    cx: &mut Cx,
    ts: &mut ThreadState,
    sh: &Shared,
    now: u64,
    k: usize,
    sts: &mut [G::St],
    frame: &[BufIdx],
    nexts: &mut [u16],
    next: Option<u16>,
    sent: &mut Sent,
) {
    // The frame's buffer addresses, resolved once (see `begin_frame`).
    let (arena, frame, scratch) = cx.resolve_frame(frame);
    let n = frame.len();
    let addrs = &scratch.addrs;
    let mut keys = [0u64; FRAME_SIZE];
    for (i, (key, &bi)) in keys.iter_mut().zip(frame).enumerate() {
        addrs.prefetch(i + 2, true);
        if let Some(s) = frame.get(i + 2).and_then(|a| sts.get(a.0 as usize)) {
            sluice_infra::prefetch(s);
        }
        // SAFETY: exclusive ownership of the frame's indices, resolved into `addrs`
        // above; one view at a time.
        let mut b = unsafe { arena.buffer_at(addrs, i, bi) };
        let (len, rx) = (b.total_len() as u32, b.hdr.rx_if);
        let s = &mut sts[bi.0 as usize];
        *key = G::seg_key(ts, sh, now, k, s, b.data_mut(), rx, len);
    }
    let mut ids = [None; FRAME_SIZE];
    lookup_batch(ts, G::PRE.get(k).copied().flatten(), &keys, &mut ids, n);
    for (i, ((nx, &bi), &id)) in nexts.iter_mut().zip(frame).zip(&ids).enumerate() {
        // SAFETY: as above.
        let mut b = unsafe { arena.buffer_at(addrs, i, bi) };
        let s = &mut sts[bi.0 as usize];
        let (o, pe) = G::seg_run(ts, sh, k, s, b.data_mut(), id);
        if k == 0 {
            parse_count(cx, pe);
        }
        *nx = match (o, next) {
            (Some(o), _) => sent.next(cx, &mut b, o),
            (None, Some(nx)) => nx,
            (None, None) => {
                b.hdr.error = cx.error(P4Counter::Dropped);
                P4Next::Drop as u16
            }
        };
    }
    cx.put_frame_scratch(scratch);
}

/// The forwarded and punted packets of a frame run by the vector executor or generated
/// code, counted once per frame.
#[derive(Default)]
struct Sent {
    fwd: u64,
    punt: u64,
}

impl Sent {
    /// The next arc of a packet whose pipeline ended with `o` (`tx_if` set when sent to a
    /// port, `error` when dropped).
    #[inline(always)]
    fn next(&mut self, cx: &mut Cx, b: &mut Buffer<'_>, o: VOut) -> u16 {
        match o {
            VOut::Drop => {
                b.hdr.error = cx.error(P4Counter::Dropped);
                P4Next::Drop as u16
            }
            VOut::Port(p) => {
                b.hdr.tx_if = p;
                self.fwd += 1;
                P4Next::Output as u16
            }
            VOut::Punt => {
                self.punt += 1;
                P4Next::Punt as u16
            }
        }
    }

    /// Adds the frame's counts to the node's counters.
    fn count(self, cx: &mut Cx) {
        if self.fwd > 0 {
            cx.count(P4Counter::Forwarded, self.fwd);
        }
        if self.punt > 0 {
            cx.count(P4Counter::Punted, self.punt);
        }
    }
}

impl NodeFn for P4Node {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        let frame = &frame[..frame.len().min(FRAME_SIZE)];
        let Some(st) = self.st.as_mut() else {
            let arena = cx.arena();
            for (i, &bi) in frame.iter().enumerate() {
                // SAFETY: exclusive ownership of the frame's indices, one view at a time.
                let b = unsafe { arena.buffer(bi) };
                b.hdr.error = cx.error(P4Counter::NotLoaded);
                self.nexts[i] = P4Next::Drop as u16;
            }
            cx.enqueue_to_next(frame, &self.nexts[..frame.len()]);
            return;
        };
        let mode = st.loaded.mode;
        if self.seg > 0 {
            return self.frame_segment(cx, frame);
        }
        match mode {
            Mode::Single => self.frame_single(cx, frame),
            Mode::Multi => self.frame_segment(cx, frame),
            Mode::Auto => {
                if st.seg_next.is_some() && split_pays(&st.loaded, &st.ts) {
                    st.auto.split += 1;
                    self.frame_segment(cx, frame);
                } else {
                    st.auto.single += 1;
                    self.frame_single(cx, frame);
                }
            }
        }
    }

    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

fn has_apply(s: &S) -> bool {
    match s {
        S::Apply(_) => true,
        S::If(_, a, b) => a.iter().chain(b).any(has_apply),
        _ => false,
    }
}

/// Prepares a program for multi-node mode: a top-level `if` whose branches apply several
/// tables is split so each table can get its own node ([`split_stmts`]).
pub fn split_for_multi(p: &mut Program) {
    let body = std::mem::take(&mut p.ingress);
    p.ingress = split_stmts(body, &mut p.meta_slots);
}

/// A control's statements with every top-level `if` whose branches apply several tables
/// split: the condition is evaluated once into a hidden metadata slot (taken from
/// `meta_slots`) and every group of statements holding one table is guarded by it.
pub fn split_stmts(body: Vec<S>, meta_slots: &mut usize) -> Vec<S> {
    let mut out = Vec::new();
    for s in body {
        match s {
            S::If(c, a, b)
                if a.iter().chain(&b).filter(|x| has_apply(x)).count() >= 2
                    && *meta_slots < META_MAX =>
            {
                let slot = *meta_slots as u16;
                *meta_slots += 1;
                out.push(S::Set(Lv::M(slot, 1), c));
                for (branch, guard) in [
                    (a, E::M(slot)),
                    (b, E::Un(Un::Not, Box::new(E::M(slot)), 1)),
                ] {
                    let mut group: Vec<S> = Vec::new();
                    for x in branch {
                        if has_apply(&x) && group.iter().any(has_apply) {
                            out.push(S::If(guard.clone(), std::mem::take(&mut group), Vec::new()));
                        }
                        group.push(x);
                    }
                    if !group.is_empty() {
                        out.push(S::If(guard.clone(), group, Vec::new()));
                    }
                }
            }
            s => out.push(s),
        }
    }
    out
}

/// Cuts the ingress statements into segments ([`segments_of`]).
pub fn segments(p: &Program) -> Vec<(usize, usize)> {
    segments_of(&p.ingress)
}

/// Cuts a control's statements into segments: each top-level statement that applies a
/// table starts a new segment once the current one holds a table.
pub fn segments_of(body: &[S]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, s) in body.iter().enumerate() {
        if has_apply(s) && body[start..i].iter().any(has_apply) && out.len() < 63 {
            out.push((start, i));
            start = i;
        }
    }
    out.push((start, body.len()));
    out
}

#[cfg(test)]
mod tests {
    use super::{Mode, Side};

    /// Only multi mode allocates packet states: auto mode runs every frame in one node
    /// (`split_pays`), so its side table stays empty even with generated segments.
    #[test]
    fn side_tables_only_where_frames_can_split() {
        let g = crate::generated::ALL
            .iter()
            .find(|g| g.segs > 1)
            .expect("a generated module with segments");
        let empty = |s: &Side| s.ctxs.is_empty() && s.gen.is_none();
        assert!(empty(&Side::new(Mode::Auto, None, 2, 8)));
        assert!(empty(&Side::new(Mode::Auto, Some(g), g.segs + 1, 8)));
        assert!(empty(&Side::new(Mode::Auto, None, 1, 8)));
        assert!(empty(&Side::new(Mode::Single, Some(g), g.segs, 8)));
        assert!(empty(&Side::new(Mode::Auto, Some(g), g.segs, 8)));
        assert!(Side::new(Mode::Multi, Some(g), g.segs, 8).gen.is_some());
        assert_eq!(Side::new(Mode::Multi, None, 2, 8).ctxs.len(), 8);
    }

    /// The staged loop runs each packet on the guess made for that packet, each guess
    /// made `STAGE` packets ahead of its packet, over frames shorter and longer than a
    /// stage.
    #[test]
    fn stage_ring_pairs_each_packet_with_its_own_guess() {
        use super::STAGE;
        use std::cell::RefCell;
        for n in [0, 1, STAGE - 1, STAGE, STAGE + 1, 3 * STAGE + 2, 256] {
            // The packets guessed for, in order, and the packets run.
            let guessed = RefCell::new(Vec::new());
            let mut ran = Vec::new();
            let s = &mut ();
            let guess = |_: &mut (), j: usize| {
                guessed.borrow_mut().push(j);
                Some(j)
            };
            stage_ring!(s, guess, None, 0..n, |i, p, pre| {} {
                assert_eq!(i, p);
                assert_eq!(pre, Some(i), "packet {i} of {n} ran on another's guess");
                // Packet `i + STAGE`'s guess is made before packet `i` runs.
                assert_eq!(guessed.borrow().len(), i + STAGE + 1, "{n}: at {i}");
                ran.push(i);
            });
            assert_eq!(ran, (0..n).collect::<Vec<_>>());
            assert_eq!(guessed.into_inner(), (0..n + STAGE).collect::<Vec<_>>());
        }
    }
}
