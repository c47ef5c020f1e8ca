//! The executable form of a [`Program`]: every expression and statement of the resolved IR
//! compiled once, at load time, into a closure specialised for its operands (closure
//! compilation). A header field load is a closure that reads its bytes at a constant offset,
//! `x - 1` is one closure with the constant captured, a table application is one closure
//! holding its table index, key closures and branch blocks, and so on. Running a packet is
//! then a sequence of direct calls to small functions, without walking the tree or matching
//! on the node kind of every operand.
//!
//! Nothing here allocates per packet. Action bodies are looked up by index in
//! [`Code::actions`] at run time (actions may call actions).

use crate::compile::eval_bin;
use crate::exec::{fold, hload, hstore, Ctx, Exec, Flow, GREEN};
use crate::ir::*;
use std::sync::atomic::Ordering;

/// A compiled expression.
pub type EF = Box<dyn Fn(&Exec<'_>, &Ctx, &[u64]) -> u64 + Send + Sync>;
/// A compiled statement.
pub type SF = Box<dyn Fn(&mut Exec<'_>, &mut Ctx, &[u64]) -> Flow + Send + Sync>;
/// A compiled store into a place.
type ST = Box<dyn Fn(&Exec<'_>, &mut Ctx, u64) + Send + Sync>;
/// A compiled statement list.
pub type Block = Box<[SF]>;

/// One step of a parser state.
pub enum Step {
    /// Extract header instance `.0` (offset `.1`, length `.2` in the header area).
    Extract(u8, u16, u16),
    Stmt(SF),
}

/// A compiled parser state (its transition's cases stay in the [`Program`]).
pub struct StateCode {
    pub steps: Box<[Step]>,
    /// The select keys (empty for a plain transition).
    pub keys: Box<[EF]>,
}

/// A whole program, compiled.
pub struct Code {
    pub actions: Box<[Block]>,
    pub states: Box<[StateCode]>,
    pub verify: Block,
    /// One closure per top-level ingress statement (multi-node segments slice it).
    pub ingress: Block,
    pub egress: Block,
    pub compute: Block,
}

impl Code {
    /// Compiles `p` (after any multi-node split of its ingress).
    pub fn new(p: &Program) -> Code {
        Code {
            actions: p.actions.iter().map(|a| block(p, &a.body)).collect(),
            states: p
                .states
                .iter()
                .map(|s| StateCode {
                    steps: s
                        .body
                        .iter()
                        .map(|x| match x {
                            S::Extract(i) => {
                                let h = &p.headers[*i as usize];
                                Step::Extract(*i, h.off, h.len)
                            }
                            x => Step::Stmt(stmt(p, x)),
                        })
                        .collect(),
                    keys: match &s.trans {
                        Trans::Goto(_) => Box::new([]),
                        Trans::Select { keys, .. } => keys.iter().map(expr).collect(),
                    },
                })
                .collect(),
            verify: block(p, &p.verify),
            ingress: block(p, &p.ingress),
            egress: block(p, &p.egress),
            compute: block(p, &p.compute),
        }
    }
}

/// Runs a compiled statement list.
#[inline(always)]
pub fn run(b: &[SF], x: &mut Exec<'_>, c: &mut Ctx, p: &[u64]) -> Flow {
    for s in b {
        let f = s(x, c, p);
        if f != Flow::Next {
            return f;
        }
    }
    Flow::Next
}

/// Runs action `a` with `params`: `return` ends the action only.
#[inline(always)]
pub fn call(x: &mut Exec<'_>, c: &mut Ctx, a: u16, params: &[u64]) -> Flow {
    let code = x.code;
    match run(&code.actions[a as usize], x, c, params) {
        Flow::Exit => Flow::Exit,
        _ => Flow::Next,
    }
}

fn block(p: &Program, b: &[S]) -> Block {
    b.iter().map(|s| stmt(p, s)).collect()
}

/// A metadata slot index that needs no bounds check (`META_MAX` is a power of two and the
/// compiler only hands out slots below it).
#[inline(always)]
fn ms(s: u16) -> usize {
    s as usize & (META_MAX - 1)
}

/// The 8 header bytes at `off` as a big-endian integer (`off + 8 <= HDR_MAX`).
#[inline(always)]
fn win(h: &[u8; HDR_MAX], off: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&h[off..off + 8]);
    u64::from_be_bytes(b)
}

/// Folds a ones' complement sum to 16 bits (0 only for an all-zero sum).
#[inline(always)]
fn fold64(mut acc: u64) -> u64 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc
}

/// Compiles an expression.
pub fn expr(e: &E) -> EF {
    match e {
        E::Const(v) => {
            let v = *v;
            Box::new(move |_, _, _| v)
        }
        E::M(s) => {
            let s = ms(*s);
            Box::new(move |_, c, _| c.meta[s & (META_MAX - 1)])
        }
        E::MI(i, s) => {
            let (i, s) = (*i as usize, *s);
            Box::new(move |x, c, _| c.meta[(x.prog.meta_bases[i] + s) as usize])
        }
        E::H(a) => {
            let off = a.off as usize;
            match a.kind {
                HKind::B8 => Box::new(move |_, c, _| c.hdr[off] as u64),
                HKind::B16 => {
                    Box::new(move |_, c, _| u16::from_be_bytes([c.hdr[off], c.hdr[off + 1]]) as u64)
                }
                HKind::B32 => Box::new(move |_, c, _| {
                    u32::from_be_bytes([c.hdr[off], c.hdr[off + 1], c.hdr[off + 2], c.hdr[off + 3]])
                        as u64
                }),
                HKind::Bits { n, shift, mask } if off + 8 <= HDR_MAX && n > 0 => {
                    // One 8-byte big-endian window load.
                    let sh = 64 - 8 * n as u32 + shift as u32;
                    Box::new(move |_, c, _| (win(&c.hdr, off) >> sh) & mask)
                }
                k => Box::new(move |_, c, _| hload(&c.hdr, off, k)),
            }
        }
        E::HI(i, a) => {
            let (i, a) = (*i as usize, *a);
            Box::new(move |x, c, _| hload(&c.hdr, (x.prog.hdr_bases[i] + a.off) as usize, a.kind))
        }
        E::Valid(i) => {
            let i = *i;
            Box::new(move |_, c, _| (c.valid >> i) & 1)
        }
        E::Param(i) => {
            let i = *i as usize;
            Box::new(move |_, _, p| p.get(i).copied().unwrap_or(0))
        }
        E::Un(op, a, m) => {
            let (fa, m) = (expr(a), *m);
            match op {
                Un::Not => Box::new(move |x, c, p| (fa(x, c, p) == 0) as u64),
                Un::BitNot => Box::new(move |x, c, p| !fa(x, c, p) & m),
                Un::Neg => Box::new(move |x, c, p| fa(x, c, p).wrapping_neg() & m),
            }
        }
        E::Bin(op, a, b, m) => bin(*op, a, b, *m),
        E::Slice(a, sh, m) => {
            let (fa, sh, m) = (expr(a), *sh, *m);
            Box::new(move |x, c, p| (fa(x, c, p) >> sh) & m)
        }
        E::Concat(a, b, wb) => {
            let (fa, fb, wb) = (expr(a), expr(b), *wb);
            Box::new(move |x, c, p| (fa(x, c, p) << wb) | fb(x, c, p))
        }
        E::Mux(k, a, b) => {
            let (fk, fa, fb) = (expr(k), expr(a), expr(b));
            Box::new(move |x, c, p| {
                if fk(x, c, p) != 0 {
                    fa(x, c, p)
                } else {
                    fb(x, c, p)
                }
            })
        }
    }
}

/// A binary operator; the common forms with a constant right operand are specialised.
fn bin(op: Bin, a: &E, b: &E, m: u64) -> EF {
    let fa = expr(a);
    match op {
        Bin::LAnd => {
            let fb = expr(b);
            return Box::new(move |x, c, p| (fa(x, c, p) != 0 && fb(x, c, p) != 0) as u64);
        }
        Bin::LOr => {
            let fb = expr(b);
            return Box::new(move |x, c, p| (fa(x, c, p) != 0 || fb(x, c, p) != 0) as u64);
        }
        _ => {}
    }
    if let E::Const(k) = *b {
        return match op {
            Bin::Add => Box::new(move |x, c, p| fa(x, c, p).wrapping_add(k) & m),
            Bin::Sub => Box::new(move |x, c, p| fa(x, c, p).wrapping_sub(k) & m),
            Bin::And => Box::new(move |x, c, p| fa(x, c, p) & k),
            Bin::Or => Box::new(move |x, c, p| fa(x, c, p) | k),
            Bin::Eq => Box::new(move |x, c, p| (fa(x, c, p) == k) as u64),
            Bin::Ne => Box::new(move |x, c, p| (fa(x, c, p) != k) as u64),
            Bin::Lt => Box::new(move |x, c, p| (fa(x, c, p) < k) as u64),
            Bin::Le => Box::new(move |x, c, p| (fa(x, c, p) <= k) as u64),
            Bin::Gt => Box::new(move |x, c, p| (fa(x, c, p) > k) as u64),
            Bin::Ge => Box::new(move |x, c, p| (fa(x, c, p) >= k) as u64),
            _ => Box::new(move |x, c, p| eval_bin(op, fa(x, c, p), k, m)),
        };
    }
    let fb = expr(b);
    match op {
        Bin::Add => Box::new(move |x, c, p| fa(x, c, p).wrapping_add(fb(x, c, p)) & m),
        Bin::Sub => Box::new(move |x, c, p| fa(x, c, p).wrapping_sub(fb(x, c, p)) & m),
        Bin::Eq => Box::new(move |x, c, p| (fa(x, c, p) == fb(x, c, p)) as u64),
        Bin::Ne => Box::new(move |x, c, p| (fa(x, c, p) != fb(x, c, p)) as u64),
        _ => Box::new(move |x, c, p| eval_bin(op, fa(x, c, p), fb(x, c, p), m)),
    }
}

/// Compiles a place as a value (for read-modify-write of slices).
fn load(lv: &Lv) -> EF {
    match lv {
        Lv::M(s, _) => expr(&E::M(*s)),
        Lv::MI(i, s, _) => expr(&E::MI(*i, *s)),
        Lv::H(a) => expr(&E::H(*a)),
        Lv::HI(i, a) => expr(&E::HI(*i, *a)),
        Lv::Slice(x, sh, m) => {
            let (f, sh, m) = (load(x), *sh, *m);
            Box::new(move |x, c, p| (f(x, c, p) >> sh) & m)
        }
    }
}

/// Compiles a store into a place. A store into a field of an invalid header writes
/// nothing (P4-16 lets it change no defined state), as in the vector executor and the
/// generated code, whose headers live in the packet: the field keeps reading 0.
fn store(p: &Program, lv: &Lv) -> ST {
    let raw = store_raw(lv);
    match header_of(p, lv) {
        Some(h) if h < 64 => {
            let b = 1u64 << h;
            Box::new(move |x, c, v| {
                if c.valid & b != 0 {
                    raw(x, c, v)
                }
            })
        }
        _ => raw,
    }
}

/// The header instance a place is in (`None`: metadata).
fn header_of(p: &Program, lv: &Lv) -> Option<usize> {
    match lv {
        Lv::M(..) | Lv::MI(..) => None,
        Lv::H(a) => p.inst_of(a.off).map(|(h, _)| h),
        Lv::HI(i, _) => Some(*i as usize),
        Lv::Slice(inner, ..) => header_of(p, inner),
    }
}

/// [`store`] without the validity check.
fn store_raw(lv: &Lv) -> ST {
    match lv {
        Lv::M(s, m) => {
            let (s, m) = (ms(*s), *m);
            Box::new(move |_, c, v| c.meta[s & (META_MAX - 1)] = v & m)
        }
        Lv::MI(i, s, m) => {
            let (i, s, m) = (*i as usize, *s, *m);
            Box::new(move |x, c, v| c.meta[(x.prog.meta_bases[i] + s) as usize] = v & m)
        }
        Lv::H(a) => {
            let (off, k) = (a.off as usize, a.kind);
            match k {
                HKind::B8 => Box::new(move |_, c, v| c.hdr[off] = v as u8),
                HKind::B16 => Box::new(move |_, c, v| {
                    c.hdr[off..off + 2].copy_from_slice(&(v as u16).to_be_bytes())
                }),
                HKind::B32 => Box::new(move |_, c, v| {
                    c.hdr[off..off + 4].copy_from_slice(&(v as u32).to_be_bytes())
                }),
                HKind::Bits { n, shift: 0, mask }
                    if n > 0 && mask == crate::ir::mask(8 * n as u16) =>
                {
                    // Whole bytes (a MAC address): write them.
                    let n = n as usize;
                    Box::new(move |_, c, v| {
                        c.hdr[off..off + n].copy_from_slice(&v.to_be_bytes()[8 - n..])
                    })
                }
                HKind::Bits { n, shift, mask } if off + 8 <= HDR_MAX && n > 0 => {
                    // Read-modify-write of one 8-byte big-endian window.
                    let sh = 64 - 8 * n as u32 + shift as u32;
                    let m = mask << sh;
                    Box::new(move |_, c, v| {
                        let w = (win(&c.hdr, off) & !m) | ((v & mask) << sh);
                        c.hdr[off..off + 8].copy_from_slice(&w.to_be_bytes());
                    })
                }
                k => Box::new(move |_, c, v| hstore(&mut c.hdr, off, k, v)),
            }
        }
        Lv::HI(i, a) => {
            let (i, a) = (*i as usize, *a);
            Box::new(move |x, c, v| {
                hstore(
                    &mut c.hdr,
                    (x.prog.hdr_bases[i] + a.off) as usize,
                    a.kind,
                    v,
                )
            })
        }
        Lv::Slice(inner, sh, m) => {
            let (old, put, sh, m) = (load(inner), store_raw(inner), *sh, *m);
            Box::new(move |x, c, v| {
                let o = old(x, c, &[]);
                let mm = m << sh;
                put(x, c, (o & !mm) | ((v & m) << sh))
            })
        }
    }
}

/// Compiles a statement.
fn stmt(p: &Program, s: &S) -> SF {
    match s {
        S::Set(lv, e) => {
            let f = expr(e);
            match lv {
                Lv::M(s, m) => {
                    let (s, m) = (ms(*s), *m);
                    Box::new(move |x, c, pr| {
                        c.meta[s & (META_MAX - 1)] = f(x, c, pr) & m;
                        Flow::Next
                    })
                }
                lv => {
                    let st = store(p, lv);
                    Box::new(move |x, c, pr| {
                        let v = f(x, c, pr);
                        st(x, c, v);
                        Flow::Next
                    })
                }
            }
        }
        // The parser's steps handle extraction; elsewhere the compiler never emits it.
        S::Extract(_) => Box::new(|_, _, _| Flow::Next),
        S::SetValid(i) => {
            let b = 1u64 << i;
            Box::new(move |_, c, _| {
                c.valid |= b;
                Flow::Next
            })
        }
        S::SetInvalid(i) => {
            let b = 1u64 << i;
            Box::new(move |_, c, _| {
                c.valid &= !b;
                Flow::Next
            })
        }
        S::If(e, a, b) => {
            let (f, a, b) = (expr(e), block(p, a), block(p, b));
            Box::new(move |x, c, pr| {
                if f(x, c, pr) != 0 {
                    run(&a, x, c, pr)
                } else {
                    run(&b, x, c, pr)
                }
            })
        }
        S::Apply(ap) => apply(p, ap),
        S::Call(a, args) => {
            let a = *a;
            let args: Box<[EF]> = args.iter().take(PARAMS_MAX).map(expr).collect();
            Box::new(move |x, c, pr| {
                let mut v = [0u64; PARAMS_MAX];
                for (v, f) in v.iter_mut().zip(args.iter()) {
                    *v = f(x, c, pr);
                }
                call(x, c, a, &v[..args.len()])
            })
        }
        S::Drop => {
            let s = ms(p.std.egress_spec);
            Box::new(move |_, c, _| {
                c.meta[s & (META_MAX - 1)] = DROP_PORT;
                Flow::Next
            })
        }
        S::Exit => Box::new(|_, _, _| Flow::Exit),
        S::Return => Box::new(|_, _, _| Flow::Return),
        S::Count(k, e) => {
            let (k, f) = (*k as usize, expr(e));
            Box::new(move |x, c, pr| {
                let i = f(x, c, pr) as usize;
                let len = x.pkt_len;
                if let Some(v) = x.ts.counters[k].get_mut(i) {
                    v[0] += 1;
                    v[1] += len;
                }
                Flow::Next
            })
        }
        S::RegRead(r, lv, e) => {
            let (r, st, f) = (*r as usize, store(p, lv), expr(e));
            Box::new(move |x, c, pr| {
                let i = f(x, c, pr) as usize;
                let v = x.shared.registers[r]
                    .get(i)
                    .map_or(0, |a| a.load(Ordering::Relaxed));
                st(x, c, v);
                Flow::Next
            })
        }
        S::RegWrite(r, ei, ev) => {
            let (r, fi, fv) = (*r as usize, expr(ei), expr(ev));
            let m = mask(p.registers[r].width);
            Box::new(move |x, c, pr| {
                let i = fi(x, c, pr) as usize;
                let v = fv(x, c, pr) & m;
                if let Some(a) = x.shared.registers[r].get(i) {
                    a.store(v, Ordering::Relaxed);
                }
                Flow::Next
            })
        }
        S::Meter(m, ei, lv) => {
            let (mi, fi, st) = (*m as usize, expr(ei), store(p, lv));
            let bytes = p.meters[mi].bytes;
            Box::new(move |x, c, pr| {
                let i = fi(x, c, pr) as usize;
                let units = if bytes { x.pkt_len } else { 1 };
                let col = x.shared.meters[mi]
                    .get(i)
                    .map_or(GREEN, |a| a.execute(units, x.now_ns));
                st(x, c, col);
                Flow::Next
            })
        }
        S::Csum(cs) => csum(p, cs),
    }
}

/// What follows a table's action.
enum ArmsCode {
    None,
    Hit(Block, Block),
    Switch {
        by_action: Box<[Option<u16>]>,
        bodies: Box<[Block]>,
        default: Option<u16>,
    },
}

/// A table application: keys, lookup, the entry's action, then the branch on the result.
fn apply(p: &Program, ap: &Apply) -> SF {
    let ti = ap.table as usize;
    let t = &p.tables[ti];
    let keys: Box<[EF]> = t.keys.iter().take(16).map(|k| expr(&k.e)).collect();
    let direct = t.direct_counter.is_some();
    let resolved = p.opts.resolved;
    let table_actions: Box<[u16]> = t.actions.clone().into_boxed_slice();
    let nparams: Box<[usize]> = p.actions.iter().map(|a| a.params.len()).collect();
    let arms = match &ap.arms {
        Arms::None => ArmsCode::None,
        Arms::Hit(h, m) => ArmsCode::Hit(block(p, h), block(p, m)),
        Arms::Switch {
            by_action,
            bodies,
            default,
        } => ArmsCode::Switch {
            by_action: by_action.clone().into_boxed_slice(),
            bodies: bodies.iter().map(|b| block(p, b)).collect(),
            default: *default,
        },
    };
    Box::new(move |x, c, pr| {
        let tr = &x.ts.tables[ti];
        let id = match keys.len() {
            0 => None,
            1 => tr.lookup(tr.key_of(&[keys[0](x, c, pr)])),
            n => {
                let mut vals = [0u64; 16];
                for (v, k) in vals.iter_mut().zip(keys.iter()) {
                    *v = k(x, c, pr);
                }
                tr.lookup(tr.key_of(&vals[..n]))
            }
        };
        let len = x.pkt_len;
        let tr = &mut x.ts.tables[ti];
        let (action, params) = match id {
            Some(id) => {
                if direct {
                    let d = &mut tr.direct[id as usize];
                    d[0] += 1;
                    d[1] += len;
                }
                let e = &tr.recs[id as usize];
                if resolved {
                    (e.action, e.params)
                } else {
                    // Not pre-resolved: the table-local slot and the parameter pool.
                    let a = table_actions[e.slot as usize];
                    let mut ps = [0u64; PARAMS_MAX];
                    let (o, np) = (e.pool_off as usize, e.nparams as usize);
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
        let np = nparams[action as usize];
        if call(x, c, action, &params[..np]) == Flow::Exit {
            return Flow::Exit;
        }
        match &arms {
            ArmsCode::None => Flow::Next,
            ArmsCode::Hit(h, m) => run(if id.is_some() { h } else { m }, x, c, pr),
            ArmsCode::Switch {
                by_action,
                bodies,
                default,
            } => match by_action
                .get(action as usize)
                .copied()
                .flatten()
                .or(*default)
            {
                Some(b) => run(&bodies[b as usize], x, c, pr),
                None => Flow::Next,
            },
        }
    })
}

/// Sum of the header bytes `[o, o + l)` as 16-bit words (`l` of any size), the destination
/// word at `d` read as zero, folded to 16 bits.
fn hdr_sum_any(o: usize, l: usize, d: usize) -> EF {
    // The destination word as it was added: the high half of a 32-bit word, or a 16-bit
    // word (in the tail).
    let hi = d % 4 == 0 && d + 4 <= l - l % 4;
    Box::new(move |_, c, _| {
        let b = &c.hdr[o..o + l];
        let mut acc = 0u64;
        let mut w = b.chunks_exact(4);
        for x in &mut w {
            acc += u32::from_be_bytes([x[0], x[1], x[2], x[3]]) as u64;
        }
        let r = w.remainder();
        if r.len() >= 2 {
            acc += u16::from_be_bytes([r[0], r[1]]) as u64;
        }
        if r.len() % 2 == 1 {
            acc += (r[r.len() - 1] as u64) << 8;
        }
        // The destination field reads as zero.
        if d + 1 < l {
            let v = u16::from_be_bytes([b[d], b[d + 1]]) as u64;
            acc -= if hi { v << 16 } else { v };
        }
        fold64(acc)
    })
}

/// [`hdr_sum_any`] for a header of `N` bytes (`N` a multiple of 4, `o + N <= HDR_MAX`):
/// the length is a constant, so the loop unrolls and the word reads need no bounds checks.
fn hdr_sum_fixed<const N: usize>(o: usize, d: usize) -> EF {
    debug_assert!(N % 4 == 0 && o + N <= HDR_MAX);
    // The destination's 16-bit word inside its 32-bit word (0 when out of the header).
    let (dw, dshift, dmask) = if d + 1 < N {
        (d / 4, if d % 4 == 0 { 16 } else { 0 }, 0xffffu64)
    } else {
        (0, 0, 0)
    };
    Box::new(move |_, c, _| {
        let Some(b) = c.hdr.get(o..o + N) else {
            return 0;
        };
        let Ok(b) = <&[u8; N]>::try_from(b) else {
            return 0;
        };
        let mut acc = 0u64;
        let mut i = 0;
        while i < N {
            let w = u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]) as u64;
            // The destination field reads as zero.
            acc += if i / 4 == dw {
                w & !(dmask << dshift)
            } else {
                w
            };
            i += 4;
        }
        fold64(acc)
    })
}

/// `update_checksum` / `verify_checksum` (csum16).
fn csum(p: &Program, cs: &Csum) -> SF {
    let cond = expr(&cs.cond);
    let sum: EF = match &cs.src {
        CsumSrc::Header { inst, dst_off } => {
            let h = &p.headers[*inst as usize];
            let (o, l, d) = (h.off as usize, h.len as usize, *dst_off as usize);
            // Common header lengths get a fixed-size sum (one bounds check, unrolled): the
            // IPv4 header without options is 20 bytes.
            match l {
                20 if o + 20 <= HDR_MAX => hdr_sum_fixed::<20>(o, d),
                24 if o + 24 <= HDR_MAX => hdr_sum_fixed::<24>(o, d),
                _ => hdr_sum_any(o, l, d),
            }
        }
        CsumSrc::Fields(fs) => {
            let fs: Box<[(EF, u16)]> = fs.iter().map(|(e, w)| (expr(e), *w)).collect();
            Box::new(move |x, c, pr| {
                // Concatenate into 16-bit words.
                let mut acc = 0u32;
                let mut word = 0u64;
                let mut bits = 0u32;
                for (f, w) in fs.iter() {
                    let v = f(x, c, pr);
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
                fold(acc) as u64
            })
        }
    };
    if cs.verify {
        let (dst, slot) = (expr(&cs.dst_e), ms(cs.err_slot));
        Box::new(move |x, c, pr| {
            if cond(x, c, pr) != 0 {
                let ck = !sum(x, c, pr) & 0xffff;
                if dst(x, c, pr) != ck {
                    c.meta[slot & (META_MAX - 1)] = 1;
                }
            }
            Flow::Next
        })
    } else {
        let st = store(p, &cs.dst);
        Box::new(move |x, c, pr| {
            if cond(x, c, pr) != 0 {
                let ck = !sum(x, c, pr) & 0xffff;
                st(x, c, ck);
            }
            Flow::Next
        })
    }
}
