//! SRv6 in the real graph: pg in, pcap out, exact bytes. H.Encaps steered by a route,
//! End, End.DX4, End.DT4, End.DT6, every malformed SRH case counted by name, deletion;
//! T.Encaps.L2 (`sr steer l2`) and its End.DX2 round trip.
//! (`bin/sluice/tests/netns.rs` `srv6_with_linux_peer` checks the same against the Linux
//! kernel's seg6 and seg6local.)

mod common;
use common::*;
use sluice_vnet::interface::counter as ifc;

/// pg0: IPv6 underlay 2001:db8::1/64, peer ::2 (routes to fc00::/16 and 2001:db8:ff::/48
/// via it); pg1: a LAN 172.16.0.1/24 + 2001:db8:1::1/64, host .2 / ::2.
fn setup() -> (
    sluice_graph::Vlib,
    sluice_cli::CommandTree<sluice_graph::Vlib>,
) {
    let (mut vm, t) = build();
    clis(
        &mut vm,
        &t,
        &[
            "create packet-generator interface pg0",
            "create packet-generator interface pg1",
            "set interface state pg0 up",
            "set interface state pg1 up",
            "set interface ip address pg0 2001:db8::1/64",
            "set interface ip address pg1 172.16.0.1/24",
            "set interface ip address pg1 2001:db8:1::1/64",
            "ip neighbor pg0 2001:db8::2 02:00:00:00:00:02 static",
            "ip neighbor pg1 172.16.0.2 02:00:00:00:01:02 static",
            "ip neighbor pg1 2001:db8:1::2 02:00:00:00:01:02 static",
            "ip route add fc00::/16 via 2001:db8::2 pg0",
            "ip route add 2001:db8:ff::/48 via 2001:db8::2 pg0",
            "set sr encaps source addr 2001:db8::1",
        ],
    );
    (vm, t)
}

/// An SRH: next header `nh`, segments left `sl`, last entry `le`, `segs` as stored
/// (index 0 = the last segment).
fn srh(nh: u8, sl: u8, le: u8, segs: &[[u8; 16]]) -> Vec<u8> {
    let mut h = vec![nh, (2 * segs.len()) as u8, 4, sl, le, 0, 0, 0];
    for s in segs {
        h.extend_from_slice(s);
    }
    h
}

/// An IPv6 frame from the underlay peer to pg0: `dst`, next header `nh`, `payload`.
fn from_peer(pg0: [u8; 6], dst: &str, nh: u8, payload: &[u8], hl: u8) -> Vec<u8> {
    frame6(pg0, PEER_MAC, a6("2001:db8::2"), a6(dst), nh, payload, hl)
}

fn ttl_minus_one(p: &[u8]) -> Vec<u8> {
    let mut r = p.to_vec();
    r[8] -= 1;
    r[10..12].copy_from_slice(&[0, 0]);
    let c = sluice_wire::checksum::internet_checksum(&r[..20]);
    r[10..12].copy_from_slice(&c.to_be_bytes());
    r
}

#[test]
fn srv6_encap_steered_by_route() {
    let (mut vm, t) = setup();
    let out = cli(
        &mut vm,
        &t,
        "sr policy add bsid fc00::99 next 2001:db8:ff::1 next 2001:db8:ff::2 encap",
    );
    assert_eq!(out, "sr-policy0\n");
    cli(&mut vm, &t, "sr steer l3 198.51.100.0/24 via bsid fc00::99");
    cli(
        &mut vm,
        &t,
        "sr steer l3 2001:db8:51::/48 via bsid fc00::99",
    );
    let s = cli(&mut vm, &t, "show sr steering-policies");
    assert!(s.contains("198.51.100.0/24"), "{s}");
    let (pg0, pg1) = (mac_of(&vm, "pg0"), mac_of(&vm, "pg1"));
    let in4 = udp4([172, 16, 0, 2], [198, 51, 100, 7], 64);
    let in6 = udp6(a6("2001:db8:1::2"), a6("2001:db8:51::7"), 64);
    let mut f4 = eth(pg1, HOST_MAC, 0x0800);
    f4.extend_from_slice(&in4);
    let mut f6 = eth(pg1, HOST_MAC, 0x86dd);
    f6.extend_from_slice(&in6);
    let l6 = vectors(&vm, "ip6-lookup");
    let got = run(&mut vm, &t, "pg1", "pg0", &[f4, f6], 2);
    // The encapsulated packets are stacked on the first SID's adjacency: `ip6-lookup`
    // sees the inner IPv6 packet only, not the two outer ones.
    assert_eq!(vectors(&vm, "ip6-lookup") - l6, 1, "stacked");
    let segs = [a6("2001:db8:ff::2"), a6("2001:db8:ff::1")];
    let mut want = Vec::new();
    for (inner, nh) in [(ttl_minus_one(&in4), 4u8), (in6.clone(), 41)] {
        let mut inner = inner;
        if nh == 41 {
            inner[7] -= 1;
        }
        let mut p = srh(nh, 1, 1, &segs);
        p.extend_from_slice(&inner);
        // The outer hop limit: 64 (locally originated: ip6-rewrite does not decrement it).
        let (src, dst) = (a6("2001:db8::1"), a6("2001:db8:ff::1"));
        want.push(frame6(PEER_MAC, pg0, src, dst, 43, &p, 64));
    }
    assert_eq!(got, want);
    assert_eq!(if_counter(&vm, "sr-policy0", ifc::TX_PACKETS), 2);
    assert_eq!(counter(&vm, "sr-pl-rewrite-encaps", "encapsulated"), 2);
    // A packet to the BSID itself is encapsulated too (its /128 is routed via the policy).
    let mut fb = eth(pg1, HOST_MAC, 0x86dd);
    fb.extend(udp6(a6("2001:db8:1::2"), a6("fc00::99"), 64));
    assert_eq!(run(&mut vm, &t, "pg1", "pg0", &[fb], 1).len(), 1);
    // Bad input to the control plane.
    cli_errs(
        &mut vm,
        &t,
        &[
            ("sr policy add bsid fc00::99 next 2001:db8:ff::1", "exists"),
            ("sr policy add bsid fc00::98", "0 segments"),
            (
                "sr policy add bsid fc00::98 next ::1 next ::2 next ::3 next ::4 next ::5 next ::6",
                "6 segments",
            ),
            ("sr policy add bsid fc00::98 next ::1 bogus", "bogus"),
            ("sr steer l3 10.9.0.0/16 via bsid fc00::77", "no policy"),
            (
                "sr steer l3 198.51.100.0/24 via bsid fc00::99",
                "steered already",
            ),
            (
                "sr localsid address fc00::5 behavior end.bogus",
                "end.bogus",
            ),
            (
                "sr localsid address fc00::5 behavior end.dt4 7",
                "no table 7",
            ),
        ],
    );
    // Deleted: the steered prefixes lose their route, nothing leaks.
    cli(
        &mut vm,
        &t,
        "sr steer del l3 2001:db8:51::/48 via bsid fc00::99",
    );
    cli(&mut vm, &t, "sr policy del bsid fc00::99");
    let mut f4 = eth(pg1, HOST_MAC, 0x0800);
    f4.extend_from_slice(&in4);
    assert!(run(&mut vm, &t, "pg1", "pg0", &[f4], 1).is_empty());
    assert!(cli(&mut vm, &t, "show sr policies").lines().count() == 1);
    assert_eq!(in_use(&vm), 0);
}

