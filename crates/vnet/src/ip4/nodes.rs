//! The IPv4 path's nodes. Each node's header: name, metadata used/set, next arcs, counters.
//!
//! Packet bytes are parsed with `sluice_wire` views (never panic); every drop sets a counter.

use super::{CtlSlot, Ip4Shared};
use crate::interface::{counter, IfCounters};
use sluice_buffer::flags::{L2_TO_BVI, LOCALLY_ORIGINATED};
use sluice_buffer::{BufIdx, Buffer};
use sluice_fib::adj::{Adj, AdjKind};
use sluice_graph::{
    CounterDesc, Cx, Next, NodeFn, NodeKind, NodeRegistration, PacketNode, PerPacket, Suspend,
    TraceRecord, Wake, FRAME_SIZE,
};
use sluice_wire::arp::{self, ArpRepr};
use sluice_wire::ethernet::ethertype;
use sluice_wire::icmp;
use sluice_wire::ipv4::{proto, Ipv4Packet};
use sluice_wire::{checksum, Mac};
use std::any::Any;
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// Node names.
pub const ETHERNET_INPUT: &str = "ethernet-input";
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
/// `arp-input`.
pub const ARP_INPUT: &str = "arp-input";
/// `ip4-glean`.
pub const IP4_GLEAN: &str = "ip4-glean";
/// `ip4-neighbor-process`.
pub const NEIGHBOR_PROCESS: &str = "ip4-neighbor-process";
/// `l2-input` (see `crate::l2`).
pub const L2_INPUT: &str = crate::l2::L2_INPUT;

/// `feature_meta[0]` of a buffer sent to `ip4-icmp-error`: `type << 8 | code`, and
/// `feature_meta[1]`: the MTU for "fragmentation needed".
const ICMP_META: usize = 0;
const ICMP_MTU: usize = 1;

// ---------------------------------------------------------------------------------------
/// `ethernet-input`: classifies frames by EtherType and strips the Ethernet header.
///
/// - uses: `rx_if`; reads the interface MAC from the shared attribute table.
/// - sets: `l2.l2_hdr_offset`, `ip.l3_hdr_offset`, `ip.fib_index` (the rx interface's IPv4
///   or IPv6 table); advances `current_data` to the L3 header.
///   A frame tagged for a VLAN sub-interface (802.1Q, 802.1ad/0x9100 outer with optional
///   802.1Q inner) gets `rx_if` = the sub-interface and its tags removed (the MACs move up),
///   then is classified like an untagged frame of that interface.
/// - next: `error-drop` (0) on errors; `ip4-input` (1) for IPv4; `arp-input` (2) for ARP;
///   `l2-input` (3) for every frame of an L2 interface: cross-connected (`tx_if` = the peer,
///   `l2.bd_index` = 0) or bridged (`l2.bd_index` = the bridge domain) — or the first
///   feature enabled on the rx interface's `l2-input` arc; `ip6-input` (4) for IPv6; every
///   frame of an interface with an input redirect (`crate::set_rx_redirect`, e.g.
///   `tester-rx`) goes unchanged to the redirect's arc (added at runtime), before any check.
///   Frames of an admin-down interface (or sub-interface) go to `error-drop` first of all.
/// - counters: `unknown_ethertype`, `l3_mac_mismatch` (unicast not for this interface's MAC
///   on an L3 interface that is not promiscuous; L2 interfaces take every frame), `tagged`
///   (VLAN-tagged frame and no sub-interface), `runt` (shorter than a header), `down`
///   (received on an admin-down interface).
///
/// Cost: the interface's attributes (MAC, mode, admin state, promiscuous flag) are read once
/// per run of packets from one interface (normally once per frame); the admin-down drop
/// shares the per-packet test of the input redirect, and the promiscuous flag is looked at
/// only for a frame that failed the MAC compare — neither adds work to the forwarding path.
pub struct EthernetInput {
    shared: Arc<Ip4Shared>,
    /// VLAN sub-interfaces: (parent, outer VLAN, inner VLAN or 0) → (sub-interface, its
    /// counters). A per-thread copy, replaced by the control plane (`subif`).
    pub(crate) subs: HashMap<(u32, u16, u16), (u32, Arc<IfCounters>)>,
    // Per-frame cache of the last rx interface's MAC and L2 mode.
    cached_if: Option<u32>,
    // The MAC as the low 48 bits of a little-endian load of the frame's first 8 bytes.
    cached_mac: u64,
    // Whether the interface is cross-connected or bridged (one test for the L3 fast path).
    cached_l2_mode: bool,
    cached_l2: u32,
    cached_bd: u32,
    cached_fib: [u32; 2],
    /// 0, an input redirect's arc + 1, or [`RX_DOWN`].
    cached_redirect: u32,
    cached_promisc: bool,
    // ... and the `l2-input` arc's next for it, while any interface has `l2-input` features
    // (per frame).
    l2_any: bool,
    cached_l2_next: Next,
    slot: usize,
}

const E_UNKNOWN_ET: u16 = 0;
const E_MAC_MISMATCH: u16 = 1;
const E_TAGGED: u16 = 2;
const E_RUNT: u16 = 3;
const E_DOWN: u16 = 4;
/// `cached_redirect` of an admin-down interface: every frame is dropped.
const RX_DOWN: u32 = u32::MAX;
/// Outer TPID some switches use for QinQ (pre-802.1ad).
const QINQ_9100: u16 = 0x9100;

#[derive(Copy, Clone)]
struct EthTrace {
    dst: [u8; 6],
    src: [u8; 6],
    et: u16,
}

impl TraceRecord for EthTrace {
    fn format(&self, out: &mut String) {
        out.push_str(&format!(
            "{}: {} -> {}",
            match self.et {
                ethertype::IPV4 => "IP4".to_string(),
                ethertype::ARP => "ARP".to_string(),
                ethertype::IPV6 => "IP6".to_string(),
                v => format!("0x{v:04x}"),
            },
            Mac(self.src),
            Mac(self.dst)
        ));
    }
}

impl EthernetInput {
    /// A tagged frame: when its tags match a sub-interface of `rx_if`, pops them and
    /// classifies the frame again as received untagged on the sub-interface.
    #[inline(always)]
    fn sub_interface(&mut self, et: u16, cx: &mut Cx, b: &mut Buffer<'_>) -> Option<Next> {
        if !matches!(et, ethertype::VLAN | ethertype::QINQ | QINQ_9100) || self.subs.is_empty() {
            return None;
        }
        self.pop_and_reclassify(cx, b)
    }

