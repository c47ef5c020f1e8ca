//! `nat44`: endpoint-dependent NAT44 (VPP's nat44-ed plugin): source NAT of inside hosts
//! to pool addresses with port allocation per (remote address, remote port), static and
//! identity mappings, hairpinning, TCP/UDP/ICMP echo and ICMP errors, per-thread session
//! tables with handoff to the owning worker. Design and limits: docs/nat.md.
//!
//! ```text
//! nat44 plugin enable sessions 100000
//! nat44 add address 192.0.2.1 - 192.0.2.4
//! set interface nat44 in pg0 out pg1
//! nat44 add static mapping tcp local 10.0.0.3 80 external 192.0.2.10 8080
//! show nat44 sessions detail
//! ```
//!
//! Nodes: `nat44-ed-in2out` on the `ip4-unicast` arc of inside interfaces,
//! `nat44-ed-out2in` on the `ip4-unicast` arc of outside interfaces (both before
//! `ip4-lookup`, after the uRPF check), and the `nat44-ed-walk` process on the main thread
//! (frees expired sessions of idle threads once a second, follows interface addresses).
//!
//! Threads: a session belongs to one thread (`cpu { workers N }`: a worker; otherwise the
//! main thread). Dynamic outside ports are partitioned among the owning threads, so the
//! owner of an outside packet is the owner of its destination port; an inside packet's
//! owner is a hash of its tuple (or, for static mappings and hairpinning, the owner of the
//! mapping's outside port). A packet received elsewhere is handed to its owner's node
//! through the graph's handoff queues; nothing else is shared between threads on the data
//! path except the read-only configuration snapshot.

pub mod api;
pub mod cli;
pub mod config;
pub mod node;
pub mod ops;
pub mod packet;
pub mod session;

use config::{Control, Snapshot};
use session::Table;
use sluice_graph::{Cx, NodeFn, NodeKind, NodeRegistration, Suspend, Vlib, Wake};
use sluice_vnet::feature::FeatureDef;
use sluice_vnet::ip4::Ip4Shared;
use sluice_vnet::plugin::{Plugin, RegisterError, Registrar};
use std::any::Any;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// `nat44-ed-in2out`.
pub const IN2OUT: &str = "nat44-ed-in2out";
/// `nat44-ed-out2in`.
pub const OUT2IN: &str = "nat44-ed-out2in";
/// `nat44-ed-walk`.
pub const WALK: &str = "nat44-ed-walk";

/// Default sessions per thread (`nat44 plugin enable` without `sessions`).
pub const DEFAULT_SESSIONS: u32 = 63 * 1024;

/// Sessions the walk frees per thread per second at most (the rest on the next pass).
const WALK_BUDGET: usize = 200_000;

/// One thread's NAT state, reached by that thread's nodes once per frame and by the control
/// plane (under the thread's mutex).
pub struct Worker {
    /// The configuration in force.
    pub cfg: Arc<Snapshot>,
    /// Its sessions (empty on threads that own none).
    pub table: Table,
}

/// State shared by the nodes and the CLI (a `Vlib` extension through [`NatMain`]).
#[derive(Default)]
pub struct NatShared {
    /// Per thread; set by `init`. `None` inside while NAT is disabled.
    pub workers: OnceLock<Box<[Mutex<Option<Worker>>]>>,
    /// The configuration.
    pub ctl: Mutex<Control>,
    /// IPv4 read side (FIB, adjacencies, interface addresses), set by `init`.
    pub ip4: OnceLock<Arc<Ip4Shared>>,
}

/// Locks a mutex, taking it over if a panicking holder poisoned it.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl NatShared {
    /// The per-thread states (empty before `init`).
    pub fn workers(&self) -> &[Mutex<Option<Worker>>] {
        self.workers.get().map(|w| &w[..]).unwrap_or(&[])
    }

    /// The first IPv4 address of an interface.
    pub fn if_addr(&self, sw_if: u32) -> Option<u32> {
        let a = self.ip4.get()?.if_addr(sw_if).first();
        (a != 0).then_some(a)
    }

    /// Builds a snapshot of the current configuration.
    pub fn snapshot(&self, c: &Control) -> Snapshot {
        Snapshot::build(c, self.workers().len().max(1), |i| self.if_addr(i))
    }

    /// Hands every thread a fresh snapshot of `c`.
    pub fn publish(&self, c: &Control) {
        let s = Arc::new(self.snapshot(c));
        for w in self.workers() {
            if let Some(w) = lock(w).as_mut() {
                w.cfg = s.clone();
            }
        }
    }
}

