//! Network-namespace helpers shared by the netns test files: whether namespaces can be
//! made here, a thread inside a namespace, and a TCP transfer checked byte for byte.

use super::sh;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Why network-namespace tests cannot run here, if they cannot (not root, no iproute2, or
/// namespaces refused: probed with a namespace unique to this call, since the tests of one
/// file run in parallel threads of one process).
pub fn netns_skip_reason() -> Option<String> {
    if let Some(why) = sluice_infra::testing::not_root("network namespaces and AF_PACKET") {
        return Some(why);
    }
    if let Some(why) = sluice_infra::testing::missing_tool("ip", "-V") {
        return Some(why);
    }
    static PROBES: AtomicUsize = AtomicUsize::new(0);
    let n = PROBES.fetch_add(1, Ordering::Relaxed);
    let probe = format!("sl{}probe{n}", std::process::id());
    if sh(&["ip", "netns", "add", &probe]).is_err() {
        return Some("cannot create network namespaces".into());
    }
    let _ = sh(&["ip", "netns", "del", &probe]);
    None
}

/// Runs `f` on a thread inside network namespace `ns`.
pub fn spawn_in_ns<R: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> R + Send + 'static,
) -> JoinHandle<R> {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        // SAFETY: setns(2) on this thread with a valid namespace fd.
        let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
}

/// Accepts one connection on `l`, failing (naming the listener's port) if none arrives
/// within `limit`: a lost SYN or handshake otherwise hangs the test. The listener is left
/// non-blocking; the accepted socket is blocking.
pub fn accept_by(l: &TcpListener, limit: Duration) -> (TcpStream, SocketAddr) {
    l.set_nonblocking(true).unwrap();
    let t0 = Instant::now();
    loop {
        match l.accept() {
            Ok((c, from)) => {
                c.set_nonblocking(false).unwrap();
                return (c, from);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let port = l.local_addr().map(|a| a.port()).unwrap_or(0);
                assert!(
                    t0.elapsed() < limit,
                    "kernel listener on port {port}: no connection accepted in {limit:?}"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
}

/// Sends `bytes` over TCP from namespace `a` to `dst`:5201 in namespace `b` in writes of
/// 64 KiB (so the sender's stack makes aggregates) and checks that every byte arrived
/// intact: the receiver's digest, sent back, equals the sender's.
pub fn tcp_transfer(a: &str, b: &str, dst: &str, bytes: usize) {
    let (dst, dst2) = (dst.to_string(), dst.to_string());
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let server = spawn_in_ns(b, move || {
        let l = TcpListener::bind((dst.as_str(), 5201)).expect("bind");
        ready_tx.send(()).unwrap();
        let (mut s, _) = accept_by(&l, Duration::from_secs(20));
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let (mut n, mut sum) = (0usize, 0u64);
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let k = s.read(&mut buf).expect("read");
            if k == 0 {
                break;
            }
            for &x in &buf[..k] {
                sum = sum.wrapping_mul(31).wrapping_add(x as u64);
            }
            n += k;
        }
        s.write_all(&sum.to_be_bytes()).unwrap();
        (n, sum)
    });
    ready_rx.recv().unwrap();
    let client = spawn_in_ns(a, move || {
        let addr: SocketAddr = format!("{dst2}:5201").parse().unwrap();
        let t0 = Instant::now();
        // The first SYN may go while the hosts resolve their gateways.
        let mut s = loop {
            match TcpStream::connect_timeout(&addr, Duration::from_secs(3)) {
                Ok(s) => break s,
                Err(e) if t0.elapsed() > Duration::from_secs(15) => panic!("connect: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        };
        s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let chunk: Vec<u8> = (0..65536u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let mut sum = 0u64;
        let mut left = bytes;
        while left > 0 {
            let k = left.min(chunk.len());
            s.write_all(&chunk[..k]).expect("write");
            for &x in &chunk[..k] {
                sum = sum.wrapping_mul(31).wrapping_add(x as u64);
            }
            left -= k;
        }
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut back = [0u8; 8];
        s.read_exact(&mut back).expect("server's digest");
        (sum, u64::from_be_bytes(back))
    });
    let (sent_sum, echoed) = client.join().expect("client");
    let (n, got_sum) = server.join().expect("server");
    assert_eq!(n, bytes, "bytes received");
    assert_eq!(got_sum, sent_sum, "bytes intact");
    assert_eq!(echoed, sent_sum);
}
