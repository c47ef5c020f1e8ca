//! `interface-output`: hands packets to the tx node of the interface in their metadata.
//!
//! - uses: `tx_if` (set by the node that chose the output interface).
//! - sets: `error` on drops; for a VLAN sub-interface inserts its 802.1Q/802.1ad tag(s) after
//!   the MAC addresses, sets `tx_if` to the parent (whose tx node sends the frame) and records
//!   the sub-interface in `tx_sub_if`/`tx_sub_tags` (flag `TX_SUB`, cleared on every other
//!   packet).
//! - next: `error-drop` (arc 0) when the interface is unknown, deleted or admin-down;
//!   `gso-segment` (arc 1) for a GSO aggregate (flag `GSO`) whose interface is up and does
//!   not take aggregates ([`set_gso`]; the segments come back here; an aggregate for a down
//!   interface is dropped whole); else the interface's tx node
//!   (one arc per tx node, added when an interface is created).
//! - counters: `unknown_interface`, `interface_down`, `no_headroom` (no room for a VLAN
//!   tag); per-interface `tx packets`/`tx bytes` (a sub-interface's and its parent's) and
//!   `drops`. Captures frames for `pcap trace tx` (an aggregate it sends to `gso-segment` as
//!   its segments, when they come back).
//!
//! Tx counting: this node counts `tx packets`/`tx bytes` once per run of packets to one
//! interface, before the driver. A frame's first run is to its first packet's interface
//! (looked up once per frame), and a frame that is all one run of an up, untagged interface
//! goes on whole (`enqueue_all`: no per-packet next or counter store). A frame handed on
//! unchanged by the node before (`Cx::handed_frame`: the rewrite node's whole frame) is read
//! through the addresses that node resolved, with no bound check of its own. A plain packet to
//! another up, untagged interface (with many tunnels, every packet) ends the run and starts
//! its own in the frame loop: the interface's entry holds this thread's counters row
//! (`IfRow`, no hop through the `Arc`), so the change is one table read and the last run's
//! two counter adds. A tx node that cannot send a packet (ring full, too big, not
//! connected, write error) takes it back with `IfCounters::tx_failed` — tx packets and
//! bytes down, `tx-error` up, on the same thread's counters — so `show interface` tx is
//! what the driver handed to the device. The success path costs nothing extra; the failure
//! path one subtraction per run. A packet sent on a VLAN sub-interface is counted on both
//! the sub-interface and its parent; the driver sees only the parent, so for each such
//! packet it cannot send it also calls `IfCounterTable::sub_tx_failed`, which finds the
//! sub-interface in the buffer (`tx_sub_if`) and takes the packet back there too.

use crate::interface::{counter, IfCounters, IfRow, SwIfIndex};
use sluice_buffer::flags::{GSO, TOTAL_LENGTH_VALID, TX_SUB};
use sluice_buffer::{Arena, BufIdx, BufferHeader};
use sluice_graph::pcap::point;
use sluice_graph::stats::Counter;
use sluice_graph::{Cx, GraphBuilder, Next, NodeFn, NodeKind, NodeRegistration, Vlib, FRAME_SIZE};
use std::any::Any;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Node name.
pub const NAME: &str = "interface-output";

sluice_graph::arcs! {
    /// `interface-output`'s declared next arcs (each interface's tx node is added after
    /// them when the interface is created).
    pub enum OutputNext {
        /// To `error-drop`.
        Drop => "error-drop",
        /// GSO aggregates for an interface that does not take them, to `gso-segment`.
        Segment => crate::gso::NAME,
    }
}

sluice_graph::counters! {
    /// `interface-output`'s counters.
    pub enum OutputCounter {
        /// The output interface is unknown or deleted.
        UnknownInterface => error("unknown_interface", "output interface unknown or deleted"),
        /// The output interface is admin-down.
        InterfaceDown => error("interface_down", "output interface is down"),
        /// No headroom for a sub-interface's VLAN tag.
        NoHeadroom => error("no_headroom", "no headroom for the VLAN tag"),
    }
}

