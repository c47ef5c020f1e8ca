//! Tunnel benchmarks (plugins/tunnels, docs/tunnels.md): VXLAN encap (L2 bridge into the
//! tunnel) and decap (1 tunnel and `--tunnels N`, frames spread over every VNI), GRE L3,
//! IP-in-IP and GTP-U encap/decap, SRv6 T.Encaps and End.DX4; one core, 64-byte inner
//! frames, pg in, pg-tx out.

use crate::{cli, write_pcap};
use sluice_cli::CommandTree;
use sluice_graph::Vlib;
use std::fmt::Write as _;

const PEER: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const H1: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 1];
const H2: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 2];

fn ip4(src: [u8; 4], dst: [u8; 4], proto: u8, payload: usize) -> Vec<u8> {
    let total = (20 + payload) as u16;
    let mut h = vec![0x45, 0];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&[0, 0, 0, 0, 64, proto, 0, 0]);
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    let c = sluice_wire::checksum::internet_checksum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h
}

fn eth(dst: [u8; 6], src: [u8; 6], et: u16) -> Vec<u8> {
    let mut v = dst.to_vec();
    v.extend_from_slice(&src);
    v.extend_from_slice(&et.to_be_bytes());
    v
}

/// A 64-byte inner Ethernet frame (IPv4/UDP, port `p`).
fn inner(dst: [u8; 6], src: [u8; 6], p: u16) -> Vec<u8> {
    let mut f = eth(dst, src, 0x0800);
    f.extend(ip4([192, 168, 1, 1], [192, 168, 1, 2], 17, 26));
    f.extend_from_slice(&p.to_be_bytes());
    f.extend_from_slice(&9u16.to_be_bytes());
    f.extend_from_slice(&26u16.to_be_bytes());
    f.extend_from_slice(&[0; 20]);
    f
}

/// A routed 64-byte IPv4 frame into `dmac` to `dst`.
fn routed(dmac: [u8; 6], dst: [u8; 4]) -> Vec<u8> {
    let mut f = eth(dmac, H1, 0x0800);
    f.extend(ip4([172, 16, 0, 2], dst, 17, 30));
    f.extend_from_slice(&[0x30, 0x39, 0, 9, 0, 30]);
    f.extend_from_slice(&[0; 24]);
    f
}

/// A 50-byte IPv4 UDP packet 172.16.0.2 → 198.51.100.2, source port `i`: what the decap
/// cases carry inside.
fn lan_udp(i: u32) -> Vec<u8> {
    let mut ip = ip4([172, 16, 0, 2], [198, 51, 100, 2], 17, 30);
    ip.extend_from_slice(&[(i >> 8) as u8, i as u8, 0, 9, 0, 30]);
    ip.extend_from_slice(&[0; 24]);
    ip
}

/// Runs each command of `cmds`.
fn clis(vm: &mut Vlib, t: &CommandTree<Vlib>, cmds: &[&str]) {
    for c in cmds {
        cli(vm, t, c);
    }
}

/// The underlay frame from the peer (10.0.0.2) to us (10.0.0.1) carrying `payload`.
fn from_peer(pg0: [u8; 6], proto: u8, payload: &[u8]) -> Vec<u8> {
    from_addr(pg0, [10, 0, 0, 2], proto, payload)
}

/// The underlay frame from tunnel peer `src` to us (10.0.0.1) carrying `payload`.
fn from_addr(pg0: [u8; 6], src: [u8; 4], proto: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = eth(pg0, PEER, 0x0800);
    f.extend(ip4(src, [10, 0, 0, 1], proto, payload.len()));
    f.extend_from_slice(payload);
    f
}

/// The IPv6 underlay: the peer 2001:db8::2 and us, 2001:db8::1.
const PEER6: std::net::Ipv6Addr = std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);
const US6: std::net::Ipv6Addr = std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);

/// [`from_peer`] over IPv6: the underlay frame from the peer ([`PEER6`]) to `dst`, next
/// header `nh`, hop limit 64, carrying `payload`.
fn from_peer6(pg0: [u8; 6], dst: std::net::Ipv6Addr, nh: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = eth(pg0, PEER, 0x86dd);
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    f.extend_from_slice(&[nh, 64]);
    f.extend_from_slice(&PEER6.octets());
    f.extend_from_slice(&dst.octets());
    f.extend_from_slice(payload);
    f
}

