//! The memif control plane: sockets, the handshake state machine and connection lifetime.
//! Runs on the main thread from the `memif-process` node (off the fast path); publishes each
//! connection's mapped rings to the data-path nodes through [`IfShared`].
//!
//! Master: listens; on accept sends HELLO; INIT selects the interface (id, secret, mode);
//! ADD_REGION / ADD_RING are acknowledged and collected; CONNECT maps and validates them
//! (sizes, ring bounds, cookies) and is answered with CONNECTED.
//! Slave: connects (retried every second); on HELLO creates the region (rings, then buffers;
//! zero-copy: rings only, and the shared buffer arena is announced as region 1)
//! and one eventfd per ring and sends INIT, ADD_REGION, ADD_RING..., CONNECT one at a time,
//! each after the previous ACK; CONNECTED completes the link.
//! Any protocol error, bad message, bad ring, timeout or peer close tears the connection down
//! with a logged reason (sent to the peer in DISCONNECT when the socket still works).

use super::gso;
use super::proto::{self, AddRing, Hello, Init, Mode, Msg};
use super::shm::{self, Desc, Region, Ring};
use super::sock::{self, Recv};
use super::{DataConn, IfShared, MemifShared, PollGaps, Queue};
use std::collections::{BTreeMap, VecDeque};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU16};
use std::sync::Arc;

/// Most queues per direction Sluice creates or accepts.
pub const MAX_QUEUES: usize = 16;
/// A handshake must complete within this many seconds.
const HANDSHAKE_TIMEOUT: f64 = 5.0;
/// A slave retries connecting this often (seconds).
const RETRY: f64 = 1.0;

/// Interface configuration (`create interface memif ...`).
#[derive(Clone, Debug)]
pub struct IfCfg {
    /// Interface id (INIT matches on it).
    pub id: u32,
    /// Socket id.
    pub socket_id: u32,
    /// log2 of the ring size.
    pub log2_ring: u8,
    /// Shared-memory buffer size (slave).
    pub buffer_size: u32,
    /// MAC address.
    pub mac: [u8; 6],
    /// Slave (connects, creates the memory) or master (listens).
    pub slave: bool,
    /// Queues the slave receives on (M2S rings).
    pub rx_queues: u8,
    /// Queues the slave transmits on (S2M rings).
    pub tx_queues: u8,
    /// Ethernet or IP.
    pub mode: Mode,
    /// Secret (empty: none).
    pub secret: String,
    /// Slave zero-copy (`zero-copy`): the pool whose shared data array becomes region 1.
    pub zero_copy: Option<ZeroCopy>,
    /// `gso`: offer (slave) or accept (master) GSO aggregates whole ([`gso`]).
    pub gso: bool,
}

/// The shared buffer pool a zero-copy slave announces (region 1) and takes buffers from.
#[derive(Clone)]
pub struct ZeroCopy(pub Arc<sluice_buffer::BufferPool>);

impl std::fmt::Debug for ZeroCopy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ZeroCopy({} buffers)", self.0.len())
    }
}

/// Connection state.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// No peer.
    Disconnected,
    /// Handshake in progress.
    Connecting,
    /// Rings mapped, link up.
    Connected,
}

/// A control channel to a peer and what the handshake collected so far.
struct Channel {
    fd: OwnedFd,
    since: f64,
    // Master: what the slave announced.
    regions: Vec<(OwnedFd, u64)>,
    /// The Sluice extension's feature bits in the slave's INIT.
    peer_features: u32,
    rings: Vec<(AddRing, OwnedFd)>,
    // Slave: the memory it created and the messages still to send (fds borrowed from it).
    prepared: Option<DataConn>,
    outq: VecDeque<([u8; proto::MSG_SIZE], Option<RawFd>)>,
}

impl Channel {
    fn new(fd: OwnedFd, now: f64) -> Channel {
        Channel {
            fd,
            since: now,
            regions: Vec::new(),
            peer_features: 0,
            rings: Vec::new(),
            prepared: None,
            outq: VecDeque::new(),
        }
    }
}

