//! VXLAN (RFC 7348): Ethernet over UDP port 4789, IPv4 and IPv6 underlay.
//!
//! ```text
//! create vxlan tunnel src <a> {dst <a> | group <mcast> <interface>} vni <n> [instance <n>]
//!                     [decap-next l2|node <name>] [encap-vrf-id <id>] [del]
//! show vxlan tunnel
//! ```
//!
//! A tunnel to a multicast `group` (IPv4 or IPv6) floods: in a bridge domain it takes the
//! flooded frames (and the unicast ones learned behind it) and sends them to the group out
//! of `<interface>` (the group's adjacency, no lookup); it receives from any source what
//! is sent to the group with its VNI on `<interface>` only (as VPP's mfib accepts a group
//! only there): the decap key of a packet to a group has the rx interface in place of the
//! source ([`tunnel::group_source`]), and so has the tunnel's entry
//! ([`tunnel::Tunnel::table_key`]). The packet reaches the decap node through a /32 or
//! /128 `via local` route of the group in the underlay table.
//!
//! Encap: `vxlan4-encap`/`vxlan6-encap`, the shared [`crate::tunnel::Encap`] node (outer
//! IP + UDP + VXLAN header precomputed per tunnel; UDP source port 49152 + 14 bits of the
//! inner flow hash; IPv6 UDP checksum computed).
//!
//! # `vxlan4-input` / `vxlan6-input` ([`VxlanInput`] in [`tunnel::DecapFrame`])
//! A frame at a time: every packet parsed, the frame's keys looked up together (the
//! entries prefetched, then each hit's counters row, and its interface record unless the
//! frame goes to `l2-input`), then every packet decapsulated. The tunnel's L2 mode (up,
//! cross-connect peer or bridge domain, no input redirect) is read from its decap entry,
//! which vnet's interface-change hook keeps current ([`tunnel::if_changed`]).
//! - uses: the outer IP header at `current_data` (validated by `ip4-input`/`ip6-input`,
//!   dispatched by `ip4-local`/`ip6-local` for UDP port 4789); `ip.fib_index`.
//! - sets: strips outer IP/UDP/VXLAN headers; `rx_if` = the tunnel; the tunnel's rx
//!   counters; for `l2-input`: `l2.l2_hdr_offset`, `tx_if` / `l2.bd_index`.
//! - next: `drop` (`error-drop`); the tunnel's decap next: `decap-next l2` (the default):
//!   `l2-input` when the tunnel is cross-connected or in a bridge domain, up, without an
//!   input redirect, the frame untagged and no `l2-input` feature on the tunnel
//!   ([`tunnel::l2_direct`] sets `l2.l2_hdr_offset` and `tx_if` or
//!   `l2.bd_index` as `ethernet-input` would), else `ethernet-input`; or the node named by
//!   `decap-next node <name>` (arc added at runtime).
//! - counters: `decapsulated` (info), `truncated` (shorter than outer headers + an Ethernet
//!   header), `bad_udp_length` (UDP length field disagrees with the IP length),
//!   `bad_flags` (I flag clear, RFC 7348 §5), `ip6_extension` (IPv6 extension headers
//!   before UDP: not supported), `no_such_tunnel` (unknown (src, dst, VNI) in the table),
//!   `no_group_tunnel` (to a multicast group: no tunnel of the group and VNI whose
//!   `mcast` interface is the rx interface).

use crate::tunnel::{self, AddArgs, DecapEntry, DecapKey, DecapProto, Kind, Proto, Verdict};
use sluice_buffer::Buffer;
use sluice_cli::{Args, CliError, CommandTree};
use sluice_graph::{Cx, GraphBuilder, Next, Vlib};
use sluice_vnet::error::{VnetError, VnetResult};
use sluice_vnet::ip_local::LocalKey;
use sluice_vnet::SwIfIndex;
use std::net::IpAddr;

/// Node names.
pub const ENCAP4: &str = "vxlan4-encap";
/// IPv6 underlay encap.
pub const ENCAP6: &str = "vxlan6-encap";
/// IPv4 underlay decap.
pub const INPUT4: &str = "vxlan4-input";
/// IPv6 underlay decap.
pub const INPUT6: &str = "vxlan6-input";

/// Outer header bytes after the IP header: UDP (8) + VXLAN (8).
const UDP_VXLAN: usize = 16;

