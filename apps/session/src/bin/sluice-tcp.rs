//! `sluice-tcp`: TCP over Sluice's host stack, for tests and measurements.
//!
//! ```text
//! sluice-tcp --socket <app-socket> sink --listen <addr:port>   # one connection → stdout
//! sluice-tcp --socket <app-socket> send --connect <addr:port>  # stdin → one connection
//! sluice-tcp --socket <app-socket> echo --listen <addr:port>   # echo every connection
//! sluice-tcp --socket <app-socket> rr --connect <addr:port> --count <n> --size <bytes>
//! sluice-tcp --socket <app-socket> conn --connect <addr:port> --count <n>
//! ```
//! `sink` and `echo` print `ready` on stderr once listening; `sink` and `send` print the
//! byte count on stderr at the end; `rr` sends `n` requests of `size` bytes one at a time,
//! waits for each echo and prints `rr <n> p50 <µs> p99 <µs>`; `conn` opens `n` connections
//! one after the other to an echo server, each sending one byte, reading its echo and
//! closing, and prints `conn <n> per-second <rate>`.

use sluice_session::{seg, App, Event, Session};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

fn usage(e: &str) -> ! {
    eprintln!("sluice-tcp: {e}");
    eprintln!("usage: sluice-tcp --socket <path> (sink|echo) --listen <addr:port> | send --connect <addr:port> | rr --connect <addr:port> --count <n> --size <bytes> | conn --connect <addr:port> --count <n>");
    std::process::exit(2)
}

fn fail(e: io::Error) -> ! {
    eprintln!("sluice-tcp: {e}");
    std::process::exit(1)
}

fn wait(app: &App) {
    app.wait(Some(Duration::from_millis(10)))
        .unwrap_or_else(|e| fail(e));
}

/// Nothing to read: first consume the queued events and try again (data that arrives
/// after that queues a new one), then sleep.
fn idle(app: &App, drained: &mut bool) {
    if *drained {
        wait(app);
        *drained = false;
    } else {
        while app.next().is_some() {}
        *drained = true;
    }
}

