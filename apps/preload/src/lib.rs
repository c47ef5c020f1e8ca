//! `libsluice_preload.so`: runs unmodified programs' TCP and UDP sockets (AF_INET,
//! AF_INET6) over Sluice's host stack (VPP's VCL LD_PRELOAD library in Sluice).
//!
//! ```text
//! SLUICE_APP_SOCKET=/run/sluice/app.sock LD_PRELOAD=libsluice_preload.so redis-benchmark ...
//! ```
//!
//! The library defines the libc socket calls; a process that has `SLUICE_APP_SOCKET` set
//! attaches to Sluice's session layer at its first AF_INET/AF_INET6 stream or datagram
//! socket, and such sockets from then on are Sluice sessions ([`sluice_session::sock`]):
//! data goes through the shared-memory FIFOs, no system call per message. Everything else
//! (Unix sockets, files, pipes, other families, every call when the variable is unset or
//! the attach failed) goes to libc's functions (`dlsym(RTLD_NEXT)`).
//!
//! - **Descriptors**: each Sluice socket holds a real kernel descriptor (an eventfd) as
//!   its number, so numbers never collide with the kernel's, stay small (select, programs
//!   indexing arrays by fd) and `close`/`fork`/`exec` keep their meaning for the number.
//!   A lock-free table (fd → socket) tells the calls which descriptors are Sluice's.
//! - **Waiting**: `poll`, `select`, `epoll_wait` (and blocking reads, writes, accept,
//!   connect) check Sluice sockets' readiness from the FIFOs first; when nothing is ready
//!   they sleep in the kernel on the kernel descriptors plus the application's eventfd,
//!   which Sluice signals when it queues an event. An epoll set holds kernel descriptors
//!   in the kernel and Sluice sockets in a table beside it (level-triggered).
//! - **Loopback**: `connect` or `bind` to 127.0.0.0/8 or ::1 turns the socket into a
//!   kernel socket of the same number (Sluice has no loopback).
//! - **fork**: the child keeps the descriptors but not the attachment: its calls on Sluice
//!   sockets fail with `EBADF` except `close`, which leaves the parent's session alone.
//! - **exit**: sockets still open are closed in order (FIN after their data) by an
//!   `atexit` handler; a process killed by a signal has its connections reset.
//! - Options: `setsockopt` is accepted and ignored (named once on stderr under
//!   `SLUICE_PRELOAD_DEBUG`); `getsockopt` answers `SO_ERROR`, `SO_TYPE`, `SO_DOMAIN`,
//!   `SO_PROTOCOL`, buffer sizes and `TCP_NODELAY` (always on), `ENOPROTOOPT` for others.
//!
//! Not taken over: `dup`/`dup2` of a Sluice socket (the copy is an eventfd), `shutdown`
//! (accepted, no half-close), `sendmsg`/`recvmsg`, edge-triggered epoll (reported as
//! level-triggered); `recv` with `MSG_PEEK` or `MSG_OOB` fails with `EOPNOTSUPP`. Calls
//! from several threads are serialised by one lock, which a blocking call releases while
//! it sleeps.
//!
//! `SLUICE_BUSY_POLL_US=<µs>`: `poll`/`select`/`epoll_wait` and blocking calls spin on the
//! event queue that long before they sleep (a CPU for wake-up latency, as `App::wait`).

#![allow(clippy::missing_safety_doc)] // every export is a libc function with libc's contract

use sluice_session::sock::{self, Kind, Ready, Sockets};
use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{c_int, c_ulong, c_void};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Descriptors below this can be Sluice sockets (the table is 256 KiB of zero pages).
const MAX_FD: usize = 1 << 16;
/// Table value of an epoll descriptor (Sluice sockets may be in its side table).
const EPOLL_MARK: u32 = 1 << 31;
/// epoll data of the application's eventfd in a kernel epoll set.
const EFD_DATA: u64 = 0x534c_5549_4345_4546;
/// Longest sleep before a blocking call looks again (and lets other threads in).
const SLEEP: Duration = Duration::from_millis(10);

static FDS: [AtomicU32; MAX_FD] = [const { AtomicU32::new(0) }; MAX_FD];
/// 0: not tried, 1: attached, 2: off (no `SLUICE_APP_SOCKET`, or the attach failed).
static ATTACH: AtomicU8 = AtomicU8::new(0);
/// Set in a forked child.
static CHILD: AtomicBool = AtomicBool::new(false);
/// `SLUICE_PRELOAD_DEBUG` is set.
static DEBUG: AtomicBool = AtomicBool::new(false);
/// The (level, option) pairs `setsockopt` ignored and said so (under [`DEBUG`]).
static IGNORED: Mutex<Vec<(c_int, c_int)>> = Mutex::new(Vec::new());

struct Watch {
    fd: c_int,
    events: u32,
    data: u64,
}

struct Pre {
    socks: Sockets,
    /// Epoll descriptor → its Sluice sockets.
    epolls: HashMap<c_int, Vec<Watch>>,
    /// Epoll descriptors holding the application's eventfd.
    efd_in: Vec<c_int>,
}

static STATE: Mutex<Option<Pre>> = Mutex::new(None);

thread_local! {
    /// Set while this thread runs the library's own code: its libc calls go to libc.
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

/// Holds the state lock with [`BUSY`] set.
struct Guard(MutexGuard<'static, Option<Pre>>);

impl Drop for Guard {
    fn drop(&mut self) {
        BUSY.with(|b| b.set(false));
    }
}

impl Guard {
    fn pre(&mut self) -> &mut Pre {
        self.0.as_mut().expect("attached")
    }
}

fn busy() -> bool {
    BUSY.with(|b| b.get())
}

fn lock() -> Guard {
    BUSY.with(|b| b.set(true));
    Guard(STATE.lock().unwrap_or_else(|p| p.into_inner()))
}

/// libc's definition of a function this library replaces.
macro_rules! real {
    ($name:ident : fn($($t:ty),*) -> $r:ty) => {{
        static P: AtomicUsize = AtomicUsize::new(0);
        let mut p = P.load(Ordering::Relaxed);
        if p == 0 {
            // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT finds libc's symbol.
            p = unsafe {
                libc::dlsym(libc::RTLD_NEXT, concat!(stringify!($name), "\0").as_ptr().cast())
            } as usize;
            assert!(p != 0, concat!("sluice-preload: no libc ", stringify!($name)));
            P.store(p, Ordering::Relaxed);
        }
        // SAFETY: `p` is libc's function of this name, whose C type this is.
        unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($t),*) -> $r>(p) }
    }};
}

