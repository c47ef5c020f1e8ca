//! Tunnel interfaces: VXLAN (RFC 7348) — with GRE and IP-in-IP sharing the same encap/decap
//! framework ([`tunnel`]). See docs/tunnels.md.
//!
//! One crate, one plugin per protocol ([`VXLAN`] is `vxlan`, VPP's `vxlan_plugin.so`), so
//! `plugins { plugin vxlan_plugin.so { disable } }` works as in VPP, while the tunnel table,
//! the encap node, the decap lookup and the interface life cycle are written once.

pub mod api;
pub mod tunnel;
pub mod vxlan;

use sluice_vnet::plugin::{Plugin, RegisterError, Registrar};

/// The VXLAN plugin.
pub struct VxlanPlugin;

/// VXLAN, for the daemon's plugin list.
pub static VXLAN: VxlanPlugin = VxlanPlugin;

impl Plugin for VxlanPlugin {
    fn name(&self) -> &'static str {
        "vxlan"
    }
    fn version(&self) -> &'static str {
        env!("CARGO_PKG_VERSION")
    }
    fn description(&self) -> &'static str {
        "VXLAN tunnels (RFC 7348), IPv4 and IPv6 underlay"
    }
    fn register(&self, r: &mut Registrar) -> Result<(), RegisterError> {
        vxlan::register(&mut r.graph);
        vxlan::register_cli(&mut r.cli);
        api::register_vxlan(&mut r.api);
        Ok(())
    }
    fn init(&self, vm: &mut sluice_graph::Vlib) -> Result<(), String> {
        sluice_vnet::runconf::register_creator(vm, PROTO_DRIVER_VXLAN, vxlan::creator);
        Ok(())
    }
}

const PROTO_DRIVER_VXLAN: &str = "vxlan";

/// Every tunnel plugin of this crate (tests and benchmarks; the daemon's list names them
/// one by one in `plugins/all`).
pub fn plugins() -> Vec<&'static dyn Plugin> {
    vec![&VXLAN]
}
