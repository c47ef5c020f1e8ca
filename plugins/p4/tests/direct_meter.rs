//! `direct_meter`: the compiler (a hidden last parameter carrying the entry's meter cell in
//! every action that reads it, the meter sized by its table, errors), the executor (each
//! entry's own meter colours its packets) and the control plane (`p4 table add` fills the
//! cell, `p4 table meter` configures it, `p4 table del/clear` free it).

mod common;

use sluice_p4::exec::{simulate, MeterConf, Outcome, Shared, ThreadState, GREEN, RED, YELLOW};
use sluice_p4::ir::{EntrySpec, Match, Opts, Program};

const FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../python/tests/data/p4_direct_meter.p4"
);

fn source() -> String {
    std::fs::read_to_string(FILE).unwrap()
}

fn compile(src: &str) -> Result<Program, String> {
    sluice_p4::compile(src, "m.p4", Opts::default()).map_err(|e| e.to_string())
}

/// The program with `from` replaced by `to`: its compile error.
fn err(from: &str, to: &str) -> String {
    let s = source();
    assert!(s.contains(from), "{from}");
    compile(&s.replacen(from, to, 1)).unwrap_err()
}

fn frame(dst: u64) -> Vec<u8> {
    let mut f = dst.to_be_bytes()[2..].to_vec();
    f.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x88, 0xb0]);
    f.extend_from_slice(&[0; 46]);
    f
}

#[test]
fn compiles_to_a_hidden_cell_parameter() {
    let p = compile(&source()).unwrap();
    let fwd = &p.actions[p.action_in("forward", &p.tables[0].actions).unwrap() as usize];
    assert_eq!(
        fwd.params,
        vec![("port".to_string(), 9), ("$per_station".to_string(), 32)]
    );
    let un = &p.actions[p.action_in("unmetered", &p.tables[0].actions).unwrap() as usize];
    assert_eq!(un.params.len(), 1);
    // One cell per entry (size 64) and the default action's (never configured).
    assert_eq!(p.meters.len(), 1);
    assert_eq!(
        (p.meters[0].name.as_str(), p.meters[0].size),
        ("per_station", 65)
    );
    assert!(!p.meters[0].bytes);
    // `sluice-p4c` takes it too (the hidden parameter is an ordinary one there).
    assert!(sluice_p4::gen::rust(&p, "m", "m.p4").is_ok());
}

#[test]
fn each_entry_is_metered_by_its_own_cell() {
    let p = compile(&source()).unwrap();
    let mut ts = ThreadState::new(&p).unwrap();
    let sh = Shared::new(&p);
    let t = &p.tables[0];
    let fwd = p.action_in("forward", &t.actions).unwrap();
    let un = p.action_in("unmetered", &t.actions).unwrap();
    for (dst, action, params) in [
        (0xa, fwd, vec![3, 0]),
        (0xb, fwd, vec![4, 1]),
        (0xc, un, vec![5]),
    ] {
        let spec = EntrySpec {
            matches: vec![Match::Exact(dst)],
            action,
            params,
            priority: 0,
        };
        ts.tables[0].add(t, &p.actions, &spec).unwrap();
    }
    // Cell 0: 1 packet/s, committed burst 2, peak burst 3 (all at time 0): green, green,
    // yellow, then red. Cell 1: unconfigured, always green.
    sh.meters[0][0].set(&MeterConf {
        cir: 1.0,
        cburst: 2,
        pir: 1.0,
        pburst: 3,
    });
    let colour = |o: Outcome| match o {
        Outcome::Out(_, b) => u16::from_be_bytes([b[12], b[13]]) as u64 - 0x88b0,
        Outcome::Drop => RED,
        o => panic!("{o:?}"),
    };
    let run = |ts: &mut ThreadState, dst| colour(simulate(&p, ts, &sh, &frame(dst), 1));
    let a: Vec<u64> = (0..5).map(|_| run(&mut ts, 0xa)).collect();
    assert_eq!(a, vec![GREEN, GREEN, YELLOW, RED, RED]);
    let b: Vec<u64> = (0..5).map(|_| run(&mut ts, 0xb)).collect();
    assert_eq!(b, vec![GREEN; 5]);
    assert_eq!(run(&mut ts, 0xc), GREEN);
    // A miss runs the default (drop), which reads no meter.
    assert_eq!(simulate(&p, &mut ts, &sh, &frame(0xd), 1), Outcome::Drop);
}

