//! The IPv6 path: `ip6-input`, `ip6-lookup`, `ip6-rewrite`, `ip6-local`.

use super::ip4::{fast, headroom_after, in_front, marked_packet, MARK};
use super::*;
use sluice_buffer::BufIdx;

#[test]
fn input_validates_headers_and_admits_link_scope_multicast() {
    let (mut t, sw) = setup("ip6-input");
    let good = udp6_l3("2001:db8::2", "2001:db8:1::2");
    let mut padded = good.clone();
    padded.extend_from_slice(&[0; 6]);
    let mut version = good.clone();
    version[0] = 0x40;
    let mut long = good.clone();
    long[4..6].copy_from_slice(&500u16.to_be_bytes());
    let src_mcast = udp6_l3("ff02::1", "2001:db8:1::2");
    let all_nodes = udp6_l3("fe80::2", "ff02::1");
    let other_group = udp6_l3("fe80::2", "ff05::9");
    t.run_with(
        &[
            good.clone(),
            padded,
            version,
            long,
            src_mcast,
            all_nodes,
            other_group,
            good[..39].to_vec(),
        ],
        |h| h.rx_if = sw,
    );
    let fwd = t.arc("ip6-lookup");
    assert_eq!(fwd.len(), 2);
    assert_eq!(fwd[1].data, good, "Ethernet padding trimmed");
    assert_eq!(t.arc("ip6-local").len(), 1, "ff02::1 is for us");
    t.assert_counters(&[
        ("version", 1),
        ("bad_length", 1),
        ("src_multicast", 1),
        ("multicast", 1),
        ("too_short", 1),
    ]);
    t.assert_no_leaks();
}

/// `ip6-input`'s frame loop: as `ip4-input`'s, the packets around one the fast path does
/// not take keep their arc, in order, the padded one trimmed (by the fast path). A frame
/// of bad packets first leaves `error-drop` in every next slot of the thread's scratch, so
/// a packet whose next the loop did not write would be dropped and missed here.
#[test]
fn input_fast_path_resumes_after_a_packet_it_does_not_take() {
    let (mut t, sw) = setup("ip6-input");
    let good = |last: u8| udp6_l3("2001:db8::2", &format!("2001:db8:1::{last}"));
    let mut version = good(1);
    version[0] = 0x40;
    t.run_with(&vec![version.clone(); 10], |h| h.rx_if = sw);
    let mut padded = good(3);
    padded.extend_from_slice(&[0; 6]);
    let mut long = good(5);
    long[4..6].copy_from_slice(&500u16.to_be_bytes());
    let group = udp6_l3("fe80::2", "ff05::9");
    t.run_with(
        &[version, good(2), padded, good(4), long, group, good(6)],
        |h| h.rx_if = sw,
    );
    let fwd: Vec<Vec<u8>> = t.arc("ip6-lookup").into_iter().map(|p| p.data).collect();
    assert_eq!(fwd, [good(2), good(3), good(4), good(6)]);
    t.assert_counters(&[("version", 11), ("bad_length", 1), ("multicast", 1)]);
    t.assert_no_leaks();
}

#[test]
fn input_drops_loopback_and_unspecified_sources() {
    let (mut t, sw) = setup("ip6-input");
    let pkts = [
        udp6_l3("::1", "2001:db8:1::2"),
        udp6_l3("::", "2001:db8:1::2"),
        udp6_l3("::", "ff02::1"),
        udp6_l3("::", "ff02::1:ff00:1"), // duplicate address detection passes
        udp6_l3("::2", "2001:db8:1::2"), // IPv4-compatible, not ours to judge
    ];
    t.run_with(&pkts, |h| h.rx_if = sw);
    assert_eq!(t.arc("ip6-local").len(), 1);
    assert_eq!(t.arc("ip6-lookup").len(), 1);
    t.assert_counters(&[("src_loopback", 1), ("src_unspecified", 2)]);
    t.assert_no_leaks();
}

