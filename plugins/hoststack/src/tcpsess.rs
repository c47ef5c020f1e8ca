//! TCP in the session layer: listeners, active opens, segments in (from `tcp4-input`),
//! timers and close, on top of the per-connection state machine in [`crate::tcp`].
//!
//! A passive open lives without an application slot while in the handshake (a SYN flood
//! fills the listener's bounded backlog, counted, not the application's segment; past it
//! SYNs are answered with SYN cookies, RFC 4987, and keep no state until the handshake's
//! ACK returns a valid cookie); when the
//! handshake completes it takes a free slot and the application gets an accept event
//! (`seg::EVENT_ACCEPT | slot`) with both endpoints in the slot's rx FIFO header. A slot is
//! released when the application has closed it and the connection has ended (or reached
//! TIME-WAIT, which needs no FIFOs).

use crate::session::{
    Proto, SessStats, Session, SessionError, SessionMain, TcpLink, NO_SLOT, PENDING,
};
use crate::tcp::{self, Effect, Seg, State, Tcb, TcpFlags};
use sluice_session::seg::{self, tcp_state};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// A TCP connect thread 0 prepared for the thread that will own the connection
/// ([`SessionMain::tcp_connect_begin`], [`SessionMain::tcp_open`]): the application (and
/// which attach), the slot it took (and its generation: the owner fills only that slot,
/// still pending) and the 4-tuple, whose port thread 0 referenced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connect {
    /// The application.
    pub app: u32,
    /// Its attach ([`crate::session::AppConn::serial`]).
    pub serial: u64,
    /// The slot taken for it.
    pub slot: u32,
    /// The slot's generation.
    pub gen: u32,
    /// Local address and port.
    pub local: SocketAddr,
    /// The peer.
    pub remote: SocketAddr,
}

/// Why `tcp4-input` drops a segment (its counter).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TcpDrop {
    /// No connection or listener (answered with a RST unless it was one).
    NoListener,
    /// The listener's handshake backlog is full.
    BacklogFull,
}

/// MSS values a SYN cookie can encode (3 bits; Linux's table with the IPv6 ones).
const COOKIE_MSS: [u16; 8] = [536, 1200, 1220, 1380, 1400, 1440, 1448, 1460];

fn unspecified(v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
    } else {
        IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)
    }
}

impl SessionMain {
    fn tcp_port_used(&self, v6: bool, p: u16) -> bool {
        self.tcp_ports.contains_key(&(v6, p))
    }

    fn tcp_port_ref(&mut self, v6: bool, p: u16, add: bool) {
        if add {
            *self.tcp_ports.entry((v6, p)).or_insert(0) += 1;
        } else if let Some(r) = self.tcp_ports.get_mut(&(v6, p)) {
            *r -= 1;
            if *r == 0 {
                self.tcp_ports.remove(&(v6, p));
            }
        }
    }

    /// What our SYNs offer (the family's MSS, the shift that advertises a whole FIFO,
    /// SACK) and the configured ACK and keepalive timing.
    fn tcp_local(&self, v6: bool) -> tcp::Local {
        tcp::Local {
            mss: if v6 { tcp::MSS6 } else { tcp::MSS4 },
            wscale: tcp::wscale_for(self.params.cfg.fifo_size),
            sack: true,
            delack: self.params.cfg.delayed_ack,
            keepalive: self.params.cfg.keepalive,
            tso: self.params.cfg.tso,
        }
    }

    /// The SYN cookie (RFC 4987) for a SYN from `remote` with sequence `irs`, in the
    /// 64-second period `t`, for the MSS table entry `mi`: the period's low 5 bits, `mi`,
    /// and 24 bits of a keyed hash of the 4-tuple, `irs` and `t`.
    fn cookie(&mut self, local: SocketAddr, remote: SocketAddr, irs: u32, t: u32, mi: u32) -> u32 {
        let h = self.keyed_hash((local, remote, irs, t, mi)) as u32;
        ((t & 0x1f) << 27) | ((mi & 7) << 24) | (h & 0xff_ffff)
    }

    /// The current cookie period (64 s).
    fn cookie_period() -> u32 {
        (Self::clock_us() / 64_000_000) as u32
    }

    /// Answers a SYN past a full backlog with a cookie SYN-ACK: no state is kept, and
    /// the SYN-ACK offers only the MSS (window scaling, timestamps and SACK need state).
    fn syn_cookie(&mut self, local: SocketAddr, remote: SocketAddr, seg: &Seg<'_>) {
        let peer_mss = seg.mss.unwrap_or(536);
        let mine = self.tcp_local(local.is_ipv6()).mss;
        let mi = COOKIE_MSS
            .iter()
            .rposition(|&m| m <= peer_mss.min(mine))
            .unwrap_or(0) as u32;
        let iss = self.cookie(local, remote, seg.seq, Self::cookie_period(), mi);
        let wnd = self.params.cfg.fifo_size.min(65535) as u16;
        let mut o = tcp::Out::bare(
            iss,
            seg.seq.wrapping_add(1),
            TcpFlags::SYN | TcpFlags::ACK,
            wnd,
        );
        o.mss = Some(mine);
        self.ctl_push(local, remote, o);
        self.owner_worker(local, remote).tcp_stats.syn_cookies_sent += 1;
    }

    /// The MSS a valid cookie in the handshake's ACK `seg` encodes (this or the last period).
    fn cookie_check(
        &mut self,
        local: SocketAddr,
        remote: SocketAddr,
        seg: &Seg<'_>,
    ) -> Option<u16> {
        let c = seg.ack.wrapping_sub(1);
        let irs = seg.seq.wrapping_sub(1);
        let mi = (c >> 24) & 7;
        let now = Self::cookie_period();
        [now, now.wrapping_sub(1)]
            .into_iter()
            .find(|&t| (t & 0x1f) == c >> 27 && self.cookie(local, remote, irs, t, mi) == c)
            .map(|_| COOKIE_MSS[mi as usize])
    }

    /// Whether listener `lsid` sent SYN cookies that are still valid (this or the last
    /// period, as [`SessionMain::cookie_check`] accepts).
    fn cookies_recent(&self, lsid: u32) -> bool {
        let at = self.acc().listens.get(&lsid).and_then(|l| l.cookies_at);
        at.is_some_and(|t| Self::cookie_period().wrapping_sub(t) <= 1)
    }

