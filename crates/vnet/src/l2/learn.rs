//! `l2-learn-process` (process, main thread): applies learning events every 10 ms, ages
//! dynamic entries once a second (a scan of the FIB, skipped while no bridge domain has a
//! mac-age).
//! - uses: no buffers (reads the (MAC, bridge domain, rx interface) events `l2-input`
//!   queues in the shared learn list; a static entry is never overridden).
//! - sets: the L2 FIB entries (learned: the rx interface and the time; aged: removed).
//! - next: none (a process: no frames, no next arcs).
//! - counters: `learned` (info: MACs learned or refreshed), `aged` (info: MACs aged out).

use super::{lock, value, L2Control, STATIC};
use sluice_graph::{Cx, NodeFn, Suspend, Wake};
use std::any::Any;
use std::sync::{Arc, Mutex};

impl L2Control {
    pub(super) fn apply_learned(&mut self, now: f64) -> usize {
        let Some(ep) = self.epochs.clone() else {
            return 0;
        };
        let mut ev = std::mem::take(&mut self.learn_spare);
        match self.shared.learned.lock() {
            Ok(mut g) => std::mem::swap(&mut *g, &mut ev),
            Err(p) => std::mem::swap(&mut *p.into_inner(), &mut ev),
        }
        let n = ev.len();
        let stamp = (now - self.started).max(0.0) as u32;
        for &(k, rx) in &ev {
            // A static entry is kept; one hash of the key per event.
            let _ = self
                .fib
                .insert_unless(&ep, k, value(rx, false, stamp), |v| v & STATIC != 0);
        }
        self.fib.reclaim(&ep);
        ev.clear();
        self.learn_spare = ev;
        n
    }

    /// Removes dynamic entries older than their bridge domain's `mac-age` at `now` (of the
    /// bridge domain `only`, or all); returns how many.
    pub(super) fn age(&mut self, now: f64, only: Option<u16>) -> usize {
        let Some(ep) = self.epochs.clone() else {
            return 0;
        };
        // No bridge domain (of those asked) ages its MACs: no scan of the whole FIB, which
        // with 1M entries costs about 55M instructions on the main thread every second.
        if !self
            .bds
            .iter()
            .any(|(&bd, b)| b.mac_age > 0 && only.is_none_or(|o| o == bd))
        {
            return 0;
        }
        let t = (now - self.started).max(0.0) as u32;
        let old: Vec<u64> = self
            .fib
            .iter()
            .filter(|&(k, v)| {
                let bd = (k >> 48) as u16;
                let age = self.bds.get(&bd).map(|b| b.mac_age).unwrap_or(0);
                only.is_none_or(|o| o == bd)
                    && v & STATIC == 0
                    && age > 0
                    && t.saturating_sub((v >> 40) as u32 & 0xff_ffff) >= age * 60
            })
            .map(|(k, _)| k)
            .collect();
        for k in &old {
            self.fib.remove(&ep, *k);
        }
        old.len()
    }
}

sluice_graph::counters! {
    /// `l2-learn-process`'s counters.
    pub enum LearnCounter {
        /// MACs learned or refreshed.
        Learned => info("learned", "MACs learned or refreshed"),
        /// MACs aged out.
        Aged => info("aged", "MACs aged out"),
    }
}

/// `l2-learn-process`: learning and aging on the main thread.
pub struct LearnProcess {
    pub(super) ctl: Arc<Mutex<L2Control>>,
    pub(super) last_age: f64,
}

impl NodeFn for LearnProcess {
    fn process(&mut self, cx: &mut Cx, _wake: Wake) -> Suspend {
        let now = cx.now_secs();
        let mut c = lock(&self.ctl);
        let n = c.apply_learned(now);
        cx.count(LearnCounter::Learned, n as u64);
        if now - self.last_age >= 1.0 {
            self.last_age = now;
            let aged = c.age(now, None);
            cx.count(LearnCounter::Aged, aged as u64);
        }
        Suspend::Timeout(0.01)
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::super::{default_bd, key, value, L2Control, L2Shared};
    use sluice_infra::bihash::Bihash;
    use sluice_infra::epoch::Epochs;
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    /// An L2 control with an empty FIB and no bridge domain, started at 0 s.
    fn control() -> (L2Control, Arc<L2Shared>, Arc<Epochs>) {
        let ep = Arc::new(Epochs::new(1));
        let fib = Bihash::new();
        let shared = Arc::new(L2Shared {
            fib: fib.table().clone(),
            learned: Mutex::new(Vec::new()),
        });
        let c = L2Control {
            fib,
            shared: shared.clone(),
            epochs: Some(ep.clone()),
            bds: BTreeMap::new(),
            started: 0.0,
            learn_spare: Vec::new(),
        };
        (c, shared, ep)
    }

    #[test]
    fn apply_learned_keeps_static_updates_moved_and_adds_new() {
        let (mut c, shared, ep) = control();
        let (stat, moved, new) = (
            key(&[2, 0, 0, 0, 0, 1], 1),
            key(&[2, 0, 0, 0, 0, 2], 1),
            key(&[2, 0, 0, 0, 0, 3], 1),
        );
        c.fib.insert(&ep, stat, value(5, true, 0)).unwrap();
        c.fib.insert(&ep, moved, value(5, false, 0)).unwrap();
        // Each MAC seen on interface 7 at t = 3 s.
        shared
            .learned
            .lock()
            .unwrap()
            .extend([(stat, 7), (moved, 7), (new, 7)]);
        assert_eq!(c.apply_learned(3.0), 3);
        assert_eq!(c.fib.get(stat), Some(value(5, true, 0)), "static kept");
        assert_eq!(
            c.fib.get(moved),
            Some(value(7, false, 3)),
            "moved: rx and time updated"
        );
        assert_eq!(c.fib.get(new), Some(value(7, false, 3)), "absent: learned");
        assert_eq!(c.fib.len(), 3);
        assert!(shared.learned.lock().unwrap().is_empty());
    }

    /// Aging skips the FIB scan while no bridge domain (of those asked) has a mac-age, and
    /// scans again once one has: a dynamic entry 10 minutes old is kept, then aged out
    /// when its bridge domain gets a 1-minute mac-age; a static entry stays.
    #[test]
    fn aging_waits_for_a_mac_age_then_removes_old_dynamic_entries() {
        let (mut c, _, ep) = control();
        let (dynamic, stat) = (key(&[2, 0, 0, 0, 0, 1], 1), key(&[2, 0, 0, 0, 0, 2], 1));
        c.fib.insert(&ep, dynamic, value(5, false, 0)).unwrap();
        c.fib.insert(&ep, stat, value(5, true, 0)).unwrap();
        c.bds.insert(1, default_bd());
        c.bds.insert(2, default_bd());
        assert_eq!(c.age(600.0, None), 0, "no mac-age anywhere");
        c.bds.get_mut(&2).unwrap().mac_age = 1;
        assert_eq!(
            c.age(600.0, Some(1)),
            0,
            "only bridge domain 1 asked: no mac-age"
        );
        assert_eq!(c.fib.get(dynamic), Some(value(5, false, 0)), "kept");
        c.bds.get_mut(&1).unwrap().mac_age = 1;
        assert_eq!(c.age(30.0, None), 0, "younger than its mac-age");
        assert_eq!(c.age(600.0, None), 1);
        assert_eq!(c.fib.get(dynamic), None, "aged out");
        assert_eq!(c.fib.get(stat), Some(value(5, true, 0)), "static kept");
    }
}
