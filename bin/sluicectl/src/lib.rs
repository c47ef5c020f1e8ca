//! `sluicectl`: the command-line client of the `sluice` daemon (like VPP's `vppctl`).
//!
//! ```text
//! sluicectl [-s|--socket <path>] [command words...]
//! ```
//!
//! - With command words: they are joined with spaces and sent as one command; its output goes
//!   to stdout (exit 0), or to stderr when the daemon reports an error (exit 1).
//! - Without: an interactive prompt (`sluice# `) with line editing and history in
//!   `~/.sluicectl_history`; `quit`, `exit` or Ctrl-D leave, Ctrl-C drops the line being typed.
//!   When stdin is not a terminal, commands are read from it one per line instead, and the exit
//!   status is 1 if any of them failed.
//! - In both line modes a command whose `{` outnumber its `}` continues on the next lines
//!   (prompt `... `) and is sent as one command with embedded newlines. Blank lines and lines
//!   starting with `#` (outside a block) are skipped.
//!
//! - `stats ls|dump|poll [<pattern>...]` reads the daemon's statistics segment instead (shared
//!   memory, no CLI round trip; see [`stats`]).
//!
//! The socket is `-s`, else `$SLUICE_CLI_SOCKET`, else the daemon's default
//! ([`proto::default_cli_socket`]). When the daemon cannot be reached, or drops the connection,
//! one line says why and the exit status is 2.
//!
//! Before connecting, the socket is checked as the daemon checks it when binding
//! ([`sluice_infra::unix_socket::check_before_connect`]): a socket (not a symlink, not a
//! file) owned by the caller or root, in a directory owned by the caller or root that others
//! cannot write. A socket someone else could have planted is refused with one line saying
//! why, so a local user cannot sit in the middle of the commands.
//!
//! The same program is installed as `vppctl` (VPP's client name, `-s <socket>` as VPP's):
//! its default socket is VPP's `/run/vpp/cli.sock` when that exists (a daemon configured with
//! `unix { cli-listen /run/vpp/cli.sock }`), else Sluice's default.

pub mod stats;

use sluice_cli::proto;
use std::ffi::OsString;
use std::io::{self, BufRead, IsTerminal, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Exit status for a command the daemon reported as failed.
const EXIT_CMD_FAILED: u8 = 1;
/// Exit status when the daemon cannot be reached or the connection breaks.
const EXIT_NO_DAEMON: u8 = 2;

#[derive(clap::Parser, Debug)]
#[command(
    name = "sluicectl",
    version,
    about = "CLI client of the sluice dataplane daemon"
)]
struct Opts {
    /// CLI socket of the daemon [default: $SLUICE_CLI_SOCKET, else /run/sluice/cli.sock as
    /// root, else $XDG_RUNTIME_DIR/sluice/cli.sock or /tmp/sluice-<uid>/cli.sock]
    #[arg(short = 's', long = "socket", value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Command to run (e.g. `show interface`); none starts an interactive prompt.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    command: Vec<String>,
}

/// Which name the client runs under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavour {
    /// `sluicectl`.
    Sluicectl,
    /// `vppctl`: VPP's default socket first.
    Vppctl,
}

/// VPP's default CLI socket, used by `vppctl` when it exists.
pub const VPP_CLI_SOCKET: &str = "/run/vpp/cli.sock";

/// `-s` wins over `$SLUICE_CLI_SOCKET` (ignored when empty), which wins over the default
/// (for `vppctl`: [`VPP_CLI_SOCKET`] when `vpp_exists`, else Sluice's default).
fn resolve_socket(
    flag: Option<PathBuf>,
    env: Option<OsString>,
    flavour: Flavour,
    vpp_exists: bool,
) -> PathBuf {
    flag.or_else(|| env.filter(|v| !v.is_empty()).map(PathBuf::from))
        .unwrap_or_else(|| {
            if flavour == Flavour::Vppctl && vpp_exists {
                PathBuf::from(VPP_CLI_SOCKET)
            } else {
                proto::default_cli_socket()
            }
        })
}

/// The one-line message for a failed connect.
fn connect_error(path: &Path, e: &io::Error) -> String {
    let why = match e.kind() {
        io::ErrorKind::NotFound => {
            "no such socket (is sluice running? start it with `sluice`, or pass -s <socket>)"
                .to_string()
        }
        io::ErrorKind::ConnectionRefused => "connection refused (stale socket?)".to_string(),
        io::ErrorKind::PermissionDenied => {
            "permission denied (run as root or as a member of the socket's group, `unix { gid }')"
                .to_string()
        }
        _ => e.to_string(),
    };
    format!("sluicectl: cannot connect to {}: {why}", path.display())
}

