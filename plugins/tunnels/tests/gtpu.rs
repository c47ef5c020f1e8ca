//! GTP-U in the real graph: pg in, pcap out, exact bytes (built here field by field;
//! python/tests/test_gtpu.py checks the same with scapy's GTP layers). The kernel here
//! has no GTP module, so there is no Linux peer.

mod common;
use common::*;
use sluice_vnet::interface::counter as ifc;

/// The UDP checksum of an IPv6 packet `p` (RFC 8200 §8.1 pseudo-header), computed here.
fn udp6_csum(p: &[u8]) -> u16 {
    let mut ph = p[8..40].to_vec();
    ph.extend_from_slice(&((p.len() - 40) as u32).to_be_bytes());
    ph.extend_from_slice(&[0, 0, 0, 17]);
    let mut u = p[40..].to_vec();
    u[6..8].fill(0);
    ph.extend(u);
    match sluice_wire::checksum::internet_checksum(&ph) {
        0 => 0xffff,
        c => c,
    }
}

/// An underlay frame between pg0 and the peer carrying UDP `sport` → `dport` with `payload`.
fn under(v6: bool, to_peer: bool, ports: (u16, u16), payload: &[u8], pg0: [u8; 6]) -> Vec<u8> {
    let (smac, dmac) = if to_peer {
        (pg0, PEER_MAC)
    } else {
        (PEER_MAC, pg0)
    };
    let mut udp = ports.0.to_be_bytes().to_vec();
    udp.extend_from_slice(&ports.1.to_be_bytes());
    udp.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(payload);
    if v6 {
        let (s, d) = (a6("2001:db8::1"), a6("2001:db8::2"));
        let (s, d) = if to_peer { (s, d) } else { (d, s) };
        let mut p = ip6(s, d, 17, udp.len(), 64);
        p.extend(udp);
        let c = udp6_csum(&p);
        p[46..48].copy_from_slice(&c.to_be_bytes());
        let mut f = eth(dmac, smac, 0x86dd);
        f.extend(p);
        f
    } else {
        let (s, d) = ([10, 0, 0, 1], [10, 0, 0, 2]);
        let (s, d) = if to_peer { (s, d) } else { (d, s) };
        let mut f = eth(dmac, smac, 0x0800);
        f.extend(ip4(s, d, 17, udp.len(), 64));
        f.extend(udp);
        f
    }
}

/// A GTP-U header: flags, type, TEID, optional part, then `payload`.
fn gtp(flags: u8, mtype: u8, teid: u32, opt: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut g = vec![flags, mtype];
    g.extend_from_slice(&((opt.len() + payload.len()) as u16).to_be_bytes());
    g.extend_from_slice(&teid.to_be_bytes());
    g.extend_from_slice(opt);
    g.extend_from_slice(payload);
    g
}

fn ttl_minus_one(p: &[u8]) -> Vec<u8> {
    let mut r = p.to_vec();
    if r[0] >> 4 == 6 {
        r[7] -= 1;
        return r;
    }
    r[8] -= 1;
    r[10..12].copy_from_slice(&[0, 0]);
    let c = sluice_wire::checksum::internet_checksum(&r[..20]);
    r[10..12].copy_from_slice(&c.to_be_bytes());
    r
}

const G: (u16, u16) = (2152, 2152);

