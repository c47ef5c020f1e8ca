//! The host stack's graph nodes (all run on thread 0, which owns the sessions in this
//! version; see docs/hoststack.md for the per-thread design).
//!
//! `udp4-input` / `udp6-input` (internal; one generic node per family): UDP datagrams for a
//! port a session bound, from `ip4-local`/`ip6-local` (`sluice_vnet::ip_local`), at
//! their IP header. The payload is copied into the session's rx FIFO and the buffer freed.
//! - uses: the IP and UDP headers; `flags` (`L4_CHECKSUM_CORRECT`: a driver checked it).
//! - sets: `error` on drops.
//! - next: `error-drop` (0) for every drop; delivered buffers are freed here.
//! - counters: `delivered` (info: queued to an application), `no_listener` (no session
//!   for the address/port), `bad_checksum`, `short` (truncated IP/UDP header or UDP length
//!   beyond the packet), `fragment` (IPv4 fragments: no reassembly yet), `chained`
//!   (datagram spread over several buffers: not yet), `fifo_full` (the application does
//!   not read fast enough), `wrong_thread` (received on a worker: sessions live on thread
//!   0 in this version), `bad_header` (IPv6 extension header chain malformed).
//!
//! `session-queue` (input, thread 0): takes the datagrams applications queued in their tx
//! FIFOs (announced through their event queues, woken by their eventfds) and builds the
//! IPv4/IPv6 and UDP headers in front of each (the udp-output step), locally originated,
//! FIB 0. It also sends the TCP connections' segments (data from their tx FIFOs, ACKs,
//! retransmissions on their timers) and the RSTs `tcp4-input` asks for — IPv4 only, so
//! always to `ip4-lookup`.
//! - uses: the applications' event queues (session slots with data to send, at most
//!   `PENDING_MAX` held), their tx FIFOs and eventfd interrupts; no packet metadata.
//! - sets: the whole packet at `current_data`; `flags` `LOCALLY_ORIGINATED`; `rx_if` 0;
//!   `ip.fib_index` 0.
//! - next: `ip4-lookup` (0), `ip6-lookup` (1), `error-drop` (2).
//! - counters: `sent` (info), `no_buffer` (allocation failed: left in the FIFO, retried),
//!   `bad_peer` (a datagram to a peer of the other family, port 0 or an unspecified
//!   address: dropped), `corrupt_fifo` (an application wrote impossible positions or
//!   lengths: its FIFO is emptied), `tcp_sent` (info: TCP segments), `tcp_rst_sent` (info).
//!
//! `tcp4-input` (internal): TCP segments for Sluice's IPv4 addresses, from `ip4-local`
//! (protocol 6 is registered while TCP sessions exist). The header is checked and the
//! segment handed to its connection or listener (`tcpsess`); the buffer is always freed
//! here (data is copied into the rx FIFO, replies are built by `session-queue`).
//! - uses: the IPv4 and TCP headers; `flags` (`L4_CHECKSUM_CORRECT`, `NEXT_PRESENT`).
//! - sets: `error` on drops.
//! - next: `error-drop` (0).
//! - counters: `segments` (info: taken by a connection or listener), `no_listener` (no
//!   connection or listener: a RST is sent unless it was one), `bad_checksum`, `short`
//!   (truncated IP/TCP header), `bad_offset` (data offset below 5 words or past the
//!   segment), `fragment`, `chained`, `syn_backlog_full` (SYN dropped: the listener's
//!   handshake backlog is full), `wrong_thread`.
//!
//! `session-queue` also sends TCP: segments of the connections `tcp4-input`, the timers or
//! the applications' tx events queued (data peeked from the tx FIFO, headers, checksum), and
//! RSTs; counters `tcp_sent` (info), `tcp_rst_sent` (info).

use crate::session::{Proto, SessionMain, NO_SLOT};
use crate::tcp::{self, Out, Seg};
use crate::tcpsess::TcpDrop;
use sluice_buffer::{flags, BufIdx, Buffer};
use sluice_graph::{CounterDesc, Cx, Next, NodeFn, NodeKind, NodeRegistration, FRAME_SIZE};
use sluice_session::seg::PopError;
use sluice_wire::checksum;
use sluice_wire::ipv6::Ipv6Packet;
use sluice_wire::tcp::{TcpOption, TcpPacket};
use sluice_wire::udp::UdpPacket;
use std::any::Any;
use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, MutexGuard};

/// Most tx events `session-queue` holds between polls (it drains one frame per call).
const PENDING_MAX: usize = 16 * FRAME_SIZE;

/// `udp4-input`.
pub const UDP4_INPUT: &str = "udp4-input";
/// `udp6-input`.
pub const UDP6_INPUT: &str = "udp6-input";
/// `session-queue`.
pub const SESSION_QUEUE: &str = "session-queue";
/// `tcp4-input`.
pub const TCP4_INPUT: &str = "tcp4-input";