sluice_graph::arcs! {
    /// Next arcs of the decap nodes (the tunnels' decap nexts are added at runtime).
    pub enum VxlanNext {
        /// Drops.
        Drop => "error-drop",
        /// `decap-next l2` (the default) on an L3 tunnel, or what `l2-input` cannot take
        /// straight from the decap node (see `l2-input` below).
        EthernetInput => "ethernet-input",
        /// `decap-next l2` on a tunnel in a bridge domain or cross-connected.
        L2Input => sluice_vnet::l2::L2_INPUT,
    }
}

sluice_graph::counters! {
    /// Counters of the decap nodes.
    pub enum VxlanCounter {
        /// Decapsulated.
        Decapsulated => info("decapsulated", "packets decapsulated"),
        /// Truncated.
        Truncated => error("truncated", "shorter than outer headers + Ethernet"),
        /// UDP length.
        BadUdpLength => error("bad_udp_length", "UDP length disagrees with the IP length"),
        /// I flag clear.
        BadFlags => error("bad_flags", "VXLAN I flag clear"),
        /// IPv6 extension headers.
        Ip6Extension => error("ip6_extension", "IPv6 extension headers before UDP"),
        /// Unknown (src, dst, VNI).
        NoSuchTunnel => error("no_such_tunnel", "no tunnel for (src, dst, key)"),
        /// To a multicast group: no tunnel of the group and VNI on the rx interface.
        NoGroupTunnel => error("no_group_tunnel", "no tunnel for (group, VNI) on the rx interface"),
    }
}

/// VXLAN's decap logic; `V6` selects the underlay family (the node is
/// [`tunnel::DecapFrame`] of it).
#[derive(Default)]
pub struct VxlanInput<const V6: bool>;

impl<const V6: bool> DecapProto for VxlanInput<V6> {
    /// The outer IP header's length.
    type Meta = u16;
    const IP6: bool = V6;
    type Counter = VxlanCounter;
    const DROP: Next = VxlanNext::Drop.next();
    const DECAPSULATED: VxlanCounter = VxlanCounter::Decapsulated;
    const NO_SUCH_TUNNEL: VxlanCounter = VxlanCounter::NoSuchTunnel;
    const L2_DIRECT: Option<(Next, Next)> =
        Some((VxlanNext::EthernetInput.next(), VxlanNext::L2Input.next()));
    #[inline(always)]
    fn parse(
        &mut self,
        _cx: &mut Cx,
        b: &mut Buffer<'_>,
    ) -> Result<(DecapKey, u16), Verdict<VxlanCounter>> {
        use VxlanCounter as c;
        let d = b.data();
        let (ipl, src, dst) = match crate::tunnel::outer::<V6>(d, 17) {
            Ok(x) => x,
            Err(0) => return Err(c::Truncated.into()),
            Err(_) => return Err(c::Ip6Extension.into()),
        };
        let Some(v) = d.get(ipl..ipl + UDP_VXLAN) else {
            return Err(c::Truncated.into());
        };
        let ulen = u16::from_be_bytes([v[4], v[5]]) as usize;
        let ip_payload = b.total_len() - ipl;
        if ulen != ip_payload {
            return Err(c::BadUdpLength.into());
        }
        if ulen < UDP_VXLAN + 14 {
            return Err(c::Truncated.into());
        }
        if v[8] & 0x08 == 0 {
            return Err(c::BadFlags.into());
        }
        let vni = u32::from_be_bytes([0, v[12], v[13], v[14]]);
        let key = DecapKey {
            fib: b.hdr.ip.fib_index,
            key: vni,
            sub: 0,
            // A group's tunnel takes its VNI from any source, on its interface only.
            src: if tunnel::is_group::<V6>(dst) {
                tunnel::group_source(b.hdr.rx_if)
            } else {
                src
            },
            dst,
        };
        Ok((key, ipl as u16))
    }
    #[inline(always)]
    fn miss(
        &mut self,
        _cx: &mut Cx,
        _b: &mut Buffer<'_>,
        k: &DecapKey,
        _m: u16,
    ) -> Verdict<VxlanCounter> {
        if tunnel::is_group::<V6>(k.dst) {
            VxlanCounter::NoGroupTunnel.into()
        } else {
            VxlanCounter::NoSuchTunnel.into()
        }
    }
    #[inline(always)]
    fn finish(
        &mut self,
        b: &mut Buffer<'_>,
        ipl: u16,
        e: &DecapEntry,
        _: Option<tunnel::L3Direct>,
        rx: &mut tunnel::RxSum,
    ) -> Result<Next, VxlanCounter> {
        Ok(tunnel::decap_to(b, ipl as usize + UDP_VXLAN, e, rx))
    }
}