/// The drop arc as the per-packet next array holds it.
const NEXT_DROP: u16 = OutputNext::Drop.next().0;
/// The segmentation arc as the per-packet next array holds it.
const NEXT_SEGMENT: u16 = OutputNext::Segment.next().0;

/// How a VLAN sub-interface transmits: through its parent, with tags pushed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubTx {
    /// Parent interface.
    pub parent: u32,
    /// Tag bytes (TPID + TCI, outer first).
    pub tags: [u8; 8],
    /// 4 (one tag) or 8 (two).
    pub len: u8,
}

#[derive(Clone)]
struct TxEntry {
    next: Next,
    up: bool,
    /// This thread's row of the interface's counters (None: the counters have no row for
    /// this thread, nothing counted).
    counters: Option<IfRow>,
    sub: Option<SubTx>,
    /// The driver sends GSO aggregates (`set_gso`).
    gso: bool,
}

/// Per-thread instance: the interface -> tx arc table.
pub struct InterfaceOutput {
    table: Vec<Option<TxEntry>>,
    // Kept across calls so a frame does not clear 512 bytes.
    nexts: [u16; FRAME_SIZE],
}

impl Default for InterfaceOutput {
    fn default() -> Self {
        InterfaceOutput {
            table: Vec::new(),
            nexts: [0; FRAME_SIZE],
        }
    }
}

/// Whether an aggregate for interface `tx` goes on whole: its driver (its parent's, for a
/// VLAN sub-interface) sends GSO aggregates, or the packet is dropped whole below (unknown
/// or down interface, unknown or down parent) rather than cut and dropped once per segment.
#[cold]
fn takes_gso(table: &[Option<TxEntry>], tx: u32) -> bool {
    let e = |i: u32| table.get(i as usize).and_then(|e| e.as_ref());
    match e(tx) {
        Some(x) if !x.up => true,
        Some(TxEntry { sub: Some(s), .. }) => e(s.parent).is_none_or(|p| p.gso || !p.up),
        Some(x) => x.gso,
        None => true,
    }
}

impl InterfaceOutput {
    /// `pcap trace tx`: the frame, except the aggregates diverted to `gso-segment` (their
    /// segments are captured when they come back), so every packet is captured once. The
    /// runs between diverted aggregates are captured in order, without copying the frame.
    #[cold]
    fn capture_tx(&self, cx: &mut Cx, frame: &[BufIdx]) {
        let arena = cx.arena();
        let mut start = 0;
        for (i, &b) in frame.iter().enumerate() {
            // SAFETY: this node owns the frame; short-lived read of two header fields.
            let h = unsafe { arena.header(b) };
            if h.flags & GSO != 0 && !takes_gso(&self.table, h.tx_if) {
                if start < i {
                    cx.pcap_capture(point::TX, &frame[start..i], true);
                }
                start = i + 1;
            }
        }
        if start < frame.len() {
            cx.pcap_capture(point::TX, &frame[start..], true);
        }
    }
}

/// The run of packets to one up, untagged interface: its arc, its counters row, and the
/// packets and bytes to count there when it ends. `tx` is widened: u64::MAX (no run) never
/// equals a packet's u32.
struct Run<'a> {
    tx: u64,
    next: u16,
    row: Option<&'a Row>,
    packets: u64,
    bytes: u64,
}

/// One thread's counters of one interface.
type Row = [Counter; counter::N];

impl TxEntry {
    /// This thread's counters row.
    #[inline(always)]
    fn row(&self) -> Option<&Row> {
        self.counters.as_ref().map(IfRow::get)
    }
    /// Adds `n` to counter `c` of this thread.
    #[inline(always)]
    fn count(&self, c: usize, n: u64) {
        if let Some(r) = &self.counters {
            r.add(c, n);
        }
    }
}

/// The error codes `interface-output` sets, taken once per frame.
#[derive(Copy, Clone)]
struct Errors {
    unknown: u16,
    down: u16,
    headroom: u16,
}

