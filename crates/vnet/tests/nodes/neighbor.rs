//! `ip4-neighbor-process` / `ip6-neighbor-process`: neighbours learned by `arp-input` /
//! `ip6-local` applied to the table, stale ones probed (unicast ARP request / neighbor
//! solicitation to `interface-output`) and then removed. The process runs from
//! the dispatcher loop; waits are bounded, not speed checks.

use super::arp::arp;
use super::ip6::nd6;
use super::*;
use sluice_vnet::ip4::Ip4Control;
use sluice_vnet::ip6::Ip6Control;
use sluice_vnet::ip_family::{neighbors, IpControl};
use sluice_wire::arp::{op, ArpRepr};
use sluice_wire::icmpv6::NdiscRepr;
use sluice_wire::Mac;
use std::net::IpAddr;

/// The life of one neighbour in family `C`'s process (node under test `node`, aging set by
/// `age_cmd`): `learn` (a packet for `at`, which answers it) teaches `peer` (PEER_MAC);
/// the process applies it, probes it once with a frame `probe_ok` accepts, then removes it.
fn learn_probe_expire<C: IpControl>(
    node: &str,
    age_cmd: &str,
    at: &str,
    learn: Vec<u8>,
    peer: &str,
    probe_ok: impl Fn(&[u8]),
) {
    let (mut t, sw) = setup(node);
    t.cli(age_cmd);
    let peer: IpAddr = peer.parse().unwrap_or_else(|e| panic!("{e}"));
    let b = t.packet(&learn, |h| h.rx_if = sw);
    t.inject_at(at, &[b]);
    assert_eq!(t.arc("interface-output").len(), 1, "{at}'s reply");
    t.clear();
    assert!(
        neighbors::<C>(&mut t.vm).is_empty(),
        "not before the process ran"
    );
    run_until(&mut t, "learned", |t| t.counter("learned") == 1);
    assert_eq!(
        neighbors::<C>(&mut t.vm),
        [(sw, peer, [2, 0, 0, 0, 0, 2], false)]
    );
    // Stale after 1 s: one unicast probe, then removed.
    run_until(&mut t, "a probe", |t| t.counter("probes_sent") == 1);
    let probe = t.arc("interface-output");
    assert_eq!(probe.len(), 1);
    assert_eq!(probe[0].hdr.tx_if, sw);
    assert_eq!(
        &probe[0].data[0..6],
        &[2, 0, 0, 0, 0, 2],
        "unicast to the neighbour"
    );
    probe_ok(&probe[0].data);
    run_until(&mut t, "expiry", |t| neighbors::<C>(&mut t.vm).is_empty());
    assert_eq!(t.arc("interface-output").len(), 1, "one probe only");
    t.assert_counters(&[("learned", 1), ("probes_sent", 1)]);
    t.assert_no_leaks();
}

#[test]
fn ip4_neighbor_process_applies_learned_neighbours_then_probes_and_expires_them() {
    learn_probe_expire::<Ip4Control>(
        "ip4-neighbor-process",
        "set ip neighbor-config ip4 age 1",
        "arp-input",
        arp(op::REQUEST, "10.0.0.2", "10.0.0.1"),
        "10.0.0.2",
        |d| {
            let r = ArpRepr::parse(&d[14..]).unwrap_or_else(|e| panic!("probe: {e:?}"));
            assert_eq!((r.op, r.sha), (op::REQUEST, Mac([2, 0, 0, 0, 0, 1])));
            assert_eq!(
                (r.spa.to_string(), r.tpa.to_string()),
                ("10.0.0.1".into(), "10.0.0.2".into())
            );
        },
    );
}

#[test]
fn ip6_neighbor_process_applies_learned_neighbours_then_probes_and_expires_them() {
    let ns = nd6(
        "2001:db8::2",
        "ff02::1:ff00:1",
        NdiscRepr::NeighborSolicit {
            target: "2001:db8::1".parse().unwrap_or_else(|e| panic!("{e}")),
            lladdr: Some(Mac([2, 0, 0, 0, 0, 2])),
        },
    );
    learn_probe_expire::<Ip6Control>(
        "ip6-neighbor-process",
        "set ip neighbor-config ip6 age 1",
        "ip6-local",
        ns,
        "2001:db8::2",
        |d| {
            assert_eq!(&d[12..14], &[0x86, 0xdd]);
            let dst: std::net::Ipv6Addr = "2001:db8::2".parse().unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(&d[14 + 24..14 + 40], &dst.octets(), "unicast NS");
            assert_eq!(d[14 + 40], 135, "neighbor solicitation");
        },
    );
}
