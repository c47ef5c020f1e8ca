//! Node-harness and dispatcher tests: real buffers, real frames, exact counter deltas.

use super::*;
use sluice_buffer::{BufIdx, Buffer, PageSize, PoolConfig};
use std::any::Any;
use std::sync::{Arc, Mutex};

fn small_pool() -> PoolConfig {
    PoolConfig {
        buffers: 4096,
        data_size: 2048,
        page_size: PageSize::Small,
        shared: false,
    }
}

/// Records every buffer index it receives (and the vector sizes), then frees them.
struct Collect {
    got: Arc<Mutex<Vec<u32>>>,
    sizes: Arc<Mutex<Vec<usize>>>,
}

impl NodeFn for Collect {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        self.got.lock().unwrap().extend(frame.iter().map(|b| b.0));
        self.sizes.lock().unwrap().push(frame.len());
        cx.free(frame);
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

type Log = (Arc<Mutex<Vec<u32>>>, Arc<Mutex<Vec<usize>>>);

fn collect_node(b: &mut GraphBuilder, name: &str) -> Log {
    let got = Arc::new(Mutex::new(Vec::new()));
    let sizes = Arc::new(Mutex::new(Vec::new()));
    let (g, s) = (got.clone(), sizes.clone());
    b.register(NodeRegistration::new(name, NodeKind::Internal, move |_| {
        Box::new(Collect {
            got: g.clone(),
            sizes: s.clone(),
        })
    }));
    (got, sizes)
}

/// A counter by its raw position: only these tests of the counter table use one (nodes name
/// their counters with `counters!`).
#[derive(Clone, Copy)]
struct Raw(usize);
impl CounterId for Raw {
    fn index(self) -> usize {
        self.0
    }
}

/// Sends packets whose first byte is even to arc 0, odd to arc 1, and 0xff to error-drop
/// (arc 2) with its `bad` counter.
struct Split;
impl PacketNode for Split {
    fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        cx.count(Raw(0), 1);
        match b.data().first() {
            Some(0xff) | None => {
                b.hdr.error = cx.error(Raw(1));
                Next(2)
            }
            Some(v) if v % 2 == 0 => Next(0),
            Some(_) => Next(1),
        }
    }
}

fn register_split(b: &mut GraphBuilder) {
    b.register(
        NodeRegistration::new("split", NodeKind::Internal, |_| {
            Box::new(PerPacket::new(Split))
        })
        .nexts(&["even", "odd", "error-drop"])
        .counters(&[
            CounterDesc::info("seen", "packets seen"),
            CounterDesc::error("bad", "bad first byte"),
        ]),
    );
}

fn split_graph() -> (Vlib, Log, Log) {
    let mut b = GraphBuilder::new();
    nodes::register(&mut b);
    let even = collect_node(&mut b, "even");
    let odd = collect_node(&mut b, "odd");
    register_split(&mut b);
    let vm = Vlib::new(b, &CpuConfig::default(), &small_pool()).unwrap();
    (vm, even, odd)
}

fn make_packets(vm: &mut Vlib, first_bytes: &[u8]) -> Vec<BufIdx> {
    let mut v = vec![BufIdx(0); first_bytes.len()];
    assert_eq!(vm.main.bufs().alloc(&mut v), first_bytes.len());
    for (b, &x) in v.iter().zip(first_bytes) {
        // SAFETY: just allocated by this test; one view at a time.
        let mut view = unsafe { vm.pool.buffer(*b) };
        view.write_packet(&[x, 1, 2, 3]);
    }
    v
}

fn counter(vm: &Vlib, node: &str, i: usize) -> u64 {
    let n = vm.registry.find(node).unwrap();
    vm.registry.node(n).stats.counter_total(i)
}

#[test]
fn mixed_nexts_keep_order_per_arc() {
    let (mut vm, even, odd) = split_graph();
    let bytes: Vec<u8> = (0..100u8).map(|i| if i == 50 { 0xff } else { i }).collect();
    let pkts = make_packets(&mut vm, &bytes);
    let split = vm.registry.find("split").unwrap();
    vm.main.inject(split, &pkts);
    vm.main.drain();
    let even_got = even.0.lock().unwrap().clone();
    let odd_got = odd.0.lock().unwrap().clone();
    let expect_even: Vec<u32> = pkts
        .iter()
        .zip(&bytes)
        .filter(|(_, &x)| x != 0xff && x % 2 == 0)
        .map(|(b, _)| b.0)
        .collect();
    let expect_odd: Vec<u32> = pkts
        .iter()
        .zip(&bytes)
        .filter(|(_, &x)| x != 0xff && x % 2 == 1)
        .map(|(b, _)| b.0)
        .collect();
    assert_eq!(even_got, expect_even);
    assert_eq!(odd_got, expect_odd);
    assert_eq!(
        counter(&vm, "split", 0),
        100,
        "seen counter flushed once per frame"
    );
    assert_eq!(
        counter(&vm, "split", 1),
        1,
        "error-drop counted the bad packet on split"
    );
    assert_eq!(vm.pool.stats().in_use, 0);
}

