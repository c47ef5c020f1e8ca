//! Rx queues backed by one file descriptor each (af_packet sockets, tap fds): the per-thread
//! set an input node polls, and the control-plane side of `set interface rx-mode` and
//! `set interface rx-placement` for such drivers (`crate::rxq`).
//!
//! A queue lives in exactly one thread's input node. Its mode decides whether its fd is in the
//! thread's epoll (interrupt, adaptive) or not (polling). Moving a queue to another thread
//! takes it out of the old thread's set at that thread's safe point (unregistering the fd),
//! then puts it into the new thread's set (registering it there), with its read position and
//! mode: nothing is lost, packets wait in the kernel meanwhile.

use crate::error::{VnetError, VnetResult};
use crate::interface::SwIfIndex;
use crate::rxq::{RxDriver, RxQueueInfo};
use sluice_graph::rxmode::{RxMode, RxModeState, POLL_TICK_SECS};
use sluice_graph::{Cx, NodeIndex, Vlib};
use std::os::fd::RawFd;

/// A driver's rx queue.
pub trait FdQueue: Send + 'static {
    /// Interface and queue number.
    fn id(&self) -> (u32, u16);
    /// The fd that becomes readable when the queue has packets.
    fn fd(&self) -> RawFd;
}

/// A queue with its mode, as one thread holds it.
pub struct Placed<Q> {
    /// The driver's queue.
    pub q: Q,
    /// Rx mode and adaptive state.
    pub mode: RxModeState,
    registered: bool,
}

impl<Q: FdQueue> Placed<Q> {
    /// A queue in `mode` (not yet registered anywhere).
    pub fn new(q: Q, mode: RxModeState) -> Self {
        Placed {
            q,
            mode,
            registered: false,
        }
    }

    /// Registers or unregisters the fd with the running thread's epoll to match the mode.
    fn sync_irq(&mut self, cx: &mut Cx) -> VnetResult {
        let want = self.mode.wants_fd();
        if want && !self.registered {
            let (sw, q) = self.q.id();
            cx.irq_register(self.q.fd(), (sw << 8) | q as u32)
                .map_err(|e| VnetError::System(format!("epoll: {e}")))?;
        } else if !want && self.registered {
            cx.irq_unregister(self.q.fd());
        }
        self.registered = want;
        Ok(())
    }
}

/// The queues one thread's input node polls.
pub struct QueueSet<Q> {
    /// The queues, in the order they are polled.
    pub list: Vec<Placed<Q>>,
}

impl<Q> Default for QueueSet<Q> {
    fn default() -> Self {
        QueueSet { list: Vec::new() }
    }
}

impl<Q: FdQueue> QueueSet<Q> {
    /// Takes a queue in, registering its fd if its mode needs it.
    pub fn add(&mut self, cx: &mut Cx, mut p: Placed<Q>) -> VnetResult {
        p.registered = false;
        let r = p.sync_irq(cx);
        self.list.push(p);
        r
    }

    /// Gives queue `queue` of `sw_if` up, unregistering its fd.
    pub fn take(&mut self, cx: &mut Cx, sw_if: u32, queue: u16) -> Option<Placed<Q>> {
        let i = self.list.iter().position(|p| p.q.id() == (sw_if, queue))?;
        let mut p = self.list.remove(i);
        if p.registered {
            cx.irq_unregister(p.q.fd());
            p.registered = false;
        }
        Some(p)
    }

    /// Drops every queue of `sw_if` (interface deleted).
    pub fn remove_interface(&mut self, cx: &mut Cx, sw_if: u32) {
        while let Some(q) = self.list.iter().map(|p| p.q.id()).find(|id| id.0 == sw_if) {
            self.take(cx, q.0, q.1);
        }
    }

    /// Sets a queue's mode. `Ok(false)`: the queue is not on this thread.
    pub fn set_mode(
        &mut self,
        cx: &mut Cx,
        sw_if: u32,
        queue: u16,
        mode: RxMode,
    ) -> VnetResult<bool> {
        let Some(p) = self.list.iter_mut().find(|p| p.q.id() == (sw_if, queue)) else {
            return Ok(false);
        };
        p.mode.set_mode(mode);
        p.sync_irq(cx)?;
        Ok(true)
    }

    /// `NodeFn::polling` of a node polling these queues: one of them is polled now.
    pub fn polling(&self) -> bool {
        self.list.iter().any(|p| p.mode.is_polling())
    }

    /// `NodeFn::poll_interval` of a node polling these queues: a tick while one of them is in
    /// polling mode.
    pub fn poll_interval(&self) -> Option<f64> {
        self.list
            .iter()
            .any(|p| p.mode.needs_tick())
            .then_some(POLL_TICK_SECS)
    }
}

