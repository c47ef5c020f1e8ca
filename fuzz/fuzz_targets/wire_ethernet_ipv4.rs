//! Ethernet, VLAN tags, ARP, IPv4, UDP and ICMP parsing plus the `show trace` decode, on
//! arbitrary frames. Beyond "never panics" it checks the invariants the views promise:
//! payload lengths agree with the `Repr`s, emit/parse round-trips, and the incremental TTL
//! update keeps a valid checksum valid.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_wire::arp::ArpRepr;
use sluice_wire::ethernet::{parse_tags, EthernetFrame, EthernetRepr};
use sluice_wire::format;
use sluice_wire::icmp::IcmpPacket;
use sluice_wire::ipv4::{Ipv4Packet, Ipv4Repr};
use sluice_wire::udp::{UdpPacket, UdpRepr};

fn ipv4(l3: &[u8]) {
    let Ok(ip) = Ipv4Packet::new_checked(l3) else {
        return;
    };
    let valid = ip.verify_checksum();
    let _ = (ip.compute_checksum(), ip.frag_offset(), ip.is_fragment());
    if let Ok(r) = Ipv4Repr::parse(&ip) {
        assert_eq!(r.payload_len, ip.payload().len());
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut Ipv4Packet::new_unchecked(&mut b[..]));
        let back = Ipv4Packet::new_checked(&b[..]).expect("emitted header parses");
        assert!(back.verify_checksum());
        assert_eq!(Ipv4Repr::parse(&back), Ok(r));
    }
    let mut copy = l3.to_vec();
    let mut m = Ipv4Packet::new_checked(&mut copy[..]).expect("same bytes");
    m.decrement_ttl();
    if valid {
        assert!(
            m.verify_checksum(),
            "RFC 1624 update keeps the checksum valid"
        );
    }
    let l4 = ip.payload();
    if let Ok(u) = UdpPacket::new_checked(l4) {
        let _ = u.verify_checksum_v4(ip.src(), ip.dst());
        if let Ok(r) = UdpRepr::parse(&u) {
            assert_eq!(r.payload_len, u.payload().len());
        }
    }
    if let Ok(i) = IcmpPacket::new_checked(l4) {
        let _ = (i.kind(), i.code(), i.verify_checksum());
    }
}

fuzz_target!(|data: &[u8]| {
    let _ = format::describe_ethernet(data);
    let mut s = String::new();
    format::describe_ipv4(data, &mut s);
    format::describe_arp(data, &mut s);

    if let Ok(f) = EthernetFrame::new_checked(data) {
        let r = EthernetRepr::parse(&f);
        assert_eq!(r.ethertype, f.ethertype());
    }
    let l3 = match parse_tags(data) {
        Ok(t) => data.get(t.l3_offset..).expect("l3 offset within the frame"),
        Err(_) => data,
    };
    if let Ok(a) = ArpRepr::parse(l3) {
        let mut b = [0u8; sluice_wire::arp::LEN];
        a.emit(&mut b);
        assert_eq!(ArpRepr::parse(&b), Ok(a));
    }
    ipv4(l3);
    // Raw IPv4 too (tun-style input, and a shorter path for the fuzzer).
    ipv4(data);
});
