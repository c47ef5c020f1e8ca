//! Tunnels between two real daemons (docs/tunnels.md): GTP-U from one Sluice to another
//! over a memif link, IPv4 and IPv6 underlay, routed traffic from a packet generator on
//! each side through both. Every test ends with zero buffers in use.

#[path = "common/mod.rs"]
mod common;

use common::*;

/// pg<n>'s MAC.
const fn pg_mac(n: u8) -> [u8; 6] {
    [0x02, 0xfe, 0, 0, 0, n]
}
/// The hosts behind each side's packet generator.
const HOST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x10];
/// The memif MACs.
const A_MEMIF: &str = "02:fe:6d:00:00:01";
const B_MEMIF: &str = "02:fe:6d:00:00:02";

fn a6(s: &str) -> [u8; 16] {
    s.parse::<std::net::Ipv6Addr>().unwrap().octets()
}

/// An Ethernet frame to `dmac` from the host carrying a UDP datagram `src` → `dst` (IPv4,
/// checksum 0) with sequence number `seq`.
fn udp4(dmac: [u8; 6], src: [u8; 4], dst: [u8; 4], seq: u16) -> Vec<u8> {
    let payload = [seq as u8; 22];
    let mut h = vec![0u8; 28];
    h[0] = 0x45;
    h[2..4].copy_from_slice(&((28 + payload.len()) as u16).to_be_bytes());
    h[8] = 64;
    h[9] = 17;
    h[12..16].copy_from_slice(&src);
    h[16..20].copy_from_slice(&dst);
    let c = sluice_wire::checksum::internet_checksum(&h[..20]);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h[20..22].copy_from_slice(&(1000 + seq).to_be_bytes());
    h[22..24].copy_from_slice(&2000u16.to_be_bytes());
    h[24..26].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    [&dmac[..], &HOST_MAC, &[0x08, 0x00], &h, &payload].concat()
}

/// An Ethernet frame to `dmac` from the host carrying an IPv6 packet `src` → `dst` with no
/// next header (59) and `seq` in its payload.
fn ip6(dmac: [u8; 6], src: &str, dst: &str, seq: u16) -> Vec<u8> {
    let payload = [seq as u8; 26];
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    h.extend_from_slice(&[59, 64]);
    h.extend_from_slice(&a6(src));
    h.extend_from_slice(&a6(dst));
    [&dmac[..], &HOST_MAC, &[0x86, 0xdd], &h, &payload].concat()
}

/// `got` is `sent` routed twice: to `dmac` from `smac`, TTL / hop limit two less, the rest
/// unchanged (the IPv4 header checksum valid).
fn assert_routed_twice(got: &[Vec<u8>], sent: &[Vec<u8>], dmac: [u8; 6], smac: [u8; 6]) {
    assert_eq!(got.len(), sent.len());
    for (i, (g, s)) in got.iter().zip(sent).enumerate() {
        assert_eq!(&g[..6], &dmac, "dst MAC ({i})");
        assert_eq!(&g[6..12], &smac, "src MAC ({i})");
        let mut want = s[12..].to_vec();
        if s[12..14] == [0x08, 0x00] {
            want[2 + 8] -= 2;
            want[2 + 10..2 + 12].fill(0);
            let c = sluice_wire::checksum::internet_checksum(&want[2..22]);
            want[2 + 10..2 + 12].copy_from_slice(&c.to_be_bytes());
        } else {
            want[2 + 7] -= 2;
        }
        assert_eq!(&g[12..], &want[..], "packet {i}");
    }
}

