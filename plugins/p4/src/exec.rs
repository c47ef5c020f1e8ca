//! The executor: runs a compiled [`Program`] on one packet.
//!
//! A packet's state is one [`Ctx`]: the header area (wire format, every header instance at
//! a fixed offset), the metadata slots and the validity bits. The parser copies extracted
//! headers from the packet into the header area; the deparser writes the valid emitted
//! headers back in front of the unparsed payload (moving the packet start into the headroom
//! or forward when the header stack grew or shrank).
//!
//! Data-plane state and several workers:
//! - tables, `counter` and direct counters are per thread ([`ThreadState`]), summed when read;
//! - `register` cells are shared `AtomicU64`s (each read and write is atomic; a read-modify-write
//!   sequence in P4 is not, as in BMv2 without `@atomic`);
//! - `meter` cells are shared: two GCRA buckets (peak, committed; RFC 2698 colour-blind
//!   trTCM) updated with compare-and-swap, so the configured rate holds across workers.

use crate::code::{run, Code, Step};
use crate::ir::*;
use crate::table::{TableError, TableRt};
use std::sync::atomic::{AtomicU64, Ordering};

/// One packet's state.
#[derive(Clone)]
pub struct Ctx {
    pub hdr: [u8; HDR_MAX],
    pub meta: [u64; META_MAX],
    pub valid: u64,
    /// Bytes of the packet the parser consumed.
    pub pos: u32,
    /// Ingress ended by `exit` (multi-node: later segments skip).
    pub exited: bool,
}

impl Default for Ctx {
    fn default() -> Self {
        Ctx {
            hdr: [0; HDR_MAX],
            meta: [0; META_MAX],
            valid: 0,
            pos: 0,
            exited: false,
        }
    }
}

/// Meter colours (v1model).
pub const GREEN: u64 = 0;
pub const YELLOW: u64 = 1;
pub const RED: u64 = 2;

/// One meter cell: rates in units per second and bursts in units (0 rate: not configured,
/// every packet green), buckets as GCRA theoretical arrival times in nanoseconds.
#[derive(Default)]
pub struct MeterCell {
    /// ns per unit (peak, committed); 0 = unconfigured.
    pub pns: AtomicU64,
    pub cns: AtomicU64,
    /// Burst tolerance in ns (peak, committed).
    pub ptol: AtomicU64,
    pub ctol: AtomicU64,
    ptat: AtomicU64,
    ctat: AtomicU64,
}

/// Meter configuration (rates in packets or bytes per second, bursts in packets or bytes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MeterConf {
    pub cir: f64,
    pub cburst: u64,
    pub pir: f64,
    pub pburst: u64,
}

impl MeterCell {
    /// Configures the cell (resets its buckets to full).
    pub fn set(&self, c: &MeterConf) {
        let ns = |r: f64| {
            if r <= 0.0 {
                0
            } else {
                (1e9 / r).max(1.0) as u64
            }
        };
        let (pn, cn) = (ns(c.pir), ns(c.cir));
        self.pns.store(pn, Ordering::Relaxed);
        self.cns.store(cn, Ordering::Relaxed);
        self.ptol
            .store(pn.saturating_mul(c.pburst), Ordering::Relaxed);
        self.ctol
            .store(cn.saturating_mul(c.cburst), Ordering::Relaxed);
        self.ptat.store(0, Ordering::Relaxed);
        self.ctat.store(0, Ordering::Relaxed);
    }

    /// Takes `units` from a GCRA bucket if they conform.
    fn take(tat: &AtomicU64, per: u64, tol: u64, units: u64, now: u64) -> bool {
        let inc = per.saturating_mul(units);
        let mut cur = tat.load(Ordering::Relaxed);
        loop {
            let base = cur.max(now);
            let new = base.saturating_add(inc);
            if new.saturating_sub(now) > tol {
                return false;
            }
            match tat.compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(x) => cur = x,
            }
        }
    }

    /// The colour of a packet of `units` at time `now` (ns).
    pub fn execute(&self, units: u64, now: u64) -> u64 {
        let pn = self.pns.load(Ordering::Relaxed);
        if pn == 0 {
            return GREEN;
        }
        let (pt, cn, ct) = (
            self.ptol.load(Ordering::Relaxed),
            self.cns.load(Ordering::Relaxed),
            self.ctol.load(Ordering::Relaxed),
        );
        // Peak bucket first: no conformance there is red, nothing taken.
        if !Self::take(&self.ptat, pn, pt, units, now) {
            return RED;
        }
        if cn != 0 && !Self::take(&self.ctat, cn, ct, units, now) {
            return YELLOW;
        }
        GREEN
    }
}

