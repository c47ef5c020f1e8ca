//! `ip4-icmp-error` / `ip6-icmp-error`, written once over the family
//! ([`IcmpErrorFamily`], implemented by `ip4::Ip4Shared` and `ip6::Ip6Shared`): turns the
//! packet into an ICMP error back to its source (RFC 792, RFC 1812 §4.3.2; ICMPv6, RFC 4443)
//! — TTL / hop limit exceeded, destination unreachable (port, no route), fragmentation
//! needed / packet too big. Rate limited per thread (token bucket, 1000/s, burst 100).
//!
//! - uses: `feature_meta[0]` (type << 8 | code) and `feature_meta[1]` (the MTU), set by the
//!   node that asks for the error ([`request`]); `rx_if` (the error's source is one of its
//!   addresses: IPv4's first, IPv6's global unless the packet came from a link-local
//!   address, else its link-local).
//! - sets: rewrites the packet in place: new IP + ICMP headers quoting the original, up to
//!   576 bytes (IPv4, RFC 1812 §4.3.2.3) or the 1280-byte minimum MTU (IPv6) of its first
//!   buffer (the rest of a chain is freed; the `GSO`/`OFFLOAD_L4_CKSUM` flags of an
//!   aggregate cleared); the `LOCALLY_ORIGINATED` flag.
//! - next: `error-drop`; `ip4-lookup` / `ip6-lookup` (the error).
//! - counters: `sent` (info), `rate_limited`, `no_source` (rx interface has no address of
//!   the family), `suppressed` (never about an ICMP error, nor to a source that is not one
//!   host: IPv4 also not about a non-first fragment; IPv6 not to multicast but for packet
//!   too big: RFC 1812 §4.3.2.7, RFC 4443 §2.4 e), `no_headroom` (no room to prepend the new
//!   headers), `truncated` (shorter than an IP header: never from the IP nodes).

use sluice_buffer::flags::{
    GSO, LOCALLY_ORIGINATED, NEXT_PRESENT, OFFLOAD_L4_CKSUM, TOTAL_LENGTH_VALID,
};
use sluice_buffer::{Buffer, BufferHeader};
use sluice_graph::{Cx, GraphBuilder, Next, NodeKind, NodeRegistration, PacketNode, PerPacket};
use std::sync::Arc;

/// `feature_meta[0]` of a buffer sent to `*-icmp-error`: `type << 8 | code`.
const ICMP_META: usize = 0;
/// `feature_meta[1]`: the MTU of "fragmentation needed" / "packet too big".
const ICMP_MTU: usize = 1;

/// Asks `*-icmp-error` for an error of `kind`/`code` about the packet of `hdr` (`mtu`: the
/// next hop's, for "fragmentation needed" / "packet too big", else 0).
#[inline]
pub fn request(hdr: &mut BufferHeader, kind: u8, code: u8, mtu: u32) {
    hdr.feature_meta[ICMP_META] = ((kind as u64) << 8) | code as u64;
    hdr.feature_meta[ICMP_MTU] = mtu as u64;
}

/// The error `*-icmp-error` was asked for: (type, code, MTU).
pub fn requested(hdr: &BufferHeader) -> (u8, u8, u32) {
    let m = hdr.feature_meta[ICMP_META];
    ((m >> 8) as u8, m as u8, hdr.feature_meta[ICMP_MTU] as u32)
}

sluice_graph::arcs! {
    /// `*-icmp-error`'s next arcs.
    pub enum IcmpErrorNext<lookup> {
        /// To `error-drop`.
        Drop => "error-drop",
        /// To the family's lookup node ([`IcmpErrorFamily::LOOKUP`]).
        Lookup => lookup,
    }
}

sluice_graph::counters! {
    /// `*-icmp-error`'s counters (IPv4's wording; each family's is
    /// [`IcmpErrorFamily::COUNTERS`]).
    pub enum IcmpErrorCounter {
        /// ICMP errors sent.
        Sent => info("sent", "ICMP errors sent"),
        /// ICMP error rate limited.
        RateLimited => error("rate_limited", "ICMP error rate limited"),
        /// No source address for ICMP error.
        NoSource => error("no_source", "no source address for ICMP error"),
        /// ICMP error not sent (about an error, a fragment, a group or an unspecified source).
        Suppressed => error("suppressed", "ICMP error not sent (ICMP error, fragment or broadcast)"),
        /// No headroom for the ICMP error.
        NoHeadroom => error("no_headroom", "no headroom for the ICMP error"),
        /// Shorter than an IP header.
        Truncated => error("truncated", "shorter than an ip4 header"),
    }
}

