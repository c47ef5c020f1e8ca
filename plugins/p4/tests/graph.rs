//! The P4 pipeline in the real graph (pg -> ethernet-input -> p4 -> interface-output -> pg),
//! differentially against Sluice's native IPv4 path configured the same way: identical
//! output bytes and identical drops, for random route tables and random packets.

use proptest::prelude::*;
use sluice_cli::CommandTree;
use sluice_graph::{CpuConfig, Vlib};
use sluice_vnet::Interfaces;

fn build() -> (Vlib, CommandTree<Vlib>) {
    build_with_workers(0)
}

/// [`build`] with `workers` (unpinned) worker threads.
fn build_with_workers(workers: usize) -> (Vlib, CommandTree<Vlib>) {
    let cpu = CpuConfig {
        main_core: None,
        workers: vec![None; workers],
    };
    let pool = sluice_buffer::PoolConfig {
        buffers: 4096,
        data_size: 2048,
        page_size: sluice_buffer::PageSize::Small,
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
    ] {
        cli(&mut vm, &t, c);
    }
    (vm, t)
}

fn cli(vm: &mut Vlib, t: &CommandTree<Vlib>, c: &str) -> String {
    t.execute(vm, c).unwrap_or_else(|e| panic!("`{c}': {e}"))
}

fn mac_of(vm: &Vlib, name: &str) -> [u8; 6] {
    let ifs = vm.ext::<Interfaces>().unwrap();
    ifs.get(ifs.find(name).unwrap()).unwrap().mac
}

fn write_pcap(path: &std::path::Path, frames: &[Vec<u8>]) {
    let f = std::fs::File::create(path).unwrap();
    let mut w = pcap_file::pcap::PcapWriter::new(f).unwrap();
    for fr in frames {
        w.write_packet(&pcap_file::pcap::PcapPacket::new(
            std::time::Duration::ZERO,
            fr.len() as u32,
            fr,
        ))
        .unwrap();
    }
}

fn read_pcap(path: &std::path::Path) -> Vec<Vec<u8>> {
    let Ok(f) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let Ok(mut r) = pcap_file::pcap::PcapReader::new(f) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    while let Some(Ok(p)) = r.next_packet() {
        out.push(p.data.to_vec());
    }
    out
}

fn error_drops(vm: &Vlib) -> u64 {
    let i = vm.registry.find("error-drop").unwrap();
    vm.registry
        .node(i)
        .stats
        .per_thread
        .iter()
        .map(|s| s.vectors.get())
        .sum()
}

/// Every way `p4 load` runs the router: single on the generated node, on the vector
/// executor (`no-gen`) and per packet (`no-vector`), multi and auto.
const MODES: [&str; 5] = [
    "single",
    "single no-gen",
    "single no-vector",
    "multi",
    "auto",
];

