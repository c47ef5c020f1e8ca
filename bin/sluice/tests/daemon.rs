//! End-to-end tests of the real `sluice` binary: pcap in through pg0, l2-patch, pg1 captured
//! to pcap and compared byte for byte; CLI and startup.conf garbage; exec scripts.

#[path = "common/mod.rs"]
mod common;

use common::*;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// 1000 frames of varied sizes (60..1514) plus two 3000-byte frames that need buffer chains.
fn test_frames() -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    for i in 0..1002u32 {
        let len = if i == 500 || i == 1001 {
            3000
        } else {
            60 + (i as usize * 37) % 1455
        };
        let mut f = vec![0u8; len];
        f[0..6].copy_from_slice(&[0x02, 0xfe, 0, 0, 0, 1]);
        f[6..12].copy_from_slice(&[0x02, 0xfe, 0, 0, 0, 2]);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        for (k, b) in f[14..].iter_mut().enumerate() {
            *b = (k as u32 ^ i) as u8;
        }
        f[14..18].copy_from_slice(&i.to_be_bytes());
        v.push(f);
    }
    v
}

#[test]
fn pcap_replay_through_the_graph_is_byte_exact() {
    let d = Daemon::start("replay", "");
    let frames = test_frames();
    let inp = d.dir.join("in.pcap");
    let out = d.dir.join("out.pcap");
    write_pcap(&inp, &frames);
    for c in [
        "create packet-generator interface pg0",
        "create packet-generator interface pg1",
        "set interface state pg0 up",
        "set int state pg1 up",
        "test l2patch rx pg0 tx pg1",
    ] {
        d.ok(c);
    }
    d.ok(&format!(
        "packet-generator new pcap {} source pg0 name s0 node l2-patch",
        inp.display()
    ));
    d.ok(&format!(
        "packet-generator capture pg1 pcap {} count {}",
        out.display(),
        frames.len()
    ));
    d.ok("trace add pg-input 3");
    d.ok("clear runtime");
    d.ok("packet-generator enable");
    wait_streams_done(&d);
    let t0 = Instant::now();
    let mut got = Vec::new();
    while t0.elapsed() < Duration::from_secs(10) {
        if out.exists() {
            got = read_pcap(&out);
            if got.len() == frames.len() {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(got.len(), frames.len(), "all packets captured on pg1");
    for (i, (a, b)) in frames.iter().zip(&got).enumerate() {
        assert_eq!(a, b, "packet {i} differs");
    }

    let sp = d.ok("show packet-generator");
    assert!(sp.contains("s0") && sp.contains("1002"), "{sp}");
    let rt = d.ok("sh run");
    for node in ["pg-input", "l2-patch", "interface-output", "pg-tx"] {
        let line = rt
            .lines()
            .find(|l| l.split_whitespace().next() == Some(node))
            .unwrap_or_else(|| panic!("{node} missing from show runtime:\n{rt}"));
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols[3], "1002", "{node} vectors: {line}");
    }
    let errs = d.ok("sh err");
    assert!(
        errs.lines().any(|l| l.contains("1002")
            && l.contains("l2-patch")
            && l.contains("L2 patch packets")),
        "{errs}"
    );
    assert!(
        errs.lines()
            .any(|l| l.contains("1002") && l.contains("pg-tx")),
        "{errs}"
    );
    let intf = d.ok("show interface");
    assert!(
        intf.contains("pg0") && intf.contains("rx packets") && intf.contains("1002"),
        "{intf}"
    );
    let tr = d.ok("show trace");
    assert!(
        tr.contains("Packet 1") && tr.contains("Packet 3") && !tr.contains("Packet 4"),
        "{tr}"
    );
    assert!(
        tr.contains(": pg-input") && tr.contains(": l2-patch") && tr.contains(": pg-tx"),
        "{tr}"
    );
    assert!(tr.contains("stream 0, 60 bytes"), "{tr}");
    d.ok("clear trace");
    assert!(d.ok("show trace").contains("No packets"));
    assert_no_leaks_now(&d);
    let err = d.stop();
    assert!(err.contains("stopped"), "{err}");
    assert!(!err.contains("still in use"), "{err}");
}

#[test]
fn pcap_trace_rx_and_drop_write_real_files() {
    let d = Daemon::start("pcaptrace", "");
    let frames: Vec<Vec<u8>> = test_frames().into_iter().take(20).collect();
    let inp = d.dir.join("in.pcap");
    write_pcap(&inp, &frames);
    d.ok("create packet-generator interface pg0");
    d.ok("create packet-generator interface pg1");
    d.ok("set interface state pg0 up");
    // pg1 stays down: interface-output drops everything, counted.
    d.ok("test l2patch rx pg0 tx pg1");
    let rx = d.dir.join("rx.pcap");
    let drop = d.dir.join("drop.pcap");
    d.ok(&format!(
        "pcap trace rx max 100 max-bytes-per-pkt 4000 file {}",
        rx.display()
    ));
    assert!(d.ok("pcap trace status").contains("rx capture on"));
    d.ok(&format!(
        "packet-generator new pcap {} source pg0 name s0 node l2-patch",
        inp.display()
    ));
    d.ok("packet-generator enable");
    wait_streams_done(&d);
    let r = d.ok("pcap trace off");
    assert!(r.contains("Write 20 packets"), "{r}");
    assert_eq!(read_pcap(&rx), frames);
    d.ok(&format!(
        "pcap trace drop max 5 max-bytes-per-pkt 4000 file {}",
        drop.display()
    ));
    d.ok("packet-generator enable s0");
    wait_streams_done(&d);
    let dropped = wait_pcap(&drop, 5);
    assert_eq!(dropped.len(), 5, "max honoured");
    assert_eq!(dropped[..], frames[..5]);
    let errs = d.ok("show errors");
    assert!(
        errs.lines()
            .any(|l| l.contains("40") && l.contains("interface-output") && l.contains("down")),
        "{errs}"
    );
    assert_no_leaks_now(&d);
    d.stop();
}

#[test]
fn cli_garbage_gets_clear_errors_and_the_daemon_lives() {
    let mut d = Daemon::start("garbage", "");
    let e = d.cli("frobnicate the thing").unwrap_err();
    assert_eq!(e, "unknown input `frobnicate'");
    let e = d.cli("show runtime sideways").unwrap_err();
    assert!(e.contains("`sideways'"), "{e}");
    let e = d.cli("create packet-generator interface eth0").unwrap_err();
    assert!(e.contains("`eth0'"), "{e}");
    let e = d
        .cli("packet-generator new { name x data { UDP: 1.2.3.999 -> 1.1.1.1 } }")
        .unwrap_err();
    assert!(e.contains("`1.2.3.999'"), "{e}");
    let e = d.cli("trace add no-such-node 10").unwrap_err();
    assert!(e.contains("`no-such-node'"), "{e}");
    let long = "x".repeat(200_000);
    assert!(d.cli(&long).is_err());
    // Random bytes, including NUL and invalid UTF-8, straight onto the socket.
    let mut seed = 0x12345678u32;
    for _ in 0..50 {
        let mut cmd = String::new();
        for _ in 0..(seed % 300) {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            cmd.push(char::from_u32(seed % 0x2000).unwrap_or('?'));
        }
        let _ = d.cli(&cmd);
    }
    // A client that sends a truncated frame and hangs up.
    {
        let mut s = UnixStream::connect(&d.sock).unwrap();
        s.write_all(&[0xff, 0xff, 0xff, 0x7f, 1, 2, 3]).unwrap();
    }
    // An abbreviated, valid command still works.
    assert!(d.ok("sh ver").contains("sluice"));
    let h = d.ok("sh run ?");
    assert!(h.contains("show runtime"), "{h}");
    assert!(d.alive());
    d.stop();
}

#[test]
fn startup_conf_errors_name_file_and_line() {
    let dir = tmpdir("conf");
    let run = |text: &[u8]| {
        let p = dir.join("bad.conf");
        std::fs::write(&p, text).unwrap();
        let o = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("--check")
            .arg("-c")
            .arg(&p)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
            p,
        )
    };
    let (code, err, p) = run(b"unix {\n  nodaemon\n  bogus-key 1\n}\n");
    assert_eq!(code, Some(1));
    assert_eq!(
        err.trim(),
        format!(
            "sluice: {}:3: unknown key `bogus-key' in section `unix'",
            p.display()
        )
    );
    let (code, err, _) = run(b"cpu { workers many }\n");
    assert_eq!(code, Some(1));
    assert!(err.contains(":1: bad value `many' for `workers'"), "{err}");
    let (code, err, _) = run(b"nonsense { }\n");
    assert_eq!(code, Some(1));
    assert!(err.contains(":1: unknown section `nonsense'"), "{err}");
    let (code, err, _) = run(&[0x7f, 0x45, 0x4c, 0x46, 0, 1, 2, 0xff, 0xfe]);
    assert_eq!(code, Some(1), "{err}");
    let mut long = b"unix { cli-listen ".to_vec();
    long.extend(std::iter::repeat_n(b'a', 100_000));
    let (code, err, _) = run(&long);
    assert_eq!(code, Some(1), "{err}");
    let (code, out, _) = run(
        b"# fine\nunix { nodaemon }\ncpu { workers 1 }\nstatseg { socket-name /run/vpp/stats.sock }\n",
    );
    assert_eq!(code, Some(0), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn startup_exec_script_failure_stops_with_file_line_when_strict() {
    let dir = tmpdir("exec");
    let script = dir.join("boot.cli");
    std::fs::write(
        &script,
        "create packet-generator interface pg0\n\nset interface state pg7 up\n",
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("unix")
        .arg("{")
        .arg("nodaemon")
        .arg("cli-listen")
        .arg(dir.join("s.sock").to_str().unwrap())
        .arg("exec")
        .arg(script.to_str().unwrap())
        .arg("exec-strict")
        .arg("}")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("{}:3: unknown interface `pg7'", script.display())),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without `exec-strict`, as VPP: the failing line is logged with file:line and the script
/// goes on (the interface of line 5 exists and is up).
#[test]
fn startup_exec_script_logs_a_failing_line_and_goes_on() {
    let dir = tmpdir("execgo");
    let script = dir.join("boot.cli");
    std::fs::write(
        &script,
        "create packet-generator interface pg0\n\nset interface state pg7 up\n# next\nset interface state pg0 up\n",
    )
    .unwrap();
    let mut d = Daemon::start("execgo", &format!("unix {{ exec {} }}", script.display()));
    assert!(d.alive());
    let int = d.ok("show interface pg0");
    assert!(int.contains(" up "), "{int}");
    let err = d.stop();
    assert!(
        err.contains(&format!("{}:3: unknown interface `pg7'", script.display())),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn exec_at_runtime_and_synthetic_streams_on_a_worker() {
    let d = Daemon::start("worker", "cpu { workers 1 }");
    let script = d.dir.join("setup.cli");
    std::fs::write(
        &script,
        "create packet-generator interface pg0\nset interface state pg0 up\npacket-generator new {\n  name syn\n  limit 5000\n  size 64-128\n  node null-sink\n  interface pg0\n  worker 0\n  data {\n    IP4: 1.2.3 -> 4.5.6\n    UDP: 10.0.0.1 - 10.0.0.100 -> 10.1.0.1\n    UDP: 1000 - 1099 -> 53\n  }\n}\n",
    )
    .unwrap();
    d.ok(&format!("exec {}", script.display()));
    assert!(d.ok("show threads").contains("sluice_wk_0"));
    d.ok("packet-generator enable syn");
    wait_streams_done(&d);
    let t0 = Instant::now();
    loop {
        let errs = d.ok("show errors");
        if errs
            .lines()
            .any(|l| l.contains("5000") && l.contains("null-sink"))
        {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "{errs}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let rt = d.ok("show runtime");
    assert!(rt.contains("Thread 1 sluice_wk_0"), "{rt}");
    let wk = rt.split("Thread 1").nth(1).unwrap();
    assert!(
        wk.lines()
            .any(|l| l.starts_with("null-sink") && l.contains("5000")),
        "{rt}"
    );
    // A worker's leak check waits: the worker thread may not run for a second on a
    // loaded machine.
    assert_no_leaks(&d);
    d.stop();
}

#[test]
fn running_streams_can_be_deleted_and_rates_are_paced() {
    let d = Daemon::start("delete", "");
    d.ok("create packet-generator interface pg0");
    d.ok("create packet-generator interface pg1");
    d.ok("set interface state pg0 up");
    d.ok("set interface state pg1 up");
    d.ok("test l2patch rx pg0 tx pg1");
    // An unlimited stream at full speed, deleted while it runs.
    d.ok("packet-generator new { name fast size 64-64 node l2-patch interface pg0 data { IP4: 1.2.3 -> 4.5.6 UDP: 10.0.0.1 -> 10.0.0.2 UDP: 1 -> 2 } }");
    // A paced stream: 200 packets per second, 100000 packets.
    d.ok("packet-generator new { name slow limit 100000 rate 200 size 64-64 node l2-patch interface pg0 data { UDP: 10.0.0.1 -> 10.0.0.2 UDP: 1 -> 2 } }");
    // Taken before the command: the streams' clocks start inside it.
    let enabled = Instant::now();
    d.ok("packet-generator enable");
    let sent = |s: &str, name: &str| -> u64 {
        s.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(2))
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("{s}"))
    };
    // Both running (a wait for the first packets, not a speed check).
    wait_until(
        Duration::from_secs(30),
        Duration::from_millis(20),
        || {
            let s = d.ok("show packet-generator");
            sent(&s, "fast") > 0 && sent(&s, "slow") > 0
        },
        || d.ok("show packet-generator"),
    );
    d.ok("packet-generator delete fast");
    let s = d.ok("show packet-generator");
    assert!(!s.contains("fast"), "{s}");
    let slow = sent(&s, "slow");
    // A ceiling: pacing at 200/s allows at most the elapsed time's worth plus one frame
    // (load only lowers the count, so this holds on a busy machine too).
    let most = (200.0 * enabled.elapsed().as_secs_f64()) as u64 + 256;
    assert!(
        slow > 0 && slow <= most,
        "paced stream sent {slow} (at most {most}): {s}"
    );
    assert!(
        s.lines()
            .any(|l| l.starts_with("slow") && l.contains("Yes")),
        "{s}"
    );
    d.ok("packet-generator disable");
    std::thread::sleep(Duration::from_millis(50));
    assert!(d
        .cli("packet-generator delete fast")
        .unwrap_err()
        .contains("`fast'"));
    assert_no_leaks_now(&d);
    d.stop();
}

#[test]
fn pcap_trace_interface_filter() {
    let d = Daemon::start("intfc", "");
    let frames: Vec<Vec<u8>> = test_frames().into_iter().take(10).collect();
    let inp = d.dir.join("in.pcap");
    write_pcap(&inp, &frames);
    for c in [
        "create packet-generator interface pg0",
        "create packet-generator interface pg1",
        "create packet-generator interface pg2",
        "set interface state pg0 up",
        "set interface state pg1 up",
        "set interface state pg2 up",
        "test l2patch rx pg0 tx pg1",
        "test l2patch rx pg2 tx pg1",
    ] {
        d.ok(c);
    }
    let f = d.dir.join("only-pg2.pcap");
    assert!(d
        .cli("pcap trace rx intfc pg9")
        .unwrap_err()
        .contains("`pg9'"));
    d.ok(&format!(
        "pcap trace rx max 1000 max-bytes-per-pkt 4000 intfc pg2 file {}",
        f.display()
    ));
    d.ok(&format!(
        "packet-generator new pcap {} source pg0 name a node l2-patch",
        inp.display()
    ));
    d.ok(&format!(
        "packet-generator new pcap {} source pg2 name b node l2-patch limit 3",
        inp.display()
    ));
    d.ok("packet-generator enable");
    wait_streams_done(&d);
    let r = d.ok("pcap trace off");
    assert!(r.contains("Write 3 packets"), "{r}");
    assert_eq!(read_pcap(&f), frames[..3].to_vec());
    let intf = d.ok("show interface pg1");
    assert!(intf.contains("tx packets") && intf.contains("13"), "{intf}");
    assert_no_leaks_now(&d);
    d.stop();
}

#[test]
fn interactive_console_runs_commands_from_stdin() {
    let dir = tmpdir("console");
    let mut c = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["unix", "{", "interactive", "cli-listen"])
        .arg(dir.join("s.sock"))
        .arg("}")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    c.stdin
        .take()
        .unwrap()
        .write_all(b"create packet-generator interface pg3\nshow int\nbogus\nquit\n")
        .unwrap();
    let t0 = Instant::now();
    while c.try_wait().unwrap().is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "console did not quit"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = c.wait_with_output().unwrap();
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("sluice# "), "{out}");
    assert!(out.contains("pg3"), "{out}");
    assert!(out.contains("unknown input `bogus'"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn long_show_ip_fib_is_streamed_in_pieces_equal_to_the_whole_text() {
    let d = Daemon::start("fibstream", "");
    for c in [
        "create loopback interface",
        "set interface state loop0 up",
        "set interface ip address loop0 10.0.0.1/24",
        "ip route add count 20000 20.0.0.0/32 via 10.0.0.2",
        "ip table add 7",
        "ip route add table 7 30.0.0.0/8 via 10.0.0.2",
    ] {
        d.ok(c);
    }
    // The reply comes in pieces of 4096 routes (status-2 frames, then the final frame).
    let mut s = std::os::unix::net::UnixStream::connect(&d.sock).unwrap();
    sluice_cli::proto::write_request(&mut s, "show ip fib").unwrap();
    let mut pieces = Vec::new();
    let ok =
        sluice_cli::proto::read_response_pieces(&mut s, |p, end| pieces.push((p.to_string(), end)))
            .unwrap();
    assert!(ok);
    assert!(pieces.len() >= 5, "{} pieces", pieces.len());
    assert!(pieces[..pieces.len() - 1].iter().all(|p| p.1.is_none()));
    let streamed: String = pieces.into_iter().map(|p| p.0).collect();
    // The same text as built whole (a script's line is not streamed).
    let script = d.dir.join("fib.cli");
    std::fs::write(&script, "show ip fib\n").unwrap();
    let whole = d.ok(&format!("exec {}", script.display()));
    assert_eq!(streamed.len(), whole.len());
    assert!(streamed == whole, "streamed and whole replies differ");
    assert_eq!(streamed.matches("\n20.0.").count(), 20000);
    assert!(streamed.contains("ipv4-VRF:7, fib_index:1,") && streamed.contains("\n30.0.0.0/8\n"));
    assert!(streamed.ends_with("    [0] [@0]: dpo-drop ip4\n"));
    // The session goes on after a streamed reply.
    sluice_cli::proto::write_request(&mut s, "show version").unwrap();
    assert!(sluice_cli::proto::read_response(&mut s).unwrap().0);
    d.stop();
}

/// `cpu { scheduler-policy batch }` is set as VPP sets it: on the main thread before the
/// workers start, so the worker (and the main thread) run with it, read back from the
/// kernel per thread.
#[test]
fn scheduler_policy_reaches_the_worker_threads() {
    let d = Daemon::start("sched", "cpu { workers 1 scheduler-policy batch }");
    let pid = d.child.id();
    let mut seen = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let t = t.unwrap().path();
        let name = std::fs::read_to_string(t.join("comm")).unwrap_or_default();
        let tid: i32 = t.file_name().unwrap().to_str().unwrap().parse().unwrap();
        // SAFETY: a plain query of a thread's policy.
        let policy = unsafe { libc::sched_getscheduler(tid) };
        seen.push((name.trim().to_string(), tid, policy));
    }
    let of = |want: &dyn Fn(&str, i32) -> bool| {
        seen.iter().find(|(n, tid, _)| want(n, *tid)).map(|s| s.2)
    };
    assert_eq!(
        of(&|n, _| n == "sluice_wk_0"),
        Some(libc::SCHED_BATCH),
        "{seen:?}"
    );
    assert_eq!(
        of(&|_, tid| tid as u32 == pid),
        Some(libc::SCHED_BATCH),
        "{seen:?}"
    );
}

/// A policy the kernel refuses (a real-time one without CAP_SYS_NICE) stops the start with
/// one line naming it and why.
#[test]
fn a_refused_scheduler_policy_stops_the_start_with_one_line() {
    let have = |c: &str| Command::new(c).arg("--version").output().is_ok();
    if !have("setpriv") || !have("prlimit") {
        eprintln!("skipped: no setpriv or prlimit");
        return;
    }
    let dir = tmpdir("sched-eperm");
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    // As nobody, without capabilities and with RLIMIT_RTPRIO 0: SCHED_FIFO is refused.
    let o = Command::new("prlimit")
        .args([
            "--rtprio=0",
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(env!("CARGO_BIN_EXE_sluice"))
        .args(["unix", "{", "nodaemon", "cli-listen"])
        .arg(dir.join("s.sock"))
        .args(["}", "cpu", "{", "workers", "1", "scheduler-policy", "fifo"])
        .args(["scheduler-priority", "10", "}"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    if err.contains("Permission denied") && !err.contains("sched_setscheduler") {
        eprintln!("skipped: nobody cannot run the test binary here: {err}");
        return;
    }
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(
        err.trim(),
        "sluice: cpu { scheduler-policy fifo scheduler-priority 10 }: sched_setscheduler refused: \
         Operation not permitted (os error 1) (a real-time policy needs CAP_SYS_NICE or an \
         RLIMIT_RTPRIO of the priority)"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