/// State shared by every worker: registers and meters.
pub struct Shared {
    pub registers: Vec<Box<[AtomicU64]>>,
    pub meters: Vec<Box<[MeterCell]>>,
}

impl Shared {
    /// Zeroed registers, unconfigured meters.
    pub fn new(p: &Program) -> Shared {
        Shared {
            registers: p
                .registers
                .iter()
                .map(|r| (0..r.size).map(|_| AtomicU64::new(0)).collect())
                .collect(),
            meters: p
                .meters
                .iter()
                .map(|m| (0..m.size).map(|_| MeterCell::default()).collect())
                .collect(),
        }
    }
}

/// One worker's tables and counters.
pub struct ThreadState {
    pub tables: Vec<TableRt>,
    /// Per counter, per index: (packets, bytes).
    pub counters: Vec<Box<[[u64; 2]]>>,
}

impl ThreadState {
    /// Tables with their const entries, zeroed counters.
    pub fn new(p: &Program) -> Result<ThreadState, TableError> {
        Ok(ThreadState {
            tables: p
                .tables
                .iter()
                .map(|t| TableRt::new(t, &p.actions, p.opts.resolved))
                .collect::<Result<_, _>>()?,
            counters: p
                .counters
                .iter()
                .map(|c| vec![[0u64; 2]; c.size as usize].into_boxed_slice())
                .collect(),
        })
    }
}

/// How the parser ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseEnd {
    Accept,
    /// Rejected with this error code (v1model: the packet continues to ingress with
    /// `standard_metadata.parser_error` set).
    Error(u64),
    /// More than [`PARSER_STEPS_MAX`] transitions in a looping parser: dropped.
    Loop,
}

/// What becomes of a packet after the pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Send out of this port (sw_if_index).
    Port(u32),
    /// egress_spec was the drop port (mark_to_drop).
    Drop,
    /// Sent to the CPU port.
    Punt,
}

/// Control flow out of a statement list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Next,
    Return,
    Exit,
}

/// The executor for one frame on one thread.
pub struct Exec<'a> {
    pub prog: &'a Program,
    /// The program compiled to closures ([`Code::new`] of `prog`).
    pub code: &'a Code,
    pub ts: &'a mut ThreadState,
    pub shared: &'a Shared,
    /// Current time for meters (ns).
    pub now_ns: u64,
    /// Length of the current packet (for byte counters and meters).
    pub pkt_len: u64,
}

#[inline(always)]
fn be_load(b: &[u8], off: usize, n: usize) -> u64 {
    let mut v = 0u64;
    for &x in &b[off..off + n] {
        v = (v << 8) | x as u64;
    }
    v
}

#[inline(always)]
fn be_store(b: &mut [u8], off: usize, n: usize, v: u64) {
    let mut v = v;
    for x in b[off..off + n].iter_mut().rev() {
        *x = v as u8;
        v >>= 8;
    }
}

#[inline(always)]
pub(crate) fn hload(hdr: &[u8; HDR_MAX], off: usize, k: HKind) -> u64 {
    match k {
        HKind::B8 => hdr[off] as u64,
        HKind::B16 => u16::from_be_bytes([hdr[off], hdr[off + 1]]) as u64,
        HKind::B32 => {
            u32::from_be_bytes([hdr[off], hdr[off + 1], hdr[off + 2], hdr[off + 3]]) as u64
        }
        HKind::Bits { n, shift, mask } => (be_load(hdr, off, n as usize) >> shift) & mask,
    }
}

