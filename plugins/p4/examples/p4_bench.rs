//! P4 pipeline benchmark (issue 18): pg -> ethernet-input -> P4 program -> interface-output
//! -> pg-tx on one core, 64-byte frames, against the native IPv4 path (ethernet-input ->
//! ip4-input -> ip4-lookup -> ip4-rewrite -> interface-output) configured the same way.
//!
//! ```text
//! cargo run --release -p sluice-p4 --example p4_bench -- [--runs 5] [--packets 4000000] [--quick]
//! ```
//! Reports Mpps min/median/max over `--runs` (after a warm-up run) and clocks per packet of
//! each node on the path (median), plus load time of a program with 100k const entries and
//! the rate of `p4 table add`. Nothing here is a test; the numbers depend on the machine.

use sluice_cli::CommandTree;
use sluice_graph::{CpuConfig, Vlib};
use std::fmt::Write as _;
use std::time::Instant;

const ROUTER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/router.p4");
const L2SWITCH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/l2switch.p4");

struct Opts {
    runs: usize,
    packets: u64,
    quick: bool,
    /// Run one case only (`native` or the `p4 load` options, e.g. `mode single no-dual`),
    /// for callgrind (`scripts/p4-bench.sh --callgrind`); `load`: only the load time of a
    /// router with `--routes` const entries; `l2switch [<p4 load options>]`: the L2 switch
    /// (an exact first table, `smac`) with `--routes` source stations.
    only: Option<String>,
    /// Routes for `--only` (1 or more).
    routes: usize,
    /// Next hops the P4 router's routes spread over (`forward` entries, each with its own
    /// destination MAC), for `--only` P4 cases: 1 to [`NEXTHOPS_MAX`] (`forward`'s size,
    /// below `node::SPLIT_ENTRIES`; auto mode never splits, `node::split_pays`). 1: all
    /// routes to 10.0.1.2, as natively.
    nexthops: usize,
}

/// Most `--nexthops`: `forward`'s `size` in examples/router.p4 (refused beyond, rather
/// than the table filling up midway).
const NEXTHOPS_MAX: usize = 512;

fn build() -> (Vlib, CommandTree<Vlib>) {
    let cpu = CpuConfig {
        main_core: Some(0),
        workers: Vec::new(),
    };
    let pool = sluice_buffer::PoolConfig {
        buffers: 16384,
        data_size: 2048,
        page_size: sluice_buffer::PageSize::Default,
        shared: false,
    };
    let plugins: Vec<&'static dyn sluice_vnet::plugin::Plugin> = vec![&sluice_p4::PLUGIN];
    let entries = sluice_vnet::plugin::PluginsConfig::default().entries(&plugins);
    let a =
        sluice_vnet::plugin::assemble(&entries, &cpu, &pool, Default::default()).expect("runtime");
    let (mut vm, t) = (a.vm, a.cli);
    for c in [
        "create packet-generator interface pg0",
        "create packet-generator interface pg1",
        "set interface state pg0 up",
        "set interface state pg1 up",
        "set interface ip address pg0 10.0.0.1/24",
        "set interface ip address pg1 10.0.1.1/24",
        "ip neighbor pg1 10.0.1.2 02:00:00:00:01:02",
    ] {
        cli(&mut vm, &t, c);
    }
    (vm, t)
}

