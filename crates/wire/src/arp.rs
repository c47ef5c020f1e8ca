//! ARP for IPv4 over Ethernet (RFC 826).

use crate::error::{be16, be32, WireError};
use crate::ethernet::Mac;
use std::net::Ipv4Addr;

/// Length of an Ethernet/IPv4 ARP packet.
pub const LEN: usize = 28;

/// ARP operations.
pub mod op {
    /// Request.
    pub const REQUEST: u16 = 1;
    /// Reply.
    pub const REPLY: u16 = 2;
}

/// An Ethernet/IPv4 ARP packet.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ArpRepr {
    /// Operation.
    pub op: u16,
    /// Sender MAC.
    pub sha: Mac,
    /// Sender IP.
    pub spa: Ipv4Addr,
    /// Target MAC.
    pub tha: Mac,
    /// Target IP.
    pub tpa: Ipv4Addr,
}

impl ArpRepr {
    /// Parses an Ethernet/IPv4 ARP packet. Never panics.
    pub fn parse(b: &[u8]) -> Result<ArpRepr, WireError> {
        if b.len() < LEN {
            return Err(WireError::Truncated);
        }
        if be16(b, 0) != 1 || be16(b, 2) != 0x0800 || b[4] != 6 || b[5] != 4 {
            return Err(WireError::Malformed("not ethernet/ipv4 arp"));
        }
        let mac = |at: usize| Mac([b[at], b[at + 1], b[at + 2], b[at + 3], b[at + 4], b[at + 5]]);
        Ok(ArpRepr {
            op: be16(b, 6),
            sha: mac(8),
            spa: Ipv4Addr::from(be32(b, 14)),
            tha: mac(18),
            tpa: Ipv4Addr::from(be32(b, 24)),
        })
    }

    /// Writes the 28-byte packet.
    pub fn emit(&self, b: &mut [u8]) {
        let b = &mut b[..LEN];
        b[0..2].copy_from_slice(&1u16.to_be_bytes());
        b[2..4].copy_from_slice(&0x0800u16.to_be_bytes());
        b[4] = 6;
        b[5] = 4;
        b[6..8].copy_from_slice(&self.op.to_be_bytes());
        b[8..14].copy_from_slice(&self.sha.0);
        b[14..18].copy_from_slice(&self.spa.octets());
        b[18..24].copy_from_slice(&self.tha.0);
        b[24..28].copy_from_slice(&self.tpa.octets());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        let r = ArpRepr {
            op: op::REQUEST,
            sha: Mac([2, 0, 0, 0, 0, 1]),
            spa: Ipv4Addr::new(10, 0, 0, 1),
            tha: Mac::default(),
            tpa: Ipv4Addr::new(10, 0, 0, 2),
        };
        let mut b = [0u8; 28];
        r.emit(&mut b);
        assert_eq!(&b[..8], &[0, 1, 8, 0, 6, 4, 0, 1]);
        assert_eq!(ArpRepr::parse(&b).unwrap(), r);
        assert_eq!(ArpRepr::parse(&b[..27]), Err(WireError::Truncated));
        b[4] = 8;
        assert!(ArpRepr::parse(&b).is_err());
    }
}
