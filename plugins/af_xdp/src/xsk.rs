//! AF_XDP sockets (XSK): the UMEM, its fill and completion rings, and the rx and tx rings,
//! all mapped from the kernel. The only `unsafe` code of the driver besides the loader.
//!
//! Two kinds of UMEM ([`UmemSpec`]). Per-socket ("own", copy into graph buffers): one socket
//! per queue, each with its own UMEM of `rx_size + tx_size` frames of [`FRAME_SIZE`] bytes: frames `0 .. rx_size` circulate fill ring -> kernel -> rx ring ->
//! (copied into a Sluice buffer) -> fill ring; frames `rx_size ..` circulate tx free list ->
//! tx ring -> kernel -> completion ring -> free list. The rx half belongs to the thread that
//! polls the queue ([`RxRings`]), the tx half to whichever thread holds the queue's tx lock
//! ([`TxRings`]), so the two never touch the same frame or ring. Buffer arena (zero-copy
//! into graph buffers, [`super::arena`]): the pool's data array is the UMEM, registered by the
//! first socket and shared by the others (`XDP_SHARED_UMEM`, each with its own fill and
//! completion rings); the fill ring carries fresh buffers, the tx ring the graph's buffers,
//! and each ring's [`RingArena`] records which buffers the kernel holds.
//!
//! Rings are single-producer single-consumer arrays of a power-of-two size with free-running
//! u32 producer and consumer indices ([`Ring`]); the index arithmetic is plain wrapping
//! arithmetic, unit-tested against a simulated kernel side.
//!
//! Constants and layouts are those of `<linux/if_xdp.h>` (stable kernel ABI).

use super::arena::{ArenaGeo, Parking, RingArena, UNALIGNED_CHUNK_FLAG};
use sluice_buffer::{BufIdx, BufferPool};
use sluice_graph::stats::Counter;
use sluice_vnet::devices::linux::{
    getsockopt, os_err, setsockopt, KickRing, KickState, Mmap, SpinGuard, SpinLock, TxKick,
};
use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

const AF_XDP: libc::c_int = 44;
const SOL_XDP: libc::c_int = 283;
const XDP_MMAP_OFFSETS: libc::c_int = 1;
const XDP_RX_RING: libc::c_int = 2;
const XDP_TX_RING: libc::c_int = 3;
const XDP_UMEM_REG: libc::c_int = 4;
const XDP_UMEM_FILL_RING: libc::c_int = 5;
const XDP_UMEM_COMPLETION_RING: libc::c_int = 6;
const XDP_STATISTICS: libc::c_int = 7;
const XDP_OPTIONS: libc::c_int = 8;
/// Linux >= 6.17: how many packets one `sendto` may send in copy mode (default 32).
const XDP_MAX_TX_SKB_BUDGET: libc::c_int = 9;
const XDP_OPTIONS_ZEROCOPY: u32 = 1;
const XDP_SHARED_UMEM: u16 = 1;
const XDP_COPY: u16 = 1 << 1;
const XDP_ZEROCOPY: u16 = 1 << 2;
const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;
const XDP_RING_NEED_WAKEUP: u32 = 1;
const XDP_PGOFF_RX_RING: u64 = 0;
const XDP_PGOFF_TX_RING: u64 = 0x8000_0000;
const XDP_UMEM_PGOFF_FILL_RING: u64 = 0x1_0000_0000;
const XDP_UMEM_PGOFF_COMPLETION_RING: u64 = 0x1_8000_0000;

/// Bytes per UMEM frame (chunk). In copy mode the kernel puts a received packet 256 bytes
/// (`XDP_PACKET_HEADROOM`) into its frame, so the largest frame received is 1792 bytes.
pub const FRAME_SIZE: usize = 2048;

/// Most ring entries per ring.
pub const MAX_RING: u32 = 4096;
/// Fewest ring entries per ring.
pub const MIN_RING: u32 = 64;

/// `struct xdp_desc`: a packet in the rx or tx ring.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct XdpDesc {
    /// Offset of the packet in the UMEM.
    pub addr: u64,
    /// Length.
    pub len: u32,
    /// Options (0).
    pub options: u32,
}

/// `struct xdp_ring_offset`.
#[derive(Copy, Clone, Debug, Default)]
#[repr(C)]
struct RingOffset {
    producer: u64,
    consumer: u64,
    desc: u64,
    flags: u64,
}

/// `struct xdp_mmap_offsets`.
#[derive(Copy, Clone, Debug, Default)]
#[repr(C)]
struct MmapOffsets {
    rx: RingOffset,
    tx: RingOffset,
    fr: RingOffset,
    cr: RingOffset,
}

/// `struct xdp_umem_reg` (with the `flags` and `tx_metadata_len` words of newer kernels).
#[repr(C)]
struct UmemReg {
    addr: u64,
    len: u64,
    chunk_size: u32,
    headroom: u32,
    flags: u32,
    tx_metadata_len: u32,
}

/// `struct sockaddr_xdp`.
#[repr(C)]
struct SockaddrXdp {
    family: u16,
    flags: u16,
    ifindex: u32,
    queue_id: u32,
    shared_umem_fd: u32,
}

/// Entries a consumer can read: `prod - cons` on free-running u32 indices.
#[inline]
pub fn ring_entries(prod: u32, cons: u32) -> u32 {
    prod.wrapping_sub(cons)
}

/// Entries a producer can write into a ring of `size`.
#[inline]
pub fn ring_free(size: u32, prod: u32, cons: u32) -> u32 {
    size.saturating_sub(ring_entries(prod, cons))
}

/// One single-producer single-consumer ring shared with the kernel. Sluice is the producer
/// of the fill and tx rings and the consumer of the rx and completion rings. The indices
/// run freely (wrapping u32); slot = index & (size - 1). Cached copies of the other side's
/// index avoid an atomic load per packet.
pub struct Ring<T> {
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    descs: *mut T,
    size: u32,
    cached_prod: u32,
    cached_cons: u32,
    _t: PhantomData<T>,
}

