//! Node-level tests of the vnet nodes: each node alone in the assembled vnet graph, its next
//! nodes captured (`sluice_vnet::testing`), exact arcs, metadata and counters, zero leaked
//! buffers. One module per node family, named as the code it tests.

mod arp;
mod ethernet;
mod frame_check;
mod gso;
mod ip4;
mod ip6;
mod ip_shared;
mod l2;
mod l2_learn;
mod l2_output;
mod l2patch;
mod loopback;
mod neighbor;
mod output;
mod pg;
mod rpf;

use sluice_vnet::testing::{pkt, NodeTest};

/// Our interface's MAC (loop0) and a peer's.
pub const OUR_MAC: &str = "02:00:00:00:00:01";
pub const PEER_MAC: &str = "02:00:00:00:00:02";

/// vnet with `loop0` (MAC [`OUR_MAC`], 10.0.0.1/24, 2001:db8::1/64, up), node `node` under test.
pub fn setup(node: &str) -> (NodeTest, u32) {
    setup_with(&[], node)
}

/// [`setup`] with `plugins` registered too.
pub fn setup_with(plugins: &[sluice_vnet::plugin::PluginEntry], node: &str) -> (NodeTest, u32) {
    let mut t = NodeTest::with_plugins(plugins, node);
    t.cli(&format!(
        "create loopback interface mac {OUR_MAC}
         set interface state loop0 up
         set interface ip address loop0 10.0.0.1/24
         set interface ip address loop0 2001:db8::1/64"
    ));
    let sw = t.sw_if("loop0");
    (t, sw)
}

/// Runs the dispatcher (2 ms apart: processes are due every 10 ms) until `done` holds;
/// fails naming `what` after 60 s (a bound, not a speed check).
pub fn run_until(t: &mut NodeTest, what: &str, mut done: impl FnMut(&mut NodeTest) -> bool) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !done(t) {
        assert!(
            std::time::Instant::now() < until,
            "timed out waiting for {what}"
        );
        t.vm.main.run_once();
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// A buffer holding `bytes` with only `room` bytes of headroom before them (as if
/// encapsulations had used the rest), metadata set by `meta`.
pub fn packet_with_headroom(
    t: &mut NodeTest,
    bytes: &[u8],
    room: usize,
    meta: impl FnOnce(&mut sluice_buffer::BufferHeader),
) -> sluice_buffer::BufIdx {
    let b = t.packet(bytes, meta);
    // SAFETY: just allocated by the harness and not injected yet: one view.
    let mut v = unsafe { t.vm.pool.buffer(b) };
    let used = v.headroom() - room;
    v.push_front(used).expect("within the headroom");
    v.data_mut()[..bytes.len()].copy_from_slice(bytes);
    assert!(v.set_len(bytes.len()));
    assert_eq!((v.headroom(), v.data()), (room, bytes));
    b
}

/// An Ethernet/IPv4/UDP frame from the peer to us.
pub fn udp4(src: &str, dst: &str) -> Vec<u8> {
    pkt(&format!(
        "IP4: {PEER_MAC} -> {OUR_MAC}\nUDP: {src} -> {dst}\nUDP: 1234 -> 5678\nincrementing 18"
    ))
}

/// The IPv4 packet of [`udp4`] (no Ethernet header).
pub fn udp4_l3(src: &str, dst: &str) -> Vec<u8> {
    pkt(&format!(
        "UDP: {src} -> {dst}\nUDP: 1234 -> 5678\nincrementing 18"
    ))
}

/// The IPv6 packet of an Ethernet/IPv6/UDP frame (no Ethernet header).
pub fn udp6_l3(src: &str, dst: &str) -> Vec<u8> {
    pkt(&format!(
        "UDP: {src} -> {dst}\nUDP: 1234 -> 5678\nincrementing 18"
    ))
}

/// Every node of the IPv4/IPv6/L2 paths takes short and garbage packets (as a feature before
/// it could hand it) without a panic, and frees or passes on every buffer.
#[test]
fn every_node_survives_garbage() {
    let nodes = [
        "ethernet-input",
        "arp-input",
        "ip4-input",
        "ip4-lookup",
        "ip4-rewrite",
        "ip4-local",
        "ip4-icmp-error",
        "ip4-glean",
        "ip6-input",
        "ip6-lookup",
        "ip6-rewrite",
        "ip6-local",
        "ip6-icmp-error",
        "ip6-glean",
        "l2-input",
        "interface-output",
    ];
    // Lengths 0..=80 of a pseudo-random byte stream, IPv4/IPv6 version nibbles forced on
    // some so the deeper checks run.
    let mut x = 0x9e37_79b9u32;
    let mut pkts = Vec::new();
    for len in 0..=80usize {
        let mut p: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        match (len % 3, p.first_mut()) {
            (0, Some(b)) => *b = 0x45,
            (1, Some(b)) => *b = 0x60,
            _ => {}
        }
        pkts.push(p);
    }
    for node in nodes {
        let (mut t, sw) = setup(node);
        t.cli(&format!("ip neighbor loop0 10.0.0.2 {PEER_MAC} static"));
        t.run_with(&pkts, |h| {
            h.rx_if = sw;
            h.tx_if = sw;
            h.l2.bd_index = 0;
        });
        t.assert_no_leaks();
    }
}
