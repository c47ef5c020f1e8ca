//! What device drivers share (VPP's `vnet/devices`): per-interface tx tables and the tx
//! loop over runs of one interface, tx kick retries, trace records of received frames, MAC
//! arguments; [`linux`] holds what the Linux-facing drivers (af_packet, af_xdp, tap) share,
//! [`fdq`] the rx-queue plumbing (rx modes, placement) of fd-backed drivers. The drivers
//! themselves are plugins (`plugins/`); pg lives in [`crate::pg`].

pub mod fdq;
pub mod linux;

use crate::interface::IfCounters;
use crate::SwIfIndex;
use linux::{KickEntry, KickSet, SwTable, TxKick};
use sluice_buffer::{BufIdx, BufferPool, IfIndex};
use sluice_graph::{CounterId, Cx, NodeIndex, Vlib};
use std::sync::Arc;

/// Parses a MAC address CLI token (`aa:bb:cc:dd:ee:ff` or VPP's `aabb.ccdd.eeff`).
pub fn parse_mac(w: &str) -> Result<[u8; 6], sluice_cli::CliError> {
    w.parse::<sluice_wire::Mac>()
        .map(|m| m.0)
        .map_err(|_| sluice_cli::CliError::new(format!("bad MAC address `{w}'")))
}

/// A `hw-addr <mac>` argument: a unicast MAC.
pub fn hw_addr_arg(a: &mut sluice_cli::Args) -> Result<[u8; 6], sluice_cli::CliError> {
    unicast_mac_arg(a, "hw-addr")
}

/// A unicast MAC argument of option `what` (named in the error).
pub fn unicast_mac_arg(
    a: &mut sluice_cli::Args,
    what: &str,
) -> Result<[u8; 6], sluice_cli::CliError> {
    let w = a.word("MAC address")?;
    let m = parse_mac(&w)?;
    if m[0] & 1 != 0 {
        return Err(sluice_cli::CliError::new(format!(
            "{what} `{w}' is a multicast address"
        )));
    }
    Ok(m)
}

/// Sets (`Some`) or clears (`None`) interface `sw`'s entry in the tx node `tx_node` of every
/// thread (`table` gives the node's per-interface table), at each thread's safe point.
pub fn set_tx_entry<N: 'static, E: Clone + Send + Sync + 'static>(
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
pub type TxQueues<K> = (Arc<Vec<K>>, Arc<IfCounters>);

/// Sets (`Some((queues, counters))`) or clears (`None`) interface `sw`'s entry in the kick
/// set of input node `input` on every thread (`kicks` gives the node's set): thread t gets
/// `queues[t % len]`, the queue its tx node transmits on. Retries and frames given up are
/// counted on `tx_node`'s counters `c_retry` and `c_dropped`.
#[allow(clippy::too_many_arguments)]
pub fn set_kick_entry<N: 'static, K: TxKick + Clone + Sync>(
    vm: &mut Vlib,
    input: NodeIndex,
    tx_node: NodeIndex,
    sw: SwIfIndex,
    queues: Option<TxQueues<K>>,
    kicks: fn(&mut N) -> &mut KickSet<K>,
    c_retry: impl CounterId,
    c_dropped: impl CounterId,
) {
    let (c_retry, c_dropped) = (c_retry.index(), c_dropped.index());
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

/// Calls `run(tx_if, run)` for each run of consecutive buffers of `frame` with the same
/// `tx_if` (the buffers belong to the calling tx node; their headers are only read).
pub fn for_each_tx_run(
    pool: &BufferPool,
    frame: &[BufIdx],
    mut run: impl FnMut(IfIndex, &[BufIdx]),
) {
    let mut i = 0;
    while i < frame.len() {
        // SAFETY: the calling tx node owns the frame; read-only header access.
        let tx = unsafe { pool.header(frame[i]) }.tx_if;
        let mut j = i + 1;
        // SAFETY: as above.
        while j < frame.len() && unsafe { pool.header(frame[j]) }.tx_if == tx {
            j += 1;
        }
        run(tx, &frame[i..j]);
        i = j;
    }
}

/// `NodeFn::frame` of a tx node serving several interfaces: calls `send(cx, pool, entry, run)`
/// for each run of consecutive buffers of `frame` with the same `tx_if`, `entry` being that
/// interface's in `table`; the buffers of an interface without one are counted as counter
/// `no_interface`. Frees the frame afterwards (`send` only reads the buffers).
pub fn tx_runs<E>(
    cx: &mut Cx,
    frame: &[BufIdx],
    table: &SwTable<E>,
    no_interface: impl CounterId,
    mut send: impl FnMut(&mut Cx, &BufferPool, &E, &[BufIdx]),
) {
    let pool = cx.pool_ref();
    for_each_tx_run(pool, frame, |tx, run| match table.get(tx) {
        Some(e) => send(cx, pool, e, run),
        None => cx.count(no_interface, run.len() as u64),
    });
    cx.free(frame);
}

/// Bytes of the packets `bufs` (chains included): what a tx node could not send, for
/// `IfCounters::tx_failed` (failure paths only).
pub fn total_bytes(pool: &BufferPool, bufs: &[BufIdx]) -> u64 {
    bufs.iter()
        // SAFETY: the calling tx node owns the buffers; short-lived read-only views.
        .map(|&b| unsafe { pool.buffer(b) }.total_len() as u64)
        .sum()
}

/// The first bytes of a received packet, as an input node's trace record keeps them: shown
/// decoded (Ethernet and what follows) under the record's own line.
#[derive(Copy, Clone)]
pub struct TraceHead {
    len: u8,
    bytes: [u8; 64],
}

impl TraceHead {
    /// Keeps the first 64 bytes of `pkt` (all of it when shorter).
    pub fn new(pkt: &[u8]) -> Self {
        let mut bytes = [0u8; 64];
        let n = pkt.len().min(bytes.len());
        bytes[..n].copy_from_slice(&pkt[..n]);
        TraceHead {
            len: n as u8,
            bytes,
        }
    }

    /// Appends the decoded header lines to `out`, one indented line each.
    pub fn format(&self, out: &mut String) {
        use std::fmt::Write as _;
        let d = sluice_wire::format::describe_ethernet(&self.bytes[..self.len as usize]);
        for l in d.lines() {
            let _ = write!(out, "\n  {l}");
        }
    }
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
