//! GRE (RFC 2784, keys RFC 2890): L3 (IPv4/IPv6 inside, a point-to-point interface) and
//! TEB (Ethernet inside, protocol 0x6558: bridgeable), IPv4 and IPv6 underlay.
//!
//! ```text
//! create gre tunnel src <a> dst <a> [teb] [instance <n>] [outer-table-id <id>] [key <k>] [del]
//! show gre tunnel
//! ```
//!
//! Encap: `gre4-encap`/`gre6-encap`, the shared [`crate::tunnel::Encap`] node (outer IP +
//! GRE header with the key precomputed; an L3 payload's protocol type from its version).
//!
//! # `gre4-input` / `gre6-input` ([`GreInput`] in [`tunnel::DecapFrame`]: a frame at a time)
//! - uses: the outer IP header at `current_data` (dispatched by `ip4-local`/`ip6-local`
//!   for protocol 47); `ip.fib_index`.
//! - sets: strips outer IP/GRE headers (an L3 payload gets an Ethernet header to the
//!   tunnel's MAC for `ethernet-input`); `rx_if` = the tunnel; the tunnel's rx counters; on
//!   the direct L3 path also what `ethernet-input` would: `ip.fib_index`,
//!   `l2.l2_hdr_offset`, `L2_TO_BVI`/`LOCALLY_ORIGINATED` cleared (`tunnel::decap_l3`).
//! - next: `drop` (`error-drop`); the tunnel's decap next (`ethernet-input`); `ip4-input`/`ip6-input`
//!   for an untraced IP packet of an up L3 tunnel (`tunnel::decap_l3`: `ip.fib_index` = the
//!   tunnel's table, skipping `ethernet-input`).
//! - counters: `decapsulated` (info), `truncated`, `bad_version` (version not 0),
//!   `routing_present` (R bit: RFC 1701 source routing, not supported), `bad_protocol`
//!   (neither 0x6558, 0x0800 nor 0x86dd, or an inner packet of another IP version),
//!   `ip6_extension` (IPv6 extension headers before GRE), `no_such_tunnel` (unknown
//!   (src, dst, key, type)).

use crate::tunnel::{self, AddArgs, DecapEntry, DecapKey, DecapProto, Kind, Proto, Verdict};
use sluice_buffer::Buffer;
use sluice_cli::{Args, CliError, CommandTree};
use sluice_graph::{Cx, GraphBuilder, Next, Vlib};
use sluice_vnet::error::VnetResult;
use sluice_vnet::ip_local::LocalKey;
use sluice_vnet::SwIfIndex;
use std::net::IpAddr;

/// Node names.
pub const ENCAP4: &str = "gre4-encap";
/// IPv6 underlay encap.
pub const ENCAP6: &str = "gre6-encap";
/// IPv4 underlay decap.
pub const INPUT4: &str = "gre4-input";
/// IPv6 underlay decap.
pub const INPUT6: &str = "gre6-input";

/// GRE protocol types.
const ET_TEB: u16 = 0x6558;
const ET_IP4: u16 = 0x0800;
const ET_IP6: u16 = 0x86dd;
/// GRE flag bits (first 16 bits of the header).
const F_CSUM: u16 = 0x8000;
const F_ROUTING: u16 = 0x4000;
const F_KEY: u16 = 0x2000;
const F_SEQ: u16 = 0x1000;

sluice_graph::arcs! {
    /// Next arcs of the decap nodes (the tunnels' decap nexts are added at runtime).
    pub enum GreNext {
        /// Drops.
        Drop => "error-drop",
        /// Decapsulated (TEB frames; L3 packets behind a placeholder Ethernet header).
        EthernetInput => "ethernet-input",
        /// Decapsulated IPv4 packets of an up L3 tunnel ([`tunnel::decap_l3`]).
        Ip4Input => "ip4-input",
        /// Decapsulated IPv6 packets of an up L3 tunnel.
        Ip6Input => "ip6-input",
    }
}

sluice_graph::counters! {
    /// Counters of the decap nodes.
    pub enum GreCounter {
        /// Decapsulated.
        Decapsulated => info("decapsulated", "packets decapsulated"),
        /// Truncated.
        Truncated => error("truncated", "shorter than outer headers"),
        /// Version not 0.
        BadVersion => error("bad_version", "GRE version not 0"),
        /// RFC 1701 routing.
        Routing => error("routing_present", "GRE routing (RFC 1701) not supported"),
        /// Protocol.
        BadProtocol => error("bad_protocol", "GRE protocol not TEB/IPv4/IPv6 or inner mismatch"),
        /// IPv6 extension headers.
        Ip6Extension => error("ip6_extension", "IPv6 extension headers before GRE"),
        /// Unknown tunnel.
        NoSuchTunnel => error("no_such_tunnel", "no tunnel for (src, dst, key)"),
    }
}

/// GRE's decap logic; `V6` selects the underlay family (the node is
/// [`tunnel::DecapFrame`] of it).
#[derive(Default)]
pub struct GreInput<const V6: bool>;

