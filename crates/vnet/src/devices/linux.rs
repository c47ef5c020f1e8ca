//! What the Linux-facing drivers (`af_packet`, `af_xdp`) share: socket-option and mmap
//! helpers, Linux interface queries (ifindex, MAC, MTU, channels), promiscuous membership,
//! interface-name checks, default MACs, initial rx-queue placement over threads, a
//! per-interface table for tx nodes, a spin lock for tx queues shared by threads, and the
//! retry of tx kicks the kernel refused ([`KickState`], [`KickSet`]). Rx modes
//! (polling, interrupt, adaptive) are `sluice_graph::rxmode` through `crate::devices::fdq`.

use crate::error::{VnetError, VnetResult};
use crate::interface::IfCounters;
use sluice_buffer::{BufIdx, BufferPool};
use sluice_graph::{CounterDesc, Cx};
use std::cell::UnsafeCell;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// An `io::Error` from `errno`, prefixed with what failed; [`errno`] still reads the code.
pub fn os_err(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(
        e.kind(),
        OsErr {
            msg: format!("{what}: {e}"),
            errno: e.raw_os_error().unwrap_or(0),
        },
    )
}

/// The payload of [`os_err`]: the message and the `errno` it came from.
#[derive(Debug)]
struct OsErr {
    msg: String,
    errno: i32,
}

impl std::fmt::Display for OsErr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for OsErr {}

/// The `errno` behind `e`: a plain OS error's or an [`os_err`]'s (whose message hides it
/// from `raw_os_error`).
pub fn errno(e: &io::Error) -> Option<i32> {
    e.raw_os_error().or_else(|| {
        e.get_ref()
            .and_then(|i| i.downcast_ref::<OsErr>())
            .map(|o| o.errno)
    })
}

/// `setsockopt(fd, level, name, v)`.
pub fn setsockopt<T>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    v: &T,
    what: &str,
) -> io::Result<()> {
    // SAFETY: `v` points to a live `T` of `size_of::<T>()` bytes for the duration of the call.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            v as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(os_err(what));
    }
    Ok(())
}

/// `getsockopt(fd, level, name)` into a plain-data `T` (zero-initialised, so a shorter
/// answer from an older kernel leaves the rest zero).
pub fn getsockopt<T: Copy>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    what: &str,
) -> io::Result<T> {
    // SAFETY: only instantiated with plain-data kernel structs, for which zero is valid.
    let mut v: T = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `v` is writable for `len` bytes; the kernel writes at most `len`.
    let r = unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            &mut v as *mut T as *mut libc::c_void,
            &mut len,
        )
    };
    if r != 0 {
        return Err(os_err(what));
    }
    Ok(v)
}

/// A memory mapping: a ring a socket shares with the kernel, or anonymous memory.
pub struct Mmap {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory (shared with the kernel for rings); every access goes
// through the ownership protocol of the ring (status words, producer/consumer indices),
// documented at each use.
unsafe impl Send for Mmap {}
// SAFETY: as above; concurrent users synchronise through atomics in the ring and, for tx,
// the queue lock.
unsafe impl Sync for Mmap {}

impl Mmap {
    /// Maps `len` bytes of `fd` at page offset `offset` (a socket's ring), shared.
    pub fn new(fd: RawFd, len: usize, offset: u64, what: &str) -> io::Result<Mmap> {
        // SAFETY: mapping a socket's ring as its ABI prescribes (PACKET_MMAP, AF_XDP); the
        // length is the ring size the kernel just accepted.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(os_err(what));
        }
        Ok(Mmap {
            ptr: p as *mut u8,
            len,
        })
    }

