//! IPv6 forwarding benchmark: pg0 -> ethernet-input -> ip6-input -> ip6-lookup -> ip6-rewrite
//! -> interface-output -> pg1 (pg-tx discards), 78-byte frames (the IPv6 equivalent of 64-byte
//! IPv4 frames) whose destinations are spread over the installed routes, for FIB sizes from 1
//! route to the real IPv6 table (160k) and a 255k table built from it.

use crate::{cli, write_pcap, Rng};
use sluice_cli::CommandTree;
use sluice_graph::Vlib;
use std::fmt::Write as _;
use std::net::Ipv6Addr;
use std::time::Instant;

fn mask(a: u128, l: u8) -> u128 {
    sluice_fib::ip6::mask(a, l)
}

/// The real IPv6 table, if the shared data set is present (fd00::/8, our test space, left out).
fn real_table() -> Option<Vec<(u128, u8)>> {
    let mut out = Vec::new();
    for line in crate::real_table_lines()? {
        let Some((a, l)) = line.trim().split_once('/') else {
            continue;
        };
        let (Ok(a), Ok(l)) = (a.parse::<Ipv6Addr>(), l.parse::<u8>()) else {
            continue;
        };
        let a = u128::from(a);
        if a >> 120 == 0xfd || l > 128 {
            continue;
        }
        out.push((mask(a, l), l));
    }
    Some(out)
}

/// The real table grown to `n` prefixes with /48 more-specifics inside its own /20../44
/// blocks (how real tables grow: de-aggregation inside allocated space). Random /48s spread
/// over all of 2000::/3 would be unrealistic and cost one group per level each.
fn grown_table(real: &[(u128, u8)], n: usize, seed: u64) -> Vec<(u128, u8)> {
    let parents: Vec<(u128, u8)> = real
        .iter()
        .copied()
        .filter(|&(_, l)| (20..=44).contains(&l))
        .collect();
    let mut seen: std::collections::HashSet<(u128, u8)> = real.iter().copied().collect();
    let mut out = real.to_vec();
    let mut r = Rng(seed);
    while out.len() < n && !parents.is_empty() {
        let (p, l) = parents[(r.next() % parents.len() as u64) as usize];
        let sub = ((r.next() as u128) << 64 | r.next() as u128) & (u128::MAX >> l);
        let q = mask(p | sub, 48);
        if seen.insert((q, 48)) {
            out.push((q, 48));
        }
    }
    out
}

/// 4096 destinations inside random routes of `routes`.
fn destinations(routes: &[(u128, u8)], seed: u64) -> Vec<u128> {
    let mut r = Rng(seed);
    (0..4096)
        .map(|_| {
            let (p, l) = routes[(r.next() % routes.len() as u64) as usize];
            let host = ((r.next() as u128) << 64 | r.next() as u128) & (u128::MAX >> l.min(127));
            if l >= 128 {
                p
            } else {
                p | host
            }
        })
        .collect()
}

/// 4096 frames with destinations inside random routes of `routes`.
fn frames(routes: &[(u128, u8)], seed: u64) -> Vec<Vec<u8>> {
    // SLUICE_BENCH_IP_SLOW=<k>: every k-th packet's source is fd01::7:1, whose low 16 bits
    // are pg0's fd01::1's: `ip6-input` takes it off its fast path (the exact own-source
    // test) and forwards it. A mixed frame's cost.
    let slow_every = crate::env_usize("SLUICE_BENCH_IP_SLOW").unwrap_or(0);
    destinations(routes, seed)
        .into_iter()
        .enumerate()
        .map(|(i, dst)| {
            let mut f = vec![0u8; 78];
            f[0..6].copy_from_slice(&[0x02, 0xfe, 0, 0, 0, 0]);
            f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x10]);
            f[12..14].copy_from_slice(&[0x86, 0xdd]);
            let h = &mut f[14..];
            h[0] = 0x60;
            h[4..6].copy_from_slice(&24u16.to_be_bytes());
            h[6] = 17;
            h[7] = 64;
            let src: u128 = if slow_every != 0 && i % slow_every == 0 {
                0xfd01_0000_0000_0000_0000_0000_0007_0001
            } else {
                0xfd01_0000_0000_0000_0000_0000_0000_0010
            };
            h[8..24].copy_from_slice(&src.to_be_bytes());
            h[24..40].copy_from_slice(&dst.to_be_bytes());
            h[40..42].copy_from_slice(&(1024 + (i % 1000) as u16).to_be_bytes());
            h[42..44].copy_from_slice(&53u16.to_be_bytes());
            h[44..46].copy_from_slice(&24u16.to_be_bytes());
            f
        })
        .collect()
}