/// How VXLAN makes its tunnels.
pub static PROTO: Proto = Proto {
    prefix: "vxlan_tunnel",
    driver: "vxlan",
    encap: [ENCAP4, ENCAP6],
    decap: [INPUT4, INPUT6],
    table_of: [
        tunnel::table_of::<VxlanInput<false>>,
        tunnel::table_of::<VxlanInput<true>>,
    ],
    local: &[LocalKey::UdpPort(tunnel::VXLAN_PORT)],
    local_groups: true,
    default_next: "ethernet-input",
};

/// Registers the four nodes.
pub fn register(b: &mut GraphBuilder) {
    tunnel::register_encap(b, ENCAP4, ENCAP6);
    tunnel::register_decap::<VxlanInput<false>, VxlanInput<true>>(
        b,
        [INPUT4, INPUT6],
        [VxlanNext::NAMES, VxlanNext::NAMES],
        VxlanCounter::DESCS,
    );
}

/// The outer headers of a VXLAN tunnel: IP, UDP (source port filled per packet, checksum 0
/// for IPv4), VXLAN with the I flag and the VNI.
pub fn rewrite(src: IpAddr, dst: IpAddr, vni: u32) -> Vec<u8> {
    let mut rw = Vec::with_capacity(56);
    tunnel::outer_ip(src, dst, 17, &mut rw);
    rw.extend_from_slice(&[0, 0]);
    rw.extend_from_slice(&tunnel::VXLAN_PORT.to_be_bytes());
    rw.extend_from_slice(&[0, 0, 0, 0]);
    rw.extend_from_slice(&[0x08, 0, 0, 0]);
    rw.extend_from_slice(&(vni << 8).to_be_bytes());
    rw
}

/// What `create vxlan tunnel` and `vxlan_add_del_tunnel` ask for.
#[derive(Clone, Debug)]
pub struct VxlanArgs {
    /// Add or delete.
    pub is_add: bool,
    /// Local address.
    pub src: IpAddr,
    /// Remote address.
    pub dst: IpAddr,
    /// 24-bit VNI.
    pub vni: u32,
    /// Name instance.
    pub instance: Option<u32>,
    /// `decap-next node <name>` (None: l2, `ethernet-input`).
    pub decap_next: Option<String>,
    /// Underlay table id.
    pub encap_vrf_id: u32,
    /// `group <dst> <interface>`: the interface of a multicast `dst` (ignored for a
    /// unicast one, as VPP's `mcast_sw_if_index`).
    pub mcast_if: Option<SwIfIndex>,
}

/// Creates or deletes a VXLAN tunnel (the CLI and the API call this); the tunnel's
/// interface.
pub fn add_del(vm: &mut Vlib, a: &VxlanArgs) -> VnetResult<SwIfIndex> {
    if a.vni >= 1 << 24 {
        return Err(VnetError::invalid(format!(
            "vni {} out of range 0..16777215",
            a.vni
        )));
    }
    let args = AddArgs {
        kind: Kind::Vxlan,
        src: a.src,
        dst: a.dst,
        key: a.vni,
        table_id: a.encap_vrf_id,
        instance: a.instance,
        decap_next: a.decap_next.clone(),
        mcast_if: a.mcast_if,
    };
    if a.is_add {
        tunnel::add(vm, &PROTO, &args, &rewrite(a.src, a.dst, a.vni))
    } else {
        tunnel::del(vm, &PROTO, &args)
    }
}

