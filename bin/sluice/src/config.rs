//! Typed startup.conf: VPP brace syntax parsed by `sluice_cli::conf`, validated here. Unknown
//! sections, unknown keys and bad values are errors naming `file:line` and the token.

use sluice_buffer::{PageSize, PoolConfig};
use sluice_cli::conf::{self, ConfError, ConfFile, Section, SectionCursor};
use sluice_graph::CpuConfig;
use sluice_stats::collector::StatsConfig;
use sluice_vnet::plugin::{plugin_name, Plugin, PluginsConfig, Staged};
use std::path::PathBuf;

/// Where the CLI listens (`cli-listen`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CliListen {
    /// A Unix socket path (relative paths are inside `runtime-dir`).
    Unix(PathBuf),
    /// A TCP address (`cli-listen localhost:5002`; `:5002` is 127.0.0.1). Plain-text line
    /// mode as VPP's telnet CLI.
    Tcp(std::net::SocketAddr),
}

/// `unix { ... }`.
#[derive(Clone, Debug, Default)]
pub struct UnixConfig {
    /// CLI socket (`cli-listen`); `None`: `cli.sock` in the runtime directory.
    pub cli_listen: Option<CliListen>,
    /// Stay in the foreground (`nodaemon`, implied by `interactive`).
    pub nodaemon: bool,
    /// Interactive prompt on stdin (`interactive`).
    pub interactive: bool,
    /// CLI script run at boot (`exec` / `startup-config`) and the line of the key.
    pub exec: Option<(PathBuf, usize)>,
    /// `exec-strict` (Sluice's own key): a missing start-up script, or its first failing
    /// line, stops start-up. Without it, as VPP, a missing script is a warning and a failing
    /// line is logged with `file:line` and the script goes on.
    pub exec_strict: bool,
    /// Log file (`log`), appended to.
    pub log: Option<PathBuf>,
    /// File the daemon's pid is written to (`pidfile`), removed at exit.
    pub pidfile: Option<PathBuf>,
    /// Directory of the default sockets (`runtime-dir`); `None`: [`default_runtime_dir`].
    pub runtime_dir: Option<PathBuf>,
    /// Group of the sockets and of the runtime directory, and the daemon's effective group
    /// (`gid <name|id>`), with the name as written.
    pub gid: Option<(u32, String)>,
    /// Directory `pcap trace` and `packet-generator capture` write to (`capture-dir`, default
    /// `/tmp` as VPP).
    pub capture_dir: Option<PathBuf>,
    /// Sleep between loops when idle, microseconds (`poll-sleep-usec`, 0..=1000000).
    pub poll_sleep_usec: Option<u64>,
    /// A busy round of the main loop or of a worker that found no work yields the CPU
    /// (`poll-yield`, Sluice's own key): sched_yield(2), so that processes sharing the CPU
    /// (host-stack applications) run before the next round.
    pub poll_yield: bool,
    /// `cli-prompt`.
    pub cli_prompt: Option<String>,
    /// A daemonised sluice does not copy its log to syslog (`nosyslog`).
    pub nosyslog: bool,
    /// Core file size limit in bytes (`coredump-size <n>|unlimited`); `Some(None)`: unlimited.
    pub coredump_size: Option<Option<u64>>,
    /// CLI server limits (`cli-max-clients`, `cli-max-request-bytes`,
    /// `cli-max-output-bytes`, `cli-client-timeout`).
    pub cli_limits: crate::server::Limits,
}

/// The default runtime directory: `/run/sluice` as root, else `$XDG_RUNTIME_DIR/sluice`,
/// else `/tmp/sluice-<uid>` (see `sluice_cli::proto::default_cli_socket`).
pub fn default_runtime_dir() -> PathBuf {
    sluice_cli::proto::default_cli_socket()
        .parent()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/run/sluice"))
}

impl UnixConfig {
    /// The runtime directory (configured or default).
    pub fn runtime_dir(&self) -> PathBuf {
        self.runtime_dir.clone().unwrap_or_else(default_runtime_dir)
    }

    /// The CLI endpoint with a relative socket path placed in the runtime directory.
    pub fn cli_endpoint(&self) -> CliListen {
        match &self.cli_listen {
            None => CliListen::Unix(self.runtime_dir().join("cli.sock")),
            Some(CliListen::Unix(p)) if p.is_relative() => {
                CliListen::Unix(self.runtime_dir().join(p))
            }
            Some(l) => l.clone(),
        }
    }
}

/// `metrics { listen <addr:port> [prefix <s>] }`: the Prometheus endpoint.
#[derive(Clone, Debug, Default)]
pub struct MetricsConfig {
    /// Listen address.
    pub listen: Option<std::net::SocketAddr>,
    /// Put in front of every metric name (e.g. `vpp_`).
    pub prefix: String,
}

