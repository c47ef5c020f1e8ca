//! DPDK ports as Sluice interfaces: naming (VPP's rules), queue and RSS setup, link state.

use crate::sys::{Api, Link, PortConf, PortInfo, RteMempool};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

/// A mempool pointer that may cross threads (DPDK mempools are thread-safe).
#[derive(Clone, Copy, Debug)]
pub struct Pool(pub *mut RteMempool);
// SAFETY: a DPDK mempool is a multi-producer/multi-consumer object usable from any thread.
unsafe impl Send for Pool {}
// SAFETY: as above.
unsafe impl Sync for Pool {}

/// VPP's interface-name prefixes by the highest speed a device can do.
const SPEED_PREFIXES: [(u32, &str); 11] = [
    (1 << 15, "TwoHundredGigabitEthernet"),
    (1 << 14, "HundredGigabitEthernet"),
    (1 << 13, "FiftySixGigabitEthernet"),
    (1 << 12, "FiftyGigabitEthernet"),
    (1 << 11, "FortyGigabitEthernet"),
    (1 << 10, "TwentyFiveGigabitEthernet"),
    (1 << 9, "TwentyGigabitEthernet"),
    (1 << 8, "TenGigabitEthernet"),
    (1 << 7, "FiveGigabitEthernet"),
    (1 << 6, "TwoDotFiveGigabitEthernet"),
    (1 << 5, "GigabitEthernet"),
];

/// VPP's per-driver prefixes (its dpdk plugin's driver table).
const DRIVER_PREFIXES: [(&str, &str); 11] = [
    ("net_virtio_user", "VirtioUser"),
    ("net_vhost", "VhostEthernet"),
    ("net_failsafe", "FailsafeEthernet"),
    ("net_netvsc", "NetVSC"),
    ("net_ena", "VirtualFunctionEthernet"),
    ("net_ixgbe_vf", "VirtualFunctionEthernet"),
    ("net_i40e_vf", "VirtualFunctionEthernet"),
    ("net_iavf", "VirtualFunctionEthernet"),
    ("net_e1000_igb_vf", "VirtualFunctionEthernet"),
    ("net_vmxnet3", "GigabitEthernet"),
    ("net_virtio", "GigabitEthernet"),
];

/// PCI bus/device/function of a device name (`0000:02:00.1`).
pub fn pci_of(dev_name: &str) -> Option<(u32, u32, u32, u32)> {
    let n = crate::config::parse_pci(dev_name)?;
    let (dom, rest) = n.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (dev, func) = rest.split_once('.')?;
    Some((
        u32::from_str_radix(dom, 16).ok()?,
        u32::from_str_radix(bus, 16).ok()?,
        u32::from_str_radix(dev, 16).ok()?,
        u32::from_str_radix(func, 16).ok()?,
    ))
}

/// The interface name VPP gives a DPDK port: a prefix from the driver or from the fastest
/// speed the device supports (`Ethernet` when it says none), then the PCI address as
/// `bus/dev/func` in hex (`-domain/bus/dev/func` when the domain is not 0), or the port id for
/// devices that are not PCI; `/<n>` for a switch representor.
pub fn vpp_name(
    driver: &str,
    speed_capa: u32,
    bus: &str,
    dev_name: &str,
    port: u16,
    switch_port: i32,
) -> String {
    let prefix = DRIVER_PREFIXES
        .iter()
        .find(|(d, _)| *d == driver)
        .map(|(_, p)| *p)
        .or_else(|| {
            SPEED_PREFIXES
                .iter()
                .find(|(bit, _)| speed_capa & bit != 0)
                .map(|(_, p)| *p)
        })
        .unwrap_or("Ethernet");
    let mut name = prefix.to_string();
    match pci_of(dev_name).filter(|_| bus == "pci") {
        Some((0, b, d, f)) => name.push_str(&format!("{b:x}/{d:x}/{f:x}")),
        Some((dom, b, d, f)) => name.push_str(&format!("-{dom:x}/{b:x}/{d:x}/{f:x}")),
        None => name.push_str(&port.to_string()),
    }
    if switch_port >= 0 {
        name.push_str(&format!("/{switch_port}"));
    }
    name
}

