//! Typed startup.conf: VPP brace syntax parsed by `sluice_cli::conf`, validated here. Unknown
//! sections, unknown keys and bad values are errors naming `file:line` and the token.

use sluice_buffer::{PageSize, PoolConfig};
use sluice_cli::conf::{self, ConfError, ConfFile, Section, SectionCursor};
use sluice_graph::CpuConfig;
use sluice_stats::collector::StatsConfig;
use std::path::PathBuf;

/// `unix { ... }`.
#[derive(Clone, Debug, Default)]
pub struct UnixConfig {
    /// CLI socket path (`cli-listen`).
    pub cli_listen: Option<PathBuf>,
    /// Interactive prompt on stdin (`interactive`).
    pub interactive: bool,
    /// CLI script run at boot (`exec` / `startup-config`).
    pub exec: Option<PathBuf>,
    /// Log file (`log`).
    pub log: Option<PathBuf>,
    /// Sleep between loops when idle, microseconds (`poll-sleep-usec`).
    pub poll_sleep_usec: Option<u64>,
    /// `cli-prompt`.
    pub cli_prompt: Option<String>,
}

/// `metrics { listen <addr:port> [prefix <s>] }`: the Prometheus endpoint.
#[derive(Clone, Debug, Default)]
pub struct MetricsConfig {
    /// Listen address.
    pub listen: Option<std::net::SocketAddr>,
    /// Put in front of every metric name (e.g. `vpp_`).
    pub prefix: String,
}

/// The whole startup configuration.
#[derive(Clone, Debug, Default)]
pub struct StartupConfig {
    /// `unix`.
    pub unix: UnixConfig,
    /// `cpu`.
    pub cpu: CpuConfig,
    /// `buffers`.
    pub buffers: PoolConfig,
    /// `api { socket <path> }`.
    pub api_socket: Option<PathBuf>,
    /// `metrics`.
    pub metrics: MetricsConfig,
    /// `statseg`.
    pub statseg: StatsConfig,
    /// Warnings to log once the logger is up (sections accepted but not used).
    pub warnings: Vec<String>,
}

/// VPP sections Sluice accepts and ignores with a warning.
const IGNORED_SECTIONS: &[&str] = &[
    "dpdk",
    "plugins",
    "api-trace",
    "api-segment",
    "socksvr",
    "memory",
    "logging",
    "node",
    "l3fib",
    "l2fib",
    "ip",
    "ip6",
    "linux-cp",
    "linux-nl",
    "punt",
    "session",
    "tcp",
];

/// Parses and validates a startup.conf text.
pub fn parse(text: &str, file: &str) -> Result<StartupConfig, ConfError> {
    let cf = conf::parse(text, file)?;
    from_conf(&cf, file)
}

/// Validates a parsed file.
pub fn from_conf(cf: &ConfFile, file: &str) -> Result<StartupConfig, ConfError> {
    let mut cfg = StartupConfig::default();
    for s in &cf.sections {
        match s.name.as_str() {
            "unix" => unix(s, file, &mut cfg)?,
            "cpu" => cpu(s, file, &mut cfg)?,
            "buffers" => buffers(s, file, &mut cfg)?,
            "api" => api(s, file, &mut cfg)?,
            "metrics" => metrics(s, file, &mut cfg)?,
            "statseg" => statseg(s, file, &mut cfg)?,
            n if IGNORED_SECTIONS.contains(&n) => cfg.warnings.push(format!(
                "{file}:{}: section `{n}' is accepted for VPP compatibility and ignored",
                s.line
            )),
            n => {
                return Err(ConfError {
                    file: file.to_string(),
                    line: s.line,
                    msg: format!("unknown section `{n}'"),
                })
            }
        }
    }
    Ok(cfg)
}

