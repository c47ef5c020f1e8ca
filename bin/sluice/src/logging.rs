//! VPP's logging commands over the daemon's log: every record also goes to a ring of recent
//! entries (`show log`, `clear logging`), and each class (the emitting crate and module,
//! `vnet/ip4`, `sluice/scripting`, ...) has a level (`set logging class <c> level <l>`,
//! `show logging`).
//!
//! Levels are VPP's names: `emerg`, `alert`, `crit`, `err`, `warn`, `notice`, `info`,
//! `debug`, `disabled`; Rust's `log` has five, so `emerg`..`err` are its `error` and `notice`
//! is its `info`. The default level is `info` for the log (ring, stderr, `unix { log }` file)
//! and for syslog.
//!
//! Startup `logging { default-log-level <l> default-syslog-log-level <l> size <n>
//! unthrottle-time <s> class <c> { level <l> syslog-level <l> rate-limit <n> } }` ([`Config`])
//! sets the same as the CLI. A class's `rate-limit` is the most records it logs per
//! `unthrottle-time` seconds (default 3, as VPP); past it, records are dropped and one
//! `--- message(s) throttled ---` line says so.

use sluice_cli::{Args, CliError, CommandTree};
use sluice_graph::Vlib;
use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

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

/// A level: `None` is `disabled`.
pub type Lvl = Option<log::Level>;

/// What a class sets (unset: the enclosing class's, or the default).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClassConfig {
    /// `level`: the log (ring, stderr, file).
    pub level: Option<Lvl>,
    /// `syslog-level`.
    pub syslog_level: Option<Lvl>,
    /// `rate-limit`: records per `unthrottle-time`.
    pub rate_limit: Option<u32>,
}

/// Startup `logging { ... }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// `default-log-level`.
    pub default_level: Lvl,
    /// `default-syslog-log-level`.
    pub default_syslog_level: Lvl,
    /// `size`: entries the ring keeps.
    pub size: usize,
    /// `unthrottle-time` (seconds): the rate-limit window.
    pub unthrottle_secs: u32,
    /// `class <c> { ... }`.
    pub classes: BTreeMap<String, ClassConfig>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            default_level: Some(log::Level::Info),
            default_syslog_level: Some(log::Level::Info),
            size: RING_SIZE,
            unthrottle_secs: 3,
            classes: BTreeMap::new(),
        }
    }
}

/// Where one record goes ([`LogRing::admit`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Sinks {
    /// The ring, stderr and the log file.
    pub log: bool,
    /// Syslog.
    pub syslog: bool,
    /// The class just went over its rate limit: say so once before dropping.
    pub throttled: bool,
}

#[derive(Debug)]
struct Inner {
    entries: VecDeque<Entry>,
    cfg: Config,
    /// Classes seen so far (for `show logging`).
    seen: BTreeMap<String, u64>,
    /// Rate-limit windows per limited class: start, records in it.
    windows: BTreeMap<String, (Instant, u32)>,
}

impl Inner {
    /// The most specific class config of `class` that sets `what`.
    fn lookup<T: Copy>(
        &self,
        class: &str,
        what: impl Fn(&ClassConfig) -> Option<T>,
    ) -> Option<(&str, T)> {
        self.cfg
            .classes
            .iter()
            .filter(|(c, _)| class == c.as_str() || class.starts_with(&format!("{c}/")))
            .filter_map(|(c, cc)| what(cc).map(|v| (c.as_str(), v)))
            .max_by_key(|(c, _)| c.len())
    }

