//! Sockets over an attached [`App`]: the BSD-socket-shaped layer the C API
//! (`sluice-session-c`, `include/sluice_session.h`) and the LD_PRELOAD library
//! (`sluice-preload`) share. A socket is a handle (a small integer) naming a TCP or UDP
//! socket in one of the states a BSD socket goes through (created, bound, listening,
//! connecting, connected); its data moves through the session's FIFOs with no system call.
//!
//! Readiness is read from the FIFOs and the slot's state word after [`Sockets::pump`]
//! drained the event queue (accepted connections are queued on their listener there), so
//! a caller checks readiness, then sleeps when nothing is ready: [`Sockets::prepare_wait`]
//! under the caller's lock, [`Sleep::sleep`] without it (other threads' calls go on),
//! [`Sockets::woke`] under it again; [`blocking`] is that loop for one blocking call. Free
//! space in a tx FIFO queues an event only when asked for: a caller about to sleep waiting
//! to write asks with [`Sockets::arm_write`].
//!
//! Errors are `io::Error`s carrying the errno a BSD socket would return.

use crate::{seg, App, Event, Session, MAX_DGRAM};
use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::RawFd;
use std::time::Duration;

/// TCP or UDP.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A stream socket.
    Tcp,
    /// A datagram socket.
    Udp,
}

/// What a socket is ready for (level-triggered, as `poll` reports it).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Ready {
    /// Data, end of stream, a reset or a connection to accept.
    pub read: bool,
    /// Room in the tx FIFO of a connected socket; a finished (or failed) connect.
    pub write: bool,
    /// The peer closed (end of stream) or the connection was reset.
    pub hup: bool,
    /// A pending error (`SO_ERROR`).
    pub err: bool,
}

impl Ready {
    /// The epoll events this readiness means for a watch asking for `want` (EPOLLERR and
    /// EPOLLHUP on an error whether asked or not, as epoll reports them).
    pub fn epoll_bits(self, want: u32) -> u32 {
        let mut b = 0;
        if self.read {
            b |= want & libc::EPOLLIN as u32;
        }
        if self.write {
            b |= want & libc::EPOLLOUT as u32;
        }
        if self.hup {
            b |= want & libc::EPOLLRDHUP as u32;
        }
        if self.err {
            b |= (libc::EPOLLERR | libc::EPOLLHUP) as u32;
        }
        b
    }
}

/// The errno a BSD socket call returns for `e`.
pub fn errno_of(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(match e.kind() {
        io::ErrorKind::WouldBlock => libc::EAGAIN,
        io::ErrorKind::ConnectionReset => libc::ECONNRESET,
        io::ErrorKind::ConnectionRefused => libc::ECONNREFUSED,
        io::ErrorKind::TimedOut => libc::ETIMEDOUT,
        _ => libc::EIO,
    })
}

#[derive(Debug)]
struct Sock {
    kind: Kind,
    v6: bool,
    /// Address given to `bind` (TCP: used by `listen`).
    local: Option<SocketAddr>,
    sess: Option<Session>,
    listening: bool,
    connecting: bool,
    /// Accepted connections not yet taken by `accept`.
    accepts: VecDeque<Session>,
    nonblocking: bool,
    /// Pending `SO_ERROR` (errno).
    error: i32,
    /// `shutdown(SHUT_WR)` done: the FIN is queued, writes fail with `EPIPE`.
    wr_shut: bool,
}

/// The sockets of one attached application.
pub struct Sockets {
    app: App,
    socks: Vec<Option<Sock>>,
    /// Slot → handle + 1 (0: none).
    by_slot: Vec<u32>,
}

fn errno(e: i32) -> io::Error {
    io::Error::from_raw_os_error(e)
}

fn unspecified(v6: bool) -> SocketAddr {
    let ip = if v6 {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    } else {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    };
    SocketAddr::new(ip, 0)
}

impl Sockets {
    /// Attaches to the session layer at `path` as `name`.
    pub fn attach(path: &str, name: &str) -> io::Result<Sockets> {
        let app = App::attach(path, name)?;
        let n = app.geometry().n_slots as usize;
        Ok(Sockets {
            app,
            socks: Vec::new(),
            by_slot: vec![0; n],
        })
    }

