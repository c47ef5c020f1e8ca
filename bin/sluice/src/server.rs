//! The CLI server, run from the main thread's loop. It never blocks that thread: every socket
//! is non-blocking, replies go to a per-client output queue written as the client reads, and
//! everything a client can make the daemon hold is capped ([`Limits`], `unix { cli-... }`
//! keys, docs/security.md):
//!
//! - at most `max_clients` sessions; one more is told why and closed;
//! - a request frame larger than `max_request` bytes is answered with an error and the
//!   session closed, before its body is buffered;
//! - one request per session at a time: the next is not read before the reply has been
//!   written out, so a client that sends without reading holds one reply at most;
//! - replies buffered for all clients together stay under `max_output`; a reply that would
//!   exceed it is replaced by a short error;
//! - a reply larger than the frame limit ([`proto::MAX_FRAME`]) is refused with an error that
//!   says so (no silent close) — except a streamed one: a command that can be long (`show ip
//!   fib`) leaves a producer ([`sluice_graph::reply`]) and its reply goes out in pieces
//!   (frames with status `more`, [`proto::write_chunk`]), the next piece made only once the
//!   client has read the queued output below [`STREAM_LOW`] bytes;
//! - a client that leaves a reply unread for `client_timeout` is dropped with a log line;
//! - `accept` failing for lack of descriptors (EMFILE, ENFILE) pauses accepting for 100 ms
//!   instead of spinning.
//!
//! Two transports: the Unix socket carries `sluice_cli::proto` frames (`sluicectl`); a TCP
//! `cli-listen <host:port>` carries plain lines as VPP's telnet CLI does (`telnet localhost
//! 5002`): one command per line (a `{` block continues until balanced), the output, then the
//! prompt; telnet option negotiation bytes are skipped.

use sluice_cli::proto;
use sluice_infra::unix_socket::{OwnedListener, SocketPerms};
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// Resource limits of the CLI server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Concurrent sessions (`cli-max-clients`).
    pub max_clients: usize,
    /// Largest request frame in bytes (`cli-max-request-bytes`).
    pub max_request: usize,
    /// Reply bytes buffered for all sessions together (`cli-max-output-bytes`).
    pub max_output: usize,
    /// How long a reply may stay unread before the session is dropped
    /// (`cli-client-timeout`, seconds).
    pub client_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_clients: 64,
            max_request: 1 << 20,
            max_output: 64 << 20,
            client_timeout: Duration::from_secs(30),
        }
    }
}

/// A streamed reply's next piece is made when less than this is queued for its client.
pub const STREAM_LOW: usize = 256 << 10;

/// How long accepting pauses after EMFILE/ENFILE.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// Bytes read from one client per poll (fairness between clients).
const READ_CHUNK: usize = 64 << 10;

enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    fn fd(&self) -> RawFd {
        match self {
            Stream::Unix(s) => s.as_raw_fd(),
            Stream::Tcp(s) => s.as_raw_fd(),
        }
    }
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(b),
            Stream::Tcp(s) => s.read(b),
        }
    }
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(b),
            Stream::Tcp(s) => s.write(b),
        }
    }
}

/// Telnet negotiation parser state (RFC 854): option bytes are skipped, not executed.
#[derive(Default, Clone, Copy, PartialEq, Eq)]
enum Tn {
    #[default]
    Data,
    /// After IAC.
    Iac,
    /// After IAC WILL/WONT/DO/DONT: the option byte.
    Opt,
    /// Inside IAC SB ... IAC SE.
    Sub,
    /// IAC inside a subnegotiation.
    SubIac,
}

/// Line-mode (telnet) input state.
#[derive(Default)]
struct LineState {
    tn: Tn,
    /// Brace depth of the command being gathered.
    depth: i64,
}

