//! Built-in nodes every graph has: `error-drop`, `punt` and `null-sink`.

use crate::node::{CounterDesc, NodeFn, NodeKind, NodeRegistration};
use crate::pcap::point;
use crate::registry::GraphBuilder;
use crate::runtime::Cx;
use sluice_buffer::BufIdx;
use std::any::Any;

/// `error-drop`: the end of every dropped packet.
///
/// - uses: `error` (graph-wide error code set by the dropping node).
/// - sets: nothing.
/// - next: none; buffers are freed.
/// - counters: counts each packet on the counter named by its `error` (so `show errors` lists
///   it under the node that dropped it); `unhandled` counts packets sent to an arc that does not
///   exist or a node absent from this thread. Captures the frame for `pcap trace drop`.
pub struct ErrorDrop;

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
        cx.free(frame);
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// `punt`: packets for the host stack. Until a punt path to Linux exists (linux-cp), they are
/// counted and freed.
///
/// - uses: nothing. sets: nothing. next: none.
/// - counters: `punted` (packets punted).
pub struct Punt;

impl NodeFn for Punt {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        cx.count(0, frame.len() as u64);
        cx.free(frame);
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// `null-sink`: frees every packet it is given (benchmark sink, like a null interface's tx).
///
/// - uses: nothing. sets: nothing. next: none.
/// - counters: `packets` (packets discarded), `bytes`.
pub struct NullSink;

impl NodeFn for NullSink {
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        cx.count(0, frame.len() as u64);
        cx.free(frame);
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// Registers the built-in nodes.
pub fn register(b: &mut GraphBuilder) {
    b.register(
        NodeRegistration::new("error-drop", NodeKind::Internal, |_| Box::new(ErrorDrop)).counters(
            &[CounterDesc::error(
                "unhandled",
                "packets sent to a missing arc or node",
            )],
        ),
    );
    b.register(
        NodeRegistration::new("punt", NodeKind::Internal, |_| Box::new(Punt))
            .counters(&[CounterDesc::info("punted", "packets punted")]),
    );
    b.register(
        NodeRegistration::new("null-sink", NodeKind::Internal, |_| Box::new(NullSink))
            .counters(&[CounterDesc::info("packets", "packets discarded")]),
    );
}