/// The whole startup configuration.
#[derive(Debug, Default)]
pub struct StartupConfig {
    /// `unix`.
    pub unix: UnixConfig,
    /// `cpu`.
    pub cpu: CpuConfig,
    /// `cpu { scheduler-policy <p> [scheduler-priority <n>] }`.
    pub sched: Option<Sched>,
    /// `buffers`.
    pub buffers: PoolConfig,
    /// `api { socket <path> }`.
    pub api_socket: Option<PathBuf>,
    /// `metrics`.
    pub metrics: MetricsConfig,
    /// `statseg`.
    pub statseg: StatsConfig,
    /// `logging`.
    pub logging: crate::logging::Config,
    /// `plugins { ... }`: which plugins run.
    pub plugins: PluginsConfig,
    /// The plugins' own sections, validated by them (becomes the runtime's extension map).
    pub staged: Staged,
    /// Warnings to log once the logger is up (sections accepted but not used).
    pub warnings: Vec<String>,
}

/// VPP sections Sluice accepts and ignores with a warning (unless a plugin of this build
/// owns them).
const IGNORED_SECTIONS: &[&str] = &[
    "dpdk",
    "api-trace",
    "api-segment",
    "socksvr",
    "memory",
    "node",
    "l3fib",
    "l2fib",
    "ip",
    "ip6",
    "linux-cp",
    "linux-nl",
    "punt",
    "session",
    "tcp",
    "tls",
    "quic",
    "http",
    "nat",
    "nat44",
    "nat64",
    "nat66",
    "acl-plugin",
    "lcp",
    "ikev2",
    "ipsec",
    "crypto-engines",
    "vhost-user",
    "tuntap",
    "vlib",
    "api-queue",
    "l2learn",
    "mactime",
    "perfmon",
    "flowprobe",
    "dhcp",
    "vrrp",
    "cnat",
    "lb",
    "gtpu",
    "pppoe",
    "srv6",
    "sr",
    "dns",
    "igmp",
    "map",
    "unittest",
];

/// Parses and validates a startup.conf text; `plugins` is the build's plugin list (their
/// sections are theirs to validate).
pub fn parse(
    text: &str,
    file: &str,
    plugins: &[&'static dyn Plugin],
) -> Result<StartupConfig, ConfError> {
    let cf = conf::parse(text, file)?;
    from_conf(&cf, file, plugins)
}

/// Validates a parsed file.
pub fn from_conf(
    cf: &ConfFile,
    file: &str,
    plugins: &[&'static dyn Plugin],
) -> Result<StartupConfig, ConfError> {
    let mut cfg = StartupConfig::default();
    // `plugins` first, wherever it is: it decides whose sections the others are.
    for s in cf.sections.iter().filter(|s| s.name == "plugins") {
        plugins_section(s, file, plugins, &mut cfg)?;
    }
    let entries = cfg.plugins.entries(plugins);
    for s in &cf.sections {
        let owner = entries
            .iter()
            .find(|e| e.plugin.config_sections().contains(&s.name.as_str()));
        if let Some(e) = owner {
            if !e.enabled {
                return Err(ConfError {
                    file: file.to_string(),
                    line: s.line,
                    msg: format!(
                        "section `{}' belongs to plugin `{}', which is disabled",
                        s.name,
                        e.plugin.name()
                    ),
                });
            }
            e.plugin.configure(&mut cfg.staged, s, file)?;
            continue;
        }
        match s.name.as_str() {
            "unix" => unix(s, file, &mut cfg)?,
            "cpu" => cpu(s, file, &mut cfg)?,
            "buffers" => buffers(s, file, &mut cfg)?,
            "api" => api(s, file, &mut cfg)?,
            "metrics" => metrics(s, file, &mut cfg)?,
            "statseg" => statseg(s, file, &mut cfg)?,
            "logging" => cfg.logging = crate::logging::parse_config(s, file)?,
            // VPP's top-level `heapsize <size>` (no braces; `sluice_cli::conf`).
            "heapsize" => {
                let v = &s.tokens()[0];
                if conf::parse_size(&v.text).is_none() {
                    return Err(ConfError {
                        file: file.to_string(),
                        line: v.line,
                        msg: format!("bad value `{}' for `heapsize': expected a size", v.text),
                    });
                }
                cfg.warnings.push(format!(
                    "{file}:{}: heapsize is accepted for VPP compatibility and ignored (Sluice has no fixed-size main heap)",
                    s.line
                ));
            }
            "plugins" => {}
            n if IGNORED_SECTIONS.contains(&n) => cfg.warnings.push(format!(
                "{file}:{}: section `{n}' is accepted for VPP compatibility and ignored",
                s.line
            )),
            n => {
                return Err(ConfError {
                    file: file.to_string(),
                    line: s.line,
                    msg: format!("unknown section `{n}'"),
                })
            }
        }
    }
    Ok(cfg)
}

/// Largest CLI script `exec` / `startup-config` read (bytes): room for a full IPv4 and IPv6
/// table as `ip route add` lines (about 42 MB) three times over.
pub const MAX_SCRIPT_BYTES: u64 = 128 << 20;

/// Largest startup.conf read (bytes).
pub const MAX_CONFIG_BYTES: u64 = 4 << 20;

/// `p` made absolute against the current directory (a daemon changes to `/`).
fn absolute(p: &str) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| PathBuf::from(p))
}

/// A numeric value of `key` in `lo..=hi`, or ``file:line: key N out of range lo..hi``.
fn ranged(c: &mut SectionCursor, k: &conf::Token, lo: u64, hi: u64) -> Result<u64, ConfError> {
    let v = c.value_u64(k)?;
    if !(lo..=hi).contains(&v) {
        return Err(c.error(k, &format!("{} {v} out of range {lo}..{hi}", k.text)));
    }
    Ok(v)
}

