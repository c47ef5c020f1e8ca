//! ACL benchmark (plugins/acl): the IPv4 path with an input ACL of 1, 100, 1k and 10k rules
//! on pg0 (random deny rules the traffic does not match, then a permit-all), against the
//! 1-rule rate. The classifier starts from the list's first match-all rule and its
//! pre-filter skips the deny rules' tables by address, so these cases probe no table: they
//! measure the node's fixed cost. `SLUICE_BENCH_ACL_NEAR=2` makes the deny rules cover the
//! traffic's first two source bytes (10.0.16.0–10.0.255.255), so every packet probes the
//! mask types without protocol and with UDP's exact port (and misses) before the permit-all:
//! the probe-heavy path. `stateful`: one `permit+reflect` rule, so after the first pass over
//! the 4,096 flows every packet is admitted by its session (the session lookup instead of
//! the classifier); `stateful-tcp`: the same with 4,096 TCP flows, every packet an ACK
//! without data (the session made by the flow's first one, mid-stream, one side seen: the
//! hit path reads the segment, runs the window check and records the flags);
//! `stateful-<n>`: the same `n - 1` deny rules before the `permit+reflect` one; `stateful-100k-flows` (only with `--only`): 10k rules and 100,000 flows, a session
//! table larger than the caches (issue 14's 100k sessions). `stateful-miss` (only with
//! `--only`): the denial path of a stateful interface, 10k rules ending in a TCP-only
//! `permit+reflect` rule, UDP traffic: every packet misses the session table, meets the
//! rules, matches none and is dropped (`no_match`); its path ends at `error-drop`.
//! `SLUICE_BENCH_ACL_FLOWS=<n>` sets the `stateful` case's flow count (its row and JSON key
//! then `stateful-<n>-flows`; `--only stateful` still selects it) and
//! `SLUICE_BENCH_ACL_PIPE_MIN=<n>` the session count from which the nodes look sessions up
//! ahead (0: always; docs/acl.md measures the threshold with the two). `session-rebuild`
//! (only with `--only`): no path, the time of the session create that rebuilds a table's
//! buckets (the 8,193rd) against the one before it.

use crate::{cli, write_pcap, Rng};
use std::fmt::Write as _;

/// TCP's ACK flag.
const TCP_ACK: u8 = 0x10;

/// The node measured.
const ACL_NODE: &str = "acl-plugin-in-ip4-fa";

const PATH: [&str; 7] = [
    "ethernet-input",
    "ip4-input",
    ACL_NODE,
    "ip4-lookup",
    "ip4-rewrite",
    "interface-output",
    "pg-tx",
];

/// `n - 1` random deny rules (sources in 172.16.0.0/12 with mixed prefix lengths, some
/// with protocols and port ranges) and a final permit-all. `near`
/// (`SLUICE_BENCH_ACL_NEAR=1`): sources in 10.128.0.0/12 instead, the traffic's first
/// byte (the pre-filter's second byte still skips them). `near == 2`: sources in
/// 10.0.16.0–10.0.255.255 with prefixes of 20 to 32 bits, UDP ports below 256 (never 53),
/// so the pre-filter leaves the mask types without protocol and with UDP's exact port and
/// each packet probes them, missing on the third source byte (the traffic's is 0).
fn rules(n: usize, seed: u64, near: u8) -> String {
    let mut r = Rng(seed);
    let mut v = Vec::with_capacity(n);
    for _ in 1..n {
        let (len, a) = match near {
            2 => {
                let len = [20u32, 24, 28, 32][(r.next() % 4) as usize];
                // Third byte 16..=255: outside the traffic's 10.0.0.16 even at /20.
                let third = 16 + (r.next() % 240) as u32;
                (len, 0x0a00_0000 | third << 8 | (r.next() as u32 & 0xff))
            }
            _ => {
                let base = if near == 1 {
                    0x0a80_0000u32
                } else {
                    0xac10_0000
                };
                let len = [12u32, 16, 20, 24, 28, 32][(r.next() % 6) as usize];
                (len, base | (r.next() as u32 & 0x000f_ffff))
            }
        };
        let a = if len == 32 {
            a
        } else {
            a & (u32::MAX << (32 - len))
        };
        let mut s = format!(
            "deny src {}/{len} dst 0.0.0.0/0",
            std::net::Ipv4Addr::from(a)
        );
        match r.next() % 3 {
            0 => {}
            1 if near == 2 => s.push_str(&format!(" proto 17 dport {}", 54 + r.next() % 200)),
            1 => s.push_str(&format!(" proto 17 dport {}", r.next() % 65536)),
            _ => {
                let lo = r.next() % 60000;
                s.push_str(&format!(" proto 6 dport {lo}-{}", lo + r.next() % 5000))
            }
        }
        v.push(s);
    }
    v.push("permit src 0.0.0.0/0 dst 0.0.0.0/0".into());
    v.join(", ")
}

