//! The IPv4 path: `ip4-input`, `ip4-lookup`, `ip4-rewrite`, `ip4-local`.

use super::*;
use sluice_buffer::BufIdx;
use sluice_wire::checksum;
use sluice_wire::ipv4::Ipv4Packet;

/// A valid checksum after editing header bytes.
fn refill(p: &mut [u8]) {
    let mut ip = Ipv4Packet::new_checked(&mut p[..]).unwrap();
    ip.fill_checksum();
}

/// `ip4-input` with `ip4-source-check-via-rx` on loop0's `ip4-unicast` arc and a second
/// interface, loop1, without features; the feature's node captured. Returns loop0, loop1.
fn setup_feature_on_loop0() -> (NodeTest, u32, u32) {
    let (mut t, l0) = setup("ip4-input");
    t.cli(
        "create loopback interface
         set interface state loop1 up
         set interface ip address loop1 10.1.0.1/24
         set interface feature loop0 ip4-source-check-via-rx arc ip4-unicast",
    );
    let l1 = t.sw_if("loop1");
    t.capture("ip4-source-check-via-rx");
    (t, l0, l1)
}

/// One frame of packets, each with its rx interface.
fn inject_on(t: &mut NodeTest, frame: &[(Vec<u8>, u32)]) {
    let bufs: Vec<_> = frame
        .iter()
        .map(|(p, sw)| t.packet(p, |h| h.rx_if = *sw))
        .collect();
    t.inject(&bufs);
}

/// The packets captured on arc `name`, in order.
fn arc_data(t: &NodeTest, name: &str) -> Vec<Vec<u8>> {
    t.arc(name).into_iter().map(|p| p.data).collect()
}

#[test]
fn input_validates_headers_and_trims_padding() {
    let (mut t, sw) = setup("ip4-input");
    let good = udp4_l3("10.0.0.2", "10.0.1.2");
    let mut padded = good.clone();
    padded.extend_from_slice(&[0; 6]);
    let mut version = good.clone();
    version[0] = 0x65;
    let mut ihl = good.clone();
    ihl[0] = 0x44;
    let mut long = good.clone();
    long[2..4].copy_from_slice(&200u16.to_be_bytes());
    refill(&mut long);
    let mut csum = good.clone();
    csum[10] ^= 1;
    let short = good[..19].to_vec();
    t.run_with(
        &[good.clone(), padded, version, ihl, long, csum, short],
        |h| h.rx_if = sw,
    );
    let fwd = t.arc("ip4-lookup");
    assert_eq!(fwd.len(), 2);
    assert_eq!(fwd[1].data, good, "Ethernet padding trimmed");
    t.assert_counters(&[
        ("version", 1),
        ("bad_ihl", 1),
        ("bad_length", 1),
        ("bad_checksum", 1),
        ("too_short", 1),
    ]);
    t.assert_no_leaks();
}

/// `ip4-input`'s frame loop: a frame of good packets goes on whole; around a packet the
/// fast path does not take (dropped, or an options header that `process_one` forwards),
/// the packets keep their arc, in order, the padded one trimmed (by the fast path). A frame
/// of bad packets first leaves `error-drop` in every next slot of the thread's scratch, so
/// a packet whose next the loop did not write would be dropped and missed here.
#[test]
fn input_fast_path_resumes_after_a_packet_it_does_not_take() {
    let (mut t, sw) = setup("ip4-input");
    let good = |last: u8| udp4_l3("10.0.0.2", &format!("10.0.1.{last}"));
    let mut csum = good(1);
    csum[10] ^= 1;
    let mut padded = good(3);
    padded.extend_from_slice(&[0; 6]);
    let mut version = good(5);
    version[0] = 0x65;
    let mut long = good(6);
    long[2..4].copy_from_slice(&200u16.to_be_bytes());
    refill(&mut long);
    // A 24-byte header (one NOP-padded word of options): off the fast path, forwarded.
    let mut opts = good(11);
    opts[0] = 0x46;
    opts.splice(20..20, [1u8; 4]);
    let tl = opts.len() as u16;
    opts[2..4].copy_from_slice(&tl.to_be_bytes());
    refill(&mut opts);
    t.run_with(&vec![csum.clone(); 10], |h| h.rx_if = sw);
    t.run_with(
        &[
            csum,
            good(2),
            padded,
            good(4),
            version,
            opts.clone(),
            good(12),
            long,
            good(7),
            good(8),
        ],
        |h| h.rx_if = sw,
    );
    let fwd: Vec<Vec<u8>> = t.arc("ip4-lookup").into_iter().map(|p| p.data).collect();
    assert_eq!(
        fwd,
        [good(2), good(3), good(4), opts, good(12), good(7), good(8)]
    );
    t.assert_counters(&[("bad_checksum", 11), ("version", 1), ("bad_length", 1)]);
    t.assert_no_leaks();
    // A frame all on the fast path after it: no next of the last frame left over.
    t.run_with(&[good(9), good(10)], |h| h.rx_if = sw);
    let fwd: Vec<Vec<u8>> = t.arc("ip4-lookup").into_iter().map(|p| p.data).collect();
    assert_eq!(fwd[7..], [good(9), good(10)]);
    t.assert_no_leaks();
}