    fn levels(&self, class: &str) -> (Lvl, Lvl) {
        (
            self.lookup(class, |c| c.level)
                .map_or(self.cfg.default_level, |x| x.1),
            self.lookup(class, |c| c.syslog_level)
                .map_or(self.cfg.default_syslog_level, |x| x.1),
        )
    }
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
                cfg: Config::default(),
                seen: BTreeMap::new(),
                windows: BTreeMap::new(),
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

impl Inner {
    fn push_entry(&mut self, level: log::Level, class: String, msg: &str) {
        while self.entries.len() >= self.cfg.size.max(1) {
            self.entries.pop_front();
        }
        *self.seen.entry(class.clone()).or_default() += 1;
        self.entries.push_back(Entry {
            time: SystemTime::now(),
            level,
            class,
            msg: msg.to_string(),
        });
    }
}

impl LogRing {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies startup `logging { ... }` (and sizes the ring).
    pub fn configure(&self, cfg: &Config) {
        let mut g = self.lock();
        g.cfg = cfg.clone();
        while g.entries.len() > cfg.size {
            g.entries.pop_front();
        }
        drop(g);
        log::set_max_level(self.max_level());
    }

    /// Whether a record of `level` from `target` goes anywhere (log or syslog).
    pub fn enabled(&self, target: &str, level: log::Level) -> bool {
        let (l, s) = self.lock().levels(&class_of(target));
        l.is_some_and(|l| level <= l) || s.is_some_and(|s| level <= s)
    }

    /// Where a record goes, after its class's levels and rate limit; a record for the log
    /// is kept in the ring (the oldest goes when it is full). `throttled`: this record is
    /// the first one over the class's rate limit (the caller logs a line saying so).
    pub fn admit(&self, target: &str, level: log::Level, msg: &str) -> Sinks {
        let class = class_of(target);
        let mut g = self.lock();
        let (l, s) = g.levels(&class);
        let mut out = Sinks {
            log: l.is_some_and(|l| level <= l),
            syslog: s.is_some_and(|s| level <= s),
            throttled: false,
        };
        if !out.log && !out.syslog {
            return out;
        }
        if let Some((c, lim)) = g.lookup(&class, |c| c.rate_limit) {
            let c = c.to_string();
            let window = Duration::from_secs(g.cfg.unthrottle_secs.into());
            let now = Instant::now();
            let w = g.windows.entry(c).or_insert((now, 0));
            if now.duration_since(w.0) >= window {
                *w = (now, 0);
            }
            w.1 = w.1.saturating_add(1);
            if w.1 > lim {
                out.throttled = w.1 == lim + 1;
                out.log &= out.throttled;
                out.syslog &= out.throttled;
                if out.throttled {
                    g.push_entry(level, class, "--- message(s) throttled ---");
                }
                return out;
            }
        }
        if out.log {
            g.push_entry(level, class, msg);
        }
        out
    }

    /// Records an entry as the log would (levels and limits not applied).
    #[cfg(test)]
    pub fn push(&self, target: &str, level: log::Level, msg: &str) {
        self.lock().push_entry(level, class_of(target), msg);
    }

    /// The entries, oldest first.
    pub fn entries(&self) -> Vec<Entry> {
        self.lock().entries.iter().cloned().collect()
    }

    /// The most verbose level any class or default asks for (what `log::set_max_level`
    /// must allow).
    fn max_level(&self) -> log::LevelFilter {
        let g = self.lock();
        let c = &g.cfg;
        c.classes
            .values()
            .flat_map(|cc| [cc.level, cc.syslog_level])
            .chain([Some(c.default_level), Some(c.default_syslog_level)])
            .flatten()
            .flatten()
            .map(|l| l.to_level_filter())
            .max()
            .unwrap_or(log::LevelFilter::Off)
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
        "show log [max <n>] — recent log entries (the last 512, `logging { size }`)",
        cli_show_log,
    );
    t.add(
        "set logging class",
        "set logging class <class> [level <level>] [syslog-level <level>] [rate-limit <n>] — levels and rate limit of a class (emerg..debug, disabled)",
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
    let _ = writeln!(
        out,
        "  Default log level: {}",
        level_name(g.cfg.default_level)
    );
    let _ = writeln!(
        out,
        "  Default syslog log level: {}",
        level_name(g.cfg.default_syslog_level)
    );
    let _ = writeln!(out, "  Max entries: {}", g.cfg.size);
    let _ = writeln!(out, "  Unthrottle time: {}", g.cfg.unthrottle_secs);
    let _ = writeln!(out, "  Entries: {}", g.entries.len());
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<32}{:<10}{:<10}{:>11}{:>8}",
        "Class", "Level", "Syslog", "Rate-limit", "Entries"
    );
    let mut classes: BTreeMap<&str, u64> = BTreeMap::new();
    for (c, n) in &g.seen {
        classes.insert(c, *n);
    }
    for c in g.cfg.classes.keys() {
        classes.entry(c).or_insert(0);
    }
    for (c, n) in classes {
        let (l, s) = g.levels(c);
        let rate = g
            .lookup(c, |x| x.rate_limit)
            .map_or("-".to_string(), |x| x.1.to_string());
        let _ = writeln!(
            out,
            "{c:<32}{:<10}{:<10}{rate:>11}{n:>8}",
            level_name(l),
            level_name(s)
        );
    }
    Ok(out)
}

