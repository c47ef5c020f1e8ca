//! The control plane of loaded programs: their state ([`P4State`]) and the actions the
//! `p4 ...` commands ([`crate::cli`]) and the API messages ([`crate::api`]) share (`load`,
//! `unload`, `table_add`, `table_del`, `table_clear`, `table_read`, `counter_read`,
//! `register_read`, `meter_set`, `table_meter_set`), with typed errors ([`P4Error`]).

use crate::error::P4Error;
use crate::exec::{MeterConf, Shared, ThreadState};
use crate::ir::{EntrySpec, Match, Opts, Program};
use crate::node::{self, Loaded, Mode, NodeState, P4Node};
use crate::table::TableError;
use sluice_graph::{NodeIndex, NodeKind, NodeRegistration, Vlib};
use sluice_vnet::SwIfIndex;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};

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

impl LoadedProg {
    /// The index of counter `name` (`control.name`, or a short name unique in the program).
    pub fn counter(&self, name: &str) -> Result<usize, P4Error> {
        (self.loaded.prog.counter(name)).map_err(|e| P4Error::named("counter", name, e))
    }

    /// The index of register `name` (as [`LoadedProg::counter`]).
    pub fn register(&self, name: &str) -> Result<usize, P4Error> {
        (self.loaded.prog.register(name)).map_err(|e| P4Error::named("register", name, e))
    }