/// One memif interface as the control plane knows it.
pub struct Iface {
    /// `memif<socket>/<id>`.
    pub name: String,
    /// Configuration.
    pub cfg: IfCfg,
    /// Shared with the data path.
    pub sh: Arc<IfShared>,
    /// State.
    pub state: State,
    ch: Option<Channel>,
    /// Why the last connection ended (or failed).
    pub last_reason: String,
    /// Peer application name (HELLO / INIT).
    pub remote_name: String,
    /// Peer interface name (CONNECT / CONNECTED).
    pub remote_if_name: String,
    next_retry: f64,
    /// Connections established so far.
    pub connects: u64,
}

/// A socket (`create memif socket`).
pub struct SockEnt {
    /// Path or `@abstract` name.
    pub path: String,
    listener: Option<OwnedFd>,
    /// Last listen error.
    pub listen_err: Option<String>,
    next_listen: f64,
}

impl SockEnt {
    /// Whether Sluice listens on it.
    pub fn listening(&self) -> bool {
        self.listener.is_some()
    }
}

/// An accepted connection that has not sent INIT yet.
struct Pending {
    ch: Channel,
    socket_id: u32,
}

/// The memif control plane.
pub struct Ctl {
    /// Sockets by id.
    pub sockets: BTreeMap<u32, SockEnt>,
    /// Interfaces.
    pub ifs: Vec<Iface>,
    pending: Vec<Pending>,
    /// Data-path view.
    pub shared: Arc<MemifShared>,
    /// Protocol errors seen (malformed messages, bad rings, ...).
    pub errors: u64,
}

/// Default socket (id 0), as in VPP.
pub const DEFAULT_SOCKET: &str = "/run/vpp/memif.sock";

impl Ctl {
    /// An empty control plane with socket 0 at the default path.
    pub fn new(shared: Arc<MemifShared>) -> Ctl {
        let mut sockets = BTreeMap::new();
        sockets.insert(
            0,
            SockEnt {
                path: DEFAULT_SOCKET.to_string(),
                listener: None,
                listen_err: None,
                next_listen: 0.0,
            },
        );
        Ctl {
            sockets,
            ifs: Vec::new(),
            pending: Vec::new(),
            shared,
            errors: 0,
        }
    }

    /// Adds (or, when unused, replaces) socket `id`.
    pub fn add_socket(&mut self, id: u32, path: &str) -> Result<(), String> {
        if self.ifs.iter().any(|i| i.cfg.socket_id == id) {
            if self.sockets.get(&id).is_some_and(|s| s.path == path) {
                return Ok(());
            }
            return Err(format!("socket id {id} is in use by an interface"));
        }
        if let Some((other, _)) = self
            .sockets
            .iter()
            .find(|(k, s)| **k != id && s.path == path)
        {
            return Err(format!("`{path}' is already socket id {other}"));
        }
        self.sockets.insert(
            id,
            SockEnt {
                path: path.to_string(),
                listener: None,
                listen_err: None,
                next_listen: 0.0,
            },
        );
        Ok(())
    }

    /// Deletes socket `id` (must be unused).
    pub fn del_socket(&mut self, id: u32) -> Result<(), String> {
        if self.ifs.iter().any(|i| i.cfg.socket_id == id) {
            return Err(format!("socket id {id} is in use by an interface"));
        }
        match self.sockets.remove(&id) {
            Some(s) => {
                close_listener(s);
                Ok(())
            }
            None => Err(format!("socket id {id} does not exist")),
        }
    }

    /// Adds an interface (the vnet interface already exists).
    pub fn add_iface(&mut self, name: String, cfg: IfCfg, sh: Arc<IfShared>) {
        self.ifs.push(Iface {
            name,
            cfg,
            sh: sh.clone(),
            state: State::Disconnected,
            ch: None,
            last_reason: String::new(),
            remote_name: String::new(),
            remote_if_name: String::new(),
            next_retry: 0.0,
            connects: 0,
        });
        self.shared.add(sh);
    }

