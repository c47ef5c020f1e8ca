//! End-to-end L2 bridging through the real daemon: flooding, learning, forwarding, MAC move,
//! unknown-unicast control, static entries.

#[path = "common/mod.rs"]
mod common;

use common::*;
use std::time::{Duration, Instant};

const A: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 1];
const B: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 2];
const C: [u8; 6] = [0x02, 0xcc, 0, 0, 0, 3];

fn frame(dst: [u8; 6], src: [u8; 6], tag: u8) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x88, 0xb5]);
    f.extend_from_slice(&[tag; 46]);
    f
}

fn tx(d: &Daemon, intf: &str) -> u64 {
    d.ok(&format!("show interface {intf}"))
        .lines()
        .find(|l| l.contains("tx packets"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Sends frames into `src` and waits until the stream is done.
fn inject(d: &Daemon, name: &str, src: &str, frames: &[Vec<u8>]) {
    let f = d.dir.join(format!("{name}.pcap"));
    write_pcap(&f, frames);
    d.ok(&format!(
        "packet-generator new pcap {} source {src} name {name}",
        f.display()
    ));
    d.ok(&format!("packet-generator enable {name}"));
    wait_streams_done(d);
    std::thread::sleep(Duration::from_millis(50));
}

fn wait_l2fib(d: &Daemon, needle: &str) -> String {
    let t0 = Instant::now();
    loop {
        let s = d.ok("show l2fib");
        if s.contains(needle) {
            return s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{needle} not in:\n{s}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn bridge_floods_learns_forwards_and_tracks_moves() {
    let d = Daemon::start("bridge", "");
    for c in [
        "create packet-generator interface pg0",
        "create packet-generator interface pg1",
        "create packet-generator interface pg2",
        "set interface state pg0 up",
        "set interface state pg1 up",
        "set interface state pg2 up",
        "create bridge-domain 1",
        "set interface l2 bridge pg0 1",
        "set interface l2 bridge pg1 1",
        "set interface l2 bridge pg2 1",
    ] {
        d.ok(c);
    }
    // (As VPP, a missing bridge domain is created by `set interface l2 bridge`.)
    assert!(d
        .cli("set interface l2 bridge pg0 70000")
        .unwrap_err()
        .contains("bridge-domain id 0..65534 expected, got `70000'"));
    assert!(d.ok("show bridge-domain 1 detail").contains("pg2"));
    // Unknown destination: flooded to pg1 and pg2, not back to pg0.
    let c1 = d.dir.join("f1.pcap");
    let c2 = d.dir.join("f2.pcap");
    d.ok(&format!(
        "packet-generator capture pg1 pcap {} count 1",
        c1.display()
    ));
    d.ok(&format!(
        "packet-generator capture pg2 pcap {} count 1",
        c2.display()
    ));
    let f = frame(B, A, 1);
    inject(&d, "s1", "pg0", std::slice::from_ref(&f));
    assert_eq!(wait_pcap(&c1, 1)[0], f);
    assert_eq!(wait_pcap(&c2, 1)[0], f);
    assert_eq!(tx(&d, "pg0"), 0);
    // A was learned on pg0: B -> A goes to pg0 only.
    wait_l2fib(&d, "02:aa:00:00:00:01");
    let (t1, t2) = (tx(&d, "pg1"), tx(&d, "pg2"));
    let c0 = d.dir.join("f0.pcap");
    d.ok(&format!(
        "packet-generator capture pg0 pcap {} count 1",
        c0.display()
    ));
    let f = frame(A, B, 2);
    inject(&d, "s2", "pg1", std::slice::from_ref(&f));
    assert_eq!(wait_pcap(&c0, 1)[0], f);
    assert_eq!((tx(&d, "pg1"), tx(&d, "pg2")), (t1, t2), "not flooded");
    let fib = wait_l2fib(&d, "02:bb:00:00:00:02");
    assert!(
        fib.lines()
            .any(|l| l.contains("02:aa:00:00:00:01") && l.contains("pg0")),
        "{fib}"
    );
    assert!(
        fib.lines()
            .any(|l| l.contains("02:bb:00:00:00:02") && l.contains("pg1")),
        "{fib}"
    );
    // MAC move: A appears on pg2.
    inject(&d, "s3", "pg2", &[frame(B, A, 3)]);
    let t0 = Instant::now();
    while !d
        .ok("show l2fib")
        .lines()
        .any(|l| l.contains("02:aa:00:00:00:01") && l.contains("pg2"))
    {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{}",
            d.ok("show l2fib")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Unknown unicast off: frames to C are dropped, counted.
    d.ok("create bridge-domain 1 uu-flood 0");
    d.ok("clear errors");
    inject(&d, "s4", "pg0", &[frame(C, A, 4)]);
    assert!(d.ok("show errors").contains("unknown unicast dropped"));
    // Static entry for C on pg2.
    d.ok("l2fib add 02:cc:00:00:00:03 1 pg2 static");
    let before = tx(&d, "pg2");
    inject(&d, "s5", "pg0", &[frame(C, A, 5)]);
    assert_eq!(tx(&d, "pg2"), before + 1);
    assert!(d
        .ok("show l2fib bd_id 1")
        .lines()
        // VPP's columns: Mac-Address BD-Idx If-Idx BSN-ISN Age(min) static ...
        .any(|l| l.contains("02:cc:00:00:00:03") && l.split_whitespace().nth(5) == Some("*")));
    d.ok("l2fib del 02:cc:00:00:00:03 1");
    assert!(d.cli("l2fib del 02:cc:00:00:00:03 1").is_err());
    // Leaving the bridge.
    d.ok("set interface l3 pg2");
    assert!(!d.ok("show bridge-domain 1 detail").contains("pg2"));
    assert!(d
        .cli("create bridge-domain 1 del")
        .unwrap_err()
        .contains("still has interfaces"));
    assert_no_leaks_now(&d);
    d.stop();
}

#[test]
fn bridge_flood_copies_large_bursts_without_leaks() {
    let d = Daemon::start("bridge-burst", "");
    for c in [
        "create packet-generator interface pg0",
        "create packet-generator interface pg1",
        "create packet-generator interface pg2",
        "create packet-generator interface pg3",
        "set interface state pg0 up",
        "set interface state pg1 up",
        "set interface state pg2 up",
        "set interface state pg3 up",
        "create bridge-domain 9 learn 0",
        "set interface l2 bridge pg0 9",
        "set interface l2 bridge pg1 9",
        "set interface l2 bridge pg2 9",
        "set interface l2 bridge pg3 9",
    ] {
        d.ok(c);
    }
    // 3000 broadcast frames: each is sent out of the three other members.
    let frames: Vec<Vec<u8>> = (0..3000u32).map(|i| frame([0xff; 6], A, i as u8)).collect();
    inject(&d, "b", "pg0", &frames);
    for i in ["pg1", "pg2", "pg3"] {
        assert_eq!(tx(&d, i), 3000, "{i}");
    }
    assert!(
        d.ok("show l2fib").contains("0 l2fib entries"),
        "learning off"
    );
    assert_no_leaks_now(&d);
    d.stop();
}
