//! Starting DPDK's EAL from the `dpdk` section: the argument list, the checks that turn the
//! usual failures (no such PCI device, device not bound to a DPDK driver, no hugepages) into
//! one-line errors before EAL is called, and the call itself.
//!
//! Without `huge-dir`, EAL runs without hugepages: `--no-huge --file-prefix sluice-<pid> -m
//! <MB>` (anonymous 4 KiB pages; EAL refuses `--in-memory` with `--no-huge`, and
//! `--no-shconf` turns off the IPC net_memif needs). With it: `--huge-dir <dir> --file-prefix
//! sluice-<pid> [--socket-mem <list>]`. Either way the runtime directory EAL creates is
//! removed once the devices are probed, or when EAL failed: Sluice runs no DPDK secondary
//! processes. PCI probing is off (`--no-pci`) unless the section names PCI devices, which are
//! then the only ones probed (`-a <addr>[,<devargs>]`). EAL's main lcore is the calling
//! (Sluice main) thread, allowed on every CPU the process may use, and its CPU affinity is
//! restored afterwards: Sluice pins its own threads (`cpu { ... }`). Telemetry is off.
//! Virtual devices are hot-plugged after EAL is up, one at a time, so a bad one is named in
//! its own error.

use crate::config::DpdkConfig;
use crate::sys::Api;
use std::ffi::{c_char, CString};

/// The CPUs this thread may run on (sorted).
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 = this thread; the size matches the set.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        return vec![0];
    }
    // SAFETY: reading bits of an initialised set.
    let v: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect();
    if v.is_empty() {
        vec![0]
    } else {
        v
    }
}

/// `0-3,6` for a sorted CPU list.
pub fn cpu_list(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// EAL's arguments for `cfg` (`argv[0]` included). `mem_mb`: memory without hugepages.
pub fn args(cfg: &DpdkConfig, cpus: &[usize], mem_mb: u32) -> Vec<String> {
    let mut a = vec![
        "sluice".to_string(),
        "--no-telemetry".into(),
        format!("--lcores=0@({})", cpu_list(cpus)),
        format!(
            "--log-level={}",
            cfg.log_level.as_deref().unwrap_or("warning")
        ),
    ];
    match &cfg.huge_dir {
        Some(d) => {
            a.push(format!("--file-prefix=sluice-{}", std::process::id()));
            a.push(format!("--huge-dir={d}"));
            if let Some(m) = &cfg.socket_mem {
                let l: Vec<String> = m.iter().map(u32::to_string).collect();
                a.push(format!("--socket-mem={}", l.join(",")));
            }
        }
        None => {
            // --no-huge is legacy memory mode, which --in-memory refuses; --no-shconf would
            // also disable EAL's IPC, without which net_memif does not start. So: a runtime
            // directory of our own, removed once EAL is up (see `init`).
            a.push("--no-huge".into());
            a.push(format!("--file-prefix=sluice-{}", std::process::id()));
            let mb = cfg
                .socket_mem
                .as_ref()
                .map(|m| m.iter().sum::<u32>())
                .unwrap_or(mem_mb);
            a.push(format!("-m{mb}"));
        }
    }
    if cfg.devs.is_empty() || cfg.no_pci {
        a.push("--no-pci".into());
    } else {
        for d in &cfg.devs {
            a.push(match d.opts.over(&cfg.default).devargs {
                Some(x) => format!("-a{},{x}", d.addr),
                None => format!("-a{}", d.addr),
            });
        }
    }
    a
}

/// Drivers a PCI device must be bound to for DPDK to use it (mlx4/mlx5 are bifurcated and
/// work on the kernel driver, so they are not checked).
const DPDK_PCI_DRIVERS: [&str; 3] = ["vfio-pci", "uio_pci_generic", "igb_uio"];

/// Checks that PCI device `addr` exists; returns the kernel driver it is bound to.
pub fn check_pci(addr: &str) -> Result<Option<String>, String> {
    let dir = std::path::Path::new("/sys/bus/pci/devices").join(addr);
    if !dir.exists() {
        return Err(format!("dev {addr}: no such PCI device"));
    }
    Ok(std::fs::read_link(dir.join("driver"))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned())))
}

