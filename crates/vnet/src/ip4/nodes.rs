//! The IPv4 path's nodes (`ethernet-input` is [`crate::ethernet`], `arp-input`
//! [`crate::arp`]; `ip4-icmp-error` and `ip4-glean` are the nodes written once for both
//! families, [`crate::icmp_error`] and [`crate::glean`], of which this module holds the
//! IPv4 side). Each node's header: name, metadata used/set, next arcs, counters.
//!
//! Packet bytes are parsed with `sluice_wire` views (never panic); every drop sets a counter.

use super::{CtlSlot, Ip4Shared};
use crate::arp::arp_request;
use crate::ethernet::mtu_limit;
use crate::glean::{GleanCounter, GleanFamily};
use crate::icmp_error::{IcmpErrorCounter, IcmpErrorFamily};
use crate::ip_family::{adj_arc, adj_arcs, fast_frame, rewrite_frame, AdjArcs, FastAdj, NO_ADJ};
use crate::own_source::{is_local, key, SourceFilter};
use sluice_buffer::flags::LOCALLY_ORIGINATED;
use sluice_buffer::{Arena, BufIdx, Buffer, BufferHeader};
use sluice_fib::adj::{Adj, AdjKind};
use sluice_fib::ip4::Ip4EntryPrefetch;
use sluice_graph::{
    CounterDesc, Cx, FrameScratch, Next, NodeFn, NodeKind, NodeRegistration, PacketNode, PerPacket,
    FRAME_SIZE, SCRATCH_AHEAD,
};
use sluice_wire::ethernet::HEADER_LEN as ETH_HEADER_LEN;
use sluice_wire::icmp;
use sluice_wire::ipv4::{field, options_well_formed, proto, Ipv4Packet, MIN_HEADER_LEN};
use sluice_wire::{checksum, Mac};
use std::any::Any;
use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// `arp-input`, now in [`crate::arp`] (kept here for plugins).
pub use crate::arp::ARP_INPUT;
/// `ethernet-input`, now in [`crate::ethernet`] (kept here for plugins).
pub use crate::ethernet::ETHERNET_INPUT;
/// `ip4-input`.
pub const IP4_INPUT: &str = "ip4-input";
/// `ip4-lookup`.
pub const IP4_LOOKUP: &str = "ip4-lookup";
/// `ip4-rewrite`.
pub const IP4_REWRITE: &str = "ip4-rewrite";
/// `ip4-local`.
pub const IP4_LOCAL: &str = "ip4-local";
/// `ip4-icmp-error`.
pub const IP4_ICMP_ERROR: &str = "ip4-icmp-error";
/// `ip4-glean`.
pub const IP4_GLEAN: &str = "ip4-glean";
/// `ip4-neighbor-process`.
pub const NEIGHBOR_PROCESS: &str = "ip4-neighbor-process";

// ---------------------------------------------------------------------------------------
/// `ip4-input`: validates IPv4 headers (RFC 1812 §5.2.2) and trims Ethernet padding.
///
/// - uses: the packet at `current_data` (an IPv4 header).
/// - sets: trims `current_length` to the IPv4 total length.
/// - next: `error-drop` (0) for malformed packets; `ip4-lookup` (1), or the first feature
///   enabled on the rx interface's `ip4-unicast` arc (`ip4-gso-segment` when a feature
///   that does not take GSO aggregates is enabled: [`crate::gso`]), read once per run of
///   packets of one rx interface ([`crate::feature::ArcRun`]).
/// - counters: `too_short` (ip4 length < 20 bytes), `version` (ip4 version != 4), `bad_ihl`
///   (ip4 header length < 20), `bad_length` (ip4 length > l2 length or < header),
///   `bad_checksum` (bad ip4 checksum), `bad_options` (an option of length 0 or 1, or one
///   running past the header: RFC 791 §3.1, checked only for headers with options, off the
///   fast path), `martian_source` (source in 0/8, 127/8, 224/4 or
///   240/4 incl. 255.255.255.255, RFC 1812 §5.3.7; `0.0.0.0` to `255.255.255.255`, a DHCP
///   client's discover, passes), `own_source` (the source is one of the router's addresses
///   in the rx interface's table, RFC 1812 §5.3.7, whether the packet is for the router or
///   in transit: [`crate::own_source`]).
///
/// Cost: the own-source test is one byte load keyed by the source's low 16 bits, folded
/// into the fast path's martian test; the exact test (a source lookup) runs only for a
/// source sharing its low 16 bits with one of the router's addresses. The fast path also
/// prefetches table 0's first-level FIB entry of the destination, for `ip4-lookup` a frame
/// later (docs/benchmarking.md, round 2's twelfth step). The node has its own frame loop
/// (with `ip4-unicast` features too, whose first node is then the fast path's next):
/// the fast path (a 20-byte header, plausible source, correct checksum, total length within
/// the buffer) runs in a loop that keeps its state in registers and writes no next arc, so a
/// frame of such packets goes to `ip4-lookup` whole; any other packet goes through
/// `process_one` (fourteenth step). The node is two parts, borrowed apart in the frame loop:
/// what the fast path reads (the source filter, the FIB hint) and the [`PacketNode`] for
/// the other packets (`Ip4InputSlow`).
pub struct Ip4Input {
    own: Arc<SourceFilter>,
    fib_entries: Ip4EntryPrefetch,
    slow: Ip4InputSlow,
}

/// `ip4-input`'s packets off the fast path.
struct Ip4InputSlow {
    shared: Arc<Ip4Shared>,
    own: Arc<SourceFilter>,
    // The `ip4-unicast` arc's first node per run of packets of one rx interface.
    arc: crate::feature::ArcRun,
    // Per frame: whether any interface has `ip4-unicast` features (else every packet goes
    // to ip4-lookup without a per-interface table read).
    features_any: bool,
    // Table 0's first level (`Ip4Shared::fib` is never replaced), where the entries of the
    // packets' destinations are prefetched for `ip4-lookup`: one load a packet instead of
    // three through `shared`.
    fib_entries: Ip4EntryPrefetch,
}

sluice_graph::arcs! {
    /// `ip4-input`'s next arcs.
    pub enum InputNext {
        /// To `error-drop`.
        Drop => "error-drop",
        /// To `ip4-lookup`.
        Lookup => IP4_LOOKUP,
    }
}

