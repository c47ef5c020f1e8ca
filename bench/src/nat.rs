//! NAT44-ED benchmark (plugins/nat44): in2out and out2in Mpps on one core with 1k, 100k and
//! 1M established UDP sessions on the pg path, the session setup rate, memory per session,
//! and the clocks per packet NAT adds to the plain IPv4 path (the same frames forwarded
//! without NAT).
//!
//! Path: pg0 (inside) or pg1 (outside) -> ethernet-input -> ip4-input -> nat44-ed-in2out |
//! nat44-ed-out2in -> ip4-lookup -> ip4-rewrite -> interface-output -> pg-tx. Frames visit
//! the sessions in a shuffled order (no locality the traffic would not have).
//!
//! Each case creates its sessions (the setup pass), then replays the shuffled frames: a
//! warm-up run of `--packets` / 2 (every flow once when that is at least the session count),
//! then the measured runs. Under callgrind, the established path alone (docs/nat.md,
//! "Session 16"):
//!
//! ```text
//! SLUICE_BENCH_CLOCK_SLOWDOWN=1000 valgrind --tool=callgrind --demangle=no \
//!   --zero-before=measured_run_starts --callgrind-out-file=cg.out \
//!   target/release/sluice-bench nat --quick --runs 1 --packets 204800 --only "100000 in2out"
//! scripts/callgrind-nodes.py cg.out 102400
//! ```
//!
//! `--zero-before` leaves the last measured run's 102,400 packets in the profile (not the
//! creations or the warm-up); the slowed clock keeps each flow's per-second LRU stamp
//! current between its warm-up and measured packets, as at full speed (callgrind runs the
//! code 50–100× slower, so otherwise every packet of a 100k table would take the session's
//! once-a-second path).

use crate::{cli, replay_path, write_pcap, Replay, Rng};
use sluice_cli::CommandTree;
use sluice_graph::Vlib;
use std::fmt::Write as _;
use std::time::Instant;

const POOL: u32 = 0x0a00_0164; // 10.0.1.100
const INSIDE_HOSTS: u32 = 16;

const PATH_I2O: [&str; 7] = [
    "ethernet-input",
    "ip4-input",
    "nat44-ed-in2out",
    "ip4-lookup",
    "ip4-rewrite",
    "interface-output",
    "pg-tx",
];
const PATH_O2I: [&str; 7] = [
    "ethernet-input",
    "ip4-input",
    "nat44-ed-out2in",
    "ip4-lookup",
    "ip4-rewrite",
    "interface-output",
    "pg-tx",
];
const PATH_IP4: [&str; 6] = [
    "ethernet-input",
    "ip4-input",
    "ip4-lookup",
    "ip4-rewrite",
    "interface-output",
    "pg-tx",
];

/// Session `i`: inside host, inside port, remote (unique per session, so the inside port is
/// kept on the outside).
fn session(i: u32) -> (u32, u16, u32) {
    let host = 0x0a00_0010 + i % INSIDE_HOSTS;
    let port = 1024 + (i / INSIDE_HOSTS) as u16;
    (host, port, 0x1400_0000 + i)
}

/// A 60-byte UDP/IPv4 frame to MAC `02:fe:00:00:00:<dst_mac>` from `src:sport` to
/// `dst:dport`, 18 bytes of zero payload, checksums set.
pub(crate) fn udp_frame(dst_mac: u8, src: u32, dst: u32, sport: u16, dport: u16) -> Vec<u8> {
    let mut l4 = [0u8; 26];
    l4[0..2].copy_from_slice(&sport.to_be_bytes());
    l4[2..4].copy_from_slice(&dport.to_be_bytes());
    l4[4..6].copy_from_slice(&26u16.to_be_bytes());
    ip4_frame(dst_mac, src, dst, 17, &l4)
}

