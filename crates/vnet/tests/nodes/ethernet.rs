//! `ethernet-input`: classification by EtherType, MAC filter, VLAN sub-interfaces, L2 mode.

use super::*;
use sluice_vnet::testing::pkt;

#[test]
fn classifies_by_ethertype_and_strips_the_header() {
    let (mut t, sw) = setup("ethernet-input");
    let v4 = udp4("10.0.0.2", "10.0.1.2");
    let v6 = pkt(&format!(
        "IP6: {PEER_MAC} -> {OUR_MAC}\nUDP: 2001:db8::2 -> 2001:db8:1::2\nUDP: 1 -> 2"
    ));
    let mut arp = v4.clone();
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    // Two IPv4 packets: the first goes through `process_one` (the interface not yet
    // cached), the second through the frame loop's fast path. A stale table index in
    // each must be replaced by loop0's (table 0).
    t.run_with(&[v4.clone(), v4.clone(), v6.clone(), arp], |h| {
        h.rx_if = sw;
        h.ip.fib_index = 99;
    });
    let ip4 = t.arc("ip4-input");
    assert_eq!(ip4.len(), 2);
    for (i, c) in ip4.iter().enumerate() {
        assert_eq!(c.data, v4[14..], "packet {i}: Ethernet header stripped");
        assert_eq!(c.hdr.current_data, 14, "packet {i}");
        assert_eq!(c.hdr.current_length as usize, v4.len() - 14, "packet {i}");
        assert_eq!(c.hdr.l2.l2_hdr_offset, 0, "packet {i}");
        assert_eq!(c.hdr.ip.fib_index, 0, "packet {i}: loop0's table");
    }
    assert_eq!(t.arc("ip6-input")[0].data, v6[14..]);
    assert_eq!(t.arc("arp-input").len(), 1);
    assert!(t.arc("error-drop").is_empty());
    t.assert_counters(&[]);
    t.assert_no_leaks();
}

#[test]
fn drops_are_counted_by_reason() {
    let (mut t, sw) = setup("ethernet-input");
    let good = udp4("10.0.0.2", "10.0.1.2");
    let mut other_mac = good.clone();
    other_mac[5] = 0x99;
    let mut unknown = good.clone();
    unknown[12..14].copy_from_slice(&[0x88, 0xb5]);
    let tagged = pkt(&format!(
        "IP4: {PEER_MAC} -> {OUR_MAC} vlan 100\nUDP: 10.0.0.2 -> 10.0.1.2\nUDP: 1 -> 2"
    ));
    let runt = good[..13].to_vec();
    let mut bcast = udp4("10.0.0.2", "255.255.255.255");
    bcast[..6].copy_from_slice(&[0xff; 6]);
    t.run_with(&[other_mac, unknown, tagged, runt, bcast], |h| h.rx_if = sw);
    assert_eq!(t.arc("ip4-input").len(), 1, "broadcast accepted");
    assert_eq!(
        t.drops()
            .iter()
            .map(|(n, c)| format!("{n}/{c}"))
            .collect::<Vec<_>>(),
        [
            "ethernet-input/l3_mac_mismatch",
            "ethernet-input/unknown_ethertype",
            "ethernet-input/tagged",
            "ethernet-input/runt",
        ]
    );
    t.assert_counters(&[
        ("l3_mac_mismatch", 1),
        ("unknown_ethertype", 1),
        ("tagged", 1),
        ("runt", 1),
    ]);
    t.assert_no_leaks();
}

