//! What every tunnel shares: the tunnel interface, the precomputed outer header (rewrite),
//! the encap node that prepends it, and the decap lookup by (table, outer source, outer
//! destination, key).
//!
//! A tunnel is a first-class interface (`create_interface` with the protocol's encap node
//! as its tx node): `interface-output` counts its tx packets and hands its frames to the
//! encap node, which prepends the outer header and sends the packet straight to
//! `ip4-rewrite` / `ip6-rewrite` on the underlay's adjacency when the tunnel's destination
//! resolves to a single neighbour (stacked: `stacked`), else to `ip4-lookup` /
//! `ip6-lookup` in the tunnel's underlay table. The decap node (reached from
//! `ip4-local`/`ip6-local` through `sluice_vnet::ip_local`) finds the tunnel, strips the
//! outer headers, sets `rx_if` to the tunnel and counts its rx packets. So addresses,
//! routes, ARP/ND, bridge domains and `show interface` work on tunnels as on any other
//! interface.
//!
//! # `<proto>4-encap` / `<proto>6-encap` (one generic frame node, [`Encap`])
//! A frame at a time: packet `i + ENCAP_AHEAD`'s tunnel entry is prefetched while packet
//! `i` is encapsulated (its buffer header twice as far ahead), once per run of packets
//! to one tunnel: only the lines its tunnels' rewrites reach ([`Encap::set`]; an IPv4
//! tunnel's [`EncapEntry`] is one cache line).
//! - uses: `tx_if` (the tunnel); the inner frame at `current_data`.
//! - sets: prepends the tunnel's rewrite into the headroom and fills its lengths (and the
//!   IPv4 header checksum, VXLAN's UDP source port from the inner flow hash, IPv6 UDP
//!   checksum, the GRE/IP-in-IP protocol of an L3 payload); `ip.fib_index` = the underlay
//!   table; `ip.adj_index` on the `rewrite` arc; the `LOCALLY_ORIGINATED` flag set on the
//!   `lookup` arc (the outer TTL / hop limit is kept there) and cleared on the `rewrite`
//!   arc (also when the inner packet carried it): a stacked packet carries one more than
//!   the wire's for the rewrite node's fast path to decrement ([`HOP`]).
//! - next: `rewrite` (`ip4-rewrite` or `ip6-rewrite`, `ip.adj_index` set: stacked on the
//!   underlay's adjacency — the encap looks the tunnel's destination up in the underlay
//!   table, `stacked`, and when that is a single resolved neighbour the packet skips the
//!   second lookup; the result is cached in the tunnel's entry (per thread) until the FIB
//!   change count ([`sluice_fib::changes`], read once per frame) moves, so a route or
//!   neighbour change is followed from the next frame on (VXLAN's per-packet pick reads
//!   the load-balance's live buckets, checked resolved once per frame: the same one-frame
//!   window as between `ip4-lookup`'s pick and `ip4-rewrite`); over ECMP, the load-balance
//!   bucket of the tunnel's outer flow, fixed per tunnel, picked once (GRE, IP-in-IP,
//!   GTP-U, SRv6) or per packet from the inner flow hash (VXLAN); a VXLAN tunnel to
//!   a multicast group: the group's adjacency on the tunnel's multicast interface);
//!   `lookup` (`ip4-lookup` or `ip6-lookup`: no route, local, unresolved neighbour (also
//!   one behind an ECMP bucket) or drop route, which the lookup node handles and counts);
//!   `drop` (`error-drop`).
//! - counters: `encapsulated` (info), `no_tunnel` (tx interface is no tunnel of this
//!   protocol: deleted under traffic), `no_headroom` (also what bounds nested tunnels),
//!   `chained_ip6` (IPv6 UDP checksum over a buffer chain: not supported), `bad_inner`
//!   (an L3 tunnel's payload is neither IPv4 nor IPv6).
//!
//! # `<proto>4-input` / `<proto>6-input` (one generic frame node, [`DecapFrame`])
//! The decap nodes of VXLAN, GRE, IP-in-IP and GTP-U: `DecapFrame<P>` runs the frame,
//! protocol `P` ([`DecapProto`]) reads and strips its headers. The protocol modules
//! document their headers, arcs and drop reasons; what every one of them shares:
//! - uses: the outer IP header at `current_data` (`ip4-local`/`ip6-local` validated it and
//!   dispatched the packet by UDP port or IP protocol); `ip.fib_index` (the underlay table,
//!   part of the key).
//! - passes: (1) parse every packet into its key ([`DecapKey`]: table, outer source and
//!   destination, VNI/key/TEID); a malformed one goes now to `drop` with its reason; a
//!   packet of the last frame's last key (whose entry is known) is finished now as in
//!   (3), while the frame's packets are of that key, its rx counts summed and added to the
//!   tunnel's row once per frame, so a frame from that tunnel goes through in this one
//!   pass (unlike VPP's per-frame last-tunnel cache, only the frame's leading run); of the
//!   others, a key equal to the previous one's is not looked up again; a new
//!   key's home slot in the open-addressing table (64-byte slots holding the entries) is
//!   prefetched as soon as it is parsed (`DecapTable::start`). (2) look the new keys up
//!   (`DecapTable::lookup_frame`: the slots' keys compared, each hit's rx counters row
//!   and, unless its frames go straight to `l2-input` (or, in an IPv4 table, its IP
//!   packets to `ip4-input`/`ip6-input`), interface record prefetched, so
//!   with thousands of tunnels a frame's cache misses overlap). (3) finish the packets
//!   (1) left:
//!   a hit is decapsulated by `P::finish` (a frame for `ethernet-input` of a tunnel in L2
//!   mode — kept in its entry, [`DecapEntry::mode`] — goes straight to `l2-input` instead,
//!   [`l2_direct`] per packet, for protocols with [`DecapProto::L2_DIRECT`]); a miss goes
//!   to `P::miss` (drop as `no_such_tunnel`; GTP-U answers an Error Indication).
//! - sets: on decap, strips the outer headers ([`decap_to`]; an IP payload gets a 14-byte
//!   Ethernet header to the tunnel's MAC, [`decap_l3`]); `rx_if` = the tunnel; clears
//!   `LOCALLY_ORIGINATED` (and `L2_TO_BVI` on the direct L3 path, as `ethernet-input`
//!   would); the tunnel's `rx packets`/`rx bytes`. On a drop: `error`. For
//!   `l2-input` ([`l2_direct`]): `l2.l2_hdr_offset` = `current_data`; a cross-connected
//!   tunnel: `tx_if` = the peer and `l2.bd_index` = 0; a bridged one: `l2.bd_index`.
//! - next: `drop` (`error-drop`, arc 0 of each protocol); the tunnel's decap next (added at
//!   creation: `ethernet-input` or `decap-next node <n>`); `l2-input` (the protocol's
//!   second [`DecapProto::L2_DIRECT`] arc) for an untagged frame of an up L2 tunnel
//!   without an input redirect or `l2-input` feature; `ip4-input`/`ip6-input`
//!   ([`DecapProto::L3_DIRECT`]: GRE, IP-in-IP, GTP-U) for an untraced IP packet of an up
//!   L3 tunnel without an input redirect (kept in its entry, [`DecapEntry::routed`];
//!   [`l3_fibs`] once per tunnel per frame,
//!   [`decap_l3`]: `ip.fib_index` = the tunnel's table, as `ethernet-input` sets it);
//!   protocol replies (GTP-U).
//! - counters: `decapsulated` (info, added once per frame), `no_such_tunnel`, and each
//!   protocol's drop reasons.

use sluice_buffer::flags::{L2_TO_BVI, LOCALLY_ORIGINATED};
use sluice_buffer::{BufIdx, Buffer};
use sluice_graph::stats::Counter;
use sluice_graph::FRAME_SIZE;
use sluice_graph::{CounterDesc, CounterId, Cx, Next, TraceRecord};
use sluice_infra::bihash::folded_multiply;
use sluice_vnet::devices::linux::SwTable;
use sluice_vnet::feature::FeatureNext;
use sluice_vnet::interface::{IfAttr, IfAttrTable, IfAttrs, IfCounters};
use sluice_vnet::ip_family::{FibRead, LB_FLAG};
use sluice_wire::checksum;
use sluice_wire::ethernet::ethertype;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

/// Longest rewrite: IPv6 (40) + an SRH of [`crate::srv6::MAX_SEGMENTS`] segments
/// (8 + 5 × 16); the other protocols use at most 56 (IPv6 + UDP + VXLAN or GTP-U).
pub const MAX_REWRITE: usize = 128;

/// GTP-U's UDP port (3GPP TS 29.281 §4.4.2.3).
pub const GTPU_PORT: u16 = 2152;

/// VXLAN's UDP port (RFC 7348 §5).
pub const VXLAN_PORT: u16 = 4789;

/// What follows the outer IP header.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// UDP + VXLAN header; Ethernet inside.
    Vxlan,
    /// GRE; Ethernet inside (`teb`: protocol 0x6558) or IP (protocol from the payload).
    Gre {
        /// Transparent Ethernet bridging.
        teb: bool,
    },
    /// IP directly inside IP (protocol 4 or 41 from the payload).
    Ipip,
    /// UDP + GTP-U G-PDU header (8 bytes, TEID); IP inside, or Ethernet (`l2`:
    /// `decap-next l2`, bridgeable).
    Gtpu {
        /// Ethernet inside.
        l2: bool,
    },
    /// IPv6 + segment routing header (RFC 8754 H.Encaps); IP inside, the SRH's next
    /// header (byte 40 of the rewrite) from the payload's version: an SR policy. `l2`:
    /// T.Encaps.L2 (`sr steer l2`), the whole Ethernet frame inside, next header 143 in
    /// the rewrite.
    Srv6 {
        /// Ethernet inside.
        l2: bool,
    },
}

impl Kind {
    /// Whether the payload is an IP packet behind a placeholder Ethernet header (a
    /// point-to-point interface) rather than an Ethernet frame.
    pub fn l3(self) -> bool {
        matches!(
            self,
            Kind::Gre { teb: false }
                | Kind::Ipip
                | Kind::Gtpu { l2: false }
                | Kind::Srv6 { l2: false }
        )
    }
}

/// One tunnel's encap data, per thread (indexed by the tunnel's `sw_if_index`). One cache
/// line holds what the encap reads per packet — the fields, then the rewrite's first 38
/// bytes (every IPv4 tunnel's whole rewrite: at most 36) — and the node prefetches only the
/// lines its tunnels' rewrites reach ([`Encap::set`]): with 10000 IPv4 tunnels 640 kB are
/// touched, not the ~1.9 MB of every line of every entry.
#[derive(Copy, Clone, Debug)]
#[repr(C, align(64))]
pub struct EncapEntry {
    /// The FIB change count read before `stack` was resolved (`u64::MAX`: not yet).
    stack_at: u64,
    /// Underlay FIB index.
    pub fib_index: u32,
    /// A tunnel to a multicast group: the adjacency to the group on its interface (the
    /// packet goes to the rewrite directly: there is no multicast FIB to look it up in);
    /// [`NO_ADJ`]: none.
    pub adj: u32,
    /// What [`stacked`] last returned for the tunnel's destination ([`NO_ADJ`]: the lookup
    /// arc), this thread's cache, valid while the FIB change count
    /// ([`sluice_fib::changes`]) is `stack_at`.
    stack: u32,
    /// Ones'-complement sum of the outer IPv4 header with total length and checksum 0.
    pub ip4_sum: u16,
    /// Bytes of `rewrite` used.
    pub len: u8,
    /// IPv6 underlay.
    pub ip6: bool,
    /// What the rewrite carries.
    pub kind: Kind,
    /// The outer headers, lengths and checksums zero.
    pub rewrite: [u8; MAX_REWRITE],
}

/// No adjacency ([`EncapEntry::adj`], its cached stacking result).
pub const NO_ADJ: u32 = u32::MAX;

// Every IPv4 rewrite (at most 36 bytes: IPv4 + UDP + VXLAN or GTP-U) in the entry's first
// line; `Option<EncapEntry>` no bigger than the entry (the table's slots stay aligned).
const _: () = assert!(std::mem::offset_of!(EncapEntry, rewrite) + 36 <= 64);
const _: () =
    assert!(std::mem::size_of::<Option<EncapEntry>>() == std::mem::size_of::<EncapEntry>());

/// The outer IP header for `src` → `dst` (same family) carrying `proto`, lengths and
/// checksum zero; TTL/hop limit 64, DF clear.
pub fn outer_ip(src: IpAddr, dst: IpAddr, proto: u8, out: &mut Vec<u8>) {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            out.extend_from_slice(&[0x45, 0, 0, 0, 0, 0, 0, 0, 64, proto, 0, 0]);
            out.extend_from_slice(&s.octets());
            out.extend_from_slice(&d.octets());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            out.extend_from_slice(&[0x60, 0, 0, 0, 0, 0, proto, 64]);
            out.extend_from_slice(&s.octets());
            out.extend_from_slice(&d.octets());
        }
        // Mixed families: refused by `check_endpoints` before any rewrite is used.
        _ => {}
    }
}

/// How far an [`EncapEntry`]'s rewrite carries the outer TTL / hop limit above what the
/// packet leaves with: `ip4-rewrite`/`ip6-rewrite` decrement it on their fast path, which
/// takes no `LOCALLY_ORIGINATED` packet (the flag keeps the TTL and costs their checked
/// path, ~50 instructions a packet). The encap sends a stacked packet without the flag;
/// one for the lookup arc gets its TTL back and the flag (a local destination must not be
/// taken for a spoofed source by `ip4-local`).
pub const HOP: u8 = 1;

impl EncapEntry {
    /// An entry from a complete rewrite (at most [`MAX_REWRITE`] bytes) starting with the
    /// outer IP header ([`outer_ip`]: TTL / hop limit 64), whose TTL it raises by [`HOP`].
    pub fn new(rw: &[u8], ip6: bool, kind: Kind, fib_index: u32) -> Self {
        let mut rewrite = [0u8; MAX_REWRITE];
        rewrite[..rw.len()].copy_from_slice(rw);
        let ttl = &mut rewrite[if ip6 { 7 } else { 8 }];
        assert!(
            rw.len() >= if ip6 { 40 } else { 20 } && *ttl < 255,
            "a rewrite starts with the outer IP header, TTL below 255"
        );
        *ttl += HOP;
        let ip4_sum = if ip6 {
            0
        } else {
            checksum::sum(&rewrite[..20])
        };
        EncapEntry {
            rewrite,
            len: rw.len() as u8,
            ip6,
            kind,
            fib_index,
            ip4_sum,
            adj: NO_ADJ,
            stack: NO_ADJ,
            stack_at: u64::MAX,
        }
    }

    /// Bytes of the entry the encap reads per packet: up to the end of the rewrite.
    fn used(&self) -> usize {
        std::mem::offset_of!(EncapEntry, rewrite) + self.len as usize
    }
}

/// Computes the UDP checksum of IPv6 packet `d` (UDP right after the 40-byte header, the
/// whole of `d` its datagram, the checksum field 0 on entry).
#[inline(always)]
pub fn set_udp6_checksum(d: &mut [u8]) {
    if d.len() < 48 {
        return;
    }
    let ulen = (d.len() - 40) as u64;
    let acc = checksum::sum(&d[8..40]) as u64 + 17 + ulen + checksum::sum(&d[40..]) as u64;
    let mut cs = !checksum::fold(acc);
    if cs == 0 {
        cs = 0xffff;
    }
    d[46..48].copy_from_slice(&cs.to_be_bytes());
}

/// A 32-bit hash of an inner Ethernet frame's flow: MAC addresses, and for IPv4/IPv6 the
/// addresses, protocol and (UDP/TCP) ports. One flow always gets one VXLAN source port, so
/// the underlay's ECMP keeps it on one path (RFC 7348 §5).
#[inline(always)]
pub fn inner_flow_hash(f: &[u8]) -> u32 {
    let w = |i: usize| -> u64 {
        f.get(i..i + 4)
            .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as u64)
    };
    let mut h = (w(0) << 32 | w(4)) ^ (w(8) << 16);
    match f.get(12..14) {
        Some([0x08, 0x00]) if f.len() >= 34 => {
            let ihl = ((f[14] & 0xf) as usize) * 4;
            let p = f[23];
            h ^= (w(26) << 32 | w(30)).rotate_left(7) ^ p as u64;
            if p == 6 || p == 17 {
                h ^= w(14 + ihl) << 17;
            }
        }
        Some([0x86, 0xdd]) if f.len() >= 54 => {
            h ^= (w(22) ^ w(26) ^ w(30) ^ w(34)) << 32 | (w(38) ^ w(42) ^ w(46) ^ w(50));
            let p = f[20];
            h ^= p as u64;
            if p == 6 || p == 17 {
                h ^= w(54) << 17;
            }
        }
        _ => {}
    }
    h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= h >> 29;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (h >> 32) as u32
}

sluice_graph::arcs! {
    /// Next arcs of the IPv4 encap nodes (the IPv6 ones: [`ENCAP_NAMES6`], same order).
    pub enum EncapNext {
        /// Drops.
        Drop => "error-drop",
        /// The underlay lookup (what the encap does not stack).
        Lookup => "ip4-lookup",
        /// Stacked on the underlay's adjacency (or a multicast group's): no lookup.
        Rewrite => "ip4-rewrite",
    }
}

/// Arc names of the IPv6 encap nodes, in [`EncapNext`] order.
pub const ENCAP_NAMES6: [&str; 3] = ["error-drop", "ip6-lookup", "ip6-rewrite"];

sluice_graph::counters! {
    /// Counters of the encap nodes.
    pub enum EncapCounter {
        /// Packets encapsulated.
        Encapsulated => info("encapsulated", "packets encapsulated"),
        /// The tx interface is no tunnel of this node.
        NoTunnel => error("no_tunnel", "tx interface is not a tunnel (deleted?)"),
        /// No headroom for the outer headers.
        NoHeadroom => error("no_headroom", "no headroom for the outer headers"),
        /// IPv6 UDP checksum over a buffer chain.
        ChainedIp6 => error("chained_ip6", "IPv6 UDP checksum over a buffer chain not supported"),
        /// L3 tunnel payload neither IPv4 nor IPv6.
        BadInner => error("bad_inner", "L3 tunnel payload is neither IPv4 nor IPv6"),
    }
}

/// Trace record of the encap nodes.
#[derive(Copy, Clone)]
pub struct EncapTrace {
    /// Tunnel interface.
    pub sw_if: u32,
    /// Outer length.
    pub len: u16,
}

impl TraceRecord for EncapTrace {
    fn format(&self, out: &mut String) {
        out.push_str(&format!(
            "tunnel sw_if_index {} outer length {}",
            self.sw_if, self.len
        ));
    }
}

/// The encap node (one instance per thread and per protocol/family): a frame at a time,
/// each packet's tunnel entry prefetched [`ENCAP_AHEAD`] packets before it is
/// encapsulated (with thousands of tunnels each packet's entry is a cache miss).
#[derive(Default)]
pub struct Encap {
    /// By tunnel `sw_if_index`; written only through [`Encap::set`], which keeps
    /// `prefetch` covering every entry.
    table: SwTable<EncapEntry>,
    /// The underlay's forwarding read side (set by [`add`] with the first tunnel): the
    /// encap resolves each tunnel's destination in it and stacks the packet on the
    /// adjacency found (`stacked`). None: every packet goes to the lookup arc.
    pub underlay: Option<Underlay>,
    /// Bytes of each entry the frame loop prefetches: the most any entry set has used
    /// ([`EncapEntry::used`]; one line for IPv4 tunnels).
    prefetch: usize,
}

impl Encap {
    /// Sets (or with `None` clears) the entry of tunnel `sw`.
    pub fn set(&mut self, sw: u32, entry: Option<EncapEntry>) {
        if let Some(e) = &entry {
            self.prefetch = self.prefetch.max(e.used());
        }
        self.table.set(sw, entry);
    }
}

