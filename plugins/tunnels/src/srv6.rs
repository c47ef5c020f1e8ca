//! SRv6 (RFC 8754 segment routing header, RFC 8986 behaviours): SR policies with H.Encaps
//! (steered into by routes), and local SIDs with End, End.X, End.DX2, End.DX4, End.DX6,
//! End.DT4, End.DT6.
//!
//! ```text
//! set sr encaps source addr <ip6>
//! sr policy add bsid <ip6> next <ip6> [next <ip6> ...] [encap|insert] [fib-table <id>]
//! sr policy del bsid <ip6>
//! sr steer [del] l3 <prefix> via bsid <ip6> [fib-table <id>]
//! sr steer [del] l2 <if> via bsid <ip6>
//! sr localsid [del] address <ip6> behavior end | end.x <if> <ip6> | end.dx2 <if>
//!                                         | end.dx4 <if> <ip4> | end.dx6 <if> <ip6>
//!                                         | end.dt4 <table-id> | end.dt6 <table-id>
//!                                         [fib-table <id>] [instance <n>]
//! show sr policies | show sr localsids | show sr steering-policies
//! ```
//!
//! Both are point-to-point interfaces: a policy is an interface `sr-policy<n>` whose tx
//! node is `sr-pl-rewrite-encaps` (the shared [`crate::tunnel::Encap`] node with an IPv6 +
//! SRH rewrite, [`Kind::Srv6`]); `sr steer` is a route via it, and its BSID is a /128 via
//! it. `sr steer l2 <if>` (T.Encaps.L2, RFC 8986 §5.3) makes an L2 interface
//! `sr-l2-steer<n>` with the same encap node and an L2 rewrite ([`encap_rewrite_l2`],
//! [`Kind::Srv6`] `l2`), and cross-connects `<if>` to it: every frame `<if>` receives is
//! encapsulated whole toward the policy's segment list. A local SID is an interface
//! `sr-localsid<n>` whose tx node is `sr-localsid`, with the SID's /128 routed via it; the
//! interface's adjacency is a Node adjacency ([`sluice_vnet::set_lookup_node`], VPP's
//! localsid DPO), so `ip6-lookup` hands the SID's packets straight to `sr-localsid`; its
//! `tx packets` count the SID's hits.
//!
//! # `sr-localsid` ([`LocalSid`])
//! - uses: `ip.adj_index` (the SID route's Node adjacency, whose `tx_if` is the local SID
//!   interface: its behaviour); the packet at its IPv6 header. A packet through
//!   `interface-output` instead (at the placeholder Ethernet header `ip6-rewrite` wrote,
//!   zero MACs first): `tx_if`, the header stripped, what follows must be IPv6
//!   (`not_ip6`).
//! - sets: End: segments left − 1, destination = the next segment (through
//!   `interface-output`: the hop limit restored, `ip6-rewrite` decremented it on the way
//!   here), `ip.fib_index` = the SID's table. End.DT4/DT6:
//!   strips the outer IPv6 header and SRH, `ip.fib_index` = the behaviour's table.
//!   End.DX4/DX6: strips them, `ip.adj_index` = the next hop's neighbour adjacency (made
//!   when the SID is added, as a route via the neighbour makes one), `ip.fib_index` = the
//!   interface's table.
//! - sets (End.X): as End, then `ip.adj_index` = the neighbour's adjacency.
//! - sets (End.DX2): strips the outer IPv6 header and SRH in front of the Ethernet frame
//!   (next header 143), `tx_if` = the behaviour's interface.
//! - next: `drop` (`error-drop`), `ip6-lookup` (End, End.DT6), `ip4-lookup` (End.DT4),
//!   `interface-output` (End.DX2),
//!   `ip6-rewrite` / `ip6-glean` (End.X to a resolved / unresolved neighbour),
//!   `ip4-rewrite` / `ip6-rewrite` (End.DX4 / End.DX6 to a resolved neighbour),
//!   `ip4-glean` / `ip6-glean` (End.DX4 / End.DX6 to a neighbour not resolved yet: ARP /
//!   ND for it, the packet dropped and counted there, as for a route via it).
//! - counters: the SID interface's `tx packets`/`tx bytes` for the packets from
//!   `ip6-lookup` (once per run of one SID), `end` (info), `decapsulated` (info, both once
//!   per frame), `no_sid` (the interface is no local
//!   SID: deleted under traffic), `truncated`, `no_srh` (End without an SRH),
//!   `ip6_extension` (another extension header before the SRH or the inner packet),
//!   `bad_routing_type` (routing header type ≠ 4), `srh_bad_last_entry` (the segment list
//!   does not fit the header), `sl_beyond_last` (segments left > last entry, RFC 8754
//!   §4.3.1.1), `sl_zero` (End with segments left 0), `sl_not_zero` (a decap behaviour
//!   with segments left ≠ 0, RFC 8986 §4.4), `bad_inner` (the inner packet is not the
//!   behaviour's family, or an IPv4 header with IHL < 5), `dx_no_neighbor` (the End.DX4/DX6
//!   adjacency is no neighbour's any more: its interface was deleted), `not_ip6` (through
//!   `interface-output`, no IPv6 packet behind the placeholder: an IPv4 route via the SID
//!   interface).
//!
//! # `sr-pl-rewrite-insert` ([`Insert`])
//! The tx node of an insert policy's interface (`sr policy add ... insert`, T.Insert).
//! - uses: `tx_if` (the policy interface: its [`InsertEntry`]); the packet at the
//!   placeholder Ethernet header `ip6-rewrite` wrote (which decremented the hop limit).
//! - sets: strips the placeholder, inserts the policy's SRH ([`insert_srh`]) behind the
//!   IPv6 header: its next header the packet's, segment 0 the packet's destination; the
//!   destination = the first segment, next header 43, payload length + the SRH;
//!   `ip.fib_index` = the policy's table; `LOCALLY_ORIGINATED` (no second decrement).
//!   A packet to the policy's BSID (routed here by the BSID's /128) gets the BSID SRH
//!   instead ([`bsid_srh`], VPP's `rewrite_bsid`): the segment list only, no slot for the
//!   BSID, which is consumed (else the last segment would send it back to this headend).
//! - next: `drop` (`error-drop`), `lookup` (`ip6-lookup`).
//! - counters: `inserted` (info), `no_policy` (the interface is no insert policy: deleted
//!   under traffic), `not_ip6`, `hop_by_hop` (hop-by-hop options first: not supported),
//!   `too_big` (payload length past 65535), `no_headroom`.
//! - trace: [`InsertTrace`] (`srh insert sw_if_index <n> segments <SRH entries> [(to
//!   bsid)] new dst <first segment>`).

use crate::tunnel::{self, EncapEntry, Kind};
use sluice_buffer::Buffer;
use sluice_cli::{Args, CliError, CommandTree};
use sluice_fib::adj::{AdjKind, AdjTable};
use sluice_graph::{
    Cx, GraphBuilder, Next, NodeKind, NodeRegistration, PacketNode, PerPacket, Vlib,
};
use sluice_vnet::devices::linux::SwTable;
use sluice_vnet::error::{VnetError, VnetResult};
use sluice_vnet::interface::{counter as ifc, IfRow};
use sluice_vnet::routes::RoutePaths;
use sluice_vnet::SwIfIndex;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

/// The encap node (VPP's name).
pub const ENCAP: &str = "sr-pl-rewrite-encaps";
/// The SRH insert node (VPP's name).
pub const INSERT: &str = "sr-pl-rewrite-insert";
/// The local SID node.
pub const LOCALSID: &str = "sr-localsid";
/// The SRH next header of an Ethernet frame (RFC 8986 §10.1).
pub const ETHERNET: u8 = 143;
/// Most segments of a policy's segment list (the rewrite holds 40 + 8 + 16 × 5 bytes).
pub const MAX_SEGMENTS: usize = 5;

// ---------------------------------------------------------------------------------------
// The segment routing header.

/// A parsed SRH (RFC 8754 §2).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Srh {
    /// Next header.
    pub next_header: u8,
    /// Header length in bytes ((Hdr Ext Len + 1) × 8).
    pub len: usize,
    /// Segments left.
    pub segments_left: u8,
    /// Last entry (index of the last element of the segment list).
    pub last_entry: u8,
}

/// Why an SRH is refused.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SrhError {
    /// Shorter than 8 bytes or than its Hdr Ext Len says.
    Truncated,
    /// Routing type ≠ 4.
    BadType,
    /// The segment list (last entry + 1 segments) does not fit the header.
    BadLastEntry,
    /// Segments left > last entry.
    SlBeyondLast,
}

/// Parses and validates the routing header at the start of `d`.
pub fn parse_srh(d: &[u8]) -> Result<Srh, SrhError> {
    let h = d.first_chunk::<8>().ok_or(SrhError::Truncated)?;
    let len = (h[1] as usize + 1) * 8;
    if h[2] != 4 {
        return Err(SrhError::BadType);
    }
    if d.len() < len {
        return Err(SrhError::Truncated);
    }
    let (sl, last) = (h[3], h[4]);
    if 8 + (last as usize + 1) * 16 > len {
        return Err(SrhError::BadLastEntry);
    }
    if sl > last {
        return Err(SrhError::SlBeyondLast);
    }
    Ok(Srh {
        next_header: h[0],
        len,
        segments_left: sl,
        last_entry: last,
    })
}