fn cli(vm: &mut Vlib, t: &CommandTree<Vlib>, c: &str) -> String {
    t.execute(vm, c).unwrap_or_else(|e| panic!("`{c}': {e}"))
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// `n` distinct random prefixes, /16 to /24 mostly, avoiding 10/8, 0/8, 127/8, 224/3.
fn routes(n: usize, seed: u64) -> Vec<(u32, u8)> {
    let mut r = Rng(seed);
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    while out.len() < n {
        let l = [16u8, 18, 20, 21, 22, 23, 24, 24, 24, 24][(r.next() % 10) as usize];
        let a = (r.next() >> 16) as u32 & (u32::MAX << (32 - l));
        let top = a >> 24;
        if top == 10 || top == 0 || top == 127 || top >= 224 {
            continue;
        }
        if seen.insert((a, l)) {
            out.push((a, l));
        }
    }
    out
}

fn frames(routes: &[(u32, u8)], dmac: [u8; 6]) -> Vec<Vec<u8>> {
    let mut r = Rng(0x5eed);
    (0..4096)
        .map(|i| {
            let (p, l) = routes[(r.next() % routes.len() as u64) as usize];
            let dst = p | ((r.next() as u32) & (u32::MAX >> l));
            let mut f = vec![0u8; 60];
            f[0..6].copy_from_slice(&dmac);
            f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x10]);
            f[12..14].copy_from_slice(&[0x08, 0x00]);
            let h = &mut f[14..];
            h[0] = 0x45;
            h[2..4].copy_from_slice(&46u16.to_be_bytes());
            h[8] = 64;
            h[9] = 17;
            h[12..16].copy_from_slice(&[10, 0, 0, 16]);
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

fn write_pcap(path: &std::path::Path, frames: &[Vec<u8>]) {
    let f = std::fs::File::create(path).expect("pcap");
    let mut w = pcap_file::pcap::PcapWriter::new(f).expect("pcap");
    for fr in frames {
        w.write_packet(&pcap_file::pcap::PcapPacket::new(
            std::time::Duration::ZERO,
            fr.len() as u32,
            fr,
        ))
        .expect("pcap");
    }
}

fn vectors(vm: &Vlib, name: &str) -> u64 {
    let i = vm.registry.find(name).expect("node");
    vm.registry
        .node(i)
        .stats
        .per_thread
        .iter()
        .map(|s| s.vectors.get())
        .sum()
}

fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[0], v[v.len() / 2], v[v.len() - 1])
}

struct Res {
    mpps: (f64, f64, f64),
    path: Vec<(String, f64)>,
}

fn replay(
    o: &Opts,
    vm: &mut Vlib,
    t: &CommandTree<Vlib>,
    pcap: &std::path::Path,
    path: &[String],
) -> Res {
    let mut mpps = Vec::new();
    let mut clocks: Vec<Vec<f64>> = vec![Vec::new(); path.len()];
    for run in 0..=o.runs {
        let _ = t.execute(vm, "packet-generator delete s");
        cli(
            vm,
            t,
            &format!(
                "packet-generator new pcap {} source pg0 name s limit {} node ethernet-input",
                pcap.display(),
                o.packets
            ),
        );
        cli(vm, t, "clear runtime");
        let before = vectors(vm, "pg-tx");
        cli(vm, t, "packet-generator enable");
        let t1 = Instant::now();
        while vectors(vm, "pg-tx") < before + o.packets && t1.elapsed().as_secs() < 120 {
            vm.run_main_once();
        }
        let dt = t1.elapsed().as_secs_f64();
        if run == 0 {
            continue;
        }
        mpps.push(o.packets as f64 / dt / 1e6);
        for (k, n) in path.iter().enumerate() {
            let i = vm.registry.find(n).expect("node");
            let s = &vm.registry.node(i).stats.per_thread[0];
            clocks[k].push(s.clocks.get() as f64 / s.vectors.get().max(1) as f64);
        }
    }
    let drops = vectors(vm, "error-drop");
    assert_eq!(drops, 0, "packets dropped: the path is not what it claims");
    Res {
        mpps: stats(mpps),
        path: path
            .iter()
            .cloned()
            .zip(clocks.into_iter().map(|c| stats(c).1))
            .collect(),
    }
}

