//! Segment, reader, exposition and HTTP server tests.

use crate::layout::hdr;
use crate::reader::{matches, StatClient, StatValue};
use crate::shm;
use crate::writer::{Segment, Shape, Spec};
use crate::{prometheus, StatsError};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn reader(seg: &Segment) -> StatClient {
    StatClient::from_fd(&shm::readonly_fd(seg.fd()).unwrap()).unwrap()
}

fn all() -> Vec<String> {
    Vec::new()
}

fn specs(n_if: u32) -> Vec<Spec> {
    vec![
        Spec::new("/sys/heartbeat", Shape::Scalar),
        Spec::new(
            "/if/names",
            Shape::Names((0..n_if).map(|i| format!("pg{i}")).collect()),
        ),
        Spec::new(
            "/if/rx",
            Shape::Combined {
                rows: 2,
                cols: n_if,
            },
        ),
        Spec::new(
            "/if/drops",
            Shape::Simple {
                rows: 2,
                cols: n_if,
            },
        ),
        Spec::new(
            "/sys/vector_rate_per_worker",
            Shape::Gauges { rows: 2, cols: 1 },
        ),
        Spec::new("/interfaces/pg1/rx", Shape::Symlink { target: 2, item: 1 }),
        Spec::new(
            "/interfaces/pg1/drops",
            Shape::Symlink { target: 3, item: 1 },
        ),
    ]
}

#[test]
fn values_written_are_read_back_with_symlinks_resolved() {
    let mut seg = Segment::create(1 << 20, 2).unwrap();
    {
        let mut w = seg.write();
        w.layout(&specs(3)).unwrap();
        w.set_scalar(0, 7.0);
        for t in 0..2 {
            for i in 0..3 {
                w.set_combined(2, t, i, (10 * t + i) as u64, 100 * (10 * t + i) as u64);
                w.set_simple(3, t, i, (t + i) as u64);
            }
            w.set_gauge(4, t, 0, 0.5 + t as f64);
        }
    }
    let mut r = reader(&seg);
    let h = r.header().unwrap();
    assert_eq!((h.entries, h.n_threads, h.epoch), (7, 2, 1));
    let d = r.dump(&all()).unwrap();
    let get = |n: &str| d.iter().find(|s| s.name == n).unwrap().value.clone();
    assert_eq!(get("/sys/heartbeat"), StatValue::Scalar(7.0));
    assert_eq!(
        get("/if/names"),
        StatValue::Names(vec!["pg0".into(), "pg1".into(), "pg2".into()])
    );
    assert_eq!(
        get("/if/rx"),
        StatValue::Combined(vec![
            vec![(0, 0), (1, 100), (2, 200)],
            vec![(10, 1000), (11, 1100), (12, 1200)]
        ])
    );
    assert_eq!(
        get("/interfaces/pg1/rx"),
        StatValue::Combined(vec![vec![(1, 100)], vec![(11, 1100)]])
    );
    assert_eq!(
        get("/interfaces/pg1/drops"),
        StatValue::Simple(vec![vec![1], vec![2]])
    );
    assert_eq!(get("/if/drops").item_total(2), 2 + 3);
    assert_eq!(get("/if/rx").item_bytes(1), 100 + 1100);
    assert_eq!(
        get("/sys/vector_rate_per_worker"),
        StatValue::Gauges(vec![vec![0.5], vec![1.5]])
    );
    assert!(
        d.iter()
            .find(|s| s.name == "/interfaces/pg1/rx")
            .unwrap()
            .symlink
    );
    // Patterns select entries.
    let names: Vec<String> = r
        .ls(&["^/interfaces/".into()])
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["/interfaces/pg1/rx", "/interfaces/pg1/drops"]);
    assert_eq!(r.ls(&["drops$".into()]).unwrap().len(), 2);
    assert_eq!(r.ls(&["/if/*s".into()]).unwrap().len(), 2, "names, drops");
}

#[test]
fn patterns_match_substrings_globs_and_anchors() {
    assert!(matches("/if/rx", "/if"));
    assert!(matches("/if/rx", "rx"));
    assert!(!matches("/if/rx", "^rx"));
    assert!(matches("/if/rx", "^/if/rx$"));
    assert!(!matches("/if/rx-miss", "/if/rx$"));
    assert!(matches("/interfaces/pg0/rx", "/interfaces/*/rx"));
    assert!(matches("/err/ip4-input/bad_checksum", "^/err/*check"));
    assert!(!matches("/err/ip4-input/ttl", "^/err/*check"));
    assert!(matches("", ""));
    assert!(matches("a*b", "a*b"));
    // Many stars on a long name stay linear.
    let long = "a".repeat(10_000);
    assert!(!matches(&long, &"*a".repeat(100).replace("a*a", "a*b")));
}

