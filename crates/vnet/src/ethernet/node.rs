//! `ethernet-input`: classifies frames by EtherType and strips the Ethernet header.
//!
//! - uses: `rx_if`; reads the interface MAC from the shared attribute table.
//! - sets: `l2.l2_hdr_offset`, `ip.fib_index` (the rx interface's IPv4 or IPv6 table);
//!   advances `current_data` to the L3 header, where the next nodes find it (the buffer
//!   has no L3 offset field: the former `ip.l3_hdr_offset` was not set here and is gone).
//!   A frame tagged for a VLAN sub-interface (802.1Q, 802.1ad/0x9100 outer with optional
//!   802.1Q inner) gets `rx_if` = the sub-interface and its tags removed (the MACs move up),
//!   then is classified like an untagged frame of that interface.
//! - next: `error-drop` (0) on errors; `ip4-input` (1) for IPv4; `arp-input` (2) for ARP;
//!   `l2-input` (3) for every frame of an L2 interface: cross-connected (`tx_if` = the peer,
//!   `l2.bd_index` = 0) or bridged (`l2.bd_index` = the bridge domain) — or the first
//!   feature enabled on the rx interface's `l2-input` arc; `ip6-input` (4) for IPv6; every
//!   frame of an interface with an input redirect (`crate::set_rx_redirect`, e.g.
//!   `tester-rx`) goes unchanged to the redirect's arc (added at runtime), before any check;
//!   `punt` (5) for an OSI frame (802.3 length, LLC 0xFE 0xFE: IS-IS) on an interface with a
//!   host stack behind `punt` (`IfAttr::punt_host`, linux-cp), its header stripped as above.
//!   Frames of an admin-down interface (or sub-interface) go to `error-drop` first of all.
//! - counters: `unknown_ethertype`, `l3_mac_mismatch` (unicast not for this interface's MAC
//!   on an L3 interface that is not promiscuous; L2 interfaces take every frame), `tagged`
//!   (VLAN-tagged frame and no sub-interface), `runt` (shorter than a header), `down`
//!   (received on an admin-down interface), `multicast_source_mac` (the source MAC has the
//!   group bit: no station sends from a group address, IEEE 802.3 §3.2.3), `unicast_in_l2_group`
//!   (IPv4/IPv6 to a unicast address inside a broadcast/multicast frame, RFC 1812 §5.3.4 /
//!   RFC 1122 §3.3.6; the IPv4 limited broadcast and multicast pass, and so does a
//!   destination the rx interface's table drops — the network and broadcast /32s of each of
//!   its subnets — which `ip4-lookup` then drops and counts as `drop_route`). Both on L3
//!   interfaces only (an L2 interface switches every frame). `osi_punted` (info: IS-IS
//!   frames sent to `punt`).
//!
//! Cost: the interface's attributes (MAC, mode, admin state, promiscuous flag) are read once
//! per run of packets from one interface (normally once per frame); an input redirect, an
//! admin-down or L2 interface, a traced frame and the `L2_TO_BVI`/`LOCALLY_ORIGINATED`
//! flags share one per-packet test, and the promiscuous flag is looked at only for a frame
//! that failed the MAC compare — none adds work to the forwarding path.
//! The source MAC's group bit is in the same 8-byte load as the destination MAC, so the
//! L3 fast path's one test (`w << MAC_SHIFT == cached_mac`, the 49 bits of our MAC and a
//! clear source group bit: group bits clear and dst == our MAC) covers both.
//! The EtherType is compared as loaded, against constants in the frame's byte order
//! (`IPV4_NE`, ...): no byte swap on the fast path or the L2 path.
//! The node has its own frame loop (not `PerPacket`): the L3 fast path (IPv4/IPv6 unicast
//! to the cached interface's MAC, nothing special) keeps that interface, its MAC and tables
//! in locals, where the per-packet loop reloaded them from the node for every packet; any
//! other packet goes through `process_one`, and after a packet of an L2 (or redirected,
//! admin-down) interface the rest of the frame goes through `process_one` alone.
//! After a packet sent to `ip4-input` or `ip6-input`, the packets that follow it the same
//! way (its interface, MAC and EtherType: one compare, no arc to pick) are a run
//! (`ip_family::fast_run`) that writes no next: a frame that is one run goes on whole
//! (`enqueue_all`); a frame whose runs keep breaking takes the fast path a packet at a
//! time.
//!
//! VPP: `vnet/ethernet/node.c`.

