//! Sluice drivers: the packet generator (`pg`), AF_PACKET host interfaces (`af_packet`),
//! AF_XDP interfaces (`af_xdp`), shared-memory interfaces (`memif`), Linux tap interfaces
//! (`tap`) and the traffic tester (`tester`, built on pg's stream templates and pacing). What
//! the Linux-facing ones share is in [`linux`]; [`fdq`] holds the rx-queue plumbing (rx modes,
//! placement) of fd-backed drivers.

pub mod af_packet;
pub mod af_xdp;
pub mod fdq;
pub mod linux;
pub mod memif;
pub mod pg;
pub mod tap;
pub mod tester;

use linux::{KickEntry, KickSet, SwTable, TxKick};
use sluice_buffer::{BufIdx, BufferPool};
use sluice_graph::{Cx, NodeIndex, Vlib};
use sluice_vnet::interface::IfCounters;
use sluice_vnet::SwIfIndex;
use std::sync::Arc;

/// Parses a MAC address CLI token (`aa:bb:cc:dd:ee:ff` or VPP's `aabb.ccdd.eeff`).
pub(crate) fn parse_mac(w: &str) -> Result<[u8; 6], sluice_cli::CliError> {
    w.parse::<sluice_wire::Mac>()
        .map(|m| m.0)
        .map_err(|_| sluice_cli::CliError::new(format!("bad MAC address `{w}'")))
}

/// Sets (`Some`) or clears (`None`) interface `sw`'s entry in the tx node `tx_node` of every
/// thread (`table` gives the node's per-interface table), at each thread's safe point.
pub(crate) fn set_tx_entry<N: 'static, E: Clone + Send + Sync + 'static>(
    vm: &mut Vlib,
    tx_node: NodeIndex,
    sw: SwIfIndex,
    e: Option<E>,
    table: fn(&mut N) -> &mut SwTable<E>,
) {
    vm.foreach_thread(move |tg| {
        if let Some(n) = tg.node_mut::<N>(tx_node) {
            table(n).set(sw.0, e.clone());
        }
    });
}

/// An interface's tx queues (thread t transmits on `queues[t % len]`) and its counters.
pub(crate) type TxQueues<K> = (Arc<Vec<K>>, Arc<IfCounters>);

/// Sets (`Some((queues, counters))`) or clears (`None`) interface `sw`'s entry in the kick
/// set of input node `input` on every thread (`kicks` gives the node's set): thread t gets
/// `queues[t % len]`, the queue its tx node transmits on. Retries and frames given up are
/// counted on `tx_node`'s counters `c_retry` and `c_dropped`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn set_kick_entry<N: 'static, K: TxKick + Clone + Sync>(
    vm: &mut Vlib,
    input: NodeIndex,
    tx_node: NodeIndex,
    sw: SwIfIndex,
    queues: Option<TxQueues<K>>,
    kicks: fn(&mut N) -> &mut KickSet<K>,
    c_retry: usize,
    c_dropped: usize,
) {
    let base = vm.registry.node(tx_node).error_base;
    let hz = vm.shared.clock.hz();
    vm.foreach_thread(move |tg| {
        let t = tg.thread();
        let e = queues.as_ref().and_then(|(qs, counters)| {
            Some(KickEntry {
                sw_if: sw.0,
                q: qs.get(t % qs.len().max(1))?.clone(),
                counters: counters.clone(),
                err_retry: base + c_retry as u16,
                err_dropped: base + c_dropped as u16,
            })
        });
        if let Some(n) = tg.node_mut::<N>(input) {
            kicks(n).set(sw.0, e, hz);
        }
    });
}