#[test]
fn gtpu_encap_decap_echo_both_underlays() {
    for v6 in [false, true] {
        let (mut vm, t) = routed();
        let (l, r) = underlay(v6);
        let out = cli(
            &mut vm,
            &t,
            &format!("create gtpu tunnel src {l} dst {r} teid 100 tteid 200 decap-next ip4"),
        );
        assert_eq!(out, "gtpu_tunnel0\n");
        clis(
            &mut vm,
            &t,
            &[
                "set interface state gtpu_tunnel0 up",
                "set interface ip address gtpu_tunnel0 10.99.0.1/30",
                "ip route add 198.51.100.0/24 via gtpu_tunnel0",
                "ip route add 2001:db8:51::/48 via gtpu_tunnel0",
            ],
        );
        let (pg0, pg1) = (mac_of(&vm, "pg0"), mac_of(&vm, "pg1"));
        // Encap: IPv4 and IPv6 user packets routed into the tunnel carry the tteid.
        let in4 = udp4([172, 16, 0, 2], [198, 51, 100, 7], 64);
        let in6 = udp6(a6("2001:db8:1::2"), a6("2001:db8:51::7"), 64);
        let mut f4 = eth(pg1, HOST_MAC, 0x0800);
        f4.extend_from_slice(&in4);
        let mut f6 = eth(pg1, HOST_MAC, 0x86dd);
        f6.extend_from_slice(&in6);
        let got = run(&mut vm, &t, "pg1", "pg0", &[f4, f6], 2);
        let want: Vec<Vec<u8>> = [&in4, &in6]
            .iter()
            .map(|p| {
                under(
                    v6,
                    true,
                    G,
                    &gtp(0x30, 255, 200, &[], &ttl_minus_one(p)),
                    pg0,
                )
            })
            .collect();
        assert_eq!(got, want, "v6 underlay: {v6}");
        // Decap: plain, with a sequence number, with a PDU session container extension.
        let b4 = udp4([198, 51, 100, 7], [172, 16, 0, 2], 64);
        let b6 = udp6(a6("2001:db8:51::7"), a6("2001:db8:1::2"), 64);
        let frames = [
            under(v6, false, G, &gtp(0x30, 255, 100, &[], &b4), pg0),
            under(
                v6,
                false,
                (40000, 2152),
                &gtp(0x32, 255, 100, &[0, 7, 0, 0], &b6),
                pg0,
            ),
            under(
                v6,
                false,
                G,
                &gtp(0x34, 255, 100, &[0, 0, 0, 0x85, 1, 0x10, 9, 0], &b4),
                pg0,
            ),
        ];
        let got = run(&mut vm, &t, "pg0", "pg1", &frames, 3);
        let w = |p: &[u8], et: u16| {
            let mut f = eth(HOST_MAC, pg1, et);
            f.extend(ttl_minus_one(p));
            f
        };
        let mut got = got;
        got.sort();
        let mut want = vec![w(&b4, 0x0800), w(&b6, 0x86dd), w(&b4, 0x0800)];
        want.sort();
        assert_eq!(got, want, "v6 underlay: {v6}");
        let n = if v6 { "gtpu6-input" } else { "gtpu4-input" };
        assert_eq!(counter(&vm, n, "decapsulated"), 3);
        assert_eq!(if_counter(&vm, "gtpu_tunnel0", ifc::RX_PACKETS), 3);
        assert_eq!(if_counter(&vm, "gtpu_tunnel0", ifc::TX_PACKETS), 2);
        // Echo Request → Echo Response: sequence number kept, Recovery IE, back to the
        // request's source port.
        let req = gtp(0x32, 1, 0, &[0x12, 0x34, 0, 0], &[]);
        let got = run(
            &mut vm,
            &t,
            "pg0",
            "pg0",
            &[under(v6, false, (40001, 2152), &req, pg0)],
            1,
        );
        let resp = gtp(0x32, 2, 0, &[0x12, 0x34, 0, 0], &[14, 0]);
        assert_eq!(got, vec![under(v6, true, (2152, 40001), &resp, pg0)]);
        assert_eq!(counter(&vm, n, "echo_replies"), 1);
        // Unknown TEID: counted, and an Error Indication (TEID Data I, peer address) goes
        // back to the sender.
        let got = run(
            &mut vm,
            &t,
            "pg0",
            "pg0",
            &[under(v6, false, G, &gtp(0x30, 255, 7, &[], &b4), pg0)],
            1,
        );
        let me: Vec<u8> = if v6 {
            a6(l).to_vec()
        } else {
            vec![10, 0, 0, 1]
        };
        let mut ies = vec![16, 0, 0, 0, 7, 133, 0, me.len() as u8];
        ies.extend(me);
        let ind = gtp(0x32, 26, 0, &[0, 0, 0, 0], &ies);
        assert_eq!(got, vec![under(v6, true, G, &ind, pg0)]);
        assert_eq!(counter(&vm, n, "no_such_tunnel"), 1);
        assert_eq!(counter(&vm, n, "error_indications_sent"), 1);
        let s = cli(&mut vm, &t, "show gtpu tunnel");
        assert!(s.contains("teid 100 tteid 200"), "{s}");
        let rc = cli(&mut vm, &t, "show running-config");
        assert!(
            rc.contains(&format!(
                "create gtpu tunnel src {l} dst {r} teid 100 tteid 200"
            )),
            "{rc}"
        );
        cli(
            &mut vm,
            &t,
            &format!("create gtpu tunnel src {l} dst {r} teid 100 del"),
        );
        assert!(cli(&mut vm, &t, "show gtpu tunnel").contains("No gtpu tunnels"));
        assert_eq!(in_use(&vm), 0);
    }
}