#[cfg(test)]
mod encap_entry_tests {
    use super::*;

    /// An IPv4 tunnel's entry is one cache line to the encap: the per-packet fields and the
    /// whole rewrite in the first 64 bytes, and `set` records no more than that line as the
    /// bytes to prefetch; an entry with a longer rewrite (IPv6, SRv6) widens it to its lines.
    /// This checks `set`'s bookkeeping (it fails when `set` does not record the bytes each
    /// entry uses), not what the frame loop passes to `SwTable::prefetch_first`.
    #[test]
    fn ipv4_entries_prefetch_one_line() {
        let mut n = Encap::default();
        let gtpu4 = EncapEntry::new(&[0x45; 36], false, Kind::Gtpu { l2: false }, 0);
        n.set(3, Some(gtpu4));
        assert!(n.prefetch <= 64, "{} bytes", n.prefetch);
        let base = std::ptr::from_ref(&gtpu4) as usize;
        let (first, last) = (
            gtpu4.rewrite.as_ptr() as usize,
            &gtpu4.rewrite[35] as *const u8,
        );
        assert_eq!(base % 64, 0);
        assert!(first - base < 64 && (last as usize) - base < 64);
        n.set(
            4,
            Some(EncapEntry::new(
                &[0x60; 128],
                true,
                Kind::Srv6 { l2: false },
                0,
            )),
        );
        assert!(n.prefetch > 128, "{} bytes", n.prefetch);
        n.set(4, None);
        assert!(n.table.get(3).is_some() && n.table.get(4).is_none());
    }

    /// `outer_ip`'s header for `src` → `dst` carrying `proto`.
    fn outer(src: &str, dst: &str, proto: u8) -> Vec<u8> {
        let mut rw = Vec::new();
        outer_ip(src.parse().unwrap(), dst.parse().unwrap(), proto, &mut rw);
        rw
    }

    /// The entry's rewrite carries the outer TTL / hop limit one above the wire's (the
    /// rewrite node's fast path decrements it), its IPv4 checksum sum over that header.
    #[test]
    fn rewrite_ttl_one_above_the_wire() {
        let rw = outer("10.0.0.1", "10.0.0.2", 47);
        let e = EncapEntry::new(&rw, false, Kind::Gre { teb: false }, 0);
        assert_eq!((rw[8], e.rewrite[8]), (64, 65));
        assert_eq!(e.ip4_sum, checksum::sum(&e.rewrite[..20]));
        let rw = outer("2001:db8::1", "2001:db8::2", 4);
        let e = EncapEntry::new(&rw, true, Kind::Ipip, 0);
        assert_eq!((rw[7], e.rewrite[7]), (64, 65));
    }

    /// The lookup arc's fix-up gives the wire's TTL back with a valid IPv4 checksum: the
    /// encap's header (the entry's sum and the total length) less [`HOP`] equals the
    /// rewrite `outer_ip` built with that length and its full checksum.
    #[test]
    fn lookup_arc_header_is_the_wires() {
        for total in [20u16, 84, 1500, 0xffff] {
            let mut rw = outer("10.0.0.1", "192.0.2.200", 47);
            let e = EncapEntry::new(&rw, false, Kind::Gre { teb: false }, 0);
            let mut h = e.rewrite[..20].to_vec();
            h[2..4].copy_from_slice(&total.to_be_bytes());
            let cs = !checksum::combine(e.ip4_sum, total);
            h[10..12].copy_from_slice(&cs.to_be_bytes());
            wire_ttl(&mut h, false);
            rw[2..4].copy_from_slice(&total.to_be_bytes());
            let cs = checksum::internet_checksum(&rw);
            rw[10..12].copy_from_slice(&cs.to_be_bytes());
            assert_eq!(h, rw, "total length {total}");
        }
        let rw = outer("2001:db8::1", "2001:db8::2", 4);
        let mut h = EncapEntry::new(&rw, true, Kind::Ipip, 0).rewrite[..40].to_vec();
        wire_ttl(&mut h, true);
        assert_eq!(h, rw);
    }
}

/// The forwarding read side of an underlay family (its FIB, adjacencies), shared with
/// `ip4-lookup`/`ip6-lookup`.
#[derive(Clone)]
pub enum Underlay {
    /// IPv4.
    V4(Arc<sluice_vnet::ip4::Ip4Shared>),
    /// IPv6.
    V6(Arc<sluice_vnet::ip6::Ip6Shared>),
}

impl Underlay {
    /// The read side of the IPv4 or IPv6 underlay (None before the family's `init`).
    pub fn of(vm: &mut sluice_graph::Vlib, ip6: bool) -> Option<Underlay> {
        match ip6 {
            false => sluice_vnet::ip4::shared(vm).map(Underlay::V4),
            true => sluice_vnet::ip6::shared(vm).map(Underlay::V6),
        }
    }
}

/// What the underlay's table `fib` resolves the tunnel's destination to (the family's
/// [`FibRead::stacked`]): an adjacency the packet can go straight to
/// `ip4-rewrite`/`ip6-rewrite` with, or for VXLAN over ECMP [`LB_FLAG`] | the load-balance
/// (the bucket picked per packet from the inner flow hash, [`pick`]); None: the lookup arc.
/// Every other protocol's outer header is the same for every packet of the tunnel (GRE and
/// IP-in-IP have no ports, GTP-U's are 2152 → 2152), so its ECMP bucket is picked here
/// once, with the lookup node's flow hash of the rewrite: one tunnel, one path. IP-in-IP's
/// rewrite carries protocol 0 (the encap sets 4 or 41 per packet): it is hashed with 4,
/// what an IPv4 payload's outer header carries (VPP stacks the tunnel's IPv4 adjacency
/// the same way), so a packet that takes the lookup arc (its bucket unresolved) is hashed
/// by `ip4-lookup`/`ip6-lookup` to the same bucket; an IPv6 payload's (41) may hash to
/// another. The encap caches the result in the tunnel's entry until the FIB changes.
#[inline(never)]
fn stacked(u: &Underlay, e: &EncapEntry) -> Option<u32> {
    let dst = rewrite_dst(&e.rewrite, e.ip6);
    let mut rw = e.rewrite;
    if e.kind == Kind::Ipip {
        rw[if e.ip6 { 6 } else { 9 }] = 4;
    }
    let rw = rw.get(..e.len as usize).unwrap_or(&[]);
    let fixed = |h: fn(&[u8]) -> u32| (e.kind != Kind::Vxlan).then(|| h(rw));
    match u {
        Underlay::V4(s) => {
            let hash = fixed(<sluice_vnet::ip4::Ip4Shared as FibRead>::flow_hash);
            s.stacked(e.fib_index, dst as u32, hash)
        }
        Underlay::V6(s) => {
            let hash = fixed(<sluice_vnet::ip6::Ip6Shared as FibRead>::flow_hash);
            s.stacked(e.fib_index, dst, hash)
        }
    }
}

/// The adjacency of bucket `hash` of load-balance `v` ([`LB_FLAG`] | its index) of the
/// underlay's family (0, the drop adjacency, without an underlay).
#[inline(always)]
fn pick(u: &Option<Underlay>, v: u32, hash: u32) -> u32 {
    let lb = v & (LB_FLAG - 1);
    match u {
        Some(Underlay::V4(s)) => s.lbs().pick(lb, hash),
        Some(Underlay::V6(s)) => s.lbs().pick(lb, hash),
        None => 0,
    }
}

/// The destination of a tunnel's rewrite (its outer IP header's; IPv4 in the low 32 bits).
#[inline(always)]
fn rewrite_dst(rw: &[u8; MAX_REWRITE], ip6: bool) -> u128 {
    match ip6 {
        false => rw
            .get(16..20)
            .map_or(0, |d| u32::from_be_bytes([d[0], d[1], d[2], d[3]]) as u128),
        true => rw.get(24..40).map_or(0, |d| {
            let mut a = [0u8; 16];
            a.copy_from_slice(d);
            u128::from_be_bytes(a)
        }),
    }
}

/// How many packets ahead [`Encap`] prefetches a packet's tunnel entry (its buffer header
/// is prefetched twice as far ahead, so that reading its `tx_if` does not stall).
pub const ENCAP_AHEAD: usize = 4;

// The loop reads the `tx_if` of packet `i + ENCAP_AHEAD` (its header prefetched at
// `i + 2 * ENCAP_AHEAD`): within the addresses the frame scratch resolves past the frame.
const _: () = assert!(2 * ENCAP_AHEAD <= sluice_graph::SCRATCH_AHEAD);

impl sluice_graph::NodeFn for Encap {
    #[inline]
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        use sluice_graph::FrameScratch;
        let (arena, frame, mut s) = cx.resolve_frame(frame);
        let n = frame.len();
        let FrameScratch { addrs, nexts } = &mut *s;
        let addrs = &*addrs;
        // The tunnel of the last packet whose entry was prefetched (a run of packets to
        // one tunnel prefetches it once).
        let mut fetched = u32::MAX;
        let lines = self.prefetch;
        let mut fetch = |table: &SwTable<EncapEntry>, j: usize| {
            if let Some(&bj) = frame.get(j) {
                // SAFETY: the dispatcher hands this node every index of `frame`, each
                // once; this view of packet `j` only reads its header and ends here.
                let sw = unsafe { arena.buffer_at(addrs, j, bj) }.hdr.tx_if;
                if sw != fetched {
                    fetched = sw;
                    table.prefetch_first(sw, lines);
                }
            }
        };
        // The entries of the first packets, before the loop reaches them.
        for i in 0..ENCAP_AHEAD.min(n) {
            fetch(&self.table, i);
        }
        // Read once per frame, before any lookup: a route or neighbour change shows from
        // the next frame on, as in `ip4-lookup`.
        let now = sluice_fib::changes();
        for (i, (next, &bi)) in nexts[..n].iter_mut().zip(frame).enumerate() {
            addrs.prefetch(i + 2 * ENCAP_AHEAD, true);
            fetch(&self.table, i + ENCAP_AHEAD);
            // SAFETY: as above; the view of packet `i` lives for this iteration only.
            let mut b = unsafe { arena.buffer_at(addrs, i, bi) };
            *next = self.process_one(cx, &mut b, now).0;
        }
        cx.enqueue_to_next(frame, &s.nexts[..n]);
        cx.put_frame_scratch(s);
    }
    fn as_any(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

/// The IP protocol / IPv6 next header of an L3 payload, from its version nibble.
#[inline(always)]
fn l3_proto(first: Option<&u8>) -> Option<(u8, u16)> {
    match first.map(|v| v >> 4) {
        Some(4) => Some((4, 0x0800)),
        Some(6) => Some((41, 0x86dd)),
        _ => None,
    }
}

/// Copies the first `h.len()` bytes of `rw` into `h` (the rewrite into the pushed
/// headroom) as two overlapping fixed-size copies, the first and the last 16, 32 or 64
/// bytes (what `memcpy` does for small sizes, but inline: no call and no length dispatch per
/// packet for the 20- to 56-byte rewrites of the IP tunnels). A twin of
/// `sluice_buffer::copy_small`, kept for the 1-2 instructions a packet the encap nodes lose
/// through it (docs/benchmarking.md, round 2, fourteenth step).
#[inline(always)]
fn copy_rewrite(h: &mut [u8], rw: &[u8; MAX_REWRITE]) {
    debug_assert!(
        h.len() <= MAX_REWRITE,
        "a rewrite is at most MAX_REWRITE bytes"
    );
    #[inline(always)]
    fn two<const K: usize>(h: &mut [u8], rw: &[u8; MAX_REWRITE]) {
        let n = h.len();
        if let (Some(a), Some(b)) = (rw.first_chunk::<K>(), rw.get(n - K..n)) {
            h[..K].copy_from_slice(a);
            h[n - K..].copy_from_slice(b);
        }
    }
    match h.len() {
        0..16 => {
            let n = h.len();
            h.copy_from_slice(&rw[..n]);
        }
        16..32 => two::<16>(h, rw),
        32..64 => two::<32>(h, rw),
        _ => two::<64>(h, rw),
    }
}

/// An encapsulated packet for the lookup arc, which keeps its outer TTL / hop limit: the
/// wire's TTL back (the rewrite's less [`HOP`], the IPv4 checksum updated) and the
/// `LOCALLY_ORIGINATED` flag, which keeps it in `ip4-rewrite`/`ip6-rewrite` and tells
/// `ip4-local` the router's own source is no spoof.
#[cold]
#[inline(never)]
fn keep_ttl(b: &mut Buffer<'_>, ip6: bool) {
    b.hdr.flags |= LOCALLY_ORIGINATED;
    wire_ttl(b.data_mut(), ip6);
}

/// The outer header at the start of `d` with the wire's TTL / hop limit (the rewrite's
/// less [`HOP`]) and, IPv4, its checksum updated for it.
#[inline(always)]
fn wire_ttl(d: &mut [u8], ip6: bool) {
    match ip6 {
        true => {
            if let Some(t) = d.get_mut(7) {
                *t = t.wrapping_sub(HOP);
            }
        }
        false => {
            if let Some(h) = d.get_mut(..20) {
                let old = u16::from_be_bytes([h[8], h[9]]);
                h[8] = h[8].wrapping_sub(HOP);
                let cs = u16::from_be_bytes([h[10], h[11]]);
                let cs = checksum::update_u16(cs, old, u16::from_be_bytes([h[8], h[9]]));
                h[10..12].copy_from_slice(&cs.to_be_bytes());
            }
        }
    }
}

impl Encap {
    /// Encapsulates packet `b` for its tunnel (`tx_if`): its next arc. `now`: the FIB
    /// change count read at the start of the frame.
    #[inline(always)]
    fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>, now: u64) -> Next {
        use EncapCounter as c;
        let sw = b.hdr.tx_if;
        let Some(e) = self.table.get_mut(sw) else {
            b.hdr.error = cx.error(c::NoTunnel);
            return EncapNext::Drop.into();
        };
        let hash = match e.kind {
            Kind::Vxlan => inner_flow_hash(b.data()),
            _ => 0,
        };
        let l3 = match e.kind.l3() {
            true => {
                // A point-to-point interface: `ip4-rewrite`/`ip6-rewrite` wrote the
                // adjacency's placeholder Ethernet header; the payload is the IP packet.
                let p = b.data().get(14).and_then(|v| l3_proto(Some(v)));
                match p {
                    Some(p) if b.advance(14) => Some(p),
                    _ => {
                        b.hdr.error = cx.error(c::BadInner);
                        return EncapNext::Drop.into();
                    }
                }
            }
            false => None,
        };
        let chained = b.chain_rest_len() != 0;
        let rl = e.len as usize;
        let total = b.total_len() + rl;
        let (ip6, kind, fib, ip4_sum) = (e.ip6, e.kind, e.fib_index, e.ip4_sum);
        let mut adj = Some(e.adj).filter(|&a| a != NO_ADJ);
        if adj.is_none() {
            // Stacked on the underlay's adjacency for the tunnel's destination, looked up
            // again only when the FIB changed since the entry's last lookup.
            if e.stack_at != now {
                e.stack = match &self.underlay {
                    Some(u) => stacked(u, e).unwrap_or(NO_ADJ),
                    None => NO_ADJ,
                };
                e.stack_at = now;
            }
            adj = Some(e.stack).filter(|&a| a != NO_ADJ);
            // VXLAN over ECMP: the bucket of the packet's inner flow (`stacked`).
            if let Some(v) = adj.filter(|&v| v >= LB_FLAG) {
                adj = Some(pick(&self.underlay, v, hash));
            }
        }
        if ip6 && matches!(kind, Kind::Vxlan | Kind::Gtpu { .. }) && chained {
            b.hdr.error = cx.error(c::ChainedIp6);
            return EncapNext::Drop.into();
        }
        let Some(h) = b.push_front(rl) else {
            b.hdr.error = cx.error(c::NoHeadroom);
            return EncapNext::Drop.into();
        };
        copy_rewrite(h, &e.rewrite);
        let ipl = if ip6 { 40 } else { 20 };
        if ip6 {
            h[4..6].copy_from_slice(&((total - 40) as u16).to_be_bytes());
            match (kind, l3) {
                (Kind::Ipip, Some((p, _))) => h[6] = p,
                (Kind::Srv6 { .. }, Some((p, _))) => h[40] = p,
                _ => {}
            }
        } else {
            h[2..4].copy_from_slice(&(total as u16).to_be_bytes());
            let mut sum = ip4_sum;
            if let (Kind::Ipip, Some((p, _))) = (kind, l3) {
                h[9] = p;
                sum = checksum::combine(sum, p as u16);
            }
            let csum = !checksum::combine(sum, total as u16);
            h[10..12].copy_from_slice(&csum.to_be_bytes());
        }
        match kind {
            Kind::Vxlan | Kind::Gtpu { .. } => {
                let ulen = (total - ipl) as u16;
                if kind == Kind::Vxlan {
                    let sport = 0xc000 | (hash >> 18) as u16;
                    h[ipl..ipl + 2].copy_from_slice(&sport.to_be_bytes());
                } else {
                    // GTP-U length: what follows the mandatory 8-byte header.
                    h[ipl + 10..ipl + 12].copy_from_slice(&(ulen - 16).to_be_bytes());
                }
                h[ipl + 4..ipl + 6].copy_from_slice(&ulen.to_be_bytes());
                if ip6 {
                    // RFC 6935 allows a zero checksum for tunnels, but Linux (and RFC 7348
                    // implementations by default) drop it: compute it.
                    set_udp6_checksum(b.data_mut());
                }
            }
            Kind::Gre { teb: false } => {
                if let Some((_, et)) = l3 {
                    h[ipl + 2..ipl + 4].copy_from_slice(&et.to_be_bytes());
                }
            }
            _ => {}
        }
        b.hdr.ip.fib_index = fib;
        cx.count(c::Encapsulated, 1);
        if b.hdr.is_traced() {
            cx.trace(
                b,
                EncapTrace {
                    sw_if: b.hdr.tx_if,
                    len: total as u16,
                },
            );
        }
        // The rewrite's TTL is [`HOP`] above the wire's, for the rewrite node to decrement
        // ([`HOP`]): a stacked packet leaves as it is, without the flag — also one the
        // inner packet carried (a ping, an ICMP error, the host stack), else the rewrite
        // node would keep the 65.
        match adj {
            Some(a) => {
                b.hdr.flags &= !LOCALLY_ORIGINATED;
                b.hdr.ip.adj_index = a;
                EncapNext::Rewrite.into()
            }
            None => {
                keep_ttl(b, ip6);
                EncapNext::Lookup.into()
            }
        }
    }
}

/// Decap lookup key: underlay table, outer source and destination (IPv4 in the low 32
/// bits), and the protocol's key (VNI, GRE key — 0 when the packet has none or carries 0,
/// as in VPP; 0 for IP-in-IP) and sub-type (GRE: TEB 1, L3 0; else 0).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct DecapKey {
    /// Underlay FIB index the packet arrived in.
    pub fib: u32,
    /// VNI / GRE key / 0.
    pub key: u32,
    /// GRE: TEB (1) or L3 (0); else 0.
    pub sub: u8,
    /// Outer source (the tunnel's `dst`).
    pub src: u128,
    /// Outer destination (the tunnel's `src`).
    pub dst: u128,
}

impl std::hash::Hash for DecapKey {
    /// Three words (lossless for IPv4; IPv6 addresses folded — equality decides).
    #[inline(always)]
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        let fold = |a: u128| (a as u64) ^ ((a >> 64) as u64).rotate_left(23);
        h.write_u64((self.fib as u64) << 32 | (self.sub as u64) << 24 ^ self.key as u64);
        h.write_u64(fold(self.src));
        h.write_u64(fold(self.dst));
    }
}

