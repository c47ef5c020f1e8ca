//! tap's API messages (`api/tap.api`): the same `create`/`delete` the CLI calls.

use crate::{CreateArgs, TapMain};
use sluice_api::{ApiError, ApiRegistry, Ctx, Stream};
use sluice_graph::Vlib;
use sluice_vnet::error::VnetError;
use sluice_vnet::{Interfaces, SwIfIndex};

/// Types generated from `api/tap.api`.
pub mod tap {
    sluice_api::include_api!("tap");
}
use tap as m;

/// Registers the module and its handlers.
pub fn register(r: &mut ApiRegistry) {
    r.module(&m::MODULE);
    r.request(create);
    r.request(delete);
    r.dump(dump);
}

fn opt(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

fn create(vm: &mut Vlib, _: &mut Ctx<'_>, q: m::TapCreate) -> Result<m::TapCreateReply, ApiError> {
    let bad = |what: &str, v: &str| VnetError::invalid(format!("bad {what} `{v}'"));
    let host_ip4_gw = match opt(q.host_ip4_gw) {
        Some(g) => Some(g.parse().map_err(|_| bad("host_ip4_gw", &g))?),
        None => None,
    };
    let host_ip6_gw = match opt(q.host_ip6_gw) {
        Some(g) => Some(g.parse().map_err(|_| bad("host_ip6_gw", &g))?),
        None => None,
    };
    for (what, p, v6) in [
        ("host_ip4_prefix", &q.host_ip4_prefix, false),
        ("host_ip6_prefix", &q.host_ip6_prefix, true),
    ] {
        if !p.is_empty() && !crate::valid_prefix(p, v6) {
            return Err(bad(what, p).into());
        }
    }
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
        id: q.id_valid.then_some(q.id),
        hw_addr: (q.hw_addr.0 != [0; 6]).then_some(q.hw_addr.0),
        host_if: opt(q.host_if_name),
        host_ns: opt(q.host_namespace),
        host_ip4: opt(q.host_ip4_prefix),
        host_ip6: opt(q.host_ip6_prefix),
        host_ip4_gw,
        host_ip6_gw,
        host_mac: (q.host_mac_addr.0 != [0; 6]).then_some(q.host_mac_addr.0),
        host_mtu: (q.host_mtu_size != 0).then_some(q.host_mtu_size),
        host_bridge: opt(q.host_bridge),
        rx_queues: q.rx_queues.max(1),
        tx_queues: (q.tx_queues != 0).then_some(q.tx_queues),
        driver: None,
        no_gso: false,
    };
    let name = crate::create(vm, &c)?;
    let sw = vm
        .ext_mut::<Interfaces>()
        .find(&name)
        .ok_or_else(|| VnetError::System(format!("{name} vanished")))?;
    Ok(m::TapCreateReply { sw_if_index: sw.0 })
}

fn delete(vm: &mut Vlib, _: &mut Ctx<'_>, q: m::TapDelete) -> Result<m::TapDeleteReply, ApiError> {
    let name = vm
        .ext_mut::<Interfaces>()
        .get(SwIfIndex(q.sw_if_index))
        .map(|i| i.name.clone())
        .ok_or(VnetError::NoSuchInterface(q.sw_if_index))?;
    crate::delete(vm, &name)?;
    Ok(m::TapDeleteReply {})
}

fn dump(
    vm: &mut Vlib,
    _: m::TapDump,
    out: &mut Stream<'_, '_, m::TapDetails>,
) -> Result<(), ApiError> {
    for d in &vm.ext_mut::<TapMain>().devs {
        out.send(&m::TapDetails {
            sw_if_index: d.sw_if.0,
            id: d.id,
            host_if_name: d.host_if.clone(),
            host_namespace: d.host_ns.clone().unwrap_or_default(),
            mtu: d.mtu,
            rx_queues: d.rx.len() as u32,
            tx_queues: d.n_tx as u32,
        });
    }
    Ok(())
}

/// The `create tap` line recreating `sw` (`show running-config`).
pub fn creator(vm: &mut Vlib, sw: SwIfIndex) -> Option<String> {
    let m = vm.ext_mut::<TapMain>();
    let d = m.devs.iter().find(|d| d.sw_if == sw)?;
    let a = &d.args;
    let mut s = format!("create tap id {}", d.id);
    if a.rx_queues != 1 {
        s.push_str(&format!(" num-rx-queues {}", a.rx_queues));
    }
    if let Some(t) = a.tx_queues {
        s.push_str(&format!(" num-tx-queues {t}"));
    }
    if a.no_gso {
        s.push_str(" no-gso");
    }
    for (k, v) in [
        ("host-if-name", &a.host_if),
        ("host-ns", &a.host_ns),
        ("host-bridge", &a.host_bridge),
        ("host-ip4-addr", &a.host_ip4),
        ("host-ip6-addr", &a.host_ip6),
    ] {
        if let Some(v) = v {
            s.push_str(&format!(" {k} {v}"));
        }
    }
    if let Some(g) = a.host_ip4_gw {
        s.push_str(&format!(" host-ip4-gw {g}"));
    }
    if let Some(g) = a.host_ip6_gw {
        s.push_str(&format!(" host-ip6-gw {g}"));
    }
    if let Some(mac) = a.host_mac {
        s.push_str(&format!(" host-mac-addr {}", sluice_wire::Mac(mac)));
    }
    if let Some(mtu) = a.host_mtu {
        s.push_str(&format!(" host-mtu-size {mtu}"));
    }
    Some(s)
}
