//! The vector executor (`vec`) and the generated code (`gen`, `sluice-p4c`) against the
//! per-packet executor (`exec::simulate`): the same tables and packets give the same
//! outcomes, bytes and counters, frame by frame.

use proptest::prelude::*;
use sluice_p4::exec::{simulate_parse, Outcome, ParseEnd, Shared, ThreadState};
use sluice_p4::ir::{EntrySpec, Match, Opts, Program};
use sluice_p4::vec::{simulate_frame, VCode, VOut};
use std::sync::atomic::Ordering;

fn src(name: &str) -> String {
    std::fs::read_to_string(format!("{}/examples/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn add(
    p: &Program,
    ts: &mut ThreadState,
    table: &str,
    action: &str,
    m: Vec<Match>,
    params: Vec<u64>,
) {
    let t = p
        .table(table)
        .unwrap_or_else(|e| panic!("table {table}: {e:?}"));
    let a = p.action_in(action, &p.tables[t].actions).unwrap();
    let spec = EntrySpec {
        matches: m,
        action: a,
        params,
        priority: 0,
    };
    // Random tables may repeat a key: the first one stays, as in both executors.
    let _ = ts.tables[t].add(&p.tables[t], &p.actions, &spec);
}

fn ip4(ttl: u8, dst: [u8; 4], ihl: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0x02, 0xfe, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 0x10, 0x08, 0x00];
    let mut h = vec![
        0x40 | ihl,
        0,
        0,
        0,
        0,
        1,
        0x40,
        0,
        ttl,
        17,
        0,
        0,
        10,
        0,
        0,
        16,
    ];
    h.extend_from_slice(&dst);
    let tl = (20 + payload.len()) as u16;
    h[2..4].copy_from_slice(&tl.to_be_bytes());
    let c = sluice_wire::checksum::internet_checksum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&h);
    f.extend_from_slice(payload);
    f
}

/// Both executors over the same packets, from identical tables; outcomes, table counters,
/// counters and registers must agree.
fn compare(p: &Program, setup: &dyn Fn(&mut ThreadState), pkts: &[(Vec<u8>, u32)]) {
    compare_with(p, setup, &|_| {}, pkts)
}

/// The registers' cells.
fn regs(sh: &Shared) -> Vec<Vec<u64>> {
    sh.registers
        .iter()
        .map(|r| r.iter().map(|a| a.load(Ordering::Relaxed)).collect())
        .collect()
}

/// [`compare`] with registers and meters set up by `shs` (each executor its own).
fn compare_with(
    p: &Program,
    setup: &dyn Fn(&mut ThreadState),
    shs: &dyn Fn(&Shared),
    pkts: &[(Vec<u8>, u32)],
) {
    let code = VCode::new(p).expect("vector executor");
    let (mut ta, mut tb) = (ThreadState::new(p).unwrap(), ThreadState::new(p).unwrap());
    setup(&mut ta);
    setup(&mut tb);
    let (sa, sb) = (Shared::new(p), Shared::new(p));
    shs(&sa);
    shs(&sb);
    let (want, want_pe): (Vec<Outcome>, Vec<ParseEnd>) = pkts
        .iter()
        .map(|(b, port)| simulate_parse(p, &mut ta, &sa, b, *port))
        .unzip();
    let got = simulate_frame(&code, &mut tb, &sb, pkts);
    assert_eq!(regs(&sa), regs(&sb), "registers");
    for (k, (w, g)) in want.iter().zip(&got).enumerate() {
        assert_eq!(w, g, "packet {k}: {:02x?}", pkts[k].0);
    }
    for (a, b) in ta.tables.iter().zip(&tb.tables) {
        assert_eq!(a.miss, b.miss);
        assert_eq!(a.direct, b.direct);
    }
    assert_eq!(ta.counters, tb.counters);
    // The program's generated code, when it has some (every example `vec` runs does).
    // Both of its single-node entry points: `packet`, and the staged node's `packet_pre`
    // on the lookup of a guessed key (`packet_staged`), also on a wrong guess, which it
    // must not use (`packet_misguessed`).
    let gen = sluice_p4::generated::find(p);
    if let Some(g) = gen {
        check_key_guess(g.name, pkts);
    }
    for (how, f) in gen.iter().flat_map(|g| {
        [
            ("packet", g.packet),
            ("staged", g.packet_staged),
            ("misguessed", g.packet_misguessed),
        ]
    }) {
        let name = gen.map_or("", |g| g.name);
        let mut tc = ThreadState::new(p).unwrap();
        let sc = Shared::new(p);
        shs(&sc);
        setup(&mut tc);
        for (k, (b, port)) in pkts.iter().enumerate() {
            let mut d = b.clone();
            let (o, pe) = f(&mut tc, &sc, 0, &mut d, *port, b.len() as u32);
            let got = match o {
                VOut::Drop => Outcome::Drop,
                VOut::Punt => Outcome::Punt(d),
                VOut::Port(o) => Outcome::Out(o, d),
            };
            assert_eq!(
                want[k], got,
                "generated `{name}' {how}, packet {k}: {b:02x?}"
            );
            // How the parser ended (what the node counts: rejects, parser errors).
            assert_eq!(
                want_pe[k], pe,
                "generated `{name}' {how} parse end, packet {k}: {b:02x?}"
            );
        }
        for (a, c) in ta.tables.iter().zip(&tc.tables) {
            assert_eq!(a.miss, c.miss, "{how}");
            assert_eq!(a.direct, c.direct, "{how}");
        }
        assert_eq!(ta.counters, tc.counters, "{how}");
        assert_eq!(regs(&sa), regs(&sc), "registers (generated {how})");
    }
    if std::env::var("P4_VEC_DEBUG").is_ok() {
        let fwd = got.iter().filter(|o| matches!(o, Outcome::Out(..))).count();
        let changed = got
            .iter()
            .zip(pkts)
            .filter(|(o, (b, _))| matches!(o, Outcome::Out(_, x) if x != b))
            .count();
        eprintln!("{} packets: {fwd} out, {changed} changed", pkts.len());
    }
}

