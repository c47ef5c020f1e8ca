//! The IPv6 path's nodes (`ip6-icmp-error` and `ip6-glean` are the nodes written once for
//! both families, [`crate::icmp_error`] and [`crate::glean`], of which this module holds
//! the IPv6 side). Each node's header: name, metadata used/set, next arcs, counters.
//!
//! Packet bytes are parsed with `sluice_wire` views (never panic); every drop sets a counter.

use super::{solicited_node, CtlSlot, Ip6Shared};
use crate::glean::{GleanCounter, GleanFamily};
use crate::icmp_error::{IcmpErrorCounter, IcmpErrorFamily};
use crate::ip_family::{adj_arc, adj_arcs, fast_frame, rewrite_frame, AdjArcs, FastAdj, NO_ADJ};
use crate::own_source::{is_local, key, SourceFilter};
use crate::routes::LB_FLAG;
use sluice_buffer::flags::LOCALLY_ORIGINATED;
use sluice_buffer::{BufIdx, Buffer, BufferHeader};
use sluice_fib::adj::{Adj, AdjKind};
use sluice_graph::{
    CounterDesc, Cx, FrameScratch, Next, NodeFn, NodeKind, NodeRegistration, PacketNode, PerPacket,
    FRAME_SIZE, PREFETCH_AHEAD,
};
use sluice_wire::ethernet::HEADER_LEN as ETH_HEADER_LEN;
use sluice_wire::icmpv6::{self, Icmpv6Packet, NaFlags, NdiscRepr};
use sluice_wire::ipv6::{field, next_header, Ipv6Packet, HEADER_LEN};
use sluice_wire::Mac;
use std::any::Any;
use std::net::Ipv6Addr;
use std::sync::{Arc, Mutex};

/// `ip6-input`.
pub const IP6_INPUT: &str = "ip6-input";
/// `ip6-lookup`.
pub const IP6_LOOKUP: &str = "ip6-lookup";
/// `ip6-rewrite`.
pub const IP6_REWRITE: &str = "ip6-rewrite";
/// `ip6-local`.
pub const IP6_LOCAL: &str = "ip6-local";
/// `ip6-icmp-error`.
pub const IP6_ICMP_ERROR: &str = "ip6-icmp-error";
/// `ip6-glean`.
pub const IP6_GLEAN: &str = "ip6-glean";
/// `ip6-neighbor-process`.
pub const NEIGHBOR_PROCESS: &str = "ip6-neighbor-process";

#[inline(always)]
fn addr_at(d: &[u8], at: usize) -> u128 {
    let mut a = [0u8; 16];
    a.copy_from_slice(&d[at..at + 16]);
    u128::from_be_bytes(a)
}

// ---------------------------------------------------------------------------------------
/// `ip6-input`: validates IPv6 headers (RFC 8200) and trims Ethernet padding.
///
/// - uses: the packet at `current_data` (an IPv6 header).
/// - sets: trims `current_length` to 40 + payload length.
/// - next: `error-drop` (0) for malformed packets; `ip6-lookup` (1), or the first feature
///   enabled on the rx interface's `ip6-unicast` arc; `ip6-local` (2) for the link-scope
///   multicast groups the router is in (all-nodes, all-routers, solicited-node), and on an
///   interface with a host stack behind `punt` (`IfAttr::punt_host`, linux-cp) for every
///   link-scope group (ff02::/16: OSPFv3's ff02::5/6, RIPng, PIM, VRRP, MLD), and for a
///   group with a `via local` route in the rx interface's table (a plugin joined it: a
///   VXLAN tunnel to an IPv6 group).
/// - counters: `too_short` (shorter than 40 bytes), `version` (version != 6), `bad_length`
///   (payload length beyond the frame), `src_multicast` (multicast source),
///   `src_loopback` (source `::1`, RFC 4291 §2.5.3), `src_unspecified` (source `::` to
///   anything but a solicited-node group: RFC 4861 §7.2.2 allows it only for duplicate
///   address detection), `own_source` (the source is one of the router's addresses in the
///   rx interface's table, link-local included, RFC 1812 §5.3.7 as for IPv4:
///   [`crate::own_source`]), `multicast` (other multicast groups: not forwarded).
///
/// Cost: the own-source test is one byte load keyed by the source's low 16 bits, folded
/// into the martian-source test's branch. The node has `ip4-input`'s frame loop: the fast
/// path (unicast destination, plausible source, payload length within the buffer) in a
/// loop that writes no next arc, a frame of such packets sent to `ip6-lookup` whole; any
/// other packet through `process_one`. As `ip4-input`, the node is the fast path's part
/// (the source filter) and the [`PacketNode`] for the other packets (`Ip6InputSlow`).
pub struct Ip6Input {
    own: Arc<SourceFilter>,
    slow: Ip6InputSlow,
}

/// `ip6-input`'s packets off the fast path (and all of them with `ip6-unicast` features).
struct Ip6InputSlow {
    slot: usize,
    shared: Arc<Ip6Shared>,
    own: Arc<SourceFilter>,
    // Per frame: whether any interface has `ip6-unicast` features (else every packet goes
    // to ip6-lookup without a per-interface table read).
    features_any: bool,
}

sluice_graph::arcs! {
    /// `ip6-input`'s next arcs.
    pub enum InputNext {
        /// To `error-drop`.
        Drop => "error-drop",
        /// To `ip6-lookup`.
        Lookup => IP6_LOOKUP,
        /// To `ip6-local`.
        Local => IP6_LOCAL,
    }
}

sluice_graph::counters! {
    /// `ip6-input`'s counters.
    pub enum InputCounter {
        /// Ip6 length < 40 bytes.
        TooShort => error("too_short", "ip6 length < 40 bytes"),
        /// Ip6 version != 6.
        Version => error("version", "ip6 version != 6"),
        /// Ip6 payload length > l2 length.
        BadLength => error("bad_length", "ip6 payload length > l2 length"),
        /// Ip6 multicast source address.
        SrcMulticast => error("src_multicast", "ip6 multicast source address"),
        /// Ip6 loopback source address.
        SrcLoopback => error("src_loopback", "ip6 loopback source address"),
        /// Ip6 unspecified source to other than a solicited-node group.
        SrcUnspecified => error("src_unspecified", "ip6 unspecified source address"),
        /// Ip6 multicast not forwarded.
        Multicast => error("multicast", "ip6 multicast not forwarded"),
        /// The source is one of the router's own addresses.
        OwnSource => error("own_source", "ip6 source is one of our addresses"),
    }
}

/// The counter of a source starting with byte 0 or 0xff that is dropped: multicast,
/// `::1`, or `::` but towards a solicited-node group (`d`: at least 40 bytes).
#[cold]
#[inline(never)]
fn martian_source(d: &[u8]) -> Option<InputCounter> {
    let src = addr_at(d, 8);
    if d[8] == 0xff {
        return Some(InputCounter::SrcMulticast);
    }
    if src == 1 {
        return Some(InputCounter::SrcLoopback);
    }
    let solicited = addr_at(d, 24) & !0xff_ffff == 0xff02_0000_0000_0000_0000_0001_ff00_0000;
    (src == 0 && !solicited).then_some(InputCounter::SrcUnspecified)
}

