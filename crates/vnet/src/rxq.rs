//! Rx queues of every driver, as VPP's `vnet_hw_if_rx_queue`: which thread polls each queue of
//! each interface and in which rx mode.
//!
//! CLI (VPP syntax):
//! - `set interface rx-mode <interface> [queue <n>] polling|interrupt|adaptive`
//! - `set interface rx-placement <interface> [queue <n>] worker <n>|main`
//! - `show interface rx-placement`
//!
//! Drivers own their queues (af_packet rings, memif rings, tap fds) and register an
//! [`RxDriver`]: the input node's name and three functions to list their queues, change a
//! queue's mode and move it to another thread. Moving a queue is a handoff of its ownership
//! between two threads at their safe points (the old thread lets go of it, then the new one
//! takes it), so it is safe while traffic flows; what arrives in between waits in the ring.
//! Modes are described in [`sluice_graph::rxmode`].

use crate::error::{VnetError, VnetResult};
use crate::interface::{Interfaces, SwIfIndex};
use sluice_cli::{Args, CliError, CommandTree};
use sluice_graph::{RxMode, Vlib};
use std::fmt::Write as _;

/// One rx queue as a driver reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RxQueueInfo {
    /// Interface.
    pub sw_if: SwIfIndex,
    /// Queue number within the interface.
    pub queue: u16,
    /// Thread polling it (0 = main).
    pub thread: usize,
    /// Its rx mode.
    pub mode: RxMode,
}

/// A driver's rx-queue operations.
#[derive(Copy, Clone)]
pub struct RxDriver {
    /// The driver's input node (`show interface rx-placement`).
    pub node: &'static str,
    /// Every rx queue of the driver's interfaces.
    pub queues: fn(&mut Vlib) -> Vec<RxQueueInfo>,
    /// Sets queue `queue` of an interface to a mode.
    pub set_mode: fn(&mut Vlib, SwIfIndex, u16, RxMode) -> VnetResult,
    /// Moves queue `queue` of an interface to a thread (0 = main).
    pub place: fn(&mut Vlib, SwIfIndex, u16, usize) -> VnetResult,
}

/// The registered drivers (a `Vlib` extension).
#[derive(Default)]
pub struct RxDrivers {
    list: Vec<RxDriver>,
}

/// Registers a driver's rx-queue operations (from the driver's `init`).
pub fn register_driver(vm: &mut Vlib, d: RxDriver) {
    let l = &mut vm.ext_mut::<RxDrivers>().list;
    if !l.iter().any(|x| x.node == d.node) {
        l.push(d);
    }
}

/// Every rx queue of every driver, with the driver that owns it.
pub fn all_queues(vm: &mut Vlib) -> Vec<(RxDriver, RxQueueInfo)> {
    let drivers = vm.ext_mut::<RxDrivers>().list.clone();
    let mut v = Vec::new();
    for d in drivers {
        for q in (d.queues)(vm) {
            v.push((d, q));
        }
    }
    v
}

/// Registers the rx-mode and rx-placement commands.
pub fn register_cli(t: &mut CommandTree<Vlib>) {
    t.add(
        "set interface rx-mode",
        "set interface rx-mode <interface> [queue <n>] [polling | interrupt | adaptive]",
        cli_rx_mode,
    );
    t.add(
        "set interface rx-placement",
        "set interface rx-placement <interface> [queue <n>] [worker <n> | main]",
        cli_rx_placement,
    );
    t.add(
        "show interface rx-placement",
        "show interface rx-placement — rx queues per thread and their mode",
        cli_show,
    );
}

/// The queues of `sw` that `queue` selects (all when `None`); an error naming the interface
/// or queue when there are none.
fn select(
    vm: &mut Vlib,
    sw: SwIfIndex,
    queue: Option<u16>,
) -> VnetResult<Vec<(RxDriver, RxQueueInfo)>> {
    crate::interface::check(vm, sw)?;
    let name = vm
        .ext_mut::<Interfaces>()
        .get(sw)
        .map(|i| i.name.clone())
        .unwrap_or_default();
    let mine: Vec<_> = all_queues(vm)
        .into_iter()
        .filter(|(_, q)| q.sw_if == sw)
        .collect();
    if mine.is_empty() {
        return Err(VnetError::NotSupported(format!(
            "interface `{name}' has no rx queues with selectable rx mode and placement (af_packet, af_xdp, tap and memif interfaces have them)"
        )));
    }
    let Some(n) = queue else {
        return Ok(mine);
    };
    let sel: Vec<_> = mine.into_iter().filter(|(_, q)| q.queue == n).collect();
    if sel.is_empty() {
        return Err(VnetError::NotFound(format!(
            "queue `{n}' does not exist on interface `{name}'"
        )));
    }
    Ok(sel)
}

