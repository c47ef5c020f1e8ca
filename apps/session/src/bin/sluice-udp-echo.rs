//! `sluice-udp-echo`: a UDP echo server over Sluice's host stack. Every datagram received
//! on a bound endpoint is sent back to its source, byte for byte.
//!
//! `sluice-udp-echo --socket <app-socket> --bind <addr:port> [--bind ...] [--count <n>]
//! [--busy-poll-us <µs>]`
//! prints `ready` once every endpoint is bound, and exits after echoing `n` datagrams (by
//! default it runs until killed).

use sluice_session::{App, Session};
use std::io::Write;
use std::net::SocketAddr;

fn usage(e: &str) -> ! {
    eprintln!("sluice-udp-echo: {e}");
    eprintln!(
        "usage: sluice-udp-echo --socket <path> --bind <addr:port> [--bind ...] [--count <n>] [--busy-poll-us <us>]"
    );
    std::process::exit(2)
}

fn main() {
    let mut path = None;
    let mut binds: Vec<SocketAddr> = Vec::new();
    let mut count: Option<u64> = None;
    let mut busy: u64 = 0;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || {
            args.next()
                .unwrap_or_else(|| usage(&format!("`{a}' needs a value")))
        };
        match a.as_str() {
            "--socket" => path = Some(val()),
            "--bind" => {
                let v = val();
                binds.push(
                    v.parse()
                        .unwrap_or_else(|_| usage(&format!("bad address `{v}'"))),
                );
            }
            "--busy-poll-us" => {
                let v = val();
                busy = v
                    .parse()
                    .unwrap_or_else(|_| usage(&format!("bad microseconds `{v}'")));
            }
            "--count" => {
                let v = val();
                count = Some(
                    v.parse()
                        .unwrap_or_else(|_| usage(&format!("bad count `{v}'"))),
                );
            }
            _ => usage(&format!("unknown argument `{a}'")),
        }
    }
    let path = path.unwrap_or_else(|| usage("--socket is required"));
    if binds.is_empty() {
        usage("at least one --bind is required");
    }
    let mut app = App::attach(&path, "sluice-udp-echo").unwrap_or_else(|e| {
        eprintln!("sluice-udp-echo: attach to {path}: {e}");
        std::process::exit(1)
    });
    app.set_busy_poll(std::time::Duration::from_micros(busy));
    let mut sessions: Vec<Session> = Vec::new();
    for b in &binds {
        sessions.push(app.bind(*b).unwrap_or_else(|e| {
            eprintln!("sluice-udp-echo: bind {b}: {e}");
            std::process::exit(1)
        }));
    }
    println!("ready");
    let _ = std::io::stdout().flush();
    if let Err(e) = sluice_session::echo(&app, &sessions, |n| count.is_some_and(|c| n >= c)) {
        eprintln!("sluice-udp-echo: {e}");
        std::process::exit(1);
    }
}