    /// `len` bytes of zeroed, private, populated anonymous memory.
    pub fn anonymous(len: usize, what: &str) -> io::Result<Mmap> {
        // SAFETY: a fresh anonymous mapping; no file or existing memory involved.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(os_err(what));
        }
        Ok(Mmap {
            ptr: p as *mut u8,
            len,
        })
    }

    /// Start of the mapping (page-aligned).
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never: mmap refuses length 0).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The 32-bit word at `off` (must be 4-aligned and inside the mapping), for status words
    /// and ring indices the kernel updates concurrently.
    pub fn atomic_u32(&self, off: usize) -> Option<&AtomicU32> {
        if off % 4 != 0 || off.checked_add(4)? > self.len {
            return None;
        }
        // SAFETY: in bounds and 4-aligned (the mapping is page-aligned); the kernel accesses
        // these words with atomic-width loads and stores, so an AtomicU32 view is sound.
        Some(unsafe { &*(self.ptr.add(off) as *const AtomicU32) })
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `new`/`anonymous` mapped; no slice into it outlives
        // its owner (they borrow it, or are raw pointers the owner keeps alive).
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.len);
        }
    }
}

/// Puts interface `ifindex` in promiscuous mode for as long as the AF_PACKET socket `fd` is
/// open (a membership, so it ends with the socket even if Sluice dies).
pub fn add_promiscuous(fd: RawFd, ifindex: u32) -> io::Result<()> {
    const SOL_PACKET: libc::c_int = 263;
    const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
    const PACKET_MR_PROMISC: libc::c_ushort = 1;
    // struct packet_mreq { int mr_ifindex; unsigned short mr_type, mr_alen; unsigned char mr_address[8]; }
    #[repr(C)]
    struct PacketMreq {
        ifindex: libc::c_int,
        kind: libc::c_ushort,
        alen: libc::c_ushort,
        address: [u8; 8],
    }
    let m = PacketMreq {
        ifindex: ifindex as libc::c_int,
        kind: PACKET_MR_PROMISC,
        alen: 0,
        address: [0; 8],
    };
    setsockopt(
        fd,
        SOL_PACKET,
        PACKET_ADD_MEMBERSHIP,
        &m,
        "PACKET_ADD_MEMBERSHIP promisc",
    )
}

/// An AF_PACKET socket that receives nothing (protocol 0, never bound) and holds the
/// promiscuous membership of `ifindex`.
pub fn promiscuous_socket(ifindex: u32) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2).
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(os_err("AF_PACKET socket for promiscuous mode"));
    }
    // SAFETY: a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    add_promiscuous(fd.as_raw_fd(), ifindex)?;
    Ok(fd)
}

/// Linux interface helpers (ioctl on a throw-away datagram socket).
pub mod linux_if {
    use super::*;

    /// The `ifindex` and MTU of Linux interface `name` a driver attaches to;
    /// [`VnetError::NotFound`] naming it if there is none.
    pub fn host(name: &str) -> VnetResult<(u32, u32)> {
        let i = index(name).ok_or_else(|| {
            VnetError::NotFound(format!("unknown Linux interface `{name}' (no such device)"))
        })?;
        Ok((i, mtu(name).map_err(|e| refused(name, e))?))
    }

    /// What the system refused on Linux interface `name` (`what` happened), naming it.
    pub fn refused(name: &str, what: impl std::fmt::Display) -> VnetError {
        VnetError::Invalid(format!("`{name}': {what}"))
    }

    /// `ifindex` of a Linux interface, `None` if there is no such interface.
    pub fn index(name: &str) -> Option<u32> {
        let c = std::ffi::CString::new(name).ok()?;
        // SAFETY: `c` is a valid NUL-terminated string.
        let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
        (i != 0).then_some(i)
    }

