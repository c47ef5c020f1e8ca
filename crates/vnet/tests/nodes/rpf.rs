//! `ip4-source-check-via-rx` and `ip6-source-check-via-rx`: strict uRPF on the rx interface.

use super::*;

#[test]
fn source_check_passes_only_sources_routed_back_through_the_rx_interface() {
    let (mut t, l0) = setup("ip4-source-check-via-rx");
    t.cli(
        "create loopback interface
         set interface state loop1 up
         set interface ip address loop1 10.1.0.1/24
         set interface feature loop0 ip4-source-check-via-rx arc ip4-unicast",
    );
    let pkts = [
        udp4_l3("10.0.0.2", "10.1.0.2"),  // back through loop0: passes
        udp4_l3("10.1.0.5", "10.0.0.2"),  // back through loop1: wrong interface
        udp4_l3("192.0.2.1", "10.0.0.2"), // no route back
    ];
    let bufs: Vec<_> = pkts.iter().map(|p| t.packet(p, |h| h.rx_if = l0)).collect();
    t.inject(&bufs);
    let passed = t.arc("ip4-lookup");
    assert_eq!(passed.len(), 1);
    assert_eq!(passed[0].data, pkts[0]);
    assert_eq!(t.arc("error-drop").len(), 2);
    t.assert_counters(&[("passed", 1), ("wrong_interface", 1), ("no_route", 1)]);
    t.assert_no_leaks();
}

#[test]
fn ip6_source_check_passes_sources_routed_back_through_rx_and_link_locals() {
    let (mut t, l0) = setup("ip6-source-check-via-rx");
    t.cli(
        "create loopback interface
         set interface state loop1 up
         set interface ip address loop1 2001:db8:1::1/64
         set interface feature loop0 ip6-source-check-via-rx arc ip6-unicast",
    );
    let pkts = [
        udp6_l3("2001:db8::2", "2001:db8:1::2"), // back through loop0: passes
        udp6_l3("fe80::2", "2001:db8:1::2"),     // link-local: exempt, passes
        udp6_l3("2001:db8:1::5", "2001:db8::2"), // back through loop1: wrong interface
        udp6_l3("2001:db8:ff::1", "2001:db8::2"), // no route back
    ];
    let bufs: Vec<_> = pkts.iter().map(|p| t.packet(p, |h| h.rx_if = l0)).collect();
    t.inject(&bufs);
    let passed = t.arc("ip6-lookup");
    assert_eq!(passed.len(), 2);
    assert_eq!(passed[0].data, pkts[0]);
    assert_eq!(passed[1].data, pkts[1]);
    assert_eq!(
        t.drops(),
        [
            ("ip6-source-check-via-rx".to_string(), "wrong_interface"),
            ("ip6-source-check-via-rx".to_string(), "no_route"),
        ]
    );
    t.assert_counters(&[("passed", 2), ("wrong_interface", 1), ("no_route", 1)]);
    t.assert_no_leaks();
}