    #[inline(never)]
    fn pop_and_reclassify(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Option<Next> {
        self.pop_tags(cx, b)?;
        Some(self.process_one(cx, b))
    }

    /// Matches the frame's tags to a sub-interface; on a match strips them, sets `rx_if`
    /// and counts rx on the sub-interface.
    fn pop_tags(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Option<()> {
        let d = b.data();
        if d.len() < 18 {
            return None;
        }
        let outer = u16::from_be_bytes([d[14], d[15]]) & 0x0fff;
        let et2 = u16::from_be_bytes([d[16], d[17]]);
        let (inner, n) = if et2 == ethertype::VLAN && d.len() >= 22 {
            (u16::from_be_bytes([d[18], d[19]]) & 0x0fff, 8)
        } else {
            (0, 4)
        };
        let (sub, counters) = self.subs.get(&(b.hdr.rx_if, outer, inner))?;
        let len = b.total_len() as u64;
        counters.add(cx.thread(), counter::RX_PACKETS, 1);
        counters.add(cx.thread(), counter::RX_BYTES, len);
        b.hdr.rx_if = *sub;
        let d = b.data_mut();
        d.copy_within(0..12, n);
        b.advance(n);
        Some(())
    }
}

impl EthernetInput {
    /// A frame of an interface with an input redirect, or of an admin-down interface.
    #[inline(never)]
    fn redirect_or_down(&self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        if self.cached_redirect == RX_DOWN {
            b.hdr.error = cx.error(E_DOWN);
            return Next(0);
        }
        Next((self.cached_redirect - 1) as u16)
    }

    /// `l2-input`, or the first `l2-input` arc feature of the cached rx interface.
    #[inline(always)]
    fn l2_next(&self) -> Next {
        if self.l2_any {
            self.cached_l2_next
        } else {
            Next(3)
        }
    }
}

impl PacketNode for EthernetInput {
    #[inline(always)]
    fn begin_frame(&mut self, _cx: &mut Cx) {
        self.cached_if = None;
        self.l2_any = self.shared.features.any(self.slot);
    }

    #[inline(always)]
    fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        if self.cached_if != Some(b.hdr.rx_if) {
            let a = self.shared.if_attr(b.hdr.rx_if);
            self.cached_if = Some(b.hdr.rx_if);
            let m = a.mac_bytes();
            self.cached_mac = u64::from_le_bytes([m[0], m[1], m[2], m[3], m[4], m[5], 0, 0]);
            self.cached_l2 = a.l2_xc.load(Ordering::Relaxed);
            self.cached_bd = a.l2_bd.load(Ordering::Relaxed);
            self.cached_l2_mode = self.cached_l2 != 0 || self.cached_bd != 0;
            self.cached_redirect = if a.admin_up.load(Ordering::Relaxed) {
                a.rx_redirect.load(Ordering::Relaxed)
            } else {
                RX_DOWN
            };
            self.cached_promisc = a.promisc.load(Ordering::Relaxed);
            self.cached_fib = [
                a.fib4.load(Ordering::Relaxed),
                a.fib6.load(Ordering::Relaxed),
            ];
            if self.l2_any && (self.cached_l2 != 0 || self.cached_bd != 0) {
                self.cached_l2_next = self.shared.features.next(self.slot, b.hdr.rx_if, Next(3));
            }
        }
        if self.cached_redirect != 0 {
            return self.redirect_or_down(cx, b);
        }
        let Some(h) = b.data().first_chunk::<14>() else {
            b.hdr.error = cx.error(E_RUNT);
            return Next(0);
        };
        let et = u16::from_be_bytes([h[12], h[13]]);
        // Destination MAC: 48 bits of one load (bit 0 = the group bit of the first byte).
        let dst =
            u64::from_le_bytes([h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]]) & 0xffff_ffff_ffff;
        if b.hdr.is_traced() {
            let t = EthTrace {
                dst: [h[0], h[1], h[2], h[3], h[4], h[5]],
                src: [h[6], h[7], h[8], h[9], h[10], h[11]],
                et,
            };
            cx.trace(b, t);
        }
        if self.cached_l2_mode {
            // Tags are looked at off the L3 fast path (in the EtherType match below) and, on
            // L2 interfaces, before switching: a sub-interface match wins over the parent's
            // mode.
            if self.cached_l2 != 0 || (self.cached_bd != 0 && b.hdr.flags & L2_TO_BVI == 0) {
                if let Some(n) = self.sub_interface(et, cx, b) {
                    return n;
                }
            }
            if self.cached_l2 != 0 {
                // Cross-connected interface: the whole frame goes to l2-input, any destination.
                b.hdr.tx_if = self.cached_l2 - 1;
                b.hdr.l2.bd_index = 0;
                b.hdr.l2.l2_hdr_offset = b.hdr.current_data;
                return self.l2_next();
            }
            if self.cached_bd != 0 && b.hdr.flags & L2_TO_BVI == 0 {
                // Bridged interface: l2-input switches it in its bridge domain (unless the
                // bridge just switched it to this interface, its BVI: then it is routed below).
                b.hdr.l2.bd_index = self.cached_bd as u16;
                b.hdr.l2.l2_hdr_offset = b.hdr.current_data;
                return self.l2_next();
            }
        }
        if b.hdr.flags & (L2_TO_BVI | LOCALLY_ORIGINATED) != 0 {
            b.hdr.flags &= !(L2_TO_BVI | LOCALLY_ORIGINATED);
        }
        if dst & 1 == 0 && dst != self.cached_mac {
            // Not for this interface's MAC: perhaps for an L2 sub-interface.
            if let Some(n) = self.sub_interface(et, cx, b) {
                return n;
            }
            if !self.cached_promisc {
                b.hdr.error = cx.error(E_MAC_MISMATCH);
                return Next(0);
            }
        }
        let next = match et {
            ethertype::IPV4 => {
                b.hdr.ip.fib_index = self.cached_fib[0];
                Next(1)
            }
            ethertype::ARP => {
                b.hdr.ip.fib_index = self.cached_fib[0];
                Next(2)
            }
            ethertype::IPV6 => {
                b.hdr.ip.fib_index = self.cached_fib[1];
                Next(4)
            }
            ethertype::VLAN | ethertype::QINQ | QINQ_9100 => {
                if let Some(n) = self.sub_interface(et, cx, b) {
                    return n;
                }
                b.hdr.error = cx.error(E_TAGGED);
                return Next(0);
            }
            _ => {
                b.hdr.error = cx.error(E_UNKNOWN_ET);
                return Next(0);
            }
        };
        b.hdr.l2.l2_hdr_offset = b.hdr.current_data;
        b.advance(14);
        b.hdr.ip.l3_hdr_offset = b.hdr.current_data;
        next
    }
}

