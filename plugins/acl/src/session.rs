//! Stateful ACL sessions (`permit+reflect`): one table per thread.
//!
//! A packet that a `permit+reflect` rule permits on interface X in direction D (input or
//! output) creates a session on X. The session admits, without consulting the ACLs again,
//! the packets of its initiator in direction D and those of the responder (the reversed
//! tuple) in the other direction of X — VPP's reflexive ACLs, whose sessions also belong to
//! one interface. The usual firewall is therefore both lists on the outside interface:
//! `output` with `permit+reflect` (what may leave), `input` denying the rest (what may
//! come in unsolicited).
//!
//! Keys are normalised (the lower address:port first) so both directions find one entry;
//! the session remembers which end initiated. ICMP echo requests and replies key on the
//! identifier (request `(src, id) -> (dst, 0)`, reply `(src, 0) -> (dst, id)`), so a reply
//! is the request's reversed tuple.
//!
//! Timeouts (VPP's `set acl-plugin session timeout`): UDP and ICMP `udp idle`; TCP `tcp
//! idle` once both ends sent a SYN and neither a FIN or RST, `tcp transient` otherwise (the
//! handshake, closing, reset). An expired session is freed when a lookup meets it and by the
//! `acl-plugin-fa-cleaner` process once a second.
//!
//! Every session belongs to one thread: the owner of its normalised key (a hash over the
//! worker threads, the main thread when there are none). Packets of stateful interfaces are
//! handed to the owner before the lookup, so each table is only used by its thread (and the
//! control plane under the thread's mutex).
//!
//! A table is a [`FlowTable`] (one 64-byte line a bucket: seven 32-bit tags with their
//! values, as NAT44's sessions since session 15) from a keyed 64-bit digest of the session
//! key ([`FoldedKeyHash`], as NAT44's: two folded multiplies under a secret random key, once
//! for an IPv4 key, three chained for IPv6; about a tenth of SipHash's instructions) to the
//! session's slot. A tag match is a candidate, confirmed against the slot's key; when the
//! first candidate is another key's, every candidate is tried, so two live keys with one
//! digest (or one tag in a bucket) both have their sessions. The session records are sized
//! for the thread's limit at its first session, zeroed and, from 2 MiB on, in transparent
//! hugepages ([`ZeroedArray`]); they never grow or move. The bucket array is sized for
//! [`FIRST_SESSIONS`] then, and rebuilt once for the limit when the table outgrows that
//! (a sparse 8 MiB array under a few thousand sessions cost TLB misses without hugepages).

use sluice_infra::bihash::FoldedKeyHash;
use sluice_infra::epoch::{ZeroValid, ZeroedArray};
use sluice_infra::flowtab::FlowTable;

/// Session timeouts, seconds.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// UDP and ICMP idle.
    pub udp_idle: u32,
    /// TCP established idle.
    pub tcp_idle: u32,
    /// TCP opening, closing or reset.
    pub tcp_transient: u32,
}

/// The last-packet times ([`Session::last`]) at or before which a session has expired at
/// one time, by timeout: the timeouts subtracted from that time once (a frame's, a
/// lookup's), not converted and subtracted at every hit.
#[derive(Copy, Clone, Debug)]
pub struct Cutoffs {
    udp: f64,
    tcp_idle: f64,
    tcp_transient: f64,
}

impl Cutoffs {
    /// The cutoffs of timeouts `t` at `now`.
    #[inline(always)]
    pub fn at(now: f64, t: &Timeouts) -> Cutoffs {
        Cutoffs {
            udp: now - t.udp_idle as f64,
            tcp_idle: now - t.tcp_idle as f64,
            tcp_transient: now - t.tcp_transient as f64,
        }
    }
}

/// The idle timeout a session is under ([`Session::timeout`], [`Cutoffs`]).
#[derive(Clone, Copy)]
enum TimeoutClass {
    /// Any protocol but TCP.
    Udp,
    /// TCP, established.
    TcpIdle,
    /// TCP, opening or closing.
    TcpTransient,
}

impl Default for Timeouts {
    /// VPP's defaults.
    fn default() -> Self {
        Timeouts {
            udp_idle: 600,
            tcp_idle: 24 * 3600,
            tcp_transient: 120,
        }
    }
}

/// Sessions per thread at most (a packet that would create one more is dropped and
/// counted, `session_limit`).
pub const DEFAULT_MAX_SESSIONS: usize = 500_000;

/// Sessions of a thread's table from which the IPv4 nodes prefetch its buckets and
/// records ahead of the packets ([`Table::pipe_min`]). Measured (docs/acl.md, session 12):
/// it breaks even at 4,096 sessions and wins at 8,192 (one clean round with the earlier
/// 8/4 distances, five of five with 16/8, at load); below, its ~94 instructions a hit
/// cost more than the misses it hides.
pub const PIPE_MIN_SESSIONS: usize = 8192;

/// Sessions the bucket array first holds (2,048 buckets, 128 KiB: the table below the
/// look-ahead's [`PIPE_MIN_SESSIONS`], which reads its buckets straight, on few pages); the
/// session after these rebuilds it once for the thread's limit ([`Table::create`]). Sized
/// for the limit from the first session (session 16), 4,096 sessions spread over 8 MiB of
/// buckets: 4,096 lines on 2,048 pages without transparent hugepages.
pub const FIRST_SESSIONS: usize = PIPE_MIN_SESSIONS;

/// A normalised session key.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct SessKey {
    /// Interface the session belongs to.
    pub sw_if: u32,
    /// IPv6.
    pub v6: bool,
    /// Protocol.
    pub proto: u8,
    /// The lower (address, port) end.
    pub lo: (u128, u16),
    /// The higher end.
    pub hi: (u128, u16),
}

impl SessKey {
    /// The key of a packet's tuple and whether its source is the `lo` end.
    #[inline(always)]
    pub fn of(sw_if: u32, v6: bool, proto: u8, src: (u128, u16), dst: (u128, u16)) -> (Self, bool) {
        let src_lo = src <= dst;
        let (lo, hi) = if src_lo { (src, dst) } else { (dst, src) };
        (
            SessKey {
                sw_if,
                v6,
                proto,
                lo,
                hi,
            },
            src_lo,
        )
    }

    /// A hash equal for both directions (picks the owning thread).
    #[inline(always)]
    pub fn owner_hash(&self) -> u64 {
        let fold = |a: u128| (a as u64) ^ ((a >> 64) as u64);
        owner_mix(
            fold(self.lo.0),
            fold(self.hi.0),
            (self.lo.1 as u64) << 16 | self.hi.1 as u64,
            self.proto,
            self.sw_if,
        )
    }

    /// The key packed in two words when it is IPv4 on an interface below 2^23 (the
    /// [`Packed4`] of the same tuple), `None` otherwise.
    #[inline(always)]
    pub fn packed(&self) -> Option<[u64; 2]> {
        if self.v6 || self.sw_if >> 23 != 0 {
            return None;
        }
        Some(pack4(
            self.lo.0 as u64,
            self.lo.1,
            self.hi.0 as u64,
            self.hi.1,
            self.proto,
            self.sw_if,
        ))
    }
}

/// [`SessKey::owner_hash`] from the folded addresses, the ports (`lo << 16 | hi`), protocol
/// and interface.
#[inline(always)]
fn owner_mix(lo: u64, hi: u64, ports: u64, proto: u8, sw_if: u32) -> u64 {
    let mut h = lo ^ hi.rotate_left(17);
    h ^= ports << 8 | proto as u64;
    h ^= (sw_if as u64) << 40;
    // A 64-bit finaliser (murmur3's fmix64).
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The two words of a narrow key: `lo address << 32 | hi address`, then the ports,
/// protocol and interface (bit 23 clear: a wide key's table digest sets it).
#[inline(always)]
fn pack4(lo: u64, lo_port: u16, hi: u64, hi_port: u16, proto: u8, sw_if: u32) -> [u64; 2] {
    [
        lo << 32 | (hi & 0xffff_ffff),
        (lo_port as u64) << 48 | (hi_port as u64) << 32 | (proto as u64) << 24 | sw_if as u64,
    ]
}

/// An IPv4 packet's session key straight from its header fields, without a [`SessKey`]:
/// the session hit's fast path. The same key as [`SessKey::of`] followed by
/// [`SessKey::packed`] (a unit test compares them), for interfaces below 2^23.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Packed4 {
    /// The packed key.
    pub pk: [u64; 2],
    /// The packet's source is the key's `lo` end.
    pub src_lo: bool,
}

