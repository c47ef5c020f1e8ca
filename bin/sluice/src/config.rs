//! Typed startup.conf: VPP brace syntax parsed by `sluice_cli::conf`, validated here. Unknown
//! sections, unknown keys and bad values are errors naming `file:line` and the token.

use sluice_buffer::{PageSize, PoolConfig};
use sluice_cli::conf::{self, ConfError, ConfFile, Section, SectionCursor};
use sluice_graph::CpuConfig;
use sluice_vnet::plugin::{plugin_name, Plugin, PluginsConfig, Staged};
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

/// `metrics { listen <addr:port> }` (served by a later issue; validated now).
#[derive(Clone, Debug, Default)]
pub struct MetricsConfig {
    /// Listen address.
    pub listen: Option<String>,
}

/// The whole startup configuration.
#[derive(Debug, Default)]
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
    /// `plugins { ... }`: which plugins run.
    pub plugins: PluginsConfig,
    /// The plugins' own sections, validated by them (becomes the runtime's extension map).
    pub staged: Staged,
    /// Warnings to log once the logger is up (sections accepted but not used).
    pub warnings: Vec<String>,
}

/// VPP sections Sluice accepts and ignores with a warning (unless a plugin of this build
/// owns them).
const IGNORED_SECTIONS: &[&str] = &[
    "dpdk",
    "api-trace",
    "api-segment",
    "socksvr",
    "memory",
    "statseg",
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

/// Parses and validates a startup.conf text; `plugins` is the build's plugin list (their
/// sections are theirs to validate).
pub fn parse(
    text: &str,
    file: &str,
    plugins: &[&'static dyn Plugin],
) -> Result<StartupConfig, ConfError> {
    let cf = conf::parse(text, file)?;
    from_conf(&cf, file, plugins)
}

/// Validates a parsed file.
pub fn from_conf(
    cf: &ConfFile,
    file: &str,
    plugins: &[&'static dyn Plugin],
) -> Result<StartupConfig, ConfError> {
    let mut cfg = StartupConfig::default();
    // `plugins` first, wherever it is: it decides whose sections the others are.
    for s in cf.sections.iter().filter(|s| s.name == "plugins") {
        plugins_section(s, file, plugins, &mut cfg)?;
    }
    let entries = cfg.plugins.entries(plugins);
    for s in &cf.sections {
        let owner = entries
            .iter()
            .find(|e| e.plugin.config_sections().contains(&s.name.as_str()));
        if let Some(e) = owner {
            if !e.enabled {
                return Err(ConfError {
                    file: file.to_string(),
                    line: s.line,
                    msg: format!(
                        "section `{}' belongs to plugin `{}', which is disabled",
                        s.name,
                        e.plugin.name()
                    ),
                });
            }
            e.plugin.configure(&mut cfg.staged, s, file)?;
            continue;
        }
        match s.name.as_str() {
            "unix" => unix(s, file, &mut cfg)?,
            "cpu" => cpu(s, file, &mut cfg)?,
            "buffers" => buffers(s, file, &mut cfg)?,
            "api" => api(s, file, &mut cfg)?,
            "metrics" => metrics(s, file, &mut cfg)?,
            "plugins" => {}
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

/// `plugins { plugin <name> { enable|disable } plugin default { disable } path <dir> }`
/// (VPP's; names with or without `_plugin.so`).
fn plugins_section(
    s: &Section,
    file: &str,
    all: &[&'static dyn Plugin],
    cfg: &mut StartupConfig,
) -> Result<(), ConfError> {
    let mut c = SectionCursor::new(s, file);
    while let Some(k) = c.next_key() {
        match k.text.as_str() {
            "plugin" => {
                let n = c.value(k)?;
                let block = c.block(n)?;
                let mut on = None;
                for t in block {
                    match t.text.as_str() {
                        "enable" => on = Some(true),
                        "disable" => on = Some(false),
                        "skip-version-check" => {}
                        _ => {
                            return Err(c.error(
                                t,
                                &format!(
                                    "unknown word `{}' in `plugin {}': expected enable or disable",
                                    t.text, n.text
                                ),
                            ))
                        }
                    }
                }
                let name = plugin_name(&n.text);
                let Some(on) = on else {
                    continue;
                };
                if name == "default" {
                    cfg.plugins.default_disable = !on;
                } else if all.iter().any(|p| p.name() == name) {
                    cfg.plugins.explicit.push((name.to_string(), on));
                } else {
                    cfg.warnings.push(format!(
                        "{file}:{}: plugin `{}' is not part of this build; ignored",
                        n.line, n.text
                    ));
                }
            }
            "path" | "add-path" => {
                let v = c.value(k)?;
                cfg.warnings.push(format!(
                    "{file}:{}: plugins are linked into the binary; `{} {}' ignored",
                    k.line, k.text, v.text
                ));
            }
            "vat-plugin" => {
                let n = c.value(k)?;
                c.block(n)?;
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
                if v.text.parse::<std::net::SocketAddr>().is_err() {
                    return Err(c.error(
                        v,
                        &format!("bad listen address `{}': expected ip:port", v.text),
                    ));
                }
                cfg.metrics.listen = Some(v.text.clone());
            }
            _ => return Err(c.unknown(k)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse(text, "t.conf", &sluice_plugins::all())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn accepts_vpp_style_config() {
        let c = parse(
            "unix {\n  nodaemon\n  cli-listen /tmp/x.sock\n  exec /tmp/s.cli\n}\n# comment\ncpu { main-core 0 workers 1 }\nbuffers { buffers-per-numa 4096 default data-size 2048 page-size 4k }\nstatseg { socket-name /run/vpp/stats.sock }\n",
            "t.conf",
            &sluice_plugins::all(),
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
            parse("buffers {\n shared\n}\n", "t.conf", &[])
                .unwrap()
                .buffers
                .shared
        );
        assert_eq!(c.warnings.len(), 1);
        assert!(c.warnings[0].starts_with("t.conf:9: section `statseg'"));
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
    fn plugins_section_enables_disables_and_owns_sections() {
        let all = sluice_plugins::all();
        let c = parse(
            "plugins {\n path /usr/lib/vpp_plugins\n plugin default { disable }\n plugin memif_plugin.so { enable }\n plugin dpdk_plugin.so { disable }\n plugin lacp_plugin.so { disable }\n}\n",
            "t.conf",
            &all,
        )
        .unwrap();
        let on: Vec<(&str, bool)> = c
            .plugins
            .entries(&all)
            .iter()
            .map(|e| (e.plugin.name(), e.enabled))
            .collect();
        assert!(on.contains(&("memif", true)), "{on:?}");
        assert!(on.contains(&("af_packet", false)), "{on:?}");
        assert!(on.contains(&("dpdk", false)), "{on:?}");
        assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
        assert!(c.warnings[1].contains("`lacp_plugin.so' is not part of this build"));
        assert_eq!(
            err("plugins {\n plugin memif { sometimes }\n}"),
            "t.conf:2: unknown word `sometimes' in `plugin memif': expected enable or disable"
        );
    }

    #[test]
    fn syntax_errors_from_the_parser_keep_file_line() {
        let e = err("unix {\n nodaemon\n");
        assert!(e.starts_with("t.conf:1:"), "{e}");
    }

    #[test]
    fn empty_config_is_defaults() {
        let c = parse("", "t.conf", &[]).unwrap();
        assert!(c.cpu.workers.is_empty());
        assert_eq!(c.buffers.buffers, sluice_buffer::DEFAULT_BUFFERS);
    }
}
