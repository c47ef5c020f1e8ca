//! Detects Debian's DPDK (`pkg-config libdpdk`) and, when it is there, compiles the thin C
//! shim (`src/shim.c`) against it with the system C compiler into a shared object linked
//! against libdpdk; the crate embeds it and is built with `--cfg sluice_dpdk`. The binary
//! itself does not link libdpdk: the plugin loads the shim (and with it libdpdk) only when a
//! `dpdk` section asks for DPDK, so a machine without DPDK installed runs the same binary and
//! a missing library is a one-line error at start. Without libdpdk (or with `SLUICE_DPDK=0`) the plugin is
//! built without DPDK support: it still registers, says so in `show plugins`, and refuses a
//! `dpdk` section with a one-line error. `SLUICE_DPDK=1` makes a missing libdpdk a build
//! error instead.

use std::path::PathBuf;
use std::process::Command;

fn pkg_config(args: &[&str]) -> Option<String> {
    let out = Command::new(std::env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".into()))
        .args(args)
        .arg("libdpdk")
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn run(cmd: &mut Command) -> Result<(), String> {
    match cmd.output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "{:?} failed: {}",
            cmd,
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .next()
                .unwrap_or("")
        )),
        Err(e) => Err(format!("cannot run {:?}: {e}", cmd.get_program())),
    }
}

fn main() {
    println!("cargo:rustc-check-cfg=cfg(sluice_dpdk)");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/shim.c");
    for v in ["SLUICE_DPDK", "PKG_CONFIG", "PKG_CONFIG_PATH", "CC"] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    let want = std::env::var("SLUICE_DPDK").ok();
    if want.as_deref() == Some("0") {
        println!("cargo:rustc-env=SLUICE_DPDK_WHY=built with SLUICE_DPDK=0");
        return;
    }
    let required = want.as_deref() == Some("1");
    let missing = |why: String| {
        if required {
            panic!("SLUICE_DPDK=1 but {why}");
        }
        println!("cargo:rustc-env=SLUICE_DPDK_WHY={why}");
    };
    let (Some(cflags), Some(libs), Some(version)) = (
        pkg_config(&["--cflags"]),
        pkg_config(&["--libs"]),
        pkg_config(&["--modversion"]),
    ) else {
        return missing("libdpdk was not found by pkg-config at build time".into());
    };
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let lib = out.join("libsluice_dpdk_shim.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut compile = Command::new(&cc);
    // -g1: line tables only, so a profiler names the shim's lines (SLUICE_DPDK_SHIM_FILE).
    compile
        .args([
            "-O2", "-g1", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror",
        ])
        .args(["-Wl,-z,defs", "src/shim.c", "-o"])
        .arg(&lib)
        .args(cflags.split_whitespace())
        .args(libs.split_whitespace());
    if let Err(e) = run(&mut compile) {
        return missing(format!("the DPDK shim did not compile ({e})"));
    }
    println!("cargo:rustc-cfg=sluice_dpdk");
    println!("cargo:rustc-env=SLUICE_DPDK_VERSION={version}");
    println!("cargo:rustc-env=SLUICE_DPDK_WHY=");
}
