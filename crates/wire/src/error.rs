//! Parse errors and the big-endian field readers shared by the views.

/// Why a header view could not be built or a header could not be parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The buffer is shorter than the header, or than a length field says.
    #[error("truncated")]
    Truncated,
    /// The version field is not the one the view parses (e.g. not 4 in an IPv4 header).
    #[error("bad version")]
    BadVersion,
    /// A field has an impossible value (the text names the field).
    #[error("malformed {0}")]
    Malformed(&'static str),
}

/// Big-endian u16 at `at`. Callers have checked the bounds (views check in `new_checked`).
#[inline(always)]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Big-endian u32 at `at`. Callers have checked the bounds.
#[inline(always)]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
