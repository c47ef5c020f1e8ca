//! `ip4-source-check-via-rx` and `ip6-source-check-via-rx`: strict reverse-path checks (uRPF
//! strict, RFC 3704 §2.2), features on the `ip4-unicast` / `ip6-unicast` arcs: the route back
//! to the packet's source must leave through the interface the packet came in on. One generic
//! node, [`SourceCheck`], instantiated per family through [`RpfFamily`].
//!
//! - uses: the IP header (source address), `rx_if`, `ip.fib_index` (the table looked in).
//! - sets: nothing.
//! - next: `error-drop` (0) when the check fails; otherwise the next feature of the rx
//!   interface's arc, by default `ip4-lookup` / `ip6-lookup` (1).
//! - counters: `no_route` (no route back to the source), `wrong_interface` (the route back
//!   leaves through another interface), `passed` (info). A route back over ECMP paths passes
//!   (loose for that prefix). IPv6 link-local sources (fe80::/10) pass: they are scoped to
//!   the link they arrived on and have no route.

use crate::feature::FeatureNext;
use crate::routes::LB_FLAG;
use sluice_buffer::Buffer;
use sluice_fib::adj::{AdjKind, AdjTable};
use sluice_graph::{CounterDesc, Cx, Next, NodeKind, NodeRegistration, PacketNode, PerPacket};
use std::sync::Arc;

/// `ip4-source-check-via-rx`.
pub const IP4_SOURCE_CHECK: &str = "ip4-source-check-via-rx";
/// `ip6-source-check-via-rx`.
pub const IP6_SOURCE_CHECK: &str = "ip6-source-check-via-rx";

/// The route back to a packet's source.
pub enum SourceRoute {
    /// The FIB value (adjacency, or load-balance with [`LB_FLAG`]); `None`: no route.
    Fib(Option<u32>),
    /// The source is not checked (IPv6 link-local).
    Exempt,
}

/// What the check needs from an address family.
pub trait RpfFamily: Send + Sync + 'static {
    /// The route to the packet's source.
    fn source_route(&self, b: &Buffer<'_>) -> SourceRoute;
    /// The adjacency table the FIB values refer to.
    fn adjacencies(&self) -> &AdjTable;
    /// The feature-arc next table.
    fn features(&self) -> &FeatureNext;
}

impl RpfFamily for crate::ip4::Ip4Shared {
    #[inline(always)]
    fn source_route(&self, b: &Buffer<'_>) -> SourceRoute {
        // ip4-input guaranteed a full header.
        let d = b.data();
        let src = u32::from_be_bytes([d[12], d[13], d[14], d[15]]);
        SourceRoute::Fib(self.lookup(b.hdr.ip.fib_index, src))
    }
    fn adjacencies(&self) -> &AdjTable {
        &self.adj
    }
    fn features(&self) -> &FeatureNext {
        &self.features
    }
}

impl RpfFamily for crate::ip6::Ip6Shared {
    #[inline(always)]
    fn source_route(&self, b: &Buffer<'_>) -> SourceRoute {
        // ip6-input guaranteed a full header.
        let mut a = [0u8; 16];
        a.copy_from_slice(&b.data()[8..24]);
        let src = u128::from_be_bytes(a);
        if src >> 118 == 0xfe80 >> 6 {
            return SourceRoute::Exempt;
        }
        SourceRoute::Fib(self.lookup(b.hdr.ip.fib_index, src))
    }
    fn adjacencies(&self) -> &AdjTable {
        &self.adj
    }
    fn features(&self) -> &FeatureNext {
        &self.v4.features
    }
}

/// The source-check node of one family.
pub struct SourceCheck<F> {
    shared: Arc<F>,
    slot: usize,
}

sluice_graph::arcs! {
    /// The source-check nodes' next arcs.
    pub enum RpfNext<lookup> {
        /// Failed checks.
        Drop => "error-drop",
        /// The next feature on the unicast arc (`ip4-lookup` / `ip6-lookup` at its end).
        Lookup => lookup,
    }
}

sluice_graph::counters! {
    /// The source-check nodes' counters (IPv4's wording; IPv6's is reworded at
    /// registration).
    pub enum RpfCounter {
        /// No route back to the source.
        NoRoute => error("no_route", "ip4 source check: no route to source"),
        /// The route back is not through the rx interface.
        WrongIf => error("wrong_interface", "ip4 source check: route to source via another interface"),
        /// Passed.
        Passed => info("passed", "ip4 source check passed"),
    }
}

impl<F: RpfFamily> PacketNode for SourceCheck<F> {
    fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        let ok = match self.shared.source_route(b) {
            SourceRoute::Exempt => true,
            SourceRoute::Fib(None) => {
                b.hdr.error = cx.error(RpfCounter::NoRoute);
                return RpfNext::Drop.next();
            }
            // ECMP route back: any of its paths may be the rx interface; accept (loose).
            SourceRoute::Fib(Some(v)) if v >= LB_FLAG => true,
            SourceRoute::Fib(Some(v)) => {
                let a = self.shared.adjacencies().get(v);
                matches!(
                    a.kind,
                    AdjKind::Rewrite | AdjKind::Glean | AdjKind::Incomplete
                ) && a.tx_if == b.hdr.rx_if
            }
        };
        if !ok {
            b.hdr.error = cx.error(RpfCounter::WrongIf);
            return RpfNext::Drop.next();
        }
        cx.count(RpfCounter::Passed, 1);
        self.shared
            .features()
            .next(self.slot, b.hdr.rx_if, RpfNext::Lookup.next())
    }
}

/// Registers both families' source checks.
pub fn register(
    b: &mut crate::plugin::Registrar,
    v4: Arc<crate::ip4::Ip4Shared>,
    v6: Arc<crate::ip6::Ip6Shared>,
) {
    register_one(
        b,
        IP4_SOURCE_CHECK,
        crate::ip4::nodes::IP4_LOOKUP,
        v4,
        [
            "ip4 source check: no route to source",
            "ip4 source check: route to source via another interface",
            "ip4 source check passed",
        ],
    );
    register_one(
        b,
        IP6_SOURCE_CHECK,
        crate::ip6::nodes::IP6_LOOKUP,
        v6,
        [
            "ip6 source check: no route to source",
            "ip6 source check: route to source via another interface",
            "ip6 source check passed",
        ],
    );
}

/// Registers one family's node, whose default arc leads to `lookup`; `desc` describes the
/// counters `no_route`, `wrong_interface`, `passed`.
fn register_one<F: RpfFamily>(
    r: &mut crate::plugin::Registrar,
    name: &'static str,
    lookup: &'static str,
    shared: Arc<F>,
    desc: [&'static str; 3],
) {
    let slot = crate::ip4::nodes::arc_slot(r, name);
    r.graph.register(
        NodeRegistration::new(name, NodeKind::Internal, move |_| {
            Box::new(PerPacket::new(SourceCheck {
                shared: shared.clone(),
                slot,
            }))
        })
        .nexts(&RpfNext::names(lookup))
        .counters(&CounterDesc::reworded(RpfCounter::DESCS, desc)),
    );
}
