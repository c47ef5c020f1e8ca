//! IPv6 with its extension-header walk, ICMPv6 with Neighbor Discovery, and TCP, on arbitrary
//! bytes. The first byte picks where the rest goes (a whole IPv6 packet, a bare ICMPv6
//! message, a bare TCP segment) so the fuzzer reaches each parser without having to build
//! the layers above it; the IPv6 path continues into the upper layer the walk finds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_wire::format;
use sluice_wire::icmpv6::Icmpv6Packet;
use sluice_wire::ipv6::{next_header, Ipv6Packet, Ipv6Repr};
use sluice_wire::tcp::{TcpPacket, TcpRepr};
use std::net::Ipv6Addr;

#[path = "common/ndisc.rs"]
mod ndisc;

const SRC: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);
const DST: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

fn icmpv6(m: &[u8], src: Ipv6Addr, dst: Ipv6Addr) {
    let Ok(p) = Icmpv6Packet::new_checked(m) else {
        return;
    };
    let _ = (p.verify_checksum(src, dst), p.compute_checksum(src, dst));
    ndisc::check(&p, src, dst);
}

fn tcp(seg: &[u8], src: Ipv6Addr, dst: Ipv6Addr) {
    let Ok(t) = TcpPacket::new_checked(seg) else {
        return;
    };
    let _ = (t.verify_checksum_v6(src, dst), t.flags().to_string());
    for o in t.options_iter() {
        let _ = o;
    }
    let r = TcpRepr::parse(&t).expect("a checked segment parses");
    assert_eq!(r.payload_len + t.header_len(), seg.len());
    let mut copy = seg.to_vec();
    let mut m = TcpPacket::new_checked(&mut copy[..]).expect("same bytes");
    m.fill_checksum_v6(src, dst);
    assert!(m.verify_checksum_v6(src, dst));
}

fn ipv6(b: &[u8]) {
    let mut s = String::new();
    format::describe_ipv6(b, &mut s);
    let Ok(p) = Ipv6Packet::new_checked(b) else {
        return;
    };
    if let Ok(r) = Ipv6Repr::parse(&p) {
        assert_eq!(r.payload_len, p.payload().len());
    }
    let mut copy = b.to_vec();
    Ipv6Packet::new_checked(&mut copy[..])
        .expect("same bytes")
        .decrement_hop_limit();
    let Ok((nh, off)) = p.walk_extensions() else {
        return;
    };
    let end = (40 + p.payload_len() as usize).min(b.len());
    assert!(off <= end, "the walk stays inside the payload");
    let upper = &b[off..end];
    match nh {
        next_header::ICMPV6 => icmpv6(upper, p.src(), p.dst()),
        next_header::TCP => tcp(upper, p.src(), p.dst()),
        _ => {}
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    match sel % 3 {
        0 => ipv6(rest),
        1 => icmpv6(rest, SRC, DST),
        _ => tcp(rest, SRC, DST),
    }
    let _ = format::describe_ethernet(data);
});
