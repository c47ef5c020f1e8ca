//! NAT44-ED configuration: what the CLI edits (the control plane, main thread) and the
//! read-only snapshot the data path uses ([`Snapshot`], replaced as a whole on every change).

use crate::packet::Tuple;
use std::collections::BTreeMap;
use std::fmt;
use std::net::Ipv4Addr;

/// Interface role bits ([`Snapshot::roles`]).
pub mod role {
    /// `set interface nat44 in`.
    pub const INSIDE: u8 = 1;
    /// `set interface nat44 out`.
    pub const OUTSIDE: u8 = 2;
}

/// First port handed out dynamically (ports below are never allocated, as VPP).
pub const FIRST_PORT: u32 = 1024;

/// Session timeouts in seconds (`set nat timeout`), VPP's defaults.
///
/// Every timeout must be at least 1 s (`ops::set_timeouts` refuses 0): the batched
/// lookup takes a session touched in the current second as live without comparing its
/// age ([`crate::session::Table::confirm_live`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// UDP.
    pub udp: u32,
    /// TCP once both sides sent a SYN and neither closed.
    pub tcp_established: u32,
    /// TCP opening, closing or reset.
    pub tcp_transitory: u32,
    /// ICMP echo.
    pub icmp: u32,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            udp: 300,
            tcp_established: 7440,
            tcp_transitory: 240,
            icmp: 60,
        }
    }
}

/// Where an address comes from.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum AddrSrc {
    /// Configured (`nat44 add address`).
    Fixed(u32),
    /// The first IPv4 address of an interface (`nat44 add interface address`, `external
    /// <if>`), followed when it changes.
    Interface(u32),
}

/// A pool address.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PoolAddr {
    /// The address.
    pub src: AddrSrc,
    /// `tenant-vrf`: only inside hosts of this FIB index use it (None: any).
    pub tenant_fib: Option<u32>,
    /// The `tenant-vrf` table id as configured (for show).
    pub tenant_vrf: Option<u32>,
}

/// A static (or identity) mapping.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct StaticMapping {
    /// Inside address.
    pub local: u32,
    /// Inside port (None: address-only mapping).
    pub local_port: Option<u16>,
    /// Outside address.
    pub external: AddrSrc,
    /// Outside port.
    pub external_port: Option<u16>,
    /// Protocol (None: any, address-only mappings).
    pub proto: Option<u8>,
    /// Inside FIB index.
    pub fib: u32,
    /// Inside table id as configured.
    pub vrf: u32,
    /// An identity mapping (`nat44 add identity mapping`).
    pub identity: bool,
    /// Unique id, so sessions of a deleted mapping can be found.
    pub id: u32,
}

/// Why a configuration change was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NatError {
    /// `nat44 plugin enable` first.
    #[error("nat44 is disabled (nat44 plugin enable)")]
    Disabled,
    /// Already enabled.
    #[error("nat44 is already enabled")]
    AlreadyEnabled,
    /// Adding what exists.
    #[error("{0} already exists")]
    Exists(String),
    /// Deleting what does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// A mapping that cannot work.
    #[error("{0}")]
    Invalid(String),
    /// `nat44 plugin enable sessions <n>` above what a table takes.
    #[error("sessions `{asked}' must be at most {max}")]
    TooManySessions {
        /// The sessions asked for.
        asked: u32,
        /// [`crate::session::MAX_SESSIONS`].
        max: usize,
    },
}

/// The control plane's configuration (main thread).
#[derive(Clone, Debug, Default)]
pub struct Control {
    /// `nat44 plugin enable sessions <n>`: sessions per thread.
    pub max_sessions: Option<u32>,
    /// Pool addresses, in the order added.
    pub pool: Vec<PoolAddr>,
    /// Static and identity mappings, by id.
    pub mappings: BTreeMap<u32, StaticMapping>,
    /// Next mapping id.
    pub next_id: u32,
    /// Interface roles by sw_if_index.
    pub roles: BTreeMap<u32, u8>,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// Bumped by every change (the snapshot's generation).
    pub generation: u64,
}

/// A static mapping's lookup key: address, port (0 for address-only), protocol (0 for
/// any), FIB index (outside lookups use 0).
pub type SmKey = (u32, u16, u8, u32);

/// The read-only configuration the data path uses. Interface-sourced addresses are
/// resolved when the snapshot is built (and re-resolved by the `nat44-ed-walk` process when
/// an interface address changes).
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Generation of [`Control`] it was built from.
    pub generation: u64,
    /// Interface roles, indexed by sw_if_index.
    pub roles: Vec<u8>,
    /// Pool addresses: (address, tenant FIB), unresolved interface addresses left out.
    pub pool: Vec<(u32, Option<u32>)>,
    /// Every external address (pool and static mappings), sorted: the out2in node passes
    /// packets to other addresses untranslated.
    pub external: Vec<u32>,
    /// Static mappings.
    pub mappings: Vec<StaticMapping>,
    /// Resolved external address of each mapping (None: its interface has no address).
    pub mapping_ext: Vec<Option<u32>>,
    /// (local key, mapping index), sorted.
    by_local: Vec<(SmKey, u32)>,
    /// (external key, mapping index), sorted.
    by_external: Vec<(SmKey, u32)>,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// Threads that own sessions (`cpu { workers N }`: the workers; else thread 0).
    pub threads: Vec<usize>,
    /// Dynamic ports per owning thread.
    pub ports_per_thread: u32,
    /// Sessions per thread.
    pub max_sessions: u32,
}