#[test]
fn all_same_next_fast_path_and_frame_chunking() {
    let (mut vm, even, odd) = split_graph();
    let pkts = make_packets(&mut vm, &vec![2u8; 600]);
    let split = vm.registry.find("split").unwrap();
    vm.main.inject(split, &pkts);
    vm.main.drain();
    assert_eq!(even.0.lock().unwrap().len(), 600);
    assert!(odd.0.lock().unwrap().is_empty());
    // split is called with at most 256 buffers per call: 256 + 256 + 88.
    let st = &vm.registry.node(split).stats.per_thread[0];
    assert_eq!(st.calls.get(), 3);
    assert_eq!(st.vectors.get(), 600);
    assert!(even.1.lock().unwrap().iter().all(|&s| s <= FRAME_SIZE));
    assert_eq!(vm.pool.stats().in_use, 0);
}

#[test]
fn enqueue_to_next_runs() {
    let (mut vm, even, odd) = split_graph();
    // Alternating runs: 3 even, 2 odd, 1 even.
    let pkts = make_packets(&mut vm, &[0, 2, 4, 1, 3, 6]);
    let split = vm.registry.find("split").unwrap();
    vm.main.inject(split, &pkts);
    vm.main.drain();
    assert_eq!(
        *even.0.lock().unwrap(),
        vec![pkts[0].0, pkts[1].0, pkts[2].0, pkts[5].0]
    );
    assert_eq!(*odd.0.lock().unwrap(), vec![pkts[3].0, pkts[4].0]);
}

#[test]
fn build_errors_name_the_nodes() {
    let mut b = GraphBuilder::new();
    nodes::register(&mut b);
    b.register(
        NodeRegistration::new("a", NodeKind::Internal, |_| Box::new(PerPacket::new(Split)))
            .nexts(&["nowhere"]),
    );
    assert_eq!(
        b.build(1).err().unwrap().to_string(),
        "node `a': unknown next node `nowhere'"
    );
    let mut b = GraphBuilder::new();
    nodes::register(&mut b);
    nodes::register(&mut b);
    assert_eq!(
        b.build(1).err().unwrap().to_string(),
        "duplicate node name `error-drop'"
    );
}

#[test]
fn feature_order_and_cycles() {
    let f = |n: &str, before: &[&str], after: &[&str]| FeatureOrder {
        name: n.into(),
        runs_before: before.iter().map(|s| s.to_string()).collect(),
        runs_after: after.iter().map(|s| s.to_string()).collect(),
    };
    let order = order_features(
        "ip4-unicast",
        &[
            f("nat44-in2out", &[], &["acl-plugin-in"]),
            f("acl-plugin-in", &["ip4-lookup"], &[]),
            f("ip4-lookup", &[], &[]),
        ],
    )
    .unwrap();
    assert_eq!(order, vec!["acl-plugin-in", "nat44-in2out", "ip4-lookup"]);
    let e = order_features(
        "ip4-unicast",
        &[
            f("a", &["b"], &[]),
            f("b", &["c"], &[]),
            f("c", &["a"], &[]),
        ],
    )
    .unwrap_err();
    let s = e.to_string();
    assert!(
        s.starts_with("feature order cycle on arc `ip4-unicast': "),
        "{s}"
    );
    for n in ["a", "b", "c"] {
        assert!(s.contains(n), "{s}");
    }
}

#[test]
fn runtime_add_next() {
    let (mut vm, even, _odd) = split_graph();
    let split = vm.registry.find("split").unwrap();
    let even_i = vm.registry.find("even").unwrap();
    let punt = vm.registry.find("punt").unwrap();
    assert_eq!(
        vm.add_next(split, even_i).unwrap(),
        Next(0),
        "existing arc is found"
    );
    let n = vm.add_next(split, punt).unwrap();
    assert_eq!(n, Next(3));
    assert_eq!(vm.registry.node(split).next_names[3], "punt");
    drop(even);
}

/// Input node producing `left` packets, tracing within budget.
struct Source {
    left: usize,
}

#[derive(Copy, Clone)]
struct SrcTrace(u32);
impl TraceRecord for SrcTrace {
    fn format(&self, out: &mut String) {
        out.push_str(&format!("test source packet {}", self.0));
    }
}

