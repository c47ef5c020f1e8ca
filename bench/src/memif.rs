//! memif benchmark in one process: a master and a slave memif interface of the same
//! instance connected to each other over one socket, so one thread runs both ends and the
//! runtime statistics (or callgrind) give `memif-tx` and `memif-input` their own clocks:
//!
//! pg0 -> ethernet-input -> l2-input (xconnect) -> interface-output -> memif-tx (memif1/0,
//! master) ==ring==> memif-input (memif2/0, slave) -> ethernet-input -> l2-input
//! (xconnect) -> interface-output -> pg1 (pg-tx discards); the `s2m` cases swap the roles
//! (memif1/0 the slave), the `zc` cases make the slave `zero-copy` (on a shared buffer
//! arena): its rx on M2S, its tx on S2M.
//!
//! The two-process pair (one core each) is `scripts/memif-bench.sh`; this one isolates the
//! nodes' own cost without the second core's cache-line traffic. `ethernet-input`,
//! `l2-input` and `interface-output` run twice per packet here (their clocks are per pass).

use crate::{cli, write_pcap};
use sluice_cli::CommandTree;
use sluice_graph::Vlib;
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

/// One case of the loop: frame size, and which end is the slave and whether it runs
/// zero-copy.
struct Case {
    size: usize,
    /// The sender (memif1/0) is the slave (S2M ring), else the master (M2S ring).
    s2m: bool,
    /// The slave is `zero-copy` (shared buffer arena): on M2S its rx, on S2M its tx.
    zc: bool,
}

impl Case {
    /// The case's name for `--only` and the table: `64`, `64 zc`, `64 s2m`, `64 zc s2m`.
    fn name(&self) -> String {
        let mut n = self.size.to_string();
        if self.zc {
            n.push_str(" zc");
        }
        if self.s2m {
            n.push_str(" s2m");
        }
        n
    }
}

/// Runs the memif loop at 64 and 1500 bytes, master -> slave and slave -> master, copy and
/// zero-copy (`--only <case name>`: one of them, e.g. `--only 64` or `--only "64 zc s2m"`).
pub fn bench_memif(o: &crate::Opts, out: &mut String, json: &mut Vec<String>) {
    let mut cases = Vec::new();
    for s2m in [false, true] {
        for zc in [false, true] {
            for size in [64usize, 1500] {
                cases.push(Case { size, s2m, zc });
            }
        }
    }
    let names: Vec<String> = cases.iter().map(Case::name).collect();
    crate::check_only(
        o,
        &names.iter().map(String::as_str).collect::<Vec<_>>(),
        true,
    );
    let dir = crate::inputs_dir(o, "sluice-bench-memif");
    let _ = writeln!(
        out,
        "## memif loop in one process (one core)\n\ncase: size, `zc` = the slave is zero-copy, `s2m` = the slave sends (else the master)\n\n| case | Mpps min | median | max | {} |\n|---|---|---|---|---|---|---|---|",
        PATH.join(" | ")
    );
    for c in cases {
        let name = c.name();
        if o.only.as_ref().is_some_and(|w| *w != name) {
            continue;
        }
        let size = c.size;
        let tag = name.replace(' ', "-");
        let (mut vm, t) = crate::build_pool(0, c.zc);
        let sock = dir.join(format!("m{tag}.sock"));
        // The same socket under a second name (a symlink): one instance refuses two socket
        // ids with one file name, and the slave's connect follows the link.
        let link = dir.join(format!("m{tag}-link.sock"));
        let _ = std::os::unix::fs::symlink(&sock, &link);
        let zc = if c.zc { " zero-copy" } else { "" };
        // memif1/0 sends, memif2/0 receives; the socket's listener is the master.
        let (r1, r2) = if c.s2m {
            (format!("slave{zc}"), "master".to_string())
        } else {
            ("master".to_string(), format!("slave{zc}"))
        };
        let (s1, s2) = if c.s2m {
            (&link, &sock)
        } else {
            (&sock, &link)
        };
        for cmd in [
            "create packet-generator interface pg0".to_string(),
            "create packet-generator interface pg1".to_string(),
            format!("create memif socket id 1 filename {}", s1.display()),
            format!("create memif socket id 2 filename {}", s2.display()),
            format!("create interface memif id 0 socket-id 1 {r1} ring-size 1024"),
            format!("create interface memif id 0 socket-id 2 {r2} ring-size 1024"),
            "set interface state pg0 up".to_string(),
            "set interface state pg1 up".to_string(),
            "set interface state memif1/0 up".to_string(),
            "set interface state memif2/0 up".to_string(),
            "set interface l2 xconnect pg0 memif1/0".to_string(),
            "set interface l2 xconnect memif2/0 pg1".to_string(),
        ] {
            cli(&mut vm, &t, &cmd);
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
        let pcap = dir.join(format!("memif-{tag}.pcap"));
        write_pcap(&pcap, &frames(size));
        // A zero-copy slave keeps its buffers in the rings while connected: delete the
        // interfaces and run the nodes until they dropped the connections (the last holder
        // frees the rings' buffers), at most 10 s; the leak check then tells.
        let down = |vm: &mut Vlib, t: &CommandTree<Vlib>| {
            for i in ["memif1/0", "memif2/0"] {
                cli(vm, t, &format!("delete interface memif {i}"));
            }
            let t0 = Instant::now();
            while vm.pool.stats().in_use > 0 && t0.elapsed() < Duration::from_secs(10) {
                vm.run_main_once();
            }
        };
        let r = crate::replay_path(
            o,
            vm,
            &t,
            crate::Replay {
                after: &down,
                ..crate::Replay::new(&pcap, &PATH, "memif")
            },
        );
        let (a, m, b) = r.mpps;
        let _ = writeln!(
            out,
            "| {name} | {a:.2} | {m:.2} | {b:.2} | {} |",
            r.node_clocks
                .iter()
                .map(|c| format!("{:.1}", c.1))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        let key = if c.s2m || c.zc {
            format!("memif_loop_{}", tag.replace('-', "_"))
        } else {
            format!("memif_loop_{size}")
        };
        json.push(format!(
            "\"{key}\": {{\"mpps\": [{a:.3}, {m:.3}, {b:.3}], \"nodes\": {}}}",
            crate::nodes_json(&r.node_clocks)
        ));
    }
    crate::done_with_inputs(o, &dir);
}
