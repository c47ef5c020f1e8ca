//! A thread's NAT44-ED sessions: a pool of sessions, a [`FlowTable`] from flow keys to flows,
//! LRU lists per timeout class, port allocation and TCP state.
//!
//! A session has two flows (VPP ED's 6-tuple flows): the inside flow matches packets
//! received on an inside interface and says what their tuple becomes; the outside flow
//! matches the replies received on an outside interface (or, for a hairpinned session, the
//! replies of the inside server, received on an inside interface). Each flow's match tuple
//! is a key of the table. Keys are 16 bytes wide (tuple, FIB, which node looks it up) and the
//! table's are 8: the key stored is their keyed digest
//! ([`sluice_infra::bihash::FoldedKeyHash`]: two folded multiplies under a secret random
//! key, about a tenth of SipHash's instructions). A CRC (VPP's bihash hash) would be cheaper
//! still but is linear: its collisions do not depend on a seed, so anyone could make a
//! tuple collide with one he predicts, or aim flows at one bucket; the folded multiply has no
//! linear step an attacker could solve. The table ([`FlowTable`], one cache line a bucket:
//! seven 32-bit tags of digests, each with its flow's value) gives candidates; a hit is
//! confirmed by the flow's key words in its [`Hot`] record (the batched path) or its
//! session's full match tuple, and the exact lookup ([`FlowTable::find`]) tries every
//! candidate, so two flows whose digests or tags are equal coexist (only the same key twice
//! is refused, [`CreateError::Collision`]).
//!
//! Only the owning thread reads and writes its table (packets are handed to the owner
//! first); the control plane reaches it under the thread's mutex.

use crate::config::Timeouts;
use crate::packet::{tcp_flags, Deltas, Tuple};
use sluice_infra::bihash::FoldedKeyHash;
use sluice_infra::epoch::{ZeroValid, ZeroedArray};
use sluice_infra::flowtab::FlowTable;
use sluice_infra::pool::Pool;

/// Which node looks a flow's key up.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Side {
    /// `nat44-ed-in2out` (packets from inside interfaces).
    In,
    /// `nat44-ed-out2in`.
    Out,
}

/// One direction of a session (36 bytes, laid out in this order: see [`Session`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Flow {
    /// The tuple of the packets it matches.
    pub key: Tuple,
    /// What their tuple becomes.
    pub rw: Tuple,
    /// Who looks it up.
    pub side: Side,
}

/// Timeout classes (one LRU list each).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Class {
    /// UDP.
    Udp = 0,
    /// TCP established.
    TcpEstablished = 1,
    /// TCP opening/closing.
    TcpTransitory = 2,
    /// ICMP echo.
    Icmp = 3,
}

/// Number of classes.
pub const N_CLASSES: usize = 4;

impl Class {
    /// The class's timeout.
    #[inline(always)]
    pub fn timeout(self, t: &Timeouts) -> f64 {
        (match self {
            Class::Udp => t.udp,
            Class::TcpEstablished => t.tcp_established,
            Class::TcpTransitory => t.tcp_transitory,
            Class::Icmp => t.icmp,
        }) as f64
    }
}

/// TCP state bits of a session.
pub mod tcp {
    /// SYN from the inside.
    pub const SYN_IN: u8 = 1;
    /// SYN from the outside.
    pub const SYN_OUT: u8 = 2;
    /// FIN from the inside.
    pub const FIN_IN: u8 = 4;
    /// FIN from the outside.
    pub const FIN_OUT: u8 = 8;
    /// RST seen.
    pub const RST: u8 = 16;
    /// Both SYNs seen and not closed since: established.
    pub const ESTABLISHED: u8 = 32;
}

/// Session flags.
pub mod sflags {
    /// Created from a static or identity mapping.
    pub const STATIC: u8 = 1;
    /// Hairpinned (inside to inside through an outside address).
    pub const HAIRPIN: u8 = 2;
    /// Identity mapping (nothing rewritten).
    pub const IDENTITY: u8 = 4;
}

/// A session: its two flows, FIB, class, TCP state and LRU links. What a packet of an
/// established flow reads and writes is not here but in the flow's [`Hot`] record (the
/// table's, beside its key): its match key, rewrite, checksum deltas, LRU stamp, last packet
/// time and counters. A hit touches the session only once a second per flow (its LRU
/// position), on a TCP SYN, FIN or RST (its state), or when the hot key does not match.
#[derive(Clone, Debug)]
#[repr(C)]
pub struct Session {
    /// The inside flow.
    pub i2o: Flow,
    /// The outside flow.
    pub o2i: Flow,
    /// FIB index of the inside side.
    pub fib: u32,
    /// Timeout class.
    pub class: Class,
    /// [`tcp`] state bits.
    pub tcp: u8,
    /// [`sflags`].
    pub flags: u8,
    prev: Option<u32>,
    next: Option<u32>,
    /// The static mapping it was made from.
    pub mapping: Option<u32>,
}

// A free pool slot (`None`, the class's niche) costs no more than a session.
const _: () = assert!(std::mem::size_of::<Option<Session>>() == 104);

/// What a packet of one flow reads and writes, in one cache line (the table keeps one per
/// flow, indexed by the flow's table value, [`Table::hit_flow`]): the flow key's two words
/// ([`Key`]: tuple, side, FIB), the rewrite (its protocol is the key's), the checksum
/// deltas, the whole second its session last moved in its LRU list for this flow, the last
/// packet's time and the flow's counters. A free flow's key is [`Hot::FREE`], which no
/// packet's key is (protocol 255 is never looked up).
#[derive(Copy, Clone, Debug)]
#[repr(C, align(64))]
struct Hot {
    kw: [u64; 2],
    rw_src: u32,
    rw_dst: u32,
    rw_sport: u16,
    rw_dport: u16,
    deltas: Deltas,
    /// The flow's LRU stamp: its session was moved to its class's LRU tail in this whole
    /// second for a packet of this flow, and `last` is in this second too.
    stamp: u32,
    last: f64,
    pkts: u64,
    bytes: u64,
}

const _: () = assert!(std::mem::size_of::<Hot>() == 64);

// SAFETY: integers, floats and `Deltas` (two integers and a bool) only: all zeros is a valid record
// (no key, never written).
unsafe impl ZeroValid for Hot {}
// The key words keep 23 bits of the FIB index: every FIB index fits them.
const _: () = assert!(sluice_vnet::routes::MAX_FIBS <= 1 << 23);

impl Hot {
    const FREE: Hot = Hot {
        kw: [u64::MAX; 2],
        rw_src: 0,
        rw_dst: 0,
        rw_sport: 0,
        rw_dport: 0,
        deltas: Deltas::ZERO,
        stamp: 0,
        last: 0.0,
        pkts: 0,
        bytes: 0,
    };

