//! Shared harness for the daemon's end-to-end tests: start a real `sluice` with a temp CLI
//! socket, run CLI commands, read and write pcap files, check for leaked buffers.

#![allow(dead_code)]

pub mod netns;
#[allow(unused_imports)]
pub use netns::*;

use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};
use sluice_cli::proto;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Daemon {
    pub child: Child,
    pub sock: PathBuf,
    pub dir: PathBuf,
}

/// Directories [`tmpdir`] made in this test binary, and whether any test panicked.
static MADE: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
static PANICKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// At the test binary's exit (every test done): removes the directories [`tmpdir`] made,
/// unless a test panicked (they are then its post-mortem: sockets, configs, captures, as a
/// failing test's `Daemon` leaves its own) or `SLUICE_KEEP_TEST_DIRS` is set. Tests that
/// remove theirs earlier lose nothing; the ones that hand a socket directory to daemons
/// keep it until the end.
extern "C" fn remove_made() {
    if PANICKED.load(std::sync::atomic::Ordering::Relaxed)
        || std::env::var_os("SLUICE_KEEP_TEST_DIRS").is_some()
    {
        return;
    }
    if let Ok(made) = MADE.lock() {
        for d in made.iter() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// A directory of its own under the temp dir for a test, removed when the test binary
/// exits ([`remove_made`]).
pub fn tmpdir(tag: &str) -> PathBuf {
    static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    static HOOKS: std::sync::Once = std::sync::Once::new();
    HOOKS.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICKED.store(true, std::sync::atomic::Ordering::Relaxed);
            prev(info)
        }));
        // SAFETY: registers a plain `extern "C"` function with no arguments, which libc
        // calls once at exit; it touches only statics.
        unsafe { libc::atexit(remove_made) };
    });
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let d = std::env::temp_dir().join(format!("sluice-test-{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    if let Ok(mut made) = MADE.lock() {
        made.push(d.clone());
    }
    d
}

/// Runs a command; its stdout, or a one-line error with its stderr.
pub fn sh(args: &[&str]) -> Result<String, String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`{}' failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// [`sh`] that must succeed.
pub fn must(args: &[&str]) -> String {
    sh(args).unwrap_or_else(|e| panic!("{e}"))
}

impl Daemon {
    pub fn start(tag: &str, extra: &str) -> Daemon {
        Self::start_in(None, tag, extra)
    }

    /// Starts sluice inside network namespace `netns` (`ip netns exec`, which execs it:
    /// the child is sluice itself) or, with `None`, here.
    pub fn start_in(netns: Option<&str>, tag: &str, extra: &str) -> Daemon {
        let dir = tmpdir(tag);
        let sock = dir.join("cli.sock");
        let conf = dir.join("startup.conf");
        std::fs::write(
            &conf,
            format!(
                "unix {{\n  nodaemon\n  cli-listen {}\n  capture-dir {}\n}}\nbuffers {{ buffers-per-numa 8192 page-size 4k }}\n{extra}\n",
                sock.display(),
                dir.display()
            ),
        )
        .unwrap();
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_sluice")]);
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_sluice")),
        };
        let mut child = cmd
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start sluice");
        // A start-up wait, not a speed check: ~0.15 s of CPU, but several seconds on a
        // loaded machine (python/sluice_test/instance.py `start` has the numbers). A daemon
        // that exits is reported at once, with what it printed.
        let t0 = Instant::now();
        while UnixStream::connect(&sock).is_err() {
            if let Some(st) = child.try_wait().unwrap() {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                panic!("sluice exited at start-up ({st}): {err}");
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "sluice did not open its CLI socket"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let d = Daemon { child, sock, dir };
        // The CLI socket is bound before the statistics segment and the API are up; the
        // first answer comes from the main loop, once startup is complete.
        if let Err(e) = d.cli("show version") {
            panic!("sluice did not answer its CLI: {e}");
        }
        d
    }

    pub fn cli(&self, cmd: &str) -> Result<String, String> {
        let mut s = UnixStream::connect(&self.sock).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        proto::write_request(&mut s, cmd).unwrap();
        let (ok, text) = proto::read_response(&mut s).expect("response");
        if ok {
            Ok(text)
        } else {
            Err(text)
        }
    }

    pub fn ok(&self, cmd: &str) -> String {
        self.cli(cmd)
            .unwrap_or_else(|e| panic!("`{cmd}' failed: {e}"))
    }

    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    pub fn stop(mut self) -> String {
        // SAFETY: plain kill(2) on our child's pid.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let out = self.child.wait_with_output_ref();
        let _ = std::fs::remove_dir_all(&self.dir);
        out
    }
}

