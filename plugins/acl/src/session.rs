//! Stateful ACL sessions (`permit+reflect`): one table per thread.
//!
//! A packet that a `permit+reflect` rule permits on interface X in direction D (input or
//! output) creates a session on X. The session admits, without consulting the ACLs again,
//! the packets of its initiator in direction D and those of the responder (the reversed
//! tuple) in the other direction of X — VPP's reflexive ACLs, whose sessions also belong to
//! one interface. The usual firewall is therefore both lists on the outside interface:
//! `output` with `permit+reflect` (what may leave), `input` denying the rest (what may
//! come in unsolicited).
//!
//! Keys are normalised (the lower address:port first) so both directions find one entry;
//! the session remembers which end initiated. ICMP echo requests and replies key on the
//! identifier (request `(src, id) -> (dst, 0)`, reply `(src, 0) -> (dst, id)`), so a reply
//! is the request's reversed tuple.
//!
//! Timeouts (VPP's `set acl-plugin session timeout`): UDP and ICMP `udp idle`; TCP `tcp
//! idle` once both ends sent a SYN and neither a FIN or RST, `tcp transient` otherwise (the
//! handshake, closing, reset). An expired session is freed when a lookup meets it and by the
//! `acl-plugin-fa-cleaner` process once a second.
//!
//! Every session belongs to one thread: the owner of its normalised key (a hash over the
//! worker threads, the main thread when there are none). Packets of stateful interfaces are
//! handed to the owner before the lookup, so each table is only used by its thread (and the
//! control plane under the thread's mutex).

use std::collections::HashMap;

/// Session timeouts, seconds.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// UDP and ICMP idle.
    pub udp_idle: u32,
    /// TCP established idle.
    pub tcp_idle: u32,
    /// TCP opening, closing or reset.
    pub tcp_transient: u32,
}

impl Default for Timeouts {
    /// VPP's defaults.
    fn default() -> Self {
        Timeouts {
            udp_idle: 600,
            tcp_idle: 24 * 3600,
            tcp_transient: 120,
        }
    }
}

/// Sessions per thread at most (a packet that would create one more is dropped and
/// counted, `session_limit`).
pub const DEFAULT_MAX_SESSIONS: usize = 500_000;

/// A normalised session key.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct SessKey {
    /// Interface the session belongs to.
    pub sw_if: u32,
    /// IPv6.
    pub v6: bool,
    /// Protocol.
    pub proto: u8,
    /// The lower (address, port) end.
    pub lo: (u128, u16),
    /// The higher end.
    pub hi: (u128, u16),
}

impl SessKey {
    /// The key of a packet's tuple and whether its source is the `lo` end.
    #[inline(always)]
    pub fn of(sw_if: u32, v6: bool, proto: u8, src: (u128, u16), dst: (u128, u16)) -> (Self, bool) {
        let src_lo = src <= dst;
        let (lo, hi) = if src_lo { (src, dst) } else { (dst, src) };
        (
            SessKey {
                sw_if,
                v6,
                proto,
                lo,
                hi,
            },
            src_lo,
        )
    }

