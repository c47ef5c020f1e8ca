//! The vector executor: runs a compiled [`Program`] over a whole frame, one pipeline step
//! at a time (VPP's own trick applied to the interpreter).
//!
//! Every statement and expression is compiled at load time into a closure that processes
//! every selected packet of the frame before the next one runs: an expression fills a
//! column (`u64` per packet) of temporaries, an `if` splits the selection vector into the
//! packets that take each branch, a table application builds the key column, looks every
//! key up (IPv4 LPM tables four at a time with the native FIB's `lookup_x4`), groups the
//! packets by the action of their entry (entries hold their action's table-local slot and
//! parameters: pre-resolved) and runs each action body once over its group. Dispatch is
//! paid per frame, not per packet.
//!
//! Headers stay in the packet: the parser records each valid header's offset in the
//! packet, field reads and writes go to the packet bytes, and nothing is copied back. That
//! needs a program whose deparser re-emits exactly what the parser extracted, in the same
//! order, and which never changes validity ([`supported`] checks it); other programs (header
//! insertion or removal, looping parsers) and those with registers or meters (whose
//! read-modify-write across packets needs per-packet order) run on the per-packet executor
//! (`exec`). Metadata are one column per slot; only the slots the program ever reads are
//! zeroed per frame.
//!
//! IPv4-style checksums (`update_checksum` over every field of one header but the checksum,
//! csum16): when the same header's checksum was verified on input and passed, the update
//! is incremental (RFC 1624, eqn. 3) from the ones'-complement difference of the 16-bit
//! words the program wrote, tracked per packet as it writes them; otherwise the header is
//! summed. `verify_checksum` is skipped when nothing reads `checksum_error`.

use crate::compile::eval_bin;
use crate::exec::{Shared, ThreadState, GREEN};
use crate::ir::*;
use crate::table::TableRt;
use sluice_graph::FRAME_SIZE;
use std::sync::atomic::Ordering;

/// Packets per frame (selection vectors index with `u8`).
pub const N: usize = FRAME_SIZE;
const _: () = assert!(FRAME_SIZE <= 256 && FRAME_SIZE.is_power_of_two());

/// One value per packet of the frame.
pub type Col = [u64; N];

/// Offset of an invalid header (every access misses the packet: reads 0, writes nothing).
const NO_HDR: u16 = u16::MAX;
/// Entry id of a table miss.
const MISS: u32 = u32::MAX;
/// Action slots per table the vector executor handles.
const SLOTS_MAX: usize = 16;
/// `switch` bodies per table application.
const ARMS_MAX: usize = 8;
/// Nested action calls.
const DEPTH_MAX: usize = 4;
/// Flow marks (`VState::flow`).
const F_RETURN: u8 = 1;
const F_EXIT: u8 = 2;

/// A selection vector: the packets (indices in the frame) a step runs on, in order.
#[derive(Clone)]
pub struct Sel {
    n: usize,
    i: [u8; N],
}

impl Sel {
    /// No packet.
    pub fn empty() -> Sel {
        Sel { n: 0, i: [0; N] }
    }

    /// Packets `0..n`.
    pub fn all(n: usize) -> Sel {
        let mut s = Sel::empty();
        for k in 0..n.min(N) {
            s.i[k] = k as u8;
        }
        s.n = n.min(N);
        s
    }

    #[inline(always)]
    pub fn idx(&self) -> &[u8] {
        &self.i[..self.n.min(N)]
    }

    #[inline(always)]
    fn push(&mut self, x: u8) {
        // n < N here (a selection never holds a packet twice); masked, no bound check, and
        // every reader clamps n to N.
        self.i[self.n & (N - 1)] = x;
        self.n += 1;
    }

    #[inline(always)]
    pub fn len(&self) -> usize {
        self.n.min(N)
    }

    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Empties the selection.
    #[inline(always)]
    pub fn clear(&mut self) {
        self.n = 0;
    }

    /// Keeps the packets whose flow mark is clear.
    fn keep_running(&mut self, flow: &[u8; N]) {
        let mut k = 0;
        for j in 0..self.n.min(N) {
            let x = self.i[j];
            if flow[x as usize] == 0 {
                self.i[k] = x;
                k += 1;
            }
        }
        self.n = k;
    }
}

/// Per-thread columns of the vector executor (reused from frame to frame).
pub struct VState {
    /// One column per metadata slot.
    pub meta: Vec<Col>,
    /// Expression temporaries.
    tmp: Vec<Col>,
    /// Action parameters, `PARAMS_MAX` columns per call depth.
    params: Vec<Col>,
    /// Per header instance: its offset in the packet (`NO_HDR`: invalid).
    pub hoff: Vec<[u16; N]>,
    pub valid: [u64; N],
    /// Bytes the parser consumed.
    pub pos: [u32; N],
    /// The parser ended in `reject` (no error code: counted apart).
    pub rejected: [bool; N],
    /// Return / exit marks of the current control.
    flow: [u8; N],
    /// Packet length (all buffers) for byte counters and `packet_length`.
    pub plen: [u32; N],
    /// Receive interface (`ingress_port`).
    pub inport: [u32; N],
    /// The frame's time in ns (meters).
    pub now_ns: u64,
    /// `egress_spec` when ingress ended (the port a packet leaves on).
    es: [u64; N],
    /// Table key and entry id of the current application.
    key: [u64; N],
    eid: [u32; N],
    /// Per checksum-tracked header: ones'-complement sum of the changes made to it.
    delta: Vec<[u64; N]>,
    /// Per checksum-tracked header: verified good on input, checksum field untouched.
    good: Vec<[bool; N]>,
    /// Per table action slot: the packets whose entry runs it.
    buckets: Vec<Sel>,
    /// Per parser state: the packets in it.
    states: Vec<Sel>,
}

impl VState {
    /// Columns for `v`'s program.
    pub fn new(v: &VCode) -> Box<VState> {
        Box::new(VState {
            meta: vec![[0; N]; v.meta_slots],
            tmp: vec![[0; N]; v.tmps],
            params: vec![[0; N]; v.param_cols],
            hoff: vec![[NO_HDR; N]; v.n_inst],
            valid: [0; N],
            pos: [0; N],
            rejected: [false; N],
            flow: [0; N],
            plen: [0; N],
            inport: [0; N],
            now_ns: 0,
            es: [0; N],
            key: [0; N],
            eid: [MISS; N],
            delta: vec![[0; N]; v.tracked.len()],
            good: vec![[false; N]; v.tracked.len()],
            buckets: (0..SLOTS_MAX).map(|_| Sel::empty()).collect(),
            states: (0..v.n_states).map(|_| Sel::empty()).collect(),
        })
    }
}

/// One frame being run: the columns, the packets' first-buffer bytes, the thread's tables.
pub struct F<'a, 'p> {
    pub v: &'a mut VState,
    pub pk: &'a mut [&'p mut [u8]],
    pub ts: &'a mut ThreadState,
    pub shared: &'a Shared,
}

/// A compiled expression: fills its temporary column for the selected packets.
type Ex = Box<dyn Fn(&mut F<'_, '_>, &Sel) + Send + Sync>;
/// A compiled statement: runs on the selected packets (removing those that return/exit).
type Op = Box<dyn Fn(&mut F<'_, '_>, &mut Sel) + Send + Sync>;
/// A compiled condition: the selected packets for which it holds, in order.
type Filt = Box<dyn Fn(&mut F<'_, '_>, &Sel, &mut Sel) + Send + Sync>;

/// What a frame's packets became.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VOut {
    Drop,
    Port(u32),
    Punt,
}

/// A program compiled for the vector executor.
pub struct VCode {
    meta_slots: usize,
    tmps: usize,
    param_cols: usize,
    n_inst: usize,
    n_states: usize,
    /// Header instances whose checksum is tracked (instance, checksum field offset).
    tracked: Vec<(u8, u16)>,
    /// Metadata slots zeroed per frame (those read anywhere).
    reset: Vec<u16>,
    std: StdSlots,
    read_in_port: bool,
    read_len: bool,
    /// Parser states in topological order.
    order: Vec<u16>,
    states: Vec<VStateCode>,
    verify: Vec<Op>,
    /// Top-level ingress statements (multi-node segments slice them).
    pub ingress: Vec<Op>,
    egress: Vec<Op>,
    compute: Vec<Op>,
}

struct VStateCode {
    /// Extract (instance, length) or a statement, in order.
    steps: Vec<PStep>,
    keys: Vec<Ex>,
    trans: Trans,
    /// A select on one key: (case, target) in order.
    one_key: Option<Vec<(CaseKey, Target)>>,
}

enum PStep {
    Extract(u8, u16),
    Stmt(Op),
}

/// Whether the vector executor can run `p` (and why not).
pub fn supported(p: &Program) -> Result<(), String> {
    headers_in_place(p)?;
    one_site_each(p)
}

