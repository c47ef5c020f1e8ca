//! `ip4-glean` / `ip6-glean`, written once over the family ([`GleanFamily`], implemented by
//! `ip4::Ip4Shared` and `ip6::Ip6Shared`): a packet needs a neighbour that is not resolved:
//! send a request for it — an ARP request (IPv4), a neighbor solicitation to the target's
//! solicited-node group (IPv6) — at most one per target per 10 ms per thread, checked
//! before the slow-path locks, and drop the packet, counted.
//!
//! - uses: `ip.adj_index` (Glean: resolve the packet's destination; Incomplete: the
//!   adjacency's next hop); `rx_if` and `ip.fib_index` (copied to the request).
//! - sets: allocates the request buffer (`tx_if` = the adjacency's interface).
//! - next: `error-drop` for the triggering packet; `interface-output` for requests.
//! - counters: `requests_sent` (info; the triggering packet's drop reason), `throttled`
//!   (info: request suppressed, packet dropped), `no_buffer` (allocation failure),
//!   `no_source` (the interface has no address of the family), `truncated` (shorter than an
//!   IP header: never from the input nodes), `directed_broadcast` (IPv4: the destination is
//!   the directed broadcast of the interface's first subnet, never resolved: RFC 1812
//!   §5.3.5.2 forwarding of directed broadcasts is off, as in VPP), `no_next_hop` (an
//!   incomplete adjacency without a known next hop).

use crate::ratelimit::{Throttle, ThrottleKey};
use sluice_buffer::Buffer;
use sluice_fib::adj::Adj;
use sluice_graph::{Cx, GraphBuilder, Next, NodeKind, NodeRegistration, PacketNode, PerPacket};
use std::sync::Arc;

sluice_graph::arcs! {
    /// `*-glean`'s next arcs.
    pub enum GleanNext {
        /// To `error-drop`.
        Drop => "error-drop",
        /// To `interface-output`.
        Output => crate::output::NAME,
    }
}

sluice_graph::counters! {
    /// `*-glean`'s counters (IPv4's wording; each family's is [`GleanFamily::COUNTERS`]).
    pub enum GleanCounter {
        /// Requests sent.
        RequestsSent => info("requests_sent", "ARP requests sent"),
        /// Requests throttled.
        Throttled => info("throttled", "ARP requests throttled"),
        /// No buffer for the request.
        NoBuffer => error("no_buffer", "no buffer for ARP request"),
        /// No source address on the interface.
        NoSource => error("no_source", "no source address for ARP request"),
        /// Shorter than an IP header.
        Truncated => error("truncated", "shorter than an ip4 header"),
        /// To the interface subnet's directed broadcast address: not resolved (IPv4).
        DirectedBroadcast => error("directed_broadcast", "no ARP for a directed broadcast"),
        /// Incomplete adjacency without a next hop.
        NoNextHop => error("no_next_hop", "incomplete adjacency without next hop"),
    }
}

/// What `*-glean` needs of an address family; implemented by the family's shared node
/// state (`ip4::Ip4Shared`, `ip6::Ip6Shared`).
pub trait GleanFamily: Send + Sync + 'static {
    /// What the throttle tells requests apart by (the target, or what stands for it).
    type Key: ThrottleKey;
    /// The request frame, Ethernet header included.
    type Request: AsRef<[u8]>;
    /// The node's name.
    const NODE: &'static str;
    /// [`GleanCounter`]'s counters in the family's words.
    const COUNTERS: &'static [sluice_graph::CounterDesc];

    /// The adjacency `ai`.
    fn adj(&self, ai: u32) -> Adj;
    /// The throttle key of a packet `d` whose adjacency is `adj` (index `ai`), or why it is
    /// dropped without a request (cheap: no lock).
    fn key(&self, adj: &Adj, ai: u32, d: &[u8]) -> Result<Self::Key, GleanCounter>;
    /// The request for `key` out of `adj`'s interface, or why none can be sent.
    fn request(&self, adj: &Adj, ai: u32, key: Self::Key) -> Result<Self::Request, GleanCounter>;
}

/// `ip4-glean` / `ip6-glean` (see the module header).
pub struct Glean<F: GleanFamily> {
    shared: Arc<F>,
    throttle: Throttle<F::Key>,
}

impl<F: GleanFamily> Glean<F> {
    /// The request for the packet `b`, or why there is none.
    fn request(&mut self, cx: &Cx, b: &Buffer<'_>, adj: &Adj) -> Result<F::Request, GleanCounter> {
        let ai = b.hdr.ip.adj_index;
        let key = self.shared.key(adj, ai, b.data())?;
        if !self.throttle.allow(cx, key) {
            return Err(GleanCounter::Throttled);
        }
        self.shared.request(adj, ai, key)
    }
}

impl<F: GleanFamily> PacketNode for Glean<F> {
    fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        let adj = self.shared.adj(b.hdr.ip.adj_index);
        let frame = match self.request(cx, b, &adj) {
            Ok(f) => f,
            Err(c) => {
                b.hdr.error = cx.error(c);
                return GleanNext::Drop.next();
            }
        };
        // The triggering packet is dropped, counted as "request sent".
        b.hdr.error = cx.error(GleanCounter::RequestsSent);
        let Some(req) = cx.bufs().alloc_one() else {
            b.hdr.error = cx.error(GleanCounter::NoBuffer);
            return GleanNext::Drop.next();
        };
        // SAFETY: `req` was just allocated by this node and has no other view.
        let mut v = unsafe { cx.buffer(req) };
        v.write_packet(frame.as_ref());
        v.hdr.tx_if = adj.tx_if;
        v.hdr.rx_if = b.hdr.rx_if;
        v.hdr.ip.fib_index = b.hdr.ip.fib_index;
        cx.enqueue(GleanNext::Output.next(), req);
        GleanNext::Drop.next()
    }
}

/// Registers the family's `*-glean` node.
pub(crate) fn register<F: GleanFamily>(b: &mut GraphBuilder, shared: Arc<F>) {
    b.register(
        NodeRegistration::new(F::NODE, NodeKind::Internal, move |_| {
            Box::new(PerPacket::new(Glean {
                shared: shared.clone(),
                throttle: Default::default(),
            }))
        })
        .nexts(GleanNext::NAMES)
        .counters(F::COUNTERS),
    );
}
