//! Control messages between an application and Sluice's session layer, over a Unix
//! `SOCK_SEQPACKET` socket (`sluice_infra::seqpacket`): every message is 128 bytes, a
//! little-endian `u16` type at offset 0; file descriptors travel with `SCM_RIGHTS`.
//! Control messages are rare (attach, bind, connect, close); data never uses the socket.
//!
//! | type | direction | fields |
//! |---|---|---|
//! | 1 `Attach` | app → Sluice | name (32 bytes at 8) |
//! | 2 `AttachReply` | Sluice → app | retval i32 at 4, segment size u64 at 8; fd: the segment memfd |
//! | 3 `EventFd` | Sluice → app | which u8 at 4 (0: Sluice wakes the app, 1 + t: the app wakes Sluice's thread t, one per event-queue pair); fd |
//! | 4 `Bind` | app → Sluice | request u32 at 4, local endpoint at 8 |
//! | 5 `Connect` | app → Sluice | request at 4, remote endpoint at 8, local port u16 at 28 (0: ephemeral) |
//! | 6 `SessionReply` | Sluice → app | request at 4, retval i32 at 8, slot u32 at 12, local endpoint at 16 |
//! | 7 `Close` | app → Sluice | request at 4, slot u32 at 8 |
//! | 8 `CloseReply` | Sluice → app | request at 4, retval i32 at 8 |
//! | 9 `Listen` | app → Sluice | request at 4, local endpoint at 8, backlog u32 at 28 |
//! | 10 `TcpConnect` | app → Sluice | request at 4, remote endpoint at 8 |
//! | 11 `Shutdown` | app → Sluice | request at 4, slot u32 at 8 (reply: `CloseReply`) |
//!
//! An endpoint is 20 bytes: family u8 (4 or 6), pad, port u16, address (16 bytes; IPv4 in
//! the first 4). A retval is 0 or a negative errno (`EADDRINUSE`, `EADDRNOTAVAIL`, ...).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

pub use sluice_infra::seqpacket::MSG_SIZE;

/// The request id of a request whose reply the application does not wait for (a close):
/// Sluice sends none, so replies nobody reads cannot fill the application's socket.
pub const NO_REPLY: u32 = u32::MAX;

/// A decoded message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// Attach with a name.
    Attach {
        /// Application name (at most 32 bytes).
        name: String,
    },
    /// Attach result (the memfd comes with it on success).
    AttachReply {
        /// 0 or a negative errno.
        retval: i32,
        /// Bytes to map.
        seg_size: u64,
    },
    /// An eventfd follows.
    EventFd {
        /// 0: Sluice signals the app; 1 + t: the app signals Sluice's thread `t`.
        which: u8,
    },
    /// Bind a UDP endpoint (a listener: datagrams from any peer).
    Bind {
        /// Request id echoed in the reply.
        req: u32,
        /// Local address (unspecified: any of Sluice's) and port.
        local: SocketAddr,
    },
    /// Connect a UDP session to one peer.
    Connect {
        /// Request id.
        req: u32,
        /// The peer.
        remote: SocketAddr,
        /// Local port, 0 for an ephemeral one.
        lport: u16,
    },
    /// Bind/connect result.
    SessionReply {
        /// Request id.
        req: u32,
        /// 0 or a negative errno.
        retval: i32,
        /// Slot of the session's FIFOs in the segment.
        slot: u32,
        /// The local endpoint chosen.
        local: SocketAddr,
    },
    /// Close a session.
    Close {
        /// Request id ([`NO_REPLY`]: the application does not wait for the reply).
        req: u32,
        /// Its slot.
        slot: u32,
    },
    /// Listen for TCP connections on `local` (address unspecified: any of Sluice's).
    Listen {
        /// Request id.
        req: u32,
        /// Local address and port.
        local: SocketAddr,
        /// Most connections in the handshake at once (0: the configured default).
        backlog: u32,
    },
    /// Open a TCP connection to `remote` from an ephemeral port (the reply comes at once
    /// with the slot; the slot's state word says when it is established or refused).
    TcpConnect {
        /// Request id.
        req: u32,
        /// The peer.
        remote: SocketAddr,
    },
    /// Half-close a TCP connection: FIN after the queued data, receiving goes on (UDP: no
    /// effect). Answered with `CloseReply`.
    Shutdown {
        /// Request id.
        req: u32,
        /// Its slot.
        slot: u32,
    },
    /// Close (or shutdown) result.
    CloseReply {
        /// Request id.
        req: u32,
        /// 0 or a negative errno.
        retval: i32,
    },
}

fn put_ep(b: &mut [u8; MSG_SIZE], o: usize, a: SocketAddr) {
    b[o + 2..o + 4].copy_from_slice(&a.port().to_le_bytes());
    match a.ip() {
        IpAddr::V4(v) => {
            b[o] = 4;
            b[o + 4..o + 8].copy_from_slice(&v.octets());
        }
        IpAddr::V6(v) => {
            b[o] = 6;
            b[o + 4..o + 20].copy_from_slice(&v.octets());
        }
    }
}

