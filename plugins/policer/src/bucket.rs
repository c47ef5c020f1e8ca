//! Token buckets in exact integer arithmetic (RFC 2697, 2698, 4115 and a single-rate
//! two-colour bucket), color-blind.
//!
//! Time is a tick count of a clock running at `hz` ticks per second (the TSC; a manual
//! nanosecond clock in tests). Tokens are kept multiplied by `hz`: a rate of `r` units per
//! second adds exactly `r` per tick, a packet of `n` units costs `n * hz`, a bucket of `b`
//! units holds `b * hz`. Nothing is rounded, so a policer's decisions are exact functions
//! of the packet lengths and arrival ticks. Units are bytes (`rate kbps`: `cir` kilobits per
//! second is `cir * 125` bytes per second; buckets in bytes) or packets (`rate pps`).

use std::fmt;

/// The algorithm (VPP's `type`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `1r2c`: one rate, one bucket (`cir`, `cb`): conform or exceed.
    OneRateTwoColor,
    /// `1r3c` (RFC 2697 srTCM): committed bucket `cb` and excess bucket `eb`, both filled at
    /// `cir` (the excess one from the committed one's overflow).
    OneRateThreeColor,
    /// `2r3c-2698` (RFC 2698 trTCM): peak bucket (`eir`, `eb`) and committed bucket (`cir`,
    /// `cb`); a packet over the peak bucket violates, over the committed one exceeds.
    TwoRate2698,
    /// `2r3c-4115` (RFC 4115): committed (`cir`, `cb`) and excess (`eir`, `eb`) buckets
    /// filled independently.
    TwoRate4115,
}

impl Kind {
    /// The CLI name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::OneRateTwoColor => "1r2c",
            Kind::OneRateThreeColor => "1r3c",
            Kind::TwoRate2698 => "2r3c-2698",
            Kind::TwoRate4115 => "2r3c-4115",
        }
    }

    /// From the CLI name.
    pub fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "1r2c" => Kind::OneRateTwoColor,
            "1r3c" => Kind::OneRateThreeColor,
            "2r3c-2698" => Kind::TwoRate2698,
            "2r3c-4115" => Kind::TwoRate4115,
            _ => return None,
        })
    }
}

/// The outcome for one packet.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Color {
    /// Conform (green).
    Conform = 0,
    /// Exceed (yellow).
    Exceed = 1,
    /// Violate (red).
    Violate = 2,
}

/// Rate units.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RateType {
    /// Kilobits per second; buckets in bytes.
    Kbps,
    /// Packets per second; buckets in packets.
    Pps,
}

/// A policer's parameters (VPP's `configure policer` values).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Params {
    /// Algorithm.
    pub kind: Kind,
    /// Units.
    pub rate_type: RateType,
    /// Committed rate (kbps or pps).
    pub cir: u64,
    /// Excess or peak rate.
    pub eir: u64,
    /// Committed burst (bytes or packets).
    pub cb: u64,
    /// Excess or peak burst.
    pub eb: u64,
}

/// Why parameters were refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamError(pub String);

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Params {
    /// Checks the parameters the algorithm uses.
    pub fn validate(&self) -> Result<(), ParamError> {
        let bad = |m: String| Err(ParamError(m));
        if self.cir == 0 {
            return bad("cir `0': the committed rate must be positive".into());
        }
        if self.cb == 0 {
            return bad("cb `0': the committed burst must be positive".into());
        }
        match self.kind {
            Kind::OneRateTwoColor => {}
            Kind::OneRateThreeColor => {
                if self.eb == 0 {
                    return bad("eb `0': 1r3c needs an excess burst".into());
                }
            }
            Kind::TwoRate2698 | Kind::TwoRate4115 => {
                if self.eb == 0 {
                    return bad(format!(
                        "eb `0': {} needs an excess burst",
                        self.kind.name()
                    ));
                }
                if self.kind == Kind::TwoRate2698 && self.eir < self.cir {
                    return bad(format!(
                        "eir `{}': the peak rate of 2r3c-2698 must be at least cir {}",
                        self.eir, self.cir
                    ));
                }
                if self.eir == 0 {
                    return bad("eir `0': 2r3c needs an excess rate".into());
                }
            }
        }
        let max = 1u64 << 40;
        for (n, v) in [
            ("cir", self.cir),
            ("eir", self.eir),
            ("cb", self.cb),
            ("eb", self.eb),
        ] {
            if v > max {
                return bad(format!("{n} `{v}' too large (at most {max})"));
            }
        }
        Ok(())
    }

    /// Units per second of a rate.
    fn per_sec(&self, r: u64) -> u128 {
        match self.rate_type {
            RateType::Kbps => r as u128 * 125,
            RateType::Pps => r as u128,
        }
    }
}

