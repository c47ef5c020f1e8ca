//! GRE (L3, TEB, keys) and IP-in-IP (4in4, 6in4, 4in6, 6in6) in the real graph: pg in, pcap
//! out, exact bytes (built here field by field; python/tests/test_gre_ipip.py checks the
//! same with scapy's layers). The kernel here has no GRE/IPIP modules, so there is no Linux
//! peer for these protocols.

mod common;
use common::*;
use sluice_cli::CommandTree;
use sluice_graph::Vlib;
use sluice_vnet::interface::counter as ifc;

const A4: [u8; 4] = [10, 0, 0, 1];
const B4: [u8; 4] = [10, 0, 0, 2];

/// Underlay frame pg0 ↔ peer carrying `payload` with IP protocol `proto`.
fn under(v6: bool, to_peer: bool, proto: u8, payload: &[u8], pg0: [u8; 6]) -> Vec<u8> {
    let (smac, dmac) = if to_peer {
        (pg0, PEER_MAC)
    } else {
        (PEER_MAC, pg0)
    };
    if v6 {
        let (s, d) = (a6("2001:db8::1"), a6("2001:db8::2"));
        let (s, d) = if to_peer { (s, d) } else { (d, s) };
        let mut f = eth(dmac, smac, 0x86dd);
        f.extend(ip6(s, d, proto, payload.len(), 64));
        f.extend_from_slice(payload);
        f
    } else {
        let (s, d) = if to_peer { (A4, B4) } else { (B4, A4) };
        let mut f = eth(dmac, smac, 0x0800);
        f.extend(ip4(s, d, proto, payload.len(), 64));
        f.extend_from_slice(payload);
        f
    }
}

fn gre_hdr(proto: u16, key: Option<u32>) -> Vec<u8> {
    let mut g = if key.is_some() {
        vec![0x20, 0]
    } else {
        vec![0, 0]
    };
    g.extend_from_slice(&proto.to_be_bytes());
    if let Some(k) = key {
        g.extend_from_slice(&k.to_be_bytes());
    }
    g
}

/// `routed()` with an L3 GRE tunnel gre0 over the IPv4 or IPv6 underlay: 10.99.0.1/30 and
/// 2001:db8:99::1/64 on it, 198.51.100.0/24 and 2001:db8:51::/48 routed into it.
fn gre_l3(v6_under: bool) -> (Vlib, CommandTree<Vlib>) {
    let (mut vm, t) = routed();
    let (l, r) = underlay(v6_under);
    let out = cli(&mut vm, &t, &format!("create gre tunnel src {l} dst {r}"));
    assert_eq!(out, "gre0\n");
    clis(
        &mut vm,
        &t,
        &[
            "set interface state gre0 up",
            "set interface ip address gre0 10.99.0.1/30",
            "set interface ip address gre0 2001:db8:99::1/64",
            "ip route add 198.51.100.0/24 via gre0",
            "ip route add 2001:db8:51::/48 via 2001:db8:99::2 gre0",
        ],
    );
    (vm, t)
}

#[test]
fn gre_l3_routes_ip4_and_ip6_both_ways() {
    for v6_under in [false, true] {
        let (mut vm, t) = gre_l3(v6_under);
        let (pg0, pg1) = (mac_of(&vm, "pg0"), mac_of(&vm, "pg1"));
        // Encap: IPv4 and IPv6 from the LAN, routed into the tunnel.
        let in4 = udp4([172, 16, 0, 2], [198, 51, 100, 7], 64);
        let in6 = udp6(a6("2001:db8:1::2"), a6("2001:db8:51::7"), 64);
        let mut f4 = eth(pg1, HOST_MAC, 0x0800);
        f4.extend_from_slice(&in4);
        let mut f6 = eth(pg1, HOST_MAC, 0x86dd);
        f6.extend_from_slice(&in6);
        let got = run(&mut vm, &t, "pg1", "pg0", &[f4, f6], 2);
        let mut r4 = in4.clone();
        r4[8] = 63;
        r4[10..12].copy_from_slice(&[0, 0]);
        let c = sluice_wire::checksum::internet_checksum(&r4[..20]);
        r4[10..12].copy_from_slice(&c.to_be_bytes());
        let mut r6 = in6.clone();
        r6[7] = 63;
        let mut g4 = gre_hdr(0x0800, None);
        g4.extend_from_slice(&r4);
        let mut g6 = gre_hdr(0x86dd, None);
        g6.extend_from_slice(&r6);
        assert_eq!(
            got,
            vec![
                under(v6_under, true, 47, &g4, pg0),
                under(v6_under, true, 47, &g6, pg0)
            ],
            "v6 underlay: {v6_under}"
        );
        // Decap: the peer sends LAN-bound packets back through the tunnel.
        let b4 = udp4([198, 51, 100, 7], [172, 16, 0, 2], 64);
        let b6 = udp6(a6("2001:db8:51::7"), a6("2001:db8:1::2"), 64);
        let mut gb4 = gre_hdr(0x0800, None);
        gb4.extend_from_slice(&b4);
        let mut gb6 = gre_hdr(0x86dd, None);
        gb6.extend_from_slice(&b6);
        let frames = [
            under(v6_under, false, 47, &gb4, pg0),
            under(v6_under, false, 47, &gb6, pg0),
        ];
        let eth0 = vectors(&vm, "ethernet-input");
        let got = run(&mut vm, &t, "pg0", "pg1", &frames, 2);
        // The inner packets go from gre-input straight to ip4-input/ip6-input: only the
        // outer frames pass ethernet-input.
        assert_eq!(
            vectors(&vm, "ethernet-input") - eth0,
            2,
            "the outer frames only"
        );
        assert_eq!(got.len(), 2);
        assert_eq!(&got[0][14 + 12..14 + 20], &b4[12..20]);
        assert_eq!(got[0][14 + 8], 63);
        assert_eq!(&got[1][14 + 8..14 + 40], &b6[8..40]);
        assert_eq!(if_counter(&vm, "gre0", ifc::RX_PACKETS), 2);
        assert_eq!(if_counter(&vm, "gre0", ifc::TX_PACKETS), 2);
        let n = if v6_under { "gre6-input" } else { "gre4-input" };
        assert_eq!(counter(&vm, n, "decapsulated"), 2);
        // The tunnel's MTU leaves room for the outer headers: a DF packet over it gets
        // ICMP fragmentation needed with that MTU.
        let mtu = if v6_under { 1456u16 } else { 1476 };
        let mut big = eth(pg1, HOST_MAC, 0x0800);
        let mut ip = ip4([172, 16, 0, 2], [198, 51, 100, 7], 17, 1480 - 20, 64);
        ip[6] = 0x40;
        ip[10..12].copy_from_slice(&[0, 0]);
        let c = sluice_wire::checksum::internet_checksum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        big.extend(ip);
        big.extend(std::iter::repeat_n(0u8, 1460));
        let got = run(&mut vm, &t, "pg1", "pg1", &[big], 1);
        assert_eq!(got.len(), 1, "frag-needed back to the sender");
        let icmp = &got[0][14 + 20..];
        assert_eq!((icmp[0], icmp[1]), (3, 4));
        assert_eq!(u16::from_be_bytes([icmp[6], icmp[7]]), mtu);
        assert_eq!(in_use(&vm), 0);
    }
}

