//! Node declarations: kinds, next arcs, counters, and the two ways to write a node.

use crate::runtime::Cx;
use sluice_buffer::{BufIdx, Buffer};
use std::any::Any;

/// Index of a node in the graph (the same on every thread).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeIndex(pub u32);

/// Index of a next arc, local to the node that owns it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Next(pub u16);

/// How the dispatcher runs a node.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// Polled before input nodes on every loop.
    PreInput,
    /// Produces packets (drivers, packet generator), polled on every loop while active.
    Input,
    /// Processes frames handed to it by other nodes.
    Internal,
    /// Cooperative control-plane task on the main thread, woken by timers and events.
    Process,
}

impl NodeKind {
    /// VPP's name of the kind, as printed by `show runtime` / `show node`.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeKind::PreInput => "pre-input",
            NodeKind::Input => "input",
            NodeKind::Internal => "internal",
            NodeKind::Process => "process",
        }
    }
}

/// Severity of a node counter (`show errors`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Severity {
    /// Informational counter.
    Info,
    /// Something unusual.
    Warn,
    /// A packet was lost because of an error.
    Error,
}

impl Severity {
    /// Lower-case name as printed by `show errors`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warn => "warn",
            Severity::Error => "error",
        }
    }
}

/// A node counter: symbolic name (stats path `/err/<node>/<name>`), description shown by
/// `show errors`, severity.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CounterDesc {
    /// Symbolic name, snake_case.
    pub name: &'static str,
    /// Human description.
    pub description: &'static str,
    /// Severity.
    pub severity: Severity,
}

impl CounterDesc {
    /// An error counter (packet dropped).
    pub const fn error(name: &'static str, description: &'static str) -> Self {
        CounterDesc {
            name,
            description,
            severity: Severity::Error,
        }
    }
    /// A warning counter (something unusual, no packet lost).
    pub const fn warn(name: &'static str, description: &'static str) -> Self {
        CounterDesc {
            name,
            description,
            severity: Severity::Warn,
        }
    }
    /// An informational counter.
    pub const fn info(name: &'static str, description: &'static str) -> Self {
        CounterDesc {
            name,
            description,
            severity: Severity::Info,
        }
    }

    /// The counters `base` (a [`counters!`](crate::counters) enum's `DESCS`) with other
    /// descriptions, names and severities kept, in order: a node written once for both
    /// address families declares its counters once and each family words them
    /// (`ICMP errors sent`, `ICMPv6 errors sent`). Used in a `const`, a length that differs
    /// from `base`'s fails the build.
    pub const fn reworded<const N: usize>(
        base: &[CounterDesc],
        descriptions: [&'static str; N],
    ) -> [CounterDesc; N] {
        assert!(base.len() == N, "one description per counter");
        let mut out = [CounterDesc::info("", ""); N];
        let mut i = 0;
        while i < N {
            out[i] = CounterDesc {
                description: descriptions[i],
                ..base[i]
            };
            i += 1;
        }
        out
    }
}

/// Why a process node was woken.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Wake {
    /// First run after the graph started.
    Start,
    /// The timeout it asked for expired.
    Timeout,
    /// An event was signalled to it (`Cx::signal`), with its data.
    Event(u64),
}

/// What a process node waits for after it returns (cooperative suspend).
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Suspend {
    /// Wake after this many seconds.
    Timeout(f64),
    /// Wake when an event is signalled.
    Event,
    /// Wake on an event or after this many seconds, whichever comes first.
    EventOrTimeout(f64),
    /// Never run again.
    Done,
}

