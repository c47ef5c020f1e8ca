//! IPv4 forwarding benchmark: pg0 -> ethernet-input -> ip4-input -> ip4-lookup -> ip4-rewrite
//! -> interface-output -> pg1 (pg-tx discards), 64-byte frames whose destinations are spread
//! over the installed routes, for FIB sizes from 1 route to a real full table.

use crate::{cli, write_pcap, Rng};
use sluice_cli::CommandTree;
use sluice_graph::Vlib;
use std::fmt::Write as _;
use std::time::Instant;

/// IPv4 prefix-length mix of the real table in `../shared/data` (length, count).
const REAL_MIX: [(u8, u32); 25] = [
    (8, 16),
    (9, 13),
    (10, 38),
    (11, 103),
    (12, 299),
    (13, 581),
    (14, 1203),
    (15, 2100),
    (16, 13490),
    (17, 8235),
    (18, 13798),
    (19, 24870),
    (20, 42611),
    (21, 50750),
    (22, 108623),
    (23, 96510),
    (24, 537698),
    (25, 20),
    (26, 3),
    (27, 11),
    (28, 18),
    (29, 17),
    (30, 3),
    (31, 3),
    (32, 886),
];

fn mask(a: u32, l: u8) -> u32 {
    if l == 0 {
        0
    } else {
        a & (u32::MAX << (32 - l as u32))
    }
}

/// Routes to install: random prefixes with the real table's length mix, avoiding 10.0.0.0/8
/// (the test's own subnets) and multicast/reserved space.
fn random_routes(n: usize, seed: u64) -> Vec<(u32, u8)> {
    let total: u32 = REAL_MIX.iter().map(|x| x.1).sum();
    let mut r = Rng(seed);
    let mut seen = std::collections::HashSet::with_capacity(n);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let mut pick = (r.next() % total as u64) as u32;
        let mut len = 24;
        for &(l, c) in &REAL_MIX {
            if pick < c {
                len = l;
                break;
            }
            pick -= c;
        }
        let a = mask((r.next() >> 16) as u32, len);
        let top = a >> 24;
        if top == 10 || top == 0 || top >= 224 || top == 127 {
            continue;
        }
        if seen.insert((a, len)) {
            out.push((a, len));
        }
    }
    out
}

/// The real IPv4 table, if the shared data set is present.
fn real_table() -> Option<Vec<(u32, u8)>> {
    let mut out = Vec::new();
    for line in crate::real_table_lines()? {
        let Some((a, l)) = line.trim().split_once('/') else {
            continue;
        };
        let (Ok(a), Ok(l)) = (a.parse::<std::net::Ipv4Addr>(), l.parse::<u8>()) else {
            continue;
        };
        let a = u32::from(a);
        if a >> 24 == 10 || l > 32 {
            continue;
        }
        out.push((mask(a, l), l));
    }
    Some(out)
}

/// 4096 frames with destinations inside random routes of `routes`; with `alternate`, the
/// i-th frame's inside route `i % routes.len()` (the next-hop cases: consecutive packets
/// on different adjacencies).
fn frames(routes: &[(u32, u8)], seed: u64, alternate: bool) -> Vec<Vec<u8>> {
    let mut r = Rng(seed);
    // SLUICE_BENCH_IP4_HOSTMASK: only these host bits vary (a smaller FIB working set).
    let hostmask = crate::env_usize("SLUICE_BENCH_IP4_HOSTMASK").map_or(u32::MAX, |m| m as u32);
    // SLUICE_BENCH_IP_SLOW=<k>: every k-th packet's source is 10.7.0.1, whose low 16 bits
    // are pg0's 10.0.0.1's: `ip4-input` takes it off its fast path (the exact own-source
    // test) and forwards it. A mixed frame's cost.
    let slow_every = crate::env_usize("SLUICE_BENCH_IP_SLOW").unwrap_or(0);
    (0..4096)
        .map(|i| {
            let pick = (r.next() % routes.len() as u64) as usize;
            let (p, l) = routes[if alternate { i % routes.len() } else { pick }];
            let host = if l >= 32 {
                0
            } else {
                (r.next() as u32) & (u32::MAX >> l) & hostmask
            };
            let dst = p | host;
            let mut f = vec![0u8; 60];
            f[0..6].copy_from_slice(&[0x02, 0xfe, 0, 0, 0, 0]);
            f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x10]);
            f[12..14].copy_from_slice(&[0x08, 0x00]);
            let h = &mut f[14..];
            h[0] = 0x45;
            h[2..4].copy_from_slice(&46u16.to_be_bytes());
            h[8] = 64;
            h[9] = 17;
            let src = if slow_every != 0 && i % slow_every == 0 {
                [10, 7, 0, 1]
            } else {
                [10, 0, 0, 16]
            };
            h[12..16].copy_from_slice(&src);
            h[16..20].copy_from_slice(&dst.to_be_bytes());
            let c = sluice_wire::checksum::internet_checksum(&h[..20]);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            h[20..22].copy_from_slice(&(1024 + (i % 1000) as u16).to_be_bytes());
            h[22..24].copy_from_slice(&53u16.to_be_bytes());
            h[24..26].copy_from_slice(&26u16.to_be_bytes());
            f
        })
        .collect()
}

