//! The `p4 ...` commands, the control-plane state of loaded programs, and the actions both
//! the commands and the API messages (`crate::api`) call (`load`, `table_add`, ...).
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

use crate::error::P4Error;
use crate::exec::{MeterConf, Shared, ThreadState};
use crate::ir::{EntrySpec, Match, MatchKind, Opts, Program};
use crate::node::{self, Loaded, Mode, NodeState, P4Node};
use crate::table::TableError;
use sluice_cli::{Args, CliError, CommandTree};
use sluice_graph::{NodeIndex, NodeKind, NodeRegistration, Vlib};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// A loaded program (main thread).
pub struct LoadedProg {
    pub file: String,
    pub loaded: Arc<Loaded>,
    /// The master copy of the tables (validates changes, answers `show`).
    pub master: ThreadState,
    /// Nodes in use: entry first, then the segment nodes.
    pub nodes: Vec<NodeIndex>,
    pub ifs: Vec<u32>,
    pub load_secs: f64,
    /// The meter cells of tables with a `direct_meter`, by table.
    pub meter_cells: BTreeMap<usize, MeterCells>,
}

/// The cells of a table's direct meter: one per entry whose action reads it (the action's
/// hidden last parameter), the last one for the default action (never configured).
#[derive(Debug)]
pub struct MeterCells {
    /// The meter (`Program::meters`).
    pub meter: usize,
    /// Cells for entries: `0..limit`.
    pub limit: u32,
    next: u32,
    free: Vec<u32>,
    /// Entry id -> cell.
    pub of_entry: BTreeMap<u32, u32>,
}

impl MeterCells {
    /// The direct-meter cells of every table of `prog` that has one.
    fn of_program(prog: &Program, master: &ThreadState) -> BTreeMap<usize, MeterCells> {
        let mut out = BTreeMap::new();
        for (t, tb) in prog.tables.iter().enumerate() {
            let Some(m) = tb.direct_meter.map(usize::from) else {
                continue;
            };
            let mut of_entry = BTreeMap::new();
            for (id, e) in master.tables[t].iter() {
                let r = master.tables[t].rec_of(e);
                if crate::compile::direct_meter_of(&prog.actions[r.action as usize]).is_some() {
                    of_entry.insert(id, r.params[r.nparams as usize - 1] as u32);
                }
            }
            out.insert(
                t,
                MeterCells {
                    meter: m,
                    limit: prog.meters[m].size - 1,
                    next: of_entry.values().map(|&c| c + 1).max().unwrap_or(0),
                    free: Vec::new(),
                    of_entry,
                },
            );
        }
        out
    }

    fn alloc(&mut self) -> Option<u32> {
        self.free.pop().or_else(|| {
            (self.next < self.limit).then(|| {
                self.next += 1;
                self.next - 1
            })
        })
    }
}

/// Control-plane state: programs by name, and every node ever made for a name (nodes stay
/// in the graph after `p4 unload` and are reused by the next program of that name).
#[derive(Default)]
pub struct P4State {
    pub progs: BTreeMap<String, LoadedProg>,
    pub pools: BTreeMap<String, Vec<NodeIndex>>,
}

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

fn state(vm: &mut Vlib) -> &mut P4State {
    vm.ext_mut::<P4State>()
}

/// The loaded program `name`.
pub fn program<'a>(vm: &'a mut Vlib, name: &str) -> Result<&'a mut LoadedProg, P4Error> {
    state(vm)
        .progs
        .get_mut(name)
        .ok_or_else(|| P4Error::NoProgram(sluice_cli::error::clip(name)))
}

fn graph_error(e: sluice_graph::GraphError) -> P4Error {
    sluice_vnet::error::VnetError::System(e.to_string()).into()
}

/// The index of table `name` of `p`.
pub fn table_index(p: &Program, name: &str) -> Result<usize, P4Error> {
    p.table(name).ok_or_else(|| P4Error::no("table", name))
}