#[test]
fn errors_name_the_construct() {
    assert_eq!(
        err("meters = per_station;", "meters = nope;"),
        "type error: `nope' is not a direct_meter at m.p4:27:18"
    );
    let e = err("        meters = per_station;\n", "");
    assert!(
        e.starts_with(
            "type error: action `forward' reads direct_meter `per_station', which is not table `stations''s at m.p4:"
        ),
        "{e}"
    );
    let e = err(
        "        stations.apply();",
        "        per_station.read(meta.colour);\n        stations.apply();",
    );
    assert!(
        e.starts_with("not supported: direct_meter read outside an action at m.p4:"),
        "{e}"
    );
    let e = err(
        "    action drop() { mark_to_drop(sm); }",
        "    action drop() { forward(1); }",
    );
    assert!(
        e.starts_with(
            "not supported: call of action `forward', which reads direct_meter `per_station' at m.p4:"
        ),
        "{e}"
    );
    let e = err("direct_meter<bit<2>>", "direct_meter<bit<1>>");
    assert!(
        e.contains("direct_meter needs a bit<N> type argument"),
        "{e}"
    );
    let e = err(
        "per_station.read(meta.colour)",
        "per_station.read(meta.colour, 1)",
    );
    assert!(e.contains("takes 1 arguments, got 2"), "{e}");
    let e = err("(MeterType.packets)", "(MeterType.ounces)");
    assert!(e.contains("unknown MeterType.ounces"), "{e}");
    let two = source().replace(
        "    direct_meter<bit<2>>(MeterType.packets) per_station;",
        "    direct_meter<bit<2>>(MeterType.packets) per_station;\n    direct_meter<bit<2>>(MeterType.bytes) other;",
    );
    let e = compile(&two.replace(
        "per_station.read(meta.colour);",
        "per_station.read(meta.colour);\n        other.read(meta.colour);",
    ))
    .unwrap_err();
    assert!(
        e.starts_with("not supported: an action reading two direct_meters at m.p4:"),
        "{e}"
    );
    let e = compile(&source().replace(
        "        size = 64;",
        "        size = 1;\n        const entries = { 1: forward(1); 2: forward(2); }",
    ))
    .unwrap_err();
    assert!(
        e.starts_with("error: table `stations' has 2 const entries, more than its size 1 at m.p4:"),
        "{e}"
    );
    // The same meter on two tables.
    let e = err(
        "    apply {\n        stations.apply();",
        "    table other {\n        key = { hdr.ethernet.srcAddr: exact; }\n        actions = { forward; }\n        meters = per_station;\n    }\n    apply {\n        stations.apply();",
    );
    assert!(
        e.contains("direct_meter `per_station' attached to two tables"),
        "{e}"
    );
}

#[test]
fn const_entries_and_the_default_get_cells() {
    let s = source().replace(
        "        default_action = drop();\n        size = 64;",
        "        default_action = forward(9);\n        size = 4;\n        const entries = {\n            0xa: forward(1);\n            0xb: unmetered(2);\n            0xc: forward(3);\n        }",
    );
    let p = compile(&s).unwrap();
    assert_eq!(p.meters[0].size, 5);
    assert_eq!(p.tables[0].default.1, vec![9, 4]);
    let e = p.tables[0].const_entries.as_ref().unwrap();
    let params: Vec<Vec<u64>> = e.iter().map(|e| e.params.clone()).collect();
    assert_eq!(params, vec![vec![1, 0], vec![2], vec![3, 2]]);
}

