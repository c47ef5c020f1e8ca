//! `dpdk_bench`: the IPv4 forwarding path between two DPDK `net_null` devices against the
//! same path between two pg interfaces, in one process, on one core, with the same frames
//! and the same (one-route) FIB:
//!
//! - dpdk: net_null0 (rx) -> dpdk-input -> ethernet-input -> ip4-input -> ip4-lookup ->
//!   ip4-rewrite -> interface-output -> dpdk-tx -> net_null1 (tx, frees);
//! - pg:   pg0 (pcap replay) -> pg-input -> ... -> interface-output -> pg-tx (frees).
//!
//! net_null does not write packet data: it hands out mbufs of the receive pool as they are,
//! so the receive pool's mbufs are filled with the benchmark's frames
//! (`sluice_dpdk::fill_rx_pool`). With zero-copy receive that data is the Sluice buffer each
//! mbuf carries, which changes at every receive and is forwarded in place (TTL decremented,
//! MACs rewritten: the neighbour's MAC is null0's own, so a frame stays forwardable): the
//! frames (TTL 255) are written into every Sluice buffer of the DPDK runtime every [`REFILL`]
//! dispatch loops, outside the timed window (a NIC writes them by DMA, at no CPU cost; the
//! rewrite leaves caches colder for the next loop, not warmer). Runs alternate between
//! the two paths; min/median/max over `--runs` runs of `--secs` seconds each. Nothing here
//! is a test. scripts/dpdk-bench.sh runs it next to dpdk-testpmd (io forwarding on the same
//! devices).
//!
//! ```text
//! cargo run --release -p sluice-dpdk --example dpdk_bench -- [--runs 5] [--secs 2] [--core N]
//! ```
//!
//! `--packets N` runs only the DPDK path until N packets were forwarded and exits, for an
//! instruction count per node under callgrind (wall clocks are meaningless there):
//!
//! ```text
//! valgrind --tool=callgrind --demangle=no --callgrind-out-file=cg.out \
//!     target/release/examples/dpdk_bench --packets 409600
//! scripts/callgrind-nodes.py cg.out 409600
//! ```

use sluice_buffer::{PageSize, PoolConfig};
use sluice_cli::CommandTree;
use sluice_graph::{CpuConfig, Vlib};
use sluice_vnet::interface::{counter, Interfaces};
use sluice_vnet::plugin::{assemble, Plugin, PluginsConfig, Staged};
use std::time::Instant;

/// Dispatch loops between two rewrites of the frames: a buffer is received at most once per
/// loop, so a frame is forwarded at most REFILL times before it is rewritten (TTL 255).
const REFILL: usize = 64;

const PATH: [&str; 5] = [
    "ethernet-input",
    "ip4-input",
    "ip4-lookup",
    "ip4-rewrite",
    "interface-output",
];

fn runtime(conf: &str, core: Option<usize>) -> (Vlib, CommandTree<Vlib>) {
    let plugins: Vec<&'static dyn Plugin> = vec![&sluice_dpdk::PLUGIN];
    let mut staged = Staged::default();
    let f = sluice_cli::conf::parse(conf, "bench.conf").expect("conf");
    for s in &f.sections {
        plugins[0]
            .configure(&mut staged, s, "bench.conf")
            .expect("dpdk section");
    }
    let cpu = CpuConfig {
        main_core: core,
        workers: Vec::new(),
    };
    let pool = PoolConfig {
        buffers: 16384,
        data_size: 2048,
        page_size: PageSize::Default,
        shared: false,
    };
    let entries = PluginsConfig::default().entries(&plugins);
    let a = assemble(&entries, &cpu, &pool, staged).unwrap_or_else(|e| {
        eprintln!("dpdk_bench: {e}");
        std::process::exit(1)
    });
    (a.vm, a.cli)
}

fn cli(vm: &mut Vlib, t: &CommandTree<Vlib>, c: &str) {
    t.execute(vm, c)
        .unwrap_or_else(|e| panic!("`{c}' failed: {e}"));
}