/// Registers and meters keep per-packet order in the vector executor when each is used at
/// one place of the program a packet passes at most once (that statement runs over the
/// selected packets in frame order); a register read at one place and written at another
/// (a read-modify-write across packets) needs packet after packet.
fn one_site_each(p: &Program) -> Result<(), String> {
    fn visit(p: &Program, b: &[S], regs: &mut [usize], meters: &mut [usize], depth: usize) {
        if depth > DEPTH_MAX + 1 {
            return;
        }
        let body = |a: u16, regs: &mut [usize], meters: &mut [usize]| {
            if let Some(x) = p.actions.get(a as usize) {
                visit(p, &x.body, regs, meters, depth + 1);
            }
        };
        for s in b {
            match s {
                S::RegRead(r, ..) | S::RegWrite(r, ..) => {
                    if let Some(c) = regs.get_mut(*r as usize) {
                        *c += 1;
                    }
                }
                S::Meter(m, ..) => {
                    if let Some(c) = meters.get_mut(*m as usize) {
                        *c += 1;
                    }
                }
                S::If(_, x, y) => {
                    visit(p, x, regs, meters, depth);
                    visit(p, y, regs, meters, depth);
                }
                S::Call(a, _) => body(*a, regs, meters),
                S::Apply(ap) => {
                    if let Some(t) = p.tables.get(ap.table as usize) {
                        let mut acts = t.actions.clone();
                        if !acts.contains(&t.default.0) {
                            acts.push(t.default.0);
                        }
                        for a in acts {
                            body(a, regs, meters);
                        }
                    }
                    match &ap.arms {
                        Arms::None => {}
                        Arms::Hit(x, y) => {
                            visit(p, x, regs, meters, depth);
                            visit(p, y, regs, meters, depth);
                        }
                        Arms::Switch { bodies, .. } => {
                            for x in bodies {
                                visit(p, x, regs, meters, depth);
                            }
                        }
                    }
                }
                _ => {}
            }
        }
    }
    let (mut regs, mut meters) = (vec![0; p.registers.len()], vec![0; p.meters.len()]);
    for b in p
        .states
        .iter()
        .map(|s| &s.body)
        .chain([&p.verify, &p.ingress, &p.egress, &p.compute])
    {
        visit(p, b, &mut regs, &mut meters, 0);
    }
    if let Some((r, _)) = regs.iter().enumerate().find(|x| *x.1 > 1) {
        return Err(format!(
            "register `{}' used at several places (per-packet order)",
            p.registers[r].name
        ));
    }
    if let Some((m, _)) = meters.iter().enumerate().find(|x| *x.1 > 1) {
        return Err(format!(
            "meter `{}' used at several places (per-packet order)",
            p.meters[m].name
        ));
    }
    Ok(())
}

/// Whether `p` can run with its headers in the packet (what the vector executor and the
/// generated code need; they differ only in registers and meters, `one_site_each`).
pub fn headers_in_place(p: &Program) -> Result<(), String> {
    if p.opts != Opts::default() {
        return Err("an optimisation is off".into());
    }
    if p.parser_loops {
        return Err("the parser loops".into());
    }
    let mut bad: Option<String> = None;
    let mut chk = |s: &S, in_parser: bool| {
        walk_s(s, &mut |s| match s {
            S::SetValid(_) | S::SetInvalid(_) => bad = Some("header validity changes".into()),
            S::Extract(_) if !in_parser => bad = Some("extract outside the parser".into()),
            S::Apply(a) => {
                if let Arms::Switch { bodies, .. } = &a.arms {
                    if bodies.len() > ARMS_MAX {
                        bad = Some("switch with many bodies".into());
                    }
                }
            }
            S::Set(lv, _) if lv_indirect(lv) => bad = Some("non-flat place".into()),
            _ => {}
        });
    };
    for st in &p.states {
        for s in &st.body {
            if let S::Extract(_) = s {
                continue;
            }
            chk(s, false);
        }
    }
    for b in [&p.verify, &p.ingress, &p.egress, &p.compute] {
        for s in b {
            chk(s, false);
        }
    }
    for a in &p.actions {
        for s in &a.body {
            chk(s, false);
        }
    }
    if let Some(b) = bad {
        return Err(b);
    }
    if p.tables.iter().any(|t| t.actions.len() > SLOTS_MAX) {
        return Err("a table with many actions".into());
    }
    if call_depth(p) > DEPTH_MAX {
        return Err("deeply nested action calls".into());
    }
    // Every parse path's extractions must be what the deparser emits for them, in order.
    let mut stack = vec![(p.start, Vec::<u8>::new())];
    let mut seen = 0usize;
    while let Some((st, ex)) = stack.pop() {
        seen += 1;
        if seen > 4096 {
            return Err("too many parse paths".into());
        }
        let Some(s) = p.states.get(st as usize) else {
            return Err("bad state".into());
        };
        let mut ex = ex;
        for x in &s.body {
            if let S::Extract(i) = x {
                if ex.contains(i) {
                    return Err("a header extracted twice".into());
                }
                ex.push(*i);
                let want: Vec<u8> = p
                    .deparse
                    .iter()
                    .copied()
                    .filter(|d| ex.contains(d))
                    .collect();
                if want != ex {
                    return Err("the deparser does not re-emit the parsed headers".into());
                }
            }
        }
        let targets: Vec<Target> = match &s.trans {
            Trans::Goto(t) => vec![*t],
            Trans::Select { cases, .. } => cases.iter().map(|c| c.1).collect(),
        };
        for t in targets {
            if let Target::State(n) = t {
                stack.push((n, ex.clone()));
            }
        }
    }
    Ok(())
}

fn lv_indirect(lv: &Lv) -> bool {
    match lv {
        Lv::MI(..) | Lv::HI(..) => true,
        Lv::Slice(x, ..) => lv_indirect(x),
        _ => false,
    }
}

/// Visits `s` and every statement nested in it.
pub(crate) fn walk_s(s: &S, f: &mut impl FnMut(&S)) {
    f(s);
    match s {
        S::If(_, a, b) => {
            for x in a.iter().chain(b) {
                walk_s(x, f);
            }
        }
        S::Apply(ap) => match &ap.arms {
            Arms::None => {}
            Arms::Hit(a, b) => {
                for x in a.iter().chain(b) {
                    walk_s(x, f);
                }
            }
            Arms::Switch { bodies, .. } => {
                for x in bodies.iter().flatten() {
                    walk_s(x, f);
                }
            }
        },
        _ => {}
    }
}

/// Visits every expression of a statement (not nested statements), and the places read
/// (slices read-modify-write).
fn exprs_of(s: &S, f: &mut impl FnMut(&E)) {
    fn lv_reads(lv: &Lv, f: &mut impl FnMut(&E)) {
        if let Lv::Slice(x, ..) = lv {
            f(&x.as_e());
        }
    }
    match s {
        S::Set(lv, e) => {
            f(e);
            lv_reads(lv, f);
        }
        S::If(e, ..) => f(e),
        S::Call(_, args) => args.iter().for_each(&mut *f),
        S::Count(_, e) => f(e),
        S::RegRead(_, lv, e) => {
            f(e);
            lv_reads(lv, f);
        }
        S::RegWrite(_, a, b) => {
            f(a);
            f(b);
        }
        S::Meter(_, e, lv) => {
            f(e);
            lv_reads(lv, f);
        }
        S::Csum(c) => {
            f(&c.cond);
            f(&c.dst_e);
            if let CsumSrc::Fields(fs) = &c.src {
                fs.iter().for_each(|(e, _)| f(e));
            }
        }
        _ => {}
    }
}

/// Every statement of the program (controls, actions, parser states), nested included.
pub(crate) fn all_stmts(p: &Program, f: &mut impl FnMut(&S)) {
    for b in [&p.verify, &p.ingress, &p.egress, &p.compute] {
        for s in b {
            walk_s(s, f);
        }
    }
    for a in &p.actions {
        for s in &a.body {
            walk_s(s, f);
        }
    }
    for st in &p.states {
        for s in &st.body {
            walk_s(s, f);
        }
    }
}

/// Every expression the program evaluates (statements, table keys, select keys).
fn all_exprs(p: &Program, f: &mut impl FnMut(&E)) {
    all_stmts(p, &mut |s| exprs_of(s, &mut |e| e.walk(f)));
    for t in &p.tables {
        for k in &t.keys {
            k.e.walk(f);
        }
    }
    for st in &p.states {
        if let Trans::Select { keys, .. } = &st.trans {
            for k in keys {
                k.walk(f);
            }
        }
    }
}

fn call_depth(p: &Program) -> usize {
    fn depth(p: &Program, a: u16, lvl: usize) -> usize {
        if lvl > DEPTH_MAX {
            return lvl;
        }
        let mut d = lvl;
        if let Some(x) = p.actions.get(a as usize) {
            for s in &x.body {
                walk_s(s, &mut |s| {
                    if let S::Call(b, _) = s {
                        d = d.max(depth(p, *b, lvl + 1));
                    }
                });
            }
        }
        d
    }
    (0..p.actions.len() as u16)
        .map(|a| depth(p, a, 1))
        .max()
        .unwrap_or(1)
}

