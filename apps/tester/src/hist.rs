//! Latency histogram with log-linear buckets (HDR-histogram style), mergeable across threads.
//!
//! Values (nanoseconds) below 256 have one bucket each (exact). Above, every power of two
//! `[2^m, 2^(m+1))` is cut into 128 equal sub-buckets of width `2^(m-7)`, so a bucket's width
//! is at most 1/128 (0.78%) of its lower bound, and the midpoint this module reports for a
//! percentile is within 0.4% of any value in the bucket. The range ends at 10 s; larger values
//! land in the last bucket (and still count in min/max/avg). 3,478 buckets, 27 KiB.

/// Values below this have a bucket each.
const LINEAR: u64 = 256;
/// log2 of the sub-buckets per power of two above [`LINEAR`].
const SUB_BITS: u32 = 7;
const SUB: u64 = 1 << SUB_BITS;
/// Largest value with its own bucket range (10 s in nanoseconds).
pub const MAX_NS: u64 = 10_000_000_000;
/// log2 of [`LINEAR`].
const LINEAR_BITS: u32 = 8;
/// Number of buckets.
pub const BUCKETS: usize = bucket_index(MAX_NS) + 1;

/// The scheme as `show tester json` names it.
pub const SCHEME: &str =
    "log-linear: 1 ns buckets below 256 ns, then 128 per power of two (width <= 1/128 of the lower bound), 0 .. 10 s";

/// Bucket of value `v` (values above [`MAX_NS`] map to the last bucket).
#[inline(always)]
pub const fn bucket_index(v: u64) -> usize {
    let v = if v > MAX_NS { MAX_NS } else { v };
    if v < LINEAR {
        return v as usize;
    }
    let m = 63 - v.leading_zeros(); // >= 8
    let sub = (v >> (m - SUB_BITS)) - SUB; // 0..128
    (LINEAR + (m - LINEAR_BITS) as u64 * SUB + sub) as usize
}

/// Smallest value of bucket `i`.
pub const fn bucket_lower(i: usize) -> u64 {
    let i = i as u64;
    if i < LINEAR {
        return i;
    }
    let k = i - LINEAR;
    let m = (k / SUB) as u32 + LINEAR_BITS;
    let sub = k % SUB;
    (SUB + sub) << (m - SUB_BITS)
}

/// One past the largest value of bucket `i`.
pub const fn bucket_upper(i: usize) -> u64 {
    let i = i as u64;
    if i < LINEAR {
        return i + 1;
    }
    let m = ((i - LINEAR) / SUB) as u32 + LINEAR_BITS;
    bucket_lower(i as usize) + (1 << (m - SUB_BITS))
}

/// A latency histogram plus exact count, sum, min and max.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; BUCKETS],
            total: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }
}

/// Summary statistics of a histogram (None when it is empty).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Summary {
    /// Smallest value recorded (exact).
    pub min: u64,
    /// Mean (exact).
    pub avg: f64,
    /// Largest value recorded (exact).
    pub max: u64,
    /// Percentiles 50, 90, 99, 99.9 (bucket midpoints clamped to min..max).
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
}