/// The outer IPv6 header + SRH of H.Encaps from `src` through `segs` (in visiting
/// order): destination the first segment, segments left and last entry n − 1, the list
/// stored last segment first; the SRH's next header is filled per packet.
pub fn encap_rewrite(src: Ipv6Addr, segs: &[Ipv6Addr]) -> Vec<u8> {
    let n = segs.len();
    let mut rw = Vec::with_capacity(48 + 16 * n);
    tunnel::outer_ip(IpAddr::V6(src), IpAddr::V6(segs[0]), 43, &mut rw);
    rw.extend_from_slice(&[0, (2 * n) as u8, 4, (n - 1) as u8, (n - 1) as u8, 0, 0, 0]);
    for s in segs.iter().rev() {
        rw.extend_from_slice(&s.octets());
    }
    rw
}

/// The outer headers of T.Encaps.L2 (RFC 8986 §5.3) from `src` through `segs`: an
/// Ethernet frame (next header 143) inside, behind an SRH only when there are two or more
/// segments (a single segment is the outer destination alone).
pub fn encap_rewrite_l2(src: Ipv6Addr, segs: &[Ipv6Addr]) -> Vec<u8> {
    if segs.len() == 1 {
        let mut rw = Vec::with_capacity(40);
        tunnel::outer_ip(IpAddr::V6(src), IpAddr::V6(segs[0]), ETHERNET, &mut rw);
        return rw;
    }
    let mut rw = encap_rewrite(src, segs);
    rw[40] = ETHERNET;
    rw
}

// ---------------------------------------------------------------------------------------
// The local SID node.

/// What a local SID does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Behavior {
    /// End: the next segment.
    End,
    /// End.X: the next segment, sent to neighbour `nh` on interface `sw` (no lookup).
    EndX {
        /// Interface.
        sw: SwIfIndex,
        /// Next hop.
        nh: Ipv6Addr,
    },
    /// End.DX4: decapsulate, send the IPv4 packet to `nh` on interface `sw`.
    Dx4 {
        /// Interface.
        sw: SwIfIndex,
        /// Next hop.
        nh: Ipv4Addr,
    },
    /// End.DX6: decapsulate, send the IPv6 packet to `nh` on interface `sw`.
    Dx6 {
        /// Interface.
        sw: SwIfIndex,
        /// Next hop.
        nh: Ipv6Addr,
    },
    /// End.DX2: decapsulate, send the Ethernet frame out of interface `sw`.
    Dx2 {
        /// Interface.
        sw: SwIfIndex,
    },
    /// End.DT4: decapsulate, look the IPv4 packet up in table `table`.
    Dt4 {
        /// Table id.
        table: u32,
    },
    /// End.DT6: decapsulate, look the IPv6 packet up in table `table`.
    Dt6 {
        /// Table id.
        table: u32,
    },
}

/// What the node does for one SID (per thread, by the SID interface's `sw_if_index`).
#[derive(Clone)]
pub enum Action {
    /// End, continuing the lookup in this FIB index.
    End(u32),
    /// End.X to a neighbour.
    EndX {
        /// The IPv6 adjacencies.
        adjs: Arc<AdjTable>,
        /// The neighbour's adjacency (Incomplete until resolved).
        adj: u32,
        /// FIB index of the SID's table (ICMP errors are looked up there).
        fib: u32,
    },
    /// End.DT4 / End.DT6 into this FIB index (`true`: IPv6).
    Dt(bool, u32),
    /// End.DX2 out of this interface.
    Dx2(u32),
    /// End.DX4 / End.DX6 (`v6`) to a neighbour.
    Dx {
        /// IPv6 inside (End.DX6).
        v6: bool,
        /// The family's adjacencies.
        adjs: Arc<AdjTable>,
        /// The neighbour's adjacency (Incomplete until resolved).
        adj: u32,
        /// FIB index of the interface's table.
        fib: u32,
    },
}

sluice_graph::arcs! {
    /// Next arcs of `sr-localsid`.
    pub enum SidNext {
        /// Drops.
        Drop => "error-drop",
        /// End, End.DT6.
        Ip6Lookup => "ip6-lookup",
        /// End.DT4.
        Ip4Lookup => "ip4-lookup",
        /// End.DX4.
        Ip4Rewrite => "ip4-rewrite",
        /// End.DX6.
        Ip6Rewrite => "ip6-rewrite",
        /// End.DX4 to an unresolved neighbour.
        Ip4Glean => "ip4-glean",
        /// End.DX6 to an unresolved neighbour.
        Ip6Glean => "ip6-glean",
        /// End.DX2: the inner frame out of its interface.
        InterfaceOutput => sluice_vnet::output::NAME,
    }
}

sluice_graph::counters! {
    /// Counters of `sr-localsid`.
    pub enum SidCounter {
        /// End processed.
        End => info("end", "End: forwarded to the next segment"),
        /// Decapsulated.
        Decapsulated => info("decapsulated", "decapsulated (End.DX4/DX6/DT4/DT6)"),
        /// Deleted under traffic.
        NoSid => error("no_sid", "interface is no local SID (deleted?)"),
        /// Truncated.
        Truncated => error("truncated", "shorter than its headers"),
        /// End without SRH.
        NoSrh => error("no_srh", "End without a segment routing header"),
        /// Other extension headers.
        Ip6Extension => error("ip6_extension", "IPv6 extension header other than the SRH"),
        /// Routing type ≠ 4.
        BadRoutingType => error("bad_routing_type", "routing header type is not 4 (SRH)"),
        /// Segment list does not fit.
        SrhBadLastEntry => error("srh_bad_last_entry", "SRH last entry beyond its length"),
        /// SL > last entry.
        SlBeyondLast => error("sl_beyond_last", "SRH segments left beyond the last entry"),
        /// End with SL 0.
        SlZero => error("sl_zero", "End with segments left 0"),
        /// Decap with SL ≠ 0.
        SlNotZero => error("sl_not_zero", "decapsulating SID with segments left not 0"),
        /// Inner packet of the wrong family.
        BadInner => error("bad_inner", "inner packet is not of the behaviour's family"),
        /// Through interface-output, not IPv6 behind the placeholder header.
        NotIp6 => error("not_ip6", "not an IPv6 packet (an IPv4 route via the SID interface?)"),
        /// DX adjacency no neighbour's (its interface deleted).
        DxNoNeighbor => error("dx_no_neighbor", "End.DX adjacency is no neighbour's (interface deleted?)"),
    }
}

/// Trace record of `sr-localsid`.
#[derive(Copy, Clone)]
pub struct SidTrace {
    /// SID interface.
    pub sw_if: u32,
    /// Segments left on arrival (255: no SRH).
    pub sl: u8,
}

impl sluice_graph::TraceRecord for SidTrace {
    fn format(&self, out: &mut String) {
        out.push_str(&format!("localsid sw_if_index {}", self.sw_if));
        if self.sl != 255 {
            out.push_str(&format!(" segments left {}", self.sl));
        }
    }
}

/// One local SID in a thread's `sr-localsid` table.
#[derive(Clone)]
pub struct SidEntry {
    /// What the SID does.
    pub act: Action,
    /// This thread's row of the SID interface's counters: the node counts `tx packets` /
    /// `tx bytes` (the SID's hits) of the packets `ip6-lookup` hands it straight (no
    /// `interface-output` counted them). None: not counted (no row for this thread).
    tx: Option<IfRow>,
}

/// The local SID node (one per thread).
#[derive(Default)]
pub struct LocalSid {
    /// By SID interface `sw_if_index`.
    pub table: SwTable<SidEntry>,
    /// The IPv6 adjacencies: a packet `ip6-lookup` hands straight here (the SID route's
    /// Node adjacency) names its SID interface as the adjacency's `tx_if`.
    pub adjs: Option<Arc<AdjTable>>,
    /// Per frame (reset by `begin_frame`): the last Node adjacency seen and its interface.
    last_adj: (u32, u32),
    /// Per frame: the last End.DX adjacency checked (its number and whether it is an ip6
    /// one: End.DX4 and End.DX6 number their adjacencies in separate tables, both from 0)
    /// and its arc (None: no neighbour's).
    last_dx: ((u32, bool), Option<SidNext>),
    /// Per frame: the run of directly handed packets to one SID (its interface, packets,
    /// bytes), added to its tx counters when the SID changes and at the frame's end.
    run: (u32, u64, u64),
    /// Per frame: End and decapsulated packets.
    ends: u64,
    decaps: u64,
}

fn srh_error(e: SrhError) -> SidCounter {
    match e {
        SrhError::Truncated => SidCounter::Truncated,
        SrhError::BadType => SidCounter::BadRoutingType,
        SrhError::BadLastEntry => SidCounter::SrhBadLastEntry,
        SrhError::SlBeyondLast => SidCounter::SlBeyondLast,
    }
}

