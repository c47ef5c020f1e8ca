//! The `p4 ...` commands: they parse their words and call the actions they share with the
//! API messages ([`crate::control`]), whose errors they print.
//!
//! ```text
//! p4 load <file.p4> [name <n>] [mode single|multi|auto] [on <if>...]
//!         [no-flat] [no-resolve] [no-redundant] [no-dual] [no-vector] [no-gen]
//! p4 unload [<name>]
//! show p4 program [<name>]
//! p4 table add <prog> <table> <action> key <v>... [priority <p>] param <v>...
//! p4 table del <prog> <table> key <v>... [priority <p>]
//! p4 table show <prog> <table>
//! p4 table clear <prog> <table>
//! show p4 counter <prog> <counter> [<index>]
//! show p4 register <prog> <register> [<index>]
//! p4 meter set <prog> <meter> <index> cir <rate> cburst <n> pir <rate> pburst <n>
//! p4 table meter <prog> <table> key <v>... [priority <p>] cir <rate> cburst <n> pir <rate> pburst <n>
//! ```
//!
//! Key values: exact `v`; lpm `v/len` (or `v` for a full-length prefix); ternary `v&&&mask`,
//! `v` (all bits) or `*`; range `lo..hi`, `v` or `*`. Values are decimal, `0x` hex, dotted
//! IPv4 or colon MAC.

use crate::control::{
    check_index, counter_read, load, meter_set, over_threads, program, register_read, state,
    table_add, table_clear, table_del, table_index, table_meter_set, table_read, unload, LoadSpec,
    METER_OFF,
};
use crate::error::P4Error;
use crate::exec::MeterConf;
use crate::ir::{Match, MatchKind, Program};
use crate::node::{self, Mode};
use sluice_cli::{Args, CliError, CommandTree};
use sluice_graph::Vlib;
use std::fmt::Write as _;
use std::sync::Arc;

/// Registers the commands.
pub fn register_cli(t: &mut CommandTree<Vlib>) {
    t.add(
        "p4 load",
        "p4 load <file.p4> [name <n>] [mode single|multi|auto] [on <if>...]",
        cli_load,
    );
    t.add("p4 unload", "p4 unload [<name>]", cli_unload);
    t.add("show p4 program", "show p4 program [<name>]", cli_show);
    t.add(
        "p4 table add",
        "p4 table add <prog> <table> <action> key <v>... [priority <p>] param <v>...",
        cli_table_add,
    );
    t.add(
        "p4 table del",
        "p4 table del <prog> <table> key <v>... [priority <p>]",
        cli_table_del,
    );
    t.add(
        "p4 table show",
        "p4 table show <prog> <table>",
        cli_table_show,
    );
    t.add(
        "p4 table clear",
        "p4 table clear <prog> <table>",
        cli_table_clear,
    );
    t.add(
        "show p4 counter",
        "show p4 counter <prog> <counter> [<index>]",
        cli_show_counter,
    );
    t.add(
        "show p4 register",
        "show p4 register <prog> <register> [<index>]",
        cli_show_register,
    );
    t.add(
        "p4 table meter",
        "p4 table meter <prog> <table> key <v>... [priority <p>] cir <r> cburst <n> pir <r> pburst <n>",
        cli_table_meter,
    );
    t.add(
        "p4 meter set",
        "p4 meter set <prog> <meter> <index> cir <r> cburst <n> pir <r> pburst <n>",
        cli_meter_set,
    );
}

/// Parses a value: decimal, `0x` hex, dotted IPv4, colon MAC.
pub fn parse_value(s: &str) -> Option<u64> {
    if s.contains(':') {
        let parts: Vec<&str> = s.split(':').collect();
        if parts.len() != 6 {
            return None;
        }
        let mut v = 0u64;
        for p in parts {
            if p.is_empty() || p.len() > 2 {
                return None;
            }
            v = (v << 8) | u8::from_str_radix(p, 16).ok()? as u64;
        }
        return Some(v);
    }
    if s.matches('.').count() == 3 {
        return s
            .parse::<std::net::Ipv4Addr>()
            .ok()
            .map(|a| u32::from(a) as u64);
    }
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        return u64::from_str_radix(h, 16).ok();
    }
    s.parse().ok()
}

fn value(s: &str, what: &str) -> Result<u64, CliError> {
    parse_value(s)
        .ok_or_else(|| CliError::new(format!("bad {what} `{}'", sluice_cli::error::clip(s))))
}

