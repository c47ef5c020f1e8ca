//! acl's API messages (`api/acl.api`): session timeouts, clearing and dumping sessions,
//! calling the same actions as the CLI.

use crate::{clear_sessions, sessions, set_timeout, TimeoutKind};
use sluice_api::{ApiError, ApiRegistry, Ctx, Stream};
use sluice_graph::Vlib;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Types generated from `api/acl.api`.
pub mod acl {
    sluice_api::include_api!("acl");
}
use acl as m;

/// Registers the module and its handlers.
pub fn register(r: &mut ApiRegistry) {
    r.module(&m::MODULE);
    r.request(timeout_set);
    r.request(sessions_clear);
    r.dump(session_dump);
}

fn timeout_set(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: m::AclSessionTimeoutSet,
) -> Result<m::AclSessionTimeoutSetReply, ApiError> {
    let which = match q.which {
        m::AclTimeout::UdpIdle => TimeoutKind::UdpIdle,
        m::AclTimeout::TcpIdle => TimeoutKind::TcpIdle,
        m::AclTimeout::TcpTransient => TimeoutKind::TcpTransient,
    };
    set_timeout(vm, which, q.seconds)?;
    Ok(m::AclSessionTimeoutSetReply {})
}

fn sessions_clear(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    _: m::AclSessionsClear,
) -> Result<m::AclSessionsClearReply, ApiError> {
    Ok(m::AclSessionsClearReply {
        cleared: clear_sessions(vm) as u32,
    })
}

fn addr(v6: bool, a: u128) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(a))
    } else {
        IpAddr::V4(Ipv4Addr::from(a as u32))
    }
}

fn session_dump(
    vm: &mut Vlib,
    _: m::AclSessionDump,
    out: &mut Stream<'_, '_, m::AclSessionDetails>,
) -> Result<(), ApiError> {
    let now = vm.shared.clock.now_secs();
    for (thread, s) in sessions(vm) {
        let k = &s.key;
        let (i, r) = if s.init_lo {
            (k.lo, k.hi)
        } else {
            (k.hi, k.lo)
        };
        out.send(&m::AclSessionDetails {
            thread_index: thread as u32,
            sw_if_index: k.sw_if,
            is_output: s.out,
            proto: k.proto,
            initiator: addr(k.v6, i.0),
            initiator_port: i.1,
            responder: addr(k.v6, r.0),
            responder_port: r.1,
            state: s.state().to_string(),
            packets_initiator: s.pkts[0],
            packets_responder: s.pkts[1],
            idle_seconds: now - s.last,
        });
    }
    Ok(())
}
