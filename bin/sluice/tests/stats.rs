//! The statistics segment and the Prometheus endpoint, end to end: a reader in this process
//! maps the daemon's segment (fd from the stats socket) and polls it while a worker forwards
//! pg traffic at full rate; counters never go back, and at the end the segment's totals equal
//! what `show interface` and `show errors` print. `/metrics` is checked against the same
//! numbers and by `promtool check metrics` (Debian package `prometheus`; skipped with a
//! reason when absent).

mod common;

use common::{assert_no_leaks, assert_no_leaks_now, wait_streams_done, wait_until, Daemon};
use sluice_stats::{StatClient, StatValue};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The demo router (pg0 in, three routes out of pg1..pg3) and a stream on worker 0 whose
/// destinations also cover 10.4/16, which has no route: those are dropped (with ICMP errors
/// and ARP requests for the sender, which has no neighbour entry) and show up in
/// `show errors` and the interfaces' drop counters.
fn setup(d: &Daemon, packets: u64) {
    let mut cmds: Vec<String> = [
        "create packet-generator interface pg0",
        "create packet-generator interface pg1",
        "create packet-generator interface pg2",
        "create packet-generator interface pg3",
        "set interface state pg0 up",
        "set interface state pg1 up",
        "set interface state pg2 up",
        "set interface state pg3 up",
        "set interface ip address pg0 10.0.0.1/24",
        "set interface ip address pg1 10.0.1.1/24",
        "set interface ip address pg2 10.0.2.1/24",
        "set interface ip address pg3 10.0.3.1/24",
        "ip neighbor pg1 10.0.1.2 02:00:00:00:01:02",
        "ip neighbor pg2 10.0.2.2 02:00:00:00:02:02",
        "ip neighbor pg3 10.0.3.2 02:00:00:00:03:02",
        "ip route add 10.1.0.0/16 via 10.0.1.2",
        "ip route add 10.2.0.0/16 via 10.0.2.2",
        "ip route add 10.3.0.0/16 via 10.0.3.2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    cmds.push(format!(
        "packet-generator new {{ name s limit {packets} size 64-64 node ethernet-input interface pg0 worker 0 data {{ IP4: 02:00:00:00:00:10 -> 02:fe:00:00:00:00 UDP: 10.0.0.16 -> 10.1.0.1 - 10.4.253.32 UDP: 1024 -> 53 incrementing 18 }} }}"
    ));
    for c in cmds {
        d.ok(&c);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `show interface` as (interface, counter row) -> value.
fn show_interface(d: &Daemon) -> HashMap<(String, String), u64> {
    let mut out = HashMap::new();
    let mut cur = String::new();
    for l in d.ok("show interface").lines().skip(1) {
        if !l.starts_with(' ') {
            cur = l.split_whitespace().next().unwrap_or("").to_string();
        }
        // The counter name and value are the last columns (the name may have a space).
        let t: Vec<&str> = l.split_whitespace().collect();
        if t.len() >= 2 {
            if let Ok(v) = t[t.len() - 1].parse::<u64>() {
                let name = if t.len() >= 3 && matches!(t[t.len() - 2], "packets" | "bytes") {
                    format!("{} {}", t[t.len() - 3], t[t.len() - 2])
                } else {
                    t[t.len() - 2].to_string()
                };
                out.insert((cur.clone(), name), v);
            }
        }
    }
    out
}

/// `show errors` as (node, counter name) -> count, with the names from `show node`.
fn show_errors(d: &Daemon) -> HashMap<(String, String), u64> {
    let mut names: HashMap<String, HashMap<String, String>> = HashMap::new();
    let mut out = HashMap::new();
    for l in d.ok("show errors").lines().skip(1) {
        let t: Vec<&str> = l.split_whitespace().collect();
        if t.len() < 4 {
            continue;
        }
        let (count, node) = (t[0].parse::<u64>().unwrap(), t[1].to_string());
        let reason = t[2..t.len() - 1].join(" ");
        let by_desc = names.entry(node.clone()).or_insert_with(|| {
            d.ok(&format!("show node {node}"))
                .lines()
                .filter_map(|l| l.trim().strip_prefix("counter "))
                .filter_map(|l| {
                    let (name, rest) = l.split_once(' ')?;
                    let (_, desc) = rest.split_once("): ")?;
                    Some((
                        desc.split_whitespace().collect::<Vec<_>>().join(" "),
                        name.into(),
                    ))
                })
                .collect()
        });
        let name = by_desc
            .get(&reason)
            .unwrap_or_else(|| panic!("no counter of {node} described `{reason}'"))
            .clone();
        out.insert((node, name), count);
    }
    out
}

fn scalar(c: &mut StatClient, name: &str) -> f64 {
    match &c.dump(&[format!("^{name}$")]).unwrap()[0].value {
        StatValue::Scalar(v) => *v,
        v => panic!("{name}: {v:?}"),
    }
}

#[test]
fn segment_totals_equal_show_output_while_a_reader_polls() {
    let port = free_port();
    let d = Daemon::start(
        "stats",
        &format!(
            "cpu {{ workers 1 }}\nstatseg {{ update-interval 0.02 }}\nmetrics {{ listen 127.0.0.1:{port} }}"
        ),
    );
    // The default socket: beside the CLI socket.
    let sock = d.dir.join("stats.sock");
    let mut c = StatClient::connect(&sock).expect("stats socket");
    assert_eq!(scalar(&mut c, "/sys/num_worker_threads"), 1.0);
    setup(&d, 400_000);
    // Wait for the layout with the new interfaces.
    wait_until(
        Duration::from_secs(10),
        Duration::from_millis(10),
        || !c.ls(&["^/interfaces/pg3/rx$".into()]).unwrap().is_empty(),
        || "pg3 never appeared in the segment".into(),
    );
    // The reader: polls /if and /err while the worker counts; every value (per item and
    // thread) must never go back.
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let mut rc = StatClient::connect(&sock).unwrap();
    let reader = std::thread::spawn(move || {
        let mut last: HashMap<(String, usize, usize), (u64, u64)> = HashMap::new();
        let (mut polls, mut moving) = (0u64, 0u64);
        while !s2.load(Ordering::Relaxed) {
            let snap = rc.dump(&["^/if/".into(), "^/err/".into()]).unwrap();
            let mut changed = false;
            for s in snap {
                let cells: Vec<(usize, usize, (u64, u64))> = match &s.value {
                    StatValue::Simple(r) => r
                        .iter()
                        .enumerate()
                        .flat_map(|(t, r)| r.iter().enumerate().map(move |(i, v)| (t, i, (*v, 0))))
                        .collect(),
                    StatValue::Combined(r) => r
                        .iter()
                        .enumerate()
                        .flat_map(|(t, r)| r.iter().enumerate().map(move |(i, v)| (t, i, *v)))
                        .collect(),
                    _ => continue,
                };
                for (t, i, v) in cells {
                    let k = (s.name.clone(), t, i);
                    if let Some(p) = last.get(&k) {
                        assert!(
                            v.0 >= p.0 && v.1 >= p.1,
                            "{} [{i} @ {t}] went back from {p:?} to {v:?}",
                            s.name
                        );
                        changed |= v != *p;
                    }
                    last.insert(k, v);
                }
            }
            polls += 1;
            moving += changed as u64;
            std::thread::sleep(Duration::from_millis(1));
        }
        (polls, moving)
    });
    d.ok("packet-generator enable");
    wait_streams_done(&d);
    // Wait for the worker to drain (every buffer back; the stream's last packets are still
    // in flight when it reports done, hence the long wait), then for two more updates: the
    // segment now holds the final counts.
    assert_no_leaks(&d);
    let hb = scalar(&mut c, "/sys/heartbeat");
    wait_until(
        Duration::from_secs(10),
        Duration::from_millis(5),
        || scalar(&mut c, "/sys/heartbeat") >= hb + 2.0,
        || "the segment stopped updating".into(),
    );
    stop.store(true, Ordering::Relaxed);
    let (polls, moving) = reader.join().unwrap();
    assert!(polls > 10, "{polls} polls");
    assert!(
        moving >= 2,
        "the reader saw counters move only {moving} times"
    );

    // Interfaces: every row of `show interface` equals the segment's totals, and no
    // segment counter of a live interface is non-zero where `show interface` shows nothing.
    let shown = show_interface(&d);
    assert!(
        shown[&("pg0".to_string(), "rx packets".to_string())] == 400_000,
        "{shown:?}"
    );
    assert!(
        shown.contains_key(&("pg0".into(), "drops".into())),
        "{shown:?}"
    );
    let snap = c.dump(&["^/if/".into()]).unwrap();
    let get = |n: &str| &snap.iter().find(|s| s.name == n).unwrap().value;
    let StatValue::Names(names) = get("/if/names") else {
        panic!("names")
    };
    let rows: [(&str, &str, bool); 10] = [
        ("/if/rx", "rx packets", false),
        ("/if/rx", "rx bytes", true),
        ("/if/tx", "tx packets", false),
        ("/if/tx", "tx bytes", true),
        ("/if/drops", "drops", false),
        ("/if/punt", "punt", false),
        ("/if/ip4", "ip4", false),
        ("/if/ip6", "ip6", false),
        ("/if/rx-miss", "rx-miss", false),
        ("/if/tx-error", "tx-error", false),
    ];
    let mut compared = 0;
    for (i, name) in names.iter().enumerate().filter(|(_, n)| !n.is_empty()) {
        for (path, row, bytes) in rows {
            let v = if bytes {
                get(path).item_bytes(i)
            } else {
                get(path).item_total(i)
            };
            let s = shown
                .get(&(name.clone(), row.to_string()))
                .copied()
                .unwrap_or(0);
            assert_eq!(v, s, "{name} {row}: segment {v}, show interface {s}");
            compared += (s != 0) as usize;
        }
    }
    assert!(compared >= 8, "only {compared} non-zero rows compared");

    // Errors: the same both ways.
    let errs = show_errors(&d);
    assert!(!errs.is_empty(), "the unrouted destinations produce errors");
    let snap = c.dump(&["^/err/".into()]).unwrap();
    let mut seg_errs = HashMap::new();
    for s in &snap {
        let (node, name) = s.name["/err/".len()..].rsplit_once('/').unwrap();
        let v = s.value.item_total(0);
        if v != 0 {
            seg_errs.insert((node.to_string(), name.to_string()), v);
        }
    }
    assert_eq!(seg_errs, errs, "segment vs show errors");

    // Symlinks read the same item.
    let l = c.dump(&["^/interfaces/pg0/rx$".into()]).unwrap();
    assert_eq!(l[0].value.item_total(0), 400_000);
    assert!(l[0].symlink);

    // Node runtime: vectors of ip4-lookup summed over threads equals `show runtime`'s.
    let snap = c.dump(&["^/nodes/ip4-lookup/vectors$".into()]).unwrap();
    let seg_vectors = snap[0].value.item_total(0);
    let shown_vectors: u64 = d
        .ok("show runtime")
        .lines()
        .filter(|l| l.split_whitespace().next() == Some("ip4-lookup"))
        .map(|l| l.split_whitespace().nth(3).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(seg_vectors, shown_vectors);
    assert!(seg_vectors > 0);

    // /metrics: the same numbers, and valid for promtool.
    let body = scrape(port);
    let rx0: u64 = body
        .lines()
        .filter(|l| l.starts_with("interfaces_rx_packets{interface=\"pg0\","))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(rx0, 400_000, "{body}");
    assert!(body.contains("\nerr{node=\"ip4-input\",error="), "{body}");
    assert!(
        body.contains("\nnodes_vectors{node=\"ip4-lookup\",index="),
        "{body}"
    );
    assert!(body.contains("\nsys_vector_rate "), "{body}");
    promtool_check(&body);
    let shown = d.ok("show statistics segment");
    assert!(shown.contains("scrapes: 1"), "{shown}");
    assert_no_leaks_now(&d);
    d.stop();
}

fn scrape(port: u16) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    let (head, body) = r.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    body.to_string()
}

/// `promtool check metrics` on a real scrape; skipped (with the reason printed) without it.
fn promtool_check(body: &str) {
    let child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        sluice_infra::testing::skip(
            "promtool check: promtool not installed (Debian package `prometheus`)",
        );
        return;
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn stats_socket_in_use_and_disabled_segment() {
    let d = Daemon::start("stats-a", "statseg { update-interval 0.05 }");
    let sock = d.dir.join("stats.sock");
    // A second daemon asked for the same stats socket refuses to start, naming it.
    let dir = common::tmpdir("stats-b");
    let conf = dir.join("startup.conf");
    std::fs::write(
        &conf,
        format!(
            "unix {{ cli-listen {} }}\nbuffers {{ buffers-per-numa 4096 page-size 4k }}\nstatseg {{ socket-name {} }}\n",
            dir.join("cli.sock").display(),
            sock.display()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("-c")
        .arg(&conf)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot serve the stats socket") && err.contains("in use"),
        "{err}"
    );
    // The first daemon still serves its segment.
    assert!(StatClient::connect(&sock).is_ok());
    let _ = std::fs::remove_dir_all(&dir);
    d.stop();

    // `statseg { disable }`: no segment, no socket; metrics refuse to start without it.
    let d = Daemon::start("stats-off", "statseg { disable }");
    assert!(!d.dir.join("stats.sock").exists());
    assert!(d
        .ok("show statistics segment")
        .contains("statistics segment disabled"));
    d.stop();
    let dir = common::tmpdir("stats-nometrics");
    let conf = dir.join("startup.conf");
    std::fs::write(
        &conf,
        format!(
            "unix {{ cli-listen {} }}\nbuffers {{ buffers-per-numa 4096 page-size 4k }}\nstatseg {{ disable }}\nmetrics {{ listen 127.0.0.1:{} }}\n",
            dir.join("cli.sock").display(),
            free_port()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("-c")
        .arg(&conf)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("metrics need the statistics segment"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
