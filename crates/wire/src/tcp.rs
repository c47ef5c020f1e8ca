//! TCP (RFC 9293): a zero-copy view of a segment, its options, its checksum over the IPv4 or
//! IPv6 pseudo-header, and a [`TcpRepr`] for the control plane.

use crate::checksum;
use crate::error::{be16, be32, WireError};
use crate::ipv4::IpProtocol;
use crate::ipv6::pseudo_header_sum;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Minimum (option-less) header length.
pub const MIN_HEADER_LEN: usize = 20;

/// The control bits of a TCP header (RFC 9293 §3.1, RFC 3168 §6.1 for ECE and CWR), as the
/// low 9 bits of the 16-bit word holding the data offset.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct TcpFlags(pub u16);

impl TcpFlags {
    /// No more data from sender.
    pub const FIN: TcpFlags = TcpFlags(0x001);
    /// Synchronize sequence numbers.
    pub const SYN: TcpFlags = TcpFlags(0x002);
    /// Reset the connection.
    pub const RST: TcpFlags = TcpFlags(0x004);
    /// Push function.
    pub const PSH: TcpFlags = TcpFlags(0x008);
    /// Acknowledgment field is significant.
    pub const ACK: TcpFlags = TcpFlags(0x010);
    /// Urgent pointer field is significant.
    pub const URG: TcpFlags = TcpFlags(0x020);
    /// ECN-Echo (RFC 3168).
    pub const ECE: TcpFlags = TcpFlags(0x040);
    /// Congestion Window Reduced (RFC 3168).
    pub const CWR: TcpFlags = TcpFlags(0x080);
    /// The former ECN nonce sum bit (RFC 3540, historic per RFC 8311).
    pub const NS: TcpFlags = TcpFlags(0x100);
    /// Every bit above; the three bits between them and the data offset are reserved.
    pub const ALL: TcpFlags = TcpFlags(0x1ff);

    /// Whether every bit of `other` is set.
    #[inline]
    pub const fn contains(self, other: TcpFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any bit of `other` is set.
    #[inline]
    pub const fn intersects(self, other: TcpFlags) -> bool {
        self.0 & other.0 != 0
    }
}

impl std::ops::BitOr for TcpFlags {
    type Output = TcpFlags;
    fn bitor(self, rhs: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 | rhs.0)
    }
}

impl fmt::Display for TcpFlags {
    /// The names of the set bits separated by spaces (`SYN ACK`), or `none`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [&str; 9] = ["FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR", "NS"];
        let mut first = true;
        for (i, n) in NAMES.iter().enumerate() {
            if self.0 & (1 << i) != 0 {
                if !first {
                    f.write_str(" ")?;
                }
                f.write_str(n)?;
                first = false;
            }
        }
        if first {
            f.write_str("none")?;
        }
        Ok(())
    }
}

/// TCP option kinds (RFC 9293 §3.2, RFC 7323, RFC 2018).
pub mod option_kind {
    /// End of option list.
    pub const END: u8 = 0;
    /// No operation (padding).
    pub const NOP: u8 = 1;
    /// Maximum segment size.
    pub const MSS: u8 = 2;
    /// Window scale (RFC 7323 §2).
    pub const WINDOW_SCALE: u8 = 3;
    /// SACK permitted (RFC 2018).
    pub const SACK_PERMITTED: u8 = 4;
    /// SACK blocks (RFC 2018).
    pub const SACK: u8 = 5;
    /// Timestamps (RFC 7323 §3).
    pub const TIMESTAMPS: u8 = 8;
}

/// One TCP option.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TcpOption<'a> {
    /// No-operation padding byte.
    NoOperation,
    /// Maximum segment size.
    Mss(u16),
    /// Window scale shift count.
    WindowScale(u8),
    /// SACK permitted.
    SackPermitted,
    /// SACK blocks as raw bytes (pairs of 32-bit left and right edges).
    Sack(&'a [u8]),
    /// Timestamps.
    Timestamps {
        /// TSval.
        tsval: u32,
        /// TSecr.
        tsecr: u32,
    },
    /// Any other option: its kind and the bytes after kind and length.
    Unknown {
        /// Option kind.
        kind: u8,
        /// Option data.
        data: &'a [u8],
    },
}