use crate::interface::{counter, IfCounters};
use crate::ip4::Ip4Shared;
use crate::ip_family::{fast_run, SLOW_SWITCH_MIN, SLOW_SWITCH_SHARE};
use sluice_buffer::flags::{L2_TO_BVI, LOCALLY_ORIGINATED, TRACED};
use sluice_buffer::{Arena, BufIdx, FrameAddrs};
use sluice_buffer::{Buffer, BufferHeader};
use sluice_fib::adj::AdjKind;
use sluice_graph::{
    Cx, FrameScratch, Next, NodeFn, NodeKind, NodeRegistration, PacketNode, TraceRecord,
    FRAME_SIZE, PREFETCH_AHEAD, SCRATCH_AHEAD,
};
use sluice_wire::ethernet::{ethertype, field, HEADER_LEN};
use sluice_wire::Mac;
use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Node name.
pub const NAME: &str = "ethernet-input";

/// `ethernet-input` (see the module doc). One instance per thread.
pub struct EthernetInput {
    shared: Arc<Ip4Shared>,
    /// VLAN sub-interfaces: (parent, outer VLAN, inner VLAN or 0) → (sub-interface, its
    /// counters). A per-thread copy, replaced by the control plane (`subif`).
    pub(crate) subs: HashMap<(u32, u16, u16), (u32, Arc<IfCounters>)>,
    // Per-frame cache of the last rx interface's MAC and L2 mode (`NO_IF`: none yet).
    cached_if: u32,
    // The MAC as the low 48 bits of a little-endian load of the frame's first 8 bytes,
    // shifted left by `MAC_SHIFT` (`NEVER_MAC` for a group MAC, so that no frame matches
    // it on the fast path).
    cached_mac: u64,
    // Whether the interface is cross-connected or bridged (one test for the L3 fast path).
    cached_l2_mode: bool,
    cached_l2: u32,
    cached_bd: u32,
    cached_fib: [u32; 2],
    /// 0, an input redirect's arc + 1, or [`RX_DOWN`].
    cached_redirect: u32,
    cached_promisc: bool,
    // An input redirect, admin-down or L2 mode: no frame of the interface takes the L3
    // fast path. All ones then, else 0: ORed with the packet's flags in one test.
    cached_special: u32,
    // ... and the `l2-input` arc's next for it, while any interface has `l2-input` features
    // (per frame).
    l2_any: bool,
    cached_l2_next: Next,
    slot: usize,
}

sluice_graph::arcs! {
    /// `ethernet-input`'s next arcs (input redirects add more at runtime).
    pub enum EthNext {
        /// Errors, frames of admin-down interfaces.
        Drop => "error-drop",
        /// IPv4.
        Ip4 => crate::ip4::nodes::IP4_INPUT,
        /// ARP.
        Arp => crate::arp::ARP_INPUT,
        /// Every frame of an L2 interface (or its first `l2-input` feature).
        L2 => crate::l2::L2_INPUT,
        /// IPv6.
        Ip6 => crate::ip6::nodes::IP6_INPUT,
        /// OSI (IS-IS) frames for a host stack behind `punt` (linux-cp).
        Punt => "punt",
    }
}

sluice_graph::counters! {
    /// `ethernet-input`'s counters.
    pub enum EthCounter {
        /// Unknown EtherType.
        UnknownEthertype => error("unknown_ethertype", "unknown ethernet type"),
        /// Unicast for another MAC on an L3 interface that is not promiscuous.
        MacMismatch => error("l3_mac_mismatch", "l3 mac mismatch"),
        /// VLAN-tagged and no sub-interface matches.
        Tagged => error("tagged", "VLAN-tagged frame, no sub-interface"),
        /// Shorter than an Ethernet header.
        Runt => error("runt", "frame shorter than an Ethernet header"),
        /// Received on an admin-down (sub-)interface.
        Down => error("down", "subinterface down"),
        /// The source MAC is a broadcast/multicast (group) address.
        MulticastSourceMac => error("multicast_source_mac", "multicast/broadcast source MAC"),
        /// A unicast IP destination inside a link-layer broadcast/multicast frame.
        UnicastInL2Group => error("unicast_in_l2_group", "unicast IP in l2 broadcast/multicast frame"),
        /// OSI (IS-IS) frames punted to the host stack.
        OsiPunted => info("osi_punted", "OSI (IS-IS) frames punted to the host stack"),
    }
}
/// EtherTypes as a native-order load of the frame's two bytes holds them (compared without
/// a byte swap on the fast path).
const IPV4_NE: u16 = ethertype::IPV4.to_be();
const IPV6_NE: u16 = ethertype::IPV6.to_be();
const VLAN_NE: u16 = ethertype::VLAN.to_be();
const QINQ_NE: u16 = ethertype::QINQ.to_be();
const QINQ_9100_NE: u16 = QINQ_9100.to_be();
/// `cached_redirect` of an admin-down interface: every frame is dropped.
const RX_DOWN: u32 = u32::MAX;
/// The destination MAC (bits 0..48, bit 0 its group bit) and the source MAC's group bit
/// (bit 48) in the little-endian load of a frame's first 8 bytes: a frame is unicast to the
/// interface from a unicast source when those 49 bits are the interface's MAC and a zero:
/// `w << MAC_SHIFT == cached_mac` (the shift drops the other 15 bits; one instruction
/// where a mask is a 64-bit constant to load and an `and`).
const MAC_SHIFT: u32 = 64 - 49;
/// `cached_mac` of a group MAC (`w << MAC_SHIFT`, whose low bits are clear, never equals
/// it).
const NEVER_MAC: u64 = u64::MAX;
/// `cached_if` before the first packet of a frame.
const NO_IF: u32 = u32::MAX;
/// Outer TPID some switches use for QinQ (pre-802.1ad).
const QINQ_9100: u16 = 0x9100;