#[test]
fn control_plane_allocates_configures_and_frees_cells() {
    let a = common::runtime();
    let (mut vm, t) = (a.vm, a.cli);
    let cli = |vm: &mut sluice_graph::Vlib, c: &str| t.execute(vm, c);
    cli(&mut vm, &format!("p4 load {FILE} name m")).unwrap();
    let s = cli(&mut vm, "show p4 program m").unwrap();
    assert!(s.contains("executor: vector"), "{s}");
    let cells = |vm: &mut sluice_graph::Vlib| -> Vec<(u32, u32)> {
        let p = sluice_p4::control::program(vm, "m").unwrap();
        p.meter_cells[&0]
            .of_entry
            .iter()
            .map(|(&e, &c)| (e, c))
            .collect()
    };
    cli(&mut vm, "p4 table add m stations forward key 0xa param 1").unwrap();
    cli(&mut vm, "p4 table add m stations unmetered key 0xb param 2").unwrap();
    cli(&mut vm, "p4 table add m stations forward key 0xc param 3").unwrap();
    assert_eq!(cells(&mut vm), vec![(0, 0), (2, 1)]);
    // The hidden parameter is not shown, nor counted.
    let s = cli(&mut vm, "p4 table show m stations").unwrap();
    assert!(s.contains("key 0xa -> forward(0x1)"), "{s}");
    assert_eq!(
        cli(&mut vm, "p4 table add m stations forward key 0xd param 1 2")
            .unwrap_err()
            .to_string(),
        "stations: action takes 1 parameters, got 2"
    );
    cli(
        &mut vm,
        "p4 table meter m stations key 0xc cir 10 cburst 2 pir 20 pburst 4",
    )
    .unwrap();
    {
        let p = sluice_p4::control::program(&mut vm, "m").unwrap();
        let c = &p.loaded.shared.meters[0][1];
        // Configured: the fourth packet at time 0 is still within the peak burst, the
        // fifth is not.
        let colours: Vec<u64> = (0..5).map(|_| c.execute(1, 0)).collect();
        assert_eq!(colours, vec![GREEN, GREEN, YELLOW, YELLOW, RED]);
    }
    let e = |vm: &mut sluice_graph::Vlib, c: &str| cli(vm, c).unwrap_err().to_string();
    // Its cells are the entries', not set by index.
    assert_eq!(
        e(&mut vm, "p4 meter set m per_station 1 cir 1 pir 1"),
        "`per_station' is a direct_meter: use p4 table meter"
    );
    assert_eq!(
        e(&mut vm, "p4 table meter m stations key 0xb cir 1 pir 1"),
        "stations: the entry's action reads no direct_meter"
    );
    assert_eq!(
        e(&mut vm, "p4 table meter m stations key 0xe cir 1 pir 1"),
        "stations: no such entry"
    );
    assert_eq!(
        e(&mut vm, "p4 table meter m stations key 0xa cir 2 pir 1"),
        "pir must be at least cir"
    );
    // A deleted entry's cell is reused, unconfigured again.
    cli(&mut vm, "p4 table del m stations key 0xc").unwrap();
    cli(&mut vm, "p4 table add m stations forward key 0xf param 1").unwrap();
    assert_eq!(cells(&mut vm).iter().filter(|x| x.1 == 1).count(), 1);
    {
        let p = sluice_p4::control::program(&mut vm, "m").unwrap();
        assert_eq!(p.loaded.shared.meters[0][1].execute(1, 0), GREEN);
        assert_eq!(p.loaded.shared.meters[0][1].execute(1000, 0), GREEN);
    }
    cli(&mut vm, "p4 table clear m stations").unwrap();
    assert!(cells(&mut vm).is_empty());
    // 64 metered entries fit, the 65th does not (the last cell is the default's).
    for i in 0..64 {
        cli(
            &mut vm,
            &format!("p4 table add m stations forward key {i} param 1"),
        )
        .unwrap();
    }
    let e65 = e(&mut vm, "p4 table add m stations forward key 64 param 1");
    assert!(e65.starts_with("stations: table is full"), "{e65}");
}