/// Resolves a group name or number (`gid vpp`, `gid 1000`).
pub fn resolve_group(name: &str) -> Option<u32> {
    if let Ok(n) = name.parse::<u32>() {
        return Some(n);
    }
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: libc::group is plain C data (integers and pointers); all zeroes is a valid value.
    let mut grp: libc::group = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 << 10];
    let mut res: *mut libc::group = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; buf's length is passed; res is set to
    // null or to &grp.
    let r =
        unsafe { libc::getgrnam_r(c.as_ptr(), &mut grp, buf.as_mut_ptr(), buf.len(), &mut res) };
    (r == 0 && !res.is_null()).then_some(grp.gr_gid)
}

/// Parses a `cli-listen` value: a path, or `host:port` / `:port` (TCP, loopback by default).
fn cli_listen(c: &SectionCursor, v: &conf::Token) -> Result<CliListen, ConfError> {
    let t = v.text.as_str();
    if t.starts_with('/') || t.starts_with('.') || !t.contains(':') {
        return Ok(CliListen::Unix(PathBuf::from(t)));
    }
    let bad = || {
        c.error(
            v,
            &format!("bad cli-listen `{t}': expected a socket path or <host>:<port>"),
        )
    };
    let (host, port) = t.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let ip: std::net::IpAddr = match host {
        "" | "localhost" => std::net::Ipv4Addr::LOCALHOST.into(),
        h => h.parse().map_err(|_| bad())?,
    };
    Ok(CliListen::Tcp(std::net::SocketAddr::new(ip, port)))
}

fn unix(s: &Section, file: &str, cfg: &mut StartupConfig) -> Result<(), ConfError> {
    let mut c = SectionCursor::new(s, file);
    let mut unreadable: Option<ConfError> = None;
    let warn = |cfg: &mut StartupConfig, k: &conf::Token, why: &str| {
        cfg.warnings
            .push(format!("{file}:{}: unix {{ {} }}: {why}", k.line, k.text));
    };
    while let Some(k) = c.next_key() {
        match k.text.as_str() {
            "cli-listen" => {
                let v = c.value(k)?;
                cfg.unix.cli_listen = Some(cli_listen(&c, v)?);
            }
            "interactive" => {
                cfg.unix.interactive = true;
                cfg.unix.nodaemon = true;
            }
            "nodaemon" => cfg.unix.nodaemon = true,
            "exec" | "startup-config" => {
                let v = c.value(k)?;
                let p = absolute(&v.text);
                if let Err(e) = sluice_infra::files::read_regular(&p, MAX_SCRIPT_BYTES) {
                    // Decided once the whole section is read (`exec-strict` may follow).
                    unreadable = Some(c.error(v, &format!("{}: {e}", k.text)));
                } else {
                    unreadable = None;
                }
                cfg.unix.exec = Some((p, k.line))
            }
            "exec-strict" => cfg.unix.exec_strict = true,
            "poll-yield" => cfg.unix.poll_yield = true,
            "log" | "pidfile" => {
                let v = c.value(k)?;
                let p = absolute(&v.text);
                let dir = p.parent().unwrap_or(std::path::Path::new("/"));
                if !dir.is_dir() {
                    return Err(c.error(
                        v,
                        &format!(
                            "{} `{}': directory {} does not exist",
                            k.text,
                            v.text,
                            dir.display()
                        ),
                    ));
                }
                if p.is_dir() {
                    return Err(c.error(v, &format!("{} `{}': is a directory", k.text, v.text)));
                }
                if k.text == "log" {
                    cfg.unix.log = Some(p);
                } else {
                    cfg.unix.pidfile = Some(p);
                }
            }
            "runtime-dir" => {
                let v = c.value(k)?;
                let p = absolute(&v.text);
                if p.exists() && !p.is_dir() {
                    return Err(c.error(v, &format!("runtime-dir `{}': not a directory", v.text)));
                }
                cfg.unix.runtime_dir = Some(p);
            }
            "capture-dir" => {
                let v = c.value(k)?;
                if sluice_infra::files::OutputDir::new(std::path::Path::new(&v.text)).is_none() {
                    return Err(c.error(
                        v,
                        &format!(
                            "capture-dir `{}': expected an absolute path without `..'",
                            v.text
                        ),
                    ));
                }
                if !std::path::Path::new(&v.text).is_dir() {
                    return Err(c.error(v, &format!("capture-dir `{}': no such directory", v.text)));
                }
                cfg.unix.capture_dir = Some(PathBuf::from(&v.text));
            }
            "gid" => {
                let v = c.value(k)?;
                let g = resolve_group(&v.text)
                    .ok_or_else(|| c.error(v, &format!("unknown group `{}'", v.text)))?;
                cfg.unix.gid = Some((g, v.text.clone()));
            }
            "poll-sleep-usec" => cfg.unix.poll_sleep_usec = Some(ranged(&mut c, k, 0, 1_000_000)?),
            "cli-prompt" => cfg.unix.cli_prompt = Some(c.value(k)?.text.clone()),
            "coredump-size" => {
                let v = c.value(k)?;
                cfg.unix.coredump_size = Some(if v.text == "unlimited" {
                    None
                } else {
                    Some(conf::parse_size(&v.text).ok_or_else(|| {
                        c.error(
                            v,
                            &format!(
                                "bad value `{}' for `coredump-size': expected a size or unlimited",
                                v.text
                            ),
                        )
                    })?)
                });
            }
            "cli-max-clients" => {
                cfg.unix.cli_limits.max_clients = ranged(&mut c, k, 1, 4096)? as usize
            }
            "cli-max-request-bytes" => {
                cfg.unix.cli_limits.max_request =
                    ranged(&mut c, k, 1024, sluice_cli::proto::MAX_FRAME as u64)? as usize
            }
            "cli-max-output-bytes" => {
                cfg.unix.cli_limits.max_output = ranged(&mut c, k, 64 << 10, 4 << 30)? as usize
            }
            "cli-client-timeout" => {
                cfg.unix.cli_limits.client_timeout =
                    std::time::Duration::from_secs(ranged(&mut c, k, 1, 3600)?)
            }
            // Sluice never colours its output nor prints a banner: honoured as is.
            "nocolor" | "nobanner" => {}
            "full-coredump" => warn(
                cfg,
                k,
                "ignored (core dumps follow the kernel's coredump_filter; see coredump-size)",
            ),
            "cli-history-limit" => {
                ranged(&mut c, k, 0, 1_000_000)?;
                warn(cfg, k, "ignored (sluicectl keeps its own history)");
            }
            "cli-line-mode" => warn(cfg, k, "ignored (sluicectl edits lines itself)"),
            "cli-no-pager" => warn(cfg, k, "ignored (the CLI has no pager)"),
            "cli-pager-buffer-limit" => {
                c.value_u64(k)?;
                warn(cfg, k, "ignored (the CLI has no pager)");
            }
            "nosyslog" => cfg.unix.nosyslog = true,
            _ => return Err(c.unknown(k)),
        }
    }
    if let Some(e) = unreadable {
        if cfg.unix.exec_strict {
            return Err(e);
        }
        // VPP warns and starts without the script.
        cfg.warnings.push(format!("{e} (start-up script skipped)"));
        cfg.unix.exec = None;
    }
    Ok(())
}

