//! Tunnel interfaces: VXLAN (RFC 7348), GRE (RFC 2784/2890, L3 and TEB) and IP-in-IP
//! (4in4, 6in4, 4in6, 6in6), IPv4 and IPv6 underlay, on one encap/decap framework
//! ([`tunnel`]). See docs/tunnels.md.
//!
//! One crate, one plugin per protocol ([`VXLAN`] is `vxlan`, VPP's `vxlan_plugin.so`;
//! [`GRE`] is `gre`; [`IPIP`] is `ipip`), so `plugins { plugin vxlan_plugin.so { disable } }`
//! works as in VPP, while the tunnel table, the encap node, the decap lookup and the
//! interface life cycle are written once.

pub mod api;
pub mod gre;
pub mod gtpu;
pub mod ipip;
pub mod srv6;
pub mod tunnel;
pub mod vxlan;

use sluice_graph::Vlib;
use sluice_vnet::plugin::{Plugin, RegisterError, Registrar};

/// A tunnel protocol's plugin.
pub struct TunnelPlugin {
    name: &'static str,
    description: &'static str,
    register: fn(&mut Registrar),
    creator: sluice_vnet::runconf::CreatorFn,
    /// Whether a creator line makes a cross-connect itself (SRv6 `sr steer l2`).
    implied_xconnect: Option<sluice_vnet::runconf::ImpliedXconnectFn>,
}

/// VXLAN, for the daemon's plugin list.
pub static VXLAN: TunnelPlugin = TunnelPlugin {
    name: "vxlan",
    description: "VXLAN tunnels (RFC 7348), IPv4 and IPv6 underlay",
    register: |r| {
        vxlan::register(&mut r.graph);
        vxlan::register_cli(&mut r.cli);
        api::register_vxlan(&mut r.api);
    },
    creator: vxlan::creator,
    implied_xconnect: None,
};

/// GRE, for the daemon's plugin list.
pub static GRE: TunnelPlugin = TunnelPlugin {
    name: "gre",
    description: "GRE tunnels (RFC 2784/2890): L3 and TEB, keys, IPv4 and IPv6 underlay",
    register: |r| {
        gre::register(&mut r.graph);
        gre::register_cli(&mut r.cli);
        api::register_gre(&mut r.api);
    },
    creator: gre::creator,
    implied_xconnect: None,
};

/// IP-in-IP, for the daemon's plugin list.
pub static IPIP: TunnelPlugin = TunnelPlugin {
    name: "ipip",
    description: "IP-in-IP tunnels: 4in4, 6in4, 4in6, 6in6",
    register: |r| {
        ipip::register(&mut r.graph);
        ipip::register_cli(&mut r.cli);
        api::register_ipip(&mut r.api);
    },
    creator: ipip::creator,
    implied_xconnect: None,
};

/// GTP-U, for the daemon's plugin list.
pub static GTPU: TunnelPlugin = TunnelPlugin {
    name: "gtpu",
    description: "GTP-U tunnels (3GPP TS 29.281): G-PDU encap/decap, echo, error indication",
    register: |r| {
        gtpu::register(&mut r.graph);
        gtpu::register_cli(&mut r.cli);
        api::register_gtpu(&mut r.api);
    },
    creator: gtpu::creator,
    implied_xconnect: None,
};

/// SRv6, for the daemon's plugin list.
pub static SRV6: TunnelPlugin = TunnelPlugin {
    name: "srv6",
    description:
        "SRv6 (RFC 8754/8986): SR policies with H.Encaps, local SIDs End, End.DX4/DX6/DT4/DT6",
    register: |r| {
        srv6::register(&mut r.graph);
        srv6::register_cli(&mut r.cli);
        api::register_sr(&mut r.api);
    },
    creator: srv6::creator,
    implied_xconnect: Some(srv6::implied_xconnect),
};

impl Plugin for TunnelPlugin {
    fn name(&self) -> &'static str {
        self.name
    }
    fn version(&self) -> &'static str {
        env!("CARGO_PKG_VERSION")
    }
    fn description(&self) -> &'static str {
        self.description
    }
    fn register(&self, r: &mut Registrar) -> Result<(), RegisterError> {
        (self.register)(r);
        Ok(())
    }
    fn init(&self, vm: &mut Vlib) -> Result<(), String> {
        // The interface driver name is the plugin name (`show hardware-interfaces`).
        sluice_vnet::runconf::register_creator(vm, self.name, self.creator);
        // The decap entries keep their interface's L2 mode (`tunnel::if_changed`; one
        // registration for all the tunnel plugins).
        sluice_vnet::interface::on_change(vm, tunnel::if_changed);
        if let Some(f) = self.implied_xconnect {
            sluice_vnet::runconf::register_implied_xconnect(vm, self.name, f);
        }
        Ok(())
    }
}

/// Every tunnel plugin of this crate (tests and benchmarks; the daemon's list names them
/// one by one in `plugins/all`).
pub fn plugins() -> Vec<&'static dyn Plugin> {
    vec![&VXLAN, &GRE, &IPIP, &GTPU, &SRV6]
}