/// Why DPDK found no port for PCI device `addr` bound to `driver`.
pub fn pci_not_found(addr: &str, driver: Option<&str>) -> String {
    match driver {
        Some(d) if !DPDK_PCI_DRIVERS.contains(&d) => format!(
            "dev {addr}: no DPDK port (the device is bound to the kernel's `{d}' driver; bind it to vfio-pci with dpdk-devbind.py)"
        ),
        None => format!(
            "dev {addr}: no DPDK port (the device is bound to no driver; bind it to vfio-pci with dpdk-devbind.py)"
        ),
        Some(d) => format!("dev {addr}: no DPDK port (bound to `{d}', but no PMD took it)"),
    }
}

/// With `huge-dir`: the directory must be a hugetlbfs mount and hugepages must be free.
pub fn check_hugepages(dir: &str, meminfo: &str) -> Result<(), String> {
    let free = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("HugePages_Free:"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    if free == 0 {
        return Err("no free hugepages (HugePages_Free is 0): reserve some (sysctl vm.nr_hugepages=N) or remove `huge-dir' to run DPDK on 4 KiB pages".into());
    }
    let c = CString::new(dir).map_err(|_| format!("bad huge-dir `{dir}'"))?;
    // SAFETY: statfs is plain data; the path is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(format!(
            "huge-dir `{dir}': {}",
            std::io::Error::last_os_error()
        ));
    }
    const HUGETLBFS_MAGIC: i64 = 0x9584_58f6;
    if st.f_type as i64 != HUGETLBFS_MAGIC {
        return Err(format!("huge-dir `{dir}' is not a hugetlbfs mount"));
    }
    Ok(())
}

/// Runs `rte_eal_init` with `args`.
pub fn init(api: &Api, args: &[String]) -> Result<(), String> {
    let c: Vec<CString> = args
        .iter()
        .map(|a| CString::new(a.as_str()).map_err(|_| format!("EAL argument `{a}' has a NUL")))
        .collect::<Result<_, _>>()?;
    let mut argv: Vec<*mut c_char> = c.iter().map(|s| s.as_ptr() as *mut c_char).collect();
    argv.push(std::ptr::null_mut());
    // SAFETY: argv is a NULL-terminated array of NUL-terminated strings that outlive the
    // call; EAL may permute the pointers (getopt) but does not write through them. EAL keeps
    // no reference to them after returning.
    let r = unsafe { (api.eal_init)(args.len() as i32, argv.as_mut_ptr()) };
    if r < 0 {
        // EAL may have created its runtime directory before it failed.
        remove_runtime_dir(api);
        return Err(format!(
            "EAL initialisation failed: {} (EAL arguments: {})",
            api.error(r),
            args[1..].join(" ")
        ));
    }
    Ok(())
}

/// EAL's runtime directory (`<run>/dpdk/<file-prefix>`), once `rte_eal_init` got as far as
/// naming it.
pub fn runtime_dir(api: &Api) -> Option<String> {
    // SAFETY: returns EAL's static NUL-terminated runtime directory path.
    let p = unsafe { (api.runtime_dir)() };
    if p.is_null() {
        return None;
    }
    // SAFETY: non-NULL, NUL-terminated.
    let dir = unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy();
    (!dir.is_empty()).then(|| dir.into_owned())
}

