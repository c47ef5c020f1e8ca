//! Client library of Sluice's host stack (the session layer, `plugins/hoststack`): an
//! application attaches over a Unix socket, receives a shared-memory segment with a pair of
//! FIFOs per session and two event queues, and from then on sends and receives UDP
//! datagrams with no system call per datagram — only a wake-up through an eventfd when the
//! other side announced it sleeps (docs/hoststack.md).
//!
//! ```no_run
//! use sluice_session::App;
//! let mut app = App::attach("/run/sluice/app.sock", "echo").unwrap();
//! let s = app.bind("0.0.0.0:7".parse().unwrap()).unwrap();
//! let mut buf = [0u8; sluice_session::MAX_DGRAM];
//! loop {
//!     while let Ok((n, from)) = app.recv_from(&s, &mut buf) {
//!         let _ = app.send_to(&s, &buf[..n], from);
//!     }
//!     app.wait(None).unwrap();
//! }
//! ```
//!
//! One `App` is used by one thread (each FIFO has one producer and one consumer).

pub mod msg;
pub mod seg;
pub mod sock;

use msg::Msg;
use seg::{EvQ, Geometry, PopError};
use sluice_infra::seqpacket::{self, Recv};
use sluice_infra::shm::{self, Region};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// Largest datagram payload a session carries in this version (one Sluice buffer with its
/// IPv6 and UDP headers).
pub const MAX_DGRAM: usize = 2000;

/// How long a control request waits for its reply.
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// An attached application.
pub struct App {
    sock: OwnedFd,
    seg: Region,
    g: Geometry,
    /// Sluice signals this one when we announced we sleep.
    app_efd: OwnedFd,
    /// We signal this one when Sluice announced it sleeps.
    sluice_efd: OwnedFd,
    next_req: u32,
    busy_poll: Duration,
}

/// What [`App::next`] reports.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Data, end of stream or a state change on this slot.
    Data(u32),
    /// A TCP connection was accepted into this slot ([`App::accepted`]).
    Accept(u32),
}

/// A session: a bound UDP endpoint (datagrams from any peer) or a connected one.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Session {
    /// Slot of its FIFOs.
    pub slot: u32,
    /// The local endpoint.
    pub local: SocketAddr,
    /// The peer of a connected session.
    pub remote: Option<SocketAddr>,
}

/// The longest sleep of [`App::tcp_connect`] between looks at the state word.
const CONNECT_NAP: Duration = Duration::from_millis(1);

fn proto_err(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

pub(crate) fn wait_readable(fd: RawFd, timeout: Option<Duration>) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout
        .map(|d| d.as_millis().min(i32::MAX as u128) as i32)
        .unwrap_or(-1);
    // SAFETY: one valid pollfd.
    let r = unsafe { libc::poll(&mut p, 1, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(r > 0)
}

fn drain_eventfd(fd: &OwnedFd) {
    let mut v = 0u64;
    // SAFETY: reads 8 bytes into a local from a non-blocking eventfd we own.
    unsafe { libc::read(fd.as_raw_fd(), &mut v as *mut u64 as *mut libc::c_void, 8) };
}

fn retval(r: i32) -> io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(r.saturating_neg()))
    }
}

impl App {
    /// Attaches to the session layer listening at `path` (`session { app-socket }`).
    pub fn attach(path: &str, name: &str) -> io::Result<App> {
        let sock = seqpacket::connect(path)?;
        seqpacket::send(
            &sock,
            &msg::encode(&Msg::Attach { name: name.into() }),
            None,
        )?;
        let mut seg = None;
        let (mut app_efd, mut sluice_efd) = (None, None);
        let deadline = Instant::now() + REPLY_TIMEOUT;
        while seg.is_none() || app_efd.is_none() || sluice_efd.is_none() {
            let (m, mut fds) = recv_msg(&sock, deadline)?;
            match m {
                Msg::AttachReply {
                    retval: r,
                    seg_size,
                } => {
                    retval(r)?;
                    let fd = fds
                        .pop()
                        .ok_or_else(|| proto_err("attach reply without memfd"))?;
                    seg = Some(Region::map(fd, seg_size).map_err(|e| proto_err(&e))?);
                }
                Msg::EventFd { which } => {
                    let fd = fds
                        .pop()
                        .ok_or_else(|| proto_err("eventfd message without fd"))?;
                    match which {
                        0 => app_efd = Some(fd),
                        _ => sluice_efd = Some(fd),
                    }
                }
                _ => return Err(proto_err("unexpected message while attaching")),
            }
        }
        let (Some(seg), Some(app_efd), Some(sluice_efd)) = (seg, app_efd, sluice_efd) else {
            return Err(proto_err("incomplete attach"));
        };
        let g = seg::read_header(&seg).ok_or_else(|| proto_err("bad segment header"))?;
        Ok(App {
            sock,
            seg,
            g,
            app_efd,
            sluice_efd,
            next_req: 1,
            busy_poll: Duration::ZERO,
        })
    }

