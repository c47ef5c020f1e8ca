//! Sluice networking layer (VPP's vnet): interfaces, interface output, `l2-patch`, IPv4
//! forwarding (Ethernet input, ARP, ICMP), IPv6 forwarding (ND, ICMPv6), L2 switching, the
//! packet generator (`pg`), what device drivers share (`devices`, `offload`), feature arcs
//! and the plugin boundary (`plugin`).

pub mod api;
pub mod arp;
pub mod bulk;
pub mod cli;
pub mod devices;
pub mod error;
pub mod ethernet;
pub mod events;
pub mod feature;
pub mod glean;
pub mod gso;
pub mod icmp_error;
pub mod interface;
pub mod ip4;
pub mod ip6;
pub mod ip_family;
pub mod ip_local;
pub mod l2;
pub mod l2patch;
pub mod loopback;
pub mod neighbor;
pub mod offload;
pub mod output;
pub mod own_source;
pub mod pg;
pub mod ping;
pub mod plugin;
pub mod ratelimit;
pub mod routes;
pub mod rpf;
pub mod runconf;
pub mod rxq;
pub mod subif;
pub mod testing;

pub use interface::{
    create as create_interface, set_lookup_node, set_p2p, set_punt_host, set_rx_redirect,
    Interfaces, SwIfIndex,
};

/// Registers vnet: its feature arcs, nodes and CLI commands (called by
/// [`plugin::assemble`] before any plugin registers).
pub fn register(r: &mut plugin::Registrar) -> Result<(), plugin::RegisterError> {
    for a in feature::VNET_ARCS {
        r.arc(*a)?;
    }
    r.feature(feature::plain("ip4-unicast", rpf::IP4_SOURCE_CHECK))?;
    r.feature(feature::plain("ip6-unicast", rpf::IP6_SOURCE_CHECK))?;
    output::register(&mut r.graph);
    gso::register(&mut r.graph);
    l2patch::register(&mut r.graph);
    let ifs = interface::new_attr_table();
    r.staged.put(interface::IfAttrTable(Some(ifs.clone())));
    let v4 = ip4::register(r, ifs.clone());
    let v6 = ip6::register(r, v4.clone(), ifs);
    rpf::register(r, v4.clone(), v6);
    loopback::register(&mut r.graph);
    pg::register(&mut r.graph);
    l2::register(r);
    register_cli(&mut r.cli);
    Ok(())
}

/// Registers the vnet CLI commands.
fn register_cli(t: &mut sluice_cli::CommandTree<sluice_graph::Vlib>) {
    cli::register(t);
    ip4::register_cli(t);
    ip6::register_cli(t);
    feature::register_cli(t);
    neighbor::register_cli(t);
    loopback::register_cli(t);
    l2::register_cli(t);
    subif::register_cli(t);
    rxq::register_cli(t);
    pg::register_cli(t);
    runconf::register_cli(t);
}

/// `show trace`'s decode of a node without a record of its own, in VPP's style: an `ip4-*` or
/// `ip6-*` node gets the IP header it read (`UDP: 10.0.0.2 -> 10.0.1.2`, `tos .., ttl ..`,
/// then the UDP/TCP/ICMP header), any other node the Ethernet header and what it carries.
fn trace_decode(node: &str, data: &[u8]) -> String {
    use sluice_wire::format::{describe_ethernet, describe_ipv4, describe_ipv6};
    let mut out = String::new();
    if node.starts_with("ip4-") {
        describe_ipv4(data, &mut out);
    } else if node.starts_with("ip6-") {
        describe_ipv6(data, &mut out);
    } else {
        return describe_ethernet(data);
    }
    // The IP decode is indented as under an Ethernet line: here it is the top level.
    out.lines()
        .map(|l| l.strip_prefix("  ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Per-`Vlib` initialisation once the runtime exists: `local0` and name resolution for
/// `pcap trace intfc`.
pub fn init(vm: &mut sluice_graph::Vlib) {
    interface::ensure_local0(vm);
    interface::install_drop_counting(vm);
    vm.ext_mut::<sluice_graph::cli::IfNames>().resolve = Some(interface::resolve);
    vm.ext_mut::<sluice_graph::trace::TraceDecoder>().0 = Some(trace_decode);
    ip4::init(vm);
    ip6::init(vm);
    l2::init(vm);
    pg::init(vm);
}