/// No interface: the per-frame caches' empty value.
const NO_SW: u32 = u32::MAX;

impl LocalSid {
    /// Adds the current run of direct packets to its SID's tx counters.
    #[inline]
    fn flush_run(&mut self) {
        let (sw, n, bytes) = self.run;
        if n > 0 {
            if let Some(r) = self.table.get(sw).and_then(|e| e.tx.as_ref()) {
                r.add(ifc::TX_PACKETS, n);
                r.add(ifc::TX_BYTES, bytes);
            }
        }
        self.run = (NO_SW, 0, 0);
    }

    /// The SID interface of a packet `ip6-lookup` handed straight here with adjacency `a`.
    #[inline(always)]
    fn sid_of_adj(&mut self, a: u32) -> u32 {
        if a != self.last_adj.0 {
            let sw = self.adjs.as_ref().map_or(NO_SW, |t| {
                let adj = t.get(a);
                if adj.kind == AdjKind::Node {
                    adj.tx_if
                } else {
                    NO_SW
                }
            });
            self.last_adj = (a, sw);
        }
        self.last_adj.1
    }
}

impl PacketNode for LocalSid {
    #[inline(always)]
    fn begin_frame(&mut self, _cx: &mut Cx) {
        self.last_adj = (u32::MAX, NO_SW);
        self.last_dx = ((u32::MAX, false), None);
        self.run = (NO_SW, 0, 0);
    }

    #[inline(always)]
    fn end_frame(&mut self, cx: &mut Cx) {
        self.flush_run();
        if self.ends > 0 {
            cx.count(SidCounter::End, self.ends);
        }
        if self.decaps > 0 {
            cx.count(SidCounter::Decapsulated, self.decaps);
        }
        (self.ends, self.decaps) = (0, 0);
    }

    #[inline(always)]
    fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        let drop = |cx: &mut Cx, b: &mut Buffer<'_>, c: SidCounter| {
            b.hdr.error = cx.error(c);
            SidNext::Drop.into()
        };
        // Straight from `ip6-lookup` (the SID route's Node adjacency): the IPv6 header,
        // version 6; through `interface-output` (a route via the SID interface made before
        // its adjacency was a Node one): the point-to-point placeholder Ethernet header
        // `ip6-rewrite` wrote, zero MACs first. No Ethernet frame gets here: the SID
        // interface takes no L2 mode (`sluice_vnet::interface::check_l2`).
        let direct = b.data().first().is_some_and(|v| v >> 4 == 6);
        let sw = if direct {
            let sw = self.sid_of_adj(b.hdr.ip.adj_index);
            if sw != self.run.0 {
                self.flush_run();
                self.run.0 = sw;
            }
            self.run.1 += 1;
            self.run.2 += b.len() as u64;
            sw
        } else {
            // Behind the placeholder, only IPv6 is a SID's packet: an IPv4 route via the SID
            // interface (no Node adjacency in ip4) brings IPv4.
            if !b.advance(14) || b.data().is_empty() {
                return drop(cx, b, SidCounter::Truncated);
            }
            if b.data()[0] >> 4 != 6 {
                return drop(cx, b, SidCounter::NotIp6);
            }
            b.hdr.tx_if
        };
        let Some(SidEntry { act, .. }) = self.table.get(sw) else {
            return drop(cx, b, SidCounter::NoSid);
        };
        let d = b.data_mut();
        if d.len() < 40 {
            return drop(cx, b, SidCounter::Truncated);
        }
        let nh = d[6];
        let srh = if nh == 43 {
            match parse_srh(&d[40..]) {
                Ok(s) => Some(s),
                Err(e) => return drop(cx, b, srh_error(e)),
            }
        } else {
            None
        };
        if b.hdr.is_traced() {
            cx.trace(
                b,
                SidTrace {
                    sw_if: sw,
                    sl: srh.map_or(255, |s| s.segments_left),
                },
            );
        }
        let d = b.data_mut();
        if let Action::End(fib) | Action::EndX { fib, .. } = *act {
            let Some(s) = srh else {
                let c = if matches!(nh, 0 | 60) {
                    SidCounter::Ip6Extension
                } else {
                    SidCounter::NoSrh
                };
                return drop(cx, b, c);
            };
            if s.segments_left == 0 {
                return drop(cx, b, SidCounter::SlZero);
            }
            let sl = s.segments_left - 1;
            d[43] = sl;
            let o = 48 + 16 * sl as usize;
            d.copy_within(o..o + 16, 24);
            if !direct {
                // `ip6-rewrite` decremented the hop limit on the way to this SID; the
                // egress rewrite decrements it again: one decrement per End, as RFC 8986
                // §4.1.
                d[7] = d[7].saturating_add(1);
            }
            b.hdr.ip.fib_index = fib;
            self.ends += 1;
            if let Action::EndX { adjs, adj, .. } = act {
                // End.X: to the configured neighbour, not the next segment's route.
                b.hdr.ip.adj_index = *adj;
                return match adjs.kind(*adj) {
                    AdjKind::Rewrite => SidNext::Ip6Rewrite.into(),
                    AdjKind::Incomplete => SidNext::Ip6Glean.into(),
                    _ => drop(cx, b, SidCounter::DxNoNeighbor),
                };
            }
            return SidNext::Ip6Lookup.into();
        }
        // A decapsulating behaviour: RFC 8986 §4.4 — an SRH must have segments left 0;
        // then the upper-layer header must be the inner packet of the behaviour's family.
        let (off, inner) = match srh {
            Some(s) if s.segments_left != 0 => return drop(cx, b, SidCounter::SlNotZero),
            Some(s) => (40 + s.len, s.next_header),
            None => (40, nh),
        };
        let want6 = matches!(act, Action::Dt(true, _) | Action::Dx { v6: true, .. });
        // (upper-layer protocol, first nibble, least length): IPv6, IPv4, or Ethernet
        // (143, RFC 8986 §10.1; any first nibble) for End.DX2.
        let (proto, ver, min) = match act {
            Action::Dx2(_) => (ETHERNET, None, 14),
            _ if want6 => (41, Some(6), 40),
            _ => (4, Some(4), 20),
        };
        if inner != proto {
            let c = if matches!(inner, 0 | 43 | 60) {
                SidCounter::Ip6Extension
            } else {
                SidCounter::BadInner
            };
            return drop(cx, b, c);
        }
        match d.get(off..off + min) {
            None => return drop(cx, b, SidCounter::Truncated),
            // An inner IPv4 header shorter than its 20 bytes (IHL < 5) would reach
            // ip4-lookup or ip4-rewrite without ip4-input's check.
            Some(p)
                if ver.is_some_and(|v| p[0] >> 4 != v) || (ver == Some(4) && p[0] & 0xf < 5) =>
            {
                return drop(cx, b, SidCounter::BadInner)
            }
            Some(_) => {}
        }
        let next = match act {
            Action::Dt(v6, fib) => {
                b.hdr.ip.fib_index = *fib;
                if *v6 {
                    SidNext::Ip6Lookup
                } else {
                    SidNext::Ip4Lookup
                }
            }
            Action::Dx { v6, adjs, adj, fib } => {
                // The adjacency's kind, read once per frame and adjacency (of its family's
                // table: an End.DX4 and an End.DX6 adjacency may have the same number).
                if self.last_dx.0 != (*adj, *v6) {
                    let next = match (adjs.kind(*adj), v6) {
                        (AdjKind::Rewrite, false) => Some(SidNext::Ip4Rewrite),
                        (AdjKind::Rewrite, true) => Some(SidNext::Ip6Rewrite),
                        (AdjKind::Incomplete, false) => Some(SidNext::Ip4Glean),
                        (AdjKind::Incomplete, true) => Some(SidNext::Ip6Glean),
                        _ => None,
                    };
                    self.last_dx = ((*adj, *v6), next);
                }
                let Some(next) = self.last_dx.1 else {
                    return drop(cx, b, SidCounter::DxNoNeighbor);
                };
                b.hdr.ip.adj_index = *adj;
                b.hdr.ip.fib_index = *fib;
                next
            }
            Action::Dx2(out) => {
                b.hdr.tx_if = *out;
                SidNext::InterfaceOutput
            }
            // Handled (and returned) above.
            Action::End(_) | Action::EndX { .. } => SidNext::Drop,
        };
        b.advance(off);
        self.decaps += 1;
        next.into()
    }
}

// ---------------------------------------------------------------------------------------
// The SRH insert node (T.Insert).

/// The SRH an insert policy puts behind a packet's IPv6 header: `segs` (visiting order)
/// then the packet's own destination, which is segment 0 and filled per packet (RFC 8754
/// §2; VPP's `insert`): segments left and last entry n, the list stored last first.
pub fn insert_srh(segs: &[Ipv6Addr]) -> Vec<u8> {
    let n = segs.len();
    let mut h = Vec::with_capacity(8 + 16 * (n + 1));
    h.extend_from_slice(&[0, (2 * (n + 1)) as u8, 4, n as u8, n as u8, 0, 0, 0]);
    h.extend_from_slice(&[0; 16]);
    for s in segs.iter().rev() {
        h.extend_from_slice(&s.octets());
    }
    h
}

