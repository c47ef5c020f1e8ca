//! The tunnels' API messages (`api/*.api`): the same actions the CLI calls.

use crate::srv6::{self, Behavior};
use crate::tunnel::{Kind, Tunnels};
use crate::vxlan::{self, VxlanArgs};
use sluice_api::{ApiError, ApiRegistry, Ctx, Stream};
use sluice_graph::Vlib;
use sluice_vnet::error::VnetError;
use sluice_vnet::SwIfIndex;
use std::net::{IpAddr, Ipv6Addr};

/// Types generated from `api/vxlan.api`.
pub mod vxlan_api {
    sluice_api::include_api!("vxlan");
}
use vxlan_api as m;

/// "Any"/"pick one" on the wire (VPP's ~0), never stored.
const ANY: u32 = u32::MAX;

/// Registers the VXLAN module and its handlers.
pub fn register_vxlan(r: &mut ApiRegistry) {
    r.module(&m::MODULE);
    r.request(vxlan_add_del_tunnel);
    r.dump(vxlan_tunnel_dump);
}

fn vxlan_add_del_tunnel(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: m::VxlanAddDelTunnel,
) -> Result<m::VxlanAddDelTunnelReply, ApiError> {
    let a = VxlanArgs {
        is_add: q.is_add,
        src: q.src_address,
        dst: q.dst_address,
        vni: q.vni,
        instance: (q.instance != ANY).then_some(q.instance),
        decap_next: (!q.decap_next_node.is_empty()).then(|| q.decap_next_node.clone()),
        encap_vrf_id: q.encap_vrf_id,
        mcast_if: q
            .dst_address
            .is_multicast()
            .then_some(SwIfIndex(q.mcast_sw_if_index)),
    };
    let sw = vxlan::add_del(vm, &a)?;
    Ok(m::VxlanAddDelTunnelReply { sw_if_index: sw.0 })
}

fn vxlan_tunnel_dump(
    vm: &mut Vlib,
    q: m::VxlanTunnelDump,
    out: &mut Stream<'_, '_, m::VxlanTunnelDetails>,
) -> Result<(), ApiError> {
    for (_, t) in vm.ext_mut::<Tunnels>().iter_kind(|k| k == Kind::Vxlan) {
        if q.sw_if_index != ANY && q.sw_if_index != t.sw_if.0 {
            continue;
        }
        out.send(&m::VxlanTunnelDetails {
            sw_if_index: t.sw_if.0,
            instance: t.instance,
            src_address: t.src,
            dst_address: t.dst,
            mcast_sw_if_index: t.mcast_if.map_or(ANY, |m| m.0),
            encap_vrf_id: t.table_id,
            decap_next_node: t.decap_next.clone().unwrap_or_default(),
            vni: t.key,
        });
    }
    Ok(())
}

/// Types generated from `api/gre.api`.
pub mod gre_api {
    sluice_api::include_api!("gre");
}

/// Registers the GRE module and its handlers.
pub fn register_gre(r: &mut ApiRegistry) {
    r.module(&gre_api::MODULE);
    r.request(gre_tunnel_add_del);
    r.dump(gre_tunnel_dump);
}

fn gre_tunnel_add_del(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: gre_api::GreTunnelAddDel,
) -> Result<gre_api::GreTunnelAddDelReply, ApiError> {
    let a = crate::gre::GreArgs {
        is_add: q.is_add,
        src: q.src_address,
        dst: q.dst_address,
        teb: q.teb,
        key: q.key,
        instance: (q.instance != ANY).then_some(q.instance),
        outer_table_id: q.outer_table_id,
    };
    let sw = crate::gre::add_del(vm, &a)?;
    Ok(gre_api::GreTunnelAddDelReply { sw_if_index: sw.0 })
}

