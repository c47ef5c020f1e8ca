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
    /// Input nodes added with `trace add <node> <n> filter`: they trace only packets
    /// matching `filter`.
    pub filtered: std::collections::HashSet<NodeIndex>,
    /// `classify filter trace mask .. match ..`.
    pub filter: Option<TraceFilter>,
    /// `trace filter include|exclude <node> <count>` (applied when traces are shown).
    pub node_filter: Option<NodeFilter>,
}

/// `trace filter include|exclude <node> <count>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeFilter {
    /// Keep the packets that went through `node` (else those that did not).
    pub include: bool,
    /// The node.
    pub node: NodeIndex,
    /// At most this many packets per thread.
    pub count: u32,
}

/// `classify filter trace`: the IPv4 fields a traced packet must have (VPP's
/// `mask l3 ip4 src dst proto l4 src_port dst_port` with the `match` values; a masked field
/// without a match value must be 0, as VPP's zero-filled match). Applied to the packet as
/// the input node produced it: Ethernet (up to two VLAN tags), IPv4, then TCP/UDP ports
/// (first fragment only). A packet that is not IPv4 never matches.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceFilter {
    /// Source address.
    pub src: Option<u32>,
    /// Destination address.
    pub dst: Option<u32>,
    /// IP protocol.
    pub proto: Option<u8>,
    /// L4 source port.
    pub sport: Option<u16>,
    /// L4 destination port.
    pub dport: Option<u16>,
}

impl TraceFilter {
    /// Whether the Ethernet frame `f` matches.
    pub fn matches(&self, f: &[u8]) -> bool {
        let be16 = |o: usize| f.get(o..o + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
        let be32 = |o: usize| {
            f.get(o..o + 4)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        };
        let mut o = 12;
        while matches!(be16(o), Some(0x8100 | 0x88a8)) && o < 20 {
            o += 4;
        }
        if be16(o) != Some(0x0800) {
            return false;
        }
        let ip = o + 2;
        let Some(&vihl) = f.get(ip) else { return false };
        let ihl = (vihl & 0x0f) as usize * 4;
        if vihl >> 4 != 4 || ihl < 20 {
            return false;
        }
        let field = |want: Option<u32>, got: Option<u32>| want.is_none() || want == got;
        let l4 = ip + ihl;
        let first_frag = be16(ip + 6).is_some_and(|v| v & 0x1fff == 0);
        let port = |o: usize| be16(o).filter(|_| first_frag).map(u32::from);
        field(self.src, be32(ip + 12))
            && field(self.dst, be32(ip + 16))
            && field(self.proto.map(u32::from), f.get(ip + 9).map(|&p| p as u32))
            && field(self.sport.map(u32::from), port(l4))
            && field(self.dport.map(u32::from), port(l4 + 2))
    }
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
    /// `pcap dispatch trace` is on (then `active` is too, so the dispatcher visits frames).
    pub dispatch_on: AtomicBool,
    /// The dispatch capture.
    pub dispatch: Mutex<Option<DispatchCapture>>,
}

/// What a stopped `pcap dispatch trace` wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DispatchStopped {
    /// Packets written.
    pub written: u64,
    /// The capture file.
    pub path: std::path::PathBuf,
}

/// `pcap dispatch trace on`: every packet every node receives, written in VPP's dispatch
/// trace format (pcap link type 280, `LINKTYPE_VPP_DISPATCH`, which Wireshark's `vpp`
/// dissector reads): per record a version (1.0), the count of strings, a protocol hint for
/// the packet data (1 Ethernet, 2 IPv4, 3 IPv6), the buffer index (big endian), then
/// NUL-terminated strings — the node name, the buffer metadata, two opaque-metadata strings
/// and, for a traced packet, its trace so far — and the packet bytes.
pub struct DispatchCapture {
    /// The file.
    pub sink: crate::pcap::PcapSink,
    /// Stop after this many records.
    pub max: u64,
    /// Node names and protocol hints by node index.
    pub nodes: Vec<(String, u8)>,
}

