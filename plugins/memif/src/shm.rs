//! Shared memory: regions (memfd + `mmap(MAP_SHARED)`), ring views and eventfds.
//!
//! Ring layout (memif.h, 64-byte cache lines): `cookie: u32` at 0, `flags: u16` at 4,
//! `head: u16` at 6, `tail: u16` at 64, descriptors (16 bytes each) from 128. The producer of a
//! ring advances `head`, its consumer advances `tail`; for M2S rings the slave also hands out
//! empty buffers by advancing `head`, and the master fills them by advancing `tail`.
//!
//! All accesses to peer-writable memory go through raw pointers (atomics for head/tail/flags,
//! volatile reads/writes for descriptors, byte copies for payloads) after a bounds check
//! against the mapped region size, so a hostile peer can corrupt packets but never make
//! Sluice touch memory outside its mappings.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};

/// Ring header size (descriptors start here).
pub const RING_HDR: usize = 128;
/// Descriptor size.
pub const DESC_SIZE: usize = 16;
/// Descriptor flag: the packet continues in the next descriptor.
pub const DESC_FLAG_NEXT: u16 = 1;
/// Ring flag: the receiver polls, do not signal its eventfd.
pub const RING_FLAG_MASK_INT: u16 = 1;
/// Largest region Sluice maps (a peer cannot make it map more).
pub const MAX_REGION_SIZE: u64 = 1 << 34;

/// Bytes one ring of `2^log2` descriptors occupies.
pub fn ring_bytes(log2: u8) -> usize {
    RING_HDR + (DESC_SIZE << log2)
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
            log::warn!("memif: peer region cannot be sealed against shrinking");
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

/// A descriptor (16 bytes, little-endian on every platform memif runs on).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Desc {
    /// [`DESC_FLAG_NEXT`].
    pub flags: u16,
    /// Region of the buffer.
    pub region: u16,
    /// Bytes of packet (or, for M2S rings handed out by the slave, buffer capacity).
    pub length: u32,
    /// Offset of the buffer in its region.
    pub offset: u32,
    /// Unused metadata.
    pub metadata: u32,
}

const _: () = assert!(std::mem::size_of::<Desc>() == DESC_SIZE);

/// A view of one ring inside a region (kept alive by whoever owns the region).
#[derive(Copy, Clone, Debug)]
pub struct Ring {
    base: *mut u8,
    log2: u8,
}

// SAFETY: see Region; the ring's pointer is into a region kept alive by the owner.
unsafe impl Send for Ring {}
// SAFETY: as above.
unsafe impl Sync for Ring {}

impl Ring {
    /// The ring at `offset` in `region`, if it fits and is aligned.
    pub fn new(region: &Region, offset: u64, log2: u8) -> Option<Ring> {
        if offset % 8 != 0 || log2 == 0 || log2 > 15 {
            return None;
        }
        let base = region.range(offset, ring_bytes(log2) as u64)?;
        Some(Ring { base, log2 })
    }

    /// Number of descriptors.
    #[inline(always)]
    pub fn size(&self) -> u16 {
        (1u32 << self.log2) as u16
    }

    /// Address of the ring header (to compute its offset in a region we created).
    pub fn base_addr(&self) -> usize {
        self.base as usize
    }

    /// log2 of the size.
    pub fn log2(&self) -> u8 {
        self.log2
    }

    #[inline(always)]
    fn a16(&self, off: usize) -> &AtomicU16 {
        // SAFETY: off is 4, 6 or 64, inside the 128-byte header of a ring that lies in a
        // live mapping; the base is 8-byte aligned, so the u16 is aligned.
        unsafe { &*(self.base.add(off) as *const AtomicU16) }
    }

