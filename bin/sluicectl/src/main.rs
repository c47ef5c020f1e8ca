//! `sluicectl`: the command-line client of the `sluice` daemon (see the library doc). Run
//! under the name `vppctl` (a symlink), it behaves as the `vppctl` binary.

fn main() -> std::process::ExitCode {
    sluicectl::run(sluicectl::flavour_of(std::env::args_os().next()))
}