/// The count `show errors` gives the counter described as `what`, summed over its nodes.
fn errors_counted(vm: &mut Vlib, t: &CommandTree<Vlib>, what: &str) -> u64 {
    let errs = cli(vm, t, "show errors");
    errs.lines()
        .filter(|l| l.contains(what))
        .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Sends `frames` into pg0 and returns what pg1 sent and how many packets were dropped.
fn run(vm: &mut Vlib, t: &CommandTree<Vlib>, frames: &[Vec<u8>], tag: &str) -> (Vec<Vec<u8>>, u64) {
    // Tests of this file run in parallel in one process: each run gets its own directory.
    static RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("sluice-p4-test-{}-{tag}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let inp = dir.join("in.pcap");
    let outp = dir.join("out.pcap");
    write_pcap(&inp, frames);
    // Capture files are confined to the capture directory (sluice_graph::pcap).
    *vm.ext_mut::<sluice_graph::pcap::CaptureDir>() = sluice_graph::pcap::CaptureDir(
        sluice_infra::files::OutputDir::new(&dir).expect("absolute temp dir"),
    );
    let d0 = error_drops(vm);
    cli(
        vm,
        t,
        &format!(
            "packet-generator capture pg1 pcap {} count {}",
            outp.display(),
            frames.len()
        ),
    );
    let _ = t.execute(vm, "packet-generator delete s");
    cli(
        vm,
        t,
        &format!(
            "packet-generator new pcap {} source pg0 name s limit {} node ethernet-input",
            inp.display(),
            frames.len()
        ),
    );
    cli(vm, t, "packet-generator enable");
    let t0 = std::time::Instant::now();
    while sluice_vnet::pg::any_enabled(vm) && t0.elapsed().as_secs() < 20 {
        vm.run_main_once();
    }
    for _ in 0..10 {
        vm.run_main_once();
    }
    cli(vm, t, "packet-generator capture pg1 disable");
    let out = read_pcap(&outp);
    let _ = std::fs::remove_dir_all(&dir);
    (out, error_drops(vm) - d0)
}

const ROUTER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/router.p4");

fn ip4_frame(
    dmac: [u8; 6],
    ttl: u8,
    dst: u32,
    bad_csum: bool,
    len: usize,
    proto_ether: u16,
) -> Vec<u8> {
    let mut f = dmac.to_vec();
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x10]);
    f.extend_from_slice(&proto_ether.to_be_bytes());
    let mut h = vec![0x45, 0, 0, 0, 0, 1, 0, 0, ttl, 17, 0, 0, 10, 0, 0, 16];
    h.extend_from_slice(&dst.to_be_bytes());
    let tl = (20 + 8 + len) as u16;
    h[2..4].copy_from_slice(&tl.to_be_bytes());
    let c = sluice_wire::checksum::internet_checksum(&h);
    h[10..12].copy_from_slice(&(c ^ bad_csum as u16).to_be_bytes());
    f.extend_from_slice(&h);
    f.extend_from_slice(&[0x04, 0x00, 0, 53, 0, (8 + len) as u8, 0, 0]);
    f.extend((0..len).map(|i| i as u8));
    f
}

/// Both pipelines configured with the same routes; returns (outputs, drops) of each.
/// Routes longer than /24 go via a second next hop (another destination MAC), so that a
/// packet taking its /24 instead differs. A packet `(dst, ttl, bad, len, other)` with `bad`
/// has a wrong header checksum; with `bad` and `len` 0 it is cut in its IPv4 header, with
/// `bad` and `len` 1 its header has a malformed option (dropped by both: `bad_options`,
/// `ihl != 5`) and a right checksum.
fn compare(
    routes: &[(u32, u8)],
    pkts: &[(u32, u8, bool, usize, bool)],
    mode: &str,
) -> (usize, u64) {
    let (n, d, _) = compare_show(routes, pkts, mode);
    (n, d)
}

