//! `l2-input`: cross-connect, bridging (flood, forward, filter), learning events.

use super::*;
use sluice_buffer::BufIdx;

/// loop0 (from `setup`), loop1 and loop2 up; `l2-input` under test.
pub(super) fn three_ports() -> (NodeTest, [u32; 3]) {
    let (mut t, l0) = setup("l2-input");
    t.cli(
        "create loopback interface
         create loopback interface
         set interface state loop1 up
         set interface state loop2 up",
    );
    let (l1, l2) = (t.sw_if("loop1"), t.sw_if("loop2"));
    (t, [l0, l1, l2])
}

/// Frames received on `rx` with the L2 metadata `ethernet-input` sets: bridge domain `bd`
/// (0: cross-connected to `tx`).
pub(super) fn receive(t: &mut NodeTest, rx: u32, bd: u16, tx: u32, frames: &[Vec<u8>]) {
    let bufs: Vec<BufIdx> = frames
        .iter()
        .map(|f| {
            t.packet(f, |h| {
                h.rx_if = rx;
                h.tx_if = tx;
                h.l2.bd_index = bd;
            })
        })
        .collect();
    t.inject(&bufs);
}

pub(super) fn frame(dst: [u8; 6], src: [u8; 6]) -> Vec<u8> {
    let mut f = udp4("10.0.0.2", "10.0.0.3");
    f[0..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f
}

pub(super) const A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
pub(super) const B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];

/// The frames sent to `interface-output`, as (last byte, tx interface), sorted: test frames
/// are told apart by their last byte.
fn tagged_out(t: &NodeTest) -> Vec<(u8, u32)> {
    let mut got: Vec<(u8, u32)> = t
        .arc("interface-output")
        .iter()
        .map(|p| (p.data[p.data.len() - 1], p.hdr.tx_if))
        .collect();
    got.sort();
    got
}

/// The tx interfaces of the frames sent to `interface-output`, sorted.
fn sorted_tx(t: &NodeTest) -> Vec<u32> {
    let mut tx: Vec<u32> = t
        .arc("interface-output")
        .iter()
        .map(|p| p.hdr.tx_if)
        .collect();
    tx.sort();
    tx
}

#[test]
fn xconnect_sends_every_frame_to_the_peer() {
    let (mut t, [l0, l1, _]) = three_ports();
    t.cli("set interface l2 xconnect loop0 loop1");
    receive(&mut t, l0, 0, l1, &[frame(B, A), frame([0xff; 6], A)]);
    let out = t.arc("interface-output");
    assert_eq!(out.len(), 2);
    assert!(out.iter().all(|p| p.hdr.tx_if == l1));
    assert_eq!(out[0].data, frame(B, A), "unchanged");
    t.assert_counters(&[("xconnect", 2)]);
    t.assert_no_leaks();
}

#[test]
fn bridge_floods_broadcast_to_every_other_member_and_learns() {
    let (mut t, [l0, l1, l2]) = three_ports();
    t.cli(
        "set interface l2 bridge loop0 1
         set interface l2 bridge loop1 1
         set interface l2 bridge loop2 1",
    );
    receive(&mut t, l0, 1, 0, &[frame([0xff; 6], A)]);
    let tx = sorted_tx(&t);
    assert_eq!(tx, [l1, l2], "a copy and the original");
    t.assert_counters(&[("flooded", 1), ("learn_events", 1)]);
    t.assert_no_leaks();
}

#[test]
fn bridge_forwards_to_a_known_mac_and_filters_hairpins() {
    let (mut t, [l0, l1, _]) = three_ports();
    t.cli(
        "set interface l2 bridge loop0 1
         set interface l2 bridge loop1 1
         set interface l2 bridge loop2 1
         l2fib add 02:00:00:00:00:0b 1 loop1 static
         l2fib add 02:00:00:00:00:0a 1 loop0 static",
    );
    receive(&mut t, l0, 1, 0, &[frame(B, A), frame(A, A)]);
    let out = t.arc("interface-output");
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].hdr.tx_if, l1);
    assert_eq!(t.drops(), [("l2-input".to_string(), "filtered")]);
    t.assert_counters(&[("forwarded", 1), ("filtered", 1)]);
    t.assert_no_leaks();
}