fn gre_tunnel_dump(
    vm: &mut Vlib,
    q: gre_api::GreTunnelDump,
    out: &mut Stream<'_, '_, gre_api::GreTunnelDetails>,
) -> Result<(), ApiError> {
    for (_, t) in vm
        .ext_mut::<Tunnels>()
        .iter_kind(|k| matches!(k, Kind::Gre { .. }))
    {
        if q.sw_if_index != ANY && q.sw_if_index != t.sw_if.0 {
            continue;
        }
        out.send(&gre_api::GreTunnelDetails {
            sw_if_index: t.sw_if.0,
            teb: t.kind == (Kind::Gre { teb: true }),
            instance: t.instance,
            src_address: t.src,
            dst_address: t.dst,
            outer_table_id: t.table_id,
            key: t.key,
        });
    }
    Ok(())
}

/// Types generated from `api/ipip.api`.
pub mod ipip_api {
    sluice_api::include_api!("ipip");
}

/// Registers the IP-in-IP module and its handlers.
pub fn register_ipip(r: &mut ApiRegistry) {
    r.module(&ipip_api::MODULE);
    r.request(ipip_add_tunnel);
    r.request(ipip_del_tunnel);
    r.dump(ipip_tunnel_dump);
}

fn ipip_add_tunnel(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: ipip_api::IpipAddTunnel,
) -> Result<ipip_api::IpipAddTunnelReply, ApiError> {
    let a = crate::ipip::IpipArgs {
        src: q.src_address,
        dst: q.dst_address,
        instance: (q.instance != ANY).then_some(q.instance),
        table_id: q.table_id,
    };
    let sw = crate::ipip::add(vm, &a)?;
    Ok(ipip_api::IpipAddTunnelReply { sw_if_index: sw.0 })
}

fn ipip_del_tunnel(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: ipip_api::IpipDelTunnel,
) -> Result<ipip_api::IpipDelTunnelReply, ApiError> {
    crate::ipip::del(vm, SwIfIndex(q.sw_if_index))?;
    Ok(ipip_api::IpipDelTunnelReply {})
}

fn ipip_tunnel_dump(
    vm: &mut Vlib,
    q: ipip_api::IpipTunnelDump,
    out: &mut Stream<'_, '_, ipip_api::IpipTunnelDetails>,
) -> Result<(), ApiError> {
    for (_, t) in vm.ext_mut::<Tunnels>().iter_kind(|k| k == Kind::Ipip) {
        if q.sw_if_index != ANY && q.sw_if_index != t.sw_if.0 {
            continue;
        }
        out.send(&ipip_api::IpipTunnelDetails {
            sw_if_index: t.sw_if.0,
            instance: t.instance,
            src_address: t.src,
            dst_address: t.dst,
            table_id: t.table_id,
        });
    }
    Ok(())
}

/// Types generated from `api/gtpu.api`.
pub mod gtpu_api {
    sluice_api::include_api!("gtpu");
}

/// Registers the GTP-U module and its handlers.
pub fn register_gtpu(r: &mut ApiRegistry) {
    r.module(&gtpu_api::MODULE);
    r.request(gtpu_add_del_tunnel);
    r.dump(gtpu_tunnel_dump);
}

fn gtpu_add_del_tunnel(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: gtpu_api::GtpuAddDelTunnel,
) -> Result<gtpu_api::GtpuAddDelTunnelReply, ApiError> {
    use crate::gtpu::{DecapNext, GtpuArgs};
    let a = GtpuArgs {
        is_add: q.is_add,
        src: q.src_address,
        dst: q.dst_address,
        teid: q.teid,
        tteid: if q.tteid == 0 { q.teid } else { q.tteid },
        encap_vrf_id: q.encap_vrf_id,
        instance: (q.instance != ANY).then_some(q.instance),
        decap_next: match q.decap_next.as_str() {
            "" => DecapNext::Ip,
            w => DecapNext::parse(w)?,
        },
    };
    let sw = crate::gtpu::add_del(vm, &a)?;
    Ok(gtpu_api::GtpuAddDelTunnelReply { sw_if_index: sw.0 })
}

