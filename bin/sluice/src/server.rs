//! The CLI socket server, run from the main thread's loop: non-blocking accept and reads,
//! length-prefixed frames (`sluice_cli::proto`), one command per request, executed on the
//! main thread with full access to the runtime.

use sluice_cli::proto;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

struct Client {
    s: UnixStream,
    buf: Vec<u8>,
}

/// Listener plus connected clients.
pub struct CliServer {
    listener: UnixListener,
    path: PathBuf,
    clients: Vec<Client>,
    reap_pending: Vec<usize>,
}

/// A complete request read from a client.
pub struct Request {
    /// Client slot.
    pub client: usize,
    /// Command text.
    pub cmd: String,
}

impl CliServer {
    /// Binds the socket (creating its directory, replacing a stale socket file).
    pub fn bind(path: &Path) -> std::io::Result<CliServer> {
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir)?;
            }
        }
        if path.exists() {
            // A live daemon answers; a stale socket refuses.
            if UnixStream::connect(path).is_ok() {
                return Err(std::io::Error::new(
                    ErrorKind::AddrInUse,
                    format!("{} is in use by a running sluice", path.display()),
                ));
            }
            let _ = std::fs::remove_file(path);
        }
        let listener = UnixListener::bind(path)?;
        listener.set_nonblocking(true)?;
        Ok(CliServer {
            listener,
            path: path.to_path_buf(),
            clients: Vec::new(),
            reap_pending: Vec::new(),
        })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits up to `timeout_ms` (0: just check) for activity on the CLI sockets or on `wake`
    /// (the main thread's epoll fd: packets for interrupt-mode queues, wake-ups from other
    /// threads), accepts clients and returns the complete requests received.
    pub fn poll(&mut self, timeout_ms: i32, wake: RawFd) -> Vec<Request> {
        let mut fds = Vec::with_capacity(2 + self.clients.len());
        fds.push(libc::pollfd {
            fd: wake,
            events: libc::POLLIN,
            revents: 0,
        });
        fds.push(libc::pollfd {
            fd: self.listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        for c in &self.clients {
            fds.push(libc::pollfd {
                fd: c.s.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        // SAFETY: fds is a valid array of pollfd for its length.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        let mut out = Vec::new();
        if r <= 0 {
            return out;
        }
        if fds[1].revents != 0 {
            while let Ok((s, _)) = self.listener.accept() {
                if s.set_nonblocking(true).is_ok() {
                    self.clients.push(Client { s, buf: Vec::new() });
                }
            }
        }
        let mut dead = Vec::new();
        for (i, c) in self.clients.iter_mut().enumerate() {
            let mut tmp = [0u8; 4096];
            loop {
                match c.s.read(&mut tmp) {
                    Ok(0) => {
                        dead.push(i);
                        break;
                    }
                    Ok(n) => {
                        c.buf.extend_from_slice(&tmp[..n]);
                        if c.buf.len() > proto::MAX_FRAME + 4 {
                            dead.push(i);
                            break;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(_) => {
                        dead.push(i);
                        break;
                    }
                }
            }
            // Extract complete frames.
            loop {
                if c.buf.len() < 4 {
                    break;
                }
                let n = u32::from_le_bytes([c.buf[0], c.buf[1], c.buf[2], c.buf[3]]) as usize;
                if n > proto::MAX_FRAME {
                    let _ = respond(&mut c.s, false, "frame too large");
                    dead.push(i);
                    break;
                }
                if c.buf.len() < 4 + n {
                    break;
                }
                let cmd = String::from_utf8_lossy(&c.buf[4..4 + n]).into_owned();
                c.buf.drain(..4 + n);
                out.push(Request { client: i, cmd });
            }
        }
        // Requests of dead clients are still answered (the write fails harmlessly); remove
        // dead clients after the caller answered, by marking them.
        for &i in dead.iter().rev() {
            if let Some(c) = self.clients.get_mut(i) {
                let _ = c.s.shutdown(std::net::Shutdown::Both);
            }
        }
        self.reap_pending = dead;
        out
    }

    /// Sends a response to a client.
    pub fn reply(&mut self, client: usize, ok: bool, text: &str) {
        if let Some(c) = self.clients.get_mut(client) {
            // Blocking write for the reply (the client waits for it).
            let _ = c.s.set_nonblocking(false);
            let _ =
                c.s.set_write_timeout(Some(std::time::Duration::from_secs(5)));
            if respond(&mut c.s, ok, text).is_err() {
                let _ = c.s.shutdown(std::net::Shutdown::Both);
            }
            let _ = c.s.set_nonblocking(true);
        }
    }

    /// Closes a client's session (`quit`).
    pub fn close(&mut self, client: usize) {
        if let Some(c) = self.clients.get_mut(client) {
            let _ = c.s.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Removes clients found dead by the last poll (call after replying).
    pub fn reap(&mut self) {
        let mut dead = std::mem::take(&mut self.reap_pending);
        dead.sort_unstable();
        dead.dedup();
        for i in dead.into_iter().rev() {
            if i < self.clients.len() {
                self.clients.remove(i);
            }
        }
    }
}

fn respond(s: &mut UnixStream, ok: bool, text: &str) -> std::io::Result<()> {
    let mut v = Vec::with_capacity(text.len() + 8);
    proto::write_response(&mut v, ok, text)?;
    s.write_all(&v)
}

impl Drop for CliServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
