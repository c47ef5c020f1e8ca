//! The host stack's graph nodes. Each thread owns the sessions of the flows
//! [`flow_owner`] gives it (per-thread tables in [`SessionMain::workers`], one lock for
//! all still): an input node hands a packet whose flow another thread owns to itself on
//! that thread (the graph's handoff queues, as NAT44 does for its per-thread tables); see
//! docs/hoststack.md, *Per-thread session tables*.
//!
//! `udp4-input` / `udp6-input` (internal; one generic node per family): UDP datagrams for a
//! port a session bound, from `ip4-local`/`ip6-local` (`sluice_vnet::ip_local`), at
//! their IP header. The payload is copied into the session's rx FIFO and the buffer freed.
//! - uses: the IP and UDP headers; `flags` (`L4_CHECKSUM_CORRECT`: a driver checked it).
//! - sets: `error` on drops.
//! - next: `error-drop` (0) for every drop; delivered buffers are freed here.
//! - counters: `delivered` (info: queued to an application), `no_listener` (no session
//!   for the address/port), `bad_checksum`, `short` (truncated IP/UDP header, IPv6
//!   extension headers included, or UDP length beyond the packet), `fragment` (IPv4 fragments: no reassembly yet), `chained`
//!   (a UDP GSO aggregate: several datagrams, not cut here; a datagram in a buffer chain is
//!   read whole), `fifo_full` (the application does
//!   not read fast enough), `bad_header` (IPv6 extension header chain malformed),
//!   `handoff` (info: received on a thread that does not own the flow and handed to this
//!   node on the owner), `congestion_drop` (the handoff queue to the owner was full).
//!
//! `session-queue` (input, every thread). On a worker it only sends its own TCP
//! connections' segments (queued by its input nodes, its timers, by the applications' tx
//! events on this thread's Sluice event queue of their segments — its eventfds are in this
//! thread's epoll), applies the control requests thread 0 forwarded for its connections
//! (close, shutdown, an application gone: this thread's control ring,
//! `SessionWorker::ctl_in`; thread 0 kicks and wakes it) and runs its timers, taking the
//! session lock only when kicked, a timer is due or a tx event is queued. Each thread's events to an application go to that thread's app event queue
//! (the slot's owner thread: `AppConn::owner`). On thread 0 it
//! also serves the applications: it takes the datagrams applications queued in their tx
//! FIFOs (announced through their event queues, woken by their eventfds) and builds the
//! IPv4/IPv6 and UDP headers in front of each (the udp-output step), locally originated,
//! FIB 0. It also sends the TCP connections' segments (data from their tx FIFOs, ACKs,
//! retransmissions on their timers) and the RSTs `tcp4-input`/`tcp6-input` ask for, to
//! `ip4-lookup` or `ip6-lookup` by the connection's family. It watches the control
//! sockets too (the app socket, attached and attaching applications' sockets, epoll token
//! `CTL_TOKEN`): when one is readable it posts `poll_control` to the main loop, which
//! serves the request (attach, bind, connect, listen, close) right after this iteration's
//! nodes. After sending it tells a writer that found its tx FIFO full (the FIFO's
//! tx-space request word) that room was made: one event on the application's event queue
//! once a quarter of the FIFO is free (UDP: datagrams sent; TCP: data acknowledged, from
//! `tcp4-input`). An event (data, accept or tx space) a full event queue refused is
//! retried every `RETRY_EVERY` (1 ms), not at every poll, by the `session-queue` of the
//! thread whose queue refused it (the slot's owner: a worker for its connections, thread 0
//! for UDP; counted in `show session verbose`: `events refused by a full queue`,
//! `awaiting retry`).
//! - uses: the applications' event queues (session slots with data to send, at most
//!   `PENDING_MAX` held; the applications are asked to signal its eventfds only when the
//!   thread is about to sleep, `NodeFn::prepare_sleep`, so a busy thread costs them no
//!   system call), their tx FIFOs and eventfd interrupts, the control sockets'
//!   readiness; no packet metadata.
//! - sets: the whole packet at `current_data`; `flags` `LOCALLY_ORIGINATED`; `rx_if` 0;
//!   `ip.fib_index` 0. With `tcp-tso`, a TCP aggregate is a buffer chain (`NEXT_PRESENT`,
//!   `next_buffer`, `total_length_not_including_first_buffer`) with `flags` `GSO |
//!   OFFLOAD_L4_CKSUM`, `gso_size` (the MSS), `gso_type` (TCPv4/TCPv6), `gso_l4_offset`,
//!   `gso_l4_hdr_len` and a partial TCP checksum (the pseudo-header sum).
//! - next: `ip4-lookup` (0), `ip6-lookup` (1), `error-drop` (2).
//! - counters: `sent` (info), `no_buffer` (allocation failed: left in the FIFO, retried),
//!   `bad_peer` (a datagram to a peer of the other family, port 0 or an unspecified
//!   address: dropped; a TCP connection's segment between two families: not built),
//!   `corrupt_fifo` (an application wrote impossible positions or
//!   lengths: its FIFO is emptied; or a TCP tx FIFO shorter than its connection counts on:
//!   that segment is not built), `tcp_sent` (info: TCP segments), `tcp_rst_sent` (info),
//!   `tcp_tso` (info: TSO aggregates among `tcp_sent`, `tcp-tso on`), `tcp_tso_fallback`
//!   (an aggregate's chain found no buffers: single segments were tried instead, its
//!   first segment and then the rest of that call's data; they may find none either).
//!
//! `tcp4-input` / `tcp6-input` (internal; one generic node per family): TCP segments for
//! Sluice's addresses, from `ip4-local`/`ip6-local` (protocol 6 is registered while TCP
//! sessions exist). The header is checked, the MSS, window-scale, timestamps,
//! SACK-permitted and SACK options read, and the segment handed to its connection or listener (`tcpsess`); the buffer is
//! always freed here (data is copied into the rx FIFO, replies are built by
//! `session-queue`).
//! - uses: the IP (IPv6 extension headers walked) and TCP headers; `flags`
//!   (`L4_CHECKSUM_CORRECT`, `OFFLOAD_L4_CKSUM`: a partial checksum of a local peer's
//!   packet counts as verified; `NEXT_PRESENT`: a chain — e.g. a GSO aggregate a driver kept
//!   whole — is read as one large segment, as the kernel's GRO gives it to a socket).
//! - sets: `error` on drops.
//! - next: `error-drop` (0).
//! - counters: `segments` (info: taken by a connection or listener), `no_listener` (no
//!   connection or listener: a RST is sent unless it was one), `bad_checksum`, `short`
//!   (truncated IP/TCP header, IPv6 extension headers included), `bad_offset` (data offset below 5 words or past the
//!   segment), `fragment`, `syn_backlog_full` (SYN dropped: the listener's
//!   handshake backlog is full and SYN cookies are off), `bad_header` (malformed IPv6
//!   extension headers), `handoff` (info), `congestion_drop` (as for UDP).
//!
//! `session-queue` also sends TCP: segments of the connections the input nodes, the timers
//! or the applications' tx events queued (data peeked from the tx FIFO, options, headers,
//! checksum), and the segments no connection owns (RSTs, SYN-cookie SYN-ACKs); counters
//! `tcp_sent` (info), `tcp_rst_sent` (info). The connections' segments wait while protocol 6
//! is not yet registered on every thread (`SessionMain::tcp_applied`, set by the control
//! poll): their SYN-ACKs would be punted.

use crate::session::{flow_owner, handle_index, handle_thread, Proto, SessionMain, NO_SLOT};
use crate::tcp::{Out, Seg, TcpFlags};
use crate::tcpsess::TcpDrop;
use sluice_buffer::{flags, BufIdx};
use sluice_graph::{CounterDesc, CounterId, Cx, NodeFn, NodeKind, NodeRegistration, FRAME_SIZE};
use sluice_session::seg::PopError;
use sluice_wire::checksum;
use sluice_wire::ipv6::Ipv6Packet;
use sluice_wire::tcp::{TcpOption, TcpPacket, TcpRepr};
use sluice_wire::udp::UdpPacket;
use sluice_wire::WireError;
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
/// `tcp6-input`.
pub const TCP6_INPUT: &str = "tcp6-input";

/// The state every node shares.
pub type Shared = Arc<Mutex<SessionMain>>;

pub(crate) fn lock(s: &Shared) -> MutexGuard<'_, SessionMain> {
    match s.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

sluice_graph::arcs! {
    /// Next arcs of `udp4-input`/`udp6-input` and `tcp4-input`/`tcp6-input`.
    enum InNext {
        /// Every drop (delivered buffers are freed by the node).
        Drop => "error-drop",
    }
}

sluice_graph::counters! {
    /// Counters of `udp4-input`/`udp6-input`.
    enum UdpCounter {
        /// Queued to a session.
        Delivered => info("delivered", "datagrams queued to a session"),
        /// No session for the address and port.
        NoListener => error("no_listener", "no session for the address and port"),
        /// Bad UDP checksum.
        BadChecksum => error("bad_checksum", "bad UDP checksum"),
        /// Truncated header or length.
        Short => error("short", "truncated IP/UDP header or UDP length"),
        /// IPv4 fragment.
        Fragment => error("fragment", "IPv4 fragment (no reassembly)"),
        /// A UDP GSO aggregate (several datagrams in one chain).
        Chained => error("chained", "UDP GSO aggregate (not cut for sessions)"),
        /// rx FIFO full.
        FifoFull => error("fifo_full", "session rx FIFO full"),
        /// Received on a thread that does not own the flow: handed to the owner.
        Handoff => info("handoff", "handed to the thread that owns the flow"),
        /// The handoff queue to the owner was full.
        Congestion => error("congestion_drop", "handoff queue to the flow's thread full"),
        /// IPv6 extension headers malformed.
        BadHeader => error("bad_header", "malformed IPv6 extension headers"),
    }
}