/// What GRE's parse hands its finish.
#[derive(Copy, Clone, Default)]
pub struct GreMeta {
    /// Outer IP + GRE header length.
    hl: u16,
    /// The inner EtherType of an L3 payload (0: TEB).
    et: u16,
}

impl<const V6: bool> DecapProto for GreInput<V6> {
    type Meta = GreMeta;
    const IP6: bool = V6;
    type Counter = GreCounter;
    const DROP: Next = GreNext::Drop.next();
    const DECAPSULATED: GreCounter = GreCounter::Decapsulated;
    const NO_SUCH_TUNNEL: GreCounter = GreCounter::NoSuchTunnel;
    const L3_DIRECT: Option<tunnel::L3Arcs> = Some(tunnel::L3Arcs {
        eth: GreNext::EthernetInput.next(),
        ip4: GreNext::Ip4Input.next(),
        ip6: GreNext::Ip6Input.next(),
    });
    #[inline(always)]
    fn parse(
        &mut self,
        _cx: &mut Cx,
        b: &mut Buffer<'_>,
    ) -> Result<(DecapKey, GreMeta), Verdict<GreCounter>> {
        use GreCounter as c;
        let d = b.data();
        let (ipl, src, dst) = match tunnel::outer::<V6>(d, 47) {
            Ok(x) => x,
            Err(0) => return Err(c::Truncated.into()),
            Err(_) => return Err(c::Ip6Extension.into()),
        };
        let Some(g) = d.get(ipl..ipl + 4) else {
            return Err(c::Truncated.into());
        };
        let flags = u16::from_be_bytes([g[0], g[1]]);
        let et = u16::from_be_bytes([g[2], g[3]]);
        if flags & 7 != 0 {
            return Err(c::BadVersion.into());
        }
        if flags & F_ROUTING != 0 {
            return Err(c::Routing.into());
        }
        let mut hl = ipl + 4;
        if flags & F_CSUM != 0 {
            hl += 4;
        }
        let key = if flags & F_KEY != 0 {
            let k = d
                .get(hl..hl + 4)
                .map(|k| u32::from_be_bytes([k[0], k[1], k[2], k[3]]));
            hl += 4;
            k
        } else {
            None
        };
        if flags & F_SEQ != 0 {
            hl += 4;
        }
        let teb = match et {
            ET_TEB => true,
            ET_IP4 | ET_IP6 => false,
            _ => return Err(c::BadProtocol.into()),
        };
        let min = if teb { 14 } else { 1 };
        if d.len() < hl + min {
            return Err(c::Truncated.into());
        }
        let inner = if teb {
            0
        } else {
            match tunnel::inner_et(d.get(hl), et == ET_IP4) {
                Some(e) => e,
                None => return Err(c::BadProtocol.into()),
            }
        };
        let k = DecapKey {
            fib: b.hdr.ip.fib_index,
            // As VPP's `gre_mk_key4`: a key of 0 is no key, whether the K bit is set or
            // not (a tunnel without key, or `key 0`, takes both; a keyed one neither).
            key: key.unwrap_or(0),
            sub: teb as u8,
            src,
            dst,
        };
        Ok((
            k,
            GreMeta {
                hl: hl as u16,
                et: inner,
            },
        ))
    }
    #[inline(always)]
    fn finish(
        &mut self,
        b: &mut Buffer<'_>,
        m: GreMeta,
        e: &DecapEntry,
        d: Option<tunnel::L3Direct>,
        rx: &mut tunnel::RxSum,
    ) -> Result<Next, GreCounter> {
        Ok(match m.et {
            0 => tunnel::decap_to(b, m.hl as usize, e, rx),
            et => tunnel::decap_l3(b, m.hl as usize, e, et, d, rx),
        })
    }
}

/// How GRE makes its tunnels.
pub static PROTO: Proto = Proto {
    prefix: "gre",
    driver: "gre",
    encap: [ENCAP4, ENCAP6],
    decap: [INPUT4, INPUT6],
    table_of: [
        tunnel::table_of::<GreInput<false>>,
        tunnel::table_of::<GreInput<true>>,
    ],
    local: &[LocalKey::Protocol(47)],
    local_groups: false,
    default_next: "ethernet-input",
};

/// Registers the four nodes.
pub fn register(b: &mut GraphBuilder) {
    tunnel::register_encap(b, ENCAP4, ENCAP6);
    tunnel::register_decap::<GreInput<false>, GreInput<true>>(
        b,
        [INPUT4, INPUT6],
        [GreNext::NAMES, GreNext::NAMES],
        GreCounter::DESCS,
    );
}

/// The outer headers of a GRE tunnel: IP (protocol 47), GRE with the K bit and key when
/// `key` is not 0, protocol 0x6558 for TEB (an L3 payload's is filled per packet).
pub fn rewrite(src: IpAddr, dst: IpAddr, teb: bool, key: u32) -> Vec<u8> {
    let mut rw = Vec::with_capacity(48);
    tunnel::outer_ip(src, dst, 47, &mut rw);
    let flags = if key != 0 { F_KEY } else { 0 };
    rw.extend_from_slice(&flags.to_be_bytes());
    rw.extend_from_slice(&(if teb { ET_TEB } else { 0 }).to_be_bytes());
    if key != 0 {
        rw.extend_from_slice(&key.to_be_bytes());
    }
    rw
}

