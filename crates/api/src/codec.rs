//! The wire encoding of message bodies: fields in schema order, little-endian fixed-size
//! scalars, `bool` as one byte (0 or 1), strings and arrays as a u32 count followed by the
//! bytes / elements, `address` as a family byte (0 IPv4, 1 IPv6) and 16 bytes, `prefix` as an
//! address and a length byte, `mac_address` as 6 bytes. No tags, no padding: the schema (and
//! its CRC, checked at connect) says what each byte is.
//!
//! Decoding never panics and never trusts a count: every read is bounds-checked and an array
//! count larger than the bytes left is refused before anything is allocated.

use crate::types::{MacAddress, Prefix};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why a message body did not decode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeErrorKind {
    /// The body ends inside a field.
    Truncated {
        /// Bytes the field needed.
        need: usize,
        /// Bytes left.
        have: usize,
    },
    /// A `bool` byte other than 0 or 1.
    BadBool(u8),
    /// A value that is not a member of the enum.
    BadEnum {
        /// The enum.
        ty: &'static str,
        /// The value.
        value: u64,
    },
    /// A string that is not UTF-8.
    BadUtf8,
    /// A string longer than the schema allows.
    StringTooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: u32,
    },
    /// An address family byte other than 0 (IPv4) or 1 (IPv6).
    BadFamily(u8),
    /// A prefix length longer than the address.
    BadPrefixLen(u8),
    /// Bytes left over after the last field.
    Trailing(usize),
}

/// A decoding error with the field it happened in (`paths.weight`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError {
    /// Field names, innermost first.
    path: Vec<&'static str>,
    /// What was wrong.
    pub kind: DecodeErrorKind,
}

impl DecodeError {
    fn new(kind: DecodeErrorKind) -> Self {
        DecodeError {
            path: Vec::new(),
            kind,
        }
    }

    /// A value outside an enum.
    pub fn bad_enum(ty: &'static str, value: u64) -> Self {
        DecodeError::new(DecodeErrorKind::BadEnum { ty, value })
    }

    /// The error as seen from the enclosing field `name` (generated decoders call this).
    #[cold]
    pub fn in_field(mut self, name: &'static str) -> Self {
        self.path.push(name);
        self
    }

