//! Shared memory between processes: regions (a memfd mapped `MAP_SHARED`, sealed against
//! shrinking so a peer cannot make our accesses fault) and eventfds, for memif and the host
//! stack's application segments. Accesses to peer-writable memory go through raw pointers
//! after [`Region::range`] checked them against the mapped size.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Largest region Sluice maps (a peer cannot make it map more).
pub const MAX_REGION_SIZE: u64 = 1 << 34;

fn log_unsealed() {
    eprintln!("shm: peer region cannot be sealed against shrinking");
}

/// One mapped region. Unmapped when dropped.
#[derive(Debug)]
pub struct Region {
    ptr: *mut u8,
    size: usize,
    fd: OwnedFd,
    /// Whether this Region mapped the memory (and unmaps it when dropped); false for the
    /// buffer arena announced in zero-copy mode, which the buffer pool owns.
    owned: bool,
}

// SAFETY: the mapping is plain shared memory; every access goes through raw pointers with
// atomics/volatile semantics, and the mapping lives as long as the Region.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Region {
    /// Creates a zeroed region of `size` bytes backed by a new memfd (sealed against
    /// shrinking so the peer cannot make our accesses fault).
    pub fn create(name: &str, size: usize) -> io::Result<Region> {
        let cname = std::ffi::CString::new(name.replace('\0', "")).unwrap_or_default();
        // SAFETY: valid NUL-terminated name; flags are constants.
        let fd = unsafe {
            libc::memfd_create(cname.as_ptr(), libc::MFD_ALLOW_SEALING | libc::MFD_CLOEXEC)
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd was just created and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: plain syscalls on an fd we own.
        unsafe {
            if libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) != 0 {
                return Err(io::Error::last_os_error());
            }
            libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK);
        }
        Self::map_fd(fd, size)
    }

    /// Maps a region received from the peer, after checking that the file really is at least
    /// `size` bytes (else an access past its end would raise SIGBUS) and sealing it against
    /// shrinking when the file allows it.
    pub fn map(fd: OwnedFd, size: u64) -> Result<Region, String> {
        if size == 0 || size > MAX_REGION_SIZE {
            return Err(format!("bad region size {size}"));
        }
        // SAFETY: fstat fills a plain struct for an fd we own.
        let st_size = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(fd.as_raw_fd(), &mut st) != 0 {
                return Err(format!("fstat: {}", io::Error::last_os_error()));
            }
            st.st_size as u64
        };
        if st_size < size {
            return Err(format!(
                "region file is {st_size} bytes, peer claims {size}"
            ));
        }
        // SAFETY: fcntl on an fd we own; failure (not a memfd, or sealing not allowed) is
        // tolerated: the peer is then trusted not to shrink its own region.
        let sealed = unsafe {
            libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) == 0
                || libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) & libc::F_SEAL_SHRINK != 0
        };
        if !sealed {
            log_unsealed();
        }
        Self::map_fd(fd, size as usize).map_err(|e| format!("mmap: {e}"))
    }

    fn map_fd(fd: OwnedFd, size: usize) -> io::Result<Region> {
        // SAFETY: mapping a file we hold an fd to; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Region {
            ptr: p as *mut u8,
            size,
            fd,
            owned: true,
        })
    }

    /// Announces memory mapped by someone else (the shared buffer arena, `fd` a dup of its
    /// memfd) as a region. The caller keeps the mapping alive for as long as the Region (the
    /// connection holds an `Arc` of the buffer pool); it is not unmapped on drop.
    pub fn borrowed(ptr: *mut u8, size: usize, fd: OwnedFd) -> Region {
        Region {
            ptr,
            size,
            fd,
            owned: false,
        }
    }

    /// Size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The backing fd (sent to the peer in ADD_REGION).
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Pointer to `[off, off + len)` if that range lies inside the region.
    #[inline(always)]
    pub fn range(&self, off: u64, len: u64) -> Option<*mut u8> {
        let end = off.checked_add(len)?;
        if end > self.size as u64 {
            return None;
        }
        // SAFETY: off + len <= size, so the pointer stays inside the mapping.
        Some(unsafe { self.ptr.add(off as usize) })
    }

    /// Hints the CPU to fetch the line at `off` (no bound check needed: a prefetch never
    /// faults; an offset past the region only makes it useless).
    #[inline(always)]
    pub fn prefetch(&self, off: u64) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: prefetch never faults and has no architectural effect; the address is
        // only computed (wrapping), not dereferenced.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(self.ptr.wrapping_add(off as usize) as *const i8);
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = off;
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        // SAFETY: ptr/size are exactly what mmap returned; nothing references the mapping
        // any more (the data path holds the Region through an Arc).
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.size);
        }
    }
}

/// Creates a non-blocking eventfd.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the result is checked and owned.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd just created.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Signals an eventfd (interrupt to the peer). Errors (counter overflow) are ignored.
#[inline]
pub fn signal(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a local to an fd we own.
    unsafe {
        libc::write(fd, &one as *const u64 as *const libc::c_void, 8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_region_smaller_than_claimed_is_refused() {
        let r = Region::create("t", 4096).unwrap();
        // SAFETY: dup of an fd we own.
        let fd = unsafe { OwnedFd::from_raw_fd(libc::dup(r.raw_fd())) };
        assert!(Region::map(fd, 8192).unwrap_err().contains("claims"));
    }
}