/// Compile-time state.
struct Cc<'a> {
    p: &'a Program,
    tmps: usize,
    depth: usize,
    tracked: Vec<(u8, u16)>,
    /// Slots read somewhere.
    read: Vec<bool>,
    /// Compiling the body of an action a table runs: its parameters are read from the
    /// packet's entry of this table (no copy into columns).
    ptab: Option<usize>,
}

impl Cc<'_> {
    fn tmp(&mut self, d: usize) -> usize {
        self.tmps = self.tmps.max(d + 1);
        d
    }

    /// The checksum tracking of header instance `h`: (tracked index, checksum field offset).
    fn tracking(&self, h: usize) -> Option<(usize, usize)> {
        let ti = self.tracked.iter().position(|x| x.0 as usize == h)?;
        Some((ti, self.tracked[ti].1 as usize))
    }

    /// The header instance holding header-area offset `off`, and the offset inside it.
    fn inst_of(&self, off: u16) -> (usize, usize) {
        self.p.inst_of(off).unwrap_or((usize::MAX, 0))
    }
}

/// Field geometry: bytes read, shift, mask.
fn geom(k: HKind) -> (u8, u8, u64) {
    match k {
        HKind::B8 => (1, 0, 0xff),
        HKind::B16 => (2, 0, 0xffff),
        HKind::B32 => (4, 0, 0xffff_ffff),
        HKind::Bits { n, shift, mask } => (n, shift, mask),
    }
}

#[inline(always)]
pub(crate) fn ld<const W: usize>(p: &[u8], o: usize) -> u64 {
    match p.get(o..o + W) {
        Some(b) => {
            let mut x = [0u8; 8];
            x[8 - W..].copy_from_slice(b);
            u64::from_be_bytes(x)
        }
        None => 0,
    }
}

#[inline(always)]
pub(crate) fn st<const W: usize>(p: &mut [u8], o: usize, v: u64) {
    if let Some(b) = p.get_mut(o..o + W) {
        b.copy_from_slice(&v.to_be_bytes()[8 - W..]);
    }
}

/// Loads of a header field into temporary `d`.
fn hload(h: usize, rel: usize, k: HKind, d: usize) -> Ex {
    let (w, sh, m) = geom(k);
    macro_rules! mk {
        ($w:literal) => {
            Box::new(move |f: &mut F<'_, '_>, s: &Sel| {
                let (Some(ho), Some(t)) = (f.v.hoff.get(h), f.v.tmp.get_mut(d)) else {
                    return;
                };
                for &i in s.idx() {
                    let i = i as usize;
                    let o = ho[i] as usize + rel;
                    t[i] = f.pk.get(i).map_or(0, |p| (ld::<$w>(p, o) >> sh) & m);
                }
            })
        };
    }
    match w {
        1 => mk!(1),
        2 => mk!(2),
        3 => mk!(3),
        4 => mk!(4),
        5 => mk!(5),
        6 => mk!(6),
        7 => mk!(7),
        _ => mk!(8),
    }
}

/// Stores temporary `d` into a header field; tracks the checksum delta when the header's
/// checksum is tracked (`tr`: tracked index, checksum field offset).
fn hstore(h: usize, rel: usize, k: HKind, d: usize, tr: Option<(usize, usize)>) -> Op {
    hstore_with(h, rel, k, d, tr, None)
}

/// [`hstore`]; with `add` = Some(k), the value stored is the field's own value plus `k`
/// (masked to its width) instead of temporary `d`: `x = x + k` / `x = x - k` in one loop.
fn hstore_with(
    h: usize,
    rel: usize,
    k: HKind,
    d: usize,
    tr: Option<(usize, usize)>,
    add: Option<u64>,
) -> Op {
    let (w, sh, m) = geom(k);
    let whole = sh == 0 && (w >= 8 || m == (1u64 << (8 * w as u32)) - 1);
    // The 16-bit words the field covers (header-relative, from an even offset), and whether
    // the checksum field is among them.
    let wa = rel & !1;
    let nw = (((rel + w as usize + 1) & !1) - wa) / 2;
    let (ti, hits_ck) = match tr {
        Some((ti, ck)) => (ti, ck + 2 > wa && ck < wa + 2 * nw),
        None => (usize::MAX, false),
    };
    macro_rules! mk {
        ($w:literal) => {
            Box::new(move |f: &mut F<'_, '_>, s: &mut Sel| {
                let VState {
                    hoff,
                    tmp,
                    delta,
                    good,
                    ..
                } = &mut *f.v;
                let (Some(ho), Some(t)) = (hoff.get(h), tmp.get(d)) else {
                    return;
                };
                let mut dg = delta.get_mut(ti).zip(good.get_mut(ti));
                for &i in s.idx() {
                    let i = i as usize;
                    let o = ho[i] as usize + rel;
                    let Some(p) = f.pk.get_mut(i) else { continue };
                    let nv = match add {
                        Some(k) => {
                            let old = ld::<$w>(p, o);
                            let x = ((old >> sh) & m).wrapping_add(k) & m;
                            (old & !(m << sh)) | (x << sh)
                        }
                        None if whole => t[i],
                        None => {
                            let old = ld::<$w>(p, o);
                            (old & !(m << sh)) | ((t[i] & m) << sh)
                        }
                    };
                    match dg.as_mut() {
                        Some((dl, g)) => {
                            // RFC 1624: add ~m + m' for every word the store changes.
                            let base = ho[i] as usize + wa;
                            let mut acc = 0u64;
                            for k in 0..nw {
                                acc += !ld::<2>(p, base + 2 * k) & 0xffff;
                            }
                            st::<$w>(p, o, nv);
                            for k in 0..nw {
                                acc += ld::<2>(p, base + 2 * k);
                            }
                            dl[i] += acc;
                            if hits_ck {
                                // The checksum field itself: incremental update no longer holds.
                                g[i] = false;
                            }
                        }
                        None => st::<$w>(p, o, nv),
                    }
                }
            })
        };
    }
    match w {
        1 => mk!(1),
        2 => mk!(2),
        3 => mk!(3),
        4 => mk!(4),
        5 => mk!(5),
        6 => mk!(6),
        7 => mk!(7),
        _ => mk!(8),
    }
}

