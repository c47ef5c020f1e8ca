//! `nat44-ed-in2out` and `nat44-ed-out2in`: one node type, two directions.
//!
//! `nat44-ed-in2out` (the `ip4-unicast` feature of inside interfaces):
//! - uses: the IPv4 packet at `current_data` (ip4-input validated its header and trimmed
//!   the length), `rx_if`, `ip.fib_index`, `handoff_thread` (a packet handed over from
//!   another thread is processed where it lands, never handed on twice).
//! - does: packets whose destination is reached through an outside interface (FIB lookup),
//!   or is the outside side of a static mapping (hairpinning), are translated: the session
//!   of their tuple (created on first sight: static mapping of the source, else a pool
//!   address and a free port of the owning thread's range) gives the new source (and, for
//!   hairpinning, destination); ICMP errors are matched by the packet they quote, which is
//!   translated too. Everything else passes unchanged.
//! - sets: `handoff_thread` = owner + 1 on a packet handed to its owning thread, 0 after.
//! - next ([`NatNext`]): `Drop` (`error-drop`) for the drops below; `Lookup` (`ip4-lookup`)
//!   or the next feature of the rx interface's `ip4-unicast` arc; packets owned by another
//!   thread go to this node on that thread through the handoff queue.
//!
//! `nat44-ed-out2in` (the `ip4-unicast` feature of outside interfaces): packets to an
//! external address (pool or static mapping) are matched to a session by their tuple
//! (replies of in2out sessions), or create one from a static mapping; the destination is
//! rewritten to the inside host. Unknown sessions are dropped (`no_translation`), except
//! what the router itself must receive on its own interface address: ICMP echo requests,
//! ICMP errors and DHCP replies (UDP port 68). Packets to other addresses pass unchanged.
//! Same metadata and next arcs as in2out.
//!
//! Frame processing (both nodes), three passes: (1) parse every packet; a TCP/UDP/echo
//! packet this thread owns (or that was handed here; out2in: addressed to an external
//! address) is a candidate and its flow digest is computed (in a table of more than
//! [`PREFETCH_BUCKETS_FROM`] sessions its bucket prefetched, in a smaller one, which is in
//! cache, it is looked up at once: `Table::probe`, the writer's lookup, no version check);
//! (2) a large table's candidates are looked up together (`Table::probe_many`, their
//! buckets prefetched in pass 1); the flow's hot
//! record — one cache line: key, rewrite, checksum deltas, LRU stamp, counters — of the hit
//! [`SESSION_AHEAD`] candidates on prefetched, the first ones before the loop), each hit
//! confirmed by its flow's key words and translated at once from the hot record alone
//! (`Table::hit_flow`); the flow's first packet of a second, a TCP SYN/FIN/RST or a key that
//! is not the flow's takes the session (`Table::hit_session`: full tuple, expiry, TCP
//! state, LRU). No session is freed before pass 3, so every hit of pass 2 is live; (3) in frame
//! order, the packets pass 2 did not translate: a miss taken before a session was created
//! and an expired session are looked up again; every other packet takes the per-packet
//! path above with its parse reused, and a candidate's without a second lookup (session
//! creation, ICMP errors, pass-through, handoff). Each packet's next arc is written at its
//! frame position, and the frame is enqueued as it came unless a packet was handed off.
//! The thread's table lock is taken once per frame.
//!
//! Counters (both nodes, [`NatCounter`]): `translated`, `passed`, `session_created`, `handoff`
//! (info: packets the owner's handoff queue took); drops (all through `error-drop`):
//! `congestion_drop` (the owner's handoff queue was full), `no_translation`,
//! `max_sessions_exceeded`, `out_of_ports`, `no_pool_address`, `non_first_fragment`,
//! `truncated` (L4 header shorter than its minimum), `bad_icmp_error` (quoted packet
//! truncated or not TCP/UDP/echo), `unsupported_icmp`, `unsupported_protocol`,
//! `hash_collision`, `icmp_error_no_session`.

use crate::config::{role, Snapshot};
use crate::packet::{self, flags_of, ip4_addrs, parse, Bad, Parsed, Tuple, L4};
use crate::session::{
    sflags, tcp_update, CreateError, Flow, Hit, Key, Session, Side, Table, MAX_VALUE, MISS,
};
use crate::{lock, NatShared};
use sluice_buffer::{BufIdx, Buffer};
use sluice_fib::adj::AdjKind;
use sluice_graph::{Cx, FrameScratch, Next, NodeFn, TraceRecord, FRAME_SIZE};
use sluice_vnet::feature::{ArcRun, FeatureNext};
use sluice_vnet::ip4::Ip4Shared;
use sluice_vnet::ip_family::FibRead;
use sluice_wire::ipv4::proto;
use std::any::Any;
use std::sync::Arc;

sluice_graph::arcs! {
    /// The NAT nodes' next arcs.
    pub enum NatNext {
        /// `error-drop`.
        Drop => "error-drop",
        /// `ip4-lookup` (the arc's end).
        Lookup => "ip4-lookup",
    }
}

sluice_graph::counters! {
    /// The NAT nodes' counters.
    pub enum NatCounter {
        /// Translated.
        Translated => info("translated", "packets translated"),
        /// Passed untranslated.
        Passed => info("passed", "packets passed untranslated (not NAT traffic)"),
        /// Sessions created.
        SessionCreated => info("session_created", "sessions created"),
        /// Handed to the owning thread.
        Handoff => info("handoff", "packets handed to the session's owning thread"),
        /// Handoff queue full.
        Congestion => error("congestion_drop", "handoff queue to the owning thread full"),
        /// out2in without a session or mapping.
        NoTranslation => error("no_translation", "no session or static mapping"),
        /// Session limit.
        MaxSessions => error("max_sessions_exceeded", "maximum sessions exceeded"),
        /// No free port.
        OutOfPorts => error("out_of_ports", "out of ports"),
        /// No pool address.
        NoPoolAddress => error("no_pool_address", "no NAT pool address"),
        /// Non-first fragment.
        NonFirstFragment => error("non_first_fragment", "non-first fragment (no L4 header)"),
        /// Truncated L4 header.
        Truncated => error("truncated", "truncated L4 header"),
        /// Bad ICMP error.
        BadIcmpError => error("bad_icmp_error", "ICMP error with a truncated or unsupported quoted packet"),
        /// Unsupported ICMP type.
        UnsupportedIcmp => error("unsupported_icmp", "unsupported ICMP type"),
        /// Unsupported protocol.
        UnsupportedProtocol => error("unsupported_protocol", "unsupported protocol"),
        /// A new session's flow key is in use (by another flow or its own other flow).
        HashCollision => error("hash_collision", "a new session's flow key is in use"),
        /// ICMP error for no session.
        IcmpErrorNoSession => error("icmp_error_no_session", "ICMP error for no session"),
    }
}

/// Random ports tried per pool address before the next address is tried.
const PORT_ATTEMPTS: usize = 32;

/// Expired sessions each frame frees at most (the `nat44-ed-walk` process does the rest).
const FRAME_EXPIRE: usize = 8;

/// How many candidates ahead the lookup pass prefetches a hit's flow record (8: at 100k
/// sessions it measured best of 4, 8, 12 and 16 for the session record, docs/nat.md).
const SESSION_AHEAD: usize = 8;

/// Live sessions from which pass 1 prefetches each candidate's table bucket. An estimate,
/// not measured (only 1k sessions, where it costs, and 100k, where it gains, were): about
/// where the sessions' buckets and records (some 400 bytes each) outgrow a core's L2 cache.
const PREFETCH_BUCKETS_FROM: usize = 2048;

