//! The traffic tester over a real loop: one Sluice daemon, started inside a network namespace
//! the test creates, owns both ends of a veth pair through af_packet; the tester sends on one
//! end (`host-ta`) and receives on the other (`host-tb`, `set interface tester-rx`).
//!
//! Needs root and `ip` (iproute2); otherwise each test prints why it skips and passes. The
//! namespace (and with it the veth pair) is removed by a drop guard, also on failure.

#[path = "common/mod.rs"]
mod common;

use common::*;
use std::time::{Duration, Instant};

/// Why these tests cannot run here, if they cannot.
fn skip_reason() -> Option<String> {
    if let Some(why) = sluice_infra::testing::not_root("network namespaces and AF_PACKET") {
        return Some(why);
    }
    if sh(&["ip", "-V"]).is_err() {
        return Some("`ip' (iproute2) is not installed".into());
    }
    None
}

macro_rules! skip_unless_possible {
    () => {
        if let Some(why) = skip_reason() {
            sluice_infra::testing::skip(&why);
            return;
        }
    };
}

/// A namespace holding the veth pair `ta`/`tb`, deleted on drop.
struct Netns(String);

impl Netns {
    fn new(tag: &str) -> Netns {
        let name = format!("sl{}{tag}", std::process::id());
        let _ = sh(&["ip", "netns", "del", &name]);
        must(&["ip", "netns", "add", &name]);
        let ns = Netns(name);
        let n = ns.0.as_str();
        // No IPv6 autoconfiguration chatter on the links.
        must(&[
            "ip",
            "netns",
            "exec",
            n,
            "sysctl",
            "-qw",
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
        ]);
        must(&[
            "ip", "-n", n, "link", "add", "ta", "type", "veth", "peer", "name", "tb",
        ]);
        for l in ["lo", "ta", "tb"] {
            must(&["ip", "-n", n, "link", "set", l, "up"]);
        }
        ns
    }

    /// Starts `sluice` inside the namespace, with 16384 buffers (twice the harness's
    /// default).
    fn daemon(&self, tag: &str, extra: &str) -> Daemon {
        Daemon::start_in(
            Some(&self.0),
            tag,
            &format!("buffers {{ buffers-per-numa 16384 page-size 4k }}\n{extra}"),
        )
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = sh(&["ip", "netns", "del", &self.0]);
    }
}

/// The number after `"key": ` in stream `stream`'s object of `show tester json` (None for
/// `null`).
fn field(json: &str, stream: &str, key: &str) -> Option<f64> {
    let s = json
        .find(&format!("\"{stream}\": {{"))
        .unwrap_or_else(|| panic!("no stream {stream} in {json}"));
    let rest = &json[s..];
    let k = rest
        .find(&format!("\"{key}\": "))
        .unwrap_or_else(|| panic!("no {key} in {rest}"));
    let v = &rest[k + key.len() + 4..];
    let end = v.find([',', '}']).unwrap();
    let v = v[..end].trim();
    (v != "null").then(|| {
        v.parse()
            .unwrap_or_else(|_| panic!("{key}: bad number `{v}'"))
    })
}

