//! The memif control channel: `sluice_infra::seqpacket` (Unix `SOCK_SEQPACKET`, 128-byte
//! messages, fds passed with `SCM_RIGHTS`).

pub use sluice_infra::seqpacket::*;