/// The SRH an insert policy puts into a packet addressed to its BSID (VPP's
/// `compute_rewrite_bsid`): `segs` only, the BSID consumed — segments left and last entry
/// n − 1, 8 + 16 × n bytes. Its segment list is [`insert_srh`]'s without segment 0.
pub fn bsid_srh(segs: &[Ipv6Addr]) -> Vec<u8> {
    let n = segs.len();
    let mut h = Vec::with_capacity(8 + 16 * n);
    h.extend_from_slice(&[0, (2 * n) as u8, 4, (n - 1) as u8, (n - 1) as u8, 0, 0, 0]);
    for s in segs.iter().rev() {
        h.extend_from_slice(&s.octets());
    }
    h
}

/// Longest [`insert_srh`]: [`MAX_SEGMENTS`] segments and the packet's destination.
const MAX_INSERT: usize = 8 + 16 * (MAX_SEGMENTS + 1);

/// One insert policy's data, per thread (by its interface's `sw_if_index`).
#[derive(Copy, Clone)]
pub struct InsertEntry {
    /// The SRH ([`insert_srh`]), its next header and segment 0 filled per packet.
    srh: [u8; MAX_INSERT],
    /// Bytes of `srh` used.
    len: u8,
    /// The first 8 bytes of [`bsid_srh`] (its segment list is `srh`'s past segment 0).
    bsid_hdr: [u8; 8],
    /// The policy's BSID: a packet to it gets the BSID SRH.
    bsid: [u8; 16],
    /// The first segment: the packet's new destination.
    first: [u8; 16],
    /// FIB index of the policy's table (the lookup toward the first segment).
    fib_index: u32,
}

impl InsertEntry {
    /// The entry of policy `bsid` through `segs` in FIB index `fib_index`.
    pub fn new(bsid: Ipv6Addr, segs: &[Ipv6Addr], fib_index: u32) -> Self {
        let h = insert_srh(segs);
        let mut srh = [0; MAX_INSERT];
        srh[..h.len()].copy_from_slice(&h);
        let mut bsid_hdr = [0; 8];
        bsid_hdr.copy_from_slice(&bsid_srh(segs)[..8]);
        InsertEntry {
            srh,
            len: h.len() as u8,
            bsid_hdr,
            bsid: bsid.octets(),
            first: segs[0].octets(),
            fib_index,
        }
    }
}

sluice_graph::arcs! {
    /// Next arcs of `sr-pl-rewrite-insert`.
    pub enum InsertNext {
        /// Drops.
        Drop => "error-drop",
        /// The lookup toward the first segment.
        Lookup => "ip6-lookup",
    }
}

sluice_graph::counters! {
    /// Counters of `sr-pl-rewrite-insert`.
    pub enum InsertCounter {
        /// SRHs inserted.
        Inserted => info("inserted", "SRH inserted"),
        /// Deleted under traffic.
        NoPolicy => error("no_policy", "tx interface is no insert policy (deleted?)"),
        /// Not IPv6.
        NotIp6 => error("not_ip6", "steered packet is not IPv6 (insert needs an IPv6 header)"),
        /// Hop-by-hop options first.
        HopByHop => error("hop_by_hop", "hop-by-hop options header: SRH insertion not supported"),
        /// Payload length would overflow.
        TooBig => error("too_big", "payload length with the SRH exceeds 65535"),
        /// No headroom.
        NoHeadroom => error("no_headroom", "no headroom for the SRH"),
    }
}

/// Trace record of `sr-pl-rewrite-insert`.
#[derive(Copy, Clone)]
pub struct InsertTrace {
    /// Policy interface.
    pub sw_if: u32,
    /// Segments in the inserted SRH.
    pub segments: u8,
    /// The packet was addressed to the BSID (the BSID SRH).
    pub to_bsid: bool,
    /// The new destination (the first segment).
    pub dst: [u8; 16],
}

impl sluice_graph::TraceRecord for InsertTrace {
    fn format(&self, out: &mut String) {
        out.push_str(&format!(
            "srh insert sw_if_index {} segments {}{} new dst {}",
            self.sw_if,
            self.segments,
            if self.to_bsid { " (to bsid)" } else { "" },
            Ipv6Addr::from(self.dst)
        ));
    }
}

/// `sr-pl-rewrite-insert`: the tx node of an insert policy's interface.
#[derive(Default)]
pub struct Insert {
    /// By policy interface `sw_if_index`.
    pub table: SwTable<InsertEntry>,
}

impl PacketNode for Insert {
    #[inline(always)]
    fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        use InsertCounter as c;
        let drop = |cx: &mut Cx, b: &mut Buffer<'_>, e: InsertCounter| {
            b.hdr.error = cx.error(e);
            InsertNext::Drop.next()
        };
        let Some(e) = self.table.get(b.hdr.tx_if) else {
            return drop(cx, b, c::NoPolicy);
        };
        // Behind the placeholder Ethernet header `ip6-rewrite` wrote: the IPv6 packet.
        let d = b.data();
        if d.len() < 14 + 40 || d[14] >> 4 != 6 {
            return drop(cx, b, c::NotIp6);
        }
        if d[14 + 6] == 0 {
            return drop(cx, b, c::HopByHop);
        }
        // To the BSID: the BSID SRH (the segments only, the BSID consumed); else segment 0
        // is the packet's destination.
        let to_bsid = d[14 + 24..14 + 40] == e.bsid;
        let (hdr, segs) = if to_bsid {
            (&e.bsid_hdr[..], &e.srh[24..e.len as usize])
        } else {
            (&e.srh[..8], &e.srh[8..e.len as usize])
        };
        let rl = 8 + segs.len();
        let plen = u16::from_be_bytes([d[14 + 4], d[14 + 5]]) as usize + rl;
        if plen > u16::MAX as usize {
            return drop(cx, b, c::TooBig);
        }
        b.advance(14);
        if b.push_front(rl).is_none() {
            return drop(cx, b, c::NoHeadroom);
        }
        let d = b.data_mut();
        d.copy_within(rl..rl + 40, 0);
        let nh = d[6];
        d[40..48].copy_from_slice(hdr);
        d[40] = nh;
        d[48..40 + rl].copy_from_slice(segs);
        if !to_bsid {
            d.copy_within(24..40, 48);
        }
        d[24..40].copy_from_slice(&e.first);
        d[6] = 43;
        d[4..6].copy_from_slice(&(plen as u16).to_be_bytes());
        b.hdr.ip.fib_index = e.fib_index;
        // The hop limit was decremented on the way in: no second decrement.
        b.hdr.flags |= sluice_buffer::flags::LOCALLY_ORIGINATED;
        cx.count(c::Inserted, 1);
        if b.hdr.is_traced() {
            let t = InsertTrace {
                sw_if: b.hdr.tx_if,
                segments: ((rl - 8) / 16) as u8,
                to_bsid,
                dst: e.first,
            };
            cx.trace(b, t);
        }
        InsertNext::Lookup.next()
    }
}

// ---------------------------------------------------------------------------------------
// Control plane.

/// An SR policy.
#[derive(Clone, Debug)]
pub struct Policy {
    /// Binding SID.
    pub bsid: Ipv6Addr,
    /// Segment list, visiting order.
    pub segs: Vec<Ipv6Addr>,
    /// Table id of the BSID route.
    pub table_id: u32,
    /// The policy's interface.
    pub sw: SwIfIndex,
    /// Outer source (H.Encaps): the encaps source when the policy was made (an insert
    /// policy has none).
    pub src: Option<Ipv6Addr>,
    /// `insert`: an SRH goes into the steered IPv6 packet (T.Insert) instead of an outer
    /// header around it.
    pub insert: bool,
}

/// A local SID.
#[derive(Clone, Debug)]
pub struct Sid {
    /// The SID.
    pub addr: Ipv6Addr,
    /// Behaviour.
    pub behavior: Behavior,
    /// Table id of the SID route.
    pub table_id: u32,
    /// The SID's interface.
    pub sw: SwIfIndex,
}

/// A steering rule.
#[derive(Clone, Debug)]
pub struct Steer {
    /// Prefix.
    pub prefix: IpAddr,
    /// Length.
    pub len: u8,
    /// Table id.
    pub table_id: u32,
    /// Policy BSID.
    pub bsid: Ipv6Addr,
}

/// An L2 steering rule (`sr steer l2`).
#[derive(Clone, Debug)]
pub struct L2Steer {
    /// The steered interface (cross-connected to `sw`).
    pub rx: SwIfIndex,
    /// Policy BSID.
    pub bsid: Ipv6Addr,
    /// The rule's L2 encap interface.
    pub sw: SwIfIndex,
}