/// With an `ip4-unicast` feature on one interface, `ip4-input`'s fast path takes the
/// packets of the frame's first packet's interface to that interface's arc (its feature, or
/// `ip4-lookup`); packets of the other interface take theirs through `process_one`: every
/// packet reaches its own interface's next once, in order, the padded ones trimmed.
#[test]
fn input_with_features_sends_each_packet_to_its_interface_arc() {
    let (mut t, l0, l1) = setup_feature_on_loop0();
    let good = |last: u8| udp4_l3("10.0.0.2", &format!("10.0.1.{last}"));
    let mut padded = good(3);
    padded.extend_from_slice(&[0; 6]);
    // Frames starting on the featured interface, then on the other one, then all one.
    let frames: [&[(Vec<u8>, u32)]; 3] = [
        &[
            (good(1), l0),
            (good(2), l1),
            (padded.clone(), l0),
            (good(4), l1),
            (good(5), l0),
        ],
        &[(good(6), l1), (good(7), l0), (good(8), l1)],
        &[(good(9), l0), (padded, l0)],
    ];
    for f in frames {
        inject_on(&mut t, f);
    }
    assert_eq!(
        arc_data(&t, "ip4-source-check-via-rx"),
        [good(1), good(3), good(5), good(7), good(9), good(3)]
    );
    assert_eq!(
        arc_data(&t, "ip4-lookup"),
        [good(2), good(4), good(6), good(8)]
    );
    t.assert_no_leaks();
}

/// With an `ip4-unicast` feature on loop0, the packets `fast_one` does not take are dropped
/// with their counted reasons on both interfaces (the fast path's, the frame's first
/// packet's, and the other one), a well-formed options header goes to its interface's arc;
/// once the feature is disabled, the next frame all goes to `ip4-lookup` (the arc is read
/// again each frame).
#[test]
fn input_with_features_drops_bad_packets_then_follows_a_disabled_feature() {
    let (mut t, l0, l1) = setup_feature_on_loop0();
    let good = |last: u8| udp4_l3("10.0.0.2", &format!("10.0.1.{last}"));
    let csum = |last: u8| {
        let mut p = good(last);
        p[10] ^= 1;
        p
    };
    let long = |last: u8| {
        let mut p = good(last);
        p[2..4].copy_from_slice(&200u16.to_be_bytes());
        refill(&mut p);
        p
    };
    let with_opts = |last: u8, o: [u8; 4]| {
        let mut p = good(last);
        p[0] = 0x46;
        p.splice(20..20, o);
        let tl = p.len() as u16;
        p[2..4].copy_from_slice(&tl.to_be_bytes());
        refill(&mut p);
        p
    };
    let bad_opts = |last: u8| with_opts(last, [7, 0, 4, 0]);
    let opts = |last: u8| with_opts(last, [1, 1, 1, 0]);
    let mut padded = good(3);
    padded.extend_from_slice(&[0; 6]);
    // A frame starting on the featured interface (the fast path's), then one starting on
    // the other: on each, every bad kind on both interfaces, between good packets.
    let frames: [&[(Vec<u8>, u32)]; 2] = [
        &[
            (good(1), l0),
            (csum(20), l0),
            (bad_opts(21), l0),
            (long(22), l0),
            (opts(2), l0),
            (csum(23), l1),
            (bad_opts(24), l1),
            (long(25), l1),
            (good(4), l1),
            (padded.clone(), l0),
        ],
        &[
            (csum(26), l1),
            (opts(5), l1),
            (long(27), l0),
            (good(6), l0),
            (bad_opts(28), l0),
            (good(7), l1),
            (csum(29), l0),
            (bad_opts(30), l1),
            (long(31), l1),
        ],
    ];
    for f in frames {
        inject_on(&mut t, f);
    }
    assert_eq!(
        arc_data(&t, "ip4-source-check-via-rx"),
        [good(1), opts(2), good(3), good(6)]
    );
    assert_eq!(arc_data(&t, "ip4-lookup"), [good(4), opts(5), good(7)]);
    assert_eq!(
        arc_data(&t, "error-drop"),
        [
            csum(20),
            bad_opts(21),
            long(22),
            csum(23),
            bad_opts(24),
            long(25),
            csum(26),
            long(27),
            bad_opts(28),
            csum(29),
            bad_opts(30),
            long(31),
        ]
    );
    t.assert_counters(&[("bad_checksum", 4), ("bad_options", 4), ("bad_length", 4)]);
    t.assert_no_leaks();
    // The feature disabled: the next frame (its first packet on loop0) all to ip4-lookup.
    t.cli("set interface feature loop0 ip4-source-check-via-rx arc ip4-unicast disable");
    inject_on(
        &mut t,
        &[(good(8), l0), (good(9), l1), (padded, l0), (opts(10), l0)],
    );
    assert_eq!(arc_data(&t, "ip4-source-check-via-rx").len(), 4);
    assert_eq!(
        arc_data(&t, "ip4-lookup")[3..],
        [good(8), good(9), good(3), opts(10)]
    );
    t.assert_counters(&[("bad_checksum", 4), ("bad_options", 4), ("bad_length", 4)]);
    t.assert_no_leaks();
}

/// A frame where many packets leave the fast path (every other one an options header
/// here) switches to the per-packet loop part way (`SLOW_SWITCH_MIN`, `SLOW_SWITCH_SHARE`):
/// every packet still forwarded once, in order, the padded ones trimmed, with the last
/// frame's bad packets' `error-drop` left in the scratch.
#[test]
fn input_many_packets_off_the_fast_path_take_the_per_packet_loop() {
    let (mut t, sw) = setup("ip4-input");
    let good = |last: u8| udp4_l3("10.0.0.2", &format!("10.0.1.{last}"));
    let opts = |last: u8| {
        let mut p = good(last);
        p[0] = 0x46;
        p.splice(20..20, [1u8; 4]);
        let tl = p.len() as u16;
        p[2..4].copy_from_slice(&tl.to_be_bytes());
        refill(&mut p);
        p
    };
    let mut bad = good(1);
    bad[10] ^= 1;
    t.run_with(&vec![bad; 40], |h| h.rx_if = sw);
    let mut pkts = Vec::new();
    let mut want = Vec::new();
    for k in 0..16u8 {
        let o = opts(100 + k);
        let g = good(10 + k);
        let mut padded = g.clone();
        if k % 3 == 0 {
            padded.extend_from_slice(&[0; 6]);
        }
        pkts.push(o.clone());
        pkts.push(padded);
        want.push(o);
        want.push(g);
    }
    t.run_with(&pkts, |h| h.rx_if = sw);
    let fwd: Vec<Vec<u8>> = t.arc("ip4-lookup").into_iter().map(|p| p.data).collect();
    assert_eq!(fwd, want);
    t.assert_counters(&[("bad_checksum", 40)]);
    t.assert_no_leaks();
}