    /// Removes an interface, telling the peer.
    pub fn del_iface(&mut self, name: &str) -> Option<u32> {
        let i = self.ifs.iter().position(|x| x.name == name)?;
        disconnect(&mut self.ifs[i], "interface deleted", true, 0.0);
        let x = self.ifs.remove(i);
        self.shared.remove(x.sh.sw_if_index);
        let sock = x.cfg.socket_id;
        if !self
            .ifs
            .iter()
            .any(|i| i.cfg.socket_id == sock && !i.cfg.slave)
        {
            if let Some(s) = self.sockets.get_mut(&sock) {
                if let Some(l) = s.listener.take() {
                    drop(l);
                    if !s.path.starts_with('@') {
                        sluice_infra::unix_socket::remove_socket(std::path::Path::new(&s.path));
                    }
                }
            }
            self.pending.retain(|p| p.socket_id != sock);
        }
        Some(x.sh.sw_if_index)
    }

    /// How soon the control plane wants to run again (seconds): 2 ms while a handshake is in
    /// flight, 20 ms otherwise (accepting, noticing a disconnect, slave reconnect timers), so
    /// an idle daemon with memif interfaces wakes 50 times a second, not 500.
    pub fn tick(&self) -> f64 {
        if self.ifs.is_empty() {
            0.1
        } else if !self.pending.is_empty() || self.ifs.iter().any(|x| x.state == State::Connecting)
        {
            0.002
        } else {
            0.02
        }
    }

    /// Zero-copy slaves: takes back (into `out`) the tx buffers the masters consumed, on every
    /// queue whose lock is free (a queue being transmitted on reclaims them itself).
    pub fn reclaim_tx(&self, out: &mut Vec<sluice_buffer::BufIdx>) {
        for x in &self.ifs {
            let Some(conn) = x.sh.current().filter(|c| c.zc.is_some()) else {
                continue;
            };
            for q in &conn.tx {
                if q.ring.tail() == q.last.load(std::sync::atomic::Ordering::Relaxed) {
                    continue;
                }
                if let Some(_g) = super::node::QGuard::try_lock(q) {
                    q.reclaim_tx(q.ring.head(), out);
                }
            }
        }
    }

    /// One control-plane step: accept, receive, handshake, timeouts, reconnects.
    pub fn poll(&mut self, now: f64) {
        self.poll_listeners(now);
        self.poll_pending(now);
        for k in 0..self.ifs.len() {
            self.poll_iface(k, now);
        }
    }

    fn poll_listeners(&mut self, now: f64) {
        for (&id, s) in self.sockets.iter_mut() {
            let wanted = self
                .ifs
                .iter()
                .any(|i| i.cfg.socket_id == id && !i.cfg.slave);
            if !wanted {
                continue;
            }
            if s.listener.is_none() && now >= s.next_listen {
                match sock::listen(&s.path) {
                    Ok(l) => {
                        log::info!("memif: listening on {}", s.path);
                        s.listener = Some(l);
                        s.listen_err = None;
                    }
                    Err(e) => {
                        if s.listen_err.is_none() {
                            log::warn!("memif: cannot listen on {}: {e}", s.path);
                        }
                        s.listen_err = Some(e.to_string());
                        s.next_listen = now + RETRY;
                    }
                }
            }
            let Some(l) = &s.listener else { continue };
            while let Ok(Some(fd)) = sock::accept(l) {
                let hello = Msg::Hello(Hello {
                    name: format!("Sluice {}", env!("CARGO_PKG_VERSION")),
                    min_version: proto::VERSION,
                    max_version: proto::VERSION,
                    max_region: 255,
                    max_m2s_ring: (MAX_QUEUES - 1) as u16,
                    max_s2m_ring: (MAX_QUEUES - 1) as u16,
                    max_log2_ring_size: proto::MAX_LOG2_RING_SIZE,
                });
                if sock::send(&fd, &proto::encode(&hello), None).is_ok() {
                    self.pending.push(Pending {
                        ch: Channel::new(fd, now),
                        socket_id: id,
                    });
                }
            }
        }
    }

