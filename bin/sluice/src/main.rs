//! `sluice`: the Sluice vector packet processing daemon.
//!
//! `sluice [-c startup.conf] [--check] [--demo [--seconds N]] [inline config ...]` parses the
//! startup configuration, builds the graph, starts the worker threads and serves the CLI on a
//! Unix socket (`sluicectl` connects there) from the main thread's dispatcher loop.
//!
//! As VPP, it daemonises unless `unix { nodaemon }` (or `interactive`, or `--demo`) is given
//! (see [`daemon`]). Signals: SIGTERM and SIGINT stop it cleanly (a running `ping` or
//! `ip route add count` stops early); SIGHUP reopens the log file; SIGPIPE is ignored.

mod config;
mod daemon;
mod demo;
mod logging;
mod scripting;
mod server;

use clap::Parser;
use sluice_cli::{Args, CliError, CommandTree};
use sluice_graph::Vlib;
use sluice_infra::unix_socket::{self, SocketPerms};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(Parser, Debug)]
#[command(
    name = "sluice",
    version,
    about = "Sluice vector packet processing dataplane"
)]
struct Opts {
    /// startup.conf file (VPP syntax).
    #[arg(short = 'c', long = "config")]
    config: Option<PathBuf>,
    /// Validate the configuration and exit.
    #[arg(long)]
    check: bool,
    /// Run the built-in demo: pg traffic through the graph, live rate, then `show runtime`.
    #[arg(long)]
    demo: bool,
    /// Demo duration in seconds.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Demo: number of worker threads (0: single-threaded).
    #[arg(long, default_value_t = 0)]
    demo_workers: usize,
    /// Configuration given inline, VPP style: `sluice unix { cli-listen /tmp/s.sock }`.
    inline: Vec<String>,
}

static STOP: AtomicBool = AtomicBool::new(false);
static HUP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(sig: libc::c_int) {
    if sig == libc::SIGHUP {
        HUP.store(true, Ordering::Relaxed);
    } else {
        STOP.store(true, Ordering::Relaxed);
    }
}

