//! Ethernet with 802.1Q / 802.1ad / Q-in-Q tags (`parse_tags`, `EthernetFrame`) on arbitrary
//! frames: the L3 offset is consistent with the tags found and inside the frame, and the
//! inner tag only exists under an outer one.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_wire::ethernet::{parse_tags, EthernetFrame, EthernetRepr};

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = EthernetFrame::new_checked(data) {
        let r = EthernetRepr::parse(&f);
        let et = f.ethertype();
        assert_eq!(r.ethertype, et);
        let _ = (
            f.dst().is_multicast(),
            f.src().to_string(),
            et.name(),
            et.to_string(),
        );
        assert_eq!(f.payload().len() + 14, data.len());
    }
    let Ok(t) = parse_tags(data) else {
        return;
    };
    assert!(t.l3_offset <= data.len());
    let expect = match (t.outer, t.inner) {
        (None, None) => 14,
        (Some(_), None) => 18,
        (Some(_), Some(_)) => 22,
        (None, Some(_)) => panic!("inner tag without an outer one"),
    };
    assert_eq!(t.l3_offset, expect);
    if let Some((tpid, vid)) = t.outer {
        assert!(tpid.is_vlan_tag() && vid < 4096);
    }
    assert!(!t.ethertype.is_vlan_tag() || t.inner.is_some() || t.outer.is_some());
});