    fn poll_pending(&mut self, now: f64) {
        let mut k = 0;
        while k < self.pending.len() {
            let p = &self.pending[k];
            let r = match sock::recv(&p.ch.fd) {
                Ok(Recv::None) if now - p.ch.since > HANDSHAKE_TIMEOUT => {
                    Err("timeout waiting for INIT".to_string())
                }
                Ok(Recv::None) => {
                    k += 1;
                    continue;
                }
                Ok(Recv::Closed) => Err("peer closed before INIT".to_string()),
                Err(e) => Err(format!("socket error: {e}")),
                Ok(Recv::Msg {
                    buf,
                    len,
                    truncated,
                    ..
                }) => match decode(&buf, len, truncated) {
                    Ok(Msg::Init(init)) => self
                        .match_init(p.socket_id, &init)
                        .map(|(i, name)| (i, name, init.features)),
                    Ok(m) => Err(format!("expected INIT, got {}", msg_name(&m))),
                    Err(e) => Err(e),
                },
            };
            let mut p = self.pending.swap_remove(k);
            match r {
                Ok((i, name, features)) => {
                    p.ch.peer_features = features;
                    let x = &mut self.ifs[i];
                    x.remote_name = name;
                    x.state = State::Connecting;
                    let _ = sock::send(&p.ch.fd, &proto::encode(&Msg::Ack), None);
                    x.ch = Some(p.ch);
                }
                Err(reason) => {
                    self.errors += 1;
                    log::warn!(
                        "memif: rejecting connection on socket {}: {reason}",
                        p.socket_id
                    );
                    send_disconnect(&p.ch.fd, &reason);
                }
            }
        }
    }

    fn match_init(&self, socket_id: u32, init: &Init) -> Result<(usize, String), String> {
        if init.version != proto::VERSION {
            return Err(format!(
                "incompatible memif version {}.{}",
                init.version >> 8,
                init.version & 0xff
            ));
        }
        let i = self
            .ifs
            .iter()
            .position(|x| x.cfg.socket_id == socket_id && !x.cfg.slave && x.cfg.id == init.id)
            .ok_or_else(|| format!("no master interface with id {}", init.id))?;
        let x = &self.ifs[i];
        if x.ch.is_some() {
            return Err(format!("interface id {} already connected", init.id));
        }
        if !x.cfg.secret.is_empty() && x.cfg.secret != init.secret {
            return Err("incorrect secret".to_string());
        }
        if Mode::from_code(init.mode) != Some(x.cfg.mode) {
            return Err(format!(
                "mode mismatch (peer {}, local {})",
                init.mode,
                x.cfg.mode.as_str()
            ));
        }
        Ok((i, init.name.clone()))
    }

    fn poll_iface(&mut self, k: usize, now: f64) {
        let x = &mut self.ifs[k];
        if x.ch.is_none() {
            if x.cfg.slave && now >= x.next_retry {
                x.next_retry = now + RETRY;
                let path = match self.sockets.get(&x.cfg.socket_id) {
                    Some(s) => s.path.clone(),
                    None => return,
                };
                if let Ok(fd) = sock::connect(&path) {
                    x.ch = Some(Channel::new(fd, now));
                    x.state = State::Connecting;
                }
            }
            return;
        }
        // Bounded per tick so a flooding peer cannot starve the main thread.
        for _ in 0..64 {
            let Some(ch) = x.ch.as_ref() else { return };
            if x.state == State::Connecting && now - ch.since > HANDSHAKE_TIMEOUT {
                self.errors += 1;
                disconnect(x, "handshake timeout", true, now);
                return;
            }
            let r = match sock::recv(&ch.fd) {
                Ok(Recv::None) => return,
                Ok(Recv::Closed) => Err(("peer closed the connection".to_string(), false)),
                Err(e) => Err((format!("socket error: {e}"), false)),
                Ok(Recv::Msg {
                    buf,
                    len,
                    fds,
                    truncated,
                }) => match decode(&buf, len, truncated) {
                    Ok(m) => {
                        if x.cfg.slave {
                            slave_msg(x, m, fds)
                        } else {
                            master_msg(x, m, fds)
                        }
                    }
                    Err(e) => Err((e, true)),
                },
            };
            if let Err((reason, tell)) = r {
                if tell {
                    self.errors += 1;
                }
                disconnect(x, &reason, tell, now);
                return;
            }
        }
    }
}

