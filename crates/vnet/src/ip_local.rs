//! What `ip4-local`/`ip6-local` hand to another node: IP protocols and UDP destination
//! ports served by a plugin's node (VPP's `ip4_register_protocol`, `ip6_register_protocol`
//! and `udp_register_dst_port`). Tunnels use it: VXLAN registers UDP port 4789, GRE
//! protocol 47, IP-in-IP protocols 4 and 41; the host stack registers the UDP ports its
//! sessions bind, and releases them with the last session.
//!
//! A registration adds the arc from the local node to the serving node on every thread,
//! then writes (port or protocol → arc) into each thread's copy of the local node's
//! [`LocalDispatch`]. The served node receives the packet as `ip4-local`/`ip6-local` did:
//! `current_data` at the IP header, which `ip4-input`/`ip6-input` validated. The local
//! nodes look the tables up only for UDP and for protocols they do not handle themselves,
//! after an emptiness test, so the forwarding path and ICMP are unchanged.
//!
//! UDP to a multicast group (`ip4-local` and `ip6-local`) goes only to a port registered with
//! [`register_groups`] (VXLAN, whose tunnels join groups); any other port's packets to a
//! group are punted as if unserved, so a unicast protocol (GTP-U, a host session) never
//! sees, nor answers, a packet sent to ff02::1, 224.0.0.1 or a group another plugin joined.

use crate::error::{VnetError, VnetResult};
use sluice_graph::{Next, Vlib};

/// What a local packet is dispatched by.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LocalKey {
    /// The IP protocol / IPv6 next header (not ICMP/ICMPv6 or UDP, which the local nodes
    /// handle).
    Protocol(u8),
    /// A UDP destination port.
    UdpPort(u16),
}

/// A local node's dispatch table (one copy per thread).
#[derive(Default, Clone, Debug)]
pub struct LocalDispatch {
    /// (port, arc, also for packets to a group).
    udp: Vec<(u16, Next, bool)>,
    proto: Vec<(u8, Next)>,
}

impl LocalDispatch {
    /// The arc serving UDP destination port `port`.
    #[inline(always)]
    pub fn udp(&self, port: u16) -> Option<Next> {
        self.udp.iter().find(|e| e.0 == port).map(|e| e.1)
    }
    /// The arc serving UDP destination port `port` for a packet to a multicast group
    /// (None unless the port's node registered with [`register_groups`]).
    #[inline(always)]
    pub fn udp_group(&self, port: u16) -> Option<Next> {
        self.udp.iter().find(|e| e.0 == port && e.2).map(|e| e.1)
    }
    /// The arc serving IP protocol `p`.
    #[inline(always)]
    pub fn protocol(&self, p: u8) -> Option<Next> {
        self.proto.iter().find(|e| e.0 == p).map(|e| e.1)
    }
    /// Whether no UDP port is served.
    #[inline(always)]
    pub fn no_udp(&self) -> bool {
        self.udp.is_empty()
    }
    fn set(&mut self, k: LocalKey, n: Option<Next>, groups: bool) {
        match k {
            LocalKey::UdpPort(p) => {
                self.udp.retain(|e| e.0 != p);
                self.udp.extend(n.map(|n| (p, n, groups)));
            }
            LocalKey::Protocol(p) => {
                self.proto.retain(|e| e.0 != p);
                self.proto.extend(n.map(|n| (p, n)));
            }
        }
    }
}

/// The registrations (a `Vlib` extension): (IPv6?, key) → serving node, and whether it
/// also serves groups ([`register_groups`]).
#[derive(Default)]
pub struct LocalRegistrations {
    /// In registration order.
    pub list: Vec<(bool, LocalKey, String, bool)>,
}

fn apply(vm: &mut Vlib, ip6: bool, key: LocalKey, next: Option<Next>, groups: bool) -> VnetResult {
    let (name, v4) = if ip6 {
        (crate::ip6::nodes::IP6_LOCAL, false)
    } else {
        (crate::ip4::nodes::IP4_LOCAL, true)
    };
    let local = vm
        .registry
        .find(name)
        .ok_or_else(|| VnetError::System(format!("{name} missing")))?;
    vm.foreach_thread(move |tg| {
        if v4 {
            if let Some(n) = tg.node_mut::<crate::ip4::nodes::Ip4Local>(local) {
                n.dispatch.set(key, next, groups);
            }
        } else if let Some(n) = tg.node_mut::<crate::ip6::nodes::Ip6Local>(local) {
            n.dispatch.set(key, next, groups);
        }
    });
    Ok(())
}

/// Sends local IPv4 (`ip6` false) or IPv6 packets matching `key` to node `node`. A key
/// served by another node is an error naming it; registering the same node again is a no-op
/// (an error if it was registered to serve groups: [`register_groups`]).
/// Packets to a multicast group are not sent (see [`register_groups`]).
pub fn register(vm: &mut Vlib, ip6: bool, key: LocalKey, node: &str) -> VnetResult {
    register_with(vm, ip6, key, node, false)
}

/// As [`register`], and a UDP port's packets to a multicast group the router receives
/// are sent to `node` too (a node that serves groups it joined: VXLAN).
pub fn register_groups(vm: &mut Vlib, ip6: bool, key: LocalKey, node: &str) -> VnetResult {
    register_with(vm, ip6, key, node, true)
}

fn register_with(vm: &mut Vlib, ip6: bool, key: LocalKey, node: &str, groups: bool) -> VnetResult {
    let regs = &vm.ext_mut::<LocalRegistrations>().list;
    if let Some((_, _, n, g)) = regs.iter().find(|r| r.0 == ip6 && r.1 == key) {
        if n != node {
            return Err(VnetError::Exists(format!("{key:?} is served by {n}")));
        }
        if *g != groups {
            let how = if *g { "with" } else { "without" };
            return Err(VnetError::Exists(format!(
                "{key:?} is served by {n} {how} multicast groups"
            )));
        }
        return Ok(());
    }
    let from = if ip6 {
        crate::ip6::nodes::IP6_LOCAL
    } else {
        crate::ip4::nodes::IP4_LOCAL
    };
    let next = vm
        .add_next_by_name(from, node)
        .map_err(|e| VnetError::System(e.to_string()))?;
    apply(vm, ip6, key, Some(next), groups)?;
    vm.ext_mut::<LocalRegistrations>()
        .list
        .push((ip6, key, node.to_string(), groups));
    Ok(())
}

/// Stops dispatching `key` (the local node handles it again: UDP gets port unreachable).
pub fn unregister(vm: &mut Vlib, ip6: bool, key: LocalKey) -> VnetResult {
    apply(vm, ip6, key, None, false)?;
    vm.ext_mut::<LocalRegistrations>()
        .list
        .retain(|r| !(r.0 == ip6 && r.1 == key));
    Ok(())
}

/// Stops dispatching `key` if `node` serves it (another node's registration stays).
pub fn unregister_node(vm: &mut Vlib, ip6: bool, key: LocalKey, node: &str) -> VnetResult {
    let served = vm
        .ext_mut::<LocalRegistrations>()
        .list
        .iter()
        .any(|r| r.0 == ip6 && r.1 == key && r.2 == node);
    if served {
        unregister(vm, ip6, key)
    } else {
        Ok(())
    }
}