#[derive(Copy, Clone)]
struct EthTrace {
    dst: [u8; 6],
    src: [u8; 6],
    et: u16,
}

impl TraceRecord for EthTrace {
    fn format(&self, out: &mut String) {
        out.push_str(&format!(
            "{}: {} -> {}",
            match self.et {
                ethertype::IPV4 => "IP4".to_string(),
                ethertype::ARP => "ARP".to_string(),
                ethertype::IPV6 => "IP6".to_string(),
                v => format!("0x{v:04x}"),
            },
            Mac(self.src),
            Mac(self.dst)
        ));
    }
}

impl EthernetInput {
    /// A tagged frame: when its tags match a sub-interface of `rx_if`, pops them and
    /// classifies the frame again as received untagged on the sub-interface.
    /// `et_ne`: the EtherType as loaded (see `IPV4_NE`).
    #[inline(always)]
    fn sub_interface(&mut self, et_ne: u16, cx: &mut Cx, b: &mut Buffer<'_>) -> Option<Next> {
        // No sub-interface first: one test for every frame of an interface without them.
        if self.subs.is_empty() || !matches!(et_ne, VLAN_NE | QINQ_NE | QINQ_9100_NE) {
            return None;
        }
        self.pop_and_reclassify(cx, b.reborrow())
    }

    /// Takes the view by value, as the other out-of-line paths below (`Buffer::reborrow`):
    /// with `&mut Buffer` the fast path would keep its view in memory for them.
    #[inline(never)]
    fn pop_and_reclassify(&mut self, cx: &mut Cx, mut b: Buffer<'_>) -> Option<Next> {
        self.pop_tags(cx, &mut b)?;
        Some(self.process_one(cx, &mut b))
    }

    /// Matches the frame's tags to a sub-interface; on a match strips them, sets `rx_if`
    /// and counts rx on the sub-interface.
    fn pop_tags(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Option<()> {
        let d = b.data();
        if d.len() < 18 {
            return None;
        }
        let be16 = |at: usize| u16::from_be_bytes([d[at], d[at + 1]]);
        let outer = be16(field::TCI) & 0x0fff;
        let (inner, n) = if be16(field::INNER_ETHERTYPE) == ethertype::VLAN && d.len() >= 22 {
            (
                be16(field::TCI + field::TAG_LEN) & 0x0fff,
                2 * field::TAG_LEN,
            )
        } else {
            (0, field::TAG_LEN)
        };
        let (sub, counters) = self.subs.get(&(b.hdr.rx_if, outer, inner))?;
        let len = b.total_len() as u64;
        counters.add(cx.thread(), counter::RX_PACKETS, 1);
        counters.add(cx.thread(), counter::RX_BYTES, len);
        b.hdr.rx_if = *sub;
        let d = b.data_mut();
        d.copy_within(field::DST..field::ETHERTYPE, n);
        b.advance(n);
        Some(())
    }
}

impl EthernetInput {
    /// A frame of an interface with an input redirect, or of an admin-down interface.
    #[inline(never)]
    fn redirect_or_down(&self, cx: &mut Cx, hdr: &mut BufferHeader) -> Next {
        if self.cached_redirect == RX_DOWN {
            hdr.error = cx.error(EthCounter::Down);
            return EthNext::Drop.next();
        }
        Next((self.cached_redirect - 1) as u16)
    }

