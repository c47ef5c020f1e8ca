//! `arp-input`: replies for our addresses, learning, gratuitous ARP, malformed packets.

use super::*;
use sluice_wire::arp::{op, ArpRepr, LEN};
use sluice_wire::Mac;

pub(super) fn arp(op: u16, spa: &str, tpa: &str) -> Vec<u8> {
    let mut b = vec![0u8; LEN];
    ArpRepr {
        op,
        sha: Mac([2, 0, 0, 0, 0, 2]),
        spa: spa.parse().unwrap(),
        tha: Mac([0; 6]),
        tpa: tpa.parse().unwrap(),
    }
    .emit(&mut b);
    b
}

#[test]
fn request_for_our_address_is_answered_in_place() {
    let (mut t, sw) = setup("arp-input");
    t.run_with(&[arp(op::REQUEST, "10.0.0.2", "10.0.0.1")], |h| {
        h.rx_if = sw
    });
    let out = t.arc("interface-output");
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].hdr.tx_if, sw);
    let d = &out[0].data;
    assert_eq!(d.len(), 14 + LEN);
    assert_eq!(&d[0..6], &[2, 0, 0, 0, 0, 2], "to the asker");
    assert_eq!(&d[6..12], &[2, 0, 0, 0, 0, 1], "from our MAC");
    assert_eq!(&d[12..14], &[0x08, 0x06]);
    let r = ArpRepr::parse(&d[14..]).unwrap();
    assert_eq!(r.op, op::REPLY);
    assert_eq!(r.sha, Mac([2, 0, 0, 0, 0, 1]));
    assert_eq!(r.spa.to_string(), "10.0.0.1");
    assert_eq!(r.tha, Mac([2, 0, 0, 0, 0, 2]));
    assert_eq!(r.tpa.to_string(), "10.0.0.2");
    t.assert_counters(&[("replies_sent", 1)]);
    t.assert_no_leaks();
}

#[test]
fn other_packets_are_consumed_with_a_reason() {
    let (mut t, sw) = setup("arp-input");
    let mut bad_htype = arp(op::REQUEST, "10.0.0.2", "10.0.0.1");
    bad_htype[1] = 6;
    t.run_with(
        &[
            arp(op::REQUEST, "10.0.0.2", "10.0.0.77"),
            arp(op::REPLY, "10.0.0.2", "10.0.0.1"),
            arp(op::REQUEST, "10.0.0.2", "10.0.0.2"),
            bad_htype,
            vec![0; 10],
        ],
        |h| h.rx_if = sw,
    );
    assert!(t.arc("interface-output").is_empty());
    assert_eq!(
        t.drops().iter().map(|d| d.1).collect::<Vec<_>>(),
        [
            "not_for_us",
            "replies_received",
            "gratuitous",
            "malformed",
            "malformed"
        ]
    );
    t.assert_counters(&[
        ("not_for_us", 1),
        ("replies_received", 1),
        ("gratuitous", 1),
        ("malformed", 2),
    ]);
    t.assert_no_leaks();
}

#[test]
fn address_of_another_interface_is_not_ours() {
    let (mut t, sw) = setup("arp-input");
    t.cli(
        "create loopback interface
         set interface state loop1 up
         set interface ip address loop1 10.9.0.1/24",
    );
    t.run_with(&[arp(op::REQUEST, "10.0.0.2", "10.9.0.1")], |h| {
        h.rx_if = sw
    });
    t.assert_counters(&[("not_for_us", 1)]);
    t.assert_no_leaks();
}

#[test]
fn group_sender_mac_is_neither_learned_nor_answered() {
    let (mut t, sw) = setup("arp-input");
    let mut bc = arp(op::REQUEST, "10.0.0.2", "10.0.0.1");
    bc[8..14].copy_from_slice(&[0xff; 6]);
    let mut mc = arp(op::REPLY, "10.0.0.3", "10.0.0.1");
    mc[8..14].copy_from_slice(&[0x01, 0x00, 0x5e, 0, 0, 1]);
    t.run_with(&[bc, mc], |h| h.rx_if = sw);
    assert!(t.arc("interface-output").is_empty());
    let shared = sluice_vnet::ip4::shared(&mut t.h.vm).unwrap();
    assert!(shared.learned.lock().unwrap().is_empty(), "nothing learned");
    t.assert_counters(&[("group_sender_mac", 2)]);
    t.assert_no_leaks();
}

#[test]
fn probe_for_our_address_is_answered_not_learned() {
    let (mut t, sw) = setup("arp-input");
    t.run_with(&[arp(op::REQUEST, "0.0.0.0", "10.0.0.1")], |h| h.rx_if = sw);
    assert_eq!(t.arc("interface-output").len(), 1, "the probe is answered");
    let shared = sluice_vnet::ip4::shared(&mut t.h.vm).unwrap();
    assert!(
        shared.learned.lock().unwrap().is_empty(),
        "0.0.0.0 not learned"
    );
    t.assert_counters(&[("replies_sent", 1)]);
    t.assert_no_leaks();
}
