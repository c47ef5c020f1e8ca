//! Statistics segment benchmark (`sluice-bench stats`): a runtime with a worker (two threads)
//! and 1000 loopback interfaces, its segment (every interface, node and error counter), and:
//!
//! - the collector's update (what the main thread pays every `update-interval`);
//! - a reader's consistent snapshot of `/if/` (1000 interfaces × 2 threads × 8 vectors) and of
//!   the whole segment;
//! - a `/metrics` scrape over HTTP from the real server (render + transfer of every interface,
//!   node and error counter).
//!
//! Each is repeated `--runs` times (at least 20); min/median/max are reported.

use crate::{cli, stats};
use sluice_stats::collector::{StatsConfig, StatsExt, StatsSegment};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

const INTERFACES: usize = 1000;

fn ms(v: (f64, f64, f64)) -> String {
    format!("{:.3} | {:.3} | {:.3}", v.0 * 1e3, v.1 * 1e3, v.2 * 1e3)
}

pub(crate) fn bench_stats(o: &crate::Opts, out: &mut String, json: &mut Vec<String>) {
    let runs = o.runs.max(20);
    let (mut vm, t) = crate::build(1);
    for _ in 0..INTERFACES {
        cli(&mut vm, &t, "create loopback interface");
    }
    let dir = std::env::temp_dir().join(format!("sluice-bench-stats-{}", std::process::id()));
    StatsSegment::start(
        &mut vm,
        &StatsConfig::default(),
        &dir.join("stats.sock"),
        &sluice_infra::unix_socket::SocketPerms {
            mode: 0o660,
            group: None,
        },
        true,
    )
    .expect("statistics segment");
    let mut ext = vm.take_ext::<StatsExt>();
    let seg = ext.0.as_mut().expect("segment");
    let mut upd = Vec::new();
    for _ in 0..runs {
        let t0 = Instant::now();
        seg.update(&vm);
        upd.push(t0.elapsed().as_secs_f64());
    }
    let mut client = seg.reader().expect("reader");
    vm.put_ext(ext);
    let h = client.header().expect("header");
    let mut rd_if = Vec::new();
    let mut rd_all = Vec::new();
    let mut n_if = 0;
    for _ in 0..runs {
        let t0 = Instant::now();
        let d = client.dump(&["^/if/".into()]).expect("dump");
        rd_if.push(t0.elapsed().as_secs_f64());
        n_if = d.len();
        let t0 = Instant::now();
        let _ = client.dump(&[]).expect("dump");
        rd_all.push(t0.elapsed().as_secs_f64());
    }
    let srv = sluice_stats::collector::start_metrics(&mut vm, "127.0.0.1:0".parse().unwrap(), "")
        .expect("metrics server");
    let addr = srv.local_addr();
    let mut scrape = Vec::new();
    let (mut bytes, mut lines) = (0, 0);
    for _ in 0..runs {
        let t0 = Instant::now();
        let mut s = std::net::TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n")
            .unwrap();
        let mut r = Vec::new();
        s.read_to_end(&mut r).unwrap();
        scrape.push(t0.elapsed().as_secs_f64());
        assert!(r.starts_with(b"HTTP/1.1 200"), "scrape failed");
        bytes = r.len();
        lines = r.iter().filter(|&&c| c == b'\n').count();
    }
    drop(srv);
    let (u, a, s, i) = (stats(upd), stats(rd_all), stats(scrape), stats(rd_if));
    let _ = writeln!(
        out,
        "## Statistics segment: {INTERFACES} interfaces, 2 threads, {} nodes\n\n\
         {} entries, {} KiB used; /metrics: {} KiB, {} lines\n\n\
         | operation | min ms | median ms | max ms |\n|---|---|---|---|\n\
         | collector update (main thread, every update-interval) | {} |\n\
         | reader: snapshot of /if/ ({n_if} entries) | {} |\n\
         | reader: snapshot of the whole segment | {} |\n\
         | /metrics scrape over HTTP (target <= 50 ms) | {} |\n",
        vm.registry.nodes().len(),
        h.entries,
        h.used / 1024,
        bytes / 1024,
        lines,
        ms(u),
        ms(i),
        ms(a),
        ms(s),
    );
    json.push(format!(
        "\"stats\": {{\"interfaces\": {INTERFACES}, \"entries\": {}, \"update_ms\": [{:.4}, {:.4}, {:.4}], \"read_if_ms\": [{:.4}, {:.4}, {:.4}], \"read_all_ms\": [{:.4}, {:.4}, {:.4}], \"scrape_ms\": [{:.4}, {:.4}, {:.4}], \"metrics_bytes\": {bytes}}}",
        h.entries,
        u.0 * 1e3, u.1 * 1e3, u.2 * 1e3,
        i.0 * 1e3, i.1 * 1e3, i.2 * 1e3,
        a.0 * 1e3, a.1 * 1e3, a.2 * 1e3,
        s.0 * 1e3, s.1 * 1e3, s.2 * 1e3,
    ));
    vm.put_ext(StatsExt(None));
    vm.stop_workers();
    let _ = std::fs::remove_dir_all(&dir);
}
