//! The session layer's state (main thread, shared with the data-path nodes of thread 0
//! behind one mutex taken once per frame): attached applications and their segments, the
//! session table (connected 5-tuples, then listeners by local address and port, exact
//! before wildcard), port registration with `ip4-local`/`ip6-local`, and the control
//! protocol over the application socket (`sluice_session::msg`). Thread 0 serves the
//! control socket; a request acting on a connection another thread owns (close,
//! shutdown, an application gone) goes to that thread's control ring ([`CtlReq`]), and
//! the owner applies it to its own table.

use sluice_infra::seqpacket::{self, Recv};
use sluice_infra::shm::{self, Region};
use sluice_session::msg::{self, Msg};
use sluice_session::seg::{self, EvQ, Fifo, Geometry};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Configuration (`session { ... }`, `session enable`).
#[derive(Clone, Debug)]
pub struct Config {
    /// `enable`: start the session layer with the daemon.
    pub enabled: bool,
    /// `event-queue-length`: entries of each application's event queues.
    pub evq_len: u32,
    /// `app-socket`: where applications attach.
    pub app_socket: String,
    /// `fifo-size`: bytes of each session FIFO.
    pub fifo_size: u32,
    /// `sessions-per-app`: session slots of each application's segment.
    pub sessions_per_app: u32,
    /// `tcp-syn-backlog`: connections in the handshake per listener (default).
    pub syn_backlog: u32,
    /// `tcp-syn-cookies on|off`: answer SYNs past a full backlog with a SYN cookie.
    pub syn_cookies: bool,
    /// `tcp-delayed-ack <ms>`: longest wait of an ACK for in-order data (0: off).
    pub delayed_ack: std::time::Duration,
    /// `tcp-keepalive <idle s> <interval s> <probes>` (default for new connections).
    pub keepalive: Option<crate::tcp::Keepalive>,
    /// `tcp-tso on|off|<bytes>`: new data goes out as TSO aggregates of up to this many
    /// payload bytes (`on`: [`crate::tcp::TSO_MAX`]; 0: off) (cut by the
    /// interface, the kernel behind af_packet/tap, or `gso-segment`).
    pub tso: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            enabled: false,
            evq_len: 1024,
            app_socket: "/run/sluice/app.sock".into(),
            fifo_size: 64 * 1024,
            sessions_per_app: 64,
            syn_backlog: 128,
            syn_cookies: true,
            delayed_ack: std::time::Duration::from_millis(40),
            keepalive: None,
            tso: 0,
        }
    }
}

/// What every session thread reads and only thread 0's control path changes: the
/// configuration, Sluice's interface addresses and the key of ISNs and SYN cookies.
/// Thread 0 changes it through `Arc::make_mut` ([`SessionMain::set_cfg`], the control
/// poll's address refresh): in place while no one else holds the `Arc`, on a fresh copy
/// while another holder has it, so a thread holding an `Arc` of it reads one consistent
/// set with no session lock (the holder keeps the old set until it takes the new `Arc`).
#[derive(Debug, Clone)]
pub struct Params {
    /// Configuration.
    pub cfg: Config,
    /// Sluice's interface addresses and prefix lengths (refreshed by the control poll).
    pub locals: Vec<(IpAddr, u8)>,
    /// The secret of initial sequence numbers (RFC 6528) and SYN cookies, drawn once.
    pub iss_key: u64,
}

impl Default for Params {
    fn default() -> Self {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(0x5eed);
        Params {
            cfg: Config::default(),
            locals: Vec::new(),
            iss_key: h.finish() | 1,
        }
    }
}

/// Session-layer errors (the CLI prints them; an application gets the errno).
#[derive(Debug, Clone, thiserror::Error)]
pub enum SessionError {
    /// The session layer is off.
    #[error("session layer is disabled (session enable)")]
    Disabled,
    /// The app socket could not be bound.
    #[error("app-socket `{0}': {1}")]
    Socket(String, String),
    /// Address in use.
    #[error("address in use")]
    InUse,
    /// The address is not one of Sluice's.
    #[error("address not local")]
    NotLocal,
    /// No session slot left in the application's segment, or no ephemeral port.
    #[error("no free session slot or port")]
    NoSpace,
    /// Bad argument.
    #[error("invalid argument")]
    Invalid,
    /// Unknown session.
    #[error("no such session")]
    NoSession,
    /// A TCP operation on a session that is not a connection (yet).
    #[error("not connected")]
    NotConnected,
    /// `ip4-local`/`ip6-local` could not be told to hand the session's packets (its UDP
    /// port, or TCP) to the host stack on every thread; it was undone.
    #[error("local delivery not registered")]
    NotRegistered,
}

impl SessionError {
    /// A failed `ip_local` registration: a port or protocol another node serves (a
    /// tunnel's UDP port) is in use; anything else is `NotRegistered`.
    pub fn from_registration(e: &sluice_vnet::error::VnetError) -> SessionError {
        match e {
            sluice_vnet::error::VnetError::Exists(_) => SessionError::InUse,
            _ => SessionError::NotRegistered,
        }
    }
}

impl SessionError {
    /// The errno an application gets.
    pub fn errno(&self) -> i32 {
        match self {
            SessionError::InUse => libc::EADDRINUSE,
            SessionError::NotLocal => libc::EADDRNOTAVAIL,
            SessionError::NoSpace => libc::ENOSPC,
            SessionError::Invalid => libc::EINVAL,
            SessionError::NoSession => libc::EBADF,
            SessionError::NotConnected => libc::ENOTCONN,
            SessionError::Disabled | SessionError::Socket(..) => libc::ENOTCONN,
            SessionError::NotRegistered => libc::EIO,
        }
    }
}

/// Per-session counters.
#[derive(Copy, Clone, Debug, Default)]
pub struct SessStats {
    /// Datagrams queued to the application.
    pub rx: u64,
    /// Their payload bytes.
    pub rx_bytes: u64,
    /// Datagrams dropped because the rx FIFO was full.
    pub rx_full: u64,
    /// Datagrams sent.
    pub tx: u64,
    /// Their payload bytes.
    pub tx_bytes: u64,
}

/// A UDP session: a listener (bound endpoint, any peer) or a connected 5-tuple.
#[derive(Debug)]
pub struct Session {
    /// Owning application.
    pub app: u32,
    /// Its FIFO slot in the application's segment.
    pub slot: u32,
    /// Local endpoint (unspecified address: any of Sluice's).
    pub local: SocketAddr,
    /// The peer of a connected session.
    pub remote: Option<SocketAddr>,
    /// Counters.
    pub stats: SessStats,
    /// UDP, a TCP listener or a TCP connection.
    pub proto: Proto,
}

/// What a session carries.
#[derive(Debug, Default)]
pub enum Proto {
    /// UDP datagrams.
    #[default]
    Udp,
    /// A TCP listener (its handshake state is in the accept part: [`Listen`]).
    TcpListen,
    /// A TCP connection.
    Tcp(Box<crate::tcp::Tcb>, TcpLink),
}

/// A TCP listener's handshake state, kept in the accept part ([`AcceptPart`]) rather than
/// in thread 0's table with the listener's session: a SYN or an accept on any thread
/// reaches it under the accept part's own lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listen {
    /// The listening application.
    pub app: u32,
    /// The listener's slot (an accepted slot names it: `Fifo::set_endpoints`).
    pub slot: u32,
    /// Most connections in the handshake.
    pub backlog: u32,
    /// Connections in the handshake now (any thread's).
    pub half_open: u32,
    /// The cookie period in which it last answered a SYN with a SYN cookie (None: never):
    /// only then is a bare ACK checked for a cookie.
    pub cookies_at: Option<u32>,
}

/// The accept hand-over's shared part: what a passive open needs of its listener, which
/// lives on thread 0 while the connection lives on the owner of its 4-tuple. Behind its
/// own lock ([`SessionMain::accept`]), taken innermost (no other lock is taken while it is
/// held) and only on the handshake's path (a SYN, a cookie ACK, the accept, a half-open
/// connection freed) and by listen and close: an established connection's segments never
/// take it. See docs/hoststack.md, *Session 17*.
#[derive(Debug, Default)]
pub struct AcceptPart {
    /// TCP listeners by (address, port) → their session.
    pub by_addr: Table<(IpAddr, u16)>,
    /// Listener session → its handshake state.
    pub listens: HashMap<u32, Listen, sluice_infra::hash::FastState>,
}

/// The accept part, shared by the threads ([`SessionMain::accept`]).
pub type Accept = std::sync::Arc<std::sync::Mutex<AcceptPart>>;

/// How a TCP connection hangs in the session layer.
#[derive(Debug, Default, Clone, Copy)]
pub struct TcpLink {
    /// The listener that accepted it (until the application gets it).
    pub parent: Option<u32>,
    /// Queued for `session-queue` to send.
    pub queued: bool,
    /// The application closed it (the slot stays until the connection ends).
    pub app_closed: bool,
    /// It holds a reference on its local port (active opens).
    pub port_ref: bool,
    /// The deadline it is filed under in [`SessionMain::tcp_timer_set`].
    pub timer: Option<std::time::Instant>,
}

impl Proto {
    /// Whether this is TCP.
    pub fn is_tcp(&self) -> bool {
        !matches!(self, Proto::Udp)
    }
}

/// Slot of a session the application does not hold (half-open, TIME-WAIT).
pub const NO_SLOT: u32 = u32::MAX;

/// The epoll token of the control sockets (the app socket, attached and attaching
/// applications' sockets) in `session-queue`'s registrations: when one is readable the
/// node has the main loop serve them at once ([`crate::poll_control`]).
pub const CTL_TOKEN: u32 = u32::MAX;

/// An attached application.
pub struct AppConn {
    /// The name it gave.
    pub name: String,
    /// Its control socket (`None` once it died: unregistered, closed by `session-queue`).
    sock: Option<OwnedFd>,
    /// Its segment (shared with `session-queue`, which watches its event queue).
    pub seg: std::sync::Arc<Region>,
    /// The segment geometry.
    pub g: Geometry,
    /// Sluice signals it here when it sleeps (any thread's producer).
    pub app_efd: OwnedFd,
    /// It signals Sluice's thread `t` at `sluice_efds[t]` (registered with that thread's
    /// epoll by its `session-queue`).
    pub sluice_efds: Vec<OwnedFd>,
    /// slot → session ([`Slots`]: taken, filled and freed through `&AppConn`).
    pub slots: Slots,
    /// slot → the thread whose event queues it uses (Sluice's copy of the slot's owner
    /// word, which the application could overwrite): a TCP connection's owner, 0 for UDP
    /// (its datagrams are built on thread 0). Atomics, as [`AppConn::gens`]: the thread
    /// that takes the slot ([`Slots::take`]) writes them through `&AppConn`.
    pub owners: Box<[AtomicU32]>,
    /// slot → how many times it was handed out ([`AppConn::reset_slot`]): a request
    /// thread 0 forwards to a connection's owner names the slot's generation, so that the
    /// owner never applies it to a later session of the slot ([`CtlReq`]).
    pub gens: Box<[AtomicU32]>,
    /// slot → whether its session is TCP (a listener or a connection), set when a TCP
    /// session takes the slot: thread 0 decides where a request on the slot goes
    /// ([`SessionMain::owner_elsewhere`]) without reading the owner's table. Written by
    /// the accepting thread (`SessionMain::tcp_accept` runs on the connection's owner)
    /// before it publishes the accept event (Release; read with Acquire), so it holds
    /// without the session mutex too (the step after, per-thread locks).
    pub tcp: Vec<AtomicBool>,
    /// thread → how many of the application's sessions live in that thread's table
    /// (kept by [`SessionMain::alloc_sess`] and [`SessionMain::take_sess`]): whether a
    /// dead application still has sessions, and on which threads, without reading the
    /// tables. Entry `t` is written mostly by thread `t` (it files and frees the sessions
    /// of its table; thread 0 still frees a worker's sessions on `session disable`, a
    /// failed registration or a closed listener's half-open connections), read by any
    /// ([`AppConn::sess_on`]): one entry per possible thread ([`SESSION_THREADS`], made at
    /// attach: a thread's table may come later), atomic read-modify-writes so that
    /// neither reading nor counting needs the session mutex once it is split.
    pub sess_on: Box<[AtomicU32]>,
    /// Which attach this is (1, 2, ... over the session layer's life: its index is
    /// reused). A reply held for an application, or a request forwarded for it, names
    /// it, so that neither reaches a later application given the same index.
    pub serial: u64,
    /// The application is gone; connections it had closed linger until they end (the
    /// segment stays mapped for their unsent data).
    pub dead: bool,
}

