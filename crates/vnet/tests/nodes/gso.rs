//! GSO aggregates (`sluice_vnet::offload`, flag `GSO`): `gso-segment` cuts chained IPv4
//! and IPv6 TCP aggregates into valid segments, `interface-output` sends aggregates there
//! for an interface that does not take them, `ip4-rewrite`/`ip6-rewrite` check the MTU by
//! segment size.

use super::*;
use sluice_buffer::{flags, BufIdx};
use sluice_vnet::offload::{gso_type, Gso};
use sluice_wire::checksum;
use std::net::{Ipv4Addr, Ipv6Addr};

/// `setup` with loop0 declared a source of aggregates (as af_packet, tap and memif declare
/// theirs), so that the feature chains have their cutting nodes.
fn setup(node: &str) -> (NodeTest, u32) {
    let (mut t, sw) = super::setup(node);
    sluice_vnet::feature::set_aggregate_source(&mut t.vm, sw, true);
    (t, sw)
}

/// Frames the node has run.
fn vectors(t: &NodeTest, node: &str) -> u64 {
    let n = t.vm.registry.find(node).expect("node");
    t.vm.registry.node(n).stats.per_thread[0].vectors.get()
}

/// While no interface can receive aggregates, no chain has a cutting node: a feature
/// that does not take them follows `ip4-input` directly. The first source puts
/// `ip4-gso-segment` in the chains already written, the last one gone takes it out.
#[test]
fn the_cutting_node_is_in_the_chains_only_while_aggregates_can_arrive() {
    let (mut t, sw) = super::setup("ip4-input");
    let check = "ip4-source-check-via-rx";
    t.cli(&format!(
        "set interface feature loop0 {check} arc ip4-unicast"
    ));
    t.capture(check);
    let plain = udp4_l3("10.0.0.2", "10.0.1.2");
    let send = |t: &mut NodeTest| {
        let p = t.packet(&plain, |h| h.rx_if = sw);
        t.inject(&[p]);
        t.clear();
    };
    send(&mut t);
    assert_eq!(
        vectors(&t, "ip4-gso-segment"),
        0,
        "no source: not in the chain"
    );
    sluice_vnet::feature::set_aggregate_source(&mut t.vm, 77, true);
    send(&mut t);
    assert_eq!(
        vectors(&t, "ip4-gso-segment"),
        1,
        "a source: cut before the feature"
    );
    sluice_vnet::feature::set_aggregate_source(&mut t.vm, 77, false);
    send(&mut t);
    assert_eq!(
        vectors(&t, "ip4-gso-segment"),
        1,
        "the last source gone: out again"
    );
}

const MSS: u16 = 1000;

/// An Ethernet/IPv4 (DF)/TCP aggregate with 12 bytes of TCP options, `payload` bytes of
/// payload, its TCP checksum holding only the pseudo-header seed (as the kernel hands it).
pub(crate) fn tcp4_aggregate(payload: usize) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00];
    let total = 20 + 32 + payload;
    f.extend_from_slice(&ip4_header(total, 6));
    f.extend_from_slice(&tcp_header());
    f.extend((0..payload).map(|i| (i * 7 + i / 253) as u8));
    f
}

/// An IPv4 header (DF, TTL 64, 10.0.0.5 -> 10.0.1.2) of `total` bytes carrying `proto`,
/// its checksum correct.
fn ip4_header(total: usize, proto: u8) -> [u8; 20] {
    let t = (total as u16).to_be_bytes();
    let mut ip = [
        0x45, 0, t[0], t[1], 0x12, 0x34, 0x40, 0, 64, proto, 0, 0, 10, 0, 0, 5, 10, 0, 1, 2,
    ];
    let c = checksum::internet_checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    ip
}

/// An IPv6 header (hop limit 64, 2001:db8::5 -> 2001:db8:1::2) with `payload` bytes of
/// `next` behind it.
fn ip6_header(payload: usize, next: u8) -> Vec<u8> {
    let p = (payload as u16).to_be_bytes();
    let mut h = vec![0x60, 0, 0, 0, p[0], p[1], next, 64];
    h.extend_from_slice(&"2001:db8::5".parse::<Ipv6Addr>().unwrap().octets());
    h.extend_from_slice(&"2001:db8:1::2".parse::<Ipv6Addr>().unwrap().octets());
    h
}

/// The same over IPv6 (2001:db8::5 -> 2001:db8:1::2).
fn tcp6_aggregate(payload: usize) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x86, 0xdd];
    let pl = 32 + payload;
    f.extend_from_slice(&ip6_header(pl, 6));
    f.extend_from_slice(&tcp_header());
    f.extend((0..payload).map(|i| (i * 7 + i / 253) as u8));
    f
}

fn tcp_header() -> [u8; 32] {
    let mut t = [0u8; 32];
    t[0..4].copy_from_slice(&[0x30, 0x39, 0x14, 0x51]);
    t[4..8].copy_from_slice(&0xffff_f000u32.to_be_bytes()); // wraps during the cut
    t[12] = 0x80; // 32-byte header
    t[13] = 0x10 | 0x08 | 0x01; // ACK PSH FIN
    t[16] = 0xab; // a seed: not a valid checksum
    t[20..32].copy_from_slice(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]); // NOP NOP TS
    t
}

/// Puts `f` into a buffer chain (2 KiB buffers) described as an aggregate of `kind`.
pub(crate) fn aggregate(t: &mut NodeTest, f: &[u8], kind: u8, tx_if: u32) -> BufIdx {
    aggregate_mss(t, f, kind, tx_if, MSS)
}

fn aggregate_mss(t: &mut NodeTest, f: &[u8], kind: u8, tx_if: u32, mss: u16) -> BufIdx {
    let b = t.vm.main.bufs().alloc_with(f).expect("buffers");
    // SAFETY: just allocated here; one view.
    let v = unsafe { t.vm.pool.buffer(b) };
    assert!(v.hdr.flags & flags::NEXT_PRESENT != 0, "a chain");
    Gso::parse(f, kind, mss).expect("parses").set_meta(v.hdr);
    v.hdr.tx_if = tx_if;
    v.hdr.rx_if = 7;
    b
}

