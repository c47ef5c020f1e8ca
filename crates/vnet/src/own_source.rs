//! The fast-path source tests of `ip4-input` and `ip6-input` (RFC 1812 §5.3.7): martian
//! IPv4 sources by their first octet, and the router's own addresses as a received packet's
//! source — a router must not forward a packet whose source is one of its own addresses
//! (VPP drops it through its source lookup).
//!
//! [`SourceFilter`] is one table per vnet instance: 64 Ki bytes keyed by a source's last two
//! bytes, non-zero while one of the router's addresses (any interface, any table, either
//! family) ends with them, and the 256-entry martian first-octet table after them, so both
//! IPv4 tests are one pointer load and two byte loads merged into one branch. Only a packet
//! whose slot is set gets the exact test, [`is_local`]: the source looked up in the rx
//! interface's table resolves to a local (receive) adjacency.
//!
//! The main thread keeps the slots: each family's control plane holds an [`OwnKeys`] that
//! counts its addresses per key.

use crate::routes::LB_FLAG;
use sluice_fib::adj::{AdjKind, AdjTable};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// Number of own-address slots: one per value of an address's last two bytes.
const SLOTS: usize = 1 << 16;

/// The source tests' tables, held by the nodes as an `Arc` (the tables inline: one pointer
/// load reaches both).
pub struct SourceFilter {
    /// Per key: how many of the two families' [`OwnKeys`] hold it (saturating at 255,
    /// then kept).
    own: [AtomicU8; SLOTS],
    martian4: [bool; 256],
}

impl SourceFilter {
    /// An empty filter, on the heap (64 KiB).
    pub fn new_shared() -> Arc<Self> {
        let mut martian4 = [false; 256];
        for (o, m) in martian4.iter_mut().enumerate() {
            *m = o == 0 || o == 127 || o >= 224;
        }
        Arc::new(SourceFilter {
            own: [const { AtomicU8::new(0) }; SLOTS],
            martian4,
        })
    }

    /// Whether an IPv4 source's first octet makes it a martian (0/8, 127/8, 224/4, 240/4).
    #[inline(always)]
    pub fn martian4(&self, first_octet: u8) -> bool {
        self.martian4[first_octet as usize]
    }

    /// Whether a source with this [`key`] may be one of the router's addresses (a `u16`
    /// index needs no bounds check).
    #[inline(always)]
    pub fn may_be_own(&self, key: u16) -> bool {
        self.own[key as usize].load(Ordering::Relaxed) != 0
    }

    /// `ip4-input`'s fast-path test: a martian first octet, or a source that may be one of
    /// ours (`src`: the header's source bytes). One branch for both.
    #[inline(always)]
    pub fn suspect4(&self, src: &[u8; 4]) -> bool {
        let k = key(src.last_chunk::<2>().unwrap_or(&[0; 2]));
        (self.martian4[src[0] as usize] as u8 | self.own[k as usize].load(Ordering::Relaxed)) != 0
    }

    fn hold(&self, k: u16) {
        let _ = self.own[k as usize].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
            (v < u8::MAX).then_some(v + 1)
        });
    }

    fn release(&self, k: u16) {
        let _ = self.own[k as usize].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
            (v != 0 && v < u8::MAX).then_some(v - 1)
        });
    }
}

/// The filter's key of a packet's source: its last two bytes as they are in the packet,
/// loaded in native byte order (no byte swap on the fast path).
#[inline(always)]
pub fn key(last_two: &[u8; 2]) -> u16 {
    u16::from_ne_bytes(*last_two)
}

/// The filter's key of an address (host order).
pub fn key_of<A: Into<u128>>(a: A) -> u16 {
    key(&(a.into() as u16).to_be_bytes())
}

/// One family's addresses in the filter (main thread): a count per key, the filter's slot
/// held while it is non-zero; released on drop.
pub struct OwnKeys {
    filter: Arc<SourceFilter>,
    counts: HashMap<u16, u32>,
}

impl OwnKeys {
    /// No addresses yet.
    pub fn new(filter: Arc<SourceFilter>) -> Self {
        OwnKeys {
            filter,
            counts: HashMap::new(),
        }
    }

    /// An address was added.
    pub fn add<A: Into<u128>>(&mut self, a: A) {
        let k = key_of(a);
        let n = self.counts.entry(k).or_insert(0);
        *n += 1;
        if *n == 1 {
            self.filter.hold(k);
        }
    }

    /// An address was removed.
    pub fn remove<A: Into<u128>>(&mut self, a: A) {
        let k = key_of(a);
        if let Some(n) = self.counts.get_mut(&k) {
            *n -= 1;
            if *n == 0 {
                self.counts.remove(&k);
                self.filter.release(k);
            }
        }
    }
}

impl Drop for OwnKeys {
    fn drop(&mut self) {
        for &k in self.counts.keys() {
            self.filter.release(k);
        }
    }
}

/// Whether `fib_value` (a source's FIB lookup result) is one of the router's own addresses:
/// a local (receive) adjacency, never a load-balance.
#[inline]
pub fn is_local(adj: &AdjTable, fib_value: Option<u32>) -> bool {
    fib_value
        .filter(|&v| v < LB_FLAG)
        .is_some_and(|v| adj.get(v).kind == AdjKind::Local)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_follows_the_addresses_sharing_it() {
        let f = SourceFilter::new_shared();
        let (mut v4, mut v6) = (OwnKeys::new(f.clone()), OwnKeys::new(f.clone()));
        let (a, b) = (0x0a00_0001u32, 0x0b00_0001u32);
        let one = key(&[0, 1]);
        assert!(!f.may_be_own(one));
        v4.add(a);
        v4.add(b);
        assert!(f.may_be_own(one) && f.suspect4(&[10, 9, 0, 1]));
        // a removed, b (same last two bytes) still there.
        v4.remove(a);
        assert!(f.may_be_own(one));
        let v6a: u128 = 0xfd00_0000_0000_0000_0000_0000_0000_0001;
        v6.add(v6a);
        v4.remove(b);
        assert!(f.may_be_own(one), "held by IPv6");
        drop(v6);
        assert!(!f.may_be_own(one) && !f.suspect4(&[10, 9, 0, 1]));
        assert!(f.suspect4(&[127, 0, 0, 2]) && f.suspect4(&[224, 0, 0, 5]));
        assert!(!f.suspect4(&[223, 255, 255, 254]) && f.suspect4(&[0, 1, 2, 3]));
        v4.add(0x0a00_0102u32);
        assert!(f.may_be_own(key(&[1, 2])) && !f.may_be_own(key(&[2, 1])));
    }
}