/// The staged node's key guess reads the first table's key where the parser puts it: the
/// router's IPv4 destination address (a whole Ethernet and IPv4 header), the l2 switch's
/// source MAC address (a whole Ethernet header). A guess read from the wrong bytes would
/// pass every comparison (the packet looks its key up again when the guess is wrong).
fn check_key_guess(name: &str, pkts: &[(Vec<u8>, u32)]) {
    use sluice_p4::gen::rt::Generated;
    use sluice_p4::generated::{l2switch, router};
    let be = |b: &[u8]| b.iter().fold(0u64, |a, &x| a << 8 | x as u64);
    for (k, (b, _)) in pkts.iter().enumerate() {
        match name {
            "router" if b.len() >= 34 && b[12..14] == [0x08, 0x00] => {
                assert_eq!(
                    router::Prog::key_guess(b),
                    Some(be(&b[30..34])),
                    "packet {k}"
                );
            }
            "router" if b.len() < 34 => assert_eq!(router::Prog::key_guess(b), None),
            "l2switch" if b.len() >= 14 => {
                assert_eq!(
                    l2switch::Prog::key_guess(b),
                    Some(be(&b[6..12])),
                    "packet {k}"
                );
            }
            "l2switch" => assert_eq!(l2switch::Prog::key_guess(b), None),
            _ => {}
        }
    }
}

/// The route's prefix value and length (host bits cleared, length at most 32).
fn route_match(pfx: u32, len: u8) -> Match {
    let l = len.min(32);
    let v = if l == 0 {
        0
    } else {
        pfx & (u32::MAX << (32 - l as u32))
    };
    Match::Lpm(v as u64, l)
}

