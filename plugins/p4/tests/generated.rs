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
fn every_generated_module_is_listed() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/generated");
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| f.ends_with(".rs") && f != "mod.rs")
        .collect();
    files.sort();
    let mut listed: Vec<String> = sluice_p4::generated::ALL
        .iter()
        .map(|g| format!("{}.rs", g.name))
        .collect();
    listed.sort();
    assert_eq!(files, listed, "src/generated/*.rs against generated::ALL");
}

/// `sluice-p4c` writes the same module whether it is given the source as `./<path>` or an
/// absolute path, from the repository or elsewhere.
#[test]
fn generator_output_does_not_depend_on_the_path_given() {
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .canonicalize()
        .unwrap();
    let g = &sluice_p4::generated::ALL[0];
    let want =
        std::fs::read_to_string(root.join(format!("plugins/p4/src/generated/{}.rs", g.name)))
            .unwrap();
    let abs = root.join(g.source);
    for (cwd, arg) in [
        (root.clone(), format!("./{}", g.source)),
        (std::env::temp_dir(), abs.display().to_string()),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice-p4c"))
            .current_dir(&cwd)
            .args([arg.as_str(), "--name", g.name])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{arg}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            String::from_utf8_lossy(&out.stdout) == want,
            "`sluice-p4c {arg}' from {cwd:?} differs"
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
