//! `arp-input`: answers ARP requests for any address of the receiving interface, learns
//! senders (not from probes, sender 0.0.0.0, RFC 5227), and refreshes existing entries from
//! gratuitous ARP.
//!
//! - uses: `rx_if`, `ip.fib_index`; the ARP packet at `current_data`.
//! - sets: turns requests into replies in place (new Ethernet header in the headroom),
//!   `tx_if` = `rx_if`.
//! - next: `error-drop` (0) for consumed or invalid packets; `interface-output` (1) for replies;
//!   `punt` (2) for a copy of each request or reply for us received on an interface with a
//!   host stack behind `punt` (`IfAttr::punt_host`, linux-cp).
//! - counters: `replies_sent` (info), `replies_received` (info, learned), `not_for_us`
//!   (info: the target is not an address of the interface), `malformed` (not Ethernet/IPv4
//!   ARP), `gratuitous` (info: a gratuitous ARP — request or reply with sender address ==
//!   target address — which only updates an existing neighbour, as VPP: it never creates one),
//!   `no_headroom` (no room for the reply's Ethernet header), `punt_copies` (info: copies
//!   sent to `punt`), `no_punt_copy` (no buffer for the copy, or the frame is too long),
//!   `group_sender_mac` (the sender hardware address is broadcast/multicast: neither learned
//!   nor answered, RFC 1812 §3.3.2).
//!
//! VPP: `vnet/arp/arp.c`. Also the ARP request builder `ip4-glean` and the neighbour
//! aging probes use.

use crate::ip4::{Ip4Shared, LB_FLAG};
use sluice_buffer::Buffer;
use sluice_fib::adj::AdjKind;
use sluice_graph::{Cx, Next, NodeKind, NodeRegistration, PacketNode, PerPacket};
use sluice_wire::arp::{self, ArpRepr};
use sluice_wire::ethernet::ethertype;
use sluice_wire::Mac;
use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Node name.
pub const ARP_INPUT: &str = "arp-input";

/// `arp-input` (see the module doc). One instance per thread.
pub struct ArpInput {
    shared: Arc<Ip4Shared>,
}

sluice_graph::arcs! {
    /// `arp-input`'s next arcs.
    pub enum ArpNext {
        /// To `error-drop`.
        Drop => "error-drop",
        /// To `interface-output`.
        Output => crate::output::NAME,
        /// To `punt`.
        Punt => "punt",
    }
}

sluice_graph::counters! {
    /// `arp-input`'s counters.
    pub enum ArpCounter {
        /// ARP replies sent.
        RepliesSent => info("replies_sent", "ARP replies sent"),
        /// ARP replies received.
        RepliesReceived => info("replies_received", "ARP replies received"),
        /// ARP for another address.
        NotForUs => info("not_for_us", "ARP for another address"),
        /// Malformed ARP packet.
        Malformed => error("malformed", "malformed ARP packet"),
        /// Gratuitous ARP (updates an existing neighbour only).
        Gratuitous => info("gratuitous", "gratuitous ARP (updates an existing neighbour only)"),
        /// No headroom for the ARP reply's header.
        NoHeadroom => error("no_headroom", "no headroom for the ARP reply's header"),
        /// ARP copies punted to the host stack.
        PuntCopies => info("punt_copies", "ARP copies punted to the host stack"),
        /// ARP copy for the host stack not made.
        NoPuntCopy => error("no_punt_copy", "ARP copy for the host stack not made"),
        /// Sender hardware address with the group bit: not learned.
        GroupSenderMac => error("group_sender_mac", "ARP sender MAC is broadcast/multicast"),
    }
}

impl ArpInput {
    fn learn(&self, b: &Buffer<'_>, r: &ArpRepr, update_only: bool) {
        if let Ok(mut l) = self.shared.learned.lock() {
            if l.len() < 4096 {
                l.push(crate::neighbor::Learned::heard(
                    b.hdr.rx_if,
                    u32::from(r.spa),
                    r.sha.0,
                    !update_only,
                ));
            }
        }
    }
}

