//! linux-cp end to end (root; otherwise every test prints SKIPPED and passes).
//!
//! Topology, all in namespaces this file creates (`lcp<pid><n><x>`, removed on drop):
//! Sluice runs inside namespace S (`ip netns exec`) and attaches, with af_packet, the S ends
//! of two veths whose other ends are `eth0` of host namespaces A (10.81.0.2/24, fd81::2/64)
//! and B (10.83.0.2/24). Both Sluice interfaces get a Linux twin in the control-plane
//! namespace L (`linux-cp { default netns L }`), where the addresses and routes are
//! configured — as a routing daemon would — and Sluice follows by netlink.

#[path = "common/mod.rs"]
mod common;

use common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn skip_reason() -> Option<String> {
    if let Some(why) = sluice_infra::testing::not_root("namespaces, taps and AF_PACKET") {
        return Some(why);
    }
    if sh(&["ip", "-V"]).is_err() {
        return Some("`ip' (iproute2) is not installed".into());
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Some("no /dev/net/tun".into());
    }
    None
}

macro_rules! skip_unless_possible {
    () => {
        if let Some(why) = skip_reason() {
            sluice_infra::testing::skip(&why);
            return;
        }
    };
}

/// Namespaces of one test, deleted on drop (their veths and taps go with them).
struct Netns {
    tag: String,
    names: Vec<String>,
}

impl Netns {
    fn new(t: &str) -> Netns {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        Netns {
            tag: format!("lcp{}{n}{t}", std::process::id() % 100000),
            names: Vec::new(),
        }
    }
    fn add(&mut self, x: &str) -> String {
        let name = format!("{}{x}", self.tag);
        must(&["ip", "netns", "add", &name]);
        must(&["ip", "-n", &name, "link", "set", "lo", "up"]);
        self.names.push(name.clone());
        name
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for n in self.names.iter().rev() {
            let _ = sh(&["ip", "netns", "del", n]);
        }
    }
}

/// Runs `f` on a thread inside namespace `ns`.
fn in_netns<R: Send + 'static>(ns: &str, f: impl FnOnce() -> R + Send + 'static) -> R {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let fd = std::fs::File::open(&path).unwrap();
        assert_eq!(
            // SAFETY: setns(2) on an open namespace fd; only this thread moves.
            unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) },
            0
        );
        f()
    })
    .join()
    .unwrap()
}

/// Starts Sluice inside namespace `ns`.
fn start_in(ns: &str, tag: &str, extra: &str) -> Daemon {
    Daemon::start_in(Some(ns), tag, extra)
}

/// A veth from Sluice's namespace `s` (end `<name>`) to `eth0` of a new namespace.
fn veth(s: &str, name: &str, host: &str, addrs: &[&str]) {
    must(&[
        "ip", "link", "add", name, "netns", s, "type", "veth", "peer", "name", "eth0", "netns",
        host,
    ]);
    must(&["ip", "-n", s, "link", "set", name, "up"]);
    for a in addrs {
        let mut c = vec!["ip", "-n", host, "addr", "add", a, "dev", "eth0"];
        if a.contains(':') {
            c.push("nodad");
        }
        must(&c);
    }
    must(&["ip", "-n", host, "link", "set", "eth0", "up"]);
}

/// [`wait_for`] with linux-cp's 10 s bound and `show lcp` in the failure message (its
/// counters of netlink messages applied and refused tell why a change never showed).
fn lcp_wait_for(d: &Daemon, cmd: &str, needle: &str) -> String {
    lcp_wait(d, cmd, needle, true)
}

/// [`wait_gone`] as [`lcp_wait_for`].
fn lcp_wait_gone(d: &Daemon, cmd: &str, needle: &str) -> String {
    lcp_wait(d, cmd, needle, false)
}

fn lcp_wait(d: &Daemon, cmd: &str, needle: &str, present: bool) -> String {
    let mut last = String::new();
    wait_until(
        Duration::from_secs(10),
        Duration::from_millis(20),
        || {
            last = d.ok(cmd);
            last.contains(needle) == present
        },
        || {
            format!(
                "`{needle}' {} `{cmd}':\n{}\nshow lcp:\n{}",
                if present { "not in" } else { "still in" },
                d.ok(cmd),
                d.ok("show lcp")
            )
        },
    );
    last
}

/// Whether any of 3 echo requests (the first may be lost to ARP resolution) is answered.
fn ping(ns: &str, dst: &str) -> bool {
    sh(&[
        "ip", "netns", "exec", ns, "ping", "-c", "3", "-i", "0.3", "-W", "1", dst,
    ])
    .is_ok()
}

fn counter(show_lcp: &str, name: &str) -> u64 {
    let s = show_lcp.split(&format!(" {name} ")).nth(1).unwrap_or("");
    s.split_whitespace()
        .next()
        .unwrap_or("0")
        .parse()
        .unwrap_or(0)
}

/// A TCP connection from namespace `a` to `addr` (a Sluice address whose TCP is punted to
/// its twin) is answered by a listener in Linux's namespace `l`, which sends `msg`.
fn tcp_answered_by_linux(l: &str, a: &str, addr: &str, msg: &'static [u8; 4]) {
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    let tl = in_netns(l, move || TcpListener::bind(addr).unwrap());
    let server = std::thread::spawn(move || {
        let (mut c, _) = tl.accept().unwrap();
        c.write_all(msg).unwrap();
    });
    let got = in_netns(a, move || {
        let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 4];
        c.read_exact(&mut buf).unwrap();
        buf
    });
    assert_eq!(&got, msg);
    server.join().unwrap();
}