/// An Ethernet frame to `02:fe:00:00:00:<dst_mac>` from `02:00:00:00:00:10` (the benches'
/// pg0 and its neighbour) of an IPv4 packet from `src` to `dst`: a 20-byte header (TTL 64,
/// protocol `proto`: 6 or 17, its checksum set) and the L4 bytes `l4`, whose checksum (TCP's
/// or UDP's, over the pseudo-header; NAT updates it incrementally) it sets; padded to 60
/// bytes.
pub(crate) fn ip4_frame(dst_mac: u8, src: u32, dst: u32, proto: u8, l4: &[u8]) -> Vec<u8> {
    let sum_at = match proto {
        6 => 16,
        17 => 6,
        _ => panic!("ip4_frame: protocol {proto}, not TCP or UDP"),
    };
    let ip_len = 20 + l4.len();
    let mut f = vec![0u8; (14 + ip_len).max(60)];
    f[0..6].copy_from_slice(&[0x02, 0xfe, 0, 0, 0, dst_mac]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x10]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let h = &mut f[14..];
    h[0] = 0x45;
    h[2..4].copy_from_slice(&(ip_len as u16).to_be_bytes());
    h[8] = 64;
    h[9] = proto;
    h[12..16].copy_from_slice(&src.to_be_bytes());
    h[16..20].copy_from_slice(&dst.to_be_bytes());
    let c = sluice_wire::checksum::internet_checksum(&h[..20]);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h[20..ip_len].copy_from_slice(l4);
    let mut ph = Vec::with_capacity(12 + l4.len());
    ph.extend_from_slice(&h[12..20]);
    ph.extend_from_slice(&[0, proto]);
    ph.extend_from_slice(&(l4.len() as u16).to_be_bytes());
    ph.extend_from_slice(l4);
    let u = sluice_wire::checksum::internet_checksum(&ph);
    h[20 + sum_at..22 + sum_at].copy_from_slice(&u.to_be_bytes());
    f
}

fn in2out_frames(order: &[u32]) -> Vec<Vec<u8>> {
    order
        .iter()
        .map(|&i| {
            let (h, p, r) = session(i);
            udp_frame(0, h, r, p, 53)
        })
        .collect()
}

fn out2in_frames(order: &[u32]) -> Vec<Vec<u8>> {
    order
        .iter()
        .map(|&i| {
            let (_, p, r) = session(i);
            udp_frame(1, r, POOL, 53, p)
        })
        .collect()
}

fn shuffled(n: u32, seed: u64) -> Vec<u32> {
    let mut v: Vec<u32> = (0..n).collect();
    let mut r = Rng(seed);
    for i in (1..v.len()).rev() {
        let j = (r.next() % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
    v
}

fn setup(vm: &mut Vlib, t: &CommandTree<Vlib>, nat_sessions: Option<u32>) {
    for c in [
        "create packet-generator interface pg0",
        "create packet-generator interface pg1",
        "set interface state pg0 up",
        "set interface state pg1 up",
        "set interface ip address pg0 10.0.0.1/24",
        "set interface ip address pg1 10.0.1.1/24",
        "ip neighbor pg1 10.0.1.2 02:00:00:00:01:02",
        "ip route add 20.0.0.0/8 via 10.0.1.2",
    ] {
        cli(vm, t, c);
    }
    for h in 0..INSIDE_HOSTS {
        cli(
            vm,
            t,
            &format!(
                "ip neighbor pg0 10.0.0.{} 02:00:00:00:00:{:02x}",
                16 + h,
                16 + h
            ),
        );
    }
    if let Some(n) = nat_sessions {
        for c in [
            format!("nat44 plugin enable sessions {n}"),
            "nat44 add address 10.0.1.100".to_string(),
            "set interface nat44 in pg0 out pg1".to_string(),
            "set nat timeout udp 1000000".to_string(),
        ] {
            cli(vm, t, &c);
        }
    }
}

/// Replays `pcap` (`n` frames) once from `source` and returns the seconds it took.
fn replay_once(vm: &mut Vlib, t: &CommandTree<Vlib>, pcap: &std::path::Path, n: u64) -> f64 {
    let sink = vm.registry.find("pg-tx").expect("pg-tx");
    cli(
        vm,
        t,
        &format!(
            "packet-generator new pcap {} source pg0 name setup limit {n} node ethernet-input",
            pcap.display()
        ),
    );
    let before = crate::total_vectors(vm, sink);
    cli(vm, t, "packet-generator enable");
    let t0 = Instant::now();
    while crate::total_vectors(vm, sink) < before + n && t0.elapsed().as_secs() < 300 {
        vm.run_main_once();
    }
    let dt = t0.elapsed().as_secs_f64();
    cli(vm, t, "packet-generator delete setup");
    dt
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|v| v.parse::<u64>().ok())
        })
        .map(|pages| pages * 4096)
        .unwrap_or(0)
}