/// A locally originated inner packet (here `ip4-icmp-error` / `ip6-icmp-error`'s time
/// exceeded for a packet from the peer with TTL / hop limit 1, routed back through the
/// tunnel) leaves with outer TTL / hop limit 64, not the entry's 65: the encap clears the
/// inner packet's `LOCALLY_ORIGINATED` on the `rewrite` arc (with the flag
/// `ip4-rewrite`/`ip6-rewrite` keep the TTL), IPv4 and IPv6 underlay.
#[test]
fn locally_originated_inner_packets_leave_with_outer_ttl_64() {
    for v6_under in [false, true] {
        let (mut vm, t) = gre_l3(v6_under);
        let pg0 = mac_of(&vm, "pg0");
        let mut g4 = gre_hdr(0x0800, None);
        g4.extend_from_slice(&udp4([198, 51, 100, 7], [172, 16, 0, 2], 1));
        let mut g6 = gre_hdr(0x86dd, None);
        g6.extend_from_slice(&udp6(a6("2001:db8:51::7"), a6("2001:db8:1::2"), 1));
        let frames = [
            under(v6_under, false, 47, &g4, pg0),
            under(v6_under, false, 47, &g6, pg0),
        ];
        let got = run(&mut vm, &t, "pg0", "pg0", &frames, 2);
        assert_eq!(got.len(), 2, "v6 underlay: {v6_under}");
        for (i, f) in got.iter().enumerate() {
            let (ttl, inner) = match v6_under {
                true => (f[14 + 7], &f[14 + 40 + 4..]),
                false => {
                    let h = &f[14..14 + 20];
                    assert_eq!(sluice_wire::checksum::internet_checksum(h), 0);
                    (h[8], &f[14 + 20 + 4..])
                }
            };
            // The inner packet is the ICMP error (time exceeded).
            let icmp = match i {
                0 => (inner[9], inner[20]),
                _ => (inner[6], inner[40]),
            };
            assert_eq!(icmp, [(1, 11), (58, 3)][i], "v6 underlay: {v6_under}");
            assert_eq!(ttl, 64, "v6 underlay: {v6_under}, inner ipv6: {}", i == 1);
        }
        assert_eq!(in_use(&vm), 0);
    }
}

#[test]
fn gre_teb_with_key_bridges_and_counts_bad_headers() {
    let (mut vm, t) = routed();
    clis(
        &mut vm,
        &t,
        &[
            "create gre tunnel src 10.0.0.1 dst 10.0.0.2 teb key 1234 instance 3",
            "set interface state gre3 up",
            "set interface l3 pg1",
            "set interface l2 bridge pg1 1",
            "set interface l2 bridge gre3 1",
        ],
    );
    let pg0 = mac_of(&vm, "pg0");
    let inner = inner_frame([0x02, 0xbb, 0, 0, 0, 2], [0x02, 0xaa, 0, 0, 0, 1], 30);
    let out = run(&mut vm, &t, "pg1", "pg0", std::slice::from_ref(&inner), 1);
    let mut g = gre_hdr(0x6558, Some(1234));
    g.extend_from_slice(&inner);
    assert_eq!(out, vec![under(false, true, 47, &g, pg0)]);
    // Back: the right key decapsulates; a wrong or missing key, version 1, routing and an
    // unknown protocol are counted.
    let back = inner_frame([0x02, 0xaa, 0, 0, 0, 1], [0x02, 0xbb, 0, 0, 0, 2], 31);
    let mk = |proto: u16, key: Option<u32>, flags: Option<[u8; 2]>| {
        let mut g = gre_hdr(proto, key);
        if let Some(f) = flags {
            g[..2].copy_from_slice(&f);
        }
        g.extend_from_slice(&back);
        under(false, false, 47, &g, pg0)
    };
    let frames = vec![
        mk(0x6558, Some(1234), None),
        mk(0x6558, Some(99), None),
        mk(0x6558, None, None),
        mk(0x6558, Some(1234), Some([0x20, 1])),
        mk(0x6558, Some(1234), Some([0x60, 0])),
        mk(0x88be, Some(1234), None),
    ];
    let out = run(&mut vm, &t, "pg0", "pg1", &frames, 1);
    assert_eq!(out, vec![back]);
    assert_eq!(counter(&vm, "gre4-input", "decapsulated"), 1);
    assert_eq!(counter(&vm, "gre4-input", "no_such_tunnel"), 2);
    assert_eq!(counter(&vm, "gre4-input", "bad_version"), 1);
    assert_eq!(counter(&vm, "gre4-input", "routing_present"), 1);
    assert_eq!(counter(&vm, "gre4-input", "bad_protocol"), 1);
    let show = cli(&mut vm, &t, "show gre tunnel");
    assert!(
        show.contains("instance 3 src 10.0.0.1 dst 10.0.0.2"),
        "{show}"
    );
    assert!(show.contains("payload TEB key 1234"), "{show}");
    let rc = cli(&mut vm, &t, "show running-config");
    assert!(
        rc.contains("create gre tunnel src 10.0.0.1 dst 10.0.0.2 teb instance 3 key 1234"),
        "{rc}"
    );
    cli(
        &mut vm,
        &t,
        "create gre tunnel src 10.0.0.1 dst 10.0.0.2 teb key 1234 del",
    );
    assert_eq!(
        cli(&mut vm, &t, "show gre tunnel"),
        "No GRE tunnels configured\n"
    );
    assert_eq!(in_use(&vm), 0);
}

