//! Listening Unix sockets that cannot be turned against the host (VPP's `clib_socket`, with the
//! checks VPP leaves out). One policy for every socket the daemon serves — the CLI, the API,
//! the stats segment, memif — and for the clients that connect to them:
//!
//! - **The directory** holding the socket must be a directory owned by the daemon's effective
//!   user (or root) and not writable by others; group-writable only when its group is the
//!   socket's group (or root's). A missing directory is created `0700`, or `0750` with the
//!   group set when [`SocketPerms::group`] is given (members must traverse it to connect);
//!   missing parents are created `0755`. A directory owned by someone else (for example a
//!   `/tmp/sluice-<uid>` made by another user first) or world-writable (`/tmp` itself) is
//!   refused: whoever can write there can replace the socket and sit in the middle.
//! - **The socket** is bound under a `0177` umask (nobody else can connect in the window before
//!   its mode is set), then given [`SocketPerms::mode`] (`0660` by default) and group.
//! - **What is already at the path** is removed only if it is a socket nobody listens on (a
//!   stale one left by a crash). A live socket is [`SocketError::InUse`]; anything that is not
//!   a socket (a regular file, a symlink, a directory) is [`SocketError::NotASocket`] and left
//!   alone.
//! - **On drop** the path is unlinked only if it is still the socket this listener bound (same
//!   device and inode), so a daemon that lost its socket to a successor never removes the
//!   successor's.
//! - **Clients** call [`check_before_connect`]: the path must be a socket owned by the caller
//!   or root, in a directory that passes the same ownership test and is not world-writable.
//!
//! [`OwnedListener`] binds a `SOCK_STREAM` listener. Other socket types (memif's
//! `SOCK_SEQPACKET`) use the same steps: [`prepare`], bind inside [`with_private_umask`],
//! [`set_perms`], and [`remove_if_same`] / [`remove_socket`] when closing. Abstract sockets
//! (`@name`) have no file and are outside this module.
//!
//! ```no_run
//! use sluice_infra::unix_socket::{OwnedListener, SocketPerms};
//! let l = OwnedListener::bind("/run/sluice/api.sock".as_ref(), &SocketPerms::default())?;
//! l.set_nonblocking(true)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Mode and group of a socket (and of the directory created for it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketPerms {
    /// Permission bits of the socket file (`0660` by default; only the low 9 bits are used).
    pub mode: u32,
    /// Group of the socket and of a directory created for it (VPP's `unix { gid }`); `None`:
    /// the daemon's effective group.
    pub group: Option<u32>,
}

impl Default for SocketPerms {
    fn default() -> Self {
        SocketPerms {
            mode: 0o660,
            group: None,
        }
    }
}

/// Why a socket could not be bound or trusted. Every message is one line naming the path.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// The directory is owned by a user other than the caller and root.
    #[error("refusing {path}: directory {dir} is owned by uid {owner}, not by uid {me} or root")]
    DirOwner {
        /// Socket path.
        path: PathBuf,
        /// Its directory.
        dir: PathBuf,
        /// The directory's owner.
        owner: u32,
        /// The caller's effective uid.
        me: u32,
    },
    /// The directory is writable by users who are neither its owner nor trusted.
    #[error("refusing {path}: directory {dir} is writable by others (mode {mode:04o}); use a directory only sluice's user can write, e.g. /run/sluice")]
    DirWritable {
        /// Socket path.
        path: PathBuf,
        /// Its directory.
        dir: PathBuf,
        /// The directory's permission bits.
        mode: u32,
    },
    /// The socket's directory is not a directory.
    #[error("refusing {path}: {dir} is not a directory")]
    NotADirectory {
        /// Socket path.
        path: PathBuf,
        /// What should have been its directory.
        dir: PathBuf,
    },
    /// Something that is not a socket is at the path (never removed).
    #[error("refusing {path}: it exists and is not a socket (not removing it)")]
    NotASocket {
        /// The path.
        path: PathBuf,
    },
    /// The socket is owned by a user other than the caller and root (client side).
    #[error("refusing {path}: socket is owned by uid {owner}, not by uid {me} or root")]
    SocketOwner {
        /// The path.
        path: PathBuf,
        /// The socket's owner.
        owner: u32,
        /// The caller's effective uid.
        me: u32,
    },
    /// A process already listens on the socket.
    #[error("{path} is in use by a running process")]
    InUse {
        /// The path.
        path: PathBuf,
    },
    /// A system call failed.
    #[error("{path}: {op}: {source}")]
    Io {
        /// The path it was about.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The error.
        source: io::Error,
    },
}