impl Packed4 {
    /// The key of `src:sport -> dst:dport` of protocol `proto` on `sw_if` (< 2^23).
    #[inline(always)]
    pub fn of(sw_if: u32, proto: u8, src: u32, sport: u16, dst: u32, dport: u16) -> Packed4 {
        Packed4::of_words(
            sw_if,
            proto,
            (src as u64) << 32 | dst as u64,
            (sport as u32) << 16 | dport as u32,
        )
    }

    /// [`Packed4::of`] from the IPv4 header's address words as they lie (bytes 12..20 read
    /// big-endian: `src << 32 | dst`) and the L4 header's port word (bytes 0..4:
    /// `sport << 16 | dport`). The key's first word is `addrs` or its halves swapped, its
    /// ports `ports` or its halves swapped: two loads, two byte swaps and two selects,
    /// where ordering the ends as numbers and packing them again took twice the
    /// instructions.
    #[inline(always)]
    pub fn of_words(sw_if: u32, proto: u8, addrs: u64, ports: u32) -> Packed4 {
        // Bit 23 and up clear: what keeps a packed key from ever being `FREE` (or a wide
        // key's `pk`); the callers route wider interfaces to the `SessKey` path.
        debug_assert!(sw_if >> 23 == 0);
        // `(address, port)` ordered as one 48-bit number: `SessKey::of`'s tuple order.
        let x = (addrs >> 32) << 16 | (ports >> 16) as u64;
        let y = (addrs & 0xffff_ffff) << 16 | (ports & 0xffff) as u64;
        let src_lo = x <= y;
        let (a, p) = if src_lo {
            (addrs, ports)
        } else {
            (addrs.rotate_left(32), ports.rotate_left(16))
        };
        Packed4 {
            pk: [a, (p as u64) << 32 | (proto as u64) << 24 | sw_if as u64],
            src_lo,
        }
    }

    /// [`SessKey::owner_hash`] of the same key.
    #[inline(always)]
    pub fn owner_hash(&self) -> u64 {
        let [a, b] = self.pk;
        owner_mix(
            a >> 32,
            a & 0xffff_ffff,
            b >> 32,
            (b >> 24) as u8,
            b as u32 & 0x7f_ffff,
        )
    }
}

/// TCP state bits.
pub mod tcp {
    /// SYN from the initiator.
    pub const SYN_INIT: u8 = 1;
    /// SYN from the responder.
    pub const SYN_RESP: u8 = 2;
    /// FIN seen (either end).
    pub const FIN: u8 = 4;
    /// RST seen.
    pub const RST: u8 = 8;
}

const TCP_FIN: u8 = 0x01;
const TCP_SYN: u8 = 0x02;
const TCP_RST: u8 = 0x04;
const TCP_ACK: u8 = 0x10;

/// What the window check needs of a TCP segment ([`TcpWindow::check`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct TcpSeg {
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgement number (meaningful with ACK).
    pub ack: u32,
    /// Window field, unscaled.
    pub win: u16,
    /// Flags.
    pub flags: u8,
    /// Payload bytes.
    pub len: u32,
    /// The window scale option (a SYN's).
    pub wscale: Option<u8>,
}

/// Why a segment of a tracked connection is refused.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TcpReject {
    /// Sequence or acknowledgement number outside the window.
    OutOfWindow,
    /// A RST whose sequence number is outside the window.
    BadRst,
}

/// One end of a TCP connection as seen by the firewall (conntrack's `ip_ct_tcp_state`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct TcpEnd {
    /// Highest sequence number sent + 1 (SYN and FIN count).
    pub end: u32,
    /// Highest sequence number the other end allows it (its ACK + window).
    pub maxend: u32,
    /// Largest window it advertised (scaled).
    pub maxwin: u32,
    /// Its window scale (0 unless both SYNs carried the option).
    pub scale: u8,
    /// Its SYN carried the window scale option.
    has_scale: bool,
    /// It sent a segment.
    pub seen: bool,
}

/// Sequence-number space comparisons (RFC 1982).
#[inline(always)]
fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

#[inline(always)]
fn after(a: u32, b: u32) -> bool {
    before(b, a)
}

/// TCP window tracking of a session (Guido van Rooij's "Real stateful TCP packet
/// filtering", as Linux conntrack's `tcp_in_window`): a segment is in the window when
///
/// 1. its sequence number is at most what the receiver allowed (`seq <= sender.maxend`),
/// 2. its end is no further back than the receiver's largest window
///    (`seq + len >= sender.end - receiver.maxwin`),
/// 3. it acknowledges nothing the receiver did not send (`ack <= receiver.end`),
/// 4. nor more than a window back (`ack >= receiver.end - max(sender.maxwin, 66000)`).
///
/// An empty segment other than a RST is checked by its ACK alone. A connection first seen
/// mid-stream (its first segment not a SYN) is tracked *liberally*: the ends are followed,
/// nothing is refused (the window scale is unknown).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct TcpWindow {
    /// The initiator's end, the responder's.
    pub ends: [TcpEnd; 2],
    /// Picked up mid-stream: nothing refused.
    pub liberal: bool,
}

impl TcpWindow {
    /// [`TcpWindow::check`] for the session-hit path: an ACK without SYN, FIN or RST from
    /// an end already seen (nearly every segment of a connection) takes
    /// [`TcpWindow::check_ack`], inline; the rest the general check, out of line.
    #[inline(always)]
    pub fn check_fast(&mut self, from_init: bool, g: &TcpSeg) -> Result<(), TcpReject> {
        let si = !from_init as usize;
        if g.flags & (TCP_SYN | TCP_FIN | TCP_RST | TCP_ACK) == TCP_ACK && self.ends[si].seen {
            return self.check_ack(si, g);
        }
        self.check(from_init, g)
    }

    /// [`TcpWindow::check`] of an ACK without SYN, FIN or RST from end `si` (0: the
    /// initiator), which was seen before: the same tests and records, with what those
    /// flags and a first segment would change left out (`check_fast_is_check` compares
    /// the two).
    #[inline(always)]
    fn check_ack(&mut self, si: usize, g: &TcpSeg) -> Result<(), TcpReject> {
        let ri = si ^ 1;
        let win = ((g.win as u32) << self.ends[si].scale).max(1);
        let snd_end = self.ends[si].end;
        // An empty segment is checked by its ACK alone.
        let (seq, end) = if g.len == 0 {
            (snd_end, snd_end)
        } else {
            (g.seq, g.seq.wrapping_add(g.len))
        };
        if !self.liberal && self.ends[ri].seen {
            let (snd, rcv) = (&self.ends[si], &self.ends[ri]);
            let maxack = snd.maxwin.max(66_000);
            let ok = !after(seq, snd.maxend)
                && !before(end, snd.end.wrapping_sub(rcv.maxwin))
                && !after(g.ack, rcv.end)
                && !before(g.ack, rcv.end.wrapping_sub(maxack));
            if !ok {
                return Err(TcpReject::OutOfWindow);
            }
        }
        let snd = &mut self.ends[si];
        snd.maxwin = snd.maxwin.max(win);
        if after(end, snd.end) {
            snd.end = end;
        }
        let m = g.ack.wrapping_add(win);
        let rcv = &mut self.ends[ri];
        if !rcv.seen || after(m, rcv.maxend) {
            rcv.maxend = m;
        }
        Ok(())
    }

