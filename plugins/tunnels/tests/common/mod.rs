//! In-process graph harness for the tunnel tests: the real runtime with the tunnel plugins,
//! pg interfaces fed from pcap files and captured to pcap files.

#![allow(dead_code)]

use sluice_cli::CommandTree;
use sluice_graph::{CpuConfig, Vlib};
use sluice_vnet::Interfaces;

pub fn build() -> (Vlib, CommandTree<Vlib>) {
    let cpu = CpuConfig {
        main_core: None,
        workers: Vec::new(),
    };
    let pool = sluice_buffer::PoolConfig {
        buffers: 4096,
        data_size: 2048,
        page_size: sluice_buffer::PageSize::Small,
        shared: false,
    };
    let plugins = sluice_tunnels::plugins();
    let entries = sluice_vnet::plugin::PluginsConfig::default().entries(&plugins);
    let a =
        sluice_vnet::plugin::assemble(&entries, &cpu, &pool, Default::default()).expect("runtime");
    (a.vm, a.cli)
}

pub fn cli(vm: &mut Vlib, t: &CommandTree<Vlib>, c: &str) -> String {
    t.execute(vm, c).unwrap_or_else(|e| panic!("`{c}': {e}"))
}

/// Runs each of `cmds` ([`cli`]).
pub fn clis(vm: &mut Vlib, t: &CommandTree<Vlib>, cmds: &[impl AsRef<str>]) {
    for c in cmds {
        cli(vm, t, c.as_ref());
    }
}

/// The one-line error `c` must fail with.
pub fn cli_err(vm: &mut Vlib, t: &CommandTree<Vlib>, c: &str) -> String {
    let e = t
        .execute(vm, c)
        .err()
        .unwrap_or_else(|| panic!("`{c}' succeeded"))
        .to_string();
    assert!(!e.contains('\n'), "`{c}': not one line: {e}");
    e
}

/// Each command fails with a one-line error containing its token.
pub fn cli_errs(vm: &mut Vlib, t: &CommandTree<Vlib>, cases: &[(&str, &str)]) {
    for (c, token) in cases {
        let e = cli_err(vm, t, c);
        assert!(e.contains(token), "`{c}': {e}");
    }
}

pub fn mac_of(vm: &Vlib, name: &str) -> [u8; 6] {
    let ifs = vm.ext::<Interfaces>().unwrap();
    ifs.get(ifs.find(name).unwrap()).unwrap().mac
}