/// The router's tables: `routes` added, then for each of `churn` (route index, re-add,
/// port shift) that route deleted and, when re-added, added back with another port, so
/// the shared next-hop records are freed and reused before the packets run.
fn router_setup<'a>(
    p: &'a Program,
    routes: &'a [(u32, u8, u8)],
    churn: &'a [(usize, bool, u8)],
) -> impl Fn(&mut ThreadState) + 'a {
    move |ts: &mut ThreadState| {
        let add_route = |ts: &mut ThreadState, pfx: u32, len: u8, port: u8| {
            let nh = 0x0a00_0100 | port as u64;
            add(
                p,
                ts,
                "ipv4_lpm",
                "set_nhop",
                vec![route_match(pfx, len)],
                vec![nh, port as u64 % 4],
            );
            add(
                p,
                ts,
                "forward",
                "set_dmac",
                vec![Match::Exact(nh)],
                vec![0x0200_0000_0100 | port as u64],
            );
        };
        for &(pfx, len, port) in routes {
            add_route(ts, pfx, len, port);
        }
        let lpm = p.table("ipv4_lpm").unwrap();
        for &(i, readd, shift) in churn {
            let Some(&(pfx, len, port)) = routes.get(i % routes.len().max(1)) else {
                break;
            };
            // A key deleted before (or repeated in `routes`) is not there: NotFound.
            let _ = ts.tables[lpm].del(&[route_match(pfx, len)], 0);
            if readd {
                add_route(ts, pfx, len, (port + 1 + shift % 3) % 4);
            }
        }
        for port in 0..3u64 {
            add(
                p,
                ts,
                "send_frame",
                "rewrite_mac",
                vec![Match::Exact(port)],
                vec![0x02fe_0000_0000 | port],
            );
        }
    }
}

fn router() -> Program {
    sluice_p4::compile(&src("router.p4"), "router.p4", Opts::default()).unwrap()
}

#[test]
fn router_fixed_cases() {
    let p = router();
    let routes = [
        (0x1400_0000, 8, 2),
        (0x1401_0000, 16, 1),
        (0x1e00_0000, 8, 3),
    ];
    let good = ip4(64, [20, 1, 2, 3], 5, &[1, 2, 3, 4, 5, 6, 7, 8]);
    let mut bad = good.clone();
    bad[24] ^= 1;
    let mut arp = good.clone();
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    let pkts: Vec<(Vec<u8>, u32)> = vec![
        (good.clone(), 1),
        (ip4(64, [20, 9, 2, 3], 5, &[0; 8]), 1),
        (ip4(2, [30, 1, 2, 3], 5, &[0; 8]), 1),
        (ip4(1, [20, 1, 2, 3], 5, &[0; 8]), 1),
        (ip4(64, [40, 1, 2, 3], 5, &[0; 8]), 1),
        (ip4(64, [20, 1, 2, 3], 6, &[0; 8]), 1),
        (bad, 1),
        (arp, 1),
        (good[..20].to_vec(), 1),
        (good[..14].to_vec(), 1),
        (Vec::new(), 1),
        (ip4(0xff, [20, 1, 2, 3], 5, &[0; 8]), 2),
    ];
    compare(&p, &router_setup(&p, &routes, &[]), &pkts);
}

/// The staged node's guess is used when its key is the packet's: `packet_pre` given the
/// packet's own key paired with another route's entry follows that route, and given that
/// entry under another key ignores it. (The differential tests cannot tell a guess used
/// from one looked up again: both give the same route.)
#[test]
fn generated_router_uses_a_guess_of_its_own_key() {
    use sluice_p4::gen::rt::Generated;
    use sluice_p4::generated::router::Prog;
    let p = router();
    let lpm = p.table("ipv4_lpm").unwrap();
    let mut ts = ThreadState::new(&p).unwrap();
    router_setup(&p, &[(0x1400_0000, 8, 1), (0x1e00_0000, 8, 2)], &[])(&mut ts);
    let sh = Shared::new(&p);
    let other = ts.tables[lpm].lookup64(0x1e01_0203);
    assert!(other.is_some() && other != ts.tables[lpm].lookup64(0x1401_0203));
    let pkt = ip4(64, [20, 1, 2, 3], 5, &[0; 8]);
    let key = Prog::key_guess(&pkt).expect("a guess");
    let out = |ts: &mut ThreadState, pre| {
        let mut d = pkt.clone();
        let o = Prog::packet_pre(ts, &sh, 0, &mut d, 1, pkt.len() as u32, pre).0;
        (o, d[..6].to_vec())
    };
    // Route 20/8 leaves on port 1 to next hop dmac 02:00:00:00:01:01, 30/8 on port 2
    // to 02:00:00:00:01:02.
    let mine = (VOut::Port(1), vec![2, 0, 0, 0, 1, 1]);
    let theirs = (VOut::Port(2), vec![2, 0, 0, 0, 1, 2]);
    assert_eq!(out(&mut ts, None), mine);
    let own = ts.tables[lpm].lookup64(key);
    assert_eq!(out(&mut ts, Some((key, own))), mine);
    assert_eq!(
        out(&mut ts, Some((key, other))),
        theirs,
        "the guess's entry used"
    );
    assert_eq!(
        out(&mut ts, Some((key ^ 1, other))),
        mine,
        "another key's entry"
    );
}

