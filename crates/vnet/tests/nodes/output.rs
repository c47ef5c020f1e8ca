//! `interface-output`: per-interface tx counting by runs, the whole-frame path (a frame that
//! is one run, to its first packet's interface, goes on whole), a new run at every packet, and a
//! mixed frame handed on whole by `ip4-rewrite` (the handed-addresses branch).

use super::gso::{aggregate, tcp4_aggregate};
use super::*;
use sluice_vnet::interface::{counter, Interfaces};
use sluice_vnet::offload::gso_type;

/// Interface `sw`'s (tx packets, tx bytes, drops), all threads.
fn tx(t: &mut NodeTest, sw: u32) -> (u64, u64, u64) {
    let table = t.h.vm.ext_mut::<Interfaces>().counter_table.clone();
    let c = table.get(sw).expect("counters");
    (
        c.total(counter::TX_PACKETS),
        c.total(counter::TX_BYTES),
        c.total(counter::DROPS),
    )
}

/// The `tx_if` of each packet that reached `loop-tx`, in order.
fn sent(t: &NodeTest) -> Vec<u32> {
    t.arc("loop-tx").iter().map(|c| c.hdr.tx_if).collect()
}

#[test]
fn interface_output_counts_whole_frames_mixed_frames_and_down_interfaces() {
    let (mut t, a) = setup("interface-output");
    t.cli(
        "create loopback interface
         set interface state loop1 up
         create sub-interfaces loop0 100
         set interface state loop0.100 up",
    );
    let b = t.sw_if("loop1");
    let sub = t.sw_if("loop0.100");
    t.capture("loop-tx");
    t.capture("gso-segment");
    let f = udp4("10.0.0.1", "10.0.0.2");
    let len = f.len() as u64;
    let to = |t: &mut NodeTest, sw: u32| t.packet(&f, |h| h.tx_if = sw);

    // A first frame to A.
    let p = to(&mut t, a);
    t.inject(&[p]);
    assert_eq!(tx(&mut t, a), (1, len, 0));
    // Frame 1: entirely to A, one run from the start: the whole-frame path.
    let frame: Vec<_> = (0..5).map(|_| to(&mut t, a)).collect();
    t.inject(&frame);
    assert_eq!(sent(&t), [a; 6]);
    assert_eq!(tx(&mut t, a), (6, 6 * len, 0), "whole frame counted");
    assert_eq!(tx(&mut t, b), (0, 0, 0));
    t.clear();

    // Frame 2: A, A, B, A, one packet on A's sub-interface, one aggregate for A (no GSO on
    // loop0: to gso-segment, not counted here).
    let g = tcp4_aggregate(3000);
    let frame = [
        to(&mut t, a),
        to(&mut t, a),
        to(&mut t, b),
        to(&mut t, a),
        to(&mut t, sub),
        aggregate(&mut t, &g, gso_type::TCPV4, a),
    ];
    t.inject(&frame);
    // The sub-interface's packet goes out through its parent, tagged.
    assert_eq!(sent(&t), [a, a, b, a, a]);
    assert_eq!(t.arc("loop-tx")[4].data.len() as u64, len + 4);
    assert_eq!(t.arc("gso-segment").len(), 1);
    assert_eq!(tx(&mut t, a), (6 + 4, 6 * len + 4 * len + 4, 0));
    assert_eq!(tx(&mut t, b), (1, len, 0));
    assert_eq!(tx(&mut t, sub), (1, len, 0));
    t.assert_counters(&[]);
    t.clear();

    // A admin-down; frame 3 to A: dropped, tx unchanged.
    t.cli("set interface state loop0 down");
    let frame = [to(&mut t, a), to(&mut t, a)];
    t.inject(&frame);
    assert!(t.arc("loop-tx").is_empty());
    assert_eq!(
        t.drops(),
        [
            ("interface-output".to_string(), "interface_down"),
            ("interface-output".to_string(), "interface_down")
        ]
    );
    t.assert_counters(&[("interface_down", 2)]);
    assert_eq!(tx(&mut t, a), (10, 10 * len + 4, 2));
    t.assert_no_leaks();
}