fn unix(s: &Section, file: &str, cfg: &mut StartupConfig) -> Result<(), ConfError> {
    let mut c = SectionCursor::new(s, file);
    while let Some(k) = c.next_key() {
        match k.text.as_str() {
            "cli-listen" => {
                let v = c.value(k)?;
                // VPP also accepts host:port for a TCP CLI; Sluice serves only Unix sockets.
                if !v.text.starts_with('/') && !v.text.starts_with('.') && v.text.contains(':') {
                    return Err(c.error(
                        v,
                        &format!(
                            "cli-listen `{}': only Unix socket paths are supported",
                            v.text
                        ),
                    ));
                }
                cfg.unix.cli_listen = Some(PathBuf::from(&v.text));
            }
            "interactive" => cfg.unix.interactive = true,
            "exec" | "startup-config" => cfg.unix.exec = Some(PathBuf::from(&c.value(k)?.text)),
            "log" => cfg.unix.log = Some(PathBuf::from(&c.value(k)?.text)),
            "poll-sleep-usec" => cfg.unix.poll_sleep_usec = Some(c.value_u64(k)?),
            "cli-prompt" => cfg.unix.cli_prompt = Some(c.value(k)?.text.clone()),
            "nodaemon" | "full-coredump" | "nocolor" | "nobanner" | "coredump-size" => {
                if k.text == "coredump-size" {
                    c.value(k)?;
                }
            }
            "gid" | "runtime-dir" | "pidfile" | "cli-history-limit" | "cli-line-mode" => {
                if k.text != "cli-line-mode" {
                    c.value(k)?;
                }
            }
            _ => return Err(c.unknown(k)),
        }
    }
    Ok(())
}

fn parse_corelist(c: &SectionCursor, tok: &conf::Token) -> Result<Vec<usize>, ConfError> {
    let mut out = Vec::new();
    for part in tok.text.split(',') {
        let bad = || c.error(tok, &format!("bad core list `{}'", tok.text));
        if let Some((a, b)) = part.split_once('-') {
            let a: usize = a.parse().map_err(|_| bad())?;
            let b: usize = b.parse().map_err(|_| bad())?;
            if b < a || b - a > 1024 {
                return Err(bad());
            }
            out.extend(a..=b);
        } else {
            out.push(part.parse().map_err(|_| bad())?);
        }
    }
    Ok(out)
}

fn cpu(s: &Section, file: &str, cfg: &mut StartupConfig) -> Result<(), ConfError> {
    let mut c = SectionCursor::new(s, file);
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    while let Some(k) = c.next_key() {
        match k.text.as_str() {
            "main-core" => {
                let v = c.value_u64(k)? as usize;
                if v >= ncpu {
                    return Err(
                        c.error(k, &format!("main-core {v}: this machine has {ncpu} cores"))
                    );
                }
                cfg.cpu.main_core = Some(v);
            }
            "workers" => {
                let n = c.value_u64(k)?;
                if n > 64 {
                    return Err(c.error(k, &format!("workers {n}: at most 64")));
                }
                cfg.cpu.workers = vec![None; n as usize];
            }
            "corelist-workers" => {
                let v = c.value(k)?;
                let cores = parse_corelist(&c, v)?;
                if let Some(bad) = cores.iter().find(|&&x| x >= ncpu) {
                    return Err(c.error(
                        v,
                        &format!("core {bad} in `{}': this machine has {ncpu} cores", v.text),
                    ));
                }
                cfg.cpu.workers = cores.into_iter().map(Some).collect();
            }
            "skip-cores" | "scheduler-priority" => {
                c.value_u64(k)?;
            }
            "relative" => {}
            "scheduler-policy" => {
                c.value(k)?;
            }
            _ => return Err(c.unknown(k)),
        }
    }
    Ok(())
}

fn buffers(s: &Section, file: &str, cfg: &mut StartupConfig) -> Result<(), ConfError> {
    let mut c = SectionCursor::new(s, file);
    while let Some(k) = c.next_key() {
        match k.text.as_str() {
            "buffers-per-numa" => {
                let n = c.value_u64(k)?;
                if !(256..=(1 << 24)).contains(&n) {
                    return Err(c.error(
                        k,
                        &format!("buffers-per-numa {n} out of range 256..16777216"),
                    ));
                }
                cfg.buffers.buffers = n as u32;
            }
            "default" => {
                let dk = c.value(k)?;
                if dk.text != "data-size" {
                    return Err(c.error(
                        dk,
                        &format!("unknown key `default {}' in section `buffers'", dk.text),
                    ));
                }
                let n = c.value_u64(dk)? as usize;
                if !(256..=sluice_buffer::MAX_DATA_SIZE).contains(&n) {
                    return Err(c.error(
                        dk,
                        &format!(
                            "data-size {n} out of range 256..{}",
                            sluice_buffer::MAX_DATA_SIZE
                        ),
                    ));
                }
                cfg.buffers.data_size = n;
            }
            "page-size" => {
                let v = c.value(k)?;
                cfg.buffers.page_size = match v.text.as_str() {
                    "4k" | "4K" | "4096" => PageSize::Small,
                    "2m" | "2M" | "default-hugepage" => PageSize::Huge2M,
                    "default" => PageSize::Default,
                    _ => {
                        return Err(c.error(
                            v,
                            &format!("bad page-size `{}': expected 4k, 2M or default", v.text),
                        ))
                    }
                };
            }
            // Sluice's own key: the data array becomes a shared memfd that memif zero-copy
            // hands to its peer (docs/memif.md).
            "shared" => cfg.buffers.shared = true,
            "layout" | "numa-mask" => {
                c.value(k)?;
            }
            _ => return Err(c.unknown(k)),
        }
    }
    Ok(())
}

