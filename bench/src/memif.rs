//! memif benchmark in one process: a master and a slave memif interface of the same
//! instance connected to each other over one socket, so one thread runs both ends and the
//! runtime statistics (or callgrind) give `memif-tx` and `memif-input` their own clocks:
//!
//! pg0 -> ethernet-input -> l2-input (xconnect) -> interface-output -> memif-tx (memif1/0,
//! master, copy mode) ==ring==> memif-input (memif2/0, slave) -> ethernet-input -> l2-input
//! (xconnect) -> interface-output -> pg1 (pg-tx discards).
//!
//! The two-process pair (one core each) is `scripts/memif-bench.sh`; this one isolates the
//! nodes' own cost without the second core's cache-line traffic. `ethernet-input`,
//! `l2-input` and `interface-output` run twice per packet here (their clocks are per pass).

use crate::{cli, write_pcap};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

const PATH: [&str; 4] = ["memif-tx", "memif-input", "l2-input", "pg-tx"];

fn frames(size: usize) -> Vec<Vec<u8>> {
    (0..4096u32)
        .map(|i| {
            let mut f = vec![0u8; size];
            f[0..6].copy_from_slice(&[0x02, 0x10, 0, 0, (i >> 8) as u8, i as u8]);
            f[6..12].copy_from_slice(&[0x02, 0x20, 0, 0, 0, 1]);
            f[12..14].copy_from_slice(&[0x88, 0xb5]);
            f
        })
        .collect()
}

/// Runs the memif loop at 64 and 1500 bytes (`--only 64` or `--only 1500`: one of them).
pub fn bench_memif(o: &crate::Opts, out: &mut String, json: &mut Vec<String>) {
    let dir = crate::inputs_dir(o, "sluice-bench-memif");
    let _ = writeln!(
        out,
        "## memif loop in one process (copy mode, one core)\n\n| size | Mpps min | median | max | {} |\n|---|---|---|---|---|---|---|---|",
        PATH.join(" | ")
    );
    for size in [64usize, 1500] {
        if o.only.as_ref().is_some_and(|w| *w != size.to_string()) {
            continue;
        }
        let (mut vm, t) = crate::build(0);
        let sock = dir.join(format!("m{size}.sock"));
        // The same socket under a second name (a symlink): one instance refuses two socket
        // ids with one file name, and the slave's connect follows the link.
        let link = dir.join(format!("m{size}-link.sock"));
        let _ = std::os::unix::fs::symlink(&sock, &link);
        for c in [
            "create packet-generator interface pg0".to_string(),
            "create packet-generator interface pg1".to_string(),
            format!("create memif socket id 1 filename {}", sock.display()),
            format!("create memif socket id 2 filename {}", link.display()),
            "create interface memif id 0 socket-id 1 master ring-size 1024".to_string(),
            "create interface memif id 0 socket-id 2 slave ring-size 1024".to_string(),
            "set interface state pg0 up".to_string(),
            "set interface state pg1 up".to_string(),
            "set interface state memif1/0 up".to_string(),
            "set interface state memif2/0 up".to_string(),
            "set interface l2 xconnect pg0 memif1/0".to_string(),
            "set interface l2 xconnect memif2/0 pg1".to_string(),
        ] {
            cli(&mut vm, &t, &c);
        }
        let t0 = Instant::now();
        loop {
            vm.run_main_once();
            let s = cli(&mut vm, &t, "show memif");
            if s.matches("connected").count() >= 2 && !s.contains("disconnected") {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "memif pair did not connect: {s}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let pcap = dir.join(format!("memif-{size}.pcap"));
        write_pcap(&pcap, &frames(size));
        let r = crate::replay_path(o, vm, &t, &pcap, None, &PATH, "memif");
        let (a, m, b) = r.mpps;
        let _ = writeln!(
            out,
            "| {size} | {a:.2} | {m:.2} | {b:.2} | {} |",
            r.node_clocks
                .iter()
                .map(|c| format!("{:.1}", c.1))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        json.push(format!(
            "\"memif_loop_{size}\": {{\"mpps\": [{a:.3}, {m:.3}, {b:.3}], \"nodes\": {}}}",
            crate::nodes_json(&r.node_clocks)
        ));
    }
    crate::done_with_inputs(o, &dir);
}