/// [`compare`], and `show p4 program r` after the traffic.
fn compare_show(
    routes: &[(u32, u8)],
    pkts: &[(u32, u8, bool, usize, bool)],
    mode: &str,
) -> (usize, u64, String) {
    // Native.
    let (mut nv, nt) = build();
    cli(&mut nv, &nt, "set interface ip address pg0 10.0.0.1/24");
    cli(&mut nv, &nt, "set interface ip address pg1 10.0.1.1/24");
    cli(&mut nv, &nt, "ip neighbor pg1 10.0.1.2 02:00:00:00:01:02");
    cli(&mut nv, &nt, "ip neighbor pg1 10.0.1.3 02:00:00:00:01:03");
    let nhop = |l: u8| if l > 24 { "10.0.1.3" } else { "10.0.1.2" };
    for &(p, l) in routes {
        cli(
            &mut nv,
            &nt,
            &format!(
                "ip route add {}/{l} via {}",
                std::net::Ipv4Addr::from(p),
                nhop(l)
            ),
        );
    }
    // P4.
    let (mut pv, pt) = build();
    let pg1 = sluice_vnet::interface::resolve(&pv, "pg1").unwrap();
    cli(
        &mut pv,
        &pt,
        &format!("p4 load {ROUTER} name r mode {mode} on pg0"),
    );
    for &(p, l) in routes {
        cli(
            &mut pv,
            &pt,
            &format!(
                "p4 table add r ipv4_lpm set_nhop key {}/{l} param {} {pg1}",
                std::net::Ipv4Addr::from(p),
                nhop(l)
            ),
        );
    }
    for h in [2, 3] {
        cli(
            &mut pv,
            &pt,
            &format!("p4 table add r forward set_dmac key 10.0.1.{h} param 02:00:00:00:01:0{h}"),
        );
    }
    let m = mac_of(&pv, "pg1");
    let ms: Vec<String> = m.iter().map(|b| format!("{b:02x}")).collect();
    cli(
        &mut pv,
        &pt,
        &format!(
            "p4 table add r send_frame rewrite_mac key {pg1} param {}",
            ms.join(":")
        ),
    );
    assert_eq!(mac_of(&nv, "pg0"), mac_of(&pv, "pg0"));
    let dmac = mac_of(&nv, "pg0");
    let frames: Vec<Vec<u8>> = pkts
        .iter()
        .map(|&(dst, ttl, bad, len, other)| {
            let mut f = ip4_frame(
                dmac,
                ttl,
                dst,
                bad,
                len,
                if other { 0x88b5 } else { 0x0800 },
            );
            if len == 0 && bad {
                f.truncate(14 + 12); // truncated IPv4 header
            }
            if len == 1 && bad {
                // A 24-byte header whose option (a timestamp) says it is 1 byte long.
                f.splice(34..34, [0x44, 0x01, 0, 0]);
                f[14] = 0x46;
                let tl = u16::from_be_bytes([f[16], f[17]]) + 4;
                f[16..18].copy_from_slice(&tl.to_be_bytes());
                f[24..26].fill(0);
                let c = sluice_wire::checksum::internet_checksum(&f[14..38]);
                f[24..26].copy_from_slice(&c.to_be_bytes());
            }
            f
        })
        .collect();
    let (no, nd) = run(&mut nv, &nt, &frames, "native");
    let (po, pd) = run(&mut pv, &pt, &frames, "p4");
    assert_eq!(no.len() + nd as usize, frames.len(), "native lost packets");
    assert_eq!(po, no, "outputs differ");
    assert_eq!(pd, nd, "drops differ");
    let show = cli(&mut pv, &pt, "show p4 program r");
    nv.stop_workers();
    pv.stop_workers();
    assert_eq!(nv.pool.stats().in_use, 0);
    assert_eq!(pv.pool.stats().in_use, 0);
    (po.len(), pd, show)
}

#[test]
fn router_matches_native_fixed_cases() {
    let routes = [(0x1400_0000, 8), (0x1401_0200, 24), (0x1e00_0000, 16)];
    let pkts = [
        (0x1401_0203, 64, false, 18, false),
        (0x1402_0203, 2, false, 100, false),
        (0x1e00_0001, 255, false, 0, false),
        (0x2800_0001, 64, false, 18, false), // no route
        (0x1401_0203, 64, true, 18, false),  // bad checksum
        (0x1401_0203, 64, true, 0, false),   // truncated
        (0x1401_0203, 64, false, 18, true),  // not IPv4
    ];
    for mode in MODES {
        assert_eq!(compare(&routes, &pkts, mode), (3, 4), "{mode}");
    }
}

/// Auto mode does not split the router: with a few routes every frame runs in one node,
/// and with an `ipv4_lpm` of `node::SPLIT_ENTRIES` routes too (the single node batches the
/// first table's lookups itself, `node::stage_pays`), byte-identical to the native path
/// either way. (Auto never splits, `node::split_pays`; the split is mode multi's, compared
/// with native in `router_matches_native_fixed_cases` and
/// [`auto_does_not_split_a_large_second_table`].)
#[test]
fn auto_does_not_split_the_router() {
    let pkts = [
        (0x1401_0203, 64, false, 18, false),
        (0x1400_0a01, 2, false, 100, false),
        (0x2800_0001, 64, false, 18, false), // no route
        (0x1401_0203, 64, true, 18, false),  // bad checksum
        (0x1401_0203, 64, false, 18, true),  // not IPv4
    ];
    let split_single = |show: &str| -> (u64, u64) {
        let l = show
            .lines()
            .find(|l| l.contains("auto: "))
            .expect("auto line");
        let w: Vec<&str> = l.split_whitespace().collect();
        (w[1].parse().unwrap(), w[4].parse().unwrap())
    };
    let (_, _, show) = compare_show(&[(0x1400_0000, 8)], &pkts, "auto");
    let (split, single) = split_single(&show);
    assert!(split == 0 && single > 0, "{show}");
    let big: Vec<(u32, u8)> = (0..sluice_p4::node::SPLIT_ENTRIES as u32)
        .map(|i| (0x1400_0000 + (i << 8), 24))
        .collect();
    let (_, _, show) = compare_show(&big, &pkts, "auto");
    let (split, single) = split_single(&show);
    assert!(split == 0 && single > 0, "{show}");
}