/// With a worker thread: the worker's copy of the table holds each entry with the cell the
/// main thread gave it, through adds, a delete and the reuse of its cell.
#[test]
fn a_worker_gets_the_entries_cells() {
    let a = common::runtime_with_workers(1);
    let (mut vm, t) = (a.vm, a.cli);
    assert_eq!(vm.n_threads(), 2);
    let cli = |vm: &mut sluice_graph::Vlib, c: &str| t.execute(vm, c).unwrap();
    cli(&mut vm, &format!("p4 load {FILE} name m"));
    cli(&mut vm, "p4 table add m stations forward key 0xa param 1");
    cli(&mut vm, "p4 table add m stations unmetered key 0xb param 2");
    cli(&mut vm, "p4 table add m stations forward key 0xc param 3");
    cli(&mut vm, "p4 table del m stations key 0xa");
    cli(&mut vm, "p4 table add m stations forward key 0xd param 4");
    cli(
        &mut vm,
        "p4 table meter m stations key 0xd cir 1 cburst 1 pir 1 pburst 2",
    );
    let node = vm.registry.find("p4-m").unwrap();
    let entries = |vm: &mut sluice_graph::Vlib, thread| {
        vm.on_thread(thread, move |tg| {
            let st = tg
                .node_mut::<sluice_p4::node::P4Node>(node)
                .and_then(|n| n.st.as_ref())
                .expect("the program on this thread");
            let tr = &st.ts.tables[0];
            let mut v: Vec<(Match, Vec<u64>)> = tr
                .iter()
                .map(|(_, e)| {
                    let r = tr.rec_of(e);
                    (e.matches[0], r.params[..r.nparams as usize].to_vec())
                })
                .collect();
            v.sort_by_key(|x| format!("{x:?}"));
            v
        })
        .expect("thread")
    };
    let want = vec![
        (Match::Exact(0xb), vec![2]),
        (Match::Exact(0xc), vec![3, 1]),
        (Match::Exact(0xd), vec![4, 0]),
    ];
    assert_eq!(entries(&mut vm, 1), want);
    assert_eq!(entries(&mut vm, 0), want);
    // Cell 0, 0xd's on every thread, is the one `p4 table meter` configured.
    {
        let p = sluice_p4::control::program(&mut vm, "m").unwrap();
        let c = &p.loaded.shared.meters[0][0];
        let colours: Vec<u64> = (0..3).map(|_| c.execute(1, 0)).collect();
        assert_eq!(colours, vec![GREEN, YELLOW, RED]);
    }
    vm.stop_workers();
    assert_eq!(vm.pool.stats().in_use, 0);
}

/// Two workers (each with its own tables, as the graph's threads have) metering the same
/// entry at once share its one cell: together they get exactly the committed and peak
/// bursts, not one burst each.
#[test]
fn workers_share_an_entrys_meter() {
    let p = compile(&source()).unwrap();
    let sh = Shared::new(&p);
    let t = &p.tables[0];
    let fwd = p.action_in("forward", &t.actions).unwrap();
    let spec = EntrySpec {
        matches: vec![Match::Exact(0xa)],
        action: fwd,
        params: vec![3, 7],
        priority: 0,
    };
    sh.meters[0][7].set(&MeterConf {
        cir: 1.0,
        cburst: 100,
        pir: 1.0,
        pburst: 300,
    });
    let counts: Vec<[u64; 3]> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let mut ts = ThreadState::new(&p).unwrap();
                    ts.tables[0].add(t, &p.actions, &spec).unwrap();
                    let mut n = [0u64; 3];
                    for _ in 0..1000 {
                        match simulate(&p, &mut ts, &sh, &frame(0xa), 1) {
                            Outcome::Out(_, b) => n[b[13] as usize - 0xb0] += 1,
                            Outcome::Drop => n[RED as usize] += 1,
                            o => panic!("{o:?}"),
                        }
                    }
                    n
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let sum = |c: usize| counts.iter().map(|n| n[c]).sum::<u64>();
    assert_eq!(
        (sum(GREEN as usize), sum(YELLOW as usize), sum(RED as usize)),
        (100, 200, 1700),
        "{counts:?}"
    );
}

/// Two controls with a table `t` each and a meter `m` each: an indexed one in the ingress,
/// a direct one on the egress's table.
const TWO_TS: &str = r#"
#include <core.p4>
#include <v1model.p4>
header ethernet_t { bit<48> dstAddr; bit<48> srcAddr; bit<16> etherType; }
struct headers { ethernet_t ethernet; }
struct metadata { bit<2> colour; }
parser P(packet_in pkt, out headers hdr, inout metadata meta,
         inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.ethernet); transition accept; }
}
control V(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    meter(4, MeterType.packets) m;
    action fwd(bit<9> port) { sm.egress_spec = port; m.execute_meter(0, meta.colour); }
    table t {
        key = { hdr.ethernet.dstAddr: exact; }
        actions = { fwd; NoAction; }
        default_action = NoAction();
    }
    apply { t.apply(); }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    direct_meter<bit<2>>(MeterType.packets) m;
    action mark() { m.read(meta.colour); }
    table t {
        key = { hdr.ethernet.srcAddr: exact; }
        actions = { mark; NoAction; }
        meters = m;
        default_action = NoAction();
        size = 8;
    }
    apply { t.apply(); hdr.ethernet.etherType = (bit<16>) meta.colour; }
}
control C(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.ethernet); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"#;

