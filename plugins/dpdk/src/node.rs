//! The dpdk graph nodes.
//!
//! `dpdk-input` (input): polls every rx queue placed on this thread. Per queue and call it
//! takes up to [`FRAME_SIZE`] packets from the PMD (`rte_eth_rx_burst` in bursts of 32 while
//! the queue fills them), in one shim call. With zero copy (virtual devices, see
//! docs/interfaces.md) every mbuf of the `sluice_zc` mempool is a Sluice buffer's own mbuf
//! header: the packet is already in that buffer, which goes into the graph (its header reset
//! and set, in one pass) with its mbuf, which is not freed. Otherwise (no zero copy, mbufs of
//! another pool, multi-segment, indirect or shared ones) the packet is copied into a fresh
//! buffer, a packet larger than a Sluice buffer becoming a buffer chain, and those mbufs are
//! freed in one call.
//! - uses: nothing (produces packets).
//! - sets: `rx_if` = the port's interface; `current_data` at the Ethernet header: 0 for a
//!   copied packet, for a zero-copy one where the device put it (the mbuf's `data_off`
//!   minus DPDK's 128-byte headroom: may be non-zero, negative into Sluice's headroom);
//!   `rx_tsc` = the poll's TSC; starts traces (`trace add dpdk-input N`).
//! - next: `ethernet-input` for every packet.
//! - counters: `no_buffers` (error: Sluice buffer pool exhausted; the packet is dropped and
//!   counted as the interface's `rx-miss`), `too_long` (error: longer than 64 KiB, its
//!   chain could not be allocated, or its mbuf's segments do not lie in their buffers or do
//!   not add up to its length: the device's lengths are checked, never trusted).
//! - also: interface `rx packets` / `rx bytes` / `rx-miss`, `pcap trace rx`.
//! - rx mode: polling only (`set interface rx-mode` refuses interrupt and adaptive: the
//!   plugin enables no rx interrupts); `set interface rx-placement` moves queues.
//!
//! `dpdk-tx` (internal): the transmit node of every DPDK interface.
//! - uses: `tx_if` (which interface), the packet (whole chain).
//! - sets: nothing. With zero copy a packet goes out in its own buffers: the shim writes the
//!   buffer's mbuf header (data offset and length; a chain's buffers linked) and bursts it;
//!   the packet is DPDK's from then on (the device frees the mbuf into the mempool, whose
//!   cache hands it to the next receive). Packets starting more than 128 bytes into the
//!   headroom and every packet without zero copy are copied into mbufs of `sluice_tx` and
//!   freed at once. One pass over the frame's headers gathers index, offset and length of
//!   each buffer; single-buffer runs take the shim's short path.
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
use sluice_buffer::{BufIdx, IfIndex};
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
        /// Too long, its chain could not be allocated, or its mbuf's lengths are false.
        TooLong => error("too_long", "packet longer than 64 KiB, its buffer chain or its mbuf"),
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
    rx: RxScratch,
}

/// One poll's arrays, kept with the node (not zeroed per call).
struct RxScratch {
    mb: [*mut RteMbuf; FRAME_SIZE],
    idx: [u32; FRAME_SIZE],
    off: [i16; FRAME_SIZE],
    len: [u32; FRAME_SIZE],
    out: [BufIdx; FRAME_SIZE],
    /// Copy path: fresh buffers, the mbufs copied and the buffers they go into, the bad
    /// mbufs (dropped unread).
    fresh: [BufIdx; FRAME_SIZE],
    cm: [*mut RteMbuf; FRAME_SIZE],
    cb: [u32; FRAME_SIZE],
    bm: [*mut RteMbuf; FRAME_SIZE],
}

impl Default for RxScratch {
    fn default() -> Self {
        RxScratch {
            mb: [std::ptr::null_mut(); FRAME_SIZE],
            idx: [0; FRAME_SIZE],
            off: [0; FRAME_SIZE],
            len: [0; FRAME_SIZE],
            out: [BufIdx(0); FRAME_SIZE],
            fresh: [BufIdx(0); FRAME_SIZE],
            cm: [std::ptr::null_mut(); FRAME_SIZE],
            cb: [0; FRAME_SIZE],
            bm: [std::ptr::null_mut(); FRAME_SIZE],
        }
    }
}

