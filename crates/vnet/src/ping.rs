//! The CLI `ping` both address families share: options, the send/wait loop on the main
//! thread, and the echo-reply mailbox `ip4-local`/`ip6-local` fill while a ping runs.

use sluice_cli::{Args, CliError};
use sluice_graph::{NodeIndex, Vlib};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// An echo reply seen by the local node: (identifier, sequence, source, TTL/hop limit, TSC at
/// receipt).
pub type Reply<A> = (u16, u16, A, u8, u64);

/// Replies of the running CLI ping (a control-plane path, not the fast path).
pub struct PingState<A> {
    /// Identifier of the running ping (0 = none): the local node records only these.
    pub id: AtomicU32,
    /// Replies recorded by the local node.
    pub replies: Mutex<Vec<Reply<A>>>,
}

impl<A> Default for PingState<A> {
    fn default() -> Self {
        PingState {
            id: AtomicU32::new(0),
            replies: Mutex::new(Vec::new()),
        }
    }
}

impl<A> PingState<A> {
    /// Called by the local node for an echo reply: true (consume it) when it answers the
    /// running CLI ping.
    pub fn record(&self, id: u16, seq: u16, from: A, ttl: u8, tsc: u64) -> bool {
        let running = self.id.load(Ordering::Relaxed);
        if running == 0 || id as u32 != running {
            return false;
        }
        if let Ok(mut r) = self.replies.lock() {
            if r.len() < 1024 {
                r.push((id, seq, from, ttl, tsc));
            }
        }
        true
    }
}

/// Longest a CLI ping may run (`repeat` × `interval`), seconds: the CLI serves one command
/// at a time, so a ping holds the other sessions for that long.
pub const MAX_PING_SECONDS: f64 = 60.0;

/// `[source <interface>] [table <id>] [repeat <n>] [size <bytes>] [interval <sec>]`.
pub struct PingArgs {
    /// Source interface.
    pub src_if: Option<u32>,
    /// Table (VRF) id to look the destination up in (default: the source interface's).
    pub table: Option<u32>,
    /// Echo requests to send.
    pub repeat: u32,
    /// Data bytes per request.
    pub size: usize,
    /// Seconds between requests (and the wait for each reply).
    pub interval: f64,
}

impl PingArgs {
    /// Parses the options after the address.
    pub fn parse(vm: &mut Vlib, a: &mut Args) -> Result<PingArgs, CliError> {
        let mut p = PingArgs {
            src_if: None,
            table: None,
            repeat: 5,
            size: 56,
            interval: 1.0,
        };
        while !a.is_empty() {
            if a.keyword("source") {
                p.src_if = Some(crate::cli::interface_arg(vm, a)?.0);
            } else if a.keyword("table") {
                p.table = Some(a.u32("table id")?);
            } else if a.keyword("repeat") {
                p.repeat = a.u32("repeat count")?.clamp(1, 1000);
            } else if a.keyword("size") {
                p.size = (a.u32("size")? as usize).clamp(0, 1400);
            } else if a.keyword("interval") {
                p.interval = a.f64("interval")?.clamp(0.001, 10.0);
            } else {
                a.finish()?;
            }
        }
        let total = p.repeat as f64 * p.interval;
        if total > MAX_PING_SECONDS {
            return Err(CliError::new(format!(
                "ping would run up to {total:.0} s (repeat {} x interval {}); the limit is {MAX_PING_SECONDS:.0} s",
                p.repeat, p.interval
            )));
        }
        Ok(p)
    }
}

