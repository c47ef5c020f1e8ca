//! `acl`: access control lists with VPP's acl-plugin CLI, stateless and stateful
//! (`permit+reflect`).
//!
//! ```text
//! set acl-plugin acl [index <n>] permit|deny|permit+reflect src <prefix> dst <prefix>
//!     [proto <p>] [sport <a>[-<b>]] [dport <a>[-<b>]] [tcpflags <v> mask <m>] [tag <t>]
//!     [, <rule> ...]
//! set acl-plugin interface <if> input|output acl <n> [del]
//! set acl-plugin session timeout udp idle|tcp idle|tcp transient <seconds>
//! show acl-plugin acl [index <n>]      # rules with their hit counts
//! show acl-plugin interface
//! show acl-plugin sessions
//! clear acl-plugin sessions
//! delete acl-plugin acl index <n>
//! ```
//!
//! An interface's input (or output) list is its ACLs in the order applied; a packet takes
//! the action of the first rule that matches across the list, and is dropped when none does
//! (VPP's implicit deny). For ICMP rules `sport`/`dport` are the type and code ranges.
//! Non-first fragments and packets with a truncated L4 header match only rules that look
//! at no L4 field. The rules of a list are compiled into a tuple-space-search classifier
//! ([`rules::Classifier`]). A `permit+reflect` match creates a session ([`session`]) that
//! admits the flow's return traffic in the other direction of the same interface; an
//! interface whose lists hold such a rule is *stateful*: both directions' nodes run on it,
//! and its packets are handed to the thread owning their session key first.
//!
//! Nodes, one per family and direction, each a feature of the arc named:
//! `acl-plugin-in-ip4-fa` (`ip4-unicast`), `acl-plugin-in-ip6-fa` (`ip6-unicast`),
//! `acl-plugin-out-ip4-fa` (`ip4-output`), `acl-plugin-out-ip6-fa` (`ip6-output`);
//! and the process `acl-plugin-fa-cleaner` (frees expired sessions once a second).
//! - uses: input: the IP header at `current_data` and `rx_if`; output: the IP header after
//!   the 14-byte Ethernet header the rewrite wrote, and `tx_if`; `handoff_thread` (a packet
//!   handed here is processed here).
//! - sets: `handoff_thread` = owner + 1 on a packet handed to its session's thread, 0 after
//!   and on a stateful interface's packets without a session key.
//! - next: `error-drop` for denied packets; `pass`: the arc's next feature or its end
//!   (`ip4-lookup`/`ip6-lookup`, or `interface-output` for the output arcs); packets of a
//!   stateful interface owned by another thread go to this node there (handoff queue).
//! - counters (a frame's `permit` and `session_hit` are added once per frame and a rule's
//!   hits once per run of packets meeting it, stateless or stateful, so within a frame they
//!   lag): `permit`, `session_hit`, `session_created`, `handoff` (packets the owning
//!   thread's queue took), `icmp_error_session_hit` (an ICMP error admitted for the session
//!   it quotes) (info);
//!   drops: `deny` (rule said deny), `no_match` (implicit deny), `malformed` (no or
//!   invalid IP header), `session_limit` (the owner's session table is full),
//!   `session_alloc_failed` (the owner's session table could not be allocated, at its first
//!   session, or its buckets not rebuilt, at the session past
//!   [`session::FIRST_SESSIONS`]: retried at most once a second,
//!   [`session::ALLOC_RETRY_SECS`]), `hash_collision` (a
//!   session to be created whose key has a live one: never, as the key is looked up first;
//!   keys sharing a digest each have theirs, [`session::Table`]),
//!   `congestion_drop` (the owning thread's handoff queue full: to `error-drop`),
//!   `tcp_out_of_window` and `tcp_bad_rst` (a
//!   segment, or a RST, of a tracked TCP connection outside its window:
//!   [`session::TcpWindow`]), `malformed` also for a tracked TCP packet whose header is
//!   truncated.

pub mod api;
pub mod rules;
pub mod session;

use rules::{Action, Classifier, Key, Rule};
use session::{Cutoffs, Packed4, SessKey, Session, Table, TcpReject, TcpSeg, Timeouts};
use sluice_buffer::{BufIdx, Buffer};
use sluice_cli::{Args, CliError};
use sluice_graph::{
    Cx, FrameScratch, Next, NodeFn, NodeKind, NodeRegistration, Suspend, Vlib, Wake, FRAME_SIZE,
    SCRATCH_AHEAD,
};
use sluice_vnet::error::{VnetError, VnetResult};
use sluice_vnet::feature::{FeatureDef, FeatureNext};
use sluice_vnet::plugin::{Plugin, RegisterError, Registrar};
use sluice_vnet::Interfaces;
use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// The nodes: (name, arc, IPv6, output, next arc names in [`AclNext`] order).
const NODES: [(&str, &str, bool, bool, &[&str]); 4] = [
    (
        "acl-plugin-in-ip4-fa",
        "ip4-unicast",
        false,
        false,
        AclNext::NAMES,
    ),
    (
        "acl-plugin-in-ip6-fa",
        "ip6-unicast",
        true,
        false,
        &["error-drop", "ip6-lookup"],
    ),
    (
        "acl-plugin-out-ip4-fa",
        "ip4-output",
        false,
        true,
        &["error-drop", "interface-output"],
    ),
    (
        "acl-plugin-out-ip6-fa",
        "ip6-output",
        true,
        true,
        &["error-drop", "interface-output"],
    ),
];

/// `acl-plugin-fa-cleaner`.
pub const CLEANER: &str = "acl-plugin-fa-cleaner";

/// Session slots the cleaner looks at per thread per second at most.
const CLEAN_BUDGET: usize = 200_000;

sluice_graph::counters! {
    /// The ACL nodes' counters.
    pub enum AclCounter {
        /// ACL permit packets.
        Permit => info("permit", "ACL permit packets"),
        /// ACL deny packets.
        Deny => error("deny", "ACL deny packets"),
        /// No ACL rule matched (implicit deny).
        NoMatch => error("no_match", "no ACL rule matched (implicit deny)"),
        /// Packet too short for its IP header.
        Malformed => error("malformed", "packet too short for its IP header"),
        /// Packets admitted by a session.
        SessionHit => info("session_hit", "packets admitted by a session"),
        /// Sessions created (permit+reflect).
        SessionCreated => info("session_created", "sessions created (permit+reflect)"),
        /// Session table full (permit+reflect refused).
        SessionLimit => error("session_limit", "session table full (permit+reflect refused)"),
        /// The session table's memory could not be allocated (permit+reflect refused).
        SessionAllocFailed => error("session_alloc_failed", "session table memory could not be allocated (permit+reflect refused)"),
        /// Packets handed to the session's owning thread.
        Handoff => info("handoff", "packets handed to the session's owning thread"),
        /// Handoff queue to the owning thread full.
        Congestion => error("congestion_drop", "handoff queue to the owning thread full"),
        /// ICMP errors admitted for the session they quote.
        IcmpErrorHit => info("icmp_error_session_hit", "ICMP errors admitted for the session they quote"),
        /// TCP segment of a session outside its window.
        TcpOutOfWindow => error("tcp_out_of_window", "TCP segment outside the session's window"),
        /// TCP RST of a session outside its window.
        TcpBadRst => error("tcp_bad_rst", "TCP RST outside the session's window"),
        /// The key of a session to be created has a live one (never: the key is looked up
        /// first; kept for VPP-style scripts that read it).
        HashCollision => error("hash_collision", "session key in use"),
    }
}

sluice_graph::arcs! {
    /// The ACL nodes' next arcs (the IPv4 input nodes' targets; the others' in [`NODES`]).
    pub enum AclNext {
        /// Dropped packets.
        Drop => "error-drop",
        /// The arc's next feature or its end.
        Pass => "ip4-lookup",
    }
}

/// An ACL.
#[derive(Clone, Debug, Default)]
pub struct Acl {
    /// Its rules in order.
    pub rules: Vec<Rule>,
    /// `tag`.
    pub tag: String,
}

/// An interface's compiled list: the classifier and, per rule, (ACL index, rule index).
pub struct IfList {
    c: Classifier,
    owner: Vec<(u32, u32)>,
}

/// What the nodes read: compiled lists per interface and direction.
#[derive(Default)]
pub struct Compiled {
    input: Vec<Option<Arc<IfList>>>,
    output: Vec<Option<Arc<IfList>>>,
    /// By sw_if_index: its lists hold a `permit+reflect` rule.
    stateful: Vec<bool>,
    timeouts: Timeouts,
}

/// A thread's state: the compiled lists in force, its rule hit counts and its sessions.
#[derive(Default)]
pub struct ThreadAcl {
    compiled: Arc<Compiled>,
    /// hits[acl][rule].
    hits: Vec<Vec<u64>>,
    /// The sessions this thread owns.
    pub sessions: Table,
}

/// Shared state (a `Vlib` extension through [`AclMain`]).
#[derive(Default)]
pub struct AclShared {
    threads: OnceLock<Box<[Mutex<ThreadAcl>]>>,
}

/// The control plane.
#[derive(Default)]
pub struct AclMain {
    /// Shared with the nodes.
    pub shared: Arc<AclShared>,
    /// ACLs by index.
    pub acls: BTreeMap<u32, Acl>,
    /// Input lists by sw_if_index.
    pub input: BTreeMap<u32, Vec<u32>>,
    /// Output lists.
    pub output: BTreeMap<u32, Vec<u32>>,
    /// Session timeouts.
    pub timeouts: Timeouts,
    /// (sw_if_index, output) whose nodes are enabled.
    enabled: BTreeSet<(u32, bool)>,
    /// Stateful interfaces in force.
    stateful: BTreeSet<u32>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl AclShared {
    /// Per-thread states (empty before `init`).
    pub fn threads(&self) -> &[Mutex<ThreadAcl>] {
        self.threads.get().map(|t| &t[..]).unwrap_or(&[])
    }
}

/// Parses the IP packet at `d` into a [`Key`] (`None`: no complete IP header).
#[inline(always)]
pub fn key_of(d: &[u8], v6: bool) -> Option<Key> {
    let (src, dst, proto, l4, first) = if v6 {
        let h = d.get(..40)?;
        let p = sluice_wire::ipv6::Ipv6Packet::new_unchecked(d);
        let (nh, off, first) = match p.walk_extensions() {
            Ok((44, off)) => (44, off, false),
            Ok((nh, off)) => (nh, off, true),
            Err(_) => (h[6], 40, false),
        };
        let a = |o: usize| u128::from_be_bytes(h[o..o + 16].try_into().unwrap_or([0; 16]));
        (a(8), a(24), nh, off, first)
    } else {
        let h = d.get(..20)?;
        let ihl = (h[0] as usize & 0xf) * 4;
        // Not an IPv4 header, or one whose length would put the L4 fields inside it: no
        // key (the counted `malformed` drop). ip4-input drops these on input; the output
        // arc can see them from a decapsulation.
        if h[0] >> 4 != 4 || ihl < 20 {
            return None;
        }
        let a = |o: usize| u32::from_be_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]) as u128;
        let frag = u16::from_be_bytes([h[6], h[7]]) & 0x1fff;
        (a(12), a(16), h[9], ihl, frag == 0)
    };
    let mut k = Key {
        v6,
        src,
        dst,
        proto,
        ..Key::default()
    };
    if first {
        // Each protocol's fields from one fixed-size view of its header (one bounds check).
        let l = d.get(l4..).unwrap_or(&[]);
        let be = |h: &[u8], o: usize| u16::from_be_bytes([h[o], h[o + 1]]);
        match proto {
            6 => {
                if let Some(h) = l.first_chunk::<14>() {
                    (k.sport, k.dport, k.tcp_flags) = (be(h, 0), be(h, 2), h[13]);
                    k.l4 = true;
                }
            }
            17 => {
                if let Some(h) = l.first_chunk::<4>() {
                    (k.sport, k.dport) = (be(h, 0), be(h, 2));
                    k.l4 = true;
                }
            }
            1 | 58 => {
                if let Some(h) = l.first_chunk::<2>() {
                    (k.sport, k.dport) = (h[0] as u16, h[1] as u16);
                    // An echo's identifier is part of its session key: an echo without
                    // its whole 8-byte header has no L4 fields rather than identifier 0.
                    k.l4 = match is_echo(&k) {
                        Some(_) => match l.first_chunk::<8>() {
                            Some(h) => {
                                k.icmp_id = be(h, 4);
                                true
                            }
                            None => {
                                (k.sport, k.dport) = (0, 0);
                                false
                            }
                        },
                        None => true,
                    };
                }
            }
            _ => k.l4 = true,
        }
    }
    Some(k)
}

/// For an ICMP echo (request: `Some(true)`, reply: `Some(false)`) of the key's family.
#[inline(always)]
fn is_echo(k: &Key) -> Option<bool> {
    match (k.v6, k.proto, k.sport) {
        (false, 1, 8) | (true, 58, 128) => Some(true),
        (false, 1, 0) | (true, 58, 129) => Some(false),
        _ => None,
    }
}

/// The session key of a packet and whether its source is the key's `lo` end; `None` for
/// packets without one (other ICMP messages, no L4 header).
#[inline(always)]
fn sess_key(sw_if: u32, k: &Key) -> Option<(SessKey, bool)> {
    if !k.l4 {
        return None;
    }
    let (sp, dp) = match k.proto {
        6 | 17 => (k.sport, k.dport),
        1 | 58 if k.proto == if k.v6 { 58 } else { 1 } => match is_echo(k)? {
            true => (k.icmp_id, 0),
            false => (0, k.icmp_id),
        },
        1 | 58 => return None,
        _ => (0, 0),
    };
    Some(SessKey::of(sw_if, k.v6, k.proto, (k.src, sp), (k.dst, dp)))
}

/// The TCP segment of the IP packet `d` (its sequence and acknowledgement numbers, window,
/// flags, payload length and a SYN's window scale option); `None` when the TCP header is
/// truncated. Only called for packets whose key is TCP with an L4 header.
fn tcp_seg(d: &[u8], v6: bool) -> Option<TcpSeg> {
    let (l4, ip_len) = if v6 {
        let off = match sluice_wire::ipv6::Ipv6Packet::new_unchecked(d).walk_extensions() {
            Ok((_, off)) => off,
            Err(_) => 40,
        };
        (
            off,
            40 + u16::from_be_bytes([*d.get(4)?, *d.get(5)?]) as usize,
        )
    } else {
        (
            (*d.first()? as usize & 0xf) * 4,
            u16::from_be_bytes([*d.get(2)?, *d.get(3)?]) as usize,
        )
    };
    let end = ip_len.min(d.len());
    let t = d.get(l4..end)?;
    let h = t.get(..20)?;
    let be32 = |o: usize| u32::from_be_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]);
    let hlen = (h[12] as usize >> 4) * 4;
    let opts = t.get(20..hlen)?;
    let flags = h[13];
    let mut wscale = None;
    if flags & 0x02 != 0 {
        let mut o = 0;
        while let Some(&kind) = opts.get(o) {
            match kind {
                0 => break,
                1 => o += 1,
                _ => {
                    let len = *opts.get(o + 1)? as usize;
                    if len < 2 {
                        break;
                    }
                    if kind == 3 && len == 3 {
                        wscale = Some(*opts.get(o + 2)?);
                    }
                    o += len;
                }
            }
        }
    }
    Some(TcpSeg {
        seq: be32(4),
        ack: be32(8),
        win: u16::from_be_bytes([h[14], h[15]]),
        flags,
        // From the IP length, not the first buffer's bytes: a GSO aggregate a driver kept
        // whole is a chain, and its data ends where the IP header says.
        len: ip_len.saturating_sub(l4 + hlen) as u32,
        wscale,
    })
}