/// A bucket pair's state.
#[derive(Clone, Debug)]
pub struct Bucket {
    p: Params,
    hz: u128,
    /// Committed-rate tokens per tick.
    c_rate: u128,
    /// Excess/peak-rate tokens per tick.
    e_rate: u128,
    /// Sizes (scaled).
    c_max: u128,
    e_max: u128,
    /// Tokens (scaled): committed and excess (peak for 2698).
    tc: u128,
    te: u128,
    last: u64,
}

impl Bucket {
    /// Full buckets at tick `now` for a clock of `hz` ticks per second.
    pub fn new(p: Params, hz: u64, now: u64) -> Bucket {
        let hz = hz.max(1) as u128;
        let c_max = p.cb as u128 * hz;
        let e_max = match p.kind {
            Kind::OneRateTwoColor => 0,
            _ => p.eb as u128 * hz,
        };
        let e_rate = match p.kind {
            Kind::OneRateTwoColor | Kind::OneRateThreeColor => 0,
            _ => p.per_sec(p.eir),
        };
        Bucket {
            p,
            hz,
            c_rate: p.per_sec(p.cir),
            e_rate,
            c_max,
            e_max,
            tc: c_max,
            te: e_max,
            last: now,
        }
    }

    /// The parameters.
    pub fn params(&self) -> &Params {
        &self.p
    }

    /// Tokens in the committed and excess buckets at tick `now` (units, rounded down).
    pub fn tokens_at(&self, now: u64) -> (u64, u64) {
        let mut b = self.clone();
        b.refill(now);
        ((b.tc / b.hz) as u64, (b.te / b.hz) as u64)
    }

    fn refill(&mut self, now: u64) {
        // A clock going backwards (another thread's older stamp) adds nothing.
        let dt = now.saturating_sub(self.last) as u128;
        if dt == 0 {
            return;
        }
        self.last = now;
        // Cap the elapsed time at what fills every bucket (no overflow after long idles).
        let fill = |max: u128, rate: u128| if rate == 0 { 0 } else { max.div_ceil(rate) };
        let dt =
            dt.min(fill(self.c_max + self.e_max, self.c_rate).max(fill(self.e_max, self.e_rate)));
        let add_c = dt * self.c_rate;
        match self.p.kind {
            Kind::OneRateTwoColor => self.tc = (self.tc + add_c).min(self.c_max),
            Kind::OneRateThreeColor => {
                let t = self.tc + add_c;
                if t > self.c_max {
                    self.te = (self.te + t - self.c_max).min(self.e_max);
                    self.tc = self.c_max;
                } else {
                    self.tc = t;
                }
            }
            Kind::TwoRate2698 | Kind::TwoRate4115 => {
                self.tc = (self.tc + add_c).min(self.c_max);
                self.te = (self.te + dt * self.e_rate).min(self.e_max);
            }
        }
    }

