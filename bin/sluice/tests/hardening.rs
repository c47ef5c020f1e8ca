//! Issue 22 (items 1-4) and issue 21 item 2: the control surface cannot be turned against the
//! host. Sockets and their permissions (with an unprivileged user and group the test creates
//! and removes; skipped with a reason when not root), the CLI server's limits (slow, greedy and
//! too many clients, descriptor exhaustion), files the CLI writes and reads, long commands and
//! signals, daemonising, the pidfile and log, and `--check`.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

/// A CLI client run as the test user (python3, the same framing as `sluicectl`): prints the
/// reply, or the connect error's errno name.
const PY_CLIENT: &str = "import socket,struct,sys\ns=socket.socket(socket.AF_UNIX)\ntry:\n    s.connect(sys.argv[1])\nexcept OSError as e:\n    print('connect:', __import__('errno').errorcode[e.errno]); sys.exit(2)\nc=sys.argv[2].encode()\ns.sendall(struct.pack('<I',len(c))+c)\nn=struct.unpack('<I',s.recv(4,socket.MSG_WAITALL))[0]\nb=s.recv(n,socket.MSG_WAITALL)\nprint(b[1:].decode())\n";

/// One command over a fresh connection.
fn cli_at(sock: &Path, cmd: &str) -> String {
    let mut s = UnixStream::connect(sock).unwrap();
    ask(&mut s, cmd).1
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn wait_for_socket(sock: &Path) {
    wait_until(
        Duration::from_secs(20),
        Duration::from_millis(20),
        || UnixStream::connect(sock).is_ok(),
        || format!("no CLI socket at {}", sock.display()),
    );
}

fn wait_log(log: &Path, needle: &str) -> String {
    let mut last = String::new();
    wait_until(
        Duration::from_secs(20),
        Duration::from_millis(20),
        || {
            last = std::fs::read_to_string(log).unwrap_or_default();
            last.contains(needle)
        },
        || {
            format!(
                "`{needle}' not logged in {}: {}",
                log.display(),
                std::fs::read_to_string(log).unwrap_or_default()
            )
        },
    );
    last
}

/// One request/response on an open connection.
fn ask(s: &mut UnixStream, cmd: &str) -> (bool, String) {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    sluice_cli::proto::write_request(s, cmd).unwrap();
    sluice_cli::proto::read_response(s).unwrap()
}

/// A user and a group created for the test (root only), removed on drop. The user's primary
/// group is `nogroup`; membership in the test group is given per command by `setpriv`.
struct TestUser {
    name: String,
    uid: u32,
    group: String,
    gid: u32,
}

impl TestUser {
    fn create(tag: &str) -> Option<TestUser> {
        if let Some(why) = sluice_infra::testing::not_root("creating a test user") {
            sluice_infra::testing::skip(&why);
            return None;
        }
        if Command::new("useradd").arg("--help").output().is_err() {
            sluice_infra::testing::skip("useradd not installed");
            return None;
        }
        let name = format!("slt{tag}{}", std::process::id() % 100_000);
        let group = format!("{name}g");
        let _ = Command::new("userdel").arg(&name).output();
        let _ = Command::new("groupdel").arg(&group).output();
        let ok = |c: &mut Command| c.status().map(|s| s.success()).unwrap_or(false);
        assert!(ok(Command::new("groupadd").arg(&group)), "groupadd");
        assert!(
            ok(Command::new("useradd").args([
                "-M",
                "-N",
                "-g",
                "nogroup",
                "-s",
                "/usr/sbin/nologin",
                &name
            ])),
            "useradd"
        );
        let id = |flag: &str, who: &str| -> u32 {
            let o = Command::new("id").args([flag, who]).output().unwrap();
            text(&o.stdout).trim().parse().unwrap()
        };
        let uid = id("-u", &name);
        let o = Command::new("getent")
            .args(["group", &group])
            .output()
            .unwrap();
        let gid = text(&o.stdout).split(':').nth(2).unwrap().parse().unwrap();
        Some(TestUser {
            name,
            uid,
            group,
            gid,
        })
    }

    /// A command run as this user, in the test group or not.
    fn cmd(&self, in_group: bool, prog: &str) -> Command {
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={}", self.uid))
            .arg("--regid=nogroup")
            .arg(if in_group {
                format!("--groups={}", self.gid)
            } else {
                "--clear-groups".to_string()
            })
            .arg("--")
            .arg(prog);
        c
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.name).output();
        let _ = Command::new("groupdel").arg(&self.group).output();
    }
}

