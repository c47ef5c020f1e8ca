//! The C shim (`src/shim.c`), loaded at run time.
//!
//! build.rs compiles the shim against Debian's libdpdk into a shared object and this crate
//! embeds its bytes. [`Api::load`] writes them to a memfd (or `SLUICE_DPDK_SHIM_FILE`) and
//! `dlopen`s it through `/proc/self/fd`, which loads libdpdk through the shim's `DT_NEEDED`
//! entries, then resolves every `sd_*` function. The
//! daemon binary itself never links libdpdk: without a `dpdk` section nothing is loaded, and a
//! machine without the DPDK libraries gets a one-line error naming the missing library when a
//! `dpdk` section asks for them. The library stays loaded for the life of the process (EAL
//! cannot be initialised twice anyway), so the [`Api`] is `'static`.
//!
//! Every function here is `unsafe extern "C"`; the safe wrappers are in [`crate::eal`] and
//! [`crate::node`], each call with its `// SAFETY:` reasoning.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

/// The shim shared object, when this build found libdpdk.
#[cfg(sluice_dpdk)]
pub const SHIM: Option<&[u8]> = Some(include_bytes!(concat!(
    env!("OUT_DIR"),
    "/libsluice_dpdk_shim.so"
)));
/// The shim shared object, when this build found libdpdk.
#[cfg(not(sluice_dpdk))]
pub const SHIM: Option<&[u8]> = None;

/// DPDK version the shim was compiled against.
#[cfg(sluice_dpdk)]
pub const BUILT_VERSION: &str = env!("SLUICE_DPDK_VERSION");
/// DPDK version the shim was compiled against.
#[cfg(not(sluice_dpdk))]
pub const BUILT_VERSION: &str = "";

/// Why DPDK support is not built (empty when it is).
pub const NOT_BUILT_WHY: &str = env!("SLUICE_DPDK_WHY");

/// Opaque `struct rte_mbuf`.
#[repr(C)]
pub struct RteMbuf {
    _p: [u8; 0],
}

/// Opaque `struct rte_mempool`.
#[repr(C)]
pub struct RteMempool {
    _p: [u8; 0],
}

/// `struct sd_port_info`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PortInfo {
    pub driver: [c_char; 64],
    pub dev_name: [c_char; 128],
    pub bus: [c_char; 32],
    pub mac: [u8; 6],
    pub max_rx_queues: u16,
    pub max_tx_queues: u16,
    pub rx_desc_max: u16,
    pub rx_desc_min: u16,
    pub tx_desc_max: u16,
    pub tx_desc_min: u16,
    pub mtu: u16,
    pub max_mtu: u16,
    pub speed_capa: u32,
    pub rss_offloads: u64,
    pub numa: i32,
    pub lsc_intr: u32,
    pub switch_port: i32,
}

impl Default for PortInfo {
    fn default() -> Self {
        PortInfo {
            driver: [0; 64],
            dev_name: [0; 128],
            bus: [0; 32],
            mac: [0; 6],
            max_rx_queues: 0,
            max_tx_queues: 0,
            rx_desc_max: 0,
            rx_desc_min: 0,
            tx_desc_max: 0,
            tx_desc_min: 0,
            mtu: 0,
            max_mtu: 0,
            speed_capa: 0,
            rss_offloads: 0,
            numa: 0,
            lsc_intr: 0,
            switch_port: -1,
        }
    }
}

/// A NUL-terminated C string field as a Rust string.
pub fn cstr(b: &[c_char]) -> String {
    let bytes: Vec<u8> = b
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `struct sd_port_conf`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PortConf {
    pub n_rxq: u16,
    pub n_txq: u16,
    pub n_rxd: u16,
    pub n_txd: u16,
    pub rss_hf: u64,
    pub lsc_intr: u32,
    pub promisc: u32,
}

/// `struct sd_link`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Link {
    pub speed_mbps: u32,
    pub up: u8,
    pub full_duplex: u8,
    pub autoneg: u8,
}