/// The next-hop cases' routes and next hops: 20.0.0.0/8 cut into `k` (a power of two)
/// routes, route j via 10.0.1.(2 + j) (a neighbor each), so that packets alternating
/// between the routes alternate between `k` adjacencies.
fn next_hop_routes(k: u32) -> (Vec<(u32, u8)>, Vec<u32>) {
    let bits = k.trailing_zeros() as u8;
    let routes = (0..k)
        .map(|j| (0x1400_0000 | (j << (24 - bits as u32)), 8 + bits))
        .collect();
    (routes, (0..k).map(|j| 0x0a00_0102 + j).collect())
}

/// The next-hop cases (only with `--only`): ip4-lookup's group-of-four shortcut missing on
/// every group, ip4-rewrite's adjacency changing every packet.
const NEXT_HOP_CASES: [(&str, u32); 2] = [("2 next hops", 2), ("4 next hops", 4)];

fn setup(vm: &mut Vlib, t: &CommandTree<Vlib>) {
    for c in [
        "create packet-generator interface pg0",
        "create packet-generator interface pg1",
        "set interface state pg0 up",
        "set interface state pg1 up",
        "set interface ip address pg0 10.0.0.1/24",
        "set interface ip address pg1 10.0.1.1/24",
        "ip neighbor pg1 10.0.1.2 02:00:00:00:01:02",
    ] {
        cli(vm, t, c);
    }
}

const PATH: [&str; 6] = [
    "ethernet-input",
    "ip4-input",
    "ip4-lookup",
    "ip4-rewrite",
    "interface-output",
    "pg-tx",
];

struct Case {
    name: String,
    routes: usize,
    insert_per_sec: f64,
    mpps: (f64, f64, f64),
    node_clocks: Vec<(String, f64)>,
}

/// Counter features the `--features` case enables, and the path with them.
const FEATURES: [&str; 2] = [
    "set interface feature pg0 ip4-unicast-count arc ip4-unicast",
    "set interface feature pg1 ip4-output-count arc ip4-output",
];
const FEATURE_PATH: [&str; 8] = [
    "ethernet-input",
    "ip4-input",
    "ip4-unicast-count",
    "ip4-lookup",
    "ip4-rewrite",
    "ip4-output-count",
    "interface-output",
    "pg-tx",
];

fn run_case(o: &crate::Opts, name: &str, routes: Vec<(u32, u8)>, dir: &std::path::Path) -> Case {
    run_case_with(o, name, routes, dir, &[], &PATH, &[0x0a00_0102])
}

/// One case: `routes` installed via `hops` (route j via `hops[j % hops.len()]`, each a
/// neighbor on pg1); with more than one next hop the packets alternate between the routes.
fn run_case_with(
    o: &crate::Opts,
    name: &str,
    routes: Vec<(u32, u8)>,
    dir: &std::path::Path,
    extra: &[&str],
    path: &[&str],
    hops: &[u32],
) -> Case {
    let (mut vm, t) = crate::build(0);
    setup(&mut vm, &t);
    for c in extra {
        cli(&mut vm, &t, c);
    }
    for (j, &h) in hops.iter().enumerate().skip(1) {
        let nh = std::net::Ipv4Addr::from(h);
        cli(
            &mut vm,
            &t,
            &format!("ip neighbor pg1 {nh} 02:00:00:00:01:{:02x}", 2 + j),
        );
    }
    let t0 = Instant::now();
    for (j, &(p, l)) in routes.iter().enumerate() {
        cli(
            &mut vm,
            &t,
            &format!(
                "ip route add {}/{l} via {}",
                std::net::Ipv4Addr::from(p),
                std::net::Ipv4Addr::from(hops[j % hops.len()])
            ),
        );
    }
    let insert_per_sec = routes.len() as f64 / t0.elapsed().as_secs_f64().max(1e-9);
    crate::keep_routes(
        o,
        &format!("ip4-{}.routes", routes.len()),
        routes
            .iter()
            .map(|&(p, l)| format!("{}/{l}", std::net::Ipv4Addr::from(p))),
    );
    let pcap = dir.join(format!("ip4-{}.pcap", routes.len()));
    write_pcap(&pcap, &frames(&routes, 0x5eed, hops.len() > 1));
    let r = crate::replay_path(
        o,
        vm,
        &t,
        crate::Replay {
            node: Some("ethernet-input"),
            ..crate::Replay::new(&pcap, path, name)
        },
    );
    Case {
        name: name.to_string(),
        routes: routes.len(),
        insert_per_sec,
        mpps: r.mpps,
        node_clocks: r.node_clocks,
    }
}

