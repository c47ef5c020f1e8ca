//! The C API of Sluice's host stack (`include/sluice_session.h`, docs/hoststack.md): BSD
//! socket-shaped calls over the shared-memory FIFOs of [`sluice_session::sock`], built as
//! `libsluice_session_c.so`. Data moves with no system call per message; a call sleeps
//! (on the application's eventfd) only when it must block.
//!
//! Every function returns a value ≥ 0 on success and a negative errno on failure. Handles
//! of sockets and of epoll sets are small integers of their own (not kernel file
//! descriptors). One attachment per process; calls from several threads are serialised
//! by one lock, which a blocking call releases while it sleeps (at most [`SLEEP`] at a
//! time before it looks again).

use sluice_session::sock::{self, Kind, Sockets};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::io;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Longest sleep of a blocking call before it looks again (and lets other threads in).
pub const SLEEP: Duration = Duration::from_millis(10);

struct Watch {
    h: u32,
    events: u32,
    data: u64,
}

struct State {
    socks: Sockets,
    epolls: Vec<Option<Vec<Watch>>>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn lock() -> MutexGuard<'static, Option<State>> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

fn neg(e: &io::Error) -> i64 {
    -(sock::errno_of(e) as i64)
}

/// Runs `f` on the attached state (`-ENOTCONN` when not attached).
fn with<T>(f: impl FnOnce(&mut State) -> io::Result<T>) -> Result<T, i64> {
    let mut g = lock();
    let st = g.as_mut().ok_or(-(libc::ENOTCONN as i64))?;
    f(st).map_err(|e| neg(&e))
}

fn handle(h: c_int) -> io::Result<u32> {
    u32::try_from(h).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))
}

/// Retries `f` on socket `h` until it stops saying `WouldBlock`, sleeping between tries
/// without the lock ([`sock::blocking`]), unless `h` is non-blocking.
fn blocking<T>(
    h: c_int,
    write: bool,
    f: impl FnMut(&mut Sockets, u32) -> io::Result<T>,
) -> Result<T, i64> {
    let h = handle(h).map_err(|e| neg(&e))?;
    let socks: for<'a> fn(&'a mut MutexGuard<'static, Option<State>>) -> Option<&'a mut Sockets> =
        |g| g.as_mut().map(|st| &mut st.socks);
    sock::blocking(lock, socks, h, write, false, SLEEP, f).map_err(|e| neg(&e))
}

fn ret(r: Result<i64, i64>) -> i64 {
    r.unwrap_or_else(|e| e)
}

/// Attaches to Sluice's session layer at `app_socket` (NULL: `/run/sluice/app.sock`) as
/// `name` (NULL: "sluice-c"). 0, `-EISCONN` when already attached, or a negative errno.
///
/// # Safety
/// Both pointers are null or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn sluice_attach(app_socket: *const c_char, name: *const c_char) -> c_int {
    let s = |p: *const c_char, d: &str| {
        if p.is_null() {
            d.to_string()
        } else {
            // SAFETY: the caller passes a NUL-terminated string.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    let path = s(app_socket, "/run/sluice/app.sock");
    let name = s(name, "sluice-c");
    let mut g = lock();
    if g.is_some() {
        return -libc::EISCONN;
    }
    match Sockets::attach(&path, &name) {
        Ok(socks) => {
            *g = Some(State {
                socks,
                epolls: Vec::new(),
            });
            0
        }
        Err(e) => neg(&e) as c_int,
    }
}

/// Detaches: every socket is closed (TCP connections get their queued data and FIN).
#[no_mangle]
pub extern "C" fn sluice_detach() -> c_int {
    match lock().take() {
        Some(mut st) => {
            // Dropping the attachment alone would make Sluice abort every connection
            // (RST, queued data lost); closing first sends the data and a FIN.
            st.socks.close_all();
            0
        }
        None => -libc::ENOTCONN,
    }
}

/// A new socket: `domain` AF_INET or AF_INET6, `type` SOCK_STREAM or SOCK_DGRAM
/// (SOCK_NONBLOCK may be or'ed in). Its handle or a negative errno.
#[no_mangle]
pub extern "C" fn sluice_socket(domain: c_int, ty: c_int) -> c_int {
    let v6 = match domain {
        libc::AF_INET => false,
        libc::AF_INET6 => true,
        _ => return -libc::EAFNOSUPPORT,
    };
    let kind = match ty & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) {
        libc::SOCK_STREAM => Kind::Tcp,
        libc::SOCK_DGRAM => Kind::Udp,
        _ => return -libc::EPROTONOSUPPORT,
    };
    ret(with(|st| {
        let h = st.socks.socket(kind, v6);
        st.socks.set_nonblocking(h, ty & libc::SOCK_NONBLOCK != 0)?;
        Ok(h as i64)
    })) as c_int
}