fn cli_set_class(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let class = a.word("class")?;
    let mut cc = ClassConfig::default();
    while !a.is_empty() {
        if a.keyword("level") {
            cc.level = Some(parse_level(&a.word("level")?)?);
        } else if a.keyword("syslog-level") {
            cc.syslog_level = Some(parse_level(&a.word("level")?)?);
        } else if a.keyword("rate-limit") {
            cc.rate_limit = Some(a.u32("rate limit")?);
        } else {
            return Err(CliError::unknown_input(a.peek().unwrap_or("")));
        }
    }
    let r = ring(vm)?;
    set_class(&r, &class, &cc);
    Ok(String::new())
}

/// `set logging class` / `logging { class <c> { ... } }`: merges what `cc` sets into the
/// class.
pub fn set_class(r: &LogRing, class: &str, cc: &ClassConfig) {
    let mut g = r.lock();
    let e = g.cfg.classes.entry(class.to_string()).or_default();
    if cc.level.is_some() {
        e.level = cc.level;
    }
    if cc.syslog_level.is_some() {
        e.syslog_level = cc.syslog_level;
    }
    if cc.rate_limit.is_some() {
        e.rate_limit = cc.rate_limit;
    }
    g.windows.remove(class);
    drop(g);
    log::set_max_level(r.max_level());
}

