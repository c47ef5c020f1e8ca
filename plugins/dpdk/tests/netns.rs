//! The dpdk plugin with Linux peers: `net_af_packet` on a veth pair and `net_tap`, Sluice
//! routing between them, pings and a TCP transfer (iperf3) from a network namespace, kernel
//! fanout spreading flows over two af_packet rx queues, and tap link events. Needs root; the
//! test process moves itself into a network namespace of its own first, so every interface
//! it creates (veth, tap) lives in namespaces the test created and goes away with them.

mod common;

use common::*;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Runs the dispatcher until `child` exits; returns whether it succeeded.
fn run_while(rt: &mut Rt, mut child: Child, limit: Duration) -> bool {
    let t0 = Instant::now();
    loop {
        for _ in 0..64 {
            rt.vm.run_main_once();
        }
        if let Some(st) = child.try_wait().unwrap() {
            return st.success();
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return false;
        }
    }
}

fn spawn(cmd: &str) -> Child {
    Command::new("sh")
        .args(["-c", cmd])
        .spawn()
        .unwrap_or_else(|e| panic!("`{cmd}': {e}"))
}

fn stat(hw: &str, k: &str) -> u64 {
    hw.split_whitespace()
        .skip_while(|w| *w != k)
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

struct Ns(String);
impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

#[test]
fn af_packet_and_tap_route_ping_and_tcp() {
    if let Some(why) = skip_reason_root() {
        sluice_infra::testing::skip(&why);
        return;
    }
    for tool in ["ip", "ping", "iperf3", "ethtool"] {
        if Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .map(|o| !o.status.success())
            .unwrap_or(true)
        {
            sluice_infra::testing::skip(&format!("`{tool}' is not installed"));
            return;
        }
    }
    in_child("af_packet_and_tap_route_ping_and_tcp", || {
        // A network namespace of our own for this process (before any thread exists, so EAL's
        // and Sluice's threads are in it too), and one for the peer.
        // SAFETY: unshare(2) with a valid flag; this thread has spawned nothing yet.
        assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWNET) }, 0, "unshare");
        let ns = Ns(format!("sdpdk{}", std::process::id()));
        let n = &ns.0;
        for c in [
            "ip link set lo up".to_string(),
            format!("ip netns add {n}"),
            "ip link add dpa type veth peer name dpb".into(),
            format!("ip link set dpb netns {n}"),
            "ip link set dpa up".into(),
            "ethtool -K dpa tso off gso off gro off tx off rx off >/dev/null".into(),
            format!("ip -n {n} link set lo up"),
            format!("ip -n {n} addr add 10.77.1.1/24 dev dpb"),
            format!("ip -n {n} link set dpb up"),
            format!(
                "ip netns exec {n} ethtool -K dpb tso off gso off gro off tx off rx off >/dev/null"
            ),
            format!("ip -n {n} route add 10.77.2.0/24 via 10.77.1.2"),
        ] {
            sh(&c);
        }
        let mut rt = start(
            "dpdk {\n vdev net_af_packet0,iface=dpa,qpairs=2 { name afp num-rx-queues 2 num-tx-queues 2 }\n vdev net_tap0,iface=dtap0 { name tap0 }\n}",
            0,
        )
        .unwrap();
        for c in [
            "set interface ip address afp 10.77.1.2/24",
            "set interface ip address tap0 10.77.2.2/24",
            "set interface state afp up",
            "set interface state tap0 up",
        ] {
            rt.ok(c);
        }
        for c in [
            "ip addr add 10.77.2.1/24 dev dtap0",
            "ip link set dtap0 up",
            "ip route add 10.77.1.0/24 via 10.77.2.2",
        ] {
            sh(c);
        }
        // Sluice answers on af_packet; the namespace reaches the kernel behind the tap
        // through Sluice's routing.
        let ok = run_while(
            &mut rt,
            spawn(&format!(
                "ip netns exec {n} ping -c 3 -i 0.2 -W 2 10.77.1.2 >/dev/null"
            )),
            Duration::from_secs(20),
        );
        assert!(
            ok,
            "ping Sluice over net_af_packet failed\n{}",
            rt.ok("show errors")
        );
        let ok = run_while(
            &mut rt,
            spawn(&format!(
                "ip netns exec {n} ping -c 3 -i 0.2 -W 2 10.77.2.1 >/dev/null"
            )),
            Duration::from_secs(20),
        );
        assert!(
            ok,
            "ping through Sluice (af_packet -> tap) failed\n{}",
            rt.ok("show errors")
        );
        // TCP: 16 parallel flows from the namespace to an iperf3 server behind the tap.
        let server = spawn("iperf3 -s -1 -B 10.77.2.1 -p 5399 >/dev/null 2>&1");
        rt.run_for(Duration::from_millis(300));
        let ok = run_while(
            &mut rt,
            spawn(&format!(
                "ip netns exec {n} iperf3 -c 10.77.2.1 -p 5399 -P 16 -n 4M >/dev/null"
            )),
            Duration::from_secs(60),
        );
        assert!(ok, "TCP through Sluice failed\n{}", rt.ok("show errors"));
        assert!(
            run_while(&mut rt, server, Duration::from_secs(10)),
            "iperf3 server failed"
        );
        let hw = rt.ok("show hardware-interfaces afp");
        assert!(hw.contains("pmd net_af_packet"), "{hw}");
        assert!(
            stat(&hw, "rx_q0_packets") > 0 && stat(&hw, "rx_q1_packets") > 0,
            "kernel fanout used one queue only:\n{hw}"
        );
        assert!(rt.if_counter("tap0", "tx packets") > 1000);
        assert!(rt.if_counter("afp", "rx packets") > 1000);
        // Link events from the tap: the kernel side goes down, then up again.
        assert!(rt
            .ok("show hardware-interfaces tap0")
            .contains("carrier: up"));
        sh("ip link set dtap0 down");
        let down = rt.run_until(Duration::from_secs(5), |rt| {
            rt.ok("show hardware-interfaces tap0")
                .contains("carrier: down")
        });
        assert!(down, "{}", rt.ok("show hardware-interfaces tap0"));
        sh("ip link set dtap0 up");
        let up = rt.run_until(Duration::from_secs(5), |rt| {
            rt.ok("show hardware-interfaces tap0")
                .contains("carrier: up")
        });
        assert!(up, "{}", rt.ok("show hardware-interfaces tap0"));
        assert!(rt
            .ok("show hardware-interfaces tap0")
            .contains("link events 2"));
        rt.run_for(Duration::from_millis(200));
        assert_eq!(rt.buffers_in_use(), 0, "leaked Sluice buffers");
    });
}