    /// Checks segment `g` (from the initiator or not) and, if it is in the window, records
    /// it.
    #[inline(never)]
    pub fn check(&mut self, from_init: bool, g: &TcpSeg) -> Result<(), TcpReject> {
        let (si, ri) = if from_init { (0, 1) } else { (1, 0) };
        let syn = g.flags & TCP_SYN != 0;
        let ackf = g.flags & TCP_ACK != 0;
        let rst = g.flags & TCP_RST != 0;
        let fin = g.flags & TCP_FIN != 0;
        let end = g
            .seq
            .wrapping_add(g.len)
            .wrapping_add(syn as u32)
            .wrapping_add(fin as u32);
        if !self.ends[si].seen {
            let e = &mut self.ends[si];
            e.seen = true;
            e.end = end;
            e.maxwin = (g.win as u32).max(1);
            e.maxend = end;
            if syn {
                e.has_scale = g.wscale.is_some();
                e.scale = g.wscale.unwrap_or(0).min(14);
                if si == 1 && !(self.ends[0].has_scale && self.ends[1].has_scale) {
                    // RFC 7323: scaling only when both SYNs carry the option.
                    self.ends[0].scale = 0;
                    self.ends[1].scale = 0;
                }
            } else if si == 0 {
                self.liberal = true;
            } else {
                e.maxend = end.wrapping_add(e.maxwin);
            }
            if !ackf {
                return Ok(());
            }
        }
        let win = if syn {
            g.win as u32
        } else {
            (g.win as u32) << self.ends[si].scale
        };
        let ack = if ackf { g.ack } else { self.ends[ri].end };
        let (seq, end) = if g.len == 0 && !syn && !fin && !rst {
            (self.ends[si].end, self.ends[si].end)
        } else {
            (g.seq, end)
        };
        if !self.liberal && self.ends[ri].seen {
            let (snd, rcv) = (&self.ends[si], &self.ends[ri]);
            let maxack = snd.maxwin.max(66_000);
            let ok = !after(seq, snd.maxend)
                && !before(end, snd.end.wrapping_sub(rcv.maxwin))
                && !after(ack, rcv.end)
                && !before(ack, rcv.end.wrapping_sub(maxack));
            if !ok {
                return Err(if rst {
                    TcpReject::BadRst
                } else {
                    TcpReject::OutOfWindow
                });
            }
        }
        let snd = &mut self.ends[si];
        snd.maxwin = snd.maxwin.max(win.max(1));
        if after(end, snd.end) {
            snd.end = end;
        }
        if ackf {
            let m = ack.wrapping_add(win.max(1));
            let rcv = &mut self.ends[ri];
            if !rcv.seen || after(m, rcv.maxend) {
                rcv.maxend = m;
            }
        }
        Ok(())
    }
}

/// A session. Laid out for the hit path ([`Table::at4`], [`Session::touch`]): a record is
/// one 64-byte line-aligned block of three lines, the first holding everything a UDP hit
/// reads and writes (`pk`, `last`, `pkts`, `proto`, `out`, `init_lo`, `tcp`), the TCP
/// window running on into the second; the full key, read only off the hit path (a wide
/// key's lookup, `show`, freeing), last.
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub struct Session {
    /// The key's [`SessKey::packed`] form, set by [`Table::create`] (`[0, 1 << 23]`, which
    /// no narrow key has, for a wide one; [`FREE`] in a free slot): what
    /// [`Table::lookup4`] compares. Private, as `key` is: it also says the slot is in use,
    /// and a holder of `&mut Session` that changed either would leak the slot.
    pk: [u64; 2],
    /// Last packet.
    pub last: f64,
    /// Packets from the initiator, from the responder.
    pub pkts: [u64; 2],
    /// `key.proto` (set by [`Session::new`] and [`Table::create`]), beside what the hit
    /// path reads.
    proto: u8,
    /// Created by an output ACL.
    pub out: bool,
    /// The initiator is the key's `lo` end.
    pub init_lo: bool,
    /// [`tcp`] bits.
    pub tcp: u8,
    /// Created (seconds, runtime clock).
    pub created: f64,
    /// TCP window tracking.
    pub win: TcpWindow,
    /// Its key ([`Session::key`]).
    key: SessKey,
}

/// [`Session::pk`] of a free slot: no key's (a narrow key's second word has bit 23 clear,
/// a wide key's `pk` is `[0, 1 << 23]`), so a lookup's comparison of `pk` is also its test
/// that the slot is live (an `Option<Session>`'s tag, wherever the compiler puts it, could
/// be on another line: it was, in the key).
pub const FREE: [u64; 2] = [u64::MAX; 2];

/// Three lines a record; the hit path's fields in the first (the TCP window from byte 56).
const _: () = {
    assert!(std::mem::size_of::<Session>() == 192);
    assert!(std::mem::offset_of!(Session, tcp) < 64);
    assert!(std::mem::offset_of!(Session, win) + std::mem::size_of::<TcpWindow>() <= 128);
};

impl Session {
    /// A new session of `key` (created by an output ACL: `out`; its initiator the key's
    /// `lo` end: `init_lo`) at `now`, no packet counted yet.
    pub fn new(key: SessKey, out: bool, init_lo: bool, now: f64) -> Session {
        Session {
            pk: key.packed().unwrap_or([0, 1 << 23]),
            last: now,
            pkts: [0; 2],
            proto: key.proto,
            out,
            init_lo,
            tcp: 0,
            created: now,
            win: TcpWindow::default(),
            key,
        }
    }

    /// Its key.
    #[inline(always)]
    pub fn key(&self) -> &SessKey {
        &self.key
    }

    /// [`SessKey::packed`] of its key (`[0, 1 << 23]` for a wide one; [`FREE`] only in a
    /// free slot, which [`Table::iter`] and lookups never give).
    #[inline(always)]
    pub fn pk(&self) -> [u64; 2] {
        self.pk
    }

    /// Whether the slot holds a session (its `pk` is not [`FREE`]).
    #[inline(always)]
    fn is_live(&self) -> bool {
        self.pk != FREE
    }

    /// Whether TCP reached established (both SYNs, no FIN/RST).
    pub fn established(&self) -> bool {
        self.proto != 6
            || (self.tcp & (tcp::SYN_INIT | tcp::SYN_RESP) == tcp::SYN_INIT | tcp::SYN_RESP
                && self.tcp & (tcp::FIN | tcp::RST) == 0)
    }

    /// Which idle timeout applies now: the one place [`Session::timeout`] and
    /// [`Session::expired_by`] take it from.
    #[inline(always)]
    fn class(&self) -> TimeoutClass {
        match self.proto {
            6 if self.established() => TimeoutClass::TcpIdle,
            6 => TimeoutClass::TcpTransient,
            _ => TimeoutClass::Udp,
        }
    }

    /// The idle timeout that applies now.
    pub fn timeout(&self, t: &Timeouts) -> u32 {
        match self.class() {
            TimeoutClass::TcpIdle => t.tcp_idle,
            TimeoutClass::TcpTransient => t.tcp_transient,
            TimeoutClass::Udp => t.udp_idle,
        }
    }

    /// Whether it has expired at `now` (its idle time reached the timeout that applies).
    #[cfg(test)]
    pub fn expired(&self, now: f64, t: &Timeouts) -> bool {
        self.expired_by(&Cutoffs::at(now, t))
    }

    /// Whether it has expired at the time of cutoffs `c` (its idle time reached the
    /// timeout that applies).
    #[inline(always)]
    pub fn expired_by(&self, c: &Cutoffs) -> bool {
        let cut = match self.class() {
            TimeoutClass::TcpIdle => c.tcp_idle,
            TimeoutClass::TcpTransient => c.tcp_transient,
            TimeoutClass::Udp => c.udp,
        };
        self.last <= cut
    }

    /// A state name for `show`.
    pub fn state(&self) -> &'static str {
        if self.proto != 6 {
            "active"
        } else if self.tcp & tcp::RST != 0 {
            "reset"
        } else if self.tcp & tcp::FIN != 0 {
            "closing"
        } else if self.established() {
            "established"
        } else {
            "opening"
        }
    }

    /// Checks a TCP segment against the window (from the initiator or not) and records it;
    /// a SYN of the initiator on a connection that was reset or closing starts the tracking
    /// over (a new connection on the old tuple).
    pub fn tcp_check(&mut self, from_init: bool, g: &TcpSeg) -> Result<(), TcpReject> {
        if from_init
            && g.flags & (TCP_SYN | TCP_ACK) == TCP_SYN
            && self.tcp & (tcp::RST | tcp::FIN) != 0
        {
            self.tcp = 0;
            self.win = TcpWindow::default();
        }
        self.win.check(from_init, g)
    }

    /// [`Session::tcp_check`] with [`TcpWindow::check_fast`]: the session-hit path's.
    #[inline(always)]
    pub fn tcp_check_fast(&mut self, from_init: bool, g: &TcpSeg) -> Result<(), TcpReject> {
        if g.flags & TCP_SYN != 0 {
            return self.tcp_check(from_init, g);
        }
        self.win.check_fast(from_init, g)
    }

    /// Records a packet (from the initiator or not) with TCP `flags` at `now`.
    #[inline(always)]
    pub fn touch(&mut self, from_init: bool, flags: u8, now: f64) {
        self.last = now;
        self.pkts[!from_init as usize] += 1;
        // A TCP segment without SYN, FIN or RST (the ACKs of a connection's life) changes
        // no state bit: one test.
        if self.proto == 6 && flags & (TCP_SYN | TCP_FIN | TCP_RST) != 0 {
            if flags & TCP_SYN != 0 {
                self.tcp |= if from_init {
                    tcp::SYN_INIT
                } else {
                    tcp::SYN_RESP
                };
            }
            if flags & TCP_FIN != 0 {
                self.tcp |= tcp::FIN;
            }
            if flags & TCP_RST != 0 {
                self.tcp |= tcp::RST;
            }
        }
    }
}

