//! In-process tests of the tester: the real graph with loopback interfaces (what is sent out
//! of a loopback comes back in on it, through `ethernet-input` and its tester-rx redirect),
//! configured through the real CLI.

use super::*;
use sluice_buffer::{BufIdx, PageSize, PoolConfig};
use sluice_graph::CpuConfig;
use sluice_vnet::plugin::{assemble, Plugin, PluginsConfig, Staged};
use std::time::{Duration, Instant};

fn setup() -> (Vlib, CommandTree<Vlib>) {
    let pool = PoolConfig {
        buffers: 8192,
        data_size: 2048,
        page_size: PageSize::Small,
        shared: false,
    };
    let plugins: [&'static dyn Plugin; 1] = [&crate::PLUGIN];
    let entries = PluginsConfig::default().entries(&plugins);
    let a = assemble(&entries, &CpuConfig::default(), &pool, Staged::default()).unwrap();
    let (mut vm, t) = (a.vm, a.cli);
    for c in [
        "create loopback interface",
        "set interface state loop0 up",
        "set interface tester-rx loop0",
    ] {
        t.execute(&mut vm, c).unwrap();
    }
    (vm, t)
}

fn ok(vm: &mut Vlib, t: &CommandTree<Vlib>, cmd: &str) -> String {
    t.execute(vm, cmd)
        .unwrap_or_else(|e| panic!("`{cmd}' failed: {e}"))
}

fn err(vm: &mut Vlib, t: &CommandTree<Vlib>, cmd: &str) -> String {
    match t.execute(vm, cmd) {
        Ok(o) => panic!("`{cmd}' succeeded: {o}"),
        Err(e) => e.msg,
    }
}

/// Runs the main thread until no stream runs (and a few loops more for the last frames).
fn run_until_stopped(vm: &mut Vlib) {
    let t0 = Instant::now();
    while reports(vm).unwrap().iter().any(|r| r.running) {
        for _ in 0..100 {
            vm.run_main_once();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "stream never stopped"
        );
    }
    for _ in 0..10 {
        vm.run_main_once();
    }
}

fn report(vm: &mut Vlib, name: &str) -> Report {
    reports(vm)
        .unwrap()
        .into_iter()
        .find(|r| r.name == name)
        .unwrap()
}

fn counter(vm: &Vlib, node: &str, name: &str) -> u64 {
    let i = vm.registry.find(node).unwrap();
    let n = vm.registry.node(i);
    let c = n.counters.iter().position(|c| c.name == name).unwrap();
    n.stats.counter_total(c)
}

fn in_use(vm: &Vlib) -> u64 {
    vm.pool.stats().in_use
}

const ADD: &str = "tester stream add name s interface loop0 size 64 rate 1000000 dst-mac 02:00:00:00:00:02 src 10.0.0.1-10.0.0.10 dst 10.1.0.1";

/// A `pcap trace tx` capture into its own temp dir, removed when the frames are read.
struct TxCapture {
    dir: std::path::PathBuf,
    file: std::path::PathBuf,
}

impl TxCapture {
    /// Starts `pcap trace tx <opts> file ...` in a fresh dir named after `tag`.
    fn start(vm: &mut Vlib, t: &CommandTree<Vlib>, tag: &str, opts: &str) -> TxCapture {
        let dir = std::env::temp_dir().join(format!("sluice-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("tx.pcap");
        // Capture files are confined to the capture directory (sluice_graph::pcap).
        *vm.ext_mut::<sluice_graph::pcap::CaptureDir>() = sluice_graph::pcap::CaptureDir(
            sluice_infra::files::OutputDir::new(&dir).expect("absolute temp dir"),
        );
        ok(
            vm,
            t,
            &format!("pcap trace tx {opts} file {}", file.display()),
        );
        TxCapture { dir, file }
    }

    /// Stops the capture; the frames it wrote.
    fn frames(self, vm: &mut Vlib, t: &CommandTree<Vlib>) -> Vec<Vec<u8>> {
        ok(vm, t, "pcap trace off");
        let frames = sluice_vnet::pg::stream::read_pcap(&self.file).unwrap();
        let _ = std::fs::remove_dir_all(&self.dir);
        frames
    }
}

#[test]
fn a_stream_looped_back_is_fully_accounted() {
    let (mut vm, t) = setup();
    ok(&mut vm, &t, &format!("{ADD} count 20000 flows 40"));
    ok(
        &mut vm,
        &t,
        "tester stream add name lat interface loop0 size 64 rate 2000 count 20 dst-mac 02:00:00:00:00:02 src 10.0.0.1 dst 10.1.0.1 latency",
    );
    ok(&mut vm, &t, "tester start");
    run_until_stopped(&mut vm);
    for (name, n) in [("s", 20000u64), ("lat", 20)] {
        let r = report(&mut vm, name);
        assert_eq!((r.tx_packets, r.tx_fail), (n, 0), "{name}");
        assert_eq!(r.tx_bytes, n * 64);
        assert_eq!((r.rx.packets, r.rx.bytes), (n, n * 64), "{name}");
        assert_eq!((r.lost, r.rx.reordered, r.rx.duplicate), (0, 0, 0));
        let l = r.rx.latency.summary().unwrap();
        assert!(l.min > 0 && l.max < 10_000_000_000, "{l:?}");
        assert_eq!(r.rx.latency.count(), n);
        assert!(r.elapsed_s > 0.0 && r.offered_rate_pps > 0.0);
        assert!(r.jitter_ns().is_some());
    }
    assert!(report(&mut vm, "lat").latency_stream);
    assert_eq!(counter(&vm, node::RX, "received"), 20020);
    let text = ok(&mut vm, &t, "show tester");
    assert!(text.contains("s: interface loop0, IPv4, size 64"), "{text}");
    assert!(text.contains("rx packets 20000"), "{text}");
    let json = ok(&mut vm, &t, "show tester json");
    assert_eq!(json.lines().count(), 1);
    assert!(json.starts_with("{\"streams\": {\"s\": {"), "{json}");
    assert!(json.contains("\"tx_packets\": 20000, "), "{json}");
    assert!(json.contains("\"running\": false"), "{json}");
    // `tester clear` zeroes; a restart counts from zero again.
    ok(&mut vm, &t, "tester clear");
    let r = report(&mut vm, "s");
    assert_eq!(
        (r.tx_packets, r.rx.packets, r.rx.latency.count()),
        (0, 0, 0)
    );
    ok(&mut vm, &t, "tester start name lat");
    run_until_stopped(&mut vm);
    let r = report(&mut vm, "lat");
    assert_eq!((r.tx_packets, r.rx.packets, r.rx.reordered), (20, 20, 0));
    assert_eq!(report(&mut vm, "s").tx_packets, 0);
    ok(&mut vm, &t, "tester stream del name s");
    ok(&mut vm, &t, "tester stream del lat");
    assert_eq!(ok(&mut vm, &t, "show tester"), "no tester streams\n");
    assert_eq!(in_use(&vm), 0);
}

#[test]
fn flows_source_addresses_and_jumbo_frames_on_the_wire() {
    let (mut vm, t) = setup();
    // A pcap of what interface-output sends shows the exact frames.
    let cap = TxCapture::start(&mut vm, &t, "tester", "max 100 max-bytes-per-pkt 9000");
    ok(
        &mut vm,
        &t,
        "tester stream add name j interface loop0 size 5000 rate 100000 count 6 dst-mac 02:00:00:00:00:02 src-mac 02:00:00:00:00:01 src 10.0.0.1-10.0.0.2 dst 10.1.0.1 sport 7000 dport 9 flows 3",
    );
    ok(&mut vm, &t, "tester start");
    run_until_stopped(&mut vm);
    let frames = cap.frames(&mut vm, &t);
    let r = report(&mut vm, "j");
    assert_eq!((r.tx_packets, r.rx.packets, r.rx.bytes), (6, 6, 30000));
    assert_eq!(frames.len(), 6);
    let mut tuples = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(f.len(), 5000);
        assert_eq!(&f[0..12], &[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
        assert_eq!(
            u16::from_be_bytes([f[16], f[17]]),
            4986,
            "IPv4 total length"
        );
        assert_eq!(
            sluice_wire::checksum::internet_checksum(&f[14..34]),
            0,
            "IPv4 checksum"
        );
        assert_eq!(u16::from_be_bytes([f[38], f[39]]), 4966, "UDP length");
        assert_eq!(u16::from_be_bytes([f[36], f[37]]), 9);
        let s = sig::parse_frame(f).unwrap();
        assert_eq!(s.seq, i as u64);
        tuples.push((f[29], u16::from_be_bytes([f[34], f[35]])));
    }
    // 3 flows over 2 addresses: address first, then port.
    assert_eq!(
        tuples,
        vec![
            (1, 7000),
            (2, 7000),
            (1, 7001),
            (1, 7000),
            (2, 7000),
            (1, 7001)
        ]
    );
    assert_eq!(in_use(&vm), 0);
}

#[test]
fn destination_range_spreads_over_every_address_with_valid_checksums() {
    let (mut vm, t) = setup();
    let cap = TxCapture::start(&mut vm, &t, "tester-dst", "max 100");
    // 5 destinations: every 5 consecutive frames visit each once, not in address order.
    ok(
        &mut vm,
        &t,
        "tester stream add name d interface loop0 size 64 rate 100000 count 10 dst-mac 02:00:00:00:00:02 src 10.0.0.1 dst 10.1.0.1 - 10.1.0.5",
    );
    ok(&mut vm, &t, "tester start");
    run_until_stopped(&mut vm);
    let frames = cap.frames(&mut vm, &t);
    assert_eq!(report(&mut vm, "d").rx.packets, 10);
    assert_eq!(frames.len(), 10);
    let dsts: Vec<u8> = frames
        .iter()
        .map(|f| {
            assert_eq!(&f[30..33], &[10, 1, 0]);
            assert_eq!(
                sluice_wire::checksum::internet_checksum(&f[14..34]),
                0,
                "IPv4 checksum"
            );
            f[33]
        })
        .collect();
    let mut lap: Vec<u8> = dsts[..5].to_vec();
    lap.sort();
    assert_eq!(lap, vec![1, 2, 3, 4, 5], "{dsts:?}");
    assert_eq!(&dsts[..5], &dsts[5..], "period 5");
    assert_ne!(&dsts[..5], &[1, 2, 3, 4, 5], "spread, not address order");
    assert!(err(
        &mut vm,
        &t,
        &ADD.replace("dst 10.1.0.1", "dst 10.1.0.9-10.1.0.1")
    )
    .contains("ends before it starts at `10.1.0.1'"));
    assert_eq!(in_use(&vm), 0);
}

/// Builds a 64-byte tester frame and injects it into `ethernet-input` as received on loop0.
fn inject(vm: &mut Vlib, frames: &[Vec<u8>]) {
    let eth = vm.registry.find("ethernet-input").unwrap();
    let mut idx = vec![BufIdx(0); frames.len()];
    assert_eq!(vm.main.bufs().alloc(&mut idx), frames.len());
    for (b, f) in idx.iter().zip(frames) {
        // SAFETY: just allocated; one view at a time.
        let mut v = unsafe { vm.pool.buffer(*b) };
        v.write_packet(f);
        v.hdr.rx_if = 1;
    }
    vm.main.inject(eth, &idx);
    vm.main.drain();
}

fn frame(stream: u16, generation: u8, seq: u64) -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[16..18].copy_from_slice(&50u16.to_be_bytes());
    f[23] = 17;
    f[38..40].copy_from_slice(&30u16.to_be_bytes());
    sig::write(
        &mut f[42..],
        &sig::Sig {
            stream,
            flags: (generation as u16) << 8,
            seq,
            tx_ns: 1,
        },
    );
    f
}

#[test]
fn sequence_errors_stale_runs_and_garbage_are_counted() {
    let (mut vm, t) = setup();
    ok(&mut vm, &t, &format!("{ADD} count 0"));
    ok(&mut vm, &t, "tester start"); // generation 1, sends nothing
    run_until_stopped(&mut vm);
    let seqs = [0u64, 1, 3, 2, 2, 5, 0];
    let mut frames: Vec<Vec<u8>> = seqs.iter().map(|&s| frame(0, 1, s)).collect();
    frames.push(frame(0, 9, 4)); // an earlier run
    frames.push(frame(77, 1, 0)); // no such stream
    let mut garbage = frame(0, 1, 8);
    garbage[42] = b'X'; // bad magic
    frames.push(garbage);
    frames.push(vec![0xff; 10]); // runt
    let mut arp = frame(0, 1, 9);
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    frames.push(arp);
    inject(&mut vm, &frames);
    let r = report(&mut vm, "s");
    assert_eq!(r.rx.packets, 7);
    assert_eq!((r.rx.reordered, r.rx.duplicate), (1, 2));
    assert_eq!(
        r.rx.latency.count(),
        5,
        "duplicates are not in the latency statistics"
    );
    assert_eq!(counter(&vm, node::RX, "stale"), 1);
    assert_eq!(counter(&vm, node::RX, "unknown_stream"), 1);
    assert_eq!(counter(&vm, node::RX, "not_tester"), 3);
    assert_eq!(counter(&vm, node::RX, "received"), 7);
    let errors = ok(&mut vm, &t, "show errors");
    assert!(errors.contains("not a tester frame"), "{errors}");
    // Random bytes of every length never panic and are all dropped as not_tester.
    let mut x = 7u64;
    let junk: Vec<Vec<u8>> = (0..300)
        .map(|n| {
            (0..n % 100)
                .map(|_| {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    (x >> 56) as u8
                })
                .collect()
        })
        .collect();
    inject(&mut vm, &junk);
    assert_eq!(counter(&vm, node::RX, "not_tester"), 303);
    // Disabling tester-rx gives the interface back to ethernet-input.
    ok(&mut vm, &t, "set interface tester-rx loop0 disable");
    inject(&mut vm, &[frame(0, 1, 10)]);
    assert_eq!(report(&mut vm, "s").rx.packets, 7);
    assert_eq!(in_use(&vm), 0);
}

#[test]
fn stop_delete_and_restart_under_traffic() {
    let (mut vm, t) = setup();
    ok(&mut vm, &t, ADD); // runs until stopped
    ok(&mut vm, &t, "tester start");
    for _ in 0..2000 {
        vm.run_main_once();
    }
    assert!(report(&mut vm, "s").running);
    ok(&mut vm, &t, "tester stop name s");
    run_until_stopped(&mut vm);
    let r = report(&mut vm, "s");
    assert!(r.tx_packets > 0 && !r.running);
    assert_eq!((r.rx.packets, r.lost), (r.tx_packets, 0));
    // Restart, then delete while it sends, and delete the interface of a second stream.
    ok(&mut vm, &t, "tester start");
    for _ in 0..500 {
        vm.run_main_once();
    }
    ok(&mut vm, &t, "tester stream del name s");
    for _ in 0..100 {
        vm.run_main_once();
    }
    ok(&mut vm, &t, "create loopback interface");
    ok(&mut vm, &t, "set interface state loop1 up");
    ok(
        &mut vm,
        &t,
        "tester stream add name b interface loop1 size 64 rate 1e6 dst-mac 02:00:00:00:00:02 src 10.0.0.1 dst 10.1.0.1",
    );
    ok(&mut vm, &t, "tester start");
    for _ in 0..200 {
        vm.run_main_once();
    }
    ok(&mut vm, &t, "delete loopback interface intfc loop1");
    for _ in 0..200 {
        vm.run_main_once();
    }
    ok(&mut vm, &t, "tester stop");
    run_until_stopped(&mut vm);
    assert_eq!(in_use(&vm), 0);
}

#[test]
fn cli_errors_name_the_token() {
    let (mut vm, t) = setup();
    let cases = [
        (
            format!("{ADD} size 63"),
            "frame size `63' out of range 64..9000",
        ),
        (
            ADD.replace("size 64", "size 9001"),
            "frame size `9001' out of range 64..9000",
        ),
        (ADD.replace("rate 1000000", "rate fast"), "`fast'"),
        (
            ADD.replace("rate 1000000", "rate 0"),
            "rate `0' out of range",
        ),
        (ADD.replace("loop0", "eth9"), "unknown interface `eth9'"),
        (
            ADD.replace("02:00:00:00:00:02", "02:zz:00:00:00:02"),
            "bad MAC address `02:zz:00:00:00:02'",
        ),
        (
            ADD.replace("10.1.0.1", "10.1.0.300"),
            "expected IPv4 address, got `10.1.0.300'",
        ),
        (
            ADD.replace("10.0.0.1-10.0.0.10", "10.0.0.9-10.0.0.1"),
            "ends before it starts at `10.0.0.1'",
        ),
        (format!("{ADD} flows 0"), "flows `0' must be at least 1"),
        (format!("{ADD} sport 70000"), "`70000'"),
        (format!("{ADD} bogus"), "`bogus'"),
        (format!("{ADD} worker 3"), "worker 3 does not exist"),
        (format!("{ADD} count 5 duration 1"), "not both"),
        (
            ADD.replace(" dst-mac 02:00:00:00:00:02", ""),
            "missing `dst-mac <mac>'",
        ),
        (ADD.replace(" name s", ""), "missing `name <s>'"),
        (
            "tester start name nope".to_string(),
            "unknown stream `nope'",
        ),
        (
            "tester stream del name nope".to_string(),
            "unknown stream `nope'",
        ),
        (
            "set interface tester-rx eth7".to_string(),
            "unknown interface `eth7'",
        ),
        ("show tester jsn".to_string(), "`jsn'"),
    ];
    for (cmd, want) in &cases {
        let e = err(&mut vm, &t, cmd);
        assert!(e.contains(want), "`{cmd}': got `{e}', want `{want}'");
        assert_eq!(e.lines().count(), 1);
    }
    ok(&mut vm, &t, ADD);
    assert!(err(&mut vm, &t, ADD).contains("stream `s' already exists"));
    ok(&mut vm, &t, "set interface state loop0 down");
    assert!(err(&mut vm, &t, "tester start").contains("interface `loop0' is down"));
}

#[test]
fn json_output_shape() {
    let mut rx = RxStats::default();
    for (i, lat) in [100u64, 300, 300].iter().enumerate() {
        rx.record(
            &sig::Sig {
                stream: 0,
                flags: 0,
                seq: i as u64,
                tx_ns: 1000,
            },
            1000 + lat,
            64,
        );
    }
    let r = Report {
        name: "a\"b".into(),
        interface: "host-x".into(),
        size: 64,
        rate: 1000.0,
        flows: 1,
        latency_stream: false,
        ip_version: 4,
        tx_packets: 4,
        tx_bytes: 256,
        tx_fail: 1,
        rx,
        lost: 1,
        running: false,
        elapsed_s: 0.004,
        offered_rate_pps: 1250.0,
    };
    let j = format_json(&[r]);
    let want = concat!(
        "{\"streams\": {\"a\\\"b\": {\"interface\": \"host-x\", \"ip_version\": 4, \"size\": 64, \"rate_pps\": 1000.000, ",
        "\"flows\": 1, \"latency_stream\": false, \"tx_packets\": 4, \"tx_bytes\": 256, \"tx_fail\": 1, ",
        "\"rx_packets\": 3, \"rx_bytes\": 192, \"lost\": 1, \"reordered\": 0, \"duplicate\": 0, ",
        "\"latency_ns\": {\"min\": 100, \"avg\": 233.333, \"max\": 300, \"p50\": 300, \"p90\": 300, ",
        "\"p99\": 300, \"p999\": 300}, \"jitter_ns\": 100.000, \"histogram\": {\"bucket_scheme\": "
    );
    assert!(j.starts_with(want), "{j}");
    assert!(
        j.ends_with(
            "\"counts\": [[100, 1], [300, 2]]}, \"running\": false, \"elapsed_s\": 0.004000, \"offered_rate_pps\": 1250.000}}}\n"
        ),
        "{j}"
    );
    // No samples: latency fields are null.
    let empty = Report {
        rx: RxStats::default(),
        ..Report {
            name: "e".into(),
            interface: "i".into(),
            size: 64,
            rate: 1.0,
            flows: 1,
            latency_stream: true,
            ip_version: 6,
            tx_packets: 0,
            tx_bytes: 0,
            tx_fail: 0,
            rx: RxStats::default(),
            lost: 0,
            running: true,
            elapsed_s: 0.0,
            offered_rate_pps: 0.0,
        }
    };
    let j = format_json(&[empty]);
    assert!(
        j.contains("\"latency_ns\": {\"min\": null, \"avg\": null"),
        "{j}"
    );
    assert!(j.contains("\"jitter_ns\": null"), "{j}");
    assert_eq!(format_json(&[]), "{\"streams\": {}}\n");
}

#[test]
fn latency_streams_lead_each_vector() {
    let (mut vm, t) = setup();
    ok(&mut vm, &t, &format!("{ADD} count 1000")); // stream id 0, added first
    ok(
        &mut vm,
        &t,
        "tester stream add name l interface loop0 size 64 rate 1000000 count 1000 dst-mac 02:00:00:00:00:02 src 10.0.0.1 dst 10.1.0.1 latency",
    );
    let cap = TxCapture::start(&mut vm, &t, "tester-lat", "max 4");
    ok(&mut vm, &t, "tester start");
    run_until_stopped(&mut vm);
    let frames = cap.frames(&mut vm, &t);
    let ids: Vec<(u16, u64)> = frames
        .iter()
        .map(|f| {
            let s = sig::parse_frame(f).unwrap();
            (s.stream, s.seq)
        })
        .collect();
    // `s' was added and started first, yet the latency stream's frames lead the vector.
    assert_eq!(ids[0], (1, 0), "{ids:?}");
    assert_eq!(report(&mut vm, "l").rx.packets, 1000);
}

#[test]
fn ip6_streams_on_the_wire_with_udp_checksums_and_looped_back() {
    let (mut vm, t) = setup();
    let cap = TxCapture::start(&mut vm, &t, "tester-ip6", "max 100 max-bytes-per-pkt 9000");
    // Source range over 3 addresses (flows 6: then the port), destinations over 5 addresses
    // whose range carries across a 32-bit boundary of the address.
    ok(
        &mut vm,
        &t,
        "tester stream add name v6 interface loop0 size 84 rate 100000 count 10 dst-mac 02:00:00:00:00:02 src-mac 02:00:00:00:00:01 ip6 src 2001:db8::1-2001:db8::3 dst 2001:db8:1::ffff:fffe - 2001:db8:1::1:0:2 sport 5000 dport 7 flows 6",
    );
    ok(
        &mut vm,
        &t,
        "tester stream add name j6 interface loop0 size 5000 rate 100000 count 4 dst-mac 02:00:00:00:00:02 src 2001:db8::9 dst 2001:db8:2::1",
    );
    ok(&mut vm, &t, "tester start");
    run_until_stopped(&mut vm);
    let frames = cap.frames(&mut vm, &t);
    for (name, n, size) in [("v6", 10u64, 84u64), ("j6", 4, 5000)] {
        let r = report(&mut vm, name);
        assert_eq!((r.tx_packets, r.tx_fail), (n, 0), "{name}");
        assert_eq!(
            (r.rx.packets, r.rx.bytes, r.lost),
            (n, n * size, 0),
            "{name}"
        );
        assert_eq!(r.ip_version, 6);
        assert_eq!(r.rx.latency.count(), n);
    }
    let json = ok(&mut vm, &t, "show tester json");
    assert!(json.contains("\"ip_version\": 6"), "{json}");
    assert_eq!(frames.len(), 14);
    let mut seen = Vec::new();
    for f in &frames {
        assert_eq!(&f[12..14], &[0x86, 0xdd]);
        assert_eq!(f[14] >> 4, 6);
        assert_eq!((f[20], f[21]), (17, 64), "next header UDP, hop limit 64");
        let plen = u16::from_be_bytes([f[18], f[19]]) as usize;
        assert_eq!(plen, f.len() - 54, "payload length");
        assert_eq!(
            u16::from_be_bytes([f[58], f[59]]) as usize,
            plen,
            "UDP length"
        );
        // The UDP checksum recomputed over the pseudo-header and the whole datagram.
        let src = std::net::Ipv6Addr::from(<[u8; 16]>::try_from(&f[22..38]).unwrap());
        let dst = std::net::Ipv6Addr::from(<[u8; 16]>::try_from(&f[38..54]).unwrap());
        let ph = sluice_wire::ipv6::pseudo_header_sum(src, dst, 17, plen as u32);
        let total = sluice_wire::checksum::combine(ph, sluice_wire::checksum::sum(&f[54..]));
        assert_eq!(total, 0xffff, "UDP checksum of {src} -> {dst}");
        assert_ne!(&f[60..62], &[0, 0], "UDP checksum present");
        let s = sig::parse_frame(f).unwrap();
        assert!(s.tx_ns > 0);
        if f.len() == 84 {
            seen.push((
                src.to_string(),
                dst.to_string(),
                u16::from_be_bytes([f[54], f[55]]),
                s.seq,
            ));
        } else {
            assert_eq!(f.len(), 5000);
            assert_eq!(
                (src.to_string(), dst.to_string()),
                ("2001:db8::9".into(), "2001:db8:2::1".into())
            );
        }
    }
    assert_eq!(seen.len(), 10);
    let srcs: Vec<(&str, u16)> = seen.iter().map(|x| (x.0.as_str(), x.2)).collect();
    assert_eq!(
        &srcs[..4],
        &[
            ("2001:db8::1", 5000),
            ("2001:db8::2", 5000),
            ("2001:db8::3", 5000),
            ("2001:db8::1", 5001)
        ]
    );
    let mut dsts: Vec<&str> = seen[..5].iter().map(|x| x.1.as_str()).collect();
    dsts.sort();
    assert_eq!(
        dsts,
        vec![
            "2001:db8:1::1:0:0",
            "2001:db8:1::1:0:1",
            "2001:db8:1::1:0:2",
            "2001:db8:1::ffff:fffe",
            "2001:db8:1::ffff:ffff"
        ],
        "every destination once per lap"
    );
    // Bad lines name the token.
    let base =
        "tester stream add name e interface loop0 size 84 rate 1000 dst-mac 02:00:00:00:00:02";
    for (args, want) in [
        (
            "src 2001:db8::1 dst 10.0.0.1",
            "`dst 10.0.0.1': source and destination must both",
        ),
        ("ip6 src 10.0.0.1 dst 10.0.0.2", "needs IPv6"),
        (
            "src 2001:db8::1 dst 2001:db8::5-10.0.0.1",
            "mixes IPv4 and IPv6 at `10.0.0.1'",
        ),
        (
            "src 2001:db8::1 dst 2001:db8::1-2001:db9::",
            "more than 2^32 addresses at `2001:db9::'",
        ),
        (
            "src 2001:db8::1 dst 2001:zz8::1",
            "expected IPv6 address, got `2001:zz8::1'",
        ),
    ] {
        let e = err(&mut vm, &t, &format!("{base} {args}"));
        assert!(e.contains(want), "{args}: {e}");
    }
    let e = err(
        &mut vm,
        &t,
        &(base.replace("size 84", "size 64") + " src 2001:db8::1 dst 2001:db8::2"),
    );
    assert!(e.contains("`64' out of range 84..9000 for IPv6"), "{e}");
    ok(&mut vm, &t, "tester stream del v6");
    ok(&mut vm, &t, "tester stream del j6");
    assert_eq!(in_use(&vm), 0);
}