fn gtpu_tunnel_dump(
    vm: &mut Vlib,
    q: gtpu_api::GtpuTunnelDump,
    out: &mut Stream<'_, '_, gtpu_api::GtpuTunnelDetails>,
) -> Result<(), ApiError> {
    for t in crate::gtpu::tunnels(vm) {
        if q.sw_if_index != ANY && q.sw_if_index != t.sw_if.0 {
            continue;
        }
        out.send(&gtpu_api::GtpuTunnelDetails {
            sw_if_index: t.sw_if.0,
            instance: t.instance,
            src_address: t.src,
            dst_address: t.dst,
            encap_vrf_id: t.encap_vrf_id,
            decap_next: t.decap_next.name().into(),
            teid: t.teid,
            tteid: t.tteid,
        });
    }
    Ok(())
}

/// Types generated from `api/sr.api`.
pub mod sr_api {
    sluice_api::include_api!("sr");
}

/// Registers the SRv6 module and its handlers.
pub fn register_sr(r: &mut ApiRegistry) {
    r.module(&sr_api::MODULE);
    r.request(sr_set_encap_source);
    r.request(sr_policy_add);
    r.request(sr_policy_del);
    r.dump(sr_policies_dump);
    r.request(sr_steering_add_del);
    r.dump(sr_steering_pol_dump);
    r.request(sr_localsid_add_del);
    r.dump(sr_localsids_dump);
}

/// An IPv6 address field.
fn v6(a: IpAddr, what: &str) -> Result<Ipv6Addr, VnetError> {
    match a {
        IpAddr::V6(a) => Ok(a),
        IpAddr::V4(a) => Err(VnetError::invalid(format!(
            "{what} {a} is not an IPv6 address"
        ))),
    }
}

fn sr_set_encap_source(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: sr_api::SrSetEncapSource,
) -> Result<sr_api::SrSetEncapSourceReply, ApiError> {
    srv6::set_source(vm, v6(q.encaps_source, "encaps source")?)?;
    Ok(sr_api::SrSetEncapSourceReply {})
}

fn sr_policy_add(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: sr_api::SrPolicyAdd,
) -> Result<sr_api::SrPolicyAddReply, ApiError> {
    let segs = q
        .sids
        .iter()
        .map(|&s| v6(s, "segment"))
        .collect::<Result<Vec<_>, _>>()?;
    let sw = srv6::policy_add(
        vm,
        v6(q.bsid_addr, "bsid")?,
        &segs,
        q.fib_table,
        !q.is_encap,
        (q.instance != ANY).then_some(q.instance),
    )?;
    Ok(sr_api::SrPolicyAddReply { sw_if_index: sw.0 })
}

fn sr_policy_del(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: sr_api::SrPolicyDel,
) -> Result<sr_api::SrPolicyDelReply, ApiError> {
    srv6::policy_del(vm, v6(q.bsid_addr, "bsid")?)?;
    Ok(sr_api::SrPolicyDelReply {})
}

fn sr_policies_dump(
    vm: &mut Vlib,
    _: sr_api::SrPoliciesDump,
    out: &mut Stream<'_, '_, sr_api::SrPoliciesDetails>,
) -> Result<(), ApiError> {
    for p in &vm.ext_mut::<srv6::Srv6>().policies {
        out.send(&sr_api::SrPoliciesDetails {
            bsid_addr: p.bsid.into(),
            is_encap: !p.insert,
            fib_table: p.table_id,
            sw_if_index: p.sw.0,
            encaps_source: p.src.unwrap_or(std::net::Ipv6Addr::UNSPECIFIED).into(),
            sids: p.segs.iter().map(|&s| s.into()).collect(),
        });
    }
    Ok(())
}

fn sr_steering_add_del(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: sr_api::SrSteeringAddDel,
) -> Result<sr_api::SrSteeringAddDelReply, ApiError> {
    let max = if q.prefix.addr.is_ipv4() { 32 } else { 128 };
    if q.prefix.len > max {
        return Err(VnetError::invalid(format!("prefix length {} > {max}", q.prefix.len)).into());
    }
    let s = srv6::Steer {
        prefix: q.prefix.addr,
        len: q.prefix.len,
        table_id: q.table_id,
        bsid: v6(q.bsid_addr, "bsid")?,
    };
    srv6::steer(vm, !q.is_del, s)?;
    Ok(sr_api::SrSteeringAddDelReply {})
}