/// The state every node shares.
pub type Shared = Arc<Mutex<SessionMain>>;

pub(crate) fn lock(s: &Shared) -> MutexGuard<'_, SessionMain> {
    match s.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

mod rx {
    use sluice_graph::Next;
    pub const DROP: Next = Next(0);
    pub const C_DELIVERED: usize = 0;
    pub const E_NO_LISTENER: u16 = 1;
    pub const E_BAD_CHECKSUM: u16 = 2;
    pub const E_SHORT: u16 = 3;
    pub const E_FRAGMENT: u16 = 4;
    pub const E_CHAINED: u16 = 5;
    pub const E_FIFO_FULL: u16 = 6;
    pub const E_WRONG_THREAD: u16 = 7;
    pub const E_BAD_HEADER: u16 = 8;
}

/// `udp4-input` (`V6` false) and `udp6-input` (`V6` true).
pub struct UdpInput<const V6: bool> {
    sm: Shared,
    thread: usize,
    done: Vec<BufIdx>,
    drops: Vec<BufIdx>,
}

/// Source, destination and UDP offset of a packet at its IP header.
#[inline(always)]
fn parse_ip<const V6: bool>(d: &[u8]) -> Result<(IpAddr, IpAddr, usize), u16> {
    if V6 {
        let p = Ipv6Packet::new_checked(d).map_err(|_| rx::E_SHORT)?;
        let (_, off) = p.walk_extensions().map_err(|_| rx::E_BAD_HEADER)?;
        let a = |o: usize| -> IpAddr {
            let mut b = [0u8; 16];
            b.copy_from_slice(&d[o..o + 16]);
            IpAddr::V6(Ipv6Addr::from(b))
        };
        Ok((a(8), a(24), off))
    } else {
        if d.len() < 20 {
            return Err(rx::E_SHORT);
        }
        let ihl = (d[0] & 0xf) as usize * 4;
        if ihl < 20 || d.len() < ihl {
            return Err(rx::E_SHORT);
        }
        if u16::from_be_bytes([d[6], d[7]]) & 0x3fff != 0 {
            return Err(rx::E_FRAGMENT);
        }
        let src = IpAddr::V4(Ipv4Addr::new(d[12], d[13], d[14], d[15]));
        let dst = IpAddr::V4(Ipv4Addr::new(d[16], d[17], d[18], d[19]));
        Ok((src, dst, ihl))
    }
}

impl<const V6: bool> UdpInput<V6> {
    /// Delivers one datagram; `Err(counter)` to drop it.
    #[inline(always)]
    fn one(sm: &mut SessionMain, b: &Buffer<'_>) -> Result<(), u16> {
        if b.hdr.flags & flags::NEXT_PRESENT != 0 {
            return Err(rx::E_CHAINED);
        }
        let d = b.data();
        let (src, dst, off) = parse_ip::<V6>(d)?;
        let ip_end = if V6 {
            40 + u16::from_be_bytes([d[4], d[5]]) as usize
        } else {
            u16::from_be_bytes([d[2], d[3]]) as usize
        };
        let l4 = d.get(off..ip_end.min(d.len())).ok_or(rx::E_SHORT)?;
        let u = UdpPacket::new_checked(l4).map_err(|_| rx::E_SHORT)?;
        u.check_len().map_err(|_| rx::E_SHORT)?;
        if b.hdr.flags & flags::L4_CHECKSUM_CORRECT == 0 {
            let ok = match (src, dst) {
                (IpAddr::V4(s), IpAddr::V4(t)) => u.verify_checksum_v4(s, t),
                (IpAddr::V6(s), IpAddr::V6(t)) => u.verify_checksum_v6(s, t),
                _ => false,
            };
            if !ok {
                return Err(rx::E_BAD_CHECKSUM);
            }
        }
        let local = SocketAddr::new(dst, u.dst_port());
        let remote = SocketAddr::new(src, u.src_port());
        let sid = sm.lookup(local, remote).ok_or(rx::E_NO_LISTENER)?;
        let s = sm.sessions[sid as usize]
            .as_ref()
            .ok_or(rx::E_NO_LISTENER)?;
        let (ai, slot) = (s.app, s.slot);
        let app = sm
            .apps
            .get(ai as usize)
            .and_then(|a| a.as_ref())
            .ok_or(rx::E_NO_LISTENER)?;
        let (fifo, _) = app.fifos(slot).ok_or(rx::E_NO_LISTENER)?;
        let payload = u.payload();
        let n = payload.len() as u64;
        let pushed = fifo.push(remote, payload);
        if pushed && fifo.set_event() {
            if let Some(q) = app.app_evq() {
                if !q.push(slot) {
                    fifo.unset_event();
                }
                if q.needs_signal() {
                    sluice_infra::shm::signal(app.app_efd.as_raw_fd());
                }
            }
        }
        let st = &mut sm.sessions[sid as usize]
            .as_mut()
            .ok_or(rx::E_NO_LISTENER)?
            .stats;
        if !pushed {
            st.rx_full += 1;
            return Err(rx::E_FIFO_FULL);
        }
        st.rx += 1;
        st.rx_bytes += n;
        Ok(())
    }
}