    /// The attached application (its eventfd and sleep handshake).
    pub fn app(&self) -> &App {
        &self.app
    }

    /// The attached application, to configure (busy polling).
    pub fn app_mut(&mut self) -> &mut App {
        &mut self.app
    }

    fn sock(&self, h: u32) -> io::Result<&Sock> {
        self.socks
            .get(h as usize)
            .and_then(|s| s.as_ref())
            .ok_or_else(|| errno(libc::EBADF))
    }

    fn sock_mut(&mut self, h: u32) -> io::Result<&mut Sock> {
        self.socks
            .get_mut(h as usize)
            .and_then(|s| s.as_mut())
            .ok_or_else(|| errno(libc::EBADF))
    }

    fn add(&mut self, s: Sock) -> u32 {
        let slot = s.sess.map(|x| x.slot);
        let h = match self.socks.iter().position(|x| x.is_none()) {
            Some(i) => {
                self.socks[i] = Some(s);
                i
            }
            None => {
                self.socks.push(Some(s));
                self.socks.len() - 1
            }
        } as u32;
        if let Some(slot) = slot {
            self.map_slot(slot, h);
        }
        h
    }

    fn map_slot(&mut self, slot: u32, h: u32) {
        if let Some(x) = self.by_slot.get_mut(slot as usize) {
            *x = h + 1;
        }
    }

    /// A new socket (IPv6 when `v6`); its handle.
    pub fn socket(&mut self, kind: Kind, v6: bool) -> u32 {
        self.add(Sock {
            kind,
            v6,
            local: None,
            sess: None,
            listening: false,
            connecting: false,
            accepts: VecDeque::new(),
            nonblocking: false,
            error: 0,
            wr_shut: false,
        })
    }

    /// Whether `h` names a socket.
    pub fn is_socket(&self, h: u32) -> bool {
        self.sock(h).is_ok()
    }

    /// TCP or UDP, and whether IPv6.
    pub fn kind(&self, h: u32) -> io::Result<(Kind, bool)> {
        let s = self.sock(h)?;
        Ok((s.kind, s.v6))
    }

    /// Non-blocking mode (`O_NONBLOCK`): the frontends' blocking calls wait only without it.
    pub fn set_nonblocking(&mut self, h: u32, on: bool) -> io::Result<()> {
        self.sock_mut(h)?.nonblocking = on;
        Ok(())
    }

    /// Whether `h` is non-blocking.
    pub fn nonblocking(&self, h: u32) -> io::Result<bool> {
        Ok(self.sock(h)?.nonblocking)
    }

    fn check_family(s: &Sock, a: &SocketAddr) -> io::Result<()> {
        if a.is_ipv6() != s.v6 {
            return Err(errno(libc::EAFNOSUPPORT));
        }
        Ok(())
    }

    /// Binds: a UDP socket gets its session now (datagrams arrive from then on); a TCP
    /// socket keeps the address for `listen`.
    pub fn bind(&mut self, h: u32, local: SocketAddr) -> io::Result<()> {
        let s = self.sock(h)?;
        Self::check_family(s, &local)?;
        if s.sess.is_some() || s.local.is_some() {
            return Err(errno(libc::EINVAL));
        }
        match s.kind {
            Kind::Tcp => self.sock_mut(h)?.local = Some(local),
            Kind::Udp => {
                let sess = self.app.bind(local)?;
                let s = self.sock_mut(h)?;
                s.local = Some(sess.local);
                s.sess = Some(sess);
                self.map_slot(sess.slot, h);
            }
        }
        Ok(())
    }

    /// Listens (TCP) on the bound address (unbound: any address, an ephemeral port).
    pub fn listen(&mut self, h: u32, backlog: i32) -> io::Result<()> {
        let s = self.sock(h)?;
        if s.kind != Kind::Tcp {
            return Err(errno(libc::EOPNOTSUPP));
        }
        if s.listening {
            return Ok(());
        }
        if s.sess.is_some() {
            return Err(errno(libc::EINVAL));
        }
        let local = s.local.unwrap_or_else(|| unspecified(s.v6));
        let sess = self.app.listen(local, backlog.max(0) as u32)?;
        let s = self.sock_mut(h)?;
        s.sess = Some(sess);
        s.local = Some(sess.local);
        s.listening = true;
        self.map_slot(sess.slot, h);
        Ok(())
    }

