//! The Sluice FIB: tables read lock-free by every worker and written only by the main thread
//! (atomic stores, seqlocks, deferred reclamation).
//!
//! - [`ip4`]: IPv4 longest-prefix match (DIR-24-8).
//! - [`adj`]: adjacencies (rewrite, local, glean, incomplete, drop).
//! - [`lb`]: load-balance objects for ECMP routes (flow-hash buckets, weighted).

pub mod adj;
pub mod ip4;
pub mod lb;
