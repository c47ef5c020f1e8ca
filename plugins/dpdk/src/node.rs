//! The dpdk graph nodes.
//!
//! `dpdk-input` (input): polls every rx queue placed on this thread. Per queue and call it
//! takes up to [`FRAME_SIZE`] packets from the PMD (`rte_eth_rx_burst`, repeated while the
//! queue gives packets: vector PMDs return at most 32 per call) and allocates as many Sluice
//! buffers. With zero copy (virtual devices, see docs/interfaces.md) every mbuf of the
//! zero-copy pool carries a Sluice buffer the device wrote the packet into: that buffer goes
//! into the graph (its header reset) and the fresh one takes its place in the mbuf;
//! otherwise (no zero copy, mbufs of another pool, multi-segment packets) the packet is
//! copied into the fresh buffer, a packet larger than a Sluice buffer becoming a buffer
//! chain. The mbufs are then freed in one call (those of the zero-copy pool raw, in one
//! request).
//! - uses: nothing (produces packets).
//! - sets: `rx_if` = the port's interface; `current_data` at the Ethernet header: 0 for a
//!   copied packet, for a zero-copy one where the device put it (the mbuf's `data_off`
//!   minus DPDK's 128-byte headroom: may be non-zero, negative into Sluice's headroom);
//!   `rx_tsc` = the poll's TSC; starts traces (`trace add dpdk-input N`).
//! - next: `ethernet-input` for every packet.
//! - counters: `no_buffers` (error: Sluice buffer pool exhausted; the packet is dropped and
//!   counted as the interface's `rx-miss`), `too_long` (error: longer than 64 KiB or its
//!   chain could not be allocated).
//! - also: interface `rx packets` / `rx bytes` / `rx-miss`, `pcap trace rx`.
//! - rx mode: polling only (`set interface rx-mode` refuses interrupt and adaptive: the
//!   plugin enables no rx interrupts); `set interface rx-placement` moves queues.
//!
//! `dpdk-tx` (internal): the transmit node of every DPDK interface.
//! - uses: `tx_if` (which interface), the packet (whole chain).
//! - sets: nothing. With zero copy a single-buffer packet is transmitted in its own Sluice
//!   buffer: it takes the place of the buffer an mbuf of the zero-copy pool carried, which
//!   this node frees (DPDK frees the mbuf the plain way, from any thread, and the packet's
//!   buffer stays with it for a later receive or transmit). Chains, packets starting more
//!   than 128 bytes into the headroom and every packet without zero copy are copied into
//!   mbufs and freed at once.
//! - next: none.
//! - queues: thread t transmits on queue `t % num-tx-queues`; a queue shared by several
//!   threads (fewer queues than threads) is taken with a spin lock around the burst.
//! - counters: `no_mbuf` (error: the tx mbuf pool is exhausted), `queue_full` (error: the
//!   device's tx queue did not take the packet), `no_interface` (error: not a DPDK
//!   interface any more).
//! - also: interface `tx-error` for `no_mbuf` and `queue_full` drops (taken off `tx
//!   packets`/`tx bytes`, which `interface-output` counted), VLAN sub-interface counters
//!   corrected likewise.
//!
//! `dpdk-process` (process, main thread): every second reads each port's link (devices
//! without link-state interrupts change state only here; with them, the interrupt thread
//! publishes at once) and adds the device's missed and no-mbuf counters to the interface's
//! `rx-miss`.

use crate::port::{LinkState, Pool};
use crate::sys::{self, Api, RteMbuf};
use sluice_buffer::BufIdx;
use sluice_graph::pcap::point;
use sluice_graph::{Cx, NodeFn, Suspend, TraceRecord, Wake, FRAME_SIZE};
use sluice_vnet::devices::fdq::{FdQueue, QueueSet};
use sluice_vnet::devices::linux::SwTable;
use sluice_vnet::devices::TraceHead;
use sluice_vnet::interface::{counter as ifc, IfCounterTable, IfCounters};
use std::any::Any;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Input node name.
pub const INPUT: &str = "dpdk-input";
/// Tx node name.
pub const TX: &str = "dpdk-tx";
/// Process node name.
pub const PROCESS: &str = "dpdk-process";