/// Waits until the connection got the peer's FIN (or a RST), at most `t`.
fn linger(app: &App, s: &Session, t: Duration) {
    let end = Instant::now() + t;
    while Instant::now() < end {
        if app.tcp_state(s) & (seg::tcp_state::PEER_FIN | seg::tcp_state::RESET) != 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn accept_one(app: &App) -> Session {
    loop {
        while let Some(ev) = app.next() {
            if let Event::Accept(slot) = ev {
                return app.accepted(slot).unwrap_or_else(|e| fail(e));
            }
        }
        wait(app);
    }
}

fn sink(app: &mut App, listen: SocketAddr) {
    let l = app.listen(listen, 0).unwrap_or_else(|e| fail(e));
    eprintln!("ready");
    let s = accept_one(app);
    let mut out = io::BufWriter::with_capacity(1 << 20, io::stdout().lock());
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0u64;
    let mut drained = false;
    loop {
        match app.read(&s, &mut buf) {
            Ok(0) => break,
            Ok(n) => {
                drained = false;
                total += n as u64;
                out.write_all(&buf[..n]).unwrap_or_else(|e| fail(e));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => idle(app, &mut drained),
            Err(e) => fail(e),
        }
    }
    out.flush().unwrap_or_else(|e| fail(e));
    let _ = app.close(s);
    let _ = app.close(l);
    std::thread::sleep(Duration::from_millis(200)); // our FIN gets acknowledged
    eprintln!("bytes {total}");
}

fn send(app: &mut App, to: SocketAddr) {
    let s = app
        .tcp_connect(to, Duration::from_secs(5))
        .unwrap_or_else(|e| fail(e));
    let mut inp = io::stdin().lock();
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0u64;
    loop {
        let n = inp.read(&mut buf).unwrap_or_else(|e| fail(e));
        if n == 0 {
            break;
        }
        let mut off = 0;
        while off < n {
            match app.write(&s, &buf[off..n]) {
                Ok(k) => off += k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    while app.next().is_some() {}
                    wait(app);
                }
                Err(e) => fail(e),
            }
        }
        total += n as u64;
    }
    let _ = app.close(s);
    // The FIN goes after the data; the peer answers with its own once it read everything.
    linger(app, &s, Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(50));
    eprintln!("bytes {total}");
}

fn echo(app: &mut App, listen: SocketAddr) {
    let _l = app.listen(listen, 0).unwrap_or_else(|e| fail(e));
    eprintln!("ready");
    let n_slots = app.geometry().n_slots as usize;
    let mut conns: Vec<Option<Session>> = vec![None; n_slots];
    let mut buf = vec![0u8; 1 << 16];
    loop {
        while let Some(ev) = app.next() {
            let slot = match ev {
                Event::Accept(slot) => {
                    if let Ok(s) = app.accepted(slot) {
                        conns[slot as usize] = Some(s);
                    }
                    slot
                }
                Event::Data(slot) => slot,
            };
            let Some(s) = conns.get(slot as usize).copied().flatten() else {
                continue;
            };
            loop {
                match app.read(&s, &mut buf) {
                    Ok(0) => {
                        let _ = app.close(s);
                        conns[slot as usize] = None;
                        break;
                    }
                    Ok(n) => {
                        let mut off = 0;
                        while off < n {
                            match app.write(&s, &buf[off..n]) {
                                Ok(k) => off += k,
                                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                                    std::thread::yield_now()
                                }
                                Err(_) => break,
                            }
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => {
                        let _ = app.close(s);
                        conns[slot as usize] = None;
                        break;
                    }
                }
            }
        }
        wait(app);
    }
}

fn conn(app: &mut App, to: SocketAddr, count: usize) {
    let t0 = Instant::now();
    let mut buf = [0u8; 1];
    for _ in 0..count {
        let s = app
            .tcp_connect(to, Duration::from_secs(5))
            .unwrap_or_else(|e| fail(e));
        while let Err(e) = app.write(&s, b"c") {
            match e.kind() {
                io::ErrorKind::WouldBlock => wait(app),
                _ => fail(e),
            }
        }
        let mut drained = false;
        loop {
            match app.read(&s, &mut buf) {
                Ok(0) => fail(io::ErrorKind::UnexpectedEof.into()),
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => idle(app, &mut drained),
                Err(e) => fail(e),
            }
        }
        app.close(s).unwrap_or_else(|e| fail(e));
    }
    println!(
        "conn {count} per-second {:.0}",
        count as f64 / t0.elapsed().as_secs_f64()
    );
}

fn rr(app: &mut App, to: SocketAddr, count: usize, size: usize) {
    let s = app
        .tcp_connect(to, Duration::from_secs(5))
        .unwrap_or_else(|e| fail(e));
    let req = vec![0x5au8; size];
    let mut buf = vec![0u8; size.max(1)];
    let mut lat = Vec::with_capacity(count);
    for _ in 0..count {
        let t0 = Instant::now();
        let mut off = 0;
        while off < size {
            match app.write(&s, &req[off..]) {
                Ok(k) => off += k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => wait(app),
                Err(e) => fail(e),
            }
        }
        let mut got = 0;
        let mut drained = false;
        while got < size {
            match app.read(&s, &mut buf[..size - got]) {
                Ok(0) => fail(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    got += n;
                    drained = false;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => idle(app, &mut drained),
                Err(e) => fail(e),
            }
        }
        lat.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    let _ = app.close(s);
    std::thread::sleep(Duration::from_millis(50));
    lat.sort_by(|a, b| a.total_cmp(b));
    let q = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    println!("rr {count} p50 {:.1} p99 {:.1}", q(0.5), q(0.99));
}

fn main() {
    let mut path = None;
    let mut mode = None;
    let mut addr: Option<SocketAddr> = None;
    let mut count = 1000usize;
    let mut size = 64usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || {
            args.next()
                .unwrap_or_else(|| usage(&format!("`{a}' needs a value")))
        };
        match a.as_str() {
            "--socket" => path = Some(val()),
            "--listen" | "--connect" => {
                let v = val();
                addr = Some(
                    v.parse()
                        .unwrap_or_else(|_| usage(&format!("bad address `{v}'"))),
                );
            }
            "--count" => count = val().parse().unwrap_or_else(|_| usage("bad count")),
            "--size" => size = val().parse().unwrap_or_else(|_| usage("bad size")),
            "sink" | "send" | "echo" | "rr" | "conn" => mode = Some(a.clone()),
            _ => usage(&format!("unknown argument `{a}'")),
        }
    }
    let path = path.unwrap_or_else(|| usage("--socket is required"));
    let addr = addr.unwrap_or_else(|| usage("--listen or --connect is required"));
    let mut app = App::attach(&path, "sluice-tcp").unwrap_or_else(|e| fail(e));
    match mode.as_deref() {
        Some("sink") => sink(&mut app, addr),
        Some("send") => send(&mut app, addr),
        Some("echo") => echo(&mut app, addr),
        Some("rr") => rr(&mut app, addr, count.max(1), size.max(1)),
        Some("conn") => conn(&mut app, addr, count.max(1)),
        _ => usage("a mode is required"),
    }
}
