//! linux-cp's graph nodes.
//!
//! `linux-cp-punt` (internal; `punt`'s handler, see `sluice_graph::nodes::set_punt_handler`):
//! sends what Sluice punts from a paired interface to its tap twin, as the Ethernet frame it
//! arrived as (VLAN tags of a sub-interface already removed by `ethernet-input`).
//! - uses: `rx_if`, `l2.l2_hdr_offset` (the frame is rewound to it; equal to
//!   `current_data` for the ARP/ND copies, which start at their Ethernet header).
//! - sets: `tx_if` = the twin's Sluice interface; `current_data` = the Ethernet header.
//! - next: `interface-output` (0) when `rx_if` has a twin; `error-drop` (1) otherwise.
//! - counters: `punted` (info: sent to a twin), `no_pair` (the receiving interface has no
//!   twin: dropped, as `punt` did before linux-cp), `no_l2` (the L2 header is not in the
//!   buffer: dropped).
//!
//! `linux-cp-xc` (internal; every frame the twin's tap receives is redirected to it from
//! `ethernet-input`, see `sluice_vnet::set_rx_redirect`): what Linux sends out of the twin
//! leaves through the paired interface, unchanged.
//! - uses: `rx_if` (the twin). sets: `tx_if` = the paired interface.
//! - next: `interface-output` (0); `error-drop` (1) when the pair is gone.
//! - counters: `forwarded` (info), `no_pair` (error).

use sluice_buffer::Buffer;
use sluice_graph::{Cx, GraphBuilder, Next, NodeKind, NodeRegistration, PacketNode, PerPacket};

/// `linux-cp-punt`.
pub const PUNT: &str = "linux-cp-punt";
/// `linux-cp-xc`.
pub const XC: &str = "linux-cp-xc";

sluice_graph::arcs! {
    /// `linux-cp-punt`'s and `linux-cp-xc`'s next arcs.
    pub enum LcpNext {
        /// To the twin (punt) or the paired interface (xc).
        Output => sluice_vnet::output::NAME,
        /// No pair, or no L2 header.
        Drop => "error-drop",
    }
}

sluice_graph::counters! {
    /// `linux-cp-punt`'s counters.
    pub enum PuntCounter {
        /// Punted to the Linux twin.
        Punted => info("punted", "punted to the Linux twin"),
        /// Punted on an interface without a Linux twin.
        NoPair => error("no_pair", "punted on an interface without a Linux twin"),
        /// Punted packet without its Ethernet header.
        NoL2 => error("no_l2", "punted packet without its Ethernet header"),
    }
}

sluice_graph::counters! {
    /// `linux-cp-xc`'s counters.
    pub enum XcCounter {
        /// Sent by Linux out of the paired interface.
        Forwarded => info("forwarded", "sent by Linux out of the paired interface"),
        /// Received on a twin whose pair is gone.
        NoPair => error("no_pair", "received on a twin whose pair is gone"),
    }
}

/// No pair.
pub const NONE: u32 = u32::MAX;

/// sw_if_index → the other side of its pair ([`NONE`]: none): one copy per thread,
/// replaced by the control plane between two loops.
#[derive(Default)]
pub struct PairMap {
    /// Indexed by sw_if_index.
    pub map: Vec<u32>,
}

impl PairMap {
    #[inline(always)]
    fn get(&self, i: u32) -> u32 {
        self.map.get(i as usize).copied().unwrap_or(NONE)
    }
}

/// `linux-cp-punt` instance.
#[derive(Default)]
pub struct LcpPunt {
    /// phy → twin.
    pub pairs: PairMap,
}

impl PacketNode for LcpPunt {
    fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        let tw = self.pairs.get(b.hdr.rx_if);
        if tw == NONE {
            b.hdr.error = cx.error(PuntCounter::NoPair);
            return LcpNext::Drop.next();
        }
        // 0: a copy that starts at its Ethernet header (ARP/ND copies); otherwise rewind
        // over the Ethernet header `ethernet-input` stripped.
        let back = b.hdr.current_data as isize - b.hdr.l2.l2_hdr_offset as isize;
        if (back != 0 && back < 14) || b.push_front(back.max(0) as usize).is_none() {
            b.hdr.error = cx.error(PuntCounter::NoL2);
            return LcpNext::Drop.next();
        }
        b.hdr.tx_if = tw;
        cx.count(PuntCounter::Punted, 1);
        LcpNext::Output.next()
    }
}

/// `linux-cp-xc` instance.
#[derive(Default)]
pub struct LcpXc {
    /// twin → phy.
    pub pairs: PairMap,
}

impl PacketNode for LcpXc {
    fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        let phy = self.pairs.get(b.hdr.rx_if);
        if phy == NONE {
            b.hdr.error = cx.error(XcCounter::NoPair);
            return LcpNext::Drop.next();
        }
        b.hdr.tx_if = phy;
        cx.count(XcCounter::Forwarded, 1);
        LcpNext::Output.next()
    }
}

/// Registers both nodes.
pub fn register(b: &mut GraphBuilder) {
    b.register(
        NodeRegistration::new(PUNT, NodeKind::Internal, |_| {
            Box::new(PerPacket::new(LcpPunt::default()))
        })
        .nexts(LcpNext::NAMES)
        .counters(PuntCounter::DESCS),
    );
    b.register(
        NodeRegistration::new(XC, NodeKind::Internal, |_| {
            Box::new(PerPacket::new(LcpXc::default()))
        })
        .nexts(LcpNext::NAMES)
        .counters(XcCounter::DESCS),
    );
}