/// A GRE key of 0 is no key, as in VPP (`gre_key_is_valid`: key != 0; `gre_mk_key4` puts
/// the packet's key, 0 without the K bit, in the lookup key): a tunnel created with
/// `key 0` sends no K bit and takes packets without a key and with the K bit and key 0;
/// a packet with another key is no tunnel's.
#[test]
fn gre_key_0_is_no_key() {
    let (mut vm, t) = routed();
    clis(
        &mut vm,
        &t,
        &[
            "create gre tunnel src 10.0.0.1 dst 10.0.0.2 teb key 0",
            "set interface state gre0 up",
            "set interface l3 pg1",
            "set interface l2 bridge pg1 1",
            "set interface l2 bridge gre0 1",
        ],
    );
    // `key 0` is no key: a keyless TEB tunnel between the same endpoints is the same
    // tunnel; an L3 one is not (VPP's key includes the type).
    let e = cli_err(
        &mut vm,
        &t,
        "create gre tunnel src 10.0.0.1 dst 10.0.0.2 teb",
    );
    assert!(e.contains("same endpoints"), "{e}");
    assert_eq!(
        cli(&mut vm, &t, "create gre tunnel src 10.0.0.1 dst 10.0.0.2"),
        "gre1\n"
    );
    let pg0 = mac_of(&vm, "pg0");
    let inner = inner_frame([0x02, 0xbb, 0, 0, 0, 2], [0x02, 0xaa, 0, 0, 0, 1], 30);
    let out = run(&mut vm, &t, "pg1", "pg0", std::slice::from_ref(&inner), 1);
    let mut g = gre_hdr(0x6558, None);
    g.extend_from_slice(&inner);
    assert_eq!(out, vec![under(false, true, 47, &g, pg0)], "no K bit");
    let back = |n: usize| inner_frame([0x02, 0xaa, 0, 0, 0, 1], [0x02, 0xbb, 0, 0, 0, 2], n);
    let mk = |key: Option<u32>, n: usize| {
        let mut g = gre_hdr(0x6558, key);
        g.extend_from_slice(&back(n));
        under(false, false, 47, &g, pg0)
    };
    let frames = [
        mk(None, 31),
        mk(Some(0), 32),
        mk(Some(5), 33),
        mk(Some(0), 34),
    ];
    let out = run(&mut vm, &t, "pg0", "pg1", &frames, 3);
    assert_eq!(out, vec![back(31), back(32), back(34)]);
    assert_eq!(counter(&vm, "gre4-input", "decapsulated"), 3);
    assert_eq!(counter(&vm, "gre4-input", "no_such_tunnel"), 1);
    let show = cli(&mut vm, &t, "show gre tunnel");
    assert!(!show.contains("key"), "{show}");
    assert_eq!(in_use(&vm), 0);
}

