//! The shared segment one attached application and Sluice exchange data through: a memfd
//! created by Sluice, mapped by both. Layout (all integers little-endian, offsets from 0):
//!
//! ```text
//! 0      header: magic u64, version u32, n_slots u32, fifo_size u32, evq_len u32
//! 4096   app event queue  (Sluice produces, the application consumes): slot numbers
//!        whose rx FIFO got data
//! +evq   Sluice event queue (the application produces, Sluice consumes): slot numbers
//!        whose tx FIFO got data
//! slots  n_slots × (rx FIFO, tx FIFO), each FIFO_HDR + fifo_size bytes
//! ```
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
/// Layout version.
pub const VERSION: u32 = 1;
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
}

impl Geometry {
    /// Bytes of one event queue.
    pub fn evq_bytes(&self) -> usize {
        (EVQ_HDR + 4 * self.evq_len as usize).next_multiple_of(64)
    }
    /// Offset of the app event queue.
    pub fn app_evq_off(&self) -> usize {
        HDR
    }
    /// Offset of Sluice's event queue.
    pub fn sluice_evq_off(&self) -> usize {
        HDR + self.evq_bytes()
    }
    /// Bytes of one FIFO.
    pub fn fifo_bytes(&self) -> usize {
        FIFO_HDR + self.fifo_size as usize
    }
    /// Offset of slot `i`'s rx FIFO (its tx FIFO follows).
    pub fn slot_off(&self, i: u32) -> usize {
        (HDR + 2 * self.evq_bytes()).next_multiple_of(4096) + 2 * i as usize * self.fifo_bytes()
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
            // At most one event per slot is pending, so a queue never overflows.
            && self.evq_len >= self.n_slots
            && (self.size() as u64) <= sluice_infra::shm::MAX_REGION_SIZE
    }
}

/// Writes the header of a fresh (zeroed) segment.
pub fn init_header(r: &Region, g: &Geometry) {
    let Some(p) = r.range(0, 24) else { return };
    let mut h = [0u8; 24];
    h[0..8].copy_from_slice(&MAGIC.to_le_bytes());
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&g.n_slots.to_le_bytes());
    h[16..20].copy_from_slice(&g.fifo_size.to_le_bytes());
    h[20..24].copy_from_slice(&g.evq_len.to_le_bytes());
    // SAFETY: `range` checked that 24 bytes at `p` lie inside the mapping.
    unsafe { std::ptr::copy_nonoverlapping(h.as_ptr(), p, 24) };
}

/// Reads and checks the header of a mapped segment.
pub fn read_header(r: &Region) -> Option<Geometry> {
    let p = r.range(0, 24)?;
    let mut h = [0u8; 24];
    // SAFETY: `range` checked the 24 bytes; a concurrent writer can only change values,
    // which are validated below.
    unsafe { std::ptr::copy_nonoverlapping(p, h.as_mut_ptr(), 24) };
    let u32_at = |o: usize| u32::from_le_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]);
    if u64::from_le_bytes(h[0..8].try_into().ok()?) != MAGIC || u32_at(8) != VERSION {
        return None;
    }
    let g = Geometry {
        n_slots: u32_at(12),
        fifo_size: u32_at(16),
        evq_len: u32_at(20),
    };
    (g.valid() && g.size() <= r.size()).then_some(g)
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
        debug_assert!(off == STATE_WORD || off == WND_WORD);
        // SAFETY: `head` is the first word of the 192-byte header checked in `new`; both
        // words lie inside it (before the endpoints at 144), 4-aligned, and are only
        // accessed atomically.
        unsafe { &*((self.head as *const AtomicU32 as *const u8).add(off) as *const AtomicU32) }
    }

    /// The slot's TCP state word ([`tcp_state`]); lives in the rx FIFO's header.
    pub fn state(&self) -> &AtomicU32 {
        self.word(STATE_WORD)
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
        };
        let r = Region::create("seg-test", g.size()).unwrap();
        init_header(&r, &g);
        (r, g)
    }

    #[test]
    fn header_roundtrip_and_bad_geometry_refused() {
        let (r, g) = seg();
        assert_eq!(read_header(&r), Some(g));
        let bad = Geometry {
            fifo_size: 5000,
            ..g
        };
        assert!(!bad.valid());
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
        let q = EvQ::new(&r, g.app_evq_off(), g.evq_len).unwrap();
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
        let q = EvQ::new(&r, g.app_evq_off(), g.evq_len).unwrap();
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
        let q = EvQ::new(&r, g.app_evq_off(), g.evq_len).unwrap();
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