fn setup(vm: &mut Vlib, t: &CommandTree<Vlib>) {
    for c in [
        "create packet-generator interface pg0",
        "create packet-generator interface pg1",
        "set interface state pg0 up",
        "set interface state pg1 up",
        "set interface ip address pg0 fd01::1/64",
        "set interface ip address pg1 fd01:1::1/64",
        "ip neighbor pg1 fd01:1::2 02:00:00:00:01:02",
    ] {
        cli(vm, t, c);
    }
}

const PATH: [&str; 6] = [
    "ethernet-input",
    "ip6-input",
    "ip6-lookup",
    "ip6-rewrite",
    "interface-output",
    "pg-tx",
];

struct Case {
    name: String,
    routes: usize,
    insert_per_sec: f64,
    fib_kib: usize,
    mpps: (f64, f64, f64),
    node_clocks: Vec<(String, f64)>,
}

fn run_case(o: &crate::Opts, name: &str, routes: Vec<(u128, u8)>, dir: &std::path::Path) -> Case {
    let (mut vm, t) = crate::build(0);
    setup(&mut vm, &t);
    let t0 = Instant::now();
    for &(p, l) in &routes {
        cli(
            &mut vm,
            &t,
            &format!("ip route add {}/{l} via fd01:1::2", Ipv6Addr::from(p)),
        );
    }
    let insert_per_sec = routes.len() as f64 / t0.elapsed().as_secs_f64().max(1e-9);
    let summary = cli(&mut vm, &t, "show ip6 fib summary");
    let fib_kib = summary
        .split('(')
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    crate::keep_routes(
        o,
        &format!("ip6-{}.routes", routes.len()),
        routes
            .iter()
            .map(|&(p, l)| format!("{}/{l}", Ipv6Addr::from(p))),
    );
    let pcap = dir.join(format!("ip6-{}.pcap", routes.len()));
    write_pcap(&pcap, &frames(&destination_routes(name, &routes), 0x5eed));
    let r = crate::replay_path(
        o,
        vm,
        &t,
        crate::Replay {
            node: Some("ethernet-input"),
            ..crate::Replay::new(&pcap, &PATH, name)
        },
    );
    Case {
        name: name.to_string(),
        routes: routes.len(),
        insert_per_sec,
        fib_kib,
        mpps: r.mpps,
        node_clocks: r.node_clocks,
    }
}

/// The benchmark's FIBs: 1 route; unless `quick`, VPP's anchor case (1M consecutive /64s,
/// what `ip route add count` installs), and when the shared data set is present the real table
/// and the 255k table grown from it.
fn tables(quick: bool) -> Vec<(&'static str, Vec<(u128, u8)>)> {
    let mut t = vec![("1 route", vec![(0x2001u128 << 112, 16)])];
    if !quick {
        let base = 0x2001_0db8_0000_0000u128 << 64;
        let seq = (0..1_000_000u128).map(|k| (base + (k << 64), 64)).collect();
        t.push(("1M /64 routes", seq));
        if let Some(real) = real_table() {
            let grown = grown_table(&real, 255_000, 3);
            t.push(("real IPv6 table", real));
            t.push(("255k (real + /48s)", grown));
        }
    }
    t
}