fn close_listener(s: SockEnt) {
    if s.listener.is_some() && !s.path.starts_with('@') {
        sluice_infra::unix_socket::remove_socket(std::path::Path::new(&s.path));
    }
}

fn decode(buf: &[u8; proto::MSG_SIZE], len: usize, truncated: bool) -> Result<Msg, String> {
    if truncated {
        return Err("truncated control message".to_string());
    }
    proto::decode(&buf[..len.min(proto::MSG_SIZE)]).map_err(|e| format!("malformed message: {e}"))
}

fn msg_name(m: &Msg) -> &'static str {
    match m {
        Msg::Ack => "ACK",
        Msg::Hello(_) => "HELLO",
        Msg::Init(_) => "INIT",
        Msg::AddRegion { .. } => "ADD_REGION",
        Msg::AddRing(_) => "ADD_RING",
        Msg::Connect { .. } => "CONNECT",
        Msg::Connected { .. } => "CONNECTED",
        Msg::Disconnect { .. } => "DISCONNECT",
    }
}

fn send_disconnect(fd: &OwnedFd, reason: &str) {
    let m = Msg::Disconnect {
        code: 0,
        reason: reason.to_string(),
    };
    let _ = sock::send(fd, &proto::encode(&m), None);
}

/// Tears a connection down: tells the peer (if `tell`), unpublishes the rings (the data path
/// drops its reference at its next poll; the memory is unmapped with the last one).
fn disconnect(x: &mut Iface, reason: &str, tell: bool, now: f64) {
    if let Some(ch) = x.ch.take() {
        if tell {
            send_disconnect(&ch.fd, reason);
        }
        if x.state == State::Connected || !reason.is_empty() {
            log::info!("memif {}: disconnected: {reason}", x.name);
        }
    }
    x.sh.publish(None);
    x.state = State::Disconnected;
    x.last_reason = reason.to_string();
    x.next_retry = now + RETRY;
}

type MsgResult = Result<(), (String, bool)>;

fn proto_err(s: impl Into<String>) -> MsgResult {
    Err((s.into(), true))
}

fn master_msg(x: &mut Iface, m: Msg, mut fds: Vec<OwnedFd>) -> MsgResult {
    let Some(ch) = x.ch.as_mut() else {
        return Ok(());
    };
    match m {
        Msg::Disconnect { reason, .. } => Err((format!("peer: {reason}"), false)),
        _ if x.state == State::Connected => proto_err(format!("unexpected {}", msg_name(&m))),
        Msg::AddRegion { index, size } => {
            if index as usize != ch.regions.len() || index > 255 {
                return proto_err(format!("unexpected region index {index}"));
            }
            let Some(fd) = fds.pop() else {
                return proto_err("ADD_REGION without fd");
            };
            if size == 0 || size > shm::MAX_REGION_SIZE {
                return proto_err(format!("bad region size {size}"));
            }
            ch.regions.push((fd, size));
            ack(ch)
        }
        Msg::AddRing(r) => {
            let Some(fd) = fds.pop() else {
                return proto_err("ADD_RING without fd");
            };
            if ch.rings.len() >= 2 * MAX_QUEUES {
                return proto_err("too many rings");
            }
            ch.rings.push((r, fd));
            ack(ch)
        }
        Msg::Connect { if_name } => {
            let mut conn = match master_build(ch) {
                Ok(c) => c,
                Err(e) => return proto_err(e),
            };
            conn.gso = gso::agree(x.cfg.gso, ch.peer_features);
            let reply = Msg::Connected {
                if_name: x.name.clone(),
                features: gso::offer(conn.gso),
            };
            if let Err(e) = sock::send(&ch.fd, &proto::encode(&reply), None) {
                return Err((format!("socket error: {e}"), false));
            }
            x.remote_if_name = if_name;
            connected(x, conn);
            Ok(())
        }
        m => proto_err(format!("unexpected {}", msg_name(&m))),
    }
}