/// The per-thread instance.
pub struct NatNode {
    out: bool,
    shared: Arc<NatShared>,
    features: Arc<FeatureNext>,
    slot: usize,
    /// Per frame (fixed-size, written by index: no length or capacity bookkeeping per
    /// packet): the packets enqueued here (not handed off) and their next arcs.
    keep: Box<[BufIdx; FRAME_SIZE]>,
    hand: Vec<Vec<BufIdx>>,
    /// Per frame: the packets that may belong to a live session of this thread (the
    /// first `nc` of the frame).
    cands: Box<[Cand; FRAME_SIZE]>,
    /// Per frame: their table digests (a table past [`PREFETCH_BUCKETS_FROM`] sessions: its
    /// lookups wait for pass 2) and what the table holds for each ([`MISS`]: none;
    /// [`EXPIRED`] once pass 2 found the session expired).
    digests: Box<[u64; FRAME_SIZE]>,
    vals: Box<[u64; FRAME_SIZE]>,
    /// Per frame, per packet: its index in `cands`, or [`NO_CAND`].
    cand_of: Box<[u16; FRAME_SIZE]>,
}

/// `cand_of` of a packet that takes the per-packet path.
const NO_CAND: u16 = u16::MAX;

/// `cand_of` of a candidate the lookup pass translated.
const DONE: u16 = u16::MAX - 1;

/// `vals` of a candidate whose session pass 2 found expired (the per-packet lookup frees
/// it; no flow's table value, nor [`MISS`]).
const EXPIRED: u64 = MISS - 1;
const _: () = assert!(EXPIRED > MAX_VALUE, "EXPIRED must be no flow's table value");

/// `nexts` of a packet handed to another thread (no next arc has this index).
const HANDED: u16 = u16::MAX;

/// A packet of the frame's fast path: a TCP/UDP/echo packet owned by this thread, whose
/// session (if it has one) is looked up with the frame's others (the default: an unused
/// slot).
#[derive(Copy, Clone, Default)]
struct Cand {
    /// Its flow key (tuple, side, FIB).
    k: Key,
    /// Its L4 header's offset (at most 60).
    l4: u8,
    kind: L4,
    /// Its position in the frame.
    pos: u16,
}

impl NatNode {
    /// `out`: the out2in direction.
    pub fn new(out: bool, shared: Arc<NatShared>, features: Arc<FeatureNext>, slot: usize) -> Self {
        NatNode {
            out,
            shared,
            features,
            slot,
            keep: Box::new([BufIdx(0); FRAME_SIZE]),
            hand: Vec::new(),
            cands: Box::new([Cand::default(); FRAME_SIZE]),
            digests: Box::new([0; FRAME_SIZE]),
            vals: Box::new([MISS; FRAME_SIZE]),
            cand_of: Box::new([NO_CAND; FRAME_SIZE]),
        }
    }
}

/// What happens to a packet.
enum Verdict {
    Next(Next),
    Handoff(usize),
}

/// A trace record.
#[derive(Copy, Clone)]
struct NatTrace {
    out: bool,
    session: Option<u32>,
    from: Tuple,
    to: Tuple,
    handoff: Option<u16>,
}

impl TraceRecord for NatTrace {
    fn format(&self, out: &mut String) {
        let t = |x: &Tuple| {
            format!(
                "{} {}:{} -> {}:{}",
                crate::config::proto_name(x.proto),
                crate::config::ip(x.src),
                x.sport,
                crate::config::ip(x.dst),
                x.dport
            )
        };
        let dir = if self.out {
            "NAT44_OUT2IN_ED"
        } else {
            "NAT44_IN2OUT_ED"
        };
        match (self.handoff, self.session) {
            (Some(th), _) => {
                out.push_str(&format!("{dir}: handoff to thread {th}: {}", t(&self.from)))
            }
            (None, Some(s)) => out.push_str(&format!(
                "{dir}: session {s}: {} translated to {}",
                t(&self.from),
                t(&self.to)
            )),
            (None, None) => out.push_str(&format!("{dir}: {}", t(&self.from))),
        }
    }
}

/// Per-frame context of the packet functions.
struct Pc<'a> {
    cfg: &'a Snapshot,
    table: &'a mut Table,
    ip4: Option<&'a Ip4Shared>,
    features: &'a FeatureNext,
    slot: usize,
    me: usize,
    now: f64,
    trace: Option<NatTrace>,
}

impl Pc<'_> {
    #[inline(always)]
    fn pass(&self, cx: &mut Cx, b: &Buffer<'_>) -> Verdict {
        cx.count(NatCounter::Passed, 1);
        Verdict::Next(
            self.features
                .next(self.slot, b.hdr.rx_if, NatNext::Lookup.next()),
        )
    }

    /// Hands the packet to `owner` unless it is this thread or the packet was handed here.
    #[inline(always)]
    fn owner(&self, b: &mut Buffer<'_>, owner: usize) -> Option<Verdict> {
        if owner != self.me && b.hdr.handoff_thread as usize != self.me + 1 {
            b.hdr.handoff_thread = (owner + 1) as u16;
            return Some(Verdict::Handoff(owner));
        }
        b.hdr.handoff_thread = 0;
        None
    }

    /// The live session of a tuple (an expired one is freed on the way).
    #[inline(always)]
    fn lookup(&mut self, side: Side, t: &Tuple, fib: u32) -> Option<(u32, u8)> {
        let (i, which, live) =
            self.table
                .lookup_live(side, t, fib, self.now, &self.cfg.timeouts)?;
        if !live {
            self.table.free(i);
            self.table.stats.expired += 1;
            return None;
        }
        Some((i, which))
    }

    /// Translates a TCP/UDP/echo packet with flow `which` of session `i` and counts it (the
    /// per-packet path; the lookup pass's hits take [`Table::hit_flow`] or
    /// [`Table::hit_session`] instead). Its trace record and next arc are the lookup pass's,
    /// written out there too: a helper shared by both, returning the next arc and the
    /// record, cost the lookup pass 8.5 instructions per packet as compiled (callgrind, 1k
    /// sessions in2out, 480.9 against 472.4).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &mut self,
        cx: &mut Cx,
        b: &mut Buffer<'_>,
        i: u32,
        which: u8,
        l4: usize,
        kind: L4,
        t: Tuple,
    ) -> Verdict {
        let len = b.len();
        let Some(s) = self.table.get_mut(i) else {
            return drop_pkt(cx, b, NatCounter::NoTranslation);
        };
        let class = if t.proto == proto::TCP {
            tcp_update(&mut s.tcp, which == 0, flags_of(kind))
        } else {
            s.class
        };
        let Some((rw, dl)) = self.table.touch(i, which, self.now, len, class) else {
            return drop_pkt(cx, b, NatCounter::NoTranslation);
        };
        packet::translate(b.data_mut(), l4, kind, t, rw, dl);
        cx.count(NatCounter::Translated, 1);
        if b.hdr.is_traced() {
            self.trace = Some(NatTrace {
                out: which == 1,
                session: Some(i),
                from: t,
                to: rw,
                handoff: None,
            });
        }
        Verdict::Next(
            self.features
                .next(self.slot, b.hdr.rx_if, NatNext::Lookup.next()),
        )
    }

    /// Creates a session's flows in the table.
    fn create(&mut self, cx: &mut Cx, s: Session, which: u8) -> Result<(u32, u8), NatCounter> {
        match self.table.create(s, self.now, &self.cfg.timeouts) {
            Ok(i) => {
                cx.count(NatCounter::SessionCreated, 1);
                Ok((i, which))
            }
            Err(CreateError::Full) => Err(NatCounter::MaxSessions),
            Err(CreateError::Collision) => Err(NatCounter::HashCollision),
        }
    }
}

