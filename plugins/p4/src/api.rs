//! p4's API messages (`api/p4.api`): load/unload, table entries keyed by match and priority
//! (P4Runtime's semantics), table dumps with direct counters, counters, registers and
//! meters — the same actions ([`crate::control`]) as the `p4 ...` CLI ([`crate::cli`]).

use crate::control::{self, LoadSpec, P4State};
use crate::error::P4Error;
use crate::exec::MeterConf;
use crate::ir::{Match, MatchKind, Program};
use crate::node::Mode;
use crate::table::TableError;
use sluice_api::{ApiError, ApiRegistry, Ctx, Retval, Stream};
use sluice_graph::Vlib;

/// Types generated from `api/p4.api`.
pub mod p4 {
    sluice_api::include_api!("p4");
}
use p4 as m;

/// `index` meaning every cell.
const ALL: u32 = u32::MAX;

/// Registers the module and its handlers.
pub fn register(r: &mut ApiRegistry) {
    r.module(&m::MODULE);
    r.request(load);
    r.request(unload);
    r.dump(program_dump);
    r.request(entry_add_del);
    r.request(table_clear);
    r.dump(table_dump);
    r.dump(counter_dump);
    r.dump(register_dump);
    r.request(meter_set);
    r.request(entry_meter_set);
}

/// The result code of an error.
pub fn retval(e: &P4Error) -> Retval {
    match e {
        P4Error::NoProgram(_) | P4Error::NoObject(..) => Retval::NoSuchEntry,
        P4Error::AlreadyLoaded(_) => Retval::AlreadyExists,
        P4Error::InterfaceTaken { .. } => Retval::InUse,
        P4Error::Replica(..) | P4Error::NoAnswer(..) | P4Error::NotTaken { .. } => {
            Retval::SystemError
        }
        P4Error::Table(_, t) => match t {
            TableError::Exists => Retval::AlreadyExists,
            TableError::NotFound => Retval::NoSuchEntry,
            TableError::Full(_) | TableError::Capacity(_) => Retval::NoResources,
            TableError::Const => Retval::NotSupported,
            _ => Retval::InvalidValue,
        },
        P4Error::NoAction(..)
        | P4Error::Index(..)
        | P4Error::Invalid(_)
        | P4Error::Compile(_)
        | P4Error::Ambiguous { .. } => Retval::InvalidValue,
        P4Error::Read(..) => Retval::SystemError,
        P4Error::Vnet(v) => v.retval(),
    }
}

impl From<P4Error> for ApiError {
    fn from(e: P4Error) -> Self {
        ApiError::new(retval(&e), e.to_string())
    }
}

fn kind_out(k: MatchKind) -> m::P4MatchKind {
    match k {
        MatchKind::Exact => m::P4MatchKind::Exact,
        MatchKind::Lpm => m::P4MatchKind::Lpm,
        MatchKind::Ternary => m::P4MatchKind::Ternary,
        MatchKind::Range => m::P4MatchKind::Range,
    }
}

fn kind_in(k: m::P4MatchKind) -> MatchKind {
    match k {
        m::P4MatchKind::Exact => MatchKind::Exact,
        m::P4MatchKind::Lpm => MatchKind::Lpm,
        m::P4MatchKind::Ternary => MatchKind::Ternary,
        m::P4MatchKind::Range => MatchKind::Range,
    }
}

fn mode_out(x: Mode) -> m::P4Mode {
    match x {
        Mode::Single => m::P4Mode::Single,
        Mode::Multi => m::P4Mode::Multi,
        Mode::Auto => m::P4Mode::Auto,
    }
}