/// What `*-icmp-error` needs of an address family; implemented by the family's shared node
/// state (`ip4::Ip4Shared`, `ip6::Ip6Shared`).
pub trait IcmpErrorFamily: Send + Sync + 'static {
    /// The address (host order).
    type Addr: Copy;
    /// The node's name.
    const NODE: &'static str;
    /// The lookup node (`ip4-lookup`, `ip6-lookup`): where errors go.
    const LOOKUP: &'static str;
    /// [`IcmpErrorCounter`]'s counters in the family's words.
    const COUNTERS: &'static [sluice_graph::CounterDesc];
    /// The shortest packet an error can be about (an IP header).
    const MIN_LEN: usize;
    /// The new IP + ICMP headers' length.
    const HEADERS: usize;
    /// The longest error, headers included.
    const MAX_LEN: usize;

    /// The source of the packet `d` (at least [`Self::MIN_LEN`] bytes), if an error of type
    /// `kind` may be sent about it.
    fn error_to(d: &[u8], kind: u8) -> Option<Self::Addr>;
    /// The error's source address: one of interface `rx_if`'s, for an error to `to`.
    fn error_from(&self, rx_if: u32, to: Self::Addr) -> Option<Self::Addr>;
    /// Writes the IP and ICMP headers of an error from `from` to `to` into `d` (the new
    /// packet: [`Self::HEADERS`] bytes of headers, then the quote), checksums included.
    fn write(d: &mut [u8], from: Self::Addr, to: Self::Addr, error: (u8, u8, u32));
}

/// `ip4-icmp-error` / `ip6-icmp-error` (see the module header).
pub struct IcmpError<F: IcmpErrorFamily> {
    shared: Arc<F>,
    limit: crate::ratelimit::TokenBucket,
}

impl<F: IcmpErrorFamily> PacketNode for IcmpError<F> {
    fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        if !self.limit.ready(cx) {
            b.hdr.error = cx.error(IcmpErrorCounter::RateLimited);
            return IcmpErrorNext::Drop.next();
        }
        let d = b.data();
        if d.len() < F::MIN_LEN {
            b.hdr.error = cx.error(IcmpErrorCounter::Truncated);
            return IcmpErrorNext::Drop.next();
        }
        let error = requested(b.hdr);
        let Some(to) = F::error_to(d, error.0) else {
            b.hdr.error = cx.error(IcmpErrorCounter::Suppressed);
            return IcmpErrorNext::Drop.next();
        };
        let Some(from) = self.shared.error_from(b.hdr.rx_if, to) else {
            b.hdr.error = cx.error(IcmpErrorCounter::NoSource);
            return IcmpErrorNext::Drop.next();
        };
        self.limit.take();
        let quote = d.len().min(F::MAX_LEN - F::HEADERS);
        // The error quotes the first buffer only: the rest of a chain (jumbo frame, GSO
        // aggregate) is freed, and the packet is no aggregate any more.
        if let Some(rest) = b.hdr.next() {
            cx.free(&[rest]);
        }
        b.hdr.flags &= !(NEXT_PRESENT | TOTAL_LENGTH_VALID | GSO | OFFLOAD_L4_CKSUM);
        b.set_len(quote);
        if b.push_front(F::HEADERS).is_none() {
            b.hdr.error = cx.error(IcmpErrorCounter::NoHeadroom);
            return IcmpErrorNext::Drop.next();
        }
        F::write(b.data_mut(), from, to, error);
        b.hdr.flags |= LOCALLY_ORIGINATED;
        cx.count(IcmpErrorCounter::Sent, 1);
        IcmpErrorNext::Lookup.next()
    }
}

/// Registers the family's `*-icmp-error` node.
pub(crate) fn register<F: IcmpErrorFamily>(b: &mut GraphBuilder, shared: Arc<F>) {
    b.register(
        NodeRegistration::new(F::NODE, NodeKind::Internal, move |_| {
            Box::new(PerPacket::new(IcmpError {
                shared: shared.clone(),
                limit: Default::default(),
            }))
        })
        .nexts(&IcmpErrorNext::names(F::LOOKUP))
        .counters(F::COUNTERS),
    );
}