/// VPP's dispatch-trace link type.
pub const LINKTYPE_VPP_DISPATCH: u32 = 280;

/// VPP's protocol hint of a node's packets from its name (`ip4-*`: IPv4, `ip6-*`: IPv6,
/// other nodes see Ethernet frames).
pub fn proto_hint(node: &str) -> u8 {
    if node.starts_with("ip4-") {
        2
    } else if node.starts_with("ip6-") {
        3
    } else {
        1
    }
}

/// One dispatch-trace record (see [`DispatchCapture`]): `trace` is the packet's trace text so
/// far, if it is traced.
#[allow(clippy::too_many_arguments)]
pub fn dispatch_record(
    node: &str,
    hint: u8,
    buffer: u32,
    hdr: &sluice_buffer::BufferHeader,
    trace: Option<&str>,
    data: &[u8],
) -> Vec<u8> {
    let mut r = vec![1u8, 0, 0, hint];
    r.extend_from_slice(&buffer.to_be_bytes());
    let mut strings = vec![
        node.to_string(),
        format!(
            "flags: 0x{:x}\ncurrent_data: {}, current_length: {}\nnext_buffer: {:x}\nerror: {}, buffer_pool_index: {}\ntrace_handle: 0x{:x}, len_not_first_buf: {}\n",
            hdr.flags,
            hdr.current_data,
            hdr.current_length,
            hdr.next_buffer,
            hdr.error,
            hdr.pool_index,
            hdr.trace_index,
            hdr.total_length_not_including_first_buffer
        ),
        format!(
            "sw_if_index[VLIB_RX]: {}, sw_if_index[VLIB_TX]: {}\n",
            hdr.rx_if, hdr.tx_if
        ),
        String::new(),
    ];
    strings.extend(trace.map(str::to_string));
    r[2] = strings.len() as u8;
    for s in strings {
        r.extend_from_slice(s.replace('\0', " ").as_bytes());
        r.push(0);
    }
    r.extend_from_slice(data);
    r
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

    /// `trace add <node> <n> filter`: the node traces only packets matching the
    /// `classify filter trace` (`filter` false: all packets again).
    pub fn set_filtered(&self, node: NodeIndex, filter: bool) {
        let mut s = self.lock();
        if filter {
            s.filtered.insert(node);
        } else {
            s.filtered.remove(&node);
        }
    }

    /// `classify filter trace ...` (None: `del`).
    pub fn set_filter(&self, f: Option<TraceFilter>) {
        self.lock().filter = f;
    }

    /// `clear trace`: forgets traced packets and budgets.
    pub fn clear(&self) {
        let mut s = self.lock();
        s.packets.clear();
        s.budget.clear();
        s.filtered.clear();
        s.generation = s.generation.wrapping_add(1);
        self.budget_any.store(false, Ordering::Release);
        // A dispatch capture keeps the dispatcher visiting frames.
        self.active
            .store(self.dispatch_on.load(Ordering::Acquire), Ordering::Release);
    }

    /// `pcap dispatch trace on`: starts writing every node's packets to `cap.sink`.
    pub fn dispatch_start(&self, cap: DispatchCapture) {
        *self.dispatch.lock().unwrap_or_else(|p| p.into_inner()) = Some(cap);
        self.dispatch_on.store(true, Ordering::Release);
        self.active.store(true, Ordering::Release);
    }

    /// `pcap dispatch trace off`: stops; what was written (None: no capture was running).
    pub fn dispatch_stop(&self) -> Option<DispatchStopped> {
        self.dispatch_on.store(false, Ordering::Release);
        let cap = self
            .dispatch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let tracing = self.budget_any.load(Ordering::Acquire) || !self.lock().packets.is_empty();
        self.active.store(tracing, Ordering::Release);
        cap.map(|c| DispatchStopped {
            written: c.sink.written,
            path: c.sink.path().to_path_buf(),
        })
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