/// Checks the segments of `f` (headers at `l3`/`l4`, 32-byte TCP header): lengths, IP and
/// TCP checksums, sequence numbers, flags, and the payload put back together.
fn check_segments(segs: &[sluice_graph::testing::Captured], f: &[u8], v6: bool) {
    let (l3, l4) = (14, if v6 { 54 } else { 34 });
    let payload = f.len() - l4 - 32;
    assert_eq!(segs.len(), payload.div_ceil(MSS as usize));
    let mut got = Vec::new();
    for (i, s) in segs.iter().enumerate() {
        let d = &s.data;
        assert_eq!(
            s.hdr.flags & (flags::GSO | flags::OFFLOAD_L4_CKSUM | flags::NEXT_PRESENT),
            0
        );
        assert_eq!((s.hdr.rx_if, s.hdr.tx_if), (7, 1), "metadata carried");
        assert!(d.len() <= l4 + 32 + MSS as usize);
        let seg = &d[l4..];
        let pseudo = if v6 {
            assert_eq!(
                u16::from_be_bytes([d[l3 + 4], d[l3 + 5]]) as usize,
                d.len() - l4
            );
            let a = |o: usize| Ipv6Addr::from(<[u8; 16]>::try_from(&d[o..o + 16]).unwrap());
            sluice_wire::ipv6::pseudo_header_sum(a(l3 + 8), a(l3 + 24), 6, seg.len() as u32)
        } else {
            assert_eq!(checksum::sum(&d[l3..l4]), 0xffff, "IPv4 header checksum");
            assert_eq!(
                u16::from_be_bytes([d[l3 + 2], d[l3 + 3]]) as usize,
                d.len() - l3
            );
            assert_eq!(
                u16::from_be_bytes([d[l3 + 4], d[l3 + 5]]),
                0x1234 + i as u16
            );
            let a = |o: usize| Ipv4Addr::from(<[u8; 4]>::try_from(&d[o..o + 4]).unwrap());
            checksum::pseudo_header_v4(a(l3 + 12), a(l3 + 16), 6, seg.len() as u16)
        };
        assert_eq!(
            checksum::combine(pseudo, checksum::sum(seg)),
            0xffff,
            "TCP checksum"
        );
        let seq = u32::from_be_bytes([seg[4], seg[5], seg[6], seg[7]]);
        assert_eq!(seq, 0xffff_f000u32.wrapping_add(i as u32 * MSS as u32));
        assert_eq!(
            seg[13] & 0x09 != 0,
            i + 1 == segs.len(),
            "FIN/PSH on the last only"
        );
        assert_eq!(&seg[20..32], &f[l4 + 20..l4 + 32], "options copied");
        got.extend_from_slice(&seg[32..]);
    }
    assert_eq!(got, &f[l4 + 32..], "payload byte for byte");
}

#[test]
fn gso_segment_cuts_chained_ipv4_and_ipv6_aggregates() {
    let mut t = NodeTest::new("gso-segment");
    let f4 = tcp4_aggregate(9500);
    let f6 = tcp6_aggregate(4321);
    let b4 = aggregate(&mut t, &f4, gso_type::TCPV4, 1);
    let b6 = aggregate(&mut t, &f6, gso_type::TCPV6, 1);
    // Metadata that lies (IPv6 kind on an IPv4 packet): not cut, dropped and counted.
    let bad = aggregate(&mut t, &f4, gso_type::TCPV4, 1);
    // SAFETY: owned by the test until injected.
    unsafe { t.vm.pool.arena().header_mut(bad) }.gso_type = gso_type::TCPV6;
    t.inject(&[b4, b6, bad]);
    let out = t.arc("interface-output");
    assert_eq!(out.len(), 10 + 5);
    check_segments(&out[..10], &f4, false);
    check_segments(&out[10..], &f6, true);
    assert_eq!(t.drops(), [("gso-segment".to_string(), "not_cuttable")]);
    t.assert_counters(&[("segmented", 2), ("segments", 15), ("not_cuttable", 1)]);
    t.assert_no_leaks();
}

#[test]
fn interface_output_sends_aggregates_to_gso_segment_unless_the_interface_takes_them() {
    let (mut t, sw) = setup("interface-output");
    t.capture("loop-tx");
    let f = tcp4_aggregate(3000);
    let agg = aggregate(&mut t, &f, gso_type::TCPV4, sw);
    let plain = t.packet(&udp4("10.0.0.2", "10.0.0.1"), |h| h.tx_if = sw);
    t.inject(&[agg, plain]);
    assert_eq!(t.arc("gso-segment").len(), 1);
    assert_eq!(t.arc("loop-tx").len(), 1);
    t.clear();
    sluice_vnet::output::set_gso(&mut t.h.vm, sluice_vnet::interface::SwIfIndex(sw), true);
    let agg = aggregate(&mut t, &f, gso_type::TCPV4, sw);
    t.inject(&[agg]);
    assert!(t.arc("gso-segment").is_empty());
    let tx = t.arc("loop-tx");
    assert_eq!(tx.len(), 1);
    assert_eq!(tx[0].data, f, "the aggregate whole");
    assert_ne!(tx[0].hdr.flags & flags::GSO, 0);
    t.assert_no_leaks();
}