/// The control plane's hasher of decap keys (`Tunnels`' maps, started from 0): a
/// multiply-rotate over the key's three words (about 10 instructions against SipHash's
/// few hundred for the 40-byte key). The per-thread [`DecapTable`]s hash with
/// `slot_hash` instead (seeded per table, three folded multiplies and no finaliser: the
/// decap node hashes every new key of a frame).
#[derive(Default, Clone, Copy)]
pub struct DecapHasher(u64);

impl std::hash::Hasher for DecapHasher {
    #[inline(always)]
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(*b as u64);
        }
    }
    #[inline(always)]
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(26) ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    #[inline(always)]
    fn finish(&self) -> u64 {
        let h = self.0 ^ (self.0 >> 31);
        h.wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ (h >> 29)
    }
}

/// An address as the key's `u128`.
pub fn addr_key(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(a) => u32::from(a) as u128,
        IpAddr::V6(a) => u128::from(a),
    }
}

/// A tunnel as [`DecapTable::insert`] takes it (what every thread's entry is made of).
#[derive(Clone)]
pub struct DecapSpec {
    /// The tunnel interface.
    pub sw_if: u32,
    /// Where the inner packet goes.
    pub next: Next,
    /// The tunnel's counters (rx packets/bytes).
    pub counters: Arc<IfCounters>,
    /// The tunnel interface's MAC.
    pub mac: [u8; 6],
    /// Ethernet inside.
    pub l2: bool,
    /// The tunnel interface's L2 mode ([`if_mode`]; updated by [`DecapTable::set_mode`]).
    pub mode: L2Mode,
    /// An up L3 interface ([`if_routed`]; updated by [`DecapTable::set_mode`]).
    pub routed: bool,
    /// The tunnel interface's IPv4 and IPv6 tables ([`if_fibs`]; updated by
    /// [`DecapTable::set_mode`]): an IPv4 table's entry keeps them ([`DecapEntry::fibs4`]).
    pub fibs: [u32; 2],
}

impl DecapSpec {
    /// The tunnel of interface `sw_if` (mode [`L2Mode::Ethernet`]).
    pub fn new(sw_if: u32, next: Next, counters: Arc<IfCounters>, mac: [u8; 6], l2: bool) -> Self {
        DecapSpec {
            sw_if,
            next,
            counters,
            mac,
            l2,
            mode: L2Mode::Ethernet,
            routed: false,
            fibs: [0; 2],
        }
    }
}

/// One thread's row of a tunnel's interface counters, reached directly (through the
/// `Arc<IfCounters>` it would be a load of the `Arc`'s record, then of the row: one
/// dependent cache miss more per packet with thousands of tunnels).
struct RxRow(std::ptr::NonNull<[Counter; sluice_vnet::interface::counter::N]>);

// SAFETY: the row is atomics (`Counter`): the owning thread adds; any thread reads. The
// pointer itself is only an address.
unsafe impl Send for RxRow {}
// SAFETY: as for `Send`: shared access is atomic loads and stores.
unsafe impl Sync for RxRow {}

impl RxRow {
    /// The row of thread `t` of `c` (None: `c` has no row for `t`).
    fn new(c: &IfCounters, t: usize) -> Option<Self> {
        c.row(t).map(|r| RxRow(std::ptr::NonNull::from(r)))
    }
    /// The row.
    #[inline(always)]
    fn get(&self) -> &[Counter; sluice_vnet::interface::counter::N] {
        // SAFETY: a `RxRow` lives only in a `DecapEntry` of a `DecapTable`, which keeps
        // the `Arc<IfCounters>` owning the row (a boxed slice, never reallocated) in
        // `keep` at the same index for exactly as long as the entry exists; `DecapEntry`
        // is neither `Clone` nor constructible outside this module, so the row cannot
        // outlive the borrow of the table it is reached through.
        unsafe { self.0.as_ref() }
    }
}

/// A slot of a [`DecapTable`] and what a decap hit yields: one cache line, the tunnel's
/// full decap key (what a lookup compares) beside what the packet needs, among it
/// this thread's row of the tunnel's counters and the tunnel interface's L2 mode (so an
/// L2 decap needs no read of the interface's record: [`DecapEntry::mode`]).
#[repr(C, align(64))]
pub struct DecapEntry {
    /// The key, as [`pack`] packs it (set by [`DecapTable::insert`]). In an IPv4 table
    /// only words 0-1 are the key (what [`same`], [`slot_hash`] and [`unpack`] read):
    /// word 2 holds the tunnel interface's tables ([`DecapEntry::fibs4`]), where a key's
    /// is zero, and words 3-4 are unused.
    words: [u64; 5],
    /// This thread's row of the tunnel's counters (rx packets/bytes).
    rx: RxRow,
    /// The tunnel interface.
    pub sw_if: u32,
    /// Where the inner packet goes.
    pub next: Next,
    /// The L2 mode's value: the cross-connect peer or the bridge domain (see `bits`).
    mode: u16,
    /// The tunnel interface's MAC (destination of the Ethernet header an L3 decap puts in
    /// front of the inner packet for `ethernet-input`).
    pub mac: [u8; 6],
    /// Bit 0: Ethernet inside; bits 1–2: the L2 mode ([`MODE_XC`], [`MODE_BD`]; 0:
    /// [`L2Mode::Ethernet`]); bit 3: [`BIT_ROUTED`].
    bits: u8,
}

/// [`DecapEntry`]'s `bits`: Ethernet inside.
const BIT_L2: u8 = 1;
/// [`DecapEntry`]'s `bits`: cross-connected to `mode`.
const MODE_XC: u8 = 2;
/// [`DecapEntry`]'s `bits`: in bridge domain `mode`.
const MODE_BD: u8 = 4;
/// [`DecapEntry`]'s `bits`: the tunnel is an up L3 interface ([`if_routed`]).
const BIT_ROUTED: u8 = 8;

/// `m` as [`DecapEntry`]'s (`mode`, `bits`): a peer beyond `u16` is kept as
/// [`L2Mode::Ethernet`] (through `ethernet-input`, which reads the peer itself).
fn pack_mode(m: L2Mode) -> (u16, u8) {
    match m {
        L2Mode::Xconnect(p) => u16::try_from(p).map_or((0, 0), |p| (p, MODE_XC)),
        L2Mode::Bridge(bd) => (bd, MODE_BD),
        L2Mode::Ethernet => (0, 0),
    }
}

const _: () = assert!(std::mem::size_of::<Option<DecapEntry>>() == 64);

impl DecapEntry {
    /// Ethernet inside (for protocols that carry either: GTP-U).
    #[inline(always)]
    pub fn l2(&self) -> bool {
        self.bits & BIT_L2 != 0
    }
    /// The tunnel interface's L2 mode as the control plane last published it
    /// ([`if_mode`]: admin state, cross-connect or bridge, input redirect; not its
    /// `l2-input` features, which [`l2_direct`] checks).
    #[inline(always)]
    pub fn mode(&self) -> L2Mode {
        match self.bits & (MODE_XC | MODE_BD) {
            MODE_XC => L2Mode::Xconnect(self.mode as u32),
            MODE_BD => L2Mode::Bridge(self.mode),
            _ => L2Mode::Ethernet,
        }
    }
    /// The tunnel interface is an admin-up L3 interface without an input redirect
    /// ([`if_routed`], as the control plane last published it): its IP packets may go
    /// straight to `ip4-input`/`ip6-input`.
    #[inline(always)]
    pub fn routed(&self) -> bool {
        self.bits & BIT_ROUTED != 0
    }
    /// The tunnel interface's IPv4 and IPv6 tables as the control plane last published
    /// them, in an IPv4 table's entry (the third key word, which its keys leave unread:
    /// `TableKey`); an IPv6 table's entry has no room (its decap nodes read
    /// [`l3_fibs`]).
    #[inline(always)]
    pub fn fibs4(&self) -> [u32; 2] {
        [self.words[2] as u32, (self.words[2] >> 32) as u32]
    }
    /// Adds the received packets and bytes `s` to the tunnel's counters.
    #[inline(always)]
    fn add_rx(&self, s: RxSum) {
        let r = self.rx.get();
        r[sluice_vnet::interface::counter::RX_PACKETS].add(s.packets);
        r[sluice_vnet::interface::counter::RX_BYTES].add(s.bytes);
    }
    /// Hints the CPU to fetch what [`DecapEntry::add_rx`] adds to (`rx packets` and
    /// `rx bytes`, the row's first 16 bytes: its first byte's line and, when they
    /// straddle one, its last byte's).
    #[inline(always)]
    fn prefetch_rx(&self) {
        let p = self.rx.0.as_ptr();
        sluice_infra::prefetch(p);
        sluice_infra::prefetch(p.cast::<u8>().wrapping_add(RX_LAST));
    }
    /// The key this entry was inserted under, as its table packs it.
    fn key(&self) -> TableKey {
        TableKey { w: self.words }
    }
    /// Whether this is the entry of key `k` (in a table of family `v6`).
    #[inline(always)]
    fn is(&self, k: &TableKey, v6: bool) -> bool {
        same(&self.words, k, v6)
    }
}

/// A decap key as a [`DecapTable`] of one underlay family keeps, hashes and compares it
/// ([`pack`]): five words, the first of them the table, the sub-type and the key (the
/// sub-type xored into the table's top byte: a table index is below [`MAX_FIB`]). An
/// IPv4 table's key is its first two words (table, sub-type and key; source and
/// destination) and the other three are zero (an entry's word 2 holds the tables instead:
/// [`DecapEntry::words`]) — its decap nodes store (in a frame),
/// compare and hash only two words a key, while its entries are unchanged (64 bytes, all
/// five words stored); an IPv6 table's is the table, sub-type and key, the source's low
/// and high halves, the destination's low and high halves.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TableKey {
    w: [u64; 5],
}

/// The decap tables' bound on a key's underlay table index (vnet's tables are fewer:
/// `MAX_FIBS`): the bits above it in a [`TableKey`]'s first word hold the sub-type.
pub(crate) const MAX_FIB: u32 = 1 << 24;
const _: () = assert!(sluice_vnet::routes::MAX_FIBS <= MAX_FIB as usize);

/// A key's first word: the table, the sub-type xored into its top byte, and the key.
#[inline(always)]
fn word0(k: &DecapKey) -> u64 {
    ((k.fib as u64) << 32 | k.key as u64) ^ (k.sub as u64) << 56
}

/// `k` as a table of family `v6` keeps it (lossless: [`unpack`] gives `k` back; an IPv4
/// table's addresses are 32 bits, a group's source an interface index).
#[inline(always)]
pub(crate) fn pack(k: &DecapKey, v6: bool) -> TableKey {
    let w0 = word0(k);
    let w = if v6 {
        [
            w0,
            k.src as u64,
            (k.src >> 64) as u64,
            k.dst as u64,
            (k.dst >> 64) as u64,
        ]
    } else {
        debug_assert!((k.src | k.dst) >> 32 == 0, "an IPv6 key in an IPv4 table");
        [w0, (k.src as u64) << 32 | k.dst as u32 as u64, 0, 0, 0]
    };
    TableKey { w }
}

/// The key [`pack`] made `k` of.
#[inline(always)]
pub(crate) fn unpack(k: &TableKey, v6: bool) -> DecapKey {
    let w = &k.w;
    let (src, dst) = if v6 {
        (
            (w[2] as u128) << 64 | w[1] as u128,
            (w[4] as u128) << 64 | w[3] as u128,
        )
    } else {
        ((w[1] >> 32) as u128, w[1] as u32 as u128)
    };
    DecapKey {
        fib: (w[0] >> 32) as u32 % MAX_FIB,
        key: w[0] as u32,
        sub: (w[0] >> 56) as u8,
        src,
        dst,
    }
}

/// Whether key words `w` are key `k`'s in a table of family `v6` (an IPv4 table compares
/// two words: the other three are zero in all its keys, and an entry's word 2 is its
/// tables, see [`DecapEntry::words`]).
#[inline(always)]
fn same(w: &[u64; 5], k: &TableKey, v6: bool) -> bool {
    // Word by word: an array `==` of this size is a `memcmp` call.
    let x = &k.w;
    let d = (w[0] ^ x[0]) | (w[1] ^ x[1]);
    let d = if v6 {
        d | (w[2] ^ x[2]) | (w[3] ^ x[3]) | (w[4] ^ x[4])
    } else {
        d
    };
    d == 0
}

/// Copies the words of key `k` a table of family `v6` reads into `to` (an IPv4 key's
/// two: [`TableKey`]; its other words in `to` stay as they are, unread).
#[inline(always)]
fn copy_key(to: &mut TableKey, k: &TableKey, v6: bool) {
    if v6 {
        *to = *k;
    } else {
        (to.w[0], to.w[1]) = (k.w[0], k.w[1]);
    }
}

/// A decap table's hash of `k` under the table's `seeds` (of which [`DecapTable::home`]
/// keeps the top bits), foldhash style: the table/sub-type/key word with the source's low
/// half, and the source's high half with the destination's low half, each pair xored with
/// the seeds and multiplied into 128 bits whose halves are folded ([`folded_multiply`]);
/// then the two results, the first xored with the destination's high half, multiplied and
/// folded again. The input drops nothing (the sub-type fills the top byte, which a table
/// index below [`MAX_FIB`] leaves free). All five words go whole into
/// a multiply (none is folded or xored with another key word before one: IPv4 keys,
/// whose high halves are zero, and IPv6 keys whose source and destination vary together
/// cannot cancel), and the top bits of a folded product depend on every bit of both
/// operands (VNIs spaced `1 << 4` apart spread like random ones).
/// Three multiplies where [`DecapHasher`] (the control plane's maps) takes three and a
/// finaliser.
///
/// An IPv4 table's key is two words (the others are zero): as `sluice_infra`'s
/// `FoldedKeyHash`, the folded product of the two, each xored with a seed, folded again
/// with the other two seeds, the last of them odd (one multiply alone homed TEIDs
/// `i << 16` ten slots from home on average).
#[inline(always)]
fn slot_hash(seeds: &[u64; 4], k: &TableKey, v6: bool) -> u64 {
    let w = &k.w;
    let w0 = w[0];
    if !v6 {
        let h = folded_multiply(w0 ^ seeds[0], w[1] ^ seeds[1]);
        return folded_multiply(h ^ seeds[2], seeds[3] | 1);
    }
    let x = folded_multiply(w0 ^ seeds[0], w[1] ^ seeds[1]);
    let y = folded_multiply(w[2] ^ seeds[2], w[3] ^ seeds[3]);
    folded_multiply(x ^ w[4], y ^ 0x9e37_79b9_7f4a_7c15)
}