/// Compiles an expression into temporary `d`.
fn ex(cc: &mut Cc, e: &E, d: usize, pb: usize) -> Ex {
    let d = cc.tmp(d);
    match e {
        E::Const(k) => {
            let k = *k;
            Box::new(move |f, s| {
                if let Some(t) = f.v.tmp.get_mut(d) {
                    for &i in s.idx() {
                        t[i as usize] = k;
                    }
                }
            })
        }
        E::M(sl) => {
            let sl = *sl as usize;
            Box::new(move |f, s| {
                let v = &mut *f.v;
                if let (Some(m), Some(t)) = (v.meta.get(sl), v.tmp.get_mut(d)) {
                    for &i in s.idx() {
                        t[i as usize] = m[i as usize];
                    }
                }
            })
        }
        E::H(a) => {
            let (h, rel) = cc.inst_of(a.off);
            hload(h, rel, a.kind, d)
        }
        E::Valid(h) => {
            let h = *h;
            Box::new(move |f, s| {
                let v = &mut *f.v;
                if let Some(t) = v.tmp.get_mut(d) {
                    for &i in s.idx() {
                        t[i as usize] = (v.valid[i as usize] >> h) & 1;
                    }
                }
            })
        }
        E::Param(k) if cc.ptab.is_some() => {
            let (k, ti) = (*k as usize, cc.ptab.unwrap_or(0));
            Box::new(move |f, s| {
                let Some(tr) = f.ts.tables.get(ti) else {
                    return;
                };
                let v = &mut *f.v;
                let Some(t) = v.tmp.get_mut(d) else { return };
                for &i in s.idx() {
                    let id = v.eid[i as usize];
                    let e = if id == MISS {
                        &tr.default
                    } else {
                        tr.recs.get(id as usize).unwrap_or(&tr.default)
                    };
                    t[i as usize] = e.params.get(k).copied().unwrap_or(0);
                }
            })
        }
        E::Param(k) => {
            let c = pb + *k as usize;
            Box::new(move |f, s| {
                let v = &mut *f.v;
                if let (Some(m), Some(t)) = (v.params.get(c), v.tmp.get_mut(d)) {
                    for &i in s.idx() {
                        t[i as usize] = m[i as usize];
                    }
                }
            })
        }
        // Not produced in flat mode (checked by `supported`).
        E::MI(..) | E::HI(..) => ex(cc, &E::Const(0), d, pb),
        E::Un(op, a, m) => {
            let (fa, m, op) = (ex(cc, a, d, pb), *m, *op);
            Box::new(move |f, s| {
                fa(f, s);
                if let Some(t) = f.v.tmp.get_mut(d) {
                    for &i in s.idx() {
                        let x = &mut t[i as usize];
                        *x = match op {
                            Un::Not => (*x == 0) as u64,
                            Un::BitNot => !*x & m,
                            Un::Neg => x.wrapping_neg() & m,
                        };
                    }
                }
            })
        }
        E::Bin(op, a, b, m) => {
            let (op, m) = (*op, *m);
            let fa = ex(cc, a, d, pb);
            if let E::Const(k) = **b {
                macro_rules! k1 {
                    ($f:expr) => {{
                        let g = $f;
                        Box::new(move |f: &mut F<'_, '_>, s: &Sel| {
                            fa(f, s);
                            if let Some(t) = f.v.tmp.get_mut(d) {
                                for &i in s.idx() {
                                    let x = &mut t[i as usize];
                                    *x = g(*x);
                                }
                            }
                        })
                    }};
                }
                return match op {
                    Bin::Add => k1!(move |x: u64| x.wrapping_add(k) & m),
                    Bin::Sub => k1!(move |x: u64| x.wrapping_sub(k) & m),
                    Bin::And => k1!(move |x: u64| x & k),
                    Bin::Or => k1!(move |x: u64| x | k),
                    Bin::Eq => k1!(move |x: u64| (x == k) as u64),
                    Bin::Ne => k1!(move |x: u64| (x != k) as u64),
                    Bin::Lt => k1!(move |x: u64| (x < k) as u64),
                    Bin::Gt => k1!(move |x: u64| (x > k) as u64),
                    _ => k1!(move |x: u64| eval_bin(op, x, k, m)),
                };
            }
            let fb = ex(cc, b, d + 1, pb);
            Box::new(move |f, s| {
                fa(f, s);
                fb(f, s);
                let (lo, hi) = f.v.tmp.split_at_mut(d + 1);
                if let (Some(t), Some(u)) = (lo.get_mut(d), hi.first()) {
                    for &i in s.idx() {
                        let i = i as usize;
                        t[i] = eval_bin(op, t[i], u[i], m);
                    }
                }
            })
        }
        E::Slice(a, sh, m) => {
            let (fa, sh, m) = (ex(cc, a, d, pb), *sh, *m);
            Box::new(move |f, s| {
                fa(f, s);
                if let Some(t) = f.v.tmp.get_mut(d) {
                    for &i in s.idx() {
                        let x = &mut t[i as usize];
                        *x = (*x >> sh) & m;
                    }
                }
            })
        }
        E::Concat(a, b, wb) => {
            let (fa, fb, wb) = (ex(cc, a, d, pb), ex(cc, b, d + 1, pb), *wb);
            Box::new(move |f, s| {
                fa(f, s);
                fb(f, s);
                let (lo, hi) = f.v.tmp.split_at_mut(d + 1);
                if let (Some(t), Some(u)) = (lo.get_mut(d), hi.first()) {
                    for &i in s.idx() {
                        let i = i as usize;
                        t[i] = if wb >= 64 { u[i] } else { (t[i] << wb) | u[i] };
                    }
                }
            })
        }
        E::Mux(k, a, b) => {
            let (fk, fa, fb) = (ex(cc, k, d, pb), ex(cc, a, d + 1, pb), ex(cc, b, d + 2, pb));
            Box::new(move |f, s| {
                fk(f, s);
                fa(f, s);
                fb(f, s);
                let (lo, hi) = f.v.tmp.split_at_mut(d + 1);
                if let (Some(t), Some(u), Some(w)) = (lo.get_mut(d), hi.first(), hi.get(1)) {
                    for &i in s.idx() {
                        let i = i as usize;
                        t[i] = if t[i] != 0 { u[i] } else { w[i] };
                    }
                }
            })
        }
    }
}

/// Compiles a condition into a filter (`a && b` filters by `a`, then the survivors by `b`).
fn filt(cc: &mut Cc, e: &E, pb: usize) -> Filt {
    if let E::Bin(Bin::LAnd, a, b, _) = e {
        let (fa, fb) = (filt(cc, a, pb), filt(cc, b, pb));
        return Box::new(move |f, s, out| {
            let mut t = Sel::empty();
            fa(f, s, &mut t);
            out.n = 0;
            if !t.is_empty() {
                fb(f, &t, out);
            }
        });
    }
    if let E::Valid(h) = *e {
        return Box::new(move |f, s, out| {
            out.n = 0;
            for &i in s.idx() {
                if (f.v.valid[i as usize] >> h) & 1 != 0 {
                    out.push(i);
                }
            }
        });
    }
    // `x op k`: the comparison is fused into the filter loop.
    if let E::Bin(op, a, b, _) = e {
        if let (E::Const(k), true) = (
            &**b,
            matches!(
                op,
                Bin::Eq | Bin::Ne | Bin::Lt | Bin::Le | Bin::Gt | Bin::Ge
            ),
        ) {
            if let E::H(acc) = **a {
                // A header field against a constant: load and compare in one loop.
                let (h, rel) = cc.inst_of(acc.off);
                let (w, sh, m) = geom(acc.kind);
                let (k, op) = (*k, *op);
                macro_rules! hc {
                    ($w:literal) => {
                        Box::new(move |f: &mut F<'_, '_>, s: &Sel, out: &mut Sel| {
                            out.n = 0;
                            let Some(ho) = f.v.hoff.get(h) else { return };
                            for &i in s.idx() {
                                let x = i as usize;
                                let o = ho[x] as usize + rel;
                                let val = f.pk.get(x).map_or(0, |p| (ld::<$w>(p, o) >> sh) & m);
                                let c = match op {
                                    Bin::Eq => val == k,
                                    Bin::Ne => val != k,
                                    Bin::Lt => val < k,
                                    Bin::Le => val <= k,
                                    Bin::Gt => val > k,
                                    _ => val >= k,
                                };
                                if c {
                                    out.push(i);
                                }
                            }
                        })
                    };
                }
                return match w {
                    1 => hc!(1),
                    2 => hc!(2),
                    3 => hc!(3),
                    4 => hc!(4),
                    5 => hc!(5),
                    6 => hc!(6),
                    7 => hc!(7),
                    _ => hc!(8),
                };
            }
            let (fa, k, op) = (ex(cc, a, 0, pb), *k, *op);
            let d = cc.tmp(0);
            macro_rules! cmp {
                ($c:expr) => {{
                    let c = $c;
                    Box::new(move |f: &mut F<'_, '_>, s: &Sel, out: &mut Sel| {
                        fa(f, s);
                        out.n = 0;
                        if let Some(t) = f.v.tmp.get(d) {
                            for &i in s.idx() {
                                if c(t[i as usize]) {
                                    out.push(i);
                                }
                            }
                        }
                    })
                }};
            }
            return match op {
                Bin::Eq => cmp!(move |x: u64| x == k),
                Bin::Ne => cmp!(move |x: u64| x != k),
                Bin::Lt => cmp!(move |x: u64| x < k),
                Bin::Le => cmp!(move |x: u64| x <= k),
                Bin::Gt => cmp!(move |x: u64| x > k),
                _ => cmp!(move |x: u64| x >= k),
            };
        }
    }
    let fe = ex(cc, e, 0, pb);
    Box::new(move |f, s, out| {
        fe(f, s);
        out.n = 0;
        if let Some(t) = f.v.tmp.first() {
            for &i in s.idx() {
                if t[i as usize] != 0 {
                    out.push(i);
                }
            }
        }
    })
}

/// `s` minus `t` (`t` a subsequence of `s`).
fn minus(s: &Sel, t: &Sel, out: &mut Sel) {
    out.n = 0;
    let ti = t.idx();
    let mut k = 0;
    for &i in s.idx() {
        if ti.get(k) == Some(&i) {
            k += 1;
        } else {
            out.push(i);
        }
    }
}

/// Whether running `b` may return or exit.
fn may_stop(p: &Program, b: &[S]) -> bool {
    let mut stop = false;
    for s in b {
        walk_s(s, &mut |s| match s {
            S::Exit | S::Return => stop = true,
            S::Call(a, _) => stop |= action_may_exit(p, *a, 0),
            S::Apply(ap) => {
                if let Some(t) = p.tables.get(ap.table as usize) {
                    stop |= t.actions.iter().any(|&a| action_may_exit(p, a, 0));
                }
            }
            _ => {}
        });
    }
    stop
}

fn action_may_exit(p: &Program, a: u16, lvl: usize) -> bool {
    if lvl > DEPTH_MAX {
        return false;
    }
    let mut ex = false;
    if let Some(x) = p.actions.get(a as usize) {
        for s in &x.body {
            walk_s(s, &mut |s| match s {
                S::Exit => ex = true,
                S::Call(b, _) => ex |= action_may_exit(p, *b, lvl + 1),
                _ => {}
            });
        }
    }
    ex
}

fn block(cc: &mut Cc, b: &[S], pb: usize) -> Vec<Op> {
    b.iter().map(|s| stmt(cc, s, pb)).collect()
}

/// Runs a statement list over `s` (packets that return or exit leave `s`).
#[inline(always)]
fn run(ops: &[Op], f: &mut F<'_, '_>, s: &mut Sel) {
    for op in ops {
        if s.is_empty() {
            return;
        }
        op(f, s);
    }
}