/// [`tcp_seg`] of an IPv4 packet `d` with a 20-byte IP header (what [`AclNode::packed4`]
/// admits), the session-hit path's: a segment without SYN (no options to read) straight
/// from the header, the rest by `tcp_seg`; the same answer as `tcp_seg(d, false)`.
#[inline(always)]
fn tcp_seg4(d: &[u8]) -> Option<TcpSeg> {
    debug_assert_eq!(d.first(), Some(&0x45));
    let Some(h) = d.first_chunk::<40>() else {
        return tcp_seg(d, false);
    };
    let flags = h[33];
    if flags & 0x02 != 0 {
        return tcp_seg(d, false);
    }
    let ip_len = u16::from_be_bytes([h[2], h[3]]) as usize;
    let hlen = (h[32] as usize >> 4) * 4;
    // `tcp_seg`'s bounds: the header and its options within the IP length and the data.
    if hlen < 20 || ip_len.min(d.len()) < 20 + hlen {
        return None;
    }
    let be32 = |o: usize| u32::from_be_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]);
    Some(TcpSeg {
        seq: be32(24),
        ack: be32(28),
        win: u16::from_be_bytes([h[34], h[35]]),
        flags,
        len: ip_len.saturating_sub(20 + hlen) as u32,
        wscale: None,
    })
}

/// Whether the key is an ICMP error of its family (IPv4: unreachable, source quench,
/// redirect, time exceeded, parameter problem; ICMPv6: unreachable, packet too big, time
/// exceeded, parameter problem).
#[inline(always)]
fn is_icmp_error(k: &Key) -> bool {
    match (k.v6, k.proto) {
        (false, 1) => matches!(k.sport, 3 | 4 | 5 | 11 | 12),
        (true, 58) => matches!(k.sport, 1..=4),
        _ => false,
    }
}

/// The key of the packet an ICMP error quotes (`d`: the quoted IP header onward), from its
/// addresses and the first 8 bytes of its L4 header (all RFC 792 promises): `None` when the
/// quote is truncated, a non-first fragment, has IPv6 extension headers, or is not TCP,
/// UDP or an ICMP echo of its family.
fn quoted_key(d: &[u8], v6: bool) -> Option<Key> {
    let (src, dst, proto, l4) = if v6 {
        let h = d.get(..40)?;
        if h[0] >> 4 != 6 {
            return None;
        }
        let a = |o: usize| u128::from_be_bytes(h[o..o + 16].try_into().unwrap_or([0; 16]));
        (a(8), a(24), h[6], 40)
    } else {
        let h = d.get(..20)?;
        let ihl = (h[0] as usize & 0xf) * 4;
        if h[0] >> 4 != 4 || ihl < 20 || u16::from_be_bytes([h[6], h[7]]) & 0x1fff != 0 {
            return None;
        }
        let a = |o: usize| u32::from_be_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]) as u128;
        (a(12), a(16), h[9], ihl)
    };
    let l = d.get(l4..l4 + 8)?;
    let be = |o: usize| u16::from_be_bytes([l[o], l[o + 1]]);
    let mut k = Key {
        v6,
        src,
        dst,
        proto,
        l4: true,
        ..Key::default()
    };
    match proto {
        6 | 17 => {
            k.sport = be(0);
            k.dport = be(2);
        }
        1 | 58 => {
            k.sport = l[0] as u16;
            k.dport = l[1] as u16;
            is_echo(&k)?;
            k.icmp_id = be(4);
        }
        _ => return None,
    }
    Some(k)
}

/// For an ICMP error (`k`, the packet `d`), the session key of the packet it quotes and
/// whether that packet's source is the key's `lo` end; `None` unless the error is addressed
/// to the quoted packet's source (the host that sent it).
#[inline(never)]
fn icmp_error_sess_key(sw_if: u32, k: &Key, d: &[u8]) -> Option<(SessKey, bool)> {
    if !is_icmp_error(k) {
        return None;
    }
    let l4 = if k.v6 {
        // The error's own header: no extension headers.
        if *d.get(6)? != 58 {
            return None;
        }
        40
    } else {
        (*d.first()? as usize & 0xf) * 4
    };
    let q = quoted_key(d.get(l4 + 8..)?, k.v6)?;
    if q.src != k.dst {
        return None;
    }
    sess_key(sw_if, &q)
}

/// The TCP part of [`AclNode::hit_at`]: the segment of `d` (an IPv4 packet from its IP
/// header) read and checked against session `s`'s window; its flags, or why it is dropped
/// (a truncated TCP header, as [`AclNode::one`] drops it; out of the window). The window
/// check's ACK path inline ([`session::TcpWindow::check_fast`]), here only: inlined in
/// [`AclNode::one`] too, it cost the UDP hit 4 instructions (registers).
#[inline(always)]
fn tcp_hit(s: &mut Session, from_init: bool, d: Option<&[u8]>) -> Result<u8, AclCounter> {
    let g = d.and_then(tcp_seg4).ok_or(AclCounter::Malformed)?;
    match s.tcp_check_fast(from_init, &g) {
        Ok(()) => Ok(g.flags),
        Err(TcpReject::OutOfWindow) => Err(AclCounter::TcpOutOfWindow),
        Err(TcpReject::BadRst) => Err(AclCounter::TcpBadRst),
    }
}

/// What happens to a packet.
enum Verdict {
    Next(Next),
    Handoff(usize),
}

/// `V6`: the IPv6 nodes; `OUT`: the output ones (each node its own code, without tests of
/// the family or the direction per packet).
struct AclNode<const V6: bool, const OUT: bool> {
    shared: Arc<AclShared>,
    features: Arc<FeatureNext>,
    slot: usize,
    /// The frame's packets that stay on this thread and their arcs (`kept` of them; the
    /// frame's buffer addresses are in the thread's frame scratch).
    keep: [BufIdx; FRAME_SIZE],
    nexts: [u16; FRAME_SIZE],
    hand: Vec<Vec<BufIdx>>,
    /// The IPv4 nodes' per-packet session keys of a frame with stateful interfaces
    /// ([`AclNode::pre4`]), and the look-ahead's session table answers.
    pre: [Pre; FRAME_SIZE],
}

/// What [`AclNode::hit4`] takes of a packet: nothing ([`Pre::SKIP`]: the general path,
/// [`AclNode::one`], from the start), the owner thread to hand it to, or its session key on
/// this thread; read from the header in the frame's first pass, which also prefetches the
/// key's table bucket, so that the main loop can look up the slot (and prefetch the
/// session record) of the packet [`SESSION_AHEAD`] on. The first pass also sets the
/// buffer's `handoff_thread` and keeps every packet's interface (`sw_if`): the main loop
/// does not read the buffer header of a packet `hit4` admits or hands off (after the first
/// pass over 256 packets it is out of L1). 40 bytes.
#[derive(Clone, Copy)]
struct Pre {
    /// The packed session key ([`Packed4::pk`]) and its table digest.
    pk: [u64; 2],
    dig: u64,
    /// From the look-ahead ([`Pre::look`]) on, the slot it found for `dig` (`NO_SLOT`:
    /// none). A slot whose session's key is `pk` is that key's however the table changed
    /// since (another key's has the key looked up exactly: [`Table::at4`]), a miss is
    /// looked up again if the frame changed the table ([`Fc::changes`]).
    slot: u32,
    /// [`Pre::SKIP`], [`Pre::HAND`] (to `owner`) or [`Pre::HERE`] (on this thread).
    kind: u8,
    /// The packet's source is the key's `lo` end.
    src_lo: bool,
    /// The thread to hand it to.
    owner: u16,
    /// The interface whose list applies (every kind).
    sw_if: u32,
}

const _: () = assert!(std::mem::size_of::<Pre>() == 40);

/// [`Pre::slot`] when the table holds no slot for the digest.
const NO_SLOT: u32 = u32::MAX;

impl Pre {
    /// Not for [`AclNode::hit4`].
    const SKIP: u8 = 0;
    /// Handed to `owner`.
    const HAND: u8 = 1;
    /// Looked up on this thread.
    const HERE: u8 = 2;
    const NONE: Pre = Pre {
        pk: [0; 2],
        dig: 0,
        slot: NO_SLOT,
        kind: Pre::SKIP,
        src_lo: false,
        owner: 0,
        sw_if: 0,
    };

    /// The look-ahead: the slot of a packet to be looked up here (in the bucket the first
    /// pass prefetched), and a prefetch of its session record.
    #[inline(always)]
    fn look(&mut self, t: &Table) {
        if self.kind == Pre::HERE {
            let slot = t.find(self.dig);
            if let Some(i) = slot {
                t.prefetch_slot(i, self.pk[1] >> 24 & 0xff == 6);
            }
            self.slot = slot.unwrap_or(NO_SLOT);
        }
    }
}

/// What an [`AclNode`] is made of besides its per-frame arrays.
struct AclNodeParts {
    shared: Arc<AclShared>,
    features: Arc<FeatureNext>,
    slot: usize,
}

impl AclNodeParts {
    fn node<const V6: bool, const OUT: bool>(self) -> Box<dyn NodeFn> {
        Box::new(AclNode::<V6, OUT> {
            shared: self.shared,
            features: self.features,
            slot: self.slot,
            keep: [BufIdx(0); FRAME_SIZE],
            nexts: [0; FRAME_SIZE],
            hand: Vec::new(),
            pre: [Pre::NONE; FRAME_SIZE],
        })
    }
}

/// How many packets ahead the node prefetches.
const AHEAD: usize = 2;

/// How many packets ahead the IPv4 nodes' look-ahead looks the slot up in the bucket (which
/// the first pass prefetched) and prefetches the session ([`Pre`]).
const SESSION_AHEAD: usize = 8;

/// A frame's tallies: the `permit` and `session_hit` packets, counted once per frame, and
/// the run of packets the same rule of the current list matched, whose hit count is added
/// once per run.
#[derive(Default)]
struct Tally {
    permit: u64,
    /// Packets admitted by a session ([`AclNode::hit4`] or [`AclNode::one`]).
    session_hit: u64,
    /// (rule index in the list, packets).
    run: (u32, u64),
}

impl Tally {
    /// A packet matched rule `i` of `list` (the list of the interface whose run this is).
    #[inline(always)]
    fn hit(&mut self, hits: &mut [Vec<u64>], list: &IfList, i: u32) {
        if i != self.run.0 {
            self.flush(hits, Some(list));
            self.run.0 = i;
        }
        self.run.1 += 1;
    }

    /// Adds the run's packets to its rule's hit count and starts an empty one.
    #[inline(always)]
    fn flush(&mut self, hits: &mut [Vec<u64>], list: Option<&IfList>) {
        let (i, n) = std::mem::take(&mut self.run);
        if let (Some(list), true) = (list, n > 0) {
            add_hits(hits, list, i, n);
        }
    }
}

/// Adds `n` to the hit count of rule `i` of `list` (kept per ACL and rule of the ACL).
#[inline(always)]
fn add_hits(hits: &mut [Vec<u64>], list: &IfList, i: u32, n: u64) {
    if let Some(&(a, r)) = list.owner.get(i as usize) {
        if let Some(h) = hits.get_mut(a as usize).and_then(|v| v.get_mut(r as usize)) {
            *h += n;
        }
    }
}

/// An interface's lists in force and its next feature, for [`AclNode::one`].
struct IfCtx<'a> {
    sw_if: u32,
    list: Option<&'a IfList>,
    stateful: bool,
    pass: Next,
}

/// Whether [`AclNode::hit4`] looked a packet's session up before [`AclNode::one`].
#[derive(Clone, Copy)]
enum Probed {
    /// No: `one` hands it off and looks it up itself.
    No,
    /// On the session's owner thread (`handoff_thread` cleared): no live session
    /// (`live == false`) or one that does not admit the packet in this direction.
    Yes { live: bool },
}

/// Per-frame context.
struct Fc<'a> {
    t: &'a mut ThreadAcl,
    cur: &'a Compiled,
    me: usize,
    /// Threads owning sessions (workers, or the main thread alone).
    owners: usize,
    now: f64,
    /// The sessions' expiry cutoffs at `now` ([`Cutoffs`]: the timeouts subtracted once a
    /// frame, not at every hit).
    cut: Cutoffs,
    /// The session table's [`Table::changes`] as the frame started (the look-ahead's
    /// misses are looked up again once the frame changed the table).
    changes: u32,
}

impl<const V6: bool, const OUT: bool> AclNode<V6, OUT> {
    #[inline(always)]
    fn drop_pkt(cx: &mut Cx, b: &mut Buffer<'_>, c: AclCounter) -> Verdict {
        b.hdr.error = cx.error(c);
        Verdict::Next(AclNext::Drop.next())
    }

    /// The interface whose list applies to `b` (tx for the output nodes, rx for input).
    #[inline(always)]
    fn sw_if(&self, b: &Buffer<'_>) -> u32 {
        if OUT {
            b.hdr.tx_if
        } else {
            b.hdr.rx_if
        }
    }

