//! Built-in nodes every graph has: `error-drop`, `punt` and `null-sink`.

use crate::node::{NodeFn, NodeKind, NodeRegistration};
use crate::pcap::point;
use crate::registry::GraphBuilder;
use crate::runtime::Cx;
use sluice_buffer::BufIdx;
use std::any::Any;
use std::sync::Arc;

/// Where `error-drop` and `punt` count packets per receiving interface (`show interface`
/// `drops` and `punt`); installed by the interface layer.
pub trait IfDropSink: Send + Sync {
    /// `n` packets received on `sw_if` were dropped on thread `thread`.
    fn drops(&self, thread: usize, sw_if: u32, n: u64);
    /// `n` packets received on `sw_if` were punted on thread `thread`.
    fn punts(&self, thread: usize, sw_if: u32, n: u64);
}

/// Counts a frame per run of packets with the same `rx_if`.
fn per_rx_if(cx: &Cx, frame: &[BufIdx], mut f: impl FnMut(u32, u64)) {
    let pool = cx.pool_ref();
    let mut run: Option<(u32, u64)> = None;
    for &b in frame {
        // SAFETY: the calling node owns the frame; read-only header access.
        let rx = unsafe { pool.header(b) }.rx_if;
        match &mut run {
            Some((r, n)) if *r == rx => *n += 1,
            _ => {
                if let Some((r, n)) = run {
                    f(r, n);
                }
                run = Some((rx, 1));
            }
        }
    }
    if let Some((r, n)) = run {
        f(r, n);
    }
}

/// `error-drop`: the end of every dropped packet.
///
/// - uses: `error` (graph-wide error code set by the dropping node).
/// - sets: nothing.
/// - next: none; buffers are freed.
/// - counters: counts each packet on the counter named by its `error` (so `show errors` lists
///   it under the node that dropped it); `unhandled` counts packets sent to an arc that does not
///   exist or a node absent from this thread. Captures the frame for `pcap trace drop`. With
///   a sink installed, also counts `drops` on each packet's `rx_if`.
#[derive(Default)]
pub struct ErrorDrop {
    /// Per-interface drop counters (set by the interface layer).
    pub sink: Option<Arc<dyn IfDropSink>>,
}

impl NodeFn for ErrorDrop {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        cx.pcap_capture(point::DROP, frame, false);
        let pool = cx.pool_ref();
        let mut run_code = None;
        let mut run_len = 0u64;
        for &b in frame {
            // SAFETY: this node owns the frame; read-only header access.
            let code = unsafe { pool.header(b) }.error;
            if Some(code) == run_code {
                run_len += 1;
            } else {
                if let Some(c) = run_code {
                    cx.count_error_code(c, run_len);
                }
                run_code = Some(code);
                run_len = 1;
            }
        }
        if let Some(c) = run_code {
            cx.count_error_code(c, run_len);
        }
        if let Some(s) = &self.sink {
            let t = cx.thread();
            per_rx_if(cx, frame, |i, n| s.drops(t, i, n));
        }
        cx.free(frame);
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// `punt`: packets for the host stack. Without a handler they are counted and freed; with
/// one (a plugin's node, e.g. linux-cp's `linux-cp-punt`, set by [`set_punt_handler`]) they
/// are counted and handed to it.
///
/// - uses: `rx_if` (with a sink installed: `punt` counted on it). sets: nothing.
/// - next: the handler's arc (added at runtime) when one is set; otherwise none (freed).
/// - counters: `punted` (packets punted).
#[derive(Default)]
pub struct Punt {
    /// Per-interface punt counters (set by the interface layer).
    pub sink: Option<Arc<dyn IfDropSink>>,
    /// Where punted packets go (set by [`set_punt_handler`]); `None`: freed.
    pub handler: Option<crate::node::Next>,
}

impl NodeFn for Punt {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        cx.count(PuntCounter::Punted, frame.len() as u64);
        if let Some(s) = &self.sink {
            let t = cx.thread();
            per_rx_if(cx, frame, |i, n| s.punts(t, i, n));
        }
        match self.handler {
            Some(n) => cx.enqueue_all(n, frame),
            None => cx.free(frame),
        }
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// `null-sink`: frees every packet it is given (benchmark sink, like a null interface's tx).
///
/// - uses: nothing. sets: nothing. next: none.
/// - counters: `packets` (packets discarded).
pub struct NullSink;

impl NodeFn for NullSink {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        cx.count(NullSinkCounter::Packets, frame.len() as u64);
        cx.free(frame);
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// Hands every packet `punt` receives to node `handler` (`None`: free them again), on every
/// thread. The arc is added on every thread before the handler is published.
pub fn set_punt_handler(
    vm: &mut crate::Vlib,
    handler: Option<crate::node::NodeIndex>,
) -> Result<(), crate::registry::GraphError> {
    let punt = vm.registry.lookup("punt")?;
    let next = match handler {
        Some(h) => Some(vm.add_next(punt, h)?),
        None => None,
    };
    vm.foreach_thread(move |tg| {
        if let Some(n) = tg.node_mut::<Punt>(punt) {
            n.handler = next;
        }
    });
    Ok(())
}

crate::counters! {
    /// `error-drop`'s own counter (the others it bumps are the dropping nodes').
    pub enum ErrorDropCounter {
        /// Packets sent to a missing arc or node ([`Cx::drop_unhandled`]).
        Unhandled => error("unhandled", "packets sent to a missing arc or node"),
    }
}

crate::counters! {
    /// `punt`'s counters.
    pub enum PuntCounter {
        /// Packets punted.
        Punted => info("punted", "packets punted"),
    }
}

crate::counters! {
    /// `null-sink`'s counters.
    pub enum NullSinkCounter {
        /// Packets discarded.
        Packets => info("packets", "packets discarded"),
    }
}

/// Registers the built-in nodes.
pub fn register(b: &mut GraphBuilder) {
    b.register(
        NodeRegistration::new("error-drop", NodeKind::Internal, |_| {
            Box::new(ErrorDrop::default())
        })
        .counters(ErrorDropCounter::DESCS),
    );
    b.register(
        NodeRegistration::new("punt", NodeKind::Internal, |_| Box::new(Punt::default()))
            .counters(PuntCounter::DESCS),
    );
    b.register(
        NodeRegistration::new("null-sink", NodeKind::Internal, |_| Box::new(NullSink))
            .counters(NullSinkCounter::DESCS),
    );
}
