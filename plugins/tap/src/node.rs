//! The tap graph nodes.
//!
//! `virtio-input` (input; VPP's name for tap input): reads the frames the kernel sends to the
//! tap queues placed on this thread, one `readv` per frame into `[virtio_net_hdr][buffer data]
//! [scratch]`, at most [`FRAME_SIZE`] per queue and call.
//! - uses: nothing (produces packets).
//! - sets: `rx_if` = the tap interface; `current_data` = 0 at the Ethernet header; buffer
//!   chains for frames larger than one buffer; for a GSO aggregate (the kernel's TCP/UDP
//!   "super-packet", the tap's offloads being on) flag `GSO` and the `gso_*` metadata, its
//!   L4 checksum left as the kernel seeded it (`sluice_vnet::offload::Gso::set_meta`);
//!   starts traces (`trace add virtio-input N`).
//! - next: `ethernet-input` (0) for every packet.
//! - counters: `no_buffers` (error: buffer pool exhausted; the frame is read and dropped, and
//!   counted as the interface's `rx-miss`), `gso_kept` (info: GSO aggregates kept whole),
//!   `gso_dropped` (error: a GSO aggregate whose headers are not TCP/UDP over IPv4/IPv6 as
//!   its `virtio_net_hdr` says), `csum_completed` (info: `VIRTIO_NET_HDR_F_NEEDS_CSUM`
//!   frames, not aggregates, whose TCP/UDP checksum Sluice completed at the position the
//!   header gives), `short` (error: shorter than the header plus an
//!   Ethernet header), `read_error` (error: `readv` failed other than `EAGAIN`).
//! - also: interface `rx packets` / `rx bytes` / `rx-miss`, the queue's own `rx packets` /
//!   `rx bytes` ([`QueueStats`], `show tap`), `pcap trace rx`.
//! - rx modes: polling reads every loop while the queue delivered packets in the last 10 ms,
//!   and every 10 ms when idle (also a queue that arrived idle on a thread by
//!   `rx-placement`); interrupt and adaptive register the tap fd with the thread's
//!   epoll (readable = a frame is queued) and read until `EAGAIN` or a full frame.
//!
//! `tap-tx` (internal): the transmit node of every tap interface: one `writev` per packet of
//! `[virtio_net_hdr][buffer chain]` on queue `thread mod num-tx-queues`; the header is zero
//! except for a GSO aggregate (flag `GSO`, `sluice_vnet::offload::vnet_hdr`), which the
//! kernel takes whole and cuts (taps declare themselves GSO-capable to `interface-output`).
//! - uses: `tx_if`, buffer chains, the `gso_*` metadata. sets: nothing; frees every buffer.
//!   next: none.
//! - counters: `full` (error: the kernel's queue for the tap is full (`EAGAIN`): dropped,
//!   never waited for), `write_error` (error: any other `writev` failure, e.g. the host side
//!   is down, or an aggregate whose headers do not parse), `too_big` (error: a chain of more
//!   than 64 buffers, refused whole), `no_interface` (error: interface deleted while the packet was in flight), each
//!   also counted as interface `tx-error` except `no_interface` (taken off `tx packets` /
//!   `tx bytes`; for a packet sent on a VLAN sub-interface, off that interface's too).

use sluice_buffer::{BufIdx, BufferPool};
use sluice_graph::pcap::point;
use sluice_graph::rxmode::POLL_TICK_SECS;
use sluice_graph::stats::Counter;
use sluice_graph::{Cx, NodeFn, TraceRecord, FRAME_SIZE};
use sluice_vnet::devices::fdq::{FdQueue, QueueSet};
use sluice_vnet::devices::TraceHead;
use sluice_vnet::interface::{counter, IfCounterTable, IfCounters};
use sluice_vnet::offload::{self, Gso, VnetHdr, VNET_HDR_LEN};
use std::any::Any;
use std::fmt::Write as _;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

/// Input node name.
pub const INPUT: &str = "virtio-input";
/// Tx node name.
pub const TX: &str = "tap-tx";

sluice_graph::arcs! {
    /// `virtio-input`'s next arcs.
    pub enum RxNext {
        /// Every frame, to `ethernet-input`.
        Ethernet => sluice_vnet::ethernet::ETHERNET_INPUT,
    }
}