    fn request(&mut self, m: impl FnOnce(u32) -> Msg) -> io::Result<Msg> {
        if self.next_req == msg::NO_REPLY {
            self.next_req = 0;
        }
        let req = self.next_req;
        self.next_req = self.next_req.wrapping_add(1);
        seqpacket::send(&self.sock, &msg::encode(&m(req)), None)?;
        let deadline = Instant::now() + REPLY_TIMEOUT;
        loop {
            let (r, _) = recv_msg(&self.sock, deadline)?;
            match r {
                Msg::SessionReply { req: q, .. } | Msg::CloseReply { req: q, .. } if q == req => {
                    return Ok(r)
                }
                _ => continue,
            }
        }
    }

    fn session_reply(&mut self, r: Msg, remote: Option<SocketAddr>) -> io::Result<Session> {
        match r {
            Msg::SessionReply {
                retval: r,
                slot,
                local,
                ..
            } => {
                retval(r)?;
                if slot >= self.g.n_slots {
                    return Err(proto_err("slot out of range"));
                }
                Ok(Session {
                    slot,
                    local,
                    remote,
                })
            }
            _ => Err(proto_err("unexpected reply")),
        }
    }

    /// Binds a UDP endpoint: datagrams from any peer to `local` (address unspecified: any
    /// address of Sluice's) arrive on the returned session.
    pub fn bind(&mut self, local: SocketAddr) -> io::Result<Session> {
        let r = self.request(|req| Msg::Bind { req, local })?;
        self.session_reply(r, None)
    }

    /// Connects a UDP session to `remote` from an ephemeral local port.
    pub fn connect(&mut self, remote: SocketAddr) -> io::Result<Session> {
        let r = self.request(|req| Msg::Connect {
            req,
            remote,
            lport: 0,
        })?;
        self.session_reply(r, Some(remote))
    }

    /// Listens for TCP connections on `local` (address unspecified: any of Sluice's; port
    /// 0: ephemeral). Accepted connections arrive as [`Event::Accept`].
    pub fn listen(&mut self, local: SocketAddr, backlog: u32) -> io::Result<Session> {
        let r = self.request(|req| Msg::Listen {
            req,
            local,
            backlog,
        })?;
        self.session_reply(r, None)
    }

    /// Opens a TCP connection to `remote` and waits up to `timeout` for the handshake
    /// (`ConnectionRefused` on a RST, `TimedOut` when Sluice gave up or time ran out).
    pub fn tcp_connect(&mut self, remote: SocketAddr, timeout: Duration) -> io::Result<Session> {
        let s = self.tcp_connect_start(remote)?;
        let deadline = Instant::now() + timeout;
        loop {
            let st = self.tcp_state(&s);
            if st & seg::tcp_state::RESET != 0 {
                let _ = self.close(s);
                return Err(io::ErrorKind::ConnectionRefused.into());
            }
            if st & seg::tcp_state::ESTABLISHED != 0 {
                return Ok(s);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let _ = self.close(s);
                return Err(io::ErrorKind::TimedOut.into());
            }
            // The state change queues an event: sleep until one comes. Events of other
            // slots already queued (e.g. the last connection's) are left for the caller, so
            // the sleep is announced anyway and the state word read again after it (Sluice
            // writes the word before it queues the event, then reads the announcement).
            let q = self.app_evq();
            q.announce_sleep();
            let st = self.tcp_state(&s);
            if st & (seg::tcp_state::RESET | seg::tcp_state::ESTABLISHED) == 0 {
                // At most 1 ms: an event of the slot still queued from before would hold
                // back the state change's.
                let r = wait_readable(self.app_efd.as_raw_fd(), Some(left.min(CONNECT_NAP)));
                self.woke();
                r?;
            } else if !q.woke() {
                // Sluice took the announcement (and signalled): empty the eventfd. Taken
                // back here, nobody signalled: no read system call per connection.
                drain_eventfd(&self.app_efd);
            }
        }
    }

