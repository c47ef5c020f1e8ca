//! Sluice drivers: the packet generator (`pg`), AF_PACKET host interfaces (`af_packet`) and
//! shared-memory interfaces (`memif`); af_xdp and tap in later issues.

pub mod af_packet;
pub mod memif;
pub mod pg;

/// Registers every driver's nodes.
pub fn register(b: &mut sluice_graph::GraphBuilder) {
    pg::register(b);
    af_packet::register(b);
    memif::register(b);
}

/// Registers every driver's CLI commands.
pub fn register_cli(t: &mut sluice_cli::CommandTree<sluice_graph::Vlib>) {
    pg::register_cli(t);
    af_packet::register_cli(t);
    memif::register_cli(t);
}

/// Per-runtime initialisation.
pub fn init(vm: &mut sluice_graph::Vlib) {
    pg::init(vm);
    af_packet::init(vm);
    memif::init(vm);
}
