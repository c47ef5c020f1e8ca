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
use seg::{AppQueues, EvQ, Geometry, PopError};
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
    /// We signal `sluice_efds[t]` when Sluice's thread `t` announced it sleeps.
    sluice_efds: Vec<OwnedFd>,
    /// The app queue [`App::next`] looks at first (round robin).
    next_q: std::cell::Cell<u32>,
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
        let mut app_efd = None;
        let mut sluice_efds: Vec<Option<OwnedFd>> = Vec::new();
        let deadline = Instant::now() + REPLY_TIMEOUT;
        // The segment comes first, then the eventfds: ours (0) and one per session thread
        // (1 + t).
        while seg.is_none() || app_efd.is_none() || sluice_efds.iter().any(|e| e.is_none()) {
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
                    let r = Region::map(fd, seg_size).map_err(|e| proto_err(&e))?;
                    let g = seg::read_header(&r).map_err(|e| proto_err(&e.to_string()))?;
                    sluice_efds.resize_with(g.n_queues as usize, || None);
                    seg = Some((r, g));
                }
                Msg::EventFd { which } => {
                    let fd = fds
                        .pop()
                        .ok_or_else(|| proto_err("eventfd message without fd"))?;
                    match (which as usize).checked_sub(1) {
                        None => app_efd = Some(fd),
                        Some(t) if t < sluice_efds.len() => sluice_efds[t] = Some(fd),
                        Some(_) => return Err(proto_err("eventfd of an unknown thread")),
                    }
                }
                _ => return Err(proto_err("unexpected message while attaching")),
            }
        }
        let (Some((seg, g)), Some(app_efd)) = (seg, app_efd) else {
            return Err(proto_err("incomplete attach"));
        };
        let sluice_efds = sluice_efds.into_iter().flatten().collect();
        Ok(App {
            sock,
            seg,
            g,
            app_efd,
            sluice_efds,
            next_q: std::cell::Cell::new(0),
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
            let q = self.app_queues();
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

    /// Queues a tx event for `slot` (once while one is pending) on its owner thread's
    /// Sluice queue and wakes that thread if it sleeps.
    fn kick(&self, slot: u32, tx: &seg::Fifo<'_>) {
        if tx.set_event() {
            let (q, t) = self.sluice_evq(slot);
            // Never full: at most one event per slot is pending and evq_len >= n_slots.
            if !q.push(slot) {
                tx.unset_event();
            }
            if q.needs_signal() {
                shm::signal(self.sluice_efds[t as usize].as_raw_fd());
            }
        }
    }

    /// The next event: data (or a state change) on a slot, or a connection accepted.
    pub fn next(&self) -> Option<Event> {
        let v = self.pop_event()?;
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
        self.kick(s.slot, &tx);
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

    fn app_queues(&self) -> AppQueues<'_> {
        // The header was validated at attach, so the queues fit the segment.
        AppQueues::new(&self.seg, &self.g).expect("validated segment")
    }

    /// Pops the next app event, round robin over the threads' queues.
    fn pop_event(&self) -> Option<u32> {
        let mut next = self.next_q.get();
        let v = self.app_queues().pop(&mut next);
        self.next_q.set(next);
        v
    }

    /// The Sluice queue of `slot`'s owner thread (read from the slot, written by Sluice
    /// before it handed the slot out; a value past the threads reads as thread 0) and the
    /// thread.
    fn sluice_evq(&self, slot: u32) -> (EvQ<'_>, u32) {
        let t = seg::slot_fifos(&self.seg, &self.g, slot)
            .map(|(rx, _)| rx.owner().load(std::sync::atomic::Ordering::Relaxed))
            .filter(|&t| t < self.g.n_queues)
            .unwrap_or(0);
        // The header was validated at attach, so the queue fits the segment.
        (
            EvQ::sluice(&self.seg, &self.g, t).expect("validated segment"),
            t,
        )
    }

    /// The next session slot with received data (its event is consumed: drain the session
    /// with [`App::recv_from`] until `WouldBlock`).
    pub fn next_event(&self) -> Option<u32> {
        let slot = self.pop_event()?;
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
        let q = self.app_queues();
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
        self.app_queues().prepare_sleep()
    }

    /// Awake again after [`App::prepare_sleep`]: takes the announcement back and empties
    /// the eventfd.
    pub fn woke(&self) {
        self.app_queues().woke();
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

    /// Stands in for Sluice: serves one attach on `l` (the segment `seg_fd`, the app's
    /// eventfd and `n_queues` Sluice ones) and returns the application's control socket
    /// and the eventfds (index `which`).
    fn serve_attach(
        l: OwnedFd,
        seg_fd: RawFd,
        seg_size: u64,
        n_queues: u8,
    ) -> (OwnedFd, Vec<OwnedFd>) {
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
        let mut efds = Vec::new();
        for which in 0..=n_queues {
            let efd = shm::eventfd().unwrap();
            let m = msg::encode(&Msg::EventFd { which });
            // An application that refused the segment may have hung up already.
            let _ = seqpacket::send(&sock, &m, Some(efd.as_raw_fd()));
            efds.push(efd);
        }
        (sock, efds)
    }

    /// A segment of `g` and an application attached to it through `serve_attach`.
    fn attached(name: &str, g: Geometry, version: u32) -> (Region, io::Result<App>, Vec<OwnedFd>) {
        let seg = Region::create(name, g.size()).unwrap();
        seg::write_header(&seg, &g, version);
        let path = format!("@sluice-{name}-{}", std::process::id());
        let l = seqpacket::listen(&path).unwrap();
        let seg_fd = seg.raw_fd(); // open until the server thread is joined
        let size = g.size() as u64;
        let n = g.n_queues as u8;
        let server = std::thread::spawn(move || serve_attach(l, seg_fd, size, n));
        let app = App::attach(&path, "t");
        let (_sock, efds) = server.join().unwrap();
        (seg, app, efds)
    }

    const G2: Geometry = Geometry {
        n_slots: 4,
        fifo_size: 4096,
        evq_len: 16,
        n_queues: 2,
    };

    #[test]
    fn a_segment_of_another_layout_version_is_refused_at_attach() {
        let (_seg, app, _) = attached("app-v1-test", G2, 1);
        let e = app.err().expect("refused");
        assert!(e.to_string().contains("layout version 1"), "{e}");
    }

    #[test]
    fn events_of_every_thread_arrive_and_writes_go_to_the_owner() {
        let (seg, app, efds) = attached("app-queues-test", G2, seg::VERSION);
        let app = app.unwrap();
        let (rx, tx) = seg::slot_fifos(&seg, &G2, 3).unwrap();
        rx.owner().store(1, std::sync::atomic::Ordering::Relaxed);
        // Thread 1's data event (it alone keeps the application up), then thread 0's
        // accept: both seen, round robin.
        assert!(EvQ::app(&seg, &G2, 1).unwrap().push(3));
        assert!(!app.prepare_sleep(), "queue 1 is not empty");
        assert!(EvQ::app(&seg, &G2, 0).unwrap().push(seg::EVENT_ACCEPT | 2));
        let mut got = vec![app.next(), app.next()];
        got.sort_by_key(|e| format!("{e:?}"));
        assert_eq!(got, [Some(Event::Accept(2)), Some(Event::Data(3))]);
        assert_eq!(app.next(), None);
        // A write to slot 3 (thread 1's) goes to Sluice queue 1 and signals its eventfd
        // when thread 1 sleeps.
        let q1 = EvQ::sluice(&seg, &G2, 1).unwrap();
        assert!(q1.prepare_sleep());
        let s = Session {
            slot: 3,
            local: "10.0.0.1:80".parse().unwrap(),
            remote: Some("10.0.0.2:9".parse().unwrap()),
        };
        assert_eq!(app.write(&s, b"abc").unwrap(), 3);
        assert_eq!(tx.used(), Some(3));
        assert_eq!(q1.pop(), Some(3));
        assert!(EvQ::sluice(&seg, &G2, 0).unwrap().is_empty());
        assert!(wait_readable(efds[2].as_raw_fd(), Some(Duration::ZERO)).unwrap());
        assert!(!wait_readable(efds[1].as_raw_fd(), Some(Duration::ZERO)).unwrap());
    }

    #[test]
    fn close_leaves_the_slot_to_sluice() {
        let g = Geometry {
            n_slots: 2,
            fifo_size: 4096,
            evq_len: 16,
            n_queues: 1,
        };
        let seg = Region::create("app-close-test", g.size()).unwrap();
        seg::init_header(&seg, &g);
        let path = format!("@sluice-app-close-test-{}", std::process::id());
        let l = seqpacket::listen(&path).unwrap();
        let seg_fd = seg.raw_fd(); // open until the server thread is joined
        let size = g.size() as u64;
        let server = std::thread::spawn(move || serve_attach(l, seg_fd, size, 1));
        let mut app = App::attach(&path, "t").unwrap();
        let (sock, _efds) = server.join().unwrap();
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