sluice_graph::counters! {
    /// Counters of `tcp4-input`/`tcp6-input`.
    enum TcpCounter {
        /// Taken by a connection or listener.
        Segments => info("segments", "segments taken by a connection or listener"),
        /// No connection or listener.
        NoListener => error("no_listener", "no connection or listener (RST sent)"),
        /// Bad checksum.
        BadChecksum => error("bad_checksum", "bad TCP checksum"),
        /// Truncated header.
        Short => error("short", "truncated IP/TCP header"),
        /// Data offset out of range.
        BadOffset => error("bad_offset", "TCP data offset out of range"),
        /// IPv4 fragment.
        Fragment => error("fragment", "IPv4 fragment (no reassembly)"),
        /// The listener's handshake backlog is full.
        SynBacklogFull => error("syn_backlog_full", "SYN dropped: listener backlog full"),
        /// Received on a thread that does not own the flow: handed to the owner.
        Handoff => info("handoff", "handed to the thread that owns the flow"),
        /// The handoff queue to the owner was full.
        Congestion => error("congestion_drop", "handoff queue to the flow's thread full"),
        /// IPv6 extension headers malformed.
        BadHeader => error("bad_header", "malformed IPv6 extension headers"),
    }
}

sluice_graph::arcs! {
    /// Next arcs of `session-queue`.
    enum SqNext {
        /// IPv4 packets.
        Ip4 => sluice_vnet::ip4::nodes::IP4_LOOKUP,
        /// IPv6 packets.
        Ip6 => sluice_vnet::ip6::nodes::IP6_LOOKUP,
        /// Dropped datagrams.
        Drop => "error-drop",
    }
}

sluice_graph::counters! {
    /// Counters of `session-queue`.
    enum SqCounter {
        /// Datagrams sent.
        Sent => info("sent", "datagrams sent"),
        /// No buffer.
        NoBuffer => error("no_buffer", "no buffer (datagram left queued)"),
        /// Datagram (or TCP segment) to an invalid peer.
        BadPeer => error("bad_peer", "datagram or TCP segment to an invalid peer"),
        /// Corrupt application tx FIFO.
        CorruptFifo => error("corrupt_fifo", "application tx FIFO corrupt (emptied, or TCP data not built)"),
        /// TCP segments sent.
        TcpSent => info("tcp_sent", "TCP segments sent"),
        /// TCP RSTs sent.
        TcpRstSent => info("tcp_rst_sent", "TCP RSTs sent"),
        /// TSO aggregates among the TCP segments sent (`tcp-tso on`).
        TcpTso => info("tcp_tso", "TCP TSO aggregates sent (each one of tcp_sent)"),
        /// TSO aggregates whose chain found no buffers; single segments tried instead.
        TcpTsoFallback => error("tcp_tso_fallback", "TCP TSO aggregate without buffers (single segments tried instead)"),
    }
}

/// Why the IP header in front of a UDP datagram or TCP segment is refused.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum IpErr {
    Short,
    Fragment,
    BadHeader,
}

/// `udp4-input` (`V6` false) and `udp6-input` (`V6` true).
pub struct UdpInput<const V6: bool> {
    sm: Shared,
    thread: usize,
    scratch: InputScratch,
}

/// Source, destination and the transport header and payload (bounded by the IP length) of
/// a packet at its IP header.
#[inline(always)]
fn parse_ip<const V6: bool>(d: &[u8]) -> Result<(IpAddr, IpAddr, &[u8]), IpErr> {
    let (src, dst, off) = ip_addrs::<V6>(d)?;
    let ip_end = if V6 {
        40 + u16::from_be_bytes([d[4], d[5]]) as usize
    } else {
        u16::from_be_bytes([d[2], d[3]]) as usize
    };
    let l4 = d.get(off..ip_end.min(d.len())).ok_or(IpErr::Short)?;
    Ok((src, dst, l4))
}

#[inline(always)]
fn ip_addrs<const V6: bool>(d: &[u8]) -> Result<(IpAddr, IpAddr, usize), IpErr> {
    if V6 {
        let p = Ipv6Packet::new_checked(d).map_err(|_| IpErr::Short)?;
        // Extension headers cut by the end of the data are short (a chain's first buffer
        // can end inside them), not malformed.
        let (_, off) = p.walk_extensions().map_err(|e| match e {
            WireError::Truncated => IpErr::Short,
            _ => IpErr::BadHeader,
        })?;
        let a = |o: usize| -> IpAddr {
            let mut b = [0u8; 16];
            b.copy_from_slice(&d[o..o + 16]);
            IpAddr::V6(Ipv6Addr::from(b))
        };
        Ok((a(8), a(24), off))
    } else {
        if d.len() < 20 {
            return Err(IpErr::Short);
        }
        let ihl = (d[0] & 0xf) as usize * 4;
        if ihl < 20 || d.len() < ihl {
            return Err(IpErr::Short);
        }
        if u16::from_be_bytes([d[6], d[7]]) & 0x3fff != 0 {
            return Err(IpErr::Fragment);
        }
        let src = IpAddr::V4(Ipv4Addr::new(d[12], d[13], d[14], d[15]));
        let dst = IpAddr::V4(Ipv4Addr::new(d[16], d[17], d[18], d[19]));
        Ok((src, dst, ihl))
    }
}

impl<const V6: bool> UdpInput<V6> {
    /// Delivers one datagram; `Err(counter)` to drop it.
    #[inline(always)]
    fn one(sm: &mut SessionMain, pkt: Pkt<'_>) -> Result<(), UdpCounter> {
        use UdpCounter as C;
        if pkt.flags & flags::GSO != 0 {
            // A UDP aggregate is several datagrams: not cut here.
            return Err(C::Chained);
        }
        let (src, dst, l4) = parse_ip::<V6>(pkt.data).map_err(|e| match e {
            IpErr::Short => C::Short,
            IpErr::Fragment => C::Fragment,
            IpErr::BadHeader => C::BadHeader,
        })?;
        let u = UdpPacket::new_checked(l4).map_err(|_| C::Short)?;
        u.check_len().map_err(|_| C::Short)?;
        if pkt.flags & flags::L4_CHECKSUM_CORRECT == 0 {
            let ok = match (src, dst) {
                (IpAddr::V4(s), IpAddr::V4(t)) => u.verify_checksum_v4(s, t),
                (IpAddr::V6(s), IpAddr::V6(t)) => u.verify_checksum_v6(s, t),
                _ => false,
            };
            if !ok {
                return Err(C::BadChecksum);
            }
        }
        let local = SocketAddr::new(dst, u.dst_port());
        let remote = SocketAddr::new(src, u.src_port());
        let sid = sm.lookup(local, remote).ok_or(C::NoListener)?;
        let s = sm.sess(sid).ok_or(C::NoListener)?;
        let (ai, slot) = (s.app, s.slot);
        let app = sm
            .apps
            .get(ai as usize)
            .and_then(|a| a.as_ref())
            .ok_or(C::NoListener)?;
        let (fifo, _) = app.fifos(slot).ok_or(C::NoListener)?;
        let payload = u.payload();
        let n = payload.len() as u64;
        let pushed = fifo.push(remote, payload);
        if pushed && !app.notify(&fifo, slot) {
            sm.refused(ai, slot, slot);
        }
        let st = &mut sm.sess_mut(sid).ok_or(C::NoListener)?.stats;
        if !pushed {
            st.rx_full += 1;
            return Err(C::FifoFull);
        }
        st.rx += 1;
        st.rx_bytes += n;
        Ok(())
    }
}

/// One packet as the input nodes read it: its bytes from the IP header (a chain read into
/// one slice) and its buffer flags.
#[derive(Copy, Clone)]
struct Pkt<'a> {
    data: &'a [u8],
    flags: u32,
}

/// Largest packet a chain is read into one slice for (an IPv4/IPv6 packet's 64 KiB, headers).
const MAX_CHAIN_READ: usize = 65_535 + 256;

/// Per-node buffers of the input frame loop.
struct InputScratch {
    done: Vec<BufIdx>,
    drops: Vec<BufIdx>,
    /// The packets whose flow this thread owns, and per thread those it hands over.
    mine: Vec<BufIdx>,
    away: Vec<Vec<BufIdx>>,
    /// A chained packet's bytes (a GSO aggregate the driver kept whole, a large datagram).
    chain: Vec<u8>,
}

impl InputScratch {
    fn new() -> Self {
        InputScratch {
            done: Vec::with_capacity(FRAME_SIZE),
            drops: Vec::with_capacity(FRAME_SIZE),
            mine: Vec::new(),
            away: Vec::new(),
            chain: Vec::with_capacity(MAX_CHAIN_READ),
        }
    }
}

/// The thread that owns the flow of the packet at its IP header `d` among `n` threads
/// ([`flow_owner`]; the ports are the first 4 bytes of UDP and TCP alike). None when the
/// headers cannot be read (the caller reads a chain whole first): the packet stays where
/// it is and is dropped there, counted, by its parse, before any table is looked at.
#[inline]
fn packet_owner<const V6: bool>(d: &[u8], n: usize) -> Result<usize, IpErr> {
    let (src, dst, off) = ip_addrs::<V6>(d)?;
    let p = d.get(off..off + 4).ok_or(IpErr::Short)?;
    let sport = u16::from_be_bytes([p[0], p[1]]);
    let dport = u16::from_be_bytes([p[2], p[3]]);
    Ok(flow_owner(
        SocketAddr::new(dst, dport),
        SocketAddr::new(src, sport),
        n,
    ))
}