/// An action body over `s` with its parameters in columns `pb..`: `return` ends the action
/// only; packets that exit leave `s`.
fn action_op(cc: &mut Cc, a: u16, pb: usize) -> Op {
    let p = cc.p;
    let Some(act) = p.actions.get(a as usize) else {
        return Box::new(|_, _| {});
    };
    let body = block(cc, &act.body, pb);
    let stops = may_stop(p, &act.body);
    let exits = action_may_exit(p, a, 0);
    Box::new(move |f, s| {
        if !stops {
            run(&body, f, s);
            return;
        }
        let mut t = s.clone();
        run(&body, f, &mut t);
        for &i in s.idx() {
            if f.v.flow[i as usize] == F_RETURN {
                f.v.flow[i as usize] = 0;
            }
        }
        if exits {
            s.keep_running(&f.v.flow);
        }
    })
}

/// Compiles a store of temporary 0 into a place.
fn store(cc: &mut Cc, lv: &Lv, d: usize) -> Op {
    match lv {
        Lv::M(sl, m) => {
            let (sl, m) = (*sl as usize, *m);
            Box::new(move |f, s| {
                let v = &mut *f.v;
                if let (Some(t), Some(c)) = (v.tmp.get(d), v.meta.get_mut(sl)) {
                    for &i in s.idx() {
                        c[i as usize] = t[i as usize] & m;
                    }
                }
            })
        }
        Lv::H(a) => {
            let (h, rel) = cc.inst_of(a.off);
            hstore(h, rel, a.kind, d, cc.tracking(h))
        }
        Lv::Slice(inner, sh, m) => {
            // old = place; tmp[d] = (old & !(m << sh)) | ((v & m) << sh); place = tmp[d].
            let (sh, m) = (*sh, *m);
            let old = ex(cc, &inner.as_e(), d + 1, 0);
            let put = store(cc, inner, d);
            Box::new(move |f, s| {
                old(f, s);
                let (lo, hi) = f.v.tmp.split_at_mut(d + 1);
                if let (Some(t), Some(o)) = (lo.get_mut(d), hi.first()) {
                    for &i in s.idx() {
                        let i = i as usize;
                        t[i] = (o[i] & !(m << sh)) | ((t[i] & m) << sh);
                    }
                }
                put(f, s);
            })
        }
        Lv::MI(..) | Lv::HI(..) => Box::new(|_, _| {}),
    }
}

/// Compiles a statement (parameters in columns `pb..`).
fn stmt(cc: &mut Cc, s: &S, pb: usize) -> Op {
    let p = cc.p;
    match s {
        S::Set(lv, e) => {
            // Metadata from a slot or parameter: one copy loop.
            if let (Lv::M(dst, m), E::Param(k), None) = (lv, e, cc.ptab) {
                let (dst, m, c) = (*dst as usize, *m, pb + *k as usize);
                return Box::new(move |f, s| {
                    let v = &mut *f.v;
                    if let (Some(src), Some(out)) = (v.params.get(c), v.meta.get_mut(dst)) {
                        for &i in s.idx() {
                            out[i as usize] = src[i as usize] & m;
                        }
                    }
                });
            }
            // `f = f + k` / `f = f - k` on a header field: one load-add-store loop.
            if let (Lv::H(a), E::Bin(op @ (Bin::Add | Bin::Sub), x, y, _)) = (lv, e) {
                if let (E::H(b), E::Const(k)) = (&**x, &**y) {
                    if a == b {
                        let (h, rel) = cc.inst_of(a.off);
                        let tr = cc.tracking(h);
                        let k = if *op == Bin::Add {
                            *k
                        } else {
                            k.wrapping_neg()
                        };
                        return hstore_with(h, rel, a.kind, 0, tr, Some(k));
                    }
                }
            }
            let fe = ex(cc, e, 0, pb);
            let st = store(cc, lv, 0);
            Box::new(move |f, s| {
                fe(f, s);
                st(f, s);
            })
        }
        S::Extract(_) | S::SetValid(_) | S::SetInvalid(_) => Box::new(|_, _| {}),
        S::RegRead(r, lv, e) => {
            let (r, fe, put) = (*r as usize, ex(cc, e, 0, pb), store(cc, lv, 0));
            Box::new(move |f, s| {
                fe(f, s);
                let reg = f.shared.registers.get(r);
                if let Some(t) = f.v.tmp.get_mut(0) {
                    for &i in s.idx() {
                        let i = i as usize;
                        t[i] = reg
                            .and_then(|x| x.get(t[i] as usize))
                            .map_or(0, |a| a.load(Ordering::Relaxed));
                    }
                }
                put(f, s);
            })
        }
        S::RegWrite(r, ei, ev) => {
            let (r, fi, fv) = (*r as usize, ex(cc, ei, 0, pb), ex(cc, ev, 1, pb));
            let m = p.registers.get(r).map_or(0, |x| mask(x.width));
            Box::new(move |f, s| {
                fi(f, s);
                fv(f, s);
                let v = &*f.v;
                let (Some(ti), Some(tv), Some(reg)) =
                    (v.tmp.first(), v.tmp.get(1), f.shared.registers.get(r))
                else {
                    return;
                };
                for &i in s.idx() {
                    let i = i as usize;
                    if let Some(a) = reg.get(ti[i] as usize) {
                        a.store(tv[i] & m, Ordering::Relaxed);
                    }
                }
            })
        }
        S::Meter(mi, e, lv) => {
            let (mi, fe, put) = (*mi as usize, ex(cc, e, 0, pb), store(cc, lv, 0));
            let bytes = p.meters.get(mi).is_some_and(|m| m.bytes);
            Box::new(move |f, s| {
                fe(f, s);
                let cells = f.shared.meters.get(mi);
                let v = &mut *f.v;
                let now = v.now_ns;
                if let Some(t) = v.tmp.get_mut(0) {
                    for &i in s.idx() {
                        let i = i as usize;
                        let units = if bytes { v.plen[i] as u64 } else { 1 };
                        t[i] = cells
                            .and_then(|c| c.get(t[i] as usize))
                            .map_or(GREEN, |c| c.execute(units, now));
                    }
                }
                put(f, s);
            })
        }
        S::If(e, a, b) => {
            let fc = filt(cc, e, pb);
            let (fa, fb) = (block(cc, a, pb), block(cc, b, pb));
            let stops = may_stop(p, a) || may_stop(p, b);
            Box::new(move |f, s| {
                let mut t = Sel::empty();
                fc(f, s, &mut t);
                if !fb.is_empty() {
                    let mut e = Sel::empty();
                    minus(s, &t, &mut e);
                    run(&fb, f, &mut e);
                }
                run(&fa, f, &mut t);
                if stops {
                    s.keep_running(&f.v.flow);
                }
            })
        }
        S::Apply(ap) => apply(cc, ap, pb),
        S::Call(a, args) => {
            let npb = pb + PARAMS_MAX;
            cc.depth = cc.depth.max(npb / PARAMS_MAX + 1);
            let args: Vec<(Ex, usize)> = args
                .iter()
                .take(PARAMS_MAX)
                .enumerate()
                .map(|(k, e)| (ex(cc, e, 0, pb), npb + k))
                .collect();
            let saved = cc.ptab.take();
            let body = action_op(cc, *a, npb);
            cc.ptab = saved;
            Box::new(move |f, s| {
                for (e, c) in &args {
                    e(f, s);
                    let v = &mut *f.v;
                    if let (Some(t), Some(pc)) = (v.tmp.first(), v.params.get_mut(*c)) {
                        for &i in s.idx() {
                            pc[i as usize] = t[i as usize];
                        }
                    }
                }
                body(f, s);
            })
        }
        S::Drop => {
            let sl = p.std.egress_spec as usize;
            Box::new(move |f, s| {
                if let Some(c) = f.v.meta.get_mut(sl) {
                    for &i in s.idx() {
                        c[i as usize] = DROP_PORT;
                    }
                }
            })
        }
        S::Exit | S::Return => {
            let mark = if matches!(s, S::Exit) {
                F_EXIT
            } else {
                F_RETURN
            };
            Box::new(move |f, s| {
                for &i in s.idx() {
                    f.v.flow[i as usize] = mark;
                }
                s.n = 0;
            })
        }
        S::Count(k, e) => {
            let (k, fe) = (*k as usize, ex(cc, e, 0, pb));
            Box::new(move |f, s| {
                fe(f, s);
                let v = &*f.v;
                let (Some(t), Some(ctr)) = (v.tmp.first(), f.ts.counters.get_mut(k)) else {
                    return;
                };
                for &i in s.idx() {
                    if let Some(c) = ctr.get_mut(t[i as usize] as usize) {
                        c[0] += 1;
                        c[1] += v.plen[i as usize] as u64;
                    }
                }
            })
        }
        S::Csum(c) => csum(cc, c),
    }
}