fn queue_arg(a: &mut Args) -> Result<u16, CliError> {
    let n = a.u32("queue number")?;
    u16::try_from(n).map_err(|_| CliError::new(format!("queue `{n}' out of range")))
}

fn cli_rx_mode(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let sw = crate::cli::interface_arg(vm, a)?;
    let mut queue = None;
    let mut mode = None;
    while !a.is_empty() {
        if a.keyword("queue") {
            queue = Some(queue_arg(a)?);
        } else if let Some(m) = [RxMode::Polling, RxMode::Interrupt, RxMode::Adaptive]
            .into_iter()
            .find(|m| a.keyword(m.as_str()))
        {
            mode = Some(m);
        } else {
            a.finish()?;
        }
    }
    let mode = mode.ok_or_else(|| {
        CliError::new("missing rx mode: `polling', `interrupt' or `adaptive'".to_string())
    })?;
    set_rx_mode(vm, sw, queue, mode)?;
    Ok(String::new())
}

/// `set interface rx-mode <if> [queue <n>] polling|interrupt|adaptive`.
pub fn set_rx_mode(vm: &mut Vlib, sw: SwIfIndex, queue: Option<u16>, mode: RxMode) -> VnetResult {
    for (d, q) in select(vm, sw, queue)? {
        (d.set_mode)(vm, sw, q.queue, mode)?;
    }
    Ok(())
}

fn cli_rx_placement(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let sw = crate::cli::interface_arg(vm, a)?;
    let mut queue = None;
    let mut thread = None;
    while !a.is_empty() {
        if a.keyword("queue") {
            queue = Some(queue_arg(a)?);
        } else if a.keyword("main") {
            thread = Some(0);
        } else if a.keyword("worker") {
            thread = Some(a.u32("worker number")? as usize + 1);
        } else {
            a.finish()?;
        }
    }
    let thread =
        thread.ok_or_else(|| CliError::new("missing `worker <n>' or `main'".to_string()))?;
    set_rx_placement(vm, sw, queue, thread)?;
    Ok(String::new())
}

/// `set interface rx-placement <if> [queue <n>] worker <n>|main`: `thread` 0 is the main
/// thread, worker n is thread n + 1.
pub fn set_rx_placement(
    vm: &mut Vlib,
    sw: SwIfIndex,
    queue: Option<u16>,
    thread: usize,
) -> VnetResult {
    if thread > vm.n_workers() {
        return Err(VnetError::invalid(format!(
            "worker `{}' does not exist ({} worker thread(s); see cpu {{ workers N }})",
            thread - 1,
            vm.n_workers()
        )));
    }
    for (d, q) in select(vm, sw, queue)? {
        if q.thread != thread {
            (d.place)(vm, sw, q.queue, thread)?;
        }
    }
    Ok(())
}

/// `show interface rx-placement`, VPP's layout:
/// ```text
/// Thread 1 (sluice_wk_0):
///   node af-packet-input:
///     host-vpp1 queue 0 (polling)
/// ```
pub fn show(vm: &mut Vlib) -> String {
    let mut qs = all_queues(vm);
    qs.sort_by_key(|(d, q)| (q.thread, d.node, q.sw_if.0, q.queue));
    let mut out = String::new();
    let mut cur: Option<(usize, &str)> = None;
    for (d, q) in &qs {
        if cur.map(|c| c.0) != Some(q.thread) {
            let _ = writeln!(out, "Thread {} ({}):", q.thread, vm.thread_name(q.thread));
            cur = None;
        }
        if cur.map(|c| c.1) != Some(d.node) {
            let _ = writeln!(out, "  node {}:", d.node);
            cur = Some((q.thread, d.node));
        }
        let name = vm
            .ext_mut::<Interfaces>()
            .get(q.sw_if)
            .map(|i| i.name.clone())
            .unwrap_or_else(|| format!("sw_if_index {}", q.sw_if.0));
        let _ = writeln!(out, "    {name} queue {} ({})", q.queue, q.mode.as_str());
    }
    out
}

fn cli_show(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    Ok(show(vm))
}