fn summary_value(vm: &mut Vlib, t: &CommandTree<Vlib>, key: &str) -> u64 {
    cli(vm, t, "show nat44 summary")
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(0)
}

struct Case {
    sessions: u32,
    dir: &'static str,
    mpps: (f64, f64, f64),
    path_clocks: f64,
    nat_clocks: f64,
    setup_per_sec: f64,
    table_bytes_per_session: f64,
    rss_bytes_per_session: f64,
}

fn nat_case(o: &crate::Opts, n: u32, out2in: bool, dir: &std::path::Path) -> Case {
    let (mut vm, t) = crate::build(0);
    let rss0 = rss_bytes();
    setup(&mut vm, &t, Some(n.max(1024)));
    // Establish the sessions (in order: the setup rate is what we time here).
    let order: Vec<u32> = (0..n).collect();
    let setup_pcap = dir.join(format!("nat-setup-{n}.pcap"));
    write_pcap(&setup_pcap, &in2out_frames(&order));
    let dt = replay_once(&mut vm, &t, &setup_pcap, n as u64);
    let made = summary_value(&mut vm, &t, "total sessions: ");
    assert_eq!(made, n as u64, "sessions established");
    let table = summary_value(&mut vm, &t, "session table memory: ");
    let rss = rss_bytes().saturating_sub(rss0);
    let mix = shuffled(n, 0x5eed ^ n as u64);
    let frames = if out2in {
        out2in_frames(&mix)
    } else {
        in2out_frames(&mix)
    };
    let pcap = dir.join(format!(
        "nat-{}-{n}.pcap",
        if out2in { "o2i" } else { "i2o" }
    ));
    write_pcap(&pcap, &frames);
    let (src, path) = if out2in {
        ("pg1", &PATH_O2I[..])
    } else {
        ("pg0", &PATH_I2O[..])
    };
    let name = format!("nat {n} {}", if out2in { "out2in" } else { "in2out" });
    let r = replay_path(
        o,
        vm,
        &t,
        Replay {
            source: src,
            node: Some("ethernet-input"),
            ..Replay::new(&pcap, path, &name)
        },
    );
    let nat_clocks = r.node_clocks[2].1;
    let _ = std::fs::remove_file(&setup_pcap);
    let _ = std::fs::remove_file(&pcap);
    Case {
        sessions: n,
        dir: if out2in { "out2in" } else { "in2out" },
        mpps: r.mpps,
        path_clocks: r.node_clocks.iter().map(|x| x.1).sum(),
        nat_clocks,
        setup_per_sec: n as f64 / dt,
        table_bytes_per_session: table as f64 / n as f64,
        rss_bytes_per_session: rss as f64 / n as f64,
    }
}