/// An iterator over the options of a TCP header. It ends at the End of Option List or the end
/// of the options; it yields an error and then ends at a length below 2 (RFC 9293 §3.2: the
/// length counts the kind and length bytes), an option running past the header, or a known
/// option of the wrong length (MSS 4, window scale 3, SACK permitted 2, timestamps 10, SACK
/// 2 + a multiple of 8).
#[derive(Debug, Clone)]
pub struct TcpOptions<'a> {
    rest: &'a [u8],
}

impl<'a> TcpOptions<'a> {
    /// Iterates over the options in `b` (the bytes between the 20-byte header and the data).
    pub fn new(b: &'a [u8]) -> Self {
        TcpOptions { rest: b }
    }

    fn parse_one(&mut self) -> Result<Option<TcpOption<'a>>, WireError> {
        let b = self.rest;
        match b.first() {
            None | Some(&option_kind::END) => {
                self.rest = &[];
                return Ok(None);
            }
            Some(&option_kind::NOP) => {
                self.rest = &b[1..];
                return Ok(Some(TcpOption::NoOperation));
            }
            Some(_) => {}
        }
        let Some(&len) = b.get(1) else {
            return Err(WireError::Truncated);
        };
        let len = len as usize;
        if len < 2 {
            return Err(WireError::Malformed("tcp option length"));
        }
        if len > b.len() {
            return Err(WireError::Truncated);
        }
        let (o, rest) = b.split_at(len);
        self.rest = rest;
        let bad = |ok: bool| {
            if ok {
                Ok(())
            } else {
                Err(WireError::Malformed("tcp option length"))
            }
        };
        Ok(Some(match o[0] {
            option_kind::MSS => {
                bad(len == 4)?;
                TcpOption::Mss(be16(o, 2))
            }
            option_kind::WINDOW_SCALE => {
                bad(len == 3)?;
                TcpOption::WindowScale(o[2])
            }
            option_kind::SACK_PERMITTED => {
                bad(len == 2)?;
                TcpOption::SackPermitted
            }
            option_kind::SACK => {
                bad((len - 2) % 8 == 0)?;
                TcpOption::Sack(&o[2..])
            }
            option_kind::TIMESTAMPS => {
                bad(len == 10)?;
                TcpOption::Timestamps {
                    tsval: be32(o, 2),
                    tsecr: be32(o, 6),
                }
            }
            kind => TcpOption::Unknown {
                kind,
                data: &o[2..],
            },
        }))
    }
}

impl<'a> Iterator for TcpOptions<'a> {
    type Item = Result<TcpOption<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.parse_one() {
            Ok(o) => o.map(Ok),
            Err(e) => {
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
}

/// A zero-copy view of a TCP segment. The buffer is the whole segment (the IP payload): TCP
/// has no length field, and the checksum covers every byte.
///
/// [`new_checked`](Self::new_checked) validates the 20-byte header and the data offset
/// ([`check_len`](Self::check_len)), so that options and payload are always in bounds.
#[derive(Debug, Clone)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Wraps `buf` without any check; accessors panic if it is shorter than the header. For
    /// building segments with [`TcpRepr::emit`] in a buffer the caller sized.
    pub const fn new_unchecked(buf: T) -> Self {
        TcpPacket { buf }
    }

    /// Wraps `buf` after checking the header fits and the data offset is valid
    /// ([`check_len`](Self::check_len)). Never panics.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let p = TcpPacket { buf };
        p.check_len()?;
        Ok(p)
    }

