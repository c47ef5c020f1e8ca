//! A small HTTP/1.x server for `GET /metrics`, on a thread of its own (`sluice_metrics`):
//! non-blocking sockets driven by `poll(2)`, so a slow or silent client delays nobody.
//!
//! Bounds: at most [`Limits::max_clients`] connections at once (more are answered `503` and
//! closed), a request head of at most [`Limits::max_request`] bytes (`431` beyond), and
//! [`Limits::timeout`] per connection from accept to the last byte written (closed without
//! reply if the request is not complete by then). One request per connection
//! (`Connection: close`).
//!
//! Answers: `GET`/`HEAD /metrics` (any query string) → `200` with the exposition;
//! `GET /` → a short HTML page linking it; another path → `404`; another method → `405`;
//! a malformed request line, a version other than HTTP/1.x, or bytes that are not ASCII in
//! the head → `400`. When the exposition cannot be built (segment busy) → `503`.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Server limits.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Connections served at once.
    pub max_clients: usize,
    /// Largest request head (request line + headers), bytes.
    pub max_request: usize,
    /// Time a connection may take from accept to its last byte.
    pub timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_clients: 16,
            max_request: 8192,
            timeout: Duration::from_secs(10),
        }
    }
}

/// Requests answered, by outcome (`show statistics segment`).
#[derive(Debug, Default)]
pub struct ServerCounters {
    /// `200` for `/metrics`.
    pub scrapes: AtomicU64,
    /// Answered with a 4xx.
    pub client_errors: AtomicU64,
    /// Refused with `503` (too many clients, or segment busy).
    pub refused: AtomicU64,
    /// Closed by the timeout.
    pub timeouts: AtomicU64,
}

/// The body of `/metrics`, built on the server's thread.
pub type Render = Box<dyn FnMut() -> Result<String, String> + Send>;

/// A running server; dropping it stops the thread.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    /// Counters.
    pub counters: Arc<ServerCounters>,
}

impl MetricsServer {
    /// Binds `addr` and serves it from a new thread.
    pub fn start(addr: SocketAddr, limits: Limits, render: Render) -> io::Result<MetricsServer> {
        let l = TcpListener::bind(addr)?;
        l.set_nonblocking(true)?;
        let addr = l.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(ServerCounters::default());
        let (s, c) = (stop.clone(), counters.clone());
        let handle = std::thread::Builder::new()
            .name("sluice_metrics".into())
            .spawn(move || serve(l, limits, render, &s, &c))?;
        Ok(MetricsServer {
            addr,
            stop,
            handle: Some(handle),
            counters,
        })
    }

