//! GTP-U (3GPP TS 29.281): IP over UDP port 2152, one point-to-point interface per
//! (underlay table, src, dst, TEID), IPv4 and IPv6 underlay.
//!
//! ```text
//! create gtpu tunnel src <a> dst <a> teid <n> [tteid <n>] [encap-vrf-id <id>]
//!                    [decap-next ip4|ip6|l2] [instance <n>] [del]
//! show gtpu tunnel
//! ```
//!
//! `teid` is the local TEID (what received G-PDUs carry), `tteid` the peer's (what sent
//! ones carry; default `teid`), as in VPP. `decap-next ip4|ip6` (the default; the inner
//! family is read from each packet) makes a point-to-point interface carrying IP;
//! `decap-next l2` an Ethernet interface carrying Ethernet frames (bridgeable, as VXLAN).
//!
//! Encap: `gtpu4-encap`/`gtpu6-encap`, the shared [`crate::tunnel::Encap`] node (outer IP +
//! UDP 2152 → 2152 + an 8-byte G-PDU header with the length filled per packet; IPv4 UDP
//! checksum 0, IPv6 computed).
//!
//! # `gtpu4-input` / `gtpu6-input` ([`GtpuInput`] in [`tunnel::DecapFrame`]: a frame at a time)
//! - uses: the outer IP header at `current_data` (dispatched by `ip4-local`/`ip6-local`
//!   for UDP port 2152); `ip.fib_index`.
//! - sets: G-PDU: strips outer IP/UDP/GTP-U headers (with the optional sequence number,
//!   N-PDU number and extension headers), puts an Ethernet header to the tunnel's MAC in
//!   front of the inner IP packet (a `decap-next l2` tunnel: the inner Ethernet frame as
//!   it is); `rx_if` = the tunnel; its rx counters. Echo Request:
//!   rewritten in place into the Echo Response (addresses and ports swapped, the sequence
//!   number kept, a Recovery IE), `LOCALLY_ORIGINATED`. G-PDU for an unknown TEID:
//!   rewritten into an Error Indication (TEID Data I, GTP-U Peer Address) to the sender,
//!   rate-limited like ICMP errors. Neither is sent for a packet to a multicast address
//!   (its source would be the group).
//! - next: `drop` (`error-drop`); `ethernet-input` (an L2 tunnel's frames; an L3 tunnel's
//!   packets when it is down, in L2 mode, redirected or the packet is traced); `ip4-input`
//!   / `ip6-input` (an up L3 tunnel's packets, with `ip.fib_index` = the tunnel's table and
//!   the Ethernet header stripped as `ethernet-input` would: [`tunnel::decap_l3`]);
//!   `lookup` (`ip4-lookup`/`ip6-lookup`: the replies).
//! - counters: `decapsulated` (info), `echo_replies` (info), `error_indications_sent`
//!   (info), `truncated`, `bad_udp_length`, `bad_version` (version ≠ 1 or PT = 0: GTP'),
//!   `bad_length` (GTP length disagrees with the UDP length), `bad_extension` (extension
//!   header of length 0 or past the packet, or more than 8), `ip6_extension`,
//!   `no_such_tunnel`, `bad_inner` (G-PDU payload neither IPv4 nor IPv6),
//!   `signalling` (Echo Response, Error Indication, End Marker received: consumed),
//!   `unsupported_type`, `echo_to_group` (Echo Request to a multicast address: dropped).

use crate::tunnel::{self, AddArgs, DecapEntry, DecapKey, DecapProto, Kind, Proto, Verdict};
use sluice_buffer::flags::LOCALLY_ORIGINATED;
use sluice_buffer::Buffer;
use sluice_cli::{Args, CliError, CommandTree};
use sluice_graph::{Cx, GraphBuilder, Next, Vlib};
use sluice_vnet::error::{VnetError, VnetResult};
use sluice_vnet::ip_local::LocalKey;
use sluice_vnet::SwIfIndex;
use sluice_wire::checksum;
use std::collections::HashMap;
use std::net::IpAddr;