impl SocketError {
    fn io(path: &Path, op: &'static str, source: io::Error) -> Self {
        SocketError::Io {
            path: path.to_path_buf(),
            op,
            source,
        }
    }

    /// The underlying OS error kind, for callers that map errors (e.g. `NotFound` before
    /// connecting); checks that refused the path are `PermissionDenied`.
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            SocketError::Io { source, .. } => source.kind(),
            SocketError::InUse { .. } => io::ErrorKind::AddrInUse,
            _ => io::ErrorKind::PermissionDenied,
        }
    }
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn cpath(p: &Path, op: &'static str) -> Result<CString, SocketError> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| {
        SocketError::io(
            p,
            op,
            io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"),
        )
    })
}

fn chown_group(p: &Path, gid: u32) -> Result<(), SocketError> {
    let c = cpath(p, "chown")?;
    // SAFETY: c is a valid NUL-terminated path; uid -1 leaves the owner unchanged.
    if unsafe { libc::lchown(c.as_ptr(), u32::MAX, gid) } != 0 {
        return Err(SocketError::io(p, "chown", io::Error::last_os_error()));
    }
    Ok(())
}

/// The directory a socket path lives in (`.` for a bare name).
pub fn socket_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Checks that `dir` may hold a socket: a directory (symlinks followed) owned by the caller or
/// root, not world-writable, group-writable only if its group is root's or `group`.
pub fn check_dir(path: &Path, dir: &Path, group: Option<u32>) -> Result<(), SocketError> {
    let m = std::fs::metadata(dir).map_err(|e| SocketError::io(dir, "stat", e))?;
    if !m.is_dir() {
        return Err(SocketError::NotADirectory {
            path: path.to_path_buf(),
            dir: dir.to_path_buf(),
        });
    }
    let me = euid();
    if m.uid() != me && m.uid() != 0 {
        return Err(SocketError::DirOwner {
            path: path.to_path_buf(),
            dir: dir.to_path_buf(),
            owner: m.uid(),
            me,
        });
    }
    let mode = m.mode() & 0o7777;
    let group_ok = m.gid() == 0 || Some(m.gid()) == group;
    if mode & 0o002 != 0 || (mode & 0o020 != 0 && !group_ok) {
        return Err(SocketError::DirWritable {
            path: path.to_path_buf(),
            dir: dir.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

/// Creates `dir` for sockets if missing (`0700`, or `0750` and `perms.group` as its group;
/// missing parents `0755`), then checks it with [`check_dir`]. An existing directory is not
/// modified.
pub fn ensure_dir(path: &Path, dir: &Path, perms: &SocketPerms) -> Result<(), SocketError> {
    match std::fs::symlink_metadata(dir) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o755)
                    .create(parent)
                    .map_err(|e| SocketError::io(parent, "mkdir", e))?;
            }
            let mode = if perms.group.is_some() { 0o750 } else { 0o700 };
            match std::fs::DirBuilder::new().mode(mode).create(dir) {
                Ok(()) => {
                    if let Some(g) = perms.group {
                        chown_group(dir, g)?;
                    }
                    // Explicit: the umask may have taken bits away from `mode`.
                    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
                        .map_err(|e| SocketError::io(dir, "chmod", e))?;
                }
                // Created concurrently: checked below like any existing directory.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(SocketError::io(dir, "mkdir", e)),
            }
        }
        Err(e) => return Err(SocketError::io(dir, "stat", e)),
    }
    check_dir(path, dir, perms.group)
}

/// Serialises the process-wide umask change around `bind`.
static UMASK: Mutex<()> = Mutex::new(());

/// Runs `bind` (any socket type's `bind(2)`) under a `0177` umask, so the socket file is
/// created owner-only until [`set_perms`] gives it its mode.
pub fn with_private_umask<T>(bind: impl FnOnce() -> T) -> T {
    let _g = UMASK.lock().unwrap_or_else(|p| p.into_inner());
    // SAFETY: umask only swaps the process's file creation mask.
    let old = unsafe { libc::umask(0o177) };
    let r = bind();
    // SAFETY: as above, restoring the previous mask.
    unsafe { libc::umask(old) };
    r
}

/// The first half of binding a socket of a type [`OwnedListener`] does not create (e.g.
/// memif's `SOCK_SEQPACKET`): the directory is created or checked ([`ensure_dir`]) and a
/// stale socket at `path` removed, never anything else. Then bind inside
/// [`with_private_umask`] and call [`set_perms`].
pub fn prepare(path: &Path, perms: &SocketPerms) -> Result<(), SocketError> {
    ensure_dir(path, &socket_dir(path), perms)?;
    clear_stale(path)
}