sluice_graph::counters! {
    /// `virtio-input`'s counters.
    pub enum RxCounter {
        /// No free buffers (rx-miss).
        NoBuffers => error("no_buffers", "no free buffers (rx-miss)"),
        /// GSO aggregates kept whole.
        GsoKept => info("gso_kept", "GSO aggregates kept whole"),
        /// GSO aggregate whose headers do not match its virtio header.
        GsoDropped => error("gso_dropped", "GSO aggregate not TCP/UDP as its virtio header says"),
        /// Partial L4 checksums completed.
        Csum => info("csum_completed", "partial L4 checksums completed"),
        /// Frame shorter than an Ethernet header.
        Short => error("short", "frame shorter than an Ethernet header"),
        /// `readv` failed.
        ReadError => error("read_error", "readv failed"),
    }
}

sluice_graph::counters! {
    /// `tap-tx`'s counters.
    pub enum TxCounter {
        /// Tap queue full.
        Full => error("full", "tap queue full (EAGAIN)"),
        /// `writev` failed.
        WriteError => error("write_error", "writev failed"),
        /// Tap interface deleted.
        NoInterface => error("no_interface", "tap interface deleted"),
        /// A chain of more buffers than one `writev` takes.
        TooBig => error("too_big", "packet of more than 64 buffers"),
    }
}

/// Largest frame read (a 64 KiB aggregate plus headers).
const MAX_FRAME: usize = 65535 + 64;

/// Per-queue receive counters (`show tap`): written only by the thread polling the queue.
#[derive(Default, Debug)]
pub struct QueueStats {
    /// Frames read from the queue and sent on.
    pub rx_packets: Counter,
    /// Their bytes (Ethernet frame, without the virtio header).
    pub rx_bytes: Counter,
}

/// One tap queue as polled by one thread.
pub struct TapQueue {
    /// Sluice interface.
    pub sw_if: u32,
    /// Queue number.
    pub queue: u16,
    /// The queue's tun fd (shared with the tx side and the control plane).
    pub fd: Arc<OwnedFd>,
    /// Interface counters.
    pub counters: Arc<IfCounters>,
    /// This queue's counters.
    pub stats: Arc<QueueStats>,
    /// The last read filled a whole frame: more may be queued.
    more: bool,
    /// TSC of the last read (polling mode reads again a tick later).
    last_poll: u64,
}

impl TapQueue {
    /// A queue over `fd`.
    pub fn new(
        sw_if: u32,
        queue: u16,
        fd: Arc<OwnedFd>,
        counters: Arc<IfCounters>,
        stats: Arc<QueueStats>,
    ) -> Self {
        TapQueue {
            sw_if,
            queue,
            fd,
            counters,
            stats,
            more: true,
            last_poll: 0,
        }
    }
}

impl FdQueue for TapQueue {
    fn id(&self) -> (u32, u16) {
        (self.sw_if, self.queue)
    }
    fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// `virtio-input` instance.
pub struct TapInput {
    /// Queues placed on this thread.
    pub queues: QueueSet<TapQueue>,
    scratch: Vec<u8>,
    /// [`POLL_TICK_SECS`] in TSC ticks (set at the first poll).
    tick_tsc: u64,
}

impl Default for TapInput {
    fn default() -> Self {
        TapInput {
            queues: QueueSet::default(),
            scratch: vec![0; MAX_FRAME],
            tick_tsc: u64::MAX,
        }
    }
}

#[derive(Copy, Clone)]
struct RxTrace {
    sw_if: u32,
    queue: u16,
    len: u32,
    flags: u8,
    gso_type: u8,
    head: TraceHead,
}

impl TraceRecord for RxTrace {
    fn format(&self, out: &mut String) {
        let _ = write!(
            out,
            "virtio: sw_if_index {} queue {} len {} vnet-hdr flags 0x{:x} gso_type {}",
            self.sw_if, self.queue, self.len, self.flags, self.gso_type
        );
        self.head.format(out);
    }
}

/// Reads one frame: `Ok(Some(len))` with the frame in `b` (+ `scratch` beyond the buffer),
/// `Ok(None)` when the queue is empty.
fn read_one(
    fd: RawFd,
    hdr: &mut [u8; VNET_HDR_LEN],
    data: &mut [u8],
    scratch: &mut [u8],
) -> std::io::Result<Option<usize>> {
    let iov = [
        libc::iovec {
            iov_base: hdr.as_mut_ptr() as *mut libc::c_void,
            iov_len: hdr.len(),
        },
        libc::iovec {
            iov_base: data.as_mut_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        },
        libc::iovec {
            iov_base: scratch.as_mut_ptr() as *mut libc::c_void,
            iov_len: scratch.len(),
        },
    ];
    // SAFETY: three iovecs over live, writable, disjoint buffers of the given lengths.
    let n = unsafe { libc::readv(fd, iov.as_ptr(), iov.len() as i32) };
    if n >= 0 {
        return Ok(Some(n as usize));
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) => Ok(None),
        _ => Err(e),
    }
}

