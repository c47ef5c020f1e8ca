//! `pg-input` (a stream's packets to its node) and `pg-tx` (capture to pcap, then freed).

use super::*;
use sluice_vnet::pg::stream::read_pcap;

/// The UDP frame the streams send (as [`udp4`] builds it).
const DATA: &str = "IP4: 02:00:00:00:00:02 -> 02:00:00:00:00:01
    UDP: 10.0.0.2 -> 10.0.0.1
    UDP: 1234 -> 5678
    incrementing 18";

/// Adds stream `s0` of `limit` packets from pg0 (with `extra` options) to ethernet-input,
/// captures that arc and runs the dispatcher until all of them are there (polled from the
/// dispatcher loop; bounded, not a speed check).
fn run_stream(t: &mut NodeTest, limit: usize, extra: &str) {
    let new = format!(
        "packet-generator new {{ name s0 limit {limit} node ethernet-input interface pg0{extra} data {{ {DATA} }} }}"
    );
    t.cli
        .execute(&mut t.h.vm, &new)
        .unwrap_or_else(|e| panic!("`{new}' failed: {e}"));
    t.capture("ethernet-input");
    t.cli("packet-generator enable");
    run_until(t, "the stream", |t| t.arc("ethernet-input").len() >= limit);
}

/// Replays `pkts` from pg0 into ethernet-input (`limit` packets in bursts of `maxframe`),
/// runs the dispatcher until `expect` of them are there and a little longer (bounded, not
/// a speed check), and returns the bytes of what arrived.
fn replay_pcap(
    t: &mut NodeTest,
    name: &str,
    pkts: Vec<Vec<u8>>,
    limit: usize,
    maxframe: usize,
    expect: usize,
) -> Vec<Vec<u8>> {
    add_pcap_stream(t, name, pkts, limit, maxframe);
    capture_until(t, expect)
}

/// Adds a (disabled) stream replaying `pkts` from pg0 into ethernet-input (`limit` packets
/// in bursts of `maxframe`).
fn add_pcap_stream(
    t: &mut NodeTest,
    name: &str,
    pkts: Vec<Vec<u8>>,
    limit: usize,
    maxframe: usize,
) {
    let def = sluice_vnet::pg::stream::StreamDef {
        name: name.into(),
        interface: Some("pg0".into()),
        node: Some("ethernet-input".into()),
        limit: Some(limit as u64),
        rate: None,
        maxframe,
        worker: None,
        source: sluice_vnet::pg::stream::Source::Pcap(std::sync::Arc::new(pkts)),
        tx_interface: None,
    };
    sluice_vnet::pg::add_stream(&mut t.h.vm, def).unwrap_or_else(|e| panic!("{e}"));
}

/// Captures ethernet-input, enables the streams, runs the dispatcher until `expect` packets
/// are there and a little longer (bounded, not a speed check), and returns their bytes.
fn capture_until(t: &mut NodeTest, expect: usize) -> Vec<Vec<u8>> {
    t.capture("ethernet-input");
    t.cli("packet-generator enable");
    run_until(t, "the stream", |t| t.arc("ethernet-input").len() >= expect);
    for _ in 0..10 {
        t.vm.main.run_once();
    }
    t.arc("ethernet-input")
        .into_iter()
        .map(|p| p.data)
        .collect()
}

#[test]
fn pg_input_sends_a_limited_stream_to_its_node() {
    let mut t = NodeTest::new("pg-input");
    t.cli(
        "create packet-generator interface pg0
         set interface state pg0 up",
    );
    let pg0 = t.sw_if("pg0");
    run_stream(&mut t, 5, "");
    for _ in 0..10 {
        t.vm.main.run_once();
    }
    let got = t.arc("ethernet-input");
    assert_eq!(got.len(), 5, "exactly the limit");
    let mut want = udp4("10.0.0.2", "10.0.0.1");
    // Plain IPv4/UDP streams take pg's synthetic fast path: UDP checksum 0 (RFC 768).
    want[14 + 20 + 6..14 + 20 + 8].fill(0);
    for p in &got {
        assert_eq!((p.hdr.rx_if, p.hdr.tx_if), (pg0, 0));
        assert_eq!(p.data, want);
    }
    t.assert_counters(&[]);
    t.assert_no_leaks();
}