/// The second half: gives the bound socket file `perms`; returns its (device, inode) for
/// [`remove_if_same`].
pub fn set_perms(path: &Path, perms: &SocketPerms) -> Result<(u64, u64), SocketError> {
    let m = std::fs::symlink_metadata(path).map_err(|e| SocketError::io(path, "stat", e))?;
    if let Some(g) = perms.group {
        chown_group(path, g)?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(perms.mode & 0o777))
        .map_err(|e| SocketError::io(path, "chmod", e))?;
    Ok((m.dev(), m.ino()))
}

/// Unlinks `path` only if it is still the socket identified by `id` (from [`set_perms`]).
pub fn remove_if_same(path: &Path, id: (u64, u64)) {
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if (m.dev(), m.ino()) == id {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Unlinks `path` only if it is a socket (never a file or symlink put there since).
pub fn remove_socket(path: &Path) {
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()) {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn bind_private(path: &Path) -> io::Result<UnixListener> {
    with_private_umask(|| UnixListener::bind(path))
}

/// Removes a stale socket at `path`: nothing there is fine; a socket that refuses connections
/// is unlinked; a live one is [`SocketError::InUse`]; anything else is
/// [`SocketError::NotASocket`].
fn clear_stale(path: &Path) -> Result<(), SocketError> {
    let m = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(SocketError::io(path, "stat", e)),
    };
    if !std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()) {
        return Err(SocketError::NotASocket {
            path: path.to_path_buf(),
        });
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(SocketError::InUse {
            path: path.to_path_buf(),
        }),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            std::fs::remove_file(path).map_err(|e| SocketError::io(path, "unlink stale socket", e))
        }
        // A listener of another socket type (e.g. SOCK_SEQPACKET) is alive.
        Err(e) if e.raw_os_error() == Some(libc::EPROTOTYPE) => Err(SocketError::InUse {
            path: path.to_path_buf(),
        }),
        Err(e) => Err(SocketError::io(path, "connect to existing socket", e)),
    }
}

/// A listening Unix socket bound by [`OwnedListener::bind`]; unlinks its path on drop if the
/// path is still this socket. Derefs to the [`UnixListener`].
#[derive(Debug)]
pub struct OwnedListener {
    listener: UnixListener,
    path: PathBuf,
    id: (u64, u64),
}