/// Removes the runtime directory EAL created for Sluice (`--file-prefix sluice-<pid>`): once
/// the devices are probed nothing needs it (no secondary processes), nor after EAL failed,
/// and a directory per run would otherwise pile up under /var/run/dpdk.
pub fn remove_runtime_dir(api: &Api) {
    if let Some(dir) = runtime_dir(api) {
        if dir.ends_with(&format!("/sluice-{}", std::process::id())) {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// Hot-plugs virtual device `spec`.
pub fn probe(api: &Api, spec: &str) -> Result<(), String> {
    let c = CString::new(spec).map_err(|_| format!("vdev `{spec}' has a NUL"))?;
    // SAFETY: NUL-terminated devargs string, read during the call only.
    let r = unsafe { (api.dev_probe)(c.as_ptr()) };
    if r < 0 {
        return Err(format!("vdev {spec}: {}", api.error(r)));
    }
    Ok(())
}

/// The port DPDK created for device `name`.
pub fn port_by_name(api: &Api, name: &str) -> Option<u16> {
    let c = CString::new(name).ok()?;
    let mut p = 0u16;
    // SAFETY: NUL-terminated name; `p` is a valid out pointer.
    (unsafe { (api.port_by_name)(c.as_ptr(), &mut p) } == 0).then_some(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{DevConfig, DevOpts};

    #[test]
    fn cpu_lists() {
        assert_eq!(cpu_list(&[0]), "0");
        assert_eq!(cpu_list(&[0, 1, 2, 3]), "0-3");
        assert_eq!(cpu_list(&[0, 2, 3, 7]), "0,2-3,7");
    }

    #[test]
    fn args_without_hugepages_or_pci() {
        let cfg = DpdkConfig {
            present: true,
            ..Default::default()
        };
        let a = args(&cfg, &[0, 1], 300);
        assert_eq!(
            a,
            [
                "sluice",
                "--no-telemetry",
                "--lcores=0@(0-1)",
                "--log-level=warning",
                "--no-huge",
                &format!("--file-prefix=sluice-{}", std::process::id()),
                "-m300",
                "--no-pci"
            ]
        );
    }

    #[test]
    fn args_with_pci_devices_and_hugepages() {
        let cfg = DpdkConfig {
            present: true,
            huge_dir: Some("/dev/hugepages".into()),
            socket_mem: Some(vec![512, 0]),
            default: DevOpts {
                devargs: Some("rxq_cqe_comp_en=0".into()),
                ..Default::default()
            },
            devs: vec![DevConfig {
                addr: "0000:02:00.1".into(),
                vdev: None,
                opts: DevOpts::default(),
                line: 1,
            }],
            ..Default::default()
        };
        let a = args(&cfg, &[3], 300);
        assert!(a.contains(&"--huge-dir=/dev/hugepages".to_string()));
        assert!(a.contains(&"--socket-mem=512,0".to_string()));
        assert!(a.contains(&"-a0000:02:00.1,rxq_cqe_comp_en=0".to_string()));
        assert!(!a.iter().any(|x| x == "--no-huge" || x == "--no-pci"));
        // socket-mem without hugepages is the -m total.
        let cfg2 = DpdkConfig {
            socket_mem: Some(vec![100, 28]),
            ..Default::default()
        };
        assert!(args(&cfg2, &[0], 300).contains(&"-m128".to_string()));
    }

    #[test]
    fn hugepage_checks_are_one_line() {
        let e = check_hugepages(
            "/dev/hugepages",
            "HugePages_Total: 0\nHugePages_Free:       0\n",
        )
        .unwrap_err();
        assert!(e.starts_with("no free hugepages"), "{e}");
        assert!(!e.contains('\n'));
        let e = check_hugepages("/tmp", "HugePages_Free: 4\n").unwrap_err();
        assert_eq!(e, "huge-dir `/tmp' is not a hugetlbfs mount");
    }

    #[test]
    fn unknown_pci_device() {
        assert_eq!(
            check_pci("00ff:ff:1f.7").unwrap_err(),
            "dev 00ff:ff:1f.7: no such PCI device"
        );
        assert!(pci_not_found("0000:00:04.0", Some("virtio-pci")).contains("`virtio-pci'"));
    }
}