/// SRv6 state (a `Vlib` extension).
#[derive(Default)]
pub struct Srv6 {
    /// `set sr encaps source addr`.
    pub source: Option<Ipv6Addr>,
    /// Policies.
    pub policies: Vec<Policy>,
    /// Local SIDs.
    pub sids: Vec<Sid>,
    /// Steering rules.
    pub steers: Vec<Steer>,
    /// L2 steering rules.
    pub l2_steers: Vec<L2Steer>,
}

fn first_free(vm: &mut Vlib, prefix: &str) -> String {
    let ifs = vm.ext_mut::<sluice_vnet::Interfaces>();
    let n = (0..u32::MAX)
        .find(|n| ifs.find(&format!("{prefix}{n}")).is_none())
        .unwrap_or(0);
    format!("{prefix}{n}")
}

/// The instance of SRv6 interface `sw` (named `<prefix><n>`): `n`.
fn instance_of(vm: &mut Vlib, sw: SwIfIndex, prefix: &str) -> String {
    let name = tunnel::if_name(vm, sw);
    name.strip_prefix(prefix).unwrap_or(&name).to_string()
}

/// Adds or deletes the route `p/len` in table `table` via interface `sw`.
fn route(vm: &mut Vlib, add: bool, p: IpAddr, len: u8, table: u32, sw: SwIfIndex) -> VnetResult {
    match p {
        IpAddr::V4(a) => {
            let paths = RoutePaths::<Ipv4Addr> {
                table,
                via_if: vec![(sw, 1)],
                ..Default::default()
            };
            sluice_vnet::ip4::route_add_del(vm, add, 1, u32::from(a), len, &paths)
        }
        IpAddr::V6(a) => {
            let paths = RoutePaths::<Ipv6Addr> {
                table,
                via_if: vec![(sw, 1)],
                ..Default::default()
            };
            sluice_vnet::ip6::route_add_del(vm, add, 1, u128::from(a), len, &paths)
        }
    }
}

/// A point-to-point interface `name` with tx node `tx`, up, MTU `mtu`.
fn p2p_interface(
    vm: &mut Vlib,
    prefix: &str,
    instance: Option<u32>,
    tx: &str,
    mtu: u32,
) -> VnetResult<SwIfIndex> {
    let sw = interface(vm, prefix, instance, tx)?;
    let set = |vm: &mut Vlib| -> VnetResult<()> {
        sluice_vnet::set_p2p(vm, sw, true)?;
        sluice_vnet::interface::set_mtu(vm, sw, mtu)?;
        sluice_vnet::interface::set_admin_state(vm, sw, true)
    };
    if let Err(e) = set(vm) {
        // Not left behind half made: its name (an explicit `instance`) stays free.
        sluice_vnet::loopback::delete_interface(vm, sw);
        return Err(e);
    }
    Ok(sw)
}

/// An interface `<prefix><n>` (`n`: `instance`, or the lowest free one) with tx node
/// `tx`, down.
fn interface(
    vm: &mut Vlib,
    prefix: &str,
    instance: Option<u32>,
    tx: &str,
) -> VnetResult<SwIfIndex> {
    let node = vm
        .registry
        .find(tx)
        .ok_or_else(|| VnetError::System(format!("{tx} missing")))?;
    let name = match instance {
        Some(n) => format!("{prefix}{n}"),
        None => first_free(vm, prefix),
    };
    if vm
        .ext_mut::<sluice_vnet::Interfaces>()
        .find(&name)
        .is_some()
    {
        return Err(VnetError::Exists(format!("interface {name} exists")));
    }
    let n = vm.ext_mut::<sluice_vnet::Interfaces>().list.len() as u32;
    let mac = [0x02, 0xfe, b's', (n >> 16) as u8, (n >> 8) as u8, n as u8];
    sluice_vnet::create_interface(vm, &name, "srv6", mac, Some(node))
}

/// Sets (or clears) the insert entry of policy interface `sw` on every thread.
fn set_insert(vm: &mut Vlib, sw: SwIfIndex, entry: Option<InsertEntry>) {
    if let Some(n) = vm.registry.find(INSERT) {
        vm.foreach_thread(move |tg| {
            if let Some(e) = tg.node_mut::<Insert>(n) {
                e.table.set(sw.0, entry);
            }
        });
    }
}

/// Sets (or clears) the encap entry of interface `sw` on every thread.
fn set_encap(vm: &mut Vlib, sw: SwIfIndex, entry: Option<EncapEntry>) {
    if let Some(n) = vm.registry.find(ENCAP) {
        // The IPv6 underlay the encap stacks on (`tunnel::stacked`: the policy's first
        // SID, the outer destination; the result is cached in the policy's entry until the
        // FIB change count moves).
        let underlay = tunnel::Underlay::of(vm, true);
        vm.foreach_thread(move |tg| {
            if let Some(e) = tg.node_mut::<tunnel::Encap>(n) {
                e.set(sw.0, entry);
                if e.underlay.is_none() {
                    e.underlay = underlay.clone();
                }
            }
        });
    }
}

fn v6_fib(vm: &mut Vlib, id: u32) -> VnetResult<u32> {
    sluice_vnet::ip6::fib_index(vm, id).ok_or_else(|| sluice_vnet::routes::no_table(id))
}

/// `set sr encaps source addr <a>`.
pub fn set_source(vm: &mut Vlib, a: Ipv6Addr) -> VnetResult {
    if a.is_unspecified() || a.is_multicast() {
        return Err(VnetError::invalid(format!(
            "encaps source {a} is unspecified or multicast"
        )));
    }
    vm.ext_mut::<Srv6>().source = Some(a);
    Ok(())
}

/// `sr policy add`: creates policy `bsid` through `segs` (`insert`: T.Insert, else
/// H.Encaps); its interface, `sr-policy<instance>` (None: the lowest free instance).
pub fn policy_add(
    vm: &mut Vlib,
    bsid: Ipv6Addr,
    segs: &[Ipv6Addr],
    table_id: u32,
    insert: bool,
    instance: Option<u32>,
) -> VnetResult<SwIfIndex> {
    if segs.is_empty() || segs.len() > MAX_SEGMENTS {
        return Err(VnetError::invalid(format!(
            "{} segments: a policy has 1 to {MAX_SEGMENTS}",
            segs.len()
        )));
    }
    let st = vm.ext_mut::<Srv6>();
    let src = st.source;
    if st.policies.iter().any(|p| p.bsid == bsid) {
        return Err(VnetError::Exists(format!("policy with bsid {bsid} exists")));
    }
    if st.sids.iter().any(|s| s.addr == bsid) {
        return Err(VnetError::Exists(format!("{bsid} is a local SID")));
    }
    let fib = v6_fib(vm, table_id)?;
    let sw = if insert {
        let e = InsertEntry::new(bsid, segs, fib);
        let sw = p2p_interface(vm, "sr-policy", instance, INSERT, 1500 - e.len as u32)?;
        set_insert(vm, sw, Some(e));
        sw
    } else {
        let src = src.ok_or_else(no_source)?;
        let rw = encap_rewrite(src, segs);
        let sw = p2p_interface(vm, "sr-policy", instance, ENCAP, 1500 - rw.len() as u32)?;
        let entry = EncapEntry::new(&rw, true, Kind::Srv6 { l2: false }, fib);
        set_encap(vm, sw, Some(entry));
        sw
    };
    if let Err(e) = route(vm, true, IpAddr::V6(bsid), 128, table_id, sw) {
        clear_policy(vm, sw, insert);
        return Err(e);
    }
    vm.ext_mut::<Srv6>().policies.push(Policy {
        bsid,
        segs: segs.to_vec(),
        table_id,
        sw,
        // An insert policy uses no outer source: none shown, none replayed before it.
        src: if insert { None } else { src },
        insert,
    });
    Ok(sw)
}

/// The error of an encap policy made before `set sr encaps source`.
fn no_source() -> VnetError {
    VnetError::invalid("no encaps source: `set sr encaps source addr <ip6>' first")
}

/// `sr policy del bsid <a>`: deletes the policy and the steering rules using it. The L2
/// rules go first: if one cannot be removed, the policy stays (with the rules still left).
pub fn policy_del(vm: &mut Vlib, bsid: Ipv6Addr) -> VnetResult {
    let st = vm.ext_mut::<Srv6>();
    // Stays valid below: removing the L2 rules leaves the policy list alone.
    let Some(i) = st.policies.iter().position(|p| p.bsid == bsid) else {
        return Err(VnetError::NotFound(format!("no policy with bsid {bsid}")));
    };
    let l2: Vec<SwIfIndex> = st
        .l2_steers
        .iter()
        .filter(|s| s.bsid == bsid)
        .map(|s| s.rx)
        .collect();
    for rx in l2 {
        steer_l2_del(vm, rx, bsid)?;
    }
    let st = vm.ext_mut::<Srv6>();
    let p = st.policies.remove(i);
    let steers: Vec<Steer> = st
        .steers
        .iter()
        .filter(|s| s.bsid == bsid)
        .cloned()
        .collect();
    st.steers.retain(|s| s.bsid != bsid);
    // Every route is removed even if one fails; the first failure is returned after.
    let mut res = Ok(());
    for s in steers {
        res = res.and(route(vm, false, s.prefix, s.len, s.table_id, p.sw));
    }
    res = res.and(route(vm, false, IpAddr::V6(bsid), 128, p.table_id, p.sw));
    clear_policy(vm, p.sw, p.insert);
    res
}

