//! L2 benchmarks: cross-connect and bridge-domain forwarding with 1 and 1M static MACs, and
//! learning under a flood of new source MACs.
//! pg0 replays 4096 64-byte frames (destinations spread over the MACs) -> ethernet-input ->
//! l2-input -> interface-output -> pg1 (pg-tx discards). The learning case replays 1M frames,
//! each from its own random source MAC to the one static MAC, into a bridge domain that
//! learns; its dynamic entries are flushed before every run, so every frame of every run is
//! a new source (a FIB miss and a learning event, applied by `l2-learn-process` in the same
//! thread, whose time counts in the Mpps).

use crate::{cli, write_pcap};
use sluice_cli::CommandTree;
use sluice_graph::Vlib;
use std::fmt::Write as _;
use std::time::Instant;

fn mac(i: u32) -> [u8; 6] {
    [
        0x02,
        0x10,
        (i >> 24) as u8,
        (i >> 16) as u8,
        (i >> 8) as u8,
        i as u8,
    ]
}

fn frames(n_macs: u32) -> Vec<Vec<u8>> {
    let mut x = 0x9e37_79b9u32;
    (0..4096u32)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            frame(mac(x % n_macs), [0x02, 0x20, 0, 0, 0, 1])
        })
        .collect()
}

fn frame(dst: [u8; 6], src: [u8; 6]) -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[0..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    f
}

/// Frames of the learning flood: to MAC 0, each from a distinct random unicast source.
const FLOOD_FRAMES: u32 = 1 << 20;

fn flood_frames() -> Vec<Vec<u8>> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut seen = std::collections::HashSet::new();
    let mut v = Vec::with_capacity(FLOOD_FRAMES as usize);
    while v.len() < FLOOD_FRAMES as usize {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_be_bytes();
        // Locally administered unicast, never 02:10:.. (the static MACs).
        let src = [0x06, b[3], b[4], b[5], b[6], b[7]];
        if seen.insert(src) {
            v.push(frame(mac(0), src));
        }
    }
    v
}

const PATH: [&str; 4] = ["ethernet-input", "l2-input", "interface-output", "pg-tx"];

#[allow(clippy::too_many_arguments)]
fn run(
    o: &crate::Opts,
    name: &str,
    setup: &dyn Fn(&mut Vlib, &CommandTree<Vlib>),
    before: &dyn Fn(&mut Vlib, &CommandTree<Vlib>),
    pcap_name: &str,
    frames: &dyn Fn() -> Vec<Vec<u8>>,
    dir: &std::path::Path,
    out: &mut String,
    json: &mut Vec<String>,
) -> f64 {
    if o.only.as_ref().is_some_and(|w| !name.contains(w.as_str())) {
        return 0.0;
    }
    let (mut vm, t) = crate::build(0);
    for c in [
        "create packet-generator interface pg0",
        "create packet-generator interface pg1",
        "set interface state pg0 up",
        "set interface state pg1 up",
    ] {
        cli(&mut vm, &t, c);
    }
    let t0 = Instant::now();
    setup(&mut vm, &t);
    let setup_s = t0.elapsed().as_secs_f64();
    let pcap = dir.join(pcap_name);
    write_pcap(&pcap, &frames());
    let r = crate::replay_path(
        o,
        vm,
        &t,
        crate::Replay {
            before,
            ..crate::Replay::new(&pcap, &PATH, name)
        },
    );
    let (a, m, b) = r.mpps;
    let node: Vec<f64> = r.node_clocks.iter().map(|c| c.1).collect();
    let path: f64 = node.iter().sum();
    let _ = writeln!(
        out,
        "| {name} | {a:.2} | {m:.2} | {b:.2} | {path:.1} | {} | {setup_s:.2} |",
        node.iter()
            .map(|c| format!("{c:.1}"))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    json.push(format!(
        "\"l2_{}\": {{\"mpps\": [{a:.3}, {m:.3}, {b:.3}], \"path_clocks\": {path:.2}, \"nodes\": {}}}",
        name.replace(' ', "_"),
        crate::nodes_json(&r.node_clocks)
    ));
    m
}

/// Runs the L2 benchmarks.
pub fn bench_l2(o: &crate::Opts, out: &mut String, json: &mut Vec<String>) {
    let mut names = vec!["xconnect", "bridge, 1 MAC"];
    if !o.quick {
        names.extend([
            "bridge, 1M MACs",
            "bridge, learning flood (new source MACs)",
        ]);
    }
    crate::check_only(o, &names, false);
    let dir = crate::inputs_dir(o, "sluice-bench-l2");
    let _ = writeln!(out, "## L2 forwarding, one core, 64-byte frames\n");
    let _ = writeln!(
        out,
        "| case | Mpps min | median | max | path clk/pkt | {} | setup s |\n|---|---|---|---|---|---|---|---|---|---|",
        PATH.join(" | ")
    );
    let nothing = |_: &mut Vlib, _: &CommandTree<Vlib>| {};
    run(
        o,
        "xconnect",
        &|vm, t| {
            cli(vm, t, "set interface l2 xconnect pg0 pg1");
        },
        &nothing,
        "l2-1.pcap",
        &|| frames(1),
        &dir,
        out,
        json,
    );
    let bridge = |n: u32, learn: bool| {
        move |vm: &mut Vlib, t: &CommandTree<Vlib>| {
            if learn {
                cli(vm, t, "create bridge-domain 1 learn 1 mac-age 1");
            } else {
                cli(vm, t, "create bridge-domain 1 learn 0");
            }
            cli(vm, t, "set interface l2 bridge pg0 1");
            cli(vm, t, "set interface l2 bridge pg1 1");
            for i in 0..n {
                let m = mac(i);
                cli(
                    vm,
                    t,
                    &format!(
                        "l2fib add {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x} 1 pg1 static",
                        m[0], m[1], m[2], m[3], m[4], m[5]
                    ),
                );
            }
        }
    };
    let one = run(
        o,
        "bridge, 1 MAC",
        &bridge(1, false),
        &nothing,
        "l2-1.pcap",
        &|| frames(1),
        &dir,
        out,
        json,
    );
    if !o.quick {
        let big = run(
            o,
            "bridge, 1M MACs",
            &bridge(1_000_000, false),
            &nothing,
            "l2-1000000.pcap",
            &|| frames(1_000_000),
            &dir,
            out,
            json,
        );
        if big > 0.0 && one > 0.0 {
            let _ = writeln!(out, "\nbridge 1M MACs / 1 MAC: {:.2}\n", big / one);
        }
        // Every run starts with only the static MAC: the learned ones age out at once when
        // the aging pass runs with the clock a day ahead.
        run(
            o,
            "bridge, learning flood (new source MACs)",
            &bridge(1, true),
            &|vm, t| {
                cli(vm, t, "test l2fib age 1 advance 1440");
            },
            "l2-flood.pcap",
            &flood_frames,
            &dir,
            out,
            json,
        );
    }
    crate::done_with_inputs(o, &dir);
}