/// Sends `o.repeat` echo requests built by `packet(id, seq)` (an IP packet) into `lookup`
/// as locally originated, looked up in FIB index `fib`, runs the main graph until each reply arrives or the interval
/// passes, and prints VPP-style lines and statistics.
pub fn run<A: Copy + std::fmt::Display>(
    vm: &mut Vlib,
    lookup: NodeIndex,
    state: &PingState<A>,
    o: &PingArgs,
    fib: u32,
    packet: impl Fn(u16, u16) -> Vec<u8>,
) -> String {
    let id = (std::process::id() as u16) | 1;
    state.id.store(id as u32, Ordering::Relaxed);
    if let Ok(mut r) = state.replies.lock() {
        r.clear();
    }
    let clock = vm.shared.clock;
    let mut out = String::new();
    let mut received = 0u32;
    let mut sent = 0u32;
    let intr = vm
        .ext::<sluice_cli::Interrupt>()
        .copied()
        .unwrap_or_default();
    for seq in 1..=o.repeat as u16 {
        if intr.requested() {
            out.push_str("interrupted\n");
            break;
        }
        let Some(b) = vm.main.bufs().alloc_with(&packet(id, seq)) else {
            out.push_str("no buffers\n");
            break;
        };
        sent += 1;
        // SAFETY: just allocated, owned here until injected.
        let v = unsafe { vm.pool.buffer(b) };
        v.hdr.rx_if = 0;
        v.hdr.ip.fib_index = fib;
        v.hdr.flags |= sluice_buffer::flags::LOCALLY_ORIGINATED;
        let t0 = clock.now_tsc();
        vm.main.inject(lookup, &[b]);
        // Run the graph until the reply arrives or the interval passes. The interval counts
        // from the end of the round that sent the request, and the last round starts after
        // the deadline: a thread that was not scheduled for a while (a loaded machine) still
        // polls the reply that arrived meanwhile instead of reporting it lost.
        let mut deadline = None;
        let mut got = None;
        loop {
            let last = deadline.is_some_and(|d| clock.now_secs() >= d);
            vm.run_main_once();
            if deadline.is_none() {
                deadline = Some(clock.now_secs() + o.interval);
            }
            if let Ok(mut r) = state.replies.lock() {
                if let Some(p) = r.iter().position(|x| x.0 == id && x.1 == seq) {
                    got = Some(r.remove(p));
                }
            }
            if got.is_some() || last || intr.requested() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
        if let Some((_, _, from, ttl, t1)) = got {
            received += 1;
            let ms = clock.tsc_to_secs(t1.wrapping_sub(t0)) * 1e3;
            let _ = writeln!(
                out,
                "{} bytes from {from}: icmp_seq={seq} ttl={ttl} time={ms:.4} ms",
                8 + o.size,
            );
        }
    }
    state.id.store(0, Ordering::Relaxed);
    let loss = 100.0 * (sent - received) as f64 / sent.max(1) as f64;
    let _ = writeln!(
        out,
        "\nStatistics: {sent} sent, {received} received, {loss:.0}% packet loss"
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_buffer::BufIdx;
    use sluice_graph::{nodes, testing::test_pool, CpuConfig, Cx, GraphBuilder, NodeFn};
    use sluice_graph::{NodeKind, NodeRegistration};
    use std::any::Any;
    use std::net::Ipv4Addr;
    use std::sync::Arc;
    use std::time::Duration;

    /// Takes each echo request off the graph (frees it) and counts it as sent.
    struct Wire(Arc<AtomicU32>);
    impl NodeFn for Wire {
        fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
            self.0.fetch_add(frame.len() as u32, Ordering::Relaxed);
            cx.free(frame);
        }
        fn as_any(&mut self) -> &mut dyn Any {
            self
        }
    }

    /// The peer: at the first poll after a request the thread stops for `stall` (as when
    /// it is not scheduled), and the reply is there at the next poll.
    struct Peer {
        sent: Arc<AtomicU32>,
        state: Arc<PingState<Ipv4Addr>>,
        stall: Duration,
        answered: u32,
        stalled: bool,
    }
    impl NodeFn for Peer {
        fn poll(&mut self, cx: &mut Cx) -> usize {
            if self.sent.load(Ordering::Relaxed) == self.answered {
                return 0;
            }
            if !self.stalled {
                self.stalled = true;
                std::thread::sleep(self.stall);
                return 0;
            }
            self.stalled = false;
            self.answered += 1;
            let id = self.state.id.load(Ordering::Relaxed) as u16;
            let at = cx.now_tsc();
            assert!(self
                .state
                .record(id, self.answered as u16, Ipv4Addr::LOCALHOST, 64, at));
            0
        }
        fn as_any(&mut self) -> &mut dyn Any {
            self
        }
    }

    /// A reply that arrives while the main thread is not scheduled past the interval is
    /// still counted: the wait ends with a round that starts after the deadline.
    #[test]
    fn a_reply_seen_after_a_stall_past_the_interval_is_not_lost() {
        let sent = Arc::new(AtomicU32::new(0));
        let state = Arc::new(PingState::<Ipv4Addr>::default());
        let mut g = GraphBuilder::new();
        nodes::register(&mut g);
        let s = sent.clone();
        g.register(NodeRegistration::new(
            "ping-wire",
            NodeKind::Internal,
            move |_| Box::new(Wire(s.clone())),
        ));
        let (s, st) = (sent.clone(), state.clone());
        g.register(NodeRegistration::new(
            "ping-peer",
            NodeKind::Input,
            move |_| {
                Box::new(Peer {
                    sent: s.clone(),
                    state: st.clone(),
                    stall: Duration::from_secs(2),
                    answered: 0,
                    stalled: false,
                })
            },
        ));
        let mut vm = Vlib::new(g, &CpuConfig::default(), &test_pool()).unwrap();
        let wire = vm.registry.find("ping-wire").unwrap();
        let o = PingArgs {
            src_if: None,
            table: None,
            repeat: 2,
            size: 56,
            // The stall is twice the interval: only a round that starts a whole interval
            // late (a thread not scheduled for 1 s) could end the wait before the peer
            // answers, which a loaded CI machine does not reach.
            interval: 1.0,
        };
        let out = run(&mut vm, wire, &state, &o, 0, |_, _| vec![0u8; 84]);
        assert!(out.contains("2 sent, 2 received"), "{out}");
        assert!(out.contains("icmp_seq=2 "), "{out}");
        assert_eq!(vm.pool.stats().in_use, 0);
    }
}