    /// Starts opening a TCP connection to `remote` and returns at once: the session's state
    /// word ([`App::tcp_state`]) says `ESTABLISHED` or `RESET` later (an event is queued
    /// when it changes).
    pub fn tcp_connect_start(&mut self, remote: SocketAddr) -> io::Result<Session> {
        let r = self.request(|req| Msg::TcpConnect { req, remote })?;
        self.session_reply(r, Some(remote))
    }

    /// Bytes waiting in a slot's rx FIFO and free in its tx FIFO (`None`: bad slot or
    /// corrupt positions).
    pub fn levels(&self, slot: u32) -> Option<(u32, u32)> {
        let (rx, tx) = seg::slot_fifos(&self.seg, &self.g, slot)?;
        Some((rx.used()?, tx.free_bytes()))
    }

    /// The listener slot a connection accepted into `slot` came through.
    pub fn listener_of(&self, slot: u32) -> Option<u32> {
        let (rx, _) = seg::slot_fifos(&self.seg, &self.g, slot)?;
        Some(rx.endpoints()?.2)
    }

    /// The TCP state word of a session (`seg::tcp_state` bits).
    pub fn tcp_state(&self, s: &Session) -> u32 {
        seg::slot_fifos(&self.seg, &self.g, s.slot)
            .map(|(rx, _)| rx.state().load(std::sync::atomic::Ordering::Acquire))
            .unwrap_or(seg::tcp_state::RESET)
    }

    /// The connection accepted into `slot` (after [`Event::Accept`]): its endpoints.
    pub fn accepted(&self, slot: u32) -> io::Result<Session> {
        let (rx, _) =
            seg::slot_fifos(&self.seg, &self.g, slot).ok_or_else(|| proto_err("bad slot"))?;
        let (local, peer, _) = rx.endpoints().ok_or_else(|| proto_err("bad endpoints"))?;
        Ok(Session {
            slot,
            local,
            remote: Some(peer),
        })
    }

    /// Reads stream bytes of a TCP session: `Ok(0)` at the end of the stream (the peer
    /// closed), `WouldBlock` when nothing is there yet, `ConnectionReset` after a RST.
    pub fn read(&self, s: &Session, buf: &mut [u8]) -> io::Result<usize> {
        let (rx, tx) =
            seg::slot_fifos(&self.seg, &self.g, s.slot).ok_or_else(|| proto_err("bad slot"))?;
        let n = rx.pop_bytes(buf);
        if n > 0 {
            // Sluice advertised a small window: tell it reading made room.
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            if rx.wnd_request().load(std::sync::atomic::Ordering::SeqCst) != 0
                && rx.free_bytes() >= rx.size() / 2
            {
                rx.wnd_request()
                    .store(0, std::sync::atomic::Ordering::Relaxed);
                self.kick(s.slot, &tx);
            }
            return Ok(n);
        }
        let st = rx.state().load(std::sync::atomic::Ordering::Acquire);
        if st & seg::tcp_state::RESET != 0 {
            return Err(io::ErrorKind::ConnectionReset.into());
        }
        if st & seg::tcp_state::PEER_FIN != 0 && rx.used() == Some(0) {
            return Ok(0);
        }
        Err(io::ErrorKind::WouldBlock.into())
    }

