//! The p4 API messages through the daemon's message registry (the handlers the socket
//! server calls): load, entries keyed by match and priority, dumps, clear, counters,
//! registers, meters, unload, and the result code of every error.

mod common;

use sluice_api::codec::Writer;
use sluice_api::registry::decode;
use sluice_api::{ApiRegistry, Message, Retval};
use sluice_graph::Vlib;
use sluice_p4::api::p4 as m;
use std::sync::atomic::Ordering;

const FIREWALL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/firewall.p4");

fn build() -> (Vlib, sluice_cli::CommandTree<Vlib>, ApiRegistry) {
    let a = common::runtime();
    (a.vm, a.cli, a.api)
}

/// The bodies of the frames a request produced (`u32 length | u16 id | u32 context | body`).
fn frames(out: &[u8]) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    let mut b = out;
    while b.len() >= 4 {
        let n = u32::from_le_bytes(b[..4].try_into().unwrap()) as usize;
        v.push(b[10..4 + n].to_vec());
        b = &b[4 + n..];
    }
    v
}

fn send<Q: Message>(
    api: &ApiRegistry,
    vm: &mut Vlib,
    q: &Q,
) -> Result<Vec<Vec<u8>>, (Retval, String)> {
    let mut w = Writer::new();
    q.encode(&mut w);
    let id = api.id(Q::NAME).expect("registered");
    api.call(vm, id, &w.buf)
        .map(|o| frames(&o))
        .map_err(|e| (e.retval, e.message))
}

/// A request's reply.
fn req<Q: Message, R: Message>(
    api: &ApiRegistry,
    vm: &mut Vlib,
    q: &Q,
) -> Result<R, (Retval, String)> {
    let f = send(api, vm, q)?;
    assert_eq!(f.len(), 1);
    Ok(decode::<R>(&f[0]).expect("reply decodes"))
}

/// A dump's details (the last frame is `api_dump_end`).
fn dump<Q: Message, D: Message>(
    api: &ApiRegistry,
    vm: &mut Vlib,
    q: &Q,
) -> Result<Vec<D>, (Retval, String)> {
    let f = send(api, vm, q)?;
    Ok(f[..f.len() - 1]
        .iter()
        .map(|b| decode::<D>(b).expect("details decode"))
        .collect())
}

fn ternary(value: u64, mask: u64) -> m::P4Match {
    m::P4Match {
        kind: m::P4MatchKind::Ternary,
        value,
        mask,
        high: 0,
        prefix_len: 0,
    }
}

fn range(lo: u64, hi: u64) -> m::P4Match {
    m::P4Match {
        kind: m::P4MatchKind::Range,
        value: lo,
        mask: 0,
        high: hi,
        prefix_len: 0,
    }
}

fn lpm(value: u64, len: u8) -> m::P4Match {
    m::P4Match {
        kind: m::P4MatchKind::Lpm,
        value,
        mask: 0,
        high: 0,
        prefix_len: len,
    }
}

fn acl_entry(is_add: bool, prio: u32, action: &str, params: Vec<u64>) -> m::P4TableEntryAddDel {
    m::P4TableEntryAddDel {
        is_add,
        program: "fw".into(),
        table: "acl".into(),
        matches: vec![
            ternary(0x0a00_0000, 0xff00_0000),
            ternary(0, 0),
            ternary(6, 0xff),
            range(80, 90),
        ],
        priority: prio,
        action: action.into(),
        params,
    }
}

