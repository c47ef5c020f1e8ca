//! Ethernet II frames (IEEE 802.3 clause 3 with an EtherType) and 802.1Q / 802.1ad tags.

use crate::error::{be16, WireError};
use std::fmt;

/// A 48-bit MAC address.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct EthernetAddress(pub [u8; 6]);

/// Short name for [`EthernetAddress`] (the same type, usable as a constructor too).
pub use self::EthernetAddress as Mac;

impl EthernetAddress {
    /// ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: EthernetAddress = EthernetAddress([0xff; 6]);

    /// The address from the first 6 bytes of `b`; `None` if `b` is shorter.
    pub fn from_bytes(b: &[u8]) -> Option<EthernetAddress> {
        Some(EthernetAddress(b.get(..6)?.try_into().ok()?))
    }

    /// The six octets.
    pub const fn octets(&self) -> [u8; 6] {
        self.0
    }

    /// Group bit set (multicast or broadcast).
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 != 0
    }

    /// All ones.
    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }

    /// Neither group bit nor all zeros: usable as a source address.
    pub fn is_unicast(&self) -> bool {
        !self.is_multicast() && self.0 != [0; 6]
    }
}

impl fmt::Display for EthernetAddress {
    /// `aa:bb:cc:dd:ee:ff`, lower case.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

impl std::str::FromStr for EthernetAddress {
    type Err = WireError;

    /// Parses `aa:bb:cc:dd:ee:ff`, `aa-bb-cc-dd-ee-ff` (one or two hex digits per octet) or
    /// VPP's / Cisco's dotted `aabb.ccdd.eeff`.
    fn from_str(s: &str) -> Result<EthernetAddress, WireError> {
        let bad = WireError::Malformed("mac address");
        let mut m = [0u8; 6];
        let hex = |p: &str, max: usize| {
            if p.is_empty() || p.len() > max || !p.bytes().all(|c| c.is_ascii_hexdigit()) {
                return Err(bad);
            }
            u16::from_str_radix(p, 16).map_err(|_| bad)
        };
        let sep = if s.contains(':') { ':' } else { '-' };
        if s.split(sep).count() == 6 {
            for (o, p) in m.iter_mut().zip(s.split(sep)) {
                *o = hex(p, 2)? as u8;
            }
            return Ok(EthernetAddress(m));
        }
        if s.split('.').count() == 3 {
            for (o, p) in m.chunks_exact_mut(2).zip(s.split('.')) {
                o.copy_from_slice(&hex(p, 4)?.to_be_bytes());
            }
            return Ok(EthernetAddress(m));
        }
        Err(bad)
    }
}

/// An EtherType (or, in the type position of a tagged frame, a tag protocol identifier).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EtherType(pub u16);

impl EtherType {
    /// IPv4.
    pub const IPV4: EtherType = EtherType(0x0800);
    /// ARP.
    pub const ARP: EtherType = EtherType(0x0806);
    /// IEEE 802.1Q VLAN tag.
    pub const VLAN: EtherType = EtherType(0x8100);
    /// IEEE 802.1ad service tag (Q-in-Q outer tag).
    pub const QINQ: EtherType = EtherType(0x88a8);
    /// IPv6.
    pub const IPV6: EtherType = EtherType(0x86dd);

    /// Whether this is a VLAN tag protocol identifier (802.1Q or 802.1ad).
    pub fn is_vlan_tag(self) -> bool {
        self == Self::VLAN || self == Self::QINQ
    }

    /// VPP's name for the type (`IP4`, `ARP`, `VLAN`, `DOT1AD`, `IP6`), if it has one.
    pub fn name(self) -> Option<&'static str> {
        Some(match self {
            Self::IPV4 => "IP4",
            Self::ARP => "ARP",
            Self::VLAN => "VLAN",
            Self::QINQ => "DOT1AD",
            Self::IPV6 => "IP6",
            _ => return None,
        })
    }
}

impl From<u16> for EtherType {
    fn from(v: u16) -> Self {
        EtherType(v)
    }
}

impl From<EtherType> for u16 {
    fn from(v: EtherType) -> Self {
        v.0
    }
}

impl fmt::Display for EtherType {
    /// VPP's name (`IP4`, `ARP`, ...) or `0x%04x`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "0x{:04x}", self.0),
        }
    }
}

/// EtherType values as raw `u16`, for matching on header bytes (same values as the
/// [`EtherType`] constants).
pub mod ethertype {
    use super::EtherType;
    /// IPv4.
    pub const IPV4: u16 = EtherType::IPV4.0;
    /// ARP.
    pub const ARP: u16 = EtherType::ARP.0;
    /// 802.1Q VLAN tag.
    pub const VLAN: u16 = EtherType::VLAN.0;
    /// 802.1ad service tag.
    pub const QINQ: u16 = EtherType::QINQ.0;
    /// IPv6.
    pub const IPV6: u16 = EtherType::IPV6.0;
}

/// Ethernet II header length (dst, src, type).
pub const HEADER_LEN: usize = 14;