#[test]
fn pg_tx_captures_up_to_the_count_and_frees_everything() {
    let mut t = NodeTest::new("pg-tx");
    t.cli(
        "create packet-generator interface pg0
         create packet-generator interface pg1",
    );
    let (pg0, pg1) = (t.sw_if("pg0"), t.sw_if("pg1"));
    let path =
        std::env::temp_dir().join(format!("sluice-l2split-pgtx-{}.pcap", std::process::id()));
    t.cli(&format!(
        "packet-generator capture pg0 pcap {} count 2",
        path.display()
    ));
    let f = udp4("10.0.0.2", "10.0.0.1");
    let mut g = f.clone();
    g[14 + 8] ^= 1; // a different second packet (TTL)
    let bufs = [
        t.packet(&f, |h| h.tx_if = pg0),
        t.packet(&f, |h| h.tx_if = pg1), // no capture on pg1
        t.packet(&g, |h| h.tx_if = pg0),
        t.packet(&f, |h| h.tx_if = pg0), // past the count
    ];
    t.inject(&bufs);
    let written = read_pcap(&path);
    let _ = std::fs::remove_file(&path);
    assert_eq!(written.unwrap_or_else(|e| panic!("pcap: {e}")), [f, g]);
    assert!(t.arc_counts().is_empty(), "pg-tx has no next arc");
    t.assert_counters(&[("captured", 2)]);
    t.assert_no_leaks();
}

/// A frame from `interface-output` with a chained packet reaches pg-tx with `packet-generator
/// capture` on: the packets are written (the chained one as its whole chain) and the frame
/// is freed with the chain's tail: nothing leaks. (Injected, the frame is not one
/// interface-output got handed, so pg-tx takes `free_frame`'s plain path here.)
#[test]
fn a_frame_with_a_chain_from_interface_output_is_captured_and_freed_by_pg_tx() {
    let mut t = NodeTest::new("pg-tx");
    t.cli(
        "create packet-generator interface pg0
         set interface state pg0 up",
    );
    let pg0 = t.sw_if("pg0");
    let path = std::env::temp_dir().join(format!("sluice-pgio-handed-{}.pcap", std::process::id()));
    t.cli(&format!(
        "packet-generator capture pg0 pcap {} count 10",
        path.display()
    ));
    let f = udp4("10.0.0.2", "10.0.0.1");
    let (head_part, tail_part) = f.split_at(20);
    let single = t.packet(&f, |h| h.tx_if = pg0);
    let head = t.packet(head_part, |h| h.tx_if = pg0);
    let tail = t.packet(tail_part, |_| {});
    t.h.vm.main.bufs().chain_append(head, tail);
    let last = t.packet(&f, |h| h.tx_if = pg0);
    t.inject_at("interface-output", &[single, head, last]);
    let written = read_pcap(&path);
    let _ = std::fs::remove_file(&path);
    assert_eq!(
        written.unwrap_or_else(|e| panic!("pcap: {e}")),
        [f.clone(), f.clone(), f]
    );
    t.assert_counters(&[("captured", 3)]);
    t.assert_no_leaks();
}

/// A frame handed on whole (ip4-rewrite → interface-output → pg-tx) with a chained
/// packet, capture on: pg-tx frees it through the addresses resolved upstream
/// (`Cx::free_frame`'s handed path, `free_at`), the chain's tail too: nothing leaks.
#[test]
fn a_handed_frame_with_a_chain_is_captured_and_freed_by_pg_tx() {
    let mut t = NodeTest::new("pg-tx");
    t.cli(&format!(
        "create packet-generator interface pg0
         set interface state pg0 up
         set interface ip address pg0 10.0.0.1/24
         ip neighbor pg0 10.0.0.2 {PEER_MAC} static"
    ));
    let pg0 = t.sw_if("pg0");
    let path = std::env::temp_dir().join(format!("sluice-pgio-hand-{}.pcap", std::process::id()));
    t.cli(&format!(
        "packet-generator capture pg0 pcap {} count 10",
        path.display()
    ));
    let f = udp4_l3("10.0.0.9", "10.0.0.2");
    let (head_part, tail_part) = f.split_at(20);
    let single = t.packet(&f, |h| h.rx_if = pg0);
    let head = t.packet(head_part, |h| h.rx_if = pg0);
    let tail = t.packet(tail_part, |_| {});
    t.h.vm.main.bufs().chain_append(head, tail);
    let last = t.packet(&f, |h| h.rx_if = pg0);
    t.inject_at("ip4-lookup", &[single, head, last]);
    let written = read_pcap(&path);
    let _ = std::fs::remove_file(&path);
    let written = written.unwrap_or_else(|e| panic!("pcap: {e}"));
    assert_eq!(written.len(), 3, "every packet captured");
    for w in &written {
        assert_eq!(w.len(), 14 + f.len(), "Ethernet header and the whole chain");
    }
    t.assert_counters(&[("captured", 3)]);
    t.assert_no_leaks();
}

