//! IPv4 (RFC 791).

use crate::checksum;
use crate::error::{be16, be32, WireError};
use std::fmt;
use std::net::Ipv4Addr;

/// Minimum (option-less) header length.
pub const MIN_HEADER_LEN: usize = 20;

/// Whether a header's options (the bytes after the first 20, up to the header length) are
/// well formed (RFC 791 §3.1): each is a single byte — End of Option List (0, which ends
/// them) or No Operation (1) — or a type, a length of at least 2 that stays inside the
/// header, and its data. An option of length 0 or 1, or running past the header, is not.
pub fn options_well_formed(mut opts: &[u8]) -> bool {
    while let Some(&kind) = opts.first() {
        match kind {
            0 => return true,
            1 => opts = &opts[1..],
            _ => match opts.get(1).map(|&l| l as usize) {
                Some(l) if l >= 2 && l <= opts.len() => opts = &opts[l..],
                _ => return false,
            },
        }
    }
    true
}

/// Byte offsets of the IPv4 header's fields (RFC 791), for fast paths that read a field
/// straight out of a packet.
pub mod field {
    /// Version (high nibble) and IHL (low nibble, in 32-bit words).
    pub const VER_IHL: usize = 0;
    /// DSCP and ECN.
    pub const DSCP_ECN: usize = 1;
    /// Total length (2 bytes).
    pub const TOTAL_LEN: usize = 2;
    /// Identification (2 bytes).
    pub const IDENT: usize = 4;
    /// Flags (high 3 bits) and fragment offset (2 bytes).
    pub const FLAGS_FRAG: usize = 6;
    /// The don't-fragment bit in the byte at [`FLAGS_FRAG`].
    pub const DF_BIT: u8 = 0x40;
    /// Time to live.
    pub const TTL: usize = 8;
    /// Protocol.
    pub const PROTOCOL: usize = 9;
    /// Header checksum (2 bytes).
    pub const CHECKSUM: usize = 10;
    /// Source address (4 bytes).
    pub const SRC: usize = 12;
    /// Destination address (4 bytes).
    pub const DST: usize = 16;
}

/// An IP protocol number (IPv4 protocol field, IPv6 next header).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IpProtocol(pub u8);

impl IpProtocol {
    /// ICMP.
    pub const ICMP: IpProtocol = IpProtocol(1);
    /// TCP.
    pub const TCP: IpProtocol = IpProtocol(6);
    /// UDP.
    pub const UDP: IpProtocol = IpProtocol(17);
    /// ICMPv6.
    pub const ICMPV6: IpProtocol = IpProtocol(58);

    /// VPP's name for the protocol (`ICMP`, `TCP`, `UDP`, `ICMP6`), if it has one here.
    pub fn name(self) -> Option<&'static str> {
        Some(match self {
            Self::ICMP => "ICMP",
            Self::TCP => "TCP",
            Self::UDP => "UDP",
            Self::ICMPV6 => "ICMP6",
            _ => return None,
        })
    }
}

impl From<u8> for IpProtocol {
    fn from(v: u8) -> Self {
        IpProtocol(v)
    }
}

impl From<IpProtocol> for u8 {
    fn from(v: IpProtocol) -> Self {
        v.0
    }
}

impl fmt::Display for IpProtocol {
    /// The name (`UDP`) or `unknown <n>` as VPP prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "unknown {}", self.0),
        }
    }
}

/// IP protocol numbers as raw `u8`, for matching on header bytes (same values as the
/// [`IpProtocol`] constants).
pub mod proto {
    use super::IpProtocol;
    /// ICMP.
    pub const ICMP: u8 = IpProtocol::ICMP.0;
    /// TCP.
    pub const TCP: u8 = IpProtocol::TCP.0;
    /// UDP.
    pub const UDP: u8 = IpProtocol::UDP.0;
    /// ICMPv6.
    pub const ICMPV6: u8 = IpProtocol::ICMPV6.0;
}

/// Flag bits of [`Ipv4Packet::flags`] (RFC 791 §3.1, the top 3 bits of byte 6).
pub mod flags {
    /// Don't fragment.
    pub const DF: u8 = 0b010;
    /// More fragments.
    pub const MF: u8 = 0b001;
}

