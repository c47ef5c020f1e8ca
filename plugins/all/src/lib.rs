//! The plugins linked into the Sluice daemon, in registration order. Adding a plugin is one
//! line here and one dependency in this crate's Cargo.toml; no core crate changes
//! (docs/writing-a-plugin.md).

use sluice_vnet::plugin::Plugin;

/// Every plugin this build has.
pub fn all() -> Vec<&'static dyn Plugin> {
    vec![
        &sluice_af_packet::PLUGIN,
        &sluice_af_xdp::PLUGIN,
        &sluice_memif::PLUGIN,
        &sluice_tap::PLUGIN,
        &sluice_linux_cp::PLUGIN,
        &sluice_dpdk::PLUGIN,
        &sluice_tester::PLUGIN,
        &sluice_example::PLUGIN,
        &sluice_p4::PLUGIN,
        &sluice_nat44::PLUGIN,
        &sluice_acl::PLUGIN,
        &sluice_tunnels::VXLAN,
        &sluice_tunnels::GRE,
        &sluice_tunnels::IPIP,
        &sluice_tunnels::GTPU,
        &sluice_tunnels::SRV6,
        &sluice_policer::PLUGIN,
        &sluice_hoststack::PLUGIN,
    ]
}