#[test]
fn srv6_end_and_decap_behaviours() {
    let (mut vm, t) = setup();
    clis(
        &mut vm,
        &t,
        &[
            "ip table add 5",
            "ip6 table add 6",
            "set interface ip table pg1 0",
            "sr localsid address fc00::1 behavior end",
            "sr localsid address fc00::4 behavior end.dx4 pg1 172.16.0.2",
            "sr localsid address fc00::6 behavior end.dx6 pg1 2001:db8:1::2",
            "sr localsid address fc00::44 behavior end.dt4 0",
            "sr localsid address fc00::66 behavior end.dt6 0",
        ],
    );
    let pg0 = mac_of(&vm, "pg0");
    // End: SL 1 → 0, destination the next segment, one hop-limit decrement.
    let segs = [a6("fc00::2"), a6("fc00::1")];
    let mut p = srh(17, 1, 1, &segs);
    p.extend_from_slice(&[0x30, 0x39, 0, 9, 0, 12, 0, 0, 1, 2, 3, 4]);
    let got = run(
        &mut vm,
        &t,
        "pg0",
        "pg0",
        &[from_peer(pg0, "fc00::1", 43, &p, 64)],
        1,
    );
    let mut want_p = p.clone();
    want_p[3] = 0;
    let want = frame6(
        PEER_MAC,
        pg0,
        a6("2001:db8::2"),
        a6("fc00::2"),
        43,
        &want_p,
        63,
    );
    assert_eq!(got, vec![want]);
    assert_eq!(counter(&vm, "sr-localsid", "end"), 1);
    // Decap behaviours, with an SRH (SL 0) and without one.
    let in4 = udp4([198, 51, 100, 7], [172, 16, 0, 2], 64);
    let in6 = udp6(a6("2001:db8:51::7"), a6("2001:db8:1::2"), 64);
    let mut frames = Vec::new();
    for sid in ["fc00::4", "fc00::44"] {
        let mut p = srh(4, 0, 0, &[a6(sid)]);
        p.extend_from_slice(&in4);
        frames.push(from_peer(pg0, sid, 43, &p, 64));
        frames.push(from_peer(pg0, sid, 4, &in4, 64));
    }
    for sid in ["fc00::6", "fc00::66"] {
        let mut p = srh(41, 0, 0, &[a6(sid)]);
        p.extend_from_slice(&in6);
        frames.push(from_peer(pg0, sid, 43, &p, 64));
    }
    let mut got = run(&mut vm, &t, "pg0", "pg1", &frames, 6);
    // DX goes to the rewrite directly, DT through a lookup: the order between them varies.
    got.sort();
    let pg1 = mac_of(&vm, "pg1");
    let mut w4 = eth(HOST_MAC, pg1, 0x0800);
    w4.extend(ttl_minus_one(&in4));
    let mut w6 = eth(HOST_MAC, pg1, 0x86dd);
    let mut r6 = in6.clone();
    r6[7] = 63;
    w6.extend(r6);
    let mut want = vec![
        w4.clone(),
        w4.clone(),
        w4.clone(),
        w4.clone(),
        w6.clone(),
        w6,
    ];
    want.sort();
    assert_eq!(got, want);
    assert_eq!(counter(&vm, "sr-localsid", "decapsulated"), 6);
    let s = cli(&mut vm, &t, "show sr localsids");
    assert!(
        s.contains("fc00::4/128") && s.contains("end.dx4 pg1 172.16.0.2"),
        "{s}"
    );
    assert_eq!(if_counter(&vm, "sr-localsid1", ifc::TX_PACKETS), 2);
    // The SID's route hands its packets from ip6-lookup straight to sr-localsid (a Node
    // adjacency, VPP's localsid DPO): no ip6-rewrite on the way, so an outer hop limit of
    // 1 is decapsulated (as VPP does), not answered with time exceeded; its hit is counted
    // on the SID interface by sr-localsid itself (no interface-output on the way).
    let fib = cli(&mut vm, &t, "show ip6 fib fc00::4/128");
    assert!(fib.contains("to-node sr-localsid1"), "{fib}");
    let rewrites = vectors(&vm, "ip6-rewrite");
    let mut p = srh(4, 0, 0, &[a6("fc00::4")]);
    p.extend_from_slice(&in4);
    let got = run(
        &mut vm,
        &t,
        "pg0",
        "pg1",
        &[from_peer(pg0, "fc00::4", 43, &p, 1)],
        1,
    );
    assert_eq!(got, vec![w4]);
    assert_eq!(vectors(&vm, "ip6-rewrite"), rewrites);
    assert_eq!(if_counter(&vm, "sr-localsid1", ifc::TX_PACKETS), 3);
    assert_eq!(in_use(&vm), 0);
}