fn set_errno(e: c_int) {
    // SAFETY: errno is this thread's.
    unsafe { *libc::__errno_location() = e };
}

/// `-1` with errno set, as libc returns.
fn fail<T: From<i8>>(e: c_int) -> T {
    set_errno(e);
    T::from(-1)
}

/// The Sluice socket behind `fd`, if it is one (no lock, no system call).
fn sluice_fd(fd: c_int) -> Option<u32> {
    let v = FDS.get(usize::try_from(fd).ok()?)?.load(Ordering::Acquire);
    (v != 0 && v & EPOLL_MARK == 0).then(|| v - 1)
}

fn mark(fd: c_int, v: u32) {
    if let Some(x) = usize::try_from(fd).ok().and_then(|i| FDS.get(i)) {
        x.store(v, Ordering::Release);
    }
}

/// At exit: the sockets the program left open end with a FIN after their data, as the
/// kernel's do (without it Sluice would reset them when the attachment goes).
extern "C" fn at_exit() {
    if CHILD.load(Ordering::Relaxed) || busy() {
        return;
    }
    let mut g = lock();
    if let Some(p) = g.0.as_mut() {
        p.socks.close_all();
    }
}

extern "C" fn in_child() {
    CHILD.store(true, Ordering::Relaxed);
}

/// Attaches on first use; whether Sluice sockets can be made.
fn attached() -> bool {
    match ATTACH.load(Ordering::Acquire) {
        1 => return !CHILD.load(Ordering::Relaxed),
        2 => return false,
        _ => {}
    }
    let mut g = lock();
    if ATTACH.load(Ordering::Acquire) != 0 {
        return ATTACH.load(Ordering::Acquire) == 1;
    }
    let debug = std::env::var_os("SLUICE_PRELOAD_DEBUG").is_some();
    DEBUG.store(debug, Ordering::Relaxed);
    let Some(path) = std::env::var("SLUICE_APP_SOCKET").ok() else {
        ATTACH.store(2, Ordering::Release);
        return false;
    };
    let name = format!(
        "preload:{}",
        std::env::args()
            .next()
            .unwrap_or_default()
            .rsplit('/')
            .next()
            .unwrap_or("")
    );
    match Sockets::attach(&path, &name) {
        Ok(mut socks) => {
            if let Ok(v) = std::env::var("SLUICE_BUSY_POLL_US") {
                match v.parse::<u64>() {
                    Ok(us) => socks.app_mut().set_busy_poll(Duration::from_micros(us)),
                    Err(_) => eprintln!(
                        "sluice-preload: SLUICE_BUSY_POLL_US={v:?} is not a number of µs; \
                         not busy-polling"
                    ),
                }
            }
            *g.0 = Some(Pre {
                socks,
                epolls: HashMap::new(),
                efd_in: Vec::new(),
            });
            // SAFETY: registers plain functions run in the child after fork and at exit.
            unsafe {
                libc::pthread_atfork(None, None, Some(in_child));
                libc::atexit(at_exit);
            }
            if debug {
                eprintln!("sluice-preload: attached to {path} as {name}");
            }
            ATTACH.store(1, Ordering::Release);
            true
        }
        Err(e) => {
            eprintln!("sluice-preload: attach to {path} failed ({e}); using the kernel's sockets");
            ATTACH.store(2, Ordering::Release);
            false
        }
    }
}

/// Runs `f` on the socket behind `fd` with the lock held; `EBADF` in a forked child.
fn with<T>(h: u32, f: impl FnOnce(&mut Sockets, u32) -> io::Result<T>) -> Result<T, c_int> {
    if CHILD.load(Ordering::Relaxed) {
        return Err(libc::EBADF);
    }
    let mut g = lock();
    f(&mut g.pre().socks, h).map_err(|e| sock::errno_of(&e))
}

/// Retries `f` while it says `WouldBlock`, sleeping between tries without the lock
/// ([`sock::blocking`]), unless the socket (or this call: `dontwait`) is non-blocking.
fn blocking<T>(
    h: u32,
    write: bool,
    dontwait: bool,
    f: impl FnMut(&mut Sockets, u32) -> io::Result<T>,
) -> Result<T, c_int> {
    if CHILD.load(Ordering::Relaxed) {
        return Err(libc::EBADF);
    }
    let socks: fn(&mut Guard) -> Option<&mut Sockets> = |g| g.0.as_mut().map(|p| &mut p.socks);
    sock::blocking(lock, socks, h, write, dontwait, SLEEP, f).map_err(|e| sock::errno_of(&e))
}

/// A placeholder kernel descriptor for a new Sluice socket (`-1`: none free below MAX_FD).
fn placeholder(cloexec: bool) -> c_int {
    let fl = if cloexec { libc::EFD_CLOEXEC } else { 0 };
    // SAFETY: plain eventfd(2).
    let fd = unsafe { libc::eventfd(0, fl | libc::EFD_NONBLOCK) };
    if fd >= MAX_FD as c_int {
        real_close(fd);
        return -1;
    }
    fd
}

fn real_close(fd: c_int) {
    let f = real!(close: fn(c_int) -> c_int);
    // SAFETY: libc's close(2) of a descriptor this library opened.
    unsafe { f(fd) };
}

fn is_loopback(a: &SocketAddr) -> bool {
    a.ip().is_loopback()
}