/// What `p4 load` (and `p4_load`) loads.
#[derive(Clone, Debug)]
pub struct LoadSpec {
    /// The P4 source file.
    pub file: String,
    /// The program's name (default: the file's stem).
    pub name: Option<String>,
    pub mode: Mode,
    /// Interfaces whose received frames go to the program (`on <if>...`).
    pub ifs: Vec<u32>,
    /// The optimisations (all on by default; `no-flat` ... turn one off).
    pub opts: Opts,
    /// The per-frame executor (`no-vector` turns it off).
    pub vector: bool,
    /// The generated code, when there is a module for the program (`no-gen` turns it off).
    pub generated: bool,
}

impl LoadSpec {
    /// Loads `file` with the defaults.
    pub fn new(file: impl Into<String>) -> Self {
        LoadSpec {
            file: file.into(),
            name: None,
            mode: Mode::Single,
            ifs: Vec::new(),
            opts: Opts::default(),
            vector: true,
            generated: true,
        }
    }
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

/// Compiles and loads a program: its name and a one-line summary.
pub fn load(vm: &mut Vlib, spec: LoadSpec) -> Result<(String, String), P4Error> {
    let LoadSpec {
        file,
        name,
        mode,
        ifs,
        opts,
        vector,
        generated,
    } = spec;
    let name = name.unwrap_or_else(|| {
        std::path::Path::new(&file)
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("p4")
            .to_string()
    });
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(P4Error::Invalid(format!(
            "bad program name `{}'",
            sluice_cli::error::clip(&name)
        )));
    }
    if state(vm).progs.contains_key(&name) {
        return Err(P4Error::AlreadyLoaded(name));
    }
    if let Some(&i) = ifs.iter().find(|&&i| {
        vm.ext::<sluice_vnet::Interfaces>()
            .is_none_or(|x| x.get(sluice_vnet::SwIfIndex(i)).is_none())
    }) {
        return Err(sluice_vnet::error::VnetError::NoSuchInterface(i).into());
    }
    let t0 = std::time::Instant::now();
    let src = std::fs::read_to_string(&file)
        .map_err(|e| P4Error::Read(sluice_cli::error::clip(&file), e.to_string()))?;
    let mut prog = crate::compile(&src, &file, opts)?;
    // Generated code runs exactly the program it was made from (found before the split of
    // the ingress, which makes the same cuts as its phases): the single node, and the
    // segment nodes of multi mode and auto's split.
    let gen = if generated && vector {
        crate::generated::find(&prog)
    } else {
        None
    };
    if mode != Mode::Single {
        node::split_for_multi(&mut prog);
    }
    let segments = if mode == Mode::Single {
        vec![(0, prog.ingress.len())]
    } else {
        node::segments(&prog)
    };
    let master = ThreadState::new(&prog).map_err(|e| P4Error::Table("const entries".into(), e))?;
    let meter_cells = MeterCells::of_program(&prog, &master);
    let nodes = ensure_nodes(vm, &name, segments.len())?;
    let mut seg_next = Vec::new();
    for k in 0..nodes.len() {
        if k + 1 < nodes.len() {
            let nx = vm.add_next(nodes[k], nodes[k + 1]).map_err(graph_error)?;
            seg_next.push(Some(nx.0));
        } else {
            seg_next.push(None);
        }
    }
    let prog = Arc::new(prog);
    let vcode = if vector {
        crate::vec::VCode::new(&prog)
    } else {
        Err("no-vector".to_string())
    };
    let nbuf = vm.pool.len() as usize;
    let segs = segments.len();
    let loaded = Arc::new(Loaded {
        gen,
        vcode,
        code: crate::code::Code::new(&prog),
        prog: prog.clone(),
        shared: Arc::new(Shared::new(&prog)),
        segments,
        mode,
        parse_pure: prog.parse_verify_stateless(),
        side: (0..vm.n_threads())
            .map(|_| Mutex::new(node::Side::new(mode, gen, segs, nbuf)))
            .collect(),
    });
    install(vm, &name, &nodes, Some((loaded.clone(), seg_next)));
    for &i in &ifs {
        sluice_vnet::set_rx_redirect(vm, sluice_vnet::SwIfIndex(i), Some(nodes[0]))?;
    }
    let load_secs = t0.elapsed().as_secs_f64();
    let n_entries: usize = master.tables.iter().map(|t| t.len()).sum();
    let msg = format!(
        "loaded `{name}': {} tables, {} actions, {} node(s) ({}), {} const entries, {:.3} s",
        prog.tables.len(),
        prog.actions.len() - 1,
        nodes.len(),
        mode.as_str(),
        n_entries,
        load_secs
    );
    state(vm).progs.insert(
        name.clone(),
        LoadedProg {
            file,
            loaded,
            master,
            nodes,
            ifs,
            load_secs,
            meter_cells,
        },
    );
    Ok((name, msg))
}

