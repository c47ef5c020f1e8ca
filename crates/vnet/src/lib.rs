//! Sluice networking layer (VPP's vnet): interfaces, interface output, `l2-patch`, and IPv4
//! forwarding (Ethernet input, ARP, ICMP), IPv6 forwarding (ND, ICMPv6), L2 switching.

pub mod cli;
pub mod feature;
pub mod interface;
pub mod ip4;
pub mod ip6;
pub mod l2;
pub mod l2patch;
pub mod loopback;
pub mod neighbor;
pub mod output;
pub mod ping;
pub mod ratelimit;
pub mod routes;
pub mod rpf;
pub mod rxq;
pub mod subif;

pub use interface::{create_interface, set_rx_redirect, Interfaces, SwIfIndex};

/// Registers the vnet nodes.
pub fn register(b: &mut sluice_graph::GraphBuilder) {
    output::register(b);
    l2patch::register(b);
    let v4 = ip4::register(b);
    let v6 = ip6::register(b, v4.clone());
    feature::register(b, v4.features.clone());
    rpf::register(b, v4.clone(), v6);
    loopback::register(b);
    l2::register(b, v4.features.clone());
}

/// Registers the vnet CLI commands and installs interface-name resolution for the runtime.
pub fn register_cli(t: &mut sluice_cli::CommandTree<sluice_graph::Vlib>) {
    cli::register(t);
    ip4::register_cli(t);
    ip6::register_cli(t);
    feature::register_cli(t);
    neighbor::register_cli(t);
    loopback::register_cli(t);
    l2::register_cli(t);
    subif::register_cli(t);
    rxq::register_cli(t);
}

/// Per-`Vlib` initialisation once the runtime exists: `local0` and name resolution for
/// `pcap trace intfc`.
pub fn init(vm: &mut sluice_graph::Vlib) {
    interface::ensure_local0(vm);
    interface::install_drop_counting(vm);
    vm.ext_mut::<sluice_graph::cli::IfNames>().resolve = Some(interface::resolve);
    ip4::init(vm);
    ip6::init(vm);
    l2::init(vm);
}