fn addr_arg(sa: *const libc::sockaddr, len: libc::socklen_t) -> io::Result<std::net::SocketAddr> {
    // SAFETY: the C caller passes `len` readable bytes at `sa` (or null).
    unsafe { sock::raw::from_c(sa, len) }.ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))
}

/// Sets (`on` ≠ 0) or clears non-blocking mode: then calls that would wait return -EAGAIN.
#[no_mangle]
pub extern "C" fn sluice_set_nonblocking(s: c_int, on: c_int) -> c_int {
    ret(with(|st| {
        st.socks.set_nonblocking(handle(s)?, on != 0).map(|_| 0)
    })) as c_int
}

/// Binds `s` to an IPv4/IPv6 address (unspecified: any of Sluice's; port 0: ephemeral).
///
/// # Safety
/// `addr` points to `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn sluice_bind(
    s: c_int,
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> c_int {
    ret(with(|st| {
        st.socks.bind(handle(s)?, addr_arg(addr, len)?).map(|_| 0)
    })) as c_int
}

/// Listens for TCP connections on the bound address.
#[no_mangle]
pub extern "C" fn sluice_listen(s: c_int, backlog: c_int) -> c_int {
    ret(with(|st| st.socks.listen(handle(s)?, backlog).map(|_| 0))) as c_int
}

/// Accepts a connection: its handle (`flags` may hold SOCK_NONBLOCK), the peer written to
/// `addr`/`len` when not null. Blocks unless `s` is non-blocking (-EAGAIN).
///
/// # Safety
/// `addr`/`len` are null or as for accept(2).
#[no_mangle]
pub unsafe extern "C" fn sluice_accept(
    s: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
    flags: c_int,
) -> c_int {
    let r = blocking(s, false, |socks, h| {
        let (n, peer) = socks.accept(h)?;
        socks.set_nonblocking(n, flags & libc::SOCK_NONBLOCK != 0)?;
        Ok((n, peer))
    });
    match r {
        Ok((n, peer)) => {
            // SAFETY: the caller passes accept(2)-style pointers.
            unsafe { sock::raw::to_c(peer, addr, len) };
            n as c_int
        }
        Err(e) => e as c_int,
    }
}

/// Connects: TCP waits for the handshake (non-blocking: -EINPROGRESS, then the socket
/// turns writable and [`sluice_socket_error`] says how it ended); UDP fixes the peer.
///
/// # Safety
/// `addr` points to `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn sluice_connect(
    s: c_int,
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> c_int {
    let started = with(|st| {
        let h = handle(s)?;
        let done = st.socks.connect(h, addr_arg(addr, len)?)?;
        Ok((done, st.socks.nonblocking(h)?))
    });
    match started {
        Ok((true, _)) => 0,
        Ok((false, true)) => -libc::EINPROGRESS,
        Ok((false, false)) => ret(blocking(s, true, |socks, h| {
            match socks.connect_done(h)? {
                true => Ok(0),
                false => Err(io::ErrorKind::WouldBlock.into()),
            }
        })) as c_int,
        Err(e) => e as c_int,
    }
}