#[test]
fn a_layout_that_does_not_fit_changes_nothing() {
    let mut seg = Segment::create(16 << 10, 1).unwrap();
    seg.write().layout(&specs(2)).unwrap();
    let mut r = reader(&seg);
    assert_eq!(r.ls(&all()).unwrap().len(), 7);
    let big = vec![Spec::new(
        "/if/rx",
        Shape::Combined {
            rows: 1,
            cols: 100_000,
        },
    )];
    let e = seg.write().layout(&big).unwrap_err();
    assert!(matches!(e, StatsError::Full { .. }), "{e}");
    assert!(e.to_string().contains("statseg { size }"), "{e}");
    assert_eq!(r.ls(&all()).unwrap().len(), 7, "old directory intact");
    assert_eq!(r.header().unwrap().epoch, 1, "no new epoch");
    // A symlink to something that is not a vector is refused.
    let bad = vec![
        Spec::new("/a", Shape::Scalar),
        Spec::new("/b", Shape::Symlink { target: 0, item: 0 }),
    ];
    assert!(matches!(
        seg.write().layout(&bad),
        Err(StatsError::Layout(_))
    ));
}

#[test]
fn a_relayout_bumps_the_epoch_and_readers_see_the_new_directory() {
    let mut seg = Segment::create(1 << 20, 2).unwrap();
    seg.write().layout(&specs(2)).unwrap();
    let mut r = reader(&seg);
    assert_eq!(r.header().unwrap().epoch, 1);
    let before = r.dump(&["/if/rx".into()]).unwrap();
    assert_eq!(
        before[0].value,
        StatValue::Combined(vec![vec![(0, 0); 2]; 2])
    );
    {
        let mut w = seg.write();
        w.layout(&specs(5)).unwrap();
        w.set_combined(2, 1, 4, 9, 99);
    }
    let h = r.header().unwrap();
    assert_eq!(h.epoch, 2);
    let after = r.dump(&["^/if/rx$".into()]).unwrap();
    assert_eq!(after[0].value.item_total(4), 9);
    assert_eq!(after[0].value.item_bytes(4), 99);
    // Values-only updates keep the epoch (the reader keeps its cached directory).
    seg.write().set_combined(2, 0, 0, 1, 1);
    assert_eq!(r.header().unwrap().epoch, 2);
    assert_eq!(
        r.dump(&["^/if/rx$".into()]).unwrap()[0].value.item_total(0),
        1
    );
}