#[test]
fn input_drops_martian_sources() {
    let (mut t, sw) = setup("ip4-input");
    let mut opts = udp4_l3("10.0.0.2", "10.0.1.2");
    // A 24-byte header (one NOP-padded word of options) takes the slow path.
    opts[0] = 0x46;
    opts.splice(20..20, [1u8; 4]);
    let tl = opts.len() as u16;
    opts[2..4].copy_from_slice(&tl.to_be_bytes());
    opts[12..16].copy_from_slice(&[127, 0, 0, 1]);
    refill(&mut opts);
    let pkts = [
        udp4_l3("0.1.2.3", "10.0.1.2"),
        udp4_l3("127.0.0.1", "10.0.1.2"),
        udp4_l3("224.0.0.5", "10.0.1.2"),
        udp4_l3("240.0.0.1", "10.0.1.2"),
        udp4_l3("255.255.255.255", "10.0.1.2"),
        udp4_l3("0.0.0.0", "10.0.1.2"),
        opts,
        udp4_l3("0.0.0.0", "255.255.255.255"), // a DHCP discover passes
        udp4_l3("1.0.0.1", "10.0.1.2"),
        udp4_l3("223.255.255.254", "10.0.1.2"),
    ];
    t.run_with(&pkts, |h| h.rx_if = sw);
    assert_eq!(t.arc("ip4-lookup").len(), 3);
    t.assert_counters(&[("martian_source", 7)]);
    t.assert_no_leaks();
}

#[test]
fn input_drops_malformed_options() {
    let (mut t, sw) = setup("ip4-input");
    let with_opts = |o: [u8; 4]| {
        let mut p = udp4_l3("10.0.0.2", "10.0.1.2");
        p[0] = 0x46;
        p.splice(20..20, o);
        let tl = p.len() as u16;
        p[2..4].copy_from_slice(&tl.to_be_bytes());
        refill(&mut p);
        p
    };
    let pkts = [
        with_opts([7, 0, 4, 0]),   // length 0
        with_opts([1, 7, 1, 0]),   // length 1
        with_opts([7, 5, 4, 0]),   // past the header
        with_opts([1, 1, 1, 0]),   // NOPs, EOL: forwarded
        with_opts([148, 4, 0, 0]), // router alert: forwarded
    ];
    t.run_with(&pkts, |h| h.rx_if = sw);
    assert_eq!(t.arc("ip4-lookup").len(), 2);
    t.assert_counters(&[("bad_options", 3)]);
    t.assert_no_leaks();
}

#[test]
fn input_drops_our_own_addresses_as_source() {
    let (mut t, sw) = setup("ip4-input");
    t.cli("create loopback interface\nset interface ip address loop1 10.9.0.1/16");
    let mut opts = udp4_l3("10.9.0.1", "10.0.1.2");
    // A 24-byte header takes the slow path: checked there too.
    opts[0] = 0x46;
    opts.splice(20..20, [1u8; 4]);
    let tl = opts.len() as u16;
    opts[2..4].copy_from_slice(&tl.to_be_bytes());
    refill(&mut opts);
    let pkts = [
        udp4_l3("10.0.0.1", "10.0.1.2"), // in transit
        udp4_l3("10.0.0.1", "10.0.0.1"), // for the router
        udp4_l3("10.9.0.1", "10.0.1.2"), // another interface's address
        opts,
        // passed: a neighbour, and a source sharing our addresses' low 16 bits
        udp4_l3("10.0.0.2", "10.0.1.2"),
        udp4_l3("10.1.0.1", "10.0.1.2"),
    ];
    t.run_with(&pkts, |h| h.rx_if = sw);
    assert_eq!(t.arc("ip4-lookup").len(), 2);
    t.assert_counters(&[("own_source", 4)]);
    // Gone with the address (10.9.0.1 still shares its low 16 bits: the exact test decides).
    t.cli("set interface ip address del loop0 10.0.0.1/24");
    t.run_with(&[udp4_l3("10.0.0.1", "10.0.1.2")], |h| h.rx_if = sw);
    assert_eq!(t.arc("ip4-lookup").len(), 3, "forwarded once not ours");
    t.assert_counters(&[("own_source", 4)]);
    t.assert_no_leaks();
}

#[test]
fn lookup_sends_each_packet_to_its_adjacency_kind() {
    let (mut t, sw) = setup("ip4-lookup");
    t.cli(&format!(
        "ip neighbor loop0 10.0.0.2 {PEER_MAC} static
         ip route add 10.0.1.0/24 via 10.0.0.2 loop0
         ip route add 10.0.2.0/24 via 10.0.0.3 loop0
         ip route add 10.0.3.0/24 via drop"
    ));
    let pkts = [
        udp4_l3("10.0.0.2", "10.0.1.2"),  // rewrite
        udp4_l3("10.0.0.2", "10.0.0.1"),  // local
        udp4_l3("10.0.0.2", "10.0.0.9"),  // glean (connected, unresolved)
        udp4_l3("10.0.0.2", "10.0.2.2"),  // via an unresolved next hop
        udp4_l3("10.0.0.2", "10.0.3.2"),  // drop route
        udp4_l3("10.0.0.2", "192.0.2.1"), // no route
    ];
    t.run_with(&pkts, |h| h.rx_if = sw);
    let rw = t.arc("ip4-rewrite");
    assert_eq!(rw.len(), 1);
    let shared = sluice_vnet::ip4::shared(&mut t.h.vm).unwrap();
    assert_eq!(
        Some(rw[0].hdr.ip.adj_index),
        shared.lookup(0, u32::from_be_bytes([10, 0, 1, 2]))
    );
    assert_eq!(t.arc("ip4-local").len(), 1);
    assert_eq!(t.arc("ip4-glean").len(), 2);
    assert_eq!(
        t.drops().iter().map(|d| d.1).collect::<Vec<_>>(),
        ["drop_route", "no_route"]
    );
    t.assert_counters(&[("drop_route", 1), ("no_route", 1)]);
    t.assert_no_leaks();
}