/// A table's four hash seeds from one `seed` (splitmix64).
fn slot_seeds(seed: u64) -> [u64; 4] {
    let mut s = seed;
    [0; 4].map(|_| {
        s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let z = (s ^ (s >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

/// The offset of the last byte [`DecapEntry::add_rx`] adds to in a counters row.
const RX_LAST: usize =
    (sluice_vnet::interface::counter::RX_BYTES + 1) * std::mem::size_of::<Counter>() - 1;
const _: () = assert!(
    sluice_vnet::interface::counter::RX_PACKETS < sluice_vnet::interface::counter::RX_BYTES
);

/// The slots of a new [`DecapTable`] (a power of two); the table grows, never shrinks.
const MIN_SLOTS: usize = 8;

/// A decap node's tunnel table (one copy per thread, only that thread reads and writes it:
/// the control plane changes it through `foreach_thread`): open addressing with linear
/// probing over 64-byte slots that hold the entries themselves ([`DecapEntry`]: the full
/// key beside what a packet needs), at most half full. A lookup computes the key's home
/// slot, which `DecapTable::start` prefetches as soon as a packet's key is parsed, and
/// compares the keys of the slots from there to the first empty one: a hit is usually one
/// cache line, the one prefetched. Deletion shifts the entries after the hole back
/// (no tombstones: a miss still ends at the first empty slot). The hash is seeded per
/// table at random: the tunnels are the operator's, but outer headers chosen by an
/// attacker should not be able to aim lookups at the longest run of occupied slots.
pub struct DecapTable {
    /// The slots (a power of two long, at most half of them full).
    slots: Box<[Option<DecapEntry>]>,
    /// The counters each slot's row belongs to (what keeps the row alive: set, moved and
    /// cleared with the slot's entry).
    keep: Box<[Option<Arc<IfCounters>>]>,
    /// Entries.
    len: usize,
    /// The hash's seeds ([`slot_seeds`]).
    seeds: [u64; 4],
    /// 64 − log2(the slots): [`DecapTable::home`] keeps the hash's top bits.
    shift: u32,
    /// The underlay family: IPv6 (five-word keys) or IPv4 (two: [`TableKey`]).
    v6: bool,
    /// The vnet interface table, whose record of a packet's tunnel `ethernet-input` (or,
    /// for an L3 tunnel, [`l3_fibs`]) reads next (prefetched with the counters; None in a
    /// runtime without vnet).
    if_attrs: Option<IfAttrs>,
    /// The feature next table and `ethernet-input`'s slot in it (the `l2-input` arc it
    /// starts): an L2 tunnel with an `l2-input` feature has its frames go through
    /// `ethernet-input`, which applies it ([`l2_direct`]; None: always through it).
    l2_features: Option<(Arc<FeatureNext>, usize)>,
}

impl Default for DecapTable {
    /// An IPv6 table (five-word keys, which also hold IPv4 ones).
    fn default() -> Self {
        DecapTable::of_family(true)
    }
}

/// Why [`DecapTable::insert`] refused a tunnel (the table is unchanged).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsertError {
    /// The table could not grow.
    NoMemory,
    /// The tunnel's counters have no row for the table's thread.
    NoRow,
    /// An IPv6 key (an address wider than 32 bits) in an IPv4 table, which keeps 32.
    Family,
    /// An underlay table index from `MAX_FIB` up (the key's bits for the sub-type).
    Table,
}

/// A decap key's lookup result: the tunnel index, or [`MISS`].
pub const MISS: u32 = u32::MAX;

impl DecapTable {
    /// An empty table of underlay family `v6` (IPv6 or IPv4 keys) with a random seed.
    pub fn of_family(v6: bool) -> Self {
        use std::hash::BuildHasher;
        let seed = std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64);
        DecapTable::with_seed_family(seed, v6)
    }
    /// An empty IPv6 table whose hash starts from `seed`.
    pub fn with_seed(seed: u64) -> Self {
        DecapTable::with_seed_family(seed, true)
    }
    /// An empty table of underlay family `v6` whose hash starts from `seed`.
    pub fn with_seed_family(seed: u64, v6: bool) -> Self {
        DecapTable {
            v6,
            slots: (0..MIN_SLOTS).map(|_| None).collect(),
            keep: (0..MIN_SLOTS).map(|_| None).collect(),
            len: 0,
            seeds: slot_seeds(seed),
            shift: 64 - MIN_SLOTS.trailing_zeros(),
            if_attrs: None,
            l2_features: None,
        }
    }
    /// Adds the tunnel `e` under key `k`, or replaces the entry of `k`, for thread `t`
    /// (whose row of the counters the entry holds). Fails when the table cannot grow
    /// (memory), the counters have no row for `t` or `k` is not of the table's family;
    /// the table is then unchanged.
    pub fn insert(&mut self, k: DecapKey, e: &DecapSpec, t: usize) -> Result<(), InsertError> {
        // [`pack`] would drop an IPv4 table's high address bits (it checks in debug only),
        // and mix a table index's bits from [`MAX_FIB`] up with the sub-type.
        if !self.v6 && (k.src | k.dst) >> 32 != 0 {
            return Err(InsertError::Family);
        }
        if k.fib >= MAX_FIB {
            return Err(InsertError::Table);
        }
        // NO_KEY's sub-type: a tunnel under it would be found for DecapFrame's "no last key".
        debug_assert!(
            k.sub != NO_KEY.sub,
            "decap key sub-type {} is NO_KEY's",
            k.sub
        );
        let rx = RxRow::new(&e.counters, t).ok_or(InsertError::NoRow)?;
        let p = pack(&k, self.v6);
        let i = match self.probe(&p, self.home_of(&p) as usize, self.v6) {
            MISS => {
                if (self.len + 1) * 2 > self.slots.len() {
                    self.grow()?;
                }
                self.len += 1;
                self.free_slot(self.home_of(&p) as usize)
            }
            i => i as usize,
        };
        let (mode, bits) = pack_mode(e.mode);
        let mut words = p.w;
        if !self.v6 {
            words[2] = fibs_word(e.fibs);
        }
        // The entry (and its row pointer) first, then what keeps the row.
        self.slots[i] = Some(DecapEntry {
            words,
            rx,
            sw_if: e.sw_if,
            next: e.next,
            mode,
            mac: e.mac,
            bits: bits | if e.l2 { BIT_L2 } else { 0 } | if e.routed { BIT_ROUTED } else { 0 },
        });
        self.keep[i] = Some(e.counters.clone());
        Ok(())
    }
    /// Twice the slots, every entry in its new place.
    fn grow(&mut self) -> Result<(), InsertError> {
        let n = self.slots.len() * 2;
        let mut slots = Vec::new();
        let mut keep = Vec::new();
        slots
            .try_reserve_exact(n)
            .map_err(|_| InsertError::NoMemory)?;
        keep.try_reserve_exact(n)
            .map_err(|_| InsertError::NoMemory)?;
        slots.resize_with(n, || None);
        keep.resize(n, None);
        let old = std::mem::replace(&mut self.slots, slots.into_boxed_slice());
        let old_keep = std::mem::replace(&mut self.keep, keep.into_boxed_slice());
        self.shift = 64 - n.trailing_zeros();
        for (e, c) in old.into_vec().into_iter().zip(old_keep.into_vec()) {
            if let Some(e) = e {
                let i = self.free_slot(self.home_of(&e.key()) as usize);
                self.slots[i] = Some(e);
                self.keep[i] = c;
            }
        }
        Ok(())
    }
    /// The first empty slot from `i` on (there is one: the table is at most half full).
    fn free_slot(&self, mut i: usize) -> usize {
        let m = self.slots.len() - 1;
        while self.slots[i & m].is_some() {
            i += 1;
        }
        i & m
    }
    /// The slot where the probe for `k` starts: the top bits of [`slot_hash`] (as many as
    /// the slots need).
    #[cfg(test)]
    fn home(&self, k: &DecapKey) -> u32 {
        self.home_of(&pack(k, self.v6))
    }
    /// [`DecapTable::home`] of a packed key.
    #[inline(always)]
    fn home_of(&self, k: &TableKey) -> u32 {
        (slot_hash(&self.seeds, k, self.v6) >> self.shift) as u32
    }
    /// The table's packing of `k` ([`pack`]).
    #[cfg(test)]
    fn pack(&self, k: &DecapKey) -> TableKey {
        pack(k, self.v6)
    }
    /// The slot where the probe for `k` starts ([`DecapTable::lookup_frame`]'s `homes`),
    /// prefetched; `v6` is the table's family (a decap node's constant).
    #[inline(always)]
    pub(crate) fn start(&self, k: &TableKey, v6: bool) -> u32 {
        debug_assert_eq!(v6, self.v6);
        let i = (slot_hash(&self.seeds, k, v6) >> self.shift) as u32;
        sluice_infra::prefetch(self.slots.as_ptr().wrapping_add(i as usize));
        i
    }
    /// The slot of `k` probing from slot `i`, or [`MISS`].
    #[inline(always)]
    fn probe(&self, k: &TableKey, i: usize, v6: bool) -> u32 {
        self.find(k, i, v6).map_or(MISS, |(r, _)| r)
    }
    /// The slot and entry of `k` probing from slot `i` (`v6`: the table's family).
    #[inline(always)]
    fn find(&self, k: &TableKey, mut i: usize, v6: bool) -> Option<(u32, &DecapEntry)> {
        let m = self.slots.len() - 1;
        loop {
            match self.slots.get(i & m) {
                Some(Some(e)) if e.is(k, v6) => return Some(((i & m) as u32, e)),
                Some(Some(_)) => i += 1,
                _ => return None,
            }
        }
    }
    /// Sets the L2 mode, [`DecapEntry::routed`] and (an IPv4 table's) the interface's
    /// tables ([`DecapEntry::fibs4`]) of the tunnel of key `k` (of interface `sw_if`: an
    /// entry of another interface is left alone).
    pub fn set_mode(&mut self, k: &DecapKey, sw_if: u32, m: L2Mode, routed: bool, fibs: [u32; 2]) {
        let i = self.lookup(k);
        let v6 = self.v6;
        if let Some(Some(e)) = self.slots.get_mut(i as usize) {
            if e.sw_if == sw_if {
                let (mode, bits) = pack_mode(m);
                e.mode = mode;
                e.bits = (e.bits & BIT_L2) | bits | if routed { BIT_ROUTED } else { 0 };
                if !v6 {
                    e.words[2] = fibs_word(fibs);
                }
            }
        }
    }
    /// The interface table whose records `DecapTable::lookup_frame` prefetches, and
    /// the feature table with `ethernet-input`'s slot ([`l2_direct`]).
    pub fn set_if_attrs(&mut self, a: Option<IfAttrs>, l2: Option<(Arc<FeatureNext>, usize)>) {
        self.if_attrs = a;
        self.l2_features = l2;
    }
    /// What [`l2_direct`] reads (taken once per frame): None in a runtime without vnet.
    #[inline(always)]
    pub fn l2_tables(&self) -> Option<L2Tables<'_>> {
        let (features, slot) = self.l2_features.as_ref()?;
        Some(L2Tables {
            features: features.any(*slot).then_some(&**features),
            slot: *slot,
        })
    }
}

/// `ethernet-input`'s `l2-input` arc features, for [`l2_direct`].
#[derive(Clone, Copy)]
pub struct L2Tables<'a> {
    /// The features (None: no interface has one; read once per frame).
    features: Option<&'a FeatureNext>,
    slot: usize,
}

/// Where a tunnel's untagged decapsulated frames go ([`l2_direct`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L2Mode {
    /// Through `ethernet-input`: an L3 or admin-down tunnel, an input redirect, an
    /// `l2-input` feature on the tunnel.
    Ethernet,
    /// Straight to `l2-input`, cross-connected to this interface.
    Xconnect(u32),
    /// Straight to `l2-input`, in this bridge domain.
    Bridge(u16),
}

/// An interface's [`L2Mode`] from its record (what `ethernet-input` reads: admin state,
/// cross-connect, bridge domain, input redirect), without its `l2-input` features. The
/// control plane keeps it in the tunnel's decap entries ([`DecapEntry::mode`]), through
/// vnet's interface-change hook ([`if_changed`]).
pub fn if_mode(a: &IfAttr) -> L2Mode {
    use std::sync::atomic::Ordering::Relaxed;
    let (xc, bd) = (a.l2_xc.load(Relaxed), a.l2_bd.load(Relaxed));
    if xc | bd == 0 || !a.admin_up.load(Relaxed) || a.rx_redirect.load(Relaxed) != 0 {
        L2Mode::Ethernet
    } else if xc != 0 {
        L2Mode::Xconnect(xc - 1)
    } else {
        L2Mode::Bridge(bd as u16)
    }
}

/// Sends the decapsulated Ethernet frame `b` of tunnel `e` straight to `l2-input` (arc
/// `to`) when the mode its entry keeps ([`DecapEntry::mode`]) is cross-connect or bridge
/// and the tunnel has no `l2-input` feature (else `ethernet-input` sends the frame to it;
/// the features are read only when some interface has one), as VPP's decap nodes do,
/// setting what `ethernet-input` would have: `l2.l2_hdr_offset`, and `tx_if` = the
/// cross-connect peer with `l2.bd_index` 0, or `l2.bd_index` = the bridge domain. `None`
/// (the frame goes through `ethernet-input`): mode [`L2Mode::Ethernet`], a feature, or a
/// VLAN-tagged frame (perhaps a sub-interface's). Per packet, from the entry's bits (no
/// [`L2Mode`] made: decoding one and caching it per tunnel cost more at each change of
/// tunnel than these few loads).
#[inline(always)]
pub fn l2_direct(b: &mut Buffer<'_>, t: L2Tables<'_>, e: &DecapEntry, to: Next) -> Option<Next> {
    let kind = e.bits & (MODE_XC | MODE_BD);
    if kind == 0 {
        return None;
    }
    // An `l2-input` feature on this tunnel (not on any interface).
    const NONE: Next = Next(u16::MAX);
    if t.features
        .is_some_and(|f| f.next(t.slot, e.sw_if, NONE) != NONE)
    {
        return None;
    }
    let h = b.head::<14>()?;
    if matches!(
        u16::from_be_bytes([h[12], h[13]]),
        ethertype::VLAN | ethertype::QINQ | QINQ_9100
    ) {
        return None;
    }
    b.hdr.l2.l2_hdr_offset = b.hdr.current_data;
    if kind == MODE_XC {
        b.hdr.tx_if = e.mode as u32;
        b.hdr.l2.bd_index = 0;
    } else {
        b.hdr.l2.bd_index = e.mode;
    }
    Some(to)
}

/// The arcs of [`DecapProto::L3_DIRECT`].
#[derive(Clone, Copy)]
pub struct L3Arcs {
    /// To `ethernet-input` (what `finish` returns for an IP payload).
    pub eth: Next,
    /// To `ip4-input`.
    pub ip4: Next,
    /// To `ip6-input`.
    pub ip6: Next,
}

/// Whether an interface's decapsulated IP packets may skip `ethernet-input` ([`decap_l3`]
/// with an [`L3Direct`]), from its record: an admin-up L3 interface without an input
/// redirect (what `ethernet-input` would otherwise drop, switch or redirect). The control
/// plane keeps it in the tunnel's decap entries ([`DecapEntry::routed`]) beside the L2
/// mode, through the same hook ([`if_changed`]).
pub fn if_routed(a: &IfAttr) -> bool {
    use std::sync::atomic::Ordering::Relaxed;
    let l3 = a.l2_xc.load(Relaxed) | a.l2_bd.load(Relaxed) == 0;
    l3 && a.admin_up.load(Relaxed) && a.rx_redirect.load(Relaxed) == 0
}

/// An interface's IPv4 and IPv6 tables from its record (what [`l3_fibs`] reads; the
/// control plane keeps them in an IPv4 table's decap entries, [`DecapEntry::fibs4`],
/// through [`if_changed`]).
pub fn if_fibs(a: &IfAttr) -> [u32; 2] {
    use std::sync::atomic::Ordering::Relaxed;
    [a.fib4.load(Relaxed), a.fib6.load(Relaxed)]
}

/// [`DecapEntry::fibs4`]'s word.
fn fibs_word(f: [u32; 2]) -> u64 {
    (f[1] as u64) << 32 | f[0] as u64
}

/// The IPv4 and IPv6 tables of tunnel `sw_if`, for the IP packets of a tunnel whose entry
/// says [`DecapEntry::routed`], in an IPv6 table (an IPv4 table's entry has them:
/// [`DecapEntry::fibs4`]). From the record `DecapTable::lookup_frame` prefetched,
/// once per tunnel per frame.
#[inline]
pub fn l3_fibs(ifs: &[IfAttr], sw_if: u32) -> [u32; 2] {
    if_fibs(sluice_vnet::interface::attr(ifs, sw_if))
}

/// Where [`decap_l3`] sends an IP packet of an up L3 tunnel instead of `ethernet-input`:
/// the tunnel interface's tables ([`l3_fibs`]) and the protocol's arcs.
#[derive(Clone, Copy)]
pub struct L3Direct {
    /// The tunnel's IPv4 and IPv6 FIB indices.
    pub fibs: [u32; 2],
    /// The protocol's arcs.
    pub arcs: L3Arcs,
}

impl DecapTable {
    /// Removes the tunnel of key `k` (if any); the entries after it move back so that
    /// every probe still ends at the first empty slot.
    pub fn remove(&mut self, k: &DecapKey) {
        let hole = self.lookup(k);
        if hole == MISS {
            return;
        }
        let m = self.slots.len() - 1;
        let mut hole = hole as usize;
        // The entry (and its row pointer) first, then what keeps the row.
        self.slots[hole] = None;
        self.keep[hole] = None;
        self.len -= 1;
        let mut j = hole;
        loop {
            j = (j + 1) & m;
            let Some(e) = &self.slots[j] else {
                break;
            };
            // The entry at `j` may fill the hole unless its home lies after the hole
            // (cyclically in (hole, j]): its probe would not reach the hole.
            let h = self.home_of(&e.key()) as usize;
            if j.wrapping_sub(h) & m >= j.wrapping_sub(hole) & m {
                self.slots[hole] = self.slots[j].take();
                self.keep[hole] = self.keep[j].take();
                hole = j;
            }
        }
    }
    /// Number of tunnels.
    pub fn len(&self) -> usize {
        self.len
    }
    /// No tunnel.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Entry `i` (a slot from [`DecapTable::lookup`], valid until the table changes).
    #[inline(always)]
    pub fn entry(&self, i: u32) -> Option<&DecapEntry> {
        self.slots.get(i as usize)?.as_ref()
    }
    /// The slot of `k`, or [`MISS`].
    #[inline(always)]
    pub fn lookup(&self, k: &DecapKey) -> u32 {
        let p = pack(k, self.v6);
        self.probe(&p, self.home_of(&p) as usize, self.v6)
    }
    /// Looks up every `keys[t]` into `out[t]` (a slot or [`MISS`]), probing from
    /// `homes[t]` (from [`DecapTable::start`], which prefetched the slot when the packet
    /// was parsed), and for each hit prefetches its counters row (this thread's, which the
    /// entry points at) and the tunnel's interface record (what `ethernet-input` or
    /// [`l3_fibs`] reads next: with many tunnels it would miss on each packet's record) —
    /// but not when `l2_direct` (the node sends frames straight to `l2-input`) and the
    /// entry's mode says its frames go there, nor in an IPv4 table when `l3_direct` (IP
    /// packets straight to `ip4-input`/`ip6-input`) and the entry is an up L3 tunnel's (it
    /// keeps the tables, [`DecapEntry::fibs4`]): then nothing reads the record. The three
    /// slices are the frame's new keys in order, so the pass reads them in step, with no
    /// index of packets. `V6` is the table's family.
    #[inline]
    pub(crate) fn lookup_frame<const V6: bool>(
        &self,
        keys: &[TableKey],
        homes: &[u32],
        out: &mut [u32],
        l2_direct: bool,
        l3_direct: bool,
    ) {
        debug_assert_eq!(V6, self.v6);
        let attrs = self.if_attrs.as_deref();
        let n = keys.len().min(homes.len()).min(out.len());
        let (keys, homes, out) = (&keys[..n], &homes[..n], &mut out[..n]);
        let (slots, m) = (&*self.slots, self.slots.len() - 1);
        for t in 0..n {
            let (k, mut i) = (&keys[t], homes[t] as usize & m);
            let e = loop {
                match slots.get(i) {
                    Some(Some(e)) if e.is(k, V6) => break Some(e),
                    Some(Some(_)) => i = (i + 1) & m,
                    _ => break None,
                }
            };
            let Some(e) = e else {
                out[t] = MISS;
                continue;
            };
            out[t] = i as u32;
            e.prefetch_rx();
            // Nothing reads the record of a tunnel whose frames go straight to `l2-input`,
            // nor (in an IPv4 table, whose entries keep the tables) of an up L3 tunnel
            // whose IP packets go straight to `ip4-input`/`ip6-input`.
            let skip = (l2_direct && e.bits & (MODE_XC | MODE_BD) != 0)
                || (!V6 && l3_direct && e.bits & (BIT_ROUTED | BIT_L2) == BIT_ROUTED);
            match attrs {
                Some(a) if !skip => {
                    // A record may straddle two lines: its first and last bytes.
                    let r = sluice_vnet::interface::attr(a, e.sw_if) as *const IfAttr;
                    sluice_infra::prefetch(r);
                    sluice_infra::prefetch(r.cast::<u8>().wrapping_add(IF_ATTR_LAST));
                }
                _ => {}
            }
        }
    }
}

/// The outer tag of 802.1ad's pre-standard form (`ethernet-input` takes it as QinQ too).
const QINQ_9100: u16 = 0x9100;

/// The offset of an interface record's last byte.
const IF_ATTR_LAST: usize = std::mem::size_of::<IfAttr>() - 1;

/// The decap nodes' outer IP header (`ip4-local`/`ip6-local` validated it): its length and
/// addresses as key values. `Err(0)`: truncated (or an IPv4 IHL below 5); `Err(1)`: an IPv6
/// next header other than `proto` (extension headers before the tunnel header).
#[inline(always)]
pub(crate) fn outer<const V6: bool>(d: &[u8], proto: u8) -> Result<(usize, u128, u128), u16> {
    if V6 {
        match d.get(..40) {
            Some(h) if h[6] == proto => {
                let a = |i: usize| u128::from_be_bytes(h[i..i + 16].try_into().unwrap_or([0; 16]));
                Ok((40, a(8), a(24)))
            }
            Some(_) => Err(1),
            None => Err(0),
        }
    } else {
        let h = d.first_chunk::<20>().ok_or(0u16)?;
        let a = |i: usize| u32::from_be_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]) as u128;
        let ihl = ((h[0] & 0xf) as usize) * 4;
        if ihl < 20 {
            return Err(0);
        }
        Ok((ihl, a(12), a(16)))
    }
}

/// Whether an outer destination (as a key value: an IPv4 address in the low 32 bits) is a
/// multicast group.
#[inline(always)]
pub(crate) fn is_group<const V6: bool>(dst: u128) -> bool {
    if V6 {
        dst >> 120 == 0xff
    } else {
        (dst as u32) >> 28 == 0xe
    }
}

/// The rx packets and bytes of decapsulated packets of one tunnel, summed by
/// [`decap_to`] and [`decap_l3`] for [`DecapFrame`] to add to the tunnel's counters: per
/// packet, or once per frame for the packets of the tunnel the frame's first lookup
/// needs not be made for (VPP's decap nodes sum a run of one tunnel the same way).
#[derive(Clone, Copy, Default)]
pub struct RxSum {
    /// Packets.
    pub packets: u64,
    /// Their bytes (the inner packets, outer headers stripped).
    pub bytes: u64,
}

impl RxSum {
    /// Counts one packet of `bytes` bytes.
    #[inline(always)]
    pub fn add(&mut self, bytes: u64) {
        self.packets += 1;
        self.bytes += bytes;
    }
}

/// Strips `n` bytes of outer headers and hands the inner packet to tunnel `e`: `rx_if`,
/// counted in `rx`.
#[inline(always)]
pub fn decap_to(b: &mut Buffer<'_>, n: usize, e: &DecapEntry, rx: &mut RxSum) -> Next {
    b.advance(n);
    b.hdr.rx_if = e.sw_if;
    b.hdr.flags &= !LOCALLY_ORIGINATED;
    rx.add(b.total_len() as u64);
    e.next
}