// ---------------------------------------------------------------------------------------
/// `ip4-input`: validates IPv4 headers (RFC 1812 §5.2.2) and trims Ethernet padding.
///
/// - uses: the packet at `current_data` (an IPv4 header).
/// - sets: trims `current_length` to the IPv4 total length.
/// - next: `error-drop` (0) for malformed packets; `ip4-lookup` (1), or the first feature
///   enabled on the rx interface's `ip4-unicast` arc.
/// - counters: `too_short` (ip4 length < 20 bytes), `version` (ip4 version != 4), `bad_ihl`
///   (ip4 header length < 20), `bad_length` (ip4 length > l2 length or < header),
///   `bad_checksum` (bad ip4 checksum).
pub struct Ip4Input {
    shared: Arc<Ip4Shared>,
    slot: usize,
    // Per frame: whether any interface has `ip4-unicast` features (else every packet goes
    // to ip4-lookup without a per-interface table read).
    features_any: bool,
}

const E_TOO_SHORT: u16 = 0;
const E_VERSION: u16 = 1;
const E_IHL: u16 = 2;
const E_BAD_LENGTH: u16 = 3;
const E_CHECKSUM: u16 = 4;

impl Ip4Input {
    /// Everything but the common 20-byte header (too short, IHL/version != 0x45): the
    /// checks one by one, in RFC 1812 order. The header's total length, or the drop arc.
    #[cold]
    #[inline(never)]
    fn check_slow(cx: &mut Cx, b: &mut Buffer<'_>) -> Result<usize, Next> {
        let d = b.data();
        if d.len() < 20 {
            b.hdr.error = cx.error(E_TOO_SHORT);
            return Err(Next(0));
        }
        if d[0] >> 4 != 4 {
            b.hdr.error = cx.error(E_VERSION);
            return Err(Next(0));
        }
        let ihl = ((d[0] & 0xf) as usize) * 4;
        if ihl < 20 {
            b.hdr.error = cx.error(E_IHL);
            return Err(Next(0));
        }
        let total = u16::from_be_bytes([d[2], d[3]]) as usize;
        // The header must be in the first buffer; the packet may continue in a chain.
        if total < ihl || ihl > d.len() || (total > d.len() && total > b.total_len()) {
            b.hdr.error = cx.error(E_BAD_LENGTH);
            return Err(Next(0));
        }
        if checksum::sum(&d[..ihl]) != 0xffff {
            b.hdr.error = cx.error(E_CHECKSUM);
            return Err(Next(0));
        }
        Ok(total)
    }
}

impl PacketNode for Ip4Input {
    #[inline(always)]
    fn begin_frame(&mut self, _cx: &mut Cx) {
        self.features_any = self.shared.features.any(self.slot);
    }

    #[inline(always)]
    fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        let d = b.data();
        let len = d.len();
        // Fast path: version 4 with a 20-byte header is one byte compare; the header checks
        // are then the length and a branch-free checksum over five words.
        let total = match d.first_chunk::<20>() {
            Some(h) if h[0] == 0x45 => {
                let total = u16::from_be_bytes([h[2], h[3]]) as usize;
                let valid = checksum::ip4_header_valid(h);
                // The packet may continue in a buffer chain.
                if total < 20 || (total > len && total > b.total_len()) {
                    b.hdr.error = cx.error(E_BAD_LENGTH);
                    return Next(0);
                }
                if !valid {
                    b.hdr.error = cx.error(E_CHECKSUM);
                    return Next(0);
                }
                total
            }
            _ => match Self::check_slow(cx, b) {
                Ok(t) => t,
                Err(n) => return n,
            },
        };
        if total < len && b.chain_rest_len() == 0 {
            b.set_len(total);
        }
        if self.features_any {
            self.shared.features.next(self.slot, b.hdr.rx_if, Next(1))
        } else {
            Next(1)
        }
    }
}

// ---------------------------------------------------------------------------------------
/// `ip4-lookup`: longest-prefix match on the destination, four packets at a time.
///
/// - uses: the IPv4 header at `current_data`; `ip.fib_index` (the table: frames all in table
///   0 take the four-at-a-time path, others one lookup per packet in their table).
/// - sets: `ip.adj_index`; `ip.flow_hash` for ECMP routes (5-tuple hash picks the
///   load-balance bucket).
/// - next: `error-drop` (0) when no route; `ip4-rewrite` (1); `ip4-local` (2);
///   `ip4-glean` (3) for adjacencies that need ARP first.
/// - counters: `no_route` (no route to destination), `drop_route` (drop route).
pub struct Ip4Lookup {
    shared: Arc<Ip4Shared>,
    nexts: [u16; FRAME_SIZE],
    dst: [u32; FRAME_SIZE],
}

const E_NO_ROUTE: u16 = 0;
const E_DROP_ROUTE: u16 = 1;