impl Snapshot {
    /// Builds the snapshot; `addr_of(sw_if)` resolves an interface's first IPv4 address.
    pub fn build(c: &Control, n_threads: usize, addr_of: impl Fn(u32) -> Option<u32>) -> Snapshot {
        let resolve = |s: AddrSrc| match s {
            AddrSrc::Fixed(a) => Some(a),
            AddrSrc::Interface(i) => addr_of(i),
        };
        let mut roles = Vec::new();
        for (&i, &r) in &c.roles {
            if roles.len() <= i as usize {
                roles.resize(i as usize + 1, 0);
            }
            roles[i as usize] = r;
        }
        let pool: Vec<(u32, Option<u32>)> = c
            .pool
            .iter()
            .filter_map(|p| resolve(p.src).map(|a| (a, p.tenant_fib)))
            .collect();
        let mappings: Vec<StaticMapping> = c.mappings.values().copied().collect();
        let mapping_ext: Vec<Option<u32>> = mappings.iter().map(|m| resolve(m.external)).collect();
        let mut by_local = Vec::new();
        let mut by_external = Vec::new();
        for (i, m) in mappings.iter().enumerate() {
            let Some(ext) = mapping_ext[i] else { continue };
            let p = m.proto.unwrap_or(0);
            by_local.push(((m.local, m.local_port.unwrap_or(0), p, m.fib), i as u32));
            by_external.push(((ext, m.external_port.unwrap_or(0), p, 0), i as u32));
        }
        by_local.sort_unstable();
        by_external.sort_unstable();
        let mut external: Vec<u32> = pool.iter().map(|p| p.0).collect();
        external.extend(mapping_ext.iter().flatten());
        external.sort_unstable();
        external.dedup();
        let threads: Vec<usize> = if n_threads > 1 {
            (1..n_threads).collect()
        } else {
            vec![0]
        };
        let ports_per_thread = (65536 - FIRST_PORT) / threads.len() as u32;
        Snapshot {
            generation: c.generation,
            roles,
            pool,
            external,
            mappings,
            mapping_ext,
            by_local,
            by_external,
            timeouts: c.timeouts,
            threads,
            ports_per_thread,
            max_sessions: c.max_sessions.unwrap_or(0),
        }
    }

    /// The role bits of an interface.
    #[inline(always)]
    pub fn role(&self, sw_if: u32) -> u8 {
        self.roles.get(sw_if as usize).copied().unwrap_or(0)
    }

    /// Whether `a` is an external address (pool or static mapping).
    #[inline(always)]
    pub fn is_external(&self, a: u32) -> bool {
        match self.external.len() {
            0 => false,
            1 => self.external[0] == a,
            _ => self.external.binary_search(&a).is_ok(),
        }
    }

    fn find(v: &[(SmKey, u32)], k: SmKey) -> Option<u32> {
        if v.is_empty() {
            return None;
        }
        v.binary_search_by(|e| e.0.cmp(&k)).ok().map(|i| v[i].1)
    }

    /// The mapping whose inside side matches a packet's source (port mapping of its
    /// protocol first, then address-only).
    #[inline]
    pub fn mapping_by_local(&self, addr: u32, port: u16, proto: u8, fib: u32) -> Option<u32> {
        if self.by_local.is_empty() {
            return None;
        }
        Self::find(&self.by_local, (addr, port, proto, fib))
            .or_else(|| Self::find(&self.by_local, (addr, 0, 0, fib)))
    }

    /// The mapping whose outside side matches a packet's destination.
    #[inline]
    pub fn mapping_by_external(&self, addr: u32, port: u16, proto: u8) -> Option<u32> {
        if self.by_external.is_empty() {
            return None;
        }
        Self::find(&self.by_external, (addr, port, proto, 0))
            .or_else(|| Self::find(&self.by_external, (addr, 0, 0, 0)))
    }

    /// Whether (address, port, protocol) is the outside side of a port mapping (never
    /// handed out dynamically).
    #[inline]
    pub fn is_static_external_port(&self, addr: u32, port: u16, proto: u8) -> bool {
        !self.by_external.is_empty()
            && Self::find(&self.by_external, (addr, port, proto, 0)).is_some()
    }

    /// The owning-thread slot (index into [`Snapshot::threads`]) of an outside port or
    /// ICMP identifier: dynamic ports are partitioned among the owning threads.
    #[inline(always)]
    pub fn slot_of_port(&self, port: u16) -> usize {
        let n = self.threads.len();
        if n <= 1 {
            return 0;
        }
        let p = port as u32;
        if p >= FIRST_PORT {
            (((p - FIRST_PORT) / self.ports_per_thread) as usize).min(n - 1)
        } else {
            p as usize % n
        }
    }