/// Turns Sluice socket `h` at `fd` (not yet bound or connected) into a kernel socket of
/// the same number.
fn to_kernel(fd: c_int, h: u32) -> Result<(), c_int> {
    let (kind, v6, nb) = with(h, |s, h| {
        let (k, v6) = s.kind(h)?;
        Ok((k, v6, s.nonblocking(h)?))
    })?;
    let dom = if v6 { libc::AF_INET6 } else { libc::AF_INET };
    let mut ty = match kind {
        Kind::Tcp => libc::SOCK_STREAM,
        Kind::Udp => libc::SOCK_DGRAM,
    };
    if nb {
        ty |= libc::SOCK_NONBLOCK;
    }
    let f = real!(socket: fn(c_int, c_int, c_int) -> c_int);
    // SAFETY: libc's socket(2).
    let k = unsafe { f(dom, ty, 0) };
    if k < 0 {
        return Err(io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO));
    }
    // SAFETY: plain fcntl/dup3 on descriptors we own.
    let cloexec = unsafe { libc::fcntl(fd, libc::F_GETFD) } & libc::FD_CLOEXEC != 0;
    let _ = with(h, |s, h| s.close(h));
    mark(fd, 0);
    // SAFETY: as above; dup3 replaces the placeholder atomically.
    let r = unsafe { libc::dup3(k, fd, if cloexec { libc::O_CLOEXEC } else { 0 }) };
    real_close(k);
    if r < 0 {
        return Err(libc::EBADF);
    }
    Ok(())
}

fn addr_arg(sa: *const libc::sockaddr, len: libc::socklen_t) -> Result<SocketAddr, c_int> {
    // SAFETY: the caller passed `len` readable bytes at `sa`, as the C call requires.
    unsafe { sock::raw::from_c(sa, len) }.ok_or(libc::EINVAL)
}

