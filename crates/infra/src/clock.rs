//! TSC clock calibrated against the monotonic clock.

use std::time::Instant;

/// Reads the time-stamp counter (a monotonic nanosecond count where there is no TSC).
#[inline(always)]
pub fn rdtsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC is available on every x86-64 CPU and has no memory effects.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        use std::sync::OnceLock;
        static START: OnceLock<Instant> = OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// A calibrated clock: converts TSC ticks to seconds.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    tsc0: u64,
    hz: f64,
}

impl Clock {
    /// Measures the TSC rate over ~20 ms of CLOCK_MONOTONIC (best of three).
    pub fn calibrate() -> Clock {
        let mut best = 0.0f64;
        let mut samples = Vec::new();
        for _ in 0..3 {
            let i0 = Instant::now();
            let t0 = rdtsc();
            while i0.elapsed().as_micros() < 7_000 {
                std::hint::spin_loop();
            }
            let t1 = rdtsc();
            let dt = i0.elapsed().as_secs_f64();
            samples.push((t1.wrapping_sub(t0)) as f64 / dt);
        }
        samples.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        if let Some(&m) = samples.get(1) {
            best = m;
        }
        // Round to 1 MHz; fall back to nanoseconds if the counter looks broken.
        let hz = if best.is_finite() && best > 1e6 {
            (best / 1e6).round() * 1e6
        } else {
            1e9
        };
        Clock { tsc0: rdtsc(), hz }
    }

    /// Ticks per second.
    pub fn hz(&self) -> f64 {
        self.hz
    }

    /// The TSC now.
    #[inline(always)]
    pub fn now_tsc(&self) -> u64 {
        rdtsc()
    }

    /// Ticks to seconds.
    pub fn tsc_to_secs(&self, ticks: u64) -> f64 {
        ticks as f64 / self.hz
    }

    /// Seconds to ticks.
    pub fn secs_to_tsc(&self, s: f64) -> u64 {
        (s.max(0.0) * self.hz) as u64
    }

    /// Seconds since calibration.
    #[inline]
    pub fn now_secs(&self) -> f64 {
        rdtsc().wrapping_sub(self.tsc0) as f64 / self.hz
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibrated_clock_tracks_monotonic_time() {
        let c = Clock::calibrate();
        assert!(c.hz() >= 1e6);
        let i = Instant::now();
        let s0 = c.now_secs();
        std::thread::sleep(std::time::Duration::from_millis(30));
        let ds = c.now_secs() - s0;
        let dm = i.elapsed().as_secs_f64();
        // Generous bound: a shared VM may be descheduled, but the two clocks must agree.
        assert!((ds - dm).abs() < 0.25 * dm + 0.005, "tsc {ds} vs mono {dm}");
        assert_eq!(c.secs_to_tsc(c.tsc_to_secs(1_000_000)), 1_000_000);
    }
}
