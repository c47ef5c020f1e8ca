//! Node-level test harness: run one node on real buffers and look at what came out of each of
//! its next arcs, its counters and the buffer pool.
//!
//! A [`Harness`] wraps a built [`Vlib`] and a node under test. Every node the node under test
//! has an arc to (and `error-drop`) is replaced, on every thread, by a capture node that copies
//! each packet it receives (bytes and metadata) into a log and frees the buffer; the captured
//! `error-drop` still counts every packet on the counter its `error` names, as the real one
//! does (after logging it, so a counted drop is always in the log). So a test injects a
//! frame, drains the graph and asserts:
//!
//! - which packets reached which arc ([`Harness::arc`], by the arc's target node name),
//! - the node's counters, exactly ([`Harness::assert_counters`]: the named values, every other
//!   counter zero),
//! - that no buffer leaked ([`Harness::assert_no_leaks`]).
//!
//! ```
//! use sluice_graph::testing::{Harness, test_pool};
//! use sluice_graph::*;
//! use sluice_buffer::Buffer;
//!
//! arcs! {
//!     /// `even`'s next arcs.
//!     pub enum EvenNext {
//!         /// Odd first bytes.
//!         Drop => "error-drop",
//!         /// Even first bytes.
//!         Sink => "null-sink",
//!     }
//! }
//! counters! {
//!     /// `even`'s counters.
//!     pub enum EvenCounter {
//!         /// Passed.
//!         Even => info("even", "even"),
//!         /// Dropped.
//!         Odd => error("odd", "odd"),
//!     }
//! }
//! struct Even;
//! impl PacketNode for Even {
//!     fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
//!         if b.data().first().is_some_and(|x| x % 2 == 0) {
//!             cx.count(EvenCounter::Even, 1);
//!             EvenNext::Sink.next()
//!         } else {
//!             b.hdr.error = cx.error(EvenCounter::Odd);
//!             EvenNext::Drop.next()
//!         }
//!     }
//! }
//! let mut g = GraphBuilder::new();
//! nodes::register(&mut g);
//! g.register(
//!     NodeRegistration::new("even", NodeKind::Internal, |_| Box::new(PerPacket::new(Even)))
//!         .nexts(EvenNext::NAMES)
//!         .counters(EvenCounter::DESCS),
//! );
//! let mut h = Harness::build(g, "even").unwrap();
//! h.run(&[vec![2, 0], vec![3, 0]]);
//! assert_eq!(h.arc("null-sink").len(), 1);
//! assert_eq!(h.drops(), vec![("even".to_string(), "odd")]);
//! h.assert_counters(&[("even", 1), ("odd", 1)]);
//! h.assert_no_leaks();
//! ```

use crate::node::{NodeFn, NodeIndex};
use crate::runtime::Cx;
use crate::vlib::{CpuConfig, Vlib, VlibError};
use crate::GraphBuilder;
use sluice_buffer::{BufIdx, BufferHeader, PageSize, PoolConfig};
use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, Mutex};

/// A small private pool for tests (4096 buffers of 2 KiB, 4 KiB pages).
pub fn test_pool() -> PoolConfig {
    PoolConfig {
        buffers: 4096,
        data_size: 2048,
        page_size: PageSize::Small,
        shared: false,
    }
}

/// One packet a capture node received.
#[derive(Clone, Debug)]
pub struct Captured {
    /// The buffer index it had (freed since).
    pub index: BufIdx,
    /// Its bytes from `current_data` (the whole chain).
    pub data: Vec<u8>,
    /// Its metadata as it left the node under test.
    pub hdr: BufferHeader,
}

type Log = Arc<Mutex<HashMap<NodeIndex, Vec<Captured>>>>;

/// Replaces a node: logs and frees every packet; `error-drop`'s counts error codes too.
struct Capture {
    me: NodeIndex,
    log: Log,
    count_errors: bool,
}