#[test]
fn twins_punt_and_netlink_sync() {
    skip_unless_possible!();
    if sh(&["ping", "-V"]).is_err() {
        sluice_infra::testing::skip("`ping' (iputils-ping) is not installed");
        return;
    }
    let mut ns = Netns::new("a");
    let (s, a, b, l) = (ns.add("S"), ns.add("A"), ns.add("B"), ns.add("L"));
    let (va, vb) = (format!("{}va", ns.tag), format!("{}vb", ns.tag));
    let (ta, tb) = (format!("{}ta", ns.tag), format!("{}tb", ns.tag));
    veth(&s, &va, &a, &["10.81.0.2/24", "fd81::2/64"]);
    veth(&s, &vb, &b, &["10.83.0.2/24"]);
    // A and B route through Sluice (the addresses Linux gives the twins below).
    must(&[
        "ip",
        "-n",
        &b,
        "route",
        "add",
        "default",
        "via",
        "10.83.0.1",
    ]);
    must(&["ip", "-n", &a, "addr", "add", "10.82.0.1/32", "dev", "lo"]);
    must(&[
        "ip",
        "-n",
        &a,
        "route",
        "add",
        "10.83.0.0/24",
        "via",
        "10.81.0.1",
    ]);
    let d = start_in(&s, "lcp", &format!("linux-cp {{ default netns {l} }}"));
    let (ha, hb) = (format!("host-{va}"), format!("host-{vb}"));
    for (v, h, t) in [(&va, &ha, &ta), (&vb, &hb, &tb)] {
        d.ok(&format!("create host-interface name {v}"));
        d.ok(&format!("set interface state {h} up"));
        d.ok(&format!("lcp create {h} host-if {t}"));
    }
    let show = d.ok("show lcp");
    assert!(show.contains(&format!("lcp default netns {l}")), "{show}");
    assert!(show.contains(&format!("itf-pair: {ha} tap")), "{show}");
    // Twin: same MAC as the Sluice interface, in L, up.
    let hw = d.ok(&format!("show hardware-interfaces {ha}"));
    let link = must(&["ip", "-n", &l, "-br", "link", "show", &ta]);
    let mac = link.split_whitespace().nth(2).unwrap().to_string();
    assert!(hw.contains(&mac), "twin MAC {mac} not in:\n{hw}");
    assert!(link.contains("UP"), "{link}");
    let rc = d.ok("show running-config");
    assert!(
        rc.contains(&format!("lcp create {ha} host-if {ta} netns {l}")),
        "{rc}"
    );
    assert!(!rc.contains("create tap"), "{rc}");

    // Addresses configured in Linux appear on the Sluice interfaces.
    must(&["ip", "-n", &l, "addr", "add", "10.81.0.1/24", "dev", &ta]);
    must(&[
        "ip",
        "-n",
        &l,
        "-6",
        "addr",
        "add",
        "fd81::1/64",
        "dev",
        &ta,
        "nodad",
    ]);
    must(&["ip", "-n", &l, "addr", "add", "10.83.0.1/24", "dev", &tb]);
    lcp_wait_for(&d, "show interface address", "10.81.0.1/24");
    lcp_wait_for(&d, "show interface address", "fd81::1/64");
    lcp_wait_for(&d, "show interface address", "10.83.0.1/24");

    // Ping is answered by Sluice; TCP and UDP to Sluice's address are answered by Linux
    // through the twin (punt, and back out through linux-cp-xc).
    assert!(ping(&a, "10.81.0.1"), "ping 10.81.0.1 from A");
    let tl = in_netns(&l, || TcpListener::bind("10.81.0.1:7179").unwrap());
    let ul = in_netns(&l, || UdpSocket::bind("10.81.0.1:7180").unwrap());
    let server = std::thread::spawn(move || {
        let (mut c, peer) = tl.accept().unwrap();
        let mut buf = [0u8; 5];
        c.read_exact(&mut buf).unwrap();
        c.write_all(b"world").unwrap();
        ul.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let (n, _) = ul.recv_from(&mut buf).unwrap();
        (peer, buf[..n].to_vec())
    });
    let got = in_netns(&a, || {
        let mut c =
            TcpStream::connect_timeout(&"10.81.0.1:7179".parse().unwrap(), Duration::from_secs(5))
                .unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(b"hello").unwrap();
        let mut buf = [0u8; 5];
        c.read_exact(&mut buf).unwrap();
        let u = UdpSocket::bind("0.0.0.0:0").unwrap();
        u.send_to(b"udp!", "10.81.0.1:7180").unwrap();
        buf
    });
    assert_eq!(&got, b"world");
    let (peer, udp) = server.join().unwrap();
    assert_eq!(peer.ip().to_string(), "10.81.0.2");
    assert_eq!(udp, b"udp!");
    let errs = d.ok("show errors");
    assert!(errs.contains("punted to the Linux twin"), "{errs}");
    assert!(
        errs.contains("sent by Linux out of the paired interface"),
        "{errs}"
    );
    // Linux learned A's MAC (from the ARP copies), Sluice its own.
    let n = must(&["ip", "-n", &l, "neigh", "show", "10.81.0.2", "dev", &ta]);
    assert!(n.contains("lladdr"), "Linux did not learn 10.81.0.2: {n}");

    // A VLAN sub-interface's twin: untagged in Linux, tagged on the wire (when the kernel
    // can make VLAN interfaces for A's side).
    let tv = format!("{}tv", ns.tag);
    let vlan = sh(&[
        "ip", "-n", &a, "link", "add", "link", "eth0", "name", "eth0.100", "type", "vlan", "id",
        "100",
    ])
    .is_ok();
    if !vlan {
        eprintln!("note: no VLAN interfaces in this kernel (8021q): sub-interface twin not tested");
    } else {
        must(&[
            "ip",
            "-n",
            &a,
            "addr",
            "add",
            "10.84.0.2/24",
            "dev",
            "eth0.100",
        ]);
        must(&["ip", "-n", &a, "link", "set", "eth0.100", "up"]);
        d.ok(&format!("create sub-interfaces {ha} 100"));
        d.ok(&format!("set interface state {ha}.100 up"));
        d.ok(&format!("lcp create {ha}.100 host-if {tv}"));
        must(&["ip", "-n", &l, "addr", "add", "10.84.0.1/24", "dev", &tv]);
        lcp_wait_for(&d, "show interface address", "10.84.0.1/24");
        tcp_answered_by_linux(&l, &a, "10.84.0.1:7182", b"vlan");
        // Linux's own traffic over the sub-interface twin: its ARP and echo requests leave
        // tagged, A's replies (ARP copy, echo reply) are punted back untagged.
        assert!(ping(&l, "10.84.0.2"), "ping from Linux over the VLAN twin");
    }
    // Routes added in Linux appear in Sluice's FIB: next hop, ECMP, blackhole, IPv6; and
    // forward: B pings A's 10.82.0.1 through the learned route.
    must(&[
        "ip",
        "-n",
        &l,
        "route",
        "add",
        "10.82.0.0/16",
        "via",
        "10.81.0.2",
    ]);
    must(&[
        "ip",
        "-n",
        &l,
        "route",
        "add",
        "10.90.0.0/16",
        "nexthop",
        "via",
        "10.81.0.2",
        "weight",
        "1",
        "nexthop",
        "via",
        "10.83.0.2",
        "weight",
        "3",
    ]);
    must(&["ip", "-n", &l, "route", "add", "blackhole", "10.91.0.0/16"]);
    must(&[
        "ip",
        "-n",
        &l,
        "-6",
        "route",
        "add",
        "2001:db8:81::/48",
        "via",
        "fd81::2",
    ]);
    lcp_wait_for(&d, "show ip fib 10.82.0.0/16", "via 10.81.0.2");
    lcp_wait_for(&d, "show ip fib 10.90.0.0/16", "buckets:4 ");
    lcp_wait_for(&d, "show ip fib 10.91.0.0/16", "dpo-drop");
    lcp_wait_for(&d, "show ip6 fib 2001:db8:81::/48", "via fd81::2");
    let fib = d.ok("show ip fib 10.90.0.0/16");
    // Weights 1 and 3: four load-balance buckets, three of them through 10.83.0.2.
    assert_eq!(fib.matches(" via 10.83.0.2 ").count(), 3, "{fib}");
    assert!(
        ping(&b, "10.82.0.1"),
        "B → 10.82.0.1 over the learned route"
    );
    must(&["ip", "-n", &l, "route", "del", "10.82.0.0/16"]);
    lcp_wait_gone(&d, "show ip fib 10.82.0.0/16", "via 10.81.0.2");
    assert!(!ping(&b, "10.82.0.1"), "withdrawn route still forwards");

    // A static neighbour in Linux becomes a static neighbour in Sluice.
    must(&[
        "ip",
        "-n",
        &l,
        "neigh",
        "add",
        "10.81.0.9",
        "lladdr",
        "02:00:00:00:81:09",
        "dev",
        &ta,
        "nud",
        "permanent",
    ]);
    lcp_wait_for(&d, "show ip neighbors", "02:00:00:00:81:09");
    must(&["ip", "-n", &l, "neigh", "del", "10.81.0.9", "dev", &ta]);
    lcp_wait_gone(&d, "show ip neighbors", "02:00:00:00:81:09");

    // Not applied, counted: a route through a non-twin interface, a route in a table
    // Sluice does not have.
    let before = d.ok("show lcp");
    must(&[
        "ip", "-n", &l, "link", "add", "other0", "type", "veth", "peer", "name", "other1",
    ]);
    must(&["ip", "-n", &l, "link", "set", "other0", "up"]);
    must(&[
        "ip",
        "-n",
        &l,
        "route",
        "add",
        "10.92.0.0/16",
        "dev",
        "other0",
    ]);
    must(&[
        "ip",
        "-n",
        &l,
        "route",
        "add",
        "10.93.0.0/16",
        "via",
        "10.81.0.2",
        "table",
        "77",
    ]);
    wait_until(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || {
            let now = d.ok("show lcp");
            counter(&now, "unknown-interface") > counter(&before, "unknown-interface")
                && counter(&now, "unknown-table") > counter(&before, "unknown-table")
        },
        || d.ok("show lcp"),
    );
    assert!(!d.ok("show ip fib").contains("10.92.0.0/16"));

    // Admin state both ways.
    d.ok(&format!("set interface state {hb} down"));
    wait_until(
        Duration::from_secs(5),
        Duration::from_millis(50),
        || !must(&["ip", "-n", &l, "-br", "link", "show", &tb]).contains("UP"),
        || "twin not brought down".into(),
    );
    d.ok(&format!("set interface state {hb} up"));
    wait_until(
        Duration::from_secs(5),
        Duration::from_millis(50),
        || must(&["ip", "-n", &l, "-br", "link", "show", &tb]).contains("UP"),
        || "twin not brought up".into(),
    );
    d.ok(&format!("set interface mtu 1400 {hb}"));
    wait_until(
        Duration::from_secs(5),
        Duration::from_millis(50),
        || must(&["ip", "-n", &l, "link", "show", &tb]).contains("mtu 1400"),
        || "twin MTU not mirrored".into(),
    );
    // MAC: a change is mirrored; then the original is put back (the peer's ARP cache).
    let link = must(&["ip", "-n", &l, "link", "show", &tb]);
    let orig = link
        .split("link/ether ")
        .nth(1)
        .and_then(|x| x.split_whitespace().next())
        .unwrap()
        .to_string();
    d.ok(&format!("set interface mac address {hb} 02:00:5e:10:20:30"));
    wait_until(
        Duration::from_secs(5),
        Duration::from_millis(50),
        || must(&["ip", "-n", &l, "link", "show", &tb]).contains("link/ether 02:00:5e:10:20:30"),
        || "twin MAC not mirrored".into(),
    );
    d.ok(&format!("set interface mac address {hb} {orig}"));
    wait_until(
        Duration::from_secs(5),
        Duration::from_millis(50),
        || must(&["ip", "-n", &l, "link", "show", &tb]).contains(&format!("link/ether {orig}")),
        || "twin MAC not restored".into(),
    );
    // ... and the other way: a MAC given to the twin in Linux becomes the interface's, and
    // is not echoed back (Linux keeps the last one it set).
    let hw_mac = |d: &Daemon| d.ok(&format!("show hardware-interfaces {hb}"));
    for mac in ["02:00:5e:aa:bb:01", "02:00:5e:aa:bb:02"] {
        must(&["ip", "-n", &l, "link", "set", &tb, "address", mac]);
    }
    wait_until(
        Duration::from_secs(5),
        Duration::from_millis(50),
        || hw_mac(&d).contains("02:00:5e:aa:bb:02"),
        || format!("Linux's MAC not applied:\n{}", hw_mac(&d)),
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        must(&["ip", "-n", &l, "link", "show", &tb]).contains("link/ether 02:00:5e:aa:bb:02"),
        "Sluice echoed an old MAC back to Linux"
    );
    must(&["ip", "-n", &l, "link", "set", &tb, "address", &orig]);
    wait_until(
        Duration::from_secs(5),
        Duration::from_millis(50),
        || hw_mac(&d).contains(&orig),
        || "interface MAC not restored from Linux".into(),
    );
    let state = |d: &Daemon| {
        d.ok("show interface")
            .lines()
            .find(|x| x.starts_with(&format!("{hb} ")))
            .and_then(|x| x.split_whitespace().nth(2).map(String::from))
            .unwrap_or_default()
    };
    must(&["ip", "-n", &l, "link", "set", &tb, "down"]);
    wait_until(
        Duration::from_secs(5),
        Duration::from_millis(50),
        || state(&d) == "down",
        || d.ok("show interface"),
    );
    must(&["ip", "-n", &l, "link", "set", &tb, "up"]);
    wait_until(
        Duration::from_secs(5),
        Duration::from_millis(50),
        || state(&d) == "up",
        || d.ok("show interface"),
    );

    // The twin deleted in Linux: the pair goes, nothing else.
    must(&["ip", "-n", &l, "link", "del", &tb]);
    lcp_wait_gone(&d, "show lcp", &format!("itf-pair: {hb}"));
    assert!(d.ok("show interface").contains(&hb));

    // Deleting the pair under traffic (A floods UDP to Sluice's address, punted to the
    // twin) does not crash; then the Sluice interface of a pair is deleted.
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let flood = std::thread::spawn(move || {
        let a = format!("/run/netns/{a}");
        let fd = std::fs::File::open(&a).unwrap();
        assert_eq!(
            // SAFETY: setns(2) on an open namespace fd; only this thread moves.
            unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) },
            0
        );
        let u = UdpSocket::bind("0.0.0.0:0").unwrap();
        let to: SocketAddr = "10.81.0.1:7181".parse().unwrap();
        let mut n = 0u64;
        while !st.load(Ordering::Relaxed) {
            let _ = u.send_to(&[0u8; 200], to);
            n += 1;
        }
        n
    });
    std::thread::sleep(Duration::from_millis(300));
    d.ok(&format!("lcp delete {ha}"));
    std::thread::sleep(Duration::from_millis(300));
    d.ok(&format!("lcp create {ha} host-if {ta}"));
    std::thread::sleep(Duration::from_millis(300));
    d.ok(&format!("delete host-interface name {va}"));
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    assert!(flood.join().unwrap() > 0);
    // The sub-interface went with its parent, and its pair with it.
    lcp_wait_gone(&d, "show lcp", "itf-pair");
    assert!(
        sh(&["ip", "-n", &l, "link", "show", &tv]).is_err(),
        "twin left behind"
    );
    assert!(
        sh(&["ip", "-n", &l, "link", "show", &ta]).is_err(),
        "twin left behind"
    );
    let err = d.cli("lcp delete local0").unwrap_err();
    assert!(err.contains("`local0' has no Linux twin"), "{err}");
    wait_until(
        Duration::from_secs(5),
        Duration::from_millis(50),
        || buffers_in_use(&d) == 0,
        || format!("buffers in use: {}", d.ok("show buffers")),
    );
    d.stop();
}

