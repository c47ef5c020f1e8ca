//! IPv4 (RFC 791).

use crate::checksum;
use crate::error::{be16, be32, WireError};
use std::net::Ipv4Addr;

/// Minimum header length.
pub const MIN_HEADER_LEN: usize = 20;

/// IP protocol numbers.
pub mod proto {
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
}

/// A view of an IPv4 packet. `new_checked` validates version, IHL and that the header fits;
/// [`Ipv4Packet::check_len`] validates the total length against the buffer.
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Validates the header. Never panics.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        if b.len() < MIN_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if b[0] >> 4 != 4 {
            return Err(WireError::Malformed("version"));
        }
        let ihl = ((b[0] & 0xf) as usize) * 4;
        if ihl < MIN_HEADER_LEN {
            return Err(WireError::Malformed("ihl"));
        }
        if b.len() < ihl {
            return Err(WireError::Truncated);
        }
        Ok(Ipv4Packet { buf })
    }
    /// Checks total length: at least the header, at most the buffer.
    pub fn check_len(&self) -> Result<(), WireError> {
        let tl = self.total_len() as usize;
        if tl < self.header_len() {
            return Err(WireError::Malformed("total length"));
        }
        if tl > self.buf.as_ref().len() {
            return Err(WireError::Truncated);
        }
        Ok(())
    }
    /// Header length in bytes.
    pub fn header_len(&self) -> usize {
        ((self.buf.as_ref()[0] & 0xf) as usize) * 4
    }
    /// DSCP/ECN byte.
    pub fn tos(&self) -> u8 {
        self.buf.as_ref()[1]
    }
    /// Total length field.
    pub fn total_len(&self) -> u16 {
        be16(self.buf.as_ref(), 2)
    }
    /// Identification.
    pub fn ident(&self) -> u16 {
        be16(self.buf.as_ref(), 4)
    }
    /// Don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        self.buf.as_ref()[6] & 0x40 != 0
    }
    /// More-fragments flag or a non-zero offset: the packet is a fragment.
    pub fn is_fragment(&self) -> bool {
        be16(self.buf.as_ref(), 6) & 0x3fff != 0
    }
    /// TTL.
    pub fn ttl(&self) -> u8 {
        self.buf.as_ref()[8]
    }
    /// Protocol.
    pub fn protocol(&self) -> u8 {
        self.buf.as_ref()[9]
    }
    /// Header checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buf.as_ref(), 10)
    }
    /// Source.
    pub fn src(&self) -> Ipv4Addr {
        Ipv4Addr::from(be32(self.buf.as_ref(), 12))
    }
    /// Destination.
    pub fn dst(&self) -> Ipv4Addr {
        Ipv4Addr::from(be32(self.buf.as_ref(), 16))
    }
    /// Destination as a host-order integer.
    pub fn dst_u32(&self) -> u32 {
        be32(self.buf.as_ref(), 16)
    }
    /// Whether the header checksum is correct.
    pub fn verify_checksum(&self) -> bool {
        checksum::sum(&self.buf.as_ref()[..self.header_len()]) == 0xffff
    }
    /// Payload per the header and total length (clamped to the buffer).
    pub fn payload(&self) -> &[u8] {
        let b = self.buf.as_ref();
        let end = (self.total_len() as usize).min(b.len());
        &b[self.header_len().min(end)..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Decrements the TTL and updates the checksum incrementally (RFC 1624).
    pub fn decrement_ttl(&mut self) {
        let b = self.buf.as_mut();
        let old = be16(b, 8);
        b[8] = b[8].wrapping_sub(1);
        let new = be16(b, 8);
        let c = checksum::update_u16(be16(b, 10), old, new);
        b[10..12].copy_from_slice(&c.to_be_bytes());
    }
    /// Recomputes the header checksum.
    pub fn fill_checksum(&mut self) {
        let hl = self.header_len();
        let b = self.buf.as_mut();
        b[10] = 0;
        b[11] = 0;
        let c = checksum::internet_checksum(&b[..hl]);
        b[10..12].copy_from_slice(&c.to_be_bytes());
    }
    /// Sets the source address (checksum not updated).
    pub fn set_src(&mut self, a: Ipv4Addr) {
        self.buf.as_mut()[12..16].copy_from_slice(&a.octets());
    }
    /// Sets the destination address (checksum not updated).
    pub fn set_dst(&mut self, a: Ipv4Addr) {
        self.buf.as_mut()[16..20].copy_from_slice(&a.octets());
    }
    /// Sets the TTL (checksum not updated).
    pub fn set_ttl(&mut self, t: u8) {
        self.buf.as_mut()[8] = t;
    }
    /// Payload bytes, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        let end = (self.total_len() as usize).min(self.buf.as_ref().len());
        &mut self.buf.as_mut()[hl.min(end)..end]
    }
}

