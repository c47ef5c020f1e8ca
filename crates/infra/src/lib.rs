//! Sluice infrastructure (VPP's vppinfra): the calibrated TSC [`clock`] and the
//! [`timer`] wheel. Depends on nothing of ours.

pub mod clock;
pub mod timer;