    fn ifreq(name: &str) -> io::Result<libc::ifreq> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "bad interface name",
            ));
        }
        // SAFETY: ifreq is plain data; zeroed is valid.
        let mut r: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, s) in r.ifr_name.iter_mut().zip(name.bytes()) {
            *d = s as libc::c_char;
        }
        Ok(r)
    }

    fn ioctl(req: libc::Ioctl, r: &mut libc::ifreq, what: &str) -> io::Result<()> {
        // SAFETY: plain socket(2).
        let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if s < 0 {
            return Err(os_err("socket"));
        }
        // SAFETY: `s` is ours.
        let s = unsafe { OwnedFd::from_raw_fd(s) };
        // SAFETY: `r` is a valid ifreq for these interface ioctls (for SIOCETHTOOL its data
        // pointer points to a live ethtool command struct).
        let rc = unsafe { libc::ioctl(s.as_raw_fd(), req, r as *mut libc::ifreq) };
        if rc != 0 {
            return Err(os_err(what));
        }
        Ok(())
    }

    /// MAC address.
    pub fn mac(name: &str) -> io::Result<[u8; 6]> {
        let mut r = ifreq(name)?;
        ioctl(libc::SIOCGIFHWADDR, &mut r, "SIOCGIFHWADDR")?;
        // SAFETY: the kernel filled the hwaddr member of the union.
        let sa = unsafe { r.ifr_ifru.ifru_hwaddr };
        let mut m = [0u8; 6];
        for (d, s) in m.iter_mut().zip(sa.sa_data.iter()) {
            *d = *s as u8;
        }
        Ok(m)
    }

    /// MTU.
    pub fn mtu(name: &str) -> io::Result<u32> {
        let mut r = ifreq(name)?;
        ioctl(libc::SIOCGIFMTU, &mut r, "SIOCGIFMTU")?;
        // SAFETY: the kernel filled the mtu member of the union.
        Ok(unsafe { r.ifr_ifru.ifru_mtu }.max(0) as u32)
    }

    /// Sets the interface administratively up.
    pub fn set_up(name: &str) -> io::Result<()> {
        let mut r = ifreq(name)?;
        ioctl(libc::SIOCGIFFLAGS, &mut r, "SIOCGIFFLAGS")?;
        // SAFETY: the kernel filled the flags member of the union.
        let flags = unsafe { r.ifr_ifru.ifru_flags };
        if flags & libc::IFF_UP as libc::c_short != 0 {
            return Ok(());
        }
        r.ifr_ifru.ifru_flags = flags | libc::IFF_UP as libc::c_short;
        ioctl(libc::SIOCSIFFLAGS, &mut r, "SIOCSIFFLAGS (set up)")
    }

    /// Number of rx queues the device has: `ETHTOOL_GCHANNELS` (the larger of the rx-only
    /// and combined channel counts; veth reports its real queue counts there), else the
    /// `queues/rx-*` entries in sysfs, else 1.
    pub fn rx_queues(name: &str) -> u32 {
        const ETHTOOL_GCHANNELS: u32 = 0x3c;
        // struct ethtool_channels: cmd, max_rx, max_tx, max_other, max_combined, rx_count,
        // tx_count, other_count, combined_count.
        let mut ch = [0u32; 9];
        ch[0] = ETHTOOL_GCHANNELS;
        if let Ok(mut r) = ifreq(name) {
            r.ifr_ifru.ifru_data = ch.as_mut_ptr() as *mut libc::c_char;
            if ioctl(libc::SIOCETHTOOL, &mut r, "ETHTOOL_GCHANNELS").is_ok() {
                let n = ch[5].max(ch[8]);
                if n > 0 {
                    return n;
                }
            }
        }
        let n = std::fs::read_dir(format!("/sys/class/net/{name}/queues"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                    .count()
            })
            .unwrap_or(0);
        (n as u32).max(1)
    }
}

/// Copies a buffer chain's bytes into `dst` (a tx frame); returns the bytes copied (at most
/// `dst.len()`).
pub fn copy_chain_into(pool: &BufferPool, head: BufIdx, dst: &mut [u8]) -> usize {
    let mut w = 0;
    let mut cur = Some(head);
    while let Some(b) = cur {
        // SAFETY: the tx node owns the frame (and so the chains) it was given; views are
        // used one at a time.
        let v = unsafe { pool.buffer(b) };
        let d = v.data();
        let n = d.len().min(dst.len() - w);
        dst[w..w + n].copy_from_slice(&d[..n]);
        w += n;
        cur = v.hdr.next();
        if w == dst.len() {
            break;
        }
    }
    w
}

