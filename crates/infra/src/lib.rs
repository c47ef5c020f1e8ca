//! Sluice infrastructure (VPP's vppinfra): the calibrated TSC [`clock`], the [`timer`] wheel
//! and [`epoch`]-based deferred reclamation for tables read without locks. Depends on nothing
//! of ours.

pub mod clock;
pub mod epoch;
pub mod timer;