/// A high-level IPv4 header for building packets (no options).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Ipv4Repr {
    /// Source.
    pub src: Ipv4Addr,
    /// Destination.
    pub dst: Ipv4Addr,
    /// Protocol.
    pub protocol: u8,
    /// TTL.
    pub ttl: u8,
    /// Payload length.
    pub payload_len: usize,
}

impl Ipv4Repr {
    /// Parses a checked packet.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Result<Ipv4Repr, WireError> {
        p.check_len()?;
        Ok(Ipv4Repr {
            src: p.src(),
            dst: p.dst(),
            protocol: p.protocol(),
            ttl: p.ttl(),
            payload_len: p.total_len() as usize - p.header_len(),
        })
    }
    /// Writes a 20-byte header with a correct checksum into `buf` (at least 20 bytes).
    pub fn emit(&self, buf: &mut [u8]) {
        let b = &mut buf[..MIN_HEADER_LEN];
        b.fill(0);
        b[0] = 0x45;
        b[2..4].copy_from_slice(&((MIN_HEADER_LEN + self.payload_len) as u16).to_be_bytes());
        b[8] = self.ttl;
        b[9] = self.protocol;
        b[12..16].copy_from_slice(&self.src.octets());
        b[16..20].copy_from_slice(&self.dst.octets());
        let c = checksum::internet_checksum(b);
        b[10..12].copy_from_slice(&c.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A real header: 192.168.0.1 -> 192.168.0.199, UDP, TTL 64, total length 115.
    const HDR: [u8; 20] = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7,
    ];

    #[test]
    fn parse_fixed_header() {
        let mut pkt = HDR.to_vec();
        pkt.resize(115, 0);
        let p = Ipv4Packet::new_checked(&pkt[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), proto::UDP);
        assert_eq!(p.src(), Ipv4Addr::new(192, 168, 0, 1));
        assert_eq!(p.dst(), Ipv4Addr::new(192, 168, 0, 199));
        assert!(p.dont_frag() && !p.is_fragment());
        assert!(p.check_len().is_ok());
        assert_eq!(p.payload().len(), 95);
        let r = Ipv4Repr::parse(&p).unwrap();
        let mut out = [0u8; 20];
        r.emit(&mut out);
        let q = Ipv4Packet::new_checked(&out[..]).unwrap();
        assert!(q.verify_checksum());
        assert_eq!(q.src(), r.src);
    }

    #[test]
    fn malformed_headers() {
        let mut h = HDR;
        h[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&h[..]).err(),
            Some(WireError::Malformed("ihl"))
        );
        h[0] = 0x65;
        assert_eq!(
            Ipv4Packet::new_checked(&h[..]).err(),
            Some(WireError::Malformed("version"))
        );
        let p = Ipv4Packet::new_checked(&HDR[..]).unwrap();
        assert_eq!(
            p.check_len(),
            Err(WireError::Truncated),
            "total length 115 > 20 bytes"
        );
        let mut h = HDR;
        h[0] = 0x46; // IHL 24 > buffer 20
        assert_eq!(
            Ipv4Packet::new_checked(&h[..]).err(),
            Some(WireError::Truncated)
        );
    }

    #[test]
    fn ttl_decrement_keeps_checksum_valid() {
        let mut h = HDR;
        let mut p = Ipv4Packet::new_checked(&mut h[..]).unwrap();
        p.decrement_ttl();
        assert_eq!(p.ttl(), 63);
        assert!(p.verify_checksum());
    }

    proptest::proptest! {
        #[test]
        fn never_panics(b in proptest::collection::vec(proptest::num::u8::ANY, 0..80)) {
            if let Ok(p) = Ipv4Packet::new_checked(&b[..]) {
                let _ = (p.check_len(), p.verify_checksum(), p.payload().len(), Ipv4Repr::parse(&p));
            }
        }
    }
}