/// The input nodes' frame loop: `one` takes each buffer under the session lock (counted
/// drops go to `drop` with their reason, taken buffers are freed and counted in `taken`).
/// Sessions live on thread 0: elsewhere every buffer is `wrong_thread`.
#[allow(clippy::too_many_arguments)]
fn input_frame(
    cx: &mut Cx,
    frame: &[BufIdx],
    sm: &Shared,
    thread: usize,
    (wrong_thread, taken, drop_next): (u16, usize, Next),
    done: &mut Vec<BufIdx>,
    drops: &mut Vec<BufIdx>,
    mut one: impl FnMut(&mut SessionMain, &Buffer<'_>) -> Result<(), u16>,
) {
    done.clear();
    drops.clear();
    let mut g = lock(sm);
    for &bi in frame {
        // SAFETY: the frame's buffers are owned by this node, one view at a time.
        let b = unsafe { cx.buffer(bi) };
        let r = if thread != 0 {
            Err(wrong_thread)
        } else {
            one(&mut g, &b)
        };
        match r {
            Ok(()) => done.push(bi),
            Err(e) => {
                b.hdr.error = cx.error(e);
                drops.push(bi);
            }
        }
    }
    drop(g);
    cx.count(taken, done.len() as u64);
    cx.free(done);
    cx.enqueue_all(drop_next, drops);
}

impl<const V6: bool> NodeFn for UdpInput<V6> {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        let sm = self.sm.clone();
        input_frame(
            cx,
            frame,
            &sm,
            self.thread,
            (rx::E_WRONG_THREAD, rx::C_DELIVERED, rx::DROP),
            &mut self.done,
            &mut self.drops,
            Self::one,
        );
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

mod tx {
    use sluice_graph::Next;
    pub const IP4: Next = Next(0);
    pub const IP6: Next = Next(1);
    pub const DROP: Next = Next(2);
    pub const C_SENT: usize = 0;
    pub const E_NO_BUFFER: u16 = 1;
    pub const E_BAD_PEER: u16 = 2;
    pub const E_CORRUPT: u16 = 3;
    pub const C_TCP_SENT: usize = 4;
    pub const C_RST_SENT: usize = 5;
}

mod trx {
    use sluice_graph::Next;
    pub const DROP: Next = Next(0);
    pub const C_SEGMENTS: usize = 0;
    pub const E_NO_LISTENER: u16 = 1;
    pub const E_BAD_CHECKSUM: u16 = 2;
    pub const E_SHORT: u16 = 3;
    pub const E_BAD_OFFSET: u16 = 4;
    pub const E_FRAGMENT: u16 = 5;
    pub const E_CHAINED: u16 = 6;
    pub const E_BACKLOG: u16 = 7;
    pub const E_WRONG_THREAD: u16 = 8;
}

/// `tcp4-input`.
pub struct TcpInput {
    sm: Shared,
    thread: usize,
    done: Vec<BufIdx>,
    drops: Vec<BufIdx>,
}

impl TcpInput {
    fn one(sm: &mut SessionMain, b: &Buffer<'_>, now: std::time::Instant) -> Result<(), u16> {
        if b.hdr.flags & flags::NEXT_PRESENT != 0 {
            return Err(trx::E_CHAINED);
        }
        let d = b.data();
        let (src, dst, off) = parse_ip::<false>(d).map_err(|e| match e {
            rx::E_FRAGMENT => trx::E_FRAGMENT,
            _ => trx::E_SHORT,
        })?;
        let ip_end = u16::from_be_bytes([d[2], d[3]]) as usize;
        let l4 = d.get(off..ip_end.min(d.len())).ok_or(trx::E_SHORT)?;
        if l4.len() < 20 {
            return Err(trx::E_SHORT);
        }
        // With the 20 bytes there, what new_checked refuses is the data offset.
        let p = TcpPacket::new_checked(l4).map_err(|_| trx::E_BAD_OFFSET)?;
        let (IpAddr::V4(s4), IpAddr::V4(d4)) = (src, dst) else {
            return Err(trx::E_SHORT);
        };
        if b.hdr.flags & flags::L4_CHECKSUM_CORRECT == 0 && !p.verify_checksum_v4(s4, d4) {
            return Err(trx::E_BAD_CHECKSUM);
        }
        let mut mss = None;
        // Malformed options are ignored, not fatal: the walk stops at the first.
        for o in p.options_iter() {
            match o {
                Ok(TcpOption::Mss(m)) => mss = Some(m),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        let seg = Seg {
            seq: p.seq_number(),
            ack: p.ack_number(),
            flags: (p.flags().0 & 0x1f) as u8,
            wnd: p.window(),
            mss,
            data: p.payload(),
        };
        let local = SocketAddr::new(dst, p.dst_port());
        let remote = SocketAddr::new(src, p.src_port());
        sm.tcp_input(local, remote, &seg, now).map_err(|e| match e {
            TcpDrop::NoListener => trx::E_NO_LISTENER,
            TcpDrop::BacklogFull => trx::E_BACKLOG,
        })
    }
}

impl NodeFn for TcpInput {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        let sm = self.sm.clone();
        let now = std::time::Instant::now();
        input_frame(
            cx,
            frame,
            &sm,
            self.thread,
            (trx::E_WRONG_THREAD, trx::C_SEGMENTS, trx::DROP),
            &mut self.done,
            &mut self.drops,
            |sm, b| Self::one(sm, b, now),
        );
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// Writes an IPv4 header for `l4len` bytes of protocol `proto` at `h[..20]`.
fn ip4_header(h: &mut [u8], s: Ipv4Addr, d: Ipv4Addr, proto: u8, l4len: usize, ip_id: u16) {
    let total = 20 + l4len;
    h[0] = 0x45;
    h[1] = 0;
    h[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    h[4..6].copy_from_slice(&ip_id.to_be_bytes());
    h[6..8].copy_from_slice(&[0x40, 0]); // DF
    h[8] = 64;
    h[9] = proto;
    h[10..12].fill(0);
    h[12..16].copy_from_slice(&s.octets());
    h[16..20].copy_from_slice(&d.octets());
    let c = checksum::internet_checksum(&h[..20]);
    h[10..12].copy_from_slice(&c.to_be_bytes());
}

/// Builds one TCP segment (IPv4) into a new buffer; payload peeked from `tx`.
#[allow(clippy::too_many_arguments)]
fn tcp_segment(
    cx: &mut Cx,
    local: SocketAddr,
    remote: SocketAddr,
    o: &Out,
    tx: Option<&sluice_session::seg::Fifo<'_>>,
    ip_id: u16,
) -> Option<BufIdx> {
    let (IpAddr::V4(s), IpAddr::V4(d)) = (local.ip(), remote.ip()) else {
        return None;
    };
    let mut bi = [BufIdx(0)];
    if cx.bufs().alloc(&mut bi) != 1 {
        return None;
    }
    let bi = bi[0];
    // SAFETY: freshly allocated, owned here, one view.
    let mut b = unsafe { cx.buffer(bi) };
    let raw = b.raw_data_mut();
    let thl = if o.mss.is_some() { 24 } else { 20 };
    let hl = 20 + thl;
    let mut len = o.len as usize;
    if hl + len > raw.len() {
        len = raw.len() - hl;
    }
    if len > 0 {
        let got = tx
            .map(|f| f.peek_at(o.off, &mut raw[hl..hl + len]))
            .unwrap_or(0);
        len = got;
    }
    {
        let t = &mut raw[20..hl + len];
        t[0..2].copy_from_slice(&local.port().to_be_bytes());
        t[2..4].copy_from_slice(&remote.port().to_be_bytes());
        t[4..8].copy_from_slice(&o.seq.to_be_bytes());
        let ack = if o.flags & tcp::flag::ACK != 0 {
            o.ack
        } else {
            0
        };
        t[8..12].copy_from_slice(&ack.to_be_bytes());
        t[12] = ((thl / 4) as u8) << 4;
        t[13] = o.flags;
        t[14..16].copy_from_slice(&o.wnd.to_be_bytes());
        t[16..20].fill(0);
        if let Some(m) = o.mss {
            t[20..24].copy_from_slice(&[2, 4, (m >> 8) as u8, m as u8]);
        }
        let mut p = TcpPacket::new_unchecked(&mut t[..]);
        p.fill_checksum_v4(s, d);
    }
    ip4_header(&mut raw[..20], s, d, 6, thl + len, ip_id);
    b.hdr.current_data = 0;
    b.set_len(hl + len);
    b.hdr.flags |= flags::LOCALLY_ORIGINATED;
    b.hdr.rx_if = 0;
    b.hdr.ip.fib_index = 0;
    Some(bi)
}

/// `session-queue`.
pub struct SessionQueue {
    sm: Shared,
    kick: Arc<std::sync::atomic::AtomicBool>,
    /// The attached applications' segments and geometry, so that `active()` sees queued
    /// events without the lock (an eventfd only fires when this thread announced it
    /// sleeps, and a busy thread collects it late).
    watch: Vec<(
        Arc<sluice_infra::shm::Region>,
        sluice_session::seg::Geometry,
    )>,
    thread: usize,
    busy: bool,
    pending: VecDeque<(u32, u32)>,
    irqs: Vec<u32>,
    out4: Vec<BufIdx>,
    out6: Vec<BufIdx>,
    drops: Vec<BufIdx>,
    ip_id: u16,
    tcp_kick: Arc<std::sync::atomic::AtomicBool>,
    tcp_sent: u64,
    /// The next TCP timer (RTO, persist, TIME-WAIT).
    timer_at: Option<std::time::Instant>,
}

/// What building one packet did.
enum Built {
    /// A packet queued for `ip4-lookup` or `ip6-lookup`.
    Packet,
    /// The FIFO is empty.
    Empty,
    /// No buffer: the datagram stays queued, retried on the next call.
    Stalled,
    /// A datagram dropped, counted.
    Dropped,
}

/// Writes IPv4/IPv6 and UDP headers in front of `len` payload bytes already at
/// `raw[hl..]` (`hl` = 28 or 48). Returns the packet length, or None when the addresses
/// are not of one family.
fn push_headers(
    raw: &mut [u8],
    local: SocketAddr,
    peer: SocketAddr,
    len: usize,
    ip_id: u16,
) -> Option<usize> {
    let (hl, ulen) = match (local.ip(), peer.ip()) {
        (IpAddr::V4(_), IpAddr::V4(_)) => (28, 8 + len),
        (IpAddr::V6(_), IpAddr::V6(_)) => (48, 8 + len),
        _ => return None,
    };
    let total = hl + len;
    let u = &mut raw[hl - 8..total];
    u[0..2].copy_from_slice(&local.port().to_be_bytes());
    u[2..4].copy_from_slice(&peer.port().to_be_bytes());
    u[4..6].copy_from_slice(&(ulen as u16).to_be_bytes());
    let mut up = UdpPacket::new_unchecked(u);
    match (local.ip(), peer.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            up.fill_checksum_v4(s, d);
            ip4_header(&mut raw[..20], s, d, 17, ulen, ip_id);
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            up.fill_checksum_v6(s, d);
            let h = &mut raw[..40];
            h[0..4].copy_from_slice(&[0x60, 0, 0, 0]);
            h[4..6].copy_from_slice(&(ulen as u16).to_be_bytes());
            h[6] = 17;
            h[7] = 64;
            h[8..24].copy_from_slice(&s.octets());
            h[24..40].copy_from_slice(&d.octets());
        }
        _ => return None,
    }
    Some(total)
}

impl SessionQueue {
    /// Builds one packet from the tx FIFO of session `sid` into a new buffer.
    fn build(&mut self, cx: &mut Cx, sm: &mut SessionMain, sid: u32) -> Built {
        let Some(s) = sm.sessions[sid as usize].as_ref() else {
            return Built::Empty;
        };
        let (ai, slot, local, remote) = (s.app, s.slot, s.local, s.remote);
        let Some(app) = sm.apps.get(ai as usize).and_then(|a| a.as_ref()) else {
            return Built::Empty;
        };
        let Some((_, fifo)) = app.fifos(slot) else {
            return Built::Empty;
        };
        if fifo.is_empty() {
            return Built::Empty;
        }
        let mut bi = [BufIdx(0)];
        if cx.bufs().alloc(&mut bi) != 1 {
            cx.count(tx::E_NO_BUFFER as usize, 1);
            return Built::Stalled;
        }
        let bi = bi[0];
        // SAFETY: freshly allocated, owned here, one view.
        let mut b = unsafe { cx.buffer(bi) };
        let hl = if local.is_ipv6() { 48 } else { 28 };
        let raw = b.raw_data_mut();
        let room = raw.len().saturating_sub(hl).min(sluice_session::MAX_DGRAM);
        let r = fifo.pop(&mut raw[hl..hl + room]);
        let hdr = match r {
            Ok(h) => h,
            Err(PopError::Empty) => {
                cx.free(&[bi]);
                return Built::Empty;
            }
            Err(_) => {
                fifo.clear();
                b.hdr.error = cx.error(tx::E_CORRUPT);
                self.drops.push(bi);
                return Built::Dropped;
            }
        };
        // A connected session always sends to its peer.
        let peer = remote.unwrap_or(hdr.peer);
        let len = hdr.len as usize;
        // A wildcard listener answers from the local address facing the peer.
        let src = match local.ip() {
            ip if ip.is_unspecified() => sm.source_for(peer.ip()),
            ip => Some(ip),
        };
        let built = match src {
            Some(ip) if peer.port() != 0 && !peer.ip().is_unspecified() => push_headers(
                raw,
                SocketAddr::new(ip, local.port()),
                peer,
                len,
                self.ip_id,
            ),
            _ => None,
        };
        let Some(total) = built else {
            b.hdr.error = cx.error(tx::E_BAD_PEER);
            self.drops.push(bi);
            return Built::Dropped;
        };
        self.ip_id = self.ip_id.wrapping_add(1);
        b.hdr.current_data = 0;
        b.set_len(total);
        b.hdr.flags |= flags::LOCALLY_ORIGINATED;
        b.hdr.rx_if = 0;
        b.hdr.ip.fib_index = 0;
        if let Some(s) = sm.sessions[sid as usize].as_mut() {
            s.stats.tx += 1;
            s.stats.tx_bytes += len as u64;
        }
        if local.is_ipv6() {
            self.out6.push(bi);
            Built::Packet
        } else {
            self.out4.push(bi);
            Built::Packet
        }
    }
}

impl SessionQueue {
    /// TCP output: RSTs, the queued connections' segments, and the timers.
    fn tcp(&mut self, cx: &mut Cx, sm: &mut SessionMain) {
        self.tcp_kick
            .store(false, std::sync::atomic::Ordering::Relaxed);
        let now = std::time::Instant::now();
        if self.timer_at.is_some_and(|t| now >= t) {
            self.timer_at = None;
            sm.tcp_timers(now);
        }
        for (l, r, seq, ack, f) in std::mem::take(&mut sm.rst_out) {
            let o = Out {
                seq,
                ack,
                flags: f,
                wnd: 0,
                mss: None,
                off: 0,
                len: 0,
            };
            match tcp_segment(cx, l, r, &o, None, self.ip_id) {
                Some(bi) => {
                    self.ip_id = self.ip_id.wrapping_add(1);
                    self.out4.push(bi);
                    self.tcp_sent += 1;
                    cx.count(tx::C_RST_SENT, 1);
                }
                None => cx.count(tx::E_NO_BUFFER as usize, 1),
            }
        }
        let queue = std::mem::take(&mut sm.tcp_out);
        let mut stalled = Vec::new();
        for sid in queue {
            if !self.tcp_send(cx, sm, sid, now) {
                stalled.push(sid);
            }
        }
        // Out of buffers: retried on the next call.
        sm.tcp_out.extend(stalled);
        self.timer_at = sm
            .iter()
            .filter_map(|(_, s)| match &s.proto {
                Proto::Tcp(t, _) => t.next_deadline(),
                _ => None,
            })
            .min();
    }

    /// Sends what connection `sid` has; false when a buffer allocation failed.
    fn tcp_send(
        &mut self,
        cx: &mut Cx,
        sm: &mut SessionMain,
        sid: u32,
        now: std::time::Instant,
    ) -> bool {
        let SessionMain { apps, sessions, .. } = sm;
        let Some(s) = sessions.get_mut(sid as usize).and_then(|x| x.as_mut()) else {
            return true;
        };
        let (local, Some(remote)) = (s.local, s.remote) else {
            return true;
        };
        let fifos = if s.slot == NO_SLOT {
            None
        } else {
            apps.get(s.app as usize)
                .and_then(|a| a.as_ref())
                .and_then(|a| a.fifos(s.slot))
        };
        let Proto::Tcp(t, l) = &mut s.proto else {
            return true;
        };
        l.queued = false;
        let (tx_used, rx_free) = match &fifos {
            Some((rx, tx)) => (tx.used().unwrap_or(0), rx.free_bytes()),
            None => (0, 65535),
        };
        let tx = fifos.as_ref().map(|f| &f.1);
        let mut ok = true;
        let mut n = 0u64;
        let mut bytes = 0u64;
        let out4 = &mut self.out4;
        let ip_id = &mut self.ip_id;
        t.output(tx_used, rx_free, now, |o| {
            match tcp_segment(cx, local, remote, &o, tx, *ip_id) {
                Some(bi) => {
                    *ip_id = ip_id.wrapping_add(1);
                    out4.push(bi);
                    n += 1;
                    bytes += o.len as u64;
                    true
                }
                None => {
                    ok = false;
                    false
                }
            }
        });
        if !ok {
            cx.count(tx::E_NO_BUFFER as usize, 1);
            l.queued = true;
        }
        s.stats.tx += n;
        s.stats.tx_bytes += bytes;
        self.tcp_sent += n;
        if !ok {
            return false;
        }
        if let Some((rx, _)) = &fifos {
            if rx.free_bytes() < rx.size() / 2 {
                rx.wnd_request()
                    .store(1, std::sync::atomic::Ordering::SeqCst);
                // The application may have drained the FIFO before it could see the
                // request: then the window update is ours to send (next call).
                if rx.free_bytes() >= rx.size() / 2 {
                    rx.wnd_request()
                        .store(0, std::sync::atomic::Ordering::Relaxed);
                    l.queued = true;
                    return false;
                }
            }
        }
        ok
    }
}

fn drain_eventfd(fd: i32) {
    let mut v = 0u64;
    // SAFETY: reads 8 bytes into a local from a non-blocking eventfd.
    unsafe { libc::read(fd, &mut v as *mut u64 as *mut libc::c_void, 8) };
}

impl NodeFn for SessionQueue {
    fn poll(&mut self, cx: &mut Cx) -> usize {
        if self.thread != 0 {
            return 0;
        }
        let sm = self.sm.clone();
        let mut sm = lock(&sm);
        if self.kick.swap(false, std::sync::atomic::Ordering::Acquire) {
            self.watch = sm
                .apps
                .iter()
                .flatten()
                .map(|a| (a.seg.clone(), a.g))
                .collect();
        }
        for (fd, tok) in std::mem::take(&mut sm.irq_add) {
            if let Err(e) = cx.irq_register(fd, tok) {
                log::warn!("session-queue: epoll add: {e}");
            }
        }
        for fd in std::mem::take(&mut sm.irq_del) {
            cx.irq_unregister(fd.as_raw_fd());
        }
        self.irqs.clear();
        cx.take_irqs(&mut self.irqs);
        for &t in &self.irqs {
            if let Some(app) = sm.apps.get(t as usize).and_then(|a| a.as_ref()) {
                drain_eventfd(app.sluice_efd.as_raw_fd());
            }
        }
        // Collect the events the applications queued.
        for (ai, app) in sm.apps.iter().enumerate() {
            let Some(app) = app else { continue };
            let Some(q) = app.sluice_evq() else { continue };
            q.woke();
            for _ in 0..app.g.evq_len {
                // Bounded backlog: past it, events wait in the application's own (bounded)
                // queue, so an application flooding events cannot grow Sluice's memory.
                if self.pending.len() >= PENDING_MAX {
                    break;
                }
                match q.pop() {
                    Some(slot) if slot < app.g.n_slots => self.pending.push_back((ai as u32, slot)),
                    Some(_) => {}
                    None => break,
                }
            }
        }
        // Drain their tx FIFOs, one frame at most per call.
        let mut n = 0;
        while n < FRAME_SIZE {
            let Some(&(ai, slot)) = self.pending.front() else {
                break;
            };
            let sid = sm
                .apps
                .get(ai as usize)
                .and_then(|a| a.as_ref())
                .and_then(|a| {
                    if let Some((_, f)) = a.fifos(slot) {
                        f.clear_event();
                    }
                    a.slots.get(slot as usize).copied().flatten()
                });
            let Some(sid) = sid else {
                self.pending.pop_front();
                continue;
            };
            if sm.sessions[sid as usize]
                .as_ref()
                .is_some_and(|s| s.proto.is_tcp())
            {
                // Stream data: tcp-output below sends what the window allows.
                sm.tcp_queue(sid);
                self.pending.pop_front();
                continue;
            }
            let mut emptied = false;
            let mut stalled = false;
            while n < FRAME_SIZE {
                match self.build(cx, &mut sm, sid) {
                    Built::Packet | Built::Dropped => n += 1,
                    Built::Empty => {
                        emptied = true;
                        break;
                    }
                    Built::Stalled => {
                        stalled = true;
                        break;
                    }
                }
            }
            if emptied {
                self.pending.pop_front();
            }
            if stalled {
                break; // out of buffers: the session stays first, retried next call
            }
        }
        if sm.tcp_count > 0 || !sm.rst_out.is_empty() {
            self.tcp(cx, &mut sm);
        }
        // Nothing left: announce we may sleep (each application then signals our eventfd).
        let mut more = !self.pending.is_empty() || !sm.tcp_out.is_empty();
        if !more {
            for app in sm.apps.iter().flatten() {
                if let Some(q) = app.sluice_evq() {
                    if !q.prepare_sleep() {
                        more = true;
                    }
                }
            }
        }
        self.busy = more;
        drop(sm);
        let sent = (self.out4.len() + self.out6.len()) as u64 - self.tcp_sent;
        cx.count(tx::C_SENT, sent);
        cx.count(tx::C_TCP_SENT, self.tcp_sent);
        self.tcp_sent = 0;
        cx.enqueue_all(tx::IP4, &self.out4);
        cx.enqueue_all(tx::IP6, &self.out6);
        cx.enqueue_all(tx::DROP, &self.drops);
        self.out4.clear();
        self.out6.clear();
        self.drops.clear();
        n
    }
    fn active(&self) -> bool {
        self.busy
            || self.tcp_kick.load(std::sync::atomic::Ordering::Relaxed)
            || self
                .timer_at
                .is_some_and(|t| std::time::Instant::now() >= t)
            || self.kick.load(std::sync::atomic::Ordering::Relaxed)
            || self.watch.iter().any(|(r, g)| {
                sluice_session::seg::EvQ::new(r, g.sluice_evq_off(), g.evq_len)
                    .is_some_and(|q| !q.is_empty())
            })
    }
    fn poll_interval(&self) -> Option<f64> {
        // Interrupt-driven: the applications' eventfds wake the thread, attaches kick; a
        // TCP timer bounds the sleep.
        self.timer_at.map(|t| {
            t.saturating_duration_since(std::time::Instant::now())
                .as_secs_f64()
                .max(0.001)
        })
    }
    fn polling(&self) -> bool {
        self.busy
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// Registers the nodes; they share `sm`.
pub fn register(b: &mut sluice_graph::GraphBuilder, sm: &Shared) {
    let rx_counters = [
        CounterDesc::info("delivered", "datagrams queued to a session"),
        CounterDesc::error("no_listener", "no session for the address and port"),
        CounterDesc::error("bad_checksum", "bad UDP checksum"),
        CounterDesc::error("short", "truncated IP/UDP header or UDP length"),
        CounterDesc::error("fragment", "IPv4 fragment (no reassembly)"),
        CounterDesc::error("chained", "datagram in several buffers"),
        CounterDesc::error("fifo_full", "session rx FIFO full"),
        CounterDesc::error(
            "wrong_thread",
            "received on a worker (sessions live on thread 0)",
        ),
        CounterDesc::error("bad_header", "malformed IPv6 extension headers"),
    ];
    let s = sm.clone();
    b.register(
        NodeRegistration::new(UDP4_INPUT, NodeKind::Internal, move |t| {
            Box::new(UdpInput::<false> {
                sm: s.clone(),
                thread: t,
                done: Vec::with_capacity(FRAME_SIZE),
                drops: Vec::with_capacity(FRAME_SIZE),
            })
        })
        .nexts(&["error-drop"])
        .counters(&rx_counters),
    );
    let s = sm.clone();
    b.register(
        NodeRegistration::new(UDP6_INPUT, NodeKind::Internal, move |t| {
            Box::new(UdpInput::<true> {
                sm: s.clone(),
                thread: t,
                done: Vec::with_capacity(FRAME_SIZE),
                drops: Vec::with_capacity(FRAME_SIZE),
            })
        })
        .nexts(&["error-drop"])
        .counters(&rx_counters),
    );
    let s = sm.clone();
    let kick = lock(sm).kick.clone();
    let tcp_kick = lock(sm).tcp_kick.clone();
    b.register(
        NodeRegistration::new(SESSION_QUEUE, NodeKind::Input, move |t| {
            Box::new(SessionQueue {
                sm: s.clone(),
                kick: kick.clone(),
                watch: Vec::new(),
                thread: t,
                busy: false,
                pending: VecDeque::new(),
                irqs: Vec::new(),
                out4: Vec::with_capacity(FRAME_SIZE),
                out6: Vec::with_capacity(FRAME_SIZE),
                drops: Vec::new(),
                ip_id: 0,
                tcp_kick: tcp_kick.clone(),
                tcp_sent: 0,
                timer_at: None,
            })
        })
        .nexts(&[
            sluice_vnet::ip4::nodes::IP4_LOOKUP,
            sluice_vnet::ip6::nodes::IP6_LOOKUP,
            "error-drop",
        ])
        .counters(&[
            CounterDesc::info("sent", "datagrams sent"),
            CounterDesc::error("no_buffer", "no buffer (datagram left queued)"),
            CounterDesc::error("bad_peer", "datagram to an invalid peer"),
            CounterDesc::error("corrupt_fifo", "application tx FIFO corrupt (emptied)"),
            CounterDesc::info("tcp_sent", "TCP segments sent"),
            CounterDesc::info("tcp_rst_sent", "TCP RSTs sent"),
        ]),
    );
    let s = sm.clone();
    b.register(
        NodeRegistration::new(TCP4_INPUT, NodeKind::Internal, move |t| {
            Box::new(TcpInput {
                sm: s.clone(),
                thread: t,
                done: Vec::with_capacity(FRAME_SIZE),
                drops: Vec::with_capacity(FRAME_SIZE),
            })
        })
        .nexts(&["error-drop"])
        .counters(&[
            CounterDesc::info("segments", "segments taken by a connection or listener"),
            CounterDesc::error("no_listener", "no connection or listener (RST sent)"),
            CounterDesc::error("bad_checksum", "bad TCP checksum"),
            CounterDesc::error("short", "truncated IP/TCP header"),
            CounterDesc::error("bad_offset", "TCP data offset out of range"),
            CounterDesc::error("fragment", "IPv4 fragment (no reassembly)"),
            CounterDesc::error("chained", "segment in several buffers"),
            CounterDesc::error("syn_backlog_full", "SYN dropped: listener backlog full"),
            CounterDesc::error(
                "wrong_thread",
                "received on a worker (sessions live on thread 0)",
            ),
        ]),
    );
}

#[allow(dead_code)]
const _: Next = rx::DROP;