/// A zero-copy view of an IPv4 packet.
///
/// [`new_checked`](Self::new_checked) validates the buffer length, version, IHL and that the
/// header (with options) fits; [`check_len`](Self::check_len) additionally validates the total
/// length against the buffer (a received frame may carry Ethernet padding after the packet,
/// so the buffer may be longer).
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps `buf` without any check; accessors panic if it is shorter than the header. For
    /// building packets with [`Ipv4Repr::emit`] in a buffer the caller sized.
    pub const fn new_unchecked(buf: T) -> Self {
        Ipv4Packet { buf }
    }

    /// Validates the header: at least 20 bytes, version 4, IHL >= 5, header within the buffer.
    /// Never panics.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        if b.len() < MIN_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if b[0] >> 4 != 4 {
            return Err(WireError::BadVersion);
        }
        let hl = ((b[0] & 0xf) as usize) * 4;
        if hl < MIN_HEADER_LEN {
            return Err(WireError::Malformed("header length"));
        }
        if b.len() < hl {
            return Err(WireError::Truncated);
        }
        Ok(Ipv4Packet { buf })
    }

    /// Checks the total length: at least the header (RFC 791 §3.1), at most the buffer.
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

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buf
    }

    /// Version field (4 for a checked packet).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buf.as_ref()[field::VER_IHL] >> 4
    }

    /// IHL field: header length in 32-bit words.
    #[inline]
    pub fn ihl(&self) -> u8 {
        self.buf.as_ref()[field::VER_IHL] & 0xf
    }

    /// Header length in bytes (`ihl * 4`).
    #[inline]
    pub fn header_len(&self) -> usize {
        self.ihl() as usize * 4
    }

    /// The DSCP/ECN byte (formerly type of service).
    #[inline]
    pub fn dscp_ecn(&self) -> u8 {
        self.buf.as_ref()[field::DSCP_ECN]
    }

    /// Total length field: header plus payload in bytes.
    #[inline]
    pub fn total_len(&self) -> u16 {
        be16(self.buf.as_ref(), field::TOTAL_LEN)
    }

    /// Identification.
    #[inline]
    pub fn ident(&self) -> u16 {
        be16(self.buf.as_ref(), field::IDENT)
    }

    /// The 3 flag bits (see [`flags`]).
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buf.as_ref()[field::FLAGS_FRAG] >> 5
    }

    /// Don't-fragment flag.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        self.flags() & flags::DF != 0
    }

    /// More-fragments flag.
    #[inline]
    pub fn more_frags(&self) -> bool {
        self.flags() & flags::MF != 0
    }

    /// Fragment offset in bytes (the field counts 8-byte units).
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        (be16(self.buf.as_ref(), field::FLAGS_FRAG) & 0x1fff) << 3
    }

    /// More-fragments flag or a non-zero offset: the packet is a fragment.
    #[inline]
    pub fn is_fragment(&self) -> bool {
        be16(self.buf.as_ref(), field::FLAGS_FRAG) & 0x3fff != 0
    }

    /// Time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buf.as_ref()[field::TTL]
    }

    /// Protocol of the payload.
    #[inline]
    pub fn protocol(&self) -> IpProtocol {
        IpProtocol(self.buf.as_ref()[field::PROTOCOL])
    }

    /// Header checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buf.as_ref(), field::CHECKSUM)
    }

    /// Source address.
    #[inline]
    pub fn src(&self) -> Ipv4Addr {
        Ipv4Addr::from(be32(self.buf.as_ref(), field::SRC))
    }

    /// Destination address.
    #[inline]
    pub fn dst(&self) -> Ipv4Addr {
        Ipv4Addr::from(be32(self.buf.as_ref(), field::DST))
    }

    /// Destination as a host-order integer (for LPM lookups).
    #[inline]
    pub fn dst_u32(&self) -> u32 {
        be32(self.buf.as_ref(), field::DST)
    }

    /// Whether the header checksum is correct (the header sums to all ones).
    pub fn verify_checksum(&self) -> bool {
        checksum::sum(&self.buf.as_ref()[..self.header_len()]) == 0xffff
    }

    /// The checksum the header should carry, computed over it with the checksum field taken
    /// as zero.
    pub fn compute_checksum(&self) -> u16 {
        let h = &self.buf.as_ref()[..self.header_len()];
        // Subtracting the stored field from the sum is the same as summing with it zeroed.
        !checksum::combine(checksum::sum(h), !self.checksum())
    }

    /// The payload per the header and total length fields, clamped to the buffer (so it is
    /// safe on a packet that failed [`check_len`](Self::check_len)).
    pub fn payload(&self) -> &[u8] {
        let b = self.buf.as_ref();
        let end = (self.total_len() as usize).min(b.len());
        &b[self.header_len().min(end)..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets version 4 and the header length in bytes (a multiple of 4, 20..=60).
    #[inline]
    pub fn set_header_len(&mut self, len: usize) {
        debug_assert!(len & 3 == 0 && (MIN_HEADER_LEN..=60).contains(&len));
        self.buf.as_mut()[0] = 0x40 | ((len / 4) as u8 & 0xf);
    }

    /// Sets the DSCP/ECN byte.
    #[inline]
    pub fn set_dscp_ecn(&mut self, v: u8) {
        self.buf.as_mut()[1] = v;
    }

    /// Sets the total length field.
    #[inline]
    pub fn set_total_len(&mut self, v: u16) {
        self.buf.as_mut()[2..4].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the identification.
    #[inline]
    pub fn set_ident(&mut self, v: u16) {
        self.buf.as_mut()[4..6].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the 3 flag bits (see [`flags`]), keeping the fragment offset.
    #[inline]
    pub fn set_flags(&mut self, f: u8) {
        let b = self.buf.as_mut();
        b[6] = (b[6] & 0x1f) | ((f & 0x7) << 5);
    }

    /// Sets the fragment offset in bytes (rounded down to 8), keeping the flags.
    #[inline]
    pub fn set_frag_offset(&mut self, bytes: u16) {
        let b = self.buf.as_mut();
        let v = (u16::from(b[6] & 0xe0) << 8) | ((bytes >> 3) & 0x1fff);
        b[6..8].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the TTL (checksum not updated).
    #[inline]
    pub fn set_ttl(&mut self, t: u8) {
        self.buf.as_mut()[field::TTL] = t;
    }

    /// Sets the protocol (checksum not updated).
    #[inline]
    pub fn set_protocol(&mut self, p: IpProtocol) {
        self.buf.as_mut()[field::PROTOCOL] = p.0;
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        self.buf.as_mut()[10..12].copy_from_slice(&c.to_be_bytes());
    }

    /// Sets the source address (checksum not updated).
    #[inline]
    pub fn set_src(&mut self, a: Ipv4Addr) {
        self.buf.as_mut()[field::SRC..field::SRC + 4].copy_from_slice(&a.octets());
    }

    /// Sets the destination address (checksum not updated).
    #[inline]
    pub fn set_dst(&mut self, a: Ipv4Addr) {
        self.buf.as_mut()[field::DST..field::DST + 4].copy_from_slice(&a.octets());
    }

    /// Decrements the TTL (wrapping) and updates the checksum incrementally (RFC 1624 eqn. 3).
    #[inline]
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

    /// The payload bytes (per header and total length, clamped to the buffer), writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        let end = (self.total_len() as usize).min(self.buf.as_ref().len());
        &mut self.buf.as_mut()[hl.min(end)..end]
    }
}

/// A high-level IPv4 header for building and summarising packets (no options; DSCP, ident
/// and flags zero when emitted).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Ipv4Repr {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Payload protocol.
    pub protocol: IpProtocol,
    /// Time to live.
    pub ttl: u8,
    /// Payload length in bytes.
    pub payload_len: usize,
}

impl Ipv4Repr {
    /// Summarises a checked packet; fails if its total length is inconsistent
    /// ([`Ipv4Packet::check_len`]). The checksum is not verified here.
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

    /// Header length when emitted (20).
    pub const fn header_len(&self) -> usize {
        MIN_HEADER_LEN
    }

    /// Header plus payload length.
    pub const fn buffer_len(&self) -> usize {
        MIN_HEADER_LEN + self.payload_len
    }

    /// Writes a complete 20-byte header with a correct checksum. The payload is not touched.
    ///
    /// # Panics
    /// If the packet's buffer is shorter than 20 bytes, or the total length exceeds 65535.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Ipv4Packet<T>) {
        let total = u16::try_from(self.buffer_len()).expect("IPv4 total length over 65535");
        p.set_header_len(MIN_HEADER_LEN);
        p.set_dscp_ecn(0);
        p.set_total_len(total);
        p.set_ident(0);
        p.buf.as_mut()[6..8].fill(0); // flags and fragment offset
        p.set_ttl(self.ttl);
        p.set_protocol(self.protocol);
        p.set_src(self.src);
        p.set_dst(self.dst);
        p.fill_checksum();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn options_are_checked_for_length() {
        use super::options_well_formed as ok;
        assert!(ok(&[]) && ok(&[1, 1, 1, 1]) && ok(&[1, 0, 9, 0]));
        // Record route, length 7 (pointer 4, one address), then EOL.
        assert!(ok(&[7, 7, 4, 0, 0, 0, 0, 0]));
        assert!(!ok(&[7, 0, 4, 0]), "length 0");
        assert!(!ok(&[1, 7, 1, 0]), "length 1");
        assert!(!ok(&[1, 1, 1, 7]), "no length byte");
        assert!(!ok(&[7, 9, 4, 0, 0, 0, 0, 0]), "past the header");
    }

    use super::*;
    use proptest::prelude::*;

    // A captured header: 192.168.0.1 -> 192.168.0.199, UDP, DF, TTL 64, total length 115.
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
        assert_eq!(p.compute_checksum(), 0xb861);
        assert_eq!((p.version(), p.ihl(), p.header_len()), (4, 5, 20));
        assert_eq!(p.dscp_ecn(), 0);
        assert_eq!(p.total_len(), 115);
        assert_eq!(p.ident(), 0);
        assert_eq!(p.flags(), flags::DF);
        assert!(p.dont_frag() && !p.more_frags() && !p.is_fragment());
        assert_eq!(p.frag_offset(), 0);
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), IpProtocol::UDP);
        assert_eq!(p.checksum(), 0xb861);
        assert_eq!(p.src(), Ipv4Addr::new(192, 168, 0, 1));
        assert_eq!(p.dst(), Ipv4Addr::new(192, 168, 0, 199));
        assert_eq!(p.dst_u32(), 0xc0a8_00c7);
        assert!(p.check_len().is_ok());
        assert_eq!(p.payload().len(), 95);
        let r = Ipv4Repr::parse(&p).unwrap();
        assert_eq!(r.payload_len, 95);
        assert_eq!(r.protocol, IpProtocol::UDP);
    }

    #[test]
    fn malformed_headers() {
        let mut h = HDR;
        h[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&h[..]).err(),
            Some(WireError::Malformed("header length"))
        );
        h[0] = 0x65;
        assert_eq!(
            Ipv4Packet::new_checked(&h[..]).err(),
            Some(WireError::BadVersion)
        );
        let p = Ipv4Packet::new_checked(&HDR[..]).unwrap();
        assert_eq!(p.check_len(), Err(WireError::Truncated), "115 > 20 bytes");
        assert_eq!(Ipv4Repr::parse(&p), Err(WireError::Truncated));
        assert_eq!(p.payload().len(), 0, "payload clamps to the buffer");
        let mut h = HDR;
        h[0] = 0x46; // IHL 24 > buffer 20
        assert_eq!(
            Ipv4Packet::new_checked(&h[..]).err(),
            Some(WireError::Truncated)
        );
        let mut h = HDR;
        h[2..4].copy_from_slice(&19u16.to_be_bytes());
        let p = Ipv4Packet::new_checked(&h[..]).unwrap();
        assert_eq!(p.check_len(), Err(WireError::Malformed("total length")));
        assert!(!Ipv4Packet::new_checked(&h[..]).unwrap().verify_checksum());
        assert_eq!(
            Ipv4Packet::new_checked(&HDR[..19]).err(),
            Some(WireError::Truncated)
        );
    }

    #[test]
    fn setters_and_fragment_fields() {
        let mut h = HDR;
        let mut p = Ipv4Packet::new_checked(&mut h[..]).unwrap();
        p.set_flags(flags::MF);
        p.set_frag_offset(1480);
        p.set_ident(0xbeef);
        p.set_dscp_ecn(0xb8);
        p.set_protocol(IpProtocol::TCP);
        assert_eq!(p.flags(), flags::MF);
        assert_eq!(p.frag_offset(), 1480);
        assert!(p.is_fragment() && p.more_frags() && !p.dont_frag());
        assert_eq!(p.ident(), 0xbeef);
        assert_eq!(p.dscp_ecn(), 0xb8);
        assert_eq!(p.protocol(), IpProtocol::TCP);
        assert!(!p.verify_checksum());
        p.fill_checksum();
        assert!(p.verify_checksum());
        p.set_checksum(0);
        assert_eq!(p.checksum(), 0);
    }

    #[test]
    fn emit_round_trips() {
        let r = Ipv4Repr {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 1, 1),
            protocol: IpProtocol::UDP,
            ttl: 64,
            payload_len: 26,
        };
        let mut b = [0xffu8; 46];
        let mut p = Ipv4Packet::new_unchecked(&mut b[..]);
        r.emit(&mut p);
        // Known-good header (checksum computed independently of this crate).
        assert_eq!(
            &b[..20],
            &[
                0x45, 0x00, 0x00, 0x2e, 0x00, 0x00, 0x00, 0x00, 0x40, 0x11, 0x65, 0xbe, 0x0a, 0x00,
                0x00, 0x01, 0x0a, 0x00, 0x01, 0x01
            ]
        );
        assert_eq!(b[20], 0xff, "payload untouched");
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(Ipv4Repr::parse(&p), Ok(r));
    }

    #[test]
    fn ttl_decrement_keeps_checksum_valid() {
        let mut h = HDR;
        let mut p = Ipv4Packet::new_checked(&mut h[..]).unwrap();
        p.decrement_ttl();
        assert_eq!(p.ttl(), 63);
        assert!(p.verify_checksum());
        assert_eq!(p.checksum(), p.compute_checksum());
    }

    #[test]
    fn protocol_display() {
        assert_eq!(IpProtocol::UDP.to_string(), "UDP");
        assert_eq!(IpProtocol::ICMPV6.to_string(), "ICMP6");
        assert_eq!(IpProtocol(132).to_string(), "unknown 132");
        assert_eq!(proto::TCP, 6);
    }

    proptest! {
        #[test]
        fn new_checked_never_panics(b in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Ok(p) = Ipv4Packet::new_checked(&b[..]) {
                prop_assert!(p.header_len() <= b.len());
                let _ = (
                    p.check_len(), p.verify_checksum(), p.compute_checksum(), p.payload().len(),
                    p.frag_offset(), p.flags(), p.src(), p.dst(), p.protocol().to_string(),
                );
                if let Ok(r) = Ipv4Repr::parse(&p) {
                    prop_assert_eq!(r.payload_len, p.payload().len());
                }
            }
        }

        #[test]
        fn emit_parse_round_trip(src: u32, dst: u32, proto: u8, ttl: u8, len in 0usize..100) {
            let r = Ipv4Repr {
                src: src.into(), dst: dst.into(), protocol: IpProtocol(proto), ttl, payload_len: len,
            };
            let mut b = vec![0u8; r.buffer_len()];
            r.emit(&mut Ipv4Packet::new_unchecked(&mut b[..]));
            let p = Ipv4Packet::new_checked(&b[..]).unwrap();
            prop_assert!(p.verify_checksum());
            prop_assert_eq!(Ipv4Repr::parse(&p), Ok(r));
        }
    }
}