/// The remote end of tunnel `t` of the L3 tunnel cases: 10.0.0.2 (the neighbour) for the
/// first, 10.1.x.y (routed via it) for the others.
fn tunnel_peer(t: u32) -> [u8; 4] {
    if t == 0 {
        [10, 0, 0, 2]
    } else {
        [10, 1, (t / 250) as u8, (t % 250 + 1) as u8]
    }
}

/// 4096 pseudo-random tunnel numbers below `n` (xorshift32): with n tunnels nearly every
/// packet is on another tunnel than the one before.
fn spread(n: u32) -> Vec<u32> {
    let mut x = 0x9e37_79b9u32;
    (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x % n
        })
        .collect()
}

/// The UDP + VXLAN headers and inner frame of VNI `vni`, source port from `i`.
fn vxlan_payload(vni: u32, i: u16) -> Vec<u8> {
    let inner = inner(H2, H1, i);
    let mut p = Vec::new();
    p.extend_from_slice(&(49152 + (i & 0x3fff)).to_be_bytes());
    p.extend_from_slice(&4789u16.to_be_bytes());
    p.extend_from_slice(&((16 + inner.len()) as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0, 0x08, 0, 0, 0]);
    p.extend_from_slice(&(vni << 8).to_be_bytes());
    p.extend_from_slice(&inner);
    p
}

fn vxlan(pg0: [u8; 6], vni: u32, i: u16) -> Vec<u8> {
    from_peer(pg0, 17, &vxlan_payload(vni, i))
}

/// [`vxlan`] over IPv6: from the peer to us ([`from_peer6`]), the UDP checksum set (IPv6
/// requires one).
fn vxlan6(pg0: [u8; 6], vni: u32, i: u16) -> Vec<u8> {
    let mut p = vxlan_payload(vni, i);
    sluice_wire::udp::UdpPacket::new_unchecked(&mut p[..]).fill_checksum_v6(PEER6, US6);
    from_peer6(pg0, US6, 17, &p)
}

/// pg0 (input side) and pg1; the underlay on `underlay` (10.0.0.1/24, peer .2).
fn base(underlay: &str) -> (Vlib, CommandTree<Vlib>) {
    let (mut vm, t) = crate::build(0);
    for c in [
        "create packet-generator interface pg0".to_string(),
        "create packet-generator interface pg1".to_string(),
        "set interface state pg0 up".to_string(),
        "set interface state pg1 up".to_string(),
        format!("set interface ip address {underlay} 10.0.0.1/24"),
        format!("ip neighbor {underlay} 10.0.0.2 02:00:00:00:00:02 static"),
    ] {
        cli(&mut vm, &t, &c);
    }
    (vm, t)
}

fn mac_of(vm: &Vlib, name: &str) -> [u8; 6] {
    let ifs = vm.ext::<sluice_vnet::Interfaces>().expect("interfaces");
    ifs.get(ifs.find(name).expect("interface"))
        .expect("live")
        .mac
}

