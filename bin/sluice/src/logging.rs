//! VPP's logging commands over the daemon's log: every record also goes to a ring of recent
//! entries (`show log`, `clear logging`), and each class (the emitting crate and module,
//! `vnet/ip4`, `sluice/scripting`, ...) has a level (`set logging class <c> level <l>`,
//! `show logging`).
//!
//! Levels are VPP's names: `emerg`, `alert`, `crit`, `err`, `warn`, `notice`, `info`,
//! `debug`, `disabled`; Rust's `log` has five, so `emerg`..`err` are its `error` and `notice`
//! is its `info`. The default level is `info`.

use sluice_cli::{Args, CliError, CommandTree};
use sluice_graph::Vlib;
use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// Entries the ring keeps (VPP's default `logging { size 512 }`).
pub const RING_SIZE: usize = 512;

/// One log record.
#[derive(Clone, Debug)]
pub struct Entry {
    /// When.
    pub time: SystemTime,
    /// Level.
    pub level: log::Level,
    /// Class (`vnet/ip4`).
    pub class: String,
    /// Message.
    pub msg: String,
}

#[derive(Debug)]
struct Inner {
    entries: VecDeque<Entry>,
    /// Per-class level (`None` = disabled).
    classes: BTreeMap<String, Option<log::Level>>,
    /// Classes seen so far (for `show logging`).
    seen: BTreeMap<String, u64>,
}

/// The ring of recent entries and the class levels, shared by the logger and the CLI.
#[derive(Debug)]
pub struct LogRing {
    inner: Mutex<Inner>,
}

impl Default for LogRing {
    fn default() -> Self {
        LogRing {
            inner: Mutex::new(Inner {
                entries: VecDeque::with_capacity(RING_SIZE),
                classes: BTreeMap::new(),
                seen: BTreeMap::new(),
            }),
        }
    }
}

/// The class of a `log` target: `sluice_vnet::ip4::mod` → `vnet/ip4`, `sluice` → `sluice`.
pub fn class_of(target: &str) -> String {
    let mut parts = target.split("::");
    let krate = parts.next().unwrap_or("");
    let krate = krate
        .strip_prefix("sluice_")
        .unwrap_or(krate)
        .replace('_', "-");
    match parts.find(|p| *p != "mod") {
        Some(m) => format!("{krate}/{m}"),
        None => krate,
    }
}

/// VPP's level names.
fn parse_level(w: &str) -> Result<Option<log::Level>, CliError> {
    Ok(Some(match w {
        "emerg" | "alert" | "crit" | "err" | "error" => log::Level::Error,
        "warn" | "warning" => log::Level::Warn,
        "notice" | "info" => log::Level::Info,
        "debug" => log::Level::Debug,
        "disabled" => return Ok(None),
        _ => {
            return Err(CliError::new(format!(
                "unknown log level `{w}' (emerg, alert, crit, err, warn, notice, info, debug, disabled)"
            )))
        }
    }))
}

fn level_name(l: Option<log::Level>) -> &'static str {
    match l {
        None => "disabled",
        Some(log::Level::Error) => "err",
        Some(log::Level::Warn) => "warn",
        Some(log::Level::Info) => "info",
        Some(log::Level::Debug) => "debug",
        Some(log::Level::Trace) => "debug",
    }
}

impl LogRing {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a record of `level` from `target` is logged.
    pub fn enabled(&self, target: &str, level: log::Level) -> bool {
        let g = self.lock();
        if g.classes.is_empty() {
            return level <= log::Level::Info;
        }
        let class = class_of(target);
        let lim = g
            .classes
            .iter()
            .filter(|(c, _)| class == **c || class.starts_with(&format!("{c}/")))
            .max_by_key(|(c, _)| c.len())
            .map(|(_, l)| *l)
            .unwrap_or(Some(log::Level::Info));
        lim.is_some_and(|l| level <= l)
    }

    /// Records an entry (the oldest goes when the ring is full).
    pub fn push(&self, target: &str, level: log::Level, msg: &str) {
        let mut g = self.lock();
        if g.entries.len() == RING_SIZE {
            g.entries.pop_front();
        }
        let class = class_of(target);
        *g.seen.entry(class.clone()).or_default() += 1;
        g.entries.push_back(Entry {
            time: SystemTime::now(),
            level,
            class,
            msg: msg.to_string(),
        });
    }

    /// The entries, oldest first.
    pub fn entries(&self) -> Vec<Entry> {
        self.lock().entries.iter().cloned().collect()
    }

    /// The most verbose level any class asks for (what `log::set_max_level` must allow).
    fn max_level(&self) -> log::LevelFilter {
        self.lock()
            .classes
            .values()
            .flatten()
            .map(|l| l.to_level_filter())
            .max()
            .unwrap_or(log::LevelFilter::Info)
            .max(log::LevelFilter::Info)
    }
}