#[test]
fn bad_lcp_commands_name_the_token() {
    skip_unless_possible!();
    let mut ns = Netns::new("b");
    let s = ns.add("S");
    let d = start_in(&s, "lcpbad", "");
    for (cmd, want) in [
        (
            "lcp create nosuch0 host-if x",
            "unknown interface `nosuch0'",
        ),
        ("lcp create local0", "expected `host-if <name>'"),
        ("lcp create local0 host-if averyveryverylongname", "host-if"),
        ("lcp create local0 host-if x bogus", "`bogus'"),
        ("lcp delete local0", "`local0' has no Linux twin"),
        ("lcp default netns a/b", "netns"),
    ] {
        let e = d.cli(cmd).unwrap_err();
        assert!(e.contains(want), "`{cmd}': {e}");
        assert!(!e.contains('\n'), "`{cmd}': {e}");
    }
    d.ok("lcp default netns blue");
    assert!(d.ok("show lcp").contains("lcp default netns blue"));
    d.ok("lcp default netns");
    assert!(d.ok("show lcp").contains("lcp default netns -"));
    // A twin in a namespace that does not exist: the tap is refused, nothing is left.
    d.ok("create loopback interface");
    let e = d
        .cli(&format!(
            "lcp create loop0 host-if {}t netns {}nope",
            ns.tag, ns.tag
        ))
        .unwrap_err();
    assert!(e.contains("netns"), "{e}");
    assert!(!d.ok("show lcp").contains("itf-pair"));
    assert!(!d.ok("show interface").contains("tap"));
    d.stop();
}