/// Sets the header of zero-copy packet `b` (handed over by the shim: owned by the caller, no
/// other view; its data lies in the buffer, checked by the shim): `len` bytes at `off`,
/// received on `sw_if` at `now`.
#[inline(always)]
fn zc_header(arena: sluice_buffer::Arena<'_>, b: BufIdx, off: i16, len: u32, sw_if: u32, now: u64) {
    // SAFETY: the caller owns `b` (above); one view at a time.
    let h = unsafe { arena.header_mut(b) };
    h.reset();
    h.current_data = off;
    h.current_length = len as u16;
    h.rx_if = sw_if;
    h.rx_tsc = now;
    h.flags = sluice_buffer::flags::RX_TSC;
}

// SAFETY: the mbuf pointers are only scratch space of one poll, never kept across polls.
unsafe impl Send for RxScratch {}

impl DpdkInput {
    fn poll_queue(&mut self, cx: &mut Cx, qi: usize) -> usize {
        let (api, port, queue, sw_if) = {
            let q = &self.queues.list[qi].q;
            (q.api, q.port, q.queue, q.sw_if)
        };
        let r = &mut self.rx;
        let mut ncopy = 0u16;
        // SAFETY: the arrays have room for FRAME_SIZE entries; the port and queue exist and
        // this thread is the queue's only poller. The buffers of the zero-copy packets
        // (`idx[i]` != RX_COPY) are this node's from here on.
        let n = unsafe {
            (api.rx)(
                port,
                queue,
                r.mb.as_mut_ptr(),
                FRAME_SIZE as u16,
                r.idx.as_mut_ptr(),
                r.off.as_mut_ptr(),
                r.len.as_mut_ptr(),
                &mut ncopy,
            )
        } as usize;
        if n == 0 {
            return 0;
        }
        let n = n.min(FRAME_SIZE);
        let pool = cx.pool_ref();
        let arena = pool.arena();
        let cap = pool.data_size();
        let now = cx.now_tsc();
        let (k, long, miss);
        let mut bytes = 0u64;
        if ncopy == 0 {
            // Every packet is in its own Sluice buffer: set its header, in one pass.
            for i in 0..n {
                let b = BufIdx(r.idx[i]);
                // The shim handed this buffer over (zero copy): owned by this node; its data
                // lies in the buffer (one direct segment within its mbuf's buf_len).
                zc_header(arena, b, r.off[i], r.len[i], sw_if, now);
                r.out[i] = b;
                bytes += u64::from(r.len[i]);
            }
            (k, long, miss) = (n, 0, 0);
        } else {
            let (c, l, m) = self.copy_in(cx, api, n, sw_if, now, cap);
            (k, bytes, long, miss) = (c, l, m.0, m.1);
        }
        let r = &mut self.rx;
        let mut traced = cx.trace_budget();
        if traced > 0 {
            for &b in &r.out[..k] {
                // SAFETY: owned by this node; one view at a time.
                let mut v = unsafe { pool.buffer(b) };
                let head = TraceHead::new(v.data());
                let len = v.total_len() as u32;
                if cx.trace_start(
                    &mut v,
                    RxTrace {
                        port,
                        queue,
                        sw_if,
                        len,
                        head,
                    },
                ) {
                    traced -= 1;
                    if traced == 0 {
                        break;
                    }
                }
            }
        }
        let q = &self.queues.list[qi].q;
        let t = cx.thread();
        if miss > 0 {
            q.counters.add(t, ifc::RX_MISS, miss);
            cx.count(RxCounter::NoBuffers, miss);
        }
        if long > 0 {
            cx.count(RxCounter::TooLong, long);
        }
        if k > 0 {
            q.counters.add(t, ifc::RX_PACKETS, k as u64);
            q.counters.add(t, ifc::RX_BYTES, bytes);
            cx.pcap_capture(point::RX, &r.out[..k], false);
            cx.enqueue_all(RxNext::Ethernet.next(), &r.out[..k]);
        }
        n
    }