impl NodeFn for Ip4Lookup {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        let arena = cx.arena();
        let fib = &*self.shared.fib;
        let adj = &*self.shared.adj;
        let (e_none, e_drop) = (cx.error(E_NO_ROUTE), cx.error(E_DROP_ROUTE));
        let n = frame.len().min(FRAME_SIZE);
        // Kind of the last adjacency seen (consecutive packets usually share one).
        let mut last: Option<(u32, AdjKind)> = None;
        // Pass 1: destinations of the whole frame (buffers prefetched ahead), so pass 2's
        // table loads are independent and overlap in the memory system.
        let mut any_vrf = 0;
        for (j, &b) in frame[..n].iter().enumerate() {
            if let Some(&ahead) = frame.get(j + 4) {
                arena.prefetch(ahead);
            }
            // SAFETY: this node owns the frame; one view at a time.
            let v = unsafe { arena.buffer(b) };
            // ip4-input guaranteed a full header (a short one would look up 0.0.0.0).
            let a = v
                .data()
                .first_chunk::<20>()
                .map_or(0, |h| u32::from_be_bytes([h[16], h[17], h[18], h[19]]));
            self.dst[j] = a;
            any_vrf |= v.hdr.ip.fib_index;
        }
        // Pass 2: lookups, four at a time.
        let mut i = 0;
        while i < n {
            let k = (n - i).min(4);
            let mut dst = [0u32; 4];
            dst[..k].copy_from_slice(&self.dst[i..i + k]);
            let res = if any_vrf == 0 {
                fib.lookup_x4(dst)
            } else {
                std::array::from_fn(|j| {
                    (j < k)
                        .then(|| {
                            // SAFETY: this node owns the frame; read-only header access.
                            let f = unsafe { arena.header(frame[i + j]) }.ip.fib_index;
                            self.shared.lookup(f, dst[j])
                        })
                        .flatten()
                })
            };
            for (j, &bi) in frame[i..i + k].iter().enumerate() {
                let res = match res[j] {
                    Some(x) if x >= super::LB_FLAG => {
                        // SAFETY: as above; the view ends with this block.
                        let v = unsafe { arena.buffer(bi) };
                        let h = flow_hash(v.data());
                        v.hdr.ip.flow_hash = h;
                        Some(self.shared.lb.pick(x & (super::LB_FLAG - 1), h))
                    }
                    r => r,
                };
                // SAFETY: as above; only the header is needed from here on.
                let hdr = unsafe { arena.header_mut(bi) };
                self.nexts[i + j] = match res {
                    None => {
                        hdr.error = e_none;
                        0
                    }
                    Some(a) => {
                        hdr.ip.adj_index = a;
                        let kind = match last {
                            Some((la, k)) if la == a => k,
                            _ => {
                                let k = adj.kind(a);
                                last = Some((a, k));
                                k
                            }
                        };
                        match kind {
                            AdjKind::Rewrite => 1,
                            AdjKind::Local => 2,
                            AdjKind::Glean | AdjKind::Incomplete => 3,
                            AdjKind::Drop => {
                                hdr.error = e_drop;
                                0
                            }
                        }
                    }
                };
            }
            i += k;
        }
        cx.enqueue_to_next(&frame[..n], &self.nexts[..n]);
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// 5-tuple flow hash of an IPv4 packet (addresses, protocol, and ports for the first fragment
/// of UDP/TCP), for ECMP bucket choice: one flow always takes one path. A packet shorter
/// than a header (never from ip4-input; `ip4-lookup` looks it up as 0.0.0.0) hashes to 0.
#[inline(always)]
fn flow_hash(ip: &[u8]) -> u32 {
    let Some(hdr) = ip.first_chunk::<20>() else {
        return 0;
    };
    let w = |b: &[u8], i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let ihl = ((hdr[0] & 0xf) as usize) * 4;
    let first_frag = u16::from_be_bytes([hdr[6], hdr[7]]) & 0x1fff == 0;
    let ports = match ip.get(ihl..ihl + 4) {
        Some(p) if (hdr[9] == 6 || hdr[9] == 17) && first_frag => w(p, 0),
        _ => 0,
    };
    let mut h = (w(hdr, 12) as u64) << 32 | w(hdr, 16) as u64;
    h ^= ((ports as u64) << 8) | hdr[9] as u64;
    h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= h >> 29;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (h >> 32) as u32
}

// ---------------------------------------------------------------------------------------
/// `ip4-rewrite`: TTL decrement with incremental checksum (RFC 1624), MTU check, L2 rewrite.
///
/// - uses: `ip.adj_index` (a Rewrite adjacency); the `LOCALLY_ORIGINATED` flag (TTL kept).
/// - sets: `tx_if`; writes the adjacency's Ethernet header into the headroom; on errors
///   `feature_meta[0..2]` for `ip4-icmp-error`.
/// - next: `error-drop` (0); `interface-output` (1), or the first feature enabled on the tx
///   interface's `ip4-output` arc; `ip4-icmp-error` (2) for TTL expiry and DF packets over
///   the MTU.
/// - counters: `ttl_expired` (ip4 ttl <= 1, info: an ICMP error follows), `mtu_exceeded`
///   (packet larger than MTU and fragmentation not supported), `no_headroom`, `truncated`
///   (less than a 20-byte header: never from ip4-input, counted rather than trusted).
pub struct Ip4Rewrite {
    shared: Arc<Ip4Shared>,
    slot: usize,
    // Per-frame cache: consecutive packets usually share an adjacency.
    cached: Option<RewriteCache>,
    // Per frame: whether any interface has `ip4-output` features.
    out_any: bool,
}

#[derive(Copy, Clone)]
/// What `ip4-rewrite` needs of the last adjacency, in the form the per-packet code uses.
struct RewriteCache {
    index: u32,
    rewrite: [u8; 14],
    tx_if: u32,
    /// The MTU, `usize::MAX` for none (0).
    mtu: usize,
    /// `interface-output`, or the first `ip4-output` feature of `tx_if`.
    next: Next,
}

impl Ip4Rewrite {
    fn load(&self, index: u32) -> RewriteCache {
        let a: Adj = self.shared.adj.get(index);
        RewriteCache {
            index,
            rewrite: a.rewrite,
            tx_if: a.tx_if,
            mtu: if a.mtu == 0 {
                usize::MAX
            } else {
                a.mtu as usize
            },
            next: if self.out_any {
                self.shared.features.next(self.slot, a.tx_if, Next(1))
            } else {
                Next(1)
            },
        }
    }
}

const E_TTL: u16 = 0;
const E_MTU: u16 = 1;
const E_HEADROOM: u16 = 2;
const E_TRUNCATED: u16 = 3;

impl PacketNode for Ip4Rewrite {
    #[inline(always)]
    fn begin_frame(&mut self, _cx: &mut Cx) {
        self.cached = None;
        self.out_any = self.shared.features.any(self.slot);
    }

