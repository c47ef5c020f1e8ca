//! IP-in-IP (RFC 2003 4in4, RFC 4213 6in4, RFC 2473 4in6/6in6): one point-to-point
//! interface per (src, dst, table) carries IPv4 and IPv6 inside, over an IPv4 or IPv6
//! underlay.
//!
//! ```text
//! create ipip tunnel src <a> dst <a> [instance <n>] [table-id <id>]
//! delete ipip tunnel sw_if_index <n>
//! show ipip tunnel
//! ```
//!
//! Encap: `ipip4-encap`/`ipip6-encap`, the shared [`crate::tunnel::Encap`] node (the outer
//! protocol, 4 or 41, from the payload's version).
//!
//! # `ipip4-input` / `ipip6-input` ([`IpipInput`] in [`tunnel::DecapFrame`]: a frame at a time)
//! - uses: the outer IP header at `current_data` (dispatched by `ip4-local`/`ip6-local`
//!   for protocols 4 and 41); `ip.fib_index`.
//! - sets: strips the outer IP header, puts an Ethernet header to the tunnel's MAC in front
//!   of the inner packet; `rx_if` = the tunnel; the tunnel's rx counters; on the direct L3
//!   path also what `ethernet-input` would: `ip.fib_index`,
//!   `l2.l2_hdr_offset`, `L2_TO_BVI`/`LOCALLY_ORIGINATED` cleared (`tunnel::decap_l3`).
//! - next: `drop` (`error-drop`); `ethernet-input`; `ip4-input`/`ip6-input`
//!   for an untraced IP packet of an up L3 tunnel (`tunnel::decap_l3`: `ip.fib_index` = the
//!   tunnel's table, skipping `ethernet-input`).
//! - counters: `decapsulated` (info), `truncated`, `bad_inner` (inner version does not
//!   match the outer protocol), `ip6_extension` (IPv6 extension headers before the inner
//!   packet), `no_such_tunnel`.

use crate::tunnel::{self, AddArgs, DecapEntry, DecapKey, DecapProto, Kind, Proto, Verdict};
use sluice_buffer::Buffer;
use sluice_cli::{Args, CliError, CommandTree};
use sluice_graph::{Cx, GraphBuilder, Next, Vlib};
use sluice_vnet::error::{VnetError, VnetResult};
use sluice_vnet::ip_local::LocalKey;
use sluice_vnet::SwIfIndex;
use std::net::IpAddr;

/// Node names.
pub const ENCAP4: &str = "ipip4-encap";
/// IPv6 underlay encap.
pub const ENCAP6: &str = "ipip6-encap";
/// IPv4 underlay decap.
pub const INPUT4: &str = "ipip4-input";
/// IPv6 underlay decap.
pub const INPUT6: &str = "ipip6-input";

sluice_graph::arcs! {
    /// Next arcs of the decap nodes (the tunnels' decap nexts are added at runtime).
    pub enum IpipNext {
        /// Drops.
        Drop => "error-drop",
        /// Decapsulated (behind a placeholder Ethernet header).
        EthernetInput => "ethernet-input",
        /// Decapsulated IPv4 packets of an up L3 tunnel ([`tunnel::decap_l3`]).
        Ip4Input => "ip4-input",
        /// Decapsulated IPv6 packets of an up L3 tunnel.
        Ip6Input => "ip6-input",
    }
}

sluice_graph::counters! {
    /// Counters of the decap nodes.
    pub enum IpipCounter {
        /// Decapsulated.
        Decapsulated => info("decapsulated", "packets decapsulated"),
        /// Truncated.
        Truncated => error("truncated", "shorter than outer headers"),
        /// Inner version.
        BadInner => error("bad_inner", "inner IP version does not match the protocol"),
        /// IPv6 extension headers.
        Ip6Extension => error("ip6_extension", "IPv6 extension headers before the inner packet"),
        /// Unknown tunnel.
        NoSuchTunnel => error("no_such_tunnel", "no tunnel for (src, dst, key)"),
    }
}