/// The ring the CLI reads (set by the daemon once its logger is up).
#[derive(Default)]
pub struct Handle(pub Option<Arc<LogRing>>);

fn ring(vm: &mut Vlib) -> Result<Arc<LogRing>, CliError> {
    vm.ext_mut::<Handle>()
        .0
        .clone()
        .ok_or_else(|| CliError::new("logging unavailable"))
}

/// Adds the logging commands.
pub fn register(t: &mut CommandTree<Vlib>) {
    t.add(
        "show logging",
        "show logging — log configuration: levels per class",
        cli_show_logging,
    );
    t.add(
        "show log",
        "show log [max <n>] — recent log entries (the last 512)",
        cli_show_log,
    );
    t.add(
        "set logging class",
        "set logging class <class> [level <level>] [syslog-level <level>] — level of a class (emerg..debug, disabled)",
        cli_set_class,
    );
    t.add(
        "clear logging",
        "clear logging — forget the recent log entries",
        cli_clear,
    );
}

fn stamp(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    format!(
        "{}:{:03}",
        crate::daemon::utc_stamp(d.as_secs()),
        d.subsec_millis()
    )
}

fn cli_show_log(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let max = if a.keyword("max") {
        Some(a.u32("max")? as usize)
    } else {
        None
    };
    a.finish()?;
    let v = ring(vm)?.entries();
    let skip = max.map_or(0, |m| v.len().saturating_sub(m));
    let mut out = String::new();
    for e in &v[skip..] {
        let _ = writeln!(
            out,
            "{} {:<10} {:<14} {}",
            stamp(e.time),
            level_name(Some(e.level)),
            e.class,
            e.msg
        );
    }
    Ok(out)
}

fn cli_show_logging(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    let r = ring(vm)?;
    let g = r.lock();
    let mut out = String::new();
    let _ = writeln!(out, "Configuration:");
    let _ = writeln!(out, "  Default log level: info");
    let _ = writeln!(out, "  Default syslog level: info");
    let _ = writeln!(out, "  Max entries: {RING_SIZE}");
    let _ = writeln!(out, "  Entries: {}", g.entries.len());
    let _ = writeln!(out);
    let _ = writeln!(out, "{:<32}{:<10}{:>8}", "Class", "Level", "Entries");
    let mut classes: BTreeMap<&str, (Option<log::Level>, u64)> = BTreeMap::new();
    for (c, n) in &g.seen {
        classes.insert(c, (Some(log::Level::Info), *n));
    }
    for (c, l) in &g.classes {
        classes.entry(c).or_insert((None, 0)).0 = *l;
    }
    for (c, (l, n)) in classes {
        let _ = writeln!(out, "{c:<32}{:<10}{n:>8}", level_name(l));
    }
    Ok(out)
}

fn cli_set_class(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let class = a.word("class")?;
    let mut level = None;
    while !a.is_empty() {
        if a.keyword("level") {
            level = Some(parse_level(&a.word("level")?)?);
        } else if a.keyword("syslog-level") {
            // One level drives every sink here.
            parse_level(&a.word("level")?)?;
        } else if a.keyword("rate-limit") {
            a.u32("rate limit")?;
        } else {
            return Err(CliError::unknown_input(a.peek().unwrap_or("")));
        }
    }
    let r = ring(vm)?;
    if let Some(l) = level {
        r.lock().classes.insert(class, l);
        log::set_max_level(r.max_level());
    }
    Ok(String::new())
}

fn cli_clear(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    ring(vm)?.lock().entries.clear();
    Ok(String::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_from_targets() {
        assert_eq!(class_of("sluice_vnet::ip4::mod"), "vnet/ip4");
        assert_eq!(class_of("sluice_af_packet::node"), "af-packet/node");
        assert_eq!(class_of("sluice"), "sluice");
    }

    #[test]
    fn levels_per_class_and_ring_bound() {
        let r = LogRing::default();
        assert!(r.enabled("sluice_vnet::ip4", log::Level::Info));
        assert!(!r.enabled("sluice_vnet::ip4", log::Level::Debug));
        r.lock()
            .classes
            .insert("vnet".into(), Some(log::Level::Debug));
        r.lock().classes.insert("vnet/l2".into(), None);
        assert!(r.enabled("sluice_vnet::ip4", log::Level::Debug));
        assert!(!r.enabled("sluice_vnet::l2", log::Level::Error));
        assert!(!r.enabled("sluice::x", log::Level::Debug));
        assert_eq!(r.max_level(), log::LevelFilter::Debug);
        for i in 0..RING_SIZE + 3 {
            r.push("sluice", log::Level::Info, &format!("m{i}"));
        }
        let e = r.entries();
        assert_eq!(e.len(), RING_SIZE);
        assert_eq!(e[0].msg, "m3");
        assert!(parse_level("loud").is_err());
    }
}