/// `ip4-rewrite`/`ip6-rewrite` decide by segment size: an aggregate whose segments fit the
/// MTU is forwarded whole (TTL / hop limit decremented, IPv4 checksum updated); one whose
/// segments do not gets frag-needed / packet-too-big with the MTU.
#[test]
fn rewrite_checks_the_mtu_per_segment() {
    for v6 in [false, true] {
        let node = if v6 { "ip6-rewrite" } else { "ip4-rewrite" };
        let (mut t, sw) = setup(node);
        t.cli(&format!(
            "ip neighbor loop0 10.0.0.2 {PEER_MAC} static
             ip neighbor loop0 2001:db8::2 {PEER_MAC} static
             ip route add 10.0.1.0/24 via 10.0.0.2 loop0
             ip route add 2001:db8:1::/48 via 2001:db8::2 loop0"
        ));
        let (f, kind) = if v6 {
            (tcp6_aggregate(6000), gso_type::TCPV6)
        } else {
            (tcp4_aggregate(6000), gso_type::TCPV4)
        };
        t.cli("set interface mtu 1000 loop0");
        let mut bufs = Vec::new();
        for mss in [900, 1000] {
            let b = aggregate_mss(&mut t, &f, kind, 0, mss);
            // SAFETY: owned by the test until injected.
            let mut v = unsafe { t.vm.pool.buffer(b) };
            v.hdr.rx_if = sw;
            assert!(v.advance(14));
            bufs.push(b);
        }
        t.inject_at(if v6 { "ip6-lookup" } else { "ip4-lookup" }, &bufs);
        let out = t.arc("interface-output");
        assert_eq!(
            out.len(),
            1,
            "{node}: segments of 20/40 + 32 + 900 fit 1000"
        );
        assert_eq!(out[0].data.len(), f.len());
        assert_ne!(out[0].hdr.flags & flags::GSO, 0);
        if v6 {
            assert_eq!(out[0].data[14 + 7], 63, "hop limit");
        } else {
            assert_eq!(out[0].data[14 + 8], 63, "TTL");
            assert_eq!(checksum::sum(&out[0].data[14..34]), 0xffff);
        }
        let icmp = t.arc(if v6 {
            "ip6-icmp-error"
        } else {
            "ip4-icmp-error"
        });
        assert_eq!(
            icmp.len(),
            1,
            "{node}: segments of 20/40 + 32 + 1000 do not"
        );
        assert_eq!(icmp[0].hdr.feature_meta[1], 1000, "with the MTU");
        t.assert_no_leaks();
    }
}

/// `ip4-icmp-error` turns an aggregate into one error quoting its first buffer: the rest of
/// the chain freed, no GSO flags left (else a GSO-capable tx would hand it to the kernel as
/// an aggregate).
#[test]
fn icmp_error_about_an_aggregate_is_a_single_buffer() {
    let (mut t, sw) = setup("ip4-icmp-error");
    let f = tcp4_aggregate(6000);
    let b = aggregate(&mut t, &f, gso_type::TCPV4, 0);
    // SAFETY: owned by the test until injected.
    let mut v = unsafe { t.vm.pool.buffer(b) };
    v.hdr.rx_if = sw;
    assert!(v.advance(14));
    sluice_vnet::icmp_error::request(v.hdr, 3, 4, 1000);
    t.inject(&[b]);
    let out = t.arc("ip4-lookup");
    assert_eq!(out.len(), 1);
    let h = out[0].hdr;
    assert_eq!(
        h.flags & (flags::GSO | flags::OFFLOAD_L4_CKSUM | flags::NEXT_PRESENT),
        0
    );
    assert_eq!(out[0].data.len(), 576, "20 + 8 + 548 bytes of quote");
    assert_eq!(
        &out[0].data[28..48],
        &f[14..34],
        "quotes the aggregate's header"
    );
    t.assert_no_leaks();
}

/// The aggregate `f` as ip4-input/ip6-input get it: data at the IP header, received on `sw`.
fn at_l3(t: &mut NodeTest, f: &[u8], kind: u8, sw: u32) -> BufIdx {
    let b = aggregate(t, f, kind, 0);
    // SAFETY: owned by the test until injected.
    let mut v = unsafe { t.vm.pool.buffer(b) };
    v.hdr.rx_if = sw;
    v.hdr.l2.l2_hdr_offset = 0;
    assert!(v.advance(14));
    b
}

/// The `ip4-unicast`/`ip6-unicast` arc (`FeatureDef::takes_gso`): with no feature, or only
/// features that take aggregates (the arc's counter), an aggregate goes on whole; a feature
/// that does not (the source check) gets its segments, cut by `ip4-gso-segment` /
/// `ip6-gso-segment` in front of it, which let plain packets through. Segments start at
/// their IP header with the Ethernet header in front.
fn unicast_features_take_segments_unless_they_take_aggregates(v6: bool) {
    let (ip, lookup, kind) = if v6 {
        ("ip6", "ip6-lookup", gso_type::TCPV6)
    } else {
        ("ip4", "ip4-lookup", gso_type::TCPV4)
    };
    let (count, check) = (
        format!("{ip}-unicast-count"),
        format!("{ip}-source-check-via-rx"),
    );
    let f = if v6 {
        tcp6_aggregate(2500)
    } else {
        tcp4_aggregate(2500)
    };
    let plain = if v6 {
        udp6_l3("2001:db8::2", "2001:db8:1::2")
    } else {
        udp4_l3("10.0.0.2", "10.0.1.2")
    };
    let (mut t, sw) = setup(&format!("{ip}-input"));
    let b = at_l3(&mut t, &f, kind, sw);
    t.inject(&[b]);
    assert_eq!(t.arc(lookup).len(), 1, "no features: the aggregate goes on");
    t.clear();

    t.cli(&format!(
        "set interface feature loop0 {count} arc {ip}-unicast"
    ));
    t.capture(&count);
    let b = at_l3(&mut t, &f, kind, sw);
    t.inject(&[b]);
    let got = t.arc(&count);
    assert_eq!(got.len(), 1, "a feature that takes aggregates: whole");
    assert_ne!(got[0].hdr.flags & flags::GSO, 0);
    assert_eq!(got[0].hdr.total_len(), f.len() - 14);
    t.clear();

    t.cli(&format!(
        "set interface feature loop0 {check} arc {ip}-unicast"
    ));
    t.capture(&check);
    let p0 = t.packet(&plain, |h| h.rx_if = sw);
    let b = at_l3(&mut t, &f, kind, sw);
    let p = t.packet(&plain, |h| h.rx_if = sw);
    t.inject(&[p0, b, p]);
    let segs = t.arc(&check);
    assert_eq!(
        segs.len(),
        5,
        "a plain packet, 3 segments and a plain packet, in order"
    );
    assert_eq!(
        segs[0].data, plain,
        "the plain packet before the aggregate unchanged"
    );
    let segs = &segs[1..];
    let l4 = if v6 { 40 } else { 20 };
    for s in &segs[..3] {
        assert_eq!(s.hdr.flags & (flags::GSO | flags::NEXT_PRESENT), 0);
        assert_eq!(s.hdr.current_data, 14, "at the IP header");
        assert_eq!((s.hdr.l2.l2_hdr_offset, s.hdr.rx_if), (0, sw));
        if !v6 {
            assert_eq!(checksum::sum(&s.data[..20]), 0xffff);
        }
    }
    let payload: Vec<u8> = segs[..3]
        .iter()
        .flat_map(|s| s.data[l4 + 32..].to_vec())
        .collect();
    assert_eq!(payload, &f[14 + l4 + 32..]);
    assert_eq!(segs[3].data, plain, "the plain packet unchanged");
    assert!(t.arc(&count).is_empty(), "the counter runs after the check");
    t.assert_no_leaks();
}