#[test]
fn load_entries_dumps_and_errors() {
    let (mut vm, cli, api) = build();
    let vm = &mut vm;
    let api = &api;
    let load = |name: &str| m::P4Load {
        file: FIREWALL.into(),
        name: name.into(),
        mode: m::P4Mode::Single,
        sw_if_indexes: Vec::new(),
    };
    let r: m::P4LoadReply = req(api, vm, &load("fw")).unwrap();
    assert_eq!((r.name.as_str(), r.n_tables, r.n_nodes), ("fw", 2, 1));
    let e = req::<_, m::P4LoadReply>(api, vm, &load("fw")).unwrap_err();
    assert_eq!(
        e,
        (
            Retval::AlreadyExists,
            "P4 program `fw' is already loaded".into()
        )
    );
    let mut bad = load("x");
    bad.sw_if_indexes = vec![77];
    assert_eq!(
        req::<_, m::P4LoadReply>(api, vm, &bad).unwrap_err().0,
        Retval::NoSuchInterface
    );
    bad = load("x");
    bad.file = "/nonexistent.p4".into();
    assert_eq!(
        req::<_, m::P4LoadReply>(api, vm, &bad).unwrap_err().0,
        Retval::SystemError
    );
    bad = load("a b");
    assert_eq!(
        req::<_, m::P4LoadReply>(api, vm, &bad).unwrap_err(),
        (Retval::InvalidValue, "bad program name `a b'".into())
    );

    // Entries are identified by their matches and priority (P4Runtime's semantics).
    let add = |prio, action: &str, params| acl_entry(true, prio, action, params);
    let r: m::P4TableEntryAddDelReply = req(api, vm, &add(10, "deny", vec![7])).unwrap();
    let id10 = r.entry_id;
    let r: m::P4TableEntryAddDelReply = req(api, vm, &add(20, "allow", vec![8])).unwrap();
    assert_ne!(r.entry_id, id10);
    let e = req::<_, m::P4TableEntryAddDelReply>(api, vm, &add(10, "allow", vec![1])).unwrap_err();
    assert_eq!(
        e,
        (Retval::AlreadyExists, "acl: entry already exists".into())
    );
    let e = req::<_, m::P4TableEntryAddDelReply>(api, vm, &add(30, "route", vec![1])).unwrap_err();
    assert_eq!(e.0, Retval::InvalidValue);
    assert_eq!(e.1, "`route' is not an action of table `acl'");
    let e =
        req::<_, m::P4TableEntryAddDelReply>(api, vm, &add(30, "deny", vec![1 << 16])).unwrap_err();
    assert_eq!(e.0, Retval::InvalidValue, "{}", e.1);
    let mut wrong = add(30, "deny", vec![1]);
    wrong.matches[3] = ternary(0, 0);
    let e = req::<_, m::P4TableEntryAddDelReply>(api, vm, &wrong).unwrap_err();
    assert_eq!(
        e,
        (
            Retval::InvalidValue,
            "matches[3]: key `hdr.l4.dstPort' is range, not ternary".into()
        )
    );
    wrong.matches.pop();
    let e = req::<_, m::P4TableEntryAddDelReply>(api, vm, &wrong).unwrap_err();
    assert_eq!(e.0, Retval::InvalidValue, "{}", e.1);
    wrong = add(30, "deny", vec![1]);
    wrong.program = "nope".into();
    assert_eq!(
        req::<_, m::P4TableEntryAddDelReply>(api, vm, &wrong).unwrap_err(),
        (Retval::NoSuchEntry, "no P4 program `nope'".into())
    );
    wrong = add(30, "deny", vec![1]);
    wrong.table = "nope".into();
    assert_eq!(
        req::<_, m::P4TableEntryAddDelReply>(api, vm, &wrong).unwrap_err(),
        (Retval::NoSuchEntry, "no table `nope'".into())
    );
    let fib = m::P4TableEntryAddDel {
        is_add: true,
        program: "fw".into(),
        table: "fib".into(),
        matches: vec![lpm(0x0a02_0000, 16)],
        priority: 0,
        action: "route".into(),
        params: vec![1, 0x0200_0000_0002, 0x0200_0000_0001],
    };
    req::<_, m::P4TableEntryAddDelReply>(api, vm, &fib).unwrap();

    // Fields a match kind does not use, priorities against the table's kinds, a delete
    // naming an action: refused (P4Runtime's rules).
    let mut invalid = |q: &m::P4TableEntryAddDel| {
        let e = req::<_, m::P4TableEntryAddDelReply>(api, vm, q).unwrap_err();
        assert_eq!(e.0, Retval::InvalidValue, "{}", e.1);
        e.1
    };
    let mut q = add(30, "deny", vec![1]);
    q.matches[0].high = 1;
    assert_eq!(
        invalid(&q),
        "matches[0]: high is not used by a ternary match (must be 0)"
    );
    q = add(30, "deny", vec![1]);
    q.matches[3].prefix_len = 8;
    assert_eq!(
        invalid(&q),
        "matches[3]: prefix_len is not used by a range match (must be 0)"
    );
    q = add(30, "deny", vec![1]);
    q.matches[3].mask = 0xff;
    assert_eq!(
        invalid(&q),
        "matches[3]: mask is not used by a range match (must be 0)"
    );
    let mut f = fib.clone();
    f.matches[0].mask = 0xffff_0000;
    assert_eq!(
        invalid(&f),
        "matches[0]: mask is not used by a lpm match (must be 0)"
    );
    f = fib.clone();
    f.priority = 5;
    assert_eq!(invalid(&f), "priority is for ternary/range tables");
    assert_eq!(
        invalid(&add(0, "deny", vec![1])),
        "priority 0: entries of ternary/range tables need a priority of at least 1"
    );
    let mut d = acl_entry(false, 10, "deny", vec![]);
    assert_eq!(
        invalid(&d),
        "a delete names no action or params (the entry is its matches and priority)"
    );
    d = acl_entry(false, 10, "", vec![7]);
    assert_eq!(
        invalid(&d),
        "a delete names no action or params (the entry is its matches and priority)"
    );
    // A delete must give the entry's priority.
    assert_eq!(
        req::<_, m::P4TableEntryAddDelReply>(api, vm, &acl_entry(false, 11, "", vec![]))
            .unwrap_err(),
        (Retval::NoSuchEntry, "acl: no such entry".into())
    );

    // The dump: highest priority first, then the default action with the misses.
    let td = |t: &str| m::P4TableDump {
        program: "fw".into(),
        table: t.into(),
    };
    let d: Vec<m::P4TableDetails> = dump(api, vm, &td("acl")).unwrap();
    let got: Vec<_> = d
        .iter()
        .map(|x| {
            (
                x.is_default,
                x.priority,
                x.action.as_str(),
                x.params.clone(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (false, 20, "allow", vec![8]),
            (false, 10, "deny", vec![7]),
            (true, 0, "allow", vec![0]),
        ]
    );
    assert_eq!(d[0].matches, acl_entry(true, 0, "", vec![]).matches);
    // The CLI shows the same table.
    let s = cli.execute(vm, "p4 table show fw acl").unwrap();
    assert!(s.contains("priority 20 -> allow(0x8)"), "{s}");
    assert_eq!(
        dump::<_, m::P4TableDetails>(api, vm, &td("MyIngress.fib")).unwrap_err(),
        (Retval::NoSuchEntry, "no table `MyIngress.fib'".into())
    );
    let d: Vec<m::P4TableDetails> = dump(api, vm, &td("FwIngress.fib")).unwrap();
    assert_eq!(d.len(), 2);
    assert_eq!(d[0].matches, vec![lpm(0x0a02_0000, 16)]);

    // Delete by match + priority: the other priority stays.
    let del = acl_entry(false, 10, "", vec![]);
    req::<_, m::P4TableEntryAddDelReply>(api, vm, &del).unwrap();
    assert_eq!(
        req::<_, m::P4TableEntryAddDelReply>(api, vm, &del).unwrap_err(),
        (Retval::NoSuchEntry, "acl: no such entry".into())
    );
    let d: Vec<m::P4TableDetails> = dump(api, vm, &td("acl")).unwrap();
    assert_eq!(d.len(), 2);
    assert_eq!(d[0].priority, 20);
    let clear = m::P4TableClear {
        program: "fw".into(),
        table: "acl".into(),
    };
    req::<_, m::P4TableClearReply>(api, vm, &clear).unwrap();
    let d: Vec<m::P4TableDetails> = dump(api, vm, &td("acl")).unwrap();
    assert_eq!(d.len(), 1);
    assert!(d[0].is_default);

    // Program dump.
    let pd = |n: &str| m::P4ProgramDump { name: n.into() };
    let p: Vec<m::P4ProgramDetails> = dump(api, vm, &pd("")).unwrap();
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].name, "fw");
    assert_eq!(p[0].file, FIREWALL);
    let tables: Vec<_> = p[0]
        .tables
        .iter()
        .map(|t| (t.name.as_str(), t.keys.len(), t.n_entries))
        .collect();
    assert_eq!(
        tables,
        vec![("FwIngress.acl", 4, 0), ("FwIngress.fib", 1, 1)]
    );
    assert_eq!(p[0].counters[0].name, "FwIngress.rule_hits");
    assert_eq!(p[0].counters[0].size, 1024);
    assert_eq!(p[0].registers[0].name, "FwIngress.last_denied");
    assert_eq!(p[0].meters[0].name, "FwIngress.policer");
    assert_eq!(p[0].meters[0].size, 16);
    assert_eq!(
        dump::<_, m::P4ProgramDetails>(api, vm, &pd("zz"))
            .unwrap_err()
            .0,
        Retval::NoSuchEntry
    );

    // Counters, registers (all cells or one), meters.
    let cd = |c: &str, index| m::P4CounterDump {
        program: "fw".into(),
        counter: c.into(),
        index,
    };
    let c: Vec<m::P4CounterDetails> = dump(api, vm, &cd("rule_hits", u32::MAX)).unwrap();
    assert_eq!(c.len(), 1024);
    let c: Vec<m::P4CounterDetails> = dump(api, vm, &cd("rule_hits", 5)).unwrap();
    assert_eq!((c.len(), c[0].index, c[0].packets), (1, 5, 0));
    assert_eq!(
        dump::<_, m::P4CounterDetails>(api, vm, &cd("rule_hits", 1024)).unwrap_err(),
        (
            Retval::InvalidValue,
            "index `1024' out of range (size 1024)".into()
        )
    );
    assert_eq!(
        dump::<_, m::P4CounterDetails>(api, vm, &cd("nope", 0)).unwrap_err(),
        (Retval::NoSuchEntry, "no counter `nope'".into())
    );
    let rd = m::P4RegisterDump {
        program: "fw".into(),
        register: "last_denied".into(),
        index: u32::MAX,
    };
    let r: Vec<m::P4RegisterDetails> = dump(api, vm, &rd).unwrap();
    assert_eq!(r.len(), 1);
    let ms = |index, cir, pir| m::P4MeterSet {
        program: "fw".into(),
        meter: "policer".into(),
        index,
        cir,
        cburst: 10,
        pir,
        pburst: 20,
    };
    req::<_, m::P4MeterSetReply>(api, vm, &ms(3, 100.0, 200.0)).unwrap();
    assert_eq!(
        req::<_, m::P4MeterSetReply>(api, vm, &ms(3, 300.0, 200.0)).unwrap_err(),
        (Retval::InvalidValue, "pir must be at least cir".into())
    );
    assert_eq!(
        req::<_, m::P4MeterSetReply>(api, vm, &ms(16, 1.0, 2.0))
            .unwrap_err()
            .0,
        Retval::InvalidValue
    );
    assert_eq!(
        req::<_, m::P4MeterSetReply>(api, vm, &ms(0, f64::NAN, 2.0))
            .unwrap_err()
            .0,
        Retval::InvalidValue
    );

    // A table without a direct meter has no per-entry meter.
    let ems = m::P4TableEntryMeterSet {
        program: "fw".into(),
        table: "fib".into(),
        matches: vec![lpm(0x0a02_0000, 16)],
        priority: 0,
        cir: 1.0,
        cburst: 1,
        pir: 1.0,
        pburst: 1,
    };
    assert_eq!(
        req::<_, m::P4TableEntryMeterSetReply>(api, vm, &ems).unwrap_err(),
        (
            Retval::InvalidValue,
            "table `fib' has no direct_meter".into()
        )
    );

    // Unload.
    let un = |n: &str| m::P4Unload { name: n.into() };
    req::<_, m::P4UnloadReply>(api, vm, &un("fw")).unwrap();
    assert_eq!(
        req::<_, m::P4UnloadReply>(api, vm, &un("fw")).unwrap_err(),
        (Retval::NoSuchEntry, "no P4 program `fw'".into())
    );
    assert!(dump::<_, m::P4ProgramDetails>(api, vm, &pd(""))
        .unwrap()
        .is_empty());
}