impl PacketNode for ArpInput {
    fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        let r = match ArpRepr::parse(b.data()) {
            Ok(r) => r,
            Err(_) => {
                b.hdr.error = cx.error(ArpCounter::Malformed);
                return ArpNext::Drop.next();
            }
        };
        if r.sha.0[0] & 1 != 0 {
            b.hdr.error = cx.error(ArpCounter::GroupSenderMac);
            return ArpNext::Drop.next();
        }
        if r.spa == r.tpa {
            // Gratuitous ARP: refreshes the sender's entry if it exists; never answered.
            self.learn(b, &r, true);
            b.hdr.error = cx.error(ArpCounter::Gratuitous);
            return ArpNext::Drop.next();
        }
        // Ours when the target's route is a local address of this very interface (any of
        // its addresses, not only the first).
        let tpa = u32::from(r.tpa);
        let ours = self
            .shared
            .lookup(b.hdr.ip.fib_index, tpa)
            .filter(|&v| v < LB_FLAG)
            .map(|v| self.shared.adj.get(v))
            .is_some_and(|a| a.kind == AdjKind::Local && a.tx_if == b.hdr.rx_if);
        if !ours {
            b.hdr.error = cx.error(ArpCounter::NotForUs);
            return ArpNext::Drop.next();
        }
        // An ARP probe (RFC 5227: sender 0.0.0.0) is answered, which defends the address,
        // but teaches nothing.
        if !r.spa.is_unspecified() {
            self.learn(b, &r, false);
        }
        if self
            .shared
            .if_attr(b.hdr.rx_if)
            .punt_host
            .load(Ordering::Relaxed)
        {
            // The host stack behind `punt` learns the neighbour (and sees replies to its
            // own requests) from a copy.
            match crate::interface::copy_frame(cx, b) {
                Some(c) => {
                    cx.count(ArpCounter::PuntCopies, 1);
                    cx.enqueue(ArpNext::Punt.next(), c);
                }
                None => cx.count(ArpCounter::NoPuntCopy, 1),
            }
        }
        if r.op != arp::op::REQUEST {
            b.hdr.error = cx.error(ArpCounter::RepliesReceived);
            return ArpNext::Drop.next();
        }
        let attr = self.shared.if_attr(b.hdr.rx_if);
        let my_mac = Mac(attr.mac_bytes());
        let reply = ArpRepr {
            op: arp::op::REPLY,
            sha: my_mac,
            spa: r.tpa,
            tha: r.sha,
            tpa: r.spa,
        };
        b.set_len(arp::LEN);
        reply.emit(b.data_mut());
        let Some(h) = b.push_front(14) else {
            b.hdr.error = cx.error(ArpCounter::NoHeadroom);
            return ArpNext::Drop.next();
        };
        h[0..6].copy_from_slice(&r.sha.0);
        h[6..12].copy_from_slice(&my_mac.0);
        h[12..14].copy_from_slice(&ethertype::ARP.to_be_bytes());
        b.hdr.tx_if = b.hdr.rx_if;
        cx.count(ArpCounter::RepliesSent, 1);
        ArpNext::Output.next()
    }
}

/// An ARP request frame (Ethernet header included) from `my_mac`/`src` for `target`, to
/// `dst` (broadcast, or the neighbour's MAC for an aging probe).
pub(crate) fn arp_request(dst: Mac, my_mac: Mac, src: u32, target: u32) -> [u8; 14 + arp::LEN] {
    let mut frame = [0u8; 14 + arp::LEN];
    frame[0..6].copy_from_slice(&dst.0);
    frame[6..12].copy_from_slice(&my_mac.0);
    frame[12..14].copy_from_slice(&ethertype::ARP.to_be_bytes());
    ArpRepr {
        op: arp::op::REQUEST,
        sha: my_mac,
        spa: Ipv4Addr::from(src),
        tha: Mac::default(),
        tpa: Ipv4Addr::from(target),
    }
    .emit(&mut frame[14..]);
    frame
}

/// Registers `arp-input`.
pub(crate) fn register(r: &mut crate::plugin::Registrar, shared: Arc<Ip4Shared>) {
    let b = &mut r.graph;
    let s = shared.clone();
    b.register(
        NodeRegistration::new(ARP_INPUT, NodeKind::Internal, move |_| {
            Box::new(PerPacket::new(ArpInput { shared: s.clone() }))
        })
        .nexts(ArpNext::NAMES)
        .counters(ArpCounter::DESCS),
    );
}