#[test]
fn ip4_features_take_segments_unless_they_take_aggregates() {
    unicast_features_take_segments_unless_they_take_aggregates(false);
}

#[test]
fn ip6_features_take_segments_unless_they_take_aggregates() {
    unicast_features_take_segments_unless_they_take_aggregates(true);
}

/// `ip4-gso-segment` alone: with no feature enabled its segments go to the arc's end.
#[test]
fn ip4_gso_segment_sends_segments_on() {
    let (mut t, sw) = setup("ip4-gso-segment");
    let f = tcp4_aggregate(2500);
    let b = at_l3(&mut t, &f, gso_type::TCPV4, sw);
    t.inject(&[b]);
    let segs = t.arc("ip4-lookup");
    assert_eq!(segs.len(), 3);
    for s in &segs {
        assert_eq!(s.hdr.current_data, 14, "at the IPv4 header");
        assert_eq!((s.hdr.l2.l2_hdr_offset, s.hdr.rx_if), (0, sw));
        assert_eq!(checksum::sum(&s.data[..20]), 0xffff);
    }
    t.assert_counters(&[("segmented", 1), ("segments", 3)]);
    t.assert_no_leaks();
}

/// An Ethernet/IP/UDP GSO (`UDP_SEGMENT`) aggregate of `payload` bytes, its UDP length the
/// whole aggregate's and its checksum only the seed, over IPv4 (10.0.0.5 -> 10.0.1.2) or
/// IPv6 (2001:db8::5 -> 2001:db8:1::2).
fn udp_aggregate(payload: usize, v6: bool) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
    let ul = 8 + payload;
    if v6 {
        f.extend_from_slice(&[0x86, 0xdd]);
        f.extend_from_slice(&ip6_header(ul, 17));
    } else {
        f.extend_from_slice(&[0x08, 0x00]);
        f.extend_from_slice(&ip4_header(20 + ul, 17));
    }
    f.extend_from_slice(&[
        0x30,
        0x39,
        0x11,
        0x51,
        (ul >> 8) as u8,
        ul as u8,
        0xab,
        0xcd,
    ]);
    f.extend((0..payload).map(|i| (i * 13 + i / 251) as u8));
    f
}

/// UDP aggregates (`gso_type::UDP_L4`) are cut into datagrams of `gso_size` payload bytes,
/// each with its own UDP length, IP length and a valid UDP checksum (never 0).
#[test]
fn gso_segment_cuts_udp_aggregates() {
    for v6 in [false, true] {
        let mut t = NodeTest::new("gso-segment");
        let f = udp_aggregate(4500, v6);
        let b = aggregate(&mut t, &f, gso_type::UDP_L4, 1);
        t.inject(&[b]);
        let segs = t.arc("interface-output");
        assert_eq!(segs.len(), 5, "v6 {v6}: 4500 / 1000");
        let (l3, l4) = (14, if v6 { 54 } else { 34 });
        let mut got = Vec::new();
        for (i, s) in segs.iter().enumerate() {
            let d = &s.data;
            assert_eq!(s.hdr.flags & (flags::GSO | flags::OFFLOAD_L4_CKSUM), 0);
            let want = if i == 4 { 500 } else { MSS as usize };
            assert_eq!(d.len(), l4 + 8 + want, "v6 {v6} segment {i}");
            let seg = &d[l4..];
            assert_eq!(
                u16::from_be_bytes([seg[4], seg[5]]) as usize,
                8 + want,
                "UDP length"
            );
            assert_eq!(&seg[..4], &f[l4..l4 + 4], "ports");
            let pseudo = if v6 {
                assert_eq!(
                    u16::from_be_bytes([d[l3 + 4], d[l3 + 5]]) as usize,
                    8 + want
                );
                let a = |o: usize| Ipv6Addr::from(<[u8; 16]>::try_from(&d[o..o + 16]).unwrap());
                sluice_wire::ipv6::pseudo_header_sum(a(l3 + 8), a(l3 + 24), 17, seg.len() as u32)
            } else {
                assert_eq!(checksum::sum(&d[l3..l4]), 0xffff, "IPv4 header checksum");
                assert_eq!(
                    u16::from_be_bytes([d[l3 + 2], d[l3 + 3]]) as usize,
                    28 + want
                );
                let a = |o: usize| Ipv4Addr::from(<[u8; 4]>::try_from(&d[o..o + 4]).unwrap());
                checksum::pseudo_header_v4(a(l3 + 12), a(l3 + 16), 17, seg.len() as u16)
            };
            assert_ne!(
                u16::from_be_bytes([seg[6], seg[7]]),
                0,
                "UDP checksum present"
            );
            assert_eq!(
                checksum::combine(pseudo, checksum::sum(seg)),
                0xffff,
                "v6 {v6} segment {i}: UDP checksum"
            );
            got.extend_from_slice(&seg[8..]);
        }
        assert_eq!(got, &f[l4 + 8..], "payload byte for byte");
        t.assert_counters(&[("segmented", 1), ("segments", 5)]);
        t.assert_no_leaks();
    }
}

