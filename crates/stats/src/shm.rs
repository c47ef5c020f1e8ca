//! The shared memory under the segment: a sealed memfd, its mappings (read-write in the
//! daemon, read-only in readers), and handing its fd to a reader over a Unix socket
//! (`SCM_RIGHTS`, as VPP's `stats.sock`).
//!
//! Every access to a mapping is an atomic load or store of a 64-bit word through
//! [`Mapping::words`]; no reference to the bytes as plain data is ever made, so a reader racing
//! the writer (in another process) has no data race in Rust's model.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

/// One mapping of the segment.
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is accessed only through `&[AtomicU64]` (atomic loads/stores), which is
// Send + Sync; the pointer stays valid until Drop unmaps it.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` (shared), writable or not.
    fn map(fd: RawFd, len: usize, writable: bool) -> io::Result<Mapping> {
        if len == 0 || len % 8 != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("segment size {len} is not a positive multiple of 8"),
            ));
        }
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: mapping a file we hold an fd to, at an address the kernel chooses; the
        // result is checked before use.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, 0) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: NonNull::new(p as *mut u8).ok_or_else(io::Error::last_os_error)?,
            len,
        })
    }

    /// The mapping as 64-bit words.
    pub fn words(&self) -> &[AtomicU64] {
        // SAFETY: the mapping is page-aligned (so 8-aligned), `len` bytes long and a multiple
        // of 8 (checked in `map`), and lives as long as `self`. AtomicU64 has u64's layout.
        // The memory is only ever accessed atomically by this process; other processes map it
        // read-only, or are the single writer using atomics too. Atomic loads from a
        // read-only mapping are fine: x86-64 and aarch64 64-bit atomic loads are plain loads
        // that never write.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr() as *const AtomicU64, self.len / 8) }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never: `map` refuses it).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `map` mapped; no reference into it outlives `self`
        // (`words` borrows `self`).
        unsafe {
            libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.len);
        }
    }
}

/// Creates a zeroed memfd of `size` bytes, mapped read-write, then sealed so that it can no
/// longer shrink or grow (a reader cannot make the daemon's accesses fault) and, where the
/// kernel supports it (5.1+), so that no new writable mapping or write can be made through
/// any fd (readers get a read-only view even from the fd they receive).
pub fn create(name: &str, size: usize) -> io::Result<(OwnedFd, Mapping)> {
    let cname = std::ffi::CString::new(name.replace('\0', "")).unwrap_or_default();
    // SAFETY: valid NUL-terminated name; flags are constants; the result is checked.
    let fd =
        unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_ALLOW_SEALING | libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just created and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: plain syscall on an fd we own.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let map = Mapping::map(fd.as_raw_fd(), size, true)?;
    let base = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
    // SAFETY: fcntl on an fd we own. F_SEAL_FUTURE_WRITE keeps our existing writable mapping
    // working; kernels before 5.1 refuse it with EINVAL, then the size seals alone apply.
    unsafe {
        if libc::fcntl(
            fd.as_raw_fd(),
            libc::F_ADD_SEALS,
            base | libc::F_SEAL_FUTURE_WRITE | libc::F_SEAL_SEAL,
        ) != 0
        {
            libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, base | libc::F_SEAL_SEAL);
        }
    }
    Ok((fd, map))
}

/// Maps a received segment read-only (its whole size, from fstat).
pub fn map_readonly(fd: &OwnedFd) -> io::Result<Mapping> {
    // SAFETY: fstat fills a plain struct for an fd we own.
    let size = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd.as_raw_fd(), &mut st) != 0 {
            return Err(io::Error::last_os_error());
        }
        st.st_size
    };
    if size < crate::layout::HEADER_BYTES as libc::off_t {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("segment is {size} bytes: not a Sluice statistics segment"),
        ));
    }
    Mapping::map(fd.as_raw_fd(), size as usize & !7, false)
}

/// A read-only fd to the same file (opened again through `/proc/self/fd`), so what a reader
/// receives cannot write even on kernels without `F_SEAL_FUTURE_WRITE`. Falls back to a
/// duplicate of `fd` when `/proc` is not mounted.
pub fn readonly_fd(fd: &OwnedFd) -> io::Result<OwnedFd> {
    let path = format!("/proc/self/fd/{}\0", fd.as_raw_fd());
    // SAFETY: NUL-terminated path; the result is checked and owned.
    let r = unsafe {
        libc::open(
            path.as_ptr() as *const libc::c_char,
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if r >= 0 {
        // SAFETY: fd just returned by open.
        return Ok(unsafe { OwnedFd::from_raw_fd(r) });
    }
    fd.try_clone()
}

/// Sends `fd` with a one-byte message.
pub fn send_fd(s: &UnixStream, fd: RawFd) -> io::Result<()> {
    let byte = [b'S'];
    let mut iov = libc::iovec {
        iov_base: byte.as_ptr() as *mut libc::c_void,
        iov_len: 1,
    };
    // Room for CMSG_SPACE(sizeof(int)), 8-aligned.
    let mut cbuf = [0u64; 4];
    // SAFETY: msghdr is plain data; the CMSG macros stay within `cbuf`, which is larger than
    // CMSG_SPACE(sizeof(int)); sendmsg reads only what the msghdr describes.
    let n = unsafe {
        let mut mh: libc::msghdr = std::mem::zeroed();
        mh.msg_iov = &mut iov;
        mh.msg_iovlen = 1;
        mh.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        mh.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) as _;
        let c = libc::CMSG_FIRSTHDR(&mh);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut libc::c_int, fd);
        libc::sendmsg(s.as_raw_fd(), &mh, libc::MSG_NOSIGNAL)
    };
    if n != 1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Receives the fd [`send_fd`] sent (blocking; the caller sets a timeout).
pub fn recv_fd(s: &UnixStream) -> io::Result<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr() as *mut libc::c_void,
        iov_len: 1,
    };
    let mut cbuf = [0u64; 8];
    let mut fds = Vec::new();
    // SAFETY: msghdr points at local buffers of the stated sizes; the CMSG iteration stays
    // within msg_controllen as set by the kernel; every fd the kernel installed is taken into
    // an OwnedFd exactly once (so extra ones are closed).
    let n = unsafe {
        let mut mh: libc::msghdr = std::mem::zeroed();
        mh.msg_iov = &mut iov;
        mh.msg_iovlen = 1;
        mh.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        mh.msg_controllen = std::mem::size_of_val(&cbuf) as _;
        let n = libc::recvmsg(s.as_raw_fd(), &mut mh, libc::MSG_CMSG_CLOEXEC);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut c = libc::CMSG_FIRSTHDR(&mh);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c) as *const libc::c_int;
                let k = ((*c).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<libc::c_int>();
                for i in 0..k {
                    let fd = std::ptr::read_unaligned(data.add(i));
                    if fd >= 0 {
                        fds.push(OwnedFd::from_raw_fd(fd));
                    }
                }
            }
            c = libc::CMSG_NXTHDR(&mh, c);
        }
        n
    };
    if n != 1 || byte[0] != b'S' || fds.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "no statistics segment received (not a Sluice stats socket?)",
        ));
    }
    Ok(fds.swap_remove(0))
}