    /// The index of meter `name` (as [`LoadedProg::counter`]).
    pub fn meter(&self, name: &str) -> Result<usize, P4Error> {
        (self.loaded.prog.meter(name)).map_err(|e| P4Error::named("meter", name, e))
    }
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

pub(crate) fn state(vm: &mut Vlib) -> &mut P4State {
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

/// A graph change of `p4 load <program>` that failed: [`P4Error::NotTaken`] when worker
/// threads did not take it in time (the load is not done), else [`graph_error`].
fn load_error(program: &str, e: sluice_graph::GraphError) -> P4Error {
    match e {
        sluice_graph::GraphError::NotTaken { threads, wait } => P4Error::NotTaken {
            program: program.to_string(),
            unload: false,
            threads,
            wait,
        },
        e => graph_error(e),
    }
}

/// The index of table `name` of `p` (`control.table`, or a name unique in the program).
pub fn table_index(p: &Program, name: &str) -> Result<usize, P4Error> {
    p.table(name).map_err(|e| P4Error::named("table", name, e))
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
            .is_none_or(|x| x.get(SwIfIndex(i)).is_none())
    }) {
        return Err(sluice_vnet::error::VnetError::NoSuchInterface(i).into());
    }
    for &i in &ifs {
        check_free(vm, i)?;
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
            let nx = vm
                .add_next(nodes[k], nodes[k + 1])
                .map_err(|e| load_error(&name, e))?;
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
    let missing = install(vm, &name, &nodes, Some((loaded.clone(), seg_next)));
    if !missing.is_empty() {
        // Undone on every thread: the threads that answered drop it now, the others
        // after they take it (their queue runs the removal after the install).
        install(vm, &name, &nodes, None);
        return Err(P4Error::NotTaken {
            program: name,
            unload: false,
            threads: missing,
            wait: vm.thread_wait(),
        });
    }
    if let Err(e) = redirect(vm, &ifs, nodes[0]) {
        install(vm, &name, &nodes, None);
        return Err(e);
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

/// Refuses an interface whose received frames go elsewhere already: to a loaded program
/// (unloading either would clear the other's redirect) or to another feature (linux-cp's
/// tap twins).
fn check_free(vm: &mut Vlib, sw_if: u32) -> Result<(), P4Error> {
    let prog = state(vm)
        .progs
        .iter()
        .find(|(_, p)| p.ifs.contains(&sw_if))
        .map(|(n, _)| n.clone());
    let redirected = sluice_vnet::interface::with_if_attr(vm, sw_if, |x| {
        x.rx_redirect.load(Ordering::Relaxed) != 0
    });
    if prog.is_none() && redirected != Some(true) {
        return Ok(());
    }
    let name = vm
        .ext::<sluice_vnet::Interfaces>()
        .and_then(|x| x.get(SwIfIndex(sw_if)))
        .map_or_else(|| sw_if.to_string(), |x| x.name.clone());
    Err(P4Error::InterfaceTaken {
        interface: name,
        program: prog,
    })
}

/// Sends what `ifs` receive to `node`: all of them or, on an error, none (the redirects
/// made are undone; [`check_free`] found none there before).
fn redirect(vm: &mut Vlib, ifs: &[u32], node: NodeIndex) -> Result<(), P4Error> {
    for (k, &i) in ifs.iter().enumerate() {
        if let Err(e) = sluice_vnet::set_rx_redirect(vm, SwIfIndex(i), Some(node)) {
            for &j in &ifs[..k] {
                let _ = sluice_vnet::set_rx_redirect(vm, SwIfIndex(j), None);
            }
            return Err(e.into());
        }
    }
    Ok(())
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
        let i = match vm.add_node(reg) {
            Ok(i) => i,
            Err(e) => {
                // The nodes made before stay (a node cannot be deleted), and so does one the
                // late threads did not make in time (they make it when they take their
                // queue): kept in the pool, so that a later load reuses them.
                let made = matches!(e, sluice_graph::GraphError::NotTaken { .. });
                if let (true, Ok(i)) = (made, vm.registry.lookup(&nn)) {
                    out.push(i);
                }
                if out.len() > have.len() {
                    state(vm).pools.insert(name.to_string(), out);
                }
                return Err(load_error(name, e));
            }
        };
        out.push(i);
    }
    state(vm).pools.insert(name.to_string(), out.clone());
    out.truncate(n.max(1));
    Ok(out)
}

/// Installs (or with `None` removes) a program in its nodes on every thread; the threads
/// that did not within `Vlib::thread_wait` (`Vlib::foreach_thread` stops waiting then;
/// the change stays queued there and runs when the thread takes it).
fn install(
    vm: &mut Vlib,
    name: &str,
    nodes: &[NodeIndex],
    what: Option<(Arc<Loaded>, Vec<Option<u16>>)>,
) -> Vec<usize> {
    let pool = state(vm).pools.get(name).cloned().unwrap_or_default();
    let nodes = nodes.to_vec();
    each_thread(vm, move |tg| {
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
    })
}

/// Runs `f` on every thread (`Vlib::foreach_thread`); the threads that did not run it to
/// the end within `Vlib::thread_wait` (or whose `f` panicked).
fn each_thread(
    vm: &mut Vlib,
    f: impl Fn(&mut sluice_graph::ThreadGraph) + Send + Sync + 'static,
) -> Vec<usize> {
    let done = Arc::new(Mutex::new(Vec::new()));
    let d2 = done.clone();
    vm.foreach_thread(move |tg| {
        f(tg);
        d2.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(tg.thread());
    });
    let done = done.lock().unwrap_or_else(PoisonError::into_inner);
    (0..vm.n_threads()).filter(|t| !done.contains(t)).collect()
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
        let _ = sluice_vnet::set_rx_redirect(vm, SwIfIndex(i), None);
    }
    let missing = install(vm, &name, &p.nodes, None);
    if !missing.is_empty() {
        return Err(P4Error::NotTaken {
            program: name,
            unload: true,
            threads: missing,
            wait: vm.thread_wait(),
        });
    }
    Ok(name)
}

/// Folds `f` over the program state in `nodes` on every thread (main first, then the
/// workers, each on its own thread at the same time): each thread folds into its own copy of
/// `init`, then `merge` adds that copy to the result (the sums of per-thread counts, a table
/// change's refusals). Only the merge takes the lock, so no thread's work (a table change)
/// waits for another's.
///
/// `Vlib::foreach_thread` stops waiting for a worker after `Vlib::thread_wait`
/// (`Vlib::THREAD_WAIT` unless set; the work stays queued there and may run later): a
/// thread that has not folded by then (or whose fold panicked) is [`P4Error::NoAnswer`],
/// with the threads missing, not a partial result.
pub fn over_threads<A: Clone + Send + Sync + 'static>(
    vm: &mut Vlib,
    nodes: Vec<NodeIndex>,
    init: A,
    f: impl Fn(&mut A, usize, &mut NodeState) + Send + Sync + 'static,
    merge: impl Fn(&mut A, A) + Send + Sync + 'static,
) -> Result<A, P4Error> {
    // The result so far.
    let acc: Arc<Mutex<Option<A>>> = Arc::new(Mutex::new(None));
    let (a2, zero) = (acc.clone(), init.clone());
    let missing = each_thread(vm, move |tg| {
        let thread = tg.thread();
        let mut mine = zero.clone();
        for &i in &nodes {
            if let Some(st) = tg.node_mut::<P4Node>(i).and_then(|n| n.st.as_mut()) {
                f(&mut mine, thread, st);
            }
        }
        let mut a = a2.lock().unwrap_or_else(PoisonError::into_inner);
        match a.as_mut() {
            Some(a) => merge(a, mine),
            None => *a = Some(mine),
        }
    });
    if !missing.is_empty() {
        return Err(P4Error::NoAnswer(missing, vm.thread_wait()));
    }
    let mut a = acc.lock().unwrap_or_else(PoisonError::into_inner);
    Ok(a.take().unwrap_or(init))
}

