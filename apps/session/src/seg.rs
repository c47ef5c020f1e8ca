//! The shared segment one attached application and Sluice exchange data through: a memfd
//! created by Sluice, mapped by both. Layout (all integers little-endian, offsets from 0):
//!
//! ```text
//! 0      header: magic u64, version u32, n_slots u32, fifo_size u32, evq_len u32,
//!        n_queues u32
//! 4096   per session thread t < n_queues, a pair of event queues:
//!          app event queue t (thread t produces, the application consumes): slot
//!          numbers whose rx FIFO got data (sessions thread t owns)
//!          Sluice event queue t (the application produces, thread t consumes): slot
//!          numbers whose tx FIFO got data
//! slots  n_slots × (rx FIFO, tx FIFO), each FIFO_HDR + fifo_size bytes
//! ```
//!
//! A slot's session lives on one thread, its *owner* (written by Sluice into the rx FIFO's
//! header, [`Fifo::owner`], before the slot is handed to the application): its events come
//! through app queue `owner`, its tx events go to Sluice queue `owner`. The application has
//! one wake-up eventfd for all its queues and one `waiting` word (app queue 0's): it
//! announces its sleep there and then looks at every queue, and a producer of any queue
//! takes the announcement (a swap) after publishing, so a sleep is signalled once and never
//! missed ([`AppQueues`]).
//!
//! An event queue is a single-producer single-consumer ring of `u32`: `head` (written by
//! the producer) and `tail` (written by the consumer) on cache lines of their own, and a
//! `waiting` word the consumer sets before it sleeps on its eventfd; a producer that finds
//! it set after publishing clears it and signals the eventfd (Dekker handshake with SeqCst
//! fences, so a wake-up is never lost and a busy consumer costs no system call).
//!
//! A FIFO is a single-producer single-consumer byte ring of datagram records: a
//! [`DgramHdr`] (24 bytes: payload length, peer port, family, peer address) and the
//! payload, padded to 8 bytes, wrapping around the end of the ring. `head`/`tail` are
//! free-running `u32` byte positions. Its `has_event` word is set by the producer when it
//! queues an event for the FIFO and cleared by the consumer before draining, so a busy FIFO
//! produces one event, not one per datagram.
//!
//! Either side may be hostile to the other: every position and length read from the
//! segment is checked against the ring before it is used; a corrupt FIFO reads as empty
//! (and [`Fifo::pop`] reports it), never as an out-of-bounds access.

use sluice_infra::shm::Region;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{fence, AtomicU32, Ordering};

/// "SLSESS01".
pub const MAGIC: u64 = 0x3130_5353_4553_4c53;
/// Layout version (2: one event-queue pair per session thread, `n_queues`).
pub const VERSION: u32 = 2;
/// Most event-queue pairs (session threads) a segment has: thread `t`'s eventfd is sent as
/// `EventFd` `1 + t`, a `u8`.
pub const MAX_QUEUES: u32 = 255;
/// Bytes of the segment header.
pub const HDR: usize = 4096;
/// Bytes of a FIFO's header (head, tail, has_event on their own cache lines).
pub const FIFO_HDR: usize = 192;
/// Bytes of an event queue's header (head, tail, waiting).
pub const EVQ_HDR: usize = 192;
/// Bytes of a datagram record header.
pub const DGRAM_HDR: usize = 24;

/// Geometry of a segment.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Session slots.
    pub n_slots: u32,
    /// Bytes of each FIFO's ring (a power of two).
    pub fifo_size: u32,
    /// Entries of each event queue (a power of two).
    pub evq_len: u32,
    /// Event-queue pairs: one per session thread (main + workers).
    pub n_queues: u32,
}

impl Geometry {
    /// Bytes of one event queue.
    pub fn evq_bytes(&self) -> usize {
        (EVQ_HDR + 4 * self.evq_len as usize).next_multiple_of(64)
    }
    /// Offset of thread `t`'s app event queue.
    pub fn app_evq_off(&self, t: u32) -> usize {
        HDR + 2 * t as usize * self.evq_bytes()
    }
    /// Offset of thread `t`'s Sluice event queue.
    pub fn sluice_evq_off(&self, t: u32) -> usize {
        HDR + (2 * t as usize + 1) * self.evq_bytes()
    }
    /// Bytes of one FIFO.
    pub fn fifo_bytes(&self) -> usize {
        FIFO_HDR + self.fifo_size as usize
    }
    /// Offset of slot `i`'s rx FIFO (its tx FIFO follows).
    pub fn slot_off(&self, i: u32) -> usize {
        (HDR + 2 * self.n_queues as usize * self.evq_bytes()).next_multiple_of(4096)
            + 2 * i as usize * self.fifo_bytes()
    }
    /// Total segment size.
    pub fn size(&self) -> usize {
        self.slot_off(self.n_slots).next_multiple_of(4096)
    }
    /// Whether the numbers are usable (powers of two, sane bounds).
    pub fn valid(&self) -> bool {
        self.fifo_size.is_power_of_two()
            && (4096..=1 << 26).contains(&self.fifo_size)
            && self.evq_len.is_power_of_two()
            && (16..=1 << 20).contains(&self.evq_len)
            && (1..=4096).contains(&self.n_slots)
            && (1..=MAX_QUEUES).contains(&self.n_queues)
            // At most one event per slot is pending, so a queue never overflows.
            && self.evq_len >= self.n_slots
            && (self.size() as u64) <= sluice_infra::shm::MAX_REGION_SIZE
    }
}