#[test]
fn ipip_all_four_combinations() {
    for v6_under in [false, true] {
        let (mut vm, t) = routed();
        let (l, r) = underlay(v6_under);
        let out = cli(&mut vm, &t, &format!("create ipip tunnel src {l} dst {r}"));
        assert_eq!(out, "ipip0\n");
        clis(
            &mut vm,
            &t,
            &[
                "set interface state ipip0 up",
                "set interface ip address ipip0 10.98.0.1/30",
                "ip route add 198.51.100.0/24 via ipip0",
                "ip route add 2001:db8:51::/48 via ipip0",
            ],
        );
        let (pg0, pg1) = (mac_of(&vm, "pg0"), mac_of(&vm, "pg1"));
        let in4 = udp4([172, 16, 0, 2], [198, 51, 100, 7], 64);
        let in6 = udp6(a6("2001:db8:1::2"), a6("2001:db8:51::7"), 64);
        let mut f4 = eth(pg1, HOST_MAC, 0x0800);
        f4.extend_from_slice(&in4);
        let mut f6 = eth(pg1, HOST_MAC, 0x86dd);
        f6.extend_from_slice(&in6);
        let got = run(&mut vm, &t, "pg1", "pg0", &[f4, f6], 2);
        let mut r4 = in4.clone();
        r4[8] = 63;
        r4[10..12].copy_from_slice(&[0, 0]);
        let c = sluice_wire::checksum::internet_checksum(&r4[..20]);
        r4[10..12].copy_from_slice(&c.to_be_bytes());
        let mut r6 = in6.clone();
        r6[7] = 63;
        assert_eq!(
            got,
            vec![
                under(v6_under, true, 4, &r4, pg0),
                under(v6_under, true, 41, &r6, pg0)
            ],
            "v6 underlay: {v6_under}"
        );
        let b4 = udp4([198, 51, 100, 7], [172, 16, 0, 2], 64);
        let b6 = udp6(a6("2001:db8:51::7"), a6("2001:db8:1::2"), 64);
        let frames = [
            under(v6_under, false, 4, &b4, pg0),
            under(v6_under, false, 41, &b6, pg0),
            // Protocol 4 carrying IPv6: a mismatch; a truncated inner packet.
            under(v6_under, false, 4, &b6, pg0),
            under(v6_under, false, 41, &[], pg0),
        ];
        let eth0 = vectors(&vm, "ethernet-input");
        let got = run(&mut vm, &t, "pg0", "pg1", &frames, 2);
        // Decapsulated straight to ip4-input/ip6-input: ethernet-input sees the four
        // outer frames only.
        assert_eq!(
            vectors(&vm, "ethernet-input") - eth0,
            4,
            "the outer frames only"
        );
        assert_eq!(got.len(), 2, "v6 underlay: {v6_under}");
        assert_eq!(
            &got[0][14 + 12..],
            &{
                let mut r = b4.clone();
                r[8] = 63;
                r[10..12].copy_from_slice(&[0, 0]);
                let c = sluice_wire::checksum::internet_checksum(&r[..20]);
                r[10..12].copy_from_slice(&c.to_be_bytes());
                r
            }[12..]
        );
        assert_eq!(got[1][14 + 7], 63);
        let n = if v6_under {
            "ipip6-input"
        } else {
            "ipip4-input"
        };
        assert_eq!(counter(&vm, n, "decapsulated"), 2);
        assert_eq!(counter(&vm, n, "bad_inner"), 1);
        assert_eq!(counter(&vm, n, "truncated"), 1);
        let show = cli(&mut vm, &t, "show ipip tunnel");
        assert!(
            show.contains(&format!("src {l} dst {r} table-ID 0")),
            "{show}"
        );
        let sw = vm
            .ext::<sluice_vnet::Interfaces>()
            .unwrap()
            .find("ipip0")
            .unwrap();
        cli(
            &mut vm,
            &t,
            &format!("delete ipip tunnel sw_if_index {}", sw.0),
        );
        assert_eq!(
            cli(&mut vm, &t, "show ipip tunnel"),
            "No IPIP tunnels configured\n"
        );
        assert_eq!(in_use(&vm), 0);
    }
}

/// Features on a tunnel interface apply to its decapsulated packets on the direct L3 path
/// (decap straight to `ip4-input`/`ip6-input`, no `ethernet-input`): the `ip4-unicast` /
/// `ip6-unicast` counter features of the tunnel count them, keyed by the `rx_if` the decap
/// sets; the underlay interface's see none of them.
#[test]
fn unicast_features_on_a_tunnel_see_its_decapsulated_packets() {
    use sluice_vnet::feature::{counts, VNET_ARCS};
    let arc = |n: &str| *VNET_ARCS.iter().find(|a| a.name == n).unwrap();
    let (arc4, arc6) = (arc("ip4-unicast"), arc("ip6-unicast"));
    for (kind, name, p4, p6) in [("gre", "gre0", 47, 47), ("ipip", "ipip0", 4, 41)] {
        for v6_under in [false, true] {
            let (mut vm, t) = routed();
            let (l, r) = underlay(v6_under);
            cli(
                &mut vm,
                &t,
                &format!("create {kind} tunnel src {l} dst {r}"),
            );
            clis(
                &mut vm,
                &t,
                &[
                    format!("set interface state {name} up"),
                    format!("set interface ip address {name} 10.99.0.1/30"),
                    format!("set interface ip address {name} 2001:db8:99::1/64"),
                    format!("set interface feature {name} ip4-unicast-count arc ip4-unicast"),
                    format!("set interface feature {name} ip6-unicast-count arc ip6-unicast"),
                    "set interface feature pg0 ip4-unicast-count arc ip4-unicast".into(),
                    "set interface feature pg0 ip6-unicast-count arc ip6-unicast".into(),
                ],
            );
            let pg0 = mac_of(&vm, "pg0");
            let b4 = udp4([198, 51, 100, 7], [172, 16, 0, 2], 64);
            let b6 = udp6(a6("2001:db8:51::7"), a6("2001:db8:1::2"), 64);
            let (mut i4, mut i6) = (b4.clone(), b6.clone());
            if kind == "gre" {
                i4 = gre_hdr(0x0800, None);
                i4.extend_from_slice(&b4);
                i6 = gre_hdr(0x86dd, None);
                i6.extend_from_slice(&b6);
            }
            let frames = [
                under(v6_under, false, p4, &i4, pg0),
                under(v6_under, false, p6, &i6, pg0),
                under(v6_under, false, p6, &i6, pg0),
            ];
            let got = run(&mut vm, &t, "pg0", "pg1", &frames, 3);
            let case = format!("{kind}, v6 underlay: {v6_under}");
            assert_eq!(got.len(), 3, "{case}");
            let ifs = vm.ext::<sluice_vnet::Interfaces>().unwrap();
            let (tun, pg0_if) = (ifs.find(name).unwrap().0, ifs.find("pg0").unwrap().0);
            assert_eq!(
                counts(&mut vm, &arc4, tun),
                (1, b4.len() as u64),
                "ip4-unicast-count of {case}"
            );
            assert_eq!(
                counts(&mut vm, &arc6, tun),
                (2, 2 * b6.len() as u64),
                "ip6-unicast-count of {case}"
            );
            // The underlay's counter features saw the outer packets only.
            let outer = if v6_under { &arc6 } else { &arc4 };
            let inner_other = if v6_under { &arc4 } else { &arc6 };
            assert_eq!(counts(&mut vm, outer, pg0_if).0, 3, "{case}");
            assert_eq!(counts(&mut vm, inner_other, pg0_if).0, 0, "{case}");
            assert_eq!(if_counter(&vm, name, ifc::RX_PACKETS), 3, "{case}");
            let n = format!("{kind}{}-input", if v6_under { 6 } else { 4 });
            assert_eq!(counter(&vm, &n, "decapsulated"), 3, "{case}");
            // The direct path: `ethernet-input` saw the outer frames only.
            assert_eq!(vectors(&vm, "ethernet-input"), 3, "{case}");
            assert_eq!(in_use(&vm), 0);
        }
    }
}