    /// The field path, outermost first (`paths.weight`); empty for the body itself.
    pub fn field(&self) -> String {
        let v: Vec<&str> = self.path.iter().rev().copied().collect();
        v.join(".")
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.path.is_empty() {
            write!(f, "field `{}': ", self.field())?;
        }
        match &self.kind {
            DecodeErrorKind::Truncated { need, have } => {
                write!(f, "truncated (needs {need} bytes, {have} left)")
            }
            DecodeErrorKind::BadBool(v) => write!(f, "bool must be 0 or 1, got {v}"),
            DecodeErrorKind::BadEnum { ty, value } => {
                write!(f, "{value} is not a value of enum {ty}")
            }
            DecodeErrorKind::BadUtf8 => write!(f, "string is not UTF-8"),
            DecodeErrorKind::StringTooLong { len, max } => {
                write!(f, "string of {len} bytes exceeds its limit of {max}")
            }
            DecodeErrorKind::BadFamily(v) => {
                write!(f, "address family must be 0 (ip4) or 1 (ip6), got {v}")
            }
            DecodeErrorKind::BadPrefixLen(l) => write!(f, "prefix length {l} too long"),
            DecodeErrorKind::Trailing(n) => write!(f, "{n} bytes after the last field"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// A bounds-checked cursor over a message body.
pub struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader over `b`.
    pub fn new(b: &'a [u8]) -> Self {
        Reader { b, pos: 0 }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.b.len() - self.pos
    }

    /// The next `n` bytes.
    #[inline]
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let have = self.remaining();
        if n > have {
            return Err(DecodeError::new(DecodeErrorKind::Truncated {
                need: n,
                have,
            }));
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    #[inline]
    fn arr<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    /// A string of at most `max` bytes (`None`: any length the message holds).
    pub fn string(&mut self, max: Option<u32>) -> Result<String, DecodeError> {
        let n = u32::decode(self)? as usize;
        if let Some(m) = max.filter(|&m| n > m as usize) {
            return Err(DecodeError::new(DecodeErrorKind::StringTooLong {
                len: n,
                max: m,
            }));
        }
        let s = self.take(n)?;
        std::str::from_utf8(s)
            .map(str::to_string)
            .map_err(|_| DecodeError::new(DecodeErrorKind::BadUtf8))
    }

    /// A u32 count, then that many elements decoded by `f`. A count that cannot fit in the
    /// bytes left (every element takes at least one) is refused before allocating.
    pub fn array<T>(
        &mut self,
        mut f: impl FnMut(&mut Reader<'a>) -> Result<T, DecodeError>,
    ) -> Result<Vec<T>, DecodeError> {
        let n = u32::decode(self)? as usize;
        if n > self.remaining() {
            return Err(DecodeError::new(DecodeErrorKind::Truncated {
                need: n,
                have: self.remaining(),
            }));
        }
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(f(self)?);
        }
        Ok(v)
    }

    /// Checks that the whole body was read.
    pub fn finish(&self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(DecodeError::new(DecodeErrorKind::Trailing(n))),
        }
    }
}

/// An output buffer.
#[derive(Default, Debug)]
pub struct Writer {
    /// The bytes written.
    pub buf: Vec<u8>,
}

impl Writer {
    /// An empty writer.
    pub fn new() -> Self {
        Writer::default()
    }

    /// Appends raw bytes.
    #[inline]
    pub fn bytes(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }

    /// A string, cut (at a character boundary) to `max` bytes when it is longer.
    pub fn string(&mut self, s: &str, max: Option<u32>) {
        let mut end = s.len();
        if let Some(m) = max {
            end = end.min(m as usize);
            while !s.is_char_boundary(end) {
                end -= 1;
            }
        }
        (end as u32).encode(self);
        self.bytes(&s.as_bytes()[..end]);
    }

    /// A u32 count, then every element written by `f`.
    pub fn array<T>(&mut self, v: &[T], mut f: impl FnMut(&mut Writer, &T)) {
        (v.len() as u32).encode(self);
        for x in v {
            f(self, x);
        }
    }
}

/// A value that can be written.
pub trait Encode {
    /// Appends the encoding of `self`.
    fn encode(&self, w: &mut Writer);
}

/// A value that can be read.
pub trait Decode: Sized {
    /// Reads one value.
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError>;
}

macro_rules! scalar {
    ($($t:ty),*) => {$(
        impl Encode for $t {
            #[inline]
            fn encode(&self, w: &mut Writer) {
                w.bytes(&self.to_le_bytes());
            }
        }
        impl Decode for $t {
            #[inline]
            fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
                Ok(<$t>::from_le_bytes(r.arr()?))
            }
        }
    )*};
}
scalar!(u8, u16, u32, u64, i8, i16, i32, i64, f64);

impl Encode for bool {
    #[inline]
    fn encode(&self, w: &mut Writer) {
        w.buf.push(*self as u8);
    }
}

impl Decode for bool {
    #[inline]
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        match u8::decode(r)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(DecodeError::new(DecodeErrorKind::BadBool(v))),
        }
    }
}

impl Encode for IpAddr {
    fn encode(&self, w: &mut Writer) {
        let mut b = [0u8; 17];
        match self {
            IpAddr::V4(a) => b[1..5].copy_from_slice(&a.octets()),
            IpAddr::V6(a) => {
                b[0] = 1;
                b[1..].copy_from_slice(&a.octets());
            }
        }
        w.bytes(&b);
    }
}

impl Decode for IpAddr {
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let b: [u8; 17] = r.arr()?;
        match b[0] {
            0 => Ok(IpAddr::V4(Ipv4Addr::new(b[1], b[2], b[3], b[4]))),
            1 => {
                let mut a = [0u8; 16];
                a.copy_from_slice(&b[1..]);
                Ok(IpAddr::V6(Ipv6Addr::from(a)))
            }
            f => Err(DecodeError::new(DecodeErrorKind::BadFamily(f))),
        }
    }
}

