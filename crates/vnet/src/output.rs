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
//! interface, before the driver. A tx node that cannot send a packet (ring full, too big,
//! not connected, write error) takes it back with `IfCounters::tx_failed` — tx packets and
//! bytes down, `tx-error` up, on the same thread's counters — so `show interface` tx is what
//! the driver handed to the device. The success path costs nothing extra; the failure path
//! one subtraction per run. A packet sent on a VLAN sub-interface is counted on both the
//! sub-interface and its parent; the driver sees only the parent, so for each such packet
//! it cannot send it also calls `IfCounterTable::sub_tx_failed`, which finds the
//! sub-interface in the buffer (`tx_sub_if`) and takes the packet back there too.

use crate::interface::{counter, IfCounters, SwIfIndex};
use sluice_buffer::flags::{GSO, TOTAL_LENGTH_VALID, TX_SUB};
use sluice_buffer::BufIdx;
use sluice_graph::pcap::point;
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
    counters: Arc<IfCounters>,
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

impl NodeFn for InterfaceOutput {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        if cx.shared().pcap.points.load(Ordering::Relaxed) & point::TX != 0 {
            self.capture_tx(cx, frame);
        }
        let arena = cx.arena();
        let t = cx.thread();
        let n = frame.len().min(FRAME_SIZE);
        let nexts = &mut self.nexts;
        let (e_unknown, e_down) = (
            cx.error(OutputCounter::UnknownInterface),
            cx.error(OutputCounter::InterfaceDown),
        );
        let e_headroom = cx.error(OutputCounter::NoHeadroom);
        // Counters accumulate over runs of packets to the same up, untagged interface; the
        // run also caches that interface's arc, so a packet of the run is one compare. The
        // run's interface is widened: u64::MAX (no run) never equals a packet's u32.
        let (mut run_tx, mut run_next, mut run_p, mut run_by) = (u64::MAX, 0u16, 0u64, 0u64);
        let flush = |run_tx: u64, p: u64, by: u64, table: &[Option<TxEntry>]| {
            if let Some(Some(e)) = usize::try_from(run_tx).ok().and_then(|i| table.get(i)) {
                e.counters.add(t, counter::TX_PACKETS, p);
                e.counters.add(t, counter::TX_BYTES, by);
            }
        };
        for (nx, &b) in nexts[..n].iter_mut().zip(&frame[..n]) {
            // SAFETY: this node owns the frame; one view at a time (the header reference is
            // not used while the sub-interface path holds a whole-buffer view).
            let hdr = unsafe { arena.header_mut(b) };
            let tx = hdr.tx_if;
            // One test for the plain packet. Off it: a stale `TX_SUB` (a packet that went out
            // of a sub-interface before, looped back by `loop-tx`: only the sub-interface path
            // below may set it, or a tx node refusing the packet would take it off that
            // sub-interface's counters), a chain, or a GSO aggregate, which goes to
            // `gso-segment` unless the interface (its parent for a sub-interface) takes it.
            let f = hdr.flags;
            let len = if f & (TOTAL_LENGTH_VALID | GSO | TX_SUB) == 0 {
                hdr.current_length as u64
            } else {
                hdr.flags = f & !TX_SUB;
                if f & GSO != 0 && !takes_gso(&self.table, tx) {
                    *nx = NEXT_SEGMENT;
                    continue;
                }
                hdr.total_len() as u64
            };
            if tx as u64 == run_tx {
                run_p += 1;
                run_by += len;
                *nx = run_next;
                continue;
            }
            match self.table.get(tx as usize).and_then(|e| e.as_ref()) {
                Some(
                    e @ TxEntry {
                        up: true,
                        sub: Some(sub),
                        ..
                    },
                ) => {
                    // SAFETY: as above; packet bytes are needed to insert the tags.
                    let mut v = unsafe { arena.buffer(b) };
                    let parent = self.table.get(sub.parent as usize).and_then(|p| p.as_ref());
                    let Some(p) = parent.filter(|p| p.up) else {
                        e.counters.add(t, counter::DROPS, 1);
                        v.hdr.error = e_down;
                        *nx = NEXT_DROP;
                        continue;
                    };
                    let n = sub.len as usize;
                    if v.len() < 14 || v.push_front(n).is_none() {
                        v.hdr.error = e_headroom;
                        *nx = NEXT_DROP;
                        continue;
                    }
                    let d = v.data_mut();
                    d.copy_within(n..n + 12, 0);
                    d[12..12 + n].copy_from_slice(&sub.tags[..n]);
                    e.counters.add(t, counter::TX_PACKETS, 1);
                    e.counters.add(t, counter::TX_BYTES, len);
                    p.counters.add(t, counter::TX_PACKETS, 1);
                    p.counters.add(t, counter::TX_BYTES, len + n as u64);
                    v.hdr.flags |= TX_SUB;
                    v.hdr.tx_sub_if = tx;
                    v.hdr.tx_sub_tags = sub.len;
                    v.hdr.tx_if = sub.parent;
                    *nx = e.next.0;
                }
                Some(e) if e.up => {
                    flush(run_tx, run_p, run_by, &self.table);
                    (run_tx, run_next, run_p, run_by) = (tx as u64, e.next.0, 1, len);
                    *nx = e.next.0;
                }
                Some(e) => {
                    e.counters.add(t, counter::DROPS, 1);
                    hdr.error = e_down;
                    *nx = NEXT_DROP;
                }
                None => {
                    hdr.error = e_unknown;
                    *nx = NEXT_DROP;
                }
            }
        }
        flush(run_tx, run_p, run_by, &self.table);
        cx.enqueue_to_next(&frame[..n], &self.nexts[..n]);
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
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
    let entry = TxEntry {
        next,
        up: false,
        counters,
        sub: None,
        gso: false,
    };
    vm.foreach_thread(move |tg| {
        if let Some(o) = tg.node_mut::<InterfaceOutput>(out) {
            let i = idx.0 as usize;
            if o.table.len() <= i {
                o.table.resize(i + 1, None);
            }
            o.table[i] = Some(entry.clone());
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
