//! The FIB change count ([`sluice_fib::changes`]) moves by exactly one per write that can
//! change what a lookup returns, and not at all for a write that changes nothing.
//!
//! Its own test binary with one test: the count is process-wide, and the crate's other tests
//! (the LPM proptests, the concurrent-reader tests) bump it in parallel, so in their process
//! an exact count could not be asserted and a missing count could hide behind theirs.

use sluice_fib::{adj, changes, ip4, ip6, lb};
use sluice_infra::epoch::Epochs;

#[test]
fn every_fib_write_counts_one_change_and_a_no_op_none() {
    let e = Epochs::new(1);
    let step = |what: &str, n: u64, f: &mut dyn FnMut()| {
        let before = changes();
        f();
        assert_eq!(changes(), before + n, "{what}: counted changes");
    };
    let mut t4 = ip4::Ip4Lpm::new();
    step("ip4 insert", 1, &mut || {
        t4.insert(&e, 0x0a00_0000, 8, 1).unwrap()
    });
    step("ip4 insert /25 (with a group)", 1, &mut || {
        t4.insert(&e, 0x0a00_0080, 25, 2).unwrap()
    });
    step("ip4 insert of a bad length", 0, &mut || {
        assert!(t4.insert(&e, 0x0a00_0000, 33, 1).is_err())
    });
    step("ip4 remove", 1, &mut || {
        assert_eq!(t4.remove(&e, 0x0a00_0000, 8), Some(1));
    });
    step("ip4 remove of an absent prefix", 0, &mut || {
        assert_eq!(t4.remove(&e, 0x0b00_0000, 8), None);
    });
    let mut t6 = ip6::Ip6Lpm::new();
    step("ip6 insert", 1, &mut || {
        t6.insert(&e, 1 << 127, 128, 1).unwrap()
    });
    step("ip6 insert of a bad length", 0, &mut || {
        assert!(t6.insert(&e, 1 << 127, 129, 1).is_err())
    });
    step("ip6 remove", 1, &mut || {
        assert_eq!(t6.remove(&e, 1 << 127, 128), Some(1));
    });
    step("ip6 remove of an absent prefix", 0, &mut || {
        assert_eq!(t6.remove(&e, 1 << 127, 128), None);
    });
    let mut a = adj::Adjacencies::new();
    let i = a
        .find_or_add((adj::AdjKind::Rewrite, 1, 2), || adj::Adj::DROP)
        .unwrap();
    step("adjacency update", 1, &mut || a.update(i, adj::Adj::DROP));
    step("update of an absent adjacency", 0, &mut || {
        a.update(i + 1000, adj::Adj::DROP)
    });
    let mut l = lb::LoadBalances::new();
    let k = l.alloc().unwrap();
    step("load-balance set", 1, &mut || l.set(k, &[(1, 1), (2, 1)]));
}
