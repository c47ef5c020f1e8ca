//! nat44's API messages (`api/nat44.api`, VPP's nat44-ed messages): enable/disable, pool
//! addresses, interface roles, static and identity mappings, timeouts, clearing sessions,
//! and dumps of each — calling the same actions as the CLI ([`crate::ops`]).

use crate::config::{role, AddrSrc, Timeouts};
use crate::session::sflags;
use crate::{lock, ops, DEFAULT_SESSIONS};
use sluice_api::{ApiError, ApiRegistry, Ctx, Stream};
use sluice_graph::Vlib;
use sluice_vnet::error::VnetError;
use std::net::{IpAddr, Ipv4Addr};

/// Types generated from `api/nat44.api`.
pub mod nat44 {
    sluice_api::include_api!("nat44");
}
use nat44 as m;

/// `vrf_id` / `sw_if_index` meaning none.
const NONE: u32 = u32::MAX;

/// Registers the module and its handlers.
pub fn register(r: &mut ApiRegistry) {
    r.module(&m::MODULE);
    r.request(enable_disable);
    r.request(address_range);
    r.request(interface_addr);
    r.request(interface_feature);
    r.request(static_mapping);
    r.request(identity_mapping);
    r.request(set_timeouts);
    r.request(get_timeouts);
    r.request(sessions_clear);
    r.request(del_session);
    r.dump(address_dump);
    r.dump(interface_dump);
    r.dump(static_mapping_dump);
    r.dump(session_dump);
}

fn v4(a: IpAddr, what: &str) -> Result<u32, VnetError> {
    match a {
        IpAddr::V4(a) => Ok(a.into()),
        IpAddr::V6(_) => Err(VnetError::Invalid(format!(
            "{what} `{a}' is not an IPv4 address"
        ))),
    }
}

fn addr(a: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(a))
}

/// A port, refusing 0 (the CLI's `<port>` is 1..65535).
fn port(p: u16, what: &str) -> Result<u16, VnetError> {
    if p == 0 {
        return Err(VnetError::Invalid(format!(
            "{what} `0': ports are 1..65535"
        )));
    }
    Ok(p)
}

fn enable_disable(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: m::Nat44EdPluginEnableDisable,
) -> Result<m::Nat44EdPluginEnableDisableReply, ApiError> {
    if q.enable {
        let n = if q.sessions == 0 {
            DEFAULT_SESSIONS
        } else {
            q.sessions
        };
        ops::enable(vm, n)?;
    } else {
        ops::disable(vm)?;
    }
    Ok(m::Nat44EdPluginEnableDisableReply {})
}

fn address_range(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: m::Nat44AddDelAddressRange,
) -> Result<m::Nat44AddDelAddressRangeReply, ApiError> {
    let lo = v4(q.first_ip_address, "first_ip_address")?;
    let hi = v4(q.last_ip_address, "last_ip_address")?;
    let tenant = (q.vrf_id != NONE).then_some(q.vrf_id);
    ops::address_add_del(vm, lo, hi, tenant, !q.is_add)?;
    Ok(m::Nat44AddDelAddressRangeReply {})
}

fn interface_addr(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: m::Nat44AddDelInterfaceAddr,
) -> Result<m::Nat44AddDelInterfaceAddrReply, ApiError> {
    ops::interface_address_add_del(vm, q.sw_if_index, !q.is_add)?;
    Ok(m::Nat44AddDelInterfaceAddrReply {})
}

fn interface_feature(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: m::Nat44InterfaceAddDelFeature,
) -> Result<m::Nat44InterfaceAddDelFeatureReply, ApiError> {
    let r = if q.is_inside {
        role::INSIDE
    } else {
        role::OUTSIDE
    };
    ops::interface_add_del(vm, &[(q.sw_if_index, r)], !q.is_add)?;
    Ok(m::Nat44InterfaceAddDelFeatureReply {})
}

fn static_mapping(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: m::Nat44AddDelStaticMapping,
) -> Result<m::Nat44AddDelStaticMappingReply, ApiError> {
    let local = v4(q.local_ip_address, "local_ip_address")?;
    let external = if q.external_sw_if_index != NONE {
        AddrSrc::Interface(q.external_sw_if_index)
    } else {
        AddrSrc::Fixed(v4(q.external_ip_address, "external_ip_address")?)
    };
    let (proto, lp, ep) = if q.addr_only {
        (None, None, None)
    } else {
        (
            Some(q.protocol),
            Some(port(q.local_port, "local_port")?),
            Some(port(q.external_port, "external_port")?),
        )
    };
    ops::static_mapping_add_del(vm, proto, local, lp, external, ep, q.vrf_id, !q.is_add)?;
    Ok(m::Nat44AddDelStaticMappingReply {})
}

fn identity_mapping(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: m::Nat44AddDelIdentityMapping,
) -> Result<m::Nat44AddDelIdentityMappingReply, ApiError> {
    let src = if q.sw_if_index != NONE {
        AddrSrc::Interface(q.sw_if_index)
    } else {
        AddrSrc::Fixed(v4(q.ip_address, "ip_address")?)
    };
    let pp = if q.addr_only {
        None
    } else {
        Some((q.protocol, port(q.port, "port")?))
    };
    ops::identity_mapping_add_del(vm, src, pp, q.vrf_id, !q.is_add)?;
    Ok(m::Nat44AddDelIdentityMappingReply {})
}