/// Clears policy interface `sw`'s encap or insert entry and deletes it.
fn clear_policy(vm: &mut Vlib, sw: SwIfIndex, insert: bool) {
    if insert {
        set_insert(vm, sw, None);
    } else {
        set_encap(vm, sw, None);
    }
    sluice_vnet::loopback::delete_interface(vm, sw);
}

/// `sr steer [del] l3 <prefix> via bsid <a>`.
pub fn steer(vm: &mut Vlib, add: bool, s: Steer) -> VnetResult {
    let st = vm.ext_mut::<Srv6>();
    let (sw, insert) = st
        .policies
        .iter()
        .find(|p| p.bsid == s.bsid)
        .map(|p| (p.sw, p.insert))
        .ok_or_else(|| VnetError::NotFound(format!("no policy with bsid {}", s.bsid)))?;
    if add && insert && s.prefix.is_ipv4() {
        return Err(VnetError::invalid(format!(
            "{}/{}: an insert policy (bsid {}) steers IPv6 only",
            s.prefix, s.len, s.bsid
        )));
    }
    let same = |o: &Steer| o.prefix == s.prefix && o.len == s.len && o.table_id == s.table_id;
    let pos = st.steers.iter().position(same);
    match (add, pos) {
        (true, Some(_)) => {
            return Err(VnetError::Exists(format!(
                "{}/{} is steered already",
                s.prefix, s.len
            )))
        }
        (false, None) => {
            return Err(VnetError::NotFound(format!(
                "{}/{} is not steered",
                s.prefix, s.len
            )))
        }
        _ => {}
    }
    route(vm, add, s.prefix, s.len, s.table_id, sw)?;
    let st = vm.ext_mut::<Srv6>();
    match pos {
        Some(i) => {
            st.steers.remove(i);
        }
        None => st.steers.push(s),
    }
    Ok(())
}

/// Deletes `rx`'s L2 steering rule (`bsid` unspecified: whichever policy it names). `rx`
/// may be gone already (deleted while steered, then its policy deleted): the rule, its
/// `sr-l2-steer<n>` and the encap entry go all the same; a live `rx` is put back in L3 mode
/// first, and the rule is forgotten only once that worked.
fn steer_l2_del(vm: &mut Vlib, rx: SwIfIndex, bsid: Ipv6Addr) -> VnetResult {
    let alive = sluice_vnet::interface::check(vm, rx).is_ok();
    let name = if alive {
        tunnel::if_name(vm, rx)
    } else {
        format!("interface {}", rx.0)
    };
    let st = vm.ext_mut::<Srv6>();
    let i = st
        .l2_steers
        .iter()
        .position(|s| s.rx == rx)
        .ok_or_else(|| VnetError::NotFound(format!("{name} is not L2-steered")))?;
    let s = st.l2_steers[i].clone();
    if !bsid.is_unspecified() && s.bsid != bsid {
        return Err(VnetError::NotFound(format!(
            "{name} is steered via bsid {}, not {bsid}",
            s.bsid
        )));
    }
    if alive {
        sluice_vnet::interface::set_l3(vm, rx)?;
    }
    set_encap(vm, s.sw, None);
    sluice_vnet::loopback::delete_interface(vm, s.sw);
    vm.ext_mut::<Srv6>().l2_steers.remove(i);
    Ok(())
}

/// `sr steer [del] l2 <rx> via bsid <a>`: every frame `rx` receives is encapsulated
/// whole (T.Encaps.L2) toward the policy's segment list, through an L2 interface
/// `sr-l2-steer<n>` (`n`: `instance`, or the lowest free one) that `rx` is cross-connected
/// to; `del` puts `rx` back in L3 mode and deletes that interface.
pub fn steer_l2(
    vm: &mut Vlib,
    add: bool,
    rx: SwIfIndex,
    bsid: Ipv6Addr,
    instance: Option<u32>,
) -> VnetResult {
    if !add {
        return steer_l2_del(vm, rx, bsid);
    }
    sluice_vnet::interface::check(vm, rx)?;
    let name = tunnel::if_name(vm, rx);
    let st = vm.ext_mut::<Srv6>();
    let pos = st.l2_steers.iter().position(|s| s.rx == rx);
    if pos.is_some() {
        return Err(VnetError::Exists(format!("{name} is L2-steered already")));
    }
    if st.policies.iter().any(|p| p.sw == rx) || st.l2_steers.iter().any(|s| s.sw == rx) {
        return Err(VnetError::invalid(format!(
            "cannot steer SRv6 interface {name}"
        )));
    }
    let p = st
        .policies
        .iter()
        .find(|p| p.bsid == bsid)
        .cloned()
        .ok_or_else(|| VnetError::NotFound(format!("no policy with bsid {bsid}")))?;
    if p.insert {
        return Err(VnetError::invalid(format!(
            "bsid {bsid} is an insert policy: L2 steering needs an encap one"
        )));
    }
    let fib = v6_fib(vm, p.table_id)?;
    let rw = encap_rewrite_l2(p.src.ok_or_else(no_source)?, &p.segs);
    let sw = interface(vm, "sr-l2-steer", instance, ENCAP)?;
    set_encap(
        vm,
        sw,
        Some(EncapEntry::new(&rw, true, Kind::Srv6 { l2: true }, fib)),
    );
    let up = sluice_vnet::interface::set_mtu(vm, sw, 9216)
        .and_then(|_| sluice_vnet::interface::set_admin_state(vm, sw, true))
        .and_then(|_| sluice_vnet::interface::set_xconnect(vm, rx, sw));
    if let Err(e) = up {
        set_encap(vm, sw, None);
        sluice_vnet::loopback::delete_interface(vm, sw);
        return Err(e);
    }
    vm.ext_mut::<Srv6>()
        .l2_steers
        .push(L2Steer { rx, bsid, sw });
    Ok(())
}

/// The node's action for `b` (resolving tables and the shared FIB state).
fn action(vm: &mut Vlib, b: &Behavior, table_id: u32) -> VnetResult<Action> {
    Ok(match b {
        Behavior::End => Action::End(v6_fib(vm, table_id)?),
        Behavior::Dt4 { table } => Action::Dt(
            false,
            sluice_vnet::ip4::fib_index(vm, *table)
                .ok_or_else(|| sluice_vnet::routes::no_table(*table))?,
        ),
        Behavior::Dt6 { table } => Action::Dt(true, v6_fib(vm, *table)?),
        Behavior::Dx4 { sw, nh } => {
            sluice_vnet::interface::check(vm, *sw)?;
            let id = sluice_vnet::ip4::if_table_id(vm, sw.0);
            let fib = sluice_vnet::ip4::fib_index(vm, id).unwrap_or(0);
            let adj = sluice_vnet::ip4::neighbor_adjacency(vm, sw.0, *nh)?;
            let s = sluice_vnet::ip4::shared(vm)
                .ok_or_else(|| VnetError::System("ip4 not initialised".into()))?;
            Action::Dx {
                v6: false,
                adjs: s.adj.clone(),
                adj,
                fib,
            }
        }
        Behavior::EndX { sw, nh } => {
            sluice_vnet::interface::check(vm, *sw)?;
            let adj = sluice_vnet::ip6::neighbor_adjacency(vm, sw.0, *nh)?;
            let s = sluice_vnet::ip6::shared(vm)
                .ok_or_else(|| VnetError::System("ip6 not initialised".into()))?;
            Action::EndX {
                adjs: s.adj.clone(),
                adj,
                fib: v6_fib(vm, table_id)?,
            }
        }
        Behavior::Dx2 { sw } => {
            sluice_vnet::interface::check(vm, *sw)?;
            Action::Dx2(sw.0)
        }
        Behavior::Dx6 { sw, nh } => {
            sluice_vnet::interface::check(vm, *sw)?;
            let id = sluice_vnet::ip6::if_table_id(vm, sw.0);
            let fib = v6_fib(vm, id).unwrap_or(0);
            let adj = sluice_vnet::ip6::neighbor_adjacency(vm, sw.0, *nh)?;
            let s = sluice_vnet::ip6::shared(vm)
                .ok_or_else(|| VnetError::System("ip6 not initialised".into()))?;
            Action::Dx {
                v6: true,
                adjs: s.adj.clone(),
                adj,
                fib,
            }
        }
    })
}

