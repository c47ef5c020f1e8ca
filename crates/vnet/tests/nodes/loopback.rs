//! `loop-tx`: a loopback's frames come back in on it, unchanged.

use super::*;

#[test]
fn loop_tx_receives_every_frame_again_on_its_interface() {
    let (mut t, l0) = setup("loop-tx");
    let f = udp4("10.0.0.1", "10.0.0.2");
    let bufs = [
        t.packet(&f, |h| h.tx_if = l0),
        t.packet(&f, |h| h.tx_if = l0),
    ];
    t.inject(&bufs);
    let back = t.arc("ethernet-input");
    assert_eq!(back.len(), 2);
    assert!(back.iter().all(|p| p.hdr.rx_if == l0 && p.data == f));
    t.assert_counters(&[("looped", 2)]);
    t.assert_no_leaks();
}
