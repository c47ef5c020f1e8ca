//! ICMPv6 with Neighbor Discovery on arbitrary bytes: every accessor, every option the
//! option iterator yields (each known option re-emits to bytes that parse to the same
//! option), `NdiscRepr` parse → emit → parse, and checksum fill → verify.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_wire::icmpv6::Icmpv6Packet;
use std::net::Ipv6Addr;

#[path = "common/ndisc.rs"]
mod ndisc;

const SRC: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);
const DST: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 1, 0xff00);

fuzz_target!(|data: &[u8]| {
    let Ok(p) = Icmpv6Packet::new_checked(data) else {
        return;
    };
    let _ = (
        p.kind(),
        p.code(),
        p.checksum(),
        p.echo_ident(),
        p.echo_seq(),
    );
    let _ = (p.mtu(), p.pointer(), p.data().len());
    let _ = (p.verify_checksum(SRC, DST), p.compute_checksum(SRC, DST));
    ndisc::check(&p, SRC, DST);
    let mut copy = data.to_vec();
    let mut m = Icmpv6Packet::new_checked(&mut copy[..]).expect("same bytes");
    m.fill_checksum(SRC, DST);
    assert!(m.verify_checksum(SRC, DST));
});