sluice_graph::arcs! {
    /// `dpdk-input`'s next arcs.
    pub enum RxNext {
        /// Every packet, to `ethernet-input`.
        Ethernet => sluice_vnet::ethernet::ETHERNET_INPUT,
    }
}

sluice_graph::counters! {
    /// `dpdk-input`'s counters.
    pub enum RxCounter {
        /// No Sluice buffer for a packet.
        NoBuffers => error("no_buffers", "no free buffers (rx-miss)"),
        /// Too long, or its chain could not be allocated.
        TooLong => error("too_long", "packet longer than 64 KiB or its buffer chain"),
    }
}

sluice_graph::counters! {
    /// `dpdk-tx`'s counters.
    pub enum TxCounter {
        /// No mbuf to copy the packet into.
        NoMbuf => error("no_mbuf", "tx mbuf pool exhausted"),
        /// The device queue did not take it.
        QueueFull => error("queue_full", "device tx queue full"),
        /// Not a DPDK interface.
        NoInterface => error("no_interface", "not a DPDK interface"),
    }
}

/// Longest packet accepted from a device.
const MAX_PKT: usize = 65535;

/// One rx queue as polled by one thread.
pub struct RxQ {
    /// The shim.
    pub api: &'static Api,
    /// DPDK port.
    pub port: u16,
    /// Queue number.
    pub queue: u16,
    /// Sluice interface.
    pub sw_if: u32,
    /// Interface counters.
    pub counters: Arc<IfCounters>,
}

impl FdQueue for RxQ {
    fn id(&self) -> (u32, u16) {
        (self.sw_if, self.queue)
    }
    fn fd(&self) -> std::os::fd::RawFd {
        // Polling only: no fd is ever registered (the plugin refuses other rx modes).
        -1
    }
}

#[derive(Copy, Clone)]
struct RxTrace {
    port: u16,
    queue: u16,
    sw_if: u32,
    len: u32,
    head: TraceHead,
}

impl TraceRecord for RxTrace {
    fn format(&self, out: &mut String) {
        let _ = write!(
            out,
            "dpdk: port {} queue {} sw_if_index {} len {}",
            self.port, self.queue, self.sw_if, self.len
        );
        self.head.format(out);
    }
}

/// `dpdk-input` instance: the rx queues this thread polls.
#[derive(Default)]
pub struct DpdkInput {
    /// Queues placed on this thread.
    pub queues: QueueSet<RxQ>,
    scratch: Vec<u8>,
}

