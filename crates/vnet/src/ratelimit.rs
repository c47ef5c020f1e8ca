//! Rate limits of the slow-path nodes that answer packets (`ip4/ip6-icmp-error`) or ask for
//! neighbours (`ip4/ip6-glean`), one instance per thread: no shared state, no lock.

use sluice_graph::Cx;

/// Token bucket of ICMP errors (RFC 1812 §4.3.2.8, RFC 4443 §2.4 f): 1000 per second,
/// bursts of 100.
pub struct TokenBucket {
    tokens: f64,
    last_tsc: u64,
    hz: f64,
}

impl Default for TokenBucket {
    fn default() -> Self {
        TokenBucket {
            tokens: BURST,
            last_tsc: 0,
            hz: 0.0,
        }
    }
}

const RATE: f64 = 1000.0;
const BURST: f64 = 100.0;

impl TokenBucket {
    /// Refills for the time since the last call; whether a token is available (not taken:
    /// [`TokenBucket::take`] once the packet really is answered).
    #[inline]
    pub fn ready(&mut self, cx: &Cx) -> bool {
        let now = cx.now_tsc();
        if self.hz == 0.0 {
            self.hz = cx.shared().clock.hz();
            self.last_tsc = now;
        }
        let dt = now.wrapping_sub(self.last_tsc) as f64 / self.hz;
        self.tokens = (self.tokens + dt * RATE).min(BURST);
        self.last_tsc = now;
        self.tokens >= 1.0
    }

    /// Uses one token.
    #[inline]
    pub fn take(&mut self) {
        self.tokens -= 1.0;
    }
}

/// At most one request per target per 10 ms (per thread): a 64-slot table of the last
/// request time by hashed target.
pub struct Throttle<K> {
    recent: [(K, u64); 64],
    gap_tsc: u64,
}

/// What a [`Throttle`] tells requests apart by: a target address (`u32`, `u128`).
pub trait ThrottleKey: Copy + PartialEq + Default + Send + 'static {
    /// A 64-bit hash of the key (the table slot).
    fn hash64(self) -> u64;
}

impl ThrottleKey for u32 {
    #[inline]
    fn hash64(self) -> u64 {
        self as u64
    }
}

impl ThrottleKey for u128 {
    #[inline]
    fn hash64(self) -> u64 {
        (self as u64) ^ ((self >> 64) as u64)
    }
}

impl<K: ThrottleKey> Default for Throttle<K> {
    fn default() -> Self {
        Throttle {
            recent: [(K::default(), 0); 64],
            gap_tsc: 0,
        }
    }
}

impl<K: ThrottleKey> Throttle<K> {
    /// Whether a request for `key` may go now; records it if so.
    #[inline]
    pub fn allow(&mut self, cx: &Cx, key: K) -> bool {
        let hash = key.hash64();
        if self.gap_tsc == 0 {
            self.gap_tsc = (cx.shared().clock.hz() * 0.01) as u64;
        }
        let now = cx.now_tsc();
        let slot = &mut self.recent[(hash.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as usize];
        if slot.0 == key && now.wrapping_sub(slot.1) < self.gap_tsc {
            return false;
        }
        *slot = (key, now);
        true
    }
}