/// Byte offsets of the Ethernet header's fields (and of an 802.1Q tag's), for fast paths
/// that read a field straight out of a frame.
pub mod field {
    /// Destination MAC (6 bytes).
    pub const DST: usize = 0;
    /// Source MAC (6 bytes).
    pub const SRC: usize = 6;
    /// EtherType, or the first tag's TPID (2 bytes).
    pub const ETHERTYPE: usize = 12;
    /// In a tagged frame: the tag control information (PCP, DEI, 12-bit VLAN; 2 bytes).
    pub const TCI: usize = 14;
    /// In a tagged frame: the EtherType after the tag (or an inner tag's TPID).
    pub const INNER_ETHERTYPE: usize = 16;
    /// Length of one 802.1Q tag.
    pub const TAG_LEN: usize = 4;
}

/// A zero-copy view of an Ethernet II frame: a byte buffer at least [`HEADER_LEN`] long.
#[derive(Debug, Clone)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Header length (14).
    pub const HEADER_LEN: usize = HEADER_LEN;

    /// Wraps `buf` without checking its length; accessors panic if it is shorter than the
    /// header. For building frames in buffers the caller sized; parse with
    /// [`new_checked`](Self::new_checked).
    pub const fn new_unchecked(buf: T) -> Self {
        EthernetFrame { buf }
    }

    /// Wraps `buf` after checking it holds a whole header. Never panics.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        if buf.as_ref().len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        Ok(EthernetFrame { buf })
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buf
    }

    /// Destination address.
    #[inline]
    pub fn dst(&self) -> EthernetAddress {
        let b = self.buf.as_ref();
        EthernetAddress([b[0], b[1], b[2], b[3], b[4], b[5]])
    }

    /// Source address.
    #[inline]
    pub fn src(&self) -> EthernetAddress {
        let b = self.buf.as_ref();
        let m = field::SRC;
        EthernetAddress([b[m], b[m + 1], b[m + 2], b[m + 3], b[m + 4], b[m + 5]])
    }

    /// EtherType (the TPID of the first tag in a tagged frame).
    #[inline]
    pub fn ethertype(&self) -> EtherType {
        EtherType(be16(self.buf.as_ref(), field::ETHERTYPE))
    }

    /// The bytes after the 14-byte header.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination address.
    #[inline]
    pub fn set_dst(&mut self, m: EthernetAddress) {
        self.buf.as_mut()[field::DST..field::DST + 6].copy_from_slice(&m.0);
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src(&mut self, m: EthernetAddress) {
        self.buf.as_mut()[field::SRC..field::SRC + 6].copy_from_slice(&m.0);
    }

    /// Sets the EtherType.
    #[inline]
    pub fn set_ethertype(&mut self, t: EtherType) {
        let at = field::ETHERTYPE;
        self.buf.as_mut()[at..at + 2].copy_from_slice(&t.0.to_be_bytes());
    }

    /// The bytes after the header, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buf.as_mut()[HEADER_LEN..]
    }
}

/// A high-level Ethernet II header.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct EthernetRepr {
    /// Source address.
    pub src: EthernetAddress,
    /// Destination address.
    pub dst: EthernetAddress,
    /// EtherType.
    pub ethertype: EtherType,
}

impl EthernetRepr {
    /// The header of a checked frame.
    pub fn parse<T: AsRef<[u8]>>(f: &EthernetFrame<T>) -> EthernetRepr {
        EthernetRepr {
            src: f.src(),
            dst: f.dst(),
            ethertype: f.ethertype(),
        }
    }

    /// Writes the header into `f` (whose buffer must hold at least [`HEADER_LEN`] bytes).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, f: &mut EthernetFrame<T>) {
        f.set_dst(self.dst);
        f.set_src(self.src);
        f.set_ethertype(self.ethertype);
    }
}

/// Up to two VLAN tags parsed from a frame.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Tags {
    /// Outer tag: (TPID, VLAN id).
    pub outer: Option<(EtherType, u16)>,
    /// Inner tag VLAN id (Q-in-Q).
    pub inner: Option<u16>,
    /// EtherType after the tags.
    pub ethertype: EtherType,
    /// Offset of the L3 header from the start of the frame.
    pub l3_offset: usize,
}