/// `flood` and `uu-flood` are told apart: with `flood 1 uu-flood 0` a broadcast (never
/// looked up) is flooded and an unknown unicast (looked up, no entry) is dropped as
/// `uu_dropped`; with `flood 0 uu-flood 1` the other way round, the broadcast dropped as
/// `flood_dropped`. Treating a broadcast as an unknown unicast (or the reverse) sends each
/// frame the wrong way or counts its drop under the wrong reason.
#[test]
fn broadcast_follows_flood_and_unknown_unicast_follows_uu_flood() {
    const C: [u8; 6] = [2, 0, 0, 0, 0, 0xc];
    for (flood, uu_flood) in [(1, 0), (0, 1)] {
        let (mut t, [l0, l1, l2]) = three_ports();
        t.cli(&format!(
            "create bridge-domain 1 flood {flood} uu-flood {uu_flood}
             set interface l2 bridge loop0 1
             set interface l2 bridge loop1 1
             set interface l2 bridge loop2 1"
        ));
        // The broadcast's and the unknown unicast's last bytes tell their copies apart.
        let mut bc = frame([0xff; 6], A);
        let mut uu = frame(C, A);
        let last = bc.len() - 1;
        (bc[last], uu[last]) = (1, 2);
        receive(&mut t, l0, 1, 0, &[bc, uu]);
        let got = tagged_out(&t);
        let flooded = if flood == 1 { 1 } else { 2 };
        assert_eq!(got, [(flooded, l1), (flooded, l2)], "flood {flood}");
        let dropped = if flood == 1 {
            "uu_dropped"
        } else {
            "flood_dropped"
        };
        assert_eq!(t.drops(), [("l2-input".to_string(), dropped)]);
        t.assert_counters(&[("flooded", 1), (dropped, 1), ("learn_events", 1)]);
        t.assert_no_leaks();
    }
}

/// With `forward 0` a known destination takes the unknown-unicast path: dropped as
/// `uu_dropped` under `uu-flood 0`, flooded under `uu-flood 1`, never forwarded to the port
/// the L2 FIB names.
#[test]
fn forward_off_sends_a_known_mac_the_unknown_unicast_way() {
    for uu_flood in [0, 1] {
        let (mut t, [l0, l1, l2]) = three_ports();
        t.cli(&format!(
            "create bridge-domain 1 forward 0 flood 1 uu-flood {uu_flood}
             set interface l2 bridge loop0 1
             set interface l2 bridge loop1 1
             set interface l2 bridge loop2 1
             l2fib add 02:00:00:00:00:0b 1 loop1 static
             l2fib add 02:00:00:00:00:0a 1 loop0 static"
        ));
        receive(&mut t, l0, 1, 0, &[frame(B, A)]);
        let tx = sorted_tx(&t);
        if uu_flood == 1 {
            assert_eq!(tx, [l1, l2]);
            t.assert_counters(&[("flooded", 1)]);
        } else {
            assert_eq!(tx, []);
            assert_eq!(t.drops(), [("l2-input".to_string(), "uu_dropped")]);
            t.assert_counters(&[("uu_dropped", 1)]);
        }
        t.assert_no_leaks();
    }
}

/// `l2-input` looks a key up once for a run of packets with the same destination (or
/// source): every packet of a frame that mixes runs of known, unknown and broadcast
/// destinations still goes where its own destination says, and a run of one source learns
/// once.
#[test]
fn runs_of_one_destination_in_a_frame_each_go_to_their_own_port() {
    let (mut t, [l0, l1, l2]) = three_ports();
    t.cli(
        "set interface l2 bridge loop0 1
         set interface l2 bridge loop1 1
         set interface l2 bridge loop2 1
         l2fib add 02:00:00:00:00:0a 1 loop1 static
         l2fib add 02:00:00:00:00:0b 1 loop2 static",
    );
    const C: [u8; 6] = [2, 0, 0, 0, 0, 0xc];
    const E: [u8; 6] = [2, 0, 0, 0, 0, 0xe];
    const G: [u8; 6] = [2, 0, 0, 0, 0, 0x6];
    let dsts = [A, A, B, B, A, C, C, A, [0xff; 6], A, B, A];
    let srcs = [E, E, E, G, G, E, E, E, E, G, G, E];
    let frames: Vec<Vec<u8>> = dsts
        .iter()
        .zip(&srcs)
        .enumerate()
        .map(|(i, (&d, &s))| {
            let mut f = frame(d, s);
            let last = f.len() - 1;
            f[last] = i as u8;
            f
        })
        .collect();
    receive(&mut t, l0, 1, 0, &frames);
    let got = tagged_out(&t);
    let mut want = Vec::new();
    for (i, d) in dsts.iter().enumerate() {
        match *d {
            A => want.push((i as u8, l1)),
            B => want.push((i as u8, l2)),
            _ => want.extend([(i as u8, l1), (i as u8, l2)]),
        }
    }
    want.sort();
    assert_eq!(got, want);
    t.assert_counters(&[("forwarded", 9), ("flooded", 3), ("learn_events", 2)]);
    t.assert_no_leaks();
}