    /// An L3 frame that is not unicast to this interface's MAC from a unicast MAC: a
    /// group source is dropped; a group destination carrying unicast IP is dropped; a
    /// unicast one for another MAC goes to a sub-interface, or is dropped unless
    /// promiscuous. `None`: classify it as usual.
    #[inline(never)]
    fn not_own_unicast(&mut self, cx: &mut Cx, mut b: Buffer<'_>, w: u64, et: u16) -> Option<Next> {
        if w & (1 << 48) != 0 {
            b.hdr.error = cx.error(EthCounter::MulticastSourceMac);
            return Some(EthNext::Drop.next());
        }
        if w & 1 != 0 {
            let d = b.data();
            let unicast = match et {
                ethertype::IPV4 => d.get(HEADER_LEN + 16..HEADER_LEN + 20).is_some_and(|a| {
                    let a = u32::from_be_bytes([a[0], a[1], a[2], a[3]]);
                    a >> 28 < 0xe && !self.fib_drops(a)
                }),
                ethertype::IPV6 => d.get(HEADER_LEN + 24).is_some_and(|&a| a != 0xff),
                _ => false,
            };
            if unicast {
                b.hdr.error = cx.error(EthCounter::UnicastInL2Group);
                return Some(EthNext::Drop.next());
            }
            return None;
        }
        // Not for this interface's MAC: perhaps for an L2 sub-interface.
        if let Some(n) = self.sub_interface(et.to_be(), cx, &mut b) {
            return Some(n);
        }
        if !self.cached_promisc {
            b.hdr.error = cx.error(EthCounter::MacMismatch);
            return Some(EthNext::Drop.next());
        }
        None
    }

    /// A frame that is neither IPv4 nor IPv6: ARP (`Ok`: its header is stripped as
    /// theirs), a tagged frame for a sub-interface (classified again) or dropped, anything
    /// else as [`EthernetInput::unknown_ethertype`] (`Err`: finished).
    #[inline(never)]
    fn other_ethertype(&mut self, cx: &mut Cx, mut b: Buffer<'_>, et: u16) -> Result<Next, Next> {
        match et {
            ethertype::ARP => {
                b.hdr.ip.fib_index = self.cached_fib[0];
                Ok(EthNext::Arp.next())
            }
            ethertype::VLAN | ethertype::QINQ | QINQ_9100 => {
                if let Some(n) = self.sub_interface(et.to_be(), cx, &mut b) {
                    return Err(n);
                }
                b.hdr.error = cx.error(EthCounter::Tagged);
                Err(EthNext::Drop.next())
            }
            _ => Err(self.unknown_ethertype(cx, b, et)),
        }
    }

    /// A frame of no EtherType Sluice handles: an OSI frame (IEEE 802.3 length field, LLC
    /// DSAP = SSAP = 0xFE: IS-IS, ES-IS) on an interface with a host stack behind `punt`
    /// (`IfAttr::punt_host`, linux-cp) goes to `punt` with its L2 header offset set, like
    /// VPP's linux-cp registering `osi-input`'s IS-IS protocol; anything else is dropped.
    #[cold]
    #[inline(never)]
    fn unknown_ethertype(&self, cx: &mut Cx, mut b: Buffer<'_>, et: u16) -> Next {
        let osi = et < 0x0600
            && b.data().get(HEADER_LEN..HEADER_LEN + 2) == Some(&[0xfe, 0xfe][..])
            && self
                .shared
                .if_attr(b.hdr.rx_if)
                .punt_host
                .load(Ordering::Relaxed);
        if !osi {
            b.hdr.error = cx.error(EthCounter::UnknownEthertype);
            return EthNext::Drop.next();
        }
        cx.count(EthCounter::OsiPunted, 1);
        b.hdr.l2.l2_hdr_offset = b.hdr.current_data;
        b.advance(HEADER_LEN);
        EthNext::Punt.next()
    }

    /// Whether the rx interface's IPv4 table drops `dst`: the network and broadcast /32s
    /// of every connected subnet are drop entries (as VPP's), so a directed broadcast of
    /// any of the interface's subnets is left to `ip4-lookup`, which drops and counts it as
    /// the FIB says, rather than counted as unicast here.
    fn fib_drops(&self, dst: u32) -> bool {
        self.shared
            .lookup(self.cached_fib[0], dst)
            .is_some_and(|v| v < crate::routes::LB_FLAG && self.shared.adj.kind(v) == AdjKind::Drop)
    }

