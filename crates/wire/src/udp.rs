//! UDP (RFC 768).

use crate::checksum;
use crate::error::{be16, WireError};
use crate::ipv4::IpProtocol;
use std::net::{Ipv4Addr, Ipv6Addr};

/// UDP header length.
pub const HEADER_LEN: usize = 8;

/// A zero-copy view of a UDP datagram.
///
/// [`new_checked`](Self::new_checked) validates that the 8-byte header fits;
/// [`check_len`](Self::check_len) validates the length field against the buffer.
#[derive(Debug, Clone)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wraps `buf` without any check; accessors panic if it is shorter than the header.
    pub const fn new_unchecked(buf: T) -> Self {
        UdpPacket { buf }
    }

    /// Wraps `buf` after checking the header fits. Never panics.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        if buf.as_ref().len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        Ok(UdpPacket { buf })
    }

    /// Checks the length field: at least the header, at most the buffer.
    pub fn check_len(&self) -> Result<(), WireError> {
        let l = self.len() as usize;
        if l < HEADER_LEN {
            return Err(WireError::Malformed("udp length"));
        }
        if l > self.buf.as_ref().len() {
            return Err(WireError::Truncated);
        }
        Ok(())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buf
    }

    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        be16(self.buf.as_ref(), 0)
    }

    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        be16(self.buf.as_ref(), 2)
    }

    /// Length field: header plus payload in bytes.
    #[inline]
    #[allow(clippy::len_without_is_empty)] // a header field, not a collection length
    pub fn len(&self) -> u16 {
        be16(self.buf.as_ref(), 4)
    }

    /// Checksum field (0: no checksum, allowed over IPv4).
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buf.as_ref(), 6)
    }

    /// The payload per the length field, clamped to the buffer (empty if the field is below 8).
    pub fn payload(&self) -> &[u8] {
        let b = self.buf.as_ref();
        let end = (self.len() as usize).min(b.len());
        &b[HEADER_LEN.min(end)..end]
    }

    /// The datagram (header and payload) as the length field gives it, clamped to the buffer.
    fn datagram(&self) -> &[u8] {
        let b = self.buf.as_ref();
        &b[..(self.len() as usize).min(b.len())]
    }

    /// Whether the checksum over the IPv4 pseudo-header and the datagram is correct. A zero
    /// checksum field means the sender computed none and is accepted (RFC 768). Datagrams
    /// whose length field exceeds the buffer fail.
    pub fn verify_checksum_v4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        if self.checksum() == 0 {
            return true;
        }
        if self.check_len().is_err() {
            return false;
        }
        let ph = checksum::pseudo_header_v4(src, dst, IpProtocol::UDP.0, self.len());
        checksum::combine(ph, checksum::sum(self.datagram())) == 0xffff
    }

    /// Whether the checksum over the IPv6 pseudo-header and the datagram is correct. Over
    /// IPv6 the checksum is mandatory: a zero field fails (RFC 8200 §8.1).
    pub fn verify_checksum_v6(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        if self.checksum() == 0 || self.check_len().is_err() {
            return false;
        }
        let ph = crate::ipv6::pseudo_header_sum(src, dst, IpProtocol::UDP.0, self.len() as u32);
        checksum::combine(ph, checksum::sum(self.datagram())) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Sets the source port (checksum not updated).
    #[inline]
    pub fn set_src_port(&mut self, v: u16) {
        self.buf.as_mut()[0..2].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the destination port (checksum not updated).
    #[inline]
    pub fn set_dst_port(&mut self, v: u16) {
        self.buf.as_mut()[2..4].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the length field.
    #[inline]
    pub fn set_len(&mut self, v: u16) {
        self.buf.as_mut()[4..6].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        self.buf.as_mut()[6..8].copy_from_slice(&v.to_be_bytes());
    }

    /// Computes and stores the checksum over the IPv4 pseudo-header and the datagram (length
    /// field bytes, clamped to the buffer). A computed 0 is sent as `0xffff`, since 0 means
    /// "no checksum" (RFC 768).
    pub fn fill_checksum_v4(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.set_checksum(0);
        let ph = checksum::pseudo_header_v4(src, dst, IpProtocol::UDP.0, self.len());
        let c = !checksum::combine(ph, checksum::sum(self.datagram()));
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }

    /// Computes and stores the checksum over the IPv6 pseudo-header and the datagram (a
    /// computed 0 is sent as `0xffff`, RFC 8200 §8.1).
    pub fn fill_checksum_v6(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        self.set_checksum(0);
        let ph = crate::ipv6::pseudo_header_sum(src, dst, IpProtocol::UDP.0, self.len() as u32);
        let c = !checksum::combine(ph, checksum::sum(self.datagram()));
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }

    /// The payload per the length field (clamped to the buffer), writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = (self.len() as usize).min(self.buf.as_ref().len());
        &mut self.buf.as_mut()[HEADER_LEN.min(end)..end]
    }
}

/// A high-level UDP header.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Payload length in bytes.
    pub payload_len: usize,
}