fn if_index(vm: &Vlib, name: &str) -> u32 {
    vm.ext::<sluice_vnet::Interfaces>()
        .unwrap()
        .find(name)
        .unwrap()
        .0
}

/// The input redirect of interface `i` (0: none).
fn redirect_of(vm: &mut Vlib, i: u32) -> u32 {
    sluice_vnet::interface::with_if_attr(vm, i, |x| x.rx_redirect.load(Ordering::Relaxed)).unwrap()
}

/// `p4 load ... on <if>` takes an interface no program or feature redirects, and a load
/// that fails part-way through the interfaces redirects none of them.
#[test]
fn load_on_interfaces_is_exclusive_and_atomic() {
    let (mut vm, cli, api) = build();
    let (vm, api) = (&mut vm, &api);
    for c in [
        "create packet-generator interface pg0",
        "create packet-generator interface pg1",
    ] {
        cli.execute(vm, c).unwrap();
    }
    let (pg0, pg1) = (if_index(vm, "pg0"), if_index(vm, "pg1"));
    let load = |name: &str, ifs: Vec<u32>| m::P4Load {
        file: FIREWALL.into(),
        name: name.into(),
        mode: m::P4Mode::Single,
        sw_if_indexes: ifs,
    };
    req::<_, m::P4LoadReply>(api, vm, &load("fw", vec![pg0])).unwrap();
    assert_ne!(redirect_of(vm, pg0), 0);

    // Taken by another program: refused before anything changes (pg1 stays free).
    assert_eq!(
        req::<_, m::P4LoadReply>(api, vm, &load("fw2", vec![pg1, pg0])).unwrap_err(),
        (
            Retval::InUse,
            "interface `pg0' is taken by P4 program `fw'".into()
        )
    );
    assert_eq!(
        cli.execute(vm, &format!("p4 load {FIREWALL} name fw2 on pg1 pg0"))
            .unwrap_err()
            .to_string(),
        "interface `pg0' is taken by P4 program `fw'"
    );
    assert_eq!(redirect_of(vm, pg1), 0);
    let names = |vm: &mut Vlib| -> Vec<String> {
        let d: Vec<m::P4ProgramDetails> =
            dump(api, vm, &m::P4ProgramDump { name: "".into() }).unwrap();
        d.into_iter().map(|p| p.name).collect()
    };
    assert_eq!(names(vm), vec!["fw"]);
    // Unloading fw clears its redirect only.
    cli.execute(vm, &format!("p4 load {FIREWALL} name fw2 on pg1"))
        .unwrap();
    req::<_, m::P4UnloadReply>(api, vm, &m::P4Unload { name: "fw".into() }).unwrap();
    assert_eq!(redirect_of(vm, pg0), 0);
    assert_ne!(redirect_of(vm, pg1), 0);
    req::<_, m::P4UnloadReply>(api, vm, &m::P4Unload { name: "fw2".into() }).unwrap();

    // Another feature's redirect.
    let drop = vm.registry.lookup("error-drop").unwrap();
    sluice_vnet::set_rx_redirect(vm, sluice_vnet::SwIfIndex(pg1), Some(drop)).unwrap();
    assert_eq!(
        req::<_, m::P4LoadReply>(api, vm, &load("fw", vec![pg1])).unwrap_err(),
        (
            Retval::InUse,
            "interface `pg1' is taken by another feature's input redirect".into()
        )
    );
    sluice_vnet::set_rx_redirect(vm, sluice_vnet::SwIfIndex(pg1), None).unwrap();

    // Redirecting pg1 fails after pg0's was set (an interface table too short for pg1):
    // pg0's is undone, no program is left loaded, and the same load then succeeds.
    let table = std::mem::take(vm.ext_mut::<sluice_vnet::interface::IfAttrTable>());
    let short = (0..pg1).map(|_| Default::default()).collect();
    *vm.ext_mut::<sluice_vnet::interface::IfAttrTable>() =
        sluice_vnet::interface::IfAttrTable(Some(short));
    assert_eq!(
        req::<_, m::P4LoadReply>(api, vm, &load("fw", vec![pg0, pg1]))
            .unwrap_err()
            .0,
        Retval::NoSuchInterface
    );
    assert_eq!(redirect_of(vm, pg0), 0);
    assert!(names(vm).is_empty());
    *vm.ext_mut::<sluice_vnet::interface::IfAttrTable>() = table;
    req::<_, m::P4LoadReply>(api, vm, &load("fw", vec![pg0, pg1])).unwrap();
    assert!(redirect_of(vm, pg0) != 0 && redirect_of(vm, pg1) != 0);
}