/// The l2 switch (segments: `smac`, then `dmac`) with a `dmac` of `node::SPLIT_ENTRIES`
/// entries: auto mode runs every frame in one node (a split measured 2.1x single's
/// instructions here, docs/p4.md "Auto mode and the split"), and multi mode splits every
/// frame (the segment nodes on the generated code); both send the same bytes and drop the
/// same packets as single mode (packet at a time: its first table, `smac`, is exact and
/// small, so `node::stage_pays` does not stage).
#[test]
fn auto_does_not_split_a_large_second_table() {
    let l2 = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/l2switch.p4");
    let mac = |i: u32| -> [u8; 6] {
        let b = i.to_be_bytes();
        [0x02, 0x10, b[0], b[1], b[2], b[3]]
    };
    let frames: Vec<Vec<u8>> = (0..3 * 64u32)
        .map(|i| {
            // Every third to a MAC the table does not hold (dropped by `dmac`'s default).
            let d = if i % 3 == 2 {
                mac(0xff_0000 + i)
            } else {
                mac(i * 7 % 4096)
            };
            let mut f = d.to_vec();
            f.extend_from_slice(&mac(0x10_0000 + i));
            f.extend_from_slice(&0x88b5u16.to_be_bytes());
            f.extend((0..46).map(|j| (i + j) as u8));
            f
        })
        .collect();
    let run_mode = |mode: &str| -> (Vec<Vec<u8>>, u64, String) {
        let (mut vm, t) = build();
        let pg1 = sluice_vnet::interface::resolve(&vm, "pg1").unwrap();
        cli(
            &mut vm,
            &t,
            &format!("p4 load {l2} name r mode {mode} on pg0"),
        );
        for i in 0..sluice_p4::node::SPLIT_ENTRIES as u32 {
            let m: Vec<String> = mac(i).iter().map(|b| format!("{b:02x}")).collect();
            cli(
                &mut vm,
                &t,
                &format!(
                    "p4 table add r dmac forward key {} param {pg1}",
                    m.join(":")
                ),
            );
        }
        let (out, drops) = run(&mut vm, &t, &frames, mode);
        let show = cli(&mut vm, &t, "show p4 program r");
        vm.stop_workers();
        assert_eq!(vm.pool.stats().in_use, 0);
        (out, drops, show)
    };
    let (so, sd, show) = run_mode("single");
    // Its first table, `smac`, is exact and small: staging would only parse twice.
    assert!(show.contains("  staged: 0 frames in stages"), "{show}");
    let (mo, md, mshow) = run_mode("multi");
    assert!(mshow.contains(", multi-node path)"), "{mshow}");
    let (ao, ad, show) = run_mode("auto");
    assert_eq!(so.len() + sd as usize, frames.len(), "single lost packets");
    assert!(!so.is_empty() && sd > 0, "{} {sd}", so.len());
    assert_eq!(mo, so, "multi: outputs differ");
    assert_eq!(md, sd, "multi: drops differ");
    assert_eq!(ao, so, "auto: outputs differ");
    assert_eq!(ad, sd, "auto: drops differ");
    let l = show
        .lines()
        .find(|l| l.contains("auto: "))
        .expect("auto line");
    let w: Vec<&str> = l.split_whitespace().collect();
    let (split, single): (u64, u64) = (w[1].parse().unwrap(), w[4].parse().unwrap());
    assert!(split == 0 && single > 0, "{show}");
}