/// Lets a transmitting socket (AF_PACKET tx ring, AF_XDP copy mode) have `bytes` of skbs in
/// flight. Every frame sent becomes an skb charged to the socket until the receiver frees it
/// (on veth: when the peer's backlog, maybe on another CPU, got to it); with the default
/// `wmem_default` (~208 KiB, ~270 small skbs) the kernel stops sending long before the
/// ring is empty, so frames pile up and the ring reports full. Root may exceed `wmem_max`
/// (`SO_SNDBUFFORCE`); otherwise `SO_SNDBUF` is clamped by the kernel. Best effort.
pub fn set_sndbuf(fd: RawFd, bytes: usize) {
    set_sockbuf(fd, bytes, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF);
}

/// Sets a socket's receive buffer (the bytes of skbs queued to it) to `bytes`, as
/// [`set_sndbuf`]. Best effort.
pub fn set_rcvbuf(fd: RawFd, bytes: usize) {
    set_sockbuf(fd, bytes, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF);
}

fn set_sockbuf(fd: RawFd, bytes: usize, force: libc::c_int, plain: libc::c_int) {
    let v = i32::try_from(bytes / 2).unwrap_or(i32::MAX); // the kernel doubles it
    if setsockopt(fd, libc::SOL_SOCKET, force, &v, "SO_*BUFFORCE").is_err() {
        let _ = setsockopt(fd, libc::SOL_SOCKET, plain, &v, "SO_*BUF");
    }
}

