//! acl's API messages (`api/acl.api`): ACLs (add/replace, delete, dump with hit counts),
//! interface lists (add/delete one, set both, dump), session timeouts, clearing and dumping
//! sessions — calling the same actions as the CLI.

use crate::rules::{self, Action, Rule};
use crate::{
    acl_add_replace, acl_del, acls_with_hits, clear_sessions, interface_add_del, interface_lists,
    interface_set_lists, sessions, set_timeout, TimeoutKind,
};
use sluice_api::types::Prefix;
use sluice_api::{ApiError, ApiRegistry, Ctx, Stream};
use sluice_graph::Vlib;
use sluice_vnet::error::VnetError;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// `acl_index` / `sw_if_index` meaning "any" or "a new one".
const ANY: u32 = u32::MAX;

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
    r.request(add_replace);
    r.request(del);
    r.dump(dump);
    r.request(interface_add_del_h);
    r.request(interface_set_acl_list);
    r.dump(interface_list_dump);
}

/// A rule from its message; `j` names it in errors.
fn rule_in(j: usize, x: &m::AclRule) -> Result<Rule, VnetError> {
    let bad = |e: String| VnetError::Invalid(format!("rule {j}: {e}"));
    let v6 = x.src_prefix.addr.is_ipv6();
    if x.dst_prefix.addr.is_ipv6() != v6 {
        return Err(bad("src and dst prefixes of different families".into()));
    }
    let p = |pf: &Prefix| -> Result<(u128, u8), VnetError> {
        let (a, max) = match pf.addr {
            IpAddr::V4(a) => (u32::from(a) as u128, 32),
            IpAddr::V6(a) => (u128::from(a), 128),
        };
        if pf.len > max {
            return Err(bad(format!("prefix `{pf}': length over {max}")));
        }
        Ok((rules::mask(a, pf.len, v6), pf.len))
    };
    let r = Rule {
        action: match x.is_permit {
            m::AclAction::Deny => Action::Deny,
            m::AclAction::Permit => Action::Permit,
            m::AclAction::PermitReflect => Action::PermitReflect,
        },
        v6,
        src: p(&x.src_prefix)?,
        dst: p(&x.dst_prefix)?,
        proto: (x.proto != 0).then_some(x.proto),
        sport: (x.srcport_or_icmptype_first, x.srcport_or_icmptype_last),
        dport: (x.dstport_or_icmpcode_first, x.dstport_or_icmpcode_last),
        tcp_flags: (x.tcp_flags_value, x.tcp_flags_mask),
    };
    crate::check_rule(&r).map_err(bad)?;
    Ok(r)
}

fn rule_out(r: &Rule) -> m::AclRule {
    let p = |(a, len): (u128, u8)| Prefix {
        addr: addr(r.v6, a),
        len,
    };
    m::AclRule {
        is_permit: match r.action {
            Action::Deny => m::AclAction::Deny,
            Action::Permit => m::AclAction::Permit,
            Action::PermitReflect => m::AclAction::PermitReflect,
        },
        src_prefix: p(r.src),
        dst_prefix: p(r.dst),
        proto: r.proto.unwrap_or(0),
        srcport_or_icmptype_first: r.sport.0,
        srcport_or_icmptype_last: r.sport.1,
        dstport_or_icmpcode_first: r.dport.0,
        dstport_or_icmpcode_last: r.dport.1,
        tcp_flags_mask: r.tcp_flags.1,
        tcp_flags_value: r.tcp_flags.0,
    }
}

fn add_replace(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: m::AclAddReplace,
) -> Result<m::AclAddReplaceReply, ApiError> {
    if q.r.is_empty() {
        return Err(VnetError::invalid("an ACL needs at least one rule").into());
    }
    let rules =
        q.r.iter()
            .enumerate()
            .map(|(j, x)| rule_in(j, x))
            .collect::<Result<Vec<_>, _>>()?;
    let index = (q.acl_index != ANY).then_some(q.acl_index);
    let acl_index = acl_add_replace(vm, index, rules, q.tag)?;
    Ok(m::AclAddReplaceReply { acl_index })
}

fn del(vm: &mut Vlib, _: &mut Ctx<'_>, q: m::AclDel) -> Result<m::AclDelReply, ApiError> {
    acl_del(vm, q.acl_index)?;
    Ok(m::AclDelReply {})
}

fn dump(
    vm: &mut Vlib,
    q: m::AclDump,
    out: &mut Stream<'_, '_, m::AclDetails>,
) -> Result<(), ApiError> {
    let all = acls_with_hits(vm);
    if q.acl_index != ANY && !all.iter().any(|(i, _, _)| *i == q.acl_index) {
        return Err(VnetError::NotFound(format!("acl `{}' does not exist", q.acl_index)).into());
    }
    for (i, acl, hits) in all {
        if q.acl_index != ANY && q.acl_index != i {
            continue;
        }
        out.send(&m::AclDetails {
            acl_index: i,
            tag: acl.tag,
            r: acl.rules.iter().map(rule_out).collect(),
            hits,
        });
    }
    Ok(())
}

fn interface_add_del_h(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: m::AclInterfaceAddDel,
) -> Result<m::AclInterfaceAddDelReply, ApiError> {
    interface_add_del(vm, q.sw_if_index, !q.is_input, q.acl_index, !q.is_add)?;
    Ok(m::AclInterfaceAddDelReply {})
}

fn interface_set_acl_list(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: m::AclInterfaceSetAclList,
) -> Result<m::AclInterfaceSetAclListReply, ApiError> {
    let n = q.n_input as usize;
    if n > q.acls.len() {
        return Err(VnetError::Invalid(format!(
            "n_input `{n}' larger than the {} ACLs given",
            q.acls.len()
        ))
        .into());
    }
    let mut input = q.acls;
    let output = input.split_off(n);
    interface_set_lists(vm, q.sw_if_index, input, output)?;
    Ok(m::AclInterfaceSetAclListReply {})
}

fn interface_list_dump(
    vm: &mut Vlib,
    q: m::AclInterfaceListDump,
    out: &mut Stream<'_, '_, m::AclInterfaceListDetails>,
) -> Result<(), ApiError> {
    for (sw, (input, output)) in interface_lists(vm) {
        if q.sw_if_index != ANY && q.sw_if_index != sw {
            continue;
        }
        if input.len() > u8::MAX as usize {
            return Err(VnetError::NotSupported(format!(
                "sw_if_index {sw}: more than 255 input ACLs do not fit n_input"
            ))
            .into());
        }
        out.send(&m::AclInterfaceListDetails {
            sw_if_index: sw,
            n_input: input.len() as u8,
            acls: input.into_iter().chain(output).collect(),
        });
    }
    Ok(())
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
        let k = s.key();
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