impl NodeFn for Capture {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        let mut got = Vec::with_capacity(frame.len());
        for &b in frame {
            let mut data = Vec::new();
            cx.bufs().copy_chain(b, &mut data, usize::MAX);
            // SAFETY: this node owns the frame; a short-lived shared view of one header.
            let hdr = *unsafe { cx.pool().header(b) };
            got.push(Captured {
                index: b,
                data,
                hdr,
            });
        }
        cx.free(frame);
        let errors: Vec<u16> = if self.count_errors {
            got.iter().map(|c| c.hdr.error).collect()
        } else {
            Vec::new()
        };
        if let Ok(mut l) = self.log.lock() {
            l.entry(self.me).or_default().extend(got);
        }
        // Logged before counted: a test that waits on another thread for an error counter
        // (`Harness::hand_to_worker`) then finds every packet counted in the log. The fence
        // orders the log before the (relaxed) counter stores for a reader that pairs it with
        // an acquire fence.
        fence(Ordering::Release);
        for e in errors {
            cx.count_error_code(e, 1);
        }
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// A graph with one node under test and its next nodes captured (see the module doc).
pub struct Harness {
    /// The runtime (configure it through its control-plane functions or CLI).
    pub vm: Vlib,
    /// The node under test.
    pub node: NodeIndex,
    log: Log,
    captured: Vec<NodeIndex>,
}

impl Harness {
    /// Builds `g` on one thread with [`test_pool`] and wraps it for node `node`.
    pub fn build(g: GraphBuilder, node: &str) -> Result<Harness, VlibError> {
        let vm = Vlib::new(g, &CpuConfig::default(), &test_pool())?;
        Ok(Harness::new(vm, node))
    }

    /// Wraps a built runtime: captures every next node of `node` and `error-drop`.
    ///
    /// # Panics
    /// When `node` does not exist (a test bug).
    pub fn new(vm: Vlib, node: &str) -> Harness {
        let n = vm
            .registry
            .find(node)
            .unwrap_or_else(|| panic!("no node `{node}' in the graph"));
        let mut h = Harness {
            vm,
            node: n,
            log: Default::default(),
            captured: Vec::new(),
        };
        let mut targets = h.vm.registry.node(n).next_names.clone();
        targets.push("error-drop".into());
        // An arc back to the node itself stays real (the node runs again).
        for t in targets.iter().filter(|t| **t != node) {
            h.capture(t);
        }
        h
    }

    /// Captures node `name` too (a feature's arc added at runtime, a node further down).
    /// Packets sent to it are logged and freed instead of processed.
    ///
    /// # Panics
    /// When `name` does not exist, or is the node under test.
    pub fn capture(&mut self, name: &str) {
        let i = self
            .vm
            .registry
            .find(name)
            .unwrap_or_else(|| panic!("no node `{name}' to capture"));
        assert_ne!(i, self.node, "cannot capture the node under test");
        if self.captured.contains(&i) {
            return;
        }
        self.captured.push(i);
        let log = self.log.clone();
        let count_errors = name == "error-drop";
        self.vm.foreach_thread(move |tg| {
            tg.replace_node(
                i,
                Box::new(Capture {
                    me: i,
                    log: log.clone(),
                    count_errors,
                }),
            );
        });
    }

    /// Allocates a buffer holding `bytes` (`current_data` 0), lets `meta` set its metadata
    /// (`rx_if`, `ip.fib_index`, ...), and returns it.
    ///
    /// # Panics
    /// When the pool is exhausted (a test bug).
    pub fn packet(&mut self, bytes: &[u8], meta: impl FnOnce(&mut BufferHeader)) -> BufIdx {
        let b = self
            .vm
            .main
            .bufs()
            .alloc_one()
            .expect("test pool exhausted");
        // SAFETY: freshly allocated: this harness owns it and holds no other view.
        let mut v = unsafe { self.vm.pool.buffer(b) };
        v.write_packet(bytes);
        meta(v.hdr);
        b
    }

    /// Hands `bufs` to the node under test as one frame and runs the graph until idle.
    pub fn inject(&mut self, bufs: &[BufIdx]) {
        self.vm.main.inject(self.node, bufs);
        self.vm.main.drain();
    }

