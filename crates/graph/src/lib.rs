//! The Sluice graph runtime (VPP's vlib).
//!
//! Nodes are registered explicitly into a [`GraphBuilder`] (`register(&mut GraphBuilder)` per
//! crate); [`Vlib::new`] resolves next arcs by name, creates the buffer pool and one
//! [`ThreadGraph`] per thread. A thread's dispatcher ([`ThreadGraph::run_once`]) polls input
//! nodes, then runs pending frames node by node — each node sees up to [`FRAME_SIZE`] buffer
//! indices at once — then due process nodes.
//!
//! Two ways to write a node: [`PacketNode`] (one packet at a time, driven by the generic
//! prefetching loop in [`PerPacket`]) and [`NodeFn`] (a whole frame, for lookups, input and
//! output nodes). See `docs/writing-a-node.md`.

pub mod buffers;
pub mod cli;
pub mod diag;
pub mod handoff;
mod node;
pub mod nodes;
pub mod pcap;
mod registry;
pub mod reply;
mod runtime;
pub mod rxmode;
pub mod stats;
pub mod testing;
pub mod trace;
mod typed;
mod vlib;
pub mod wake;

pub use buffers::{
    buffer_lenders, buffer_use, buffers_lent, register_buffer_lender, BufferUse, LentCount,
};
pub use node::{
    CounterDesc, Factory, FrameScratch, Next, NodeFn, NodeIndex, NodeKind, NodeRegistration,
    PacketNode, PerPacket, Severity, Suspend, TraceRecord, Wake, PREFETCH_AHEAD, SCRATCH_AHEAD,
};
pub use registry::{
    order_features, FeatureOrder, GraphBuilder, GraphError, NodeInfo, NodeSnapshot, Registry,
};
pub use runtime::{Cx, Shared, ThreadGraph};
pub use rxmode::{RxMode, RxModeState};
pub use typed::CounterId;
pub use vlib::{pin_to_core, CpuConfig, Job, MainJob, MainPoster, Vlib, VlibError, HANDOFF_RING};

/// Largest number of buffers a node is called with at once.
pub const FRAME_SIZE: usize = 256;

#[cfg(test)]
mod tests;
