//! Sluice drivers: the packet generator (`pg`), AF_PACKET host interfaces (`af_packet`),
//! shared-memory interfaces (`memif`) and the traffic tester (`tester`, built on pg's stream
//! templates and pacing); af_xdp and tap in later issues.

pub mod af_packet;
pub mod memif;
pub mod pg;
pub mod tester;

/// Parses a MAC address CLI token (`aa:bb:cc:dd:ee:ff` or VPP's `aabb.ccdd.eeff`).
pub(crate) fn parse_mac(w: &str) -> Result<[u8; 6], sluice_cli::CliError> {
    w.parse::<sluice_wire::Mac>()
        .map(|m| m.0)
        .map_err(|_| sluice_cli::CliError::new(format!("bad MAC address `{w}'")))
}

/// Registers every driver's nodes.
pub fn register(b: &mut sluice_graph::GraphBuilder) {
    pg::register(b);
    af_packet::register(b);
    memif::register(b);
    tester::register(b);
}

/// Registers every driver's CLI commands.
pub fn register_cli(t: &mut sluice_cli::CommandTree<sluice_graph::Vlib>) {
    pg::register_cli(t);
    af_packet::register_cli(t);
    memif::register_cli(t);
    tester::register_cli(t);
}

/// Per-runtime initialisation.
pub fn init(vm: &mut sluice_graph::Vlib) {
    pg::init(vm);
    memif::init(vm);
}
