//! memif's API messages (`api/memif.api`): the same actions the CLI calls.

use crate::{CreateIf, MemifMain};
use sluice_api::{ApiError, ApiRegistry, Ctx, Stream};
use sluice_graph::Vlib;
use sluice_vnet::error::VnetError;
use sluice_vnet::{Interfaces, SwIfIndex};

/// Types generated from `api/memif.api`.
pub mod memif {
    sluice_api::include_api!("memif");
}
use memif as m;

/// Registers the module and its handlers.
pub fn register(r: &mut ApiRegistry) {
    r.module(&m::MODULE);
    r.request(socket_add);
    r.request(socket_del);
    r.dump(socket_dump);
    r.request(create);
    r.request(delete);
    r.dump(dump);
}

type R<T> = Result<T, ApiError>;

fn socket_add(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: m::MemifSocketFilenameAdd,
) -> R<m::MemifSocketFilenameAddReply> {
    crate::create_socket(vm, q.socket_id, &q.socket_filename)?;
    Ok(m::MemifSocketFilenameAddReply {})
}

fn socket_del(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: m::MemifSocketFilenameDel,
) -> R<m::MemifSocketFilenameDelReply> {
    crate::delete_socket(vm, q.socket_id)?;
    Ok(m::MemifSocketFilenameDelReply {})
}

fn socket_dump(
    vm: &mut Vlib,
    _: m::MemifSocketFilenameDump,
    out: &mut Stream<'_, '_, m::MemifSocketFilenameDetails>,
) -> R<()> {
    for (id, path) in crate::sockets(vm) {
        out.send(&m::MemifSocketFilenameDetails {
            socket_id: id,
            socket_filename: path,
        });
    }
    Ok(())
}

fn create(vm: &mut Vlib, _: &mut Ctx<'_>, q: m::MemifCreate) -> R<m::MemifCreateReply> {
    let d = CreateIf::default();
    let nz = |v: u32, def: u32| if v == 0 { def } else { v };
    let c = CreateIf {
        id: q.id,
        socket_id: q.socket_id,
        ring_size: nz(q.ring_size, d.ring_size),
        buffer_size: nz(q.buffer_size, d.buffer_size),
        hw_addr: (q.hw_addr.0 != [0; 6]).then_some(q.hw_addr.0),
        slave: q.is_slave,
        rx_queues: nz(q.rx_queues, 1),
        tx_queues: nz(q.tx_queues, 1),
        ip_mode: q.ip_mode,
        secret: q.secret,
        zero_copy: q.zero_copy,
        // VPP's memif_create has no GSO field: `gso' is CLI-only.
        gso: false,
    };
    let (sw, _) = crate::create_if(vm, &c)?;
    Ok(m::MemifCreateReply { sw_if_index: sw.0 })
}

fn delete(vm: &mut Vlib, _: &mut Ctx<'_>, q: m::MemifDelete) -> R<m::MemifDeleteReply> {
    let name = vm
        .ext_mut::<Interfaces>()
        .get(SwIfIndex(q.sw_if_index))
        .filter(|i| i.driver == "memif")
        .map(|i| i.name.clone())
        .ok_or(VnetError::NoSuchInterface(q.sw_if_index))?;
    crate::delete_if(vm, &name)?;
    Ok(m::MemifDeleteReply {})
}

fn dump(vm: &mut Vlib, _: m::MemifDump, out: &mut Stream<'_, '_, m::MemifDetails>) -> R<()> {
    let created: Vec<(u32, CreateIf)> = vm
        .ext_mut::<MemifMain>()
        .created
        .iter()
        .map(|(k, v)| (*k, v.clone()))
        .collect();
    for (sw, c) in created {
        let (name, link) = vm
            .ext_mut::<Interfaces>()
            .get(SwIfIndex(sw))
            .map(|i| (i.name.clone(), i.link_up()))
            .unwrap_or_default();
        out.send(&m::MemifDetails {
            sw_if_index: sw,
            if_name: name,
            id: c.id,
            socket_id: c.socket_id,
            is_slave: c.slave,
            link_up: link,
        });
    }
    Ok(())
}

/// The lines recreating `sw` (`show running-config`): its socket (idempotent when the same
/// socket is given again), then the interface.
pub fn creator(vm: &mut Vlib, sw: SwIfIndex) -> Option<String> {
    let c = vm.ext_mut::<MemifMain>().created.get(&sw.0)?.clone();
    let path = crate::sockets(vm)
        .into_iter()
        .find(|s| s.0 == c.socket_id)
        .map(|s| s.1)?;
    let mut s = format!(
        "create memif socket id {} filename {path}\ncreate interface memif id {} socket-id {} {}",
        c.socket_id,
        c.id,
        c.socket_id,
        if c.slave { "slave" } else { "master" }
    );
    let d = CreateIf::default();
    if c.ring_size != d.ring_size {
        s.push_str(&format!(" ring-size {}", c.ring_size));
    }
    if c.buffer_size != d.buffer_size {
        s.push_str(&format!(" buffer-size {}", c.buffer_size));
    }
    if c.rx_queues != 1 {
        s.push_str(&format!(" rx-queues {}", c.rx_queues));
    }
    if c.tx_queues != 1 {
        s.push_str(&format!(" tx-queues {}", c.tx_queues));
    }
    if c.ip_mode {
        s.push_str(" mode ip");
    }
    if !c.secret.is_empty() {
        s.push_str(&format!(" secret {}", c.secret));
    }
    if c.zero_copy {
        s.push_str(" zero-copy");
    }
    if c.gso {
        s.push_str(" gso");
    }
    Some(s)
}