fn get_ep(b: &[u8; MSG_SIZE], o: usize) -> Option<SocketAddr> {
    let port = u16::from_le_bytes([b[o + 2], b[o + 3]]);
    let ip = match b[o] {
        4 => IpAddr::V4(Ipv4Addr::new(b[o + 4], b[o + 5], b[o + 6], b[o + 7])),
        6 => IpAddr::V6(Ipv6Addr::from(
            <[u8; 16]>::try_from(&b[o + 4..o + 20]).ok()?,
        )),
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

fn u32_at(b: &[u8; MSG_SIZE], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

/// Encodes a message.
pub fn encode(m: &Msg) -> [u8; MSG_SIZE] {
    let mut b = [0u8; MSG_SIZE];
    let t: u16 = match m {
        Msg::Attach { name } => {
            let n = name.as_bytes();
            let k = n.len().min(32);
            b[8..8 + k].copy_from_slice(&n[..k]);
            1
        }
        Msg::AttachReply { retval, seg_size } => {
            b[4..8].copy_from_slice(&retval.to_le_bytes());
            b[8..16].copy_from_slice(&seg_size.to_le_bytes());
            2
        }
        Msg::EventFd { which } => {
            b[4] = *which;
            3
        }
        Msg::Bind { req, local } => {
            b[4..8].copy_from_slice(&req.to_le_bytes());
            put_ep(&mut b, 8, *local);
            4
        }
        Msg::Connect { req, remote, lport } => {
            b[4..8].copy_from_slice(&req.to_le_bytes());
            put_ep(&mut b, 8, *remote);
            b[28..30].copy_from_slice(&lport.to_le_bytes());
            5
        }
        Msg::SessionReply {
            req,
            retval,
            slot,
            local,
        } => {
            b[4..8].copy_from_slice(&req.to_le_bytes());
            b[8..12].copy_from_slice(&retval.to_le_bytes());
            b[12..16].copy_from_slice(&slot.to_le_bytes());
            put_ep(&mut b, 16, *local);
            6
        }
        Msg::Close { req, slot } => {
            b[4..8].copy_from_slice(&req.to_le_bytes());
            b[8..12].copy_from_slice(&slot.to_le_bytes());
            7
        }
        Msg::CloseReply { req, retval } => {
            b[4..8].copy_from_slice(&req.to_le_bytes());
            b[8..12].copy_from_slice(&retval.to_le_bytes());
            8
        }
        Msg::Listen {
            req,
            local,
            backlog,
        } => {
            b[4..8].copy_from_slice(&req.to_le_bytes());
            put_ep(&mut b, 8, *local);
            b[28..32].copy_from_slice(&backlog.to_le_bytes());
            9
        }
        Msg::TcpConnect { req, remote } => {
            b[4..8].copy_from_slice(&req.to_le_bytes());
            put_ep(&mut b, 8, *remote);
            10
        }
        Msg::Shutdown { req, slot } => {
            b[4..8].copy_from_slice(&req.to_le_bytes());
            b[8..12].copy_from_slice(&slot.to_le_bytes());
            11
        }
    };
    b[0..2].copy_from_slice(&t.to_le_bytes());
    b
}

/// Decodes a message (`None`: unknown type or malformed field).
pub fn decode(b: &[u8; MSG_SIZE]) -> Option<Msg> {
    Some(match u16::from_le_bytes([b[0], b[1]]) {
        1 => {
            let n = &b[8..40];
            let end = n.iter().position(|&c| c == 0).unwrap_or(32);
            Msg::Attach {
                name: String::from_utf8_lossy(&n[..end]).into_owned(),
            }
        }
        2 => Msg::AttachReply {
            retval: u32_at(b, 4) as i32,
            seg_size: u64::from_le_bytes(b[8..16].try_into().ok()?),
        },
        3 => Msg::EventFd { which: b[4] },
        4 => Msg::Bind {
            req: u32_at(b, 4),
            local: get_ep(b, 8)?,
        },
        5 => Msg::Connect {
            req: u32_at(b, 4),
            remote: get_ep(b, 8)?,
            lport: u16::from_le_bytes([b[28], b[29]]),
        },
        6 => Msg::SessionReply {
            req: u32_at(b, 4),
            retval: u32_at(b, 8) as i32,
            slot: u32_at(b, 12),
            local: get_ep(b, 16)?,
        },
        7 => Msg::Close {
            req: u32_at(b, 4),
            slot: u32_at(b, 8),
        },
        8 => Msg::CloseReply {
            req: u32_at(b, 4),
            retval: u32_at(b, 8) as i32,
        },
        9 => Msg::Listen {
            req: u32_at(b, 4),
            local: get_ep(b, 8)?,
            backlog: u32_at(b, 28),
        },
        10 => Msg::TcpConnect {
            req: u32_at(b, 4),
            remote: get_ep(b, 8)?,
        },
        11 => Msg::Shutdown {
            req: u32_at(b, 4),
            slot: u32_at(b, 8),
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_roundtrips() {
        let v4: SocketAddr = "192.0.2.1:53".parse().unwrap();
        let v6: SocketAddr = "[2001:db8::7]:9".parse().unwrap();
        for m in [
            Msg::Attach {
                name: "echo".into(),
            },
            Msg::AttachReply {
                retval: -12,
                seg_size: 1 << 20,
            },
            Msg::EventFd { which: 1 },
            Msg::Bind { req: 3, local: v4 },
            Msg::Connect {
                req: 4,
                remote: v6,
                lport: 7,
            },
            Msg::SessionReply {
                req: 5,
                retval: 0,
                slot: 2,
                local: v6,
            },
            Msg::Close { req: 6, slot: 1 },
            Msg::CloseReply {
                req: 6,
                retval: -22,
            },
            Msg::Listen {
                req: 7,
                local: v4,
                backlog: 16,
            },
            Msg::TcpConnect { req: 8, remote: v6 },
            Msg::Shutdown { req: 9, slot: 3 },
        ] {
            assert_eq!(decode(&encode(&m)), Some(m));
        }
        let mut b = [0u8; MSG_SIZE];
        b[0] = 99;
        assert_eq!(decode(&b), None);
        b[0] = 4;
        b[8] = 5; // bad family
        assert_eq!(decode(&b), None);
    }
}
