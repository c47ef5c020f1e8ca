//! `dpdk_bench`: the IPv4 forwarding path through DPDK virtual devices against the same path
//! between two pg interfaces, in one process, on one core, with the same frames and the same
//! (one-route) FIB. Two device setups:
//!
//! - `null` (default): net_null0 (rx) -> dpdk-input -> ethernet-input -> ip4-input ->
//!   ip4-lookup -> ip4-rewrite -> interface-output -> dpdk-tx -> net_null1 (tx, frees). The
//!   issue's benchmark; net_null's own rx and tx (mbuf allocation and free per packet) cost
//!   about as much as testpmd's whole io forwarding.
//! - `ring`: net_ring0, whose transmit enqueues into its own receive ring: 512 packets
//!   injected once (by a pg stream routed out of ring0) go round dpdk-input -> ip4 ->
//!   dpdk-tx -> ring0, each dispatch loop taking a full frame of 256. The PMD costs little
//!   (a ring enqueue and dequeue, no mbuf allocated or freed), so what is measured is
//!   Sluice's part.
//! - pg: pg0 (pcap replay) -> pg-input -> ... -> interface-output -> pg-tx (frees).
//!
//! Neither device writes packet data (net_null hands out mbufs as they are, net_ring gives
//! back what was transmitted, TTL decremented): under zero copy that data is the Sluice
//! buffer's, forwarded in place (MACs rewritten: the neighbour's MAC is the receiving
//! device's own, so a frame stays forwardable), and the frames (TTL 255) are written into
//! every Sluice buffer of the DPDK runtime every [`REFILL`] dispatch loops, outside the timed
//! window (a NIC writes them by DMA, at no CPU cost; the rewrite leaves caches colder for the
//! next loop, not warmer). Runs alternate between the two paths; min/median/max over
//! `--runs` runs of `--secs` seconds each. Nothing here is a test. scripts/dpdk-bench.sh runs
//! both setups next to dpdk-testpmd (io forwarding on the same devices).
//!
//! ```text
//! cargo run --release -p sluice-dpdk --example dpdk_bench -- [ring] [--runs 5] [--secs 2] [--core N]
//! ```
//!
//! `--packets N` runs only the DPDK path until N packets were forwarded and exits, for an
//! instruction count per node under callgrind (wall clocks are meaningless there);
//! scripts/callgrind-dpdk.py splits the DPDK nodes' count into Sluice's, the shim's and the
//! PMD's (`SLUICE_DPDK_SHIM_FILE` names the shim's functions for callgrind; it must name a
//! file that does not exist yet):
//!
//! ```text
//! shim=$(mktemp -u /tmp/sluice-dpdk-shim-XXXXXX.so)
//! SLUICE_DPDK_SHIM_FILE=$shim valgrind --tool=callgrind --demangle=no \
//!     --callgrind-out-file=cg.out target/release/examples/dpdk_bench [ring] --packets 409600
//! scripts/callgrind-nodes.py cg.out 409600
//! scripts/callgrind-dpdk.py cg.out 409600; rm -f "$shim"
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