    /// A hash equal for both directions (picks the owning thread).
    #[inline(always)]
    pub fn owner_hash(&self) -> u64 {
        let fold = |a: u128| (a as u64) ^ ((a >> 64) as u64);
        let mut h = fold(self.lo.0) ^ fold(self.hi.0).rotate_left(17);
        h ^= ((self.lo.1 as u64) << 16 | self.hi.1 as u64) << 8 | self.proto as u64;
        h ^= (self.sw_if as u64) << 40;
        // A 64-bit finaliser (murmur3's fmix64).
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

/// TCP state bits.
pub mod tcp {
    /// SYN from the initiator.
    pub const SYN_INIT: u8 = 1;
    /// SYN from the responder.
    pub const SYN_RESP: u8 = 2;
    /// FIN seen (either end).
    pub const FIN: u8 = 4;
    /// RST seen.
    pub const RST: u8 = 8;
}

const TCP_FIN: u8 = 0x01;
const TCP_SYN: u8 = 0x02;
const TCP_RST: u8 = 0x04;

/// A session.
#[derive(Clone, Debug)]
pub struct Session {
    /// Its key.
    pub key: SessKey,
    /// Created by an output ACL.
    pub out: bool,
    /// The initiator is the key's `lo` end.
    pub init_lo: bool,
    /// [`tcp`] bits.
    pub tcp: u8,
    /// Created (seconds, runtime clock).
    pub created: f64,
    /// Last packet.
    pub last: f64,
    /// Packets from the initiator, from the responder.
    pub pkts: [u64; 2],
}

impl Session {
    /// Whether TCP reached established (both SYNs, no FIN/RST).
    pub fn established(&self) -> bool {
        self.key.proto != 6
            || (self.tcp & (tcp::SYN_INIT | tcp::SYN_RESP) == tcp::SYN_INIT | tcp::SYN_RESP
                && self.tcp & (tcp::FIN | tcp::RST) == 0)
    }

    /// The idle timeout that applies now.
    pub fn timeout(&self, t: &Timeouts) -> u32 {
        match self.key.proto {
            6 if self.established() => t.tcp_idle,
            6 => t.tcp_transient,
            _ => t.udp_idle,
        }
    }

    /// Whether it has expired at `now`.
    #[inline(always)]
    pub fn expired(&self, now: f64, t: &Timeouts) -> bool {
        now - self.last >= self.timeout(t) as f64
    }

    /// A state name for `show`.
    pub fn state(&self) -> &'static str {
        if self.key.proto != 6 {
            "active"
        } else if self.tcp & tcp::RST != 0 {
            "reset"
        } else if self.tcp & tcp::FIN != 0 {
            "closing"
        } else if self.established() {
            "established"
        } else {
            "opening"
        }
    }

    /// Records a packet (from the initiator or not) with TCP `flags` at `now`.
    #[inline(always)]
    pub fn touch(&mut self, from_init: bool, flags: u8, now: f64) {
        self.last = now;
        self.pkts[!from_init as usize] += 1;
        if self.key.proto == 6 {
            if flags & TCP_SYN != 0 {
                self.tcp |= if from_init {
                    tcp::SYN_INIT
                } else {
                    tcp::SYN_RESP
                };
            }
            if flags & TCP_FIN != 0 {
                self.tcp |= tcp::FIN;
            }
            if flags & TCP_RST != 0 {
                self.tcp |= tcp::RST;
            }
        }
    }
}

/// Counts of one thread's table.
#[derive(Copy, Clone, Debug, Default)]
pub struct Stats {
    /// Sessions created.
    pub created: u64,
    /// Sessions freed on expiry.
    pub expired: u64,
    /// Sessions freed otherwise (clear, interface lists changed).
    pub deleted: u64,
}

/// Why a session was not created.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CreateError {
    /// The table is full.
    Full,
}

/// One thread's sessions.
pub struct Table {
    map: HashMap<SessKey, u32>,
    slots: Vec<Option<Session>>,
    free: Vec<u32>,
    /// The limit.
    pub max: usize,
    /// Counts.
    pub stats: Stats,
    /// Next slot the cleaner looks at.
    scan: usize,
}

impl Default for Table {
    fn default() -> Self {
        Table::new(DEFAULT_MAX_SESSIONS)
    }
}

impl Table {
    /// An empty table holding at most `max` sessions.
    pub fn new(max: usize) -> Table {
        Table {
            map: HashMap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            max,
            stats: Stats::default(),
            scan: 0,
        }
    }

    /// Live sessions.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The live session of `k` (an expired one is freed and not returned).
    #[inline(always)]
    pub fn lookup(&mut self, k: &SessKey, now: f64, t: &Timeouts) -> Option<&mut Session> {
        let i = *self.map.get(k)?;
        if self.slots[i as usize]
            .as_ref()
            .is_some_and(|s| s.expired(now, t))
        {
            self.free_slot(i);
            self.stats.expired += 1;
            return None;
        }
        self.slots[i as usize].as_mut()
    }