/// `sr localsid address <a> behavior <b> [instance <n>]`: its interface,
/// `sr-localsid<instance>` (None: the lowest free instance).
pub fn localsid_add(
    vm: &mut Vlib,
    addr: Ipv6Addr,
    behavior: Behavior,
    table_id: u32,
    instance: Option<u32>,
) -> VnetResult<SwIfIndex> {
    let st = vm.ext_mut::<Srv6>();
    if st
        .sids
        .iter()
        .any(|s| s.addr == addr && s.table_id == table_id)
    {
        return Err(VnetError::Exists(format!("local SID {addr} exists")));
    }
    if st.policies.iter().any(|p| p.bsid == addr) {
        return Err(VnetError::Exists(format!("{addr} is a policy's bsid")));
    }
    v6_fib(vm, table_id)?;
    let act = action(vm, &behavior, table_id)?;
    let sw = p2p_interface(vm, "sr-localsid", instance, LOCALSID, 9216)?;
    // The SID's route hands its packets from `ip6-lookup` straight to `sr-localsid` (a
    // Node adjacency, VPP's localsid DPO): no `ip6-rewrite`, no `interface-output`.
    let direct = vm
        .registry
        .find(LOCALSID)
        .ok_or_else(|| VnetError::System(format!("{LOCALSID} missing")))
        .and_then(|n| sluice_vnet::set_lookup_node(vm, sw, true, n));
    if let Err(e) = direct {
        localsid_teardown(vm, sw);
        return Err(e);
    }
    let counters = vm
        .ext_mut::<sluice_vnet::Interfaces>()
        .get(sw)
        .map(|i| i.counters.clone());
    let adjs = sluice_vnet::ip6::shared(vm).map(|s| s.adj.clone());
    if let Some(n) = vm.registry.find(LOCALSID) {
        vm.foreach_thread(move |tg| {
            let tx = counters.clone().and_then(|c| IfRow::new(c, tg.thread()));
            if let Some(l) = tg.node_mut::<LocalSid>(n) {
                let act = act.clone();
                l.table.set(sw.0, Some(SidEntry { act, tx }));
                if l.adjs.is_none() {
                    l.adjs = adjs.clone();
                }
            }
        });
    }
    if let Err(e) = route(vm, true, IpAddr::V6(addr), 128, table_id, sw) {
        localsid_teardown(vm, sw);
        return Err(e);
    }
    vm.ext_mut::<Srv6>().sids.push(Sid {
        addr,
        behavior,
        table_id,
        sw,
    });
    Ok(sw)
}

fn localsid_teardown(vm: &mut Vlib, sw: SwIfIndex) {
    if let Some(n) = vm.registry.find(LOCALSID) {
        vm.foreach_thread(move |tg| {
            if let Some(l) = tg.node_mut::<LocalSid>(n) {
                l.table.set(sw.0, None);
            }
        });
    }
    sluice_vnet::loopback::delete_interface(vm, sw);
}