#[test]
fn srv6_malformed_srh_counted() {
    let (mut vm, t) = setup();
    cli(&mut vm, &t, "sr localsid address fc00::1 behavior end");
    cli(
        &mut vm,
        &t,
        "sr localsid address fc00::44 behavior end.dt4 0",
    );
    let pg0 = mac_of(&vm, "pg0");
    let in4 = udp4([198, 51, 100, 7], [172, 16, 0, 2], 64);
    let two = [a6("fc00::2"), a6("fc00::1")];
    let with = |mut h: Vec<u8>, tail: &[u8]| {
        h.extend_from_slice(tail);
        h
    };
    let mut bad_type = srh(17, 1, 1, &two);
    bad_type[2] = 0;
    let mut short_le = srh(17, 1, 1, &two);
    short_le[4] = 2; // 3 segments in a 2-segment header
    let mut trunc = srh(17, 1, 1, &two);
    trunc.truncate(30);
    // An inner IPv4 header claiming 16 bytes (IHL 4): End.DT4 hands it to ip4-lookup,
    // past ip4-input's checks, so the SID drops it.
    let mut ihl4 = in4.clone();
    ihl4[0] = 0x44;
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            from_peer(pg0, "fc00::1", 43, &with(srh(17, 2, 1, &two), &[]), 64),
            "sl_beyond_last",
        ),
        (
            from_peer(pg0, "fc00::1", 43, &with(short_le, &[]), 64),
            "srh_bad_last_entry",
        ),
        (from_peer(pg0, "fc00::1", 43, &trunc, 64), "truncated"),
        (
            from_peer(pg0, "fc00::1", 43, &bad_type, 64),
            "bad_routing_type",
        ),
        (
            from_peer(pg0, "fc00::1", 43, &srh(17, 0, 1, &two), 64),
            "sl_zero",
        ),
        (from_peer(pg0, "fc00::1", 17, &[0; 12], 64), "no_srh"),
        (
            from_peer(pg0, "fc00::44", 43, &with(srh(4, 1, 1, &two), &in4), 64),
            "sl_not_zero",
        ),
        (
            from_peer(
                pg0,
                "fc00::44",
                43,
                &with(srh(41, 0, 0, &two[..1]), &in4),
                64,
            ),
            "bad_inner",
        ),
        (from_peer(pg0, "fc00::44", 4, &ihl4, 64), "bad_inner"),
        (
            from_peer(
                pg0,
                "fc00::44",
                43,
                &with(srh(4, 0, 0, &two[..1]), &in4[..10]),
                64,
            ),
            "truncated",
        ),
        (
            from_peer(pg0, "fc00::44", 60, &[4, 0, 0, 0, 0, 0, 0, 0], 64),
            "ip6_extension",
        ),
    ];
    for (f, name) in cases {
        let before = counter(&vm, "sr-localsid", name);
        let got = run(&mut vm, &t, "pg0", "pg1", &[f], 0);
        assert!(got.is_empty());
        assert_eq!(counter(&vm, "sr-localsid", name), before + 1, "{name}");
    }
    // Deleting a SID removes its route: the next packet is not processed.
    cli(&mut vm, &t, "sr localsid del address fc00::1");
    let p = with(srh(17, 1, 1, &two), &[]);
    let before = counter(&vm, "sr-localsid", "end");
    run(
        &mut vm,
        &t,
        "pg0",
        "pg0",
        &[from_peer(pg0, "fc00::1", 43, &p, 64)],
        0,
    );
    assert_eq!(counter(&vm, "sr-localsid", "end"), before);
    assert_eq!(in_use(&vm), 0);
}

#[test]
fn srh_parser_never_panics() {
    use sluice_tunnels::srv6::parse_srh;
    let mut x = 0x1234_5678u32;
    for n in 0..2000usize {
        let len = n % 90;
        let d: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        if let Ok(s) = parse_srh(&d) {
            assert!(s.len <= d.len() && s.segments_left <= s.last_entry);
            assert!(8 + (s.last_entry as usize + 1) * 16 <= s.len);
        }
    }
}

/// An ARP reply from `ip`/`mac` to the router's `to_ip`/`to_mac`.
fn arp_reply(to_mac: [u8; 6], to_ip: [u8; 4], mac: [u8; 6], ip: [u8; 4]) -> Vec<u8> {
    let mut f = eth(to_mac, mac, 0x0806);
    f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 2]);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&ip);
    f.extend_from_slice(&to_mac);
    f.extend_from_slice(&to_ip);
    f
}

/// A solicited neighbour advertisement for `ip` (`mac`) to the router's `to_ip`/`to_mac`.
fn neighbor_advert(to_mac: [u8; 6], to_ip: [u8; 16], mac: [u8; 6], ip: [u8; 16]) -> Vec<u8> {
    let mut m = vec![136, 0, 0, 0, 0x60, 0, 0, 0];
    m.extend_from_slice(&ip);
    m.extend_from_slice(&[2, 1]);
    m.extend_from_slice(&mac);
    let mut pseudo = ip.to_vec();
    pseudo.extend_from_slice(&to_ip);
    pseudo.extend_from_slice(&(m.len() as u32).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 58]);
    pseudo.extend_from_slice(&m);
    let c = sluice_wire::checksum::internet_checksum(&pseudo);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    frame6(to_mac, mac, ip, to_ip, 58, &m, 255)
}