/// An aggregate for an interface that is down (or a sub-interface whose parent is down)
/// and does not take aggregates is dropped once, whole, as `interface_down`: not cut into
/// segments that are then dropped one by one.
#[test]
fn an_aggregate_for_a_down_interface_is_dropped_whole() {
    let (mut t, sw) = setup("interface-output");
    t.cli(
        "create sub-interfaces loop0 100
         set interface state loop0.100 up
         set interface state loop0 down",
    );
    let sub = t.sw_if("loop0.100");
    let f = tcp4_aggregate(3000);
    let a = aggregate(&mut t, &f, gso_type::TCPV4, sw);
    let b = aggregate(&mut t, &f, gso_type::TCPV4, sub);
    t.inject(&[a, b]);
    assert!(t.arc("gso-segment").is_empty(), "not cut");
    assert_eq!(
        t.drops(),
        [
            ("interface-output".to_string(), "interface_down"),
            ("interface-output".to_string(), "interface_down")
        ]
    );
    t.assert_counters(&[("interface_down", 2)]);
    t.assert_no_leaks();
}

/// `pcap trace tx` captures an aggregate for an interface without GSO once, as the
/// segments that come back from `gso-segment`, not also whole; an aggregate sent whole is
/// captured whole.
#[test]
fn pcap_tx_captures_a_cut_aggregate_once() {
    let (mut t, sw) = setup("interface-output");
    t.capture("loop-tx");
    let f = tcp4_aggregate(3000);
    let file = format!("gso-pcap-tx-{}.pcap", std::process::id());
    let on = format!("pcap trace tx max 100 file {file}");
    t.cli(&on);
    let agg = aggregate(&mut t, &f, gso_type::TCPV4, sw);
    let plain = t.packet(&udp4("10.0.0.2", "10.0.0.1"), |h| h.tx_if = sw);
    t.inject(&[agg, plain]);
    assert_eq!(t.arc("gso-segment").len(), 1);
    let off = sluice_graph::cli::pcap_trace_off(&mut t.h.vm);
    assert!(
        off.starts_with("Write 1 packets"),
        "only the plain one: {off}"
    );
    sluice_vnet::output::set_gso(&mut t.h.vm, sluice_vnet::interface::SwIfIndex(sw), true);
    t.cli(&on);
    let agg = aggregate(&mut t, &f, gso_type::TCPV4, sw);
    t.inject(&[agg]);
    let off = sluice_graph::cli::pcap_trace_off(&mut t.h.vm);
    assert!(
        off.starts_with("Write 1 packets"),
        "the aggregate whole: {off}"
    );
    let path = off.split(" to ").nth(1).and_then(|r| r.split(',').next());
    std::fs::remove_file(path.expect("the file in the summary")).expect("removed");
    t.assert_no_leaks();
}

/// `ip4-gso-segment` leaves an aggregate it cannot cut as it came (data at the IPv4
/// header, the Ethernet header in front) when it drops it: nothing rewound behind the
/// error path's back.
#[test]
fn ip4_gso_segment_drops_an_uncuttable_aggregate_unmoved() {
    let (mut t, sw) = setup("ip4-gso-segment");
    let f = tcp4_aggregate(2500);
    let b = aggregate(&mut t, &f, gso_type::TCPV4, 0);
    // SAFETY: owned by the test until injected.
    let mut v = unsafe { t.vm.pool.buffer(b) };
    v.hdr.rx_if = sw;
    v.hdr.l2.l2_hdr_offset = 0;
    v.hdr.gso_type = gso_type::TCPV6; // lies: not cuttable
    assert!(v.advance(14));
    t.inject(&[b]);
    let d = t.arc("error-drop");
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].hdr.current_data, 14, "still at the IPv4 header");
    assert_eq!(d[0].data[..20], f[14..34]);
    t.assert_counters(&[("not_cuttable", 1)]);
    t.assert_no_leaks();
}

/// An aggregate of more than 128 segments (64 KiB at an MSS under 512) is cut in rounds,
/// not dropped: every segment valid, the payload whole.
#[test]
fn gso_segment_cuts_more_than_128_segments_in_rounds() {
    let mut t = NodeTest::new("gso-segment");
    let f = tcp4_aggregate(30_000);
    let b = aggregate_mss(&mut t, &f, gso_type::TCPV4, 1, 100);
    t.inject(&[b]);
    let segs = t.arc("interface-output");
    assert_eq!(segs.len(), 300);
    let mut got = Vec::new();
    for (i, s) in segs.iter().enumerate() {
        let d = &s.data;
        assert_eq!(d.len(), 14 + 20 + 32 + 100, "segment {i}");
        assert_eq!(checksum::sum(&d[14..34]), 0xffff, "IPv4 header checksum");
        assert_eq!(
            u16::from_be_bytes([d[18], d[19]]),
            0x1234u16.wrapping_add(i as u16)
        );
        let seg = &d[34..];
        let a = |o: usize| Ipv4Addr::from(<[u8; 4]>::try_from(&d[o..o + 4]).unwrap());
        let p = checksum::pseudo_header_v4(a(26), a(30), 6, seg.len() as u16);
        assert_eq!(
            checksum::combine(p, checksum::sum(seg)),
            0xffff,
            "segment {i}"
        );
        let seq = u32::from_be_bytes([seg[4], seg[5], seg[6], seg[7]]);
        assert_eq!(seq, 0xffff_f000u32.wrapping_add(i as u32 * 100));
        assert_eq!(seg[13] & 0x09 != 0, i == 299, "FIN/PSH on the last only");
        got.extend_from_slice(&seg[32..]);
    }
    assert_eq!(got, &f[14 + 20 + 32..], "payload byte for byte");
    t.assert_counters(&[("segmented", 1), ("segments", 300)]);
    t.assert_no_leaks();
}

