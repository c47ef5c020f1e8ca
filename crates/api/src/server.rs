//! The API socket server, run from the main thread's loop like the CLI server: non-blocking
//! accept, reads and writes; every complete frame is dispatched to its handler on the main
//! thread (`&mut Vlib`), replies are queued in the session's output and written as the
//! socket takes them.
//!
//! Limits and bad input: a frame longer than [`MAX_MESSAGE`] (or shorter than its header)
//! gets an `api_error` and the connection is closed; unknown ids, messages before the
//! handshake, schema mismatches and bodies that do not decode get an `api_error` and the
//! session goes on. A session whose output exceeds [`OUT_HIGH`] is not read until it drained
//! (a client that pipelines without reading cannot make the daemon buffer without bound); a
//! client that goes away mid-dump just loses its output. At most [`READ_BUDGET`] bytes are
//! read from one client per pass, so a busy client cannot starve the main loop.

use crate::codec::{Encode, Writer};
use crate::control::{ApiError as ErrMsg, ApiHello, ApiHelloReply, MessageId, ModuleVersion};
use crate::registry::{decode, frame, with_name, ApiRegistry, Ctx, Events, Subs};
use crate::{ApiError, Message, Retval, HEADER, MAX_MESSAGE, NO_SUCH_MESSAGE, PROTOCOL_VERSION};
use sluice_graph::Vlib;
use sluice_infra::unix_socket::{OwnedListener, SocketPerms};
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// Output queued for one client above which the server stops reading its requests.
pub const OUT_HIGH: usize = 16 << 20;

/// Bytes read from one client per service pass.
pub const READ_BUDGET: usize = 4 << 20;

struct Session {
    s: UnixStream,
    inbuf: Vec<u8>,
    out: Writer,
    out_pos: usize,
    hello: bool,
    /// By message id: the client declared the message with the daemon's CRC.
    accepted: Vec<bool>,
    /// Close once the output is written (an oversize frame, a bad header).
    closing: bool,
    /// The client closed its side: answer what it sent, then close.
    eof: bool,
    dead: bool,
}

/// Listener, sessions and the message table.
pub struct ApiServer {
    listener: OwnedListener,
    path: PathBuf,
    sessions: Vec<Option<Session>>,
    reg: ApiRegistry,
    subs: Subs,
}

/// Creates the listening socket with `sluice_infra::unix_socket`'s rules (a directory only
/// the daemon's user can write, a stale socket replaced, anything else at the path refused,
/// mode 0660 and the configured group), non-blocking.
pub fn bind_socket(path: &Path, perms: &SocketPerms) -> Result<OwnedListener, String> {
    let l = OwnedListener::bind(path, perms).map_err(|e| e.to_string())?;
    l.set_nonblocking(true)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(l)
}

/// A complete frame at the start of an input buffer.
#[derive(Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// Message id.
    pub id: u16,
    /// Context.
    pub context: u32,
    /// Body.
    pub body: &'a [u8],
    /// Bytes the frame takes in the buffer (length field included).
    pub size: usize,
}

/// The frame at the start of `buf`: `Ok(None)` while it is incomplete; an error (and the
/// connection must close) when its length is over [`MAX_MESSAGE`] or below the header.
pub fn next_frame(buf: &[u8]) -> Result<Option<Frame<'_>>, ApiError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if len > MAX_MESSAGE {
        return Err(ApiError::new(
            Retval::TooBig,
            format!("message of {len} bytes exceeds the limit of {MAX_MESSAGE} bytes; closing"),
        ));
    }
    if len < HEADER - 4 {
        return Err(ApiError::new(
            Retval::Malformed,
            format!("frame length {len} is shorter than a message header; closing"),
        ));
    }
    if buf.len() < 4 + len {
        return Ok(None);
    }
    Ok(Some(Frame {
        id: u16::from_le_bytes([buf[4], buf[5]]),
        context: u32::from_le_bytes([buf[6], buf[7], buf[8], buf[9]]),
        body: &buf[HEADER..4 + len],
        size: 4 + len,
    }))
}

