//! The `dpdk` startup.conf section (VPP's syntax), validated while the file is read:
//!
//! ```text
//! dpdk {
//!   dev default { num-rx-queues 2 num-rx-desc 1024 }     # defaults for every device
//!   dev 0000:02:00.1 { name eth0 num-rx-queues 2 num-tx-queues 2 num-rx-desc 512 num-tx-desc 512 devargs <k=v,...> }
//!   vdev net_null0,size=60                               # a virtual device (EAL --vdev syntax)
//!   vdev net_tap0,iface=dtap0 { name tap0 }              # Sluice: the same options as dev
//!   no-pci                                               # implied when no `dev <pci>' is given
//!   socket-mem 256                                       # MB (per NUMA node with hugepages)
//!   huge-dir /dev/hugepages                              # use hugepages from this mount
//!   num-mbufs 16384                                      # receive mbufs when copying (default: sized from the queues)
//!   no-zero-copy                                         # copy even on virtual devices
//!   log-level warning                                    # EAL log level
//! }
//! ```
//!
//! Without `huge-dir` DPDK runs without hugepages (`--no-huge`, memory `-m` from
//! `socket-mem` or sized from the queues). `no-multi-seg`, `no-tx-checksum-offload` and
//! `enable-tcp-udp-checksum` are accepted for VPP compatibility and change nothing (Sluice
//! uses no offloads; multi-segment mbufs only carry frames larger than one mbuf);
//! `uio-driver` is accepted and ignored (Sluice binds no devices: bind them with
//! `dpdk-devbind.py`).

use sluice_cli::conf::{ConfError, Section, SectionCursor, Token};

/// Most rx or tx queues per device.
pub const MAX_QUEUES: u16 = 64;
/// Most descriptors per queue.
pub const MAX_DESC: u16 = 32768;

/// Per-device options (`dev <addr> { ... }`, `dev default { ... }`, `vdev <spec> { ... }`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DevOpts {
    /// `num-rx-queues`.
    pub rx_queues: Option<u16>,
    /// `num-tx-queues` (default: one per thread).
    pub tx_queues: Option<u16>,
    /// `num-rx-desc`.
    pub rx_desc: Option<u16>,
    /// `num-tx-desc`.
    pub tx_desc: Option<u16>,
    /// `name`: the Sluice interface name instead of the VPP-style one.
    pub name: Option<String>,
    /// `devargs`: device arguments appended to the allow-list entry (`-a <pci>,<devargs>`).
    pub devargs: Option<String>,
}

impl DevOpts {
    /// These options over `d`'s (a device's own over `dev default`).
    pub fn over(&self, d: &DevOpts) -> DevOpts {
        DevOpts {
            rx_queues: self.rx_queues.or(d.rx_queues),
            tx_queues: self.tx_queues.or(d.tx_queues),
            rx_desc: self.rx_desc.or(d.rx_desc),
            tx_desc: self.tx_desc.or(d.tx_desc),
            name: self.name.clone(),
            devargs: self.devargs.clone().or(d.devargs.clone()),
        }
    }
}

/// A device the section names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DevConfig {
    /// PCI address (`0000:02:00.1`, normalised) or the virtual device's name (`net_null0`).
    pub addr: String,
    /// The whole `vdev` spec (`net_null0,size=60`); `None` for PCI devices.
    pub vdev: Option<String>,
    /// Options.
    pub opts: DevOpts,
    /// Line in the configuration file.
    pub line: usize,
}