/// The same before `ip4-unicast` features: every round parses the aggregate from its
/// Ethernet header again (the rewind is undone between rounds).
#[test]
fn ip4_gso_segment_cuts_in_rounds() {
    let (mut t, sw) = setup("ip4-gso-segment");
    let f = tcp4_aggregate(30_000);
    let b = aggregate_mss(&mut t, &f, gso_type::TCPV4, 0, 100);
    // SAFETY: owned by the test until injected.
    let mut v = unsafe { t.vm.pool.buffer(b) };
    v.hdr.rx_if = sw;
    v.hdr.l2.l2_hdr_offset = 0;
    assert!(v.advance(14));
    t.inject(&[b]);
    let segs = t.arc("ip4-lookup");
    assert_eq!(segs.len(), 300);
    for s in &segs {
        assert_eq!(s.hdr.current_data, 14, "at the IPv4 header");
        assert_eq!(checksum::sum(&s.data[..20]), 0xffff);
    }
    let payload: Vec<u8> = segs.iter().flat_map(|s| s.data[52..].to_vec()).collect();
    assert_eq!(payload, &f[14 + 20 + 32..]);
    t.assert_counters(&[("segmented", 1), ("segments", 300)]);
    t.assert_no_leaks();
}

/// A test plugin's feature node: counts the aggregates it sees, then the next feature.
struct TestFeature {
    table: std::sync::Arc<sluice_vnet::feature::FeatureNext>,
    slot: usize,
    key: sluice_vnet::feature::ArcKey,
    aggregates: &'static std::sync::atomic::AtomicUsize,
}

impl sluice_graph::PacketNode for TestFeature {
    fn process_one(
        &mut self,
        _cx: &mut sluice_graph::Cx,
        b: &mut sluice_buffer::Buffer<'_>,
    ) -> sluice_graph::Next {
        if b.hdr.flags & flags::GSO != 0 {
            self.aggregates
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.table
            .next(self.slot, self.key.sw_if(b), sluice_graph::Next(0))
    }
}

static WHOLE6_SAW: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static NEVER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Features declaring `takes_gso` or not: `test-whole6` (takes aggregates) runs before
/// `test-cut6` on `ip6-unicast`; `test-cut4-out` on `ip4-output`; `test-cut-l2` on `l2-input`.
struct GsoTestPlugin;

impl sluice_vnet::plugin::Plugin for GsoTestPlugin {
    fn name(&self) -> &'static str {
        "gso-test"
    }
    fn version(&self) -> &'static str {
        "0"
    }
    fn description(&self) -> &'static str {
        "features with and without takes_gso"
    }
    fn register(
        &self,
        r: &mut sluice_vnet::plugin::Registrar,
    ) -> Result<(), sluice_vnet::plugin::RegisterError> {
        use sluice_vnet::feature::{ArcKey, FeatureDef};
        let feats: [Spec; 4] = [
            (
                "test-whole6",
                "ip6-unicast",
                "ip6-lookup",
                true,
                &["test-cut6"],
                ArcKey::Rx,
                &WHOLE6_SAW,
            ),
            (
                "test-cut6",
                "ip6-unicast",
                "ip6-lookup",
                false,
                &[],
                ArcKey::Rx,
                &NEVER,
            ),
            (
                "test-cut4-out",
                "ip4-output",
                "interface-output",
                false,
                &[],
                ArcKey::Tx,
                &NEVER,
            ),
            (
                "test-cut-l2",
                "l2-input",
                "l2-input",
                false,
                &[],
                ArcKey::Rx,
                &NEVER,
            ),
        ];
        for (node, arc, end, takes_gso, runs_before, key, aggregates) in feats {
            let slot = r.feature(FeatureDef {
                arc,
                node,
                runs_before,
                runs_after: &[],
                takes_gso,
            })?;
            let table = r.feature_table();
            r.node(
                sluice_graph::NodeRegistration::new(
                    node,
                    sluice_graph::NodeKind::Internal,
                    move |_| {
                        Box::new(sluice_graph::PerPacket::new(TestFeature {
                            table: table.clone(),
                            slot,
                            key,
                            aggregates,
                        }))
                    },
                )
                .nexts(&[end]),
            );
        }
        Ok(())
    }
}

static GSO_TEST: GsoTestPlugin = GsoTestPlugin;

/// A test feature: node, arc, arc end, takes aggregates, runs before, key, its counter.
type Spec = (
    &'static str,
    &'static str,
    &'static str,
    bool,
    &'static [&'static str],
    sluice_vnet::feature::ArcKey,
    &'static std::sync::atomic::AtomicUsize,
);

fn setup_with_test_features(node: &str) -> (NodeTest, u32) {
    let entry = sluice_vnet::plugin::PluginEntry {
        plugin: &GSO_TEST,
        enabled: true,
    };
    let (mut t, sw) = setup_with(&[entry], node);
    sluice_vnet::feature::set_aggregate_source(&mut t.vm, sw, true);
    (t, sw)
}