/// The `--features` case's name.
const FEATURES_CASE: &str = "1 route, 2 counter features";

/// Runs the IPv4 FIB-scale benchmark.
pub fn bench_ip4(o: &crate::Opts, out: &mut String, json: &mut Vec<String>) {
    let mut names = vec!["1 route"];
    names.extend(NEXT_HOP_CASES.map(|c| c.0));
    if o.features {
        // Runs whatever `--only` says.
        names.push(FEATURES_CASE);
    }
    crate::check_only(o, &names, false);
    let dir = crate::inputs_dir(o, "sluice-bench");
    // `--only <name>`: the cases whose name contains it, the next-hop cases among them.
    let only = |name: &str| o.only.as_ref().is_none_or(|w| name.contains(w.as_str()));
    let mut cases = Vec::new();
    if only("1 route") {
        cases.push(run_case(o, "1 route", vec![(0x1400_0000, 8)], &dir));
    }
    let with_features = o.features.then(|| {
        run_case_with(
            o,
            FEATURES_CASE,
            vec![(0x1400_0000, 8)],
            &dir,
            &FEATURES,
            &FEATURE_PATH,
            &[0x0a00_0102],
        )
    });
    if o.only.is_some() {
        for (name, k) in NEXT_HOP_CASES.into_iter().filter(|c| only(c.0)) {
            let (routes, hops) = next_hop_routes(k);
            cases.push(run_case_with(o, name, routes, &dir, &[], &PATH, &hops));
        }
    }
    if !o.quick && o.only.is_none() {
        cases.push(run_case(
            o,
            "255k random prefixes",
            random_routes(255_000, 1),
            &dir,
        ));
        cases.push(run_case(
            o,
            "1M random prefixes",
            random_routes(1_000_000, 2),
            &dir,
        ));
        if let Some(real) = real_table() {
            cases.push(run_case(o, "real IPv4 table", real, &dir));
        }
    }
    // Ratios against the 1-route case (NaN when `--only` left it out).
    let base = cases
        .iter()
        .find(|c| c.name == "1 route")
        .map_or(f64::NAN, |c| c.mpps.1);
    let _ = writeln!(
        out,
        "## IPv4 forwarding, one core, 64-byte frames, destinations spread over the FIB\n"
    );
    crate::table_header(
        out,
        &[&["FIB", "routes"][..], &crate::FIB_COLS].concat(),
        &PATH,
        &["route adds/s (CLI)"],
    );
    for c in &cases {
        let (path, nodes) = crate::clock_cells(&c.node_clocks);
        let _ = writeln!(
            out,
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} | {} | {:.0} |",
            c.name,
            c.routes,
            c.mpps.0,
            c.mpps.1,
            c.mpps.2,
            c.mpps.1 / base,
            path,
            nodes,
            c.insert_per_sec
        );
        json.push(format!(
            "\"ip4_{}\": {{\"routes\": {}, \"mpps\": [{:.3}, {:.3}, {:.3}], \"ratio\": {:.3}, \"path_clocks\": {:.2}, \"route_adds_per_sec\": {:.0}, \"nodes\": {}}}",
            c.name.replace(' ', "_"),
            c.routes,
            c.mpps.0,
            c.mpps.1,
            c.mpps.2,
            c.mpps.1 / base,
            path,
            c.insert_per_sec,
            crate::nodes_json(&c.node_clocks)
        ));
    }
    if let Some(c) = with_features {
        let (path, nodes) = crate::clock_cells(&c.node_clocks);
        out.push('\n');
        crate::table_header(
            out,
            &["with features", "Mpps min", "median", "max", "path clk/pkt"],
            &FEATURE_PATH,
            &[],
        );
        let _ = writeln!(
            out,
            "| {} | {:.2} | {:.2} | {:.2} | {:.1} | {} |",
            c.name, c.mpps.0, c.mpps.1, c.mpps.2, path, nodes
        );
        json.push(format!(
            "\"ip4_features\": {{\"mpps\": [{:.3}, {:.3}, {:.3}], \"path_clocks\": {:.2}}}",
            c.mpps.0, c.mpps.1, c.mpps.2, path
        ));
    }
    // Route insertion with the CLI `count` form.
    let (mut vm, t) = crate::build(0);
    setup(&mut vm, &t);
    let t0 = Instant::now();
    cli(
        &mut vm,
        &t,
        "ip route add count 1000000 20.0.0.0/24 via 10.0.1.2",
    );
    let rate = 1e6 / t0.elapsed().as_secs_f64();
    let _ = writeln!(
        out,
        "\n`ip route add count 1000000 20.0.0.0/24 via 10.0.1.2`: {rate:.0} routes/s\n"
    );
    json.push(format!("\"ip4_route_add_count_per_sec\": {rate:.0}"));
    vm.stop_workers();
    crate::done_with_inputs(o, &dir);
}