#[inline(always)]
fn drop_pkt(cx: &mut Cx, b: &mut Buffer<'_>, c: NatCounter) -> Verdict {
    b.hdr.error = cx.error(c);
    Verdict::Next(NatNext::Drop.next())
}

fn bad_counter(e: Bad) -> NatCounter {
    match e {
        Bad::NonFirstFragment => NatCounter::NonFirstFragment,
        Bad::Truncated => NatCounter::Truncated,
        Bad::BadIcmpError => NatCounter::BadIcmpError,
        Bad::UnsupportedIcmp => NatCounter::UnsupportedIcmp,
        Bad::UnsupportedProto => NatCounter::UnsupportedProtocol,
    }
}

/// Whether `dst` is reached through an outside interface (VPP ED translates in2out only
/// then: traffic between inside interfaces and to the router itself passes).
#[inline(always)]
fn via_outside(ip4: Option<&Ip4Shared>, cfg: &Snapshot, fib: u32, dst: u32) -> bool {
    let Some(ip4) = ip4 else { return false };
    let Some(adj) = ip4.resolve(fib, dst, 0) else {
        return false;
    };
    let a = ip4.adj.get(adj);
    !matches!(a.kind, AdjKind::Drop | AdjKind::Local) && cfg.role(a.tx_if) & role::OUTSIDE != 0
}

/// The tuple's ports with the source side's port (or identifier) `sp` and the destination
/// side's `dp`, by the L4 kind's positions.
#[inline(always)]
fn ports(kind: L4, t: &Tuple, sp: u16, dp: u16) -> (u16, u16) {
    match kind {
        L4::EchoRequest => (sp, 0),
        L4::EchoReply => (0, t.dport),
        L4::Tcp(_) | L4::Udp => (sp, dp),
    }
}

/// A session from an inside packet: the static mapping of its source or a pool address
/// and free port of `slot`'s range; the static mapping of its destination when
/// hairpinning.
fn create_in2out(
    pc: &mut Pc,
    cx: &mut Cx,
    t: &Tuple,
    kind: L4,
    fib: u32,
    slot: usize,
) -> Result<(u32, u8), NatCounter> {
    let cfg = pc.cfg;
    let mut flags = 0;
    let mut mapping = None;
    // Destination side: hairpinning to a static mapping's outside address.
    let (edst, edport, hairpin) = match cfg
        .is_external(t.dst)
        .then(|| cfg.mapping_by_external(t.dst, t.dst_port_or_id(), t.proto))
        .flatten()
    {
        Some(mj) => {
            let m = &cfg.mappings[mj as usize];
            flags |= sflags::HAIRPIN;
            (m.local, m.local_port.unwrap_or(t.dst_port_or_id()), true)
        }
        None => (t.dst, t.dport, false),
    };
    let o2i_side = if hairpin { Side::In } else { Side::Out };
    // Source side.
    let (esrc, esport) = match cfg.mapping_by_local(t.src, t.src_port_or_id(), t.proto, fib) {
        Some(mi) => {
            let m = &cfg.mappings[mi as usize];
            let ext = cfg.mapping_ext[mi as usize].ok_or(NatCounter::NoTranslation)?;
            flags |= sflags::STATIC;
            if m.identity {
                flags |= sflags::IDENTITY;
            }
            mapping = Some(m.id);
            (ext, m.external_port.unwrap_or(t.src_port_or_id()))
        }
        None => {
            if kind == L4::EchoReply {
                return Err(NatCounter::UnsupportedIcmp);
            }
            alloc(pc.table, cfg, slot, t, kind, fib, edst, edport, o2i_side)?
        }
    };
    let (sp, dp) = ports(kind, t, esport, edport);
    let rw = Tuple {
        src: esrc,
        dst: edst,
        sport: sp,
        dport: dp,
        proto: t.proto,
    };
    let s = Session::new(
        Flow {
            key: *t,
            side: Side::In,
            rw,
        },
        Flow {
            key: rw.reversed(),
            side: o2i_side,
            rw: t.reversed(),
        },
        fib,
        flags,
        mapping,
    );
    pc.create(cx, s, 0)
}