/// The direct L3 decap clears what `ethernet-input` would have cleared on the way it skips:
/// an outer packet marked `L2_TO_BVI` (bridged to a BVI) or `LOCALLY_ORIGINATED` leaves
/// `gre4-input` for `ip4-input` with neither flag, in the tunnel's table, `rx_if` the
/// tunnel (node-level: `gre4-input` alone, its next nodes captured).
#[test]
fn direct_decap_clears_the_bvi_and_local_flags() {
    use sluice_buffer::flags::{L2_TO_BVI, LOCALLY_ORIGINATED};
    let plugins = sluice_tunnels::plugins();
    let entries = sluice_vnet::plugin::PluginsConfig::default().entries(&plugins);
    let mut t = sluice_vnet::testing::NodeTest::with_plugins(&entries, "gre4-input");
    t.cli(
        "create loopback interface
         set interface state loop0 up
         set interface ip address loop0 10.0.0.1/24
         create gre tunnel src 10.0.0.1 dst 10.0.0.2
         set interface state gre0 up
         ip table add 7
         set interface ip table gre0 7",
    );
    let gre0 = t.sw_if("gre0");
    let inner = udp4([198, 51, 100, 7], [172, 16, 0, 2], 64);
    let mut g = gre_hdr(0x0800, None);
    g.extend_from_slice(&inner);
    let outer = under(false, false, 47, &g, [0; 6])[14..].to_vec();
    for f in [
        L2_TO_BVI,
        LOCALLY_ORIGINATED,
        L2_TO_BVI | LOCALLY_ORIGINATED,
    ] {
        t.run_with(std::slice::from_ref(&outer), |h| h.flags |= f);
    }
    let got = t.arc("ip4-input");
    assert_eq!(got.len(), 3, "{:?}", t.arc_counts());
    for c in &got {
        assert_eq!(c.hdr.flags & (L2_TO_BVI | LOCALLY_ORIGINATED), 0);
        assert_eq!(c.hdr.rx_if, gre0);
        assert_ne!(c.hdr.ip.fib_index, 0, "the tunnel's table 7");
        assert_eq!(c.data, inner);
    }
    t.assert_no_leaks();
}