#[test]
fn group_source_macs_and_unicast_ip_in_group_frames_are_dropped() {
    let (mut t, sw) = setup("ethernet-input");
    t.cli("set interface ip address loop0 10.0.0.1/24");
    let group_dst = |mut p: Vec<u8>, m: [u8; 6]| {
        p[..6].copy_from_slice(&m);
        p
    };
    let bc = [0xff; 6];
    let mc = [0x01, 0x00, 0x5e, 0, 0, 5];
    let mut group_src = udp4("10.0.0.2", "10.0.0.1");
    group_src[6] |= 1;
    let mut v6_uni = pkt(&format!(
        "IP6: {PEER_MAC} -> {OUR_MAC}\nUDP: 2001:db8::2 -> 2001:db8::1\nUDP: 1 -> 2"
    ));
    v6_uni[..6].copy_from_slice(&[0x33, 0x33, 0, 0, 0, 1]);
    let mut v6_mc = pkt(&format!(
        "IP6: {PEER_MAC} -> {OUR_MAC}\nUDP: 2001:db8::2 -> ff02::1\nUDP: 1 -> 2"
    ));
    v6_mc[..6].copy_from_slice(&[0x33, 0x33, 0, 0, 0, 1]);
    let pkts = [
        group_src,
        group_dst(udp4("10.0.0.2", "10.0.0.1"), bc),
        group_dst(udp4("10.0.0.2", "10.0.1.2"), mc),
        v6_uni,
        // passed: limited broadcast, directed broadcast, multicast, IPv6 multicast
        group_dst(udp4("10.0.0.2", "255.255.255.255"), bc),
        group_dst(udp4("10.0.0.2", "10.0.0.255"), bc),
        group_dst(udp4("10.0.0.2", "224.0.0.5"), mc),
        v6_mc,
    ];
    t.run_with(&pkts, |h| h.rx_if = sw);
    assert_eq!(t.arc("ip4-input").len(), 3);
    assert_eq!(t.arc("ip6-input").len(), 1);
    t.assert_counters(&[("multicast_source_mac", 1), ("unicast_in_l2_group", 3)]);
    t.assert_no_leaks();
}

#[test]
fn directed_broadcasts_of_every_subnet_pass_in_group_frames() {
    let (mut t, sw) = setup("ethernet-input");
    t.cli("set interface ip address loop0 10.0.2.1/24\nset interface ip address loop0 10.0.4.1/23");
    let bc = |mut p: Vec<u8>| {
        p[..6].copy_from_slice(&[0xff; 6]);
        p
    };
    let pkts = [
        // the broadcast and network addresses of each subnet: left to the FIB's drop entries
        bc(udp4("10.0.0.2", "10.0.0.255")),
        bc(udp4("10.0.0.2", "10.0.2.255")),
        bc(udp4("10.0.0.2", "10.0.5.255")),
        bc(udp4("10.0.0.2", "10.0.4.0")),
        // unicast in a broadcast frame, whichever subnet
        bc(udp4("10.0.0.2", "10.0.2.7")),
        bc(udp4("10.0.0.2", "10.0.5.254")),
        bc(udp4("10.0.0.2", "10.0.4.255")),
    ];
    t.run_with(&pkts, |h| h.rx_if = sw);
    assert_eq!(t.arc("ip4-input").len(), 4);
    t.assert_counters(&[("unicast_in_l2_group", 3)]);
    t.assert_no_leaks();
}

#[test]
fn promiscuous_interface_takes_other_macs() {
    let (mut t, sw) = setup("ethernet-input");
    t.cli("set interface promiscuous on loop0");
    let mut other_mac = udp4("10.0.0.2", "10.0.1.2");
    other_mac[5] = 0x99;
    t.run_with(&[other_mac], |h| h.rx_if = sw);
    assert_eq!(t.arc("ip4-input").len(), 1);
    t.assert_counters(&[]);
    t.assert_no_leaks();
}

#[test]
fn admin_down_interface_drops_everything() {
    let (mut t, sw) = setup("ethernet-input");
    t.cli("set interface state loop0 down");
    t.run_with(&[udp4("10.0.0.2", "10.0.1.2"), vec![0; 4]], |h| {
        h.rx_if = sw
    });
    t.assert_counters(&[("down", 2)]);
    assert_eq!(t.arc("error-drop").len(), 2);
    t.assert_no_leaks();
}

#[test]
fn vlan_sub_interface_pops_the_tag() {
    let (mut t, sw) = setup("ethernet-input");
    t.cli(
        "create sub-interfaces loop0 100
         set interface state loop0.100 up
         set interface ip address loop0.100 10.1.0.1/24",
    );
    let sub = t.sw_if("loop0.100");
    let tagged = pkt(&format!(
        "IP4: {PEER_MAC} -> {OUR_MAC} vlan 100\nUDP: 10.1.0.2 -> 10.0.1.2\nUDP: 1 -> 2"
    ));
    let mut other_vlan = tagged.clone();
    other_vlan[15] = 101;
    t.run_with(&[tagged.clone(), other_vlan], |h| h.rx_if = sw);
    let got = t.arc("ip4-input");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].hdr.rx_if, sub, "received on the sub-interface");
    assert_eq!(got[0].data, tagged[18..], "tag and Ethernet header removed");
    t.assert_counters(&[("tagged", 1)]);
    t.assert_no_leaks();
}