/// What `create gre tunnel` and `gre_tunnel_add_del` ask for.
#[derive(Clone, Debug)]
pub struct GreArgs {
    /// Add or delete.
    pub is_add: bool,
    /// Local address.
    pub src: IpAddr,
    /// Remote address.
    pub dst: IpAddr,
    /// Transparent Ethernet bridging.
    pub teb: bool,
    /// Key (0: none).
    pub key: u32,
    /// Name instance.
    pub instance: Option<u32>,
    /// Underlay table id.
    pub outer_table_id: u32,
}

/// Creates or deletes a GRE tunnel; the tunnel's interface.
pub fn add_del(vm: &mut Vlib, a: &GreArgs) -> VnetResult<SwIfIndex> {
    let args = AddArgs {
        kind: Kind::Gre { teb: a.teb },
        src: a.src,
        dst: a.dst,
        key: a.key,
        table_id: a.outer_table_id,
        instance: a.instance,
        decap_next: None,
        mcast_if: None,
    };
    if a.is_add {
        tunnel::check_endpoints(a.src, a.dst)?;
        tunnel::add(vm, &PROTO, &args, &rewrite(a.src, a.dst, a.teb, a.key))
    } else {
        tunnel::del(vm, &PROTO, &args)
    }
}

fn cli_create(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let (mut src, mut dst) = (None, None);
    let mut r = GreArgs {
        is_add: true,
        src: IpAddr::from([0, 0, 0, 0]),
        dst: IpAddr::from([0, 0, 0, 0]),
        teb: false,
        key: 0,
        instance: None,
        outer_table_id: 0,
    };
    while !a.is_empty() {
        if a.keyword("src") {
            src = Some(tunnel::parse_addr(&a.word("src address")?, "src")?);
        } else if a.keyword("dst") {
            dst = Some(tunnel::parse_addr(&a.word("dst address")?, "dst")?);
        } else if a.keyword("teb") {
            r.teb = true;
        } else if a.keyword("key") {
            r.key = a.u32("key")?;
        } else if a.keyword("instance") {
            r.instance = Some(a.u32("instance")?);
        } else if a.keyword("outer-table-id") {
            r.outer_table_id = a.u32("outer-table-id")?;
        } else if a.keyword("del") {
            r.is_add = false;
        } else {
            a.finish()?;
        }
    }
    r.src = src.ok_or_else(|| CliError::new("missing src <address>"))?;
    r.dst = dst.ok_or_else(|| CliError::new("missing dst <address>"))?;
    let sw = add_del(vm, &r)?;
    if !r.is_add {
        return Ok(String::new());
    }
    Ok(format!("{}\n", tunnel::if_name(vm, sw)))
}

fn cli_show(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    let tm = vm.ext_mut::<tunnel::Tunnels>();
    let mut out = String::new();
    for (i, t) in tm.iter_kind(|k| matches!(k, Kind::Gre { .. })) {
        out.push_str(&format!(
            "[{i}] instance {} src {} dst {} fib-idx {} sw-if-idx {} payload {}{}\n",
            t.instance,
            t.src,
            t.dst,
            t.fib_index,
            t.sw_if.0,
            if t.kind == (Kind::Gre { teb: true }) {
                "TEB"
            } else {
                "L3"
            },
            if t.key != 0 {
                format!(" key {}", t.key)
            } else {
                String::new()
            }
        ));
    }
    if out.is_empty() {
        out.push_str("No GRE tunnels configured\n");
    }
    Ok(out)
}

/// The `create gre tunnel` line recreating `sw` (`show running-config`).
pub fn creator(vm: &mut Vlib, sw: SwIfIndex) -> Option<String> {
    let tm = vm.ext_mut::<tunnel::Tunnels>();
    let (_, t) = tm.by_sw_if(sw, |k| matches!(k, Kind::Gre { .. }))?;
    let mut s = format!("create gre tunnel src {} dst {}", t.src, t.dst);
    if t.kind == (Kind::Gre { teb: true }) {
        s.push_str(" teb");
    }
    s.push_str(&format!(" instance {}", t.instance));
    if t.table_id != 0 {
        s.push_str(&format!(" outer-table-id {}", t.table_id));
    }
    if t.key != 0 {
        s.push_str(&format!(" key {}", t.key));
    }
    Some(s)
}

/// Registers the GRE CLI.
pub fn register_cli(t: &mut CommandTree<Vlib>) {
    t.add(
        "create gre tunnel",
        "create gre tunnel src <addr> dst <addr> [teb] [instance <n>] [outer-table-id <id>] [key <k>] [del]",
        cli_create,
    );
    t.add("show gre tunnel", "show gre tunnel", cli_show);
}
