//! `gso-segment`: cuts GSO aggregates into segments for an interface that cannot send them;
//! `ip4-gso-segment`: the same before the features of an rx interface's `ip4-unicast` arc.
//!
//! A driver that receives TCP/UDP aggregates from the kernel whole (af_packet, tap: the
//! `virtio_net_hdr` of `PACKET_VNET_HDR`/`IFF_VNET_HDR`) keeps them as one buffer chain with
//! flag `GSO` (see [`crate::offload`]) through ethernet-input, IP forwarding and the L2
//! paths. `interface-output` sends such a packet here instead of to the tx node when the
//! output interface does not take aggregates (`output::set_gso`: pg, memif, ... — every
//! interface until its driver says otherwise).
//!
//! - uses: the `GSO` flag and `gso_size`/`gso_type`; the packet from its Ethernet header.
//! - sets: segments with the aggregate's metadata (`tx_if`, `rx_if`, L2/IP/feature metadata),
//!   complete IPv4 header and L4 checksums, without `GSO`/`OFFLOAD_L4_CKSUM`; the aggregate
//!   is freed.
//! - next: `interface-output` (segments, counted there as the interface's tx packets);
//!   `error-drop` when it cannot cut.
//!
//! `ip4-gso-segment` is the same node for `ip4-input`: an aggregate received on an interface
//! with `ip4-unicast` features (NAT44, ACL, policer: they act on single packets, NAT44
//! rewrites checksums) is cut there; each segment keeps the L2 header in front and starts
//! at its IPv4 header, and goes back to `ip4-input` (next `ip4-input`), now a plain packet
//! for the features. It relies on `l2_hdr_offset` as `ethernet-input` set it: the
//! aggregate is parsed from its Ethernet header, `current_data - l2_hdr_offset` bytes
//! before its data.
//!
//! - counters (both): `segmented` (info: aggregates cut), `segments` (info: segments made),
//!   `not_cuttable` (error: not TCP/UDP over IPv4/IPv6 as its metadata says, headers not
//!   within the first buffer or its first 256 bytes, more than 1024 segments
//!   ([`MAX_TOTAL_SEGMENTS`](crate::offload::MAX_TOTAL_SEGMENTS): an MSS under 64 at 64 KiB), or a segment larger than a
//!   buffer), `no_buffers` (error: the pool ran out; aggregate dropped, the segments of
//!   earlier rounds sent). Aggregates of more than [`MAX_SEGMENTS`] (128) segments are cut
//!   in rounds of 128.

use crate::offload::{segment_chain, SegmentError, MAX_SEGMENTS};
use sluice_buffer::BufIdx;
use sluice_graph::{Cx, GraphBuilder, NodeFn, NodeKind, NodeRegistration};
use std::any::Any;

/// Node name.
pub const NAME: &str = "gso-segment";
/// The node before `ip4-unicast` features.
pub const IP4_NAME: &str = "ip4-gso-segment";

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
    /// `ip4-gso-segment`'s next arcs.
    pub enum Ip4SegmentNext {
        /// Aggregates that cannot be cut.
        Drop => "error-drop",
        /// Every segment, back to `ip4-input`.
        Input => crate::ip4::nodes::IP4_INPUT,
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

/// The node: where the segments go, and whether the packets start at their L3 header.
pub struct GsoSegment {
    next: sluice_graph::Next,
    drop: sluice_graph::Next,
    l3: bool,
}

impl NodeFn for GsoSegment {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        let mut segs = [BufIdx(0); MAX_SEGMENTS];
        for &b in frame {
            let rewind = if self.l3 {
                // SAFETY: this node owns the frame's buffers; short-lived header access.
                let h = unsafe { cx.arena().header(b) };
                (h.current_data - h.l2.l2_hdr_offset).max(0) as usize
            } else {
                0
            };
            // More than MAX_SEGMENTS segments: cut in rounds.
            let mut first = 0;
            let r = loop {
                match segment_chain(cx.bufs(), b, rewind, first, &mut segs) {
                    Ok(c) => {
                        cx.count(SegmentCounter::Segments, c.n as u64);
                        cx.enqueue_all(self.next, &segs[..c.n]);
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
                    cx.enqueue(self.drop, b);
                }
            }
        }
    }

    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// Registers `gso-segment` and `ip4-gso-segment`.
pub fn register(b: &mut GraphBuilder) {
    b.register(
        NodeRegistration::new(NAME, NodeKind::Internal, |_| {
            Box::new(GsoSegment {
                next: SegmentNext::Output.next(),
                drop: SegmentNext::Drop.next(),
                l3: false,
            })
        })
        .nexts(SegmentNext::NAMES)
        .counters(SegmentCounter::DESCS),
    );
    b.register(
        NodeRegistration::new(IP4_NAME, NodeKind::Internal, |_| {
            Box::new(GsoSegment {
                next: Ip4SegmentNext::Input.next(),
                drop: Ip4SegmentNext::Drop.next(),
                l3: true,
            })
        })
        .nexts(Ip4SegmentNext::NAMES)
        .counters(SegmentCounter::DESCS),
    );
}