/// Parses one key token for a key of `kind`.
pub fn parse_match(tok: &str, kind: MatchKind, width: u16) -> Result<Match, CliError> {
    let full = crate::ir::mask(width);
    Ok(match kind {
        MatchKind::Exact => Match::Exact(value(tok, "key value")?),
        MatchKind::Lpm => match tok.split_once('/') {
            Some((v, l)) => {
                let l: u8 = l
                    .parse()
                    .map_err(|_| CliError::new(format!("bad prefix length in `{tok}'")))?;
                Match::Lpm(value(v, "key value")?, l)
            }
            None => Match::Lpm(value(tok, "key value")?, width.min(255) as u8),
        },
        MatchKind::Ternary => {
            if tok == "*" || tok == "_" {
                Match::Ternary(0, 0)
            } else if let Some((v, m)) = tok.split_once("&&&") {
                Match::Ternary(value(v, "key value")?, value(m, "key mask")?)
            } else {
                Match::Ternary(value(tok, "key value")?, full)
            }
        }
        MatchKind::Range => {
            if tok == "*" || tok == "_" {
                Match::Range(0, full)
            } else if let Some((a, b)) = tok.split_once("..") {
                Match::Range(value(a, "range start")?, value(b, "range end")?)
            } else {
                let v = value(tok, "key value")?;
                Match::Range(v, v)
            }
        }
    })
}

fn cli_load(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    let mut spec = LoadSpec::new(args.word("P4 file")?);
    while !args.is_empty() {
        if args.keyword("name") {
            spec.name = Some(args.word("program name")?);
        } else if args.keyword("mode") {
            let m = args.word("mode")?;
            spec.mode = match m.as_str() {
                "single" => Mode::Single,
                "multi" => Mode::Multi,
                "auto" => Mode::Auto,
                _ => {
                    return Err(CliError::new(format!(
                        "bad mode `{}'",
                        sluice_cli::error::clip(&m)
                    )))
                }
            };
        } else if args.keyword("on") {
            while let Some(w) = args.peek() {
                if matches!(
                    w,
                    "name"
                        | "mode"
                        | "no-flat"
                        | "no-resolve"
                        | "no-redundant"
                        | "no-dual"
                        | "no-vector"
                        | "no-gen"
                ) {
                    break;
                }
                let w = args.word("interface")?;
                let i = sluice_vnet::interface::resolve(vm, &w).ok_or_else(|| {
                    CliError::new(format!(
                        "unknown interface `{}'",
                        sluice_cli::error::clip(&w)
                    ))
                })?;
                spec.ifs.push(i);
            }
        } else if args.keyword("no-flat") {
            spec.opts.flat = false;
        } else if args.keyword("no-resolve") {
            spec.opts.resolved = false;
        } else if args.keyword("no-redundant") {
            spec.opts.no_redundant = false;
        } else if args.keyword("no-dual") {
            spec.opts.dual = false;
        } else if args.keyword("no-vector") {
            spec.vector = false;
        } else if args.keyword("no-gen") {
            spec.generated = false;
        } else {
            args.finish()?;
        }
    }
    Ok(load(vm, spec)?.1)
}

fn cli_unload(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    let name = args.opt_word();
    args.finish()?;
    let name = unload(vm, name.as_deref())?;
    Ok(format!("unloaded `{name}'"))
}

