//! The af_packet graph nodes.
//!
//! `af-packet-input` (input): polls every rx queue placed on this thread. Per queue and
//! call it takes up to [`FRAME_SIZE`] packets out of the TPACKET_V3 ring (or, `v2`, the
//! TPACKET_V2 frame ring, reading a packet too large for its frame from the socket), copies each into a
//! Sluice buffer (a chain when it is larger than one buffer), re-inserts the 802.1Q header
//! the kernel stripped (`TP_STATUS_VLAN_VALID`), completes partial TCP/UDP checksums
//! (`TP_STATUS_CSUMNOTREADY`, common on veth), keeps GSO aggregates (a veth peer's TSO/USO
//! super-packets, reported in the `virtio_net_hdr` that `PACKET_VNET_HDR` puts in front of
//! each frame) whole as one buffer chain described in its metadata (`sluice_vnet::offload`:
//! flag `GSO`, segment size, header offsets, the partial checksum left as the kernel seeded
//! it), and gives each block back as soon as it is consumed.
//! - uses: nothing (produces packets).
//! - sets: `rx_if` = the host interface; `current_data` = 0 at the Ethernet header; for an
//!   aggregate flags `GSO`/`OFFLOAD_L4_CKSUM` and `gso_size`, `gso_type`, `gso_l4_offset`,
//!   `gso_l4_hdr_len`;
//!   `rx_tsc` = when the kernel put the packet in the ring (its `tp_sec`/`tp_nsec` receive
//!   timestamp carried over to the TSC through one `CLOCK_REALTIME`/TSC pair read per call,
//!   so the up to 1 ms a packet waits for its V3 block to be retired is not counted as
//!   latency by the tester); starts traces (`trace add af-packet-input N`).
//! - next: `ethernet-input` (0) for every packet.
//! - counters: `no_buffers` (error: buffer pool exhausted, packet dropped and counted as the
//!   interface's `rx-miss`), `truncated` (error: the kernel captured less than the frame),
//!   `bad_ring` (error: a ring header pointed outside its block or frame; the rest of the
//!   block is skipped), `csum_completed` (info), `vlan_restored` (info), `outgoing` (info: our own
//!   transmissions seen by the socket, ignored), `gso_kept` (info: aggregates kept whole),
//!   `gso_dropped` (error: an aggregate that is not TCP/UDP over IPv4/IPv6 without
//!   extension headers).
//! - also: interface `rx packets` / `rx bytes` / `rx-miss`, `pcap trace rx`.
//! - rx modes (`set interface rx-mode`, see `sluice_graph::rxmode`): a queue in polling mode
//!   keeps the node active while it has a block ready and for 10 ms after its last packet, and
//!   asks for a poll every 10 ms when idle; in interrupt and adaptive mode the socket fd is
//!   registered with the thread's epoll (`POLLIN` = a V3 block was retired to user space, or
//!   a V2 frame filled), so an idle thread sleeps until the kernel has packets; adaptive polls on every loop while the
//!   queue receives at least 32 packets per 10 ms.
//! - tx kicks: every poll first retries the kicks of this thread's tx queues that the kernel
//!   refused (`af-packet-tx` below); while one is pending the node asks for a poll every
//!   1 ms, also in interrupt mode (the thread's `epoll_wait` times out for it).
//!
//! `af-packet-tx` (internal): the transmit node of every host interface.
//! - uses: `tx_if` (which interface), the packet (whole chain); for a GSO aggregate (flag
//!   `GSO`) its `gso_*` metadata.
//! - sets: nothing; every buffer is freed after its bytes were copied into the tx ring, or,
//!   for an aggregate, handed to the kernel whole by one `sendmsg` on the queue's GSO socket
//!   behind a `virtio_net_hdr` with its GSO fields (the kernel or the NIC cuts it; the
//!   interface is declared GSO-capable to `interface-output` when every queue has the
//!   socket).
//! - next: none.
//! - kicks: one `sendto` per run of packets. When the kernel leaves frames in the ring
//!   (ENOBUFS: the device or qdisc dropped one, which stays requested; EAGAIN or a short send:
//!   the socket's send buffer is full) the queue is marked pending
//!   ([`sluice_vnet::devices::linux::KickState`]); the `af-packet-input` of each thread transmitting on it
//!   kicks it again every 1 ms until the ring is empty, and gives the frames up (back to the
//!   ring, counted) when none has left for 1 s.
//! - counters: `ring_full` (error: no free tx frame; the packet is dropped, never waited
//!   for), `too_big` (error: larger than a tx frame), `no_interface` (error: interface deleted
//!   while the packet was in flight), `send_error` (error: `sendto` failed otherwise; the
//!   frames stay queued and are retried like refused ones), `gso_error` (error: an
//!   aggregate the kernel refused or whose headers do not parse; a full send buffer counts
//!   as `ring_full`), `kick_retries` (info: kicks
//!   retried for frames a refused kick left), `kick_dropped` (error: frames given up after
//!   their kicks kept failing).
//! - also: interface `tx-error` for `ring_full`, `too_big` and `kick_dropped` drops (taken off
//!   `tx packets`/`tx bytes`, which count what went into the ring); for a packet sent on a
//!   VLAN sub-interface, `ring_full`/`too_big` also correct the sub-interface's counters.