fn ack(ch: &Channel) -> MsgResult {
    sock::send(&ch.fd, &proto::encode(&Msg::Ack), None)
        .map_err(|e| (format!("socket error: {e}"), false))
}

fn connected(x: &mut Iface, conn: DataConn) {
    x.state = State::Connected;
    x.connects += 1;
    x.last_reason.clear();
    log::info!(
        "memif {}: connected to `{}' ({}), {} rx / {} tx queues",
        x.name,
        x.remote_if_name,
        x.remote_name,
        conn.rx.len(),
        conn.tx.len()
    );
    x.sh.publish(Some(Arc::new(conn)));
}

/// Master side of CONNECT: maps the announced regions and validates every ring.
fn master_build(ch: &mut Channel) -> Result<DataConn, String> {
    if ch.regions.is_empty() {
        return Err("no regions".into());
    }
    let mut regions = Vec::new();
    for (fd, size) in ch.regions.drain(..) {
        regions.push(Region::map(fd, size)?);
    }
    let mut s2m: Vec<Option<Queue>> = Vec::new();
    let mut m2s: Vec<Option<Queue>> = Vec::new();
    for (r, fd) in ch.rings.drain(..) {
        let region = regions
            .get(r.region as usize)
            .ok_or_else(|| format!("ring in unknown region {}", r.region))?;
        if r.log2_ring_size == 0 || r.log2_ring_size > proto::MAX_LOG2_RING_SIZE {
            return Err(format!("bad ring size 2^{}", r.log2_ring_size));
        }
        if r.private_hdr_size != 0 {
            return Err("private headers not supported".into());
        }
        let ring = Ring::new(region, r.offset as u64, r.log2_ring_size)
            .ok_or_else(|| format!("ring at offset {} outside its region", r.offset))?;
        if ring.cookie() != proto::COOKIE {
            return Err(format!("wrong ring cookie {:#x}", ring.cookie()));
        }
        let list = if r.is_s2m() { &mut s2m } else { &mut m2s };
        let i = r.index as usize;
        if i >= MAX_QUEUES {
            return Err(format!("ring index {i} too large"));
        }
        if list.len() <= i {
            list.resize_with(i + 1, || None);
        }
        if list[i].is_some() {
            return Err(format!("duplicate ring {i}"));
        }
        let last = if r.is_s2m() {
            // Our rx ring: we poll it, so the slave need not interrupt us.
            ring.set_flags(ring.flags() | shm::RING_FLAG_MASK_INT);
            ring.tail()
        } else {
            ring.tail()
        };
        list[i] = Some(Queue::new(ring, fd, last, 0));
    }
    let rx: Option<Vec<Queue>> = s2m.into_iter().collect();
    let tx: Option<Vec<Queue>> = m2s.into_iter().collect();
    match (rx, tx) {
        (Some(rx), Some(tx)) if !rx.is_empty() && !tx.is_empty() => Ok(DataConn {
            regions,
            rx,
            tx,
            is_slave: false,
            buffer_size: 0,
            zc: None,
            gso: false,
        }),
        _ => Err("missing rings (need S2M and M2S rings numbered from 0)".into()),
    }
}