    /// The frames off the L3 fast path: of an interface with an input redirect (sent
    /// there unchanged), admin-down (dropped) or in L2 mode (switched, unless the bridge
    /// sent it to its BVI); traced; marked `L2_TO_BVI` or `LOCALLY_ORIGINATED` (cleared for
    /// the L3 path). `None`: classify it as L3.
    #[inline(always)]
    fn special(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Option<Next> {
        if self.cached_redirect != 0 {
            return Some(self.redirect_or_down(cx, b.hdr));
        }
        let Some(h) = b.head::<HEADER_LEN>() else {
            b.hdr.error = cx.error(EthCounter::Runt);
            return Some(EthNext::Drop.next());
        };
        let et_ne = u16::from_ne_bytes([h[field::ETHERTYPE], h[field::ETHERTYPE + 1]]);
        if b.hdr.is_traced() {
            let t = EthTrace {
                dst: [h[0], h[1], h[2], h[3], h[4], h[5]],
                src: [h[6], h[7], h[8], h[9], h[10], h[11]],
                et: u16::from_be(et_ne),
            };
            cx.trace(b, t);
        }
        if self.cached_l2_mode {
            // Tags are looked at off the L3 fast path (in the EtherType match below) and, on
            // L2 interfaces, before switching: a sub-interface match wins over the parent's
            // mode.
            if self.cached_l2 != 0 || (self.cached_bd != 0 && b.hdr.flags & L2_TO_BVI == 0) {
                if let Some(n) = self.sub_interface(et_ne, cx, b) {
                    return Some(n);
                }
            }
            if self.cached_l2 != 0 {
                // Cross-connected interface: the whole frame goes to l2-input, any destination.
                b.hdr.tx_if = self.cached_l2 - 1;
                b.hdr.l2.bd_index = 0;
                b.hdr.l2.l2_hdr_offset = b.hdr.current_data;
                return Some(self.l2_next());
            }
            if self.cached_bd != 0 && b.hdr.flags & L2_TO_BVI == 0 {
                // Bridged interface: l2-input switches it in its bridge domain (unless the
                // bridge just switched it to this interface, its BVI: then it is routed below).
                b.hdr.l2.bd_index = self.cached_bd as u16;
                b.hdr.l2.l2_hdr_offset = b.hdr.current_data;
                return Some(self.l2_next());
            }
        }
        if b.hdr.flags & (L2_TO_BVI | LOCALLY_ORIGINATED) != 0 {
            b.hdr.flags &= !(L2_TO_BVI | LOCALLY_ORIGINATED);
        }
        None
    }

    /// `l2-input`, or the first `l2-input` arc feature of the cached rx interface.
    #[inline(always)]
    fn l2_next(&self) -> Next {
        if self.l2_any {
            self.cached_l2_next
        } else {
            EthNext::L2.next()
        }
    }
}

impl PacketNode for EthernetInput {
    #[inline(always)]
    fn begin_frame(&mut self, _cx: &mut Cx) {
        self.cached_if = NO_IF;
        self.l2_any = self.shared.features.any(self.slot);
    }