/// A thread's copy of a table that refuses a change the master accepted is reported (the
/// copies never differ unless, as here, one is changed behind the control plane's back),
/// saying that the change was made all the same: the master's copy has lost the entry.
#[test]
fn a_change_a_thread_copy_refuses_is_reported() {
    let (mut vm, _cli, api) = build();
    let (vm, api) = (&mut vm, &api);
    let load = m::P4Load {
        file: FIREWALL.into(),
        name: "fw".into(),
        mode: m::P4Mode::Single,
        sw_if_indexes: Vec::new(),
    };
    req::<_, m::P4LoadReply>(api, vm, &load).unwrap();
    req::<_, m::P4TableEntryAddDelReply>(api, vm, &acl_entry(true, 10, "deny", vec![7])).unwrap();
    let p = sluice_p4::control::program(vm, "fw").unwrap();
    let (node, t) = (p.nodes[0], p.loaded.prog.table("acl").unwrap());
    vm.foreach_thread(move |tg| {
        if let Some(st) = tg
            .node_mut::<sluice_p4::node::P4Node>(node)
            .and_then(|n| n.st.as_mut())
        {
            st.ts.tables[t].clear().unwrap();
        }
    });
    assert_eq!(
        req::<_, m::P4TableEntryAddDelReply>(api, vm, &acl_entry(false, 10, "", vec![]))
            .unwrap_err(),
        (
            Retval::SystemError,
            "acl: the change was made, but thread 0's copy refused it (no such entry): the \
             copies now differ"
                .into()
        )
    );
    // The master's delete stood: deleting again is refused by the master itself.
    let again = req::<_, m::P4TableEntryAddDelReply>(api, vm, &acl_entry(false, 10, "", vec![]));
    assert_eq!(again.unwrap_err().1, "acl: no such entry");
}