/// The compiler records the control declaring each counter, register and meter (the
/// control plane finds them by `control.name` from it).
#[test]
fn objects_carry_their_control() {
    let src = TWO_TS.replace(
        "control C(inout headers hdr, inout metadata meta) { apply { } }",
        "control C(inout headers hdr, inout metadata meta) {
    counter(2, CounterType.packets) n;
    register<bit<8>>(2) r;
    apply { }
}",
    );
    let p = sluice_p4::compile(&src, "two.p4", sluice_p4::ir::Opts::default()).unwrap();
    let of = |v: Vec<(&str, &str)>| -> Vec<String> {
        v.into_iter().map(|(c, n)| format!("{c}.{n}")).collect()
    };
    let meters = p
        .meters
        .iter()
        .map(|x| (x.control.as_str(), x.name.as_str()));
    assert_eq!(of(meters.collect()), ["I.m", "E.m"]);
    let counters = p
        .counters
        .iter()
        .map(|x| (x.control.as_str(), x.name.as_str()));
    assert_eq!(of(counters.collect()), ["C.n"]);
    let registers = p
        .registers
        .iter()
        .map(|x| (x.control.as_str(), x.name.as_str()));
    assert_eq!(of(registers.collect()), ["C.r"]);
    // The control plane's lookup: by `control.name`, or a short name one control declares.
    use sluice_p4::ir::NameError;
    assert_eq!(
        (p.table("E.t"), p.meter("I.m"), p.counter("n")),
        (Ok(1), Ok(0), Ok(0))
    );
    let two = NameError::Ambiguous(vec!["I.t".into(), "E.t".into()]);
    assert_eq!(p.table("t"), Err(two));
    assert_eq!(p.register("I.r"), Err(NameError::Unknown));
}

/// A runtime with [`TWO_TS`] loaded as `d` and its CLI.
fn two_ts() -> (
    sluice_graph::Vlib,
    sluice_cli::CommandTree<sluice_graph::Vlib>,
) {
    load_d(common::runtime(), TWO_TS, "p4fix-two-ts")
}

/// Runtime `a` with the program `src` loaded as `d` (through the file `<tag>-<pid>.p4` in
/// the temporary directory, removed again) and its CLI.
fn load_d(
    a: sluice_vnet::plugin::Assembled,
    src: &str,
    tag: &str,
) -> (
    sluice_graph::Vlib,
    sluice_cli::CommandTree<sluice_graph::Vlib>,
) {
    let (mut vm, t) = (a.vm, a.cli);
    let file = std::env::temp_dir().join(format!("{tag}-{}.p4", std::process::id()));
    std::fs::write(&file, src).unwrap();
    let r = t.execute(&mut vm, &format!("p4 load {} name d", file.display()));
    std::fs::remove_file(&file).unwrap();
    r.unwrap();
    (vm, t)
}

/// `over_threads` (what table changes, counter and table reads use) runs the workers' folds
/// at the same time: only merging a thread's result takes its lock, so a table change on
/// one worker does not wait for another's.
#[test]
fn workers_fold_at_the_same_time() {
    use std::sync::{Arc, Condvar, Mutex};
    let (mut vm, _t) = load_d(common::runtime_with_workers(2), TWO_TS, "p4fix-fold");
    let nodes = sluice_p4::control::program(&mut vm, "d")
        .unwrap()
        .nodes
        .clone();
    let entered = Arc::new((Mutex::new(0usize), Condvar::new()));
    let e2 = entered.clone();
    // Each worker counts itself in and waits (up to 5 s) for the other to be folding too.
    let fold = move |a: &mut u32, thread: usize, _: &mut sluice_p4::node::NodeState| {
        if thread == 0 {
            return;
        }
        let (m, cv) = &*e2;
        let mut n = m.lock().unwrap();
        *n += 1;
        cv.notify_all();
        let wait = std::time::Duration::from_secs(5);
        let (n, _) = cv.wait_timeout_while(n, wait, |n| *n < 2).unwrap();
        *a += (*n >= 2) as u32;
    };
    let together = sluice_p4::control::over_threads(&mut vm, nodes, 0, fold, |a, b| *a += b);
    assert_eq!(together.unwrap(), 2, "workers that saw the other folding");
    vm.stop_workers();
    assert_eq!(vm.pool.stats().in_use, 0);
}