/// Strips `n` bytes of outer headers in front of an inner IP packet (EtherType `et`) and
/// hands it to tunnel `e` through `ethernet-input`, which applies the tunnel interface's
/// state, table and features: a 14-byte header to the tunnel's MAC goes in front (the
/// outer headers were at least that long, so there is room).
///
/// With `d` (an up L3 tunnel whose decap next is `ethernet-input`, [`DecapProto::L3_DIRECT`];
/// [`DecapFrame`] decides it once per tunnel per frame) the packet goes straight to
/// `ip4-input`/`ip6-input` instead, with what `ethernet-input` would have set: the header
/// written in the last 14 bytes of the outer headers and stripped (`l2.l2_hdr_offset`, for
/// a punt), `ip.fib_index` = the tunnel's table of that family.
/// An `et` other than IPv4's or IPv6's goes through `ethernet-input`, which drops it as
/// `unknown_ethertype`: unreachable today (GRE and IP-in-IP pass only those two, from
/// [`inner_et`], GTP-U from the inner version nibble), so untested; it keeps a future
/// caller from putting another EtherType on the direct path.
#[inline(always)]
pub fn decap_l3(
    b: &mut Buffer<'_>,
    n: usize,
    e: &DecapEntry,
    et: u16,
    d: Option<L3Direct>,
    rx: &mut RxSum,
) -> Next {
    let direct = d.and_then(|d| match et {
        ethertype::IPV4 => Some((d.fibs[0], d.arcs.ip4)),
        ethertype::IPV6 => Some((d.fibs[1], d.arcs.ip6)),
        _ => None,
    });
    if let Some((fib, to)) = direct {
        if let Some(h) = b
            .data_mut()
            .get_mut(..n)
            .and_then(|o| o.last_chunk_mut::<14>())
        {
            h[..6].copy_from_slice(&e.mac);
            h[6..12].fill(0);
            h[12..14].copy_from_slice(&et.to_be_bytes());
            b.advance(n);
            b.hdr.l2.l2_hdr_offset = b.hdr.current_data - 14;
            b.hdr.ip.fib_index = fib;
            b.hdr.rx_if = e.sw_if;
            // What `ethernet-input` clears on the way it skips (the outer packet may have
            // come to us through a BVI).
            b.hdr.flags &= !(L2_TO_BVI | LOCALLY_ORIGINATED);
            rx.add(b.total_len() as u64);
            return to;
        }
    }
    b.advance(n);
    let len = b.total_len() as u64;
    if let Some(h) = b.push_front(14) {
        h[..6].copy_from_slice(&e.mac);
        h[6..12].fill(0);
        h[12..14].copy_from_slice(&et.to_be_bytes());
    }
    b.hdr.rx_if = e.sw_if;
    b.hdr.flags &= !LOCALLY_ORIGINATED;
    rx.add(len);
    e.next
}

/// The EtherType of an inner IP packet whose first byte is `v`, if it is the version
/// `proto` (IP protocol 4 / 41, or GRE's 0x0800 / 0x86dd) announces.
#[inline(always)]
pub fn inner_et(v: Option<&u8>, ip4: bool) -> Option<u16> {
    match (v.map(|v| v >> 4), ip4) {
        (Some(4), true) => Some(0x0800),
        (Some(6), false) => Some(0x86dd),
        _ => None,
    }
}

/// Trace record of the decap nodes.
#[derive(Copy, Clone)]
pub struct DecapTrace {
    /// Tunnel interface, if found.
    pub sw_if: Option<u32>,
    /// VNI / key.
    pub key: u32,
}

impl TraceRecord for DecapTrace {
    fn format(&self, out: &mut String) {
        match self.sw_if {
            Some(i) => out.push_str(&format!("tunnel sw_if_index {} key {}", i, self.key)),
            None => out.push_str(&format!("no tunnel, key {}", self.key)),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Control plane: the tunnel table and the add/delete every protocol calls.

use sluice_graph::{NodeIndex, ThreadGraph, Vlib};
use sluice_vnet::error::{VnetError, VnetResult};
use sluice_vnet::ip_local::LocalKey;
use sluice_vnet::{Interfaces, SwIfIndex};

/// One tunnel.
#[derive(Clone, Debug)]
pub struct Tunnel {
    /// Protocol.
    pub kind: Kind,
    /// Interface name instance (`vxlan_tunnel<n>`, `gre<n>`, `ipip<n>`).
    pub instance: u32,
    /// The tunnel interface.
    pub sw_if: SwIfIndex,
    /// Local (outer source) address.
    pub src: IpAddr,
    /// Remote (outer destination) address.
    pub dst: IpAddr,
    /// VNI, GRE key (0: none), or 0.
    pub key: u32,
    /// Underlay table id and its FIB index.
    pub table_id: u32,
    /// FIB index of `table_id`.
    pub fib_index: u32,
    /// `decap-next node <n>` (None: the protocol's default).
    pub decap_next: Option<String>,
    /// `dst` is a multicast group, joined on this interface (VXLAN).
    pub mcast_if: Option<SwIfIndex>,
}

impl Tunnel {
    /// Its decap key (what tunnels are told apart by: the conflict check, `del`).
    pub fn decap_key(&self) -> DecapKey {
        decap_key_of(self.fib_index, self.kind, self.key, self.src, self.dst)
    }
    /// Its key in the decap nodes' tables: the decap key, but for a multicast group
    /// (source any) the source is its `mcast` interface ([`group_source`]), so that only
    /// what that interface receives for the group is decapsulated (VPP's mfib accepts a
    /// group only on its interface).
    pub fn table_key(&self) -> DecapKey {
        let k = self.decap_key();
        match self.mcast_if {
            Some(m) => DecapKey {
                src: group_source(m.0),
                ..k
            },
            None => k,
        }
    }
}

/// The source of a decap key to a multicast group: the interface the packet came in on
/// (the decap nodes' key for a group; no unicast tunnel has a group as its destination,
/// so these keys are apart from every source address).
#[inline(always)]
pub fn group_source(rx_if: u32) -> u128 {
    rx_if as u128
}

/// The decap key of a tunnel from `src` to `dst`: packets come from `dst` to `src` — or,
/// when `dst` is a multicast group, from any source (0) to the group.
pub fn decap_key_of(fib: u32, kind: Kind, key: u32, src: IpAddr, dst: IpAddr) -> DecapKey {
    let (from, to) = match dst.is_multicast() {
        true => (0, addr_key(dst)),
        false => (addr_key(dst), addr_key(src)),
    };
    DecapKey {
        fib,
        key,
        sub: sub_of(kind),
        src: from,
        dst: to,
    }
}

/// The decap key's sub-type of a tunnel.
pub fn sub_of(kind: Kind) -> u8 {
    match kind {
        // The key itself tells a keyed tunnel apart (0: none, as in VPP), not a bit here.
        Kind::Gre { teb } => teb as u8,
        _ => 0,
    }
}

/// Every tunnel (a `Vlib` extension), by tunnel index, with the indexes that keep creating
/// and deleting a tunnel O(1) amortised however many exist (10k tunnels are 10k
/// creations, not 50M comparisons): the key → tunnel map the conflict check and `del`
/// use, `sw_if_index` → tunnel, a free list of slots, per-prefix name instances.
#[derive(Default)]
pub struct Tunnels {
    /// Index = tunnel index (slots of deleted tunnels are reused); read through
    /// [`Tunnels::iter`] and [`Tunnels::get`]: only [`Tunnels::insert`] and
    /// [`Tunnels::remove`] change it, keeping the indexes in step.
    list: Vec<Option<Tunnel>>,
    /// Free slots of `list`.
    free: Vec<usize>,
    /// (protocol prefix, IPv6 underlay, decap key) → index: one key space per protocol
    /// (a GRE L3 and a TEB tunnel share `gre`; their keys differ in `sub`).
    by_key:
        HashMap<(&'static str, bool, DecapKey), usize, std::hash::BuildHasherDefault<DecapHasher>>,
    /// Tunnel interface → index.
    by_sw: HashMap<u32, usize>,
    /// Name instances per prefix (`vxlan_tunnel<n>`).
    instances: HashMap<&'static str, Instances>,
    /// Multicast tunnels per (group, underlay FIB index): the group's receive route goes
    /// with the last.
    groups: HashMap<(IpAddr, u32), u32>,
    /// Multicast tunnels per (group, `mcast` interface): the interface joins the group with
    /// the first and leaves it with the last ([`send_report`]).
    joins: HashMap<(IpAddr, SwIfIndex), u32>,
}

/// The name instances of one prefix: taken ones, and the lowest free one found in
/// O(log n) amortised — every instance below `next` is taken or in `holes`.
#[derive(Default)]
struct Instances {
    taken: std::collections::HashSet<u32>,
    holes: std::collections::BTreeSet<u32>,
    next: u32,
}

impl Instances {
    /// The lowest free instance (not taken yet).
    fn lowest_free(&mut self) -> u32 {
        if let Some(&h) = self.holes.first() {
            return h;
        }
        while self.taken.contains(&self.next) {
            self.next += 1;
        }
        self.next
    }
    fn take(&mut self, n: u32) {
        self.taken.insert(n);
        self.holes.remove(&n);
    }
    fn release(&mut self, n: u32) {
        if self.taken.remove(&n) && n < self.next {
            self.holes.insert(n);
        }
    }
}

impl Tunnels {
    /// The live tunnels with their indexes.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &Tunnel)> {
        self.list
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.as_ref().map(|t| (i, t)))
    }
    /// Tunnel `i`, if it exists.
    pub fn get(&self, i: usize) -> Option<&Tunnel> {
        self.list.get(i)?.as_ref()
    }
    /// The live tunnels of the kinds `f` accepts.
    pub fn iter_kind(&self, f: impl Fn(Kind) -> bool) -> impl Iterator<Item = (usize, &Tunnel)> {
        self.iter().filter(move |(_, t)| f(t.kind))
    }
    /// The tunnel (of a kind `f` accepts) whose interface is `sw`.
    pub fn by_sw_if(&self, sw: SwIfIndex, f: impl Fn(Kind) -> bool) -> Option<(usize, &Tunnel)> {
        let i = *self.by_sw.get(&sw.0)?;
        let t = self.get(i)?;
        f(t.kind).then_some((i, t))
    }
    /// The tunnel of protocol `p` with decap key `k` over an IPv6 (`ip6`) underlay.
    pub fn by_key(&self, p: &Proto, ip6: bool, k: DecapKey) -> Option<(usize, &Tunnel)> {
        let i = *self.by_key.get(&(p.prefix, ip6, k))?;
        Some((i, self.get(i)?))
    }
    /// The lowest name instance of `p` no tunnel has.
    fn lowest_instance(&mut self, p: &Proto) -> u32 {
        self.instances.entry(p.prefix).or_default().lowest_free()
    }
    /// The slot the next [`Tunnels::insert`] uses.
    fn next_slot(&self) -> usize {
        self.free.last().copied().unwrap_or(self.list.len())
    }
    /// Records tunnel `t` of protocol `p` (its key is free) in the slot of
    /// [`Tunnels::next_slot`]; its index.
    fn insert(&mut self, p: &Proto, t: Tunnel) -> usize {
        let i = self.free.pop().unwrap_or(self.list.len());
        if i == self.list.len() {
            self.list.push(None);
        }
        self.by_key
            .insert((p.prefix, t.src.is_ipv6(), t.decap_key()), i);
        self.by_sw.insert(t.sw_if.0, i);
        self.instances.entry(p.prefix).or_default().take(t.instance);
        if let Some(i) = t.mcast_if {
            *self.groups.entry((t.dst, t.fib_index)).or_default() += 1;
            *self.joins.entry((t.dst, i)).or_default() += 1;
        }
        self.list[i] = Some(t);
        i
    }
    /// Forgets tunnel `i` of protocol `p`.
    fn remove(&mut self, p: &Proto, i: usize) -> Option<Tunnel> {
        let t = self.list.get_mut(i)?.take()?;
        self.free.push(i);
        self.by_key
            .remove(&(p.prefix, t.src.is_ipv6(), t.decap_key()));
        self.by_sw.remove(&t.sw_if.0);
        if let Some(n) = self.instances.get_mut(p.prefix) {
            n.release(t.instance);
        }
        if let Some(i) = t.mcast_if {
            if let Some(n) = self.groups.get_mut(&(t.dst, t.fib_index)) {
                *n -= 1;
                if *n == 0 {
                    self.groups.remove(&(t.dst, t.fib_index));
                }
            }
            if let Some(n) = self.joins.get_mut(&(t.dst, i)) {
                *n -= 1;
                if *n == 0 {
                    self.joins.remove(&(t.dst, i));
                }
            }
        }
        Some(t)
    }
    /// Multicast tunnels to group `g` over `mcast` interface `i`.
    fn joined(&self, g: IpAddr, i: SwIfIndex) -> u32 {
        self.joins.get(&(g, i)).copied().unwrap_or(0)
    }
    /// The groups `mcast` interface `i` has joined, in order.
    fn groups_joined(&self, i: SwIfIndex) -> Vec<IpAddr> {
        let mut v: Vec<IpAddr> = self
            .joins
            .keys()
            .filter(|k| k.1 == i)
            .map(|k| k.0)
            .collect();
        v.sort_unstable();
        v
    }
    /// Multicast tunnels to group `g` in underlay FIB `fib`.
    fn group_users(&self, g: IpAddr, fib: u32) -> u32 {
        self.groups.get(&(g, fib)).copied().unwrap_or(0)
    }
}

/// Access to a decap node's table on one thread.
pub type DecapTableOf = fn(&mut ThreadGraph, NodeIndex) -> Option<&mut DecapTable>;

/// What a decap protocol does with a packet it does not decapsulate: drop it with a counted
/// reason ([`DecapFrame`] sets the error and takes [`DecapProto::DROP`]), or send it on (a
/// reply). A counter converts into `Drop` (`Err(c::Truncated.into())`).
pub enum Verdict<C> {
    /// Drop, counting this reason.
    Drop(C),
    /// This arc (the packet was answered in place).
    To(Next),
}

impl<C> From<C> for Verdict<C> {
    #[inline(always)]
    fn from(c: C) -> Self {
        Verdict::Drop(c)
    }
}

/// A protocol's decap logic, split around the tunnel lookup so that [`DecapFrame`] looks a
/// whole frame's keys up at once: [`DecapProto::parse`] reads a packet's outer headers into
/// its decap key, [`DecapProto::finish`] strips them once the tunnel is known,
/// [`DecapProto::miss`] handles a key that is no tunnel's. Drops, the `no_such_tunnel` and
/// `decapsulated` counts are [`DecapFrame`]'s.
pub trait DecapProto: Default + Send + 'static {
    /// What `parse` hands `finish` about a packet (header lengths, inner type).
    type Meta: Copy + Default + Send + 'static;
    /// The underlay family: IPv6 (else IPv4, whose keys the node packs in two words:
    /// `TableKey`).
    const IP6: bool;
    /// The decap nodes' counters.
    type Counter: CounterId;
    /// The arc to `error-drop`.
    const DROP: Next;
    /// The counter of decapsulated packets (counted once per frame).
    const DECAPSULATED: Self::Counter;
    /// The drop reason of a key that is no tunnel's.
    const NO_SUCH_TUNNEL: Self::Counter;
    /// The protocol's arcs to `ethernet-input` and `l2-input`: a frame `finish` sends to
    /// the first goes to the second when its tunnel is an L2 interface
    /// ([`l2_direct`]). None: always as `finish` says.
    const L2_DIRECT: Option<(Next, Next)> = None;
    /// The protocol's arcs to `ethernet-input`, `ip4-input` and `ip6-input`: an IP packet
    /// [`decap_l3`] would send to the first goes straight to the second or third when its
    /// tunnel is an up L3 interface and the packet is not traced (`finish` gets an
    /// [`L3Direct`]). None: always through `ethernet-input`.
    const L3_DIRECT: Option<L3Arcs> = None;
    /// A packet's decap key and what `finish` needs, or what becomes of it now (a drop
    /// with its reason, a reply).
    fn parse(
        &mut self,
        cx: &mut Cx,
        b: &mut Buffer<'_>,
    ) -> Result<(DecapKey, Self::Meta), Verdict<Self::Counter>>;
    /// Decapsulates a packet of tunnel `e` (with [`decap_to`] / [`decap_l3`], which takes
    /// `d`, counting it in `rx`: every packet `Ok` returns is counted there, which is also
    /// the node's `decapsulated` count): its arc, or the reason it is dropped.
    fn finish(
        &mut self,
        b: &mut Buffer<'_>,
        m: Self::Meta,
        e: &DecapEntry,
        d: Option<L3Direct>,
        rx: &mut RxSum,
    ) -> Result<Next, Self::Counter>;
    /// A packet whose key `k` is no tunnel's: dropped as `no_such_tunnel` unless the
    /// protocol answers it (GTP-U's Error Indication).
    #[inline(always)]
    fn miss(
        &mut self,
        _cx: &mut Cx,
        _b: &mut Buffer<'_>,
        _k: &DecapKey,
        _m: Self::Meta,
    ) -> Verdict<Self::Counter> {
        Verdict::Drop(Self::NO_SUCH_TUNNEL)
    }
}

/// The arc of verdict `v`: a drop sets `b`'s error to its reason.
#[inline(always)]
fn verdict<P: DecapProto>(cx: &mut Cx, b: &mut Buffer<'_>, v: Verdict<P::Counter>) -> u16 {
    match v {
        Verdict::Drop(c) => {
            b.hdr.error = cx.error(c);
            P::DROP.0
        }
        Verdict::To(n) => n.0,
    }
}

/// [`DecapFrame`]'s L3-direct state for the packets of tunnel `e` (computed once per
/// tunnel per frame): the tables and arcs when the tunnel is an up L3 interface whose
/// decap next is `ethernet-input`.
#[inline(always)]
fn l3_direct<P: DecapProto>(l3: Option<(&[IfAttr], L3Arcs)>, e: &DecapEntry) -> Option<L3Direct> {
    let (ifs, arcs) = l3?;
    (e.routed() && !e.l2() && e.next == arcs.eth).then(|| L3Direct {
        fibs: match P::IP6 {
            true => l3_fibs(ifs, e.sw_if),
            false => e.fibs4(),
        },
        arcs,
    })
}

/// The `l2-input` features and a protocol's arcs to `ethernet-input` and `l2-input`, for
/// [`l2_direct`] (None: the protocol has no [`DecapProto::L2_DIRECT`], or no vnet).
type L2Direct<'a> = Option<(L2Tables<'a>, (Next, Next))>;