/// `struct sd_stats`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    pub ipackets: u64,
    pub opackets: u64,
    pub ibytes: u64,
    pub obytes: u64,
    pub imissed: u64,
    pub ierrors: u64,
    pub oerrors: u64,
    pub rx_nombuf: u64,
}

/// `sd_tx` per-packet status: sent.
pub const TX_SENT: u8 = 0;
/// `sd_tx` per-packet status: no mbuf for it.
pub const TX_NO_MBUF: u8 = 1;
/// `sd_tx` per-packet status: the device queue was full.
pub const TX_FULL: u8 = 2;
/// `sd_tx` per-packet status: sent as a copy (the Sluice buffer is still the caller's).
pub const TX_COPIED: u8 = 3;

/// `sd_rx`'s buffer index of a packet to copy (not a zero-copy mbuf).
pub const RX_COPY: u32 = u32::MAX;

/// `sd_rx`'s length of a packet to drop unread: its segments do not lie in their buffers or
/// do not add up to its length (what the device claims is not trusted).
pub const RX_BAD: u32 = u32::MAX;

/// Zero copy: allocates up to `n` Sluice buffers into `idx`, returns how many.
pub type BufAllocFn = unsafe extern "C" fn(idx: *mut u32, n: c_uint) -> c_uint;
/// Zero copy: frees `n` single Sluice buffers.
pub type BufFreeFn = unsafe extern "C" fn(idx: *const u32, n: c_uint);
/// Zero copy: Sluice buffers free.
pub type BufAvailFn = unsafe extern "C" fn() -> c_uint;

/// Link-state-change callback (called on DPDK's interrupt thread).
pub type LscFn = unsafe extern "C" fn(arg: *mut c_void);

macro_rules! api {
    ($( $field:ident : fn($($arg:ty),*) $(-> $ret:ty)? ; )*) => {
        /// The shim's functions, resolved from the loaded object.
        pub struct Api {
            $( pub $field: unsafe extern "C" fn($($arg),*) $(-> $ret)?, )*
        }

        impl Api {
            fn resolve(h: *mut c_void) -> Result<Api, String> {
                Ok(Api {
                    $( $field: {
                        let name = concat!("sd_", stringify!($field), "\0");
                        // SAFETY: `h` is a live dlopen handle and `name` is NUL-terminated.
                        let p = unsafe { libc::dlsym(h, name.as_ptr().cast()) };
                        if p.is_null() {
                            return Err(format!("DPDK shim lacks `{}'", &name[..name.len() - 1]));
                        }
                        // SAFETY: the symbol is the shim's function of exactly this C
                        // signature (src/shim.c); function and data pointers have the same
                        // size on Linux.
                        unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) $(-> $ret)?>(p) }
                    }, )*
                })
            }
        }
    };
}

