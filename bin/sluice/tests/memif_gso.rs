//! GSO aggregates across memif (docs/memif.md, "GSO between Sluice peers"): two Linux hosts
//! in network namespaces, each on a veth that a Sluice instance attaches with af_packet,
//! the two instances routing between them over a memif link:
//!
//! ```text
//! ns a (10.97.1.2) - veth - Sluice A - memif1/0 master (10.97.9.1)
//!                         ⇅ shared memory
//! ns b (10.97.2.2) - veth - Sluice B - memif1/0 slave  (10.97.9.2)
//! ```
//!
//! TCP crosses byte for byte both ways with the hosts' TSO/GSO on (the veth default). With
//! `gso` on both memif ends the aggregates af_packet keeps whole cross memif whole (received
//! whole by the far `memif-input`, never cut); with `gso` on one end only they are cut
//! before `memif-tx`, as with VPP or DPDK peers. Needs root and `ip`; skips otherwise.
//! Every namespace and veth is removed by a drop guard, also on failure; only addresses in
//! the namespaces made here are used.

#[path = "common/mod.rs"]
mod common;

use common::*;

/// The namespaces and veths of one test, removed on drop.
struct Topo {
    tag: String,
    made: Vec<String>,
}

impl Topo {
    fn new(tag: char) -> Topo {
        Topo {
            tag: format!("sl{}mg{tag}", std::process::id()),
            made: Vec::new(),
        }
    }

    /// Namespace `<tag><n>` whose `eth0` (addressed `addr`, default route via `gw`) is the
    /// peer of host-side veth `<tag><n>`; returns that name (of both).
    fn host(&mut self, n: char, addr: &str, gw: &str) -> String {
        let name = format!("{}{n}", self.tag);
        must(&["ip", "netns", "add", &name]);
        self.made.push(name.clone());
        must(&[
            "ip", "link", "add", &name, "type", "veth", "peer", "name", "eth0", "netns", &name,
        ]);
        // IPv6 autoconfiguration chatter stays off the wire Sluice sees.
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{name}/disable_ipv6"), "1");
        let _ = sh(&[
            "ip",
            "netns",
            "exec",
            &name,
            "sysctl",
            "-qw",
            "net.ipv6.conf.all.disable_ipv6=1",
        ]);
        must(&["ip", "-n", &name, "link", "set", "lo", "up"]);
        must(&["ip", "-n", &name, "addr", "add", addr, "dev", "eth0"]);
        must(&["ip", "-n", &name, "link", "set", "eth0", "up"]);
        must(&["ip", "-n", &name, "route", "add", "default", "via", gw]);
        name
    }
}

impl Drop for Topo {
    fn drop(&mut self) {
        for n in &self.made {
            let _ = sh(&["ip", "link", "del", n]);
            let _ = sh(&["ip", "netns", "del", n]);
        }
    }
}

/// One Sluice instance: its host's veth attached with af_packet (`lan` address), the memif
/// link (`link` address, `role`, `gso` or not), a route to the other host's subnet via the
/// other instance and that instance's memif MAC as a static neighbour.
#[allow(clippy::too_many_arguments)]
fn instance(
    tag: &str,
    sock: &std::path::Path,
    veth: &str,
    lan: &str,
    role: &str,
    me: (&str, &str),
    peer: (&str, &str),
    far: &str,
    gso: bool,
) -> Daemon {
    let d = Daemon::start(tag, "");
    let g = if gso { " gso" } else { "" };
    for c in [
        format!("create host-interface name {veth}"),
        format!("set interface state host-{veth} up"),
        format!("set interface ip address host-{veth} {lan}"),
        format!("create memif socket id 1 filename {}", sock.display()),
        format!(
            "create interface memif id 0 socket-id 1 {role} hw-addr {}{g}",
            me.1
        ),
        "set interface state memif1/0 up".into(),
        format!("set interface ip address memif1/0 {}/24", me.0),
        format!("ip neighbor memif1/0 {} {}", peer.0, peer.1),
        format!("ip route add {far} via {}", peer.0),
    ] {
        d.ok(&c);
    }
    d
}

const A_LINK: (&str, &str) = ("10.97.9.1", "02:fe:6d:97:00:01");
const B_LINK: (&str, &str) = ("10.97.9.2", "02:fe:6d:97:00:02");

/// The topology with `gso` on A's and B's memif as given; runs both transfers and returns
/// the two daemons (and the guard) for the checks.
fn run(tag: char, a_gso: bool, b_gso: bool) -> Option<(Topo, Daemon, Daemon)> {
    let mut t = Topo::new(tag);
    if let Some(why) = netns_skip_reason() {
        sluice_infra::testing::skip(&why);
        return None;
    }
    let na = t.host('a', "10.97.1.2/24", "10.97.1.1");
    let nb = t.host('b', "10.97.2.2/24", "10.97.2.1");
    let dir = tmpdir(&format!("memif-gso-{tag}"));
    let sock = dir.join("memif.sock");
    let a = instance(
        &format!("memif-gso-{tag}-a"),
        &sock,
        &na,
        "10.97.1.1/24",
        "master",
        A_LINK,
        B_LINK,
        "10.97.2.0/24",
        a_gso,
    );
    let b = instance(
        &format!("memif-gso-{tag}-b"),
        &sock,
        &nb,
        "10.97.2.1/24",
        "slave",
        B_LINK,
        A_LINK,
        "10.97.1.0/24",
        b_gso,
    );
    for d in [&a, &b] {
        wait_for(d, "show memif memif1/0", "link up", 15);
    }
    tcp_transfer(&na, &nb, "10.97.2.2", 4 << 20);
    tcp_transfer(&nb, &na, "10.97.1.2", 4 << 20);
    Some((t, a, b))
}