#[test]
fn gtpu_malformed_counted() {
    let (mut vm, t) = routed();
    cli(
        &mut vm,
        &t,
        "create gtpu tunnel src 10.0.0.1 dst 10.0.0.2 teid 100",
    );
    cli(&mut vm, &t, "set interface state gtpu_tunnel0 up");
    let pg0 = mac_of(&vm, "pg0");
    let b4 = udp4([198, 51, 100, 7], [172, 16, 0, 2], 64);
    let ok = gtp(0x30, 255, 100, &[], &b4);
    let mut bad_len = ok.clone();
    bad_len[3] += 1;
    let mut bad_udp = under(false, false, G, &ok, pg0);
    bad_udp[14 + 20 + 5] += 1;
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            under(false, false, G, &gtp(0x50, 255, 100, &[], &b4), pg0),
            "bad_version",
        ),
        (
            under(false, false, G, &gtp(0x20, 255, 100, &[], &b4), pg0),
            "bad_version",
        ),
        (under(false, false, G, &bad_len, pg0), "bad_length"),
        (bad_udp, "bad_udp_length"),
        (under(false, false, G, &ok[..6], pg0), "truncated"),
        (
            under(
                false,
                false,
                G,
                &gtp(0x34, 255, 100, &[0, 0, 0, 0x85, 0, 0, 0, 0], &b4),
                pg0,
            ),
            "bad_extension",
        ),
        (
            under(
                false,
                false,
                G,
                &gtp(0x30, 255, 100, &[], &[0x50, 0, 0, 0]),
                pg0,
            ),
            "bad_inner",
        ),
        (
            under(false, false, G, &gtp(0x30, 3, 100, &[], &[]), pg0),
            "unsupported_type",
        ),
        (
            under(false, false, G, &gtp(0x30, 254, 100, &[], &[]), pg0),
            "signalling",
        ),
    ];
    for (f, name) in cases {
        let before = counter(&vm, "gtpu4-input", name);
        // Captured (count 1), so the emptiness check can fail.
        let got = run(&mut vm, &t, "pg0", "pg1", &[f], 1);
        assert!(got.is_empty(), "{name}");
        assert_eq!(counter(&vm, "gtpu4-input", name), before + 1, "{name}");
    }
    cli_errs(
        &mut vm,
        &t,
        &[
            (
                "create gtpu tunnel src 10.0.0.1 dst 10.0.0.2",
                "missing teid",
            ),
            (
                "create gtpu tunnel src 10.0.0.1 dst 10.0.0.2 teid 100",
                "same endpoints",
            ),
            (
                "create gtpu tunnel src 10.0.0.1 dst 10.0.0.2 teid 5 decap-next mpls",
                "`mpls'",
            ),
            (
                "create gtpu tunnel src 10.0.0.1 dst 2001:db8::2 teid 5",
                "families",
            ),
        ],
    );
    assert_eq!(in_use(&vm), 0);
}

