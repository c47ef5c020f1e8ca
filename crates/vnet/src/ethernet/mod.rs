//! Ethernet (VPP's `vnet/ethernet`): `ethernet-input` ([`node`]) classifies received frames
//! by EtherType towards `ip4-input`, `ip6-input`, `arp-input` and `l2-input`, filters on the
//! interface MAC and classifies VLAN-tagged frames to their sub-interfaces (`crate::subif`
//! configures the table it reads).

pub mod node;

pub(crate) use node::register;
pub use node::{EthernetInput, NAME as ETHERNET_INPUT};