/// Counts of one thread's table.
#[derive(Copy, Clone, Debug, Default)]
pub struct Stats {
    /// Sessions created.
    pub created: u64,
    /// Sessions freed on expiry.
    pub expired: u64,
    /// Sessions freed otherwise (clear, interface lists changed).
    pub deleted: u64,
    /// Attempts to allocate the table's memory that failed (at most one a
    /// [`ALLOC_RETRY_SECS`]).
    pub alloc_failed: u64,
}

/// After a failed allocation of a table's memory, a new session waits this long before the
/// next attempt (its packets are refused, [`CreateError::NoMemory`], without a system call).
pub const ALLOC_RETRY_SECS: f64 = 1.0;

/// Why a session was not created.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CreateError {
    /// The table is full.
    Full,
    /// The key has a live session already (a caller that did not look it up first; two
    /// keys of one digest both have theirs).
    Collision,
    /// The table's memory (allocated at the first session) could not be had, now or at the
    /// last attempt less than [`ALLOC_RETRY_SECS`] ago.
    NoMemory,
}

/// One thread's sessions.
pub struct Table {
    /// Digest of the key -> slot: candidates, each confirmed by the slot's key. Sized for
    /// [`FIRST_SESSIONS`] (at most `max`) at the first session (until then one empty
    /// bucket), rebuilt for `max` at the session after those ([`Table::grow`]).
    keys: FlowTable,
    hasher: FoldedKeyHash,
    /// Sessions by slot: `max` records, zeroed (in hugepages from 2 MiB on), allocated with
    /// `keys` at the first session; those below `used` were written (a free one's `pk` is
    /// [`FREE`]), those above are zeros that no table value points at.
    slots: ZeroedArray<Session>,
    /// Slots handed out so far (the next new one).
    used: usize,
    free: Vec<u32>,
    /// The limit.
    max: usize,
    /// From this many sessions on the IPv4 nodes look a frame's sessions up ahead of its
    /// packets (prefetching buckets and records: [`PIPE_MIN_SESSIONS`]).
    pub pipe_min: usize,
    /// Counts.
    pub stats: Stats,
    /// Next slot the cleaner looks at.
    scan: usize,
    /// Sessions created and freed so far (wrapping): a miss [`Table::find`] gave for a
    /// digest is still a miss while this has not moved.
    changes: u32,
    /// No allocation is attempted before this time (a session's `created`): set
    /// [`ALLOC_RETRY_SECS`] after a failed one.
    alloc_retry: f64,
    /// Tests narrow the digests to force two keys onto one.
    #[cfg(test)]
    pub(crate) digest_mask: u64,
    /// Tests make [`Table::grow`]'s allocation fail (as out of memory) while this is set.
    #[cfg(test)]
    pub(crate) fail_grow: bool,
}

// SAFETY: integers, floats and bools (`Session`, `TcpWindow`, `TcpEnd`, `SessKey`), all of
// which take the all-zero pattern, and no drop glue: a zeroed record is a valid `Session`
// value. It is not a free slot (its `pk` is [0, 0], not `FREE`, so `is_live` holds), and is
// never reached as one: records at or above `used` are only zeros, no table value points
// there (values are below `used`), and `iter`, `expire` and `remove_if` stop at `used`.
unsafe impl ZeroValid for Session {}

impl Default for Table {
    fn default() -> Self {
        Table::new(DEFAULT_MAX_SESSIONS)
    }
}

impl Table {
    /// An empty table holding at most `max` sessions (its memory is had at the first).
    pub fn new(max: usize) -> Table {
        Table {
            keys: FlowTable::with_capacity(0),
            hasher: FoldedKeyHash::new(),
            slots: ZeroedArray::new(0),
            used: 0,
            free: Vec::new(),
            max,
            // Unit tests take the look-ahead whatever their table's size; a test sets
            // `usize::MAX` for the direct path.
            #[cfg(not(test))]
            pipe_min: PIPE_MIN_SESSIONS,
            #[cfg(test)]
            pipe_min: 0,
            stats: Stats::default(),
            scan: 0,
            changes: 0,
            alloc_retry: f64::NEG_INFINITY,
            #[cfg(test)]
            digest_mask: u64::MAX,
            #[cfg(test)]
            fail_grow: false,
        }
    }

    /// Live sessions.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The limit.
    pub fn max(&self) -> usize {
        self.max
    }

    /// The table key of `k`: its keyed digest. An IPv4 key (interface below 2^23) packs into
    /// two words, hashed once; otherwise the addresses are hashed first, word pair by word
    /// pair, each digest folded into the next message.
    #[inline(always)]
    fn digest(&self, k: &SessKey) -> u64 {
        if let Some(pk) = k.packed() {
            return self.digest4(pk);
        }
        let b = (k.lo.1 as u64) << 48
            | (k.hi.1 as u64) << 32
            | (k.proto as u64) << 24
            | 1 << 23
            | (k.sw_if as u64 & 0x7f_ffff);
        let x = self.hasher.hash(k.lo.0 as u64, (k.lo.0 >> 64) as u64);
        let y = self.hasher.hash(x ^ k.hi.0 as u64, (k.hi.0 >> 64) as u64);
        let a = y ^ ((k.sw_if as u64) << 32 | k.v6 as u64);
        let d = self.hasher.hash(a, b);
        #[cfg(test)]
        let d = d & self.digest_mask;
        d
    }

    /// The digest of a narrow key from its packed words ([`Packed4::pk`]): what
    /// [`Table::find`] and [`Table::prefetch`] take.
    #[inline(always)]
    pub fn digest4(&self, pk: [u64; 2]) -> u64 {
        let d = self.hasher.hash(pk[0], pk[1]);
        #[cfg(test)]
        let d = d & self.digest_mask;
        d
    }

    /// The first slot the table holds for digest `d`: a candidate, whose key [`Table::at4`]
    /// compares (and, when it is another key's, looks the key up exactly). `None` is a
    /// miss, which stays one while [`Table::changes`] does not move.
    #[inline(always)]
    pub fn find(&self, d: u64) -> Option<u32> {
        self.keys.get(d)
    }

    /// Hints the CPU to fetch digest `d`'s bucket (one line) ahead of its [`Table::find`].
    #[inline(always)]
    pub fn prefetch(&self, d: u64) {
        self.keys.prefetch(d);
    }

    /// Hints the CPU to fetch the session record in slot `i` (a [`Table::find`] result)
    /// ahead of its [`Table::at4`]: its first line, all a UDP hit touches ([`Session`]'s
    /// layout), and for a TCP packet (`tcp`) the second, where the window ends.
    #[inline(always)]
    pub fn prefetch_slot(&self, i: u32, tcp: bool) {
        let p = self.slots.as_ptr().wrapping_add(i as usize);
        sluice_infra::prefetch(p);
        if tcp {
            sluice_infra::prefetch(p.cast::<u8>().wrapping_add(64));
        }
    }

    /// Sessions created and freed so far (wrapping).
    #[inline(always)]
    pub fn changes(&self) -> u32 {
        self.changes
    }

    /// The table's bucket count (tests watch the first session size it).
    #[cfg(test)]
    pub fn buckets(&self) -> usize {
        self.keys.buckets()
    }

    /// [`Table::lookup`] of a narrow key by its packed words ([`Packed4`]): the digest and
    /// the comparison take two words, no [`SessKey`] is built.
    #[inline(always)]
    pub fn lookup4(&mut self, pk: [u64; 2], c: &Cutoffs) -> Option<&mut Session> {
        let i = self.find(self.digest4(pk));
        self.at4(i, pk, c)
    }