/// `ip4-lookup`'s groups: a group of four whose results are all the adjacency of the
/// packet before takes the shortcut (adjacency and arcs stored at once), a group with
/// another result goes packet by packet, and the frame's last packets (fewer than four)
/// one lookup each. A frame of unrouted packets runs first, so every next slot of the
/// thread's scratch holds `error-drop`: a packet whose arc the shortcut did not write is
/// dropped and missed here.
#[test]
fn lookup_groups_share_the_remembered_adjacency() {
    let (mut t, sw) = setup("ip4-lookup");
    t.cli(&format!(
        "ip neighbor loop0 10.0.0.2 {PEER_MAC} static
         ip route add 10.0.1.0/24 via 10.0.0.2 loop0"
    ));
    let lost: Vec<_> = (0..16)
        .map(|i| udp4_l3("10.0.0.2", &format!("192.0.2.{i}")))
        .collect();
    t.run_with(&lost, |h| h.rx_if = sw);
    assert_eq!(t.drops().len(), 16);
    let fwd = |i: u8| udp4_l3("10.0.0.2", &format!("10.0.1.{i}"));
    // Groups: [fwd x4] [fwd x4] [fwd, local, fwd, fwd] [fwd x4], then fwd, no route, fwd.
    let mut pkts: Vec<_> = (1..=8).map(fwd).collect();
    pkts.extend([fwd(9), udp4_l3("10.0.0.2", "10.0.0.1"), fwd(10), fwd(11)]);
    pkts.extend((12..=15).map(fwd));
    pkts.extend([fwd(16), udp4_l3("10.0.0.2", "192.0.2.1"), fwd(17)]);
    t.run_with(&pkts, |h| h.rx_if = sw);
    let adj = sluice_vnet::ip4::shared(&mut t.h.vm)
        .unwrap()
        .lookup(0, u32::from_be_bytes([10, 0, 1, 2]));
    let rw = t.arc("ip4-rewrite");
    assert_eq!(rw.len(), 17);
    for (i, p) in rw.iter().enumerate() {
        assert_eq!(p.data[19] as usize, i + 1, "in order");
        assert_eq!(Some(p.hdr.ip.adj_index), adj);
    }
    assert_eq!(t.arc("ip4-local").len(), 1);
    assert_eq!(t.drops().len(), 17, "16 before, 1 no route");
    t.assert_no_leaks();
}

/// `ip4-rewrite` under test, packets entering at `ip4-lookup` (which sets `adj_index`).
fn rewrite_setup() -> (NodeTest, u32) {
    let (mut t, sw) = setup("ip4-rewrite");
    t.cli(&format!(
        "ip neighbor loop0 10.0.0.2 {PEER_MAC} static
         ip route add 10.0.1.0/24 via 10.0.0.2 loop0
         set interface mtu 1000 loop0"
    ));
    (t, sw)
}

fn through_lookup(t: &mut NodeTest, sw: u32, pkts: &[Vec<u8>]) {
    let bufs: Vec<BufIdx> = pkts.iter().map(|p| t.packet(p, |h| h.rx_if = sw)).collect();
    t.inject_at("ip4-lookup", &bufs);
}

#[test]
fn rewrite_decrements_ttl_and_writes_the_l2_header() {
    let (mut t, sw) = rewrite_setup();
    let p = udp4_l3("10.0.0.5", "10.0.1.2");
    through_lookup(&mut t, sw, std::slice::from_ref(&p));
    let out = t.arc("interface-output");
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].hdr.tx_if, sw);
    let d = &out[0].data;
    assert_eq!(&d[0..6], &[2, 0, 0, 0, 0, 2]);
    assert_eq!(&d[6..12], &[2, 0, 0, 0, 0, 1]);
    assert_eq!(&d[12..14], &[0x08, 0x00]);
    assert_eq!(d[14 + 8], p[8] - 1, "TTL decremented");
    assert_eq!(checksum::sum(&d[14..34]), 0xffff, "checksum updated");
    assert_eq!(d[14 + 12..], p[12..], "the rest unchanged");
    t.assert_counters(&[]);
    t.assert_no_leaks();
}

