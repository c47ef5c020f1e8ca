//! The nodes written once for both families (`sluice_vnet::icmp_error`,
//! `sluice_vnet::glean`), each run as `ip4-*` and `ip6-*`: what they send, their drops and
//! each family's counter wording; and the checks of `ip4-local`/`ip6-local` (shared
//! `sluice_vnet::ip_local` code) that differ only in addresses, which `ip4.rs` and `ip6.rs`
//! call.

use super::*;
use sluice_buffer::BufIdx;
use sluice_vnet::icmp_error::request;
use sluice_wire::checksum;
use sluice_wire::icmpv6::Icmpv6Packet;
use std::net::Ipv6Addr;

/// An address of the packet bytes `d` at `at`.
fn v6(d: &[u8], at: usize) -> Ipv6Addr {
    Ipv6Addr::from(<[u8; 16]>::try_from(&d[at..at + 16]).unwrap())
}

/// `loop1`: an interface without any address.
fn bare_interface(t: &mut NodeTest) -> u32 {
    t.cli("create loopback interface\nset interface state loop1 up");
    t.sw_if("loop1")
}

/// `show errors` has `description` for `node`.
fn assert_worded(t: &mut NodeTest, node: &str, description: &str) {
    let out = t.cli("show errors");
    assert!(
        out.lines()
            .any(|l| l.contains(node) && l.contains(description)),
        "{node}: `{description}' in\n{out}"
    );
}

/// A packet for `*-icmp-error`: its bytes, its rx interface, the error asked for (type,
/// code, MTU).
type ErrorFor = (Vec<u8>, u32, (u8, u8, u32));

/// Injects the packets.
fn inject_requests<const N: usize>(t: &mut NodeTest, errors: [ErrorFor; N]) {
    let bufs: Vec<BufIdx> = errors
        .into_iter()
        .map(|(d, rx, (kind, code, mtu))| {
            t.packet(&d, |h| {
                h.rx_if = rx;
                request(h, kind, code, mtu);
            })
        })
        .collect();
    t.inject(&bufs);
}

#[test]
fn icmp_error_answers_ipv4_from_the_rx_interface() {
    let (mut t, sw) = setup("ip4-icmp-error");
    let bare = bare_interface(&mut t);
    let p = udp4_l3("10.0.0.2", "10.0.1.2");
    let mut fragment = p.clone();
    fragment[7] = 8; // offset 64 bytes: not the first fragment
    let errors = [
        (p.clone(), sw, (11, 0, 0)),
        (p.clone(), sw, (3, 4, 1000)),
        (fragment, sw, (11, 0, 0)),
        (udp4_l3("224.0.0.5", "10.0.1.2"), sw, (11, 0, 0)),
        (p.clone(), bare, (11, 0, 0)),
    ];
    inject_requests(&mut t, errors);
    let sent = t.arc("ip4-lookup");
    assert_eq!(sent.len(), 2);
    for (e, (kind, code)) in sent.iter().zip([(11, 0), (3, 4)]) {
        let d = &e.data;
        assert_eq!(d.len(), 28 + p.len());
        assert_eq!((d[0], d[8], d[9]), (0x45, 64, 1), "IPv4, TTL 64, ICMP");
        assert_eq!(&d[12..16], &[10, 0, 0, 1], "from the rx interface");
        assert_eq!(&d[16..20], &[10, 0, 0, 2], "to the source");
        assert_eq!(checksum::sum(&d[..20]), 0xffff);
        assert_eq!((d[20], d[21]), (kind, code));
        assert_eq!(checksum::sum(&d[20..]), 0xffff);
        assert_eq!(d[28..], p[..], "the original quoted");
    }
    assert_eq!(
        &sent[1].data[26..28],
        &1000u16.to_be_bytes(),
        "next-hop MTU"
    );
    t.assert_counters(&[("sent", 2), ("suppressed", 2), ("no_source", 1)]);
    assert_worded(&mut t, "ip4-icmp-error", "ICMP errors sent");
    t.assert_no_leaks();
}