    /// [`Table::lookup4`] from slot `i`, what [`Table::find`] gave for the key's digest at
    /// some time: the live session of `pk` (an expired one is freed and not returned). A
    /// slot whose key is `pk` is `pk`'s session whatever the table did since (keys are
    /// unique, a freed slot's key is [`FREE`]); a slot of another key (a second candidate
    /// of the digest, or a look-ahead's slot freed and reused since) has the key looked up
    /// exactly; `None` may be a stale miss, which the caller looks up again if
    /// [`Table::changes`] moved.
    #[inline(always)]
    pub(crate) fn at4(
        &mut self,
        i: Option<u32>,
        pk: [u64; 2],
        c: &Cutoffs,
    ) -> Option<&mut Session> {
        // A packet's key (a `Packed4`'s, interface below 2^23) is never `FREE`.
        debug_assert!(pk != FREE);
        let i = i?;
        // A free slot's `FREE` is no narrow key's `pk`: no liveness test of its own.
        let s = self.slots.get(i as usize)?;
        if s.pk != pk {
            // Not joined with the hit below: one index there, whose bounds test the
            // compiler then drops (joined, the slot was tested twice).
            let j = self.find4(pk)?;
            return self.live_at(j, c);
        }
        self.live_at(i, c)
    }

    /// The slot of narrow key `pk`, every candidate of its digest tried: [`Table::at4`]'s
    /// path when the first candidate was another key's (rare: two keys' tags in one bucket).
    #[cold]
    #[inline(never)]
    fn find4(&self, pk: [u64; 2]) -> Option<u32> {
        let slots = &self.slots;
        self.keys
            .find(self.digest4(pk), |v| slots[v as usize].pk == pk)
    }

    /// The session in slot `i` (live), unless it expired by cutoffs `c` (then freed).
    #[inline(always)]
    fn live_at(&mut self, i: u32, c: &Cutoffs) -> Option<&mut Session> {
        if self.slots[i as usize].expired_by(c) {
            self.free_slot(i);
            self.stats.expired += 1;
            return None;
        }
        self.slots.get_mut(i as usize)
    }

    /// The slot of key `k` (digest `d`): the first candidate, or every one when the first is
    /// another key's.
    #[inline(always)]
    fn slot_of(&self, d: u64, k: &SessKey) -> Option<u32> {
        let i = self.keys.get(d)?;
        let is = |v: u32| {
            let s = &self.slots[v as usize];
            s.is_live() && s.key == *k
        };
        if is(i) {
            Some(i)
        } else {
            self.keys.find(d, is)
        }
    }

    /// The live session of `k` (an expired one is freed and not returned).
    #[inline(always)]
    pub fn lookup(&mut self, k: &SessKey, c: &Cutoffs) -> Option<&mut Session> {
        let i = self.slot_of(self.digest(k), k)?;
        self.live_at(i, c)
    }

    /// Allocates the bucket array and the records for `max` sessions (untouched pages cost
    /// no memory) unless an attempt failed less than [`ALLOC_RETRY_SECS`] before `now`;
    /// whether it could. A failure is counted ([`Stats::alloc_failed`]), the first logged.
    #[cold]
    #[inline(never)]
    fn allocate(&mut self, now: f64) -> bool {
        if now < self.alloc_retry {
            return false;
        }
        let r = FlowTable::try_with_capacity(self.max.min(FIRST_SESSIONS))
            .and_then(|keys| Ok((keys, ZeroedArray::try_new(self.max)?)));
        match r {
            Ok((keys, slots)) => {
                self.keys = keys;
                self.slots = slots;
                true
            }
            Err(e) => self.alloc_failed(now, e),
        }
    }

    /// Rebuilds the bucket array, full at [`FIRST_SESSIONS`], for `max` sessions: every
    /// live session's digest inserted again (slots do not move, so a look-ahead's slot
    /// stays its session's; a look-ahead's miss is looked up again since the caller's
    /// create moves [`Table::changes`]). Whether it could; a failed allocation is counted
    /// and retried as [`Table::allocate`]'s.
    #[cold]
    #[inline(never)]
    fn grow(&mut self, now: f64) -> bool {
        if now < self.alloc_retry {
            return false;
        }
        #[cfg(test)]
        if self.fail_grow {
            return self.alloc_failed(now, std::io::ErrorKind::OutOfMemory.into());
        }
        match FlowTable::try_with_capacity(self.max) {
            Ok(mut keys) => {
                for i in 0..self.used {
                    let s = &self.slots[i];
                    if s.is_live() {
                        // Fewer sessions than its capacity: it has room. A lost insert
                        // would leave a live session that no lookup finds.
                        let r = keys.insert(self.digest(&s.key), i as u32);
                        debug_assert!(r.is_ok(), "slot {i} not re-inserted");
                    }
                }
                self.keys = keys;
                true
            }
            Err(e) => self.alloc_failed(now, e),
        }
    }

    /// An allocation of the table's memory failed at `now`: counted, the first logged, the
    /// next attempt not before [`ALLOC_RETRY_SECS`]. False.
    #[cold]
    fn alloc_failed(&mut self, now: f64, e: std::io::Error) -> bool {
        if self.stats.alloc_failed == 0 {
            log::warn!(
                "acl-plugin: cannot allocate a session table for {} sessions ({e}); \
                 permit+reflect packets dropped as session_alloc_failed, retried \
                 every {ALLOC_RETRY_SECS} s",
                self.max
            );
        }
        self.stats.alloc_failed += 1;
        self.alloc_retry = now + ALLOC_RETRY_SECS;
        false
    }

    /// Adds a session (its key has none: the caller looked it up). Two keys of one digest
    /// both have theirs; the same key twice is refused ([`CreateError::Collision`]). The
    /// first session allocates the table's memory, the one past [`FIRST_SESSIONS`] rebuilds
    /// its buckets for `max`; when either fails, sessions are refused
    /// ([`CreateError::NoMemory`]) and the allocation is tried again at most once every
    /// [`ALLOC_RETRY_SECS`] (by `s.created`).
    pub fn create(&mut self, mut s: Session) -> Result<&mut Session, CreateError> {
        // Packed once: its `pk` and, for a narrow key, its digest.
        let pk = s.key.packed();
        s.pk = pk.unwrap_or([0, 1 << 23]);
        s.proto = s.key.proto;
        if self.len() >= self.max {
            return Err(CreateError::Full);
        }
        // The first session sizes the table (`len` < `max`: not empty), the one after
        // [`FIRST_SESSIONS`] resizes its buckets for `max`.
        if self.slots.is_empty() && !self.allocate(s.created) {
            return Err(CreateError::NoMemory);
        }
        if self.len() >= self.keys.capacity() && !self.grow(s.created) {
            return Err(CreateError::NoMemory);
        }
        let d = match pk {
            Some(pk) => self.digest4(pk),
            None => self.digest(&s.key),
        };
        if self.slot_of(d, &s.key).is_some() {
            return Err(CreateError::Collision);
        }
        let i = match self.free.last() {
            Some(&i) => i,
            None => self.used as u32,
        };
        // `len` < `max`, the table's capacity: it has room.
        if self.keys.insert(d, i).is_err() {
            return Err(CreateError::Full);
        }
        match self.free.pop() {
            Some(_) => {}
            None => self.used += 1,
        }
        self.changes = self.changes.wrapping_add(1);
        self.slots[i as usize] = s;
        self.stats.created += 1;
        Ok(&mut self.slots[i as usize])
    }

    /// Frees slot `i`. It moves [`Table::changes`] although a free leaves every other key's
    /// answer as it was: deliberately conservative (a look-ahead miss is looked up again
    /// rather than reasoned about; a look-ahead hit needs no stamp, [`Table::at4`] compares
    /// the slot's key).
    fn free_slot(&mut self, i: u32) {
        let s = &self.slots[i as usize];
        if s.is_live() {
            let d = self.digest(&s.key);
            self.slots[i as usize].pk = FREE;
            self.keys.remove(d, i);
            self.free.push(i);
            self.changes = self.changes.wrapping_add(1);
        }
    }

