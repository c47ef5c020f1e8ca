//! rtnetlink, spoken over a raw `NETLINK_ROUTE` socket: the messages linux-cp needs (links,
//! addresses, routes with multipath, neighbours) parsed into [`Msg`], dump requests, and the
//! one request it sends (a link's admin state). Parsing never panics on kernel bytes: a
//! truncated or unknown message is skipped (and counted by the caller as `ignored`).
//!
//! Layouts: `linux/netlink.h`, `linux/rtnetlink.h`, `linux/if_link.h`, `linux/if_addr.h`,
//! `linux/neighbour.h` (RFC 3549 describes the protocol).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

// Message types.
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLMSG_OVERRUN: u16 = 4;
const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const RTM_GETLINK: u16 = 18;
const RTM_NEWADDR: u16 = 20;
const RTM_DELADDR: u16 = 21;
const RTM_GETADDR: u16 = 22;
const RTM_NEWROUTE: u16 = 24;
const RTM_DELROUTE: u16 = 25;
const RTM_GETROUTE: u16 = 26;
const RTM_NEWNEIGH: u16 = 28;
const RTM_DELNEIGH: u16 = 29;
const RTM_GETNEIGH: u16 = 30;

// Flags.
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLM_F_DUMP: u16 = 0x300;
/// `NLM_F_APPEND` on a new route: a next hop added to an existing (IPv6) route.
pub const NLM_F_APPEND: u16 = 0x800;

/// Multicast groups: links, neighbours, IPv4/IPv6 addresses and routes.
pub const GROUPS: u32 = 0x1 | 0x4 | 0x10 | 0x40 | 0x100 | 0x400;

// Attributes.
const IFLA_ADDRESS: u16 = 1;
const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_MULTIPATH: u16 = 9;
const RTA_TABLE: u16 = 15;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;

/// Route types (`rtm_type`).
pub mod rtn {
    /// A gateway or direct route.
    pub const UNICAST: u8 = 1;
    /// Silently discard.
    pub const BLACKHOLE: u8 = 6;
    /// Unreachable.
    pub const UNREACHABLE: u8 = 7;
    /// Administratively prohibited.
    pub const PROHIBIT: u8 = 8;
}

/// `RTPROT_KERNEL`: routes the kernel makes for interface addresses.
pub const RTPROT_KERNEL: u8 = 2;
/// `RT_TABLE_MAIN`.
pub const RT_TABLE_MAIN: u32 = 254;
/// `RT_TABLE_LOCAL`.
pub const RT_TABLE_LOCAL: u32 = 255;

/// Neighbour states (`ndm_state`).
pub mod nud {
    /// Resolution in progress.
    pub const INCOMPLETE: u16 = 0x01;
    /// Resolution failed.
    pub const FAILED: u16 = 0x20;
    /// No ARP on this device.
    pub const NOARP: u16 = 0x40;
    /// Static entry.
    pub const PERMANENT: u16 = 0x80;
}

/// One next hop of a route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hop {
    /// Gateway (none: attached through `oif`).
    pub gw: Option<IpAddr>,
    /// Output interface (Linux ifindex).
    pub oif: Option<u32>,
    /// Weight (`rtnh_hops + 1`).
    pub weight: u32,
}

