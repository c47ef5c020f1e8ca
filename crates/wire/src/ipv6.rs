//! IPv6 (RFC 8200): the fixed header, a bounded walk over the extension-header chain, and the
//! pseudo-header sum upper layers put under their checksums.

use crate::checksum;
use crate::error::{be16, be32, WireError};
use crate::ipv4::IpProtocol;
use std::net::Ipv6Addr;

/// Length of the fixed IPv6 header.
pub const HEADER_LEN: usize = 40;

/// Byte offsets of the IPv6 header's fields (RFC 8200), for fast paths that read a field
/// straight out of a packet.
pub mod field {
    /// Version (high nibble), traffic class and flow label (4 bytes).
    pub const VER_TC_FLOW: usize = 0;
    /// Payload length (2 bytes).
    pub const PAYLOAD_LEN: usize = 4;
    /// Next header.
    pub const NEXT_HEADER: usize = 6;
    /// Hop limit.
    pub const HOP_LIMIT: usize = 7;
    /// Source address (16 bytes).
    pub const SRC: usize = 8;
    /// Destination address (16 bytes).
    pub const DST: usize = 24;
}

/// The most extension headers [`Ipv6Packet::walk_extensions`] steps over before it gives up.
///
/// RFC 8200 §4.1 recommends an order in which each header appears at most once (Destination
/// Options at most twice): Hop-by-Hop, Destination Options, Routing, Fragment, AH, ESP,
/// Destination Options, i.e. at most six of the four kinds walked here. Eight leaves room for
/// unusual but legal chains while bounding the work a crafted packet can cause.
pub const MAX_EXTENSION_HEADERS: usize = 8;

/// Next-header values (RFC 8200 §4, IANA "Assigned Internet Protocol Numbers") as raw `u8`.
pub mod next_header {
    /// Hop-by-Hop Options header (RFC 8200 §4.3); only directly after the fixed header.
    pub const HOP_BY_HOP: u8 = 0;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// Routing header (RFC 8200 §4.4).
    pub const ROUTING: u8 = 43;
    /// Fragment header (RFC 8200 §4.5).
    pub const FRAGMENT: u8 = 44;
    /// Encapsulating Security Payload (RFC 4303); not walked: its contents are encrypted.
    pub const ESP: u8 = 50;
    /// Authentication Header (RFC 4302); not walked, returned as the upper layer.
    pub const AH: u8 = 51;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
    /// No Next Header (RFC 8200 §4.7): nothing follows.
    pub const NO_NEXT_HEADER: u8 = 59;
    /// Destination Options header (RFC 8200 §4.6).
    pub const DEST_OPTS: u8 = 60;
}

/// Whether `nh` is one of the extension headers [`Ipv6Packet::walk_extensions`] steps over
/// (Hop-by-Hop, Routing, Fragment, Destination Options).
#[inline]
pub fn is_walked_extension(nh: u8) -> bool {
    matches!(
        nh,
        next_header::HOP_BY_HOP
            | next_header::ROUTING
            | next_header::FRAGMENT
            | next_header::DEST_OPTS
    )
}

/// Sum (not inverted) of the IPv6 pseudo-header of RFC 8200 §8.1 used by TCP, UDP and ICMPv6:
/// source, destination, the 32-bit upper-layer packet length, three zero bytes and the
/// next-header value of the upper layer.
///
/// `len` is the length of the upper-layer header plus data (after any extension headers).
/// `dst` is the final destination: with a Routing header, the last address of its list
/// (RFC 8200 §8.1), which callers must supply themselves.
#[inline]
pub fn pseudo_header_sum(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, len: u32) -> u16 {
    let words = |a: Ipv6Addr| -> u64 { a.segments().iter().map(|&w| w as u64).sum() };
    checksum::fold(
        words(src) + words(dst) + (len >> 16) as u64 + (len & 0xffff) as u64 + next_header as u64,
    )
}