/// The pending error of `s` (0 when none; a finished non-blocking connect: 0 or
/// ECONNREFUSED), cleared as SO_ERROR is.
#[no_mangle]
pub extern "C" fn sluice_socket_error(s: c_int) -> c_int {
    ret(with(|st| st.socks.take_error(handle(s)?).map(i64::from))) as c_int
}

/// Reads up to `n` bytes (TCP: 0 at the end of the stream; UDP: one datagram). Blocks
/// unless non-blocking (-EAGAIN).
///
/// # Safety
/// `buf` points to `n` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn sluice_read(s: c_int, buf: *mut c_void, n: usize) -> isize {
    if buf.is_null() && n > 0 {
        return -libc::EFAULT as isize;
    }
    // SAFETY: the caller passes `n` writable bytes.
    let b = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, n) };
    ret(blocking(s, false, |socks, h| {
        socks.read(h, b).map(|k| k as i64)
    })) as isize
}

/// Writes up to `n` bytes (TCP: as many as fit, blocking until at least one does; UDP:
/// one datagram to the connected peer).
///
/// # Safety
/// `buf` points to `n` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn sluice_write(s: c_int, buf: *const c_void, n: usize) -> isize {
    if buf.is_null() && n > 0 {
        return -libc::EFAULT as isize;
    }
    // SAFETY: the caller passes `n` readable bytes.
    let b = unsafe { std::slice::from_raw_parts(buf as *const u8, n) };
    ret(blocking(s, true, |socks, h| {
        socks.write(h, b).map(|k| k as i64)
    })) as isize
}

/// Receives one datagram (UDP) or stream bytes (TCP), the source written to `addr`/`len`.
///
/// # Safety
/// `buf` points to `n` writable bytes; `addr`/`len` are null or as for recvfrom(2).
#[no_mangle]
pub unsafe extern "C" fn sluice_recvfrom(
    s: c_int,
    buf: *mut c_void,
    n: usize,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> isize {
    if buf.is_null() && n > 0 {
        return -libc::EFAULT as isize;
    }
    // SAFETY: the caller passes `n` writable bytes.
    let b = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, n) };
    match blocking(s, false, |socks, h| socks.recv_from(h, b)) {
        Ok((k, from)) => {
            if let Some(a) = from {
                // SAFETY: recvfrom(2)-style pointers from the caller.
                unsafe { sock::raw::to_c(a, addr, len) };
            }
            k as isize
        }
        Err(e) => e as isize,
    }
}

