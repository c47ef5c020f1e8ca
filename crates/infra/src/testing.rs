//! What every test that needs something this machine may not have (root, a tool, a device)
//! shares: it reports itself **skipped**, visibly, instead of passing silently.
//!
//! `cargo test` has no "skipped" outcome and captures what a passing test prints, so a test
//! that returned early used to look exactly like one that ran. [`skip`] writes
//! `SKIPPED: <test>: <reason>` straight to the terminal (past the harness's capture, so it is
//! seen in a normal run), and with `SLUICE_TEST_NO_SKIP=1` in the environment it fails the
//! test instead: a run that must exercise everything (CI as root) cannot pass by skipping.
//!
//! ```
//! use sluice_infra::{skip_if, testing};
//! fn needs_root_and_ip() {
//!     skip_if!(testing::not_root("network namespaces").or_else(|| testing::missing_tool("ip", "-V")));
//!     // ... the test ...
//! }
//! ```

use std::io::Write;
use std::process::{Command, Stdio};

/// Environment variable that turns every skip into a failure.
pub const NO_SKIP_ENV: &str = "SLUICE_TEST_NO_SKIP";

/// Reports the running test as skipped for `reason` (see the module doc). With
/// [`NO_SKIP_ENV`]`=1` it panics instead.
pub fn skip(reason: &str) {
    skip_strict(reason, std::env::var(NO_SKIP_ENV).as_deref() == Ok("1"));
}

fn skip_strict(reason: &str, strict: bool) {
    let test = std::thread::current()
        .name()
        .unwrap_or("<unnamed test>")
        .to_string();
    if strict {
        panic!("{test} would be skipped ({reason}) but {NO_SKIP_ENV}=1");
    }
    // Not eprintln!: the test harness captures that for passing tests.
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED: {test}: {reason}");
}

/// `Some(reason)` when the process is not root; `what` says what needs root.
pub fn not_root(what: &str) -> Option<String> {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    (unsafe { libc::geteuid() } != 0).then(|| format!("not root ({what} need root)"))
}

/// `Some(reason)` when `cmd arg` cannot be run successfully (the tool is not installed).
pub fn missing_tool(cmd: &str, arg: &str) -> Option<String> {
    let ok = Command::new(cmd)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    (!ok).then(|| format!("`{cmd}' is not installed"))
}

/// Returns from the calling test, reported skipped, when the `Option<String>` reason is
/// `Some` (see [`skip`]).
#[macro_export]
macro_rules! skip_if {
    ($reason:expr) => {
        if let Some(why) = $reason {
            $crate::testing::skip(&why);
            return;
        }
    };
}

#[cfg(test)]
mod tests {
    #[test]
    #[should_panic(expected = "would be skipped (no frobnicator) but SLUICE_TEST_NO_SKIP=1")]
    fn strict_runs_fail_instead_of_skipping() {
        super::skip_strict("no frobnicator", true);
    }

    #[test]
    fn reasons() {
        assert_eq!(
            super::missing_tool("/nonexistent/tool", "-V").as_deref(),
            Some("`/nonexistent/tool' is not installed")
        );
        assert_eq!(super::missing_tool("true", "x"), None);
    }
}