/// The encap stacked on the underlay's adjacency follows the underlay without any
/// tunnel reconfiguration: a new next hop for the tunnel's destination, ECMP (stacked on
/// one bucket: the outer header is the same for every packet of a tunnel), the route deleted (the lookup path, counted `no_route`
/// there, not a stale adjacency), and a neighbour resolving on a connected destination
/// (glean through `ip4-lookup`/`ip6-lookup` until it resolves, then stacked), a
/// neighbour's new MAC (the next frame carries it) and a forgotten neighbour (glean: the
/// encap's cached adjacency is not reused once the FIB changed), and a frame
/// alternating a stacked tunnel and a gleaning one (each tunnel's entry keeps its own
/// result, cached until the FIB change count moves). A stacked packet crosses the lookup
/// node once (the inner packet), one on the lookup path twice.
///
/// These steps check the cache as a whole, not which write counts a change: the MAC
/// change passes with any cache (the adjacency is rewritten in place and `ip4-rewrite`
/// reads its contents), and `ip neighbor del` also removes the host route, which counts
/// through the LPM whether or not the adjacency update does. `sluice-fib`'s
/// `tests/changes.rs` checks the count of each write kind.
#[test]
fn ipip_encap_follows_the_underlay_route() {
    for v6 in [false, true] {
        let (mut vm, t) = routed();
        let (lk, nh2, nh3, far, near) = if v6 {
            (
                "ip6-lookup",
                "2001:db8::2",
                "2001:db8::3",
                "2001:db8:9::9",
                "2001:db8::7",
            )
        } else {
            (
                "ip4-lookup",
                "10.0.0.2",
                "10.0.0.3",
                "192.0.2.9",
                "10.0.0.7",
            )
        };
        let (l, plen) = if v6 {
            ("2001:db8::1", 128)
        } else {
            ("10.0.0.1", 32)
        };
        let mac3 = [0x02, 0, 0, 0, 0, 0x03];
        let mac7 = [0x02, 0, 0, 0, 0, 0x07];
        clis(
            &mut vm,
            &t,
            &[
                format!("ip neighbor pg0 {nh3} 02:00:00:00:00:03 static"),
                format!("create ipip tunnel src {l} dst {far}"),
                format!("create ipip tunnel src {l} dst {near} instance 1"),
                "set interface state ipip0 up".into(),
                "set interface state ipip1 up".into(),
                "ip route add 198.51.100.0/24 via ipip0".into(),
                "ip route add 198.51.101.0/24 via ipip1".into(),
                format!("ip route add {far}/{plen} via {nh2} pg0"),
            ],
        );
        let pg1 = mac_of(&vm, "pg1");
        let frames = |nets: &[u8]| -> Vec<Vec<u8>> {
            nets.iter()
                .enumerate()
                .map(|(i, &net)| {
                    let mut f = eth(pg1, HOST_MAC, 0x0800);
                    f.extend(udp4([172, 16, 0, 2], [198, 51, net, 7 + i as u8], 64));
                    f
                })
                .collect()
        };
        let far_b: Vec<u8> = match far.parse::<std::net::IpAddr>().unwrap() {
            std::net::IpAddr::V4(a) => a.octets().to_vec(),
            std::net::IpAddr::V6(a) => a.octets().to_vec(),
        };
        // The outer destination's place in the frame.
        let dst_at = if v6 {
            14 + 24..14 + 40
        } else {
            14 + 16..14 + 20
        };
        // An encapsulated data frame (outer protocol 4: the inner packets are IPv4), not
        // the ARP/ND a glean sends.
        let data = |o: &Vec<u8>| match (v6, o[12..14] == [0x86, 0xdd], o[12..14] == [8, 0]) {
            (true, true, _) => o[14 + 6] == 4,
            (false, _, true) => o[14 + 9] == 4,
            _ => false,
        };
        let mut lookups = 0;
        // Sends a frame of packets to 198.51.`net`.x, captures up to 8 frames on pg0 (so
        // a "nothing sent" check can fail) and returns the data frames among them and the
        // lookup node's new vectors.
        let mut send = |vm: &mut sluice_graph::Vlib, nets: &[u8]| {
            let fs = frames(nets);
            let out: Vec<Vec<u8>> = run(vm, &t, "pg1", "pg0", &fs, 8)
                .into_iter()
                .filter(data)
                .collect();
            let l = vectors(vm, lk) - lookups;
            lookups += l;
            (out, l)
        };
        const NET0: &[u8] = &[100; 4];
        const NET1: &[u8] = &[101; 4];
        // Via .2: stacked. The inner packets are IPv4: over an IPv4 underlay
        // `ip4-lookup` sees them once (and the outer ones not at all), over IPv6
        // `ip6-lookup` sees nothing.
        let (out, l) = send(&mut vm, NET0);
        assert_eq!(out.len(), 4, "v6 {v6}");
        for o in &out {
            assert_eq!(o[..6], PEER_MAC, "v6 {v6}");
            assert_eq!(o[dst_at.clone()], far_b[..], "v6 {v6}");
        }
        let inner_lookups = if v6 { 0 } else { 4 };
        assert_eq!(
            l, inner_lookups,
            "v6 {v6}: the stacked packets skip the lookup"
        );
        // Only .2's MAC changes (its adjacency rewritten in place): the next frame goes
        // to the new MAC, still stacked.
        let mac22 = [0x02, 0, 0, 0, 0, 0x22];
        cli(
            &mut vm,
            &t,
            &format!("ip neighbor pg0 {nh2} 02:00:00:00:00:22 static"),
        );
        let (out, l) = send(&mut vm, NET0);
        assert_eq!(out.len(), 4, "v6 {v6}");
        assert!(out.iter().all(|o| o[..6] == mac22), "v6 {v6}: .2's new MAC");
        assert_eq!(l, inner_lookups, "v6 {v6}");
        // .2 forgotten (its adjacency becomes incomplete, the route stays): the lookup
        // path (glean), no data sent, not the stale adjacency.
        cli(&mut vm, &t, &format!("ip neighbor del pg0 {nh2}"));
        let (out, l) = send(&mut vm, NET0);
        assert!(
            out.is_empty(),
            "v6 {v6}: nothing sent to a forgotten neighbour"
        );
        assert_eq!(l, inner_lookups + 4, "v6 {v6}: glean through the lookup");
        // .2 back: stacked again.
        cli(
            &mut vm,
            &t,
            &format!("ip neighbor pg0 {nh2} 02:00:00:00:00:02 static"),
        );
        let (out, l) = send(&mut vm, NET0);
        assert_eq!(out.len(), 4, "v6 {v6}");
        assert!(out.iter().all(|o| o[..6] == PEER_MAC), "v6 {v6}");
        assert_eq!(l, inner_lookups, "v6 {v6}");
        // A new next hop (.3): the packets follow it, still stacked.
        clis(
            &mut vm,
            &t,
            &[
                format!("ip route del {far}/{plen} via {nh2} pg0"),
                format!("ip route add {far}/{plen} via {nh3} pg0"),
            ],
        );
        let (out, l) = send(&mut vm, NET0);
        assert_eq!(out.len(), 4, "v6 {v6}");
        assert!(out.iter().all(|o| o[..6] == mac3), "v6 {v6}: follows .3");
        assert_eq!(l, inner_lookups, "v6 {v6}");
        // One frame alternating ipip0 (stacked on .3) and ipip1 (its neighbour unknown:
        // glean): each run resolved for its own tunnel, only ipip0's packets sent, to
        // .3; ipip1's take the lookup arc (two more lookups over the inner ones).
        let (out, l) = send(&mut vm, &[100, 101, 100, 101]);
        assert_eq!(out.len(), 2, "v6 {v6}");
        for o in &out {
            assert_eq!(o[..6], mac3, "v6 {v6}");
            assert_eq!(o[dst_at.clone()], far_b[..], "v6 {v6}");
        }
        assert_eq!(
            l,
            inner_lookups + 2,
            "v6 {v6}: ipip1's packets only take the lookup arc"
        );
        // ECMP over .2 and .3: still stacked (the encap picks the bucket of the tunnel's
        // outer flow, the same for every packet of it), every packet out on one next hop.
        // The four inner flows are all IPv4, so their outer headers are identical anyway:
        // this checks the stacking, not that the pick ignores the inner flow.
        cli(
            &mut vm,
            &t,
            &format!("ip route add {far}/{plen} via {nh2} pg0"),
        );
        let (out, l) = send(&mut vm, NET0);
        assert_eq!(out.len(), 4, "v6 {v6}");
        assert!(out.iter().all(|o| o[..6] == mac3 || o[..6] == PEER_MAC));
        assert!(
            out.iter().all(|o| o[..6] == out[0][..6]),
            "v6 {v6}: one tunnel, one path"
        );
        assert_eq!(l, inner_lookups, "v6 {v6}: ECMP stacked, no outer lookup");
        // The route deleted: dropped as no_route by the lookup node, nothing sent.
        clis(
            &mut vm,
            &t,
            &[
                format!("ip route del {far}/{plen} via {nh2} pg0"),
                format!("ip route del {far}/{plen} via {nh3} pg0"),
            ],
        );
        let before = counter(&vm, lk, "no_route");
        let (out, _) = send(&mut vm, NET0);
        assert!(out.is_empty(), "v6 {v6}");
        assert_eq!(counter(&vm, lk, "no_route") - before, 4, "v6 {v6}");
        // A connected destination without a neighbour: the lookup path (glean), nothing
        // of it sent as data; once the neighbour is known, stacked on its adjacency.
        let (out, l) = send(&mut vm, NET1);
        assert!(
            out.is_empty(),
            "v6 {v6}: no data sent before the neighbour resolves"
        );
        assert_eq!(l, inner_lookups + 4, "v6 {v6}: glean through the lookup");
        cli(
            &mut vm,
            &t,
            &format!("ip neighbor pg0 {near} 02:00:00:00:00:07 static"),
        );
        let (out, l) = send(&mut vm, NET1);
        assert_eq!(out.len(), 4, "v6 {v6}");
        assert!(out.iter().all(|o| o[..6] == mac7), "v6 {v6}");
        assert_eq!(l, inner_lookups, "v6 {v6}");
        assert_eq!(in_use(&vm), 0, "v6 {v6}");
    }
}

