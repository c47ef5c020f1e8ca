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
use sluice_buffer::{flags, BufIdx};
use sluice_graph::{Cx, GraphBuilder, Next, NodeFn, NodeKind, NodeRegistration, FRAME_SIZE};
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
    /// The feature form: the packets before the frame's first aggregate (all of them in the
    /// common case) to their next feature in one batched enqueue; returns how many were
    /// sent (0 for the fixed form), so the cutting loop starts at the first aggregate.
    ///
    /// The usual frame (no aggregate, one interface) is one pass OR-ing the packets' flags
    /// and interface differences, one table read and the frame handed on whole.
    fn pass_plain(&self, cx: &mut Cx, frame: &[BufIdx]) -> usize {
        let Onward::Feature {
            table, slot, key, ..
        } = &self.onward
        else {
            return 0;
        };
        let frame = &frame[..frame.len().min(FRAME_SIZE)];
        let Some(&first) = frame.first() else {
            return 0;
        };
        let arena = cx.arena();
        arena.check_frame(frame);
        // SAFETY: this node owns the frame's buffers, every index in the arena (checked
        // above); short-lived header access.
        let sw_if = key.of(unsafe { arena.header_mut_unchecked(first) });
        // One loop per key, so the loop has no match on it.
        let fold = |of: fn(&sluice_buffer::BufferHeader) -> u32| {
            let mut odd = 0u32;
            for &b in frame {
                // SAFETY: as above.
                let h = unsafe { arena.header_mut_unchecked(b) };
                odd |= (h.flags & flags::GSO) | (of(h) ^ sw_if);
            }
            odd
        };
        let odd = match key {
            ArcKey::Rx => fold(|h| h.rx_if),
            ArcKey::Tx => fold(|h| h.tx_if),
        };
        if odd == 0 {
            let next = table.next(*slot, sw_if, FeatureSegmentNext::End.next());
            cx.enqueue_all(next, frame);
            return frame.len();
        }
        let mut nexts = [0u16; FRAME_SIZE];
        let mut plain = frame.len();
        for (i, (n, &b)) in nexts.iter_mut().zip(frame).enumerate() {
            // SAFETY: this node owns the frame's buffers; short-lived header access.
            let h = unsafe { cx.arena().header(b) };
            if h.flags & flags::GSO != 0 {
                plain = i;
                break;
            }
            *n = table
                .next(*slot, key.of(h), FeatureSegmentNext::End.next())
                .0;
        }
        cx.enqueue_to_next(&frame[..plain], &nexts[..plain]);
        plain
    }
}

impl NodeFn for GsoSegment {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        let plain = self.pass_plain(cx, frame);
        let mut segs = [BufIdx(0); MAX_SEGMENTS];
        let drop = SegmentNext::Drop.next();
        for &b in &frame[plain..] {
            let (next, rewind) = {
                // SAFETY: this node owns the frame's buffers; short-lived header access.
                let h = unsafe { cx.arena().header(b) };
                match &self.onward {
                    Onward::Fixed(n) => (*n, 0),
                    Onward::Feature {
                        table,
                        slot,
                        key,
                        at_l3,
                    } => {
                        let n = table.next(*slot, key.of(h), FeatureSegmentNext::End.next());
                        if h.flags & flags::GSO == 0 {
                            cx.enqueue(n, b);
                            continue;
                        }
                        let rewind = if *at_l3 {
                            (h.current_data - h.l2.l2_hdr_offset).max(0) as usize
                        } else {
                            0
                        };
                        (n, rewind)
                    }
                }
            };
            // More than MAX_SEGMENTS segments: cut in rounds.
            let mut first = 0;
            let r = loop {
                match segment_chain(cx.bufs(), b, rewind, first, &mut segs) {
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
                    cx.enqueue(drop, b);
                }
            }
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
