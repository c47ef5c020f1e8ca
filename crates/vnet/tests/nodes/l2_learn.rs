//! `l2-learn-process`: learning events from `l2-input` in, L2 FIB entries out. `l2-input` is
//! the node under test (its outputs captured, so flooded frames go nowhere); the process runs
//! for real from the dispatcher loop. Aging by the process is not driven here (it needs
//! minutes of clock; `test l2fib age` covers the aging pass itself).

use super::l2::{frame, receive, three_ports, A, B};
use super::*;
use sluice_vnet::l2;

/// Runs the dispatcher until `l2-learn-process` has taken `n` events in total.
fn learn(t: &mut NodeTest, n: u64) {
    run_until(t, &format!("l2-learn-process to take {n} events"), |t| {
        t.counter_of(l2::LEARN_PROCESS, "learned") >= n
    });
    assert_eq!(t.counter_of(l2::LEARN_PROCESS, "learned"), n);
    assert_eq!(t.counter_of(l2::LEARN_PROCESS, "aged"), 0);
}

/// Bridge domain 1 with loop0..loop2 as members.
fn bridged() -> (NodeTest, [u32; 3], u16) {
    let (mut t, ports) = three_ports();
    t.cli(
        "set interface l2 bridge loop0 1
         set interface l2 bridge loop1 1
         set interface l2 bridge loop2 1",
    );
    let bd = l2::bd_id(1).unwrap_or_else(|e| panic!("bd 1: {e}"));
    (t, ports, bd)
}

#[test]
fn learned_sources_become_l2fib_entries_that_l2_input_forwards_to() {
    let (mut t, [l0, l1, _], bd) = bridged();
    receive(&mut t, l0, bd, 0, &[frame([0xff; 6], A)]);
    receive(&mut t, l1, bd, 0, &[frame([0xff; 6], B)]);
    assert!(
        l2::l2fib_entries(&mut t.vm, None).is_empty(),
        "not before the process ran"
    );
    learn(&mut t, 2);
    assert_eq!(
        l2::l2fib_entries(&mut t.vm, None),
        [(A, bd, l0, false), (B, bd, l1, false)]
    );
    // l2-input now forwards to the learned MAC instead of flooding.
    t.clear();
    receive(&mut t, l1, bd, 0, &[frame(A, B)]);
    let out = t.arc("interface-output");
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].hdr.tx_if, l0);
    t.assert_counters(&[("flooded", 2), ("learn_events", 2), ("forwarded", 1)]);
    t.assert_no_leaks();
}

#[test]
fn a_moved_mac_follows_its_new_interface_and_static_entries_win() {
    let (mut t, [l0, l1, l2], bd) = bridged();
    receive(
        &mut t,
        l0,
        bd,
        0,
        &[frame([0xff; 6], A), frame([0xff; 6], B)],
    );
    // A becomes static while its learning event is queued: the process leaves it alone.
    t.cli("l2fib add 02:00:00:00:00:0a 1 loop2 static");
    learn(&mut t, 2);
    assert_eq!(
        l2::l2fib_entries(&mut t.vm, None),
        [(A, bd, l2, true), (B, bd, l0, false)]
    );
    // B moves to loop1.
    receive(&mut t, l1, bd, 0, &[frame([0xff; 6], B)]);
    learn(&mut t, 3);
    assert_eq!(
        l2::l2fib_entries(&mut t.vm, None),
        [(A, bd, l2, true), (B, bd, l1, false)]
    );
    t.assert_counters(&[("flooded", 3), ("learn_events", 3)]);
    t.assert_no_leaks();
}
