//! `sluice`: the Sluice vector packet processing daemon.
//!
//! `sluice [-c startup.conf] [--check] [--demo [--seconds N]] [inline config ...]` parses the
//! startup configuration, builds the graph, starts the worker threads and serves the CLI on a
//! Unix socket (`sluicectl` connects there) from the main thread's dispatcher loop.

mod config;
mod demo;
mod server;

use clap::Parser;
use sluice_cli::{script, Args, CliError, CommandTree};
use sluice_graph::Vlib;
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

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn install_signals() {
    // SAFETY: the handler only stores to an atomic (async-signal-safe).
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

struct Logger;
impl log::Log for Logger {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::Level::Info
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            eprintln!(
                "sluice: {}: {}",
                r.level().as_str().to_lowercase(),
                r.args()
            );
        }
    }
    fn flush(&self) {}
}
static LOGGER: Logger = Logger;

/// Daemon-level state reachable from CLI handlers.
#[derive(Default)]
pub struct Daemon {
    tree: Option<Arc<CommandTree<Vlib>>>,
    quit: bool,
    exec_depth: usize,
}

fn default_socket() -> PathBuf {
    sluice_cli::proto::default_cli_socket()
}

/// Adds the daemon's own commands to the tree the core and the plugins registered.
fn add_daemon_commands(t: &mut CommandTree<Vlib>) {
    t.add("exec", "exec <file> — run a CLI script", cli_exec);
    t.add("quit", "quit — close this CLI session", cli_quit);
    t.add("help", "help [<command prefix>] — list commands", cli_help);
    t.add(
        "show version",
        "show version [verbose] — Sluice version",
        cli_version,
    );
}

fn cli_exec(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let file = a.word("file name")?;
    a.finish()?;
    let d = vm.ext_mut::<Daemon>();
    if d.exec_depth >= 8 {
        return Err(CliError::new("exec nested too deeply"));
    }
    let Some(tree) = d.tree.clone() else {
        return Err(CliError::new("exec unavailable"));
    };
    d.exec_depth += 1;
    let r = run_script(vm, &tree, Path::new(&file));
    vm.ext_mut::<Daemon>().exec_depth -= 1;
    r.map_err(CliError::new)
}

/// Runs a CLI script; the first failing command stops it with `file:line: error`.
pub fn run_script(vm: &mut Vlib, tree: &CommandTree<Vlib>, file: &Path) -> Result<String, String> {
    let text = std::fs::read(file).map_err(|e| format!("cannot read `{}': {e}", file.display()))?;
    let text = String::from_utf8_lossy(&text);
    let cmds = script::split_script(&text)
        .map_err(|e| format!("{}:{}: {}", file.display(), e.line, e.msg))?;
    let mut out = String::new();
    for (line, cmd) in cmds {
        match tree.execute(vm, &cmd) {
            Ok(s) => out.push_str(&s),
            Err(e) => return Err(format!("{}:{}: {}", file.display(), line, e)),
        }
    }
    Ok(out)
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
    let verbose = a.keyword("verbose");
    a.finish()?;
    let mut s = format!(
        "sluice v{} (Rust vector packet processing)\n",
        env!("CARGO_PKG_VERSION")
    );
    if verbose {
        s.push_str(&format!(
            "threads: {}, buffers: {} x {} B ({:?}), TSC {:.3} GHz\n",
            vm.n_threads(),
            vm.pool.len(),
            vm.pool.data_size(),
            vm.pool.backing(),
            vm.shared.clock.hz() / 1e9
        ));
    }
    Ok(s)
}

fn load_config(
    o: &Opts,
    plugins: &[&'static dyn sluice_vnet::plugin::Plugin],
) -> Result<config::StartupConfig, String> {
    if let Some(path) = &o.config {
        let text = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
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
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(log::LevelFilter::Info);
    for w in &cfg.warnings {
        log::warn!("{w}");
    }
    if o.demo && cfg.cpu.workers.is_empty() {
        cfg.cpu.workers = vec![None; o.demo_workers];
    }
    install_signals();

    let entries = cfg.plugins.entries(&plugins);
    let staged = std::mem::take(&mut cfg.staged);
    let (mut vm, mut tree) =
        match sluice_vnet::plugin::assemble(&entries, &cfg.cpu, &cfg.buffers, staged) {
            Ok(a) => (a.vm, a.cli),
            Err(e) => {
                eprintln!("sluice: {e}");
                return ExitCode::from(1);
            }
        };
    add_daemon_commands(&mut tree);
    let tree = Arc::new(tree);
    vm.ext_mut::<Daemon>().tree = Some(tree.clone());

    let sock = cfg.unix.cli_listen.clone().unwrap_or_else(default_socket);
    let mut srv = match server::CliServer::bind(&sock) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sluice: cannot listen on {}: {e}", sock.display());
            return ExitCode::from(1);
        }
    };
    log::info!(
        "{} thread(s), CLI on {} (sluicectl -s {})",
        vm.n_threads(),
        srv.path().display(),
        srv.path().display()
    );

    if let Some(file) = &cfg.unix.exec {
        if let Err(e) = run_script(&mut vm, &tree, file) {
            eprintln!("sluice: {e}");
            return ExitCode::from(1);
        }
    }

    let mut demo = if o.demo {
        match demo::Demo::start(&mut vm, &tree, o.seconds) {
            Ok(d) => Some(d),
            Err(e) => {
                eprintln!("sluice: demo: {e}");
                return ExitCode::from(1);
            }
        }
    } else {
        None
    };
    let console = cfg.unix.interactive.then(|| {
        demo::Console::start(
            cfg.unix
                .cli_prompt
                .clone()
                .unwrap_or_else(|| "sluice# ".into()),
        )
    });

    let clock = vm.shared.clock;
    let poll_every = (clock.hz() / 1000.0) as u64; // check the CLI socket every 1 ms when busy
    let mut last_poll = 0u64;
    let idle_sleep_ms = cfg
        .unix
        .poll_sleep_usec
        .map(|u| (u / 1000).max(1) as i32)
        .unwrap_or(100);
    while !STOP.load(Ordering::Relaxed) {
        let n = vm.run_main_once();
        let busy = n > 0 || vm.main_wants_poll() || demo.as_ref().is_some_and(|d| d.running());
        let now = clock.now_tsc();
        if busy && now.wrapping_sub(last_poll) < poll_every {
            continue;
        }
        last_poll = now;
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
        if timeout > 0 && !vm.main.prepare_sleep() {
            timeout = 0;
        }
        let reqs = srv.poll(timeout, vm.main.irq_fd());
        vm.main.wait(Some(0.0));
        for req in reqs {
            let r = tree.execute(&mut vm, &req.cmd);
            let d = vm.ext_mut::<Daemon>();
            let quit = std::mem::take(&mut d.quit);
            match r {
                Ok(s) => srv.reply(req.client, true, &s),
                Err(e) => srv.reply(req.client, false, &e.to_string()),
            }
            if quit {
                srv.close(req.client);
            }
        }
        srv.reap();
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
    ExitCode::SUCCESS
}