/// The `Vlib` extension the CLI reaches the plugin through.
#[derive(Default)]
pub struct NatMain {
    /// Shared state.
    pub shared: Arc<NatShared>,
}

/// `nat44-ed-walk`: once a second, on the main thread, frees the expired sessions of every
/// thread (the nodes free a few per frame themselves; this covers idle threads) and, when an
/// interface address the configuration uses changed, publishes a new snapshot.
struct Walk {
    shared: Arc<NatShared>,
    seen: Vec<Option<u32>>,
}

impl NodeFn for Walk {
    fn process(&mut self, cx: &mut Cx, _wake: Wake) -> Suspend {
        let now = cx.now_secs();
        for w in self.shared.workers() {
            if let Some(w) = lock(w).as_mut() {
                let t = w.cfg.timeouts;
                w.table.expire(now, &t, WALK_BUDGET);
            }
        }
        // Interface-sourced addresses: republish when one moved.
        let c = lock(&self.shared.ctl);
        if c.max_sessions.is_some() {
            let now_addrs: Vec<Option<u32>> = c
                .pool
                .iter()
                .map(|p| p.src)
                .chain(c.mappings.values().map(|m| m.external))
                .filter_map(|s| match s {
                    config::AddrSrc::Interface(i) => Some(self.shared.if_addr(i)),
                    config::AddrSrc::Fixed(_) => None,
                })
                .collect();
            if now_addrs != self.seen {
                self.seen = now_addrs;
                self.shared.publish(&c);
            }
        }
        Suspend::Timeout(1.0)
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// The plugin.
pub struct Nat44Plugin;

/// This plugin, for the daemon's plugin list.
pub static PLUGIN: Nat44Plugin = Nat44Plugin;

impl Plugin for Nat44Plugin {
    fn name(&self) -> &'static str {
        "nat"
    }
    fn version(&self) -> &'static str {
        env!("CARGO_PKG_VERSION")
    }
    fn description(&self) -> &'static str {
        "Network Address Translation (NAT44 endpoint-dependent)"
    }
    fn register(&self, r: &mut Registrar) -> Result<(), RegisterError> {
        let shared = r.staged.get_mut::<NatMain>().shared.clone();
        let features = r.feature_table();
        for (name, out) in [(IN2OUT, false), (OUT2IN, true)] {
            let slot = r.feature(FeatureDef {
                arc: "ip4-unicast",
                node: name,
                runs_before: &[],
                runs_after: &["ip4-source-check-via-rx"],
                // Rewrites ports and checksums of single packets.
                takes_gso: false,
            })?;
            let (sh, f) = (shared.clone(), features.clone());
            r.node(
                NodeRegistration::new(name, NodeKind::Internal, move |_| {
                    Box::new(node::NatNode::new(out, sh.clone(), f.clone(), slot))
                })
                .nexts(node::NatNext::NAMES)
                .counters(node::NatCounter::DESCS),
            );
        }
        let sh = shared.clone();
        r.node(NodeRegistration::new(WALK, NodeKind::Process, move |_| {
            Box::new(Walk {
                shared: sh.clone(),
                seen: Vec::new(),
            })
        }));
        cli::register(r);
        api::register(&mut r.api);
        Ok(())
    }
    fn init(&self, vm: &mut Vlib) -> Result<(), String> {
        let shared = vm.ext_mut::<NatMain>().shared.clone();
        let n = vm.n_threads();
        let _ = shared
            .workers
            .set((0..n).map(|_| Mutex::new(None)).collect());
        if let Some(v4) = sluice_vnet::ip4::shared(vm) {
            let _ = shared.ip4.set(v4);
        }
        sluice_vnet::runconf::register_section(vm, "nat", cli::running_config, &[IN2OUT, OUT2IN]);
        Ok(())
    }
}