fn api(s: &Section, file: &str, cfg: &mut StartupConfig) -> Result<(), ConfError> {
    let mut c = SectionCursor::new(s, file);
    while let Some(k) = c.next_key() {
        match k.text.as_str() {
            "socket" => cfg.api_socket = Some(PathBuf::from(&c.value(k)?.text)),
            _ => return Err(c.unknown(k)),
        }
    }
    Ok(())
}

fn metrics(s: &Section, file: &str, cfg: &mut StartupConfig) -> Result<(), ConfError> {
    let mut c = SectionCursor::new(s, file);
    while let Some(k) = c.next_key() {
        match k.text.as_str() {
            "listen" => {
                let v = c.value(k)?;
                let Ok(a) = v.text.parse::<std::net::SocketAddr>() else {
                    return Err(c.error(
                        v,
                        &format!("bad listen address `{}': expected ip:port", v.text),
                    ));
                };
                cfg.metrics.listen = Some(a);
            }
            // Sluice's own key: a prefix for every metric name (`vpp_` as Calico/VPP).
            "prefix" => {
                let v = c.value(k)?;
                let ok = v.text.chars().enumerate().all(|(i, ch)| {
                    ch.is_ascii_alphabetic() || ch == '_' || (i > 0 && ch.is_ascii_digit())
                });
                if !ok {
                    return Err(c.error(
                        v,
                        &format!("bad metric prefix `{}': letters, digits and `_'", v.text),
                    ));
                }
                cfg.metrics.prefix = v.text.clone();
            }
            _ => return Err(c.unknown(k)),
        }
    }
    Ok(())
}

