//! Sequence tracking for one stream on one thread: reordering and duplicates with a sliding
//! bitmap of the last [`WINDOW`] sequence numbers below the highest seen.
//!
//! - a number above the highest seen moves the window up (numbers skipped are not lost yet:
//!   they may arrive late; loss is computed from counts, `tx - unique rx`);
//! - a number below the highest seen is *reordered*; if its bit is already set it is a
//!   *duplicate* instead;
//! - a number older than the window is counted as reordered (it cannot be checked for
//!   duplication any more).

/// Sequence numbers remembered below the highest seen.
pub const WINDOW: u64 = 4096;
const WORDS: usize = (WINDOW / 64) as usize;

/// What one received sequence number was.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Higher than every number seen before.
    InOrder,
    /// Lower than the highest seen, first time.
    Reordered,
    /// Already seen (within the window).
    Duplicate,
}

/// The tracker.
#[derive(Clone, Debug)]
pub struct SeqTracker {
    highest: Option<u64>,
    bits: [u64; WORDS],
}

impl Default for SeqTracker {
    fn default() -> Self {
        SeqTracker {
            highest: None,
            bits: [0; WORDS],
        }
    }
}

impl SeqTracker {
    #[inline(always)]
    fn slot(seq: u64) -> (usize, u64) {
        (((seq / 64) % WORDS as u64) as usize, 1u64 << (seq % 64))
    }

    /// Records `seq` and says what it was.
    #[inline]
    pub fn record(&mut self, seq: u64) -> Seen {
        let Some(hi) = self.highest else {
            self.highest = Some(seq);
            let (w, m) = Self::slot(seq);
            self.bits[w] |= m;
            return Seen::InOrder;
        };
        if seq > hi {
            self.clear_range(hi + 1, seq);
            let (w, m) = Self::slot(seq);
            self.bits[w] |= m;
            self.highest = Some(seq);
            return Seen::InOrder;
        }
        if hi - seq >= WINDOW {
            return Seen::Reordered;
        }
        let (w, m) = Self::slot(seq);
        if self.bits[w] & m != 0 {
            return Seen::Duplicate;
        }
        self.bits[w] |= m;
        Seen::Reordered
    }

    /// Clears the bits of `from..=to` (the window moving up).
    fn clear_range(&mut self, from: u64, to: u64) {
        if to - from >= WINDOW {
            self.bits = [0; WORDS];
            return;
        }
        let mut k = from;
        while k <= to {
            let (w, m) = Self::slot(k);
            if k % 64 == 0 && to - k >= 63 {
                self.bits[w] = 0;
                k += 64;
            } else {
                self.bits[w] &= !m;
                k += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(seqs: &[u64]) -> (usize, usize, usize) {
        let mut t = SeqTracker::default();
        let mut r = (0, 0, 0);
        for &s in seqs {
            match t.record(s) {
                Seen::InOrder => r.0 += 1,
                Seen::Reordered => r.1 += 1,
                Seen::Duplicate => r.2 += 1,
            }
        }
        r
    }

    #[test]
    fn in_order_with_gaps_is_neither_reordered_nor_duplicate() {
        assert_eq!(run(&[0, 1, 2, 5, 6, 100, 10_000, 1 << 40]), (8, 0, 0));
    }

    #[test]
    fn late_packets_are_reordered_and_repeats_are_duplicates() {
        // 3 arrives after 4 (reordered), 4 and 3 again (duplicates), 0 again (duplicate).
        assert_eq!(run(&[0, 1, 2, 4, 3, 4, 3, 0, 5]), (5, 1, 3));
        // Repeating the highest is a duplicate.
        assert_eq!(run(&[7, 7, 7]), (1, 0, 2));
    }

    #[test]
    fn window_edges() {
        let mut t = SeqTracker::default();
        t.record(10);
        t.record(10 + WINDOW); // window now 11 ..= 10 + WINDOW
        assert_eq!(t.record(10), Seen::Reordered, "older than the window");
        assert_eq!(t.record(11), Seen::Reordered);
        assert_eq!(t.record(11), Seen::Duplicate);
        // Moving up by less than the window keeps the bits still inside it.
        let mut t = SeqTracker::default();
        for s in 0..200 {
            t.record(s);
        }
        t.record(300);
        assert_eq!(t.record(150), Seen::Duplicate);
        assert_eq!(t.record(250), Seen::Reordered);
        // Bits above the old highest were cleared, even across wrapped word positions.
        let mut t = SeqTracker::default();
        for s in 0..WINDOW {
            t.record(s);
        }
        t.record(WINDOW + 1000);
        for s in WINDOW..WINDOW + 1000 {
            assert_eq!(t.record(s), Seen::Reordered, "{s}");
        }
        assert_eq!(t.record(WINDOW + 500), Seen::Duplicate);
        assert_eq!(t.record(1500), Seen::Duplicate);
        assert_eq!(t.record(999), Seen::Reordered, "just out of the window");
    }

    #[test]
    fn matches_a_set_oracle_inside_the_window() {
        use std::collections::HashSet;
        let mut t = SeqTracker::default();
        let mut seen = HashSet::new();
        let mut hi = 0u64;
        let mut x = 12345u64;
        for i in 0..200_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Mostly increasing with jitter back up to 3000 and repeats.
            let s = (i + 3000).saturating_sub((x >> 33) % 3000);
            let r = t.record(s);
            let want = if seen.contains(&s) {
                Seen::Duplicate
            } else if i == 0 || s > hi {
                Seen::InOrder
            } else {
                Seen::Reordered
            };
            assert_eq!(r, want, "packet {i} seq {s} hi {hi}");
            seen.insert(s);
            hi = hi.max(s);
        }
    }
}
