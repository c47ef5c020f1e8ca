//! memif control messages on arbitrary bytes: the decoder must never panic, and whatever it
//! accepts must re-encode to a message that decodes the same way (ASCII names; other bytes
//! are decoded lossily and need not round-trip).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_memif::proto::{decode, encode};

fuzz_target!(|data: &[u8]| {
    let Ok(m) = decode(data) else {
        return;
    };
    let again = decode(&encode(&m));
    if data.is_ascii() {
        assert_eq!(again.as_ref(), Ok(&m));
    } else {
        assert!(again.is_ok());
    }
});