/// `sendto(fd, NULL, 0, MSG_DONTWAIT)`: the "send what is queued in the tx ring" kick of
/// PACKET_MMAP and AF_XDP sockets. Returns the raw error for the caller to classify.
pub fn kick_tx(fd: RawFd) -> io::Result<()> {
    // SAFETY: sendto with a NULL buffer of length 0 reads and writes no memory.
    let r = unsafe {
        libc::sendto(
            fd,
            std::ptr::null(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null(),
            0,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// How often a tx queue whose kick the kernel refused is kicked again (by the input node of
/// a thread that transmits on it), while frames wait in its ring.
pub const KICK_RETRY_SECS: f64 = 0.001;

/// How long the frames left in a tx ring may go without any of them leaving, kick after
/// kick, before they are given up (dropped and counted as `tx-error`).
pub const KICK_GIVE_UP_SECS: f64 = 1.0;

/// Whether a tx queue has frames that a refused kick left behind, and since when.
///
/// The kernel sends what a tx ring holds only when kicked (`sendto`), and it may stop half
/// way: AF_PACKET answers ENOBUFS when the device or qdisc drops a frame (which then stays
/// requested) or stops when the socket's send buffer is full; AF_XDP answers EAGAIN/EBUSY
/// or sends nothing more when its send buffer is full. Whatever the answer, the tx node
/// looks at the ring after its kick and marks the queue pending if frames are left; a thread
/// that transmits on the queue then kicks it again from its input node every
/// [`KICK_RETRY_SECS`] ([`KickSet`]), so those frames leave without new traffic. When no
/// frame has left for [`KICK_GIVE_UP_SECS`] the rest is given up.
///
/// Written under the queue's lock; read without it (one relaxed load) to decide whether a
/// retry is due.
#[derive(Default, Debug)]
pub struct KickState {
    /// TSC when frames were first left behind, or when some last left while pending; 0:
    /// nothing pending.
    since: AtomicU64,
    /// TSC of the last retry (or of the refusal that made the queue pending).
    last: AtomicU64,
    /// Kicks retried.
    pub retries: AtomicU64,
    /// Frames given up after their kicks kept failing.
    pub given_up: AtomicU64,
}

/// A tx ring as [`KickState::retry`] needs it, through the queue's lock.
pub trait KickRing {
    /// Frames published to the kernel and not taken by it yet.
    fn left(&mut self) -> u32;
    /// Kicks the kernel (what `sendto` answers does not matter: [`KickRing::left`] tells).
    fn kick(&mut self);
    /// Stops waiting for the `n` frames left: takes them back where the ring allows it.
    /// Returns their bytes.
    fn give_up(&mut self, n: u32) -> u64;
}

impl KickState {
    /// Whether frames wait for a retry.
    #[inline(always)]
    pub fn pending(&self) -> bool {
        self.since.load(Ordering::Relaxed) != 0
    }

    /// Records, after a kick at `now`, whether it left frames in the ring.
    #[inline]
    pub fn settle(&self, now: u64, left: bool) {
        if left {
            if !self.pending() {
                self.since.store(now.max(1), Ordering::Relaxed);
                self.last.store(now, Ordering::Relaxed);
            }
        } else if self.pending() {
            self.since.store(0, Ordering::Relaxed);
        }
    }

    /// Whether a retry is due at `now` (`retry`: ticks between retries). Times come from
    /// several threads' loop-start TSC reads, so one may be behind a stored one: differences
    /// saturate at zero.
    #[inline(always)]
    pub fn due(&self, now: u64, retry: u64) -> bool {
        self.pending() && now.saturating_sub(self.last.load(Ordering::Relaxed)) >= retry
    }

    /// Kicks `ring` (whose lock the caller holds) again. Frames that left restart the
    /// give-up clock; when none has left for `give_up` ticks the rest is given up. Returns
    /// the (packets, bytes) given up.
    pub fn retry(&self, ring: &mut impl KickRing, now: u64, give_up: u64) -> (u64, u64) {
        if !self.pending() {
            return (0, 0);
        }
        let before = ring.left();
        if before > 0 {
            ring.kick();
            self.retries.fetch_add(1, Ordering::Relaxed);
        }
        let after = ring.left();
        self.last.store(now, Ordering::Relaxed);
        if after == 0 {
            self.since.store(0, Ordering::Relaxed);
            return (0, 0);
        }
        if after < before {
            self.since.store(now.max(1), Ordering::Relaxed);
            return (0, 0);
        }
        if now.saturating_sub(self.since.load(Ordering::Relaxed)) < give_up {
            return (0, 0);
        }
        let bytes = ring.give_up(after);
        self.given_up.fetch_add(after as u64, Ordering::Relaxed);
        self.since.store(0, Ordering::Relaxed);
        (after as u64, bytes)
    }
}

/// A tx queue an input node may have to kick again.
pub trait TxKick: Send + 'static {
    /// The queue's kick state.
    fn kick_state(&self) -> &KickState;
    /// Takes the queue's lock and calls [`KickState::retry`].
    fn retry(&self, now: u64, give_up: u64) -> (u64, u64);
}

impl<T: TxKick + Sync> TxKick for Arc<T> {
    fn kick_state(&self) -> &KickState {
        (**self).kick_state()
    }
    fn retry(&self, now: u64, give_up: u64) -> (u64, u64) {
        (**self).retry(now, give_up)
    }
}

/// One tx queue in a [`KickSet`].
pub struct KickEntry<K> {
    /// The interface.
    pub sw_if: u32,
    /// The queue.
    pub q: K,
    /// Interface counters (frames given up move from tx to `tx-error`).
    pub counters: Arc<IfCounters>,
    /// Graph-wide error code of the tx node's `kick_retries` counter.
    pub err_retry: u16,
    /// Graph-wide error code of the tx node's `kick_dropped` counter.
    pub err_dropped: u16,
}

/// The tx node's `kick_retries` counter (the kicks a [`KickSet`] retries).
pub const KICK_RETRIES: CounterDesc = CounterDesc::info(
    "kick_retries",
    "tx kicks retried (frames left by the kernel)",
);
/// The tx node's `kick_dropped` counter (frames a [`KickSet`] gave up).
pub const KICK_DROPPED: CounterDesc = CounterDesc::error(
    "kick_dropped",
    "tx frames given up (kernel refused their kicks for 1 s)",
);

/// The tx queues one thread transmits on, as its input node sees them: every poll retries
/// the kicks that are due (a relaxed load per queue when none is), and while one is pending
/// the node asks to be polled every [`KICK_RETRY_SECS`], also in interrupt mode, so a sleeping
/// thread wakes up for it.
pub struct KickSet<K> {
    list: Vec<KickEntry<K>>,
    retry: u64,
    give_up: u64,
}

impl<K> Default for KickSet<K> {
    fn default() -> Self {
        KickSet {
            list: Vec::new(),
            retry: 0,
            give_up: 0,
        }
    }
}

impl<K: TxKick> KickSet<K> {
    /// Sets (or with `None` removes) the queue of interface `sw_if`; `hz`: TSC frequency.
    pub fn set(&mut self, sw_if: u32, e: Option<KickEntry<K>>, hz: f64) {
        self.retry = (hz * KICK_RETRY_SECS) as u64;
        self.give_up = (hz * KICK_GIVE_UP_SECS) as u64;
        self.list.retain(|x| x.sw_if != sw_if);
        self.list.extend(e);
    }

    /// Whether a queue waits for a retry.
    #[inline]
    pub fn pending(&self) -> bool {
        self.list.iter().any(|e| e.q.kick_state().pending())
    }

    /// Whether a retry is due at `now`.
    #[inline]
    pub fn due(&self, now: u64) -> bool {
        self.list
            .iter()
            .any(|e| e.q.kick_state().due(now, self.retry))
    }

    /// `NodeFn::poll_interval` contribution: a retry interval while a queue is pending.
    #[inline]
    pub fn poll_interval(&self) -> Option<f64> {
        self.pending().then_some(KICK_RETRY_SECS)
    }

    /// Retries the kicks that are due; counts retries and frames given up on the tx node
    /// and the interface.
    #[inline]
    pub fn run(&self, cx: &mut Cx) {
        let now = cx.now_tsc();
        for e in &self.list {
            if !e.q.kick_state().due(now, self.retry) {
                continue;
            }
            // Count the kicks made, not the calls: a ring another thread drained meanwhile is
            // not kicked. (Threads sharing a queue may see each other's kick in the delta; the
            // per-queue `retries` in `show af_packet`/`show af_xdp` is exact.)
            let st = e.q.kick_state();
            let before = st.retries.load(Ordering::Relaxed);
            let (n, bytes) = e.q.retry(now, self.give_up);
            let kicked = st.retries.load(Ordering::Relaxed).wrapping_sub(before);
            if kicked > 0 {
                cx.count_error_code(e.err_retry, kicked);
            }
            if n > 0 {
                e.counters.tx_failed(cx.thread(), n, bytes);
                cx.count_error_code(e.err_dropped, n);
            }
        }
    }
}

/// The shorter of two optional poll intervals (`NodeFn::poll_interval` of an input node
/// that has rx queues and tx kicks to retry).
pub fn min_interval(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Checks a Linux interface or namespace name given on the CLI (`what` names it in the
/// error).
pub fn linux_name(what: &str, w: &str) -> Result<String, sluice_cli::CliError> {
    if w.is_empty()
        || w.len() >= libc::IFNAMSIZ
        || w.contains(['/', ':'])
        || w.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(sluice_cli::CliError::new(format!(
            "bad {what} `{}'",
            sluice_cli::error::clip(w)
        )));
    }
    Ok(w.to_string())
}

/// A random locally administered unicast MAC `02:fe:xx:xx:xx:xx` derived from `seed`.
pub fn random_mac(seed: u64) -> [u8; 6] {
    // splitmix64 of the seed: distinct MACs for interfaces created in one process.
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    let b = z.to_be_bytes();
    [0x02, 0xfe, b[0], b[1], b[2], b[3]]
}

/// A seed for [`random_mac`] and group ids: the TSC, the pid and the ifindex.
pub fn seed(ifindex: u32) -> u64 {
    sluice_infra::clock::rdtsc() ^ ((std::process::id() as u64) << 32) ^ ifindex as u64
}

/// Round-robin placement of new rx queues on threads: the workers when there are some, else
/// the main thread. One per driver (a `Vlib` extension field); `set interface rx-placement`
/// moves queues afterwards (`crate::devices::fdq`).
#[derive(Default)]
pub struct RxPlacement {
    next: usize,
}

impl RxPlacement {
    /// The thread that polls the next rx queue, given the number of worker threads.
    pub fn next_thread(&mut self, n_workers: usize) -> usize {
        let w = self.next;
        self.next += 1;
        match n_workers {
            0 => 0,
            n => 1 + w % n,
        }
    }
}

/// A tx node's per-interface entries, indexed by `sw_if_index`.
pub struct SwTable<T> {
    slots: Vec<Option<T>>,
}

impl<T> Default for SwTable<T> {
    fn default() -> Self {
        SwTable { slots: Vec::new() }
    }
}

impl<T> SwTable<T> {
    /// Sets (or with `None` clears) the entry of interface `sw`.
    pub fn set(&mut self, sw: u32, v: Option<T>) {
        let i = sw as usize;
        if self.slots.len() <= i {
            self.slots.resize_with(i + 1, || None);
        }
        self.slots[i] = v;
    }

    /// The entry of interface `sw`.
    #[inline]
    pub fn get(&self, sw: u32) -> Option<&T> {
        self.slots.get(sw as usize).and_then(Option::as_ref)
    }

    /// The entry of interface `sw`, to update a node's cache in it.
    #[inline]
    pub fn get_mut(&mut self, sw: u32) -> Option<&mut T> {
        self.slots.get_mut(sw as usize).and_then(Option::as_mut)
    }

    /// Hints the CPU to fetch the entry of interface `sw`, every cache line of it (nothing
    /// for an index beyond the table): for a node that prefetches the entries of the
    /// packets ahead (the tunnel encap node).
    #[inline(always)]
    pub fn prefetch(&self, sw: u32) {
        self.prefetch_first(sw, std::mem::size_of::<Option<T>>());
    }

    /// [`Self::prefetch`] of the cache lines of the entry's first `bytes` bytes only (the
    /// encap node: the lines its tunnels' rewrites reach).
    #[inline(always)]
    pub fn prefetch_first(&self, sw: u32, bytes: usize) {
        let size = std::mem::size_of::<Option<T>>().min(bytes);
        if (sw as usize) < self.slots.len() && size > 0 {
            let p = self.slots.as_ptr().wrapping_add(sw as usize).cast::<u8>();
            let mut o = 0;
            while o < size {
                sluice_infra::prefetch(p.wrapping_add(o));
                o += 64;
            }
            // An entry not aligned to a line may straddle one more than the loop's steps
            // reach; a line-aligned one (the encap's) is covered (a constant test).
            if std::mem::align_of::<Option<T>>() % 64 != 0 {
                sluice_infra::prefetch(p.wrapping_add(size - 1));
            }
        }
    }
}

/// A spin lock for a tx queue that several threads may share: taken once per batch, held
/// for the time it takes to queue that batch.
pub struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through a guard, and only one guard exists at a time.
unsafe impl<T: Send> Sync for SpinLock<T> {}
// SAFETY: moving the lock moves the value; no guard can exist then (guards borrow it).
unsafe impl<T: Send> Send for SpinLock<T> {}

/// Exclusive access to the value of a [`SpinLock`].
pub struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> SpinLock<T> {
    /// A new, unlocked lock.
    pub fn new(value: T) -> Self {
        SpinLock {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock, spinning while another thread holds it.
    pub fn lock(&self) -> SpinGuard<'_, T> {
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
        SpinGuard { lock: self }
    }
}

impl<T> std::ops::Deref for SpinGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock: no other reference to the value exists.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> std::ops::DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as above, and `&mut self` makes this the only access through the guard.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_err_keeps_the_errno_behind_its_message() {
        // SAFETY: close(-1) touches no memory; it fails with EBADF.
        assert_eq!(unsafe { libc::close(-1) }, -1);
        let e = os_err("closing nothing");
        assert!(e.to_string().starts_with("closing nothing: "), "{e}");
        assert_eq!(e.raw_os_error(), None);
        assert_eq!(errno(&e), Some(libc::EBADF));
        assert_eq!(
            errno(&io::Error::from_raw_os_error(libc::EBUSY)),
            Some(libc::EBUSY)
        );
        assert_eq!(errno(&io::Error::other("no errno")), None);
    }

    #[test]
    fn random_macs_are_local_unicast_and_distinct() {
        let a = random_mac(1);
        let b = random_mac(2);
        assert_eq!(&a[..2], &[0x02, 0xfe]);
        assert_ne!(a, b);
    }

    #[test]
    fn interface_names_are_checked() {
        assert_eq!(linux_name("name", "veth0").unwrap(), "veth0");
        for bad in ["", "averyveryverylongname", "a/b", "a:b", "a b"] {
            assert!(linux_name("name", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sw_table_grows_and_clears() {
        let mut t = SwTable::default();
        t.set(5, Some(7u8));
        assert_eq!(t.get(5), Some(&7));
        assert_eq!(t.get(4), None);
        assert_eq!(t.get(99), None);
        // A hint only: in and beyond the table alike.
        t.prefetch(5);
        t.prefetch(99);
        t.set(5, None);
        assert_eq!(t.get(5), None);
    }

    /// A ring the kernel drains by `per_kick` frames per kick.
    struct FakeRing {
        left: u32,
        per_kick: u32,
        kicks: u32,
        given_up: u32,
    }

    impl KickRing for FakeRing {
        fn left(&mut self) -> u32 {
            self.left
        }
        fn kick(&mut self) {
            self.kicks += 1;
            self.left -= self.left.min(self.per_kick);
        }
        fn give_up(&mut self, n: u32) -> u64 {
            self.given_up += n;
            self.left -= n;
            n as u64 * 100
        }
    }

    #[test]
    fn refused_kicks_are_retried_then_given_up() {
        let (retry, bound) = (10u64, 1000u64);
        let k = KickState::default();
        let mut r = FakeRing {
            left: 5,
            per_kick: 2,
            kicks: 0,
            given_up: 0,
        };
        // A kick that took everything leaves nothing pending.
        k.settle(100, false);
        assert!(!k.pending() && !k.due(10_000, retry));
        // Frames left at t=100: due one retry interval later, not before.
        k.settle(100, true);
        assert!(k.pending());
        assert!(!k.due(105, retry) && k.due(110, retry));
        // Each retry that moves frames keeps the queue pending and restarts the clock.
        assert_eq!(k.retry(&mut r, 110, bound), (0, 0));
        assert_eq!((r.left, k.pending()), (3, true));
        assert_eq!(k.retry(&mut r, 2000, bound), (0, 0));
        assert_eq!(r.left, 1);
        // Stuck: retried, and given up once nothing moved for the bound.
        r.per_kick = 0;
        assert_eq!(k.retry(&mut r, 2500, bound), (0, 0));
        assert!(k.pending());
        assert_eq!(k.retry(&mut r, 3000, bound), (1, 100));
        assert_eq!((r.left, r.given_up, k.pending()), (0, 1, false));
        assert_eq!(k.retries.load(Ordering::Relaxed), 4);
        assert_eq!(k.given_up.load(Ordering::Relaxed), 1);
        // Not pending: a retry does nothing.
        assert_eq!(k.retry(&mut r, 4000, bound), (0, 0));
        assert_eq!(r.kicks, 4);
        // The last frames leaving clears the state.
        r.left = 2;
        r.per_kick = 2;
        k.settle(5000, true);
        assert_eq!(k.retry(&mut r, 5010, bound), (0, 0));
        assert!(!k.pending());
        // A later kick of the tx path that leaves frames starts a new give-up clock.
        k.settle(9000, true);
        r.left = 1;
        r.per_kick = 0;
        // Another thread's loop started before the refusal: its older time is not a
        // give-up (nor a due retry).
        assert!(!k.due(8000, retry));
        assert_eq!(k.retry(&mut r, 8000, bound), (0, 0));
        assert!(k.pending());
        assert_eq!(k.retry(&mut r, 9500, bound), (0, 0));
        assert_eq!(k.retry(&mut r, 10_000, bound), (1, 100));
    }

    #[test]
    fn poll_intervals_take_the_shorter() {
        assert_eq!(min_interval(Some(0.01), Some(0.001)), Some(0.001));
        assert_eq!(min_interval(None, Some(0.001)), Some(0.001));
        assert_eq!(min_interval(Some(0.01), None), Some(0.01));
        assert_eq!(min_interval(None, None), None);
    }

    #[test]
    fn spin_lock_excludes() {
        let l = std::sync::Arc::new(SpinLock::new(0u64));
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let l = l.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        *l.lock() += 1;
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(*l.lock(), 20_000);
    }
}