// SAFETY: the pointers refer to a mapping kept alive by the owner of the ring (`Xsk`); a
// ring is used by one thread at a time (the rx poller, or the tx lock holder).
unsafe impl<T: Send> Send for Ring<T> {}

impl<T: Copy> Ring<T> {
    /// A ring over memory at `base` laid out by `off` with `size` entries (a power of two).
    ///
    /// # Safety
    /// `base + off.*` must point to the ring's producer, consumer and flags words and to
    /// `size` descriptors, valid (and 4-/8-aligned) for as long as the ring is used.
    unsafe fn from_raw(base: *mut u8, off: &RingOffset, size: u32) -> Ring<T> {
        // SAFETY: per the contract, these offsets lie inside the mapping.
        let (producer, consumer, flags, descs) = unsafe {
            (
                base.add(off.producer as usize) as *const AtomicU32,
                base.add(off.consumer as usize) as *const AtomicU32,
                base.add(off.flags as usize) as *const AtomicU32,
                base.add(off.desc as usize) as *mut T,
            )
        };
        // SAFETY: valid index words per the contract.
        let (p, c) = unsafe {
            (
                (*producer).load(Ordering::Acquire),
                (*consumer).load(Ordering::Acquire),
            )
        };
        Ring {
            producer,
            consumer,
            flags,
            descs,
            size,
            cached_prod: p,
            cached_cons: c,
            _t: PhantomData,
        }
    }

    fn prod(&self) -> &AtomicU32 {
        // SAFETY: valid for the ring's life (see `from_raw`).
        unsafe { &*self.producer }
    }

    fn cons(&self) -> &AtomicU32 {
        // SAFETY: as above.
        unsafe { &*self.consumer }
    }

    /// Number of entries.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Consumer: how many entries (at most `max`) can be read now.
    #[inline]
    pub fn peek(&mut self, max: u32) -> u32 {
        let mut n = ring_entries(self.cached_prod, self.cached_cons);
        if n < max {
            self.cached_prod = self.prod().load(Ordering::Acquire);
            n = ring_entries(self.cached_prod, self.cached_cons);
        }
        n.min(max).min(self.size)
    }

    /// Consumer: whether the kernel has produced entries not yet released.
    #[inline]
    pub fn has_entries(&self) -> bool {
        self.prod().load(Ordering::Acquire) != self.cached_cons
    }

    /// Consumer: entry `i` (0-based from the first unreleased one; `i` < what `peek` gave).
    #[inline]
    pub fn read(&self, i: u32) -> T {
        let slot = (self.cached_cons.wrapping_add(i) & (self.size - 1)) as usize;
        // SAFETY: slot < size; the producer published the entry (acquire in `peek`) and will
        // not rewrite it before we release it.
        unsafe { self.descs.add(slot).read_volatile() }
    }

    /// Consumer: gives `n` read entries back to the producer.
    #[inline]
    pub fn release(&mut self, n: u32) {
        self.cached_cons = self.cached_cons.wrapping_add(n);
        self.cons().store(self.cached_cons, Ordering::Release);
    }

    /// Producer: how many entries (at most `max`) can be written now.
    #[inline]
    pub fn reserve(&mut self, max: u32) -> u32 {
        let mut n = ring_free(self.size, self.cached_prod, self.cached_cons);
        if n < max {
            self.cached_cons = self.cons().load(Ordering::Acquire);
            n = ring_free(self.size, self.cached_prod, self.cached_cons);
        }
        n.min(max)
    }

    /// Producer: writes entry `i` (0-based from the next unsubmitted one; `i` < what
    /// `reserve` gave).
    #[inline]
    pub fn write(&mut self, i: u32, v: T) {
        let slot = (self.cached_prod.wrapping_add(i) & (self.size - 1)) as usize;
        // SAFETY: slot < size; the consumer has released this slot (checked by `reserve`).
        unsafe { self.descs.add(slot).write_volatile(v) }
    }

    /// Producer: publishes `n` written entries.
    #[inline]
    pub fn submit(&mut self, n: u32) {
        self.cached_prod = self.cached_prod.wrapping_add(n);
        self.prod().store(self.cached_prod, Ordering::Release);
    }

    /// Producer: entries submitted that the consumer has not taken yet.
    pub fn outstanding(&self) -> u32 {
        ring_entries(self.cached_prod, self.cons().load(Ordering::Acquire))
    }

    /// Producer: index of the next entry to submit.
    pub fn prod_index(&self) -> u32 {
        self.cached_prod
    }

    /// Producer: entries submitted after index `mark` (all of them if the consumer is past
    /// `mark`) that the consumer has not taken yet.
    pub fn outstanding_after(&self, mark: u32) -> u32 {
        self.outstanding().min(ring_entries(self.cached_prod, mark))
    }

    /// Producer: the last `n` entries submitted (only read; the consumer may be taking
    /// them).
    pub fn last_submitted(&self, n: u32) -> impl Iterator<Item = T> + '_ {
        let n = n.min(self.size);
        (0..n).map(move |i| {
            let slot = (self.cached_prod.wrapping_sub(n - i) & (self.size - 1)) as usize;
            // SAFETY: slot < size; we wrote the entry before submitting it and the consumer
            // only reads it.
            unsafe { self.descs.add(slot).read_volatile() }
        })
    }

    /// Whether the kernel asks to be woken up (`XDP_RING_NEED_WAKEUP`).
    #[inline]
    pub fn needs_wakeup(&self) -> bool {
        // SAFETY: valid flags word (see `from_raw`).
        unsafe { &*self.flags }.load(Ordering::Relaxed) & XDP_RING_NEED_WAKEUP != 0
    }
}

/// Copy or zero-copy, as asked on the CLI.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ZcMode {
    /// Try zero-copy, fall back to copy (VPP's default).
    Auto,
    /// Zero-copy or fail.
    ZeroCopy,
    /// Copy mode only.
    Copy,
}

/// Ring sizes of one socket.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct XskGeometry {
    /// rx and fill ring entries (= rx frames).
    pub rx_size: u32,
    /// tx and completion ring entries (= tx frames).
    pub tx_size: u32,
}

