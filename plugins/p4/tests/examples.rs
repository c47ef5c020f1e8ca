//! The example programs compile in every optimisation mode and behave as written.

use sluice_p4::exec::{simulate, Outcome, Shared, ThreadState};
use sluice_p4::ir::{EntrySpec, Match, Opts, Program};

fn src(name: &str) -> String {
    std::fs::read_to_string(format!("{}/examples/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn all_opts() -> Vec<Opts> {
    let mut v = Vec::new();
    for bits in 0..16u8 {
        v.push(Opts {
            flat: bits & 1 != 0,
            resolved: bits & 2 != 0,
            no_redundant: bits & 4 != 0,
            dual: bits & 8 != 0,
        });
    }
    v
}

fn add(
    p: &Program,
    ts: &mut ThreadState,
    table: &str,
    action: &str,
    m: Vec<Match>,
    params: Vec<u64>,
    prio: u32,
) {
    let t = p
        .table(table)
        .unwrap_or_else(|e| panic!("table {table}: {e:?}"));
    let a = p.action_in(action, &p.tables[t].actions).unwrap();
    ts.tables[t]
        .add(
            &p.tables[t],
            &p.actions,
            &EntrySpec {
                matches: m,
                action: a,
                params,
                priority: prio,
            },
        )
        .unwrap();
}

/// A rule of the firewall's `acl` (source, protocol and destination port; any destination
/// address).
fn acl(
    p: &Program,
    ts: &mut ThreadState,
    action: &str,
    (src, proto, ports): ((u64, u64), (u64, u64), (u64, u64)),
    params: Vec<u64>,
    prio: u32,
) {
    let m = vec![
        Match::Ternary(src.0, src.1),
        Match::Ternary(0, 0),
        Match::Ternary(proto.0, proto.1),
        Match::Range(ports.0, ports.1),
    ];
    add(p, ts, "acl", action, m, params, prio);
}

fn ip4(ttl: u8, src: [u8; 4], dst: [u8; 4], proto: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0x02, 0xfe, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 0x10, 0x08, 0x00];
    let mut h = vec![0x45, 0, 0, 0, 0, 1, 0x40, 0, ttl, proto, 0, 0];
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    let tl = (20 + payload.len()) as u16;
    h[2..4].copy_from_slice(&tl.to_be_bytes());
    let c = sluice_wire::checksum::internet_checksum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&h);
    f.extend_from_slice(payload);
    f
}

#[test]
fn examples_compile_in_every_mode() {
    for f in ["router.p4", "l2switch.p4", "firewall.p4", "tunnel.p4"] {
        for o in all_opts() {
            let p = sluice_p4::compile(&src(f), f, o).unwrap_or_else(|e| panic!("{e}"));
            ThreadState::new(&p).unwrap();
        }
    }
}

#[test]
fn router_forwards_like_simple_router() {
    for o in all_opts() {
        let p = sluice_p4::compile(&src("router.p4"), "router.p4", o).unwrap();
        let mut ts = ThreadState::new(&p).unwrap();
        let sh = Shared::new(&p);
        add(
            &p,
            &mut ts,
            "ipv4_lpm",
            "set_nhop",
            vec![Match::Lpm(0x1400_0000, 8)],
            vec![0x0a00_0102, 2],
            0,
        );
        add(
            &p,
            &mut ts,
            "forward",
            "set_dmac",
            vec![Match::Exact(0x0a00_0102)],
            vec![0x0200_0000_0102],
            0,
        );
        add(
            &p,
            &mut ts,
            "send_frame",
            "rewrite_mac",
            vec![Match::Exact(2)],
            vec![0x02fe_0000_0002],
            0,
        );
        let pkt = ip4(
            64,
            [10, 0, 0, 16],
            [20, 1, 2, 3],
            17,
            &[1, 2, 3, 4, 5, 6, 7, 8],
        );
        let Outcome::Out(port, out) = simulate(&p, &mut ts, &sh, &pkt, 1) else {
            panic!("{o:?}: not forwarded")
        };
        assert_eq!(port, 2);
        let mut want = pkt.clone();
        want[0..6].copy_from_slice(&[2, 0, 0, 0, 1, 2]);
        want[6..12].copy_from_slice(&[2, 0xfe, 0, 0, 0, 2]);
        want[14 + 8] = 63;
        want[24..26].copy_from_slice(&[0, 0]);
        let c = sluice_wire::checksum::internet_checksum(&want[14..34]);
        want[24..26].copy_from_slice(&c.to_be_bytes());
        assert_eq!(out, want, "{o:?}");
        // No route, TTL 1, bad checksum, not IPv4, truncated: dropped.
        let miss = ip4(64, [10, 0, 0, 16], [30, 1, 2, 3], 17, &[0; 8]);
        assert_eq!(simulate(&p, &mut ts, &sh, &miss, 1), Outcome::Drop);
        let ttl1 = ip4(1, [10, 0, 0, 16], [20, 1, 2, 3], 17, &[0; 8]);
        assert_eq!(simulate(&p, &mut ts, &sh, &ttl1, 1), Outcome::Drop);
        let mut bad = pkt.clone();
        bad[24] ^= 1;
        assert_eq!(simulate(&p, &mut ts, &sh, &bad, 1), Outcome::Drop);
        let mut arp = pkt.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(simulate(&p, &mut ts, &sh, &arp, 1), Outcome::Drop);
        assert_eq!(simulate(&p, &mut ts, &sh, &pkt[..20], 1), Outcome::Drop);
        assert_eq!(simulate(&p, &mut ts, &sh, &[], 1), Outcome::Drop);
    }
}