impl Histogram {
    /// Records one value.
    #[inline(always)]
    pub fn record(&mut self, v: u64) {
        if let Some(c) = self.counts.get_mut(bucket_index(v)) {
            *c += 1;
        }
        self.total += 1;
        self.sum += v as u128;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    /// Adds every value of `o` (per-thread histograms merged at `show`).
    pub fn merge(&mut self, o: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(o.counts.iter()) {
            *a += b;
        }
        self.total += o.total;
        self.sum += o.sum;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.counts.iter_mut().for_each(|c| *c = 0);
        self.total = 0;
        self.sum = 0;
        self.min = u64::MAX;
        self.max = 0;
    }

    /// Number of values recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The value at quantile `q` (0..=1): the midpoint of the bucket holding the
    /// `ceil(q * count)`-th smallest value, clamped to the exact min and max.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (lo, hi) = (bucket_lower(i), bucket_upper(i));
                let mid = lo + (hi - 1 - lo) / 2;
                return Some(mid.clamp(self.min, self.max));
            }
        }
        Some(self.max)
    }

    /// Min, mean, max and the percentiles `show tester` prints.
    pub fn summary(&self) -> Option<Summary> {
        if self.total == 0 {
            return None;
        }
        Some(Summary {
            min: self.min,
            avg: self.sum as f64 / self.total as f64,
            max: self.max,
            p50: self.quantile(0.5)?,
            p90: self.quantile(0.9)?,
            p99: self.quantile(0.99)?,
            p999: self.quantile(0.999)?,
        })
    }

    /// Non-empty buckets as (lower bound in ns, count), in increasing order.
    pub fn nonzero(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(|(i, &c)| (bucket_lower(i), c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn buckets_tile_the_range() {
        assert_eq!(BUCKETS, 3478);
        for i in 0..BUCKETS - 1 {
            assert_eq!(bucket_upper(i), bucket_lower(i + 1), "bucket {i}");
            assert_eq!(bucket_index(bucket_lower(i)), i);
            assert_eq!(bucket_index(bucket_upper(i) - 1), i);
        }
        assert_eq!(bucket_index(0), 0);
        assert_eq!(bucket_index(255), 255);
        assert_eq!(bucket_index(256), 256);
        assert_eq!(bucket_index(u64::MAX), BUCKETS - 1);
        assert!(bucket_upper(BUCKETS - 1) > MAX_NS);
    }

    #[test]
    fn bucket_width_is_within_one_percent() {
        for i in 0..BUCKETS {
            let (lo, hi) = (bucket_lower(i), bucket_upper(i));
            if lo >= LINEAR {
                let rel = (hi - lo) as f64 / lo as f64;
                assert!(rel <= 1.0 / 128.0 + 1e-12, "bucket {i}: {lo}..{hi} ({rel})");
            } else {
                assert_eq!(hi - lo, 1);
            }
        }
    }

    proptest! {
        #[test]
        fn reported_value_within_half_a_percent(v in 1u64..MAX_NS) {
            let mut h = Histogram::default();
            h.record(v);
            h.record(MAX_NS); // so the single value is not clamped to itself by min/max
            h.record(0);
            let q = h.quantile(0.5).unwrap();
            let err = (q as f64 - v as f64).abs() / v as f64;
            prop_assert!(err <= 0.004, "{v} reported as {q} ({err})");
        }
    }

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut h = Histogram::default();
        for v in 1..=10_000u64 {
            h.record(v * 1000); // 1 us .. 10 ms, uniform
        }
        let s = h.summary().unwrap();
        assert_eq!(s.min, 1000);
        assert_eq!(s.max, 10_000_000);
        assert!((s.avg - 5_000_500.0).abs() < 1e-6);
        for (got, want) in [
            (s.p50, 5_000_000.0),
            (s.p90, 9_000_000.0),
            (s.p99, 9_900_000.0),
            (s.p999, 9_990_000.0),
        ] {
            let err = (got as f64 - want).abs() / want;
            assert!(err < 0.005, "{got} vs {want}");
        }
        // Small values are exact.
        let mut h = Histogram::default();
        for v in [3u64, 7, 7, 200] {
            h.record(v);
        }
        assert_eq!(h.quantile(0.5), Some(7));
        assert_eq!(h.quantile(1.0), Some(200));
        assert_eq!(h.quantile(0.0), Some(3));
        assert_eq!(Histogram::default().summary(), None);
    }

    #[test]
    fn merge_equals_recording_everything_in_one() {
        let (mut a, mut b, mut all) = (
            Histogram::default(),
            Histogram::default(),
            Histogram::default(),
        );
        for v in 0..5000u64 {
            let x = v * v % 1_000_003 + v;
            if v % 3 == 0 {
                a.record(x)
            } else {
                b.record(x)
            }
            all.record(x);
        }
        let mut m = a.clone();
        m.merge(&b);
        assert_eq!(m, all);
        assert_eq!(m.count(), 5000);
        let n: u64 = m.nonzero().map(|(_, c)| c).sum();
        assert_eq!(n, 5000);
        let mut e = Histogram::default();
        e.merge(&Histogram::default());
        assert_eq!(e.summary(), None);
        m.clear();
        assert_eq!(m, Histogram::default());
    }

    #[test]
    fn out_of_range_values_are_kept() {
        let mut h = Histogram::default();
        h.record(u64::MAX / 2);
        h.record(20_000_000_000);
        assert_eq!(h.count(), 2);
        assert_eq!(h.summary().unwrap().max, u64::MAX / 2);
        assert_eq!(h.nonzero().count(), 1);
    }
}