/// A worker that does not answer within `foreach_thread`'s wait (`Vlib::thread_wait`, here
/// shortened) makes the operation an error naming it: a table change (`replicate`) would
/// otherwise say Ok with that worker's copy unchanged, a table or counter read
/// (`table_read`, `counter_read`) would lack its counts. Once it answers again, the change
/// queued for it has reached it and operations succeed.
#[test]
fn a_worker_that_does_not_answer_is_an_error() {
    use std::sync::{Arc, Condvar, Mutex};
    use std::time::Duration;
    let src = TWO_TS.replace(
        "control C(inout headers hdr, inout metadata meta) { apply { } }",
        "control C(inout headers hdr, inout metadata meta) {
    counter(2, CounterType.packets) n;
    apply { }
}",
    );
    let (mut vm, t) = load_d(common::runtime_with_workers(1), &src, "p4speed-stuck");
    let nodes = sluice_p4::control::program(&mut vm, "d")
        .unwrap()
        .nodes
        .clone();
    assert_eq!(vm.thread_wait(), sluice_graph::Vlib::THREAD_WAIT);
    vm.set_thread_wait(Duration::from_millis(200));
    let gate = Arc::new((Mutex::new(false), Condvar::new()));
    let g2 = gate.clone();
    // The worker waits for the gate (at most 30 s), past the 200 ms the fold is given.
    let fold = move |_: &mut (), thread: usize, _: &mut sluice_p4::node::NodeState| {
        if thread == 0 {
            return;
        }
        let (m, cv) = &*g2;
        let open = m.lock().unwrap();
        let wait = Duration::from_secs(30);
        let _ = cv.wait_timeout_while(open, wait, |open| !*open).unwrap();
    };
    let r = sluice_p4::control::over_threads(&mut vm, nodes.clone(), (), fold, |_, _| ());
    let e = r.expect_err("the worker did not answer");
    assert!(
        matches!(e, sluice_p4::error::P4Error::NoAnswer(ref v, w)
            if v == &[1] && w == Duration::from_millis(200)),
        "{e:?}"
    );
    assert_eq!(sluice_p4::api::retval(&e), sluice_api::Retval::SystemError);
    let stuck = "thread(s) 1 did not answer within 0.2 s";
    assert!(e.to_string().starts_with(stuck), "{e}");
    // While the worker is blocked, a change and the reads are errors, not Ok.
    for c in [
        "p4 table add d I.t fwd key 1 param 2",
        "p4 table show d I.t",
        "show p4 counter d n",
        // The auto mode's frame counts, summed over the threads: all of it fails.
        "show p4 program d",
    ] {
        let e = t.execute(&mut vm, c).expect_err(c).to_string();
        assert!(e.starts_with(stuck), "{c}: {e}");
    }
    // The worker answers again (with the default wait, not to race a loaded machine).
    vm.set_thread_wait(sluice_graph::Vlib::THREAD_WAIT);
    let (m, cv) = &*gate;
    *m.lock().unwrap() = true;
    cv.notify_all();
    // The change the master made while the worker was blocked reached its copy, in order.
    let s = t.execute(&mut vm, "p4 table show d I.t").unwrap();
    assert!(s.contains("key 0x1 -> fwd(0x2)"), "{s}");
    let copies = sluice_p4::control::over_threads(
        &mut vm,
        nodes,
        0usize,
        |a: &mut usize, _, st: &mut sluice_p4::node::NodeState| *a += st.ts.tables[0].len(),
        |a, b| *a += b,
    );
    assert_eq!(copies.unwrap(), 2, "entries in I.t's copies (main, worker)");
    let v = t.execute(&mut vm, "p4 table add d I.t fwd key 3 param 2");
    assert_eq!(v.unwrap(), "entry 1");
    t.execute(&mut vm, "show p4 counter d n").unwrap();
    vm.stop_workers();
    assert_eq!(vm.pool.stats().in_use, 0);
}

