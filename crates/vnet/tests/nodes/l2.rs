//! `l2-input`: cross-connect, bridging (flood, forward, filter), learning events.

use super::*;
use sluice_buffer::BufIdx;

/// loop0 (from `setup`), loop1 and loop2 up; `l2-input` under test.
pub(super) fn three_ports() -> (NodeTest, [u32; 3]) {
    let (mut t, l0) = setup("l2-input");
    t.cli(
        "create loopback interface
         create loopback interface
         set interface state loop1 up
         set interface state loop2 up",
    );
    let (l1, l2) = (t.sw_if("loop1"), t.sw_if("loop2"));
    (t, [l0, l1, l2])
}

/// Frames received on `rx` with the L2 metadata `ethernet-input` sets: bridge domain `bd`
/// (0: cross-connected to `tx`).
pub(super) fn receive(t: &mut NodeTest, rx: u32, bd: u16, tx: u32, frames: &[Vec<u8>]) {
    let bufs: Vec<BufIdx> = frames
        .iter()
        .map(|f| {
            t.packet(f, |h| {
                h.rx_if = rx;
                h.tx_if = tx;
                h.l2.bd_index = bd;
            })
        })
        .collect();
    t.inject(&bufs);
}

pub(super) fn frame(dst: [u8; 6], src: [u8; 6]) -> Vec<u8> {
    let mut f = udp4("10.0.0.2", "10.0.0.3");
    f[0..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f
}

pub(super) const A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
pub(super) const B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];

#[test]
fn xconnect_sends_every_frame_to_the_peer() {
    let (mut t, [l0, l1, _]) = three_ports();
    t.cli("set interface l2 xconnect loop0 loop1");
    receive(&mut t, l0, 0, l1, &[frame(B, A), frame([0xff; 6], A)]);
    let out = t.arc("interface-output");
    assert_eq!(out.len(), 2);
    assert!(out.iter().all(|p| p.hdr.tx_if == l1));
    assert_eq!(out[0].data, frame(B, A), "unchanged");
    t.assert_counters(&[("xconnect", 2)]);
    t.assert_no_leaks();
}

#[test]
fn bridge_floods_broadcast_to_every_other_member_and_learns() {
    let (mut t, [l0, l1, l2]) = three_ports();
    t.cli(
        "set interface l2 bridge loop0 1
         set interface l2 bridge loop1 1
         set interface l2 bridge loop2 1",
    );
    receive(&mut t, l0, 1, 0, &[frame([0xff; 6], A)]);
    let mut tx: Vec<u32> = t
        .arc("interface-output")
        .iter()
        .map(|p| p.hdr.tx_if)
        .collect();
    tx.sort();
    assert_eq!(tx, [l1, l2], "a copy and the original");
    t.assert_counters(&[("flooded", 1), ("learn_events", 1)]);
    t.assert_no_leaks();
}

#[test]
fn bridge_forwards_to_a_known_mac_and_filters_hairpins() {
    let (mut t, [l0, l1, _]) = three_ports();
    t.cli(
        "set interface l2 bridge loop0 1
         set interface l2 bridge loop1 1
         set interface l2 bridge loop2 1
         l2fib add 02:00:00:00:00:0b 1 loop1 static
         l2fib add 02:00:00:00:00:0a 1 loop0 static",
    );
    receive(&mut t, l0, 1, 0, &[frame(B, A), frame(A, A)]);
    let out = t.arc("interface-output");
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].hdr.tx_if, l1);
    assert_eq!(t.drops(), [("l2-input".to_string(), "filtered")]);
    t.assert_counters(&[("forwarded", 1), ("filtered", 1)]);
    t.assert_no_leaks();
}

#[test]
fn unknown_bridge_and_runts_are_dropped() {
    let (mut t, [l0, _, _]) = three_ports();
    t.cli("set interface l2 bridge loop0 1");
    receive(&mut t, l0, 1, 0, &[vec![0xff; 10]]);
    receive(&mut t, l0, 9, 0, &[frame(B, A)]);
    t.assert_counters(&[("runt", 1), ("no_member", 1)]);
    t.assert_no_leaks();
}