    /// Colours a packet of `len` bytes arriving at tick `now` and takes its tokens.
    #[inline]
    pub fn police(&mut self, len: u32, now: u64) -> Color {
        self.refill(now);
        let cost = match self.p.rate_type {
            RateType::Kbps => len as u128 * self.hz,
            RateType::Pps => self.hz,
        };
        match self.p.kind {
            Kind::OneRateTwoColor => {
                if self.tc >= cost {
                    self.tc -= cost;
                    Color::Conform
                } else {
                    Color::Exceed
                }
            }
            Kind::OneRateThreeColor | Kind::TwoRate4115 => {
                if self.tc >= cost {
                    self.tc -= cost;
                    Color::Conform
                } else if self.te >= cost {
                    self.te -= cost;
                    Color::Exceed
                } else {
                    Color::Violate
                }
            }
            Kind::TwoRate2698 => {
                // te is the peak bucket.
                if self.te < cost {
                    Color::Violate
                } else if self.tc < cost {
                    self.te -= cost;
                    Color::Exceed
                } else {
                    self.te -= cost;
                    self.tc -= cost;
                    Color::Conform
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Color::*;

    const HZ: u64 = 2_500_000_000;

    fn params(kind: Kind, rate_type: RateType, cir: u64, cb: u64, eir: u64, eb: u64) -> Params {
        Params {
            kind,
            rate_type,
            cir,
            eir,
            cb,
            eb,
        }
    }

    fn run(b: &mut Bucket, n: usize, len: u32, now: u64) -> Vec<Color> {
        (0..n).map(|_| b.police(len, now)).collect()
    }

    #[test]
    fn one_rate_two_color_pps_is_exact() {
        let mut b = Bucket::new(
            params(Kind::OneRateTwoColor, RateType::Pps, 1000, 3, 0, 0),
            HZ,
            0,
        );
        assert_eq!(
            run(&mut b, 5, 64, 0),
            [Conform, Conform, Conform, Exceed, Exceed]
        );
        // 1000 pps: one packet's worth per 2.5M ticks, exactly.
        assert_eq!(b.police(64, 2_499_999), Exceed);
        assert_eq!(b.police(64, 2_500_000), Conform);
        assert_eq!(b.police(64, 2_500_000), Exceed);
        // A long idle fills the bucket to cb, no more.
        assert_eq!(
            run(&mut b, 4, 64, u64::MAX / 2),
            [Conform, Conform, Conform, Exceed]
        );
    }

    #[test]
    fn kbps_counts_bytes() {
        // 8 kbps = 1000 bytes/s, 1000-byte bucket: ten 100-byte packets, then 100 bytes per
        // 100 ms.
        let mut b = Bucket::new(
            params(Kind::OneRateTwoColor, RateType::Kbps, 8, 1000, 0, 0),
            HZ,
            7,
        );
        let c = run(&mut b, 12, 100, 7);
        assert_eq!(c.iter().filter(|&&x| x == Conform).count(), 10);
        assert_eq!(b.police(100, 7 + HZ / 10 - 1), Exceed);
        assert_eq!(b.police(100, 7 + HZ / 10), Conform);
        assert_eq!(b.police(1, 7 + HZ / 10), Exceed);
    }

    #[test]
    fn srtcm_overflow_fills_the_excess_bucket() {
        let mut b = Bucket::new(
            params(Kind::OneRateThreeColor, RateType::Pps, 1000, 2, 0, 3),
            HZ,
            0,
        );
        assert_eq!(
            run(&mut b, 6, 64, 0),
            [Conform, Conform, Exceed, Exceed, Exceed, Violate]
        );
        // 5 ms: 5 tokens: 2 fill C, 3 overflow into E.
        let t = HZ / 200;
        assert_eq!(b.tokens_at(0), (0, 0));
        assert_eq!(b.tokens_at(t), (2, 3));
    }

    #[test]
    fn trtcm_2698_peak_then_committed() {
        let mut b = Bucket::new(
            params(Kind::TwoRate2698, RateType::Pps, 1000, 2, 2000, 4),
            HZ,
            0,
        );
        assert_eq!(
            run(&mut b, 6, 64, 0),
            [Conform, Conform, Exceed, Exceed, Violate, Violate]
        );
        // 1 ms: C +1, P +2.
        assert_eq!(run(&mut b, 3, 64, HZ / 1000), [Conform, Exceed, Violate]);
    }

    #[test]
    fn rfc4115_buckets_fill_independently() {
        let mut b = Bucket::new(
            params(Kind::TwoRate4115, RateType::Pps, 1000, 2, 3000, 1),
            HZ,
            0,
        );
        assert_eq!(run(&mut b, 4, 64, 0), [Conform, Conform, Exceed, Violate]);
        // 1 ms: C +1; E +3 capped at 1.
        assert_eq!(b.police(64, HZ / 1000), Conform);
        assert_eq!(run(&mut b, 2, 64, HZ / 1000), [Exceed, Violate]);
    }

    #[test]
    fn validation_names_the_value() {
        let ok = params(Kind::TwoRate2698, RateType::Kbps, 1000, 100, 2000, 200);
        assert!(ok.validate().is_ok());
        let e = Params { eir: 500, ..ok }.validate().unwrap_err();
        assert!(e.0.contains("`500'"), "{e}");
        let e = Params { cb: 0, ..ok }.validate().unwrap_err();
        assert!(e.0.contains("cb `0'"), "{e}");
        let e = Params {
            eb: 0,
            kind: Kind::OneRateThreeColor,
            ..ok
        }
        .validate()
        .unwrap_err();
        assert!(e.0.contains("eb `0'"), "{e}");
    }
}