impl OwnedListener {
    /// Binds `path` under the module's rules (directory created or checked, stale socket
    /// replaced, never a non-socket), then sets `perms`. The listener is blocking, as
    /// [`UnixListener::bind`] returns it.
    pub fn bind(path: &Path, perms: &SocketPerms) -> Result<OwnedListener, SocketError> {
        let dir = socket_dir(path);
        ensure_dir(path, &dir, perms)?;
        clear_stale(path)?;
        let listener = bind_private(path).map_err(|e| SocketError::io(path, "bind", e))?;
        let id = set_perms(path, perms).inspect_err(|_| {
            let _ = std::fs::remove_file(path);
        })?;
        Ok(OwnedListener {
            listener,
            path: path.to_path_buf(),
            id,
        })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The listener.
    pub fn listener(&self) -> &UnixListener {
        &self.listener
    }
}

impl std::ops::Deref for OwnedListener {
    type Target = UnixListener;
    fn deref(&self) -> &UnixListener {
        &self.listener
    }
}

impl Drop for OwnedListener {
    fn drop(&mut self) {
        remove_if_same(&self.path, self.id);
    }
}

/// The client's check before connecting to `path`: it must be a socket (symlinks not
/// followed) owned by the caller or root, in a directory owned by the caller or root and not
/// world-writable. A missing path is `Io` with kind `NotFound`.
pub fn check_before_connect(path: &Path) -> Result<(), SocketError> {
    let m = std::fs::symlink_metadata(path).map_err(|e| SocketError::io(path, "stat", e))?;
    if !std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()) {
        return Err(SocketError::NotASocket {
            path: path.to_path_buf(),
        });
    }
    let me = euid();
    if m.uid() != me && m.uid() != 0 {
        return Err(SocketError::SocketOwner {
            path: path.to_path_buf(),
            owner: m.uid(),
            me,
        });
    }
    // A group-writable directory is the daemon's deliberate choice (`gid`); world-writable
    // never is.
    let dir = socket_dir(path);
    let d = std::fs::metadata(&dir).map_err(|e| SocketError::io(&dir, "stat", e))?;
    check_dir(path, &dir, Some(d.gid()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sluice-sock-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn group_gives_0750_directory_and_group_on_both() {
        let d = tmp("group");
        // SAFETY: getegid has no preconditions.
        let g = unsafe { libc::getegid() };
        let p = d.join("s").join("api.sock");
        let perms = SocketPerms {
            mode: 0o660,
            group: Some(g),
        };
        let _l = OwnedListener::bind(&p, &perms).unwrap();
        assert_eq!(mode(&d.join("s")), 0o750);
        assert_eq!(std::fs::metadata(d.join("s")).unwrap().gid(), g);
        assert_eq!(std::fs::symlink_metadata(&p).unwrap().gid(), g);
        drop(_l);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn refuses_world_writable_directory() {
        let d = tmp("ww");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let p = d.join("cli.sock");
        let e = OwnedListener::bind(&p, &SocketPerms::default()).unwrap_err();
        assert!(
            matches!(e, SocketError::DirWritable { mode: 0o1777, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("is writable by others (mode 1777)"));
        assert!(!p.exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn refuses_group_writable_directory_of_another_group() {
        let d = tmp("gw");
        std::fs::create_dir_all(&d).unwrap();
        // A group that is not root's and not ours: only root can chown to it.
        if euid() != 0 {
            std::fs::remove_dir_all(&d).unwrap();
            return;
        }
        chown_group(&d, 4242).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o770)).unwrap();
        let p = d.join("cli.sock");
        let e = OwnedListener::bind(&p, &SocketPerms::default()).unwrap_err();
        assert!(matches!(e, SocketError::DirWritable { .. }), "{e}");
        // The same directory with that group configured is the operator's choice.
        let perms = SocketPerms {
            mode: 0o660,
            group: Some(4242),
        };
        drop(OwnedListener::bind(&p, &perms).unwrap());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn never_unlinks_a_regular_file_or_symlink() {
        let d = tmp("nonsock");
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("cli.sock");
        std::fs::write(&p, b"precious").unwrap();
        let e = OwnedListener::bind(&p, &SocketPerms::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "refusing {}: it exists and is not a socket (not removing it)",
                p.display()
            )
        );
        assert_eq!(std::fs::read(&p).unwrap(), b"precious");
        std::fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", &p).unwrap();
        assert!(matches!(
            OwnedListener::bind(&p, &SocketPerms::default()),
            Err(SocketError::NotASocket { .. })
        ));
        assert!(std::fs::symlink_metadata(&p).is_ok());
        assert!(matches!(
            check_before_connect(&p),
            Err(SocketError::NotASocket { .. })
        ));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn replaces_a_stale_socket_but_not_a_live_one() {
        let d = tmp("stale");
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("cli.sock");
        let live = OwnedListener::bind(&p, &SocketPerms::default()).unwrap();
        let e = OwnedListener::bind(&p, &SocketPerms::default()).unwrap_err();
        assert!(matches!(e, SocketError::InUse { .. }), "{e}");
        drop(live);
        // A crash leaves the file behind: a plain listener closed without unlinking.
        drop(UnixListener::bind(&p).unwrap());
        assert!(p.exists());
        let again = OwnedListener::bind(&p, &SocketPerms::default()).unwrap();
        drop(again);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn drop_leaves_a_successors_socket_alone() {
        let d = tmp("succ");
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("cli.sock");
        let first = OwnedListener::bind(&p, &SocketPerms::default()).unwrap();
        std::fs::remove_file(&p).unwrap();
        let second = OwnedListener::bind(&p, &SocketPerms::default()).unwrap();
        drop(first);
        assert!(p.exists(), "the successor's socket survives");
        drop(second);
        assert!(!p.exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn refuses_directory_owned_by_another_user() {
        if euid() != 0 {
            return; // only root can make a directory owned by someone else
        }
        let d = tmp("owner");
        std::fs::create_dir_all(&d).unwrap();
        let c = cpath(&d, "chown").unwrap();
        // SAFETY: valid path; hands the directory to an unused uid.
        assert_eq!(unsafe { libc::chown(c.as_ptr(), 4243, 4243) }, 0);
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        let p = d.join("cli.sock");
        let e = OwnedListener::bind(&p, &SocketPerms::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "refusing {}: directory {} is owned by uid 4243, not by uid 0 or root",
                p.display(),
                d.display()
            )
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn missing_socket_is_not_found_for_clients() {
        let e = check_before_connect(Path::new("/nonexistent-sluice/cli.sock")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }
}