    /// Writes stream bytes to a TCP session: how many fit in the tx FIFO (`WouldBlock`
    /// when none did; then an event for the slot says when there is room again).
    pub fn write(&self, s: &Session, buf: &[u8]) -> io::Result<usize> {
        let (rx, tx) =
            seg::slot_fifos(&self.seg, &self.g, s.slot).ok_or_else(|| proto_err("bad slot"))?;
        if rx.state().load(std::sync::atomic::Ordering::Acquire) & seg::tcp_state::RESET != 0 {
            return Err(io::ErrorKind::ConnectionReset.into());
        }
        let mut n = tx.push_bytes(buf);
        if n == 0 && !buf.is_empty() {
            // Full: Sluice queues an event for the slot once the peer's ACKs free space.
            tx.want_space();
            n = tx.push_bytes(buf);
            if n == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
        }
        self.kick(s.slot, &tx);
        Ok(n)
    }

    /// Asks Sluice for an event on `slot` when its tx FIFO has room again (after finding it
    /// full; [`App::write`] and [`App::send_to`] ask by themselves when they fail).
    pub fn want_space(&self, slot: u32) {
        if let Some((_, tx)) = seg::slot_fifos(&self.seg, &self.g, slot) {
            tx.want_space();
        }
    }

    /// Queues a tx event for `slot` (once while one is pending) and wakes Sluice if it sleeps.
    fn kick(&self, slot: u32, tx: &seg::Fifo<'_>) {
        if tx.set_event() {
            let q = self.sluice_evq();
            if !q.push(slot) {
                tx.unset_event();
            }
            if q.needs_signal() {
                shm::signal(self.sluice_efd.as_raw_fd());
            }
        }
    }

    /// The next event: data (or a state change) on a slot, or a connection accepted.
    pub fn next(&self) -> Option<Event> {
        let v = self.app_evq().pop()?;
        let slot = v & !seg::EVENT_ACCEPT;
        if let Some((rx, _)) = seg::slot_fifos(&self.seg, &self.g, slot) {
            rx.clear_event();
        }
        Some(if v & seg::EVENT_ACCEPT != 0 {
            Event::Accept(slot)
        } else {
            Event::Data(slot)
        })
    }

    /// Closes a session (what its rx FIFO holds is discarded). Does not wait for Sluice: it
    /// serves this application's requests in order. The slot's FIFOs are not touched
    /// after the request is sent: once Sluice served it, the slot may already belong to a
    /// new session (an accepted connection), so Sluice, not the application, empties them
    /// when it hands the slot out again.
    pub fn close(&mut self, s: Session) -> io::Result<()> {
        seqpacket::send(
            &self.sock,
            &msg::encode(&Msg::Close {
                req: msg::NO_REPLY,
                slot: s.slot,
            }),
            None,
        )?;
        Ok(())
    }

    /// Half-closes a TCP session (`shutdown(SHUT_WR)`): Sluice sends the FIN after the
    /// queued data; reading goes on until the peer's end of stream. No effect on UDP.
    pub fn shutdown(&mut self, s: &Session) -> io::Result<()> {
        match self.request(|req| Msg::Shutdown { req, slot: s.slot })? {
            Msg::CloseReply { retval: r, .. } => retval(r),
            _ => Err(proto_err("unexpected reply")),
        }
    }

    /// Queues a datagram to `to`. `WouldBlock` when the session's tx FIFO is full (then an
    /// event for the slot says when there is room again).
    pub fn send_to(&self, s: &Session, buf: &[u8], to: SocketAddr) -> io::Result<()> {
        if buf.len() > MAX_DGRAM {
            return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
        }
        let (_, tx) =
            seg::slot_fifos(&self.seg, &self.g, s.slot).ok_or_else(|| proto_err("bad slot"))?;
        if !tx.push(to, buf) {
            // Full: Sluice queues an event for the slot once it sent enough of it.
            tx.want_space();
            if !tx.push(to, buf) {
                return Err(io::ErrorKind::WouldBlock.into());
            }
        }
        if tx.set_event() {
            let q = self.sluice_evq();
            // Never full: at most one event per slot is pending and evq_len >= n_slots.
            if !q.push(s.slot) {
                tx.unset_event();
            }
            if q.needs_signal() {
                shm::signal(self.sluice_efd.as_raw_fd());
            }
        }
        Ok(())
    }

