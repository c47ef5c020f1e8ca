//! Keeps docs/vpp-compatibility.md true: its command table against the daemon's `help`, its
//! startup.conf table against `sluice --check`.

mod common;

use common::*;
use std::collections::BTreeSet;
use std::process::Command;

const DOC: &str = include_str!("../../../docs/vpp-compatibility.md");

/// `(first column without backticks, status)` of the table rows under heading `h`.
fn table(h: &str) -> Vec<(String, String)> {
    let body = DOC
        .split("\n## ")
        .find(|s| s.starts_with(h))
        .unwrap_or_else(|| panic!("no section `{h}' in docs/vpp-compatibility.md"));
    body.lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cols: Vec<&str> = l.split(" | ").collect();
            let first = cols[0]
                .trim_start_matches("| ")
                .trim_matches('`')
                .to_string();
            (first, cols[1].trim().to_string())
        })
        .collect()
}

const STATUSES: [&str; 4] = ["supported", "differs", "not supported", "Sluice only"];

#[test]
fn command_table_matches_help() {
    let rows = table("CLI commands");
    assert!(rows.len() > 100, "{} rows", rows.len());
    for (c, st) in &rows {
        assert!(STATUSES.contains(&st.as_str()), "`{c}': bad status `{st}'");
    }
    let d = Daemon::start("compatdoc", "");
    let help: BTreeSet<String> = d
        .ok("help")
        .lines()
        .map(|l| l.split("  ").next().unwrap_or("").trim().to_string())
        .collect();
    let documented: BTreeSet<String> = rows.iter().map(|r| r.0.clone()).collect();
    let missing: Vec<_> = help.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "commands without a row in docs/vpp-compatibility.md: {missing:?}"
    );
    for (c, st) in &rows {
        if st == "not supported" {
            assert!(
                !help.contains(c),
                "`{c}' is marked not supported but exists"
            );
            assert!(d.cli(c).is_err(), "`{c}' is marked not supported but runs");
        } else {
            assert!(
                help.contains(c),
                "`{c}' is marked {st} but `help' does not list it"
            );
        }
    }
    d.stop();
}

#[test]
fn startup_table_matches_check() {
    let rows = table("startup.conf");
    assert!(rows.len() > 30, "{} rows", rows.len());
    let dir = tmpdir("compatconf");
    let script = dir.join("boot.cli");
    std::fs::write(&script, "show version\n").unwrap();
    for (snippet, st) in &rows {
        assert!(
            STATUSES.contains(&st.as_str()),
            "`{snippet}': bad status `{st}'"
        );
        let conf = dir.join("startup.conf");
        std::fs::write(
            &conf,
            format!("{}\n", snippet.replace("@FILE@", script.to_str().unwrap())),
        )
        .unwrap();
        let o = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("--check")
            .arg("-c")
            .arg(&conf)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        let warned = err.contains("warning");
        // The dpdk section is supported when the binary was built against libdpdk; a build
        // without it refuses the section with a one-line error, which is checked instead.
        if snippet.starts_with("dpdk") && err.contains("DPDK support is not built into this binary")
        {
            assert!(!o.status.success() && err.lines().count() == 1, "{err}");
            println!("SKIPPED: `{snippet}': this binary was built without DPDK");
            continue;
        }
        match st.as_str() {
            "supported" | "Sluice only" => assert!(
                o.status.success() && !warned,
                "`{snippet}' ({st}) should be accepted silently: {err}"
            ),
            "differs" => assert!(
                o.status.success() && warned,
                "`{snippet}' (differs) should be accepted with a warning: {err}"
            ),
            _ => assert!(
                !o.status.success() || warned,
                "`{snippet}' (not supported) was accepted silently"
            ),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