use super::ring::{self, pkt3, status, RxRing, TxFull, TxGuard, TxRing};
use sluice_buffer::flags::GSO;
use sluice_buffer::{BufIdx, BufferPool};
use sluice_graph::pcap::point;
use sluice_graph::{Cx, NodeFn, TraceRecord, FRAME_SIZE};
use sluice_vnet::devices::fdq::{FdQueue, QueueSet};
use sluice_vnet::devices::linux::{KickSet, KICK_DROPPED, KICK_RETRIES};
use sluice_vnet::devices::TraceHead;
use sluice_vnet::interface::{counter, IfCounterTable, IfCounters};
use sluice_vnet::offload::{Gso, VnetHdr, VNET_HDR_LEN};
use std::any::Any;
use std::fmt::Write as _;
use std::sync::Arc;

/// Input node name.
pub const INPUT: &str = "af-packet-input";
/// Tx node name.
pub const TX: &str = "af-packet-tx";

sluice_graph::arcs! {
    /// `af-packet-input`'s next arcs.
    pub enum RxNext {
        /// Every frame, to `ethernet-input`.
        Ethernet => sluice_vnet::ethernet::ETHERNET_INPUT,
    }
}

sluice_graph::counters! {
    /// `af-packet-input`'s counters.
    pub enum RxCounter {
        /// No free buffers (rx-miss).
        NoBuffers => error("no_buffers", "no free buffers (rx-miss)"),
        /// Frame truncated by the kernel.
        Truncated => error("truncated", "frame truncated by the kernel"),
        /// Corrupt ring header, block skipped.
        BadRing => error("bad_ring", "corrupt ring header, block skipped"),
        /// Partial L4 checksums completed.
        Csum => info("csum_completed", "partial L4 checksums completed"),
        /// VLAN tags re-inserted.
        Vlan => info("vlan_restored", "VLAN tags re-inserted"),
        /// Own transmissions ignored.
        Outgoing => info("outgoing", "own transmissions ignored"),
        /// GSO aggregates kept whole.
        GsoKept => info("gso_kept", "GSO aggregates kept whole"),
        /// GSO aggregate whose headers are not what its virtio header says.
        GsoDropped => error("gso_dropped", "GSO aggregate not TCP/UDP over IPv4/IPv6"),
    }
}

sluice_graph::counters! {
    /// `af-packet-tx`'s counters.
    pub enum TxCounter {
        /// Tx ring full.
        RingFull => error("ring_full", "tx ring full"),
        /// Packet larger than a tx frame.
        TooBig => error("too_big", "packet larger than a tx frame"),
        /// Host interface deleted.
        NoInterface => error("no_interface", "host interface deleted"),
        /// `sendto` failed.
        SendError => error("send_error", "sendto failed"),
        /// GSO aggregate not sent.
        GsoError => error("gso_error", "GSO aggregate refused by the kernel or malformed"),
        /// Kicks retried ([`sluice_vnet::devices::linux::KICK_RETRIES`]).
        KickRetry => info(KICK_RETRIES.name, KICK_RETRIES.description),
        /// Frames given up ([`sluice_vnet::devices::linux::KICK_DROPPED`]).
        KickDropped => error(KICK_DROPPED.name, KICK_DROPPED.description),
    }
}

/// Largest frame accepted from the ring (a 64 KiB GSO aggregate plus L2 headers).
const MAX_RX_FRAME: usize = 65535 + 64;

/// One rx queue as polled by one thread.
pub struct RxPoll {
    /// Sluice interface.
    pub sw_if: u32,
    /// Queue number within the interface.
    pub queue: u16,
    /// The ring (shared with the control plane, which owns the interface).
    pub ring: Arc<RxRing>,
    /// Interface counters.
    pub counters: Arc<IfCounters>,
    cur: usize,
    // Inside block `cur`: packets left and offset of the next one.
    pos: Option<(u32, usize)>,
}

impl RxPoll {
    /// A queue starting at block 0.
    pub fn new(sw_if: u32, queue: u16, ring: Arc<RxRing>, counters: Arc<IfCounters>) -> Self {
        RxPoll {
            sw_if,
            queue,
            ring,
            counters,
            cur: 0,
            pos: None,
        }
    }
}