/// Packets circulating through net_ring0 (its ring holds 1024): each dispatch loop's
/// dpdk-input takes a full frame (256) of them.
const RING_PACKETS: usize = 512;

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
    let ring = std::env::args().any(|a| a == "ring");
    // The DPDK runtime. null: net_null0 receives, net_null1 only transmits; ring: net_ring0
    // transmits into its own receive ring, and packets injected once (by pg, routed out of
    // ring0 with ring0's own MAC as the neighbour's) circulate through the IPv4 path.
    let conf = if ring {
        "dpdk {\n vdev net_ring0 { name ring0 }\n}"
    } else {
        "dpdk {\n vdev net_null0,size=60 { name null0 }\n vdev net_null1,size=60,no-rx=1 { name null1 }\n}"
    };
    let (rx_if, tx_if) = if ring {
        ("ring0", "ring0")
    } else {
        ("null0", "null1")
    };
    let (mut dv, dt) = runtime(conf, core);
    let m0 = mac(&mut dv, rx_if);
    let m0s = m0.map(|b| format!("{b:02x}")).join(":");
    let rx_frames = frames(m0, 2);
    if ring {
        for c in [
            "create packet-generator interface pg9".to_string(),
            "set interface state pg9 up".into(),
            "set interface ip address pg9 10.0.0.1/24".into(),
            "set interface ip address ring0 10.0.1.1/24".into(),
            format!("ip neighbor ring0 10.0.1.2 {m0s}"),
            "ip route add 10.2.0.0/16 via 10.0.1.2".into(),
            "set interface state ring0 up".into(),
        ] {
            cli(&mut dv, &dt, &c);
        }
        // Inject: pg9 -> ip4 -> ring0 (tx), then round and round.
        let dir = std::env::temp_dir().join(format!("sluice-dpdk-ring-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp dir");
        let pcap = dir.join("inject.pcap");
        write_pcap(&pcap, &frames(mac(&mut dv, "pg9"), 2)[..RING_PACKETS]);
        cli(
            &mut dv,
            &dt,
            &format!(
                "packet-generator new pcap {} source pg9 name inject limit {RING_PACKETS} node ethernet-input",
                pcap.display()
            ),
        );
        cli(&mut dv, &dt, "packet-generator enable");
        let t = Instant::now();
        while tx_packets(&mut dv, "ring0") < RING_PACKETS as u64 && t.elapsed().as_secs() < 10 {
            dv.run_main_once();
        }
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            tx_packets(&mut dv, "ring0") >= RING_PACKETS as u64,
            "injection into ring0 failed"
        );
        cli(&mut dv, &dt, "packet-generator delete inject");
    } else {
        for c in [
            "set interface ip address null0 10.0.0.1/24".to_string(),
            "set interface ip address null1 10.0.1.1/24".into(),
            format!("ip neighbor null1 10.0.1.2 {m0s}"),
            "ip route add 10.2.0.0/16 via 10.0.1.2".into(),
        ] {
            cli(&mut dv, &dt, &c);
        }
        sluice_dpdk::fill_rx_pool(&mut dv, &rx_frames).expect("fill");
    }
    // The pg runtime: the same graph, DPDK not started.
    let (mut pv, pt) = runtime("", core);
    fill_arena(&dv, &rx_frames);
    let count = arg("--packets", 0.0) as u64;
    if count > 0 {
        cli(&mut dv, &dt, &format!("set interface state {rx_if} up"));
        cli(&mut dv, &dt, &format!("set interface state {tx_if} up"));
        cli(&mut dv, &dt, "clear runtime");
        let c0 = tx_packets(&mut dv, tx_if);
        while tx_packets(&mut dv, tx_if) < c0 + count {
            for _ in 0..REFILL {
                dv.run_main_once();
            }
            fill_arena(&dv, &rx_frames);
        }
        let sent = tx_packets(&mut dv, tx_if) - c0;
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
    write_pcap(&pcap, &frames(mac(&mut pv, "pg0"), 2));
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
        // DPDK (null: up for the window only).
        cli(&mut dv, &dt, &format!("set interface state {rx_if} up"));
        cli(&mut dv, &dt, &format!("set interface state {tx_if} up"));
        cli(&mut dv, &dt, "clear runtime");
        cli(&mut dv, &dt, "clear errors");
        let c0 = tx_packets(&mut dv, tx_if);
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
        let c1 = tx_packets(&mut dv, tx_if);
        if !ring {
            // Down, ethernet-input drops what net_null gives; ring0's packets wait in its
            // ring for the next run.
            cli(&mut dv, &dt, "set interface state null0 down");
            cli(&mut dv, &dt, "set interface state null1 down");
        }
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
        "| {} | {a:.2} | {m:.2} | {b:.2} |",
        if ring {
            "net_ring0 -> dpdk-input -> ip4 -> dpdk-tx -> net_ring0 (looped)"
        } else {
            "net_null0 -> dpdk-input -> ip4 -> dpdk-tx -> net_null1"
        }
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