    /// Flow `f` of a session of FIB `fib` created at `now`.
    fn new(f: &Flow, fib: u32, now: f64) -> Hot {
        Hot {
            kw: Key::new(f.side, &f.key, fib).0,
            rw_src: f.rw.src,
            rw_dst: f.rw.dst,
            rw_sport: f.rw.sport,
            rw_dport: f.rw.dport,
            deltas: Deltas::new(f.key, f.rw),
            stamp: now as u32,
            last: now,
            pkts: 0,
            bytes: 0,
        }
    }

    /// The rewrite of a packet of protocol `proto`.
    #[inline(always)]
    fn rw(&self, proto: u8) -> Tuple {
        Tuple {
            src: self.rw_src,
            dst: self.rw_dst,
            sport: self.rw_sport,
            dport: self.rw_dport,
            proto,
        }
    }

    /// Counts a packet of `bytes` at `now`.
    #[inline(always)]
    fn count(&mut self, now: f64, bytes: usize) {
        self.last = now;
        self.pkts += 1;
        self.bytes += bytes as u64;
    }
}

/// Records a packet of `bytes` at `now` in flow record `h` of session `s`, which leaves the
/// session in class `class` ([`Table::touch`]): the flow's time and counters and, when the
/// class changes or the flow's stamp is not this second's, the new stamp and class. Returns
/// the flow's rewrite and deltas and, when the session must move to `class`'s LRU tail, its
/// old class.
#[inline(always)]
fn record(
    s: &mut Session,
    h: &mut Hot,
    now: f64,
    bytes: usize,
    class: Class,
) -> (Tuple, Deltas, Option<Class>) {
    h.count(now, bytes);
    let (old, stamp) = (s.class, now as u32);
    let moved = (old != class || h.stamp != stamp).then(|| {
        h.stamp = stamp;
        s.class = class;
        old
    });
    (h.rw(s.i2o.key.proto), h.deltas, moved)
}

/// A session's activity: both flows' counters and its last packet's time.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Activity {
    /// Last packet (seconds, the runtime clock; its creation if none).
    pub last: f64,
    /// Packets in both directions.
    pub pkts: u64,
    /// Bytes in both directions.
    pub bytes: u64,
}

impl Session {
    /// A new session (not in a table yet).
    pub fn new(i2o: Flow, o2i: Flow, fib: u32, flags: u8, mapping: Option<u32>) -> Self {
        let class = match i2o.key.proto {
            6 => Class::TcpTransitory,
            1 => Class::Icmp,
            _ => Class::Udp,
        };
        Session {
            i2o,
            o2i,
            fib,
            flags,
            tcp: 0,
            class,
            mapping,
            prev: None,
            next: None,
        }
    }

    /// The FIB of flow `which`'s key: the session's for an inside-side flow, 0 otherwise.
    #[inline(always)]
    fn flow_fib(&self, which: u8) -> u32 {
        if which == 0 || self.o2i.side == Side::In {
            self.fib
        } else {
            0
        }
    }

    /// The flow for `which` (0: inside flow, 1: outside flow).
    #[inline(always)]
    pub fn flow(&self, which: u8) -> &Flow {
        if which == 0 {
            &self.i2o
        } else {
            &self.o2i
        }
    }

    /// Flow `which` (0: inside, 1: outside) if it has the full match tuple (`side`, `t`,
    /// `fib`): its key, its side, and the session's FIB for an inside-side flow (0 for an
    /// outside one).
    #[inline(always)]
    fn flow_matches(&self, which: u8, side: Side, t: &Tuple, fib: u32) -> Option<&Flow> {
        let f = self.flow(which);
        (f.key == *t && f.side == side && self.flow_fib(which) == fib).then_some(f)
    }

    /// The TCP state's name (`show nat44 sessions detail`).
    pub fn tcp_state(&self) -> &'static str {
        let s = self.tcp;
        if s & tcp::RST != 0 {
            "reset"
        } else if s & (tcp::FIN_IN | tcp::FIN_OUT) == tcp::FIN_IN | tcp::FIN_OUT {
            "closed"
        } else if s & tcp::ESTABLISHED != 0 {
            if s & (tcp::FIN_IN | tcp::FIN_OUT) != 0 {
                "closing"
            } else {
                "established"
            }
        } else {
            "opening"
        }
    }
}

/// Applies a TCP segment's flags to a session's state (`inside`: the segment came from the
/// inside) and returns the timeout class that follows.
pub fn tcp_update(state: &mut u8, inside: bool, flags: u8) -> Class {
    let (syn, fin) = if inside {
        (tcp::SYN_IN, tcp::FIN_IN)
    } else {
        (tcp::SYN_OUT, tcp::FIN_OUT)
    };
    let closed = *state & (tcp::RST | tcp::FIN_IN | tcp::FIN_OUT) != 0;
    if flags & tcp_flags::SYN != 0 && flags & tcp_flags::ACK == 0 && closed {
        // A new connection reusing the tuple of one that closed.
        *state = 0;
    }
    if flags & tcp_flags::RST != 0 {
        *state |= tcp::RST;
    }
    if flags & tcp_flags::SYN != 0 {
        *state |= syn;
        if *state & (tcp::SYN_IN | tcp::SYN_OUT) == tcp::SYN_IN | tcp::SYN_OUT
            && *state & (tcp::RST | tcp::FIN_IN | tcp::FIN_OUT) == 0
        {
            *state |= tcp::ESTABLISHED;
        }
    }
    if flags & tcp_flags::FIN != 0 {
        *state |= fin;
    }
    let s = *state;
    if s & tcp::ESTABLISHED != 0
        && s & tcp::RST == 0
        && s & (tcp::FIN_IN | tcp::FIN_OUT) != tcp::FIN_IN | tcp::FIN_OUT
    {
        Class::TcpEstablished
    } else {
        Class::TcpTransitory
    }
}

/// What [`Table::hit_session`] found.
#[derive(Copy, Clone, Debug)]
pub enum Hit {
    /// No session has the flow.
    Miss,
    /// The flow's session has expired (not freed: the per-packet lookup frees it).
    Expired,
    /// The live session `i`'s flow `which`, recorded: what the packet's tuple becomes and
    /// the checksum deltas of that rewrite.
    Live {
        /// The session.
        i: u32,
        /// Its flow (0: inside, 1: outside).
        which: u8,
        /// The rewrite.
        rw: Tuple,
        /// Its checksum deltas.
        deltas: Deltas,
    },
}

/// Why a session could not be created.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CreateError {
    /// The thread's session limit is reached and no session has expired.
    Full,
    /// A key collided with a live flow's (see the module documentation).
    Collision,
}

/// Per-thread counters shown by `show nat44 summary`.
#[derive(Copy, Clone, Debug, Default)]
pub struct Stats {
    /// Sessions created.
    pub created: u64,
    /// Sessions freed because they timed out.
    pub expired: u64,
    /// Sessions freed otherwise (configuration changes, CLI).
    pub deleted: u64,
}

