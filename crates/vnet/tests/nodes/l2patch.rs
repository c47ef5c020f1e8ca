//! `l2-patch`: patched interfaces to their peer, the others dropped.

use super::*;

#[test]
fn patch_sends_to_the_peer_and_drops_unpatched() {
    let (mut t, l0) = setup("l2-patch");
    t.cli(
        "create loopback interface
         set interface state loop1 up
         test l2patch rx loop0 tx loop1",
    );
    let l1 = t.sw_if("loop1");
    let f = udp4("10.0.0.2", "10.0.0.3");
    let bufs = [
        t.packet(&f, |h| h.rx_if = l0),
        t.packet(&f, |h| h.rx_if = l0),
        t.packet(&f, |h| h.rx_if = l1),
    ];
    t.inject(&bufs);
    let out = t.arc("interface-output");
    assert_eq!(out.len(), 2);
    assert!(out.iter().all(|p| p.hdr.tx_if == l1));
    assert_eq!(out[0].data, f, "unchanged");
    assert_eq!(t.arc("error-drop").len(), 1, "loop1 has no patch");
    t.assert_counters(&[("patched", 2), ("no_patch", 1)]);
    t.assert_no_leaks();
}