/// A daemon started from an explicit config, stopped (SIGTERM) on drop.
struct Proc {
    child: std::process::Child,
}

impl Proc {
    fn start(conf: &str, umask: Option<u32>) -> Proc {
        let mut c = Command::new(SLUICE);
        c.args(conf.split_whitespace())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(m) = umask {
            // SAFETY: umask is async-signal-safe and touches no memory.
            unsafe {
                c.pre_exec(move || {
                    libc::umask(m);
                    Ok(())
                });
            }
        }
        Proc {
            child: c.spawn().unwrap(),
        }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our child.
        unsafe { libc::kill(self.pid(), sig) };
    }

    fn wait_exit(&mut self) -> std::process::ExitStatus {
        let t0 = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "sluice did not exit"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn runtime_dir_and_socket_get_explicit_modes_under_umask_000() {
    let d = tmpdir("modes");
    let rdir = d.join("run");
    let mut p = Proc::start(
        &format!("unix {{ nodaemon runtime-dir {} }}", rdir.display()),
        Some(0),
    );
    let sock = rdir.join("cli.sock");
    wait_for_socket(&sock);
    assert_eq!(mode(&rdir), 0o700, "runtime-dir created 0700");
    assert_eq!(mode(&sock), 0o660, "socket 0660 despite umask 000");
    // The API and stats sockets beside it, bound by the same function.
    let others = [rdir.join("api.sock"), rdir.join("stats.sock")];
    for s in &others {
        wait_for_socket(s);
        assert_eq!(mode(s), 0o660, "{} 0660 despite umask 000", s.display());
    }
    assert!(cli_at(&sock, "show version").contains("sluice"));
    p.signal(libc::SIGTERM);
    assert!(p.wait_exit().success());
    assert!(!sock.exists(), "socket removed at exit");
    for s in &others {
        assert!(!s.exists(), "{} removed at exit", s.display());
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn socket_group_decides_who_may_talk_to_the_daemon() {
    let Some(u) = TestUser::create("g") else {
        return;
    };
    let d = tmpdir("gid");
    let rdir = d.join("run");
    let mut p = Proc::start(
        &format!(
            "unix {{ nodaemon runtime-dir {} gid {} }}",
            rdir.display(),
            u.group
        ),
        None,
    );
    let sock = rdir.join("cli.sock");
    wait_for_socket(&sock);
    assert_eq!(mode(&rdir), 0o750);
    assert_eq!(std::fs::metadata(&rdir).unwrap().gid(), u.gid);
    assert_eq!(std::fs::symlink_metadata(&sock).unwrap().gid(), u.gid);
    // In the group: talks to the daemon.
    let o: Output = u
        .cmd(true, "/usr/bin/python3")
        .args(["-c", PY_CLIENT])
        .arg(&sock)
        .arg("show version")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("sluice"), "{}", text(&o.stdout));
    // Not in the group: cannot even reach the socket.
    let o = u
        .cmd(false, "/usr/bin/python3")
        .args(["-c", PY_CLIENT])
        .arg(&sock)
        .arg("show version")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(text(&o.stdout), "connect: EACCES\n");
    p.signal(libc::SIGTERM);
    assert!(p.wait_exit().success());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn directories_and_sockets_of_another_user_are_refused() {
    let Some(u) = TestUser::create("o") else {
        return;
    };
    let d = tmpdir("otheruser");
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    // The other user made the directory first (the /tmp/sluice-<uid> squatting case).
    let theirs = d.join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(u.uid), None).unwrap();
    let o = Command::new(SLUICE)
        .args(["unix", "{", "nodaemon", "cli-listen"])
        .arg(theirs.join("cli.sock"))
        .arg("}")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains(&format!(
            "refusing {}: directory {} is owned by uid {}",
            theirs.join("cli.sock").display(),
            theirs.display(),
            u.uid
        )),
        "{}",
        text(&o.stderr)
    );
    // A socket the other user listens on: clients (sluicectl's check) will not talk to it.
    let sock = theirs.join("fake.sock");
    let mut fake = u
        .cmd(false, "/usr/bin/python3")
        .arg("-c")
        .arg(format!(
            "import socket,time\ns=socket.socket(socket.AF_UNIX)\ns.bind('{}')\ns.listen()\ntime.sleep(30)",
            sock.display()
        ))
        .spawn()
        .unwrap();
    wait_until(
        Duration::from_secs(10),
        Duration::from_millis(20),
        || sock.exists(),
        || "the other user's socket did not appear".into(),
    );
    let e = sluice_infra::unix_socket::check_before_connect(&sock).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "refusing {}: socket is owned by uid {}, not by uid 0 or root",
            sock.display(),
            u.uid
        )
    );
    let _ = fake.kill();
    let _ = fake.wait();
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn fallback_runtime_dir_squatted_by_another_user_is_refused() {
    // A daemon run by an unprivileged user without $XDG_RUNTIME_DIR uses /tmp/sluice-<uid>:
    // when someone else (here `nobody`) made that directory first, it refuses to start.
    let Some(u) = TestUser::create("f") else {
        return;
    };
    let d = tmpdir("fallback");
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = d.join("sluice");
    std::fs::copy(SLUICE, &bin).unwrap();
    let fallback = Path::new("/tmp").join(format!("sluice-{}", u.uid));
    let _ = std::fs::remove_dir_all(&fallback);
    std::fs::create_dir(&fallback).unwrap();
    std::os::unix::fs::chown(&fallback, Some(65534), None).unwrap();
    let o = u
        .cmd(false, bin.to_str().unwrap())
        .args(["unix", "{", "nodaemon", "}"])
        .env_remove("XDG_RUNTIME_DIR")
        .current_dir(&d)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&fallback);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains(&format!(
            "refusing {0}: directory {0} is owned by uid 65534, not by uid {1} or root",
            fallback.display(),
            u.uid
        )),
        "{}",
        text(&o.stderr)
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn cli_listen_never_removes_a_file_and_refuses_world_writable_directories() {
    let d = tmpdir("nonsock");
    let f = d.join("cli.sock");
    std::fs::write(&f, "precious").unwrap();
    let o = Command::new(SLUICE)
        .args(["unix", "{", "nodaemon", "cli-listen"])
        .arg(&f)
        .arg("}")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains(&format!(
            "refusing {}: it exists and is not a socket (not removing it)",
            f.display()
        )),
        "{}",
        text(&o.stderr)
    );
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "precious");
    let ww = d.join("ww");
    std::fs::create_dir(&ww).unwrap();
    std::fs::set_permissions(&ww, std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = Command::new(SLUICE)
        .args(["unix", "{", "nodaemon", "cli-listen"])
        .arg(ww.join("cli.sock"))
        .arg("}")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("is writable by others (mode 0777)"),
        "{}",
        text(&o.stderr)
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_client_that_never_reads_its_reply_is_dropped_and_others_are_served() {
    let logdir = tmpdir("slowlog");
    let log = logdir.join("d.log");
    let d = Daemon::start(
        "slow",
        &format!("unix {{ log {} cli-client-timeout 1 }}", log.display()),
    );
    // A few thousand routes make `show ip fib` a reply of several hundred KB, more than the
    // socket buffers hold.
    d.ok("create packet-generator interface pg0");
    d.ok("set interface ip address pg0 10.0.0.1/24");
    d.ok("ip neighbor pg0 10.0.0.2 02:00:00:00:00:02");
    d.ok("ip route add count 20000 11.0.0.0/32 via 10.0.0.2");
    let big = d.ok("show ip fib").len();
    assert!(big > 1 << 20, "reply of {big} bytes");
    // The slow client runs as an unprivileged user in the socket's group when possible.
    let user = TestUser::create("s");
    let mut slow = if let Some(u) = &user {
        std::os::unix::fs::chown(&d.dir, None, Some(u.gid)).unwrap();
        std::fs::set_permissions(&d.dir, std::fs::Permissions::from_mode(0o750)).unwrap();
        std::os::unix::fs::chown(&d.sock, None, Some(u.gid)).unwrap();
        Some(
            u.cmd(true, "/usr/bin/python3")
                .arg("-c")
                .arg(format!(
                    "import socket,struct,time\ns=socket.socket(socket.AF_UNIX)\ns.connect('{}')\nc=b'show ip fib'\ns.sendall(struct.pack('<I',len(c))+c)\nprint('sent',flush=True)\ntime.sleep(60)",
                    d.sock.display()
                ))
                .stdout(Stdio::piped())
                .spawn()
                .unwrap(),
        )
    } else {
        None
    };
    let mut own = None;
    if let Some(c) = slow.as_mut() {
        let mut line = [0u8; 5];
        c.stdout.as_mut().unwrap().read_exact(&mut line).unwrap();
        assert_eq!(&line, b"sent\n");
    } else {
        let mut s = UnixStream::connect(&d.sock).unwrap();
        sluice_cli::proto::write_request(&mut s, "show ip fib").unwrap();
        own = Some(s);
    }
    // Meanwhile the daemon answers everyone else.
    for _ in 0..20 {
        assert!(d.ok("show version").contains("sluice"));
    }
    let l = wait_log(&log, "dropped:");
    assert!(l.contains("unread for 1 s (cli-client-timeout)"), "{l}");
    assert!(d.ok("show version").contains("sluice"));
    if let Some(mut c) = slow {
        let _ = c.kill();
        let _ = c.wait();
    }
    drop(own);
    d.stop();
    let _ = std::fs::remove_dir_all(&logdir);
}

#[test]
fn session_and_request_limits_are_enforced_with_a_reason() {
    let logdir = tmpdir("limitslog");
    let log = logdir.join("d.log");
    let d = Daemon::start(
        "limits",
        &format!(
            "unix {{ log {} cli-max-clients 3 cli-max-request-bytes 1024 }}",
            log.display()
        ),
    );
    let mut held: Vec<UnixStream> = (0..3)
        .map(|_| {
            let mut s = UnixStream::connect(&d.sock).unwrap();
            assert!(ask(&mut s, "show version").0);
            s
        })
        .collect();
    // The fourth session is told why and closed.
    let mut s = UnixStream::connect(&d.sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let (ok, msg) = sluice_cli::proto::read_response(&mut s).unwrap();
    assert!(!ok);
    assert_eq!(msg, "too many CLI sessions (limit 3, cli-max-clients)");
    wait_log(&log, "CLI session refused");
    // `quit' frees a session at once.
    let mut q = held.pop().unwrap();
    assert!(ask(&mut q, "quit").0);
    // A request over the limit is refused before its body is buffered: a 16 MiB header
    // with no body gets the answer at once.
    let mut s = UnixStream::connect(&d.sock).unwrap();
    s.write_all(&(16u32 << 20).to_le_bytes()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let (ok, msg) = sluice_cli::proto::read_response(&mut s).unwrap();
    assert!(!ok);
    assert_eq!(
        msg,
        "request too large (16777216 bytes, limit 1024 bytes, cli-max-request-bytes)"
    );
    let mut rest = Vec::new();
    assert_eq!(s.read_to_end(&mut rest).unwrap(), 0, "then closed");
    wait_log(&log, "request of 16777216 bytes refused");
    assert!(d.ok("show version").contains("sluice"));
    drop(held);
    d.stop();
    let _ = std::fs::remove_dir_all(&logdir);
}

#[test]
fn a_reply_over_the_frame_limit_is_refused_with_a_message() {
    let d = Daemon::start("bigreply", "");
    d.ok("create packet-generator interface pg0");
    d.ok("set interface ip address pg0 10.0.0.1/24");
    d.ok("ip neighbor pg0 10.0.0.2 02:00:00:00:00:02");
    d.ok("ip route add count 300000 11.0.0.0/32 via 10.0.0.2");
    // `show ip fib` streams its reply in pieces (no limit); a script's transcript is built
    // whole, so the same output through `exec` is over the frame limit.
    let fib = d.ok("show ip fib");
    assert!(fib.len() > 16 << 20, "{} bytes", fib.len());
    let script = d.dir.join("fib.cli");
    std::fs::write(&script, "show ip fib\n").unwrap();
    let e = d.cli(&format!("exec {}", script.display())).unwrap_err();
    assert!(
        e.starts_with("reply too large (")
            && e.ends_with("narrow the command (a prefix, a table, `summary')"),
        "{e}"
    );
    assert!(
        d.ok("show ip fib summary")
            .contains("             32          300002"),
        "the session goes on"
    );
    d.stop();
}

#[test]
fn replies_over_the_output_buffer_cap_are_refused_with_a_reason() {
    let logdir = tmpdir("outcap");
    let log = logdir.join("d.log");
    let d = Daemon::start(
        "outcap",
        &format!(
            "unix {{ log {} cli-max-output-bytes 65536 }}",
            log.display()
        ),
    );
    d.ok("create packet-generator interface pg0");
    d.ok("set interface ip address pg0 10.0.0.1/24");
    d.ok("ip neighbor pg0 10.0.0.2 02:00:00:00:00:02");
    d.ok("ip route add count 2000 11.0.0.0/32 via 10.0.0.2");
    // A script's transcript is one reply (not streamed): over 64 KiB, it is refused.
    let script = d.dir.join("fib.cli");
    std::fs::write(&script, "show ip fib\n").unwrap();
    let e = d.cli(&format!("exec {}", script.display())).unwrap_err();
    assert_eq!(
        e,
        "CLI output buffers full (0 bytes queued, limit 65536, cli-max-output-bytes); try again"
    );
    let l = wait_log(&log, "refused: 0 bytes already queued");
    assert!(l.contains("(cli-max-output-bytes 65536)"), "{l}");
    // Smaller replies go on.
    assert!(d.ok("show ip fib 11.0.0.5/32").contains("11.0.0.5/32"));
    assert!(d.ok("show version").contains("sluice"));
    d.stop();
    let _ = std::fs::remove_dir_all(&logdir);
}

#[test]
fn accept_backs_off_when_descriptors_run_out() {
    let logdir = tmpdir("emfile");
    let log = logdir.join("d.log");
    let sockdir = tmpdir("emfile-s");
    let sock = sockdir.join("cli.sock");
    let mut c = Command::new(SLUICE);
    c.args([
        "unix",
        "{",
        "nodaemon",
        "cli-max-clients",
        "4096",
        "log",
        log.to_str().unwrap(),
        "cli-listen",
        sock.to_str().unwrap(),
        "}",
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    // SAFETY: setrlimit in the child before exec; no allocation.
    unsafe {
        c.pre_exec(|| {
            let l = libc::rlimit {
                rlim_cur: 64,
                rlim_max: 64,
            };
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
            Ok(())
        });
    }
    let mut p = Proc {
        child: c.spawn().unwrap(),
    };
    wait_for_socket(&sock);
    let mut conns = Vec::new();
    for _ in 0..100 {
        if let Ok(s) = UnixStream::connect(&sock) {
            conns.push(s);
        }
    }
    wait_log(&log, "CLI accept: Too many open files");
    drop(conns);
    // Once descriptors are free again, the daemon serves as before.
    wait_until(
        Duration::from_secs(20),
        Duration::from_millis(50),
        || {
            UnixStream::connect(&sock)
                .map(|mut s| ask(&mut s, "show version").1.contains("sluice"))
                .unwrap_or(false)
        },
        || "not serving after descriptors came back".into(),
    );
    p.signal(libc::SIGTERM);
    assert!(p.wait_exit().success());
    let _ = std::fs::remove_dir_all(&logdir);
    let _ = std::fs::remove_dir_all(&sockdir);
}

#[test]
fn telnet_style_tcp_cli_on_localhost() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let d = tmpdir("tcp");
    let mut p = Proc::start(
        &format!(
            "unix {{ nodaemon runtime-dir {} cli-listen localhost:{port} }}",
            d.join("run").display()
        ),
        None,
    );
    let mut s = None;
    wait_until(
        Duration::from_secs(20),
        Duration::from_millis(20),
        || {
            s = TcpStream::connect(("127.0.0.1", port)).ok();
            s.is_some()
        },
        || "no TCP CLI".into(),
    );
    let mut s = s.unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let read_prompt = |s: &mut TcpStream| {
        let mut got = Vec::new();
        let mut b = [0u8; 4096];
        while !got.ends_with(b"sluice# ") {
            let n = s.read(&mut b).unwrap();
            assert!(n > 0, "closed: {}", text(&got));
            got.extend_from_slice(&b[..n]);
        }
        text(&got)
    };
    assert_eq!(read_prompt(&mut s), "sluice# ");
    // Telnet negotiation (IAC DO ECHO, IAC SB ... IAC SE) is skipped, CRLF accepted.
    s.write_all(b"\xff\xfd\x01\xff\xfa\x18\x01\xff\xf0show version\r\n")
        .unwrap();
    let out = read_prompt(&mut s);
    assert!(out.contains("sluice v"), "{out}");
    s.write_all(b"show frob\r\n").unwrap();
    let out = read_prompt(&mut s);
    assert!(out.contains("unknown input `frob'"), "{out}");
    // A streamed reply (show ip fib of 10k routes: three pieces) arrives whole, then the
    // prompt.
    for c in [
        "create loopback interface",
        "set interface ip address loop0 10.0.0.1/24",
        "ip route add count 10000 20.0.0.0/32 via 10.0.0.2",
    ] {
        s.write_all(format!("{c}\r\n").as_bytes()).unwrap();
        read_prompt(&mut s);
    }
    s.write_all(b"show ip fib\r\n").unwrap();
    let out = read_prompt(&mut s);
    assert_eq!(out.matches("\n20.0.").count(), 10000, "{}", &out[..200]);
    assert!(
        out.ends_with("[0] [@0]: dpo-drop ip4\nsluice# "),
        "{}",
        &out[out.len() - 200..]
    );
    s.write_all(b"quit\r\n").unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    // Bound to loopback only.
    let l = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let want = format!("0100007F:{port:04X}");
    assert!(l.contains(&want), "not on 127.0.0.1:{port}");
    p.signal(libc::SIGTERM);
    assert!(p.wait_exit().success());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn capture_files_are_confined_created_fresh_and_owner_only() {
    let d = Daemon::start("confine", "");
    d.ok("create packet-generator interface pg0");
    let dir = d.dir.display().to_string();
    let where_ = format!("files may only be written to {dir} (give a file name, or {dir}/<name>)");
    for bad in [
        "/etc/sluice-test.pcap".to_string(),
        "../x.pcap".to_string(),
        format!("{dir}/../x.pcap"),
        "sub/x.pcap".to_string(),
    ] {
        let e = d
            .cli(&format!("pcap trace rx max 10 file {bad}"))
            .unwrap_err();
        assert_eq!(e, format!("`{bad}': {where_}"));
        let e = d
            .cli(&format!("packet-generator capture pg0 pcap {bad}"))
            .unwrap_err();
        assert_eq!(e, format!("`{bad}': {where_}"));
    }
    assert!(!Path::new("/etc/sluice-test.pcap").exists());
    // A symlink planted at the name is replaced, the file it points to untouched.
    let victim = d.dir.join("victim");
    std::fs::write(&victim, "keep").unwrap();
    std::os::unix::fs::symlink(&victim, d.dir.join("rx.pcap")).unwrap();
    d.ok("pcap trace rx max 10 file rx.pcap");
    d.ok("pcap trace off");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    let m = std::fs::symlink_metadata(d.dir.join("rx.pcap")).unwrap();
    assert!(m.is_file());
    assert_eq!(m.mode() & 0o777, 0o600);
    std::os::unix::fs::symlink(&victim, d.dir.join("cap.pcap")).unwrap();
    d.ok(&format!("packet-generator capture pg0 pcap {dir}/cap.pcap"));
    d.ok("packet-generator capture pg0 disable");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    assert_eq!(mode(&d.dir.join("cap.pcap")), 0o600);
    d.stop();
}

#[test]
fn exec_reads_regular_files_only_and_never_echoes_content() {
    let d = Daemon::start("execfiles", "");
    // A FIFO nobody writes: refused at once (a blocking open would hang the daemon).
    let fifo = d.dir.join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: valid path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let e = d.cli(&format!("exec {}", fifo.display())).unwrap_err();
    assert_eq!(
        e,
        format!(
            "cannot read `{}': not a regular file (a FIFO)",
            fifo.display()
        )
    );
    let e = d.cli("exec /dev/zero").unwrap_err();
    assert_eq!(
        e,
        "cannot read `/dev/zero': not a regular file (a character device)"
    );
    // Larger than the cap.
    let big = d.dir.join("big.cli");
    // (Sparse: the size is checked before anything is read.)
    std::fs::File::create(&big)
        .unwrap()
        .set_len((128 << 20) + 1)
        .unwrap();
    let e = d.cli(&format!("exec {}", big.display())).unwrap_err();
    assert_eq!(
        e,
        format!(
            "cannot read `{}': larger than 134217728 bytes",
            big.display()
        )
    );
    // A secret file: the error names the line, not its content.
    let secret = d.dir.join("shadow");
    std::fs::write(
        &secret,
        "root:$y$j9T$SECRETSALT$SECRETHASHSECRETHASH:19000:0:99999:7:::\n",
    )
    .unwrap();
    let e = d.cli(&format!("exec {}", secret.display())).unwrap_err();
    // `exec` goes on past a failing line (VPP); its error lists the failed lines.
    assert_eq!(
        e,
        format!(
            "{0}:1: not a CLI command (line not shown)\n{0}: 1 line(s) failed",
            secret.display()
        )
    );
    assert!(!e.contains("SECRET"));
    // A typo in a real script still names the token.
    let s = d.dir.join("typo.cli");
    std::fs::write(&s, "show version\nshow frob\n").unwrap();
    let e = d.cli(&format!("exec {} strict", s.display())).unwrap_err();
    assert_eq!(e, format!("{}:2: unknown input `frob'", s.display()));
    d.stop();
}

#[test]
fn long_commands_are_bounded_and_stop_on_sigterm() {
    let d = Daemon::start("long", "");
    d.ok("create packet-generator interface pg0");
    d.ok("set interface state pg0 up");
    d.ok("set interface ip address pg0 10.0.0.1/24");
    d.ok("ip neighbor pg0 10.0.0.2 02:00:00:00:00:02");
    assert_eq!(
        d.cli("ping 10.0.0.2 repeat 1000 interval 10").unwrap_err(),
        "ping would run up to 10000 s (repeat 1000 x interval 10); the limit is 60 s"
    );
    assert_eq!(
        d.cli("ip route add count 4294967295 11.0.0.0/32 via 10.0.0.2")
            .unwrap_err(),
        "count 4294967295: at most 4194304 routes per command"
    );
    // A 50 s ping (nobody answers) is cut short by SIGTERM; the daemon exits cleanly.
    let sock = d.sock.clone();
    let t = std::thread::spawn(move || {
        let mut s = UnixStream::connect(&sock).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        sluice_cli::proto::write_request(&mut s, "ping 10.0.0.2 repeat 50 interval 1").unwrap();
        sluice_cli::proto::read_response(&mut s)
    });
    std::thread::sleep(Duration::from_millis(1500));
    let t0 = Instant::now();
    let err = d.stop();
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "SIGTERM waited for the ping"
    );
    assert!(err.contains("stopped"), "{err}");
    let _ = t.join();
}

#[test]
fn sighup_reopens_the_log_file() {
    let logdir = tmpdir("hup");
    let log = logdir.join("d.log");
    let mut d = Daemon::start("hup", &format!("unix {{ log {} }}", log.display()));
    wait_log(&log, "CLI on");
    let rotated = logdir.join("d.log.1");
    std::fs::rename(&log, &rotated).unwrap();
    // SAFETY: kill(2) on our child.
    unsafe { libc::kill(d.child.id() as i32, libc::SIGHUP) };
    let l = wait_log(&log, "SIGHUP: reopened log file");
    assert!(l.contains(&log.display().to_string()), "{l}");
    assert!(d.alive());
    assert!(d.ok("show version").contains("sluice"));
    d.stop();
    let _ = std::fs::remove_dir_all(&logdir);
}

#[test]
fn daemonises_writes_a_pidfile_and_reports_startup_errors() {
    let d = tmpdir("daemonise");
    let sock = d.join("s").join("cli.sock");
    let pidfile = d.join("sluice.pid");
    let log = d.join("sluice.log");
    // No `nodaemon`: the command returns once the daemon is ready.
    let o = Command::new(SLUICE)
        .args(["unix", "{", "cli-listen"])
        .arg(&sock)
        .arg("pidfile")
        .arg(&pidfile)
        .arg("log")
        .arg(&log)
        .arg("}")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        UnixStream::connect(&sock).is_ok(),
        "ready when the command returned"
    );
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(mode(&pidfile), 0o644);
    assert!(cli_at(&sock, "show version").contains("sluice"));
    // Detached: its own session, not our child.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let (ppid, sid): (i32, i32) = (fields[1].parse().unwrap(), fields[3].parse().unwrap());
    assert_ne!(ppid, std::process::id() as i32);
    assert_ne!(sid, pid, "not a session leader (double fork)");
    // SAFETY: kill(2) on the daemon we started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    wait_until(
        Duration::from_secs(20),
        Duration::from_millis(20),
        || !pidfile.exists() && !sock.exists(),
        || "pidfile or socket left behind".into(),
    );
    assert!(wait_log(&log, "stopped").contains("CLI on"));
    // A start-up error after forking reaches the starting command.
    std::fs::write(&sock, "not a socket").unwrap();
    let o = Command::new(SLUICE)
        .args(["unix", "{", "cli-listen"])
        .arg(&sock)
        .arg("}")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        text(&o.stderr),
        format!(
            "sluice: cannot listen: refusing {}: it exists and is not a socket (not removing it)\n",
            sock.display()
        )
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn check_validates_ranges_and_referenced_files() {
    let d = tmpdir("check");
    let conf = d.join("s.conf");
    let check = |text: &str| -> (Option<i32>, String) {
        std::fs::write(&conf, text).unwrap();
        let o = Command::new(SLUICE)
            .arg("--check")
            .arg("-c")
            .arg(&conf)
            .output()
            .unwrap();
        (o.status.code(), text_of(&o))
    };
    fn text_of(o: &Output) -> String {
        format!("{}{}", text(&o.stdout), text(&o.stderr))
    }
    let c = conf.display();
    for (body, want) in [
        (
            "unix {\n poll-sleep-usec 2147483648000\n}\n",
            format!("sluice: {c}:2: poll-sleep-usec 2147483648000 out of range 0..1000000"),
        ),
        (
            "unix { cli-max-clients 0 }\n",
            format!("sluice: {c}:1: cli-max-clients 0 out of range 1..4096"),
        ),
        (
            // Without fifo/rr a priority is an error; with them it is clamped to the
            // policy's range as VPP does (config.rs tests), so no range error is left.
            "cpu {\n scheduler-priority 500 }\n",
            format!(
                "sluice: {c}:2: scheduler-priority 500: a priority needs scheduler-policy fifo or rr"
            ),
        ),
        (
            // A missing start-up script is a warning as in VPP; `exec-strict` makes it fatal.
            "unix {\n\n exec /nonexistent/boot.cli\n exec-strict\n}\n",
            format!(
                "sluice: {c}:3: exec: cannot read `/nonexistent/boot.cli': No such file or directory (os error 2)"
            ),
        ),
        (
            "unix { log /nonexistent/dir/sluice.log }\n",
            format!(
                "sluice: {c}:1: log `/nonexistent/dir/sluice.log': directory /nonexistent/dir does not exist"
            ),
        ),
        (
            "unix { gid no-such-group-sluice }\n",
            format!("sluice: {c}:1: unknown group `no-such-group-sluice'"),
        ),
        (
            "unix { capture-dir relative/dir }\n",
            format!("sluice: {c}:1: capture-dir `relative/dir': expected an absolute path without `..'"),
        ),
        (
            "unix { cli-listen 0.0.0.0:notaport }\n",
            format!("sluice: {c}:1: bad cli-listen `0.0.0.0:notaport': expected a socket path or <host>:<port>"),
        ),
    ] {
        let (code, out) = check(body);
        assert_eq!(code, Some(1), "{body}: {out}");
        assert_eq!(out.trim(), want, "{body}");
    }
    // The configuration file itself: regular files only, refused without blocking.
    let fifo = d.join("conf.fifo");
    let cs = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: valid path.
    assert_eq!(unsafe { libc::mkfifo(cs.as_ptr(), 0o600) }, 0);
    for (path, kind) in [
        (fifo.as_path(), "a FIFO"),
        (Path::new("/dev/zero"), "a character device"),
    ] {
        let o = Command::new(SLUICE)
            .arg("--check")
            .arg("-c")
            .arg(path)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1));
        assert_eq!(
            text(&o.stderr).trim(),
            format!(
                "sluice: cannot read `{}': not a regular file ({kind})",
                path.display()
            )
        );
    }
    // Accepted VPP keys that do nothing say so; heapsize and plugin sections are warnings.
    let (code, out) = check(
        "heapsize 2G\nunix {\n nodaemon\n cli-no-pager\n nosyslog\n cli-pager-buffer-limit 1000\n full-coredump\n}\nnat { endpoint-dependent }\n",
    );
    assert_eq!(code, Some(0), "{out}");
    for w in [
        ":1: heapsize is accepted for VPP compatibility and ignored",
        ":4: unix { cli-no-pager }: ignored (the CLI has no pager)",
        ":6: unix { cli-pager-buffer-limit }: ignored",
        ":7: unix { full-coredump }: ignored",
        ":9: section `nat' is accepted for VPP compatibility and ignored",
    ] {
        assert!(out.contains(w), "missing `{w}' in {out}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn memif_socket_filename_never_removes_a_file() {
    let logdir = tmpdir("memiflog");
    let log = logdir.join("d.log");
    let d = Daemon::start("memiffile", &format!("unix {{ log {} }}", log.display()));
    let f = d.dir.join("memif.sock");
    std::fs::write(&f, "precious").unwrap();
    d.ok(&format!(
        "create memif socket id 1 filename {}",
        f.display()
    ));
    d.ok("create interface memif id 0 socket-id 1 master");
    // The listener is (re)tried in the background: the reason is logged, the socket shown
    // in error, the file left alone.
    wait_log(
        &log,
        &format!(
            "memif: cannot listen on {}: refusing {}: it exists and is not a socket (not removing it)",
            f.display(),
            f.display()
        ),
    );
    let show = d.ok("show memif");
    assert!(
        show.lines()
            .any(|l| l.contains("error") && l.contains("memif.sock")),
        "{show}"
    );
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "precious");
    // A fresh name works and gets mode 0660; deleting the interface removes the socket.
    let s = d.dir.join("m2.sock");
    d.ok(&format!(
        "create memif socket id 2 filename {}",
        s.display()
    ));
    d.ok("create interface memif id 0 socket-id 2 master");
    wait_until(
        Duration::from_secs(20),
        Duration::from_millis(20),
        || s.exists(),
        || "no memif socket".into(),
    );
    assert_eq!(mode(&s), 0o660);
    d.ok("delete interface memif memif2/0");
    assert!(!s.exists());
    d.stop();
    let _ = std::fs::remove_dir_all(&logdir);
}
