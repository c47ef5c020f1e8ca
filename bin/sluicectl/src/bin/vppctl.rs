//! `vppctl`: `sluicectl` under VPP's client name (`vppctl [-s <socket>] [command ...]`); its
//! default socket is VPP's `/run/vpp/cli.sock` when that exists.

fn main() -> std::process::ExitCode {
    sluicectl::run(sluicectl::Flavour::Vppctl)
}