/// Finishes packet `b` (its meta and key: `mk`) of tunnel `e` in [`DecapFrame`]:
/// traced, decapsulated by the protocol, sent straight to `l2-input` or
/// `ip4-input`/`ip6-input` when the tunnel's mode allows (`l2`, `d`: the frame's and
/// the tunnel's); its arc (a drop's error set), its rx count added to `rx` (which
/// also counts it as `decapsulated`: `finish` counts each packet it decapsulates).
#[inline(always)]
fn finish_hit<P: DecapProto>(
    proto: &mut P,
    cx: &mut Cx,
    b: &mut Buffer<'_>,
    mk: (P::Meta, &TableKey),
    e: &DecapEntry,
    (l2, d): (L2Direct<'_>, Option<L3Direct>),
    rx: &mut RxSum,
) -> u16 {
    let d = if b.hdr.is_traced() {
        let rec = DecapTrace {
            sw_if: Some(e.sw_if),
            key: mk.1.w[0] as u32,
        };
        cx.trace(b, rec);
        None
    } else {
        d
    };
    let counted = rx.packets;
    let r = proto.finish(b, mk.0, e, d, rx);
    // `decapsulated` is the sum of `rx`: every `Ok` of a protocol's `finish` counts its packet.
    debug_assert!(
        r.is_err() || rx.packets == counted + 1,
        "`finish` returned Ok without counting the packet in `rx`"
    );
    match r {
        Ok(next) => match l2 {
            Some((t, (eth, to))) if next == eth => l2_direct(b, t, e, to).unwrap_or(next).0,
            _ => next.0,
        },
        Err(c) => verdict::<P>(cx, b, Verdict::Drop(c)),
    }
}

/// Packet state in [`DecapFrame`]'s per-frame arrays: done in the parse pass (its arc is
/// in `nexts`).
const DONE: u8 = 0;
/// Packet state: its key is the previous parsed packet's (same result).
const SAME: u8 = 1;
/// Packet state: a new key, the next of the frame's `keys`.
const NEW: u8 = 2;

/// A key no packet has (no protocol parses a sub-type of 255): [`DecapFrame`]'s previous
/// key when it knows none.
const NO_KEY: DecapKey = DecapKey {
    fib: u32::MAX,
    key: u32::MAX,
    sub: u8::MAX,
    src: u128::MAX,
    dst: u128::MAX,
};

/// [`NO_KEY`] packed (in either family: its sub-type alone tells it apart).
const NO_TABLE_KEY: TableKey = TableKey { w: [u64::MAX; 5] };

/// The decap node of every protocol (one per protocol and underlay family, one instance
/// per thread): a frame at a time, in passes — parse every packet's outer headers into its
/// key (a packet of the last frame's last key is finished right away, its entry known; of
/// the others, a key equal to the previous one's is not looked up again: a frame from one
/// new tunnel costs one lookup; a new key's slot is prefetched when it is parsed), look the
/// new keys up together (`DecapTable::lookup_frame`: the slots' keys compared, each
/// hit's counters row and interface record prefetched, so with thousands of tunnels the
/// cache misses of the frame overlap instead of stalling each packet), then
/// finish the packets left (none when the whole frame is the last frame's tunnel's). It
/// owns the thread's (table, src, dst, key) → tunnel table, which the control plane
/// reaches through [`table_of`].
pub struct DecapFrame<P: DecapProto> {
    /// The protocol's parse/finish.
    pub proto: P,
    /// (table, src, dst, key) → tunnel; changed only through `table()`, which also forgets
    /// the cached previous key.
    table: DecapTable,
    /// The frame's new keys in packet order (a key is new when it differs from the
    /// previous parsed packet's) from 1; at 0 the last frame's last key (or [`NO_KEY`]).
    /// Packed ([`TableKey`]): an IPv4 node writes and reads only the first two words.
    keys: Box<[TableKey; FRAME_SIZE + 1]>,
    /// Their keys' home slots ([`DecapTable::start`]), by position in `keys`.
    homes: [u32; FRAME_SIZE + 1],
    /// Their lookup results (a slot or [`MISS`]), by position in `keys`.
    found: [u32; FRAME_SIZE + 1],
    metas: Box<[P::Meta; FRAME_SIZE]>,
    /// Per packet: [`DONE`], [`SAME`] or [`NEW`].
    state: [u8; FRAME_SIZE],
    nexts: [u16; FRAME_SIZE],
    /// The last key looked up and its result (kept across frames; cleared by any change
    /// of the table).
    last: Option<(TableKey, u32)>,
}

impl<P: DecapProto> Default for DecapFrame<P> {
    fn default() -> Self {
        DecapFrame {
            proto: P::default(),
            table: DecapTable::of_family(P::IP6),
            keys: Box::new([TableKey::default(); FRAME_SIZE + 1]),
            homes: [0; FRAME_SIZE + 1],
            found: [MISS; FRAME_SIZE + 1],
            metas: Box::new([P::Meta::default(); FRAME_SIZE]),
            state: [DONE; FRAME_SIZE],
            nexts: [0; FRAME_SIZE],
            last: None,
        }
    }
}

impl<P: DecapProto> sluice_graph::NodeFn for DecapFrame<P> {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        let arena = cx.arena();
        let n = frame.len().min(FRAME_SIZE);
        let frame = &frame[..n];
        // `keys[0]` is the last frame's last key and `found[0]` its result (or a key no
        // packet has, not found): the frame's new keys are `keys[1..new]`.
        (self.keys[0], self.found[0]) = self.last.unwrap_or((NO_TABLE_KEY, MISS));
        // The key whose result is known before the frame (the last frame's last) and its
        // entry: a packet of it is finished in the parse pass (below).
        let (known, hit) = (self.keys[0], self.table.entry(self.found[0]));
        let l2 = P::L2_DIRECT.and_then(|arcs| Some((self.table.l2_tables()?, arcs)));
        let l3 = P::L3_DIRECT.and_then(|arcs| Some((self.table.if_attrs.as_deref()?, arcs)));
        let hit_direct = hit.and_then(|e| l3_direct::<P>(l3, e));
        let mut decapsulated = 0;
        // The known tunnel's rx counts, added to its row once at the end of the frame.
        let mut hit_rx = RxSum::default();
        let ahead = frame.get(sluice_graph::PREFETCH_AHEAD..).unwrap_or(&[]);
        // Pass 1a: while the packets are the known key's (or malformed), each is finished
        // as soon as it is parsed (a frame from the last frame's tunnel goes through in
        // this one pass; unlike VPP's last-tunnel cache, which is per frame and serves
        // every run, only the frame's leading run of the last frame's key); from the first
        // packet of another key on (`j0`, its key and meta in `first`), passes 1b to 3 as
        // before, so a frame of new keys (thousands of tunnels) runs as it did.
        let (mut j0, mut first) = (0, None);
        if let Some(e) = hit {
            while let Some(&bi) = frame.get(j0) {
                if let Some(&a) = ahead.get(j0) {
                    arena.prefetch(a);
                }
                // SAFETY: the dispatcher hands this node exclusive ownership of every
                // index in `frame`; each index appears once and the view lives for this
                // iteration only.
                let mut b = unsafe { arena.buffer(bi) };
                match self.proto.parse(cx, &mut b) {
                    Err(v) => self.nexts[j0] = verdict::<P>(cx, &mut b, v),
                    Ok((k, m)) => {
                        let k = pack(&k, P::IP6);
                        if !same(&known.w, &k, P::IP6) {
                            first = Some((k, m));
                            break;
                        }
                        self.nexts[j0] = finish_hit(
                            &mut self.proto,
                            cx,
                            &mut b,
                            (m, &k),
                            e,
                            (l2, hit_direct),
                            &mut hit_rx,
                        );
                    }
                }
                j0 += 1;
            }
        }
        // Pass 1b: parse the rest; a key equal to the previous one's is not looked up again.
        let mut new = 1;
        // The previous parsed packet's key (`keys[new - 1]`, kept apart to be compared).
        let mut prev = self.keys[0];
        // Packet `j` of key `k` (meta `m`) waits for pass 3.
        macro_rules! defer {
            ($j:expr, $k:expr, $m:expr) => {{
                let (j, k) = ($j, $k);
                self.metas[j] = $m;
                if same(&prev.w, &k, P::IP6) {
                    self.state[j] = SAME;
                } else {
                    self.state[j] = NEW;
                    // An IPv4 key is two words (the rest stay as they are, unread).
                    copy_key(&mut self.keys[new], &k, P::IP6);
                    // The slot's line is on its way while the frame is parsed.
                    self.homes[new] = self.table.start(&k, P::IP6);
                    new += 1;
                    copy_key(&mut prev, &k, P::IP6);
                }
            }};
        }
        let mut j1 = j0;
        if let Some((k, m)) = first {
            defer!(j0, k, m);
            j1 += 1;
        }
        for (j, &bi) in frame.iter().enumerate().skip(j1) {
            if let Some(&a) = ahead.get(j) {
                arena.prefetch(a);
            }
            // SAFETY: as above.
            let mut b = unsafe { arena.buffer(bi) };
            match self.proto.parse(cx, &mut b) {
                Err(v) => {
                    self.state[j] = DONE;
                    self.nexts[j] = verdict::<P>(cx, &mut b, v);
                }
                Ok((k, m)) => defer!(j, pack(&k, P::IP6), m),
            }
        }
        // Pass 2: the new keys' lookups, in stages over the frame.
        let (keys, homes) = (&self.keys[1..new], &self.homes[1..new]);
        let (found, to_l2) = (&mut self.found[1..new], P::L2_DIRECT.is_some());
        let to_l3 = P::L3_DIRECT.is_some();
        match P::IP6 {
            true => self
                .table
                .lookup_frame::<true>(keys, homes, found, to_l2, to_l3),
            false => self
                .table
                .lookup_frame::<false>(keys, homes, found, to_l2, to_l3),
        }
        // Pass 3: finish the packets from `j0` on.
        // The packet's key is `keys[at]`, its result `r`.
        let (mut at, mut r) = (0, self.found[0]);
        // The L3 tables of tunnel `l3_of`, computed once per tunnel change.
        let (mut l3_of, mut direct) = (MISS, None);
        for (j, &bi) in frame.iter().enumerate().skip(j0) {
            match self.state[j] {
                DONE => continue,
                NEW => {
                    at += 1;
                    r = self.found.get(at).copied().unwrap_or(MISS);
                }
                _ => {}
            }
            // SAFETY: as above.
            let mut b = unsafe { arena.buffer(bi) };
            let m = self.metas[j];
            let key = self.keys.get(at).unwrap_or(&NO_TABLE_KEY);
            self.nexts[j] = match self.table.entry(r) {
                Some(e) => {
                    if r != l3_of {
                        l3_of = r;
                        direct = l3_direct::<P>(l3, e);
                    }
                    let mut rx = RxSum::default();
                    let next = finish_hit(
                        &mut self.proto,
                        cx,
                        &mut b,
                        (m, key),
                        e,
                        (l2, direct),
                        &mut rx,
                    );
                    if rx.packets != 0 {
                        decapsulated += rx.packets;
                        e.add_rx(rx);
                    }
                    next
                }
                None => {
                    if b.hdr.is_traced() {
                        let rec = DecapTrace {
                            sw_if: None,
                            key: key.w[0] as u32,
                        };
                        cx.trace(&b, rec);
                    }
                    let k = unpack(key, P::IP6);
                    let v = self.proto.miss(cx, &mut b, &k, m);
                    verdict::<P>(cx, &mut b, v)
                }
            };
        }
        if let Some(e) = hit.filter(|_| hit_rx.packets != 0) {
            decapsulated += hit_rx.packets;
            e.add_rx(hit_rx);
        }
        if decapsulated != 0 {
            cx.count(P::DECAPSULATED, decapsulated);
        }
        if new > 1 {
            self.last = Some((prev, self.found[new - 1]));
        }
        cx.enqueue_to_next(frame, &self.nexts[..n]);
    }
    fn as_any(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

impl<P: DecapProto> DecapFrame<P> {
    /// The node's decap table (the control plane's changes forget the last lookup).
    pub fn table(&mut self) -> &mut DecapTable {
        self.last = None;
        &mut self.table
    }
}

/// The decap table of node `i` of `tg` when it is a `DecapFrame<P>` ([`Proto::table_of`]).
pub fn table_of<P: DecapProto>(tg: &mut ThreadGraph, i: NodeIndex) -> Option<&mut DecapTable> {
    tg.node_mut::<DecapFrame<P>>(i).map(|n| n.table())
}

/// Registers a protocol's two decap nodes (`names`: IPv4, IPv6 underlay; `P4`, `P6` their
/// logic) with their next arcs (`nexts`: per family) and counters.
pub fn register_decap<P4: DecapProto, P6: DecapProto>(
    b: &mut sluice_graph::GraphBuilder,
    names: [&str; 2],
    nexts: [&[&str]; 2],
    counters: &[CounterDesc],
) {
    use sluice_graph::{NodeKind, NodeRegistration};
    b.register(
        NodeRegistration::new(names[0], NodeKind::Internal, |_| {
            Box::new(DecapFrame::<P4>::default())
        })
        .nexts(nexts[0])
        .counters(counters),
    );
    b.register(
        NodeRegistration::new(names[1], NodeKind::Internal, |_| {
            Box::new(DecapFrame::<P6>::default())
        })
        .nexts(nexts[1])
        .counters(counters),
    );
}

/// How a protocol makes its tunnels.
pub struct Proto {
    /// Interface name prefix (`vxlan_tunnel`).
    pub prefix: &'static str,
    /// Driver name (`show hardware-interfaces`).
    pub driver: &'static str,
    /// Encap node names (IPv4, IPv6 underlay).
    pub encap: [&'static str; 2],
    /// Decap node names.
    pub decap: [&'static str; 2],
    /// The decap nodes' tables.
    pub table_of: [DecapTableOf; 2],
    /// What `ip4-local`/`ip6-local` dispatch to the decap nodes.
    pub local: &'static [LocalKey],
    /// The decap nodes also take `local`'s UDP to the groups the router receives (VXLAN:
    /// its tunnels join groups); others get only unicast (`ip4-local` and `ip6-local` punt
    /// their ports' packets to a group).
    pub local_groups: bool,
    /// The default next of the decap nodes (`ethernet-input`, or the IP input).
    pub default_next: &'static str,
}

/// What to create.
#[derive(Clone, Debug)]
pub struct AddArgs {
    /// Protocol.
    pub kind: Kind,
    /// Outer source.
    pub src: IpAddr,
    /// Outer destination.
    pub dst: IpAddr,
    /// VNI / GRE key / 0.
    pub key: u32,
    /// Underlay table id.
    pub table_id: u32,
    /// Name instance (None: the first free).
    pub instance: Option<u32>,
    /// Decap next node (None: the protocol's default).
    pub decap_next: Option<String>,
    /// `dst` is a multicast group on this interface (VXLAN's `group <g> <interface>`).
    pub mcast_if: Option<SwIfIndex>,
}

/// A multicast `dst` with its interface (`mcast_if`) and a unicast `src` of its family.
fn check_group(src: IpAddr, dst: IpAddr, mcast_if: Option<SwIfIndex>) -> VnetResult {
    match mcast_if {
        Some(_) if dst.is_multicast() => {}
        Some(_) => return Err(VnetError::invalid(format!("group {dst} is not multicast"))),
        None => {
            return Err(VnetError::invalid(format!(
                "dst {dst} is multicast: `group <address> <interface>' names its interface"
            )))
        }
    }
    // An interface-local (ff01::/16) or reserved-scope (ff00::/16) group never arrives on
    // a link: ip6-input does not take it.
    if let IpAddr::V6(g) = dst {
        if g.octets()[1] & 0xf <= 1 {
            return Err(VnetError::invalid(format!(
                "group {dst} has scope {}: an IPv6 group needs scope 2 or more",
                g.octets()[1] & 0xf
            )));
        }
    }
    if src.is_ipv4() != dst.is_ipv4() || src.is_unspecified() || src.is_multicast() {
        let fam = if dst.is_ipv4() { "IPv4" } else { "IPv6" };
        return Err(VnetError::invalid(format!(
            "src {src} must be a unicast {fam} address for group {dst}"
        )));
    }
    Ok(())
}

/// Adds or removes the receive route of multicast group `g` (a /32 or /128 `via local`
/// in the underlay table `table_id`: `ip4-local`/`ip6-local` then take its packets) —
/// once per group and table, however many tunnels use it.
fn group_route(vm: &mut Vlib, add: bool, g: IpAddr, table_id: u32, fib: u32) -> VnetResult {
    let users = vm.ext_mut::<Tunnels>().group_users(g, fib);
    // Called before the tunnel is recorded (add) and after it is removed (delete).
    if users > 0 {
        return Ok(());
    }
    fn paths<A>(table: u32) -> sluice_vnet::routes::RoutePaths<A> {
        sluice_vnet::routes::RoutePaths {
            table,
            local: true,
            ..Default::default()
        }
    }
    match g {
        IpAddr::V4(a) => {
            sluice_vnet::ip4::route_add_del(vm, add, 1, u32::from(a), 32, &paths(table_id))
        }
        IpAddr::V6(a) => {
            sluice_vnet::ip6::route_add_del(vm, add, 1, u128::from(a), 128, &paths(table_id))
        }
    }
}

/// The adjacency sending to group `g` out of interface `i`.
fn group_adjacency(vm: &mut Vlib, i: SwIfIndex, g: IpAddr) -> VnetResult<u32> {
    sluice_vnet::interface::check(vm, i)?;
    match g {
        IpAddr::V4(g) => sluice_vnet::ip4::mcast_adjacency(vm, i.0, g),
        IpAddr::V6(g) => sluice_vnet::ip6::mcast_adjacency(vm, i.0, g),
    }
}

/// Refuses mixed families, equal, unspecified and multicast endpoints.
pub fn check_endpoints(src: IpAddr, dst: IpAddr) -> VnetResult {
    if src.is_ipv4() != dst.is_ipv4() {
        return Err(VnetError::invalid(format!(
            "src {src} and dst {dst} are of different families"
        )));
    }
    if src == dst {
        return Err(VnetError::invalid(format!("src and dst are both {src}")));
    }
    for a in [src, dst] {
        if a.is_unspecified() || a.is_multicast() {
            return Err(VnetError::NotSupported(format!(
                "address {a}: unspecified or multicast tunnel endpoint not supported"
            )));
        }
    }
    Ok(())
}

/// Creates a tunnel interface; its name on success.
pub fn add(vm: &mut Vlib, p: &Proto, a: &AddArgs, rewrite: &[u8]) -> VnetResult<SwIfIndex> {
    if a.dst.is_multicast() {
        check_group(a.src, a.dst, a.mcast_if)?;
    } else {
        check_endpoints(a.src, a.dst)?;
    }
    let ip6 = a.src.is_ipv6();
    let fam = ip6 as usize;
    let fib_index = if ip6 {
        sluice_vnet::ip6::fib_index(vm, a.table_id)
    } else {
        sluice_vnet::ip4::fib_index(vm, a.table_id)
    }
    .ok_or_else(|| sluice_vnet::routes::no_table(a.table_id))?;
    let t = Tunnel {
        kind: a.kind,
        instance: 0,
        sw_if: SwIfIndex(0),
        src: a.src,
        dst: a.dst,
        key: a.key,
        table_id: a.table_id,
        fib_index,
        decap_next: a.decap_next.clone(),
        mcast_if: a.mcast_if.filter(|_| a.dst.is_multicast()),
    };
    if let Some((_, o)) = vm.ext_mut::<Tunnels>().by_key(p, ip6, t.decap_key()) {
        return Err(VnetError::Exists(format!(
            "tunnel {}{} has the same endpoints and key",
            p.prefix, o.instance
        )));
    }
    let key = t.table_key();
    let instance = match a.instance {
        Some(n) => n,
        None => vm.ext_mut::<Tunnels>().lowest_instance(p),
    };
    let name = format!("{}{instance}", p.prefix);
    let (encap, decap) = (
        vm.registry
            .find(p.encap[fam])
            .ok_or_else(|| VnetError::System(format!("{} missing", p.encap[fam])))?,
        vm.registry
            .find(p.decap[fam])
            .ok_or_else(|| VnetError::System(format!("{} missing", p.decap[fam])))?,
    );
    let next_name = a.decap_next.as_deref().unwrap_or(p.default_next);
    if vm.registry.find(next_name).is_none() {
        return Err(VnetError::invalid(format!("no node `{next_name}'")));
    }
    let idx = vm.ext_mut::<Tunnels>().next_slot();
    let mac = [
        0x02,
        0xfe,
        p.prefix.as_bytes()[0],
        (idx >> 16) as u8,
        (idx >> 8) as u8,
        idx as u8,
    ];
    let sw = sluice_vnet::create_interface(vm, &name, p.driver, mac, Some(encap))?;
    let l3 = a.kind.l3();
    // Every step after the interface exists undoes it on failure: a leaked interface would
    // keep its name, and `lowest_instance` would pick that name again forever.
    let setup = (|| {
        let next = vm
            .add_next_by_name(p.decap[fam], next_name)
            .map_err(|e| VnetError::System(e.to_string()))?;
        for k in p.local {
            if p.local_groups {
                sluice_vnet::ip_local::register_groups(vm, ip6, *k, p.decap[fam])?;
            } else {
                sluice_vnet::ip_local::register(vm, ip6, *k, p.decap[fam])?;
            }
        }
        let counters = vm
            .ext_mut::<Interfaces>()
            .get(sw)
            .map(|i| i.counters.clone())
            .ok_or_else(|| VnetError::System(format!("{name} vanished")))?;
        if l3 {
            sluice_vnet::set_p2p(vm, sw, true)?;
        }
        // The L3 MTU that keeps the outer packet within a 1500-byte underlay (Linux's
        // defaults: vxlan 1450/1430, gre 1476, gretap 1462, ipip 1480); routed packets over
        // it get frag-needed / packet-too-big from ip4-rewrite/ip6-rewrite.
        let mtu = 1500 - rewrite.len() as u32 - if l3 { 0 } else { 14 };
        sluice_vnet::interface::set_mtu(vm, sw, mtu)?;
        Ok((next, counters))
    })();
    let (next, counters) = match setup {
        Ok(x) => x,
        Err(e) => {
            sluice_vnet::loopback::delete_interface(vm, sw);
            return Err(e);
        }
    };
    let mut entry = EncapEntry::new(rewrite, ip6, a.kind, fib_index);
    if let Some(i) = t.mcast_if {
        let made = group_adjacency(vm, i, a.dst)
            .and_then(|adj| group_route(vm, true, a.dst, a.table_id, fib_index).map(|_| adj));
        match made {
            Ok(adj) => entry.adj = adj,
            Err(e) => {
                sluice_vnet::loopback::delete_interface(vm, sw);
                return Err(e);
            }
        }
    }
    let mut de = DecapSpec::new(sw.0, next, counters, mac, !l3);
    // Later changes come through `if_changed`.
    (de.mode, de.routed, de.fibs) =
        sluice_vnet::interface::with_if_attr(vm, sw.0, |a| (if_mode(a), if_routed(a), if_fibs(a)))
            .unwrap_or((L2Mode::Ethernet, false, [0; 2]));
    let table_of = p.table_of[fam];
    let if_attrs = vm.ext_mut::<IfAttrTable>().0.clone();
    let reg = sluice_vnet::feature::registry(vm);
    let l2_features = reg
        .slot(sluice_vnet::ethernet::ETHERNET_INPUT)
        .map(|s| (reg.table(), s));
    let refused = Arc::new(std::sync::Mutex::new(None));
    let r = refused.clone();
    let underlay = Underlay::of(vm, ip6);
    vm.foreach_thread(move |tg| {
        if let Some(n) = tg.node_mut::<Encap>(encap) {
            n.set(sw.0, Some(entry));
            if n.underlay.is_none() {
                n.underlay = underlay.clone();
            }
        }
        let th = tg.thread();
        if let Some(tbl) = table_of(tg, decap) {
            tbl.set_if_attrs(if_attrs.clone(), l2_features.clone());
            if let Err(e) = tbl.insert(key, &de, th) {
                r.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e);
            }
        }
    });
    let refused = *refused.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(e) = refused {
        // Undo on every thread (removing a key a thread never took is a no-op).
        vm.foreach_thread(move |tg| {
            if let Some(n) = tg.node_mut::<Encap>(encap) {
                n.set(sw.0, None);
            }
            if let Some(tbl) = table_of(tg, decap) {
                tbl.remove(&key);
            }
        });
        sluice_vnet::loopback::delete_interface(vm, sw);
        if t.mcast_if.is_some() {
            let _ = group_route(vm, false, a.dst, a.table_id, fib_index);
        }
        return Err(match e {
            InsertError::NoMemory => {
                VnetError::Full("decap table: no memory for another tunnel".into())
            }
            InsertError::NoRow => {
                VnetError::System("decap table: the tunnel's counters lack a thread".into())
            }
            InsertError::Family => {
                VnetError::Invalid("decap table: an IPv6 key in an IPv4 table".into())
            }
            InsertError::Table => VnetError::Invalid(format!(
                "decap table: underlay table index {} out of range (below {MAX_FIB})",
                key.fib
            )),
        });
    }
    let t = Tunnel {
        instance,
        sw_if: sw,
        ..t
    };
    let join = t.mcast_if.map(|i| (t.dst, i));
    vm.ext_mut::<Tunnels>().insert(p, t);
    if let Some((g, i)) = join {
        if vm.ext_mut::<Tunnels>().joined(g, i) == 1 {
            send_report(vm, i, g, true);
        }
    }
    Ok(sw)
}

/// The protocol of tunnels of kind `k` (None: not made by [`add`]).
fn proto_of(k: Kind) -> Option<&'static Proto> {
    match k {
        Kind::Vxlan => Some(&crate::vxlan::PROTO),
        Kind::Gre { .. } => Some(&crate::gre::PROTO),
        Kind::Ipip => Some(&crate::ipip::PROTO),
        Kind::Gtpu { .. } => Some(&crate::gtpu::PROTO),
        Kind::Srv6 { .. } => None,
    }
}

/// vnet's interface-change hook (`sluice_vnet::interface::on_change`, registered by every
/// tunnel plugin): when a tunnel interface's admin state, L2 mode, input redirect or
/// tables (`IfChange::Table`: an IPv4 table's entries keep them, [`DecapEntry::fibs4`])
/// change, its decap entries on every thread take the new [`if_mode`] and tables, which
/// the decap node then reads from the entry instead of the interface's record. When a
/// group tunnel's `mcast` interface is set up, it sends the join of each of its groups
/// again (one sent while it was down was dropped by `interface-output`).
pub fn if_changed(vm: &mut Vlib, sw: SwIfIndex, what: sluice_vnet::interface::IfChange) {
    if what == sluice_vnet::interface::IfChange::AdminState
        && sluice_vnet::interface::with_if_attr(vm, sw.0, |a| {
            a.admin_up.load(std::sync::atomic::Ordering::Relaxed)
        }) == Some(true)
    {
        for g in vm.ext_mut::<Tunnels>().groups_joined(sw) {
            send_report(vm, sw, g, true);
        }
    }
    let Some((_, t)) = vm.ext_mut::<Tunnels>().by_sw_if(sw, |_| true) else {
        return;
    };
    let Some(p) = proto_of(t.kind) else {
        return;
    };
    let fam = t.src.is_ipv6() as usize;
    let table_of = p.table_of[fam];
    let key = t.table_key();
    let Some(decap) = vm.registry.find(p.decap[fam]) else {
        return;
    };
    let (m, routed, fibs) =
        sluice_vnet::interface::with_if_attr(vm, sw.0, |a| (if_mode(a), if_routed(a), if_fibs(a)))
            .unwrap_or((L2Mode::Ethernet, false, [0; 2]));
    vm.foreach_thread(move |tg| {
        if let Some(tbl) = table_of(tg, decap) {
            tbl.set_mode(&key, sw.0, m, routed, fibs);
        }
    });
}

/// Deletes the tunnel of kind class `p` with these endpoints and key (traffic may flow:
/// packets still carrying its index are dropped and counted).
pub fn del(vm: &mut Vlib, p: &Proto, a: &AddArgs) -> VnetResult<SwIfIndex> {
    let ip6 = a.src.is_ipv6();
    let fib_index = if ip6 {
        sluice_vnet::ip6::fib_index(vm, a.table_id)
    } else {
        sluice_vnet::ip4::fib_index(vm, a.table_id)
    }
    .ok_or_else(|| sluice_vnet::routes::no_table(a.table_id))?;
    let key = decap_key_of(fib_index, a.kind, a.key, a.src, a.dst);
    let found = vm
        .ext_mut::<Tunnels>()
        .by_key(p, ip6, key)
        .map(|(i, t)| (i, t.sw_if));
    let (idx, sw) = found.ok_or_else(|| {
        VnetError::NotFound(format!(
            "no such tunnel: src {} dst {} key {}",
            a.src, a.dst, a.key
        ))
    })?;
    delete_index(vm, p, idx);
    Ok(sw)
}

/// Deletes tunnel `idx`.
pub fn delete_index(vm: &mut Vlib, p: &Proto, idx: usize) {
    let Some(t) = vm.ext_mut::<Tunnels>().remove(p, idx) else {
        return;
    };
    let fam = t.src.is_ipv6() as usize;
    let key = t.table_key();
    let (encap, decap) = (
        vm.registry.find(p.encap[fam]),
        vm.registry.find(p.decap[fam]),
    );
    let table_of = p.table_of[fam];
    let sw = t.sw_if.0;
    vm.foreach_thread(move |tg| {
        if let Some(i) = encap {
            if let Some(n) = tg.node_mut::<Encap>(i) {
                n.set(sw, None);
            }
        }
        if let Some(i) = decap {
            if let Some(tbl) = table_of(tg, i) {
                tbl.remove(&key);
            }
        }
    });
    sluice_vnet::loopback::delete_interface(vm, t.sw_if);
    if let Some(i) = t.mcast_if {
        let _ = group_route(vm, false, t.dst, t.table_id, t.fib_index);
        if vm.ext_mut::<Tunnels>().joined(t.dst, i) == 0 {
            send_report(vm, i, t.dst, false);
        }
    }
}

/// IGMPv3 / MLDv2 group record type: the group's filter mode changes to INCLUDE an empty
/// source list — a leave (RFC 3376 §4.2.12, RFC 3810 §5.2.12).
const CHANGE_TO_INCLUDE: u8 = 3;
/// Record type: the filter mode changes to EXCLUDE an empty list — a join of every source.
const CHANGE_TO_EXCLUDE: u8 = 4;

/// The unsolicited report that joins (`join`) or leaves multicast group `g`, as an
/// Ethernet frame from `mac`: for an IPv4 group an IGMPv3 Membership Report (RFC 3376
/// §4.2) to 224.0.0.22 from `src4`, TTL 1, IP Router Alert; for an IPv6 group an MLDv2
/// Listener Report (RFC 3810 §5.2) to ff02::16 from `src6` (a link-local address, or `::`
/// when the interface has none: RFC 3810 §5.2.13), hop limit 1, in a hop-by-hop header
/// with the Router Alert option. One group record, no sources: CHANGE_TO_EXCLUDE_MODE
/// (join), CHANGE_TO_INCLUDE_MODE (leave).
pub fn group_report(
    g: IpAddr,
    src4: std::net::Ipv4Addr,
    src6: std::net::Ipv6Addr,
    mac: [u8; 6],
    join: bool,
) -> Vec<u8> {
    let kind = if join {
        CHANGE_TO_EXCLUDE
    } else {
        CHANGE_TO_INCLUDE
    };
    let mut f = Vec::with_capacity(90);
    match g {
        IpAddr::V4(g) => {
            f.extend_from_slice(&[0x01, 0x00, 0x5e, 0x00, 0x00, 0x16]);
            f.extend_from_slice(&mac);
            f.extend_from_slice(&ethertype::IPV4.to_be_bytes());
            // IPv4 with the Router Alert option (24 bytes), then the 16-byte report.
            let mut ip = [0u8; 24];
            ip[0] = 0x46;
            ip[1] = 0xc0; // Internetwork control, as hosts send it.
            ip[2..4].copy_from_slice(&40u16.to_be_bytes());
            ip[8] = 1;
            ip[9] = 2;
            ip[12..16].copy_from_slice(&src4.octets());
            ip[16..20].copy_from_slice(&[224, 0, 0, 22]);
            ip[20..24].copy_from_slice(&[0x94, 0x04, 0, 0]);
            let c = checksum::internet_checksum(&ip);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&ip);
            let mut r = [0u8; 16];
            r[0] = 0x22;
            r[7] = 1;
            r[8] = kind;
            r[12..16].copy_from_slice(&g.octets());
            let c = checksum::internet_checksum(&r);
            r[2..4].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&r);
        }
        IpAddr::V6(g) => {
            f.extend_from_slice(&[0x33, 0x33, 0x00, 0x00, 0x00, 0x16]);
            f.extend_from_slice(&mac);
            f.extend_from_slice(&ethertype::IPV6.to_be_bytes());
            let src = src6.octets();
            let dst = 0xff02_0000_0000_0000_0000_0000_0000_0016u128.to_be_bytes();
            // Hop-by-hop (8 bytes: Router Alert, MLD; PadN), then the 28-byte report.
            let mut ip = [0u8; 40];
            ip[0] = 0x60;
            ip[4..6].copy_from_slice(&36u16.to_be_bytes());
            ip[6] = 0;
            ip[7] = 1;
            ip[8..24].copy_from_slice(&src);
            ip[24..40].copy_from_slice(&dst);
            f.extend_from_slice(&ip);
            f.extend_from_slice(&[58, 0, 0x05, 0x02, 0, 0, 0x01, 0x00]);
            let mut r = [0u8; 28];
            r[0] = 143;
            r[7] = 1;
            r[8] = kind;
            r[12..28].copy_from_slice(&g.octets());
            // The ICMPv6 checksum covers the pseudo-header (RFC 8200 §8.1).
            let mut ph = Vec::with_capacity(40 + 28);
            ph.extend_from_slice(&src);
            ph.extend_from_slice(&dst);
            ph.extend_from_slice(&28u32.to_be_bytes());
            ph.extend_from_slice(&[0, 0, 0, 58]);
            ph.extend_from_slice(&r);
            let c = checksum::internet_checksum(&ph);
            r[2..4].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&r);
        }
    }
    f
}