#[test]
fn gtp_parser_never_panics() {
    use sluice_tunnels::gtpu::parse;
    let mut x = 0x9e37_79b9u32;
    for n in 0..3000usize {
        let len = n % 80;
        let mut d: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        if len >= 8 {
            d[0] = 0x30 | (d[0] & 0x07);
            d[2..4].copy_from_slice(&((len - 8) as u16).to_be_bytes());
        }
        if let Ok(h) = parse(&d) {
            assert!(h.hdr_len <= d.len());
        }
    }
}

/// `decap-next l2`: Ethernet frames inside G-PDUs, the tunnel interface bridged with pg1.
#[test]
fn gtpu_l2_bridged() {
    let (mut vm, t) = routed();
    let out = cli(
        &mut vm,
        &t,
        "create gtpu tunnel src 10.0.0.1 dst 10.0.0.2 teid 100 tteid 200 decap-next l2",
    );
    assert_eq!(out, "gtpu_tunnel0\n");
    clis(
        &mut vm,
        &t,
        &[
            "set interface state gtpu_tunnel0 up",
            "create bridge-domain 1",
            "set interface l2 bridge pg1 1",
            "set interface l2 bridge gtpu_tunnel0 1",
        ],
    );
    let s = cli(&mut vm, &t, "show gtpu tunnel");
    assert!(s.contains("decap-next l2"), "{s}");
    let rc = cli(&mut vm, &t, "show running-config");
    assert!(
        rc.contains("create gtpu tunnel src 10.0.0.1 dst 10.0.0.2 teid 100 tteid 200 instance 0 decap-next l2"),
        "{rc}"
    );
    let pg0 = mac_of(&vm, "pg0");
    let (h1, h2) = ([2, 0, 0, 0xaa, 0, 1], [2, 0, 0, 0xbb, 0, 1]);
    // Decap: the inner frame as it was, flooded to pg1.
    let inner: Vec<Vec<u8>> = (0..3).map(|i| inner_frame(h1, h2, 20 + i)).collect();
    let frames: Vec<Vec<u8>> = inner
        .iter()
        .map(|f| under(false, false, G, &gtp(0x30, 255, 100, &[], f), pg0))
        .collect();
    assert_eq!(run(&mut vm, &t, "pg0", "pg1", &frames, 3), inner);
    assert_eq!(counter(&vm, "gtpu4-input", "decapsulated"), 3);
    assert_eq!(if_counter(&vm, "gtpu_tunnel0", ifc::RX_PACKETS), 3);
    // Encap: a frame to h2 (learned behind the tunnel) goes into it with the tteid.
    let back = inner_frame(h2, h1, 30);
    let got = run(&mut vm, &t, "pg1", "pg0", std::slice::from_ref(&back), 1);
    assert_eq!(
        got,
        vec![under(false, true, G, &gtp(0x30, 255, 200, &[], &back), pg0)]
    );
    // A G-PDU too short for an Ethernet header.
    let short = under(false, false, G, &gtp(0x30, 255, 100, &[], &[0; 10]), pg0);
    let before = counter(&vm, "gtpu4-input", "truncated");
    assert!(run(&mut vm, &t, "pg0", "pg1", &[short], 1).is_empty());
    assert_eq!(counter(&vm, "gtpu4-input", "truncated"), before + 1);
    cli(
        &mut vm,
        &t,
        "create gtpu tunnel src 10.0.0.1 dst 10.0.0.2 teid 100 del",
    );
    cli(&mut vm, &t, "set interface l3 pg1");
    assert_eq!(in_use(&vm), 0);
}