#[test]
fn a_stream_of_an_empty_pcap_is_refused() {
    let mut t = NodeTest::new("pg-input");
    t.cli("create packet-generator interface pg0");
    let def = sluice_vnet::pg::stream::StreamDef {
        name: "empty".into(),
        interface: Some("pg0".into()),
        node: Some("ethernet-input".into()),
        limit: Some(10),
        rate: None,
        maxframe: sluice_vnet::pg::FRAME,
        worker: None,
        source: sluice_vnet::pg::stream::Source::Pcap(std::sync::Arc::new(Vec::new())),
        tx_interface: None,
    };
    let e = sluice_vnet::pg::add_stream(&mut t.h.vm, def).unwrap_err();
    assert!(e.to_string().contains("no packets"), "{e}");
    t.assert_no_leaks();
}

#[test]
fn pg_input_headers_are_the_template_whatever_the_buffers_held_before() {
    use sluice_buffer::{flags, BufferHeader};
    let mut t = NodeTest::new("pg-input");
    t.cli(
        "create packet-generator interface pg0
         create packet-generator interface pg1
         set interface state pg0 up",
    );
    let (pg0, pg1) = (t.sw_if("pg0"), t.sw_if("pg1"));
    // Buffers whose first cache line a previous user left dirty, freed back to the cache
    // pg-input allocates from.
    let dirty: Vec<_> = (0..8)
        .map(|_| {
            t.h.packet(&[0xee; 100], |h| {
                h.current_data = -16;
                h.flags = flags::GSO
                    | flags::TRACED
                    | flags::TOTAL_LENGTH_VALID
                    | flags::TX_SUB
                    | flags::L4_CHECKSUM_CORRECT
                    | flags::OFFLOAD_L4_CKSUM
                    | flags::RX_TSC;
                h.error = 7;
                h.feature_cursor = 5;
                h.rx_if = 99;
                h.tx_if = 98;
                h.total_length_not_including_first_buffer = 1234;
                h.trace_index = 17;
                h.l2.l2_hdr_offset = -14;
                h.l2.bd_index = 3;
                h.l2.feature_bitmap = 0xffff;
                h.ip.adj_index = 42;
                h.ip.fib_index = 4;
                h.handoff_thread = 2;
                h.gso_size = 1400;
                h.gso_type = 1;
                h.gso_l4_offset = 20;
                h.gso_l4_hdr_len = 20;
            })
        })
        .collect();
    t.h.vm.main.bufs().free(&dirty);
    run_stream(&mut t, 8, " tx-interface pg1");
    let got = t.arc("ethernet-input");
    assert_eq!(got.len(), 8);
    let mut reused: Vec<_> = got.iter().map(|p| p.index).collect();
    let mut freed = dirty.clone();
    reused.sort();
    freed.sort();
    assert_eq!(reused, freed, "the stream reused the dirtied buffers");
    for p in &got {
        let mut want = BufferHeader::TEMPLATE;
        want.rx_if = pg0;
        want.tx_if = pg1;
        want.current_length = p.data.len() as u16;
        assert_eq!(p.hdr, want);
    }
    t.assert_no_leaks();
}