/// The per-thread instance of a node. One object per node per thread; the dispatcher calls
/// the method matching the node's kind.
pub trait NodeFn: Send + 'static {
    /// Internal nodes: process one frame of at most [`crate::FRAME_SIZE`] buffers. The node
    /// owns the buffers and must pass every one on (`Cx::enqueue*`) or free it.
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        // A node that does not process frames drops what it is given, counted.
        cx.drop_unhandled(frame);
    }
    /// Input and pre-input nodes: produce packets. Returns the number produced.
    fn poll(&mut self, _cx: &mut Cx) -> usize {
        0
    }
    /// Input nodes: whether polling can produce anything now (false lets the thread sleep).
    fn active(&self) -> bool {
        true
    }
    /// Input nodes: while not active, how often the thread must still poll the node (queues
    /// in polling rx mode, whose readiness no file descriptor signals). `None`: only when
    /// active or when one of the fds it registered (`Cx::irq_register`) fires, so an idle
    /// thread may sleep until woken.
    fn poll_interval(&self) -> Option<f64> {
        Some(crate::rxmode::POLL_TICK_SECS)
    }
    /// Input nodes: whether the node is polled on this thread (`show runtime` shows
    /// "polling"), or only woken by its fds ("interrupt wait"): true when one of its queues
    /// here is in polling mode or in adaptive mode's polling state.
    fn polling(&self) -> bool {
        true
    }
    /// Input nodes: the thread is about to sleep (no input was active). A node whose
    /// producers wake the thread only when told it sleeps (a shared-memory queue's
    /// "waiting" word) tells them here, not at every poll, so producers of a busy thread
    /// make no system call. False: work raced in, the thread polls again.
    ///
    /// The runtime asks the input nodes in order and stops at the first that returns
    /// false; it never withdraws an announcement (neither of that node nor of those asked
    /// before it). A node withdraws its own at its next poll, as `session-queue` does with
    /// its queues' `woke()`: until then its producers may make a needless wake-up.
    fn prepare_sleep(&mut self) -> bool {
        true
    }
    /// Process nodes: run until the next suspend.
    fn process(&mut self, _cx: &mut Cx, _wake: Wake) -> Suspend {
        Suspend::Done
    }
    /// Control-plane access to the concrete node type (configuration updates from the CLI).
    fn as_any(&mut self) -> &mut dyn Any;
}

/// The per-packet way to write a node: the generic loop in [`PerPacket`] resolves buffers,
/// prefetches ahead, collects next arcs and enqueues the frame in runs.
pub trait PacketNode: Send + 'static {
    /// Whether the generic loop also prefetches the first data cache line of upcoming
    /// packets. Nodes that read only buffer metadata set this to false.
    const PREFETCH_DATA: bool = true;

    /// Called once before each frame (e.g. to reset per-frame caches of shared tables).
    #[inline(always)]
    fn begin_frame(&mut self, _cx: &mut Cx) {}

    /// Handles one packet and returns the arc it goes to. To drop, set `b.hdr.error` with
    /// [`Cx::error`] and return the node's drop arc.
    fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next;

    /// Called once after each frame's packets, before they go to their next nodes (e.g. to
    /// publish what the frame collected with one lock instead of one per packet).
    #[inline(always)]
    fn end_frame(&mut self, _cx: &mut Cx) {}
}

/// Adapter turning a [`PacketNode`] into a [`NodeFn`] with the optimised generic loop.
pub struct PerPacket<N> {
    node: N,
}

impl<N: PacketNode> PerPacket<N> {
    /// Wraps a per-packet node.
    pub fn new(node: N) -> Self {
        PerPacket { node }
    }
}

/// How far ahead the generic loop prefetches buffer headers.
pub const PREFETCH_AHEAD: usize = 4;

/// The most entries past a frame's end a node may prefetch from [`FrameScratch::addrs`].
pub const SCRATCH_AHEAD: usize = 8;

/// A thread's per-frame scratch, shared by its nodes one frame at a time
/// ([`Cx::take_frame_scratch`]): the frame's buffer addresses and the next arc of each
/// packet. One copy per thread instead of one in each node that resolves frames (the
/// `PerPacket` loop, `ip4-lookup`, `ip6-lookup`, the ACL plugin's nodes) keeps the nodes'
/// footprint in the L1 cache small, and a frame handed on whole keeps its resolved
/// addresses ([`sluice_buffer::Arena::resolve`] compares the indices instead of computing
/// them again).
pub struct FrameScratch {
    /// The frame's buffer addresses (and up to [`SCRATCH_AHEAD`] more, repeating the last
    /// packet's).
    pub addrs: sluice_buffer::FrameAddrs<{ crate::FRAME_SIZE + SCRATCH_AHEAD }>,
    /// Each packet's next arc. Kept across frames (not cleared: every node writes the
    /// entries of its frame before reading them).
    pub nexts: [u16; crate::FRAME_SIZE],
}