sluice_graph::counters! {
    /// `ip4-input`'s counters.
    pub enum InputCounter {
        /// Ip4 length < 20 bytes.
        TooShort => error("too_short", "ip4 length < 20 bytes"),
        /// Ip4 version != 4.
        Version => error("version", "ip4 version != 4"),
        /// Ip4 header length < 20 bytes.
        BadIhl => error("bad_ihl", "ip4 header length < 20 bytes"),
        /// Ip4 length > l2 length.
        BadLength => error("bad_length", "ip4 length > l2 length"),
        /// Bad ip4 checksum.
        BadChecksum => error("bad_checksum", "bad ip4 checksum"),
        /// Malformed options (RFC 791 §3.1).
        BadOptions => error("bad_options", "ip4 options malformed"),
        /// Source address in 0/8, 127/8, 224/4 or 240/4 (RFC 1812 §5.3.7).
        MartianSource => error("martian_source", "ip4 martian source address"),
        /// The source is one of the router's own addresses (RFC 1812 §5.3.7).
        OwnSource => error("own_source", "ip4 source is one of our addresses"),
    }
}

/// The source address bytes of a 20-byte header (the fallback is never taken).
#[inline(always)]
fn src_of(h: &[u8; MIN_HEADER_LEN]) -> &[u8; 4] {
    h[field::SRC..field::SRC + 4].try_into().unwrap_or(&[0; 4])
}

impl Ip4InputSlow {
    /// Everything but the common 20-byte header from a plausible source (too short,
    /// IHL/version != 0x45, or a source whose first octet is martian): the checks one by
    /// one, in RFC 1812 order, on the packet's bytes `d` (`total_len` with its chain, in
    /// table `fib`). The header's total length, or the counter of the drop. It takes no
    /// buffer view, so the fast path keeps its view in registers.
    #[cold]
    #[inline(never)]
    fn check_slow(&self, d: &[u8], total_len: usize, fib: u32) -> Result<usize, InputCounter> {
        if d.len() < 20 {
            return Err(InputCounter::TooShort);
        }
        if d[field::VER_IHL] >> 4 != 4 {
            return Err(InputCounter::Version);
        }
        let ihl = ((d[field::VER_IHL] & 0xf) as usize) * 4;
        if ihl < MIN_HEADER_LEN {
            return Err(InputCounter::BadIhl);
        }
        let total = u16::from_be_bytes([d[field::TOTAL_LEN], d[field::TOTAL_LEN + 1]]) as usize;
        // The header must be in the first buffer; the packet may continue in a chain.
        if total < ihl || ihl > d.len() || (total > d.len() && total > total_len) {
            return Err(InputCounter::BadLength);
        }
        if checksum::sum(&d[..ihl]) != 0xffff {
            return Err(InputCounter::BadChecksum);
        }
        if !options_well_formed(&d[MIN_HEADER_LEN..ihl]) {
            return Err(InputCounter::BadOptions);
        }
        let src = u32::from_be_bytes([d[12], d[13], d[14], d[15]]);
        let own_key = key(&[d[14], d[15]]);
        // A source the first-octet test flagged is dropped unless it is a DHCP client's
        // `0.0.0.0` to `255.255.255.255` (RFC 1812 §5.3.7 lets 0.0.0.0 through as a source
        // only for local delivery while the host learns its address).
        if self.own.martian4(d[field::SRC])
            && !(d[field::SRC..field::SRC + 4] == [0; 4]
                && d[field::DST..field::DST + 4] == [255; 4])
        {
            return Err(InputCounter::MartianSource);
        }
        if self.own.may_be_own(own_key) && is_local(&self.shared.adj, self.shared.lookup(fib, src))
        {
            return Err(InputCounter::OwnSource);
        }
        Ok(total)
    }
}

impl PacketNode for Ip4InputSlow {
    #[inline(always)]
    fn begin_frame(&mut self, _cx: &mut Cx) {
        self.features_any = self
            .arc
            .begin_frame(&self.shared.features, InputNext::Lookup.next());
    }

    #[inline(always)]
    fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        let len = b.len();
        // Fast path: version 4 with a 20-byte header is one byte compare; the header checks
        // are then the length and a branch-free checksum over two u64 and a u32
        // (`checksum::ip4_header_valid`).
        let total = match b.head::<MIN_HEADER_LEN>() {
            // A martian source, or one that may be the router's own, leaves the fast path
            // (check_slow counts it).
            Some(h) if h[field::VER_IHL] == 0x45 && !self.own.suspect4(src_of(h)) => {
                // The destination's first-level FIB entry, read by `ip4-lookup` when it
                // runs this frame: loaded now, a frame ahead (table 0's; a packet of
                // another table only wastes the prefetch).
                const D: usize = field::DST;
                self.fib_entries
                    .prefetch(u32::from_be_bytes([h[D], h[D + 1], h[D + 2], h[D + 3]]));
                let total =
                    u16::from_be_bytes([h[field::TOTAL_LEN], h[field::TOTAL_LEN + 1]]) as usize;
                let valid = checksum::ip4_header_valid(h);
                // The packet may continue in a buffer chain.
                if total < 20 || (total > len && total > b.total_len()) {
                    b.hdr.error = cx.error(InputCounter::BadLength);
                    return InputNext::Drop.next();
                }
                if !valid {
                    b.hdr.error = cx.error(InputCounter::BadChecksum);
                    return InputNext::Drop.next();
                }
                total
            }
            _ => match self.check_slow(b.data(), b.total_len(), b.hdr.ip.fib_index) {
                Ok(t) => t,
                Err(c) => {
                    b.hdr.error = cx.error(c);
                    return InputNext::Drop.next();
                }
            },
        };
        if total < len && b.chain_rest_len() == 0 {
            b.set_len(total);
        }
        if self.features_any {
            self.arc
                .next(&self.shared.features, b.hdr.rx_if, InputNext::Lookup.next())
        } else {
            InputNext::Lookup.next()
        }
    }
}

