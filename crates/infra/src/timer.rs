//! A hierarchical hashed timer wheel (VPP `tw_timer` style) for process-node timeouts.
//!
//! Time is cut into ticks of `tick_secs`. Three wheels of 256 slots each cover 2^8, 2^16 and
//! 2^24 ticks ahead (with a 1 ms tick: 0.26 s, 65 s and 4.6 h); timers further out wait on an
//! overflow list that is re-sorted into the wheels every 2^24 ticks. A timer sits on the
//! lowest wheel whose revolution it shares with the current tick; when the current tick
//! crosses a slot boundary of a higher wheel, that slot's timers cascade down. Start and
//! cancel are O(1); advance costs O(expired + cascaded) plus one bitmap probe per 256 ticks
//! (it jumps over empty stretches, so a long idle gap is cheap).
//!
//! Every timer keeps its exact deadline, so [`TimerWheel::advance`] fires precisely the timers
//! whose deadline is `<= now` (the tick only decides which ones it has to look at), in
//! deadline order. Timers live in a slab threaded with intrusive doubly linked lists; freed
//! slots are reused, so a wheel in steady state does not allocate.

use crate::bitmap::Bitmap;

/// Slots per wheel level (`2^SLOT_BITS`).
const SLOT_BITS: u32 = 8;
const SLOTS: usize = 1 << SLOT_BITS;
const MASK: u64 = (SLOTS - 1) as u64;
/// Number of wheel levels.
const LEVELS: usize = 3;
/// List index of the overflow list (timers beyond the top wheel).
const OVERFLOW: usize = LEVELS * SLOTS;

/// Handle of a started timer. Generation-checked: once the timer has fired or been cancelled
/// the handle goes stale, and cancelling a stale handle does nothing, even if the slot was
/// reused by a newer timer.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct TimerHandle {
    index: u32,
    generation: u32,
}

struct Timer<T> {
    /// `Some` while the timer is pending.
    user: Option<T>,
    deadline: f64,
    tick: u64,
    generation: u32,
    /// The list (`level * SLOTS + slot`, or `OVERFLOW`) the timer is on while pending.
    list: usize,
    prev: Option<u32>,
    next: Option<u32>,
}

/// A hierarchical timer wheel carrying a `T` per timer.
pub struct TimerWheel<T> {
    tick: f64,
    origin: f64,
    /// The current tick: every tick before it has been fully processed; timers of this tick
    /// whose deadline had not yet come at the last advance are still pending.
    cur: u64,
    timers: Vec<Timer<T>>,
    free: Vec<u32>,
    heads: Box<[Option<u32>]>,
    /// One bit per wheel slot (not the overflow list): the slot's list is non-empty.
    occupied: Bitmap,
    live: usize,
    scratch: Vec<u32>,
}

impl<T> std::fmt::Debug for TimerWheel<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimerWheel")
            .field("tick", &self.tick)
            .field("cur", &self.cur)
            .field("pending", &self.live)
            .finish()
    }
}

impl<T> TimerWheel<T> {
    /// A wheel with ticks of `tick_secs` (sensible values are 1e-4 to 1e-2; values below 1 µs
    /// are raised to 1 µs, non-finite ones replaced by 1 ms) whose time starts at `now_secs`.
    pub fn new(tick_secs: f64, now_secs: f64) -> Self {
        let tick = if tick_secs.is_finite() {
            tick_secs.max(1e-6)
        } else {
            1e-3
        };
        TimerWheel {
            tick,
            origin: if now_secs.is_finite() { now_secs } else { 0.0 },
            cur: 0,
            timers: Vec::new(),
            free: Vec::new(),
            heads: vec![None; OVERFLOW + 1].into_boxed_slice(),
            occupied: Bitmap::new(OVERFLOW),
            live: 0,
            scratch: Vec::new(),
        }
    }

    /// The tick length in seconds.
    pub fn tick_secs(&self) -> f64 {
        self.tick
    }

    /// The tick containing time `secs` (saturating; times before the origin map to tick 0).
    fn tick_of(&self, secs: f64) -> u64 {
        let x = (secs - self.origin) / self.tick;
        if x > 0.0 {
            x as u64 // saturates at u64::MAX
        } else {
            0
        }
    }