fn error_frame(out: &mut Writer, reg: &ApiRegistry, msg_id: u16, context: u32, e: &ApiError) {
    let id = reg.id(ErrMsg::NAME).unwrap_or(NO_SUCH_MESSAGE);
    frame(
        out,
        id,
        context,
        &ErrMsg {
            msg_id,
            retval: e.retval as i32,
            message: e.message.clone(),
        },
    );
}

impl ApiServer {
    /// Listens on `path` (with `perms`) with the messages of `reg`.
    pub fn bind(path: &Path, perms: &SocketPerms, reg: ApiRegistry) -> Result<ApiServer, String> {
        Ok(ApiServer {
            listener: bind_socket(path, perms)?,
            path: path.to_path_buf(),
            sessions: Vec::new(),
            reg,
            subs: Subs::new(),
        })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The message table.
    pub fn registry(&self) -> &ApiRegistry {
        &self.reg
    }

    /// Connected clients.
    pub fn clients(&self) -> usize {
        self.sessions.iter().flatten().count()
    }

    /// The descriptors to wait on: the listener, and each client (readable; writable while
    /// output is queued).
    pub fn pollfds(&self, v: &mut Vec<libc::pollfd>) {
        v.push(libc::pollfd {
            fd: self.listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        for s in self.sessions.iter().flatten() {
            let mut ev = 0;
            if !s.closing && !s.eof && s.out.buf.len() - s.out_pos < OUT_HIGH {
                ev |= libc::POLLIN;
            }
            if s.out_pos < s.out.buf.len() {
                ev |= libc::POLLOUT;
            }
            v.push(libc::pollfd {
                fd: s.s.as_raw_fd(),
                events: ev,
                revents: 0,
            });
        }
    }

    /// One pass: accepts clients (when `listener_ready`: the listener, first of
    /// [`ApiServer::pollfds`], polled readable), reads and dispatches their requests, sends
    /// events, writes output, drops closed sessions. Never blocks. Returns the frames
    /// dispatched.
    pub fn service(&mut self, vm: &mut Vlib, listener_ready: bool) -> usize {
        if listener_ready {
            self.accept();
        }
        let mut n = 0;
        for i in 0..self.sessions.len() {
            n += self.serve(vm, i);
        }
        self.poll_events(vm);
        for s in self.sessions.iter_mut().flatten() {
            flush(s);
        }
        for (i, slot) in self.sessions.iter_mut().enumerate() {
            let done = slot
                .as_ref()
                .is_some_and(|s| s.dead || ((s.closing || s.eof) && s.out_pos >= s.out.buf.len()));
            if done {
                *slot = None;
                for set in self.subs.values_mut() {
                    set.remove(&i);
                }
            }
        }
        n
    }

    fn accept(&mut self) {
        while let Ok((s, _)) = self.listener.accept() {
            if s.set_nonblocking(true).is_err() {
                continue;
            }
            let sess = Session {
                s,
                inbuf: Vec::new(),
                out: Writer::new(),
                out_pos: 0,
                hello: false,
                accepted: Vec::new(),
                closing: false,
                eof: false,
                dead: false,
            };
            match self.sessions.iter().position(Option::is_none) {
                Some(i) => self.sessions[i] = Some(sess),
                None => self.sessions.push(Some(sess)),
            }
        }
    }

    /// Reads and dispatches one client's frames.
    fn serve(&mut self, vm: &mut Vlib, i: usize) -> usize {
        let ApiServer {
            sessions,
            reg,
            subs,
            ..
        } = self;
        let Some(s) = sessions[i].as_mut() else {
            return 0;
        };
        if s.dead || s.closing {
            return 0;
        }
        if !s.eof && s.out.buf.len() - s.out_pos < OUT_HIGH {
            read_some(s);
        }
        let mut pos = 0;
        let mut n = 0;
        while !s.closing && s.out.buf.len() - s.out_pos < OUT_HIGH {
            let (id, context, size) = match next_frame(&s.inbuf[pos..]) {
                Ok(Some(f)) => (f.id, f.context, f.size),
                Ok(None) => break,
                Err(e) => {
                    error_frame(&mut s.out, reg, NO_SUCH_MESSAGE, 0, &e);
                    s.closing = true;
                    break;
                }
            };
            let body_start = pos + HEADER;
            let body_end = pos + size;
            pos = body_end;
            n += 1;
            // The body is moved out of the way of the session's borrows: take the input
            // buffer for the call and put it back.
            let inbuf = std::mem::take(&mut s.inbuf);
            let body = &inbuf[body_start..body_end];
            let r = dispatch(vm, reg, subs, s, i, id, context, body);
            s.inbuf = inbuf;
            if let Err(e) = r {
                error_frame(&mut s.out, reg, id, context, &e);
            }
        }
        s.inbuf.drain(..pos);
        if s.inbuf.capacity() > 2 * READ_BUDGET && s.inbuf.len() < READ_BUDGET {
            s.inbuf.shrink_to(READ_BUDGET);
        }
        n
    }

    fn poll_events(&mut self, vm: &mut Vlib) {
        if self.reg.pollers.is_empty() {
            return;
        }
        let ApiServer {
            sessions,
            reg,
            subs,
            ..
        } = self;
        let mut outs = |c: usize, bytes: &[u8]| {
            if let Some(Some(s)) = sessions.get_mut(c) {
                if !s.dead {
                    s.out.bytes(bytes);
                }
            }
        };
        let mut ev = Events {
            subs,
            ids: &reg.ids,
            outs: &mut outs,
            scratch: Writer::new(),
        };
        for p in &reg.pollers {
            p(vm, &mut ev);
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn dispatch(
    vm: &mut Vlib,
    reg: &ApiRegistry,
    subs: &mut Subs,
    s: &mut Session,
    client: usize,
    id: u16,
    context: u32,
    body: &[u8],
) -> Result<(), ApiError> {
    if id == 0 {
        return hello(reg, s, context, body);
    }
    let Some(e) = reg.entry(id) else {
        return Err(ApiError::new(
            Retval::UnknownMessage,
            format!("unknown message id {id}"),
        ));
    };
    if !s.hello {
        return Err(ApiError::new(
            Retval::NoHello,
            format!("`{}' before api_hello: send api_hello first", e.name),
        ));
    }
    let Some(h) = reg.handler(id) else {
        return Err(ApiError::new(
            Retval::NotARequest,
            format!("`{}' is not a request the daemon handles", e.name),
        ));
    };
    if !s.accepted.get(id as usize).copied().unwrap_or(false) {
        return Err(ApiError::new(
            Retval::SchemaMismatch,
            format!(
                "`{}' refused: the client's definition differs from the daemon's (CRC {:#010x}, module {}) or was not declared in api_hello; update the client's {}.api",
                e.name, e.crc, e.module, e.module
            ),
        ));
    }
    let mut ctx = Ctx {
        client,
        context,
        out: &mut s.out,
        subs,
        ids: &reg.ids,
    };
    h(vm, &mut ctx, body).map_err(|err| with_name(err, e.name))
}

fn hello(reg: &ApiRegistry, s: &mut Session, context: u32, body: &[u8]) -> Result<(), ApiError> {
    let h: ApiHello = decode(body).map_err(|e| with_name(e, ApiHello::NAME))?;
    s.accepted = vec![false; reg.entries.len()];
    let mut messages = Vec::with_capacity(h.messages.len());
    for m in &h.messages {
        match reg.id(&m.name) {
            Some(id) => {
                let crc = reg.entries[id as usize].crc;
                s.accepted[id as usize] = crc == m.crc;
                messages.push(MessageId {
                    name: m.name.clone(),
                    id,
                    crc,
                });
            }
            None => messages.push(MessageId {
                name: m.name.clone(),
                id: NO_SUCH_MESSAGE,
                crc: 0,
            }),
        }
    }
    s.hello = true;
    let reply = ApiHelloReply {
        protocol_version: PROTOCOL_VERSION,
        server_version: format!("sluice v{}", env!("CARGO_PKG_VERSION")),
        modules: reg
            .modules
            .iter()
            .map(|m| ModuleVersion {
                name: m.name.to_string(),
                version: m.version.to_string(),
                crc: m.crc,
            })
            .collect(),
        messages,
    };
    let id = reg.id(ApiHelloReply::NAME).unwrap_or(NO_SUCH_MESSAGE);
    frame(&mut s.out, id, context, &reply);
    Ok(())
}

fn read_some(s: &mut Session) {
    let mut got = 0;
    while got < READ_BUDGET {
        let start = s.inbuf.len();
        s.inbuf.resize(start + 64 * 1024, 0);
        match s.s.read(&mut s.inbuf[start..]) {
            Ok(0) => {
                s.inbuf.truncate(start);
                s.eof = true;
                return;
            }
            Ok(k) => {
                s.inbuf.truncate(start + k);
                got += k;
            }
            Err(e) => {
                s.inbuf.truncate(start);
                match e.kind() {
                    ErrorKind::WouldBlock => return,
                    ErrorKind::Interrupted => continue,
                    _ => {
                        s.dead = true;
                        return;
                    }
                }
            }
        }
    }
}

fn flush(s: &mut Session) {
    while s.out_pos < s.out.buf.len() && !s.dead {
        match s.s.write(&s.out.buf[s.out_pos..]) {
            Ok(0) => s.dead = true,
            Ok(k) => s.out_pos += k,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => s.dead = true,
        }
    }
    if s.out_pos >= s.out.buf.len() {
        s.out.buf.clear();
        s.out_pos = 0;
        if s.out.buf.capacity() > OUT_HIGH {
            s.out.buf.shrink_to(1 << 20);
        }
    } else if s.out_pos > (1 << 20) && s.out_pos * 2 > s.out.buf.len() {
        s.out.buf.drain(..s.out_pos);
        s.out_pos = 0;
    }
}

/// Encodes one frame (clients, tests, the benchmark).
pub fn encode_frame<M: Encode>(id: u16, context: u32, m: &M) -> Vec<u8> {
    let mut w = Writer::new();
    frame(&mut w, id, context, m);
    w.buf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_split_and_bad_lengths_refused() {
        let f = encode_frame(7, 42, &crate::control::ApiDumpEnd { count: 3 });
        assert_eq!(f.len(), 14);
        assert_eq!(next_frame(&f[..13]).unwrap(), None, "incomplete");
        assert_eq!(next_frame(&f[..3]).unwrap(), None);
        let got = next_frame(&f).unwrap().unwrap();
        assert_eq!(
            (got.id, got.context, got.body, got.size),
            (7, 42, &[3, 0, 0, 0][..], 14)
        );
        // Two frames back to back: the first is returned alone.
        let mut two = f.clone();
        two.extend_from_slice(&f);
        assert_eq!(next_frame(&two).unwrap().unwrap().size, 14);
        let big = ((MAX_MESSAGE + 1) as u32).to_le_bytes();
        assert_eq!(next_frame(&big).unwrap_err().retval, Retval::TooBig);
        let short = 5u32.to_le_bytes();
        assert_eq!(next_frame(&short).unwrap_err().retval, Retval::Malformed);
        // The largest frame allowed waits for its bytes.
        assert_eq!(
            next_frame(&(MAX_MESSAGE as u32).to_le_bytes()).unwrap(),
            None
        );
    }
}