/// `statseg { socket-name <path> size <n> update-interval <s> per-node-counters on|off
/// page-size <x> disable }` (VPP's keys; `disable` is Sluice's own).
fn statseg(s: &Section, file: &str, cfg: &mut StartupConfig) -> Result<(), ConfError> {
    let mut c = SectionCursor::new(s, file);
    let st = &mut cfg.statseg;
    while let Some(k) = c.next_key() {
        match k.text.as_str() {
            "socket-name" => st.socket = Some(PathBuf::from(&c.value(k)?.text)),
            "size" => {
                let v = c.value(k)?;
                match conf::parse_size(&v.text) {
                    Some(n) if ((64 << 10)..=(1 << 34)).contains(&n) => st.size = n as usize,
                    _ => {
                        return Err(c.error(
                            v,
                            &format!("bad statseg size `{}': expected 64k..16g", v.text),
                        ))
                    }
                }
            }
            "update-interval" => {
                let v = c.value(k)?;
                match v.text.parse::<f64>() {
                    Ok(x) if sluice_stats::collector::INTERVAL_RANGE.contains(&x) => {
                        st.interval = x
                    }
                    _ => {
                        return Err(c.error(
                            v,
                            &format!(
                                "bad update-interval `{}': expected seconds, 0.001..3600",
                                v.text
                            ),
                        ))
                    }
                }
            }
            "per-node-counters" => {
                let v = c.value(k)?;
                st.per_node_counters = match v.text.as_str() {
                    "on" | "enable" => true,
                    "off" | "disable" => false,
                    _ => {
                        return Err(c.error(
                            v,
                            &format!("bad per-node-counters `{}': expected on or off", v.text),
                        ))
                    }
                };
            }
            // VPP sizes its segment's pages; Sluice's memfd uses the kernel's.
            "page-size" => {
                c.value(k)?;
            }
            "disable" => st.disabled = true,
            _ => return Err(c.unknown(k)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse(text, "t.conf").unwrap_err().to_string()
    }

    #[test]
    fn accepts_vpp_style_config() {
        let c = parse(
            "unix {\n  nodaemon\n  cli-listen /tmp/x.sock\n  exec /tmp/s.cli\n}\n# comment\ncpu { main-core 0 workers 1 }\nbuffers { buffers-per-numa 4096 default data-size 2048 page-size 4k }\ndpdk { dev default { num-rx-queues 2 } }\n",
            "t.conf",
        )
        .unwrap();
        assert_eq!(
            c.unix.cli_listen.as_deref(),
            Some(std::path::Path::new("/tmp/x.sock"))
        );
        assert_eq!(c.cpu.workers.len(), 1);
        assert_eq!(c.buffers.buffers, 4096);
        assert_eq!(c.buffers.page_size, PageSize::Small);
        assert!(!c.buffers.shared, "private data array by default");
        assert!(
            parse("buffers {\n shared\n}\n", "t.conf")
                .unwrap()
                .buffers
                .shared
        );
        assert_eq!(c.warnings.len(), 1);
        assert!(c.warnings[0].starts_with("t.conf:9: section `dpdk'"));
    }

    #[test]
    fn unknown_section_names_file_line_and_token() {
        assert_eq!(
            err("unix { nodaemon }\nfrobnicate { x 1 }\n"),
            "t.conf:2: unknown section `frobnicate'"
        );
    }

    #[test]
    fn unknown_key_names_file_line_and_token() {
        assert_eq!(
            err("unix {\n  nodaemon\n  colour blue\n}\n"),
            "t.conf:3: unknown key `colour' in section `unix'"
        );
    }

    #[test]
    fn bad_values_name_the_token() {
        assert_eq!(
            err("buffers {\n buffers-per-numa lots\n}"),
            "t.conf:2: bad value `lots' for `buffers-per-numa': expected a number"
        );
        assert_eq!(
            err("buffers { page-size 1G }"),
            "t.conf:1: bad page-size `1G': expected 4k, 2M or default"
        );
        assert_eq!(
            err("cpu {\n\n workers 1000 }"),
            "t.conf:3: workers 1000: at most 64"
        );
        assert_eq!(
            err("cpu { corelist-workers 1-x }"),
            "t.conf:1: bad core list `1-x'"
        );
        assert_eq!(
            err("metrics { listen nowhere }"),
            "t.conf:1: bad listen address `nowhere': expected ip:port"
        );
        assert_eq!(
            err("unix { cli-listen }"),
            "t.conf:1: `cli-listen' needs a value"
        );
    }

    #[test]
    fn syntax_errors_from_the_parser_keep_file_line() {
        let e = err("unix {\n nodaemon\n");
        assert!(e.starts_with("t.conf:1:"), "{e}");
    }

    #[test]
    fn statseg_and_metrics_keys() {
        let c = parse(
            "statseg {\n socket-name /tmp/st.sock\n size 4m\n update-interval 0.25\n per-node-counters off\n page-size 4k\n}\nmetrics { listen 127.0.0.1:9482 prefix vpp_ }\n",
            "t.conf",
        )
        .unwrap();
        assert_eq!(
            c.statseg.socket.as_deref(),
            Some(std::path::Path::new("/tmp/st.sock"))
        );
        assert_eq!(c.statseg.size, 4 << 20);
        assert_eq!(c.statseg.interval, 0.25);
        assert!(!c.statseg.per_node_counters && !c.statseg.disabled);
        assert_eq!(c.metrics.listen, Some("127.0.0.1:9482".parse().unwrap()));
        assert_eq!(c.metrics.prefix, "vpp_");
        assert!(c.warnings.is_empty(), "statseg is used, not ignored");
        assert!(
            parse("statseg { disable }", "t.conf")
                .unwrap()
                .statseg
                .disabled
        );
        assert_eq!(
            err("statseg {\n size 1k\n}"),
            "t.conf:2: bad statseg size `1k': expected 64k..16g"
        );
        assert_eq!(
            err("statseg { update-interval 0 }"),
            "t.conf:1: bad update-interval `0': expected seconds, 0.001..3600"
        );
        assert_eq!(
            err("statseg { update-interval soon }"),
            "t.conf:1: bad update-interval `soon': expected seconds, 0.001..3600"
        );
        assert_eq!(
            err("statseg { per-node-counters maybe }"),
            "t.conf:1: bad per-node-counters `maybe': expected on or off"
        );
        assert_eq!(
            err("statseg { colour red }"),
            "t.conf:1: unknown key `colour' in section `statseg'"
        );
        assert_eq!(
            err("metrics { listen 127.0.0.1:1 prefix 9x }"),
            "t.conf:1: bad metric prefix `9x': letters, digits and `_'"
        );
    }

    #[test]
    fn empty_config_is_defaults() {
        let c = parse("", "t.conf").unwrap();
        assert!(c.cpu.workers.is_empty());
        assert_eq!(c.buffers.buffers, sluice_buffer::DEFAULT_BUFFERS);
    }
}