/// Node names.
pub const ENCAP4: &str = "gtpu4-encap";
/// IPv6 underlay encap.
pub const ENCAP6: &str = "gtpu6-encap";
/// IPv4 underlay decap.
pub const INPUT4: &str = "gtpu4-input";
/// IPv6 underlay decap.
pub const INPUT6: &str = "gtpu6-input";

/// Message types (TS 29.281 §6.1).
pub mod msg {
    /// Echo Request.
    pub const ECHO_REQUEST: u8 = 1;
    /// Echo Response.
    pub const ECHO_RESPONSE: u8 = 2;
    /// Error Indication.
    pub const ERROR_INDICATION: u8 = 26;
    /// End Marker.
    pub const END_MARKER: u8 = 254;
    /// G-PDU.
    pub const G_PDU: u8 = 255;
}

/// A parsed GTP-U header.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Gtp {
    /// Message type.
    pub mtype: u8,
    /// TEID.
    pub teid: u32,
    /// Header length including the optional fields and extension headers.
    pub hdr_len: usize,
    /// Sequence number (0 when the S flag is clear).
    pub seq: u16,
}

/// Why a GTP-U header is refused.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum GtpError {
    /// Shorter than the header.
    Truncated,
    /// Version ≠ 1 or protocol type 0 (GTP').
    BadVersion,
    /// The length field disagrees with the datagram.
    BadLength,
    /// An extension header of length 0, past the packet, or more than 8 of them.
    BadExtension,
}

/// Parses the GTP-U header at the start of UDP payload `g` (its whole length).
pub fn parse(g: &[u8]) -> Result<Gtp, GtpError> {
    let h = g.first_chunk::<8>().ok_or(GtpError::Truncated)?;
    let flags = h[0];
    if flags >> 5 != 1 || flags & 0x10 == 0 {
        return Err(GtpError::BadVersion);
    }
    let len = u16::from_be_bytes([h[2], h[3]]) as usize;
    if len + 8 != g.len() {
        return Err(GtpError::BadLength);
    }
    let teid = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
    let mut hdr_len = 8;
    let mut seq = 0;
    if flags & 0x07 != 0 {
        let o = g.get(8..12).ok_or(GtpError::Truncated)?;
        hdr_len = 12;
        if flags & 0x02 != 0 {
            seq = u16::from_be_bytes([o[0], o[1]]);
        }
        if flags & 0x04 != 0 {
            let mut next = o[3];
            let mut n = 0;
            while next != 0 {
                n += 1;
                let l = *g.get(hdr_len).ok_or(GtpError::Truncated)? as usize * 4;
                if l == 0 || n > 8 {
                    return Err(GtpError::BadExtension);
                }
                next = *g.get(hdr_len + l - 1).ok_or(GtpError::BadExtension)?;
                hdr_len += l;
            }
        }
    }
    Ok(Gtp {
        mtype: h[1],
        teid,
        hdr_len,
        seq,
    })
}

/// The common G-PDU with one compare of the first word: flags 0x30 (version 1, GTP, no
/// E/S/PN), type 255 and length `glen - 8`, where `g` is the start (at least the first 8
/// bytes, at most all) of a `glen`-byte GTP-U message, `glen` at most 65535. Its TEID (the
/// inner packet 8 bytes in), or `None` for anything else, which [`parse`] decides: this
/// accepts only what `parse` accepts with that TEID and an 8-byte header.
#[inline(always)]
pub fn plain_gpdu(g: &[u8], glen: usize) -> Option<u32> {
    debug_assert!(g.len() <= glen && glen <= 0xffff, "{} of {glen}", g.len());
    let h = g.first_chunk::<8>()?;
    let w = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
    // `glen >= 8` here (`g.len() <= glen`): the subtraction does not wrap.
    (w == 0x30ff_0000 | ((glen as u32).wrapping_sub(8) & 0xffff))
        .then(|| u32::from_be_bytes([h[4], h[5], h[6], h[7]]))
}