#[test]
fn icmp_error_answers_ipv6_from_the_rx_interface() {
    let (mut t, sw) = setup("ip6-icmp-error");
    let bare = bare_interface(&mut t);
    let p = udp6_l3("2001:db8::2", "2001:db8:1::2");
    let from_ll = udp6_l3("fe80::2", "2001:db8:1::2");
    let errors = [
        (p.clone(), sw, (1, 0, 0)),
        (p.clone(), sw, (2, 0, 1280)),
        (from_ll, sw, (3, 0, 0)),
        (udp6_l3("2001:db8::2", "ff05::1"), sw, (3, 0, 0)),
        (udp6_l3("::", "2001:db8:1::2"), sw, (3, 0, 0)),
        (p.clone(), bare, (3, 0, 0)),
    ];
    inject_requests(&mut t, errors);
    let sent = t.arc("ip6-lookup");
    assert_eq!(sent.len(), 3);
    for (e, kind) in sent.iter().zip([1, 2, 3]) {
        let d = &e.data;
        assert_eq!(
            (d[0], d[6], d[7]),
            (0x60, 58, 255),
            "IPv6, ICMPv6, hop limit 255"
        );
        assert_eq!(usize::from(u16::from_be_bytes([d[4], d[5]])), d.len() - 40);
        assert_eq!(d[40], kind);
        let (src, dst) = (v6(d, 8), v6(d, 24));
        assert!(Icmpv6Packet::new_checked(&d[40..])
            .unwrap()
            .verify_checksum(src, dst));
    }
    let d = &sent[0].data;
    assert_eq!(
        v6(d, 8),
        "2001:db8::1".parse::<Ipv6Addr>().unwrap(),
        "global source"
    );
    assert_eq!(v6(d, 24), "2001:db8::2".parse::<Ipv6Addr>().unwrap());
    assert_eq!(d[48..], p[..], "the original quoted");
    assert_eq!(
        &sent[1].data[44..48],
        &1280u32.to_be_bytes(),
        "packet too big: the MTU"
    );
    let to_ll = &sent[2].data;
    assert_eq!(
        to_ll[8..10],
        [0xfe, 0x80],
        "link-local source to a link-local destination"
    );
    t.assert_counters(&[("sent", 3), ("suppressed", 2), ("no_source", 1)]);
    assert_worded(&mut t, "ip6-icmp-error", "ICMPv6 errors sent");
    t.assert_no_leaks();
}

#[test]
fn glean_sends_one_arp_request_per_target_and_drops_the_packets() {
    let (mut t, sw) = setup("ip4-glean");
    bare_interface(&mut t);
    t.cli("ip route add 10.9.0.0/16 via loop1");
    let bufs: Vec<BufIdx> = [
        udp4_l3("10.0.0.2", "10.0.0.9"),
        udp4_l3("10.0.0.2", "10.0.0.9"), // throttled: same target within 10 ms
        udp4_l3("10.0.0.2", "10.0.0.10"),
        udp4_l3("10.0.0.2", "10.9.0.1"), // loop1 has no address
    ]
    .iter()
    .map(|p| t.packet(p, |h| h.rx_if = sw))
    .collect();
    t.inject_at("ip4-lookup", &bufs);
    let reqs = t.arc("interface-output");
    assert_eq!(reqs.len(), 2);
    for (r, target) in reqs.iter().zip([9u8, 10]) {
        let d = &r.data;
        assert_eq!(r.hdr.tx_if, sw);
        assert_eq!(d[..6], [0xff; 6], "broadcast");
        assert_eq!(d[6..12], [2, 0, 0, 0, 0, 1], "from the interface's MAC");
        assert_eq!(d[12..14], [0x08, 0x06], "ARP");
        assert_eq!(u16::from_be_bytes([d[20], d[21]]), 1, "request");
        assert_eq!(d[28..32], [10, 0, 0, 1], "from the interface's address");
        assert_eq!(d[38..42], [10, 0, 0, target]);
    }
    assert_eq!(t.arc("error-drop").len(), 4, "every packet dropped");
    t.assert_counters(&[("requests_sent", 2), ("throttled", 1), ("no_source", 1)]);
    assert_worded(&mut t, "ip4-glean", "ARP requests sent");
    t.assert_no_leaks();
}