    /// Starts a timer carrying `user` that fires `delay_secs` after `now_secs`. A delay of
    /// zero (or negative, or NaN) fires on the next [`advance`](Self::advance).
    pub fn start(&mut self, now_secs: f64, delay_secs: f64, user: T) -> TimerHandle {
        let delay = if delay_secs > 0.0 { delay_secs } else { 0.0 };
        let mut deadline = now_secs + delay;
        if deadline.is_nan() {
            deadline = self.origin + self.cur as f64 * self.tick;
        }
        let tick = self.tick_of(deadline).max(self.cur);
        let index = match self.free.pop() {
            Some(i) => {
                let t = &mut self.timers[i as usize];
                t.user = Some(user);
                t.deadline = deadline;
                t.tick = tick;
                i
            }
            None => {
                let i = u32::try_from(self.timers.len()).expect("timer slab exhausted");
                self.timers.push(Timer {
                    user: Some(user),
                    deadline,
                    tick,
                    generation: 0,
                    list: 0,
                    prev: None,
                    next: None,
                });
                i
            }
        };
        self.link(index);
        self.live += 1;
        TimerHandle {
            index,
            generation: self.timers[index as usize].generation,
        }
    }

    /// Cancels a pending timer and returns its value; `None` if the handle is stale (the
    /// timer already fired or was cancelled).
    pub fn cancel(&mut self, h: TimerHandle) -> Option<T> {
        let t = self.timers.get(h.index as usize)?;
        if t.generation != h.generation || t.user.is_none() {
            return None;
        }
        self.unlink(h.index);
        Some(self.release(h.index))
    }

    /// Whether the timer of `h` is still pending.
    pub fn is_pending(&self, h: TimerHandle) -> bool {
        self.timers
            .get(h.index as usize)
            .is_some_and(|t| t.generation == h.generation && t.user.is_some())
    }

    /// Appends to `expired` the value of every timer whose deadline is `<= now_secs`, earliest
    /// deadline first (timers with equal deadlines come in an unspecified order).
    pub fn advance(&mut self, now_secs: f64, expired: &mut Vec<T>) {
        let now_tick = self.tick_of(now_secs);
        while self.cur < now_tick {
            if self.level0_empty() {
                // Nothing due before the next cascade: jump there (or to now) directly.
                // `x > cur` always holds; checking it keeps the loop finite regardless.
                match self.next_cascade_tick() {
                    Some(x) if x > self.cur && x <= now_tick => {
                        self.cur = x;
                        self.cascade();
                        continue;
                    }
                    _ => {
                        self.cur = now_tick;
                        break;
                    }
                }
            }
            // Ticks cur..=last of this revolution end before now_tick: all their timers are due.
            let last = (now_tick - 1).min(self.cur | MASK);
            let end = (last & MASK) as usize;
            let mut s = (self.cur & MASK) as usize;
            while let Some(f) = self.occupied.next_set(s).filter(|&f| f <= end) {
                self.fire_list(f, None, expired);
                s = f + 1;
            }
            self.cur = last + 1;
            if self.cur & MASK == 0 {
                self.cascade();
            }
        }
        if self.cur == now_tick {
            // The current tick is only partly over: fire what is due, keep the rest.
            self.fire_list((self.cur & MASK) as usize, Some(now_secs), expired);
        }
    }

    /// The earliest pending deadline in seconds (exact), or `None` if no timer is pending. It
    /// may lie in the past if [`advance`](Self::advance) has not been called since it passed.
    pub fn next_deadline(&self) -> Option<f64> {
        // Lists in order level 0 slots, level 1 slots, level 2 slots, overflow hold strictly
        // later ticks, so the earliest timer is on the first non-empty list.
        let list = self
            .occupied
            .first_set()
            .or_else(|| self.heads[OVERFLOW].map(|_| OVERFLOW))?;
        let mut it = self.heads[list];
        let mut min = f64::INFINITY;
        while let Some(i) = it {
            let t = &self.timers[i as usize];
            min = min.min(t.deadline);
            it = t.next;
        }
        Some(min)
    }

    /// Number of pending timers.
    pub fn len(&self) -> usize {
        self.live
    }