sluice_graph::arcs! {
    /// Next arcs of `gtpu4-input` (`gtpu6-input`: [`NAMES6`]).
    pub enum GtpNext {
        /// Drops and consumed signalling.
        Drop => "error-drop",
        /// Decapsulated G-PDUs (the tunnels' decap next).
        Ethernet => "ethernet-input",
        /// Echo Responses and Error Indications sent.
        Lookup => "ip4-lookup",
        /// Decapsulated IPv4 G-PDUs of an up L3 tunnel ([`tunnel::decap_l3`]).
        Ip4Input => "ip4-input",
        /// Decapsulated IPv6 G-PDUs of an up L3 tunnel.
        Ip6Input => "ip6-input",
    }
}

/// Arc names of `gtpu6-input`, in [`GtpNext`] order.
pub const NAMES6: [&str; 5] = [
    "error-drop",
    "ethernet-input",
    "ip6-lookup",
    "ip4-input",
    "ip6-input",
];

sluice_graph::counters! {
    /// Counters of the decap nodes.
    pub enum GtpCounter {
        /// Decapsulated.
        Decapsulated => info("decapsulated", "G-PDUs decapsulated"),
        /// Echo replies.
        EchoReplies => info("echo_replies", "Echo Requests answered"),
        /// Error indications sent.
        ErrorIndicationsSent => info("error_indications_sent", "Error Indications sent for unknown TEIDs"),
        /// Truncated.
        Truncated => error("truncated", "shorter than its headers"),
        /// UDP length.
        BadUdpLength => error("bad_udp_length", "UDP length disagrees with the IP length"),
        /// Version / PT.
        BadVersion => error("bad_version", "GTP version not 1 or protocol type GTP'"),
        /// GTP length.
        BadLength => error("bad_length", "GTP length disagrees with the UDP length"),
        /// Extension headers.
        BadExtension => error("bad_extension", "malformed GTP extension header"),
        /// IPv6 extension headers.
        Ip6Extension => error("ip6_extension", "IPv6 extension headers before UDP"),
        /// Unknown TEID.
        NoSuchTunnel => error("no_such_tunnel", "no tunnel for (src, dst, TEID)"),
        /// Inner.
        BadInner => error("bad_inner", "G-PDU payload is neither IPv4 nor IPv6"),
        /// Consumed signalling.
        Signalling => info("signalling", "Echo Response / Error Indication / End Marker received"),
        /// Other types.
        UnsupportedType => error("unsupported_type", "GTP-U message type not supported"),
        /// Echo Request to a multicast address.
        EchoToGroup => error("echo_to_group", "Echo Request to a multicast address: not answered"),
    }
}

/// GTP-U's decap logic; `V6` selects the underlay family (the node is
/// [`tunnel::DecapFrame`] of it).
#[derive(Default)]
pub struct GtpuInput<const V6: bool> {
    /// Error Indications: 1000 per second, bursts of 100, per thread.
    pub limit: sluice_vnet::ratelimit::TokenBucket,
}

