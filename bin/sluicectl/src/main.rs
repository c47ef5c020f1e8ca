//! `sluicectl`: the CLI client of the `sluice` daemon (like VPP's vppctl).
//!
//! `sluicectl [-s <socket>] <command...>` runs one command and prints its output (exit 1 on a
//! command error, 2 when the daemon cannot be reached). Without a command: an interactive
//! prompt with history and line editing, or, when stdin is not a terminal, one command per line
//! from stdin. `{ ... }` blocks may span lines.

use clap::Parser;
use sluice_cli::proto;
use std::io::{BufRead, IsTerminal};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(name = "sluicectl", version, about = "Sluice CLI client")]
struct Opts {
    /// CLI socket (default: $SLUICE_CLI_SOCKET, else the daemon's default).
    #[arg(short = 's', long = "socket")]
    socket: Option<PathBuf>,
    /// Command to run.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
}

fn connect(p: &Path) -> Result<UnixStream, String> {
    UnixStream::connect(p).map_err(|e| {
        let why = match e.kind() {
            std::io::ErrorKind::NotFound => {
                "no such socket (is sluice running? start it with `sluice`, or pass -s <socket>)"
                    .to_string()
            }
            std::io::ErrorKind::ConnectionRefused => {
                "connection refused (stale socket?)".to_string()
            }
            std::io::ErrorKind::PermissionDenied => "permission denied (try as root)".to_string(),
            _ => e.to_string(),
        };
        format!("sluicectl: cannot connect to {}: {why}", p.display())
    })
}

/// Sends one command; Ok((ok, text)) or a connection error.
fn run(s: &mut UnixStream, cmd: &str) -> Result<(bool, String), String> {
    proto::write_request(s, cmd)
        .map_err(|_| "sluicectl: connection closed by sluice".to_string())?;
    proto::read_response(s).map_err(|_| "sluicectl: connection closed by sluice".to_string())
}

fn print_out(text: &str, ok: bool) {
    if text.is_empty() {
        return;
    }
    let t = if text.ends_with('\n') {
        text.to_string()
    } else {
        format!("{text}\n")
    };
    if ok {
        print!("{t}");
    } else {
        eprint!("{t}");
    }
}

/// Adds a line to a command being typed; returns the whole command once its braces balance.
fn accumulate(pending: &mut String, line: &str) -> Option<String> {
    if !pending.is_empty() {
        pending.push('\n');
    }
    pending.push_str(line);
    if pending.matches('{').count() > pending.matches('}').count() {
        return None;
    }
    Some(std::mem::take(pending))
}

fn main() -> ExitCode {
    let o = Opts::parse();
    let sock = o
        .socket
        .or_else(|| std::env::var_os("SLUICE_CLI_SOCKET").map(PathBuf::from))
        .unwrap_or_else(proto::default_cli_socket);
    let mut s = match connect(&sock) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if !o.command.is_empty() {
        return match run(&mut s, &o.command.join(" ")) {
            Ok((ok, text)) => {
                print_out(&text, ok);
                if ok {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(1)
                }
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(2)
            }
        };
    }
    if !std::io::stdin().is_terminal() {
        let mut failed = false;
        let mut pending = String::new();
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            let Some(cmd) = accumulate(&mut pending, &line) else {
                continue;
            };
            if cmd.trim().is_empty() {
                continue;
            }
            match run(&mut s, &cmd) {
                Ok((ok, text)) => {
                    failed |= !ok;
                    print_out(&text, ok);
                }
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(2);
                }
            }
        }
        return if failed {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        };
    }
    interactive(&mut s)
}

fn interactive(s: &mut UnixStream) -> ExitCode {
    let mut rl = match rustyline::DefaultEditor::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("sluicectl: cannot start line editor: {e}");
            return ExitCode::from(2);
        }
    };
    let hist = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".sluicectl_history"));
    if let Some(h) = &hist {
        let _ = rl.load_history(h);
    }
    let mut pending = String::new();
    loop {
        let prompt = if pending.is_empty() {
            "sluice# "
        } else {
            "... "
        };
        match rl.readline(prompt) {
            Ok(line) => {
                let Some(cmd) = accumulate(&mut pending, &line) else {
                    continue;
                };
                let t = cmd.trim();
                if t.is_empty() {
                    continue;
                }
                let _ = rl.add_history_entry(t);
                if t == "quit" || t == "exit" {
                    break;
                }
                match run(s, &cmd) {
                    Ok((ok, text)) => print_out(&text, ok),
                    Err(e) => {
                        eprintln!("{e}");
                        return ExitCode::from(2);
                    }
                }
            }
            Err(_) => break,
        }
    }
    if let Some(h) = &hist {
        let _ = rl.save_history(h);
    }
    ExitCode::SUCCESS
}