/// Bytes of the header's fields.
const HDR_FIELDS: usize = 28;

/// Writes the header of a fresh (zeroed) segment.
pub fn init_header(r: &Region, g: &Geometry) {
    write_header(r, g, VERSION);
}

pub(crate) fn write_header(r: &Region, g: &Geometry, version: u32) {
    let Some(p) = r.range(0, HDR_FIELDS as u64) else {
        return;
    };
    let mut h = [0u8; HDR_FIELDS];
    h[0..8].copy_from_slice(&MAGIC.to_le_bytes());
    h[8..12].copy_from_slice(&version.to_le_bytes());
    h[12..16].copy_from_slice(&g.n_slots.to_le_bytes());
    h[16..20].copy_from_slice(&g.fifo_size.to_le_bytes());
    h[20..24].copy_from_slice(&g.evq_len.to_le_bytes());
    h[24..28].copy_from_slice(&g.n_queues.to_le_bytes());
    // SAFETY: `range` checked that the header's bytes at `p` lie inside the mapping.
    unsafe { std::ptr::copy_nonoverlapping(h.as_ptr(), p, HDR_FIELDS) };
}

/// Why a segment's header was refused ([`read_header`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// Not a session segment (magic) or too small.
    NotASegment,
    /// Another layout version: the library and Sluice must be of the same layout.
    Version(u32),
    /// Impossible geometry, or larger than the mapping.
    Geometry,
}

impl std::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderError::NotASegment => write!(f, "not a Sluice session segment"),
            HeaderError::Version(v) => write!(
                f,
                "segment layout version {v}, this library speaks version {VERSION}: \
                 use the session library of this Sluice"
            ),
            HeaderError::Geometry => write!(f, "bad segment geometry"),
        }
    }
}

impl std::error::Error for HeaderError {}

/// Reads and checks the header of a mapped segment.
pub fn read_header(r: &Region) -> Result<Geometry, HeaderError> {
    let p = r
        .range(0, HDR_FIELDS as u64)
        .ok_or(HeaderError::NotASegment)?;
    let mut h = [0u8; HDR_FIELDS];
    // SAFETY: `range` checked the header's bytes; a concurrent writer can only change
    // values, which are validated below.
    unsafe { std::ptr::copy_nonoverlapping(p, h.as_mut_ptr(), HDR_FIELDS) };
    let u32_at = |o: usize| u32::from_le_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]);
    let magic = u64::from_le_bytes([h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]]);
    if magic != MAGIC {
        return Err(HeaderError::NotASegment);
    }
    if u32_at(8) != VERSION {
        return Err(HeaderError::Version(u32_at(8)));
    }
    let g = Geometry {
        n_slots: u32_at(12),
        fifo_size: u32_at(16),
        evq_len: u32_at(20),
        n_queues: u32_at(24),
    };
    if g.valid() && g.size() <= r.size() {
        Ok(g)
    } else {
        Err(HeaderError::Geometry)
    }
}

fn atomic_at(r: &Region, off: usize) -> Option<&AtomicU32> {
    let p = r.range(off as u64, 4)?;
    if p as usize % 4 != 0 {
        return None;
    }
    // SAFETY: 4 aligned bytes inside the mapping, which lives as long as `r`; the peer
    // accesses it only atomically (or corrupts a value, which readers validate).
    Some(unsafe { &*(p as *const AtomicU32) })
}

/// A view of an event queue.
pub struct EvQ<'a> {
    head: &'a AtomicU32,
    tail: &'a AtomicU32,
    waiting: &'a AtomicU32,
    ents: *mut u8,
    len: u32,
}