/// The one-line message for an I/O failure on an established connection.
fn session_error(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::UnexpectedEof
        | io::ErrorKind::BrokenPipe
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted => "sluicectl: connection closed by sluice".to_string(),
        _ => format!("sluicectl: bad reply from sluice: {e}"),
    }
}

/// How one command ended.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Ok,
    Failed,
}

/// A connection to the daemon; the connection is lost for good after the first I/O error.
struct Session {
    stream: UnixStream,
}

impl Session {
    fn connect(path: &Path) -> Result<Self, String> {
        use sluice_infra::unix_socket::{check_before_connect, SocketError};
        match check_before_connect(path) {
            Ok(()) => {}
            // Missing or unreadable: connect() below gives the usual message.
            Err(SocketError::Io { .. }) => {}
            Err(e) => return Err(format!("sluicectl: {e}")),
        }
        UnixStream::connect(path)
            .map(|stream| Session { stream })
            .map_err(|e| connect_error(path, &e))
    }

    /// Runs one command and prints its reply. `Err` (with the message) when the connection is
    /// unusable; a command too long to send is reported and counted as failed.
    fn run(&mut self, cmd: &str) -> Result<Outcome, String> {
        if cmd.len() > proto::MAX_FRAME {
            eprintln!(
                "sluicectl: command too long ({} bytes, limit {})",
                cmd.len(),
                proto::MAX_FRAME
            );
            return Ok(Outcome::Failed);
        }
        proto::write_request(&mut self.stream, cmd).map_err(|e| session_error(&e))?;
        // A long reply arrives in pieces: each goes to stdout as it comes (never held whole);
        // an error reply (one piece) goes to stderr. A closed stdout/stderr (e.g. `| head`) is
        // not worth dying over: write errors are ignored.
        let mut last_nl = true;
        let ok = proto::read_response_pieces(&mut self.stream, |p, end| {
            if end == Some(false) {
                let _ = io::stderr()
                    .lock()
                    .write_all(with_final_newline(p).as_bytes());
                return;
            }
            let mut out = io::stdout().lock();
            let _ = out.write_all(p.as_bytes());
            if !p.is_empty() {
                last_nl = p.ends_with('\n');
            }
            if end.is_some() && !last_nl {
                let _ = out.write_all(b"\n");
            }
        })
        .map_err(|e| session_error(&e))?;
        Ok(if ok { Outcome::Ok } else { Outcome::Failed })
    }
}

/// `text` with a newline appended when it is non-empty and lacks one.
fn with_final_newline(text: &str) -> std::borrow::Cow<'_, str> {
    if text.is_empty() || text.ends_with('\n') {
        text.into()
    } else {
        format!("{text}\n").into()
    }
}

/// Joins input lines into commands: a command with more `{` than `}` continues on the next
/// line. Blank lines and `#` comment lines outside a block produce nothing.
#[derive(Default)]
struct Joiner {
    pending: String,
    depth: i64,
}

impl Joiner {
    /// Feeds one line (without its newline); returns a complete command, trimmed.
    fn push(&mut self, line: &str) -> Option<String> {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if !self.in_block() {
            let t = line.trim();
            if t.is_empty() || t.starts_with('#') {
                return None;
            }
        } else {
            self.pending.push('\n');
        }
        self.pending.push_str(line);
        for c in line.chars() {
            match c {
                '{' => self.depth += 1,
                '}' => self.depth -= 1,
                _ => {}
            }
        }
        if self.in_block() {
            return None;
        }
        self.depth = 0;
        let cmd = self.pending.trim().to_string();
        self.pending.clear();
        Some(cmd)
    }

    /// True while an unbalanced `{` awaits more lines.
    fn in_block(&self) -> bool {
        self.depth > 0
    }

    /// Drops a partly typed block.
    fn reset(&mut self) {
        self.pending.clear();
        self.depth = 0;
    }
}

fn is_leave(cmd: &str) -> bool {
    cmd == "quit" || cmd == "exit"
}

/// The flavour the program was started as: `vppctl` if its name says so.
pub fn flavour_of(argv0: Option<OsString>) -> Flavour {
    let name = argv0
        .as_deref()
        .map(Path::new)
        .and_then(Path::file_name)
        .and_then(|n| n.to_str())
        .unwrap_or("");
    if name.starts_with("vppctl") {
        Flavour::Vppctl
    } else {
        Flavour::Sluicectl
    }
}