/// The plain IPv4 path for the same in2out frames, NAT not configured.
fn base_case(o: &crate::Opts, n: u32, dir: &std::path::Path) -> ((f64, f64, f64), f64) {
    let (mut vm, t) = crate::build(0);
    setup(&mut vm, &t, None);
    let pcap = dir.join(format!("nat-base-{n}.pcap"));
    write_pcap(&pcap, &in2out_frames(&shuffled(n, 0x5eed ^ n as u64)));
    let r = replay_path(
        o,
        vm,
        &t,
        Replay {
            node: Some("ethernet-input"),
            ..Replay::new(&pcap, &PATH_IP4, "ip4 base")
        },
    );
    let _ = std::fs::remove_file(&pcap);
    (r.mpps, r.node_clocks.iter().map(|x| x.1).sum())
}

/// Runs the NAT44-ED benchmark.
pub fn bench_nat(o: &crate::Opts, out: &mut String, json: &mut Vec<String>) {
    let sizes: &[u32] = if o.quick && o.only.is_none() {
        &[1_000, 100_000]
    } else {
        &[1_000, 100_000, 1_000_000]
    };
    let names: Vec<String> = sizes
        .iter()
        .flat_map(|n| [format!("{n} in2out"), format!("{n} out2in")])
        .collect();
    crate::check_only(
        o,
        &names.iter().map(String::as_str).collect::<Vec<_>>(),
        false,
    );
    let dir = std::env::temp_dir().join(format!("sluice-bench-nat-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let _ = writeln!(
        out,
        "## NAT44-ED, one core, 64-byte UDP frames, established sessions visited in shuffled order\n"
    );
    let _ = writeln!(
        out,
        "| sessions | direction | Mpps min | median | max | path clk/pkt | NAT node clk/pkt | + clk/pkt over ip4 | plain ip4 Mpps (median) | session setup/s | table B/session | RSS B/session |"
    );
    let _ = writeln!(out, "|{}", "---|".repeat(12));
    // `--only "<sessions> <direction>"` (e.g. `1000 in2out`): one case (callgrind runs).
    let want = |n: u32, d: &str| {
        o.only
            .as_deref()
            .is_none_or(|w| format!("{n} {d}").contains(w))
    };
    for &n in sizes {
        if !want(n, "in2out") && !want(n, "out2in") {
            continue;
        }
        let (base_mpps, base_clocks) = base_case(o, n, &dir);
        for out2in in [false, true] {
            if !want(n, if out2in { "out2in" } else { "in2out" }) {
                continue;
            }
            let c = nat_case(o, n, out2in, &dir);
            let added = c.path_clocks - base_clocks;
            let _ = writeln!(
                out,
                "| {} | {} | {:.2} | {:.2} | {:.2} | {:.1} | {:.1} | {:+.1} | {:.2} | {:.0} | {:.0} | {:.0} |",
                c.sessions,
                c.dir,
                c.mpps.0,
                c.mpps.1,
                c.mpps.2,
                c.path_clocks,
                c.nat_clocks,
                added,
                base_mpps.1,
                c.setup_per_sec,
                c.table_bytes_per_session,
                c.rss_bytes_per_session
            );
            json.push(format!(
                "\"nat_{}_{}\": {{\"mpps\": [{:.3}, {:.3}, {:.3}], \"path_clocks\": {:.2}, \"nat_node_clocks\": {:.2}, \"added_clocks\": {:.2}, \"ip4_base_mpps\": {:.3}, \"setup_per_sec\": {:.0}, \"table_bytes_per_session\": {:.1}, \"rss_bytes_per_session\": {:.1}}}",
                c.dir,
                c.sessions,
                c.mpps.0,
                c.mpps.1,
                c.mpps.2,
                c.path_clocks,
                c.nat_clocks,
                added,
                base_mpps.1,
                c.setup_per_sec,
                c.table_bytes_per_session,
                c.rss_bytes_per_session
            ));
        }
    }
    let _ = writeln!(
        out,
        "\nSetup rate: the first pass of in2out frames, each creating its session (one core, path included). Table bytes: the key table's array and the session pool (`show nat44 summary`); RSS: the process's growth from before the NAT configuration to after the sessions were made.\n"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