/// `ip4-input`'s fast path alone: whether the packet at `b` is a 20-byte IPv4 header
/// (`0x45`) from a plausible source with a correct checksum and a total length that fits
/// the buffer; such a packet goes to `ip4-lookup`, its Ethernet padding trimmed. `false`,
/// having changed nothing: `process_one` decides (a chained packet, anything to drop or
/// look at more closely). Prefetches the destination's first-level FIB entry of table 0,
/// for `ip4-lookup`.
#[inline(always)]
fn fast_one(own: &SourceFilter, fib: Ip4EntryPrefetch, b: &mut Buffer<'_>) -> bool {
    let len = b.hdr.current_length;
    let Some(h) = b.head::<MIN_HEADER_LEN>() else {
        return false;
    };
    if h[field::VER_IHL] != 0x45 || own.suspect4(src_of(h)) {
        return false;
    }
    const D: usize = field::DST;
    fib.prefetch(u32::from_be_bytes([h[D], h[D + 1], h[D + 2], h[D + 3]]));
    // `0x45` in the first byte: the header is not all zeros.
    if !checksum::ip4_header_valid_nonzero(h) {
        return false;
    }
    // The total length swapped, against the buffer's length: the length stays in its
    // register for the padding test below (swapping the length cost a copy of it).
    let total = u16::from_be_bytes([h[field::TOTAL_LEN], h[field::TOTAL_LEN + 1]]);
    if total != len {
        // Ethernet padding behind a short packet: trimmed (not in a chain).
        if total < MIN_HEADER_LEN as u16 || total > len || b.chain_rest_len() != 0 {
            return false;
        }
        b.hdr.current_length = total;
    }
    true
}