    /// Queues a datagram to a connected session's peer.
    pub fn send(&self, s: &Session, buf: &[u8]) -> io::Result<()> {
        let to = s
            .remote
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EDESTADDRREQ))?;
        self.send_to(s, buf, to)
    }

    /// Takes the next datagram of a session. `WouldBlock` when none is queued.
    pub fn recv_from(&self, s: &Session, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        let (rx, _) =
            seg::slot_fifos(&self.seg, &self.g, s.slot).ok_or_else(|| proto_err("bad slot"))?;
        match rx.pop(buf) {
            Ok(h) => Ok((h.len as usize, h.peer)),
            Err(PopError::Empty) => Err(io::ErrorKind::WouldBlock.into()),
            Err(PopError::TooLong(_)) => Err(io::Error::from_raw_os_error(libc::EMSGSIZE)),
            Err(PopError::Corrupt) => {
                rx.clear();
                Err(proto_err("corrupt rx FIFO"))
            }
        }
    }

    fn app_evq(&self) -> EvQ<'_> {
        // The header was validated at attach, so the queue fits the segment.
        EvQ::new(&self.seg, self.g.app_evq_off(), self.g.evq_len).expect("validated segment")
    }

    fn sluice_evq(&self) -> EvQ<'_> {
        EvQ::new(&self.seg, self.g.sluice_evq_off(), self.g.evq_len).expect("validated segment")
    }

    /// The next session slot with received data (its event is consumed: drain the session
    /// with [`App::recv_from`] until `WouldBlock`).
    pub fn next_event(&self) -> Option<u32> {
        let slot = self.app_evq().pop()?;
        if let Some((rx, _)) = seg::slot_fifos(&self.seg, &self.g, slot) {
            rx.clear_event();
        }
        Some(slot)
    }

    /// Sets how long [`App::wait`] busy-polls the event queue before it sleeps on the
    /// eventfd (default 0: sleep at once). Spinning trades a CPU for wake-up latency.
    pub fn set_busy_poll(&mut self, d: Duration) {
        self.busy_poll = d;
    }

    /// Sleeps until Sluice queues an event or `timeout` passes (no system call when events
    /// are already queued, or when one arrives within the busy-poll time).
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<()> {
        if self.spin() {
            return Ok(());
        }
        if !self.prepare_sleep() {
            return Ok(());
        }
        let r = wait_readable(self.app_efd.as_raw_fd(), timeout);
        self.woke();
        r.map(|_| ())
    }

    /// Busy-polls the event queue for up to the busy-poll time ([`App::set_busy_poll`]);
    /// whether events are queued.
    pub fn spin(&self) -> bool {
        let q = self.app_evq();
        if !self.busy_poll.is_zero() {
            let t0 = Instant::now();
            while q.is_empty() && t0.elapsed() < self.busy_poll {
                std::hint::spin_loop();
            }
        }
        !q.is_empty()
    }

    /// The eventfd Sluice signals after [`App::prepare_sleep`] (for an application that
    /// waits in its own `poll`/`epoll_wait` together with other descriptors).
    pub fn event_fd(&self) -> std::os::fd::RawFd {
        self.app_efd.as_raw_fd()
    }

    /// Announces the application is about to sleep on [`App::event_fd`]; false (do not
    /// sleep) when events are already queued.
    pub fn prepare_sleep(&self) -> bool {
        self.app_evq().prepare_sleep()
    }

    /// Awake again after [`App::prepare_sleep`]: takes the announcement back and empties
    /// the eventfd.
    pub fn woke(&self) {
        self.app_evq().woke();
        drain_eventfd(&self.app_efd);
    }

    /// The segment geometry (slots, FIFO size, event queue length).
    pub fn geometry(&self) -> Geometry {
        self.g
    }
}