#[test]
fn interface_output_counts_a_new_run_at_every_packet() {
    // Packets alternating between interfaces of two drivers (many tunnels: every packet
    // another interface): each packet ends a run and starts one in the frame loop, goes to
    // its own interface's tx node and is counted there with its own length; a down
    // interface's packet between them is dropped and ends no run. A loopback and a pg
    // interface, so a run that kept the last run's next arc sends to the wrong tx node.
    let (mut t, a) = setup("interface-output");
    t.cli(
        "create packet-generator interface pg0
         set interface state pg0 up
         create loopback interface",
    );
    let b = t.sw_if("pg0");
    let down = t.sw_if("loop1");
    t.capture("loop-tx");
    t.capture("pg-tx");
    let short = udp4("10.0.0.1", "10.0.0.2");
    let mut long = short.clone();
    long.extend_from_slice(&[0; 100]);
    let (ls, ll) = (short.len() as u64, long.len() as u64);
    let at = |t: &NodeTest, node: &str| -> Vec<(u32, usize)> {
        t.arc(node)
            .iter()
            .map(|c| (c.hdr.tx_if, c.data.len()))
            .collect()
    };
    let (s, l) = (short.len(), long.len());
    let frame = [
        t.packet(&short, |h| h.tx_if = a),
        t.packet(&long, |h| h.tx_if = b),
        t.packet(&short, |h| h.tx_if = a),
        t.packet(&long, |h| h.tx_if = b),
        t.packet(&long, |h| h.tx_if = down),
        t.packet(&long, |h| h.tx_if = b),
        t.packet(&short, |h| h.tx_if = a),
    ];
    t.inject(&frame);
    assert_eq!(at(&t, "loop-tx"), [(a, s), (a, s), (a, s)]);
    assert_eq!(at(&t, "pg-tx"), [(b, l), (b, l), (b, l)]);
    assert_eq!(tx(&mut t, a), (3, 3 * ls, 0));
    assert_eq!(tx(&mut t, b), (3, 3 * ll, 0));
    assert_eq!(tx(&mut t, down), (0, 0, 1));
    t.assert_counters(&[("interface_down", 1)]);
    t.clear();
    // The next frame: pg0, then loop0.
    let frame = [
        t.packet(&long, |h| h.tx_if = b),
        t.packet(&short, |h| h.tx_if = a),
    ];
    t.inject(&frame);
    assert_eq!(at(&t, "pg-tx"), [(b, l)]);
    assert_eq!(at(&t, "loop-tx"), [(a, s)]);
    assert_eq!(tx(&mut t, a), (4, 4 * ls, 0));
    assert_eq!(tx(&mut t, b), (4, 4 * ll, 0));
    t.assert_no_leaks();
}

/// A frame `ip4-rewrite` hands on whole, so it reaches `interface-output` with its headers'
/// addresses (`Cx::handed_frame`): four packets to A (the four-packet step), then A, B, A,
/// one to A's sub-interface (`packet`, tagged), one to a down interface, A, A. Each packet
/// goes to its own interface, counted there with its own length; the down one is dropped.
#[test]
fn interface_output_counts_a_mixed_frame_handed_on_by_rewrite() {
    let (mut t, a) = setup("interface-output");
    t.cli(&format!(
        "ip neighbor loop0 10.0.0.2 {PEER_MAC} static
         create loopback interface
         set interface state loop1 up
         set interface ip address loop1 10.0.1.1/24
         ip neighbor loop1 10.0.1.2 {PEER_MAC} static
         create sub-interfaces loop0 100
         set interface state loop0.100 up
         set interface ip address loop0.100 10.0.2.1/24
         ip neighbor loop0.100 10.0.2.2 {PEER_MAC} static
         create loopback interface
         set interface state loop2 up
         set interface ip address loop2 10.0.3.1/24
         ip neighbor loop2 10.0.3.2 {PEER_MAC} static
         set interface state loop2 down"
    ));
    let (b, sub, down) = (t.sw_if("loop1"), t.sw_if("loop0.100"), t.sw_if("loop2"));
    t.capture("loop-tx");
    let to = |dst: &str| udp4_l3("10.0.0.5", dst);
    let (pa, pb, ps, pd) = (
        to("10.0.0.2"),
        to("10.0.1.2"),
        to("10.0.2.2"),
        to("10.0.3.2"),
    );
    let order = [&pa, &pa, &pa, &pa, &pa, &pb, &pa, &ps, &pd, &pa, &pa];
    let bufs: Vec<_> = order.iter().map(|p| t.packet(p, |h| h.rx_if = a)).collect();
    t.inject_at("ip4-lookup", &bufs);
    // On the wire: the IPv4 packet behind a 14-byte Ethernet header (18 on the sub).
    let len = pa.len() as u64 + 14;
    let sent: Vec<(u32, u64)> = t
        .arc("loop-tx")
        .iter()
        .map(|c| (c.hdr.tx_if, c.data.len() as u64))
        .collect();
    let mut want = vec![(a, len); 5];
    want.extend([(b, len), (a, len), (a, len + 4), (a, len), (a, len)]);
    assert_eq!(sent, want);
    assert_eq!(tx(&mut t, a), (9, 9 * len + 4, 0));
    assert_eq!(tx(&mut t, b), (1, len, 0));
    assert_eq!(tx(&mut t, sub), (1, len, 0));
    assert_eq!(tx(&mut t, down), (0, 0, 1));
    assert_eq!(
        t.drops(),
        [("interface-output".to_string(), "interface_down")]
    );
    t.assert_counters(&[("interface_down", 1)]);
    t.assert_no_leaks();
}