/// GTP-U never answers a packet sent to a multicast group (the reply's source would be
/// the group): an Echo Request or a G-PDU for an unknown TEID to a group a VXLAN tunnel
/// joined (the group then has a `via local` route), or to ff02::1: `ip4-local` and
/// `ip6-local` send UDP to a group only to a port that serves groups (VXLAN's), so
/// GTP-U's is punted (and `gtpu*-input` would drop it unanswered besides).
#[test]
fn gtpu_never_answers_a_group() {
    for v6 in [false, true] {
        let (mut vm, t) = routed();
        let (l, r, g) = if v6 {
            ("2001:db8::1", "2001:db8::2", "ff0e::101")
        } else {
            ("10.0.0.1", "10.0.0.2", "239.1.1.1")
        };
        cli(
            &mut vm,
            &t,
            &format!("create gtpu tunnel src {l} dst {r} teid 100"),
        );
        cli(
            &mut vm,
            &t,
            &format!("create vxlan tunnel src {l} group {g} pg0 vni 13"),
        );
        // The group's join report goes out of pg0 first.
        for _ in 0..5 {
            vm.run_main_once();
        }
        let echo = gtp(0x32, 1, 0, &[0x12, 0x34, 0, 0], &[]);
        let unknown = gtp(
            0x30,
            255,
            7,
            &[],
            &udp4([198, 51, 100, 7], [172, 16, 0, 2], 64),
        );
        let to = |dst: &str, payload: &[u8]| {
            let mut udp = G.0.to_be_bytes().to_vec();
            udp.extend_from_slice(&G.1.to_be_bytes());
            udp.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
            udp.extend_from_slice(&[0, 0]);
            udp.extend_from_slice(payload);
            if v6 {
                let d = a6(dst);
                let mut p = ip6(a6(r), d, 17, udp.len(), 64);
                p.extend(udp);
                let c = udp6_csum(&p);
                p[46..48].copy_from_slice(&c.to_be_bytes());
                let mut f = eth([0x33, 0x33, d[12], d[13], d[14], d[15]], PEER_MAC, 0x86dd);
                f.extend(p);
                f
            } else {
                let d: std::net::Ipv4Addr = dst.parse().unwrap();
                let o = d.octets();
                let mut f = eth([1, 0, 0x5e, o[1] & 0x7f, o[2], o[3]], PEER_MAC, 0x0800);
                f.extend(ip4([10, 0, 0, 2], o, 17, udp.len(), 64));
                f.extend(udp);
                f
            }
        };
        let mut frames = vec![to(g, &echo), to(g, &unknown)];
        if v6 {
            frames.push(to("ff02::1", &echo));
        }
        let tx = if_counter(&vm, "pg0", ifc::TX_PACKETS);
        run(&mut vm, &t, "pg0", "pg0", &frames, 0);
        assert_eq!(
            if_counter(&vm, "pg0", ifc::TX_PACKETS),
            tx,
            "v6 {v6}: no reply"
        );
        let n = if v6 { "gtpu6-input" } else { "gtpu4-input" };
        assert_eq!(counter(&vm, n, "echo_replies"), 0, "v6 {v6}");
        assert_eq!(counter(&vm, n, "error_indications_sent"), 0, "v6 {v6}");
        let (local, punted) = if v6 {
            ("ip6-local", 3)
        } else {
            ("ip4-local", 2)
        };
        assert_eq!(counter(&vm, local, "punted"), punted, "v6 {v6}");
        assert_eq!(counter(&vm, n, "echo_to_group"), 0, "never reached");
        assert_eq!(in_use(&vm), 0);
    }
}