/// `p4 table ...` with a qualified name reaches that control's table, though another
/// control has a table of the same short name.
#[test]
fn cli_table_commands_take_a_qualified_name() {
    let (mut vm, t) = two_ts();
    let vm = &mut vm;
    let mut cli = |c: &str| t.execute(vm, c).map_err(|e| e.to_string());
    assert_eq!(
        cli("p4 table add d t fwd key 1 param 2").unwrap_err(),
        "table `t' is ambiguous: I.t, E.t"
    );
    assert_eq!(
        cli("p4 table add d I.t fwd key 1 param 2").unwrap(),
        "entry 0"
    );
    assert_eq!(cli("p4 table add d E.t mark key 5").unwrap(), "entry 0");
    // The action is checked before the keys.
    assert_eq!(
        cli("p4 table add d E.t fwd key").unwrap_err(),
        "`fwd' is not an action of table `t'"
    );
    let s = cli("p4 table show d I.t").unwrap();
    assert!(s.starts_with("table I.t: 1 entries"), "{s}");
    assert!(s.contains("key 0x1 -> fwd(0x2)"), "{s}");
    let s = cli("p4 table show d E.t").unwrap();
    assert!(s.starts_with("table E.t: 1 entries"), "{s}");
    assert!(s.contains("key 0x5 -> mark()"), "{s}");
    cli("p4 table meter d E.t key 5 cir 1 cburst 1 pir 1 pburst 1").unwrap();
    // An exact table takes no priority (the API refuses it too), not one silently dropped.
    assert_eq!(
        cli("p4 table add d I.t fwd key 3 priority 5 param 2").unwrap_err(),
        "priority 5: table `t' has no ternary or range key"
    );
    cli("p4 table del d I.t key 1").unwrap();
    let s = cli("p4 table show d I.t").unwrap();
    assert!(s.starts_with("table I.t: 0 entries"), "{s}");
    cli("p4 table clear d E.t").unwrap();
    let s = cli("p4 table show d E.t").unwrap();
    assert!(s.starts_with("table E.t: 0 entries"), "{s}");
}

/// A direct meter's cells are those of the meter its table names, not of another control's
/// meter of the same name.
#[test]
fn direct_meter_cells_are_the_tables_meter() {
    let (mut vm, t) = two_ts();
    let p = sluice_p4::control::program(&mut vm, "d").unwrap();
    let prog = p.loaded.prog.clone();
    let (mi, me) = (0, 1);
    assert_eq!((prog.meters[mi].size, prog.meters[me].size), (4, 9));
    assert_eq!(prog.tables[1].qualified(), "E.t");
    assert_eq!(prog.tables[1].direct_meter, Some(me as u16));
    assert_eq!(prog.tables[0].direct_meter, None);
    assert_eq!((p.meter_cells[&1].meter, p.meter_cells[&1].limit), (me, 8));
    // Eight entries fit (the egress's size), each in a cell of the egress's meter.
    for i in 0..8 {
        t.execute(&mut vm, &format!("p4 table add d E.t mark key {i}"))
            .unwrap();
    }
    t.execute(
        &mut vm,
        "p4 table meter d E.t key 3 cir 1 cburst 1 pir 1 pburst 2",
    )
    .unwrap();
    let p = sluice_p4::control::program(&mut vm, "d").unwrap();
    let cell = p.meter_cells[&1].of_entry[&3] as usize;
    let c = &p.loaded.shared.meters[me][cell];
    let colours: Vec<u64> = (0..3).map(|_| c.execute(1, 0)).collect();
    assert_eq!(colours, vec![GREEN, YELLOW, RED]);
    // The ingress's meter is untouched (unconfigured: green).
    for c in p.loaded.shared.meters[mi].iter() {
        assert_eq!(c.execute(1000, 0), GREEN);
    }
}