    /// Takes one accepted connection of listener `h`: its handle and peer (`WouldBlock`
    /// when none is queued).
    pub fn accept(&mut self, h: u32) -> io::Result<(u32, SocketAddr)> {
        self.pump();
        let s = self.sock_mut(h)?;
        if !s.listening {
            return Err(errno(libc::EINVAL));
        }
        let v6 = s.v6;
        let Some(c) = s.accepts.pop_front() else {
            return Err(io::ErrorKind::WouldBlock.into());
        };
        let peer = c.remote.unwrap_or_else(|| unspecified(v6));
        let n = self.add(Sock {
            kind: Kind::Tcp,
            v6,
            local: Some(c.local),
            sess: Some(c),
            listening: false,
            connecting: false,
            accepts: VecDeque::new(),
            nonblocking: false,
            error: 0,
            wr_shut: false,
        });
        Ok((n, peer))
    }

    /// Connects: TCP starts the handshake and returns `Ok(false)` while it is in progress
    /// ([`Sockets::connect_done`] says when it ended); UDP fixes the peer (`Ok(true)`).
    pub fn connect(&mut self, h: u32, remote: SocketAddr) -> io::Result<bool> {
        let s = self.sock(h)?;
        Self::check_family(s, &remote)?;
        if s.listening {
            return Err(errno(libc::EINVAL));
        }
        if s.connecting {
            // Asked again (hiredis does after poll said writable): 0 once it is done.
            return match self.connect_done(h)? {
                true => Ok(true),
                false => Err(errno(libc::EALREADY)),
            };
        }
        if s.sess.is_some() {
            return Err(errno(libc::EISCONN));
        }
        let kind = s.kind;
        let sess = match kind {
            Kind::Tcp => self.app.tcp_connect_start(remote)?,
            Kind::Udp => self.app.connect(remote)?,
        };
        let s = self.sock_mut(h)?;
        s.sess = Some(sess);
        s.local = Some(sess.local);
        s.connecting = kind == Kind::Tcp;
        self.map_slot(sess.slot, h);
        if kind == Kind::Tcp {
            return self.connect_done(h);
        }
        Ok(true)
    }

    /// A TCP connect in progress: `Ok(true)` once established, `Ok(false)` still going,
    /// `ECONNREFUSED` after a reset (also kept as `SO_ERROR`).
    pub fn connect_done(&mut self, h: u32) -> io::Result<bool> {
        let s = self.sock(h)?;
        let Some(sess) = s.sess else {
            return Err(errno(libc::ENOTCONN));
        };
        if !s.connecting {
            return Ok(true);
        }
        let st = self.app.tcp_state(&sess);
        let s = self.sock_mut(h)?;
        if st & seg::tcp_state::RESET != 0 {
            s.connecting = false;
            s.error = libc::ECONNREFUSED;
            return Err(errno(libc::ECONNREFUSED));
        }
        if st & seg::tcp_state::ESTABLISHED != 0 {
            s.connecting = false;
            return Ok(true);
        }
        Ok(false)
    }

