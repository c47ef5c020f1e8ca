//! The startup.conf parser on arbitrary bytes (lossily converted, and raw through
//! `parse_bytes`), then a schema-less walk of every section with a `SectionCursor`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_cli::conf::{parse, parse_bytes, parse_size, ConfFile, SectionCursor};

fn walk(cf: &ConfFile) {
    for s in &cf.sections {
        let mut c = SectionCursor::new(s, "fuzz.conf");
        while let Some(k) = c.next_key() {
            let _ = parse_size(&k.text);
            match c.peek().map(|t| t.text.as_str()) {
                Some("{") => {
                    let _ = c.block(k);
                }
                Some(_) => {
                    let _ = c.value_u64(k);
                }
                None => {
                    let _ = c.unknown(k).to_string();
                }
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(cf) = parse(&text, "fuzz.conf") {
        walk(&cf);
    }
    match parse_bytes(data, "fuzz.conf") {
        Ok(cf) => walk(&cf),
        Err(e) => assert!(e.line >= 1),
    }
});