/// The host-table cases (`--only host` selects them; no run without `--only` has them): a /64
/// (2001:db8:1:2::/64), the destinations in it, and what is next to it. `host: none` no /128
/// anywhere (no host table: nothing probes); `host: beside` a /128 in another /64 (a host
/// table, but the /64's addresses end their walk at /64 and do not probe); `host: deep` a
/// /127 inside the /64 and no /128 (the walk goes one level past /64, no probe: what `miss`
/// costs without a host table); `host: miss` a /128 inside the /64 (walk to /64, probe,
/// miss, one more level); `host: hit` the destinations are the /128 itself (walk to /64,
/// probe, hit).
fn host_tables() -> Vec<(&'static str, Vec<(u128, u8)>)> {
    let p = 0x2001_0db8_0001_0002u128 << 64;
    let q = (0x2001_0db8_0009_0000u128 << 64) | 1;
    vec![
        ("host: none", vec![(p, 64)]),
        ("host: beside", vec![(p, 64), (q, 128)]),
        ("host: deep", vec![(p, 64), (p | 2, 127)]),
        ("host: miss", vec![(p, 64), (p | 1, 128)]),
        ("host: hit", vec![(p, 64), (p | 1, 128)]),
    ]
}

/// The routes a case's destinations are drawn from: all of them, but for the host-table cases
/// the /128s only (`host: hit`) or the /64 only (the others).
fn destination_routes(name: &str, routes: &[(u128, u8)]) -> Vec<(u128, u8)> {
    if !name.starts_with("host: ") {
        return routes.to_vec();
    }
    let want = if name == "host: hit" { 128 } else { 64 };
    routes.iter().copied().filter(|r| r.1 == want).collect()
}

/// [`tables`], filtered by `--only` (which also selects from [`host_tables`]).
fn selected_tables(o: &crate::Opts) -> Vec<(&'static str, Vec<(u128, u8)>)> {
    let mut t = tables(o.quick);
    if let Some(only) = &o.only {
        t.extend(host_tables());
        let names: Vec<&str> = t.iter().map(|c| c.0).collect();
        crate::check_only(o, &names, false);
        t.retain(|(name, _)| name.contains(only.as_str()));
    }
    t
}

/// The LPM alone (`sluice-bench ip6-lpm`): the same tables and destinations as the forwarding
/// benchmark, installed directly with `Ip6Lpm::insert`, looked up with `lookup_many` over
/// 256-address vectors as `ip6-lookup` does; reports TSC clocks per lookup (min/median/max of
/// the runs), the trie's memory and the insert rate. No graph, no packets: this isolates the
/// lookup from the rest of the path when comparing trie layouts.
pub fn bench_ip6_lpm(o: &crate::Opts, out: &mut String, json: &mut Vec<String>) {
    use sluice_fib::ip6::Ip6Lpm;
    use sluice_infra::clock::rdtsc;
    use sluice_infra::epoch::Epochs;
    let _ = writeln!(
        out,
        "## IPv6 LPM alone: lookup_many over 256-address vectors, 4096 destinations spread over the FIB\n"
    );
    let _ = writeln!(
        out,
        "| FIB | routes | groups | groups + host table KiB | RSS growth KiB | clk/lookup min | median | max | inserts/s |\n|---|---|---|---|---|---|---|---|---|"
    );
    for (name, routes) in selected_tables(o) {
        let e = Epochs::new(1);
        let rss0 = rss_kib();
        let mut lpm = Ip6Lpm::new();
        let t0 = Instant::now();
        for (k, &(p, l)) in routes.iter().enumerate() {
            lpm.insert(&e, p, l, (k as u32) & 0xffff).expect("insert");
        }
        let ins = routes.len() as f64 / t0.elapsed().as_secs_f64().max(1e-9);
        // Memory the table made the OS back (first level and groups, hugepages included).
        let rss = rss_kib().saturating_sub(rss0);
        let dst = destinations(&destination_routes(name, &routes), 0x5eed);
        let bytes: Vec<[u8; 16]> = dst.iter().map(|d| d.to_be_bytes()).collect();
        let mut res = vec![0u32; 256];
        let table = lpm.table().clone();
        let rounds = (o.packets / dst.len() as u64).max(1);
        let mut run = |rounds: u64| {
            let t = rdtsc();
            for _ in 0..rounds {
                for c in bytes.chunks(256) {
                    lookup_vector(&table, c, &mut res);
                    std::hint::black_box(&res);
                }
            }
            (rdtsc() - t) as f64 / (rounds * dst.len() as u64) as f64
        };
        run(rounds / 10 + 1);
        let clk = crate::stats((0..o.runs).map(|_| run(rounds)).collect());
        let missing = dst.iter().filter(|&&d| lpm.lookup(d).is_none()).count();
        assert_eq!(missing, 0, "{name}: destinations without a route");
        let _ = writeln!(
            out,
            "| {name} | {} | {} | {} | {rss} | {:.1} | {:.1} | {:.1} | {ins:.0} |",
            routes.len(),
            lpm.groups_in_use(),
            lpm.memory_bytes() / 1024,
            clk.0,
            clk.1,
            clk.2
        );
        json.push(format!(
            "\"ip6_lpm_{}\": {{\"routes\": {}, \"kib\": {}, \"rss_kib\": {rss}, \"clocks\": [{:.2}, {:.2}, {:.2}], \"inserts_per_sec\": {ins:.0}}}",
            name.replace([' ', '(', ')', '+', '/'], "_"),
            routes.len(),
            lpm.memory_bytes() / 1024,
            clk.0,
            clk.1,
            clk.2
        ));
    }
    let _ = writeln!(out);
}