    /// What interface `sw_if` asks of this node (looked up once per run of packets of one
    /// interface, not per packet).
    #[inline(always)]
    fn if_ctx<'a>(&self, cur: &'a Compiled, sw_if: u32) -> IfCtx<'a> {
        let lists = if OUT { &cur.output } else { &cur.input };
        IfCtx {
            sw_if,
            list: lists.get(sw_if as usize).and_then(|l| l.as_deref()),
            stateful: cur.stateful.get(sw_if as usize).copied().unwrap_or(false),
            pass: self.features.next(self.slot, sw_if, AclNext::Pass.next()),
        }
    }

    /// A packet of a stateless interface with a list: its key classified, the rule's hit
    /// added to the frame's run, `permit` to the frame's tally.
    #[inline(always)]
    fn stateless(
        &self,
        cx: &Cx,
        list: &IfList,
        pass: Next,
        b: &mut Buffer<'_>,
        tally: &mut Tally,
        hits: &mut [Vec<u64>],
    ) -> Next {
        let off = if OUT { 14 } else { 0 };
        let found = match b.data().get(off..).and_then(|d| key_of(d, V6)) {
            Some(k) => list.c.lookup(&k).ok_or(AclCounter::NoMatch),
            None => Err(AclCounter::Malformed),
        };
        let i = match found {
            Ok(i) => i,
            Err(c) => {
                b.hdr.error = cx.error(c);
                return AclNext::Drop.next();
            }
        };
        tally.hit(hits, list, i);
        // Lists without permit+reflect: a stateless interface's `PermitReflect` cannot be.
        if list.c.rules().get(i as usize).map(|r| r.action) == Some(Action::Deny) {
            b.hdr.error = cx.error(AclCounter::Deny);
            return AclNext::Drop.next();
        }
        tally.permit += 1;
        pass
    }

    /// A TCP or UDP packet of a stateful IPv4 interface `sw_if` (below 2^23): its session
    /// key read straight from the header ([`Packed4`]); `None` for what [`AclNode::hit4`]
    /// does not take (an IP header with options, a fragment, another protocol, a TCP
    /// header shorter than the 14 bytes [`key_of`] reads: no session key, no handoff).
    #[inline(always)]
    fn packed4(sw_if: u32, b: &Buffer<'_>) -> Option<(Packed4, u8)> {
        let off = if OUT { 14 } else { 0 };
        let h = *b.data().get(off..)?.first_chunk::<24>()?;
        // Version 4 without options, offset 0 (first fragment or none), TCP or UDP.
        let proto = h[9];
        if h[0] != 0x45 || h[6] & 0x1f != 0 || h[7] != 0 || (proto != 6 && proto != 17) {
            return None;
        }
        // TCP with fewer than the 14 header bytes `key_of` reads has no session key.
        if proto == 6 && b.data().len() < off + 20 + 14 {
            return None;
        }
        let addrs = u64::from_be_bytes([h[12], h[13], h[14], h[15], h[16], h[17], h[18], h[19]]);
        let ports = u32::from_be_bytes([h[20], h[21], h[22], h[23]]);
        let p = Packed4::of_words(sw_if, proto, addrs, ports);
        Some((p, proto))
    }

    /// The thread other than this one that owns `p`'s session, unless the packet was
    /// handed here already.
    #[inline(always)]
    fn owner4(fc: &Fc, p: &Packed4, b: &Buffer<'_>) -> Option<usize> {
        if fc.owners > 0 {
            let owner = 1 + (p.owner_hash() % fc.owners as u64) as usize;
            if owner != fc.me && b.hdr.handoff_thread as usize != fc.me + 1 {
                return Some(owner);
            }
        }
        None
    }

    /// A TCP or UDP packet of a stateful IPv4 interface (below 2^23), its session key read
    /// straight from the header ([`AclNode::packed4`]): handed to its owner thread, or
    /// admitted by its session in this direction (or dropped by its TCP checks). `Err` for
    /// the rest, which [`AclNode::one`] takes: [`Probed::No`] for packets this does not
    /// take, [`Probed::Yes`] for a session miss or a one-armed flow, whose lookup `one`
    /// does not repeat. This only shortcuts what `one` would do, with the same outcome.
    #[inline(always)]
    fn hit4(
        &self,
        cx: &mut Cx,
        fc: &mut Fc,
        ic: &IfCtx,
        b: &mut Buffer<'_>,
        tally: &mut Tally,
    ) -> Result<Verdict, Probed> {
        let Some((p, proto)) = Self::packed4(ic.sw_if, b) else {
            return Err(Probed::No);
        };
        if let Some(owner) = Self::owner4(fc, &p, b) {
            b.hdr.handoff_thread = (owner + 1) as u16;
            return Ok(Verdict::Handoff(owner));
        }
        b.hdr.handoff_thread = 0;
        let t = &fc.t.sessions;
        let slot = t.find(t.digest4(p.pk));
        self.hit_at(cx, fc, ic, b, tally, slot, p.pk, p.src_lo, proto)
    }

    /// The look-ahead's first pass, for a packet of a stateful IPv4 interface `sw_if`
    /// (below 2^23): what [`AclNode::hit4`] reads before the lookup, kept for
    /// [`AclNode::hit4_ahead`]: the session key and its table digest, or the thread to
    /// hand the packet to; [`Pre::SKIP`] for what `hit4` does not take. The buffer's
    /// `handoff_thread` is set here as `hit4` sets it (the owner's, or cleared), so that
    /// the main loop need not touch the header.
    #[inline(always)]
    fn pre4(&self, fc: &Fc, sw_if: u32, b: &mut Buffer<'_>) -> Pre {
        let Some((p, _)) = Self::packed4(sw_if, b) else {
            return Pre { sw_if, ..Pre::NONE };
        };
        if let Some(owner) = Self::owner4(fc, &p, b) {
            b.hdr.handoff_thread = (owner + 1) as u16;
            return Pre {
                kind: Pre::HAND,
                owner: owner as u16,
                sw_if,
                ..Pre::NONE
            };
        }
        b.hdr.handoff_thread = 0;
        let dig = fc.t.sessions.digest4(p.pk);
        // The bucket prefetched now.
        fc.t.sessions.prefetch(dig);
        Pre {
            pk: p.pk,
            dig,
            slot: NO_SLOT,
            kind: Pre::HERE,
            src_lo: p.src_lo,
            owner: 0,
            sw_if,
        }
    }

    /// [`AclNode::hit4`] from the first pass's [`Pre`] and the look-ahead's slot. A slot
    /// holding the key's session is the key's whatever the frame did since (keys are
    /// unique; a freed slot's key is `FREE`); a miss is looked up again if an earlier
    /// packet of the frame created or freed a session, which the look may predate.
    #[inline(always)]
    fn hit4_ahead(
        &self,
        cx: &mut Cx,
        fc: &mut Fc,
        ic: &IfCtx,
        b: &mut Buffer<'_>,
        tally: &mut Tally,
        p: &Pre,
    ) -> Result<Verdict, Probed> {
        // `pre4` set the buffer's `handoff_thread` (the owner's, or cleared).
        match p.kind {
            Pre::SKIP => return Err(Probed::No),
            Pre::HAND => return Ok(Verdict::Handoff(p.owner as usize)),
            _ => {}
        }
        let proto = (p.pk[1] >> 24) as u8;
        let slot = (p.slot != NO_SLOT).then_some(p.slot);
        let r = self.hit_at(cx, fc, ic, b, tally, slot, p.pk, p.src_lo, proto);
        if let Err(Probed::Yes { live: false }) = r {
            if fc.t.sessions.changes() != fc.changes {
                // `hit_at` left the packet as it was: looked up again.
                let slot = fc.t.sessions.find(p.dig);
                return self.hit_at(cx, fc, ic, b, tally, slot, p.pk, p.src_lo, proto);
            }
            debug_assert_eq!(slot, fc.t.sessions.find(p.dig), "a stale look-ahead miss");
        }
        r
    }

    /// The end of [`AclNode::hit4`]: the session of `pk` from `slot` (the table's first
    /// candidate for the key's digest: [`session::Table::at4`]), if it admits the packet.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn hit_at(
        &self,
        cx: &mut Cx,
        fc: &mut Fc,
        ic: &IfCtx,
        b: &mut Buffer<'_>,
        tally: &mut Tally,
        slot: Option<u32>,
        pk: [u64; 2],
        src_lo: bool,
        proto: u8,
    ) -> Result<Verdict, Probed> {
        let off = if OUT { 14 } else { 0 };
        let Some(s) = fc.t.sessions.at4(slot, pk, &fc.cut) else {
            return Err(Probed::Yes { live: false });
        };
        let from_init = src_lo == s.init_lo;
        // The initiator in the creating direction, the responder in the other.
        if (s.out == OUT) != from_init {
            return Err(Probed::Yes { live: true });
        }
        let mut flags = 0;
        if proto == 6 {
            match tcp_hit(s, from_init, b.data().get(off..)) {
                Ok(f) => flags = f,
                Err(c) => return Ok(Self::drop_pkt(cx, b, c)),
            }
        }
        s.touch(from_init, flags, fc.now);
        tally.session_hit += 1;
        Ok(Verdict::Next(ic.pass))
    }

    /// [`NodeFn::frame`]'s loop, out of line and with its own per-frame state, one copy per
    /// kind of frame, so that each loop's code is generated as if the others were not there:
    /// `STATEFUL` (some interface of the node is stateful), `PIPE` (with the look-ahead,
    /// [`AclNode::packets`]). The look-ahead inlined beside the direct loop, or sharing its
    /// context and tally, cost the stateless path 4 to 7 instructions a packet; the
    /// stateless loop (no stateful interface at all) leaves the session code out.
    #[inline(never)]
    fn frame_loop<const PIPE: bool, const STATEFUL: bool>(
        &mut self,
        cx: &mut Cx,
        frame: &[BufIdx],
        sc: Box<FrameScratch>,
        mut guard: MutexGuard<'_, ThreadAcl>,
        cur: &Compiled,
    ) {
        let arena = cx.arena();
        let me = cx.thread();
        let changes = guard.sessions.changes();
        let now = cx.now_secs();
        let mut fc = Fc {
            t: &mut guard,
            cur,
            me,
            owners: self.shared.threads().len().saturating_sub(1),
            now,
            cut: Cutoffs::at(now, &cur.timeouts),
            changes,
        };
        let mut tally = Tally::default();
        let (kept, handed) =
            self.packets::<PIPE, STATEFUL>(cx, arena, frame, &sc.addrs, &mut fc, &mut tally);
        drop(guard);
        self.finish(cx, sc, &tally, kept, handed);
    }

    /// The end of a frame, both loops': the frame's counters, its scratch given back, the
    /// kept packets to their next nodes and the handed ones to their threads.
    #[inline(always)]
    fn finish(
        &mut self,
        cx: &mut Cx,
        sc: Box<FrameScratch>,
        tally: &Tally,
        kept: usize,
        handed: bool,
    ) {
        if tally.permit > 0 {
            cx.count(AclCounter::Permit, tally.permit);
        }
        if tally.session_hit > 0 {
            cx.count(AclCounter::SessionHit, tally.session_hit);
        }
        debug_assert!(kept <= FRAME_SIZE);
        cx.put_frame_scratch(sc);
        cx.enqueue_to_next(&self.keep[..kept], &self.nexts[..kept]);
        // `Cx::handoff_or_drop` does this; its call, even out of line, cost this node +6
        // instr/pkt on the plain path (156.3 against 150.3, docs/benchmarking.md): the copy stays.
        if handed {
            let arena = cx.arena();
            let me = cx.thread();
            let node = cx.node();
            for (t, h) in self.hand.iter_mut().enumerate() {
                if h.is_empty() {
                    continue;
                }
                let took = cx.shared().handoff_enqueue(me, t, h, node);
                cx.count(AclCounter::Handoff, took as u64);
                // What the full queue refused goes to error-drop (counted there as
                // `congestion_drop`, seen by a drop trace), as NAT44's handoff does.
                let lost = &h[took..];
                if !lost.is_empty() {
                    let e = cx.error(AclCounter::Congestion);
                    for &bi in lost {
                        // SAFETY: the queue refused these buffers: this node still owns
                        // them; one header at a time.
                        unsafe { arena.header_mut(bi) }.error = e;
                    }
                    cx.enqueue_all(AclNext::Drop.next(), lost);
                }
                h.clear();
            }
        }
    }

    /// The frame's packets: each one's verdict into `keep`/`nexts` (returned: how many) or
    /// the handoff lists (returned: whether any); the frame's counts into `tally` (its last
    /// run added). `PIPE` (IPv4, a stateful interface's
    /// session table larger than the caches): a first pass reads every packet's session
    /// key or owner ([`AclNode::pre4`]) and the main loop keeps the table's misses ahead
    /// of its packets: the first pass prefetches each one's table bucket, and
    /// the main loop looks up the slot of packet i + [`SESSION_AHEAD`] in its bucket and
    /// prefetches its session while i is processed (the first packets' ones before the
    /// loop). Without `STATEFUL` (no interface of the node stateful:
    /// `Compiled::stateful` empty) the session code is left out.
    #[inline(always)]
    fn packets<const PIPE: bool, const STATEFUL: bool>(
        &mut self,
        cx: &mut Cx,
        arena: sluice_buffer::Arena<'_>,
        frame: &[BufIdx],
        addrs: &sluice_buffer::FrameAddrs<{ FRAME_SIZE + SCRATCH_AHEAD }>,
        fc: &mut Fc,
        tally: &mut Tally,
    ) -> (usize, bool) {
        let cur = fc.cur;
        let (mut handed, mut kept) = (false, 0usize);
        let mut ic: Option<IfCtx> = None;
        let n = frame.len();
        if PIPE {
            let mut run = (u32::MAX, false);
            for (j, &bj) in frame.iter().enumerate() {
                addrs.prefetch(j + AHEAD, true);
                // SAFETY: as in the main loop below: exclusive ownership of `bj`, resolved
                // into `addrs` at position `j`; the view lives for this iteration only.
                let mut b = unsafe { arena.buffer_at(addrs, j, bj) };
                let sw_if = self.sw_if(&b);
                if run.0 != sw_if {
                    let st = cur.stateful.get(sw_if as usize).copied().unwrap_or(false);
                    run = (sw_if, st && sw_if >> 23 == 0);
                }
                // Stored in place (a select of the two values cost a copy through the stack);
                // `hit4` reads nothing but `kind` of a skipped packet.
                if run.1 {
                    self.pre[j] = self.pre4(fc, sw_if, &mut b);
                } else {
                    self.pre[j].kind = Pre::SKIP;
                    self.pre[j].sw_if = sw_if;
                }
            }
            for p in &mut self.pre[..n.min(SESSION_AHEAD)] {
                p.look(&fc.t.sessions);
            }
        }
        // By index, not `enumerate`: one loop variable fewer. The loop's registers are
        // scarce (the classifier and the session code inlined); `enumerate` cost the
        // stateless path 2 to 5 instructions a packet (register allocation).
        #[allow(clippy::needless_range_loop)]
        for i in 0..n {
            let bi = frame[i];
            // The look-ahead's first pass read every packet's header and metadata already.
            if !PIPE {
                addrs.prefetch(i + AHEAD, true);
            }
            if PIPE {
                if let Some(p) = self.pre[..n].get_mut(i + SESSION_AHEAD) {
                    p.look(&fc.t.sessions);
                }
            }
            // SAFETY: the dispatcher hands this node exclusive ownership of every index in
            // `frame`; each index appears once, `addrs` was resolved from `frame` above and
            // the view lives only for this iteration.
            let mut b = unsafe { arena.buffer_at(addrs, i, bi) };
            // The look-ahead's first pass kept the interface: the header, out of L1 since
            // then, is not read for a packet `hit4` admits or hands off.
            let sw_if = if PIPE {
                self.pre[i].sw_if
            } else {
                self.sw_if(&b)
            };
            let c = match ic {
                Some(ref c) if c.sw_if == sw_if => c,
                _ => {
                    tally.flush(&mut fc.t.hits, ic.as_ref().and_then(|c| c.list));
                    ic.insert(self.if_ctx(cur, sw_if))
                }
            };
            let v = if STATEFUL && c.stateful {
                let hit = if PIPE {
                    // `pre4` skipped an interface from 2^23 on.
                    self.hit4_ahead(cx, fc, c, &mut b, tally, &self.pre[i])
                } else if V6 || c.sw_if >> 23 != 0 {
                    Err(Probed::No)
                } else {
                    self.hit4(cx, fc, c, &mut b, tally)
                };
                match hit {
                    Ok(v) => v,
                    Err(p) => self.one(cx, fc, c, &mut b, tally, p),
                }
            } else if let Some(list) = c.list {
                Verdict::Next(self.stateless(cx, list, c.pass, &mut b, tally, &mut fc.t.hits))
            } else {
                tally.permit += 1;
                Verdict::Next(c.pass)
            };
            match v {
                Verdict::Next(nx) => {
                    // `kept` <= `i` < FRAME_SIZE (the frame is cut to FRAME_SIZE above).
                    self.keep[kept] = bi;
                    self.nexts[kept] = nx.0;
                    kept += 1;
                }
                Verdict::Handoff(t) => {
                    self.hand[t].push(bi);
                    handed = true;
                }
            }
        }
        tally.flush(&mut fc.t.hits, ic.and_then(|c| c.list));
        (kept, handed)
    }

    /// A packet of a stateful interface: its session first (unless [`AclNode::hit4`] looked
    /// it up: `probed`), then the rules.
    #[inline(always)]
    fn one(
        &self,
        cx: &mut Cx,
        fc: &mut Fc,
        ic: &IfCtx,
        b: &mut Buffer<'_>,
        tally: &mut Tally,
        probed: Probed,
    ) -> Verdict {
        let (sw_if, off) = (ic.sw_if, if OUT { 14 } else { 0 });
        let pass = Verdict::Next(ic.pass);
        let list = ic.list;
        let Some(k) = b.data().get(off..).and_then(|d| key_of(d, V6)) else {
            return Self::drop_pkt(cx, b, AclCounter::Malformed);
        };
        // The key `found` gets a session if a permit+reflect rule admits the packet (kept
        // there, not copied: an 80-byte `SessKey`).
        let mut make = false;
        // An ICMP error is looked up by the packet it quotes.
        let (found, err) = match sess_key(sw_if, &k) {
            Some(x) => (Some(x), false),
            None => (
                b.data()
                    .get(off..)
                    .and_then(|d| icmp_error_sess_key(sw_if, &k, d)),
                true,
            ),
        };
        if let Some((ref key, src_lo)) = found {
            // A live session the packet does not belong to (a one-armed flow's reply on
            // the creating side) keeps its key: the packet meets the rules, and a
            // permit+reflect rule admits it without a second session.
            let mut live = false;
            if let Probed::Yes { live: l } = probed {
                // `hit4` looked this key up on its owner thread: a miss or a one-armed
                // flow's packet (not an ICMP error: `hit4` takes TCP and UDP only).
                live = l;
            } else if fc.owners > 0 {
                let owner = 1 + (key.owner_hash() % fc.owners as u64) as usize;
                if owner != fc.me && b.hdr.handoff_thread as usize != fc.me + 1 {
                    b.hdr.handoff_thread = (owner + 1) as u16;
                    return Verdict::Handoff(owner);
                }
            }
            b.hdr.handoff_thread = 0;
            let s = match probed {
                Probed::No => fc.t.sessions.lookup(key, &fc.cut),
                Probed::Yes { .. } => None,
            };
            if let Some(s) = s {
                live = true;
                let from_init = src_lo == s.init_lo;
                // The initiator in the creating direction, the responder in the other.
                if !err && (s.out == OUT) == from_init {
                    if k.proto == 6 {
                        let Some(g) = b.data().get(off..).and_then(|d| tcp_seg(d, V6)) else {
                            return Self::drop_pkt(cx, b, AclCounter::Malformed);
                        };
                        match s.tcp_check(from_init, &g) {
                            Ok(()) => {}
                            Err(TcpReject::OutOfWindow) => {
                                return Self::drop_pkt(cx, b, AclCounter::TcpOutOfWindow)
                            }
                            Err(TcpReject::BadRst) => {
                                return Self::drop_pkt(cx, b, AclCounter::TcpBadRst)
                            }
                        }
                    }
                    s.touch(from_init, k.tcp_flags, fc.now);
                    tally.session_hit += 1;
                    return pass;
                }
                // An error about a packet of the session travels against that packet;
                // it does not refresh the session.
                if err && (s.out != OUT) == from_init {
                    cx.count(AclCounter::IcmpErrorHit, 1);
                    return pass;
                }
            }
            make = !err && !live;
        } else {
            // No session key (no handoff): one handed here with it, by `hit4` or an
            // earlier node, leaves without it.
            b.hdr.handoff_thread = 0;
        }
        let Some(list) = list else {
            // A stateful interface without a list in this direction.
            tally.permit += 1;
            return pass;
        };
        let Some(i) = list.c.lookup(&k) else {
            return Self::drop_pkt(cx, b, AclCounter::NoMatch);
        };
        tally.hit(&mut fc.t.hits, list, i);
        match list.c.rules()[i as usize].action {
            Action::Permit => {}
            Action::PermitReflect => {
                if let (true, Some((key, src_lo))) = (make, &found) {
                    let s = Session::new(*key, OUT, *src_lo, fc.now);
                    let g = if k.proto == 6 {
                        match b.data().get(off..).and_then(|d| tcp_seg(d, V6)) {
                            Some(g) => Some(g),
                            None => return Self::drop_pkt(cx, b, AclCounter::Malformed),
                        }
                    } else {
                        None
                    };
                    match fc.t.sessions.create(s) {
                        Ok(s) => {
                            if let Some(g) = g {
                                // The first segment only initialises the tracking.
                                let _ = s.tcp_check(true, &g);
                            }
                            s.touch(true, k.tcp_flags, fc.now);
                            cx.count(AclCounter::SessionCreated, 1);
                        }
                        Err(session::CreateError::Full) => {
                            return Self::drop_pkt(cx, b, AclCounter::SessionLimit)
                        }
                        Err(session::CreateError::NoMemory) => {
                            return Self::drop_pkt(cx, b, AclCounter::SessionAllocFailed)
                        }
                        Err(session::CreateError::Collision) => {
                            // The key was looked up just before: no live session.
                            debug_assert!(false, "session created for a key that has one");
                            return Self::drop_pkt(cx, b, AclCounter::HashCollision);
                        }
                    }
                }
            }
            Action::Deny => return Self::drop_pkt(cx, b, AclCounter::Deny),
        }
        tally.permit += 1;
        pass
    }
}