    /// Frees expired sessions, looking at `budget` slots at most from where the previous
    /// call stopped. Returns how many it freed.
    pub fn expire(&mut self, now: f64, t: &Timeouts, budget: usize) -> usize {
        let n = self.used;
        if n == 0 {
            return 0;
        }
        let mut freed = 0;
        let c = Cutoffs::at(now, t);
        for _ in 0..budget.min(n) {
            if self.scan >= n {
                self.scan = 0;
            }
            let i = self.scan;
            self.scan += 1;
            let s = &self.slots[i];
            if s.is_live() && s.expired_by(&c) {
                self.free_slot(i as u32);
                freed += 1;
            }
        }
        self.stats.expired += freed as u64;
        freed
    }

    /// Frees the sessions `f` selects (every one: `clear acl-plugin sessions`).
    pub fn remove_if(&mut self, mut f: impl FnMut(&Session) -> bool) -> usize {
        let mut n = 0;
        for i in 0..self.used {
            let s = &self.slots[i];
            if s.is_live() && f(s) {
                self.free_slot(i as u32);
                n += 1;
            }
        }
        self.stats.deleted += n as u64;
        n
    }

    /// The live sessions.
    pub fn iter(&self) -> impl Iterator<Item = &Session> {
        self.slots[..self.used].iter().filter(|s| s.is_live())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sess(now: f64, proto: u8) -> Session {
        let (key, lo) = SessKey::of(1, false, proto, (10, 1000), (20, 80));
        Session::new(key, true, lo, now)
    }

    fn seg(seq: u32, ack: u32, flags: u8, len: u32, win: u16, wscale: Option<u8>) -> TcpSeg {
        TcpSeg {
            seq,
            ack,
            win,
            flags,
            len,
            wscale,
        }
    }

    const SYN: u8 = TCP_SYN;
    const SA: u8 = TCP_SYN | TCP_ACK;
    const A: u8 = TCP_ACK;
    const RA: u8 = TCP_RST | TCP_ACK;

    /// A handshake (initiator ISN 1000, responder 5000, windows 1000 and 2000 with scale
    /// `sc` on both SYNs when given).
    fn handshake(sc: Option<u8>) -> TcpWindow {
        handshake_isn(sc, 1000, 5000)
    }

    /// [`handshake`] with the initiator's ISN `i` and the responder's `r`.
    fn handshake_isn(sc: Option<u8>, i: u32, r: u32) -> TcpWindow {
        let (i1, r1) = (i.wrapping_add(1), r.wrapping_add(1));
        let mut w = TcpWindow::default();
        assert_eq!(w.check(true, &seg(i, 0, SYN, 0, 1000, sc)), Ok(()));
        assert_eq!(w.check(false, &seg(r, i1, SA, 0, 2000, sc)), Ok(()));
        assert_eq!(w.check(true, &seg(i1, r1, A, 0, 1000, None)), Ok(()));
        w
    }

    #[test]
    fn tcp_window_admits_in_window_and_refuses_the_rest() {
        let mut w = handshake(None);
        // Data within the responder's window (2000 bytes from 1001).
        assert_eq!(w.check(true, &seg(1001, 5001, A, 500, 1000, None)), Ok(()));
        assert_eq!(w.check(false, &seg(5001, 1501, A, 800, 2000, None)), Ok(()));
        // A retransmission is in the window.
        assert_eq!(w.check(true, &seg(1001, 5801, A, 500, 1000, None)), Ok(()));
        // Beyond what the responder allowed (ack 1501 + window 2000).
        let far = seg(1501 + 2000 + 1, 5801, A, 10, 1000, None);
        assert_eq!(w.check(true, &far), Err(TcpReject::OutOfWindow));
        // Far behind.
        let old = seg(1501u32.wrapping_sub(100_000), 5801, A, 10, 1000, None);
        assert_eq!(w.check(true, &old), Err(TcpReject::OutOfWindow));
        // Acknowledging data the responder never sent.
        assert_eq!(
            w.check(true, &seg(1501, 5801 + 1, A, 0, 1000, None)),
            Err(TcpReject::OutOfWindow)
        );
        // A RST with a sequence number outside the window, then one inside.
        assert_eq!(
            w.check(false, &seg(5801 + 1_000_000, 1501, RA, 0, 0, None)),
            Err(TcpReject::BadRst)
        );
        assert_eq!(w.check(false, &seg(5801, 1501, RA, 0, 0, None)), Ok(()));
    }

    #[test]
    fn tcp_window_scaling_needs_both_syns() {
        // Scale 7 both ways: a window field of 1000 allows 128,000 bytes.
        let mut w = handshake(Some(7));
        assert_eq!(w.check(false, &seg(5001, 1001, A, 0, 1000, None)), Ok(()));
        assert_eq!(
            w.check(true, &seg(1001 + 100_000, 5001, A, 100, 1000, None)),
            Ok(())
        );
        // Only the initiator's SYN has the option: no scaling, the same segment is refused.
        let mut w = TcpWindow::default();
        w.check(true, &seg(1000, 0, SYN, 0, 1000, Some(7))).unwrap();
        w.check(false, &seg(5000, 1001, SA, 0, 2000, None)).unwrap();
        w.check(true, &seg(1001, 5001, A, 0, 1000, None)).unwrap();
        w.check(false, &seg(5001, 1001, A, 0, 1000, None)).unwrap();
        assert_eq!(
            w.check(true, &seg(1001 + 100_000, 5001, A, 100, 1000, None)),
            Err(TcpReject::OutOfWindow)
        );
    }

    /// The inline ACK path decides and records as the general check does, over random
    /// segments of both ends (ACKs with and without data, SYNs, FINs, RSTs, scaled and not,
    /// in and out of the window), from fresh, handshaken and mid-stream windows.
    #[test]
    fn check_fast_is_check() {
        let mut r = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            r
        };
        // PSH|ACK: data segments (PSH changes nothing the checks look at).
        const PA: u8 = 0x08 | A;
        let mut fast = 0;
        for start in 0..300 {
            // ISNs at random, one in four within 3000 of u32::MAX (sequence wrap).
            let mut isn = || {
                let y = next();
                if y % 4 == 0 {
                    u32::MAX - (y >> 32) as u32 % 3000
                } else {
                    (y >> 16) as u32
                }
            };
            let (i, r) = (isn(), isn());
            let mut w = match start % 3 {
                0 => TcpWindow::default(),
                1 => handshake_isn(Some((start % 15) as u8), i, r),
                _ => handshake_isn(None, i, r),
            };
            let mut v = w;
            let (mut seq, mut ack) = (i.wrapping_add(1), r.wrapping_add(1));
            for _ in 0..200 {
                let x = next();
                let flags = match x % 16 {
                    0 => SYN,
                    1 => SA,
                    2 => RA,
                    3 => TCP_FIN | A,
                    4 => 0,
                    5..=7 => PA,
                    _ => A,
                };
                // Mostly near the running numbers, sometimes far.
                let far = |y: u64| if y % 8 == 0 { (y >> 8) as u32 } else { 0 };
                let g = seg(
                    seq.wrapping_add(far(x >> 4)),
                    ack.wrapping_add(far(x >> 12)),
                    flags,
                    [0, 0, 1, 100, 1460, 70_000][(x >> 20) as usize % 6],
                    // Zero windows now and then (the checks count them as 1).
                    [0, 1, (x >> 24) as u16, (x >> 24) as u16][(x >> 56) as usize % 4],
                    None,
                );
                let from_init = x >> 40 & 1 == 0;
                if (g.flags == A || g.flags == PA) && w.ends[!from_init as usize].seen {
                    fast += 1;
                }
                let (a, b) = (w.check_fast(from_init, &g), v.check(from_init, &g));
                assert_eq!((a, w), (b, v), "{g:?} from_init {from_init}");
                if a.is_ok() && x >> 41 & 1 == 0 {
                    seq = seq.wrapping_add(g.len);
                    ack = ack.wrapping_add((x >> 50) as u32 % 3000);
                }
            }
        }
        assert!(fast > 20_000, "the ACK path ran {fast} times");
    }

    #[test]
    fn tcp_window_mid_stream_pickup_is_liberal() {
        let mut w = TcpWindow::default();
        assert_eq!(w.check(true, &seg(77, 99, A, 100, 10, None)), Ok(()));
        assert!(w.liberal);
        assert_eq!(w.check(false, &seg(1 << 31, 3, A, 100, 10, None)), Ok(()));
    }

