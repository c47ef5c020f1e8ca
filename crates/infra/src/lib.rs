//! Sluice infrastructure (VPP's vppinfra): the calibrated TSC [`clock`], the hierarchical
//! [`timer`] wheel, index [`pool`]s with free lists, fixed-size [`bitmap`]s and
//! [`epoch`]-based deferred reclamation for tables read without locks, listening
//! [`unix_socket`]s, [`seqpacket`] control channels, a fast keyed [`hash`]er for integer keys, [`shm`] regions and eventfds, and
//! control-plane [`files`] opened safely. Depends on nothing of ours.

#![warn(missing_docs)]

pub mod bihash;
pub mod bitmap;
pub mod clock;
pub mod epoch;
pub mod files;
pub mod hash;
pub mod pool;
pub mod seqpacket;
pub mod shm;
pub mod testing;
pub mod timer;
pub mod unix_socket;