fn cli_show(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    let only = args.opt_word();
    args.finish()?;
    let mut out = String::new();
    let names: Vec<String> = state(vm).progs.keys().cloned().collect();
    if let Some(o) = &only {
        if !names.contains(o) {
            return Err(CliError::new(format!(
                "no P4 program `{}'",
                sluice_cli::error::clip(o)
            )));
        }
    }
    for name in names {
        if only.as_ref().is_some_and(|o| *o != name) {
            continue;
        }
        let autos = collect_auto(vm, &name)?;
        let node_names: Vec<String> = state(vm).progs[&name]
            .nodes
            .clone()
            .into_iter()
            .map(|i| vm.registry.node(i).name.clone())
            .collect();
        let st = state(vm);
        let p = &st.progs[&name];
        let prog = &p.loaded.prog;
        let o = prog.opts;
        let _ = writeln!(
            out,
            "{name}: {} mode {} nodes {} loaded in {:.3} s",
            p.file,
            p.loaded.mode.as_str(),
            p.nodes.len(),
            p.load_secs
        );
        let _ = writeln!(
            out,
            "  optimisations: flat-metadata {} resolved-actions {} redundant-tables-removed {} dual-loop {}",
            on(o.flat),
            on(o.resolved),
            on(o.no_redundant),
            on(o.dual)
        );
        let _ = writeln!(
            out,
            "  executor: {}",
            match (&p.loaded.vcode, p.loaded.gen) {
                (_, Some(g)) => format!(
                    "generated (sluice-p4c module `{}', {})",
                    g.name,
                    match p.loaded.mode {
                        Mode::Single => "single-node path",
                        Mode::Multi => "multi-node path",
                        Mode::Auto => "single-node and multi-node paths",
                    }
                ),
                (Ok(_), None) => "vector (single-node path)".to_string(),
                (Err(why), None) => format!("per packet ({why})"),
            }
        );
        let _ = writeln!(
            out,
            "  headers {} ({} bytes), metadata slots {}, parser states {}{}",
            prog.headers.len(),
            prog.hdr_bytes,
            prog.meta_slots,
            prog.states.len(),
            if prog.parser_loops {
                " (loops: bounded)"
            } else {
                ""
            }
        );
        if p.loaded.mode != Mode::Single {
            let segs: Vec<String> = p
                .loaded
                .segments
                .iter()
                .map(|(a, b)| format!("[{a}..{b})"))
                .collect();
            let _ = writeln!(out, "  ingress segments: {}", segs.join(" "));
        }
        if p.loaded.mode == Mode::Auto {
            let _ = writeln!(
                out,
                "  auto: {} frames split, {} in one node (never split: slower in every measured case; mode multi splits)",
                autos.split,
                autos.single
            );
        }
        let guess = p.loaded.gen.is_some_and(|g| g.guess);
        let first_pre = p
            .loaded
            .gen
            .is_some_and(|g| g.pre.first().copied().flatten().is_some());
        if p.loaded.gen.is_some() && p.loaded.mode != Mode::Multi && !first_pre {
            let _ = writeln!(out, "  staged: off (no early lookup of the first table)");
        } else if p.loaded.gen.is_some() && p.loaded.mode != Mode::Multi && !guess {
            let _ = writeln!(
                out,
                "  staged: off (the first table's key is not header fields at fixed offsets)"
            );
        } else if p.loaded.gen.is_some() && p.loaded.mode != Mode::Multi {
            let _ = writeln!(
                out,
                "  staged: {} frames in stages (when the first table is a 32-bit LPM or holds >= {} entries)",
                autos.staged,
                node::SPLIT_ENTRIES
            );
        }
        if !prog.inlined_tables.is_empty() {
            let _ = writeln!(out, "  inlined tables: {}", prog.inlined_tables.join(" "));
        }
        for (i, t) in prog.tables.iter().enumerate() {
            let keys: Vec<String> = t
                .keys
                .iter()
                .map(|k| format!("{}:{}/{}", k.name, k.kind.as_str(), k.width))
                .collect();
            let _ = writeln!(
                out,
                "  table {}.{} [{}] entries {} index {}{}{}",
                t.control,
                t.name,
                keys.join(" "),
                p.master.tables[i].len(),
                p.master.tables[i].index_kind(),
                if p.master.tables[i].shares_records() {
                    format!(
                        ", {} shared action records",
                        p.master.tables[i].recs_in_use()
                    )
                } else {
                    String::new()
                },
                if t.synthetic { " (synthetic)" } else { "" }
            );
        }
        let _ = writeln!(out, "  nodes: {}", node_names.join(" "));
    }
    if out.is_empty() {
        out.push_str("no P4 programs loaded\n");
    }
    Ok(out)
}