/// With more than one thread: hands each packet whose flow another thread owns to this
/// node on that thread (the graph's handoff queues, counted in `handoff`; what a full
/// queue refuses goes to `error-drop` with the error `congestion`) and leaves the packets
/// this thread owns in `s.mine`; returns true. One flow's packets keep their order. With
/// one thread returns false, touching nothing. Called first, before the session lock.
fn hand_to_owners<const V6: bool, C: CounterId>(
    cx: &mut Cx,
    frame: &[BufIdx],
    thread: usize,
    s: &mut InputScratch,
    [handoff, congestion]: [C; 2],
) -> bool {
    let n = cx.shared().n_threads;
    if n <= 1 {
        return false;
    }
    s.mine.clear();
    s.away.resize_with(n, Vec::new);
    for &bi in frame {
        let (mut owner, chained) = {
            // SAFETY: the frame's buffers are owned by this node; one short-lived view.
            let b = unsafe { cx.buffer(bi) };
            let chained = b.hdr.flags & flags::NEXT_PRESENT != 0;
            (packet_owner::<V6>(b.data(), n), chained)
        };
        // A chain cut inside its headers (the ports not in the first buffer) is read
        // whole: parsed here it would reach the tables of the thread that received it,
        // not of the flow's owner. Only then: a fragment or malformed IPv6 extension
        // headers stay what they are whole (no copy of up to 64 KiB for them).
        if owner == Err(IpErr::Short) && chained {
            s.chain.clear();
            cx.bufs().copy_chain(bi, &mut s.chain, MAX_CHAIN_READ);
            owner = packet_owner::<V6>(&s.chain, n);
        }
        match owner {
            Ok(t) if t != thread => s.away[t].push(bi),
            _ => s.mine.push(bi),
        }
    }
    for t in 0..n {
        if s.away[t].is_empty() {
            continue;
        }
        cx.handoff_or_drop(t, &s.away[t], handoff, congestion, InNext::Drop.into());
        s.away[t].clear();
    }
    true
}