impl<const V6: bool, const OUT: bool> NodeFn for AclNode<V6, OUT> {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        let arena = cx.arena();
        let me = cx.thread();
        // The dispatcher's frames hold at most FRAME_SIZE packets (the per-frame arrays'
        // size); anything past that is dropped, counted as `unhandled` on error-drop.
        if frame.len() > FRAME_SIZE {
            cx.drop_unhandled(&frame[FRAME_SIZE..]);
        }
        let frame = &frame[..frame.len().min(FRAME_SIZE)];
        let threads = self.shared.clone();
        let threads = threads.threads();
        let n_threads = threads.len();
        let Some(slot) = threads.get(me) else {
            cx.drop_unhandled(frame);
            return;
        };
        if self.hand.len() < n_threads {
            self.hand
                .resize_with(n_threads, || Vec::with_capacity(FRAME_SIZE));
        }
        // The thread's frame scratch: a frame ip4-input handed on whole is resolved there
        // already (`Arena::resolve` keeps it), and resolved with `SCRATCH_AHEAD` as every
        // node asks, so the next node keeps the one this node hands on whole. Open-coded
        // rather than `Cx::resolve_frame` on purpose: this node drops and counts the packets
        // past FRAME_SIZE (above) where `resolve_frame` only cuts them (debug-asserted), and
        // it takes the scratch only after its per-thread state is found.
        let mut sc = cx.take_frame_scratch();
        arena.resolve(frame, SCRATCH_AHEAD, &mut sc.addrs);
        let guard = lock(slot);
        let cur = guard.compiled.clone();
        // The IPv4 nodes, when a stateful interface's session table is larger than the
        // caches (`Table::pipe_min`), keep its misses ahead of the packets; a node with no
        // stateful interface runs the stateless loop. Each loop out of line, branched to
        // before any per-frame state exists.
        let pipe = !V6 && !cur.stateful.is_empty() && {
            let t = &guard.sessions;
            t.len() >= t.pipe_min
        };
        if pipe {
            self.frame_loop::<true, true>(cx, frame, sc, guard, &cur);
        } else if cur.stateful.is_empty() {
            self.frame_loop::<false, false>(cx, frame, sc, guard, &cur);
        } else {
            self.frame_loop::<false, true>(cx, frame, sc, guard, &cur);
        }
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// `acl-plugin-fa-cleaner`: once a second, frees every thread's expired sessions (lookups
/// free the ones they meet; this covers idle flows and idle threads).
struct Cleaner {
    shared: Arc<AclShared>,
}

impl NodeFn for Cleaner {
    fn process(&mut self, cx: &mut Cx, _wake: Wake) -> Suspend {
        let now = cx.now_secs();
        for t in self.shared.threads() {
            let mut t = lock(t);
            let to = t.compiled.timeouts;
            t.sessions.expire(now, &to, CLEAN_BUDGET);
        }
        Suspend::Timeout(1.0)
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// The plugin.
pub struct AclPlugin;

/// This plugin, for the daemon's plugin list.
pub static PLUGIN: AclPlugin = AclPlugin;

impl Plugin for AclPlugin {
    fn name(&self) -> &'static str {
        "acl"
    }
    fn version(&self) -> &'static str {
        env!("CARGO_PKG_VERSION")
    }
    fn description(&self) -> &'static str {
        "Access Control Lists (stateless and permit+reflect sessions, tuple-space search)"
    }
    fn register(&self, r: &mut Registrar) -> Result<(), RegisterError> {
        let shared = r.staged.get_mut::<AclMain>().shared.clone();
        let features = r.feature_table();
        for (name, arc, v6, out, arcs) in NODES {
            let slot = r.feature(FeatureDef {
                arc,
                node: name,
                runs_before: &[],
                runs_after: &[],
                // Sessions track single segments.
                takes_gso: false,
            })?;
            let (sh, f) = (shared.clone(), features.clone());
            r.node(
                NodeRegistration::new(name, NodeKind::Internal, move |_| {
                    let n = AclNodeParts {
                        shared: sh.clone(),
                        features: f.clone(),
                        slot,
                    };
                    match (v6, out) {
                        (false, false) => n.node::<false, false>(),
                        (true, false) => n.node::<true, false>(),
                        (false, true) => n.node::<false, true>(),
                        (true, true) => n.node::<true, true>(),
                    }
                })
                .nexts(arcs)
                .counters(AclCounter::DESCS),
            );
        }
        let sh = shared.clone();
        r.node(NodeRegistration::new(
            CLEANER,
            NodeKind::Process,
            move |_| Box::new(Cleaner { shared: sh.clone() }),
        ));
        r.cli(
            "set acl-plugin acl",
            "set acl-plugin acl [index <idx>] <permit|deny|permit+reflect> src <PREFIX> dst <PREFIX> [proto X] [sport X[-Y]] [dport X[-Y]] [tcpflags <int> mask <int>] [tag FOO] {use comma separated list for multiple rules}",
            cli_set_acl,
        );
        r.cli(
            "set acl-plugin interface",
            "set acl-plugin interface <interface> <input|output> <acl INDEX> [del]",
            cli_interface,
        );
        r.cli(
            "set acl-plugin session timeout",
            "set acl-plugin session timeout {{udp idle}|tcp {idle|transient}} <seconds>",
            cli_timeout,
        );
        r.cli(
            "delete acl-plugin acl",
            "delete acl-plugin acl index <idx>",
            cli_delete,
        );
        r.cli(
            "show acl-plugin acl",
            "show acl-plugin acl [index N]",
            cli_show_acl,
        );
        r.cli(
            "show acl-plugin interface",
            "show acl-plugin interface",
            cli_show_interface,
        );
        r.cli(
            "show acl-plugin sessions",
            "show acl-plugin sessions",
            cli_show_sessions,
        );
        r.cli(
            "clear acl-plugin sessions",
            "clear acl-plugin sessions",
            cli_clear_sessions,
        );
        api::register(&mut r.api);
        Ok(())
    }
    fn init(&self, vm: &mut Vlib) -> Result<(), String> {
        let n = vm.n_threads();
        let _ = vm
            .ext_mut::<AclMain>()
            .shared
            .threads
            .set((0..n).map(|_| Mutex::new(ThreadAcl::default())).collect());
        const FEATURES: [&str; 4] = [NODES[0].0, NODES[1].0, NODES[2].0, NODES[3].0];
        sluice_vnet::runconf::register_section(vm, "acl", running_config, &FEATURES);
        Ok(())
    }
}