    /// The session of a connected socket; a connect in progress that has finished counts
    /// (readiness reports it writable as soon as it is established).
    fn connected(&mut self, h: u32) -> io::Result<Session> {
        if self.sock(h)?.connecting && !self.connect_done(h)? {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let s = self.sock(h)?;
        match s.sess {
            Some(x) if !s.listening => Ok(x),
            _ => Err(errno(libc::ENOTCONN)),
        }
    }

    /// Reads: stream bytes (TCP; `Ok(0)` at the end of the stream) or one datagram (UDP,
    /// truncated to `buf`). `WouldBlock` when nothing is there.
    pub fn read(&mut self, h: u32, buf: &mut [u8]) -> io::Result<usize> {
        self.recv_from(h, buf).map(|(n, _)| n)
    }

    /// [`Sockets::read`] that also returns a datagram's source.
    pub fn recv_from(&mut self, h: u32, buf: &mut [u8]) -> io::Result<(usize, Option<SocketAddr>)> {
        let kind = self.sock(h)?.kind;
        let sess = match kind {
            Kind::Tcp => self.connected(h)?,
            Kind::Udp => self.sock(h)?.sess.ok_or_else(|| errno(libc::ENOTCONN))?,
        };
        match kind {
            Kind::Tcp => Ok((self.app.read(&sess, buf)?, sess.remote)),
            Kind::Udp => {
                if buf.len() >= MAX_DGRAM {
                    let (n, from) = self.app.recv_from(&sess, buf)?;
                    return Ok((n, Some(from)));
                }
                // A short buffer takes the datagram's head, as a BSD socket does.
                let mut big = [0u8; MAX_DGRAM];
                let (n, from) = self.app.recv_from(&sess, &mut big)?;
                let k = n.min(buf.len());
                buf[..k].copy_from_slice(&big[..k]);
                Ok((k, Some(from)))
            }
        }
    }

    /// Writes: as many stream bytes as fit (TCP) or one datagram to the connected peer
    /// (UDP). `WouldBlock` when nothing fit.
    pub fn write(&mut self, h: u32, buf: &[u8]) -> io::Result<usize> {
        self.send_to(h, buf, None)
    }

    /// [`Sockets::write`] with a destination (UDP; a TCP socket ignores it). An unbound
    /// UDP socket is bound to an ephemeral port first.
    pub fn send_to(&mut self, h: u32, buf: &[u8], to: Option<SocketAddr>) -> io::Result<usize> {
        let s = self.sock(h)?;
        match s.kind {
            Kind::Tcp => {
                let sess = self.connected(h)?;
                if self.sock(h)?.wr_shut {
                    return Err(errno(libc::EPIPE));
                }
                if buf.is_empty() {
                    return Ok(0);
                }
                let r = self.app.write(&sess, buf);
                if matches!(&r, Err(e) if e.kind() == io::ErrorKind::ConnectionReset) {
                    return Err(errno(libc::EPIPE));
                }
                r
            }
            Kind::Udp => {
                let v6 = s.v6;
                let sess = match (s.sess, to) {
                    (Some(x), _) => x,
                    (None, Some(_)) => {
                        self.bind(h, unspecified(v6))?;
                        self.sock(h)?.sess.ok_or_else(|| errno(libc::EINVAL))?
                    }
                    (None, None) => return Err(errno(libc::EDESTADDRREQ)),
                };
                let to = to
                    .or(sess.remote)
                    .ok_or_else(|| errno(libc::EDESTADDRREQ))?;
                self.app.send_to(&sess, buf, to)?;
                Ok(buf.len())
            }
        }
    }

    /// Closes `h` (TCP: an orderly close, the FIN goes after the queued data); the
    /// connections accepted but never taken are closed with it.
    pub fn close(&mut self, h: u32) -> io::Result<()> {
        let s = self
            .socks
            .get_mut(h as usize)
            .and_then(|s| s.take())
            .ok_or_else(|| errno(libc::EBADF))?;
        for c in s.accepts {
            let _ = self.app.close(c);
        }
        if let Some(sess) = s.sess {
            if let Some(x) = self.by_slot.get_mut(sess.slot as usize) {
                *x = 0;
            }
            self.app.close(sess)?;
        }
        Ok(())
    }

    /// `shutdown(2)`: `SHUT_WR` and `SHUT_RDWR` half-close a TCP connection (the FIN goes
    /// after the queued data, later writes fail with `EPIPE`, reading goes on until the
    /// peer's end of stream); `SHUT_RD` is accepted and changes nothing, as is any `how`
    /// on a connected UDP socket. `ENOTCONN` for a socket that is not connected.
    pub fn shutdown(&mut self, h: u32, how: i32) -> io::Result<()> {
        if !matches!(how, libc::SHUT_RD | libc::SHUT_WR | libc::SHUT_RDWR) {
            return Err(errno(libc::EINVAL));
        }
        let s = self.sock(h)?;
        if s.listening || s.sess.is_none() {
            return Err(errno(libc::ENOTCONN));
        }
        if s.kind == Kind::Udp || how == libc::SHUT_RD || s.wr_shut {
            return Ok(());
        }
        let sess = match self.connected(h) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Err(errno(libc::ENOTCONN)),
            r => r?,
        };
        self.app.shutdown(&sess)?;
        self.sock_mut(h)?.wr_shut = true;
        Ok(())
    }