/// A packet the router built itself (`LOCALLY_ORIGINATED`) leaves with the TTL it was
/// given, even 1; a transit packet beside it is decremented.
#[test]
fn rewrite_keeps_the_ttl_of_a_locally_originated_packet() {
    let (mut t, sw) = rewrite_setup();
    let p = udp4_l3("10.0.0.1", "10.0.1.2");
    let mut ttl1 = p.clone();
    ttl1[8] = 1;
    ttl1[10..12].fill(0);
    let c = checksum::sum(&ttl1[..20]);
    ttl1[10..12].copy_from_slice(&(!c).to_be_bytes());
    let local = |h: &mut sluice_buffer::BufferHeader| {
        h.rx_if = sw;
        h.flags |= sluice_buffer::flags::LOCALLY_ORIGINATED;
    };
    let bufs = [
        t.packet(&p, local),
        t.packet(&ttl1, local),
        t.packet(&p, |h| h.rx_if = sw),
    ];
    t.inject_at("ip4-lookup", &bufs);
    let out = t.arc("interface-output");
    assert_eq!(out.len(), 3, "none expired");
    for (o, ttl) in out.iter().zip([p[8], 1, p[8] - 1]) {
        assert_eq!(o.hdr.tx_if, sw);
        assert_eq!(&o.data[0..6], &[2, 0, 0, 0, 0, 2]);
        assert_eq!(o.data[14 + 8], ttl);
        assert_eq!(checksum::sum(&o.data[14..34]), 0xffff);
    }
    t.assert_counters(&[]);
    t.assert_no_leaks();
}

/// What [`marked_packet`] puts in a packet's headroom.
pub const MARK: u8 = 0xaa;

/// [`packet_with_headroom`] with its `room` headroom bytes all [`MARK`].
pub fn marked_packet(
    t: &mut NodeTest,
    bytes: &[u8],
    room: usize,
    meta: impl FnOnce(&mut sluice_buffer::BufferHeader),
) -> BufIdx {
    let b = packet_with_headroom(t, bytes, room, meta);
    // SAFETY: just allocated by the harness and not injected yet: one view.
    let mut v = unsafe { t.vm.pool.buffer(b) };
    v.push_front(room).expect("the headroom").fill(MARK);
    assert!(v.advance(room));
    b
}

/// The `room` headroom bytes of [`marked_packet`] `b` once the graph has run (and freed it).
pub fn headroom_after(t: &NodeTest, b: BufIdx, room: usize) -> Vec<u8> {
    let (base, len) = t.vm.pool.region();
    let off = t.vm.pool.data_offset(b).expect("in the pool");
    assert!(off + room <= len);
    // SAFETY: `b`'s headroom, inside the pool's data region (mapped while the pool lives).
    // The graph has drained: nothing runs and no view of `b` exists while it is read (read
    // raw: `b` is free by now, so a view would be refused).
    unsafe { std::slice::from_raw_parts(base.add(off), room) }.to_vec()
}

/// The bytes 17, 16, 15 and 14 in front of where [`marked_packet`] `b` (headroom `room`)
/// started, once the graph has run (`None`: before the buffer). A rewrite's fast path (one
/// 16-byte store) leaves `[MARK, 0, 0, 2]`: two zeros, then the Ethernet header from its
/// destination MAC (02:...); its checked path (14 bytes) `[MARK, MARK, MARK, 2]`. 17 in
/// front is a canary: nothing writes it.
pub fn in_front(t: &NodeTest, b: BufIdx, room: usize) -> [Option<u8>; 4] {
    let h = headroom_after(t, b, room);
    std::array::from_fn(|i| room.checked_sub(17 - i).map(|j| h[j]))
}

/// After the fast path, [`in_front`] a packet with `room` bytes of headroom.
pub fn fast(room: usize) -> [Option<u8>; 4] {
    let mut f = [Some(MARK), Some(0), Some(0), Some(2)];
    f[..17usize.saturating_sub(room)].fill(None);
    f
}

/// After the checked path, [`in_front`] a packet with `room` bytes of headroom.
pub fn checked(room: usize) -> [Option<u8>; 4] {
    let mut f = [Some(MARK), Some(MARK), Some(MARK), Some(2)];
    f[..17usize.saturating_sub(room)].fill(None);
    f
}

/// [`super::ip_shared::rewrite_needs_room_for_the_l2_header`]: the TTL decremented, the
/// header checksum right, the rest as it was.
#[test]
fn rewrite_drops_a_packet_without_room_for_the_l2_header() {
    let p = udp4_l3("10.0.0.5", "10.0.1.2");
    let l3 = |o: &[u8]| {
        assert_eq!(o[8], p[8] - 1, "TTL decremented");
        assert_eq!(checksum::sum(&o[..20]), 0xffff);
        assert_eq!(o[12..], p[12..]);
    };
    let nodes = ("ip4-lookup", "ip4-rewrite");
    super::ip_shared::rewrite_needs_room_for_the_l2_header(rewrite_setup(), &p, nodes, [8, 0], l3);
}

/// The fast path's length bound is the MTU: a packet of exactly the MTU goes out by the
/// fast path, one byte more is over it (no DF: dropped, nothing written in front).
#[test]
fn rewrite_takes_a_packet_of_exactly_the_mtu() {
    let (mut t, sw) = rewrite_setup();
    let at = pkt("UDP: 10.0.0.5 -> 10.0.1.2\nUDP: 1 -> 2\nincrementing 972");
    let over = pkt("UDP: 10.0.0.5 -> 10.0.1.2\nUDP: 1 -> 2\nincrementing 973");
    assert_eq!((at.len(), over.len()), (1000, 1001));
    let bufs = [
        marked_packet(&mut t, &at, 17, |h| h.rx_if = sw),
        marked_packet(&mut t, &over, 17, |h| h.rx_if = sw),
    ];
    t.inject_at("ip4-lookup", &bufs);
    let out = t.arc("interface-output");
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].data.len(), 1014);
    assert_eq!(in_front(&t, bufs[0], 17), fast(17), "the fast path");
    assert_eq!(headroom_after(&t, bufs[1], 17), [MARK; 17]);
    assert_eq!(t.drops(), [("ip4-rewrite".to_string(), "mtu_exceeded")]);
    t.assert_counters(&[("mtu_exceeded", 1)]);
    t.assert_no_leaks();
}