impl DpdkInput {
    fn poll_queue(&mut self, cx: &mut Cx, qi: usize) -> usize {
        let (api, port, queue, sw_if) = {
            let q = &self.queues.list[qi].q;
            (q.api, q.port, q.queue, q.sw_if)
        };
        let mut mb = [std::ptr::null_mut::<RteMbuf>(); FRAME_SIZE];
        // SAFETY: `mb` has room for FRAME_SIZE mbuf pointers; the port and queue exist and
        // this thread is the queue's only poller.
        let n = unsafe { (api.rx_burst)(port, queue, mb.as_mut_ptr(), FRAME_SIZE as u16) } as usize;
        if n == 0 {
            return 0;
        }
        let n = n.min(FRAME_SIZE);
        let mut bufs = [BufIdx(0); FRAME_SIZE];
        let got = cx.bufs().alloc(&mut bufs[..n]);
        let pool = cx.pool_ref();
        let cap = pool.data_size();
        let now = cx.now_tsc();
        let mut idx = [0u32; FRAME_SIZE];
        for (i, b) in idx.iter_mut().zip(&bufs[..got]) {
            *i = b.0;
        }
        let mut lens = [0u32; FRAME_SIZE];
        let mut offs = [0i16; FRAME_SIZE];
        // SAFETY: `idx[..got]` are buffers this node owns (fresh, no view alive), of the pool
        // `zc_init` described; `mb[..got]` are mbufs the PMD gave us. On return `idx[i]` is
        // the buffer holding packet i, owned by this node (a fresh one it swapped in stays
        // with the mbuf).
        unsafe {
            (api.rx_take)(
                mb.as_ptr(),
                got as u16,
                idx.as_mut_ptr(),
                cap as u32,
                offs.as_mut_ptr(),
                lens.as_mut_ptr(),
            )
        };
        for (b, &i) in bufs.iter_mut().zip(&idx[..got]) {
            *b = BufIdx(i);
        }
        let mut out = [BufIdx(0); FRAME_SIZE];
        let (mut k, mut bytes, mut long) = (0usize, 0u64, 0u64);
        let mut traced = cx.trace_budget();
        for i in 0..got {
            let (b, len) = (bufs[i], lens[i] as usize);
            {
                // SAFETY: owned by this node; one view, dropped before chain_rest takes one.
                let h = unsafe { pool.buffer(b) }.hdr;
                // A buffer that came out of an mbuf still has the header of the packet
                // dpdk-tx lent it with.
                h.reset();
                h.rx_if = sw_if;
                h.rx_tsc = now;
                h.flags |= sluice_buffer::flags::RX_TSC;
                h.current_data = offs[i];
            }
            if len > cap && !self.chain_rest(cx, api, mb[i], b, cap, len) {
                long += 1;
                cx.free(&[b]);
                continue;
            }
            // SAFETY: owned by this node; one view.
            let mut v = unsafe { pool.buffer(b) };
            if !v.set_len(len.min(cap)) {
                // A device wrote past the buffer (never expected): drop it.
                long += 1;
                cx.free(&[b]);
                continue;
            }
            if traced > 0 {
                let head = TraceHead::new(v.data());
                if cx.trace_start(
                    &mut v,
                    RxTrace {
                        port,
                        queue,
                        sw_if,
                        len: len as u32,
                        head,
                    },
                ) {
                    traced -= 1;
                }
            }
            out[k] = b;
            k += 1;
            bytes += len as u64;
        }
        // SAFETY: every mbuf of the burst was copied (or dropped) and is released once.
        unsafe { (api.free_bulk)(mb.as_ptr(), n as u16) };
        let q = &self.queues.list[qi].q;
        let t = cx.thread();
        if got < n {
            let miss = (n - got) as u64;
            q.counters.add(t, ifc::RX_MISS, miss);
            cx.count(RxCounter::NoBuffers, miss);
        }
        if long > 0 {
            cx.count(RxCounter::TooLong, long);
        }
        if k > 0 {
            q.counters.add(t, ifc::RX_PACKETS, k as u64);
            q.counters.add(t, ifc::RX_BYTES, bytes);
            cx.pcap_capture(point::RX, &out[..k], false);
            cx.enqueue_all(RxNext::Ethernet.next(), &out[..k]);
        }
        n
    }

    /// Packet `m` (`len` bytes) is longer than buffer `b`, which holds its first `cap`
    /// bytes: appends the rest as a chain. False when it is too long or buffers ran out.
    fn chain_rest(
        &mut self,
        cx: &mut Cx,
        api: &Api,
        m: *mut RteMbuf,
        b: BufIdx,
        cap: usize,
        len: usize,
    ) -> bool {
        if len > MAX_PKT {
            return false;
        }
        self.scratch.resize(len - cap, 0);
        // SAFETY: `m` is a live mbuf of this burst; `scratch` has room for `len - cap` bytes.
        let r = unsafe {
            (api.mbuf_read)(m, cap as u32, self.scratch.as_mut_ptr(), (len - cap) as u32)
        };
        if r as usize != len - cap {
            return false;
        }
        let Some(tail) = cx.bufs().alloc_with(&self.scratch) else {
            return false;
        };
        {
            // SAFETY: owned by this node; one view.
            let mut v = unsafe { cx.pool_ref().buffer(b) };
            v.set_len(cap);
        }
        cx.bufs().chain_append(b, tail);
        true
    }
}

impl NodeFn for DpdkInput {
    fn poll(&mut self, cx: &mut Cx) -> usize {
        let mut n = 0;
        let now = cx.now_tsc();
        for qi in 0..self.queues.list.len() {
            let got = self.poll_queue(cx, qi);
            self.queues.list[qi].mode.account(got, now);
            n += got;
        }
        n
    }