fn recv_msg(sock: &OwnedFd, deadline: Instant) -> io::Result<(Msg, Vec<OwnedFd>)> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        wait_readable(sock.as_raw_fd(), Some(left))?;
        match seqpacket::recv(sock)? {
            Recv::None => continue,
            Recv::Closed => return Err(io::ErrorKind::ConnectionReset.into()),
            Recv::Msg { buf, len, fds, .. } => {
                if len != msg::MSG_SIZE {
                    return Err(proto_err("short control message"));
                }
                let m = msg::decode(&buf).ok_or_else(|| proto_err("unknown control message"))?;
                return Ok((m, fds));
            }
        }
    }
}

/// The UDP echo loop of `sluice-udp-echo`: every datagram received on one of `sessions` is
/// sent back to its source, byte for byte (waiting while the tx FIFO is full rather than
/// dropping it). Returns the number echoed when `done(echoed)` says so; `done` is also
/// asked every 100 ms while idle.
pub fn echo(app: &App, sessions: &[Session], done: impl Fn(u64) -> bool) -> io::Result<u64> {
    let mut by_slot: Vec<Option<Session>> = vec![None; app.geometry().n_slots as usize];
    for s in sessions {
        if let Some(x) = by_slot.get_mut(s.slot as usize) {
            *x = Some(*s);
        }
    }
    let mut buf = vec![0u8; MAX_DGRAM];
    let mut echoed = 0u64;
    loop {
        while let Some(slot) = app.next_event() {
            let Some(s) = by_slot.get(slot as usize).copied().flatten() else {
                continue;
            };
            while let Ok((n, from)) = app.recv_from(&s, &mut buf) {
                loop {
                    match app.send_to(&s, &buf[..n], from) {
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                        _ => break,
                    }
                }
                echoed += 1;
            }
        }
        if done(echoed) {
            return Ok(echoed);
        }
        app.wait(Some(Duration::from_millis(100)))?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stands in for Sluice: serves one attach on `l` (the segment `seg_fd`, two eventfds)
    /// and returns the application's control socket.
    fn serve_attach(l: OwnedFd, seg_fd: RawFd, seg_size: u64) -> OwnedFd {
        let deadline = Instant::now() + REPLY_TIMEOUT;
        let sock = loop {
            if let Some(s) = seqpacket::accept(&l).unwrap() {
                break s;
            }
            assert!(Instant::now() < deadline, "no attach");
            std::thread::sleep(Duration::from_millis(1));
        };
        let (m, _) = recv_msg(&sock, deadline).unwrap();
        assert!(matches!(m, Msg::Attach { .. }));
        let r = Msg::AttachReply {
            retval: 0,
            seg_size,
        };
        seqpacket::send(&sock, &msg::encode(&r), Some(seg_fd)).unwrap();
        for which in [0, 1] {
            let efd = shm::eventfd().unwrap();
            let m = msg::encode(&Msg::EventFd { which });
            seqpacket::send(&sock, &m, Some(efd.as_raw_fd())).unwrap();
        }
        sock
    }

    #[test]
    fn close_leaves_the_slot_to_sluice() {
        let g = Geometry {
            n_slots: 2,
            fifo_size: 4096,
            evq_len: 16,
        };
        let seg = Region::create("app-close-test", g.size()).unwrap();
        seg::init_header(&seg, &g);
        let path = format!("@sluice-app-close-test-{}", std::process::id());
        let l = seqpacket::listen(&path).unwrap();
        let seg_fd = seg.raw_fd(); // open until the server thread is joined
        let size = g.size() as u64;
        let server = std::thread::spawn(move || serve_attach(l, seg_fd, size));
        let mut app = App::attach(&path, "t").unwrap();
        let sock = server.join().unwrap();
        let (rx, _) = seg::slot_fifos(&seg, &g, 1).unwrap();
        let s = Session {
            slot: 1,
            local: "10.0.0.1:80".parse().unwrap(),
            remote: None,
        };
        // Sluice served the close before the application's next step and accepted a
        // connection into the freed slot: its first bytes are already there (and ACKed).
        assert_eq!(rx.push_bytes(b"new connection"), 14);
        app.close(s).unwrap();
        let (m, _) = recv_msg(&sock, Instant::now() + REPLY_TIMEOUT).unwrap();
        assert!(matches!(m, Msg::Close { slot: 1, .. }));
        assert_eq!(rx.used(), Some(14), "the new owner's data is left alone");
    }
}