/// Recompiles every interface list, hands the result to every thread (`reset`: ACLs whose
/// hit counts restart), enables the nodes each interface needs (the directions with a list;
/// both on a stateful interface) and frees the sessions of interfaces no longer stateful.
fn sync(vm: &mut Vlib, reset: &[u32]) -> VnetResult {
    let m = vm.ext_mut::<AclMain>();
    let compile = |lists: &BTreeMap<u32, Vec<u32>>| -> Vec<Option<Arc<IfList>>> {
        let mut v: Vec<Option<Arc<IfList>>> = Vec::new();
        for (&i, list) in lists {
            let mut rules = Vec::new();
            let mut owner = Vec::new();
            for &a in list {
                if let Some(acl) = m.acls.get(&a) {
                    for (j, r) in acl.rules.iter().enumerate() {
                        rules.push(*r);
                        owner.push((a, j as u32));
                    }
                }
            }
            if v.len() <= i as usize {
                v.resize(i as usize + 1, None);
            }
            v[i as usize] = Some(Arc::new(IfList {
                c: Classifier::new(rules),
                owner,
            }));
        }
        v
    };
    let reflects = |l: &Vec<u32>| {
        l.iter().any(|a| {
            m.acls
                .get(a)
                .is_some_and(|acl| acl.rules.iter().any(|r| r.action == Action::PermitReflect))
        })
    };
    let stateful: BTreeSet<u32> = m
        .input
        .iter()
        .chain(m.output.iter())
        .filter(|(_, l)| reflects(l))
        .map(|(&i, _)| i)
        .collect();
    let mut st = vec![false; stateful.last().map_or(0, |&i| i as usize + 1)];
    for &i in &stateful {
        st[i as usize] = true;
    }
    let c = Arc::new(Compiled {
        input: compile(&m.input),
        output: compile(&m.output),
        stateful: st,
        timeouts: m.timeouts,
    });
    let gone: Vec<u32> = m.stateful.difference(&stateful).copied().collect();
    let max = m.acls.keys().next_back().map_or(0, |&k| k as usize + 1);
    for t in m.shared.threads() {
        let mut t = lock(t);
        t.compiled = c.clone();
        if t.hits.len() < max {
            t.hits.resize(max, Vec::new());
        }
        for (&a, acl) in &m.acls {
            let h = &mut t.hits[a as usize];
            if reset.contains(&a) {
                h.clear();
            }
            h.resize(acl.rules.len(), 0);
        }
        if !gone.is_empty() {
            t.sessions.remove_if(|s| gone.contains(&s.key().sw_if));
        }
    }
    let want: BTreeSet<(u32, bool)> = m
        .input
        .keys()
        .map(|&i| (i, false))
        .chain(m.output.keys().map(|&i| (i, true)))
        .chain(stateful.iter().flat_map(|&i| [(i, false), (i, true)]))
        .collect();
    let on: Vec<(u32, bool)> = want.difference(&m.enabled).copied().collect();
    let off: Vec<(u32, bool)> = m.enabled.difference(&want).copied().collect();
    m.enabled = want;
    m.stateful = stateful;
    for (list, en) in [(off, false), (on, true)] {
        for (sw, out) in list {
            for (node, arc, _, o, _) in NODES {
                if o == out {
                    sluice_vnet::feature::set_feature(vm, sw, arc, node, en)
                        .map_err(|e| VnetError::System(e.to_string()))?;
                }
            }
        }
    }
    Ok(())
}

/// Whether a rule can be installed: prefix lengths within the family, host bits clear,
/// ranges in order, ports and flags only with a protocol, flags only for TCP.
pub fn check_rule(r: &Rule) -> Result<(), String> {
    let max = if r.v6 { 128 } else { 32 };
    for (what, (a, l)) in [("src", r.src), ("dst", r.dst)] {
        if l > max {
            return Err(format!("{what} prefix length `{l}' over {max}"));
        }
        if rules::mask(a, l, r.v6) != a || (!r.v6 && a >> 32 != 0) {
            return Err(format!("{what} prefix has host bits set"));
        }
    }
    for (what, (a, b)) in [("source port", r.sport), ("destination port", r.dport)] {
        if a > b {
            return Err(format!("{what} range `{a}-{b}': end before start"));
        }
    }
    let l4_any = r.sport == (0, 65535) && r.dport == (0, 65535) && r.tcp_flags.1 == 0;
    if r.proto.is_none() && !l4_any {
        return Err("sport/dport/tcpflags need proto".into());
    }
    if r.tcp_flags.1 != 0 && r.proto != Some(6) {
        return Err("tcpflags need proto 6".into());
    }
    Ok(())
}

/// Adds ACL `index` (`None`: the lowest free index) or replaces it (its hit counts restart).
/// Returns its index.
pub fn acl_add_replace(
    vm: &mut Vlib,
    index: Option<u32>,
    rules: Vec<Rule>,
    tag: String,
) -> VnetResult<u32> {
    for (j, r) in rules.iter().enumerate() {
        check_rule(r).map_err(|e| {
            VnetError::Invalid(if rules.len() > 1 {
                format!("rule {j}: {e}")
            } else {
                e
            })
        })?;
    }
    let m = vm.ext_mut::<AclMain>();
    let i = match index {
        Some(i) => i,
        None => (0..).find(|i| !m.acls.contains_key(i)).unwrap_or(0),
    };
    m.acls.insert(i, Acl { rules, tag });
    sync(vm, &[i])?;
    Ok(i)
}

/// Deletes ACL `i` (not while an interface uses it).
pub fn acl_del(vm: &mut Vlib, i: u32) -> VnetResult {
    let m = vm.ext_mut::<AclMain>();
    if !m.acls.contains_key(&i) {
        return Err(VnetError::NotFound(format!("acl `{i}' does not exist")));
    }
    if m.input
        .values()
        .chain(m.output.values())
        .any(|l| l.contains(&i))
    {
        return Err(VnetError::InUse(format!(
            "acl `{i}' is applied to an interface"
        )));
    }
    m.acls.remove(&i);
    sync(vm, &[i])
}

fn check_interface(vm: &mut Vlib, sw: u32) -> VnetResult {
    if vm
        .ext_mut::<Interfaces>()
        .get(sluice_vnet::SwIfIndex(sw))
        .is_none()
    {
        return Err(VnetError::NoSuchInterface(sw));
    }
    Ok(())
}

/// Replaces an interface's input and output lists (an empty list removes it); every ACL
/// must exist and appear at most once per list.
pub fn interface_set_lists(
    vm: &mut Vlib,
    sw: u32,
    input: Vec<u32>,
    output: Vec<u32>,
) -> VnetResult {
    check_interface(vm, sw)?;
    let m = vm.ext_mut::<AclMain>();
    for l in [&input, &output] {
        for (j, i) in l.iter().enumerate() {
            if !m.acls.contains_key(i) {
                return Err(VnetError::NotFound(format!("acl `{i}' does not exist")));
            }
            if l[..j].contains(i) {
                return Err(VnetError::Exists(format!("acl `{i}' is twice in a list")));
            }
        }
    }
    for (lists, l) in [(&mut m.input, input), (&mut m.output, output)] {
        if l.is_empty() {
            lists.remove(&sw);
        } else {
            lists.insert(sw, l);
        }
    }
    sync(vm, &[])
}

/// An interface's (input, output) lists.
pub fn interface_lists(vm: &mut Vlib) -> BTreeMap<u32, (Vec<u32>, Vec<u32>)> {
    let m = vm.ext_mut::<AclMain>();
    let mut r: BTreeMap<u32, (Vec<u32>, Vec<u32>)> = BTreeMap::new();
    for (&i, l) in &m.input {
        r.entry(i).or_default().0 = l.clone();
    }
    for (&i, l) in &m.output {
        r.entry(i).or_default().1 = l.clone();
    }
    r
}

/// Every ACL with each rule's hit count summed over the threads.
pub fn acls_with_hits(vm: &mut Vlib) -> Vec<(u32, Acl, Vec<u64>)> {
    let m = vm.ext_mut::<AclMain>();
    let threads = m.shared.threads();
    m.acls
        .iter()
        .map(|(&i, acl)| {
            let mut hits = vec![0u64; acl.rules.len()];
            for t in threads {
                if let Some(h) = lock(t).hits.get(i as usize) {
                    for (x, y) in hits.iter_mut().zip(h) {
                        *x += y;
                    }
                }
            }
            (i, acl.clone(), hits)
        })
        .collect()
}

/// Appends ACL `i` to (or, `del`, removes it from) an interface's input or output list.
pub fn interface_add_del(vm: &mut Vlib, sw: u32, out: bool, i: u32, del: bool) -> VnetResult {
    check_interface(vm, sw)?;
    let m = vm.ext_mut::<AclMain>();
    if !del && !m.acls.contains_key(&i) {
        return Err(VnetError::NotFound(format!("acl `{i}' does not exist")));
    }
    let lists = if out { &mut m.output } else { &mut m.input };
    let l = lists.entry(sw).or_default();
    if del {
        let Some(p) = l.iter().position(|&x| x == i) else {
            return Err(VnetError::NotFound(format!(
                "acl `{i}' is not applied there"
            )));
        };
        l.remove(p);
    } else if l.contains(&i) {
        return Err(VnetError::Exists(format!(
            "acl `{i}' is already applied there"
        )));
    } else {
        l.push(i);
    }
    if l.is_empty() {
        lists.remove(&sw);
    }
    sync(vm, &[])
}

/// Which session timeout (`set acl-plugin session timeout ...`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TimeoutKind {
    /// `udp idle` (also ICMP and other protocols).
    UdpIdle,
    /// `tcp idle` (established).
    TcpIdle,
    /// `tcp transient`.
    TcpTransient,
}

/// Sets a session timeout (seconds, at least 1).
pub fn set_timeout(vm: &mut Vlib, which: TimeoutKind, secs: u32) -> VnetResult {
    if secs == 0 {
        return Err(VnetError::invalid("timeout `0': at least 1 second"));
    }
    let t = &mut vm.ext_mut::<AclMain>().timeouts;
    match which {
        TimeoutKind::UdpIdle => t.udp_idle = secs,
        TimeoutKind::TcpIdle => t.tcp_idle = secs,
        TimeoutKind::TcpTransient => t.tcp_transient = secs,
    }
    sync(vm, &[])
}

/// Frees every session; returns how many.
pub fn clear_sessions(vm: &mut Vlib) -> usize {
    let m = vm.ext_mut::<AclMain>();
    m.shared
        .threads()
        .iter()
        .map(|t| lock(t).sessions.remove_if(|_| true))
        .sum()
}

/// Every live session with its owning thread (a copy).
pub fn sessions(vm: &mut Vlib) -> Vec<(usize, Session)> {
    let m = vm.ext_mut::<AclMain>();
    let mut v = Vec::new();
    for (i, t) in m.shared.threads().iter().enumerate() {
        v.extend(lock(t).sessions.iter().map(|s| (i, s.clone())));
    }
    v
}

fn prefix(w: &str) -> Result<(bool, u128, u8), CliError> {
    let bad = || CliError::new(format!("expected an IPv4 or IPv6 prefix, got `{w}'"));
    let (a, l) = w.split_once('/').unwrap_or((w, ""));
    if let Ok(x) = a.parse::<Ipv4Addr>() {
        let l = if l.is_empty() {
            32
        } else {
            l.parse::<u8>().map_err(|_| bad())?
        };
        if l > 32 {
            return Err(bad());
        }
        return Ok((false, rules::mask(u32::from(x) as u128, l, false), l));
    }
    if let Ok(x) = a.parse::<Ipv6Addr>() {
        let l = if l.is_empty() {
            128
        } else {
            l.parse::<u8>().map_err(|_| bad())?
        };
        if l > 128 {
            return Err(bad());
        }
        return Ok((true, rules::mask(u128::from(x), l, true), l));
    }
    Err(bad())
}

fn port_range(a: &mut Args, what: &str) -> Result<(u16, u16), CliError> {
    let (x, y) = a.range_u32(what)?;
    if y > 65535 {
        return Err(CliError::new(format!("{what} `{y}' out of range 0..65535")));
    }
    Ok((x as u16, y as u16))
}

fn parse_rule(a: &mut Args, tag: &mut String) -> Result<Rule, CliError> {
    let act = a.word("permit|deny|permit+reflect")?;
    let action = match act.as_str() {
        "permit" => Action::Permit,
        "deny" => Action::Deny,
        "permit+reflect" => Action::PermitReflect,
        _ => {
            return Err(CliError::new(format!(
                "expected permit|deny|permit+reflect, got `{act}'"
            )))
        }
    };
    let mut src = None;
    let mut dst = None;
    let mut r = Rule::any(action, false);
    let mut ports = false;
    while !a.is_empty() {
        let w = a.word("option")?;
        match w.as_str() {
            "src" => src = Some(prefix(&a.word("source prefix")?)?),
            "dst" => dst = Some(prefix(&a.word("destination prefix")?)?),
            "proto" => {
                let p = a.u32("protocol")?;
                if p > 255 {
                    return Err(CliError::new(format!("proto `{p}' out of range 0..255")));
                }
                r.proto = (p != 0).then_some(p as u8);
            }
            "sport" => {
                r.sport = port_range(a, "source port")?;
                ports = true;
            }
            "dport" => {
                r.dport = port_range(a, "destination port")?;
                ports = true;
            }
            "tcpflags" => {
                let v = a.u32("tcp flags value")?;
                if !a.keyword("mask") {
                    return Err(CliError::new("expected tcpflags <value> mask <mask>"));
                }
                let m = a.u32("tcp flags mask")?;
                if v > 255 || m > 255 {
                    return Err(CliError::new("tcpflags value and mask are 0..255"));
                }
                r.tcp_flags = (v as u8, m as u8);
                ports = true;
            }
            "tag" => *tag = a.word("tag")?,
            _ => return Err(CliError::unknown_input(&w)),
        }
    }
    let any4 = (false, 0, 0);
    let (s, d) = match (src, dst) {
        (Some(s), Some(d)) => (s, d),
        (Some(s), None) => (s, (s.0, 0, 0)),
        (None, Some(d)) => ((d.0, 0, 0), d),
        (None, None) => (any4, any4),
    };
    if s.0 != d.0 {
        return Err(CliError::new("src and dst prefixes of different families"));
    }
    if ports && r.proto.is_none() {
        return Err(CliError::new("sport/dport/tcpflags need proto"));
    }
    r.v6 = s.0;
    r.src = (s.1, s.2);
    r.dst = (d.1, d.2);
    Ok(r)
}

fn cli_set_acl(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let index = if a.keyword("index") {
        Some(a.u32("acl index")?)
    } else {
        None
    };
    let mut tag = String::from("cli");
    let mut rules = Vec::new();
    // Rules are separated by commas (`permit ... dport 80, deny ...`).
    let text = a.rest();
    for chunk in text.split(',') {
        let mut ra = Args::new(chunk);
        rules.push(parse_rule(&mut ra, &mut tag)?);
        ra.finish()?;
    }
    let i = acl_add_replace(vm, index, rules, tag)?;
    Ok(format!("ACL index:{i}\n"))
}

fn cli_delete(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    if !a.keyword("index") {
        return Err(CliError::new("expected index <idx>"));
    }
    let i = a.u32("acl index")?;
    a.finish()?;
    acl_del(vm, i)?;
    Ok(String::new())
}

fn cli_interface(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let name = a.word("interface")?;
    let sw = vm
        .ext_mut::<Interfaces>()
        .find(&name)
        .ok_or_else(|| CliError::new(format!("unknown interface `{name}'")))?
        .0;
    let dir = a.word("input|output")?;
    let out = match dir.as_str() {
        "input" => false,
        "output" => true,
        _ => return Err(CliError::new(format!("expected input|output, got `{dir}'"))),
    };
    if !a.keyword("acl") {
        return Err(CliError::new("expected acl <index>"));
    }
    let i = a.u32("acl index")?;
    let del = a.keyword("del");
    a.finish()?;
    interface_add_del(vm, sw, out, i, del)?;
    Ok(String::new())
}