#[test]
fn tunnel_encaps_and_decaps() {
    for o in all_opts() {
        let p = sluice_p4::compile(&src("tunnel.p4"), "tunnel.p4", o).unwrap();
        let mut ts = ThreadState::new(&p).unwrap();
        let sh = Shared::new(&p);
        add(
            &p,
            &mut ts,
            "tunnel_encap",
            "encap",
            vec![Match::Lpm(0x1400_0000, 8)],
            vec![
                0xc000_0201,
                0xc000_0202,
                3,
                0x0200_0000_0003,
                0x02fe_0000_0003,
            ],
            0,
        );
        add(
            &p,
            &mut ts,
            "tunnel_decap",
            "decap",
            vec![Match::Exact(0xc000_0201), Match::Lpm(0x0a00_0000, 8)],
            vec![1, 0x0200_0000_0001, 0x02fe_0000_0001],
            0,
        );
        let inner = ip4(64, [10, 0, 0, 16], [20, 1, 2, 3], 17, &[9; 12]);
        let Outcome::Out(3, enc) = simulate(&p, &mut ts, &sh, &inner, 1) else {
            panic!("{o:?}")
        };
        assert_eq!(enc.len(), inner.len() + 20);
        assert_eq!(&enc[12..14], &[8, 0]);
        assert_eq!(enc[14], 0x45);
        assert_eq!(enc[14 + 9], 4);
        assert_eq!(
            u16::from_be_bytes([enc[16], enc[17]]) as usize,
            inner.len() - 14 + 20
        );
        assert_eq!(sluice_wire::checksum::internet_checksum(&enc[14..34]), 0);
        assert_eq!(sluice_wire::checksum::internet_checksum(&enc[34..54]), 0);
        assert_eq!(enc[34 + 8], 63);
        assert_eq!(&enc[54..], &inner[34..]);
        // Decap it back (as received by the far end: outer dst 192.0.2.1).
        let mut back = enc.clone();
        back[14 + 16..14 + 20].copy_from_slice(&[192, 0, 2, 1]);
        back[14 + 20 + 16..14 + 20 + 20].copy_from_slice(&[10, 0, 0, 16]);
        let Outcome::Out(1, dec) = simulate(&p, &mut ts, &sh, &back, 3) else {
            panic!("{o:?}")
        };
        assert_eq!(dec.len(), inner.len());
        assert_eq!(dec[14 + 8], 62);
        assert_eq!(sluice_wire::checksum::internet_checksum(&dec[14..34]), 0);
    }
}

