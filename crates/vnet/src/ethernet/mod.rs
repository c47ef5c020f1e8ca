//! Ethernet (VPP's `vnet/ethernet`): `ethernet-input` ([`node`]) classifies received frames
//! by EtherType towards `ip4-input`, `ip6-input`, `arp-input` and `l2-input`, filters on the
//! interface MAC and classifies VLAN-tagged frames to their sub-interfaces (`crate::subif`
//! configures the table it reads).

pub mod node;

pub(crate) use node::register;
pub use node::{EthernetInput, NAME as ETHERNET_INPUT};

use sluice_buffer::HeadLen;
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

/// The packet lengths a rewrite's fast path takes (a window of `N` bytes once the Ethernet
/// header is pushed): a whole L3 header up to the adjacency's MTU, 0 meaning none (up to
/// the most a `u16` length allows). Built once per adjacency.
pub(crate) fn fast_len<const N: usize>(mtu: u16) -> HeadLen<HEADER_LEN, N> {
    HeadLen::up_to(if mtu == 0 { usize::MAX } else { mtu as usize })
}