#[test]
fn input_drops_our_own_addresses_as_source() {
    let (mut t, sw) = setup("ip6-input");
    let ll = sluice_vnet::ip6::link_local([2, 0, 0, 0, 0, 1]);
    let ll = std::net::Ipv6Addr::from(ll).to_string();
    let pkts = [
        udp6_l3("2001:db8::1", "2001:db8:1::2"), // in transit
        udp6_l3("2001:db8::1", "2001:db8::1"),   // for the router
        udp6_l3(&ll, "2001:db8:1::2"),           // our link-local address
        // passed: a neighbour, and a source sharing our address's low 16 bits
        udp6_l3("2001:db8::2", "2001:db8:1::2"),
        udp6_l3("2001:db8:5::1", "2001:db8:1::2"),
    ];
    t.run_with(&pkts, |h| h.rx_if = sw);
    assert_eq!(t.arc("ip6-lookup").len(), 2);
    t.assert_counters(&[("own_source", 3)]);
    // Gone with the address.
    t.cli("set interface ip address del loop0 2001:db8::1/64");
    t.run_with(&[udp6_l3("2001:db8::1", "2001:db8:1::2")], |h| h.rx_if = sw);
    assert_eq!(t.arc("ip6-lookup").len(), 3, "forwarded once not ours");
    t.assert_counters(&[("own_source", 3)]);
    t.assert_no_leaks();
}

/// `ip6-lookup` under test: 2001:db8:1::/64 via a resolved neighbor, 2001:db8:3::/64 via
/// drop (loop0 has 2001:db8::1/64: that address is local, one without a neighbor gleans).
fn lookup_setup() -> (NodeTest, u32) {
    let (mut t, sw) = setup("ip6-lookup");
    t.cli(&format!(
        "ip neighbor loop0 2001:db8::2 {PEER_MAC} static
         ip route add 2001:db8:1::/64 via 2001:db8::2 loop0
         ip route add 2001:db8:3::/64 via drop"
    ));
    (t, sw)
}

#[test]
fn lookup_sends_each_packet_to_its_adjacency_kind() {
    let (mut t, sw) = lookup_setup();
    let pkts = [
        udp6_l3("2001:db8::2", "2001:db8:1::2"),
        udp6_l3("2001:db8::2", "2001:db8::1"),
        udp6_l3("2001:db8::2", "2001:db8::9"),
        udp6_l3("2001:db8::2", "2001:db8:3::2"),
        udp6_l3("2001:db8::2", "3fff::1"),
    ];
    t.run_with(&pkts, |h| h.rx_if = sw);
    assert_eq!(t.arc("ip6-rewrite").len(), 1);
    assert_eq!(t.arc("ip6-local").len(), 1);
    assert_eq!(t.arc("ip6-glean").len(), 1);
    assert_eq!(
        t.arc("ip6-icmp-error").len(),
        1,
        "no route: ICMPv6 unreachable"
    );
    assert_eq!(
        t.drops().iter().map(|d| d.1).collect::<Vec<_>>(),
        ["drop_route"]
    );
    t.assert_counters(&[("drop_route", 1), ("no_route", 1)]);
    t.assert_no_leaks();
}

/// `ip6-lookup`'s remembered adjacency: runs of packets on one adjacency (rewrite, local,
/// glean) take the two-store path, drop-route packets are counted one by one, and a change
/// of adjacency resolves again. A frame of drop-route packets runs first, so every next
/// slot of the thread's scratch holds `error-drop`: a packet whose arc the two-store path
/// did not write is dropped and missed here.
#[test]
fn lookup_remembers_the_adjacency_of_the_packet_before() {
    let (mut t, sw) = lookup_setup();
    let to = |dst: &str| udp6_l3("2001:db8::2", dst);
    let lost: Vec<_> = (0..16)
        .map(|i| to(&format!("2001:db8:3::{:x}", i + 1)))
        .collect();
    t.run_with(&lost, |h| h.rx_if = sw);
    assert_eq!(t.drops().len(), 16);
    let fwd = |i: u8| to(&format!("2001:db8:1::{i:x}"));
    // rw, rw, drop, drop, rw, local, local, glean, glean, rw.
    let pkts = [
        fwd(1),
        fwd(2),
        to("2001:db8:3::1"),
        to("2001:db8:3::2"),
        fwd(3),
        to("2001:db8::1"),
        to("2001:db8::1"),
        to("2001:db8::9"),
        to("2001:db8::a"),
        fwd(4),
    ];
    t.run_with(&pkts, |h| h.rx_if = sw);
    let ip6 = sluice_vnet::ip6::shared(&mut t.h.vm).unwrap();
    let adj = |a: &str| ip6.lookup(0, a.parse::<std::net::Ipv6Addr>().unwrap().into());
    let rw = t.arc("ip6-rewrite");
    assert_eq!(rw.len(), 4);
    for (i, p) in rw.iter().enumerate() {
        assert_eq!(p.data[39] as usize, i + 1, "in order");
        assert_eq!(Some(p.hdr.ip.adj_index), adj("2001:db8:1::1"));
    }
    let local = t.arc("ip6-local");
    assert_eq!(local.len(), 2);
    for p in &local {
        assert_eq!(Some(p.hdr.ip.adj_index), adj("2001:db8::1"));
    }
    let glean = t.arc("ip6-glean");
    assert_eq!(glean.len(), 2);
    for p in &glean {
        assert_eq!(Some(p.hdr.ip.adj_index), adj("2001:db8::9"));
    }
    assert_ne!(adj("2001:db8::9"), adj("2001:db8::1"));
    assert_eq!(t.drops().len(), 18, "16 before, 2 drop route");
    t.assert_counters(&[("drop_route", 18)]);
    t.assert_no_leaks();
}