/// An up L3 tunnel's G-PDUs go from `gtpu4-input` straight to `ip4-input`/`ip6-input`
/// in the tunnel interface's tables (only the outer frames cross `ethernet-input`); a
/// down tunnel's still go through `ethernet-input`, which drops them, and so do a
/// cross-connected tunnel's and one's with an input redirect (each change reaches the
/// entry's routed bit; back to L3 or without the redirect, they go direct again).
#[test]
fn gtpu_l3_decap_skips_ethernet_input() {
    let (mut vm, t) = routed();
    clis(
        &mut vm,
        &t,
        &[
            "create gtpu tunnel src 10.0.0.1 dst 10.0.0.2 teid 100",
            "set interface state gtpu_tunnel0 up",
            "ip table add 9",
            "ip6 table add 9",
            "set interface ip table gtpu_tunnel0 9",
            "set interface ip6 table gtpu_tunnel0 9",
            "ip route add table 9 172.16.0.0/24 via 172.16.0.2 pg1",
            "ip route add table 9 2001:db8:1::/64 via 2001:db8:1::2 pg1",
        ],
    );
    let (pg0, pg1) = (mac_of(&vm, "pg0"), mac_of(&vm, "pg1"));
    let b4 = udp4([198, 51, 100, 7], [172, 16, 0, 2], 64);
    let b6 = udp6(a6("2001:db8:51::7"), a6("2001:db8:1::2"), 64);
    let frames = [
        under(false, false, G, &gtp(0x30, 255, 100, &[], &b4), pg0),
        under(false, false, G, &gtp(0x30, 255, 100, &[], &b6), pg0),
        under(false, false, G, &gtp(0x30, 255, 100, &[], &b4), pg0),
    ];
    let eth0 = vectors(&vm, "ethernet-input");
    let mut got = run(&mut vm, &t, "pg0", "pg1", &frames, 3);
    got.sort();
    let w = |p: &[u8], et: u16| {
        let mut f = eth([2, 0, 0, 0, 1, 2], pg1, et);
        f.extend(ttl_minus_one(p));
        f
    };
    let mut want = vec![w(&b4, 0x0800), w(&b6, 0x86dd), w(&b4, 0x0800)];
    want.sort();
    assert_eq!(got, want, "routed in the tunnel's table 9");
    assert_eq!(
        vectors(&vm, "ethernet-input") - eth0,
        3,
        "the outer frames only"
    );
    assert_eq!(if_counter(&vm, "gtpu_tunnel0", ifc::RX_PACKETS), 3);
    // Down: through ethernet-input, dropped there.
    cli(&mut vm, &t, "set interface state gtpu_tunnel0 down");
    let eth1 = vectors(&vm, "ethernet-input");
    assert!(run(&mut vm, &t, "pg0", "pg1", &frames[..1], 1).is_empty());
    assert_eq!(vectors(&vm, "ethernet-input") - eth1, 2);
    assert_eq!(counter(&vm, "ethernet-input", "down"), 1);
    // The entry's routed bit follows each change of the interface: after CLI `c`, one
    // packet sent gives `out` frames on pg1 and `eth` ethernet-input vectors.
    let step = |vm: &mut sluice_graph::Vlib, c: &str, out: usize, eth: u64| {
        if !c.is_empty() {
            cli(vm, &t, c);
        }
        let v = vectors(vm, "ethernet-input");
        let got = run(vm, &t, "pg0", "pg1", &frames[..1], out);
        assert_eq!(
            (got.len(), vectors(vm, "ethernet-input") - v),
            (out, eth),
            "after {c:?}"
        );
    };
    step(&mut vm, "set interface state gtpu_tunnel0 up", 1, 1);
    // Cross-connected: ethernet-input sends the packet to l2-input.
    let xc0 = counter(&vm, "l2-input", "xconnect");
    step(&mut vm, "set interface l2 xconnect gtpu_tunnel0 pg1", 1, 2);
    assert_eq!(counter(&vm, "l2-input", "xconnect") - xc0, 1);
    step(&mut vm, "set interface l3 gtpu_tunnel0", 1, 1);
    // An input redirect (here to error-drop): ethernet-input applies it.
    let sw = {
        let ifs = vm.ext::<sluice_vnet::Interfaces>().unwrap();
        ifs.find("gtpu_tunnel0").unwrap()
    };
    let drop = vm.registry.find("error-drop").unwrap();
    sluice_vnet::set_rx_redirect(&mut vm, sw, Some(drop)).unwrap();
    step(&mut vm, "", 0, 2);
    sluice_vnet::set_rx_redirect(&mut vm, sw, None).unwrap();
    step(&mut vm, "", 1, 1);
    // The table changed after traffic, 9 -> 0 -> 9 (the entry's tables follow through
    // IfChange::Table): 172.16.9.2 is routed in table 9 only, and table 0 drops it as
    // ip4-lookup's no_route.
    cli(
        &mut vm,
        &t,
        "ip route add table 9 172.16.9.0/24 via 172.16.0.2 pg1",
    );
    let b9 = udp4([198, 51, 100, 7], [172, 16, 9, 2], 64);
    let f9 = [under(false, false, G, &gtp(0x30, 255, 100, &[], &b9), pg0)];
    for (c, table) in [("", 9), ("0", 0), ("9", 9)] {
        if !c.is_empty() {
            cli(
                &mut vm,
                &t,
                &format!("set interface ip table gtpu_tunnel0 {c}"),
            );
        }
        let nr = counter(&vm, "ip4-lookup", "no_route");
        let out = usize::from(table == 9);
        let got = run(&mut vm, &t, "pg0", "pg1", &f9, out);
        let want = if table == 9 {
            vec![w(&b9, 0x0800)]
        } else {
            vec![]
        };
        assert_eq!(got, want, "in table {table}");
        let dropped = counter(&vm, "ip4-lookup", "no_route") - nr;
        assert_eq!(dropped, 1 - out as u64, "in table {table}");
    }
    assert_eq!(if_counter(&vm, "gtpu_tunnel0", ifc::RX_PACKETS), 12);
    assert_eq!(in_use(&vm), 0);
}