/// What linux-cp uses of one rtnetlink message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// RTM_NEWLINK / RTM_DELLINK.
    Link {
        /// Deleted.
        del: bool,
        /// ifindex.
        index: u32,
        /// Name.
        name: String,
        /// IFF_UP.
        up: bool,
        /// MTU.
        mtu: Option<u32>,
        /// MAC.
        mac: Option<[u8; 6]>,
    },
    /// RTM_NEWADDR / RTM_DELADDR.
    Addr {
        /// Deleted.
        del: bool,
        /// ifindex.
        index: u32,
        /// The address.
        addr: IpAddr,
        /// Prefix length.
        len: u8,
    },
    /// RTM_NEWROUTE / RTM_DELROUTE.
    Route {
        /// Deleted.
        del: bool,
        /// `NLM_F_APPEND`: next hops added to the route.
        append: bool,
        /// Table id.
        table: u32,
        /// Destination.
        dst: IpAddr,
        /// Prefix length.
        len: u8,
        /// `rtm_type` ([`rtn`]).
        kind: u8,
        /// `rtm_protocol`.
        proto: u8,
        /// Next hops (several: ECMP).
        hops: Vec<Hop>,
    },
    /// RTM_NEWNEIGH / RTM_DELNEIGH.
    Neigh {
        /// Deleted.
        del: bool,
        /// ifindex.
        index: u32,
        /// The neighbour's address.
        ip: IpAddr,
        /// Its MAC, if known.
        mac: Option<[u8; 6]>,
        /// `ndm_state` ([`nud`]).
        state: u16,
    },
    /// The end of a dump.
    Done,
    /// An error reply (errno, positive; 0 is an ACK).
    Error(i32),
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// The attributes in `b`: (type without the nested/byte-order flags, payload).
fn attrs(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        let len = u16_at(b, 0)? as usize;
        let ty = u16_at(b, 2)? & 0x3fff;
        if len < 4 || len > b.len() {
            return None;
        }
        let payload = &b[4..len];
        b = b.get(align4(len)..).unwrap_or(&[]);
        Some((ty, payload))
    })
}

fn ip_of(family: u8, p: &[u8]) -> Option<IpAddr> {
    match (family as i32, p.len()) {
        (libc::AF_INET, 4) => Some(IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(p).ok()?))),
        (libc::AF_INET6, 16) => Some(IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(p).ok()?))),
        _ => None,
    }
}

fn mac_of(p: &[u8]) -> Option<[u8; 6]> {
    p.try_into().ok()
}