/// The client's `main`.
pub fn run(flavour: Flavour) -> ExitCode {
    use clap::{CommandFactory, FromArgMatches};
    let name = match flavour {
        Flavour::Sluicectl => "sluicectl",
        Flavour::Vppctl => "vppctl",
    };
    let m = Opts::command().name(name).bin_name(name).get_matches();
    let opts = match Opts::from_arg_matches(&m) {
        Ok(o) => o,
        Err(e) => e.exit(),
    };
    let path = resolve_socket(
        opts.socket,
        std::env::var_os("SLUICE_CLI_SOCKET"),
        flavour,
        Path::new(VPP_CLI_SOCKET).exists(),
    );
    if opts.command.first().map(String::as_str) == Some("stats") {
        let c = match stats::parse(&opts.command[1..]) {
            Ok(c) => c,
            Err(msg) => {
                eprintln!("{msg}");
                return ExitCode::from(EXIT_CMD_FAILED);
            }
        };
        let sock = stats::resolve(
            c.socket.clone(),
            std::env::var_os("SLUICE_STATS_SOCKET"),
            &path,
        );
        return match stats::run(&c, &sock) {
            Ok(()) => ExitCode::SUCCESS,
            Err((msg, code)) => {
                eprintln!("{msg}");
                ExitCode::from(code)
            }
        };
    }
    let mut session = match Session::connect(&path) {
        Ok(s) => s,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(EXIT_NO_DAEMON);
        }
    };
    if !opts.command.is_empty() {
        return match session.run(&opts.command.join(" ")) {
            Ok(Outcome::Ok) => ExitCode::SUCCESS,
            Ok(Outcome::Failed) => ExitCode::from(EXIT_CMD_FAILED),
            Err(msg) => {
                eprintln!("{msg}");
                ExitCode::from(EXIT_NO_DAEMON)
            }
        };
    }
    if io::stdin().is_terminal() {
        interactive(&mut session)
    } else {
        from_stdin(&mut session)
    }
}

/// Runs the commands read from a non-terminal stdin.
fn from_stdin(session: &mut Session) -> ExitCode {
    let mut input = io::stdin().lock();
    let mut joiner = Joiner::default();
    let mut failed = false;
    let mut raw = Vec::new();
    loop {
        raw.clear();
        match input.read_until(b'\n', &mut raw) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                eprintln!("sluicectl: reading stdin: {e}");
                return ExitCode::from(EXIT_CMD_FAILED);
            }
        }
        let line = String::from_utf8_lossy(&raw);
        let Some(cmd) = joiner.push(line.strip_suffix('\n').unwrap_or(&line)) else {
            continue;
        };
        if is_leave(&cmd) {
            break;
        }
        match session.run(&cmd) {
            Ok(Outcome::Ok) => {}
            Ok(Outcome::Failed) => failed = true,
            Err(msg) => {
                eprintln!("{msg}");
                return ExitCode::from(EXIT_NO_DAEMON);
            }
        }
    }
    if joiner.in_block() {
        eprintln!("sluicectl: end of input inside an unclosed `{{` block; not sent");
        failed = true;
    }
    if failed {
        ExitCode::from(EXIT_CMD_FAILED)
    } else {
        ExitCode::SUCCESS
    }
}

