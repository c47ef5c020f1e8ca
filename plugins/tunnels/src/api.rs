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