fn sr_steering_pol_dump(
    vm: &mut Vlib,
    _: sr_api::SrSteeringPolDump,
    out: &mut Stream<'_, '_, sr_api::SrSteeringPolDetails>,
) -> Result<(), ApiError> {
    for s in &vm.ext_mut::<srv6::Srv6>().steers {
        out.send(&sr_api::SrSteeringPolDetails {
            bsid_addr: s.bsid.into(),
            table_id: s.table_id,
            prefix: sluice_api::types::Prefix {
                addr: s.prefix,
                len: s.len,
            },
        });
    }
    Ok(())
}

fn sr_localsid_add_del(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: sr_api::SrLocalsidAddDel,
) -> Result<sr_api::SrLocalsidAddDelReply, ApiError> {
    use sr_api::SrBehavior as B;
    let addr = v6(q.localsid, "localsid")?;
    if q.is_del {
        srv6::localsid_del(vm, addr, q.fib_table)?;
        return Ok(sr_api::SrLocalsidAddDelReply { sw_if_index: ANY });
    }
    let sw = SwIfIndex(q.sw_if_index);
    let bad_nh =
        |v: u8| VnetError::invalid(format!("next hop {} is not an IPv{v} address", q.nh_addr));
    let b = match q.behavior {
        B::End => Behavior::End,
        B::EndX => match q.nh_addr {
            IpAddr::V6(nh) => Behavior::EndX { sw, nh },
            IpAddr::V4(_) => return Err(bad_nh(6).into()),
        },
        B::EndDx2 => Behavior::Dx2 { sw },
        B::EndDx4 => match q.nh_addr {
            IpAddr::V4(nh) => Behavior::Dx4 { sw, nh },
            IpAddr::V6(_) => return Err(bad_nh(4).into()),
        },
        B::EndDx6 => match q.nh_addr {
            IpAddr::V6(nh) => Behavior::Dx6 { sw, nh },
            IpAddr::V4(_) => return Err(bad_nh(6).into()),
        },
        B::EndDt4 => Behavior::Dt4 { table: q.vrf_table },
        B::EndDt6 => Behavior::Dt6 { table: q.vrf_table },
    };
    let instance = (q.instance != ANY).then_some(q.instance);
    let sw = srv6::localsid_add(vm, addr, b, q.fib_table, instance)?;
    Ok(sr_api::SrLocalsidAddDelReply { sw_if_index: sw.0 })
}

fn sr_localsids_dump(
    vm: &mut Vlib,
    _: sr_api::SrLocalsidsDump,
    out: &mut Stream<'_, '_, sr_api::SrLocalsidsDetails>,
) -> Result<(), ApiError> {
    use sr_api::SrBehavior as B;
    let none = IpAddr::V6(Ipv6Addr::UNSPECIFIED);
    for s in &vm.ext_mut::<srv6::Srv6>().sids {
        let (behavior, nh, x) = match s.behavior {
            Behavior::End => (B::End, none, ANY),
            Behavior::EndX { sw, nh } => (B::EndX, nh.into(), sw.0),
            Behavior::Dx2 { sw } => (B::EndDx2, none, sw.0),
            Behavior::Dx4 { sw, nh } => (B::EndDx4, nh.into(), sw.0),
            Behavior::Dx6 { sw, nh } => (B::EndDx6, nh.into(), sw.0),
            Behavior::Dt4 { table } => (B::EndDt4, none, table),
            Behavior::Dt6 { table } => (B::EndDt6, none, table),
        };
        out.send(&sr_api::SrLocalsidsDetails {
            addr: s.addr.into(),
            behavior,
            fib_table: s.table_id,
            sw_if_index: s.sw.0,
            xconnect_nh_addr: nh,
            xconnect_iface_or_vrf_table: x,
        });
    }
    Ok(())
}