/// IP-in-IP's decap logic; `V6` selects the underlay family (the node is
/// [`tunnel::DecapFrame`] of it).
#[derive(Default)]
pub struct IpipInput<const V6: bool>;

impl<const V6: bool> DecapProto for IpipInput<V6> {
    /// Outer IP header length, inner EtherType.
    type Meta = (u16, u16);
    const IP6: bool = V6;
    type Counter = IpipCounter;
    const DROP: Next = IpipNext::Drop.next();
    const DECAPSULATED: IpipCounter = IpipCounter::Decapsulated;
    const NO_SUCH_TUNNEL: IpipCounter = IpipCounter::NoSuchTunnel;
    const L3_DIRECT: Option<tunnel::L3Arcs> = Some(tunnel::L3Arcs {
        eth: IpipNext::EthernetInput.next(),
        ip4: IpipNext::Ip4Input.next(),
        ip6: IpipNext::Ip6Input.next(),
    });
    #[inline(always)]
    fn parse(
        &mut self,
        _cx: &mut Cx,
        b: &mut Buffer<'_>,
    ) -> Result<(DecapKey, (u16, u16)), Verdict<IpipCounter>> {
        use IpipCounter as c;
        let d = b.data();
        // The protocol: byte 9 of IPv4, next header of IPv6 (4 or 41, what ip-local saw).
        let proto = if V6 { d.get(6) } else { d.get(9) }.copied().unwrap_or(0);
        let Ok((ipl, src, dst)) = crate::tunnel::outer::<V6>(d, proto) else {
            return Err(c::Truncated.into());
        };
        if V6 && proto != 4 && proto != 41 {
            return Err(c::Ip6Extension.into());
        }
        let Some(et) = tunnel::inner_et(d.get(ipl), proto == 4) else {
            let e = if d.len() <= ipl {
                c::Truncated
            } else {
                c::BadInner
            };
            return Err(e.into());
        };
        let k = DecapKey {
            fib: b.hdr.ip.fib_index,
            key: 0,
            sub: 0,
            src,
            dst,
        };
        Ok((k, (ipl as u16, et)))
    }
    #[inline(always)]
    fn finish(
        &mut self,
        b: &mut Buffer<'_>,
        (ipl, et): (u16, u16),
        e: &DecapEntry,
        d: Option<tunnel::L3Direct>,
        rx: &mut tunnel::RxSum,
    ) -> Result<Next, IpipCounter> {
        Ok(tunnel::decap_l3(b, ipl as usize, e, et, d, rx))
    }
}

/// How IP-in-IP makes its tunnels.
pub static PROTO: Proto = Proto {
    prefix: "ipip",
    driver: "ipip",
    encap: [ENCAP4, ENCAP6],
    decap: [INPUT4, INPUT6],
    table_of: [
        tunnel::table_of::<IpipInput<false>>,
        tunnel::table_of::<IpipInput<true>>,
    ],
    local: &[LocalKey::Protocol(4), LocalKey::Protocol(41)],
    local_groups: false,
    default_next: "ethernet-input",
};

/// Registers the four nodes.
pub fn register(b: &mut GraphBuilder) {
    tunnel::register_encap(b, ENCAP4, ENCAP6);
    tunnel::register_decap::<IpipInput<false>, IpipInput<true>>(
        b,
        [INPUT4, INPUT6],
        [IpipNext::NAMES, IpipNext::NAMES],
        IpipCounter::DESCS,
    );
}

/// What `create ipip tunnel` and `ipip_add_tunnel` ask for.
#[derive(Clone, Debug)]
pub struct IpipArgs {
    /// Local address.
    pub src: IpAddr,
    /// Remote address.
    pub dst: IpAddr,
    /// Name instance.
    pub instance: Option<u32>,
    /// Underlay table id.
    pub table_id: u32,
}