/// Looks up the key column for the selected packets into `eid`.
#[inline(always)]
fn lookup_col(tr: &TableRt, s: &Sel, key: &[u64; N], eid: &mut [u32; N]) {
    if let Some(l) = tr.lpm32() {
        let ix = s.idx();
        let mut c = ix.chunks_exact(4);
        for q in &mut c {
            let r = l.lookup_x4([
                key[q[0] as usize] as u32,
                key[q[1] as usize] as u32,
                key[q[2] as usize] as u32,
                key[q[3] as usize] as u32,
            ]);
            for (j, &i) in q.iter().enumerate() {
                eid[i as usize] = r[j].unwrap_or(MISS);
            }
        }
        for &i in c.remainder() {
            eid[i as usize] = l.lookup(key[i as usize] as u32).unwrap_or(MISS);
        }
        return;
    }
    for &i in s.idx() {
        eid[i as usize] = tr.lookup64(key[i as usize]).unwrap_or(MISS);
    }
}

/// A table application: keys, batched lookup, actions by group, then the arms.
fn apply(cc: &mut Cc, ap: &Apply, pb: usize) -> Op {
    let p = cc.p;
    let ti = ap.table as usize;
    let Some(t) = p.tables.get(ti) else {
        return Box::new(|_, _| {});
    };
    let total: u32 = t.keys.iter().map(|k| k.width as u32).sum();
    let wide = total > 64;
    let shifts: Vec<u32> = {
        let mut acc = 0u32;
        let mut v = vec![0u32; t.keys.len()];
        for i in (0..t.keys.len()).rev() {
            v[i] = acc;
            acc += t.keys[i].width as u32;
        }
        v
    };
    let keys: Vec<Ex> = t
        .keys
        .iter()
        .enumerate()
        .map(|(k, key)| ex(cc, &key.e, k, pb))
        .collect();
    let direct = t.direct_counter.is_some();
    let slots: Vec<Op> = t
        .actions
        .iter()
        .map(|&a| {
            cc.ptab = Some(ti);
            let op = action_op(cc, a, 0);
            cc.ptab = None;
            op
        })
        .collect();
    let exits = t.actions.iter().any(|&a| action_may_exit(p, a, 0));
    let stops = may_stop(p, std::slice::from_ref(&S::Apply(ap.clone())));
    enum ArmsV {
        None,
        Hit(Vec<Op>, Vec<Op>),
        /// Per table slot: body index.
        Switch(Vec<Option<u16>>, Vec<Vec<Op>>),
    }
    let arms = match &ap.arms {
        Arms::None => ArmsV::None,
        Arms::Hit(h, m) => ArmsV::Hit(block(cc, h, pb), block(cc, m, pb)),
        Arms::Switch {
            by_action,
            bodies,
            default,
        } => ArmsV::Switch(
            t.actions
                .iter()
                .map(|&a| by_action.get(a as usize).copied().flatten().or(*default))
                .collect(),
            bodies.iter().map(|b| block(cc, b, pb)).collect(),
        ),
    };
    Box::new(move |f, s| {
        // Key column.
        for k in &keys {
            k(f, s);
        }
        {
            let v = &mut *f.v;
            if keys.len() > 1 && !wide {
                for &i in s.idx() {
                    let mut k = 0u64;
                    for (c, &sh) in v.tmp.iter().zip(&shifts) {
                        k |= c[i as usize].checked_shl(sh).unwrap_or(0);
                    }
                    v.key[i as usize] = k;
                }
            }
        }
        let Some(tr) = f.ts.tables.get_mut(ti) else {
            return;
        };
        let v = &mut *f.v;
        if keys.is_empty() {
            for &i in s.idx() {
                v.eid[i as usize] = MISS;
            }
        } else if wide {
            for &i in s.idx() {
                let mut vals = [0u64; 16];
                for (x, c) in vals.iter_mut().zip(&v.tmp) {
                    *x = c[i as usize];
                }
                v.eid[i as usize] = tr
                    .lookup(tr.key_of(&vals[..keys.len().min(16)]))
                    .unwrap_or(MISS);
            }
        } else {
            // One key: its column is the key.
            let key = if keys.len() == 1 {
                v.tmp.first().unwrap_or(&v.key)
            } else {
                &v.key
            };
            lookup_col(tr, s, key, &mut v.eid);
        }
        // Counters and groups by action slot.
        for b in v.buckets.iter_mut() {
            b.n = 0;
        }
        for &i in s.idx() {
            let id = v.eid[i as usize];
            let len = v.plen[i as usize] as u64;
            let slot = if id == MISS {
                tr.miss[0] += 1;
                tr.miss[1] += len;
                tr.default.slot
            } else {
                if direct {
                    if let Some(d) = tr.direct.get_mut(id as usize) {
                        d[0] += 1;
                        d[1] += len;
                    }
                }
                tr.recs.get(id as usize).map_or(0, |e| e.slot)
            };
            if let Some(b) = v.buckets.get_mut(slot as usize) {
                b.push(i);
            }
        }
        let _ = tr;
        // Parameters, then each action over its group.
        for (k, body) in slots.iter().enumerate() {
            let mut g = match f.v.buckets.get(k) {
                Some(b) if !b.is_empty() => b.clone(),
                _ => continue,
            };
            body(f, &mut g);
        }
        if exits {
            s.keep_running(&f.v.flow);
        }
        match &arms {
            ArmsV::None => {}
            ArmsV::Hit(h, m) => {
                let (mut hs, mut ms) = (Sel::empty(), Sel::empty());
                for &i in s.idx() {
                    if f.v.eid[i as usize] != MISS {
                        hs.push(i);
                    } else {
                        ms.push(i);
                    }
                }
                run(h, f, &mut hs);
                run(m, f, &mut ms);
            }
            ArmsV::Switch(by_slot, bodies) => {
                let mut sels: [Sel; ARMS_MAX] = std::array::from_fn(|_| Sel::empty());
                {
                    let Some(tr) = f.ts.tables.get(ti) else {
                        return;
                    };
                    for &i in s.idx() {
                        let id = f.v.eid[i as usize];
                        let slot = if id == MISS {
                            tr.default.slot
                        } else {
                            tr.recs.get(id as usize).map_or(0, |e| e.slot)
                        };
                        if let Some(Some(b)) = by_slot.get(slot as usize) {
                            if let Some(x) = sels.get_mut(*b as usize) {
                                x.push(i);
                            }
                        }
                    }
                }
                for (b, x) in bodies.iter().zip(sels.iter_mut()) {
                    run(b, f, x);
                }
            }
        }
        if stops {
            s.keep_running(&f.v.flow);
        }
    })
}

/// Ones'-complement sum of the header bytes `b` as 16-bit words, the word at `d` (the
/// checksum field) read as zero, folded to 16 bits.
#[inline(always)]
pub(crate) fn hdr_sum(b: &[u8], d: usize) -> u64 {
    let mut acc = 0u64;
    if let Ok(b20) = <&[u8; 20]>::try_from(b) {
        // The IPv4 header without options: fixed length, unrolled.
        let mut k = 0;
        while k < 20 {
            acc += u32::from_be_bytes([b20[k], b20[k + 1], b20[k + 2], b20[k + 3]]) as u64;
            k += 4;
        }
    } else {
        let mut w = b.chunks_exact(2);
        for x in &mut w {
            acc += u16::from_be_bytes([x[0], x[1]]) as u64;
        }
        if let [x] = w.remainder() {
            acc += (*x as u64) << 8;
        }
    }
    if let Some(x) = b.get(d..d + 2) {
        let v = u16::from_be_bytes([x[0], x[1]]) as u64;
        // In the 32-bit word sum, an even-word field sat in the high half.
        acc -= if b.len() == 20 && d % 4 == 0 {
            v << 16
        } else {
            v
        };
    }
    fold64(acc)
}

/// Folds a ones'-complement sum (< 2^48) to 16 bits, branch-free.
#[inline(always)]
pub(crate) fn fold64(acc: u64) -> u64 {
    let a = (acc & 0xffff_ffff) + (acc >> 32);
    let a = (a & 0xffff) + (a >> 16);
    let a = (a & 0xffff) + (a >> 16);
    (a & 0xffff) + (a >> 16)
}

/// Folds a ones'-complement sum (< 2^32) to 16 bits: two folds suffice. Not
/// `sluice_wire::checksum::fold`, which loops until the sum fits: in the generated router
/// that measured 6 instructions per packet more (docs/p4.md, session 10).
#[inline(always)]
pub(crate) fn fold32(acc: u64) -> u64 {
    let a = (acc & 0xffff) + (acc >> 16);
    (a & 0xffff) + (a >> 16)
}