#[test]
fn a_long_packet_without_buffers_for_its_tail_is_dropped_not_sent_cut() {
    let mut t = NodeTest::new("pg-input");
    t.cli(
        "create packet-generator interface pg0
         set interface state pg0 up",
    );
    let long = vec![0x5a; t.vm.pool.data_size() + 100];
    // Every buffer but one taken: the packet gets its first buffer, not its tail's.
    let mut held = Vec::new();
    while let Some(b) = t.h.vm.main.bufs().alloc_one() {
        held.push(b);
    }
    let spare = held.pop().expect("a pool with buffers");
    t.h.vm.main.bufs().free(&[spare]);
    let def = sluice_vnet::pg::stream::StreamDef {
        name: "long".into(),
        interface: Some("pg0".into()),
        node: Some("ethernet-input".into()),
        limit: Some(1),
        rate: None,
        maxframe: sluice_vnet::pg::FRAME,
        worker: None,
        source: sluice_vnet::pg::stream::Source::Pcap(std::sync::Arc::new(vec![long])),
        tx_interface: None,
    };
    sluice_vnet::pg::add_stream(&mut t.h.vm, def).unwrap_or_else(|e| panic!("{e}"));
    t.capture("ethernet-input");
    t.cli("packet-generator enable");
    run_until(&mut t, "the tail's allocation failure", |t| {
        t.counter("alloc_fail") > 0
    });
    for _ in 0..10 {
        t.vm.main.run_once();
    }
    assert!(
        t.arc("ethernet-input").is_empty(),
        "a packet without its tail is not sent"
    );
    t.assert_counters(&[("alloc_fail", 1)]);
    t.h.vm.main.bufs().free(&held);
    t.assert_no_leaks();
}

/// A pg-input test with pg0 created and up.
fn pg0_test() -> NodeTest {
    let mut t = NodeTest::new("pg-input");
    t.cli(
        "create packet-generator interface pg0
         set interface state pg0 up",
    );
    t
}

/// Three pcap packets: one in a buffer, one longer than a buffer chain holds (`too_long`),
/// one in a chain of two.
fn fits_too_long_fits(t: &NodeTest) -> [Vec<u8>; 3] {
    let per = t.vm.pool.data_size();
    let long = vec![0x5a; per * (1 + sluice_buffer::ALLOC_WITH_MAX_BUFFERS) + 1];
    [vec![0x11; 60], long, vec![0x22; per + 100]]
}

/// A pcap packet longer than one buffer chain holds is dropped as `too_long` (not
/// `alloc_fail`: the pool has buffers), and the packets around it go out in order.
#[test]
fn a_packet_too_long_for_a_chain_is_counted_apart_and_the_rest_sent_in_order() {
    let mut t = pg0_test();
    let [a, long, b] = fits_too_long_fits(&t);
    let c = vec![0x33; 70];
    let pkts = vec![a.clone(), long, b.clone(), c.clone()];
    let got = replay_pcap(&mut t, "too-long", pkts, 4, sluice_vnet::pg::FRAME, 3);
    let bytes = (a.len() + b.len() + c.len()) as u64;
    assert_eq!(got, [a, b, c]);
    t.assert_counters(&[("too_long", 1)]);
    // The dropped packet's bytes are not counted as received.
    assert_eq!(pg0_rx(&mut t), (3, bytes));
    t.assert_no_leaks();
}

/// pg0's `rx packets` and `rx bytes`.
fn pg0_rx(t: &mut NodeTest) -> (u64, u64) {
    use sluice_vnet::interface::counter;
    let pg0 = t.sw_if("pg0");
    let ifs = t.h.vm.ext_mut::<sluice_vnet::Interfaces>();
    let c = &ifs.get(sluice_vnet::SwIfIndex(pg0)).expect("pg0").counters;
    (c.total(counter::RX_PACKETS), c.total(counter::RX_BYTES))
}

/// A pcap shorter than a frame and not dividing it, replayed over several frames: every
/// burst starts at another packet of it. The packets go out in the pcap's order whatever the
/// burst they fall in, and pg0's `rx bytes` is theirs exactly (pg-input takes a burst's
/// bytes from the pcap's prefix sums, per run of consecutive pcap packets).
#[test]
fn a_pcap_wrapping_inside_bursts_goes_out_in_order_and_counts_its_bytes() {
    let mut t = NodeTest::new("pg-input");
    t.cli(
        "create packet-generator interface pg0
         set interface state pg0 up",
    );
    // Seven lengths (short, at the inline copy's edges, past it), each packet its own bytes.
    let lens = [14usize, 60, 64, 127, 128, 129, 300];
    let pkts: Vec<Vec<u8>> = lens
        .iter()
        .enumerate()
        .map(|(k, &n)| (0..n).map(|j| (k * 31 + j) as u8).collect())
        .collect();
    // Bursts of 100 (`maxframe`): 100 = 14 * 7 + 2, so each burst starts elsewhere in the
    // pcap. pg-input replays it as 37 copies (259 packets, `replay_source`), which the third
    // burst wraps; 450 packets end inside a burst and inside the pcap.
    let limit = 450;
    let got = replay_pcap(&mut t, "wrap", pkts.clone(), limit, 100, limit);
    let want: Vec<_> = pkts.iter().cycle().take(limit).cloned().collect();
    assert_eq!(got.len(), limit);
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "packet {k}");
    }
    let bytes: usize = want.iter().map(Vec::len).sum();
    assert_eq!(pg0_rx(&mut t), (limit as u64, bytes as u64));
    t.assert_counters(&[]);
    t.assert_no_leaks();
}