impl AppConn {
    /// Thread `t`'s Sluice → app event queue.
    pub fn app_evq(&self, t: u32) -> Option<EvQ<'_>> {
        EvQ::app(&self.seg, &self.g, t)
    }
    /// App → Sluice thread `t` event queue.
    pub fn sluice_evq(&self, t: u32) -> Option<EvQ<'_>> {
        EvQ::sluice(&self.seg, &self.g, t)
    }
    /// The thread whose event queues slot `slot` uses.
    pub fn owner(&self, slot: u32) -> u32 {
        self.owners
            .get(slot as usize)
            .map_or(0, |x| x.load(Ordering::Acquire))
    }
    /// (rx, tx) FIFOs of a slot.
    pub fn fifos(&self, slot: u32) -> Option<(Fifo<'_>, Fifo<'_>)> {
        seg::slot_fifos(&self.seg, &self.g, slot)
    }

    /// Queues `event` (a slot, or `EVENT_ACCEPT | slot`) on the application's event queue
    /// unless the slot's rx FIFO `rx` has one pending already, and signals the application
    /// when it announced it sleeps. False when the queue is full: the slot's event mark
    /// stays set (the event is pending, later ones for the slot wait behind it) and the
    /// caller files it for a retry ([`SessionMain::refused`]).
    pub fn notify(&self, rx: &Fifo<'_>, event: u32) -> bool {
        if !rx.set_event() {
            return true; // one is pending: the application looks at the slot anyway
        }
        self.push_event(event)
    }

    /// Queues `event` on the app queue of the slot's owner thread whatever the slot's event
    /// mark says, and signals the application when it announced it sleeps; false when the
    /// queue is full.
    fn push_event(&self, event: u32) -> bool {
        let Some(q) = self.app_evq(self.owner(event & !seg::EVENT_ACCEPT)) else {
            return false;
        };
        let queued = q.push(event);
        if q.needs_signal() {
            shm::signal(self.app_efd.as_raw_fd());
        }
        queued
    }

    /// Makes free slot `slot` ready for a new owner: both FIFOs empty, their event marks,
    /// the tx-space request and the TCP state and window-update words cleared. Only Sluice
    /// touches a free slot: the application lets go of it when it sends Close (a stale
    /// request or mark would otherwise reach the new owner as a spurious event, or
    /// swallow its first one).
    pub fn reset_slot(&self, slot: u32) {
        if let Some((rx, tx)) = self.fifos(slot) {
            rx.reset();
            tx.reset();
        }
        if let Some(o) = self.owners.get(slot as usize) {
            o.store(0, Ordering::Release);
        }
        if let Some(n) = self.gens.get(slot as usize) {
            n.fetch_add(1, Ordering::AcqRel);
        }
        if let Some(x) = self.tcp.get(slot as usize) {
            x.store(false, Ordering::Release);
        }
    }

    /// Whether slot `slot` holds a TCP session (see [`AppConn::tcp`]).
    pub fn slot_tcp(&self, slot: u32) -> bool {
        self.tcp
            .get(slot as usize)
            .is_some_and(|x| x.load(Ordering::Acquire))
    }

    /// Marks slot `slot` as holding a TCP session (before the application can learn of
    /// the slot).
    pub fn set_tcp(&self, slot: u32) {
        if let Some(x) = self.tcp.get(slot as usize) {
            x.store(true, Ordering::Release);
        }
    }

    /// The application's sessions in thread `t`'s table (see [`AppConn::sess_on`]).
    pub fn sess_on(&self, t: usize) -> u32 {
        self.sess_on.get(t).map_or(0, |x| x.load(Ordering::Acquire))
    }

    /// Counts a session in (`add`) or out of thread `t`'s table (an atomic update: not
    /// only thread `t` frees its sessions, see [`AppConn::sess_on`]).
    fn count_on(&self, t: usize, add: bool) {
        if let Some(x) = self.sess_on.get(t) {
            if add {
                x.fetch_add(1, Ordering::AcqRel);
            } else {
                let _ = x.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    Some(n.saturating_sub(1))
                });
            }
        }
    }

    /// Sessions of the application on every thread.
    pub fn sessions(&self) -> u32 {
        self.sess_on.iter().map(|x| x.load(Ordering::Acquire)).sum()
    }

    /// Slot `slot`'s generation (see [`AppConn::gens`]).
    pub fn slot_gen(&self, slot: u32) -> u32 {
        self.gens
            .get(slot as usize)
            .map_or(0, |x| x.load(Ordering::Acquire))
    }

    /// Makes slot `slot` use thread `t`'s event queues (a TCP connection's owner), before
    /// the application learns of the slot (the accept event, the connect reply): its owner
    /// word tells the library where to queue its tx events.
    pub fn set_owner(&self, slot: u32, t: usize) {
        // A thread without a queue in this segment (none at startup: n_queues is the
        // thread count) would have its events dropped by the worker that owns that queue
        // number; thread 0 takes any, its `tcp_queue` finds the owner.
        let t = if (t as u32) < self.g.n_queues {
            t as u32
        } else {
            0
        };
        if let Some((rx, _)) = self.fifos(slot) {
            rx.owner().store(t, std::sync::atomic::Ordering::Release);
        }
        if let Some(o) = self.owners.get(slot as usize) {
            o.store(t, Ordering::Release);
        }
    }

    /// Queues an event for `slot` when its application asked for tx space and there is
    /// enough now ([`Fifo::take_space_request`]). False when the event queue was full:
    /// the caller files it for a retry.
    pub fn notify_tx_space(&self, slot: u32) -> bool {
        match self.fifos(slot) {
            Some((rx, tx)) if tx.take_space_request() => self.notify(&rx, slot),
            _ => true,
        }
    }
}

/// An application's slot → session map, taken, filled and freed through a shared
/// reference (atomics): a slot is taken by a compare-and-swap from free, so a worker
/// accepting a connection and thread 0 serving a bind or connect never take the same
/// slot whichever lock each holds (today both hold the session mutex; the per-worker locks
/// of issue 19 need it). A slot holds a session handle, [`PENDING`] (taken, its session
/// not filed yet), or nothing.
pub struct Slots(Box<[AtomicU32]>);

/// What a free slot holds in [`Slots`]: no session handle (it would name thread 255) and
/// not [`PENDING`].
const FREE: u32 = u32::MAX - 1;
const _: () = assert!(handle_thread(FREE) >= SESSION_THREADS && FREE != PENDING);

impl Slots {
    /// `n` free slots.
    pub fn new(n: u32) -> Slots {
        Slots((0..n).map(|_| AtomicU32::new(FREE)).collect())
    }

    /// How many slots there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// What slot `slot` holds (None: free, or no such slot).
    pub fn get(&self, slot: u32) -> Option<u32> {
        self.0
            .get(slot as usize)
            .map(|x| x.load(Ordering::Acquire))
            .filter(|&v| v != FREE)
    }

    /// What each slot holds, in order.
    pub fn iter(&self) -> impl Iterator<Item = Option<u32>> + '_ {
        (0..self.0.len() as u32).map(|i| self.get(i))
    }

    /// Takes the first free slot for `v` (a session, or [`PENDING`]); None when every
    /// slot is held.
    pub fn take(&self, v: u32) -> Option<u32> {
        debug_assert_ne!(v, FREE);
        self.0
            .iter()
            .position(|x| {
                x.load(Ordering::Relaxed) == FREE
                    && x.compare_exchange(FREE, v, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
            })
            .map(|i| i as u32)
    }

    /// Fills slot `slot`, which its caller took ([`PENDING`]), with session `sid`: a
    /// compare-and-swap from [`PENDING`], false (nothing written) when the slot no longer
    /// holds it (freed meanwhile, or another's). The Release publishes what the taker set
    /// up before it (FIFOs, owner, generation, TCP flag, endpoints): a reader loads the
    /// slot word first and those after it. `PENDING` names no taker: a slot freed and
    /// taken again between a check and this call is still `PENDING` (docs/hoststack.md,
    /// *Session 17*, the generation in the slot word).
    #[must_use]
    pub fn set(&self, slot: u32, sid: u32) -> bool {
        debug_assert!(sid != FREE && sid != PENDING);
        self.0.get(slot as usize).is_some_and(|x| {
            x.compare_exchange(PENDING, sid, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })
    }

    /// Frees slot `slot` if it still holds `v`: whether it did.
    pub fn free_if(&self, slot: u32, v: u32) -> bool {
        self.0.get(slot as usize).is_some_and(|x| {
            x.compare_exchange(v, FREE, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })
    }
}

/// An application event its full event queue refused, filed for a retry
/// ([`SessionMain::retry_events`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refused {
    app: u32,
    slot: u32,
    /// `slot` or `EVENT_ACCEPT | slot`.
    event: u32,
}

/// A UDP port to (un)register with `ip4-local`/`ip6-local`: (IPv6, port, register).
pub type PortChange = (bool, u16, bool);

/// The session layer's tables keyed by local addresses and ports (listeners, ports in use
/// → session id or use count): only applications insert into them, so `infra::hash`'s
/// keyed multiply-xorshift (a fraction of SipHash's instructions) is enough.
type Table<K> = HashMap<K, u32, sluice_infra::hash::FastState>;

/// The hasher of the tables keyed by the peer's address and port (TCP connections,
/// connected UDP sessions): any peer chooses those keys and makes the connections insert
/// them, so they stay on std's keyed SipHash (DESIGN §1.1). The multiply-xorshift has
/// collisions that hold for every seed (bit 63 of one word and bit 22 of the next flipped
/// together cancel), which would let a peer pile its connections into one bucket.
type PeerState = std::collections::hash_map::RandomState;

/// A table keyed by (local, remote) socket addresses, hashed with [`PeerState`].
type PeerTable = HashMap<(SocketAddr, SocketAddr), u32, PeerState>;

/// The session layer.
#[derive(Default)]
pub struct SessionMain {
    /// Configuration, interface addresses, ISN key ([`Params`]).
    pub params: std::sync::Arc<Params>,
    listen: Option<OwnedFd>,
    /// Attached applications (index = app id).
    pub apps: Vec<Option<AppConn>>,
    /// The per-thread session tables (index = thread; at least one): a session handle
    /// is `thread << THREAD_SHIFT | index` ([`handle`]).
    pub workers: Workers,
    /// The graph's shared state (wakes a worker whose queue this thread filled), taken by
    /// `session-queue` on its first call.
    pub graph: Option<std::sync::Arc<sluice_graph::Shared>>,
    /// The thread the next active open is made on (round robin over the threads: until the
    /// applications have an event queue per thread they ask from none in particular).
    next_thread: usize,
    listeners: Table<(IpAddr, u16)>,
    port_refs: Table<(bool, u16)>,
    next_eph: u16,
    unattached: Vec<(OwnedFd, std::time::Instant)>,
    /// UDP ports another node serves through `ip4-local`/`ip6-local` (a tunnel's):
    /// (IPv6?, port), refreshed by the control poll. An ephemeral port skips them (its
    /// registration would fail with `EADDRINUSE`).
    pub foreign_udp: Vec<(bool, u16)>,
    /// Eventfds `session-queue` must add to its epoll: (fd, app id).
    pub irq_add: Vec<(RawFd, u32)>,
    /// Eventfds it must remove before they are closed.
    pub irq_del: Vec<OwnedFd>,
    /// Set when `irq_add`/`irq_del` changed: makes `session-queue` active once.
    pub kick: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Counts the attaches and detaches: a worker's `session-queue` refreshes the segments
    /// it watches when it changed.
    pub apps_gen: u64,
    /// Runs [`crate::poll_control`] on the main loop when a control socket is readable.
    pub poster: Option<sluice_graph::MainPoster>,
    /// Applications attached / detached since start.
    pub attached: u64,
    /// Detached (closed their socket, or died).
    pub detached: u64,
    /// Control messages refused as malformed.
    pub bad_msgs: u64,
    /// Control requests thread 0 forwarded to the thread owning their connection
    /// ([`CtlReq`]).
    pub ctl_forwarded: u64,
    /// Forwarded requests their owner dropped: the slot, its session or the application
    /// had changed meanwhile (and connects refused for a dead application, which gets
    /// no reply).
    pub ctl_stale: u64,
    /// Application events a full event queue refused (each filed for a retry unless the
    /// application is dead).
    pub evq_refused: u64,
    /// The TCP listeners and their handshake state, behind their own lock ([`AcceptPart`];
    /// [`SessionMain::acc`] takes it).
    pub accept: Accept,
    /// TCP ports in use (listeners and connections).
    pub tcp_ports: Table<(bool, u16)>,
    /// Set when an event is filed for a retry on thread 0 ([`SessionWorker::evq_retry`]):
    /// makes its `session-queue` active to arm its retry timer (a worker is kicked through
    /// its `tcp_kick`).
    pub retry_kick: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Sessions a thread's table may hold: [`MAX_SESSIONS`] (`None`), smaller in tests.
    pub(crate) sess_limit: Option<usize>,
    /// Replies to the control requests [`SessionMain::poll`] served, per application,
    /// held until the port registrations those requests changed are applied on every
    /// thread ([`SessionMain::send_replies`]): (app, its [`AppConn::serial`], reply).
    replies: Vec<(u32, u64, Msg)>,
    /// Whether protocol 6 is registered with `ip4-local`/`ip6-local` on every thread, as
    /// far as the control poll knows ([`crate::poll_control`] sets it after registering and
    /// clears it before unregistering). While false, `session-queue` sends no connection's
    /// segments and [`SessionMain::tcp_queue`] kicks no thread: a SYN sent before the
    /// registration could have its SYN-ACK punted by a worker (the SYN retried after 1 s).
    pub(crate) tcp_applied: bool,
    /// TCP connects thread 0 began ([`SessionMain::tcp_connect_begin`]) that their owner
    /// has not opened yet ([`SessionMain::tcp_open`], on every outcome): protocol 6 is
    /// wanted for them too ([`SessionMain::tcp_wanted`]), so the control poll registers it
    /// before a worker can queue the connect's reply.
    pub(crate) tcp_pending: u32,
}

/// The bits of a session handle below the thread: a handle is `thread << THREAD_SHIFT |
/// index` (VPP's `session_handle()` names the thread likewise).
pub const THREAD_SHIFT: u32 = 24;

/// Threads a session handle can name (the bits above [`THREAD_SHIFT`]).
pub const MAX_THREADS: usize = 1 << (32 - THREAD_SHIFT);

/// Threads the host stack runs on: a session handle names the thread, and a segment has
/// one event-queue pair per thread (at most [`seg::MAX_QUEUES`]). It refuses to start with
/// more (`cpu { workers }` at most `SESSION_THREADS - 1`).
pub const SESSION_THREADS: usize = if (seg::MAX_QUEUES as usize) < MAX_THREADS {
    seg::MAX_QUEUES as usize
} else {
    MAX_THREADS
};

/// What an application's slot holds while its TCP connection is being opened on the
/// thread that will own it ([`CtlReq::Connect`]): not a session handle (it would name
/// thread 255, and there are at most [`SESSION_THREADS`] threads, 0 to 254), so a request
/// on the slot finds no session.
pub(crate) const PENDING: u32 = u32::MAX;
const _: () = assert!(handle_thread(PENDING) >= SESSION_THREADS);

/// Sessions one thread's table holds (the bits below [`THREAD_SHIFT`]): past it a new
/// session is refused ([`SessionMain::alloc_sess`]).
pub const MAX_SESSIONS: usize = 1 << THREAD_SHIFT;

/// The handle of session `index` of thread `thread`.
#[inline]
pub fn handle(thread: usize, index: usize) -> u32 {
    debug_assert!(thread < MAX_THREADS && index < MAX_SESSIONS);
    (thread as u32) << THREAD_SHIFT | index as u32
}

/// The thread a session handle names.
#[inline]
pub const fn handle_thread(sid: u32) -> usize {
    (sid >> THREAD_SHIFT) as usize
}

/// The index of a session handle in its thread's table.
#[inline]
pub fn handle_index(sid: u32) -> usize {
    (sid & ((1 << THREAD_SHIFT) - 1)) as usize
}

/// The thread that owns the flow `local`–`remote` among `n` threads: its sessions live
/// there, its segments are handed there. A function Sluice computes (not the NIC's RSS
/// hash, not computable for every driver); a multiply-xorshift of the 4-tuple (a peer can
/// choose its flows' thread, it cannot grow a table with it).
#[inline]
pub fn flow_owner(local: SocketAddr, remote: SocketAddr, n: usize) -> usize {
    if n <= 1 {
        return 0;
    }
    let ip = |a: IpAddr| -> u64 {
        match a {
            IpAddr::V4(a) => u32::from(a) as u64,
            IpAddr::V6(a) => {
                let x = u128::from(a);
                x as u64 ^ (x >> 64) as u64
            }
        }
    };
    let mut h = ip(local.ip()).rotate_left(32)
        ^ ip(remote.ip())
        ^ ((local.port() as u64) << 16 | remote.port() as u64).rotate_left(17);
    h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= h >> 31;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    ((h >> 32) as usize) % n
}

/// One thread's sessions: those of the flows it owns ([`flow_owner`]; listeners and
/// bound UDP sessions on thread 0), their lookup tables, timers and output queues.
#[derive(Default)]
pub struct SessionWorker {
    /// Sessions (index = the handle's index).
    pub sessions: Vec<Option<Session>>,
    pub(crate) free: Vec<u32>,
    /// Connected UDP sessions by (local, remote).
    pub(crate) connected: PeerTable,
    /// TCP connections by (local, remote).
    pub tcp_conns: PeerTable,
    /// TCP connections with something to send (this thread's `session-queue` drains it).
    pub tcp_out: Vec<u32>,
    /// Segments no connection sends (RSTs, SYN-cookie SYN-ACKs): (local, remote, segment).
    pub ctl_out: Vec<(SocketAddr, SocketAddr, crate::tcp::Out)>,
    /// Set with `tcp_out`/`ctl_out`: makes this thread's `session-queue` active.
    pub tcp_kick: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The connections' timers (RTO, persist, TIME-WAIT) by deadline: each connection is
    /// filed once, under the deadline its [`TcpLink::timer`] records.
    pub tcp_timer_set: std::collections::BTreeSet<(std::time::Instant, u32)>,
    /// Scratch for the connections whose timers are due.
    pub(crate) tcp_due: Vec<u32>,
    /// The applications' eventfds of this thread (their tx events for its connections) its
    /// `session-queue` must add to its epoll: (fd, app id). Thread 0 uses
    /// [`SessionMain::irq_add`].
    pub efd_add: Vec<(RawFd, u32)>,
    /// Those it must remove before they are closed.
    pub efd_del: Vec<OwnedFd>,
    /// This thread's control ring: the requests thread 0's control poll received for the
    /// connections this thread owns (close, shutdown, an application gone), applied by
    /// this thread's `session-queue` ([`SessionMain::apply_ctl`]) in the order they came;
    /// thread 0 kicks it after pushing. Its own small lock, taken by thread 0 to push and
    /// by the owner to take the batch (only when kicked), never on the data path.
    pub ctl_in: CtlRing,
    /// TCP sessions in this table (listeners and connections): protocol 6 is registered
    /// while any thread has one ([`SessionMain::tcp_count`]).
    pub tcp_count: u32,
    /// This thread's TCP counters (`show session` sums them: [`SessionMain::tcp_stats`]).
    pub tcp_stats: TcpGlobal,
    /// Events a full app event queue of this thread refused (data, accept and tx-space
    /// events of the slots whose owner is this thread, [`AppConn::owner`]), retried by
    /// this thread's `session-queue` every [`RETRY_EVERY`] until queued
    /// ([`SessionMain::retry_events`]): each app queue has one producer, its thread, for
    /// retries too (thread 0 retried every thread's before; see docs/hoststack.md,
    /// *Session 17*).
    pub(crate) evq_retry: Vec<Refused>,
}

/// A control request thread 0 hands to the thread that owns the connection it acts on
/// (the session layer's threads act only on their own tables; see docs/hoststack.md,
/// *Session 14*). Each names the session as thread 0 found it in the application's slot:
/// the owner applies it only if the slot still holds that session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CtlReq {
    /// The application closed slot `slot` (its session `sid`).
    Close {
        /// The application.
        app: u32,
        /// Its attach ([`AppConn::serial`]).
        serial: u64,
        /// Its slot.
        slot: u32,
        /// The slot's generation ([`AppConn::gens`]).
        gen: u32,
        /// The session the slot held.
        sid: u32,
    },
    /// `shutdown(SHUT_WR)` of slot `slot`; the reply to request `req` is sent once applied.
    Shutdown {
        /// The application.
        app: u32,
        /// Its attach ([`AppConn::serial`]).
        serial: u64,
        /// Its slot.
        slot: u32,
        /// The slot's generation ([`AppConn::gens`]).
        gen: u32,
        /// The session the slot held.
        sid: u32,
        /// The request id to answer.
        req: u32,
    },
    /// Open the TCP connection thread 0 prepared (its slot and port taken: see
    /// [`SessionMain::tcp_connect_begin`]); the reply to request `req` is queued once
    /// opened (or refused: the slot and the port are given back).
    Connect {
        /// The connection to open.
        c: crate::tcpsess::Connect,
        /// The request id to answer.
        req: u32,
    },
    /// Application `app` is gone: this thread's connections of it linger if it had closed
    /// them, the others are reset (as [`SessionMain::detach`] does on thread 0).
    Detach {
        /// The application.
        app: u32,
        /// Its attach ([`AppConn::serial`]).
        serial: u64,
    },
}