fn slave_msg(x: &mut Iface, m: Msg, _fds: Vec<OwnedFd>) -> MsgResult {
    let Some(ch) = x.ch.as_mut() else {
        return Ok(());
    };
    match m {
        Msg::Disconnect { reason, .. } => Err((format!("peer: {reason}"), false)),
        _ if x.state == State::Connected => proto_err(format!("unexpected {}", msg_name(&m))),
        Msg::Hello(h) if ch.prepared.is_none() => {
            if h.min_version > proto::VERSION || h.max_version < proto::VERSION {
                return proto_err(format!(
                    "incompatible memif version {:#x}-{:#x}",
                    h.min_version, h.max_version
                ));
            }
            x.remote_name = h.name.clone();
            let conn = match &x.cfg.zero_copy {
                Some(zc) => slave_build_zc(&x.cfg, &h, &zc.0),
                None => slave_build(&x.cfg, &h),
            }
            .map_err(|e| (e, true))?;
            let mut q = VecDeque::new();
            let init = Msg::Init(Init {
                version: proto::VERSION,
                id: x.cfg.id,
                mode: x.cfg.mode.code(),
                secret: x.cfg.secret.clone(),
                name: format!("Sluice {}", env!("CARGO_PKG_VERSION")),
                features: gso::offer(x.cfg.gso && gso::conn_fits(&conn)),
            });
            q.push_back((proto::encode(&init), None));
            for (i, r) in conn.regions.iter().enumerate() {
                let m = Msg::AddRegion {
                    index: i as u16,
                    size: r.size() as u64,
                };
                q.push_back((proto::encode(&m), Some(r.raw_fd())));
            }
            let region0 = conn.regions[0].range(0, 1).map(|p| p as usize).unwrap_or(0);
            for (s2m, list) in [(true, &conn.tx), (false, &conn.rx)] {
                for (i, qu) in list.iter().enumerate() {
                    let m = Msg::AddRing(AddRing {
                        flags: if s2m { proto::RING_FLAG_S2M } else { 0 },
                        index: i as u16,
                        region: 0,
                        offset: (qu.ring.base_addr() - region0) as u32,
                        log2_ring_size: qu.ring.log2(),
                        private_hdr_size: 0,
                    });
                    q.push_back((proto::encode(&m), Some(qu.int_fd.as_raw_fd())));
                }
            }
            q.push_back((
                proto::encode(&Msg::Connect {
                    if_name: x.name.clone(),
                }),
                None,
            ));
            ch.prepared = Some(conn);
            ch.outq = q;
            send_next(ch)
        }
        Msg::Ack if ch.prepared.is_some() => send_next(ch),
        Msg::Connected { if_name, features } if ch.prepared.is_some() && ch.outq.is_empty() => {
            x.remote_if_name = if_name;
            let mut conn = ch
                .prepared
                .take()
                .ok_or_else(|| ("no rings".to_string(), true))?;
            conn.gso = gso::agree(x.cfg.gso && gso::conn_fits(&conn), features);
            connected(x, conn);
            Ok(())
        }
        m => proto_err(format!("unexpected {}", msg_name(&m))),
    }
}

fn send_next(ch: &mut Channel) -> MsgResult {
    if let Some((m, fd)) = ch.outq.pop_front() {
        sock::send(&ch.fd, &m, fd).map_err(|e| (format!("socket error: {e}"), false))?;
    }
    Ok(())
}

/// Slave side: (S2M rings, M2S rings, log2 ring size) as configured, within the master's
/// limits from its hello (at least one ring each way, rings of at least 2 slots).
fn slave_rings(cfg: &IfCfg, h: &Hello) -> (usize, usize, u8) {
    let n_s2m = (cfg.tx_queues as usize)
        .min(h.max_s2m_ring as usize + 1)
        .max(1);
    let n_m2s = (cfg.rx_queues as usize)
        .min(h.max_m2s_ring as usize + 1)
        .max(1);
    (n_s2m, n_m2s, cfg.log2_ring.min(h.max_log2_ring_size).max(1))
}