/// The interface -> tx arc table.
type Table = [Option<TxEntry>];

impl<'a> Run<'a> {
    /// No run yet.
    const NONE: Run<'a> = Run {
        tx: u64::MAX,
        next: 0,
        row: None,
        packets: 0,
        bytes: 0,
    };

    /// An empty run to interface `tx` (`u64::MAX`: none) if it is an up, untagged interface
    /// of the table, else no run.
    fn resume(table: &'a Table, tx: u64) -> Run<'a> {
        match usize::try_from(tx).ok().and_then(|i| table.get(i)) {
            Some(Some(e)) if e.up && e.sub.is_none() => Run {
                tx,
                next: e.next.0,
                row: e.row(),
                packets: 0,
                bytes: 0,
            },
            _ => Run::NONE,
        }
    }

    /// Counts the run's packets and bytes on its interface.
    #[inline(always)]
    fn flush(&self) {
        if let Some(r) = self.row {
            r[counter::TX_PACKETS].add(self.packets);
            r[counter::TX_BYTES].add(self.bytes);
        }
    }

    /// A packet off the per-packet fast path (another interface than the run's, a
    /// sub-interface, a chain, a GSO aggregate, a stale `TX_SUB`): its arc. Out of line, so
    /// that the fast path keeps its few values in registers.
    ///
    /// # Safety
    /// The caller owns `b` exclusively (a packet of the frame this node is processing) and
    /// holds no view of it during the call.
    #[inline(never)]
    unsafe fn packet(&mut self, table: &'a Table, arena: Arena<'_>, b: BufIdx, err: Errors) -> u16 {
        // SAFETY: the caller owns `b` and holds no view of it (this function's contract);
        // one view at a time here: the header reference is not used while the
        // sub-interface path holds a whole-buffer view.
        let hdr = unsafe { arena.header_mut(b) };
        let tx = hdr.tx_if;
        // Off the fast path: a stale `TX_SUB` (a packet that went out of a sub-interface
        // before, looped back by `loop-tx`: only the sub-interface path below may set it, or
        // a tx node refusing the packet would take it off that sub-interface's counters), a
        // chain, or a GSO aggregate, which goes to `gso-segment` unless the interface (its
        // parent for a sub-interface) takes it.
        let f = hdr.flags;
        let len = if f & (TOTAL_LENGTH_VALID | GSO | TX_SUB) == 0 {
            hdr.current_length as u64
        } else {
            hdr.flags = f & !TX_SUB;
            if f & GSO != 0 && !takes_gso(table, tx) {
                return NEXT_SEGMENT;
            }
            hdr.total_len() as u64
        };
        if tx as u64 == self.tx {
            self.packets += 1;
            self.bytes += len;
            return self.next;
        }
        match table.get(tx as usize).and_then(|e| e.as_ref()) {
            Some(
                e @ TxEntry {
                    up: true,
                    sub: Some(sub),
                    ..
                },
            ) => {
                // SAFETY: as above; packet bytes are needed to insert the tags.
                let mut v = unsafe { arena.buffer(b) };
                let parent = table.get(sub.parent as usize).and_then(|p| p.as_ref());
                let Some(p) = parent.filter(|p| p.up) else {
                    e.count(counter::DROPS, 1);
                    v.hdr.error = err.down;
                    return NEXT_DROP;
                };
                let n = sub.len as usize;
                if v.len() < 14 || v.push_front(n).is_none() {
                    v.hdr.error = err.headroom;
                    return NEXT_DROP;
                }
                let d = v.data_mut();
                d.copy_within(n..n + 12, 0);
                d[12..12 + n].copy_from_slice(&sub.tags[..n]);
                e.count(counter::TX_PACKETS, 1);
                e.count(counter::TX_BYTES, len);
                p.count(counter::TX_PACKETS, 1);
                p.count(counter::TX_BYTES, len + n as u64);
                v.hdr.flags |= TX_SUB;
                v.hdr.tx_sub_if = tx;
                v.hdr.tx_sub_tags = sub.len;
                v.hdr.tx_if = sub.parent;
                e.next.0
            }
            Some(e) if e.up => {
                self.flush();
                *self = Run {
                    tx: tx as u64,
                    next: e.next.0,
                    row: e.row(),
                    packets: 1,
                    bytes: len,
                };
                e.next.0
            }
            Some(e) => {
                e.count(counter::DROPS, 1);
                hdr.error = err.down;
                NEXT_DROP
            }
            None => {
                hdr.error = err.unknown;
                NEXT_DROP
            }
        }
    }
}