/// `NodeFn::frame` of a tx node serving several interfaces: calls `send(cx, pool, entry, run)`
/// for each run of consecutive buffers of `frame` with the same `tx_if`, `entry` being that
/// interface's in `table`; the buffers of an interface without one are counted as counter
/// `no_interface`. Frees the frame afterwards (`send` only reads the buffers).
pub(crate) fn tx_runs<E>(
    cx: &mut Cx,
    frame: &[BufIdx],
    table: &SwTable<E>,
    no_interface: usize,
    mut send: impl FnMut(&mut Cx, &BufferPool, &E, &[BufIdx]),
) {
    let pool = cx.pool_ref();
    let mut i = 0;
    while i < frame.len() {
        // SAFETY: the calling tx node owns the frame; read-only header access.
        let tx = unsafe { pool.header(frame[i]) }.tx_if;
        let mut j = i + 1;
        // SAFETY: as above.
        while j < frame.len() && unsafe { pool.header(frame[j]) }.tx_if == tx {
            j += 1;
        }
        match table.get(tx) {
            Some(e) => send(cx, pool, e, &frame[i..j]),
            None => cx.count(no_interface, (j - i) as u64),
        }
        i = j;
    }
    cx.free(frame);
}

/// Bytes of the packets `bufs` (chains included): what a tx node could not send, for
/// `IfCounters::tx_failed` (failure paths only).
pub(crate) fn total_bytes(pool: &BufferPool, bufs: &[BufIdx]) -> u64 {
    bufs.iter()
        // SAFETY: the calling tx node owns the buffers; short-lived read-only views.
        .map(|&b| unsafe { pool.buffer(b) }.total_len() as u64)
        .sum()
}

/// The first bytes of a received packet, as an input node's trace record keeps them: shown
/// decoded (Ethernet and what follows) under the record's own line.
#[derive(Copy, Clone)]
pub(crate) struct TraceHead {
    len: u8,
    bytes: [u8; 64],
}

impl TraceHead {
    /// Keeps the first 64 bytes of `pkt` (all of it when shorter).
    pub(crate) fn new(pkt: &[u8]) -> Self {
        let mut bytes = [0u8; 64];
        let n = pkt.len().min(bytes.len());
        bytes[..n].copy_from_slice(&pkt[..n]);
        TraceHead {
            len: n as u8,
            bytes,
        }
    }

    /// Appends the decoded header lines to `out`, one indented line each.
    pub(crate) fn format(&self, out: &mut String) {
        use std::fmt::Write as _;
        let d = sluice_wire::format::describe_ethernet(&self.bytes[..self.len as usize]);
        for l in d.lines() {
            let _ = write!(out, "\n  {l}");
        }
    }
}

/// Registers every driver's nodes.
pub fn register(b: &mut sluice_graph::GraphBuilder) {
    pg::register(b);
    af_packet::register(b);
    af_xdp::register(b);
    memif::register(b);
    tap::register(b);
    tester::register(b);
}

/// Registers every driver's CLI commands.
pub fn register_cli(t: &mut sluice_cli::CommandTree<sluice_graph::Vlib>) {
    pg::register_cli(t);
    af_packet::register_cli(t);
    af_xdp::register_cli(t);
    memif::register_cli(t);
    tap::register_cli(t);
    tester::register_cli(t);
}

/// Per-runtime initialisation.
pub fn init(vm: &mut sluice_graph::Vlib) {
    pg::init(vm);
    af_packet::init(vm);
    af_xdp::init(vm);
    memif::init(vm);
    tap::init(vm);
}

#[cfg(test)]
mod tests {
    use super::TraceHead;

    #[test]
    fn trace_head_keeps_at_most_64_bytes_and_decodes_them() {
        // Ethernet to a broadcast MAC, type ARP, then 100 bytes of padding.
        let mut pkt = vec![0xff; 6];
        pkt.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06]);
        pkt.resize(114, 0);
        let h = TraceHead::new(&pkt);
        assert_eq!(h.len, 64);
        assert_eq!(&h.bytes[..], &pkt[..64]);
        let mut out = String::new();
        h.format(&mut out);
        assert!(out.starts_with("\n  "), "{out:?}");
        assert!(out.contains("02:00:00:00:00:01"), "{out:?}");
        let short = TraceHead::new(&pkt[..10]);
        assert_eq!(short.len, 10);
        assert_eq!(&short.bytes[..10], &pkt[..10]);
    }
}