/// A thread's sessions.
pub struct Table {
    sessions: Pool<Session>,
    /// Per flow, at the flow's table value (session index × 2 + flow): what its packets
    /// read and write ([`Hot`]): zeroed, allocated lazily, in hugepages from 2 MiB on
    /// ([`ZeroedArray`]: a random flow's record costs no TLB miss of its own at 100k
    /// sessions). A record not written yet is all zeros, whose key words no packet's are
    /// (protocol 0), and no table value points at it.
    hot: ZeroedArray<Hot>,
    /// Records up to the highest session index's flows written (the memory counted).
    hot_used: usize,
    keys: FlowTable,
    hasher: FoldedKeyHash,
    heads: [Option<u32>; N_CLASSES],
    tails: [Option<u32>; N_CLASSES],
    max: usize,
    rng: u64,
    /// Counters.
    pub stats: Stats,
    /// Bumped by every create: a miss taken before is still a miss while it is unchanged.
    creations: u64,
    /// Tests narrow the digests to force flows onto one digest.
    #[cfg(test)]
    digest_mask: u64,
}

/// [`Table::probe_many`]'s value for a digest the table does not hold (no flow's value:
/// those are a session index × 2 + the flow, below 2^33).
pub const MISS: u64 = u64::MAX;

/// Sessions a table holds at most (its values, session index × 2 + flow, are `u32`s below
/// `u32::MAX`, [`FlowTable`]'s; a session index is below the table's limit, the pool
/// reusing freed slots first).
pub const MAX_SESSIONS: usize = 1 << 30;

/// The largest value the table holds: the largest session index × 2 + 1.
pub const MAX_VALUE: u64 = (MAX_SESSIONS as u64) << 1 | 1;
const _: () = assert!(MISS > MAX_VALUE, "MISS must be no flow's table value");

/// A flow record [`Table::hit_flow`] matched (and counted the packet in): its rewrite and
/// checksum deltas, read from the record when asked.
pub struct FlowHit<'a>(&'a Hot);

impl FlowHit<'_> {
    /// The rewritten tuple (its protocol the flow key's).
    #[inline(always)]
    pub fn rw(&self) -> Tuple {
        self.0.rw((self.0.kw[1] >> 24) as u8)
    }

    /// The checksum deltas of the rewrite.
    #[inline(always)]
    pub fn deltas(&self) -> Deltas {
        self.0.deltas
    }
}

/// A flow key (side, tuple, FIB) as the two words the table digests and a hit compares:
/// the addresses; the ports, protocol, side (bit 23) and FIB index (23 bits: every FIB
/// index fits them, `routes::MAX_FIBS`). The packet parse builds it once per candidate.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Key(pub [u64; 2]);

impl Key {
    /// The key of (`side`, `t`, `fib`).
    #[inline(always)]
    pub fn new(side: Side, t: &Tuple, fib: u32) -> Key {
        let a = (t.src as u64) << 32 | t.dst as u64;
        let b = (t.sport as u64) << 48
            | (t.dport as u64) << 32
            | (t.proto as u64) << 24
            | ((side == Side::Out) as u64) << 23
            | (fib as u64 & 0x7f_ffff);
        Key([a, b])
    }

    /// Its tuple.
    #[inline(always)]
    pub fn tuple(self) -> Tuple {
        let [a, b] = self.0;
        Tuple {
            src: (a >> 32) as u32,
            dst: a as u32,
            sport: (b >> 48) as u16,
            dport: (b >> 32) as u16,
            proto: (b >> 24) as u8,
        }
    }

    /// Its FIB index.
    #[inline(always)]
    pub fn fib(self) -> u32 {
        (self.0[1] & 0x7f_ffff) as u32
    }

    /// Its side.
    #[inline(always)]
    pub fn side(self) -> Side {
        if self.0[1] >> 23 & 1 != 0 {
            Side::Out
        } else {
            Side::In
        }
    }
}

impl Table {
    /// A table for at most `max` sessions.
    pub fn new(max: usize, seed: u64) -> Table {
        // The table's values (session index × 2 + flow) are `u32`s below `u32::MAX`
        // (`ops::enable` refuses more; a clamp for any other caller).
        let max = max.min(MAX_SESSIONS);
        Table {
            sessions: Pool::with_capacity(max),
            // Mapped zeroed, not written: pages are backed as sessions reach them. A
            // prefetch past its length is harmless (`Table::prefetch`).
            hot: ZeroedArray::new(2 * max),
            hot_used: 0,
            keys: FlowTable::with_capacity(2 * max),
            hasher: FoldedKeyHash::new(),
            heads: [None; N_CLASSES],
            tails: [None; N_CLASSES],
            max,
            rng: seed | 1,
            stats: Stats::default(),
            creations: 0,
            #[cfg(test)]
            digest_mask: u64::MAX,
        }
    }

    /// Sessions.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// No session.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// The session limit.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Bytes used: the key table's array, the session pool's slots and the flow records
    /// written so far (up to the highest session index's; the rest is only reserved). With
    /// transparent hugepages the process may hold up to 2 MiB more per mapped array (a
    /// partly used hugepage is backed whole).
    pub fn memory_bytes(&self) -> usize {
        self.keys.memory_bytes()
            + self.sessions.slots() * std::mem::size_of::<Option<Session>>()
            + self.hot_used * std::mem::size_of::<Hot>()
    }