/// Rewrites the request in `b` (outer IP header `ipl` bytes, then UDP) into a reply to its
/// sender carrying GTP-U message `body` (header included): addresses and UDP ports
/// swapped, lengths, checksums. `false` when the buffer cannot hold it.
fn reply_in_place<const V6: bool>(b: &mut Buffer<'_>, ipl: usize, body: &[u8]) -> bool {
    let total = ipl + 8 + body.len();
    if b.chain_rest_len() != 0 || !b.set_len(total) {
        return false;
    }
    let d = b.data_mut();
    d[ipl + 8..].copy_from_slice(body);
    let sport = [d[ipl], d[ipl + 1]];
    d[ipl..ipl + 2].copy_from_slice(&tunnel::GTPU_PORT.to_be_bytes());
    d[ipl + 2..ipl + 4].copy_from_slice(&sport);
    d[ipl + 4..ipl + 6].copy_from_slice(&((8 + body.len()) as u16).to_be_bytes());
    d[ipl + 6..ipl + 8].fill(0);
    if V6 {
        let (s, t) = d[8..40].split_at_mut(16);
        s.swap_with_slice(t);
        d[4..6].copy_from_slice(&((total - 40) as u16).to_be_bytes());
        d[7] = 64;
        tunnel::set_udp6_checksum(d);
    } else {
        let (s, t) = d[12..20].split_at_mut(4);
        s.swap_with_slice(t);
        d[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        d[6..9].copy_from_slice(&[0, 0, 64]);
        d[10..12].fill(0);
        let c = !checksum::sum(&d[..ipl]);
        d[10..12].copy_from_slice(&c.to_be_bytes());
    }
    b.hdr.flags |= LOCALLY_ORIGINATED;
    true
}

impl<const V6: bool> DecapProto for GtpuInput<V6> {
    /// Outer IP header length; offset of the inner packet.
    type Meta = (u16, u16);
    const IP6: bool = V6;
    type Counter = GtpCounter;
    const DROP: Next = GtpNext::Drop.next();
    const DECAPSULATED: GtpCounter = GtpCounter::Decapsulated;
    const NO_SUCH_TUNNEL: GtpCounter = GtpCounter::NoSuchTunnel;
    const L3_DIRECT: Option<tunnel::L3Arcs> = Some(tunnel::L3Arcs {
        eth: GtpNext::Ethernet.next(),
        ip4: GtpNext::Ip4Input.next(),
        ip6: GtpNext::Ip6Input.next(),
    });
    #[inline(always)]
    fn parse(
        &mut self,
        cx: &mut Cx,
        b: &mut Buffer<'_>,
    ) -> Result<(DecapKey, (u16, u16)), Verdict<GtpCounter>> {
        let d = b.data();
        let (ipl, src, dst) = match tunnel::outer::<V6>(d, 17) {
            Ok(x) => x,
            Err(0) => return Err(GtpCounter::Truncated.into()),
            Err(_) => return Err(GtpCounter::Ip6Extension.into()),
        };
        let Some(u) = d.get(ipl..ipl + 8) else {
            return Err(GtpCounter::Truncated.into());
        };
        let ulen = u16::from_be_bytes([u[4], u[5]]) as usize;
        if ulen != b.total_len() - ipl || ulen < 8 {
            return Err(GtpCounter::BadUdpLength.into());
        }
        // The GTP-U header must be in the first buffer; the payload may be chained.
        let g = &d[ipl + 8..];
        let glen = ulen - 8;
        // The common case first (`g` is at most `glen` bytes: the first buffer's part).
        if let Some(teid) = plain_gpdu(g, glen) {
            let key = DecapKey {
                fib: b.hdr.ip.fib_index,
                key: teid,
                sub: 0,
                src,
                dst,
            };
            return Ok((key, (ipl as u16, (ipl + 16) as u16)));
        }
        let parsed = if g.len() == glen {
            parse(g)
        } else {
            parse_prefix(&g[..g.len().min(64)], glen)
        };
        let h = match parsed {
            Ok(h) => h,
            Err(e) => {
                let c = match e {
                    GtpError::Truncated => GtpCounter::Truncated,
                    GtpError::BadVersion => GtpCounter::BadVersion,
                    GtpError::BadLength => GtpCounter::BadLength,
                    GtpError::BadExtension => GtpCounter::BadExtension,
                };
                return Err(c.into());
            }
        };
        match h.mtype {
            msg::G_PDU => {}
            // A reply's source would be the group: a request to one is not answered.
            msg::ECHO_REQUEST if tunnel::is_group::<V6>(dst) => {
                return Err(GtpCounter::EchoToGroup.into());
            }
            msg::ECHO_REQUEST => {
                // TS 29.281 §7.2.2: the sequence number copied, a Recovery IE (restart
                // counter 0).
                let s = h.seq.to_be_bytes();
                let body = [
                    0x32,
                    msg::ECHO_RESPONSE,
                    0,
                    6,
                    0,
                    0,
                    0,
                    0,
                    s[0],
                    s[1],
                    0,
                    0,
                    14,
                    0,
                ];
                if !reply_in_place::<V6>(b, ipl, &body) {
                    return Err(GtpCounter::Truncated.into());
                }
                cx.count(GtpCounter::EchoReplies, 1);
                return Err(Verdict::To(GtpNext::Lookup.into()));
            }
            msg::ECHO_RESPONSE | msg::ERROR_INDICATION | msg::END_MARKER => {
                return Err(GtpCounter::Signalling.into());
            }
            _ => return Err(GtpCounter::UnsupportedType.into()),
        }
        let key = DecapKey {
            fib: b.hdr.ip.fib_index,
            key: h.teid,
            sub: 0,
            src,
            dst,
        };
        Ok((key, (ipl as u16, (ipl + 8 + h.hdr_len) as u16)))
    }
    #[inline(always)]
    fn miss(
        &mut self,
        cx: &mut Cx,
        b: &mut Buffer<'_>,
        k: &DecapKey,
        (ipl, _): (u16, u16),
    ) -> Verdict<GtpCounter> {
        // TS 29.281 §7.3.1: an Error Indication with the TEID and our address (none for a
        // G-PDU to a group: the group is not our address).
        if tunnel::is_group::<V6>(k.dst) || !self.limit.ready(cx) {
            return GtpCounter::NoSuchTunnel.into();
        }
        let t = k.key.to_be_bytes();
        let mut body = [0u8; 12 + 5 + 3 + 16];
        body[..2].copy_from_slice(&[0x32, msg::ERROR_INDICATION]);
        body[12..17].copy_from_slice(&[16, t[0], t[1], t[2], t[3]]);
        let all = k.dst.to_be_bytes();
        let me = if V6 { &all[..] } else { &all[12..] };
        body[17..20].copy_from_slice(&[133, 0, me.len() as u8]);
        body[20..20 + me.len()].copy_from_slice(me);
        let n = 20 + me.len();
        body[2..4].copy_from_slice(&((n - 8) as u16).to_be_bytes());
        if !reply_in_place::<V6>(b, ipl as usize, &body[..n]) {
            return GtpCounter::NoSuchTunnel.into();
        }
        self.limit.take();
        // Counted as a drop reason too: the G-PDU itself was not delivered.
        cx.count(GtpCounter::NoSuchTunnel, 1);
        cx.count(GtpCounter::ErrorIndicationsSent, 1);
        Verdict::To(GtpNext::Lookup.into())
    }
    #[inline(always)]
    fn finish(
        &mut self,
        b: &mut Buffer<'_>,
        (_, off): (u16, u16),
        e: &DecapEntry,
        direct: Option<tunnel::L3Direct>,
        rx: &mut tunnel::RxSum,
    ) -> Result<Next, GtpCounter> {
        let off = off as usize;
        let d = b.data();
        if e.l2() {
            // Ethernet inside: to `ethernet-input` on the tunnel interface (bridged or
            // routed), as VXLAN.
            if d.len() < off + 14 {
                return Err(GtpCounter::Truncated);
            }
            return Ok(tunnel::decap_to(b, off, e, rx));
        }
        let et = match d.get(off).map(|v| v >> 4) {
            Some(4) => 0x0800,
            Some(6) => 0x86dd,
            None => return Err(GtpCounter::Truncated),
            _ => return Err(GtpCounter::BadInner),
        };
        Ok(tunnel::decap_l3(b, off, e, et, direct, rx))
    }
}

/// [`parse`] of a header whose datagram (`glen` bytes) continues past `view`.
fn parse_prefix(view: &[u8], glen: usize) -> Result<Gtp, GtpError> {
    let h = view.first_chunk::<8>().ok_or(GtpError::Truncated)?;
    if u16::from_be_bytes([h[2], h[3]]) as usize + 8 != glen {
        return Err(GtpError::BadLength);
    }
    // Parse as if the view were the whole datagram: patch the length it carries.
    let mut v = [0u8; 64];
    let n = view.len();
    v[..n].copy_from_slice(view);
    v[2..4].copy_from_slice(&((n - 8) as u16).to_be_bytes());
    parse(&v[..n])
}

/// How GTP-U makes its tunnels.
pub static PROTO: Proto = Proto {
    prefix: "gtpu_tunnel",
    driver: "gtpu",
    encap: [ENCAP4, ENCAP6],
    decap: [INPUT4, INPUT6],
    table_of: [
        tunnel::table_of::<GtpuInput<false>>,
        tunnel::table_of::<GtpuInput<true>>,
    ],
    local: &[LocalKey::UdpPort(tunnel::GTPU_PORT)],
    local_groups: false,
    default_next: "ethernet-input",
};

/// Registers the four nodes.
pub fn register(b: &mut GraphBuilder) {
    tunnel::register_encap(b, ENCAP4, ENCAP6);
    tunnel::register_decap::<GtpuInput<false>, GtpuInput<true>>(
        b,
        [INPUT4, INPUT6],
        [GtpNext::NAMES, &NAMES6],
        GtpCounter::DESCS,
    );
}

/// The outer headers of a GTP-U tunnel: IP, UDP 2152 → 2152, a G-PDU header (flags 0x30:
/// version 1, PT 1, no optional fields) with TEID `tteid`.
pub fn rewrite(src: IpAddr, dst: IpAddr, tteid: u32) -> Vec<u8> {
    let mut rw = Vec::with_capacity(56);
    tunnel::outer_ip(src, dst, 17, &mut rw);
    let p = tunnel::GTPU_PORT.to_be_bytes();
    rw.extend_from_slice(&[p[0], p[1], p[0], p[1], 0, 0, 0, 0]);
    rw.extend_from_slice(&[0x30, msg::G_PDU, 0, 0]);
    rw.extend_from_slice(&tteid.to_be_bytes());
    rw
}

/// What `create gtpu tunnel` asks for.
#[derive(Clone, Debug)]
pub struct GtpuArgs {
    /// Add or delete.
    pub is_add: bool,
    /// Local address.
    pub src: IpAddr,
    /// Remote address.
    pub dst: IpAddr,
    /// Local TEID (received G-PDUs).
    pub teid: u32,
    /// Remote TEID (sent G-PDUs).
    pub tteid: u32,
    /// Underlay table id.
    pub encap_vrf_id: u32,
    /// Name instance.
    pub instance: Option<u32>,
    /// What the decapsulated packets are.
    pub decap_next: DecapNext,
}

/// `decap-next`: what a tunnel's G-PDUs carry.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum DecapNext {
    /// IPv4 or IPv6, read from each packet's version (`ip4`, `ip6`: VPP's names).
    #[default]
    Ip,
    /// Ethernet frames (`l2`).
    L2,
}