/// A writer updating as fast as it can (and laying the directory out again now and then)
/// while a reader in another thread, through its own read-only mapping, takes snapshots:
/// every snapshot is consistent (all cells from one update: never torn, never half-updated)
/// and no value ever goes backwards.
#[test]
fn a_reader_racing_the_writer_sees_consistent_monotonic_snapshots() {
    let mut seg = Segment::create(1 << 20, 2).unwrap();
    let cols = 64u32;
    let lay = |n: u32| {
        vec![
            Spec::new("/sys/heartbeat", Shape::Scalar),
            Spec::new("/if/rx", Shape::Combined { rows: 2, cols: n }),
            Spec::new("/if/drops", Shape::Simple { rows: 2, cols: n }),
            Spec::new("/interfaces/x/rx", Shape::Symlink { target: 1, item: 0 }),
        ]
    };
    seg.write().layout(&lay(cols)).unwrap();
    let mut r = reader(&seg);
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let seen = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let seen2 = seen.clone();
    let rd = std::thread::spawn(move || {
        let mut last = 0u64;
        let mut snaps = 0u64;
        let mut distinct = 0u64;
        while !s2.load(Ordering::Relaxed) || snaps < 100 {
            let d = r.dump(&Vec::new()).unwrap();
            let hb = match d[0].value {
                StatValue::Scalar(v) => v as u64,
                _ => panic!("heartbeat"),
            };
            for s in &d[1..] {
                match &s.value {
                    StatValue::Combined(rows) => {
                        for row in rows {
                            for &(p, b) in row {
                                assert_eq!(p, hb, "{}: packets from another update", s.name);
                                assert_eq!(b, 64 * hb, "{}: bytes torn from packets", s.name);
                            }
                        }
                    }
                    StatValue::Simple(rows) => {
                        for row in rows {
                            for &v in row {
                                assert_eq!(v, hb, "{}: value from another update", s.name);
                            }
                        }
                    }
                    v => panic!("unexpected {v:?}"),
                }
            }
            assert!(hb >= last, "heartbeat went back from {last} to {hb}");
            if hb != last {
                distinct += 1;
                seen2.store(distinct, Ordering::Relaxed);
            }
            last = hb;
            snaps += 1;
        }
        (snaps, distinct, r.retries())
    });
    // The writer runs until the reader saw 200 different updates (or 30 s on a machine too
    // loaded to let it), pausing a little between updates as the daemon does (it writes for
    // microseconds per interval), so the reader gets windows.
    let t0 = Instant::now();
    let mut n = 0u64;
    let mut c = cols;
    while seen.load(Ordering::Relaxed) < 200 && t0.elapsed() < Duration::from_secs(30) {
        if n % 16 == 0 {
            std::thread::sleep(Duration::from_micros(50));
        }
        n += 1;
        let mut w = seg.write();
        if n % 1000 == 0 {
            c += 1;
            w.layout(&lay(c)).unwrap();
        }
        w.set_scalar(0, n as f64);
        for t in 0..2 {
            for i in 0..c as usize {
                w.set_combined(1, t, i, n, 64 * n);
                w.set_simple(2, t, i, n);
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let (snaps, distinct, retries) = rd.join().unwrap();
    assert!(
        snaps >= 100 && distinct >= 2,
        "{snaps} snapshots, {distinct} distinct"
    );
    // Retries are expected (the writer never stops) but not asserted: timing-dependent.
    let _ = retries;
}

#[test]
fn a_corrupt_segment_is_an_error_never_a_panic() {
    let mut seg = Segment::create(64 << 10, 2).unwrap();
    seg.write().layout(&specs(4)).unwrap();
    let words = seg.words_for_test();
    let dir = crate::layout::HEADER_BYTES / 8;
    let n = (seg.used() / 8) as u64;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut errors = 0;
    for round in 0..3000 {
        // Corrupt a few words of the directory or data (with small or huge values).
        let saved: Vec<(usize, u64)> = (0..3)
            .map(|_| {
                let i = dir + (rnd() % (n - dir as u64)) as usize;
                let old = words[i].load(Ordering::Relaxed);
                let v = match rnd() % 4 {
                    0 => rnd(),
                    1 => rnd() % 64,
                    2 => old ^ (1 << (rnd() % 64)),
                    _ => u64::MAX,
                };
                words[i].store(v, Ordering::Relaxed);
                (i, old)
            })
            .collect();
        if round % 7 == 0 {
            words[hdr::DIR_COUNT].store(rnd() % 1_000_000, Ordering::Relaxed);
        }
        let mut r = reader(&seg);
        if r.dump(&all()).is_err() {
            errors += 1;
        }
        let _ = r.ls(&all());
        for (i, v) in saved {
            words[i].store(v, Ordering::Relaxed);
        }
        words[hdr::DIR_COUNT].store(7, Ordering::Relaxed);
    }
    assert!(errors > 0, "corruption was detected at least once");
    // Bad magic / version are refused at open.
    words[hdr::VERSION].store(99, Ordering::Relaxed);
    assert!(matches!(
        StatClient::from_fd(&shm::readonly_fd(seg.fd()).unwrap()),
        Err(StatsError::NotSegment(_))
    ));
}

#[test]
fn readers_cannot_write_or_shrink_the_segment() {
    use std::os::fd::AsRawFd;
    let seg = Segment::create(64 << 10, 1).unwrap();
    let fd = shm::readonly_fd(seg.fd()).unwrap();
    // SAFETY: plain syscalls on fds we own; a successful mapping is unmapped at once.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        );
        assert_eq!(p, libc::MAP_FAILED, "writable mapping of the reader's fd");
        // Not even through the daemon's own (read-write) fd: sealed.
        assert_ne!(
            libc::ftruncate(seg.fd().as_raw_fd(), 4096),
            0,
            "shrink allowed"
        );
        let p = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            seg.fd().as_raw_fd(),
            0,
        );
        if p != libc::MAP_FAILED {
            // Kernel without F_SEAL_FUTURE_WRITE: only the reader's fd protects the segment.
            libc::munmap(p, 4096);
        }
    }
}

#[test]
fn the_fd_is_handed_over_a_unix_socket() {
    use std::os::fd::AsRawFd;
    let mut seg = Segment::create(64 << 10, 1).unwrap();
    {
        let mut w = seg.write();
        w.layout(&[Spec::new("/sys/heartbeat", Shape::Scalar)])
            .unwrap();
        w.set_scalar(0, 3.0);
    }
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    shm::send_fd(&a, shm::readonly_fd(seg.fd()).unwrap().as_raw_fd()).unwrap();
    let fd = shm::recv_fd(&b).unwrap();
    let mut r = StatClient::from_fd(&fd).unwrap();
    assert_eq!(r.dump(&all()).unwrap()[0].value, StatValue::Scalar(3.0));
    // Something that is not an fd hand-over is refused with a clear error.
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    (&a).write_all(b"hello").unwrap();
    let e = shm::recv_fd(&b).unwrap_err();
    assert!(e.to_string().contains("not a Sluice stats socket"), "{e}");
}

fn stat(name: &str, value: StatValue) -> crate::Stat {
    crate::Stat {
        name: name.into(),
        value,
        symlink: false,
    }
}

#[test]
fn exposition_uses_vpp_v2_names_and_labels() {
    let stats = vec![
        stat("/sys/vector_rate", StatValue::Scalar(12.5)),
        stat("/sys/boottime", StatValue::Scalar(1000.0)),
        stat(
            "/sys/loops_per_worker",
            StatValue::Gauges(vec![vec![1.0], vec![2.0]]),
        ),
        stat(
            "/buffer-pools/default-numa-0/cached",
            StatValue::Scalar(256.0),
        ),
        stat(
            "/if/names",
            StatValue::Names(vec!["local0".into(), "".into(), "host-\"x\"".into()]),
        ),
        stat(
            "/if/rx",
            StatValue::Combined(vec![vec![(1, 64), (2, 128), (3, 192)]]),
        ),
        stat("/if/rx-miss", StatValue::Simple(vec![vec![0, 5, 7]])),
        stat(
            "/sys/node/names",
            StatValue::Names(vec!["ip4-lookup".into()]),
        ),
        stat("/sys/node/calls", StatValue::Simple(vec![vec![4], vec![6]])),
        stat(
            "/err/ip4-input/bad_checksum",
            StatValue::Simple(vec![vec![1], vec![0]]),
        ),
        stat(
            "/err/eth0/0-tx/tx_error",
            StatValue::Simple(vec![vec![2], vec![3]]),
        ),
    ];
    let o = prometheus::render(&stats, &Default::default(), 1100.0);
    let has = |l: &str| assert!(o.lines().any(|x| x == l), "missing `{l}' in\n{o}");
    has("sys_vector_rate 12.5");
    has("sys_uptime 100");
    has("# TYPE sys_vector_rate gauge");
    has("sys_loops_per_worker{index=\"0\",thread=\"1\"} 2");
    has("buffer_pools_cached{pool=\"default-numa-0\"} 256");
    has("interfaces_rx_packets{interface=\"local0\",index=\"0\",thread=\"0\"} 1");
    has("interfaces_rx_bytes{interface=\"host-\\\"x\\\"\",index=\"2\",thread=\"0\"} 192");
    has("interfaces_rx_miss{interface=\"host-\\\"x\\\"\",index=\"2\",thread=\"0\"} 7");
    has("# TYPE interfaces_rx_packets untyped");
    has("nodes_calls{node=\"ip4-lookup\",index=\"0\",thread=\"1\"} 6");
    has("err{node=\"ip4-input\",error=\"bad_checksum\",index=\"0\",thread=\"0\"} 1");
    has("err{node=\"eth0/0-tx\",error=\"tx_error\",index=\"0\",thread=\"1\"} 3");
    assert!(
        !o.contains("index=\"1\",thread=\"0\"} 2"),
        "deleted interface left out"
    );
    // Each family: one HELP, one TYPE, samples together.
    let mut seen = std::collections::HashSet::new();
    let mut cur = String::new();
    for l in o.lines() {
        if let Some(r) = l.strip_prefix("# TYPE ") {
            let f = r.split(' ').next().unwrap().to_string();
            assert!(seen.insert(f.clone()), "family {f} twice");
            cur = f;
        } else if !l.starts_with('#') {
            let name = l.split(['{', ' ']).next().unwrap();
            assert_eq!(name, cur, "sample outside its family: {l}");
        }
    }
    let p = prometheus::render(
        &stats,
        &prometheus::Options {
            prefix: "vpp_".into(),
        },
        1100.0,
    );
    assert!(p.contains("\nvpp_interfaces_rx_packets{"), "{p}");
    assert!(p.lines().all(|l| l.starts_with("# HELP vpp_")
        || l.starts_with("# TYPE vpp_")
        || l.starts_with("vpp_")));
}

fn http_get(addr: std::net::SocketAddr, req: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(req).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn metrics_server_answers_and_refuses_bad_requests() {
    use crate::http::{Limits, MetricsServer};
    let limits = Limits {
        max_clients: 3,
        max_request: 1024,
        timeout: Duration::from_millis(700),
    };
    let srv = MetricsServer::start(
        "127.0.0.1:0".parse().unwrap(),
        limits,
        Box::new(|| Ok("sys_heartbeat 1\n".into())),
    )
    .unwrap();
    let a = srv.local_addr();
    let r = http_get(
        a,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n",
    );
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
    assert!(r.contains("Content-Type: text/plain; version=0.0.4"), "{r}");
    assert!(r.ends_with("\r\n\r\nsys_heartbeat 1\n"), "{r}");
    let r = http_get(a, b"GET /metrics?x=1 HTTP/1.0\n\n");
    assert!(r.starts_with("HTTP/1.1 200"), "bare LFs and a query: {r}");
    let r = http_get(a, b"HEAD /metrics HTTP/1.1\r\n\r\n");
    assert!(
        r.starts_with("HTTP/1.1 200") && r.ends_with("\r\n\r\n"),
        "{r}"
    );
    assert!(r.contains("Content-Length: 16"), "{r}");
    let r = http_get(a, b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc");
    assert!(
        r.starts_with("HTTP/1.1 405") && r.contains("Allow: GET, HEAD"),
        "{r}"
    );
    assert!(http_get(a, b"GET /nope HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
    assert!(http_get(a, b"GET / HTTP/1.1\r\n\r\n").contains("href=\"/metrics\""));
    for bad in [
        &b"garbage\r\n\r\n"[..],
        b"GET /metrics\r\n\r\n",
        b"GET /metrics HTTP/2.0\r\n\r\n",
        b"GET metrics HTTP/1.1\r\n\r\n",
        b"GET /m\xffetrics HTTP/1.1\r\n\r\n",
        b"GET  /metrics HTTP/1.1\r\n\r\n",
    ] {
        let r = http_get(a, bad);
        assert!(r.starts_with("HTTP/1.1 400"), "{bad:?}: {r}");
    }
    let mut big = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
    big.extend(std::iter::repeat_n(b'a', 4000));
    let r = http_get(a, &big);
    assert!(r.starts_with("HTTP/1.1 431"), "{r}");
    // Silent clients take the slots; the next is refused, and once they time out the server
    // answers again.
    let silent: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(a).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));
    let r = http_get(a, b"GET /metrics HTTP/1.1\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 503"), "{r}");
    let t0 = Instant::now();
    loop {
        let r = http_get(a, b"GET /metrics HTTP/1.1\r\n\r\n");
        if r.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "never served again: {r}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(silent);
    let c = &srv.counters;
    assert!(c.scrapes.load(Ordering::Relaxed) >= 4);
    assert!(c.client_errors.load(Ordering::Relaxed) >= 9);
    assert!(c.refused.load(Ordering::Relaxed) >= 1);
    assert!(c.timeouts.load(Ordering::Relaxed) >= 3);
    // A failing exposition is a 503, not a hang.
    let srv2 = MetricsServer::start(
        "127.0.0.1:0".parse().unwrap(),
        Limits::default(),
        Box::new(|| Err("segment busy".into())),
    )
    .unwrap();
    let r = http_get(srv2.local_addr(), b"GET /metrics HTTP/1.1\r\n\r\n");
    assert!(
        r.starts_with("HTTP/1.1 503") && r.ends_with("segment busy\n"),
        "{r}"
    );
}