fn cli_timeout(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let p = a.word("udp|tcp")?;
    let k = a.word("idle|transient")?;
    let which = match (p.as_str(), k.as_str()) {
        ("udp", "idle") => TimeoutKind::UdpIdle,
        ("tcp", "idle") => TimeoutKind::TcpIdle,
        ("tcp", "transient") => TimeoutKind::TcpTransient,
        ("udp" | "tcp", _) => {
            return Err(CliError::new(format!("expected idle|transient, got `{k}'")))
        }
        _ => return Err(CliError::new(format!("expected udp|tcp, got `{p}'"))),
    };
    let secs = a.u32("seconds")?;
    a.finish()?;
    set_timeout(vm, which, secs)?;
    Ok(String::new())
}

fn fmt_end(v6: bool, (a, p): (u128, u16)) -> String {
    if v6 {
        format!("[{}]:{p}", Ipv6Addr::from(a))
    } else {
        format!("{}:{p}", Ipv4Addr::from(a as u32))
    }
}

fn cli_show_sessions(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    let now = vm.shared.clock.now_secs();
    let m = vm.ext_mut::<AclMain>();
    let t = m.timeouts;
    let mut out = format!(
        "Session timeouts: udp idle {} tcp idle {} tcp transient {}\n",
        t.udp_idle, t.tcp_idle, t.tcp_transient
    );
    let mut total = 0;
    for (i, th) in m.shared.threads().iter().enumerate() {
        let th = lock(th);
        let st = th.sessions.stats;
        total += th.sessions.len();
        let _ = writeln!(
            out,
            "Thread #{i}: {} sessions (created {} expired {} deleted {}{})",
            th.sessions.len(),
            st.created,
            st.expired,
            st.deleted,
            if st.alloc_failed > 0 {
                format!(
                    "; table allocation failed {} times: out of memory?",
                    st.alloc_failed
                )
            } else {
                String::new()
            }
        );
        for s in th.sessions.iter() {
            let k = s.key();
            let (i_end, r_end) = if s.init_lo {
                (k.lo, k.hi)
            } else {
                (k.hi, k.lo)
            };
            let _ = writeln!(
                out,
                "  sw_if_index {} {} proto {} {} -> {} state {} age {:.1}s idle {:.1}s timeout {}s pkts {}/{}",
                k.sw_if,
                if s.out { "output" } else { "input" },
                k.proto,
                fmt_end(k.v6, i_end),
                fmt_end(k.v6, r_end),
                s.state(),
                now - s.created,
                now - s.last,
                s.timeout(&t),
                s.pkts[0],
                s.pkts[1]
            );
        }
    }
    let _ = writeln!(out, "Sessions total: {total}");
    Ok(out)
}

fn cli_clear_sessions(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    clear_sessions(vm);
    Ok(String::new())
}