pub fn write_pcap(path: &std::path::Path, frames: &[Vec<u8>]) {
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

pub fn read_pcap(path: &std::path::Path) -> Vec<Vec<u8>> {
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

/// Counter `name` of node `node`, summed over threads.
pub fn counter(vm: &Vlib, node: &str, name: &str) -> u64 {
    let i = vm.registry.find(node).unwrap_or_else(|| panic!("{node}"));
    let n = vm.registry.node(i);
    let c = n
        .counters
        .iter()
        .position(|c| c.name == name)
        .unwrap_or_else(|| panic!("{node} has no counter {name}"));
    n.stats.counter_total(c)
}

/// Packets node `node` was called with (its vector count), summed over threads.
pub fn vectors(vm: &Vlib, node: &str) -> u64 {
    let i = vm.registry.find(node).unwrap_or_else(|| panic!("{node}"));
    let s = &vm.registry.node(i).stats;
    s.per_thread.iter().map(|t| t.vectors.get()).sum()
}

/// Interface counter `c` (`sluice_vnet::interface::counter`) of `name`.
pub fn if_counter(vm: &Vlib, name: &str, c: usize) -> u64 {
    let ifs = vm.ext::<Interfaces>().unwrap();
    ifs.get(ifs.find(name).unwrap()).unwrap().counters.total(c)
}

/// Sends `frames` into `rx` and returns what `tx` sent (up to `expect` frames: with
/// `expect` 0 nothing is captured, so an emptiness check on the result cannot fail — to
/// check that nothing is sent, capture with a count above 0).
pub fn run(
    vm: &mut Vlib,
    t: &CommandTree<Vlib>,
    rx: &str,
    tx: &str,
    frames: &[Vec<u8>],
    expect: usize,
) -> Vec<Vec<u8>> {
    static RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("tunnels-test-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let inp = dir.join("in.pcap");
    let outp = dir.join("out.pcap");
    write_pcap(&inp, frames);
    *vm.ext_mut::<sluice_graph::pcap::CaptureDir>() = sluice_graph::pcap::CaptureDir(
        sluice_infra::files::OutputDir::new(&dir).expect("absolute temp dir"),
    );
    if expect > 0 {
        cli(
            vm,
            t,
            &format!(
                "packet-generator capture {tx} pcap {} count {expect}",
                outp.display()
            ),
        );
    }
    let _ = t.execute(vm, "packet-generator delete s");
    cli(
        vm,
        t,
        &format!(
            "packet-generator new pcap {} source {rx} name s limit {} node ethernet-input",
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
    let _ = t.execute(vm, "packet-generator delete s");
    if expect > 0 {
        cli(vm, t, &format!("packet-generator capture {tx} disable"));
    }
    let out = read_pcap(&outp);
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// Buffers in use (must be 0 at the end of every test).
pub fn in_use(vm: &Vlib) -> usize {
    vm.pool.stats().in_use as usize
}

/// A 14-byte Ethernet header.
pub fn eth(dst: [u8; 6], src: [u8; 6], et: u16) -> Vec<u8> {
    let mut v = dst.to_vec();
    v.extend_from_slice(&src);
    v.extend_from_slice(&et.to_be_bytes());
    v
}

/// A 20-byte IPv4 header with a correct checksum (ID 0, DF clear, TTL `ttl`).
pub fn ip4(src: [u8; 4], dst: [u8; 4], proto: u8, payload_len: usize, ttl: u8) -> Vec<u8> {
    let total = (20 + payload_len) as u16;
    let mut h = vec![0x45, 0];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&[0, 0, 0, 0, ttl, proto, 0, 0]);
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    let c = sluice_wire::checksum::internet_checksum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h
}

/// A 40-byte IPv6 header.
pub fn ip6(src: [u8; 16], dst: [u8; 16], nh: u8, payload_len: usize, hl: u8) -> Vec<u8> {
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&(payload_len as u16).to_be_bytes());
    h.push(nh);
    h.push(hl);
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    h
}

/// An Ethernet frame `smac` → `dmac` carrying an IPv6 packet `src` → `dst`, next header
/// `nh`, hop limit `hl`, `payload`.
pub fn frame6(
    dmac: [u8; 6],
    smac: [u8; 6],
    src: [u8; 16],
    dst: [u8; 16],
    nh: u8,
    payload: &[u8],
    hl: u8,
) -> Vec<u8> {
    let mut f = eth(dmac, smac, 0x86dd);
    f.extend(ip6(src, dst, nh, payload.len(), hl));
    f.extend_from_slice(payload);
    f
}

/// An inner Ethernet frame carrying an IPv4 UDP datagram of `n` payload bytes.
pub fn inner_frame(dst: [u8; 6], src: [u8; 6], n: usize) -> Vec<u8> {
    let mut f = eth(dst, src, 0x0800);
    f.extend(ip4([192, 168, 1, 1], [192, 168, 1, 2], 17, 8 + n, 64));
    f.extend_from_slice(&1000u16.to_be_bytes());
    f.extend_from_slice(&2000u16.to_be_bytes());
    f.extend_from_slice(&((8 + n) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend((0..n).map(|i| i as u8));
    f
}

/// The underlay peer's MAC (on pg0) and the routed LAN host's MAC (on pg1).
pub const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
pub const HOST_MAC: [u8; 6] = [0x02, 0, 0, 0, 1, 0x02];

/// An IPv6 address's bytes.
pub fn a6(s: &str) -> [u8; 16] {
    s.parse::<std::net::Ipv6Addr>().unwrap().octets()
}

/// pg0: underlay (10.0.0.1/24 and 2001:db8::1/64, peer .2 / ::2); pg1: a routed LAN
/// 172.16.0.1/24 + 2001:db8:1::1/64 with host .2 / ::2.
pub fn routed() -> (Vlib, CommandTree<Vlib>) {
    let (mut vm, t) = build();
    clis(
        &mut vm,
        &t,
        &[
            "create packet-generator interface pg0",
            "create packet-generator interface pg1",
            "set interface state pg0 up",
            "set interface state pg1 up",
            "set interface ip address pg0 10.0.0.1/24",
            "set interface ip address pg0 2001:db8::1/64",
            "set interface ip address pg1 172.16.0.1/24",
            "set interface ip address pg1 2001:db8:1::1/64",
            "ip neighbor pg0 10.0.0.2 02:00:00:00:00:02 static",
            "ip neighbor pg0 2001:db8::2 02:00:00:00:00:02 static",
            "ip neighbor pg1 172.16.0.2 02:00:00:00:01:02 static",
            "ip neighbor pg1 2001:db8:1::2 02:00:00:00:01:02 static",
        ],
    );
    (vm, t)
}

/// An IPv4 UDP datagram (4 payload bytes, checksum 0) with TTL `ttl`.
pub fn udp4(src: [u8; 4], dst: [u8; 4], ttl: u8) -> Vec<u8> {
    let mut p = ip4(src, dst, 17, 12, ttl);
    p.extend_from_slice(&[0x30, 0x39, 0, 9, 0, 12, 0, 0, 1, 2, 3, 4]);
    p
}

/// An IPv6 UDP datagram (4 payload bytes, checksum left 0) with hop limit `hl`.
pub fn udp6(src: [u8; 16], dst: [u8; 16], hl: u8) -> Vec<u8> {
    let mut p = ip6(src, dst, 17, 12, hl);
    p.extend_from_slice(&[0x30, 0x39, 0, 9, 0, 12, 0, 0, 1, 2, 3, 4]);
    p
}

/// A tunnel's local and remote underlay addresses in these tests, IPv6 or IPv4.
pub fn underlay(v6: bool) -> (&'static str, &'static str) {
    if v6 {
        ("2001:db8::1", "2001:db8::2")
    } else {
        ("10.0.0.1", "10.0.0.2")
    }
}