impl DecapNext {
    /// Parses `ip4`, `ip6` or `l2` (the CLI's and the API's word).
    pub fn parse(w: &str) -> VnetResult<DecapNext> {
        match w {
            "ip4" | "ip6" => Ok(DecapNext::Ip),
            "l2" => Ok(DecapNext::L2),
            _ => Err(VnetError::invalid(format!(
                "decap-next `{w}': expected ip4, ip6 or l2"
            ))),
        }
    }

    /// The word `show` and the API give back.
    pub fn name(self) -> &'static str {
        match self {
            DecapNext::Ip => "ip4",
            DecapNext::L2 => "l2",
        }
    }
}

/// Per-tunnel GTP-U details the shared tunnel record does not hold (a `Vlib` extension):
/// sw_if_index → tteid.
#[derive(Default)]
pub struct GtpuTteids(pub HashMap<u32, u32>);

/// One GTP-U tunnel as `show gtpu tunnel`, the API dump and `show running-config` see it.
#[derive(Clone, Debug)]
pub struct GtpuTunnel {
    /// Index in the tunnel table (`show`'s `[i]`).
    pub index: usize,
    /// Interface.
    pub sw_if: SwIfIndex,
    /// Name instance.
    pub instance: u32,
    /// Local address.
    pub src: IpAddr,
    /// Remote address.
    pub dst: IpAddr,
    /// Local TEID.
    pub teid: u32,
    /// Remote TEID.
    pub tteid: u32,
    /// Underlay table id.
    pub encap_vrf_id: u32,
    /// What its G-PDUs carry.
    pub decap_next: DecapNext,
}