/// Applies a table change the master accepted to every node on every thread. The copies
/// hold what the master holds (each starts as the master did and gets every change it
/// accepted, in order), so they accept it too; a refusal is reported, the first one.
///
/// A thread that does not answer makes it [`P4Error::NoAnswer`] even when another thread
/// refused: the refusal is not reported then (the threads that answered, refusing or not,
/// are not named either).
fn replicate(
    vm: &mut Vlib,
    nodes: Vec<NodeIndex>,
    t: usize,
    f: impl Fn(&mut crate::table::TableRt, &Program) -> Result<(), TableError> + Send + Sync + 'static,
    prog: Arc<Program>,
) -> Result<(), P4Error> {
    let name = prog.tables[t].name.clone();
    let refuse = move |e: &mut Option<(usize, TableError)>, thread, st: &mut NodeState| {
        if let Err(x) = f(&mut st.ts.tables[t], &prog) {
            e.get_or_insert((thread, x));
        }
    };
    // The lowest thread's refusal.
    let first = |a: &mut Option<(usize, TableError)>, b: Option<(usize, TableError)>| {
        if let Some(b) = b.filter(|b| a.as_ref().is_none_or(|a| b.0 < a.0)) {
            *a = Some(b);
        }
    };
    let refused = over_threads(vm, nodes, None, refuse, first)?;
    match refused {
        Some((thread, e)) => Err(P4Error::Replica(name, thread, e)),
        None => Ok(()),
    }
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
    let LoadedProg {
        loaded,
        master,
        nodes,
        meter_cells,
        ..
    } = program(vm, prog)?;
    let pr = loaded.prog.clone();
    let t = table_index(&pr, table)?;
    let action = pr.action_in(action, &pr.tables[t].actions).ok_or_else(|| {
        P4Error::NoAction(sluice_cli::error::clip(action), pr.tables[t].name.clone())
    })?;
    let terr = |e| P4Error::Table(pr.tables[t].name.clone(), e);
    let mut params = params;
    // An action reading the table's direct meter gets the entry's cell as its hidden last
    // parameter (the compiler lets only the actions of the table holding that meter read
    // it, so the table has cells).
    let mut cells = meter_cells.get_mut(&t);
    let cell = match (
        crate::compile::direct_meter_of(&pr.actions[action as usize]),
        cells.as_deref_mut(),
    ) {
        (None, _) => None,
        (Some(_), None) => {
            return Err(P4Error::Invalid(format!(
                "action `{}' reads a direct_meter table `{}' does not have",
                pr.actions[action as usize].name, pr.tables[t].name
            )))
        }
        (Some(_), Some(cells)) => {
            let declared = pr.actions[action as usize].params.len() - 1;
            if params.len() != declared {
                return Err(terr(TableError::ParamCount(declared, params.len())));
            }
            let c = cells
                .alloc()
                .ok_or_else(|| terr(TableError::Full(cells.limit as u64)))?;
            params.push(c as u64);
            Some(c)
        }
    };
    let spec = EntrySpec {
        matches,
        action,
        params,
        priority,
    };
    let added = master.tables[t].add(&pr.tables[t], &pr.actions, &spec);
    if let (Some(c), Some(cells)) = (cell, cells) {
        match added {
            Ok(id) => {
                loaded.shared.meters[cells.meter][c as usize].set(&METER_OFF);
                cells.of_entry.insert(id, c);
            }
            Err(_) => cells.free.push(c),
        }
    }
    let id = added.map_err(terr)?;
    let nodes = nodes.clone();
    replicate(
        vm,
        nodes,
        t,
        move |tr, prog| tr.add(&prog.tables[t], &prog.actions, &spec).map(|_| ()),
        pr,
    )?;
    Ok(id)
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
    replicate(vm, nodes, t, move |tr, _| tr.del(&matches, priority), pr)
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
    replicate(vm, nodes, t, move |tr, _| tr.clear(), pr)
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
    let init = (Vec::<[u64; 2]>::new(), [0u64; 2]);
    let fold = move |a: &mut (Vec<[u64; 2]>, [u64; 2]), _, st: &mut NodeState| {
        let tr = &st.ts.tables[t];
        add_direct(a, &tr.direct, tr.miss);
    };
    let merge = |a: &mut (Vec<[u64; 2]>, [u64; 2]), b: (Vec<[u64; 2]>, [u64; 2])| {
        add_direct(a, &b.0, b.1);
    };
    let (direct, misses) = over_threads(vm, nodes, init, fold, merge)?;
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

pub(crate) fn check_index(i: u32, size: u32) -> Result<(), P4Error> {
    if i >= size {
        return Err(P4Error::Index(i, size));
    }
    Ok(())
}

/// Adds a table's direct counts (growing `a` to hold them) and misses to `a`.
fn add_direct(a: &mut (Vec<[u64; 2]>, [u64; 2]), direct: &[[u64; 2]], miss: [u64; 2]) {
    if a.0.len() < direct.len() {
        a.0.resize(direct.len(), [0; 2]);
    }
    add_counts(&mut a.0, direct);
    add_counts(std::slice::from_mut(&mut a.1), &[miss]);
}

/// Adds packet and byte counts cell by cell.
fn add_counts(acc: &mut [[u64; 2]], v: &[[u64; 2]]) {
    for (x, y) in acc.iter_mut().zip(v) {
        x[0] += y[0];
        x[1] += y[1];
    }
}

/// Counter `counter`'s packets and bytes per index, summed over every node and thread.
pub fn counter_read(vm: &mut Vlib, prog: &str, counter: &str) -> Result<Vec<[u64; 2]>, P4Error> {
    let p = program(vm, prog)?;
    let c = p.counter(counter)?;
    let init = vec![[0u64; 2]; p.loaded.prog.counters[c].size as usize];
    let nodes = p.nodes.clone();
    let fold = move |a: &mut Vec<[u64; 2]>, _, st: &mut NodeState| {
        add_counts(a, &st.ts.counters[c]);
    };
    let merge = |a: &mut Vec<[u64; 2]>, b: Vec<[u64; 2]>| add_counts(a, &b);
    over_threads(vm, nodes, init, fold, merge)
}

/// Register `register`'s values per index (shared by every thread).
pub fn register_read(vm: &mut Vlib, prog: &str, register: &str) -> Result<Vec<u64>, P4Error> {
    let p = program(vm, prog)?;
    let r = p.register(register)?;
    Ok(p.loaded.shared.registers[r]
        .iter()
        .map(|x| x.load(Ordering::Relaxed))
        .collect())
}

/// An unconfigured meter cell (marks everything green).
pub(crate) const METER_OFF: MeterConf = MeterConf {
    cir: 0.0,
    cburst: 0,
    pir: 0.0,
    pburst: 0,
};

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
    let m = p.meter(meter)?;
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