/// The Sluice socket and address of a `bind`/`connect` on `fd`; `None` when libc's call
/// is to run instead (a kernel descriptor, or a loopback address, for which the socket was
/// just turned into a kernel one).
fn sluice_target(
    fd: c_int,
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> Result<Option<(u32, SocketAddr)>, c_int> {
    let Some(h) = sluice_fd(fd).filter(|_| !busy()) else {
        return Ok(None);
    };
    let a = addr_arg(addr, len)?;
    if is_loopback(&a) {
        to_kernel(fd, h)?;
        return Ok(None);
    }
    Ok(Some((h, a)))
}

fn ret_int(r: Result<c_int, c_int>) -> c_int {
    r.unwrap_or_else(fail)
}

fn ret_size(r: Result<usize, c_int>) -> isize {
    match r {
        Ok(n) => n as isize,
        Err(e) => fail(e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, proto: c_int) -> c_int {
    let base = ty & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC);
    let kind = match (base, proto) {
        (libc::SOCK_STREAM, 0 | libc::IPPROTO_TCP) => Some(Kind::Tcp),
        (libc::SOCK_DGRAM, 0 | libc::IPPROTO_UDP) => Some(Kind::Udp),
        _ => None,
    };
    let v6 = domain == libc::AF_INET6;
    if busy() || !(domain == libc::AF_INET || v6) || kind.is_none() || !attached() {
        return real!(socket: fn(c_int, c_int, c_int) -> c_int)(domain, ty, proto);
    }
    let fd = placeholder(ty & libc::SOCK_CLOEXEC != 0);
    if fd < 0 {
        return real!(socket: fn(c_int, c_int, c_int) -> c_int)(domain, ty, proto);
    }
    let mut g = lock();
    let s = &mut g.pre().socks;
    let h = s.socket(kind.expect("checked"), v6);
    let _ = s.set_nonblocking(h, ty & libc::SOCK_NONBLOCK != 0);
    mark(fd, h + 1);
    fd
}

#[no_mangle]
pub unsafe extern "C" fn bind(
    fd: c_int,
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> c_int {
    let real_fn = real!(bind: fn(c_int, *const libc::sockaddr, libc::socklen_t) -> c_int);
    let (h, a) = match sluice_target(fd, addr, len) {
        Ok(Some(x)) => x,
        Ok(None) => return real_fn(fd, addr, len),
        Err(e) => return fail(e),
    };
    ret_int(with(h, |s, h| s.bind(h, a).map(|_| 0)))
}

#[no_mangle]
pub unsafe extern "C" fn listen(fd: c_int, backlog: c_int) -> c_int {
    let Some(h) = sluice_fd(fd).filter(|_| !busy()) else {
        return real!(listen: fn(c_int, c_int) -> c_int)(fd, backlog);
    };
    ret_int(with(h, |s, h| s.listen(h, backlog).map(|_| 0)))
}

#[no_mangle]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
    flags: c_int,
) -> c_int {
    let Some(h) = sluice_fd(fd).filter(|_| !busy()) else {
        return real!(accept4: fn(c_int, *mut libc::sockaddr, *mut libc::socklen_t, c_int) -> c_int)(
            fd, addr, len, flags,
        );
    };
    let r = blocking(h, false, false, |s, h| {
        let (n, peer) = s.accept(h)?;
        let nfd = placeholder(flags & libc::SOCK_CLOEXEC != 0);
        if nfd < 0 {
            let _ = s.close(n);
            return Err(io::Error::from_raw_os_error(libc::EMFILE));
        }
        s.set_nonblocking(n, flags & libc::SOCK_NONBLOCK != 0)?;
        mark(nfd, n + 1);
        Ok((nfd, peer))
    });
    match r {
        Ok((nfd, peer)) => {
            // SAFETY: accept(2)'s pointers from the caller.
            unsafe { sock::raw::to_c(peer, addr, len) };
            nfd
        }
        Err(e) => fail(e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn accept(
    fd: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> c_int {
    // SAFETY: the same contract.
    unsafe { accept4(fd, addr, len, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn connect(
    fd: c_int,
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> c_int {
    let real_fn = real!(connect: fn(c_int, *const libc::sockaddr, libc::socklen_t) -> c_int);
    let (h, a) = match sluice_target(fd, addr, len) {
        Ok(Some(x)) => x,
        Ok(None) => return real_fn(fd, addr, len),
        Err(e) => return fail(e),
    };
    match with(h, |s, h| Ok((s.connect(h, a)?, s.nonblocking(h)?))) {
        Ok((true, _)) => 0,
        Ok((false, true)) => fail(libc::EINPROGRESS),
        Ok((false, false)) => ret_int(blocking(h, true, false, |s, h| {
            match s.connect_done(h)? {
                true => Ok(0),
                false => Err(io::ErrorKind::WouldBlock.into()),
            }
        })),
        Err(e) => fail(e),
    }
}

fn recv_impl(
    h: u32,
    buf: *mut c_void,
    n: usize,
    flags: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> isize {
    if flags & (libc::MSG_PEEK | libc::MSG_OOB) != 0 {
        return fail(libc::EOPNOTSUPP); // a read would consume what the caller only peeks at
    }
    if buf.is_null() && n > 0 {
        return fail(libc::EFAULT);
    }
    // SAFETY: the caller passed `n` writable bytes.
    let b = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, n) };
    let r = blocking(h, false, flags & libc::MSG_DONTWAIT != 0, |s, h| {
        s.recv_from(h, b)
    });
    match r {
        Ok((k, from)) => {
            if let Some(a) = from {
                // SAFETY: recvfrom(2)'s pointers from the caller (or null).
                unsafe { sock::raw::to_c(a, addr, len) };
            }
            k as isize
        }
        Err(e) => fail(e),
    }
}

fn send_impl(h: u32, buf: *const c_void, n: usize, flags: c_int, to: Option<SocketAddr>) -> isize {
    if buf.is_null() && n > 0 {
        return fail(libc::EFAULT);
    }
    // SAFETY: the caller passed `n` readable bytes.
    let b = unsafe { std::slice::from_raw_parts(buf as *const u8, n) };
    ret_size(blocking(
        h,
        true,
        flags & libc::MSG_DONTWAIT != 0,
        |s, h| s.send_to(h, b, to),
    ))
}

#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: usize) -> isize {
    match sluice_fd(fd).filter(|_| !busy()) {
        Some(h) => recv_impl(h, buf, n, 0, std::ptr::null_mut(), std::ptr::null_mut()),
        None => real!(read: fn(c_int, *mut c_void, usize) -> isize)(fd, buf, n),
    }
}

#[no_mangle]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    _buflen: usize,
) -> isize {
    // SAFETY: the same contract as read (the fortified check is the caller's).
    unsafe { read(fd, buf, n) }
}

#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: usize) -> isize {
    match sluice_fd(fd).filter(|_| !busy()) {
        Some(h) => send_impl(h, buf, n, 0, None),
        None => real!(write: fn(c_int, *const c_void, usize) -> isize)(fd, buf, n),
    }
}

#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, n: usize, flags: c_int) -> isize {
    match sluice_fd(fd).filter(|_| !busy()) {
        Some(h) => recv_impl(h, buf, n, flags, std::ptr::null_mut(), std::ptr::null_mut()),
        None => real!(recv: fn(c_int, *mut c_void, usize, c_int) -> isize)(fd, buf, n, flags),
    }
}

#[no_mangle]
pub unsafe extern "C" fn __recv_chk(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    _buflen: usize,
    flags: c_int,
) -> isize {
    // SAFETY: the same contract as recv.
    unsafe { recv(fd, buf, n, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    flags: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> isize {
    match sluice_fd(fd).filter(|_| !busy()) {
        Some(h) => recv_impl(h, buf, n, flags, addr, len),
        None => {
            real!(recvfrom: fn(c_int, *mut c_void, usize, c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> isize)(
                fd, buf, n, flags, addr, len,
            )
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    _buflen: usize,
    flags: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> isize {
    // SAFETY: the same contract as recvfrom.
    unsafe { recvfrom(fd, buf, n, flags, addr, len) }
}

#[no_mangle]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, n: usize, flags: c_int) -> isize {
    match sluice_fd(fd).filter(|_| !busy()) {
        Some(h) => send_impl(h, buf, n, flags, None),
        None => real!(send: fn(c_int, *const c_void, usize, c_int) -> isize)(fd, buf, n, flags),
    }
}

#[no_mangle]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    n: usize,
    flags: c_int,
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> isize {
    let Some(h) = sluice_fd(fd).filter(|_| !busy()) else {
        return real!(sendto: fn(c_int, *const c_void, usize, c_int, *const libc::sockaddr, libc::socklen_t) -> isize)(
            fd, buf, n, flags, addr, len,
        );
    };
    let to = if addr.is_null() {
        None
    } else {
        match addr_arg(addr, len) {
            Ok(a) => Some(a),
            Err(e) => return fail(e),
        }
    };
    send_impl(h, buf, n, flags, to)
}

#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> isize {
    let Some(h) = sluice_fd(fd).filter(|_| !busy()) else {
        return real!(readv: fn(c_int, *const libc::iovec, c_int) -> isize)(fd, iov, cnt);
    };
    if cnt <= 0 || iov.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller passes `cnt` iovecs.
    let v = unsafe { std::slice::from_raw_parts(iov, cnt as usize) };
    // The first non-empty buffer (a short read is allowed; the next call reads on).
    match v.iter().find(|x| x.iov_len > 0) {
        Some(x) => recv_impl(
            h,
            x.iov_base,
            x.iov_len,
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        ),
        None => 0,
    }
}

#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> isize {
    let Some(h) = sluice_fd(fd).filter(|_| !busy()) else {
        return real!(writev: fn(c_int, *const libc::iovec, c_int) -> isize)(fd, iov, cnt);
    };
    if cnt <= 0 || iov.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller passes `cnt` iovecs.
    let v = unsafe { std::slice::from_raw_parts(iov, cnt as usize) };
    if matches!(with(h, |s, h| s.kind(h)), Ok((Kind::Udp, _))) {
        // One datagram of all the buffers, as the kernel sends.
        let mut d = [0u8; sluice_session::MAX_DGRAM];
        let mut n = 0usize;
        for x in v.iter().filter(|x| x.iov_len > 0) {
            if x.iov_base.is_null() {
                return fail(libc::EFAULT);
            }
            if x.iov_len > d.len() - n {
                return fail(libc::EMSGSIZE);
            }
            // SAFETY: the caller passes `iov_len` readable bytes at `iov_base`.
            let b = unsafe { std::slice::from_raw_parts(x.iov_base as *const u8, x.iov_len) };
            d[n..n + b.len()].copy_from_slice(b);
            n += b.len();
        }
        return send_impl(h, d.as_ptr().cast(), n, 0, None);
    }
    let mut done = 0usize;
    for x in v.iter().filter(|x| x.iov_len > 0) {
        // After the first buffer, only what fits now (a short write, as the kernel does).
        let flags = if done > 0 { libc::MSG_DONTWAIT } else { 0 };
        let r = send_impl(h, x.iov_base, x.iov_len, flags, None);
        if r < 0 {
            return if done > 0 { done as isize } else { r };
        }
        done += r as usize;
        if (r as usize) < x.iov_len {
            break;
        }
    }
    done as isize
}

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if !busy() {
        if let Some(v) = usize::try_from(fd)
            .ok()
            .and_then(|i| FDS.get(i))
            .map(|x| x.load(Ordering::Acquire))
        {
            if v & EPOLL_MARK != 0 {
                mark(fd, 0);
                let mut g = lock();
                if let Some(p) = g.0.as_mut() {
                    p.epolls.remove(&fd);
                    p.efd_in.retain(|&e| e != fd);
                }
            } else if v != 0 {
                mark(fd, 0);
                if !CHILD.load(Ordering::Relaxed) {
                    let mut g = lock();
                    let p = g.pre();
                    for w in p.epolls.values_mut() {
                        w.retain(|x| x.fd != fd);
                    }
                    let _ = p.socks.close(v - 1);
                }
            }
        }
    }
    real!(close: fn(c_int) -> c_int)(fd)
}

#[no_mangle]
pub unsafe extern "C" fn shutdown(fd: c_int, how: c_int) -> c_int {
    match sluice_fd(fd).filter(|_| !busy()) {
        Some(h) => ret_int(with(h, |s, h| s.shutdown(h, how).map(|_| 0))),
        None => real!(shutdown: fn(c_int, c_int) -> c_int)(fd, how),
    }
}

fn fcntl_impl(
    fd: c_int,
    cmd: c_int,
    arg: c_ulong,
    real_fn: unsafe extern "C" fn(c_int, c_int, c_ulong) -> c_int,
) -> c_int {
    let Some(h) = sluice_fd(fd).filter(|_| !busy()) else {
        // SAFETY: libc's fcntl with the caller's arguments.
        return unsafe { real_fn(fd, cmd, arg) };
    };
    match cmd {
        libc::F_GETFL => ret_int(with(h, |s, h| {
            Ok(libc::O_RDWR
                | if s.nonblocking(h)? {
                    libc::O_NONBLOCK
                } else {
                    0
                })
        })),
        libc::F_SETFL => ret_int(with(h, |s, h| {
            s.set_nonblocking(h, arg as c_int & libc::O_NONBLOCK != 0)
                .map(|_| 0)
        })),
        // F_GETFD/F_SETFD (close-on-exec) and the rest: the placeholder descriptor's.
        // SAFETY: libc's fcntl with the caller's arguments.
        _ => unsafe { real_fn(fd, cmd, arg) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    fcntl_impl(
        fd,
        cmd,
        arg,
        real!(fcntl: fn(c_int, c_int, c_ulong) -> c_int),
    )
}

#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    fcntl_impl(
        fd,
        cmd,
        arg,
        real!(fcntl64: fn(c_int, c_int, c_ulong) -> c_int),
    )
}

#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, req: c_ulong, arg: *mut c_void) -> c_int {
    match sluice_fd(fd).filter(|_| !busy()) {
        Some(h) if req == libc::FIONBIO as c_ulong && !arg.is_null() => {
            // SAFETY: FIONBIO takes an int pointer.
            let on = unsafe { *(arg as *const c_int) } != 0;
            ret_int(with(h, |s, h| s.set_nonblocking(h, on).map(|_| 0)))
        }
        Some(_) => fail(libc::ENOTTY),
        None => real!(ioctl: fn(c_int, c_ulong, *mut c_void) -> c_int)(fd, req, arg),
    }
}

#[no_mangle]
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: libc::socklen_t,
) -> c_int {
    match sluice_fd(fd).filter(|_| !busy()) {
        Some(_) => {
            if DEBUG.load(Ordering::Relaxed)
                && (level, name) != (libc::IPPROTO_TCP, libc::TCP_NODELAY)
            {
                let mut seen = IGNORED.lock().unwrap_or_else(|p| p.into_inner());
                if !seen.contains(&(level, name)) {
                    seen.push((level, name));
                    eprintln!("sluice-preload: setsockopt level {level} option {name} is ignored");
                }
            }
            0
        }
        None => {
            real!(setsockopt: fn(c_int, c_int, c_int, *const c_void, libc::socklen_t) -> c_int)(
                fd, level, name, val, len,
            )
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn getsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut libc::socklen_t,
) -> c_int {
    let Some(h) = sluice_fd(fd).filter(|_| !busy()) else {
        return real!(getsockopt: fn(c_int, c_int, c_int, *mut c_void, *mut libc::socklen_t) -> c_int)(
            fd, level, name, val, len,
        );
    };
    if (level, name) == (libc::IPPROTO_TCP, libc::TCP_INFO) {
        return tcp_info(h, val, len);
    }
    let v = with(h, |s, h| {
        let (kind, v6) = s.kind(h)?;
        Ok(match (level, name) {
            (libc::SOL_SOCKET, libc::SO_ERROR) => s.take_error(h)?,
            (libc::SOL_SOCKET, libc::SO_TYPE) => match kind {
                Kind::Tcp => libc::SOCK_STREAM,
                Kind::Udp => libc::SOCK_DGRAM,
            },
            (libc::SOL_SOCKET, libc::SO_DOMAIN) => {
                if v6 {
                    libc::AF_INET6
                } else {
                    libc::AF_INET
                }
            }
            (libc::SOL_SOCKET, libc::SO_PROTOCOL) => match kind {
                Kind::Tcp => libc::IPPROTO_TCP,
                Kind::Udp => libc::IPPROTO_UDP,
            },
            (libc::SOL_SOCKET, libc::SO_RCVBUF | libc::SO_SNDBUF) => {
                s.app().geometry().fifo_size as c_int
            }
            (libc::IPPROTO_TCP, libc::TCP_NODELAY) => 1,
            // Not a made-up 0 (an SO_LINGER read as 0 bytes of a struct, say).
            _ => return Err(io::Error::from_raw_os_error(libc::ENOPROTOOPT)),
        })
    });
    match v {
        Ok(x) if !val.is_null() && !len.is_null() => {
            // SAFETY: getsockopt(2)'s pointers: `*len` bytes writable at `val`.
            unsafe {
                let b = x.to_ne_bytes();
                let n = (*len as usize).min(b.len());
                std::ptr::copy_nonoverlapping(b.as_ptr(), val as *mut u8, n);
                *len = n as libc::socklen_t;
            }
            0
        }
        Ok(_) => fail(libc::EFAULT),
        Err(e) => fail(e),
    }
}

/// `getsockopt(TCP_INFO)` (iperf3 reads it every interval): the state (established or
/// closed) and the MSS; Sluice keeps the other fields, so they read 0.
fn tcp_info(h: u32, val: *mut c_void, len: *mut libc::socklen_t) -> c_int {
    let st = with(h, |s, h| {
        if s.kind(h)?.0 != Kind::Tcp {
            return Err(io::Error::from_raw_os_error(libc::ENOPROTOOPT));
        }
        Ok(s.peer_addr(h).map(|a| a.is_ipv6()).ok())
    });
    let v6 = match st {
        Ok(v) => v,
        Err(e) => return fail(e),
    };
    if val.is_null() || len.is_null() {
        return fail(libc::EFAULT);
    }
    // SAFETY: an all-zero tcp_info is a valid value (plain integers).
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    const TCP_ESTABLISHED: u8 = 1;
    const TCP_CLOSE: u8 = 7;
    info.tcpi_state = if v6.is_some() {
        TCP_ESTABLISHED
    } else {
        TCP_CLOSE
    };
    let mss = if v6 == Some(true) { 1440 } else { 1460 };
    info.tcpi_snd_mss = mss;
    info.tcpi_rcv_mss = mss;
    // SAFETY: getsockopt(2)'s pointers: `*len` bytes writable at `val`; `info` is read as
    // its bytes.
    unsafe {
        let n = (*len as usize).min(std::mem::size_of::<libc::tcp_info>());
        std::ptr::copy_nonoverlapping(
            &info as *const libc::tcp_info as *const u8,
            val as *mut u8,
            n,
        );
        *len = n as libc::socklen_t;
    }
    0
}

fn getname(
    fd: c_int,
    peer: bool,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
    real_fn: unsafe extern "C" fn(c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> c_int,
) -> c_int {
    let Some(h) = sluice_fd(fd).filter(|_| !busy()) else {
        // SAFETY: libc's function with the caller's arguments.
        return unsafe { real_fn(fd, addr, len) };
    };
    match with(h, |s, h| {
        if peer {
            s.peer_addr(h)
        } else {
            s.local_addr(h)
        }
    }) {
        Ok(a) => {
            // SAFETY: getsockname(2)'s pointers from the caller.
            unsafe { sock::raw::to_c(a, addr, len) };
            0
        }
        Err(e) => fail(e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn getsockname(
    fd: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> c_int {
    getname(
        fd,
        false,
        addr,
        len,
        real!(getsockname: fn(c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> c_int),
    )
}

#[no_mangle]
pub unsafe extern "C" fn getpeername(
    fd: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> c_int {
    getname(
        fd,
        true,
        addr,
        len,
        real!(getpeername: fn(c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> c_int),
    )
}

fn deadline(timeout_ms: c_int) -> Option<Instant> {
    (timeout_ms >= 0).then(|| Instant::now() + Duration::from_millis(timeout_ms as u64))
}

/// Milliseconds to sleep now: until the deadline, at most `cap`.
fn sleep_ms(deadline: Option<Instant>, cap: Option<Duration>) -> c_int {
    let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
    let t = match (left, cap) {
        (Some(l), Some(c)) => Some(l.min(c)),
        (l, c) => l.or(c),
    };
    match t {
        // Round up: a 0.4 ms wait must not turn into a busy loop of zero-timeout polls.
        Some(d) => d.as_micros().div_ceil(1000).min(i32::MAX as u128) as c_int,
        None => -1,
    }
}

fn poll_bits(r: Ready, want: i16) -> i16 {
    let mut b = 0;
    if r.read {
        b |= want & (libc::POLLIN | libc::POLLRDNORM);
    }
    if r.write {
        b |= want & (libc::POLLOUT | libc::POLLWRNORM);
    }
    if r.hup {
        b |= want & libc::POLLRDHUP;
    }
    if r.err {
        b |= libc::POLLERR | libc::POLLHUP;
    }
    b
}

/// poll(2) over a mix of Sluice sockets and kernel descriptors.
fn poll_mixed(fds: &mut [libc::pollfd], timeout_ms: c_int) -> c_int {
    let real_poll = real!(poll: fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int);
    let end = deadline(timeout_ms);
    let mut kernel: Vec<libc::pollfd> = Vec::new();
    let mut kidx: Vec<usize> = Vec::new();
    loop {
        kernel.clear();
        kidx.clear();
        let mut n = 0;
        let mut poll_soon = false;
        let mut g = lock();
        let p = g.pre();
        p.socks.pump();
        for (i, f) in fds.iter_mut().enumerate() {
            f.revents = 0;
            match sluice_fd(f.fd) {
                Some(h) => {
                    f.revents = poll_bits(p.socks.ready(h), f.events);
                    n += (f.revents != 0) as c_int;
                    poll_soon |= p.socks.arm_write(h, f.events & libc::POLLOUT != 0);
                }
                None => {
                    kernel.push(*f);
                    kidx.push(i);
                }
            }
        }
        if n == 0 && p.socks.app().spin() {
            continue; // events arrived while busy-polling
        }
        let sleep = n == 0 && p.socks.app().prepare_sleep();
        let efd = p.socks.app().event_fd();
        drop(g);
        let t = if sleep {
            kernel.push(libc::pollfd {
                fd: efd,
                events: libc::POLLIN,
                revents: 0,
            });
            sleep_ms(end, poll_soon.then_some(Duration::ZERO))
        } else {
            0
        };
        // Only Sluice sockets and nothing to sleep on: no system call.
        let k = if kernel.is_empty() {
            0
        } else {
            // SAFETY: `kernel` is a valid pollfd array of its length.
            unsafe { real_poll(kernel.as_mut_ptr(), kernel.len() as libc::nfds_t, t) }
        };
        let err = io::Error::last_os_error().raw_os_error().unwrap_or(0);
        if sleep {
            let g = lock();
            if let Some(p) = g.0.as_ref() {
                p.socks.app().woke();
            }
            kernel.pop();
        }
        if k < 0 {
            return fail(err); // EINTR stays EINTR (the eventfd drain may have set EAGAIN)
        }
        for (f, &i) in kernel.iter().zip(&kidx) {
            fds[i].revents = f.revents;
            n += (f.revents != 0) as c_int;
        }
        if n > 0 || end.is_some_and(|d| Instant::now() >= d) {
            return n;
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut libc::pollfd, nfds: libc::nfds_t, timeout: c_int) -> c_int {
    let real_poll = real!(poll: fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int);
    if busy()
        || fds.is_null()
        || nfds == 0
        || ATTACH.load(Ordering::Relaxed) != 1
        || CHILD.load(Ordering::Relaxed)
    {
        return real_poll(fds, nfds, timeout);
    }
    // SAFETY: the caller passes `nfds` pollfds.
    let v = unsafe { std::slice::from_raw_parts_mut(fds, nfds as usize) };
    if !v.iter().any(|f| sluice_fd(f.fd).is_some()) {
        return real_poll(fds, nfds, timeout);
    }
    poll_mixed(v, timeout)
}

#[no_mangle]
pub unsafe extern "C" fn __poll_chk(
    fds: *mut libc::pollfd,
    nfds: libc::nfds_t,
    timeout: c_int,
    _len: usize,
) -> c_int {
    // SAFETY: the same contract as poll.
    unsafe { poll(fds, nfds, timeout) }
}

#[no_mangle]
pub unsafe extern "C" fn select(
    nfds: c_int,
    rd: *mut libc::fd_set,
    wr: *mut libc::fd_set,
    ex: *mut libc::fd_set,
    tv: *mut libc::timeval,
) -> c_int {
    let real_select = real!(select: fn(c_int, *mut libc::fd_set, *mut libc::fd_set, *mut libc::fd_set, *mut libc::timeval) -> c_int);
    if busy() || ATTACH.load(Ordering::Relaxed) != 1 || CHILD.load(Ordering::Relaxed) {
        return real_select(nfds, rd, wr, ex, tv);
    }
    let isset = |s: *mut libc::fd_set, fd: c_int| {
        // SAFETY: a caller's fd_set (or null); fd < nfds ≤ FD_SETSIZE.
        !s.is_null() && unsafe { libc::FD_ISSET(fd, s) }
    };
    let nfds = nfds.clamp(0, libc::FD_SETSIZE as c_int);
    let mut v = Vec::new();
    for fd in 0..nfds {
        let mut ev = 0;
        if isset(rd, fd) {
            ev |= libc::POLLIN;
        }
        if isset(wr, fd) {
            ev |= libc::POLLOUT;
        }
        if isset(ex, fd) {
            ev |= libc::POLLPRI;
        }
        if ev != 0 {
            v.push(libc::pollfd {
                fd,
                events: ev,
                revents: 0,
            });
        }
    }
    if !v.iter().any(|f| sluice_fd(f.fd).is_some()) {
        return real_select(nfds, rd, wr, ex, tv);
    }
    let ms = if tv.is_null() {
        -1
    } else {
        // SAFETY: the caller's timeval.
        let t = unsafe { *tv };
        t.tv_sec
            .saturating_mul(1000)
            .saturating_add(t.tv_usec / 1000)
            .clamp(0, i32::MAX as i64) as c_int
    };
    if poll_mixed(&mut v, ms) < 0 {
        return -1;
    }
    for s in [rd, wr, ex] {
        if !s.is_null() {
            // SAFETY: the caller's fd_set.
            unsafe { libc::FD_ZERO(s) };
        }
    }
    let mut n = 0;
    for f in &v {
        let hit = |s: *mut libc::fd_set, bits: i16| {
            if !s.is_null() && f.revents & bits != 0 {
                // SAFETY: the caller's fd_set; fd < FD_SETSIZE.
                unsafe { libc::FD_SET(f.fd, s) };
                1
            } else {
                0
            }
        };
        n += hit(rd, libc::POLLIN | libc::POLLHUP | libc::POLLERR);
        n += hit(wr, libc::POLLOUT | libc::POLLERR);
        n += hit(ex, libc::POLLPRI);
    }
    n
}

#[no_mangle]
pub unsafe extern "C" fn epoll_create1(flags: c_int) -> c_int {
    let fd = real!(epoll_create1: fn(c_int) -> c_int)(flags);
    if fd >= 0 && !busy() {
        mark(fd, EPOLL_MARK);
    }
    fd
}

#[no_mangle]
pub unsafe extern "C" fn epoll_create(size: c_int) -> c_int {
    if size <= 0 {
        return fail(libc::EINVAL);
    }
    // SAFETY: the same contract.
    unsafe { epoll_create1(0) }
}

#[no_mangle]
pub unsafe extern "C" fn epoll_ctl(
    ep: c_int,
    op: c_int,
    fd: c_int,
    ev: *mut libc::epoll_event,
) -> c_int {
    let real_ctl = real!(epoll_ctl: fn(c_int, c_int, c_int, *mut libc::epoll_event) -> c_int);
    let Some(_) = sluice_fd(fd).filter(|_| !busy() && !CHILD.load(Ordering::Relaxed)) else {
        let r = real_ctl(ep, op, fd, ev);
        // Count the set's kernel descriptors: epoll_wait asks the kernel only when it has some.
        let slot = usize::try_from(ep).ok().and_then(|i| FDS.get(i));
        if let Some(x) =
            slot.filter(|x| r == 0 && !busy() && x.load(Ordering::Acquire) & EPOLL_MARK != 0)
        {
            match op {
                libc::EPOLL_CTL_ADD => {
                    x.fetch_add(1, Ordering::AcqRel);
                }
                libc::EPOLL_CTL_DEL => {
                    let _ = x.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                        (v & !EPOLL_MARK > 0).then(|| v - 1)
                    });
                }
                _ => {}
            }
        }
        return r;
    };
    let ev = if ev.is_null() {
        None
    } else {
        // SAFETY: the caller's epoll_event.
        Some(unsafe { std::ptr::read_unaligned(ev) })
    };
    let mut g = lock();
    let set = g.pre().epolls.entry(ep).or_default();
    if let Some(x) = usize::try_from(ep).ok().and_then(|i| FDS.get(i)) {
        x.fetch_or(EPOLL_MARK, Ordering::AcqRel);
    }
    let at = set.iter().position(|w| w.fd == fd);
    let r = match (op, at, ev) {
        (libc::EPOLL_CTL_ADD, Some(_), _) => Err(libc::EEXIST),
        (libc::EPOLL_CTL_ADD, None, Some(v)) => {
            set.push(Watch {
                fd,
                events: v.events,
                data: v.u64,
            });
            Ok(0)
        }
        (libc::EPOLL_CTL_MOD, Some(i), Some(v)) => {
            set[i].events = v.events;
            set[i].data = v.u64;
            Ok(0)
        }
        (libc::EPOLL_CTL_DEL, Some(i), _) => {
            set.swap_remove(i);
            Ok(0)
        }
        (libc::EPOLL_CTL_MOD | libc::EPOLL_CTL_DEL, None, _) => Err(libc::ENOENT),
        _ => Err(libc::EINVAL),
    };
    ret_int(r)
}

#[no_mangle]
pub unsafe extern "C" fn epoll_wait(
    ep: c_int,
    evs: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    let real_wait = real!(epoll_wait: fn(c_int, *mut libc::epoll_event, c_int, c_int) -> c_int);
    let tag = usize::try_from(ep)
        .ok()
        .and_then(|i| FDS.get(i))
        .map_or(0, |x| x.load(Ordering::Acquire));
    let ours = !busy() && !CHILD.load(Ordering::Relaxed) && tag & EPOLL_MARK != 0;
    if !ours || max <= 0 || evs.is_null() {
        return real_wait(ep, evs, max, timeout);
    }
    let end = deadline(timeout);
    loop {
        let mut g = lock();
        let Some(p) = g.0.as_mut() else {
            drop(g);
            return real_wait(ep, evs, max, timeout);
        };
        p.socks.pump();
        let mut n = 0usize;
        let mut poll_soon = false;
        if let Some(set) = p.epolls.get(&ep) {
            for w in set {
                let Some(h) = sluice_fd(w.fd) else { continue };
                let b = p.socks.ready(h).epoll_bits(w.events);
                if b != 0 && n < max as usize {
                    // SAFETY: n < max entries are writable at `evs`.
                    unsafe {
                        std::ptr::write_unaligned(
                            evs.add(n),
                            libc::epoll_event {
                                events: b,
                                u64: w.data,
                            },
                        )
                    };
                    n += 1;
                }
                poll_soon |= p.socks.arm_write(h, w.events & libc::EPOLLOUT as u32 != 0);
            }
        }
        let efd = p.socks.app().event_fd();
        if n == 0 && !p.efd_in.contains(&ep) {
            let mut e = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: EFD_DATA,
            };
            // SAFETY: adds our eventfd to the caller's epoll set (BUSY is set: libc's call).
            unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, efd, &mut e) };
            p.efd_in.push(ep);
        }
        if n == 0 && p.socks.app().spin() {
            continue; // events arrived while busy-polling
        }
        let sleep = n == 0 && p.socks.app().prepare_sleep();
        drop(g);
        let kernel_fds = FDS[ep as usize].load(Ordering::Acquire) & !EPOLL_MARK;
        if n > 0 && kernel_fds == 0 {
            return n as c_int;
        }
        let t = if sleep {
            sleep_ms(end, poll_soon.then_some(Duration::ZERO))
        } else {
            0
        };
        // SAFETY: the rest of the caller's array.
        let k = unsafe { real_wait(ep, evs.add(n), max - n as c_int, t) };
        let err = io::Error::last_os_error().raw_os_error().unwrap_or(0);
        if sleep {
            let g = lock();
            if let Some(p) = g.0.as_ref() {
                p.socks.app().woke();
            }
        }
        if k < 0 {
            return if n > 0 { n as c_int } else { fail(err) };
        }
        // Take our eventfd's entry out.
        let mut total = n;
        for i in n..n + k as usize {
            // SAFETY: entries the kernel just wrote.
            let e = unsafe { std::ptr::read_unaligned(evs.add(i)) };
            if e.u64 != EFD_DATA {
                // SAFETY: total ≤ i < max.
                unsafe { std::ptr::write_unaligned(evs.add(total), e) };
                total += 1;
            }
        }
        if total > 0 || end.is_some_and(|d| Instant::now() >= d) {
            return total as c_int;
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn epoll_pwait(
    ep: c_int,
    evs: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
    sigmask: *const libc::sigset_t,
) -> c_int {
    if sigmask.is_null() {
        // SAFETY: the same contract.
        return unsafe { epoll_wait(ep, evs, max, timeout) };
    }
    real!(epoll_pwait: fn(c_int, *mut libc::epoll_event, c_int, c_int, *const libc::sigset_t) -> c_int)(
        ep, evs, max, timeout, sigmask,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleeps_round_up_and_respect_caps() {
        assert_eq!(sleep_ms(None, None), -1, "no deadline: forever");
        assert_eq!(sleep_ms(None, Some(Duration::from_micros(400))), 1);
        let soon = Instant::now() + Duration::from_secs(3600);
        assert_eq!(sleep_ms(Some(soon), Some(Duration::from_millis(1))), 1);
        assert_eq!(sleep_ms(Some(soon), Some(Duration::ZERO)), 0);
        let past = Instant::now() - Duration::from_millis(5);
        assert_eq!(sleep_ms(Some(past), None), 0);
    }

    #[test]
    fn poll_bits_follow_readiness_and_interest() {
        let r = Ready {
            read: true,
            write: false,
            hup: true,
            err: false,
        };
        assert_eq!(poll_bits(r, libc::POLLIN | libc::POLLOUT), libc::POLLIN);
        assert_eq!(poll_bits(r, libc::POLLRDHUP), libc::POLLRDHUP);
        let reset = Ready { err: true, ..r };
        assert_eq!(poll_bits(reset, 0), libc::POLLERR | libc::POLLHUP);
    }

    #[test]
    fn kernel_descriptors_are_not_sluice_sockets() {
        const FD: c_int = 65000; // far above what the test process opens
        assert_eq!(sluice_fd(-1), None);
        assert_eq!(sluice_fd(MAX_FD as c_int), None);
        mark(FD, EPOLL_MARK | 2);
        assert_eq!(sluice_fd(FD), None, "an epoll set is not a socket");
        mark(FD, 5 + 1);
        assert_eq!(sluice_fd(FD), Some(5));
        mark(FD, 0);
        assert_eq!(sluice_fd(FD), None);
    }
}