/// Tunnels interleaved packet by packet: each packet is counted on its own tunnel's row
/// and routed in its own tunnel's table (the decap node looks each change of tunnel up,
/// and an IPv4 table's entry keeps the tunnel's tables): tunnel 0 routes in table 0,
/// tunnel 1 in table 9 (a route to pg1), tunnel 2 in table 10 (no route: dropped after
/// decap); an unknown TEID is no tunnel's.
#[test]
fn gtpu_interleaved_tunnels_count_and_route_each_their_own() {
    let (mut vm, t) = routed();
    clis(
        &mut vm,
        &t,
        &[
            "create gtpu tunnel src 10.0.0.1 dst 10.0.0.2 teid 100",
            "create gtpu tunnel src 10.0.0.1 dst 10.0.0.2 teid 101",
            "create gtpu tunnel src 10.0.0.1 dst 10.0.0.2 teid 102",
            "ip table add 9",
            "ip table add 10",
            "set interface ip table gtpu_tunnel1 9",
            "set interface ip table gtpu_tunnel2 10",
            "ip route add table 9 172.16.0.0/24 via 172.16.0.2 pg1",
            "set interface state gtpu_tunnel0 up",
            "set interface state gtpu_tunnel1 up",
            "set interface state gtpu_tunnel2 up",
        ],
    );
    let pg0 = mac_of(&vm, "pg0");
    let teids = [100, 101, 101, 102, 100, 999, 102, 102, 100, 101, 102, 100];
    let frames: Vec<Vec<u8>> = teids
        .iter()
        .zip(1u8..)
        .map(|(&teid, i)| {
            let p = udp4([198, 51, 100, i], [172, 16, 0, 2], 64);
            under(false, false, G, &gtp(0x30, 255, teid, &[], &p), pg0)
        })
        .collect();
    let to_pg1 = teids.iter().filter(|&&t| t == 100 || t == 101).count();
    let got = run(&mut vm, &t, "pg0", "pg1", &frames, to_pg1);
    assert_eq!(got.len(), to_pg1);
    for (i, teid) in [100, 101, 102].into_iter().enumerate() {
        let n = teids.iter().filter(|&&t| t == teid).count() as u64;
        let name = format!("gtpu_tunnel{i}");
        assert_eq!(if_counter(&vm, &name, ifc::RX_PACKETS), n, "{name}");
    }
    assert_eq!(counter(&vm, "gtpu4-input", "decapsulated"), 11);
    assert_eq!(counter(&vm, "gtpu4-input", "no_such_tunnel"), 1);
    assert_eq!(in_use(&vm), 0);
}