    /// Closes every socket as [`Sockets::close`] does (a process exiting without closing
    /// its sockets: the kernel would send their FINs too).
    pub fn close_all(&mut self) {
        for h in 0..self.socks.len() as u32 {
            let _ = self.close(h);
        }
    }

    /// The local address (bound or given by Sluice).
    pub fn local_addr(&self, h: u32) -> io::Result<SocketAddr> {
        let s = self.sock(h)?;
        Ok(s.local.unwrap_or_else(|| unspecified(s.v6)))
    }

    /// The peer of a connected socket.
    pub fn peer_addr(&self, h: u32) -> io::Result<SocketAddr> {
        let s = self.sock(h)?;
        match s.sess.and_then(|x| x.remote) {
            Some(a) if !s.connecting => Ok(a),
            _ => Err(errno(libc::ENOTCONN)),
        }
    }

    /// Takes the pending error (`SO_ERROR`; 0 when none).
    pub fn take_error(&mut self, h: u32) -> io::Result<i32> {
        if self.sock(h)?.connecting {
            let _ = self.connect_done(h);
        }
        let s = self.sock_mut(h)?;
        Ok(std::mem::take(&mut s.error))
    }

    /// Drains the event queue: queues accepted connections on their listeners (closes those
    /// whose listener is gone). Readiness is then read from the FIFOs.
    pub fn pump(&mut self) {
        while let Some(ev) = self.app.next() {
            let Event::Accept(slot) = ev else { continue };
            let Ok(c) = self.app.accepted(slot) else {
                continue;
            };
            let listener = self
                .app
                .listener_of(slot)
                .and_then(|l| self.by_slot.get(l as usize).copied())
                .filter(|&h| h != 0)
                .map(|h| h - 1);
            match listener.and_then(|l| self.socks.get_mut(l as usize)?.as_mut()) {
                Some(l) if l.listening => l.accepts.push_back(c),
                _ => {
                    let _ = self.app.close(c);
                }
            }
        }
    }

    /// What `h` is ready for now (call [`Sockets::pump`] first).
    pub fn ready(&self, h: u32) -> Ready {
        let Ok(s) = self.sock(h) else {
            return Ready {
                err: true,
                hup: true,
                ..Ready::default()
            };
        };
        let mut r = Ready {
            err: s.error != 0,
            ..Ready::default()
        };
        if s.listening {
            r.read = !s.accepts.is_empty();
            return r;
        }
        let Some(sess) = s.sess else {
            // An unbound UDP socket can send (`sendto` binds it), as the kernel's can.
            r.write = s.kind == Kind::Udp;
            return r;
        };
        let (used, free) = self.app.levels(sess.slot).unwrap_or((0, 0));
        if s.kind == Kind::Udp {
            r.read = used > 0;
            r.write = free as usize >= MAX_DGRAM + seg::DGRAM_HDR;
            return r;
        }
        let st = self.app.tcp_state(&sess);
        if st & seg::tcp_state::RESET != 0 {
            return Ready {
                read: true,
                write: true,
                hup: true,
                err: true,
            };
        }
        let est = st & seg::tcp_state::ESTABLISHED != 0;
        r.read = used > 0 || st & seg::tcp_state::PEER_FIN != 0;
        r.hup = st & seg::tcp_state::PEER_FIN != 0;
        r.write = est && free > 0;
        r
    }

    /// Before sleeping on `h` waiting to `write`: asks Sluice for an event when its tx FIFO
    /// has room again (Sluice announces freed space only on request; a finished connect
    /// queues one anyway). True when `h` became writable meanwhile: look again, do not
    /// sleep.
    pub fn arm_write(&self, h: u32, write: bool) -> bool {
        let Ok(s) = self.sock(h) else { return false };
        let Some(sess) = s.sess.filter(|_| write && !s.connecting && !s.listening) else {
            return false;
        };
        if self.ready(h).write {
            return false; // reported ready already
        }
        self.app.want_space(sess.slot);
        self.ready(h).write
    }

