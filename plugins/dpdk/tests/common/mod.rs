//! Harness for the dpdk plugin's tests: the real runtime (graph, vnet, the dpdk and memif
//! plugins) assembled in-process from a startup.conf text and driven through its CLI.
//!
//! EAL can be started once per process, so every scenario runs in a child process of its
//! own: the `#[test]` function re-executes the test binary for just itself
//! ([`in_child`]), with `SLUICE_DPDK_CHILD` set, and checks its exit status.

#![allow(dead_code)]

use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};
use sluice_buffer::{PageSize, PoolConfig};
use sluice_cli::CommandTree;
use sluice_graph::{CpuConfig, Vlib};
use sluice_vnet::plugin::{assemble, Plugin, PluginsConfig, Staged};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Why DPDK tests cannot run here, if they cannot.
pub fn skip_reason() -> Option<String> {
    if sluice_dpdk::sys::SHIM.is_none() {
        return Some(format!(
            "DPDK support is not built ({})",
            sluice_dpdk::sys::NOT_BUILT_WHY
        ));
    }
    None
}

/// Why root-only DPDK tests cannot run here, if they cannot.
pub fn skip_reason_root() -> Option<String> {
    skip_reason().or_else(|| sluice_infra::testing::not_root("network namespaces"))
}

/// Runs `body` in a child process of its own (EAL starts once per process). `name` is the
/// calling test's name. The parent passes when the child exits 0 and prints its output.
pub fn in_child(name: &str, body: impl FnOnce()) {
    if std::env::var("SLUICE_DPDK_CHILD").as_deref() == Ok(name) {
        body();
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env("SLUICE_DPDK_CHILD", name)
        .output()
        .expect("run the child test");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    assert!(out.status.success(), "child `{name}' failed: {text}");
    // EAL may print in the middle of libtest's `test ... ok' line: look for the summary.
    assert!(
        text.contains("test result: ok. 1 passed"),
        "child `{name}' did not run the test: {text}"
    );
}

/// The assembled runtime and its CLI.
pub struct Rt {
    pub vm: Vlib,
    pub cli: CommandTree<Vlib>,
}

fn plugins() -> Vec<&'static dyn Plugin> {
    vec![&sluice_dpdk::PLUGIN, &sluice_memif::PLUGIN]
}

/// Assembles the runtime with `conf` (startup.conf text: plugin sections) and `workers`
/// worker threads. Errors are the daemon's one-line start-up errors.
pub fn start(conf: &str, workers: usize) -> Result<Rt, String> {
    let f = sluice_cli::conf::parse(conf, "test.conf").map_err(|e| e.to_string())?;
    let plugins = plugins();
    let mut staged = Staged::default();
    for s in &f.sections {
        let p = plugins
            .iter()
            .find(|p| p.config_sections().contains(&s.name.as_str()))
            .unwrap_or_else(|| panic!("no plugin owns section `{}'", s.name));
        p.configure(&mut staged, s, "test.conf")
            .map_err(|e| e.to_string())?;
    }
    let cpu = CpuConfig {
        main_core: None,
        workers: (0..workers).map(|_| None).collect(),
    };
    let pool = PoolConfig {
        buffers: 8192,
        data_size: 2048,
        page_size: PageSize::Small,
        shared: false,
    };
    let entries = PluginsConfig::default().entries(&plugins);
    let a = assemble(&entries, &cpu, &pool, staged).map_err(|e| e.to_string())?;
    Ok(Rt {
        vm: a.vm,
        cli: a.cli,
    })
}

impl Rt {
    /// Runs a CLI command; panics with its error.
    pub fn ok(&mut self, cmd: &str) -> String {
        self.cli
            .execute(&mut self.vm, cmd)
            .unwrap_or_else(|e| panic!("`{cmd}' failed: {e}"))
    }

    /// Runs a CLI command.
    pub fn cli(&mut self, cmd: &str) -> Result<String, String> {
        self.cli
            .execute(&mut self.vm, cmd)
            .map_err(|e| e.to_string())
    }

    /// Runs the main thread's dispatcher for `d`.
    pub fn run_for(&mut self, d: Duration) {
        let t0 = Instant::now();
        while t0.elapsed() < d {
            self.vm.run_main_once();
        }
    }

    /// Runs the dispatcher until `done` holds (checked every few loops), at most `limit`.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&mut Rt) -> bool) -> bool {
        let t0 = Instant::now();
        loop {
            for _ in 0..64 {
                self.vm.run_main_once();
            }
            if done(self) {
                return true;
            }
            if t0.elapsed() > limit {
                return false;
            }
        }
    }

    /// An interface counter (`show interface` row) summed over threads.
    pub fn if_counter(&mut self, name: &str, counter: &str) -> u64 {
        use sluice_vnet::interface::{counter as c, Interfaces};
        let i = c::NAMES
            .iter()
            .position(|n| *n == counter)
            .expect("counter");
        let ifs = self.vm.ext_mut::<Interfaces>();
        let sw = ifs
            .find(name)
            .unwrap_or_else(|| panic!("no interface {name}"));
        ifs.get(sw).unwrap().counters.total(i)
    }

    /// Buffers in use in the Sluice pool, but for those DPDK holds for good under zero copy
    /// (its mempool caches and descriptors), which must stay within what those can hold.
    pub fn buffers_in_use(&mut self) -> u64 {
        let u = sluice_graph::buffer_use(&self.vm);
        let bound = sluice_dpdk::lent_bound(&mut self.vm);
        assert!(
            u.lent <= bound,
            "DPDK holds {} Sluice buffers, more than its caches and descriptors can ({bound})",
            u.lent
        );
        u.used
    }

    /// The `show errors` count of node/reason, 0 if absent.
    pub fn error_count(&mut self, node: &str, reason: &str) -> u64 {
        let s = self.ok("show errors");
        s.lines()
            .filter(|l| l.contains(node) && l.contains(reason))
            .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
            .sum()
    }
}

pub fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sluice-dpdk-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let f = std::fs::File::create(path).unwrap();
    let mut w = PcapWriter::new(f).unwrap();
    for (i, fr) in frames.iter().enumerate() {
        w.write_packet(&PcapPacket::new(
            Duration::from_micros(i as u64),
            fr.len() as u32,
            fr,
        ))
        .unwrap();
    }
}

/// The packets of a pcap file (a truncated last record ends the list).
pub fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let Ok(f) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let Ok(mut r) = PcapReader::new(f) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    while let Some(Ok(p)) = r.next_packet() {
        out.push(p.data.into_owned());
    }
    out
}

/// Frame `seq` of `len` bytes from `src` to `dst` (ethertype 0x88b5, a sequence number, a
/// pattern that differs per frame).
pub fn frame(dst: [u8; 6], src: [u8; 6], len: usize, seq: u32) -> Vec<u8> {
    let mut f = Vec::with_capacity(len);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x88, 0xb5]);
    f.extend_from_slice(&seq.to_be_bytes());
    while f.len() < len {
        f.push((f.len() as u32 ^ seq.wrapping_mul(7)) as u8);
    }
    f
}

/// Runs a shell command, panicking with its output when it fails.
pub fn sh(cmd: &str) -> String {
    let o = std::process::Command::new("sh")
        .args(["-c", cmd])
        .output()
        .expect("sh");
    assert!(
        o.status.success(),
        "`{cmd}' failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}