/// Sends the report joining (`join`) or leaving group `g` out of interface `i`
/// ([`group_report`]; IPv4 from the interface's first IPv4 address, or 0.0.0.0; IPv6 from
/// its first link-local address, or ::) through `interface-output`, once (unsolicited
/// reports are not repeated and queries are not answered: see docs/tunnels.md; the joins
/// go again when the interface is set up, [`if_changed`]). Without a free buffer nothing
/// is sent.
fn send_report(vm: &mut Vlib, i: SwIfIndex, g: IpAddr, join: bool) {
    let Some(mac) = vm.ext_mut::<Interfaces>().get(i).map(|x| x.mac) else {
        return;
    };
    let (mut src4, mut src6) = (
        std::net::Ipv4Addr::UNSPECIFIED,
        std::net::Ipv6Addr::UNSPECIFIED,
    );
    if g.is_ipv4() {
        if let Some(&(a, _)) = sluice_vnet::ip4::addresses(vm, i.0).first() {
            src4 = a.into();
        }
    } else if let Some(&(a, _)) = sluice_vnet::ip6::addresses(vm, i.0)
        .iter()
        .find(|x| sluice_vnet::ip6::is_link_local(x.0))
    {
        src6 = a.into();
    }
    let Some(out) = vm.registry.find(sluice_vnet::output::NAME) else {
        return;
    };
    let Some(b) = vm
        .main
        .bufs()
        .alloc_with(&group_report(g, src4, src6, mac, join))
    else {
        return;
    };
    // SAFETY: `b` was just allocated here and has no other view until it is injected.
    let v = unsafe { vm.pool.buffer(b) };
    v.hdr.tx_if = i.0;
    v.hdr.flags |= LOCALLY_ORIGINATED;
    vm.main.inject(out, &[b]);
}

/// Registers a protocol's two encap nodes (IPv4 and IPv6 underlay).
pub fn register_encap(b: &mut sluice_graph::GraphBuilder, v4: &str, v6: &str) {
    use sluice_graph::{NodeKind, NodeRegistration};
    for (name, ip6) in [(v4, false), (v6, true)] {
        b.register(
            NodeRegistration::new(name, NodeKind::Internal, |_| Box::new(Encap::default()))
                .nexts(if ip6 { &ENCAP_NAMES6 } else { EncapNext::NAMES })
                .counters(EncapCounter::DESCS),
        );
    }
}

/// An address argument, or a one-line error naming it.
pub fn parse_addr(w: &str, what: &str) -> Result<IpAddr, sluice_cli::CliError> {
    w.parse()
        .map_err(|_| sluice_cli::CliError::new(format!("bad {what} address `{w}'")))
}

