//! af_packet's API messages (`api/af_packet.api`): the same `create`/`delete` the CLI calls.

use crate::{AfPacketMain, CreateArgs};
use sluice_api::{ApiError, ApiRegistry, Ctx, Stream};
use sluice_graph::Vlib;
use sluice_vnet::error::VnetError;
use sluice_vnet::Interfaces;

/// Types generated from `api/af_packet.api`.
pub mod af_packet {
    sluice_api::include_api!("af_packet");
}
use af_packet as m;

/// Registers the module and its handlers.
pub fn register(r: &mut ApiRegistry) {
    r.module(&m::MODULE);
    r.request(create);
    r.request(delete);
    r.dump(dump);
}

fn create(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: m::AfPacketCreate,
) -> Result<m::AfPacketCreateReply, ApiError> {
    let host = sluice_vnet::devices::linux::linux_name("Linux interface name", &q.host_if_name)
        .map_err(|e| VnetError::invalid(e.msg))?;
    for (what, n) in [("rx_queues", q.rx_queues), ("tx_queues", q.tx_queues)] {
        if n > crate::MAX_QUEUES {
            return Err(VnetError::invalid(format!(
                "{what} {n} out of range 1..{}",
                crate::MAX_QUEUES
            ))
            .into());
        }
    }
    let c = CreateArgs {
        host,
        rx_queues: q.rx_queues.max(1),
        tx_queues: (q.tx_queues != 0).then_some(q.tx_queues),
        hw_addr: (q.hw_addr.0 != [0; 6]).then_some(q.hw_addr.0),
        qdisc_bypass: !q.qdisc_bypass_disable,
        v2: q.v2,
        gso: true,
    };
    let name = crate::create(vm, &c)?;
    let sw = vm
        .ext_mut::<Interfaces>()
        .find(&name)
        .ok_or_else(|| VnetError::System(format!("{name} vanished")))?;
    Ok(m::AfPacketCreateReply { sw_if_index: sw.0 })
}

fn delete(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: m::AfPacketDelete,
) -> Result<m::AfPacketDeleteReply, ApiError> {
    crate::delete(vm, &q.host_if_name)?;
    Ok(m::AfPacketDeleteReply {})
}

fn dump(
    vm: &mut Vlib,
    _: m::AfPacketDump,
    out: &mut Stream<'_, '_, m::AfPacketDetails>,
) -> Result<(), ApiError> {
    for d in &vm.ext_mut::<AfPacketMain>().devs {
        out.send(&m::AfPacketDetails {
            sw_if_index: d.sw_if.0,
            host_if_name: d.host.clone(),
            rx_queues: d.rx.len() as u32,
            tx_queues: d.tx.len() as u32,
        });
    }
    Ok(())
}

/// The `create host-interface` line recreating `sw` (`show running-config`).
pub fn creator(vm: &mut Vlib, sw: sluice_vnet::SwIfIndex) -> Option<String> {
    let m = vm.ext_mut::<AfPacketMain>();
    let d = m.devs.iter().find(|d| d.sw_if == sw)?;
    let mut s = format!("create host-interface name {}", d.args.host);
    if d.args.rx_queues != 1 {
        s.push_str(&format!(" num-rx-queues {}", d.args.rx_queues));
    }
    if let Some(t) = d.args.tx_queues {
        s.push_str(&format!(" num-tx-queues {t}"));
    }
    if !d.args.qdisc_bypass {
        s.push_str(" qdisc-bypass-disable");
    }
    if d.args.v2 {
        s.push_str(" v2");
    }
    Some(s)
}