/// What End.DX4 / End.DX6 send out of `pg1` (MAC `pg1`) for inner packets `in4` / `in6`
/// to neighbours `macs` (v4, v6), sorted.
fn dx_out(macs: ([u8; 6], [u8; 6]), pg1: [u8; 6], in4: &[u8], in6: &[u8]) -> Vec<Vec<u8>> {
    let mut w4 = eth(macs.0, pg1, 0x0800);
    w4.extend(ttl_minus_one(in4));
    let mut w6 = eth(macs.1, pg1, 0x86dd);
    let mut r6 = in6.to_vec();
    r6[7] = 63;
    w6.extend(r6);
    let mut want = vec![w4, w6];
    want.sort();
    want
}

#[test]
fn srv6_dx_and_end_x_resolve_their_next_hop() {
    let (mut vm, t) = setup();
    // Next hops nobody told Sluice about: the SIDs hold Incomplete adjacencies.
    cli(
        &mut vm,
        &t,
        "sr localsid address fc00::4 behavior end.dx4 pg1 172.16.0.9",
    );
    cli(
        &mut vm,
        &t,
        "sr localsid address fc00::6 behavior end.dx6 pg1 2001:db8:1::9",
    );
    cli(
        &mut vm,
        &t,
        "sr localsid address fc00::7 behavior end.x pg1 2001:db8:1::9",
    );
    let (pg0, pg1) = (mac_of(&vm, "pg0"), mac_of(&vm, "pg1"));
    let nh_mac = [0x02, 0, 0, 0, 1, 0x09];
    let in4 = udp4([198, 51, 100, 7], [172, 16, 0, 9], 64);
    let in6 = udp6(a6("2001:db8:51::7"), a6("2001:db8:1::9"), 64);
    let dx4 = || {
        let mut p = srh(4, 0, 0, &[a6("fc00::4")]);
        p.extend_from_slice(&in4);
        from_peer(pg0, "fc00::4", 43, &p, 64)
    };
    let dx6 = || {
        let mut p = srh(41, 0, 0, &[a6("fc00::6")]);
        p.extend_from_slice(&in6);
        from_peer(pg0, "fc00::6", 43, &p, 64)
    };
    // The first packets ask for their next hops (ARP request, neighbour solicitation) and
    // are dropped, counted by the glean nodes.
    let got = run(&mut vm, &t, "pg0", "pg1", &[dx4()], 1);
    assert_eq!(got.len(), 1);
    let arp = &got[0];
    assert_eq!(&arp[..6], &[0xff; 6]);
    assert_eq!(&arp[12..14], &[0x08, 0x06]);
    assert_eq!(&arp[14 + 24..14 + 28], &[172, 16, 0, 9], "ARP target");
    assert_eq!(&arp[14 + 14..14 + 18], &[172, 16, 0, 1], "ARP sender");
    assert_eq!(counter(&vm, "ip4-glean", "requests_sent"), 1);
    let got = run(&mut vm, &t, "pg0", "pg1", &[dx6()], 1);
    assert_eq!(got.len(), 1);
    let ns = &got[0];
    assert_eq!(&ns[12..14], &[0x86, 0xdd]);
    assert_eq!((ns[14 + 6], ns[14 + 40]), (58, 135), "an NS");
    assert_eq!(&ns[14 + 48..14 + 64], &a6("2001:db8:1::9"), "NS target");
    assert_eq!(counter(&vm, "sr-localsid", "decapsulated"), 2);
    // The neighbour answers; the next packets are cross-connected to it.
    run(
        &mut vm,
        &t,
        "pg1",
        "pg1",
        &[
            arp_reply(pg1, [172, 16, 0, 1], nh_mac, [172, 16, 0, 9]),
            neighbor_advert(pg1, a6("2001:db8:1::1"), nh_mac, a6("2001:db8:1::9")),
        ],
        0,
    );
    sluice_vnet::ip_family::apply_learned::<sluice_vnet::ip4::Ip4Control>(&mut vm);
    sluice_vnet::ip_family::apply_learned::<sluice_vnet::ip6::Ip6Control>(&mut vm);
    let mut got = run(&mut vm, &t, "pg0", "pg1", &[dx4(), dx6()], 2);
    got.sort();
    assert_eq!(got, dx_out((nh_mac, nh_mac), pg1, &in4, &in6));
    // End.X: the next segment, to the same neighbour without a lookup (fc00::2 has no
    // route through pg1).
    let mut p = srh(17, 1, 1, &[a6("fc00::2"), a6("fc00::7")]);
    p.extend_from_slice(&[0x30, 0x39, 0, 9, 0, 12, 0, 0, 1, 2, 3, 4]);
    let got = run(
        &mut vm,
        &t,
        "pg0",
        "pg1",
        &[from_peer(pg0, "fc00::7", 43, &p, 64)],
        1,
    );
    let mut want_p = p.clone();
    want_p[3] = 0;
    let want = frame6(
        nh_mac,
        pg1,
        a6("2001:db8::2"),
        a6("fc00::2"),
        43,
        &want_p,
        63,
    );
    assert_eq!(got, vec![want]);
    assert!(cli(&mut vm, &t, "show sr localsids").contains("end.x pg1 2001:db8:1::9"));
    assert_eq!(counter(&vm, "sr-localsid", "dx_no_neighbor"), 0);
    assert_eq!(in_use(&vm), 0);
}