/// The interactive prompt.
fn interactive(session: &mut Session) -> ExitCode {
    use rustyline::error::ReadlineError;

    let mut rl = match rustyline::DefaultEditor::new() {
        Ok(rl) => rl,
        Err(e) => {
            eprintln!("sluicectl: cannot start the line editor: {e}");
            return ExitCode::from(EXIT_CMD_FAILED);
        }
    };
    let history = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".sluicectl_history"));
    if let Some(h) = &history {
        // A missing history file is normal on first use.
        let _ = rl.load_history(h);
    }
    let mut joiner = Joiner::default();
    let status = loop {
        let prompt = if joiner.in_block() {
            "... "
        } else {
            "sluice# "
        };
        let line = match rl.readline(prompt) {
            Ok(line) => line,
            Err(ReadlineError::Interrupted) => {
                joiner.reset();
                continue;
            }
            Err(ReadlineError::Eof) => break ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("sluicectl: reading input: {e}");
                break ExitCode::from(EXIT_CMD_FAILED);
            }
        };
        let Some(cmd) = joiner.push(&line) else {
            continue;
        };
        let _ = rl.add_history_entry(cmd.as_str());
        if is_leave(&cmd) {
            break ExitCode::SUCCESS;
        }
        // A failed command was already printed; the prompt carries on.
        if let Err(msg) = session.run(&cmd) {
            eprintln!("{msg}");
            break ExitCode::from(EXIT_NO_DAEMON);
        }
    };
    if let Some(h) = &history {
        if let Err(e) = rl.save_history(h) {
            eprintln!("sluicectl: cannot save history to {}: {e}", h.display());
        }
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(lines: &[&str]) -> Vec<String> {
        let mut j = Joiner::default();
        lines.iter().filter_map(|l| j.push(l)).collect()
    }

    #[test]
    fn single_lines_are_commands_and_blank_or_comment_lines_are_skipped() {
        assert_eq!(
            feed(&["show int", "", "   ", "# note", "  show version  "]),
            ["show int", "show version"]
        );
    }

    #[test]
    fn unbalanced_braces_continue_until_balanced() {
        let mut j = Joiner::default();
        assert_eq!(j.push("packet-generator new {"), None);
        assert!(j.in_block());
        assert_eq!(j.push("  name x"), None);
        assert_eq!(j.push("  data { abc"), None);
        assert_eq!(j.push("  # kept inside a block"), None);
        assert_eq!(j.push("  }"), None);
        assert_eq!(
            j.push("}\r").as_deref(),
            Some("packet-generator new {\n  name x\n  data { abc\n  # kept inside a block\n  }\n}")
        );
        assert!(!j.in_block());
        assert_eq!(j.push("show pg").as_deref(), Some("show pg"));
    }

    #[test]
    fn balanced_or_over_closed_lines_are_sent_at_once() {
        assert_eq!(feed(&["a { b } c", "x }"]), ["a { b } c", "x }"]);
    }

    #[test]
    fn reset_drops_a_partial_block() {
        let mut j = Joiner::default();
        assert_eq!(j.push("a {"), None);
        j.reset();
        assert!(!j.in_block());
        assert_eq!(j.push("show int").as_deref(), Some("show int"));
    }

    #[test]
    fn socket_flag_beats_env_which_beats_default() {
        let s = Flavour::Sluicectl;
        let flag = Some(PathBuf::from("/f.sock"));
        let env = Some(OsString::from("/e.sock"));
        assert_eq!(
            resolve_socket(flag, env.clone(), s, true),
            PathBuf::from("/f.sock")
        );
        assert_eq!(resolve_socket(None, env, s, true), PathBuf::from("/e.sock"));
        let default = proto::default_cli_socket();
        assert_eq!(resolve_socket(None, None, s, true), default);
        assert_eq!(
            resolve_socket(None, Some(OsString::new()), s, true),
            default
        );
    }

    #[test]
    fn vppctl_prefers_vpps_socket_when_it_exists() {
        let v = Flavour::Vppctl;
        assert_eq!(
            resolve_socket(None, None, v, true),
            PathBuf::from(VPP_CLI_SOCKET)
        );
        assert_eq!(
            resolve_socket(None, None, v, false),
            proto::default_cli_socket()
        );
        assert_eq!(
            resolve_socket(Some("/x".into()), None, v, true),
            PathBuf::from("/x")
        );
        assert_eq!(flavour_of(Some("/usr/bin/vppctl".into())), Flavour::Vppctl);
        assert_eq!(flavour_of(Some("sluicectl".into())), Flavour::Sluicectl);
        assert_eq!(flavour_of(None), Flavour::Sluicectl);
    }

    #[test]
    fn connect_errors_say_what_to_do() {
        let p = Path::new("/x/cli.sock");
        let msg = |k| connect_error(p, &io::Error::from(k));
        assert_eq!(
            msg(io::ErrorKind::NotFound),
            "sluicectl: cannot connect to /x/cli.sock: no such socket (is sluice running? \
             start it with `sluice`, or pass -s <socket>)"
        );
        assert_eq!(
            msg(io::ErrorKind::ConnectionRefused),
            "sluicectl: cannot connect to /x/cli.sock: connection refused (stale socket?)"
        );
        assert_eq!(
            msg(io::ErrorKind::PermissionDenied),
            "sluicectl: cannot connect to /x/cli.sock: permission denied (run as root or as a \
             member of the socket's group, `unix { gid }')"
        );
    }

    #[test]
    fn dropped_connections_read_as_closed_by_sluice() {
        for k in [io::ErrorKind::UnexpectedEof, io::ErrorKind::BrokenPipe] {
            assert_eq!(
                session_error(&io::Error::from(k)),
                "sluicectl: connection closed by sluice"
            );
        }
        let e = io::Error::new(io::ErrorKind::InvalidData, "frame too large");
        assert_eq!(
            session_error(&e),
            "sluicectl: bad reply from sluice: frame too large"
        );
    }

    #[test]
    fn output_gets_a_final_newline_only_when_needed() {
        assert_eq!(with_final_newline(""), "");
        assert_eq!(with_final_newline("a"), "a\n");
        assert_eq!(with_final_newline("a\n"), "a\n");
    }

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Opts::command().debug_assert();
        use clap::Parser;
        let o = Opts::try_parse_from(["sluicectl", "-s", "/p", "show", "int", "-x"]).unwrap();
        assert_eq!(o.socket, Some(PathBuf::from("/p")));
        assert_eq!(o.command, ["show", "int", "-x"]);
    }
}
