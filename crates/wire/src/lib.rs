//! Sluice wire formats: zero-copy header views (`new_checked` never panics), `Repr` structs to
//! build packets, checksums and packet decodes for traces. No buffers, no unsafe: fuzzable
//! alone.

#![forbid(unsafe_code)]

pub mod arp;
pub mod checksum;
mod error;
pub mod ethernet;
pub mod format;
pub mod icmp;
pub mod ipv4;

pub use error::WireError;
pub use ethernet::Mac;