/// The name of interface `sw`.
pub fn if_name(vm: &mut Vlib, sw: SwIfIndex) -> String {
    vm.ext_mut::<Interfaces>()
        .get(sw)
        .map(|i| i.name.clone())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u32) -> DecapKey {
        DecapKey {
            fib: 0,
            key: n,
            sub: 0,
            src: 0x0a00_0001,
            dst: 0x0a00_0100 + n as u128,
        }
    }

    fn entry(sw_if: u32) -> DecapSpec {
        DecapSpec::new(
            sw_if,
            Next(0),
            Arc::new(IfCounters::new(1)),
            [2, 0, 0, 0, 0, 1],
            false,
        )
    }

    /// The interfaces of the tunnels `lookup_frame` finds for `keys` (all of them to do,
    /// their slots started as the decap node starts them).
    fn frame(t: &DecapTable, keys: &[DecapKey]) -> Vec<Option<u32>> {
        let keys: Vec<TableKey> = keys.iter().map(|k| t.pack(k)).collect();
        let homes: Vec<u32> = keys.iter().map(|k| t.start(k, t.v6)).collect();
        let mut out = vec![0; keys.len()];
        match t.v6 {
            true => t.lookup_frame::<true>(&keys, &homes, &mut out, false, false),
            false => t.lookup_frame::<false>(&keys, &homes, &mut out, false, false),
        }
        out.iter().map(|&r| sw_of(t, r)).collect()
    }

    /// The interface of the tunnel in slot `r` (None: [`MISS`]).
    fn sw_of(t: &DecapTable, r: u32) -> Option<u32> {
        t.entry(r).map(|e| e.sw_if)
    }

    /// The interface of the tunnel of key `k`.
    fn find(t: &DecapTable, k: &DecapKey) -> Option<u32> {
        sw_of(t, t.lookup(k))
    }

    #[test]
    fn decap_table_insert_lookup_remove_and_frames() {
        let mut t = DecapTable::default();
        t.insert(key(1), &entry(13), 0).unwrap();
        t.insert(key(2), &entry(15), 0).unwrap();
        assert_eq!((find(&t, &key(1)), find(&t, &key(2))), (Some(13), Some(15)));
        assert_eq!(t.lookup(&key(9)), MISS);
        assert_eq!(t.len(), 2);
        // Hits and misses mixed in one frame, a key repeated.
        let keys = [key(2), key(9), key(1), key(2), key(7)];
        assert_eq!(
            frame(&t, &keys),
            vec![Some(15), None, Some(13), Some(15), None]
        );
        t.remove(&key(1));
        assert_eq!((t.lookup(&key(1)), t.len()), (MISS, 1));
        // Removing a key that is no tunnel's changes nothing.
        t.remove(&key(1));
        t.remove(&key(9));
        assert_eq!((find(&t, &key(2)), t.len()), (Some(15), 1));
        // Inserting an existing key replaces its entry.
        t.insert(key(2), &entry(16), 0).unwrap();
        assert_eq!((find(&t, &key(2)), t.len()), (Some(16), 1));
        t.insert(key(4), &entry(14), 0).unwrap();
        assert_eq!(
            frame(&t, &[key(1), key(4), key(2)]),
            vec![None, Some(14), Some(16)]
        );
        // The L2 mode is set by key, and only for the tunnel's own interface.
        t.set_mode(&key(4), 14, L2Mode::Bridge(3), false, [0; 2]);
        t.set_mode(&key(2), 14, L2Mode::Bridge(4), false, [0; 2]);
        let mode = |t: &DecapTable, k| t.entry(t.lookup(&key(k))).unwrap().mode();
        assert_eq!(
            (mode(&t, 4), mode(&t, 2)),
            (L2Mode::Bridge(3), L2Mode::Ethernet)
        );
    }

    #[test]
    fn decap_sub_types_are_never_no_keys() {
        let kinds = [
            Kind::Vxlan,
            Kind::Gre { teb: false },
            Kind::Gre { teb: true },
            Kind::Ipip,
            Kind::Gtpu { l2: false },
            Kind::Gtpu { l2: true },
            Kind::Srv6 { l2: false },
            Kind::Srv6 { l2: true },
        ];
        for kind in kinds {
            assert_ne!(sub_of(kind), NO_KEY.sub, "{kind:?}");
        }
    }

    #[test]
    fn decap_table_sub_type_in_the_table_word() {
        // The sub-type shares the first key word with the table index (its top byte):
        // in both families an L3 and a TEB tunnel of one (table, key, source,
        // destination) are apart, in the largest table index too; a key whose table index
        // reaches the sub-type's bits is refused; packing loses nothing.
        for v6 in [false, true] {
            let mut t = DecapTable::of_family(v6);
            for (i, fib) in [0, 1, MAX_FIB - 1].into_iter().enumerate() {
                let l3 = DecapKey { fib, ..key(5) };
                let teb = DecapKey { sub: 1, ..l3 };
                t.insert(l3, &entry(10 + 2 * i as u32), 0).unwrap();
                t.insert(teb, &entry(11 + 2 * i as u32), 0).unwrap();
                for k in [l3, teb] {
                    assert_eq!(unpack(&t.pack(&k), v6), k, "v6 {v6} {k:?}");
                }
            }
            for (i, fib) in [0, 1, MAX_FIB - 1].into_iter().enumerate() {
                let l3 = DecapKey { fib, ..key(5) };
                let teb = DecapKey { sub: 1, ..l3 };
                let want = [Some(10 + 2 * i as u32), Some(11 + 2 * i as u32)];
                assert_eq!([find(&t, &l3), find(&t, &teb)], want, "v6 {v6} fib {fib}");
                assert_eq!(frame(&t, &[l3, teb]), want, "v6 {v6} fib {fib}");
            }
            let big = DecapKey {
                fib: MAX_FIB,
                ..key(5)
            };
            assert_eq!(t.insert(big, &entry(30), 0), Err(InsertError::Table));
            assert_eq!(t.len(), 6);
        }
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "NO_KEY's")]
    fn decap_table_refuses_no_keys_sub_type() {
        let mut t = DecapTable::default();
        let k = DecapKey {
            sub: NO_KEY.sub,
            ..key(1)
        };
        let _ = t.insert(k, &entry(13), 0);
    }

    #[test]
    fn decap_set_mode_flips_routed_and_keeps_l2_and_mode() {
        let mut t = DecapTable::default();
        let mut spec = entry(13);
        spec.l2 = true;
        t.insert(key(1), &spec, 0).unwrap();
        t.insert(key(2), &entry(14), 0).unwrap();
        // (l2, mode, routed) of the tunnel of key `k`.
        let bits = |t: &DecapTable, k| {
            let e = t.entry(t.lookup(&key(k))).unwrap();
            (e.l2(), e.mode(), e.routed())
        };
        assert_eq!(bits(&t, 1), (true, L2Mode::Ethernet, false));
        t.set_mode(&key(1), 13, L2Mode::Bridge(3), true, [0; 2]);
        assert_eq!(bits(&t, 1), (true, L2Mode::Bridge(3), true));
        t.set_mode(&key(1), 13, L2Mode::Bridge(3), false, [0; 2]);
        assert_eq!(bits(&t, 1), (true, L2Mode::Bridge(3), false));
        t.set_mode(&key(2), 14, L2Mode::Ethernet, true, [0; 2]);
        assert_eq!(bits(&t, 2), (false, L2Mode::Ethernet, true));
        // Another interface's change leaves the entry alone.
        t.set_mode(&key(2), 13, L2Mode::Ethernet, false, [0; 2]);
        assert_eq!(bits(&t, 2), (false, L2Mode::Ethernet, true));
        t.set_mode(&key(2), 14, L2Mode::Ethernet, false, [0; 2]);
        assert_eq!(bits(&t, 2), (false, L2Mode::Ethernet, false));
        // An L3 tunnel created up starts routed.
        let mut spec = entry(15);
        spec.routed = true;
        t.insert(key(3), &spec, 0).unwrap();
        assert_eq!(bits(&t, 3), (false, L2Mode::Ethernet, true));
    }

    #[test]
    fn decap_entry_counts_into_its_threads_row_after_the_spec_is_gone() {
        let mut t = DecapTable::default();
        let c = Arc::new(IfCounters::new(3));
        let spec = DecapSpec::new(13, Next(0), c.clone(), [2, 0, 0, 0, 0, 1], false);
        t.insert(key(1), &spec, 2).unwrap();
        // The table's own reference keeps the row alive, through growth too.
        drop(spec);
        for n in 2..40 {
            t.insert(key(n), &entry(100 + n), 0).unwrap();
        }
        t.entry(t.lookup(&key(1))).unwrap().add_rx(RxSum {
            packets: 1,
            bytes: 100,
        });
        let rx = sluice_vnet::interface::counter::RX_PACKETS;
        let bytes = sluice_vnet::interface::counter::RX_BYTES;
        assert_eq!((c.get(2, rx), c.get(2, bytes)), (1, 100));
        assert_eq!((c.get(0, rx), c.get(1, rx)), (0, 0));
        assert_eq!(Arc::strong_count(&c), 2);
        // No row for thread 3: refused, the table unchanged.
        let spec = DecapSpec::new(14, Next(0), c.clone(), [2, 0, 0, 0, 0, 2], false);
        assert_eq!(t.insert(key(50), &spec, 3), Err(InsertError::NoRow));
        assert_eq!((t.lookup(&key(50)), t.len()), (MISS, 39));
        // Removed: the table lets go of the counters.
        t.remove(&key(1));
        assert_eq!(Arc::strong_count(&c), 2);
        drop(spec);
        assert_eq!(Arc::strong_count(&c), 1);
    }

    #[test]
    fn ipv4_table_refuses_an_ipv6_key() {
        let mut t = DecapTable::of_family(false);
        for wide in [1u128 << 32, 1 << 127] {
            let mut k = key(1);
            k.src |= wide;
            assert_eq!(t.insert(k, &entry(13), 0), Err(InsertError::Family));
            let mut k = key(2);
            k.dst |= wide;
            assert_eq!(t.insert(k, &entry(14), 0), Err(InsertError::Family));
        }
        // Not kept under the key's low 32 bits either.
        assert_eq!(
            (t.lookup(&key(1)), t.lookup(&key(2)), t.len()),
            (MISS, MISS, 0)
        );
        t.insert(key(1), &entry(13), 0).unwrap();
        assert_eq!(find(&t, &key(1)), Some(13));
        // An IPv6 table takes it.
        let mut t = DecapTable::of_family(true);
        let mut k = key(1);
        k.src |= 1 << 127;
        t.insert(k, &entry(13), 0).unwrap();
        assert_eq!((find(&t, &k), t.lookup(&key(1))), (Some(13), MISS));
    }

    /// Keys of `t` (8 slots) whose home slot is `h`, the first `n` found.
    fn homed(t: &DecapTable, h: u32, n: usize) -> Vec<DecapKey> {
        (0..10_000)
            .map(key)
            .filter(|k| t.home(k) == h)
            .take(n)
            .collect()
    }

    #[test]
    fn decap_table_collisions_probe_on_and_deletion_moves_back() {
        for seed in [1, 7, 0xdead_beef] {
            // Three keys homed on the last slot (their run wraps to slots 0 and 1) and one
            // homed on slot 0, which they push to slot 2.
            let mut t = DecapTable::with_seed(seed);
            let last = (MIN_SLOTS - 1) as u32;
            let c = homed(&t, last, 4);
            let d = homed(&t, 0, 2);
            for (i, k) in c[..3].iter().chain(&d[..1]).enumerate() {
                t.insert(*k, &entry(i as u32), 0).unwrap();
            }
            assert_eq!(t.slots.len(), MIN_SLOTS, "4 of 8 slots: no growth yet");
            let at = |t: &DecapTable, k: &DecapKey| t.lookup(k);
            assert_eq!(
                [&c[0], &c[1], &c[2], &d[0]].map(|k| at(&t, k)),
                [last, 0, 1, 2]
            );
            // Misses homed on the run end at its first empty slot.
            assert_eq!((at(&t, &c[3]), at(&t, &d[1])), (MISS, MISS));
            assert_eq!(frame(&t, &[c[3], c[2], d[0]]), vec![None, Some(2), Some(3)]);
            // Deleting the head of the run moves each later entry back as far as its
            // home allows: c[1] and c[2] one slot back (wrapping), d[0] to its home.
            t.remove(&c[0]);
            assert_eq!([&c[1], &c[2], &d[0]].map(|k| at(&t, k)), [last, 0, 1]);
            assert_eq!(at(&t, &c[0]), MISS);
            // Deleting in the middle: d[0] (home 0) moves into the hole at 0.
            t.remove(&c[2]);
            assert_eq!([at(&t, &c[1]), at(&t, &d[0])], [last, 0]);
            assert_eq!(t.slots.iter().filter(|s| s.is_some()).count(), 2);
            assert_eq!(t.keep.iter().filter(|s| s.is_some()).count(), 2);
            assert_eq!(
                frame(&t, &[c[0], c[1], c[2], d[0]]),
                vec![None, Some(1), None, Some(3)]
            );
        }
    }

    #[test]
    fn decap_table_follows_a_model_through_growth_and_deletions() {
        // Inserts, replacements and deletions at random (a fixed sequence) over 600 keys,
        // some IPv6 and differing only in `sub` or the table; after every step the table
        // finds what a HashMap holds, and after every 50 it is checked whole.
        let keys: Vec<DecapKey> = (0..600u32)
            .map(|n| DecapKey {
                fib: n % 3,
                key: n / 2,
                sub: (n % 2) as u8,
                src: if n % 5 == 0 {
                    0x2001_0db8 << 96 | n as u128
                } else {
                    0x0a00_0002
                },
                dst: 0x0a00_0001 + (n / 50) as u128,
            })
            .collect();
        let mut t = DecapTable::with_seed(3);
        let mut model: HashMap<usize, u32> = HashMap::new();
        let mut x = 0x1234_5678_u64;
        for step in 0..6000u32 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let i = (x >> 33) as usize % keys.len();
            if (x >> 20) % 3 == 0 {
                t.remove(&keys[i]);
                model.remove(&i);
            } else {
                t.insert(keys[i], &entry(step), 0).unwrap();
                model.insert(i, step);
            }
            assert_eq!(find(&t, &keys[i]), model.get(&i).copied(), "step {step}");
            assert_eq!(t.len(), model.len());
            assert!(t.len() * 2 <= t.slots.len());
            if step % 50 == 0 {
                for (j, k) in keys.iter().enumerate() {
                    assert_eq!(find(&t, k), model.get(&j).copied(), "step {step} key {j}");
                }
                let want: Vec<_> = (0..keys.len()).map(|j| model.get(&j).copied()).collect();
                assert_eq!(frame(&t, &keys), want, "step {step}");
            }
        }
        assert!(t.slots.len() > MIN_SLOTS);
    }

    #[test]
    fn decap_table_many_keys_each_differing_in_one_word() {
        // Five sets of 4096 tunnels; in each the keys differ in one word of the key only
        // (the table and VNI, the source's low or high half, the destination's low or high
        // half: the last word compared). Each key finds its own tunnel, keys one bit off
        // in any word miss, and no key probes far from its home: a slot hash that lost a
        // word would home a whole set on one slot.
        let base = DecapKey {
            fib: 2,
            key: 7,
            sub: 0,
            src: 0x2001_0db8_0000_0000_0000_0000_0000_0002,
            dst: 0x2001_0db8_0000_0000_0000_0000_0000_0001,
        };
        let vary = |w: u32, n: u32| {
            let mut k = base;
            let n128 = (n as u128) << 8;
            match w {
                0 => k.key = n,
                1 => k.src |= n128,
                2 => k.src |= n128 << 64,
                3 => k.dst |= n128,
                _ => k.dst |= n128 << 64,
            }
            k
        };
        for seed in [0, 5, 0x5eed] {
            let mut t = DecapTable::with_seed(seed);
            let keys: Vec<DecapKey> = (0..5)
                .flat_map(|w| (1..=4096).map(move |n| (w, n)))
                .map(|(w, n)| vary(w, n))
                .collect();
            for (i, k) in keys.iter().enumerate() {
                t.insert(*k, &entry(i as u32), 0).unwrap();
            }
            assert_eq!(t.len(), keys.len());
            let m = t.slots.len() - 1;
            let mut longest = 0;
            for (i, k) in keys.iter().enumerate() {
                let r = t.lookup(k);
                assert_eq!(sw_of(&t, r), Some(i as u32), "seed {seed} key {i}");
                longest = longest.max((r as usize).wrapping_sub(t.home(k) as usize) & m);
                // One bit off in the table, the sub-type or any address word: no tunnel.
                let off = [
                    DecapKey {
                        fib: k.fib ^ 1,
                        ..*k
                    },
                    DecapKey { sub: 1, ..*k },
                    DecapKey {
                        src: k.src ^ 1 << 100,
                        ..*k
                    },
                    DecapKey {
                        dst: k.dst ^ 1 << 127,
                        ..*k
                    },
                    DecapKey {
                        dst: k.dst ^ 1 << 2,
                        ..*k
                    },
                ];
                for o in off {
                    assert_eq!(t.lookup(&o), MISS, "seed {seed} key {i}: {o:?}");
                }
            }
            assert!(
                longest < 64,
                "seed {seed}: a probe {longest} slots from its home"
            );
            let want: Vec<_> = (0..keys.len() as u32).map(Some).collect();
            assert_eq!(frame(&t, &keys), want, "seed {seed}");
        }
    }

    #[test]
    fn decap_table_ipv4_keys_in_two_words() {
        // An IPv4 table packs a key in two words (table and key; source and destination):
        // 4 × 4096 keys differing in one field only (the table, the VNI, the source, the
        // destination) each find their own tunnel, in lookups and in a frame, keys one bit
        // off in any field (or of the other sub-type) miss, no key probes far from its
        // home, and packing loses nothing.
        let base = DecapKey {
            fib: 2,
            key: 7,
            sub: 0,
            src: 0x0a00_0002,
            dst: 0x0a00_0001,
        };
        let vary = |f: u32, n: u32| match f {
            0 => DecapKey { fib: n, ..base },
            1 => DecapKey {
                key: n << 4,
                ..base
            },
            2 => DecapKey {
                src: base.src ^ (n as u128) << 12,
                ..base
            },
            _ => DecapKey {
                dst: base.dst ^ (n as u128) << 8,
                ..base
            },
        };
        let keys: Vec<DecapKey> = (0..4)
            .flat_map(|f| (1..=4096).map(move |n| vary(f, n)))
            .collect();
        for seed in [0, 5, 0x5eed] {
            let mut t = DecapTable::with_seed_family(seed, false);
            for (i, k) in keys.iter().enumerate() {
                t.insert(*k, &entry(i as u32), 0).unwrap();
            }
            assert_eq!(t.len(), keys.len());
            let m = t.slots.len() - 1;
            let mut longest = 0;
            for (i, k) in keys.iter().enumerate() {
                assert_eq!(unpack(&t.pack(k), false), *k);
                let r = t.lookup(k);
                assert_eq!(sw_of(&t, r), Some(i as u32), "seed {seed} key {i}");
                longest = longest.max((r as usize).wrapping_sub(t.home(k) as usize) & m);
                let off = [
                    DecapKey {
                        fib: k.fib ^ 1 << 31,
                        ..*k
                    },
                    DecapKey {
                        key: k.key ^ 1 << 30,
                        ..*k
                    },
                    DecapKey { sub: 1, ..*k },
                    DecapKey {
                        src: k.src ^ 1 << 31,
                        ..*k
                    },
                    DecapKey {
                        dst: k.dst ^ 1,
                        ..*k
                    },
                ];
                for o in off {
                    assert_eq!(t.lookup(&o), MISS, "seed {seed} key {i}: {o:?}");
                }
            }
            assert!(longest < 64, "seed {seed}: a key {longest} slots from home");
            let some: Vec<DecapKey> = keys.iter().step_by(97).copied().collect();
            let want: Vec<Option<u32>> = (0..keys.len() as u32).step_by(97).map(Some).collect();
            assert_eq!(frame(&t, &some), want, "seed {seed}");
        }
    }

    #[test]
    fn decap_table_patterned_keys_spread_like_random_ones() {
        // 16,384 keys (a table at its most loaded, half full) of each pattern a hash that
        // xors key words together, or multiplies twice without folding the high bits down,
        // lets pile up: IPv6 sources and destinations varying together (the source's bits
        // 32-63 and the destination's 0-31: an xor of the two cancels), one word's high and
        // low halves varying together, IPv4 keys (high halves zero), VNIs spaced 16 and 32
        // apart, and destinations `base ^ i << 42/48/90`. For every seed the mean distance
        // from a key's home stays near random keys' (~0.5 at half load; 0.76 for VNIs
        // `i << 4` under a two-multiply hash) and the longest probe short (random keys'
        // reach ~20-36 here).
        const N: u32 = 16_384;
        const P6: u128 = 0x2001_0db8_u128 << 96;
        const V4: (u128, u128) = (0x0a00_0002, 0x0a00_0001);
        // The i-th key's VNI/TEID, source and destination.
        type Pattern = fn(u32) -> (u32, u128, u128);
        let sets: [(&str, Pattern); 10] = [
            ("v6 src/dst together", |i| {
                (7, P6 | (i as u128) << 32, P6 | 1 << 32 | i as u128)
            }),
            ("v6 src high/low together", |i| {
                (7, P6 | (i as u128) << 64 | i as u128, P6 | 1)
            }),
            ("v4 src", |i| (7, 0x0a00_0000 + i as u128, V4.1)),
            ("v4 dst", |i| (7, V4.0, 0x0a00_0000 + i as u128)),
            ("vni i << 4", |i| (i << 4, V4.0, V4.1)),
            ("vni i << 5", |i| (i << 5, V4.0, V4.1)),
            ("teid i << 16", |i| (i << 16, V4.0, V4.1)),
            ("v6 dst ^ i << 42", |i| {
                (7, P6 | 2, (P6 | 1) ^ (i as u128) << 42)
            }),
            ("v6 dst ^ i << 48", |i| {
                (7, P6 | 2, (P6 | 1) ^ (i as u128) << 48)
            }),
            ("v6 dst ^ i << 90", |i| {
                (7, P6 | 2, (P6 | 1) ^ (i as u128) << 90)
            }),
        ];
        for seed in [0, 5, 0x5eed] {
            for (name, f) in sets {
                let keys: Vec<DecapKey> = (0..N)
                    .map(|i| {
                        let (key, src, dst) = f(i);
                        DecapKey {
                            fib: 0,
                            key,
                            sub: 0,
                            src,
                            dst,
                        }
                    })
                    .collect();
                // IPv4 keys also in an IPv4 table (two words, one multiply).
                let v4 = keys.iter().all(|k| (k.src | k.dst) >> 32 == 0);
                for v6 in [true, false].into_iter().filter(|&v6| v6 || v4) {
                    let mut t = DecapTable::with_seed_family(seed, v6);
                    for (i, k) in keys.iter().enumerate() {
                        t.insert(*k, &entry(i as u32), 0).unwrap();
                    }
                    assert_eq!(t.len(), N as usize, "{name}: keys not distinct");
                    let m = t.slots.len() - 1;
                    let (mut longest, mut sum) = (0, 0);
                    for (i, k) in keys.iter().enumerate() {
                        let r = t.lookup(k);
                        assert_eq!(sw_of(&t, r), Some(i as u32), "seed {seed} {name} key {i}");
                        let d = (r as usize).wrapping_sub(t.home(k) as usize) & m;
                        longest = longest.max(d);
                        sum += d;
                    }
                    let mean = sum as f64 / N as f64;
                    assert!(
                        mean < 0.7 && longest < 48,
                        "seed {seed} {name} v6 table {v6}: mean distance {mean:.2}, \
                         longest {longest} ({} slots)",
                        m + 1
                    );
                }
            }
        }
    }

    #[test]
    fn check_group_refuses_ipv6_scope_0_and_1() {
        let (src, via) = ("2001:db8::1".parse().unwrap(), Some(SwIfIndex(1)));
        for g in ["ff00::5", "ff01::5", "ff11::5", "ff30::5"] {
            let e = check_group(src, g.parse().unwrap(), via).unwrap_err();
            assert!(e.to_string().contains(g), "{e}");
            assert!(e.to_string().contains("scope"), "{e}");
        }
        for g in ["ff02::5", "ff05::5", "ff0e::5", "ff12::5"] {
            check_group(src, g.parse().unwrap(), via).unwrap();
        }
    }

    #[test]
    fn copy_rewrite_copies_every_length() {
        let rw: [u8; MAX_REWRITE] = std::array::from_fn(|i| i as u8 + 1);
        for n in 0..=MAX_REWRITE {
            let mut h = vec![0u8; n];
            copy_rewrite(&mut h, &rw);
            assert_eq!(h, rw[..n], "length {n}");
        }
    }
}