/// End.DX4 and End.DX6 SIDs whose next hops' adjacencies have the same number (the ip4
/// and ip6 adjacency tables each count from 0), in one frame, both orders: each packet
/// goes to its own family's rewrite. (sr-localsid remembers the last End.DX adjacency's
/// arc per frame; keyed by the number alone, the second packet took the first's arc.)
#[test]
fn srv6_dx4_and_dx6_with_the_same_adjacency_number_in_one_frame() {
    use std::net::{Ipv4Addr, Ipv6Addr};
    let (mut vm, t) = setup();
    let pg1 = mac_of(&vm, "pg1");
    let sw = {
        let ifs = vm.ext::<sluice_vnet::Interfaces>().unwrap();
        ifs.find("pg1").unwrap().0
    };
    // Incomplete neighbour adjacencies in the shorter table until both have the same next
    // number; the last ones made are the SIDs' next hops.
    let mut k4 = 3u8;
    let mut k6 = 3u16;
    let nh4 = |k: u8| Ipv4Addr::new(172, 16, 0, k);
    let nh6 = |k: u16| Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, k);
    let mut a4 = sluice_vnet::ip4::neighbor_adjacency(&mut vm, sw, nh4(k4)).unwrap();
    let mut a6n = sluice_vnet::ip6::neighbor_adjacency(&mut vm, sw, nh6(k6)).unwrap();
    while a4 != a6n {
        if a4 < a6n {
            k4 += 1;
            a4 = sluice_vnet::ip4::neighbor_adjacency(&mut vm, sw, nh4(k4)).unwrap();
        } else {
            k6 += 1;
            a6n = sluice_vnet::ip6::neighbor_adjacency(&mut vm, sw, nh6(k6)).unwrap();
        }
    }
    let (mac4, mac6) = ([0x02, 0, 0, 0, 4, 4], [0x02, 0, 0, 0, 6, 6]);
    let m = |m: [u8; 6]| {
        m.iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    clis(
        &mut vm,
        &t,
        &[
            &format!("ip neighbor pg1 {} {} static", nh4(k4), m(mac4)),
            &format!("ip neighbor pg1 {} {} static", nh6(k6), m(mac6)),
            &format!(
                "sr localsid address fc00::4 behavior end.dx4 pg1 {}",
                nh4(k4)
            ),
            &format!(
                "sr localsid address fc00::6 behavior end.dx6 pg1 {}",
                nh6(k6)
            ),
        ],
    );
    assert_eq!(
        sluice_vnet::ip4::neighbor_adjacency(&mut vm, sw, nh4(k4)).unwrap(),
        sluice_vnet::ip6::neighbor_adjacency(&mut vm, sw, nh6(k6)).unwrap(),
        "the two SIDs' adjacencies have one number"
    );
    let pg0 = mac_of(&vm, "pg0");
    let in4 = udp4([198, 51, 100, 7], nh4(k4).octets(), 64);
    let in6 = udp6(a6("2001:db8:51::7"), nh6(k6).octets(), 64);
    let mut p = srh(4, 0, 0, &[a6("fc00::4")]);
    p.extend_from_slice(&in4);
    let dx4 = from_peer(pg0, "fc00::4", 43, &p, 64);
    let mut p = srh(41, 0, 0, &[a6("fc00::6")]);
    p.extend_from_slice(&in6);
    let dx6 = from_peer(pg0, "fc00::6", 43, &p, 64);
    let want = dx_out((mac4, mac6), pg1, &in4, &in6);
    for frame in [[dx4.clone(), dx6.clone()], [dx6, dx4]] {
        let mut got = run(&mut vm, &t, "pg0", "pg1", &frame, 2);
        got.sort();
        assert_eq!(got, want);
    }
    assert_eq!(counter(&vm, "sr-localsid", "decapsulated"), 4);
    assert_eq!(counter(&vm, "sr-localsid", "dx_no_neighbor"), 0);
    assert_eq!(in_use(&vm), 0);
}

#[test]
fn srv6_end_dx2_sends_the_inner_frame_out() {
    let (mut vm, t) = setup();
    cli(
        &mut vm,
        &t,
        "sr localsid address fc00::2 behavior end.dx2 pg1",
    );
    assert!(cli(&mut vm, &t, "show sr localsids").contains("end.dx2 pg1"));
    let pg0 = mac_of(&vm, "pg0");
    let inner = inner_frame([2, 0, 0, 0xaa, 0, 1], [2, 0, 0, 0xbb, 0, 1], 26);
    let mut p = srh(143, 0, 0, &[a6("fc00::2")]);
    p.extend_from_slice(&inner);
    let frames = vec![
        from_peer(pg0, "fc00::2", 43, &p, 64),
        // Without an SRH too.
        from_peer(pg0, "fc00::2", 143, &inner, 64),
    ];
    let got = run(&mut vm, &t, "pg0", "pg1", &frames, 2);
    assert_eq!(got, vec![inner.clone(), inner.clone()]);
    assert_eq!(counter(&vm, "sr-localsid", "decapsulated"), 2);
    // Too short for an Ethernet header; an IPv4 packet inside.
    let before = (
        counter(&vm, "sr-localsid", "truncated"),
        counter(&vm, "sr-localsid", "bad_inner"),
    );
    let bad = vec![
        from_peer(pg0, "fc00::2", 143, &inner[..10], 64),
        from_peer(pg0, "fc00::2", 4, &udp4([1, 1, 1, 1], [2, 2, 2, 2], 64), 64),
    ];
    assert!(run(&mut vm, &t, "pg0", "pg1", &bad, 0).is_empty());
    assert_eq!(counter(&vm, "sr-localsid", "truncated"), before.0 + 1);
    assert_eq!(counter(&vm, "sr-localsid", "bad_inner"), before.1 + 1);
    assert_eq!(in_use(&vm), 0);
}

