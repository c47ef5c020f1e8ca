//! `l2-learn-process` (process, main thread): applies learning events every 10 ms, ages
//! dynamic entries once a second.
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