impl FdQueue for RxPoll {
    fn id(&self) -> (u32, u16) {
        (self.sw_if, self.queue)
    }
    fn fd(&self) -> std::os::fd::RawFd {
        self.ring.fd()
    }
}

/// `af-packet-input` instance: the rx queues this thread polls.
#[derive(Default)]
pub struct AfInput {
    /// Queues placed on this thread.
    pub queues: QueueSet<RxPoll>,
    /// The tx queue this thread transmits on, per interface (kicks to retry).
    pub kicks: KickSet<Arc<TxRing>>,
    scratch: Vec<u8>,
    /// V2: a whole packet read from the socket (`TP_STATUS_COPY`).
    copied: Vec<u8>,
    ticks_per_ns: f64,
}

/// Kernel timestamps older than this are not trusted (a clock step): the packet gets `now`.
const MAX_RING_AGE_NS: u64 = 10_000_000_000;

/// Converts kernel `CLOCK_REALTIME` receive timestamps to the TSC, from one (TSC, realtime)
/// pair read when a ring is polled: `rx_tsc = tsc - (realtime - tp_ts) * ticks/ns`.
#[derive(Copy, Clone)]
struct RxClock {
    tsc: u64,
    real_ns: u64,
    ticks_per_ns: f64,
}

impl RxClock {
    fn now(ticks_per_ns: f64) -> RxClock {
        let real_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        RxClock {
            tsc: sluice_infra::clock::rdtsc(),
            real_ns,
            ticks_per_ns,
        }
    }

    #[inline(always)]
    fn rx_tsc(&self, kernel_ns: u64) -> u64 {
        let age = self.real_ns.saturating_sub(kernel_ns);
        if kernel_ns == 0 || age > MAX_RING_AGE_NS {
            return self.tsc;
        }
        self.tsc
            .wrapping_sub((age as f64 * self.ticks_per_ns) as u64)
    }
}

#[derive(Copy, Clone)]
struct RxTrace {
    sw_if: u32,
    queue: u16,
    len: u32,
    status: u32,
    vlan: u16,
    head: TraceHead,
}

impl TraceRecord for RxTrace {
    fn format(&self, out: &mut String) {
        let _ = write!(
            out,
            "af_packet: sw_if_index {} queue {} len {} status 0x{:x}",
            self.sw_if, self.queue, self.len, self.status
        );
        if self.status & status::VLAN_VALID != 0 {
            let _ = write!(out, " vlan {}", self.vlan & 0xfff);
        }
        self.head.format(out);
    }
}

/// Header fields of one packet in a V3 block, read with bounds checks.
struct PktHdr {
    next: usize,
    ts_ns: u64,
    snaplen: usize,
    len: usize,
    status: u32,
    mac: usize,
    tci: u16,
    tpid: u16,
    pkttype: u8,
}