/// The first `n` nodes of a program name's pool, created as needed.
fn ensure_nodes(vm: &mut Vlib, name: &str, n: usize) -> Result<Vec<NodeIndex>, P4Error> {
    let have = state(vm).pools.get(name).cloned().unwrap_or_default();
    let mut out = have.clone();
    for k in have.len()..n {
        let nn = if k == 0 {
            format!("p4-{name}")
        } else {
            format!("p4-{name}-s{k}")
        };
        let reg = NodeRegistration::new(&nn, NodeKind::Internal, move |t| {
            Box::new(P4Node::new(k, t))
        })
        .nexts(node::P4Next::NAMES)
        .counters(node::P4Counter::DESCS);
        let i = vm.add_node(reg).map_err(graph_error)?;
        out.push(i);
    }
    state(vm).pools.insert(name.to_string(), out.clone());
    out.truncate(n.max(1));
    Ok(out)
}

/// Installs (or with `None` removes) a program in its nodes on every thread.
fn install(
    vm: &mut Vlib,
    name: &str,
    nodes: &[NodeIndex],
    what: Option<(Arc<Loaded>, Vec<Option<u16>>)>,
) {
    let pool = state(vm).pools.get(name).cloned().unwrap_or_default();
    let nodes = nodes.to_vec();
    vm.foreach_thread(move |tg| {
        for &i in &pool {
            if let Some(n) = tg.node_mut::<P4Node>(i) {
                n.st = None;
            }
        }
        if let Some((l, seg_next)) = &what {
            for (k, &i) in nodes.iter().enumerate() {
                let ts = ThreadState::new(&l.prog).ok();
                if let (Some(n), Some(ts)) = (tg.node_mut::<P4Node>(i), ts) {
                    n.st = Some(NodeState::new(l.clone(), ts, seg_next[k]));
                }
            }
        }
    });
}

fn cli_unload(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    let name = args.opt_word();
    args.finish()?;
    let name = unload(vm, name.as_deref())?;
    Ok(format!("unloaded `{name}'"))
}