/// `ip6-unicast` with a feature that takes aggregates (`test-whole6`) before one that does
/// not (`test-cut6`): the first sees the aggregate whole, `ip6-gso-segment` runs between
/// them, the second gets the segments.
#[test]
fn ip6_cut_before_the_first_feature_that_does_not_take_aggregates() {
    let (mut t, sw) = setup_with_test_features("ip6-input");
    t.cli("set interface feature loop0 test-cut6 arc ip6-unicast");
    t.cli("set interface feature loop0 test-whole6 arc ip6-unicast");
    t.capture("test-cut6");
    let f = tcp6_aggregate(2500);
    let b = at_l3(&mut t, &f, gso_type::TCPV6, sw);
    t.inject(&[b]);
    assert_eq!(
        WHOLE6_SAW.load(std::sync::atomic::Ordering::Relaxed),
        1,
        "test-whole6 saw the aggregate"
    );
    let segs = t.arc("test-cut6");
    assert_eq!(segs.len(), 3, "test-cut6 gets the segments");
    let mut payload = Vec::new();
    for s in &segs {
        assert_eq!(s.hdr.flags & flags::GSO, 0);
        assert_eq!(s.hdr.current_data, 14, "at the IPv6 header");
        payload.extend_from_slice(&s.data[40 + 32..]);
    }
    assert_eq!(payload, &f[14 + 40 + 32..]);
    assert_eq!(NEVER.load(std::sync::atomic::Ordering::Relaxed), 0);
    t.assert_no_leaks();
}

/// On an output arc (`ip4-output`, packets at their Ethernet header) the cutting node
/// `ip4-output-gso-segment` sends segments, Ethernet header first, to the feature.
#[test]
fn ip4_output_features_get_segments_at_their_ethernet_header() {
    let (mut t, sw) = setup_with_test_features("ip4-output-gso-segment");
    t.cli("set interface feature loop0 test-cut4-out arc ip4-output");
    t.capture("test-cut4-out");
    let f = tcp4_aggregate(2500);
    let b = aggregate(&mut t, &f, gso_type::TCPV4, sw);
    let p = t.packet(&udp4("10.0.0.2", "10.0.1.2"), |h| h.tx_if = sw);
    t.inject(&[b, p]);
    let segs = t.arc("test-cut4-out");
    assert_eq!(segs.len(), 4, "3 segments and the plain packet");
    let mut payload = Vec::new();
    for s in &segs[..3] {
        assert_eq!(s.hdr.flags & flags::GSO, 0);
        assert_eq!((s.hdr.current_data, s.hdr.tx_if), (0, sw));
        assert_eq!(s.data[..14], f[..14], "Ethernet header first");
        assert_eq!(checksum::sum(&s.data[14..34]), 0xffff);
        payload.extend_from_slice(&s.data[14 + 20 + 32..]);
    }
    assert_eq!(payload, &f[14 + 20 + 32..]);
    assert_eq!(segs[3].data, udp4("10.0.0.2", "10.0.1.2"));
    t.assert_no_leaks();
}

/// On a tx-keyed arc a frame of plain packets of one rx interface but two tx interfaces
/// leaves `ip4-output-gso-segment`'s whole-frame path: loop0's (the feature's interface) go
/// to the feature, loop1's to the arc's end, in order.
#[test]
fn ip4_output_gso_segment_sends_plain_packets_by_their_tx_interface() {
    let (mut t, sw) = setup_with_test_features("ip4-output-gso-segment");
    t.cli(
        "create loopback interface
         set interface state loop1 up
         set interface feature loop0 test-cut4-out arc ip4-output",
    );
    let sw1 = t.sw_if("loop1");
    t.capture("test-cut4-out");
    let plain = udp4("10.0.0.2", "10.0.1.2");
    let mark = |i: u8| {
        let mut d = plain.clone();
        *d.last_mut().unwrap() = i;
        d
    };
    let last = |c: &[sluice_graph::testing::Captured]| -> Vec<u8> {
        c.iter().map(|p| *p.data.last().unwrap()).collect()
    };
    let bs: Vec<BufIdx> = (0..3u8)
        .map(|i| {
            t.packet(&mark(i), |h| {
                h.rx_if = sw;
                h.tx_if = if i == 1 { sw1 } else { sw };
            })
        })
        .collect();
    t.inject(&bs);
    assert_eq!(
        last(&t.arc("test-cut4-out")),
        [0, 2],
        "loop0's to the feature"
    );
    assert_eq!(
        last(&t.arc("interface-output")),
        [1],
        "loop1's to the arc's end"
    );
    t.assert_no_leaks();
}

/// On the L2 input arc (packets at their Ethernet header, keyed by the receiving interface)
/// `l2-input-gso-segment` sends a feature that does not take aggregates the segments,
/// Ethernet header first, and plain packets around the aggregate in order.
#[test]
fn l2_input_features_get_segments_at_their_ethernet_header() {
    let (mut t, sw) = setup_with_test_features("l2-input-gso-segment");
    t.cli("set interface feature loop0 test-cut-l2 arc l2-input");
    t.capture("test-cut-l2");
    let f = tcp6_aggregate(2500);
    let plain = udp4("10.0.0.2", "10.0.1.2");
    let p0 = t.packet(&plain, |h| h.rx_if = sw);
    let b = aggregate(&mut t, &f, gso_type::TCPV6, sw);
    // SAFETY: the test owns the buffer until injected; one view.
    unsafe { t.vm.pool.buffer(b) }.hdr.rx_if = sw;
    let p = t.packet(&plain, |h| h.rx_if = sw);
    t.inject(&[p0, b, p]);
    let segs = t.arc("test-cut-l2");
    assert_eq!(segs.len(), 5, "plain, 3 segments, plain");
    assert_eq!(segs[0].data, plain);
    let mut payload = Vec::new();
    for s in &segs[1..4] {
        assert_eq!(s.hdr.flags & flags::GSO, 0);
        assert_eq!((s.hdr.current_data, s.hdr.rx_if), (0, sw));
        assert_eq!(s.data[..14], f[..14], "Ethernet header first");
        payload.extend_from_slice(&s.data[14 + 40 + 32..]);
    }
    assert_eq!(payload, &f[14 + 40 + 32..]);
    assert_eq!(segs[4].data, plain);
    assert_eq!(NEVER.load(std::sync::atomic::Ordering::Relaxed), 0);
    t.assert_no_leaks();
}