/// RSS hash bits (`RTE_ETH_RSS_*`): IP (v4, v6, fragments, other, v6 extension headers).
pub const RSS_IP: u64 =
    (1 << 2) | (1 << 3) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 13) | (1 << 15);
/// RSS hash bits: TCP over v4, v6, v6 with extension headers.
pub const RSS_TCP: u64 = (1 << 4) | (1 << 10) | (1 << 16);
/// RSS hash bits: UDP over v4, v6, v6 with extension headers.
pub const RSS_UDP: u64 = (1 << 5) | (1 << 11) | (1 << 17);

/// The hash functions Sluice asks for (VPP's default, IP + TCP + UDP) that the device has.
pub fn rss_hf(n_rxq: u16, offloads: u64) -> u64 {
    if n_rxq <= 1 {
        0
    } else {
        (RSS_IP | RSS_TCP | RSS_UDP) & offloads
    }
}

/// `ip tcp udp` for the hash functions `hf` covers.
pub fn rss_names(hf: u64) -> String {
    let mut v = Vec::new();
    for (bits, n) in [(RSS_IP, "ip"), (RSS_TCP, "tcp"), (RSS_UDP, "udp")] {
        if hf & bits != 0 {
            v.push(n);
        }
    }
    if v.is_empty() {
        "none".into()
    } else {
        v.join(" ")
    }
}

/// `10 Gbps`, `100 Mbps`, `unknown`.
pub fn fmt_speed(mbps: u32) -> String {
    match mbps {
        0 => "unknown".into(),
        m if m % 1000 == 0 => format!("{} Gbps", m / 1000),
        m => format!("{m} Mbps"),
    }
}

/// A port's link state, shared by the interrupt thread (link-state-change callback), the
/// `dpdk-process` node (polling) and `show hardware-interfaces`. `up` is the Sluice
/// interface's own link flag.
pub struct LinkState {
    /// The shim.
    pub api: &'static Api,
    /// DPDK port.
    pub port: u16,
    /// Sluice interface name (log lines).
    pub name: String,
    /// The interface's link flag (`Interface::link_handle`).
    pub up: Arc<AtomicBool>,
    /// Speed in Mbps (0: unknown).
    pub speed: AtomicU32,
    /// Full duplex.
    pub duplex: AtomicU8,
    /// Link changes seen.
    pub events: AtomicU64,
    /// The device reports changes by interrupt (else they are polled every second).
    pub interrupt: bool,
}

impl LinkState {
    /// Reads the link and publishes it; logs a change.
    pub fn refresh(&self) {
        let mut l = Link::default();
        // SAFETY: `l` is a valid out pointer; the port exists for the life of the process.
        if unsafe { (self.api.link_get)(self.port, &mut l) } != 0 {
            return;
        }
        let up = l.up != 0;
        self.speed.store(l.speed_mbps, Ordering::Relaxed);
        self.duplex.store(l.full_duplex, Ordering::Relaxed);
        if self.up.swap(up, Ordering::AcqRel) != up {
            self.events.fetch_add(1, Ordering::Relaxed);
            log::info!(
                "{}: link {}{}",
                self.name,
                if up { "up" } else { "down" },
                if up {
                    format!(
                        " {} {}",
                        fmt_speed(l.speed_mbps),
                        if l.full_duplex != 0 {
                            "full-duplex"
                        } else {
                            "half-duplex"
                        }
                    )
                } else {
                    String::new()
                }
            );
        }
    }
}

/// The link-state-change callback: `arg` is a `LinkState` that lives as long as the process
/// (leaked by [`register_lsc`]).
unsafe extern "C" fn on_lsc(arg: *mut c_void) {
    // SAFETY: `arg` is the pointer register_lsc leaked; it is never freed.
    let l = unsafe { &*(arg as *const LinkState) };
    // A panic must not unwind into C.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| l.refresh()));
}