/// A driver whose input node holds a [`QueueSet`]: gives the generic rx-mode and rx-placement
/// operations access to it and to the control plane's record of where each queue is.
pub trait FdDriver: 'static {
    /// The driver's queue.
    type Queue: FdQueue;
    /// The input node's per-thread instance.
    type Node: 'static;
    /// The input node's name.
    const INPUT: &'static str;
    /// The queue set of a thread's input node.
    fn set(n: &mut Self::Node) -> &mut QueueSet<Self::Queue>;
    /// Where every queue is (control plane; the order is the `show` order).
    fn placements(vm: &mut Vlib) -> Vec<RxQueueInfo>;
    /// Records that a queue moved or changed mode.
    fn record(vm: &mut Vlib, info: RxQueueInfo);
}

/// The [`RxDriver`] of an [`FdDriver`], to register with `crate::rxq::register_driver`.
pub fn rx_driver<D: FdDriver>() -> RxDriver {
    RxDriver {
        node: D::INPUT,
        queues: D::placements,
        set_mode: set_mode::<D>,
        place: place::<D>,
    }
}

/// A queue or node is not where the control plane expected it.
fn not_on(msg: String) -> VnetError {
    VnetError::NotFound(msg)
}

/// A thread did not run the request at its safe point in time.
fn no_answer(thread: usize) -> VnetError {
    VnetError::System(format!("thread {thread} did not answer"))
}

fn input<D: FdDriver>(vm: &Vlib) -> VnetResult<NodeIndex> {
    vm.registry
        .find(D::INPUT)
        .ok_or_else(|| VnetError::System(format!("{} is not registered", D::INPUT)))
}

fn find<D: FdDriver>(vm: &mut Vlib, sw: SwIfIndex, queue: u16) -> VnetResult<RxQueueInfo> {
    D::placements(vm)
        .into_iter()
        .find(|i| i.sw_if == sw && i.queue == queue)
        .ok_or_else(|| VnetError::NotFound(format!("no rx queue {queue} on sw_if_index {}", sw.0)))
}

/// Hands a queue to `thread`'s input node (at its next safe point) and waits for it.
pub fn put<D: FdDriver>(vm: &mut Vlib, thread: usize, p: Placed<D::Queue>) -> VnetResult {
    let input = input::<D>(vm)?;
    vm.on_thread(thread, move |tg| {
        tg.with_node::<D::Node, _>(input, |n, cx| D::set(n).add(cx, p))
            .unwrap_or_else(|| Err(not_on(format!("{} does not run on that thread", D::INPUT))))
    })
    .unwrap_or_else(|| Err(no_answer(thread)))
}

fn set_mode<D: FdDriver>(vm: &mut Vlib, sw: SwIfIndex, queue: u16, mode: RxMode) -> VnetResult {
    let input = input::<D>(vm)?;
    let mut info = find::<D>(vm, sw, queue)?;
    let t = info.thread;
    let r = vm.on_thread(t, move |tg| {
        tg.with_node::<D::Node, _>(input, |n, cx| D::set(n).set_mode(cx, sw.0, queue, mode))
    });
    match r.flatten() {
        Some(Ok(true)) => {
            info.mode = mode;
            D::record(vm, info);
            Ok(())
        }
        Some(Ok(false)) => Err(not_on(format!("rx queue {queue} is not on thread {t}"))),
        Some(Err(e)) => Err(e),
        None => Err(no_answer(t)),
    }
}

fn place<D: FdDriver>(vm: &mut Vlib, sw: SwIfIndex, queue: u16, to: usize) -> VnetResult {
    let input = input::<D>(vm)?;
    let mut info = find::<D>(vm, sw, queue)?;
    let from = info.thread;
    if from == to {
        return Ok(());
    }
    let p = vm
        .on_thread(from, move |tg| {
            tg.with_node::<D::Node, _>(input, |n, cx| D::set(n).take(cx, sw.0, queue))
                .flatten()
        })
        .flatten()
        .ok_or_else(|| not_on(format!("rx queue {queue} is not on thread {from}")))?;
    put::<D>(vm, to, p)?;
    info.thread = to;
    D::record(vm, info);
    Ok(())
}

/// Removes every queue of `sw` from every thread (interface deleted), at each thread's safe
/// point.
pub fn remove_interface<D: FdDriver>(vm: &mut Vlib, sw: SwIfIndex) {
    let Ok(input) = input::<D>(vm) else {
        return;
    };
    vm.foreach_thread(move |tg| {
        tg.with_node::<D::Node, _>(input, |n, cx| D::set(n).remove_interface(cx, sw.0));
    });
}
