//! `sluice-udp-bench`: the kernel-socket side of `scripts/hoststack-bench.sh` (a plain
//! Linux UDP client and echo server, no Sluice code), so the host stack and the kernel are
//! measured by the same client.
//!
//! - `sluice-udp-bench serve <addr:port>`: echoes every datagram (the kernel baseline).
//! - `sluice-udp-bench latency <addr:port> <count> <size>`: one datagram in flight;
//!   prints `rtt_us p50 p99 p999 max`.
//! - `sluice-udp-bench rate <addr:port> <count> <size> <window>`: keeps `window`
//!   datagrams in flight (a lost one is replaced after 50 ms); prints `pps <echoes/s>
//!   lost <n>`.
//!
//! Every echo is checked byte for byte against what was sent (a sequence number and a
//! pattern); a mismatch exits 1.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

fn die(e: &str) -> ! {
    eprintln!("sluice-udp-bench: {e}");
    std::process::exit(1)
}

fn arg<T: std::str::FromStr>(a: &[String], i: usize, what: &str) -> T {
    let v = a.get(i).unwrap_or_else(|| die(&format!("missing {what}")));
    v.parse()
        .unwrap_or_else(|_| die(&format!("bad {what} `{v}'")))
}

fn fill(buf: &mut [u8], seq: u64) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i as u64).wrapping_mul(7).wrapping_add(seq) as u8;
    }
    if buf.len() >= 8 {
        buf[..8].copy_from_slice(&seq.to_le_bytes());
    }
}

fn check(buf: &[u8], size: usize) -> Option<u64> {
    if buf.len() != size || size < 8 {
        return None;
    }
    let seq = u64::from_le_bytes(buf[..8].try_into().ok()?);
    let mut want = vec![0u8; size];
    fill(&mut want, seq);
    (want == buf).then_some(seq)
}

fn client(to: SocketAddr) -> UdpSocket {
    let bind = if to.is_ipv6() { "[::]:0" } else { "0.0.0.0:0" };
    let s = UdpSocket::bind(bind).unwrap_or_else(|e| die(&format!("bind: {e}")));
    s.connect(to)
        .unwrap_or_else(|e| die(&format!("connect: {e}")));
    s
}

fn pct(v: &[f64], p: f64) -> f64 {
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    match a.first().map(String::as_str) {
        Some("serve") => {
            let s = UdpSocket::bind(arg::<SocketAddr>(&a, 1, "address"))
                .unwrap_or_else(|e| die(&format!("bind: {e}")));
            let mut b = vec![0u8; 65536];
            loop {
                if let Ok((n, from)) = s.recv_from(&mut b) {
                    let _ = s.send_to(&b[..n], from);
                }
            }
        }
        Some("latency") => {
            let to: SocketAddr = arg(&a, 1, "address");
            let (count, size): (usize, usize) = (arg(&a, 2, "count"), arg(&a, 3, "size"));
            let size = size.max(8);
            let s = client(to);
            s.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
            let (mut out, mut inb) = (vec![0u8; size], vec![0u8; 65536]);
            let mut rtt = Vec::with_capacity(count);
            let mut lost = 0u64;
            for seq in 0..count as u64 {
                fill(&mut out, seq);
                let t0 = Instant::now();
                s.send(&out).unwrap_or_else(|e| die(&format!("send: {e}")));
                loop {
                    match s.recv(&mut inb) {
                        Ok(n) => match check(&inb[..n], size) {
                            Some(x) if x == seq => {
                                rtt.push(t0.elapsed().as_secs_f64() * 1e6);
                                break;
                            }
                            Some(_) => continue, // a late echo of a lost one
                            None => die("echo differs from what was sent"),
                        },
                        Err(_) => {
                            lost += 1;
                            break;
                        }
                    }
                }
            }
            if rtt.is_empty() {
                die("no echo at all");
            }
            rtt.sort_by(f64::total_cmp);
            println!(
                "rtt_us {:.1} {:.1} {:.1} {:.1} lost {lost}",
                pct(&rtt, 0.5),
                pct(&rtt, 0.99),
                pct(&rtt, 0.999),
                rtt[rtt.len() - 1]
            );
        }
        Some("rate") => {
            let to: SocketAddr = arg(&a, 1, "address");
            let (count, size, window): (u64, usize, u64) =
                (arg(&a, 2, "count"), arg(&a, 3, "size"), arg(&a, 4, "window"));
            let size = size.max(8);
            let s = client(to);
            s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
            let (mut out, mut inb) = (vec![0u8; size], vec![0u8; 65536]);
            let (mut sent, mut got, mut lost) = (0u64, 0u64, 0u64);
            let t0 = Instant::now();
            while got < count {
                while sent - got - lost < window && sent < count + lost {
                    fill(&mut out, sent);
                    if s.send(&out).is_err() {
                        break;
                    }
                    sent += 1;
                }
                match s.recv(&mut inb) {
                    Ok(n) => {
                        if check(&inb[..n], size).is_none() {
                            die("echo differs from what was sent");
                        }
                        got += 1;
                    }
                    // Nothing for 50 ms: what is in flight is lost; send more.
                    Err(_) => lost += sent - got - lost,
                }
            }
            let dt = t0.elapsed().as_secs_f64();
            println!("pps {:.0} lost {lost}", got as f64 / dt);
        }
        _ => die("usage: serve <addr> | latency <addr> <count> <size> | rate <addr> <count> <size> <window>"),
    }
}