    fn active(&self) -> bool {
        !self.queues.list.is_empty()
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

/// One tx queue's lock, taken only when threads share the queue.
#[derive(Default)]
pub struct TxLock(AtomicBool);

impl TxLock {
    fn lock(&self) {
        while self
            .0
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
    }
    fn unlock(&self) {
        self.0.store(false, Ordering::Release);
    }
}

/// A DPDK interface as seen by one thread's tx node.
#[derive(Clone)]
pub struct TxEntry {
    /// The shim.
    pub api: &'static Api,
    /// DPDK port.
    pub port: u16,
    /// One lock per tx queue.
    pub queues: Arc<Vec<TxLock>>,
    /// More threads than queues: take the lock.
    pub shared: bool,
    /// Transmit mbufs (zero-copy descriptors and copies).
    pub pool: Pool,
    /// Single-buffer packets go out in their Sluice buffer (the device reads virtual
    /// addresses: a virtual device); false: every packet is copied.
    pub zero_copy: bool,
    /// Interface counters.
    pub counters: Arc<IfCounters>,
    /// Every interface's counters (VLAN sub-interfaces, for refused packets).
    pub subs: Arc<IfCounterTable>,
}

/// Most segments handed to one `sd_tx` call.
const MAX_SEGS: usize = 2 * FRAME_SIZE;

/// `dpdk-tx` instance: sw_if_index -> port.
#[derive(Default)]
pub struct DpdkTx {
    /// Indexed by sw_if_index.
    pub table: SwTable<TxEntry>,
    /// Buffers to free after a frame (reused).
    free: Vec<BufIdx>,
}

impl DpdkTx {
    /// Sends `run` (packets for interface `e`); appends what this node must free (copied or
    /// refused packets, and the buffers zero-copy transmit swapped out of mbufs) to `free`:
    /// the packets sent zero-copy belong to DPDK now.
    fn send_run(cx: &mut Cx, e: &TxEntry, run: &[BufIdx], free: &mut Vec<BufIdx>) {
        let pool = cx.pool_ref();
        let t = cx.thread();
        let nq = e.queues.len().max(1);
        let q = t % nq;
        let mut seg = [std::ptr::null::<u8>(); MAX_SEGS];
        let mut seg_len = [0u16; MAX_SEGS];
        let mut seg_idx = [0u32; MAX_SEGS];
        let mut nseg = [0u16; FRAME_SIZE];
        let mut i = 0;
        while i < run.len() {
            // Gather as many whole packets as fit.
            let (start, mut ns, mut np) = (i, 0usize, 0usize);
            while i < run.len() && np < FRAME_SIZE {
                let mut cur = Some(run[i]);
                let mut cnt = 0usize;
                while let Some(b) = cur {
                    if ns == MAX_SEGS {
                        break;
                    }
                    // SAFETY: the tx node owns the frame and its chains; read-only view.
                    let v = unsafe { pool.buffer(b) };
                    let d = v.data();
                    seg[ns] = d.as_ptr();
                    seg_len[ns] = d.len() as u16;
                    seg_idx[ns] = b.0;
                    ns += 1;
                    cnt += 1;
                    cur = v.hdr.next();
                }
                if cur.is_some() {
                    // Does not fit this batch: send what we have first (the segments
                    // gathered for it are overwritten by the next batch).
                    if np == 0 {
                        // A chain of more than MAX_SEGS buffers cannot exist (64 KiB);
                        // defend anyway: count it as refused.
                        cx.count(TxCounter::NoMbuf, 1);
                        free.push(run[i]);
                        i += 1;
                    }
                    break;
                }
                nseg[np] = cnt as u16;
                np += 1;
                i += 1;
            }
            if np == 0 {
                continue;
            }
            let mut status = [0u8; FRAME_SIZE];
            let mut freed = [0u32; FRAME_SIZE];
            let mut nfreed = 0u16;
            if e.shared {
                e.queues[q].lock();
            }
            // SAFETY: `seg[..ns]` point at `seg_len` readable bytes of buffers this node
            // owns, `seg_idx` are their indices in the pool `zc_init` described; `nseg[..np]`
            // sums to `ns`; `freed` has room for `np` indices; the queue is this thread's
            // alone or locked above. Buffers reported SENT are DPDK's from here on (lent to
            // an mbuf), the ones in `freed[..nfreed]` this node's (swapped out of those mbufs,
            // single buffers); the others stay this node's.
            let sent = unsafe {
                (e.api.tx)(
                    e.port,
                    q as u16,
                    e.pool.0,
                    seg.as_ptr(),
                    seg_len.as_ptr(),
                    seg_idx.as_ptr(),
                    nseg.as_ptr(),
                    np as u16,
                    e.zero_copy as i32,
                    status.as_mut_ptr(),
                    freed.as_mut_ptr(),
                    &mut nfreed,
                )
            } as usize;
            // The queue's other threads need not wait for the frees.
            if e.shared {
                e.queues[q].unlock();
            }
            if nfreed > 0 {
                let mut out = [BufIdx(0); FRAME_SIZE];
                for (o, &i) in out.iter_mut().zip(&freed[..nfreed as usize]) {
                    *o = BufIdx(i);
                }
                // Single buffers (lent to an mbuf alone), so their headers need not be read.
                cx.bufs().free_no_next(&out[..nfreed as usize]);
            }
            let (mut nombuf, mut full, mut bytes) = (0u64, 0u64, 0u64);
            for (k, &b) in run[start..start + np].iter().enumerate() {
                match status[k] {
                    sys::TX_SENT => continue,
                    sys::TX_COPIED => {
                        free.push(b);
                        continue;
                    }
                    sys::TX_NO_MBUF => nombuf += 1,
                    _ => full += 1,
                }
                free.push(b);
                // SAFETY: owned by this node; short-lived read-only header access.
                let h = unsafe { pool.header(b) };
                bytes += h.total_len() as u64;
                e.subs.sub_tx_failed(t, h);
            }
            if sent < np {
                e.counters.tx_failed(t, nombuf + full, bytes);
                cx.count(TxCounter::NoMbuf, nombuf);
                cx.count(TxCounter::QueueFull, full);
            }
        }
    }
}

impl NodeFn for DpdkTx {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        // `devices::for_each_tx_run`, not `tx_runs`: that frees the whole frame, and here
        // DPDK keeps what it sent.
        let DpdkTx { table, free } = self;
        let pool = cx.pool_ref();
        sluice_vnet::devices::for_each_tx_run(pool, frame, |tx, run| match table.get(tx) {
            Some(e) => Self::send_run(cx, e, run, free),
            None => {
                cx.count(TxCounter::NoInterface, run.len() as u64);
                free.extend_from_slice(run);
            }
        });
        if !free.is_empty() {
            cx.free(free);
            free.clear();
        }
    }

    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// What `dpdk-process` watches (shared with the control plane, which adds ports).
#[derive(Default, Clone)]
pub struct Watch(pub Arc<Mutex<Vec<Watched>>>);

/// One port as `dpdk-process` watches it.
pub struct Watched {
    /// Its link.
    pub link: Arc<LinkState>,
    /// Its interface counters.
    pub counters: Arc<IfCounters>,
    /// Device rx-miss (imissed + rx_nombuf) already added to the interface.
    pub seen_miss: u64,
}

/// `dpdk-process`: link polling and device miss counters, once a second.
pub struct DpdkProcess {
    /// The ports.
    pub watch: Watch,
}

impl NodeFn for DpdkProcess {
    fn process(&mut self, cx: &mut Cx, _wake: Wake) -> Suspend {
        let t = cx.thread();
        if let Ok(mut w) = self.watch.0.lock() {
            for p in w.iter_mut() {
                p.link.refresh();
                let mut s = sys::Stats::default();
                // SAFETY: `s` is a valid out pointer; the port lives as long as the process.
                if unsafe { (p.link.api.stats_get)(p.link.port, &mut s) } == 0 {
                    let miss = s.imissed + s.rx_nombuf;
                    if miss > p.seen_miss {
                        p.counters.add(t, ifc::RX_MISS, miss - p.seen_miss);
                    }
                    p.seen_miss = miss;
                }
            }
        }
        Suspend::Timeout(1.0)
    }

    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}