impl Ip6InputSlow {
    /// A link-scope group (ff02::/16) other than the router's own, received on an
    /// interface with a host stack behind `punt` (linux-cp): OSPFv3's ff02::5/6, RIPng,
    /// PIM, VRRP, MLD... go to `ip6-local`, which punts them to the host.
    #[cold]
    #[inline(never)]
    fn host_link_group(&self, dst: u128, rx_if: u32) -> bool {
        dst >> 112 == 0xff02
            && self
                .shared
                .v4
                .if_attr(rx_if)
                .punt_host
                .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether group `dst` is received on `rx_if` (table `fib`): the link-scope groups the
    /// router is in (ff02::1, ff02::2, ff02::1:ffxx:xxxx), any link-scope group on a
    /// [`Self::host_link_group`] interface, and a group of scope 2 or more with a `via
    /// local` route in the table (a plugin that joined it: a VXLAN tunnel to the group);
    /// never an interface-local (ff01::/16) or reserved-scope (ff00::/16) one.
    #[cold]
    #[inline(never)]
    fn group_received(&self, dst: u128, rx_if: u32, fib: u32) -> bool {
        dst == 0xff02_0000_0000_0000_0000_0000_0000_0001
            || dst == 0xff02_0000_0000_0000_0000_0000_0000_0002
            || dst & !0xff_ffff == 0xff02_0000_0000_0000_0000_0001_ff00_0000
            || self.host_link_group(dst, rx_if)
            || (dst >> 112) & 0xf >= 2 && is_local(&self.shared.adj, self.shared.lookup(fib, dst))
    }

    /// The counter of a source the fast path flagged (first byte 0 or 0xff, or low 16 bits
    /// shared with one of the router's addresses) that is dropped (`d`: at least 40 bytes).
    #[cold]
    #[inline(never)]
    fn source_check(&self, d: &[u8], fib: u32) -> Option<InputCounter> {
        if d[8].wrapping_add(1) <= 1 {
            if let Some(c) = martian_source(d) {
                return Some(c);
            }
        }
        let own = self.own.may_be_own(key(&[d[22], d[23]]))
            && is_local(&self.shared.adj, self.shared.lookup(fib, addr_at(d, 8)));
        own.then_some(InputCounter::OwnSource)
    }
}

impl PacketNode for Ip6InputSlow {
    #[inline(always)]
    fn begin_frame(&mut self, _cx: &mut Cx) {
        self.features_any = self.shared.v4.features.any(self.slot);
    }

    #[inline(always)]
    fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        // The fixed header as an array: no bound check per field.
        let Some(d) = b.head::<40>() else {
            b.hdr.error = cx.error(InputCounter::TooShort);
            return InputNext::Drop.next();
        };
        if d[0] >> 4 != 6 {
            b.hdr.error = cx.error(InputCounter::Version);
            return InputNext::Drop.next();
        }
        let total = 40 + u16::from_be_bytes([d[4], d[5]]) as usize;
        if total > b.total_len() {
            b.hdr.error = cx.error(InputCounter::BadLength);
            return InputNext::Drop.next();
        }
        // One compare for both first bytes of a martian source, 0xff (multicast) and 0, and
        // one load for a source that may be the router's own: one branch.
        if (d[8].wrapping_add(1) <= 1) | self.own.may_be_own(key(&[d[22], d[23]])) {
            if let Some(c) = self.source_check(d, b.hdr.ip.fib_index) {
                b.hdr.error = cx.error(c);
                return InputNext::Drop.next();
            }
        }
        if d[24] == 0xff {
            if !self.group_received(addr_at(d, 24), b.hdr.rx_if, b.hdr.ip.fib_index) {
                b.hdr.error = cx.error(InputCounter::Multicast);
                return InputNext::Drop.next();
            }
            if total < b.len() {
                b.set_len(total);
            }
            return InputNext::Local.next();
        }
        if total < b.len() && b.chain_rest_len() == 0 {
            b.set_len(total);
        }
        if !self.features_any {
            return InputNext::Lookup.next();
        }
        self.shared
            .v4
            .features
            .next(self.slot, b.hdr.rx_if, InputNext::Lookup.next())
    }
}

/// `ip6-input`'s fast path alone: whether the packet at `b` is an IPv6 header from a
/// plausible source (first byte neither 0 nor 0xff, low 16 bits no router address's) to
/// a unicast destination, with a payload length that fits the buffer; such a packet goes
/// to `ip6-lookup`, its Ethernet padding trimmed. `false`, having changed nothing:
/// `process_one` decides (a chained packet, multicast, anything to drop or look at more
/// closely).
#[inline(always)]
fn fast_one(own: &SourceFilter, b: &mut Buffer<'_>) -> bool {
    let len = b.hdr.current_length;
    let Some(d) = b.head::<HEADER_LEN>() else {
        return false;
    };
    if d[0] >> 4 != 6
        || (d[8].wrapping_add(1) <= 1) | own.may_be_own(key(&[d[22], d[23]]))
        || d[24] == 0xff
    {
        return false;
    }
    // The payload length as loaded, against the buffer's beyond the header swapped (`head`
    // found at least `HEADER_LEN` bytes).
    let payload_ne = u16::from_ne_bytes([d[4], d[5]]);
    let rest = len - HEADER_LEN as u16;
    if payload_ne != rest.to_be() {
        // Ethernet padding behind a short packet: trimmed (not in a chain).
        let payload = u16::from_be(payload_ne);
        if payload > rest || b.chain_rest_len() != 0 {
            return false;
        }
        b.hdr.current_length = payload + HEADER_LEN as u16;
    }
    true
}