    #[test]
    fn tcp_new_syn_after_reset_restarts_tracking() {
        let mut s = sess(0.0, 6);
        s.tcp_check(true, &seg(1000, 0, SYN, 0, 1000, None))
            .unwrap();
        s.touch(true, SYN, 0.0);
        s.tcp_check(false, &seg(5000, 1001, SA, 0, 2000, None))
            .unwrap();
        s.tcp_check(false, &seg(5001, 1001, RA, 0, 0, None))
            .unwrap();
        s.touch(false, RA, 0.0);
        // A SYN with a new ISN: a new connection on the tuple.
        assert_eq!(
            s.tcp_check(true, &seg(9_000_000, 0, SYN, 0, 1000, None)),
            Ok(())
        );
        assert_eq!(s.tcp, 0);
    }

    #[test]
    fn both_directions_share_one_key_and_owner() {
        let (a, a_lo) = SessKey::of(3, false, 17, (0x0a000002, 4000), (0xc0000202, 53));
        let (b, b_lo) = SessKey::of(3, false, 17, (0xc0000202, 53), (0x0a000002, 4000));
        assert_eq!(a, b);
        assert_ne!(a_lo, b_lo);
        assert_eq!(a.owner_hash(), b.owner_hash());
        let (c, _) = SessKey::of(4, false, 17, (0x0a000002, 4000), (0xc0000202, 53));
        assert_ne!(a, c, "sessions belong to one interface");
    }

    #[test]
    fn packed4_is_the_packed_session_key() {
        let t = Timeouts::default();
        let mut tb = Table::new(100);
        let mut r = 0x1234_5678_9abc_def0u64;
        let mut next = || {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            r
        };
        for i in 0..2000 {
            // Equal addresses and equal ports now and then (the order falls to the port).
            let src = next() as u32 & 0x0300_0003;
            let dst = if i % 5 == 0 {
                src
            } else {
                next() as u32 & 0x0300_0003
            };
            let (sp, dp) = (next() as u16 & 3, next() as u16 & 3);
            let (sw_if, proto) = ((next() % 5) as u32, [6, 17][i % 2]);
            let (key, src_lo) =
                SessKey::of(sw_if, false, proto, (src as u128, sp), (dst as u128, dp));
            let p = Packed4::of(sw_if, proto, src, sp, dst, dp);
            assert_eq!((Some(p.pk), p.src_lo), (key.packed(), src_lo), "{key:?}");
            assert_eq!(p.owner_hash(), key.owner_hash());
            // The reverse tuple: the same packed key, the other end.
            let q = Packed4::of(sw_if, proto, dst, dp, src, sp);
            assert_eq!(q.pk, p.pk);
            assert_eq!(q.src_lo, !p.src_lo || (src, sp) == (dst, dp));
        }
        // A session made from a `SessKey` is found by its packed words, and not by a wide
        // key's or another tuple's.
        let (key, _) = SessKey::of(7, false, 17, (0x0a00_0001, 4000), (0x1400_0001, 53));
        let mut s = sess(0.0, 17);
        s.key = key;
        tb.create(s).unwrap();
        let p = Packed4::of(7, 17, 0x1400_0001, 53, 0x0a00_0001, 4000);
        assert_eq!(
            tb.lookup4(p.pk, &Cutoffs::at(1.0, &t)).map(|s| s.key),
            Some(key)
        );
        let p = Packed4::of(7, 17, 0x1400_0001, 54, 0x0a00_0001, 4000);
        assert!(tb.lookup4(p.pk, &Cutoffs::at(1.0, &t)).is_none());
        let (wide, _) = SessKey::of(1 << 24, false, 17, (1, 1), (2, 2));
        assert_eq!(wide.packed(), None);
        // Expired: freed by the packed lookup too.
        let p = Packed4::of(7, 17, 0x0a00_0001, 4000, 0x1400_0001, 53);
        assert!(tb.lookup4(p.pk, &Cutoffs::at(1e6, &t)).is_none());
        assert!(tb.is_empty());
    }

    #[test]
    fn tcp_state_decides_the_timeout() {
        let t = Timeouts {
            udp_idle: 10,
            tcp_idle: 100,
            tcp_transient: 5,
        };
        let mut s = sess(0.0, 6);
        s.touch(true, TCP_SYN, 0.0);
        assert_eq!((s.state(), s.timeout(&t)), ("opening", 5));
        s.touch(false, TCP_SYN | 0x10, 0.1);
        assert_eq!((s.state(), s.timeout(&t)), ("established", 100));
        assert!(!s.expired(50.0, &t));
        s.touch(true, TCP_FIN | 0x10, 1.0);
        assert_eq!((s.state(), s.timeout(&t)), ("closing", 5));
        assert!(s.expired(6.0, &t));
        s.touch(false, TCP_RST, 1.0);
        assert_eq!(s.state(), "reset");
        assert_eq!(s.pkts, [2, 2]);
        assert_eq!(sess(0.0, 17).timeout(&t), 10);
    }

    /// A failed rebuild (the test's fault switch: the allocation's error) refuses the session
    /// as NoMemory, keeps the first buckets and every session, and is retried after the
    /// interval.
    #[test]
    fn failed_rebuild_keeps_the_table() {
        let t = Timeouts::default();
        let mut tb = Table::new(1_000_000);
        let mk = |i: u32, now: f64| {
            let (key, lo) = SessKey::of(
                1,
                false,
                17,
                (0x0a00_0000 + i as u128, 1000),
                (0x0b00_0000, 53),
            );
            Session::new(key, true, lo, now)
        };
        let first = FIRST_SESSIONS as u32;
        for i in 0..first {
            tb.create(mk(i, 0.0)).unwrap();
        }
        let b0 = tb.buckets();
        tb.fail_grow = true;
        assert_eq!(tb.create(mk(first, 0.0)).err(), Some(CreateError::NoMemory));
        tb.fail_grow = false;
        assert_eq!(
            (tb.stats.alloc_failed, tb.buckets(), tb.len()),
            (1, b0, FIRST_SESSIONS)
        );
        for i in 0..first {
            assert!(
                tb.lookup(&mk(i, 0.0).key, &Cutoffs::at(0.5, &t)).is_some(),
                "{i}"
            );
        }
        // Within the interval: not tried again.
        assert_eq!(tb.create(mk(first, 0.5)).err(), Some(CreateError::NoMemory));
        assert_eq!(tb.stats.alloc_failed, 1);
        tb.create(mk(first, ALLOC_RETRY_SECS)).unwrap();
        assert!(tb.buckets() > b0);
        for i in 0..=first {
            assert!(
                tb.lookup(&mk(i, 0.0).key, &Cutoffs::at(1.5, &t)).is_some(),
                "{i}"
            );
        }
    }

    /// A table whose memory cannot be had refuses sessions as `NoMemory` (not `Full`) and
    /// tries the allocation again only once a retry interval has passed.
    #[test]
    fn failed_allocation_is_remembered() {
        // More buckets than an address space holds: the allocation fails.
        let mut tb = Table::new(usize::MAX / 2);
        assert_eq!(tb.create(sess(0.0, 17)).err(), Some(CreateError::NoMemory));
        assert_eq!(tb.stats.alloc_failed, 1);
        // Within the interval: refused without another attempt.
        assert_eq!(tb.create(sess(0.5, 17)).err(), Some(CreateError::NoMemory));
        assert_eq!(tb.stats.alloc_failed, 1);
        // After it: tried (and failed) again.
        assert_eq!(
            tb.create(sess(ALLOC_RETRY_SECS, 17)).err(),
            Some(CreateError::NoMemory)
        );
        assert_eq!(
            (tb.stats.alloc_failed, tb.len(), tb.stats.created),
            (2, 0, 0)
        );
    }

    #[test]
    fn expiry_limit_and_reuse() {
        let t = Timeouts {
            udp_idle: 10,
            ..Timeouts::default()
        };
        let mut tb = Table::new(2);
        let k = tb.create(sess(0.0, 17)).unwrap().key;
        let mut s2 = sess(5.0, 17);
        s2.key.lo.1 = 1001;
        tb.create(s2.clone()).unwrap();
        let mut s3 = s2.clone();
        s3.key.lo.1 = 1002;
        assert_eq!(tb.create(s3.clone()).err(), Some(CreateError::Full));
        assert!(tb.lookup(&k, &Cutoffs::at(9.0, &t)).is_some());
        // Expired at lookup: freed.
        assert!(tb.lookup(&k, &Cutoffs::at(19.5, &t)).is_none());
        assert_eq!((tb.len(), tb.stats.expired), (1, 1));
        tb.create(s3).unwrap();
        assert_eq!(tb.expire(100.0, &t, 10), 2);
        assert!(tb.is_empty());
        assert_eq!(tb.used, 2, "slots are reused");
    }