    /// Checks the buffer holds the 20-byte header and the data offset is at least 5 words
    /// (RFC 9293 §3.1) and within the buffer. Never panics.
    pub fn check_len(&self) -> Result<(), WireError> {
        let b = self.buf.as_ref();
        if b.len() < MIN_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let hl = (b[12] >> 4) as usize * 4;
        if hl < MIN_HEADER_LEN {
            return Err(WireError::Malformed("tcp data offset"));
        }
        if hl > b.len() {
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

    /// Sequence number.
    #[inline]
    pub fn seq_number(&self) -> u32 {
        be32(self.buf.as_ref(), 4)
    }

    /// Acknowledgment number (meaningful with [`TcpFlags::ACK`]).
    #[inline]
    pub fn ack_number(&self) -> u32 {
        be32(self.buf.as_ref(), 8)
    }

    /// Data offset field: header length in 32-bit words.
    #[inline]
    pub fn data_offset(&self) -> u8 {
        self.buf.as_ref()[12] >> 4
    }

    /// Header length in bytes (`data_offset * 4`).
    #[inline]
    pub fn header_len(&self) -> usize {
        self.data_offset() as usize * 4
    }

    /// Control bits (the reserved bits masked off).
    #[inline]
    pub fn flags(&self) -> TcpFlags {
        TcpFlags(be16(self.buf.as_ref(), 12) & TcpFlags::ALL.0)
    }

    /// Window.
    #[inline]
    pub fn window(&self) -> u16 {
        be16(self.buf.as_ref(), 14)
    }

    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buf.as_ref(), 16)
    }

    /// Urgent pointer.
    #[inline]
    pub fn urgent_ptr(&self) -> u16 {
        be16(self.buf.as_ref(), 18)
    }

    /// The option bytes (between the 20-byte header and the data offset), clamped to the
    /// buffer (so it is safe on an unchecked view).
    pub fn options(&self) -> &[u8] {
        let b = self.buf.as_ref();
        let end = self.header_len().min(b.len());
        &b[MIN_HEADER_LEN.min(end)..end]
    }