/// The frame loop ([`crate::ip_family::fast_frame`], shared with `ip6-input` and the
/// rewrite nodes): the fast path ([`fast_one`]) in a loop of its own that writes no next, a
/// frame whose packets all take it sent to `ip4-lookup` whole; any other packet through
/// `Ip4InputSlow::process_one`. With `ip4-unicast` features on some interface, the fast path
/// takes the packets of the frame's first packet's rx interface and sends them to that
/// interface's first feature (read once a frame), whole when the frame is all theirs; a
/// packet of another interface goes through `process_one`, which reads its interface's.
impl NodeFn for Ip4Input {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        self.slow.begin_frame(cx);
        let features_any = self.slow.features_any;
        // The fast path's state, borrowed apart from `slow` (no reference count touched);
        // one closure for both of `fast_run`'s calls, one copy of it.
        let own = &*self.own;
        let fib = self.fib_entries;
        if features_any {
            if let Some(&b0) = frame.first() {
                // The feature arc's path: the fast path too, for the packets of the frame's
                // first packet's rx interface, whose arc (read once here) is the fast
                // path's one next; a packet of another interface leaves the fast path for
                // `process_one`, which reads its own. A frame from one interface goes to its
                // first feature whole, as a frame without features goes to `ip4-lookup`.
                // SAFETY: this node owns every buffer of `frame` (the dispatcher's contract)
                // and no view of them is alive; the header reference ends with this line.
                let rx0 = unsafe { cx.arena().header(b0) }.rx_if;
                let slow = &mut self.slow;
                let first = slow
                    .arc
                    .next(&slow.shared.features, rx0, InputNext::Lookup.next());
                let fast = move |b: &mut Buffer<'_>| b.hdr.rx_if == rx0 && fast_one(own, fib, b);
                fast_frame(cx, frame, slow, false, first, fast);
                return;
            }
        }
        let fast = move |b: &mut Buffer<'_>| fast_one(own, fib, b);
        fast_frame(
            cx,
            frame,
            &mut self.slow,
            false,
            InputNext::Lookup.next(),
            fast,
        );
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

// ---------------------------------------------------------------------------------------
/// `ip4-lookup`: longest-prefix match on the destination, four packets at a time.
///
/// - uses: the IPv4 header at `current_data`; `ip.fib_index` (the table: four packets all in
///   table 0 are looked up together, others one lookup per packet in their table).
/// - sets: `ip.adj_index`; `ip.flow_hash` for ECMP routes (5-tuple hash picks the
///   load-balance bucket).
/// - next: `error-drop` (0) when no route; `ip4-rewrite` (1); `ip4-local` (2);
///   `ip4-glean` (3) for adjacencies that need ARP first; a Node adjacency's node (its
///   `nh`: an arc added by `set_lookup_node`).
/// - counters: `no_route` (no route to destination), `drop_route` (drop route).
///
/// The frame's buffer addresses come from the thread's `FrameScratch` (resolved once per
/// frame, reused when the previous node resolved the same frame); table 0's groups of four
/// use `Ip4Table::lookup_x4_or` (plain words, `NO_ROUTE` for a miss). A group whose four
/// results are the adjacency of the packet before (one compare) stores the four adjacency
/// indices and arcs without a branch a packet; the others go packet by packet, and the
/// frame's last packets (fewer than four) are looked up one at a time.
pub struct Ip4Lookup {
    shared: Arc<Ip4Shared>,
}

/// Packets `ip4-lookup` looks up together (the width of `lookup_x4`).
const GROUP: usize = 4;
const _: () = assert!(FRAME_SIZE % GROUP == 0);
// The last group prefetches up to 2 * GROUP - 1 entries past the frame's last packet.
const _: () = assert!(2 * GROUP - 1 <= SCRATCH_AHEAD);

sluice_graph::arcs! {
    /// `ip4-lookup`'s next arcs.
    pub enum LookupNext {
        /// To `error-drop`.
        Drop => "error-drop",
        /// To `ip4-rewrite`.
        Rewrite => IP4_REWRITE,
        /// To `ip4-local`.
        Local => IP4_LOCAL,
        /// To `ip4-glean`.
        Glean => IP4_GLEAN,
    }
}

sluice_graph::counters! {
    /// `ip4-lookup`'s counters.
    pub enum LookupCounter {
        /// No route to destination.
        NoRoute => error("no_route", "no route to destination"),
        /// Ip4 drop route.
        DropRoute => error("drop_route", "ip4 drop route"),
    }
}

/// A table miss in `ip4-lookup`'s result vector (LPM values are 24-bit).
const NO_ROUTE: u32 = u32::MAX;
/// `ip4-lookup`'s arcs by adjacency kind.
const ARCS: AdjArcs = adj_arcs!(LookupNext);

/// `ip4-lookup`: a packet whose LPM result `r` is a plain adjacency (below `LB_FLAG`) other
/// than the remembered one: its kind read (the packet's header only, no view of it built).
/// Remembers the adjacency and its arc in `last` (not a drop adjacency: its packets are
/// counted one by one).
#[inline(never)]
fn resolve(
    hdr: &mut BufferHeader,
    shared: &Ip4Shared,
    cx: &Cx,
    r: u32,
    last: &mut (u32, u16),
) -> u16 {
    hdr.ip.adj_index = r;
    adj_arc(&shared.adj, hdr, r, last, ARCS, || {
        cx.error(LookupCounter::DropRoute)
    })
}

/// `ip4-lookup`: a packet without a plain adjacency: no route (dropped, counted) or a
/// load-balance (ECMP bucket by flow hash, then as [`resolve`]).
#[inline(never)]
fn resolve_lb(shared: &Ip4Shared, cx: &Cx, v: Buffer<'_>, r: u32, last: &mut (u32, u16)) -> u16 {
    if r == NO_ROUTE {
        v.hdr.error = cx.error(LookupCounter::NoRoute);
        return LookupNext::Drop as u16;
    }
    let h = flow_hash(v.data());
    v.hdr.ip.flow_hash = h;
    let a = shared.lb.pick(r & (super::LB_FLAG - 1), h);
    v.hdr.ip.adj_index = a;
    adj_arc(&shared.adj, v.hdr, a, last, ARCS, || {
        cx.error(LookupCounter::DropRoute)
    })
}

/// `ip4-lookup`: the end of one packet's lookup (`b`, LPM result `r`): its adjacency
/// stored and its next arc, from `last` when `r` is the remembered adjacency, else from
/// [`resolve`] (another adjacency) or [`resolve_lb`] (no route, a load-balance).
#[inline(always)]
fn finish(
    shared: &Ip4Shared,
    cx: &Cx,
    arena: Arena<'_>,
    b: BufIdx,
    r: u32,
    last: &mut (u32, u16),
) -> u16 {
    if r == last.0 {
        // SAFETY: the caller owns `b` (its frame, in `arena`) and holds no view of it; only
        // the header is written.
        unsafe { arena.header_mut_unchecked(b) }.ip.adj_index = r;
        last.1
    } else if r < super::LB_FLAG {
        // SAFETY: as above.
        resolve(
            unsafe { arena.header_mut_unchecked(b) },
            shared,
            cx,
            r,
            last,
        )
    } else {
        // SAFETY: as above; the view ends with the call.
        resolve_lb(shared, cx, unsafe { arena.buffer_unchecked(b) }, r, last)
    }
}

/// The destination of the IPv4 header at `v` (ip4-input guaranteed a full header; a short
/// one looks up 0.0.0.0).
#[inline(always)]
fn dst_of(v: &Buffer<'_>) -> u32 {
    const D: usize = field::DST;
    v.head::<MIN_HEADER_LEN>().map_or(0, |h| {
        u32::from_be_bytes([h[D], h[D + 1], h[D + 2], h[D + 3]])
    })
}

impl NodeFn for Ip4Lookup {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        let shared = &self.shared;
        // A group prefetches the next group: up to 2 * GROUP - 1 entries past the frame's
        // last packet, all filled with its addresses (`SCRATCH_AHEAD`, as every node asks,
        // so that the addresses the node before resolved for this frame are kept).
        let (arena, frame, mut s) = cx.resolve_frame(frame);
        let n = frame.len();
        let FrameScratch { addrs, nexts } = &mut *s;
        let addrs = &*addrs;
        // Four packets at a time: the next four buffers prefetched, the four destinations
        // read and looked up together (their table loads are independent and overlap in
        // the memory system). A group whose four results are the adjacency of the packet
        // before (`last`: its index and arc) stores them and the arcs without a branch a
        // packet; any other group goes packet by packet (`finish`).
        let mut last = (NO_ADJ, 0u16);
        let full = n - n % GROUP;
        for (g, (bs, nx)) in frame[..full]
            .chunks_exact(GROUP)
            .zip(nexts.chunks_exact_mut(GROUP))
            .enumerate()
        {
            let i = g * GROUP;
            // Past the frame's end the addresses repeat the last packet's.
            for k in i + GROUP..i + 2 * GROUP {
                addrs.prefetch(k, true);
            }
            let mut dst = [0u32; GROUP];
            let mut any_vrf = 0;
            for (j, (d, &b)) in dst.iter_mut().zip(bs).enumerate() {
                // SAFETY: this node owns the frame, resolved into `addrs` above; one view
                // at a time.
                let v = unsafe { arena.buffer_at(addrs, i + j, b) };
                *d = dst_of(&v);
                any_vrf |= v.hdr.ip.fib_index;
            }
            let res = if any_vrf == 0 {
                shared.fib.lookup_x4_or(dst, NO_ROUTE)
            } else {
                std::array::from_fn(|j| {
                    // SAFETY: this node owns the frame; read-only header access.
                    let f = unsafe { arena.header(bs[j]) }.ip.fib_index;
                    shared.lookup(f, dst[j]).unwrap_or(NO_ROUTE)
                })
            };
            // The four against the remembered adjacency, no early exit (`res == [last.0; 4]`
            // cost 2 instr/pkt more).
            if res.iter().fold(0, |d, &r| d | (r ^ last.0)) == 0 {
                for &b in bs {
                    // SAFETY: this node owns the frame, in the arena; only the header is
                    // written.
                    unsafe { arena.header_mut_unchecked(b) }.ip.adj_index = last.0;
                }
                nx.fill(last.1);
            } else {
                for ((&b, nx), &r) in bs.iter().zip(nx.iter_mut()).zip(&res) {
                    *nx = finish(shared, cx, arena, b, r, &mut last);
                }
            }
        }
        // The frame's last packets, fewer than a group: one lookup each.
        for (k, (&b, nx)) in frame[full..].iter().zip(&mut nexts[full..n]).enumerate() {
            let r = {
                // SAFETY: as above; the view ends with this block.
                let v = unsafe { arena.buffer_at(addrs, full + k, b) };
                shared
                    .lookup(v.hdr.ip.fib_index, dst_of(&v))
                    .unwrap_or(NO_ROUTE)
            };
            *nx = finish(shared, cx, arena, b, r, &mut last);
        }
        cx.enqueue_to_next(frame, &s.nexts[..n]);
        cx.put_frame_scratch(s);
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// 5-tuple flow hash of an IPv4 packet (addresses, protocol, and ports for the first fragment
/// of UDP/TCP), for ECMP bucket choice: one flow always takes one path. A packet shorter
/// than a header (never from ip4-input; `ip4-lookup` looks it up as 0.0.0.0) hashes to 0.
#[inline(always)]
pub(crate) fn flow_hash(ip: &[u8]) -> u32 {
    const FF: usize = field::FLAGS_FRAG;
    const P: usize = field::PROTOCOL;
    let Some(hdr) = ip.first_chunk::<MIN_HEADER_LEN>() else {
        return 0;
    };
    let w = |b: &[u8], i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let ihl = ((hdr[field::VER_IHL] & 0xf) as usize) * 4;
    let first_frag = u16::from_be_bytes([hdr[FF], hdr[FF + 1]]) & 0x1fff == 0;
    let ports = match ip.get(ihl..ihl + 4) {
        Some(p) if (hdr[P] == proto::TCP || hdr[P] == proto::UDP) && first_frag => w(p, 0),
        _ => 0,
    };
    let mut h = (w(hdr, field::SRC) as u64) << 32 | w(hdr, field::DST) as u64;
    h ^= ((ports as u64) << 8) | hdr[P] as u64;
    h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= h >> 29;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (h >> 32) as u32
}

// ---------------------------------------------------------------------------------------
/// `ip4-rewrite`: TTL decrement with incremental checksum (RFC 1624), MTU check, L2 rewrite.
///
/// - uses: `ip.adj_index` (a Rewrite adjacency); the `LOCALLY_ORIGINATED` flag (TTL kept).
/// - sets: `tx_if`; writes the adjacency's Ethernet header into the headroom (the fast path
///   as one 16-byte store: the two headroom bytes in front of it overwritten (zeros)); on
///   errors `feature_meta[0..2]` for `ip4-icmp-error`.
/// - next: `error-drop` (0); `interface-output` (1), or the first feature enabled on the tx
///   interface's `ip4-output` arc; `ip4-icmp-error` (2) for TTL expiry and DF packets over
///   the MTU.
/// - counters: `ttl_expired` (ip4 ttl <= 1, info: an ICMP error follows), `mtu_exceeded`
///   (packet larger than MTU and fragmentation not supported), `no_headroom`, `truncated`
///   (less than a 20-byte header: never from ip4-input, counted rather than trusted).
///
/// The node is split as `ip4-input` is: [`Ip4Rewrite`] holds what the fast path reads (the
/// adjacency table) and the [`PacketNode`] for the other packets (`Ip4RewriteSlow`).
pub struct Ip4Rewrite {
    adj: Arc<sluice_fib::adj::AdjTable>,
    slow: Ip4RewriteSlow,
}

/// `ip4-rewrite`'s packets off the fast path (and all of them with `ip4-output` features).
struct Ip4RewriteSlow {
    shared: Arc<Ip4Shared>,
    slot: usize,
    // Per-frame cache: consecutive packets usually share an adjacency. Reset per frame to
    // what index `u32::MAX` (no adjacency: `Adj::DROP`) loads, so it is never stale.
    cached: RewriteCache,
    // Per frame: whether any interface has `ip4-output` features.
    out_any: bool,
}

#[derive(Copy, Clone)]
/// What `ip4-rewrite`'s per-packet path needs of the last adjacency, in the form it uses.
struct RewriteCache {
    /// The fast path's form (index, interface, wide Ethernet header, lengths).
    fast: FastAdj<REWRITE_WINDOW>,
    /// The MTU, `usize::MAX` for none (0).
    mtu: usize,
    /// `interface-output`, or the first `ip4-output` feature of `tx_if`.
    next: Next,
}

/// `ip4-rewrite`'s fast-path window: the Ethernet header pushed and the IPv4 header behind.
const REWRITE_WINDOW: usize = ETH_HEADER_LEN + MIN_HEADER_LEN;

impl Ip4RewriteSlow {
    fn load(&self, index: u32) -> RewriteCache {
        let a: Adj = self.shared.adj.get(index);
        RewriteCache {
            fast: FastAdj::new(index, &a),
            mtu: mtu_limit(a.mtu),
            next: if self.out_any {
                self.shared
                    .features
                    .next(self.slot, a.tx_if, RewriteNext::Output.next())
            } else {
                RewriteNext::Output.next()
            },
        }
    }
}

/// The TTL test and decrement with the incremental checksum update (RFC 1624) of an IPv4
/// header `h` (at least 20 bytes): `false`, nothing changed, when the TTL is 1 or 0. TTL,
/// protocol and checksum as one little-endian word, loaded once (the TTL tested in its low
/// byte): a few ALU operations, no byte swap.
#[inline(always)]
fn ttl_decrement(h: &mut [u8]) -> bool {
    let ttl = ttl_word(h);
    let w = u32::from_le_bytes(*ttl);
    if w as u8 > 1 {
        *ttl = checksum::ip4_ttl_decremented(w).to_le_bytes();
        return true;
    }
    false
}

sluice_graph::arcs! {
    /// `ip4-rewrite`'s next arcs.
    pub enum RewriteNext {
        /// To `error-drop`.
        Drop => "error-drop",
        /// To `interface-output`.
        Output => crate::output::NAME,
        /// To `ip4-icmp-error`.
        IcmpError => IP4_ICMP_ERROR,
    }
}

sluice_graph::counters! {
    /// `ip4-rewrite`'s counters.
    pub enum RewriteCounter {
        /// Ip4 ttl <= 1.
        TtlExpired => info("ttl_expired", "ip4 ttl <= 1"),
        /// Ip4 MTU exceeded and DF not set (no fragmentation).
        MtuExceeded => error("mtu_exceeded", "ip4 MTU exceeded and DF not set (no fragmentation)"),
        /// No headroom for the L2 rewrite.
        NoHeadroom => error("no_headroom", "no headroom for the L2 rewrite"),
        /// Shorter than an ip4 header.
        Truncated => error("truncated", "shorter than an ip4 header"),
    }
}

impl PacketNode for Ip4RewriteSlow {
    #[inline(always)]
    fn begin_frame(&mut self, _cx: &mut Cx) {
        self.out_any = self.shared.features.any(self.slot);
        self.cached = self.load(u32::MAX);
    }