/// A frame of 40 packets (12 distinct destination and 12 distinct source keys: under the
/// 16-key bucket look-ahead, with runs of one destination, source and bridge domain
/// crossing packet index 16) from two rx interfaces in two
/// bridge domains that both hold MAC A (to different ports): each packet goes where its own
/// bridge domain's FIB says, and each unknown source learns once per change of its rx
/// interface (source E is static in one bridge domain only), so a destination or source
/// key, home or FIB value reused across bridge domains changes the ports or the learn
/// events.
#[test]
fn a_long_frame_across_two_bridge_domains_and_two_rx_ports() {
    let (mut t, [l0, l1, l2]) = three_ports();
    t.cli(
        "create loopback interface
         create loopback interface
         set interface state loop3 up
         set interface state loop4 up
         set interface l2 bridge loop0 1
         set interface l2 bridge loop1 1
         set interface l2 bridge loop2 1
         set interface l2 bridge loop3 2
         set interface l2 bridge loop4 2
         l2fib add 02:00:00:00:00:0a 1 loop1 static
         l2fib add 02:00:00:00:00:0b 1 loop2 static
         l2fib add 02:00:00:00:00:0a 2 loop4 static
         l2fib add 02:00:00:00:00:0e 1 loop0 static",
    );
    let (l3, l4) = (t.sw_if("loop3"), t.sw_if("loop4"));
    const C: [u8; 6] = [2, 0, 0, 0, 0, 0xc];
    const E: [u8; 6] = [2, 0, 0, 0, 0, 0xe];
    const G: [u8; 6] = [2, 0, 0, 0, 0, 0x6];
    let members = |bd: u16| {
        if bd == 1 {
            vec![l0, l1, l2]
        } else {
            vec![l3, l4]
        }
    };
    let fib = |bd: u16, d: [u8; 6]| match (bd, d) {
        (1, A) => Some(l1),
        (1, B) => Some(l2),
        (2, A) => Some(l4),
        _ => None,
    };
    // (bridge domain, rx, destination, source) of packet i.
    let pkt = |i: usize| {
        let bd = if (i / 6) % 3 == 2 { 2 } else { 1 };
        let rx = match (bd, (i / 5) % 2) {
            (1, 0) => l0,
            (1, _) => l2,
            (_, 0) => l3,
            _ => l4,
        };
        let dst = [A, B, C, A, [0xff; 6]][(i / 3) % 5];
        let src = if (i / 4) % 2 == 0 { E } else { G };
        (bd, rx, dst, src)
    };
    let n = 40;
    let bufs: Vec<BufIdx> = (0..n)
        .map(|i| {
            let (bd, rx, dst, src) = pkt(i);
            let mut f = frame(dst, src);
            let last = f.len() - 1;
            f[last] = i as u8;
            t.packet(&f, |h| {
                h.rx_if = rx;
                h.l2.bd_index = bd;
            })
        })
        .collect();
    t.inject(&bufs);
    let got = tagged_out(&t);
    let mut want = Vec::new();
    let (mut forwarded, mut flooded, mut filtered, mut learns) = (0, 0, 0, 0);
    let mut last_rx = std::collections::HashMap::new();
    for i in 0..n {
        let (bd, rx, dst, src) = pkt(i);
        // E is static in bridge domain 1 (never learned there), unknown in 2.
        if (bd, src) != (1, E) && last_rx.insert((bd, src), rx) != Some(rx) {
            learns += 1;
        }
        match fib(bd, dst) {
            Some(tx) if tx == rx => filtered += 1,
            Some(tx) => {
                forwarded += 1;
                want.push((i as u8, tx));
            }
            None => {
                flooded += 1;
                want.extend(
                    members(bd)
                        .into_iter()
                        .filter(|&m| m != rx)
                        .map(|m| (i as u8, m)),
                );
            }
        }
    }
    want.sort();
    assert_eq!(got, want);
    assert!(filtered > 0 && learns > 4);
    t.assert_counters(&[
        ("forwarded", forwarded),
        ("flooded", flooded),
        ("filtered", filtered),
        ("learn_events", learns),
    ]);
    t.assert_no_leaks();
}