struct Client {
    id: u64,
    s: Stream,
    /// Line mode (TCP) or framed (Unix).
    line: Option<LineState>,
    inbuf: Vec<u8>,
    out: Vec<u8>,
    out_pos: usize,
    /// A request was handed out and its reply is not queued yet.
    busy: bool,
    /// When the pending output last made progress.
    out_since: Instant,
    close_after_flush: bool,
    dead: bool,
    /// The rest of a streamed reply.
    producer: Option<sluice_graph::reply::Producer>,
}

impl Client {
    fn pending(&self) -> usize {
        self.out.len() - self.out_pos
    }
}

enum Listener {
    Unix(OwnedListener),
    Tcp(TcpListener),
}

impl Listener {
    fn fd(&self) -> RawFd {
        match self {
            Listener::Unix(l) => l.as_raw_fd(),
            Listener::Tcp(l) => l.as_raw_fd(),
        }
    }
    fn accept(&self) -> std::io::Result<(Stream, bool)> {
        match self {
            Listener::Unix(l) => l.accept().map(|(s, _)| (Stream::Unix(s), false)),
            Listener::Tcp(l) => l.accept().map(|(s, _)| (Stream::Tcp(s), true)),
        }
    }
}

/// Listeners plus connected clients.
pub struct CliServer {
    listeners: Vec<Listener>,
    desc: String,
    clients: Vec<Client>,
    next_id: u64,
    limits: Limits,
    prompt: String,
    accept_paused_until: Option<Instant>,
    /// Refused sessions since the last log line (logged at most once per pause).
    refused: u64,
}

/// A complete request read from a client.
pub struct Request {
    /// Client id (for [`CliServer::reply`]).
    pub client: u64,
    /// Command text.
    pub cmd: String,
}

/// Where the CLI listens.
pub enum Endpoint<'a> {
    /// A Unix socket path.
    Unix(&'a Path, SocketPerms),
    /// A TCP address (`host:port`).
    Tcp(std::net::SocketAddr),
}

impl CliServer {
    /// Binds the endpoints (Unix sockets through `sluice_infra::unix_socket`).
    pub fn bind(eps: &[Endpoint], limits: Limits, prompt: &str) -> Result<CliServer, String> {
        let mut listeners = Vec::new();
        let mut desc = Vec::new();
        for ep in eps {
            match ep {
                Endpoint::Unix(p, perms) => {
                    let l = OwnedListener::bind(p, perms).map_err(|e| e.to_string())?;
                    l.set_nonblocking(true)
                        .map_err(|e| format!("{}: {e}", p.display()))?;
                    desc.push(p.display().to_string());
                    listeners.push(Listener::Unix(l));
                }
                Endpoint::Tcp(a) => {
                    let l = TcpListener::bind(a).map_err(|e| format!("cli-listen {a}: {e}"))?;
                    l.set_nonblocking(true)
                        .map_err(|e| format!("cli-listen {a}: {e}"))?;
                    desc.push(format!(
                        "tcp {}",
                        l.local_addr().map_err(|e| e.to_string())?
                    ));
                    listeners.push(Listener::Tcp(l));
                }
            }
        }
        Ok(CliServer {
            listeners,
            desc: desc.join(", "),
            clients: Vec::new(),
            next_id: 1,
            limits,
            prompt: prompt.to_string(),
            accept_paused_until: None,
            refused: 0,
        })
    }

    /// Where it listens, for the log.
    pub fn describe(&self) -> &str {
        &self.desc
    }

    fn out_total(&self) -> usize {
        self.clients.iter().map(Client::pending).sum()
    }