/// `verify_checksum` / `update_checksum` (csum16).
fn csum(cc: &mut Cc, c: &Csum) -> Op {
    let cond = filt(cc, &c.cond, 0);
    if let CsumSrc::Header { inst, dst_off } = c.src {
        let (h, d) = (inst as usize, dst_off as usize);
        let len = cc.p.headers.get(h).map_or(0, |x| x.len as usize);
        let ti = cc
            .tracked
            .iter()
            .position(|x| x.0 == inst && x.1 == dst_off);
        if c.verify {
            let err = c.err_slot as usize;
            let set_err = cc.read.get(err).copied().unwrap_or(true);
            if !set_err && ti.is_none() {
                // Nothing reads checksum_error and no update builds on it: skipped.
                return Box::new(|_, _| {});
            }
            return Box::new(move |f, s| {
                let mut t = Sel::empty();
                cond(f, s, &mut t);
                let v = &mut *f.v;
                let Some(ho) = v.hoff.get(h) else { return };
                for &i in t.idx() {
                    let i = i as usize;
                    let o = ho[i] as usize;
                    let Some(b) = f.pk.get(i).and_then(|p| p.get(o..o + len)) else {
                        continue;
                    };
                    let want = !hdr_sum(b, d) & 0xffff;
                    let have = b
                        .get(d..d + 2)
                        .map_or(0, |x| u16::from_be_bytes([x[0], x[1]]));
                    let ok = have as u64 == want;
                    if let Some(ti) = ti {
                        v.good[ti][i] = ok;
                    }
                    if !ok && set_err {
                        if let Some(m) = v.meta.get_mut(err) {
                            m[i] = 1;
                        }
                    }
                }
            });
        }
        return Box::new(move |f, s| {
            let mut t = Sel::empty();
            cond(f, s, &mut t);
            let v = &mut *f.v;
            let Some(ho) = v.hoff.get(h) else { return };
            for &i in t.idx() {
                let i = i as usize;
                let o = ho[i] as usize;
                let Some(b) = f.pk.get_mut(i).and_then(|p| p.get_mut(o..o + len)) else {
                    continue;
                };
                let Some(x) = b.get(d..d + 2) else { continue };
                let old = u16::from_be_bytes([x[0], x[1]]) as u64;
                let ck = match ti {
                    // RFC 1624 eqn. 3: HC' = ~(~HC + sum(~m + m')).
                    Some(ti) if v.good[ti][i] => !fold64((!old & 0xffff) + v.delta[ti][i]) & 0xffff,
                    _ => !hdr_sum(b, d) & 0xffff,
                };
                if let Some(x) = b.get_mut(d..d + 2) {
                    x.copy_from_slice(&(ck as u16).to_be_bytes());
                }
            }
        });
    }
    // Any field list: the fields concatenated into 16-bit words.
    let CsumSrc::Fields(fs) = &c.src else {
        return Box::new(|_, _| {});
    };
    let fields: Vec<(Ex, u16)> = fs
        .iter()
        .enumerate()
        .map(|(k, (e, w))| (ex(cc, e, k, 0), *w))
        .collect();
    let widths: Vec<u16> = fields.iter().map(|x| x.1).collect();
    let exprs: Vec<Ex> = fields.into_iter().map(|x| x.0).collect();
    let verify = c.verify;
    let (dst_e, err) = (ex(cc, &c.dst_e, exprs.len(), 0), c.err_slot as usize);
    let dst_d = exprs.len();
    let put = store(cc, &c.dst, exprs.len() + 1);
    let out_d = exprs.len() + 1;
    cc.tmp(out_d);
    Box::new(move |f, s| {
        let mut t = Sel::empty();
        cond(f, s, &mut t);
        if t.is_empty() {
            return;
        }
        for e in &exprs {
            e(f, &t);
        }
        if verify {
            dst_e(f, &t);
        }
        let v = &mut *f.v;
        for &i in t.idx() {
            let i = i as usize;
            let mut acc = 0u64;
            let mut word = 0u64;
            let mut bits = 0u32;
            for (k, &w) in widths.iter().enumerate() {
                let x = v.tmp.get(k).map_or(0, |c| c[i]);
                let mut w = w as u32;
                while w > 0 {
                    let take = w.min(16 - bits);
                    let chunk = (x.checked_shr(w - take).unwrap_or(0)) & ((1u64 << take) - 1);
                    word = (word << take) | chunk;
                    bits += take;
                    w -= take;
                    if bits == 16 {
                        acc += word;
                        word = 0;
                        bits = 0;
                    }
                }
            }
            if bits > 0 {
                acc += word << (16 - bits);
            }
            let ck = !fold64(acc) & 0xffff;
            if verify {
                let have = v.tmp.get(dst_d).map_or(0, |c| c[i]);
                if have != ck {
                    if let Some(m) = v.meta.get_mut(err) {
                        m[i] = 1;
                    }
                }
            } else if let Some(c) = v.tmp.get_mut(out_d) {
                c[i] = ck;
            }
        }
        if !verify {
            put(f, &mut t);
        }
    })
}

/// Parser states in topological order from `start` (the graph is acyclic).
fn topo(p: &Program) -> Vec<u16> {
    fn visit(p: &Program, s: u16, mark: &mut [u8], out: &mut Vec<u16>) {
        if mark.get(s as usize) != Some(&0) {
            return;
        }
        mark[s as usize] = 1;
        if let Some(st) = p.states.get(s as usize) {
            let ts: Vec<Target> = match &st.trans {
                Trans::Goto(t) => vec![*t],
                Trans::Select { cases, .. } => cases.iter().map(|c| c.1).collect(),
            };
            for t in ts {
                if let Target::State(n) = t {
                    visit(p, n, mark, out);
                }
            }
        }
        mark[s as usize] = 2;
        out.push(s);
    }
    let mut mark = vec![0u8; p.states.len()];
    let mut out = Vec::new();
    visit(p, p.start, &mut mark, &mut out);
    out.reverse();
    out
}

impl VCode {
    /// Compiles `p` for the vector executor (after any multi-node split of its ingress).
    pub fn new(p: &Program) -> Result<VCode, String> {
        supported(p)?;
        let mut read = vec![false; p.meta_slots.max(1)];
        all_exprs(p, &mut |e| {
            if let E::M(s) = e {
                if let Some(r) = read.get_mut(*s as usize) {
                    *r = true;
                }
            }
        });
        // Checksums updated incrementally: an update over one header whose checksum is
        // verified with the same layout, when something reads the verification's result
        // (otherwise verification is skipped and the update sums the header).
        let mut verified = Vec::new();
        let mut updated = Vec::new();
        all_stmts(p, &mut |s| {
            if let S::Csum(c) = s {
                if let CsumSrc::Header { inst, dst_off } = c.src {
                    if c.verify {
                        if read.get(c.err_slot as usize) == Some(&true) {
                            verified.push((inst, dst_off));
                        }
                    } else {
                        updated.push((inst, dst_off));
                    }
                }
            }
        });
        let mut tracked: Vec<(u8, u16)> = updated
            .into_iter()
            .filter(|x| verified.contains(x))
            .collect();
        tracked.dedup();
        let mut cc = Cc {
            p,
            tmps: 1,
            depth: 1,
            tracked,
            read: read.clone(),
            ptab: None,
        };
        let std = p.std;
        let mut reset: Vec<u16> = (0..p.meta_slots as u16)
            .filter(|&s| read.get(s as usize) == Some(&true))
            .collect();
        for s in [std.egress_spec, std.parser_error, std.checksum_error] {
            if !reset.contains(&s) {
                reset.push(s);
            }
        }
        let states = p
            .states
            .iter()
            .map(|st| VStateCode {
                steps: st
                    .body
                    .iter()
                    .map(|x| match x {
                        S::Extract(i) => {
                            PStep::Extract(*i, p.headers.get(*i as usize).map_or(0, |h| h.len))
                        }
                        x => PStep::Stmt(stmt(&mut cc, x, 0)),
                    })
                    .collect(),
                keys: match &st.trans {
                    Trans::Goto(_) => Vec::new(),
                    Trans::Select { keys, .. } => keys
                        .iter()
                        .enumerate()
                        .map(|(k, e)| ex(&mut cc, e, k, 0))
                        .collect(),
                },
                trans: st.trans.clone(),
                one_key: match &st.trans {
                    Trans::Select { keys, cases } if keys.len() == 1 => cases
                        .iter()
                        .map(|(ks, t)| ks.first().map(|k| (*k, *t)))
                        .collect(),
                    _ => None,
                },
            })
            .collect();
        let verify = block(&mut cc, &p.verify, 0);
        let ingress = block(&mut cc, &p.ingress, 0);
        let egress = block(&mut cc, &p.egress, 0);
        let compute = block(&mut cc, &p.compute, 0);
        Ok(VCode {
            meta_slots: p.meta_slots,
            tmps: cc.tmps.max(16),
            param_cols: PARAMS_MAX * (cc.depth + 1),
            n_inst: p.headers.len(),
            n_states: p.states.len(),
            tracked: cc.tracked,
            reset,
            std,
            read_in_port: read.get(std.ingress_port as usize) == Some(&true),
            read_len: read.get(std.packet_length as usize) == Some(&true),
            order: topo(p),
            states,
            verify,
            ingress,
            egress,
            compute,
        })
    }

