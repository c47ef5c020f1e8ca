//! Sluice drivers: the packet generator (`pg`), AF_PACKET host interfaces (`af_packet`),
//! shared-memory interfaces (`memif`) and Linux tap interfaces (`tap`); af_xdp in a later
//! issue. [`fdq`] holds the rx-queue plumbing (rx modes, placement) of fd-backed drivers.

pub mod af_packet;
pub mod fdq;
pub mod memif;
pub mod pg;
pub mod tap;

use sluice_buffer::{BufIdx, BufferPool};
use sluice_graph::{NodeIndex, Vlib};
use sluice_vnet::SwIfIndex;

/// Sets (`Some`) or clears (`None`) interface `sw`'s entry in the tx node `tx_node` of every
/// thread (`table` gives the node's per-interface table), at each thread's safe point.
pub(crate) fn set_tx_entry<N: 'static, E: Clone + Send + Sync + 'static>(
    vm: &mut Vlib,
    tx_node: NodeIndex,
    sw: SwIfIndex,
    e: Option<E>,
    table: fn(&mut N) -> &mut Vec<Option<E>>,
) {
    vm.foreach_thread(move |tg| {
        if let Some(n) = tg.node_mut::<N>(tx_node) {
            let t = table(n);
            let i = sw.0 as usize;
            if t.len() <= i {
                t.resize(i + 1, None);
            }
            t[i] = e.clone();
        }
    });
}

/// Calls `f(tx_if, run)` for each run of consecutive buffers of `frame` with the same
/// `tx_if` (tx nodes serving several interfaces).
pub(crate) fn for_each_tx_run(
    pool: &BufferPool,
    frame: &[BufIdx],
    mut f: impl FnMut(u32, &[BufIdx]),
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
        f(tx, &frame[i..j]);
        i = j;
    }
}

/// Registers every driver's nodes.
pub fn register(b: &mut sluice_graph::GraphBuilder) {
    pg::register(b);
    af_packet::register(b);
    memif::register(b);
    tap::register(b);
}

/// Registers every driver's CLI commands.
pub fn register_cli(t: &mut sluice_cli::CommandTree<sluice_graph::Vlib>) {
    pg::register_cli(t);
    af_packet::register_cli(t);
    memif::register_cli(t);
    tap::register_cli(t);
}

/// Per-runtime initialisation.
pub fn init(vm: &mut sluice_graph::Vlib) {
    pg::init(vm);
    af_packet::init(vm);
    memif::init(vm);
    tap::init(vm);
}