impl NodeFn for Source {
    fn poll(&mut self, cx: &mut Cx) -> usize {
        let n = self.left.min(FRAME_SIZE);
        let mut v = [BufIdx(0); FRAME_SIZE];
        let got = cx.bufs().alloc(&mut v[..n]);
        let mut budget = cx.trace_budget();
        for (k, &b) in v[..got].iter().enumerate() {
            // SAFETY: just allocated by this node; one view at a time.
            let mut view = unsafe { cx.buffer(b) };
            view.write_packet(&[(k % 2) as u8 * 2, 0, 0, 0]);
            if budget > 0 {
                cx.trace_start(&mut view, SrcTrace(k as u32));
                budget -= 1;
            }
        }
        cx.enqueue_all(Next(0), &v[..got]);
        self.left -= got;
        got
    }
    fn active(&self) -> bool {
        self.left > 0
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

#[test]
fn input_nodes_trace_and_stats() {
    let mut b = GraphBuilder::new();
    nodes::register(&mut b);
    b.register(
        NodeRegistration::new("test-input", NodeKind::Input, |_| {
            Box::new(Source { left: 1000 })
        })
        .nexts(&["split"]),
    );
    let even = collect_node(&mut b, "even");
    let _odd = collect_node(&mut b, "odd");
    register_split(&mut b);
    let mut vm = Vlib::new(b, &CpuConfig::default(), &small_pool()).unwrap();
    let input = vm.registry.find("test-input").unwrap();
    vm.shared.trace.add(input, 3);
    let mut loops = 0;
    while vm.main.wants_poll() {
        vm.run_main_once();
        loops += 1;
        assert!(loops < 100);
    }
    assert_eq!(even.0.lock().unwrap().len(), 1000);
    let st = &vm.registry.node(input).stats.per_thread[0];
    assert_eq!(st.vectors.get(), 1000);
    assert_eq!(st.calls.get(), 4, "256+256+256+232");
    let store = vm.shared.trace.lock();
    assert_eq!(store.packets.len(), 3, "trace budget honoured");
    let names: Vec<&str> = store.packets[0]
        .iter()
        .map(|e| vm.registry.node(e.node).name.as_str())
        .collect();
    assert_eq!(names, vec!["test-input", "split", "even"]);
    drop(store);
    let mut a = sluice_cli::Args::new("");
    let shown = cli::show_trace(&mut vm, &mut a).unwrap();
    assert!(shown.contains("Packet 1"), "{shown}");
    assert!(shown.contains("test source packet 0"), "{shown}");
    assert!(shown.contains(": split"), "{shown}");
    let mut a = sluice_cli::Args::new("");
    let rt = cli::show_runtime(&mut vm, &mut a).unwrap();
    assert!(rt.contains("test-input") && rt.contains("polling"), "{rt}");
    assert_eq!(vm.pool.stats().in_use, 0);
}

/// A process node that wakes on timeouts and events.
struct Ticker {
    log: Arc<Mutex<Vec<Wake>>>,
}
impl NodeFn for Ticker {
    fn process(&mut self, _cx: &mut Cx, wake: Wake) -> Suspend {
        let mut l = self.log.lock().unwrap();
        l.push(wake);
        match l.len() {
            1 => Suspend::Timeout(0.005),
            2 => Suspend::Event,
            _ => Suspend::Done,
        }
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

#[test]
fn process_nodes_suspend_on_timers_and_events() {
    let mut b = GraphBuilder::new();
    nodes::register(&mut b);
    let log = Arc::new(Mutex::new(Vec::new()));
    let l2 = log.clone();
    b.register(NodeRegistration::new(
        "ticker",
        NodeKind::Process,
        move |_| Box::new(Ticker { log: l2.clone() }),
    ));
    let mut vm = Vlib::new(b, &CpuConfig::default(), &small_pool()).unwrap();
    let t0 = std::time::Instant::now();
    while log.lock().unwrap().len() < 2 && t0.elapsed().as_secs() < 5 {
        vm.run_main_once();
    }
    assert!(t0.elapsed().as_secs_f64() >= 0.004, "timeout honoured");
    assert_eq!(*log.lock().unwrap(), vec![Wake::Start, Wake::Timeout]);
    // Now waiting for an event: loops do not wake it.
    for _ in 0..100 {
        vm.run_main_once();
    }
    assert_eq!(log.lock().unwrap().len(), 2);
    let t = vm.registry.find("ticker").unwrap();
    assert_eq!(vm.main.process_state(t), Some("event wait"));
    vm.main.signal(t, 42);
    vm.run_main_once();
    assert_eq!(log.lock().unwrap()[2], Wake::Event(42));
    assert_eq!(vm.main.process_state(t), Some("done"));
    let st = &vm.registry.node(t).stats.per_thread[0];
    assert_eq!(st.suspends.get(), 2);
    assert_eq!(st.calls.get(), 3);
}

#[test]
fn handoff_queue_spsc_and_congestion() {
    let q = handoff::HandoffQueue::new(8);
    let bufs: Vec<BufIdx> = (0..10).map(BufIdx).collect();
    assert_eq!(q.enqueue(&bufs, NodeIndex(7)), 8);
    assert_eq!(q.congestion(), 1);
    let mut out = [(BufIdx(0), NodeIndex(0)); 16];
    assert_eq!(q.dequeue(&mut out[..3]), 3);
    assert_eq!(out[0], (BufIdx(0), NodeIndex(7)));
    assert_eq!(q.enqueue(&bufs[8..], NodeIndex(9)), 2);
    assert_eq!(q.dequeue(&mut out), 7);
    assert_eq!(out[6], (BufIdx(9), NodeIndex(9)));
    assert!(q.is_empty());
}

#[test]
fn handoff_queue_across_threads_loses_nothing() {
    let q = Arc::new(handoff::HandoffQueue::new(64));
    let q2 = q.clone();
    const N: u32 = 200_000;
    let prod = std::thread::spawn(move || {
        let mut i = 0u32;
        while i < N {
            let chunk: Vec<BufIdx> = (i..(i + 32).min(N)).map(BufIdx).collect();
            let n = q2.enqueue(&chunk, NodeIndex(1));
            i += n as u32;
            if n == 0 {
                std::thread::yield_now();
            }
        }
    });
    let mut expect = 0u32;
    let mut out = [(BufIdx(0), NodeIndex(0)); 64];
    while expect < N {
        let n = q.dequeue(&mut out);
        for &(b, node) in &out[..n] {
            assert_eq!(b.0, expect, "FIFO order");
            assert_eq!(node, NodeIndex(1));
            expect += 1;
        }
        if n == 0 {
            std::thread::yield_now();
        }
    }
    prod.join().unwrap();
}

#[test]
fn worker_threads_run_jobs_and_handoff() {
    let mut b = GraphBuilder::new();
    nodes::register(&mut b);
    let even = collect_node(&mut b, "even");
    let cpu = CpuConfig {
        main_core: None,
        workers: vec![None],
    };
    let mut vm = Vlib::new(b, &cpu, &small_pool()).unwrap();
    assert_eq!(vm.n_threads(), 2);
    assert_eq!(vm.on_thread(1, |tg| tg.thread()), Some(1));
    // Hand 300 packets from main to the worker's `even` node.
    let pkts = make_packets(&mut vm, &vec![0u8; 300]);
    let even_i = vm.registry.find("even").unwrap();
    // Through `Shared::handoff_enqueue`, which wakes the (sleeping) worker.
    assert_eq!(vm.shared.handoff_enqueue(0, 1, &pkts, even_i), 300);
    let t0 = std::time::Instant::now();
    while even.0.lock().unwrap().len() < 300 && t0.elapsed().as_secs() < 5 {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(even.0.lock().unwrap().len(), 300);
    // Statistics are per thread and summed on read.
    let st = &vm.registry.node(even_i).stats;
    assert_eq!(st.per_thread[1].vectors.get(), 300);
    assert_eq!(st.per_thread[0].vectors.get(), 0);
    vm.stop_workers();
    assert_eq!(vm.pool.stats().in_use, 0);
}

/// On thread 0, hands its frames to itself on thread 1 with `Cx::handoff_or_drop`; on
/// thread 1, says it `entered`, waits for `gate` and frees them.
struct Hand {
    thread: usize,
    gate: Arc<Mutex<()>>,
    entered: Arc<std::sync::atomic::AtomicBool>,
}

impl NodeFn for Hand {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        if self.thread == 0 {
            cx.handoff_or_drop(1, frame, Raw(0), Raw(1), Next(0));
        } else {
            self.entered
                .store(true, std::sync::atomic::Ordering::Release);
            drop(self.gate.lock().unwrap());
            cx.free(frame);
        }
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// What the handoff queue takes is counted as handed off; what a full queue refuses goes
/// to error-drop with the congestion error (counted, freed), none lost.
#[test]
fn handoff_or_drop_counts_and_drops_what_a_full_queue_refuses() {
    let gate = Arc::new(Mutex::new(()));
    let g = gate.clone();
    let entered = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let e = entered.clone();
    let mut b = GraphBuilder::new();
    nodes::register(&mut b);
    b.register(
        NodeRegistration::new("hand", NodeKind::Internal, move |thread| {
            Box::new(Hand {
                thread,
                gate: g.clone(),
                entered: e.clone(),
            })
        })
        .nexts(&["error-drop"])
        .counters(&[
            CounterDesc::info("handoff", "handed to another thread"),
            CounterDesc::error("congestion_drop", "handoff queue full"),
        ]),
    );
    let cpu = CpuConfig {
        main_core: None,
        workers: vec![None],
    };
    let pool = PoolConfig {
        buffers: 2 * HANDOFF_RING as u32,
        ..small_pool()
    };
    let mut vm = Vlib::new(b, &cpu, &pool).unwrap();
    let hand = vm.registry.find("hand").unwrap();
    let send = |vm: &mut Vlib, n: usize| {
        let pkts = make_packets(vm, &vec![0u8; n]);
        for f in pkts.chunks(FRAME_SIZE) {
            vm.main.inject(hand, f);
            vm.main.drain();
        }
    };
    let held = gate.lock().unwrap();
    // The worker takes the first frame and waits in the node: the queue then fills.
    send(&mut vm, FRAME_SIZE);
    let t0 = std::time::Instant::now();
    while !entered.load(std::sync::atomic::Ordering::Acquire) {
        assert!(t0.elapsed().as_secs() < 20, "the worker did not run");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    send(&mut vm, HANDOFF_RING + 100);
    let took = (FRAME_SIZE + HANDOFF_RING) as u64;
    assert_eq!(
        counter(&vm, "hand", 0),
        took,
        "handoff counts what the queue took"
    );
    assert_eq!(
        counter(&vm, "hand", 1),
        100,
        "the refused ones as congestion"
    );
    assert_eq!(
        vm.pool.stats().in_use as u64,
        took,
        "the refused ones freed"
    );
    drop(held);
    let t0 = std::time::Instant::now();
    while vm.pool.stats().in_use != 0 {
        assert!(t0.elapsed().as_secs() < 20, "the worker did not finish");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    vm.stop_workers();
}

struct Bad;
impl PacketNode for Bad {
    fn process_one(&mut self, _cx: &mut Cx, _b: &mut Buffer<'_>) -> Next {
        Next(9) // never declared
    }
}

/// Debug builds (the tests) stop on an arc the node never declared.
#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "sent a packet along arc 9, but declared only 0 arcs")]
fn undeclared_arc_stops_debug_builds() {
    let mut b = GraphBuilder::new();
    nodes::register(&mut b);
    b.register(NodeRegistration::new("bad", NodeKind::Internal, |_| {
        Box::new(PerPacket::new(Bad))
    }));
    let mut vm = Vlib::new(b, &CpuConfig::default(), &small_pool()).unwrap();
    let pkts = make_packets(&mut vm, &[1]);
    let bad = vm.registry.find("bad").unwrap();
    vm.main.inject(bad, &pkts);
    vm.main.drain();
}

/// Debug builds (the tests) stop on a counter the node never declared.
#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "used counter 5, which it did not declare")]
fn undeclared_counter_stops_debug_builds() {
    struct Miscount;
    impl PacketNode for Miscount {
        fn process_one(&mut self, cx: &mut Cx, _b: &mut Buffer<'_>) -> Next {
            cx.count(Raw(5), 1);
            Next(0)
        }
    }
    let mut b = GraphBuilder::new();
    nodes::register(&mut b);
    b.register(
        NodeRegistration::new("miscount", NodeKind::Internal, |_| {
            Box::new(PerPacket::new(Miscount))
        })
        .nexts(&["null-sink"]),
    );
    let mut vm = Vlib::new(b, &CpuConfig::default(), &small_pool()).unwrap();
    let pkts = make_packets(&mut vm, &[1]);
    let n = vm.registry.find("miscount").unwrap();
    vm.main.inject(n, &pkts);
    vm.main.drain();
}

/// Release builds send packets on an undeclared arc to error-drop, counted.
#[test]
#[cfg(not(debug_assertions))]
fn error_drop_counts_unknown_arcs_as_unhandled() {
    let mut b = GraphBuilder::new();
    nodes::register(&mut b);
    b.register(NodeRegistration::new("bad", NodeKind::Internal, |_| {
        Box::new(PerPacket::new(Bad))
    }));
    let mut vm = Vlib::new(b, &CpuConfig::default(), &small_pool()).unwrap();
    let pkts = make_packets(&mut vm, &[1, 2, 3]);
    let bad = vm.registry.find("bad").unwrap();
    vm.main.inject(bad, &pkts);
    vm.main.drain();
    assert_eq!(vm.pool.stats().in_use, 0, "no leak");
    // Sent to error-drop with error code 0 = error-drop's own `unhandled`.
    assert_eq!(counter(&vm, "error-drop", 0), 3);
}

#[test]
fn main_poster_runs_closures_on_the_main_loop() {
    let (mut vm, _even, _odd) = split_graph();
    let p = vm.main_poster();
    let t = std::thread::spawn(move || {
        p.post(Box::new(|vm: &mut Vlib| vm.put_ext(7u32)));
    });
    t.join().unwrap();
    assert!(vm.main_wants_poll());
    vm.run_main_once();
    assert_eq!(vm.ext::<u32>(), Some(&7));
    assert!(!vm.main_wants_poll() || vm.main.wants_poll());
}

#[test]
fn punt_handler_receives_punted_packets() {
    let (mut vm, _even, _odd) = split_graph();
    let punt = vm.registry.find("punt").unwrap();
    let sink = vm.registry.find("null-sink").unwrap();
    crate::nodes::set_punt_handler(&mut vm, Some(sink)).unwrap();
    let mut bufs = [BufIdx(0); 3];
    assert_eq!(vm.main.bufs().alloc(&mut bufs), 3);
    vm.main.inject(punt, &bufs);
    vm.main.drain();
    assert_eq!(vm.registry.node(sink).stats.counter_total(0), 3);
    assert_eq!(vm.registry.node(punt).stats.counter_total(0), 3);
    crate::nodes::set_punt_handler(&mut vm, None).unwrap();
    assert_eq!(vm.main.bufs().alloc(&mut bufs), 3);
    vm.main.inject(punt, &bufs);
    vm.main.drain();
    assert_eq!(vm.registry.node(sink).stats.counter_total(0), 3);
    assert_eq!(vm.pool.stats().in_use, 0);
}

/// `show buffers` shows the buffers a registered lender holds (`Lent`) apart from those in
/// the graph's hands (`Used`), leaving the other columns where parsers read them.
#[test]
fn show_buffers_shows_lent_buffers_apart() {
    let mut b = GraphBuilder::new();
    nodes::register(&mut b);
    let mut vm = Vlib::new(b, &CpuConfig::default(), &small_pool()).unwrap();
    let mut held = [BufIdx(0); 7];
    assert_eq!(vm.main.bufs().alloc(&mut held), 7);
    fn five(_: &Vlib) -> u64 {
        5
    }
    let row = |vm: &mut Vlib| -> Vec<String> {
        let shown = cli::show_buffers(vm, &mut sluice_cli::Args::new("")).unwrap();
        let line = shown
            .lines()
            .find(|l| l.starts_with("default-numa-0"))
            .unwrap_or_else(|| panic!("{shown}"));
        let r: Vec<String> = line.split_whitespace().map(str::to_string).collect();
        // Total = Free + Cached + Used + Lent.
        let n = |i: usize| -> u64 { r[i].parse().unwrap_or_else(|_| panic!("{r:?}")) };
        assert_eq!(n(5), n(6) + n(7) + n(8) + n(10), "Total: {r:?}");
        r
    };
    let r = row(&mut vm);
    assert_eq!((r[8].as_str(), r[10].as_str()), ("7", "0"), "{r:?}");
    crate::register_buffer_lender(&mut vm, "test", five);
    let r = row(&mut vm);
    assert_eq!(
        (r[8].as_str(), r[10].as_str()),
        ("2", "5"),
        "Used, Lent: {r:?}"
    );
    assert_eq!(r[5], "4096", "Total: {r:?}");
    let detail = cli::show_buffers(&mut vm, &mut sluice_cli::Args::new("detail")).unwrap();
    assert!(detail.contains("\nlent to test: 5\n"), "{detail}");
    // Registering the same name again replaces its count.
    fn three(_: &Vlib) -> u64 {
        3
    }
    crate::register_buffer_lender(&mut vm, "test", three);
    let r = row(&mut vm);
    assert_eq!(
        (r[8].as_str(), r[10].as_str()),
        ("4", "3"),
        "Used, Lent: {r:?}"
    );
    vm.main.bufs().free(&held);
    assert_eq!(vm.pool.stats().in_use, 0);
}

/// `Vlib::add_node` and `Vlib::add_next` wait `Vlib::thread_wait` for each worker: a
/// worker that does not take the change in time is an error naming it
/// (`GraphError::NotTaken`), not Ok with that worker lacking the node or arc; an arc found
/// again is an error too until every thread has taken the changes before it.
#[test]
fn topology_change_a_stuck_worker_did_not_take_is_an_error() {
    use std::time::Duration;
    let mut b = GraphBuilder::new();
    nodes::register(&mut b);
    let cpu = CpuConfig {
        main_core: None,
        workers: vec![None],
    };
    let mut vm = Vlib::new(b, &cpu, &small_pool()).unwrap();
    let wait = Duration::from_millis(200);
    let (stuck, late) = crate::testing::StuckWorkers::hold(&mut vm, wait);
    assert_eq!(late, [1]);
    let not_taken = GraphError::NotTaken {
        threads: vec![1],
        wait,
    };
    let reg = NodeRegistration::new("late", NodeKind::Internal, |_| {
        Box::new(Collect {
            got: Arc::default(),
            sizes: Arc::default(),
        })
    });
    assert_eq!(vm.add_node(reg), Err(not_taken.clone()));
    // The registry and the main thread have it; the worker makes it when it answers.
    let late_i = vm.registry.find("late").expect("registered");
    assert!(vm.main.has_node(late_i));
    let drop_i = vm.registry.lookup("error-drop").unwrap();
    assert_eq!(vm.add_next(late_i, drop_i), Err(not_taken.clone()));
    // Found, but the worker has not taken it: still an error, after waiting for the
    // worker's pending answer (no new job queued behind the stuck one).
    let t = std::time::Instant::now();
    assert_eq!(vm.add_next(late_i, drop_i), Err(not_taken.clone()));
    assert!(t.elapsed() >= wait / 2, "did not wait: {:?}", t.elapsed());
    assert_eq!(
        not_taken.to_string(),
        "thread(s) 1 did not take the graph change within 0.2 s: they take it when they answer"
    );
    // The worker answers: its queue runs in order, and the arc is Ok at the first call
    // after the release (it waits for the answer that is on its way).
    stuck.release(&mut vm);
    let next = vm.add_next(late_i, drop_i).expect("every thread answers");
    assert_eq!(next, Next(0));
    assert_eq!(vm.on_thread(1, move |tg| tg.has_node(late_i)), Some(true));
    vm.stop_workers();
}

/// Resolves its frame into the thread's scratch and hands it on whole along arc 0.
struct ResolveAndPass;
impl NodeFn for ResolveAndPass {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        let (_, frame, s) = cx.resolve_frame(frame);
        cx.enqueue_all(Next(0), frame);
        cx.put_frame_scratch(s);
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// Resolves its frame into the thread's scratch (writing other addresses there) and frees it.
struct ResolveAndFree;
impl NodeFn for ResolveAndFree {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        let (_, frame, s) = cx.resolve_frame(frame);
        cx.put_frame_scratch(s);
        cx.free(frame);
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// Per frame: whether it came handed on unchanged (`Cx::handed_frame`), and whether every
/// address `Cx::resolve_frame` gave was its own buffer's (header and first data byte).
type HandLog = Arc<Mutex<Vec<(bool, bool)>>>;

/// Whether `frame` came handed on unchanged (`Cx::handed_frame`; the scratch given back).
fn came_handed(cx: &mut Cx, frame: &[BufIdx]) -> bool {
    match cx.handed_frame(frame) {
        Some((_, _, s)) => {
            cx.put_frame_scratch(s);
            true
        }
        None => false,
    }
}

/// Looks at its frame's addresses (see [`HandLog`]), then frees it.
struct CheckAddrs(HandLog);
impl NodeFn for CheckAddrs {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        let handed = came_handed(cx, frame);
        let (arena, frame, s) = cx.resolve_frame(frame);
        let pool = cx.pool_ref();
        let mut right = true;
        for (i, &b) in frame.iter().enumerate() {
            // SAFETY: this node owns the buffer; a short-lived view, read only.
            let want = unsafe { pool.buffer(b) }.data().as_ptr();
            let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                // SAFETY: as above, the view ends before the next; `addrs` was resolved
                // for this frame (what the test checks: `buffer_at`'s own debug check is
                // what a stale entry trips first in a debug build, the compare below
                // says it in release).
                unsafe { arena.buffer_at(&s.addrs, i, b) }.data().as_ptr()
            }));
            right &= got.is_ok_and(|p| p == want);
        }
        cx.put_frame_scratch(s);
        self.0.lock().unwrap().push((handed, right));
        cx.free(frame);
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// "a" hands its frame to "b" whole; "c" resolves another frame; "d" sends a frame to "b"
/// too: the graph of the handed-frame tests.
fn handed_graph() -> (Vlib, HandLog) {
    let mut b = GraphBuilder::new();
    nodes::register(&mut b);
    let log = HandLog::default();
    let l = log.clone();
    b.register(
        NodeRegistration::new("a", NodeKind::Internal, |_| Box::new(ResolveAndPass)).nexts(&["b"]),
    );
    b.register(
        NodeRegistration::new("d", NodeKind::Internal, |_| Box::new(ResolveAndPass)).nexts(&["b"]),
    );
    b.register(NodeRegistration::new("b", NodeKind::Internal, move |_| {
        Box::new(CheckAddrs(l.clone()))
    }));
    b.register(NodeRegistration::new("c", NodeKind::Internal, |_| {
        Box::new(ResolveAndFree)
    }));
    let vm = Vlib::new(b, &CpuConfig::default(), &small_pool()).unwrap();
    (vm, log)
}

/// A frame a node resolved and sent on whole to a node with an empty queue arrives
/// handed on unchanged: the next node keeps its addresses without comparing the frame.
#[test]
fn a_frame_handed_on_whole_keeps_its_addresses() {
    let (mut vm, log) = handed_graph();
    for n in [1, 7, 256] {
        let f = make_packets(&mut vm, &vec![1u8; n]);
        let a = vm.registry.find("a").unwrap();
        vm.main.inject(a, &f);
        vm.main.drain();
    }
    assert_eq!(*log.lock().unwrap(), [(true, true); 3]);
    assert_eq!(vm.pool.stats().in_use, 0);
}

/// The frame scratch changes between the node that handed a frame on and the node that
/// gets it ("c", run in between, resolves another frame of the same length there): the
/// next node must not take the scratch's addresses for its frame's. (Without the stamp
/// and the ends compare, "b" reads "c"'s buffers.)
#[test]
fn a_frame_handed_on_then_another_resolved_is_resolved_again() {
    let (mut vm, log) = handed_graph();
    let (a, c) = (
        vm.registry.find("a").unwrap(),
        vm.registry.find("c").unwrap(),
    );
    for n in [1, 5, 256] {
        let f1 = make_packets(&mut vm, &vec![1u8; n]);
        let f2 = make_packets(&mut vm, &vec![2u8; n]);
        // Pending: a, c; a adds b after them.
        vm.main.inject(a, &f1);
        vm.main.inject(c, &f2);
        vm.main.drain();
    }
    assert_eq!(*log.lock().unwrap(), [(false, true); 3]);
    assert_eq!(vm.pool.stats().in_use, 0);
}

/// Another node sends packets to the node a frame was handed to before it runs: its queue
/// no longer holds only that frame, and it is resolved whole. (Without forgetting the
/// handed frame on that push, "b" takes the first frame's addresses for the second's
/// packets.)
#[test]
fn a_frame_handed_on_then_joined_by_more_is_resolved_again() {
    let (mut vm, log) = handed_graph();
    let (a, d) = (
        vm.registry.find("a").unwrap(),
        vm.registry.find("d").unwrap(),
    );
    for n in [1, 100] {
        let f1 = make_packets(&mut vm, &vec![1u8; n]);
        let f2 = make_packets(&mut vm, &vec![2u8; n]);
        // Pending: a, d; both send their frame to b, which gets the two as one.
        vm.main.inject(a, &f1);
        vm.main.inject(d, &f2);
        vm.main.drain();
    }
    assert_eq!(*log.lock().unwrap(), [(false, true); 2]);
    assert_eq!(vm.pool.stats().in_use, 0);
}

/// An input node's burst: `bursts` frames of `n` packets a poll, each resolved into the
/// frame scratch and sent to arc 0 with `Cx::enqueue_all_resolved` (the stamp read after
/// the resolve; with `stamped` false, `Stamp::NONE`).
struct ResolvedBursts {
    n: usize,
    bursts: usize,
    stamped: bool,
    left: usize,
}
impl NodeFn for ResolvedBursts {
    fn poll(&mut self, cx: &mut Cx) -> usize {
        if self.left == 0 {
            return 0;
        }
        self.left -= 1;
        for _ in 0..self.bursts {
            let mut v = [BufIdx(0); FRAME_SIZE];
            assert_eq!(cx.bufs().alloc(&mut v[..self.n]), self.n);
            let arena = cx.arena();
            let mut s = cx.take_frame_scratch();
            arena.resolve(&v[..self.n], crate::SCRATCH_AHEAD, &mut s.addrs);
            let stamp = if self.stamped {
                s.addrs.stamp()
            } else {
                sluice_buffer::Stamp::NONE
            };
            cx.put_frame_scratch(s);
            // SAFETY: the stamp was read right after resolving v[..n], unchanged since.
            unsafe { cx.enqueue_all_resolved(Next(0), &v[..self.n], stamp) };
        }
        self.n * self.bursts
    }
    fn active(&self) -> bool {
        self.left > 0
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// Runs one poll of a `ResolvedBursts` input into a `CheckAddrs` node: what it logged.
fn resolved_bursts(n: usize, bursts: usize, stamped: bool) -> Vec<(bool, bool)> {
    let mut b = GraphBuilder::new();
    nodes::register(&mut b);
    let log = HandLog::default();
    let l = log.clone();
    b.register(
        NodeRegistration::new("src", NodeKind::Input, move |_| {
            Box::new(ResolvedBursts {
                n,
                bursts,
                stamped,
                left: 1,
            })
        })
        .nexts(&["b"]),
    );
    b.register(NodeRegistration::new("b", NodeKind::Internal, move |_| {
        Box::new(CheckAddrs(l.clone()))
    }));
    let mut vm = Vlib::new(b, &CpuConfig::default(), &small_pool()).unwrap();
    vm.run_main_once();
    assert_eq!(vm.pool.stats().in_use, 0);
    let got = log.lock().unwrap().clone();
    got
}

/// An input node's burst resolved by the node and sent with its stamp arrives handed on
/// (the next node keeps the addresses without comparing the frame); without the stamp, or
/// with a second burst joining it in the queue, it is resolved again, its addresses right.
#[test]
fn an_input_burst_sent_with_its_stamp_arrives_handed_on() {
    for n in [1, 7, 256] {
        assert_eq!(resolved_bursts(n, 1, true), [(true, true)], "{n}");
        assert_eq!(resolved_bursts(n, 1, false), [(false, true)], "{n}");
    }
    // Two bursts of 100 in one queue: one frame of 200, not the second burst's handed.
    assert_eq!(resolved_bursts(100, 2, true), [(false, true)]);
}

/// Takes its frame as the end of the path: logs whether it came handed on, then
/// `Cx::free_frame`.
struct FreeFrame(Arc<Mutex<Vec<bool>>>);
impl NodeFn for FreeFrame {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        let handed = came_handed(cx, frame);
        self.0.lock().unwrap().push(handed);
        cx.free_frame(frame);
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// `Cx::free_frame` of a frame handed on (through the resolved addresses) and of one that
/// was not: every buffer back in the pool, the chains behind heads too.
#[test]
fn free_frame_frees_a_handed_frame_and_its_chains() {
    let mut b = GraphBuilder::new();
    nodes::register(&mut b);
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    b.register(
        NodeRegistration::new("a", NodeKind::Internal, |_| Box::new(ResolveAndPass)).nexts(&["t"]),
    );
    b.register(NodeRegistration::new("t", NodeKind::Internal, move |_| {
        Box::new(FreeFrame(l.clone()))
    }));
    let mut vm = Vlib::new(b, &CpuConfig::default(), &small_pool()).unwrap();
    let (a, t) = (
        vm.registry.find("a").unwrap(),
        vm.registry.find("t").unwrap(),
    );
    for n in [1, 9, 256] {
        let f = make_packets(&mut vm, &vec![1u8; n]);
        // The middle packet carries a chain of two.
        let tail = make_packets(&mut vm, &[2, 3]);
        vm.main.bufs().chain_append(f[n / 2], tail[0]);
        vm.main.bufs().chain_append(f[n / 2], tail[1]);
        vm.main.inject(a, &f);
        vm.main.drain();
        assert_eq!(vm.pool.stats().in_use, 0, "{n} handed");
        let f = make_packets(&mut vm, &vec![1u8; n]);
        let tail = make_packets(&mut vm, &[2]);
        vm.main.bufs().chain_append(f[0], tail[0]);
        vm.main.inject(t, &f);
        vm.main.drain();
        assert_eq!(vm.pool.stats().in_use, 0, "{n} not handed");
    }
    assert_eq!(
        *log.lock().unwrap(),
        [true, false, true, false, true, false]
    );
}