    /// A hash of `x` keyed with the host's secret (ISNs, SYN cookies).
    fn keyed_hash(&self, x: impl std::hash::Hash) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (self.iss_key(), x).hash(&mut h);
        h.finish()
    }

    /// Microseconds since the epoch (the clocks of ISNs and SYN cookies).
    fn clock_us() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0)
    }

    fn iss(&mut self, local: SocketAddr, remote: SocketAddr) -> u32 {
        // RFC 6528: a keyed hash of the 4-tuple plus a 4 µs clock.
        (self.keyed_hash((local, remote)) as u32).wrapping_add((Self::clock_us() / 4) as u32)
    }

    /// Listens for TCP connections for application `a`.
    pub fn tcp_listen(
        &mut self,
        a: u32,
        mut local: SocketAddr,
        backlog: u32,
        locals: &[(IpAddr, u8)],
    ) -> Result<u32, SessionError> {
        let v6 = local.is_ipv6();
        if !local.ip().is_unspecified() && !locals.iter().any(|(x, _)| *x == local.ip()) {
            return Err(SessionError::NotLocal);
        }
        if local.port() == 0 {
            let p = self
                .ephemeral_in(v6, |s, v6, p| s.tcp_port_used(v6, p))
                .ok_or(SessionError::NoSpace)?;
            local.set_port(p);
        }
        if crate::session::clashes(self.acc().by_addr.keys(), local) {
            return Err(SessionError::InUse);
        }
        let sid = self.new_session(0, a, local, None)?;
        let backlog = match backlog {
            0 => self.params.cfg.syn_backlog,
            b => b.min(65536),
        };
        let mut slot = NO_SLOT;
        if let Some(s) = self.sess_mut(sid) {
            s.proto = Proto::TcpListen;
            slot = s.slot;
        }
        if let Some(app) = self.apps[a as usize].as_mut() {
            app.set_tcp(slot);
        }
        let mut acc = self.acc();
        acc.by_addr.insert((local.ip(), local.port()), sid);
        let l = crate::session::Listen {
            app: a,
            slot,
            backlog,
            half_open: 0,
            cookies_at: None,
        };
        acc.listens.insert(sid, l);
        drop(acc);
        self.tcp_port_ref(v6, local.port(), true);
        self.worker_of(sid).tcp_count += 1;
        Ok(sid)
    }

    /// Opens a TCP connection for application `a` to `remote` (the reply carries the slot;
    /// its state word tells when it is established or refused): [`Self::tcp_connect_begin`]
    /// and [`Self::tcp_open`] on the owner at once (thread 0's connections; and tests).
    pub fn tcp_connect(
        &mut self,
        a: u32,
        remote: SocketAddr,
        locals: &[(IpAddr, u8)],
    ) -> Result<u32, SessionError> {
        let (t, c) = self.tcp_connect_begin(a, remote, locals)?;
        self.tcp_open(t, &c)
    }

    /// Thread 0's part of a TCP connect (the shared part: the port, the application's
    /// slot): picks the thread the connection will live on and a port whose 4-tuple that
    /// thread owns, takes the port and a slot (marked [`PENDING`], its owner word, TCP flag
    /// and endpoints set before the application can learn of it). Returns the owner and
    /// what it needs to open the connection ([`Self::tcp_open`], forwarded as
    /// [`CtlReq::Connect`](crate::session::CtlReq::Connect) when the owner is a worker).
    pub(crate) fn tcp_connect_begin(
        &mut self,
        a: u32,
        remote: SocketAddr,
        locals: &[(IpAddr, u8)],
    ) -> Result<(usize, Connect), SessionError> {
        if remote.ip().is_unspecified() || remote.port() == 0 || remote.ip().is_multicast() {
            return Err(SessionError::Invalid);
        }
        let v6 = remote.is_ipv6();
        let src = crate::session::source_for(locals, remote.ip()).ok_or(SessionError::NotLocal)?;
        // The thread the connection lives on, and a port whose reply that thread owns (the
        // first free port otherwise: its owner is then the thread). Near port exhaustion
        // (no free port the thread owns) this scans the ephemeral range twice under the
        // session lock: at most 2 x 16384 cheap lookups, once per failing connect.
        let n = self.n_threads();
        let want = self.next_active_thread();
        let port = self
            .ephemeral_in(v6, |s, v6, p| {
                s.tcp_port_used(v6, p)
                    || crate::session::flow_owner(SocketAddr::new(src, p), remote, n) != want
            })
            .or_else(|| self.ephemeral_in(v6, |s, v6, p| s.tcp_port_used(v6, p)))
            .ok_or(SessionError::NoSpace)?;
        let local = SocketAddr::new(src, port);
        let owner = crate::session::flow_owner(local, remote, n);
        let slot = self.take_slot(a)?;
        let serial = self.apps[a as usize].as_ref().map_or(0, |x| x.serial);
        let mut gen = 0;
        if let Some(app) = self.apps[a as usize].as_ref() {
            gen = app.slot_gen(slot);
            app.set_owner(slot, owner);
            app.set_tcp(slot);
            if let Some((rx, _)) = app.fifos(slot) {
                rx.set_endpoints(local, remote, NO_SLOT);
            }
        }
        self.tcp_port_ref(v6, port, true);
        self.tcp_pending += 1;
        let c = Connect {
            app: a,
            serial,
            slot,
            gen,
            local,
            remote,
        };
        Ok((owner, c))
    }

    /// The owner's part of a TCP connect (thread `th`, which owns its 4-tuple): files the
    /// connection in its table, fills the slot and queues the SYN. An application gone
    /// meanwhile (`NoSession`), a full table (`NoSpace`), a slot no longer pending or a
    /// thread that no longer owns the 4-tuple (`NoSession`, logged) gives the port and the
    /// slot back.
    pub(crate) fn tcp_open(&mut self, th: usize, c: &Connect) -> Result<u32, SessionError> {
        let (local, remote, v6) = (c.local, c.remote, c.local.is_ipv6());
        self.tcp_pending = self.tcp_pending.saturating_sub(1);
        let alive = self.app_of(c.app, c.serial).is_some_and(|x| !x.dead);
        let pending = self.slot_holds(c.app, c.serial, c.slot, c.gen, PENDING);
        let ours = crate::session::flow_owner(local, remote, self.n_threads()) == th;
        // The number of threads changed since `tcp_connect_begin` (a table made meanwhile):
        // refused as stale below, the port and the slot given back.
        if !ours {
            log::warn!("session: connect {local} -> {remote} reached thread {th}, not its owner");
        }
        let mut r = Err(SessionError::NoSession);
        if alive && pending && ours {
            let iss = self.iss(local, remote);
            let tcb = Tcb::connect(iss, self.tcp_local(v6), Instant::now());
            let s = Session {
                app: c.app,
                slot: c.slot,
                local,
                remote: Some(remote),
                stats: SessStats::default(),
                proto: Proto::Tcp(
                    Box::new(tcb),
                    TcpLink {
                        port_ref: true,
                        ..TcpLink::default()
                    },
                ),
            };
            r = self.alloc_sess(th, s).ok_or(SessionError::NoSpace);
        }
        // The slot filled by a compare-and-swap from `PENDING` (`Slots::set`): a slot
        // no longer pending since the check above is left to whoever holds it now.
        let mut free = pending;
        if let Ok(sid) = r {
            if !self.fill_slot(c.app, c.slot, sid) {
                self.take_sess(sid);
                self.free_sess(sid);
                free = false;
                r = Err(SessionError::NoSession);
            }
        }
        let sid = match r {
            Ok(sid) => sid,
            Err(e) => {
                if free {
                    if let Some(app) = self.apps[c.app as usize].as_ref() {
                        app.slots.free_if(c.slot, PENDING);
                    }
                }
                self.tcp_port_ref(v6, local.port(), false);
                return Err(e);
            }
        };
        let w = &mut self.workers[th];
        w.tcp_conns.insert((local, remote), sid);
        w.tcp_count += 1;
        w.tcp_stats.connected += 1;
        // Before protocol 6 is registered on every thread (the first TCP session, or a
        // listen or connect earlier in this control poll) the SYN waits: `tcp_queue` does
        // not kick, and `set_tcp_applied` kicks the owner once it is registered.
        self.tcp_queue(sid);
        Ok(sid)
    }

    /// Queues connection `sid` for `session-queue` to send what it has.
    pub fn tcp_queue(&mut self, sid: u32) {
        if let Some(Proto::Tcp(_, l)) = self.sess_mut(sid).map(|s| &mut s.proto) {
            if !l.queued {
                l.queued = true;
                self.worker_of(sid).tcp_out.push(sid);
                if self.tcp_applied {
                    self.kick_worker(crate::session::handle_thread(sid));
                }
            }
        }
    }

    fn rst(&mut self, local: SocketAddr, remote: SocketAddr, seq: u32, ack: u32, flags: TcpFlags) {
        self.ctl_push(local, remote, tcp::Out::bare(seq, ack, flags, 0));
    }

    /// Queues a segment no connection sends on the thread that owns its flow.
    fn ctl_push(&mut self, local: SocketAddr, remote: SocketAddr, o: tcp::Out) {
        let t = crate::session::flow_owner(local, remote, self.n_threads());
        self.workers[t].ctl_out.push((local, remote, o));
        self.kick_worker(t);
    }

    /// The application closed `sid`: a listener stops, a connection sends FIN after its data
    /// (one still in the handshake is reset).
    pub fn tcp_close(&mut self, sid: u32) {
        let Some(s) = self.sess_mut(sid) else {
            return;
        };
        match &mut s.proto {
            Proto::TcpListen => self.tcp_release(sid),
            Proto::Tcp(t, l) => {
                l.app_closed = true;
                match t.state {
                    State::Closed => self.tcp_release(sid),
                    State::SynSent | State::SynRcvd => self.tcp_abort(sid),
                    _ => {
                        t.app_closed = true;
                        self.tcp_queue(sid);
                    }
                }
            }
            Proto::Udp => {}
        }
    }

    /// Half-close (`shutdown(SHUT_WR)`): the FIN goes after the queued data, the
    /// connection keeps receiving and the application keeps its slot until it closes. A
    /// UDP session is left as it is; a connection not yet established (or a listener)
    /// is `NotConnected`.
    pub fn tcp_shutdown(&mut self, sid: u32) -> Result<(), SessionError> {
        let s = self.sess_mut(sid).ok_or(SessionError::NoSession)?;
        match &mut s.proto {
            Proto::Udp => Ok(()),
            Proto::TcpListen => Err(SessionError::NotConnected),
            Proto::Tcp(t, _) => match t.state {
                State::Established | State::CloseWait => {
                    t.app_closed = true;
                    self.tcp_queue(sid);
                    Ok(())
                }
                // Shut already (FIN queued or sent): nothing more to do.
                State::FinWait1
                | State::FinWait2
                | State::Closing
                | State::LastAck
                | State::TimeWait
                | State::Closed => Ok(()),
                _ => Err(SessionError::NotConnected),
            },
        }
    }

    /// Abortive close: a RST to the peer of a live connection, everything freed.
    pub fn tcp_abort(&mut self, sid: u32) {
        let Some(s) = self.sess(sid) else {
            return;
        };
        if let (Proto::Tcp(t, _), Some(r)) = (&s.proto, s.remote) {
            if !matches!(t.state, State::Closed | State::TimeWait | State::SynSent) {
                let (seq, ack) = t.rst_seq();
                let local = s.local;
                self.rst(local, r, seq, ack, TcpFlags::RST | TcpFlags::ACK);
            }
        }
        self.tcp_release(sid);
    }

    /// Frees session `sid` (listener or connection) and everything it holds.
    fn tcp_release(&mut self, sid: u32) {
        let Some(s) = self.take_sess(sid) else {
            return;
        };
        let v6 = s.local.is_ipv6();
        match s.proto {
            Proto::TcpListen => {
                let mut acc = self.acc();
                acc.by_addr.remove(&(s.local.ip(), s.local.port()));
                acc.listens.remove(&sid);
                drop(acc);
                self.tcp_port_ref(v6, s.local.port(), false);
                // Its connections still in the handshake go with it.
                let kids: Vec<u32> = self
                    .iter()
                    .filter(|(_, x)| matches!(&x.proto, Proto::Tcp(_, l) if l.parent == Some(sid)))
                    .map(|(i, _)| i)
                    .collect();
                for k in kids {
                    self.tcp_abort(k);
                }
            }
            Proto::Tcp(_, l) => {
                if let Some(t) = l.timer {
                    self.worker_of(sid).tcp_timer_set.remove(&(t, sid));
                }
                if let Some(r) = s.remote {
                    let w = self.worker_of(sid);
                    if w.tcp_conns.get(&(s.local, r)) == Some(&sid) {
                        w.tcp_conns.remove(&(s.local, r));
                    }
                }
                if l.port_ref {
                    self.tcp_port_ref(v6, s.local.port(), false);
                }
                if let Some(p) = l.parent {
                    self.half_open_done(p);
                }
            }
            Proto::Udp => {}
        }
        self.release_slot(s.app, s.slot, sid);
        let w = self.worker_of(sid);
        w.tcp_count = w.tcp_count.saturating_sub(1);
        self.free_sess(sid);
        // The last lingering connection of an application that is gone (its session
        // counts, not a scan of every table).
        let gone = self
            .apps
            .get(s.app as usize)
            .and_then(|x| x.as_ref())
            .is_some_and(|x| x.dead && x.sessions() == 0);
        if gone {
            self.reap_app(s.app);
        }
    }

    fn release_slot(&mut self, app: u32, slot: u32, sid: u32) {
        if slot == NO_SLOT {
            return;
        }
        let freed = self
            .apps
            .get(app as usize)
            .and_then(|x| x.as_ref())
            .is_some_and(|a| a.slots.free_if(slot, sid));
        if freed {
            self.drop_retries(app, slot);
        }
    }

    /// Runs connection `sid`'s state machine on a segment, with its FIFOs when it has a slot
    /// (`again`: the same segment a second time, not counted again).
    fn tcp_conn_input(
        &mut self,
        sid: u32,
        seg: &Seg<'_>,
        now: Instant,
        again: bool,
    ) -> Result<Effect, TcpDrop> {
        let apps = &self.apps;
        let Some(s) = self
            .workers
            .get_mut(crate::session::handle_thread(sid))
            .and_then(|w| w.sessions.get_mut(crate::session::handle_index(sid)))
            .and_then(|x| x.as_mut())
        else {
            return Err(TcpDrop::NoListener);
        };
        let fifos = apps
            .get(s.app as usize)
            .and_then(|a| a.as_ref())
            .and_then(|a| a.fifos(s.slot));
        let Proto::Tcp(t, _) = &mut s.proto else {
            return Err(TcpDrop::NoListener);
        };
        let (rx, tx) = match &fifos {
            Some((r, t)) => (Some(r), Some(t)),
            None => (None, None),
        };
        if !again {
            s.stats.rx += 1;
            s.stats.rx_bytes += seg.data.len() as u64;
        }
        Ok(t.input(seg, rx, tx, now))
    }

    /// A segment from `remote` to `local` (checked by `tcp4-input`).
    pub fn tcp_input(
        &mut self,
        local: SocketAddr,
        remote: SocketAddr,
        seg: &Seg<'_>,
        now: Instant,
    ) -> Result<(), TcpDrop> {
        let has = |f: TcpFlags| seg.flags.intersects(f);
        let conn = self
            .owner_worker(local, remote)
            .tcp_conns
            .get(&(local, remote));
        if let Some(&sid) = conn {
            // New data for a connection whose application is gone: nobody will read it
            // (RFC 9293 3.10.7.4, as Linux does for an orphaned socket).
            if let Some(crate::session::Session {
                proto: Proto::Tcp(t, _),
                ..
            }) = self.sess(sid)
            {
                if t.orphan && t.takes_new_data(seg) {
                    self.tcp_abort(sid);
                    return Ok(());
                }
            }
            let eff = self.tcp_conn_input(sid, seg, now, false)?;
            self.tcp_effect(sid, eff);
            let has_slot = || self.sess(sid).is_some_and(|x| x.slot != NO_SLOT);
            if eff.replay && eff.accepted && has_slot() {
                // Data on the handshake's final ACK: the connection has its slot now.
                let eff = self.tcp_conn_input(sid, seg, now, true)?;
                self.tcp_effect(sid, eff);
            }
            return Ok(());
        }
        let lsid = {
            let acc = self.acc();
            acc.by_addr
                .get(&(local.ip(), local.port()))
                .or_else(|| {
                    acc.by_addr
                        .get(&(unspecified(local.is_ipv6()), local.port()))
                })
                .copied()
        };
        let Some(lsid) = lsid else {
            if !has(TcpFlags::RST) {
                let (seq, ack, f) = Tcb::rst_for(seg);
                self.rst(local, remote, seq, ack, f);
            }
            return Err(TcpDrop::NoListener);
        };
        if has(TcpFlags::RST) {
            return Ok(());
        }
        if has(TcpFlags::ACK) {
            // Only a listener that sent cookies lately (as Linux's
            // tcp_synq_no_recent_overflow): no hashing, and no blind open by a guessed
            // cookie, for the others.
            if !has(TcpFlags::SYN) && self.params.cfg.syn_cookies && self.cookies_recent(lsid) {
                if let Some(mss) = self.cookie_check(local, remote, seg) {
                    return self.tcp_cookie_open(lsid, local, remote, seg, mss, now);
                }
                self.owner_worker(local, remote).tcp_stats.syn_cookies_bad += 1;
            }
            let (seq, ack, f) = Tcb::rst_for(seg);
            self.rst(local, remote, seq, ack, f);
            return Ok(());
        }
        if !has(TcpFlags::SYN) {
            return Ok(());
        }
        let cookies = self.params.cfg.syn_cookies;
        // The backlog place is taken in the accept part (one lock section): `Ok(app)`, or
        // `Err(true)` when full with SYN cookies on.
        let took = match self.acc().listens.get_mut(&lsid) {
            Some(l) if l.half_open >= l.backlog => {
                if cookies {
                    l.cookies_at = Some(Self::cookie_period());
                }
                Err(cookies)
            }
            Some(l) => {
                l.half_open += 1;
                Ok(l.app)
            }
            None => return Err(TcpDrop::NoListener),
        };
        let app = match took {
            Ok(app) => app,
            Err(true) => {
                self.syn_cookie(local, remote, seg);
                return Ok(());
            }
            Err(false) => {
                self.owner_worker(local, remote).tcp_stats.backlog_full += 1;
                return Err(TcpDrop::BacklogFull);
            }
        };
        let iss = self.iss(local, remote);
        let tcb = Tcb::accept(iss, seg, self.tcp_local(local.is_ipv6()), now);
        if !self.tcp_new_conn(app, lsid, local, remote, tcb) {
            // Not filed: the SYN is dropped (counted), as if lost; the backlog place freed.
            self.half_open_done(lsid);
        }
        Ok(())
    }

    /// The handshake's ACK returned a valid SYN cookie: the connection is made as if its
    /// SYN had been kept (with the MSS the cookie encodes, no other option) and the ACK
    /// completes it.
    fn tcp_cookie_open(
        &mut self,
        lsid: u32,
        local: SocketAddr,
        remote: SocketAddr,
        seg: &Seg<'_>,
        mss: u16,
        now: Instant,
    ) -> Result<(), TcpDrop> {
        let app = match self.acc().listens.get_mut(&lsid) {
            Some(l) => {
                l.half_open += 1; // given back when the application takes it
                l.app
            }
            None => return Err(TcpDrop::NoListener),
        };
        let syn = Seg {
            seq: seg.seq.wrapping_sub(1),
            ack: 0,
            flags: TcpFlags::SYN,
            wnd: seg.wnd,
            mss: Some(mss),
            wscale: None,
            ts: None,
            sack_ok: false,
            sack: &[],
            data: &[],
        };
        let wnd = self.params.cfg.fifo_size.min(65535);
        let tcb = Tcb::from_cookie(
            seg.ack.wrapping_sub(1),
            &syn,
            self.tcp_local(local.is_ipv6()),
            wnd,
            now,
        );
        if !self.tcp_new_conn(app, lsid, local, remote, tcb) {
            return Ok(());
        }
        self.owner_worker(local, remote).tcp_stats.syn_cookies_ok += 1;
        // The ACK (and any data on it) now finds its connection.
        self.tcp_input(local, remote, seg, now)
    }

    /// A connection of listener `lsid` left the handshake (accepted, freed, or not filed):
    /// its backlog place is given back. The listener's slot, None when it is gone.
    fn half_open_done(&self, lsid: u32) -> Option<u32> {
        self.acc().listens.get_mut(&lsid).map(|l| {
            l.half_open = l.half_open.saturating_sub(1);
            l.slot
        })
    }

    /// Files a passive open under `local`/`remote` (in the handshake, no slot yet) and
    /// queues its first output; false (counted in `table_full`) when the owning thread's
    /// table is full.
    fn tcp_new_conn(
        &mut self,
        app: u32,
        lsid: u32,
        local: SocketAddr,
        remote: SocketAddr,
        tcb: Tcb,
    ) -> bool {
        let s = crate::session::Session {
            app,
            slot: NO_SLOT,
            local,
            remote: Some(remote),
            stats: Default::default(),
            proto: Proto::Tcp(
                Box::new(tcb),
                TcpLink {
                    parent: Some(lsid),
                    ..TcpLink::default()
                },
            ),
        };
        let owner = crate::session::flow_owner(local, remote, self.n_threads());
        let Some(sid) = self.alloc_sess(owner, s) else {
            self.workers[owner].tcp_stats.table_full += 1;
            return false;
        };
        let w = &mut self.workers[owner];
        w.tcp_conns.insert((local, remote), sid);
        w.tcp_count += 1;
        self.tcp_queue(sid);
        true
    }

    /// Acts on what a segment or timer did to connection `sid`.
    pub fn tcp_effect(&mut self, sid: u32, e: Effect) {
        let Some(s) = self.sess(sid) else {
            return;
        };
        let (local, remote) = (s.local, s.remote.unwrap_or(s.local));
        let (app, slot) = (s.app, s.slot);
        if let Some((seq, ack, f)) = e.rst {
            self.rst(local, remote, seq, ack, f);
        }
        if e.accepted && !self.tcp_accept(sid) {
            return;
        }
        let st = &mut self.worker_of(sid).tcp_stats;
        if e.reset {
            st.resets += 1;
        }
        if e.keepalive_dead {
            st.keepalive_timeouts += 1;
        }
        if e.time_wait_rst {
            st.time_wait_rst += 1;
        }
        if e.notify || e.accepted {
            self.tcp_notify(sid, e.reset);
        } else if e.tx_space {
            // Acknowledged data freed tx FIFO space: a writer that found it full hears.
            self.notify_tx_space(app, slot);
        }
        if e.output {
            self.tcp_queue(sid);
        }
        self.tcp_settle(sid, e.free);
        self.tcp_rearm(sid);
    }

    /// Frees what a connection no longer needs: everything once it is closed and the
    /// application let go of it, the slot once it is in TIME-WAIT.
    fn tcp_settle(&mut self, sid: u32, closed: bool) {
        let Some(s) = self.sess_mut(sid) else {
            return;
        };
        let (app, slot, local, remote) = (s.app, s.slot, s.local, s.remote);
        let Proto::Tcp(t, l) = &mut s.proto else {
            return;
        };
        if closed {
            t.state = State::Closed;
            t.rto_at = None;
            t.tw_at = None;
            if l.app_closed || slot == NO_SLOT {
                self.tcp_release(sid);
            } else if let Some(r) = remote {
                // The application still holds the slot: it reads the end; new segments
                // for this 4-tuple get a RST.
                let w = self.worker_of(sid);
                if w.tcp_conns.get(&(local, r)) == Some(&sid) {
                    w.tcp_conns.remove(&(local, r));
                }
            }
            return;
        }
        if t.state == State::TimeWait && l.app_closed && slot != NO_SLOT {
            s.slot = NO_SLOT;
            self.release_slot(app, slot, sid);
        }
    }

    /// A passive open completed: give it a slot of the listener's application and tell it.
    fn tcp_accept(&mut self, sid: u32) -> bool {
        let Some(s) = self.sess_mut(sid) else {
            return false;
        };
        let (app, local, remote) = (s.app, s.local, s.remote.unwrap_or(s.local));
        let parent = match &mut s.proto {
            Proto::Tcp(_, l) => l.parent.take(),
            _ => None,
        };
        let lslot = parent.and_then(|p| self.half_open_done(p));
        // Taken by a compare-and-swap (`Slots::take`) as `PENDING`: no other thread's
        // bind, connect or accept can have it, whatever lock it holds, and no reader takes
        // it for this session before it is set up.
        let slot = lslot.and_then(|_| {
            self.apps
                .get(app as usize)
                .and_then(|a| a.as_ref())
                .and_then(|a| a.slots.take(PENDING))
        });
        let (Some(slot), Some(lslot)) = (slot, lslot) else {
            self.worker_of(sid).tcp_stats.no_slot += 1;
            self.tcp_abort(sid);
            return false;
        };
        // Everything below needs only `&AppConn` (atomics), no table of thread 0's.
        let Some(a) = self.apps[app as usize].as_ref() else {
            return false;
        };
        a.reset_slot(slot);
        a.set_owner(slot, crate::session::handle_thread(sid));
        a.set_tcp(slot);
        if let Some((rx, _)) = a.fifos(slot) {
            rx.state().store(tcp_state::ESTABLISHED, Ordering::Release);
            rx.set_endpoints(local, remote, lslot);
        }
        // The slot word last (Release, `Slots::set`): a reader that sees `sid` in it sees
        // the owner, generation, TCP flag and endpoints above. False only when a stale
        // request freed the `PENDING` (docs/hoststack.md, *Session 17*): no slot then.
        if !a.slots.set(slot, sid) {
            self.worker_of(sid).tcp_stats.no_slot += 1;
            self.tcp_abort(sid);
            return false;
        }
        if let Some(s) = self.sess_mut(sid) {
            s.slot = slot;
        }
        let Some(a) = self.apps[app as usize].as_ref() else {
            return false;
        };
        let refused = a
            .fifos(slot)
            .is_some_and(|(rx, _)| !a.notify(&rx, seg::EVENT_ACCEPT | slot));
        if refused {
            self.refused(app, slot, seg::EVENT_ACCEPT | slot);
        }
        self.worker_of(sid).tcp_stats.accepted += 1;
        true
    }

    /// Updates the slot's state word and queues a data event for the application.
    fn tcp_notify(&mut self, sid: u32, reset: bool) {
        let Some(s) = self.sess(sid) else {
            return;
        };
        let Proto::Tcp(t, l) = &s.proto else { return };
        let closed = l.app_closed;
        let Some(a) = self.apps.get(s.app as usize).and_then(|x| x.as_ref()) else {
            return;
        };
        let Some((rx, _)) = a.fifos(s.slot) else {
            return;
        };
        let mut st = 0;
        if reset {
            st |= tcp_state::RESET;
        } else if !matches!(t.state, State::SynSent | State::SynRcvd) {
            st |= tcp_state::ESTABLISHED;
        }
        if t.peer_fin {
            st |= tcp_state::PEER_FIN;
        }
        rx.state().store(st, Ordering::Release);
        if closed {
            return; // the application only watches the state word now
        }
        let mut requeue = false;
        // After the peer's FIN no window update goes (`Tcb::window_update_due`): no request.
        if !t.peer_fin && rx.free_bytes() < rx.size() / 2 {
            rx.wnd_request().store(1, Ordering::SeqCst);
            // Drained meanwhile (the application did not see the request): send the
            // window update ourselves.
            if rx.free_bytes() >= rx.size() / 2 {
                rx.wnd_request().store(0, Ordering::Relaxed);
                requeue = true;
            }
        }
        if !a.notify(&rx, s.slot) {
            self.refused(s.app, s.slot, s.slot);
        }
        if requeue {
            self.tcp_queue(sid);
        }
    }

    /// Runs thread `thread`'s due timers; returns its next deadline.
    pub fn tcp_timers(&mut self, thread: usize, now: Instant) -> Option<Instant> {
        let mut due = std::mem::take(&mut self.workers[thread].tcp_due);
        while let Some(&(when, sid)) = self.workers[thread].tcp_timer_set.first() {
            if when > now {
                break;
            }
            self.workers[thread].tcp_timer_set.pop_first();
            if let Some(Proto::Tcp(_, l)) = self.sess_mut(sid).map(|s| &mut s.proto) {
                l.timer = None;
                due.push(sid);
            }
        }
        for &sid in &due {
            let e = match self.sess_mut(sid).map(|s| &mut s.proto) {
                Some(Proto::Tcp(t, _)) => t.timer(now),
                _ => continue,
            };
            self.tcp_effect(sid, e);
        }
        due.clear();
        self.workers[thread].tcp_due = due;
        self.tcp_next_deadline(thread)
    }

    /// The earliest TCP timer of thread `thread`.
    pub fn tcp_next_deadline(&self, thread: usize) -> Option<Instant> {
        self.workers[thread].tcp_timer_set.first().map(|x| x.0)
    }

    /// Files connection `sid` under its current deadline (after anything that may have
    /// moved it).
    /// With workers, a moved deadline kicks the connection's thread: its `session-queue`
    /// learns its next timer only when it runs, and it runs only when `active()` (kicked,
    /// busy, or a deadline it knows is due), on thread 0 as on a worker.
    pub fn tcp_rearm(&mut self, sid: u32) {
        let w = self.worker_of(sid);
        let mut moved = false;
        if let Some(Proto::Tcp(t, l)) = w
            .sessions
            .get_mut(crate::session::handle_index(sid))
            .and_then(|x| x.as_mut().map(|s| &mut s.proto))
        {
            let before = l.timer;
            rearm(&mut w.tcp_timer_set, sid, t, l);
            moved = l.timer != before;
        }
        let th = crate::session::handle_thread(sid);
        if moved && th != 0 && th < self.n_threads() {
            self.kick_worker(th);
        }
    }
}