pub trait WaitRef {
    fn wait_with_output_ref(&mut self) -> String;
}
impl WaitRef for Child {
    fn wait_with_output_ref(&mut self) -> String {
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.try_wait().unwrap() {
                let mut err = String::new();
                if let Some(mut e) = self.stderr.take() {
                    use std::io::Read;
                    let _ = e.read_to_string(&mut err);
                }
                assert!(st.success(), "sluice exited with {st}: {err}");
                return err;
            }
            if t0.elapsed() > Duration::from_secs(20) {
                let _ = self.kill();
                panic!("sluice did not stop on SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    /// Kills the daemon; removes its directory unless the test is failing (then the
    /// socket, config and captures stay for a post-mortem).
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

pub fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let f = std::fs::File::create(path).unwrap();
    let mut w = PcapWriter::new(f).unwrap();
    for (i, fr) in frames.iter().enumerate() {
        w.write_packet(&PcapPacket::new(
            Duration::from_micros(i as u64),
            fr.len() as u32,
            fr,
        ))
        .unwrap();
    }
}

/// The packets of a pcap file; a truncated last record (the file is still being written)
/// ends the list.
pub fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let f = std::fs::File::open(path).unwrap();
    let mut r = PcapReader::new(f).unwrap();
    let mut out = Vec::new();
    while let Some(Ok(p)) = r.next_packet() {
        out.push(p.data.into_owned());
    }
    out
}

/// The value of the `show interface <intf>` line containing `name` (0 when absent).
pub fn if_counter(d: &Daemon, intf: &str, name: &str) -> u64 {
    d.ok(&format!("show interface {intf}"))
        .lines()
        .find(|l| l.contains(name))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The count of the first `show errors` line naming `node` and `reason` (0 when absent).
pub fn error_count(d: &Daemon, node: &str, reason: &str) -> u64 {
    d.ok("show errors")
        .lines()
        .find(|l| l.contains(node) && l.contains(reason))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Checks that every buffer is back in the pool now, for a daemon whose traffic has
/// provably ended on the main thread (the test saw the last packet captured, counted or
/// dropped): the CLI runs between dispatch rounds and a round runs every pending frame to
/// its end, so nothing can still be on its way back. A buffer a node keeps for later
/// (a timer, a queue) fails it at once, where a wait would pass once the timer fired.
pub fn assert_no_leaks_now(d: &Daemon) {
    assert_no_leaks_within(d, Duration::ZERO);
}

/// How long [`assert_no_leaks_within`] gives a daemon whose traffic has ended on a worker
/// (or through an application's socket): the worker may still be inside the frame whose
/// counts the test saw, or a message from the application may arrive after the CLI
/// command. Shorter than the timers that would hold a buffer for later (TCP's 1 s initial
/// retransmission timeout, ping's 1 s interval), and far below the wait of
/// [`assert_no_leaks`].
pub const SETTLE: Duration = Duration::from_millis(500);

/// Waits up to `limit` for every buffer to be back in the pool (checks once when `limit`
/// is zero); panics with the count and `show buffers`.
pub fn assert_no_leaks_within(d: &Daemon, limit: Duration) {
    let t0 = Instant::now();
    loop {
        let n = buffers_in_use(d);
        if n == 0 {
            return;
        }
        assert!(
            t0.elapsed() < limit,
            "{n} buffers still in use after {limit:?}:\n{}",
            d.ok("show buffers")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits up to 30 s (a wait, not a speed check) for every buffer to be back in the pool,
/// for a check while packets may legitimately still be in flight (a worker still
/// forwarding a stream that has just ended, a peer daemon's ring); where the traffic has
/// provably ended use [`assert_no_leaks_now`] or [`SETTLE`], which a buffer held by a
/// timer fails.
pub fn assert_no_leaks(d: &Daemon) {
    assert_no_leaks_within(d, Duration::from_secs(30));
}

pub fn buffers_in_use(d: &Daemon) -> u64 {
    let s = d.ok("show buffers");
    let line = s
        .lines()
        .find(|l| l.starts_with("default-numa-0"))
        .unwrap_or_else(|| panic!("no pool line in {s}"));
    // Columns: name index numa size data-size total free cached used alloc-fail lent
    line.split_whitespace().nth(8).unwrap().parse().unwrap()
}

/// Polls `done` every `every` until it holds; panics with `why()` (evaluated only then,
/// so it may ask the daemon for diagnostics) once `limit` has passed.
pub fn wait_until(
    limit: Duration,
    every: Duration,
    mut done: impl FnMut() -> bool,
    why: impl FnOnce() -> String,
) {
    let t0 = Instant::now();
    while !done() {
        if t0.elapsed() >= limit {
            panic!("{}", why());
        }
        std::thread::sleep(every);
    }
}

pub fn wait_streams_done(d: &Daemon) {
    let t0 = Instant::now();
    loop {
        let s = d.ok("show packet-generator");
        if !s.lines().skip(1).any(|l| l.contains(" Yes ")) {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "stream did not finish: {s}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `cmd` on `d` every 20 ms until its output contains `needle` (which it returns);
/// panics with the last output after `secs` seconds.
pub fn wait_for(d: &Daemon, cmd: &str, needle: &str, secs: u64) -> String {
    wait_shows(d, cmd, needle, true, secs)
}

/// [`wait_for`] the other way: until the output of `cmd` no longer contains `needle`.
pub fn wait_gone(d: &Daemon, cmd: &str, needle: &str, secs: u64) -> String {
    wait_shows(d, cmd, needle, false, secs)
}

fn wait_shows(d: &Daemon, cmd: &str, needle: &str, present: bool, secs: u64) -> String {
    let t0 = Instant::now();
    loop {
        let s = d.ok(cmd);
        if s.contains(needle) == present {
            return s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(secs),
            "`{needle}' {} `{cmd}':\n{s}",
            if present { "not in" } else { "still in" }
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// [`send_within`] waiting up to 10 s.
pub fn send(
    from: &Daemon,
    src: &str,
    to: &Daemon,
    dst: &str,
    name: &str,
    frames: &[Vec<u8>],
    extra: &str,
) -> Vec<Vec<u8>> {
    send_within(
        from,
        src,
        to,
        dst,
        name,
        frames,
        extra,
        Duration::from_secs(10),
    )
}

/// Sends `frames` into `src` of `from` (a pcap stream `name`, `extra` appended to its
/// `packet-generator new`) and returns what `dst` of `to` captured, waiting up to `limit`;
/// a timeout shows `to`'s memif state, both daemons' errors and `to`'s neighbours. The
/// stream is deleted once its frames arrived.
#[allow(clippy::too_many_arguments)]
pub fn send_within(
    from: &Daemon,
    src: &str,
    to: &Daemon,
    dst: &str,
    name: &str,
    frames: &[Vec<u8>],
    extra: &str,
    limit: Duration,
) -> Vec<Vec<u8>> {
    let inp = from.dir.join(format!("{name}-in.pcap"));
    let out = to.dir.join(format!("{name}-out.pcap"));
    write_pcap(&inp, frames);
    to.ok(&format!(
        "packet-generator capture {dst} pcap {} count {}",
        out.display(),
        frames.len()
    ));
    from.ok(&format!(
        "packet-generator new pcap {} source {src} name {name} {extra}",
        inp.display()
    ));
    from.ok(&format!("packet-generator enable {name}"));
    wait_streams_done(from);
    let got = wait_pcap_within(&out, frames.len(), limit, || {
        format!(
            "{}\n{}\n{}\n{}",
            to.ok("show memif"),
            to.ok("show errors"),
            from.ok("show errors"),
            to.ok("show ip neighbors")
        )
    });
    // Done: the stream goes, so streams do not pile up and a name can be used again.
    from.ok(&format!("packet-generator delete {name}"));
    got
}

/// Waits until a capture file holds `n` packets and returns them (30 s at most: a wait,
/// not a speed check).
pub fn wait_pcap(path: &Path, n: usize) -> Vec<Vec<u8>> {
    wait_pcap_within(path, n, Duration::from_secs(30), String::new)
}

/// [`wait_pcap`] with a time limit and `diag`, what the failure message adds (e.g. the
/// daemons' counters, read only then).
pub fn wait_pcap_within(
    path: &Path,
    n: usize,
    limit: Duration,
    diag: impl Fn() -> String,
) -> Vec<Vec<u8>> {
    let t0 = Instant::now();
    loop {
        let got = if path.exists() {
            read_pcap(path)
        } else {
            Vec::new()
        };
        if got.len() >= n {
            return got;
        }
        assert!(
            t0.elapsed() < limit,
            "{} has {} of {n} packets\n{}",
            path.display(),
            got.len(),
            diag()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