/// The API's matches as the table's (one per key, each of its key's kind, no field its kind
/// does not use) and the entry's priority, checked as P4Runtime checks them: at least 1 in
/// a table with a ternary or range key, 0 in the others.
fn entry_key(
    prog: &Program,
    table: &str,
    ms: &[m::P4Match],
    priority: u32,
) -> Result<(Vec<Match>, u32), P4Error> {
    let tb = &prog.tables[control::table_index(prog, table)?];
    if ms.len() != tb.keys.len() {
        return Err(P4Error::Invalid(format!(
            "matches: table `{}' has {} keys, got {}",
            tb.name,
            tb.keys.len(),
            ms.len()
        )));
    }
    let matches = tb
        .keys
        .iter()
        .zip(ms)
        .enumerate()
        .map(|(i, (k, x))| {
            if k.kind != kind_in(x.kind) {
                return Err(P4Error::Invalid(format!(
                    "matches[{i}]: key `{}' is {}, not {}",
                    k.name,
                    k.kind.as_str(),
                    kind_in(x.kind).as_str()
                )));
            }
            // The fields this kind does not use.
            let unused = match k.kind {
                MatchKind::Exact => vec![("mask", x.mask), ("high", x.high)],
                MatchKind::Lpm => vec![("mask", x.mask), ("high", x.high)],
                MatchKind::Ternary => vec![("high", x.high)],
                MatchKind::Range => vec![("mask", x.mask)],
            };
            let pl = ("prefix_len", x.prefix_len as u64);
            let unused = unused
                .into_iter()
                .chain((k.kind != MatchKind::Lpm).then_some(pl))
                .find(|&(_, v)| v != 0)
                .map(|(f, _)| f);
            if let Some(f) = unused {
                return Err(P4Error::Invalid(format!(
                    "matches[{i}]: {f} is not used by a {} match (must be 0)",
                    k.kind.as_str()
                )));
            }
            Ok(match k.kind {
                MatchKind::Exact => Match::Exact(x.value),
                MatchKind::Lpm => Match::Lpm(x.value, x.prefix_len),
                MatchKind::Ternary => Match::Ternary(x.value, x.mask),
                MatchKind::Range => Match::Range(x.value, x.high),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let prioritised = tb.prioritised();
    if prioritised && priority == 0 {
        return Err(P4Error::Invalid(
            "priority 0: entries of ternary/range tables need a priority of at least 1".into(),
        ));
    }
    if !prioritised && priority != 0 {
        return Err(P4Error::Invalid(
            "priority is for ternary/range tables".into(),
        ));
    }
    Ok((matches, priority))
}

fn match_out(x: &Match) -> m::P4Match {
    let (kind, value, mask, high, prefix_len) = match *x {
        Match::Exact(v) => (m::P4MatchKind::Exact, v, 0, 0, 0),
        Match::Lpm(v, l) => (m::P4MatchKind::Lpm, v, 0, 0, l),
        Match::Ternary(v, k) => (m::P4MatchKind::Ternary, v, k, 0, 0),
        Match::Range(a, b) => (m::P4MatchKind::Range, a, 0, b, 0),
    };
    m::P4Match {
        kind,
        value,
        mask,
        high,
        prefix_len,
    }
}

fn load(vm: &mut Vlib, _: &mut Ctx<'_>, q: m::P4Load) -> Result<m::P4LoadReply, ApiError> {
    let mut spec = LoadSpec::new(q.file);
    spec.name = (!q.name.is_empty()).then_some(q.name);
    spec.mode = match q.mode {
        m::P4Mode::Single => Mode::Single,
        m::P4Mode::Multi => Mode::Multi,
        m::P4Mode::Auto => Mode::Auto,
    };
    spec.ifs = q.sw_if_indexes;
    let (name, _) = control::load(vm, spec)?;
    let p = control::program(vm, &name)?;
    Ok(m::P4LoadReply {
        n_tables: p.loaded.prog.tables.len() as u32,
        n_nodes: p.nodes.len() as u32,
        name,
    })
}

fn unload(vm: &mut Vlib, _: &mut Ctx<'_>, q: m::P4Unload) -> Result<m::P4UnloadReply, ApiError> {
    control::unload(vm, Some(&q.name))?;
    Ok(m::P4UnloadReply {})
}

fn program_dump(
    vm: &mut Vlib,
    q: m::P4ProgramDump,
    out: &mut Stream<'_, '_, m::P4ProgramDetails>,
) -> Result<(), ApiError> {
    if !q.name.is_empty() {
        control::program(vm, &q.name)?;
    }
    let st = vm.ext_mut::<P4State>();
    for (name, p) in &st.progs {
        if !q.name.is_empty() && q.name != *name {
            continue;
        }
        let prog = &p.loaded.prog;
        // `control.name`, as the tables.
        let obj = |c: &str, n: &str, size: u32| m::P4Object {
            name: crate::ir::qualified(c, n),
            size,
        };
        out.send(&m::P4ProgramDetails {
            name: name.clone(),
            file: p.file.clone(),
            mode: mode_out(p.loaded.mode),
            n_nodes: p.nodes.len() as u32,
            sw_if_indexes: p.ifs.clone(),
            tables: prog
                .tables
                .iter()
                .zip(&p.master.tables)
                .map(|(t, tr)| m::P4TableInfo {
                    name: t.qualified(),
                    keys: t.keys.iter().map(|k| kind_out(k.kind)).collect(),
                    n_entries: tr.len() as u32,
                })
                .collect(),
            counters: (prog.counters.iter())
                .map(|x| obj(&x.control, &x.name, x.size))
                .collect(),
            registers: (prog.registers.iter())
                .map(|x| obj(&x.control, &x.name, x.size))
                .collect(),
            meters: (prog.meters.iter())
                .map(|x| obj(&x.control, &x.name, x.size))
                .collect(),
        });
    }
    Ok(())
}

fn entry_add_del(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: m::P4TableEntryAddDel,
) -> Result<m::P4TableEntryAddDelReply, ApiError> {
    let prog = control::program(vm, &q.program)?.loaded.prog.clone();
    let (matches, priority) = entry_key(&prog, &q.table, &q.matches, q.priority)?;
    let entry_id = if q.is_add {
        control::table_add(
            vm, &q.program, &q.table, &q.action, matches, priority, q.params,
        )?
    } else {
        if !q.action.is_empty() || !q.params.is_empty() {
            return Err(P4Error::Invalid(
                "a delete names no action or params (the entry is its matches and priority)".into(),
            )
            .into());
        }
        control::table_del(vm, &q.program, &q.table, &matches, priority)?;
        0
    };
    Ok(m::P4TableEntryAddDelReply { entry_id })
}

fn table_clear(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: m::P4TableClear,
) -> Result<m::P4TableClearReply, ApiError> {
    control::table_clear(vm, &q.program, &q.table)?;
    Ok(m::P4TableClearReply {})
}

fn table_dump(
    vm: &mut Vlib,
    q: m::P4TableDump,
    out: &mut Stream<'_, '_, m::P4TableDetails>,
) -> Result<(), ApiError> {
    let v = control::table_read(vm, &q.program, &q.table)?;
    for e in &v.entries {
        out.send(&m::P4TableDetails {
            entry_id: e.id,
            is_default: false,
            matches: e.matches.iter().map(match_out).collect(),
            priority: e.priority,
            action: e.action.clone(),
            params: e.params.clone(),
            packets: e.counts[0],
            bytes: e.counts[1],
        });
    }
    out.send(&m::P4TableDetails {
        entry_id: ALL,
        is_default: true,
        matches: Vec::new(),
        priority: 0,
        action: v.default_action,
        params: v.default_params,
        packets: v.misses[0],
        bytes: v.misses[1],
    });
    Ok(())
}

/// The cells to send: every one, or `index` (checked against the size).
fn cells(index: u32, size: usize) -> Result<std::ops::Range<usize>, P4Error> {
    if index == ALL {
        return Ok(0..size);
    }
    control::check_index(index, size as u32)?;
    Ok(index as usize..index as usize + 1)
}

fn counter_dump(
    vm: &mut Vlib,
    q: m::P4CounterDump,
    out: &mut Stream<'_, '_, m::P4CounterDetails>,
) -> Result<(), ApiError> {
    let v = control::counter_read(vm, &q.program, &q.counter)?;
    for i in cells(q.index, v.len())? {
        out.send(&m::P4CounterDetails {
            index: i as u32,
            packets: v[i][0],
            bytes: v[i][1],
        });
    }
    Ok(())
}

fn register_dump(
    vm: &mut Vlib,
    q: m::P4RegisterDump,
    out: &mut Stream<'_, '_, m::P4RegisterDetails>,
) -> Result<(), ApiError> {
    let v = control::register_read(vm, &q.program, &q.register)?;
    for i in cells(q.index, v.len())? {
        out.send(&m::P4RegisterDetails {
            index: i as u32,
            value: v[i],
        });
    }
    Ok(())
}

/// A meter configuration from a message's fields.
fn conf(cir: f64, cburst: u64, pir: f64, pburst: u64) -> MeterConf {
    MeterConf {
        cir,
        cburst,
        pir,
        pburst,
    }
}

fn meter_set(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: m::P4MeterSet,
) -> Result<m::P4MeterSetReply, ApiError> {
    let c = conf(q.cir, q.cburst, q.pir, q.pburst);
    control::meter_set(vm, &q.program, &q.meter, q.index, &c)?;
    Ok(m::P4MeterSetReply {})
}

fn entry_meter_set(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: m::P4TableEntryMeterSet,
) -> Result<m::P4TableEntryMeterSetReply, ApiError> {
    let prog = control::program(vm, &q.program)?.loaded.prog.clone();
    let (matches, priority) = entry_key(&prog, &q.table, &q.matches, q.priority)?;
    let c = conf(q.cir, q.cburst, q.pir, q.pburst);
    control::table_meter_set(vm, &q.program, &q.table, &matches, priority, &c)?;
    Ok(m::P4TableEntryMeterSetReply {})
}