fn cli_show_acl(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let only = if a.keyword("index") {
        Some(a.u32("acl index")?)
    } else {
        None
    };
    a.finish()?;
    let lists = interface_lists(vm);
    let mut out = String::new();
    for (i, acl, hits) in acls_with_hits(vm) {
        if only.is_some_and(|o| o != i) {
            continue;
        }
        let _ = writeln!(
            out,
            "acl-index {i} count {} tag {{{}}}",
            acl.rules.len(),
            acl.tag
        );
        for (j, (r, h)) in acl.rules.iter().zip(&hits).enumerate() {
            let fam = if r.v6 { "ipv6" } else { "ipv4" };
            let _ = writeln!(out, "    {j:>6}: {fam} {r} hits {h}");
        }
        let on = |out_dir: bool| -> String {
            lists
                .iter()
                .filter(|(_, (inp, outp))| if out_dir { outp } else { inp }.contains(&i))
                .map(|(k, _)| k.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        };
        let _ = writeln!(out, "  applied inbound on sw_if_index: {}", on(false));
        let _ = writeln!(out, "  applied outbound on sw_if_index: {}", on(true));
    }
    if let Some(o) = only {
        if out.is_empty() {
            return Err(CliError::new(format!("acl `{o}' does not exist")));
        }
    }
    Ok(out)
}

fn if_name(vm: &mut Vlib, sw: u32) -> String {
    vm.ext_mut::<Interfaces>()
        .get(sluice_vnet::SwIfIndex(sw))
        .map_or_else(|| format!("sw_if_index-{sw}"), |i| i.name.clone())
}

/// The ACL plugin's part of `show running-config`: session timeouts, every ACL (its index,
/// rules and tag), then each interface's input and output lists in order.
pub fn running_config(vm: &mut Vlib) -> Vec<String> {
    let m = vm.ext_mut::<AclMain>();
    let mut out = Vec::new();
    let (t, d) = (m.timeouts, Timeouts::default());
    for (w, v, dv) in [
        ("udp idle", t.udp_idle, d.udp_idle),
        ("tcp idle", t.tcp_idle, d.tcp_idle),
        ("tcp transient", t.tcp_transient, d.tcp_transient),
    ] {
        if v != dv {
            out.push(format!("set acl-plugin session timeout {w} {v}"));
        }
    }
    for (i, acl) in &m.acls {
        if acl.rules.is_empty() {
            out.push(format!("# acl {i} has no rules: not recreated"));
            continue;
        }
        let rules: Vec<String> = acl.rules.iter().map(Rule::cli).collect();
        // The CLI splits rules at commas and words at white space.
        let tag = &acl.tag;
        let tag = if tag.contains([',', '"']) || tag == "cli" {
            String::new()
        } else if tag.is_empty() || tag.contains(char::is_whitespace) {
            format!(" tag \"{tag}\"")
        } else {
            format!(" tag {tag}")
        };
        out.push(format!(
            "set acl-plugin acl index {i} {}{tag}",
            rules.join(", ")
        ));
    }
    let mut lists: Vec<(u32, bool, Vec<u32>)> = m
        .input
        .iter()
        .map(|(&sw, l)| (sw, false, l.clone()))
        .chain(m.output.iter().map(|(&sw, l)| (sw, true, l.clone())))
        .collect();
    lists.sort_by_key(|x| (x.0, x.1));
    for (sw, o, l) in lists {
        let n = if_name(vm, sw);
        let dir = if o { "output" } else { "input" };
        for a in l {
            out.push(format!("set acl-plugin interface {n} {dir} acl {a}"));
        }
    }
    out
}

fn cli_show_interface(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    let m = vm.ext_mut::<AclMain>();
    let mut out = String::new();
    let mut ifs: Vec<u32> = m.input.keys().chain(m.output.keys()).copied().collect();
    ifs.sort_unstable();
    ifs.dedup();
    for i in ifs {
        let _ = writeln!(out, "sw_if_index {i}:");
        let compiled = m.shared.threads().first().map(|t| lock(t).compiled.clone());
        let types = |out_dir: bool| {
            compiled
                .as_ref()
                .and_then(|c| {
                    if out_dir { &c.output } else { &c.input }
                        .get(i as usize)
                        .cloned()
                })
                .flatten()
                .map_or(0, |l| l.c.mask_types())
        };
        if let Some(l) = m.input.get(&i) {
            let _ = writeln!(out, "  input acl(s): {l:?} ({} mask types)", types(false));
        }
        if let Some(l) = m.output.get(&i) {
            let _ = writeln!(out, "  output acl(s): {l:?} ({} mask types)", types(true));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 ICMP error (type `ty`) from `from` to `to` quoting `quote`.
    fn icmp4_error(ty: u8, from: [u8; 4], to: [u8; 4], quote: &[u8]) -> Vec<u8> {
        let mut d = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, 1, 0, 0];
        d.extend_from_slice(&from);
        d.extend_from_slice(&to);
        d.extend_from_slice(&[ty, 3, 0, 0, 0, 0, 0, 0]);
        d.extend_from_slice(quote);
        d
    }

    /// The first 28 bytes of a UDP packet 10.0.0.1:4000 -> 8.8.8.8:53.
    fn udp4_quote() -> Vec<u8> {
        let mut q = vec![
            0x45, 0, 0, 40, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 8, 8, 8, 8,
        ];
        q.extend_from_slice(&[0x0f, 0xa0, 0, 53, 0, 20, 0, 0]);
        q
    }

    #[test]
    fn icmp_error_finds_the_quoted_packets_session() {
        let q = udp4_quote();
        let d = icmp4_error(3, [9, 9, 9, 9], [10, 0, 0, 1], &q);
        let k = key_of(&d, false).unwrap();
        assert!(
            sess_key(7, &k).is_none(),
            "an error has no session of its own"
        );
        let got = icmp_error_sess_key(7, &k, &d).unwrap();
        let want = SessKey::of(7, false, 17, (0x0a00_0001, 4000), (0x0808_0808, 53));
        assert_eq!(got, want);
        // Addressed to another host than the quoted packet's source: no session.
        let d2 = icmp4_error(3, [9, 9, 9, 9], [10, 0, 0, 2], &q);
        let k2 = key_of(&d2, false).unwrap();
        assert!(icmp_error_sess_key(7, &k2, &d2).is_none());
        // Not an error (an echo request carrying the same bytes).
        let d3 = icmp4_error(8, [9, 9, 9, 9], [10, 0, 0, 1], &q);
        let k3 = key_of(&d3, false).unwrap();
        assert!(icmp_error_sess_key(7, &k3, &d3).is_none());
        // Every truncation of the quote is refused without a panic.
        for n in 0..q.len() {
            let d = icmp4_error(11, [9, 9, 9, 9], [10, 0, 0, 1], &q[..n]);
            let k = key_of(&d, false).unwrap();
            assert!(
                icmp_error_sess_key(7, &k, &d).is_none(),
                "quote of {n} bytes"
            );
        }
        // A quoted non-first fragment.
        let mut f = q.clone();
        f[7] = 8;
        let d = icmp4_error(3, [9, 9, 9, 9], [10, 0, 0, 1], &f);
        assert!(icmp_error_sess_key(7, &key_of(&d, false).unwrap(), &d).is_none());
    }

    /// An IPv4 (`v6` false) or IPv6 packet of protocol `proto` whose L4 header is `l4`.
    fn ip_with(v6: bool, proto: u8, l4: &[u8]) -> Vec<u8> {
        let mut d = if v6 {
            let mut h = vec![0x60, 0, 0, 0, 0, l4.len() as u8, proto, 64];
            h.extend_from_slice(&[0x20, 1, 0xd, 0xb8].repeat(8));
            h
        } else {
            let mut h = vec![0x45, 0, 0, 20 + l4.len() as u8, 0, 0, 0, 0, 64, proto, 0, 0];
            h.extend_from_slice(&[10, 0, 0, 1, 8, 8, 8, 8]);
            h
        };
        d.extend_from_slice(l4);
        d
    }

    type Fields = (u16, u16, u8, u16);

    /// Each L4 header at its minimum gives the key its L4 fields; one byte short gives a key
    /// without them (it matches only rules that look at no L4 field), IPv4 and IPv6.
    #[test]
    fn key_of_l4_fields_need_the_whole_header_they_come_from() {
        let tcp = [0x0f, 0xa0, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x12];
        let udp = [0x0f, 0xa0, 0, 53];
        let unreach = [3, 1];
        for v6 in [false, true] {
            let (icmp, req) = if v6 { (58, 128) } else { (1, 8) };
            let echo = [req, 0, 0, 0, 0, 77, 0, 1];
            // (protocol, L4 header at its minimum, (sport, dport, TCP flags, echo id))
            let cases: [(u8, &[u8], Fields); 4] = [
                (6, &tcp, (4000, 80, 0x12, 0)),
                (17, &udp, (4000, 53, 0, 0)),
                (icmp, &unreach, (3, 1, 0, 0)),
                (icmp, &echo, (req as u16, 0, 0, 77)),
            ];
            for (proto, l4, (sp, dp, flags, id)) in cases {
                let k = key_of(&ip_with(v6, proto, l4), v6).unwrap();
                assert!(k.l4, "v6 {v6} proto {proto} at its minimum");
                assert_eq!(
                    (k.sport, k.dport, k.tcp_flags, k.icmp_id),
                    (sp, dp, flags, id)
                );
                for n in 0..l4.len() {
                    let k = key_of(&ip_with(v6, proto, &l4[..n]), v6).unwrap();
                    assert!(!k.l4, "v6 {v6} proto {proto}: {n} of {} bytes", l4.len());
                    assert_eq!((k.proto, k.icmp_id), (proto, 0));
                    if proto == 1 || proto == 58 {
                        assert_eq!((k.sport, k.dport), (0, 0), "a half-filled key");
                    }
                }
            }
            // Shorter than the IP header: no key at all (the counted `malformed` drop).
            let d = ip_with(v6, 17, &udp);
            let ip = if v6 { 40 } else { 20 };
            assert!(key_of(&d[..ip - 1], v6).is_none());
            assert!(key_of(&d[..ip], v6).is_some_and(|k| !k.l4));
            if !v6 {
                // An IHL below 5 or another version: no key, never ports read from
                // inside the IP header.
                for b0 in [0x44u8, 0x40, 0x65] {
                    let mut bad = d.clone();
                    bad[0] = b0;
                    assert!(key_of(&bad, false).is_none(), "{b0:#x}");
                }
            }
        }
    }

    /// The IPv4 input ACL node under test, the ACL plugin enabled.
    fn input4_test() -> sluice_vnet::testing::NodeTest {
        let entry = sluice_vnet::testing::enabled(&PLUGIN);
        sluice_vnet::testing::NodeTest::with_plugins(&[entry], "acl-plugin-in-ip4-fa")
    }

    /// UDP flow `f`'s packet from 10.0.0.2 (source port 1000 + `f`) to 10.0.1.2:53, which
    /// [`reflect_pg0`]'s rule admits and tracks.
    fn flow(f: u16) -> Vec<u8> {
        sluice_vnet::testing::pkt(&format!(
            "UDP: 10.0.0.2 -> 10.0.1.2\nUDP: {} -> 53",
            1000 + f
        ))
    }

    /// The largest session bucket count of any thread's table.
    fn buckets(t: &mut sluice_vnet::testing::NodeTest) -> Option<usize> {
        let m = t.h.vm.ext_mut::<AclMain>();
        m.shared
            .threads()
            .iter()
            .map(|th| lock(th).sessions.buckets())
            .max()
    }

    /// [`input4_test`] with pg0's input list one permit+reflect rule (10.0.0.0/24 out) and
    /// every thread's look-ahead threshold `pipe_min` (0: the look-ahead always); pg0's index.
    fn reflect_pg0(pipe_min: usize) -> (sluice_vnet::testing::NodeTest, u32) {
        let mut t = input4_test();
        t.cli(
            "create packet-generator interface pg0
             set acl-plugin acl permit+reflect src 10.0.0.0/24 dst 0.0.0.0/0
             set acl-plugin interface pg0 input acl 0",
        );
        for th in t.h.vm.ext_mut::<AclMain>().shared.threads() {
            let mut th = lock(th);
            th.sessions.pipe_min = pipe_min;
        }
        let sw = t.sw_if("pg0");
        (t, sw)
    }

    /// [`input4_test`] with one worker and `buffers` buffers, pg0 stateful (a permit+reflect
    /// input list): its sessions belong to the worker.
    fn stateful_pg0_with_a_worker(buffers: u32) -> sluice_vnet::testing::NodeTest {
        sluice_vnet::testing::NodeTest::with_workers(
            &[sluice_vnet::testing::enabled(&PLUGIN)],
            1,
            buffers,
            &[
                "create packet-generator interface pg0",
                "set acl-plugin acl permit+reflect src 0.0.0.0/0 dst 0.0.0.0/0",
                "set acl-plugin interface pg0 input acl 0",
            ],
            "acl-plugin-in-ip4-fa",
        )
    }

    /// One frame mixing three interfaces' packets (pg0: UDP 53 denied, pg1: only UDP 53
    /// permitted, pg2: no list): every packet meets its own interface's list, so the
    /// node's per-run interface context switches at each change of interface.
    #[test]
    fn a_frame_of_several_interfaces_meets_each_ones_list() {
        use sluice_vnet::testing::pkt;
        let mut t = input4_test();
        t.cli(
            "create packet-generator interface pg0
             create packet-generator interface pg1
             create packet-generator interface pg2
             set acl-plugin acl deny src 0.0.0.0/0 dst 0.0.0.0/0 proto 17 dport 53, permit src 0.0.0.0/0 dst 0.0.0.0/0
             set acl-plugin acl permit src 0.0.0.0/0 dst 0.0.0.0/0 proto 17 dport 53
             set acl-plugin interface pg0 input acl 0
             set acl-plugin interface pg1 input acl 1",
        );
        let sw = ["pg0", "pg1", "pg2"].map(|n| t.sw_if(n));
        let dns = pkt("UDP: 10.0.0.2 -> 10.0.1.2\nUDP: 1000 -> 53");
        let ntp = pkt("UDP: 10.0.0.2 -> 10.0.1.2\nUDP: 1000 -> 123");
        // (interface, packet, passes)
        let order = [
            (0, &dns, false),
            (1, &dns, true),
            (1, &dns, true),
            (0, &ntp, true),
            (1, &ntp, false),
            (2, &dns, true),
            (0, &dns, false),
            (2, &ntp, true),
            (1, &dns, true),
        ];
        let bufs: Vec<_> = order
            .iter()
            .map(|&(i, p, _)| t.packet(p, |h| h.rx_if = sw[i]))
            .collect();
        t.inject(&bufs);
        let want: Vec<(u32, u16)> = order
            .iter()
            .filter(|o| o.2)
            .map(|&(i, p, _)| (sw[i], u16::from_be_bytes([p[22], p[23]])))
            .collect();
        let got: Vec<(u32, u16)> = t
            .arc("ip4-lookup")
            .iter()
            .map(|c| (c.hdr.rx_if, u16::from_be_bytes([c.data[22], c.data[23]])))
            .collect();
        assert_eq!(got, want);
        let drops = t.drops();
        assert_eq!(drops.len(), 3);
        t.assert_counters(&[("permit", 6), ("deny", 2), ("no_match", 1)]);
        t.assert_no_leaks();
    }

    /// The session-hit shortcut (`hit4`) admits only the initiator's packets in the
    /// creating direction: the reversed tuple on the same side (one-armed) and untracked
    /// flows meet the rules; a packet with IP options takes the general path to the same
    /// session.
    #[test]
    fn a_session_admits_its_own_direction_only() {
        use sluice_vnet::testing::pkt;
        let mut t = input4_test();
        t.cli(
            "create packet-generator interface pg0
             set acl-plugin acl permit+reflect src 10.0.0.0/24 dst 0.0.0.0/0, deny src 0.0.0.0/0 dst 0.0.0.0/0
             set acl-plugin interface pg0 input acl 0",
        );
        let sw = t.sw_if("pg0");
        let out = pkt("UDP: 10.0.0.2 -> 10.0.1.2\nUDP: 1000 -> 53");
        let back = pkt("UDP: 10.0.1.2 -> 10.0.0.2\nUDP: 53 -> 1000");
        let other = pkt("UDP: 10.0.1.9 -> 10.0.0.2\nUDP: 53 -> 1000");
        // The first packet's IP header with a 4-byte option (IHL 6): the same tuple.
        let mut opt = out.clone();
        opt.splice(20..20, [1u8, 1, 1, 0]);
        opt[0] = 0x46;
        let len = u16::from_be_bytes([opt[2], opt[3]]) + 4;
        opt[2..4].copy_from_slice(&len.to_be_bytes());
        // (packet, passes)
        let order = [
            (&out, true),
            (&out, true),
            (&back, false),
            (&other, false),
            (&opt, true),
            (&out, true),
        ];
        let bufs: Vec<_> = order
            .iter()
            .map(|&(p, _)| t.packet(p, |h| h.rx_if = sw))
            .collect();
        t.inject(&bufs);
        assert_eq!(t.arc("ip4-lookup").len(), 4);
        assert_eq!(t.drops().len(), 2);
        t.assert_counters(&[
            ("permit", 1),
            ("session_created", 1),
            ("session_hit", 3),
            ("deny", 2),
        ]);
        t.assert_no_leaks();
    }

    /// Flows whose session keys share a digest (every thread's digests narrowed to 2 bits:
    /// 24 flows on 4 digests, and one tag, so homes overflow) each get a session, and
    /// their later packets, in the creating frame and in the next, are admitted by it, with
    /// the look-ahead and without. Before the flow table a digest's second key was refused
    /// a session: its packets were dropped as `hash_collision`.
    #[test]
    fn flows_sharing_a_digest_each_have_a_session() {
        for pipe_min in [0, usize::MAX] {
            flows_sharing_a_digest(pipe_min);
        }
    }

    fn flows_sharing_a_digest(pipe_min: usize) {
        let (mut t, sw) = reflect_pg0(pipe_min);
        for th in t.h.vm.ext_mut::<AclMain>().shared.threads() {
            lock(th).sessions.digest_mask = 0x3;
        }
        let flows = 24u16;
        // Every flow's first packet, then a second of each; a frame of third packets.
        let order: Vec<u16> = (0..flows).chain(0..flows).collect();
        for round in [&order[..], &order[..flows as usize]] {
            let bufs: Vec<_> = round
                .iter()
                .map(|&f| t.packet(&flow(f), |h| h.rx_if = sw))
                .collect();
            t.inject(&bufs);
        }
        assert_eq!(t.drops().len(), 0, "pipe_min {pipe_min}");
        assert_eq!(t.arc("ip4-lookup").len(), 3 * flows as usize);
        t.assert_counters(&[
            ("permit", flows as u64),
            ("session_created", flows as u64),
            ("session_hit", 2 * flows as u64),
        ]);
        let mut s: Vec<(u16, [u64; 2])> = sessions(&mut t.h.vm)
            .iter()
            .map(|(_, s)| (s.key().lo.1, s.pkts))
            .collect();
        s.sort();
        let want: Vec<(u16, [u64; 2])> = (0..flows).map(|f| (1000 + f, [3, 0])).collect();
        assert_eq!(s, want, "pipe_min {pipe_min}");
        t.assert_no_leaks();
    }

    /// Sessions a frame creates admit the frame's later packets of their flows, at every
    /// distance from the look-ahead (the IPv4 nodes look a packet's slot up
    /// `SESSION_AHEAD` packets before they process it, the first ones before the loop): a
    /// slot looked up before an earlier packet created the session is looked up again,
    /// not taken for a miss (which would meet the rules, try a second session and drop
    /// the packet as `hash_collision`).
    #[test]
    fn sessions_made_in_a_frame_admit_its_later_packets() {
        // With the look-ahead from the first session on, and without.
        for pipe_min in [0, usize::MAX] {
            sessions_made_in_a_frame(pipe_min);
        }
    }

    fn sessions_made_in_a_frame(pipe_min: usize) {
        let (mut t, sw) = reflect_pg0(pipe_min);
        // Flow f's packets at distances 1 to 12 from its first; then 16 flows back to back
        // again (distance 16).
        let mut order = Vec::new();
        let mut next = 0;
        for d in 1..=12u16 {
            let (a, b) = (next, next + 1);
            next += 2;
            order.push(a);
            order.extend(std::iter::repeat_n(b, d as usize - 1));
            order.push(a);
            order.push(b);
        }
        order.extend(0..16);
        let flows = next as u64;
        let bufs: Vec<_> = order
            .iter()
            .map(|&f| t.packet(&flow(f), |h| h.rx_if = sw))
            .collect();
        assert!(bufs.len() <= FRAME_SIZE);
        t.inject(&bufs);
        assert_eq!(t.arc("ip4-lookup").len(), order.len());
        assert_eq!(t.drops().len(), 0);
        t.assert_counters(&[
            ("permit", flows),
            ("session_created", flows),
            ("session_hit", order.len() as u64 - flows),
        ]);
        t.assert_no_leaks();
    }

    /// A look-ahead hit gone stale: the slot the look found for flow A's expired session
    /// is freed by an earlier packet of the frame (A's reply, which then meets the rules
    /// and is denied) and reused by the next one's new session (flow B). A's packets, their
    /// slot looked up before both, must not be taken for B's session (`Table::at4`
    /// compares the slot's key): the first makes A's session again (B's counts its own
    /// packet only); the second's miss is looked up again and finds it (taken for a miss,
    /// it would try a second session and be dropped as `hash_collision`). A at every
    /// distance from the frame's start, within the looks made before the loop and after.
    #[test]
    fn a_stale_look_ahead_hit_is_not_taken() {
        for fill in 0..=SESSION_AHEAD {
            stale_look_ahead_hit(fill);
        }
    }

    fn stale_look_ahead_hit(fill: usize) {
        use sluice_vnet::testing::pkt;
        // With the look-ahead (`pipe_min` 0).
        let (mut t, sw) = reflect_pg0(0);
        let a = pkt("UDP: 10.0.0.2 -> 10.0.1.2\nUDP: 1000 -> 53");
        let a_back = pkt("UDP: 10.0.1.2 -> 10.0.0.2\nUDP: 53 -> 1000");
        let b = pkt("UDP: 10.0.0.2 -> 10.0.1.2\nUDP: 1001 -> 53");
        // Flow C: session hits between B and A.
        let c = pkt("UDP: 10.0.0.2 -> 10.0.1.2\nUDP: 1002 -> 53");
        let bufs = [&a, &c].map(|p| t.packet(p, |h| h.rx_if = sw));
        t.inject(&bufs);
        // A's session aged: its last packet long ago.
        let ka = *sessions(&mut t.h.vm)
            .iter()
            .find(|(_, s)| s.key().lo.1 == 1000)
            .expect("A's session")
            .1
            .key();
        for th in t.h.vm.ext_mut::<AclMain>().shared.threads() {
            let c = Cutoffs::at(0.0, &Timeouts::default());
            if let Some(s) = lock(th).sessions.lookup(&ka, &c) {
                s.last = -1e9;
            }
        }
        t.clear();
        let mut order = vec![(&a_back, false), (&b, true)];
        order.extend(std::iter::repeat_n((&c, true), fill));
        order.extend([(&a, true), (&a, true)]);
        let bufs: Vec<_> = order
            .iter()
            .map(|&(p, _)| t.packet(p, |h| h.rx_if = sw))
            .collect();
        t.inject(&bufs);
        let port = |d: &[u8]| u16::from_be_bytes([d[20], d[21]]);
        let want: Vec<u16> = order.iter().filter(|o| o.1).map(|o| port(o.0)).collect();
        let got: Vec<u16> = t.arc("ip4-lookup").iter().map(|c| port(&c.data)).collect();
        assert_eq!(got, want, "fill {fill}");
        assert_eq!(t.drops().len(), 1, "fill {fill}");
        let mut s: Vec<(u16, [u64; 2])> = sessions(&mut t.h.vm)
            .iter()
            .map(|(_, s)| (s.key().lo.1, s.pkts))
            .collect();
        s.sort();
        // A made again (2 packets), B (1), C (frame 1's and the fillers).
        assert_eq!(
            s,
            [(1000, [2, 0]), (1001, [1, 0]), (1002, [1 + fill as u64, 0])],
            "fill {fill}"
        );
        t.assert_counters(&[
            ("permit", 4),
            ("no_match", 1),
            ("session_created", 4),
            ("session_hit", fill as u64 + 1),
        ]);
        t.assert_no_leaks();
    }

    /// A bucket rebuild mid-frame: the 8,193rd session rebuilds the buckets as the first
    /// packet of a look-ahead frame whose next 200 packets hit older sessions (8 looked up in
    /// the old buckets), then 19 new flows, then the second packets of all 20 new ones.
    #[test]
    fn a_bucket_rebuild_mid_frame_keeps_the_look_ahead_right() {
        let (mut t, sw) = reflect_pg0(0);
        let first = crate::session::FIRST_SESSIONS as u16;
        for c in 0..first / 256 {
            let bufs: Vec<_> = (c * 256..c * 256 + 256)
                .map(|f| t.packet(&flow(f), |h| h.rx_if = sw))
                .collect();
            t.inject(&bufs);
        }
        let before = buckets(&mut t);
        let order: Vec<u16> = std::iter::once(first)
            .chain(0..200)
            .chain(first + 1..first + 20)
            .chain(first..first + 20)
            .collect();
        let bufs: Vec<_> = order
            .iter()
            .map(|&f| t.packet(&flow(f), |h| h.rx_if = sw))
            .collect();
        t.inject(&bufs);
        assert!(buckets(&mut t) > before, "rebuilt: {before:?}");
        assert_eq!(t.drops().len(), 0);
        assert_eq!(t.arc("ip4-lookup").len(), first as usize + order.len());
        t.assert_counters(&[
            ("permit", first as u64 + 20),
            ("session_created", first as u64 + 20),
            ("session_hit", 220),
        ]);
        t.assert_no_leaks();
    }

    /// A table sized mid-frame: from an empty table (one bucket until its first session),
    /// one frame of 100 new flows then a second packet of each. The first pass prefetches
    /// every packet's bucket in the empty table; the frame's first session sizes the table
    /// (a new bucket array), and the second packets' looks, some made before the
    /// sessions they need, miss: each miss is looked up again (the table changed), finds
    /// its session and is a hit.
    #[test]
    fn a_table_sized_mid_frame_admits_the_later_packets() {
        // With the look-ahead (`pipe_min` 0).
        let (mut t, sw) = reflect_pg0(0);
        let before = buckets(&mut t);
        let flows = 100u16;
        let order: Vec<u16> = (0..flows).chain(0..flows).collect();
        let bufs: Vec<_> = order
            .iter()
            .map(|&f| t.packet(&flow(f), |h| h.rx_if = sw))
            .collect();
        assert!(bufs.len() <= FRAME_SIZE);
        t.inject(&bufs);
        assert!(buckets(&mut t) > before, "the table was sized: {before:?}");
        assert_eq!(t.arc("ip4-lookup").len(), order.len());
        assert_eq!(t.drops().len(), 0);
        t.assert_counters(&[
            ("permit", flows as u64),
            ("session_created", flows as u64),
            ("session_hit", flows as u64),
        ]);
        t.assert_no_leaks();
    }

    /// Per-rule hit counts of a frame whose runs of equal rule hits cross interfaces whose
    /// lists number the same rule differently (the node adds each run once, and must close
    /// it when the interface changes), over two frames; a stateful interface (pg2, whose
    /// rule hits join the runs too and whose session hits add none) between stateless
    /// runs: the run before it is added with its own list, none is added twice.
    #[test]
    fn hit_counts_follow_runs_across_interfaces_and_frames() {
        use sluice_vnet::testing::pkt;
        let mut t = input4_test();
        t.cli(
            "create packet-generator interface pg0
             create packet-generator interface pg1
             create packet-generator interface pg2
             set acl-plugin acl deny src 0.0.0.0/0 dst 0.0.0.0/0 proto 17 dport 53, permit src 0.0.0.0/0 dst 0.0.0.0/0
             set acl-plugin acl permit src 0.0.0.0/0 dst 0.0.0.0/0 proto 17 dport 123
             set acl-plugin acl permit+reflect src 0.0.0.0/0 dst 0.0.0.0/0 proto 17 dport 80
             set acl-plugin interface pg0 input acl 0
             set acl-plugin interface pg1 input acl 1
             set acl-plugin interface pg1 input acl 0
             set acl-plugin interface pg2 input acl 2
             set acl-plugin interface pg2 input acl 0",
        );
        let sw = ["pg0", "pg1", "pg2"].map(|n| t.sw_if(n));
        let dns = pkt("UDP: 10.0.0.2 -> 10.0.1.2\nUDP: 1000 -> 53");
        let ntp = pkt("UDP: 10.0.0.2 -> 10.0.1.2\nUDP: 1000 -> 123");
        let web = pkt("UDP: 10.0.0.2 -> 10.0.1.2\nUDP: 1000 -> 80");
        // pg0's list: acl 0 (rules 0, 1); pg1's: acl 1 (rule 0), then acl 0; pg2's
        // (stateful): acl 2 (rule 0), then acl 0.
        let order = [
            (0, &dns), // acl 0 rule 0
            (0, &dns), // acl 0 rule 0
            (1, &ntp), // acl 1 rule 0: the list's rule 0 again, another interface
            (1, &dns), // acl 0 rule 0
            (1, &web), // acl 0 rule 1
            (1, &web), // acl 0 rule 1: pg1's list's rule 2, which pg0's list has not
            (0, &dns), // acl 0 rule 0
            (1, &ntp), // acl 1 rule 0
            (0, &web), // acl 0 rule 1: a stateless run of two...
            (0, &web), // acl 0 rule 1
            (2, &dns), // ...then pg2: acl 0 rule 0 (its list's rule 1), denied
            (2, &web), // acl 2 rule 0: the session made (2nd frame: a session hit)
            (2, &web), // a session hit: no rule hit
            (2, &ntp), // acl 0 rule 1 (its list's rule 2, pg1's rule 2 too)
            (1, &web), // acl 0 rule 1: a stateless run again
            (0, &dns), // acl 0 rule 0
        ];
        for _ in 0..2 {
            let bufs: Vec<_> = order
                .iter()
                .map(|&(i, p)| t.packet(p, |h| h.rx_if = sw[i]))
                .collect();
            t.inject(&bufs);
        }
        let shown = t.cli("show acl-plugin acl");
        let hits: Vec<u64> = shown
            .lines()
            .filter_map(|l| l.rsplit_once(" hits ")?.1.trim().parse().ok())
            .collect();
        // acl 0 rules 0 and 1, acl 1 rule 0, acl 2 rule 0 (the web flow's first packet).
        assert_eq!(hits, [12, 12, 4, 1], "{shown}");
        t.assert_counters(&[
            ("permit", 17),
            ("deny", 12),
            ("session_hit", 3),
            ("session_created", 1),
        ]);
        t.assert_no_leaks();
    }

    /// A stateful interface's packets on thread 0 go to their session's owner, the one
    /// worker; what its full handoff queue refuses goes to `error-drop` as
    /// `congestion_drop` (counted there, seen by a drop trace, freed), and `handoff` counts
    /// only what the queue took.
    #[test]
    fn a_full_handoff_queue_drops_through_error_drop() {
        use sluice_graph::testing::Harness;
        use sluice_graph::HANDOFF_RING;
        use sluice_vnet::testing::pkt;
        let mut t = stateful_pg0_with_a_worker(2 * HANDOFF_RING as u32);
        let pg0 = t.sw_if("pg0");
        let shared = t.vm.ext_mut::<AclMain>().shared.clone();
        let h = &mut t.h;
        let udp = pkt("UDP: 10.0.0.2 -> 10.0.1.2\nUDP: 1000 -> 53");
        let send = |h: &mut Harness, n: usize| {
            let bufs: Vec<BufIdx> = (0..n).map(|_| h.packet(&udp, |m| m.rx_if = pg0)).collect();
            for f in bufs.chunks(FRAME_SIZE) {
                h.inject(f);
            }
        };
        // The worker's ACL state locked: its node takes the first frame from the queue and
        // waits, so the queue from thread 0 fills and then refuses.
        let worker = lock(&shared.threads()[1]);
        send(h, FRAME_SIZE);
        let t0 = std::time::Instant::now();
        while !h.vm.shared.handoff[0][1].is_empty() {
            assert!(t0.elapsed().as_secs() < 20, "the worker did not run");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // The worker has taken the frame; the pause lets it reach the node (and block on
        // the lock) rather than still be draining its queue when the next frames arrive.
        std::thread::sleep(std::time::Duration::from_millis(50));
        send(h, HANDOFF_RING + 100);
        let took = (FRAME_SIZE + HANDOFF_RING) as u64;
        h.assert_counters(&[("handoff", took), ("congestion_drop", 100)]);
        let drops = h.drops();
        assert_eq!(drops.len(), 100, "refused buffers reach error-drop");
        assert!(drops
            .iter()
            .all(|(n, c)| n == "acl-plugin-in-ip4-fa" && *c == "congestion_drop"));
        // The worker admits what it was handed (one flow: one session).
        drop(worker);
        let t0 = std::time::Instant::now();
        while h.counter("session_created") + h.counter("session_hit") < took {
            assert!(t0.elapsed().as_secs() < 20, "the worker did not finish");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        h.assert_counters(&[
            ("permit", 1),
            ("session_hit", took - 1),
            ("session_created", 1),
            ("handoff", took),
            ("congestion_drop", 100),
        ]);
        h.vm.stop_workers();
        assert_eq!(h.arc("ip4-lookup").len() as u64, took);
        h.assert_no_leaks();
    }

    /// A TCP packet with 4 to 13 header bytes has ports but no session key (`key_of` reads
    /// 14 bytes): on thread 0 of a stateful interface it is not handed to a session owner
    /// (`hit4` once did, and the owner let it leave with `handoff_thread` set, which NAT44
    /// and the output ACL take for "on its owner already"), and one that arrives with
    /// `handoff_thread` set leaves without it.
    #[test]
    fn a_short_tcp_header_is_not_handed_off() {
        let mut t = stateful_pg0_with_a_worker(1024);
        let pg0 = t.sw_if("pg0");
        let h = &mut t.h;
        // Ports 1024 -> 80 and a sequence number: 8 of TCP's 20 header bytes.
        let short = ip_with(false, 6, &[4, 0, 0, 80, 0, 0, 0, 1]);
        // `handoff_thread` 0 (from ip4-input), then 1 (as if handed to thread 0).
        let bufs = [0u16, 1].map(|t| {
            h.packet(&short, |m| {
                m.rx_if = pg0;
                m.handoff_thread = t;
            })
        });
        h.inject(&bufs);
        h.vm.stop_workers();
        assert_eq!(h.counter("handoff"), 0);
        let out = h.arc("ip4-lookup");
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|c| c.hdr.handoff_thread == 0));
        h.assert_counters(&[("permit", 2)]);
        h.assert_no_leaks();
    }

    #[test]
    fn a_rules_cli_text_parses_back_to_it() {
        let texts = [
            "permit src 10.0.0.0/8 dst 0.0.0.0/0",
            "deny src 2001:db8::/32 dst ::/0 proto 6 sport 1-1024 dport 443",
            "permit+reflect src 0.0.0.0/0 dst 192.0.2.1/32 proto 6 dport 80 tcpflags 2 mask 18",
            "permit src 0.0.0.0/0 dst 0.0.0.0/0 proto 1 sport 8 dport 0",
            "permit src 0.0.0.0/0 dst 0.0.0.0/0 proto 17",
        ];
        for t in texts {
            let mut tag = String::new();
            let r = parse_rule(&mut Args::new(t), &mut tag).unwrap();
            assert_eq!(r.cli(), t);
            let again = parse_rule(&mut Args::new(&r.cli()), &mut tag).unwrap();
            assert_eq!(again, r);
        }
    }

    #[test]
    fn quoted_icmp_echo_and_ipv6() {
        let mut q = vec![
            0x45, 0, 0, 28, 0, 0, 0, 0, 64, 1, 0, 0, 10, 0, 0, 1, 8, 8, 8, 8,
        ];
        q.extend_from_slice(&[8, 0, 0, 0, 0, 77, 0, 1]);
        let k = quoted_key(&q, false).unwrap();
        assert_eq!((k.sport, k.icmp_id), (8, 77));
        q[20] = 13; // a timestamp request: not an echo, no session
        assert!(quoted_key(&q, false).is_none());
        let mut q6 = vec![0x60, 0, 0, 0, 0, 8, 17, 64];
        q6.extend_from_slice(&[0x20, 1, 0xd, 0xb8].repeat(4));
        q6.extend_from_slice(&[0x20, 1, 0xd, 0xb9].repeat(4));
        q6.extend_from_slice(&[0x0f, 0xa0, 0, 53, 0, 8, 0, 0]);
        let k6 = quoted_key(&q6, true).unwrap();
        assert_eq!((k6.proto, k6.sport, k6.dport), (17, 4000, 53));
        assert!(quoted_key(&q6[..47], true).is_none());
        q6[6] = 0; // a hop-by-hop header first
        assert!(quoted_key(&q6, true).is_none());
    }

    /// The hit path's TCP parse gives `tcp_seg`'s answer: segments with and without SYN,
    /// options, payload, data offsets below 5 and past the header, IP lengths short of the
    /// header and longer than the data, truncated buffers.
    #[test]
    fn tcp_seg4_is_tcp_seg() {
        let mut n = 0;
        for flags in [0x10u8, 0x02, 0x12, 0x11, 0x04] {
            for doff in [0u8, 4, 5, 6, 8, 15] {
                for payload in [0usize, 3, 20] {
                    let opts = (doff as usize * 4).saturating_sub(20);
                    let mut d = vec![0u8; 20 + 20 + opts + payload];
                    d[0] = 0x45;
                    d[24..28].copy_from_slice(&1001u32.to_be_bytes());
                    d[28..32].copy_from_slice(&2001u32.to_be_bytes());
                    d[32] = doff << 4;
                    d[33] = flags;
                    d[34..36].copy_from_slice(&5000u16.to_be_bytes());
                    if opts >= 3 {
                        d[40..43].copy_from_slice(&[3, 3, 7]); // window scale 7
                    }
                    let full = d.len();
                    for ip_len in [full, full + 10, 39, 40 + opts, full.saturating_sub(1)] {
                        d[2..4].copy_from_slice(&(ip_len as u16).to_be_bytes());
                        for cut in [d.len(), 39, 40, 40 + opts.min(4)] {
                            let d = &d[..cut.min(d.len())];
                            assert_eq!(
                                tcp_seg4(d),
                                tcp_seg(d, false),
                                "flags {flags:#x} doff {doff} payload {payload} ip_len {ip_len} cut {cut}"
                            );
                            // Parsed without SYN: `tcp_seg4`'s own path, not `tcp_seg`.
                            n += (flags & 0x02 == 0 && tcp_seg(d, false).is_some()) as u32;
                        }
                    }
                }
            }
        }
        assert!(
            n > 100,
            "{n} segments parsed without SYN: the cases reach the fast path"
        );
    }

    /// Every TCP segment a session admits updates its state, on the session-hit shortcut
    /// (`hit4`, with and without the look-ahead) as on the general path: after a run of
    /// plain ACKs (the same flags each time), a FIN makes the session `closing` and a RST
    /// `reset`. A guard (it passes on main too): against a future saving on the hit path
    /// (flags compared with the last seen, a coarse timestamp) skipping a state change.
    #[test]
    fn fin_and_rst_after_acks_change_the_session_state() {
        for pipe_min in [0, usize::MAX] {
            for (flag, state) in [
                ("FIN ACK", "closing"),
                ("RST ACK", "reset"),
                ("RST", "reset"),
            ] {
                tcp_end_changes_state(pipe_min, flag, state);
            }
        }
    }

    fn tcp_end_changes_state(pipe_min: usize, flag: &str, state: &str) {
        use sluice_vnet::testing::pkt;
        let (mut t, sw) = reflect_pg0(pipe_min);
        let seg = |flags: &str, seq: u32| {
            pkt(&format!(
                "TCP: 10.0.0.2 -> 10.0.1.2\nTCP: 1000 -> 80 {flags} seq {seq} window 1000"
            ))
        };
        let mut order = vec![seg("SYN", 1000)];
        order.extend((0..6).map(|_| seg("ACK", 1001)));
        order.push(seg(flag, 1001));
        order.push(seg("ACK", 1002));
        let bufs: Vec<_> = order
            .iter()
            .map(|p| t.packet(p, |h| h.rx_if = sw))
            .collect();
        t.inject(&bufs);
        assert_eq!(t.arc("ip4-lookup").len(), order.len(), "{flag}");
        let s = sessions(&mut t.h.vm);
        assert_eq!(s.len(), 1);
        let s = &s[0].1;
        assert_eq!(s.state(), state, "{flag}, pipe_min {pipe_min}");
        assert_eq!(s.pkts, [order.len() as u64, 0]);
        t.assert_counters(&[
            ("permit", 1),
            ("session_created", 1),
            ("session_hit", order.len() as u64 - 1),
        ]);
        t.assert_no_leaks();
    }
}