/// The generated router finds `forward`'s entry through a memo in the route's record
/// (`gen::rt::chained`): the memo follows every change of `forward` between packets, and
/// a route moved to another next hop, in both single-node entry points.
#[test]
fn generated_router_next_hop_memo_follows_table_changes() {
    let p = router();
    let g = sluice_p4::generated::find(&p).expect("router generated");
    let fwd = p.table("forward").unwrap();
    let lpm = p.table("ipv4_lpm").unwrap();
    let pkt = ip4(64, [20, 1, 2, 3], 5, &[0; 8]);
    for (how, f) in [("packet", g.packet), ("staged", g.packet_staged)] {
        let mut ts = ThreadState::new(&p).unwrap();
        // Route 20/8 to next hop 10.0.1.1 (dmac 02:00:00:00:01:01), port 1.
        router_setup(&p, &[(0x1400_0000, 8, 1)], &[])(&mut ts);
        let sh = Shared::new(&p);
        let dmac = |ts: &mut ThreadState| {
            let mut d = pkt.clone();
            match f(ts, &sh, 0, &mut d, 1, pkt.len() as u32).0 {
                VOut::Port(_) => Some(d[..6].iter().fold(0u64, |a, &b| a << 8 | b as u64)),
                _ => None,
            }
        };
        let nh = 0x0a00_0101;
        assert_eq!(dmac(&mut ts), Some(0x0200_0000_0101), "{how}");
        // The packet left `forward`'s result in the memo of the route's record.
        let rec = ts.tables[lpm].lookup64(0x1401_0203);
        assert!(rec.is_some(), "{how}: route");
        let m = ts.tables[lpm].recs[rec.unwrap() as usize].memo[0];
        assert_eq!(
            (m.key, m.ver, m.id),
            (nh, ts.tables[fwd].ver(), ts.tables[fwd].lookup64(nh)),
            "{how}: memo"
        );
        assert!(m.id.is_some(), "{how}: memo hit");
        assert_eq!(dmac(&mut ts), Some(0x0200_0000_0101), "{how}: again");
        ts.tables[fwd].del(&[Match::Exact(nh)], 0).unwrap();
        assert_eq!(dmac(&mut ts), None, "{how}: next hop deleted");
        add(
            &p,
            &mut ts,
            "forward",
            "set_dmac",
            vec![Match::Exact(nh)],
            vec![0x0200_0000_0999],
        );
        assert_eq!(
            dmac(&mut ts),
            Some(0x0200_0000_0999),
            "{how}: next hop changed"
        );
        // Another next hop's entry added: the route's next hop is unchanged.
        add(
            &p,
            &mut ts,
            "forward",
            "set_dmac",
            vec![Match::Exact(nh + 1)],
            vec![0x0200_0000_0777],
        );
        assert_eq!(
            dmac(&mut ts),
            Some(0x0200_0000_0999),
            "{how}: other next hop added"
        );
        // The route moved to that next hop (a new record).
        ts.tables[lpm]
            .del(&[route_match(0x1400_0000, 8)], 0)
            .unwrap();
        add(
            &p,
            &mut ts,
            "ipv4_lpm",
            "set_nhop",
            vec![route_match(0x1400_0000, 8)],
            vec![nh + 1, 1],
        );
        assert_eq!(dmac(&mut ts), Some(0x0200_0000_0777), "{how}: route moved");
    }
}

#[test]
fn the_examples_the_vector_executor_runs_have_generated_code() {
    for f in ["router.p4", "l2switch.p4", "control_flow.p4"] {
        let p = sluice_p4::compile(&src(f), f, Opts::default()).unwrap();
        let g = sluice_p4::generated::find(&p).unwrap_or_else(|| panic!("{f}: not generated"));
        assert_eq!(g.source, format!("plugins/p4/examples/{f}"));
    }
    // Anything else (another option, another constant) is not the generated program.
    let o = Opts {
        dual: false,
        ..Opts::default()
    };
    let p = sluice_p4::compile(&src("router.p4"), "router.p4", o).unwrap();
    assert!(sluice_p4::generated::find(&p).is_none());
    let s = src("router.p4").replace("hdr.ipv4.ttl > 1", "hdr.ipv4.ttl > 2");
    let p = sluice_p4::compile(&s, "router.p4", Opts::default()).unwrap();
    assert!(sluice_p4::generated::find(&p).is_none());
}

