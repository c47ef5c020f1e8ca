//! The generated modules (`plugins/p4/src/generated/`, `sluice-p4c`) are what the generator
//! makes of their example programs today (their behaviour against the interpreters is
//! checked in `vector.rs` and, in the graph, `graph.rs`).

#[test]
fn generated_modules_are_up_to_date() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    for g in sluice_p4::generated::ALL {
        let src = std::fs::read_to_string(format!("{root}/{}", g.source)).unwrap();
        let want = sluice_p4::gen::from_source(&src, g.source, g.name).unwrap();
        let path = format!("{root}/plugins/p4/src/generated/{}.rs", g.name);
        let have = std::fs::read_to_string(&path).unwrap();
        assert!(
            have == want,
            "{path} is stale: regenerate with `cargo run -p sluice-p4 --bin sluice-p4c -- {} -o {path}`",
            g.source
        );
    }
}

#[test]
fn programs_outside_the_generator_say_why() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples");
    for (f, why) in [("tunnel.p4", "validity"), ("firewall.p4", "registers")] {
        let src = std::fs::read_to_string(format!("{dir}/{f}")).unwrap();
        let e = sluice_p4::gen::from_source(&src, f, "x").unwrap_err();
        assert!(
            e.starts_with("not supported by the generator: ") && e.contains(why),
            "{e}"
        );
    }
    let e = sluice_p4::gen::from_source("header", "bad.p4", "x").unwrap_err();
    assert!(e.contains("bad.p4:1:"), "{e}");
}