impl TapInput {
    /// Reads up to a frame's worth of packets from queue `qi`; returns how many were sent on.
    fn poll_queue(&mut self, cx: &mut Cx, qi: usize) -> usize {
        let pool: &BufferPool = cx.pool_ref();
        let ds = pool.data_size();
        let (sw_if, queue, fd, counters) = {
            let q = &self.queues.list[qi].q;
            (q.sw_if, q.queue, q.fd.as_raw_fd(), q.counters.clone())
        };
        let mut out = [BufIdx(0); FRAME_SIZE];
        let mut n_out = 0;
        let (mut bytes, mut miss, mut reads) = (0u64, 0u64, 0usize);
        let mut traced = cx.trace_budget();
        let mut hdr = [0u8; VNET_HDR_LEN];
        let mut drop_buf = [0u8; 256];
        while reads < FRAME_SIZE {
            reads += 1;
            let b = cx.bufs().alloc_one();
            let r = match b {
                Some(b) => {
                    // SAFETY: freshly allocated by this node, not yet enqueued; one view.
                    let mut v = unsafe { pool.buffer(b) };
                    v.hdr.current_data = 0;
                    read_one(fd, &mut hdr, &mut v.raw_data_mut()[..ds], &mut self.scratch)
                }
                // No buffer: read the frame anyway (so the queue drains) and drop it.
                None => read_one(fd, &mut hdr, &mut drop_buf, &mut self.scratch),
            };
            let len = match r {
                Ok(Some(n)) => n,
                Ok(None) => {
                    if let Some(b) = b {
                        cx.free(&[b]);
                    }
                    self.queues.list[qi].q.more = false;
                    break;
                }
                Err(_) => {
                    if let Some(b) = b {
                        cx.free(&[b]);
                    }
                    cx.count(RxCounter::ReadError, 1);
                    self.queues.list[qi].q.more = false;
                    break;
                }
            };
            let Some(b) = b else {
                miss += 1;
                continue;
            };
            let vh = VnetHdr::parse(&hdr);
            let (flags, gso_type) = (vh.flags, vh.gso_type);
            if len < VNET_HDR_LEN + 14 {
                cx.count(RxCounter::Short, 1);
                cx.free(&[b]);
                continue;
            }
            let flen = len - VNET_HDR_LEN;
            // A partial checksum to complete (an aggregate keeps it as metadata).
            let csum = vh.partial_csum().filter(|_| !vh.is_gso());
            {
                // SAFETY: owned by this node until enqueued; one view at a time.
                let mut v = unsafe { pool.buffer(b) };
                v.set_len(flen.min(ds));
                v.hdr.rx_if = sw_if;
                if let Some((start, off)) = csum {
                    // Over the whole frame: the buffer, then the rest still in `scratch`.
                    let rest = &mut self.scratch[..flen.saturating_sub(ds)];
                    if offload::complete_partial_checksum_split(v.data_mut(), rest, start, off) {
                        cx.count(RxCounter::Csum, 1);
                    }
                }
            }
            if flen > ds {
                match cx.bufs().alloc_with(&self.scratch[..flen - ds]) {
                    Some(tail) => cx.bufs().chain_append(b, tail),
                    None => {
                        cx.free(&[b]);
                        miss += 1;
                        continue;
                    }
                }
            }
            if vh.is_gso() {
                let kept = {
                    // SAFETY: as above.
                    let v = unsafe { pool.buffer(b) };
                    Gso::parse_head(v.data(), flen, vh.gso_type, vh.gso_size)
                        .map(|g| g.set_meta(v.hdr))
                        .is_some()
                };
                if !kept {
                    cx.count(RxCounter::GsoDropped, 1);
                    cx.free(&[b]);
                    continue;
                }
                cx.count(RxCounter::GsoKept, 1);
            }
            if traced > 0 {
                // SAFETY: as above.
                let mut v = unsafe { pool.buffer(b) };
                let head = TraceHead::new(v.data());
                if cx.trace_start(
                    &mut v,
                    RxTrace {
                        sw_if,
                        queue,
                        len: flen as u32,
                        flags,
                        gso_type,
                        head,
                    },
                ) {
                    traced -= 1;
                }
            }
            bytes += flen as u64;
            out[n_out] = b;
            n_out += 1;
        }
        if reads == FRAME_SIZE {
            self.queues.list[qi].q.more = true;
        }
        let t = cx.thread();
        if miss > 0 {
            counters.add(t, counter::RX_MISS, miss);
            cx.count(RxCounter::NoBuffers, miss);
        }
        if n_out > 0 {
            counters.add(t, counter::RX_PACKETS, n_out as u64);
            counters.add(t, counter::RX_BYTES, bytes);
            let stats = &self.queues.list[qi].q.stats;
            stats.rx_packets.add(n_out as u64);
            stats.rx_bytes.add(bytes);
            cx.pcap_capture(point::RX, &out[..n_out], false);
            cx.enqueue_all(RxNext::Ethernet.next(), &out[..n_out]);
        }
        n_out
    }
}