    /// Adds a session.
    pub fn create(&mut self, s: Session) -> Result<&mut Session, CreateError> {
        if self.map.len() >= self.max {
            return Err(CreateError::Full);
        }
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(None);
                (self.slots.len() - 1) as u32
            }
        };
        self.map.insert(s.key, i);
        self.stats.created += 1;
        let slot = &mut self.slots[i as usize];
        *slot = Some(s);
        Ok(slot.as_mut().expect("just set"))
    }

    fn free_slot(&mut self, i: u32) {
        if let Some(s) = self.slots[i as usize].take() {
            self.map.remove(&s.key);
            self.free.push(i);
        }
    }

    /// Frees expired sessions, looking at `budget` slots at most from where the previous
    /// call stopped. Returns how many it freed.
    pub fn expire(&mut self, now: f64, t: &Timeouts, budget: usize) -> usize {
        let n = self.slots.len();
        if n == 0 {
            return 0;
        }
        let mut freed = 0;
        for _ in 0..budget.min(n) {
            if self.scan >= n {
                self.scan = 0;
            }
            let i = self.scan;
            self.scan += 1;
            if self.slots[i].as_ref().is_some_and(|s| s.expired(now, t)) {
                self.free_slot(i as u32);
                freed += 1;
            }
        }
        self.stats.expired += freed as u64;
        freed
    }

    /// Frees the sessions `f` selects (every one: `clear acl-plugin sessions`).
    pub fn remove_if(&mut self, mut f: impl FnMut(&Session) -> bool) -> usize {
        let mut n = 0;
        for i in 0..self.slots.len() {
            if self.slots[i].as_ref().is_some_and(&mut f) {
                self.free_slot(i as u32);
                n += 1;
            }
        }
        self.stats.deleted += n as u64;
        n
    }

    /// The live sessions.
    pub fn iter(&self) -> impl Iterator<Item = &Session> {
        self.slots.iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sess(now: f64, proto: u8) -> Session {
        let (key, lo) = SessKey::of(1, false, proto, (10, 1000), (20, 80));
        Session {
            key,
            out: true,
            init_lo: lo,
            tcp: 0,
            created: now,
            last: now,
            pkts: [0; 2],
        }
    }

    #[test]
    fn both_directions_share_one_key_and_owner() {
        let (a, a_lo) = SessKey::of(3, false, 17, (0x0a000002, 4000), (0xc0000202, 53));
        let (b, b_lo) = SessKey::of(3, false, 17, (0xc0000202, 53), (0x0a000002, 4000));
        assert_eq!(a, b);
        assert_ne!(a_lo, b_lo);
        assert_eq!(a.owner_hash(), b.owner_hash());
        let (c, _) = SessKey::of(4, false, 17, (0x0a000002, 4000), (0xc0000202, 53));
        assert_ne!(a, c, "sessions belong to one interface");
    }

    #[test]
    fn tcp_state_decides_the_timeout() {
        let t = Timeouts {
            udp_idle: 10,
            tcp_idle: 100,
            tcp_transient: 5,
        };
        let mut s = sess(0.0, 6);
        s.touch(true, TCP_SYN, 0.0);
        assert_eq!((s.state(), s.timeout(&t)), ("opening", 5));
        s.touch(false, TCP_SYN | 0x10, 0.1);
        assert_eq!((s.state(), s.timeout(&t)), ("established", 100));
        assert!(!s.expired(50.0, &t));
        s.touch(true, TCP_FIN | 0x10, 1.0);
        assert_eq!((s.state(), s.timeout(&t)), ("closing", 5));
        assert!(s.expired(6.0, &t));
        s.touch(false, TCP_RST, 1.0);
        assert_eq!(s.state(), "reset");
        assert_eq!(s.pkts, [2, 2]);
        assert_eq!(sess(0.0, 17).timeout(&t), 10);
    }

    #[test]
    fn expiry_limit_and_reuse() {
        let t = Timeouts {
            udp_idle: 10,
            ..Timeouts::default()
        };
        let mut tb = Table::new(2);
        let k = tb.create(sess(0.0, 17)).unwrap().key;
        let mut s2 = sess(5.0, 17);
        s2.key.lo.1 = 1001;
        tb.create(s2.clone()).unwrap();
        let mut s3 = s2.clone();
        s3.key.lo.1 = 1002;
        assert_eq!(tb.create(s3.clone()).err(), Some(CreateError::Full));
        assert!(tb.lookup(&k, 9.0, &t).is_some());
        // Expired at lookup: freed.
        assert!(tb.lookup(&k, 19.5, &t).is_none());
        assert_eq!((tb.len(), tb.stats.expired), (1, 1));
        tb.create(s3).unwrap();
        assert_eq!(tb.expire(100.0, &t, 10), 2);
        assert!(tb.is_empty());
        assert_eq!(tb.slots.len(), 2, "slots are reused");
    }
}