/// The frame loop ([`crate::ip_family::fast_frame`], shared with `ip4-input` and the
/// rewrite nodes): the fast path ([`fast_one`]) in a loop of its own that writes no next, a
/// frame whose packets all take it sent to `ip6-lookup` whole; any other packet through
/// `Ip6InputSlow::process_one` (every packet with `ip6-unicast` features on any interface).
impl NodeFn for Ip6Input {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        self.slow.begin_frame(cx);
        let features_any = self.slow.features_any;
        // The fast path's state, borrowed apart from `slow` (no reference count touched);
        // one closure for both of `fast_run`'s calls, one copy of it.
        let own = &*self.own;
        let fast = move |b: &mut Buffer<'_>| fast_one(own, b);
        fast_frame(
            cx,
            frame,
            &mut self.slow,
            features_any,
            InputNext::Lookup.next(),
            fast,
        );
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

// ---------------------------------------------------------------------------------------
/// `ip6-lookup`: longest-prefix match on the destination, the whole frame level by level.
///
/// - uses: the IPv6 header at `current_data`; `ip.fib_index` (the table: frames all in table
///   0 are looked up together level by level, others one packet at a time in their table).
/// - sets: `ip.adj_index`; `ip.flow_hash` for ECMP routes; for packets without a route,
///   the ICMPv6 error asked for (`feature_meta[0..2]`: destination unreachable, no route).
/// - next: `error-drop` (0) for drop routes; `ip6-rewrite` (1); `ip6-local` (2);
///   `ip6-glean` (3) for adjacencies that need neighbour discovery first; `ip6-icmp-error`
///   (4) when there is no route; a Node adjacency's node (its `nh`: an arc added by
///   `set_lookup_node`, e.g. `sr-localsid`).
/// - counters: `no_route` (no route to destination: an ICMPv6 error follows), `drop_route`.
///
/// The frame's buffer addresses come from the thread's `FrameScratch` (resolved once per
/// frame, reused when the previous node resolved the same frame); a destination whose
/// walk goes past /64 probes the FIB's exact /128 host table once (`sluice_fib::ip6`). A
/// packet resolving to the adjacency of the packet before costs two stores (its
/// adjacency index and arc); the others go out of line (`resolve`).
pub struct Ip6Lookup {
    shared: Arc<Ip6Shared>,
    /// Destination addresses in network byte order, as `Ip6Table::lookup_many` takes them.
    dst: [[u8; 16]; FRAME_SIZE],
    res: [u32; FRAME_SIZE],
}

sluice_graph::arcs! {
    /// `ip6-lookup`'s next arcs.
    pub enum LookupNext {
        /// To `error-drop`.
        Drop => "error-drop",
        /// To `ip6-rewrite`.
        Rewrite => IP6_REWRITE,
        /// To `ip6-local`.
        Local => IP6_LOCAL,
        /// To `ip6-glean`.
        Glean => IP6_GLEAN,
        /// To `ip6-icmp-error`.
        IcmpError => IP6_ICMP_ERROR,
    }
}

sluice_graph::counters! {
    /// `ip6-lookup`'s counters.
    pub enum LookupCounter {
        /// Ip6 no route to destination.
        NoRoute => error("no_route", "ip6 no route to destination"),
        /// Ip6 drop route.
        DropRoute => error("drop_route", "ip6 drop route"),
    }
}

/// `ip6-lookup`'s arcs by adjacency kind.
const ARCS: AdjArcs = adj_arcs!(LookupNext);

/// `ip6-lookup`: a packet whose LPM result `r` is a plain adjacency (below `LB_FLAG`) other
/// than the remembered one: its kind read (the packet's header only, no view of it built).
/// Remembers the adjacency and its arc in `last` (not a drop adjacency: its packets are
/// counted one by one).
#[inline(never)]
fn resolve(
    hdr: &mut BufferHeader,
    shared: &Ip6Shared,
    cx: &Cx,
    r: u32,
    last: &mut (u32, u16),
) -> u16 {
    hdr.ip.adj_index = r;
    adj_arc(&shared.adj, hdr, r, last, ARCS, || {
        cx.error(LookupCounter::DropRoute)
    })
}

/// `ip6-lookup`: a packet without a plain adjacency: no route (an ICMPv6 error asked for,
/// counted in `no_route`) or a load-balance (ECMP bucket by flow hash, then as
/// [`resolve`]).
#[inline(never)]
fn resolve_lb(
    shared: &Ip6Shared,
    cx: &Cx,
    v: Buffer<'_>,
    r: u32,
    last: &mut (u32, u16),
    no_route: &mut u64,
) -> u16 {
    if r == u32::MAX {
        *no_route += 1;
        let code = icmpv6::unreach::NO_ROUTE;
        crate::icmp_error::request(v.hdr, icmpv6::kind::DEST_UNREACH, code, 0);
        return LookupNext::IcmpError as u16;
    }
    let h = flow_hash(v.data());
    v.hdr.ip.flow_hash = h;
    let a = shared.lb.pick(r & (LB_FLAG - 1), h);
    v.hdr.ip.adj_index = a;
    adj_arc(&shared.adj, v.hdr, a, last, ARCS, || {
        cx.error(LookupCounter::DropRoute)
    })
}

impl NodeFn for Ip6Lookup {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        let fib = &*self.shared.fib;
        // One pass resolves the frame's addresses (and checks its indices), unless the
        // node before left this frame's there: both loops below load a packet's addresses
        // instead of computing them.
        let (arena, frame, mut s) = cx.resolve_frame(frame);
        let n = frame.len();
        let FrameScratch { addrs, nexts } = &mut *s;
        let addrs = &*addrs;
        let mut no_route = 0u64;
        let mut any_vrf = 0;
        for (j, (d, &b)) in self.dst[..n].iter_mut().zip(frame).enumerate() {
            addrs.prefetch(j + PREFETCH_AHEAD, true);
            // SAFETY: this node owns the frame, resolved into `addrs` above; one view at a
            // time.
            let v = unsafe { arena.buffer_at(addrs, j, b) };
            // ip6-input guaranteed a full header (a short one would look up `::`).
            *d = v
                .head::<HEADER_LEN>()
                .and_then(|h| h.last_chunk::<16>())
                .copied()
                .unwrap_or_default();
            any_vrf |= v.hdr.ip.fib_index;
        }
        if any_vrf == 0 {
            // All lookups of the frame level by level (independent loads overlap).
            fib.lookup_many(&self.dst[..n], &mut self.res[..n]);
        } else {
            for (j, &b) in frame.iter().enumerate() {
                // SAFETY: this node owns the frame; read-only header access.
                let f = unsafe { arena.header(b) }.ip.fib_index;
                self.res[j] = self
                    .shared
                    .lookup(f, u128::from_be_bytes(self.dst[j]))
                    .unwrap_or(u32::MAX);
            }
        }
        // Packets resolving to the adjacency of the packet before (`last`: its index and
        // arc) take the two-store path; the others `resolve`.
        let mut last = (NO_ADJ, 0u16);
        for (j, ((nx, &r), &bi)) in nexts[..n]
            .iter_mut()
            .zip(&self.res[..n])
            .zip(frame)
            .enumerate()
        {
            *nx = if r == last.0 {
                // SAFETY: this node owns the frame, in the arena; only the header is
                // written.
                unsafe { arena.header_mut_unchecked(bi) }.ip.adj_index = r;
                last.1
            } else if r < LB_FLAG {
                // SAFETY: as above.
                let hdr = unsafe { arena.header_mut_unchecked(bi) };
                resolve(hdr, &self.shared, cx, r, &mut last)
            } else {
                // SAFETY: as above, resolved into `addrs`; the view ends with the call.
                let v = unsafe { arena.buffer_at(addrs, j, bi) };
                resolve_lb(&self.shared, cx, v, r, &mut last, &mut no_route)
            };
        }
        if no_route > 0 {
            cx.count(LookupCounter::NoRoute, no_route);
        }
        cx.enqueue_to_next(frame, &s.nexts[..n]);
        cx.put_frame_scratch(s);
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// Flow hash of an IPv6 packet (addresses, flow label, next header, and ports when the
/// next header is UDP/TCP) for ECMP bucket choice. A packet shorter than a header (never
/// from ip6-input; `ip6-lookup` looks it up as `::`) hashes to 0.
#[inline(always)]
pub(crate) fn flow_hash(ip: &[u8]) -> u32 {
    let Some(hdr) = ip.first_chunk::<40>() else {
        return 0;
    };
    let a = addr_at(hdr, 8);
    let b = addr_at(hdr, 24);
    let ports = match ip.get(40..44) {
        Some(p) if hdr[6] == 6 || hdr[6] == 17 => u32::from_be_bytes([p[0], p[1], p[2], p[3]]),
        _ => 0,
    };
    let label = u32::from_be_bytes([0, hdr[1] & 0xf, hdr[2], hdr[3]]);
    let mut h = (a as u64) ^ ((a >> 64) as u64).rotate_left(17) ^ (b as u64).rotate_left(31);
    h ^= ((b >> 64) as u64).rotate_left(47);
    h ^= ((ports as u64) << 24) ^ ((label as u64) << 8) ^ hdr[6] as u64;
    h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= h >> 29;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (h >> 32) as u32
}

// ---------------------------------------------------------------------------------------
/// `ip6-rewrite`: hop-limit decrement, MTU check, L2 rewrite (no checksum in IPv6).
///
/// - uses: `ip.adj_index` (a Rewrite adjacency); the `LOCALLY_ORIGINATED` flag (hop limit
///   kept).
/// - sets: `tx_if`; writes the adjacency's Ethernet header into the headroom (the fast path
///   as one 16-byte store: the two headroom bytes in front of it overwritten (zeros)); on
///   errors `feature_meta[0..2]` for `ip6-icmp-error`.
/// - next: `error-drop` (0); `interface-output` (1), or the first feature enabled on the tx
///   interface's `ip6-output` arc; `ip6-icmp-error` (2) for hop-limit expiry and packets over
///   the MTU (routers never fragment IPv6).
/// - counters: `hop_limit_expired` (info: an ICMPv6 error follows), `too_big` (info: packet
///   over the MTU, ICMPv6 packet too big follows), `no_headroom`, `truncated` (less than a
///   40-byte header: never from ip6-input, counted rather than trusted).
///
/// The node is split as `ip6-input` is: [`Ip6Rewrite`] holds what the fast path reads (the
/// adjacency table) and the [`PacketNode`] for the other packets (`Ip6RewriteSlow`).
pub struct Ip6Rewrite {
    adj: Arc<sluice_fib::adj::AdjTable>,
    slow: Ip6RewriteSlow,
}

/// `ip6-rewrite`'s packets off the fast path (and all of them with `ip6-output` features).
struct Ip6RewriteSlow {
    shared: Arc<Ip6Shared>,
    slot: usize,
    // Per-frame cache: the last adjacency. Reset per frame to what index `u32::MAX` (no
    // adjacency: `Adj::DROP`) loads, so it is never stale.
    cached: Adj,
    // The cached adjacency in the fast path's form (its index, the lengths to its MTU, the
    // wide Ethernet header).
    cached_fast: FastAdj<REWRITE_WINDOW>,
    // Per frame: whether any interface has `ip6-output` features.
    out_any: bool,
    // The cached adjacency's next: `interface-output`, or the first `ip6-output` feature of
    // its interface.
    cached_out: Next,
}

sluice_graph::arcs! {
    /// `ip6-rewrite`'s next arcs.
    pub enum RewriteNext {
        /// To `error-drop`.
        Drop => "error-drop",
        /// To `interface-output`.
        Output => crate::output::NAME,
        /// To `ip6-icmp-error`.
        IcmpError => IP6_ICMP_ERROR,
    }
}

sluice_graph::counters! {
    /// `ip6-rewrite`'s counters.
    pub enum RewriteCounter {
        /// Ip6 hop limit <= 1.
        HopLimitExpired => info("hop_limit_expired", "ip6 hop limit <= 1"),
        /// Ip6 packet larger than the MTU.
        TooBig => info("too_big", "ip6 packet larger than the MTU"),
        /// No headroom for the L2 rewrite.
        NoHeadroom => error("no_headroom", "no headroom for the L2 rewrite"),
        /// Shorter than an ip6 header.
        Truncated => error("truncated", "shorter than an ip6 header"),
    }
}

/// `ip6-rewrite`'s fast-path window: the Ethernet header pushed and the IPv6 header behind.
const REWRITE_WINDOW: usize = ETH_HEADER_LEN + HEADER_LEN;

impl Ip6RewriteSlow {
    /// Caches adjacency `ai` and its `ip6-output` next.
    #[inline(never)]
    fn load(&mut self, ai: u32) {
        let (a, w) = self.shared.adj.get_with_rewrite(ai);
        self.cached = a;
        self.cached_fast = FastAdj::from_rewrite(ai, w);
        self.cached_out = if self.out_any {
            self.shared
                .v4
                .features
                .next(self.slot, a.tx_if, RewriteNext::Output.next())
        } else {
            RewriteNext::Output.next()
        };
    }
}

/// The hop-limit test and decrement of an IPv6 header `h` (at least 40 bytes): `false`,
/// nothing changed, when it is 1 or 0.
#[inline(always)]
fn hop_decrement(h: &mut [u8]) -> bool {
    if h[field::HOP_LIMIT] > 1 {
        h[field::HOP_LIMIT] -= 1;
        return true;
    }
    false
}

impl PacketNode for Ip6RewriteSlow {
    #[inline(always)]
    fn begin_frame(&mut self, _cx: &mut Cx) {
        self.out_any = self.shared.v4.features.any(self.slot);
        self.load(u32::MAX);
    }