#[test]
fn l2_interfaces_send_every_frame_to_l2_input() {
    let (mut t, sw) = setup("ethernet-input");
    t.cli(
        "create loopback interface
         set interface state loop1 up
         set interface l2 bridge loop0 7",
    );
    let mut other_mac = udp4("10.0.0.2", "10.0.1.2");
    other_mac[5] = 0x99;
    t.run_with(&[other_mac.clone()], |h| h.rx_if = sw);
    let got = t.arc("l2-input");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].hdr.l2.bd_index, 7);
    assert_eq!(got[0].data, other_mac, "L2 frames keep their header");
    t.assert_counters(&[]);
    t.assert_no_leaks();
}

/// An IS-IS frame (802.3 length, LLC 0xFE 0xFE, to AllL2ISs) is an unknown EtherType, unless
/// a host stack is behind `punt` on the interface (linux-cp): then it is punted with its L2
/// header offset set; other LLC frames are still dropped.
#[test]
fn osi_frames_go_to_punt_only_with_a_host_stack() {
    let (mut t, sw) = setup("ethernet-input");
    let frame = |dsap: u8| {
        let mut f = vec![0x01, 0x80, 0xc2, 0x00, 0x00, 0x15, 2, 0, 0, 0, 0, 2];
        f.extend_from_slice(&30u16.to_be_bytes());
        f.extend_from_slice(&[dsap, dsap, 0x03, 0x83, 0x14, 0x01]);
        f.resize(60, 0);
        f
    };
    let isis = frame(0xfe);
    let stp = frame(0x42);
    t.run_with(&[isis.clone(), stp.clone()], |h| h.rx_if = sw);
    t.assert_counters(&[("unknown_ethertype", 2)]);
    sluice_vnet::set_punt_host(&mut t.h.vm, sluice_vnet::SwIfIndex(sw), true).unwrap();
    t.run_with(&[isis.clone(), stp], |h| h.rx_if = sw);
    let punted = t.arc("punt");
    assert_eq!(punted.len(), 1);
    assert_eq!(punted[0].data, isis[14..]);
    assert_eq!(punted[0].hdr.l2.l2_hdr_offset, 0);
    assert_eq!(punted[0].hdr.current_data, 14);
    t.assert_counters(&[("unknown_ethertype", 3), ("osi_punted", 1)]);
    t.assert_no_leaks();
}

/// On an L3 interface either of `L2_TO_BVI` and `LOCALLY_ORIGINATED` alone takes a frame
/// off the fast path, to be cleared for the L3 path (ip4-rewrite would otherwise keep the
/// TTL of a forwarded packet).
#[test]
fn bvi_and_local_flags_alone_are_cleared_for_the_l3_path() {
    use sluice_buffer::flags::{L2_TO_BVI, LOCALLY_ORIGINATED};
    let (mut t, sw) = setup("ethernet-input");
    let p = udp4("10.0.0.2", "10.0.1.2");
    let bufs: Vec<_> = [L2_TO_BVI, LOCALLY_ORIGINATED, 0]
        .iter()
        .map(|&f| {
            t.packet(&p, |h| {
                h.rx_if = sw;
                h.flags |= f;
            })
        })
        .collect();
    t.inject(&bufs);
    let got = t.arc("ip4-input");
    assert_eq!(got.len(), 3);
    for g in &got {
        assert_eq!(g.hdr.flags & (L2_TO_BVI | LOCALLY_ORIGINATED), 0, "{g:?}");
        assert_eq!(g.data, p[14..]);
    }
    t.assert_counters(&[]);
    t.assert_no_leaks();
}