fn parse_corelist(c: &SectionCursor, tok: &conf::Token) -> Result<Vec<usize>, ConfError> {
    let mut out = Vec::new();
    for part in tok.text.split(',') {
        let bad = || c.error(tok, &format!("bad core list `{}'", tok.text));
        if let Some((a, b)) = part.split_once('-') {
            let a: usize = a.parse().map_err(|_| bad())?;
            let b: usize = b.parse().map_err(|_| bad())?;
            if b < a || b - a > 1024 {
                return Err(bad());
            }
            out.extend(a..=b);
        } else {
            out.push(part.parse().map_err(|_| bad())?);
        }
    }
    Ok(out)
}

fn cpu(s: &Section, file: &str, cfg: &mut StartupConfig) -> Result<(), ConfError> {
    let mut c = SectionCursor::new(s, file);
    let (mut policy, mut priority) = (None, None);
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    while let Some(k) = c.next_key() {
        match k.text.as_str() {
            "main-core" => {
                let v = c.value_u64(k)? as usize;
                if v >= ncpu {
                    return Err(
                        c.error(k, &format!("main-core {v}: this machine has {ncpu} cores"))
                    );
                }
                cfg.cpu.main_core = Some(v);
            }
            "workers" => {
                let n = c.value_u64(k)?;
                if n > 64 {
                    return Err(c.error(k, &format!("workers {n}: at most 64")));
                }
                cfg.cpu.workers = vec![None; n as usize];
            }
            "corelist-workers" => {
                let v = c.value(k)?;
                let cores = parse_corelist(&c, v)?;
                if let Some(bad) = cores.iter().find(|&&x| x >= ncpu) {
                    return Err(c.error(
                        v,
                        &format!("core {bad} in `{}': this machine has {ncpu} cores", v.text),
                    ));
                }
                cfg.cpu.workers = cores.into_iter().map(Some).collect();
            }
            "skip-cores" => {
                ranged(&mut c, k, 0, ncpu as u64)?;
                cfg.warnings.push(format!(
                    "{file}:{}: cpu {{ skip-cores }}: ignored (give main-core / corelist-workers)",
                    k.line
                ));
            }
            "scheduler-priority" => {
                let v = c.value_u64(k)?;
                priority = Some((k.clone(), v.min(u32::MAX as u64) as u32));
            }
            "relative" => cfg.warnings.push(format!(
                "{file}:{}: cpu {{ relative }}: ignored (core numbers are absolute)",
                k.line
            )),
            "scheduler-policy" => {
                let v = c.value(k)?;
                let Some(&(_, p)) = SCHED_POLICIES.iter().find(|(n, _)| *n == v.text) else {
                    return Err(c.error(
                        v,
                        &format!(
                            "bad scheduler-policy `{}': expected rr, fifo, batch, idle or other",
                            v.text
                        ),
                    ));
                };
                policy = Some(p);
            }
            _ => return Err(c.unknown(k)),
        }
    }
    let rt = matches!(policy, Some(libc::SCHED_FIFO | libc::SCHED_RR));
    match priority {
        // VPP: "scheduling priority (n) is not allowed for `normal` scheduling policy".
        Some((k, p)) if !rt => Err(c.error(
            &k,
            &format!("scheduler-priority {p}: a priority needs scheduler-policy fifo or rr"),
        )),
        p => {
            cfg.sched = policy.map(|policy| sched(policy, p.map(|p| p.1)));
            Ok(())
        }
    }
}