    #[inline(always)]
    fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        if self.cached_if != b.hdr.rx_if {
            let a = self.shared.if_attr(b.hdr.rx_if);
            self.cached_if = b.hdr.rx_if;
            let m = a.mac_bytes();
            let mac = u64::from_le_bytes([m[0], m[1], m[2], m[3], m[4], m[5], 0, 0]);
            self.cached_mac = mac << MAC_SHIFT;
            if mac & 1 != 0 {
                self.cached_mac = NEVER_MAC;
            }
            self.cached_l2 = a.l2_xc.load(Ordering::Relaxed);
            self.cached_bd = a.l2_bd.load(Ordering::Relaxed);
            self.cached_l2_mode = self.cached_l2 != 0 || self.cached_bd != 0;
            self.cached_redirect = if a.admin_up.load(Ordering::Relaxed) {
                a.rx_redirect.load(Ordering::Relaxed)
            } else {
                RX_DOWN
            };
            self.cached_promisc = a.promisc.load(Ordering::Relaxed);
            self.cached_special = if self.cached_redirect != 0 || self.cached_l2_mode {
                u32::MAX
            } else {
                0
            };
            self.cached_fib = [
                a.fib4.load(Ordering::Relaxed),
                a.fib6.load(Ordering::Relaxed),
            ];
            if self.l2_any && (self.cached_l2 != 0 || self.cached_bd != 0) {
                self.cached_l2_next =
                    self.shared
                        .features
                        .next(self.slot, b.hdr.rx_if, EthNext::L2.next());
            }
        }
        // One test for the L3 fast path: anything else (an input redirect, an admin-down or
        // L2 interface, a traced packet, a BVI or locally built one) goes through `special`
        // first, which finishes it or clears its flags for the L3 path.
        let f = b.hdr.flags;
        if self.cached_special | (f & OFF_FAST_FLAGS) != 0 {
            if let Some(n) = self.special(cx, b) {
                return n;
            }
        }
        let Some(h) = b.head::<HEADER_LEN>() else {
            b.hdr.error = cx.error(EthCounter::Runt);
            return EthNext::Drop.next();
        };
        // The EtherType as loaded (no byte swap), compared with the constants in the same
        // order (`*_NE`); the out-of-line paths take it in host order.
        let et_ne = u16::from_ne_bytes([h[field::ETHERTYPE], h[field::ETHERTYPE + 1]]);
        // Destination MAC: 48 bits of one load (bit 0 = the group bit of the first byte; bit
        // 48 = the source MAC's group bit).
        let w = u64::from_le_bytes([h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]]);
        if w << MAC_SHIFT != self.cached_mac {
            if let Some(n) = self.not_own_unicast(cx, b.reborrow(), w, u16::from_be(et_ne)) {
                return n;
            }
        }
        // IPv4 and IPv6 inline (a two-way compare); the rest out of line.
        let next = match et_ne {
            IPV4_NE => {
                b.hdr.ip.fib_index = self.cached_fib[0];
                EthNext::Ip4.next()
            }
            IPV6_NE => {
                b.hdr.ip.fib_index = self.cached_fib[1];
                EthNext::Ip6.next()
            }
            _ => match self.other_ethertype(cx, b.reborrow(), u16::from_be(et_ne)) {
                Ok(next) => next,
                Err(done) => return done,
            },
        };
        // `head` above found the header in the buffer: stripping it cannot fail (what
        // `advance` would check again, after the stores above made the compiler reload).
        let l2 = b.hdr.current_data;
        b.hdr.l2.l2_hdr_offset = l2;
        b.hdr.current_data = l2 + HEADER_LEN as i16;
        b.hdr.current_length -= HEADER_LEN as u16;
        next
    }
}

/// What the frame loop's fast path needs of the cached rx interface, in locals (registers)
/// rather than reloaded from the node per packet: an L3 interface with nothing special
/// (`cached_special` 0). Otherwise `rx_if` is `NO_IF` and `mac` `NEVER_MAC`: no packet
/// takes the fast path.
#[derive(Clone, Copy)]
struct Fast {
    rx_if: u32,
    mac: u64,
    fib: [u32; 2],
}

impl EthernetInput {
    #[inline(always)]
    fn fast(&self) -> Fast {
        if self.cached_special != 0 {
            return Fast {
                rx_if: NO_IF,
                mac: NEVER_MAC,
                fib: [0; 2],
            };
        }
        Fast {
            rx_if: self.cached_if,
            mac: self.cached_mac,
            fib: self.cached_fib,
        }
    }
}

/// The flags that keep a packet off the L3 fast path and its runs (`special` handles them).
const OFF_FAST_FLAGS: u32 = TRACED | L2_TO_BVI | LOCALLY_ORIGINATED;

/// The tests [`fast_one`] and [`Run::take`] share (a test added to the fast path goes here,
/// so runs cannot take what the fast path would not): `b` came in on `rx_if`, carries none
/// of [`OFF_FAST_FLAGS`], holds a whole Ethernet header and is unicast to `mac` (shifted by
/// `MAC_SHIFT`, with the source MAC's group bit clear). Its EtherType as loaded (`*_NE`),
/// or `None`.
#[inline(always)]
fn fast_ethertype(rx_if: u32, mac: u64, b: &Buffer<'_>) -> Option<u16> {
    if b.hdr.rx_if != rx_if || b.hdr.flags & OFF_FAST_FLAGS != 0 {
        return None;
    }
    let h = b.head::<HEADER_LEN>()?;
    let et_ne = u16::from_ne_bytes([h[field::ETHERTYPE], h[field::ETHERTYPE + 1]]);
    let w = u64::from_le_bytes([h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]]);
    if w << MAC_SHIFT != mac {
        return None;
    }
    Some(et_ne)
}

/// `process_one`'s L3 fast path alone: an IPv4 or IPv6 frame unicast to the cached (L3,
/// not special) interface's MAC from a unicast MAC, not traced nor flagged. `None`, having
/// changed nothing: anything else, for `process_one`.
#[inline(always)]
fn fast_one(f: &Fast, b: &mut Buffer<'_>) -> Option<Next> {
    let et_ne = fast_ethertype(f.rx_if, f.mac, b)?;
    let (fib, next) = match et_ne {
        IPV4_NE => (f.fib[0], EthNext::Ip4),
        IPV6_NE => (f.fib[1], EthNext::Ip6),
        _ => return None,
    };
    strip_l3(b, fib);
    Some(next.next())
}