/// [`super::ip_shared::rewrite_frame_mixes_adjacencies_and_expiring_packets`]: the TTL
/// decremented and the header checksum updated.
#[test]
fn rewrite_frame_mixes_adjacencies_and_expiring_packets() {
    let (mut t, sw) = rewrite_setup();
    t.cli(
        "ip neighbor loop0 10.0.0.3 02:00:00:00:00:03 static
         ip route add 10.0.2.0/24 via 10.0.0.3 loop0",
    );
    let a = udp4_l3("10.0.0.5", "10.0.1.2");
    let b = udp4_l3("10.0.0.5", "10.0.2.2");
    let mut x = a.clone();
    x[8] = 1;
    refill(&mut x);
    let fwd = |p: &[u8]| {
        let mut f = p.to_vec();
        f[8] -= 1;
        refill(&mut f);
        f
    };
    super::ip_shared::rewrite_frame_mixes_adjacencies_and_expiring_packets(
        (t, sw),
        (&a, &b, &x),
        ("ip4-lookup", "ip4-icmp-error"),
        [8, 0],
        fwd,
    );
}

/// [`super::ip_shared::rewrite_follows_a_neighbor_mac_change_between_frames`].
#[test]
fn rewrite_follows_a_neighbor_mac_change_between_frames() {
    super::ip_shared::rewrite_follows_a_neighbor_mac_change_between_frames(
        rewrite_setup(),
        &udp4_l3("10.0.0.5", "10.0.1.2"),
        "ip4-lookup",
        "ip neighbor loop0 10.0.0.2 02:00:00:00:00:09 static",
    );
}

#[test]
fn rewrite_sends_ttl_expiry_and_df_over_mtu_to_icmp_error() {
    let (mut t, sw) = rewrite_setup();
    let mut ttl1 = udp4_l3("10.0.0.5", "10.0.1.2");
    ttl1[8] = 1;
    refill(&mut ttl1);
    let big = pkt("UDP: 10.0.0.5 -> 10.0.1.2\nUDP: 1 -> 2\nincrementing 1200");
    let mut df = big.clone();
    df[6] = 0x40;
    refill(&mut df);
    through_lookup(&mut t, sw, &[ttl1.clone(), df, big]);
    let icmp = t.arc("ip4-icmp-error");
    assert_eq!(icmp.len(), 2);
    // The fast path's Ethernet header push is undone: the packet as it came, at its IP header.
    assert_eq!(icmp[0].data, ttl1, "unchanged, at its IPv4 header");
    assert_eq!(icmp[0].hdr.feature_meta[0], 11 << 8, "time exceeded");
    assert_eq!(
        icmp[1].hdr.feature_meta[0],
        (3 << 8) | 4,
        "fragmentation needed"
    );
    assert_eq!(icmp[1].hdr.feature_meta[1], 1000, "with the MTU");
    assert_eq!(t.drops(), [("ip4-rewrite".to_string(), "mtu_exceeded")]);
    t.assert_counters(&[("ttl_expired", 1), ("mtu_exceeded", 1)]);
    t.assert_no_leaks();
}

#[test]
fn local_answers_echo_and_punts_or_refuses_the_rest() {
    let (mut t, sw) = setup("ip4-local");
    let echo = pkt("ICMP: 10.0.0.2 -> 10.0.0.1\nICMP echo_request id 7 seq 1\nincrementing 8");
    let mut bad_icmp = echo.clone();
    bad_icmp[30] ^= 0xff;
    let tcp = pkt("TCP: 10.0.0.2 -> 10.0.0.1\nTCP: 1000 -> 22 SYN");
    let udp = udp4_l3("10.0.0.2", "10.0.0.1");
    t.run_with(&[echo.clone(), bad_icmp, tcp, udp], |h| h.rx_if = sw);
    let replies = t.arc("ip4-lookup");
    assert_eq!(replies.len(), 1);
    let r = &replies[0].data;
    assert_eq!(&r[12..16], &[10, 0, 0, 1], "from the address pinged");
    assert_eq!(&r[16..20], &[10, 0, 0, 2]);
    assert_eq!(r[20], 0, "echo reply");
    assert_eq!(checksum::sum(&r[..20]), 0xffff);
    assert_eq!(checksum::sum(&r[20..]), 0xffff);
    assert_eq!(r[24..], echo[24..], "id, seq and data echoed");
    assert_eq!(t.arc("punt").len(), 1, "TCP to the host");
    let unreach = t.arc("ip4-icmp-error");
    assert_eq!(unreach.len(), 1);
    assert_eq!(
        unreach[0].hdr.feature_meta[0],
        (3 << 8) | 3,
        "port unreachable"
    );
    t.assert_counters(&[("echo_replies", 1), ("bad_icmp", 1), ("punted", 1)]);
    t.assert_no_leaks();
}

/// UDP to a group reaches only a port serving groups (`ip_shared`).
#[test]
fn local_sends_udp_to_a_group_only_to_a_port_serving_groups() {
    super::ip_shared::local_sends_udp_to_a_group_only_to_a_port_serving_groups(false);
}

/// Registering a port again for the same node is a no-op only with the same group
/// service: asking for groups on a port served without them (or the reverse) is an error,
/// not a silent success that leaves group packets punted.
#[test]
fn registering_a_port_again_with_other_group_service_is_refused() {
    use sluice_vnet::ip_local::{register, register_groups, LocalKey};
    let (mut t, _) = setup("ip4-local");
    register(&mut t.h.vm, false, LocalKey::UdpPort(2152), "ip4-input").unwrap();
    register(&mut t.h.vm, false, LocalKey::UdpPort(2152), "ip4-input").unwrap();
    let e = register_groups(&mut t.h.vm, false, LocalKey::UdpPort(2152), "ip4-input");
    assert!(e
        .unwrap_err()
        .to_string()
        .contains("without multicast groups"));
    register_groups(&mut t.h.vm, false, LocalKey::UdpPort(4789), "ip4-input").unwrap();
    let e = register(&mut t.h.vm, false, LocalKey::UdpPort(4789), "ip4-input");
    assert!(e.unwrap_err().to_string().contains("with multicast groups"));
}