impl NodeFn for InterfaceOutput {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        if cx.shared().pcap.points.load(Ordering::Relaxed) & point::TX != 0 {
            self.capture_tx(cx, frame);
        }
        // A frame handed on unchanged (the usual one: the rewrite node's, whole) comes with
        // its headers' addresses: one load a packet, no bound check of the frame.
        if let Some((arena, frame, s)) = cx.handed_frame(frame) {
            let addrs = &s.addrs;
            // SAFETY: this node owns the frame (the dispatcher's contract), `addrs` holds
            // its addresses (`handed_frame`), and `frame_with` holds one header
            // reference at a time (its four-packet step copies fields out by value).
            self.frame_with(cx, arena, frame, |i| unsafe {
                arena.header_at(addrs, i, frame[i])
            });
            cx.put_frame_scratch(s);
            return;
        }
        let arena = cx.arena();
        let n = frame.len().min(FRAME_SIZE);
        let frame = &frame[..n];
        arena.check_frame(frame);
        // SAFETY: this node owns the frame, every index in the arena (checked above);
        // `frame_with` holds one header reference at a time (its four-packet step
        // copies fields out by value).
        self.frame_with(cx, arena, frame, |i| unsafe {
            arena.header_mut_unchecked(frame[i])
        });
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

impl InterfaceOutput {
    /// The frame loop, `hdr(i)` the header of `frame[i]` (an index below the frame's
    /// length). The loop holds at most one reference from `hdr` at a time (the four-packet
    /// step copies the fields it reads out by value), and none of a packet when
    /// `Run::packet` takes its own view.
    #[inline(always)]
    fn frame_with<'h>(
        &mut self,
        cx: &mut Cx,
        arena: Arena<'_>,
        frame: &[BufIdx],
        hdr: impl Fn(usize) -> &'h mut BufferHeader,
    ) {
        let n = frame.len().min(FRAME_SIZE);
        let frame = &frame[..n];
        let err = Errors {
            unknown: cx.error(OutputCounter::UnknownInterface),
            down: cx.error(OutputCounter::InterfaceDown),
            headroom: cx.error(OutputCounter::NoHeadroom),
        };
        // Counters accumulate over runs of packets to the same up, untagged interface; the
        // run also caches that interface's arc, so a plain packet of the run is one flag
        // test and one compare here, everything else `packet`. The run is kept in locals
        // (registers) and handed to `packet` as a `Run` only on its calls. It starts with
        // the first packet's interface (when up and untagged): a frame to one interface goes
        // on whole even when the frame before went elsewhere (the tunnel and the underlay
        // pass of an encap share this node).
        let InterfaceOutput { table, nexts } = self;
        let first = if n == 0 {
            u64::MAX
        } else {
            u64::from(hdr(0).tx_if)
        };
        let Run {
            mut tx,
            mut next,
            mut row,
            mut bytes,
            ..
        } = Run::resume(table, first);
        // The usual frame is one run: while its packets are, no next arc is stored per
        // packet, and a frame that stays one run goes on whole.
        // Four packets a step (one flags test and one loop test for the four); the packet
        // that ends the run is found by the one-packet loop after it.
        let mut i = 0;
        // The three fields are copied out by value: one header reference live at a time.
        let fields = |i: usize| {
            let h = hdr(i);
            (h.flags, h.tx_if, h.current_length)
        };
        while i + 4 <= n {
            let h = [fields(i), fields(i + 1), fields(i + 2), fields(i + 3)];
            let flags = h[0].0 | h[1].0 | h[2].0 | h[3].0;
            if flags & (TOTAL_LENGTH_VALID | GSO | TX_SUB) != 0
                || h.iter().any(|h| h.1 as u64 != tx)
            {
                break;
            }
            bytes += h.iter().map(|h| h.2 as u64).sum::<u64>();
            i += 4;
        }
        while i < n {
            let hdr = hdr(i);
            if hdr.flags & (TOTAL_LENGTH_VALID | GSO | TX_SUB) != 0 || hdr.tx_if as u64 != tx {
                break;
            }
            bytes += hdr.current_length as u64;
            i += 1;
        }
        if i == n {
            let run = Run {
                tx,
                next,
                row,
                packets: n as u64,
                bytes,
            };
            run.flush();
            cx.enqueue_all(Next(next), frame);
            return;
        }
        let mut packets = i as u64;
        nexts[..i].fill(next);
        for (k, (nx, &b)) in nexts[i..n].iter_mut().zip(&frame[i..]).enumerate() {
            let hdr = hdr(i + k);
            if hdr.flags & (TOTAL_LENGTH_VALID | GSO | TX_SUB) == 0 {
                let len = hdr.current_length as u64;
                if hdr.tx_if as u64 == tx {
                    packets += 1;
                    bytes += len;
                    *nx = next;
                    continue;
                }
                // A plain packet starting a run of another up, untagged interface (with
                // many tunnels, every packet): the run changes here, without `packet`'s
                // second look at the header.
                if let Some(Some(e)) = table.get(hdr.tx_if as usize) {
                    if e.up && e.sub.is_none() {
                        Run {
                            tx,
                            next,
                            row,
                            packets,
                            bytes,
                        }
                        .flush();
                        (tx, next, row, packets, bytes) =
                            (hdr.tx_if as u64, e.next.0, e.row(), 1, len);
                        *nx = next;
                        continue;
                    }
                }
            }
            let mut run = Run {
                tx,
                next,
                row,
                packets,
                bytes,
            };
            // SAFETY: this node owns `b` (a packet of its frame); `hdr` is not used past
            // this point.
            *nx = unsafe { run.packet(table, arena, b, err) };
            Run {
                tx,
                next,
                row,
                packets,
                bytes,
            } = run;
        }
        let run = Run {
            tx,
            next,
            row,
            packets,
            bytes,
        };
        run.flush();
        cx.enqueue_to_next(frame, &nexts[..n]);
    }
}

