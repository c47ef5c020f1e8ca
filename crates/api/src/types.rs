//! The built-in field types: `prefix` and `mac_address` (`address` is `std::net::IpAddr`).

use std::fmt;
use std::net::IpAddr;

/// An IP prefix: address and length (the address is kept as given; handlers mask it).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Prefix {
    /// The address.
    pub addr: IpAddr,
    /// The prefix length (at most 32 for IPv4, 128 for IPv6).
    pub len: u8,
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// A MAC address.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct MacAddress(pub [u8; 6]);

impl fmt::Display for MacAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}
