//! The control API's message decoder (`sluice_api`): the server's frame splitter on any
//! bytes, then each frame's body decoded as the message its id selects (every message of
//! the core's schema modules, plus the control messages), and the `.api` schema parser on
//! the input as text.
//!
//! Invariants beyond "never panics": a frame never claims more bytes than the buffer holds;
//! a body that decodes re-encodes to bytes that decode and re-encode to the same bytes; a schema that
//! parses gives every message a CRC that a reparse of the same text reproduces.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_api::codec::{Decode, Encode, Reader, Writer};
use sluice_api::server::next_frame;
use sluice_api::{control, Message};
use sluice_vnet::api::{interface, ip, l2, pg};

fn check<M: Message>(body: &[u8]) {
    let mut r = Reader::new(body);
    let Ok(m) = M::decode(&mut r) else { return };
    if r.finish().is_err() {
        return;
    }
    let mut w = Writer::new();
    m.encode(&mut w);
    let mut r2 = Reader::new(&w.buf);
    let again = M::decode(&mut r2).expect("a decoded message re-encodes to a valid body");
    r2.finish().expect("and nothing more");
    // Compared as bytes (an f64 NaN is not equal to itself).
    let mut w2 = Writer::new();
    again.encode(&mut w2);
    assert_eq!(w2.buf, w.buf, "{}", M::NAME);
}

macro_rules! by_index {
    ($k:expr, $body:expr, $($t:ty),* $(,)?) => {{
        let table: &[fn(&[u8])] = &[$(check::<$t>),*];
        table[$k as usize % table.len()]($body)
    }};
}

fuzz_target!(|data: &[u8]| {
    let mut pos = 0;
    while pos < data.len() {
        match next_frame(&data[pos..]) {
            Ok(Some(f)) => {
                assert!(f.size <= data.len() - pos && f.size >= 10);
                by_index!(
                    f.id,
                    f.body,
                    control::ApiHello,
                    control::ApiHelloReply,
                    control::ApiError,
                    control::ApiDumpEnd,
                    interface::SwInterfaceDetails,
                    interface::CreateSubif,
                    interface::FeatureEnableDisable,
                    interface::SwInterfaceSetRxMode,
                    interface::SwInterfaceEvent,
                    ip::IpRouteAddDel,
                    ip::IpRouteDetails,
                    ip::IpNeighborAddDel,
                    ip::SwInterfaceAddDelAddress,
                    ip::IpRouteEvent,
                    l2::BridgeDomainDetails,
                    l2::L2fibAddDel,
                    pg::PgStreamAdd,
                    pg::PgCapture,
                );
                pos += f.size;
            }
            Ok(None) | Err(_) => break,
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(s) = sluice_api_schema::Schema::parse("fuzz", text, "fuzz.api") {
            let again = sluice_api_schema::Schema::parse("fuzz", text, "fuzz.api")
                .expect("parses twice");
            for (a, b) in s.messages.iter().zip(&again.messages) {
                assert_eq!(s.crc(a), again.crc(b));
            }
            let _ = sluice_api_schema::rust::generate(&s, std::path::Path::new("fuzz.api"));
        }
    }
});