/// A packet dropped (`too_long`) in every run of a burst that wraps the pcap several times,
/// at another place of the burst each time: the others go out in order, and `rx bytes`
/// leaves out exactly the dropped ones (pg-input subtracts a dropped packet from its run's
/// prefix-sum bytes, in whichever run it falls). Twice: a 3-packet pcap (replayed as copies
/// of itself, a frame long) in bursts of 8, and a 33-packet one (replayed as is) in bursts
/// of 100, four runs a burst.
#[test]
fn a_packet_dropped_inside_a_wrapped_burst_leaves_the_rest_in_order_and_bytes_exact() {
    for (reps, maxframe, limit) in [(1, 8, 16), (11, 100, 250)] {
        let mut t = pg0_test();
        let [a, long, b] = fits_too_long_fits(&t);
        let pkts: Vec<Vec<u8>> = [a.clone(), long, b.clone()]
            .iter()
            .cycle()
            .take(3 * reps)
            .cloned()
            .collect();
        let want: Vec<Vec<u8>> = [a, Vec::new(), b]
            .iter()
            .cycle()
            .take(limit)
            .filter(|p| !p.is_empty())
            .cloned()
            .collect();
        let got = replay_pcap(&mut t, "wrap-drop", pkts, limit, maxframe, want.len());
        assert_eq!(got.len(), want.len(), "pcap of {}", 3 * reps);
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "pcap of {}: packet {k}", 3 * reps);
        }
        t.assert_counters(&[("too_long", (limit - want.len()) as u64)]);
        let bytes: usize = want.iter().map(Vec::len).sum();
        assert_eq!(pg0_rx(&mut t), (want.len() as u64, bytes as u64));
        t.assert_no_leaks();
    }
}

/// Two pcap streams on one thread: pg-input resolves each burst into the same frame
/// scratch, one stream after the other, and both bursts go to ethernet-input in one frame.
/// Each stream's packets arrive whole and in its pcap's order, none written through the
/// other burst's addresses.
#[test]
fn two_pcap_streams_on_one_thread_each_go_out_whole_and_in_order() {
    let mut t = pg0_test();
    // First byte: the stream (0xa0 / 0xb0) and the packet's place in its pcap.
    let pcap = |tag: u8, lens: &[usize]| -> Vec<Vec<u8>> {
        lens.iter()
            .enumerate()
            .map(|(k, &n)| {
                let mut p: Vec<u8> = (0..n).map(|j| (j as u8) ^ tag).collect();
                p[0] = tag + k as u8;
                p
            })
            .collect()
    };
    let p1 = pcap(0xa0, &[60, 127, 64, 300, 14]);
    let p2 = pcap(0xb0, &[129, 60, 90]);
    let (l1, l2) = (37, 29);
    add_pcap_stream(&mut t, "one", p1.clone(), l1, 16);
    add_pcap_stream(&mut t, "two", p2.clone(), l2, 16);
    let got = capture_until(&mut t, l1 + l2);
    assert_eq!(got.len(), l1 + l2);
    for (tag, pkts, limit) in [(0xa0u8, &p1, l1), (0xb0, &p2, l2)] {
        let mine: Vec<_> = got.iter().filter(|p| p[0] & 0xf0 == tag).collect();
        let want: Vec<_> = pkts.iter().cycle().take(limit).collect();
        assert_eq!(mine.len(), limit, "stream {tag:#x}");
        for (k, (g, w)) in mine.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "stream {tag:#x} packet {k}");
        }
    }
    let bytes: usize = p1
        .iter()
        .cycle()
        .take(l1)
        .chain(p2.iter().cycle().take(l2))
        .map(Vec::len)
        .sum();
    assert_eq!(pg0_rx(&mut t), ((l1 + l2) as u64, bytes as u64));
    t.assert_counters(&[]);
    t.assert_no_leaks();
}
