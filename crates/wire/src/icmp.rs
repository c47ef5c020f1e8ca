//! ICMPv4 (RFC 792): echo and the error messages a router sends.

use crate::checksum;
use crate::error::WireError;

/// ICMP types.
pub mod kind {
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 0;
    /// Destination unreachable.
    pub const DEST_UNREACH: u8 = 3;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 8;
    /// Time exceeded.
    pub const TIME_EXCEEDED: u8 = 11;
    /// Parameter problem.
    pub const PARAM_PROBLEM: u8 = 12;
}

/// Destination unreachable codes (RFC 792, RFC 1812 §5.2.7.1).
pub mod unreach {
    /// Port unreachable.
    pub const PORT: u8 = 3;
    /// Fragmentation needed and DF set (the next hop's MTU in bytes 6..8, RFC 1191).
    pub const FRAG_NEEDED: u8 = 4;
}

/// A view of an ICMPv4 message (at least the 8-byte header).
pub struct IcmpPacket<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> IcmpPacket<T> {
    /// Checks the header fits. Never panics.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        if buf.as_ref().len() < 8 {
            return Err(WireError::Truncated);
        }
        Ok(IcmpPacket { buf })
    }
    /// Type.
    pub fn kind(&self) -> u8 {
        self.buf.as_ref()[0]
    }
    /// Code.
    pub fn code(&self) -> u8 {
        self.buf.as_ref()[1]
    }
    /// Whether the checksum over the whole message is correct.
    pub fn verify_checksum(&self) -> bool {
        checksum::sum(self.buf.as_ref()) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IcmpPacket<T> {
    /// Sets type and code.
    pub fn set_kind_code(&mut self, kind: u8, code: u8) {
        let b = self.buf.as_mut();
        b[0] = kind;
        b[1] = code;
    }
    /// Recomputes the checksum over the whole buffer.
    pub fn fill_checksum(&mut self) {
        let b = self.buf.as_mut();
        b[2] = 0;
        b[3] = 0;
        let c = checksum::internet_checksum(b);
        b[2..4].copy_from_slice(&c.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_to_reply_checksum() {
        let mut m = vec![8u8, 0, 0, 0, 0x12, 0x34, 0, 1, b'h', b'i'];
        let mut p = IcmpPacket::new_checked(&mut m[..]).unwrap();
        p.fill_checksum();
        assert!(p.verify_checksum());
        p.set_kind_code(kind::ECHO_REPLY, 0);
        assert!(!p.verify_checksum());
        p.fill_checksum();
        assert!(p.verify_checksum());
        assert!(IcmpPacket::new_checked(&m[..7]).is_err());
    }
}