fn native(o: &Opts, rs: &[(u32, u8)], dir: &std::path::Path) -> Res {
    let (mut vm, t) = build();
    for &(p, l) in rs {
        cli(
            &mut vm,
            &t,
            &format!(
                "ip route add {}/{l} via 10.0.1.2",
                std::net::Ipv4Addr::from(p)
            ),
        );
    }
    let pcap = dir.join(format!("n{}.pcap", rs.len()));
    let dmac = mac(&vm, "pg0");
    write_pcap(&pcap, &frames(rs, dmac));
    let path: Vec<String> = [
        "ethernet-input",
        "ip4-input",
        "ip4-lookup",
        "ip4-rewrite",
        "interface-output",
        "pg-tx",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let r = replay(o, &mut vm, &t, &pcap, &path);
    vm.stop_workers();
    r
}

fn mac(vm: &Vlib, n: &str) -> [u8; 6] {
    let ifs = vm.ext::<sluice_vnet::Interfaces>().unwrap();
    ifs.get(ifs.find(n).unwrap()).unwrap().mac
}

/// Returns the result and the `p4 table add` rate.
fn p4(o: &Opts, rs: &[(u32, u8)], dir: &std::path::Path, load: &str) -> (Res, f64) {
    let (mut vm, t) = build();
    let pg1 = sluice_vnet::interface::resolve(&vm, "pg1").unwrap();
    cli(
        &mut vm,
        &t,
        &format!("p4 load {ROUTER} name r on pg0 {load}"),
    );
    // Next hop k of `--nexthops`: 10.0.1.2 + k, destination MAC 02:00:00:00:01:02 + k.
    let nh = |i: usize| 0x0a00_0102u32 + (i % o.nexthops) as u32;
    let t0 = Instant::now();
    for (i, &(p, l)) in rs.iter().enumerate() {
        cli(
            &mut vm,
            &t,
            &format!(
                "p4 table add r ipv4_lpm set_nhop key {}/{l} param {} {pg1}",
                std::net::Ipv4Addr::from(p),
                std::net::Ipv4Addr::from(nh(i))
            ),
        );
    }
    let rate = rs.len() as f64 / t0.elapsed().as_secs_f64();
    for k in 0..o.nexthops {
        let m = 0x0200_0000_0102u64 + k as u64;
        let ms: Vec<String> = m.to_be_bytes()[2..]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        cli(
            &mut vm,
            &t,
            &format!(
                "p4 table add r forward set_dmac key {} param {}",
                std::net::Ipv4Addr::from(nh(k)),
                ms.join(":")
            ),
        );
    }
    let m = mac(&vm, "pg1");
    let ms: Vec<String> = m.iter().map(|b| format!("{b:02x}")).collect();
    cli(
        &mut vm,
        &t,
        &format!(
            "p4 table add r send_frame rewrite_mac key {pg1} param {}",
            ms.join(":")
        ),
    );
    let pcap = dir.join(format!("p{}.pcap", rs.len()));
    let dmac = mac(&vm, "pg0");
    write_pcap(&pcap, &frames(rs, dmac));
    let mut path: Vec<String> = vec!["ethernet-input".into()];
    let show = cli(&mut vm, &t, "show p4 program r");
    let nodes = show
        .lines()
        .find_map(|l| l.trim().strip_prefix("nodes: "))
        .unwrap_or("p4-r")
        .to_string();
    path.extend(nodes.split_whitespace().map(|s| s.to_string()));
    path.extend(["interface-output".to_string(), "pg-tx".to_string()]);
    let r = replay(o, &mut vm, &t, &pcap, &path);
    vm.stop_workers();
    (r, rate)
}

/// The L2 switch with `n` stations in `smac` (its exact first table) and one destination in
/// `dmac`, frames from random stations to it (for the staging threshold of an exact first
/// table, `node::SPLIT_ENTRIES`). With `l2switch dmac [options]` the other way round: one
/// station in `smac`, `n` destinations in `dmac` and frames to random ones (a large later
/// table, where mode auto split until session 17 and measured 2.1x single; it no longer
/// splits: `node::split_pays`).
fn l2switch(o: &Opts, n: usize, dir: &std::path::Path, load: &str) -> Res {
    let (big_dmac, load) = match load.trim_start().strip_prefix("dmac") {
        Some(rest) => (true, rest),
        None => (false, load),
    };
    let (mut vm, t) = build();
    let pg1 = sluice_vnet::interface::resolve(&vm, "pg1").unwrap();
    cli(
        &mut vm,
        &t,
        &format!("p4 load {L2SWITCH} name r on pg0 {load}"),
    );
    let station = |i: usize| -> [u8; 6] {
        let x = (i as u64).wrapping_mul(0x9e37_79b9) & 0xff_ffff_ffff;
        let mut m = [0x02u8; 6];
        m[1..].copy_from_slice(&x.to_be_bytes()[3..]);
        m
    };
    let hex = |m: [u8; 6]| -> String {
        let v: Vec<String> = m.iter().map(|b| format!("{b:02x}")).collect();
        v.join(":")
    };
    let one = [0x02, 0xfe, 0, 0, 0, 0x01];
    let (smacs, dmacs) = if big_dmac { (1, n) } else { (n, 1) };
    for i in 0..smacs {
        let m = if big_dmac { one } else { station(i) };
        cli(
            &mut vm,
            &t,
            &format!("p4 table add r smac NoAction key {}", hex(m)),
        );
    }
    for i in 0..dmacs {
        let m = if big_dmac { station(i) } else { one };
        cli(
            &mut vm,
            &t,
            &format!("p4 table add r dmac forward key {} param {pg1}", hex(m)),
        );
    }
    let mut r = Rng(0x5eed);
    let fs: Vec<Vec<u8>> = (0..4096)
        .map(|_| {
            let mut f = vec![0u8; 60];
            let s = station((r.next() % n as u64) as usize);
            let (src, dst) = if big_dmac { (one, s) } else { (s, one) };
            f[0..6].copy_from_slice(&dst);
            f[6..12].copy_from_slice(&src);
            f[12..14].copy_from_slice(&[0x88, 0xb5]);
            f
        })
        .collect();
    let pcap = dir.join(format!("l2-{n}.pcap"));
    write_pcap(&pcap, &fs);
    let path: Vec<String> = ["ethernet-input", "p4-r", "interface-output", "pg-tx"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let r = replay(o, &mut vm, &t, &pcap, &path);
    vm.stop_workers();
    r
}

/// Load time of a router whose ipv4_lpm has `n` const entries.
fn load_time(n: usize, dir: &std::path::Path) -> (f64, f64) {
    let src = std::fs::read_to_string(ROUTER).unwrap();
    let rs = routes(n, 7);
    let mut entries = String::from("        const entries = {\n");
    for (p, l) in &rs {
        let _ = writeln!(
            entries,
            "            {} &&& {:#x}: set_nhop(0x0a000102, 2);",
            p,
            if *l == 0 { 0 } else { u32::MAX << (32 - l) }
        );
    }
    entries.push_str("        }\n");
    let src = src.replacen(
        "        default_action = _drop();\n    }\n    table forward",
        &format!("        default_action = _drop();\n{entries}    }}\n    table forward"),
        1,
    );
    let file = dir.join("router-100k.p4");
    std::fs::write(&file, &src).unwrap();
    let t0 = Instant::now();
    let prog = sluice_p4::compile(&src, "router-100k.p4", Default::default()).expect("compile");
    let compile = t0.elapsed().as_secs_f64();
    drop(prog);
    let (mut vm, t) = build();
    let t0 = Instant::now();
    cli(&mut vm, &t, &format!("p4 load {} name big", file.display()));
    let total = t0.elapsed().as_secs_f64();
    vm.stop_workers();
    (compile, total)
}

fn row(out: &mut String, name: &str, r: &Res, base: f64) {
    let cells: Vec<String> = r.path.iter().map(|(n, c)| format!("{n} {c:.1}")).collect();
    let total: f64 = r.path.iter().map(|x| x.1).sum();
    let _ = writeln!(
        out,
        "| {name} | {:.2} | {:.2} | {:.2} | {:.3} | {total:.1} | {} |",
        r.mpps.0,
        r.mpps.1,
        r.mpps.2,
        r.mpps.1 / base,
        cells.join(", ")
    );
}

/// `p4_bench --help`.
const USAGE: &str = "\
usage: p4_bench [--runs N] [--packets N] [--quick] [--only CASE] [--routes N] [--nexthops N]
  --runs N        measured runs per case, after a warm-up run (default 5)
  --packets N     packets per run (default 4000000)
  --quick         1 route only (no 100k-route table, no load time)
  --only CASE     one case: `native`, `p4 load` options (e.g. \"mode single no-dual\"),
                  `load` (load time of --routes const entries) or `l2switch [options]`
  --routes N      routes for --only (default 1)
  --nexthops N    next hops the P4 router's routes spread over, 1 to 512 (default 1)
  -h, --help      this text
";

/// Reads the arguments into `o`: `Ok(false)` for `--help`, an error naming the argument
/// that is unknown, lacks its value or has a bad one.
fn parse_args(mut a: impl Iterator<Item = String>, o: &mut Opts) -> Result<bool, String> {
    fn num<T: std::str::FromStr>(
        a: &mut impl Iterator<Item = String>,
        f: &str,
    ) -> Result<T, String> {
        let v = a.next().ok_or_else(|| format!("{f}: missing value"))?;
        v.parse().map_err(|_| format!("{f}: not a number: {v}"))
    }
    while let Some(x) = a.next() {
        match x.as_str() {
            "-h" | "--help" => return Ok(false),
            "--runs" => o.runs = num(&mut a, "--runs")?,
            "--packets" => o.packets = num(&mut a, "--packets")?,
            "--quick" => o.quick = true,
            "--only" => o.only = Some(a.next().ok_or("--only: missing case")?),
            "--routes" => o.routes = num(&mut a, "--routes")?,
            "--nexthops" => {
                let n: usize = num(&mut a, "--nexthops")?;
                if n > NEXTHOPS_MAX {
                    return Err(format!(
                        "--nexthops {n}: at most {NEXTHOPS_MAX} (the size of router.p4's `forward`)"
                    ));
                }
                o.nexthops = n.max(1);
            }
            x => return Err(format!("unknown argument {x}")),
        }
    }
    Ok(true)
}

fn main() {
    let mut o = Opts {
        runs: 5,
        packets: 4_000_000,
        quick: false,
        only: None,
        routes: 1,
        nexthops: 1,
    };
    match parse_args(std::env::args().skip(1), &mut o) {
        Ok(true) => {}
        Ok(false) => {
            print!("{USAGE}");
            return;
        }
        Err(e) => {
            eprint!("p4_bench: {e}\n{USAGE}");
            std::process::exit(2);
        }
    }
    let dir = std::env::temp_dir().join(format!("sluice-p4-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut out = String::new();
    if o.only.as_deref() == Some("load") {
        let n = o.routes.max(1);
        let (c, t) = load_time(n, &dir);
        let _ = std::fs::remove_dir_all(&dir);
        println!("load of a router with {n} const lpm entries: compile {c:.2} s, `p4 load` total {t:.2} s");
        return;
    }
    if let Some(only) = o.only.clone() {
        let rs = if o.routes <= 1 {
            vec![(0x1400_0000u32, 8u8)]
        } else {
            routes(o.routes, 1)
        };
        let r = if only == "native" {
            native(&o, &rs, &dir)
        } else if let Some(load) = only.strip_prefix("l2switch") {
            l2switch(&o, o.routes.max(1), &dir, load)
        } else {
            p4(&o, &rs, &dir, &only).0
        };
        row(&mut out, &only, &r, r.mpps.1);
        let _ = std::fs::remove_dir_all(&dir);
        print!("{out}");
        return;
    }
    let _ = writeln!(
        out,
        "## P4 router (PVPP's program) vs native IPv4, one core, 64 B, {} runs x {} packets\n",
        o.runs, o.packets
    );
    let _ = writeln!(out, "| case | Mpps min | median | max | x native | path clk/pkt | nodes (clk/pkt, median) |\n|---|---|---|---|---|---|---|");
    let one = vec![(0x1400_0000u32, 8u8)];
    let mut sizes = vec![("1 route", one)];
    if !o.quick {
        sizes.push(("100k routes", routes(100_000, 1)));
    }
    let mut rates = Vec::new();
    for (label, rs) in &sizes {
        let n = native(&o, rs, &dir);
        let base = n.mpps.1;
        row(&mut out, &format!("native, {label}"), &n, base);
        for (name, load) in [
            ("single", "mode single"),
            ("single, vector interpreter (no-gen)", "mode single no-gen"),
            ("multi", "mode multi"),
            ("auto", "mode auto"),
        ] {
            let (r, rate) = p4(&o, rs, &dir, load);
            row(&mut out, &format!("P4 {name}, {label}"), &r, base);
            if name == "single" {
                rates.push((label.to_string(), rate));
            }
        }
        if *label == "1 route" {
            for (name, load) in [
                (
                    "P4 single, all four optimisations off",
                    "mode single no-flat no-resolve no-redundant no-dual",
                ),
                ("P4 single, no flat metadata", "mode single no-flat"),
                (
                    "P4 single, no pre-resolved actions",
                    "mode single no-resolve",
                ),
                (
                    "P4 single, redundant tables kept",
                    "mode single no-redundant",
                ),
                ("P4 single, one packet per iteration", "mode single no-dual"),
            ] {
                let (r, _) = p4(&o, rs, &dir, load);
                row(&mut out, name, &r, base);
            }
        }
    }
    out.push('\n');
    for (l, r) in rates {
        let _ = writeln!(out, "`p4 table add` ({l}): {r:.0} entries/s");
    }
    if !o.quick {
        let (c, t) = load_time(100_000, &dir);
        let _ = writeln!(out, "load of a router with 100k const lpm entries: compile {c:.2} s, `p4 load` total {t:.2} s");
    }
    let _ = std::fs::remove_dir_all(&dir);
    print!("{out}");
}