impl XskGeometry {
    /// UMEM bytes of one socket (pinned: counts against RLIMIT_MEMLOCK).
    pub fn umem_bytes(&self) -> usize {
        (self.rx_size + self.tx_size) as usize * FRAME_SIZE
    }
}

/// Which UMEM a socket uses.
#[derive(Clone)]
pub enum UmemSpec {
    /// Its own UMEM of `rx_size + tx_size` frames (packets copied to and from graph buffers).
    Own,
    /// The buffer pool's data array: registered by this socket (`share` None) or shared
    /// with the bound socket `share` that registered it or shares it.
    Arena {
        /// The pool.
        pool: Arc<BufferPool>,
        /// A bound socket already using the arena as its UMEM.
        share: Option<RawFd>,
        /// Ask for driver zero-copy (only with a registering socket; sharers inherit).
        zero_copy: bool,
    },
}

/// The rx half of a socket: owned by the thread that polls it.
pub struct RxRings {
    /// rx ring (consumer).
    pub rx: Ring<XdpDesc>,
    /// fill ring (producer).
    pub fill: Ring<u64>,
    /// Own UMEM: frames received and copied, waiting for room in the fill ring.
    pub recycle: Vec<u64>,
    /// Arena UMEM: the buffers in the fill ring or the kernel.
    pub arena: Option<RingArena>,
}

impl RxRings {
    /// Arena UMEM: the fill ring and the kernel hold fewer than half the rx ring's worth of
    /// buffers (at the start, or after the pool ran dry). Such a queue receives little or
    /// nothing, so nothing else would make its poller run and refill it: the input node
    /// stays active (polls) until it is stocked.
    #[inline]
    pub fn needs_refill(&self) -> bool {
        self.arena
            .as_ref()
            .is_some_and(|a| a.held.count() < self.rx.size() / 2)
    }
}

/// The tx half of a socket: behind the queue's tx lock.
pub struct TxRings {
    /// tx ring (producer).
    pub tx: Ring<XdpDesc>,
    /// completion ring (consumer).
    pub comp: Ring<u64>,
    /// Own UMEM: tx frames owned by Sluice.
    pub free: Vec<u64>,
    /// Arena UMEM: the buffers in the tx ring or the kernel, and those completed.
    pub arena: Option<RingArena>,
    /// Entries written since the last submit.
    pending: u32,
    /// Producer index up to which descriptors left in the ring were given up (they no longer
    /// keep the queue pending; the kernel may still send them).
    given_up_to: u32,
}

impl TxRings {
    /// Descriptors the kernel has not taken yet and that were not given up.
    fn left(&self) -> u32 {
        self.tx.outstanding_after(self.given_up_to)
    }
}

/// Why a packet could not be queued for transmission.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TxFull {
    /// Every tx frame is in the kernel's hands.
    RingFull,
    /// Arena UMEM: the buffer is already in the kernel's hands (handed to the tx node
    /// twice): it must not be freed.
    InFlight,
}

/// Sluice's own counters of one socket, for `show af_xdp`: where the time between the
/// kernel and the graph goes (poll batch sizes, wakeups, kicks, completion lag). Each field
/// has one writer (the rx poller or the tx lock holder) and is updated once per poll or per
/// tx frame, never per packet.
#[derive(Default)]
pub struct XskCounters {
    /// rx polls (calls of the input node on this queue).
    pub polls: Counter,
    /// rx polls that found the rx ring empty.
    pub empty_polls: Counter,
    /// Packets taken from the rx ring.
    pub rx_packets: Counter,
    /// Non-empty polls by batch size: 1-15, 16-63, 64-255, 256 (the most a poll takes).
    pub rx_batches: [Counter; 4],
    /// Frames that could not go back to the fill ring at once (refilled at a later poll).
    pub fill_short: Counter,
    /// `recvfrom` calls: fill-ring wakeups (`XDP_RING_NEED_WAKEUP`) and busy polls.
    pub rx_syscalls: Counter,
    /// tx `sendto` kicks.
    pub tx_kicks: Counter,
    /// tx kicks answered EAGAIN/EBUSY (repeated, bounded).
    pub tx_kick_busy: Counter,
    /// Completions reaped.
    pub tx_completed: Counter,
    /// Tx frames in the kernel's hands (tx ring + completion ring) when last submitted.
    pub tx_in_flight: AtomicU64,
    /// Arena UMEM: buffers in the fill ring or the kernel after the last poll.
    pub rx_held: AtomicU64,
    /// Arena UMEM: completions naming no buffer in flight (ignored).
    pub bad_completions: Counter,
}

impl XskCounters {
    /// Records one rx poll that took `n` packets.
    #[inline]
    pub fn rx_poll(&self, n: usize) {
        self.polls.add(1);
        if n == 0 {
            self.empty_polls.add(1);
            return;
        }
        self.rx_packets.add(n as u64);
        let b = match n {
            1..=15 => 0,
            16..=63 => 1,
            64..=255 => 2,
            _ => 3,
        };
        self.rx_batches[b].add(1);
    }

    /// The `show af_xdp` lines of these counters (`arena`: with the arena UMEM's).
    pub fn format(&self, arena: bool) -> String {
        let g = |c: &Counter| c.get();
        let gauge = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let polls = g(&self.polls);
        let full = polls - g(&self.empty_polls).min(polls);
        let pk = g(&self.rx_packets);
        format!(
            "rx polls {polls} (empty {}), packets {pk}, {:.1} per non-empty poll, batches 1-15/16-63/64-255/256: {}/{}/{}/{}, fill ring refills deferred {}, recvfrom {}\n\
             tx kicks {} (busy {}), completions {}, frames in flight at last submit {}",
            g(&self.empty_polls),
            if full > 0 { pk as f64 / full as f64 } else { 0.0 },
            g(&self.rx_batches[0]),
            g(&self.rx_batches[1]),
            g(&self.rx_batches[2]),
            g(&self.rx_batches[3]),
            g(&self.fill_short),
            g(&self.rx_syscalls),
            g(&self.tx_kicks),
            g(&self.tx_kick_busy),
            g(&self.tx_completed),
            gauge(&self.tx_in_flight),
        ) + &if arena {
            format!(
                "\narena buffers held by the kernel: rx {} tx {} (at last poll/submit), completions not ours {}",
                gauge(&self.rx_held),
                gauge(&self.tx_in_flight),
                g(&self.bad_completions)
            )
        } else {
            String::new()
        }
    }
}

