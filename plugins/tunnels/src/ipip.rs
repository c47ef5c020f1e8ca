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
//! # `ipip4-input` / `ipip6-input` ([`IpipInput`])
//! - uses: the outer IP header at `current_data` (dispatched by `ip4-local`/`ip6-local`
//!   for protocols 4 and 41); `ip.fib_index`.
//! - sets: strips the outer IP header, puts an Ethernet header to the tunnel's MAC in front
//!   of the inner packet; `rx_if` = the tunnel; the tunnel's rx counters.
//! - next: `drop` (`error-drop`); `ethernet-input`.
//! - counters: `decapsulated` (info), `truncated`, `bad_inner` (inner version does not
//!   match the outer protocol), `ip6_extension` (IPv6 extension headers before the inner
//!   packet), `no_such_tunnel`.

use crate::tunnel::{self, AddArgs, DecapKey, DecapTable, Kind, Proto};
use sluice_buffer::Buffer;
use sluice_cli::{Args, CliError, CommandTree};
use sluice_graph::{Cx, GraphBuilder, Next, PacketNode, Vlib};
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

/// The decap node; `V6` selects the underlay family.
#[derive(Default)]
pub struct IpipInput<const V6: bool> {
    /// (table, src, dst) → tunnel.
    pub table: DecapTable,
}

impl<const V6: bool> PacketNode for IpipInput<V6> {
    #[inline(always)]
    fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        use IpipCounter as c;
        let d = b.data();
        // The protocol: byte 9 of IPv4, next header of IPv6 (4 or 41, what ip-local saw).
        let proto = if V6 { d.get(6) } else { d.get(9) }.copied().unwrap_or(0);
        let (ipl, src, dst) = match crate::tunnel::outer::<V6>(d, proto) {
            Ok(x) => x,
            Err(_) => {
                b.hdr.error = cx.error(c::Truncated);
                return IpipNext::Drop.into();
            }
        };
        if V6 && proto != 4 && proto != 41 {
            b.hdr.error = cx.error(c::Ip6Extension);
            return IpipNext::Drop.into();
        }
        let Some(et) = tunnel::inner_et(d.get(ipl), proto == 4) else {
            b.hdr.error = cx.error(if d.len() <= ipl {
                c::Truncated
            } else {
                c::BadInner
            });
            return IpipNext::Drop.into();
        };
        let k = DecapKey {
            fib: b.hdr.ip.fib_index,
            key: 0,
            sub: 0,
            src,
            dst,
        };
        let Some(e) = self.table.lookup(&k) else {
            b.hdr.error = cx.error(c::NoSuchTunnel);
            return IpipNext::Drop.into();
        };
        if b.hdr.is_traced() {
            cx.trace(
                b,
                tunnel::DecapTrace {
                    sw_if: Some(e.sw_if),
                    key: 0,
                },
            );
        }
        cx.count(c::Decapsulated, 1);
        tunnel::decap_l3(cx, b, ipl, e, et)
    }
}

impl<const V6: bool> tunnel::DecapNode for IpipInput<V6> {
    fn table(&mut self) -> &mut DecapTable {
        &mut self.table
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