/// Packets shorter than their IPv4 header (never from `ip4-input`; a feature before these
/// nodes could shorten one) are dropped with a counted reason, not a panic.
#[test]
fn short_packets_are_counted_as_truncated() {
    for node in ["ip4-local", "ip4-icmp-error", "ip4-rewrite"] {
        let (mut t, sw) = setup(node);
        let p = udp4_l3("10.0.0.2", "10.0.0.1");
        t.run_with(&[p[..19].to_vec(), vec![0x45]], |h| h.rx_if = sw);
        assert_eq!(t.arc("error-drop").len(), 2, "{node}");
        t.assert_counters(&[("truncated", 2)]);
        t.assert_no_leaks();
    }
}

#[test]
fn glean_never_resolves_the_directed_broadcast() {
    let (mut t, sw) = setup("ip4-glean");
    let bufs: Vec<BufIdx> = [
        udp4_l3("10.0.0.2", "10.0.0.255"),
        udp4_l3("10.0.0.2", "10.0.0.9"),
    ]
    .iter()
    .map(|p| t.packet(p, |h| h.rx_if = sw))
    .collect();
    t.inject_at("ip4-lookup", &bufs);
    assert_eq!(
        t.arc("interface-output").len(),
        1,
        "one ARP request, for 10.0.0.9"
    );
    // The subnet's broadcast /32 is a drop entry in the FIB (as VPP's): ip4-lookup drops it
    // before ip4-glean, whose `directed_broadcast` check stays as a backstop.
    t.assert_counters(&[("requests_sent", 1)]);
    t.assert_no_leaks();
}

#[test]
fn cli_refuses_martian_addresses_and_group_neighbours() {
    let (mut t, _) = setup("ip4-input");
    t.cli("create packet-generator interface pg0");
    let mut err = |c: &str| t.cli.execute(&mut t.h.vm, c).expect_err(c).to_string();
    for (c, token) in [
        ("set interface ip address pg0 224.0.0.1/24", "224.0.0.1/24"),
        ("set interface ip address pg0 0.1.2.3/8", "0.1.2.3/8"),
        ("set interface ip address pg0 127.0.0.2/8", "127.0.0.2/8"),
        ("set interface ip address pg0 240.0.0.1/8", "240.0.0.1/8"),
        (
            "set interface ip address pg0 255.255.255.255/32",
            "255.255.255.255/32",
        ),
        (
            "set ip neighbor loop0 10.0.0.7 ff:ff:ff:ff:ff:ff",
            "ff:ff:ff:ff:ff:ff",
        ),
        (
            "ip neighbor loop0 10.0.0.7 01:00:5e:00:00:01",
            "01:00:5e:00:00:01",
        ),
        ("ip neighbor loop0 224.0.0.5 02:00:00:00:00:07", "224.0.0.5"),
        (
            "ip neighbor loop0 255.255.255.255 02:00:00:00:00:07",
            "255.255.255.255",
        ),
        ("ip neighbor loop0 0.0.0.0 02:00:00:00:00:07", "0.0.0.0"),
        ("ip neighbor loop0 ff02::1 02:00:00:00:00:07", "ff02::1"),
        ("ip neighbor loop0 :: 02:00:00:00:00:07", "::"),
        (
            "ip neighbor loop0 2001:db8::7 33:33:00:00:00:01",
            "33:33:00:00:00:01",
        ),
    ] {
        let e = err(c);
        assert!(e.contains(&format!("`{token}'")), "{c}: {e}");
        assert!(!e.contains('\n'), "{c}: one line: {e}");
    }
    // 127/8 is fine on a loopback.
    t.cli("set interface ip address loop0 127.0.0.1/8");
}

#[test]
fn local_drops_packets_from_our_own_address() {
    let (mut t, sw) = setup("ip4-local");
    let spoofed = udp4_l3("10.0.0.1", "10.0.0.1");
    let mine = pkt("ICMP: 10.0.0.1 -> 10.0.0.1\nICMP echo_request id 7 seq 1\nincrementing 8");
    let b = [
        t.packet(&spoofed, |h| h.rx_if = sw),
        t.packet(&mine, |h| {
            h.rx_if = sw;
            h.flags |= sluice_buffer::flags::LOCALLY_ORIGINATED;
        }),
    ];
    t.inject_at("ip4-local", &b);
    assert_eq!(t.arc("ip4-lookup").len(), 1, "our own ping answered");
    t.assert_counters(&[("own_source", 1), ("echo_replies", 1)]);
    t.assert_no_leaks();
}