impl Encode for Prefix {
    fn encode(&self, w: &mut Writer) {
        self.addr.encode(w);
        w.buf.push(self.len);
    }
}

impl Decode for Prefix {
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let addr = IpAddr::decode(r)?;
        let len = u8::decode(r)?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if len > max {
            return Err(DecodeError::new(DecodeErrorKind::BadPrefixLen(len)));
        }
        Ok(Prefix { addr, len })
    }
}

impl Encode for MacAddress {
    fn encode(&self, w: &mut Writer) {
        w.bytes(&self.0);
    }
}

impl Decode for MacAddress {
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(MacAddress(r.arr()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_and_builtins_round_trip_little_endian() {
        let mut w = Writer::new();
        0x1234_5678u32.encode(&mut w);
        true.encode(&mut w);
        IpAddr::from([10, 0, 0, 1]).encode(&mut w);
        Prefix {
            addr: "2001:db8::".parse().unwrap(),
            len: 32,
        }
        .encode(&mut w);
        MacAddress([1, 2, 3, 4, 5, 6]).encode(&mut w);
        w.string("héllo", Some(64));
        assert_eq!(&w.buf[..5], &[0x78, 0x56, 0x34, 0x12, 1]);
        assert_eq!(&w.buf[5..10], &[0, 10, 0, 0, 1]);
        let mut r = Reader::new(&w.buf);
        assert_eq!(u32::decode(&mut r).unwrap(), 0x1234_5678);
        assert!(bool::decode(&mut r).unwrap());
        assert_eq!(IpAddr::decode(&mut r).unwrap(), IpAddr::from([10, 0, 0, 1]));
        assert_eq!(Prefix::decode(&mut r).unwrap().len, 32);
        assert_eq!(MacAddress::decode(&mut r).unwrap().0, [1, 2, 3, 4, 5, 6]);
        assert_eq!(r.string(Some(64)).unwrap(), "héllo");
        r.finish().unwrap();
    }

    #[test]
    fn bad_bodies_are_errors_naming_the_problem() {
        let e = u32::decode(&mut Reader::new(&[1, 2])).unwrap_err();
        assert_eq!(e.to_string(), "truncated (needs 4 bytes, 2 left)");
        let e = bool::decode(&mut Reader::new(&[2])).unwrap_err();
        assert_eq!(
            e.in_field("is_add").to_string(),
            "field `is_add': bool must be 0 or 1, got 2"
        );
        let mut b = vec![7u8];
        b.extend([0; 16]);
        assert!(matches!(
            IpAddr::decode(&mut Reader::new(&b)).unwrap_err().kind,
            DecodeErrorKind::BadFamily(7)
        ));
        b[0] = 0;
        b.push(33);
        assert!(matches!(
            Prefix::decode(&mut Reader::new(&b)).unwrap_err().kind,
            DecodeErrorKind::BadPrefixLen(33)
        ));
        // A string over its limit, or not UTF-8.
        let mut w = Writer::new();
        w.string("abcdef", None);
        let e = Reader::new(&w.buf).string(Some(4)).unwrap_err();
        assert_eq!(e.kind, DecodeErrorKind::StringTooLong { len: 6, max: 4 });
        let e = Reader::new(&[2, 0, 0, 0, 0xff, 0xfe])
            .string(None)
            .unwrap_err();
        assert_eq!(e.kind, DecodeErrorKind::BadUtf8);
        // A huge array count is refused before allocating.
        let e = Reader::new(&[0xff, 0xff, 0xff, 0xff, 1])
            .array(u8::decode)
            .unwrap_err();
        assert!(matches!(e.kind, DecodeErrorKind::Truncated { .. }));
        // Trailing bytes.
        let mut r = Reader::new(&[1, 0]);
        u8::decode(&mut r).unwrap();
        assert_eq!(r.finish().unwrap_err().kind, DecodeErrorKind::Trailing(1));
    }

    #[test]
    fn strings_over_their_limit_are_cut_at_a_character_boundary() {
        let mut w = Writer::new();
        w.string("aé", Some(2));
        assert_eq!(w.buf, vec![1, 0, 0, 0, b'a']);
    }
}