/// Sends one datagram to `addr` (UDP; an unbound socket gets an ephemeral port).
///
/// # Safety
/// `buf` points to `n` readable bytes, `addr` to `len`.
#[no_mangle]
pub unsafe extern "C" fn sluice_sendto(
    s: c_int,
    buf: *const c_void,
    n: usize,
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> isize {
    if buf.is_null() && n > 0 {
        return -libc::EFAULT as isize;
    }
    // SAFETY: the caller passes `n` readable bytes.
    let b = unsafe { std::slice::from_raw_parts(buf as *const u8, n) };
    let to = if addr.is_null() {
        None
    } else {
        match addr_arg(addr, len) {
            Ok(a) => Some(a),
            Err(e) => return neg(&e) as isize,
        }
    };
    ret(blocking(s, true, |socks, h| {
        socks.send_to(h, b, to).map(|k| k as i64)
    })) as isize
}

/// Closes a socket (TCP: orderly; the queued data and the FIN still go out).
#[no_mangle]
pub extern "C" fn sluice_close(s: c_int) -> c_int {
    ret(with(|st| {
        let h = handle(s)?;
        for w in st.epolls.iter_mut().flatten() {
            w.retain(|x| x.h != h);
        }
        st.socks.close(h).map(|_| 0)
    })) as c_int
}

/// Half-closes `s` (`how`: `SHUT_WR`/`SHUT_RDWR` send the FIN after the queued data and
/// reading goes on; `SHUT_RD` changes nothing), as shutdown(2).
#[no_mangle]
pub extern "C" fn sluice_shutdown(s: c_int, how: c_int) -> c_int {
    ret(with(|st| {
        let h = handle(s)?;
        st.socks.shutdown(h, how).map(|_| 0)
    })) as c_int
}

/// Writes the local (`peer` = 0) or peer address of `s`.
///
/// # Safety
/// `addr`/`len` as for getsockname(2).
#[no_mangle]
pub unsafe extern "C" fn sluice_getname(
    s: c_int,
    peer: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> c_int {
    match with(|st| {
        let h = handle(s)?;
        if peer != 0 {
            st.socks.peer_addr(h)
        } else {
            st.socks.local_addr(h)
        }
    }) {
        Ok(a) => {
            // SAFETY: getsockname(2)-style pointers from the caller.
            unsafe { sock::raw::to_c(a, addr, len) };
            0
        }
        Err(e) => e as c_int,
    }
}

/// A new epoll set over Sluice sockets: its handle.
#[no_mangle]
pub extern "C" fn sluice_epoll_create() -> c_int {
    ret(with(|st| {
        let i = match st.epolls.iter().position(|e| e.is_none()) {
            Some(i) => i,
            None => {
                st.epolls.push(None);
                st.epolls.len() - 1
            }
        };
        st.epolls[i] = Some(Vec::new());
        Ok(i as i64)
    })) as c_int
}

/// Frees an epoll set.
#[no_mangle]
pub extern "C" fn sluice_epoll_close(ep: c_int) -> c_int {
    ret(with(|st| {
        let e = st
            .epolls
            .get_mut(ep as usize)
            .filter(|e| e.is_some())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))?;
        *e = None;
        Ok(0)
    })) as c_int
}

/// EPOLL_CTL_ADD/MOD/DEL of socket `s` in set `ep` (`ev` as for epoll_ctl(2); events
/// EPOLLIN, EPOLLOUT, EPOLLRDHUP; EPOLLERR/EPOLLHUP always; level-triggered).
///
/// # Safety
/// `ev` is null (DEL) or points to a readable `struct epoll_event`.
#[no_mangle]
pub unsafe extern "C" fn sluice_epoll_ctl(
    ep: c_int,
    op: c_int,
    s: c_int,
    ev: *const libc::epoll_event,
) -> c_int {
    let ev = if ev.is_null() {
        None
    } else {
        // SAFETY: the caller passes a readable epoll_event.
        Some(unsafe { std::ptr::read_unaligned(ev) })
    };
    ret(with(|st| {
        let h = handle(s)?;
        if !st.socks.is_socket(h) {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        let set = st
            .epolls
            .get_mut(ep as usize)
            .and_then(|e| e.as_mut())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))?;
        let at = set.iter().position(|w| w.h == h);
        let e = |c| io::Error::from_raw_os_error(c);
        match (op, at, ev) {
            (libc::EPOLL_CTL_ADD, Some(_), _) => return Err(e(libc::EEXIST)),
            (libc::EPOLL_CTL_ADD, None, Some(v)) => set.push(Watch {
                h,
                events: v.events,
                data: v.u64,
            }),
            (libc::EPOLL_CTL_MOD, Some(i), Some(v)) => {
                set[i].events = v.events;
                set[i].data = v.u64;
            }
            (libc::EPOLL_CTL_DEL, Some(i), _) => {
                set.swap_remove(i);
            }
            (libc::EPOLL_CTL_MOD | libc::EPOLL_CTL_DEL, None, _) => return Err(e(libc::ENOENT)),
            _ => return Err(e(libc::EINVAL)),
        }
        Ok(0)
    })) as c_int
}