    #[test]
    fn many_sessions_of_both_families_found_by_either_direction() {
        let t = Timeouts::default();
        let mut tb = Table::new(100_000);
        // Keys differing in one field each: address, port, protocol, family, interface
        // (one beyond 2^23, hashed the wide way).
        let mut keys = Vec::new();
        for i in 0..3000u128 {
            for (sw_if, v6) in [(1, false), (1, true), (1 << 24, false)] {
                let base = if v6 { 0x2001_0db8 << 96 } else { 0x0a00_0000 };
                let proto = if i % 2 == 0 { 6 } else { 17 };
                let src = (base + i, 1000 + (i % 7) as u16);
                let dst = (base + 0x100_0000, 80);
                let (key, lo) = SessKey::of(sw_if, v6, proto, src, dst);
                let mut s = sess(0.0, proto);
                s.key = key;
                s.init_lo = lo;
                tb.create(s).unwrap();
                keys.push((key, src, dst, proto, sw_if, v6));
                // The first buckets hold `FIRST_SESSIONS`; the next session rebuilt them
                // for the limit, and every key below is found in the new ones.
                if tb.len() <= FIRST_SESSIONS {
                    assert_eq!(tb.buckets(), FIRST_SESSIONS / 4);
                }
            }
        }
        assert!(keys.len() > FIRST_SESSIONS);
        assert_eq!(tb.buckets(), FlowTable::with_capacity(100_000).buckets());
        assert_eq!(tb.len(), keys.len());
        for &(key, src, dst, proto, sw_if, v6) in &keys {
            // The reply's tuple finds the same session.
            let (back, _) = SessKey::of(sw_if, v6, proto, dst, src);
            assert_eq!(
                tb.lookup(&back, &Cutoffs::at(1.0, &t)).map(|s| s.key),
                Some(key)
            );
            // Another interface, another port or the other family: no session.
            let (other, _) = SessKey::of(sw_if + 1, v6, proto, src, dst);
            assert!(tb.lookup(&other, &Cutoffs::at(1.0, &t)).is_none());
            let (other, _) = SessKey::of(sw_if, v6, proto, (src.0, src.1 + 100), dst);
            assert!(tb.lookup(&other, &Cutoffs::at(1.0, &t)).is_none());
        }
        // A key already there is refused (in use), the table unchanged.
        let mut s = sess(0.0, keys[5].3);
        s.key = keys[5].0;
        assert_eq!(tb.create(s).err(), Some(CreateError::Collision));
        assert_eq!(tb.len(), keys.len());
        // All expire; the table is empty and every key is gone.
        while tb.expire(1e9, &t, 1000) > 0 {}
        assert!(tb.is_empty());
        assert!(keys
            .iter()
            .all(|k| tb.lookup(&k.0, &Cutoffs::at(1e9, &t)).is_none()));
        assert_eq!(tb.stats.expired, tb.stats.created);
    }

    /// A freed slot is marked by its `pk` alone ([`FREE`]): it is out of `iter`, no lookup
    /// (packed from a kept slot number, or by the key) finds its old key, the sessions
    /// `remove_if` frees are not freed again, and a reused slot is found.
    #[test]
    fn a_free_slot_is_marked_by_pk() {
        let t = Timeouts::default();
        let mut tb = Table::new(10);
        let tuple = |port: u16| SessKey::of(7, false, 17, (0x0a00_0001, port), (0x1400_0001, 53));
        let mk = |port: u16| {
            let (key, lo) = tuple(port);
            let mut s = sess(0.0, 17);
            s.key = key;
            s.init_lo = lo;
            s
        };
        tb.create(mk(4000)).unwrap();
        tb.create(mk(4001)).unwrap();
        let old = tuple(4000).0;
        let old_pk = old.packed().unwrap();
        let old_i = tb.find(tb.digest4(old_pk));
        assert!(old_i.is_some());
        assert_eq!(tb.remove_if(|s| s.key().lo.1 == 4000), 1);
        assert_eq!(tb.slots[old_i.unwrap() as usize].pk(), FREE);
        assert_eq!(tb.iter().count(), 1);
        assert_eq!(tb.iter().next().map(|s| s.key().lo.1), Some(4001));
        // The slot number a look-ahead kept finds nothing there now.
        assert!(tb.at4(old_i, old_pk, &Cutoffs::at(1.0, &t)).is_none());
        assert!(tb.lookup4(old_pk, &Cutoffs::at(1.0, &t)).is_none());
        assert!(tb.lookup(&old, &Cutoffs::at(1.0, &t)).is_none());
        // Clearing frees the live one; a second clear finds nothing to free.
        assert_eq!(tb.remove_if(|_| true), 1);
        assert_eq!(tb.remove_if(|_| true), 0);
        assert_eq!((tb.len(), tb.iter().count(), tb.stats.deleted), (0, 0, 2));
        // A new session reuses a slot and is found both ways.
        let new = tuple(4002).0;
        tb.create(mk(4002)).unwrap();
        assert_eq!(tb.used, 2, "a slot is reused");
        let i = tb.find(tb.digest4(new.packed().unwrap()));
        let found = tb
            .at4(i, new.packed().unwrap(), &Cutoffs::at(1.0, &t))
            .map(|s| *s.key());
        assert_eq!(found, Some(new));
        assert_eq!(
            tb.lookup(&new, &Cutoffs::at(1.0, &t)).map(|s| *s.key()),
            Some(new)
        );
        assert_eq!(tb.iter().count(), 1);
    }

    /// Keys sharing a digest (the digests narrowed to 4 bits) both have sessions, found
    /// by either's lookup whichever is the first candidate, and each expires alone. Before
    /// the flow table the second key was refused (`Collision`) while the first lived.
    #[test]
    fn two_keys_on_one_digest() {
        let t = Timeouts::default();
        let mut tb = Table::new(100);
        tb.digest_mask = 0xf;
        let at = |now: f64, port: u16| {
            let mut s = sess(now, 17);
            let (key, lo) = SessKey::of(1, false, 17, (10, port), (20, 80));
            s.key = key;
            s.init_lo = lo;
            s
        };
        // Keys `a`, `b`, `e` share a digest, `c` has another.
        let d = |tb: &Table, p: u16| tb.digest(&at(0.0, p).key);
        let a = 1000;
        let same: Vec<u16> = (1001..)
            .filter(|&p| d(&tb, p) == d(&tb, a))
            .take(2)
            .collect();
        let (b, e) = (same[0], same[1]);
        let c = (1001..).find(|&p| d(&tb, p) != d(&tb, a)).unwrap();
        let key = |p: u16| at(0.0, p).key;
        tb.create(at(0.0, a)).unwrap();
        tb.create(at(500.0, c)).unwrap();
        // `b` finds no session of its own (`a`'s is its digest's first candidate) and
        // gets one beside `a`'s.
        assert!(tb.lookup(&key(b), &Cutoffs::at(1.0, &t)).is_none());
        tb.create(at(200.0, b)).unwrap();
        tb.create(at(200.0, e)).unwrap();
        assert_eq!(tb.len(), 4);
        for p in [a, b, c, e] {
            assert_eq!(
                tb.lookup(&key(p), &Cutoffs::at(3.0, &t)).map(|s| s.key),
                Some(key(p))
            );
            // The packed path too, from the first candidate (another key's for `b`, `e`).
            let pk = key(p).packed().unwrap();
            let first = tb.find(tb.digest4(pk));
            assert_eq!(
                tb.at4(first, pk, &Cutoffs::at(3.0, &t)).map(|s| s.key),
                Some(key(p))
            );
        }
        // The same key twice is refused.
        assert_eq!(tb.create(at(3.0, b)).err(), Some(CreateError::Collision));
        // `a` expires (600 s idle) and takes only its own entry: `b`, `e` and `c` stay.
        assert_eq!(tb.expire(700.0, &t, 100), 1);
        assert!(tb.lookup(&key(a), &Cutoffs::at(700.0, &t)).is_none());
        for p in [b, c, e] {
            assert_eq!(
                tb.lookup(&key(p), &Cutoffs::at(700.0, &t)).map(|s| s.key),
                Some(key(p))
            );
        }
        assert_eq!(tb.len(), 3);
    }
}