/// Every GTP-U tunnel.
pub fn tunnels(vm: &mut Vlib) -> Vec<GtpuTunnel> {
    let tteids = std::mem::take(&mut vm.ext_mut::<GtpuTteids>().0);
    let list = vm
        .ext_mut::<tunnel::Tunnels>()
        .iter_kind(|k| matches!(k, Kind::Gtpu { .. }))
        .map(|(index, t)| {
            let tteid = tteids.get(&t.sw_if.0).copied().unwrap_or(t.key);
            let decap_next = match t.kind {
                Kind::Gtpu { l2: true } => DecapNext::L2,
                _ => DecapNext::Ip,
            };
            GtpuTunnel {
                index,
                sw_if: t.sw_if,
                instance: t.instance,
                src: t.src,
                dst: t.dst,
                teid: t.key,
                tteid,
                encap_vrf_id: t.table_id,
                decap_next,
            }
        })
        .collect();
    vm.ext_mut::<GtpuTteids>().0 = tteids;
    list
}

/// Creates or deletes a GTP-U tunnel; its interface.
pub fn add_del(vm: &mut Vlib, a: &GtpuArgs) -> VnetResult<SwIfIndex> {
    let args = AddArgs {
        kind: Kind::Gtpu {
            l2: a.decap_next == DecapNext::L2,
        },
        src: a.src,
        dst: a.dst,
        key: a.teid,
        table_id: a.encap_vrf_id,
        instance: a.instance,
        decap_next: None,
        mcast_if: None,
    };
    if a.is_add {
        tunnel::check_endpoints(a.src, a.dst)?;
        let sw = tunnel::add(vm, &PROTO, &args, &rewrite(a.src, a.dst, a.tteid))?;
        vm.ext_mut::<GtpuTteids>().0.insert(sw.0, a.tteid);
        Ok(sw)
    } else {
        let sw = tunnel::del(vm, &PROTO, &args)?;
        vm.ext_mut::<GtpuTteids>().0.remove(&sw.0);
        Ok(sw)
    }
}

