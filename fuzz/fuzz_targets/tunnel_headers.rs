//! The tunnel plugins' header parsers on arbitrary bytes: the SRv6 segment routing header
//! (`srv6::parse_srh`) and the GTP-U header (`gtpu::parse`). Whatever they accept lies
//! within the input and is self-consistent (segments left ≤ last entry, the segment list
//! inside the header; the GTP-U header and its extension headers inside the datagram).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_tunnels::{gtpu, srv6};

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = srv6::parse_srh(data) {
        assert!(s.len <= data.len());
        assert!(s.segments_left <= s.last_entry);
        assert!(8 + (s.last_entry as usize + 1) * 16 <= s.len);
    }
    if let Ok(g) = gtpu::parse(data) {
        assert!(g.hdr_len <= data.len());
        assert_eq!(u16::from_be_bytes([data[2], data[3]]) as usize + 8, data.len());
    }
});