/// A pool address and a port of `slot`'s range whose outside flow key is free: the
/// packet's own port first, then random ones. Ports of static mappings are never used.
#[allow(clippy::too_many_arguments)]
fn alloc(
    table: &mut Table,
    cfg: &Snapshot,
    slot: usize,
    t: &Tuple,
    kind: L4,
    fib: u32,
    edst: u32,
    edport: u16,
    side: Side,
) -> Result<(u32, u16), NatCounter> {
    let n = cfg.pool.len();
    if !cfg.pool.iter().any(|p| p.1.is_none_or(|f| f == fib)) {
        return Err(NatCounter::NoPoolAddress);
    }
    let (lo, hi) = cfg.port_range(slot);
    let want = t.src_port_or_id() as u32;
    // A host keeps one pool address while its ports last (VPP's paired behaviour).
    let start = ((t.src as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize % n;
    let fibo = if side == Side::In { fib } else { 0 };
    for k in 0..n {
        let (a, tf) = cfg.pool[(start + k) % n];
        if tf.is_some_and(|f| f != fib) {
            continue;
        }
        for attempt in 0..PORT_ATTEMPTS {
            let p = if attempt == 0 && (lo..hi).contains(&want) {
                want
            } else {
                lo + (table.random() % (hi - lo) as u64) as u32
            } as u16;
            if cfg.is_static_external_port(a, p, t.proto) {
                continue;
            }
            let (sp, dp) = ports(kind, t, p, edport);
            let okey = Tuple {
                src: edst,
                dst: a,
                sport: dp,
                dport: sp,
                proto: t.proto,
            };
            if table.key_free(side, &okey, fibo) {
                return Ok((a, p));
            }
        }
    }
    Err(NatCounter::OutOfPorts)
}

/// A session from an outside packet to a static mapping.
fn create_out2in(
    pc: &mut Pc,
    cx: &mut Cx,
    t: &Tuple,
    kind: L4,
    mi: u32,
) -> Result<(u32, u8), NatCounter> {
    let m = pc.cfg.mappings[mi as usize];
    let dport = match kind {
        L4::Tcp(_) | L4::Udp => m.local_port.unwrap_or(t.dport),
        L4::EchoRequest | L4::EchoReply => t.dport,
    };
    let rw = Tuple {
        dst: m.local,
        dport,
        ..*t
    };
    let flags = sflags::STATIC | if m.identity { sflags::IDENTITY } else { 0 };
    let s = Session::new(
        Flow {
            key: rw.reversed(),
            side: Side::In,
            rw: t.reversed(),
        },
        Flow {
            key: *t,
            side: Side::Out,
            rw,
        },
        m.fib,
        flags,
        Some(m.id),
    );
    pc.create(cx, s, 1)
}

/// The per-packet in2out path: a packet the frame's batched lookup did not translate. `pre`:
/// its parse, when the frame parsed it and looked its session up (it has none, as of now:
/// its flow is not looked up again).
fn in2out(pc: &mut Pc, cx: &mut Cx, b: &mut Buffer<'_>, pre: Option<Parsed>) -> Verdict {
    let fib = b.hdr.ip.fib_index;
    let cfg = pc.cfg;
    let looked = pre.is_some();
    let parsed = match pre {
        Some(p) => Ok(p),
        None => parse(b.data()),
    };
    let Some((_, dst)) = ip4_addrs(b.data()) else {
        return drop_pkt(cx, b, NatCounter::Truncated);
    };
    let via = via_outside(pc.ip4, cfg, fib, dst);
    if !via && !cfg.is_external(dst) {
        return pc.pass(cx, b);
    }
    let p = match parsed {
        Ok(p) => p,
        Err(e) if via => return drop_pkt(cx, b, bad_counter(e)),
        // Not to an outside interface: only a static mapping's packets are ours.
        Err(_) => return pc.pass(cx, b),
    };
    match p {
        Parsed::Flow { t, l4, kind } => {
            if !via
                && cfg
                    .mapping_by_external(t.dst, t.dst_port_or_id(), t.proto)
                    .is_none()
            {
                return pc.pass(cx, b);
            }
            let slot = cfg.slot_in2out(&t, fib);
            if let Some(v) = pc.owner(b, cfg.threads[slot]) {
                return v;
            }
            let found = if looked {
                None
            } else {
                pc.lookup(Side::In, &t, fib)
            };
            let (i, which) = match found {
                Some(x) => x,
                None => match create_in2out(pc, cx, &t, kind, fib, slot) {
                    Ok(x) => x,
                    Err(c) => return drop_pkt(cx, b, c),
                },
            };
            pc.apply(cx, b, i, which, l4, kind, t)
        }
        Parsed::IcmpError { dst, inner, .. } => {
            if !via {
                return pc.pass(cx, b);
            }
            let k = inner.reversed();
            if let Some(v) = pc.owner(b, cfg.threads[cfg.slot_in2out(&k, fib)]) {
                return v;
            }
            let Some((i, which)) = pc.lookup(Side::In, &k, fib) else {
                return drop_pkt(cx, b, NatCounter::IcmpErrorNoSession);
            };
            let Some(f) = pc.table.get(i).map(|s| *s.flow(which)) else {
                return drop_pkt(cx, b, NatCounter::IcmpErrorNoSession);
            };
            let odst = if dst == k.dst { f.rw.dst } else { dst };
            packet::translate_icmp_error(b.data_mut(), &p, f.rw.src, odst, f.rw.reversed());
            cx.count(NatCounter::Translated, 1);
            Verdict::Next(
                pc.features
                    .next(pc.slot, b.hdr.rx_if, NatNext::Lookup.next()),
            )
        }
    }
}

/// The per-packet out2in path (`pre` as [`in2out`]'s).
fn out2in(pc: &mut Pc, cx: &mut Cx, b: &mut Buffer<'_>, pre: Option<Parsed>) -> Verdict {
    let cfg = pc.cfg;
    let Some((_, dst)) = ip4_addrs(b.data()) else {
        return drop_pkt(cx, b, NatCounter::Truncated);
    };
    if !cfg.is_external(dst) {
        return pc.pass(cx, b);
    }
    let looked = pre.is_some();
    let p = match pre.map_or_else(|| parse(b.data()), Ok) {
        Ok(p) => p,
        Err(e) => return drop_pkt(cx, b, bad_counter(e)),
    };
    let own = pc
        .ip4
        .is_some_and(|v| v.if_addr(b.hdr.rx_if).first() == dst);
    match p {
        Parsed::Flow { t, l4, kind } => {
            let port = t.dst_port_or_id();
            if let Some(v) = pc.owner(b, cfg.threads[cfg.slot_of_port(port)]) {
                return v;
            }
            let found = if looked {
                None
            } else {
                pc.lookup(Side::Out, &t, 0)
            };
            let (i, which) = match found {
                Some(x) => x,
                None => match cfg.mapping_by_external(t.dst, port, t.proto) {
                    Some(mi) => match create_out2in(pc, cx, &t, kind, mi) {
                        Ok(x) => x,
                        Err(c) => return drop_pkt(cx, b, c),
                    },
                    None => {
                        // The router's own traffic on its interface address.
                        let to_router =
                            kind == L4::EchoRequest || (kind == L4::Udp && t.dport == 68);
                        if own && to_router {
                            return pc.pass(cx, b);
                        }
                        return drop_pkt(cx, b, NatCounter::NoTranslation);
                    }
                },
            };
            pc.apply(cx, b, i, which, l4, kind, t)
        }
        Parsed::IcmpError { src, inner, .. } => {
            let k = inner.reversed();
            if let Some(v) = pc.owner(b, cfg.threads[cfg.slot_of_port(k.dst_port_or_id())]) {
                return v;
            }
            let Some((i, which)) = pc.lookup(Side::Out, &k, 0) else {
                if own {
                    return pc.pass(cx, b);
                }
                return drop_pkt(cx, b, NatCounter::IcmpErrorNoSession);
            };
            let Some(f) = pc.table.get(i).map(|s| *s.flow(which)) else {
                return drop_pkt(cx, b, NatCounter::IcmpErrorNoSession);
            };
            let osrc = if src == k.src { f.rw.src } else { src };
            packet::translate_icmp_error(b.data_mut(), &p, osrc, f.rw.dst, f.rw.reversed());
            cx.count(NatCounter::Translated, 1);
            Verdict::Next(
                pc.features
                    .next(pc.slot, b.hdr.rx_if, NatNext::Lookup.next()),
            )
        }
    }
}

impl NodeFn for NatNode {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        let me = cx.thread();
        // The thread's frame scratch: the frame's buffer addresses (kept from the node
        // before when it handed this frame on whole: one compare, no address computation)
        // and each packet's next arc.
        let (arena, frame, mut scratch) = cx.resolve_frame(frame);
        let n = frame.len();
        let FrameScratch { addrs, nexts } = &mut *scratch;
        let addrs = &*addrs;
        let NatNode {
            out,
            shared,
            features,
            slot,
            keep,
            hand,
            cands,
            digests,
            vals,
            cand_of,
        } = self;
        let workers = shared.workers();
        if hand.len() < workers.len() {
            hand.resize_with(workers.len(), || Vec::with_capacity(FRAME_SIZE));
        }
        let mut guard = workers.get(me).map(lock);
        let Some(w) = guard.as_mut().and_then(|g| g.as_mut()) else {
            // NAT disabled: everything passes.
            std::mem::drop(guard);
            for (i, (&bi, nx)) in frame.iter().zip(nexts.iter_mut()).enumerate() {
                // SAFETY: the dispatcher hands this node exclusive ownership of every index
                // in `frame`, resolved into `addrs` above; each index appears once and the
                // view lives only for this statement.
                let b = unsafe { arena.buffer_at(addrs, i, bi) };
                *nx = features.next(*slot, b.hdr.rx_if, NatNext::Lookup.next()).0;
            }
            cx.count(NatCounter::Passed, n as u64);
            cx.enqueue_to_next(frame, &nexts[..n]);
            cx.put_frame_scratch(scratch);
            return;
        };
        let now = cx.now_secs();
        let cfg = w.cfg.clone();
        let timeouts = cfg.timeouts;
        w.table.expire(now, &timeouts, FRAME_EXPIRE);
        let side = if *out { Side::Out } else { Side::In };
        // Pass 1: parse; a TCP/UDP/echo packet this thread owns (and, out2in, addressed to
        // an external address) is a candidate for the batched session lookup.
        let local = cfg.threads.len() == 1 && cfg.threads[0] == me;
        let mut nc = 0;
        let far = w.table.len() > PREFETCH_BUCKETS_FROM;
        // The loop once per direction and table size (`$out`, `$far` constants): tested
        // once a frame, not twice or three times a packet (docs/nat.md, "Session 19").
        macro_rules! pass1 {
            ($out:literal, $far:literal) => {
                for ((i, &bi), co) in frame.iter().enumerate().zip(cand_of.iter_mut()) {
                    // Past the frame's end the addresses repeat the last packet's.
                    addrs.prefetch(i + 2, true);
                    // SAFETY: exclusive ownership of `bi`, resolved into `addrs` (as
                    // above); the view lives for this iteration only.
                    let b = unsafe { arena.buffer_at(addrs, i, bi) };
                    let mut c = NO_CAND;
                    if let Ok((t, l4, kind)) = packet::parse_flow(b.data()) {
                        // The flow key first: the ownership test below takes the tuple back
                        // from it only when another thread may own the flow (a tuple passed
                        // by reference from here was kept on the stack for every packet).
                        // The key is built for every parsed packet, also those another
                        // thread owns (handed off) and out2in ones to a non-external
                        // address (passed through): a few instructions spent on those
                        // paths, for the saving on the candidates'.
                        let fib = if $out { 0 } else { b.hdr.ip.fib_index };
                        let k = Key::new(if $out { Side::Out } else { Side::In }, &t, fib);
                        let (owner, ours) = if $out {
                            let t = k.tuple();
                            (
                                local || cfg.threads[cfg.slot_of_port(t.dst_port_or_id())] == me,
                                cfg.is_external(t.dst),
                            )
                        } else {
                            (
                                local || cfg.threads[cfg.slot_in2out(&k.tuple(), fib)] == me,
                                true,
                            )
                        };
                        if ours && (owner || b.hdr.handoff_thread as usize == me + 1) {
                            // `nc` ≤ `i` < FRAME_SIZE: in bounds (indexed, so a broken
                            // invariant panics rather than losing the packet's candidacy
                            // silently).
                            let d = w.table.key_digest(k);
                            // A table larger than the caches: its bucket prefetched, so
                            // that pass 2's probe finds it in cache (the rest of the
                            // frame's parse overlaps the miss). A smaller one is in cache:
                            // looked up here, at once.
                            if $far {
                                w.table.prefetch_bucket(d);
                                digests[nc] = d;
                            } else {
                                vals[nc] = w.table.probe(d);
                            }
                            cands[nc] = Cand {
                                k,
                                // The IHL's bytes: at most 60.
                                l4: l4 as u8,
                                kind,
                                pos: i as u16,
                            };
                            c = nc as u16;
                            nc += 1;
                        }
                    }
                    *co = c;
                }
            };
        }
        match (*out, far) {
            (false, false) => pass1!(false, false),
            (false, true) => pass1!(false, true),
            (true, false) => pass1!(true, false),
            (true, true) => pass1!(true, true),
        }
        // Pass 2: (large table) the candidates' lookups, buckets prefetched in pass 1 (a
        // small table's candidates were looked up there); each hit confirmed by its
        // session's full tuple, checked for expiry and translated at once (its next written
        // at its frame position). Nothing in this pass frees a session, so every hit stays
        // valid until the last; misses and expired sessions wait for pass 3.
        let mut pc = Pc {
            cfg: &cfg,
            table: &mut w.table,
            ip4: shared.ip4.get().map(|a| &**a),
            features,
            slot: *slot,
            me,
            now,
            trace: None,
        };
        let cands = &cands[..nc];
        let vals = &mut vals[..nc];
        if far {
            pc.table.probe_many(&digests[..nc], vals);
        }
        let mut translated = 0;
        // The feature next arc, read again only when the rx interface changes.
        let mut arc = ArcRun::new(*slot);
        arc.begin_frame(features, NatNext::Lookup.next());
        // The first `SESSION_AHEAD` hits' flow records before the loop (the loop prefetches
        // the one `SESSION_AHEAD` on). Not distinguishable in the 100k clocks from not
        // priming them; kept as it is at most 8 prefetches a frame, and without it the
        // node measured 12 instructions a packet more at 1k (codegen, docs/nat.md).
        // (A miss's `MISS` prefetches the line before the records: harmless, no branch.)
        for &v in vals.iter().take(SESSION_AHEAD) {
            pc.table.prefetch(v);
        }
        for (k, c) in cands.iter().enumerate() {
            // The flow record of the hit `SESSION_AHEAD` on, so that its miss (a table larger
            // than the caches) overlaps this one's work.
            if let Some(&a) = vals.get(k + SESSION_AHEAD) {
                pc.table.prefetch(a);
            }
            let v = vals[k];
            if v == MISS {
                continue;
            }
            let pos = c.pos as usize;
            let bi = frame[pos];
            // SAFETY: as above — exclusive ownership of `bi`; one view at a time.
            let mut b = unsafe { arena.buffer_at(addrs, pos, bi) };
            let len = b.len();
            // The flow's hot record (one line) answers an established flow's packet; the
            // session is read only for its first packet of a second, a TCP SYN/FIN/RST or
            // a key that is not the flow's.
            let flags = flags_of(c.kind);
            let l4 = c.l4 as usize;
            // A traced packet's record (`rw`: its new tuple).
            let trace = |cx: &mut Cx, b: &Buffer<'_>, rw: Tuple| {
                if b.hdr.is_traced() {
                    cx.trace(
                        b,
                        NatTrace {
                            out: v & 1 == 1,
                            session: Some((v >> 1) as u32),
                            from: c.k.tuple(),
                            to: rw,
                            handoff: None,
                        },
                    );
                }
            };
            // Each hit is translated in its own branch: the hot record's rewrite goes from
            // its loads to the packet in registers (a merge of the two hits' results before
            // one translation spilled it to the stack and back, docs/nat.md).
            match pc.table.hit_flow(c.k, v, now, len, flags) {
                Some(h) => {
                    packet::translate_lazy(
                        b.data_mut(),
                        l4,
                        c.kind,
                        || c.k.tuple(),
                        || h.rw(),
                        h.deltas(),
                    );
                    // Tested here as well as in `trace`: an untraced hit does not read `h.rw()`.
                    if b.hdr.is_traced() {
                        trace(cx, &b, h.rw());
                    }
                }
                None => match pc.table.hit_session(c.k, v, now, &timeouts, len, flags) {
                    Hit::Live { rw, deltas, .. } => {
                        packet::translate_out_of_line(
                            b.data_mut(),
                            l4,
                            c.kind,
                            c.k.tuple(),
                            rw,
                            deltas,
                        );
                        trace(cx, &b, rw);
                    }
                    Hit::Expired => {
                        vals[k] = EXPIRED;
                        continue;
                    }
                    Hit::Miss => continue,
                },
            }
            b.hdr.handoff_thread = 0;
            let nx = arc.next(features, b.hdr.rx_if, NatNext::Lookup.next());
            debug_assert!(nx.0 != HANDED, "a next arc with the handed-off marker");
            nexts[pos] = nx.0;
            cand_of[pos] = DONE;
            translated += 1;
        }
        cx.count(NatCounter::Translated, translated);
        let creations = pc.table.creations();
        // Pass 3, in frame order: what pass 2 did not translate takes the per-packet path
        // (session creation, ICMP errors, pass-through, handoff). A miss found before a
        // session was created and an expired session are looked up again here; a
        // candidate's per-packet path then knows it has no session and does not look it up.
        let mut handed = false;
        // (Nothing left when pass 2 translated the whole frame.)
        let rest = if translated < n as u64 { frame } else { &[] };
        for (i, &bi) in rest.iter().enumerate() {
            let k = cand_of[i];
            if k == DONE {
                continue;
            }
            // SAFETY: as above — exclusive ownership of `bi` for this iteration.
            let mut b = unsafe { arena.buffer_at(addrs, i, bi) };
            let cand = cands.get(k as usize);
            let found = cand.map(|c| {
                let h = if vals[k as usize] != EXPIRED && pc.table.creations() == creations {
                    None
                } else {
                    pc.lookup(side, &c.k.tuple(), c.k.fib())
                };
                (c, h)
            });
            let v = match found {
                Some((c, Some((si, which)))) => {
                    b.hdr.handoff_thread = 0;
                    pc.apply(cx, &mut b, si, which, c.l4 as usize, c.kind, c.k.tuple())
                }
                _ => {
                    let pre = cand.map(|c| Parsed::Flow {
                        t: c.k.tuple(),
                        l4: c.l4 as usize,
                        kind: c.kind,
                    });
                    if *out {
                        out2in(&mut pc, cx, &mut b, pre)
                    } else {
                        in2out(&mut pc, cx, &mut b, pre)
                    }
                }
            };
            match v {
                Verdict::Next(nx) => {
                    if let Some(rec) = pc.trace.take() {
                        cx.trace(&b, rec);
                    }
                    debug_assert!(nx.0 != HANDED, "a next arc with the handed-off marker");
                    nexts[i] = nx.0;
                }
                Verdict::Handoff(t) => {
                    if b.hdr.is_traced() {
                        let from = match parse(b.data()) {
                            Ok(Parsed::Flow { t, .. }) => t,
                            _ => Tuple::default(),
                        };
                        cx.trace(
                            &b,
                            NatTrace {
                                out: *out,
                                session: None,
                                from,
                                to: from,
                                handoff: Some(t as u16),
                            },
                        );
                    }
                    if let Some(h) = hand.get_mut(t) {
                        h.push(bi);
                        handed = true;
                        nexts[i] = HANDED;
                    } else {
                        b.hdr.error = cx.error(NatCounter::Congestion);
                        nexts[i] = NatNext::Drop as u16;
                    }
                }
            }
        }
        std::mem::drop(guard);
        if handed {
            // The packets handed off leave the frame (`HANDED`); the rest keep its order.
            let mut kept = 0;
            for (i, &bi) in frame.iter().enumerate() {
                let nx = nexts[i];
                if nx != HANDED {
                    // `kept` ≤ its index < FRAME_SIZE: in bounds.
                    (keep[kept], nexts[kept]) = (bi, nx);
                    kept += 1;
                }
            }
            cx.enqueue_to_next(&keep[..kept], &nexts[..kept]);
        } else {
            cx.enqueue_to_next(frame, &nexts[..n]);
        }
        cx.put_frame_scratch(scratch);
        if handed {
            for (t, h) in hand.iter_mut().enumerate() {
                if h.is_empty() {
                    continue;
                }
                let (handoff, congestion) = (NatCounter::Handoff, NatCounter::Congestion);
                cx.handoff_or_drop(t, h, handoff, congestion, NatNext::Drop.next());
                h.clear();
            }
        }
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NatMain, PLUGIN};
    use sluice_buffer::BufferHeader;
    use sluice_graph::testing::Harness;
    use sluice_graph::HANDOFF_RING;
    use sluice_vnet::testing::{enabled, pkt, NodeTest};

    /// The CLI of a NAT enabled by `enable` (a `nat44 plugin enable ...` line): pg0
    /// (10.0.0.1/24) inside, pg1 (10.0.1.1/24) outside, pool address 10.0.1.100.
    fn inside_pg0_outside_pg1(enable: &'static str) -> Vec<&'static str> {
        vec![
            "create packet-generator interface pg0",
            "create packet-generator interface pg1",
            "set interface ip address pg0 10.0.0.1/24",
            "set interface ip address pg1 10.0.1.1/24",
            "set interface state pg0 up",
            "set interface state pg1 up",
            enable,
            "nat44 add address 10.0.1.100",
            "set interface nat44 in pg0 out pg1",
        ]
    }

    /// NAT44 in2out under test with one worker and `buffers` buffers: pg0 inside
    /// (10.0.0.1/24), pg1 outside (10.0.1.1/24), pool address 10.0.1.100; the sessions
    /// belong to `threads` (thread 0, which runs the node only when the test injects a
    /// frame, gets a table of its own), the ports split between them. pg0's index and the
    /// configuration every thread now holds.
    fn owned_by(buffers: u32, threads: &[usize]) -> (NodeTest, u32, Arc<crate::config::Snapshot>) {
        let mut t = NodeTest::with_workers(
            &[enabled(&PLUGIN)],
            1,
            buffers,
            &inside_pg0_outside_pg1("nat44 plugin enable sessions 100"),
            crate::IN2OUT,
        );
        let pg0 = t.sw_if("pg0");
        let shared = t.vm.ext_mut::<NatMain>().shared.clone();
        let mut cfg = None;
        for (t, w) in shared.workers().iter().enumerate() {
            let mut g = lock(w);
            let w = g.as_mut().expect("NAT enabled");
            let mut s = (*w.cfg).clone();
            s.threads = threads.to_vec();
            s.ports_per_thread /= threads.len() as u32;
            let s = Arc::new(s);
            cfg = Some(s.clone());
            w.cfg = s;
            if t == 0 {
                w.table = Table::new(100, 1);
            }
        }
        (t, pg0, cfg.expect("a worker"))
    }

    /// More sessions than a table's `u32` values can name are refused by name, not clamped
    /// (the check comes before the already-enabled one).
    #[test]
    fn enable_refuses_more_sessions_than_a_table_takes() {
        let (mut t, _, _) = owned_by(16, &[0]);
        let max = crate::session::MAX_SESSIONS as u32;
        let e = crate::ops::enable(&mut t.vm, max + 1).expect_err("too many");
        assert!(e.to_string().contains("must be at most"), "{e}");
        let e = crate::ops::enable(&mut t.vm, max).expect_err("enabled");
        assert!(e.to_string().contains("already enabled"), "{e}");
    }

    /// A packet handed to its owning thread through a full handoff queue goes to
    /// `error-drop` as `congestion_drop` (counted there, seen by a drop trace, freed by it);
    /// `handoff` counts only what the queue took, which the owner then translates.
    #[test]
    fn a_full_handoff_queue_drops_through_error_drop() {
        // The sessions belong to thread 0 (which the test runs only when it wants), the
        // packets arrive on the worker: the worker hands them to thread 0.
        let (mut t, pg0, _) = owned_by(2 * HANDOFF_RING as u32, &[0]);
        let h = &mut t.h;
        let udp = pkt("UDP: 10.0.0.2 -> 10.0.1.2\nUDP: 1000 -> 53");
        // The worker's node hands them to thread 0 or drops them: the queue to thread 0
        // fills (thread 0 does not run meanwhile), then refuses.
        let done = ["handoff", "congestion_drop"];
        let rx = |m: &mut BufferHeader| m.rx_if = pg0;
        h.hand_to_worker(1, &vec![udp.clone(); HANDOFF_RING], rx, &done);
        h.hand_to_worker(1, &vec![udp; 100], rx, &done);
        h.assert_counters(&[("handoff", HANDOFF_RING as u64), ("congestion_drop", 100)]);
        let drops = h.drops();
        assert_eq!(drops.len(), 100, "refused buffers reach error-drop");
        assert!(drops
            .iter()
            .all(|(n, c)| n == crate::IN2OUT && *c == "congestion_drop"));
        // Thread 0 translates what was handed over (one flow: one session).
        while h.vm.run_main_once() > 0 {}
        h.assert_counters(&[
            ("handoff", HANDOFF_RING as u64),
            ("congestion_drop", 100),
            ("session_created", 1),
            ("translated", HANDOFF_RING as u64),
        ]);
        assert_eq!(h.arc("ip4-lookup").len(), HANDOFF_RING);
        h.vm.stop_workers();
        h.assert_no_leaks();
    }

    /// One frame on thread 0 holding established flows of both threads: pass 2 translates
    /// thread 0's (next arcs written at their frame positions), pass 3 hands thread 1's
    /// over, and the squeeze of the frame keeps the translated packets, in frame order, with
    /// the next arcs pass 2 wrote. (Leaving pass 2's packets out of the kept frame loses
    /// them: this test then fails, four packets reaching ip4-lookup instead of eight.)
    #[test]
    fn lookup_pass_hits_and_handoffs_in_one_frame_keep_frame_order() {
        // Both threads own sessions: thread 0 (the main thread, which runs the node only
        // when the test injects a frame) and the worker, thread 1.
        let (mut t, pg0, cfg) = owned_by(1024, &[0, 1]);
        // Four flows of each thread, each to its own destination (in2out leaves it).
        let (mut own, mut other) = (Vec::new(), Vec::new());
        for k in 0..64u32 {
            let p = pkt(&format!(
                "UDP: 10.0.0.2 -> 10.0.1.{}\nUDP: {} -> 53",
                10 + k,
                1000 + k
            ));
            let (t, _, _) = packet::parse_flow(&p).expect("a flow");
            let v = if cfg.threads[cfg.slot_in2out(&t, 0)] == 0 {
                &mut own
            } else {
                &mut other
            };
            if v.len() < 4 {
                v.push((t.dst, p));
            }
        }
        assert_eq!((own.len(), other.len()), (4, 4), "flows of both threads");
        let h = &mut t.h;
        let rx = |m: &mut BufferHeader| m.rx_if = pg0;
        let wait = |h: &Harness, c: &str, n: u64| {
            let t0 = std::time::Instant::now();
            while h.counter(c) < n {
                assert!(t0.elapsed().as_secs() < 20, "the worker did not run");
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        };
        // Frame 1 creates the sessions, each on its owner.
        let first: Vec<Vec<u8>> = own.iter().chain(&other).map(|(_, p)| p.clone()).collect();
        h.run_with(&first, rx);
        wait(h, "session_created", 8);
        h.clear();
        // Frame 2 alternates them: thread 0's are pass 2 hits, thread 1's are handed over.
        let frame: Vec<(u32, Vec<u8>)> = own
            .iter()
            .zip(&other)
            .flat_map(|(a, b)| [a.clone(), b.clone()])
            .collect();
        let pkts: Vec<Vec<u8>> = frame.iter().map(|(_, p)| p.clone()).collect();
        h.run_with(&pkts, rx);
        wait(h, "translated", 16);
        h.assert_counters(&[("session_created", 8), ("handoff", 8), ("translated", 16)]);
        let dst = |c: &sluice_graph::testing::Captured| {
            u32::from_be_bytes([c.data[16], c.data[17], c.data[18], c.data[19]])
        };
        let got: Vec<u32> = h.arc("ip4-lookup").iter().map(dst).collect();
        assert_eq!(got.len(), 8, "{got:x?}");
        let of = |v: &[(u32, Vec<u8>)]| -> Vec<u32> {
            let d: Vec<u32> = v.iter().map(|x| x.0).collect();
            got.iter().copied().filter(|x| d.contains(x)).collect()
        };
        let want = |v: &[(u32, Vec<u8>)]| -> Vec<u32> { v.iter().map(|x| x.0).collect() };
        assert_eq!(of(&own), want(&own), "thread 0's in frame order");
        assert_eq!(of(&other), want(&other), "thread 1's in frame order");
        assert!(h.drops().is_empty());
        h.vm.stop_workers();
        h.assert_no_leaks();
    }

    /// The in2out node under test on the main thread alone, 4,096 sessions, 1,024 buffers
    /// (`inside_pg0_outside_pg1`): its harness, pg0's index and the NAT's shared state.
    fn in2out_4096() -> (Harness, u32, Arc<NatShared>) {
        let (mut vm, _cli) = sluice_vnet::testing::configured(
            &[enabled(&PLUGIN)],
            0,
            1024,
            &inside_pg0_outside_pg1("nat44 plugin enable sessions 4096"),
        );
        let pg0 = vm
            .ext_mut::<sluice_vnet::Interfaces>()
            .find("pg0")
            .expect("pg0")
            .0;
        let shared = vm.ext_mut::<NatMain>().shared.clone();
        (Harness::new(vm, crate::IN2OUT), pg0, shared)
    }

    /// With more than `PREFETCH_BUCKETS_FROM` live sessions pass 1 prefetches each
    /// candidate's bucket: the established flows are still found and translated as when
    /// their sessions were created (the same outside address and port, the bytes alike).
    #[test]
    fn a_table_past_the_bucket_prefetch_threshold_translates_its_hits() {
        let n = PREFETCH_BUCKETS_FROM + 1;
        let (mut h, pg0, shared) = in2out_4096();
        let rx = |m: &mut BufferHeader| m.rx_if = pg0;
        let pkts: Vec<Vec<u8>> = (0..n)
            .map(|k| {
                pkt(&format!(
                    "UDP: 10.0.0.2 -> 10.0.1.2\nUDP: {} -> 53",
                    1000 + k
                ))
            })
            .collect();
        let run = |h: &mut Harness| {
            for f in pkts.chunks(FRAME_SIZE) {
                h.run_with(f, rx);
            }
            let out: Vec<Vec<u8>> = h.arc("ip4-lookup").into_iter().map(|c| c.data).collect();
            h.clear();
            out
        };
        // Round 1 creates the sessions (pass 3), round 2 finds them all (pass 2), each
        // candidate's bucket prefetched in pass 1.
        let created = run(&mut h);
        h.assert_counters(&[("session_created", n as u64), ("translated", n as u64)]);
        let live = {
            let g = lock(&shared.workers()[0]);
            g.as_ref().expect("NAT enabled").table.len()
        };
        assert!(live > PREFETCH_BUCKETS_FROM, "{live} sessions");
        let hits = run(&mut h);
        h.assert_counters(&[("session_created", n as u64), ("translated", 2 * n as u64)]);
        assert_eq!(hits.len(), n);
        assert!(
            hits == created,
            "a hit translates as its session's creation did"
        );
        let mut ports: Vec<u16> = hits
            .iter()
            .map(|d| {
                assert_eq!(d[12..16], [10, 0, 1, 100], "outside address");
                u16::from_be_bytes([d[20], d[21]])
            })
            .collect();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), n, "one outside port per session");
        assert!(h.drops().is_empty());
        h.assert_no_leaks();
    }

    /// One frame of established flows and new ones interleaved, longer than the lookup
    /// pass's flow-record prefetch distance (`SESSION_AHEAD` candidates), in a table below
    /// and past `PREFETCH_BUCKETS_FROM` sessions: the hits are translated in pass 2 as their
    /// sessions' creation translated them, each new flow (one of them twice) gets one
    /// session in pass 3, and the frame leaves in its order. Packets that are not
    /// candidates (an unsupported protocol, passed through) sit between the flows, so a
    /// candidate's index is not its frame position; a second frame of established flows
    /// and those alone (no session created in it, so pass 3 does not look a flow up again)
    /// fails if pass 2 hits a candidate by its frame position or skips one.
    fn mixed_frame(filler: usize) {
        let (mut h, pg0, _) = in2out_4096();
        let rx = |m: &mut BufferHeader| m.rx_if = pg0;
        let udp = |src: &str, sport: usize, dport: usize| {
            pkt(&format!("UDP: {src} -> 10.0.1.2\nUDP: {sport} -> {dport}"))
        };
        let fill: Vec<Vec<u8>> = (0..filler).map(|k| udp("10.0.0.9", 1000 + k, 9)).collect();
        for f in fill.chunks(FRAME_SIZE) {
            h.run_with(f, rx);
        }
        h.clear();
        let e = 40;
        let old: Vec<Vec<u8>> = (0..e)
            .map(|k| udp("10.0.0.2", 1000 + k, 5000 + k))
            .collect();
        h.run_with(&old, rx);
        let created = h.arc("ip4-lookup");
        h.clear();
        // Not a candidate: an unsupported protocol (GRE) to an inside address, passed
        // through as it came (destination port `7000 + k` in its bytes, for the order).
        let other = |k: usize| {
            let mut p = udp("10.0.0.4", 3000 + k, 7000 + k);
            p[16..20].copy_from_slice(&[10, 0, 0, 7]);
            p[9] = 47;
            p[10..12].fill(0);
            let c = sluice_wire::checksum::internet_checksum(&p[..20]);
            p[10..12].copy_from_slice(&c.to_be_bytes());
            p
        };
        // Established k, then new k, then (every other k) a packet passed through; new 0
        // again at the end.
        let mut frame = Vec::new();
        let mut want = Vec::new();
        for (k, p) in old.iter().enumerate() {
            frame.push(p.clone());
            frame.push(udp("10.0.0.3", 2000 + k, 6000 + k));
            want.extend([5000 + k, 6000 + k]);
            if k % 2 == 1 {
                frame.push(other(k));
                want.push(7000 + k);
            }
        }
        frame.push(udp("10.0.0.3", 2000, 6000));
        want.push(6000);
        let passed = e / 2;
        h.run_with(&frame, rx);
        let out: Vec<Vec<u8>> = h.arc("ip4-lookup").into_iter().map(|c| c.data).collect();
        h.assert_counters(&[
            ("session_created", (filler + 2 * e) as u64),
            ("translated", (filler + 3 * e + 1) as u64),
            ("passed", passed as u64),
        ]);
        assert!(h.drops().is_empty());
        let dport = |d: &[u8]| u16::from_be_bytes([d[22], d[23]]) as usize;
        let got: Vec<usize> = out.iter().map(|d| dport(d)).collect();
        assert_eq!(got, want, "the frame's order");
        let at = |port: usize| want.iter().position(|&w| w == port).expect("sent");
        for (k, c) in created.iter().enumerate() {
            assert!(
                out[at(5000 + k)] == c.data,
                "established flow {k} as at its creation"
            );
        }
        for (d, &w) in out.iter().zip(&want) {
            if w >= 7000 {
                assert!(*d == other(w - 7000), "passed through as it came");
            } else {
                assert_eq!(d[12..16], [10, 0, 1, 100], "outside address");
            }
        }
        assert!(
            out[at(6000)] == out[out.len() - 1],
            "a new flow's two packets, one session"
        );
        h.clear();
        // Established flows alone, a packet passed through after every third: pass 2
        // translates every one (no session is created, so a candidate pass 2 missed would
        // get a second session in pass 3).
        let mut frame = Vec::new();
        let mut want = Vec::new();
        for (k, p) in old.iter().enumerate() {
            frame.push(p.clone());
            want.push(created[k].data.clone());
            if k % 3 == 0 {
                frame.push(other(k));
                want.push(other(k));
            }
        }
        h.run_with(&frame, rx);
        let out: Vec<Vec<u8>> = h.arc("ip4-lookup").into_iter().map(|c| c.data).collect();
        h.assert_counters(&[
            ("session_created", (filler + 2 * e) as u64),
            ("translated", (filler + 4 * e + 1) as u64),
            ("passed", (passed + e.div_ceil(3)) as u64),
        ]);
        assert!(h.drops().is_empty());
        assert!(
            out == want,
            "established flows as at their creation, in frame order"
        );
        h.assert_no_leaks();
    }

    #[test]
    fn a_mixed_frame_longer_than_the_pipeline_keeps_order_in_a_small_table() {
        mixed_frame(0);
    }

    #[test]
    fn a_mixed_frame_longer_than_the_pipeline_keeps_order_in_a_large_table() {
        mixed_frame(PREFETCH_BUCKETS_FROM + 1);
    }

    /// Sessions that expired but were not freed before the frame (more than the frame's
    /// `FRAME_EXPIRE`) are found expired by the lookup pass (`EXPIRED`) and looked up again
    /// in pass 3, which frees each and makes a new session: nothing is refused as a
    /// collision with the old keys. The frame comes newest first, so the expired ones come
    /// before any creation of the frame (which would make pass 3 look up again anyway).
    #[test]
    fn expired_sessions_found_by_the_lookup_pass_are_replaced() {
        let n = 20usize;
        let mut cfg = inside_pg0_outside_pg1("nat44 plugin enable sessions 1024");
        cfg.push("set nat timeout udp 1");
        let (mut vm, _cli) = sluice_vnet::testing::configured(&[enabled(&PLUGIN)], 0, 1024, &cfg);
        let pg0 = vm
            .ext_mut::<sluice_vnet::Interfaces>()
            .find("pg0")
            .expect("pg0")
            .0;
        let shared = vm.ext_mut::<NatMain>().shared.clone();
        let mut h = Harness::new(vm, crate::IN2OUT);
        let rx = |m: &mut BufferHeader| m.rx_if = pg0;
        let pkts: Vec<Vec<u8>> = (0..n)
            .map(|k| {
                pkt(&format!(
                    "UDP: 10.0.0.2 -> 10.0.1.2\nUDP: {} -> 53",
                    1000 + k
                ))
            })
            .collect();
        for p in &pkts {
            h.run_with(std::slice::from_ref(p), rx);
        }
        h.clear();
        h.assert_counters(&[("session_created", n as u64), ("translated", n as u64)]);
        std::thread::sleep(std::time::Duration::from_millis(1600));
        let newest_first: Vec<Vec<u8>> = pkts.iter().rev().cloned().collect();
        h.run_with(&newest_first, rx);
        assert_eq!(h.arc("ip4-lookup").len(), n);
        h.assert_counters(&[
            ("session_created", 2 * n as u64),
            ("translated", 2 * n as u64),
        ]);
        let (live, expired) = {
            let g = lock(&shared.workers()[0]);
            let w = g.as_ref().expect("NAT enabled");
            (w.table.len(), w.table.stats.expired)
        };
        assert_eq!((live, expired), (n, n as u64));
        assert!(h.drops().is_empty());
        h.clear();
        h.assert_no_leaks();
    }
}