fn cli_create(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let (mut src, mut dst, mut teid, mut tteid) = (None, None, None, None);
    let mut r = GtpuArgs {
        is_add: true,
        src: IpAddr::from([0, 0, 0, 0]),
        dst: IpAddr::from([0, 0, 0, 0]),
        teid: 0,
        tteid: 0,
        encap_vrf_id: 0,
        instance: None,
        decap_next: DecapNext::Ip,
    };
    while !a.is_empty() {
        if a.keyword("src") {
            src = Some(tunnel::parse_addr(&a.word("src address")?, "src")?);
        } else if a.keyword("dst") {
            dst = Some(tunnel::parse_addr(&a.word("dst address")?, "dst")?);
        } else if a.keyword("teid") {
            teid = Some(a.u32("teid")?);
        } else if a.keyword("tteid") {
            tteid = Some(a.u32("tteid")?);
        } else if a.keyword("instance") {
            r.instance = Some(a.u32("instance")?);
        } else if a.keyword("encap-vrf-id") {
            r.encap_vrf_id = a.u32("encap-vrf-id")?;
        } else if a.keyword("decap-next") {
            r.decap_next = DecapNext::parse(&a.word("decap-next")?.to_ascii_lowercase())?;
        } else if a.keyword("del") {
            r.is_add = false;
        } else {
            a.finish()?;
        }
    }
    r.src = src.ok_or_else(|| CliError::new("missing src <address>"))?;
    r.dst = dst.ok_or_else(|| CliError::new("missing dst <address>"))?;
    r.teid = teid.ok_or_else(|| CliError::new("missing teid <n>"))?;
    r.tteid = tteid.unwrap_or(r.teid);
    let sw = add_del(vm, &r)?;
    if !r.is_add {
        return Ok(String::new());
    }
    Ok(format!("{}\n", tunnel::if_name(vm, sw)))
}

