//! Unix `SOCK_SEQPACKET` control channels (filesystem paths, or abstract names written
//! `@name`), one 128-byte message per packet, file descriptors passed with `SCM_RIGHTS`.
//! Every socket is non-blocking; the control plane polls them. Used by memif and by the
//! host stack's application attach.

/// Size of every message.
pub const MSG_SIZE: usize = 128;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

fn sockaddr(path: &str) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain data.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let (bytes, start) = match path.strip_prefix('@') {
        Some(n) => (n.as_bytes(), 1), // abstract: leading NUL
        None => (path.as_bytes(), 0),
    };
    if bytes.is_empty() || start + bytes.len() >= a.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad socket path `{path}'"),
        ));
    }
    for (i, &c) in bytes.iter().enumerate() {
        a.sun_path[start + i] = c as libc::c_char;
    }
    let base = std::mem::offset_of!(libc::sockaddr_un, sun_path);
    let len = base + start + bytes.len() + if start == 0 { 1 } else { 0 };
    Ok((a, len as libc::socklen_t))
}

fn socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall, result checked and owned.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd just created.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Connects to a master's socket.
pub fn connect(path: &str) -> io::Result<OwnedFd> {
    let (a, len) = sockaddr(path)?;
    let fd = socket()?;
    // SAFETY: a/len describe a valid sockaddr_un.
    let r = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            &a as *const libc::sockaddr_un as *const libc::sockaddr,
            len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Listens on `path` under `crate::unix_socket`'s rules: the directory is created
/// `0700` or must be owned by this user (or root) and not writable by others, a stale socket
/// nobody listens on is replaced, a live one or anything that is not a socket is an error
/// (never removed); the socket gets mode `0660`.
pub fn listen(path: &str) -> io::Result<OwnedFd> {
    use crate::unix_socket::{self as us, SocketPerms};
    let (a, len) = sockaddr(path)?;
    let file = (!path.starts_with('@')).then(|| std::path::Path::new(path));
    if let Some(p) = file {
        us::prepare(p, &SocketPerms::default()).map_err(|e| io::Error::new(e.kind(), e))?;
    }
    let fd = socket()?;
    // SAFETY: a/len describe a valid sockaddr_un; plain syscall on our fd.
    let r = us::with_private_umask(|| unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &a as *const libc::sockaddr_un as *const libc::sockaddr,
            len,
        )
    });
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    if let Some(p) = file {
        us::set_perms(p, &SocketPerms::default()).map_err(|e| io::Error::new(e.kind(), e))?;
    }
    // SAFETY: plain syscall on our fd.
    if unsafe { libc::listen(fd.as_raw_fd(), 16) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Accepts one pending connection, if any.
pub fn accept(l: &OwnedFd) -> io::Result<Option<OwnedFd>> {
    // SAFETY: plain syscall; the result is checked and owned.
    let fd = unsafe {
        libc::accept4(
            l.as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
            _ => Err(e),
        };
    }
    // SAFETY: fd just returned by accept4.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Sends one message, with an optional fd.
pub fn send(s: &OwnedFd, msg: &[u8; MSG_SIZE], fd: Option<RawFd>) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: msg.as_ptr() as *mut libc::c_void,
        iov_len: MSG_SIZE,
    };
    // Room for one cmsg with one int, 8-aligned.
    let mut cbuf = [0u64; 4];
    // SAFETY: msghdr is plain data; the CMSG macros are used within `cbuf`, which is large
    // enough for CMSG_SPACE(sizeof(int)); sendmsg reads only what the msghdr describes.
    unsafe {
        let mut mh: libc::msghdr = std::mem::zeroed();
        mh.msg_iov = &mut iov;
        mh.msg_iovlen = 1;
        if let Some(fd) = fd {
            let space = libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) as usize;
            mh.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
            mh.msg_controllen = space as _;
            let c = libc::CMSG_FIRSTHDR(&mh);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut libc::c_int, fd);
        }
        let n = libc::sendmsg(s.as_raw_fd(), &mh, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n as usize != MSG_SIZE {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "short send"));
        }
    }
    Ok(())
}

/// What one receive produced.
pub enum Recv {
    /// Nothing pending.
    None,
    /// The peer closed the connection.
    Closed,
    /// A message (`len` bytes; anything but 128 is malformed) and the fds that came with it
    /// (owned: closed if not used).
    Msg {
        /// The bytes.
        buf: [u8; MSG_SIZE],
        /// Bytes received (truncated at 128).
        len: usize,
        /// Received fds.
        fds: Vec<OwnedFd>,
        /// Control data or payload was truncated by the kernel.
        truncated: bool,
    },
}

/// Receives one message without blocking.
pub fn recv(s: &OwnedFd) -> io::Result<Recv> {
    let mut buf = [0u8; MSG_SIZE];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: MSG_SIZE,
    };
    let mut cbuf = [0u64; 16]; // room for several fds
    let mut fds = Vec::new();
    // SAFETY: msghdr is plain data pointing at local buffers of the stated sizes; the CMSG
    // iteration macros stay within msg_controllen as set by the kernel; every fd the kernel
    // installed is taken into an OwnedFd exactly once.
    let (n, flags) = unsafe {
        let mut mh: libc::msghdr = std::mem::zeroed();
        mh.msg_iov = &mut iov;
        mh.msg_iovlen = 1;
        mh.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        mh.msg_controllen = std::mem::size_of_val(&cbuf) as _;
        let n = libc::recvmsg(
            s.as_raw_fd(),
            &mut mh,
            libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
        );
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(Recv::None),
                _ => Err(e),
            };
        }
        let mut c = libc::CMSG_FIRSTHDR(&mh);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c) as *const libc::c_int;
                let hdr = libc::CMSG_LEN(0) as usize;
                let k = ((*c).cmsg_len as usize).saturating_sub(hdr)
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
        (n as usize, mh.msg_flags)
    };
    if n == 0 && fds.is_empty() {
        return Ok(Recv::Closed);
    }
    Ok(Recv::Msg {
        buf,
        len: n,
        fds,
        truncated: flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seqpacket_roundtrip_with_fd_on_abstract_socket() {
        let name = format!("@sluice-seqpacket-test-{}", std::process::id());
        let l = listen(&name).unwrap();
        let c = connect(&name).unwrap();
        let s = accept(&l).unwrap().unwrap();
        let e = crate::shm::eventfd().unwrap();
        let mut m = [7u8; MSG_SIZE];
        m[0] = 1;
        send(&c, &m, Some(e.as_raw_fd())).unwrap();
        match recv(&s).unwrap() {
            Recv::Msg {
                buf,
                len,
                fds,
                truncated,
            } => {
                assert_eq!(len, MSG_SIZE);
                assert_eq!(buf, m);
                assert_eq!(fds.len(), 1);
                assert!(!truncated);
            }
            _ => panic!("no message"),
        }
        assert!(matches!(recv(&s).unwrap(), Recv::None));
        drop(c);
        assert!(matches!(recv(&s).unwrap(), Recv::Closed));
    }

    #[test]
    fn stale_socket_file_is_replaced() {
        let dir =
            std::env::temp_dir().join(format!("sluice-seqpacket-sock-{}", std::process::id()));
        let p = dir.join("m.sock");
        let p = p.to_str().unwrap();
        let l = listen(p).unwrap();
        assert!(listen(p).is_err(), "in use");
        drop(l);
        let _l2 = listen(p).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
