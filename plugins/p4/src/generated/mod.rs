//! Programs compiled to Rust by `sluice-p4c` (`gen`), built into the plugin.
//!
//! Each module is the generator's output for one example program, committed and kept up to
//! date by `tests/generated.rs` (regenerate with
//! `cargo run -p sluice-p4 --bin sluice-p4c -- <file.p4> -o plugins/p4/src/generated/<name>.rs`).
//! `p4 load` looks the compiled program's [`crate::gen::fingerprint`] up in [`ALL`] and, in
//! single mode and for multi mode's segments, runs the matching module instead of an
//! interpreter.

use crate::exec::{Shared, ThreadState};
use sluice_buffer::BufIdx;
use sluice_graph::Cx;

#[rustfmt::skip]
#[allow(dead_code, unused_imports, unused_mut, unused_variables, unused_assignments, unused_labels, unused_braces, unused_parens, clippy::all)]
pub mod control_flow;
#[rustfmt::skip]
#[allow(dead_code, unused_imports, unused_mut, unused_variables, unused_assignments, unused_labels, unused_braces, unused_parens, clippy::all)]
pub mod firewall;
#[rustfmt::skip]
#[allow(dead_code, unused_imports, unused_mut, unused_variables, unused_assignments, unused_labels, unused_braces, unused_parens, clippy::all)]
pub mod l2switch;
#[rustfmt::skip]
#[allow(dead_code, unused_imports, unused_mut, unused_variables, unused_assignments, unused_labels, unused_braces, unused_parens, clippy::all)]
pub mod router;

/// A frame through a generated program's node loop (`node::frame_generated`).
pub type FrameFn = fn(&mut Cx, &mut ThreadState, &Shared, &[BufIdx], &mut [u16]);

/// One generated program.
pub struct GenEntry {
    /// Module name.
    pub name: &'static str,
    /// The P4 source it was generated from (relative to the repository).
    pub source: &'static str,
    /// [`crate::gen::fingerprint`] of the compiled program.
    pub fingerprint: (u64, usize),
    /// The node's frame function, monomorphised for the program.
    pub frame: FrameFn,
    /// The same in stages (`node::frame_staged`), the first table looked up ahead on
    /// guessed keys.
    pub staged: FrameFn,
    /// Whether `staged` may run ([`crate::gen::rt::Generated::GUESS`]).
    pub guess: bool,
    /// The whole pipeline on one packet (tests compare it with the interpreters).
    pub packet: PacketFn,
    /// The same as the staged node runs it (`node::packet_staged`).
    pub packet_staged: PacketFn,
    /// The staged node's entry point on a wrong guess (`node::packet_misguessed`, tests).
    pub packet_misguessed: PacketFn,
    /// Multi-node segments the generated code has (its ingress phases).
    pub segs: usize,
    /// One multi-node segment on a frame (`node::frame_segment_generated`).
    pub segment: SegmentFn,
    /// Per segment, the table looked up before it (auto mode's cost model).
    pub pre: &'static [Option<u16>],
    /// The side table's packet states for a number of buffers (`node::gen_states`).
    pub states: fn(usize) -> Box<dyn std::any::Any + Send>,
}

/// One multi-node segment of a generated program on a frame.
pub type SegmentFn = fn(
    &mut Cx,
    &mut ThreadState,
    &Shared,
    &mut crate::node::Side,
    usize,
    Option<u16>,
    &[BufIdx],
    &mut [u16],
);

/// One packet through a generated program ([`crate::gen::rt::Generated::packet`]).
pub type PacketFn = fn(
    &mut ThreadState,
    &Shared,
    u64,
    &mut [u8],
    u32,
    u32,
) -> (crate::vec::VOut, crate::exec::ParseEnd);

/// Every generated program.
pub static ALL: &[GenEntry] = &[
    GenEntry {
        name: "router",
        source: "plugins/p4/examples/router.p4",
        fingerprint: router::FINGERPRINT,
        frame: crate::node::frame_generated::<router::Prog>,
        staged: crate::node::frame_staged::<router::Prog>,
        guess: <router::Prog as crate::gen::rt::Generated>::GUESS,
        packet: <router::Prog as crate::gen::rt::Generated>::packet,
        packet_staged: crate::node::packet_staged::<router::Prog>,
        packet_misguessed: crate::node::packet_misguessed::<router::Prog>,
        segs: <router::Prog as crate::gen::rt::Generated>::SEGS,
        segment: crate::node::frame_segment_generated::<router::Prog>,
        states: crate::node::gen_states::<router::Prog>,
        pre: <router::Prog as crate::gen::rt::Generated>::PRE,
    },
    GenEntry {
        name: "l2switch",
        source: "plugins/p4/examples/l2switch.p4",
        fingerprint: l2switch::FINGERPRINT,
        frame: crate::node::frame_generated::<l2switch::Prog>,
        staged: crate::node::frame_staged::<l2switch::Prog>,
        guess: <l2switch::Prog as crate::gen::rt::Generated>::GUESS,
        packet: <l2switch::Prog as crate::gen::rt::Generated>::packet,
        packet_staged: crate::node::packet_staged::<l2switch::Prog>,
        packet_misguessed: crate::node::packet_misguessed::<l2switch::Prog>,
        segs: <l2switch::Prog as crate::gen::rt::Generated>::SEGS,
        segment: crate::node::frame_segment_generated::<l2switch::Prog>,
        states: crate::node::gen_states::<l2switch::Prog>,
        pre: <l2switch::Prog as crate::gen::rt::Generated>::PRE,
    },
    GenEntry {
        name: "control_flow",
        source: "plugins/p4/examples/control_flow.p4",
        fingerprint: control_flow::FINGERPRINT,
        frame: crate::node::frame_generated::<control_flow::Prog>,
        staged: crate::node::frame_staged::<control_flow::Prog>,
        guess: <control_flow::Prog as crate::gen::rt::Generated>::GUESS,
        packet: <control_flow::Prog as crate::gen::rt::Generated>::packet,
        packet_staged: crate::node::packet_staged::<control_flow::Prog>,
        packet_misguessed: crate::node::packet_misguessed::<control_flow::Prog>,
        segs: <control_flow::Prog as crate::gen::rt::Generated>::SEGS,
        segment: crate::node::frame_segment_generated::<control_flow::Prog>,
        states: crate::node::gen_states::<control_flow::Prog>,
        pre: <control_flow::Prog as crate::gen::rt::Generated>::PRE,
    },
    GenEntry {
        name: "firewall",
        source: "plugins/p4/examples/firewall.p4",
        fingerprint: firewall::FINGERPRINT,
        frame: crate::node::frame_generated::<firewall::Prog>,
        staged: crate::node::frame_staged::<firewall::Prog>,
        guess: <firewall::Prog as crate::gen::rt::Generated>::GUESS,
        packet: <firewall::Prog as crate::gen::rt::Generated>::packet,
        packet_staged: crate::node::packet_staged::<firewall::Prog>,
        packet_misguessed: crate::node::packet_misguessed::<firewall::Prog>,
        segs: <firewall::Prog as crate::gen::rt::Generated>::SEGS,
        segment: crate::node::frame_segment_generated::<firewall::Prog>,
        states: crate::node::gen_states::<firewall::Prog>,
        pre: <firewall::Prog as crate::gen::rt::Generated>::PRE,
    },
];

/// The generated module of a compiled program, if there is one.
pub fn find(p: &crate::ir::Program) -> Option<&'static GenEntry> {
    let fp = crate::gen::fingerprint(p);
    ALL.iter().find(|g| g.fingerprint == fp)
}
