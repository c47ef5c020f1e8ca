//! sluicectl against a small server speaking the CLI protocol.

use sluice_cli::proto;
use std::io::Write;
use std::os::unix::net::UnixListener;
use std::process::{Command, Stdio};

fn server(path: &std::path::Path) -> std::thread::JoinHandle<()> {
    let l = UnixListener::bind(path).unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            while let Ok(Some(cmd)) = proto::read_request(&mut s) {
                if cmd == "stop-server" {
                    let _ = proto::write_response(&mut s, true, "");
                    return;
                }
                let ok = cmd != "fail";
                let text = if ok {
                    format!("echo: {cmd}")
                } else {
                    "unknown input `fail'".into()
                };
                if proto::write_response(&mut s, ok, &text).is_err() {
                    break;
                }
            }
        }
    })
}

#[test]
fn one_shot_commands_stdin_mode_and_errors() {
    let dir = std::env::temp_dir().join(format!("sluicectl-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("cli.sock");
    let h = server(&sock);
    let bin = env!("CARGO_BIN_EXE_sluicectl");

    let o = Command::new(bin)
        .arg("-s")
        .arg(&sock)
        .args(["show", "runtime"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "echo: show runtime\n");

    let o = Command::new(bin)
        .arg("-s")
        .arg(&sock)
        .arg("fail")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&o.stderr), "unknown input `fail'\n");

    let mut c = Command::new(bin)
        .arg("-s")
        .arg(&sock)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin
        .take()
        .unwrap()
        .write_all(b"show version\npacket-generator new {\n  name x\n}\n")
        .unwrap();
    let o = c.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("echo: show version\n"), "{out}");
    assert!(
        out.contains("echo: packet-generator new {\n  name x\n}"),
        "{out}"
    );

    let o = Command::new(bin)
        .arg("-s")
        .arg(dir.join("missing.sock"))
        .arg("x")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no such socket (is sluice running?"), "{err}");

    let _ = Command::new(bin)
        .arg("-s")
        .arg(&sock)
        .arg("stop-server")
        .output();
    h.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
