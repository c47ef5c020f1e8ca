//! ARP (`ArpRepr::parse`) and its `show trace` decode on arbitrary bytes: what parses
//! re-emits to bytes that parse to the same thing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_wire::arp::{ArpRepr, LEN};
use sluice_wire::format;

fuzz_target!(|data: &[u8]| {
    let mut s = String::new();
    format::describe_arp(data, &mut s);
    if let Ok(a) = ArpRepr::parse(data) {
        let _ = (a.op, a.sha.to_string(), a.spa, a.tha.to_string(), a.tpa);
        let mut b = [0u8; LEN];
        a.emit(&mut b);
        assert_eq!(ArpRepr::parse(&b), Ok(a));
    }
});