    /// Waits up to `timeout_ms` (0: just check) for activity on the CLI sockets or on `wake`
    /// (the main thread's epoll fd: packets for interrupt-mode queues, wake-ups from other
    /// threads), accepts clients, writes pending output and returns the complete requests
    /// received (at most one per client). `extra` are more descriptors to wait on (the API
    /// server's); their `revents` are written back, so their owner acts only on a ready
    /// descriptor (zeroed when the wait was interrupted).
    pub fn poll(
        &mut self,
        mut timeout_ms: i32,
        wake: RawFd,
        extra: &mut [libc::pollfd],
    ) -> Vec<Request> {
        let now = Instant::now();
        let accepting = match self.accept_paused_until {
            Some(t) if t > now => {
                let left = (t - now).as_millis().min(i32::MAX as u128) as i32;
                timeout_ms = if timeout_ms < 0 {
                    left.max(1)
                } else {
                    timeout_ms.min(left.max(1))
                };
                false
            }
            _ => {
                self.accept_paused_until = None;
                true
            }
        };
        // A client with a queued reply must be checked for the timeout even if it never
        // becomes writable.
        if self.clients.iter().any(|c| c.pending() > 0) {
            let ms = self.limits.client_timeout.as_millis().clamp(1, 1000) as i32;
            timeout_ms = if timeout_ms < 0 {
                ms
            } else {
                timeout_ms.min(ms)
            };
        }
        let mut fds =
            Vec::with_capacity(1 + self.listeners.len() + self.clients.len() + extra.len());
        fds.push(pollfd(wake, libc::POLLIN));
        let nl = if accepting { self.listeners.len() } else { 0 };
        for l in self.listeners.iter().take(nl) {
            fds.push(pollfd(l.fd(), libc::POLLIN));
        }
        for c in &self.clients {
            let mut ev = 0;
            if c.pending() > 0 {
                ev |= libc::POLLOUT;
            } else if !c.busy && !c.close_after_flush {
                ev |= libc::POLLIN;
            }
            fds.push(pollfd(c.s.fd(), ev));
        }
        let extra_at = fds.len();
        fds.extend_from_slice(extra);
        // SAFETY: fds is a valid array of pollfd for its length.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        for (e, f) in extra.iter_mut().zip(&fds[extra_at..]) {
            e.revents = if r > 0 { f.revents } else { 0 };
        }
        let mut out = Vec::new();
        if r > 0 {
            let ready: Vec<usize> = (0..nl).filter(|&i| fds[1 + i].revents != 0).collect();
            for i in ready {
                self.accept_from(i);
            }
            let base = 1 + nl;
            let n = fds.len() - base;
            for (k, pfd) in fds.iter().enumerate().skip(base).take(n) {
                let idx = k - base;
                let re = pfd.revents;
                if re == 0 || idx >= self.clients.len() {
                    continue;
                }
                let c = &mut self.clients[idx];
                if re & libc::POLLOUT != 0 {
                    flush(c);
                }
                if re & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 && c.pending() == 0 {
                    read_some(c, &self.limits);
                }
            }
        }
        // Requests: at most one per idle client.
        let limits = self.limits;
        for c in &mut self.clients {
            if c.dead || c.busy || c.close_after_flush || c.pending() > 0 {
                continue;
            }
            if let Some(cmd) = next_request(c, &limits, &self.prompt) {
                c.busy = true;
                out.push(Request { client: c.id, cmd });
            }
        }
        // Slow clients.
        let now = Instant::now();
        for c in &mut self.clients {
            if c.pending() > 0 && now.duration_since(c.out_since) > limits.client_timeout {
                log::warn!(
                    "CLI client {} dropped: {} bytes of reply unread for {} s (cli-client-timeout)",
                    c.id,
                    c.pending(),
                    limits.client_timeout.as_secs()
                );
                c.dead = true;
            }
        }
        self.clients.retain(|c| !c.dead);
        out
    }

    fn accept_from(&mut self, li: usize) {
        loop {
            match self.listeners[li].accept() {
                Ok((s, line)) => {
                    if self.clients.len() >= self.limits.max_clients {
                        self.refused += 1;
                        refuse(
                            s,
                            line,
                            &format!(
                                "too many CLI sessions (limit {}, cli-max-clients)",
                                self.limits.max_clients
                            ),
                        );
                        if self.refused == 1 || self.refused.is_power_of_two() {
                            log::warn!(
                                "CLI session refused: {} sessions open (cli-max-clients); {} refused so far",
                                self.clients.len(),
                                self.refused
                            );
                        }
                        continue;
                    }
                    let nb = match &s {
                        Stream::Unix(u) => u.set_nonblocking(true),
                        Stream::Tcp(t) => t.set_nonblocking(true),
                    };
                    if nb.is_err() {
                        continue;
                    }
                    let id = self.next_id;
                    self.next_id += 1;
                    let mut c = Client {
                        id,
                        s,
                        line: line.then(LineState::default),
                        inbuf: Vec::new(),
                        out: Vec::new(),
                        out_pos: 0,
                        busy: false,
                        out_since: Instant::now(),
                        close_after_flush: false,
                        dead: false,
                        producer: None,
                    };
                    if line {
                        c.out.extend_from_slice(self.prompt.as_bytes());
                        flush(&mut c);
                    }
                    self.clients.push(c);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    let errno = e.raw_os_error().unwrap_or(0);
                    if matches!(
                        errno,
                        libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM
                    ) {
                        log::warn!(
                            "CLI accept: {e}; not accepting for {} ms",
                            ACCEPT_BACKOFF.as_millis()
                        );
                        self.accept_paused_until = Some(Instant::now() + ACCEPT_BACKOFF);
                    }
                    // Other errors (ECONNABORTED, ...) concern one connection only.
                    break;
                }
            }
        }
    }

    /// Queues a response for a client and starts writing it. A reply over the frame limit,
    /// or one that would take the buffered output over `max_output`, is replaced by an error
    /// saying so.
    pub fn reply(&mut self, client: u64, ok: bool, text: &str) {
        let total = self.out_total();
        let limits = self.limits;
        let prompt = self.prompt.clone();
        let Some(c) = self.clients.iter_mut().find(|c| c.id == client) else {
            return;
        };
        c.busy = false;
        let mut frame = Vec::new();
        let too_big = text.len() + 1 > proto::MAX_FRAME;
        let (ok, text) = if too_big {
            log::warn!(
                "CLI client {}: reply of {} bytes refused (frame limit {} bytes)",
                c.id,
                text.len(),
                proto::MAX_FRAME
            );
            (
                false,
                format!(
                    "reply too large ({} bytes, limit {} bytes): narrow the command (a prefix, a table, `summary')",
                    text.len(),
                    proto::MAX_FRAME - 1
                ),
            )
        } else if total + text.len() + 5 > limits.max_output {
            log::warn!(
                "CLI client {}: reply of {} bytes refused: {} bytes already queued for other sessions (cli-max-output-bytes {})",
                c.id,
                text.len(),
                total,
                limits.max_output
            );
            (
                false,
                format!(
                    "CLI output buffers full ({total} bytes queued, limit {}, cli-max-output-bytes); try again",
                    limits.max_output
                ),
            )
        } else {
            (ok, text.to_string())
        };
        if c.line.is_some() {
            frame.extend_from_slice(text.as_bytes());
            if !text.is_empty() && !text.ends_with('\n') {
                frame.push(b'\n');
            }
            if !c.close_after_flush {
                frame.extend_from_slice(prompt.as_bytes());
            }
        } else if proto::write_response(&mut frame, ok, &text).is_err() {
            c.dead = true;
            return;
        }
        if c.out_pos == c.out.len() {
            c.out.clear();
            c.out_pos = 0;
        }
        c.out.extend_from_slice(&frame);
        c.out_since = Instant::now();
        flush(c);
    }

    /// Queues the first piece of a streamed reply; `p` makes the rest ([`CliServer::pump`]).
    pub fn reply_stream(&mut self, client: u64, first: &str, p: sluice_graph::reply::Producer) {
        let Some(c) = self.clients.iter_mut().find(|c| c.id == client) else {
            return;
        };
        c.producer = Some(p);
        queue_piece(c, first);
        flush(c);
    }

    /// Makes the next pieces of streamed replies whose clients have read what was queued;
    /// a finished one gets its closing frame (and the prompt in line mode).
    pub fn pump(&mut self, vm: &mut sluice_graph::Vlib) {
        let prompt = self.prompt.clone();
        for c in self
            .clients
            .iter_mut()
            .filter(|c| c.producer.is_some() && !c.dead)
        {
            while c.pending() < STREAM_LOW {
                let Some(p) = c.producer.as_mut() else { break };
                match p(vm) {
                    Some(piece) => queue_piece(c, &piece),
                    None => {
                        c.producer = None;
                        c.busy = false;
                        let mut frame = Vec::new();
                        if c.line.is_some() {
                            if !c.close_after_flush {
                                frame.extend_from_slice(prompt.as_bytes());
                            }
                        } else {
                            let _ = proto::write_response(&mut frame, true, "");
                        }
                        c.out.extend_from_slice(&frame);
                        break;
                    }
                }
            }
            flush(c);
        }
    }

    /// Closes a client's session once its output is written (`quit`).
    pub fn close(&mut self, client: u64) {
        if let Some(c) = self.clients.iter_mut().find(|c| c.id == client) {
            c.close_after_flush = true;
            if c.pending() == 0 {
                c.dead = true;
            }
        }
        self.clients.retain(|c| !c.dead);
    }
}