/// A tunnel whose underlay is table 7 stacks on table 7's route for its destination, not
/// table 0's: two tunnels to one destination, ipip0 in table 7 (via .3) and ipip1 in table
/// 0 (via .2), alternating in one frame, each out to its own next hop's MAC; with table 7's
/// route deleted, ipip0's packets take the lookup arc and are dropped there as `no_route`
/// (table 0's route is not followed) while ipip1's still go out stacked.
#[test]
fn ipip_encap_stacks_in_its_underlay_table() {
    for v6 in [false, true] {
        let (mut vm, t) = routed();
        let (lk, nh2, nh3, far, plen) = if v6 {
            (
                "ip6-lookup",
                "2001:db8::2",
                "2001:db8::3",
                "2001:db8:9::9",
                128,
            )
        } else {
            ("ip4-lookup", "10.0.0.2", "10.0.0.3", "192.0.2.9", 32)
        };
        let (l, _) = underlay(v6);
        let mac3 = [0x02, 0, 0, 0, 0, 0x03];
        clis(
            &mut vm,
            &t,
            &[
                "ip table add 7".into(),
                "ip6 table add 7".into(),
                format!("ip neighbor pg0 {nh3} 02:00:00:00:00:03 static"),
                format!("ip route add {far}/{plen} via {nh2} pg0"),
                format!("ip route add table 7 {far}/{plen} via {nh3} pg0"),
                format!("create ipip tunnel src {l} dst {far} table-id 7"),
                format!("create ipip tunnel src {l} dst {far} instance 1"),
                "set interface state ipip0 up".into(),
                "set interface state ipip1 up".into(),
                "ip route add 198.51.100.0/24 via ipip0".into(),
                "ip route add 198.51.101.0/24 via ipip1".into(),
            ],
        );
        let pg1 = mac_of(&vm, "pg1");
        let nets = [100u8, 101, 100, 101];
        let fs: Vec<Vec<u8>> = nets
            .iter()
            .enumerate()
            .map(|(i, &net)| {
                let mut f = eth(pg1, HOST_MAC, 0x0800);
                f.extend(udp4([172, 16, 0, 2], [198, 51, net, 7 + i as u8], 64));
                f
            })
            .collect();
        // The inner packets' IPv4 lookups (none in ip6-lookup over an IPv6 underlay).
        let inner = if v6 { 0 } else { 4 };
        // The inner destination's last byte: 7 + the packet's index in the frame.
        let idx = |o: &[u8]| (o[o.len() - 12 - 1] - 7) as usize;
        let l0 = vectors(&vm, lk);
        let out = run(&mut vm, &t, "pg1", "pg0", &fs, 8);
        assert_eq!(out.len(), 4, "v6 {v6}");
        for o in &out {
            let want = if nets[idx(o)] == 100 { mac3 } else { PEER_MAC };
            assert_eq!(o[..6], want, "v6 {v6}: packet {}", idx(o));
        }
        assert_eq!(vectors(&vm, lk) - l0, inner, "v6 {v6}: both stacked");
        cli(
            &mut vm,
            &t,
            &format!("ip route del table 7 {far}/{plen} via {nh3} pg0"),
        );
        let (l0, nr0) = (vectors(&vm, lk), counter(&vm, lk, "no_route"));
        let out = run(&mut vm, &t, "pg1", "pg0", &fs, 8);
        assert_eq!(out.len(), 2, "v6 {v6}: ipip1's only");
        for o in &out {
            assert_eq!((nets[idx(o)], &o[..6]), (101, &PEER_MAC[..]), "v6 {v6}");
        }
        // Over IPv6 the ICMPv6 errors `ip6-lookup` asks for (to the tunnel's source) find
        // no route in table 7 either: two more lookups, two more `no_route`.
        let icmp = if v6 { 2 } else { 0 };
        assert_eq!(counter(&vm, lk, "no_route") - nr0, 2 + icmp, "v6 {v6}");
        assert_eq!(vectors(&vm, lk) - l0, inner + 2 + icmp, "v6 {v6}");
        assert_eq!(in_use(&vm), 0, "v6 {v6}");
    }
}