/// `scheduler-policy` names and their policies.
const SCHED_POLICIES: &[(&str, libc::c_int)] = &[
    ("other", libc::SCHED_OTHER),
    ("fifo", libc::SCHED_FIFO),
    ("rr", libc::SCHED_RR),
    ("batch", libc::SCHED_BATCH),
    ("idle", libc::SCHED_IDLE),
];

/// The scheduling policy of the threads (`cpu { scheduler-policy ... }`), as VPP sets it:
/// on the main thread before it starts the workers, which inherit it ([`Sched::apply`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sched {
    /// `SCHED_*`.
    pub policy: libc::c_int,
    /// The static priority (1..99 for `fifo`/`rr`, 0 for the others).
    pub priority: libc::c_int,
}

impl Sched {
    /// The policy's `startup.conf` name.
    pub fn name(&self) -> &'static str {
        SCHED_POLICIES
            .iter()
            .find(|(_, p)| *p == self.policy)
            .map_or("?", |(n, _)| n)
    }

    /// Sets the calling thread's policy (threads it starts afterwards inherit it): one line
    /// saying what was refused and why.
    pub fn apply(&self) -> Result<(), String> {
        let param = libc::sched_param {
            sched_priority: self.priority,
        };
        // SAFETY: `param` is a valid sched_param that outlives the call; pid 0 is the
        // calling thread.
        if unsafe { libc::sched_setscheduler(0, self.policy, &param) } == 0 {
            return Ok(());
        }
        Err(self.refused(std::io::Error::last_os_error()))
    }

    /// The line saying the kernel refused the policy (`e`) and why.
    fn refused(&self, e: std::io::Error) -> String {
        let hint = if e.raw_os_error() == Some(libc::EPERM) {
            " (a real-time policy needs CAP_SYS_NICE or an RLIMIT_RTPRIO of the priority)"
        } else {
            ""
        };
        // The priority only where it means something (`fifo`, `rr`; 0 for the others).
        let priority = if matches!(self.policy, libc::SCHED_FIFO | libc::SCHED_RR) {
            format!(" scheduler-priority {}", self.priority)
        } else {
            String::new()
        };
        format!(
            "cpu {{ scheduler-policy {}{priority} }}: sched_setscheduler refused: {e}{hint}",
            self.name(),
        )
    }
}

/// A policy and its priority as VPP takes them: clamped to the range of `fifo`/`rr` (whose
/// priority without one is the lowest: VPP keeps the thread's current one, 0, and its call
/// then fails unseen); 0 for the others.
fn sched(policy: libc::c_int, priority: Option<u32>) -> Sched {
    let priority = if matches!(policy, libc::SCHED_FIFO | libc::SCHED_RR) {
        // SAFETY: plain queries of the policy's range.
        let (lo, hi) = unsafe {
            (
                libc::sched_get_priority_min(policy),
                libc::sched_get_priority_max(policy),
            )
        };
        priority.map_or(lo, |p| (p.min(hi as u32) as libc::c_int).max(lo))
    } else {
        0
    };
    Sched { policy, priority }
}

fn buffers(s: &Section, file: &str, cfg: &mut StartupConfig) -> Result<(), ConfError> {
    let mut c = SectionCursor::new(s, file);
    while let Some(k) = c.next_key() {
        match k.text.as_str() {
            "buffers-per-numa" => {
                let n = c.value_u64(k)?;
                if !(256..=(1 << 24)).contains(&n) {
                    return Err(c.error(
                        k,
                        &format!("buffers-per-numa {n} out of range 256..16777216"),
                    ));
                }
                cfg.buffers.buffers = n as u32;
            }
            "default" => {
                let dk = c.value(k)?;
                if dk.text != "data-size" {
                    return Err(c.error(
                        dk,
                        &format!("unknown key `default {}' in section `buffers'", dk.text),
                    ));
                }
                let n = c.value_u64(dk)? as usize;
                if !(256..=sluice_buffer::MAX_DATA_SIZE).contains(&n) {
                    return Err(c.error(
                        dk,
                        &format!(
                            "data-size {n} out of range 256..{}",
                            sluice_buffer::MAX_DATA_SIZE
                        ),
                    ));
                }
                cfg.buffers.data_size = n;
            }
            "page-size" => {
                let v = c.value(k)?;
                cfg.buffers.page_size = match v.text.as_str() {
                    "4k" | "4K" | "4096" => PageSize::Small,
                    "2m" | "2M" | "default-hugepage" => PageSize::Huge2M,
                    "default" => PageSize::Default,
                    _ => {
                        return Err(c.error(
                            v,
                            &format!("bad page-size `{}': expected 4k, 2M or default", v.text),
                        ))
                    }
                };
            }
            // Sluice's own key: the data array becomes a shared memfd that memif zero-copy
            // hands to its peer (docs/memif.md).
            "shared" => cfg.buffers.shared = true,
            "layout" | "numa-mask" => {
                c.value(k)?;
                cfg.warnings.push(format!(
                    "{file}:{}: buffers {{ {} }}: ignored (one pool, one NUMA node)",
                    k.line, k.text
                ));
            }
            _ => return Err(c.unknown(k)),
        }
    }
    Ok(())
}