fn install_signals() {
    // SAFETY: the handler only stores to atomics (async-signal-safe).
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGHUP, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// Daemon-level state reachable from CLI handlers.
#[derive(Default)]
pub struct Daemon {
    tree: Option<Arc<CommandTree<Vlib>>>,
    quit: bool,
    exec_depth: usize,
    /// The API socket and its modules (`show api`).
    api: Option<(PathBuf, Vec<sluice_api::ModuleInfo>)>,
}

/// The API socket beside the CLI socket: `api.sock` next to `cli.sock` (VPP's pair),
/// `<name>-api.sock` next to any other `<name>.sock`, so two daemons whose CLI sockets share
/// a directory do not share an API socket; in the runtime directory when the CLI is on TCP.
fn default_api_socket(cli: Option<&Path>, runtime_dir: &Path) -> PathBuf {
    let Some(cli) = cli else {
        return runtime_dir.join("api.sock");
    };
    let stem = cli.file_stem().and_then(|s| s.to_str()).unwrap_or("cli");
    if stem == "cli" {
        cli.with_file_name("api.sock")
    } else {
        cli.with_file_name(format!("{stem}-api.sock"))
    }
}

fn cli_show_api(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    let Some((path, mods)) = vm.ext_mut::<Daemon>().api.clone() else {
        return Ok("API disabled\n".into());
    };
    let mut s = format!(
        "socket {}\n{:<12}{:<10}{:<12}{}\n",
        path.display(),
        "Module",
        "Version",
        "CRC",
        "Messages"
    );
    for m in mods {
        s.push_str(&format!(
            "{:<12}{:<10}{:<12}{}\n",
            m.name,
            m.version,
            format!("{:#010x}", m.crc),
            m.messages.len()
        ));
    }
    Ok(s)
}

/// Adds the daemon's own commands to the tree the core and the plugins registered.
fn add_daemon_commands(t: &mut CommandTree<Vlib>) {
    sluice_stats::collector::register_cli(t);
    scripting::register(t);
    logging::register(t);
    t.add("quit", "quit — close this CLI session", cli_quit);
    t.add("help", "help [<command prefix>] — list commands", cli_help);
    t.add(
        "show api",
        "show api — the API socket and its schema modules (version, content hash)",
        cli_show_api,
    );
    t.add(
        "show version",
        "show version [verbose] [cmdline] — Sluice version",
        cli_version,
    );
}

fn cli_quit(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    vm.ext_mut::<Daemon>().quit = true;
    Ok(String::new())
}

fn cli_help(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let prefix = a.rest();
    let Some(tree) = vm.ext_mut::<Daemon>().tree.clone() else {
        return Err(CliError::new("help unavailable"));
    };
    tree.help(&prefix)
}

fn cli_version(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let mut verbose = false;
    let mut cmdline = false;
    while !a.is_empty() {
        if a.keyword("verbose") {
            verbose = true;
        } else if a.keyword("cmdline") {
            cmdline = true;
        } else {
            a.finish()?;
        }
    }
    let mut s = format!(
        "sluice v{} (Rust vector packet processing)\n",
        env!("CARGO_PKG_VERSION")
    );
    if verbose {
        // VPP's `Key: value` lines; Sluice is built by cargo, which records no build host,
        // date or compiler, so those are not shown.
        s = String::new();
        let rows = [
            ("Version", format!("v{}", env!("CARGO_PKG_VERSION"))),
            ("Current PID", std::process::id().to_string()),
            ("Threads", vm.n_threads().to_string()),
            (
                "Buffers",
                format!(
                    "{} x {} B ({:?})",
                    vm.pool.len(),
                    vm.pool.data_size(),
                    vm.pool.backing()
                ),
            ),
            ("TSC", format!("{:.3} GHz", vm.shared.clock.hz() / 1e9)),
        ];
        for (k, v) in rows {
            s.push_str(&format!("{:<26}{v}\n", format!("{k}:")));
        }
    }
    if cmdline {
        let args: Vec<String> = std::env::args().collect();
        s.push_str(&format!("Command line arguments:\n  {}\n", args.join(" ")));
    }
    Ok(s)
}

fn load_config(
    o: &Opts,
    plugins: &[&'static dyn sluice_vnet::plugin::Plugin],
) -> Result<config::StartupConfig, String> {
    if let Some(path) = &o.config {
        let text = sluice_infra::files::read_regular(path, config::MAX_CONFIG_BYTES)
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&text);
        return config::parse(&text, &path.display().to_string(), plugins)
            .map_err(|e| e.to_string());
    }
    if !o.inline.is_empty() {
        let cf = sluice_cli::conf::parse_argv(&o.inline).map_err(|e| e.to_string())?;
        return config::from_conf(&cf, "<command line>", plugins).map_err(|e| e.to_string());
    }
    Ok(config::StartupConfig::default())
}

/// A warning when the polling threads (main and workers) outnumber the CPUs this process may
/// run on and `poll-yield` is off: each thread keeps its CPU for its idle spin, so a thread
/// woken by a handoff waits for one (measured with the host stack and `workers 2` on 2 vCPUs:
/// 4–6 ms a wake-up, connection rates 7–13× lower than with `poll-yield`, docs/hoststack.md).
fn oversubscribed(threads: usize, poll_yield: bool) -> Option<String> {
    let cpus = std::thread::available_parallelism().ok()?.get();
    (threads > cpus && !poll_yield).then(|| {
        format!(
            "cpu: {threads} polling threads (main and {} workers) on {cpus} CPUs: threads \
             will wait for a CPU; set `unix {{ poll-yield }}` or fewer workers",
            threads - 1
        )
    })
}

fn main() -> ExitCode {
    let o = Opts::parse();
    let plugins = sluice_plugins::all();
    let mut cfg = match load_config(&o, &plugins) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sluice: {e}");
            return ExitCode::from(1);
        }
    };
    if o.check {
        for w in &cfg.warnings {
            eprintln!("sluice: warning: {w}");
        }
        println!("configuration OK");
        return ExitCode::SUCCESS;
    }
    if o.demo && cfg.cpu.workers.is_empty() {
        cfg.cpu.workers = vec![None; o.demo_workers];
    }
    let foreground = cfg.unix.nodaemon || o.demo;
    // Before forking: what can fail here is reported on the terminal.
    let pre = (|| -> Result<Option<(PathBuf, std::fs::File)>, String> {
        // As VPP: on the main thread, before the workers start (they inherit it).
        if let Some(s) = &cfg.sched {
            s.apply()?;
        }
        if let Some((g, name)) = &cfg.unix.gid {
            daemon::set_group(*g, name)?;
        }
        if let Some(c) = cfg.unix.coredump_size {
            daemon::set_core_limit(c)?;
        }
        cfg.unix
            .log
            .as_ref()
            .map(|p| daemon::open_log(p).map(|f| (p.clone(), f)))
            .transpose()
    })();
    let log_file = match pre {
        Ok(f) => f,
        Err(e) => {
            eprintln!("sluice: {e}");
            return ExitCode::from(1);
        }
    };
    let mut ready = if foreground {
        daemon::Readiness::foreground()
    } else {
        match daemon::daemonize() {
            Ok(r) => r,
            Err(e) => {
                eprintln!("sluice: {e}");
                return ExitCode::from(1);
            }
        }
    };
    let logger = Arc::new(daemon::Logger::new(
        foreground,
        !foreground && !cfg.unix.nosyslog,
        log_file,
    ));
    let _ = log::set_logger(Box::leak(Box::new(LogRef(logger.clone()))));
    logger.ring().configure(&cfg.logging);
    for w in &cfg.warnings {
        log::warn!("{w}");
    }
    if let Some(w) = oversubscribed(cfg.cpu.workers.len() + 1, cfg.unix.poll_yield) {
        log::warn!("{w}");
    }
    install_signals();
    match run(&o, &mut cfg, &plugins, &mut ready, &logger) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e}");
            if ready.daemonised() {
                ready.fail(&e);
            } else if cfg.unix.log.is_some() {
                // The logger wrote it to the file and stderr already.
            }
            ExitCode::from(1)
        }
    }
}

