//! ICMPv4 (`IcmpPacket::new_checked` and its accessors) on arbitrary bytes: a message whose
//! checksum is filled verifies.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_wire::icmp::IcmpPacket;

fuzz_target!(|data: &[u8]| {
    let Ok(p) = IcmpPacket::new_checked(data) else {
        return;
    };
    let (kind, code, _) = (p.kind(), p.code(), p.verify_checksum());
    let mut copy = data.to_vec();
    let mut m = IcmpPacket::new_checked(&mut copy[..]).expect("same bytes");
    m.set_kind_code(kind ^ 8, code);
    m.fill_checksum();
    assert!(m.verify_checksum());
    assert_eq!((m.kind(), m.code()), (kind ^ 8, code));
});