/// UDP flows of the cases (one frame each, replayed in order).
const FLOWS: usize = 4096;
/// The TCP case: `FLOWS` established TCP flows, each an ACK-only segment.
const TCP_LABEL: &str = "stateful-tcp";
/// `stateful-100k-flows`: the 10k-rule list ending in `permit+reflect` and this many flows
/// (all tracked after the warm-up, whose first pass creates their sessions).
const BIG_FLOWS: usize = 100_000;
const BIG_LABEL: &str = "stateful-100k-flows";
/// The all-miss case: no session and no permit rule matches (the denial path).
const MISS_LABEL: &str = "stateful-miss";
/// Its path: to `error-drop`.
const MISS_PATH: [&str; 4] = ["ethernet-input", "ip4-input", ACL_NODE, "error-drop"];

/// What a case's list is.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// Ends in a permit-all.
    Stateless,
    /// Ends in a `permit+reflect` of everything.
    Stateful,
    /// Ends in a `permit+reflect` of TCP only, which the UDP traffic does not match.
    Miss,
}

/// A 60-byte TCP/IPv4 frame from `src:sport` to `dst:dport` with `flags`, `seq`, `ack`, no
/// payload, window 65535, checksums set.
fn tcp_frame(src: u32, dst: u32, sport: u16, dport: u16, flags: u8, seq: u32, ack: u32) -> Vec<u8> {
    let mut l4 = [0u8; 20];
    l4[0..2].copy_from_slice(&sport.to_be_bytes());
    l4[2..4].copy_from_slice(&dport.to_be_bytes());
    l4[4..8].copy_from_slice(&seq.to_be_bytes());
    l4[8..12].copy_from_slice(&ack.to_be_bytes());
    l4[12] = 5 << 4;
    l4[13] = flags;
    l4[14..16].copy_from_slice(&u16::MAX.to_be_bytes());
    crate::nat::ip4_frame(0, src, dst, 6, &l4)
}