impl NodeFn for TapInput {
    fn poll(&mut self, cx: &mut Cx) -> usize {
        let now = cx.now_tsc();
        if self.tick_tsc == u64::MAX {
            self.tick_tsc = (cx.shared().clock.hz() * POLL_TICK_SECS) as u64;
        }
        let mut n = 0;
        for qi in 0..self.queues.list.len() {
            self.queues.list[qi].q.last_poll = now;
            let got = self.poll_queue(cx, qi);
            self.queues.list[qi].mode.account(got, now);
            n += got;
        }
        n
    }

    fn active(&self) -> bool {
        // Readiness of a tap fd is only known by reading it (or from epoll): in polling mode
        // the queue is read on every loop while busy and once per tick while idle. An
        // instance that never polled does not know its tick yet (`poll` sets it): it polls
        // now, or an idle queue moved to this thread by `rx-placement` would never be read.
        if self.queues.list.is_empty() {
            // No queue on this thread: no clock read (this runs on every loop round).
            return false;
        }
        let now = sluice_infra::clock::rdtsc();
        let first = self.tick_tsc == u64::MAX;
        self.queues.list.iter().any(|p| {
            first
                || p.q.more
                || p.mode.busy(now)
                || (p.mode.needs_tick() && now.wrapping_sub(p.q.last_poll) >= self.tick_tsc)
        })
    }

    fn poll_interval(&self) -> Option<f64> {
        self.queues.poll_interval()
    }