/// `sr localsid del address <a>`.
pub fn localsid_del(vm: &mut Vlib, addr: Ipv6Addr, table_id: u32) -> VnetResult {
    let st = vm.ext_mut::<Srv6>();
    let i = st
        .sids
        .iter()
        .position(|s| s.addr == addr && s.table_id == table_id)
        .ok_or_else(|| VnetError::NotFound(format!("no local SID {addr}")))?;
    let s = st.sids.remove(i);
    let _ = route(vm, false, IpAddr::V6(addr), 128, table_id, s.sw);
    localsid_teardown(vm, s.sw);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// CLI.

fn v6(w: &str, what: &str) -> Result<Ipv6Addr, CliError> {
    w.parse()
        .map_err(|_| CliError::new(format!("bad {what} address `{w}'")))
}

fn cli_source(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let _ = a.keyword("addr");
    let s = v6(&a.word("source address")?, "source")?;
    a.finish()?;
    set_source(vm, s)?;
    Ok(String::new())
}

fn cli_policy(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let add = if a.keyword("add") {
        true
    } else if a.keyword("del") {
        false
    } else {
        return Err(CliError::new("expected `add' or `del'"));
    };
    let (mut bsid, mut segs, mut table, mut insert) = (None, Vec::new(), 0, false);
    let mut instance = None;
    while !a.is_empty() {
        if a.keyword("instance") {
            instance = Some(a.u32("instance")?);
        } else if a.keyword("bsid") {
            bsid = Some(v6(&a.word("bsid")?, "bsid")?);
        } else if a.keyword("next") {
            segs.push(v6(&a.word("segment")?, "segment")?);
        } else if a.keyword("encap") {
            insert = false;
        } else if a.keyword("insert") {
            insert = true;
        } else if a.keyword("fib-table") {
            table = a.u32("fib-table")?;
        } else {
            a.finish()?;
        }
    }
    let bsid = bsid.ok_or_else(|| CliError::new("missing bsid <ip6>"))?;
    if !add {
        policy_del(vm, bsid)?;
        return Ok(String::new());
    }
    let sw = policy_add(vm, bsid, &segs, table, insert, instance)?;
    Ok(format!("{}\n", tunnel::if_name(vm, sw)))
}

fn cli_steer(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let add = !a.keyword("del");
    if a.keyword("l2") {
        return cli_steer_l2(vm, a, add);
    }
    if !a.keyword("l3") {
        let w = a.word("l2|l3")?;
        return Err(CliError::new(format!("expected `l2' or `l3', got `{w}'")));
    }
    let w = a.word("prefix")?;
    let (prefix, len) = match w.contains(':') {
        true => {
            let (p, l) = sluice_vnet::routes::parse_prefix::<Ipv6Addr>(&w, 128, "IPv6")?;
            (IpAddr::V6(p), l)
        }
        false => {
            let (p, l) = sluice_vnet::routes::parse_prefix::<Ipv4Addr>(&w, 32, "IPv4")?;
            (IpAddr::V4(p), l)
        }
    };
    let (mut bsid, mut table_id) = (None, 0);
    while !a.is_empty() {
        if a.keyword("via") {
            let _ = a.keyword("sr") && a.keyword("policy");
            let _ = a.keyword("sr_policy");
            if a.keyword("index") {
                let i = a.u32("policy index")? as usize;
                let b = vm.ext_mut::<Srv6>().policies.get(i).map(|p| p.bsid);
                bsid = Some(b.ok_or_else(|| CliError::new(format!("no policy index {i}")))?);
            } else if a.keyword("bsid") {
                bsid = Some(v6(&a.word("bsid")?, "bsid")?);
            } else {
                return Err(CliError::new("expected `via bsid <ip6>'"));
            }
        } else if a.keyword("fib-table") {
            table_id = a.u32("fib-table")?;
        } else {
            a.finish()?;
        }
    }
    let bsid = bsid.ok_or_else(|| CliError::new("missing via bsid <ip6>"))?;
    steer(
        vm,
        add,
        Steer {
            prefix,
            len,
            table_id,
            bsid,
        },
    )?;
    Ok(String::new())
}

fn cli_steer_l2(vm: &mut Vlib, a: &mut Args, add: bool) -> Result<String, CliError> {
    let rx = sluice_vnet::cli::interface_arg(vm, a)?;
    let (mut bsid, mut instance) = (None, None);
    while !a.is_empty() {
        if a.keyword("instance") {
            instance = Some(a.u32("instance")?);
        } else if a.keyword("via") {
            if !a.keyword("bsid") {
                return Err(CliError::new("expected `via bsid <ip6>'"));
            }
            bsid = Some(v6(&a.word("bsid")?, "bsid")?);
        } else {
            a.finish()?;
        }
    }
    let bsid = match (bsid, add) {
        (Some(b), _) => b,
        // `sr steer del l2 <if>`: the interface names the rule.
        (None, false) => Ipv6Addr::UNSPECIFIED,
        (None, true) => return Err(CliError::new("missing via bsid <ip6>")),
    };
    steer_l2(vm, add, rx, bsid, instance)?;
    Ok(String::new())
}

fn cli_localsid(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let add = !a.keyword("del");
    let (mut addr, mut behavior, mut table_id, mut instance) = (None, None, 0, None);
    while !a.is_empty() {
        if a.keyword("address") {
            addr = Some(v6(&a.word("SID")?, "SID")?);
        } else if a.keyword("behavior") {
            let w = a.word("behavior")?.to_ascii_lowercase();
            behavior = Some(match w.as_str() {
                "end" => Behavior::End,
                "end.x" => {
                    let sw = sluice_vnet::cli::interface_arg(vm, a)?;
                    let nh = sluice_vnet::routes::parse_addr(&a.word("next hop")?, "IPv6")?;
                    Behavior::EndX { sw, nh }
                }
                "end.dx2" => Behavior::Dx2 {
                    sw: sluice_vnet::cli::interface_arg(vm, a)?,
                },
                "end.dx4" => {
                    let sw = sluice_vnet::cli::interface_arg(vm, a)?;
                    let nh = sluice_vnet::routes::parse_addr(&a.word("next hop")?, "IPv4")?;
                    Behavior::Dx4 { sw, nh }
                }
                "end.dx6" => {
                    let sw = sluice_vnet::cli::interface_arg(vm, a)?;
                    let nh = sluice_vnet::routes::parse_addr(&a.word("next hop")?, "IPv6")?;
                    Behavior::Dx6 { sw, nh }
                }
                "end.dt4" => Behavior::Dt4 {
                    table: a.u32("table-id")?,
                },
                "end.dt6" => Behavior::Dt6 {
                    table: a.u32("table-id")?,
                },
                _ => {
                    return Err(CliError::new(format!(
                    "behavior `{w}' not supported (end, end.x, end.dx2, end.dx4, end.dx6, end.dt4, end.dt6)"
                )))
                }
            });
        } else if a.keyword("fib-table") {
            table_id = a.u32("fib-table")?;
        } else if add && a.keyword("instance") {
            instance = Some(a.u32("instance")?);
        } else {
            a.finish()?;
        }
    }
    let addr = addr.ok_or_else(|| CliError::new("missing address <ip6>"))?;
    if !add {
        localsid_del(vm, addr, table_id)?;
        return Ok(String::new());
    }
    let b = behavior.ok_or_else(|| CliError::new("missing behavior <behavior>"))?;
    let sw = localsid_add(vm, addr, b, table_id, instance)?;
    Ok(format!("{}\n", tunnel::if_name(vm, sw)))
}

fn behavior_text(vm: &mut Vlib, b: &Behavior) -> String {
    match b {
        Behavior::End => "end".into(),
        Behavior::EndX { sw, nh } => format!("end.x {} {nh}", tunnel::if_name(vm, *sw)),
        Behavior::Dx2 { sw } => format!("end.dx2 {}", tunnel::if_name(vm, *sw)),
        Behavior::Dx4 { sw, nh } => format!("end.dx4 {} {nh}", tunnel::if_name(vm, *sw)),
        Behavior::Dx6 { sw, nh } => format!("end.dx6 {} {nh}", tunnel::if_name(vm, *sw)),
        Behavior::Dt4 { table } => format!("end.dt4 {table}"),
        Behavior::Dt6 { table } => format!("end.dt6 {table}"),
    }
}

fn if_counter(vm: &mut Vlib, sw: SwIfIndex, c: usize) -> u64 {
    vm.ext_mut::<sluice_vnet::Interfaces>()
        .get(sw)
        .map_or(0, |i| i.counters.total(c))
}

fn cli_show_policies(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    let list = vm.ext_mut::<Srv6>().policies.clone();
    let mut out = String::from("SR policies:\n");
    for (i, p) in list.iter().enumerate() {
        let segs: Vec<String> = p.segs.iter().map(|s| s.to_string()).collect();
        out.push_str(&format!(
            "[{i}].-\tBSID: {}\n\tBehavior: {}\n\tType: Default\n\tFIB table: {}\n\
             \tSource: {}\n\tInterface: {}\n\tSegment Lists:\n\t[0].- < {} > weight: 1\n\
             \t{}: {} packets\n-----------\n",
            p.bsid,
            if p.insert {
                "SRH insertion"
            } else {
                "Encapsulation"
            },
            p.table_id,
            p.src.unwrap_or(Ipv6Addr::UNSPECIFIED),
            tunnel::if_name(vm, p.sw),
            segs.join(", "),
            if p.insert { "Inserted" } else { "Encapsulated" },
            if_counter(vm, p.sw, sluice_vnet::interface::counter::TX_PACKETS),
        ));
    }
    Ok(out)
}

fn cli_show_localsids(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    let list = vm.ext_mut::<Srv6>().sids.clone();
    let mut out = String::from("SRv6 - My LocalSID Table:\n=========================\n");
    for s in &list {
        use sluice_vnet::interface::counter as c;
        out.push_str(&format!(
            "\tAddress: \t{}/128\n\tBehavior: \t{}\n\tFIB table: \t{}\n\tInterface: \t{}\n\
             \tGood traffic: \t[{} packets : {} bytes]\n--------------------\n",
            s.addr,
            behavior_text(vm, &s.behavior),
            s.table_id,
            tunnel::if_name(vm, s.sw),
            if_counter(vm, s.sw, c::TX_PACKETS),
            if_counter(vm, s.sw, c::TX_BYTES),
        ));
    }
    Ok(out)
}

fn cli_show_steering(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    let mut out = String::from("SR steering policies:\nTraffic\t\tSR policy BSID\n");
    for s in &vm.ext_mut::<Srv6>().steers {
        out.push_str(&format!(
            "L3 {}/{} (table {})\t{}\n",
            s.prefix, s.len, s.table_id, s.bsid
        ));
    }
    let l2 = vm.ext_mut::<Srv6>().l2_steers.clone();
    for s in l2 {
        out.push_str(&format!("L2 {}\t{}\n", tunnel::if_name(vm, s.rx), s.bsid));
    }
    Ok(out)
}

fn cli_show_source(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    Ok(match vm.ext_mut::<Srv6>().source {
        Some(s) => format!("SR encaps source addr = {s}\n"),
        None => "SR encaps source addr not set\n".into(),
    })
}

/// The line recreating SRv6 interface `sw` (`show running-config`): the policy (after the
/// encaps source it was made with), the L2 steering rule or the local SID.
pub fn creator(vm: &mut Vlib, sw: SwIfIndex) -> Option<String> {
    let st = vm.ext_mut::<Srv6>();
    if let Some(p) = st.policies.iter().find(|p| p.sw == sw).cloned() {
        let mut s = match p.src {
            Some(src) => format!("set sr encaps source addr {src}\n"),
            None => String::new(),
        };
        s.push_str(&format!("sr policy add bsid {}", p.bsid));
        for g in &p.segs {
            s.push_str(&format!(" next {g}"));
        }
        s.push_str(if p.insert { " insert" } else { " encap" });
        if p.table_id != 0 {
            s.push_str(&format!(" fib-table {}", p.table_id));
        }
        // The instance keeps the name a replay gives (lines naming it follow).
        s.push_str(&format!(" instance {}", instance_of(vm, p.sw, "sr-policy")));
        return Some(s);
    }
    if let Some(l) = st.l2_steers.iter().find(|s| s.sw == sw).cloned() {
        return Some(format!(
            "sr steer l2 {} via bsid {} instance {}",
            tunnel::if_name(vm, l.rx),
            l.bsid,
            instance_of(vm, l.sw, "sr-l2-steer")
        ));
    }
    let sid = st.sids.iter().find(|s| s.sw == sw).cloned()?;
    let mut s = format!(
        "sr localsid address {} behavior {}",
        sid.addr,
        behavior_text(vm, &sid.behavior)
    );
    if sid.table_id != 0 {
        s.push_str(&format!(" fib-table {}", sid.table_id));
    }
    s.push_str(&format!(
        " instance {}",
        instance_of(vm, sid.sw, "sr-localsid")
    ));
    Some(s)
}

/// Whether `rx`'s cross-connect to `peer` is an L2 steering rule (`show running-config`:
/// its `sr steer l2` line makes it).
pub fn implied_xconnect(vm: &mut Vlib, rx: SwIfIndex, peer: SwIfIndex) -> bool {
    vm.ext_mut::<Srv6>()
        .l2_steers
        .iter()
        .any(|s| s.rx == rx && s.sw == peer)
}

/// Registers `sr-pl-rewrite-encaps` and `sr-localsid`.
pub fn register(b: &mut GraphBuilder) {
    b.register(
        NodeRegistration::new(ENCAP, NodeKind::Internal, |_| {
            Box::new(tunnel::Encap::default())
        })
        .nexts(&tunnel::ENCAP_NAMES6)
        .counters(tunnel::EncapCounter::DESCS),
    );
    b.register(
        NodeRegistration::new(INSERT, NodeKind::Internal, |_| {
            Box::new(PerPacket::new(Insert::default()))
        })
        .nexts(InsertNext::NAMES)
        .counters(InsertCounter::DESCS),
    );
    b.register(
        NodeRegistration::new(LOCALSID, NodeKind::Internal, |_| {
            Box::new(PerPacket::new(LocalSid::default()))
        })
        .nexts(SidNext::NAMES)
        .counters(SidCounter::DESCS),
    );
}

/// Registers the SRv6 CLI.
pub fn register_cli(t: &mut CommandTree<Vlib>) {
    t.add(
        "set sr encaps source",
        "set sr encaps source addr <ip6>",
        cli_source,
    );
    t.add(
        "sr policy",
        "sr policy add|del bsid <ip6> next <ip6> [next <ip6> ...] [encap|insert] [fib-table <id>] [instance <n>]",
        cli_policy,
    );
    t.add(
        "sr steer",
        "sr steer [del] l3 <prefix> via bsid <ip6> [fib-table <id>] | sr steer [del] l2 <if> via bsid <ip6> [instance <n>]",
        cli_steer,
    );
    t.add(
        "sr localsid",
        "sr localsid [del] address <ip6> behavior end|end.x <if> <ip6>|end.dx2 <if>|end.dx4 <if> <ip4>|end.dx6 <if> <ip6>|end.dt4 <table>|end.dt6 <table> [fib-table <id>] [instance <n>]",
        cli_localsid,
    );
    t.add("show sr policies", "show sr policies", cli_show_policies);
    t.add("show sr localsids", "show sr localsids", cli_show_localsids);
    t.add(
        "show sr steering-policies",
        "show sr steering-policies",
        cli_show_steering,
    );
    t.add(
        "show sr encaps source",
        "show sr encaps source addr",
        cli_show_source,
    );
}