/// An L3 frame's metadata: its table, the Ethernet header stripped (`head` found it in the
/// buffer, so the stores cannot fail).
#[inline(always)]
fn strip_l3(b: &mut Buffer<'_>, fib: u32) {
    b.hdr.ip.fib_index = fib;
    let l2 = b.hdr.current_data;
    b.hdr.l2.l2_hdr_offset = l2;
    b.hdr.current_data = l2 + HEADER_LEN as i16;
    b.hdr.current_length -= HEADER_LEN as u16;
}

/// A run of packets that all take one arc of the L3 fast path: [`fast_one`]'s tests with
/// the EtherType fixed (one compare, no arc to pick), for the packets after one that took
/// that arc.
#[derive(Clone, Copy)]
struct Run {
    rx_if: u32,
    mac: u64,
    et_ne: u16,
    fib: u32,
}

impl Run {
    /// The run after a packet that went to `next` with the fast path's state `f`: `None`
    /// unless `next` is IPv4 or IPv6 and `f` an L3 interface's.
    #[inline(always)]
    fn after(f: &Fast, next: Next) -> Option<Run> {
        let (et_ne, fib) = match next {
            n if n == EthNext::Ip4.next() => (IPV4_NE, f.fib[0]),
            n if n == EthNext::Ip6.next() => (IPV6_NE, f.fib[1]),
            _ => return None,
        };
        Some(Run {
            rx_if: f.rx_if,
            mac: f.mac,
            et_ne,
            fib,
        })
    }

    /// Whether `b` belongs to the run (then stripped as [`fast_one`] would); `false`,
    /// having changed nothing, for anything else.
    #[inline(always)]
    fn take(&self, b: &mut Buffer<'_>) -> bool {
        if fast_ethertype(self.rx_if, self.mac, b) != Some(self.et_ne) {
            return false;
        }
        strip_l3(b, self.fib);
        true
    }
}

/// [`EthernetInput::runs`]: the whole frame is one run (its nexts not written past the
/// first).
const WHOLE: usize = usize::MAX;

impl EthernetInput {
    /// From packet 1 of `frame` (packet 0's next in `nexts[0]`), runs ([`Run`]) after each
    /// packet sent to `ip4-input`/`ip6-input`, other packets one at a time between them:
    /// the index of the first packet left (the frame's length, or after a special packet,
    /// or once [`SLOW_SWITCH_MIN`] runs and one in [`SLOW_SWITCH_SHARE`] packets have
    /// broken), or [`WHOLE`]. Out of line: in the frame loop, the per-packet L2 loop after
    /// it reloaded three values from the stack every packet.
    ///
    /// # Safety
    ///
    /// The caller owns every buffer of `frame` (one node's frame) and resolved `addrs` from
    /// it; no other view of the buffers from packet 1 on is alive (packet 0's may be in
    /// scope: `runs` never makes a view of it).
    #[inline(never)]
    unsafe fn runs(
        &mut self,
        cx: &mut Cx,
        arena: Arena<'_>,
        addrs: &FrameAddrs<{ FRAME_SIZE + SCRATCH_AHEAD }>,
        frame: &[BufIdx],
        nexts: &mut [u16; FRAME_SIZE],
    ) -> usize {
        let n = frame.len().min(FRAME_SIZE);
        let mut fast = self.fast();
        let mut next = Next(nexts[0]);
        let mut i = 1;
        // Runs ended by a packet off them.
        let mut breaks = 0;
        loop {
            if let Some(run) = Run::after(&fast, next) {
                // SAFETY: the caller's contract.
                let j = unsafe { fast_run(arena, addrs, frame, i, |b| run.take(b)) };
                if i == 1 && j == n {
                    return WHOLE;
                }
                nexts[i..j].fill(next.0);
                i = j;
                breaks += 1;
                if breaks >= SLOW_SWITCH_MIN && breaks * SLOW_SWITCH_SHARE > i {
                    return i;
                }
            }
            if i >= n {
                return n;
            }
            addrs.prefetch(i + PREFETCH_AHEAD, true);
            next = {
                // SAFETY: the caller's contract; the view ends with this block.
                let mut b = unsafe { arena.buffer_at(addrs, i, frame[i]) };
                match fast_one(&fast, &mut b) {
                    Some(nx) => nx,
                    None => {
                        let nx = self.process_one(cx, &mut b);
                        fast = self.fast();
                        nx
                    }
                }
            };
            nexts[i] = next.0;
            i += 1;
            if self.cached_special != 0 {
                return i;
            }
        }
    }
}