/// Registers `l` for the port's link-state-change interrupts (when the device has them).
pub fn register_lsc(l: &Arc<LinkState>) -> Result<(), String> {
    let raw = Arc::into_raw(l.clone()) as *mut c_void;
    // SAFETY: `raw` stays valid forever (one strong reference is leaked here); on_lsc has the
    // callback's C signature.
    let r = unsafe { (l.api.lsc_register)(l.port, on_lsc, raw) };
    if r != 0 {
        // SAFETY: not registered: take the leaked reference back.
        drop(unsafe { Arc::from_raw(raw as *const LinkState) });
        return Err(l.api.error(r));
    }
    Ok(())
}

/// Reads a port's information.
pub fn info(api: &Api, port: u16) -> Result<PortInfo, String> {
    let mut i = PortInfo::default();
    // SAFETY: `i` is a valid out pointer of the shim's struct layout.
    let r = unsafe { (api.port_info)(port, &mut i) };
    if r != 0 {
        return Err(api.error(r));
    }
    Ok(i)
}

/// Stops and closes a port [`setup`] started, when the interface that was to own it could
/// not be made: nothing else (no rx queue placement, no tx entry) uses the port yet.
pub fn close(api: &Api, port: u16) {
    // SAFETY: a plain C call on a port id; the shim's `sd_port_close` stops and closes it
    // (DPDK rejects an unknown id), and no queue of the port is polled or sent on: it was
    // only started by `setup`, before any interface or rx placement referred to it.
    unsafe { (api.port_close)(port) }
}

/// Configures, sets up and starts a port; `c` gets the descriptor counts the device took.
pub fn setup(api: &Api, port: u16, c: &mut PortConf, pool: Pool) -> Result<(), String> {
    let mut step: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: `c` and `step` are valid pointers; the pool outlives the port.
    let r = unsafe { (api.port_setup)(port, c, pool.0, &mut step) };
    if r != 0 {
        let s = if step.is_null() {
            String::new()
        } else {
            // SAFETY: the shim sets `step` to a static NUL-terminated string.
            unsafe { std::ffi::CStr::from_ptr(step) }
                .to_string_lossy()
                .into_owned()
        };
        return Err(format!("{s}: {}", api.error(r)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_vpp() {
        // A 10G PCI NIC.
        assert_eq!(
            vpp_name(
                "net_ixgbe",
                (1 << 8) | (1 << 5),
                "pci",
                "0000:02:00.1",
                0,
                -1
            ),
            "TenGigabitEthernet2/0/1"
        );
        assert_eq!(
            vpp_name("net_e1000_em", 1 << 5, "pci", "0000:00:08.0", 1, -1),
            "GigabitEthernet0/8/0"
        );
        assert_eq!(
            vpp_name("net_ice", 1 << 14, "pci", "0001:3b:00.0", 0, -1),
            "HundredGigabitEthernet-1/3b/0/0"
        );
        assert_eq!(
            vpp_name("net_virtio", 0, "pci", "0000:00:04.0", 0, -1),
            "GigabitEthernet0/4/0"
        );
        assert_eq!(
            vpp_name("mlx5_pci", 1 << 10, "pci", "0000:5e:00.0", 0, 3),
            "TwentyFiveGigabitEthernet5e/0/0/3"
        );
        // Virtual devices: by port id.
        assert_eq!(
            vpp_name("net_null", 0, "vdev", "net_null0", 2, -1),
            "Ethernet2"
        );
        assert_eq!(
            vpp_name("net_virtio_user", 0, "vdev", "virtio_user0", 1, -1),
            "VirtioUser1"
        );
    }

    #[test]
    fn rss_only_with_queues_and_only_what_the_device_has() {
        assert_eq!(rss_hf(1, u64::MAX), 0);
        assert_eq!(rss_hf(2, u64::MAX), RSS_IP | RSS_TCP | RSS_UDP);
        assert_eq!(rss_hf(4, RSS_IP), RSS_IP);
        assert_eq!(rss_names(RSS_IP | RSS_UDP), "ip udp");
        assert_eq!(rss_names(0), "none");
        assert_eq!(fmt_speed(10000), "10 Gbps");
        assert_eq!(fmt_speed(100), "100 Mbps");
        assert_eq!(fmt_speed(0), "unknown");
    }
}
