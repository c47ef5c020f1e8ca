//! Control-plane change events for the API's subscribers (`want_ip_neighbor_events`,
//! `want_ip_route_events`): neighbours added or removed (learned, aged, configured), routes
//! added or removed. Interface events (admin, link, deletion) are found by comparing the
//! interface table with what was last sent (`crate::api`).
//!
//! Recording costs one relaxed load while nobody subscribed ([`EventLog::enabled`]); the API
//! server turns the log on when a client subscribes and drains it on every pass. Changes are
//! made on the main thread (the neighbour process nodes too), so the mutex is uncontended.

use sluice_graph::Vlib;
use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// One change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VnetEvent {
    /// A neighbour was added/updated (`added`) or removed.
    Neighbor {
        /// Interface.
        sw_if: u32,
        /// Address.
        ip: IpAddr,
        /// MAC (zero when removed).
        mac: [u8; 6],
        /// Static entry.
        is_static: bool,
        /// Added or updated (true), removed (false).
        added: bool,
    },
    /// A route appeared or disappeared in a table.
    Route {
        /// Table id.
        table_id: u32,
        /// Prefix address.
        addr: IpAddr,
        /// Prefix length.
        len: u8,
        /// Added (true) or removed (false).
        added: bool,
    },
}

/// Where changes are recorded while someone listens.
#[derive(Default, Debug)]
pub struct EventLog {
    on: AtomicBool,
    q: Mutex<VecDeque<VnetEvent>>,
}

/// Most events kept between two drains; past it the oldest are dropped (a subscriber that
/// needs a consistent view dumps again).
pub const MAX_PENDING: usize = 1 << 20;

impl EventLog {
    /// Whether changes are being recorded.
    #[inline]
    pub fn enabled(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Starts or stops recording (stopping discards what is pending).
    pub fn set_enabled(&self, on: bool) {
        self.on.store(on, Ordering::Relaxed);
        if !on {
            self.lock().clear();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<VnetEvent>> {
        match self.q.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Records `e` if enabled.
    #[inline]
    pub fn push(&self, e: VnetEvent) {
        if self.enabled() {
            let mut q = self.lock();
            if q.len() >= MAX_PENDING {
                q.pop_front();
            }
            q.push_back(e);
        }
    }

    /// Takes what was recorded.
    pub fn drain(&self) -> Vec<VnetEvent> {
        std::mem::take(&mut *self.lock()).into()
    }
}

/// The log (a `Vlib` extension; control planes keep a clone).
#[derive(Default)]
pub struct VnetEvents {
    /// The shared log.
    pub log: Arc<EventLog>,
}

/// The shared log.
pub fn log(vm: &mut Vlib) -> Arc<EventLog> {
    vm.ext_mut::<VnetEvents>().log.clone()
}

/// Records `e` if someone listens.
pub fn record(vm: &mut Vlib, e: VnetEvent) {
    vm.ext_mut::<VnetEvents>().log.push(e);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(k: u8) -> VnetEvent {
        VnetEvent::Route {
            table_id: 0,
            addr: IpAddr::from([10, 0, 0, k]),
            len: 32,
            added: true,
        }
    }

    #[test]
    fn records_only_while_enabled_and_keeps_the_newest() {
        let l = EventLog::default();
        l.push(ev(1));
        assert!(l.drain().is_empty(), "nobody listens");
        l.set_enabled(true);
        for k in 0..3 {
            l.push(ev(k));
        }
        assert_eq!(l.drain(), vec![ev(0), ev(1), ev(2)]);
        assert!(l.drain().is_empty());
        l.push(ev(9));
        l.set_enabled(false);
        assert!(l.drain().is_empty(), "stopping discards");
    }
}