/// The frame loop: `PerPacket`'s (addresses resolved once, headers and data prefetched
/// `PREFETCH_AHEAD` on, the nexts handed on in one batch) with the L3 fast path's state in
/// locals ([`Fast`]); a packet off it (another interface, a special one, not IP, not for
/// our MAC, traced) goes through `process_one`, after which the state is read again. Once
/// a packet's interface is special (L2, input redirect, admin-down) the rest of the frame
/// goes through `process_one` alone (frames come from one interface: an L2 interface's
/// frame would fail the fast path's tests on every packet). After each packet sent to
/// `ip4-input`/`ip6-input`, the packets like it ([`Run`]) go through `fast_run` without a
/// next each (filled in after, unless the whole frame is one run: then it is sent on
/// whole); once [`SLOW_SWITCH_MIN`] runs and one in [`SLOW_SWITCH_SHARE`] packets have
/// broken (IPv4 and IPv6 interleaved, ...), the rest takes [`fast_one`] a packet at a time.
impl NodeFn for EthernetInput {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        let (arena, frame, mut s) = cx.resolve_frame(frame);
        let n = frame.len();
        let FrameScratch { addrs, nexts } = &mut *s;
        self.begin_frame(cx);
        let addrs = &*addrs;
        let mut fast = self.fast();
        let mut i = 0;
        while i < n {
            addrs.prefetch(i + PREFETCH_AHEAD, true);
            // SAFETY: the dispatcher hands this node exclusive ownership of every index in
            // `frame`; each index appears once, `addrs` was resolved from `frame` above and
            // the view lives only for this iteration.
            let mut b = unsafe { arena.buffer_at(addrs, i, frame[i]) };
            if let Some(nx) = fast_one(&fast, &mut b) {
                nexts[i] = nx.0;
                i += 1;
                continue;
            }
            nexts[i] = self.process_one(cx, &mut b).0;
            i += 1;
            fast = self.fast();
            if self.cached_special != 0 {
                break;
            }
            if i == 1 {
                // The frame's first packet (always through `process_one`, the interface
                // not yet cached): the runs after it, out of line.
                // SAFETY: as above; packet 0's view `b` is still in scope but no longer
                // used, and `runs` starts at index 1 (it never makes a view of packet 0).
                i = unsafe { self.runs(cx, arena, addrs, frame, nexts) };
                if i == WHOLE {
                    self.end_frame(cx);
                    cx.enqueue_all(Next(s.nexts[0]), frame);
                    cx.put_frame_scratch(s);
                    return;
                }
                fast = self.fast();
                if self.cached_special != 0 {
                    break;
                }
            }
        }
        // A frame of an L2 interface (or one with an input redirect, or admin-down): the
        // rest per packet, without the fast path's tests.
        // (An index loop: an iterator skipping to `i` keeps its state on the stack.)
        while i < n {
            addrs.prefetch(i + PREFETCH_AHEAD, true);
            // SAFETY: as above.
            let mut b = unsafe { arena.buffer_at(addrs, i, frame[i]) };
            nexts[i] = self.process_one(cx, &mut b).0;
            i += 1;
        }
        // `PacketNode`'s contract, as `PerPacket` keeps it (a no-op today: should the node
        // collect per frame, this loop publishes it).
        self.end_frame(cx);
        cx.enqueue_to_next(frame, &s.nexts[..n]);
        cx.put_frame_scratch(s);
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// Registers `ethernet-input` (its arc slot declared by `vnet::register`).
pub(crate) fn register(r: &mut crate::plugin::Registrar, shared: Arc<Ip4Shared>) {
    let eslot = crate::ip4::nodes::arc_slot(r, NAME);
    let b = &mut r.graph;
    let s = shared.clone();
    b.register(
        NodeRegistration::new(NAME, NodeKind::Internal, move |_| {
            Box::new(EthernetInput {
                shared: s.clone(),
                subs: HashMap::new(),
                cached_if: NO_IF,
                cached_mac: 0,
                cached_l2_mode: false,
                cached_l2: 0,
                cached_redirect: 0,
                cached_promisc: false,
                cached_special: 0,
                cached_bd: 0,
                cached_fib: [0; 2],
                l2_any: false,
                cached_l2_next: EthNext::L2.next(),
                slot: eslot,
            })
        })
        .nexts(EthNext::NAMES)
        .counters(EthCounter::DESCS),
    );
}
