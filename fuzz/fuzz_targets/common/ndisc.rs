//! Neighbor Discovery checks shared by the `wire_ipv6` and `wire_icmpv6` targets.

use sluice_wire::icmpv6::{Icmpv6Packet, NdiscOptions, NdiscRepr};
use std::net::Ipv6Addr;

/// Every option the iterator yields re-emits to bytes that parse to the same option, and
/// what `NdiscRepr` parses re-emits to a checksummed message that parses to the same thing.
pub fn check(p: &Icmpv6Packet<&[u8]>, src: Ipv6Addr, dst: Ipv6Addr) {
    for o in p.ndisc_options() {
        let Ok(o) = o else { break };
        let mut b = vec![0u8; o.buffer_len()];
        assert_eq!(o.emit(&mut b), b.len());
        let back = NdiscOptions::new(&b)
            .next()
            .expect("one option")
            .expect("valid");
        assert_eq!(back, o);
    }
    if let Ok(r) = NdiscRepr::parse(p) {
        let _ = r.kind();
        let mut b = vec![0u8; r.buffer_len()];
        let mut q = Icmpv6Packet::new_unchecked(&mut b[..]);
        r.emit(&mut q);
        q.fill_checksum(src, dst);
        assert!(q.verify_checksum(src, dst));
        let q = Icmpv6Packet::new_checked(&b[..]).expect("emitted message parses");
        assert_eq!(NdiscRepr::parse(&q), Ok(r));
    }
}