/// Slave side: creates region 0 (S2M rings, M2S rings, then every ring's buffers) and one
/// eventfd per ring, within the master's limits.
fn slave_build(cfg: &IfCfg, h: &Hello) -> Result<DataConn, String> {
    let (n_s2m, n_m2s, log2) = slave_rings(cfg, h);
    let rs = 1usize << log2;
    let rb = shm::ring_bytes(log2);
    let n = n_s2m + n_m2s;
    let bufs_at = n * rb;
    let bs = cfg.buffer_size as usize;
    let size = bufs_at + n * rs * bs;
    if size > u32::MAX as usize {
        return Err("shared memory larger than 4 GiB (reduce ring-size/buffer-size)".into());
    }
    let region = Region::create("memif region 0", size).map_err(|e| format!("memfd: {e}"))?;
    let mut tx = Vec::new();
    let mut rx = Vec::new();
    for g in 0..n {
        let ring = Ring::new(&region, (g * rb) as u64, log2).ok_or("ring layout")?;
        let base = (bufs_at + g * rs * bs) as u64;
        ring.set_cookie(proto::COOKIE);
        ring.set_head(0);
        ring.set_tail(0);
        let s2m = g < n_s2m;
        for j in 0..rs {
            ring.set_desc(
                j as u16,
                Desc {
                    flags: 0,
                    region: 0,
                    length: bs as u32,
                    offset: (base + (j * bs) as u64) as u32,
                    metadata: 0,
                },
            );
        }
        let fd = shm::eventfd().map_err(|e| format!("eventfd: {e}"))?;
        if s2m {
            ring.set_flags(0);
            tx.push(Queue::new(ring, fd, 0, base));
        } else {
            // Our rx ring: polled, and every buffer handed to the master up front.
            ring.set_flags(shm::RING_FLAG_MASK_INT);
            ring.set_head(rs as u16);
            rx.push(Queue::new(ring, fd, 0, base));
        }
    }
    Ok(DataConn {
        regions: vec![region],
        rx,
        tx,
        is_slave: true,
        buffer_size: bs as u32,
        zc: None,
        gso: false,
    })
}

/// Zero-copy slave: region 0 holds the rings only; region 1 is the buffer pool's shared data
/// array. M2S rings start empty (`memif-input` hands out fresh buffers at its first poll),
/// S2M descriptors are written by `memif-tx` pointing at the packets' own buffers.
fn slave_build_zc(
    cfg: &IfCfg,
    h: &Hello,
    pool: &Arc<sluice_buffer::BufferPool>,
) -> Result<DataConn, String> {
    let (n_s2m, n_m2s, log2) = slave_rings(cfg, h);
    let rs = 1usize << log2;
    let rb = shm::ring_bytes(log2);
    let n = n_s2m + n_m2s;
    let region = Region::create("memif region 0", n * rb).map_err(|e| format!("memfd: {e}"))?;
    let (base, len) = pool.region();
    if len > u32::MAX as usize {
        return Err("buffer arena larger than 4 GiB: memif offsets are 32-bit".into());
    }
    let fd = pool
        .shared_fd()
        .ok_or("zero-copy needs `buffers { shared }'")?;
    // SAFETY: dup of the pool's memfd, owned by the returned OwnedFd.
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return Err(format!("dup: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: `dup` is a fresh fd nobody else owns.
    let dup = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(dup) };
    let arena = Region::borrowed(base, len, dup);
    let mut tx = Vec::new();
    let mut rx = Vec::new();
    for g in 0..n {
        let ring = Ring::new(&region, (g * rb) as u64, log2).ok_or("ring layout")?;
        ring.set_cookie(proto::COOKIE);
        ring.set_head(0);
        ring.set_tail(0);
        for j in 0..rs {
            ring.set_desc(j as u16, Desc::default());
        }
        let fd = shm::eventfd().map_err(|e| format!("eventfd: {e}"))?;
        let mut q = Queue::new(ring, fd, 0, 0);
        q.shadow = (0..rs)
            .map(|_| std::sync::atomic::AtomicU32::new(0))
            .collect();
        if g < n_s2m {
            ring.set_flags(0);
            tx.push(q);
        } else {
            ring.set_flags(shm::RING_FLAG_MASK_INT);
            rx.push(q);
        }
    }
    Ok(DataConn {
        regions: vec![region, arena],
        rx,
        tx,
        is_slave: true,
        buffer_size: pool.data_size() as u32,
        zc: Some(pool.clone()),
        gso: false,
    })
}

impl Queue {
    /// A queue over `ring` with interrupt fd `fd`, local index `last`, own buffers at `base`.
    pub fn new(ring: Ring, fd: OwnedFd, last: u16, base: u64) -> Queue {
        Queue {
            ring,
            int_fd: fd,
            lock: AtomicBool::new(false),
            last: AtomicU16::new(last),
            buf_base: base,
            shadow: Box::new([]),
            gaps: PollGaps::default(),
        }
    }
}