/// `ip4-gso-segment` with a feature that does not take aggregates on loop0 only: a frame
/// with no aggregate goes on whole when its packets share an interface, by interface when
/// they do not, and a mixed frame has its aggregate cut and every packet sent on in order.
#[test]
fn ip4_gso_segment_passes_plain_frames_on_and_cuts_mixed_ones_in_order() {
    let (mut t, sw) = setup("ip4-gso-segment");
    t.cli(
        "create loopback interface
         set interface state loop1 up
         set interface ip address loop1 10.9.0.1/24
         set interface feature loop0 ip4-source-check-via-rx arc ip4-unicast",
    );
    let sw1 = t.sw_if("loop1");
    let check = "ip4-source-check-via-rx";
    t.capture(check);
    let plain = udp4_l3("10.0.0.2", "10.0.1.2");
    // Plain packet `i` (its last byte `i`) of interface `sw`.
    let mark = |i: u8| {
        let mut d = plain.clone();
        *d.last_mut().unwrap() = i;
        d
    };
    let last = |c: &[sluice_graph::testing::Captured]| -> Vec<u8> {
        c.iter().map(|p| *p.data.last().unwrap()).collect()
    };

    // One interface, no aggregate: all to loop0's feature, in order.
    let bs: Vec<BufIdx> = (0..4)
        .map(|i| t.packet(&mark(i), |h| h.rx_if = sw))
        .collect();
    t.inject(&bs);
    assert_eq!(last(&t.arc(check)), [0, 1, 2, 3]);
    assert!(t.arc("ip4-lookup").is_empty());
    t.clear();

    // Two interfaces, no aggregate: loop0's to the feature, loop1's to the arc's end.
    let bs: Vec<BufIdx> = (0..4)
        .map(|i| t.packet(&mark(i), |h| h.rx_if = if i % 2 == 0 { sw } else { sw1 }))
        .collect();
    t.inject(&bs);
    assert_eq!(last(&t.arc(check)), [0, 2]);
    assert_eq!(last(&t.arc("ip4-lookup")), [1, 3]);
    t.clear();

    // A plain packet, an aggregate, a loop1 packet, a plain packet.
    let f = tcp4_aggregate(2500);
    let p0 = t.packet(&mark(0), |h| h.rx_if = sw);
    let a = at_l3(&mut t, &f, gso_type::TCPV4, sw);
    let p1 = t.packet(&mark(1), |h| h.rx_if = sw1);
    let p2 = t.packet(&mark(2), |h| h.rx_if = sw);
    t.inject(&[p0, a, p1, p2]);
    let got = t.arc(check);
    assert_eq!(got.len(), 5, "a plain packet, 3 segments, a plain packet");
    assert_eq!(got[0].data, mark(0));
    for s in &got[1..4] {
        assert_eq!(s.hdr.flags & flags::GSO, 0);
        assert_eq!(s.hdr.current_data, 14, "at the IPv4 header");
        assert_eq!(checksum::sum(&s.data[..20]), 0xffff);
    }
    let payload: Vec<u8> = got[1..4]
        .iter()
        .flat_map(|s| s.data[20 + 32..].to_vec())
        .collect();
    assert_eq!(payload, &f[14 + 20 + 32..]);
    assert_eq!(got[4].data, mark(2));
    assert_eq!(last(&t.arc("ip4-lookup")), [1]);
    t.assert_counters(&[("segmented", 1), ("segments", 3)]);
    t.assert_no_leaks();
}

/// `ip4-input` reads an interface's first feature once per run of packets of one rx
/// interface (`feature::ArcRun`): a frame alternating loop0 (with the arc's counter) and
/// loop1 (no feature) sends loop0's to the feature and loop1's to `ip4-lookup`; once the
/// feature is disabled the same frame all goes to `ip4-lookup`.
#[test]
fn ip4_input_feature_start_follows_rx_interface_changes_in_a_frame() {
    let (mut t, sw) = setup("ip4-input");
    t.cli(
        "create loopback interface
         set interface state loop1 up
         set interface ip address loop1 10.9.0.1/24
         set interface feature loop0 ip4-unicast-count arc ip4-unicast",
    );
    let sw1 = t.sw_if("loop1");
    let count = "ip4-unicast-count";
    t.capture(count);
    let plain = udp4_l3("10.0.0.2", "10.0.1.2");
    let mark = |i: u8| {
        let mut d = plain.clone();
        *d.last_mut().unwrap() = i;
        d
    };
    let last = |c: &[sluice_graph::testing::Captured]| -> Vec<u8> {
        c.iter().map(|p| *p.data.last().unwrap()).collect()
    };
    let frame = |t: &mut NodeTest| -> Vec<BufIdx> {
        (0..4)
            .map(|i| t.packet(&mark(i), |h| h.rx_if = if i % 2 == 0 { sw } else { sw1 }))
            .collect()
    };
    let bs = frame(&mut t);
    t.inject(&bs);
    assert_eq!(last(&t.arc(count)), [0, 2], "loop0's to the feature");
    assert_eq!(last(&t.arc("ip4-lookup")), [1, 3], "loop1's to ip4-lookup");
    t.clear();

    t.cli("set interface feature loop0 ip4-unicast-count arc ip4-unicast disable");
    let bs = frame(&mut t);
    t.inject(&bs);
    assert!(t.arc(count).is_empty(), "no feature any more");
    assert_eq!(last(&t.arc("ip4-lookup")), [0, 1, 2, 3]);
    t.assert_no_leaks();
}
