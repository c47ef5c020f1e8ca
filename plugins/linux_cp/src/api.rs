//! linux-cp's API messages (`api/lcp.api`, VPP's `lcp.api`): the same pair and default
//! namespace actions the CLI calls.

use crate::{LcpError, LcpMain};
use sluice_api::{ApiError, ApiRegistry, Ctx, Retval, Stream};
use sluice_graph::Vlib;
use sluice_vnet::devices::linux::linux_name;
use sluice_vnet::error::VnetError;
use sluice_vnet::{Interfaces, SwIfIndex};

/// Types generated from `api/lcp.api`.
pub mod lcp {
    sluice_api::include_api!("lcp");
}
use lcp as m;

/// Registers the module and its handlers.
pub fn register(r: &mut ApiRegistry) {
    r.module(&m::MODULE);
    r.request(default_ns_set);
    r.request(default_ns_get);
    r.request(pair_add_del);
    r.dump(pair_dump);
}

impl From<LcpError> for ApiError {
    fn from(e: LcpError) -> Self {
        let retval = match &e {
            LcpError::NoInterface(_) => Retval::NoSuchInterface,
            LcpError::Exists(_) => Retval::AlreadyExists,
            LcpError::NotPaired(_) => Retval::NoSuchEntry,
            LcpError::BadName(_) => Retval::InvalidValue,
            LcpError::Tap(e) => e.retval(),
            LcpError::Graph(_) => Retval::SystemError,
        };
        ApiError::new(retval, e.to_string())
    }
}

/// An optional Linux name: empty is `None`, otherwise checked as the CLI checks it.
fn name(what: &str, s: String) -> Result<Option<String>, LcpError> {
    if s.is_empty() {
        return Ok(None);
    }
    linux_name(what, &s)
        .map(Some)
        .map_err(|e| LcpError::BadName(e.to_string()))
}

fn default_ns_set(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: m::LcpDefaultNsSet,
) -> Result<m::LcpDefaultNsSetReply, ApiError> {
    let ns = name("netns", q.netns)?;
    crate::set_default_netns(vm, ns);
    Ok(m::LcpDefaultNsSetReply {})
}

fn default_ns_get(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    _: m::LcpDefaultNsGet,
) -> Result<m::LcpDefaultNsGetReply, ApiError> {
    Ok(m::LcpDefaultNsGetReply {
        netns: vm
            .ext_mut::<LcpMain>()
            .default_netns
            .clone()
            .unwrap_or_default(),
    })
}

fn pair_add_del(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: m::LcpItfPairAddDel,
) -> Result<m::LcpItfPairAddDelReply, ApiError> {
    let sw = SwIfIndex(q.sw_if_index);
    let ifname = vm
        .ext_mut::<Interfaces>()
        .get(sw)
        .map(|i| i.name.clone())
        .ok_or(VnetError::NoSuchInterface(q.sw_if_index))?;
    if !q.is_add {
        crate::delete_pair(vm, sw)?;
        return Ok(m::LcpItfPairAddDelReply {
            host_sw_if_index: u32::MAX,
        });
    }
    let host = name("host-if", q.host_if_name)?
        .ok_or_else(|| LcpError::BadName("empty host_if_name".into()))?;
    let ns = name("netns", q.netns)?;
    let tap = crate::create_pair(vm, &ifname, &host, ns)?;
    Ok(m::LcpItfPairAddDelReply {
        host_sw_if_index: tap.0,
    })
}

fn pair_dump(
    vm: &mut Vlib,
    q: m::LcpItfPairDump,
    out: &mut Stream<'_, '_, m::LcpItfPairDetails>,
) -> Result<(), ApiError> {
    let m = vm.ext_mut::<LcpMain>();
    for p in m
        .pairs
        .iter()
        .filter(|p| q.sw_if_index == u32::MAX || p.phy.0 == q.sw_if_index)
    {
        out.send(&m::LcpItfPairDetails {
            phy_sw_if_index: p.phy.0,
            host_sw_if_index: p.tap.0,
            vif_index: crate::linux_ifindex(&m.ns, p).unwrap_or(0),
            host_if_name: p.host_if.clone(),
            netns: p.netns.clone().unwrap_or_default(),
        });
    }
    Ok(())
}