/// Two workers each run the L2 switch on their own pcap stream (`worker N`), each stream
/// on its own thread (the P4 node's per-thread packet counts); the direct counter of
/// `smac` is per thread and `p4 table show` sums the threads: the station each
/// worker's frames come from shows that worker's count, the station both send from shows
/// the sum, the default entry the unknown stations.
#[test]
fn direct_counters_are_summed_over_two_workers() {
    let l2 = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/l2switch.p4");
    let (mut vm, t) = build_with_workers(2);
    assert_eq!(vm.n_threads(), 3);
    let pg1 = sluice_vnet::interface::resolve(&vm, "pg1").unwrap();
    cli(&mut vm, &t, &format!("p4 load {l2} name sw on pg0"));
    cli(
        &mut vm,
        &t,
        &format!("p4 table add sw dmac forward key 02:00:00:00:00:99 param {pg1}"),
    );
    for s in [
        "02:00:00:00:00:01",
        "02:00:00:00:00:02",
        "02:00:00:00:00:03",
    ] {
        cli(
            &mut vm,
            &t,
            &format!("p4 table add sw smac NoAction key {s}"),
        );
    }
    let frame = |src: u8| -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 0x99, 2, 0, 0, 0, 0, src, 0x88, 0xb5];
        f.extend([0u8; 46]);
        f
    };
    // Worker 0: 70 from station 1, 30 from station 3, 5 unknown; worker 1: 50 from
    // station 2, 40 from station 3, 3 unknown.
    let per_worker: [Vec<Vec<u8>>; 2] = [
        [(1, 70), (3, 30), (7, 5)]
            .iter()
            .flat_map(|&(s, n)| std::iter::repeat_n(frame(s), n))
            .collect(),
        [(2, 50), (3, 40), (8, 3)]
            .iter()
            .flat_map(|&(s, n)| std::iter::repeat_n(frame(s), n))
            .collect(),
    ];
    let dir = std::env::temp_dir().join(format!("sluice-p4-test-{}-workers", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (w, frames) in per_worker.iter().enumerate() {
        let f = dir.join(format!("w{w}.pcap"));
        write_pcap(&f, frames);
        cli(
            &mut vm,
            &t,
            &format!(
                "packet-generator new pcap {} source pg0 name s{w} limit {} worker {w} node ethernet-input",
                f.display(),
                frames.len()
            ),
        );
    }
    cli(&mut vm, &t, "packet-generator enable");
    let t0 = std::time::Instant::now();
    let show = loop {
        vm.run_main_once();
        let show = cli(&mut vm, &t, "p4 table show sw smac");
        let default = "default -> NoAction() misses 8 packets 480 bytes";
        if show.contains(default) || t0.elapsed().as_secs() >= 20 {
            break show;
        }
    };
    let _ = std::fs::remove_dir_all(&dir);
    for want in [
        "key 0x20000000001 -> NoAction() packets 70 bytes 4200",
        "key 0x20000000002 -> NoAction() packets 50 bytes 3000",
        "key 0x20000000003 -> NoAction() packets 70 bytes 4200",
        "default -> NoAction() misses 8 packets 480 bytes",
    ] {
        assert!(show.contains(want), "{want}:\n{show}");
    }
    vm.stop_workers();
    // Each stream ran on its own worker thread (thread 1 + N for `worker N`), none on main:
    // one thread running both would give the same sums above.
    let p4 = vm.registry.find("p4-sw").expect("p4-sw node");
    let per_thread: Vec<u64> = vm
        .registry
        .node(p4)
        .stats
        .per_thread
        .iter()
        .map(|s| s.vectors.get())
        .collect();
    assert_eq!(per_thread, [0, 105, 93], "p4-sw packets per thread");
    assert_eq!(vm.pool.stats().in_use, 0);
}

/// The single node runs in stages (`node::frame_staged`: each packet's first-table key
/// guessed `node::STAGE` packets ahead and its first-level entry prefetched, then its plain
/// pipeline, in one pass), with a large first table and a small one: byte-identical to
/// the native path over more packets than one stage holds, and `show p4 program` counts the
/// staged frames. The large table has routes longer than /24 inside /24s the packets hit
/// (the DIR-24-8's second level, which the prefetch does not reach), and a packet guessed
/// but not looked up (IPv4 with options: `ihl != 5`).
#[test]
fn single_node_in_stages_matches_native() {
    let pkts = [
        (0x1401_0203, 64, false, 18, false), // its /32
        (0x1400_0a01, 2, false, 100, false), // its /24, a /25 beside it
        (0x1400_0a81, 64, false, 18, false), // the /25
        (0x2800_0001, 64, false, 18, false), // no route
        (0x1401_0203, 64, true, 18, false),  // bad checksum
        (0x1401_0203, 64, true, 0, false),   // truncated
        (0x1401_0203, 64, true, 1, false),   // an option
        (0x1401_0203, 64, false, 18, true),  // not IPv4
        (0x140f_0001, 9, false, 1, false),
        (0x1401_0204, 64, false, 18, false), // the /24 of the /32
    ];
    let pkts: Vec<_> = pkts
        .iter()
        .cycle()
        .take(3 * sluice_p4::node::STAGE + 5)
        .copied()
        .collect();
    let big: Vec<(u32, u8)> = (0..sluice_p4::node::SPLIT_ENTRIES as u32)
        .map(|i| (0x1400_0000 + (i << 8), 24))
        .chain([(0x1401_0203, 32), (0x1400_0a80, 25)])
        .collect();
    let (fwd, drop, show) = compare_show(&big, &pkts, "single");
    assert!(fwd > sluice_p4::node::STAGE && drop > 0, "{fwd} {drop}");
    let staged: u64 = show
        .lines()
        .find_map(|l| l.trim().strip_prefix("staged: "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no staged line: {show}"));
    assert!(staged > 0, "{show}");
    // A few routes: in stages too.
    let (_, _, show) = compare_show(&[(0x1400_0000, 8)], &pkts, "single");
    assert!(!show.contains("staged: 0 frames"), "{show}");
}

/// The same traffic with each of PVPP's four optimisations off (and all four off), in
/// single and multi mode: byte-identical to the native path every time.
#[test]
fn router_matches_native_with_each_optimisation_toggled() {
    let routes = [(0x1400_0000, 8), (0x1401_0200, 24), (0x1e00_0000, 16)];
    let pkts = [
        (0x1401_0203, 64, false, 18, false),
        (0x1402_0203, 2, false, 100, false),
        (0x1e00_0001, 255, false, 0, false),
        (0x2800_0001, 64, false, 18, false), // no route
        (0x1401_0203, 64, true, 18, false),  // bad checksum
        (0x1401_0203, 64, true, 0, false),   // truncated
        (0x1401_0203, 64, false, 18, true),  // not IPv4
        (0x1e00_0102, 9, false, 1, false),
    ];
    for mode in ["single", "multi"] {
        for off in [
            "no-flat",
            "no-resolve",
            "no-redundant",
            "no-dual",
            "no-flat no-resolve no-redundant no-dual",
        ] {
            assert_eq!(
                compare(&routes, &pkts, &format!("{mode} {off}")),
                (4, 4),
                "{mode} {off}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
    #[test]
    fn router_matches_native_random(
        routes in prop::collection::vec((0x0b00_0000u32..0xdf00_0000, 1u8..=32), 1..40),
        picks in prop::collection::vec((any::<u32>(), 2u8..=255, prop::bool::weighted(0.1), 0usize..200, prop::bool::weighted(0.05), prop::bool::weighted(0.8)), 1..64),
        which in 0..3usize,
    ) {
        let routes: Vec<(u32, u8)> = routes
            .into_iter()
            .map(|(a, l)| (a & (u32::MAX << (32 - l as u32)), l))
            .filter(|(a, _)| a >> 24 != 10 && a >> 24 != 127)
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        prop_assume!(!routes.is_empty());
        let pkts: Vec<(u32, u8, bool, usize, bool)> = picks
            .into_iter()
            .map(|(r, ttl, bad, len, other, inroute)| {
                let dst = if inroute {
                    let (p, l) = routes[r as usize % routes.len()];
                    p | ((r.rotate_left(7)) & (u32::MAX.checked_shr(l as u32).unwrap_or(0)))
                } else {
                    r
                };
                // Destinations the native path handles locally or as special are outside
                // the comparison (10/8 local subnets, loopback, multicast, broadcast).
                let dst = if dst >> 24 == 10 || dst >> 24 == 127 || dst >> 28 >= 0xe || dst >> 24 == 0 { 0x0b00_0001 } else { dst };
                (dst, ttl, bad, len, other)
            })
            .collect();
        compare(&routes, &pkts, ["single", "single no-gen", "multi"][which]);
    }
}

/// A parser ending in a plain `transition reject` is counted (`parser_reject`) in every
/// mode and executor.
#[test]
fn parser_reject_is_counted_in_every_mode() {
    const PROG: &str = r#"
#include <core.p4>
#include <v1model.p4>
header eth_t { bit<48> dst; bit<48> src; bit<16> typ; }
struct headers { eth_t eth; }
struct metadata { }
parser P(packet_in pk, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start {
        pk.extract(hdr.eth);
        transition select(hdr.eth.typ) { 0x9999: reject; default: accept; }
    }
}
control V(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    apply { mark_to_drop(sm); }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control C(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pk, in headers hdr) { apply { pk.emit(hdr.eth); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"#;
    let dir = std::env::temp_dir().join(format!("sluice-p4-reject-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("reject.p4");
    std::fs::write(&file, PROG).unwrap();
    let frame = |typ: u16| {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        f.extend_from_slice(&typ.to_be_bytes());
        f.extend_from_slice(&[0; 46]);
        f
    };
    let frames = vec![frame(0x9999), frame(0x0800), frame(0x9999), frame(0x9999)];
    for mode in ["single", "single no-vector", "multi"] {
        let (mut vm, t) = build();
        cli(
            &mut vm,
            &t,
            &format!("p4 load {} name j mode {mode} on pg0", file.display()),
        );
        let (out, drops) = run(&mut vm, &t, &frames, "reject");
        assert!(out.is_empty(), "{mode}");
        assert_eq!(drops, 4, "{mode}");
        assert_eq!(
            errors_counted(&mut vm, &t, "P4 parser rejected"),
            3,
            "{mode}"
        );
        vm.stop_workers();
        assert_eq!(vm.pool.stats().in_use, 0);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 18's bad input: a packet shorter than what the parser extracts takes v1model's
/// `PacketTooShort` path (the parser error set, the packet into ingress, which drops it:
/// its IPv4 header is not valid) and is counted (`parser_too_short`) in every mode, never
/// a panic; a whole frame beside it is forwarded.
#[test]
fn packet_too_short_is_counted_in_every_mode() {
    let mut whole = vec![0u8; 60];
    whole[..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    whole[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    whole[12..14].copy_from_slice(&[8, 0]);
    let h = &mut whole[14..34];
    h.copy_from_slice(&[
        0x45, 0, 0, 46, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 16, 20, 1, 2, 3,
    ]);
    let c = sluice_wire::checksum::internet_checksum(h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    // The Ethernet header and 10 bytes of the 20-byte IPv4 header the parser extracts.
    let short = whole[..24].to_vec();
    let frames = vec![short.clone(), whole, short.clone(), short];
    for mode in MODES {
        let (mut vm, t) = build();
        cli(&mut vm, &t, "set interface ip address pg1 10.0.1.1/24");
        let pg1 = sluice_vnet::interface::resolve(&vm, "pg1").unwrap();
        cli(
            &mut vm,
            &t,
            &format!("p4 load {ROUTER} name r mode {mode} on pg0"),
        );
        cli(
            &mut vm,
            &t,
            &format!("p4 table add r ipv4_lpm set_nhop key 20.0.0.0/8 param 10.0.1.2 {pg1}"),
        );
        cli(
            &mut vm,
            &t,
            "p4 table add r forward set_dmac key 10.0.1.2 param 02:00:00:00:01:02",
        );
        cli(
            &mut vm,
            &t,
            &format!("p4 table add r send_frame rewrite_mac key {pg1} param 02:fe:00:00:00:02"),
        );
        let (out, drops) = run(&mut vm, &t, &frames, "short");
        assert_eq!((out.len(), drops), (1, 3), "{mode}");
        let short = errors_counted(&mut vm, &t, "P4 parser error PacketTooShort");
        assert_eq!(short, 3, "{mode}");
        vm.stop_workers();
        assert_eq!(vm.pool.stats().in_use, 0);
    }
}

#[test]
fn cli_errors_and_show() {
    let (mut vm, t) = build();
    let e = |vm: &mut Vlib, c: &str| t.execute(vm, c).unwrap_err().to_string();
    assert_eq!(
        e(&mut vm, "p4 load /nonexistent.p4")
            .split(':')
            .next()
            .unwrap(),
        "cannot read `/nonexistent.p4'"
    );
    assert_eq!(
        e(&mut vm, &format!("p4 load {ROUTER} mode fast")),
        "bad mode `fast'"
    );
    assert_eq!(
        e(&mut vm, &format!("p4 load {ROUTER} on nosuch0")),
        "unknown interface `nosuch0'"
    );
    cli(&mut vm, &t, &format!("p4 load {ROUTER} name r on pg0"));
    assert_eq!(
        e(&mut vm, &format!("p4 load {ROUTER} name r")),
        "P4 program `r' is already loaded"
    );
    assert_eq!(
        e(
            &mut vm,
            "p4 table add x ipv4_lpm set_nhop key 1.0.0.0/8 param 1 1"
        ),
        "no P4 program `x'"
    );
    assert_eq!(
        e(&mut vm, "p4 table add r nosuch set_nhop key 1.0.0.0/8"),
        "no table `nosuch'"
    );
    assert_eq!(
        e(&mut vm, "p4 table add r ipv4_lpm set_dmac key 1.0.0.0/8"),
        "`set_dmac' is not an action of table `ipv4_lpm'"
    );
    assert_eq!(
        e(
            &mut vm,
            "p4 table add r ipv4_lpm set_nhop key 1.0.0.0/8 param 1"
        ),
        "ipv4_lpm: action takes 2 parameters, got 1"
    );
    assert_eq!(
        e(
            &mut vm,
            "p4 table add r ipv4_lpm set_nhop key 1.0.0.0/8 param 1 512"
        ),
        "ipv4_lpm: parameter `port': value 0x200 does not fit in bit<9>"
    );
    assert_eq!(
        e(
            &mut vm,
            "p4 table add r ipv4_lpm set_nhop key 1.0.0.1/8 param 1 1"
        ),
        "ipv4_lpm: key hdr.ipv4.dstAddr: value 0x1000001 has bits set beyond /8"
    );
    assert_eq!(
        e(&mut vm, "p4 table add r ipv4_lpm set_nhop key zz param 1 1"),
        "bad key value `zz'"
    );
    assert_eq!(
        e(&mut vm, "p4 table add r ipv4_lpm set_nhop 1.0.0.0/8"),
        "expected `key', found `1.0.0.0/8'"
    );
    cli(
        &mut vm,
        &t,
        "p4 table add r ipv4_lpm set_nhop key 1.0.0.0/8 param 1.2.3.4 1",
    );
    assert_eq!(
        e(
            &mut vm,
            "p4 table add r ipv4_lpm set_nhop key 1.0.0.0/8 param 1.2.3.4 1"
        ),
        "ipv4_lpm: entry already exists"
    );
    let s = cli(&mut vm, &t, "p4 table show r ipv4_lpm");
    assert!(
        s.contains("key 0x1000000/8 -> set_nhop(0x1020304, 0x1)"),
        "{s}"
    );
    let s = cli(&mut vm, &t, "show p4 program");
    assert!(s.contains("table MyIngress.ipv4_lpm [hdr.ipv4.dstAddr:lpm/32] entries 1 index lpm DIR-24-8 (fib ip4), 1 shared action records"), "{s}");
    assert!(
        s.contains("executor: generated (sluice-p4c module `router', single-node path)"),
        "{s}"
    );
    cli(&mut vm, &t, "p4 table del r ipv4_lpm key 1.0.0.0/8");
    assert_eq!(
        e(&mut vm, "p4 table del r ipv4_lpm key 1.0.0.0/8"),
        "ipv4_lpm: no such entry"
    );
    cli(&mut vm, &t, "p4 unload r");
    assert_eq!(
        cli(&mut vm, &t, "show p4 program"),
        "no P4 programs loaded\n"
    );
    // Reload under the same name reuses the nodes; multi mode adds segment nodes.
    let s = cli(
        &mut vm,
        &t,
        &format!("p4 load {ROUTER} name r mode multi on pg0"),
    );
    assert!(s.contains("2 node(s) (multi)"), "{s}");
    let s = cli(&mut vm, &t, "show p4 program");
    assert!(
        s.contains("executor: generated (sluice-p4c module `router', multi-node path)"),
        "{s}"
    );
    // A compile error names file:line:col.
    let dir = std::env::temp_dir().join(format!("sluice-p4-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.p4");
    std::fs::write(&bad, "header h_t { bit<8> a; }\nextern Foo { }\n").unwrap();
    assert_eq!(
        e(&mut vm, &format!("p4 load {}", bad.display())),
        format!(
            "not supported: top-level `extern' declaration at {}:2:1",
            bad.display()
        )
    );
    let _ = std::fs::remove_dir_all(&dir);
}
