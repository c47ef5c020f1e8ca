//! Sluice wire formats: checksums and packet decodes now; zero-copy header views for
//! Ethernet, VLAN, ARP, IPv4/IPv6, ICMP, UDP, TCP come with issue 3. No buffers, no unsafe.

#![forbid(unsafe_code)]

pub mod checksum;
pub mod format;