fn unspecified(family: u8) -> Option<IpAddr> {
    match family as i32 {
        libc::AF_INET => Some(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
        libc::AF_INET6 => Some(IpAddr::V6(Ipv6Addr::UNSPECIFIED)),
        _ => None,
    }
}

/// Parses one message (`ty`, `flags`, payload after the 16-byte header); `None` for a
/// message linux-cp does not use or cannot parse.
pub fn parse_one(ty: u16, flags: u16, p: &[u8]) -> Option<Msg> {
    match ty {
        NLMSG_DONE => Some(Msg::Done),
        NLMSG_ERROR => Some(Msg::Error(-(u32_at(p, 0)? as i32))),
        NLMSG_OVERRUN => Some(Msg::Error(libc::ENOBUFS)),
        RTM_NEWLINK | RTM_DELLINK => {
            let index = u32_at(p, 4)?;
            let iff = u32_at(p, 8)?;
            let (mut name, mut mtu, mut mac) = (String::new(), None, None);
            for (t, v) in attrs(p.get(16..)?) {
                match t {
                    IFLA_IFNAME => {
                        name = String::from_utf8_lossy(v.split(|&c| c == 0).next()?).into()
                    }
                    IFLA_MTU => mtu = u32_at(v, 0),
                    IFLA_ADDRESS => mac = mac_of(v),
                    _ => {}
                }
            }
            Some(Msg::Link {
                del: ty == RTM_DELLINK,
                index,
                name,
                up: iff & libc::IFF_UP as u32 != 0,
                mtu,
                mac,
            })
        }
        RTM_NEWADDR | RTM_DELADDR => {
            let (family, len) = (*p.first()?, *p.get(1)?);
            let index = u32_at(p, 4)?;
            let (mut local, mut address) = (None, None);
            for (t, v) in attrs(p.get(8..)?) {
                match t {
                    IFA_LOCAL => local = ip_of(family, v),
                    IFA_ADDRESS => address = ip_of(family, v),
                    _ => {}
                }
            }
            Some(Msg::Addr {
                del: ty == RTM_DELADDR,
                index,
                addr: local.or(address)?,
                len,
            })
        }
        RTM_NEWROUTE | RTM_DELROUTE => {
            let (family, len) = (*p.first()?, *p.get(1)?);
            let (mut table, proto, kind) = (*p.get(4)? as u32, *p.get(5)?, *p.get(7)?);
            let mut dst = unspecified(family)?;
            let (mut gw, mut oif, mut hops) = (None, None, Vec::new());
            for (t, v) in attrs(p.get(12..)?) {
                match t {
                    RTA_DST => dst = ip_of(family, v)?,
                    RTA_GATEWAY => gw = ip_of(family, v),
                    RTA_OIF => oif = u32_at(v, 0),
                    RTA_TABLE => table = u32_at(v, 0)?,
                    RTA_MULTIPATH => hops = multipath(family, v),
                    _ => {}
                }
            }
            if hops.is_empty() && (gw.is_some() || oif.is_some()) {
                hops.push(Hop { gw, oif, weight: 1 });
            }
            Some(Msg::Route {
                del: ty == RTM_DELROUTE,
                append: flags & NLM_F_APPEND != 0,
                table,
                dst,
                len,
                kind,
                proto,
                hops,
            })
        }
        RTM_NEWNEIGH | RTM_DELNEIGH => {
            let family = *p.first()?;
            let index = u32_at(p, 4)?;
            let state = u16_at(p, 8)?;
            let (mut ip, mut mac) = (None, None);
            for (t, v) in attrs(p.get(12..)?) {
                match t {
                    NDA_DST => ip = ip_of(family, v),
                    NDA_LLADDR => mac = mac_of(v),
                    _ => {}
                }
            }
            Some(Msg::Neigh {
                del: ty == RTM_DELNEIGH,
                index,
                ip: ip?,
                mac,
                state,
            })
        }
        _ => None,
    }
}

/// The `rtnexthop` list of `RTA_MULTIPATH`.
fn multipath(family: u8, mut b: &[u8]) -> Vec<Hop> {
    let mut out = Vec::new();
    while let (Some(len), Some(&hops), Some(index)) = (u16_at(b, 0), b.get(3), u32_at(b, 4)) {
        let len = len as usize;
        if len < 8 || len > b.len() {
            break;
        }
        let gw = attrs(&b[8..len])
            .find(|&(t, _)| t == RTA_GATEWAY)
            .and_then(|(_, v)| ip_of(family, v));
        out.push(Hop {
            gw,
            oif: (index != 0).then_some(index),
            weight: hops as u32 + 1,
        });
        b = b.get(align4(len)..).unwrap_or(&[]);
    }
    out
}

/// Parses a datagram of messages: (message, its `nlmsg_seq`) for each one used.
pub fn parse(b: &[u8], out: &mut Vec<(Msg, u32)>) -> usize {
    parse_flags(b, out).0
}

/// `NLM_F_DUMP_INTR`: the kernel's table changed while it dumped it (entries may be
/// missing or stale): the dump must be redone.
pub const NLM_F_DUMP_INTR: u16 = 0x10;

/// [`parse`], also saying whether any message carried [`NLM_F_DUMP_INTR`].
pub fn parse_flags(mut b: &[u8], out: &mut Vec<(Msg, u32)>) -> (usize, bool) {
    let mut intr = false;
    let mut n = 0;
    while let (Some(len), Some(ty), Some(flags), Some(seq)) =
        (u32_at(b, 0), u16_at(b, 4), u16_at(b, 6), u32_at(b, 8))
    {
        let len = len as usize;
        if len < 16 || len > b.len() {
            break;
        }
        n += 1;
        intr |= flags & NLM_F_DUMP_INTR != 0;
        if let Some(m) = parse_one(ty, flags, &b[16..len]) {
            out.push((m, seq));
        }
        b = b.get(align4(len)..).unwrap_or(&[]);
    }
    (n, intr)
}

/// A `NETLINK_ROUTE` socket.
pub struct Socket {
    fd: OwnedFd,
    seq: u32,
}

impl Socket {
    /// Opens a socket in the calling thread's namespace, subscribed to `groups`, with a
    /// receive buffer of `rcvbuf` bytes (forced past `rmem_max` when privileged).
    pub fn open(groups: u32, rcvbuf: usize) -> std::io::Result<Socket> {
        // SAFETY: plain socket(2); the result is checked and owned.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd was just opened and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let sz = rcvbuf as libc::c_int;
        // SAFETY: setsockopt reads an int of the given size; bind reads a sockaddr_nl.
        unsafe {
            let p = &sz as *const libc::c_int as *const libc::c_void;
            let l = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            if libc::setsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, p, l) != 0 {
                libc::setsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, p, l);
            }
            let mut sa: libc::sockaddr_nl = std::mem::zeroed();
            sa.nl_family = libc::AF_NETLINK as u16;
            sa.nl_groups = groups;
            if libc::bind(
                fd.as_raw_fd(),
                &sa as *const libc::sockaddr_nl as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(Socket { fd, seq: 1 })
    }

    /// The receive buffer the kernel granted (`SO_RCVBUF`).
    pub fn rcvbuf(&self) -> usize {
        let mut v: libc::c_int = 0;
        let mut l = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt writes an int of the given size.
        unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                &mut v as *mut libc::c_int as *mut libc::c_void,
                &mut l,
            );
        }
        v.max(0) as usize
    }

    /// The fd (for poll).
    pub fn raw(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    fn send(&mut self, ty: u16, flags: u16, body: &[u8]) -> std::io::Result<u32> {
        self.seq = self.seq.wrapping_add(1);
        let len = 16 + body.len();
        let mut m = Vec::with_capacity(len);
        m.extend_from_slice(&(len as u32).to_ne_bytes());
        m.extend_from_slice(&ty.to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&self.seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(body);
        // SAFETY: sends `m.len()` initialised bytes to the kernel (no address: pid 0).
        let r = unsafe { libc::send(self.fd.as_raw_fd(), m.as_ptr() as *const _, m.len(), 0) };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(self.seq)
    }

    /// Asks for a dump of links, addresses, routes or neighbours (`what`: `RTM_GET*`) of
    /// `family`.
    fn dump(&mut self, what: u16, family: u8) -> std::io::Result<u32> {
        // rtgenmsg-sized bodies are accepted; a full ifinfomsg/rtmsg works for every type.
        let mut body = [0u8; 16];
        body[0] = family;
        let n = match what {
            RTM_GETLINK => 16,
            RTM_GETADDR => 8,
            _ => 12,
        };
        self.send(what, NLM_F_REQUEST | NLM_F_DUMP, &body[..n])
    }

    /// Receives one datagram into `buf` (blocking unless `nonblock`); `Ok(0)`: nothing.
    pub fn recv(&self, buf: &mut [u8], nonblock: bool) -> std::io::Result<usize> {
        let flags = if nonblock { libc::MSG_DONTWAIT } else { 0 };
        // SAFETY: receives into a live, writable buffer of the given length.
        let r = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr() as *mut _,
                buf.len(),
                flags,
            )
        };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EAGAIN) {
                return Ok(0);
            }
            return Err(e);
        }
        Ok(r as usize)
    }

    /// Dumps links, addresses, routes and neighbours (both families), in that order, calling
    /// `f` with each message. `Ok(false)`: the kernel flagged the dump inconsistent
    /// ([`NLM_F_DUMP_INTR`]); redo it.
    pub fn dump_all(&mut self, mut f: impl FnMut(Msg)) -> std::io::Result<bool> {
        let mut buf = vec![0u8; 1 << 16];
        let mut msgs = Vec::new();
        let mut clean = true;
        for (what, fam) in [
            (RTM_GETLINK, libc::AF_UNSPEC as u8),
            (RTM_GETADDR, libc::AF_INET as u8),
            (RTM_GETADDR, libc::AF_INET6 as u8),
            (RTM_GETROUTE, libc::AF_INET as u8),
            (RTM_GETROUTE, libc::AF_INET6 as u8),
            (RTM_GETNEIGH, libc::AF_INET as u8),
            (RTM_GETNEIGH, libc::AF_INET6 as u8),
        ] {
            let seq = self.dump(what, fam)?;
            'recv: loop {
                let n = self.recv(&mut buf, false)?;
                msgs.clear();
                let (_, intr) = parse_flags(&buf[..n], &mut msgs);
                clean &= !intr;
                for (m, s) in msgs.drain(..) {
                    if s != seq {
                        continue;
                    }
                    match m {
                        Msg::Done => break 'recv,
                        Msg::Error(e) if e != 0 => {
                            return Err(std::io::Error::from_raw_os_error(e))
                        }
                        Msg::Error(_) => {}
                        m => f(m),
                    }
                }
                if n == 0 {
                    break;
                }
            }
        }
        Ok(clean)
    }

    /// Bounds blocking receives (dumps, ACKs) to `secs`: a lost reply is an error, not a
    /// hung listener.
    pub fn set_recv_timeout(&self, secs: u32) {
        let tv = libc::timeval {
            tv_sec: secs as libc::time_t,
            tv_usec: 0,
        };
        // SAFETY: setsockopt reads a timeval of the given size.
        unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &tv as *const libc::timeval as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            );
        }
    }

    /// Sets link `index` up or down (`IFF_UP`) and/or its MTU (`RTM_NEWLINK`) and waits for
    /// the ACK.
    pub fn set_link(&mut self, c: &crate::sync::LinkChange) -> std::io::Result<()> {
        let mut body = vec![0u8; 16];
        body[4..8].copy_from_slice(&c.index.to_ne_bytes());
        if let Some(up) = c.up {
            let flags = if up { libc::IFF_UP as u32 } else { 0 };
            body[8..12].copy_from_slice(&flags.to_ne_bytes());
            body[12..16].copy_from_slice(&(libc::IFF_UP as u32).to_ne_bytes());
        }
        if let Some(m) = c.mtu {
            body.extend_from_slice(&8u16.to_ne_bytes());
            body.extend_from_slice(&IFLA_MTU.to_ne_bytes());
            body.extend_from_slice(&m.to_ne_bytes());
        }
        if let Some(mac) = c.mac {
            // rtattr of 4 + 6 bytes, padded to 12.
            body.extend_from_slice(&10u16.to_ne_bytes());
            body.extend_from_slice(&IFLA_ADDRESS.to_ne_bytes());
            body.extend_from_slice(&mac);
            body.extend_from_slice(&[0, 0]);
        }
        let seq = self.send(RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, &body)?;
        let mut buf = vec![0u8; 8192];
        let mut msgs = Vec::new();
        loop {
            let n = self.recv(&mut buf, false)?;
            if n == 0 {
                return Ok(());
            }
            msgs.clear();
            parse(&buf[..n], &mut msgs);
            for (m, s) in msgs.drain(..) {
                if let (Msg::Error(e), true) = (m, s == seq) {
                    return match e {
                        0 => Ok(()),
                        e => Err(std::io::Error::from_raw_os_error(e)),
                    };
                }
            }
        }
    }
}