#[test]
fn glean_solicits_each_target_once_and_drops_the_packets() {
    let (mut t, sw) = setup("ip6-glean");
    bare_interface(&mut t);
    t.cli("ip route add 2001:db9::/32 via loop1");
    let bufs: Vec<BufIdx> = [
        udp6_l3("2001:db8::2", "2001:db8::9"),
        udp6_l3("2001:db8::2", "2001:db8::9"), // throttled
        udp6_l3("2001:db8::2", "2001:db8::a0b"),
        udp6_l3("2001:db8::2", "2001:db9::1"), // loop1 has no IPv6
    ]
    .iter()
    .map(|p| t.packet(p, |h| h.rx_if = sw))
    .collect();
    t.inject_at("ip6-lookup", &bufs);
    let reqs = t.arc("interface-output");
    assert_eq!(reqs.len(), 2);
    for (r, target) in reqs.iter().zip(["2001:db8::9", "2001:db8::a0b"]) {
        let target: Ipv6Addr = target.parse().unwrap();
        let t16 = target.octets();
        let d = &r.data;
        assert_eq!(r.hdr.tx_if, sw);
        assert_eq!(d[..6], [0x33, 0x33, 0xff, t16[13], t16[14], t16[15]]);
        assert_eq!(d[6..12], [2, 0, 0, 0, 0, 1]);
        assert_eq!(d[12..14], [0x86, 0xdd]);
        let ip = &d[14..];
        let (src, dst) = (v6(ip, 8), v6(ip, 24));
        assert_eq!(src.segments()[0], 0xfe80, "from the link-local address");
        let group = Ipv6Addr::from(
            0xff02_0000_0000_0000_0000_0001_ff00_0000u128 | (u128::from(target) & 0xff_ffff),
        );
        assert_eq!(dst, group, "to the solicited-node group");
        assert_eq!(
            (ip[7], ip[40]),
            (255, 135),
            "hop limit 255, neighbor solicitation"
        );
        assert_eq!(v6(ip, 48), target);
        assert!(Icmpv6Packet::new_checked(&ip[40..])
            .unwrap()
            .verify_checksum(src, dst));
    }
    assert_eq!(t.arc("error-drop").len(), 4, "every packet dropped");
    t.assert_counters(&[("requests_sent", 2), ("throttled", 1), ("no_source", 1)]);
    assert_worded(&mut t, "ip6-glean", "neighbor solicitations sent");
    t.assert_no_leaks();
}

/// UDP to a group goes only to a port registered to serve groups (`register_groups`:
/// VXLAN); to any other served port (GTP-U, a host session) it is punted as unserved, never
/// answered with port unreachable (RFC 1122 §3.2.2), while the same port still takes
/// unicast. `ip6-local` when `ip6`, else `ip4-local`.
pub fn local_sends_udp_to_a_group_only_to_a_port_serving_groups(ip6: bool) {
    use sluice_vnet::ip_local::{register, register_groups, LocalKey};
    // Family, packet, source, our address, a group of ours and another, UDP dst port offset.
    type Family = (
        &'static str,
        fn(&str, &str) -> Vec<u8>,
        &'static str,
        &'static str,
    );
    let ((fam, l3, src, ours), groups, port_at): (Family, [&str; 2], usize) = if ip6 {
        (
            ("ip6", udp6_l3, "2001:db8::2", "2001:db8::1"),
            ["ff02::1", "ff05::5"],
            40 + 2,
        )
    } else {
        (
            ("ip4", udp4_l3, "10.0.0.2", "10.0.0.1"),
            ["224.0.0.1", "239.1.1.1"],
            20 + 2,
        )
    };
    let (mut t, sw) = setup(&format!("{fam}-local"));
    register(&mut t.h.vm, ip6, LocalKey::UdpPort(2152), "ip4-input").unwrap();
    register_groups(&mut t.h.vm, ip6, LocalKey::UdpPort(4789), "ip6-input").unwrap();
    t.h.capture("ip4-input");
    t.h.capture("ip6-input");
    let to = |dst: &str, port: u16| {
        let mut p = l3(src, dst);
        p[port_at..port_at + 2].copy_from_slice(&port.to_be_bytes());
        p
    };
    let unicast = to(ours, 2152);
    let vxlan = to(groups[1], 4789);
    t.run_with(
        &[
            unicast.clone(),
            to(groups[0], 2152),
            to(groups[1], 2152),
            vxlan.clone(),
        ],
        |h| h.rx_if = sw,
    );
    let data = |n: &str| -> Vec<Vec<u8>> { t.arc(n).into_iter().map(|p| p.data).collect() };
    assert_eq!(
        data("ip4-input"),
        [unicast],
        "{fam}: the unicast port's node"
    );
    assert_eq!(data("ip6-input"), [vxlan], "{fam}: the port serving groups");
    assert_eq!(t.arc("punt").len(), 2, "{fam}");
    assert!(t.arc(&format!("{fam}-icmp-error")).is_empty(), "{fam}");
    t.assert_counters(&[("punted", 2)]);
    t.assert_no_leaks();
}