impl<'a> EvQ<'a> {
    /// The queue at `off` with `len` entries (`None` if it does not fit in `r`).
    pub fn new(r: &'a Region, off: usize, len: u32) -> Option<EvQ<'a>> {
        Some(EvQ {
            head: atomic_at(r, off)?,
            tail: atomic_at(r, off + 64)?,
            waiting: atomic_at(r, off + 128)?,
            ents: r.range((off + EVQ_HDR) as u64, 4 * len as u64)?,
            len,
        })
    }

    /// Thread `t`'s app event queue of the segment `r` with geometry `g`, announcing sleeps
    /// in the application's one `waiting` word (app queue 0's): see [`AppQueues`].
    pub fn app(r: &'a Region, g: &Geometry, t: u32) -> Option<EvQ<'a>> {
        if t >= g.n_queues {
            return None;
        }
        Some(EvQ {
            waiting: atomic_at(r, g.app_evq_off(0) + 128)?,
            ..EvQ::new(r, g.app_evq_off(t), g.evq_len)?
        })
    }

    /// Thread `t`'s Sluice event queue (its own `waiting` word: thread `t` sleeps on it).
    pub fn sluice(r: &'a Region, g: &Geometry, t: u32) -> Option<EvQ<'a>> {
        if t >= g.n_queues {
            return None;
        }
        EvQ::new(r, g.sluice_evq_off(t), g.evq_len)
    }

    fn slot(&self, pos: u32) -> *mut u32 {
        // SAFETY (of the caller's use): `pos & (len - 1) < len` entries lie inside the
        // range checked in `new`; `ents` is 4-aligned (off + 192 with off 64-aligned).
        self.ents.wrapping_add(4 * (pos & (self.len - 1)) as usize) as *mut u32
    }

    /// Producer: appends `v`; false when full.
    pub fn push(&self, v: u32) -> bool {
        let h = self.head.load(Ordering::Relaxed);
        let t = self.tail.load(Ordering::Acquire);
        if h.wrapping_sub(t) >= self.len {
            return false;
        }
        // SAFETY: in-bounds entry (see `slot`); only the producer writes free entries.
        unsafe { std::ptr::write_volatile(self.slot(h), v) };
        self.head.store(h.wrapping_add(1), Ordering::Release);
        true
    }

    /// Consumer: takes the oldest entry.
    pub fn pop(&self) -> Option<u32> {
        let t = self.tail.load(Ordering::Relaxed);
        let h = self.head.load(Ordering::Acquire);
        if h == t || h.wrapping_sub(t) > self.len {
            return None;
        }
        // SAFETY: in-bounds entry (see `slot`).
        let v = unsafe { std::ptr::read_volatile(self.slot(t)) };
        self.tail.store(t.wrapping_add(1), Ordering::Release);
        Some(v)
    }

    /// Whether entries are queued.
    pub fn is_empty(&self) -> bool {
        self.head.load(Ordering::Acquire) == self.tail.load(Ordering::Relaxed)
    }

    /// Consumer: announces it is about to sleep; returns false (and takes the announcement
    /// back) when entries arrived meanwhile, so it must not sleep.
    pub fn prepare_sleep(&self) -> bool {
        self.announce_sleep();
        if !self.is_empty() {
            self.waiting.store(0, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Consumer: announces it is about to sleep even though entries are queued (it waits
    /// for one event and leaves the queued ones to someone else): the next push signals
    /// it. The caller then checks once more for what it waits for before it sleeps (a
    /// producer that made it true before the announcement may not have signalled).
    pub fn announce_sleep(&self) {
        self.waiting.store(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
    }

    /// Consumer: awake again. True when it took its announcement back itself (no producer
    /// took it, so none signalled: there is nothing to drain). Writes only when an
    /// announcement is up (the word is read by the producer after every push: an
    /// unconditional write would move its cache line to the consumer at every poll).
    pub fn woke(&self) -> bool {
        self.waiting.load(Ordering::Relaxed) != 0 && self.waiting.swap(0, Ordering::Relaxed) != 0
    }

    /// Producer, after pushing: whether the consumer sleeps and must be signalled (the
    /// announcement is taken, so it is signalled once).
    pub fn needs_signal(&self) -> bool {
        fence(Ordering::SeqCst);
        self.waiting.load(Ordering::Relaxed) != 0 && self.waiting.swap(0, Ordering::Relaxed) != 0
    }
}

/// The consumer's view of all of an application's event queues (one per session thread):
/// popped round robin, one `waiting` word for all. The sleep handshake with several
/// producers: the consumer sets the word, then looks at every queue; a producer publishes
/// its entry, then takes the word with a swap and signals. With a SeqCst fence between the
/// store and the loads on both sides, either the consumer sees the entry or the producer
/// sees the announcement; the swap makes one producer (not each) signal per sleep.
#[derive(Copy, Clone)]
pub struct AppQueues<'a> {
    r: &'a Region,
    g: Geometry,
}

impl<'a> AppQueues<'a> {
    /// The app queues of segment `r` (`None` if one does not fit).
    pub fn new(r: &'a Region, g: &Geometry) -> Option<AppQueues<'a>> {
        (0..g.n_queues)
            .all(|t| EvQ::app(r, g, t).is_some())
            .then_some(AppQueues { r, g: *g })
    }

    fn q(&self, t: u32) -> EvQ<'a> {
        EvQ::app(self.r, &self.g, t).expect("checked in new")
    }

    /// Takes the oldest entry of the first non-empty queue from `*next` on, and moves
    /// `*next` past it (round robin: a busy thread's queue does not starve the others).
    pub fn pop(&self, next: &mut u32) -> Option<u32> {
        let n = self.g.n_queues;
        for i in 0..n {
            let t = (*next + i) % n;
            if let Some(v) = self.q(t).pop() {
                *next = (t + 1) % n;
                return Some(v);
            }
        }
        None
    }

    /// Whether every queue is empty.
    pub fn is_empty(&self) -> bool {
        (0..self.g.n_queues).all(|t| self.q(t).is_empty())
    }

    /// [`EvQ::prepare_sleep`] over every queue.
    pub fn prepare_sleep(&self) -> bool {
        self.announce_sleep();
        if !self.is_empty() {
            self.q(0).waiting.store(0, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// [`EvQ::announce_sleep`] (the shared word).
    pub fn announce_sleep(&self) {
        self.q(0).announce_sleep();
    }

    /// [`EvQ::woke`] (the shared word).
    pub fn woke(&self) -> bool {
        self.q(0).woke()
    }
}

/// A datagram record's header: the payload length and the peer (source on rx, destination
/// on tx; port 0 on tx: the session's connected peer).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct DgramHdr {
    /// Payload bytes.
    pub len: u32,
    /// The peer.
    pub peer: SocketAddr,
}

impl DgramHdr {
    fn encode(&self) -> [u8; DGRAM_HDR] {
        let mut b = [0u8; DGRAM_HDR];
        b[0..4].copy_from_slice(&self.len.to_le_bytes());
        b[4..6].copy_from_slice(&self.peer.port().to_le_bytes());
        match self.peer.ip() {
            IpAddr::V4(a) => {
                b[6] = 4;
                b[8..12].copy_from_slice(&a.octets());
            }
            IpAddr::V6(a) => {
                b[6] = 6;
                b[8..24].copy_from_slice(&a.octets());
            }
        }
        b
    }

    fn decode(b: &[u8; DGRAM_HDR]) -> Option<DgramHdr> {
        let len = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let port = u16::from_le_bytes([b[4], b[5]]);
        let ip = match b[6] {
            4 => IpAddr::V4(Ipv4Addr::new(b[8], b[9], b[10], b[11])),
            6 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&b[8..24]).ok()?)),
            _ => return None,
        };
        Some(DgramHdr {
            len,
            peer: SocketAddr::new(ip, port),
        })
    }
}

/// Why [`Fifo::pop`] returned nothing.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PopError {
    /// No record.
    Empty,
    /// The record does not fit the caller's buffer (it is left in place).
    TooLong(u32),
    /// The producer wrote positions or a header that cannot be valid.
    Corrupt,
}

/// A view of one FIFO.
pub struct Fifo<'a> {
    head: &'a AtomicU32,
    tail: &'a AtomicU32,
    has_event: &'a AtomicU32,
    data: *mut u8,
    size: u32,
}

fn rec_len(payload: usize) -> u32 {
    (DGRAM_HDR + payload).next_multiple_of(8) as u32
}

impl<'a> Fifo<'a> {
    /// The FIFO at `off` with a ring of `size` bytes (a power of two).
    pub fn new(r: &'a Region, off: usize, size: u32) -> Option<Fifo<'a>> {
        if !size.is_power_of_two() {
            return None;
        }
        Some(Fifo {
            head: atomic_at(r, off)?,
            tail: atomic_at(r, off + 64)?,
            has_event: atomic_at(r, off + 128)?,
            data: r.range((off + FIFO_HDR) as u64, size as u64)?,
            size,
        })
    }

    /// Copies `src` into the ring at byte position `pos` (wrapping).
    fn write_at(&self, pos: u32, src: &[u8]) {
        let o = (pos & (self.size - 1)) as usize;
        let first = src.len().min(self.size as usize - o);
        // SAFETY: `o + first <= size` and `src.len() - first <= size - first`: both copies
        // stay inside the ring checked in `new`; the consumer does not read this space
        // before `head` is published.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.data.add(o), first);
            std::ptr::copy_nonoverlapping(src.as_ptr().add(first), self.data, src.len() - first);
        }
    }

    fn read_at(&self, pos: u32, dst: &mut [u8]) {
        let o = (pos & (self.size - 1)) as usize;
        let first = dst.len().min(self.size as usize - o);
        // SAFETY: as in `write_at`; the caller checked `dst.len()` against the ring.
        unsafe {
            std::ptr::copy_nonoverlapping(self.data.add(o), dst.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(
                self.data,
                dst.as_mut_ptr().add(first),
                dst.len() - first,
            );
        }
    }

    /// Bytes free for the producer.
    pub fn free_bytes(&self) -> u32 {
        let used = self
            .head
            .load(Ordering::Relaxed)
            .wrapping_sub(self.tail.load(Ordering::Acquire));
        self.size.saturating_sub(used)
    }

    /// Producer: appends one datagram; false (nothing written) when it does not fit.
    pub fn push(&self, peer: SocketAddr, payload: &[u8]) -> bool {
        let need = rec_len(payload.len());
        if payload.len() > u32::MAX as usize / 2 || need > self.free_bytes() {
            return false;
        }
        let h = self.head.load(Ordering::Relaxed);
        let hdr = DgramHdr {
            len: payload.len() as u32,
            peer,
        };
        self.write_at(h, &hdr.encode());
        self.write_at(h.wrapping_add(DGRAM_HDR as u32), payload);
        self.head.store(h.wrapping_add(need), Ordering::Release);
        true
    }

    /// Consumer: takes the oldest datagram into `buf`.
    pub fn pop(&self, buf: &mut [u8]) -> Result<DgramHdr, PopError> {
        let t = self.tail.load(Ordering::Relaxed);
        let h = self.head.load(Ordering::Acquire);
        let used = h.wrapping_sub(t);
        if used == 0 {
            return Err(PopError::Empty);
        }
        if used > self.size || used < DGRAM_HDR as u32 || t % 8 != 0 {
            return Err(PopError::Corrupt);
        }
        let mut hb = [0u8; DGRAM_HDR];
        self.read_at(t, &mut hb);
        let hdr = DgramHdr::decode(&hb).ok_or(PopError::Corrupt)?;
        if hdr.len as u64 + DGRAM_HDR as u64 > used as u64 {
            return Err(PopError::Corrupt);
        }
        if hdr.len as usize > buf.len() {
            return Err(PopError::TooLong(hdr.len));
        }
        self.read_at(
            t.wrapping_add(DGRAM_HDR as u32),
            &mut buf[..hdr.len as usize],
        );
        self.tail
            .store(t.wrapping_add(rec_len(hdr.len as usize)), Ordering::Release);
        Ok(hdr)
    }

    /// Consumer: drops every record (a corrupt FIFO is reset this way).
    pub fn clear(&self) {
        self.tail
            .store(self.head.load(Ordering::Acquire) & !7, Ordering::Release);
    }

    /// Whether records are queued.
    pub fn is_empty(&self) -> bool {
        self.head.load(Ordering::Acquire) == self.tail.load(Ordering::Relaxed)
    }

    /// Producer: marks that an event is queued for this FIFO; true when the caller must
    /// queue it (no event was pending).
    pub fn set_event(&self) -> bool {
        self.has_event.swap(1, Ordering::AcqRel) == 0
    }

    /// Consumer: clears the event mark before draining (so the next push queues a new one).
    pub fn clear_event(&self) {
        self.has_event.store(0, Ordering::Release);
        fence(Ordering::SeqCst);
    }

    /// Producer: takes back an event mark it could not queue.
    pub fn unset_event(&self) {
        self.has_event.store(0, Ordering::Release);
    }
}

/// Header offset of an rx FIFO's owner word ([`Fifo::owner`]).
const OWNER_WORD: usize = 132;
/// Header offset of an rx FIFO's TCP state word ([`Fifo::state`]), which is a tx FIFO's
/// space-request word ([`Fifo::space_request`]).
const STATE_WORD: usize = 136;
/// Header offset of an rx FIFO's window-update request word ([`Fifo::wnd_request`]).
const WND_WORD: usize = 140;

/// TCP slot state bits (rx FIFO header word at [`Fifo::state`]), written by Sluice.
pub mod tcp_state {
    /// The connection is established (data may flow).
    pub const ESTABLISHED: u32 = 1;
    /// The peer closed its side: end of stream once the rx FIFO is drained.
    pub const PEER_FIN: u32 = 2;
    /// The connection was reset or refused.
    pub const RESET: u32 = 4;
}

/// High bit of an app event: a connection was accepted into this slot (the listener's slot
/// and both endpoints are in the slot's rx FIFO header).
pub const EVENT_ACCEPT: u32 = 0x8000_0000;

impl<'a> Fifo<'a> {
    /// Stream mode (TCP): bytes used, `None` when the positions are impossible.
    pub fn used(&self) -> Option<u32> {
        let u = self
            .head
            .load(Ordering::Acquire)
            .wrapping_sub(self.tail.load(Ordering::Acquire));
        (u <= self.size).then_some(u)
    }

    /// Ring size.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Stream producer: appends as many bytes of `src` as fit; returns how many.
    pub fn push_bytes(&self, src: &[u8]) -> usize {
        let h = self.head.load(Ordering::Relaxed);
        let used = h.wrapping_sub(self.tail.load(Ordering::Acquire));
        let free = self.size.saturating_sub(used) as usize;
        let n = src.len().min(free);
        if n == 0 {
            return 0;
        }
        self.write_at(h, &src[..n]);
        self.head.store(h.wrapping_add(n as u32), Ordering::Release);
        n
    }

    /// Stream producer: copies `src` to `off` bytes past the head without publishing it
    /// (TCP data received out of order waits there for the hole before it); false, nothing
    /// written, when it does not fit in the free space.
    pub fn write_ahead(&self, off: u32, src: &[u8]) -> bool {
        if off as u64 + src.len() as u64 > self.free_bytes() as u64 {
            return false;
        }
        let h = self.head.load(Ordering::Relaxed);
        self.write_at(h.wrapping_add(off), src);
        true
    }

    /// Stream producer: publishes `n` bytes past the head that [`Fifo::write_ahead`] wrote
    /// (at most the free space); returns how many.
    pub fn advance(&self, n: u32) -> u32 {
        let n = n.min(self.free_bytes());
        let h = self.head.load(Ordering::Relaxed);
        self.head.store(h.wrapping_add(n), Ordering::Release);
        n
    }

    /// Stream consumer: copies `dst.len()` bytes at `off` past the tail without consuming
    /// them (a retransmission reads the same bytes again); returns how many were there.
    pub fn peek_at(&self, off: u32, dst: &mut [u8]) -> usize {
        let Some(used) = self.used() else { return 0 };
        if off >= used {
            return 0;
        }
        let n = dst.len().min((used - off) as usize);
        let t = self.tail.load(Ordering::Relaxed);
        self.read_at(t.wrapping_add(off), &mut dst[..n]);
        n
    }

    /// Stream consumer: drops `n` bytes (at most what is there); returns how many.
    pub fn drop_front(&self, n: u32) -> u32 {
        let Some(used) = self.used() else { return 0 };
        let n = n.min(used);
        let t = self.tail.load(Ordering::Relaxed);
        self.tail.store(t.wrapping_add(n), Ordering::Release);
        n
    }

    /// Stream consumer: takes up to `dst.len()` bytes.
    pub fn pop_bytes(&self, dst: &mut [u8]) -> usize {
        let n = self.peek_at(0, dst);
        self.drop_front(n as u32);
        n
    }

    /// The header word `off` bytes on ([`STATE_WORD`] or [`WND_WORD`]).
    fn word(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off == STATE_WORD || off == WND_WORD || off == OWNER_WORD);
        // SAFETY: `head` is the first word of the 192-byte header checked in `new`; the
        // words lie inside it (before the endpoints at 144), 4-aligned, and are only
        // accessed atomically.
        unsafe { &*((self.head as *const AtomicU32 as *const u8).add(off) as *const AtomicU32) }
    }

    /// The slot's TCP state word ([`tcp_state`]); lives in the rx FIFO's header.
    pub fn state(&self) -> &AtomicU32 {
        self.word(STATE_WORD)
    }

    /// The slot's owner thread (rx FIFO header, written by Sluice before it hands the slot
    /// out): its events come through that thread's app queue, its tx events go to that
    /// thread's Sluice queue.
    pub fn owner(&self) -> &AtomicU32 {
        self.word(OWNER_WORD)
    }

    /// The window-update request word: Sluice sets it when it advertised a small window,
    /// the application clears it (and queues a tx event) after reading.
    pub fn wnd_request(&self) -> &AtomicU32 {
        self.word(WND_WORD)
    }

    /// The tx-space request word (tx FIFO's header): the application sets it when it found
    /// the FIFO full; Sluice clears it and queues an event for the slot once it has freed a
    /// quarter of the FIFO (TCP: acknowledged data; UDP: datagrams sent).
    pub fn space_request(&self) -> &AtomicU32 {
        self.word(STATE_WORD)
    }

    /// Producer: asks for a tx-space event ([`Fifo::space_request`]) after finding the FIFO
    /// full. The caller then tries once more: Sluice may have freed the space before it
    /// could see the request.
    pub fn want_space(&self) {
        self.space_request().store(1, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    /// Consumer (Sluice): whether the producer asked for space and a quarter of the FIFO is
    /// free now; takes the request (one event per request).
    pub fn take_space_request(&self) -> bool {
        std::sync::atomic::fence(Ordering::SeqCst);
        self.space_request().load(Ordering::Relaxed) != 0
            && self.free_bytes() >= self.size / 4
            && self.space_request().swap(0, Ordering::SeqCst) != 0
    }

    /// Empties the FIFO and zeroes its header words (event mark, state and request words):
    /// for a slot neither side uses, when Sluice hands it to a new owner. Positions start
    /// again at 0, so datagram records are aligned even after stream use.
    pub fn reset(&self) {
        self.head.store(0, Ordering::Relaxed);
        self.tail.store(0, Ordering::Relaxed);
        // A tx FIFO's space request is the word an rx FIFO keeps its state in.
        self.state().store(0, Ordering::Relaxed);
        self.wnd_request().store(0, Ordering::Relaxed);
        self.owner().store(0, Ordering::Relaxed);
        self.has_event.store(0, Ordering::Release);
    }

    /// Writes the connection's endpoints and the listener's slot into the header (an
    /// accepted connection; rx FIFO, by Sluice).
    pub fn set_endpoints(&self, local: SocketAddr, peer: SocketAddr, listener: u32) {
        let mut b = [0u8; 48];
        b[..DGRAM_HDR].copy_from_slice(
            &DgramHdr {
                len: listener,
                peer,
            }
            .encode(),
        );
        b[DGRAM_HDR..].copy_from_slice(
            &DgramHdr {
                len: 0,
                peer: local,
            }
            .encode(),
        );
        // SAFETY: 48 bytes at 144 lie inside the 192-byte header; the application reads
        // them only after the accept event (published with release order by the queue).
        unsafe {
            let p = (self.head as *const AtomicU32 as *mut u8).add(144);
            std::ptr::copy_nonoverlapping(b.as_ptr(), p, 48);
        }
    }

    /// Reads what [`Fifo::set_endpoints`] wrote: (local, peer, listener slot).
    pub fn endpoints(&self) -> Option<(SocketAddr, SocketAddr, u32)> {
        let mut b = [0u8; 48];
        // SAFETY: as in `set_endpoints`.
        unsafe {
            let p = (self.head as *const AtomicU32 as *const u8).add(144);
            std::ptr::copy_nonoverlapping(p, b.as_mut_ptr(), 48);
        }
        let a = DgramHdr::decode(b[..DGRAM_HDR].try_into().ok()?)?;
        let l = DgramHdr::decode(b[DGRAM_HDR..].try_into().ok()?)?;
        Some((l.peer, a.peer, a.len))
    }
}

/// The two FIFOs of slot `i`: (rx, tx). rx is written by Sluice, tx by the application.
pub fn slot_fifos<'a>(r: &'a Region, g: &Geometry, i: u32) -> Option<(Fifo<'a>, Fifo<'a>)> {
    if i >= g.n_slots {
        return None;
    }
    let o = g.slot_off(i);
    Some((
        Fifo::new(r, o, g.fifo_size)?,
        Fifo::new(r, o + g.fifo_bytes(), g.fifo_size)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg() -> (Region, Geometry) {
        let g = Geometry {
            n_slots: 2,
            fifo_size: 4096,
            evq_len: 16,
            n_queues: 2,
        };
        let r = Region::create("seg-test", g.size()).unwrap();
        init_header(&r, &g);
        (r, g)
    }

    #[test]
    fn header_roundtrip_and_bad_geometry_refused() {
        let (r, g) = seg();
        assert_eq!(read_header(&r), Ok(g));
        let bad = Geometry {
            fifo_size: 5000,
            ..g
        };
        assert!(!bad.valid());
        assert!(!Geometry { n_queues: 0, ..g }.valid());
        assert!(!Geometry {
            n_queues: MAX_QUEUES + 1,
            ..g
        }
        .valid());
    }

    #[test]
    fn another_layout_version_is_refused_with_its_number() {
        let (r, g) = seg();
        write_header(&r, &g, 1);
        assert_eq!(read_header(&r), Err(HeaderError::Version(1)));
        assert!(HeaderError::Version(1).to_string().contains("version 1"));
    }

    #[test]
    fn queues_and_slots_do_not_overlap() {
        let (_, g) = seg();
        let q = g.evq_bytes();
        assert_eq!(g.app_evq_off(0) + q, g.sluice_evq_off(0));
        assert_eq!(g.sluice_evq_off(0) + q, g.app_evq_off(1));
        assert!(g.sluice_evq_off(1) + q <= g.slot_off(0));
    }

    #[test]
    fn each_slot_keeps_its_owner_until_reset() {
        let (r, g) = seg();
        let (rx, _) = slot_fifos(&r, &g, 1).unwrap();
        rx.owner().store(1, Ordering::Relaxed);
        rx.set_endpoints(
            "1.2.3.4:5".parse().unwrap(),
            "5.6.7.8:9".parse().unwrap(),
            0,
        );
        assert_eq!(
            rx.owner().load(Ordering::Relaxed),
            1,
            "not under the endpoints"
        );
        rx.reset();
        assert_eq!(rx.owner().load(Ordering::Relaxed), 0);
    }

    #[test]
    fn app_queues_pop_round_robin() {
        let (r, g) = seg();
        let (q0, q1) = (EvQ::app(&r, &g, 0).unwrap(), EvQ::app(&r, &g, 1).unwrap());
        assert!(EvQ::app(&r, &g, 2).is_none());
        for v in [1, 2, 3] {
            assert!(q0.push(v));
        }
        assert!(q1.push(10));
        let qs = AppQueues::new(&r, &g).unwrap();
        let mut next = 0;
        let got: Vec<u32> = std::iter::from_fn(|| qs.pop(&mut next)).collect();
        assert_eq!(got, [1, 10, 2, 3]);
        assert!(qs.is_empty());
    }

    #[test]
    fn a_push_on_any_queue_signals_the_one_sleep() {
        let (r, g) = seg();
        let qs = AppQueues::new(&r, &g).unwrap();
        let q1 = EvQ::app(&r, &g, 1).unwrap();
        let q0 = EvQ::app(&r, &g, 0).unwrap();
        assert!(qs.prepare_sleep());
        assert!(q1.push(7));
        assert!(
            q1.needs_signal(),
            "queue 1's producer sees the announcement"
        );
        assert!(q0.push(8));
        assert!(!q0.needs_signal(), "taken once");
        assert!(!qs.woke(), "a producer took it");
        // Queue 0 empty again: only queue 1's entry may keep the consumer up.
        assert_eq!(q0.pop(), Some(8));
        assert!(
            !qs.prepare_sleep(),
            "entries pending in a queue other than 0"
        );
        assert!(!q0.needs_signal(), "taken back");
    }

    /// Two producers (threads) taking turns, one consumer that sleeps on one eventfd
    /// whenever the queues are empty: producer `i % 2` queues entry `i` once entry `i - 1`
    /// was consumed, so one entry is in flight at a time and a lost wake-up stalls all three
    /// (the consumer's sleep then times out).
    #[test]
    fn two_producers_never_lose_a_wake_up() {
        use std::sync::atomic::AtomicU64;
        use std::sync::Arc;
        const N: u64 = 5_000;
        let g = Geometry {
            n_slots: 16,
            fifo_size: 4096,
            evq_len: 16,
            n_queues: 2,
        };
        let r = Arc::new(Region::create("seg-stress", g.size()).unwrap());
        init_header(&r, &g);
        let efd = Arc::new(sluice_infra::shm::eventfd().unwrap());
        let done = Arc::new(AtomicU64::new(0));
        let producers: Vec<_> = (0..2u32)
            .map(|t| {
                let (r, efd, done) = (r.clone(), efd.clone(), done.clone());
                std::thread::spawn(move || {
                    use std::os::fd::AsRawFd;
                    let q = EvQ::app(&r, &g, t).unwrap();
                    for i in (t as u64..2 * N).step_by(2) {
                        let mut k = 0u32;
                        while done.load(Ordering::Acquire) < i {
                            k += 1;
                            if k % 64 == 0 {
                                std::thread::yield_now();
                            } else {
                                std::hint::spin_loop();
                            }
                        }
                        assert!(q.push(t));
                        if q.needs_signal() {
                            sluice_infra::shm::signal(efd.as_raw_fd());
                        }
                    }
                })
            })
            .collect();
        let qs = AppQueues::new(&r, &g).unwrap();
        let (mut next, mut sleeps) = (0, 0u64);
        while done.load(Ordering::Relaxed) < 2 * N {
            if let Some(t) = qs.pop(&mut next) {
                assert_eq!(t as u64, done.load(Ordering::Relaxed) % 2, "in turn");
                done.fetch_add(1, Ordering::Release);
                continue;
            }
            if !qs.prepare_sleep() {
                continue;
            }
            sleeps += 1;
            let mut p = libc::pollfd {
                fd: std::os::fd::AsRawFd::as_raw_fd(&*efd),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut p, 1, 2000) };
            assert_eq!(
                n, 1,
                "a wake-up was lost: both producers wait, nothing signalled"
            );
            qs.woke();
            let mut v = 0u64;
            // SAFETY: reads 8 bytes into a local from a non-blocking eventfd.
            unsafe { libc::read(p.fd, &mut v as *mut u64 as *mut libc::c_void, 8) };
        }
        for p in producers {
            p.join().unwrap();
        }
        assert!(
            sleeps > 0,
            "the consumer slept (the handshake was exercised)"
        );
    }

    #[test]
    fn fifo_wraps_and_keeps_exact_payloads() {
        let (r, g) = seg();
        let (rx, _tx) = slot_fifos(&r, &g, 1).unwrap();
        let peer: SocketAddr = "[2001:db8::1]:4000".parse().unwrap();
        let mut buf = [0u8; 2048];
        // 1000-byte records (1024 with header and padding) wrap many times.
        for i in 0..50u32 {
            let p: Vec<u8> = (0..1000 + i as usize % 7)
                .map(|k| (k as u32 ^ i) as u8)
                .collect();
            assert!(rx.push(peer, &p));
            let h = rx.pop(&mut buf).unwrap();
            assert_eq!(h.peer, peer);
            assert_eq!(&buf[..h.len as usize], &p[..]);
        }
        assert_eq!(rx.pop(&mut buf), Err(PopError::Empty));
        // Fill: 4096 / 1024 records fit, the fifth does not.
        let p = [7u8; 1000];
        for _ in 0..4 {
            assert!(rx.push(peer, &p));
        }
        assert!(!rx.push(peer, &p));
        assert_eq!(rx.pop(&mut buf[..10]), Err(PopError::TooLong(1000)));
    }

    #[test]
    fn corrupt_positions_read_as_corrupt_never_out_of_bounds() {
        let (r, g) = seg();
        let (rx, _) = slot_fifos(&r, &g, 0).unwrap();
        rx.head.store(1 << 30, Ordering::Relaxed);
        let mut buf = [0u8; 64];
        assert_eq!(rx.pop(&mut buf), Err(PopError::Corrupt));
        rx.clear();
        assert_eq!(rx.pop(&mut buf), Err(PopError::Empty));
        // A header claiming more than was written.
        assert!(rx.push("1.2.3.4:5".parse().unwrap(), b"abc"));
        let o = g.slot_off(0) + FIFO_HDR;
        let p = r.range(o as u64, 4).unwrap();
        // SAFETY: in-bounds test write.
        unsafe { std::ptr::write_unaligned(p as *mut u32, 5000) };
        assert_eq!(rx.pop(&mut buf), Err(PopError::Corrupt));
    }

    #[test]
    fn a_reset_fifo_keeps_no_position_mark_state_or_request() {
        let (r, g) = seg();
        let (rx, tx) = slot_fifos(&r, &g, 0).unwrap();
        assert_eq!(rx.push_bytes(b"abc"), 3);
        assert!(rx.set_event());
        rx.state().store(tcp_state::ESTABLISHED, Ordering::Relaxed);
        rx.wnd_request().store(1, Ordering::Relaxed);
        assert_eq!(tx.push_bytes(&[1; 4096]), 4096);
        tx.want_space();
        rx.reset();
        tx.reset();
        assert_eq!((rx.used(), tx.used()), (Some(0), Some(0)));
        assert_eq!(rx.tail.load(Ordering::Relaxed), 0, "positions start at 0");
        assert_eq!(rx.state().load(Ordering::Relaxed), 0);
        assert_eq!(rx.wnd_request().load(Ordering::Relaxed), 0);
        assert_eq!(tx.space_request().load(Ordering::Relaxed), 0);
        assert!(rx.set_event(), "no event mark left");
        assert!(!tx.take_space_request());
    }

    #[test]
    fn event_queue_signals_a_sleeping_consumer_once() {
        let (r, g) = seg();
        let q = EvQ::new(&r, g.app_evq_off(0), g.evq_len).unwrap();
        assert!(q.prepare_sleep());
        assert!(q.push(3));
        assert!(q.needs_signal());
        assert!(!q.needs_signal());
        assert_eq!(q.pop(), Some(3));
        for i in 0..16 {
            assert!(q.push(i));
        }
        assert!(!q.push(99), "full");
        assert!(!q.prepare_sleep(), "entries pending");
    }

    #[test]
    fn woke_says_whether_a_producer_took_the_announcement() {
        let (r, g) = seg();
        let q = EvQ::new(&r, g.app_evq_off(0), g.evq_len).unwrap();
        q.announce_sleep();
        assert!(q.woke(), "nobody signalled: taken back");
        assert!(!q.woke(), "no announcement up");
        q.announce_sleep();
        assert!(q.push(1));
        assert!(q.needs_signal());
        assert!(!q.woke(), "the producer took it (and signalled)");
    }

    #[test]
    fn an_announced_sleep_is_signalled_with_other_events_queued() {
        let (r, g) = seg();
        let q = EvQ::new(&r, g.app_evq_off(0), g.evq_len).unwrap();
        assert!(q.push(1)); // another slot's event, left for the caller
        assert!(!q.prepare_sleep(), "entries pending: no sleep");
        assert!(q.push(2));
        assert!(!q.needs_signal(), "not announced");
        q.announce_sleep();
        assert!(q.push(3));
        assert!(q.needs_signal(), "announced anyway: the push signals");
        assert!(!q.needs_signal(), "once");
        assert_eq!(
            std::iter::from_fn(|| q.pop()).collect::<Vec<_>>(),
            [1, 2, 3]
        );
    }
}
