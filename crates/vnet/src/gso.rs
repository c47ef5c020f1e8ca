//! `gso-segment`: cuts GSO aggregates into segments for an interface that cannot send them;
//! the feature form (`ip4-gso-segment`, `ip6-gso-segment`, `ip4-output-gso-segment`,
//! `ip6-output-gso-segment`, `l2-input-gso-segment`, `l2-output-gso-segment`): the same
//! before the first feature of an interface's arc that does not take aggregates.
//!
//! A driver that receives TCP/UDP aggregates from the kernel whole (af_packet, tap: the
//! `virtio_net_hdr` of `PACKET_VNET_HDR`/`IFF_VNET_HDR`) keeps them as one buffer chain with
//! flag `GSO` (see [`crate::offload`]) through ethernet-input, IP forwarding and the L2
//! paths. `interface-output` sends such a packet here instead of to the tx node when the
//! output interface does not take aggregates (`output::set_gso`: pg, memif without an
//! agreed `gso` peer, ... — every interface until its driver says otherwise).
//!
//! - uses: the `GSO` flag and `gso_size`/`gso_type`; the packet from its Ethernet header.
//! - sets: segments with the aggregate's metadata (`tx_if`, `rx_if`, L2/IP/feature metadata),
//!   complete IPv4 header and L4 checksums, without `GSO`/`OFFLOAD_L4_CKSUM`; the aggregate
//!   is freed.
//! - next: `interface-output` (segments, counted there as the interface's tx packets);
//!   `error-drop` when it cannot cut.
//!
//! The feature form is the same node once per feature arc
//! ([`crate::feature::ArcDef::gso`]): the control plane puts it in an interface's feature
//! chain before the first enabled feature that does not declare
//! [`takes_gso`](crate::feature::FeatureDef::takes_gso) (NAT44, ACL, policer: they act on
//! single packets, NAT44 rewrites checksums); features before it see aggregates whole.
//! It is there only while some interface can receive aggregates
//! ([`crate::feature::set_aggregate_source`]: af_packet, tap with offloads, memif with `gso`); without
//! one (pg, loopbacks, af_xdp, ...) no packet is an aggregate and the chains skip it.
//! Other packets pass through unchanged. On `ip4-unicast`/`ip6-unicast` packets start at
//! their IP header: each segment keeps the L2 header in front, starts at its IP header and
//! goes on to the next feature; the aggregate is parsed from its Ethernet header,
//! `current_data - l2_hdr_offset` bytes before its data (`l2_hdr_offset` as
//! `ethernet-input` set it). On the output and L2 arcs packets start at their Ethernet
//! header, and so do the segments.
//!
//! - next (feature form): the next feature enabled on the arc for the packet's interface
//!   (rx or tx, as the arc is keyed), by default the arc's end; `error-drop` when it cannot
//!   cut. A frame with no aggregate whose packets share one interface (the usual frame)
//!   goes on whole after one pass over its headers and one table read.
//! - counters (every form): `segmented` (info: aggregates cut), `segments` (info: segments made),
//!   `not_cuttable` (error: not TCP/UDP over IPv4/IPv6 as its metadata says, headers not
//!   within the first buffer or its first 256 bytes, more than 1024 segments
//!   ([`MAX_TOTAL_SEGMENTS`](crate::offload::MAX_TOTAL_SEGMENTS): an MSS under 64 at 64 KiB), or a segment larger than a
//!   buffer), `no_buffers` (error: the pool ran out; aggregate dropped, the segments of
//!   earlier rounds sent). Aggregates of more than [`MAX_SEGMENTS`] (128) segments are cut
//!   in rounds of 128.

use crate::feature::{ArcDef, ArcKey, FeatureNext, FeatureRegistry};
use crate::offload::{segment_chain, SegmentError, MAX_SEGMENTS};
use sluice_buffer::{flags, BufIdx, BufferHeader};
use sluice_graph::{Cx, FrameScratch, GraphBuilder, Next, NodeFn, NodeKind, NodeRegistration};
use std::any::Any;
use std::sync::Arc;

