//! TCP (`TcpPacket::new_checked`, `TcpRepr::parse`, the options iterator) on arbitrary
//! bytes: header and payload lengths add up, `TcpRepr` emit → parse round-trips (without
//! options), checksum fill → verify over IPv4 and IPv6.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_wire::tcp::{TcpPacket, TcpRepr};
use std::net::{Ipv4Addr, Ipv6Addr};

const SRC4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const DST4: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 1);
const SRC6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
const DST6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);

fuzz_target!(|data: &[u8]| {
    let Ok(t) = TcpPacket::new_checked(data) else {
        return;
    };
    let _ = (
        t.src_port(),
        t.dst_port(),
        t.seq_number(),
        t.ack_number(),
        t.window(),
    );
    let _ = (
        t.checksum(),
        t.urgent_ptr(),
        t.data_offset(),
        t.flags().to_string(),
    );
    let _ = (
        t.verify_checksum_v4(SRC4, DST4),
        t.verify_checksum_v6(SRC6, DST6),
    );
    for o in t.options_iter() {
        let _ = o;
    }
    let Ok(r) = TcpRepr::parse(&t) else {
        return;
    };
    assert_eq!(t.header_len() + r.payload_len, data.len());
    let mut b = vec![0u8; r.buffer_len()];
    b[r.header_len()..].copy_from_slice(t.payload());
    let mut m = TcpPacket::new_unchecked(&mut b[..]);
    r.emit(&mut m);
    m.fill_checksum_v4(SRC4, DST4);
    assert!(m.verify_checksum_v4(SRC4, DST4));
    m.fill_checksum_v6(SRC6, DST6);
    assert!(m.verify_checksum_v6(SRC6, DST6));
    let back = TcpPacket::new_checked(&b[..]).expect("emitted segment parses");
    assert_eq!(TcpRepr::parse(&back), Ok(r));
});