/// A thread's control ring ([`SessionWorker::ctl_in`]): many producers in principle
/// (thread 0 alone today), one consumer (the owner), batches taken whole.
pub type CtlRing = std::sync::Arc<std::sync::Mutex<Vec<CtlReq>>>;

/// The per-thread session tables: one per thread, never fewer than one.
pub struct Workers(pub Vec<SessionWorker>);

impl Default for Workers {
    fn default() -> Self {
        Workers(vec![SessionWorker::default()])
    }
}

impl std::ops::Deref for Workers {
    type Target = Vec<SessionWorker>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Workers {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

/// TCP counters (one set per thread, summed for `show session`).
#[derive(Debug, Default, Clone, Copy)]
pub struct TcpGlobal {
    /// Connections accepted.
    pub accepted: u64,
    /// Connections opened.
    pub connected: u64,
    /// SYNs dropped because the listener's backlog was full.
    pub backlog_full: u64,
    /// SYNs dropped because the owning thread's session table was full ([`MAX_SESSIONS`]).
    pub table_full: u64,
    /// Handshakes completed with no free slot in the application (reset).
    pub no_slot: u64,
    /// Connections reset by the peer or given up.
    pub resets: u64,
    /// Of them, given up because keepalive probes went unanswered.
    pub keepalive_timeouts: u64,
    /// Connections in TIME-WAIT ended by an exact RST (not among `resets`: the
    /// application is not told).
    pub time_wait_rst: u64,
    /// SYN-ACKs sent with a SYN cookie (the backlog was full).
    pub syn_cookies_sent: u64,
    /// Connections opened by a valid SYN cookie.
    pub syn_cookies_ok: u64,
    /// ACKs to a listener with no valid cookie (answered with a RST).
    pub syn_cookies_bad: u64,
}

impl std::ops::AddAssign for TcpGlobal {
    fn add_assign(&mut self, o: TcpGlobal) {
        self.accepted += o.accepted;
        self.connected += o.connected;
        self.backlog_full += o.backlog_full;
        self.table_full += o.table_full;
        self.no_slot += o.no_slot;
        self.resets += o.resets;
        self.keepalive_timeouts += o.keepalive_timeouts;
        self.time_wait_rst += o.time_wait_rst;
        self.syn_cookies_sent += o.syn_cookies_sent;
        self.syn_cookies_ok += o.syn_cookies_ok;
        self.syn_cookies_bad += o.syn_cookies_bad;
    }
}

const EPH: std::ops::RangeInclusive<u16> = 49152..=65535;

/// How often `session-queue` retries the events full event queues refused: an application
/// that stops reading must not keep the thread polling.
pub const RETRY_EVERY: std::time::Duration = std::time::Duration::from_millis(1);

fn unspecified(v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    } else {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    }
}

fn in_prefix(a: IpAddr, p: IpAddr, len: u8) -> bool {
    match (a, p) {
        (IpAddr::V4(a), IpAddr::V4(p)) => {
            let m = if len == 0 {
                0
            } else {
                u32::MAX << (32 - len.min(32))
            };
            u32::from(a) & m == u32::from(p) & m
        }
        (IpAddr::V6(a), IpAddr::V6(p)) => {
            let m = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len.min(128))
            };
            u128::from(a) & m == u128::from(p) & m
        }
        _ => false,
    }
}

/// Whether binding `local` clashes with one of `bound` (same port and family, and the same
/// address or either side a wildcard).
pub fn clashes<'a>(mut bound: impl Iterator<Item = &'a (IpAddr, u16)>, local: SocketAddr) -> bool {
    bound.any(|(ip, p)| {
        *p == local.port()
            && ip.is_ipv6() == local.is_ipv6()
            && (*ip == local.ip() || ip.is_unspecified() || local.ip().is_unspecified())
    })
}

/// The source address for `peer`: the first local address whose prefix holds it, else the
/// family's first non-loopback address.
pub fn source_for(locals: &[(IpAddr, u8)], peer: IpAddr) -> Option<IpAddr> {
    locals
        .iter()
        .find(|(x, l)| in_prefix(peer, *x, *l))
        .or_else(|| {
            locals
                .iter()
                .find(|(x, _)| x.is_ipv6() == peer.is_ipv6() && !x.is_loopback())
        })
        .map(|(x, _)| *x)
}

impl SessionMain {
    /// Session `sid` (a handle naming its thread).
    #[inline]
    pub fn sess(&self, sid: u32) -> Option<&Session> {
        self.workers
            .get(handle_thread(sid))?
            .sessions
            .get(handle_index(sid))?
            .as_ref()
    }

    /// Session `sid`, to change.
    #[inline]
    pub fn sess_mut(&mut self, sid: u32) -> Option<&mut Session> {
        self.workers
            .get_mut(handle_thread(sid))?
            .sessions
            .get_mut(handle_index(sid))?
            .as_mut()
    }

    /// Takes session `sid` out of its table (its index is given back by [`Self::free_sess`]).
    pub(crate) fn take_sess(&mut self, sid: u32) -> Option<Session> {
        let t = handle_thread(sid);
        let s = self
            .workers
            .get_mut(t)?
            .sessions
            .get_mut(handle_index(sid))?
            .take()?;
        self.count_sess(s.app, t, false);
        Some(s)
    }

    /// Counts a session of application `a` in (`add`) or out of thread `t`'s table
    /// ([`AppConn::sess_on`]).
    fn count_sess(&self, a: u32, t: usize, add: bool) {
        if let Some(app) = self.apps.get(a as usize).and_then(|x| x.as_ref()) {
            app.count_on(t, add);
        }
    }

    /// Gives the index of a taken session back to its thread's table.
    pub(crate) fn free_sess(&mut self, sid: u32) {
        if let Some(w) = self.workers.get_mut(handle_thread(sid)) {
            w.free.push(handle_index(sid) as u32);
        }
    }

    /// Files `s` in thread `thread`'s table; returns its handle, or `None` (`s` dropped)
    /// when the table holds [`MAX_SESSIONS`] already: a handle has no bits for more.
    pub(crate) fn alloc_sess(&mut self, thread: usize, s: Session) -> Option<u32> {
        debug_assert!(thread < self.workers.len(), "thread {thread} has no table");
        let limit = self.sess_limit.unwrap_or(MAX_SESSIONS);
        let a = s.app;
        let w = &mut self.workers[thread];
        let i = match w.free.pop() {
            Some(i) => {
                w.sessions[i as usize] = Some(s);
                i as usize
            }
            None if w.sessions.len() >= limit => return None,
            None => {
                w.sessions.push(Some(s));
                w.sessions.len() - 1
            }
        };
        self.count_sess(a, thread, true);
        Some(handle(thread, i))
    }

    /// The table of the thread session `sid` lives on.
    #[inline]
    pub fn worker_of(&mut self, sid: u32) -> &mut SessionWorker {
        let t = handle_thread(sid);
        debug_assert!(t < self.workers.len(), "handle {sid:#x} names no thread");
        &mut self.workers[t]
    }

    /// The table of the thread that owns the flow `local`–`remote`.
    #[inline]
    pub fn owner_worker(&mut self, local: SocketAddr, remote: SocketAddr) -> &mut SessionWorker {
        let t = flow_owner(local, remote, self.workers.len());
        &mut self.workers[t]
    }

    /// The thread the next active open lives on (round robin).
    pub(crate) fn next_active_thread(&mut self) -> usize {
        let t = self.next_thread % self.workers.len();
        self.next_thread = t + 1;
        t
    }

    /// Threads with a session table (main + workers).
    pub fn n_threads(&self) -> usize {
        self.workers.len()
    }

