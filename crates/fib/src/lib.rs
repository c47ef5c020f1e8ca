//! The Sluice FIB: longest-prefix-match tables read lock-free by workers and written by the
//! main thread with deferred reclamation. IPv4 DIR-24-8 now ([`ip4`]); IPv6, adjacencies and
//! load-balance objects follow.

pub mod ip4;