/// On an L3 interface `TRACED` alone takes a frame off the fast path, to get
/// ethernet-input's trace record (pg-input traces the first of two packets).
#[test]
fn traced_frame_gets_its_record_on_an_l3_interface() {
    let mut t = NodeTest::new("ethernet-input");
    t.cli(
        "create packet-generator interface pg0
         set interface state pg0 up
         set interface ip address pg0 10.0.0.1/24
         trace add pg-input 1",
    );
    let new = format!(
        "packet-generator new {{ name s0 limit 2 node ethernet-input interface pg0 data {{
            IP4: {PEER_MAC} -> 02:fe:00:00:00:00
            UDP: 10.0.0.2 -> 10.0.1.2
            UDP: 1 -> 2
        }} }}"
    );
    t.cli
        .execute(&mut t.h.vm, &new)
        .unwrap_or_else(|e| panic!("`{new}' failed: {e}"));
    t.cli("packet-generator enable");
    run_until(&mut t, "the stream", |t| t.arc("ip4-input").len() >= 2);
    let trace = t.cli("show trace");
    let record = format!("ethernet-input\n  IP4: {PEER_MAC} -> 02:fe:00:00:00:00\n");
    assert_eq!(trace.matches("\nPacket ").count(), 1, "{trace}");
    assert_eq!(trace.matches(&record).count(), 1, "{trace}");
    // The node's own one-line record, not the packet decoded (what an entry without a
    // record shows): the next line is ip4-input's entry.
    let after = trace.find(&record).map(|at| &trace[at + record.len()..]);
    assert!(
        after.is_some_and(|a| a.lines().next().is_some_and(|l| l.ends_with(": ip4-input"))),
        "{trace}"
    );
    t.cli("packet-generator delete s0");
    t.assert_no_leaks();
}

/// `loop1`, MAC 02:00:00:00:00:0b, up, on IPv4 and IPv6 table 7: its index.
fn loop1_on_table_7(t: &mut NodeTest) -> u32 {
    t.cli(
        "ip table add 7
         ip6 table add 7
         create loopback interface mac 02:00:00:00:00:0b
         set interface state loop1 up
         set interface ip table loop1 7
         set interface ip6 table loop1 7",
    );
    t.sw_if("loop1")
}

/// One frame from three interfaces: the frame loop's fast path (the interface's MAC and
/// tables kept in locals) follows each packet's interface, and the packets after an L2
/// interface's (the rest of the frame goes per packet) are classified the same.
#[test]
fn a_frame_of_several_interfaces_takes_each_ones_mac_and_tables() {
    let (mut t, sw) = setup("ethernet-input");
    let l1 = loop1_on_table_7(&mut t);
    t.cli(
        "create loopback interface
         set interface state loop2 up
         set interface l2 bridge loop2 5",
    );
    let l2 = t.sw_if("loop2");
    let to0 = udp4("10.0.0.2", "10.0.1.2");
    let mut to1 = to0.clone();
    to1[..6].copy_from_slice(&[2, 0, 0, 0, 0, 0x0b]);
    let v6 = pkt(&format!(
        "IP6: {PEER_MAC} -> 02:00:00:00:00:0b\nUDP: 2001:db8::2 -> 2001:db8:1::2\nUDP: 1 -> 2"
    ));
    // (packet, rx interface): what each becomes is checked below, in order.
    let sent = [
        (&to0, sw),
        (&to1, l1),
        (&to0, l1), // loop0's MAC on loop1: dropped
        (&v6, l1),
        (&to0, sw),
        (&to1, sw), // loop1's MAC on loop0: dropped
        (&to0, l2), // bridged
        (&to0, sw),
        (&to1, l1),
        (&v6, l1),
    ];
    let bufs: Vec<_> = sent
        .iter()
        .map(|&(p, rx)| t.packet(p, |h| h.rx_if = rx))
        .collect();
    t.inject(&bufs);
    let ip4 = t.arc("ip4-input");
    let fibs: Vec<_> = ip4
        .iter()
        .map(|c| (c.hdr.rx_if, c.hdr.ip.fib_index))
        .collect();
    assert_eq!(fibs.len(), 5, "{fibs:?}");
    let fib1 = sluice_vnet::ip4::fib_index(&mut t.h.vm, 7).expect("table 7");
    assert_ne!(fib1, 0, "table 7 is not table 0");
    assert_eq!(fibs, [(sw, 0), (l1, fib1), (sw, 0), (sw, 0), (l1, fib1)]);
    for c in &ip4 {
        assert_eq!(c.data, to0[14..], "Ethernet header stripped");
        assert_eq!(c.hdr.current_data, 14);
    }
    let fib6 = sluice_vnet::ip6::fib_index(&mut t.h.vm, 7).expect("ip6 table 7");
    assert_ne!(fib6, 0, "ip6 table 7 is not table 0");
    let ip6 = t.arc("ip6-input");
    assert_eq!(ip6.len(), 2);
    for c in &ip6 {
        assert_eq!((c.hdr.rx_if, c.hdr.ip.fib_index), (l1, fib6));
        assert_eq!(c.data, v6[14..]);
    }
    let l2in = t.arc("l2-input");
    assert_eq!(l2in.len(), 1);
    assert_eq!(l2in[0].hdr.l2.bd_index, 5);
    assert_eq!(l2in[0].data, to0, "L2 frames keep their header");
    t.assert_counters(&[("l3_mac_mismatch", 2)]);
    t.assert_no_leaks();
}