/// Parses startup `logging { ... }` (VPP's keys); errors name the file, line and token.
pub fn parse_config(
    s: &sluice_cli::conf::Section,
    file: &str,
) -> Result<Config, sluice_cli::conf::ConfError> {
    let mut cfg = Config::default();
    let mut c = sluice_cli::conf::SectionCursor::new(s, file);
    let level = |c: &sluice_cli::conf::SectionCursor, t: &sluice_cli::conf::Token| {
        parse_level(&t.text).map_err(|e| c.error(t, &e.to_string()))
    };
    while let Some(k) = c.next_key() {
        match k.text.as_str() {
            "default-log-level" => {
                let v = c.value(k)?;
                cfg.default_level = level(&c, v)?;
            }
            "default-syslog-log-level" => {
                let v = c.value(k)?;
                cfg.default_syslog_level = level(&c, v)?;
            }
            "size" => {
                let n = c.value_u64(k)?;
                if !(1..=1 << 20).contains(&n) {
                    return Err(c.error(k, &format!("size {n} out of range (1..1048576)")));
                }
                cfg.size = n as usize;
            }
            "unthrottle-time" => {
                let n = c.value_u64(k)?;
                if !(1..=86400).contains(&n) {
                    return Err(c.error(k, &format!("unthrottle-time {n} out of range (1..86400)")));
                }
                cfg.unthrottle_secs = n as u32;
            }
            "class" => {
                let name = c.value(k)?;
                let block = c.block(name)?;
                let mut cc = ClassConfig::default();
                let mut it = block.into_iter();
                while let Some(t) = it.next() {
                    let Some(v) = it.next() else {
                        return Err(c.error(t, &format!("`{}' needs a value", t.text)));
                    };
                    match t.text.as_str() {
                        "level" => cc.level = Some(level(&c, v)?),
                        "syslog-level" => cc.syslog_level = Some(level(&c, v)?),
                        "rate-limit" => {
                            cc.rate_limit = Some(v.text.parse().map_err(|_| {
                                c.error(
                                    v,
                                    &format!("bad rate-limit `{}': expected a number", v.text),
                                )
                            })?)
                        }
                        _ => {
                            return Err(c.error(
                                t,
                                &format!(
                                "unknown key `{}' in `class {}' (level, syslog-level, rate-limit)",
                                t.text, name.text
                            ),
                            ))
                        }
                    }
                }
                cfg.classes.insert(name.text.clone(), cc);
            }
            _ => return Err(c.unknown(k)),
        }
    }
    Ok(cfg)
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
        let lv = |l: Lvl| ClassConfig {
            level: Some(l),
            ..Default::default()
        };
        set_class(&r, "vnet", &lv(Some(log::Level::Debug)));
        set_class(
            &r,
            "vnet/l2",
            &ClassConfig {
                level: Some(None),
                syslog_level: Some(None),
                rate_limit: None,
            },
        );
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

    #[test]
    fn separate_syslog_level_and_rate_limit() {
        let r = LogRing::default();
        r.configure(&Config {
            default_level: Some(log::Level::Warn),
            default_syslog_level: Some(log::Level::Error),
            size: 4,
            unthrottle_secs: 3600,
            classes: [(
                "vnet".to_string(),
                ClassConfig {
                    level: Some(Some(log::Level::Debug)),
                    syslog_level: None,
                    rate_limit: Some(2),
                },
            )]
            .into(),
        });
        let s = r.admit("sluice", log::Level::Info, "x");
        assert_eq!(s, Sinks::default(), "below both defaults");
        let s = r.admit("sluice", log::Level::Warn, "w");
        assert!(s.log && !s.syslog);
        let s = r.admit("sluice", log::Level::Error, "e");
        assert!(s.log && s.syslog);
        // vnet: debug to the log, syslog from the default; two records per window.
        assert!(r.admit("sluice_vnet::ip4", log::Level::Debug, "1").log);
        assert!(r.admit("sluice_vnet::l2", log::Level::Debug, "2").log);
        let s = r.admit("sluice_vnet::ip4", log::Level::Debug, "3");
        assert!(s.throttled && s.log);
        assert_eq!(
            r.admit("sluice_vnet::ip4", log::Level::Error, "4"),
            Sinks::default()
        );
        let e: Vec<String> = r.entries().into_iter().map(|e| e.msg).collect();
        assert_eq!(e, ["e", "1", "2", "--- message(s) throttled ---"], "size 4");
        assert_eq!(r.max_level(), log::LevelFilter::Debug);
    }

    #[test]
    fn startup_section() {
        let f = sluice_cli::conf::parse(
            "logging { default-log-level debug default-syslog-log-level err size 64\n class vnet/ip4 { rate-limit 100 level warn syslog-level disabled } }",
            "s.conf",
        )
        .unwrap();
        let c = parse_config(&f.sections[0], "s.conf").unwrap();
        assert_eq!(c.default_level, Some(log::Level::Debug));
        assert_eq!(c.default_syslog_level, Some(log::Level::Error));
        assert_eq!(c.size, 64);
        assert_eq!(
            c.classes["vnet/ip4"],
            ClassConfig {
                level: Some(Some(log::Level::Warn)),
                syslog_level: Some(None),
                rate_limit: Some(100),
            }
        );
        for (text, err) in [
            (
                "logging { default-log-level loud }",
                "s.conf:1: unknown log level `loud'",
            ),
            ("logging { size 0 }", "s.conf:1: size 0 out of range"),
            (
                "logging { class x { level } }",
                "s.conf:1: `level' needs a value",
            ),
            (
                "logging { class x { colour red } }",
                "s.conf:1: unknown key `colour'",
            ),
        ] {
            let f = sluice_cli::conf::parse(text, "s.conf").unwrap();
            let e = parse_config(&f.sections[0], "s.conf")
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(err), "{text}: {e}");
        }
    }
}