#[test]
fn srv6_steer_l2_encaps_the_whole_frame() {
    let (mut vm, t) = setup();
    cli(
        &mut vm,
        &t,
        "sr policy add bsid fc00::b1 next fc00::5 encap",
    );
    cli(
        &mut vm,
        &t,
        "sr policy add bsid fc00::b2 next fc00::5 next fc00::6 encap",
    );
    let pg0 = mac_of(&vm, "pg0");
    // Not addressed to pg1: L2 steering takes every frame.
    let inner = inner_frame([2, 0, 0, 0xaa, 0, 1], [2, 0, 0, 0xbb, 0, 1], 26);
    let src = a6("2001:db8::1");
    for (bsid, nh, payload) in [
        ("fc00::b1", 143, inner.clone()),
        ("fc00::b2", 43, {
            let mut s = srh(143, 1, 1, &[a6("fc00::6"), a6("fc00::5")]);
            s.extend_from_slice(&inner);
            s
        }),
    ] {
        cli(&mut vm, &t, &format!("sr steer l2 pg1 via bsid {bsid}"));
        let show = cli(&mut vm, &t, "show sr steering-policies");
        assert!(show.contains(&format!("L2 pg1\t{bsid}")), "{show}");
        let got = run(&mut vm, &t, "pg1", "pg0", std::slice::from_ref(&inner), 1);
        let want = frame6(PEER_MAC, pg0, src, a6("fc00::5"), nh, &payload, 64);
        assert_eq!(got, vec![want]);
        cli(&mut vm, &t, "sr steer del l2 pg1");
    }
    assert!(!cli(&mut vm, &t, "show sr steering-policies").contains("L2 pg1"));
    // Round trip: the segment is a local End.DX2 SID sending the frame out of pg1 again.
    cli(
        &mut vm,
        &t,
        "sr localsid address fc00::5 behavior end.dx2 pg1",
    );
    cli(&mut vm, &t, "sr steer l2 pg1 via bsid fc00::b1");
    let conf = cli(&mut vm, &t, "show running-config");
    assert!(conf.contains("sr steer l2 pg1 via bsid fc00::b1"), "{conf}");
    // The steering line makes the cross-connect: no line of its own.
    assert!(!conf.contains("xconnect pg1 sr-l2-steer"), "{conf}");
    // Replayed into a fresh runtime, the configuration comes back the same.
    let (mut vm2, t2) = build();
    for l in conf.lines() {
        cli(&mut vm2, &t2, l);
    }
    assert_eq!(cli(&mut vm2, &t2, "show running-config"), conf);
    assert_eq!(in_use(&vm2), 0);
    let got = run(&mut vm, &t, "pg1", "pg1", std::slice::from_ref(&inner), 1);
    assert_eq!(got, vec![inner.clone()]);
    // Deleting the policy removes its L2 rule and puts pg1 back in L3 mode.
    cli(&mut vm, &t, "sr policy del bsid fc00::b1");
    assert!(!cli(&mut vm, &t, "show sr steering-policies").contains("L2 pg1"));
    assert!(run(&mut vm, &t, "pg1", "pg0", std::slice::from_ref(&inner), 0).is_empty());
    cli_errs(
        &mut vm,
        &t,
        &[
            ("sr steer l2 pg1 via bsid fc00::99", "fc00::99"),
            ("sr steer l2 pg9 via bsid fc00::b2", "pg9"),
            ("sr steer l2 pg1 via bsid bogus", "`bogus'"),
            ("sr steer l2 pg1", "via bsid"),
            ("sr steer del l2 pg1", "pg1 is not L2-steered"),
            ("sr steer l7 pg1 via bsid fc00::b2", "`l7'"),
        ],
    );
    assert_eq!(in_use(&vm), 0);
}

#[test]
fn srv6_running_config_replays_after_instance_gaps() {
    let (mut vm, t) = setup();
    clis(
        &mut vm,
        &t,
        &[
            "create packet-generator interface pg2",
            "set interface state pg2 up",
            "sr policy add bsid fc00::b1 next fc00::5 encap",
            "sr policy add bsid fc00::b2 next fc00::5 next fc00::6 encap",
            "sr policy add bsid fc00::b3 next fc00::7 encap",
            // sr-policy0 goes: a gap below sr-policy1 and sr-policy2.
            "sr policy del bsid fc00::b1",
            "sr steer l3 2001:db8:51::/48 via bsid fc00::b3",
            "set interface mtu 1400 sr-policy2",
            // sr-l2-steer0 goes: a gap below sr-l2-steer1.
            "sr steer l2 pg1 via bsid fc00::b2",
            "sr steer l2 pg2 via bsid fc00::b2",
            "sr steer del l2 pg1",
            // sr-localsid0 goes: a gap below sr-localsid1.
            "sr localsid address fc00::a1 behavior end",
            "sr localsid address fc00::a2 behavior end.dt6 0",
            "sr localsid del address fc00::a1",
            "set interface mtu 9000 sr-localsid1",
        ],
    );
    let conf = cli(&mut vm, &t, "show running-config");
    assert!(conf.contains("sr-policy2"), "{conf}");
    assert!(conf.contains("mtu 9000 sr-localsid1"), "{conf}");
    assert!(
        conf.contains("sr localsid address fc00::a2 behavior end.dt6 0 instance 1"),
        "{conf}"
    );
    assert!(
        conf.contains("sr steer l2 pg2 via bsid fc00::b2 instance 1"),
        "{conf}"
    );
    // Replayed into a fresh runtime, the interfaces get their names back.
    let (mut vm2, t2) = build();
    for l in conf.lines() {
        cli(&mut vm2, &t2, l);
    }
    assert_eq!(cli(&mut vm2, &t2, "show running-config"), conf);
    // An instance in use is refused, naming the interface.
    cli_errs(
        &mut vm,
        &t,
        &[
            (
                "sr policy add bsid fc00::b4 next fc00::5 instance 1",
                "sr-policy1",
            ),
            (
                "sr steer l2 pg1 via bsid fc00::b2 instance 1",
                "sr-l2-steer1",
            ),
            (
                "sr localsid address fc00::a3 behavior end instance 1",
                "sr-localsid1",
            ),
            (
                "sr localsid address fc00::a3 behavior end instance x",
                "`x'",
            ),
        ],
    );
    assert_eq!(in_use(&vm2), 0);
    assert_eq!(in_use(&vm), 0);
}