/// Registers `interface-output`.
pub fn register(b: &mut GraphBuilder) {
    b.register(
        NodeRegistration::new(NAME, NodeKind::Internal, |_| {
            Box::new(InterfaceOutput::default())
        })
        .nexts(OutputNext::NAMES)
        .counters(OutputCounter::DESCS),
    );
}

/// Adds the `interface-output -> tx_node` arc and installs the interface on every thread.
pub(crate) fn attach(
    vm: &mut Vlib,
    idx: SwIfIndex,
    tx_node: Option<sluice_graph::NodeIndex>,
    counters: Arc<IfCounters>,
) -> crate::error::VnetResult {
    let Some(tx) = tx_node else {
        return Ok(());
    };
    let graph = |e: sluice_graph::GraphError| crate::error::VnetError::System(e.to_string());
    let out = vm.registry.lookup(NAME).map_err(graph)?;
    let next = vm.add_next(out, tx).map_err(graph)?;
    vm.foreach_thread(move |tg| {
        let entry = TxEntry {
            next,
            up: false,
            counters: IfRow::new(counters.clone(), tg.thread()),
            sub: None,
            gso: false,
        };
        if let Some(o) = tg.node_mut::<InterfaceOutput>(out) {
            let i = idx.0 as usize;
            if o.table.len() <= i {
                o.table.resize(i + 1, None);
            }
            o.table[i] = Some(entry);
        }
    });
    Ok(())
}