#[inline(always)]
pub(crate) fn hstore(hdr: &mut [u8; HDR_MAX], off: usize, k: HKind, v: u64) {
    match k {
        HKind::B8 => hdr[off] = v as u8,
        HKind::B16 => hdr[off..off + 2].copy_from_slice(&(v as u16).to_be_bytes()),
        HKind::B32 => hdr[off..off + 4].copy_from_slice(&(v as u32).to_be_bytes()),
        HKind::Bits { n, shift, mask } => {
            let n = n as usize;
            let old = be_load(hdr, off, n);
            let m = mask << shift;
            be_store(hdr, off, n, (old & !m) | ((v & mask) << shift));
        }
    }
}

impl Exec<'_> {
    /// Resets the per-packet state and sets the ingress standard metadata.
    #[inline]
    pub fn begin(&self, c: &mut Ctx, in_port: u32, len: u32) {
        c.meta[..self.prog.meta_slots].fill(0);
        // An invalid header's fields read 0, never a previous packet's bytes.
        c.hdr[..self.prog.hdr_bytes.min(HDR_MAX)].fill(0);
        c.valid = 0;
        c.pos = 0;
        c.exited = false;
        c.meta[self.prog.std.ingress_port as usize] = in_port as u64 & 0x1ff;
        c.meta[self.prog.std.packet_length as usize] = len as u64;
    }

    /// Runs the parser over `data`.
    pub fn parse(&mut self, c: &mut Ctx, data: &[u8]) -> ParseEnd {
        let prog = self.prog;
        let mut st = prog.start;
        let mut steps = 0u32;
        loop {
            steps += 1;
            if prog.parser_loops && steps > PARSER_STEPS_MAX {
                return ParseEnd::Loop;
            }
            let s = &prog.states[st as usize];
            let code = self.code;
            let sc = &code.states[st as usize];
            for x in sc.steps.iter() {
                match x {
                    Step::Extract(i, o, l) => {
                        let (o, l, pos) = (*o as usize, *l as usize, c.pos as usize);
                        if pos + l > data.len() {
                            return self.parse_error(c, ERR_PACKET_TOO_SHORT);
                        }
                        c.hdr[o..o + l].copy_from_slice(&data[pos..pos + l]);
                        c.valid |= 1 << i;
                        c.pos += l as u32;
                    }
                    Step::Stmt(f) => {
                        f(self, c, &[]);
                    }
                }
            }
            let t = match &s.trans {
                Trans::Goto(t) => *t,
                Trans::Select { cases, .. } => {
                    let mut kv = [0u64; 8];
                    for (v, k) in kv.iter_mut().zip(sc.keys.iter()) {
                        *v = k(self, c, &[]);
                    }
                    let hit = cases
                        .iter()
                        .find(|(ks, _)| ks.iter().zip(&kv).all(|(k, &v)| k.matches(v)));
                    match hit {
                        Some((_, t)) => *t,
                        None => return self.parse_error(c, ERR_NO_MATCH),
                    }
                }
            };
            match t {
                Target::Accept => return ParseEnd::Accept,
                Target::Reject => {
                    // An explicit reject without an error code is NoError in P4, but BMv2
                    // reports it; keep NoError and say Error(0).
                    return ParseEnd::Error(ERR_NO_ERROR);
                }
                Target::State(n) => st = n,
            }
        }
    }

    fn parse_error(&self, c: &mut Ctx, code: u64) -> ParseEnd {
        c.meta[self.prog.std.parser_error as usize] = code;
        ParseEnd::Error(code)
    }

    /// Runs ingress statements `[from, to)` (multi-node segments); returns false on exit.
    pub fn ingress_range(&mut self, c: &mut Ctx, from: usize, to: usize) {
        if c.exited {
            return;
        }
        let code = self.code;
        if run(&code.ingress[from..to], self, c, &[]) != Flow::Next {
            c.exited = true;
        }
    }

    /// Verify checksum control.
    pub fn verify(&mut self, c: &mut Ctx) {
        let code = self.code;
        run(&code.verify, self, c, &[]);
    }

    /// After ingress: the traffic manager's decision, egress, compute checksum.
    pub fn finish(&mut self, c: &mut Ctx) -> Verdict {
        let (prog, code) = (self.prog, self.code);
        let es = c.meta[prog.std.egress_spec as usize];
        if es == DROP_PORT {
            return Verdict::Drop;
        }
        c.meta[prog.std.egress_port as usize] = es;
        run(&code.egress, self, c, &[]);
        if c.meta[prog.std.egress_spec as usize] == DROP_PORT {
            return Verdict::Drop;
        }
        run(&code.compute, self, c, &[]);
        if es == CPU_PORT {
            Verdict::Punt
        } else {
            Verdict::Port(es as u32)
        }
    }

    /// The whole pipeline after `begin`: parse, verify, ingress, egress, compute; the
    /// verdict and how the parser ended (a parser error is counted by the caller, the
    /// packet continued: v1model).
    pub fn pipeline(&mut self, c: &mut Ctx, data: &[u8]) -> Result<(Verdict, ParseEnd), ParseEnd> {
        let pe = self.parse(c, data);
        if pe == ParseEnd::Loop {
            return Err(pe);
        }
        self.verify(c);
        let n = self.prog.ingress.len();
        self.ingress_range(c, 0, n);
        Ok((self.finish(c), pe))
    }
}

