//! The dpdk plugin against DPDK's virtual devices, which need no NIC and no hugepages:
//! `net_ring` and `net_pcap` (exact packets in and out, byte for byte; a full ring under zero
//! copy), `net_null` (counts and rates, several rx queues), `net_memif` against Sluice's own
//! memif plugin (packets both ways, link events), and start-up errors. Each test runs in a child process of its own
//! (EAL starts once per process); without DPDK support built, each says why it skips.

mod common;

use common::*;
use std::time::Duration;

macro_rules! skip_unless_dpdk {
    () => {
        if let Some(why) = skip_reason() {
            sluice_infra::testing::skip(&why);
            return;
        }
    };
}

const PG_MAC: [u8; 6] = [0x02, 0xfe, 0, 0, 0, 0];
const PEER: [u8; 6] = [0x02, 0, 0, 0, 0, 0x10];

/// Frames of every interesting size: minimum, odd, full MTU, and jumbo frames that span
/// several Sluice buffers and several mbufs.
fn mixed_frames(n: u32) -> Vec<Vec<u8>> {
    let sizes = [60usize, 61, 128, 1000, 1514, 2048, 2049, 4000, 9000];
    (0..n)
        .map(|i| frame(PG_MAC, PEER, sizes[i as usize % sizes.len()], i))
        .collect()
}

/// Sends `frames` from pg `src` (a pcap stream) and returns what pg `dst` captured once it
/// has as many.
fn send_and_capture(
    rt: &mut Rt,
    dir: &std::path::Path,
    src: &str,
    dst: &str,
    frames: &[Vec<u8>],
) -> Vec<Vec<u8>> {
    let inp = dir.join(format!("{src}-in.pcap"));
    // Captures may only be written directly under /tmp (the CLI's file policy).
    let out = std::path::PathBuf::from(format!(
        "/tmp/sluice-dpdk-{}-{src}-{dst}.pcap",
        std::process::id()
    ));
    write_pcap(&inp, frames);
    rt.ok(&format!(
        "packet-generator capture {dst} pcap {} count {}",
        out.display(),
        frames.len()
    ));
    rt.ok(&format!(
        "packet-generator new pcap {} source {src} name s-{src}",
        inp.display()
    ));
    rt.ok(&format!("packet-generator enable s-{src}"));
    let n = frames.len() as u64;
    let dst_name = dst.to_string();
    let done = rt.run_until(Duration::from_secs(20), |rt| {
        rt.if_counter(&dst_name, "tx packets") >= n
    });
    rt.run_for(Duration::from_millis(50));
    rt.ok(&format!("packet-generator capture {dst} disable"));
    let got = read_pcap(&out);
    let _ = std::fs::remove_file(&out);
    assert!(done, "only {} of {n} frames reached {dst}", got.len());
    got
}

fn assert_same(got: &[Vec<u8>], want: &[Vec<u8>]) {
    assert_eq!(got.len(), want.len(), "frame count");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g == w,
            "frame {i}: {} bytes, expected {} bytes (or content differs)",
            g.len(),
            w.len()
        );
    }
}

#[test]
fn ring_loopback_is_byte_exact() {
    skip_unless_dpdk!();
    in_child("ring_loopback_is_byte_exact", || {
        ring_loopback(
            "dpdk { vdev net_ring0 { name ring0 } }",
            "receive: zero-copy",
            0,
        )
    });
}

#[test]
fn ring_loopback_across_threads_is_byte_exact() {
    skip_unless_dpdk!();
    in_child("ring_loopback_across_threads_is_byte_exact", || {
        // pg0 transmits on main, ring0's rx queue is the worker's: buffers go out on one
        // thread and come back and are freed on the other.
        ring_loopback(
            "dpdk { vdev net_ring0 { name ring0 } }",
            "receive: zero-copy",
            1,
        )
    });
}