/// Kernel statistics of a socket (`XDP_STATISTICS`).
#[derive(Copy, Clone, Debug, Default)]
#[repr(C)]
pub struct XskStats {
    /// Dropped for other reasons (e.g. frame too big).
    pub rx_dropped: u64,
    /// Invalid rx descriptors.
    pub rx_invalid_descs: u64,
    /// Invalid tx descriptors.
    pub tx_invalid_descs: u64,
    /// Dropped because the rx ring was full.
    pub rx_ring_full: u64,
    /// The fill ring was empty.
    pub rx_fill_ring_empty_descs: u64,
    /// The tx ring was empty when the kernel looked.
    pub tx_ring_empty_descs: u64,
}

/// One AF_XDP socket bound to one queue of a device, with its UMEM.
pub struct Xsk {
    // Field order is drop order: the socket closes first (the kernel unregisters the UMEM
    // and stops using the rings), then the mappings go.
    fd: OwnedFd,
    /// Own UMEM (`None`: the buffer arena).
    umem: Option<Mmap>,
    _rings: Vec<Mmap>,
    tx: SpinLock<TxRings>,
    /// Device (Linux ifindex).
    pub ifindex: u32,
    /// Device queue.
    pub queue: u32,
    /// Ring sizes.
    pub geo: XskGeometry,
    /// Whether the kernel granted zero-copy.
    pub zero_copy: bool,
    /// Whether busy polling is configured on the socket (`SO_PREFER_BUSY_POLL`,
    /// `SO_BUSY_POLL`): a `recvfrom` then runs the device queue's NAPI poll in Sluice's
    /// context (see [`Xsk::rx_wakeup`]).
    pub busy_poll: bool,
    /// Sluice-side counters.
    pub counters: XskCounters,
    /// Frames a refused kick left in the tx ring.
    pub kick: KickState,
    /// Arena UMEM: where the buffers are.
    pub arena: Option<ArenaGeo>,
    /// Arena UMEM: buffers the rings held when they went, freed when this (declared after
    /// `fd`, so dropped after the socket is closed) and every ring have gone.
    _park: Option<Arc<Parking>>,
}

const SO_BUSY_POLL: libc::c_int = 46;
const SO_INCOMING_NAPI_ID: libc::c_int = 56;
const SO_PREFER_BUSY_POLL: libc::c_int = 69;
const SO_BUSY_POLL_BUDGET: libc::c_int = 70;
/// Busy-poll time per `recvfrom` (µs). The non-blocking `recvfrom` runs one NAPI poll and
/// returns, so this only has to be non-zero.
const BUSY_POLL_USECS: i32 = 20;
/// Packets one busy poll may take from the device queue (a full Sluice vector).
pub const BUSY_POLL_BUDGET: i32 = 256;

/// Turns busy polling on for an AF_XDP socket (Linux >= 5.11 for the preference and budget).
fn set_busy_poll(fd: RawFd) -> io::Result<()> {
    setsockopt(
        fd,
        libc::SOL_SOCKET,
        SO_PREFER_BUSY_POLL,
        &1i32,
        "SO_PREFER_BUSY_POLL",
    )?;
    setsockopt(
        fd,
        libc::SOL_SOCKET,
        SO_BUSY_POLL,
        &BUSY_POLL_USECS,
        "SO_BUSY_POLL",
    )?;
    setsockopt(
        fd,
        libc::SOL_SOCKET,
        SO_BUSY_POLL_BUDGET,
        &BUSY_POLL_BUDGET,
        "SO_BUSY_POLL_BUDGET",
    )
}

fn xsk_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2).
    let fd = unsafe { libc::socket(AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("cannot open AF_XDP socket: {e} (needs root or CAP_NET_RAW, Linux >= 4.18)"),
        ));
    }
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// RLIMIT_MEMLOCK (soft), `None` when unlimited.
pub fn memlock_limit() -> Option<u64> {
    // SAFETY: rlimit is plain data; getrlimit fills it.
    let mut r: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to an rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) } != 0
        || r.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    Some(r.rlim_cur)
}