/// Stops a routing daemon we started: SIGTERM (it withdraws its routes from the kernel as
/// it shuts down), SIGKILL after 10 s.
fn terminate(child: &mut std::process::Child, what: &str) {
    // SAFETY: plain kill(2) on our child's pid (`ip netns exec` execs the daemon).
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let t0 = Instant::now();
    while child.try_wait().ok().flatten().is_none() {
        if t0.elapsed() > Duration::from_secs(10) {
            eprintln!("{what} ignored SIGTERM; killed");
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.wait();
}

/// A BIRD 2 daemon in a namespace, killed on drop.
struct Bird {
    child: std::process::Child,
    sock: std::path::PathBuf,
    ns: String,
}

impl Bird {
    fn start(ns: &str, dir: &std::path::Path, name: &str, conf: &str) -> Bird {
        let cf = dir.join(format!("{name}.conf"));
        let sock = dir.join(format!("{name}.ctl"));
        std::fs::write(&cf, conf).unwrap();
        if let Err(e) = sh(&["bird", "-p", "-c", cf.to_str().unwrap()]) {
            panic!("{name}: bad BIRD configuration: {e}");
        }
        let child = Command::new("ip")
            .args(["netns", "exec", ns, "bird", "-f", "-c"])
            .arg(&cf)
            .arg("-s")
            .arg(&sock)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start bird");
        let b = Bird {
            child,
            sock,
            ns: ns.to_string(),
        };
        wait_until(
            Duration::from_secs(10),
            Duration::from_millis(20),
            || b.sock.exists(),
            || format!("{name}: BIRD did not open its control socket"),
        );
        b
    }
    fn cmd(&self, args: &[&str]) -> String {
        let mut c = vec!["birdc", "-s", self.sock.to_str().unwrap()];
        c.extend_from_slice(args);
        sh(&c).unwrap_or_else(|e| e)
    }
}

impl Drop for Bird {
    /// SIGTERM: BIRD withdraws its routes from the kernel as it shuts down.
    fn drop(&mut self) {
        terminate(&mut self.child, &format!("bird in {}", self.ns));
    }
}

fn bird_conf(id: &str, local_as: u32, peer: &str, peer_as: u32, direct_if: &str) -> String {
    format!(
        "router id {id};
protocol device {{ scan time 1; }}
protocol direct lan {{ ipv4; interface \"{direct_if}\"; }}
protocol kernel {{ ipv4 {{ import none; export where source = RTS_BGP; }}; }}
protocol bgp peer {{
  local {id} as {local_as};
  neighbor {peer} as {peer_as};
  connect delay time 1; connect retry time 2; error wait time 1, 2;
  hold time 9; keepalive time 3;
  ipv4 {{ import all; export where source = RTS_DEVICE; }};
}}
"
    )
}

/// Two routers across Sluice: the control-plane namespace L (twins of Sluice's interfaces
/// `tp` towards P, 10.85.0.1/24, and `ta` towards host A, 10.86.0.1/24) and router P
/// (10.85.0.2 on `eth0`, LAN 10.87.0.0/24 on `lan0` with host H, 10.87.0.2, behind it).
struct RouterTopo {
    ns: Netns,
    d: Daemon,
    l: String,
    p: String,
    a: String,
    tp: String,
    ta: String,
}

impl RouterTopo {
    /// `None` (after printing SKIPPED) when the tests cannot run here.
    fn new(tag: &str) -> Option<RouterTopo> {
        if let Some(why) = skip_reason() {
            sluice_infra::testing::skip(&why);
            return None;
        }
        for tool in ["bird", "birdc", "ping"] {
            if Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .stdout(Stdio::null())
                .status()
                .map_or(true, |s| !s.success())
            {
                sluice_infra::testing::skip(&format!(
                    "`{tool}' is not installed (apt-get install bird2 iputils-ping)"
                ));
                return None;
            }
        }
        let mut ns = Netns::new(tag);
        let (s, l, p, a, h) = (
            ns.add("S"),
            ns.add("L"),
            ns.add("P"),
            ns.add("A"),
            ns.add("H"),
        );
        let t = ns.tag.clone();
        let (vp, va) = (format!("{t}vp"), format!("{t}va"));
        let (tp, ta) = (format!("{t}tp"), format!("{t}ta"));
        veth(&s, &vp, &p, &["10.85.0.2/24"]);
        veth(&s, &va, &a, &["10.86.0.2/24"]);
        must(&[
            "ip",
            "-n",
            &a,
            "route",
            "add",
            "default",
            "via",
            "10.86.0.1",
        ]);
        must(&[
            "ip", "-n", &p, "link", "add", "lan0", "type", "veth", "peer", "name", "eth0", "netns",
            &h,
        ]);
        must(&["ip", "-n", &p, "addr", "add", "10.87.0.1/24", "dev", "lan0"]);
        must(&["ip", "-n", &p, "link", "set", "lan0", "up"]);
        must(&["ip", "-n", &h, "addr", "add", "10.87.0.2/24", "dev", "eth0"]);
        must(&["ip", "-n", &h, "link", "set", "eth0", "up"]);
        must(&[
            "ip",
            "-n",
            &h,
            "route",
            "add",
            "default",
            "via",
            "10.87.0.1",
        ]);
        let _ = sh(&[
            "ip",
            "netns",
            "exec",
            &p,
            "sysctl",
            "-qw",
            "net.ipv4.ip_forward=1",
        ]);
        let d = start_in(
            &s,
            &format!("lcpr{tag}"),
            &format!("linux-cp {{ default netns {l} }}"),
        );
        for (v, tw) in [(&vp, &tp), (&va, &ta)] {
            d.ok(&format!("create host-interface name {v}"));
            d.ok(&format!("set interface state host-{v} up"));
            d.ok(&format!("lcp create host-{v} host-if {tw}"));
        }
        must(&["ip", "-n", &l, "addr", "add", "10.85.0.1/24", "dev", &tp]);
        must(&["ip", "-n", &l, "addr", "add", "10.86.0.1/24", "dev", &ta]);
        lcp_wait_for(&d, "show interface address", "10.86.0.1/24");
        Some(RouterTopo {
            ns,
            d,
            l,
            p,
            a,
            tp,
            ta,
        })
    }
}

/// BIRD in the control-plane namespace peers by BGP, across Sluice, with BIRD in a peer
/// router namespace P; the prefixes they exchange are forwarded by Sluice (A pings H
/// behind P), and a withdrawal removes the route from Sluice's FIB.
#[test]
fn bird_bgp_over_sluice() {
    let Some(RouterTopo {
        ns: _ns,
        d,
        l,
        p,
        a,
        ta,
        ..
    }) = RouterTopo::new("g")
    else {
        return;
    };
    let r1 = Bird::start(
        &l,
        &d.dir,
        "r1",
        &bird_conf("10.85.0.1", 65001, "10.85.0.2", 65002, &ta),
    );
    let r2 = Bird::start(
        &p,
        &d.dir,
        "r2",
        &bird_conf("10.85.0.2", 65002, "10.85.0.1", 65001, "lan0"),
    );
    learned_and_forwarded(
        &d,
        &a,
        "BGP",
        "show ip fib 10.87.0.0/24",
        "via 10.85.0.2",
        "10.87.0.2",
        Instant::now(),
        || {
            format!(
                "r1: {}\nr2: {}\n{}",
                r1.cmd(&["show", "protocols", "all", "peer"]),
                r2.cmd(&["show", "protocols"]),
                must(&["ip", "-n", &p, "route"])
            )
        },
    );
    // Withdrawal: P stops announcing its LAN.
    r2.cmd(&["disable", "lan"]);
    lcp_wait_gone(&d, "show ip fib 10.87.0.0/24", "via 10.85.0.2");
    assert!(!ping(&a, "10.87.0.2"), "withdrawn route still forwards");
    r2.cmd(&["enable", "lan"]);
    lcp_wait_for(&d, "show ip fib 10.87.0.0/24", "via 10.85.0.2");
    // The routing daemon restarts: it flushes its routes from the kernel as it stops (and
    // Sluice follows), and they are relearned.
    drop(r1);
    lcp_wait_gone(&d, "show ip fib 10.87.0.0/24", "via 10.85.0.2");
    let r1 = Bird::start(
        &l,
        &d.dir,
        "r1",
        &bird_conf("10.85.0.1", 65001, "10.85.0.2", 65002, &ta),
    );
    wait_until(
        Duration::from_secs(60),
        Duration::from_millis(200),
        || d.ok("show ip fib 10.87.0.0/24").contains("via 10.85.0.2"),
        || r1.cmd(&["show", "protocols", "all", "peer"]),
    );
    assert!(ping(&a, "10.87.0.2") || ping(&a, "10.87.0.2"));
    drop(r1);
    drop(r2);
    d.stop();
}

/// A loopback's twin: the address Linux gives it becomes the loopback's in Sluice, Sluice
/// answers pings to it, and TCP to it (arriving on a physical interface, so punted to that
/// interface's twin, in the same namespace) is answered by Linux.
#[test]
fn loopback_twin() {
    let Some(RouterTopo { ns, d, l, a, .. }) = RouterTopo::new("o") else {
        return;
    };
    let tlo = format!("{}lo", ns.tag);
    let lo = d.ok("create loopback interface").trim().to_string();
    d.ok(&format!("set interface state {lo} up"));
    d.ok(&format!("lcp create {lo} host-if {tlo}"));
    must(&["ip", "-n", &l, "addr", "add", "10.89.0.1/32", "dev", &tlo]);
    lcp_wait_for(&d, "show interface address", "10.89.0.1/32");
    let show = d.ok("show lcp");
    assert!(show.contains(&format!("itf-pair: {lo} tap")), "{show}");
    assert!(ping(&a, "10.89.0.1"), "ping the loopback's address from A");
    tcp_answered_by_linux(&l, &a, "10.89.0.1:7190", b"loop");
    d.ok(&format!("lcp delete {lo}"));
    d.ok(&format!("delete loopback interface intfc {lo}"));
    assert!(
        sh(&["ip", "-n", &l, "link", "show", &tlo]).is_err(),
        "twin left behind"
    );
    d.stop();
}

/// A BVI's twin: the loopback routing for bridge domain 1 (whose member is the interface
/// to A) is paired; TCP from A to the BVI's address (received on the BVI through the
/// bridge) is punted to the BVI's twin and Linux's answer, sent on the BVI, is bridged
/// back to A.
#[test]
fn bvi_twin() {
    skip_unless_possible!();
    let mut ns = Netns::new("b");
    let (s, a, l) = (ns.add("S"), ns.add("A"), ns.add("L"));
    let va = format!("{}va", ns.tag);
    let tb = format!("{}bvi", ns.tag);
    veth(&s, &va, &a, &["10.94.0.2/24"]);
    let d = start_in(&s, "lcpb", &format!("linux-cp {{ default netns {l} }}"));
    d.ok(&format!("create host-interface name {va}"));
    d.ok(&format!("set interface state host-{va} up"));
    let lo = d.ok("create loopback interface").trim().to_string();
    d.ok(&format!("set interface state {lo} up"));
    d.ok(&format!("set interface l2 bridge {lo} 1 bvi"));
    d.ok(&format!("set interface l2 bridge host-{va} 1"));
    d.ok(&format!("lcp create {lo} host-if {tb}"));
    must(&["ip", "-n", &l, "addr", "add", "10.94.0.1/24", "dev", &tb]);
    lcp_wait_for(&d, "show interface address", "10.94.0.1/24");
    assert!(ping(&a, "10.94.0.1"), "ping the BVI's address from A");
    tcp_answered_by_linux(&l, &a, "10.94.0.1:7191", b"bvi!");
    assert!(
        ping(&l, "10.94.0.2"),
        "ping from Linux through the BVI twin"
    );
    d.stop();
}

/// A routing protocol's route to P's LAN reaches Sluice and forwards: waits until `show
/// <fib> <lan>` shows `via` (printing how long after `t0`), then until A pings `host` behind
/// P through Sluice; `diag` explains a route that never came.
#[allow(clippy::too_many_arguments)]
fn learned_and_forwarded(
    d: &Daemon,
    a: &str,
    proto: &str,
    fib: &str,
    via: &str,
    host: &str,
    t0: Instant,
    diag: impl Fn() -> String,
) {
    wait_until(
        Duration::from_secs(60),
        Duration::from_millis(200),
        || d.ok(fib).contains(via),
        || {
            format!(
                "{proto} route never reached Sluice:\n{}\n{}\n{}",
                diag(),
                d.ok("show lcp"),
                d.ok("show errors")
            )
        },
    );
    eprintln!(
        "{proto}: `{fib}' shows `{via}' {:.1} s after the daemons started",
        t0.elapsed().as_secs_f64()
    );
    wait_until(
        Duration::from_secs(30),
        Duration::from_millis(200),
        || ping(a, host),
        || {
            format!(
                "A cannot reach {host} over the {proto} route:\n{}",
                d.ok(fib)
            )
        },
    );
}

/// BIRD's OSPF (`v` 2: IPv4, 3: IPv6) on a broadcast `wan` and a stub `lan`.
fn ospf_conf(v: u8, id: &str, lan: &str, wan: &str) -> String {
    let af = if v == 2 { "ipv4" } else { "ipv6" };
    format!(
        "router id {id};
protocol device {{ scan time 1; }}
protocol kernel {{ {af} {{ import none; export where source ~ [ RTS_OSPF, RTS_OSPF_IA ]; }}; }}
protocol ospf v{v} o {{
  {af} {{ import all; export none; }};
  area 0 {{
    interface \"{wan}\" {{ type broadcast; hello 1; dead 4; wait 2; }};
    interface \"{lan}\" {{ stub yes; }};
  }};
}}
"
    )
}

/// OSPFv2 between BIRD in the control-plane namespace and BIRD in router P, across Sluice:
/// the hellos to 224.0.0.5 reach Linux (`224.0.0.0/24 via local` in the pair's table, then
/// punt) and leave through the twin; the LAN P advertises is forwarded by Sluice.
#[test]
fn bird_ospf_over_sluice() {
    let Some(RouterTopo {
        ns: _ns,
        d,
        l,
        p,
        a,
        tp,
        ta,
    }) = RouterTopo::new("f")
    else {
        return;
    };
    let r1 = Bird::start(&l, &d.dir, "o1", &ospf_conf(2, "10.85.0.1", &ta, &tp));
    let r2 = Bird::start(&p, &d.dir, "o2", &ospf_conf(2, "10.85.0.2", "lan0", "eth0"));
    learned_and_forwarded(
        &d,
        &a,
        "OSPF",
        "show ip fib 10.87.0.0/24",
        "via 10.85.0.2",
        "10.87.0.2",
        Instant::now(),
        || {
            format!(
                "r1: {}\nr2: {}",
                r1.cmd(&["show", "ospf", "neighbors"]),
                r2.cmd(&["show", "ospf", "neighbors"])
            )
        },
    );
    drop(r2);
    lcp_wait_gone(&d, "show ip fib 10.87.0.0/24", "via 10.85.0.2");
    drop(r1);
    d.stop();
}

/// `ip -n <ns> -6 <args...> nodad` style helper: an IPv6 address without DAD.
fn addr6(ns: &str, a: &str, dev: &str) {
    must(&["ip", "-n", ns, "-6", "addr", "add", a, "dev", dev, "nodad"]);
}

/// OSPFv3 between BIRD in the control-plane namespace and BIRD in router P, across Sluice:
/// the hellos to ff02::5 (and the DR's ff02::6, and the link-local unicast database
/// exchange) are punted to the twin on paired interfaces and Linux's replies leave through
/// it; the IPv6 LAN P advertises lands in Sluice's FIB (via P's link-local address) and A
/// pings H behind P through Sluice.
#[test]
fn bird_ospf3_over_sluice() {
    let Some(RouterTopo {
        ns,
        d,
        l,
        p,
        a,
        tp,
        ta,
    }) = RouterTopo::new("6")
    else {
        return;
    };
    let h = format!("{}H", ns.tag);
    addr6(&l, "fd85::1/64", &tp);
    addr6(&l, "fd86::1/64", &ta);
    addr6(&p, "fd85::2/64", "eth0");
    addr6(&p, "fd87::1/64", "lan0");
    addr6(&h, "fd87::2/64", "eth0");
    addr6(&a, "fd86::2/64", "eth0");
    must(&[
        "ip", "-n", &h, "-6", "route", "add", "default", "via", "fd87::1",
    ]);
    must(&[
        "ip", "-n", &a, "-6", "route", "add", "default", "via", "fd86::1",
    ]);
    let _ = sh(&[
        "ip",
        "netns",
        "exec",
        &p,
        "sysctl",
        "-qw",
        "net.ipv6.conf.all.forwarding=1",
    ]);
    lcp_wait_for(&d, "show interface address", "fd85::1/64");
    let r1 = Bird::start(&l, &d.dir, "v1", &ospf_conf(3, "10.85.0.1", &ta, &tp));
    let r2 = Bird::start(&p, &d.dir, "v2", &ospf_conf(3, "10.85.0.2", "lan0", "eth0"));
    learned_and_forwarded(
        &d,
        &a,
        "OSPFv3",
        "show ip6 fib fd87::/64",
        "via fe80::",
        "fd87::2",
        Instant::now(),
        || {
            format!(
                "r1: {}\nr2: {}\n{}",
                r1.cmd(&["show", "ospf", "neighbors"]),
                r2.cmd(&["show", "ospf", "neighbors"]),
                must(&["ip", "-n", &l, "-6", "route"])
            )
        },
    );
    drop(r2);
    lcp_wait_gone(&d, "show ip6 fib fd87::/64", "via fe80::");
    assert!(
        !ping(&a, "fd87::2"),
        "withdrawn OSPFv3 route still forwards"
    );
    drop(r1);
    d.stop();
}

/// FRR's zebra and isisd in a namespace (their sockets, pid and config files in `dir`),
/// killed on drop.
struct Frr {
    children: Vec<std::process::Child>,
    dir: std::path::PathBuf,
}

impl Frr {
    fn start(ns: &str, dir: &std::path::Path, name: &str, isisd_conf: &str) -> Frr {
        let dir = dir.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        // FRR drops its privileges to user `frr` (root is not in its vty group).
        must(&["chown", "frr:frr", dir.to_str().unwrap()]);
        let zs = dir.join("zserv.api");
        let mut f = Frr {
            children: Vec::new(),
            dir: dir.clone(),
        };
        for (daemon, conf) in [
            ("zebra", format!("hostname {name}\n")),
            ("isisd", isisd_conf.to_string()),
        ] {
            let cf = dir.join(format!("{daemon}.conf"));
            std::fs::write(&cf, conf).unwrap();
            let child = Command::new("ip")
                .args(["netns", "exec", ns])
                .arg(format!("/usr/lib/frr/{daemon}"))
                .args(["-P", "0", "-f"])
                .arg(&cf)
                .arg("-i")
                .arg(dir.join(format!("{daemon}.pid")))
                .arg("-z")
                .arg(&zs)
                .arg("--vty_socket")
                .arg(&dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start FRR");
            f.children.push(child);
            let vty = dir.join(format!("{daemon}.vty"));
            wait_until(
                Duration::from_secs(10),
                Duration::from_millis(20),
                || vty.exists(),
                || format!("{name}: FRR {daemon} did not open {}", vty.display()),
            );
        }
        f
    }
    fn cmd(&self, c: &str) -> String {
        sh(&["vtysh", "--vty_socket", self.dir.to_str().unwrap(), "-c", c]).unwrap_or_else(|e| e)
    }
}

impl Drop for Frr {
    fn drop(&mut self) {
        for c in self.children.iter_mut().rev() {
            terminate(c, "an FRR daemon");
        }
    }
}

fn isisd_conf(name: &str, sysid: &str, wan: &str, lan: &str) -> String {
    format!(
        "hostname {name}
router isis 1
 net 49.0001.{sysid}.00
 is-type level-2-only
 lsp-gen-interval 1
 spf-interval 1
!
interface {wan}
 ip router isis 1
 isis circuit-type level-2-only
 isis hello-interval 1
 isis hello-multiplier 3
 isis network point-to-point
!
interface {lan}
 ip router isis 1
 isis passive
!
"
    )
}

/// IS-IS (not IP: 802.3 frames with LLC 0xFE 0xFE to 01:80:c2:00:00:15) between FRR in the
/// control-plane namespace and FRR in router P, across Sluice: `ethernet-input` punts the
/// OSI frames of paired interfaces to the twin, Linux's leave through it; P's LAN, learned
/// by IS-IS, is forwarded by Sluice and goes when P's isisd stops.
#[test]
fn frr_isis_over_sluice() {
    if !std::path::Path::new("/usr/lib/frr/isisd").exists() {
        sluice_infra::testing::skip("FRR's isisd is not installed (apt-get install frr)");
        return;
    }
    let Some(RouterTopo {
        ns: _ns,
        d,
        l,
        p,
        a,
        tp,
        ta,
    }) = RouterTopo::new("i")
    else {
        return;
    };
    let t0 = Instant::now();
    let r1 = Frr::start(
        &l,
        &d.dir,
        "i1",
        &isisd_conf("i1", "0000.0000.0001", &tp, &ta),
    );
    let r2 = Frr::start(
        &p,
        &d.dir,
        "i2",
        &isisd_conf("i2", "0000.0000.0002", "eth0", "lan0"),
    );
    learned_and_forwarded(
        &d,
        &a,
        "IS-IS",
        "show ip fib 10.87.0.0/24",
        "via 10.85.0.2",
        "10.87.0.2",
        t0,
        || {
            format!(
                "r1: {}\nr2: {}\n{}",
                r1.cmd("show isis neighbor"),
                r2.cmd("show isis neighbor"),
                must(&["ip", "-n", &l, "route"])
            )
        },
    );
    let errors = d.ok("show errors");
    assert!(
        errors.contains("OSI (IS-IS) frames punted to the host stack"),
        "{errors}"
    );
    drop(r2);
    lcp_wait_gone(&d, "show ip fib 10.87.0.0/24", "via 10.85.0.2");
    drop(r1);
    d.stop();
}

fn lcp_routes(d: &Daemon) -> u64 {
    let s = d.ok("show lcp");
    s.split(": routes ")
        .nth(1)
        .and_then(|x| x.split_whitespace().next())
        .and_then(|x| x.parse().ok())
        .unwrap_or(0)
}

/// Bulk changes through a tiny netlink receive buffer: the listener overruns (ENOBUFS),
/// dumps the whole state again and the main loop sweeps: Sluice ends with exactly Linux's
/// routes, never a silent divergence.
#[test]
fn netlink_overrun_resyncs() {
    skip_unless_possible!();
    let mut ns = Netns::new("o");
    let (s, l) = (ns.add("S"), ns.add("L"));
    let tw = format!("{}tw", ns.tag);
    let d = start_in(
        &s,
        "lcpovr",
        &format!("linux-cp {{ default netns {l} netlink-rcvbuf 4096 }}"),
    );
    d.ok("create loopback interface");
    d.ok("set interface state loop0 up");
    d.ok(&format!("lcp create loop0 host-if {tw}"));
    must(&["ip", "-n", &l, "addr", "add", "10.88.0.1/24", "dev", &tw]);
    lcp_wait_for(&d, "show interface address", "10.88.0.1/24");
    const N: u32 = 20000;
    let batch = |verb: &str| {
        let f = d.dir.join(format!("{verb}.batch"));
        let mut s = String::new();
        for i in 0..N {
            s.push_str(&format!(
                "route {verb} 10.{}.{}.{}/32 via 10.88.0.2\n",
                200 + (i >> 16),
                (i >> 8) & 255,
                i & 255
            ));
        }
        std::fs::write(&f, s).unwrap();
        f
    };
    let (add, del) = (batch("add"), batch("del"));
    let t0 = Instant::now();
    must(&["ip", "-n", &l, "-batch", add.to_str().unwrap()]);
    let t_linux = t0.elapsed();
    wait_until(
        Duration::from_secs(60),
        Duration::from_millis(20),
        || lcp_routes(&d) == N as u64,
        || d.ok("show lcp"),
    );
    let t_sluice = t0.elapsed();
    let show = d.ok("show lcp");
    eprintln!(
        "{N} routes: ip -batch {:.3} s, in Sluice's FIB after {:.3} s; {}",
        t_linux.as_secs_f64(),
        t_sluice.as_secs_f64(),
        show.lines().last().unwrap_or("")
    );
    let fib = d.ok("show ip fib 10.200.78.31/32");
    assert!(fib.contains("via 10.88.0.2"), "{fib}");
    // Sluice stalls (SIGSTOP: no thread reads the socket) while Linux deletes every route
    // and adds others: the 4 KiB buffer overruns. On SIGCONT the listener sees ENOBUFS,
    // dumps again and the sweep removes what Linux no longer has.
    let other = d.dir.join("other.batch");
    let o: String = (0..100)
        .map(|i| format!("route add 10.250.0.{i}/32 via 10.88.0.2\n"))
        .collect();
    std::fs::write(&other, o).unwrap();
    let pid = d.child.id() as i32;
    // SAFETY: plain kill(2) on our child's pid.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let r = sh(&["ip", "-n", &l, "-batch", del.to_str().unwrap()])
        .and_then(|_| sh(&["ip", "-n", &l, "-batch", other.to_str().unwrap()]));
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    r.unwrap();
    wait_until(
        Duration::from_secs(60),
        Duration::from_millis(20),
        || lcp_routes(&d) == 100,
        || d.ok("show lcp"),
    );
    let show = d.ok("show lcp");
    eprintln!("after the stall: {}", show.lines().last().unwrap_or(""));
    assert!(counter(&show, "overruns") >= 1, "{show}");
    assert!(counter(&show, "resyncs") >= 2, "{show}");
    let fib = d.ok("show ip fib 10.200.78.31/32");
    assert!(!fib.contains("10.200.78.31/32"), "{fib}");
    let fib = d.ok("show ip fib 10.250.0.57/32");
    assert!(fib.contains("via 10.88.0.2"), "{fib}");
    wait_until(
        Duration::from_secs(5),
        Duration::from_millis(50),
        || buffers_in_use(&d) == 0,
        || d.ok("show buffers"),
    );
    d.stop();
}