/// Counters, registers, meters and tables by `control.name`; a short name two controls
/// declare is refused with both.
#[test]
fn objects_by_control_and_name() {
    let src = std::fs::read_to_string(FIREWALL).unwrap();
    let egress = "control FwEgress(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {\n    apply { }";
    assert!(src.contains(egress));
    let src = src.replace(
        egress,
        "control FwEgress(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    counter(8, CounterType.packets) rule_hits;
    register<bit<32>>(2) last_denied;
    meter(4, MeterType.bytes) policer;
    action nop() { }
    table fib {
        key = { hdr.ipv4.dstAddr: exact; }
        actions = { nop; }
        default_action = nop();
    }
    apply { fib.apply(); rule_hits.count(0); }",
    );
    let dir = std::env::temp_dir().join(format!("sluice-p4-api-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("fw2.p4");
    std::fs::write(&file, src).unwrap();
    let (mut vm, cli, api) = build();
    let (vm, api) = (&mut vm, &api);
    let load = m::P4Load {
        file: file.display().to_string(),
        name: "fw".into(),
        mode: m::P4Mode::Single,
        sw_if_indexes: Vec::new(),
    };
    req::<_, m::P4LoadReply>(api, vm, &load).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();

    let p: Vec<m::P4ProgramDetails> =
        dump(api, vm, &m::P4ProgramDump { name: "fw".into() }).unwrap();
    let objs = |v: &[m::P4Object]| -> Vec<(String, u32)> {
        v.iter().map(|o| (o.name.clone(), o.size)).collect()
    };
    let two =
        |n: &str, a: u32, b: u32| vec![(format!("FwIngress.{n}"), a), (format!("FwEgress.{n}"), b)];
    assert_eq!(objs(&p[0].counters), two("rule_hits", 1024, 8));
    assert_eq!(objs(&p[0].registers), two("last_denied", 1, 2));
    assert_eq!(objs(&p[0].meters), two("policer", 16, 4));

    let cd = |c: &str| m::P4CounterDump {
        program: "fw".into(),
        counter: c.into(),
        index: u32::MAX,
    };
    assert_eq!(
        dump::<_, m::P4CounterDetails>(api, vm, &cd("rule_hits")).unwrap_err(),
        (
            Retval::InvalidValue,
            "counter `rule_hits' is ambiguous: FwIngress.rule_hits, FwEgress.rule_hits".into()
        )
    );
    assert_eq!(
        dump::<_, m::P4CounterDetails>(api, vm, &cd("FwEgress.rule_hits"))
            .unwrap()
            .len(),
        8
    );
    assert_eq!(
        dump::<_, m::P4CounterDetails>(api, vm, &cd("FwIngress.rule_hits"))
            .unwrap()
            .len(),
        1024
    );
    assert_eq!(
        dump::<_, m::P4CounterDetails>(api, vm, &cd("FwVerify.rule_hits")).unwrap_err(),
        (
            Retval::NoSuchEntry,
            "no counter `FwVerify.rule_hits'".into()
        )
    );
    let rd = |r: &str| m::P4RegisterDump {
        program: "fw".into(),
        register: r.into(),
        index: u32::MAX,
    };
    assert_eq!(
        dump::<_, m::P4RegisterDetails>(api, vm, &rd("last_denied"))
            .unwrap_err()
            .0,
        Retval::InvalidValue
    );
    assert_eq!(
        dump::<_, m::P4RegisterDetails>(api, vm, &rd("FwEgress.last_denied"))
            .unwrap()
            .len(),
        2
    );
    let ms = |meter: &str| m::P4MeterSet {
        program: "fw".into(),
        meter: meter.into(),
        index: 10,
        cir: 1.0,
        cburst: 1,
        pir: 1.0,
        pburst: 1,
    };
    assert_eq!(
        req::<_, m::P4MeterSetReply>(api, vm, &ms("policer")).unwrap_err(),
        (
            Retval::InvalidValue,
            "meter `policer' is ambiguous: FwIngress.policer, FwEgress.policer".into()
        )
    );
    req::<_, m::P4MeterSetReply>(api, vm, &ms("FwIngress.policer")).unwrap();
    assert_eq!(
        req::<_, m::P4MeterSetReply>(api, vm, &ms("FwEgress.policer")).unwrap_err(),
        (
            Retval::InvalidValue,
            "index `10' out of range (size 4)".into()
        )
    );
    // The CLI and tables alike.
    assert_eq!(
        cli.execute(vm, "show p4 register fw last_denied")
            .unwrap_err()
            .to_string(),
        "register `last_denied' is ambiguous: FwIngress.last_denied, FwEgress.last_denied"
    );
    assert_eq!(
        cli.execute(vm, "p4 table show fw fib")
            .unwrap_err()
            .to_string(),
        "table `fib' is ambiguous: FwIngress.fib, FwEgress.fib"
    );
    let s = cli.execute(vm, "p4 table show fw FwEgress.fib").unwrap();
    assert!(s.starts_with("table FwEgress.fib: 0 entries"), "{s}");
}