    /// Hands `bufs` to node `name` upstream of the node under test (which is not captured:
    /// it runs for real and sets the metadata the node under test needs) and runs the graph.
    ///
    /// # Panics
    /// When there is no node `name`.
    pub fn inject_at(&mut self, name: &str, bufs: &[BufIdx]) {
        let i = self
            .vm
            .registry
            .find(name)
            .unwrap_or_else(|| panic!("no node `{name}'"));
        self.vm.main.inject(i, bufs);
        self.vm.main.drain();
    }

    /// Hands one packet per entry of `pkts` (metadata set by `meta`) to the node under test
    /// on worker thread `to`, through thread 0's handoff queue to it (retrying while the
    /// queue is full), and waits until the node's counters `done` together have grown by
    /// `pkts.len()` (each packet counts on exactly one of them: handed on, dropped, ...).
    /// A drop counted by `error-drop` is in [`Harness::drops`] by then.
    ///
    /// # Panics
    /// When that takes more than 20 s (the worker does not run), or a counter of `done`
    /// does not exist.
    pub fn hand_to_worker(
        &mut self,
        to: usize,
        pkts: &[Vec<u8>],
        meta: impl Fn(&mut BufferHeader),
        done: &[&str],
    ) {
        let bufs: Vec<BufIdx> = pkts.iter().map(|p| self.packet(p, &meta)).collect();
        let total = |h: &Harness| done.iter().map(|c| h.counter(c)).sum::<u64>();
        let before = total(self);
        let mut sent = 0;
        let t0 = std::time::Instant::now();
        while sent < bufs.len() || total(self) < before + bufs.len() as u64 {
            sent += self
                .vm
                .shared
                .handoff_enqueue(0, to, &bufs[sent..], self.node);
            assert!(t0.elapsed().as_secs() < 20, "the worker did not run");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // Pairs with the capture's release fence: what was logged before the counts read
        // above is seen.
        fence(Ordering::Acquire);
    }

    /// Injects one packet per entry of `pkts` (with default metadata) and runs the graph.
    pub fn run(&mut self, pkts: &[Vec<u8>]) {
        self.run_with(pkts, |_| {});
    }

    /// Injects one packet per entry of `pkts`, each with metadata set by `meta`, and runs the
    /// graph.
    pub fn run_with(&mut self, pkts: &[Vec<u8>], meta: impl Fn(&mut BufferHeader)) {
        let bufs: Vec<BufIdx> = pkts.iter().map(|p| self.packet(p, &meta)).collect();
        self.inject(&bufs);
    }

    /// The packets that reached node `name` (the target of one of the node's arcs), in order.
    /// Empty when none did.
    pub fn arc(&self, name: &str) -> Vec<Captured> {
        let Some(i) = self.vm.registry.find(name) else {
            return Vec::new();
        };
        assert!(
            self.captured.contains(&i),
            "node `{name}' is not captured (Harness::capture it)"
        );
        self.log
            .lock()
            .map(|l| l.get(&i).cloned().unwrap_or_default())
            .unwrap_or_default()
    }

    /// How many packets reached each captured node (those with at least one), by name.
    pub fn arc_counts(&self) -> Vec<(String, usize)> {
        let l = self.log.lock().map(|l| l.clone()).unwrap_or_default();
        let mut v: Vec<(String, usize)> = l
            .iter()
            .filter(|(_, p)| !p.is_empty())
            .map(|(i, p)| (self.vm.registry.node(*i).name.clone(), p.len()))
            .collect();
        v.sort();
        v
    }

    /// The (node, counter) each dropped packet was counted on, in order.
    pub fn drops(&self) -> Vec<(String, &'static str)> {
        self.arc("error-drop")
            .iter()
            .filter_map(|c| {
                let (n, l) = self.vm.registry.error_of(c.hdr.error)?;
                let info = self.vm.registry.node(n);
                Some((info.name.clone(), info.counters.get(l as usize)?.name))
            })
            .collect()
    }

    /// Forgets what was captured so far (counters are not reset).
    pub fn clear(&mut self) {
        if let Ok(mut l) = self.log.lock() {
            l.clear();
        }
    }

    /// The total of counter `name` of node `node`.
    ///
    /// # Panics
    /// When the node or the counter does not exist.
    pub fn counter_of(&self, node: &str, name: &str) -> u64 {
        let i = self
            .vm
            .registry
            .find(node)
            .unwrap_or_else(|| panic!("no node `{node}'"));
        let info = self.vm.registry.node(i);
        let c = info
            .counters
            .iter()
            .position(|c| c.name == name)
            .unwrap_or_else(|| panic!("node `{node}' has no counter `{name}'"));
        info.stats.counter_total(c)
    }

    /// The total of the node under test's counter `name`.
    pub fn counter(&self, name: &str) -> u64 {
        self.counter_of(&self.vm.registry.node(self.node).name.clone(), name)
    }

    /// Every non-zero counter of the node under test, in declaration order.
    pub fn counters(&self) -> Vec<(&'static str, u64)> {
        let info = self.vm.registry.node(self.node);
        info.counters
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name, info.stats.counter_total(i)))
            .filter(|(_, v)| *v != 0)
            .collect()
    }