impl Default for FrameScratch {
    fn default() -> Self {
        FrameScratch {
            addrs: Default::default(),
            nexts: [0; crate::FRAME_SIZE],
        }
    }
}

impl<N: PacketNode> NodeFn for PerPacket<N> {
    #[inline]
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        // One pass resolves the frame's addresses (and checks its indices), unless the
        // node before left this frame's there: the loop below loads two addresses per
        // packet and two per prefetch instead of computing them from the arena's layout.
        // (`SCRATCH_AHEAD` after the frame, not only `PREFETCH_AHEAD`: what every node of
        // the thread asks for, so that the next node finds them whatever its distance.)
        let (arena, frame, mut s) = cx.resolve_frame(frame);
        let n = frame.len();
        let FrameScratch { addrs, nexts } = &mut *s;
        self.node.begin_frame(cx);
        let addrs = &*addrs;
        for (i, (next, &bi)) in nexts[..n].iter_mut().zip(frame).enumerate() {
            addrs.prefetch(i + PREFETCH_AHEAD, N::PREFETCH_DATA);
            // SAFETY: the dispatcher hands this node exclusive ownership of every index in
            // `frame`; each index appears once, `addrs` was resolved from `frame` above and
            // the view lives only for this call.
            let mut b = unsafe { arena.buffer_at(addrs, i, bi) };
            *next = self.node.process_one(cx, &mut b).0;
        }
        self.node.end_frame(cx);
        cx.enqueue_to_next(frame, &s.nexts[..n]);
        cx.put_frame_scratch(s);
    }
    fn as_any(&mut self) -> &mut dyn Any {
        &mut self.node
    }
}

/// Builds a node's per-thread instance. Called once per thread (index given).
pub type Factory = Box<dyn Fn(usize) -> Box<dyn NodeFn> + Send + Sync>;

/// A node registration: everything the graph needs to know about a node.
pub struct NodeRegistration {
    /// Unique kebab-case name (VPP's where VPP has the node).
    pub name: String,
    /// How it is run.
    pub kind: NodeKind,
    /// Named next arcs, resolved to node indices when the graph is built; arc `i` is `Next(i)`.
    pub next_nodes: Vec<String>,
    /// Counters.
    pub counters: Vec<CounterDesc>,
    /// Builds the per-thread instance.
    pub factory: Factory,
    /// Run this node on worker threads too (false: main thread only, e.g. process nodes).
    pub on_workers: bool,
}

impl NodeRegistration {
    /// A registration with no next arcs or counters.
    pub fn new<F>(name: &str, kind: NodeKind, factory: F) -> Self
    where
        F: Fn(usize) -> Box<dyn NodeFn> + Send + Sync + 'static,
    {
        NodeRegistration {
            name: name.to_string(),
            kind,
            next_nodes: Vec::new(),
            counters: Vec::new(),
            factory: Box::new(factory),
            on_workers: kind != NodeKind::Process,
        }
    }

    /// Adds next arcs (in order: the first is `Next(0)`).
    pub fn nexts(mut self, names: &[&str]) -> Self {
        self.next_nodes.extend(names.iter().map(|s| s.to_string()));
        self
    }

    /// Adds counters (in order: the first is counter 0).
    pub fn counters(mut self, c: &[CounterDesc]) -> Self {
        self.counters.extend_from_slice(c);
        self
    }
}

/// A trace record: a small `Copy` struct a node attaches to a traced packet, formatted only
/// when `show trace` runs.
pub trait TraceRecord: Copy + Send + 'static {
    /// Appends the record's decode (one or more lines, no trailing newline) to `out`.
    fn format(&self, out: &mut String);
}