fn set_timeouts(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: m::NatSetTimeouts,
) -> Result<m::NatSetTimeoutsReply, ApiError> {
    ops::set_timeouts(
        vm,
        Timeouts {
            udp: q.udp,
            tcp_established: q.tcp_established,
            tcp_transitory: q.tcp_transitory,
            icmp: q.icmp,
        },
    )?;
    Ok(m::NatSetTimeoutsReply {})
}

fn get_timeouts(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    _: m::NatGetTimeouts,
) -> Result<m::NatGetTimeoutsReply, ApiError> {
    let t = ops::timeouts(vm);
    Ok(m::NatGetTimeoutsReply {
        udp: t.udp,
        tcp_established: t.tcp_established,
        tcp_transitory: t.tcp_transitory,
        icmp: t.icmp,
    })
}

fn sessions_clear(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    _: m::Nat44SessionsClear,
) -> Result<m::Nat44SessionsClearReply, ApiError> {
    Ok(m::Nat44SessionsClearReply {
        cleared: ops::clear_sessions(vm)? as u32,
    })
}

fn del_session(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: m::Nat44DelSession,
) -> Result<m::Nat44DelSessionReply, ApiError> {
    let e = ops::SessionEnd {
        inside: q.is_inside,
        addr: v4(q.address, "address")?,
        port: q.port,
        proto: q.protocol,
        vrf: q.vrf_id,
        ext_host: if q.ext_host_valid {
            Some((v4(q.ext_host_address, "ext_host_address")?, q.ext_host_port))
        } else {
            None
        },
    };
    Ok(m::Nat44DelSessionReply {
        deleted: ops::del_session(vm, e)? as u32,
    })
}

fn address_dump(
    vm: &mut Vlib,
    _: m::Nat44AddressDump,
    out: &mut Stream<'_, '_, m::Nat44AddressDetails>,
) -> Result<(), ApiError> {
    let sh = ops::shared(vm);
    let pool = lock(&sh.ctl).pool.clone();
    for p in pool {
        let (a, sw) = match p.src {
            AddrSrc::Fixed(x) => (Some(x), NONE),
            AddrSrc::Interface(i) => (sh.if_addr(i), i),
        };
        out.send(&m::Nat44AddressDetails {
            ip_address: addr(a.unwrap_or(0)),
            resolved: a.is_some(),
            sw_if_index: sw,
            vrf_id: p.tenant_vrf.unwrap_or(NONE),
        });
    }
    Ok(())
}

fn interface_dump(
    vm: &mut Vlib,
    _: m::Nat44InterfaceDump,
    out: &mut Stream<'_, '_, m::Nat44InterfaceDetails>,
) -> Result<(), ApiError> {
    let roles = lock(&ops::shared(vm).ctl).roles.clone();
    for (i, r) in roles {
        out.send(&m::Nat44InterfaceDetails {
            sw_if_index: i,
            is_inside: r & role::INSIDE != 0,
            is_outside: r & role::OUTSIDE != 0,
        });
    }
    Ok(())
}

fn static_mapping_dump(
    vm: &mut Vlib,
    _: m::Nat44StaticMappingDump,
    out: &mut Stream<'_, '_, m::Nat44StaticMappingDetails>,
) -> Result<(), ApiError> {
    let sh = ops::shared(vm);
    let maps = lock(&sh.ctl).mappings.clone();
    for x in maps.values() {
        let (ext, sw) = match x.external {
            AddrSrc::Fixed(a) => (a, NONE),
            AddrSrc::Interface(i) => (sh.if_addr(i).unwrap_or(0), i),
        };
        out.send(&m::Nat44StaticMappingDetails {
            is_identity: x.identity,
            addr_only: x.local_port.is_none(),
            local_ip_address: addr(x.local),
            external_ip_address: addr(ext),
            external_sw_if_index: sw,
            protocol: x.proto.unwrap_or(0),
            local_port: x.local_port.unwrap_or(0),
            external_port: x.external_port.unwrap_or(0),
            vrf_id: x.vrf,
        });
    }
    Ok(())
}

fn session_dump(
    vm: &mut Vlib,
    _: m::Nat44SessionDump,
    out: &mut Stream<'_, '_, m::Nat44SessionDetails>,
) -> Result<(), ApiError> {
    if !ops::enabled(vm) {
        return Err(VnetError::from(crate::config::NatError::Disabled).into());
    }
    let now = vm.shared.clock.now_secs();
    let sh = ops::shared(vm);
    for (t, w) in sh.workers().iter().enumerate() {
        let g = lock(w);
        let Some(w) = g.as_ref() else { continue };
        let to = w.cfg.timeouts;
        for (i, s) in w.table.iter() {
            let act = w.table.activity(i);
            let (k, r) = (s.i2o.key, s.o2i.key);
            out.send(&m::Nat44SessionDetails {
                thread_index: t as u32,
                protocol: k.proto,
                inside_ip_address: addr(k.src),
                inside_port: k.src_port_or_id(),
                outside_ip_address: addr(r.dst),
                outside_port: r.dst_port_or_id(),
                ext_host_address: addr(r.src),
                ext_host_port: r.src_port_or_id(),
                inside_fib_index: s.fib,
                tcp_state: if k.proto == 6 {
                    s.tcp_state().to_string()
                } else {
                    String::new()
                },
                is_static: s.flags & sflags::STATIC != 0,
                is_identity: s.flags & sflags::IDENTITY != 0,
                is_hairpin: s.flags & sflags::HAIRPIN != 0,
                total_pkts: act.pkts,
                total_bytes: act.bytes,
                expires_in: (act.last + s.class.timeout(&to) - now).max(0.0),
            });
        }
    }
    Ok(())
}
