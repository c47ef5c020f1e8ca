//! The Sluice FIB: tables read lock-free by every worker and written only by the main thread
//! (atomic stores, seqlocks, deferred reclamation).
//!
//! - [`ip4`]: IPv4 longest-prefix match (DIR-24-8).
//! - [`ip6`]: IPv6 longest-prefix match (24-bit first level, 8-bit strides).
//! - [`adj`]: adjacencies (rewrite, local, glean, incomplete, drop).
//! - [`lb`]: load-balance objects for ECMP routes (flow-hash buckets, weighted).

pub mod adj;
mod groups;
pub mod ip4;
pub mod ip6;
pub mod lb;