#[test]
fn firewall_priorities_counters_registers_meters() {
    for o in all_opts() {
        let p = sluice_p4::compile(&src("firewall.p4"), "firewall.p4", o).unwrap();
        let mut ts = ThreadState::new(&p).unwrap();
        let sh = Shared::new(&p);
        add(
            &p,
            &mut ts,
            "fib",
            "route",
            vec![Match::Lpm(0, 0)],
            vec![2, 0x0200_0000_0002, 0x02fe_0000_0002],
            0,
        );
        // Deny UDP to ports 1000-2000 from 10/8 (priority 10); allow 10.0.0.16 to anything
        // (priority 20); police TCP (class 3).
        acl(
            &p,
            &mut ts,
            "deny",
            ((0x0a00_0000, 0xff00_0000), (17, 0xff), (1000, 2000)),
            vec![7],
            10,
        );
        acl(
            &p,
            &mut ts,
            "allow",
            ((0x0a00_0010, 0xffff_ffff), (0, 0), (0, 65535)),
            vec![8],
            20,
        );
        acl(
            &p,
            &mut ts,
            "police",
            ((0, 0), (6, 0xff), (0, 65535)),
            vec![9, 3],
            5,
        );
        let udp = |src: [u8; 4], port: u16| {
            ip4(
                64,
                src,
                [20, 1, 2, 3],
                17,
                &[0, 53, (port >> 8) as u8, port as u8, 0, 8, 0, 0],
            )
        };
        assert_eq!(
            simulate(&p, &mut ts, &sh, &udp([10, 0, 0, 17], 1500), 1),
            Outcome::Drop
        );
        assert!(matches!(
            simulate(&p, &mut ts, &sh, &udp([10, 0, 0, 16], 1500), 1),
            Outcome::Out(2, _)
        ));
        assert!(matches!(
            simulate(&p, &mut ts, &sh, &udp([10, 0, 0, 17], 2001), 1),
            Outcome::Out(2, _)
        ));
        let c = p
            .counters
            .iter()
            .position(|c| c.name == "rule_hits")
            .unwrap();
        assert_eq!(ts.counters[c][7][0], 1);
        assert_eq!(ts.counters[c][8][0], 1);
        assert_eq!(ts.counters[c][0][0], 1);
        let r = p
            .registers
            .iter()
            .position(|r| r.name == "last_denied")
            .unwrap();
        assert_eq!(
            sh.registers[r][0].load(std::sync::atomic::Ordering::Relaxed),
            0x0a00_0011
        );
        // Meter class 3: 1 packet burst, very low rate -> the second TCP packet is red.
        sh.meters[0][3].set(&sluice_p4::exec::MeterConf {
            cir: 1.0,
            cburst: 1,
            pir: 1.0,
            pburst: 1,
        });
        let tcp = ip4(64, [10, 9, 9, 9], [20, 1, 2, 3], 6, &[0; 20]);
        assert!(matches!(
            simulate(&p, &mut ts, &sh, &tcp, 1),
            Outcome::Out(2, _)
        ));
        assert_eq!(simulate(&p, &mut ts, &sh, &tcp, 1), Outcome::Drop);
    }
}

#[test]
fn l2switch_static_tables_and_direct_counter() {
    for o in all_opts() {
        let p = sluice_p4::compile(&src("l2switch.p4"), "l2switch.p4", o).unwrap();
        let mut ts = ThreadState::new(&p).unwrap();
        let sh = Shared::new(&p);
        add(
            &p,
            &mut ts,
            "dmac",
            "forward",
            vec![Match::Exact(0x02fe_0000_0001)],
            vec![2],
            0,
        );
        add(
            &p,
            &mut ts,
            "smac",
            "NoAction",
            vec![Match::Exact(0x0200_0000_0010)],
            vec![],
            0,
        );
        let f = ip4(64, [1, 1, 1, 1], [2, 2, 2, 2], 17, &[0; 8]);
        assert_eq!(
            simulate(&p, &mut ts, &sh, &f, 1),
            Outcome::Out(2, f.clone())
        );
        assert_eq!(simulate(&p, &mut ts, &sh, &f, 2), Outcome::Drop, "hairpin");
        let mut g = f.clone();
        g[5] = 9;
        assert_eq!(simulate(&p, &mut ts, &sh, &g, 1), Outcome::Drop);
        let t = p.table("smac").unwrap();
        let id = ts.tables[t]
            .find(&[Match::Exact(0x0200_0000_0010)], 0)
            .unwrap();
        assert_eq!(ts.tables[t].direct[id as usize][0], 3);
        assert_eq!(ts.tables[t].direct[id as usize][1], 3 * f.len() as u64);
    }
}

mod robustness {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
        /// Mutated programs never panic the compiler or the Rust generator (`sluice-p4c`);
        /// what compiles never panics on packets.
        #[test]
        fn mutated_programs_never_panic(
            which in 0usize..5,
            edits in prop::collection::vec((any::<u16>(), any::<u8>(), 0u8..3), 1..6),
            pkts in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..80), 1..6),
        ) {
            let name = ["router.p4", "l2switch.p4", "firewall.p4", "tunnel.p4", "control_flow.p4"][which];
            let mut b = src(name).into_bytes();
            for (pos, byte, op) in edits {
                let p = pos as usize % (b.len() + 1);
                match op {
                    0 => b.insert(p, byte),
                    1 if p < b.len() => { b.remove(p); }
                    _ if p < b.len() => b[p] = byte,
                    _ => {}
                }
            }
            let text = String::from_utf8_lossy(&b);
            if let Ok(p) = sluice_p4::compile(&text, name, Opts::default()) {
                let _ = sluice_p4::gen::rust(&p, "m", name);
                if let Ok(mut ts) = ThreadState::new(&p) {
                    let sh = Shared::new(&p);
                    for pk in &pkts {
                        let _ = simulate(&p, &mut ts, &sh, pk, 1);
                    }
                }
            }
        }
    }
}

