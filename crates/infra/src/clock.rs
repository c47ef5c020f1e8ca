//! TSC clock calibrated against the monotonic clock.
//!
//! Reading the TSC costs a few nanoseconds and no syscall, so the dispatcher can stamp every
//! node call (`show runtime` clocks) and process-node timers can run on TSC-derived seconds.
//! [`Clock::calibrate`] measures the TSC rate against `CLOCK_MONOTONIC` once at startup.

use std::time::Instant;

/// Reads the time-stamp counter. On architectures without one it returns nanoseconds of a
/// process-wide monotonic clock instead, so the result is always a monotonic tick count.
#[inline(always)]
pub fn rdtsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC is part of the x86-64 baseline (every x86-64 CPU has it), reads only the
        // time-stamp counter and has no memory effects; user-mode access is allowed by Linux.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        use std::sync::OnceLock;
        static START: OnceLock<Instant> = OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// A calibrated clock: converts TSC ticks to seconds. `Copy`, so each thread keeps its own.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    tsc0: u64,
    mono0: Instant,
    hz: f64,
}

impl Clock {
    /// Measures the TSC rate against `CLOCK_MONOTONIC` over ~21 ms: three 7 ms windows, the
    /// median rate wins (one window disturbed by preemption does not skew it). The rate is
    /// rounded to 10 kHz. If the counter looks unusable (not advancing, or slower than 1 MHz)
    /// the rate falls back to 1 GHz, which is exact for the nanosecond fallback of [`rdtsc`].
    pub fn calibrate() -> Clock {
        let mut samples = [0.0f64; 3];
        for s in &mut samples {
            let i0 = Instant::now();
            let t0 = rdtsc();
            while i0.elapsed().as_micros() < 7_000 {
                std::hint::spin_loop();
            }
            let t1 = rdtsc();
            let dt = i0.elapsed().as_secs_f64();
            *s = t1.wrapping_sub(t0) as f64 / dt;
        }
        samples.sort_by(f64::total_cmp);
        Clock::with_hz(samples[1])
    }

    /// A clock starting now with a given measured rate (rounded and sanity-checked as in
    /// [`calibrate`](Self::calibrate)).
    pub fn with_hz(measured_hz: f64) -> Clock {
        let hz = if measured_hz.is_finite() && measured_hz >= 1e6 {
            (measured_hz / 1e4).round() * 1e4
        } else {
            1e9
        };
        Clock {
            tsc0: rdtsc(),
            mono0: Instant::now(),
            hz,
        }
    }

    /// This clock running `factor` times slower (its seconds `factor` times longer; TSC
    /// readings and tick counts unchanged). For benchmarks under an instrumenting tool
    /// (callgrind runs code 50–100× slower): a slowed clock lets per-second state (NAT's
    /// LRU stamps, timers) see the packets per second it would see at full speed.
    pub fn slowed(self, factor: f64) -> Clock {
        Clock {
            hz: self.hz * factor.max(1.0),
            ..self
        }
    }

    /// The monotonic-clock instant the clock started at (its `now_secs() == 0`).
    pub fn start_instant(&self) -> Instant {
        self.mono0
    }

    /// The TSC value the clock started at.
    pub fn start_tsc(&self) -> u64 {
        self.tsc0
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
    #[inline]
    pub fn tsc_to_secs(&self, ticks: u64) -> f64 {
        ticks as f64 / self.hz
    }

    /// Seconds to ticks, rounded to the nearest tick (negative or NaN seconds give 0).
    #[inline]
    pub fn secs_to_tsc(&self, s: f64) -> u64 {
        (s.max(0.0) * self.hz).round() as u64
    }

    /// Seconds since the clock started, from the TSC.
    #[inline]
    pub fn now_secs(&self) -> f64 {
        self.secs_at(rdtsc())
    }

    /// Seconds since the clock was calibrated at TSC value `tsc` (the same value for the
    /// same `tsc`, whenever it is asked: trace timestamps print alike everywhere).
    #[inline]
    pub fn secs_at(&self, tsc: u64) -> f64 {
        tsc.wrapping_sub(self.tsc0) as f64 / self.hz
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slowed_clock_counts_seconds_that_many_times_slower() {
        let c = Clock::with_hz(2e9);
        let s = c.slowed(1000.0);
        assert_eq!(s.hz(), 2e12);
        assert_eq!(s.start_tsc(), c.start_tsc());
        let t = c.start_tsc() + 4_000_000_000;
        assert_eq!(c.secs_at(t), 2.0);
        assert_eq!(s.secs_at(t), 0.002);
        // A factor under 1 would speed it up: refused (kept as is).
        assert_eq!(c.slowed(0.5).hz(), c.hz());
    }

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
        assert!(c.start_instant() <= i);
    }

    #[test]
    fn rate_rounding_and_fallback() {
        assert_eq!(Clock::with_hz(2_100_003_456.0).hz(), 2_100_000_000.0);
        assert_eq!(Clock::with_hz(f64::NAN).hz(), 1e9);
        assert_eq!(Clock::with_hz(0.0).hz(), 1e9);
        let c = Clock::with_hz(2e9);
        assert_eq!(c.secs_to_tsc(1.5), 3_000_000_000);
        assert_eq!(c.secs_to_tsc(-1.0), 0);
        assert_eq!(c.tsc_to_secs(500), 2.5e-7);
    }
}