    #[inline(always)]
    fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        let ai = b.hdr.ip.adj_index;
        let RewriteCache {
            rewrite,
            tx_if,
            mtu,
            next,
            ..
        } = match self.cached {
            Some(c) if c.index == ai => c,
            _ => {
                let c = self.load(ai);
                self.cached = Some(c);
                c
            }
        };
        let len = b.total_len();
        let local = b.hdr.flags & LOCALLY_ORIGINATED != 0;
        let Some(h) = b.data_mut().first_chunk_mut::<20>() else {
            b.hdr.error = cx.error(E_TRUNCATED);
            return Next(0);
        };
        // TTL, protocol and checksum as one word: the TTL check and the decrement with the
        // incremental checksum update (RFC 1624) are a few ALU operations on it.
        let w = u32::from_be_bytes([h[8], h[9], h[10], h[11]]);
        if w >> 24 <= 1 && !local {
            b.hdr.feature_meta[ICMP_META] = (icmp::kind::TIME_EXCEEDED as u64) << 8;
            cx.count(E_TTL as usize, 1);
            return Next(2);
        }
        if len > mtu {
            if h[6] & 0x40 != 0 {
                b.hdr.feature_meta[ICMP_META] = ((icmp::kind::DEST_UNREACH as u64) << 8) | 4;
                b.hdr.feature_meta[ICMP_MTU] = mtu as u64;
                return Next(2);
            }
            b.hdr.error = cx.error(E_MTU);
            return Next(0);
        }
        if !local {
            h[8..12].copy_from_slice(&checksum::ip4_ttl_decrement(w).to_be_bytes());
        }
        match b.push_front(14).and_then(|h| h.first_chunk_mut::<14>()) {
            Some(h) => *h = rewrite,
            None => {
                b.hdr.error = cx.error(E_HEADROOM);
                return Next(0);
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
/// - sets: rewrites echo requests into replies; `feature_meta[0]` for port unreachable.
/// - next: `error-drop` (0); `ip4-lookup` (1) for replies; `ip4-icmp-error` (2) for UDP to a
///   closed port; `punt` (3) for other protocols, and for UDP when the rx interface has a
///   host stack behind `punt` (`IfAttr::punt_host`, linux-cp); for UDP to a port a node
///   registered (`crate::udp_local`), the arc added to that node.
/// - counters: `echo_replies` (info), `bad_icmp` (truncated or bad ICMP checksum),
///   `punted` (info: other protocols for the router), `ping_replies` (info: echo replies to
///   the CLI `ping`, consumed).
pub struct Ip4Local {
    shared: Arc<Ip4Shared>,
}

const C_ECHO: u16 = 0;
const E_BAD_ICMP: u16 = 1;
const C_PUNT: u16 = 2;
const C_PING_REPLY: u16 = 3;

impl PacketNode for Ip4Local {
    fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        let d = b.data_mut();
        let ihl = ((d[0] & 0xf) as usize) * 4;
        match d[9] {
            proto::ICMP => {
                if d.len() < ihl + 8 || checksum::sum(&d[ihl..]) != 0xffff {
                    b.hdr.error = cx.error(E_BAD_ICMP);
                    return Next(0);
                }
                let kind = d[ihl];
                if kind == icmp::kind::ECHO_REPLY {
                    // A reply to the CLI ping: record it and consume the packet.
                    let id = u16::from_be_bytes([d[ihl + 4], d[ihl + 5]]);
                    let seq = u16::from_be_bytes([d[ihl + 6], d[ihl + 7]]);
                    let from = Ipv4Addr::new(d[12], d[13], d[14], d[15]);
                    if self.shared.ping.record(id, seq, from, d[8], cx.now_tsc()) {
                        b.hdr.error = cx.error(C_PING_REPLY);
                        return Next(0);
                    }
                }
                // An echo request to a multicast group (224.0.0.0/24 is received when a
                // host stack is paired, linux-cp) is the host stack's to answer, never
                // answered from the group address.
                if kind != icmp::kind::ECHO_REQUEST || d[16] >> 4 == 0xe {
                    cx.count(C_PUNT as usize, 1);
                    return Next(3);
                }
                let Ok(mut m) = icmp::IcmpPacket::new_checked(&mut d[ihl..]) else {
                    b.hdr.error = cx.error(E_BAD_ICMP);
                    return Next(0);
                };
                m.set_kind_code(icmp::kind::ECHO_REPLY, 0);
                m.fill_checksum();
                let mut ip = match Ipv4Packet::new_checked(&mut d[..]) {
                    Ok(p) => p,
                    Err(_) => {
                        b.hdr.error = cx.error(E_BAD_ICMP);
                        return Next(0);
                    }
                };
                let (s, t) = (ip.src(), ip.dst());
                ip.set_src(t);
                ip.set_dst(s);
                ip.set_ttl(64);
                ip.fill_checksum();
                b.hdr.flags |= LOCALLY_ORIGINATED;
                cx.count(C_ECHO as usize, 1);
                Next(1)
            }
            proto::UDP => {
                if d.len() >= ihl + 4 {
                    let port = u16::from_be_bytes([d[ihl + 2], d[ihl + 3]]);
                    if let Some(n) = self.shared.udp_ports.arc(false, port) {
                        // A node registered the port (`udp_local`, e.g. the host stack).
                        return n;
                    }
                }
                if self
                    .shared
                    .if_attr(b.hdr.rx_if)
                    .punt_host
                    .load(Ordering::Relaxed)
                {
                    // A host stack behind `punt` serves (or refuses) the port.
                    cx.count(C_PUNT as usize, 1);
                    return Next(3);
                }
                b.hdr.feature_meta[ICMP_META] = ((icmp::kind::DEST_UNREACH as u64) << 8) | 3;
                Next(2)
            }
            _ => {
                cx.count(C_PUNT as usize, 1);
                Next(3)
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
/// `ip4-icmp-error`: turns the packet into an ICMP error back to its source (RFC 792,
/// RFC 1812 §4.3.2): TTL exceeded, port unreachable, fragmentation needed. Rate limited per
/// thread (token bucket, 1000/s, burst 100).
///
/// - uses: `feature_meta[0]` (type << 8 | code), `feature_meta[1]` (MTU), `rx_if` (its
///   address is the error's source).
/// - sets: rewrites the packet in place (new IPv4 + ICMP header, quoting the original).
/// - next: `error-drop` (0); `ip4-lookup` (1).
/// - counters: `sent` (info), `rate_limited`, `no_source` (rx interface has no IPv4 address),
///   `suppressed` (about an ICMP error, a fragment or a broadcast: RFC 1812 §4.3.2.7),
///   `no_headroom` (no room to prepend the new headers).
pub struct Ip4IcmpError {
    shared: Arc<Ip4Shared>,
    limit: crate::ratelimit::TokenBucket,
}

const C_SENT: u16 = 0;
const E_RATE: u16 = 1;
const E_NO_SRC: u16 = 2;
const E_SUPPRESSED: u16 = 3;
const E_ICMP_HEADROOM: u16 = 4;

impl PacketNode for Ip4IcmpError {
    fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        if !self.limit.ready(cx) {
            b.hdr.error = cx.error(E_RATE);
            return Next(0);
        }
        let src = self.shared.if_attr(b.hdr.rx_if).ip4.load(Ordering::Relaxed);
        if src == 0 {
            b.hdr.error = cx.error(E_NO_SRC);
            return Next(0);
        }
        let d = b.data();
        let ihl = ((d[0] & 0xf) as usize) * 4;
        let orig_src = u32::from_be_bytes([d[12], d[13], d[14], d[15]]);
        let frag_off = u16::from_be_bytes([d[6], d[7]]) & 0x1fff;
        let is_icmp_error = d[9] == proto::ICMP
            && d.get(ihl)
                .is_some_and(|&t| t != icmp::kind::ECHO_REQUEST && t != icmp::kind::ECHO_REPLY);
        if is_icmp_error
            || frag_off != 0
            || orig_src == 0
            || orig_src >> 28 >= 0xe
            || orig_src == u32::MAX
        {
            b.hdr.error = cx.error(E_SUPPRESSED);
            return Next(0);
        }
        self.limit.take();
        // Quote as much of the original as fits in 576 bytes (RFC 1812 §4.3.2.3).
        let quote = d.len().min(576 - 28);
        let meta = b.hdr.feature_meta[ICMP_META];
        let mtu = b.hdr.feature_meta[ICMP_MTU] as u16;
        b.set_len(quote);
        let Some(h) = b.push_front(28) else {
            b.hdr.error = cx.error(E_ICMP_HEADROOM);
            return Next(0);
        };
        let total = (28 + quote) as u16;
        h.fill(0);
        h[0] = 0x45;
        h[2..4].copy_from_slice(&total.to_be_bytes());
        h[8] = 64;
        h[9] = proto::ICMP;
        h[12..16].copy_from_slice(&src.to_be_bytes());
        h[16..20].copy_from_slice(&orig_src.to_be_bytes());
        let c = checksum::internet_checksum(&h[..20]);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        let d = b.data_mut();
        d[20] = (meta >> 8) as u8;
        d[21] = meta as u8;
        if d[20] == icmp::kind::DEST_UNREACH && d[21] == 4 {
            d[26..28].copy_from_slice(&mtu.to_be_bytes());
        }
        let c = checksum::internet_checksum(&d[20..]);
        d[22..24].copy_from_slice(&c.to_be_bytes());
        b.hdr.flags |= LOCALLY_ORIGINATED;
        cx.count(C_SENT as usize, 1);
        Next(1)
    }
}

// ---------------------------------------------------------------------------------------
/// `arp-input`: answers ARP requests for any address of the receiving interface, learns
/// senders, and refreshes existing entries from gratuitous ARP.
///
/// - uses: `rx_if`, `ip.fib_index`; the ARP packet at `current_data`.
/// - sets: turns requests into replies in place (new Ethernet header in the headroom),
///   `tx_if` = `rx_if`.
/// - next: `error-drop` (0) for consumed or invalid packets; `interface-output` (1) for replies;
///   `punt` (2) for a copy of each request or reply for us received on an interface with a
///   host stack behind `punt` (`IfAttr::punt_host`, linux-cp).
/// - counters: `replies_sent` (info), `replies_received` (info, learned), `not_for_us`
///   (info: the target is not an address of the interface), `malformed` (not Ethernet/IPv4
///   ARP), `gratuitous` (info: a gratuitous ARP — request or reply with sender address ==
///   target address — which only updates an existing neighbour, as VPP: it never creates one),
///   `no_headroom` (no room for the reply's Ethernet header), `punt_copies` (info: copies
///   sent to `punt`), `no_punt_copy` (no buffer for the copy, or the frame is too long).
pub struct ArpInput {
    shared: Arc<Ip4Shared>,
}

const C_REPLIES_SENT: u16 = 0;
const C_REPLIES_RX: u16 = 1;
const C_NOT_FOR_US: u16 = 2;
const E_MALFORMED: u16 = 3;
const C_GARP: u16 = 4;
const E_ARP_HEADROOM: u16 = 5;
const C_COPIED: u16 = 6;
const E_NO_COPY: u16 = 7;
const NEXT_ARP_PUNT: Next = Next(2);

impl ArpInput {
    fn learn(&self, b: &Buffer<'_>, r: &ArpRepr, update_only: bool) {
        if let Ok(mut l) = self.shared.learned.lock() {
            if l.len() < 4096 {
                l.push(crate::neighbor::Learned::heard(
                    b.hdr.rx_if,
                    u32::from(r.spa),
                    r.sha.0,
                    !update_only,
                ));
            }
        }
    }
}

impl PacketNode for ArpInput {
    fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        let r = match ArpRepr::parse(b.data()) {
            Ok(r) => r,
            Err(_) => {
                b.hdr.error = cx.error(E_MALFORMED);
                return Next(0);
            }
        };
        if r.spa == r.tpa {
            // Gratuitous ARP: refreshes the sender's entry if it exists; never answered.
            self.learn(b, &r, true);
            b.hdr.error = cx.error(C_GARP);
            return Next(0);
        }
        // Ours when the target's route is a local address of this very interface (any of
        // its addresses, not only the first).
        let tpa = u32::from(r.tpa);
        let ours = self
            .shared
            .lookup(b.hdr.ip.fib_index, tpa)
            .filter(|&v| v < super::LB_FLAG)
            .map(|v| self.shared.adj.get(v))
            .is_some_and(|a| a.kind == AdjKind::Local && a.tx_if == b.hdr.rx_if);
        if !ours {
            b.hdr.error = cx.error(C_NOT_FOR_US);
            return Next(0);
        }
        self.learn(b, &r, false);
        if self
            .shared
            .if_attr(b.hdr.rx_if)
            .punt_host
            .load(Ordering::Relaxed)
        {
            // The host stack behind `punt` learns the neighbour (and sees replies to its
            // own requests) from a copy.
            match crate::interface::copy_frame(cx, b) {
                Some(c) => {
                    cx.count(C_COPIED as usize, 1);
                    cx.enqueue(NEXT_ARP_PUNT, c);
                }
                None => cx.count(E_NO_COPY as usize, 1),
            }
        }
        if r.op != arp::op::REQUEST {
            b.hdr.error = cx.error(C_REPLIES_RX);
            return Next(0);
        }
        let attr = self.shared.if_attr(b.hdr.rx_if);
        let my_mac = Mac(attr.mac_bytes());
        let reply = ArpRepr {
            op: arp::op::REPLY,
            sha: my_mac,
            spa: r.tpa,
            tha: r.sha,
            tpa: r.spa,
        };
        b.set_len(arp::LEN);
        reply.emit(b.data_mut());
        let Some(h) = b.push_front(14) else {
            b.hdr.error = cx.error(E_ARP_HEADROOM);
            return Next(0);
        };
        h[0..6].copy_from_slice(&r.sha.0);
        h[6..12].copy_from_slice(&my_mac.0);
        h[12..14].copy_from_slice(&ethertype::ARP.to_be_bytes());
        b.hdr.tx_if = b.hdr.rx_if;
        cx.count(C_REPLIES_SENT as usize, 1);
        Next(1)
    }
}

// ---------------------------------------------------------------------------------------
/// `ip4-glean`: a packet needs a neighbour that is not resolved: send an ARP request (at most
/// one per target per 10 ms per thread) and drop the packet, counted.
///
/// - uses: `ip.adj_index` (Glean: resolve the packet's destination; Incomplete: the
///   adjacency's next hop).
/// - sets: allocates the ARP request buffer (`tx_if` = the adjacency's interface).
/// - next: `error-drop` (0) for the triggering packet; `interface-output` (1) for requests.
/// - counters: `requests_sent` (info), `throttled` (request suppressed, packet dropped),
///   `no_buffer` (allocation failure), `no_source` (interface has no address).
pub struct Ip4Glean {
    shared: Arc<Ip4Shared>,
    throttle: crate::ratelimit::Throttle<u32>,
}

const C_REQ_SENT: u16 = 0;
const E_THROTTLED: u16 = 1;
const E_NO_BUF: u16 = 2;
const E_GLEAN_NO_SRC: u16 = 3;

impl PacketNode for Ip4Glean {
    fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        let adj = self.shared.adj.get(b.hdr.ip.adj_index);
        let d = b.data();
        let target = match adj.kind {
            AdjKind::Incomplete => adj.nh,
            _ => u32::from_be_bytes([d[16], d[17], d[18], d[19]]),
        };
        let attr = self.shared.if_attr(adj.tx_if);
        let src_ip = attr.ip4.load(Ordering::Relaxed);
        if src_ip == 0 {
            b.hdr.error = cx.error(E_GLEAN_NO_SRC);
            return Next(0);
        }
        if !self.throttle.allow(cx, target, target as u64) {
            b.hdr.error = cx.error(E_THROTTLED);
            return Next(0);
        }
        b.hdr.error = cx.error(C_REQ_SENT);
        let Some(req) = cx.bufs().alloc_one() else {
            b.hdr.error = cx.error(E_NO_BUF);
            return Next(0);
        };
        let frame = arp_request(Mac::BROADCAST, Mac(attr.mac_bytes()), src_ip, target);
        // SAFETY: `req` was just allocated by this node and has no other view.
        let mut v = unsafe { cx.buffer(req) };
        v.write_packet(&frame);
        v.hdr.tx_if = adj.tx_if;
        v.hdr.rx_if = b.hdr.rx_if;
        v.hdr.ip.fib_index = b.hdr.ip.fib_index;
        cx.enqueue(Next(1), req);
        // The triggering packet is dropped (counted as "ARP request sent").
        Next(0)
    }
}

/// An ARP request frame (Ethernet header included) from `my_mac`/`src` for `target`, to
/// `dst` (broadcast, or the neighbour's MAC for an aging probe).
pub(crate) fn arp_request(dst: Mac, my_mac: Mac, src: u32, target: u32) -> [u8; 14 + arp::LEN] {
    let mut frame = [0u8; 14 + arp::LEN];
    frame[0..6].copy_from_slice(&dst.0);
    frame[6..12].copy_from_slice(&my_mac.0);
    frame[12..14].copy_from_slice(&ethertype::ARP.to_be_bytes());
    ArpRepr {
        op: arp::op::REQUEST,
        sha: my_mac,
        spa: Ipv4Addr::from(src),
        tha: Mac::default(),
        tpa: Ipv4Addr::from(target),
    }
    .emit(&mut frame[14..]);
    frame
}

// ---------------------------------------------------------------------------------------
/// `ip4-neighbor-process`: every 10 ms applies neighbours learned by `arp-input` (adjacency
/// update + host route); every 100 ms ages dynamic neighbours (`set ip neighbor-config ip4
/// age`): sends unicast ARP requests to stale ones, removes those still stale after their
/// probe. Main thread only.
///
/// - next: `interface-output` (0) for probes (`tx_if` = the neighbour's interface).
/// - counters: `learned` (info), `probes_sent` (info), `no_buffer` (probe not sent).
pub struct NeighborProcess {
    /// Control-plane slot (see `ip4::init`).
    pub slot: Arc<Mutex<CtlSlot>>,
    last_age: f64,
}

impl NodeFn for NeighborProcess {
    fn process(&mut self, cx: &mut Cx, _wake: Wake) -> Suspend {
        let ctl = self.slot.lock().ok().and_then(|s| s.ctl.clone());
        if let Some(c) = ctl {
            crate::neighbor::process_tick(
                cx,
                &mut self.last_age,
                || super::lock(&c).apply_learned(),
                || super::lock(&c).age_neighbors(),
            );
        }
        Suspend::Timeout(0.01)
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

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
    let eslot = arc_slot(r, ETHERNET_INPUT);
    let fslot = arc_slot(r, IP4_INPUT);
    let rslot = arc_slot(r, IP4_REWRITE);
    let b = &mut r.graph;
    let s = shared.clone();
    b.register(
        NodeRegistration::new(ETHERNET_INPUT, NodeKind::Internal, move |_| {
            Box::new(PerPacket::new(EthernetInput {
                shared: s.clone(),
                subs: HashMap::new(),
                cached_if: None,
                cached_mac: 0,
                cached_l2_mode: false,
                cached_l2: 0,
                cached_redirect: 0,
                cached_promisc: false,
                cached_bd: 0,
                cached_fib: [0; 2],
                l2_any: false,
                cached_l2_next: Next(3),
                slot: eslot,
            }))
        })
        .nexts(&[
            "error-drop",
            IP4_INPUT,
            ARP_INPUT,
            L2_INPUT,
            crate::ip6::nodes::IP6_INPUT,
        ])
        .counters(&[
            CounterDesc::error("unknown_ethertype", "unknown ethernet type"),
            CounterDesc::error("l3_mac_mismatch", "l3 mac mismatch"),
            CounterDesc::error("tagged", "VLAN-tagged frame, no sub-interface"),
            CounterDesc::error("runt", "frame shorter than an Ethernet header"),
            CounterDesc::error("down", "subinterface down"),
        ]),
    );
    let s = shared.clone();
    b.register(
        NodeRegistration::new(IP4_INPUT, NodeKind::Internal, move |_| {
            Box::new(PerPacket::new(Ip4Input {
                shared: s.clone(),
                slot: fslot,
                features_any: false,
            }))
        })
        .nexts(&["error-drop", IP4_LOOKUP])
        .counters(&[
            CounterDesc::error("too_short", "ip4 length < 20 bytes"),
            CounterDesc::error("version", "ip4 version != 4"),
            CounterDesc::error("bad_ihl", "ip4 header length < 20 bytes"),
            CounterDesc::error("bad_length", "ip4 length > l2 length"),
            CounterDesc::error("bad_checksum", "bad ip4 checksum"),
        ]),
    );
    let s = shared.clone();
    b.register(
        NodeRegistration::new(IP4_LOOKUP, NodeKind::Internal, move |_| {
            Box::new(Ip4Lookup {
                shared: s.clone(),
                nexts: [0; FRAME_SIZE],
                dst: [0; FRAME_SIZE],
            })
        })
        .nexts(&["error-drop", IP4_REWRITE, IP4_LOCAL, IP4_GLEAN])
        .counters(&[
            CounterDesc::error("no_route", "no route to destination"),
            CounterDesc::error("drop_route", "ip4 drop route"),
        ]),
    );
    let s = shared.clone();
    b.register(
        NodeRegistration::new(IP4_REWRITE, NodeKind::Internal, move |_| {
            Box::new(PerPacket::new(Ip4Rewrite {
                shared: s.clone(),
                slot: rslot,
                cached: None,
                out_any: false,
            }))
        })
        .nexts(&["error-drop", crate::output::NAME, IP4_ICMP_ERROR])
        .counters(&[
            CounterDesc::info("ttl_expired", "ip4 ttl <= 1"),
            CounterDesc::error(
                "mtu_exceeded",
                "ip4 MTU exceeded and DF not set (no fragmentation)",
            ),
            CounterDesc::error("no_headroom", "no headroom for the L2 rewrite"),
            CounterDesc::error("truncated", "shorter than an ip4 header"),
        ]),
    );
    b.register(
        NodeRegistration::new(IP4_LOCAL, NodeKind::Internal, {
            let s = shared.clone();
            move |_| Box::new(PerPacket::new(Ip4Local { shared: s.clone() }))
        })
        .nexts(&["error-drop", IP4_LOOKUP, IP4_ICMP_ERROR, "punt"])
        .counters(&[
            CounterDesc::info("echo_replies", "ICMP echo replies sent"),
            CounterDesc::error("bad_icmp", "truncated or bad-checksum ICMP"),
            CounterDesc::info("punted", "packets for the router punted"),
            CounterDesc::info("ping_replies", "echo replies to CLI ping"),
        ]),
    );
    let s = shared.clone();
    b.register(
        NodeRegistration::new(IP4_ICMP_ERROR, NodeKind::Internal, move |_| {
            Box::new(PerPacket::new(Ip4IcmpError {
                shared: s.clone(),
                limit: Default::default(),
            }))
        })
        .nexts(&["error-drop", IP4_LOOKUP])
        .counters(&[
            CounterDesc::info("sent", "ICMP errors sent"),
            CounterDesc::error("rate_limited", "ICMP error rate limited"),
            CounterDesc::error("no_source", "no source address for ICMP error"),
            CounterDesc::error(
                "suppressed",
                "ICMP error not sent (ICMP error, fragment or broadcast)",
            ),
            CounterDesc::error("no_headroom", "no headroom for the ICMP error"),
        ]),
    );
    let s = shared.clone();
    b.register(
        NodeRegistration::new(ARP_INPUT, NodeKind::Internal, move |_| {
            Box::new(PerPacket::new(ArpInput { shared: s.clone() }))
        })
        .nexts(&["error-drop", crate::output::NAME, "punt"])
        .counters(&[
            CounterDesc::info("replies_sent", "ARP replies sent"),
            CounterDesc::info("replies_received", "ARP replies received"),
            CounterDesc::info("not_for_us", "ARP for another address"),
            CounterDesc::error("malformed", "malformed ARP packet"),
            CounterDesc::info(
                "gratuitous",
                "gratuitous ARP (updates an existing neighbour only)",
            ),
            CounterDesc::error("no_headroom", "no headroom for the ARP reply's header"),
            CounterDesc::info("punt_copies", "ARP copies punted to the host stack"),
            CounterDesc::error("no_punt_copy", "ARP copy for the host stack not made"),
        ]),
    );
    let s = shared.clone();
    b.register(
        NodeRegistration::new(IP4_GLEAN, NodeKind::Internal, move |_| {
            Box::new(PerPacket::new(Ip4Glean {
                shared: s.clone(),
                throttle: Default::default(),
            }))
        })
        .nexts(&["error-drop", crate::output::NAME])
        .counters(&[
            CounterDesc::info("requests_sent", "ARP requests sent"),
            CounterDesc::info("throttled", "ARP requests throttled"),
            CounterDesc::error("no_buffer", "no buffer for ARP request"),
            CounterDesc::error("no_source", "no source address for ARP request"),
        ]),
    );
    b.register(
        NodeRegistration::new(NEIGHBOR_PROCESS, NodeKind::Process, move |_| {
            Box::new(NeighborProcess {
                slot: slot.clone(),
                last_age: 0.0,
            })
        })
        .nexts(&[crate::output::NAME])
        .counters(&crate::neighbor::PROCESS_COUNTERS),
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