/// Fewer than 14 bytes before the IP header: no room for the Ethernet header, a counted
/// drop, nothing written. 14 and 15 take the checked path (14 bytes written), 16 and more
/// the fast path (16 bytes: two zeros in front of the Ethernet header; at 16 they are the
/// first bytes of the buffer); nothing is written 17 bytes in front. The family's rewrite
/// node under test (`ip4.rs`/`ip6.rs` `rewrite_setup`), the L3 packet `p` routed through
/// `lookup` to the peer [`PEER_MAC`]; `l3` checks what the rewrite made of the L3 header.
pub fn rewrite_needs_room_for_the_l2_header(
    (mut t, sw): (NodeTest, u32),
    p: &[u8],
    (lookup, rewrite): (&str, &str),
    ethertype: [u8; 2],
    l3: impl Fn(&[u8]),
) {
    use super::ip4::{checked, fast, headroom_after, in_front, marked_packet, MARK};
    let rooms = [13, 14, 15, 16, 17];
    let bufs: Vec<BufIdx> = rooms
        .iter()
        .map(|&r| marked_packet(&mut t, p, r, |h| h.rx_if = sw))
        .collect();
    t.inject_at(lookup, &bufs);
    let out = t.arc("interface-output");
    assert_eq!(out.iter().map(|o| o.index).collect::<Vec<_>>(), bufs[1..]);
    for o in &out {
        assert_eq!(&o.data[0..6], &[2, 0, 0, 0, 0, 2]);
        assert_eq!(&o.data[6..12], &[2, 0, 0, 0, 0, 1]);
        assert_eq!(o.data[12..14], ethertype);
        l3(&o.data[14..]);
    }
    assert_eq!(
        headroom_after(&t, bufs[0], 13),
        [MARK; 13],
        "nothing written"
    );
    let got: Vec<_> = rooms[1..]
        .iter()
        .zip(&bufs[1..])
        .map(|(&r, &b)| in_front(&t, b, r))
        .collect();
    assert_eq!(got, [checked(14), checked(15), fast(16), fast(17)]);
    assert_eq!(t.drops(), [(rewrite.to_string(), "no_headroom")]);
    t.assert_counters(&[("no_headroom", 1)]);
    t.assert_no_leaks();
}

