//! Diagnostics commands in VPP's shapes: `show vlib graph [<node>]`, `show threads` (VPP's
//! columns), `show memory [main-heap] [verbose]` and `clear node counters` (VPP's other name
//! of `clear errors`).

use crate::Vlib;
use sluice_cli::{Args, CliError, CommandTree};
use std::fmt::Write;

/// Registers the commands (after [`crate::cli::register`]: `clear node counters` is an
/// alias of its `clear errors`).
pub fn register(t: &mut CommandTree<Vlib>) {
    t.add(
        "show vlib graph",
        "show vlib graph [<node>] — nodes with their next and previous nodes",
        show_graph,
    );
    t.add(
        "show threads",
        "show threads — threads: id, name, type, LWP, scheduling, lcore, core, socket",
        show_threads,
    );
    t.add(
        "show memory",
        "show memory [main-heap] [verbose] — the process's memory (Sluice has no main heap) and the buffer arena",
        show_memory,
    );
    t.alias("clear node counters", "clear errors");
}

fn show_graph(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let only = match a.opt_word() {
        Some(n) => Some(
            vm.registry
                .find(&n)
                .ok_or_else(|| CliError::new(format!("unknown node `{n}'")))?,
        ),
        None => None,
    };
    a.finish()?;
    let nodes = vm.registry.nodes();
    let mut prev: Vec<Vec<&str>> = vec![Vec::new(); nodes.len()];
    for n in nodes {
        for t in &n.nexts {
            if let Some(p) = prev.get_mut(t.0 as usize) {
                if !p.contains(&n.name.as_str()) {
                    p.push(&n.name);
                }
            }
        }
    }
    let mut out = format!("{:^26}{:^26}{:^26}\n", "Name", "Next", "Previous");
    let mut order: Vec<&crate::registry::NodeInfo> = nodes.iter().collect();
    order.sort_by(|x, y| x.name.cmp(&y.name));
    for n in order {
        if only.is_some_and(|o| o != n.index) {
            continue;
        }
        let next: Vec<String> = n
            .nexts
            .iter()
            .enumerate()
            .map(|(k, t)| format!("{} [{k}]", nodes[t.0 as usize].name))
            .collect();
        let p = &prev[n.index.0 as usize];
        let rows = next.len().max(p.len()).max(1);
        for r in 0..rows {
            let _ = writeln!(
                out,
                "{:<26}{:<26}{}",
                if r == 0 { n.name.as_str() } else { "" },
                next.get(r).map(|s| s.as_str()).unwrap_or(""),
                p.get(r).copied().unwrap_or("")
            );
        }
    }
    Ok(out)
}

/// `(tid, comm)` of this process's threads.
fn tasks() -> Vec<(u32, String)> {
    let mut v = Vec::new();
    if let Ok(d) = std::fs::read_dir("/proc/self/task") {
        for e in d.flatten() {
            let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
            v.push((tid, comm.trim().to_string()));
        }
    }
    v.sort();
    v
}

fn sched(tid: u32) -> String {
    // SAFETY: plain syscalls on a thread id of this process; a stale id gives -1.
    let pol = unsafe { libc::sched_getscheduler(tid as libc::pid_t) };
    let mut p = libc::sched_param { sched_priority: 0 };
    // SAFETY: `p` is a valid out-parameter.
    unsafe { libc::sched_getparam(tid as libc::pid_t, &mut p) };
    let name = match pol {
        libc::SCHED_OTHER => "other",
        libc::SCHED_FIFO => "fifo",
        libc::SCHED_RR => "rr",
        libc::SCHED_BATCH => "batch",
        libc::SCHED_IDLE => "idle",
        _ => "unknown",
    };
    format!("{name} ({})", p.sched_priority)
}

fn topology(cpu: usize, what: &str) -> String {
    std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu{cpu}/topology/{what}"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn show_threads(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    let tasks = tasks();
    let mut out = format!(
        "{:<7}{:<20}{:<12}{:<8}{:<25}{:<7}{:<7}{:<7}{:<10}\n",
        "ID", "Name", "Type", "LWP", "Sched Policy (Priority)", "lcore", "Core", "Socket", "State"
    );
    for t in 0..vm.n_threads() {
        let name = vm.thread_name(t);
        // The main thread is the process itself; workers carry their name (comm is cut at
        // 15 bytes).
        let tid = if t == 0 {
            Some(std::process::id())
        } else {
            let short: String = name.chars().take(15).collect();
            tasks.iter().find(|(_, c)| *c == short).map(|x| x.0)
        };
        let core = vm.thread_core(t);
        let _ = writeln!(
            out,
            "{:<7}{:<20}{:<12}{:<8}{:<25}{:<7}{:<7}{:<7}{:<10}",
            t,
            name,
            if t == 0 { "" } else { "workers" },
            tid.map(|x| x.to_string()).unwrap_or_default(),
            tid.map(sched).unwrap_or_default(),
            core.map(|c| c.to_string()).unwrap_or_default(),
            core.map(|c| topology(c, "core_id")).unwrap_or_default(),
            core.map(|c| topology(c, "physical_package_id"))
                .unwrap_or_default(),
            ""
        );
    }
    Ok(out)
}

/// `/proc/self/status` fields in bytes.
fn status(keys: &[&str]) -> Vec<(String, u64)> {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    keys.iter()
        .map(|k| {
            let v = s
                .lines()
                .find(|l| l.starts_with(&format!("{k}:")))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
            (k.to_string(), v * 1024)
        })
        .collect()
}

/// VPP's memory sizes: `137.96M`.
fn size(b: u64) -> String {
    let f = b as f64;
    if f >= 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2}G", f / (1024.0 * 1024.0 * 1024.0))
    } else if f >= 1024.0 * 1024.0 {
        format!("{:.2}M", f / (1024.0 * 1024.0))
    } else {
        format!("{:.2}K", f / 1024.0)
    }
}

fn show_memory(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let mut verbose = false;
    while !a.is_empty() {
        if a.keyword("verbose") {
            verbose = true;
        } else if !(a.keyword("main-heap")
            || a.keyword("api-segment")
            || a.keyword("stats-segment")
            || a.keyword("numa-heaps")
            || a.keyword("map"))
        {
            return Err(CliError::unknown_input(a.peek().unwrap_or("")));
        }
    }
    let st = status(&["VmSize", "VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"]);
    let get = |k: &str| st.iter().find(|x| x.0 == k).map(|x| x.1).unwrap_or(0);
    let ps = crate::buffer_use(vm);
    let bytes = vm.pool.len() as u64 * vm.pool.data_size() as u64;
    let mut out = String::new();
    let _ = writeln!(out, "Thread 0 {}", vm.thread_name(0));
    let _ = writeln!(
        out,
        "  process (Sluice has no main heap: Rust's allocator, one per process)"
    );
    let _ = writeln!(
        out,
        "    total: {}, used: {}, free: -, peak used: {}",
        size(get("VmSize")),
        size(get("VmRSS")),
        size(get("VmHWM"))
    );
    let _ = writeln!(
        out,
        "  buffers: {} x {} bytes of data ({:?}), {} in use, {} free, {} cached, {} lent",
        vm.pool.len(),
        vm.pool.data_size(),
        vm.pool.backing(),
        ps.used,
        ps.free,
        ps.cached,
        ps.lent
    );
    let _ = writeln!(out, "    data: {}", size(bytes));
    if verbose {
        for k in ["RssAnon", "RssFile", "RssShmem"] {
            let _ = writeln!(out, "  {k}: {}", size(get(k)));
        }
    }
    Ok(out)
}