#[test]
fn rewrite_decrements_hop_limit_and_refuses_expiry_and_too_big() {
    let (mut t, sw) = setup("ip6-rewrite");
    t.cli(&format!(
        "ip neighbor loop0 2001:db8::2 {PEER_MAC} static
         ip route add 2001:db8:1::/64 via 2001:db8::2 loop0
         set interface mtu 1300 loop0"
    ));
    let p = udp6_l3("2001:db8::5", "2001:db8:1::2");
    let mut hl1 = p.clone();
    hl1[7] = 1;
    let big = pkt("UDP: 2001:db8::5 -> 2001:db8:1::2\nUDP: 1 -> 2\nincrementing 1400");
    let bufs: Vec<BufIdx> = [p.clone(), hl1.clone(), big]
        .iter()
        .map(|x| t.packet(x, |h| h.rx_if = sw))
        .collect();
    t.inject_at("ip6-lookup", &bufs);
    let out = t.arc("interface-output");
    assert_eq!(out.len(), 1);
    let d = &out[0].data;
    assert_eq!(&d[0..6], &[2, 0, 0, 0, 0, 2]);
    assert_eq!(&d[12..14], &[0x86, 0xdd]);
    assert_eq!(d[14 + 7], p[7] - 1, "hop limit decremented");
    assert_eq!(out[0].hdr.tx_if, sw);
    let icmp = t.arc("ip6-icmp-error");
    assert_eq!(icmp.len(), 2);
    // The fast path's Ethernet header push is undone: the packet as it came, at its IP header.
    assert_eq!(icmp[0].data, hl1, "unchanged, at its IPv6 header");
    t.assert_counters(&[("hop_limit_expired", 1), ("too_big", 1)]);
    t.assert_no_leaks();
}

/// The fast path's length bound is the MTU: a packet of exactly the MTU goes out by the
/// fast path, one byte more is too big (nothing written in front).
#[test]
fn rewrite_takes_a_packet_of_exactly_the_mtu() {
    let (mut t, sw) = setup("ip6-rewrite");
    t.cli(&format!(
        "ip neighbor loop0 2001:db8::2 {PEER_MAC} static
         ip route add 2001:db8:1::/64 via 2001:db8::2 loop0
         set interface mtu 1300 loop0"
    ));
    let at = pkt("UDP: 2001:db8::5 -> 2001:db8:1::2\nUDP: 1 -> 2\nincrementing 1252");
    let over = pkt("UDP: 2001:db8::5 -> 2001:db8:1::2\nUDP: 1 -> 2\nincrementing 1253");
    assert_eq!((at.len(), over.len()), (1300, 1301));
    let bufs = [
        marked_packet(&mut t, &at, 17, |h| h.rx_if = sw),
        marked_packet(&mut t, &over, 17, |h| h.rx_if = sw),
    ];
    t.inject_at("ip6-lookup", &bufs);
    let out = t.arc("interface-output");
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].data.len(), 1314);
    assert_eq!(in_front(&t, bufs[0], 17), fast(17), "the fast path");
    assert_eq!(headroom_after(&t, bufs[1], 17), [MARK; 17]);
    assert_eq!(t.arc("ip6-icmp-error").len(), 1);
    t.assert_counters(&[("too_big", 1)]);
    t.assert_no_leaks();
}