/// Shares the logger between `log` and the SIGHUP handler in the main loop.
struct LogRef(Arc<daemon::Logger>);

impl log::Log for LogRef {
    fn enabled(&self, m: &log::Metadata) -> bool {
        self.0.enabled(m)
    }
    fn log(&self, r: &log::Record) {
        self.0.log(r)
    }
    fn flush(&self) {}
}

/// Starts the runtime and serves until stopped.
fn run(
    o: &Opts,
    cfg: &mut config::StartupConfig,
    plugins: &[&'static dyn sluice_vnet::plugin::Plugin],
    ready: &mut daemon::Readiness,
    logger: &daemon::Logger,
) -> Result<(), String> {
    let _pidfile = cfg
        .unix
        .pidfile
        .as_ref()
        .map(|p| daemon::Pidfile::write(p))
        .transpose()?;
    let perms = SocketPerms {
        mode: 0o660,
        group: cfg.unix.gid.as_ref().map(|g| g.0),
    };
    // The runtime directory holds the default sockets (CLI, API, stats), as VPP's.
    let rdir = cfg.unix.runtime_dir();
    unix_socket::ensure_dir(&rdir, &rdir, &perms).map_err(|e| format!("runtime-dir: {e}"))?;

    let entries = cfg.plugins.entries(plugins);
    let staged = std::mem::take(&mut cfg.staged);
    let (mut vm, mut tree, api_reg) =
        sluice_vnet::plugin::assemble(&entries, &cfg.cpu, &cfg.buffers, staged)
            .map(|a| (a.vm, a.cli, a.api))
            .map_err(|e| e.to_string())?;
    vm.set_poll_yield(cfg.unix.poll_yield);
    add_daemon_commands(&mut tree);
    let tree = Arc::new(tree);
    vm.ext_mut::<Daemon>().tree = Some(tree.clone());
    *vm.ext_mut::<logging::Handle>() = logging::Handle(Some(logger.ring()));
    *vm.ext_mut::<sluice_cli::Interrupt>() = sluice_cli::Interrupt::new(&STOP);
    if let Some(d) = &cfg.unix.capture_dir {
        let od = sluice_infra::files::OutputDir::new(d)
            .ok_or_else(|| format!("capture-dir {}: not an absolute path", d.display()))?;
        *vm.ext_mut::<sluice_graph::pcap::CaptureDir>() = sluice_graph::pcap::CaptureDir(od);
    }

    let prompt = cfg
        .unix
        .cli_prompt
        .clone()
        .unwrap_or_else(|| "sluice# ".into());
    let ep = cfg.unix.cli_endpoint();
    let eps = match &ep {
        config::CliListen::Unix(p) => vec![server::Endpoint::Unix(p, perms)],
        config::CliListen::Tcp(a) => {
            if !a.ip().is_loopback() {
                log::warn!(
                    "cli-listen {a}: the CLI is reachable from the network, with no authentication"
                );
            }
            vec![server::Endpoint::Tcp(*a)]
        }
    };
    let mut srv = server::CliServer::bind(&eps, cfg.unix.cli_limits, &prompt)
        .map_err(|e| format!("cannot listen: {e}"))?;
    let api_sock = cfg
        .api_socket
        .clone()
        .map(|p| if p.is_relative() { rdir.join(p) } else { p })
        .unwrap_or_else(|| {
            let cli = match &ep {
                config::CliListen::Unix(p) => Some(p.as_path()),
                config::CliListen::Tcp(_) => None,
            };
            default_api_socket(cli, &rdir)
        });
    let mut api = sluice_api::ApiServer::bind(&api_sock, &perms, api_reg)
        .map_err(|e| format!("cannot listen: {e}"))?;
    vm.ext_mut::<Daemon>().api = Some((api_sock.clone(), api.registry().modules().to_vec()));
    log::info!(
        "{} thread(s), CLI on {}{}, API on {}",
        vm.n_threads(),
        srv.describe(),
        match &ep {
            config::CliListen::Unix(p) => format!(" (sluicectl -s {})", p.display()),
            config::CliListen::Tcp(_) => String::new(),
        },
        api_sock.display()
    );

    // The statistics segment (beside the CLI socket unless `statseg { socket-name }`) and the
    // Prometheus endpoint reading it from a thread of its own.
    let stats_sock = cfg.statseg.socket.clone().unwrap_or_else(|| match &ep {
        config::CliListen::Unix(p) => sluice_stats::stats_socket_beside(p),
        config::CliListen::Tcp(_) => rdir.join("stats.sock"),
    });
    sluice_stats::collector::StatsSegment::start(
        &mut vm,
        &cfg.statseg,
        &stats_sock,
        &perms,
        cfg.statseg.socket.is_some(),
    )
    .map_err(|e| e.to_string())?;
    if let Some(p) = vm
        .ext::<sluice_stats::collector::StatsExt>()
        .and_then(|e| e.0.as_ref())
        .and_then(|s| s.socket())
    {
        log::info!("statistics segment on {}", p.display());
    }
    let _metrics = match cfg.metrics.listen {
        Some(addr) => {
            let m = sluice_stats::collector::start_metrics(&mut vm, addr, &cfg.metrics.prefix)
                .map_err(|e| e.to_string())?;
            log::info!("metrics on http://{}/metrics", m.local_addr());
            Some(m)
        }
        None => None,
    };

    if let Some((file, _)) = &cfg.unix.exec {
        // As VPP: a failing line is logged with file:line and the script goes on, unless
        // `exec-strict`.
        let run = scripting::run_script(&mut vm, &tree, file, cfg.unix.exec_strict)?;
        for f in &run.failed {
            log::warn!("{f}");
        }
    }

    let mut demo = if o.demo {
        Some(demo::Demo::start(&mut vm, &tree, o.seconds).map_err(|e| format!("demo: {e}"))?)
    } else {
        None
    };
    let console = cfg
        .unix
        .interactive
        .then(|| demo::Console::start(prompt.clone()));
    ready.ok();

    let clock = vm.shared.clock;
    // Check the CLI socket every 1 ms when busy.
    let poll_every = (clock.hz() / 1000.0) as u64;
    // Collect the main thread's epoll events every 50 µs when busy and a node asked for it
    // (`Cx::want_prompt_irqs`: the host stack while an application is attached): a busy
    // loop would otherwise see a host-stack control request (connect, listen) only at the
    // next CLI check.
    let collect_every = (clock.hz() / 20_000.0) as u64;
    let mut last_poll = 0u64;
    let mut last_collect = 0u64;
    let mut api_fds = Vec::new();
    let idle_sleep_ms = cfg
        .unix
        .poll_sleep_usec
        .map(|u| (u / 1000).clamp(1, 1000) as i32)
        .unwrap_or(100);
    while !STOP.load(Ordering::Relaxed) {
        if HUP.swap(false, Ordering::Relaxed) {
            match logger.reopen() {
                Some(m) => log::info!("{m}"),
                None => log::info!("SIGHUP: no log file to reopen; ignored"),
            }
        }
        let n = vm.run_main_once();
        let busy = n > 0 || vm.main_wants_poll() || demo.as_ref().is_some_and(|d| d.running());
        let now = clock.now_tsc();
        if busy && now.wrapping_sub(last_poll) < poll_every {
            if vm.main.wants_prompt_irqs() && now.wrapping_sub(last_collect) >= collect_every {
                last_collect = now;
                vm.main.wait(Some(0.0));
            }
            // `poll-yield`: a round without packets lets a process sharing this CPU run.
            if n == 0 && cfg.unix.poll_yield {
                std::thread::yield_now();
            }
            continue;
        }
        last_poll = now;
        // Copy the counters into the statistics segment when due (main thread only).
        let stats_in = sluice_stats::collector::tick(&mut vm);
        // Idle: sleep in poll(2) on the CLI sockets and the main thread's epoll fd (fds of
        // interrupt-mode rx queues, wake-ups from workers) until the next timer or poll tick.
        let mut timeout = if busy {
            0
        } else {
            match vm.main.sleep_timeout() {
                None => idle_sleep_ms,
                t => sluice_graph::wake::timeout_ms(t).clamp(0, idle_sleep_ms),
            }
        };
        if let Some(s) = stats_in.filter(|_| timeout > 0) {
            timeout = timeout.min(((s * 1000.0).ceil() as i32).max(1));
        }
        if timeout > 0 && !vm.main.prepare_sleep() {
            timeout = 0;
        }
        api_fds.clear();
        api.pollfds(&mut api_fds);
        let reqs = srv.poll(timeout, vm.main.irq_fd(), &mut api_fds);
        vm.main.wait(Some(0.0));
        for req in reqs {
            // A long reply may be streamed: the command leaves a producer of the rest.
            let r = sluice_graph::reply::with_allowed(&mut vm, true, |vm| {
                scripting::run_line(vm, &tree, &req.cmd)
            });
            let producer = sluice_graph::reply::take_producer(&mut vm);
            let d = vm.ext_mut::<Daemon>();
            let quit = std::mem::take(&mut d.quit);
            match (r, producer) {
                (Ok(s), Some(p)) => srv.reply_stream(req.client, &s, p),
                (Ok(s), None) => srv.reply(req.client, true, &s),
                (Err(e), _) => srv.reply(req.client, false, &e.to_string()),
            }
            if quit {
                srv.close(req.client);
            }
        }
        srv.pump(&mut vm);
        // The API listener (first of `api_fds`) is accepted from only when poll found it
        // readable: no failing accept4 per loop pass.
        api.service(&mut vm, api_fds.first().is_some_and(|p| p.revents != 0));
        if let Some(c) = &console {
            if c.serve(&mut vm, &tree) {
                break;
            }
        }
        if let Some(d) = demo.as_mut() {
            if d.tick(&mut vm, &tree) {
                break;
            }
        }
    }
    vm.stop_workers();
    let s = vm.pool.stats();
    if s.in_use != 0 {
        log::warn!("{} buffers still in use at exit", s.in_use);
    }
    log::info!("stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::oversubscribed;

    #[test]
    fn more_polling_threads_than_cpus_warn_unless_poll_yield() {
        let cpus = std::thread::available_parallelism().unwrap().get();
        assert_eq!(oversubscribed(cpus, false), None);
        let w = oversubscribed(cpus + 1, false).expect("one thread too many");
        assert!(
            w.contains("poll-yield") && w.contains(&format!("on {cpus} CPUs")),
            "{w}"
        );
        assert_eq!(oversubscribed(cpus + 1, true), None);
    }
}