/// The `dpdk` section.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DpdkConfig {
    /// A `dpdk` section was given (without one, DPDK is not started at all).
    pub present: bool,
    /// File the section came from (for messages at start).
    pub file: String,
    /// `dev <pci>` entries, in file order.
    pub devs: Vec<DevConfig>,
    /// `vdev <spec>` entries, in file order.
    pub vdevs: Vec<DevConfig>,
    /// `dev default { ... }`.
    pub default: DevOpts,
    /// `no-pci`.
    pub no_pci: bool,
    /// `no-zero-copy`: copy between mbufs and Sluice buffers even on virtual devices.
    pub no_zero_copy: bool,
    /// `socket-mem` in MB per NUMA node.
    pub socket_mem: Option<Vec<u32>>,
    /// `huge-dir`.
    pub huge_dir: Option<String>,
    /// `num-mbufs`.
    pub num_mbufs: Option<u32>,
    /// `log-level`.
    pub log_level: Option<String>,
    /// Accepted and ignored options (logged at start).
    pub ignored: Vec<String>,
}

/// EAL log levels `log-level` accepts.
pub const LOG_LEVELS: [&str; 8] = [
    "emergency",
    "alert",
    "critical",
    "error",
    "warning",
    "notice",
    "info",
    "debug",
];

fn err(file: &str, t: &Token, msg: String) -> ConfError {
    ConfError {
        file: file.to_string(),
        line: t.line,
        msg,
    }
}

/// Parses a PCI address `[dddd:]bb:dd.f` (hex) into its normal form `dddd:bb:dd.f`.
pub fn parse_pci(s: &str) -> Option<String> {
    let (rest, func) = s.rsplit_once('.')?;
    let parts: Vec<&str> = rest.split(':').collect();
    let (dom, bus, dev) = match parts.as_slice() {
        [b, d] => ("0", *b, *d),
        [a, b, d] => (*a, *b, *d),
        _ => return None,
    };
    let hex = |x: &str, max: u32| -> Option<u32> {
        if x.is_empty() || x.len() > 8 {
            return None;
        }
        u32::from_str_radix(x, 16).ok().filter(|&v| v <= max)
    };
    let (dom, bus, dev, func) = (
        hex(dom, 0xffff)?,
        hex(bus, 0xff)?,
        hex(dev, 0x1f)?,
        hex(func, 7)?,
    );
    Some(format!("{dom:04x}:{bus:02x}:{dev:02x}.{func:x}"))
}

/// The device name of a `vdev` spec (`net_null0,size=60` -> `net_null0`), checked: a driver
/// name with an instance suffix, as EAL wants it.
fn vdev_name(spec: &str) -> Option<&str> {
    let name = spec.split(',').next()?;
    let ok = !name.is_empty()
        && name.len() < 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.');
    ok.then_some(name)
}

fn valid_if_name(n: &str) -> bool {
    !n.is_empty() && n.len() < 64 && n.chars().all(|c| c.is_ascii_graphic())
}

fn dev_opts(file: &str, toks: &[&Token]) -> Result<DevOpts, ConfError> {
    let mut o = DevOpts::default();
    let mut i = 0;
    while i < toks.len() {
        let k = toks[i];
        let v = toks.get(i + 1).copied();
        i += 2;
        let val = |what: &str| -> Result<&Token, ConfError> {
            v.filter(|t| t.text != "{" && t.text != "}")
                .ok_or_else(|| err(file, k, format!("`{what}' needs a value")))
        };
        let num = |what: &str, max: u16| -> Result<u16, ConfError> {
            let t = val(what)?;
            sluice_cli::conf::parse_size(&t.text)
                .and_then(|n| u16::try_from(n).ok())
                .filter(|&n| n >= 1 && n <= max)
                .ok_or_else(|| {
                    err(
                        file,
                        t,
                        format!("bad value `{}' for `{what}': expected 1..{max}", t.text),
                    )
                })
        };
        match k.text.as_str() {
            "num-rx-queues" => o.rx_queues = Some(num("num-rx-queues", MAX_QUEUES)?),
            "num-tx-queues" => o.tx_queues = Some(num("num-tx-queues", MAX_QUEUES)?),
            "num-rx-desc" => o.rx_desc = Some(num("num-rx-desc", MAX_DESC)?),
            "num-tx-desc" => o.tx_desc = Some(num("num-tx-desc", MAX_DESC)?),
            "name" => {
                let t = val("name")?;
                if !valid_if_name(&t.text) {
                    return Err(err(file, t, format!("bad interface name `{}'", t.text)));
                }
                o.name = Some(t.text.clone());
            }
            "devargs" => o.devargs = Some(val("devargs")?.text.clone()),
            w @ ("tso" | "rss-queues" | "workers" | "vlan-strip-offload" | "tag") => {
                return Err(err(
                    file,
                    k,
                    format!("`{w}' is not supported by Sluice's dpdk plugin"),
                ))
            }
            "no-rx-interrupts" => i -= 1,
            _ => {
                return Err(err(
                    file,
                    k,
                    format!("unknown device option `{}' in section `dpdk'", k.text),
                ));
            }
        }
    }
    Ok(o)
}

