//! The `l2-output` feature arc (`l2-input` to `interface-output`, keyed by tx interface):
//! there is no `l2-output` node; the arc's nodes are `l2-input` (its start) and its counter
//! feature `l2-output-count`.

use super::l2::{frame, receive, three_ports, A};
use super::*;
use sluice_vnet::feature::{self, L2_OUTPUT};

/// Packets and bytes `l2-output-count` counted on `sw_if`.
fn counts(t: &mut NodeTest, sw_if: u32) -> (u64, u64) {
    let reg = feature::registry(&mut t.vm);
    let arc = reg
        .arc(L2_OUTPUT)
        .unwrap_or_else(|| panic!("no arc {L2_OUTPUT}"));
    feature::counts(&mut t.vm, arc, sw_if)
}

#[test]
fn l2_output_count_counts_per_tx_interface_and_ends_at_interface_output() {
    let (mut t, _) = setup("l2-output-count");
    t.cli(
        "create loopback interface
         create loopback interface
         set interface state loop1 up
         set interface state loop2 up
         set interface feature loop1 l2-output-count arc l2-output
         set interface feature loop2 l2-output-count arc l2-output",
    );
    let (l1, l2) = (t.sw_if("loop1"), t.sw_if("loop2"));
    let f = frame(A, A);
    let bufs = [
        t.packet(&f, |h| h.tx_if = l1),
        t.packet(&f, |h| h.tx_if = l2),
        t.packet(&f, |h| h.tx_if = l1),
    ];
    t.inject(&bufs);
    let tx: Vec<u32> = t
        .arc("interface-output")
        .iter()
        .map(|p| p.hdr.tx_if)
        .collect();
    assert_eq!(tx, [l1, l2, l1]);
    assert_eq!(t.arc("interface-output")[0].data, f, "unchanged");
    let n = f.len() as u64;
    assert_eq!(counts(&mut t, l1), (2, 2 * n));
    assert_eq!(counts(&mut t, l2), (1, n));
    t.assert_counters(&[]);
    t.assert_no_leaks();
}

#[test]
fn l2_input_hands_frames_to_the_tx_interfaces_l2_output_features() {
    let (mut t, [l0, l1, l2]) = three_ports();
    t.cli(
        "set interface l2 bridge loop0 1
         set interface l2 bridge loop1 1
         set interface l2 bridge loop2 1
         set interface feature loop1 l2-output-count arc l2-output",
    );
    t.capture("l2-output-count");
    receive(&mut t, l0, 1, 0, &[frame([0xff; 6], A)]);
    let feat: Vec<u32> = t
        .arc("l2-output-count")
        .iter()
        .map(|p| p.hdr.tx_if)
        .collect();
    let out: Vec<u32> = t
        .arc("interface-output")
        .iter()
        .map(|p| p.hdr.tx_if)
        .collect();
    assert_eq!(feat, [l1], "loop1 has an l2-output feature");
    assert_eq!(out, [l2], "loop2 has none");
    t.assert_counters(&[("flooded", 1), ("learn_events", 1)]);
    t.assert_no_leaks();
}