/// The input nodes' frame loop on thread 0: `one` takes each packet under the session
/// lock (counted drops go to `drop` with their reason, taken buffers are freed and counted
/// in `taken`). A chained packet is read into one slice: a TCP aggregate (flag `GSO`) is
/// one large segment, as the kernel's GRO hands it to a socket. A partial checksum the
/// kernel left (`OFFLOAD_L4_CKSUM`: a packet of a local peer, Linux's CHECKSUM_PARTIAL)
/// counts as verified.
fn input_frame<C: CounterId>(
    cx: &mut Cx,
    frame: &[BufIdx],
    sm: &Shared,
    taken: C,
    s: &mut InputScratch,
    mut one: impl FnMut(&mut SessionMain, Pkt<'_>) -> Result<(), C>,
) {
    s.done.clear();
    s.drops.clear();
    let mut g = lock(sm);
    for &bi in frame {
        // SAFETY: the frame's buffers are owned by this node; short-lived header read.
        let mut f = unsafe { cx.arena().header_mut(bi) }.flags;
        if f & flags::OFFLOAD_L4_CKSUM != 0 {
            f |= flags::L4_CHECKSUM_CORRECT;
        }
        let r = if f & flags::NEXT_PRESENT != 0 {
            s.chain.clear();
            cx.bufs().copy_chain(bi, &mut s.chain, MAX_CHAIN_READ);
            one(
                &mut g,
                Pkt {
                    data: &s.chain,
                    flags: f & !flags::NEXT_PRESENT,
                },
            )
        } else {
            // SAFETY: as above, one view at a time.
            let b = unsafe { cx.buffer(bi) };
            one(
                &mut g,
                Pkt {
                    data: b.data(),
                    flags: f,
                },
            )
        };
        if let Err(e) = r {
            // SAFETY: as above.
            unsafe { cx.arena().header_mut(bi) }.error = cx.error(e);
            s.drops.push(bi);
        } else {
            s.done.push(bi);
        }
    }
    let (done, drops) = (&mut s.done, &mut s.drops);
    drop(g);
    cx.count(taken, done.len() as u64);
    cx.free(done);
    cx.enqueue_all(InNext::Drop.into(), drops);
}

impl<const V6: bool> NodeFn for UdpInput<V6> {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        let handoff = [UdpCounter::Handoff, UdpCounter::Congestion];
        let handed = hand_to_owners::<V6, _>(cx, frame, self.thread, &mut self.scratch, handoff);
        let mine = std::mem::take(&mut self.scratch.mine);
        let f = if handed { &mine[..] } else { frame };
        if !f.is_empty() {
            input_frame(
                cx,
                f,
                &self.sm,
                UdpCounter::Delivered,
                &mut self.scratch,
                Self::one,
            );
        }
        self.scratch.mine = mine;
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// `tcp4-input` (`V6` false) and `tcp6-input` (`V6` true).
pub struct TcpInput<const V6: bool> {
    sm: Shared,
    thread: usize,
    scratch: InputScratch,
}

impl<const V6: bool> TcpInput<V6> {
    fn one(sm: &mut SessionMain, pkt: Pkt<'_>, now: std::time::Instant) -> Result<(), TcpCounter> {
        use TcpCounter as C;
        let (src, dst, l4) = parse_ip::<V6>(pkt.data).map_err(|e| match e {
            IpErr::Short => C::Short,
            IpErr::Fragment => C::Fragment,
            IpErr::BadHeader => C::BadHeader,
        })?;
        if l4.len() < 20 {
            return Err(C::Short);
        }
        // With the 20 bytes there, what new_checked refuses is the data offset.
        let p = TcpPacket::new_checked(l4).map_err(|_| C::BadOffset)?;
        if pkt.flags & flags::L4_CHECKSUM_CORRECT == 0 {
            let ok = match (src, dst) {
                (IpAddr::V4(s), IpAddr::V4(d)) => p.verify_checksum_v4(s, d),
                (IpAddr::V6(s), IpAddr::V6(d)) => p.verify_checksum_v6(s, d),
                _ => false,
            };
            if !ok {
                return Err(C::BadChecksum);
            }
        }
        let (mut mss, mut wscale, mut ts) = (None, None, None);
        let (mut sack_ok, mut sack): (bool, &[u8]) = (false, &[]);
        // Malformed options are ignored, not fatal: the walk stops at the first.
        for o in p.options_iter() {
            match o {
                Ok(TcpOption::Mss(m)) => mss = Some(m),
                Ok(TcpOption::WindowScale(w)) => wscale = Some(w),
                Ok(TcpOption::Timestamps { tsval, tsecr }) => ts = Some((tsval, tsecr)),
                Ok(TcpOption::SackPermitted) => sack_ok = true,
                Ok(TcpOption::Sack(b)) => sack = b,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        let seg = Seg {
            seq: p.seq_number(),
            ack: p.ack_number(),
            flags: TcpFlags(p.flags().0 & 0x1f),
            wnd: p.window(),
            mss,
            wscale,
            ts,
            sack_ok,
            sack,
            data: p.payload(),
        };
        let local = SocketAddr::new(dst, p.dst_port());
        let remote = SocketAddr::new(src, p.src_port());
        sm.tcp_input(local, remote, &seg, now).map_err(|e| match e {
            TcpDrop::NoListener => C::NoListener,
            TcpDrop::BacklogFull => C::SynBacklogFull,
        })
    }
}

impl<const V6: bool> NodeFn for TcpInput<V6> {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        let handoff = [TcpCounter::Handoff, TcpCounter::Congestion];
        let handed = hand_to_owners::<V6, _>(cx, frame, self.thread, &mut self.scratch, handoff);
        let mine = std::mem::take(&mut self.scratch.mine);
        let f = if handed { &mine[..] } else { frame };
        if !f.is_empty() {
            let now = std::time::Instant::now();
            input_frame(
                cx,
                f,
                &self.sm,
                TcpCounter::Segments,
                &mut self.scratch,
                |sm, b| Self::one(sm, b, now),
            );
        }
        self.scratch.mine = mine;
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

/// Writes an IPv6 header for `l4len` bytes of next header `proto` at `h[..40]`.
fn ip6_header(h: &mut [u8], s: Ipv6Addr, d: Ipv6Addr, proto: u8, l4len: usize) {
    h[0..4].copy_from_slice(&[0x60, 0, 0, 0]);
    h[4..6].copy_from_slice(&(l4len as u16).to_be_bytes());
    h[6] = proto;
    h[7] = 64;
    h[8..24].copy_from_slice(&s.octets());
    h[24..40].copy_from_slice(&d.octets());
}

/// Writes the options of `o` (MSS, window scale, SACK permitted, timestamps, SACK blocks,
/// NOP-padded to words) into `t`; returns their length (at most 40: a SYN takes 24, three
/// SACK blocks with timestamps 40).
fn tcp_options(o: &Out, t: &mut [u8]) -> usize {
    let mut n = 0;
    if o.sack_ok {
        t[n..n + 4].copy_from_slice(&[1, 1, 4, 2]);
        n += 4;
    }
    if let Some(m) = o.mss {
        t[n..n + 4].copy_from_slice(&[2, 4, (m >> 8) as u8, m as u8]);
        n += 4;
    }
    if let Some(w) = o.wscale {
        t[n..n + 4].copy_from_slice(&[1, 3, 3, w]);
        n += 4;
    }
    if let Some((v, e)) = o.ts {
        t[n..n + 4].copy_from_slice(&[1, 1, 8, 10]);
        t[n + 4..n + 8].copy_from_slice(&v.to_be_bytes());
        t[n + 8..n + 12].copy_from_slice(&e.to_be_bytes());
        n += 12;
    }
    if o.sack_n > 0 {
        let k = o.sack_n.min(4) as usize;
        t[n..n + 4].copy_from_slice(&[1, 1, 5, 2 + 8 * k as u8]);
        n += 4;
        for &(a, b) in &o.sack[..k] {
            t[n..n + 4].copy_from_slice(&a.to_be_bytes());
            t[n + 4..n + 8].copy_from_slice(&b.to_be_bytes());
            n += 8;
        }
    }
    n
}

/// Why [`tcp_segment`] built nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SegError {
    /// No buffer (retried when the session is queued again).
    NoBuffer,
    /// The local and remote addresses are of two families (`bad_peer`; not retried).
    BadPeer,
    /// The tx FIFO held fewer bytes than the connection counted on (`corrupt_fifo`).
    ShortFifo,
}

/// Builds one TCP segment (IPv4 or IPv6, by the addresses) into a new buffer, payload
/// peeked from `tx`; a TSO aggregate (`o.gso` set) into a buffer chain, the headers in
/// the first buffer, with the GSO metadata (`flags::GSO`, `gso_size` the segment size)
/// and the TCP checksum partial (the pseudo-header sum over the whole length, as Linux's
/// `CHECKSUM_PARTIAL`): `interface-output` hands it whole to a driver that takes
/// aggregates, else to `gso-segment`. Errors: no buffer, addresses of two families,
/// or `tx` gave fewer bytes than `o` asks for (nothing built: never a hole in the stream).
fn tcp_segment(
    cx: &mut Cx,
    local: SocketAddr,
    remote: SocketAddr,
    o: &Out,
    tx: Option<&sluice_session::seg::Fifo<'_>>,
    ip_id: u16,
) -> Result<BufIdx, SegError> {
    let ihl = match (local.ip(), remote.ip()) {
        (IpAddr::V4(_), IpAddr::V4(_)) => 20,
        (IpAddr::V6(_), IpAddr::V6(_)) => 40,
        _ => return Err(SegError::BadPeer),
    };
    let mut bi = [BufIdx(0)];
    if cx.bufs().alloc(&mut bi) != 1 {
        return Err(SegError::NoBuffer);
    }
    let bi = bi[0];
    let mut opts = [0u8; 40];
    let olen = tcp_options(o, &mut opts);
    let thl = 20 + olen;
    let hl = ihl + thl;
    let (room, len) = {
        // SAFETY: freshly allocated, owned here, one view.
        let mut b = unsafe { cx.buffer(bi) };
        let room = b.raw_data_mut().len() - hl;
        let mut len = (o.len as usize).min(room);
        if len > 0 {
            len = tx
                .map(|f| f.peek_at(o.off, &mut b.raw_data_mut()[hl..hl + len]))
                .unwrap_or(0);
        }
        b.hdr.current_data = 0;
        b.set_len(hl + len);
        (room, len)
    };
    // The rest of an aggregate, one buffer after another.
    let mut total = len;
    if let Some(tx) = tx.filter(|_| o.gso != 0 && len == room) {
        while total < o.len as usize {
            let Some(nb) = cx.bufs().alloc_one() else {
                cx.free(&[bi]);
                return Err(SegError::NoBuffer);
            };
            let (want, got) = {
                // SAFETY: freshly allocated, owned here, one view.
                let mut n = unsafe { cx.buffer(nb) };
                n.hdr.current_data = 0;
                let raw = n.raw_data_mut();
                let want = (o.len as usize - total).min(raw.len());
                let got = tx.peek_at(o.off + total as u32, &mut raw[..want]);
                n.set_len(got);
                (want, got)
            };
            if got < want {
                cx.free(&[bi, nb]);
                return Err(SegError::ShortFifo);
            }
            cx.bufs().chain_append(bi, nb);
            total += got;
        }
    }
    // All of `o`'s bytes: in the chain for an aggregate, in the first buffer otherwise.
    let want = if o.gso != 0 {
        o.len as usize
    } else {
        (o.len as usize).min(room)
    };
    if tx.is_some() && total < want {
        cx.free(&[bi]);
        return Err(SegError::ShortFifo);
    }
    let gso = o.gso != 0 && total > o.gso as usize;
    // SAFETY: as above; the head of the chain built here.
    let mut b = unsafe { cx.buffer(bi) };
    let raw = b.raw_data_mut();
    {
        let t = &mut raw[ihl..hl + len];
        t[20..thl].copy_from_slice(&opts[..olen]);
        let mut p = TcpPacket::new_unchecked(&mut t[..]);
        let ack = if o.flags.intersects(TcpFlags::ACK) {
            o.ack
        } else {
            0
        };
        TcpRepr {
            src_port: local.port(),
            dst_port: remote.port(),
            seq_number: o.seq,
            ack_number: ack,
            flags: o.flags,
            window: o.wnd,
            payload_len: total,
        }
        .emit(&mut p);
        p.set_header_len(thl);
        let l4len = thl + total;
        match (local.ip(), remote.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) if gso => {
                p.set_checksum(checksum::pseudo_header_v4(s, d, 6, l4len as u16))
            }
            (IpAddr::V6(s), IpAddr::V6(d)) if gso => {
                p.set_checksum(sluice_wire::ipv6::pseudo_header_sum(s, d, 6, l4len as u32))
            }
            (IpAddr::V4(s), IpAddr::V4(d)) => p.fill_checksum_v4(s, d),
            (IpAddr::V6(s), IpAddr::V6(d)) => p.fill_checksum_v6(s, d),
            _ => {}
        }
    }
    match (local.ip(), remote.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => ip4_header(&mut raw[..20], s, d, 6, thl + total, ip_id),
        (IpAddr::V6(s), IpAddr::V6(d)) => ip6_header(&mut raw[..40], s, d, 6, thl + total),
        _ => {}
    }
    b.hdr.flags |= flags::LOCALLY_ORIGINATED;
    if gso {
        b.hdr.flags |= flags::GSO | flags::OFFLOAD_L4_CKSUM;
        b.hdr.gso_size = o.gso;
        b.hdr.gso_type = if ihl == 40 {
            sluice_vnet::offload::gso_type::TCPV6
        } else {
            sluice_vnet::offload::gso_type::TCPV4
        };
        b.hdr.gso_l4_offset = ihl as u8;
        b.hdr.gso_l4_hdr_len = thl as u8;
    }
    b.hdr.rx_if = 0;
    b.hdr.ip.fib_index = 0;
    Ok(bi)
}

/// What [`SessionQueue::watch`] holds: each attached application's segment and geometry.
fn watch_of(
    sm: &SessionMain,
) -> Vec<(
    Arc<sluice_infra::shm::Region>,
    sluice_session::seg::Geometry,
)> {
    sm.apps
        .iter()
        .flatten()
        .map(|a| (a.seg.clone(), a.g))
        .collect()
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
    /// The `SessionMain::apps_gen` `watch` was made at (workers).
    apps_gen: u64,
    busy: bool,
    pending: VecDeque<(u32, u32)>,
    irqs: Vec<u32>,
    out4: Vec<BufIdx>,
    out6: Vec<BufIdx>,
    drops: Vec<BufIdx>,
    ip_id: u16,
    tcp_kick: Arc<std::sync::atomic::AtomicBool>,
    tcp_sent: u64,
    /// TSO aggregates among `tcp_sent`.
    tcp_tso: u64,
    /// The next TCP timer (RTO, persist, TIME-WAIT).
    timer_at: Option<std::time::Instant>,
    /// When the events full event queues refused are retried next (`RETRY_EVERY`).
    retry_kick: Arc<std::sync::atomic::AtomicBool>,
    retry_at: Option<std::time::Instant>,
    /// Scratch of `tcp()`, swapped with the session layer's queues (no allocation per
    /// call): control segments, connections to send, those out of buffers.
    ctl: Vec<(SocketAddr, SocketAddr, crate::tcp::Out)>,
    queue: Vec<u32>,
    stalled: Vec<u32>,
    /// This thread's control ring (`SessionWorker::ctl_in`: the requests thread 0 forwards
    /// for this thread's connections) and the batch taken from it.
    ctl_in: crate::session::CtlRing,
    ctl_reqs: Vec<crate::session::CtlReq>,
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
            ip6_header(&mut raw[..40], s, d, 17, ulen);
        }
        _ => return None,
    }
    Some(total)
}

impl SessionQueue {
    /// Retries the events this thread's full event queues refused, when `RETRY_EVERY` has
    /// passed (thread 0 for its own queues, UDP's included; each worker for its own).
    fn retry_due(&mut self, sm: &mut SessionMain) {
        if self
            .retry_at
            .is_some_and(|t| std::time::Instant::now() >= t)
        {
            self.retry_at = None;
            sm.retry_events(self.thread);
        }
    }

    /// Arms the retry timer while this thread has refused events filed, clears it after.
    fn arm_retry(&mut self, sm: &SessionMain) {
        if sm
            .workers
            .get(self.thread)
            .is_none_or(|w| w.evq_retry.is_empty())
        {
            self.retry_at = None;
        } else if self.retry_at.is_none() {
            self.retry_at = Some(std::time::Instant::now() + crate::session::RETRY_EVERY);
        }
    }

    /// The first of the TCP timer and the event retry.
    fn deadline(&self) -> Option<std::time::Instant> {
        match (self.timer_at, self.retry_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Builds one packet from the tx FIFO of session `sid` into a new buffer.
    fn build(&mut self, cx: &mut Cx, sm: &mut SessionMain, sid: u32) -> Built {
        let Some(s) = sm.sess(sid) else {
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
            cx.count(SqCounter::NoBuffer, 1);
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
                b.hdr.error = cx.error(SqCounter::CorruptFifo);
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
            b.hdr.error = cx.error(SqCounter::BadPeer);
            self.drops.push(bi);
            return Built::Dropped;
        };
        self.ip_id = self.ip_id.wrapping_add(1);
        b.hdr.current_data = 0;
        b.set_len(total);
        b.hdr.flags |= flags::LOCALLY_ORIGINATED;
        b.hdr.rx_if = 0;
        b.hdr.ip.fib_index = 0;
        if let Some(s) = sm.sess_mut(sid) {
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
    /// TCP output: RSTs and SYN-cookie SYN-ACKs, the queued connections' segments, and the
    /// timers.
    fn tcp(&mut self, cx: &mut Cx, sm: &mut SessionMain) {
        self.tcp_kick
            .store(false, std::sync::atomic::Ordering::Relaxed);
        let now = std::time::Instant::now();
        let th = self.thread;
        if self.timer_at.is_some_and(|t| now >= t) {
            self.timer_at = None;
            sm.tcp_timers(th, now);
        }
        let mut ctl = std::mem::take(&mut self.ctl);
        std::mem::swap(&mut ctl, &mut sm.workers[th].ctl_out);
        for (l, r, o) in ctl.drain(..) {
            match tcp_segment(cx, l, r, &o, None, self.ip_id) {
                Ok(bi) => {
                    self.ip_id = self.ip_id.wrapping_add(1);
                    if r.is_ipv6() {
                        self.out6.push(bi);
                    } else {
                        self.out4.push(bi);
                    }
                    self.tcp_sent += 1;
                    if o.flags.intersects(TcpFlags::RST) {
                        cx.count(SqCounter::TcpRstSent, 1);
                    }
                }
                Err(SegError::BadPeer) => cx.count(SqCounter::BadPeer, 1),
                Err(_) => cx.count(SqCounter::NoBuffer, 1),
            }
        }
        self.ctl = ctl;
        if !sm.tcp_applied {
            // Protocol 6 is not registered on every thread yet: a SYN sent now could have
            // its SYN-ACK punted. `set_tcp_applied` kicks this thread once it is.
            self.timer_at = sm.tcp_next_deadline(th);
            return;
        }
        let mut queue = std::mem::take(&mut self.queue);
        std::mem::swap(&mut queue, &mut sm.workers[th].tcp_out);
        let mut stalled = std::mem::take(&mut self.stalled);
        for sid in queue.drain(..) {
            if !self.tcp_send(cx, sm, sid, now) {
                stalled.push(sid);
            }
        }
        // Out of buffers: retried on the next call.
        sm.workers[th].tcp_out.append(&mut stalled);
        (self.queue, self.stalled) = (queue, stalled);
        self.timer_at = sm.tcp_next_deadline(th);
    }

    /// Sends what connection `sid` has; false when a buffer allocation failed.
    fn tcp_send(
        &mut self,
        cx: &mut Cx,
        sm: &mut SessionMain,
        sid: u32,
        now: std::time::Instant,
    ) -> bool {
        let SessionMain {
            apps,
            workers,
            params,
            ..
        } = sm;
        // `sid` came from this thread's queue: its session lives here.
        let w = &mut workers[self.thread];
        let tcp_timer_set = &mut w.tcp_timer_set;
        let Some(s) = w
            .sessions
            .get_mut(handle_index(sid))
            .and_then(|x| x.as_mut())
        else {
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
            // In the handshake: the FIFO the connection will get.
            None => (0, params.cfg.fifo_size),
        };
        let tx = fifos.as_ref().map(|f| &f.1);
        let mut failed = None;
        let mut n = 0u64;
        let mut bytes = 0u64;
        let out = if remote.is_ipv6() {
            &mut self.out6
        } else {
            &mut self.out4
        };
        let ip_id = &mut self.ip_id;
        let tso = &mut self.tcp_tso;
        let mut fallbacks = 0;
        t.output(tx_used, rx_free, now, |o| {
            if failed.is_some() {
                return false;
            }
            match tcp_segment(cx, local, remote, &o, tx, *ip_id) {
                Ok(bi) => {
                    // An aggregate's segments take the ids after its own.
                    let segs = if o.gso == 0 {
                        1
                    } else {
                        *tso += 1;
                        o.len.div_ceil(o.gso as u32).max(1)
                    };
                    *ip_id = ip_id.wrapping_add(segs as u16);
                    out.push(bi);
                    n += 1;
                    bytes += o.len as u64;
                    true
                }
                // An aggregate without buffers for its chain: `output` tries single
                // segments instead (a short pool need not wait for a chain's worth free).
                Err(SegError::NoBuffer) if o.gso != 0 => {
                    fallbacks += 1;
                    false
                }
                Err(e) => {
                    failed = Some(e);
                    false
                }
            }
        });
        if fallbacks > 0 {
            cx.count(SqCounter::TcpTsoFallback, fallbacks);
        }
        crate::tcpsess::rearm(tcp_timer_set, sid, t, l);
        let ok = failed.is_none();
        match failed {
            Some(SegError::NoBuffer) => {
                cx.count(SqCounter::NoBuffer, 1);
                l.queued = true;
            }
            // Not sent, not requeued (no spinning): tried again when the session is
            // queued again, counted again.
            Some(SegError::ShortFifo) => cx.count(SqCounter::CorruptFifo, 1),
            Some(SegError::BadPeer) => cx.count(SqCounter::BadPeer, 1),
            None => {}
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

impl SessionQueue {
    /// Counts what this call built and sends it on.
    fn flush(&mut self, cx: &mut Cx) {
        let sent = (self.out4.len() + self.out6.len()) as u64 - self.tcp_sent;
        cx.count(SqCounter::Sent, sent);
        cx.count(SqCounter::TcpSent, self.tcp_sent);
        self.tcp_sent = 0;
        if self.tcp_tso > 0 {
            cx.count(SqCounter::TcpTso, self.tcp_tso);
            self.tcp_tso = 0;
        }
        cx.enqueue_all(SqNext::Ip4.into(), &self.out4);
        cx.enqueue_all(SqNext::Ip6.into(), &self.out6);
        cx.enqueue_all(SqNext::Drop.into(), &self.drops);
        self.out4.clear();
        self.out6.clear();
        self.drops.clear();
    }

    /// `session-queue` on a worker: sends its own connections' segments (queued by its
    /// input nodes, its timers, or thread 0 for the applications' tx events and control
    /// requests) and runs its timers. The session lock is taken only when there is work.
    fn poll_worker(&mut self, cx: &mut Cx) -> usize {
        let kicked = self.tcp_kick.load(std::sync::atomic::Ordering::Acquire);
        let due = self
            .deadline()
            .is_some_and(|t| std::time::Instant::now() >= t);
        // The tokens first: the runtime discards those a poll leaves, and an eventfd not
        // read stays readable (level-triggered epoll: the thread would never sleep again).
        self.irqs.clear();
        cx.take_irqs(&mut self.irqs);
        if !(self.busy || kicked || due || !self.irqs.is_empty() || self.queued()) {
            return 0;
        }
        let sm = self.sm.clone();
        let mut sm = lock(&sm);
        if sm.graph.is_none() {
            sm.graph = Some(cx.shared().clone());
        }
        if self.thread >= sm.n_threads() {
            return 0;
        }
        // The control requests thread 0 forwarded, in order, before this poll's output: a
        // close's FIN goes out now. Thread 0 pushes and kicks under the session lock and
        // only `tcp()` clears the kick, under it too: read here, the kick is set if the
        // ring holds a request, so a poll without one (a data-path poll: its input, tx
        // events, timers) never takes the ring's lock.
        if self.tcp_kick.load(std::sync::atomic::Ordering::Acquire) {
            let mut q = match self.ctl_in.lock() {
                Ok(q) => q,
                Err(p) => p.into_inner(),
            };
            std::mem::swap(&mut *q, &mut self.ctl_reqs);
        }
        if !self.ctl_reqs.is_empty() {
            sm.apply_ctl(self.thread, &mut self.ctl_reqs);
        }
        self.retry_due(&mut sm);
        self.worker_events(cx, &mut sm);
        self.tcp(cx, &mut sm);
        self.arm_retry(&sm);
        // Held connections (`tcp_applied` false) wait for a kick, not a busy poll.
        self.busy = sm.tcp_applied && !sm.workers[self.thread].tcp_out.is_empty();
        drop(sm);
        let n = self.out4.len() + self.out6.len();
        self.flush(cx);
        n
    }
}

impl SessionQueue {
    /// Whether an application queued a tx event on this thread's Sluice queue (seen without
    /// the lock: an eventfd only fires when this thread announced it sleeps).
    fn queued(&self) -> bool {
        let t = self.thread as u32;
        self.watch
            .iter()
            .any(|(r, g)| sluice_session::seg::EvQ::sluice(r, g, t).is_some_and(|q| !q.is_empty()))
    }

    /// A worker: registers its applications' eventfds, refreshes the segments it watches,
    /// and takes the tx events queued for its connections (each queues the connection for
    /// `tcp()` on this thread).
    fn worker_events(&mut self, cx: &mut Cx, sm: &mut SessionMain) {
        let th = self.thread;
        for (fd, tok) in std::mem::take(&mut sm.workers[th].efd_add) {
            if let Err(e) = cx.irq_register(fd, tok) {
                log::warn!("session-queue: epoll add: {e}");
            }
        }
        for fd in std::mem::take(&mut sm.workers[th].efd_del) {
            cx.irq_unregister(fd.as_raw_fd());
        }
        if self.apps_gen != sm.apps_gen {
            self.apps_gen = sm.apps_gen;
            self.watch = watch_of(sm);
        }
        // `poll_worker` took this poll's tokens.
        for &a in &self.irqs {
            if let Some(e) = sm
                .apps
                .get(a as usize)
                .and_then(|a| a.as_ref())
                .and_then(|a| a.sluice_efds.get(th))
            {
                drain_eventfd(e.as_raw_fd());
            }
        }
        let mut sids = std::mem::take(&mut self.queue);
        for app in sm.apps.iter().flatten() {
            let Some(q) = app.sluice_evq(th as u32) else {
                continue;
            };
            q.woke();
            // At most one event per slot is pending: the queue holds at most n_slots.
            for _ in 0..app.g.evq_len {
                let Some(slot) = q.pop() else { break };
                if let Some((_, tx)) = app.fifos(slot) {
                    tx.clear_event();
                }
                // A slot another thread serves (its session changed since the event was
                // queued) is left: its new session's events go to its own queue.
                if let Some(sid) = app.slots.get(slot) {
                    if app.owner(slot) as usize == th && handle_thread(sid) == th {
                        sids.push(sid);
                    }
                }
            }
        }
        for sid in sids.drain(..) {
            if sm.sess(sid).is_some_and(|s| s.proto.is_tcp()) {
                sm.tcp_queue(sid);
            }
        }
        self.queue = sids;
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
            return self.poll_worker(cx);
        }
        let sm = self.sm.clone();
        let mut sm = lock(&sm);
        if sm.graph.is_none() {
            sm.graph = Some(cx.shared().clone());
        }
        if self.kick.swap(false, std::sync::atomic::Ordering::Acquire) {
            self.watch = watch_of(&sm);
            // Every change of the attached applications kicks: a busy main thread collects
            // the control sockets every 50 µs only while requests may come.
            cx.want_prompt_irqs(sm.expects_requests());
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
        let mut control = false;
        for &t in &self.irqs {
            if t == crate::session::CTL_TOKEN {
                control = true;
            } else if let Some(app) = sm.apps.get(t as usize).and_then(|a| a.as_ref()) {
                drain_eventfd(app.sluice_efds[0].as_raw_fd());
            }
        }
        // Events a full event queue refused (the application may have caught up), every
        // `RETRY_EVERY`: an application that stops reading does not keep the thread busy.
        self.retry_due(&mut sm);
        // Collect the events the applications queued.
        for (ai, app) in sm.apps.iter().enumerate() {
            let Some(app) = app else { continue };
            let Some(q) = app.sluice_evq(0) else { continue };
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
        // A control request (attach, bind, connect, listen, close: its socket fired) or an
        // application gone: served by the main loop right after this iteration's nodes, not
        // at the next `session-process` tick.
        if control {
            if let Some(p) = &sm.poster {
                p.post(Box::new(crate::poll_control));
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
                    a.slots.get(slot)
                });
            let Some(sid) = sid else {
                self.pending.pop_front();
                continue;
            };
            if sm.sess(sid).is_some_and(|s| s.proto.is_tcp()) {
                // Stream data: tcp-output below sends what the window allows.
                sm.tcp_queue(sid);
                self.pending.pop_front();
                continue;
            }
            let mut emptied = false;
            let mut stalled = false;
            let taken = n;
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
            // A writer that found the FIFO full hears it has room again (only when this
            // visit took datagrams out: otherwise no room was made).
            if n > taken {
                sm.notify_tx_space(ai, slot);
            }
            if emptied {
                self.pending.pop_front();
            }
            if stalled {
                break; // out of buffers: the session stays first, retried next call
            }
        }
        if sm.tcp_count() > 0 || !sm.workers[0].ctl_out.is_empty() {
            self.tcp(cx, &mut sm);
        }
        // Nothing left: the applications are told to signal our eventfd only when the
        // thread really sleeps (`prepare_sleep`); while it runs, `active()` sees their events.
        self.busy =
            !self.pending.is_empty() || (sm.tcp_applied && !sm.workers[0].tcp_out.is_empty());
        self.retry_kick
            .store(false, std::sync::atomic::Ordering::Relaxed);
        self.arm_retry(&sm);
        drop(sm);
        self.flush(cx);
        n
    }
    fn active(&self) -> bool {
        if self.thread != 0 {
            // A worker: its own connections' output and timers, the applications' tx
            // events for them.
            return self.busy
                || self.queued()
                || self.tcp_kick.load(std::sync::atomic::Ordering::Relaxed)
                || self
                    .deadline()
                    .is_some_and(|t| std::time::Instant::now() >= t);
        }
        self.busy
            || self.tcp_kick.load(std::sync::atomic::Ordering::Relaxed)
            || self.retry_kick.load(std::sync::atomic::Ordering::Relaxed)
            || self
                .deadline()
                .is_some_and(|t| std::time::Instant::now() >= t)
            || self.kick.load(std::sync::atomic::Ordering::Relaxed)
            || self.queued()
    }
    fn poll_interval(&self) -> Option<f64> {
        // Interrupt-driven: the applications' eventfds wake the thread, attaches kick; a
        // TCP timer or an event retry bounds the sleep.
        self.deadline().map(|t| {
            t.saturating_duration_since(std::time::Instant::now())
                .as_secs_f64()
                .max(0.001)
        })
    }
    fn polling(&self) -> bool {
        self.busy
    }
    fn prepare_sleep(&mut self) -> bool {
        if self.thread != 0 {
            // The applications signal this thread's eventfd after queuing a tx event for
            // one of its connections from now on; one queued meanwhile keeps it up.
            let t = self.thread as u32;
            return self.watch.iter().all(|(r, g)| {
                sluice_session::seg::EvQ::sluice(r, g, t).is_none_or(|q| q.prepare_sleep())
            });
        }
        // Each application signals our eventfd after queuing an event from now on; one
        // queued meanwhile keeps the thread up.
        let sm = lock(&self.sm);
        let mut idle = true;
        for app in sm.apps.iter().flatten() {
            if let Some(q) = app.sluice_evq(0) {
                idle &= q.prepare_sleep();
            }
        }
        idle
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// Registers the nodes; they share `sm`.
pub fn register(b: &mut sluice_graph::GraphBuilder, sm: &Shared) {
    fn input<N: NodeFn + 'static>(
        b: &mut sluice_graph::GraphBuilder,
        sm: &Shared,
        name: &'static str,
        counters: &[CounterDesc],
        make: fn(Shared, usize) -> N,
    ) {
        let s = sm.clone();
        b.register(
            NodeRegistration::new(name, NodeKind::Internal, move |t| {
                Box::new(make(s.clone(), t))
            })
            .nexts(InNext::NAMES)
            .counters(counters),
        );
    }
    input(b, sm, UDP4_INPUT, UdpCounter::DESCS, |sm, thread| {
        UdpInput::<false> {
            sm,
            thread,
            scratch: InputScratch::new(),
        }
    });
    input(b, sm, UDP6_INPUT, UdpCounter::DESCS, |sm, thread| {
        UdpInput::<true> {
            sm,
            thread,
            scratch: InputScratch::new(),
        }
    });
    input(b, sm, TCP4_INPUT, TcpCounter::DESCS, |sm, thread| {
        TcpInput::<false> {
            sm,
            thread,
            scratch: InputScratch::new(),
        }
    });
    input(b, sm, TCP6_INPUT, TcpCounter::DESCS, |sm, thread| {
        TcpInput::<true> {
            sm,
            thread,
            scratch: InputScratch::new(),
        }
    });
    let s = sm.clone();
    let kick = lock(sm).kick.clone();
    let retry_kick = lock(sm).retry_kick.clone();
    b.register(
        NodeRegistration::new(SESSION_QUEUE, NodeKind::Input, move |t| {
            // One guard at a time (a temporary's lives to the end of its statement).
            let (tcp_kick, ctl_in) = {
                let mut g = lock(&s);
                (g.worker_kick(t), g.worker_ctl(t))
            };
            Box::new(SessionQueue {
                sm: s.clone(),
                kick: kick.clone(),
                watch: Vec::new(),
                thread: t,
                apps_gen: 0,
                busy: false,
                pending: VecDeque::new(),
                irqs: Vec::new(),
                out4: Vec::with_capacity(FRAME_SIZE),
                out6: Vec::with_capacity(FRAME_SIZE),
                drops: Vec::new(),
                ip_id: 0,
                tcp_kick,
                ctl_in,
                ctl_reqs: Vec::new(),
                tcp_sent: 0,
                tcp_tso: 0,
                timer_at: None,
                retry_kick: retry_kick.clone(),
                retry_at: None,
                ctl: Vec::new(),
                queue: Vec::new(),
                stalled: Vec::new(),
            })
        })
        .nexts(SqNext::NAMES)
        .counters(SqCounter::DESCS),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_graph::testing::Harness;

    /// Stands in for `ip4-lookup`/`ip6-lookup` (the harness captures them).
    struct Sink;
    impl NodeFn for Sink {
        fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
            cx.free(frame);
        }
        fn as_any(&mut self) -> &mut dyn Any {
            self
        }
    }

    /// The host stack's nodes on `shared`, with stand-ins for the lookups they send to.
    fn graph(shared: &Shared) -> sluice_graph::GraphBuilder {
        let mut g = sluice_graph::GraphBuilder::new();
        sluice_graph::nodes::register(&mut g);
        for name in ["ip4-lookup", "ip6-lookup"] {
            g.register(NodeRegistration::new(name, NodeKind::Internal, |_| {
                Box::new(Sink)
            }));
        }
        register(&mut g, shared);
        g
    }

    /// `session-queue` in the harness with one application that bound a UDP session:
    /// (harness, session layer, the application's socket, the session's slot).
    fn bound() -> (Harness, Shared, std::os::fd::OwnedFd, u32) {
        let (mut sm, peer) = crate::session::tests::with_app();
        let l = crate::session::tests::locals();
        let mut ports = vec![];
        let sid = sm
            .bind(0, "10.0.0.1:5000".parse().unwrap(), &l, &mut ports)
            .unwrap();
        let slot = sm.sess(sid).unwrap().slot;
        let shared: Shared = Arc::new(Mutex::new(sm));
        let h = Harness::build(graph(&shared), SESSION_QUEUE).unwrap();
        (h, shared, peer, slot)
    }

    /// The events `session-queue` and the input nodes queued for the application.
    fn app_events(shared: &Shared) -> Vec<u32> {
        let sm = lock(shared);
        let q = sm.apps[0].as_ref().unwrap().app_evq(0).unwrap();
        std::iter::from_fn(|| q.pop()).collect()
    }

    /// Fills the application's event queue (it stopped reading).
    fn fill_app_queue(shared: &Shared) {
        let sm = lock(shared);
        let q = sm.apps[0].as_ref().unwrap().app_evq(0).unwrap();
        while q.push(u32::MAX) {}
    }

    #[test]
    fn applications_signal_only_a_thread_about_to_sleep() {
        let (mut h, shared, _peer, slot) = bound();
        h.vm.main.run_once();
        let push = || {
            let sm = lock(&shared);
            let q = sm.apps[0].as_ref().unwrap().sluice_evq(0).unwrap();
            assert!(q.push(slot));
            q.needs_signal()
        };
        assert!(!push(), "the thread runs: no eventfd write for an event");
        h.vm.main.run_once(); // taken
        assert!(h.vm.main.prepare_sleep(), "nothing to do");
        assert!(push(), "the thread sleeps: the event must wake it");
        assert!(!h.vm.main.prepare_sleep(), "an event is queued");
        h.vm.main.wait(Some(0.0));
        h.vm.main.run_once();
        h.assert_no_leaks();
    }

    #[test]
    fn a_busy_main_thread_collects_promptly_only_while_an_application_is_attached() {
        let (mut h, shared, _peer, _slot) = bound();
        h.vm.main.run_once();
        assert!(h.vm.main.wants_prompt_irqs(), "an application is attached");
        lock(&shared).detach(0, &mut vec![]);
        h.vm.main.run_once();
        assert!(!h.vm.main.wants_prompt_irqs(), "none is left");
        h.assert_no_leaks();
    }

    /// `session-queue` sends no connection's segment before protocol 6 is registered on
    /// every thread, whatever made it run (a kick, a timer, UDP work), then sends it.
    #[test]
    fn a_connection_is_sent_only_once_protocol_6_is_applied() {
        let (mut h, shared, _peer, _slot) = bound();
        let sid = lock(&shared)
            .tcp_connect(
                0,
                "10.0.0.2:80".parse().unwrap(),
                &crate::session::tests::locals(),
            )
            .unwrap();
        let kick = lock(&shared).worker_kick(0);
        kick.store(true, std::sync::atomic::Ordering::Release);
        for _ in 0..3 {
            h.vm.main.run_once();
        }
        h.assert_counters(&[("tcp_sent", 0)]);
        assert_eq!(lock(&shared).workers[0].tcp_out, [sid], "the SYN waits");
        lock(&shared).set_tcp_applied(true);
        h.vm.main.run_once();
        h.assert_counters(&[("tcp_sent", 1)]);
        assert!(lock(&shared).workers[0].tcp_out.is_empty());
        h.assert_no_leaks();
    }

    #[test]
    fn udp_tx_space_is_announced_only_after_datagrams_left() {
        let (mut h, shared, _peer, slot) = bound();
        // The application asks for room and queues a tx event with nothing in the FIFO.
        let ask = |data: Option<&[u8]>| {
            let sm = lock(&shared);
            let a = sm.apps[0].as_ref().unwrap();
            let (_, tx) = a.fifos(slot).unwrap();
            if let Some(d) = data {
                assert!(tx.push("10.0.0.2:7".parse().unwrap(), d));
            }
            tx.want_space();
            tx.set_event();
            assert!(a.sluice_evq(0).unwrap().push(slot));
        };
        let app_events = || app_events(&shared);
        ask(None);
        h.vm.main.run_once();
        assert_eq!(app_events(), [], "nothing was sent: no room was made");
        // A datagram leaves: the writer hears.
        ask(Some(b"hi"));
        h.vm.main.run_once();
        h.vm.main.drain();
        assert_eq!(h.arc("ip4-lookup").len(), 1);
        assert_eq!(app_events(), [slot]);
        h.assert_no_leaks();
    }

    #[test]
    fn a_refused_tx_space_event_is_retried_on_a_timer_not_by_a_busy_thread() {
        let (mut h, shared, _peer, slot) = bound();
        let app_events = || app_events(&shared);
        fill_app_queue(&shared); // the application stopped reading
        {
            let sm = lock(&shared);
            let a = sm.apps[0].as_ref().unwrap();
            let (_, tx) = a.fifos(slot).unwrap();
            assert!(tx.push("10.0.0.2:7".parse().unwrap(), b"hi"));
            tx.want_space();
            tx.set_event();
            assert!(a.sluice_evq(0).unwrap().push(slot));
        }
        h.vm.main.run_once(); // the datagram leaves; the event is refused
        h.vm.main.drain();
        assert_eq!(h.arc("ip4-lookup").len(), 1);
        h.vm.main.run_once();
        assert!(
            !h.vm.main.wants_poll(),
            "the refused event keeps the thread busy"
        );
        let t = h.vm.main.sleep_timeout().expect("a retry timer");
        assert!(t <= crate::session::RETRY_EVERY.as_secs_f64(), "{t}");
        // The timer fires while the application still does not read: still no busy thread.
        std::thread::sleep(crate::session::RETRY_EVERY);
        assert!(h.vm.main.wants_poll(), "the retry is due");
        h.vm.main.run_once();
        assert!(!h.vm.main.wants_poll());
        // The application catches up: the next retry delivers the event.
        assert!(!app_events().contains(&slot));
        std::thread::sleep(crate::session::RETRY_EVERY);
        h.vm.main.run_once();
        assert_eq!(app_events(), [slot]);
        h.vm.main.run_once();
        assert_eq!(h.vm.main.sleep_timeout(), None, "no retry left");
        h.assert_no_leaks();
    }

    #[test]
    fn a_data_event_a_full_queue_refused_is_retried() {
        let (mut h, shared, _peer, slot) = bound();
        fill_app_queue(&shared);
        // The last datagram the peer sends: no later one will queue an event.
        let mut raw = [0u8; 30];
        raw[28..].copy_from_slice(b"hi");
        let from = "10.0.0.2:7".parse().unwrap();
        let n = push_headers(&mut raw, from, "10.0.0.1:5000".parse().unwrap(), 2, 0).unwrap();
        let b = h.packet(&raw[..n], |_| {});
        h.inject_at(UDP4_INPUT, &[b]);
        assert_eq!(h.counter_of(UDP4_INPUT, "delivered"), 1);
        assert!(!app_events(&shared).contains(&slot), "the queue was full");
        h.vm.main.run_once(); // arms the retry
        assert!(!h.vm.main.wants_poll());
        std::thread::sleep(crate::session::RETRY_EVERY);
        h.vm.main.run_once();
        assert_eq!(app_events(&shared), [slot], "the retry queued it");
        let sm = lock(&shared);
        let (rx, _) = sm.apps[0].as_ref().unwrap().fifos(slot).unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(rx.pop(&mut buf).map(|h| (h.peer, h.len)), Ok((from, 2)));
        drop(sm);
        h.assert_no_leaks();
    }

    /// IPv6 extension headers cut by the end of the packet are `short` (as a chain's first
    /// buffer ending inside them is, which `hand_to_owners` then reads whole); malformed
    /// ones stay `bad_header`.
    #[test]
    fn truncated_ipv6_extension_headers_are_short() {
        let shared: Shared = Arc::new(Mutex::new(SessionMain::default()));
        let mut h = Harness::build(graph(&shared), TCP6_INPUT).unwrap();
        let mut p = vec![0u8; 48];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&8u16.to_be_bytes());
        p[6] = 0; // hop-by-hop
        p[7] = 64;
        p[8..24].copy_from_slice(&"2001:db8::2".parse::<Ipv6Addr>().unwrap().octets());
        p[24..40].copy_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
        p[40] = 6; // then TCP
        p[41] = 2; // 24 bytes long: 16 past the packet
        h.run(&[p.clone()]);
        h.assert_counters(&[("short", 1)]);
        // A second hop-by-hop header is malformed whatever follows.
        p[41] = 0;
        p[40] = 0;
        p[4..6].copy_from_slice(&16u16.to_be_bytes());
        p.resize(56, 0);
        p[48] = 6;
        h.run(&[p]);
        h.assert_counters(&[("short", 1), ("bad_header", 1)]);
        h.assert_no_leaks();
    }

    /// An IPv4 TCP segment from 10.0.0.2:`sport` to 10.0.0.1:`dport` cut after the ports
    /// (`tcp4-input` drops it as `short` on the thread that owns its flow).
    fn cut_segment(sport: u16, dport: u16) -> Vec<u8> {
        let mut p = vec![0u8; 28];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&28u16.to_be_bytes());
        p[8] = 64;
        p[9] = 6;
        p[12..16].copy_from_slice(&[10, 0, 0, 2]);
        p[16..20].copy_from_slice(&[10, 0, 0, 1]);
        p[20..22].copy_from_slice(&sport.to_be_bytes());
        p[22..24].copy_from_slice(&dport.to_be_bytes());
        p
    }

    /// Source ports whose flow to 10.0.0.1:80 thread `t` of `n` owns.
    fn ports_owned_by(t: usize, n: usize) -> impl Iterator<Item = u16> {
        (1024u16..).filter(move |&p| {
            flow_owner(
                "10.0.0.1:80".parse().unwrap(),
                SocketAddr::new("10.0.0.2".parse().unwrap(), p),
                n,
            ) == t
        })
    }

    /// A main thread and one worker, `tcp4-input` under test.
    fn two_threads(buffers: u32) -> Harness {
        two_threads_on(&Arc::new(Mutex::new(SessionMain::default())), buffers)
    }

    /// [`two_threads`] on the session layer `shared`.
    fn two_threads_on(shared: &Shared, buffers: u32) -> Harness {
        let pool = sluice_buffer::PoolConfig {
            buffers,
            ..sluice_graph::testing::test_pool()
        };
        two_threads_at(shared, &pool, TCP4_INPUT)
    }

    /// Main thread and one worker on the session layer `shared`, buffers from `pool`, the
    /// harness injecting at `node`.
    fn two_threads_at(shared: &Shared, pool: &sluice_buffer::PoolConfig, node: &str) -> Harness {
        use sluice_graph::{CpuConfig, Vlib};
        let cpu = CpuConfig {
            main_core: None,
            workers: vec![None],
        };
        Harness::new(Vlib::new(graph(shared), &cpu, pool).unwrap(), node)
    }

    /// Whether `fd` is readable now.
    fn readable(fd: i32) -> bool {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd on the stack, zero timeout.
        unsafe { libc::poll(&mut p, 1, 0) == 1 && p.revents & libc::POLLIN != 0 }
    }

    /// A worker's eventfd that fired while its event queue is empty (the application
    /// signalled a sleep the worker already ended, and the worker took the event while
    /// busy) is read at the worker's next poll: left readable, the level-triggered epoll
    /// would wake the worker at once forever (100 % CPU while idle).
    #[test]
    fn a_worker_reads_its_eventfd_even_with_nothing_queued() {
        let (sm, _peer) = crate::session::tests::with_app_on(2);
        let shared: Shared = Arc::new(Mutex::new(sm));
        let mut h = two_threads_at(&shared, &sluice_graph::testing::test_pool(), SESSION_QUEUE);
        let efd = lock(&shared).apps[0].as_ref().unwrap().sluice_efds[1].as_raw_fd();
        let t0 = std::time::Instant::now();
        // The attach kicked the worker: it registers the eventfd with its epoll.
        while !lock(&shared).workers[1].efd_add.is_empty() {
            assert!(t0.elapsed().as_secs() < 20, "the worker did not run");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        sluice_infra::shm::signal(efd);
        let t0 = std::time::Instant::now();
        while readable(efd) && t0.elapsed().as_secs() < 2 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let left = readable(efd);
        h.vm.stop_workers();
        assert!(!left, "the worker left its eventfd readable");
        h.assert_no_leaks();
    }

    /// A worker retries the events its own full queue refused, by itself: kicked when the
    /// event is filed, its `session-queue` arms its retry timer and queues the event once
    /// the application caught up, while thread 0 does not run at all. Fails when the
    /// retries are left to thread 0 (before session 17).
    #[test]
    fn a_worker_retries_the_events_its_queue_refused() {
        use crate::tcpsess::tests::{accepted_on, fill_queue, seg};
        let (mut sm, _peer) = crate::session::tests::with_app_on(2);
        let l: SocketAddr = "10.0.0.1:80".parse().unwrap();
        sm.tcp_listen(0, l, 64, &crate::session::tests::locals())
            .unwrap();
        let (_, slot, r, snd) = accepted_on(&mut sm, l, 1, 4000..4200, 1)[0];
        fill_queue(&sm, 1);
        let shared: Shared = Arc::new(Mutex::new(sm));
        let mut h = two_threads_at(&shared, &sluice_graph::testing::test_pool(), SESSION_QUEUE);
        let t0 = std::time::Instant::now();
        // The attach kicked the worker: its first poll takes the graph (to be woken).
        while lock(&shared).graph.is_none() {
            assert!(t0.elapsed().as_secs() < 20, "the worker did not run");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let data = Seg {
            data: b"hello",
            ..seg(778, snd, TcpFlags::ACK | TcpFlags::PSH)
        };
        lock(&shared)
            .tcp_input(l, r, &data, std::time::Instant::now())
            .unwrap();
        assert_eq!(lock(&shared).workers[1].evq_retry.len(), 1, "not refused");
        // The application catches up; the worker's retry timer delivers the event.
        let q1 = |sm: &SessionMain| sm.apps[0].as_ref().unwrap().app_evq(1).unwrap().pop();
        let t0 = std::time::Instant::now();
        let mut got = None;
        while got.is_none() && t0.elapsed().as_secs() < 20 {
            match q1(&lock(&shared)) {
                Some(0) => {}
                Some(e) => got = Some(e),
                None => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
        }
        let left = lock(&shared).evq_awaiting();
        h.vm.stop_workers();
        assert_eq!(got, Some(slot), "the worker did not retry");
        assert_eq!(left, 0);
        h.assert_no_leaks();
    }

    /// Segments arriving on the worker: those of flows thread 0 owns are handed to it,
    /// those the worker owns are taken there (no handoff), each flow on one thread.
    #[test]
    fn a_segment_on_the_wrong_thread_is_handed_to_its_owner() {
        let mut h = two_threads(1024);
        let mine: Vec<Vec<u8>> = ports_owned_by(1, 2)
            .take(5)
            .map(|p| cut_segment(p, 80))
            .collect();
        let main: Vec<Vec<u8>> = ports_owned_by(0, 2)
            .take(7)
            .map(|p| cut_segment(p, 80))
            .collect();
        let mut all = mine.clone();
        all.extend(main.iter().cloned());
        h.hand_to_worker(1, &all, |_| {}, &["handoff", "short"]);
        h.assert_counters(&[("handoff", 7), ("short", 5)]);
        // Thread 0 takes (and drops, as short) the ones it owns.
        while h.vm.run_main_once() > 0 {}
        h.assert_counters(&[("handoff", 7), ("short", 12)]);
        h.vm.stop_workers();
        h.assert_no_leaks();
    }

    /// A segment in a chain cut inside its headers (its ports in the second buffer) that
    /// arrives on the worker is handed to the owner of its flow after the chain is read,
    /// not parsed on the worker (which, with per-thread tables, would look in the wrong
    /// thread's table).
    #[test]
    fn a_chain_cut_in_its_headers_is_handed_to_its_owner() {
        let mut h = two_threads(1024);
        let bufs: Vec<BufIdx> = ports_owned_by(0, 2)
            .take(5)
            .map(|p| {
                let seg = cut_segment(p, 80);
                let head = h.packet(&seg[..20], |_| {});
                let tail = h.packet(&seg[20..], |_| {});
                h.vm.main.bufs().chain_append(head, tail);
                head
            })
            .collect();
        let done = |h: &Harness| h.counter("handoff") + h.counter("short");
        let (mut sent, t0) = (0, std::time::Instant::now());
        while sent < bufs.len() || done(&h) < bufs.len() as u64 {
            sent += h.vm.shared.handoff_enqueue(0, 1, &bufs[sent..], h.node);
            assert!(t0.elapsed().as_secs() < 20, "the worker did not run");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        h.assert_counters(&[("handoff", 5), ("short", 0)]);
        // Thread 0 takes them (and drops them, as short).
        while h.vm.run_main_once() > 0 {}
        h.assert_counters(&[("handoff", 5), ("short", 5)]);
        h.vm.stop_workers();
        h.assert_no_leaks();
    }

    /// A whole SYN in a chain cut after its IP header, arriving on the worker, for a
    /// listener on thread 0 and a flow thread 0 owns: handed to thread 0 untouched (no
    /// session, no SYN-ACK before thread 0 runs), where it opens the half-open connection
    /// and queues its SYN-ACK on thread 0, none on the worker.
    #[test]
    fn a_chained_syn_is_answered_by_its_flows_owner() {
        use crate::session::handle_thread;
        let (mut sm, _peer) = crate::session::tests::with_app_on(2);
        let l: SocketAddr = "10.0.0.1:80".parse().unwrap();
        let lsid = sm
            .tcp_listen(0, l, 64, &crate::session::tests::locals())
            .unwrap();
        let shared: Shared = Arc::new(Mutex::new(sm));
        let mut h = two_threads_on(&shared, 1024);
        let sport = ports_owned_by(0, 2).next().unwrap();
        let mut syn = cut_segment(sport, 80);
        syn.resize(40, 0);
        syn[2..4].copy_from_slice(&40u16.to_be_bytes());
        syn[24..28].copy_from_slice(&777u32.to_be_bytes()); // seq
        syn[32] = 5 << 4; // data offset: 20 bytes
        syn[33] = 0x02; // SYN
        syn[34..36].copy_from_slice(&65535u16.to_be_bytes());
        let head = h.packet(&syn[..20], |m| m.flags |= flags::L4_CHECKSUM_CORRECT);
        let tail = h.packet(&syn[20..], |_| {});
        h.vm.main.bufs().chain_append(head, tail);
        let done = |h: &Harness| h.counter("handoff") + h.counter("segments");
        let (mut sent, t0) = (0, std::time::Instant::now());
        while sent < 1 || done(&h) < 1 {
            sent += h.vm.shared.handoff_enqueue(0, 1, &[head][sent..], h.node);
            assert!(t0.elapsed().as_secs() < 20, "the worker did not run");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        h.assert_counters(&[("handoff", 1), ("segments", 0)]);
        {
            let sm = lock(&shared);
            assert_eq!(sm.iter().count(), 1, "the worker opened nothing");
            assert!(sm.workers.iter().all(|w| w.tcp_out.is_empty()));
        }
        while h.vm.run_main_once() > 0 {}
        h.assert_counters(&[("handoff", 1), ("segments", 1)]);
        {
            let sm = lock(&shared);
            let r = SocketAddr::new("10.0.0.2".parse().unwrap(), sport);
            let sid = sm.workers[0].tcp_conns[&(l, r)];
            assert_eq!(handle_thread(sid), 0);
            assert_ne!(sid, lsid);
            assert_eq!(
                sm.workers[0].tcp_out,
                [sid],
                "the SYN-ACK queued on thread 0"
            );
            assert!(sm.workers[1].tcp_out.is_empty(), "none on the worker");
        }
        h.vm.stop_workers();
        h.assert_no_leaks();
    }

    /// On a worker `tcp4-input` hands the segments of thread 0's flows to itself on thread
    /// 0; what the full queue refuses goes to `error-drop` as `congestion_drop` (counted
    /// there, seen by a drop trace, freed), and thread 0 later takes the rest.
    #[test]
    fn a_full_handoff_queue_drops_through_error_drop() {
        use sluice_graph::HANDOFF_RING;
        let mut h = two_threads(2 * HANDOFF_RING as u32);
        // The worker's tcp4-input hands them (too short for a TCP header: thread 0 drops
        // them as `short`) to thread 0 or drops them: the queue to thread 0 fills (thread 0
        // does not run meanwhile), then refuses.
        let done = ["handoff", "congestion_drop"];
        let seg = cut_segment(ports_owned_by(0, 2).next().unwrap(), 80);
        h.hand_to_worker(1, &vec![seg.clone(); HANDOFF_RING], |_| {}, &done);
        h.hand_to_worker(1, &vec![seg; 100], |_| {}, &done);
        h.assert_counters(&[("handoff", HANDOFF_RING as u64), ("congestion_drop", 100)]);
        let drops = h.drops();
        assert_eq!(drops.len(), 100, "refused buffers reach error-drop");
        assert!(drops
            .iter()
            .all(|(n, c)| n == TCP4_INPUT && *c == "congestion_drop"));
        // Thread 0 takes what was handed over.
        while h.vm.run_main_once() > 0 {}
        h.assert_counters(&[
            ("handoff", HANDOFF_RING as u64),
            ("congestion_drop", 100),
            ("short", HANDOFF_RING as u64),
        ]);
        h.vm.stop_workers();
        h.assert_no_leaks();
    }
}