/// The per-packet executor reuses its packet state: a header the parser did not extract
/// this time reads 0 (as in the vector executor), not the previous packet's bytes.
#[test]
fn an_invalid_header_reads_zero_after_a_valid_one() {
    const PROG: &str = r#"
#include <core.p4>
#include <v1model.p4>
header eth_t { bit<48> dst; bit<48> src; bit<16> typ; }
header h_t { bit<8> x; }
struct headers { eth_t eth; h_t h; }
struct metadata { }
parser P(packet_in pk, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start {
        pk.extract(hdr.eth);
        transition select(hdr.eth.typ) { 0x0800: ph; default: accept; }
    }
    state ph { pk.extract(hdr.h); transition accept; }
}
control V(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    apply { sm.egress_spec = (bit<9>) hdr.h.x; }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control C(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pk, in headers hdr) { apply { pk.emit(hdr.eth); pk.emit(hdr.h); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"#;
    use sluice_p4::exec::{Ctx, Exec, Verdict};
    let p = sluice_p4::compile(PROG, "stale.p4", Opts::default()).unwrap();
    let code = sluice_p4::code::Code::new(&p);
    let mut ts = ThreadState::new(&p).unwrap();
    let sh = Shared::new(&p);
    let mut x = Exec {
        prog: &p,
        code: &code,
        ts: &mut ts,
        shared: &sh,
        now_ns: 0,
        pkt_len: 0,
    };
    let mut c = Box::<Ctx>::default();
    let mut with_h = vec![0u8; 12];
    with_h.extend_from_slice(&[0x08, 0x00, 7]);
    let mut without_h = vec![0u8; 12];
    without_h.extend_from_slice(&[0x08, 0x06, 7]);
    let mut got = Vec::new();
    for pkt in [&with_h, &without_h, &with_h] {
        x.begin(&mut c, 1, pkt.len() as u32);
        got.push(x.pipeline(&mut c, pkt).unwrap().0);
    }
    assert_eq!(got, [Verdict::Port(7), Verdict::Port(0), Verdict::Port(7)]);
    // The vector executor and the reference model agree.
    compare(
        &p,
        &|_| {},
        &[(with_h.clone(), 1), (without_h, 1), (with_h, 1)],
    );
}

#[test]
fn unsupported_programs_say_why() {
    for (f, why) in [
        ("tunnel.p4", "validity"),
        (
            "firewall-rmw",
            "register `last_denied' used at several places",
        ),
    ] {
        let p = if f == "firewall-rmw" {
            firewall_rmw()
        } else {
            sluice_p4::compile(&src(f), f, Opts::default()).unwrap()
        };
        let e = VCode::new(&p).err().expect(f);
        assert!(e.contains(why), "{f}: {e}");
    }
    let o = Opts {
        flat: false,
        ..Opts::default()
    };
    let p = sluice_p4::compile(&src("router.p4"), "router.p4", o).unwrap();
    assert!(VCode::new(&p).is_err());
}

/// Control flow the router does not use: switch on action_run, hit/miss, exit and return,
/// nested action calls with arguments, slices, concatenation, an indexed counter.
fn flow() -> Program {
    sluice_p4::compile(&src("control_flow.p4"), "control_flow.p4", Opts::default()).unwrap()
}

/// control_flow.p4 rejects EtherType 0x2000 (v1model: ingress still runs): the generated
/// code ends the parse as the interpreters do, so the node counts the reject.
#[test]
fn generated_parser_reject_matches() {
    let p = flow();
    assert!(
        sluice_p4::generated::find(&p).is_some(),
        "control_flow has generated code"
    );
    let frame = |typ: [u8; 2], len: usize| {
        let mut b = vec![
            2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, typ[0], typ[1], 0xaa, 0xaa,
        ];
        b.truncate(len);
        b
    };
    let pk = vec![
        (frame([0x20, 0x00], 16), 0),
        (frame([0x08, 0x00], 16), 1),
        (frame([0x20, 0x00], 16), 2),
        (frame([0x08, 0x00], 10), 0),
    ];
    let mut ts = ThreadState::new(&p).unwrap();
    let sh = Shared::new(&p);
    let (_, pe) = simulate_parse(&p, &mut ts, &sh, &pk[0].0, 0);
    assert!(
        matches!(pe, ParseEnd::Error(_)),
        "0x2000 is rejected: {pe:?}"
    );
    compare(&p, &flow_setup(&[]), &pk);
}

fn flow_setup(rules: &[(u8, u16, u16, u8, u8)]) -> impl Fn(&mut ThreadState) + '_ {
    let p = flow();
    move |ts: &mut ThreadState| {
        let t = p.table("t").unwrap();
        for (k, &(d, v, m, act, y)) in rules.iter().enumerate() {
            let (a, params) = match act % 3 {
                0 => ("outer", vec![y as u64, (y % 4) as u64]),
                1 => ("stop", vec![]),
                _ => ("nop", vec![]),
            };
            let a = p.action_in(a, &p.tables[t].actions).unwrap();
            let spec = EntrySpec {
                matches: vec![
                    Match::Exact(d as u64),
                    Match::Ternary((v & m) as u64, m as u64),
                ],
                action: a,
                params,
                priority: k as u32,
            };
            let _ = ts.tables[t].add(&p.tables[t], &p.actions, &spec);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random routes and packets (some bad: TTL, checksum, options, truncated, not IPv4).
    #[test]
    fn router_vector_matches_per_packet(
        routes in prop::collection::vec((any::<u32>(), 0u8..=32, 0u8..4), 0..12),
        churn in prop::collection::vec((any::<usize>(), any::<bool>(), any::<u8>()), 0..8),
        pkts in prop::collection::vec((any::<[u8; 4]>(), 0u8..4, 0u8..8, 0usize..40, any::<u16>()), 1..300),
    ) {
        let p = router();
        let mut dsts: Vec<[u8; 4]> = routes.iter().map(|r| r.0.to_be_bytes()).collect();
        dsts.push([1, 2, 3, 4]);
        let pk: Vec<(Vec<u8>, u32)> = pkts
            .iter()
            .enumerate()
            .map(|(k, &(d, ttl, kind, cut, noise))| {
                let dst = if kind < 4 { dsts[k % dsts.len()] } else { d };
                let mut b = ip4([64, 2, 1, 0][ttl as usize], dst, 5, &[0; 10]);
                match kind {
                    5 => b[24] ^= noise as u8 | 1,
                    6 => b.truncate(cut),
                    7 => b[12..14].copy_from_slice(&noise.to_be_bytes()),
                    _ => {}
                }
                (b, (k % 3) as u32)
            })
            .collect();
        compare(&p, &router_setup(&p, &routes, &churn), &pk);
        // Not pre-resolved (parameters read from the pool at the record's offset): the
        // same outcomes, so a reused record's pool parameters are its own.
        let pu = sluice_p4::compile(
            &src("router.p4"),
            "router.p4",
            Opts { resolved: false, ..Opts::default() },
        )
        .unwrap();
        let (mut ta, mut tu) = (ThreadState::new(&p).unwrap(), ThreadState::new(&pu).unwrap());
        router_setup(&p, &routes, &churn)(&mut ta);
        router_setup(&pu, &routes, &churn)(&mut tu);
        let (sa, su) = (Shared::new(&p), Shared::new(&pu));
        for (k, (b, port)) in pk.iter().enumerate() {
            prop_assert_eq!(
                simulate_parse(&p, &mut ta, &sa, b, *port),
                simulate_parse(&pu, &mut tu, &su, b, *port),
                "packet {} (not pre-resolved): {:02x?}", k, b
            );
        }
    }

    /// The control-flow program with random ternary rules and frames.
    #[test]
    fn control_flow_vector_matches_per_packet(
        rules in prop::collection::vec((any::<u8>(), any::<u16>(), any::<u16>(), any::<u8>(), any::<u8>()), 0..10),
        frames in prop::collection::vec((any::<[u8; 14]>(), 0u8..4, 0usize..20, 0u32..3), 1..300),
    ) {
        let p = flow();
        let pk: Vec<(Vec<u8>, u32)> = frames
            .iter()
            .map(|(h, typ, cut, port)| {
                let mut b = h.to_vec();
                if *typ < 3 {
                    b[12..14].copy_from_slice(&[[0x08, 0x00], [0x10, 0x42], [0x20, 0x00]][*typ as usize]);
                }
                if !rules.is_empty() && h[0] % 2 == 0 {
                    b[5] = rules[h[1] as usize % rules.len()].0;
                }
                b.extend_from_slice(&[0xaa; 6]);
                if *cut < 14 {
                    b.truncate(*cut);
                }
                (b, *port)
            })
            .collect();
        compare(&p, &flow_setup(&rules), &pk);
    }
}

/// The firewall with its register also read (in `allow`): a read-modify-write across
/// packets, which needs per-packet order.
fn firewall_rmw() -> Program {
    let src = src("firewall.p4").replace(
        "    action allow(bit<16> rule) {\n        meta.rule = rule;\n",
        "    action allow(bit<16> rule) {\n        meta.rule = rule;\n        last_denied.read(hdr.ipv4.dstAddr, 0);\n",
    );
    assert!(src.contains("last_denied.read"));
    sluice_p4::compile(&src, "firewall.p4", Opts::default()).unwrap()
}

/// The firewall's ACL (deny writes a register, police runs a meter, every rule counts) and
/// route, as in `examples.rs`.
fn firewall_setup(p: &Program, ts: &mut ThreadState) {
    let mut put = |table: &str, action: &str, m: Vec<Match>, params: Vec<u64>, priority| {
        let t = p.table(table).unwrap();
        let a = p.action_in(action, &p.tables[t].actions).unwrap();
        let spec = EntrySpec {
            matches: m,
            action: a,
            params,
            priority,
        };
        ts.tables[t].add(&p.tables[t], &p.actions, &spec).unwrap();
    };
    let any = Match::Ternary(0, 0);
    put(
        "fib",
        "route",
        vec![Match::Lpm(0, 0)],
        vec![2, 0x0200_0000_0002, 0x02fe_0000_0002],
        0,
    );
    put(
        "acl",
        "deny",
        vec![any, any, Match::Ternary(17, 0xff), Match::Range(1000, 2000)],
        vec![7],
        10,
    );
    put(
        "acl",
        "police",
        vec![any, any, Match::Ternary(6, 0xff), Match::Range(0, 65535)],
        vec![9, 3],
        5,
    );
}

/// Registers, counters and meters on the vector executor and the generated code (packet by
/// packet and four at a time) against the per-packet executor: the same colours (a meter
/// with a 3-packet burst turns packets red), register cells and counters.
#[test]
fn firewall_registers_counters_meters_match_per_packet() {
    let p = sluice_p4::compile(&src("firewall.p4"), "firewall.p4", Opts::default()).unwrap();
    assert!(
        VCode::new(&p).is_ok(),
        "one register write, one meter: vector"
    );
    assert!(
        sluice_p4::generated::find(&p).is_some(),
        "firewall is generated"
    );
    let meter = |sh: &Shared| {
        sh.meters[0][3].set(&sluice_p4::exec::MeterConf {
            cir: 1.0,
            cburst: 2,
            pir: 1.0,
            pburst: 3,
        })
    };
    let mut pkts = Vec::new();
    for k in 0..41u8 {
        // UDP to port 900 + 50k (denied in 1000-2000), TCP (policed), from 10.0.0.k.
        let tcp = k % 3 == 0;
        let port = 900 + 50 * k as u16;
        let mut b = ip4(
            64,
            [20, 1, 2, k],
            5,
            &[0, 53, (port >> 8) as u8, port as u8, 0, 8, 0, 0],
        );
        b[14 + 15] = k;
        if tcp {
            b[14 + 9] = 6;
        }
        b[24..26].fill(0);
        let c = sluice_wire::checksum::internet_checksum(&b[14..34]);
        b[24..26].copy_from_slice(&c.to_be_bytes());
        pkts.push((b, 1));
    }
    compare_with(&p, &|ts| firewall_setup(&p, ts), &meter, &pkts);
    // Some packets were denied, some policed red, some forwarded.
    let code = VCode::new(&p).unwrap();
    let mut ts = ThreadState::new(&p).unwrap();
    firewall_setup(&p, &mut ts);
    let sh = Shared::new(&p);
    meter(&sh);
    let out = simulate_frame(&code, &mut ts, &sh, &pkts);
    let fwd = out.iter().filter(|o| matches!(o, Outcome::Out(..))).count();
    assert!(fwd > 3 && fwd < pkts.len() - 10, "{fwd} forwarded");
    assert_eq!(
        regs(&sh)[0][0],
        0x0a00_0016,
        "last denied source (10.0.0.22)"
    );
    let rule = p
        .counters
        .iter()
        .position(|c| c.name == "rule_hits")
        .unwrap();
    assert!(ts.counters[rule][7][0] > 0 && ts.counters[rule][9][0] > 0);
}

/// A program whose register is read and written at different places still has generated
/// code (packet after packet, as the per-packet executor).
#[test]
fn generated_code_runs_a_read_modify_write() {
    let p = firewall_rmw();
    let src = sluice_p4::gen::rust(&p, "x", "x.p4").unwrap();
    assert!(src.contains("reg_read(sh, 0, 0)"), "{src}");
    assert!(src.contains("reg_write(sh, 0, "), "{src}");
}

/// CI found this one (2026-11-29): an empty frame (the parse fails before `eth` is valid)
/// whose all-zero key still hits a rule that writes the invalid header's field.
#[test]
fn control_flow_empty_frame_writes_invalid_header() {
    let p = flow();
    let rules = [(0u8, 128u16, 15872u16, 42u8, 0u8)];
    compare(&p, &flow_setup(&rules), &[(vec![], 0)]);
}

fn l2switch() -> Program {
    sluice_p4::compile(&src("l2switch.p4"), "l2switch.p4", Opts::default()).unwrap()
}

/// A station MAC of the l2 switch's tables (`i` < 8: known to `smac`, and to `dmac` on
/// port `i % 4`).
fn l2_mac(i: u8) -> u64 {
    0x0210_0000_0000 | i as u64
}

fn l2_setup(p: &Program) -> impl Fn(&mut ThreadState) + '_ {
    move |ts: &mut ThreadState| {
        for i in 0..8u8 {
            add(
                p,
                ts,
                "smac",
                "NoAction",
                vec![Match::Exact(l2_mac(i))],
                vec![],
            );
            add(
                p,
                ts,
                "dmac",
                "forward",
                vec![Match::Exact(l2_mac(i))],
                vec![i as u64 % 4],
            );
        }
    }
}

/// The l2 switch (`GUESS`: its staged entry point `packet_staged` runs, with an exact
/// first table, `smac`, and its direct counter) against the per-packet executor: hits and
/// misses of both tables, a frame sent back to its ingress port (dropped), short frames.
#[test]
fn l2switch_generated_matches_per_packet() {
    let p = l2switch();
    let g = sluice_p4::generated::find(&p).expect("l2switch has generated code");
    assert!(g.guess, "the l2 switch runs in stages");
    let frame = |dst: u64, src: u64, len: usize| {
        let mut f = dst.to_be_bytes()[2..].to_vec();
        f.extend_from_slice(&src.to_be_bytes()[2..]);
        f.extend_from_slice(&[0x88, 0xb5]);
        f.extend((0..46).map(|j| j as u8));
        f.truncate(len);
        f
    };
    let (known, unknown) = (l2_mac, |i: u8| 0x0220_0000_0000 | i as u64);
    let mut pk = Vec::new();
    for i in 0..40u8 {
        let dst = if i % 3 == 0 { unknown(i) } else { known(i % 8) };
        let src = if i % 5 == 0 {
            unknown(i)
        } else {
            known(i / 2 % 8)
        };
        let len = if i % 11 == 7 { 10 } else { 60 + i as usize };
        pk.push((frame(dst, src, len), (i as u32 + 1) % 4));
    }
    // To the port it came in on: dropped after both tables.
    pk.push((frame(known(2), known(3), 60), 2));
    let setup = l2_setup(&p);
    // The traffic hits and misses both tables, so the comparison counts something.
    let mut ts = ThreadState::new(&p).unwrap();
    setup(&mut ts);
    let sh = Shared::new(&p);
    for (b, port) in &pk {
        simulate_parse(&p, &mut ts, &sh, b, *port);
    }
    let (smac, dmac) = (p.table("smac").unwrap(), p.table("dmac").unwrap());
    assert!(ts.tables[smac].miss[0] > 0 && ts.tables[dmac].miss[0] > 0);
    assert!(ts.tables[smac].direct.iter().any(|c| c[0] > 0));
    compare(&p, &setup, &pk);
}
