//! Packet trace (`trace add <input-node> <n>`, `show trace`, `clear trace`).
//!
//! An input node marks up to n packets as traced; every node a traced packet visits appends an
//! entry (node + timestamp + the packet's first bytes, plus an optional small `Copy` record
//! from the node). Records are
//! formatted only when `show trace` runs. The store is shared by all threads and touched only
//! for traced packets, so tracing costs one relaxed load per frame when it is off.

use crate::node::{NodeIndex, TraceRecord};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Type-erased trace record.
pub trait DynTrace: Send {
    /// Appends the record's decode.
    fn format(&self, out: &mut String);
}

impl<T: TraceRecord> DynTrace for T {
    fn format(&self, out: &mut String) {
        TraceRecord::format(self, out)
    }
}

/// One node visit of a traced packet.
pub struct TraceEntry {
    /// Node visited.
    pub node: NodeIndex,
    /// TSC when the node saw the packet.
    pub tsc: u64,
    /// Thread that ran the node.
    pub thread: u16,
    /// The node's record, if it added one.
    pub rec: Option<Box<dyn DynTrace>>,
    /// The first [`SNAPSHOT`] bytes of the packet as the node received it (nodes without a
    /// record of their own are decoded from it, see [`TraceDecoder`]).
    pub data: Vec<u8>,
    /// The buffer's error code then (why `error-drop` drops it).
    pub error: u16,
}

/// Bytes of a traced packet kept per node visit.
pub const SNAPSHOT: usize = 128;

/// Decodes a node visit without a record of its own: `(node name, packet bytes)` → lines
/// (the packet starts where the node starts reading it: the Ethernet header for L2 and
/// output nodes, the IP header for `ip4-*`/`ip6-*`). Installed by the protocol layer (a
/// `Vlib` extension); without one such visits show the node name only.
#[derive(Default)]
pub struct TraceDecoder(pub Option<fn(&str, &[u8]) -> String>);

/// All trace state.
#[derive(Default)]
pub struct TraceStore {
    /// Traced packets in the order they were started; the buffer's `trace_index` points here.
    pub packets: Vec<Vec<TraceEntry>>,
    /// Remaining trace budget per input node.
    pub budget: HashMap<NodeIndex, u32>,
    /// Bumped on `clear trace` so in-flight packets with stale indices are ignored.
    pub generation: u8,
}

/// Trace state shared by every thread.
#[derive(Default)]
pub struct TraceShared {
    /// Some packet may be traced: nodes check traced flags on their frames.
    pub active: AtomicBool,
    /// Some input node has trace budget left.
    pub budget_any: AtomicBool,
    /// The store.
    pub store: Mutex<TraceStore>,
}

/// `trace_index` layout: generation in the top 8 bits, packet index below.
pub(crate) fn pack_index(generation: u8, i: usize) -> u32 {
    ((generation as u32) << 24) | (i as u32 & 0x00ff_ffff)
}

impl TraceShared {
    /// Locks the store (recovering from a poisoned lock: trace state is best effort).
    pub fn lock(&self) -> std::sync::MutexGuard<'_, TraceStore> {
        match self.store.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// `trace add <node> <n>`: adds n to the node's budget.
    pub fn add(&self, node: NodeIndex, n: u32) {
        let mut s = self.lock();
        *s.budget.entry(node).or_default() += n;
        self.budget_any.store(true, Ordering::Release);
        self.active.store(true, Ordering::Release);
    }

    /// `clear trace`: forgets traced packets and budgets.
    pub fn clear(&self) {
        let mut s = self.lock();
        s.packets.clear();
        s.budget.clear();
        s.generation = s.generation.wrapping_add(1);
        self.budget_any.store(false, Ordering::Release);
        self.active.store(false, Ordering::Release);
    }

    /// Entries of a packet by its buffer's `trace_index`, if still current.
    pub(crate) fn entries_mut(
        s: &mut TraceStore,
        trace_index: u32,
    ) -> Option<&mut Vec<TraceEntry>> {
        if (trace_index >> 24) as u8 != s.generation {
            return None;
        }
        s.packets.get_mut((trace_index & 0x00ff_ffff) as usize)
    }
}

/// Formats a timestamp as VPP does in `show trace`: `HH:MM:SS:uuuuuu`.
pub fn format_time(secs: f64) -> String {
    let total_us = (secs.max(0.0) * 1e6) as u64;
    let us = total_us % 1_000_000;
    let s = total_us / 1_000_000;
    format!(
        "{:02}:{:02}:{:02}:{:06}",
        s / 3600,
        (s / 60) % 60,
        s % 60,
        us
    )
}