/// Parses the tags of a frame (untagged, 802.1Q, 802.1ad, Q-in-Q with an 802.1Q inner tag).
/// Never panics.
pub fn parse_tags(frame: &[u8]) -> Result<Tags, WireError> {
    if frame.len() < HEADER_LEN {
        return Err(WireError::Truncated);
    }
    let mut t = Tags {
        outer: None,
        inner: None,
        ethertype: EtherType(be16(frame, 12)),
        l3_offset: HEADER_LEN,
    };
    if t.ethertype.is_vlan_tag() {
        if frame.len() < HEADER_LEN + 4 {
            return Err(WireError::Truncated);
        }
        t.outer = Some((t.ethertype, be16(frame, 14) & 0x0fff));
        t.ethertype = EtherType(be16(frame, 16));
        t.l3_offset = 18;
        if t.ethertype == EtherType::VLAN {
            if frame.len() < HEADER_LEN + 8 {
                return Err(WireError::Truncated);
            }
            t.inner = Some(be16(frame, 18) & 0x0fff);
            t.ethertype = EtherType(be16(frame, 20));
            t.l3_offset = 22;
        }
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parse_frame_and_tags() {
        let mut f = [0u8; 64];
        f[0..6].copy_from_slice(&[0xff; 6]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&[0x81, 0x00]);
        f[14..16].copy_from_slice(&[0x20, 0x64]); // pcp 1, vid 100
        f[16..18].copy_from_slice(&[0x08, 0x00]);
        let e = EthernetFrame::new_checked(&f[..]).unwrap();
        assert_eq!(e.dst(), EthernetAddress::BROADCAST);
        assert!(e.dst().is_multicast() && e.dst().is_broadcast());
        assert!(e.src().is_unicast());
        assert_eq!(e.src().to_string(), "02:00:00:00:00:01");
        assert_eq!(e.ethertype(), EtherType::VLAN);
        assert_eq!(e.payload().len(), 50);
        let t = parse_tags(&f).unwrap();
        assert_eq!(t.outer, Some((EtherType::VLAN, 100)));
        assert_eq!(t.inner, None);
        assert_eq!(t.ethertype, EtherType::IPV4);
        assert_eq!(t.l3_offset, 18);
        assert_eq!(parse_tags(&f[..16]), Err(WireError::Truncated));
        assert_eq!(
            EthernetFrame::new_checked(&f[..13]).err(),
            Some(WireError::Truncated)
        );
    }

    #[test]
    fn qinq_tags() {
        let mut f = [0u8; 26];
        f[12..14].copy_from_slice(&0x88a8u16.to_be_bytes());
        f[14..16].copy_from_slice(&10u16.to_be_bytes());
        f[16..18].copy_from_slice(&0x8100u16.to_be_bytes());
        f[18..20].copy_from_slice(&0xf014u16.to_be_bytes()); // pcp 7, vid 20
        f[20..22].copy_from_slice(&0x86ddu16.to_be_bytes());
        let t = parse_tags(&f).unwrap();
        assert_eq!(t.outer, Some((EtherType::QINQ, 10)));
        assert_eq!(t.inner, Some(20));
        assert_eq!(t.ethertype, EtherType::IPV6);
        assert_eq!(t.l3_offset, 22);
        assert_eq!(parse_tags(&f[..21]), Err(WireError::Truncated));
    }

    #[test]
    fn setters_and_repr_round_trip() {
        let mut b = [0u8; 20];
        let r = EthernetRepr {
            src: EthernetAddress([2, 0xfe, 0, 0, 0, 1]),
            dst: EthernetAddress([2, 0xfe, 0, 0, 0, 2]),
            ethertype: EtherType::ARP,
        };
        let mut f = EthernetFrame::new_checked(&mut b[..]).unwrap();
        r.emit(&mut f);
        f.payload_mut()[0] = 0xaa;
        assert_eq!(EthernetRepr::parse(&f), r);
        assert_eq!(
            &b[..15],
            &[2, 0xfe, 0, 0, 0, 2, 2, 0xfe, 0, 0, 0, 1, 0x08, 0x06, 0xaa]
        );
    }

    #[test]
    fn mac_parse_and_display_forms() {
        let m = EthernetAddress([2, 0xfe, 0, 0, 0, 1]);
        assert_eq!("02:fe:00:00:00:01".parse::<EthernetAddress>(), Ok(m));
        assert_eq!("02-FE-0-0-0-1".parse::<EthernetAddress>(), Ok(m));
        assert_eq!("02fe.0000.0001".parse::<Mac>(), Ok(m));
        assert_eq!(m.to_string(), "02:fe:00:00:00:01");
        for bad in [
            "02:fe:00:00:00",
            "zz:fe:00:00:00:01",
            "02:fe:00:00:00:001",
            "+2:fe:00:00:00:01",
            "02fe.0000",
            "",
        ] {
            assert!(bad.parse::<EthernetAddress>().is_err(), "{bad:?}");
        }
        assert_eq!(EthernetAddress::from_bytes(&[1, 2, 3]), None);
    }

    #[test]
    fn ethertype_display() {
        assert_eq!(EtherType::IPV4.to_string(), "IP4");
        assert_eq!(EtherType::IPV6.to_string(), "IP6");
        assert_eq!(EtherType::QINQ.to_string(), "DOT1AD");
        assert_eq!(EtherType(0x88cc).to_string(), "0x88cc");
        assert_eq!(ethertype::ARP, 0x0806);
    }

    proptest! {
        #[test]
        fn new_checked_never_panics(b in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(f) = EthernetFrame::new_checked(&b[..]) {
                let _ = (f.dst(), f.src(), f.ethertype(), f.payload().len());
                prop_assert!(b.len() >= HEADER_LEN);
            } else {
                prop_assert!(b.len() < HEADER_LEN);
            }
            if let Ok(t) = parse_tags(&b) {
                prop_assert!(t.l3_offset <= b.len());
            }
        }

        #[test]
        fn mac_display_parse_round_trip(o: [u8; 6]) {
            let m = EthernetAddress(o);
            prop_assert_eq!(m.to_string().parse::<EthernetAddress>(), Ok(m));
        }
    }
}
