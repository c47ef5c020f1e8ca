//! af_xdp's API messages (`api/af_xdp.api`): the same `create`/`delete` the CLI calls.

use crate::xsk::{ZcMode, MAX_RING, MIN_RING};
use crate::{AfXdpMain, CreateArgs, Queues, UmemChoice};
use sluice_api::{ApiError, ApiRegistry, Ctx, Stream};
use sluice_graph::Vlib;
use sluice_vnet::error::VnetError;
use sluice_vnet::{Interfaces, SwIfIndex};

/// Types generated from `api/af_xdp.api`.
pub mod af_xdp {
    sluice_api::include_api!("af_xdp");
}
use af_xdp as m;

/// Registers the module and its handlers.
pub fn register(r: &mut ApiRegistry) {
    r.module(&m::MODULE);
    r.request(create);
    r.request(delete);
    r.dump(dump);
}

fn ring(what: &str, n: u32) -> Result<u32, VnetError> {
    if n == 0 {
        return Ok(crate::DEFAULT_RING);
    }
    if !n.is_power_of_two() || !(MIN_RING..=MAX_RING).contains(&n) {
        return Err(VnetError::invalid(format!(
            "{what} `{n}' must be a power of two from {MIN_RING} to {MAX_RING}"
        )));
    }
    Ok(n)
}

fn create(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: m::AfXdpCreate,
) -> Result<m::AfXdpCreateReply, ApiError> {
    let host = sluice_vnet::devices::linux::linux_name("Linux interface name", &q.host_if)
        .map_err(|e| VnetError::invalid(e.msg))?;
    if q.rxq_num > crate::MAX_QUEUES {
        return Err(VnetError::invalid(format!(
            "rxq_num {} out of range 1..{}",
            q.rxq_num,
            crate::MAX_QUEUES
        ))
        .into());
    }
    let c = CreateArgs {
        host,
        name: (!q.name.is_empty()).then_some(q.name),
        queues: if q.rxq_all {
            Queues::All
        } else {
            Queues::N(q.rxq_num.max(1))
        },
        rx_size: ring("rxq_size", q.rxq_size)?,
        tx_size: ring("txq_size", q.txq_size)?,
        mode: match q.mode {
            m::AfXdpMode::Auto => ZcMode::Auto,
            m::AfXdpMode::ZeroCopy => ZcMode::ZeroCopy,
            m::AfXdpMode::Copy => ZcMode::Copy,
        },
        generic: q.generic_xdp,
        prog: (!q.prog.is_empty()).then_some(q.prog),
        umem: match q.umem {
            m::AfXdpUmem::Auto => UmemChoice::Auto,
            m::AfXdpUmem::Arena => UmemChoice::Arena,
            m::AfXdpUmem::Own => UmemChoice::Own,
        },
    };
    let (name, note) = crate::create(vm, &c)?;
    let sw = vm
        .ext_mut::<Interfaces>()
        .find(&name)
        .ok_or_else(|| VnetError::System(format!("{name} vanished")))?;
    Ok(m::AfXdpCreateReply {
        sw_if_index: sw.0,
        note: note.unwrap_or_default(),
    })
}

fn delete(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: m::AfXdpDelete,
) -> Result<m::AfXdpDeleteReply, ApiError> {
    let name = vm
        .ext_mut::<Interfaces>()
        .get(SwIfIndex(q.sw_if_index))
        .map(|i| i.name.clone())
        .ok_or(VnetError::NoSuchInterface(q.sw_if_index))?;
    crate::delete(vm, &name)?;
    Ok(m::AfXdpDeleteReply {})
}

fn dump(
    vm: &mut Vlib,
    _: m::AfXdpDump,
    out: &mut Stream<'_, '_, m::AfXdpDetails>,
) -> Result<(), ApiError> {
    for d in &vm.ext_mut::<AfXdpMain>().devs {
        out.send(&m::AfXdpDetails {
            sw_if_index: d.sw_if.0,
            name: d.name.clone(),
            host_if: d.host.clone(),
            rx_queues: d.queues.len() as u32,
            native: d.native,
            arena: d.arena,
        });
    }
    Ok(())
}

/// The `create interface af_xdp` line recreating `sw` (`show running-config`).
pub fn creator(vm: &mut Vlib, sw: SwIfIndex) -> Option<String> {
    let m = vm.ext_mut::<AfXdpMain>();
    let d = m.devs.iter().find(|d| d.sw_if == sw)?;
    let a = &d.args;
    let mut s = format!("create interface af_xdp host-if {} name {}", a.host, d.name);
    match a.queues {
        Queues::All => s.push_str(" num-rx-queues all"),
        Queues::N(1) => {}
        Queues::N(n) => s.push_str(&format!(" num-rx-queues {n}")),
    }
    s.push_str(&format!(
        " rx-queue-size {} tx-queue-size {}",
        a.rx_size, a.tx_size
    ));
    match a.mode {
        ZcMode::Auto => {}
        ZcMode::ZeroCopy => s.push_str(" zero-copy"),
        ZcMode::Copy => s.push_str(" no-zero-copy"),
    }
    if a.generic {
        s.push_str(" generic-xdp");
    }
    if let Some(p) = &a.prog {
        s.push_str(&format!(" prog {p}"));
    }
    s.push_str(match a.umem {
        UmemChoice::Auto => "",
        UmemChoice::Arena => " umem arena",
        UmemChoice::Own => " umem own",
    });
    Some(s)
}