/// Ends a test: both daemons alive, no buffer left, no memif drop of any kind.
fn finish(mut a: Daemon, mut b: Daemon) {
    for d in [&mut a, &mut b] {
        let errs = d.ok("show errors");
        // No memif drop but a full ring (TCP resends those): no aggregate refused as too
        // big, no bad descriptor either way, none with headers unlike its metadata, none
        // sent to a peer that did not agree (`show errors` prints descriptions).
        for (node, bad) in [
            ("memif-tx", "GSO aggregate too big"),
            ("memif-tx", "peer did not agree"),
            ("memif-tx", "peer handed out a bad descriptor"),
            ("memif-input", "bad descriptor"),
            ("memif-input", "not TCP/UDP as its descriptor"),
        ] {
            assert_eq!(error_count(d, node, bad), 0, "{node} {bad}:\n{errs}");
        }
        assert!(d.alive(), "sluice died");
        assert_no_leaks(d);
    }
    for d in [a, b] {
        d.stop();
    }
}

#[test]
fn tcp_aggregates_cross_memif_whole_when_both_ends_agree() {
    let Some((_t, a, b)) = run('w', true, true) else {
        return;
    };
    let kept = |d: &Daemon| error_count(d, "af-packet-input", "GSO aggregates kept whole");
    let cut = |d: &Daemon| error_count(d, "gso-segment", "GSO aggregates cut into segments");
    let whole = |d: &Daemon| error_count(d, "memif-input", "GSO aggregates received whole");
    for (d, other) in [(&a, &b), (&b, &a)] {
        eprintln!(
            "host aggregates kept {}, cut {}, received whole by the other side {}",
            kept(d),
            cut(d),
            whole(other)
        );
        let m = d.ok("show memif memif1/0");
        assert!(m.contains(" gso ") && m.contains("gso agreed"), "{m}");
        assert!(
            kept(d) > 0,
            "aggregates from the host kept:\n{}",
            d.ok("show errors")
        );
        assert_eq!(cut(d), 0, "and never cut:\n{}", d.ok("show errors"));
        assert!(
            whole(other) > 0 && whole(other) <= kept(d),
            "received whole by the other side: {} of {}",
            whole(other),
            kept(d)
        );
    }
    let rc = a.ok("show running-config");
    assert!(rc.contains("socket-id 1 master gso"), "{rc}");
    finish(a, b);
}

#[test]
fn tcp_aggregates_are_cut_before_memif_when_one_end_lacks_gso() {
    let Some((_t, a, b)) = run('c', true, false) else {
        return;
    };
    let kept = |d: &Daemon| error_count(d, "af-packet-input", "GSO aggregates kept whole");
    let cut = |d: &Daemon| error_count(d, "gso-segment", "GSO aggregates cut into segments");
    let whole = |d: &Daemon| error_count(d, "memif-input", "GSO aggregates received whole");
    let m = a.ok("show memif memif1/0");
    assert!(m.contains("gso not agreed by the peer"), "{m}");
    assert!(!b.ok("show memif memif1/0").contains("gso"));
    for d in [&a, &b] {
        assert!(
            kept(d) > 0,
            "aggregates from the host kept:\n{}",
            d.ok("show errors")
        );
        assert_eq!(cut(d), kept(d), "every one cut before memif-tx");
        assert_eq!(whole(d), 0, "none crosses memif whole");
    }
    finish(a, b);
}

/// `gso` needs ethernet mode, copying and (slave) rings that hold two 64 KiB aggregates:
/// the error names the token.
#[test]
fn gso_is_refused_with_ip_mode_and_zero_copy() {
    let d = Daemon::start("memif-gso-cli", "");
    let dir = tmpdir("memif-gso-cli-sock");
    d.ok(&format!(
        "create memif socket id 1 filename {}",
        dir.join("m.sock").display()
    ));
    let e = d
        .cli("create interface memif id 0 socket-id 1 master mode ip gso")
        .unwrap_err();
    assert!(e.contains("`gso'") && e.contains("mode ip"), "{e}");
    let e = d
        .cli("create interface memif id 1 socket-id 1 slave zero-copy gso")
        .unwrap_err();
    assert!(e.contains("zero-copy"), "{e}");
    let e = d
        .cli("create interface memif id 1 socket-id 1 slave buffer-size 1024 gso")
        .unwrap_err();
    assert!(
        e.contains("buffer-size `1024'") && e.contains("1025"),
        "{e}"
    );
    let e = d
        .cli("create interface memif id 1 socket-id 1 slave ring-size 32 gso")
        .unwrap_err();
    assert!(e.contains("ring-size `32'") && e.contains("`gso'"), "{e}");
    d.ok("create interface memif id 2 socket-id 1 master gso");
    let m = d.ok("show memif memif1/2");
    assert!(
        m.contains("flags master gso disconnected") && m.contains("gso offered"),
        "{m}"
    );
}