/// Moves the calling thread into network namespace `ns` (`/run/netns/<ns>`, as `ip netns`).
pub fn enter_netns(ns: &str) -> std::io::Result<()> {
    let f = std::fs::File::open(format!("/run/netns/{ns}"))?;
    // SAFETY: setns(2) on an open namespace fd; affects only the calling thread.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(ty: u16, v: &[u8]) -> Vec<u8> {
        let mut a = Vec::new();
        a.extend_from_slice(&((4 + v.len()) as u16).to_ne_bytes());
        a.extend_from_slice(&ty.to_ne_bytes());
        a.extend_from_slice(v);
        while a.len() % 4 != 0 {
            a.push(0);
        }
        a
    }

    fn msg(ty: u16, flags: u16, body: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&ty.to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&7u32.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(body);
        m
    }

    #[test]
    fn parses_links_addresses_and_neighbours() {
        let mut link = vec![0u8; 16];
        link[4..8].copy_from_slice(&5u32.to_ne_bytes());
        link[8..12].copy_from_slice(&(libc::IFF_UP as u32).to_ne_bytes());
        link.extend(attr(IFLA_IFNAME, b"tw0\0"));
        link.extend(attr(IFLA_MTU, &1400u32.to_ne_bytes()));
        link.extend(attr(IFLA_ADDRESS, &[2, 0, 0, 0, 0, 1]));
        let mut addr = vec![libc::AF_INET as u8, 24, 0, 0];
        addr.extend_from_slice(&5u32.to_ne_bytes());
        addr.extend(attr(IFA_ADDRESS, &[10, 0, 0, 9]));
        addr.extend(attr(IFA_LOCAL, &[10, 0, 0, 1]));
        let mut nb = vec![libc::AF_INET6 as u8, 0, 0, 0];
        nb.extend_from_slice(&5u32.to_ne_bytes());
        nb.extend_from_slice(&2u16.to_ne_bytes());
        nb.extend_from_slice(&[0, 0]);
        let a6: Ipv6Addr = "fd00::2".parse().unwrap();
        nb.extend(attr(NDA_DST, &a6.octets()));
        nb.extend(attr(NDA_LLADDR, &[2, 0, 0, 0, 0, 2]));
        let mut d = msg(RTM_NEWLINK, 0, &link);
        d.extend(msg(RTM_DELADDR, 0, &addr));
        d.extend(msg(RTM_NEWNEIGH, 0, &nb));
        d.extend(msg(99, 0, &[1, 2, 3])); // unknown: skipped
        let mut out = Vec::new();
        assert_eq!(parse(&d, &mut out), 4);
        let m: Vec<Msg> = out.into_iter().map(|x| x.0).collect();
        assert_eq!(
            m,
            vec![
                Msg::Link {
                    del: false,
                    index: 5,
                    name: "tw0".into(),
                    up: true,
                    mtu: Some(1400),
                    mac: Some([2, 0, 0, 0, 0, 1]),
                },
                Msg::Addr {
                    del: true,
                    index: 5,
                    addr: "10.0.0.1".parse().unwrap(),
                    len: 24
                },
                Msg::Neigh {
                    del: false,
                    index: 5,
                    ip: a6.into(),
                    mac: Some([2, 0, 0, 0, 0, 2]),
                    state: 2
                },
            ]
        );
    }

    #[test]
    fn parses_multipath_blackhole_and_append() {
        let mut rt = vec![libc::AF_INET as u8, 16, 0, 0, 254, 4, 0, rtn::UNICAST];
        rt.extend_from_slice(&0u32.to_ne_bytes());
        rt.extend(attr(RTA_DST, &[10, 9, 0, 0]));
        let mut mp = Vec::new();
        for (idx, gw, hops) in [(5u32, [10, 0, 0, 2], 0u8), (6, [10, 1, 0, 2], 2)] {
            let g = attr(RTA_GATEWAY, &gw);
            mp.extend_from_slice(&((8 + g.len()) as u16).to_ne_bytes());
            mp.extend_from_slice(&[0, hops]);
            mp.extend_from_slice(&idx.to_ne_bytes());
            mp.extend(g);
        }
        rt.extend(attr(RTA_MULTIPATH | 0x8000, &mp));
        let mut bh = vec![libc::AF_INET6 as u8, 48, 0, 0, 254, 4, 0, rtn::BLACKHOLE];
        bh.extend_from_slice(&0u32.to_ne_bytes());
        bh.extend(attr(
            RTA_DST,
            &"2001:db8::".parse::<Ipv6Addr>().unwrap().octets(),
        ));
        bh.extend(attr(RTA_TABLE, &1000u32.to_ne_bytes()));
        let mut d = msg(RTM_NEWROUTE, 0, &rt);
        d.extend(msg(RTM_NEWROUTE, NLM_F_APPEND, &bh));
        let mut out = Vec::new();
        parse(&d, &mut out);
        assert_eq!(
            out[0].0,
            Msg::Route {
                del: false,
                append: false,
                table: 254,
                dst: "10.9.0.0".parse().unwrap(),
                len: 16,
                kind: rtn::UNICAST,
                proto: 4,
                hops: vec![
                    Hop {
                        gw: Some("10.0.0.2".parse().unwrap()),
                        oif: Some(5),
                        weight: 1
                    },
                    Hop {
                        gw: Some("10.1.0.2".parse().unwrap()),
                        oif: Some(6),
                        weight: 3
                    },
                ],
            }
        );
        assert_eq!(
            out[1].0,
            Msg::Route {
                del: false,
                append: true,
                table: 1000,
                dst: "2001:db8::".parse().unwrap(),
                len: 48,
                kind: rtn::BLACKHOLE,
                proto: 4,
                hops: vec![],
            }
        );
    }

    #[test]
    fn garbage_never_panics() {
        let mut out = Vec::new();
        let mut x = 0x1234_5678u32;
        for len in 0..300 {
            let mut b: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect();
            // Plausible headers with random bodies, every message type.
            if len >= 16 {
                b[0..4].copy_from_slice(&(len as u32).to_ne_bytes());
                b[4..6].copy_from_slice(&(16 + (len % 16) as u16).to_ne_bytes());
            }
            parse(&b, &mut out);
        }
        // Truncated attribute inside a valid message.
        let mut rt = vec![libc::AF_INET as u8, 16, 0, 0, 254, 4, 0, 1, 0, 0, 0, 0];
        rt.extend_from_slice(&[200, 0, 1, 0, 10]);
        parse(&msg(RTM_NEWROUTE, 0, &rt), &mut out);
    }
}