fn on(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// The entry node's [`node::Auto`] summed over threads: `NoAnswer` when a worker does not
/// answer, which makes all of `show p4 program` an error (docs/p4.md, CLI).
fn collect_auto(vm: &mut Vlib, name: &str) -> Result<node::Auto, P4Error> {
    let Some(&entry) = state(vm).progs.get(name).and_then(|p| p.nodes.first()) else {
        return Ok(node::Auto::default());
    };
    let add = |a: &mut node::Auto, b: &node::Auto| {
        a.split += b.split;
        a.single += b.single;
        a.staged += b.staged;
    };
    let fold = move |a: &mut node::Auto, _, st: &mut node::NodeState| add(a, &st.auto);
    over_threads(vm, vec![entry], node::Auto::default(), fold, move |a, b| {
        add(a, &b)
    })
}

fn read_keys(prog: &Program, t: usize, args: &mut Args) -> Result<(Vec<Match>, u32), CliError> {
    let tb = &prog.tables[t];
    if !args.keyword("key") {
        if tb.keys.is_empty() {
            return Ok((Vec::new(), 0));
        }
        return Err(CliError::new(match args.peek() {
            Some(w) => format!("expected `key', found `{}'", sluice_cli::error::clip(w)),
            None => "expected `key'".into(),
        }));
    }
    let mut ms = Vec::new();
    for k in &tb.keys {
        let w = args.word(&format!("value for key {}", k.name))?;
        ms.push(parse_match(&w, k.kind, k.width)?);
    }
    let mut prio = 0;
    if args.keyword("priority") {
        prio = args.u32("priority")?;
        if prio != 0 && !tb.prioritised() {
            return Err(CliError::new(format!(
                "priority {prio}: table `{}' has no ternary or range key",
                tb.name
            )));
        }
    }
    Ok((ms, prio))
}

/// The program and table named by the next two words.
fn prog_table(vm: &mut Vlib, args: &mut Args) -> Result<(String, Arc<Program>, usize), CliError> {
    let pn = args.word("program name")?;
    let prog = program(vm, &pn)?.loaded.prog.clone();
    let t = table_index(&prog, &args.word("table name")?)?;
    Ok((pn, prog, t))
}

fn cli_table_add(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    let (pn, prog, t) = prog_table(vm, args)?;
    let action = args.word("action name")?;
    // Named before the keys are read, so that a wrong action is the error reported.
    if prog.action_in(&action, &prog.tables[t].actions).is_none() {
        return Err(P4Error::NoAction(
            sluice_cli::error::clip(&action),
            prog.tables[t].name.clone(),
        )
        .into());
    }
    let (matches, priority) = read_keys(&prog, t, args)?;
    let mut params = Vec::new();
    if args.keyword("param") {
        while !args.is_empty() {
            let w = args.word("parameter")?;
            params.push(value(&w, "parameter")?);
        }
    }
    args.finish()?;
    let id = table_add(
        vm,
        &pn,
        &prog.tables[t].qualified(),
        &action,
        matches,
        priority,
        params,
    )?;
    Ok(format!("entry {id}"))
}

fn cli_table_del(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    let (pn, prog, t) = prog_table(vm, args)?;
    let (matches, priority) = read_keys(&prog, t, args)?;
    args.finish()?;
    table_del(vm, &pn, &prog.tables[t].qualified(), &matches, priority)?;
    Ok(String::new())
}

fn cli_table_clear(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    let (pn, prog, t) = prog_table(vm, args)?;
    args.finish()?;
    table_clear(vm, &pn, &prog.tables[t].qualified())?;
    Ok(String::new())
}

fn fmt_match(m: &Match) -> String {
    match m {
        Match::Exact(v) => format!("{v:#x}"),
        Match::Lpm(v, l) => format!("{v:#x}/{l}"),
        Match::Ternary(v, m) => format!("{v:#x}&&&{m:#x}"),
        Match::Range(a, b) => format!("{a:#x}..{b:#x}"),
    }
}

fn cli_table_show(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    let (pn, prog, t) = prog_table(vm, args)?;
    args.finish()?;
    let v = table_read(vm, &pn, &prog.tables[t].qualified())?;
    let hex = |ps: &[u64]| {
        ps.iter()
            .map(|v| format!("{v:#x}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "table {}: {} entries, index {}{}",
        v.name,
        v.entries.len(),
        v.index_kind,
        if v.const_entries {
            ", const entries"
        } else {
            ""
        }
    );
    for e in &v.entries {
        let keys: Vec<String> = e.matches.iter().map(fmt_match).collect();
        let _ = writeln!(
            out,
            "  [{}] key {}{} -> {}({}){}",
            e.id,
            keys.join(" "),
            if e.priority != 0 {
                format!(" priority {}", e.priority)
            } else {
                String::new()
            },
            e.action,
            hex(&e.params),
            if v.direct_counter {
                format!(" packets {} bytes {}", e.counts[0], e.counts[1])
            } else {
                String::new()
            }
        );
    }
    let _ = writeln!(
        out,
        "  default -> {}({}) misses {} packets {} bytes",
        v.default_action,
        hex(&v.default_params),
        v.misses[0],
        v.misses[1]
    );
    Ok(out)
}

fn index_arg(args: &mut Args) -> Result<Option<u32>, CliError> {
    match args.opt_word() {
        None => Ok(None),
        Some(w) => w
            .parse()
            .map(Some)
            .map_err(|_| CliError::new(format!("bad index `{}'", sluice_cli::error::clip(&w)))),
    }
}

fn cli_show_counter(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    let pn = args.word("program name")?;
    let n = args.word("counter name")?;
    let idx = index_arg(args)?;
    args.finish()?;
    let v = counter_read(vm, &pn, &n)?;
    if let Some(i) = idx {
        check_index(i, v.len() as u32)?;
    }
    let mut out = String::new();
    for (i, x) in v.iter().enumerate() {
        if idx.is_some_and(|k| k as usize != i) || (idx.is_none() && x[0] == 0) {
            continue;
        }
        let _ = writeln!(out, "{n}[{i}]: packets {} bytes {}", x[0], x[1]);
    }
    Ok(out)
}

fn cli_show_register(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    let pn = args.word("program name")?;
    let n = args.word("register name")?;
    let idx = index_arg(args)?;
    args.finish()?;
    let v = register_read(vm, &pn, &n)?;
    if let Some(i) = idx {
        check_index(i, v.len() as u32)?;
    }
    let mut out = String::new();
    for (i, &x) in v.iter().enumerate() {
        if idx.is_some_and(|k| k as usize != i) || (idx.is_none() && x == 0) {
            continue;
        }
        let _ = writeln!(out, "{n}[{i}]: {x:#x}");
    }
    Ok(out)
}

fn cli_meter_set(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    let pn = args.word("program name")?;
    let n = args.word("meter name")?;
    let i = index_arg(args)?.ok_or_else(|| CliError::new("expected a meter index"))?;
    let c = meter_conf(args)?;
    meter_set(vm, &pn, &n, i, &c)?;
    Ok(String::new())
}

/// `cir <r> cburst <n> pir <r> pburst <n>` (any order, omitted: 0).
fn meter_conf(args: &mut Args) -> Result<MeterConf, CliError> {
    let mut c = METER_OFF;
    while !args.is_empty() {
        if args.keyword("cir") {
            c.cir = args.f64("cir")?;
        } else if args.keyword("cburst") {
            c.cburst = args.u64("cburst")?;
        } else if args.keyword("pir") {
            c.pir = args.f64("pir")?;
        } else if args.keyword("pburst") {
            c.pburst = args.u64("pburst")?;
        } else {
            args.finish()?;
        }
    }
    Ok(c)
}

fn cli_table_meter(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    let (pn, prog, t) = prog_table(vm, args)?;
    let (matches, priority) = read_keys(&prog, t, args)?;
    let c = meter_conf(args)?;
    table_meter_set(vm, &pn, &prog.tables[t].qualified(), &matches, priority, &c)?;
    Ok(String::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_matches() {
        assert_eq!(parse_value("10.0.1.2"), Some(0x0a00_0102));
        assert_eq!(parse_value("02:fe:00:00:00:01"), Some(0x02fe_0000_0001));
        assert_eq!(parse_value("0x800"), Some(0x800));
        assert_eq!(parse_value("42"), Some(42));
        assert_eq!(parse_value("1.2.3"), None);
        assert_eq!(parse_value("zz:00:00:00:00:00"), None);
        assert_eq!(
            parse_match("10.0.0.0/8", MatchKind::Lpm, 32).unwrap(),
            Match::Lpm(0x0a00_0000, 8)
        );
        assert_eq!(
            parse_match("6&&&0xff", MatchKind::Ternary, 8).unwrap(),
            Match::Ternary(6, 0xff)
        );
        assert_eq!(
            parse_match("*", MatchKind::Range, 16).unwrap(),
            Match::Range(0, 0xffff)
        );
        assert_eq!(
            parse_match("80..90", MatchKind::Range, 16).unwrap(),
            Match::Range(80, 90)
        );
        assert_eq!(
            parse_match("10.0.0.0/x", MatchKind::Lpm, 32)
                .unwrap_err()
                .to_string(),
            "bad prefix length in `10.0.0.0/x'"
        );
        assert_eq!(
            parse_match("q", MatchKind::Exact, 8)
                .unwrap_err()
                .to_string(),
            "bad key value `q'"
        );
    }
}