    #[inline(always)]
    fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        let ai = b.hdr.ip.adj_index;
        if self.cached_fast.index != ai {
            self.load(ai);
        }
        if self
            .cached_fast
            .rewrite::<{ REWRITE_WINDOW + 2 }>(b, hop_decrement)
        {
            return self.cached_out;
        }
        Ip6Rewrite::rewrite_checked(cx, b.reborrow(), &self.cached, self.cached_out)
    }
}

/// The frame loop ([`crate::ip_family::fast_frame`] through
/// [`crate::ip_family::rewrite_frame`], shared with the input nodes and `ip4-rewrite`):
/// the fast path ([`FastAdj::rewrite_any`], its adjacency a local of the loop) writes no
/// next, a frame whose packets all take it sent to `interface-output` whole; any other
/// packet through `Ip6RewriteSlow::process_one` (every packet with `ip6-output`
/// features on any interface).
impl NodeFn for Ip6Rewrite {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        self.slow.begin_frame(cx);
        let out_any = self.slow.out_any;
        rewrite_frame::<_, REWRITE_WINDOW, { REWRITE_WINDOW + 2 }>(
            cx,
            frame,
            (&mut self.slow, out_any),
            &self.adj,
            RewriteNext::Output.next(),
            hop_decrement,
        );
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

impl Ip6Rewrite {
    /// `ip6-rewrite` of a packet off the fast path (hop limit expired, over the MTU, no
    /// headroom, truncated; every locally built packet, buffer chain and GSO aggregate):
    /// the checks one by one. Out of line and taking the view by value
    /// (`Buffer::reborrow`), so that the fast path keeps its values in registers.
    #[cold]
    #[inline(never)]
    fn rewrite_checked(cx: &mut Cx, mut b: Buffer<'_>, adj: &Adj, next: Next) -> Next {
        let len = b.total_len();
        let local = b.hdr.flags & LOCALLY_ORIGINATED != 0;
        // A GSO aggregate is checked by its segments' size.
        let too_big = len > adj.mtu as usize
            && adj.mtu != 0
            && crate::offload::mtu_len(b.hdr, len) > adj.mtu as usize;
        let Some(d) = b.head_mut::<HEADER_LEN>() else {
            b.hdr.error = cx.error(RewriteCounter::Truncated);
            return RewriteNext::Drop.next();
        };
        if d[field::HOP_LIMIT] <= 1 && !local {
            crate::icmp_error::request(b.hdr, icmpv6::kind::TIME_EXCEEDED, 0, 0);
            cx.count(RewriteCounter::HopLimitExpired, 1);
            return RewriteNext::IcmpError.next();
        }
        if too_big {
            crate::icmp_error::request(b.hdr, icmpv6::kind::PKT_TOO_BIG, 0, adj.mtu as u32);
            cx.count(RewriteCounter::TooBig, 1);
            return RewriteNext::IcmpError.next();
        }
        if !local {
            d[field::HOP_LIMIT] -= 1;
        }
        match b.prepend::<ETH_HEADER_LEN>() {
            Some(h) => *h = adj.rewrite,
            None => {
                b.hdr.error = cx.error(RewriteCounter::NoHeadroom);
                return RewriteNext::Drop.next();
            }
        }
        b.hdr.tx_if = adj.tx_if;
        next
    }
}

// ---------------------------------------------------------------------------------------
/// `ip6-local`: packets for the router: ICMPv6 echo replies and Neighbor Discovery
/// (RFC 4861: answers solicitations for its addresses, learns from NS and NA).
///
/// - uses: the IPv6 header; `rx_if`; the Ethernet source (`l2_hdr_offset`) when an NS has
///   no source link-layer address option.
/// - sets: rewrites echo requests into replies and solicitations into advertisements in
///   place; `tx_if` = `rx_if` for advertisements; the ICMP error asked for
///   (`feature_meta[0..2]`, [`crate::icmp_error::request`]) for port unreachable.
/// - next: `error-drop` (0); `ip6-lookup` (1) for echo replies; `ip6-icmp-error` (2) for UDP
///   to a closed unicast port; `punt` (3) for other protocols, for UDP to a group on no
///   port registered to serve groups, and for UDP and a copy of each NS/NA when the rx
///   interface has a host stack behind `punt` (`IfAttr::punt_host`, linux-cp);
///   `interface-output` (4) for advertisements; the serving node's arc (added at runtime)
///   for a UDP port or protocol registered by a plugin (`crate::ip_local`; to a group only
///   one registered with `ip_local::register_groups`), before any of these.
/// - counters: `echo_replies`, `bad_icmp` (truncated or bad checksum), `punted`,
///   `ping_replies` (replies to the CLI ping, consumed), `ns_replied` (NA sent),
///   `na_received`, `nd_not_for_us` (NS for another address), `nd_invalid` (hop limit not
///   255, malformed, or no way to reach the sender), `router_discovery` (RS/RA ignored),
///   `bad_extension` (malformed extension header chain), `dad_ignored` (NS from ::),
///   `nd_punt_copies` (info: NS/NA copies punted), `nd_no_punt_copy` (copy not made),
///   `nd_group_lladdr` (NS/NA whose link-layer address is broadcast/multicast: not learned
///   nor answered).
pub struct Ip6Local {
    shared: Arc<Ip6Shared>,
    /// Ports and protocols served by other nodes (`crate::ip_local`).
    pub(crate) dispatch: crate::ip_local::LocalDispatch,
}

sluice_graph::arcs! {
    /// `ip6-local`'s next arcs.
    pub enum LocalNext {
        /// To `error-drop`.
        Drop => "error-drop",
        /// To `ip6-lookup`.
        Lookup => IP6_LOOKUP,
        /// To `ip6-icmp-error`.
        IcmpError => IP6_ICMP_ERROR,
        /// To `punt`.
        Punt => "punt",
        /// To `interface-output`.
        Output => crate::output::NAME,
    }
}

sluice_graph::counters! {
    /// `ip6-local`'s counters.
    pub enum LocalCounter {
        /// ICMPv6 echo replies sent.
        EchoReplies => info("echo_replies", "ICMPv6 echo replies sent"),
        /// Truncated or bad-checksum ICMPv6.
        BadIcmp => error("bad_icmp", "truncated or bad-checksum ICMPv6"),
        /// Packets for the router punted.
        Punted => info("punted", "packets for the router punted"),
        /// Echo replies to CLI ping.
        PingReplies => info("ping_replies", "echo replies to CLI ping"),
        /// Neighbor advertisements sent.
        NsReplied => info("ns_replied", "neighbor advertisements sent"),
        /// Neighbor advertisements received.
        NaReceived => info("na_received", "neighbor advertisements received"),
        /// Neighbor solicitation for another address.
        NdNotForUs => info("nd_not_for_us", "neighbor solicitation for another address"),
        /// Invalid neighbor discovery packet.
        NdInvalid => error("nd_invalid", "invalid neighbor discovery packet"),
        /// Router solicitation/advertisement ignored.
        RouterDiscovery => info("router_discovery", "router solicitation/advertisement ignored"),
        /// Malformed ip6 extension headers.
        BadExtension => error("bad_extension", "malformed ip6 extension headers"),
        /// Duplicate address detection probe.
        DadIgnored => info("dad_ignored", "duplicate address detection probe"),
        /// NS/NA with a broadcast/multicast link-layer address: not learned.
        NdGroupLladdr => error("nd_group_lladdr", "ND link-layer address is broadcast/multicast"),
        /// NS/NA copies punted to the host stack.
        NdPuntCopies => info("nd_punt_copies", "NS/NA copies punted to the host stack"),
        /// NS/NA copy for the host stack not made.
        NdNoPuntCopy => error("nd_no_punt_copy", "NS/NA copy for the host stack not made"),
    }
}

impl Ip6Local {
    fn punt_host(&self, rx_if: u32) -> bool {
        self.shared
            .if_attr(rx_if)
            .punt_host
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    fn is_mine(&self, fib: u32, a: u128) -> bool {
        match self.shared.lookup(fib, a) {
            Some(v) if v < LB_FLAG => self.shared.adj.kind(v) == AdjKind::Local,
            _ => false,
        }
    }

    fn learn(&self, n: crate::neighbor::Learned<u128>) {
        if let Ok(mut l) = self.shared.learned.lock() {
            if l.len() < 4096 {
                l.push(n);
            }
        }
    }

    fn neighbor_solicit(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        let d = b.data();
        let (src, dst_is_mcast) = (addr_at(d, 8), d[24] == 0xff);
        let Ok(icmp) = Icmpv6Packet::new_checked(&d[40..]) else {
            b.hdr.error = cx.error(LocalCounter::NdInvalid);
            return LocalNext::Drop.next();
        };
        let Ok(NdiscRepr::NeighborSolicit { target, lladdr }) = NdiscRepr::parse(&icmp) else {
            b.hdr.error = cx.error(LocalCounter::NdInvalid);
            return LocalNext::Drop.next();
        };
        let target = u128::from(target);
        if !self.is_mine(b.hdr.ip.fib_index, target) {
            b.hdr.error = cx.error(LocalCounter::NdNotForUs);
            return LocalNext::Drop.next();
        }
        if src == 0 {
            // Duplicate address detection by another node: we do not defend (DAD-less).
            b.hdr.error = cx.error(LocalCounter::DadIgnored);
            return LocalNext::Drop.next();
        }
        // The sender's MAC: its option, else (unicast NS) the frame's Ethernet source.
        let mac = match lladdr {
            Some(m) => Some(m.0),
            None if !dst_is_mcast => {
                let l2 = b.hdr.l2.l2_hdr_offset;
                if b.hdr.rx_if != 0 && l2 + 14 == b.hdr.current_data {
                    b.push_front(14)
                        .map(|h| {
                            let mut m = [0u8; 6];
                            m.copy_from_slice(&h[6..12]);
                            m
                        })
                        .inspect(|_| {
                            b.advance(14);
                        })
                } else {
                    None
                }
            }
            None => None,
        };
        let Some(mac) = mac else {
            b.hdr.error = cx.error(LocalCounter::NdInvalid);
            return LocalNext::Drop.next();
        };
        if mac[0] & 1 != 0 {
            b.hdr.error = cx.error(LocalCounter::NdGroupLladdr);
            return LocalNext::Drop.next();
        }
        if lladdr.is_some() {
            self.learn(crate::neighbor::Learned::heard(b.hdr.rx_if, src, mac, true));
        }
        let my_mac = self.shared.if_attr(b.hdr.rx_if).mac_bytes();
        // Build the advertisement in place: 40 + 24 + 8 (target link-layer address).
        if !b.set_len(72) {
            b.hdr.error = cx.error(LocalCounter::NdInvalid);
            return LocalNext::Drop.next();
        }
        let na = NdiscRepr::NeighborAdvert {
            flags: NaFlags(NaFlags::ROUTER.0 | NaFlags::SOLICITED.0 | NaFlags::OVERRIDE.0),
            target: Ipv6Addr::from(target),
            lladdr: Some(Mac(my_mac)),
        };
        write_nd(b.data_mut(), target, src, &na);
        let Some(h) = b.push_front(14) else {
            b.hdr.error = cx.error(LocalCounter::NdInvalid);
            return LocalNext::Drop.next();
        };
        h[0..6].copy_from_slice(&mac);
        h[6..12].copy_from_slice(&my_mac);
        h[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
        b.hdr.tx_if = b.hdr.rx_if;
        cx.count(LocalCounter::NsReplied, 1);
        LocalNext::Output.next()
    }
}

impl PacketNode for Ip6Local {
    fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        let d = b.data();
        let (nh, off) = match Ipv6Packet::new_checked(d).and_then(|p| p.walk_extensions()) {
            Ok(x) => x,
            Err(_) => {
                b.hdr.error = cx.error(LocalCounter::BadExtension);
                return LocalNext::Drop.next();
            }
        };
        let (src, dst) = (addr_at(d, 8), addr_at(d, 24));
        match nh {
            next_header::ICMPV6 => {
                let (s6, d6) = (Ipv6Addr::from(src), Ipv6Addr::from(dst));
                let ok = off + 8 <= d.len()
                    && Icmpv6Packet::new_checked(&d[off..])
                        .map(|m| m.verify_checksum(s6, d6))
                        .unwrap_or(false);
                if !ok {
                    b.hdr.error = cx.error(LocalCounter::BadIcmp);
                    return LocalNext::Drop.next();
                }
                let kind = d[off];
                let nd = matches!(
                    kind,
                    icmpv6::kind::NEIGHBOR_SOLICIT
                        | icmpv6::kind::NEIGHBOR_ADVERT
                        | icmpv6::kind::ROUTER_SOLICIT
                        | icmpv6::kind::ROUTER_ADVERT
                );
                if nd && (d[7] != 255 || d[off + 1] != 0 || off != 40) {
                    b.hdr.error = cx.error(LocalCounter::NdInvalid);
                    return LocalNext::Drop.next();
                }
                if matches!(
                    kind,
                    icmpv6::kind::NEIGHBOR_SOLICIT | icmpv6::kind::NEIGHBOR_ADVERT
                ) && self.punt_host(b.hdr.rx_if)
                {
                    // The host stack behind `punt` learns neighbours from a copy.
                    match crate::interface::copy_frame(cx, b) {
                        Some(c) => {
                            cx.count(LocalCounter::NdPuntCopies, 1);
                            cx.enqueue(LocalNext::Punt.next(), c);
                        }
                        None => cx.count(LocalCounter::NdNoPuntCopy, 1),
                    }
                }
                let d = b.data();
                match kind {
                    icmpv6::kind::NEIGHBOR_SOLICIT => self.neighbor_solicit(cx, b),
                    icmpv6::kind::NEIGHBOR_ADVERT => {
                        let parsed = Icmpv6Packet::new_checked(&d[off..])
                            .ok()
                            .and_then(|m| NdiscRepr::parse(&m).ok());
                        match parsed {
                            Some(NdiscRepr::NeighborAdvert {
                                lladdr: Some(m), ..
                            }) if m.0[0] & 1 != 0 => {
                                b.hdr.error = cx.error(LocalCounter::NdGroupLladdr)
                            }
                            Some(NdiscRepr::NeighborAdvert {
                                flags,
                                target,
                                lladdr: Some(m),
                            }) => {
                                // RFC 4861 §7.2.5: unsolicited (S clear) updates an
                                // existing entry only; O clear never changes a MAC.
                                self.learn(crate::neighbor::Learned::advert(
                                    b.hdr.rx_if,
                                    u128::from(target),
                                    m.0,
                                    flags.contains(NaFlags::SOLICITED),
                                    flags.contains(NaFlags::OVERRIDE),
                                ));
                                b.hdr.error = cx.error(LocalCounter::NaReceived);
                            }
                            _ => b.hdr.error = cx.error(LocalCounter::NdInvalid),
                        }
                        LocalNext::Drop.next()
                    }
                    icmpv6::kind::ROUTER_SOLICIT | icmpv6::kind::ROUTER_ADVERT => {
                        b.hdr.error = cx.error(LocalCounter::RouterDiscovery);
                        LocalNext::Drop.next()
                    }
                    icmpv6::kind::ECHO_REPLY => {
                        let id = u16::from_be_bytes([d[off + 4], d[off + 5]]);
                        let seq = u16::from_be_bytes([d[off + 6], d[off + 7]]);
                        let from = Ipv6Addr::from(src);
                        if self.shared.ping.record(id, seq, from, d[7], cx.now_tsc()) {
                            b.hdr.error = cx.error(LocalCounter::PingReplies);
                            return LocalNext::Drop.next();
                        }
                        cx.count(LocalCounter::Punted, 1);
                        LocalNext::Punt.next()
                    }
                    icmpv6::kind::ECHO_REQUEST if off == 40 => {
                        // Reply from the address asked, or for a group from the address
                        // an ICMPv6 error would come from: the rx interface's global one
                        // unless the sender is link-local.
                        let from = if d[24] == 0xff {
                            self.shared.error_from(b.hdr.rx_if, src).unwrap_or(0)
                        } else {
                            dst
                        };
                        if from == 0 || src == 0 {
                            b.hdr.error = cx.error(LocalCounter::BadIcmp);
                            return LocalNext::Drop.next();
                        }
                        let d = b.data_mut();
                        d[7] = 64;
                        d[8..24].copy_from_slice(&from.to_be_bytes());
                        d[24..40].copy_from_slice(&src.to_be_bytes());
                        let mut m = Icmpv6Packet::new_unchecked(&mut d[40..]);
                        m.set_kind_code(icmpv6::kind::ECHO_REPLY, 0);
                        m.fill_checksum(Ipv6Addr::from(from), Ipv6Addr::from(src));
                        b.hdr.flags |= LOCALLY_ORIGINATED;
                        cx.count(LocalCounter::EchoReplies, 1);
                        LocalNext::Lookup.next()
                    }
                    _ => {
                        cx.count(LocalCounter::Punted, 1);
                        LocalNext::Punt.next()
                    }
                }
            }
            next_header::UDP => {
                if !self.dispatch.no_udp() {
                    let port = d
                        .get(off + 2..off + 4)
                        .map(|p| u16::from_be_bytes([p[0], p[1]]));
                    // To a group only a port that serves groups (VXLAN) takes it.
                    let n = match port {
                        Some(p) if d[24] == 0xff => self.dispatch.udp_group(p),
                        Some(p) => self.dispatch.udp(p),
                        None => None,
                    };
                    if let Some(n) = n {
                        return n;
                    }
                }
                if d[24] == 0xff || self.punt_host(b.hdr.rx_if) {
                    // A host stack behind `punt` serves (or refuses) the port; to a
                    // group no port unreachable is sent (RFC 4443 §2.4 e.3).
                    cx.count(LocalCounter::Punted, 1);
                    return LocalNext::Punt.next();
                }
                let code = icmpv6::unreach::PORT;
                crate::icmp_error::request(b.hdr, icmpv6::kind::DEST_UNREACH, code, 0);
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
/// `ip6-icmp-error`: the family-neutral node ([`crate::icmp_error`]) over IPv6 (RFC 4443):
/// errors quoting up to the 1280-byte minimum MTU, from the rx interface's global address
/// (its link-local for a link-local destination, or when it has no global one); none about
/// an ICMPv6 error, from `::` or multicast, nor to multicast but packet too big (§2.4 e).
impl IcmpErrorFamily for Ip6Shared {
    type Addr = u128;
    const NODE: &'static str = IP6_ICMP_ERROR;
    const LOOKUP: &'static str = IP6_LOOKUP;
    const COUNTERS: &'static [CounterDesc] = &CounterDesc::reworded(
        IcmpErrorCounter::DESCS,
        [
            "ICMPv6 errors sent",
            "ICMPv6 error rate limited",
            "no source address for ICMPv6 error",
            "ICMPv6 error not sent (about an error, multicast or unspecified)",
            "no headroom for the ICMPv6 error",
            "shorter than an ip6 header",
        ],
    );
    const MIN_LEN: usize = HEADER_LEN;
    const HEADERS: usize = HEADER_LEN + 8;
    const MAX_LEN: usize = 1280;

    fn error_to(d: &[u8], kind: u8) -> Option<u128> {
        let about_error = d[field::NEXT_HEADER] == next_header::ICMPV6
            && d.get(HEADER_LEN)
                .is_some_and(|&t| icmpv6::kind::is_error(t));
        let src = addr_at(d, field::SRC);
        let to_group = d[field::DST] == 0xff && kind != icmpv6::kind::PKT_TOO_BIG;
        let suppressed = about_error || src == 0 || d[field::SRC] == 0xff || to_group;
        (!suppressed).then_some(src)
    }

    fn error_from(&self, rx_if: u32, to: u128) -> Option<u128> {
        let a = self.if_addrs(rx_if);
        let src = if a.global != 0 && !super::is_link_local(to) {
            a.global
        } else {
            a.ll
        };
        Some(src).filter(|&s| s != 0)
    }

    fn write(d: &mut [u8], from: u128, to: u128, (kind, code, mtu): (u8, u8, u32)) {
        let payload = (d.len() - HEADER_LEN) as u16;
        let (h, m) = d.split_at_mut(HEADER_LEN);
        h.fill(0);
        h[0] = 0x60;
        h[field::PAYLOAD_LEN..field::PAYLOAD_LEN + 2].copy_from_slice(&payload.to_be_bytes());
        h[field::NEXT_HEADER] = next_header::ICMPV6;
        h[field::HOP_LIMIT] = 255;
        h[field::SRC..field::SRC + 16].copy_from_slice(&from.to_be_bytes());
        h[field::DST..field::DST + 16].copy_from_slice(&to.to_be_bytes());
        m[..8].fill(0);
        m[0] = kind;
        m[1] = code;
        if kind == icmpv6::kind::PKT_TOO_BIG {
            m[4..8].copy_from_slice(&mtu.to_be_bytes());
        }
        Icmpv6Packet::new_unchecked(m).fill_checksum(Ipv6Addr::from(from), Ipv6Addr::from(to));
    }
}

// ---------------------------------------------------------------------------------------
/// `ip6-glean`: the family-neutral node ([`crate::glean`]) over IPv6: a neighbor
/// solicitation to the target's solicited-node group from the interface's link-local
/// address (its global one if it has none). An incomplete adjacency's next hop is in a
/// side table (`Ip6Shared::incomplete`, under a lock), so such packets are throttled by
/// their adjacency (bit 127 set: never a unicast destination) before it is read.
impl GleanFamily for Ip6Shared {
    type Key = u128;
    type Request = [u8; 14 + 40 + 32];
    const NODE: &'static str = IP6_GLEAN;
    const COUNTERS: &'static [CounterDesc] = &CounterDesc::reworded(
        GleanCounter::DESCS,
        [
            "neighbor solicitations sent",
            "neighbor solicitations throttled",
            "no buffer for neighbor solicitation",
            "no IPv6 source address on the interface",
            "shorter than an ip6 header",
            "no solicitation for a directed broadcast (IPv4 only)",
            "incomplete adjacency without next hop",
        ],
    );

    fn adj(&self, ai: u32) -> Adj {
        self.adj.get(ai)
    }

    fn key(&self, adj: &Adj, ai: u32, d: &[u8]) -> Result<u128, GleanCounter> {
        match adj.kind {
            AdjKind::Incomplete => Ok((1u128 << 127) | ai as u128),
            _ if d.len() < HEADER_LEN => Err(GleanCounter::Truncated),
            _ => Ok(addr_at(d, field::DST)),
        }
    }

    fn request(&self, adj: &Adj, ai: u32, key: u128) -> Result<Self::Request, GleanCounter> {
        let target = if adj.kind == AdjKind::Incomplete {
            let m = self.incomplete.read();
            m.ok()
                .and_then(|m| m.get(&ai).copied())
                .ok_or(GleanCounter::NoNextHop)?
        } else {
            key
        };
        let a = self.if_addrs(adj.tx_if);
        let src = if a.ll != 0 { a.ll } else { a.global };
        if src == 0 {
            return Err(GleanCounter::NoSource);
        }
        let my_mac = self.if_attr(adj.tx_if).mac_bytes();
        let dst_mac =
            <super::Ip6Control as crate::ip_family::IpControl>::mcast_mac(solicited_node(target));
        Ok(neighbor_solicit(
            my_mac,
            src,
            dst_mac,
            solicited_node(target),
            target,
        ))
    }
}

/// A neighbor solicitation frame (Ethernet header included) for `target`, from
/// `my_mac`/`src` to `dst_mac`/`dst` (the solicited-node group, or the neighbour itself for
/// an aging probe), with the source link-layer address option.
pub(crate) fn neighbor_solicit(
    my_mac: [u8; 6],
    src: u128,
    dst_mac: [u8; 6],
    dst: u128,
    target: u128,
) -> [u8; 14 + 40 + 32] {
    let mut f = [0u8; 14 + 40 + 32];
    f[0..6].copy_from_slice(&dst_mac);
    f[6..12].copy_from_slice(&my_mac);
    f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    let ns = NdiscRepr::NeighborSolicit {
        target: Ipv6Addr::from(target),
        lladdr: Some(Mac(my_mac)),
    };
    write_nd(&mut f[14..], src, dst, &ns);
    f
}

/// Writes a 72-byte NS or NA (with its link-layer address option) at the start of `d`: the
/// IPv6 header (hop limit 255, RFC 4861 §7.1) from `src` to `dst`, the message, its checksum.
fn write_nd(d: &mut [u8], src: u128, dst: u128, r: &NdiscRepr) {
    d[0..4].copy_from_slice(&[0x60, 0, 0, 0]);
    d[4..6].copy_from_slice(&32u16.to_be_bytes());
    d[6] = next_header::ICMPV6;
    d[7] = 255;
    d[8..24].copy_from_slice(&src.to_be_bytes());
    d[24..40].copy_from_slice(&dst.to_be_bytes());
    let mut m = Icmpv6Packet::new_unchecked(&mut d[40..72]);
    r.emit(&mut m);
    m.fill_checksum(Ipv6Addr::from(src), Ipv6Addr::from(dst));
}

/// `ip6-neighbor-process` (see [`crate::ip_family::NeighborProcess`]): applies the
/// neighbours `ip6-local` learned, ages them with unicast neighbor solicitations.
pub type Neighbor6Process = crate::ip_family::NeighborProcess<super::Ip6Control>;

/// Registers the IPv6 nodes.
pub fn register(
    r: &mut crate::plugin::Registrar,
    shared: Arc<Ip6Shared>,
    slot: Arc<Mutex<CtlSlot>>,
) {
    let fslot = crate::ip4::nodes::arc_slot(r, IP6_INPUT);
    let rslot = crate::ip4::nodes::arc_slot(r, IP6_REWRITE);
    let b = &mut r.graph;
    let s = shared.clone();
    b.register(
        NodeRegistration::new(IP6_INPUT, NodeKind::Internal, move |_| {
            Box::new(Ip6Input {
                own: s.own.clone(),
                slow: Ip6InputSlow {
                    slot: fslot,
                    shared: s.clone(),
                    own: s.own.clone(),
                    features_any: false,
                },
            })
        })
        .nexts(InputNext::NAMES)
        .counters(InputCounter::DESCS),
    );
    let s = shared.clone();
    b.register(
        NodeRegistration::new(IP6_LOOKUP, NodeKind::Internal, move |_| {
            Box::new(Ip6Lookup {
                shared: s.clone(),
                dst: [[0; 16]; FRAME_SIZE],
                res: [0; FRAME_SIZE],
            })
        })
        .nexts(LookupNext::NAMES)
        .counters(LookupCounter::DESCS),
    );
    let s = shared.clone();
    b.register(
        NodeRegistration::new(IP6_REWRITE, NodeKind::Internal, move |_| {
            Box::new(Ip6Rewrite {
                adj: s.adj.clone(),
                slow: Ip6RewriteSlow {
                    shared: s.clone(),
                    slot: rslot,
                    cached: Adj::DROP,
                    cached_fast: FastAdj::NONE,
                    out_any: false,
                    cached_out: RewriteNext::Output.next(),
                },
            })
        })
        .nexts(RewriteNext::NAMES)
        .counters(RewriteCounter::DESCS),
    );
    let s = shared.clone();
    b.register(
        NodeRegistration::new(IP6_LOCAL, NodeKind::Internal, move |_| {
            Box::new(PerPacket::new(Ip6Local {
                shared: s.clone(),
                dispatch: Default::default(),
            }))
        })
        .nexts(LocalNext::NAMES)
        .counters(LocalCounter::DESCS),
    );
    crate::icmp_error::register(b, shared.clone());
    crate::glean::register(b, shared);
    b.register(
        NodeRegistration::new(NEIGHBOR_PROCESS, NodeKind::Process, move |_| {
            Box::new(Neighbor6Process::new(slot.clone()))
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
        // What ip6-lookup may see from a feature that shortened a packet: no panic.
        for n in 0..40 {
            assert_eq!(flow_hash(&[0x60; 64][..n]), 0, "{n} bytes");
        }
        // UDP whose ports are cut off: hashed without them.
        let mut p = [0u8; 44];
        p[0] = 0x60;
        p[6] = 17;
        p[40..44].copy_from_slice(&[0x12, 0x34, 0x56, 0x78]);
        assert_eq!(flow_hash(&p[..43]), flow_hash(&p[..40]));
        assert_ne!(
            flow_hash(&p[..40]),
            flow_hash(&p),
            "ports take part in the hash"
        );
    }
}
