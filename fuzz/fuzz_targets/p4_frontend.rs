//! The P4 front end (lexer, parser, type checker, lowering) on arbitrary text; a program
//! that compiles is then run on packets cut from the same input, in every optimisation
//! mode, and given to the Rust generator (`sluice-p4c`): nothing may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_p4::exec::{simulate, Shared, ThreadState};
use sluice_p4::ir::Opts;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for bits in [0u8, 15] {
        let o = Opts {
            flat: bits & 1 != 0,
            resolved: bits & 2 != 0,
            no_redundant: bits & 4 != 0,
            dual: bits & 8 != 0,
        };
        let Ok(p) = sluice_p4::compile(&text, "fuzz.p4", o) else {
            return;
        };
        let _ = sluice_p4::gen::rust(&p, "fuzz", "fuzz.p4");
        let Ok(mut ts) = ThreadState::new(&p) else {
            return;
        };
        let sh = Shared::new(&p);
        for chunk in data.chunks(64).take(8) {
            let _ = simulate(&p, &mut ts, &sh, chunk, 1);
        }
    }
});
