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

use crate::ir::*;
use crate::table::{EntryRt, TableError, TableRt};
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
                .map(|t| TableRt::new(t, &p.actions))
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
#[derive(Clone, Copy, PartialEq, Eq)]
enum Flow {
    Next,
    Return,
    Exit,
}

/// The executor for one frame on one thread.
pub struct Exec<'a> {
    pub prog: &'a Program,
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
fn hload(hdr: &[u8; HDR_MAX], off: usize, k: HKind) -> u64 {
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
fn hstore(hdr: &mut [u8; HDR_MAX], off: usize, k: HKind, v: u64) {
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
    #[inline]
    pub fn eval(&self, c: &Ctx, p: &[u64], e: &E) -> u64 {
        match e {
            E::Const(v) => *v,
            E::M(s) => c.meta[*s as usize],
            E::MI(i, s) => c.meta[(self.prog.meta_bases[*i as usize] + *s) as usize],
            E::H(a) => hload(&c.hdr, a.off as usize, a.kind),
            E::HI(i, a) => hload(
                &c.hdr,
                (self.prog.hdr_bases[*i as usize] + a.off) as usize,
                a.kind,
            ),
            E::Valid(i) => (c.valid >> *i) & 1,
            E::Param(i) => p.get(*i as usize).copied().unwrap_or(0),
            E::Un(op, x, m) => {
                let v = self.eval(c, p, x);
                match op {
                    Un::Not => (v == 0) as u64,
                    Un::BitNot => !v & m,
                    Un::Neg => v.wrapping_neg() & m,
                }
            }
            E::Bin(op, a, b, m) => {
                // Short-circuit the logical operators.
                match op {
                    Bin::LAnd => (self.eval(c, p, a) != 0 && self.eval(c, p, b) != 0) as u64,
                    Bin::LOr => (self.eval(c, p, a) != 0 || self.eval(c, p, b) != 0) as u64,
                    _ => crate::compile::eval_bin(*op, self.eval(c, p, a), self.eval(c, p, b), *m),
                }
            }
            E::Slice(x, sh, m) => (self.eval(c, p, x) >> sh) & m,
            E::Concat(a, b, wb) => (self.eval(c, p, a) << wb) | self.eval(c, p, b),
            E::Mux(x, a, b) => {
                if self.eval(c, p, x) != 0 {
                    self.eval(c, p, a)
                } else {
                    self.eval(c, p, b)
                }
            }
        }
    }

    fn load_lv(&self, c: &Ctx, lv: &Lv) -> u64 {
        match lv {
            Lv::M(s, _) => c.meta[*s as usize],
            Lv::MI(i, s, _) => c.meta[(self.prog.meta_bases[*i as usize] + *s) as usize],
            Lv::H(a) => hload(&c.hdr, a.off as usize, a.kind),
            Lv::HI(i, a) => hload(
                &c.hdr,
                (self.prog.hdr_bases[*i as usize] + a.off) as usize,
                a.kind,
            ),
            Lv::Slice(x, sh, m) => (self.load_lv(c, x) >> sh) & m,
        }
    }

    #[inline]
    fn store(&self, c: &mut Ctx, lv: &Lv, v: u64) {
        match lv {
            Lv::M(s, m) => c.meta[*s as usize] = v & m,
            Lv::MI(i, s, m) => c.meta[(self.prog.meta_bases[*i as usize] + *s) as usize] = v & m,
            Lv::H(a) => hstore(&mut c.hdr, a.off as usize, a.kind, v),
            Lv::HI(i, a) => hstore(
                &mut c.hdr,
                (self.prog.hdr_bases[*i as usize] + a.off) as usize,
                a.kind,
                v,
            ),
            Lv::Slice(x, sh, m) => {
                let old = self.load_lv(c, x);
                let mm = m << sh;
                self.store(c, x, (old & !mm) | ((v & m) << sh));
            }
        }
    }

    fn run(&mut self, c: &mut Ctx, p: &[u64], body: &[S]) -> Flow {
        for s in body {
            let f = self.stmt(c, p, s);
            if f != Flow::Next {
                return f;
            }
        }
        Flow::Next
    }

    fn call(&mut self, c: &mut Ctx, a: u16, params: &[u64]) -> Flow {
        let prog = self.prog;
        match self.run(c, params, &prog.actions[a as usize].body) {
            Flow::Exit => Flow::Exit,
            _ => Flow::Next, // `return` ends the action only
        }
    }

    fn stmt(&mut self, c: &mut Ctx, p: &[u64], s: &S) -> Flow {
        match s {
            S::Set(lv, e) => {
                let v = self.eval(c, p, e);
                self.store(c, lv, v);
            }
            S::Extract(_) => {} // handled by the parser loop
            S::SetValid(i) => c.valid |= 1 << i,
            S::SetInvalid(i) => c.valid &= !(1 << i),
            S::If(e, a, b) => {
                return if self.eval(c, p, e) != 0 {
                    self.run(c, p, a)
                } else {
                    self.run(c, p, b)
                }
            }
            S::Apply(ap) => return self.apply(c, p, ap),
            S::Call(a, args) => {
                let mut v = [0u64; PARAMS_MAX];
                for (i, e) in args.iter().enumerate().take(PARAMS_MAX) {
                    v[i] = self.eval(c, p, e);
                }
                return self.call(c, *a, &v[..args.len().min(PARAMS_MAX)]);
            }
            S::Drop => c.meta[self.prog.std.egress_spec as usize] = DROP_PORT,
            S::Exit => return Flow::Exit,
            S::Return => return Flow::Return,
            S::Count(k, e) => {
                let i = self.eval(c, p, e) as usize;
                let len = self.pkt_len;
                if let Some(x) = self.ts.counters[*k as usize].get_mut(i) {
                    x[0] += 1;
                    x[1] += len;
                }
            }
            S::RegRead(r, lv, e) => {
                let i = self.eval(c, p, e) as usize;
                let v = self.shared.registers[*r as usize]
                    .get(i)
                    .map_or(0, |x| x.load(Ordering::Relaxed));
                self.store(c, lv, v);
            }
            S::RegWrite(r, ei, ev) => {
                let i = self.eval(c, p, ei) as usize;
                let v = self.eval(c, p, ev) & mask(self.prog.registers[*r as usize].width);
                if let Some(x) = self.shared.registers[*r as usize].get(i) {
                    x.store(v, Ordering::Relaxed);
                }
            }
            S::Meter(m, ei, lv) => {
                let i = self.eval(c, p, ei) as usize;
                let units = if self.prog.meters[*m as usize].bytes {
                    self.pkt_len
                } else {
                    1
                };
                let col = self.shared.meters[*m as usize]
                    .get(i)
                    .map_or(GREEN, |x| x.execute(units, self.now_ns));
                self.store(c, lv, col);
            }
            S::Csum(cs) => self.csum(c, p, cs),
        }
        Flow::Next
    }

    #[inline(never)]
    fn apply(&mut self, c: &mut Ctx, p: &[u64], ap: &Apply) -> Flow {
        let prog = self.prog;
        let t = &prog.tables[ap.table as usize];
        let mut vals = [0u64; 16];
        let n = t.keys.len().min(16);
        for (v, k) in vals.iter_mut().zip(&t.keys) {
            *v = self.eval(c, p, &k.e);
        }
        let tr = &mut self.ts.tables[ap.table as usize];
        let id = if n == 0 {
            None
        } else {
            tr.lookup(tr.key_of(&vals[..n]))
        };
        let hit = id.is_some();
        let len = self.pkt_len;
        let (action, params) = match id {
            Some(id) => {
                if t.direct_counter.is_some() {
                    let d = &mut tr.direct[id as usize];
                    d[0] += 1;
                    d[1] += len;
                }
                let e: &EntryRt = &tr.entries[id as usize];
                if prog.opts.resolved {
                    (e.action, e.params)
                } else {
                    // Non-resolved: the table-local slot and the parameter pool.
                    let a = t.actions[e.slot as usize];
                    let mut ps = [0u64; PARAMS_MAX];
                    let o = e.pool_off as usize;
                    let np = e.nparams as usize;
                    ps[..np].copy_from_slice(&tr.pool[o..o + np]);
                    (a, ps)
                }
            }
            None => {
                tr.miss[0] += 1;
                tr.miss[1] += len;
                (tr.default.action, tr.default.params)
            }
        };
        let np = prog.actions[action as usize].params.len();
        if self.call(c, action, &params[..np]) == Flow::Exit {
            return Flow::Exit;
        }
        match &ap.arms {
            Arms::None => Flow::Next,
            Arms::Hit(h, m) => self.run(c, p, if hit { h } else { m }),
            Arms::Switch {
                by_action,
                bodies,
                default,
            } => match by_action
                .get(action as usize)
                .copied()
                .flatten()
                .or(*default)
            {
                Some(b) => self.run(c, p, &bodies[b as usize]),
                None => Flow::Next,
            },
        }
    }

    #[inline(never)]
    fn csum(&mut self, c: &mut Ctx, p: &[u64], cs: &Csum) {
        if self.eval(c, p, &cs.cond) == 0 {
            return;
        }
        let sum = match &cs.src {
            CsumSrc::Header { inst, dst_off } => {
                let h = &self.prog.headers[*inst as usize];
                let (o, l, d) = (h.off as usize, h.len as usize, *dst_off as usize);
                let mut acc = 0u32;
                let b = &c.hdr[o..o + l];
                let mut i = 0;
                while i + 1 < l {
                    if i != d {
                        acc += u16::from_be_bytes([b[i], b[i + 1]]) as u32;
                    }
                    i += 2;
                }
                if i < l {
                    acc += (b[i] as u32) << 8;
                }
                fold(acc)
            }
            CsumSrc::Fields(fs) => {
                // Concatenate into 16-bit words.
                let mut acc = 0u32;
                let mut word = 0u64;
                let mut bits = 0u32;
                for (e, w) in fs {
                    let v = self.eval(c, p, e);
                    let mut w = *w as u32;
                    while w > 0 {
                        let take = w.min(16 - bits);
                        let chunk = (v >> (w - take)) & ((1u64 << take) - 1);
                        word = (word << take) | chunk;
                        bits += take;
                        w -= take;
                        if bits == 16 {
                            acc += word as u32;
                            word = 0;
                            bits = 0;
                        }
                    }
                }
                if bits > 0 {
                    acc += (word << (16 - bits)) as u32;
                }
                fold(acc)
            }
        };
        let ck = !sum & 0xffff;
        if cs.verify {
            if self.eval(c, p, &cs.dst_e) != ck as u64 {
                c.meta[cs.err_slot as usize] = 1;
            }
        } else {
            self.store(c, &cs.dst, ck as u64);
        }
    }

    /// Resets the per-packet state and sets the ingress standard metadata.
    #[inline]
    pub fn begin(&self, c: &mut Ctx, in_port: u32, len: u32) {
        c.meta[..self.prog.meta_slots].fill(0);
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
            for x in &s.body {
                if let S::Extract(i) = x {
                    let h = &prog.headers[*i as usize];
                    let (o, l, pos) = (h.off as usize, h.len as usize, c.pos as usize);
                    if pos + l > data.len() {
                        return self.parse_error(c, ERR_PACKET_TOO_SHORT);
                    }
                    c.hdr[o..o + l].copy_from_slice(&data[pos..pos + l]);
                    c.valid |= 1 << i;
                    c.pos += l as u32;
                } else {
                    self.stmt(c, &[], x);
                }
            }
            let t = match &s.trans {
                Trans::Goto(t) => *t,
                Trans::Select { keys, cases } => {
                    let mut kv = [0u64; 8];
                    for (v, k) in kv.iter_mut().zip(keys) {
                        *v = self.eval(c, &[], k);
                    }
                    let hit = cases.iter().find(|(ks, _)| {
                        ks.iter().zip(&kv).all(|(k, &v)| match *k {
                            CaseKey::Mask(x, m) => v & m == x,
                            CaseKey::Range(a, b) => v >= a && v <= b,
                        })
                    });
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
        let prog = self.prog;
        if self.run(c, &[], &prog.ingress[from..to]) != Flow::Next {
            c.exited = true;
        }
    }

    /// Verify checksum control.
    pub fn verify(&mut self, c: &mut Ctx) {
        let prog = self.prog;
        self.run(c, &[], &prog.verify);
    }

    /// After ingress: the traffic manager's decision, egress, compute checksum.
    pub fn finish(&mut self, c: &mut Ctx) -> Verdict {
        let prog = self.prog;
        let es = c.meta[prog.std.egress_spec as usize];
        if es == DROP_PORT {
            return Verdict::Drop;
        }
        c.meta[prog.std.egress_port as usize] = es;
        self.run(c, &[], &prog.egress);
        if c.meta[prog.std.egress_spec as usize] == DROP_PORT {
            return Verdict::Drop;
        }
        self.run(c, &[], &prog.compute);
        if es == CPU_PORT {
            Verdict::Punt
        } else {
            Verdict::Port(es as u32)
        }
    }

    /// The whole pipeline after `begin`: parse, verify, ingress, egress, compute.
    pub fn pipeline(&mut self, c: &mut Ctx, data: &[u8]) -> Result<Verdict, ParseEnd> {
        let pe = self.parse(c, data);
        if pe == ParseEnd::Loop {
            return Err(pe);
        }
        self.verify(c);
        let n = self.prog.ingress.len();
        self.ingress_range(c, 0, n);
        let v = self.finish(c);
        if let ParseEnd::Error(_) = pe {
            // Reported through the counters by the caller; the packet continued (v1model).
            return Ok(v);
        }
        Ok(v)
    }
}

#[inline(always)]
fn fold(mut acc: u32) -> u32 {
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
    let mut c = Box::<Ctx>::default();
    let mut x = Exec {
        prog,
        ts,
        shared,
        now_ns: 0,
        pkt_len: pkt.len() as u64,
    };
    x.begin(&mut c, in_port, pkt.len() as u32);
    match x.pipeline(&mut c, pkt) {
        Err(_) => Outcome::ParserLoop,
        Ok(Verdict::Drop) => Outcome::Drop,
        Ok(Verdict::Punt) => Outcome::Punt(deparse_vec(prog, &c, pkt)),
        Ok(Verdict::Port(p)) => Outcome::Out(p, deparse_vec(prog, &c, pkt)),
    }
}