    /// The dynamic port range of an owning-thread slot.
    pub fn port_range(&self, slot: usize) -> (u32, u32) {
        let lo = FIRST_PORT + slot as u32 * self.ports_per_thread;
        let hi = if slot + 1 == self.threads.len() {
            65536
        } else {
            lo + self.ports_per_thread
        };
        (lo, hi)
    }

    /// The owning-thread slot of a packet arriving on an inside interface, from the tuple
    /// of its session's inside flow (`t`: inside source, remote destination) — the same for
    /// both directions of every session, so replies find it:
    /// - the source is the inside side of a static mapping: the slot of its outside port;
    /// - the destination is the outside side of a static mapping (hairpinning): the slot of
    ///   that port;
    /// - otherwise a hash of the tuple (the session's outside port is then allocated from
    ///   that slot's range).
    #[inline]
    pub fn slot_in2out(&self, t: &Tuple, fib: u32) -> usize {
        let n = self.threads.len();
        if n <= 1 {
            return 0;
        }
        let sp = t.src_port_or_id();
        if let Some(m) = self.mapping_by_local(t.src, sp, t.proto, fib) {
            let m = &self.mappings[m as usize];
            return self.slot_of_port(m.external_port.unwrap_or(sp));
        }
        if self.is_external(t.dst) {
            let dp = t.dst_port_or_id();
            if self.mapping_by_external(t.dst, dp, t.proto).is_some() {
                return self.slot_of_port(dp);
            }
        }
        let h = (t.src as u64) << 32 | t.dst as u64;
        let h =
            h ^ ((t.sport as u64) << 24 | (t.dport as u64) << 8 | t.proto as u64).rotate_left(41);
        let h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        ((h >> 32) as usize * n) >> 32
    }
}

/// An IPv4 address for output.
pub fn ip(a: u32) -> Ipv4Addr {
    Ipv4Addr::from(a)
}

/// A protocol's name as VPP prints it.
pub fn proto_name(p: u8) -> &'static str {
    match p {
        6 => "TCP",
        17 => "UDP",
        1 => "ICMP",
        _ => "unknown",
    }
}

impl fmt::Display for AddrSrc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            AddrSrc::Fixed(a) => write!(f, "{}", ip(a)),
            AddrSrc::Interface(i) => write!(f, "interface index {i}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_partition_among_workers() {
        let c = Control::default();
        let s = Snapshot::build(&c, 4, |_| None);
        assert_eq!(s.threads, vec![1, 2, 3]);
        for slot in 0..3 {
            let (lo, hi) = s.port_range(slot);
            for p in [lo, (lo + hi) / 2, hi - 1] {
                assert_eq!(s.slot_of_port(p as u16), slot, "{p}");
            }
        }
        assert_eq!(s.port_range(2).1, 65536);
        let one = Snapshot::build(&c, 1, |_| None);
        assert_eq!(one.threads, vec![0]);
        assert_eq!(one.port_range(0), (1024, 65536));
    }

    #[test]
    fn static_mappings_are_found_by_either_side() {
        let mut c = Control::default();
        c.mappings.insert(
            0,
            StaticMapping {
                local: 10,
                local_port: Some(80),
                external: AddrSrc::Fixed(20),
                external_port: Some(8080),
                proto: Some(6),
                fib: 0,
                vrf: 0,
                identity: false,
                id: 0,
            },
        );
        c.mappings.insert(
            1,
            StaticMapping {
                local: 11,
                local_port: None,
                external: AddrSrc::Interface(3),
                external_port: None,
                proto: None,
                fib: 0,
                vrf: 0,
                identity: false,
                id: 1,
            },
        );
        let s = Snapshot::build(&c, 3, |i| (i == 3).then_some(21));
        assert_eq!(s.mapping_by_local(10, 80, 6, 0), Some(0));
        assert_eq!(s.mapping_by_local(10, 81, 6, 0), None);
        assert_eq!(s.mapping_by_local(11, 5, 17, 0), Some(1));
        assert_eq!(s.mapping_by_external(20, 8080, 6), Some(0));
        assert_eq!(s.mapping_by_external(21, 1, 1), Some(1));
        assert!(s.is_external(21) && s.is_external(20) && !s.is_external(10));
        assert!(s.is_static_external_port(20, 8080, 6));
        // Both directions of a static session pick the same slot.
        let out = Tuple {
            src: 10,
            sport: 80,
            dst: 99,
            dport: 5555,
            proto: 6,
        };
        assert_eq!(s.slot_in2out(&out, 0), s.slot_of_port(8080));
        let hairpin = Tuple {
            src: 12,
            sport: 4444,
            dst: 20,
            dport: 8080,
            proto: 6,
        };
        assert_eq!(s.slot_in2out(&hairpin, 0), s.slot_of_port(8080));
    }
}