/// A zero-copy view of an IPv6 packet.
///
/// [`new_checked`](Self::new_checked) validates the buffer length and version;
/// [`check_len`](Self::check_len) validates the payload length against the buffer (which may
/// be longer: Ethernet padding). Jumbograms (RFC 2675, payload length 0 with a Jumbo Payload
/// option) are not supported: a payload length of 0 means an empty payload.
#[derive(Debug, Clone)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wraps `buf` without any check; accessors panic if it is shorter than the header. For
    /// building packets with [`Ipv6Repr::emit`] in a buffer the caller sized.
    pub const fn new_unchecked(buf: T) -> Self {
        Ipv6Packet { buf }
    }

    /// Validates the header: at least 40 bytes and version 6. Never panics.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if b[0] >> 4 != 6 {
            return Err(WireError::BadVersion);
        }
        Ok(Ipv6Packet { buf })
    }

    /// Checks the payload length field against the buffer: an error if it claims more than
    /// the `buffer - 40` bytes present.
    pub fn check_len(&self) -> Result<(), WireError> {
        if self.payload_len() as usize > self.buf.as_ref().len() - HEADER_LEN {
            return Err(WireError::Truncated);
        }
        Ok(())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buf
    }

    /// Version field (6 for a checked packet).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buf.as_ref()[0] >> 4
    }

    /// Traffic class (DSCP and ECN, RFC 8200 §7).
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (be16(self.buf.as_ref(), 0) >> 4) as u8
    }

    /// The 20-bit flow label (RFC 8200 §6, RFC 6437).
    #[inline]
    pub fn flow_label(&self) -> u32 {
        be32(self.buf.as_ref(), 0) & 0x000f_ffff
    }

    /// Payload length: the bytes after the fixed header, extension headers included.
    #[inline]
    pub fn payload_len(&self) -> u16 {
        be16(self.buf.as_ref(), field::PAYLOAD_LEN)
    }

    /// Next header: the first extension header or the upper-layer protocol.
    #[inline]
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol(self.buf.as_ref()[field::NEXT_HEADER])
    }

    /// Hop limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buf.as_ref()[field::HOP_LIMIT]
    }

    /// Source address.
    #[inline]
    pub fn src(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.src_octets())
    }

    /// Destination address.
    #[inline]
    pub fn dst(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.dst_octets())
    }

    /// Source address bytes.
    #[inline]
    pub fn src_octets(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buf.as_ref()[field::SRC..field::SRC + 16]);
        a
    }

    /// Destination address bytes.
    #[inline]
    pub fn dst_octets(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buf.as_ref()[field::DST..field::DST + 16]);
        a
    }

    /// Destination as a host-order integer (for LPM lookups).
    #[inline]
    pub fn dst_u128(&self) -> u128 {
        u128::from_be_bytes(self.dst_octets())
    }

    /// The payload per the payload length field, clamped to the buffer (so it is safe on a
    /// packet that failed [`check_len`](Self::check_len)). Extension headers included.
    pub fn payload(&self) -> &[u8] {
        let b = self.buf.as_ref();
        let end = (HEADER_LEN + self.payload_len() as usize).min(b.len());
        &b[HEADER_LEN..end]
    }

    /// Walks the extension-header chain (Hop-by-Hop, Routing, Fragment, Destination Options)
    /// and returns the next-header value after the last of them and the offset of what it
    /// names, counted from the start of the IPv6 header.
    ///
    /// The walk stays inside the payload (payload length clamped to the buffer) and stops:
    /// - at any other next-header value (TCP, UDP, ICMPv6, No Next Header 59, AH, ESP, ...),
    ///   which is returned as the upper layer; for No Next Header the offset is where the
    ///   (ignored) rest of the payload starts (RFC 8200 §4.7);
    /// - at a Fragment header (RFC 8200 §4.5) with a non-zero fragment offset, returning
    ///   `(44, offset of the Fragment header)`: a later fragment holds no upper-layer header,
    ///   so its bytes must not be parsed as one. A first fragment (offset 0) or an atomic
    ///   fragment (RFC 6946) is walked through.
    ///
    /// Errors: [`WireError::Truncated`] if an extension header runs past the payload;
    /// `Malformed("hop-by-hop not first")` for a Hop-by-Hop header anywhere but directly
    /// after the fixed header (RFC 8200 §4.3); `Malformed("too many extension headers")`
    /// past [`MAX_EXTENSION_HEADERS`]. Never panics.
    pub fn walk_extensions(&self) -> Result<(u8, usize), WireError> {
        let b = self.buf.as_ref();
        let end = (HEADER_LEN + self.payload_len() as usize).min(b.len());
        let mut nh = b[6];
        let mut off = HEADER_LEN;
        let mut count = 0;
        while is_walked_extension(nh) {
            if nh == next_header::HOP_BY_HOP && off != HEADER_LEN {
                return Err(WireError::Malformed("hop-by-hop not first"));
            }
            if count == MAX_EXTENSION_HEADERS {
                return Err(WireError::Malformed("too many extension headers"));
            }
            count += 1;
            // Every walked header starts with Next Header and a length byte (for Fragment
            // a reserved byte), and is at least 8 bytes long.
            if end < off + 8 {
                return Err(WireError::Truncated);
            }
            let len = if nh == next_header::FRAGMENT {
                // Fixed 8 bytes (RFC 8200 §4.5); offset in 8-byte units in the top 13 bits.
                if be16(b, off + 2) & 0xfff8 != 0 {
                    return Ok((next_header::FRAGMENT, off));
                }
                8
            } else {
                // Hdr Ext Len: 8-byte units, not counting the first 8 (§4.3, §4.4, §4.6).
                (b[off + 1] as usize + 1) * 8
            };
            if end < off + len {
                return Err(WireError::Truncated);
            }
            nh = b[off];
            off += len;
        }
        Ok((nh, off))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Sets the version field, keeping the traffic class.
    #[inline]
    pub fn set_version(&mut self, v: u8) {
        let b = self.buf.as_mut();
        b[0] = (v << 4) | (b[0] & 0x0f);
    }

    /// Sets the traffic class, keeping version and flow label.
    #[inline]
    pub fn set_traffic_class(&mut self, tc: u8) {
        let b = self.buf.as_mut();
        b[0] = (b[0] & 0xf0) | (tc >> 4);
        b[1] = (tc << 4) | (b[1] & 0x0f);
    }

    /// Sets the flow label (low 20 bits of `fl`), keeping version and traffic class.
    #[inline]
    pub fn set_flow_label(&mut self, fl: u32) {
        let b = self.buf.as_mut();
        b[1] = (b[1] & 0xf0) | ((fl >> 16) as u8 & 0x0f);
        b[2..4].copy_from_slice(&(fl as u16).to_be_bytes());
    }

    /// Sets the payload length field.
    #[inline]
    pub fn set_payload_len(&mut self, v: u16) {
        self.buf.as_mut()[4..6].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the next header.
    #[inline]
    pub fn set_next_header(&mut self, p: IpProtocol) {
        self.buf.as_mut()[field::NEXT_HEADER] = p.0;
    }

    /// Sets the hop limit.
    #[inline]
    pub fn set_hop_limit(&mut self, h: u8) {
        self.buf.as_mut()[field::HOP_LIMIT] = h;
    }

    /// Decrements the hop limit (wrapping: callers forwarding a packet check for a hop limit
    /// of 1 or less first, RFC 8200 §3). IPv6 has no header checksum to update.
    #[inline]
    pub fn decrement_hop_limit(&mut self) {
        let b = self.buf.as_mut();
        b[7] = b[7].wrapping_sub(1);
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src(&mut self, a: Ipv6Addr) {
        self.buf.as_mut()[field::SRC..field::SRC + 16].copy_from_slice(&a.octets());
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_dst(&mut self, a: Ipv6Addr) {
        self.buf.as_mut()[field::DST..field::DST + 16].copy_from_slice(&a.octets());
    }

    /// The payload per the payload length field (clamped to the buffer), writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = (HEADER_LEN + self.payload_len() as usize).min(self.buf.as_ref().len());
        &mut self.buf.as_mut()[HEADER_LEN..end]
    }
}

/// A high-level IPv6 header for building and summarising packets (traffic class and flow
/// label zero when emitted; extension headers, if any, are part of the payload).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Ipv6Repr {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// Next header of the fixed header.
    pub next_header: IpProtocol,
    /// Hop limit.
    pub hop_limit: u8,
    /// Payload length in bytes.
    pub payload_len: usize,
}

impl Ipv6Repr {
    /// Summarises a checked packet; fails if the payload length exceeds the buffer
    /// ([`Ipv6Packet::check_len`]).
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) -> Result<Ipv6Repr, WireError> {
        p.check_len()?;
        Ok(Ipv6Repr {
            src: p.src(),
            dst: p.dst(),
            next_header: p.next_header(),
            hop_limit: p.hop_limit(),
            payload_len: p.payload_len() as usize,
        })
    }

    /// Header length when emitted (40).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Header plus payload length.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the 40-byte fixed header. The payload is not touched.
    ///
    /// # Panics
    /// If the packet's buffer is shorter than 40 bytes, or the payload length exceeds 65535.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Ipv6Packet<T>) {
        let len = u16::try_from(self.payload_len).expect("IPv6 payload length over 65535");
        p.buf.as_mut()[0..4].copy_from_slice(&[0x60, 0, 0, 0]);
        p.set_payload_len(len);
        p.set_next_header(self.next_header);
        p.set_hop_limit(self.hop_limit);
        p.set_src(self.src);
        p.set_dst(self.dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SRC: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
    const DST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);

    /// 2001:db8::1 -> 2001:db8::2, traffic class 0xb8 (EF), flow label 0x12345, UDP,
    /// payload length 8, hop limit 64; then an 8-byte payload.
    const PKT: [u8; 48] = [
        0x6b, 0x81, 0x23, 0x45, 0x00, 0x08, 0x11, 0x40, // ver/tc/flow, len, nh, hlim
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, // src
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, // dst
        1, 2, 3, 4, 5, 6, 7, 8,
    ];

    /// `PKT`'s header with next header `nh` followed by `exts` and 8 bytes of payload.
    fn with_exts(nh: u8, exts: &[u8]) -> Vec<u8> {
        let mut p = PKT[..40].to_vec();
        p[6] = nh;
        p.extend_from_slice(exts);
        p.extend_from_slice(&[0xaa; 8]);
        let len = (p.len() - 40) as u16;
        p[4..6].copy_from_slice(&len.to_be_bytes());
        p
    }

    #[test]
    fn parse_fixed_header() {
        let p = Ipv6Packet::new_checked(&PKT[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0xb8);
        assert_eq!(p.flow_label(), 0x12345);
        assert_eq!(p.payload_len(), 8);
        assert_eq!(p.next_header(), IpProtocol::UDP);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!(p.src(), SRC);
        assert_eq!(p.dst(), DST);
        assert_eq!(p.dst_u128(), u128::from(DST));
        assert_eq!(p.payload(), &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert!(p.check_len().is_ok());
        assert_eq!(p.walk_extensions(), Ok((next_header::UDP, 40)));
        assert_eq!(
            Ipv6Repr::parse(&p),
            Ok(Ipv6Repr {
                src: SRC,
                dst: DST,
                next_header: IpProtocol::UDP,
                hop_limit: 64,
                payload_len: 8
            })
        );
    }

    #[test]
    fn length_and_version_checks() {
        assert_eq!(
            Ipv6Packet::new_checked(&PKT[..39]).err(),
            Some(WireError::Truncated)
        );
        let mut v4 = PKT;
        v4[0] = 0x45;
        assert_eq!(
            Ipv6Packet::new_checked(&v4[..]).err(),
            Some(WireError::BadVersion)
        );
        // Payload length 8 with 7 payload bytes: truncated (RFC 8200 §3).
        let p = Ipv6Packet::new_checked(&PKT[..47]).unwrap();
        assert_eq!(p.check_len(), Err(WireError::Truncated));
        assert_eq!(Ipv6Repr::parse(&p), Err(WireError::Truncated));
        assert_eq!(p.payload().len(), 7, "payload clamps to the buffer");
        // Trailing bytes (Ethernet padding) are fine and not part of the payload.
        let mut padded = PKT.to_vec();
        padded.extend([0; 10]);
        let p = Ipv6Packet::new_checked(&padded[..]).unwrap();
        assert!(p.check_len().is_ok());
        assert_eq!(p.payload().len(), 8);
    }

    #[test]
    fn setters_and_hop_limit() {
        let mut b = PKT;
        let mut p = Ipv6Packet::new_checked(&mut b[..]).unwrap();
        p.set_traffic_class(0x2e);
        assert_eq!(
            (p.version(), p.traffic_class(), p.flow_label()),
            (6, 0x2e, 0x12345)
        );
        p.set_flow_label(0xfffff);
        assert_eq!((p.traffic_class(), p.flow_label()), (0x2e, 0xfffff));
        p.set_flow_label(0x1_00001); // only 20 bits kept
        assert_eq!((p.traffic_class(), p.flow_label()), (0x2e, 0x00001));
        p.decrement_hop_limit();
        assert_eq!(p.hop_limit(), 63);
        p.set_hop_limit(0);
        p.decrement_hop_limit();
        assert_eq!(p.hop_limit(), 255, "wraps; callers check first");
        p.set_src(DST);
        p.set_dst(SRC);
        p.set_next_header(IpProtocol::TCP);
        p.set_payload_len(4);
        p.payload_mut().fill(0xee);
        assert_eq!((p.src(), p.dst()), (DST, SRC));
        assert_eq!(p.next_header(), IpProtocol::TCP);
        assert_eq!(p.payload(), &[0xee; 4]);
        p.set_version(4);
        assert_eq!(b[0], 0x42);
        assert_eq!(&b[44..48], &[5, 6, 7, 8], "outside the payload untouched");
    }

    #[test]
    fn emit_round_trips() {
        let r = Ipv6Repr {
            src: SRC,
            dst: DST,
            next_header: IpProtocol::ICMPV6,
            hop_limit: 255,
            payload_len: 8,
        };
        let mut b = [0xffu8; 48];
        r.emit(&mut Ipv6Packet::new_unchecked(&mut b[..]));
        assert_eq!(&b[..8], &[0x60, 0, 0, 0, 0, 8, 58, 255]);
        assert_eq!(&b[8..40], &PKT[8..40]);
        assert_eq!(b[40], 0xff, "payload untouched");
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Ipv6Repr::parse(&p), Ok(r));
        assert_eq!((r.header_len(), r.buffer_len()), (40, 48));
    }

    #[test]
    fn walks_recommended_order() {
        // RFC 8200 §4.1 order: Hop-by-Hop (8 bytes, PadN), Destination Options (16 bytes),
        // Routing (a type 2 header, RFC 6275 §6.4: one address, 24 bytes), Fragment (first
        // fragment, M=1), then TCP.
        let mut e = vec![60, 0, 1, 4, 0, 0, 0, 0]; // HBH -> DO, PadN 4
        e.extend([43, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]); // DO -> RH
        e.extend([44, 2, 2, 1, 0, 0, 0, 0]); // RH -> FH, len 2 (24 bytes)
        e.extend(SRC.octets());
        e.extend([6, 0, 0x00, 0x01, 0xde, 0xad, 0xbe, 0xef]); // FH -> TCP, off 0, M=1
        let pkt = with_exts(next_header::HOP_BY_HOP, &e);
        let p = Ipv6Packet::new_checked(&pkt[..]).unwrap();
        assert_eq!(
            p.walk_extensions(),
            Ok((next_header::TCP, 40 + 8 + 16 + 24 + 8))
        );
    }

    #[test]
    fn non_first_fragment_stops_at_fragment_header() {
        // Fragment offset 185 (1480 bytes), M=0: the last fragment holds no UDP header.
        let off: u16 = 185 << 3;
        let mut e = vec![17, 0];
        e.extend(off.to_be_bytes());
        e.extend([0, 0, 0, 7]);
        let pkt = with_exts(next_header::FRAGMENT, &e);
        let p = Ipv6Packet::new_checked(&pkt[..]).unwrap();
        assert_eq!(p.walk_extensions(), Ok((next_header::FRAGMENT, 40)));
        // An atomic fragment (RFC 6946: offset 0, M=0) is walked through.
        let pkt = with_exts(next_header::FRAGMENT, &[17, 0, 0, 0, 0, 0, 0, 7]);
        let p = Ipv6Packet::new_checked(&pkt[..]).unwrap();
        assert_eq!(p.walk_extensions(), Ok((next_header::UDP, 48)));
    }

    #[test]
    fn walk_rejects_malformed_chains() {
        // Hop-by-Hop after Destination Options (RFC 8200 §4.3: only first).
        let pkt = with_exts(
            next_header::DEST_OPTS,
            &[0, 0, 1, 4, 0, 0, 0, 0, 6, 0, 1, 4, 0, 0, 0, 0],
        );
        let p = Ipv6Packet::new_checked(&pkt[..]).unwrap();
        assert_eq!(
            p.walk_extensions(),
            Err(WireError::Malformed("hop-by-hop not first"))
        );
        // Hdr Ext Len pointing past the payload.
        let pkt = with_exts(next_header::DEST_OPTS, &[6, 2, 1, 4, 0, 0, 0, 0]);
        let p = Ipv6Packet::new_checked(&pkt[..]).unwrap();
        assert_eq!(p.walk_extensions(), Err(WireError::Truncated));
        // A header that fits in the buffer but not in the payload length is truncated too.
        let mut pkt = with_exts(next_header::DEST_OPTS, &[6, 0, 1, 4, 0, 0, 0, 0]);
        pkt[5] = 4;
        let p = Ipv6Packet::new_checked(&pkt[..]).unwrap();
        assert_eq!(p.walk_extensions(), Err(WireError::Truncated));
        // Fewer than 8 bytes left for an extension header.
        let mut pkt = PKT[..44].to_vec();
        pkt[5] = 4;
        pkt[6] = next_header::ROUTING;
        let p = Ipv6Packet::new_checked(&pkt[..]).unwrap();
        assert_eq!(p.walk_extensions(), Err(WireError::Truncated));
        // Nine Destination Options headers: over the bound.
        let mut e = Vec::new();
        for _ in 0..9 {
            e.extend([60, 0, 1, 4, 0, 0, 0, 0]);
        }
        let pkt = with_exts(next_header::DEST_OPTS, &e);
        let p = Ipv6Packet::new_checked(&pkt[..]).unwrap();
        assert_eq!(
            p.walk_extensions(),
            Err(WireError::Malformed("too many extension headers"))
        );
        // Eight are fine.
        let mut e = Vec::new();
        for _ in 0..7 {
            e.extend([60, 0, 1, 4, 0, 0, 0, 0]);
        }
        e.extend([59, 0, 1, 4, 0, 0, 0, 0]);
        let pkt = with_exts(next_header::DEST_OPTS, &e);
        let p = Ipv6Packet::new_checked(&pkt[..]).unwrap();
        assert_eq!(
            p.walk_extensions(),
            Ok((next_header::NO_NEXT_HEADER, 40 + 64))
        );
    }

    #[test]
    fn pseudo_header_matches_byte_layout() {
        // RFC 8200 §8.1: src, dst, 32-bit length, 3 zero bytes, next header.
        let mut bytes = Vec::new();
        bytes.extend(SRC.octets());
        bytes.extend(DST.octets());
        bytes.extend(0x0001_0010u32.to_be_bytes());
        bytes.extend([0, 0, 0, 58]);
        assert_eq!(
            pseudo_header_sum(SRC, DST, 58, 0x0001_0010),
            checksum::sum(&bytes)
        );
    }

    proptest! {
        #[test]
        fn new_checked_never_panics(b in proptest::collection::vec(any::<u8>(), 0..120)) {
            if let Ok(p) = Ipv6Packet::new_checked(&b[..]) {
                let _ = (p.check_len(), p.traffic_class(), p.flow_label(), p.src(), p.dst());
                prop_assert!(p.payload().len() <= b.len() - HEADER_LEN);
                if let Ok((_, off)) = p.walk_extensions() {
                    prop_assert!(off <= b.len());
                }
                if let Ok(r) = Ipv6Repr::parse(&p) {
                    prop_assert_eq!(r.payload_len, p.payload().len());
                }
            }
        }

        #[test]
        fn walk_never_panics_on_extension_soup(
            first in prop::sample::select(vec![0u8, 43, 44, 60, 6]),
            body in proptest::collection::vec(
                (prop::sample::select(vec![0u8, 43, 44, 60, 6, 17, 59]), 0u8..4, any::<u8>()), 0..12),
            cut in 0usize..200,
        ) {
            // Chains of plausible headers with random lengths and fragment offsets.
            let mut e = Vec::new();
            for (nh, len, x) in body {
                e.extend([nh, len, x, x, 0, 0, 0, 0]);
                e.extend(std::iter::repeat_n(0u8, len as usize * 8));
            }
            let mut pkt = with_exts(first, &e);
            pkt.truncate(cut.max(HEADER_LEN));
            let p = Ipv6Packet::new_checked(&pkt[..]).unwrap();
            if let Ok((_, off)) = p.walk_extensions() {
                prop_assert!(off <= pkt.len());
            }
        }

        #[test]
        fn emit_parse_round_trip(src: u128, dst: u128, nh: u8, hl: u8, len in 0usize..100) {
            let r = Ipv6Repr {
                src: src.into(), dst: dst.into(), next_header: IpProtocol(nh), hop_limit: hl,
                payload_len: len,
            };
            let mut b = vec![0u8; r.buffer_len()];
            r.emit(&mut Ipv6Packet::new_unchecked(&mut b[..]));
            let p = Ipv6Packet::new_checked(&b[..]).unwrap();
            prop_assert_eq!(Ipv6Repr::parse(&p), Ok(r));
        }
    }
}