    /// Resets the frame's per-packet state (packets `0..n`).
    fn begin(&self, v: &mut VState, n: usize) {
        let n = n.min(N);
        for h in v.hoff.iter_mut() {
            h[..n].fill(NO_HDR);
        }
        v.valid[..n].fill(0);
        v.pos[..n].fill(0);
        v.rejected[..n].fill(false);
        v.flow[..n].fill(0);
        for &s in &self.reset {
            if let Some(c) = v.meta.get_mut(s as usize) {
                c[..n].fill(0);
            }
        }
        for (d, g) in v.delta.iter_mut().zip(v.good.iter_mut()) {
            d[..n].fill(0);
            g[..n].fill(false);
        }
        if self.read_in_port {
            if let Some(c) = v.meta.get_mut(self.std.ingress_port as usize) {
                for (c, &x) in c[..n].iter_mut().zip(&v.inport) {
                    *c = x as u64 & 0x1ff;
                }
            }
        }
        if self.read_len {
            if let Some(c) = v.meta.get_mut(self.std.packet_length as usize) {
                for (c, &x) in c[..n].iter_mut().zip(&v.plen) {
                    *c = x as u64;
                }
            }
        }
    }

    /// The parser over packets `0..n`.
    fn parse(&self, f: &mut F<'_, '_>, n: usize) {
        let pe = self.std.parser_error as usize;
        for s in f.v.states.iter_mut() {
            s.n = 0;
        }
        let Some(first) = self.order.first() else {
            return;
        };
        if let Some(s) = f.v.states.get_mut(*first as usize) {
            *s = Sel::all(n);
        }
        for &si in &self.order {
            let Some(code) = self.states.get(si as usize) else {
                continue;
            };
            let mut s = match f.v.states.get(si as usize) {
                Some(s) if !s.is_empty() => s.clone(),
                _ => continue,
            };
            for step in &code.steps {
                match step {
                    PStep::Extract(h, len) => {
                        let (h, len) = (*h as usize, *len as u32);
                        let VState {
                            meta,
                            hoff,
                            pos,
                            valid,
                            ..
                        } = &mut *f.v;
                        let (Some(perr), Some(ho)) = (meta.get_mut(pe), hoff.get_mut(h)) else {
                            continue;
                        };
                        let mut k = 0;
                        for j in 0..s.n.min(N) {
                            let i = s.i[j];
                            let x = i as usize;
                            let have = f.pk.get(x).map_or(0, |p| p.len()) as u32;
                            if pos[x] + len > have {
                                // PacketTooShort: the packet continues into ingress.
                                perr[x] = ERR_PACKET_TOO_SHORT;
                                continue;
                            }
                            ho[x] = pos[x] as u16;
                            valid[x] |= 1 << h;
                            pos[x] += len;
                            s.i[k & (N - 1)] = i;
                            k += 1;
                        }
                        s.n = k;
                    }
                    PStep::Stmt(op) => op(f, &mut s),
                }
            }
            match &code.trans {
                Trans::Goto(Target::State(t)) => {
                    if let Some(d) = f.v.states.get_mut(*t as usize) {
                        for &i in s.idx() {
                            d.push(i);
                        }
                    }
                }
                Trans::Goto(Target::Reject) => {
                    for &i in s.idx() {
                        f.v.rejected[i as usize] = true;
                    }
                }
                Trans::Goto(Target::Accept) => {}
                Trans::Select { cases, .. } => {
                    for k in &code.keys {
                        k(f, &s);
                    }
                    let v = &mut *f.v;
                    if let (Some(one), Some(t0)) = (&code.one_key, v.tmp.first()) {
                        // One key: its column against the cases in order.
                        for &i in s.idx() {
                            let val = t0[i as usize];
                            let hit = one.iter().find(|(c, _)| c.matches(val));
                            match hit {
                                Some((_, Target::State(t))) => {
                                    if let Some(d) = v.states.get_mut(*t as usize) {
                                        d.push(i);
                                    }
                                }
                                Some((_, Target::Reject)) => v.rejected[i as usize] = true,
                                Some(_) => {}
                                None => {
                                    if let Some(m) = v.meta.get_mut(pe) {
                                        m[i as usize] = ERR_NO_MATCH;
                                    }
                                }
                            }
                        }
                        continue;
                    }
                    for &i in s.idx() {
                        let x = i as usize;
                        let hit = cases.iter().find(|(ks, _)| {
                            ks.iter()
                                .enumerate()
                                .all(|(k, c)| c.matches(v.tmp.get(k).map_or(0, |c| c[x])))
                        });
                        match hit {
                            Some((_, Target::State(t))) => {
                                if let Some(d) = v.states.get_mut(*t as usize) {
                                    d.push(i);
                                }
                            }
                            Some((_, Target::Reject)) => v.rejected[x] = true,
                            Some(_) => {}
                            None => {
                                if let Some(m) = v.meta.get_mut(pe) {
                                    m[x] = ERR_NO_MATCH;
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// Runs the whole pipeline over packets `0..n` of the frame (`v.inport`, `v.plen` and
    /// `pk` set by the caller); `out[i]` says what became of packet `i`.
    pub fn run_frame(
        &self,
        v: &mut VState,
        pk: &mut [&mut [u8]],
        ts: &mut ThreadState,
        shared: &Shared,
        out: &mut [VOut],
    ) {
        let n = pk.len().min(N).min(out.len());
        self.begin(v, n);
        let mut f = F { v, pk, ts, shared };
        self.parse(&mut f, n);
        let all = Sel::all(n);
        let mut s = all.clone();
        run(&self.verify, &mut f, &mut s);
        let mut s = all.clone();
        run(&self.ingress, &mut f, &mut s);
        self.finish(&mut f, &all, out);
    }

    /// After ingress: the traffic manager, egress, compute checksum; the verdicts.
    fn finish(&self, f: &mut F<'_, '_>, all: &Sel, out: &mut [VOut]) {
        let (es, ep) = (self.std.egress_spec as usize, self.std.egress_port as usize);
        let mut s = Sel::empty();
        {
            let v = &mut *f.v;
            let n = all.len();
            v.flow[..n].fill(0);
            match v.meta.get(es) {
                Some(c) => v.es[..n].copy_from_slice(&c[..n]),
                None => v.es[..n].fill(DROP_PORT),
            }
            let mut scratch = [0u64; N];
            let epc = v.meta.get_mut(ep).unwrap_or(&mut scratch);
            for &i in all.idx() {
                let x = i as usize;
                let e = v.es[x];
                if e == DROP_PORT {
                    if let Some(o) = out.get_mut(x) {
                        *o = VOut::Drop;
                    }
                } else {
                    epc[x] = e;
                    s.push(i);
                }
            }
        }
        let mut t = s.clone();
        run(&self.egress, f, &mut t);
        let mut c = Sel::empty();
        {
            let v = &mut *f.v;
            for &i in s.idx() {
                let x = i as usize;
                v.flow[x] = 0;
                if v.meta.get(es).map_or(DROP_PORT, |c| c[x]) == DROP_PORT {
                    if let Some(o) = out.get_mut(x) {
                        *o = VOut::Drop;
                    }
                } else {
                    c.push(i);
                }
            }
        }
        let mut t = c.clone();
        run(&self.compute, f, &mut t);
        let v = &*f.v;
        for &i in c.idx() {
            let x = i as usize;
            if let Some(o) = out.get_mut(x) {
                *o = if v.es[x] == CPU_PORT {
                    VOut::Punt
                } else {
                    VOut::Port(v.es[x] as u32)
                };
            }
        }
    }

    /// The parser errors of the frame's packets after [`VCode::run_frame`].
    pub fn parser_errors<'v>(&self, v: &'v VState) -> Option<&'v Col> {
        v.meta.get(self.std.parser_error as usize)
    }
}

/// Runs packets through the vector executor on plain byte vectors (tests, the reference
/// comparison with [`crate::exec::simulate`]): the outcome of each, as `simulate` says it.
pub fn simulate_frame(
    code: &VCode,
    ts: &mut ThreadState,
    shared: &Shared,
    pkts: &[(Vec<u8>, u32)],
) -> Vec<crate::exec::Outcome> {
    use crate::exec::Outcome;
    let mut v = VState::new(code);
    let mut res = Vec::new();
    for chunk in pkts.chunks(N) {
        let mut bufs: Vec<Vec<u8>> = chunk.iter().map(|x| x.0.clone()).collect();
        for (i, (b, port)) in chunk.iter().enumerate() {
            v.inport[i] = *port;
            v.plen[i] = b.len() as u32;
        }
        let mut out = vec![VOut::Drop; chunk.len()];
        {
            let mut pk: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
            code.run_frame(&mut v, &mut pk, ts, shared, &mut out);
        }
        for (o, b) in out.into_iter().zip(bufs) {
            res.push(match o {
                VOut::Drop => Outcome::Drop,
                VOut::Punt => Outcome::Punt(b),
                VOut::Port(p) => Outcome::Out(p, b),
            });
        }
    }
    res
}