fn mac(vm: &mut Vlib, name: &str) -> [u8; 6] {
    let ifs = vm.ext_mut::<Interfaces>();
    let sw = ifs.find(name).expect("interface");
    ifs.get(sw).expect("interface").mac
}

fn tx_packets(vm: &mut Vlib, name: &str) -> u64 {
    let ifs = vm.ext_mut::<Interfaces>();
    let sw = ifs.find(name).expect("interface");
    ifs.get(sw)
        .expect("interface")
        .counters
        .total(counter::TX_PACKETS)
}

/// 4096 60-byte IPv4/UDP frames to `dst_mac`, destinations spread over `net`.0.0/16.
fn frames(dst_mac: [u8; 6], net: u8) -> Vec<Vec<u8>> {
    (0..4096u32)
        .map(|i| {
            let mut f = vec![0u8; 60];
            f[0..6].copy_from_slice(&dst_mac);
            f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x10]);
            f[12..14].copy_from_slice(&[0x08, 0x00]);
            let h = &mut f[14..];
            h[0] = 0x45;
            h[2..4].copy_from_slice(&46u16.to_be_bytes());
            h[8] = 255;
            h[9] = 17;
            h[12..16].copy_from_slice(&[10, 0, 0, 16]);
            h[16..20].copy_from_slice(&[10, net, (i >> 8) as u8, i as u8]);
            let c = sluice_wire::checksum::internet_checksum(&h[..20]);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            h[20..22].copy_from_slice(&(1024 + (i % 1000) as u16).to_be_bytes());
            h[22..24].copy_from_slice(&53u16.to_be_bytes());
            h[24..26].copy_from_slice(&26u16.to_be_bytes());
            f
        })
        .collect()
}

/// Writes `frames` round-robin into the data area of every Sluice buffer of `vm`'s pool (see
/// the module comment: what net_null does not do).
fn fill_arena(vm: &Vlib, frames: &[Vec<u8>]) {
    let pool = &vm.pool;
    let (base, len) = pool.region();
    for i in 0..pool.len() as usize {
        let f = &frames[i % frames.len()];
        let off = i * pool.stride() + sluice_buffer::HEADROOM;
        assert!(off + f.len() <= len);
        // SAFETY: in bounds (asserted); called between dispatch loops only, when no frame is
        // in flight and nothing reads or writes buffer memory (net_null writes none).
        unsafe { std::ptr::copy_nonoverlapping(f.as_ptr(), base.add(off), f.len()) };
    }
}

fn node_clocks(vm: &Vlib, name: &str) -> f64 {
    let i = vm.registry.find(name).expect("node");
    let s = &vm.registry.node(i).stats.per_thread[0];
    s.clocks.get() as f64 / s.vectors.get().max(1) as f64
}

fn node_vectors(vm: &Vlib, name: &str) -> u64 {
    vm.registry
        .find(name)
        .map(|i| vm.registry.node(i).stats.per_thread[0].vectors.get())
        .unwrap_or(0)
}

fn node_calls(vm: &Vlib, name: &str) -> u64 {
    vm.registry
        .find(name)
        .map(|i| vm.registry.node(i).stats.per_thread[0].calls.get())
        .unwrap_or(0)
}

fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    (v[0], v[v.len() / 2], v[v.len() - 1])
}