fn u32_at(d: &[u8], at: usize) -> Option<u32> {
    let b = d.get(at..at + 4)?;
    Some(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
}

fn u16_at(d: &[u8], at: usize) -> Option<u16> {
    let b = d.get(at..at + 2)?;
    Some(u16::from_ne_bytes([b[0], b[1]]))
}

fn pkt_hdr(block: &[u8], off: usize) -> Option<PktHdr> {
    let h = block.get(off..off.checked_add(pkt3::HDR_LEN)?)?;
    Some(PktHdr {
        next: u32_at(h, pkt3::NEXT)? as usize,
        ts_ns: u32_at(h, pkt3::SEC)? as u64 * 1_000_000_000 + u32_at(h, pkt3::NSEC)? as u64,
        snaplen: u32_at(h, pkt3::SNAPLEN)? as usize,
        len: u32_at(h, pkt3::LEN)? as usize,
        status: u32_at(h, pkt3::STATUS)?,
        mac: u16_at(h, pkt3::MAC)? as usize,
        tci: u32_at(h, pkt3::VLAN_TCI)? as u16,
        tpid: u16_at(h, pkt3::VLAN_TPID)?,
        pkttype: *h.get(pkt3::PKTTYPE)?,
    })
}

/// The same fields of a V2 frame (`next` unused).
fn pkt_hdr2(frame: &[u8]) -> Option<PktHdr> {
    use ring::pkt2;
    let h = frame.get(..pkt2::HDR_LEN)?;
    Some(PktHdr {
        next: 0,
        ts_ns: u32_at(h, pkt2::SEC)? as u64 * 1_000_000_000 + u32_at(h, pkt2::NSEC)? as u64,
        snaplen: u32_at(h, pkt2::SNAPLEN)? as usize,
        len: u32_at(h, pkt2::LEN)? as usize,
        status: u32_at(h, pkt2::STATUS)?,
        mac: u16_at(h, pkt2::MAC)? as usize,
        tci: u16_at(h, pkt2::VLAN_TCI)?,
        tpid: u16_at(h, pkt2::VLAN_TPID)?,
        pkttype: *h.get(pkt2::PKTTYPE)?,
    })
}

/// The packet at `start` (`snaplen` bytes) of a block or frame, and its `virtio_net_hdr`
/// (just before it, after the ring header ending at `hdr_end`) when the socket has them.
fn packet_at(
    data: &[u8],
    start: usize,
    snaplen: usize,
    hdr_end: usize,
    vnet: bool,
) -> (Option<&[u8]>, Option<VnetHdr>) {
    let pkt = start.checked_add(snaplen).and_then(|e| data.get(start..e));
    let vh = if vnet {
        start
            .checked_sub(VNET_HDR_LEN)
            .filter(|&s| s >= hdr_end)
            .and_then(|s| data.get(s..start))
            .map(VnetHdr::parse)
    } else {
        None
    };
    (pkt, vh)
}

/// What a received frame's L4 checksum needs.
#[derive(Copy, Clone)]
enum Csum {
    /// Nothing: complete (or verified) already.
    Complete,
    /// Partial at a position the kernel gave (`virtio_net_hdr`): exact, also for the
    /// inner header of an encapsulated packet.
    At { start: usize, offset: usize },
    /// Partial (`TP_STATUS_CSUMNOTREADY`) with no position given: the outermost TCP/UDP
    /// header, found by parsing.
    FromHeaders,
}

impl Csum {
    /// Completes the checksum of frame `f` as needed; whether it wrote one.
    fn complete(self, f: &mut [u8]) -> bool {
        match self {
            Csum::Complete => false,
            Csum::At { start, offset } => {
                sluice_vnet::offload::complete_partial_checksum(f, start, offset)
            }
            Csum::FromHeaders => sluice_vnet::offload::complete_l4_checksum(f),
        }
    }
}

/// Why a packet taken from the ring did not make it into the graph.
enum Took {
    /// No free buffers (rx-miss).
    NoBuffer,
    /// Dropped and counted by the callee.
    Dropped,
}

impl AfInput {
    /// Copies one packet into `b` (chaining more buffers when needed).
    fn copy_in(
        &mut self,
        cx: &mut Cx,
        pool: &BufferPool,
        b: BufIdx,
        pkt: &[u8],
        tag: Option<[u8; 4]>,
        csum: Csum,
    ) -> Result<usize, Took> {
        let total = pkt.len()
            + if tag.is_some() && pkt.len() >= 12 {
                4
            } else {
                0
            };
        let ds = pool.data_size();
        if total <= ds {
            // SAFETY: `b` was just allocated by this node and is not yet enqueued; one view.
            let mut v = unsafe { pool.buffer(b) };
            let n = sluice_vnet::offload::copy_frame(v.raw_data_mut(), pkt, tag);
            v.set_len(n);
            if csum.complete(v.data_mut()) {
                cx.count(RxCounter::Csum, 1);
            }
            return Ok(n);
        }
        // Larger than one buffer (jumbo frame, GSO aggregate).
        if matches!(csum, Csum::Complete) {
            // No checksum to complete: straight from the ring into the chain (the tag
            // re-inserted in the first buffer), no assembled copy.
            let rest = {
                // SAFETY: as above.
                let mut v = unsafe { pool.buffer(b) };
                let (n, rest) = sluice_vnet::offload::copy_frame_head(v.raw_data_mut(), pkt, tag);
                v.set_len(n);
                rest
            };
            let Some(tail) = cx.bufs().alloc_with(rest) else {
                return Err(Took::NoBuffer);
            };
            cx.bufs().chain_append(b, tail);
            return Ok(total);
        }
        // A checksum to complete over the whole frame: assemble, then chain.
        self.scratch.resize(total, 0);
        let n = sluice_vnet::offload::copy_frame(&mut self.scratch, pkt, tag);
        self.scratch.truncate(n);
        if csum.complete(&mut self.scratch) {
            cx.count(RxCounter::Csum, 1);
        }
        let Some(tail) = cx.bufs().alloc_with(&self.scratch[ds..]) else {
            return Err(Took::NoBuffer);
        };
        {
            // SAFETY: as above.
            let mut v = unsafe { pool.buffer(b) };
            v.write_packet(&self.scratch[..ds]);
        }
        cx.bufs().chain_append(b, tail);
        Ok(n)
    }

    /// Keeps a GSO aggregate whole: copies it into a buffer chain and describes it in the
    /// buffer metadata (flag `GSO`, `gso_*`, partial checksum left as the kernel seeded it),
    /// then adds it to `out`. Not TCP/UDP over IPv4/IPv6 as the header says: dropped and
    /// counted `gso_dropped`.
    #[allow(clippy::too_many_arguments)]
    fn gso_in(
        &mut self,
        cx: &mut Cx,
        pool: &BufferPool,
        b: BufIdx,
        pkt: &[u8],
        tag: Option<[u8; 4]>,
        vh: VnetHdr,
        rx: &RxCtx,
        out: &mut Out,
    ) -> Result<(), Took> {
        let len = self.copy_in(cx, pool, b, pkt, tag, Csum::Complete)?;
        let kept = {
            // SAFETY: filled by this node, not yet enqueued; one view.
            let v = unsafe { pool.buffer(b) };
            let g = Gso::parse_head(v.data(), len, vh.gso_type, vh.gso_size);
            g.map(|g| g.set_meta(v.hdr)).is_some()
        };
        if !kept {
            cx.free(&[b]);
            cx.count(RxCounter::GsoDropped, 1);
            return Err(Took::Dropped);
        }
        cx.count(RxCounter::GsoKept, 1);
        out.push(cx, pool, b, len, rx);
        Ok(())
    }

    /// Takes up to `budget` packets from queue `qi`. Returns the number of buffers sent on.
    fn poll_queue(&mut self, cx: &mut Cx, qi: usize, budget: usize) -> usize {
        {
            let q = &self.queues.list[qi].q;
            if !q.ring.ready(q.cur) {
                return 0;
            }
        }
        let pool = cx.pool_ref();
        let ring = self.queues.list[qi].q.ring.clone();
        let rx = RxCtx {
            sw_if: self.queues.list[qi].q.sw_if,
            queue: self.queues.list[qi].q.queue,
            counters: self.queues.list[qi].q.counters.clone(),
        };
        let vnet = ring.vnet_hdr();
        let nblocks = ring.geometry().block_nr;
        let mut fresh = [BufIdx(0); FRAME_SIZE];
        let budget = budget.min(FRAME_SIZE);
        let mut out = Out {
            bufs: [BufIdx(0); FRAME_SIZE],
            n: 0,
            bytes: 0,
            total: 0,
            traced: cx.trace_budget(),
            trace_status: (0, 0),
            rx_tsc: 0,
        };
        if self.ticks_per_ns == 0.0 {
            self.ticks_per_ns = cx.shared().clock.hz() / 1e9;
        }
        let clock = RxClock::now(self.ticks_per_ns);
        let (mut taken, mut miss) = (0usize, 0u64);
        if ring.geometry().v2 {
            miss = self.poll_frames(cx, qi, budget, &ring, &rx, &mut out, &clock);
        }
        while taken < budget && !ring.geometry().v2 {
            let cur = self.queues.list[qi].q.cur;
            let Some(blk) = ring.user_block(cur) else {
                break;
            };
            let data = blk.bytes();
            let (mut left, mut off) = match self.queues.list[qi].q.pos {
                Some(p) => p,
                None => {
                    let num = u32_at(data, ring::block::NUM_PKTS).unwrap_or(0);
                    let first = u32_at(data, ring::block::FIRST).unwrap_or(0) as usize;
                    if num > 0 && (first < ring::block::HDR_LEN || first >= data.len()) {
                        cx.count(RxCounter::BadRing, 1);
                        (0, 0)
                    } else {
                        (num, first)
                    }
                }
            };
            // Buffers for the packets of this block we will take now.
            let want = (left as usize).min(budget - taken);
            let got = if want > 0 {
                cx.bufs().alloc(&mut fresh[..want])
            } else {
                0
            };
            let mut used = 0;
            for _ in 0..want {
                let Some(h) = pkt_hdr(data, off) else {
                    cx.count(RxCounter::BadRing, 1);
                    left = 0;
                    break;
                };
                let start = off + h.mac;
                let (pkt, vh) = packet_at(data, start, h.snaplen, off + pkt3::HDR_LEN, vnet);
                taken += 1;
                left -= 1;
                if left > 0 {
                    match off.checked_add(h.next) {
                        Some(o) if h.next > 0 && o < data.len() => off = o,
                        _ => {
                            cx.count(RxCounter::BadRing, 1);
                            left = 0;
                        }
                    }
                }
                let Some(pkt) = pkt else {
                    cx.count(RxCounter::BadRing, 1);
                    left = 0;
                    break;
                };
                let spare = &fresh[..got];
                if self.deliver(
                    cx, pool, &h, pkt, vh, spare, &mut used, &rx, &mut out, &clock,
                ) {
                    miss += 1;
                }
                if left == 0 {
                    break;
                }
            }
            if used < got {
                cx.free(&fresh[used..got]);
            }
            let q = &mut self.queues.list[qi].q;
            if left == 0 {
                blk.release();
                q.cur = (cur + 1) % nblocks;
                q.pos = None;
            } else {
                q.pos = Some((left, off));
            }
        }
        if miss > 0 {
            rx.counters.add(cx.thread(), counter::RX_MISS, miss);
            cx.count(RxCounter::NoBuffers, miss);
        }
        out.flush(cx, &rx);
        out.total
    }
}

impl AfInput {
    /// Hands one packet of the ring (`pkt`: its captured bytes, described by `h`) to the
    /// graph through `out`, taking a buffer from `spare[*used..]`. Returns true when it was
    /// dropped for lack of buffers (rx-miss); other drops are counted here.
    #[allow(clippy::too_many_arguments)]
    fn deliver(
        &mut self,
        cx: &mut Cx,
        pool: &BufferPool,
        h: &PktHdr,
        pkt: &[u8],
        vh: Option<VnetHdr>,
        spare: &[BufIdx],
        used: &mut usize,
        rx: &RxCtx,
        out: &mut Out,
        clock: &RxClock,
    ) -> bool {
        if h.pkttype == ring::PACKET_OUTGOING {
            cx.count(RxCounter::Outgoing, 1);
            return false;
        }
        if h.snaplen < h.len || pkt.len() > MAX_RX_FRAME {
            cx.count(RxCounter::Truncated, 1);
            return false;
        }
        let tag = (h.status & status::VLAN_VALID != 0).then(|| {
            let tpid = (h.status & status::VLAN_TPID_VALID != 0).then_some(h.tpid);
            sluice_vnet::offload::vlan_header(tpid, h.tci)
        });
        if tag.is_some() {
            cx.count(RxCounter::Vlan, 1);
        }
        out.trace_status = (h.status, h.tci);
        out.rx_tsc = clock.rx_tsc(h.ts_ns);
        let gso = vh.filter(VnetHdr::is_gso);
        let r = match gso {
            _ if *used >= spare.len() => Err(Took::NoBuffer),
            Some(vh) => {
                let r = self.gso_in(cx, pool, spare[*used], pkt, tag, vh, rx, out);
                if !matches!(r, Err(Took::NoBuffer)) {
                    *used += 1; // sent on, or freed
                }
                r
            }
            None => {
                let b = spare[*used];
                let csum = match vh.and_then(|v| v.partial_csum()) {
                    Some((start, offset)) => Csum::At { start, offset },
                    None if h.status & status::CSUMNOTREADY != 0 => Csum::FromHeaders,
                    None => Csum::Complete,
                };
                let r = self.copy_in(cx, pool, b, pkt, tag, csum);
                if let Ok(len) = r {
                    *used += 1;
                    out.push(cx, pool, b, len, rx);
                }
                r.map(|_| ())
            }
        };
        matches!(r, Err(Took::NoBuffer))
    }

    /// V2: takes up to `budget` ready frames of queue `qi`, in ring order, each given back
    /// to the kernel at once. A `TP_STATUS_COPY` frame holds only the head of its packet:
    /// the whole packet is the next one in the socket's receive queue (the kernel queues it
    /// under the same lock that assigns the frame, so the orders agree). Returns rx-misses.
    #[allow(clippy::too_many_arguments)]
    fn poll_frames(
        &mut self,
        cx: &mut Cx,
        qi: usize,
        budget: usize,
        ring: &RxRing,
        rx: &RxCtx,
        out: &mut Out,
        clock: &RxClock,
    ) -> u64 {
        let pool = cx.pool_ref();
        let slots = ring.geometry().slots();
        let vnet = ring.vnet_hdr();
        let start = self.queues.list[qi].q.cur;
        let mut n = 0;
        while n < budget && ring.ready((start + n) % slots) {
            n += 1;
        }
        let mut fresh = [BufIdx(0); FRAME_SIZE];
        let got = cx.bufs().alloc(&mut fresh[..n]);
        let (mut used, mut miss) = (0, 0);
        for i in 0..n {
            let cur = (start + i) % slots;
            let Some(f) = ring.user_block(cur) else {
                break;
            };
            let data = f.bytes();
            match pkt_hdr2(data) {
                None => cx.count(RxCounter::BadRing, 1),
                Some(mut h) if h.status & status::COPY != 0 => {
                    // The whole packet, behind its virtio_net_hdr.
                    let mut buf = std::mem::take(&mut self.copied);
                    buf.resize(MAX_RX_FRAME + VNET_HDR_LEN, 0);
                    let skip = if vnet { VNET_HDR_LEN } else { 0 };
                    match ring.recv_copy(&mut buf) {
                        Ok(len) if len >= skip && len <= buf.len() && len - skip == h.len => {
                            h.snaplen = h.len;
                            let (pkt, vh) = packet_at(&buf[..len], skip, h.len, 0, vnet);
                            let spare = &fresh[..got];
                            if let Some(pkt) = pkt {
                                if self.deliver(
                                    cx, pool, &h, pkt, vh, spare, &mut used, rx, out, clock,
                                ) {
                                    miss += 1;
                                }
                            }
                        }
                        // Not there, or not the packet of this frame: dropped as truncated.
                        _ => cx.count(RxCounter::Truncated, 1),
                    }
                    self.copied = buf;
                }
                Some(h) => {
                    let (pkt, vh) = packet_at(data, h.mac, h.snaplen, ring::pkt2::HDR_LEN, vnet);
                    match pkt {
                        Some(pkt) => {
                            let spare = &fresh[..got];
                            if self.deliver(cx, pool, &h, pkt, vh, spare, &mut used, rx, out, clock)
                            {
                                miss += 1;
                            }
                        }
                        None => cx.count(RxCounter::BadRing, 1),
                    }
                }
            }
            f.release();
            self.queues.list[qi].q.cur = (cur + 1) % slots;
        }
        if used < got {
            cx.free(&fresh[used..got]);
        }
        miss
    }
}

/// The queue a packet came from.
struct RxCtx {
    sw_if: u32,
    queue: u16,
    counters: Arc<IfCounters>,
}

/// Buffers ready to go to `ethernet-input`, sent on whenever a frame's worth is collected.
struct Out {
    bufs: [BufIdx; FRAME_SIZE],
    n: usize,
    bytes: u64,
    total: usize,
    traced: u32,
    trace_status: (u32, u16),
    /// Receive time of the packet being pushed (TSC).
    rx_tsc: u64,
}

impl Out {
    fn push(&mut self, cx: &mut Cx, pool: &BufferPool, b: BufIdx, len: usize, rx: &RxCtx) {
        if self.n == FRAME_SIZE {
            self.flush(cx, rx);
        }
        // SAFETY: owned by this node until enqueued; one view.
        let mut v = unsafe { pool.buffer(b) };
        v.hdr.rx_if = rx.sw_if;
        v.hdr.rx_tsc = self.rx_tsc;
        v.hdr.flags |= sluice_buffer::flags::RX_TSC;
        if self.traced > 0 {
            let head = TraceHead::new(v.data());
            if cx.trace_start(
                &mut v,
                RxTrace {
                    sw_if: rx.sw_if,
                    queue: rx.queue,
                    len: len as u32,
                    status: self.trace_status.0,
                    vlan: self.trace_status.1,
                    head,
                },
            ) {
                self.traced -= 1;
            }
        }
        self.bufs[self.n] = b;
        self.n += 1;
        self.bytes += len as u64;
    }

    fn flush(&mut self, cx: &mut Cx, rx: &RxCtx) {
        if self.n == 0 {
            return;
        }
        let t = cx.thread();
        rx.counters.add(t, counter::RX_PACKETS, self.n as u64);
        rx.counters.add(t, counter::RX_BYTES, self.bytes);
        cx.pcap_capture(point::RX, &self.bufs[..self.n], false);
        cx.enqueue_all(RxNext::Ethernet.next(), &self.bufs[..self.n]);
        self.total += self.n;
        self.n = 0;
        self.bytes = 0;
    }
}

impl NodeFn for AfInput {
    fn poll(&mut self, cx: &mut Cx) -> usize {
        self.kicks.run(cx);
        // Which sockets fired does not matter: readiness is in the rings, checked per queue.
        let mut n = 0;
        let now = cx.now_tsc();
        for qi in 0..self.queues.list.len() {
            let got = self.poll_queue(cx, qi, FRAME_SIZE);
            self.queues.list[qi].mode.account(got, now);
            n += got;
        }
        n
    }

    fn active(&self) -> bool {
        // A ready ring first: when a packet arrives, the round that sees it reads no clock.
        if self.queues.list.iter().any(|p| p.q.ring.ready(p.q.cur)) {
            return true;
        }
        let now = sluice_infra::clock::rdtsc();
        self.kicks.due(now) || self.queues.list.iter().any(|p| p.mode.busy(now))
    }

    fn poll_interval(&self) -> Option<f64> {
        sluice_vnet::devices::linux::min_interval(
            self.queues.poll_interval(),
            self.kicks.poll_interval(),
        )
    }

    fn polling(&self) -> bool {
        self.queues.polling()
    }

    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// A host interface as seen by one thread's tx node.
#[derive(Clone)]
pub struct TxEntry {
    /// The interface's tx queues.
    pub queues: Arc<Vec<Arc<TxRing>>>,
    /// Interface counters.
    pub counters: Arc<IfCounters>,
    /// Every interface's counters (VLAN sub-interfaces of this one, for refused packets).
    pub subs: Arc<IfCounterTable>,
}

/// `af-packet-tx` instance: sw_if_index -> tx queues.
#[derive(Default)]
pub struct AfTx {
    /// Indexed by sw_if_index.
    pub table: sluice_vnet::devices::linux::SwTable<TxEntry>,
}

impl AfTx {
    fn send_run(cx: &mut Cx, pool: &BufferPool, e: &TxEntry, run: &[BufIdx]) {
        let t = cx.thread();
        let Some(q) = e.queues.get(t % e.queues.len().max(1)) else {
            cx.count(TxCounter::NoInterface, run.len() as u64);
            return;
        };
        let cap = q.capacity();
        let (mut sent, mut full, mut big, mut lost) = (0u64, 0u64, 0u64, 0u64);
        let mut err = 0u64;
        let mut g = q.lock();
        for &b in run {
            // SAFETY: owned by this node; short-lived read-only header access.
            let h = unsafe { pool.header(b) };
            let len = h.total_len();
            if h.flags & GSO != 0 {
                match Self::send_gso(cx, pool, &mut g, b) {
                    Ok(()) => continue,
                    Err(c) => {
                        match c {
                            TxCounter::RingFull => full += 1,
                            TxCounter::TooBig => big += 1,
                            _ => err += 1,
                        }
                        lost += len as u64;
                        e.subs.sub_tx_failed(t, h);
                        continue;
                    }
                }
            }
            if len > cap {
                big += 1;
                lost += len as u64;
                e.subs.sub_tx_failed(t, h);
                continue;
            }
            match g.push(|dst| sluice_vnet::devices::linux::copy_chain_into(pool, b, dst)) {
                Ok(()) => sent += 1,
                Err(TxFull::RingFull) => {
                    full += 1;
                    lost += len as u64;
                    e.subs.sub_tx_failed(t, h);
                }
            }
        }
        if sent > 0 && g.kick(cx.now_tsc()).is_err() {
            cx.count(TxCounter::SendError, 1);
        }
        drop(g);
        if full + big + err > 0 {
            e.counters.tx_failed(t, full + big + err, lost);
            cx.count(TxCounter::RingFull, full);
            cx.count(TxCounter::TooBig, big);
            cx.count(TxCounter::GsoError, err);
        }
    }

    /// Sends GSO aggregate `b` whole on the queue's GSO socket behind its `virtio_net_hdr`.
    /// The counter to charge when it could not (send buffer full counts as `ring_full`).
    fn send_gso(
        cx: &mut Cx,
        pool: &BufferPool,
        g: &mut TxGuard<'_>,
        b: BufIdx,
    ) -> Result<(), TxCounter> {
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; MAX_TX_IOV + 1];
        let mut vh = [0u8; VNET_HDR_LEN];
        let mut n = 1;
        let mut cur = Some(b);
        while let Some(x) = cur {
            if n > MAX_TX_IOV {
                return Err(TxCounter::TooBig);
            }
            // SAFETY: the tx node owns the frame and its chains; views are read-only and
            // live until the sendmsg below, while no other view of these buffers exists.
            let v = unsafe { pool.buffer(x) };
            let d = v.data();
            if x == b {
                vh = sluice_vnet::offload::vnet_hdr(v.hdr, d).ok_or(TxCounter::GsoError)?;
            }
            iov[n] = libc::iovec {
                iov_base: d.as_ptr() as *mut libc::c_void,
                iov_len: d.len(),
            };
            n += 1;
            cur = v.hdr.next();
        }
        iov[0] = libc::iovec {
            iov_base: vh.as_mut_ptr() as *mut libc::c_void,
            iov_len: VNET_HDR_LEN,
        };
        match g.send_gso(cx.now_tsc(), &iov[..n]) {
            Ok(()) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOBUFS)) => {
                Err(TxCounter::RingFull)
            }
            Err(_) => Err(TxCounter::GsoError),
        }
    }
}

/// Most buffers of one aggregate on tx (64 KiB in 2 KiB buffers, and then some).
const MAX_TX_IOV: usize = 64;

impl NodeFn for AfTx {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        sluice_vnet::devices::tx_runs(
            cx,
            frame,
            &self.table,
            TxCounter::NoInterface,
            Self::send_run,
        );
    }

    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}