    #[inline(always)]
    fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        let ai = b.hdr.ip.adj_index;
        if self.cached.fast.index != ai {
            self.cached = self.load(ai);
        }
        let c = &self.cached;
        if c.fast.rewrite::<{ REWRITE_WINDOW + 2 }>(b, ttl_decrement) {
            return c.next;
        }
        let len = b.total_len();
        let local = b.hdr.flags & LOCALLY_ORIGINATED != 0;
        Ip4Rewrite::rewrite_checked(cx, b.reborrow(), *c, len, local)
    }
}

/// The frame loop ([`crate::ip_family::fast_frame`] through
/// [`crate::ip_family::rewrite_frame`], shared with the input nodes and `ip6-rewrite`):
/// the fast path ([`FastAdj::rewrite_any`], its adjacency a local of the loop) writes no
/// next, a frame whose packets all take it sent to `interface-output` whole; any other
/// packet through `Ip4RewriteSlow::process_one` (every packet with `ip4-output`
/// features on any interface).
impl NodeFn for Ip4Rewrite {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        self.slow.begin_frame(cx);
        let out_any = self.slow.out_any;
        rewrite_frame::<_, REWRITE_WINDOW, { REWRITE_WINDOW + 2 }>(
            cx,
            frame,
            (&mut self.slow, out_any),
            &self.adj,
            RewriteNext::Output.next(),
            ttl_decrement,
        );
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// The IPv4 header's TTL, protocol and checksum bytes (8..12) as one array: read as one
/// little-endian word (one load; bytes indexed one by one are loaded one by one).
#[inline(always)]
fn ttl_word(h: &mut [u8]) -> &mut [u8; 4] {
    h[field::TTL..]
        .first_chunk_mut::<4>()
        .expect("a 20-byte header holds bytes 8..12")
}

impl Ip4Rewrite {
    /// `ip4-rewrite` of a packet off the fast path (expired TTL, over the MTU, no headroom,
    /// truncated; also every locally built packet, buffer chain and GSO aggregate): the
    /// checks one by one. `#[cold]` stays although host-stack and GSO traffic come here:
    /// without it the plain path costs 2 more instructions per packet (96.0 → 98.0,
    /// callgrind `sluice-bench ip4`). It takes the view by value (`Buffer::reborrow`):
    /// with `&mut Buffer` the fast path keeps its view in memory.
    #[cold]
    #[inline(never)]
    fn rewrite_checked(
        cx: &mut Cx,
        mut b: Buffer<'_>,
        c: RewriteCache,
        len: usize,
        local: bool,
    ) -> Next {
        let RewriteCache { fast, mtu, next } = c;
        let FastAdj { eth, tx_if, .. } = fast;
        // A GSO aggregate is checked by its segments' size.
        let mtu_len = crate::offload::mtu_len(b.hdr, len);
        let Some(h) = b.head_mut::<MIN_HEADER_LEN>() else {
            b.hdr.error = cx.error(RewriteCounter::Truncated);
            return RewriteNext::Drop.next();
        };
        if h[field::TTL] <= 1 && !local {
            crate::icmp_error::request(b.hdr, icmp::kind::TIME_EXCEEDED, 0, 0);
            cx.count(RewriteCounter::TtlExpired, 1);
            return RewriteNext::IcmpError.next();
        }
        if mtu_len > mtu {
            if h[field::FLAGS_FRAG] & field::DF_BIT != 0 {
                let code = icmp::unreach::FRAG_NEEDED;
                crate::icmp_error::request(b.hdr, icmp::kind::DEST_UNREACH, code, mtu as u32);
                return RewriteNext::IcmpError.next();
            }
            b.hdr.error = cx.error(RewriteCounter::MtuExceeded);
            return RewriteNext::Drop.next();
        }
        if !local {
            checksum::ip4_ttl_decrement(ttl_word(h));
        }
        match b.prepend::<ETH_HEADER_LEN>() {
            Some(h) => *h = *eth.last_chunk().expect("16 > 14"),
            None => {
                b.hdr.error = cx.error(RewriteCounter::NoHeadroom);
                return RewriteNext::Drop.next();
            }
        }
        b.hdr.tx_if = tx_if;
        next
    }
}

// ---------------------------------------------------------------------------------------
/// `ip4-local`: packets for the router. Answers ICMP echo requests in place.
///
/// - uses: the IPv4 header; `rx_if`.
/// - sets: rewrites echo requests into replies; the ICMP error asked for (`feature_meta[0..2]`, [`crate::icmp_error::request`]) for port unreachable.
/// - next: `error-drop` (0); `ip4-lookup` (1) for replies; `ip4-icmp-error` (2) for UDP to a
///   closed port; `punt` (3) for other protocols, for UDP to a group on no port registered
///   to serve groups, and for UDP when the rx interface has a host stack behind `punt`
///   (`IfAttr::punt_host`, linux-cp); the serving node's arc (added at runtime) for a UDP
///   port or protocol registered by a plugin (`crate::ip_local`, e.g. VXLAN's 4789; to a
///   group only one registered with `ip_local::register_groups`), before any of these.
/// - counters: `echo_replies` (info), `bad_icmp` (truncated or bad ICMP checksum),
///   `punted` (info: other protocols for the router), `ping_replies` (info: echo replies to
///   the CLI `ping`, consumed), `truncated` (shorter than its header: never from ip4-input),
///   `own_source` (received, not locally originated, with one of the router's own addresses
///   in the table as the source, RFC 1812 §5.3.7: checked here, for packets to the router,
///   not on the forwarding path).
pub struct Ip4Local {
    shared: Arc<Ip4Shared>,
    /// Ports and protocols served by other nodes (`crate::ip_local`).
    pub(crate) dispatch: crate::ip_local::LocalDispatch,
}

sluice_graph::arcs! {
    /// `ip4-local`'s next arcs.
    pub enum LocalNext {
        /// To `error-drop`.
        Drop => "error-drop",
        /// To `ip4-lookup`.
        Lookup => IP4_LOOKUP,
        /// To `ip4-icmp-error`.
        IcmpError => IP4_ICMP_ERROR,
        /// To `punt`.
        Punt => "punt",
    }
}

sluice_graph::counters! {
    /// `ip4-local`'s counters.
    pub enum LocalCounter {
        /// ICMP echo replies sent.
        EchoReplies => info("echo_replies", "ICMP echo replies sent"),
        /// Truncated or bad-checksum ICMP.
        BadIcmp => error("bad_icmp", "truncated or bad-checksum ICMP"),
        /// Packets for the router punted.
        Punted => info("punted", "packets for the router punted"),
        /// Echo replies to CLI ping.
        PingReplies => info("ping_replies", "echo replies to CLI ping"),
        /// Shorter than its ip4 header.
        Truncated => error("truncated", "shorter than its ip4 header"),
        /// Received with one of the router's own addresses as the source.
        OwnSource => error("own_source", "ip4 source is one of our addresses"),
    }
}

impl PacketNode for Ip4Local {
    fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        let received = b.hdr.flags & LOCALLY_ORIGINATED == 0;
        let d = b.data_mut();
        let ihl = d.first().map_or(0, |v| ((v & 0xf) as usize) * 4);
        if ihl < MIN_HEADER_LEN || d.len() < ihl {
            // Never from ip4-input; a feature may have shortened the packet.
            b.hdr.error = cx.error(LocalCounter::Truncated);
            return LocalNext::Drop.next();
        }
        if received {
            let src = u32::from_be_bytes([d[12], d[13], d[14], d[15]]);
            if is_local(
                &self.shared.adj,
                self.shared.lookup(b.hdr.ip.fib_index, src),
            ) {
                b.hdr.error = cx.error(LocalCounter::OwnSource);
                return LocalNext::Drop.next();
            }
        }
        let d = b.data_mut();
        match d[field::PROTOCOL] {
            proto::ICMP => {
                if d.len() < ihl + 8 || checksum::sum(&d[ihl..]) != 0xffff {
                    b.hdr.error = cx.error(LocalCounter::BadIcmp);
                    return LocalNext::Drop.next();
                }
                let kind = d[ihl];
                if kind == icmp::kind::ECHO_REPLY {
                    // A reply to the CLI ping: record it and consume the packet.
                    let id = u16::from_be_bytes([d[ihl + 4], d[ihl + 5]]);
                    let seq = u16::from_be_bytes([d[ihl + 6], d[ihl + 7]]);
                    let a = field::SRC;
                    let from = Ipv4Addr::new(d[a], d[a + 1], d[a + 2], d[a + 3]);
                    let ttl = d[field::TTL];
                    if self.shared.ping.record(id, seq, from, ttl, cx.now_tsc()) {
                        b.hdr.error = cx.error(LocalCounter::PingReplies);
                        return LocalNext::Drop.next();
                    }
                }
                // An echo request to a multicast group (224.0.0.0/24 is received when a
                // host stack is paired, linux-cp) is the host stack's to answer, never
                // answered from the group address.
                if kind != icmp::kind::ECHO_REQUEST || d[field::DST] >> 4 == 0xe {
                    cx.count(LocalCounter::Punted, 1);
                    return LocalNext::Punt.next();
                }
                let Ok(mut m) = icmp::IcmpPacket::new_checked(&mut d[ihl..]) else {
                    b.hdr.error = cx.error(LocalCounter::BadIcmp);
                    return LocalNext::Drop.next();
                };
                m.set_kind_code(icmp::kind::ECHO_REPLY, 0);
                m.fill_checksum();
                let mut ip = match Ipv4Packet::new_checked(&mut d[..]) {
                    Ok(p) => p,
                    Err(_) => {
                        b.hdr.error = cx.error(LocalCounter::BadIcmp);
                        return LocalNext::Drop.next();
                    }
                };
                let (s, t) = (ip.src(), ip.dst());
                ip.set_src(t);
                ip.set_dst(s);
                ip.set_ttl(64);
                ip.fill_checksum();
                b.hdr.flags |= LOCALLY_ORIGINATED;
                cx.count(LocalCounter::EchoReplies, 1);
                LocalNext::Lookup.next()
            }
            proto::UDP => {
                // 224.0.0.0/4 (ip4-input let it in: a group the router is in).
                let group = d[field::DST] >> 4 == 0xe;
                if !self.dispatch.no_udp() {
                    let port = d
                        .get(ihl + 2..ihl + 4)
                        .map(|p| u16::from_be_bytes([p[0], p[1]]));
                    // To a group only a port that serves groups (VXLAN) takes it.
                    let n = match port {
                        Some(p) if group => self.dispatch.udp_group(p),
                        Some(p) => self.dispatch.udp(p),
                        None => None,
                    };
                    if let Some(n) = n {
                        return n;
                    }
                }
                if group
                    || self
                        .shared
                        .if_attr(b.hdr.rx_if)
                        .punt_host
                        .load(Ordering::Relaxed)
                {
                    // A host stack behind `punt` serves (or refuses) the port; to a
                    // group no port unreachable is sent (RFC 1122 §3.2.2).
                    cx.count(LocalCounter::Punted, 1);
                    return LocalNext::Punt.next();
                }
                let code = icmp::unreach::PORT;
                crate::icmp_error::request(b.hdr, icmp::kind::DEST_UNREACH, code, 0);
                LocalNext::IcmpError.next()
            }
            p => {
                if let Some(n) = self.dispatch.protocol(p) {
                    return n;
                }
                cx.count(LocalCounter::Punted, 1);
                LocalNext::Punt.next()
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
/// `ip4-icmp-error`: the family-neutral node ([`crate::icmp_error`]) over IPv4: errors of at
/// most 576 bytes (RFC 1812 §4.3.2.3) from the rx interface's first address; none about an
/// ICMP error, a non-first fragment, or a source in 0/8... that is not one host (0, class
/// D/E, the limited broadcast: RFC 1812 §4.3.2.7).
impl IcmpErrorFamily for Ip4Shared {
    type Addr = u32;
    const NODE: &'static str = IP4_ICMP_ERROR;
    const LOOKUP: &'static str = IP4_LOOKUP;
    const COUNTERS: &'static [CounterDesc] = IcmpErrorCounter::DESCS;
    const MIN_LEN: usize = MIN_HEADER_LEN;
    const HEADERS: usize = MIN_HEADER_LEN + 8;
    const MAX_LEN: usize = 576;

    fn error_to(d: &[u8], _kind: u8) -> Option<u32> {
        let ihl = ((d[field::VER_IHL] & 0xf) as usize) * 4;
        let a = field::SRC;
        let src = u32::from_be_bytes([d[a], d[a + 1], d[a + 2], d[a + 3]]);
        let frag_off =
            u16::from_be_bytes([d[field::FLAGS_FRAG], d[field::FLAGS_FRAG + 1]]) & 0x1fff;
        let about_error = d[field::PROTOCOL] == proto::ICMP
            && d.get(ihl)
                .is_some_and(|&t| t != icmp::kind::ECHO_REQUEST && t != icmp::kind::ECHO_REPLY);
        let one_host = src != 0 && src >> 28 < 0xe;
        (!about_error && frag_off == 0 && one_host).then_some(src)
    }

    fn error_from(&self, rx_if: u32, _to: u32) -> Option<u32> {
        Some(self.if_addr(rx_if).first()).filter(|&a| a != 0)
    }

    fn write(d: &mut [u8], from: u32, to: u32, (kind, code, mtu): (u8, u8, u32)) {
        let total = d.len() as u16;
        let (h, m) = d.split_at_mut(MIN_HEADER_LEN);
        h.fill(0);
        h[field::VER_IHL] = 0x45;
        h[field::TOTAL_LEN..field::TOTAL_LEN + 2].copy_from_slice(&total.to_be_bytes());
        h[field::TTL] = 64;
        h[field::PROTOCOL] = proto::ICMP;
        h[field::SRC..field::SRC + 4].copy_from_slice(&from.to_be_bytes());
        h[field::DST..field::DST + 4].copy_from_slice(&to.to_be_bytes());
        let c = checksum::internet_checksum(h);
        h[field::CHECKSUM..field::CHECKSUM + 2].copy_from_slice(&c.to_be_bytes());
        m[..8].fill(0);
        m[0] = kind;
        m[1] = code;
        if kind == icmp::kind::DEST_UNREACH && code == icmp::unreach::FRAG_NEEDED {
            m[6..8].copy_from_slice(&(mtu as u16).to_be_bytes());
        }
        let c = checksum::internet_checksum(m);
        m[2..4].copy_from_slice(&c.to_be_bytes());
    }
}

// ---------------------------------------------------------------------------------------
/// `ip4-glean`: the family-neutral node ([`crate::glean`]) over IPv4: a broadcast ARP
/// request for the packet's destination (or the incomplete adjacency's next hop) from the
/// interface's first address, never for the directed broadcast of its first subnet.
impl GleanFamily for Ip4Shared {
    type Key = u32;
    type Request = [u8; ETH_HEADER_LEN + sluice_wire::arp::LEN];
    const NODE: &'static str = IP4_GLEAN;
    const COUNTERS: &'static [CounterDesc] = GleanCounter::DESCS;

    fn adj(&self, ai: u32) -> Adj {
        self.adj.get(ai)
    }

    fn key(&self, adj: &Adj, _ai: u32, d: &[u8]) -> Result<u32, GleanCounter> {
        const D: usize = field::DST;
        let target = match (adj.kind, d.get(D..D + 4)) {
            (AdjKind::Incomplete, _) if adj.nh == 0 => return Err(GleanCounter::NoNextHop),
            (AdjKind::Incomplete, _) => return Ok(adj.nh),
            (_, Some(a)) => u32::from_be_bytes([a[0], a[1], a[2], a[3]]),
            (_, None) => return Err(GleanCounter::Truncated),
        };
        if target != 0 && target == self.if_addr(adj.tx_if).broadcast() {
            return Err(GleanCounter::DirectedBroadcast);
        }
        Ok(target)
    }

    fn request(&self, adj: &Adj, _ai: u32, target: u32) -> Result<Self::Request, GleanCounter> {
        let src = self.if_addr(adj.tx_if).first();
        if src == 0 {
            return Err(GleanCounter::NoSource);
        }
        let me = Mac(self.if_attr(adj.tx_if).mac_bytes());
        Ok(arp_request(Mac::BROADCAST, me, src, target))
    }
}

/// `ip4-neighbor-process` (see [`crate::ip_family::NeighborProcess`]): applies the
/// neighbours `arp-input` learned, ages them with unicast ARP requests.
pub type NeighborProcess = crate::ip_family::NeighborProcess<super::Ip4Control>;

/// The feature-arc slot of an arc's start node, declared by `vnet::register` before the
/// nodes register.
pub(crate) fn arc_slot(r: &crate::plugin::Registrar, node: &str) -> usize {
    r.feature_slot(node)
        .unwrap_or_else(|| panic!("vnet declares the arc that `{node}' starts"))
}

/// Registers the IPv4 nodes.
pub fn register(
    r: &mut crate::plugin::Registrar,
    shared: Arc<Ip4Shared>,
    slot: Arc<Mutex<CtlSlot>>,
) {
    let fslot = arc_slot(r, IP4_INPUT);
    let rslot = arc_slot(r, IP4_REWRITE);
    crate::ethernet::register(r, shared.clone());
    let b = &mut r.graph;
    let s = shared.clone();
    b.register(
        NodeRegistration::new(IP4_INPUT, NodeKind::Internal, move |_| {
            Box::new(Ip4Input {
                own: s.own.clone(),
                fib_entries: s.fib.entry_prefetch(),
                slow: Ip4InputSlow {
                    shared: s.clone(),
                    own: s.own.clone(),
                    arc: crate::feature::ArcRun::new(fslot),
                    features_any: false,
                    fib_entries: s.fib.entry_prefetch(),
                },
            })
        })
        .nexts(InputNext::NAMES)
        .counters(InputCounter::DESCS),
    );
    let s = shared.clone();
    b.register(
        NodeRegistration::new(IP4_LOOKUP, NodeKind::Internal, move |_| {
            Box::new(Ip4Lookup { shared: s.clone() })
        })
        .nexts(LookupNext::NAMES)
        .counters(LookupCounter::DESCS),
    );
    let s = shared.clone();
    b.register(
        NodeRegistration::new(IP4_REWRITE, NodeKind::Internal, move |_| {
            Box::new(Ip4Rewrite {
                adj: s.adj.clone(),
                slow: Ip4RewriteSlow {
                    shared: s.clone(),
                    slot: rslot,
                    cached: RewriteCache {
                        fast: FastAdj::NONE,
                        mtu: 0,
                        next: RewriteNext::Drop.next(),
                    },
                    out_any: false,
                },
            })
        })
        .nexts(RewriteNext::NAMES)
        .counters(RewriteCounter::DESCS),
    );
    b.register(
        NodeRegistration::new(IP4_LOCAL, NodeKind::Internal, {
            let s = shared.clone();
            move |_| {
                Box::new(PerPacket::new(Ip4Local {
                    shared: s.clone(),
                    dispatch: Default::default(),
                }))
            }
        })
        .nexts(LocalNext::NAMES)
        .counters(LocalCounter::DESCS),
    );
    crate::icmp_error::register(b, shared.clone());
    crate::arp::register(r, shared.clone());
    let b = &mut r.graph;
    crate::glean::register(b, shared.clone());
    b.register(
        NodeRegistration::new(NEIGHBOR_PROCESS, NodeKind::Process, move |_| {
            Box::new(NeighborProcess::new(slot.clone()))
        })
        .nexts(crate::neighbor::ProcessNext::NAMES)
        .counters(crate::neighbor::ProcessCounter::DESCS),
    );
}

#[cfg(test)]
mod tests {
    use super::flow_hash;

    #[test]
    fn flow_hash_of_short_packets_is_zero() {
        // What ip4-lookup may see from a feature that shortened a packet: no panic.
        for n in 0..20 {
            assert_eq!(flow_hash(&[0x45; 64][..n]), 0, "{n} bytes");
        }
        // UDP with a 24-byte IHL whose ports are cut off: hashed without them.
        let mut p = [0u8; 28];
        p[0] = 0x46;
        p[9] = 17;
        p[24..28].copy_from_slice(&[0x12, 0x34, 0x56, 0x78]);
        let with_ports = flow_hash(&p);
        assert_eq!(flow_hash(&p[..27]), flow_hash(&p[..24]));
        assert_ne!(
            flow_hash(&p[..24]),
            with_ports,
            "ports take part in the hash"
        );
    }
}
