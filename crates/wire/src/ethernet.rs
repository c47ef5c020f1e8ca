//! Ethernet II frames and 802.1Q / 802.1ad tags.

use crate::error::{be16, WireError};

/// A MAC address.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Mac(pub [u8; 6]);

impl Mac {
    /// ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: Mac = Mac([0xff; 6]);
    /// Group bit set (multicast or broadcast).
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 != 0
    }
}

impl std::fmt::Display for Mac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

impl std::str::FromStr for Mac {
    type Err = WireError;
    /// `aa:bb:cc:dd:ee:ff`, `aa-bb-...` or VPP's dotted `aabb.ccdd.eeff`.
    fn from_str(s: &str) -> Result<Mac, WireError> {
        let bad = WireError::Malformed("mac address");
        let mut m = [0u8; 6];
        let sep = if s.contains(':') { ':' } else { '-' };
        let parts: Vec<&str> = s.split(sep).collect();
        if parts.len() == 6 {
            for (i, p) in parts.iter().enumerate() {
                if p.is_empty() || p.len() > 2 {
                    return Err(bad);
                }
                m[i] = u8::from_str_radix(p, 16).map_err(|_| bad)?;
            }
            return Ok(Mac(m));
        }
        let parts: Vec<&str> = s.split('.').collect();
        if parts.len() == 3 {
            for (i, p) in parts.iter().enumerate() {
                if p.is_empty() || p.len() > 4 {
                    return Err(bad);
                }
                let v = u16::from_str_radix(p, 16).map_err(|_| bad)?;
                m[2 * i..2 * i + 2].copy_from_slice(&v.to_be_bytes());
            }
            return Ok(Mac(m));
        }
        Err(bad)
    }
}

/// EtherType values.
pub mod ethertype {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// ARP.
    pub const ARP: u16 = 0x0806;
    /// 802.1Q VLAN tag.
    pub const VLAN: u16 = 0x8100;
    /// 802.1ad service tag.
    pub const QINQ: u16 = 0x88a8;
    /// IPv6.
    pub const IPV6: u16 = 0x86dd;
}

/// Ethernet header length.
pub const HEADER_LEN: usize = 14;

/// A view of an Ethernet II frame.
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Checks the buffer holds at least a header. Never panics.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        if buf.as_ref().len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        Ok(EthernetFrame { buf })
    }
    /// Destination MAC.
    pub fn dst(&self) -> Mac {
        let b = self.buf.as_ref();
        Mac([b[0], b[1], b[2], b[3], b[4], b[5]])
    }
    /// Source MAC.
    pub fn src(&self) -> Mac {
        let b = self.buf.as_ref();
        Mac([b[6], b[7], b[8], b[9], b[10], b[11]])
    }
    /// EtherType (or TPID of the first tag).
    pub fn ethertype(&self) -> u16 {
        be16(self.buf.as_ref(), 12)
    }
    /// Bytes after the 14-byte header.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination MAC.
    pub fn set_dst(&mut self, m: Mac) {
        self.buf.as_mut()[0..6].copy_from_slice(&m.0);
    }
    /// Sets the source MAC.
    pub fn set_src(&mut self, m: Mac) {
        self.buf.as_mut()[6..12].copy_from_slice(&m.0);
    }
    /// Sets the EtherType.
    pub fn set_ethertype(&mut self, t: u16) {
        self.buf.as_mut()[12..14].copy_from_slice(&t.to_be_bytes());
    }
}

/// Up to two VLAN tags parsed from a frame.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Tags {
    /// Outer tag (TPID, VLAN id).
    pub outer: Option<(u16, u16)>,
    /// Inner tag VLAN id.
    pub inner: Option<u16>,
    /// EtherType after the tags.
    pub ethertype: u16,
    /// Offset of the L3 header.
    pub l3_offset: usize,
}

/// Parses the tags of a frame (802.1Q, 802.1ad, Q-in-Q). Never panics.
pub fn parse_tags(frame: &[u8]) -> Result<Tags, WireError> {
    if frame.len() < HEADER_LEN {
        return Err(WireError::Truncated);
    }
    let mut t = Tags {
        ethertype: be16(frame, 12),
        l3_offset: HEADER_LEN,
        ..Default::default()
    };
    if t.ethertype == ethertype::VLAN || t.ethertype == ethertype::QINQ {
        if frame.len() < HEADER_LEN + 4 {
            return Err(WireError::Truncated);
        }
        t.outer = Some((t.ethertype, be16(frame, 14) & 0x0fff));
        t.ethertype = be16(frame, 16);
        t.l3_offset = 18;
        if t.ethertype == ethertype::VLAN {
            if frame.len() < HEADER_LEN + 8 {
                return Err(WireError::Truncated);
            }
            t.inner = Some(be16(frame, 18) & 0x0fff);
            t.ethertype = be16(frame, 20);
            t.l3_offset = 22;
        }
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_frame_and_tags() {
        let mut f = [0u8; 64];
        f[0..6].copy_from_slice(&[0xff; 6]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&[0x81, 0x00]);
        f[14..16].copy_from_slice(&[0x20, 0x64]); // pcp 1, vid 100
        f[16..18].copy_from_slice(&[0x08, 0x00]);
        let e = EthernetFrame::new_checked(&f[..]).unwrap();
        assert_eq!(e.dst(), Mac::BROADCAST);
        assert!(e.dst().is_multicast());
        assert_eq!(e.src().to_string(), "02:00:00:00:00:01");
        let t = parse_tags(&f).unwrap();
        assert_eq!(t.outer, Some((ethertype::VLAN, 100)));
        assert_eq!(t.ethertype, ethertype::IPV4);
        assert_eq!(t.l3_offset, 18);
        assert_eq!(parse_tags(&f[..16]), Err(WireError::Truncated));
        assert!(EthernetFrame::new_checked(&f[..13]).is_err());
    }

    #[test]
    fn mac_parse_forms() {
        assert_eq!(
            "02:fe:00:00:00:01".parse::<Mac>().unwrap().0,
            [2, 0xfe, 0, 0, 0, 1]
        );
        assert_eq!(
            "02fe.0000.0001".parse::<Mac>().unwrap().0,
            [2, 0xfe, 0, 0, 0, 1]
        );
        assert!("02:fe:00:00:00".parse::<Mac>().is_err());
        assert!("zz:fe:00:00:00:01".parse::<Mac>().is_err());
    }
}