/// [`super::ip_shared::rewrite_frame_mixes_adjacencies_and_expiring_packets`]: the hop
/// limit decremented.
#[test]
fn rewrite_frame_mixes_adjacencies_and_expiring_packets() {
    let (mut t, sw) = rewrite_setup();
    t.cli(
        "ip neighbor loop0 2001:db8::3 02:00:00:00:00:03 static
         ip route add 2001:db8:2::/64 via 2001:db8::3 loop0",
    );
    let a = udp6_l3("2001:db8::5", "2001:db8:1::2");
    let b = udp6_l3("2001:db8::5", "2001:db8:2::2");
    let mut x = a.clone();
    x[7] = 1;
    let fwd = |p: &[u8]| {
        let mut f = p.to_vec();
        f[7] -= 1;
        f
    };
    super::ip_shared::rewrite_frame_mixes_adjacencies_and_expiring_packets(
        (t, sw),
        (&a, &b, &x),
        ("ip6-lookup", "ip6-icmp-error"),
        [0x86, 0xdd],
        fwd,
    );
}

/// [`super::ip_shared::rewrite_follows_a_neighbor_mac_change_between_frames`].
#[test]
fn rewrite_follows_a_neighbor_mac_change_between_frames() {
    super::ip_shared::rewrite_follows_a_neighbor_mac_change_between_frames(
        rewrite_setup(),
        &udp6_l3("2001:db8::5", "2001:db8:1::2"),
        "ip6-lookup",
        "ip neighbor loop0 2001:db8::2 02:00:00:00:00:09 static",
    );
}

/// `ip6-rewrite` under test, packets entering at `ip6-lookup` (which sets `adj_index`).
fn rewrite_setup() -> (NodeTest, u32) {
    let (mut t, sw) = setup("ip6-rewrite");
    t.cli(&format!(
        "ip neighbor loop0 2001:db8::2 {PEER_MAC} static
         ip route add 2001:db8:1::/64 via 2001:db8::2 loop0"
    ));
    (t, sw)
}

/// A packet the router built itself (`LOCALLY_ORIGINATED`: ping, an ICMPv6 error) leaves
/// with the hop limit it was given, even 1; a transit packet beside it is decremented.
#[test]
fn rewrite_keeps_the_hop_limit_of_a_locally_originated_packet() {
    let (mut t, sw) = rewrite_setup();
    let p = udp6_l3("2001:db8::1", "2001:db8:1::2");
    let mut hl1 = p.clone();
    hl1[7] = 1;
    let local = |h: &mut sluice_buffer::BufferHeader| {
        h.rx_if = sw;
        h.flags |= sluice_buffer::flags::LOCALLY_ORIGINATED;
    };
    let bufs = [
        t.packet(&p, local),
        t.packet(&hl1, local),
        t.packet(&p, |h| h.rx_if = sw),
    ];
    t.inject_at("ip6-lookup", &bufs);
    let out = t.arc("interface-output");
    assert_eq!(out.len(), 3, "none expired");
    for (o, hop_limit) in out.iter().zip([64, 1, 63]) {
        assert_eq!(o.hdr.tx_if, sw);
        assert_eq!(&o.data[0..6], &[2, 0, 0, 0, 0, 2]);
        assert_eq!(o.data[14 + 7], hop_limit);
    }
    t.assert_counters(&[]);
    t.assert_no_leaks();
}

/// [`super::ip_shared::rewrite_needs_room_for_the_l2_header`]: the hop limit decremented,
/// the rest as it was.
#[test]
fn rewrite_drops_a_packet_without_room_for_the_l2_header() {
    let p = udp6_l3("2001:db8::5", "2001:db8:1::2");
    let mut q = p.clone();
    q[7] -= 1;
    let l3 = |o: &[u8]| assert_eq!(o, &q[..], "hop limit decremented");
    let nodes = ("ip6-lookup", "ip6-rewrite");
    super::ip_shared::rewrite_needs_room_for_the_l2_header(
        rewrite_setup(),
        &p,
        nodes,
        [0x86, 0xdd],
        l3,
    );
}