api! {
    eal_init: fn(c_int, *mut *mut c_char) -> c_int;
    strerror: fn(c_int) -> *const c_char;
    version: fn() -> *const c_char;
    runtime_dir: fn() -> *const c_char;
    thread_register: fn() -> c_int;
    dev_probe: fn(*const c_char) -> c_int;
    port_by_name: fn(*const c_char, *mut u16) -> c_int;
    port_valid: fn(u16) -> c_int;
    max_ports: fn() -> u16;
    port_info: fn(u16, *mut PortInfo) -> c_int;
    port_setup: fn(u16, *mut PortConf, *mut RteMempool, *mut *const c_char) -> c_int;
    port_close: fn(u16);
    eal_cleanup: fn();
    link_get: fn(u16, *mut Link) -> c_int;
    lsc_register: fn(u16, LscFn, *mut c_void) -> c_int;
    lsc_unregister: fn(u16);
    stats_get: fn(u16, *mut Stats) -> c_int;
    xstats: fn(u16, *mut c_char, *mut u64, c_int) -> c_int;
    pool_create: fn(*const c_char, c_uint, c_uint, c_int) -> *mut RteMempool;
    pool_avail: fn(*const RteMempool) -> c_uint;
    pool_in_use: fn(*const RteMempool) -> c_uint;
    pool_size: fn(*const RteMempool) -> c_uint;
    pool_fill: fn(*mut RteMempool, *const u8, *const u16, c_uint);
    rx: fn(u16, u16, *mut *mut RteMbuf, u16, *mut u32, *mut i16, *mut u32, *mut u16) -> u16;
    rx_copy: fn(*const *mut RteMbuf, u16, *const u32, u32);
    mbuf_read: fn(*const RteMbuf, u32, *mut u8, u32) -> u32;
    free_bulk: fn(*const *mut RteMbuf, u16);
    tx: fn(u16, u16, *mut RteMempool, *const u32, *const i16, *const u16, *const u16, u16, c_int, *mut u8, *mut u16) -> u16;
    arena: fn(*mut u8, u64, u16, u16);
    zc_init: fn(u32, c_uint, BufAllocFn, BufFreeFn, BufAvailFn, *mut *mut RteMempool) -> c_int;
    zc_lent: fn() -> u64;
}

// SAFETY: the table holds plain function pointers into a library that is never unloaded.
unsafe impl Sync for Api {}
// SAFETY: as above.
unsafe impl Send for Api {}

fn dlerror() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated thread-local message.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        return "unknown dlopen error".into();
    }
    // SAFETY: non-NULL, NUL-terminated (above).
    unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
}

/// Writes the shim object to a new file at `path` (`SLUICE_DPDK_SHIM_FILE`), which is then
/// loaded: created, never an existing file or a symlink (another user's file or link must not
/// decide what is written where), readable by its owner only. Returns the file open: it is
/// loaded through its descriptor ([`shim_object`]), never by the path again.
fn write_shim_file(path: &std::path::Path, bytes: &[u8]) -> Result<std::fs::File, String> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .and_then(|mut f| f.write_all(bytes).map(|()| f))
        .map_err(|e| {
            format!(
                "SLUICE_DPDK_SHIM_FILE {}: {e} (it must name a file that does not exist yet)",
                path.display()
            )
        })
}

/// The shim object `bytes` written to a memfd, or with `file` (`SLUICE_DPDK_SHIM_FILE`, for
/// profilers, which name a memfd's functions `???`) to a new file there: the open file and
/// the path `dlopen` takes, `/proc/self/fd/<n>` of that file in both cases. So what is
/// loaded is what was written: the path `file` is never opened again (whoever can write its
/// directory may replace or remove the file meanwhile), while a profiler still sees the
/// mapping under the file's own name.
fn shim_object(
    bytes: &[u8],
    file: Option<&std::path::Path>,
) -> Result<(std::fs::File, std::ffi::CString), String> {
    use std::io::Write as _;
    use std::os::fd::{AsRawFd, FromRawFd};
    let f = match file {
        Some(p) => write_shim_file(p, bytes)?,
        None => {
            // SAFETY: memfd_create with a NUL-terminated name; the fd is owned below.
            let fd = unsafe { libc::memfd_create(c"sluice-dpdk-shim".as_ptr(), libc::MFD_CLOEXEC) };
            if fd < 0 {
                return Err(format!("memfd_create: {}", std::io::Error::last_os_error()));
            }
            // SAFETY: `fd` was just created and is owned by nobody else.
            let mut f = unsafe { std::fs::File::from_raw_fd(fd) };
            f.write_all(bytes)
                .map_err(|e| format!("writing the DPDK shim: {e}"))?;
            f
        }
    };
    let path = std::ffi::CString::new(format!("/proc/self/fd/{}", f.as_raw_fd()))
        .expect("no NUL in a number");
    Ok((f, path))
}

