//! A hashed timer wheel (VPP tw_timer style) for process-node timeouts.
//!
//! Timers live in a slab (freed slots are reused: no allocation per timer in steady state) and
//! are linked from the wheel slot of their deadline tick. Timers further out than one
//! revolution stay in their slot until their deadline comes round.

/// Handle of a started timer; generation-checked, so a stale handle is harmless.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TimerHandle(u32, u32);

const SLOTS: usize = 1024;

struct Entry<T> {
    deadline: f64,
    user: T,
    slot: usize,
}

/// The wheel.
pub struct TimerWheel<T> {
    tick: f64,
    slab: Vec<Option<Entry<T>>>,
    gens: Vec<u32>,
    free: Vec<u32>,
    slots: Vec<Vec<u32>>,
    next_scan: u64,
    live: usize,
}

impl<T> TimerWheel<T> {
    /// A wheel with ticks of `tick_secs`, starting at `now_secs`.
    pub fn new(tick_secs: f64, now_secs: f64) -> Self {
        let tick = tick_secs.max(1e-6);
        TimerWheel {
            tick,
            slab: Vec::new(),
            gens: Vec::new(),
            free: Vec::new(),
            slots: (0..SLOTS).map(|_| Vec::new()).collect(),
            next_scan: (now_secs.max(0.0) / tick) as u64,
            live: 0,
        }
    }

    fn tick_of(&self, secs: f64) -> u64 {
        (secs.max(0.0) / self.tick) as u64
    }

    /// Starts a timer firing `delay_secs` after `now_secs`.
    pub fn start(&mut self, now_secs: f64, delay_secs: f64, user: T) -> TimerHandle {
        let deadline = now_secs + delay_secs.max(0.0);
        let t = self.tick_of(deadline).max(self.next_scan);
        let slot = (t % SLOTS as u64) as usize;
        let id = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slab.push(None);
                self.gens.push(0);
                (self.slab.len() - 1) as u32
            }
        };
        self.slab[id as usize] = Some(Entry {
            deadline,
            user,
            slot,
        });
        self.slots[slot].push(id);
        self.live += 1;
        TimerHandle(id, self.gens[id as usize])
    }

    fn release(&mut self, id: u32) -> Option<T> {
        let e = self.slab.get_mut(id as usize)?.take()?;
        self.gens[id as usize] = self.gens[id as usize].wrapping_add(1);
        self.free.push(id);
        self.live -= 1;
        Some(e.user)
    }

    /// Cancels a timer; `None` if it already fired or was cancelled.
    pub fn cancel(&mut self, h: TimerHandle) -> Option<T> {
        if self.gens.get(h.0 as usize) != Some(&h.1) {
            return None;
        }
        let slot = self.slab.get(h.0 as usize)?.as_ref()?.slot;
        self.slots[slot].retain(|&i| i != h.0);
        self.release(h.0)
    }

    /// Moves every timer whose deadline is `<= now_secs` into `expired`, earliest first.
    pub fn advance(&mut self, now_secs: f64, expired: &mut Vec<T>) {
        let now_tick = self.tick_of(now_secs);
        if now_tick < self.next_scan {
            return;
        }
        let span = (now_tick - self.next_scan + 1).min(SLOTS as u64);
        let mut fired: Vec<(f64, u32)> = Vec::new();
        for k in 0..span {
            let slot = ((self.next_scan + k) % SLOTS as u64) as usize;
            let slab = &self.slab;
            self.slots[slot].retain(|&id| match &slab[id as usize] {
                Some(e) if e.deadline <= now_secs => {
                    fired.push((e.deadline, id));
                    false
                }
                Some(_) => true,
                None => false,
            });
        }
        // Rescan the current tick next time: timers due later in this tick stay there.
        self.next_scan = now_tick;
        fired.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal));
        for (_, id) in fired {
            if let Some(u) = self.release(id) {
                expired.push(u);
            }
        }
    }

    /// The earliest pending deadline.
    pub fn next_deadline(&self) -> Option<f64> {
        self.slab
            .iter()
            .flatten()
            .map(|e| e.deadline)
            .min_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal))
    }

    /// Pending timers.
    pub fn len(&self) -> usize {
        self.live
    }

    /// No pending timer.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_in_order_and_cancels() {
        let mut w = TimerWheel::new(0.001, 0.0);
        let a = w.start(0.0, 0.010, "a");
        w.start(0.0, 0.002, "b");
        w.start(0.0, 5.0, "far"); // many revolutions away
        w.start(0.0, 0.0, "now");
        let mut e = Vec::new();
        w.advance(0.0, &mut e);
        assert_eq!(e, vec!["now"]);
        assert_eq!(w.cancel(a), Some("a"));
        assert_eq!(w.cancel(a), None, "stale handle is harmless");
        e.clear();
        w.advance(1.0, &mut e);
        assert_eq!(e, vec!["b"]);
        assert_eq!(w.len(), 1);
        assert_eq!(w.next_deadline(), Some(5.0));
        e.clear();
        w.advance(4.999, &mut e);
        assert!(e.is_empty());
        w.advance(5.0, &mut e);
        assert_eq!(e, vec!["far"]);
        assert!(w.is_empty());
    }

    proptest::proptest! {
        #[test]
        fn matches_a_sorted_list_oracle(
            delays in proptest::collection::vec(0.0f64..3.0, 1..200),
            steps in proptest::collection::vec(0.0f64..0.5, 1..40),
            cancel_every in 2usize..7,
        ) {
            let mut w = TimerWheel::new(0.001, 0.0);
            let mut oracle: Vec<(f64, usize)> = Vec::new();
            let mut handles = Vec::new();
            for (i, d) in delays.iter().enumerate() {
                handles.push(w.start(0.0, *d, i));
                oracle.push((*d, i));
            }
            for (i, h) in handles.iter().enumerate() {
                if i % cancel_every == 0 {
                    proptest::prop_assert_eq!(w.cancel(*h), Some(i));
                    oracle.retain(|&(_, j)| j != i);
                }
            }
            let mut now = 0.0;
            for s in steps {
                now += s;
                let mut got = Vec::new();
                w.advance(now, &mut got);
                let mut due: Vec<(f64, usize)> = oracle.iter().copied().filter(|&(d, _)| d <= now).collect();
                due.sort_by(|a, b| a.partial_cmp(b).unwrap());
                oracle.retain(|&(d, _)| d > now);
                let mut got_sorted = got.clone();
                got_sorted.sort();
                let mut want: Vec<usize> = due.iter().map(|&(_, i)| i).collect();
                want.sort();
                proptest::prop_assert_eq!(got_sorted, want);
                proptest::prop_assert_eq!(w.len(), oracle.len());
            }
        }
    }
}