#[inline(always)]
pub(crate) fn fold(mut acc: u32) -> u32 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc
}

/// Bytes the deparser emits for the current validity bits.
#[inline]
pub fn emit_len(p: &Program, c: &Ctx) -> usize {
    p.deparse
        .iter()
        .filter(|&&i| c.valid & (1 << i) != 0)
        .map(|&i| p.headers[i as usize].len as usize)
        .sum()
}

/// Writes the emitted headers to the start of `out` (which holds at least `emit_len` bytes).
#[inline]
pub fn emit(p: &Program, c: &Ctx, out: &mut [u8]) {
    let mut o = 0;
    for &i in &p.deparse {
        if c.valid & (1 << i) != 0 {
            let h = &p.headers[i as usize];
            let (s, l) = (h.off as usize, h.len as usize);
            out[o..o + l].copy_from_slice(&c.hdr[s..s + l]);
            o += l;
        }
    }
}

/// Deparses onto a plain byte vector holding the original packet (tests, the reference
/// model): the emitted headers, then the payload after the parsed bytes.
pub fn deparse_vec(p: &Program, c: &Ctx, pkt: &[u8]) -> Vec<u8> {
    let n = emit_len(p, c);
    let mut out = vec![0u8; n];
    emit(p, c, &mut out);
    out.extend_from_slice(&pkt[(c.pos as usize).min(pkt.len())..]);
    out
}

/// What the pipeline did with one packet (for tests and the reference model).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Sent out of a port with these bytes.
    Out(u32, Vec<u8>),
    /// Punted with these bytes.
    Punt(Vec<u8>),
    /// Dropped by the program (mark_to_drop / drop port).
    Drop,
    /// Dropped: the parser looped more than [`PARSER_STEPS_MAX`] steps.
    ParserLoop,
}

/// Runs one packet through the program on plain bytes.
pub fn simulate(
    prog: &Program,
    ts: &mut ThreadState,
    shared: &Shared,
    pkt: &[u8],
    in_port: u32,
) -> Outcome {
    simulate_parse(prog, ts, shared, pkt, in_port).0
}

/// [`simulate`], with how the parser ended ([`ParseEnd::Loop`] for a looping parser).
pub fn simulate_parse(
    prog: &Program,
    ts: &mut ThreadState,
    shared: &Shared,
    pkt: &[u8],
    in_port: u32,
) -> (Outcome, ParseEnd) {
    let mut c = Box::<Ctx>::default();
    let code = Code::new(prog);
    let mut x = Exec {
        prog,
        code: &code,
        ts,
        shared,
        now_ns: 0,
        pkt_len: pkt.len() as u64,
    };
    x.begin(&mut c, in_port, pkt.len() as u32);
    match x.pipeline(&mut c, pkt) {
        Err(_) => (Outcome::ParserLoop, ParseEnd::Loop),
        Ok((Verdict::Drop, pe)) => (Outcome::Drop, pe),
        Ok((Verdict::Punt, pe)) => (Outcome::Punt(deparse_vec(prog, &c, pkt)), pe),
        Ok((Verdict::Port(p), pe)) => (Outcome::Out(p, deparse_vec(prog, &c, pkt)), pe),
    }
}
