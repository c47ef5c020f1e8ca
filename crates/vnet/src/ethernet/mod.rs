//! Ethernet (VPP's `vnet/ethernet`): `ethernet-input` ([`node`]) classifies received frames
//! by EtherType towards `ip4-input`, `ip6-input`, `arp-input` and `l2-input`, filters on the
//! interface MAC and classifies VLAN-tagged frames to their sub-interfaces (`crate::subif`
//! configures the table it reads).

pub mod node;

pub(crate) use node::register;
pub use node::{EthernetInput, NAME as ETHERNET_INPUT};

use sluice_wire::ethernet::HEADER_LEN;

/// An adjacency's Ethernet header after two zero bytes, for one 16-byte store at two bytes
/// before the packet start (`Buffer::prepend_head_wide::<2, 14, ..>`): the IPv4 and IPv6
/// rewrite nodes' fast path, which overwrites the two headroom bytes in front of the
/// header with these zeros.
pub(crate) fn eth_wide(rewrite: &[u8; HEADER_LEN]) -> [u8; 16] {
    let mut e = [0; 16];
    e[2..].copy_from_slice(rewrite);
    e
}

/// An adjacency's MTU as the most bytes a packet may have, 0 (none) as `usize::MAX`: the
/// bound of the rewrite nodes' fast path (`HeadLen::up_to`) and of their checked path.
pub(crate) fn mtu_limit(mtu: u16) -> usize {
    if mtu == 0 {
        usize::MAX
    } else {
        mtu as usize
    }
}