    /// Whether no timer is pending.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    fn level0_empty(&self) -> bool {
        self.occupied.next_set(0).is_none_or(|s| s >= SLOTS)
    }

    /// The list a timer of tick `t` belongs on, given the current tick: the lowest level whose
    /// revolution (the bits above that level's slot index) `t` shares with `cur`.
    fn list_for(&self, t: u64) -> usize {
        for level in 0..LEVELS {
            let shift = SLOT_BITS * (level as u32 + 1);
            if t >> shift == self.cur >> shift {
                let slot = (t >> (SLOT_BITS * level as u32)) & MASK;
                return level * SLOTS + slot as usize;
            }
        }
        OVERFLOW
    }

    /// The first tick after `cur` at which a cascade brings timers down, assuming level 0 is
    /// empty; `None` if no timer is pending.
    fn next_cascade_tick(&self) -> Option<u64> {
        let c = self.cur;
        if let Some(s) = self.occupied.next_set(SLOTS) {
            let s = s as u64;
            return Some(if s < 2 * SLOTS as u64 {
                (c >> 16 << 16) | ((s - SLOTS as u64) << 8)
            } else {
                (c >> 24 << 24) | ((s - 2 * SLOTS as u64) << 16)
            });
        }
        self.heads[OVERFLOW]?;
        ((c >> 24) + 1).checked_mul(1 << 24)
    }

    /// `cur` just reached a level-0 revolution boundary: bring down the higher-level slots
    /// (and the overflow list) that now share `cur`'s revolution, highest first.
    fn cascade(&mut self) {
        let c = self.cur;
        if c & 0xff_ffff == 0 {
            self.relink_list(OVERFLOW);
        }
        if c & 0xffff == 0 {
            self.relink_list(2 * SLOTS + ((c >> 16) & MASK) as usize);
        }
        self.relink_list(SLOTS + ((c >> 8) & MASK) as usize);
    }

    fn relink_list(&mut self, list: usize) {
        let mut it = self.heads[list].take();
        if list < OVERFLOW {
            self.occupied.clear(list);
        }
        while let Some(i) = it {
            it = self.timers[i as usize].next;
            self.link(i);
        }
    }

    /// Pushes timer `i` on the list its tick belongs to.
    fn link(&mut self, i: u32) {
        let list = self.list_for(self.timers[i as usize].tick);
        let head = self.heads[list];
        if let Some(h) = head {
            self.timers[h as usize].prev = Some(i);
        }
        let t = &mut self.timers[i as usize];
        t.list = list;
        t.prev = None;
        t.next = head;
        self.heads[list] = Some(i);
        if list < OVERFLOW {
            self.occupied.set(list);
        }
    }

    fn unlink(&mut self, i: u32) {
        let (list, prev, next) = {
            let t = &self.timers[i as usize];
            (t.list, t.prev, t.next)
        };
        match prev {
            Some(p) => self.timers[p as usize].next = next,
            None => self.heads[list] = next,
        }
        if let Some(n) = next {
            self.timers[n as usize].prev = prev;
        }
        if list < OVERFLOW && self.heads[list].is_none() {
            self.occupied.clear(list);
        }
    }

    /// Frees the (already unlinked) pending timer `i` and returns its value.
    fn release(&mut self, i: u32) -> T {
        let t = &mut self.timers[i as usize];
        t.generation = t.generation.wrapping_add(1);
        t.prev = None;
        t.next = None;
        self.free.push(i);
        self.live -= 1;
        t.user.take().expect("released timer was pending")
    }

    /// Fires the timers of `list` (those with deadline `<= now`, or all if `now` is `None`) in
    /// deadline order.
    fn fire_list(&mut self, list: usize, now: Option<f64>, expired: &mut Vec<T>) {
        let mut due = std::mem::take(&mut self.scratch);
        due.clear();
        let mut it = self.heads[list];
        while let Some(i) = it {
            let t = &self.timers[i as usize];
            if now.is_none_or(|n| t.deadline <= n) {
                due.push(i);
            }
            it = t.next;
        }
        for &i in &due {
            self.unlink(i);
        }
        let timers = &self.timers;
        due.sort_by(|&a, &b| {
            timers[a as usize]
                .deadline
                .total_cmp(&timers[b as usize].deadline)
        });
        for &i in &due {
            expired.push(self.release(i));
        }
        self.scratch = due;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fires_in_deadline_order_and_cancels() {
        let mut w = TimerWheel::new(0.001, 0.0);
        let a = w.start(0.0, 0.010, "a");
        w.start(0.0, 0.002, "b");
        w.start(0.0, 5.0, "far"); // many level-0 revolutions away
        w.start(0.0, 0.0, "now");
        w.start(0.0, 0.0021, "b2"); // same tick as "b", later deadline
        assert_eq!(w.len(), 5);
        assert_eq!(w.next_deadline(), Some(0.0));
        let mut e = Vec::new();
        w.advance(0.0, &mut e);
        assert_eq!(e, vec!["now"], "delay 0 fires on the next advance");
        assert!(w.is_pending(a));
        assert_eq!(w.cancel(a), Some("a"));
        assert!(!w.is_pending(a));
        assert_eq!(w.cancel(a), None, "stale handle is harmless");
        assert_eq!(w.next_deadline(), Some(0.002));
        e.clear();
        w.advance(0.00205, &mut e);
        assert_eq!(e, vec!["b"], "b2 is in the same tick but not yet due");
        e.clear();
        w.advance(1.0, &mut e);
        assert_eq!(e, vec!["b2"]);
        assert_eq!(w.len(), 1);
        assert_eq!(w.next_deadline(), Some(5.0));
        e.clear();
        w.advance(4.999, &mut e);
        assert!(e.is_empty());
        w.advance(5.0, &mut e);
        assert_eq!(e, vec!["far"]);
        assert!(w.is_empty());
        assert_eq!(w.next_deadline(), None);
    }

    #[test]
    fn stale_handle_does_not_cancel_the_slot_reuser() {
        let mut w = TimerWheel::new(0.001, 0.0);
        let old = w.start(0.0, 0.001, 1);
        let mut e = Vec::new();
        w.advance(0.01, &mut e);
        assert_eq!(e, vec![1]);
        let new = w.start(0.01, 0.001, 2);
        assert_ne!(old, new);
        assert_eq!(w.cancel(old), None);
        assert!(w.is_pending(new));
        assert_eq!(w.cancel(new), Some(2));
        assert_eq!(w.cancel(new), None);
        assert!(w.is_empty());
    }

    #[test]
    fn delays_beyond_the_top_wheel_use_the_overflow_list() {
        // 1 ms ticks: the wheels cover 2^24 ms (~4.6 h); a 10-day timer must overflow.
        let mut w = TimerWheel::new(0.001, 100.0);
        let day = 86_400.0;
        let far = w.start(100.0, 10.0 * day, "10d");
        w.start(100.0, 3.0 * 3600.0, "3h");
        let mut e = Vec::new();
        w.advance(100.0 + 3.0 * 3600.0 - 0.0005, &mut e);
        assert!(e.is_empty());
        w.advance(100.0 + 3.0 * 3600.0, &mut e);
        assert_eq!(e, vec!["3h"]);
        assert_eq!(w.next_deadline(), Some(100.0 + 10.0 * day));
        e.clear();
        w.advance(100.0 + 10.0 * day - 0.001, &mut e);
        assert!(e.is_empty(), "must not fire early");
        assert!(w.is_pending(far));
        w.advance(100.0 + 10.0 * day, &mut e);
        assert_eq!(e, vec!["10d"]);
    }

    #[test]
    fn start_in_the_past_fires_next_advance() {
        let mut w = TimerWheel::new(0.01, 0.0);
        let mut e = Vec::new();
        w.advance(5.0, &mut e);
        // A caller with a stale `now` (earlier than the last advance).
        w.start(1.0, 0.5, 'x');
        assert_eq!(w.next_deadline(), Some(1.5));
        w.advance(5.0, &mut e);
        assert_eq!(e, vec!['x']);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Start(f64),
        Cancel(usize),
        Advance(f64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => prop_oneof![0.0f64..0.05, 0.0f64..2.0, 0.0f64..200.0, 0.0f64..40_000.0]
                .prop_map(Op::Start),
            2 => any::<usize>().prop_map(Op::Cancel),
            2 => prop_oneof![0.0f64..0.01, 0.0f64..1.0, 0.0f64..100.0, 0.0f64..20_000.0]
                .prop_map(Op::Advance),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn matches_a_sorted_list_oracle(
            tick in prop_oneof![Just(1e-4), Just(1e-3), Just(1e-2)],
            ops in proptest::collection::vec(op(), 500..3000),
        ) {
            let mut w = TimerWheel::new(tick, 10.0);
            let mut now = 10.0;
            // Oracle: pending (deadline, id).
            let mut oracle: Vec<(f64, usize)> = Vec::new();
            let mut handles: Vec<TimerHandle> = Vec::new();
            let mut got = Vec::new();
            for op in ops {
                match op {
                    Op::Start(d) => {
                        let id = handles.len();
                        handles.push(w.start(now, d, id));
                        oracle.push((now + d, id));
                    }
                    Op::Cancel(k) if !handles.is_empty() => {
                        let id = k % handles.len();
                        let want = oracle.iter().position(|&(_, j)| j == id).map(|p| oracle.remove(p).1);
                        prop_assert_eq!(w.cancel(handles[id]), want);
                    }
                    Op::Cancel(_) => {}
                    Op::Advance(dt) => {
                        now += dt;
                        got.clear();
                        w.advance(now, &mut got);
                        let mut due: Vec<(f64, usize)> =
                            oracle.iter().copied().filter(|&(d, _)| d <= now).collect();
                        due.sort_by(|a, b| a.0.total_cmp(&b.0));
                        oracle.retain(|&(d, _)| d > now);
                        let deadline_of = |id: usize| due.iter().find(|&&(_, j)| j == id).map(|p| p.0);
                        let got_deadlines: Vec<Option<f64>> = got.iter().map(|&id| deadline_of(id)).collect();
                        let want_deadlines: Vec<Option<f64>> = due.iter().map(|p| Some(p.0)).collect();
                        prop_assert_eq!(got_deadlines, want_deadlines, "fired set/order at now={}", now);
                    }
                }
                prop_assert_eq!(w.len(), oracle.len());
                let min = oracle.iter().map(|p| p.0).min_by(|a, b| a.total_cmp(b));
                prop_assert_eq!(w.next_deadline(), min);
            }
        }
    }
}