    /// Announces the caller is about to sleep (after busy-polling, [`App::set_busy_poll`]);
    /// the caller then drops its lock and calls [`Sleep::sleep`].
    pub fn prepare_wait(&self) -> Sleep {
        let armed = !self.app.spin() && self.app.prepare_sleep();
        Sleep {
            fd: self.app.event_fd(),
            armed,
        }
    }

    /// Awake again after `s` (under the caller's lock): takes the announcement back and
    /// drains the event queue ([`Sockets::pump`]).
    pub fn woke(&mut self, s: Sleep) {
        if s.armed {
            self.app.woke();
        }
        self.pump();
    }
}

/// A sleep announced by [`Sockets::prepare_wait`], taken without the caller's lock.
#[derive(Copy, Clone, Debug)]
pub struct Sleep {
    fd: RawFd,
    /// False: events were queued already (no sleep).
    armed: bool,
}

impl Sleep {
    /// Sleeps until Sluice queues an event or `timeout` passes. Several threads may sleep
    /// at once; one's [`Sockets::woke`] can take back another's announcement, so callers
    /// sleep for bounded times and look again.
    pub fn sleep(&self, timeout: Duration) -> io::Result<()> {
        if self.armed {
            crate::wait_readable(self.fd, Some(timeout))?;
        }
        Ok(())
    }
}

/// Runs `op` on socket `h` until it stops saying `WouldBlock`, sleeping between tries
/// (`sleep` at a time; woken by Sluice's events, tx space included) with the
/// caller's lock released, so other threads' calls go on. `lock` takes that lock; `socks`
/// finds the sockets behind it (`None`: detached, `ENOTCONN`). `WouldBlock` at once when
/// `dontwait` or the socket is non-blocking.
pub fn blocking<G, T>(
    mut lock: impl FnMut() -> G,
    socks: fn(&mut G) -> Option<&mut Sockets>,
    h: u32,
    write: bool,
    dontwait: bool,
    sleep: Duration,
    mut op: impl FnMut(&mut Sockets, u32) -> io::Result<T>,
) -> io::Result<T> {
    let mut slept = None;
    loop {
        let mut g = lock();
        let s = socks(&mut g).ok_or_else(|| errno(libc::ENOTCONN))?;
        if let Some(w) = slept.take() {
            s.woke(w);
        }
        match op(s, h) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if dontwait || s.nonblocking(h).unwrap_or(true) {
                    return Err(e);
                }
                let t = if s.arm_write(h, write) {
                    Duration::ZERO
                } else {
                    sleep
                };
                let w = s.prepare_wait();
                drop(g);
                let r = w.sleep(t);
                slept = Some(w);
                if let Err(e) = r {
                    if let Some(s) = socks(&mut lock()) {
                        s.woke(w);
                    }
                    return Err(e);
                }
            }
            r => return r,
        }
    }
}

/// Conversions between `SocketAddr` and C's `struct sockaddr` for the C-facing crates.
pub mod raw {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

