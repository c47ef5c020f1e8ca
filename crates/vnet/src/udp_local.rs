//! Local UDP port dispatch (VPP's `udp_register_dst_port`): a node of any crate registers a
//! UDP destination port, per address family, and `ip4-local`/`ip6-local` hand every UDP
//! datagram for one of the router's addresses and that port to it, at its IP header,
//! instead of answering port unreachable (or punting it to a host stack, linux-cp).
//!
//! The table is one `AtomicU16` per port and family, read with a relaxed load per UDP
//! packet on the local path: 0 = not registered, otherwise the local node's next arc + 1.
//! The arc is added on every thread before the port is published, so no thread sees an arc
//! index it does not have (as [`crate::set_rx_redirect`]).

use sluice_graph::{Next, NodeIndex, Vlib};
use std::sync::atomic::{AtomicU16, Ordering};

/// Registered UDP destination ports of both families (in [`crate::ip4::Ip4Shared`]).
pub struct UdpDstPorts {
    v4: Box<[AtomicU16]>,
    v6: Box<[AtomicU16]>,
}

impl Default for UdpDstPorts {
    fn default() -> Self {
        UdpDstPorts {
            v4: (0..=u16::MAX).map(|_| AtomicU16::new(0)).collect(),
            v6: (0..=u16::MAX).map(|_| AtomicU16::new(0)).collect(),
        }
    }
}

impl UdpDstPorts {
    /// The next arc of `ip4-local` (`v6` false) or `ip6-local` (`v6` true) for UDP to `port`.
    #[inline(always)]
    pub fn arc(&self, v6: bool, port: u16) -> Option<Next> {
        let t = if v6 { &self.v6 } else { &self.v4 };
        match t[port as usize].load(Ordering::Relaxed) {
            0 => None,
            v => Some(Next(v - 1)),
        }
    }

    /// Whether `port` is registered for the family.
    pub fn is_registered(&self, v6: bool, port: u16) -> bool {
        self.arc(v6, port).is_some()
    }
}

/// Sends UDP for the router's addresses with destination `port` to `node` (`None`: back to
/// port unreachable / punt). `v6` selects `ip6-local`, else `ip4-local`.
pub fn register_udp_dst_port(
    vm: &mut Vlib,
    v6: bool,
    port: u16,
    node: Option<NodeIndex>,
) -> Result<(), String> {
    let local = if v6 {
        crate::ip6::nodes::IP6_LOCAL
    } else {
        crate::ip4::nodes::IP4_LOCAL
    };
    let v = match node {
        Some(n) => {
            let from = vm.registry.lookup(local).map_err(|e| e.to_string())?;
            let next = vm.add_next(from, n).map_err(|e| e.to_string())?;
            next.0.checked_add(1).ok_or("too many next arcs")?
        }
        None => 0,
    };
    let sh = crate::ip4::shared(vm).ok_or("IPv4 not initialised")?;
    let t = if v6 {
        &sh.udp_ports.v6
    } else {
        &sh.udp_ports.v4
    };
    t[port as usize].store(v, Ordering::Relaxed);
    Ok(())
}