/// Parses and validates a `dpdk` section into `cfg` (sections may repeat; they add up).
pub fn parse(cfg: &mut DpdkConfig, s: &Section, file: &str) -> Result<(), ConfError> {
    cfg.present = true;
    cfg.file = file.to_string();
    let mut c = SectionCursor::new(s, file);
    while let Some(k) = c.next_key() {
        match k.text.as_str() {
            "dev" => {
                let a = c.value(k)?;
                let opts = if c.peek().is_some_and(|t| t.text == "{") {
                    let b = c.block(a)?;
                    dev_opts(file, &b)?
                } else {
                    DevOpts::default()
                };
                if a.text == "default" {
                    if opts.name.is_some() {
                        return Err(err(file, a, "`dev default' cannot take a `name'".into()));
                    }
                    cfg.default = opts;
                    continue;
                }
                let addr = parse_pci(&a.text).ok_or_else(|| {
                    err(
                        file,
                        a,
                        format!(
                            "bad PCI address `{}' (expected [dddd:]bb:dd.f, e.g. 0000:02:00.1)",
                            a.text
                        ),
                    )
                })?;
                if cfg.devs.iter().any(|d| d.addr == addr) {
                    return Err(err(file, a, format!("device `{}' given twice", a.text)));
                }
                cfg.devs.push(DevConfig {
                    addr,
                    vdev: None,
                    opts,
                    line: a.line,
                });
            }
            "vdev" => {
                let v = c.value(k)?;
                let name = vdev_name(&v.text)
                    .ok_or_else(|| err(file, v, format!("bad virtual device `{}'", v.text)))?;
                if cfg.vdevs.iter().any(|d| d.addr == name) {
                    return Err(err(file, v, format!("virtual device `{name}' given twice")));
                }
                let opts = if c.peek().is_some_and(|t| t.text == "{") {
                    let b = c.block(v)?;
                    dev_opts(file, &b)?
                } else {
                    DevOpts::default()
                };
                if opts.devargs.is_some() {
                    return Err(err(
                        file,
                        v,
                        "a vdev takes its arguments in its spec (`net_x0,k=v'), not `devargs'"
                            .into(),
                    ));
                }
                cfg.vdevs.push(DevConfig {
                    addr: name.to_string(),
                    vdev: Some(v.text.clone()),
                    opts,
                    line: v.line,
                });
            }
            "no-pci" => cfg.no_pci = true,
            "no-zero-copy" => cfg.no_zero_copy = true,
            "socket-mem" => {
                let v = c.value(k)?;
                let mb: Option<Vec<u32>> = v
                    .text
                    .split(',')
                    .map(|x| x.parse::<u32>().ok().filter(|&m| m <= 1 << 20))
                    .collect();
                let mb = mb.filter(|m| m.iter().any(|&x| x > 0)).ok_or_else(|| {
                    err(
                        file,
                        v,
                        format!(
                            "bad value `{}' for `socket-mem': expected MB per NUMA node, e.g. 1024,1024",
                            v.text
                        ),
                    )
                })?;
                cfg.socket_mem = Some(mb);
            }
            "huge-dir" => {
                let v = c.value(k)?;
                if !v.text.starts_with('/') {
                    return Err(err(
                        file,
                        v,
                        format!("`huge-dir' needs an absolute path, got `{}'", v.text),
                    ));
                }
                cfg.huge_dir = Some(v.text.clone());
            }
            "num-mbufs" => {
                let v = c.value_u64(k)?;
                let n = u32::try_from(v)
                    .ok()
                    .filter(|&n| (1024..=4 << 20).contains(&n))
                    .ok_or_else(|| {
                        err(
                            file,
                            k,
                            format!("num-mbufs {v} out of range 1024..{}", 4 << 20),
                        )
                    })?;
                cfg.num_mbufs = Some(n);
            }
            "log-level" => {
                let v = c.value(k)?;
                if !LOG_LEVELS.contains(&v.text.as_str()) {
                    return Err(err(
                        file,
                        v,
                        format!(
                            "bad log level `{}' (one of {})",
                            v.text,
                            LOG_LEVELS.join(", ")
                        ),
                    ));
                }
                cfg.log_level = Some(v.text.clone());
            }
            "no-multi-seg" | "no-tx-checksum-offload" | "enable-tcp-udp-checksum" => {
                cfg.ignored.push(k.text.clone())
            }
            "uio-driver" => {
                let v = c.value(k)?;
                cfg.ignored.push(format!("uio-driver {}", v.text));
            }
            _ => return Err(c.unknown(k)),
        }
    }
    if cfg.no_pci {
        if let Some(d) = cfg.devs.first() {
            return Err(ConfError {
                file: file.to_string(),
                line: d.line,
                msg: format!("`dev {}' conflicts with `no-pci'", d.addr),
            });
        }
    }
    let mut names: Vec<&str> = Vec::new();
    for d in cfg.devs.iter().chain(&cfg.vdevs) {
        if let Some(n) = d.opts.name.as_deref() {
            if names.contains(&n) {
                return Err(ConfError {
                    file: file.to_string(),
                    line: d.line,
                    msg: format!("interface name `{n}' given twice"),
                });
            }
            names.push(n);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(body: &str) -> Result<DpdkConfig, String> {
        let f = sluice_cli::conf::parse(&format!("dpdk {{\n{body}\n}}\n"), "s.conf")
            .map_err(|e| e.to_string())?;
        let mut c = DpdkConfig::default();
        parse(&mut c, &f.sections[0], "s.conf").map_err(|e| e.to_string())?;
        Ok(c)
    }

    #[test]
    fn vpp_section() {
        let c = conf(
            "dev default { num-rx-queues 2 num-rx-desc 512 }\n\
             dev 0000:02:00.1 { name eth0 num-rx-queues 4 num-tx-queues 2 num-tx-desc 1024 }\n\
             dev 03:00.0\n\
             socket-mem 1024,1024\nhuge-dir /dev/hugepages\nnum-mbufs 32768\nlog-level debug\n\
             no-multi-seg\nuio-driver vfio-pci",
        )
        .unwrap();
        assert!(c.present);
        assert_eq!(c.default.rx_queues, Some(2));
        assert_eq!(c.devs.len(), 2);
        assert_eq!(c.devs[0].addr, "0000:02:00.1");
        assert_eq!(c.devs[0].line, 3);
        assert_eq!(c.devs[0].opts.name.as_deref(), Some("eth0"));
        let o = c.devs[0].opts.over(&c.default);
        assert_eq!(
            (o.rx_queues, o.tx_queues, o.rx_desc, o.tx_desc),
            (Some(4), Some(2), Some(512), Some(1024))
        );
        assert_eq!(c.devs[1].addr, "0000:03:00.0");
        assert_eq!(c.devs[1].opts.over(&c.default).rx_queues, Some(2));
        assert_eq!(c.socket_mem, Some(vec![1024, 1024]));
        assert_eq!(c.huge_dir.as_deref(), Some("/dev/hugepages"));
        assert_eq!(c.num_mbufs, Some(32768));
        assert_eq!(c.log_level.as_deref(), Some("debug"));
        assert_eq!(c.ignored, vec!["no-multi-seg", "uio-driver vfio-pci"]);
    }

    #[test]
    fn vdevs_and_blocks_on_one_line() {
        let c =
            conf("vdev net_null0,size=60 { name null0 num-rx-queues 2 }\nvdev net_ring0 no-pci no-zero-copy")
                .unwrap();
        assert_eq!(c.vdevs.len(), 2);
        assert_eq!(c.vdevs[0].addr, "net_null0");
        assert_eq!(c.vdevs[0].vdev.as_deref(), Some("net_null0,size=60"));
        assert_eq!(c.vdevs[0].opts.name.as_deref(), Some("null0"));
        assert_eq!(c.vdevs[0].opts.rx_queues, Some(2));
        assert_eq!(c.vdevs[1].addr, "net_ring0");
        assert!(c.no_pci);
        assert!(c.no_zero_copy);
    }

    #[test]
    fn pci_addresses() {
        assert_eq!(parse_pci("0000:02:00.1").as_deref(), Some("0000:02:00.1"));
        assert_eq!(parse_pci("2:1f.7").as_deref(), Some("0000:02:1f.7"));
        assert_eq!(parse_pci("abcd:FF:00.0").as_deref(), Some("abcd:ff:00.0"));
        for bad in [
            "",
            "02:00",
            "02:20.0",
            "02:00.8",
            "x:00.0",
            "1:2:3:4.0",
            "100:00.0",
        ] {
            assert_eq!(parse_pci(bad), None, "{bad}");
        }
    }

    #[test]
    fn errors_are_one_line_with_file_line_and_token() {
        let e = |b: &str| conf(b).unwrap_err();
        assert_eq!(
            e("dev 02:00.9"),
            "s.conf:2: bad PCI address `02:00.9' (expected [dddd:]bb:dd.f, e.g. 0000:02:00.1)"
        );
        assert_eq!(
            e("\ndev 02:00.0 { num-rx-queues 0 }"),
            "s.conf:3: bad value `0' for `num-rx-queues': expected 1..64"
        );
        assert_eq!(
            e("dev 02:00.0 { bogus 1 }"),
            "s.conf:2: unknown device option `bogus' in section `dpdk'"
        );
        assert_eq!(
            e("dev 02:00.0 { tso on }"),
            "s.conf:2: `tso' is not supported by Sluice's dpdk plugin"
        );
        assert_eq!(
            e("frobnicate"),
            "s.conf:2: unknown key `frobnicate' in section `dpdk'"
        );
        assert_eq!(
            e("dev 02:00.0\nno-pci"),
            "s.conf:2: `dev 0000:02:00.0' conflicts with `no-pci'"
        );
        assert_eq!(
            e("vdev net_null0\nvdev net_null0,size=9"),
            "s.conf:3: virtual device `net_null0' given twice"
        );
        assert_eq!(
            e("vdev bad/name"),
            "s.conf:2: bad virtual device `bad/name'"
        );
        assert_eq!(
            e("socket-mem 1x"),
            "s.conf:2: bad value `1x' for `socket-mem': expected MB per NUMA node, e.g. 1024,1024"
        );
        assert_eq!(
            e("huge-dir huge"),
            "s.conf:2: `huge-dir' needs an absolute path, got `huge'"
        );
        assert!(e("log-level loud").starts_with("s.conf:2: bad log level `loud'"));
        assert_eq!(
            e("num-mbufs 10"),
            "s.conf:2: num-mbufs 10 out of range 1024..4194304"
        );
        assert_eq!(
            e("vdev net_a0 { name x }\nvdev net_b0 { name x }"),
            "s.conf:3: interface name `x' given twice"
        );
        assert_eq!(
            e("dev default { name x }"),
            "s.conf:2: `dev default' cannot take a `name'"
        );
        assert_eq!(e("vdev"), "s.conf:2: `vdev' needs a value");
    }
}