/// `Program::parse_verify_stateless` (what auto mode's split of a frame needs): true for the
/// examples, false when verify reads a register or executes a meter (directly or in an
/// action it calls).
#[test]
fn parse_verify_stateless_sees_registers_and_meters() {
    for f in ["router.p4", "l2switch.p4", "firewall.p4"] {
        let p = sluice_p4::compile(&src(f), f, Opts::default()).unwrap();
        assert!(p.parse_verify_stateless(), "{f}");
    }
    let empty = "control FwVerify(inout headers hdr, inout metadata meta) { apply { } }";
    for verify in [
        "control FwVerify(inout headers hdr, inout metadata meta) {
            register<bit<16>>(4) r;
            apply { r.read(meta.rule, 0); }
        }",
        "control FwVerify(inout headers hdr, inout metadata meta) {
            meter(4, MeterType.packets) m;
            action a() { m.execute_meter(32w1, meta.colour); }
            apply { a(); }
        }",
    ] {
        let s = src("firewall.p4");
        assert!(s.contains(empty));
        let s = s.replace(empty, verify);
        let p = sluice_p4::compile(&s, "firewall.p4", Opts::default())
            .unwrap_or_else(|e| panic!("{verify}: {e}"));
        assert!(!p.parse_verify_stateless(), "{verify}");
    }
}

/// Issue 18's data-plane state with several workers, on the firewall: two threads, each
/// with its own tables and counters (as each worker's node instance), share one `Shared`
/// (the registers and meters, one copy for every worker). Every TCP packet is policed by
/// meter class 3 (100-packet committed and 300-packet peak bursts, a rate that adds no
/// token during the test): the two threads together get exactly 100 green, 200 yellow and
/// the rest red (dropped), however their packets interleave; each thread's indexed counter
/// counts its own packets (the control plane sums the threads' copies); the denied UDP
/// packets of both threads write the register, which holds one thread's source, never a
/// mixture.
#[test]
fn firewall_state_is_correct_with_two_workers() {
    let p = sluice_p4::compile(&src("firewall.p4"), "firewall.p4", Opts::default()).unwrap();
    let sh = Shared::new(&p);
    sh.meters[0][3].set(&sluice_p4::exec::MeterConf {
        cir: 1e-6,
        cburst: 100,
        pir: 1e-6,
        pburst: 300,
    });
    let rule_hits = p
        .counters
        .iter()
        .position(|c| c.name == "rule_hits")
        .unwrap();
    let last_denied = p
        .registers
        .iter()
        .position(|r| r.name == "last_denied")
        .unwrap();
    const N: usize = 1000;
    let tcp = ip4(64, [10, 9, 9, 9], [20, 1, 2, 3], 6, &[0; 20]);
    let runs: Vec<(usize, usize, u64, u64)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2u8)
            .map(|w| {
                let (p, sh, tcp) = (&p, &sh, &tcp);
                s.spawn(move || {
                    let mut ts = ThreadState::new(p).unwrap();
                    add(
                        p,
                        &mut ts,
                        "fib",
                        "route",
                        vec![Match::Lpm(0, 0)],
                        vec![2, 2, 3],
                        0,
                    );
                    acl(
                        p,
                        &mut ts,
                        "police",
                        ((0, 0), (6, 0xff), (0, 65535)),
                        vec![9, 3],
                        5,
                    );
                    acl(
                        p,
                        &mut ts,
                        "deny",
                        ((0, 0), (17, 0xff), (0, 65535)),
                        vec![7],
                        10,
                    );
                    let udp = ip4(64, [10, 0, 0, 100 + w], [20, 1, 2, 3], 17, &[0; 8]);
                    let (mut fwd, mut drop) = (0, 0);
                    for _ in 0..N {
                        match simulate(p, &mut ts, sh, tcp, 1) {
                            Outcome::Out(2, _) => fwd += 1,
                            Outcome::Drop => drop += 1,
                            o => panic!("{o:?}"),
                        }
                        assert_eq!(simulate(p, &mut ts, sh, &udp, 1), Outcome::Drop);
                    }
                    let c = &ts.counters[rule_hits];
                    (fwd, drop, c[9][0], c[7][0])
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let fwd: usize = runs.iter().map(|r| r.0).sum();
    let drop: usize = runs.iter().map(|r| r.1).sum();
    assert_eq!((fwd, drop), (300, 2 * N - 300), "{runs:?}");
    for r in &runs {
        assert_eq!((r.2, r.3), (N as u64, N as u64), "{runs:?}");
    }
    let reg = sh.registers[last_denied][0].load(std::sync::atomic::Ordering::Relaxed);
    assert!([0x0a00_0064, 0x0a00_0065].contains(&reg), "{reg:#x}");
}