/// Waits up to `timeout_ms` (-1: forever, 0: not at all) for sockets of `ep` to be ready;
/// fills at most `max` events. No system call while events are ready.
///
/// # Safety
/// `evs` points to `max` writable `struct epoll_event`s.
#[no_mangle]
pub unsafe extern "C" fn sluice_epoll_wait(
    ep: c_int,
    evs: *mut libc::epoll_event,
    max: c_int,
    timeout_ms: c_int,
) -> c_int {
    if max <= 0 || evs.is_null() {
        return -libc::EINVAL;
    }
    let deadline =
        (timeout_ms >= 0).then(|| Instant::now() + Duration::from_millis(timeout_ms as u64));
    let mut slept = None;
    loop {
        let r = with(|st| {
            match slept.take() {
                Some(w) => st.socks.woke(w),
                None => st.socks.pump(),
            }
            let set = st
                .epolls
                .get(ep as usize)
                .and_then(|e| e.as_ref())
                .ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))?;
            let mut n = 0usize;
            let mut poll_soon = false;
            for w in set {
                let b = st.socks.ready(w.h).epoll_bits(w.events);
                if b != 0 && n < max as usize {
                    let e = libc::epoll_event {
                        events: b,
                        u64: w.data,
                    };
                    // SAFETY: n < max events are writable at `evs`.
                    unsafe { std::ptr::write_unaligned(evs.add(n), e) };
                    n += 1;
                }
                poll_soon |= st
                    .socks
                    .arm_write(w.h, w.events & libc::EPOLLOUT as u32 != 0);
            }
            if n > 0 {
                return Ok(Err(n as i64));
            }
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => SLEEP,
            };
            if left.is_zero() {
                return Ok(Err(0));
            }
            let t = if poll_soon {
                Duration::ZERO
            } else {
                left.min(SLEEP)
            };
            Ok(Ok((st.socks.prepare_wait(), t)))
        });
        let (w, t) = match r {
            Ok(Ok(x)) => x,
            Ok(Err(n)) => return n as c_int,
            Err(e) => return e as c_int,
        };
        // Sleeps without the lock: other threads' calls go on meanwhile.
        let r = w.sleep(t);
        slept = Some(w);
        if let Err(e) = r {
            let _ = with(|st| {
                st.socks.woke(w);
                Ok(())
            });
            return neg(&e) as c_int;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_before_attach_and_bad_arguments_fail_with_errnos() {
        assert_eq!(
            sluice_socket(libc::AF_INET, libc::SOCK_STREAM),
            -libc::ENOTCONN
        );
        assert_eq!(
            sluice_socket(libc::AF_UNIX, libc::SOCK_STREAM),
            -libc::EAFNOSUPPORT
        );
        assert_eq!(
            sluice_socket(libc::AF_INET, libc::SOCK_RAW),
            -libc::EPROTONOSUPPORT
        );
        assert_eq!(sluice_detach(), -libc::ENOTCONN);
        assert_eq!(sluice_epoll_create(), -libc::ENOTCONN);
        let path = c"/nonexistent/sluice-app.sock";
        // SAFETY: a NUL-terminated path and a null name.
        let r = unsafe { sluice_attach(path.as_ptr(), std::ptr::null()) };
        assert_eq!(r, -libc::ENOENT);
        let mut buf = [0u8; 4];
        // SAFETY: a 4-byte buffer; not attached, so nothing is read.
        let r = unsafe { sluice_read(0, buf.as_mut_ptr().cast(), 4) };
        assert_eq!(r, -libc::ENOTCONN as isize);
    }

    #[test]
    fn epoll_bits_follow_readiness_and_interest() {
        let r = sock::Ready {
            read: true,
            write: true,
            hup: true,
            err: false,
        };
        let inn = libc::EPOLLIN as u32;
        let out = libc::EPOLLOUT as u32;
        let rdhup = libc::EPOLLRDHUP as u32;
        assert_eq!(r.epoll_bits(inn), inn);
        assert_eq!(r.epoll_bits(inn | out | rdhup), inn | out | rdhup);
        let reset = sock::Ready { err: true, ..r };
        assert_eq!(
            reset.epoll_bits(0),
            (libc::EPOLLERR | libc::EPOLLHUP) as u32
        );
    }
}