/// Eight IP-in-IP tunnels over a two-path ECMP underlay, each stacked on its fixed bucket.
/// With one next hop's neighbour forgotten, the tunnels on that bucket take the lookup
/// arc, and the lookup (which hashes the outer header with its real protocol, 4) must
/// pick the same, unresolved bucket: nothing of theirs is sent as data (and no frame with
/// a zero MAC), while the other tunnels stay on their next hop. That holds only when the
/// encap hashed its rewrite with protocol 4 too (with the rewrite's 0, some tunnels'
/// packets move to the other path). Then a third path (more buckets): every tunnel out
/// again, each on a resolved MAC.
#[test]
fn ipip_ecmp_bucket_matches_the_lookup() {
    for v6 in [false, true] {
        let (mut vm, t) = routed();
        let (l, plen, nh2, nh3, nh4) = if v6 {
            (
                "2001:db8::1",
                128,
                "2001:db8::2",
                "2001:db8::3",
                "2001:db8::4",
            )
        } else {
            ("10.0.0.1", 32, "10.0.0.2", "10.0.0.3", "10.0.0.4")
        };
        let mac3 = [0x02, 0, 0, 0, 0, 0x03];
        let mac4 = [0x02, 0, 0, 0, 0, 0x04];
        let far = |k: u8| {
            if v6 {
                format!("2001:db8:9::{}", k + 1)
            } else {
                format!("192.0.2.{}", k + 1)
            }
        };
        const N: u8 = 8;
        let mut cmds = vec![format!("ip neighbor pg0 {nh3} 02:00:00:00:00:03 static")];
        for k in 0..N {
            let f = far(k);
            cmds.extend([
                format!("create ipip tunnel src {l} dst {f} instance {k}"),
                format!("set interface state ipip{k} up"),
                format!("ip route add 198.51.{}.0/24 via ipip{k}", 100 + k),
                format!("ip route add {f}/{plen} via {nh2} pg0"),
                format!("ip route add {f}/{plen} via {nh3} pg0"),
            ]);
        }
        clis(&mut vm, &t, &cmds);
        let pg1 = mac_of(&vm, "pg1");
        let fs: Vec<Vec<u8>> = (0..N)
            .map(|k| {
                let mut f = eth(pg1, HOST_MAC, 0x0800);
                f.extend(udp4([172, 16, 0, 2], [198, 51, 100 + k, 7], 64));
                f
            })
            .collect();
        // The tunnel (by its outer destination's last byte - 1) and the MAC of each data
        // frame sent on pg0 (outer protocol 4: not the ARP/ND a glean sends).
        let send = |vm: &mut sluice_graph::Vlib| -> Vec<(u8, [u8; 6])> {
            run(vm, &t, "pg1", "pg0", &fs, 2 * N as usize)
                .into_iter()
                .filter_map(|o| {
                    let (v6o, v4o) = (o[12..14] == [0x86, 0xdd], o[12..14] == [8, 0]);
                    let data = match v6 {
                        true => v6o && o[14 + 6] == 4,
                        false => v4o && o[14 + 9] == 4,
                    };
                    let last = if v6 { o[14 + 39] } else { o[14 + 19] };
                    data.then(|| (last - 1, o[..6].try_into().unwrap()))
                })
                .collect()
        };
        let mut before = send(&mut vm);
        before.sort();
        assert_eq!(before.len(), N as usize, "v6 {v6}");
        assert!(before.iter().all(|(_, m)| *m == PEER_MAC || *m == mac3));
        let on2: Vec<u8> = before
            .iter()
            .filter(|(_, m)| *m == PEER_MAC)
            .map(|(k, _)| *k)
            .collect();
        assert!(
            !on2.is_empty() && on2.len() < N as usize,
            "v6 {v6}: both paths used"
        );
        // .2 forgotten: its tunnels glean through the lookup, the others stay on .3.
        cli(&mut vm, &t, &format!("ip neighbor del pg0 {nh2}"));
        let mut after = send(&mut vm);
        after.sort();
        let want: Vec<(u8, [u8; 6])> = before.iter().copied().filter(|(_, m)| *m == mac3).collect();
        assert_eq!(
            after, want,
            "v6 {v6}: the lookup picks the tunnel's unresolved bucket"
        );
        // .2 back and a third path via .4: every tunnel out on a resolved MAC.
        clis(
            &mut vm,
            &t,
            &[
                format!("ip neighbor pg0 {nh2} 02:00:00:00:00:02 static"),
                format!("ip neighbor pg0 {nh4} 02:00:00:00:00:04 static"),
            ],
        );
        let cmds: Vec<String> = (0..N)
            .map(|k| format!("ip route add {}/{plen} via {nh4} pg0", far(k)))
            .collect();
        clis(&mut vm, &t, &cmds);
        let out = send(&mut vm);
        assert_eq!(out.len(), N as usize, "v6 {v6}");
        assert!(
            out.iter()
                .all(|(_, m)| *m == PEER_MAC || *m == mac3 || *m == mac4),
            "v6 {v6}: {out:?}"
        );
        assert_eq!(in_use(&vm), 0, "v6 {v6}");
    }
}