/// `p4 load` and `p4 unload` wait for every worker to take the program (or drop it) within
/// `Vlib::thread_wait`: a worker that does not is an error naming it (`NotTaken`), not Ok
/// with that worker running the old program. A load is undone on every thread (the worker
/// drops it once it takes the queued changes); an unload stays done.
#[test]
fn load_and_unload_name_a_worker_that_does_not_take_them() {
    use std::sync::{Arc, Condvar, Mutex};
    use std::time::Duration;
    let a = common::runtime_with_workers(1);
    let (mut vm, t) = (a.vm, a.cli);
    let file = std::env::temp_dir().join(format!("p4-not-taken-{}.p4", std::process::id()));
    std::fs::write(&file, TWO_TS).unwrap();
    t.execute(&mut vm, &format!("p4 load {} name d", file.display()))
        .unwrap();
    let prog = |vm: &mut sluice_graph::Vlib, n: &str| {
        sluice_p4::control::program(vm, n).map(|p| p.nodes.clone())
    };
    let d_nodes = prog(&mut vm, "d").unwrap();
    vm.set_thread_wait(Duration::from_millis(200));
    let gate = Arc::new((Mutex::new(false), Condvar::new()));
    let g2 = gate.clone();
    // The worker waits for the gate (at most 30 s), past the 200 ms it is given.
    let block = move |_: &mut (), thread: usize, _: &mut sluice_p4::node::NodeState| {
        if thread == 0 {
            return;
        }
        let (m, cv) = &*g2;
        let open = m.lock().unwrap();
        let _ = cv
            .wait_timeout_while(open, Duration::from_secs(30), |open| !*open)
            .unwrap();
    };
    let r = sluice_p4::control::over_threads(&mut vm, d_nodes.clone(), (), block, |_, _| ());
    assert!(r.is_err(), "the worker is blocked");
    let e = t
        .execute(&mut vm, &format!("p4 load {} name e", file.display()))
        .expect_err("the worker did not take `e'")
        .to_string();
    assert_eq!(
        e,
        "P4 program `e' not loaded: thread(s) 1 did not take it within 0.2 s"
    );
    assert!(prog(&mut vm, "e").is_err(), "`e' is not loaded");
    let spec = sluice_p4::control::LoadSpec::new(file.display().to_string());
    let e = sluice_p4::control::load(
        &mut vm,
        sluice_p4::control::LoadSpec {
            name: Some("f".into()),
            ..spec
        },
    )
    .expect_err("not taken");
    assert_eq!(sluice_p4::api::retval(&e), sluice_api::Retval::SystemError);
    let e = t
        .execute(&mut vm, "p4 unload d")
        .expect_err("the worker did not drop `d'")
        .to_string();
    assert_eq!(
        e,
        "P4 program `d' unloaded, but thread(s) 1 did not take the change within 0.2 s: they run it until they do"
    );
    assert!(prog(&mut vm, "d").is_err(), "`d' is unloaded");
    std::fs::remove_file(&file).unwrap();
    // The worker answers again: the changes queued for it run in order, and no thread
    // has any of the programs.
    vm.set_thread_wait(sluice_graph::Vlib::THREAD_WAIT);
    let (m, cv) = &*gate;
    *m.lock().unwrap() = true;
    cv.notify_all();
    let ids: Vec<_> = ["p4-d", "p4-e", "p4-f"]
        .iter()
        .map(|n| vm.registry.lookup(n).expect("the program's node stays"))
        .collect();
    let loaded = sluice_p4::control::over_threads(
        &mut vm,
        ids.clone(),
        0usize,
        |a: &mut usize, _, _: &mut sluice_p4::node::NodeState| *a += 1,
        |a, b| *a += b,
    );
    assert_eq!(loaded.unwrap(), 0, "program states left on the threads");
    // `e''s node, made while the worker was late (`GraphError::NotTaken`), is reused by
    // the next load of that name (not made again: a duplicate node).
    std::fs::write(&file, TWO_TS).unwrap();
    t.execute(&mut vm, &format!("p4 load {} name e", file.display()))
        .expect("`e' loads once the worker answers");
    assert_eq!(prog(&mut vm, "e").unwrap(), [ids[1]]);
    std::fs::remove_file(&file).unwrap();
    t.execute(&mut vm, "p4 unload e").unwrap();
    vm.stop_workers();
    assert_eq!(vm.pool.stats().in_use, 0);
}