    /// A burst of `n` packets of which some are not zero-copy mbufs: those are copied
    /// into fresh buffers (a chain when longer than one buffer) and their mbufs freed. The
    /// ones whose lengths are false (`RX_BAD`) get no buffer and are not copied: dropped
    /// unread, counted as too long. Fills `rx.out` in receive order; returns (packets, bytes,
    /// (too long, no buffer)).
    fn copy_in(
        &mut self,
        cx: &mut Cx,
        api: &Api,
        n: usize,
        sw_if: u32,
        now: u64,
        cap: usize,
    ) -> (usize, u64, (u64, u64)) {
        let r = &mut self.rx;
        // One pass: `cm` the mbufs to copy, `bm` the bad ones (all freed at the end).
        let (mut good, mut bad) = (0, 0);
        for i in 0..n {
            if r.idx[i] == sys::RX_COPY {
                if r.len[i] == sys::RX_BAD {
                    r.bm[bad] = r.mb[i];
                    bad += 1;
                } else {
                    r.cm[good] = r.mb[i];
                    good += 1;
                }
            }
        }
        let mut long = bad as u64;
        let got = cx.bufs().alloc(&mut r.fresh[..good]);
        for (c, f) in r.cb[..got].iter_mut().zip(&r.fresh[..got]) {
            *c = f.0;
        }
        // SAFETY: `cm[..got]` are mbufs of this burst whose segments lie in their buffers
        // (sd_rx checked), `cb[..got]` fresh buffers this node owns, of the arena
        // `zc::arena` described to the shim.
        unsafe { (api.rx_copy)(r.cm.as_ptr(), got as u16, r.cb.as_ptr(), cap as u32) };
        let (mut k, mut bytes) = (0usize, 0u64);
        let mut c = 0;
        for i in 0..n {
            let len = self.rx.len[i] as usize;
            let b = if self.rx.idx[i] == sys::RX_COPY {
                if self.rx.len[i] == sys::RX_BAD {
                    continue; // its data is not where the device says: dropped unread
                }
                let j = c;
                c += 1;
                if j >= got {
                    continue; // no buffer: counted as rx-miss
                }
                let b = self.rx.fresh[j];
                if len > cap {
                    if !self.chain_rest(cx, api, self.rx.cm[j], b, cap, len) {
                        long += 1;
                        cx.free(&[b]);
                        continue;
                    }
                } else {
                    // A fresh buffer: its header is reset, current_data 0.
                    // SAFETY: owned by this node; one view at a time.
                    unsafe { cx.pool_ref().arena().header_mut(b) }.current_length = len as u16;
                }
                // SAFETY: owned by this node; one view at a time.
                let h = unsafe { cx.pool_ref().arena().header_mut(b) };
                h.rx_if = sw_if;
                h.rx_tsc = now;
                h.flags |= sluice_buffer::flags::RX_TSC;
                b
            } else {
                let b = BufIdx(self.rx.idx[i]);
                // Handed over by the shim (zero copy, data checked): owned by this node.
                zc_header(
                    cx.pool_ref().arena(),
                    b,
                    self.rx.off[i],
                    self.rx.len[i],
                    sw_if,
                    now,
                );
                b
            };
            self.rx.out[k] = b;
            k += 1;
            bytes += len as u64;
        }
        // SAFETY: the burst's copied and bad packets' mbufs, each released once.
        unsafe { (api.free_bulk)(self.rx.cm.as_ptr(), good as u16) };
        if bad > 0 {
            // SAFETY: as above (`bm` and `cm` hold different mbufs).
            unsafe { (api.free_bulk)(self.rx.bm.as_ptr(), bad as u16) };
        }
        (k, bytes, (long, (good - got) as u64))
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
    /// One `sd_tx` call's arrays (kept, not zeroed per call).
    segs: Box<TxScratch>,
}

struct TxScratch {
    idx: [u32; MAX_SEGS],
    off: [i16; MAX_SEGS],
    len: [u16; MAX_SEGS],
    nseg: [u16; FRAME_SIZE],
    status: [u8; FRAME_SIZE],
}

impl Default for TxScratch {
    fn default() -> Self {
        TxScratch {
            idx: [0; MAX_SEGS],
            off: [0; MAX_SEGS],
            len: [0; MAX_SEGS],
            nseg: [0; FRAME_SIZE],
            status: [0; FRAME_SIZE],
        }
    }
}

impl DpdkTx {
    /// Sends the packets for interface `e` (`tx`) at the start of `run` (the rest of the
    /// frame) and returns how many; appends what this node must free (copied or refused
    /// packets) to `free`: the packets sent zero-copy belong to DPDK now.
    fn send_run(
        cx: &mut Cx,
        e: &TxEntry,
        tx: IfIndex,
        run: &[BufIdx],
        sg: &mut TxScratch,
        free: &mut Vec<BufIdx>,
    ) -> usize {
        let arena = cx.pool_ref().arena();
        let t = cx.thread();
        let nq = e.queues.len().max(1);
        let q = t % nq;
        let mut i = 0;
        // The run of `tx` ends here (`run` is the rest of the frame).
        let mut over = false;
        while !over && i < run.len() {
            // Gather as many whole packets as fit: one pass over the headers, single
            // buffers first (the common case).
            let (start, mut ns) = (i, 0usize);
            let end = run.len().min(i + FRAME_SIZE);
            while i < end {
                let b = run[i];
                // SAFETY: the tx node owns the frame; read-only.
                let h = unsafe { arena.header(b) };
                if h.tx_if != tx {
                    over = true;
                    break;
                }
                if h.flags & sluice_buffer::flags::NEXT_PRESENT != 0 {
                    break;
                }
                sg.idx[ns] = b.0;
                sg.off[ns] = h.current_data;
                sg.len[ns] = h.current_length;
                sg.nseg[ns] = 1;
                ns += 1;
                i += 1;
            }
            let mut np = ns;
            let single = over || i == end;
            while !single && i < run.len() && np < FRAME_SIZE {
                // SAFETY: the tx node owns the frame; read-only.
                if unsafe { arena.header(run[i]) }.tx_if != tx {
                    over = true;
                    break;
                }
                let mut cur = Some(run[i]);
                let first = ns;
                while let Some(b) = cur {
                    if ns == MAX_SEGS {
                        break;
                    }
                    // SAFETY: the tx node owns the frame and its chains; read-only.
                    let h = unsafe { arena.header(b) };
                    sg.idx[ns] = b.0;
                    sg.off[ns] = h.current_data;
                    sg.len[ns] = h.current_length;
                    ns += 1;
                    cur = h.next();
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
                sg.nseg[np] = (ns - first) as u16;
                np += 1;
                i += 1;
            }
            if np == 0 {
                continue;
            }
            let mut other = 0u16;
            if e.shared {
                e.queues[q].lock();
            }
            // SAFETY: `idx/off/len[..ns]` describe buffers of the arena `zc::arena` described
            // to the shim that this node owns (in bounds: taken from their headers);
            // `nseg[..np]` sums to `ns` (null: `ns == np`, all single buffers); `status` has
            // room for `np`; the queue is this thread's alone or locked above. Packets reported SENT are DPDK's from here on, the others stay this
            // node's.
            let sent = unsafe {
                (e.api.tx)(
                    e.port,
                    q as u16,
                    e.pool.0,
                    sg.idx.as_ptr(),
                    sg.off.as_ptr(),
                    sg.len.as_ptr(),
                    if single {
                        std::ptr::null()
                    } else {
                        sg.nseg.as_ptr()
                    },
                    np as u16,
                    e.zero_copy as i32,
                    sg.status.as_mut_ptr(),
                    &mut other,
                )
            } as usize;
            if e.shared {
                e.queues[q].unlock();
            }
            if other == 0 {
                continue;
            }
            let (mut nombuf, mut full, mut bytes) = (0u64, 0u64, 0u64);
            for (k, &b) in run[start..start + np].iter().enumerate() {
                match sg.status[k] {
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
                let h = unsafe { arena.header(b) };
                bytes += h.total_len() as u64;
                e.subs.sub_tx_failed(t, h);
            }
            if sent < np {
                e.counters.tx_failed(t, nombuf + full, bytes);
                cx.count(TxCounter::NoMbuf, nombuf);
                cx.count(TxCounter::QueueFull, full);
            }
        }
        i
    }
}

impl NodeFn for DpdkTx {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        // Not `devices::tx_runs` (it frees the whole frame, and here DPDK keeps what it
        // sent) nor `for_each_tx_run`: send_run finds where an interface's run ends in the
        // pass that gathers its buffers (a second pass over the headers cost 6-10
        // instructions per packet, measured with callgrind).
        let DpdkTx { table, free, segs } = self;
        let arena = cx.pool_ref().arena();
        let mut i = 0;
        while i < frame.len() {
            // SAFETY: the tx node owns the frame; read-only.
            let tx = unsafe { arena.header(frame[i]) }.tx_if;
            match table.get(tx) {
                Some(e) => i += Self::send_run(cx, e, tx, &frame[i..], segs, free),
                None => {
                    cx.count(TxCounter::NoInterface, 1);
                    free.push(frame[i]);
                    i += 1;
                }
            }
        }
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