/// A full frame (256 packets) where every bridged packet has a destination and a source of
/// its own, so the frame has about 200 distinct keys of each kind: far past the
/// 16-key bucket look-ahead, so `l2-input` hashes keys it does not prefetch in its first
/// pass and prefetches ahead in its lookup loop. Cross-connected packets and broadcasts
/// in between are no keys; known, unknown and hairpin destinations and static and
/// unknown sources are interleaved, so a destination or source cursor that slips by one
/// key anywhere in the frame sends a packet to the wrong port or learns the wrong MAC.
/// The learning events are checked as the L2 FIB entries they become.
#[test]
fn a_full_frame_of_distinct_macs_goes_past_the_bucket_look_ahead() {
    let (mut t, [l0, l1, l2]) = three_ports();
    t.cli(
        "set interface l2 bridge loop0 1
         set interface l2 bridge loop1 1
         set interface l2 bridge loop2 1",
    );
    let ports = [l0, l1, l2];
    let n = sluice_graph::FRAME_SIZE;
    let dst = |i: usize| [2, 0, 0, 1, (i >> 8) as u8, i as u8];
    let src = |i: usize| [2, 0, 0, 2, (i >> 8) as u8, i as u8];
    let xconnected = |i: usize| i % 13 == 6;
    let broadcast = |i: usize| i % 16 == 7;
    let rx = |i: usize| if (i / 7) % 2 == 0 { l0 } else { l1 };
    // Every third destination is static (to loop0, loop1 or loop2 in turn: sometimes the rx
    // interface), every fifth source static on its rx interface (never learned).
    let known = |i: usize| (i % 3 == 0).then(|| ports[(i / 3) % 3]);
    let static_src = |i: usize| i % 5 == 0;
    let name = |p: u32| format!("loop{}", ports.iter().position(|&q| q == p).unwrap());
    let mac = |m: [u8; 6]| {
        m.iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    let mut cli = String::new();
    for i in (0..n).filter(|&i| !xconnected(i) && !broadcast(i)) {
        if let Some(p) = known(i) {
            cli += &format!("l2fib add {} 1 {} static\n", mac(dst(i)), name(p));
        }
    }
    for i in (0..n).filter(|&i| !xconnected(i) && static_src(i)) {
        cli += &format!("l2fib add {} 1 {} static\n", mac(src(i)), name(rx(i)));
    }
    t.cli(&cli);
    let bufs: Vec<BufIdx> = (0..n)
        .map(|i| {
            let d = if broadcast(i) { [0xff; 6] } else { dst(i) };
            let mut f = frame(d, src(i));
            let last = f.len() - 1;
            (f[last - 1], f[last]) = ((i >> 8) as u8, i as u8);
            t.packet(&f, |h| {
                if xconnected(i) {
                    (h.rx_if, h.tx_if) = (l2, l0);
                } else {
                    h.rx_if = rx(i);
                    h.l2.bd_index = 1;
                }
            })
        })
        .collect();
    t.inject(&bufs);
    let tag = |d: &[u8]| (d[d.len() - 2] as usize) << 8 | d[d.len() - 1] as usize;
    let mut got: Vec<(usize, u32)> = t
        .arc("interface-output")
        .iter()
        .map(|p| (tag(&p.data), p.hdr.tx_if))
        .collect();
    got.sort();
    let mut want = Vec::new();
    let (mut xc, mut forwarded, mut flooded, mut filtered) = (0, 0, 0, 0);
    let mut learned = Vec::new();
    for i in 0..n {
        if xconnected(i) {
            xc += 1;
            want.push((i, l0));
            continue;
        }
        if !static_src(i) {
            learned.push((src(i), 1u16, rx(i), false));
        }
        match known(i).filter(|_| !broadcast(i)) {
            Some(tx) if tx == rx(i) => filtered += 1,
            Some(tx) => {
                forwarded += 1;
                want.push((i, tx));
            }
            None => {
                flooded += 1;
                want.extend(ports.iter().filter(|&&m| m != rx(i)).map(|&m| (i, m)));
            }
        }
    }
    want.sort();
    assert_eq!(got, want);
    assert!(xc > 16 && forwarded > 32 && filtered > 16 && flooded > 32);
    t.assert_counters(&[
        ("xconnect", xc),
        ("forwarded", forwarded),
        ("flooded", flooded),
        ("filtered", filtered),
        ("learn_events", learned.len() as u64),
    ]);
    let want_learned = learned.len() as u64;
    run_until(&mut t, "l2-learn-process to take the events", |t| {
        t.counter_of(sluice_vnet::l2::LEARN_PROCESS, "learned") >= want_learned
    });
    let mut dynamic = sluice_vnet::l2::l2fib_entries(&mut t.vm, None);
    dynamic.retain(|e| !e.3);
    learned.sort();
    assert_eq!(dynamic, learned);
    t.assert_no_leaks();
}

#[test]
fn unknown_bridge_and_runts_are_dropped() {
    let (mut t, [l0, _, _]) = three_ports();
    t.cli("set interface l2 bridge loop0 1");
    receive(&mut t, l0, 1, 0, &[vec![0xff; 10]]);
    receive(&mut t, l0, 9, 0, &[frame(B, A)]);
    t.assert_counters(&[("runt", 1), ("no_member", 1)]);
    t.assert_no_leaks();
}

/// The interface-change hook (`interface::on_change`) is called once per registered
/// function after each admin-state, L2-mode, input-redirect and table change and after the
/// interface's deletion, with the record already holding the new state (what a plugin's
/// copy is refreshed from); leaving a bridge domain is a change only from one.
#[test]
fn interface_change_hook_sees_each_change_after_it_is_published() {
    use sluice_vnet::interface::{self, IfChange};
    use std::sync::atomic::Ordering::Relaxed;
    use std::sync::Mutex;
    /// (interface, change, admin up, xconnect, bridge, redirect) as the record held them.
    type Seen = (u32, IfChange, bool, u32, u32, u32);
    static SEEN: Mutex<Vec<Seen>> = Mutex::new(Vec::new());
    fn hook(vm: &mut sluice_graph::Vlib, sw: sluice_vnet::SwIfIndex, what: IfChange) {
        let r = interface::with_if_attr(vm, sw.0, |a| {
            (
                a.admin_up.load(Relaxed),
                a.l2_xc.load(Relaxed),
                a.l2_bd.load(Relaxed),
                a.rx_redirect.load(Relaxed),
            )
        })
        .unwrap();
        SEEN.lock().unwrap().push((sw.0, what, r.0, r.1, r.2, r.3));
    }
    let mut t = NodeTest::new("ethernet-input");
    t.cli(
        "create loopback interface
         create loopback interface",
    );
    let (a, b) = (t.sw_if("loop0"), t.sw_if("loop1"));
    interface::on_change(&mut t.h.vm, hook);
    interface::on_change(&mut t.h.vm, hook);
    t.cli(
        "set interface state loop0 up
         set interface l2 xconnect loop0 loop1
         set interface l2 bridge loop0 5
         set interface l3 loop0",
    );
    let drop = t.h.vm.registry.find("error-drop").unwrap();
    sluice_vnet::set_rx_redirect(&mut t.h.vm, sluice_vnet::SwIfIndex(a), Some(drop)).unwrap();
    t.cli(
        "ip table add 7
         set interface ip table loop0 7
         ip6 table add 7
         set interface ip6 table loop0 7
         set interface ip6 table loop0 7",
    );
    t.cli("delete loopback interface intfc loop0");
    let seen = SEEN.lock().unwrap().clone();
    let (x, bd) = (
        b + 1,
        seen.iter().find_map(|s| (s.4 != 0).then_some(s.4)).unwrap(),
    );
    use IfChange::*;
    assert_eq!(
        seen,
        vec![
            (a, AdminState, true, 0, 0, 0),
            // xconnect: it was in no bridge, so one change.
            (a, L2Mode, true, x, 0, 0),
            (a, L2Mode, true, 0, bd, 0),
            // l3: leaves the bridge, then the cross-connect.
            (a, L2Mode, true, 0, 0, 0),
            (a, L2Mode, true, 0, 0, 0),
            (a, RxRedirect, true, 0, 0, seen[5].5),
            // Each table (the second ip6 one is no change).
            (a, Table, true, 0, 0, seen[5].5),
            (a, Table, true, 0, 0, seen[5].5),
            // Deleted: down, the redirect cleared.
            (a, AdminState, false, 0, 0, 0),
        ]
    );
    assert_ne!(seen[5].5, 0);
}