fn pollfd(fd: RawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

/// Best-effort one-line refusal to a session that is not kept.
fn refuse(mut s: Stream, line: bool, msg: &str) {
    let _ = match &s {
        Stream::Unix(u) => u.set_nonblocking(true),
        Stream::Tcp(t) => t.set_nonblocking(true),
    };
    let mut v = Vec::new();
    if line {
        v.extend_from_slice(msg.as_bytes());
        v.push(b'\n');
    } else {
        let _ = proto::write_response(&mut v, false, msg);
    }
    let _ = s.write(&v);
}

/// Queues one piece of a streamed reply (a `more` frame; raw text in line mode).
fn queue_piece(c: &mut Client, text: &str) {
    if c.out_pos == c.out.len() {
        c.out.clear();
        c.out_pos = 0;
    }
    if c.line.is_some() {
        c.out.extend_from_slice(text.as_bytes());
    } else if proto::write_chunk(&mut c.out, text).is_err() {
        // A piece is a few thousand entries, far below the frame limit.
        c.dead = true;
    }
    if c.pending() > 0 {
        c.out_since = Instant::now();
    }
}

/// Writes as much pending output as the socket takes.
fn flush(c: &mut Client) {
    while c.pending() > 0 {
        match c.s.write(&c.out[c.out_pos..]) {
            Ok(0) => {
                c.dead = true;
                return;
            }
            Ok(n) => {
                c.out_pos += n;
                c.out_since = Instant::now();
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => {
                c.dead = true;
                return;
            }
        }
    }
    c.out.clear();
    c.out_pos = 0;
    if c.close_after_flush {
        c.dead = true;
    }
}

/// Reads what the socket has, up to one chunk and never past the request limit.
fn read_some(c: &mut Client, limits: &Limits) {
    let cap = limits.max_request + 4;
    let mut tmp = [0u8; 4096];
    let mut got = 0;
    while got < READ_CHUNK && c.inbuf.len() < cap {
        let want = tmp.len().min(cap - c.inbuf.len());
        match c.s.read(&mut tmp[..want]) {
            Ok(0) => {
                c.dead = true;
                return;
            }
            Ok(n) => {
                got += n;
                feed(c, &tmp[..n]);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => {
                c.dead = true;
                return;
            }
        }
    }
}

/// Appends input, skipping telnet negotiation in line mode.
fn feed(c: &mut Client, data: &[u8]) {
    let Some(ls) = c.line.as_mut() else {
        c.inbuf.extend_from_slice(data);
        return;
    };
    const IAC: u8 = 255;
    const SB: u8 = 250;
    const SE: u8 = 240;
    for &b in data {
        ls.tn = match (ls.tn, b) {
            (Tn::Data, IAC) => Tn::Iac,
            (Tn::Data, 0) => Tn::Data,
            (Tn::Data, _) => {
                c.inbuf.push(b);
                Tn::Data
            }
            (Tn::Iac, IAC) => {
                c.inbuf.push(b);
                Tn::Data
            }
            (Tn::Iac, 251..=254) => Tn::Opt,
            (Tn::Iac, SB) => Tn::Sub,
            (Tn::Iac, _) | (Tn::Opt, _) => Tn::Data,
            (Tn::Sub, IAC) => Tn::SubIac,
            (Tn::Sub, _) => Tn::Sub,
            (Tn::SubIac, SE) => Tn::Data,
            (Tn::SubIac, _) => Tn::Sub,
        };
    }
}

/// Extracts the next complete request, or answers a malformed one and marks the session to
/// close.
fn next_request(c: &mut Client, limits: &Limits, prompt: &str) -> Option<String> {
    if c.line.is_some() {
        // Line mode: a `{` block continues until balanced.
        loop {
            let nl = c.inbuf.iter().position(|&b| b == b'\n');
            let Some(nl) = nl else {
                if c.inbuf.len() > limits.max_request {
                    oversize(c, limits, c.inbuf.len());
                }
                return None;
            };
            let scan_from = c.inbuf[..nl]
                .iter()
                .rposition(|&b| b == 0)
                .map_or(0, |p| p + 1);
            let mut depth = c.line.as_ref().map_or(0, |l| l.depth);
            for &b in &c.inbuf[scan_from..nl] {
                match b {
                    b'{' => depth += 1,
                    b'}' => depth -= 1,
                    _ => {}
                }
            }
            if let Some(l) = c.line.as_mut() {
                l.depth = depth.max(0);
            }
            if depth > 0 {
                // The line is counted: its newline becomes a NUL separator (input NULs are
                // dropped by `feed`, so a NUL here is always one of these).
                c.inbuf[nl] = 0;
                continue;
            }
            let raw: Vec<u8> = c.inbuf.drain(..=nl).collect();
            let text = String::from_utf8_lossy(&raw)
                .replace('\0', "\n")
                .replace('\r', "");
            let cmd = text.trim().to_string();
            if cmd.is_empty() {
                c.out.extend_from_slice(prompt.as_bytes());
                flush(c);
                continue;
            }
            if cmd == "quit" || cmd == "exit" {
                c.dead = true;
                return None;
            }
            return Some(cmd);
        }
    }
    if c.inbuf.len() < 4 {
        return None;
    }
    let n = u32::from_le_bytes([c.inbuf[0], c.inbuf[1], c.inbuf[2], c.inbuf[3]]) as usize;
    if n > limits.max_request {
        oversize(c, limits, n);
        return None;
    }
    if c.inbuf.len() < 4 + n {
        return None;
    }
    let cmd = String::from_utf8_lossy(&c.inbuf[4..4 + n]).into_owned();
    c.inbuf.drain(..4 + n);
    Some(cmd)
}

fn oversize(c: &mut Client, limits: &Limits, n: usize) {
    log::warn!(
        "CLI client {}: request of {n} bytes refused (cli-max-request-bytes {}); session closed",
        c.id,
        limits.max_request
    );
    let msg = format!(
        "request too large ({n} bytes, limit {} bytes, cli-max-request-bytes)",
        limits.max_request
    );
    if c.line.is_some() {
        c.out.extend_from_slice(msg.as_bytes());
        c.out.push(b'\n');
    } else {
        let _ = proto::write_response(&mut c.out, false, &msg);
    }
    c.inbuf = Vec::new();
    c.close_after_flush = true;
    flush(c);
}
