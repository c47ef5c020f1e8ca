//! Malformed tunnel packets never panic and never leak: valid VXLAN, GRE (L3, TEB, keyed)
//! and IP-in-IP packets over IPv4 and IPv6 underlays, mutated (bytes flipped in the outer
//! and tunnel headers, truncated at every length), go through the real graph with tunnels
//! of every kind configured; every buffer comes back.

mod common;
use common::*;

#[test]
fn mutated_tunnel_packets_are_dropped_or_forwarded_never_leaked() {
    let (mut vm, t) = routed();
    clis(
        &mut vm,
        &t,
        &[
            "create vxlan tunnel src 10.0.0.1 dst 10.0.0.2 vni 5",
            "create vxlan tunnel src 2001:db8::1 dst 2001:db8::2 vni 5",
            "create gre tunnel src 10.0.0.1 dst 10.0.0.2",
            "create gre tunnel src 10.0.0.1 dst 10.0.0.2 teb key 9",
            "create gre tunnel src 2001:db8::1 dst 2001:db8::2",
            "create ipip tunnel src 10.0.0.1 dst 10.0.0.2",
            "create ipip tunnel src 2001:db8::1 dst 2001:db8::2",
            "set interface l2 bridge pg1 1",
        ],
    );
    for i in ["vxlan_tunnel0", "vxlan_tunnel1", "gre1"] {
        cli(&mut vm, &t, &format!("set interface state {i} up"));
        cli(&mut vm, &t, &format!("set interface l2 bridge {i} 1"));
    }
    for i in ["gre0", "gre2", "ipip0", "ipip1"] {
        cli(&mut vm, &t, &format!("set interface state {i} up"));
    }
    let pg0 = mac_of(&vm, "pg0");
    let peer = [0x02, 0, 0, 0, 0, 2];
    let inner = inner_frame([0x02, 0xaa, 0, 0, 0, 1], [0x02, 0xbb, 0, 0, 0, 2], 20);
    let ip_in = inner[14..].to_vec();
    let mut payloads: Vec<(u8, Vec<u8>)> = Vec::new();
    let mut vx = vec![
        0x12, 0x34, 0x12, 0xb5, 0, 0, 0, 0, 0x08, 0, 0, 0, 0, 0, 5, 0,
    ];
    vx.extend_from_slice(&inner);
    let l = vx.len() as u16;
    vx[4..6].copy_from_slice(&l.to_be_bytes());
    payloads.push((17, vx));
    let mut g = vec![0, 0, 0x08, 0];
    g.extend_from_slice(&ip_in);
    payloads.push((47, g));
    let mut g = vec![0x20, 0, 0x65, 0x58, 0, 0, 0, 9];
    g.extend_from_slice(&inner);
    payloads.push((47, g));
    payloads.push((4, ip_in.clone()));
    let mut frames = Vec::new();
    for v6 in [false, true] {
        for (proto, p) in &payloads {
            let mut f = eth(pg0, peer, if v6 { 0x86dd } else { 0x0800 });
            if v6 {
                f.extend(ip6(
                    a6("2001:db8::2"),
                    a6("2001:db8::1"),
                    *proto,
                    p.len(),
                    64,
                ));
            } else {
                f.extend(ip4([10, 0, 0, 2], [10, 0, 0, 1], *proto, p.len(), 64));
            }
            f.extend_from_slice(p);
            frames.push(f);
        }
    }
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut all = frames.clone();
    for f in &frames {
        let hdr = if f[12] == 0x86 { 14 + 40 } else { 14 + 20 };
        for _ in 0..150 {
            let mut m = f.clone();
            let k = 1 + rnd() % 3;
            for _ in 0..k {
                // Mostly the tunnel header and the inner header, sometimes the outer.
                let span = (hdr + 40).min(m.len());
                let at = (rnd() as usize) % span;
                m[at] ^= 1 << (rnd() % 8);
            }
            all.push(m);
        }
        for cut in (14..f.len()).step_by(3) {
            let mut m = f.clone();
            m.truncate(cut);
            // Keep the outer length consistent half the time (a truncated tunnel packet).
            if cut % 2 == 0 && cut > hdr {
                if f[12] == 0x86 {
                    let pl = (cut - hdr) as u16;
                    m[18..20].copy_from_slice(&pl.to_be_bytes());
                } else {
                    let tl = (cut - 14) as u16;
                    m[16..18].copy_from_slice(&tl.to_be_bytes());
                    m[24..26].copy_from_slice(&[0, 0]);
                    let c = sluice_wire::checksum::internet_checksum(&m[14..34]);
                    m[24..26].copy_from_slice(&c.to_be_bytes());
                }
            }
            all.push(m);
        }
    }
    let decap = |vm: &sluice_graph::Vlib| -> u64 {
        [
            "vxlan4-input",
            "vxlan6-input",
            "gre4-input",
            "gre6-input",
            "ipip4-input",
            "ipip6-input",
        ]
        .iter()
        .map(|n| counter(vm, n, "decapsulated"))
        .sum()
    };
    // The unmutated packets alone: each one is decapsulated but the keyed TEB one over IPv6
    // (only the IPv4 TEB tunnel has key 9), which is counted as having no tunnel.
    run(&mut vm, &t, "pg0", "pg1", &frames, 0);
    assert_eq!(
        decap(&vm),
        frames.len() as u64 - 1,
        "valid packets decapsulated"
    );
    assert_eq!(counter(&vm, "gre6-input", "no_such_tunnel"), 1);
    // Then everything: the mutated packets are forwarded or dropped; what matters is that
    // nothing panics or leaks.
    run(&mut vm, &t, "pg0", "pg1", &all, 0);
    assert!(decap(&vm) >= 2 * (frames.len() as u64 - 1));
    assert_eq!(in_use(&vm), 0);
}