/// Node name.
pub const NAME: &str = "gso-segment";
/// The node on the `ip4-unicast` arc.
pub const IP4_NAME: &str = "ip4-gso-segment";
/// The node on the `ip6-unicast` arc.
pub const IP6_NAME: &str = "ip6-gso-segment";

sluice_graph::arcs! {
    /// `gso-segment`'s next arcs.
    pub enum SegmentNext {
        /// Aggregates that cannot be cut.
        Drop => "error-drop",
        /// Every segment.
        Output => crate::output::NAME,
    }
}

sluice_graph::arcs! {
    /// The feature form's fixed next arcs (later ones are added by the control plane as
    /// features are enabled).
    pub enum FeatureSegmentNext<end> {
        /// Aggregates that cannot be cut.
        Drop => "error-drop",
        /// The arc's end node, when no later feature is enabled.
        End => end,
    }
}

sluice_graph::counters! {
    /// `gso-segment`'s counters.
    pub enum SegmentCounter {
        /// Aggregates cut into segments.
        Segmented => info("segmented", "GSO aggregates cut into segments"),
        /// Segments made.
        Segments => info("segments", "segments made of GSO aggregates"),
        /// Not cuttable.
        NotCuttable => error("not_cuttable", "GSO aggregate that cannot be cut (headers, segments)"),
        /// No buffers.
        NoBuffers => error("no_buffers", "no buffers for the segments of a GSO aggregate"),
    }
}

/// Where a [`GsoSegment`] sends packets.
enum Onward {
    /// Always this arc (`gso-segment`: `interface-output`); packets at their L2 header.
    Fixed(Next),
    /// The next feature of an arc for the packet's interface (`FeatureNext`, the node's
    /// slot); packets at their L3 header or Ethernet header (`at_l3`). Packets that are
    /// not aggregates pass through.
    Feature {
        table: Arc<FeatureNext>,
        slot: usize,
        key: ArcKey,
        at_l3: bool,
    },
}

/// The node: where the segments go.
pub struct GsoSegment {
    onward: Onward,
}

impl GsoSegment {
    /// The feature form. The frame's header addresses come from the thread's frame scratch
    /// (resolved by the node before when it handed the frame on whole: one compare of the
    /// indices). The usual frame (no aggregate, one interface) is one pass OR-ing the
    /// packets' `GSO` flags and interface differences, one table read and the frame handed
    /// on whole. Otherwise one pass that reads each header once: runs of plain packets go
    /// to their next features in batched enqueues (their arcs in the scratch's `nexts`), an
    /// aggregate is cut where it stands (after the run before it, so a flow keeps its order).
    fn feature_frame(
        &self,
        cx: &mut Cx,
        frame: &[BufIdx],
        table: &FeatureNext,
        slot: usize,
        key: ArcKey,
        at_l3: bool,
    ) {
        if frame.is_empty() {
            return;
        }
        let (arena, frame, mut s) = cx.resolve_frame(frame);
        let n = frame.len();
        let FrameScratch { addrs, nexts } = &mut *s;
        let hdr = |i: usize| {
            // SAFETY: this node owns the frame's buffers; `addrs` was resolved from `frame`
            // above; short-lived header access, one buffer at a time.
            unsafe { arena.buffer_at(addrs, i, frame[i]) }.hdr
        };
        let sw_if = key.of(hdr(0));
        // One loop per key, so the loop has no match on it.
        let fold = |of: fn(&BufferHeader) -> u32| {
            let mut odd = 0u32;
            for (i, &b) in frame.iter().enumerate() {
                // SAFETY: as above.
                let h = unsafe { arena.buffer_at(addrs, i, b) }.hdr;
                odd |= (h.flags & flags::GSO) | (of(h) ^ sw_if);
            }
            odd
        };
        let odd = match key {
            ArcKey::Rx => fold(|h| h.rx_if),
            ArcKey::Tx => fold(|h| h.tx_if),
        };
        if odd == 0 {
            let next = table.next(slot, sw_if, FeatureSegmentNext::End.next());
            cx.enqueue_all(next, frame);
            cx.put_frame_scratch(s);
            return;
        }
        let mut segs = [BufIdx(0); MAX_SEGMENTS];
        let mut run = 0;
        for (i, &b) in frame.iter().enumerate() {
            let h = hdr(i);
            let next = table.next(slot, key.of(h), FeatureSegmentNext::End.next());
            if h.flags & flags::GSO == 0 {
                nexts[i] = next.0;
                continue;
            }
            let rewind = if at_l3 {
                (h.current_data - h.l2.l2_hdr_offset).max(0) as usize
            } else {
                0
            };
            cx.enqueue_to_next(&frame[run..i], &nexts[run..i]);
            run = i + 1;
            cut(cx, b, next, rewind, &mut segs);
        }
        cx.enqueue_to_next(&frame[run..], &nexts[run..n]);
        cx.put_frame_scratch(s);
    }
}