    /// Thread `t`'s `session-queue` kick (its table is made if missing: each thread's
    /// `session-queue` asks for its own when the graph is built).
    pub fn worker_kick(&mut self, t: usize) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
        while self.workers.len() <= t {
            self.workers.push(SessionWorker::default());
        }
        self.workers[t].tcp_kick.clone()
    }

    /// The accept part, locked ([`AcceptPart`]): hold the guard for one lookup or update,
    /// never across another lock.
    pub fn acc(&self) -> std::sync::MutexGuard<'_, AcceptPart> {
        match self.accept.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Kicks thread `t`'s `session-queue` (its queues got work) and wakes the thread if it
    /// sleeps and is not thread 0 alone.
    pub(crate) fn kick_worker(&self, t: usize) {
        self.workers[t]
            .tcp_kick
            .store(true, std::sync::atomic::Ordering::Release);
        if self.workers.len() > 1 {
            if let Some(w) = self.graph.as_ref().and_then(|g| g.wakers.get(t)) {
                w.wake_if_sleeping();
            }
        }
    }

    /// Thread `t`'s control ring, for its `session-queue` (its table is made if missing,
    /// as [`SessionMain::worker_kick`] does).
    pub fn worker_ctl(&mut self, t: usize) -> CtlRing {
        let _ = self.worker_kick(t);
        self.workers[t].ctl_in.clone()
    }

    /// Hands `req` to thread `t`'s control ring and kicks the thread.
    pub(crate) fn send_ctl(&mut self, t: usize, req: CtlReq) {
        self.ctl_forwarded += 1;
        match self.workers[t].ctl_in.lock() {
            Ok(mut q) => q.push(req),
            Err(p) => p.into_inner().push(req),
        }
        self.kick_worker(t);
    }

    /// The thread other than 0 that owns TCP connection `sid` (its handle's thread): the
    /// thread a request acting on it goes to. `None`: thread 0 acts itself (its own
    /// sessions, and UDP sessions, connected ones too, whose slots use thread 0's queues:
    /// their close changes the port references thread 0 keeps). Not the slot's owner
    /// word, which names thread 0 for a thread the segment has no queue for.
    /// Read from the application's slot flag ([`AppConn::tcp`]), not the owner's table.
    fn owner_elsewhere(&self, a: u32, slot: u32, sid: u32) -> Option<usize> {
        let t = handle_thread(sid);
        let tcp = || {
            self.apps
                .get(a as usize)
                .and_then(|x| x.as_ref())
                .is_some_and(|x| x.slot_tcp(slot))
        };
        (t != 0 && t < self.workers.len() && tcp()).then_some(t)
    }

    /// TCP sessions on every thread: protocol 6 is registered while there are any.
    pub fn tcp_count(&self) -> u32 {
        self.workers.iter().map(|w| w.tcp_count).sum()
    }

    /// The TCP counters of every thread, summed.
    pub fn tcp_stats(&self) -> TcpGlobal {
        let mut t = TcpGlobal::default();
        for w in self.workers.iter() {
            t += w.tcp_stats;
        }
        t
    }

    /// Application `a` if it is attach `serial` ([`AppConn::serial`]).
    pub(crate) fn app_of(&self, a: u32, serial: u64) -> Option<&AppConn> {
        self.apps
            .get(a as usize)
            .and_then(|x| x.as_ref())
            .filter(|x| x.serial == serial)
    }

    /// The session slot `slot` of application `a` holds, for a request naming the slot
    /// (close, shutdown): none for a free slot, nor for a connect still [`PENDING`] (the
    /// application guessed a slot it was not told of: the request finds no session).
    fn slot_session(&self, a: u32, slot: u32) -> Option<u32> {
        self.apps
            .get(a as usize)
            .and_then(|x| x.as_ref())
            .and_then(|x| x.slots.get(slot))
            .filter(|&sid| sid != PENDING)
    }

    /// Application `a`'s [`AppConn::serial`] (0: none).
    fn serial_of(&self, a: u32) -> u64 {
        self.apps
            .get(a as usize)
            .and_then(|x| x.as_ref())
            .map_or(0, |x| x.serial)
    }

    /// Whether slot `slot` of application `a` (attach `serial`) still holds session `sid`
    /// in generation `gen` (a forwarded request is applied only then).
    pub(crate) fn slot_holds(&self, a: u32, serial: u64, slot: u32, gen: u32, sid: u32) -> bool {
        self.app_of(a, serial)
            .is_some_and(|app| app.slots.get(slot) == Some(sid) && app.slot_gen(slot) == gen)
    }

    /// Thread `th` applies the control requests it took from its ring, in order: only to
    /// its own sessions, and only while the slot (or the application) is the one thread 0
    /// saw (else counted in [`SessionMain::ctl_stale`]). A shutdown's reply is queued for
    /// thread 0 to send (and thread 0's control poll posted) if the application is alive.
    pub(crate) fn apply_ctl(&mut self, th: usize, reqs: &mut Vec<CtlReq>) {
        let mut replied = false;
        for r in reqs.drain(..) {
            match r {
                CtlReq::Close {
                    app,
                    serial,
                    slot,
                    gen,
                    sid,
                } => {
                    if handle_thread(sid) == th && self.slot_holds(app, serial, slot, gen, sid) {
                        self.tcp_close(sid);
                    } else {
                        self.ctl_stale += 1;
                    }
                }
                CtlReq::Shutdown {
                    app,
                    serial,
                    slot,
                    gen,
                    sid,
                    req,
                } => {
                    let held =
                        handle_thread(sid) == th && self.slot_holds(app, serial, slot, gen, sid);
                    let retval = match held.then(|| self.tcp_shutdown(sid)) {
                        Some(Ok(())) => 0,
                        Some(Err(e)) => -e.errno(),
                        None => {
                            self.ctl_stale += 1;
                            -SessionError::NoSession.errno()
                        }
                    };
                    // A dead application gets no reply (`send_replies` also drops one
                    // whose application index went to a later attach).
                    if self.app_of(app, serial).is_some_and(|x| !x.dead) {
                        let r = Msg::CloseReply { req, retval };
                        self.replies.push((app, serial, r));
                        replied = true;
                    }
                }
                CtlReq::Connect { c, req } => {
                    let r = self.tcp_open(th, &c);
                    let alive = self.app_of(c.app, c.serial).is_some_and(|x| !x.dead);
                    // Stale, or refused (whatever the error) with nobody to tell.
                    if matches!(r, Err(SessionError::NoSession)) || (r.is_err() && !alive) {
                        self.ctl_stale += 1;
                    }
                    if alive {
                        let r = self.session_reply(req, r);
                        self.replies.push((c.app, c.serial, r));
                        replied = true;
                    }
                }
                CtlReq::Detach { app, serial } => {
                    if self.app_of(app, serial).is_some_and(|x| x.dead) {
                        self.detach_tcp(app, Some(th), false);
                    } else {
                        self.ctl_stale += 1;
                    }
                }
            }
        }
        if replied {
            if let Some(p) = &self.poster {
                p.post(Box::new(crate::poll_control));
            }
        }
    }

    /// [`source_for`] over the last snapshot of the interface addresses.
    #[inline]
    pub fn source_for(&self, peer: IpAddr) -> Option<IpAddr> {
        source_for(&self.params.locals, peer)
    }

    /// Space was freed in the tx FIFO of slot `slot` of application `a`: tells a writer
    /// that asked ([`AppConn::notify_tx_space`]). An event its full queue refused is
    /// retried (no more space may ever be freed: the FIFO may be empty already).
    pub(crate) fn notify_tx_space(&mut self, a: u32, slot: u32) {
        let refused = self
            .apps
            .get(a as usize)
            .and_then(|x| x.as_ref())
            .is_some_and(|app| !app.notify_tx_space(slot));
        if refused {
            self.refused(a, slot, slot);
        }
    }

    /// Files `event` for slot `slot` of application `a`, which its full event queue
    /// refused ([`AppConn::notify`]), for the `session-queue` of the thread whose queue it
    /// is (the slot's owner) to queue every [`RETRY_EVERY`]: no later event may come for
    /// the slot (the peer may have sent its last data). Not for a dead application:
    /// nobody reads its queue, and a retry would wake the thread while its connections
    /// linger.
    pub(crate) fn refused(&mut self, a: u32, slot: u32, event: u32) {
        let Some(app) = self.apps.get(a as usize).and_then(|x| x.as_ref()) else {
            return;
        };
        self.evq_refused += 1;
        let r = Refused {
            app: a,
            slot,
            event,
        };
        // The queue `push_event` used: the slot's owner (0 for one without a table here).
        let t = app.owner(slot) as usize;
        let t = if t < self.workers.len() { t } else { 0 };
        if app.dead || self.workers[t].evq_retry.contains(&r) {
            return;
        }
        self.workers[t].evq_retry.push(r);
        if t == 0 {
            self.retry_kick
                .store(true, std::sync::atomic::Ordering::Release);
            // Thread 0's `session-queue` reads this kick: a worker filing the retry wakes
            // it, else the retry waits for its next session-process tick (10 ms).
            if self.workers.len() > 1 {
                if let Some(w) = self.graph.as_ref().and_then(|g| g.wakers.first()) {
                    w.wake_if_sleeping();
                }
            }
        } else {
            self.kick_worker(t);
        }
    }

    /// Forgets the refused events of slot `slot` of application `a`: the slot was released,
    /// so they belong to a session that is gone, not to the slot's next owner. Every
    /// thread's list is looked at (they are empty but while an application is behind).
    pub(crate) fn drop_retries(&mut self, a: u32, slot: u32) {
        for w in self.workers.iter_mut() {
            w.evq_retry.retain(|r| !(r.app == a && r.slot == slot));
        }
    }

    /// Queues the events thread `t`'s full event queues refused, if there is room now
    /// (their slots' sessions are still the same: [`Self::drop_retries`]). A dead
    /// application gets none.
    pub(crate) fn retry_events(&mut self, t: usize) {
        let apps = &self.apps;
        let Some(w) = self.workers.get_mut(t) else {
            return;
        };
        // Filtered in place: the list keeps its allocation between retries.
        w.evq_retry.retain(|r| {
            apps.get(r.app as usize)
                .and_then(|x| x.as_ref())
                .is_some_and(|app| !app.dead && !app.push_event(r.event))
        });
    }

    /// Events awaiting a retry on every thread (`show session verbose`).
    pub fn evq_awaiting(&self) -> usize {
        self.workers.iter().map(|w| w.evq_retry.len()).sum()
    }

    /// Whether control requests may come: an application is attached (and alive) or a
    /// connection to the app socket has not sent its `Attach` yet. Only then does a busy
    /// main thread collect the control sockets' events promptly
    /// (`Cx::want_prompt_irqs`).
    pub fn expects_requests(&self) -> bool {
        !self.unattached.is_empty() || self.apps.iter().flatten().any(|a| !a.dead)
    }

    /// Whether the session layer is on (the app socket is bound).
    pub fn enabled(&self) -> bool {
        self.listen.is_some()
    }

    /// The session a datagram from `remote` to `local` belongs to: the connected session,
    /// else a listener on the exact address, else a wildcard listener.
    #[inline]
    pub fn lookup(&self, local: SocketAddr, remote: SocketAddr) -> Option<u32> {
        let w = &self.workers[flow_owner(local, remote, self.workers.len())];
        if !w.connected.is_empty() {
            if let Some(&s) = w.connected.get(&(local, remote)) {
                return Some(s);
            }
        }
        self.listeners
            .get(&(local.ip(), local.port()))
            .or_else(|| {
                self.listeners
                    .get(&(unspecified(local.is_ipv6()), local.port()))
            })
            .copied()
    }

    /// Binds the app socket.
    pub fn enable(&mut self) -> Result<(), SessionError> {
        if self.listen.is_some() {
            return Ok(());
        }
        let p = self.params.cfg.app_socket.clone();
        let fd = seqpacket::listen(&p).map_err(|e| SessionError::Socket(p, e.to_string()))?;
        self.watch_ctl(fd.as_raw_fd());
        self.listen = Some(fd);
        Ok(())
    }

    /// Detaches every application and closes the app socket.
    pub fn disable(&mut self, ports: &mut Vec<PortChange>) {
        for a in 0..self.apps.len() as u32 {
            self.detach_now(a, ports, true);
        }
        for (fd, _) in std::mem::take(&mut self.unattached) {
            self.unwatch_ctl(fd);
        }
        if let Some(fd) = self.listen.take() {
            self.unwatch_ctl(fd);
            if !self.params.cfg.app_socket.starts_with('@') {
                let _ = std::fs::remove_file(&self.params.cfg.app_socket);
            }
        }
    }

    /// Has `session-queue` watch control socket `fd` (readable: serve the sockets now).
    fn watch_ctl(&mut self, fd: RawFd) {
        self.irq_add.push((fd, CTL_TOKEN));
        self.kick.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Has `session-queue` stop watching control socket `fd`, then close it.
    fn unwatch_ctl(&mut self, fd: OwnedFd) {
        self.irq_del.push(fd);
        self.kick.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Serves the app socket: new attaches, control messages, dead applications.
    /// `locals` are Sluice's interface addresses with their prefix lengths. The replies to
    /// the requests are held: the caller applies `ports` (and the TCP registration) on
    /// every thread first, then sends them with [`SessionMain::send_replies`], so that an
    /// application's bind or listen returns only once every thread delivers to its port
    /// (a worker receiving a datagram between the two would answer port unreachable).
    pub fn poll(&mut self, locals: Vec<(IpAddr, u8)>, ports: &mut Vec<PortChange>) {
        if self.params.locals != locals {
            std::sync::Arc::make_mut(&mut self.params).locals = locals;
        }
        let params = self.params.clone();
        self.poll_sockets(&params.locals, ports);
    }

    /// The configuration.
    pub fn cfg(&self) -> &Config {
        &self.params.cfg
    }

    /// Replaces the configuration (thread 0; the other threads see it in the next
    /// [`Params`] they take).
    pub fn set_cfg(&mut self, cfg: Config) {
        std::sync::Arc::make_mut(&mut self.params).cfg = cfg;
    }

    fn poll_sockets(&mut self, locals: &[(IpAddr, u8)], ports: &mut Vec<PortChange>) {
        let Some(l) = &self.listen else { return };
        let mut new = Vec::new();
        for _ in 0..16 {
            match seqpacket::accept(l) {
                Ok(Some(fd)) => new.push(fd),
                _ => break,
            }
        }
        for fd in new {
            self.watch_ctl(fd.as_raw_fd());
            self.unattached.push((fd, std::time::Instant::now()));
        }
        let waiting = std::mem::take(&mut self.unattached);
        for (fd, since) in waiting {
            match seqpacket::recv(&fd) {
                Ok(Recv::None) if since.elapsed().as_secs() < 5 => {
                    self.unattached.push((fd, since))
                }
                Ok(Recv::Msg { buf, len, .. }) if len == msg::MSG_SIZE => match msg::decode(&buf) {
                    Some(Msg::Attach { name }) => self.attach(fd, name),
                    _ => {
                        self.bad_msgs += 1;
                        self.unwatch_ctl(fd);
                    }
                },
                Ok(Recv::Msg { .. }) => {
                    self.bad_msgs += 1;
                    self.unwatch_ctl(fd);
                }
                _ => self.unwatch_ctl(fd),
            }
        }
        for a in 0..self.apps.len() as u32 {
            self.serve_app(a, locals, ports);
        }
        while self.apps.last().is_some_and(|a| a.is_none()) {
            self.apps.pop();
        }
    }

    fn attach(&mut self, sock: OwnedFd, name: String) {
        let g = Geometry {
            n_slots: self.params.cfg.sessions_per_app,
            fifo_size: self.params.cfg.fifo_size,
            evq_len: self
                .params
                .cfg
                .evq_len
                .max(self.params.cfg.sessions_per_app),
            n_queues: self.n_threads() as u32,
        };
        let made = (|| -> std::io::Result<(Region, OwnedFd, Vec<OwnedFd>)> {
            if !g.valid() {
                return Err(std::io::ErrorKind::InvalidInput.into());
            }
            let seg = Region::create("sluice-session", g.size())?;
            seg::init_header(&seg, &g);
            // Sluice's queues start announced as sleeping: the first event signals.
            for t in 0..g.n_queues {
                if let Some(q) = EvQ::sluice(&seg, &g, t) {
                    q.prepare_sleep();
                }
            }
            let efds = (0..g.n_queues)
                .map(|_| shm::eventfd())
                .collect::<std::io::Result<Vec<_>>>()?;
            Ok((seg, shm::eventfd()?, efds))
        })();
        let (seg, app_efd, sluice_efds) = match made {
            Ok(x) => x,
            Err(e) => {
                log::warn!("session: attach of `{name}': {e}");
                let r = Msg::AttachReply {
                    retval: -e.raw_os_error().unwrap_or(libc::ENOMEM),
                    seg_size: 0,
                };
                let _ = seqpacket::send(&sock, &msg::encode(&r), None);
                self.unwatch_ctl(sock);
                return;
            }
        };
        let sent = seqpacket::send(
            &sock,
            &msg::encode(&Msg::AttachReply {
                retval: 0,
                seg_size: g.size() as u64,
            }),
            Some(seg.raw_fd()),
        )
        .and_then(|_| {
            seqpacket::send(
                &sock,
                &msg::encode(&Msg::EventFd { which: 0 }),
                Some(app_efd.as_raw_fd()),
            )
        })
        .and_then(|_| {
            sluice_efds.iter().enumerate().try_for_each(|(t, e)| {
                seqpacket::send(
                    &sock,
                    // n_queues <= seg::MAX_QUEUES (255, `valid`): 1 + t fits in a u8.
                    &msg::encode(&Msg::EventFd {
                        which: (1 + t) as u8,
                    }),
                    Some(e.as_raw_fd()),
                )
            })
        });
        if sent.is_err() {
            self.unwatch_ctl(sock);
            return;
        }
        let id = match self.apps.iter().position(|a| a.is_none()) {
            Some(i) => i,
            None => {
                self.apps.push(None);
                self.apps.len() - 1
            }
        } as u32;
        for (t, e) in sluice_efds.iter().enumerate() {
            if t == 0 {
                self.irq_add.push((e.as_raw_fd(), id));
            } else {
                self.workers[t].efd_add.push((e.as_raw_fd(), id));
                self.kick_worker(t);
            }
        }
        self.kick.store(true, std::sync::atomic::Ordering::Release);
        self.apps_gen += 1;
        self.apps[id as usize] = Some(AppConn {
            name,
            sock: Some(sock),
            seg: std::sync::Arc::new(seg),
            g,
            app_efd,
            sluice_efds,
            slots: Slots::new(g.n_slots),
            owners: (0..g.n_slots).map(|_| AtomicU32::new(0)).collect(),
            gens: (0..g.n_slots).map(|_| AtomicU32::new(0)).collect(),
            tcp: (0..g.n_slots).map(|_| AtomicBool::new(false)).collect(),
            sess_on: (0..SESSION_THREADS).map(|_| AtomicU32::new(0)).collect(),
            serial: self.attached + 1,
            dead: false,
        });
        self.attached += 1;
    }

    pub(crate) fn serve_app(
        &mut self,
        a: u32,
        locals: &[(IpAddr, u8)],
        ports: &mut Vec<PortChange>,
    ) {
        for _ in 0..64 {
            let Some(app) = self.apps.get(a as usize).and_then(|x| x.as_ref()) else {
                return;
            };
            let Some(sock) = app.sock.as_ref().filter(|_| !app.dead) else {
                return;
            };
            let m = match seqpacket::recv(sock) {
                Ok(Recv::None) => return,
                Ok(Recv::Msg { buf, len, .. }) if len == msg::MSG_SIZE => msg::decode(&buf),
                Ok(Recv::Msg { .. }) => None,
                Ok(Recv::Closed) | Err(_) => {
                    self.detach(a, ports);
                    return;
                }
            };
            let reply = match m {
                Some(Msg::Bind { req, local }) => {
                    let r = self.bind(a, local, locals, ports);
                    Some(self.session_reply(req, r))
                }
                Some(Msg::Connect { req, remote, lport }) => {
                    let r = self.connect(a, remote, lport, locals, ports);
                    Some(self.session_reply(req, r))
                }
                Some(Msg::Listen {
                    req,
                    local,
                    backlog,
                }) => {
                    let r = self.tcp_listen(a, local, backlog, locals);
                    Some(self.session_reply(req, r))
                }
                // Opened by the thread that will own it: thread 0 takes the slot and the
                // port and forwards the rest (the owner queues the reply).
                Some(Msg::TcpConnect { req, remote }) => {
                    match self.tcp_connect_begin(a, remote, locals) {
                        Ok((0, c)) => {
                            let r = self.tcp_open(0, &c);
                            Some(self.session_reply(req, r))
                        }
                        Ok((t, c)) => {
                            self.send_ctl(t, CtlReq::Connect { c, req });
                            None
                        }
                        Err(e) => Some(self.session_reply(req, Err(e))),
                    }
                }
                Some(Msg::Close { req, slot }) => {
                    let sid = self.slot_session(a, slot);
                    let r = match sid {
                        Some(sid) => {
                            match self.owner_elsewhere(a, slot, sid) {
                                // The owner closes it (the reply needs nothing of it).
                                Some(t) => {
                                    let gen = self.apps[a as usize]
                                        .as_ref()
                                        .map_or(0, |x| x.slot_gen(slot));
                                    let c = CtlReq::Close {
                                        app: a,
                                        serial: self.serial_of(a),
                                        slot,
                                        gen,
                                        sid,
                                    };
                                    self.send_ctl(t, c);
                                }
                                None => self.close(sid, ports),
                            }
                            0
                        }
                        None => -SessionError::NoSession.errno(),
                    };
                    (req != msg::NO_REPLY).then_some(Msg::CloseReply { req, retval: r })
                }
                Some(Msg::Shutdown { req, slot }) => {
                    let sid = self.slot_session(a, slot);
                    match sid.map(|sid| (sid, self.owner_elsewhere(a, slot, sid))) {
                        // The owner applies it and queues the reply (its outcome depends
                        // on the connection's state).
                        Some((sid, Some(t))) => {
                            let gen = self.apps[a as usize]
                                .as_ref()
                                .map_or(0, |x| x.slot_gen(slot));
                            let c = CtlReq::Shutdown {
                                app: a,
                                serial: self.serial_of(a),
                                slot,
                                gen,
                                sid,
                                req,
                            };
                            self.send_ctl(t, c);
                            None
                        }
                        Some((sid, None)) => {
                            let r = match self.tcp_shutdown(sid) {
                                Ok(()) => 0,
                                Err(e) => -e.errno(),
                            };
                            Some(Msg::CloseReply { req, retval: r })
                        }
                        None => Some(Msg::CloseReply {
                            req,
                            retval: -SessionError::NoSession.errno(),
                        }),
                    }
                }
                _ => {
                    self.bad_msgs += 1;
                    None
                }
            };
            if let Some(r) = reply {
                let serial = self.serial_of(a);
                self.replies.push((a, serial, r));
            }
        }
    }

    /// Records whether protocol 6 is registered on every thread ([`SessionMain::tcp_applied`]).
    /// Once it is, the threads holding connections' segments are kicked to send them.
    pub fn set_tcp_applied(&mut self, on: bool) {
        let was = std::mem::replace(&mut self.tcp_applied, on);
        if on && !was {
            for t in 0..self.workers.len() {
                if !self.workers[t].tcp_out.is_empty() {
                    self.kick_worker(t);
                }
            }
        }
    }

    /// Whether protocol 6 should be registered: TCP sessions exist, or connects wait on
    /// their owner's ring (a worker may queue such a connect's reply before the control
    /// poll's second lock section, which must find protocol 6 registered or its failure
    /// known). When not, the session layer holds its connections' segments from now on
    /// (`tcp_applied` cleared before the unregistration): a connection made before the
    /// next registration waits for it.
    pub fn tcp_wanted(&mut self) -> bool {
        let tcp = self.tcp_count() > 0 || self.tcp_pending > 0;
        if !tcp {
            self.set_tcp_applied(false);
        }
        tcp
    }

    /// Whether [`SessionMain::tcp_applied`] is set.
    pub fn tcp_applied(&self) -> bool {
        self.tcp_applied
    }

    /// Whether replies wait for [`SessionMain::send_replies`].
    pub fn has_replies(&self) -> bool {
        !self.replies.is_empty()
    }

    /// Sends the replies [`SessionMain::poll`] held, in order. An application whose socket
    /// refuses one is detached (its port changes go to `ports`; its later replies are
    /// dropped with it).
    pub fn send_replies(&mut self, ports: &mut Vec<PortChange>) {
        let replies = std::mem::take(&mut self.replies);
        for &(a, serial, ref r) in &replies {
            // Not to a later application given the same index.
            let sock = self.app_of(a, serial).and_then(|x| x.sock.as_ref());
            if let Some(sock) = sock {
                if seqpacket::send(sock, &msg::encode(r), None).is_err() {
                    self.detach(a, ports);
                }
            }
        }
        while self.apps.last().is_some_and(|a| a.is_none()) {
            self.apps.pop();
        }
        // Keep the allocation for the next round.
        self.replies = replies;
        self.replies.clear();
    }

    /// The registrations `poll_control` could not apply (`udp`: (IPv6?, port, why);
    /// `tcp`: protocol 6's): each reply of this round that opened a session needing one
    /// becomes that error and its session is closed (its port change goes to `ports`), so
    /// an application is never told a bind, listen or connect succeeded whose packets
    /// the host stack will not get.
    pub fn refuse_unregistered(
        &mut self,
        udp: &[(bool, u16, SessionError)],
        tcp: Option<&SessionError>,
        ports: &mut Vec<PortChange>,
    ) {
        if udp.is_empty() && tcp.is_none() {
            return;
        }
        let mut replies = std::mem::take(&mut self.replies);
        for (a, _, r) in replies.iter_mut() {
            let Msg::SessionReply {
                req,
                retval: 0,
                slot,
                ..
            } = *r
            else {
                continue;
            };
            let Some(sid) = self
                .apps
                .get(*a as usize)
                .and_then(|x| x.as_ref())
                .and_then(|x| x.slots.get(slot))
            else {
                continue;
            };
            let Some(s) = self.sess(sid) else { continue };
            let is_tcp = s.proto.is_tcp();
            let why = if is_tcp {
                tcp
            } else {
                let (v6, port) = (s.local.is_ipv6(), s.local.port());
                udp.iter().find(|x| (x.0, x.1) == (v6, port)).map(|x| &x.2)
            };
            let Some(why) = why else { continue };
            *r = self.session_reply(req, Err(why.clone()));
            if is_tcp {
                self.tcp_abort(sid);
            } else {
                self.close(sid, ports);
            }
        }
        self.replies = replies;
    }

    fn session_reply(&self, req: u32, r: Result<u32, SessionError>) -> Msg {
        match r.map(|sid| self.sess(sid).map(|s| (s.slot, s.local))) {
            Ok(Some((slot, local))) => Msg::SessionReply {
                req,
                retval: 0,
                slot,
                local,
            },
            Ok(None) => Msg::SessionReply {
                req,
                retval: -libc::EIO,
                slot: 0,
                local: SocketAddr::new(unspecified(false), 0),
            },
            Err(e) => Msg::SessionReply {
                req,
                retval: -e.errno(),
                slot: 0,
                local: SocketAddr::new(unspecified(false), 0),
            },
        }
    }

    fn port_ref(&mut self, v6: bool, port: u16, ports: &mut Vec<PortChange>) {
        let r = self.port_refs.entry((v6, port)).or_insert(0);
        *r += 1;
        if *r == 1 {
            ports.push((v6, port, true));
        }
    }

    fn port_unref(&mut self, v6: bool, port: u16, ports: &mut Vec<PortChange>) {
        if let Some(r) = self.port_refs.get_mut(&(v6, port)) {
            *r -= 1;
            if *r == 0 {
                self.port_refs.remove(&(v6, port));
                ports.push((v6, port, false));
            }
        }
    }

    pub(crate) fn ephemeral_in(
        &mut self,
        v6: bool,
        used: impl Fn(&Self, bool, u16) -> bool,
    ) -> Option<u16> {
        let n = (EPH.end() - EPH.start()) as u32 + 1;
        for _ in 0..n {
            let p = EPH.start() + self.next_eph % n as u16;
            self.next_eph = self.next_eph.wrapping_add(1) % n as u16;
            if !used(self, v6, p) {
                return Some(p);
            }
        }
        None
    }

    /// The secret of initial sequence numbers (RFC 6528) and SYN cookies ([`Params`]).
    pub(crate) fn iss_key(&self) -> u64 {
        self.params.iss_key
    }

    fn ephemeral(&mut self, v6: bool) -> Option<u16> {
        self.ephemeral_in(v6, |s, v6, p| {
            s.port_refs.contains_key(&(v6, p)) || s.foreign_udp.contains(&(v6, p))
        })
    }

    /// A free slot of application `a`, taken ([`PENDING`]) and made ready for a new
    /// session ([`AppConn::reset_slot`]): the caller fills it with its session or frees it.
    pub(crate) fn take_slot(&mut self, a: u32) -> Result<u32, SessionError> {
        let app = self
            .apps
            .get(a as usize)
            .and_then(|x| x.as_ref())
            .ok_or(SessionError::Invalid)?;
        let slot = app.slots.take(PENDING).ok_or(SessionError::NoSpace)?;
        // Reset by its taker alone (the slot is held): `&AppConn` is enough.
        app.reset_slot(slot);
        Ok(slot)
    }

    /// Fills slot `slot` of application `a`, which its caller took ([`PENDING`]), with
    /// session `sid` ([`Slots::set`]): false when the slot is no longer pending (or the
    /// application gone), and then nothing is written.
    pub(crate) fn fill_slot(&self, a: u32, slot: u32, sid: u32) -> bool {
        self.apps
            .get(a as usize)
            .and_then(|x| x.as_ref())
            .is_some_and(|app| app.slots.set(slot, sid))
    }

    pub(crate) fn new_session(
        &mut self,
        thread: usize,
        a: u32,
        local: SocketAddr,
        remote: Option<SocketAddr>,
    ) -> Result<u32, SessionError> {
        let slot = self.take_slot(a)?;
        let s = Session {
            app: a,
            slot,
            local,
            remote,
            stats: SessStats::default(),
            proto: Proto::Udp,
        };
        let Some(sid) = self.alloc_sess(thread, s) else {
            if let Some(app) = self.apps[a as usize].as_ref() {
                app.slots.free_if(slot, PENDING);
            }
            return Err(SessionError::NoSpace);
        };
        if !self.fill_slot(a, slot, sid) {
            // Not ours any more: the session is unfiled, the slot left to its holder.
            self.take_sess(sid);
            self.free_sess(sid);
            return Err(SessionError::NoSession);
        }
        Ok(sid)
    }

    /// Binds a listener for application `a`.
    pub fn bind(
        &mut self,
        a: u32,
        mut local: SocketAddr,
        locals: &[(IpAddr, u8)],
        ports: &mut Vec<PortChange>,
    ) -> Result<u32, SessionError> {
        let v6 = local.is_ipv6();
        if !local.ip().is_unspecified() && !locals.iter().any(|(x, _)| *x == local.ip()) {
            return Err(SessionError::NotLocal);
        }
        if local.port() == 0 {
            local.set_port(self.ephemeral(v6).ok_or(SessionError::NoSpace)?);
        }
        if clashes(self.listeners.keys(), local) {
            return Err(SessionError::InUse);
        }
        let sid = self.new_session(0, a, local, None)?;
        self.listeners.insert((local.ip(), local.port()), sid);
        self.port_ref(v6, local.port(), ports);
        Ok(sid)
    }

    /// Connects a session of application `a` to `remote` (source address: the first local
    /// address whose prefix holds `remote`, else the family's first).
    pub fn connect(
        &mut self,
        a: u32,
        remote: SocketAddr,
        lport: u16,
        locals: &[(IpAddr, u8)],
        ports: &mut Vec<PortChange>,
    ) -> Result<u32, SessionError> {
        if remote.ip().is_unspecified() || remote.port() == 0 || remote.ip().is_multicast() {
            return Err(SessionError::Invalid);
        }
        let v6 = remote.is_ipv6();
        let src = source_for(locals, remote.ip()).ok_or(SessionError::NotLocal)?;
        let port = match lport {
            0 => self.ephemeral(v6).ok_or(SessionError::NoSpace)?,
            p => p,
        };
        let local = SocketAddr::new(src, port);
        let owner = flow_owner(local, remote, self.workers.len());
        if self.workers[owner].connected.contains_key(&(local, remote)) {
            return Err(SessionError::InUse);
        }
        let sid = self.new_session(owner, a, local, Some(remote))?;
        self.workers[owner].connected.insert((local, remote), sid);
        self.port_ref(v6, port, ports);
        Ok(sid)
    }

    /// Closes a session.
    pub fn close(&mut self, sid: u32, ports: &mut Vec<PortChange>) {
        if self.sess(sid).is_some_and(|s| s.proto.is_tcp()) {
            self.tcp_close(sid);
            return;
        }
        let Some(s) = self.take_sess(sid) else {
            return;
        };
        match s.remote {
            Some(r) => {
                self.worker_of(sid).connected.remove(&(s.local, r));
            }
            None => {
                self.listeners.remove(&(s.local.ip(), s.local.port()));
            }
        }
        self.port_unref(s.local.is_ipv6(), s.local.port(), ports);
        if let Some(app) = self.apps.get(s.app as usize).and_then(|x| x.as_ref()) {
            app.slots.free_if(s.slot, sid);
        }
        self.drop_retries(s.app, s.slot);
        self.free_sess(sid);
    }

    /// Detaches application `a`: closes its sessions and frees its segment.
    pub fn detach(&mut self, a: u32, ports: &mut Vec<PortChange>) {
        self.detach_now(a, ports, false);
    }

    /// Detaches application `a`: its UDP sessions close; TCP connections it had closed
    /// linger (their data and FIN are still delivered) unless `abort`; the others are
    /// aborted (the peers get a RST).
    fn detach_now(&mut self, a: u32, ports: &mut Vec<PortChange>, abort: bool) {
        let Some(app) = self.apps.get(a as usize).and_then(|x| x.as_ref()) else {
            return;
        };
        if app.dead && !abort {
            return;
        }
        // The slot word first (Acquire), the TCP flag its taker set before it after it.
        let sids: Vec<u32> = (0..app.slots.len() as u32)
            .filter_map(|i| app.slots.get(i).filter(|_| !app.slot_tcp(i)))
            .collect();
        for s in sids {
            self.close(s, ports);
        }
        // Its TCP sessions (also those in the handshake or TIME-WAIT, which hold no slot):
        // thread 0's here; each worker's by the worker (a `Detach` on its ring, behind the
        // closes thread 0 forwarded before), unless this is an abort of everything.
        let forward = !abort && self.workers.len() > 1;
        let lingering = self.detach_tcp(a, forward.then_some(0), abort);
        // What is left on the workers (read, not changed: nothing can add a session of
        // the application now that its listeners are gone) keeps the application until
        // its last connection ends (`tcp_release` reaps it); only the workers holding
        // one get a `Detach`.
        let on = |t: usize| self.apps[a as usize].as_ref().map_or(0, |x| x.sess_on(t));
        let elsewhere: Vec<usize> = match forward {
            true => (1..self.workers.len()).filter(|&t| on(t) > 0).collect(),
            false => Vec::new(),
        };
        if lingering > 0 || !elsewhere.is_empty() {
            let sock = self.apps[a as usize].as_mut().and_then(|app| {
                app.dead = true;
                app.sock.take()
            });
            if let Some(fd) = sock {
                self.unwatch_ctl(fd);
            }
            let serial = self.serial_of(a);
            for t in elsewhere {
                self.send_ctl(t, CtlReq::Detach { app: a, serial });
            }
            return;
        }
        self.reap_app(a);
    }

    /// Detaches application `a`'s TCP sessions on thread `only` (every thread: `None`):
    /// those it had closed linger (their data and FIN still go out) unless `abort`, the
    /// others are reset. Returns how many linger.
    fn detach_tcp(&mut self, a: u32, only: Option<usize>, abort: bool) -> usize {
        let threads = match only {
            Some(t) => t..t + 1,
            None => 0..self.workers.len(),
        };
        let ws = &self.workers;
        let tcp: Vec<u32> = threads
            .flat_map(|t| {
                ws[t].sessions.iter().enumerate().filter_map(move |(i, s)| {
                    s.as_ref()
                        .filter(|s| s.app == a && s.proto.is_tcp())
                        .map(|_| handle(t, i))
                })
            })
            .collect();
        let now = std::time::Instant::now();
        let mut lingering = 0;
        for s in tcp {
            let linger = !abort
                && match self.sess_mut(s).map(|x| &mut x.proto) {
                    Some(Proto::Tcp(t, l)) if l.app_closed => {
                        t.orphan(now);
                        true
                    }
                    _ => false,
                };
            if linger {
                lingering += 1;
                self.tcp_rearm(s);
            } else {
                self.tcp_abort(s);
            }
        }
        lingering
    }

    /// Frees what is left of application `a` (its segment, eventfds).
    pub(crate) fn reap_app(&mut self, a: u32) {
        // The per-thread counts thread 0 reads instead of the tables must not drift: every
        // test that reaps an application checks them against the tables here.
        if cfg!(debug_assertions) {
            if let Some(app) = self.apps.get(a as usize).and_then(|x| x.as_ref()) {
                let counted: Vec<u32> = (0..self.workers.len()).map(|t| app.sess_on(t)).collect();
                let held: Vec<u32> = self
                    .workers
                    .iter()
                    .map(|w| w.sessions.iter().flatten().filter(|s| s.app == a).count() as u32)
                    .collect();
                debug_assert_eq!(counted, held, "application {a}'s sessions per thread");
            }
        }
        if let Some(app) = self.apps.get_mut(a as usize).and_then(|x| x.take()) {
            for w in self.workers.iter_mut() {
                w.evq_retry.retain(|r| r.app != a);
            }
            for (t, e) in app.sluice_efds.into_iter().enumerate() {
                if t == 0 {
                    self.irq_del.push(e);
                } else if t < self.workers.len() {
                    self.workers[t].efd_del.push(e);
                    self.kick_worker(t);
                }
            }
            self.apps_gen += 1;
            if let Some(fd) = app.sock {
                self.unwatch_ctl(fd);
            }
            self.kick.store(true, std::sync::atomic::Ordering::Release);
            self.detached += 1;
        }
    }

    /// Live sessions.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &Session)> {
        self.workers.iter().enumerate().flat_map(|(t, w)| {
            w.sessions
                .iter()
                .enumerate()
                .filter_map(move |(i, s)| s.as_ref().map(|s| (handle(t, i), s)))
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A session layer with one attached application (its socket is one end of a pair).
    pub(crate) fn with_app() -> (SessionMain, OwnedFd) {
        with_app_on(1)
    }

    /// [`with_app`] with `threads` session threads when the application attaches (its
    /// segment has an event-queue pair per thread).
    pub(crate) fn with_app_on(threads: usize) -> (SessionMain, OwnedFd) {
        let mut sm = SessionMain::default();
        sm.set_cfg(Config {
            sessions_per_app: 4,
            fifo_size: 4096,
            evq_len: 16,
            ..Config::default()
        });
        let _ = sm.worker_kick(threads - 1);
        let b = attach_one(&mut sm);
        assert!(sm.apps[0].is_some());
        (sm, b)
    }

    /// Attaches one more application (its socket is one end of a pair); returns the
    /// other end.
    pub(crate) fn attach_one(sm: &mut SessionMain) -> OwnedFd {
        let mut fds = [0i32; 2];
        // SAFETY: socketpair(2) fills two fds we then own.
        let r =
            unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0, fds.as_mut_ptr()) };
        assert_eq!(r, 0);
        use std::os::fd::FromRawFd;
        // SAFETY: just created, owned once each.
        let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        sm.attach(a, "t".into());
        b
    }

    /// The most threads the host stack starts with still make a valid segment (an
    /// event-queue pair each) on attach.
    #[test]
    fn an_application_attaches_with_the_most_session_threads() {
        let (sm, _peer) = with_app_on(SESSION_THREADS);
        assert_eq!(
            sm.apps[0].as_ref().unwrap().g.n_queues as usize,
            SESSION_THREADS
        );
    }

    /// A slot owned by a thread the segment has no queue for names thread 0 (whose
    /// `session-queue` takes any connection's tx events and finds its owner), not
    /// `t % n_queues` (a worker that would drop them as another thread's).
    #[test]
    fn a_slot_of_a_thread_without_a_queue_is_served_by_thread_0() {
        let (mut sm, _peer) = with_app_on(2);
        let a = sm.apps[0].as_mut().unwrap();
        a.set_owner(1, 1);
        assert_eq!(a.owner(1), 1);
        a.set_owner(1, 3);
        assert_eq!(a.owner(1), 0);
        let (rx, _) = a.fifos(1).unwrap();
        assert_eq!(rx.owner().load(std::sync::atomic::Ordering::Relaxed), 0);
    }

    pub(crate) fn locals() -> Vec<(IpAddr, u8)> {
        vec![
            ("10.0.0.1".parse().unwrap(), 24),
            ("10.0.1.1".parse().unwrap(), 24),
            ("2001:db8::1".parse().unwrap(), 64),
        ]
    }

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// Drives `serve_app` → `send_replies` directly; that `poll_control` applies the ports
    /// between the two is covered only by `bin/sluice/tests/hoststack.rs`.
    #[test]
    fn a_bind_is_answered_only_after_its_port_is_applied() {
        let (mut sm, peer) = with_app();
        replies(&peer); // the attach's
        let bind = Msg::Bind {
            req: 7,
            local: sa("0.0.0.0:7000"),
        };
        seqpacket::send(&peer, &msg::encode(&bind), None).unwrap();
        let mut ports = Vec::new();
        sm.serve_app(0, &locals(), &mut ports);
        assert_eq!(ports, [(false, 7000, true)], "the port to register");
        assert_eq!(replies(&peer), [], "no reply before the port is registered");
        assert!(sm.has_replies());
        let mut more = Vec::new();
        sm.send_replies(&mut more);
        assert_eq!(more, []);
        assert!(!sm.has_replies());
        let got = replies(&peer);
        assert!(
            matches!(
                got[..],
                [Msg::SessionReply {
                    req: 7,
                    retval: 0,
                    ..
                }]
            ),
            "{got:?}"
        );
    }

    /// A registration `poll_control` could not apply (a tunnel serves UDP port 4789;
    /// protocol 6 refused) fails the bind and the UDP connect on that port and the listen
    /// of that round with the error, and closes their sessions; the other bind
    /// of the round is answered as usual. (Before: logged, and every reply said success.)
    #[test]
    fn a_failed_registration_fails_the_reply_and_undoes_the_session() {
        let (mut sm, peer) = with_app();
        replies(&peer); // the attach's
        for m in [
            Msg::Bind {
                req: 1,
                local: sa("0.0.0.0:4789"),
            },
            Msg::Connect {
                req: 2,
                remote: sa("10.0.0.2:4789"),
                lport: 4789,
            },
            Msg::Bind {
                req: 3,
                local: sa("0.0.0.0:7000"),
            },
            Msg::Listen {
                req: 4,
                local: sa("10.0.0.1:8080"),
                backlog: 8,
            },
        ] {
            seqpacket::send(&peer, &msg::encode(&m), None).unwrap();
        }
        let mut ports = Vec::new();
        sm.serve_app(0, &locals(), &mut ports);
        assert_eq!(ports, [(false, 4789, true), (false, 7000, true)]);
        assert_eq!(sm.tcp_count(), 1);
        let mut more = Vec::new();
        sm.refuse_unregistered(
            &[(false, 4789, SessionError::InUse)],
            Some(&SessionError::NotRegistered),
            &mut more,
        );
        assert_eq!(more, [(false, 4789, false)], "the port given back");
        sm.send_replies(&mut more);
        let got: Vec<(u32, i32)> = replies(&peer)
            .into_iter()
            .map(|m| match m {
                Msg::SessionReply { req, retval, .. } => (req, retval),
                m => panic!("{m:?}"),
            })
            .collect();
        assert_eq!(
            got,
            [
                (1, -libc::EADDRINUSE),
                (2, -libc::EADDRINUSE),
                (3, 0),
                (4, -libc::EIO)
            ]
        );
        let live: Vec<u16> = sm.iter().map(|(_, s)| s.local.port()).collect();
        assert_eq!(live, [7000], "only the good bind's session is left");
        assert_eq!(sm.tcp_count(), 0);
        assert!(sm.acc().by_addr.is_empty() && sm.acc().listens.is_empty());
        let held = sm.apps[0].as_ref().unwrap().slots.iter().flatten().count();
        assert_eq!(held, 1, "the failed sessions' slots are free");
        assert_eq!(sm.port_refs.len(), 1, "{:?}", sm.port_refs);
    }

    /// Runs `f(t, &slots)` on four threads `t` at once (a barrier before `f`), and gives
    /// what each returned, in thread order.
    fn on_four<R: Send + 'static>(
        slots: &std::sync::Arc<Slots>,
        f: fn(usize, &Slots) -> R,
    ) -> Vec<R> {
        let go = std::sync::Arc::new(std::sync::Barrier::new(4));
        let ts: Vec<_> = (0..4)
            .map(|t| {
                let (slots, go) = (slots.clone(), go.clone());
                std::thread::spawn(move || {
                    go.wait();
                    f(t, &slots)
                })
            })
            .collect();
        ts.into_iter().map(|t| t.join().unwrap()).collect()
    }

    /// Four threads take and free slots at once, as a worker's accept and thread 0's bind
    /// or connect would without a common lock. Each holds 8 slots and, 400,000 times,
    /// frees its oldest and takes another, among the others doing the same on the same
    /// first slots: a slot holds its taker's value until it frees it, and only that value
    /// frees it. Then all four take until none is left: every slot taken by exactly one.
    /// `set` fills only a `PENDING` slot. With `take` a load then a store (no yield
    /// between) this failed 20 runs of 20 at load 21 on 2 cores (about 1.5 s a run);
    /// holding one slot, or 20,000 rounds, it failed about a third of the runs or none.
    #[test]
    fn concurrent_takers_never_share_a_slot() {
        const N: u32 = 256;
        let slots = std::sync::Arc::new(Slots::new(N));
        on_four(&slots, |t, slots| {
            const ROUNDS: usize = 400_000;
            const K: usize = 8;
            // Each thread holds K slots: each round frees its oldest (after checking it
            // still holds its value) and takes another.
            let mut held = std::collections::VecDeque::with_capacity(K);
            for i in 0..ROUNDS + K {
                if held.len() == K || i >= ROUNDS {
                    let Some((s, v)) = held.pop_front() else {
                        break;
                    };
                    assert_eq!(slots.get(s), Some(v), "slot {s} shared");
                    assert!(!slots.free_if(s, v + 1), "freed by another value");
                    assert!(slots.free_if(s, v), "slot {s} shared");
                }
                if i < ROUNDS {
                    let v = handle(t, i % 1024);
                    held.push_back((slots.take(v).expect("a free slot"), v));
                }
            }
        });
        assert!(slots.iter().all(|s| s.is_none()));
        let got = on_four(&slots, |t, slots| {
            let mut mine = vec![];
            while let Some(s) = slots.take(handle(t, mine.len())) {
                mine.push(s);
            }
            mine
        });
        let mut all: Vec<u32> = got.iter().flatten().copied().collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len() as u32, N, "a slot taken twice, or one lost");
        assert_eq!(got.iter().map(|m| m.len() as u32).sum::<u32>(), N);
        for (t, mine) in got.iter().enumerate() {
            for (i, &s) in mine.iter().enumerate() {
                assert_eq!(slots.get(s), Some(handle(t, i)));
                assert!(slots.free_if(s, handle(t, i)));
            }
        }
        assert!(slots.iter().all(|s| s.is_none()));
        assert!(!slots.set(0, handle(0, 0)), "a free slot is not filled");
        assert_eq!(slots.take(PENDING), Some(0));
        assert_eq!(slots.get(0), Some(PENDING));
        assert!(slots.set(0, handle(0, 0)));
        assert!(
            !slots.set(0, handle(0, 1)),
            "a filled slot is not filled again"
        );
        assert_eq!(slots.get(0), Some(handle(0, 0)));
    }

    /// A worker's connection made before protocol 6 is registered waits for it, even when
    /// it is not the first TCP session (a listen came first in the same control poll). The
    /// control poll's order (register, then `set_tcp_applied`) is covered by
    /// `bin/sluice/tests/hoststack.rs`; this drives the session layer directly.
    #[test]
    fn a_worker_connect_is_sent_after_the_registration() {
        let (mut sm, peer) = with_app();
        replies(&peer); // the attach's
        let _ = sm.worker_kick(2);
        sm.next_thread = 1;
        let listen = Msg::Listen {
            req: 2,
            local: sa("10.0.0.1:8080"),
            backlog: 8,
        };
        let connect = Msg::TcpConnect {
            req: 3,
            remote: sa("10.0.0.2:80"),
        };
        seqpacket::send(&peer, &msg::encode(&listen), None).unwrap();
        seqpacket::send(&peer, &msg::encode(&connect), None).unwrap();
        let mut ports = Vec::new();
        sm.serve_app(0, &locals(), &mut ports);
        let kicked = |sm: &SessionMain| {
            sm.workers[1]
                .tcp_kick
                .swap(false, std::sync::atomic::Ordering::AcqRel)
        };
        // The connect waits on its owner's ring (thread 0 kicked it to open it).
        assert!(kicked(&sm), "the owner not kicked for its ring");
        assert_eq!(sm.tcp_count(), 1);
        let mut ring = std::mem::take(&mut *sm.workers[1].ctl_in.lock().unwrap());
        sm.apply_ctl(1, &mut ring);
        assert_eq!(sm.tcp_count(), 2, "protocol 6 to register");
        assert_eq!(sm.workers[1].tcp_out.len(), 1, "the SYN is queued");
        assert!(!kicked(&sm), "no SYN before protocol 6 is registered");
        sm.send_replies(&mut ports);
        assert!(
            matches!(
                replies(&peer)[..],
                [
                    Msg::SessionReply {
                        req: 2,
                        retval: 0,
                        ..
                    },
                    Msg::SessionReply {
                        req: 3,
                        retval: 0,
                        ..
                    }
                ]
            ),
            "the replies"
        );
        assert!(!kicked(&sm), "replies do not release the SYN");
        sm.set_tcp_applied(true);
        assert!(kicked(&sm), "registered: the worker sends the SYN");
        // Once registered, a connection is sent as soon as its owner opens it.
        sm.next_thread = 1;
        let connect = Msg::TcpConnect {
            req: 4,
            remote: sa("10.0.0.2:81"),
        };
        seqpacket::send(&peer, &msg::encode(&connect), None).unwrap();
        sm.serve_app(0, &locals(), &mut ports);
        assert!(kicked(&sm));
        let mut ring = std::mem::take(&mut *sm.workers[1].ctl_in.lock().unwrap());
        sm.apply_ctl(1, &mut ring);
        assert!(kicked(&sm));
    }

    /// Two threads, protocol 6 registered or not, and one application whose connect
    /// (request `req`) thread 0 served and forwarded to thread 1's ring, not applied yet.
    fn connect_on_worker(req: u32, registered: bool) -> (SessionMain, OwnedFd, Vec<PortChange>) {
        let (mut sm, peer) = with_app();
        replies(&peer); // the attach's
        let _ = sm.worker_kick(1);
        sm.set_tcp_applied(registered);
        sm.next_thread = 1;
        let connect = Msg::TcpConnect {
            req,
            remote: sa("10.0.0.2:80"),
        };
        seqpacket::send(&peer, &msg::encode(&connect), None).unwrap();
        let mut ports = Vec::new();
        sm.serve_app(0, &locals(), &mut ports);
        (sm, peer, ports)
    }

    /// A connect waiting on its owner's ring counts for protocol 6 though no TCP session
    /// exists yet. This takes `poll_control`'s steps in the order that went wrong when it
    /// did not: the first lock section (poll, `tcp_wanted`), the owner applying the
    /// connect and queuing its reply before the second section (registration outcome,
    /// `refuse_unregistered`, `send_replies`). Registered: it stays registered (no
    /// unregistration while the SYN waits). Not registered and the registration fails: the
    /// owner's reply is refused with the failure, not sent as a success.
    #[test]
    fn a_pending_connect_keeps_protocol_6_wanted() {
        for registered in [true, false] {
            // Section 1: the connect went to thread 1's ring; no session is filed yet.
            let (mut sm, peer, mut ports) = connect_on_worker(7, registered);
            let mut ring = std::mem::take(&mut *sm.workers[1].ctl_in.lock().unwrap());
            assert!(matches!(ring[..], [CtlReq::Connect { .. }]), "{ring:?}");
            assert_eq!((sm.tcp_count(), sm.tcp_pending), (0, 1));
            assert!(sm.tcp_wanted(), "a pending connect wants protocol 6");
            assert_eq!(sm.tcp_applied(), registered, "not cleared (no churn)");
            assert!(!sm.has_replies());
            // Between the sections: the owner opens it and queues the reply.
            sm.apply_ctl(1, &mut ring);
            assert_eq!((sm.tcp_count(), sm.tcp_pending), (1, 0));
            assert!(sm.has_replies());
            // Section 2, with section 1's registration outcome.
            let failed = SessionError::NotRegistered;
            let tcp_failed = (!registered).then_some(&failed);
            sm.refuse_unregistered(&[], tcp_failed, &mut ports);
            sm.send_replies(&mut ports);
            let r = replies(&peer);
            let [Msg::SessionReply { req: 7, retval, .. }] = r[..] else {
                panic!("{r:?}")
            };
            if registered {
                assert_eq!(retval, 0);
                assert!(sm.tcp_wanted() && sm.tcp_applied());
            } else {
                assert_eq!(retval, -failed.errno(), "refused with the failure");
                assert_eq!(sm.tcp_count(), 0);
                assert!(sm.tcp_ports.is_empty(), "{:?}", sm.tcp_ports);
                assert!(!sm.tcp_wanted());
            }
        }
    }

    /// A close or shutdown naming a slot whose connect is still pending on its owner's
    /// ring (a slot the application guessed) finds no session; the connect still opens.
    #[test]
    fn a_close_on_a_pending_slot_finds_no_session() {
        let (mut sm, peer, mut ports) = connect_on_worker(1, false);
        let app = sm.apps[0].as_ref().unwrap();
        let slot = app.slots.iter().position(|s| s == Some(PENDING)).unwrap() as u32;
        for m in [Msg::Close { req: 2, slot }, Msg::Shutdown { req: 3, slot }] {
            seqpacket::send(&peer, &msg::encode(&m), None).unwrap();
        }
        sm.serve_app(0, &locals(), &mut ports);
        sm.send_replies(&mut ports);
        let none = -SessionError::NoSession.errno();
        let r = replies(&peer);
        assert!(
            matches!(
                r[..],
                [
                    Msg::CloseReply { req: 2, retval: a },
                    Msg::CloseReply { req: 3, retval: b },
                ] if a == none && b == none
            ),
            "{r:?}"
        );
        let mut ring = std::mem::take(&mut *sm.workers[1].ctl_in.lock().unwrap());
        sm.apply_ctl(1, &mut ring);
        sm.send_replies(&mut ports);
        let r = replies(&peer);
        assert!(
            matches!(r[..], [Msg::SessionReply { req: 1, retval: 0, slot: s, .. }] if s == slot),
            "{r:?}"
        );
        assert_eq!(sm.tcp_count(), 1);
    }

    #[test]
    fn lookup_prefers_connected_then_exact_then_wildcard() {
        let (mut sm, _peer) = with_app();
        let mut ports = Vec::new();
        let l = locals();
        let wild = sm.bind(0, sa("0.0.0.0:53"), &l, &mut ports).unwrap();
        assert!(matches!(
            sm.bind(0, sa("10.0.0.1:53"), &l, &mut ports),
            Err(SessionError::InUse)
        ));
        let v6 = sm.bind(0, sa("[::]:53"), &l, &mut ports).unwrap();
        let c = sm
            .connect(0, sa("10.0.1.9:53"), 53, &l, &mut ports)
            .unwrap();
        assert_eq!(ports, vec![(false, 53, true), (true, 53, true)]);
        assert_eq!(sm.sess(c).unwrap().local, sa("10.0.1.1:53"));
        assert_eq!(sm.lookup(sa("10.0.1.1:53"), sa("10.0.1.9:53")), Some(c));
        assert_eq!(sm.lookup(sa("10.0.1.1:53"), sa("10.0.1.9:54")), Some(wild));
        assert_eq!(
            sm.lookup(sa("[2001:db8::1]:53"), sa("[2001:db8::2]:5")),
            Some(v6)
        );
        assert_eq!(sm.lookup(sa("10.0.0.1:54"), sa("10.0.0.2:5")), None);
        assert!(matches!(
            sm.bind(0, sa("192.0.2.1:1"), &l, &mut ports),
            Err(SessionError::NotLocal)
        ));
        // Slots run out at sessions-per-app (4).
        sm.bind(0, sa("10.0.0.1:99"), &l, &mut ports).unwrap();
        assert!(matches!(
            sm.bind(0, sa("10.0.0.1:100"), &l, &mut ports),
            Err(SessionError::NoSpace)
        ));
        // Closing the last user of a port unregisters it; detaching closes everything.
        ports.clear();
        sm.close(wild, &mut ports);
        assert!(ports.is_empty(), "the connected session still uses port 53");
        sm.detach(0, &mut ports);
        ports.sort();
        assert_eq!(
            ports,
            vec![(false, 53, false), (false, 99, false), (true, 53, false)]
        );
        assert_eq!(sm.iter().count(), 0);
        assert_eq!(
            sm.irq_del.len(),
            2,
            "its eventfd and control socket are handed to session-queue to unregister"
        );
    }

    #[test]
    fn a_refused_event_stays_pending_for_its_retry() {
        let (mut sm, _peer) = with_app();
        let a = sm.apps[0].as_ref().unwrap();
        let q = a.app_evq(0).unwrap();
        while q.push(0) {} // the application is behind: its queue is full
        let (rx, tx) = a.fifos(1).unwrap();
        tx.want_space();
        assert!(!a.notify_tx_space(1), "refused");
        // The slot's event is pending (filed for a retry): a data event for the slot
        // waits behind it instead of being queued ahead of it.
        assert_eq!(q.pop(), Some(0));
        assert!(a.notify(&rx, 1));
        assert_eq!(q.pop(), Some(0), "no second event for the slot");
        // Filed once, however often it is refused.
        sm.refused(0, 1, 1);
        sm.refused(0, 1, 1);
        assert_eq!(sm.workers[0].evq_retry.len(), 1);
        assert_eq!(sm.evq_refused, 2, "each refusal counted");
        let pop_all = |sm: &SessionMain| {
            let q = sm.apps[0].as_ref().unwrap().app_evq(0).unwrap();
            std::iter::from_fn(|| q.pop()).collect::<Vec<_>>()
        };
        pop_all(&sm);
        sm.retry_events(0);
        assert_eq!(pop_all(&sm), [1]);
        assert!(sm.workers[0].evq_retry.is_empty());
    }

    #[test]
    fn a_released_slot_drops_its_refused_events() {
        let (mut sm, _peer) = with_app();
        let (mut ports, l) = (Vec::new(), locals());
        let a = sm.bind(0, sa("10.0.0.1:53"), &l, &mut ports).unwrap();
        let slot = sm.sess(a).unwrap().slot;
        let app = sm.apps[0].as_ref().unwrap();
        let q = app.app_evq(0).unwrap();
        while q.push(u32::MAX) {} // the application is behind: its queue is full
        let (rx, _) = app.fifos(slot).unwrap();
        assert!(!app.notify(&rx, slot), "refused");
        sm.refused(0, slot, slot);
        assert_eq!(sm.workers[0].evq_retry.len(), 1);
        // The session closes; a new one gets the same slot before the retry.
        sm.close(a, &mut ports);
        let b = sm.bind(0, sa("10.0.0.1:54"), &l, &mut ports).unwrap();
        assert_eq!(sm.sess(b).unwrap().slot, slot);
        let pop_all = |sm: &SessionMain| {
            let q = sm.apps[0].as_ref().unwrap().app_evq(0).unwrap();
            std::iter::from_fn(|| q.pop()).collect::<Vec<_>>()
        };
        pop_all(&sm); // the application caught up
        sm.retry_events(0);
        assert_eq!(
            pop_all(&sm),
            [],
            "the last owner's event for the new session"
        );
        assert!(sm.workers[0].evq_retry.is_empty());
    }

    #[test]
    fn a_reused_slot_starts_clean() {
        let (mut sm, _peer) = with_app();
        let (mut ports, l) = (Vec::new(), locals());
        let a = sm.bind(0, sa("10.0.0.1:53"), &l, &mut ports).unwrap();
        let slot = sm.sess(a).unwrap().slot;
        // The last owner used the FIFOs as streams (odd positions) and left a tx-space
        // request behind.
        let (rx, tx) = sm.apps[0].as_ref().unwrap().fifos(slot).unwrap();
        assert_eq!(rx.push_bytes(b"abc"), 3);
        assert_eq!(tx.push_bytes(b"abcde"), 5);
        tx.want_space();
        sm.close(a, &mut ports);
        let b = sm.bind(0, sa("10.0.0.1:54"), &l, &mut ports).unwrap();
        assert_eq!(sm.sess(b).unwrap().slot, slot);
        let app = sm.apps[0].as_ref().unwrap();
        let (rx, tx) = app.fifos(slot).unwrap();
        app.notify_tx_space(slot);
        assert_eq!(
            app.app_evq(0).unwrap().pop(),
            None,
            "no tx-space event for the last owner's request"
        );
        // Datagrams go both ways.
        let mut buf = [0u8; 16];
        assert!(rx.push(sa("10.0.0.2:5"), b"in") && tx.push(sa("10.0.0.2:5"), b"out"));
        assert_eq!(rx.pop(&mut buf).map(|h| h.len), Ok(2));
        assert_eq!(tx.pop(&mut buf).map(|h| h.len), Ok(3));
    }

    #[test]
    fn a_refused_tx_space_event_is_retried_with_no_more_space_freed() {
        let (mut sm, _peer) = with_app();
        let q_full = |sm: &SessionMain| {
            let q = sm.apps[0].as_ref().unwrap().app_evq(0).unwrap();
            while q.push(0) {}
        };
        q_full(&sm); // the application is behind
        let (_, tx) = sm.apps[0].as_ref().unwrap().fifos(1).unwrap();
        tx.want_space();
        // The last space was freed (the FIFO is empty): no later freeing will try again.
        sm.notify_tx_space(0, 1);
        sm.retry_events(0); // still full
        let a = sm.apps[0].as_ref().unwrap();
        let q = a.app_evq(0).unwrap();
        let mut got = vec![];
        while let Some(e) = q.pop() {
            got.push(e);
        }
        assert!(!got.contains(&1), "queued while the queue was full?");
        // The application caught up: session-queue's next poll delivers the event, once.
        sm.retry_events(0);
        sm.retry_events(0);
        let a = sm.apps[0].as_ref().unwrap();
        let q = a.app_evq(0).unwrap();
        assert_eq!((q.pop(), q.pop()), (Some(1), None));
        assert!(sm.workers[0].evq_retry.is_empty());
        // The application read the slot: its event mark is clear, so the next event is
        // pushed (not merged into a pending one).
        a.fifos(1).unwrap().0.clear_event();
        // A dead application's refused event is not retried: nobody reads its queue.
        q_full(&sm);
        sm.apps[0]
            .as_ref()
            .unwrap()
            .fifos(1)
            .unwrap()
            .1
            .want_space();
        sm.apps[0].as_mut().unwrap().dead = true;
        sm.notify_tx_space(0, 1);
        let a = sm.apps[0].as_ref().unwrap();
        let (rx, tx) = a.fifos(1).unwrap();
        assert!(!tx.take_space_request(), "the request was served");
        assert!(!rx.set_event(), "an event was pushed for the slot");
        let q = a.app_evq(0).unwrap();
        assert!(
            !std::iter::from_fn(|| q.pop()).any(|e| e == 1),
            "the push was refused (the queue was full)"
        );
        assert!(
            sm.workers[0].evq_retry.is_empty(),
            "a retry for a dead application"
        );
    }

    /// Drains what Sluice sent the application; returns the messages.
    pub(crate) fn replies(peer: &OwnedFd) -> Vec<Msg> {
        let mut v = vec![];
        while let Ok(Recv::Msg { buf, .. }) = seqpacket::recv(peer) {
            v.extend(msg::decode(&buf));
        }
        v
    }

    #[test]
    fn a_close_without_reply_is_served_and_its_slot_reused_empty() {
        let (mut sm, peer) = with_app();
        let (mut ports, l) = (Vec::new(), locals());
        replies(&peer); // the attach's
        let a = sm.bind(0, sa("10.0.0.1:53"), &l, &mut ports).unwrap();
        let slot = sm.sess(a).unwrap().slot;
        let close = |req| msg::encode(&Msg::Close { req, slot });
        seqpacket::send(&peer, &close(msg::NO_REPLY), None).unwrap();
        // A datagram came in after the application emptied its rx FIFO.
        let (rx, _) = sm.apps[0].as_ref().unwrap().fifos(slot).unwrap();
        assert!(rx.push(sa("10.0.0.2:5"), b"late"));
        sm.serve_app(0, &l, &mut ports);
        sm.send_replies(&mut ports);
        assert!(sm.sess(a).is_none(), "closed");
        assert!(
            replies(&peer).is_empty(),
            "no reply to a close nobody waits for"
        );
        // The slot goes to the next session empty.
        let b = sm.bind(0, sa("10.0.0.1:54"), &l, &mut ports).unwrap();
        assert_eq!(sm.sess(b).unwrap().slot, slot);
        let (rx, _) = sm.apps[0].as_ref().unwrap().fifos(slot).unwrap();
        assert!(rx.is_empty(), "the last session's datagram is gone");
        // A close with a request id is answered.
        seqpacket::send(&peer, &msg::encode(&Msg::Close { req: 7, slot }), None).unwrap();
        sm.serve_app(0, &l, &mut ports);
        sm.send_replies(&mut ports);
        assert!(matches!(
            replies(&peer)[..],
            [Msg::CloseReply { req: 7, retval: 0 }]
        ));
    }

    #[test]
    fn ephemeral_ports_skip_ports_in_use() {
        let (mut sm, _peer) = with_app();
        let mut ports = Vec::new();
        let l = locals();
        let a = sm.bind(0, sa("0.0.0.0:0"), &l, &mut ports).unwrap();
        let b = sm.bind(0, sa("0.0.0.0:0"), &l, &mut ports).unwrap();
        let pa = sm.sess(a).unwrap().local.port();
        let pb = sm.sess(b).unwrap().local.port();
        assert!(EPH.contains(&pa) && EPH.contains(&pb) && pa != pb);
        // The next one in turn is served by another node (a tunnel's port): skipped,
        // for its family only.
        let next = EPH.start() + sm.next_eph;
        sm.foreign_udp = vec![(false, next)];
        let c = sm.bind(0, sa("0.0.0.0:0"), &l, &mut ports).unwrap();
        let pc = sm.sess(c).unwrap().local.port();
        assert!(EPH.contains(&pc) && pc != next && ![pa, pb].contains(&pc));
        sm.next_eph = next - EPH.start();
        let d = sm.bind(0, sa("[::]:0"), &l, &mut ports).unwrap();
        assert_eq!(sm.sess(d).unwrap().local.port(), next, "IPv6 is free");
    }

    /// Two peers whose IPv6 addresses differ in bit 63 of the first 64-bit word and bit
    /// 22 of the next collide in the multiply-xorshift for every seed: the tables a peer
    /// fills must tell them apart.
    #[test]
    fn peer_keyed_tables_separate_seed_independent_xorshift_collisions() {
        use std::hash::BuildHasher;
        let local = sa("[2001:db8::1]:80");
        let a: Ipv6Addr = "2001:db8:0:1::2".parse().unwrap();
        let mut o = a.octets();
        o[7] ^= 0x80; // bit 63 of the first little-endian word
        o[10] ^= 0x40; // bit 22 of the second
        let b = Ipv6Addr::from(o);
        let ka = (local, SocketAddr::new(a.into(), 40000));
        let kb = (local, SocketAddr::new(b.into(), 40000));
        for _ in 0..4 {
            let sm = SessionMain::default();
            for (name, h) in [
                ("tcp_conns", sm.workers[0].tcp_conns.hasher()),
                ("connected", sm.workers[0].connected.hasher()),
            ] {
                assert_ne!(
                    h.hash_one(ka),
                    h.hash_one(kb),
                    "{name}: {a} and {b} collide"
                );
            }
        }
    }
}