/// Moves connection `sid`'s entry in `set` to the deadline its state machine has now.
pub(crate) fn rearm(
    set: &mut std::collections::BTreeSet<(Instant, u32)>,
    sid: u32,
    t: &Tcb,
    l: &mut TcpLink,
) {
    let next = t.next_deadline();
    if next == l.timer {
        return;
    }
    if let Some(old) = l.timer {
        set.remove(&(old, sid));
    }
    if let Some(n) = next {
        set.insert((n, sid));
    }
    l.timer = next;
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Completes connection `sid`'s passive open (peer `r` to `l`, its SYN in): reads
    /// the ISS of the SYN-ACK it queued and sends the final ACK, with `data` (and PSH)
    /// when there is some. Returns the ACK's acknowledgement number (ISS + 1).
    fn complete_handshake(
        sm: &mut SessionMain,
        (l, r): (SocketAddr, SocketAddr),
        sid: u32,
        data: &[u8],
        now: Instant,
    ) -> u32 {
        let Some(Proto::Tcp(tcb, _)) = sm.sess_mut(sid).map(|s| &mut s.proto) else {
            panic!("not a connection");
        };
        let mut iss = 0;
        tcb.output(0, 4096, now, |o| {
            iss = o.seq;
            true
        });
        let snd = iss.wrapping_add(1);
        let flags = if data.is_empty() {
            TcpFlags::ACK
        } else {
            TcpFlags::ACK | TcpFlags::PSH
        };
        let ack = Seg {
            data,
            ..seg(778, snd, flags)
        };
        sm.tcp_input(l, r, &ack, now).unwrap();
        snd
    }

    pub(crate) fn seg(seq: u32, ack: u32, flags: TcpFlags) -> Seg<'static> {
        Seg {
            seq,
            ack,
            flags,
            wnd: 1000,
            mss: Some(1400),
            wscale: Some(7),
            ts: Some((1, 0)),
            sack_ok: true,
            sack: &[],
            data: &[],
        }
    }

    #[test]
    fn syn_cookie_round_trip() {
        let mut sm = SessionMain::default();
        let l: SocketAddr = "10.0.0.1:80".parse().unwrap();
        let r: SocketAddr = "10.0.0.2:4000".parse().unwrap();
        sm.syn_cookie(l, r, &seg(777, 0, TcpFlags::SYN));
        let (_, _, o) = sm.workers[0].ctl_out[0];
        assert_eq!(o.flags, TcpFlags::SYN | TcpFlags::ACK);
        assert_eq!(
            (o.ack, o.mss, o.wscale, o.ts, o.sack_ok),
            (778, Some(1460), None, None, false)
        );
        let ack = seg(778, o.seq.wrapping_add(1), TcpFlags::ACK);
        assert_eq!(
            sm.cookie_check(l, r, &ack),
            Some(1400),
            "the MSS the SYN offered"
        );
        let forged = seg(778, o.seq.wrapping_add(2), TcpFlags::ACK);
        assert_eq!(sm.cookie_check(l, r, &forged), None);
        let other: SocketAddr = "10.0.0.3:4000".parse().unwrap();
        assert_eq!(sm.cookie_check(l, other, &ack), None);
        assert_eq!(
            sm.cookie_check(l, r, &seg(779, o.seq.wrapping_add(1), TcpFlags::ACK)),
            None
        );
    }

    #[test]
    fn a_valid_cookie_opens_nothing_at_a_listener_that_sent_none() {
        let mut sm = SessionMain::default();
        let l: SocketAddr = "10.0.0.1:80".parse().unwrap();
        let r: SocketAddr = "10.0.0.2:4000".parse().unwrap();
        sm.workers[0].sessions.push(Some(crate::session::Session {
            app: 0,
            slot: 0,
            local: l,
            remote: None,
            stats: Default::default(),
            proto: Proto::TcpListen,
        }));
        let mut acc = sm.acc();
        acc.by_addr.insert((l.ip(), l.port()), 0);
        let listen = crate::session::Listen {
            app: 0,
            slot: 0,
            backlog: 8,
            half_open: 0,
            cookies_at: None,
        };
        acc.listens.insert(0, listen);
        drop(acc);
        // The ACK a SYN's cookie SYN-ACK would get, but the listener never overflowed.
        let c = sm.cookie(l, r, 777, SessionMain::cookie_period(), 5);
        let ack = seg(778, c.wrapping_add(1), TcpFlags::ACK);
        assert!(sm.cookie_check(l, r, &ack).is_some(), "the cookie is valid");
        sm.tcp_input(l, r, &ack, Instant::now()).unwrap();
        assert!(
            sm.workers[0].tcp_conns.is_empty(),
            "a connection was opened"
        );
        let t = &sm.tcp_stats();
        assert_eq!((t.syn_cookies_ok, t.syn_cookies_bad), (0, 0));
        let (_, _, o) = sm.workers[0].ctl_out.last().expect("a reset");
        assert_eq!((o.flags, o.seq), (TcpFlags::RST, ack.ack));
    }

    /// An application listening on 10.0.0.1:80 and a connection from 10.0.0.2:4000 whose
    /// SYN-ACK went out: (session layer, the application's socket, the connection, the
    /// first sequence number after the SYN-ACK's).
    fn half_open(now: Instant) -> (SessionMain, std::os::fd::OwnedFd, u32, u32) {
        let (mut sm, peer) = crate::session::tests::with_app();
        let (l, r) = (
            "10.0.0.1:80".parse().unwrap(),
            "10.0.0.2:4000".parse().unwrap(),
        );
        sm.tcp_listen(0, l, 8, &crate::session::tests::locals())
            .unwrap();
        sm.tcp_input(l, r, &seg(777, 0, TcpFlags::SYN), now)
            .unwrap();
        let sid = sm.workers[0].tcp_conns[&(l, r)];
        let Some(Proto::Tcp(t, _)) = sm.sess_mut(sid).map(|s| &mut s.proto) else {
            panic!("not a connection");
        };
        let mut iss = None;
        t.output(0, 4096, now, |o| {
            iss = Some(o.seq);
            true
        });
        (sm, peer, sid, iss.unwrap().wrapping_add(1))
    }

    /// A thread's table full (a small limit here; [`MAX_SESSIONS`] for real): the passive
    /// open is dropped and counted, its backlog place freed, no handle spills into the
    /// thread bits; a freed index is reused.
    ///
    /// [`MAX_SESSIONS`]: crate::session::MAX_SESSIONS
    #[test]
    fn a_full_session_table_drops_the_passive_open() {
        use crate::session::{handle_index, handle_thread};
        let now = Instant::now();
        let (mut sm, _peer) = crate::session::tests::with_app();
        sm.sess_limit = Some(3);
        let l: SocketAddr = "10.0.0.1:80".parse().unwrap();
        let lsid = sm
            .tcp_listen(0, l, 64, &crate::session::tests::locals())
            .unwrap();
        let r = |p| SocketAddr::new("10.0.0.2".parse().unwrap(), p);
        for p in [4000, 4001] {
            sm.tcp_input(l, r(p), &seg(777, 0, TcpFlags::SYN), now)
                .unwrap();
        }
        let before = sm.workers[0].sessions.len();
        assert_eq!(before, 3, "the listener and two passive opens");
        sm.tcp_input(l, r(4002), &seg(777, 0, TcpFlags::SYN), now)
            .unwrap();
        assert_eq!(sm.tcp_stats().table_full, 1);
        assert!(!sm.workers[0].tcp_conns.contains_key(&(l, r(4002))));
        assert_eq!(sm.workers[0].sessions.len(), before);
        assert_eq!(sm.tcp_count(), 3);
        let half_open = sm.acc().listens[&lsid].half_open;
        assert_eq!(half_open, 2, "the dropped SYN holds no backlog place");
        // A freed index is reused, under the limit.
        let sid = sm.workers[0].tcp_conns[&(l, r(4000))];
        sm.tcp_abort(sid);
        sm.tcp_input(l, r(4002), &seg(777, 0, TcpFlags::SYN), now)
            .unwrap();
        let sid2 = sm.workers[0].tcp_conns[&(l, r(4002))];
        assert_eq!(
            (handle_thread(sid2), handle_index(sid2)),
            (0, handle_index(sid))
        );
        assert_eq!(sm.tcp_stats().table_full, 1);
    }

    /// Three threads, one listener (on thread 0) with a backlog of 4: the SYNs of flows
    /// every thread owns share its backlog in the accept part (the fifth is refused
    /// wherever it lands, with cookies off; answered with a cookie by its flow's owner with
    /// them on), an accept on a worker gives its place back and names the listener's slot,
    /// and closing the listener aborts its half-open connections on every thread and
    /// leaves nothing in the accept part.
    #[test]
    fn every_threads_syns_share_the_listeners_backlog_in_the_accept_part() {
        use crate::session::{flow_owner, handle_thread, Config};
        let now = Instant::now();
        for cookies in [false, true] {
            let (mut sm, _peer) = crate::session::tests::with_app_on(3);
            let cfg = Config {
                syn_cookies: cookies,
                ..sm.params.cfg.clone()
            };
            sm.set_cfg(cfg);
            let l: SocketAddr = "10.0.0.1:80".parse().unwrap();
            let lsid = sm
                .tcp_listen(0, l, 4, &crate::session::tests::locals())
                .unwrap();
            let lslot = sm.sess(lsid).unwrap().slot;
            let r = |p| SocketAddr::new("10.0.0.2".parse().unwrap(), p);
            let ports: Vec<u16> = (4000..4100).collect();
            let on = |p: u16| flow_owner(l, r(p), 3);
            // Four SYNs: at least one on each worker.
            let mut syn: Vec<u16> = [1, 2]
                .map(|t| *ports.iter().find(|&&p| on(p) == t).unwrap())
                .into();
            let more: Vec<u16> = ports
                .iter()
                .filter(|p| !syn.contains(p))
                .take(2)
                .copied()
                .collect();
            syn.extend(more);
            for &p in &syn {
                sm.tcp_input(l, r(p), &seg(777, 0, TcpFlags::SYN), now)
                    .unwrap();
                assert!(sm.workers[on(p)].tcp_conns.contains_key(&(l, r(p))));
            }
            assert_eq!(sm.acc().listens[&lsid].half_open, 4);
            // The fifth, on a worker: refused, or answered with a cookie by that worker.
            let fifth = *ports
                .iter()
                .find(|&&p| on(p) == 2 && !syn.contains(&p))
                .unwrap();
            sm.workers[2].ctl_out.clear();
            let got = sm.tcp_input(l, r(fifth), &seg(777, 0, TcpFlags::SYN), now);
            assert!(!sm.workers[2].tcp_conns.contains_key(&(l, r(fifth))));
            if cookies {
                assert_eq!(got, Ok(()));
                assert_eq!(sm.workers[2].ctl_out.len(), 1, "the cookie SYN-ACK");
                assert!(sm.acc().listens[&lsid].cookies_at.is_some());
            } else {
                assert_eq!(got, Err(TcpDrop::BacklogFull));
                assert_eq!(sm.tcp_stats().backlog_full, 1);
            }
            assert_eq!(sm.acc().listens[&lsid].half_open, 4);
            // The worker-1 connection completes: its place is given back.
            let p1 = syn[0];
            let sid = sm.workers[1].tcp_conns[&(l, r(p1))];
            assert_eq!(handle_thread(sid), 1);
            complete_handshake(&mut sm, (l, r(p1)), sid, &[], now);
            let slot = sm.sess(sid).unwrap().slot;
            assert_ne!(slot, NO_SLOT, "accepted");
            let a = sm.apps[0].as_ref().unwrap();
            let (rx, _) = a.fifos(slot).unwrap();
            assert_eq!(
                rx.endpoints().map(|e| e.2),
                Some(lslot),
                "the listener's slot"
            );
            assert_eq!(sm.acc().listens[&lsid].half_open, 3);
            // The listener closes: its three half-open connections go, on every thread.
            sm.tcp_close(lsid);
            assert!(sm.acc().by_addr.is_empty() && sm.acc().listens.is_empty());
            for &p in &syn[1..] {
                assert!(!sm.workers[on(p)].tcp_conns.contains_key(&(l, r(p))), "{p}");
            }
            assert!(sm.sess(sid).is_some(), "the accepted connection stays");
        }
    }

    /// An application dying with connections on every thread (handshakes it listens for,
    /// its active opens): every thread's table, connection table and timers are emptied,
    /// and the application is reaped.
    #[test]
    fn an_app_dying_frees_its_sessions_on_every_thread() {
        use crate::session::handle_thread;
        let now = Instant::now();
        let (mut sm, _peer) = crate::session::tests::with_app();
        let _ = sm.worker_kick(2);
        let l: SocketAddr = "10.0.0.1:80".parse().unwrap();
        let locals = crate::session::tests::locals();
        sm.tcp_listen(0, l, 64, &locals).unwrap();
        for p in 4000..4030u16 {
            let r = SocketAddr::new("10.0.0.2".parse().unwrap(), p);
            sm.tcp_input(l, r, &seg(777, 0, TcpFlags::SYN), now)
                .unwrap();
        }
        let remote: SocketAddr = "10.0.0.2:5201".parse().unwrap();
        let mut on = [false; 3];
        for _ in 0..3 {
            on[handle_thread(sm.tcp_connect(0, remote, &locals).unwrap())] = true;
        }
        assert_eq!(on, [true; 3], "active opens on every thread");
        assert!(sm.workers.iter().all(|w| !w.tcp_conns.is_empty()));
        sm.detach(0, &mut Vec::new());
        // Thread 0 freed its own; each worker resets its own when it takes the detach.
        assert!(sm.workers[0].tcp_conns.is_empty());
        assert!(sm.apps[0].as_ref().is_some_and(|a| a.dead));
        for t in 1..3 {
            assert!(!sm.workers[t].tcp_conns.is_empty(), "thread 0 freed {t}'s");
            let mut reqs = take_ring(&sm, t);
            sm.apply_ctl(t, &mut reqs);
        }
        assert_eq!(sm.iter().count(), 0, "every thread's sessions freed");
        for w in sm.workers.iter() {
            assert!(w.tcp_conns.is_empty() && w.tcp_timer_set.is_empty());
        }
        assert_eq!(sm.tcp_count(), 0);
        assert!(sm.apps[0].is_none(), "the application reaped");
    }

    /// With three threads, passive opens live on the thread owning their 4-tuple (the
    /// handle names it; the SYN-ACK is queued there), active opens go round the threads
    /// with a port whose reply that thread owns; closing frees every thread's table.
    #[test]
    fn sessions_live_on_the_thread_that_owns_their_flow() {
        use crate::session::{flow_owner, handle_index, handle_thread};
        let now = Instant::now();
        let (mut sm, _peer) = crate::session::tests::with_app();
        let _ = sm.worker_kick(2);
        assert_eq!(sm.n_threads(), 3);
        let l: SocketAddr = "10.0.0.1:80".parse().unwrap();
        let locals = crate::session::tests::locals();
        let lsid = sm.tcp_listen(0, l, 64, &locals).unwrap();
        assert_eq!(handle_thread(lsid), 0, "listeners live on thread 0");
        let mut seen = [0; 3];
        for p in 4000..4030u16 {
            let r = SocketAddr::new("10.0.0.2".parse().unwrap(), p);
            sm.tcp_input(l, r, &seg(777, 0, TcpFlags::SYN), now)
                .unwrap();
            let t = flow_owner(l, r, 3);
            let sid = sm.workers[t].tcp_conns[&(l, r)];
            assert_eq!(handle_thread(sid), t, "{r}");
            assert!(
                sm.workers[t].tcp_out.contains(&sid),
                "SYN-ACK queued on {t}"
            );
            assert!(sm.workers[t].sessions[handle_index(sid)].is_some());
            seen[t] += 1;
        }
        assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
        let remote: SocketAddr = "10.0.0.2:5201".parse().unwrap();
        let mut active = vec![];
        for want in [0, 1, 2] {
            let sid = sm.tcp_connect(0, remote, &locals).unwrap();
            let local = sm.sess(sid).unwrap().local;
            assert_eq!(handle_thread(sid), want);
            assert_eq!(
                flow_owner(local, remote, 3),
                want,
                "the reply is owned there"
            );
            assert_eq!(sm.workers[want].tcp_conns[&(local, remote)], sid);
            active.push(sid);
        }
        for sid in active {
            sm.tcp_abort(sid);
        }
        sm.tcp_close(lsid);
        assert_eq!(sm.iter().count(), 0, "every thread's sessions freed");
        for w in sm.workers.iter() {
            assert!(w.tcp_conns.is_empty() && w.tcp_timer_set.is_empty());
        }
        assert_eq!(sm.tcp_count(), 0);
    }

    /// The shared part's per-thread accounting (what thread 0 reads instead of the owners'
    /// tables): each application's session count per thread, each slot's TCP flag, each
    /// thread's TCP session count and counters, all matching the tables as connections
    /// come and go on three threads, and zero once everything is freed.
    #[test]
    fn per_thread_counts_and_slot_flags_match_the_tables() {
        use crate::session::handle_thread;
        let now = Instant::now();
        let (mut sm, _peer) = crate::session::tests::with_app();
        let _ = sm.worker_kick(2);
        let locals = crate::session::tests::locals();
        let check = |sm: &SessionMain| {
            let a = sm.apps[0].as_ref().unwrap();
            for (t, w) in sm.workers.iter().enumerate() {
                let mine = w.sessions.iter().flatten().filter(|s| s.app == 0).count();
                assert_eq!(a.sess_on(t) as usize, mine, "{t}");
                let tcp = w.sessions.iter().flatten().filter(|s| s.proto.is_tcp());
                assert_eq!(w.tcp_count as usize, tcp.count(), "thread {t}");
            }
            for (slot, sid) in a.slots.iter().enumerate() {
                if let Some(sid) = sid {
                    let tcp = sm.sess(sid).unwrap().proto.is_tcp();
                    assert_eq!(a.slot_tcp(slot as u32), tcp, "slot {slot}");
                }
            }
        };
        let udp = sm
            .bind(0, "10.0.0.1:53".parse().unwrap(), &locals, &mut Vec::new())
            .unwrap();
        let l: SocketAddr = "10.0.0.1:80".parse().unwrap();
        let lsid = sm.tcp_listen(0, l, 64, &locals).unwrap();
        for p in 4000..4030u16 {
            let r = SocketAddr::new("10.0.0.2".parse().unwrap(), p);
            sm.tcp_input(l, r, &seg(777, 0, TcpFlags::SYN), now)
                .unwrap();
        }
        let remote: SocketAddr = "10.0.0.2:5201".parse().unwrap();
        // The application's four slots: the UDP session, the listener, two active opens
        // (threads 0 and 1); the passive opens in the handshake hold none.
        let active: Vec<u32> = (0..2)
            .map(|_| sm.tcp_connect(0, remote, &locals).unwrap())
            .collect();
        check(&sm);
        let a = sm.apps[0].as_ref().unwrap();
        assert!((0..3).all(|t| a.sess_on(t) > 0), "{:?}", a.sess_on);
        assert_eq!(a.sessions() as usize, sm.iter().count());
        for &sid in &active {
            let w = &sm.workers[handle_thread(sid)];
            assert_eq!(w.tcp_stats.connected, 1, "counted on its owner");
        }
        assert_eq!(sm.tcp_stats().connected, 2, "summed");
        let freed = sm.sess(active[0]).unwrap().slot;
        assert!(sm.apps[0].as_ref().unwrap().slot_tcp(freed));
        for sid in active {
            sm.tcp_abort(sid);
            check(&sm);
        }
        // A UDP session takes the first freed slot: its TCP flag is gone with the TCP
        // session (else thread 0 would forward the UDP session's close to a worker).
        let udp2 = sm
            .bind(0, "10.0.0.1:54".parse().unwrap(), &locals, &mut Vec::new())
            .unwrap();
        assert_eq!(sm.sess(udp2).unwrap().slot, freed, "the freed slot reused");
        assert!(!sm.apps[0].as_ref().unwrap().slot_tcp(freed));
        check(&sm);
        sm.close(udp2, &mut Vec::new());
        sm.tcp_close(lsid);
        sm.close(udp, &mut Vec::new());
        check(&sm);
        assert_eq!(sm.apps[0].as_ref().unwrap().sessions(), 0);
        assert_eq!(sm.tcp_count(), 0);
    }

    /// Two threads: each accepted connection's slot names its owner (the owner word and
    /// Sluice's copy), its events go to its owner's app queue only, and the worker's
    /// eventfd for the application is handed to the worker's `session-queue`.
    #[test]
    fn each_thread_queues_its_connections_events_on_its_own_queue() {
        use crate::session::{flow_owner, handle_thread};
        let now = Instant::now();
        let (mut sm, _peer) = crate::session::tests::with_app_on(2);
        {
            let a = sm.apps[0].as_ref().unwrap();
            assert_eq!(a.g.n_queues, 2);
            assert_eq!(a.sluice_efds.len(), 2);
            assert_eq!(
                sm.workers[1].efd_add,
                [(std::os::fd::AsRawFd::as_raw_fd(&a.sluice_efds[1]), 0)]
            );
        }
        let l: SocketAddr = "10.0.0.1:80".parse().unwrap();
        sm.tcp_listen(0, l, 64, &crate::session::tests::locals())
            .unwrap();
        let mut slots = [None, None];
        for p in 4000..4100u16 {
            let r = SocketAddr::new("10.0.0.2".parse().unwrap(), p);
            let t = flow_owner(l, r, 2);
            if slots[t].is_some() {
                continue;
            }
            sm.tcp_input(l, r, &seg(777, 0, TcpFlags::SYN), now)
                .unwrap();
            let sid = sm.workers[t].tcp_conns[&(l, r)];
            assert_eq!(handle_thread(sid), t);
            complete_handshake(&mut sm, (l, r), sid, b"hi", now);
            slots[t] = Some(sm.sess(sid).unwrap().slot);
        }
        let a = sm.apps[0].as_ref().unwrap();
        for (t, slot) in slots.iter().enumerate() {
            let slot = slot.expect("a connection on each thread");
            assert_eq!(a.owner(slot), t as u32);
            let (rx, _) = a.fifos(slot).unwrap();
            assert_eq!(rx.owner().load(Ordering::Acquire), t as u32);
            let q = a.app_evq(t as u32).unwrap();
            let got: Vec<u32> = std::iter::from_fn(|| q.pop()).collect();
            assert_eq!(got, [seg::EVENT_ACCEPT | slot], "thread {t}'s queue");
        }
    }

    /// Takes the application's pending events (as `App::next` does).
    fn app_events(sm: &SessionMain) -> Vec<u32> {
        let a = sm.apps[0].as_ref().unwrap();
        let q = a.app_evq(0).unwrap();
        let v: Vec<u32> = std::iter::from_fn(|| q.pop()).collect();
        for e in &v {
            a.fifos(e & !seg::EVENT_ACCEPT).unwrap().0.clear_event();
        }
        v
    }

    #[test]
    fn data_and_fin_on_the_final_ack_reach_the_accepted_slot() {
        let now = Instant::now();
        let (mut sm, _peer, sid, snd) = half_open(now);
        let (l, r) = (
            "10.0.0.1:80".parse().unwrap(),
            "10.0.0.2:4000".parse().unwrap(),
        );
        let ack = Seg {
            data: b"hello",
            ..seg(778, snd, TcpFlags::ACK | TcpFlags::PSH | TcpFlags::FIN)
        };
        sm.tcp_input(l, r, &ack, now).unwrap();
        let slot = sm.sess(sid).unwrap().slot;
        assert_eq!(app_events(&sm), [seg::EVENT_ACCEPT | slot]);
        let (rx, _) = sm.apps[0].as_ref().unwrap().fifos(slot).unwrap();
        let mut got = [0u8; 16];
        let n = rx.pop_bytes(&mut got);
        assert_eq!(&got[..n], b"hello", "the data went with the handshake");
        assert_eq!(
            rx.state().load(Ordering::Acquire),
            tcp_state::ESTABLISHED | tcp_state::PEER_FIN
        );
        let s = sm.sess(sid).unwrap();
        assert_eq!((s.stats.rx, s.stats.rx_bytes), (1, 5), "counted once");
    }

    #[test]
    fn an_accept_a_full_queue_refused_is_retried_ahead_of_data() {
        let now = Instant::now();
        let (mut sm, _peer, sid, snd) = half_open(now);
        let (l, r) = (
            "10.0.0.1:80".parse().unwrap(),
            "10.0.0.2:4000".parse().unwrap(),
        );
        let q_full = |sm: &SessionMain| {
            let q = sm.apps[0].as_ref().unwrap().app_evq(0).unwrap();
            while q.push(0) {}
        };
        q_full(&sm); // the application is behind (slot 0 is the listener's)
        sm.tcp_input(l, r, &seg(778, snd, TcpFlags::ACK), now)
            .unwrap();
        let slot = sm.sess(sid).unwrap().slot;
        let got = app_events(&sm);
        assert!(
            !got.is_empty() && got.iter().all(|&e| e == 0),
            "the queue was full: {got:?}"
        );
        assert_eq!(
            sm.workers[0].evq_retry.len(),
            1,
            "the accept was refused and filed"
        );
        // Data comes before the retry: its event waits behind the accept's.
        let data = Seg {
            data: b"hello",
            ..seg(778, snd, TcpFlags::ACK | TcpFlags::PSH)
        };
        sm.tcp_input(l, r, &data, now).unwrap();
        assert_eq!(
            app_events(&sm),
            [],
            "no data event for a slot not yet accepted"
        );
        sm.retry_events(0);
        assert_eq!(app_events(&sm), [seg::EVENT_ACCEPT | slot]);
        assert!(sm.workers[0].evq_retry.is_empty());
    }

    /// Fills thread `t`'s app event queue of application 0 after taking what it held (the
    /// events' slot marks cleared, as the library does); returns what it held.
    pub(crate) fn fill_queue(sm: &SessionMain, t: u32) -> Vec<u32> {
        let a = sm.apps[0].as_ref().unwrap();
        let q = a.app_evq(t).unwrap();
        let held: Vec<u32> = std::iter::from_fn(|| q.pop()).collect();
        for e in &held {
            a.fifos(e & !seg::EVENT_ACCEPT).unwrap().0.clear_event();
        }
        while q.push(0) {} // slot 0's (the listener's) events: the application is behind
        held
    }

    /// Two threads: a data event worker 1's full queue refused is filed on worker 1 and
    /// retried by worker 1 into its own queue (each app queue has one producer, for
    /// retries too); thread 0's retry leaves it, and the worker is kicked to arm its
    /// timer. Fails with one list retried by thread 0 (as before session 17).
    #[test]
    fn a_refused_event_is_retried_by_the_thread_whose_queue_refused_it() {
        let (mut sm, _peer) = crate::session::tests::with_app_on(2);
        let l: SocketAddr = "10.0.0.1:80".parse().unwrap();
        sm.tcp_listen(0, l, 64, &crate::session::tests::locals())
            .unwrap();
        let (sid, slot, r, snd) = accepted_on(&mut sm, l, 1, 4000..4200, 1)[0];
        assert_eq!(crate::session::handle_thread(sid), 1);
        assert_eq!(fill_queue(&sm, 1), [seg::EVENT_ACCEPT | slot]);
        sm.workers[1].tcp_kick.store(false, Ordering::Release);
        let data = Seg {
            data: b"hello",
            ..seg(778, snd, TcpFlags::ACK | TcpFlags::PSH)
        };
        sm.tcp_input(l, r, &data, Instant::now()).unwrap();
        let filed = |sm: &SessionMain| [0, 1].map(|t| sm.workers[t].evq_retry.len());
        assert_eq!(filed(&sm), [0, 1], "filed on the queue's thread");
        assert!(sm.workers[1].tcp_kick.load(Ordering::Acquire), "not kicked");
        assert!(
            fill_queue(&sm, 1).iter().all(|&e| e == 0),
            "the data event was refused"
        );
        // The application catches up (queue 1 empty).
        let q1 = || sm.apps[0].as_ref().unwrap().app_evq(1).unwrap();
        while q1().pop().is_some() {}
        sm.retry_events(0);
        let q1 = sm.apps[0].as_ref().unwrap().app_evq(1).unwrap();
        assert_eq!(q1.pop(), None, "thread 0 pushed into worker 1's queue");
        assert_eq!(filed(&sm), [0, 1]);
        sm.retry_events(1);
        let q1 = sm.apps[0].as_ref().unwrap().app_evq(1).unwrap();
        assert_eq!(q1.pop(), Some(slot), "the worker's retry queued it");
        assert_eq!(filed(&sm), [0, 0]);
        assert_eq!(sm.evq_awaiting(), 0);
    }

    /// Issue 19's half-close flake (`preload_half_close_with_the_kernel`): the application
    /// shut its side, the peer sent more than half a FIFO and its FIN, which took the
    /// connection to TIME-WAIT, and closed (a kernel peer in LAST-ACK is gone once our ACK
    /// of its FIN arrives). The application reading then opened the window: a window update
    /// to the gone peer drew its RST, which reset the connection, and the application got
    /// ECONNRESET instead of its end of stream. Now no window update goes after the peer's
    /// FIN, and a RST in TIME-WAIT ends the connection without a reset.
    #[test]
    fn a_gone_peer_does_not_reset_a_half_closed_reader() {
        let now = Instant::now();
        let (mut sm, _peer, sid, snd) = half_open(now);
        let (l, r) = (
            "10.0.0.1:80".parse().unwrap(),
            "10.0.0.2:4000".parse().unwrap(),
        );
        sm.tcp_input(l, r, &seg(778, snd, TcpFlags::ACK), now)
            .unwrap();
        let slot = sm.sess(sid).unwrap().slot;
        app_events(&sm);
        // What `session-queue` sends for the connection now, the rx FIFO's space as it is.
        let send = |sm: &mut SessionMain| {
            let rx_free = sm.apps[0]
                .as_ref()
                .unwrap()
                .fifos(slot)
                .unwrap()
                .0
                .free_bytes();
            let Some(Proto::Tcp(t, _)) = sm.sess_mut(sid).map(|s| &mut s.proto) else {
                panic!("not a connection");
            };
            let mut out = vec![];
            t.output(0, rx_free, now, |o| {
                out.push((o.seq, o.ack, o.flags));
                true
            });
            out
        };
        sm.tcp_shutdown(sid).unwrap();
        assert_eq!(send(&mut sm), [(snd, 778, TcpFlags::FIN | TcpFlags::ACK)]);
        // FIN acknowledged (FIN-WAIT-2); 3,000 bytes of the 4,096-byte FIFO and the FIN.
        sm.tcp_input(l, r, &seg(778, snd + 1, TcpFlags::ACK), now)
            .unwrap();
        let data = vec![7u8; 3000];
        let last = Seg {
            data: &data,
            ..seg(778, snd + 1, TcpFlags::ACK | TcpFlags::FIN)
        };
        sm.tcp_input(l, r, &last, now).unwrap();
        let end = 778 + 3000 + 1;
        assert_eq!(send(&mut sm), [(snd + 1, end, TcpFlags::ACK)]);
        let Some(Proto::Tcp(t, _)) = sm.sess(sid).map(|s| &s.proto) else {
            panic!("not a connection");
        };
        assert_eq!(t.state, State::TimeWait);
        // The application reads it all: no window update to a peer that sends nothing more.
        let (rx, _) = sm.apps[0].as_ref().unwrap().fifos(slot).unwrap();
        let mut got = vec![0u8; 4096];
        let n = rx.pop_bytes(&mut got);
        assert_eq!(n, 3000);
        assert_eq!(send(&mut sm), [], "a window update after the peer's FIN");
        // A RST from the gone peer (for a segment of ours) ends the connection quietly.
        sm.tcp_input(l, r, &seg(end, 0, TcpFlags::RST), now)
            .unwrap();
        let (rx, _) = sm.apps[0].as_ref().unwrap().fifos(slot).unwrap();
        let st = rx.state().load(Ordering::Acquire);
        assert_eq!(st & tcp_state::RESET, 0, "the reader was reset");
        assert_ne!(st & tcp_state::PEER_FIN, 0, "no end of stream");
        assert_eq!(sm.tcp_stats().resets, 0);
        assert_eq!(sm.tcp_stats().time_wait_rst, 1);
        let a = sm.apps[0].as_ref().unwrap();
        assert_eq!(a.slots.get(slot), Some(sid), "the application holds it");
        assert!(sm.workers[0].tcp_conns.is_empty(), "the 4-tuple is free");
    }

    #[test]
    fn shutdown_sends_fin_and_keeps_receiving() {
        let now = Instant::now();
        let (mut sm, _peer, sid, snd) = half_open(now);
        let (l, r) = (
            "10.0.0.1:80".parse().unwrap(),
            "10.0.0.2:4000".parse().unwrap(),
        );
        sm.tcp_input(l, r, &seg(778, snd, TcpFlags::ACK), now)
            .unwrap();
        let slot = sm.sess(sid).unwrap().slot;
        assert_eq!(app_events(&sm), [seg::EVENT_ACCEPT | slot]);
        // session-queue sent what was queued.
        sm.workers[0].tcp_out.clear();
        if let Some(Proto::Tcp(_, l)) = sm.sess_mut(sid).map(|s| &mut s.proto) {
            l.queued = false;
        }
        sm.tcp_shutdown(sid).unwrap();
        sm.tcp_shutdown(sid).unwrap(); // again: nothing more to do
        assert_eq!(sm.workers[0].tcp_out, [sid], "queued to send its FIN");
        let Some(Proto::Tcp(t, _)) = sm.sess_mut(sid).map(|s| &mut s.proto) else {
            panic!("not a connection");
        };
        let mut out = vec![];
        t.output(0, 4096, now, |o| {
            out.push((o.seq, o.flags));
            true
        });
        assert_eq!(out, [(snd, TcpFlags::FIN | TcpFlags::ACK)]);
        // The peer acknowledges the FIN and goes on sending: the application reads it.
        let more = Seg {
            data: b"more",
            ..seg(778, snd.wrapping_add(1), TcpFlags::ACK)
        };
        sm.tcp_input(l, r, &more, now).unwrap();
        assert_eq!(app_events(&sm), [slot]);
        let a = sm.apps[0].as_ref().unwrap();
        assert_eq!(a.slots.get(slot), Some(sid), "the slot stays");
        let mut got = [0u8; 16];
        let n = a.fifos(slot).unwrap().0.pop_bytes(&mut got);
        assert_eq!(&got[..n], b"more");
        // A listener cannot be shut.
        let lsid = sm.acc().by_addr[&(l.ip(), l.port())];
        assert!(matches!(
            sm.tcp_shutdown(lsid),
            Err(SessionError::NotConnected)
        ));
    }

    /// Establishes connections from 10.0.0.2 to the listener at `l` until `n` of them live
    /// on thread `t` (of `sm`'s threads): (session, slot, peer, next sequence number of ours).
    pub(crate) fn accepted_on(
        sm: &mut SessionMain,
        l: SocketAddr,
        t: usize,
        ports: std::ops::Range<u16>,
        n: usize,
    ) -> Vec<(u32, u32, SocketAddr, u32)> {
        let now = Instant::now();
        let mut v = vec![];
        for p in ports {
            let r = SocketAddr::new("10.0.0.2".parse().unwrap(), p);
            if crate::session::flow_owner(l, r, sm.n_threads()) != t {
                continue;
            }
            sm.tcp_input(l, r, &seg(777, 0, TcpFlags::SYN), now)
                .unwrap();
            let sid = sm.workers[t].tcp_conns[&(l, r)];
            let snd = complete_handshake(sm, (l, r), sid, &[], now);
            v.push((sid, sm.sess(sid).unwrap().slot, r, snd));
            if v.len() == n {
                break;
            }
        }
        assert_eq!(v.len(), n, "connections on thread {t}");
        v
    }

    fn app_closed(sm: &SessionMain, sid: u32) -> (bool, bool) {
        match sm.sess(sid).map(|s| &s.proto) {
            Some(Proto::Tcp(t, l)) => (l.app_closed, t.app_closed),
            _ => panic!("no connection {sid:#x}"),
        }
    }

    /// The ring's requests, as the owner's `session-queue` takes them.
    fn take_ring(sm: &SessionMain, t: usize) -> Vec<crate::session::CtlReq> {
        std::mem::take(&mut *sm.workers[t].ctl_in.lock().unwrap())
    }

    /// Three threads, many connects in one control poll: thread 0 takes each one's port
    /// and slot (pending) and opens only the connections it owns; each worker's are on
    /// its ring and in no table until the worker applies them, which files them, fills
    /// the slots and queues the replies. Then an application dies with connects still on
    /// the rings (its own and a second one, reaped at once), and a worker's table is full
    /// when a connect reaches it: the ports and slots are given back, every session,
    /// port and slot accounted, nothing left.
    #[test]
    fn connects_are_opened_by_their_owner_and_all_accounted() {
        use crate::session::{handle_thread, tests::replies, Config, CtlReq, PENDING};
        use sluice_infra::seqpacket;
        use sluice_session::msg::{self, Msg};
        const N: u32 = 40;
        let mut sm = SessionMain::default();
        sm.set_cfg(Config {
            sessions_per_app: 64,
            fifo_size: 4096,
            evq_len: 64,
            ..Config::default()
        });
        let _ = sm.worker_kick(2);
        let peer = crate::session::tests::attach_one(&mut sm);
        replies(&peer);
        let locals = crate::session::tests::locals();
        let remote: SocketAddr = "10.0.0.2:5201".parse().unwrap();
        let send = |req: u32| {
            let m = Msg::TcpConnect { req, remote };
            seqpacket::send(&peer, &msg::encode(&m), None).unwrap();
        };
        let check = |sm: &SessionMain, a: u32| {
            let app = sm.apps[a as usize].as_ref().unwrap();
            for (t, w) in sm.workers.iter().enumerate() {
                let mine = w.sessions.iter().flatten().filter(|s| s.app == a).count();
                assert_eq!(app.sess_on(t) as usize, mine, "thread {t}");
                let tcp = w.sessions.iter().flatten().filter(|s| s.proto.is_tcp());
                assert_eq!(w.tcp_count as usize, tcp.count(), "thread {t}");
            }
        };
        let mut ports = vec![];
        for req in 1..=N {
            send(req);
        }
        sm.serve_app(0, &locals, &mut ports);
        sm.send_replies(&mut ports);
        let now: Vec<Msg> = replies(&peer);
        let rings: Vec<Vec<CtlReq>> = (0..3).map(|t| take_ring(&sm, t)).collect();
        assert!(rings[0].is_empty());
        assert!(!rings[1].is_empty() && !rings[2].is_empty(), "{rings:?}");
        assert_eq!(now.len() + rings[1].len() + rings[2].len(), N as usize);
        for t in 1..3 {
            assert_eq!(sm.workers[t].sessions.iter().flatten().count(), 0, "{t}");
            assert!(sm.workers[t].tcp_conns.is_empty() && sm.workers[t].tcp_out.is_empty());
            assert_eq!(sm.workers[t].tcp_count, 0);
        }
        let app = sm.apps[0].as_ref().unwrap();
        let pending = app.slots.iter().filter(|s| *s == Some(PENDING)).count();
        assert_eq!(pending, rings[1].len() + rings[2].len());
        assert_eq!(sm.tcp_pending as usize, pending, "pending connects counted");
        assert_eq!(app.slots.iter().flatten().count(), N as usize);
        assert_eq!(
            sm.tcp_ports.len(),
            N as usize,
            "every port taken by thread 0"
        );
        check(&sm, 0);
        for (t, mut ring) in rings.into_iter().enumerate().skip(1) {
            for r in &ring {
                let CtlReq::Connect { c, .. } = r else {
                    panic!("{r:?}")
                };
                assert_eq!(crate::session::flow_owner(c.local, c.remote, 3), t);
            }
            sm.apply_ctl(t, &mut ring);
            check(&sm, 0);
        }
        sm.send_replies(&mut ports);
        let all: Vec<Msg> = now.into_iter().chain(replies(&peer)).collect();
        let mut seen = std::collections::BTreeSet::new();
        for m in &all {
            let Msg::SessionReply {
                req,
                retval: 0,
                slot,
                local,
            } = *m
            else {
                panic!("{m:?}")
            };
            assert!(seen.insert(req), "request {req} answered twice");
            let sid = sm.apps[0].as_ref().unwrap().slots.get(slot).unwrap();
            let s = sm.sess(sid).unwrap();
            assert_eq!((s.local, s.remote), (local, Some(remote)));
            let owner = crate::session::flow_owner(local, remote, 3);
            assert_eq!(handle_thread(sid), owner, "filed on its owner");
            assert_eq!(sm.workers[owner].tcp_conns[&(local, remote)], sid);
            assert!(sm.workers[owner].tcp_out.contains(&sid), "its SYN queued");
        }
        assert_eq!(seen.len(), N as usize);
        assert_eq!(sm.tcp_pending, 0);
        assert_eq!(sm.tcp_stats().connected, N as u64);
        assert_eq!(sm.tcp_count(), N);

        // A second application's connects, then both die with connects on the rings.
        let peer2 = crate::session::tests::attach_one(&mut sm);
        replies(&peer2);
        for req in 1..=8 {
            let m = Msg::TcpConnect { req, remote };
            seqpacket::send(&peer2, &msg::encode(&m), None).unwrap();
            send(100 + req);
        }
        sm.serve_app(0, &locals, &mut ports);
        sm.serve_app(1, &locals, &mut ports);
        let forwarded = (1..3).map(|t| sm.workers[t].ctl_in.lock().unwrap().len());
        assert!(forwarded.sum::<usize>() > 0);
        sm.detach(1, &mut ports);
        assert!(sm.apps[1].is_none(), "no session anywhere: reaped at once");
        sm.detach(0, &mut ports);
        for t in 1..3 {
            let mut ring = take_ring(&sm, t);
            assert!(matches!(ring.last(), Some(CtlReq::Detach { app: 0, .. })));
            sm.apply_ctl(t, &mut ring);
        }
        sm.send_replies(&mut ports);
        assert!(sm.apps.iter().all(|a| a.is_none()), "both reaped");
        assert!(sm.tcp_ports.is_empty(), "ports left: {:?}", sm.tcp_ports);
        assert_eq!(sm.tcp_count(), 0);
        assert_eq!(sm.iter().count(), 0);
        for t in 0..3 {
            assert!(sm.workers[t].tcp_conns.is_empty());
        }
        assert!(sm.ctl_stale > 0, "the dead applications' connects counted");
        assert_eq!(sm.tcp_pending, 0, "a refused connect is no longer pending");

        // A full table on the owner: the reply says so, the port and the slot are back.
        let peer3 = crate::session::tests::attach_one(&mut sm);
        replies(&peer3);
        for req in 1..=6 {
            let m = Msg::TcpConnect { req, remote };
            seqpacket::send(&peer3, &msg::encode(&m), None).unwrap();
        }
        let a = sm.apps.iter().position(|x| x.is_some()).unwrap() as u32;
        sm.serve_app(a, &locals, &mut ports);
        let on0 = sm.workers[0].sessions.iter().flatten().count();
        // The workers' tables are empty; the limit counts a table's length (a freed index
        // is reused below it), so their freed indexes go too.
        for t in 1..3 {
            sm.workers[t].sessions.clear();
            sm.workers[t].free.clear();
        }
        sm.sess_limit = Some(0);
        for t in 1..3 {
            let mut ring = take_ring(&sm, t);
            sm.apply_ctl(t, &mut ring);
        }
        sm.send_replies(&mut ports);
        let r = replies(&peer3);
        assert_eq!(r.len(), 6);
        let full = r
            .iter()
            .filter(|m| {
                matches!(m, Msg::SessionReply { retval, .. }
                    if *retval == -SessionError::NoSpace.errno())
            })
            .count();
        assert_eq!(full, 6 - on0);
        let app = sm.apps[a as usize].as_ref().unwrap();
        assert_eq!(app.slots.iter().flatten().count(), on0, "slots given back");
        assert_eq!(sm.tcp_ports.len(), on0, "ports given back");
        assert_eq!(sm.tcp_pending, 0);
        check(&sm, a);
    }

    /// A connect reaching a thread that does not own its 4-tuple (the thread count changed
    /// since thread 0 began it) is refused as stale, not opened (nor a panic in a debug
    /// build): the port and the slot are given back.
    #[test]
    fn a_connect_off_its_owner_is_refused() {
        let (mut sm, _peer) = crate::session::tests::with_app_on(2);
        let locals = crate::session::tests::locals();
        let remote: SocketAddr = "10.0.0.2:5201".parse().unwrap();
        let (t, c) = sm.tcp_connect_begin(0, remote, &locals).unwrap();
        assert_eq!(sm.tcp_ports.len(), 1);
        assert!(matches!(
            sm.tcp_open(1 - t, &c),
            Err(SessionError::NoSession)
        ));
        assert!(sm.tcp_ports.is_empty(), "{:?}", sm.tcp_ports);
        let app = sm.apps[0].as_ref().unwrap();
        assert_eq!(app.slots.iter().flatten().count(), 0, "the slot given back");
        assert_eq!((sm.tcp_count(), sm.tcp_pending), (0, 0));
    }

    /// Two threads: a close and a shutdown of connections thread 1 owns go to thread 1's
    /// control ring, thread 0 touching neither connection; thread 1 applies them (FIN
    /// queued on its own output), and the shutdown's reply goes out only then.
    #[test]
    fn a_workers_connections_are_closed_and_shut_by_their_owner() {
        use crate::session::{tests::replies, CtlReq};
        use sluice_infra::seqpacket;
        use sluice_session::msg::{self, Msg};
        let (mut sm, peer) = crate::session::tests::with_app_on(2);
        replies(&peer);
        let locals = crate::session::tests::locals();
        let l: SocketAddr = "10.0.0.1:80".parse().unwrap();
        sm.tcp_listen(0, l, 64, &locals).unwrap();
        let c = accepted_on(&mut sm, l, 1, 4000..4200, 2);
        let ((a, aslot, ..), (b, bslot, ..)) = (c[0], c[1]);
        for m in [
            Msg::Close {
                req: msg::NO_REPLY,
                slot: aslot,
            },
            Msg::Shutdown {
                req: 9,
                slot: bslot,
            },
        ] {
            seqpacket::send(&peer, &msg::encode(&m), None).unwrap();
        }
        sm.workers[1].tcp_out.clear();
        for sid in [a, b] {
            if let Some(Proto::Tcp(_, l)) = sm.sess_mut(sid).map(|s| &mut s.proto) {
                l.queued = false;
            }
        }
        let mut ports = vec![];
        // The attach and the connections kicked it already.
        sm.workers[1].tcp_kick.store(false, Ordering::Release);
        sm.serve_app(0, &locals, &mut ports);
        sm.send_replies(&mut ports);
        assert_eq!(app_closed(&sm, a), (false, false), "thread 0 closed it");
        assert_eq!(app_closed(&sm, b), (false, false), "thread 0 shut it");
        assert!(replies(&peer).is_empty(), "a reply before the owner acted");
        assert!(sm.workers[1].tcp_kick.load(Ordering::Acquire), "not kicked");
        let mut reqs = take_ring(&sm, 1);
        assert!(matches!(
            reqs[..],
            [CtlReq::Close { sid, .. }, CtlReq::Shutdown { req: 9, .. }] if sid == a
        ));
        sm.apply_ctl(1, &mut reqs);
        assert_eq!(app_closed(&sm, a), (true, true));
        assert_eq!(app_closed(&sm, b), (false, true), "shut, not closed");
        assert_eq!(
            sm.workers[1].tcp_out,
            [a, b],
            "their FINs queued on thread 1"
        );
        sm.send_replies(&mut ports);
        assert!(matches!(
            replies(&peer)[..],
            [Msg::CloseReply { req: 9, retval: 0 }]
        ));
        assert_eq!((sm.ctl_forwarded, sm.ctl_stale), (2, 0));
    }

    /// A connection on a thread the application's segment has no queue for (the thread
    /// came after the attach: the slot's owner word says 0) is still closed by its owner,
    /// not by thread 0.
    #[test]
    fn a_close_goes_to_the_owner_even_without_its_queue_in_the_segment() {
        use crate::session::tests::replies;
        use sluice_infra::seqpacket;
        use sluice_session::msg::{self, Msg};
        let (mut sm, peer) = crate::session::tests::with_app_on(1);
        replies(&peer);
        let _ = sm.worker_kick(1);
        let locals = crate::session::tests::locals();
        let l: SocketAddr = "10.0.0.1:80".parse().unwrap();
        sm.tcp_listen(0, l, 64, &locals).unwrap();
        let (a, slot, ..) = accepted_on(&mut sm, l, 1, 4000..4200, 1)[0];
        assert_eq!(sm.apps[0].as_ref().unwrap().owner(slot), 0, "no queue 1");
        let close = msg::encode(&Msg::Close {
            req: msg::NO_REPLY,
            slot,
        });
        seqpacket::send(&peer, &close, None).unwrap();
        let mut ports = vec![];
        sm.serve_app(0, &locals, &mut ports);
        assert_eq!(app_closed(&sm, a), (false, false), "thread 0 closed it");
        let mut reqs = take_ring(&sm, 1);
        assert_eq!(reqs.len(), 1);
        sm.apply_ctl(1, &mut reqs);
        assert_eq!(app_closed(&sm, a), (true, true));
    }

    /// An application dying with a connection on thread 2 of three: only thread 2 gets a
    /// `Detach` (thread 1 holds none of its sessions).
    #[test]
    fn a_dead_applications_detach_goes_only_to_the_threads_holding_its_connections() {
        use crate::session::tests::replies;
        let (mut sm, peer) = crate::session::tests::with_app_on(3);
        replies(&peer);
        let locals = crate::session::tests::locals();
        let l: SocketAddr = "10.0.0.1:80".parse().unwrap();
        sm.tcp_listen(0, l, 64, &locals).unwrap();
        let (b, ..) = accepted_on(&mut sm, l, 2, 4000..4400, 1)[0];
        drop(peer);
        let mut ports = vec![];
        sm.serve_app(0, &locals, &mut ports);
        assert!(take_ring(&sm, 1).is_empty(), "a detach to thread 1");
        let mut reqs = take_ring(&sm, 2);
        assert!(matches!(
            reqs[..],
            [crate::session::CtlReq::Detach { app: 0, .. }]
        ));
        sm.apply_ctl(2, &mut reqs);
        assert!(sm.sess(b).is_none(), "reset by its owner");
        assert!(sm.apps[0].is_none(), "reaped with its last connection");
    }

    /// An application shuts a connection thread 1 owns and dies, thread 1 applying the
    /// shutdown before or after thread 0 saw it die, then the detach (the application is
    /// reaped with its last connection); a new application takes its index before thread
    /// 0 sends the replies: the old application's reply never reaches the new one (whose
    /// request ids also start at 1).
    #[test]
    fn a_dead_applications_shutdown_reply_never_reaches_its_successor() {
        use crate::session::tests::{attach_one, replies};
        use sluice_infra::seqpacket;
        use sluice_session::msg::{self, Msg};
        for applied_alive in [false, true] {
            let (mut sm, peer) = crate::session::tests::with_app_on(2);
            replies(&peer);
            let locals = crate::session::tests::locals();
            let l: SocketAddr = "10.0.0.1:80".parse().unwrap();
            sm.tcp_listen(0, l, 64, &locals).unwrap();
            let (_, slot, ..) = accepted_on(&mut sm, l, 1, 4000..4200, 1)[0];
            let shut = msg::encode(&Msg::Shutdown { req: 1, slot });
            seqpacket::send(&peer, &shut, None).unwrap();
            let mut ports = vec![];
            if applied_alive {
                sm.serve_app(0, &locals, &mut ports);
                sm.apply_ctl(1, &mut take_ring(&sm, 1));
                assert!(sm.has_replies(), "the reply held");
            }
            drop(peer);
            sm.serve_app(0, &locals, &mut ports);
            let mut reqs = take_ring(&sm, 1);
            assert_eq!(reqs.len(), 2 - applied_alive as usize, "the detach last");
            sm.apply_ctl(1, &mut reqs);
            assert!(sm.apps[0].is_none(), "reaped with its last connection");
            let next = attach_one(&mut sm);
            assert!(sm.apps[0].is_some(), "the index reused");
            replies(&next);
            sm.send_replies(&mut ports);
            assert_eq!(
                replies(&next),
                [],
                "the old application's reply (applied alive: {applied_alive})"
            );
            assert_eq!((sm.ctl_forwarded, sm.ctl_stale), (2, 0));
        }
    }

    /// A close forwarded to the owner never reaches a later session of the slot: the slot
    /// released by the first close and handed to a new connection (the same session index
    /// too) before the owner takes the second, stale one.
    #[test]
    fn a_stale_forwarded_close_spares_the_slots_next_connection() {
        use crate::session::{handle_index, tests::replies};
        use sluice_infra::seqpacket;
        use sluice_session::msg::{self, Msg};
        let now = Instant::now();
        let (mut sm, peer) = crate::session::tests::with_app_on(2);
        replies(&peer);
        let locals = crate::session::tests::locals();
        let l: SocketAddr = "10.0.0.1:80".parse().unwrap();
        sm.tcp_listen(0, l, 64, &locals).unwrap();
        let c = accepted_on(&mut sm, l, 1, 4000..4200, 1);
        let (a, slot, r, _) = c[0];
        // The peer resets it: the application still holds the slot until it closes.
        sm.tcp_input(l, r, &seg(778, 0, TcpFlags::RST), now)
            .unwrap();
        assert!(sm.sess(a).is_some());
        let close = msg::encode(&Msg::Close {
            req: msg::NO_REPLY,
            slot,
        });
        seqpacket::send(&peer, &close, None).unwrap();
        seqpacket::send(&peer, &close, None).unwrap();
        let mut ports = vec![];
        sm.serve_app(0, &locals, &mut ports);
        let mut reqs = take_ring(&sm, 1);
        assert_eq!(reqs.len(), 2);
        let mut second = reqs.split_off(1);
        sm.apply_ctl(1, &mut reqs);
        assert!(sm.sess(a).is_none(), "the first close released it");
        let n = accepted_on(&mut sm, l, 1, 4200..4400, 1);
        let (b, bslot, ..) = n[0];
        assert_eq!((bslot, handle_index(b)), (slot, handle_index(a)), "reused");
        sm.apply_ctl(1, &mut second);
        assert_eq!(
            app_closed(&sm, b),
            (false, false),
            "the new connection closed"
        );
    }

    /// An application closes a connection thread 1 owns and dies before thread 1 took the
    /// close: thread 1 applies the close, then the detach behind it, so the closed
    /// connection lingers (its FIN goes out) and only the open one is reset; the
    /// application is reaped when its last connection is gone.
    #[test]
    fn a_close_forwarded_before_the_application_died_still_lingers() {
        use crate::session::tests::replies;
        use sluice_infra::seqpacket;
        use sluice_session::msg::{self, Msg};
        let (mut sm, peer) = crate::session::tests::with_app_on(2);
        replies(&peer);
        let locals = crate::session::tests::locals();
        let l: SocketAddr = "10.0.0.1:80".parse().unwrap();
        sm.tcp_listen(0, l, 64, &locals).unwrap();
        let c = accepted_on(&mut sm, l, 1, 4000..4200, 2);
        let ((a, aslot, ..), (b, ..)) = (c[0], c[1]);
        let close = msg::encode(&Msg::Close {
            req: msg::NO_REPLY,
            slot: aslot,
        });
        seqpacket::send(&peer, &close, None).unwrap();
        drop(peer);
        sm.workers[1].ctl_out.clear();
        let mut ports = vec![];
        sm.serve_app(0, &locals, &mut ports);
        assert!(sm.apps[0].as_ref().is_some_and(|x| x.dead), "kept, dead");
        assert!(
            sm.sess(a).is_some() && sm.sess(b).is_some(),
            "thread 0 acted"
        );
        let mut reqs = take_ring(&sm, 1);
        assert_eq!(reqs.len(), 2, "the close and the detach");
        sm.apply_ctl(1, &mut reqs);
        assert_eq!(app_closed(&sm, a), (true, true), "lingers to send its FIN");
        assert!(sm.sess(b).is_none(), "the open one is reset");
        let rsts: Vec<_> = sm.workers[1].ctl_out.iter().map(|x| x.1).collect();
        assert_eq!(rsts, [c[1].2], "one RST, to the open connection's peer");
        sm.tcp_abort(a);
        assert!(sm.apps[0].is_none(), "reaped with its last connection");
    }
}