/// `plugins { plugin <name> { enable|disable } plugin default { disable } path <dir> }`
/// (VPP's; names with or without `_plugin.so`).
fn plugins_section(
    s: &Section,
    file: &str,
    all: &[&'static dyn Plugin],
    cfg: &mut StartupConfig,
) -> Result<(), ConfError> {
    let mut c = SectionCursor::new(s, file);
    while let Some(k) = c.next_key() {
        match k.text.as_str() {
            "plugin" => {
                let n = c.value(k)?;
                let block = c.block(n)?;
                let mut on = None;
                for t in block {
                    match t.text.as_str() {
                        "enable" => on = Some(true),
                        "disable" => on = Some(false),
                        "skip-version-check" => {}
                        _ => {
                            return Err(c.error(
                                t,
                                &format!(
                                    "unknown word `{}' in `plugin {}': expected enable or disable",
                                    t.text, n.text
                                ),
                            ))
                        }
                    }
                }
                let name = plugin_name(&n.text);
                let Some(on) = on else {
                    continue;
                };
                if name == "default" {
                    cfg.plugins.default_disable = !on;
                } else if all.iter().any(|p| p.name() == name) {
                    cfg.plugins.explicit.push((name.to_string(), on));
                } else {
                    cfg.warnings.push(format!(
                        "{file}:{}: plugin `{}' is not part of this build; ignored",
                        n.line, n.text
                    ));
                }
            }
            "path" | "add-path" => {
                let v = c.value(k)?;
                cfg.warnings.push(format!(
                    "{file}:{}: plugins are linked into the binary; `{} {}' ignored",
                    k.line, k.text, v.text
                ));
            }
            "vat-plugin" => {
                let n = c.value(k)?;
                c.block(n)?;
            }
            _ => return Err(c.unknown(k)),
        }
    }
    Ok(())
}

fn api(s: &Section, file: &str, cfg: &mut StartupConfig) -> Result<(), ConfError> {
    let mut c = SectionCursor::new(s, file);
    while let Some(k) = c.next_key() {
        match k.text.as_str() {
            "socket" => cfg.api_socket = Some(PathBuf::from(&c.value(k)?.text)),
            _ => return Err(c.unknown(k)),
        }
    }
    Ok(())
}

fn metrics(s: &Section, file: &str, cfg: &mut StartupConfig) -> Result<(), ConfError> {
    let mut c = SectionCursor::new(s, file);
    while let Some(k) = c.next_key() {
        match k.text.as_str() {
            "listen" => {
                let v = c.value(k)?;
                let Ok(a) = v.text.parse::<std::net::SocketAddr>() else {
                    return Err(c.error(
                        v,
                        &format!("bad listen address `{}': expected ip:port", v.text),
                    ));
                };
                cfg.metrics.listen = Some(a);
            }
            // Sluice's own key: a prefix for every metric name (`vpp_` as Calico/VPP).
            "prefix" => {
                let v = c.value(k)?;
                let ok = v.text.chars().enumerate().all(|(i, ch)| {
                    ch.is_ascii_alphabetic() || ch == '_' || (i > 0 && ch.is_ascii_digit())
                });
                if !ok {
                    return Err(c.error(
                        v,
                        &format!("bad metric prefix `{}': letters, digits and `_'", v.text),
                    ));
                }
                cfg.metrics.prefix = v.text.clone();
            }
            _ => return Err(c.unknown(k)),
        }
    }
    Ok(())
}

/// `statseg { socket-name <path> size <n> update-interval <s> per-node-counters on|off
/// page-size <x> disable }` (VPP's keys; `disable` is Sluice's own).
fn statseg(s: &Section, file: &str, cfg: &mut StartupConfig) -> Result<(), ConfError> {
    let mut c = SectionCursor::new(s, file);
    let st = &mut cfg.statseg;
    while let Some(k) = c.next_key() {
        match k.text.as_str() {
            "socket-name" => st.socket = Some(PathBuf::from(&c.value(k)?.text)),
            "size" => {
                let v = c.value(k)?;
                match conf::parse_size(&v.text) {
                    Some(n) if ((64 << 10)..=(1 << 34)).contains(&n) => st.size = n as usize,
                    _ => {
                        return Err(c.error(
                            v,
                            &format!("bad statseg size `{}': expected 64k..16g", v.text),
                        ))
                    }
                }
            }
            "update-interval" => {
                let v = c.value(k)?;
                match v.text.parse::<f64>() {
                    Ok(x) if sluice_stats::collector::INTERVAL_RANGE.contains(&x) => {
                        st.interval = x
                    }
                    _ => {
                        return Err(c.error(
                            v,
                            &format!(
                                "bad update-interval `{}': expected seconds, 0.001..3600",
                                v.text
                            ),
                        ))
                    }
                }
            }
            "per-node-counters" => {
                let v = c.value(k)?;
                st.per_node_counters = match v.text.as_str() {
                    "on" | "enable" => true,
                    "off" | "disable" => false,
                    _ => {
                        return Err(c.error(
                            v,
                            &format!("bad per-node-counters `{}': expected on or off", v.text),
                        ))
                    }
                };
            }
            // VPP sizes its segment's pages; Sluice's memfd uses the kernel's.
            "page-size" => {
                c.value(k)?;
            }
            "disable" => st.disabled = true,
            _ => return Err(c.unknown(k)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse(text, "t.conf", &sluice_plugins::all())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn accepts_vpp_style_config() {
        let script = std::env::temp_dir().join(format!("sluice-conf-{}.cli", std::process::id()));
        std::fs::write(&script, "show int\n").unwrap();
        let c = parse(
            &format!("unix {{\n  nodaemon\n  cli-listen /tmp/x.sock\n  exec {}\n}}\n# comment\ncpu {{ main-core 0 workers 1 }}\nbuffers {{ buffers-per-numa 4096 default data-size 2048 page-size 4k }}\nmemory {{ main-heap-size 2G }}\n", script.display()),
            "t.conf",
            &sluice_plugins::all(),
        )
        .unwrap();
        std::fs::remove_file(&script).unwrap();
        assert_eq!(
            c.unix.cli_listen,
            Some(CliListen::Unix(PathBuf::from("/tmp/x.sock")))
        );
        assert_eq!(c.cpu.workers.len(), 1);
        assert_eq!(c.buffers.buffers, 4096);
        assert_eq!(c.buffers.page_size, PageSize::Small);
        assert!(!c.buffers.shared, "private data array by default");
        assert!(
            parse("buffers {\n shared\n}\n", "t.conf", &[])
                .unwrap()
                .buffers
                .shared
        );
        assert_eq!(c.warnings.len(), 1);
        assert!(c.warnings[0].starts_with("t.conf:9: section `memory'"));
    }

    #[test]
    fn missing_startup_script_warns_unless_strict() {
        let c = parse("unix {\n exec /nonexistent/boot.cli\n}\n", "t.conf", &[]).unwrap();
        assert!(c.unix.exec.is_none());
        assert_eq!(
            c.warnings,
            vec!["t.conf:2: exec: cannot read `/nonexistent/boot.cli': No such file or directory (os error 2) (start-up script skipped)".to_string()]
        );
        assert_eq!(
            err("unix {\n startup-config /nonexistent/boot.cli\n exec-strict\n}\n"),
            "t.conf:2: startup-config: cannot read `/nonexistent/boot.cli': No such file or directory (os error 2)"
        );
    }

    #[test]
    fn poll_yield_is_off_unless_set() {
        assert!(
            !parse("unix { nodaemon }\n", "t.conf", &[])
                .unwrap()
                .unix
                .poll_yield
        );
        let c = parse("unix {\n poll-yield\n}\n", "t.conf", &[]).unwrap();
        assert!(c.unix.poll_yield);
        assert_eq!(
            err("unix {\n poll-yield 1\n}\n"),
            "t.conf:2: unknown key `1' in section `unix'"
        );
    }

    #[test]
    fn unknown_section_names_file_line_and_token() {
        assert_eq!(
            err("unix { nodaemon }\nfrobnicate { x 1 }\n"),
            "t.conf:2: unknown section `frobnicate'"
        );
    }

    #[test]
    fn unknown_key_names_file_line_and_token() {
        assert_eq!(
            err("unix {\n  nodaemon\n  colour blue\n}\n"),
            "t.conf:3: unknown key `colour' in section `unix'"
        );
    }

    #[test]
    fn bad_values_name_the_token() {
        assert_eq!(
            err("buffers {\n buffers-per-numa lots\n}"),
            "t.conf:2: bad value `lots' for `buffers-per-numa': expected a number"
        );
        assert_eq!(
            err("buffers { page-size 1G }"),
            "t.conf:1: bad page-size `1G': expected 4k, 2M or default"
        );
        assert_eq!(
            err("cpu {\n\n workers 1000 }"),
            "t.conf:3: workers 1000: at most 64"
        );
        assert_eq!(
            err("cpu { corelist-workers 1-x }"),
            "t.conf:1: bad core list `1-x'"
        );
        assert_eq!(
            err("metrics { listen nowhere }"),
            "t.conf:1: bad listen address `nowhere': expected ip:port"
        );
        assert_eq!(
            err("unix { cli-listen }"),
            "t.conf:1: `cli-listen' needs a value"
        );
    }

    #[test]
    fn plugins_section_enables_disables_and_owns_sections() {
        let all = sluice_plugins::all();
        let c = parse(
            "plugins {\n path /usr/lib/vpp_plugins\n plugin default { disable }\n plugin memif_plugin.so { enable }\n plugin dpdk_plugin.so { disable }\n plugin lacp_plugin.so { disable }\n}\n",
            "t.conf",
            &all,
        )
        .unwrap();
        let on: Vec<(&str, bool)> = c
            .plugins
            .entries(&all)
            .iter()
            .map(|e| (e.plugin.name(), e.enabled))
            .collect();
        assert!(on.contains(&("memif", true)), "{on:?}");
        assert!(on.contains(&("af_packet", false)), "{on:?}");
        assert!(on.contains(&("dpdk", false)), "{on:?}");
        assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
        assert!(c.warnings[1].contains("`lacp_plugin.so' is not part of this build"));
        assert_eq!(
            err("plugins {\n plugin memif { sometimes }\n}"),
            "t.conf:2: unknown word `sometimes' in `plugin memif': expected enable or disable"
        );
    }

    #[test]
    fn syntax_errors_from_the_parser_keep_file_line() {
        let e = err("unix {\n nodaemon\n");
        assert!(e.starts_with("t.conf:1:"), "{e}");
    }

    #[test]
    fn statseg_and_metrics_keys() {
        let c = parse(
            "statseg {\n socket-name /tmp/st.sock\n size 4m\n update-interval 0.25\n per-node-counters off\n page-size 4k\n}\nmetrics { listen 127.0.0.1:9482 prefix vpp_ }\n",
            "t.conf",
            &[],
        )
        .unwrap();
        assert_eq!(
            c.statseg.socket.as_deref(),
            Some(std::path::Path::new("/tmp/st.sock"))
        );
        assert_eq!(c.statseg.size, 4 << 20);
        assert_eq!(c.statseg.interval, 0.25);
        assert!(!c.statseg.per_node_counters && !c.statseg.disabled);
        assert_eq!(c.metrics.listen, Some("127.0.0.1:9482".parse().unwrap()));
        assert_eq!(c.metrics.prefix, "vpp_");
        assert!(c.warnings.is_empty(), "statseg is used, not ignored");
        assert!(
            parse("statseg { disable }", "t.conf", &[])
                .unwrap()
                .statseg
                .disabled
        );
        assert_eq!(
            err("statseg {\n size 1k\n}"),
            "t.conf:2: bad statseg size `1k': expected 64k..16g"
        );
        assert_eq!(
            err("statseg { update-interval 0 }"),
            "t.conf:1: bad update-interval `0': expected seconds, 0.001..3600"
        );
        assert_eq!(
            err("statseg { update-interval soon }"),
            "t.conf:1: bad update-interval `soon': expected seconds, 0.001..3600"
        );
        assert_eq!(
            err("statseg { per-node-counters maybe }"),
            "t.conf:1: bad per-node-counters `maybe': expected on or off"
        );
        assert_eq!(
            err("statseg { colour red }"),
            "t.conf:1: unknown key `colour' in section `statseg'"
        );
        assert_eq!(
            err("metrics { listen 127.0.0.1:1 prefix 9x }"),
            "t.conf:1: bad metric prefix `9x': letters, digits and `_'"
        );
    }

    #[test]
    fn empty_config_is_defaults() {
        let c = parse("", "t.conf", &[]).unwrap();
        assert!(c.cpu.workers.is_empty());
        assert_eq!(c.buffers.buffers, sluice_buffer::DEFAULT_BUFFERS);
    }

    #[test]
    fn scheduler_policy_and_priority_as_vpp_takes_them() {
        let sched = |t: &str| {
            let c = parse(t, "t.conf", &[]).unwrap();
            assert!(c.warnings.is_empty(), "{:?}", c.warnings);
            c.sched
        };
        let s = |policy, priority| Some(Sched { policy, priority });
        assert_eq!(sched("cpu { workers 1 }"), None);
        // Clamped to the policy's range; the lowest when not given.
        for (conf, policy, priority) in [
            (
                "cpu { scheduler-policy fifo scheduler-priority 50 }",
                libc::SCHED_FIFO,
                50,
            ),
            (
                "cpu { scheduler-priority 150 scheduler-policy rr }",
                libc::SCHED_RR,
                99,
            ),
            ("cpu { scheduler-policy fifo }", libc::SCHED_FIFO, 1),
            ("cpu { scheduler-policy batch }", libc::SCHED_BATCH, 0),
            ("cpu { scheduler-policy idle }", libc::SCHED_IDLE, 0),
            ("cpu { scheduler-policy other }", libc::SCHED_OTHER, 0),
        ] {
            assert_eq!(sched(conf), s(policy, priority), "{conf}");
        }
        // A refusal names the priority only for the policies that have one.
        let eperm = || std::io::Error::from_raw_os_error(libc::EPERM);
        assert_eq!(
            Sched {
                policy: libc::SCHED_BATCH,
                priority: 0
            }
            .refused(std::io::Error::from_raw_os_error(libc::EINVAL)),
            "cpu { scheduler-policy batch }: sched_setscheduler refused: \
             Invalid argument (os error 22)"
        );
        assert!(Sched {
            policy: libc::SCHED_RR,
            priority: 7
        }
        .refused(eperm())
        .starts_with("cpu { scheduler-policy rr scheduler-priority 7 }: sched_setscheduler refused: Operation not permitted"));
        assert_eq!(
            err("cpu { scheduler-policy batch scheduler-priority 5 }"),
            "t.conf:1: scheduler-priority 5: a priority needs scheduler-policy fifo or rr"
        );
        assert_eq!(
            err("cpu {\n scheduler-priority 5 }"),
            "t.conf:2: scheduler-priority 5: a priority needs scheduler-policy fifo or rr"
        );
        assert_eq!(
            err("cpu { scheduler-policy deadline }"),
            "t.conf:1: bad scheduler-policy `deadline': expected rr, fifo, batch, idle or other"
        );
        let e = Sched {
            policy: libc::SCHED_FIFO,
            priority: 50,
        };
        assert_eq!(e.name(), "fifo");
    }
}