/// Makes an attached interface a VLAN sub-interface of `sub.parent` on every thread.
pub(crate) fn set_sub(vm: &mut Vlib, idx: SwIfIndex, sub: SubTx) {
    let Some(out) = vm.registry.find(NAME) else {
        return;
    };
    vm.foreach_thread(move |tg| {
        if let Some(o) = tg.node_mut::<InterfaceOutput>(out) {
            if let Some(Some(e)) = o.table.get_mut(idx.0 as usize) {
                e.sub = Some(sub);
            }
        }
    });
}

/// Says whether interface `idx`'s driver sends GSO aggregates whole (else they are cut by
/// `gso-segment` before its tx node), on every thread.
pub fn set_gso(vm: &mut Vlib, idx: SwIfIndex, gso: bool) {
    let Some(out) = vm.registry.find(NAME) else {
        return;
    };
    vm.foreach_thread(move |tg| {
        if let Some(o) = tg.node_mut::<InterfaceOutput>(out) {
            if let Some(Some(e)) = o.table.get_mut(idx.0 as usize) {
                e.gso = gso;
            }
        }
    });
}

/// Propagates an admin-state change to every thread.
pub(crate) fn set_up(vm: &mut Vlib, idx: SwIfIndex, up: bool) {
    let Some(out) = vm.registry.find(NAME) else {
        return;
    };
    vm.foreach_thread(move |tg| {
        if let Some(o) = tg.node_mut::<InterfaceOutput>(out) {
            if let Some(Some(e)) = o.table.get_mut(idx.0 as usize) {
                e.up = up;
            }
        }
    });
}

/// Removes an interface from every thread's table (deleted interface: its packets drop as
/// `unknown_interface`).
pub(crate) fn detach(vm: &mut Vlib, idx: SwIfIndex) {
    let Some(out) = vm.registry.find(NAME) else {
        return;
    };
    vm.foreach_thread(move |tg| {
        if let Some(o) = tg.node_mut::<InterfaceOutput>(out) {
            if let Some(e) = o.table.get_mut(idx.0 as usize) {
                *e = None;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// With workers, every thread's tx entry holds that thread's own row of the interface's
    /// counters (`attach` makes the entry on each thread): a row of another thread would
    /// count there, racing that thread's adds, with every test's totals still right.
    #[test]
    fn each_thread_entry_holds_its_own_counters_row() {
        let (mut vm, _cli) = crate::testing::configured(
            &[],
            2,
            64,
            &["create loopback interface", "create loopback interface"],
        );
        let n = vm.n_threads();
        assert_eq!(n, 3, "main and 2 workers");
        let out = vm.registry.find(NAME).expect("interface-output");
        for name in ["loop0", "loop1"] {
            let sw = vm.ext_mut::<crate::Interfaces>().find(name).expect(name).0;
            let counters = vm
                .ext_mut::<crate::Interfaces>()
                .counter_table
                .get(sw)
                .expect("counters")
                .clone();
            // (thread, the entry's row is `counters.row(thread)`) from each thread.
            let seen = Arc::new(Mutex::new(Vec::new()));
            let (c, s) = (counters.clone(), seen.clone());
            vm.foreach_thread(move |tg| {
                let t = tg.thread();
                let o = tg.node_mut::<InterfaceOutput>(out).expect("node");
                let entry = o.table.get(sw as usize).and_then(Option::as_ref);
                let own = match (entry.and_then(TxEntry::row), c.row(t)) {
                    (Some(r), Some(want)) => std::ptr::eq(r, want),
                    _ => false,
                };
                s.lock().expect("lock").push((t, own));
            });
            let mut seen = seen.lock().expect("lock").clone();
            seen.sort_unstable();
            assert_eq!(seen, [(0, true), (1, true), (2, true)], "{name}");
        }
        vm.stop_workers();
    }
}
