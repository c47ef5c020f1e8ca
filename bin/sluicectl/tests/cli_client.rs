//! The `sluicectl` binary against a small fake daemon speaking the CLI socket protocol.
//!
//! The fake answers `echo: <cmd>` (ok) to every command, an error to `fail`, a reply without
//! text to `quiet`, and for `die` starts a reply and hangs up in the middle of it.

use sluice_cli::proto;
use std::io::Write;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_sluicectl");

/// A per-test temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let d = std::env::temp_dir().join(format!("sluicectl-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
    fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn serve(mut s: UnixStream) {
    while let Ok(Some(cmd)) = proto::read_request(&mut s) {
        let sent = match cmd.as_str() {
            "fail" => proto::write_response(&mut s, false, "unknown input `fail'"),
            "quiet" => proto::write_response(&mut s, true, ""),
            "die" => {
                // Announce 100 bytes, send 4, hang up.
                let _ = s.write_all(&100u32.to_le_bytes());
                let _ = s.write_all(b"\0abc");
                return;
            }
            _ => proto::write_response(&mut s, true, &format!("echo: {cmd}")),
        };
        if sent.is_err() {
            return;
        }
    }
}

/// Starts the fake daemon on `sock`; it lives until the test process exits.
fn fake_daemon(sock: &Path) {
    let l = UnixListener::bind(sock).unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || serve(s));
        }
    });
}

fn run(sock: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("-s")
        .arg(sock)
        .args(args)
        .env_remove("SLUICE_CLI_SOCKET")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn run_with_stdin(sock: &Path, input: &str) -> Output {
    let mut c = Command::new(BIN)
        .arg("-s")
        .arg(sock)
        .env_remove("SLUICE_CLI_SOCKET")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    c.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn one_shot_command_prints_reply_with_final_newline() {
    let dir = TempDir::new("oneshot");
    let sock = dir.path("cli.sock");
    fake_daemon(&sock);

    let o = run(&sock, &["show", "runtime"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(text(&o.stdout), "echo: show runtime\n");
    assert_eq!(text(&o.stderr), "");

    // Words that look like options after the command belong to the command.
    let o = run(&sock, &["trace", "add", "-x"]);
    assert_eq!(text(&o.stdout), "echo: trace add -x\n");

    let o = run(&sock, &["quiet"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(text(&o.stdout), "");
}

#[test]
fn one_shot_error_goes_to_stderr_with_exit_1() {
    let dir = TempDir::new("fail");
    let sock = dir.path("cli.sock");
    fake_daemon(&sock);

    let o = run(&sock, &["fail"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(text(&o.stdout), "");
    assert_eq!(text(&o.stderr), "unknown input `fail'\n");
}

#[test]
fn env_var_names_the_socket_and_flag_overrides_it() {
    let dir = TempDir::new("env");
    let sock = dir.path("cli.sock");
    fake_daemon(&sock);

    let o = Command::new(BIN)
        .args(["show", "version"])
        .env("SLUICE_CLI_SOCKET", &sock)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "echo: show version\n");

    let o = Command::new(BIN)
        .arg("-s")
        .arg(&sock)
        .args(["show", "version"])
        .env("SLUICE_CLI_SOCKET", dir.path("nowhere.sock"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
}

#[test]
fn missing_socket_is_one_clear_line_and_exit_2() {
    let dir = TempDir::new("missing");
    let sock = dir.path("missing.sock");
    let o = run(&sock, &["show", "int"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(text(&o.stdout), "");
    assert_eq!(
        text(&o.stderr),
        format!(
            "sluicectl: cannot connect to {}: no such socket (is sluice running? start it with \
             `sluice`, or pass -s <socket>)\n",
            sock.display()
        )
    );
}

#[test]
fn stale_socket_is_connection_refused_and_exit_2() {
    let dir = TempDir::new("stale");
    let sock = dir.path("cli.sock");
    drop(UnixListener::bind(&sock).unwrap()); // the file stays, nobody listens
    let o = run(&sock, &["show", "int"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        text(&o.stderr),
        format!(
            "sluicectl: cannot connect to {}: connection refused (stale socket?)\n",
            sock.display()
        )
    );
}

#[test]
fn daemon_hanging_up_mid_reply_is_reported_with_exit_2() {
    let dir = TempDir::new("die");
    let sock = dir.path("cli.sock");
    fake_daemon(&sock);
    let o = run(&sock, &["die"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(text(&o.stderr), "sluicectl: connection closed by sluice\n");
}

#[test]
fn piped_stdin_runs_each_command_and_joins_brace_blocks() {
    let dir = TempDir::new("stdin");
    let sock = dir.path("cli.sock");
    fake_daemon(&sock);

    let o = run_with_stdin(
        &sock,
        "show version\n\n# a comment\npacket-generator new {\n  name x\n  limit 5\n}\nshow pg\n",
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stdout),
        "echo: show version\necho: packet-generator new {\n  name x\n  limit 5\n}\necho: show pg\n"
    );
    assert_eq!(text(&o.stderr), "");
}

#[test]
fn piped_stdin_keeps_going_after_an_error_and_exits_1() {
    let dir = TempDir::new("stdin-fail");
    let sock = dir.path("cli.sock");
    fake_daemon(&sock);

    let o = run_with_stdin(&sock, "show a\nfail\nshow b");
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(text(&o.stdout), "echo: show a\necho: show b\n");
    assert_eq!(text(&o.stderr), "unknown input `fail'\n");

    // `quit` stops reading; an unclosed block at end of input is not sent and fails.
    let o = run_with_stdin(&sock, "show a\nquit\nshow b\n");
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(text(&o.stdout), "echo: show a\n");
    let o = run_with_stdin(&sock, "show a\nset x {\n  y\n");
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(text(&o.stdout), "echo: show a\n");
    assert!(
        text(&o.stderr).contains("unclosed `{` block"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn refuses_a_path_that_is_not_a_socket() {
    let dir = TempDir::new("notsock");
    let f = dir.path("cli.sock");
    std::fs::write(&f, "not a socket").unwrap();
    let o = run(&f, &["show", "version"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        text(&o.stderr),
        format!(
            "sluicectl: refusing {}: it exists and is not a socket (not removing it)\n",
            f.display()
        )
    );
    // A symlink to a real socket is refused too: the path itself must be the socket.
    let real = dir.path("real.sock");
    fake_daemon(&real);
    let link = dir.path("link.sock");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let o = run(&link, &["show", "version"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
}

#[test]
fn refuses_a_socket_in_a_world_writable_directory() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("worldw");
    let sock = dir.path("cli.sock");
    fake_daemon(&sock);
    assert_eq!(run(&sock, &["x"]).status.code(), Some(0));
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let o = run(&sock, &["x"]);
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert!(err.contains("is writable by others (mode 1777)"), "{err}");
    assert!(o.stdout.is_empty(), "nothing was sent");
}

#[test]
fn vppctl_is_the_same_client_under_vpps_name() {
    let dir = TempDir::new("vppctl");
    let sock = dir.path("cli.sock");
    fake_daemon(&sock);
    let o = Command::new(env!("CARGO_BIN_EXE_vppctl"))
        .arg("-s")
        .arg(&sock)
        .args(["show", "version"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "echo: show version\n");
    let o = Command::new(env!("CARGO_BIN_EXE_vppctl"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(text(&o.stdout).contains("vppctl"), "{}", text(&o.stdout));
}