fn cli_show(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    let mut out = String::new();
    for t in tunnels(vm) {
        out.push_str(&format!(
            "[{}] src {} dst {} teid {} tteid {} encap-vrf-id {} sw-if-idx {} instance {} decap-next {}\n",
            t.index,
            t.src,
            t.dst,
            t.teid,
            t.tteid,
            t.encap_vrf_id,
            t.sw_if.0,
            t.instance,
            t.decap_next.name(),
        ));
    }
    if out.is_empty() {
        out.push_str("No gtpu tunnels configured...\n");
    }
    Ok(out)
}

/// The `create gtpu tunnel` line recreating `sw` (`show running-config`).
pub fn creator(vm: &mut Vlib, sw: SwIfIndex) -> Option<String> {
    let t = tunnels(vm).into_iter().find(|t| t.sw_if == sw)?;
    let mut s = format!(
        "create gtpu tunnel src {} dst {} teid {} tteid {} instance {}",
        t.src, t.dst, t.teid, t.tteid, t.instance
    );
    if t.encap_vrf_id != 0 {
        s.push_str(&format!(" encap-vrf-id {}", t.encap_vrf_id));
    }
    if t.decap_next != DecapNext::Ip {
        s.push_str(&format!(" decap-next {}", t.decap_next.name()));
    }
    Some(s)
}

/// Registers the GTP-U CLI.
pub fn register_cli(t: &mut CommandTree<Vlib>) {
    t.add(
        "create gtpu tunnel",
        "create gtpu tunnel src <addr> dst <addr> teid <n> [tteid <n>] [encap-vrf-id <id>] [decap-next ip4|ip6|l2] [instance <n>] [del]",
        cli_create,
    );
    t.add("show gtpu tunnel", "show gtpu tunnel", cli_show);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-compare check accepts only what the general parser accepts, with the same
    /// TEID and inner offset: every flag byte, the length field one short, right and one
    /// over, a few message types, with and without 4 bytes of optional fields.
    #[test]
    fn plain_gpdu_accepts_only_what_parse_accepts() {
        let types = [
            msg::G_PDU,
            msg::ECHO_REQUEST,
            msg::ECHO_RESPONSE,
            msg::ERROR_INDICATION,
            msg::END_MARKER,
            0,
        ];
        let mut accepted = 0;
        for flags in 0..=255u8 {
            for &mtype in &types {
                for payload in [0usize, 4, 40] {
                    let glen = 8 + payload;
                    let l = payload as u16;
                    for len in [l.wrapping_sub(1), l, l + 1] {
                        let mut g = vec![flags, mtype];
                        g.extend_from_slice(&len.to_be_bytes());
                        g.extend_from_slice(&0x1234_5678u32.to_be_bytes());
                        g.extend((0..payload).map(|i| i as u8));
                        let fast = plain_gpdu(&g, glen);
                        let full = parse(&g);
                        if let Some(teid) = fast {
                            accepted += 1;
                            let h = full.unwrap_or_else(|e| {
                                panic!("{flags:#x} {mtype} {len}/{payload}: parse {e:?}")
                            });
                            assert_eq!((h.mtype, h.teid, h.hdr_len), (msg::G_PDU, teid, 8));
                        } else {
                            // The common case (what the fast check is for) is not missed.
                            let plain = flags == 0x30 && mtype == msg::G_PDU && len == l;
                            assert!(!plain, "{flags:#x} {mtype} {len}/{payload}");
                        }
                        // The first buffer's part only (a chained payload).
                        assert_eq!(plain_gpdu(&g[..8], glen), fast);
                    }
                }
            }
        }
        assert_eq!(accepted, 3);
    }
}