#[test]
fn ring_loopback_copying_is_byte_exact() {
    skip_unless_dpdk!();
    in_child("ring_loopback_copying_is_byte_exact", || {
        // `no-zero-copy`: both directions copy. Transmit copies into mbufs of `sluice_tx`,
        // which net_ring hands back to receive as they are (`num-mbufs` sizes `sluice_rx`,
        // which this device does not use).
        ring_loopback(
            "dpdk { vdev net_ring0 { name ring0 } no-zero-copy num-mbufs 8192 }",
            "receive: copies",
            0,
        )
    });
}

/// net_ring without arguments transmits into its own receive ring: pg0 -> ring0 (tx) ->
/// ring0 (rx) -> pg0 (captured); `mode` is what `show dpdk buffer` must say; `workers`
/// worker threads (ring0's rx queue goes to the first).
fn ring_loopback(conf: &str, mode: &str, workers: usize) {
    let mut rt = start(conf, workers).unwrap();
    let dir = tmpdir("ring");
    for c in [
        "create packet-generator interface pg0",
        "set interface state pg0 up",
        "set interface state ring0 up",
        "set interface mtu 9216 ring0",
        "set interface l2 xconnect pg0 ring0",
        "set interface l2 xconnect ring0 pg0",
    ] {
        rt.ok(c);
    }
    let frames = mixed_frames(300);
    let got = send_and_capture(&mut rt, &dir, "pg0", "pg0", &frames);
    assert_same(&got, &frames);
    let bytes: u64 = frames.iter().map(|f| f.len() as u64).sum();
    assert_eq!(rt.if_counter("ring0", "rx packets"), 300);
    assert_eq!(rt.if_counter("ring0", "rx bytes"), bytes);
    assert_eq!(rt.if_counter("ring0", "tx packets"), 300);
    assert_eq!(rt.if_counter("ring0", "tx-error"), 0);
    let hw = rt.ok("show hardware-interfaces ring0");
    assert!(hw.contains("pmd net_ring"), "{hw}");
    assert!(hw.contains("rx_good_packets"), "{hw}");
    if workers > 0 {
        let pl = rt.ok("show interface rx-placement");
        assert!(pl.contains("sluice_wk_0"), "{pl}");
        // The workers' caches go back to the pool when they end.
        rt.vm.stop_workers();
    }
    assert_eq!(rt.buffers_in_use(), 0, "leaked Sluice buffers");
    let b = rt.ok("show dpdk buffer");
    for l in b.lines().filter(|l| l.starts_with("sluice_")) {
        assert!(l.trim_end().ends_with(" 0"), "mbufs still in use: {b}");
    }
    assert!(b.contains(mode), "{b}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ring_full_under_zero_copy_gives_every_buffer_back() {
    skip_unless_dpdk!();
    in_child("ring_full_under_zero_copy_gives_every_buffer_back", || {
        ring_overflow(
            "dpdk { vdev net_ring0 { name ring0 } }",
            "receive: zero-copy",
        )
    });
}

#[test]
fn ring_full_copying_gives_every_mbuf_back() {
    skip_unless_dpdk!();
    in_child("ring_full_copying_gives_every_mbuf_back", || {
        // 1024 transmit mbufs, as many as the ring takes: the refused copies go back to the
        // pool, none is dropped for want of an mbuf.
        ring_overflow(
            "dpdk { vdev net_ring0 { name ring0 } no-zero-copy num-mbufs 1024 }",
            "receive: copies",
        )
    });
}

/// Eight pg streams put 2048 packets into ring0's transmit in one dispatch; net_ring's ring
/// (rx = tx) holds 1024 and dpdk-input takes at most 256 per poll: the refused packets stay
/// Sluice's (zero copy: their mbuf headers unlinked again) and are freed, and counted.
/// `mode` is what `show dpdk buffer` must say.
fn ring_overflow(conf: &str, mode: &str) {
    let mut rt = start(conf, 0).unwrap();
    let dir = tmpdir("ringfull");
    for c in [
        "create packet-generator interface pg0",
        "set interface state pg0 up",
        "set interface state ring0 up",
        "set interface l2 xconnect pg0 ring0",
        "set interface l2 xconnect ring0 pg0",
    ] {
        rt.ok(c);
    }
    let (streams, per) = (8u32, 256u32);
    for s in 0..streams {
        let frames: Vec<Vec<u8>> = (0..per)
            .map(|i| frame(PG_MAC, PEER, 60, s * per + i))
            .collect();
        let inp = dir.join(format!("s{s}.pcap"));
        write_pcap(&inp, &frames);
        rt.ok(&format!(
            "packet-generator new pcap {} source pg0 name s{s}",
            inp.display()
        ));
    }
    rt.ok("packet-generator enable");
    let n = (streams * per) as u64;
    let done = rt.run_until(Duration::from_secs(20), |rt| {
        rt.if_counter("ring0", "rx packets") + rt.if_counter("ring0", "tx-error") >= n
    });
    rt.run_for(Duration::from_millis(50));
    let (rx, err) = (
        rt.if_counter("ring0", "rx packets"),
        rt.if_counter("ring0", "tx-error"),
    );
    assert!(done, "ring0 received {rx}, refused {err} of {n}");
    assert!(err > 0, "the ring never filled: {rx} received");
    assert_eq!(rx + err, n);
    assert_eq!(rt.if_counter("ring0", "tx packets"), rx);
    assert_eq!(rt.error_count("dpdk-tx", "device tx queue full"), err);
    assert_eq!(rt.error_count("dpdk-tx", "tx mbuf pool exhausted"), 0);
    assert_eq!(rt.buffers_in_use(), 0, "leaked Sluice buffers");
    // The device still works afterwards: traffic comes back byte for byte.
    rt.ok("set interface mtu 9216 ring0");
    let frames = mixed_frames(600);
    let got = send_and_capture(&mut rt, &dir, "pg0", "pg0", &frames);
    assert_same(&got, &frames);
    assert_eq!(rt.buffers_in_use(), 0, "leaked Sluice buffers");
    let b = rt.ok("show dpdk buffer");
    assert!(b.contains(mode), "{b}");
    for l in b.lines().filter(|l| l.starts_with("sluice_")) {
        assert!(l.trim_end().ends_with(" 0"), "mbufs still in use: {b}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pcap_file_in_and_out_is_byte_exact() {
    skip_unless_dpdk!();
    in_child("pcap_file_in_and_out_is_byte_exact", || {
        // net_pcap0 reads a pcap file as its receive side; Sluice cross-connects it to
        // net_pcap1, which writes what it transmits to another file.
        let dir = tmpdir("pcap");
        let inp = dir.join("rx.pcap");
        let out = dir.join("tx.pcap");
        let frames = mixed_frames(200);
        write_pcap(&inp, &frames);
        let mut rt = start(
            &format!(
                "dpdk {{\n vdev net_pcap0,rx_pcap={} {{ name pin }}\n vdev net_pcap1,tx_pcap={} {{ name pout }}\n}}",
                inp.display(),
                out.display()
            ),
            0,
        )
        .unwrap();
        for c in [
            "set interface mtu 9216 pin",
            "set interface mtu 9216 pout",
            "set interface l2 xconnect pin pout",
            "set interface state pin up",
            "set interface state pout up",
        ] {
            rt.ok(c);
        }
        // The file was read as soon as the port started; packets received while `pin' was
        // down were dropped by ethernet-input, so count what went out.
        let ok = rt.run_until(Duration::from_secs(20), |rt| {
            rt.if_counter("pin", "rx packets") >= 200
        });
        assert!(
            ok,
            "net_pcap0 delivered {} packets",
            rt.if_counter("pin", "rx packets")
        );
        rt.run_for(Duration::from_millis(100));
        let dropped_down = rt.if_counter("pin", "drops");
        let got = read_pcap(&out);
        let sent = &frames[frames.len() - got.len()..];
        assert_eq!(got.len() as u64 + dropped_down, 200);
        assert_same(&got, sent);
        assert!(!got.is_empty(), "nothing forwarded");
        assert_eq!(rt.buffers_in_use(), 0, "leaked Sluice buffers");
        let _ = std::fs::remove_dir_all(&dir);
    });
}

#[test]
fn null_device_counts_agree_and_rss_queues_poll() {
    skip_unless_dpdk!();
    in_child("null_device_counts_agree_and_rss_queues_poll", || {
        let mut rt = start(
            "dpdk {\n vdev net_null0 { name null0 num-rx-queues 2 }\n vdev net_null1 { name null1 }\n}",
            0,
        )
        .unwrap();
        for c in [
            "set interface l2 xconnect null0 null1",
            "set interface state null0 up",
            "set interface state null1 up",
        ] {
            rt.ok(c);
        }
        rt.ok("clear runtime");
        let t0 = std::time::Instant::now();
        rt.run_for(Duration::from_millis(500));
        let secs = t0.elapsed().as_secs_f64();
        // Between two dispatcher loops nothing is in flight: the counts must agree exactly.
        let rx = rt.if_counter("null0", "rx packets");
        let miss = rt.if_counter("null0", "rx-miss");
        let tx = rt.if_counter("null1", "tx packets");
        let txe = rt.if_counter("null1", "tx-error");
        assert!(rx > 0, "net_null0 delivered nothing");
        assert_eq!(
            rx,
            tx + txe,
            "every received packet is forwarded or counted"
        );
        let hw0 = rt.ok("show hardware-interfaces null0");
        let hw1 = rt.ok("show hardware-interfaces null1");
        let stat = |hw: &str, k: &str| -> u64 {
            hw.split_whitespace()
                .skip_while(|w| *w != k)
                .nth(1)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        assert_eq!(stat(&hw0, "ipackets"), rx + miss, "{hw0}");
        assert_eq!(stat(&hw1, "opackets"), tx, "{hw1}");
        // Both rx queues are polled (net_null fills every queue).
        assert!(
            stat(&hw0, "rx_q0_packets") > 0 && stat(&hw0, "rx_q1_packets") > 0,
            "{hw0}"
        );
        assert!(hw0.contains("rx: 2 queue(s)"), "{hw0}");
        let rt_out = rt.ok("show runtime");
        eprintln!(
            "net_null0 -> null1: {:.2} Mpps on one core (debug build)\n{rt_out}",
            rx as f64 / secs / 1e6
        );
        let pl = rt.ok("show interface rx-placement");
        assert!(pl.contains("null0") && pl.contains("queue 1"), "{pl}");
        let e = rt
            .cli("set interface rx-mode null0 queue 1 interrupt")
            .unwrap_err();
        assert!(e.contains("not supported on dpdk interfaces"), "{e}");
        rt.ok("set interface rx-mode null0 queue 1 polling");
        rt.ok("set interface state null0 down");
        rt.ok("set interface l2 xconnect null0 null1");
        assert_eq!(rt.buffers_in_use(), 0, "leaked Sluice buffers");
        // What DPDK holds (its mempool cache, filled by net_null's receive) is shown apart:
        // `Lent`, not `Used`.
        let lent = sluice_dpdk::lent_buffers(&rt.vm);
        assert!(
            lent > 0,
            "net_null's receive took no buffer from the mempool"
        );
        let b = rt.ok("show buffers");
        let row: Vec<&str> = b
            .lines()
            .find(|l| l.starts_with("default-numa-0"))
            .unwrap_or_else(|| panic!("{b}"))
            .split_whitespace()
            .collect();
        assert_eq!((row[8], row[10]), ("0", lent.to_string().as_str()), "{b}");
    });
}

#[test]
fn device_lengths_past_the_buffer_are_dropped_unread() {
    skip_unless_dpdk!();
    in_child("device_lengths_past_the_buffer_are_dropped_unread", || {
        // net_null says it received 4000 bytes into a 2048-byte buffer (it writes no data):
        // neither zero copy nor the copy may believe it.
        let mut rt = start(
            "dpdk {\n vdev net_null0,size=4000 { name null0 }\n vdev net_null1 { name null1 }\n}",
            0,
        )
        .unwrap();
        for c in [
            "set interface l2 xconnect null0 null1",
            "set interface state null0 up",
            "set interface state null1 up",
        ] {
            rt.ok(c);
        }
        rt.run_for(Duration::from_millis(200));
        let bad = rt.error_count("dpdk-input", "or its mbuf");
        assert!(bad > 0, "{}", rt.ok("show errors"));
        assert_eq!(rt.if_counter("null0", "rx packets"), 0);
        assert_eq!(rt.if_counter("null1", "tx packets"), 0);
        rt.ok("set interface state null0 down");
        assert_eq!(rt.buffers_in_use(), 0, "leaked Sluice buffers");
    });
}

#[test]
fn device_lengths_past_the_buffer_take_no_buffer_when_copying() {
    skip_unless_dpdk!();
    in_child(
        "device_lengths_past_the_buffer_take_no_buffer_when_copying",
        || {
            // Copying receive: net_null0 hands out mbufs of `sluice_rx' (2176 bytes) claiming
            // 4000. Such a packet is dropped before anything is copied: it takes no Sluice
            // buffer, so with none free it is counted as too long, never as rx-miss (null1
            // receives nothing: only null0 needs buffers).
            let mut rt = start(
                "dpdk {\n vdev net_null0,size=4000 { name null0 }\n vdev net_null1,no-rx=1 { name null1 }\n no-zero-copy\n}",
                0,
            )
            .unwrap();
            for c in [
                "set interface l2 xconnect null0 null1",
                "set interface state null1 up",
            ] {
                rt.ok(c);
            }
            let pool = rt.vm.pool.clone();
            rt.vm.main.bufs().flush();
            let mut all = vec![sluice_buffer::BufIdx(0); pool.len() as usize];
            let mut c = pool.cache();
            let held = c.alloc(&mut all);
            assert_eq!(held, all.len(), "buffers still cached elsewhere");
            rt.ok("set interface state null0 up");
            rt.run_for(Duration::from_millis(200));
            rt.ok("set interface state null0 down");
            let bad = rt.error_count("dpdk-input", "or its mbuf");
            assert!(bad > 0, "{}", rt.ok("show errors"));
            assert_eq!(
                rt.error_count("dpdk-input", "no free buffers"),
                0,
                "{}",
                rt.ok("show errors")
            );
            assert_eq!(rt.if_counter("null1", "tx packets"), 0);
            c.free(&all[..held]);
            drop(c);
            assert_eq!(rt.buffers_in_use(), 0, "leaked Sluice buffers");
        },
    );
}

#[test]
fn zero_copy_pool_fill_never_overwrites_buffers_in_use() {
    skip_unless_dpdk!();
    in_child(
        "zero_copy_pool_fill_never_overwrites_buffers_in_use",
        || {
            let mut rt = start("dpdk { vdev net_null0 { name null0 } }", 0).unwrap();
            let frames = vec![frame(PG_MAC, PEER, 60, 0)];
            let pool = rt.vm.pool.clone();
            let mut c = pool.cache();
            let b = c.alloc_one().unwrap();
            let e = sluice_dpdk::fill_rx_pool(&mut rt.vm, &frames).unwrap_err();
            assert!(e.contains("1 are in use outside DPDK"), "{e}");
            c.free(&[b]);
            drop(c);
            sluice_dpdk::fill_rx_pool(&mut rt.vm, &frames).unwrap();
            assert_eq!(rt.buffers_in_use(), 0, "leaked Sluice buffers");
        },
    );
}

#[test]
fn rx_queues_move_between_threads() {
    skip_unless_dpdk!();
    in_child("rx_queues_move_between_threads", || {
        let mut rt = start("dpdk { vdev net_null0 { name null0 num-rx-queues 2 } }", 1).unwrap();
        let pl = rt.ok("show interface rx-placement");
        assert!(pl.contains("sluice_wk_0"), "{pl}");
        rt.ok("set interface rx-placement null0 queue 1 main");
        let hw = rt.ok("show hardware-interfaces null0");
        assert!(hw.contains("queue 1: thread 0 (sluice_main)"), "{hw}");
        assert!(hw.contains("queue 0: thread 1 (sluice_wk_0)"), "{hw}");
        // The moved queue is polled where it went.
        let q1 = |rt: &mut Rt| {
            let hw = rt.ok("show hardware-interfaces null0");
            hw.split_whitespace()
                .skip_while(|w| *w != "rx_q1_packets")
                .nth(1)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let before = q1(&mut rt);
        rt.run_for(Duration::from_millis(100));
        assert!(q1(&mut rt) > before, "queue 1 not polled on main");
        rt.vm.stop_workers();
    });
}

#[test]
fn memif_against_sluice_memif_both_ways_with_link_events() {
    skip_unless_dpdk!();
    in_child(
        "memif_against_sluice_memif_both_ways_with_link_events",
        || {
            // DPDK's net_memif is the server; Sluice's memif plugin connects to it as a slave.
            // pg0 <-> memif1/0 (Sluice) ==memif== mif (DPDK) <-> pg1.
            let dir = tmpdir("memif");
            let sock = dir.join("memif.sock");
            let mut rt = start(
            &format!(
                "dpdk {{ vdev net_memif0,role=server,socket={},socket-abstract=no,id=0 {{ name mif }} }}",
                sock.display()
            ),
            0,
        )
        .unwrap();
            let hw = rt.ok("show hardware-interfaces mif");
            assert!(hw.contains("carrier: down"), "{hw}");
            for c in [
                format!("create memif socket id 1 filename {}", sock.display()),
                "create interface memif id 0 socket-id 1 slave".into(),
                "create packet-generator interface pg0".into(),
                "create packet-generator interface pg1".into(),
                "set interface state memif1/0 up".into(),
                "set interface state mif up".into(),
                "set interface state pg0 up".into(),
                "set interface state pg1 up".into(),
                "set interface l2 xconnect pg0 memif1/0".into(),
                "set interface l2 xconnect memif1/0 pg0".into(),
                "set interface l2 xconnect pg1 mif".into(),
                "set interface l2 xconnect mif pg1".into(),
            ] {
                rt.ok(&c);
            }
            let up = rt.run_until(Duration::from_secs(15), |rt| {
                rt.ok("show hardware-interfaces mif")
                    .contains("carrier: up")
            });
            assert!(up, "{}", rt.ok("show hardware-interfaces mif"));
            assert!(rt
                .ok("show hardware-interfaces mif")
                .contains("link events 1"));
            // Frames up to the memif buffer size (2048) both ways.
            let frames: Vec<Vec<u8>> = (0..200u32)
                .map(|i| frame(PG_MAC, PEER, [60usize, 333, 1514, 2048][i as usize % 4], i))
                .collect();
            let got = send_and_capture(&mut rt, &dir, "pg0", "pg1", &frames);
            assert_same(&got, &frames);
            let back = send_and_capture(&mut rt, &dir, "pg1", "pg0", &frames);
            assert_same(&back, &frames);
            assert_eq!(rt.if_counter("mif", "rx packets"), 200);
            assert_eq!(rt.if_counter("mif", "tx packets"), 200);
            // The peer goes away: the link goes down (a second event).
            rt.ok("delete interface memif memif1/0");
            let down = rt.run_until(Duration::from_secs(15), |rt| {
                rt.ok("show hardware-interfaces mif")
                    .contains("carrier: down")
            });
            assert!(down, "{}", rt.ok("show hardware-interfaces mif"));
            assert!(rt
                .ok("show hardware-interfaces mif")
                .contains("link events 2"));
            rt.run_for(Duration::from_millis(50));
            assert_eq!(rt.buffers_in_use(), 0, "leaked Sluice buffers");
            let _ = std::fs::remove_dir_all(&dir);
        },
    );
}

fn start_error(conf: &str) -> String {
    match start(conf, 0) {
        Ok(_) => panic!("started with {conf}"),
        Err(e) => e,
    }
}

fn one_line(e: &str) {
    assert!(!e.trim_end().contains('\n'), "not one line: {e}");
}

#[test]
fn unknown_vdev_is_a_one_line_error() {
    skip_unless_dpdk!();
    in_child("unknown_vdev_is_a_one_line_error", || {
        let e = start_error("dpdk { vdev net_bogus0,x=1 }");
        one_line(&e);
        assert!(e.starts_with("plugin `dpdk': vdev net_bogus0,x=1: "), "{e}");
    });
}

#[test]
fn unknown_pci_address_is_a_one_line_error() {
    skip_unless_dpdk!();
    in_child("unknown_pci_address_is_a_one_line_error", || {
        let e = start_error("dpdk { dev 00ff:1f:1f.7 }");
        one_line(&e);
        assert_eq!(e, "plugin `dpdk': dev 00ff:1f:1f.7: no such PCI device");
    });
}

#[test]
fn pci_device_without_a_dpdk_driver_is_a_one_line_error() {
    skip_unless_dpdk!();
    in_child(
        "pci_device_without_a_dpdk_driver_is_a_one_line_error",
        || {
            // A host bridge (class 0x0600): no PMD matches it, so EAL leaves it alone.
            let Some(addr) = std::fs::read_dir("/sys/bus/pci/devices")
                .ok()
                .and_then(|d| {
                    d.filter_map(Result::ok).find_map(|e| {
                        let class = std::fs::read_to_string(e.path().join("class")).ok()?;
                        class
                            .starts_with("0x0600")
                            .then(|| e.file_name().to_string_lossy().into_owned())
                    })
                })
            else {
                sluice_infra::testing::skip("no PCI host bridge to name");
                return;
            };
            let e = start_error(&format!("dpdk {{ dev {addr} }}"));
            one_line(&e);
            assert!(
                e.starts_with(&format!("plugin `dpdk': dev {addr}: no DPDK port (")),
                "{e}"
            );
        },
    );
}

#[test]
fn missing_hugepages_is_a_one_line_error() {
    skip_unless_dpdk!();
    in_child("missing_hugepages_is_a_one_line_error", || {
        let mi = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let free = mi
            .lines()
            .find_map(|l| l.strip_prefix("HugePages_Free:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
        if free > 0 {
            sluice_infra::testing::skip("this machine has free hugepages");
            return;
        }
        let e = start_error("dpdk { vdev net_null0 huge-dir /dev/hugepages }");
        one_line(&e);
        assert!(e.starts_with("plugin `dpdk': no free hugepages"), "{e}");
    });
}

#[test]
fn eal_failure_is_a_one_line_error() {
    skip_unless_dpdk!();
    in_child("eal_failure_is_a_one_line_error", || {
        let api = sluice_dpdk::sys::Api::load(sluice_dpdk::sys::SHIM.unwrap()).unwrap();
        let prefix = format!("--file-prefix=sluice-{}", std::process::id());
        let e = sluice_dpdk::eal::init(
            api,
            &[
                "sluice".into(),
                "--no-huge".into(),
                "--in-memory".into(),
                prefix.clone(),
            ],
        )
        .unwrap_err();
        one_line(&e);
        assert!(e.starts_with("EAL initialisation failed: "), "{e}");
        assert!(
            e.ends_with(&format!("(EAL arguments: --no-huge --in-memory {prefix})")),
            "{e}"
        );
        // EAL had created its runtime directory: removed, not left behind.
        let dir = sluice_dpdk::eal::runtime_dir(api).expect("EAL named its runtime directory");
        assert!(!std::path::Path::new(&dir).exists(), "{dir} left behind");
    });
}

#[test]
fn more_queues_than_the_device_has_is_a_one_line_error() {
    skip_unless_dpdk!();
    in_child(
        "more_queues_than_the_device_has_is_a_one_line_error",
        || {
            let e = start_error("dpdk { vdev net_ring0 { num-rx-queues 64 } }");
            one_line(&e);
            assert_eq!(
                e,
                "plugin `dpdk': vdev net_ring0: num-rx-queues 64 is more than the device's 16"
            );
        },
    );
}

#[test]
fn bad_section_is_a_file_line_error() {
    // No DPDK needed: the section is validated while the file is read.
    let e = start_error("dpdk {\n  dev 02:00.0 { num-rx-queues lots }\n}");
    if sluice_dpdk::sys::SHIM.is_none() {
        assert!(
            e.starts_with("test.conf:1: DPDK support is not built"),
            "{e}"
        );
        return;
    }
    assert_eq!(
        e,
        "test.conf:2: bad value `lots' for `num-rx-queues': expected 1..64"
    );
}