    /// The address at `sa` (`len` bytes): `None` when it is not an IPv4/IPv6 address or
    /// too short.
    ///
    /// # Safety
    /// `sa` is null or points to `len` readable bytes.
    pub unsafe fn from_c(sa: *const libc::sockaddr, len: libc::socklen_t) -> Option<SocketAddr> {
        if sa.is_null() || (len as usize) < std::mem::size_of::<libc::sa_family_t>() {
            return None;
        }
        // SAFETY: the family field fits in the `len` bytes the caller vouches for.
        let fam = unsafe { std::ptr::read_unaligned(sa as *const libc::sa_family_t) };
        match fam as i32 {
            libc::AF_INET if len as usize >= std::mem::size_of::<libc::sockaddr_in>() => {
                // SAFETY: a whole sockaddr_in is readable (length checked).
                let a = unsafe { std::ptr::read_unaligned(sa as *const libc::sockaddr_in) };
                Some(SocketAddr::new(
                    IpAddr::V4(Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr))),
                    u16::from_be(a.sin_port),
                ))
            }
            libc::AF_INET6 if len as usize >= std::mem::size_of::<libc::sockaddr_in6>() => {
                // SAFETY: a whole sockaddr_in6 is readable (length checked).
                let a = unsafe { std::ptr::read_unaligned(sa as *const libc::sockaddr_in6) };
                Some(SocketAddr::new(
                    IpAddr::V6(Ipv6Addr::from(a.sin6_addr.s6_addr)),
                    u16::from_be(a.sin6_port),
                ))
            }
            _ => None,
        }
    }

    /// Writes `a` to `sa` as `getsockname`/`accept` do: at most `*len` bytes, `*len` set to
    /// the full size. Nothing when either pointer is null.
    ///
    /// # Safety
    /// `sa` and `len` are null or `len` is readable/writable and `sa` points to `*len`
    /// writable bytes.
    pub unsafe fn to_c(a: SocketAddr, sa: *mut libc::sockaddr, len: *mut libc::socklen_t) {
        if sa.is_null() || len.is_null() {
            return;
        }
        // SAFETY: zeroed sockaddr_storage is a valid value.
        let mut st: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let n = match a {
            SocketAddr::V4(v) => {
                // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
                let p = unsafe { &mut *(&mut st as *mut _ as *mut libc::sockaddr_in) };
                p.sin_family = libc::AF_INET as libc::sa_family_t;
                p.sin_port = v.port().to_be();
                p.sin_addr.s_addr = u32::from(*v.ip()).to_be();
                std::mem::size_of::<libc::sockaddr_in>()
            }
            SocketAddr::V6(v) => {
                // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
                let p = unsafe { &mut *(&mut st as *mut _ as *mut libc::sockaddr_in6) };
                p.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                p.sin6_port = v.port().to_be();
                p.sin6_addr.s6_addr = v.ip().octets();
                p.sin6_flowinfo = v.flowinfo();
                p.sin6_scope_id = v.scope_id();
                std::mem::size_of::<libc::sockaddr_in6>()
            }
        };
        // SAFETY: the caller vouches for `*len` writable bytes at `sa` and for `len`.
        unsafe {
            let room = (*len as usize).min(n);
            std::ptr::copy_nonoverlapping(&st as *const _ as *const u8, sa as *mut u8, room);
            *len = n as libc::socklen_t;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::raw;
    use std::net::SocketAddr;

    fn round_trip(a: SocketAddr) -> SocketAddr {
        // SAFETY: zeroed sockaddr_storage is valid; pointers to locals of the right size.
        unsafe {
            let mut st: libc::sockaddr_storage = std::mem::zeroed();
            let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            raw::to_c(a, &mut st as *mut _ as *mut libc::sockaddr, &mut len);
            raw::from_c(&st as *const _ as *const libc::sockaddr, len).unwrap()
        }
    }

    #[test]
    fn sockaddrs_convert_both_ways() {
        for a in ["10.1.2.3:4567", "[fd00::1]:80", "0.0.0.0:0", "[::]:65535"] {
            let a: SocketAddr = a.parse().unwrap();
            assert_eq!(round_trip(a), a);
        }
    }

    #[test]
    fn short_or_foreign_sockaddrs_are_refused_and_output_truncated() {
        let a: SocketAddr = "[fd00::1]:80".parse().unwrap();
        // SAFETY: as above; `len` says how much of `st` may be read or written.
        unsafe {
            let mut st: libc::sockaddr_storage = std::mem::zeroed();
            let mut len = 8 as libc::socklen_t;
            raw::to_c(a, &mut st as *mut _ as *mut libc::sockaddr, &mut len);
            // The full size is reported, only 8 bytes were written.
            assert_eq!(len as usize, std::mem::size_of::<libc::sockaddr_in6>());
            let bytes = std::slice::from_raw_parts(&st as *const _ as *const u8, 64);
            assert!(bytes[8..].iter().all(|&b| b == 0));
            let p = &st as *const _ as *const libc::sockaddr;
            assert_eq!(raw::from_c(p, 8), None, "too short for sockaddr_in6");
            assert_eq!(raw::from_c(std::ptr::null(), 28), None);
            st.ss_family = libc::AF_UNIX as libc::sa_family_t;
            let p = &st as *const _ as *const libc::sockaddr;
            assert_eq!(raw::from_c(p, 110), None, "not an IP family");
        }
    }
}