    /// Cookie.
    pub fn cookie(&self) -> u32 {
        // SAFETY: offset 0, aligned (base is 8-aligned), inside the header.
        unsafe { &*(self.base as *const AtomicU32) }.load(Ordering::Relaxed)
    }
    /// Writes the cookie.
    pub fn set_cookie(&self, c: u32) {
        // SAFETY: as in `cookie`.
        unsafe { &*(self.base as *const AtomicU32) }.store(c, Ordering::Relaxed)
    }
    /// Flags.
    #[inline(always)]
    pub fn flags(&self) -> u16 {
        self.a16(4).load(Ordering::Relaxed)
    }
    /// Writes the flags.
    pub fn set_flags(&self, f: u16) {
        self.a16(4).store(f, Ordering::Relaxed)
    }
    /// Head (acquire).
    #[inline(always)]
    pub fn head(&self) -> u16 {
        self.a16(6).load(Ordering::Acquire)
    }
    /// Publishes head (release).
    #[inline(always)]
    pub fn set_head(&self, v: u16) {
        self.a16(6).store(v, Ordering::Release)
    }
    /// Tail (acquire).
    #[inline(always)]
    pub fn tail(&self) -> u16 {
        self.a16(64).load(Ordering::Acquire)
    }
    /// Publishes tail (release).
    #[inline(always)]
    pub fn set_tail(&self, v: u16) {
        self.a16(64).store(v, Ordering::Release)
    }

    #[inline(always)]
    fn desc_ptr(&self, slot: u16) -> *mut Desc {
        let i = (slot & (self.size() - 1)) as usize;
        // SAFETY: i < size, and the ring (header + size descriptors) lies in the mapping.
        unsafe { self.base.add(RING_HDR + i * DESC_SIZE) as *mut Desc }
    }
    /// Reads descriptor `slot` (masked).
    #[inline(always)]
    pub fn desc(&self, slot: u16) -> Desc {
        // SAFETY: in bounds (desc_ptr) and 8-aligned; volatile because the peer writes it.
        unsafe { std::ptr::read_volatile(self.desc_ptr(slot)) }
    }
    /// Writes descriptor `slot` (masked).
    #[inline(always)]
    pub fn set_desc(&self, slot: u16, d: Desc) {
        // Two 8-byte stores (the layout is little-endian on every platform memif runs on);
        // a volatile struct write is done field by field.
        let lo = d.flags as u64 | (d.region as u64) << 16 | (d.length as u64) << 32;
        let hi = d.offset as u64 | (d.metadata as u64) << 32;
        let p = self.desc_ptr(slot) as *mut u64;
        // SAFETY: as in `desc`: the 16-byte descriptor is in bounds and 8-aligned.
        unsafe {
            std::ptr::write_volatile(p, lo.to_le());
            std::ptr::write_volatile(p.add(1), hi.to_le());
        }
    }
    /// Writes only the length of descriptor `slot`.
    #[inline(always)]
    pub fn set_desc_length(&self, slot: u16, len: u32) {
        // SAFETY: as in `desc`; `length` is a field of the in-bounds descriptor.
        unsafe { std::ptr::write_volatile(&raw mut (*self.desc_ptr(slot)).length, len) }
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
    fn ring_layout_and_bounds() {
        let r = Region::create("t", 4096).unwrap();
        assert!(Ring::new(&r, 0, 7).is_some());
        assert!(Ring::new(&r, 0, 8).is_none(), "128 + 16 * 256 > 4096");
        assert!(Ring::new(&r, 4, 2).is_none(), "misaligned");
        assert!(
            Ring::new(&r, 4096 - 128, 1).is_none(),
            "descriptors past the end"
        );
        let ring = Ring::new(&r, 0, 2).unwrap();
        ring.set_cookie(crate::proto::COOKIE);
        ring.set_head(5);
        ring.set_tail(3);
        ring.set_desc(
            6,
            Desc {
                flags: 1,
                region: 2,
                length: 3,
                offset: 4,
                metadata: 0,
            },
        );
        let p = r.range(0, 4096).unwrap();
        // SAFETY: the test reads its own mapping.
        let bytes = unsafe { std::slice::from_raw_parts(p, 4096) };
        assert_eq!(&bytes[0..4], &0x3E31F20u32.to_le_bytes());
        assert_eq!(&bytes[6..8], &[5, 0]);
        assert_eq!(&bytes[64..66], &[3, 0]);
        // slot 6 & 3 = 2 -> 128 + 32
        assert_eq!(&bytes[160..170], &[1, 0, 2, 0, 3, 0, 0, 0, 4, 0]);
        assert_eq!(r.range(4000, 97), None);
        assert_eq!(r.range(u64::MAX, 2), None);
    }

    #[test]
    fn peer_region_smaller_than_claimed_is_refused() {
        let r = Region::create("t", 4096).unwrap();
        // SAFETY: dup of an fd we own.
        let fd = unsafe { OwnedFd::from_raw_fd(libc::dup(r.raw_fd())) };
        assert!(Region::map(fd, 8192).unwrap_err().contains("claims"));
    }
}