/// The frame loop's runs (the packets after one that went to `ip4-input` or `ip6-input`,
/// tested with that packet's EtherType and no next written): every packet a run must not
/// take ends it and is classified on its own — another EtherType, another interface,
/// another MAC, a group source, a runt, a flagged packet — and the packets after it start
/// a new run; past the switch the rest goes a packet at a time. Each test of `Run::take`
/// removed makes one of these packets go to the run's arc (or keep its flag).
#[test]
fn runs_end_at_every_packet_they_must_not_take() {
    use sluice_buffer::flags::L2_TO_BVI;
    let (mut t, sw) = setup("ethernet-input");
    t.cli(
        "ip table add 7
         create loopback interface mac 02:00:00:00:00:01
         set interface state loop1 up
         set interface ip table loop1 7",
    );
    let l1 = t.sw_if("loop1");
    let fib1 = sluice_vnet::ip4::fib_index(&mut t.h.vm, 7).expect("table 7");
    // Packet k of IPv4 goes to 10.0.1.k: the order each arc receives them in is checked.
    let v4 = |k: u8| udp4("10.0.0.2", &format!("10.0.1.{k}"));
    let v6 = pkt(&format!(
        "IP6: {PEER_MAC} -> {OUR_MAC}\nUDP: 2001:db8::2 -> 2001:db8:1::2\nUDP: 1 -> 2"
    ));
    let mut other_mac = v4(100);
    other_mac[5] = 0x99;
    let mut group_src = v4(101);
    group_src[6] |= 1;
    let runt = v4(102)[..13].to_vec();
    // (packet, rx interface, flags); what `ip4-input` gets, in order: (last byte of the
    // destination, rx interface, table).
    let mut sent: Vec<(Vec<u8>, u32, u32)> = Vec::new();
    let mut want = Vec::new();
    let mut k = 1;
    // Twelve packets a run: fewer breaks than the switch to the per-packet loop asks.
    let mut good = |sent: &mut Vec<_>, want: &mut Vec<_>, n: usize| {
        for _ in 0..n {
            sent.push((v4(k), sw, 0));
            want.push((k, sw, 0));
            k += 1;
        }
    };
    good(&mut sent, &mut want, 12);
    sent.push((v6.clone(), sw, 0));
    good(&mut sent, &mut want, 12);
    // The same MAC, another interface: table 7.
    sent.push((v4(200), l1, 0));
    want.push((200, l1, fib1));
    good(&mut sent, &mut want, 12);
    for bad in [other_mac, group_src, runt] {
        sent.push((bad, sw, 0));
        good(&mut sent, &mut want, 12);
    }
    // Flagged: its flag cleared on the way.
    sent.push((v4(201), sw, L2_TO_BVI));
    want.push((201, sw, 0));
    good(&mut sent, &mut want, 12);
    // Runs of one: the switch to the per-packet loop.
    for _ in 0..6 {
        sent.push((v6.clone(), sw, 0));
        good(&mut sent, &mut want, 1);
    }
    assert!(sent.len() <= 256, "one frame");
    let bufs: Vec<_> = sent
        .iter()
        .map(|(p, rx, f)| {
            t.packet(p, |h| {
                h.rx_if = *rx;
                h.flags |= *f;
                h.ip.fib_index = 99;
            })
        })
        .collect();
    t.inject(&bufs);
    let ip4 = t.arc("ip4-input");
    let got: Vec<_> = ip4
        .iter()
        .map(|c| {
            assert_eq!(c.hdr.current_data, 14, "{c:?}");
            assert_eq!(c.hdr.flags & L2_TO_BVI, 0, "{c:?}");
            (c.data[19], c.hdr.rx_if, c.hdr.ip.fib_index)
        })
        .collect();
    assert_eq!(got, want);
    let ip6 = t.arc("ip6-input");
    assert_eq!(ip6.len(), 7);
    for c in &ip6 {
        assert_eq!((c.hdr.rx_if, c.hdr.ip.fib_index), (sw, 0));
        assert_eq!(c.data, v6[14..]);
    }
    t.assert_counters(&[
        ("l3_mac_mismatch", 1),
        ("multicast_source_mac", 1),
        ("runt", 1),
    ]);
    t.assert_no_leaks();
}