    /// Every session.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &Session)> + '_ {
        self.sessions.iter()
    }

    /// A session.
    #[inline(always)]
    pub fn get(&self, i: u32) -> Option<&Session> {
        self.sessions.get(i)
    }

    /// A session.
    #[inline(always)]
    pub fn get_mut(&mut self, i: u32) -> Option<&mut Session> {
        self.sessions.get_mut(i)
    }

    /// The table key of a flow key (its keyed digest), for [`Table::probe_many`].
    #[inline(always)]
    pub fn digest(&self, side: Side, t: &Tuple, fib: u32) -> u64 {
        self.key_digest(Key::new(side, t, fib))
    }

    /// The table key of a flow key (its keyed digest), for [`Table::probe_many`].
    #[inline(always)]
    pub fn key_digest(&self, k: Key) -> u64 {
        let d = self.hasher.hash(k.0[0], k.0[1]);
        #[cfg(test)]
        let d = d & self.digest_mask;
        d
    }

    /// The table's values for many digests at once (`out[i]` for `digests[i]`, [`MISS`]
    /// where the table has none), looked up as their table's writer does
    /// (only this thread, holding its lock, reads or writes the table). Nothing is prefetched here: a table larger than the
    /// caches had its buckets prefetched by [`Table::prefetch_bucket`] in the pass before; a
    /// smaller one is in cache. A value is only a candidate: [`Table::hit_flow`] or
    /// [`Table::confirm_live`] checks it.
    #[inline]
    pub fn probe_many(&self, digests: &[u64], out: &mut [u64]) {
        for (o, &d) in out.iter_mut().zip(digests) {
            *o = self.probe(d);
        }
    }

    /// [`Table::probe_many`] of one digest.
    #[inline(always)]
    pub fn probe(&self, digest: u64) -> u64 {
        self.keys.get(digest).map_or(MISS, u64::from)
    }

    /// Hints the CPU to fetch the table bucket of `digest` (a [`Table::digest`]) ahead of
    /// its [`Table::probe_many`].
    #[inline(always)]
    pub fn prefetch_bucket(&self, digest: u64) {
        self.keys.prefetch(digest);
    }

    /// Hints the CPU to fetch the hot record of table value `v` (a [`Table::probe_many`]
    /// result, [`MISS`] included) ahead of its [`Table::hit_flow`]: the one line an
    /// established flow's packet reads (no bound check: a prefetch never faults).
    #[inline(always)]
    pub fn prefetch(&self, v: u64) {
        sluice_infra::prefetch(self.hot.as_ptr().wrapping_add(v as usize) as *const u8);
    }

    /// Session `i`'s activity (both flows' counters, its last packet's time).
    pub fn activity(&self, i: u32) -> Activity {
        let h = |w: usize| {
            self.hot
                .get(2 * i as usize + w)
                .copied()
                .unwrap_or(Hot::FREE)
        };
        let (a, b) = (h(0), h(1));
        Activity {
            last: a.last.max(b.last),
            pkts: a.pkts + b.pkts,
            bytes: a.bytes + b.bytes,
        }
    }

    /// Whether session `i` (`s`) expired at `now`: its last packet in either direction
    /// is more than its class's timeout ago.
    #[inline(always)]
    fn expired(&self, i: u32, s: &Session, now: f64, t: &Timeouts) -> bool {
        now - self.activity(i).last > s.class.timeout(t)
    }

    /// [`Table::expired`] for the session of flow `v`, reading the other flow's hot record
    /// only when `v`'s own last packet is older than the timeout.
    #[inline(always)]
    fn flow_expired(&self, v: u64, s: &Session, now: f64, t: &Timeouts) -> bool {
        let to = s.class.timeout(t);
        let last = |v: u64| {
            self.hot
                .get(v as usize)
                .map_or(f64::NEG_INFINITY, |h| h.last)
        };
        now - last(v) > to && now - last(v ^ 1) > to
    }

    /// Whether flow `v`'s LRU stamp is the whole second of `now`: it had a packet less than
    /// a second ago, so its session is live (every timeout is at least a second).
    #[inline(always)]
    fn stamped(&self, v: u64, now: f64) -> bool {
        self.hot
            .get(v as usize)
            .is_some_and(|h| h.stamp == now as u32)
    }

    /// The session and flow of table value `v` if that flow's full match tuple is (`side`,
    /// `t`, `fib`) (a digest hit is never trusted alone).
    #[inline(always)]
    fn matched(&self, side: Side, t: &Tuple, fib: u32, v: u64) -> Option<(u32, u8, &Session)> {
        let (i, which) = ((v >> 1) as u32, (v & 1) as u8);
        let s = self.sessions.get(i)?;
        s.flow_matches(which, side, t, fib).map(|_| (i, which, s))
    }

    /// The session and flow (0: inside, 1: outside) of table value `v` if that flow's full
    /// match tuple is (`side`, `t`, `fib`) (a digest hit is never trusted alone), and
    /// whether it is live at `now`: `Some((i, which, live))`. A flow whose LRU stamp is this
    /// second's had a packet less than a second ago: its session is live without the
    /// timeout compare. That shortcut rests on two invariants: a flow's stamp is the whole
    /// second of a packet at or before its `last` (only [`Hot::new`], [`Table::touch`] and
    /// [`Table::hit_flow`] write either), and every timeout is at least a second ([`Timeouts`],
    /// checked by `ops::set_timeouts`); a debug build asserts that it agrees with the
    /// compare.
    #[inline(always)]
    pub fn confirm_live(
        &self,
        side: Side,
        t: &Tuple,
        fib: u32,
        v: u64,
        now: f64,
        timeouts: &Timeouts,
    ) -> Option<(u32, u8, bool)> {
        self.matched(side, t, fib, v).map(|(i, which, s)| {
            let stamped = self.stamped(v, now);
            debug_assert!(
                !stamped || !self.expired(i, s, now, timeouts),
                "a session stamped this second has expired: a timeout under 1 s?"
            );
            debug_assert_eq!(
                self.flow_expired(v, s, now, timeouts),
                self.expired(i, s, now, timeouts)
            );
            (i, which, stamped || !self.flow_expired(v, s, now, timeouts))
        })
    }

    /// The tests' hit: [`Table::hit_flow`], else [`Table::hit_session`], as pass 2 of the
    /// node takes them (which calls them apart, so that the common case is its own call
    /// site and no [`Hit`] goes through memory).
    #[cfg(test)]
    pub fn hit(
        &mut self,
        k: Key,
        v: u64,
        now: f64,
        timeouts: &Timeouts,
        bytes: usize,
        tcp_flags: u8,
    ) -> Hit {
        match self.hit_flow(k, v, now, bytes, tcp_flags) {
            Some(h) => Hit::Live {
                i: (v >> 1) as u32,
                which: (v & 1) as u8,
                rw: h.rw(),
                deltas: h.deltas(),
            },
            None => self.hit_session(k, v, now, timeouts, bytes, tcp_flags),
        }
    }

    /// The batched path's common hit, the flow's [`Hot`] record alone (one cache line):
    /// when its key words equal the packet's `k` (the full match: tuple, side and FIB), its
    /// stamp is this second's (live, and its LRU position moved this second already) and
    /// the packet is no TCP SYN, FIN or RST (which alone change the TCP state and class),
    /// the packet is recorded (`bytes`, `now`) and the matched record returned, from which
    /// the rewrite is read where the translation writes it (an `Option` of the rewrite and
    /// deltas was built, tested and its tuple spilled to the stack for every packet,
    /// docs/nat.md "Session 19"). `None`: anything else, which takes
    /// [`Table::hit_session`].
    #[inline(always)]
    pub fn hit_flow(
        &mut self,
        k: Key,
        v: u64,
        now: f64,
        bytes: usize,
        tcp_flags: u8,
    ) -> Option<FlowHit<'_>> {
        let h = self.hot.get_mut(v as usize)?;
        let [a, b] = k.0;
        let ctl = tcp_flags & (tcp_flags::SYN | tcp_flags::FIN | tcp_flags::RST);
        let same = (h.kw[0] ^ a) | (h.kw[1] ^ b) | (h.stamp ^ now as u32) as u64;
        if same | ctl as u64 != 0 {
            return None;
        }
        h.count(now, bytes);
        Some(FlowHit(h))
    }

    /// The batched path's hit through the session (when [`Table::hit_flow`] declined):
    /// table value `v` checked as [`Table::confirm_live`] checks it (the full tuple
    /// compare, the expiry) and, when it is a live session's flow `k`, the packet recorded
    /// as [`Table::touch`] records it (`bytes`; TCP: its `tcp_flags` applied to the state
    /// first; the LRU move) and the flow's rewrite and checksum deltas returned.
    #[inline(never)]
    pub fn hit_session(
        &mut self,
        k: Key,
        v: u64,
        now: f64,
        timeouts: &Timeouts,
        bytes: usize,
        tcp_flags: u8,
    ) -> Hit {
        let (side, t, fib) = (k.side(), k.tuple(), k.fib());
        let t = &t;
        // `v` is the table's first candidate for the digest: when it is another flow's (an
        // equal tag, about 2^-32 a slot), the exact lookup tries the others.
        let found = self
            .confirm_live(side, t, fib, v, now, timeouts)
            .map(|f| (f, v))
            .or_else(|| {
                let v = self.find(k)?;
                Some((self.confirm_live(side, t, fib, v, now, timeouts)?, v))
            });
        let Some(((i, which, live), v)) = found else {
            return Hit::Miss;
        };
        if !live {
            return Hit::Expired;
        }
        // Session `i` and flow `v` (`which` is `v`'s low bit) exist: `confirm_live` found
        // them. Each is looked up once more, here, and recorded in place (not through
        // `touch`, which would look both up again).
        let (Some(s), Some(h)) = (self.sessions.get_mut(i), self.hot.get_mut(v as usize)) else {
            return Hit::Miss;
        };
        let class = if t.proto == sluice_wire::ipv4::proto::TCP {
            tcp_update(&mut s.tcp, which == 0, tcp_flags)
        } else {
            s.class
        };
        let (rw, deltas, moved) = record(s, h, now, bytes, class);
        if let Some(old) = moved {
            self.relink(i, old, class);
        }
        Hit::Live {
            i,
            which,
            rw,
            deltas,
        }
    }

    /// The digest's table value checked by [`Table::confirm_live`]: `Some((i, which,
    /// live))` (the per-packet path's lookup, sharing the batched path's liveness check).
    #[inline(always)]
    pub fn lookup_live(
        &self,
        side: Side,
        t: &Tuple,
        fib: u32,
        now: f64,
        timeouts: &Timeouts,
    ) -> Option<(u32, u8, bool)> {
        let v = self.find(Key::new(side, t, fib))?;
        self.confirm_live(side, t, fib, v, now, timeouts)
    }

    /// The table's first candidate for `digest` (tests).
    #[cfg(test)]
    fn value(&self, digest: u64) -> Option<u64> {
        self.keys.get(digest).map(u64::from)
    }

    /// Changes whenever a session is created (a miss found before may have a session now).
    /// Kept apart from [`Stats::created`], the operator's counter, so the frame logic does
    /// not depend on what is shown.
    #[inline(always)]
    pub fn creations(&self) -> u64 {
        self.creations
    }

    /// The table keys of a session's inside and outside flows (computed again when it is
    /// freed rather than stored: 16 bytes less per session for about 20 instructions).
    #[inline]
    fn digests(&self, s: &Session) -> [u64; 2] {
        [
            self.digest(s.i2o.side, &s.i2o.key, s.flow_fib(0)),
            self.digest(s.o2i.side, &s.o2i.key, s.flow_fib(1)),
        ]
    }

    /// Whether no flow has the key (`side`, `t`, `fib`): a port is allocated only if the
    /// outside flow it would make is free, so no live tuple is ever reused.
    #[inline]
    pub fn key_free(&self, side: Side, t: &Tuple, fib: u32) -> bool {
        self.find(Key::new(side, t, fib)).is_none()
    }

    /// The table value of the flow whose key is `k` (every candidate of its digest tried,
    /// [`FlowTable::find`], each confirmed by its flow record's key words).
    #[inline]
    fn find(&self, k: Key) -> Option<u64> {
        self.find_digest(k, self.key_digest(k))
    }

    /// [`Table::find`] of a key whose digest `d` is known.
    #[inline]
    fn find_digest(&self, k: Key, d: u64) -> Option<u64> {
        let hot = &self.hot;
        let is = |v: u32| hot.get(v as usize).is_some_and(|h| h.kw == k.0);
        self.keys.find(d, is).map(u64::from)
    }

    /// Adds a session. If the table is full, the oldest expired session is freed first.
    pub fn create(&mut self, s: Session, now: f64, t: &Timeouts) -> Result<u32, CreateError> {
        if self.sessions.len() >= self.max && self.expire(now, t, 1) == 0 {
            return Err(CreateError::Full);
        }
        let [f0, f1] = [
            Key::new(s.i2o.side, &s.i2o.key, s.flow_fib(0)),
            Key::new(s.o2i.side, &s.o2i.key, s.flow_fib(1)),
        ];
        let [k0, k1] = [self.key_digest(f0), self.key_digest(f1)];
        if f0 == f1 || self.find_digest(f0, k0).is_some() || self.find_digest(f1, k1).is_some() {
            return Err(CreateError::Collision);
        }
        let class = s.class;
        let hot = [
            Hot::new(&s.i2o, s.flow_fib(0), now),
            Hot::new(&s.o2i, s.flow_fib(1), now),
        ];
        // A `u32`, so the values below are at most `MAX_VALUE` (below `MISS`).
        let i: u32 = self.sessions.insert(s);
        let at = 2 * i as usize;
        self.hot_used = self.hot_used.max(at + 2);
        self.hot[at..at + 2].copy_from_slice(&hot);
        let ok0 = self.keys.insert(k0, i << 1).is_ok();
        let ok1 = ok0 && self.keys.insert(k1, i << 1 | 1).is_ok();
        if !ok1 {
            if ok0 {
                self.keys.remove(k0, i << 1);
            }
            self.sessions.remove(i);
            self.hot[at..at + 2].fill(Hot::FREE);
            return Err(CreateError::Full);
        }
        self.link_tail(i, class);
        self.stats.created += 1;
        self.creations += 1;
        Ok(i)
    }

    /// Frees a session.
    pub fn free(&mut self, i: u32) -> Option<Session> {
        let class = self.sessions.get(i)?.class;
        self.unlink(i, class);
        let s = self.sessions.remove(i)?;
        if let Some(h) = self.hot.get_mut(2 * i as usize..2 * i as usize + 2) {
            h.fill(Hot::FREE);
        }
        let [k0, k1] = self.digests(&s);
        // Each live flow is in the table under its digest (`create` inserted both).
        let removed = [
            self.keys.remove(k0, i << 1),
            self.keys.remove(k1, i << 1 | 1),
        ];
        debug_assert_eq!(
            removed,
            [true, true],
            "session {i}'s flows not in the key table"
        );
        Some(s)
    }

    /// Records a packet of flow `which` of session `i` at `now` and the timeout class it
    /// leaves the session in (`class`): the flow's time and counters and, when the class
    /// changes or the flow's LRU stamp is not this second's, the new stamp and class, the
    /// session moved to the tail of `class`'s LRU list (so the LRU position moves at most
    /// once a second per flow). Returns the flow's rewrite and checksum deltas (`None`: no
    /// such session).
    #[inline(always)]
    pub fn touch(
        &mut self,
        i: u32,
        which: u8,
        now: f64,
        bytes: usize,
        class: Class,
    ) -> Option<(Tuple, Deltas)> {
        let s = self.sessions.get_mut(i)?;
        let h = self.hot.get_mut(2 * i as usize + (which & 1) as usize)?;
        let (rw, deltas, moved) = record(s, h, now, bytes, class);
        if let Some(old) = moved {
            self.relink(i, old, class);
        }
        Some((rw, deltas))
    }

    /// Moves session `i` from its class `old`'s LRU list to the tail of `class`'s (after
    /// [`Table::touch`] asked for it).
    #[inline(always)]
    fn relink(&mut self, i: u32, old: Class, class: Class) {
        self.unlink(i, old);
        self.link_tail(i, class);
    }

    fn link_tail(&mut self, i: u32, c: Class) {
        let c = c as usize;
        let prev = self.tails[c];
        if let Some(s) = self.sessions.get_mut(i) {
            s.prev = prev;
            s.next = None;
        }
        match prev.and_then(|p| self.sessions.get_mut(p)) {
            Some(p) => p.next = Some(i),
            None => self.heads[c] = Some(i),
        }
        self.tails[c] = Some(i);
    }

    fn unlink(&mut self, i: u32, c: Class) {
        let c = c as usize;
        let Some(s) = self.sessions.get(i) else {
            return;
        };
        let (prev, next) = (s.prev, s.next);
        match prev.and_then(|p| self.sessions.get_mut(p)) {
            Some(p) => p.next = next,
            None => self.heads[c] = next,
        }
        match next.and_then(|n| self.sessions.get_mut(n)) {
            Some(n) => n.prev = prev,
            None => self.tails[c] = prev,
        }
    }

    /// Frees up to `budget` expired sessions, oldest first in each class; returns how many.
    /// A session's LRU position lags its last packet by less than a second, so a session
    /// is freed at most a second after it expired.
    pub fn expire(&mut self, now: f64, t: &Timeouts, budget: usize) -> usize {
        let mut n = 0;
        for c in 0..N_CLASSES {
            while n < budget {
                let Some(h) = self.heads[c] else { break };
                let Some(s) = self.sessions.get(h) else { break };
                if !self.expired(h, s, now, t) {
                    break;
                }
                self.free(h);
                n += 1;
            }
        }
        self.stats.expired += n as u64;
        n
    }

    /// Frees every session `f` selects; returns how many.
    pub fn free_where(&mut self, f: impl Fn(&Session) -> bool) -> usize {
        let v: Vec<u32> = self
            .sessions
            .iter()
            .filter(|(_, s)| f(s))
            .map(|(i, _)| i)
            .collect();
        for &i in &v {
            self.free(i);
        }
        self.stats.deleted += v.len() as u64;
        v.len()
    }

    /// A pseudo-random number (xorshift64*), for port choice.
    #[inline(always)]
    pub fn random(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(clippy::too_many_arguments)]
    fn hit(
        tb: &mut Table,
        side: Side,
        t: &Tuple,
        fib: u32,
        v: u64,
        now: f64,
        to: &Timeouts,
        bytes: usize,
        flags: u8,
    ) -> Hit {
        tb.hit(Key::new(side, t, fib), v, now, to, bytes, flags)
    }

    fn t(src: u32, sport: u16, dst: u32, dport: u16) -> Tuple {
        Tuple {
            src,
            dst,
            sport,
            dport,
            proto: 17,
        }
    }

    fn session(in_port: u16, out_port: u16) -> Session {
        let k = t(10, in_port, 99, 53);
        Session::new(
            Flow {
                key: k,
                side: Side::In,
                rw: Tuple {
                    src: 20,
                    sport: out_port,
                    ..k
                },
            },
            Flow {
                key: t(99, 53, 20, out_port),
                side: Side::Out,
                rw: t(99, 53, 10, in_port),
            },
            0,
            0,
            None,
        )
    }

    /// The inside key of [`session`]`(1000, ..)`.
    const K: Tuple = Tuple {
        src: 10,
        dst: 99,
        sport: 1000,
        dport: 53,
        proto: 17,
    };

    /// A table of `max` sessions (seed `seed`) holding `session(1000, 2000)`: the
    /// table, the session's index and the value of its inside key [`K`].
    fn one_session(max: usize, seed: u64, now: f64, to: &Timeouts) -> (Table, u32, u64) {
        let mut tb = Table::new(max, seed);
        let a = tb.create(session(1000, 2000), now, to).expect("a");
        let v = tb.value(tb.digest(Side::In, &K, 0)).expect("key");
        (tb, a, v)
    }

    #[test]
    fn confirm_live_checks_the_tuple_and_expiry() {
        let to = Timeouts {
            udp: 1,
            ..Timeouts::default()
        };
        let (mut tb, a, v) = one_session(2, 7, 10.25, &to);
        let k = K;
        let live = |tb: &Table, now: f64| tb.confirm_live(Side::In, &k, 0, v, now, &to);
        // The same second as its last packet: the stamp shortcut answers (live), as the
        // compare would (a debug build asserts they agree).
        assert_eq!(live(&tb, 10.9), Some((a, 0, true)));
        // The next second: the timeout decides (1 s).
        assert_eq!(live(&tb, 11.2), Some((a, 0, true)));
        assert_eq!(live(&tb, 11.3), Some((a, 0, false)));
        // A packet late in second 11 stamps the session 11: early in second 12 it is live by
        // the compare; late in second 12 it has expired, although its stamp is only one
        // second old (a shortcut taking "stamped within the last second" as live fails).
        tb.touch(a, 0, 11.95, 60, Class::Udp);
        assert_eq!(live(&tb, 12.0), Some((a, 0, true)));
        assert_eq!(live(&tb, 12.96), Some((a, 0, false)));
        // The outside flow's key, looked up by out2in, is the same session's flow 1.
        let ok = t(99, 53, 20, 2000);
        let vo = tb.value(tb.digest(Side::Out, &ok, 0)).expect("out key");
        assert_eq!(
            tb.confirm_live(Side::Out, &ok, 0, vo, 12.5, &to),
            Some((a, 1, true))
        );
        assert_eq!(tb.confirm_live(Side::In, &ok, 0, vo, 12.5, &to), None);
        // The per-packet path's lookup answers the same.
        assert_eq!(
            tb.lookup_live(Side::Out, &ok, 0, 12.5, &to),
            Some((a, 1, true))
        );
        assert_eq!(
            tb.lookup_live(Side::In, &k, 0, 12.96, &to),
            Some((a, 0, false))
        );
        assert_eq!(tb.lookup_live(Side::In, &ok, 0, 12.5, &to), None);
        // Another tuple, side or FIB with this value is no match.
        assert_eq!(
            tb.confirm_live(Side::In, &t(10, 1001, 99, 53), 0, v, 10.9, &to),
            None
        );
        assert_eq!(tb.confirm_live(Side::Out, &k, 0, v, 10.9, &to), None);
        assert_eq!(tb.confirm_live(Side::In, &k, 1, v, 10.9, &to), None);
    }

    /// `Table::hit`: only the flow's full tuple on its side and FIB is a hit; an expired
    /// session is reported, not recorded; a live one is recorded (counters, time, TCP
    /// state) and gives its flow's rewrite and deltas.
    #[test]
    fn hit_confirms_records_and_rewrites() {
        let to = Timeouts::default();
        let (mut tb, a, v) = one_session(4, 3, 10.0, &to);
        let k = K;
        let ok = t(99, 53, 20, 2000);
        let vo = tb.value(tb.digest(Side::Out, &ok, 0)).expect("key");
        let miss = |h: Hit| matches!(h, Hit::Miss);
        assert!(
            miss(hit(&mut tb, Side::In, &ok, 0, v, 10.5, &to, 60, 0)),
            "tuple"
        );
        assert!(
            miss(hit(&mut tb, Side::Out, &k, 0, v, 10.5, &to, 60, 0)),
            "side"
        );
        assert!(
            miss(hit(&mut tb, Side::In, &k, 1, v, 10.5, &to, 60, 0)),
            "fib"
        );
        assert_eq!(tb.activity(a).pkts, 0, "a miss records nothing");
        let s = tb.get(a).expect("a").clone();
        match hit(&mut tb, Side::In, &k, 0, v, 11.5, &to, 60, 0) {
            Hit::Live {
                i,
                which,
                rw,
                deltas,
            } => {
                assert_eq!((i, which), (a, 0));
                assert_eq!(rw, s.i2o.rw);
                assert_eq!(deltas, Deltas::new(s.i2o.key, s.i2o.rw));
            }
            h => panic!("{h:?}"),
        }
        match hit(&mut tb, Side::Out, &ok, 0, vo, 12.0, &to, 40, 0) {
            Hit::Live {
                which, rw, deltas, ..
            } => {
                assert_eq!(which, 1);
                assert_eq!(rw, s.o2i.rw);
                assert_eq!(deltas, Deltas::new(s.o2i.key, s.o2i.rw));
            }
            h => panic!("{h:?}"),
        }
        let act = tb.activity(a);
        assert_eq!((act.pkts, act.bytes, act.last), (2, 100, 12.0));
        // UDP times out after 300 s without a packet: reported, not recorded.
        assert!(matches!(
            hit(&mut tb, Side::In, &k, 0, v, 312.5, &to, 60, 0),
            Hit::Expired
        ));
        assert_eq!(tb.activity(a).pkts, 2);
        // TCP: the flags move the state and the class.
        let mut tcp = session(1001, 2001);
        for f in [
            &mut tcp.i2o.key,
            &mut tcp.i2o.rw,
            &mut tcp.o2i.key,
            &mut tcp.o2i.rw,
        ] {
            f.proto = 6;
        }
        let tcp = Session::new(tcp.i2o, tcp.o2i, 0, 0, None);
        let b = tb.create(tcp, 20.0, &to).expect("b");
        let (ki, ko) = (tb.get(b).expect("b").i2o.key, tb.get(b).expect("b").o2i.key);
        let vi = tb.value(tb.digest(Side::In, &ki, 0)).expect("key");
        let vb = tb.value(tb.digest(Side::Out, &ko, 0)).expect("key");
        assert_eq!(tb.get(b).expect("b").class, Class::TcpTransitory);
        hit(&mut tb, Side::In, &ki, 0, vi, 20.1, &to, 60, tcp_flags::SYN);
        hit(
            &mut tb,
            Side::Out,
            &ko,
            0,
            vb,
            20.2,
            &to,
            60,
            tcp_flags::SYN | tcp_flags::ACK,
        );
        let s = tb.get(b).expect("b");
        assert_eq!(
            (s.tcp_state(), s.class),
            ("established", Class::TcpEstablished)
        );
    }

    /// Whether session `i` is on class `c`'s LRU list (walked from its head).
    fn on_list(tb: &Table, c: Class, i: u32) -> bool {
        let mut at = tb.heads[c as usize];
        while let Some(j) = at {
            if j == i {
                return true;
            }
            at = tb.get(j).and_then(|s| s.next);
        }
        false
    }

    /// TCP FIN from both sides, or an RST, on an established flow whose record is stamped
    /// this second (so only the control flags keep the packet off the hot record) moves
    /// the session to the transitory class and its LRU list; one FIN leaves it established.
    #[test]
    fn fin_both_ways_or_rst_makes_the_session_transitory_in_the_same_second() {
        use tcp_flags::*;
        let to = Timeouts::default();
        let mut tb = Table::new(4, 11);
        let tcp = |in_port: u16, out_port: u16| {
            let mut s = session(in_port, out_port);
            for f in [&mut s.i2o.key, &mut s.i2o.rw, &mut s.o2i.key, &mut s.o2i.rw] {
                f.proto = 6;
            }
            Session::new(s.i2o, s.o2i, 0, 0, None)
        };
        // Made in second 19 (its SYNs, the flows' first packets of second 20, take the
        // session whatever their flags), established at 20.2: both flows stamped 20.
        let open = |tb: &mut Table, in_port: u16, out_port: u16| {
            let i = tb
                .create(tcp(in_port, out_port), 19.5, &to)
                .expect("create");
            let s = tb.get(i).expect("s");
            let (ki, ko) = (s.i2o.key, s.o2i.key);
            let vi = tb.value(tb.digest(Side::In, &ki, 0)).expect("in key");
            let vo = tb.value(tb.digest(Side::Out, &ko, 0)).expect("out key");
            hit(tb, Side::In, &ki, 0, vi, 20.1, &to, 60, SYN);
            hit(tb, Side::Out, &ko, 0, vo, 20.2, &to, 60, SYN | ACK);
            assert_eq!(tb.get(i).expect("s").class, Class::TcpEstablished);
            assert!(on_list(tb, Class::TcpEstablished, i));
            (i, ki, ko, vi, vo)
        };
        let (a, ki, ko, vi, vo) = open(&mut tb, 1000, 2000);
        hit(&mut tb, Side::In, &ki, 0, vi, 20.3, &to, 60, FIN | ACK);
        let s = tb.get(a).expect("a");
        assert_eq!((s.tcp_state(), s.class), ("closing", Class::TcpEstablished));
        hit(&mut tb, Side::Out, &ko, 0, vo, 20.4, &to, 60, FIN | ACK);
        let s = tb.get(a).expect("a");
        assert_eq!((s.tcp_state(), s.class), ("closed", Class::TcpTransitory));
        assert!(
            on_list(&tb, Class::TcpTransitory, a),
            "FINs: on the transitory list"
        );
        assert!(!on_list(&tb, Class::TcpEstablished, a));
        let (b, ki, _, vi, _) = open(&mut tb, 1001, 2001);
        hit(&mut tb, Side::In, &ki, 0, vi, 20.5, &to, 60, RST);
        let s = tb.get(b).expect("b");
        assert_eq!((s.tcp_state(), s.class), ("reset", Class::TcpTransitory));
        assert!(
            on_list(&tb, Class::TcpTransitory, b),
            "RST: on the transitory list"
        );
        assert!(!on_list(&tb, Class::TcpEstablished, b));
    }

    /// A new table writes no flow record up front (they are reserved, written as sessions
    /// are made), and its memory counts the records written.
    #[test]
    fn flow_records_are_reserved_not_written() {
        let to = Timeouts::default();
        let mut tb = Table::new(1000, 1);
        assert_eq!(tb.hot_used, 0);
        assert!(tb.hot.len() >= 2000);
        let empty = tb.memory_bytes();
        assert!(empty < 2000 * std::mem::size_of::<Hot>(), "{empty}");
        tb.create(session(1000, 2000), 1.0, &to).expect("a");
        assert_eq!(tb.hot_used, 2);
        assert_eq!(
            tb.memory_bytes(),
            empty + std::mem::size_of::<Option<Session>>() + 2 * std::mem::size_of::<Hot>()
        );
    }

    /// A hit moves its session to the tail of its class's LRU list (once a second), so
    /// `expire` frees the other, older session first: hit the first of two sessions made in
    /// the same second, and the second one expires first.
    #[test]
    fn hit_moves_the_session_to_its_lru_tail() {
        let to = Timeouts::default();
        let (mut tb, a, v) = one_session(4, 5, 10.0, &to);
        let b = tb.create(session(1001, 2001), 10.0, &to).expect("b");
        let k = K;
        assert!(matches!(
            hit(&mut tb, Side::In, &k, 0, v, 200.0, &to, 60, 0),
            Hit::Live { i, .. } if i == a
        ));
        // UDP 300 s: b (last 10 s) has expired at 310.5 s, a (last 200 s) has not. Without
        // the move, a would still head the list and stop the walk: nothing freed.
        assert_eq!(tb.expire(310.5, &to, 100), 1);
        assert!(tb.get(b).is_none(), "b freed");
        assert!(tb.get(a).is_some(), "a kept");
    }

    /// The session and flow of a flow key, whether expired or not.
    fn lookup(tb: &Table, side: Side, t: &Tuple, fib: u32) -> Option<(u32, u8)> {
        let v = tb.find(Key::new(side, t, fib))?;
        tb.matched(side, t, fib, v).map(|(i, which, _)| (i, which))
    }

    #[test]
    fn create_lookup_expire_free() {
        let to = Timeouts::default();
        let mut tb = Table::new(3, 7);
        let a = tb.create(session(1000, 2000), 0.0, &to).expect("a");
        // Misses taken before a create are stale.
        assert_eq!(tb.creations(), 1);
        assert_eq!(lookup(&tb, Side::In, &t(10, 1000, 99, 53), 0), Some((a, 0)));
        assert_eq!(
            lookup(&tb, Side::Out, &t(99, 53, 20, 2000), 0),
            Some((a, 1))
        );
        assert_eq!(
            lookup(&tb, Side::In, &t(99, 53, 20, 2000), 0),
            None,
            "side counts"
        );
        assert_eq!(
            lookup(&tb, Side::In, &t(10, 1000, 99, 53), 1),
            None,
            "fib counts"
        );
        assert!(!tb.key_free(Side::Out, &t(99, 53, 20, 2000), 0));
        // The same tuple twice is refused.
        assert_eq!(
            tb.create(session(1000, 2000), 0.0, &to),
            Err(CreateError::Collision)
        );
        tb.create(session(1001, 2001), 100.0, &to).expect("b");
        tb.create(session(1002, 2002), 200.0, &to).expect("c");
        // Full: nothing expired at 250 s (UDP 300 s).
        assert_eq!(
            tb.create(session(1003, 2003), 250.0, &to),
            Err(CreateError::Full)
        );
        // At 301 s the first expired: it is recycled for the new session.
        tb.create(session(1003, 2003), 301.0, &to).expect("d");
        assert_eq!(lookup(&tb, Side::In, &t(10, 1000, 99, 53), 0), None);
        assert_eq!(tb.len(), 3);
        // Touching moves a session to the tail: the 1001 session stays, 1002 expires.
        let b = lookup(&tb, Side::In, &t(10, 1001, 99, 53), 0).expect("b").0;
        tb.touch(b, 0, 450.0, 60, Class::Udp);
        assert_eq!(tb.expire(520.0, &to, 100), 1);
        assert!(lookup(&tb, Side::In, &t(10, 1001, 99, 53), 0).is_some());
        assert_eq!(tb.expire(10_000.0, &to, 100), 2);
        assert!(tb.is_empty());
        assert_eq!(tb.stats.created, 4);
        assert_eq!(tb.stats.expired, 4);
    }

    #[test]
    fn tcp_states() {
        use tcp_flags::*;
        let mut s = 0;
        assert_eq!(tcp_update(&mut s, true, SYN), Class::TcpTransitory);
        assert_eq!(tcp_update(&mut s, false, SYN | ACK), Class::TcpEstablished);
        assert_eq!(tcp_update(&mut s, true, ACK), Class::TcpEstablished);
        assert_eq!(tcp_update(&mut s, true, FIN | ACK), Class::TcpEstablished);
        assert_eq!(tcp_update(&mut s, false, FIN | ACK), Class::TcpTransitory);
        // A new SYN on the closed tuple starts over.
        assert_eq!(tcp_update(&mut s, true, SYN), Class::TcpTransitory);
        assert_eq!(s, tcp::SYN_IN);
        let mut r = 0;
        tcp_update(&mut r, true, SYN);
        tcp_update(&mut r, false, SYN | ACK);
        assert_eq!(tcp_update(&mut r, false, RST), Class::TcpTransitory);
    }

    /// Flows whose digests are equal (all of them here: the mask keeps none of the bits)
    /// coexist: each session is created (none refused as a collision), the exact lookup
    /// finds each, and a hit given the table's first candidate (another flow's value) is
    /// still the packet's own flow (`hit_session` tries the other candidates).
    #[test]
    fn flows_with_one_digest_coexist() {
        let to = Timeouts::default();
        let mut tb = Table::new(16, 3);
        tb.digest_mask = 0;
        let ids: Vec<u32> = (0..5)
            .map(|n| {
                tb.create(session(1000 + n, 2000 + n), 1.0, &to)
                    .expect("create")
            })
            .collect();
        let first = tb.probe(0);
        assert_ne!(first, MISS);
        for (n, &i) in ids.iter().enumerate() {
            let k = t(10, 1000 + n as u16, 99, 53);
            assert_eq!(lookup(&tb, Side::In, &k, 0), Some((i, 0)), "session {n}");
            match tb.hit(Key::new(Side::In, &k, 0), first, 1.5, &to, 60, 0) {
                Hit::Live { i: got, which, .. } => assert_eq!((got, which), (i, 0), "session {n}"),
                h => panic!("session {n}: {h:?}"),
            }
        }
        // The same key twice is still refused.
        assert_eq!(
            tb.create(session(1002, 2002), 2.0, &to),
            Err(CreateError::Collision)
        );
        // Freeing one leaves the others found.
        tb.free(ids[0]);
        let k = t(10, 1004, 99, 53);
        assert_eq!(lookup(&tb, Side::In, &k, 0), Some((ids[4], 0)));
    }
}