/// Unloads program `name` (`None`: the only one loaded); returns its name.
pub fn unload(vm: &mut Vlib, name: Option<&str>) -> Result<String, P4Error> {
    let name = match name {
        Some(n) => n.to_string(),
        None => {
            let st = state(vm);
            if st.progs.len() != 1 {
                return Err(P4Error::Invalid(format!(
                    "{} P4 programs loaded: name the one to unload",
                    st.progs.len()
                )));
            }
            st.progs.keys().next().cloned().unwrap_or_default()
        }
    };
    let p = state(vm)
        .progs
        .remove(&name)
        .ok_or_else(|| P4Error::NoProgram(sluice_cli::error::clip(&name)))?;
    for &i in &p.ifs {
        let _ = sluice_vnet::set_rx_redirect(vm, sluice_vnet::SwIfIndex(i), None);
    }
    install(vm, &name, &p.nodes, None);
    Ok(name)
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
        let autos = collect_auto(vm, &name);
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
                "  auto: {} frames split, {} in one node (split when a later segment's table has >= {} entries)",
                autos.split,
                autos.single,
                node::SPLIT_ENTRIES
            );
        }
        let reparse = p.loaded.gen.is_some_and(|g| g.reparse);
        let first_pre = p
            .loaded
            .gen
            .is_some_and(|g| g.pre.first().copied().flatten().is_some());
        if p.loaded.gen.is_some() && p.loaded.mode != Mode::Multi && !p.loaded.parse_pure {
            let _ = writeln!(
                out,
                "  staged: off (the parser or verify touches a register or meter)"
            );
        } else if p.loaded.gen.is_some() && p.loaded.mode != Mode::Multi && !first_pre {
            let _ = writeln!(out, "  staged: off (no early lookup of the first table)");
        } else if p.loaded.gen.is_some() && p.loaded.mode != Mode::Multi && !reparse {
            let _ = writeln!(
                out,
                "  staged: off (the parser or verify writes more than metadata and the parser error)"
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

/// The entry node's [`node::Auto`] summed over threads.
fn collect_auto(vm: &mut Vlib, name: &str) -> node::Auto {
    let Some(&entry) = state(vm).progs.get(name).and_then(|p| p.nodes.first()) else {
        return node::Auto::default();
    };
    let acc = Arc::new(Mutex::new(node::Auto::default()));
    let a2 = acc.clone();
    vm.foreach_thread(move |tg| {
        if let Some(st) = tg.node_mut::<P4Node>(entry).and_then(|n| n.st.as_ref()) {
            if let Ok(mut a) = a2.lock() {
                a.split += st.auto.split;
                a.single += st.auto.single;
                a.staged += st.auto.staged;
            }
        }
    });
    let r = *acc.lock().unwrap_or_else(|e| e.into_inner());
    r
}

/// Applies a table change to the master, then to every node on every thread.
fn replicate(
    vm: &mut Vlib,
    nodes: Vec<NodeIndex>,
    t: usize,
    f: impl Fn(&mut crate::table::TableRt, &Program) -> Result<(), TableError> + Send + Sync + 'static,
    prog: Arc<Program>,
) {
    vm.foreach_thread(move |tg| {
        for &i in &nodes {
            if let Some(st) = tg.node_mut::<P4Node>(i).and_then(|n| n.st.as_mut()) {
                let _ = f(&mut st.ts.tables[t], &prog);
            }
        }
    });
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

/// Adds an entry (P4Runtime's INSERT: `matches` and `priority` identify it) to table
/// `table` of program `prog` on the master and every thread; returns its id.
pub fn table_add(
    vm: &mut Vlib,
    prog: &str,
    table: &str,
    action: &str,
    matches: Vec<Match>,
    priority: u32,
    params: Vec<u64>,
) -> Result<u32, P4Error> {
    let p = program(vm, prog)?;
    let pr = p.loaded.prog.clone();
    let t = table_index(&pr, table)?;
    let action = pr.action_in(action, &pr.tables[t].actions).ok_or_else(|| {
        P4Error::NoAction(sluice_cli::error::clip(action), pr.tables[t].name.clone())
    })?;
    let terr = |e| P4Error::Table(pr.tables[t].name.clone(), e);
    let mut params = params;
    // An action reading the table's direct meter gets the entry's cell as its hidden last
    // parameter.
    let cell = if crate::compile::direct_meter_of(&pr.actions[action as usize]).is_some() {
        let declared = pr.actions[action as usize].params.len() - 1;
        if params.len() != declared {
            return Err(terr(TableError::ParamCount(declared, params.len())));
        }
        let cells = p
            .meter_cells
            .get_mut(&t)
            .expect("cells of a direct-metered table");
        let c = cells
            .alloc()
            .ok_or_else(|| terr(TableError::Full(cells.limit as u64)))?;
        params.push(c as u64);
        Some((cells.meter, c))
    } else {
        None
    };
    let spec = EntrySpec {
        matches,
        action,
        params,
        priority,
    };
    let id = match p.master.tables[t].add(&pr.tables[t], &pr.actions, &spec) {
        Ok(id) => id,
        Err(e) => {
            if let Some((_, c)) = cell {
                p.meter_cells.get_mut(&t).expect("cells").free.push(c);
            }
            return Err(terr(e));
        }
    };
    if let Some((m, c)) = cell {
        p.loaded.shared.meters[m][c as usize].set(&METER_OFF);
        p.meter_cells
            .get_mut(&t)
            .expect("cells")
            .of_entry
            .insert(id, c);
    }
    let nodes = p.nodes.clone();
    replicate(
        vm,
        nodes,
        t,
        move |tr, prog| tr.add(&prog.tables[t], &prog.actions, &spec).map(|_| ()),
        pr,
    );
    Ok(id)
}

fn cli_table_del(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    let (pn, prog, t) = prog_table(vm, args)?;
    let (matches, priority) = read_keys(&prog, t, args)?;
    args.finish()?;
    table_del(vm, &pn, &prog.tables[t].qualified(), &matches, priority)?;
    Ok(String::new())
}

/// Deletes the entry with these matches and priority (P4Runtime's DELETE).
pub fn table_del(
    vm: &mut Vlib,
    prog: &str,
    table: &str,
    matches: &[Match],
    priority: u32,
) -> Result<(), P4Error> {
    let p = program(vm, prog)?;
    let pr = p.loaded.prog.clone();
    let t = table_index(&pr, table)?;
    let id = p.master.tables[t].find(matches, priority);
    p.master.tables[t]
        .del(matches, priority)
        .map_err(|e| P4Error::Table(pr.tables[t].name.clone(), e))?;
    if let (Some(cells), Some(id)) = (p.meter_cells.get_mut(&t), id) {
        if let Some(c) = cells.of_entry.remove(&id) {
            cells.free.push(c);
        }
    }
    let nodes = p.nodes.clone();
    let matches = matches.to_vec();
    replicate(vm, nodes, t, move |tr, _| tr.del(&matches, priority), pr);
    Ok(())
}

fn cli_table_clear(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    let (pn, prog, t) = prog_table(vm, args)?;
    args.finish()?;
    table_clear(vm, &pn, &prog.tables[t].qualified())?;
    Ok(String::new())
}

/// Deletes every entry of a table (not its default action).
pub fn table_clear(vm: &mut Vlib, prog: &str, table: &str) -> Result<(), P4Error> {
    let p = program(vm, prog)?;
    let pr = p.loaded.prog.clone();
    let t = table_index(&pr, table)?;
    p.master.tables[t]
        .clear()
        .map_err(|e| P4Error::Table(pr.tables[t].name.clone(), e))?;
    if let Some(cells) = p.meter_cells.get_mut(&t) {
        cells.free.clear();
        cells.next = 0;
        cells.of_entry.clear();
    }
    let nodes = p.nodes.clone();
    replicate(vm, nodes, t, move |tr, _| tr.clear(), pr);
    Ok(())
}

fn fmt_match(m: &Match) -> String {
    match m {
        Match::Exact(v) => format!("{v:#x}"),
        Match::Lpm(v, l) => format!("{v:#x}/{l}"),
        Match::Ternary(v, m) => format!("{v:#x}&&&{m:#x}"),
        Match::Range(a, b) => format!("{a:#x}..{b:#x}"),
    }
}

/// One entry of a [`TableView`].
#[derive(Clone, Debug, PartialEq)]
pub struct EntryView {
    pub id: u32,
    pub matches: Vec<Match>,
    pub priority: u32,
    /// The action's name.
    pub action: String,
    pub params: Vec<u64>,
    /// Packets and bytes of the table's direct counter (zero without one), summed over
    /// threads and nodes.
    pub counts: [u64; 2],
}

/// A table's entries (highest priority first, then by id), its default action and its
/// misses: what `p4 table show` prints and `p4_table_dump` sends.
#[derive(Clone, Debug, PartialEq)]
pub struct TableView {
    /// `control.table`.
    pub name: String,
    pub index_kind: &'static str,
    pub const_entries: bool,
    pub direct_counter: bool,
    pub entries: Vec<EntryView>,
    pub default_action: String,
    pub default_params: Vec<u64>,
    /// Packets and bytes that missed.
    pub misses: [u64; 2],
}

/// Reads a table, with its direct counters and misses summed over every node and thread.
pub fn table_read(vm: &mut Vlib, prog: &str, table: &str) -> Result<TableView, P4Error> {
    let p = program(vm, prog)?;
    let pr = p.loaded.prog.clone();
    let t = table_index(&pr, table)?;
    let nodes = p.nodes.clone();
    let acc = Arc::new(Mutex::new((Vec::<[u64; 2]>::new(), [0u64; 2])));
    let a2 = acc.clone();
    vm.foreach_thread(move |tg| {
        for &i in &nodes {
            if let Some(st) = tg.node_mut::<P4Node>(i).and_then(|n| n.st.as_ref()) {
                let tr = &st.ts.tables[t];
                if let Ok(mut a) = a2.lock() {
                    if a.0.len() < tr.direct.len() {
                        a.0.resize(tr.direct.len(), [0; 2]);
                    }
                    for (x, y) in a.0.iter_mut().zip(&tr.direct) {
                        x[0] += y[0];
                        x[1] += y[1];
                    }
                    a.1[0] += tr.miss[0];
                    a.1[1] += tr.miss[1];
                }
            }
        }
    });
    let (direct, misses) = acc.lock().map(|a| a.clone()).unwrap_or_default();
    let p = program(vm, prog)?;
    let tb = &pr.tables[t];
    let tr = &p.master.tables[t];
    // Without the hidden direct-meter cell.
    let params = |r: &crate::table::ActRec| {
        let hidden = crate::compile::direct_meter_of(&pr.actions[r.action as usize]).is_some();
        r.params[..r.nparams as usize - hidden as usize].to_vec()
    };
    let mut entries: Vec<EntryView> = tr
        .iter()
        .map(|(id, e)| {
            let r = tr.rec_of(e);
            EntryView {
                id,
                matches: e.matches.clone(),
                priority: e.priority,
                action: pr.actions[r.action as usize].name.clone(),
                params: params(r),
                counts: direct.get(id as usize).copied().unwrap_or([0; 2]),
            }
        })
        .collect();
    entries.sort_by_key(|e| (std::cmp::Reverse(e.priority), e.id));
    Ok(TableView {
        name: tb.qualified(),
        index_kind: tr.index_kind(),
        const_entries: tr.read_only(),
        direct_counter: tb.direct_counter.is_some(),
        entries,
        default_action: pr.actions[tr.default.action as usize].name.clone(),
        default_params: params(&tr.default),
        misses,
    })
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

fn check_index(i: u32, size: u32) -> Result<(), P4Error> {
    if i >= size {
        return Err(P4Error::Index(i, size));
    }
    Ok(())
}

/// Counter `counter`'s packets and bytes per index, summed over every node and thread.
pub fn counter_read(vm: &mut Vlib, prog: &str, counter: &str) -> Result<Vec<[u64; 2]>, P4Error> {
    let p = program(vm, prog)?;
    let pr = p.loaded.prog.clone();
    let c = pr
        .counters
        .iter()
        .position(|x| x.name == counter)
        .ok_or_else(|| P4Error::no("counter", counter))?;
    let nodes = p.nodes.clone();
    let acc = Arc::new(Mutex::new(vec![[0u64; 2]; pr.counters[c].size as usize]));
    let a2 = acc.clone();
    vm.foreach_thread(move |tg| {
        for &i in &nodes {
            if let Some(st) = tg.node_mut::<P4Node>(i).and_then(|n| n.st.as_ref()) {
                if let Ok(mut a) = a2.lock() {
                    for (x, y) in a.iter_mut().zip(st.ts.counters[c].iter()) {
                        x[0] += y[0];
                        x[1] += y[1];
                    }
                }
            }
        }
    });
    let v = acc.lock().map(|a| a.clone()).unwrap_or_default();
    Ok(v)
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

/// Register `register`'s values per index (shared by every thread).
pub fn register_read(vm: &mut Vlib, prog: &str, register: &str) -> Result<Vec<u64>, P4Error> {
    let p = program(vm, prog)?;
    let r = p
        .loaded
        .prog
        .registers
        .iter()
        .position(|x| x.name == register)
        .ok_or_else(|| P4Error::no("register", register))?;
    Ok(p.loaded.shared.registers[r]
        .iter()
        .map(|x| x.load(Ordering::Relaxed))
        .collect())
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

/// An unconfigured meter cell (marks everything green).
const METER_OFF: MeterConf = MeterConf {
    cir: 0.0,
    cburst: 0,
    pir: 0.0,
    pburst: 0,
};

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

fn check_conf(c: &MeterConf) -> Result<(), P4Error> {
    if !(c.cir.is_finite() && c.pir.is_finite() && c.cir >= 0.0) {
        return Err(P4Error::Invalid(
            "rates must be finite and not negative".into(),
        ));
    }
    if c.pir < c.cir {
        return Err(P4Error::Invalid("pir must be at least cir".into()));
    }
    Ok(())
}

fn cli_table_meter(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    let (pn, prog, t) = prog_table(vm, args)?;
    let (matches, priority) = read_keys(&prog, t, args)?;
    let c = meter_conf(args)?;
    table_meter_set(vm, &pn, &prog.tables[t].qualified(), &matches, priority, &c)?;
    Ok(String::new())
}

/// Configures the direct-meter cell of the entry with these matches and priority.
pub fn table_meter_set(
    vm: &mut Vlib,
    prog: &str,
    table: &str,
    matches: &[Match],
    priority: u32,
    c: &MeterConf,
) -> Result<(), P4Error> {
    check_conf(c)?;
    let p = program(vm, prog)?;
    let pr = p.loaded.prog.clone();
    let t = table_index(&pr, table)?;
    let tn = &pr.tables[t].name;
    let cells = p
        .meter_cells
        .get(&t)
        .ok_or_else(|| P4Error::Invalid(format!("table `{tn}' has no direct_meter")))?;
    let id = p.master.tables[t]
        .find(matches, priority)
        .ok_or_else(|| P4Error::Table(tn.clone(), TableError::NotFound))?;
    let cell = cells.of_entry.get(&id).ok_or_else(|| {
        P4Error::Invalid(format!("{tn}: the entry's action reads no direct_meter"))
    })?;
    p.loaded.shared.meters[cells.meter][*cell as usize].set(c);
    Ok(())
}

/// Configures cell `index` of meter `meter` (rates per second in the meter's unit; a
/// rate of 0 never refills). A `direct_meter` is refused: its cells are its entries'
/// ([`table_meter_set`]).
pub fn meter_set(
    vm: &mut Vlib,
    prog: &str,
    meter: &str,
    index: u32,
    c: &MeterConf,
) -> Result<(), P4Error> {
    let p = program(vm, prog)?;
    let m = p
        .loaded
        .prog
        .meters
        .iter()
        .position(|x| x.name == meter)
        .ok_or_else(|| P4Error::no("meter", meter))?;
    if p.loaded.prog.meters[m].direct {
        return Err(P4Error::Invalid(format!(
            "`{}' is a direct_meter: use p4 table meter",
            sluice_cli::error::clip(meter)
        )));
    }
    check_index(index, p.loaded.prog.meters[m].size)?;
    check_conf(c)?;
    p.loaded.shared.meters[m][index as usize].set(c);
    Ok(())
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