/// Resident memory of this process (VmRSS), KiB.
fn rss_kib() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// One vector's lookups, not inlined so that `valgrind --tool=callgrind
/// --toggle-collect='*lookup_vector*'` counts the lookup's instructions alone.
#[inline(never)]
fn lookup_vector(t: &sluice_fib::ip6::Ip6Table, addrs: &[[u8; 16]], out: &mut [u32]) {
    t.lookup_many(addrs, out);
}

/// Runs the IPv6 FIB-scale benchmark.
pub fn bench_ip6(o: &crate::Opts, out: &mut String, json: &mut Vec<String>) {
    let tables = selected_tables(o);
    let dir = crate::inputs_dir(o, "sluice-bench6");
    if !o.quick && crate::real_table_lines().is_none() {
        let _ = writeln!(
            out,
            "(real table not found: the real-table cases did not run)\n"
        );
    }
    let cases: Vec<Case> = tables
        .into_iter()
        .map(|(name, routes)| run_case(o, name, routes, &dir))
        .collect();
    // Ratios against the 1-route case (NaN when `--only` left it out).
    let base = cases
        .iter()
        .find(|c| c.routes == 1)
        .map_or(f64::NAN, |c| c.mpps.1);
    let _ = writeln!(
        out,
        "## IPv6 forwarding, one core, 78-byte frames, destinations spread over the FIB\n"
    );
    crate::table_header(
        out,
        &[&["FIB", "routes", "FIB KiB"][..], &crate::FIB_COLS].concat(),
        &PATH,
        &["route adds/s (CLI)"],
    );
    for c in &cases {
        let (path, nodes) = crate::clock_cells(&c.node_clocks);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} | {} | {:.0} |",
            c.name,
            c.routes,
            c.fib_kib,
            c.mpps.0,
            c.mpps.1,
            c.mpps.2,
            c.mpps.1 / base,
            path,
            nodes,
            c.insert_per_sec
        );
        json.push(format!(
            "\"ip6_{}\": {{\"name\": \"{}\", \"routes\": {}, \"fib_kib\": {}, \"mpps\": [{:.3}, {:.3}, {:.3}], \"ratio\": {:.3}, \"path_clocks\": {:.2}, \"route_adds_per_sec\": {:.0}, \"nodes\": {}}}",
            c.name.replace([' ', '(', ')', '+', '/'], "_"),
            c.name,
            c.routes,
            c.fib_kib,
            c.mpps.0,
            c.mpps.1,
            c.mpps.2,
            c.mpps.1 / base,
            path,
            c.insert_per_sec,
            crate::nodes_json(&c.node_clocks)
        ));
    }
    // Route insertion with the CLI `count` form.
    let (mut vm, t) = crate::build(0);
    setup(&mut vm, &t);
    let t0 = Instant::now();
    cli(
        &mut vm,
        &t,
        "ip route add count 1000000 2001:db8::/64 via fd01:1::2",
    );
    let rate = 1e6 / t0.elapsed().as_secs_f64();
    let _ = writeln!(
        out,
        "\n`ip route add count 1000000 2001:db8::/64 via fd01:1::2`: {rate:.0} routes/s\n"
    );
    json.push(format!("\"ip6_route_add_count_per_sec\": {rate:.0}"));
    vm.stop_workers();
    crate::done_with_inputs(o, &dir);
}