impl Api {
    /// Loads the shim object `bytes` (and libdpdk with it). Once per process: the result is
    /// leaked, the library stays loaded.
    pub fn load(bytes: &[u8]) -> Result<&'static Api, String> {
        let file = std::env::var_os("SLUICE_DPDK_SHIM_FILE");
        let (f, path) = shim_object(bytes, file.as_deref().map(std::path::Path::new))?;
        // SAFETY: dlopen of a NUL-terminated path; the object's constructors are libdpdk's
        // (driver registration), which expect to run at load time.
        let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        drop(f);
        if h.is_null() {
            return Err(format!("cannot load the DPDK libraries: {}", dlerror()));
        }
        let api = Api::resolve(h)?;
        Ok(Box::leak(Box::new(api)))
    }

    /// `rte_strerror` of a (negative) errno.
    pub fn error(&self, err: c_int) -> String {
        // SAFETY: sd_strerror returns a static or thread-local NUL-terminated string.
        let p = unsafe { (self.strerror)(err) };
        if p.is_null() {
            return format!("error {err}");
        }
        // SAFETY: non-NULL, NUL-terminated.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// The running libdpdk's version string.
    pub fn running_version(&self) -> String {
        // SAFETY: rte_version returns a static NUL-terminated string.
        let p = unsafe { (self.version)() };
        if p.is_null() {
            return String::new();
        }
        // SAFETY: as above.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_a_one_line_load_error() {
        let e = match Api::load(b"not an ELF object") {
            Err(e) => e,
            Ok(_) => panic!("garbage loaded"),
        };
        assert!(e.starts_with("cannot load the DPDK libraries: "), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }

    #[test]
    fn shim_file_is_new_private_and_never_a_link() {
        use std::os::unix::fs::PermissionsExt as _;
        let d = std::env::temp_dir().join(format!("sluice-dpdk-shimfile-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let new = d.join("shim.so");
        drop(write_shim_file(&new, b"obj").unwrap());
        assert_eq!(std::fs::read(&new).unwrap(), b"obj");
        let mode = std::fs::metadata(&new).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // An existing file is refused, left as it was.
        let e = write_shim_file(&new, b"other").unwrap_err();
        assert!(e.starts_with("SLUICE_DPDK_SHIM_FILE "), "{e}");
        assert!(!e.contains('\n'), "{e}");
        assert_eq!(std::fs::read(&new).unwrap(), b"obj");
        // A symlink is refused, its target untouched (dangling or not).
        let target = d.join("target");
        std::fs::write(&target, b"mine").unwrap();
        let link = d.join("link.so");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(write_shim_file(&link, b"other").is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"mine");
        let dangling = d.join("dangling.so");
        std::os::unix::fs::symlink(d.join("nowhere"), &dangling).unwrap();
        assert!(write_shim_file(&dangling, b"other").is_err());
        assert!(!d.join("nowhere").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// What is loaded is the file written, through its descriptor: replacing the file at the
    /// path (or removing it) after it was written changes nothing.
    #[test]
    fn shim_file_is_loaded_through_its_descriptor() {
        let d = std::env::temp_dir().join(format!("sluice-dpdk-shimfd-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let at = d.join("shim.so");
        let (f, path) = shim_object(b"written", Some(&at)).unwrap();
        std::fs::remove_file(&at).unwrap();
        std::fs::write(&at, b"swapped").unwrap();
        let path = path.into_string().unwrap();
        assert!(path.starts_with("/proc/self/fd/"), "{path}");
        assert_eq!(std::fs::read(&path).unwrap(), b"written");
        drop(f);
        // The memfd alike.
        let (_f, path) = shim_object(b"in memory", None).unwrap();
        assert_eq!(std::fs::read(path.to_str().unwrap()).unwrap(), b"in memory");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn cstr_stops_at_nul() {
        let mut b = [0 as c_char; 8];
        for (i, c) in b"net_x".iter().enumerate() {
            b[i] = *c as c_char;
        }
        assert_eq!(cstr(&b), "net_x");
    }
}