fn wait_stopped(d: &Daemon) {
    let t0 = Instant::now();
    while d.ok("show tester json").contains("\"running\": true") {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "streams never stopped"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits (a wait, not a speed check) until each named stream has received what it sent:
/// late packets are still crossing the veth pair when the streams stop. A lost packet
/// fails the caller's exact checks after 30 s.
fn wait_rx(d: &Daemon, streams: &[&str]) {
    let all_in = || {
        let j = d.ok("show tester json");
        streams
            .iter()
            .all(|s| field(&j, s, "rx_packets") >= field(&j, s, "tx_packets"))
    };
    let t0 = Instant::now();
    while !all_in() && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn setup(d: &Daemon) {
    for c in [
        "create host-interface name ta",
        "create host-interface name tb",
        "set interface state host-ta up",
        "set interface state host-tb up",
        "set interface tester-rx host-tb",
    ] {
        d.ok(c);
    }
}

/// 20k pps for one second plus a 1k pps latency stream, through a veth pair: every packet
/// sent arrives, once.
#[test]
fn tester_loop_over_veth_loses_nothing() {
    skip_unless_possible!();
    let ns = Netns::new("tl");
    let d = ns.daemon("tester-loop", "");
    setup(&d);
    d.ok("tester stream add name main interface host-ta size 64 rate 20000 duration 1 dst-mac 02:fe:00:00:00:02 src 10.0.0.1-10.0.0.100 dst 10.1.0.1 flows 1000");
    d.ok("tester stream add name lat interface host-ta size 64 rate 1000 duration 1 dst-mac 02:fe:00:00:00:02 src 10.0.9.1 dst 10.1.0.1 latency");
    d.ok("tester start");
    wait_stopped(&d);
    wait_rx(&d, &["main", "lat"]);
    let j = d.ok("show tester json");
    eprintln!("{j}");
    for (s, rate) in [("main", 20000.0), ("lat", 1000.0)] {
        let tx = field(&j, s, "tx_packets").unwrap();
        let rx = field(&j, s, "rx_packets").unwrap();
        assert!(tx > 0.0);
        assert_eq!(field(&j, s, "tx_fail"), Some(0.0), "{s}: {j}");
        assert_eq!(rx, tx, "{s}: {j}");
        assert_eq!(field(&j, s, "lost"), Some(0.0), "{s}");
        assert_eq!(field(&j, s, "duplicate"), Some(0.0), "{s}");
        assert_eq!(field(&j, s, "rx_bytes"), Some(rx * 64.0), "{s}");
        let min = field(&j, s, "min").expect("latency min");
        let p99 = field(&j, s, "p99").expect("latency p99");
        assert!(min > 0.0 && p99 >= min && p99 < 1e9, "{s}: {min} {p99}");
        assert!(field(&j, s, "jitter_ns").is_some());
        // Only what does not depend on the machine's speed: a loaded machine sends less
        // (the pacer does not catch up past the trial's end), never more than `rate` x 1 s,
        // and never faster than the rate (the trial ends no earlier than its last packet's
        // slot, (tx - 1) / rate after the start). Pacing accuracy is measured by
        // scripts/tester-bench.sh, not asserted.
        assert!(tx <= rate, "{s}: sent {tx} in a 1 s trial at {rate} pps");
        let offered = field(&j, s, "offered_rate_pps").unwrap();
        assert!(
            offered > 0.0 && offered <= rate * tx / (tx - 1.0),
            "{s}: offered {offered} pps, target {rate}"
        );
    }
    // The driver saw exactly what the tester counted.
    let main_tx =
        field(&j, "main", "tx_packets").unwrap() + field(&j, "lat", "tx_packets").unwrap();
    let shown = d.ok("show interface host-ta");
    let tx_line = shown
        .lines()
        .find(|l| l.contains("tx packets"))
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(
        tx_line.ends_with(&format!(" {}", main_tx as u64)),
        "{shown}"
    );
    let text = d.ok("show tester");
    assert!(text.contains("main: interface host-ta"), "{text}");
    assert_no_leaks_within(&d, SETTLE);
    d.stop();
}

/// The same loop with a worker thread: the stream is sent by worker 0 and received there
/// (af_packet rx queues go to workers); `show tester` merges the per-thread statistics.
#[test]
fn tester_on_a_worker_thread() {
    skip_unless_possible!();
    let ns = Netns::new("tw");
    let d = ns.daemon("tester-worker", "cpu { workers 1 }");
    setup(&d);
    d.ok("tester stream add name w interface host-ta size 512 rate 10000 count 5000 dst-mac 02:fe:00:00:00:02 src 10.0.0.1 dst 10.1.0.1 flows 64 worker 0");
    d.ok("tester start name w");
    wait_stopped(&d);
    wait_rx(&d, &["w"]);
    let j = d.ok("show tester json");
    assert_eq!(field(&j, "w", "tx_packets"), Some(5000.0), "{j}");
    assert_eq!(field(&j, "w", "rx_packets"), Some(5000.0), "{j}");
    assert_eq!(field(&j, "w", "rx_bytes"), Some(5000.0 * 512.0), "{j}");
    assert_eq!(field(&j, "w", "lost"), Some(0.0), "{j}");
    assert!(field(&j, "w", "p50").is_some());
    // A new trial stopped mid-way (a stream of 50 s, so no starved test thread sees it
    // end by itself), deleted, and nothing leaks.
    d.ok("tester stream del name w");
    d.ok("tester stream add name w interface host-ta size 512 rate 10000 count 500000 dst-mac 02:fe:00:00:00:02 src 10.0.0.1 dst 10.1.0.1 flows 64 worker 0");
    d.ok("tester start");
    // Stopped once it has sent something (a wait, not a speed check).
    wait_until(
        Duration::from_secs(30),
        Duration::from_millis(20),
        || field(&d.ok("show tester json"), "w", "tx_packets").is_some_and(|t| t > 0.0),
        || d.ok("show tester json"),
    );
    d.ok("tester stop");
    wait_stopped(&d);
    let j = d.ok("show tester json");
    let tx = field(&j, "w", "tx_packets").unwrap();
    assert!(tx > 0.0 && tx < 500_000.0, "{j}");
    wait_rx(&d, &["w"]);
    let j = d.ok("show tester json");
    assert_eq!(field(&j, "w", "rx_packets"), Some(tx), "{j}");
    d.ok("tester stream del name w");
    d.ok("set interface tester-rx host-tb disable");
    // The worker may still be freeing its last rx frame.
    assert_no_leaks(&d);
    d.stop();
}