#[test]
fn srv6_steer_l2_rule_of_a_deleted_interface_goes_with_its_policy() {
    let (mut vm, t) = setup();
    cli(
        &mut vm,
        &t,
        "sr policy add bsid fc00::b1 next fc00::5 next fc00::6 encap",
    );
    cli(
        &mut vm,
        &t,
        "sr policy add bsid fc00::b2 next fc00::5 encap",
    );
    let lo = cli(&mut vm, &t, "create loopback interface");
    let lo = lo.trim();
    cli(&mut vm, &t, &format!("sr steer l2 {lo} via bsid fc00::b1"));
    assert!(cli(&mut vm, &t, "show interface").contains("sr-l2-steer"));
    // A rule belongs to its own policy.
    let err = cli_err(
        &mut vm,
        &t,
        &format!("sr steer del l2 {lo} via bsid fc00::b2"),
    );
    assert!(err.contains("fc00::b1"), "{err}");
    cli(
        &mut vm,
        &t,
        &format!("delete loopback interface intfc {lo}"),
    );
    cli(&mut vm, &t, "sr policy del bsid fc00::b1");
    let show = cli(&mut vm, &t, "show sr steering-policies");
    assert!(!show.contains("L2 "), "{show}");
    let ifs = cli(&mut vm, &t, "show interface");
    assert!(!ifs.contains("sr-l2-steer"), "{ifs}");
    assert!(!cli(&mut vm, &t, "show running-config").contains("sr steer l2"));
    assert_eq!(in_use(&vm), 0);
}

#[test]
fn srv6_insert_policy_puts_an_srh_into_the_packet() {
    let (mut vm, t) = setup();
    cli(
        &mut vm,
        &t,
        "sr policy add bsid fc00::98 next 2001:db8:ff::1 next 2001:db8:ff::2 insert",
    );
    cli(
        &mut vm,
        &t,
        "sr steer l3 2001:db8:51::/48 via bsid fc00::98",
    );
    let (pg0, pg1) = (mac_of(&vm, "pg0"), mac_of(&vm, "pg1"));
    let in6 = udp6(a6("2001:db8:1::2"), a6("2001:db8:51::7"), 64);
    let mut f6 = eth(pg1, HOST_MAC, 0x86dd);
    f6.extend_from_slice(&in6);
    // Hop-by-hop options first: not inserted, counted.
    let mut hbh = f6.clone();
    hbh[14 + 6] = 0;
    cli(&mut vm, &t, "trace add pg-input 1");
    let got = run(&mut vm, &t, "pg1", "pg0", &[f6, hbh], 1);
    // The insert node's own trace record: SRH entries (segment 0 included), new destination.
    let tr = cli(&mut vm, &t, "show trace");
    assert!(
        tr.contains("srh insert sw_if_index ")
            && tr.contains(" segments 3 new dst 2001:db8:ff::1")
            && !tr.contains("(to bsid)"),
        "{tr}"
    );
    // The SRH behind the packet's own header: the segments, then the packet's destination
    // as segment 0; the destination is the first segment; the hop limit decremented once.
    let segs = [
        a6("2001:db8:51::7"),
        a6("2001:db8:ff::2"),
        a6("2001:db8:ff::1"),
    ];
    let mut p = srh(17, 2, 2, &segs);
    p.extend_from_slice(&in6[40..]);
    let (src, dst) = (a6("2001:db8:1::2"), a6("2001:db8:ff::1"));
    let want = frame6(PEER_MAC, pg0, src, dst, 43, &p, 63);
    assert_eq!(got, vec![want]);
    assert_eq!(counter(&vm, "sr-pl-rewrite-insert", "inserted"), 1);
    assert_eq!(counter(&vm, "sr-pl-rewrite-insert", "hop_by_hop"), 1);
    assert_eq!(if_counter(&vm, "sr-policy0", ifc::TX_PACKETS), 2);
    let show = cli(&mut vm, &t, "show sr policies");
    assert!(show.contains("Behavior: SRH insertion"), "{show}");
    // The encaps source is set but an insert policy does not use it.
    assert!(show.contains("\tSource: ::\n"), "{show}");
    let conf = cli(&mut vm, &t, "show running-config");
    assert!(
        conf.contains("sr policy add bsid fc00::98 next 2001:db8:ff::1 next 2001:db8:ff::2 insert"),
        "{conf}"
    );
    assert!(!conf.contains("encaps source"), "{conf}");
    // An insert policy takes IPv6 only, and no L2 steering.
    cli_errs(
        &mut vm,
        &t,
        &[
        ("sr steer l3 198.51.100.0/24 via bsid fc00::98", "IPv6 only"),
        ("sr steer l2 pg1 via bsid fc00::98", "insert policy"),
        (
            "sr policy add bsid fc00::97 next 2001:db8:ff::1 next 2001:db8:ff::2 next 2001:db8:ff::3 next 2001:db8:ff::4 next 2001:db8:ff::5 next 2001:db8:ff::6 insert",
            "6 segments",
        ),
    ]);
    // Deleted with its steering route (the prefix has no other route: dropped).
    cli(&mut vm, &t, "sr policy del bsid fc00::98");
    assert!(!cli(&mut vm, &t, "show sr steering-policies").contains("2001:db8:51::/48"));
    let mut f6 = eth(pg1, HOST_MAC, 0x86dd);
    f6.extend_from_slice(&in6);
    assert!(run(&mut vm, &t, "pg1", "pg0", &[f6], 0).is_empty());
    assert_eq!(counter(&vm, "sr-pl-rewrite-insert", "inserted"), 1);
    assert_eq!(in_use(&vm), 0);
}