/// Runs the ACL benchmark.
pub fn bench_acl(o: &crate::Opts, out: &mut String, json: &mut Vec<String>) {
    if o.only.as_deref() == Some(REBUILD_LABEL) {
        return bench_rebuild(o, out, json);
    }
    let sizes: &[usize] = if o.quick && o.only.is_none() {
        &[1, 100, 1000]
    } else {
        &[1, 100, 1000, 10_000]
    };
    let near: u8 = std::env::var("SLUICE_BENCH_ACL_NEAR")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // (label, rules, kind, flows, TCP); the rule text and the flows' pcap are made only
    // for the cases that run.
    let mut cases: Vec<(String, usize, Kind, usize, bool)> = sizes
        .iter()
        .map(|&n| (n.to_string(), n, Kind::Stateless, FLOWS, false))
        .collect();
    // SLUICE_BENCH_ACL_FLOWS: the `stateful` case's flow count (the look-ahead's threshold
    // measured between 4k and 100k sessions); its row and JSON key then say the count.
    let flows_knob = crate::env_usize("SLUICE_BENCH_ACL_FLOWS");
    let stateful_flows = flows_knob.unwrap_or(FLOWS);
    cases.push(("stateful".into(), 1, Kind::Stateful, stateful_flows, false));
    // TCP's per-packet state check (the segment read, the window check, the flags
    // recorded) on the session-hit path.
    cases.push((TCP_LABEL.into(), 1, Kind::Stateful, FLOWS, true));
    cases.extend(
        sizes
            .iter()
            .filter(|&&n| n > 1)
            .map(|&n| (format!("stateful-{n}"), n, Kind::Stateful, FLOWS, false)),
    );
    // Issue 14's operating point: 100k tracked flows behind 10k rules (only on request:
    // its warm-up creates the 100k sessions); and its denial path.
    if o.only.as_deref() == Some(BIG_LABEL) {
        cases.push((BIG_LABEL.into(), 10_000, Kind::Stateful, BIG_FLOWS, false));
    }
    if o.only.as_deref() == Some(MISS_LABEL) {
        cases.push((MISS_LABEL.into(), 10_000, Kind::Miss, FLOWS, false));
    }
    // `--only` is exact here: a label that names no case (a typo in a quiet row) stops
    // the run rather than printing an empty table.
    let mut labels: Vec<&str> = cases.iter().map(|c| c.0.as_str()).collect();
    for l in [BIG_LABEL, MISS_LABEL, REBUILD_LABEL] {
        if !labels.contains(&l) {
            labels.push(l);
        }
    }
    crate::check_only(o, &labels, true);
    let dir = std::env::temp_dir().join(format!("sluice-bench-acl-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    // Removed however the function ends: a case's checks panic (unwinding) on a wrong path.
    let _rm = RemoveDir(dir.clone());
    let dir = &_rm.0;
    // `flows` UDP (or `tcp`: TCP ACK-only) flows from 10.0.0.16 to 20.0.x.x, one frame
    // each, written once per count and protocol.
    let flows_pcap = |flows: usize, tcp: bool| {
        let mut r = Rng(7);
        let frames: Vec<Vec<u8>> = (0..flows)
            .map(|_| {
                let dst = 0x1400_0000 | (r.next() as u32 & 0xffff);
                let sport = 1024 + (r.next() % 1000) as u16;
                if tcp {
                    // Every packet of a flow the same segment: an ACK with no data, in
                    // the window the flow's first one (which makes the session) opens.
                    tcp_frame(0x0a00_0010, dst, sport, 80, TCP_ACK, 1001, 2001)
                } else {
                    crate::nat::udp_frame(0, 0x0a00_0010, dst, sport, 53)
                }
            })
            .collect();
        let pcap = dir.join(format!(
            "acl-{flows}-{}.pcap",
            if tcp { "tcp" } else { "udp" }
        ));
        write_pcap(&pcap, &frames);
        pcap
    };
    let mut pcaps: std::collections::BTreeMap<(usize, bool), std::path::PathBuf> =
        Default::default();
    let _ = writeln!(
        out,
        "## IPv4 + input ACL, one core, 64-byte frames, every packet matched by the last rule \
         (`stateful`: one permit+reflect rule, every packet after its flow's first admitted by \
         the flow's session; `stateful-<n>`: the n − 1 deny rules before it)\n"
    );
    let _ = writeln!(
        out,
        "| rules | mask types | Mpps min | median | max | × 1 rule | path clk/pkt | ACL node clk/pkt |"
    );
    let _ = writeln!(out, "|{}", "---|".repeat(8));
    let mut base = None;
    for (label, n, kind, flows, tcp) in cases {
        let stateful = kind == Kind::Stateful;
        // `--only <rules>|stateful|stateful-<rules>|stateful-100k-flows`: that case alone
        // (callgrind runs).
        if o.only.as_deref().is_some_and(|w| w != label) {
            continue;
        }
        // `--only stateful` still picks the case whose flow count SLUICE_BENCH_ACL_FLOWS set.
        let label = match flows_knob {
            Some(f) if label == "stateful" => format!("stateful-{f}-flows"),
            _ => label,
        };
        let pcap = pcaps
            .entry((flows, tcp))
            .or_insert_with(|| flows_pcap(flows, tcp))
            .clone();
        let text = rules(n, n as u64, near);
        let text = match kind {
            Kind::Stateless => text,
            // The final permit-all reflects.
            Kind::Stateful | Kind::Miss => {
                let (deny, last) = text.rsplit_once("permit").expect("a final permit");
                let only_tcp = if kind == Kind::Miss { " proto 6" } else { "" };
                format!("{deny}permit+reflect{last}{only_tcp}")
            }
        };
        let (mut vm, t) = crate::build(0);
        for c in [
            "create packet-generator interface pg0",
            "create packet-generator interface pg1",
            "set interface state pg0 up",
            "set interface state pg1 up",
            "set interface ip address pg0 10.0.0.1/24",
            "set interface ip address pg1 10.0.1.1/24",
            "ip neighbor pg1 10.0.1.2 02:00:00:00:01:02",
            "ip route add 20.0.0.0/8 via 10.0.1.2",
        ] {
            cli(&mut vm, &t, c);
        }
        cli(&mut vm, &t, &format!("set acl-plugin acl {text}"));
        cli(&mut vm, &t, "set acl-plugin interface pg0 input acl 0");
        // SLUICE_BENCH_ACL_PIPE_MIN: the session count from which the IPv4 nodes look
        // sessions up ahead (`Table::pipe_min`; 0 always, a huge number never).
        if let Some(m) = crate::env_usize("SLUICE_BENCH_ACL_PIPE_MIN") {
            for th in vm.ext_mut::<sluice_acl::AclMain>().shared.threads() {
                th.lock().expect("ACL thread").sessions.pipe_min = m;
            }
        }
        let shown = cli(&mut vm, &t, "show acl-plugin acl index 0");
        assert!(
            shown.contains(&format!("count {n} ")),
            "{n} rules installed"
        );
        let types: usize = cli(&mut vm, &t, "show acl-plugin interface")
            .split("mask types")
            .next()
            .and_then(|x| x.rsplit('(').next())
            .and_then(|x| x.trim().parse().ok())
            .unwrap_or(0);
        if kind == Kind::Miss {
            // Every packet dropped as `no_match`, none sent.
            let r = crate::replay_path(
                o,
                vm,
                &t,
                crate::Replay {
                    node: Some("ethernet-input"),
                    sink: crate::Sink::Drop,
                    after: &|vm, t| {
                        let sent =
                            crate::total_vectors(vm, vm.registry.find("pg-tx").expect("pg-tx"));
                        assert_eq!(sent, 0, "{MISS_LABEL}: packets sent, not denied");
                        let denied = error_count(&cli(vm, t, "show errors"), "no ACL rule matched");
                        let all = o.packets / 2 * (o.runs as u64 + 1);
                        assert_eq!(
                            denied, all,
                            "{MISS_LABEL}: packets denied (no_match) against packets sent in"
                        );
                    },
                    ..crate::Replay::new(&pcap, &MISS_PATH, MISS_LABEL)
                },
            );
            let (path, _) = crate::clock_cells(&r.node_clocks);
            let _ = writeln!(
                out,
                "| {label} (dropped) | {types} | {:.2} | {:.2} | {:.2} | | {:.1} | {:.1} |",
                r.mpps.0,
                r.mpps.1,
                r.mpps.2,
                path,
                r.clocks_of(ACL_NODE)
            );
            json.push(format!(
                "\"acl_{label}\": {{\"mpps\": [{:.3}, {:.3}, {:.3}], \"path_clocks\": {:.2}, \"acl_clocks\": {:.2}}}",
                r.mpps.0, r.mpps.1, r.mpps.2, path, r.clocks_of(ACL_NODE)
            ));
            continue;
        }
        // Stateful: the counters as each run starts (the last call sees the earlier runs).
        let seen = std::cell::Cell::new((0u64, 0u64));
        let r = crate::replay_path(
            o,
            vm,
            &t,
            crate::Replay {
                node: Some("ethernet-input"),
                before: &|vm, t| {
                    if stateful {
                        let e = cli(vm, t, "show errors");
                        seen.set((
                            error_count(&e, "sessions created (permit+reflect)"),
                            error_count(&e, "packets admitted by a session"),
                        ));
                    }
                },
                ..crate::Replay::new(&pcap, &PATH, "acl")
            },
        );
        if stateful {
            // Every flow of the warm-up made its session and every later packet of it was
            // admitted by that session, not by the classifier.
            let (created, hits) = seen.get();
            let before = o.packets / 2 * o.runs as u64;
            assert!(
                created > 0 && created <= flows as u64,
                "stateful: {created} sessions for {flows} flows"
            );
            assert!(
                created + hits >= before,
                "stateful: {created} sessions + {hits} session hits < {before} packets"
            );
        }
        let b = *base.get_or_insert(r.mpps.1);
        let (path, _) = crate::clock_cells(&r.node_clocks);
        let _ = writeln!(
            out,
            "| {label} | {types} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} | {:.1} |",
            r.mpps.0,
            r.mpps.1,
            r.mpps.2,
            r.mpps.1 / b,
            path,
            r.clocks_of(ACL_NODE)
        );
        json.push(format!(
            "\"acl_{label}\": {{\"mpps\": [{:.3}, {:.3}, {:.3}], \"ratio\": {:.3}, \"path_clocks\": {:.2}, \"acl_clocks\": {:.2}}}",
            r.mpps.0,
            r.mpps.1,
            r.mpps.2,
            r.mpps.1 / b,
            path,
            r.clocks_of(ACL_NODE)
        ));
    }
    out.push('\n');
}

/// Removes its directory when dropped.
struct RemoveDir(std::path::PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The count of the `show errors` line whose reason is `reason` (summed over nodes).
fn error_count(errors: &str, reason: &str) -> u64 {
    errors
        .lines()
        .filter(|l| l.contains(reason))
        .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// `--only session-rebuild`: a session table of the default limit, on its own (no path).
const REBUILD_LABEL: &str = "session-rebuild";

/// `session-rebuild`: the wall-clock time of one session create in a fresh
/// `session::Table` of the default limit, the 8,192nd (`FIRST_SESSIONS`: the first buckets
/// full) and the 8,193rd (the one-off bucket rebuild: every session's digest inserted again
/// and the new array's pages first touched, with the thread's table locked; its stall on the
/// packet path). `--runs` × 10 tables; min/median/max in µs. Run it with transparent
/// hugepages on and off: without them the new array is thousands of 4 KiB page faults.
fn bench_rebuild(o: &crate::Opts, out: &mut String, json: &mut Vec<String>) {
    use sluice_acl::session::{SessKey, Session, Table, DEFAULT_MAX_SESSIONS, FIRST_SESSIONS};
    let mk = |i: usize| {
        let (key, lo) = SessKey::of(
            1,
            false,
            17,
            (0x0a00_0000 + i as u128, 1000),
            (0x1400_0000, 53),
        );
        Session::new(key, true, lo, 0.0)
    };
    let (mut full, mut rebuild) = (Vec::new(), Vec::new());
    for _ in 0..o.runs.max(1) * 10 {
        let mut tb = Table::new(DEFAULT_MAX_SESSIONS);
        for i in 0..FIRST_SESSIONS - 1 {
            tb.create(mk(i)).expect("a session");
        }
        for (i, v) in [
            (FIRST_SESSIONS - 1, &mut full),
            (FIRST_SESSIONS, &mut rebuild),
        ] {
            let s = mk(i);
            let t0 = std::time::Instant::now();
            let r = tb.create(s).is_ok();
            v.push(t0.elapsed().as_secs_f64() * 1e6);
            assert!(r, "{REBUILD_LABEL}: session {} refused", i + 1);
        }
    }
    let _ = writeln!(
        out,
        "| session create (default limit) | µs min | median | max |\n|---|---|---|---|"
    );
    for (what, key, v) in [
        ("the 8,192nd", "create", full),
        ("the 8,193rd: bucket rebuild", "rebuild", rebuild),
    ] {
        let (a, m, b) = crate::stats(v);
        let _ = writeln!(out, "| {what} | {a:.1} | {m:.1} | {b:.1} |");
        json.push(format!(
            "\"acl_session_{key}_us\": {{\"min\": {a:.2}, \"median\": {m:.2}, \"max\": {b:.2}}}"
        ));
    }
    out.push('\n');
}