impl UdpRepr {
    /// Summarises a checked datagram; fails if its length field is inconsistent. The checksum
    /// is not verified here (it needs the IP addresses: [`UdpPacket::verify_checksum_v4`]).
    pub fn parse<T: AsRef<[u8]>>(p: &UdpPacket<T>) -> Result<UdpRepr, WireError> {
        p.check_len()?;
        Ok(UdpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            payload_len: p.len() as usize - HEADER_LEN,
        })
    }

    /// Header plus payload length.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the header with a zero checksum (valid over IPv4); after writing the payload,
    /// call [`UdpPacket::fill_checksum_v4`] to add one.
    ///
    /// # Panics
    /// If the buffer is shorter than 8 bytes or the length exceeds 65535.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut UdpPacket<T>) {
        let len = u16::try_from(self.buffer_len()).expect("UDP length over 65535");
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_len(len);
        p.set_checksum(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SRC: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const DST: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 1);

    /// 1024 -> 1024, 18 payload bytes 0..=17, checksum 0x9a67 (computed independently).
    fn datagram() -> Vec<u8> {
        let mut d = vec![0x04, 0x00, 0x04, 0x00, 0x00, 0x1a, 0x9a, 0x67];
        d.extend(0u8..18);
        d
    }

    #[test]
    fn parse_known_datagram() {
        let d = datagram();
        let p = UdpPacket::new_checked(&d[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port(), p.len()), (1024, 1024, 26));
        assert_eq!(p.checksum(), 0x9a67);
        assert!(p.verify_checksum_v4(SRC, DST));
        assert!(!p.verify_checksum_v4(SRC, Ipv4Addr::new(10, 0, 1, 2)));
        assert_eq!(p.payload(), &(0u8..18).collect::<Vec<_>>()[..]);
        assert_eq!(
            UdpRepr::parse(&p),
            Ok(UdpRepr {
                src_port: 1024,
                dst_port: 1024,
                payload_len: 18
            })
        );
    }

    #[test]
    fn emit_then_fill_matches_known_bytes() {
        let r = UdpRepr {
            src_port: 1024,
            dst_port: 1024,
            payload_len: 18,
        };
        let mut b = vec![0u8; r.buffer_len()];
        let mut p = UdpPacket::new_unchecked(&mut b[..]);
        r.emit(&mut p);
        assert_eq!(p.checksum(), 0);
        assert!(
            p.verify_checksum_v4(SRC, DST),
            "zero checksum accepted over IPv4"
        );
        for (i, x) in p.payload_mut().iter_mut().enumerate() {
            *x = i as u8;
        }
        p.fill_checksum_v4(SRC, DST);
        assert_eq!(b, datagram());
    }

    #[test]
    fn length_checks() {
        let mut d = datagram();
        d[5] = 7; // length 7 < header
        let p = UdpPacket::new_checked(&d[..]).unwrap();
        assert_eq!(p.check_len(), Err(WireError::Malformed("udp length")));
        assert!(p.payload().is_empty());
        assert!(!p.verify_checksum_v4(SRC, DST));
        d[5] = 27; // one past the buffer
        let p = UdpPacket::new_checked(&d[..]).unwrap();
        assert_eq!(UdpRepr::parse(&p), Err(WireError::Truncated));
        assert_eq!(
            UdpPacket::new_checked(&d[..7]).err(),
            Some(WireError::Truncated)
        );
    }

    #[test]
    fn computed_zero_is_sent_as_all_ones() {
        // Choose the payload word so that the sum is all ones: the checksum must be 0xffff.
        let r = UdpRepr {
            src_port: 0,
            dst_port: 0,
            payload_len: 2,
        };
        let mut b = [0u8; 10];
        let mut p = UdpPacket::new_unchecked(&mut b[..]);
        r.emit(&mut p);
        let ph = checksum::pseudo_header_v4(SRC, DST, 17, 10);
        let partial = checksum::combine(ph, checksum::sum(&[0, 0, 0, 0, 0, 10, 0, 0]));
        p.payload_mut().copy_from_slice(&(!partial).to_be_bytes());
        p.fill_checksum_v4(SRC, DST);
        assert_eq!(p.checksum(), 0xffff);
        assert!(p.verify_checksum_v4(SRC, DST));
    }

    proptest! {
        #[test]
        fn new_checked_never_panics(b in proptest::collection::vec(any::<u8>(), 0..40), s: u32, d: u32) {
            if let Ok(p) = UdpPacket::new_checked(&b[..]) {
                let _ = (p.check_len(), p.payload().len(), p.verify_checksum_v4(s.into(), d.into()));
                if let Ok(r) = UdpRepr::parse(&p) {
                    prop_assert_eq!(r.payload_len, p.payload().len());
                }
            }
        }

        #[test]
        fn fill_then_verify(payload in proptest::collection::vec(any::<u8>(), 0..64), sp: u16, dp: u16, s: u32, d: u32) {
            let r = UdpRepr { src_port: sp, dst_port: dp, payload_len: payload.len() };
            let mut b = vec![0u8; r.buffer_len()];
            let mut p = UdpPacket::new_unchecked(&mut b[..]);
            r.emit(&mut p);
            p.payload_mut().copy_from_slice(&payload);
            p.fill_checksum_v4(s.into(), d.into());
            prop_assert_ne!(p.checksum(), 0);
            prop_assert!(p.verify_checksum_v4(s.into(), d.into()));
            prop_assert_eq!(UdpRepr::parse(&p), Ok(r));
        }
    }

    #[test]
    fn ipv6_checksum_is_mandatory_and_covers_the_pseudo_header() {
        let (src, dst): (Ipv6Addr, Ipv6Addr) = (
            "2001:db8::1".parse().unwrap(),
            "2001:db8::2".parse().unwrap(),
        );
        let mut b = [0u8; 13];
        b[8..].copy_from_slice(b"hello");
        let mut p = UdpPacket::new_unchecked(&mut b[..]);
        p.set_src_port(1234);
        p.set_dst_port(7);
        p.set_len(13);
        p.fill_checksum_v6(src, dst);
        assert!(p.verify_checksum_v6(src, dst));
        assert!(!p.verify_checksum_v6(dst, "2001:db8::3".parse().unwrap()));
        p.payload_mut()[0] ^= 1;
        assert!(!p.verify_checksum_v6(src, dst));
        p.set_checksum(0);
        assert!(
            !p.verify_checksum_v6(src, dst),
            "zero checksum is invalid over IPv6"
        );
    }
}