/// Cuts aggregate `b` (its Ethernet header `rewind` bytes before its data) and sends the
/// segments to `next`, in rounds of [`MAX_SEGMENTS`]; an aggregate that cannot be cut goes
/// to `error-drop` with its counted reason.
fn cut(cx: &mut Cx, b: BufIdx, next: Next, rewind: usize, segs: &mut [BufIdx; MAX_SEGMENTS]) {
    let mut first = 0;
    let r = loop {
        match segment_chain(cx.bufs(), b, rewind, first, segs) {
            Ok(c) => {
                cx.count(SegmentCounter::Segments, c.n as u64);
                cx.enqueue_all(next, &segs[..c.n]);
                first += c.n;
                if c.done {
                    break Ok(());
                }
            }
            Err(e) => break Err(e),
        }
    };
    match r {
        Ok(()) => cx.count(SegmentCounter::Segmented, 1),
        Err(e) => {
            let c = match e {
                SegmentError::NotCuttable => SegmentCounter::NotCuttable,
                SegmentError::NoBuffers => SegmentCounter::NoBuffers,
            };
            // SAFETY: this node owns the frame's buffers; short-lived header access.
            unsafe { cx.arena().header_mut(b) }.error = cx.error(c);
            cx.enqueue(SegmentNext::Drop.next(), b);
        }
    }
}

impl NodeFn for GsoSegment {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        match &self.onward {
            Onward::Fixed(next) => {
                let mut segs = [BufIdx(0); MAX_SEGMENTS];
                for &b in frame {
                    cut(cx, b, *next, 0, &mut segs);
                }
            }
            Onward::Feature {
                table,
                slot,
                key,
                at_l3,
            } => self.feature_frame(cx, frame, table, *slot, *key, *at_l3),
        }
    }

    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// Registers `gso-segment`.
pub fn register(b: &mut GraphBuilder) {
    b.register(
        NodeRegistration::new(NAME, NodeKind::Internal, |_| {
            Box::new(GsoSegment {
                onward: Onward::Fixed(SegmentNext::Output.next()),
            })
        })
        .nexts(SegmentNext::NAMES)
        .counters(SegmentCounter::DESCS),
    );
}

/// Registers arc `arc`'s cutting node (`ArcDef::gso`: `ip4-gso-segment`, ...), its slot
/// declared in `reg` with the arc.
pub fn register_feature(b: &mut GraphBuilder, reg: &FeatureRegistry, arc: &ArcDef) {
    let Some((g, slot)) = arc.gso.and_then(|g| Some((g, reg.slot(g.node)?))) else {
        return;
    };
    let table = reg.table();
    let key = arc.key;
    b.register(
        NodeRegistration::new(g.node, NodeKind::Internal, move |_| {
            Box::new(GsoSegment {
                onward: Onward::Feature {
                    table: table.clone(),
                    slot,
                    key,
                    at_l3: g.at_l3,
                },
            })
        })
        .nexts(&FeatureSegmentNext::names(arc.end))
        .counters(SegmentCounter::DESCS),
    );
}