fn arg(name: &str, default: f64) -> f64 {
    let a: Vec<String> = std::env::args().collect();
    a.iter()
        .position(|x| x == name)
        .and_then(|i| a.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    if sluice_dpdk::sys::SHIM.is_none() {
        eprintln!("dpdk_bench: {}", sluice_dpdk::not_built());
        std::process::exit(77);
    }
    let runs = arg("--runs", 5.0) as usize;
    let secs = arg("--secs", 2.0);
    let core = std::env::args()
        .any(|a| a == "--core")
        .then(|| arg("--core", 0.0) as usize);
    // The DPDK runtime: net_null0 receives, net_null1 only transmits.
    let (mut dv, dt) = runtime(
        "dpdk {\n vdev net_null0,size=60 { name null0 }\n vdev net_null1,size=60,no-rx=1 { name null1 }\n}",
        core,
    );
    // The pg runtime: the same graph, DPDK not started.
    let (mut pv, pt) = runtime("", core);
    let m0 = mac(&mut dv, "null0");
    let m0s = m0.map(|b| format!("{b:02x}")).join(":");
    for c in [
        "set interface ip address null0 10.0.0.1/24".to_string(),
        "set interface ip address null1 10.0.1.1/24".into(),
        format!("ip neighbor null1 10.0.1.2 {m0s}"),
        "ip route add 10.2.0.0/16 via 10.0.1.2".into(),
    ] {
        cli(&mut dv, &dt, &c);
    }
    let rx_frames = frames(m0, 2);
    sluice_dpdk::fill_rx_pool(&mut dv, &rx_frames).expect("fill");
    fill_arena(&dv, &rx_frames);
    let count = arg("--packets", 0.0) as u64;
    if count > 0 {
        cli(&mut dv, &dt, "set interface state null0 up");
        cli(&mut dv, &dt, "set interface state null1 up");
        let c0 = tx_packets(&mut dv, "null1");
        while tx_packets(&mut dv, "null1") < c0 + count {
            for _ in 0..REFILL {
                dv.run_main_once();
            }
            fill_arena(&dv, &rx_frames);
        }
        let sent = tx_packets(&mut dv, "null1") - c0;
        let drops = node_vectors(&dv, "error-drop");
        println!("forwarded {sent} packets, dropped {drops}");
        if drops > 0 {
            print!("{}", dt.execute(&mut dv, "show errors").unwrap_or_default());
        }
        return;
    }
    for c in [
        "create packet-generator interface pg0",
        "create packet-generator interface pg1",
        "set interface state pg0 up",
        "set interface state pg1 up",
        "set interface ip address pg0 10.0.0.1/24",
        "set interface ip address pg1 10.0.1.1/24",
        "ip neighbor pg1 10.0.1.2 02:00:00:00:01:02",
        "ip route add 10.2.0.0/16 via 10.0.1.2",
    ] {
        cli(&mut pv, &pt, c);
    }
    let dir = std::env::temp_dir().join(format!("sluice-dpdk-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let pcap = dir.join("ip4.pcap");
    {
        let f = std::fs::File::create(&pcap).expect("pcap");
        let mut w = pcap_file::pcap::PcapWriter::new(f).expect("pcap");
        for fr in frames(mac(&mut pv, "pg0"), 2) {
            w.write_packet(&pcap_file::pcap::PcapPacket::new(
                std::time::Duration::ZERO,
                fr.len() as u32,
                &fr,
            ))
            .expect("pcap");
        }
    }
    let mut d_mpps = Vec::new();
    let mut p_mpps = Vec::new();
    let mut io = Vec::new();
    let mut rxc = Vec::new();
    let mut txc = Vec::new();
    let mut vpc = Vec::new();
    let mut d_path: Vec<Vec<f64>> = vec![Vec::new(); PATH.len()];
    let mut p_path: Vec<Vec<f64>> = vec![Vec::new(); PATH.len()];
    let mut pg_in = Vec::new();
    for run in 0..=runs {
        // DPDK: up for the window only (down, ethernet-input drops what net_null gives).
        cli(&mut dv, &dt, "set interface state null0 up");
        cli(&mut dv, &dt, "set interface state null1 up");
        cli(&mut dv, &dt, "clear runtime");
        cli(&mut dv, &dt, "clear errors");
        let c0 = tx_packets(&mut dv, "null1");
        let t0 = Instant::now();
        let mut dtime = 0.0;
        while t0.elapsed().as_secs_f64() < secs {
            let t = Instant::now();
            for _ in 0..REFILL {
                dv.run_main_once();
            }
            dtime += t.elapsed().as_secs_f64();
            fill_arena(&dv, &rx_frames);
        }
        let c1 = tx_packets(&mut dv, "null1");
        cli(&mut dv, &dt, "set interface state null0 down");
        cli(&mut dv, &dt, "set interface state null1 down");
        let drops = node_vectors(&dv, "error-drop");
        assert_eq!(drops, 0, "packets dropped: the path is not what it claims");
        // pg: the same number of packets the DPDK run forwarded, at least 1M.
        let n = (c1 - c0).max(1_000_000);
        let _ = pt.execute(&mut pv, "packet-generator delete s");
        cli(
            &mut pv,
            &pt,
            &format!(
                "packet-generator new pcap {} source pg0 name s limit {n} node ethernet-input",
                pcap.display()
            ),
        );
        cli(&mut pv, &pt, "clear runtime");
        let before = node_vectors(&pv, "pg-tx");
        cli(&mut pv, &pt, "packet-generator enable");
        let t1 = Instant::now();
        while node_vectors(&pv, "pg-tx") < before + n && t1.elapsed().as_secs() < 120 {
            pv.run_main_once();
        }
        let ptime = t1.elapsed().as_secs_f64();
        if run == 0 {
            continue; // warm-up
        }
        d_mpps.push((c1 - c0) as f64 / dtime / 1e6);
        p_mpps.push(n as f64 / ptime / 1e6);
        let (r, t) = (node_clocks(&dv, "dpdk-input"), node_clocks(&dv, "dpdk-tx"));
        rxc.push(r);
        txc.push(t);
        io.push(r + t);
        vpc.push(node_vectors(&dv, "dpdk-tx") as f64 / node_calls(&dv, "dpdk-tx").max(1) as f64);
        for (k, node) in PATH.iter().enumerate() {
            d_path[k].push(node_clocks(&dv, node));
            p_path[k].push(node_clocks(&pv, node));
        }
        pg_in.push(node_clocks(&pv, "pg-input") + node_clocks(&pv, "pg-tx"));
    }
    let (a, m, b) = stats(d_mpps.clone());
    let (pa, pm, pb) = stats(p_mpps.clone());
    let ratios: Vec<f64> = d_mpps.iter().zip(&p_mpps).map(|(d, p)| d / p).collect();
    let (ra, rm, rb) = stats(ratios);
    let tsc = sluice_infra::clock::Clock::calibrate().hz() / 1e9;
    println!("# dpdk_bench: IPv4 forwarding, 60-byte frames, one route, one core\n");
    println!(
        "TSC {tsc:.3} GHz, {runs} runs of {secs} s (DPDK) / the same packet count (pg), DPDK {}\n",
        sluice_dpdk::sys::BUILT_VERSION
    );
    println!("| path | Mpps min | median | max |\n|---|---|---|---|");
    println!(
        "| net_null0 -> dpdk-input -> ip4 -> dpdk-tx -> net_null1 | {a:.2} | {m:.2} | {b:.2} |"
    );
    println!("| pg0 -> pg-input -> ip4 -> pg-tx | {pa:.2} | {pm:.2} | {pb:.2} |");
    println!("| ratio dpdk / pg (per run pair) | {ra:.2} | {rm:.2} | {rb:.2} |\n");
    let (x, y, z) = stats(io);
    let (rx1, rx2, rx3) = stats(rxc);
    let (tx1, tx2, tx3) = stats(txc);
    let (g1, g2, g3) = stats(pg_in);
    println!("| clocks/packet | min | median | max |\n|---|---|---|---|");
    println!("| dpdk-input | {rx1:.1} | {rx2:.1} | {rx3:.1} |");
    println!("| dpdk-tx | {tx1:.1} | {tx2:.1} | {tx3:.1} |");
    println!("| dpdk-input + dpdk-tx | {x:.1} | {y:.1} | {z:.1} |");
    println!("| pg-input + pg-tx | {g1:.1} | {g2:.1} | {g3:.1} |\n");
    let (_, v, _) = stats(vpc);
    println!("dpdk-tx vectors/call (median): {v:.1}\n");
    println!("| node (median clk/pkt) | dpdk path | pg path |\n|---|---|---|");
    for (k, node) in PATH.iter().enumerate() {
        let (_, dm, _) = stats(d_path[k].clone());
        let (_, pm, _) = stats(p_path[k].clone());
        println!("| {node} | {dm:.1} | {pm:.1} |");
    }
    println!("\nruns: dpdk {d_mpps:.2?} Mpps, pg {p_mpps:.2?} Mpps");
    let _ = std::fs::remove_dir_all(&dir);
}
