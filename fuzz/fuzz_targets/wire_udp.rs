//! UDP (`UdpPacket::new_checked`, `UdpRepr::parse`) on arbitrary bytes: the length field
//! agrees with the payload, `UdpRepr` emit → parse round-trips, checksum fill → verify.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_wire::udp::{UdpPacket, UdpRepr};
use std::net::Ipv4Addr;

const SRC: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const DST: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 1);

fuzz_target!(|data: &[u8]| {
    let Ok(u) = UdpPacket::new_checked(data) else {
        return;
    };
    let _ = (
        u.src_port(),
        u.dst_port(),
        u.len(),
        u.checksum(),
        u.payload().len(),
    );
    let _ = u.verify_checksum_v4(SRC, DST);
    let Ok(r) = UdpRepr::parse(&u) else {
        return;
    };
    assert_eq!(r.payload_len, u.payload().len());
    let mut b = vec![0u8; r.buffer_len()];
    b[8..].copy_from_slice(u.payload());
    let mut m = UdpPacket::new_checked(&mut b[..]).expect("header fits");
    r.emit(&mut m);
    m.fill_checksum_v4(SRC, DST);
    assert!(m.verify_checksum_v4(SRC, DST));
    let back = UdpPacket::new_checked(&b[..]).expect("emitted datagram parses");
    assert_eq!(UdpRepr::parse(&back), Ok(r));
});