#[test]
fn local_answers_echo_and_refuses_closed_udp_ports() {
    let (mut t, sw) = setup("ip6-local");
    let echo =
        pkt("ICMP6: 2001:db8::2 -> 2001:db8::1\nICMP echo_request id 7 seq 1\nincrementing 8");
    let udp = udp6_l3("2001:db8::2", "2001:db8::1");
    let tcp = pkt("TCP: 2001:db8::2 -> 2001:db8::1\nTCP: 1000 -> 22 SYN");
    t.run_with(&[echo.clone(), udp, tcp], |h| h.rx_if = sw);
    let r = t.arc("ip6-lookup");
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].data[40], 129, "echo reply");
    assert_eq!(&r[0].data[8..24], &echo[24..40], "back to the sender");
    assert_eq!(t.arc("ip6-icmp-error").len(), 1);
    assert_eq!(t.arc("punt").len(), 1);
    t.assert_counters(&[("echo_replies", 1), ("punted", 1)]);
    t.assert_no_leaks();
}

/// An NS or NA (hop limit 255, valid checksum) without an Ethernet header.
pub(super) fn nd6(src: &str, dst: &str, m: sluice_wire::icmpv6::NdiscRepr) -> Vec<u8> {
    use sluice_wire::icmpv6::Icmpv6Packet;
    let (s, d): (std::net::Ipv6Addr, std::net::Ipv6Addr) =
        (src.parse().unwrap(), dst.parse().unwrap());
    let n = m.buffer_len();
    let mut p = vec![0u8; 40 + n];
    p[0] = 0x60;
    p[4..6].copy_from_slice(&(n as u16).to_be_bytes());
    p[6] = 58;
    p[7] = 255;
    p[8..24].copy_from_slice(&s.octets());
    p[24..40].copy_from_slice(&d.octets());
    let mut icmp = Icmpv6Packet::new_checked(&mut p[40..]).unwrap();
    m.emit(&mut icmp);
    icmp.fill_checksum(s, d);
    p
}

#[test]
fn nd_with_a_group_link_layer_address_is_not_learned() {
    use sluice_wire::icmpv6::{NaFlags, NdiscRepr};
    use sluice_wire::Mac;
    let (mut t, sw) = setup("ip6-local");
    let target = "2001:db8::1".parse().unwrap();
    let ns = |m: [u8; 6]| {
        nd6(
            "2001:db8::2",
            "ff02::1:ff00:1",
            NdiscRepr::NeighborSolicit {
                target,
                lladdr: Some(Mac(m)),
            },
        )
    };
    let na = nd6(
        "2001:db8::3",
        "2001:db8::1",
        NdiscRepr::NeighborAdvert {
            flags: NaFlags::SOLICITED | NaFlags::OVERRIDE,
            target: "2001:db8::3".parse().unwrap(),
            lladdr: Some(Mac([0x33, 0x33, 0, 0, 0, 1])),
        },
    );
    t.run_with(&[ns([0xff; 6]), na, ns([2, 0, 0, 0, 0, 2])], |h| {
        h.rx_if = sw
    });
    assert_eq!(
        t.arc("interface-output").len(),
        1,
        "only the good NS answered"
    );
    assert_eq!(
        sluice_vnet::ip_family::apply_learned::<sluice_vnet::ip6::Ip6Control>(&mut t.h.vm),
        1,
        "only the good NS learned"
    );
    t.assert_counters(&[("nd_group_lladdr", 2), ("ns_replied", 1)]);
    t.assert_no_leaks();
}

/// Link-scope groups the router is not in (OSPFv3's ff02::5) are dropped, unless a host
/// stack is behind `punt` on the interface (linux-cp): then every ff02::/16 group goes to
/// `ip6-local` (which punts it); wider scopes are still dropped.
#[test]
fn input_admits_link_scope_groups_for_a_host_stack() {
    let (mut t, sw) = setup("ip6-input");
    let ospf = udp6_l3("fe80::2", "ff02::5");
    let site = udp6_l3("fe80::2", "ff05::5");
    t.run_with(&[ospf.clone(), site.clone()], |h| h.rx_if = sw);
    t.assert_counters(&[("multicast", 2)]);
    sluice_vnet::set_punt_host(&mut t.h.vm, sluice_vnet::SwIfIndex(sw), true).unwrap();
    t.run_with(&[ospf, site], |h| h.rx_if = sw);
    assert_eq!(t.arc("ip6-local").len(), 1);
    t.assert_counters(&[("multicast", 3)]);
    t.assert_no_leaks();
}