fn cli_create(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let (mut src, mut dst, mut vni) = (None, None, None);
    let mut r = VxlanArgs {
        is_add: true,
        src: IpAddr::from([0, 0, 0, 0]),
        dst: IpAddr::from([0, 0, 0, 0]),
        vni: 0,
        instance: None,
        decap_next: None,
        encap_vrf_id: 0,
        mcast_if: None,
    };
    while !a.is_empty() {
        if a.keyword("src") {
            src = Some(tunnel::parse_addr(&a.word("src address")?, "src")?);
        } else if a.keyword("dst") {
            dst = Some(tunnel::parse_addr(&a.word("dst address")?, "dst")?);
        } else if a.keyword("group") {
            let g = tunnel::parse_addr(&a.word("group address")?, "group")?;
            if !g.is_multicast() {
                return Err(VnetError::invalid(format!("group {g} is not multicast")).into());
            }
            dst = Some(g);
            r.mcast_if = Some(sluice_vnet::cli::interface_arg(vm, a)?);
        } else if a.keyword("vni") {
            vni = Some(a.u32("vni")?);
        } else if a.keyword("instance") {
            r.instance = Some(a.u32("instance")?);
        } else if a.keyword("encap-vrf-id") {
            r.encap_vrf_id = a.u32("encap-vrf-id")?;
        } else if a.keyword("decap-next") {
            if a.keyword("l2") {
                r.decap_next = None;
            } else if a.keyword("node") {
                r.decap_next = Some(a.word("node name")?);
            } else {
                let w = a.word("decap-next")?;
                return Err(CliError::new(format!(
                    "decap-next `{w}': expected l2 or node <name>"
                )));
            }
        } else if a.keyword("del") {
            r.is_add = false;
        } else {
            a.finish()?;
        }
    }
    r.src = src.ok_or_else(|| CliError::new("missing src <address>"))?;
    r.dst =
        dst.ok_or_else(|| CliError::new("missing dst <address> or group <address> <interface>"))?;
    r.vni = vni.ok_or_else(|| CliError::new("missing vni <n>"))?;
    let sw = add_del(vm, &r)?;
    if !r.is_add {
        return Ok(String::new());
    }
    Ok(format!("{}\n", tunnel::if_name(vm, sw)))
}

/// One `show vxlan tunnel` line (VPP's format).
pub fn show_line(i: usize, t: &tunnel::Tunnel) -> String {
    let mcast = t
        .mcast_if
        .map(|m| format!(" mcast-sw-if-idx {}", m.0))
        .unwrap_or_default();
    format!(
        "[{i}] instance {} src {} dst {} src_port 0 dst_port {} vni {} fib-idx {} sw-if-idx {}{mcast} {}\n",
        t.instance,
        t.src,
        t.dst,
        tunnel::VXLAN_PORT,
        t.key,
        t.fib_index,
        t.sw_if.0,
        match &t.decap_next {
            None => "decap-next-l2".to_string(),
            Some(n) => format!("decap-next-node {n}"),
        }
    )
}

fn cli_show(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    let tm = vm.ext_mut::<tunnel::Tunnels>();
    let mut out = String::new();
    for (i, t) in tm.iter_kind(|k| k == Kind::Vxlan) {
        out.push_str(&show_line(i, t));
    }
    if out.is_empty() {
        out.push_str("No vxlan tunnels configured...\n");
    }
    Ok(out)
}

/// The `create vxlan tunnel` line recreating `sw` (`show running-config`).
pub fn creator(vm: &mut Vlib, sw: SwIfIndex) -> Option<String> {
    let tm = vm.ext_mut::<tunnel::Tunnels>();
    let (_, t) = tm.by_sw_if(sw, |k| k == Kind::Vxlan)?;
    let t = t.clone();
    let dst = match t.mcast_if {
        Some(m) => format!("group {} {}", t.dst, tunnel::if_name(vm, m)),
        None => format!("dst {}", t.dst),
    };
    let mut s = format!(
        "create vxlan tunnel src {} {dst} vni {} instance {}",
        t.src, t.key, t.instance
    );
    if t.table_id != 0 {
        s.push_str(&format!(" encap-vrf-id {}", t.table_id));
    }
    if let Some(n) = &t.decap_next {
        s.push_str(&format!(" decap-next node {n}"));
    }
    Some(s)
}

/// Registers the VXLAN CLI.
pub fn register_cli(t: &mut CommandTree<Vlib>) {
    t.add(
        "create vxlan tunnel",
        "create vxlan tunnel src <addr> {dst <addr> | group <mcast-addr> <interface>} vni <nn> [instance <n>] [encap-vrf-id <nn>] [decap-next l2|node <name>] [del]",
        cli_create,
    );
    t.add("show vxlan tunnel", "show vxlan tunnel", cli_show);
}