impl Xsk {
    /// Opens a socket on (`ifindex`, `queue`) with a fresh UMEM, fills the fill ring and
    /// binds. Returns the socket and its rx half.
    pub fn open(
        ifindex: u32,
        queue: u32,
        geo: XskGeometry,
        mode: ZcMode,
        umem: &UmemSpec,
    ) -> io::Result<(Xsk, RxRings)> {
        let mode = match umem {
            // A sharer inherits copy/zero-copy from the socket that registered the UMEM.
            UmemSpec::Arena { share: Some(_), .. } => ZcMode::Copy,
            UmemSpec::Arena {
                zero_copy: false, ..
            } => ZcMode::Copy,
            _ => mode,
        };
        match mode {
            ZcMode::Copy => Xsk::open_once(ifindex, queue, geo, XDP_COPY, umem),
            ZcMode::ZeroCopy => {
                Xsk::open_once(ifindex, queue, geo, XDP_ZEROCOPY, umem).map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!(
                            "zero-copy refused: {e} (the driver has no AF_XDP zero-copy support; \
                         veth and generic XDP only do copy mode: use no-zero-copy)"
                        ),
                    )
                })
            }
            ZcMode::Auto => match Xsk::open_once(ifindex, queue, geo, XDP_ZEROCOPY, umem) {
                Ok(x) => Ok(x),
                Err(zc) => {
                    log::debug!(
                        "af_xdp: zero-copy not available on queue {queue} ({zc}), copy mode"
                    );
                    Xsk::open_once(ifindex, queue, geo, XDP_COPY, umem)
                }
            },
        }
    }

    fn open_once(
        ifindex: u32,
        queue: u32,
        geo: XskGeometry,
        bind_mode: u16,
        spec: &UmemSpec,
    ) -> io::Result<(Xsk, RxRings)> {
        let fd = xsk_socket()?;
        let raw = fd.as_raw_fd();
        let (umem, reg, arena, park) = match spec {
            UmemSpec::Own => {
                let umem_len = geo.umem_bytes();
                let umem = Mmap::anonymous(umem_len, "UMEM mmap")?;
                let reg = UmemReg {
                    addr: umem.ptr() as u64,
                    len: umem_len as u64,
                    chunk_size: FRAME_SIZE as u32,
                    headroom: 0,
                    flags: 0,
                    tx_metadata_len: 0,
                };
                (Some(umem), Some(reg), None, None)
            }
            UmemSpec::Arena { pool, share, .. } => {
                let g = ArenaGeo::of(pool);
                if let Some(why) = g.unfit() {
                    return Err(io::Error::new(io::ErrorKind::InvalidInput, why));
                }
                let (base, len) = pool.region();
                // Unaligned chunks: a chunk is any `chunk` bytes, here a buffer's headroom +
                // data at `idx * stride`; no UMEM headroom, so the kernel puts a packet
                // XDP_PACKET_HEADROOM (256) bytes into the chunk: at the buffer's data start.
                let reg = share.is_none().then_some(UmemReg {
                    addr: base as u64,
                    len: len as u64,
                    chunk_size: g.chunk,
                    headroom: 0,
                    flags: UNALIGNED_CHUNK_FLAG,
                    tx_metadata_len: 0,
                });
                (None, reg, Some(g), Some(Parking::new(pool.clone())))
            }
        };
        let umem_len = reg.as_ref().map_or(0, |r| r.len as usize);
        if let Some(reg) = &reg {
            setsockopt(raw, SOL_XDP, XDP_UMEM_REG, reg, "XDP_UMEM_REG").map_err(|e| {
                match sluice_vnet::devices::linux::errno(&e) {
                    Some(libc::ENOBUFS) | Some(libc::EPERM) | Some(libc::ENOMEM)
                    | Some(libc::EAGAIN) => io::Error::new(
                        e.kind(),
                        format!(
                            "UMEM registration of {} KiB refused ({e}); the locked-memory limit \
                             (RLIMIT_MEMLOCK) is {}: {}",
                            umem_len >> 10,
                            match memlock_limit() {
                                Some(l) => format!("{} KiB", l >> 10),
                                None => "unlimited".into(),
                            },
                            if arena.is_some() {
                                "use fewer buffers (`buffers { buffers-per-numa N }') or `umem own'"
                            } else {
                                "lower rx-queue-size / tx-queue-size / num-rx-queues"
                            }
                        ),
                    ),
                    _ => e,
                }
            })?;
        }
        setsockopt(
            raw,
            SOL_XDP,
            XDP_UMEM_FILL_RING,
            &geo.rx_size,
            "XDP_UMEM_FILL_RING",
        )?;
        setsockopt(
            raw,
            SOL_XDP,
            XDP_UMEM_COMPLETION_RING,
            &geo.tx_size,
            "XDP_UMEM_COMPLETION_RING",
        )?;
        setsockopt(raw, SOL_XDP, XDP_RX_RING, &geo.rx_size, "XDP_RX_RING")?;
        setsockopt(raw, SOL_XDP, XDP_TX_RING, &geo.tx_size, "XDP_TX_RING")?;
        let off: MmapOffsets = getsockopt(raw, SOL_XDP, XDP_MMAP_OFFSETS, "XDP_MMAP_OFFSETS")?;
        let desc = std::mem::size_of::<XdpDesc>() as u64;
        let map = |o: &RingOffset, n: u32, sz: u64, pgoff: u64, what: &str| {
            Mmap::new(raw, (o.desc + n as u64 * sz) as usize, pgoff, what)
        };
        let rx_map = map(
            &off.rx,
            geo.rx_size,
            desc,
            XDP_PGOFF_RX_RING,
            "mmap rx ring",
        )?;
        let tx_map = map(
            &off.tx,
            geo.tx_size,
            desc,
            XDP_PGOFF_TX_RING,
            "mmap tx ring",
        )?;
        let fill_map = map(
            &off.fr,
            geo.rx_size,
            8,
            XDP_UMEM_PGOFF_FILL_RING,
            "mmap fill ring",
        )?;
        let comp_map = map(
            &off.cr,
            geo.tx_size,
            8,
            XDP_UMEM_PGOFF_COMPLETION_RING,
            "mmap completion ring",
        )?;
        // SAFETY: each mapping was made from the offsets and sizes the kernel gave for that
        // ring and lives in `Xsk::_rings` as long as the rings (the rx half is dropped by its
        // poller before the last `Arc<Xsk>` goes, see `RxQueue`).
        let (rx, tx, mut fill, comp) = unsafe {
            (
                Ring::<XdpDesc>::from_raw(rx_map.ptr(), &off.rx, geo.rx_size),
                Ring::<XdpDesc>::from_raw(tx_map.ptr(), &off.tx, geo.tx_size),
                Ring::<u64>::from_raw(fill_map.ptr(), &off.fr, geo.rx_size),
                Ring::<u64>::from_raw(comp_map.ptr(), &off.cr, geo.tx_size),
            )
        };
        let free = if umem.is_some() {
            // Every rx frame goes to the kernel at once.
            let n = fill.reserve(geo.rx_size);
            for i in 0..n {
                fill.write(i, i as u64 * FRAME_SIZE as u64);
            }
            fill.submit(n);
            (geo.rx_size..geo.rx_size + geo.tx_size)
                .rev()
                .map(|i| i as u64 * FRAME_SIZE as u64)
                .collect()
        } else {
            // Arena: the poller stocks the fill ring with fresh buffers.
            Vec::new()
        };
        let (bind_flags, shared_umem_fd) = match spec {
            // The kernel refuses any other flag with XDP_SHARED_UMEM: copy/zero-copy and
            // need-wakeup are those of the socket that registered the UMEM.
            UmemSpec::Arena { share: Some(s), .. } => (XDP_SHARED_UMEM, *s as u32),
            _ => (bind_mode | XDP_USE_NEED_WAKEUP, 0),
        };
        // Copy mode sends at most 32 packets per sendto unless told otherwise (Linux >= 6.17).
        let _ = setsockopt(raw, SOL_XDP, XDP_MAX_TX_SKB_BUDGET, &geo.tx_size, "budget");
        let sa = SockaddrXdp {
            family: AF_XDP as u16,
            flags: bind_flags,
            ifindex,
            queue_id: queue,
            shared_umem_fd,
        };
        // A socket closed on this queue (a deleted interface, an earlier attempt) gives its
        // queue back only when the kernel's deferred release has run (xsk_destruct ->
        // xp_release_deferred, a workqueue item): until then bind says EBUSY. A failed bind
        // leaves the socket unbound with its rings, so it is retried for up to 1 s; a queue
        // that is really owned by someone else still fails, after that second.
        let started = std::time::Instant::now();
        let r = loop {
            // SAFETY: `sa` is a valid sockaddr_xdp of the size passed.
            let r = unsafe {
                libc::bind(
                    raw,
                    &sa as *const SockaddrXdp as *const libc::sockaddr,
                    std::mem::size_of::<SockaddrXdp>() as libc::socklen_t,
                )
            };
            let busy = r != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EBUSY);
            if !busy || started.elapsed() >= std::time::Duration::from_secs(1) {
                break r;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        if r != 0 {
            let e = os_err(&format!(
                "bind to queue {queue} ({})",
                if shared_umem_fd != 0 {
                    "sharing the buffer arena UMEM"
                } else if bind_mode == XDP_ZEROCOPY {
                    "zero-copy"
                } else {
                    "copy mode"
                }
            ));
            return Err(match sluice_vnet::devices::linux::errno(&e) {
                Some(libc::EBUSY) => io::Error::new(
                    e.kind(),
                    format!("{e}: another AF_XDP socket or program owns this queue"),
                ),
                _ => e,
            });
        }
        let opts: u32 = getsockopt(raw, SOL_XDP, XDP_OPTIONS, "XDP_OPTIONS").unwrap_or(0);
        // The default send buffer is kept: sizing it for the whole tx ring (as af_packet does)
        // removed the EAGAIN kicks but did not forward more per core (paired runs on veth).
        let busy_poll = match set_busy_poll(raw) {
            Ok(()) => true,
            Err(e) => {
                log::debug!("af_xdp: no busy polling on queue {queue}: {e}");
                false
            }
        };
        let ring_arena = || arena.zip(park.clone()).map(|(g, p)| RingArena::new(g, p));
        let tx_arena = ring_arena();
        let x = Xsk {
            fd,
            umem,
            _rings: vec![rx_map, tx_map, fill_map, comp_map],
            tx: SpinLock::new(TxRings {
                given_up_to: tx.prod_index(),
                tx,
                comp,
                free,
                arena: tx_arena,
                pending: 0,
            }),
            ifindex,
            queue,
            geo,
            zero_copy: opts & XDP_OPTIONS_ZEROCOPY != 0,
            busy_poll,
            counters: XskCounters::default(),
            kick: KickState::default(),
            arena,
            _park: park.clone(),
        };
        Ok((
            x,
            RxRings {
                rx,
                fill,
                recycle: Vec::new(),
                arena: ring_arena(),
            },
        ))
    }

    /// The socket.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The received packet `d` as a slice of the UMEM, `None` when the descriptor points
    /// outside it or across a frame boundary.
    ///
    /// The frame belongs to Sluice from the moment the kernel put it in the rx ring until
    /// the poller hands it back through the fill ring, which happens only after the slice is
    /// no longer used (see `AfXdpInput::poll_queue`).
    #[inline]
    pub fn rx_frame(&self, d: &XdpDesc) -> Option<&[u8]> {
        let start = usize::try_from(d.addr).ok()?;
        let end = start.checked_add(d.len as usize)?;
        let frame_end = (start / FRAME_SIZE + 1) * FRAME_SIZE;
        let umem = self.umem.as_ref()?;
        if end > umem.len() || end > frame_end || d.len == 0 {
            return None;
        }
        // SAFETY: in bounds (checked above); the kernel does not write this frame while it
        // is Sluice's (it is in no fill ring).
        Some(unsafe { std::slice::from_raw_parts(umem.ptr().add(start), d.len as usize) })
    }

    /// Whether `addr` is the start of an rx frame of this UMEM.
    pub fn is_rx_frame(&self, addr: u64) -> bool {
        addr % FRAME_SIZE as u64 == 0 && addr < self.geo.rx_size as u64 * FRAME_SIZE as u64
    }

    /// Takes the tx half (spins while another thread transmits on this queue).
    pub fn tx_lock(&self) -> SpinGuard<'_, TxRings> {
        self.tx.lock()
    }

    /// Copies one packet into a free tx frame with `fill` (given the frame, returns the
    /// packet length) and writes its descriptor; [`Xsk::tx_submit`] publishes the batch.
    #[inline]
    pub fn tx_push(
        &self,
        t: &mut TxRings,
        fill: impl FnOnce(&mut [u8]) -> usize,
    ) -> Result<(), TxFull> {
        if t.tx.reserve(t.pending + 1) <= t.pending {
            return Err(TxFull::RingFull);
        }
        let Some(umem) = &self.umem else {
            return Err(TxFull::RingFull);
        };
        let Some(addr) = t.free.pop() else {
            return Err(TxFull::RingFull);
        };
        let start = addr as usize;
        debug_assert!(start + FRAME_SIZE <= umem.len());
        let len = {
            // SAFETY: `addr` is a tx frame (from the free list: never in the kernel's hands
            // now) inside the UMEM; we hold the tx lock, so no other thread writes it.
            let frame =
                unsafe { std::slice::from_raw_parts_mut(umem.ptr().add(start), FRAME_SIZE) };
            fill(frame).min(FRAME_SIZE)
        };
        t.tx.write(
            t.pending,
            XdpDesc {
                addr,
                len: len as u32,
                options: 0,
            },
        );
        t.pending += 1;
        Ok(())
    }

    /// Arena UMEM: queues buffer `b` itself (its packet at `addr`, `len` bytes, one buffer)
    /// for transmission; it stays the tx ring's until its completion comes back
    /// ([`Xsk::tx_reap`]). [`Xsk::tx_submit`] publishes the batch.
    #[inline]
    pub fn tx_push_buf(
        &self,
        t: &mut TxRings,
        b: BufIdx,
        addr: u64,
        len: u32,
    ) -> Result<(), TxFull> {
        let Some(ra) = t.arena.as_mut() else {
            return Err(TxFull::RingFull);
        };
        // At most tx_size buffers in flight: the completion ring always has room for them.
        if ra.held.count() >= self.geo.tx_size || t.tx.reserve(t.pending + 1) <= t.pending {
            return Err(TxFull::RingFull);
        }
        if !ra.held.give(b) {
            return Err(TxFull::InFlight);
        }
        t.tx.write(
            t.pending,
            XdpDesc {
                addr,
                len,
                options: 0,
            },
        );
        t.pending += 1;
        Ok(())
    }

    /// Publishes the packets pushed since the last call and kicks the kernel when it asks
    /// for it (`XDP_RING_NEED_WAKEUP`). In copy mode the kernel sends a bounded number of
    /// packets per `sendto`, so it is called again (bounded) until the ring is drained. When
    /// the kernel leaves descriptors in the ring (send buffer full, device busy or down) the
    /// queue becomes pending and is kicked again later ([`KickState`]; `now`: TSC).
    pub fn tx_submit(&self, t: &mut TxRings, now: u64) -> io::Result<()> {
        if t.pending > 0 {
            t.tx.submit(t.pending);
            t.pending = 0;
        }
        let in_flight = match &t.arena {
            Some(ra) => ra.held.count() as usize,
            None => self.geo.tx_size as usize - t.free.len(),
        };
        self.counters
            .tx_in_flight
            .store(in_flight as u64, Ordering::Relaxed);
        let r = self.kick_out(t);
        // Zero-copy drivers send asynchronously: descriptors left after a wakeup that was
        // not refused are on their way.
        let left = t.left() > 0 && (!self.zero_copy || !matches!(r, Ok(false)));
        self.kick.settle(now, left);
        r.map(|_| ())
    }

    /// Kicks until the kernel has taken the tx ring (bounded). `Ok(true)`: it refused (busy
    /// after the retries, no room in the device queue, device down or gone).
    fn kick_out(&self, t: &TxRings) -> io::Result<bool> {
        let c = &self.counters;
        let mut tries = t.tx.outstanding() / 32 + 2;
        let mut refused = false;
        while t.tx.outstanding() > 0 && t.tx.needs_wakeup() && tries > 0 {
            tries -= 1;
            c.tx_kicks.add(1);
            refused = false;
            if let Err(e) = sluice_vnet::devices::linux::kick_tx(self.fd.as_raw_fd()) {
                refused = true;
                match e.raw_os_error() {
                    // Busy: try again (bounded); the frames stay queued otherwise.
                    Some(libc::EAGAIN) | Some(libc::EBUSY) => {
                        c.tx_kick_busy.add(1);
                        continue;
                    }
                    // No room in the device queue, device down: retried later.
                    Some(libc::ENOBUFS) | Some(libc::ENETDOWN) | Some(libc::ENXIO) => break,
                    _ => return Err(e),
                }
            }
            if self.zero_copy {
                break; // the driver sends asynchronously; one wakeup is enough
            }
        }
        Ok(refused)
    }

    /// Takes back the tx frames the kernel has sent (arena UMEM: into `t.arena.done`, for
    /// the caller to free; a completion naming no buffer in flight is counted and ignored).
    #[inline]
    pub fn tx_reap(&self, t: &mut TxRings) -> u32 {
        let n = t.comp.peek(t.comp.size());
        if let Some(ra) = t.arena.as_mut() {
            let mut bad = 0;
            for i in 0..n {
                match ra.geo.tx_buffer(t.comp.read(i)) {
                    Some(b) if ra.held.take(b) => ra.done.push(b),
                    _ => bad += 1,
                }
            }
            t.comp.release(n);
            if n > 0 {
                self.counters.tx_completed.add(n as u64);
                self.counters.bad_completions.add(bad);
            }
            return n;
        }
        let umem_len = self.umem.as_ref().map_or(0, |u| u.len());
        for i in 0..n {
            let a = t.comp.read(i);
            let base = a - a % FRAME_SIZE as u64;
            if base >= self.geo.rx_size as u64 * FRAME_SIZE as u64
                && (base as usize) < umem_len
                && t.free.len() < self.geo.tx_size as usize
            {
                t.free.push(base);
            }
        }
        t.comp.release(n);
        if n > 0 {
            self.counters.tx_completed.add(n as u64);
        }
        n
    }

    /// Wakes the kernel to refill from the fill ring when it asks for it. With `busy` (a
    /// queue in polling mode on a socket with busy polling and a NAPI id) it always calls `recvfrom`: the
    /// kernel then runs the device queue's NAPI poll (the XDP program and, in copy mode, the
    /// copy into the UMEM) right here, up to [`BUSY_POLL_BUDGET`] packets, instead of in a
    /// softirq or NAPI thread that would compete with Sluice for the core.
    #[inline]
    pub fn rx_wakeup(&self, r: &RxRings, busy: bool) {
        if busy || r.fill.needs_wakeup() {
            self.counters.rx_syscalls.add(1);
            // SAFETY: recvfrom with a NULL buffer of length 0, non-blocking: the AF_XDP rx
            // wakeup; nothing is written.
            unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    std::ptr::null_mut(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                );
            }
        }
    }

    /// The NAPI instance the kernel recorded for this socket (`SO_INCOMING_NAPI_ID`, set by the
    /// first received packet); busy polling needs one. 0: none (yet).
    pub fn napi_id(&self) -> u32 {
        getsockopt(
            self.fd.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_INCOMING_NAPI_ID,
            "napi id",
        )
        .unwrap_or(0)
    }

    /// Kernel statistics.
    pub fn stats(&self) -> io::Result<XskStats> {
        getsockopt(
            self.fd.as_raw_fd(),
            SOL_XDP,
            XDP_STATISTICS,
            "XDP_STATISTICS",
        )
    }
}