/// A frame that is one whole run (every packet after the first like it: IPv6 to our MAC on
/// one interface, on a table other than 0) is sent on whole, its nexts not written: every
/// packet reaches `ip6-input`, in order, with the table and offsets `fast_one` would set.
/// The frame before it (IPv4 and IPv6 alternating) leaves other nexts in the node's scratch,
/// so a whole frame sent with the per-packet nexts would not pass.
#[test]
fn a_frame_of_one_run_goes_on_whole_with_its_metadata() {
    let (mut t, _) = setup("ethernet-input");
    let l1 = loop1_on_table_7(&mut t);
    let fib6 = sluice_vnet::ip6::fib_index(&mut t.h.vm, 7).expect("ip6 table 7");
    assert_ne!(fib6, 0, "ip6 table 7 is not table 0");
    // Packet k goes to 2001:db8:1::k (the last byte of the destination: byte 39 of the
    // IPv6 header).
    let v6 = |k: u8| {
        pkt(&format!(
            "IP6: {PEER_MAC} -> 02:00:00:00:00:0b\nUDP: 2001:db8::2 -> 2001:db8:1::{k:x}\n\
             UDP: 1 -> 2"
        ))
    };
    let mut v4 = udp4("10.0.0.2", "10.0.1.2");
    v4[..6].copy_from_slice(&[2, 0, 0, 0, 0, 0x0b]);
    let mixed: Vec<_> = (0..64u8)
        .map(|k| {
            let p = if k % 2 == 0 { v6(k) } else { v4.clone() };
            t.packet(&p, |h| h.rx_if = l1)
        })
        .collect();
    t.inject(&mixed);
    assert_eq!(t.arc("ip4-input").len(), 32);
    assert_eq!(t.arc("ip6-input").len(), 32);
    t.clear();
    let n = 64u8;
    let bufs: Vec<_> = (0..n)
        .map(|k| {
            t.packet(&v6(k), |h| {
                h.rx_if = l1;
                h.ip.fib_index = 99;
            })
        })
        .collect();
    t.inject(&bufs);
    assert!(t.arc("ip4-input").is_empty());
    let ip6 = t.arc("ip6-input");
    assert_eq!(ip6.len(), n as usize);
    let len = v6(0).len() - 14;
    for (k, c) in ip6.iter().enumerate() {
        assert_eq!((c.hdr.rx_if, c.hdr.ip.fib_index), (l1, fib6), "packet {k}");
        assert_eq!(c.hdr.l2.l2_hdr_offset, 0, "packet {k}");
        assert_eq!(c.hdr.current_data, 14, "packet {k}");
        assert_eq!(usize::from(c.hdr.current_length), len, "packet {k}");
        assert_eq!(c.data.len(), len, "packet {k}");
        assert_eq!(c.data[39], k as u8, "packet {k} in order");
    }
    t.assert_counters(&[]);
    t.assert_no_leaks();
}