#[test]
fn srv6_insert_policy_needs_no_encaps_source() {
    // `routed()`: no `set sr encaps source`.
    let (mut vm, t) = routed();
    cli(
        &mut vm,
        &t,
        "ip route add 2001:db8:ff::/48 via 2001:db8::2 pg0",
    );
    cli_errs(
        &mut vm,
        &t,
        &[(
            "sr policy add bsid fc00::99 next 2001:db8:ff::1 encap",
            "no encaps source",
        )],
    );
    cli(
        &mut vm,
        &t,
        "sr policy add bsid fc00::98 next 2001:db8:ff::1 insert",
    );
    cli(
        &mut vm,
        &t,
        "sr steer l3 2001:db8:51::/48 via bsid fc00::98",
    );
    let (pg0, pg1) = (mac_of(&vm, "pg0"), mac_of(&vm, "pg1"));
    let in6 = udp6(a6("2001:db8:1::2"), a6("2001:db8:51::7"), 64);
    let mut f6 = eth(pg1, HOST_MAC, 0x86dd);
    f6.extend_from_slice(&in6);
    let got = run(&mut vm, &t, "pg1", "pg0", &[f6], 1);
    let mut p = srh(17, 1, 1, &[a6("2001:db8:51::7"), a6("2001:db8:ff::1")]);
    p.extend_from_slice(&in6[40..]);
    let (src, dst) = (a6("2001:db8:1::2"), a6("2001:db8:ff::1"));
    assert_eq!(got, vec![frame6(PEER_MAC, pg0, src, dst, 43, &p, 63)]);
    let conf = cli(&mut vm, &t, "show running-config");
    assert!(!conf.contains("encaps source"), "{conf}");
    cli(&mut vm, &t, "sr policy del bsid fc00::98");
    assert_eq!(in_use(&vm), 0);
}

#[test]
fn srv6_insert_policy_bsid_traffic_gets_the_segments_only() {
    let (mut vm, t) = setup();
    cli(
        &mut vm,
        &t,
        "sr policy add bsid fc00::98 next 2001:db8:ff::1 next 2001:db8:ff::2 insert",
    );
    let (pg0, pg1) = (mac_of(&vm, "pg0"), mac_of(&vm, "pg1"));
    // A packet to the BSID (routed into the policy by its /128): the BSID is consumed, the
    // SRH holds the segments only (VPP's rewrite_bsid) — not the BSID as segment 0, which
    // would bring it back here at the last segment for a second SRH.
    let in6 = udp6(a6("2001:db8:1::2"), a6("fc00::98"), 64);
    let mut f6 = eth(pg1, HOST_MAC, 0x86dd);
    f6.extend_from_slice(&in6);
    cli(&mut vm, &t, "trace add pg-input 1");
    let got = run(&mut vm, &t, "pg1", "pg0", &[f6], 1);
    let tr = cli(&mut vm, &t, "show trace");
    assert!(
        tr.contains(" segments 2 (to bsid) new dst 2001:db8:ff::1"),
        "{tr}"
    );
    let mut p = srh(17, 1, 1, &[a6("2001:db8:ff::2"), a6("2001:db8:ff::1")]);
    p.extend_from_slice(&in6[40..]);
    let (src, dst) = (a6("2001:db8:1::2"), a6("2001:db8:ff::1"));
    let want = frame6(PEER_MAC, pg0, src, dst, 43, &p, 63);
    assert_eq!(got, vec![want]);
    assert_eq!(counter(&vm, "sr-pl-rewrite-insert", "inserted"), 1);
    assert_eq!(counter(&vm, "sr-pl-rewrite-insert", "too_big"), 0);
    cli(&mut vm, &t, "sr policy del bsid fc00::98");
    assert_eq!(in_use(&vm), 0);
}

/// An IPv4 route via a local SID's interface: ip4-rewrite's placeholder header and
/// interface-output bring an IPv4 packet to sr-localsid, which drops it as `not_ip6`
/// instead of reading it as an IPv6 header.
#[test]
fn srv6_localsid_drops_ipv4_routed_via_its_interface() {
    let (mut vm, t) = setup();
    clis(
        &mut vm,
        &t,
        &[
            "sr localsid address fc00::4 behavior end.dx4 pg1 172.16.0.2",
            "ip route add 10.99.0.0/16 via sr-localsid0",
        ],
    );
    let pg1 = mac_of(&vm, "pg1");
    let mut f = eth(pg1, HOST_MAC, 0x0800);
    f.extend(udp4([172, 16, 0, 2], [10, 99, 0, 1], 64));
    let got = run(&mut vm, &t, "pg1", "pg1", &[f], 0);
    assert!(got.is_empty());
    assert_eq!(counter(&vm, "sr-localsid", "not_ip6"), 1);
    assert_eq!(counter(&vm, "sr-localsid", "decapsulated"), 0);
    assert_eq!(in_use(&vm), 0);
}

/// A local SID's interface takes no L2 mode: sr-localsid tells a packet `ip6-lookup`
/// hands it from one `interface-output` brings by its first byte (version 6, or the
/// placeholder header's zero MAC), and a bridged or cross-connected frame whose destination
/// MAC starts 0x6_ would be read as a packet to whatever SID its stale adjacency names.
#[test]
fn srv6_localsid_interface_refuses_l2_mode() {
    let (mut vm, t) = setup();
    cli(
        &mut vm,
        &t,
        "sr localsid address fc00::4 behavior end.dx4 pg1 172.16.0.2",
    );
    cli_errs(
        &mut vm,
        &t,
        &[
            ("set interface l2 bridge sr-localsid0 1", "sr-localsid0"),
            ("set interface l2 xconnect pg0 sr-localsid0", "sr-localsid0"),
            ("set interface l2 xconnect sr-localsid0 pg0", "sr-localsid0"),
            ("test l2patch rx pg0 tx sr-localsid0", "sr-localsid0"),
        ],
    );
    let find =
        |vm: &sluice_graph::Vlib, n: &str| vm.ext::<sluice_vnet::Interfaces>().unwrap().find(n);
    let (sid, pg0) = (
        find(&vm, "sr-localsid0").unwrap(),
        find(&vm, "pg0").unwrap(),
    );
    for i in [sid, pg0] {
        assert_eq!(sluice_vnet::interface::xconnect_peer(&mut vm, i), None);
    }
    assert!(!cli(&mut vm, &t, "show bridge-domain").contains("sr-localsid0"));
    assert!(!cli(&mut vm, &t, "show l2patch").contains("sr-localsid0"));
    // Other interfaces still take it.
    cli(&mut vm, &t, "set interface l2 xconnect pg0 pg1");
    assert_eq!(
        sluice_vnet::interface::xconnect_peer(&mut vm, pg0),
        find(&vm, "pg1")
    );
}