/// The tx half of a socket with its lock held, for [`KickState::retry`].
struct XskTx<'a> {
    x: &'a Xsk,
    t: &'a mut TxRings,
}

impl KickRing for XskTx<'_> {
    fn left(&mut self) -> u32 {
        self.t.left()
    }

    fn kick(&mut self) {
        self.x.tx_reap(self.t);
        let _ = self.x.kick_out(self.t);
    }

    /// Descriptors in the tx ring cannot be taken back from the kernel: they are counted as
    /// given up and no longer keep the queue pending; their frames return through the
    /// completion ring if the kernel sends them after all.
    fn give_up(&mut self, n: u32) -> u64 {
        self.t.given_up_to = self.t.tx.prod_index();
        self.t.tx.last_submitted(n).map(|d| d.len as u64).sum()
    }
}

impl TxKick for Xsk {
    fn kick_state(&self) -> &KickState {
        &self.kick
    }

    fn retry(&self, now: u64, give_up: u64) -> (u64, u64) {
        let mut g = self.tx_lock();
        let mut r = XskTx { x: self, t: &mut g };
        self.kick.retry(&mut r, now, give_up)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring laid out like the kernel's: producer, consumer, flags words, then descriptors.
    struct Sim {
        mem: Vec<u64>,
        off: RingOffset,
    }

    impl Sim {
        fn new(size: u32) -> Sim {
            Sim {
                mem: vec![0; 4 + size as usize * 2],
                off: RingOffset {
                    producer: 0,
                    consumer: 8,
                    flags: 16,
                    desc: 32,
                },
            }
        }
        fn ring<T: Copy>(&mut self, size: u32) -> Ring<T> {
            // SAFETY: the layout above, in a live Vec that outlives the ring in each test.
            unsafe { Ring::from_raw(self.mem.as_mut_ptr() as *mut u8, &self.off, size) }
        }
        fn word(&self, off: u64) -> &AtomicU32 {
            // SAFETY: inside the Vec, 8-aligned.
            unsafe { &*((self.mem.as_ptr() as *const u8).add(off as usize) as *const AtomicU32) }
        }
        fn set_prod(&self, v: u32) {
            self.word(self.off.producer).store(v, Ordering::Release);
        }
        fn set_cons(&self, v: u32) {
            self.word(self.off.consumer).store(v, Ordering::Release);
        }
        fn prod(&self) -> u32 {
            self.word(self.off.producer).load(Ordering::Acquire)
        }
        fn cons(&self) -> u32 {
            self.word(self.off.consumer).load(Ordering::Acquire)
        }
    }

    #[test]
    fn index_arithmetic_wraps() {
        assert_eq!(ring_entries(5, 3), 2);
        assert_eq!(ring_entries(2, u32::MAX - 1), 4);
        assert_eq!(ring_free(8, 2, u32::MAX - 1), 4);
        assert_eq!(ring_free(8, 10, 2), 0);
        assert_eq!(ring_free(8, 7, 7), 8);
        // A corrupt index from the other side never makes free space appear from nowhere.
        assert_eq!(ring_free(8, 100, 2), 0);
    }

    #[test]
    fn producer_ring_respects_the_consumer() {
        let mut s = Sim::new(8);
        s.set_prod(u32::MAX - 2);
        s.set_cons(u32::MAX - 2);
        let mut r: Ring<u64> = s.ring(8);
        assert_eq!(r.reserve(16), 8);
        for i in 0..8 {
            r.write(i, 100 + i as u64);
        }
        r.submit(8);
        assert_eq!(s.prod(), 5); // wrapped
        assert_eq!(r.reserve(1), 0, "full until the kernel consumes");
        assert_eq!(r.outstanding(), 8);
        // The kernel consumes 3: slots of the first three entries.
        s.set_cons(s.cons().wrapping_add(3));
        assert_eq!(r.reserve(4), 3);
        r.write(0, 7);
        r.submit(1);
        // Entry written at index prod-1 lands in slot (prod-1) & 7.
        let slot = (s.prod().wrapping_sub(1) & 7) as usize;
        assert_eq!(s.mem[4 + slot], 7);
    }

    #[test]
    fn consumer_ring_reads_what_was_produced() {
        let mut s = Sim::new(4);
        s.set_prod(u32::MAX);
        s.set_cons(u32::MAX);
        let mut r: Ring<u64> = s.ring(4);
        assert_eq!(r.peek(4), 0);
        assert!(!r.has_entries());
        // The kernel produces three entries across the wrap.
        for k in 0..3u32 {
            let idx = u32::MAX.wrapping_add(k);
            s.mem[4 + (idx & 3) as usize] = 1000 + k as u64;
        }
        s.set_prod(u32::MAX.wrapping_add(3));
        assert!(r.has_entries());
        assert_eq!(r.peek(2), 2);
        assert_eq!((r.read(0), r.read(1)), (1000, 1001));
        r.release(2);
        assert_eq!(s.cons(), 1);
        assert_eq!(r.peek(8), 1);
        assert_eq!(r.read(0), 1002);
        r.release(1);
        assert_eq!(r.peek(8), 0);
    }

    #[test]
    fn umem_fits_the_budget() {
        let g = XskGeometry {
            rx_size: 512,
            tx_size: 512,
        };
        assert_eq!(g.umem_bytes(), 2 << 20);
    }
}