/// A (memif master) and B (slave) each route a LAN behind a packet generator (A: pg0,
/// 10.0.0.0/24 and 2001:db8:a::/64; B: pg1, 10.2.0.0/24 and 2001:db8:b::/64) to the other
/// through two GTP-U tunnels over the memif underlay: `gtpu_tunnel0` over IPv4 (TEIDs 100
/// at A, 200 at B) carries IPv4, `gtpu_tunnel1` over IPv6 (TEIDs 300, 400) carries IPv6.
/// Traffic crosses both ways; tunnel counters on both sides agree with it, no decap error
/// is counted, no buffer leaks.
#[test]
fn gtpu_between_two_daemons_over_memif() {
    let dir = tmpdir("gtpu-pair-sock");
    let sock = dir.join("memif.sock");
    let a = Daemon::start("gtpu-pair-a", "");
    let b = Daemon::start("gtpu-pair-b", "");
    let side = |d: &Daemon, role: &str, me: u8, peer: u8, mac: &str, peer_mac: &str| {
        let pg = if me == 1 { "pg0" } else { "pg1" };
        let (lan, rlan) = if me == 1 { ("0", "2") } else { ("2", "0") };
        let (lan6, rlan6) = if me == 1 { ("a", "b") } else { ("b", "a") };
        let (teid, tteid) = if me == 1 { (100, 200) } else { (200, 100) };
        for c in [
            format!("create memif socket id 1 filename {}", sock.display()),
            format!("create interface memif id 0 socket-id 1 {role} hw-addr {mac}"),
            // pg0 on A, pg1 on B (pg1's MAC ends in 01).
            if me == 1 {
                "create packet-generator interface pg0".into()
            } else {
                "create packet-generator interface pg1".into()
            },
            format!("set interface state {pg} up"),
            "set interface state memif1/0 up".into(),
            format!("set interface ip address memif1/0 10.1.0.{me}/24"),
            format!("set interface ip address memif1/0 2001:db8:1::{me}/64"),
            format!("ip neighbor memif1/0 10.1.0.{peer} {peer_mac}"),
            format!("ip neighbor memif1/0 2001:db8:1::{peer} {peer_mac}"),
            format!("set interface ip address {pg} 10.{lan}.0.1/24"),
            format!("set interface ip address {pg} 2001:db8:{lan6}::1/64"),
            format!("ip neighbor {pg} 10.{lan}.0.99 02:00:00:00:00:99"),
            format!("ip neighbor {pg} 2001:db8:{lan6}::99 02:00:00:00:00:99"),
            format!("create gtpu tunnel src 10.1.0.{me} dst 10.1.0.{peer} teid {teid} tteid {tteid}"),
            format!(
                "create gtpu tunnel src 2001:db8:1::{me} dst 2001:db8:1::{peer} teid {} tteid {} decap-next ip6",
                teid + 200,
                tteid + 200
            ),
            "set interface state gtpu_tunnel0 up".into(),
            "set interface state gtpu_tunnel1 up".into(),
            format!("set interface ip address gtpu_tunnel0 10.99.0.{me}/30"),
            format!("ip route add 10.{rlan}.0.0/24 via gtpu_tunnel0"),
            format!("ip route add 2001:db8:{rlan6}::/64 via gtpu_tunnel1"),
        ] {
            d.ok(&c);
        }
    };
    side(&a, "master", 1, 2, A_MEMIF, B_MEMIF);
    side(&b, "slave", 2, 1, B_MEMIF, A_MEMIF);
    wait_for(&a, "show memif memif1/0", "link up", 15);
    wait_for(&b, "show memif memif1/0", "link up", 15);
    let show = a.ok("show gtpu tunnel");
    assert!(show.contains("teid 100"), "{show}");

    // A → B: 200 IPv4 and 100 IPv6 packets.
    let fwd4: Vec<Vec<u8>> = (0..200)
        .map(|i| udp4(pg_mac(0), [10, 0, 0, 16], [10, 2, 0, 99], i))
        .collect();
    let fwd6: Vec<Vec<u8>> = (0..100)
        .map(|i| ip6(pg_mac(0), "2001:db8:a::16", "2001:db8:b::99", i))
        .collect();
    let lan_host = [0x02, 0, 0, 0, 0, 0x99];
    let got = send(&a, "pg0", &b, "pg1", "f4", &fwd4, "");
    assert_routed_twice(&got, &fwd4, lan_host, pg_mac(1));
    let got = send(&a, "pg0", &b, "pg1", "f6", &fwd6, "");
    assert_routed_twice(&got, &fwd6, lan_host, pg_mac(1));
    // B → A.
    let rev4: Vec<Vec<u8>> = (0..150)
        .map(|i| udp4(pg_mac(1), [10, 2, 0, 16], [10, 0, 0, 99], i))
        .collect();
    let rev6: Vec<Vec<u8>> = (0..50)
        .map(|i| ip6(pg_mac(1), "2001:db8:b::16", "2001:db8:a::99", i))
        .collect();
    let got = send(&b, "pg1", &a, "pg0", "r4", &rev4, "");
    assert_routed_twice(&got, &rev4, lan_host, pg_mac(0));
    let got = send(&b, "pg1", &a, "pg0", "r6", &rev6, "");
    assert_routed_twice(&got, &rev6, lan_host, pg_mac(0));

    // Each tunnel's counters say what crossed it.
    for (d, tx4, rx4, tx6, rx6) in [(&a, 200, 150, 100, 50), (&b, 150, 200, 50, 100)] {
        assert_eq!(if_counter(d, "gtpu_tunnel0", "tx packets"), tx4);
        assert_eq!(if_counter(d, "gtpu_tunnel0", "rx packets"), rx4);
        assert_eq!(if_counter(d, "gtpu_tunnel1", "tx packets"), tx6);
        assert_eq!(if_counter(d, "gtpu_tunnel1", "rx packets"), rx6);
        assert_eq!(error_count(d, "gtpu4-input", "decapsulated"), rx4);
        assert_eq!(error_count(d, "gtpu6-input", "decapsulated"), rx6);
        // No GTP-U node counted a drop: `show errors` lists counters by description, its
        // last column the severity.
        let errs = d.ok("show errors");
        assert!(
            !errs.lines().any(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.get(1).is_some_and(|n| n.starts_with("gtpu")) && w.last() == Some(&"error")
            }),
            "{errs}"
        );
    }
    assert_no_leaks(&a);
    assert_no_leaks(&b);
    let _ = b.stop();
    let _ = a.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