/// A group with a `via local` route (a tunnel joined it) is received at scope 2 or more
/// only: an interface-local (ff01::/16) or reserved-scope (ff00::/16) group never arrives
/// on a link.
#[test]
fn input_takes_a_joined_group_of_scope_2_or_more_only() {
    let (mut t, sw) = setup("ip6-input");
    let local = sluice_vnet::routes::RoutePaths {
        local: true,
        ..Default::default()
    };
    let groups = ["ff00::5", "ff01::5", "ff02::5", "ff05::5"];
    for g in groups {
        let g: std::net::Ipv6Addr = g.parse().unwrap();
        sluice_vnet::ip6::route_add_del(&mut t.h.vm, true, 1, u128::from(g), 128, &local).unwrap();
    }
    let pkts: Vec<Vec<u8>> = groups.iter().map(|g| udp6_l3("fe80::2", g)).collect();
    t.run_with(&pkts, |h| h.rx_if = sw);
    let got: Vec<Vec<u8>> = t.arc("ip6-local").into_iter().map(|p| p.data).collect();
    assert_eq!(got, pkts[2..], "ff02::5 and ff05::5 only");
    t.assert_counters(&[("multicast", 2)]);
    t.assert_no_leaks();
}

/// UDP to a group reaches only a port serving groups (`ip_shared`).
#[test]
fn local_sends_udp_to_a_group_only_to_a_port_serving_groups() {
    super::ip_shared::local_sends_udp_to_a_group_only_to_a_port_serving_groups(true);
}

/// An echo request to a group is answered from the rx interface's global address, or
/// from its link-local one when the sender is link-local (as an ICMPv6 error).
#[test]
fn local_answers_echo_to_a_group_from_the_address_the_sender_can_reach() {
    let (mut t, sw) = setup("ip6-local");
    let echo = |src: &str, dst: &str| {
        pkt(&format!(
            "ICMP6: {src} -> {dst}\nICMP echo_request id 7 seq 1\nincrementing 8"
        ))
    };
    t.run_with(
        &[
            echo("2001:db8:99::2", "ff05::5"),
            echo("2001:db8:99::2", "ff02::1"),
            echo("fe80::2", "ff02::1"),
        ],
        |h| h.rx_if = sw,
    );
    let global: std::net::Ipv6Addr = "2001:db8::1".parse().unwrap();
    let r = t.arc("ip6-lookup");
    assert_eq!(r.len(), 3);
    assert_eq!(
        &r[0].data[8..24],
        &global.octets(),
        "off-link global sender"
    );
    assert_eq!(
        &r[1].data[8..24],
        &global.octets(),
        "off-link global sender"
    );
    assert_eq!(r[2].data[8..10], [0xfe, 0x80], "link-local sender");
    t.assert_counters(&[("echo_replies", 3)]);
    t.assert_no_leaks();
}

/// An NS or NA whose target is multicast is discarded (RFC 4861 §7.1.1, §7.1.2: the ND
/// parser refuses it, counted `nd_invalid`), even for a group with a `via local` route
/// (one a VXLAN tunnel joined), which `is_mine` would take for ours: not answered, not
/// learned.
#[test]
fn nd_with_a_multicast_target_is_discarded() {
    use sluice_wire::icmpv6::{NaFlags, NdiscRepr};
    use sluice_wire::Mac;
    let (mut t, sw) = setup("ip6-local");
    let g: std::net::Ipv6Addr = "ff0e::101".parse().unwrap();
    let local = sluice_vnet::routes::RoutePaths {
        local: true,
        ..Default::default()
    };
    sluice_vnet::ip6::route_add_del(&mut t.h.vm, true, 1, u128::from(g), 128, &local).unwrap();
    let ns = nd6(
        "2001:db8::2",
        "ff02::1:ff00:101",
        NdiscRepr::NeighborSolicit {
            target: g,
            lladdr: Some(Mac([2, 0, 0, 0, 0, 2])),
        },
    );
    let na = nd6(
        "2001:db8::3",
        "2001:db8::1",
        NdiscRepr::NeighborAdvert {
            flags: NaFlags::SOLICITED | NaFlags::OVERRIDE,
            target: g,
            lladdr: Some(Mac([2, 0, 0, 0, 0, 3])),
        },
    );
    t.run_with(&[ns, na], |h| h.rx_if = sw);
    assert!(t.arc("interface-output").is_empty(), "not answered");
    assert_eq!(
        sluice_vnet::ip_family::apply_learned::<sluice_vnet::ip6::Ip6Control>(&mut t.h.vm),
        0,
        "not learned"
    );
    t.assert_counters(&[("nd_invalid", 2)]);
    t.assert_no_leaks();
}