#[allow(clippy::too_many_arguments)]
fn case(
    o: &crate::Opts,
    name: &str,
    vm: Vlib,
    t: &CommandTree<Vlib>,
    frames: &[Vec<u8>],
    path: &[&str],
    dir: &std::path::Path,
    out: &mut String,
    json: &mut Vec<String>,
) -> f64 {
    if o.only.as_deref().is_some_and(|w| !name.contains(w)) {
        return 0.0;
    }
    let pcap = dir.join(format!("{}.pcap", name.replace([' ', ','], "_")));
    write_pcap(&pcap, frames);
    let r = crate::replay_path(o, vm, t, crate::Replay::new(&pcap, path, name));
    let (a, m, b) = r.mpps;
    let path_clk: f64 = r.node_clocks.iter().map(|c| c.1).sum();
    let _ = writeln!(
        out,
        "| {name} | {a:.2} | {m:.2} | {b:.2} | {path_clk:.1} | {} |",
        r.node_clocks
            .iter()
            .map(|(n, c)| format!("{n} {c:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    json.push(format!(
        "\"tunnel_{}\": {{\"mpps\": [{a:.3}, {m:.3}, {b:.3}], \"path_clocks\": {path_clk:.2}, \"nodes\": {}}}",
        name.replace([' ', ','], "_"),
        crate::nodes_json(&r.node_clocks)
    ));
    m
}

const DECAP6_PATH: [&str; 8] = [
    "ethernet-input",
    "ip6-input",
    "ip6-lookup",
    "ip6-local",
    "vxlan6-input",
    "l2-input",
    "interface-output",
    "pg-tx",
];

const DECAP_PATH: [&str; 8] = [
    "ethernet-input",
    "ip4-input",
    "ip4-lookup",
    "ip4-local",
    "vxlan4-input",
    "l2-input",
    "interface-output",
    "pg-tx",
];

/// The case names (`case` and the per-protocol functions match `--only` by substring
/// against them; [`bench_tunnel`] lists them all for `check_only`).
const VXLAN_ENCAP: &str = "vxlan encap";
const SRV6_ENCAPS: &str = "srv6 t.encaps";
const SRV6_DX4: &str = "srv6 end.dx4";
/// The VXLAN decap cases' protocols and whether their underlay is IPv6 ([`vxlan_decap`]).
const VXLAN: [(&str, bool); 2] = [("vxlan", false), ("vxlan6", true)];
/// The L3 tunnel protocols of [`l3_tunnel`].
const L3: [&str; 3] = ["gre", "ipip", "gtpu"];

/// The name of VXLAN decap case of `proto` ("vxlan", "vxlan6") with `n` tunnels.
fn vxlan_decap_name(proto: &str, n: u32) -> String {
    format!("{proto} decap, {n} tunnel{}", if n > 1 { "s" } else { "" })
}

/// The names of the encap and decap cases of L3 tunnel `proto` with `n` tunnels.
fn l3_names(proto: &str, n: u32) -> [String; 2] {
    let suffix = if n > 1 {
        format!(", {n} tunnels")
    } else {
        String::new()
    };
    [
        format!("{proto} encap{suffix}"),
        format!("{proto} decap{suffix}"),
    ]
}

/// VXLAN decap with `n` tunnels, cross-connected to pg1; `v6`: over an IPv6 underlay
/// (2001:db8::1 on pg0, `vxlan6-input`; the case is "vxlan6 decap").
fn vxlan_decap(
    o: &crate::Opts,
    n: u32,
    v6: bool,
    dir: &std::path::Path,
    out: &mut String,
    json: &mut Vec<String>,
) -> f64 {
    let proto = VXLAN[v6 as usize].0;
    let ends = match v6 {
        true => "src 2001:db8::1 dst 2001:db8::2",
        false => "src 10.0.0.1 dst 10.0.0.2",
    };
    let name = vxlan_decap_name(proto, n);
    if o.only.as_deref().is_some_and(|w| !name.contains(w)) {
        return 0.0;
    }
    let (mut vm, t) = if v6 { base6("pg0") } else { base("pg0") };
    for v in 0..n {
        cli(
            &mut vm,
            &t,
            &format!("create vxlan tunnel {ends} vni {v} instance {v}"),
        );
        cli(
            &mut vm,
            &t,
            &format!("set interface state vxlan_tunnel{v} up"),
        );
        cli(
            &mut vm,
            &t,
            &format!("set interface l2 xconnect vxlan_tunnel{v} pg1"),
        );
    }
    let pg0 = mac_of(&vm, "pg0");
    // A pseudo-random VNI per frame: with n tunnels every lookup misses the one-entry cache.
    let frames: Vec<Vec<u8>> = spread(n)
        .into_iter()
        .zip(0u16..)
        .map(|(v, i)| {
            if v6 {
                vxlan6(pg0, v, i)
            } else {
                vxlan(pg0, v, i)
            }
        })
        .collect();
    let path = match v6 {
        true => DECAP6_PATH,
        false => DECAP_PATH,
    };
    case(o, &name, vm, &t, &frames, &path, dir, out, json)
}

/// Runs the tunnel benchmarks.
pub fn bench_tunnel(o: &crate::Opts, out: &mut String, json: &mut Vec<String>) {
    let n = std::env::var("SLUICE_BENCH_TUNNELS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000u32);
    // Every case name, from the functions the cases are named by, so that a string
    // matching none stops the run.
    let counts: &[u32] = if o.quick { &[1] } else { &[1, n] };
    let mut names = vec![VXLAN_ENCAP.to_string()];
    for &k in counts {
        names.extend(VXLAN.map(|(p, _)| vxlan_decap_name(p, k)));
        names.extend(L3.iter().flat_map(|p| l3_names(p, k)));
    }
    names.extend([SRV6_ENCAPS, SRV6_DX4].map(String::from));
    crate::check_only(
        o,
        &names.iter().map(String::as_str).collect::<Vec<_>>(),
        false,
    );
    // `--keep-inputs DIR` keeps each case's pcap (`<case>.pcap`) for VPP's side of
    // `scripts/tunnel-bench.sh --vpp`.
    let dir = crate::inputs_dir(o, "sluice-bench-tunnel");
    let _ = writeln!(out, "## Tunnels, one core, 64-byte inner frames\n");
    let _ = writeln!(
        out,
        "| case | Mpps min | median | max | path clk/pkt | clocks/packet per node |\n|---|---|---|---|---|---|"
    );
    // VXLAN encap: pg0 bridged with the tunnel (static MAC), underlay out of pg1.
    {
        let (mut vm, t) = base("pg1");
        for c in [
            "create vxlan tunnel src 10.0.0.1 dst 10.0.0.2 vni 13",
            "set interface state vxlan_tunnel0 up",
            "create bridge-domain 1 learn 0",
            "set interface l2 bridge pg0 1",
            "set interface l2 bridge vxlan_tunnel0 1",
            "l2fib add 02:bb:00:00:00:02 1 vxlan_tunnel0 static",
        ] {
            cli(&mut vm, &t, c);
        }
        let frames: Vec<Vec<u8>> = (0..4096u16).map(|i| inner(H2, H1, i)).collect();
        let path = [
            "ethernet-input",
            "l2-input",
            "vxlan4-encap",
            "ip4-lookup",
            "ip4-rewrite",
            "interface-output",
            "pg-tx",
        ];
        case(o, VXLAN_ENCAP, vm, &t, &frames, &path, &dir, out, json);
    }
    // VXLAN decap over IPv4, then IPv6: 1 tunnel, then (not with --quick) n.
    for (proto, v6) in VXLAN {
        let one = vxlan_decap(o, 1, v6, &dir, out, json);
        let many_name = vxlan_decap_name(proto, n);
        if !o.quick && o.only.as_deref().is_none_or(|w| many_name.contains(w)) {
            let many = vxlan_decap(o, n, v6, &dir, out, json);
            if one > 0.0 {
                let _ = writeln!(
                    out,
                    "\n{proto} decap {n} tunnels / 1 tunnel: {:.2}\n",
                    many / one
                );
            }
        }
    }
    // GRE L3, IP-in-IP and GTP-U with 1 tunnel, then (not with --quick) n tunnels.
    for proto in L3 {
        l3_tunnel(o, proto, 1, &dir, out, json);
    }
    if !o.quick {
        for proto in L3 {
            l3_tunnel(o, proto, n, &dir, out, json);
        }
    }
    srv6(o, &dir, out, json);
    crate::done_with_inputs(o, &dir);
}

/// GRE L3, IP-in-IP or GTP-U with `n` tunnels: encap (routed from pg0 into the tunnels,
/// underlay out of pg1) and decap (from pg0, routed out of pg1). With one tunnel the route
/// is 198.51.100.0/24 via it; with n, tunnel t (GRE and IP-in-IP: to `tunnel_peer(t)`;
/// GTP-U: to 10.0.0.2 with TEID 7 + t) has the route 198.18.x.y/32 (x.y = t), and every
/// frame goes to (comes from) a pseudo-random one of them (`spread`).
fn l3_tunnel(
    o: &crate::Opts,
    proto: &str,
    n: u32,
    dir: &std::path::Path,
    out: &mut String,
    json: &mut Vec<String>,
) {
    let [enc_name, dec_name] = l3_names(proto, n);
    if o.only
        .as_deref()
        .is_some_and(|w| !enc_name.contains(w) && !dec_name.contains(w))
    {
        return;
    }
    let (ifn, enc, dec) = match proto {
        "gre" => ("gre", "gre4-encap", "gre4-input"),
        "ipip" => ("ipip", "ipip4-encap", "ipip4-input"),
        _ => ("gtpu_tunnel", "gtpu4-encap", "gtpu4-input"),
    };
    let create = |vm: &mut Vlib, t: &CommandTree<Vlib>| {
        for k in 0..n {
            let [a, b, c, d] = tunnel_peer(k);
            let cmd = match proto {
                "gtpu" => format!(
                    "create gtpu tunnel src 10.0.0.1 dst 10.0.0.2 teid {}",
                    7 + k
                ),
                _ => format!("create {proto} tunnel src 10.0.0.1 dst {a}.{b}.{c}.{d}"),
            };
            cli(vm, t, &cmd);
            cli(vm, t, &format!("set interface state {ifn}{k} up"));
        }
    };
    // The underlay on `underlay`, the tunnels, and the LAN side (`lan`: its address and
    // neighbour), for both directions.
    let setup = |underlay: &str, lan: &[&str]| {
        let (mut vm, t) = base(underlay);
        create(&mut vm, &t);
        clis(&mut vm, &t, lan);
        (vm, t)
    };
    let picks = spread(n);
    let (mut vm, t) = setup(
        "pg1",
        &[
            "set interface ip address pg0 172.16.0.1/24",
            "ip neighbor pg0 172.16.0.2 02:aa:00:00:00:01 static",
        ],
    );
    if n == 1 {
        cli(
            &mut vm,
            &t,
            &format!("ip route add 198.51.100.0/24 via {ifn}0"),
        );
    } else {
        cli(&mut vm, &t, "ip route add 10.1.0.0/16 via 10.0.0.2 pg1");
        for k in 0..n {
            let r = format!("ip route add 198.18.{}.{}/32 via {ifn}{k}", k >> 8, k & 255);
            cli(&mut vm, &t, &r);
        }
    }
    let pg0 = mac_of(&vm, "pg0");
    let frames: Vec<Vec<u8>> = if n == 1 {
        (0..4096u32)
            .map(|i| routed(pg0, [198, 51, 100, i as u8]))
            .collect()
    } else {
        let dst = |k: u32| [198, 18, (k >> 8) as u8, k as u8];
        picks.iter().map(|&k| routed(pg0, dst(k))).collect()
    };
    let path = [
        "ethernet-input",
        "ip4-input",
        "ip4-lookup",
        "ip4-rewrite",
        "interface-output",
        enc,
        "pg-tx",
    ];
    case(o, &enc_name, vm, &t, &frames, &path, dir, out, json);
    // Decap: the underlay is pg0 here (frames come in on pg0), the LAN pg1.
    let (vm, t) = setup(
        "pg0",
        &[
            "set interface ip address pg1 198.51.100.1/24",
            "ip neighbor pg1 198.51.100.2 02:aa:00:00:00:01 static",
        ],
    );
    let pg0 = mac_of(&vm, "pg0");
    let frames: Vec<Vec<u8>> = picks
        .iter()
        .zip(0u32..)
        .map(|(&k, i)| {
            let ip = lan_udp(i);
            let (ipp, mut p) = match proto {
                "gre" => (47, vec![0, 0, 0x08, 0]),
                "gtpu" => {
                    let mut h = vec![0x08, 0x68, 0x08, 0x68];
                    h.extend_from_slice(&((16 + ip.len()) as u16).to_be_bytes());
                    h.extend_from_slice(&[0, 0, 0x30, 0xff]);
                    h.extend_from_slice(&(ip.len() as u16).to_be_bytes());
                    h.extend_from_slice(&(7 + k).to_be_bytes());
                    (17, h)
                }
                _ => (4, Vec::new()),
            };
            p.extend_from_slice(&ip);
            let src = if proto == "gtpu" {
                [10, 0, 0, 2]
            } else {
                tunnel_peer(k)
            };
            from_addr(pg0, src, ipp, &p)
        })
        .collect();
    let path = [
        "ethernet-input",
        "ip4-input",
        "ip4-lookup",
        "ip4-local",
        dec,
        "ip4-rewrite",
        "interface-output",
        "pg-tx",
    ];
    case(o, &dec_name, vm, &t, &frames, &path, dir, out, json);
}

/// IPv6 underlay on `underlay` (2001:db8::1/64, peer ::2; fc00:a::/32 routed to it).
fn base6(underlay: &str) -> (Vlib, CommandTree<Vlib>) {
    let (mut vm, t) = base(underlay);
    for c in [
        format!("set interface ip address {underlay} 2001:db8::1/64"),
        format!("ip neighbor {underlay} 2001:db8::2 02:00:00:00:00:02 static"),
        format!("ip route add fc00:a::/32 via 2001:db8::2 {underlay}"),
        "set sr encaps source addr 2001:db8::1".to_string(),
    ] {
        cli(&mut vm, &t, &c);
    }
    (vm, t)
}

/// SRv6 T.Encaps (a steered IPv4 prefix into a 2-segment policy, underlay out of pg1) and
/// End.DX4 (IPv6 + SRH with segments left 0 + IPv4 in on pg0, out of pg1).
fn srv6(o: &crate::Opts, dir: &std::path::Path, out: &mut String, json: &mut Vec<String>) {
    let (mut vm, t) = base6("pg1");
    clis(
        &mut vm,
        &t,
        &[
            "set interface ip address pg0 172.16.0.1/24",
            "sr policy add bsid fc00:5::b1 next fc00:a::1 next fc00:a::2 encap",
            "sr steer l3 198.51.100.0/24 via bsid fc00:5::b1",
        ],
    );
    let pg0 = mac_of(&vm, "pg0");
    let frames: Vec<Vec<u8>> = (0..4096u32)
        .map(|i| routed(pg0, [198, 51, 100, i as u8]))
        .collect();
    let path = [
        "ethernet-input",
        "ip4-input",
        "ip4-lookup",
        "ip4-rewrite",
        "interface-output",
        "sr-pl-rewrite-encaps",
        "ip6-lookup",
        "ip6-rewrite",
        "pg-tx",
    ];
    case(o, SRV6_ENCAPS, vm, &t, &frames, &path, dir, out, json);
    let (mut vm, t) = base6("pg0");
    clis(
        &mut vm,
        &t,
        &[
            "set interface ip address pg1 198.51.100.1/24",
            "ip neighbor pg1 198.51.100.2 02:aa:00:00:00:01 static",
            "sr localsid address fc00:5::d4 behavior end.dx4 pg1 198.51.100.2",
        ],
    );
    let pg0 = mac_of(&vm, "pg0");
    let sid = std::net::Ipv6Addr::new(0xfc00, 5, 0, 0, 0, 0, 0, 0xd4);
    let frames: Vec<Vec<u8>> = (0..4096u32)
        .map(|i| {
            // An SRH (segments left 0, the SID its one segment) and the inner IPv4 packet.
            let mut p = vec![4, 2, 4, 0, 0, 0, 0, 0];
            p.extend_from_slice(&sid.octets());
            p.extend(lan_udp(i));
            from_peer6(pg0, sid, 43, &p)
        })
        .collect();
    let path = [
        "ethernet-input",
        "ip6-input",
        "ip6-lookup",
        "sr-localsid",
        "ip4-rewrite",
        "pg-tx",
    ];
    case(o, SRV6_DX4, vm, &t, &frames, &path, dir, out, json);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `vxlan6` bench frame carries a valid UDP checksum: the library's verification
    /// accepts it and it equals the RFC 8200 §8.1 sum over a hand-built pseudo-header.
    #[test]
    fn vxlan6_frame_checksum_is_valid() {
        for (vni, i) in [(13, 0), (200, 1), (10_012, 0x3fff)] {
            let f = vxlan6([2, 0, 0, 0, 0, 1], vni, i);
            let (ip, udp) = f[14..].split_at(40);
            let src = std::net::Ipv6Addr::from(<[u8; 16]>::try_from(&ip[8..24]).unwrap());
            let dst = std::net::Ipv6Addr::from(<[u8; 16]>::try_from(&ip[24..40]).unwrap());
            let p = sluice_wire::udp::UdpPacket::new_checked(udp).unwrap();
            assert!(p.verify_checksum_v6(src, dst), "vni {vni} i {i}");
            let mut ph = ip[8..40].to_vec();
            ph.extend_from_slice(&(udp.len() as u32).to_be_bytes());
            ph.extend_from_slice(&[0, 0, 0, 17]);
            ph.extend_from_slice(udp);
            ph[40 + 6..40 + 8].fill(0);
            let c = match sluice_wire::checksum::internet_checksum(&ph) {
                0 => 0xffff,
                c => c,
            };
            assert_eq!(udp[6..8], c.to_be_bytes(), "vni {vni} i {i}");
        }
    }
}
