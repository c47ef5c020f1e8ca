//! Sluice wire formats: zero-copy header views in the smoltcp style, `Repr` structs to build
//! and summarise headers, Internet checksums, and packet decodes for `show trace`.
//!
//! One module per protocol. A view (`EthernetFrame`, `Ipv4Packet`, `UdpPacket`, ...) wraps any
//! `T: AsRef<[u8]>` (plus `AsMut<[u8]>` for the setters); its `new_checked` validates the
//! buffer so that the getters cannot index out of bounds, and never panics for any input.
//! No buffers, no unsafe: the crate is fuzzable alone.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod arp;
pub mod checksum;
mod error;
pub mod ethernet;
pub mod format;
pub mod icmp;
pub mod icmpv6;
pub mod ipv4;
pub mod ipv6;
pub mod tcp;
pub mod udp;

pub use error::WireError;
pub use ethernet::{EtherType, EthernetAddress, Mac};
pub use ipv4::IpProtocol;