    /// The options, parsed.
    pub fn options_iter(&self) -> TcpOptions<'_> {
        TcpOptions::new(self.options())
    }

    /// The data after the header (empty if the data offset is past the buffer).
    pub fn payload(&self) -> &[u8] {
        let b = self.buf.as_ref();
        &b[self.header_len().max(MIN_HEADER_LEN).min(b.len())..]
    }

    /// Ones'-complement sum of the segment (not inverted).
    fn segment_sum(&self) -> u16 {
        checksum::sum(self.buf.as_ref())
    }

    /// The sum of the IPv4 pseudo-header (RFC 9293 §3.1) for this segment.
    fn pseudo_v4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> u16 {
        // The TCP length folded in separately, so that a length over 16 bits cannot wrap.
        let len = self.buf.as_ref().len() as u64;
        checksum::combine(
            checksum::pseudo_header_v4(src, dst, IpProtocol::TCP.0, 0),
            checksum::fold(len),
        )
    }

    /// The sum of the IPv6 pseudo-header (RFC 8200 §8.1) for this segment.
    fn pseudo_v6(&self, src: Ipv6Addr, dst: Ipv6Addr) -> u16 {
        let len = u32::try_from(self.buf.as_ref().len()).unwrap_or(u32::MAX);
        pseudo_header_sum(src, dst, IpProtocol::TCP.0, len)
    }

    /// Whether the checksum over the IPv4 pseudo-header and the segment is correct.
    pub fn verify_checksum_v4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        checksum::combine(self.pseudo_v4(src, dst), self.segment_sum()) == 0xffff
    }

    /// Whether the checksum over the IPv6 pseudo-header and the segment is correct.
    pub fn verify_checksum_v6(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        checksum::combine(self.pseudo_v6(src, dst), self.segment_sum()) == 0xffff
    }

    /// The checksum the segment should carry over IPv4, the checksum field taken as zero.
    pub fn compute_checksum_v4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> u16 {
        let s = checksum::combine(self.pseudo_v4(src, dst), self.segment_sum());
        !checksum::combine(s, !self.checksum())
    }

    /// The checksum the segment should carry over IPv6, the checksum field taken as zero.
    pub fn compute_checksum_v6(&self, src: Ipv6Addr, dst: Ipv6Addr) -> u16 {
        let s = checksum::combine(self.pseudo_v6(src, dst), self.segment_sum());
        !checksum::combine(s, !self.checksum())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
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

    /// Sets the sequence number (checksum not updated).
    #[inline]
    pub fn set_seq_number(&mut self, v: u32) {
        self.buf.as_mut()[4..8].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the acknowledgment number (checksum not updated).
    #[inline]
    pub fn set_ack_number(&mut self, v: u32) {
        self.buf.as_mut()[8..12].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the data offset from a header length in bytes (a multiple of 4, 20..=60),
    /// keeping the flags.
    #[inline]
    pub fn set_header_len(&mut self, len: usize) {
        debug_assert!(len & 3 == 0 && (MIN_HEADER_LEN..=60).contains(&len));
        let b = self.buf.as_mut();
        b[12] = (((len / 4) as u8) << 4) | (b[12] & 0x0f);
    }

    /// Sets the control bits, clearing the reserved bits (RFC 9293 §3.1: "must be zero"),
    /// keeping the data offset.
    #[inline]
    pub fn set_flags(&mut self, f: TcpFlags) {
        let b = self.buf.as_mut();
        let v = (u16::from(b[12] & 0xf0) << 8) | (f.0 & TcpFlags::ALL.0);
        b[12..14].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the window (checksum not updated).
    #[inline]
    pub fn set_window(&mut self, v: u16) {
        self.buf.as_mut()[14..16].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        self.buf.as_mut()[16..18].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the urgent pointer (checksum not updated).
    #[inline]
    pub fn set_urgent_ptr(&mut self, v: u16) {
        self.buf.as_mut()[18..20].copy_from_slice(&v.to_be_bytes());
    }

    /// The option bytes, writable (clamped as in [`options`](TcpPacket::options)).
    pub fn options_mut(&mut self) -> &mut [u8] {
        let end = self.header_len().min(self.buf.as_ref().len());
        &mut self.buf.as_mut()[MIN_HEADER_LEN.min(end)..end]
    }

    /// The data after the header, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self
            .header_len()
            .max(MIN_HEADER_LEN)
            .min(self.buf.as_ref().len());
        &mut self.buf.as_mut()[start..]
    }

    /// Computes and stores the checksum over the IPv4 pseudo-header and the whole buffer.
    pub fn fill_checksum_v4(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.set_checksum(0);
        let c = self.compute_checksum_v4(src, dst);
        self.set_checksum(c);
    }

    /// Computes and stores the checksum over the IPv6 pseudo-header and the whole buffer.
    pub fn fill_checksum_v6(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        self.set_checksum(0);
        let c = self.compute_checksum_v6(src, dst);
        self.set_checksum(c);
    }
}

/// A high-level TCP header for the control plane (no options, urgent pointer zero when
/// emitted).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TcpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq_number: u32,
    /// Acknowledgment number.
    pub ack_number: u32,
    /// Control bits.
    pub flags: TcpFlags,
    /// Window.
    pub window: u16,
    /// Payload length in bytes.
    pub payload_len: usize,
}

impl TcpRepr {
    /// Summarises a checked segment (options skipped). The checksum is not verified here (it
    /// needs the addresses: [`TcpPacket::verify_checksum_v4`] / `_v6`).
    pub fn parse<T: AsRef<[u8]>>(p: &TcpPacket<T>) -> Result<TcpRepr, WireError> {
        p.check_len()?;
        Ok(TcpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            seq_number: p.seq_number(),
            ack_number: p.ack_number(),
            flags: p.flags(),
            window: p.window(),
            payload_len: p.payload().len(),
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

    /// Writes the 20-byte header with a zero checksum; after writing the payload, call
    /// [`TcpPacket::fill_checksum_v4`] or [`TcpPacket::fill_checksum_v6`] on a view of
    /// exactly the segment.
    ///
    /// # Panics
    /// If the buffer is shorter than 20 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut TcpPacket<T>) {
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_seq_number(self.seq_number);
        p.set_ack_number(self.ack_number);
        p.buf.as_mut()[12] = 0;
        p.set_header_len(MIN_HEADER_LEN);
        p.set_flags(self.flags);
        p.set_window(self.window);
        p.set_checksum(0);
        p.set_urgent_ptr(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SRC4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const DST4: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 1);
    const SRC6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
    const DST6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);

    // The checksums of these fixtures were computed independently of this crate.

    /// A Linux-style SYN 10.0.0.1:40000 -> 10.0.1.1:80, seq 0x01020304, window 64240, options
    /// MSS 1460, SACK permitted, timestamps (0x00c0ffee, 0), NOP, window scale 7.
    const SYN4: [u8; 40] = [
        0x9c, 0x40, 0x00, 0x50, 0x01, 0x02, 0x03, 0x04, 0x00, 0x00, 0x00, 0x00, 0xa0, 0x02, 0xfa,
        0xf0, 0x96, 0xc8, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4, 0x04, 0x02, 0x08, 0x0a, 0x00, 0xc0,
        0xff, 0xee, 0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x03, 0x07,
    ];
    /// The same SYN between 2001:db8::1 and 2001:db8::2: checksum 0x5055.
    const SYN6_CHECKSUM: u16 = 0x5055;
    /// PSH+ACK 10.0.1.1:80 -> 10.0.0.1:40000, seq 0xa0b0c0d0, ack 0x01020305, window 502,
    /// data "hello".
    const DATA4: [u8; 25] = [
        0x00, 0x50, 0x9c, 0x40, 0xa0, 0xb0, 0xc0, 0xd0, 0x01, 0x02, 0x03, 0x05, 0x50, 0x18, 0x01,
        0xf6, 0x52, 0xe5, 0x00, 0x00, 0x68, 0x65, 0x6c, 0x6c, 0x6f,
    ];

    #[test]
    fn parse_syn_with_options() {
        let p = TcpPacket::new_checked(&SYN4[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port()), (40000, 80));
        assert_eq!((p.seq_number(), p.ack_number()), (0x01020304, 0));
        assert_eq!((p.data_offset(), p.header_len()), (10, 40));
        assert_eq!(p.flags(), TcpFlags::SYN);
        assert_eq!(p.window(), 64240);
        assert_eq!((p.checksum(), p.urgent_ptr()), (0x96c8, 0));
        assert_eq!(p.options().len(), 20);
        assert!(p.payload().is_empty());
        assert!(p.verify_checksum_v4(SRC4, DST4));
        assert!(!p.verify_checksum_v4(SRC4, Ipv4Addr::new(10, 0, 1, 2)));
        assert_eq!(p.compute_checksum_v4(SRC4, DST4), 0x96c8);
        assert_eq!(p.compute_checksum_v6(SRC6, DST6), SYN6_CHECKSUM);
        let opts: Vec<_> = p.options_iter().collect::<Result<_, _>>().unwrap();
        assert_eq!(
            opts,
            [
                TcpOption::Mss(1460),
                TcpOption::SackPermitted,
                TcpOption::Timestamps {
                    tsval: 0x00c0ffee,
                    tsecr: 0
                },
                TcpOption::NoOperation,
                TcpOption::WindowScale(7),
            ]
        );
        assert_eq!(
            TcpRepr::parse(&p),
            Ok(TcpRepr {
                src_port: 40000,
                dst_port: 80,
                seq_number: 0x01020304,
                ack_number: 0,
                flags: TcpFlags::SYN,
                window: 64240,
                payload_len: 0,
            })
        );
    }

    #[test]
    fn ipv6_checksum_fill_and_verify() {
        let mut s = SYN4;
        let mut p = TcpPacket::new_checked(&mut s[..]).unwrap();
        p.fill_checksum_v6(SRC6, DST6);
        assert_eq!(p.checksum(), SYN6_CHECKSUM);
        assert!(p.verify_checksum_v6(SRC6, DST6));
        assert!(!p.verify_checksum_v4(SRC4, DST4));
        p.fill_checksum_v4(SRC4, DST4);
        assert_eq!(s, SYN4);
    }

    #[test]
    fn data_segment_emit_matches_fixture() {
        let p = TcpPacket::new_checked(&DATA4[..]).unwrap();
        assert!(p.verify_checksum_v4(DST4, SRC4));
        assert_eq!(p.payload(), b"hello");
        assert!(p.options().is_empty());
        assert_eq!(p.options_iter().count(), 0);
        let r = TcpRepr::parse(&p).unwrap();
        assert_eq!(r.flags, TcpFlags::PSH | TcpFlags::ACK);
        assert_eq!(
            (r.ack_number, r.window, r.payload_len),
            (0x01020305, 502, 5)
        );

        let mut b = vec![0xffu8; r.buffer_len()];
        let mut q = TcpPacket::new_unchecked(&mut b[..]);
        r.emit(&mut q);
        q.payload_mut().copy_from_slice(b"hello");
        q.fill_checksum_v4(DST4, SRC4);
        assert_eq!(b, DATA4);
    }

    #[test]
    fn data_offset_edge_cases() {
        // RFC 9293 §3.1: the data offset counts 32-bit words, at least 5.
        let mut s = DATA4;
        s[12] = 0x40;
        assert_eq!(
            TcpPacket::new_checked(&s[..]).err(),
            Some(WireError::Malformed("tcp data offset"))
        );
        // 24-byte header claimed, 25 bytes present: ok, one payload byte.
        s[12] = 0x60;
        let p = TcpPacket::new_checked(&s[..]).unwrap();
        assert_eq!((p.options().len(), p.payload().len()), (4, 1));
        // 28-byte header claimed in 25 bytes.
        s[12] = 0x70;
        assert_eq!(
            TcpPacket::new_checked(&s[..]).err(),
            Some(WireError::Truncated)
        );
        // Unchecked views clamp instead of panicking.
        let p = TcpPacket::new_unchecked(&s[..]);
        assert_eq!((p.options().len(), p.payload().len()), (5, 0));
        s[12] = 0x00;
        let p = TcpPacket::new_unchecked(&s[..]);
        assert_eq!((p.options().len(), p.payload().len()), (0, 5));
        assert_eq!(
            TcpPacket::new_checked(&DATA4[..19]).err(),
            Some(WireError::Truncated)
        );
    }

    #[test]
    fn flags_setters_and_reserved_bits() {
        let mut s = DATA4;
        let mut p = TcpPacket::new_checked(&mut s[..]).unwrap();
        p.set_flags(TcpFlags(0xffff));
        assert_eq!(p.flags(), TcpFlags::ALL);
        assert_eq!(p.data_offset(), 5, "data offset kept");
        assert_eq!(s[12], 0x51, "reserved bits cleared");
        let mut p = TcpPacket::new_checked(&mut s[..]).unwrap();
        p.set_flags(TcpFlags::SYN | TcpFlags::ACK);
        p.set_header_len(24);
        assert_eq!(p.flags(), TcpFlags::SYN | TcpFlags::ACK);
        p.options_mut().copy_from_slice(&[2, 4, 0x05, 0x78]);
        p.set_src_port(1);
        p.set_dst_port(2);
        p.set_seq_number(3);
        p.set_ack_number(4);
        p.set_window(5);
        p.set_urgent_ptr(6);
        assert_eq!((p.src_port(), p.dst_port(), p.seq_number()), (1, 2, 3));
        assert_eq!((p.ack_number(), p.window(), p.urgent_ptr()), (4, 5, 6));
        assert_eq!(p.options_iter().next(), Some(Ok(TcpOption::Mss(1400))));
        assert!(
            p.flags().contains(TcpFlags::SYN)
                && p.flags().intersects(TcpFlags::RST | TcpFlags::ACK)
        );
        assert_eq!((TcpFlags::SYN | TcpFlags::ACK).to_string(), "SYN ACK");
        assert_eq!(TcpFlags::default().to_string(), "none");
        assert_eq!(
            TcpFlags::ALL.to_string(),
            "FIN SYN RST PSH ACK URG ECE CWR NS"
        );
    }

    #[test]
    fn malformed_options() {
        fn parse(b: &[u8]) -> Vec<Result<TcpOption<'_>, WireError>> {
            TcpOptions::new(b).collect()
        }
        // RFC 9293 §3.2: an illegal length (here 0 and 1) must be handled, not looped on.
        assert_eq!(
            parse(&[2, 0, 0, 0]),
            [Err(WireError::Malformed("tcp option length"))]
        );
        assert_eq!(
            parse(&[1, 30, 1]),
            [
                Ok(TcpOption::NoOperation),
                Err(WireError::Malformed("tcp option length"))
            ]
        );
        assert_eq!(parse(&[8, 10, 0, 0]), [Err(WireError::Truncated)]);
        assert_eq!(
            parse(&[1, 1, 8]),
            [
                Ok(TcpOption::NoOperation),
                Ok(TcpOption::NoOperation),
                Err(WireError::Truncated)
            ]
        );
        assert_eq!(
            parse(&[2, 3, 5]),
            [Err(WireError::Malformed("tcp option length"))]
        );
        assert_eq!(
            parse(&[5, 6, 0, 0, 0, 0]),
            [Err(WireError::Malformed("tcp option length"))]
        );
        // End of option list stops the walk; what follows is padding.
        assert_eq!(
            parse(&[3, 3, 14, 0, 0xff, 0xff]),
            [Ok(TcpOption::WindowScale(14))]
        );
        let sack = [5, 10, 0, 0, 0, 1, 0, 0, 0, 2];
        assert_eq!(parse(&sack), [Ok(TcpOption::Sack(&sack[2..]))]);
        assert_eq!(
            parse(&[30, 3, 9]),
            [Ok(TcpOption::Unknown {
                kind: 30,
                data: &[9]
            })]
        );
    }

    proptest! {
        #[test]
        fn new_checked_never_panics(b in proptest::collection::vec(any::<u8>(), 0..80), s: u32, d: u32, s6: u128, d6: u128) {
            if let Ok(p) = TcpPacket::new_checked(&b[..]) {
                prop_assert_eq!(p.header_len() + p.payload().len(), b.len());
                prop_assert_eq!(p.options().len(), p.header_len() - MIN_HEADER_LEN);
                let _ = (p.flags().to_string(), p.verify_checksum_v4(s.into(), d.into()));
                let _ = p.verify_checksum_v6(s6.into(), d6.into());
                prop_assert!(p.options_iter().count() <= p.options().len());
                let r = TcpRepr::parse(&p).unwrap();
                prop_assert_eq!(r.payload_len, p.payload().len());
            }
            if b.len() >= MIN_HEADER_LEN {
                // Unchecked views of a whole fixed header clamp a bad data offset.
                let p = TcpPacket::new_unchecked(&b[..]);
                let _ = (p.options().len(), p.payload().len(), p.check_len());
            }
            for o in TcpOptions::new(&b) {
                let _ = o;
            }
        }

        #[test]
        fn emit_fill_verify_round_trip(
            sp: u16, dp: u16, seq: u32, ack: u32, flags in 0u16..0x200, win: u16,
            payload in proptest::collection::vec(any::<u8>(), 0..64), s6: u128, d6: u128, s: u32, d: u32,
        ) {
            let r = TcpRepr {
                src_port: sp, dst_port: dp, seq_number: seq, ack_number: ack,
                flags: TcpFlags(flags), window: win, payload_len: payload.len(),
            };
            let mut b = vec![0xa5u8; r.buffer_len()];
            let mut p = TcpPacket::new_unchecked(&mut b[..]);
            r.emit(&mut p);
            p.payload_mut().copy_from_slice(&payload);
            p.fill_checksum_v6(s6.into(), d6.into());
            prop_assert!(p.verify_checksum_v6(s6.into(), d6.into()));
            p.fill_checksum_v4(s.into(), d.into());
            prop_assert!(p.verify_checksum_v4(s.into(), d.into()));
            let p = TcpPacket::new_checked(&b[..]).unwrap();
            prop_assert_eq!(TcpRepr::parse(&p), Ok(r));
        }
    }
}