    /// The address it listens on (the port chosen when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

enum State {
    Reading(Vec<u8>),
    Writing(Vec<u8>, usize),
    /// Response sent and write side shut: read and discard until EOF so the close does not
    /// reset the connection before the client read the response.
    Draining,
}

struct Conn {
    s: TcpStream,
    state: State,
    deadline: Instant,
}

fn serve(l: TcpListener, lim: Limits, mut render: Render, stop: &AtomicBool, c: &ServerCounters) {
    let mut conns: Vec<Conn> = Vec::new();
    let mut fds: Vec<libc::pollfd> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        fds.clear();
        fds.push(libc::pollfd {
            fd: l.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        for k in &conns {
            let events = match k.state {
                State::Writing(..) => libc::POLLOUT,
                _ => libc::POLLIN,
            };
            fds.push(libc::pollfd {
                fd: k.s.as_raw_fd(),
                events,
                revents: 0,
            });
        }
        // SAFETY: `fds` is a live array of `fds.len()` pollfd structs.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 100) };
        if n < 0 {
            continue;
        }
        let now = Instant::now();
        // Connections first (connection k polled in `fds[k + 1]`), then new ones.
        let mut finished = Vec::with_capacity(conns.len());
        for (k, conn) in conns.iter_mut().enumerate() {
            let ready = fds.get(k + 1).is_some_and(|f| f.revents != 0);
            let done = ready && step(conn, &lim, &mut render, c);
            let expired = now >= conn.deadline;
            if expired && !done && matches!(conn.state, State::Reading(_)) {
                c.timeouts.fetch_add(1, Ordering::Relaxed);
            }
            finished.push(done || expired);
        }
        let mut k = 0;
        conns.retain(|_| {
            k += 1;
            !finished[k - 1]
        });
        if fds[0].revents != 0 {
            loop {
                match l.accept() {
                    Ok((s, _)) => {
                        if s.set_nonblocking(true).is_err() {
                            continue;
                        }
                        if conns.len() >= lim.max_clients {
                            c.refused.fetch_add(1, Ordering::Relaxed);
                            let _ = (&s).write(&response(
                                503,
                                "text/plain",
                                b"too many clients\n",
                                true,
                            ));
                            continue;
                        }
                        conns.push(Conn {
                            s,
                            state: State::Reading(Vec::with_capacity(1024)),
                            deadline: now + lim.timeout,
                        });
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    // EMFILE and the like: leave the rest in the backlog for later.
                    Err(_) => break,
                }
            }
        }
    }
}

/// Advances a connection; true when it is finished (to be closed).
fn step(k: &mut Conn, lim: &Limits, render: &mut Render, c: &ServerCounters) -> bool {
    match &mut k.state {
        State::Reading(buf) => {
            let mut tmp = [0u8; 2048];
            loop {
                match k.s.read(&mut tmp) {
                    Ok(0) => return true,
                    Ok(n) => {
                        buf.extend_from_slice(&tmp[..n]);
                        if let Some(end) = head_end(buf) {
                            let resp = answer(&buf[..end], render, c);
                            k.state = State::Writing(resp, 0);
                            return step(k, lim, render, c);
                        }
                        if buf.len() > lim.max_request {
                            c.client_errors.fetch_add(1, Ordering::Relaxed);
                            let r = response(431, "text/plain", b"request too large\n", true);
                            k.state = State::Writing(r, 0);
                            return step(k, lim, render, c);
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(_) => return true,
                }
            }
        }
        State::Writing(buf, pos) => {
            while *pos < buf.len() {
                match k.s.write(&buf[*pos..]) {
                    Ok(0) => return true,
                    Ok(n) => *pos += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(_) => return true,
                }
            }
            let _ = k.s.shutdown(std::net::Shutdown::Write);
            k.state = State::Draining;
            // At most a second more to let the client close first.
            k.deadline = k.deadline.min(Instant::now() + Duration::from_secs(1));
            false
        }
        State::Draining => {
            let mut tmp = [0u8; 2048];
            loop {
                match k.s.read(&mut tmp) {
                    Ok(0) => return true,
                    Ok(_) => continue,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(_) => return true,
                }
            }
        }
    }
}

/// End of the request head (index after the blank line), if complete.
fn head_end(b: &[u8]) -> Option<usize> {
    if let Some(i) = b.windows(4).position(|w| w == b"\r\n\r\n") {
        return Some(i + 4);
    }
    b.windows(2).position(|w| w == b"\n\n").map(|i| i + 2)
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

fn response(code: u16, ctype: &str, body: &[u8], with_body: bool) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 {code} {}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n",
        reason(code),
        body.len()
    );
    if code == 405 {
        r.push_str("Allow: GET, HEAD\r\n");
    }
    r.push_str("\r\n");
    let mut v = r.into_bytes();
    if with_body {
        v.extend_from_slice(body);
    }
    v
}

const INDEX: &[u8] = b"<html><head><title>Sluice metrics</title></head><body><a href=\"/metrics\">metrics</a></body></html>\n";

/// The response to a complete request head.
fn answer(head: &[u8], render: &mut Render, c: &ServerCounters) -> Vec<u8> {
    let bad = |c: &ServerCounters, code: u16, why: &str| {
        c.client_errors.fetch_add(1, Ordering::Relaxed);
        response(code, "text/plain", format!("{why}\n").as_bytes(), true)
    };
    if !head.is_ascii() {
        return bad(c, 400, "request is not ASCII");
    }
    let text = String::from_utf8_lossy(head);
    let line = text.lines().next().unwrap_or("");
    let parts: Vec<&str> = line.split(' ').collect();
    let [method, target, version] = parts[..] else {
        return bad(c, 400, "malformed request line");
    };
    if !version.starts_with("HTTP/1.") || version.len() != 8 {
        return bad(c, 400, "only HTTP/1.x is served");
    }
    if target.is_empty() || !target.starts_with('/') || target.bytes().any(|b| b.is_ascii_control())
    {
        return bad(c, 400, "malformed request target");
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => {
            c.client_errors.fetch_add(1, Ordering::Relaxed);
            return response(405, "text/plain", b"only GET and HEAD\n", true);
        }
    };
    let path = target.split('?').next().unwrap_or("");
    match path {
        "/metrics" => match render() {
            Ok(body) => {
                c.scrapes.fetch_add(1, Ordering::Relaxed);
                response(
                    200,
                    crate::prometheus::CONTENT_TYPE,
                    body.as_bytes(),
                    !head_only,
                )
            }
            Err(e) => {
                c.refused.fetch_add(1, Ordering::Relaxed);
                response(503, "text/plain", format!("{e}\n").as_bytes(), !head_only)
            }
        },
        "/" => response(200, "text/html", INDEX, !head_only),
        _ => {
            c.client_errors.fetch_add(1, Ordering::Relaxed);
            response(404, "text/plain", b"not found; try /metrics\n", !head_only)
        }
    }
}
