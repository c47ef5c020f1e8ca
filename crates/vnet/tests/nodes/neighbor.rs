//! `ip4-neighbor-process`: neighbours learned by `arp-input` applied to the table, stale ones
//! probed (unicast ARP request to `interface-output`) and then removed. The process runs from
//! the dispatcher loop; waits are bounded, not speed checks.

use super::arp::arp;
use super::*;
use sluice_vnet::ip4::Ip4Control;
use sluice_vnet::ip_family::neighbors;
use sluice_wire::arp::{op, ArpRepr};
use sluice_wire::Mac;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Runs the dispatcher until `done` holds; fails naming `what` after 10 s.
fn run_until(t: &mut NodeTest, what: &str, done: impl Fn(&mut NodeTest) -> bool) {
    let until = Instant::now() + Duration::from_secs(10);
    while !done(t) {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        t.vm.main.run_once();
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn ip4_neighbor_process_applies_learned_neighbours_then_probes_and_expires_them() {
    let (mut t, sw) = setup("ip4-neighbor-process");
    t.cli("set ip neighbor-config ip4 age 1");
    let peer: IpAddr = "10.0.0.2".parse().unwrap_or_else(|e| panic!("{e}"));
    let b = t.packet(&arp(op::REQUEST, "10.0.0.2", "10.0.0.1"), |h| h.rx_if = sw);
    t.inject_at("arp-input", &[b]);
    assert_eq!(t.arc("interface-output").len(), 1, "arp-input's reply");
    t.clear();
    assert!(
        neighbors::<Ip4Control>(&mut t.vm).is_empty(),
        "not before the process ran"
    );
    run_until(&mut t, "learned", |t| t.counter("learned") == 1);
    assert_eq!(
        neighbors::<Ip4Control>(&mut t.vm),
        [(sw, peer, [2, 0, 0, 0, 0, 2], false)]
    );
    // Stale after 1 s: one unicast probe, then removed.
    run_until(&mut t, "a probe", |t| t.counter("probes_sent") == 1);
    let probe = t.arc("interface-output");
    assert_eq!(probe.len(), 1);
    assert_eq!(probe[0].hdr.tx_if, sw);
    let d = &probe[0].data;
    assert_eq!(&d[0..6], &[2, 0, 0, 0, 0, 2], "unicast to the neighbour");
    let r = ArpRepr::parse(&d[14..]).unwrap_or_else(|e| panic!("probe: {e:?}"));
    assert_eq!((r.op, r.sha), (op::REQUEST, Mac([2, 0, 0, 0, 0, 1])));
    assert_eq!(
        (r.spa.to_string(), r.tpa.to_string()),
        ("10.0.0.1".into(), "10.0.0.2".into())
    );
    run_until(&mut t, "expiry", |t| {
        neighbors::<Ip4Control>(&mut t.vm).is_empty()
    });
    assert_eq!(t.arc("interface-output").len(), 1, "one probe only");
    t.assert_counters(&[("learned", 1), ("probes_sent", 1)]);
    t.assert_no_leaks();
}