/// A different adjacency every packet, across control-plane changes between frames (the
/// rewrite reads the adjacency table whenever a packet's adjacency differs from the one
/// before, and keeps nothing across frames): two routes via two neighbours alternate, each
/// packet to its own neighbour's MAC; then one route moves to the other neighbour and that
/// neighbour's MAC changes, and the next frame's packets all go to the new MAC; then that
/// neighbour is deleted while the other route still points at it, and no packet leaves
/// with its old MAC: ip4-lookup sends all 8 to `ip4-glean`, which sends one ARP request
/// and drops them.
#[test]
fn alternating_adjacencies_follow_route_and_neighbor_changes_between_frames() {
    let (mut t, sw) = setup("ip4-rewrite");
    t.cli(&format!(
        "ip neighbor loop0 10.0.0.2 {PEER_MAC} static
         ip neighbor loop0 10.0.0.3 02:00:00:00:00:03 static
         ip route add 10.0.1.0/24 via 10.0.0.2 loop0
         ip route add 10.0.2.0/24 via 10.0.0.3 loop0"
    ));
    let frame = |t: &mut NodeTest| {
        let pkts: Vec<Vec<u8>> = (0..8)
            .map(|k| udp4_l3("10.0.0.5", ["10.0.1.7", "10.0.2.7"][k % 2]))
            .collect();
        through_lookup(t, sw, &pkts);
        let out = t.arc("interface-output");
        t.clear();
        out
    };
    let out = frame(&mut t);
    let macs: Vec<u8> = out.iter().map(|o| o.data[5]).collect();
    assert_eq!(
        macs,
        [2, 3, 2, 3, 2, 3, 2, 3],
        "each packet to its own neighbour"
    );
    assert!(out
        .iter()
        .all(|o| o.hdr.tx_if == sw && o.data[6..12] == [2, 0, 0, 0, 0, 1]));

    t.cli(
        "ip route del 10.0.1.0/24 via 10.0.0.2 loop0
         ip route add 10.0.1.0/24 via 10.0.0.3 loop0
         ip neighbor loop0 10.0.0.3 02:00:00:00:00:09 static",
    );
    let out = frame(&mut t);
    assert_eq!(out.len(), 8);
    assert!(
        out.iter().all(|o| o.data[0..6] == [2, 0, 0, 0, 0, 9]),
        "the moved route and the changed MAC from the next frame on"
    );

    t.cli("ip neighbor del loop0 10.0.0.3 02:00:00:00:00:09");
    let pkts: Vec<Vec<u8>> = (0..8)
        .map(|k| udp4_l3("10.0.0.5", ["10.0.1.7", "10.0.2.7"][k % 2]))
        .collect();
    through_lookup(&mut t, sw, &pkts);
    let out = t.arc("interface-output");
    // All 8 went to ip4-glean (the route's neighbour is gone): one ARP request for it
    // leaves, the packets themselves are dropped there (the first counted as the one that
    // sent the request, the rest throttled).
    assert_eq!(
        t.drops(),
        [("ip4-glean".to_string(), "requests_sent")]
            .into_iter()
            .chain(std::iter::repeat_n(
                ("ip4-glean".to_string(), "throttled"),
                7
            ))
            .collect::<Vec<_>>(),
        "every packet of the frame accounted for at ip4-glean"
    );
    assert_eq!(out.len(), 1, "only the ARP request leaves");
    assert_eq!(out[0].data[..6], [0xff; 6]);
    assert_eq!(out[0].data[12..14], [0x08, 0x06]);
    assert!(
        !out.iter()
            .any(|o| o.data[0..6] == [2, 0, 0, 0, 0, 9] || o.data[0..6] == [2, 0, 0, 0, 0, 3]),
        "nothing sent to a deleted neighbour: {:?}",
        out.iter()
            .map(|o| o.data[..14].to_vec())
            .collect::<Vec<_>>()
    );
    t.assert_no_leaks();
}

/// Point-to-point interfaces whose adjacency is a Node one (`set_lookup_node`, as an SRv6
/// local SID's interface is): `ip4-lookup` hands the packets of a plain route and of an
/// ECMP route through them straight to the node, untouched (no L2 header, TTL kept), with
/// `adj_index` naming an adjacency whose `tx_if` is the interface; other routes still go to
/// `ip4-rewrite`.
#[test]
fn lookup_hands_a_node_adjacencys_packets_straight_to_its_node() {
    let (mut t, sw) = setup("ip4-lookup");
    t.cli(&format!(
        "ip neighbor loop0 10.0.0.2 {PEER_MAC} static
         ip route add 10.0.1.0/24 via 10.0.0.2 loop0
         create loopback interface
         create loopback interface
         set interface state loop1 up
         set interface state loop2 up"
    ));
    let (l1, l2) = (t.sw_if("loop1"), t.sw_if("loop2"));
    let sink = "ip4-source-check-via-rx";
    let node = t.h.vm.registry.find(sink).unwrap();
    for l in [l1, l2] {
        let l = sluice_vnet::SwIfIndex(l);
        sluice_vnet::set_p2p(&mut t.h.vm, l, true).unwrap();
        sluice_vnet::set_lookup_node(&mut t.h.vm, l, false, node).unwrap();
    }
    t.capture(sink);
    t.cli(
        "ip route add 10.9.0.0/16 via loop1
         ip route add 10.8.0.0/16 via loop1 via loop2",
    );
    let mut pkts = vec![
        udp4_l3("10.0.0.2", "10.9.0.1"),
        udp4_l3("10.0.0.2", "10.0.1.2"),
    ];
    pkts.extend((0..32).map(|i| udp4_l3(&format!("10.0.3.{i}"), "10.8.0.1")));
    t.run_with(&pkts, |h| h.rx_if = sw);
    let at = t.arc(sink);
    assert_eq!(
        at.len(),
        33,
        "the plain route's packet and every ECMP packet"
    );
    let adj = sluice_vnet::ip4::shared(&mut t.h.vm).unwrap().adj.clone();
    let mut seen = std::collections::BTreeSet::new();
    for (p, sent) in at.iter().zip(pkts.iter().filter(|p| p[16..18] != [10, 0])) {
        assert_eq!(
            &p.data, sent,
            "untouched: no L2 header, TTL and checksum kept"
        );
        let a = adj.get(p.hdr.ip.adj_index);
        assert_eq!(a.kind, sluice_fib::adj::AdjKind::Node);
        seen.insert(a.tx_if);
    }
    assert_eq!(seen, [l1, l2].into(), "both ECMP interfaces used");
    assert_eq!(
        t.arc("ip4-rewrite").len(),
        1,
        "the neighbour route's packet"
    );
    t.assert_no_leaks();
}