    /// Asserts the node under test's counters exactly: the named ones have these totals,
    /// every other counter is zero.
    ///
    /// # Panics
    /// On a mismatch, listing the expected and actual non-zero counters.
    pub fn assert_counters(&self, expect: &[(&str, u64)]) {
        let mut want: Vec<(&str, u64)> = expect.iter().copied().filter(|(_, v)| *v != 0).collect();
        let info = self.vm.registry.node(self.node);
        for (n, _) in expect {
            assert!(
                info.counters.iter().any(|c| c.name == *n),
                "node `{}' has no counter `{n}'",
                info.name
            );
        }
        let order = |n: &str| info.counters.iter().position(|c| c.name == n);
        want.sort_by_key(|(n, _)| order(n));
        let got = self.counters();
        let got: Vec<(&str, u64)> = got.iter().map(|(n, v)| (*n, *v)).collect();
        assert_eq!(got, want, "counters of `{}'", info.name);
    }

    /// Asserts that every buffer is back in the pool (nothing leaked or still queued).
    pub fn assert_no_leaks(&mut self) {
        self.vm.main.drain();
        let s = self.vm.pool.stats();
        assert_eq!(s.in_use, 0, "buffers leaked: {s:?}");
    }
}

/// Every worker of a [`Vlib`] held in a job that waits for [`StuckWorkers::release`] (at most
/// 30 s), with the vlib's thread wait cut to `wait`: a topology change made meanwhile is one
/// the workers do not take in time (`GraphError::NotTaken`), as with a worker that is slow or
/// stuck. Tests of that error path share it.
pub struct StuckWorkers {
    gate: Arc<(Mutex<bool>, std::sync::Condvar)>,
}

impl StuckWorkers {
    /// Holds the workers; returns the threads that did not answer within `wait` (every
    /// worker) beside the gate.
    pub fn hold(vm: &mut Vlib, wait: std::time::Duration) -> (StuckWorkers, Vec<usize>) {
        vm.set_thread_wait(wait);
        let gate = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
        let g = gate.clone();
        let late = vm.foreach_thread_late(move |tg| {
            if tg.thread() != 0 {
                let (m, cv) = &*g;
                let open = m.lock().unwrap_or_else(|e| e.into_inner());
                let _ = cv.wait_timeout_while(open, std::time::Duration::from_secs(30), |o| !*o);
            }
        });
        (StuckWorkers { gate }, late)
    }

    /// Lets the workers go and puts the thread wait back to [`Vlib::THREAD_WAIT`].
    pub fn release(self, vm: &mut Vlib) {
        vm.set_thread_wait(Vlib::THREAD_WAIT);
        let (m, cv) = &*self.gate;
        *m.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
    }
}
