//! The tunnels' API messages (`api/*.api`): the same actions the CLI calls.

use crate::tunnel::{Kind, Tunnels};
use crate::vxlan::{self, VxlanArgs};
use sluice_api::{ApiError, ApiRegistry, Ctx, Stream};
use sluice_graph::Vlib;

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
    crate::ipip::del(vm, sluice_vnet::SwIfIndex(q.sw_if_index))?;
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