/// The rewrite nodes' frame loop (`fast_frame`): a frame whose packets change adjacency
/// (`a` to the peer [`PEER_MAC`], `b` to a second peer `02:00:00:00:00:03`, routed by the
/// caller's setup), leave the fast path (`x`: to the peer, TTL / hop limit 1) and come back
/// to it, until five have left it and the rest of the frame takes the per-packet loop. A
/// frame of expiring packets runs first, so that every next slot of the thread's scratch
/// holds `*-icmp-error`: a forwarded packet whose next the loop did not write goes there.
/// Every forwarded packet has its own peer's Ethernet header behind the fast path's two
/// zeros and `fwd` of its L3 bytes behind it; the expiring ones reach `*-icmp-error`
/// unchanged, in order.
pub fn rewrite_frame_mixes_adjacencies_and_expiring_packets(
    (mut t, sw): (NodeTest, u32),
    (a, b, x): (&[u8], &[u8], &[u8]),
    (lookup, icmp_error): (&str, &str),
    ethertype: [u8; 2],
    fwd: impl Fn(&[u8]) -> Vec<u8>,
) {
    use super::ip4::{fast, in_front, marked_packet};
    // The two adjacencies, as the lookup sets them.
    let first = [t.packet(a, |h| h.rx_if = sw), t.packet(b, |h| h.rx_if = sw)];
    t.inject_at(lookup, &first);
    let adjs: Vec<u32> = t
        .arc("interface-output")
        .iter()
        .map(|o| o.hdr.ip.adj_index)
        .collect();
    assert_eq!(adjs.len(), 2);
    assert_ne!(adjs[0], adjs[1]);
    t.clear();
    let expiring: Vec<BufIdx> = (0..16)
        .map(|_| {
            t.packet(x, |h| {
                h.rx_if = sw;
                h.ip.adj_index = adjs[0];
            })
        })
        .collect();
    t.inject(&expiring);
    assert_eq!(t.arc(icmp_error).len(), 16);
    t.clear();
    // Off the fast path at 1, 5, 7, 9 and 11 (the fifth: the per-packet loop from there).
    let order = "axbabxaxbxaxbaxb";
    let bufs: Vec<BufIdx> = order
        .chars()
        .map(|c| {
            let (p, adj) = match c {
                'a' => (a, adjs[0]),
                'b' => (b, adjs[1]),
                _ => (x, adjs[0]),
            };
            marked_packet(&mut t, p, 17, |h| {
                h.rx_if = sw;
                h.ip.adj_index = adj;
            })
        })
        .collect();
    t.inject(&bufs);
    let out = t.arc("interface-output");
    let sent: Vec<(BufIdx, char)> = bufs
        .iter()
        .zip(order.chars())
        .filter(|(_, c)| *c != 'x')
        .map(|(&i, c)| (i, c))
        .collect();
    assert_eq!(
        out.iter().map(|o| o.index).collect::<Vec<_>>(),
        sent.iter().map(|s| s.0).collect::<Vec<_>>(),
        "every forwarded packet to interface-output, in order"
    );
    for (o, &(i, c)) in out.iter().zip(&sent) {
        let (p, peer) = if c == 'a' { (a, 2) } else { (b, 3) };
        assert_eq!(&o.data[0..6], &[2, 0, 0, 0, 0, peer], "{c}: its peer");
        assert_eq!(&o.data[6..12], &[2, 0, 0, 0, 0, 1]);
        assert_eq!(o.data[12..14], ethertype);
        assert_eq!(o.data[14..], fwd(p), "{c}: the L3 header rewritten");
        assert_eq!(o.hdr.tx_if, sw);
        assert_eq!(in_front(&t, i, 17), fast(17), "{c}: two zeros in front");
    }
    let icmp = t.arc(icmp_error);
    assert_eq!(icmp.len(), 6);
    assert!(
        icmp.iter().all(|o| o.data == x),
        "unchanged, at the L3 header"
    );
    t.assert_no_leaks();
}

/// The rewrite nodes keep the adjacency they read for one frame only: the peer
/// [`PEER_MAC`]'s packet `p` goes out by the fast path to its MAC; `relearn` (a CLI command)
/// gives the peer `02:00:00:00:00:09`, and the next frame's packet, on the same adjacency,
/// goes to the new MAC. (An adjacency kept in the node across frames would still send it to
/// the old one.)
pub fn rewrite_follows_a_neighbor_mac_change_between_frames(
    (mut t, sw): (NodeTest, u32),
    p: &[u8],
    lookup: &str,
    relearn: &str,
) {
    use super::ip4::{fast, in_front, marked_packet};
    let first = marked_packet(&mut t, p, 17, |h| h.rx_if = sw);
    t.inject_at(lookup, &[first]);
    let out = t.arc("interface-output");
    assert_eq!(out.len(), 1);
    assert_eq!(&out[0].data[0..6], &[2, 0, 0, 0, 0, 2], "the peer's MAC");
    assert_eq!(in_front(&t, first, 17), fast(17), "the fast path");
    let adj = out[0].hdr.ip.adj_index;
    t.clear();
    t.cli(relearn);
    let second = marked_packet(&mut t, p, 17, |h| {
        h.rx_if = sw;
        h.ip.adj_index = adj;
    });
    t.inject(&[second]);
    let out = t.arc("interface-output");
    assert_eq!(out.len(), 1);
    assert_eq!(
        &out[0].data[0..6],
        &[2, 0, 0, 0, 0, 9],
        "the peer's new MAC"
    );
    assert_eq!(&out[0].data[6..12], &[2, 0, 0, 0, 0, 1]);
    assert_eq!(out[0].hdr.tx_if, sw);
    assert_eq!(in_front(&t, second, 17), fast(17), "the fast path");
    t.assert_counters(&[]);
    t.assert_no_leaks();
}