/// Creates an IP-in-IP tunnel; its interface.
pub fn add(vm: &mut Vlib, a: &IpipArgs) -> VnetResult<SwIfIndex> {
    tunnel::check_endpoints(a.src, a.dst)?;
    let mut rw = Vec::with_capacity(40);
    tunnel::outer_ip(a.src, a.dst, 0, &mut rw);
    let args = AddArgs {
        kind: Kind::Ipip,
        src: a.src,
        dst: a.dst,
        key: 0,
        table_id: a.table_id,
        instance: a.instance,
        decap_next: None,
        mcast_if: None,
    };
    tunnel::add(vm, &PROTO, &args, &rw)
}

/// Deletes the IP-in-IP tunnel whose interface is `sw`.
pub fn del(vm: &mut Vlib, sw: SwIfIndex) -> VnetResult {
    let idx = vm
        .ext_mut::<tunnel::Tunnels>()
        .by_sw_if(sw, |k| k == Kind::Ipip)
        .map(|(i, _)| i)
        .ok_or_else(|| VnetError::NotFound(format!("sw_if_index {} is no ipip tunnel", sw.0)))?;
    tunnel::delete_index(vm, &PROTO, idx);
    Ok(())
}

fn cli_create(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let (mut src, mut dst) = (None, None);
    let (mut instance, mut table_id) = (None, 0);
    while !a.is_empty() {
        if a.keyword("src") {
            src = Some(tunnel::parse_addr(&a.word("src address")?, "src")?);
        } else if a.keyword("dst") {
            dst = Some(tunnel::parse_addr(&a.word("dst address")?, "dst")?);
        } else if a.keyword("instance") {
            instance = Some(a.u32("instance")?);
        } else if a.keyword("table-id") || a.keyword("outer-table-id") {
            table_id = a.u32("table-id")?;
        } else {
            a.finish()?;
        }
    }
    let r = IpipArgs {
        src: src.ok_or_else(|| CliError::new("missing src <address>"))?,
        dst: dst.ok_or_else(|| CliError::new("missing dst <address>"))?,
        instance,
        table_id,
    };
    let sw = add(vm, &r)?;
    Ok(format!("{}\n", tunnel::if_name(vm, sw)))
}

fn cli_delete(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let sw = if a.keyword("sw_if_index") {
        SwIfIndex(a.u32("sw_if_index")?)
    } else {
        sluice_vnet::cli::interface_arg(vm, a)?
    };
    a.finish()?;
    del(vm, sw)?;
    Ok(String::new())
}

fn cli_show(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    let tm = vm.ext_mut::<tunnel::Tunnels>();
    let mut out = String::new();
    for (i, t) in tm.iter_kind(|k| k == Kind::Ipip) {
        out.push_str(&format!(
            "[{i}] instance {} src {} dst {} table-ID {} sw-if-idx {}\n",
            t.instance, t.src, t.dst, t.table_id, t.sw_if.0
        ));
    }
    if out.is_empty() {
        out.push_str("No IPIP tunnels configured\n");
    }
    Ok(out)
}

/// The `create ipip tunnel` line recreating `sw` (`show running-config`).
pub fn creator(vm: &mut Vlib, sw: SwIfIndex) -> Option<String> {
    let tm = vm.ext_mut::<tunnel::Tunnels>();
    let (_, t) = tm.by_sw_if(sw, |k| k == Kind::Ipip)?;
    let mut s = format!(
        "create ipip tunnel src {} dst {} instance {}",
        t.src, t.dst, t.instance
    );
    if t.table_id != 0 {
        s.push_str(&format!(" table-id {}", t.table_id));
    }
    Some(s)
}

/// Registers the IP-in-IP CLI.
pub fn register_cli(t: &mut CommandTree<Vlib>) {
    t.add(
        "create ipip tunnel",
        "create ipip tunnel src <addr> dst <addr> [instance <n>] [table-id <id>]",
        cli_create,
    );
    t.add(
        "delete ipip tunnel",
        "delete ipip tunnel sw_if_index <n> | <interface>",
        cli_delete,
    );
    t.add("show ipip tunnel", "show ipip tunnel", cli_show);
}