    fn polling(&self) -> bool {
        self.queues.polling()
    }

    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// A tap interface as seen by one thread's tx node.
#[derive(Clone)]
pub struct TxEntry {
    /// The interface's queue fds.
    pub fds: Arc<Vec<Arc<OwnedFd>>>,
    /// Interface counters.
    pub counters: Arc<IfCounters>,
    /// Every interface's counters (VLAN sub-interfaces of this one, for refused packets).
    pub subs: Arc<IfCounterTable>,
}

/// `tap-tx` instance: sw_if_index -> queues.
#[derive(Default)]
pub struct TapTx {
    /// Indexed by sw_if_index.
    pub table: sluice_vnet::devices::linux::SwTable<TxEntry>,
}

/// Most buffers of one packet on tx.
const MAX_SEGS: usize = 64;

/// Points `iov[1..]` at the data of the buffers of chain `b` and returns the number of
/// iovecs used including `iov[0]`; `None` for a chain of more than [`MAX_SEGS`] buffers.
fn chain_iov(pool: &BufferPool, b: BufIdx, iov: &mut [libc::iovec; MAX_SEGS + 1]) -> Option<usize> {
    let mut n = 1;
    let mut cur = Some(b);
    while let Some(x) = cur {
        if n > MAX_SEGS {
            return None;
        }
        // SAFETY: the tx node owns the frame and its chains; views are read-only and the
        // iovecs are used (by the writev) while no other view of these buffers exists.
        let v = unsafe { pool.buffer(x) };
        let d = v.data();
        iov[n] = libc::iovec {
            iov_base: d.as_ptr() as *mut libc::c_void,
            iov_len: d.len(),
        };
        n += 1;
        cur = v.hdr.next();
    }
    Some(n)
}

impl TapTx {
    fn send_run(cx: &mut Cx, pool: &BufferPool, e: &TxEntry, run: &[BufIdx]) {
        let t = cx.thread();
        let Some(fd) = e.fds.get(t % e.fds.len().max(1)).map(|f| f.as_raw_fd()) else {
            cx.count(TxCounter::NoInterface, run.len() as u64);
            return;
        };
        let zero = [0u8; VNET_HDR_LEN];
        let (mut full, mut err, mut big, mut lost) = (0u64, 0u64, 0u64, 0u64);
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; MAX_SEGS + 1];
        for &b in run {
            // A GSO aggregate goes to the kernel whole, described in its virtio_net_hdr
            // (the kernel cuts it); every other packet behind a zeroed one.
            let mut gso_hdr = zero;
            // SAFETY: owned by this node; a read-only view, dropped at the end of the block.
            let bad = unsafe {
                let v = pool.buffer(b);
                if v.hdr.flags & sluice_buffer::flags::GSO != 0 {
                    match offload::vnet_hdr(v.hdr, v.data()) {
                        Some(vh) => gso_hdr = vh,
                        None => {
                            err += 1;
                            lost += v.total_len() as u64;
                            e.subs.sub_tx_failed(t, v.hdr);
                        }
                    }
                }
                gso_hdr == zero && v.hdr.flags & sluice_buffer::flags::GSO != 0
            };
            if bad {
                continue;
            }
            iov[0] = libc::iovec {
                iov_base: gso_hdr.as_ptr() as *mut libc::c_void,
                iov_len: VNET_HDR_LEN,
            };
            let Some(n) = chain_iov(pool, b, &mut iov) else {
                // Cutting the chain short would hand the kernel fewer bytes than the IP (and
                // virtio) header say: refused whole.
                big += 1;
                // SAFETY: owned by this node; read-only header access.
                let h = unsafe { pool.header(b) };
                lost += h.total_len() as u64;
                e.subs.sub_tx_failed(t, h);
                continue;
            };
            // SAFETY: `n` iovecs over live buffers (the kernel only reads them).
            let r = unsafe { libc::writev(fd, iov.as_ptr(), n as i32) };
            if r < 0 {
                lost += iov[1..n].iter().map(|v| v.iov_len as u64).sum::<u64>();
                // SAFETY: owned by this node; read-only header access.
                e.subs.sub_tx_failed(t, unsafe { pool.header(b) });
                match std::io::Error::last_os_error().raw_os_error() {
                    Some(libc::EAGAIN) => full += 1,
                    _ => err += 1,
                }
            }
        }
        if full + err + big > 0 {
            e.counters.tx_failed(t, full + err + big, lost);
            cx.count(TxCounter::Full, full);
            cx.count(TxCounter::WriteError, err);
            cx.count(TxCounter::TooBig, big);
        }
    }
}

impl NodeFn for TapTx {
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

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_buffer::PoolConfig;

    #[test]
    fn a_chain_longer_than_max_segs_is_refused_not_cut() {
        let pool = BufferPool::new(&PoolConfig {
            buffers: 256,
            ..PoolConfig::default()
        })
        .unwrap();
        let mut cache = pool.cache();
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; MAX_SEGS + 1];
        for (bufs, want) in [
            (1, Some(2)),
            (MAX_SEGS, Some(MAX_SEGS + 1)),
            (MAX_SEGS + 1, None),
        ] {
            let head = cache.alloc_with(&[7u8; 100]).unwrap();
            for _ in 1..bufs {
                let x = cache.alloc_with(&[9u8; 10]).unwrap();
                cache.chain_append(head, x);
            }
            assert_eq!(chain_iov(&pool, head, &mut iov), want, "{bufs} buffers");
            if want.is_some() {
                assert_eq!(iov[1].iov_len, 100);
                assert_eq!(iov[bufs].iov_len, if bufs == 1 { 100 } else { 10 });
            }
            cache.free(&[head]);
        }
        cache.flush();
        assert_eq!(pool.stats().in_use, 0, "no leaked buffers");
    }
}
