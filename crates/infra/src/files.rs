//! Files the control plane reads and writes on an operator's behalf, opened so that a path
//! cannot be turned against the host:
//!
//! - [`read_regular`]: regular files only (a FIFO, device or directory is refused without
//!   blocking: the open is non-blocking), at most a stated number of bytes (`/dev/zero` or a
//!   huge file cannot exhaust memory);
//! - [`OutputDir`]: output files (pcap captures) confined to one directory: a bare file name
//!   or an absolute path directly inside the directory; `..`, other directories and relative
//!   paths with a `/` are refused with an error that says where files may go. A file is
//!   created under a fresh name with `O_CREAT|O_EXCL|O_NOFOLLOW`, owner-only mode, then
//!   renamed over the target, so an existing file or a symlink planted at the name is
//!   replaced, never written through or truncated.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

/// Why a file could not be read or created. Messages are one line naming the path and never
/// quote the file's content.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// Not a regular file (FIFO, device, directory, socket).
    #[error("cannot read `{path}': not a regular file ({kind})")]
    NotRegular {
        /// The path.
        path: PathBuf,
        /// What it is.
        kind: &'static str,
    },
    /// Larger than the cap.
    #[error("cannot read `{path}': larger than {max} bytes")]
    TooLarge {
        /// The path.
        path: PathBuf,
        /// The cap.
        max: u64,
    },
    /// An output name outside the output directory.
    #[error("`{name}': files may only be written to {dir} (give a file name, or {dir}/<name>)")]
    OutsideDir {
        /// The name as given.
        name: String,
        /// The output directory.
        dir: PathBuf,
    },
    /// A system call failed.
    #[error("cannot {op} `{path}': {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

impl FileError {
    fn io(op: &'static str, path: &Path, source: io::Error) -> Self {
        FileError::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }
}

fn kind_of(ft: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "not a plain file"
    }
}

/// Reads a regular file of at most `max` bytes. The open is non-blocking (a FIFO never
/// blocks the caller) and the type is checked on the opened descriptor (no race with a
/// rename); the read stops at `max + 1` bytes whatever the file claims.
pub fn read_regular(path: &Path, max: u64) -> Result<Vec<u8>, FileError> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| FileError::io("read", path, e))?;
    let m = f.metadata().map_err(|e| FileError::io("read", path, e))?;
    if !m.is_file() {
        return Err(FileError::NotRegular {
            path: path.to_path_buf(),
            kind: kind_of(m.file_type()),
        });
    }
    if m.len() > max {
        return Err(FileError::TooLarge {
            path: path.to_path_buf(),
            max,
        });
    }
    let mut buf = Vec::with_capacity(m.len() as usize);
    f.take(max + 1)
        .read_to_end(&mut buf)
        .map_err(|e| FileError::io("read", path, e))?;
    if buf.len() as u64 > max {
        return Err(FileError::TooLarge {
            path: path.to_path_buf(),
            max,
        });
    }
    Ok(buf)
}

/// The directory output files are confined to (VPP writes its captures to `/tmp`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputDir {
    dir: PathBuf,
}

impl Default for OutputDir {
    fn default() -> Self {
        OutputDir {
            dir: PathBuf::from("/tmp"),
        }
    }
}

/// Lexically normalised absolute path, or `None` if it has `..` or is relative.
fn normal_abs(p: &Path) -> Option<PathBuf> {
    if !p.is_absolute() {
        return None;
    }
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::RootDir => out.push("/"),
            Component::Normal(s) => out.push(s),
            Component::CurDir => {}
            Component::ParentDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

impl OutputDir {
    /// Output files go to `dir`, which must be absolute without `..`.
    pub fn new(dir: &Path) -> Option<OutputDir> {
        normal_abs(dir).map(|dir| OutputDir { dir })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file name an output `name` stands for: a bare name (no `/`, not `.` or `..`), or
    /// an absolute path whose directory is this one.
    pub fn file_name(&self, name: &str) -> Result<String, FileError> {
        let refuse = || FileError::OutsideDir {
            name: name.to_string(),
            dir: self.dir.clone(),
        };
        if name.is_empty() || name.contains('\0') {
            return Err(refuse());
        }
        let file = if name.contains('/') {
            let p = normal_abs(Path::new(name)).ok_or_else(refuse)?;
            if p.parent() != Some(self.dir.as_path()) {
                return Err(refuse());
            }
            p.file_name()
                .and_then(|f| f.to_str())
                .ok_or_else(refuse)?
                .to_string()
        } else {
            name.to_string()
        };
        if file == "." || file == ".." {
            return Err(refuse());
        }
        Ok(file)
    }

    /// The full path `name` would be written to (checked as [`OutputDir::file_name`]).
    pub fn path_of(&self, name: &str) -> Result<PathBuf, FileError> {
        Ok(self.dir.join(self.file_name(name)?))
    }

    /// Creates `name` in the directory, owner-only (`0600`): written under a fresh temporary
    /// name (`O_CREAT|O_EXCL|O_NOFOLLOW`) then renamed over `name`, so whatever was there (a
    /// file, a symlink) is replaced and never written through. Returns the file and its path.
    pub fn create(&self, name: &str) -> Result<(File, PathBuf), FileError> {
        let file = self.file_name(name)?;
        let target = self.dir.join(&file);
        let dir_c =
            CString::new(self.dir.as_os_str().as_bytes()).map_err(|_| self.outside(name))?;
        // SAFETY: dir_c is NUL-terminated; the fd returned is owned below.
        let dfd = unsafe {
            libc::open(
                dir_c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if dfd < 0 {
            return Err(FileError::io("open", &self.dir, io::Error::last_os_error()));
        }
        // SAFETY: dfd is a fresh descriptor nobody else owns.
        let dfd = unsafe { OwnedFd::from_raw_fd(dfd) };
        let file_c = CString::new(file.as_bytes()).map_err(|_| self.outside(name))?;
        let mut fd = -1;
        let mut tmp_c = CString::default();
        for attempt in 0..16u32 {
            let tmp = format!(".{file}.{}.{attempt}.tmp", std::process::id());
            tmp_c = CString::new(tmp).map_err(|_| self.outside(name))?;
            // SAFETY: dfd is open; tmp_c is NUL-terminated; mode is a plain integer.
            fd = unsafe {
                libc::openat(
                    dfd.as_raw_fd(),
                    tmp_c.as_ptr(),
                    libc::O_WRONLY
                        | libc::O_CREAT
                        | libc::O_EXCL
                        | libc::O_NOFOLLOW
                        | libc::O_CLOEXEC,
                    0o600 as libc::c_uint,
                )
            };
            if fd >= 0 {
                break;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::AlreadyExists {
                return Err(FileError::io("create", &target, e));
            }
        }
        if fd < 0 {
            return Err(FileError::io(
                "create",
                &target,
                io::Error::from(io::ErrorKind::AlreadyExists),
            ));
        }
        // SAFETY: fd is a fresh descriptor owned by the File from here on.
        let f = unsafe { File::from_raw_fd(fd) };
        // SAFETY: both names are relative to dfd, NUL-terminated.
        let r = unsafe {
            libc::renameat(
                dfd.as_raw_fd(),
                tmp_c.as_ptr(),
                dfd.as_raw_fd(),
                file_c.as_ptr(),
            )
        };
        if r != 0 {
            let e = io::Error::last_os_error();
            // SAFETY: removes the temporary we created.
            unsafe { libc::unlinkat(dfd.as_raw_fd(), tmp_c.as_ptr(), 0) };
            return Err(FileError::io("create", &target, e));
        }
        Ok((f, target))
    }

    fn outside(&self, name: &str) -> FileError {
        FileError::OutsideDir {
            name: name.to_string(),
            dir: self.dir.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sluice-files-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn reads_regular_files_up_to_the_cap() {
        let d = tmp("read");
        let p = d.join("s.cli");
        std::fs::write(&p, b"show int\n").unwrap();
        assert_eq!(read_regular(&p, 9).unwrap(), b"show int\n");
        let e = read_regular(&p, 8).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("cannot read `{}': larger than 8 bytes", p.display())
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn refuses_devices_directories_and_fifos_without_blocking() {
        let e = read_regular(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot read `/dev/zero': not a regular file (a character device)"
        );
        let e = read_regular(Path::new("/"), 1 << 20).unwrap_err();
        assert!(e.to_string().ends_with("not a regular file (a directory)"));
        let d = tmp("fifo");
        let f = d.join("fifo");
        let c = CString::new(f.as_os_str().as_bytes()).unwrap();
        // SAFETY: valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // Nobody writes to it: a blocking open would hang this test forever.
        let e = read_regular(&f, 1 << 20).unwrap_err();
        assert!(
            e.to_string().ends_with("not a regular file (a FIFO)"),
            "{e}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn output_names_are_confined_to_the_directory() {
        let o = OutputDir::new(Path::new("/tmp")).unwrap();
        assert_eq!(o.path_of("rx.pcap").unwrap(), PathBuf::from("/tmp/rx.pcap"));
        assert_eq!(
            o.path_of("/tmp/rx.pcap").unwrap(),
            PathBuf::from("/tmp/rx.pcap")
        );
        assert_eq!(
            o.path_of("/tmp/./x.pcap").unwrap(),
            PathBuf::from("/tmp/x.pcap")
        );
        for bad in [
            "/etc/shadow",
            "../etc/passwd",
            "/tmp/../etc/passwd",
            "sub/x.pcap",
            "./x.pcap",
            "/tmp/sub/x.pcap",
            "..",
            ".",
            "/tmp",
            "",
        ] {
            let e = o.path_of(bad).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "`{bad}': files may only be written to /tmp (give a file name, or /tmp/<name>)"
                ),
            );
        }
        assert!(OutputDir::new(Path::new("relative")).is_none());
        assert!(OutputDir::new(Path::new("/a/../b")).is_none());
    }

    #[test]
    fn create_replaces_symlinks_and_files_instead_of_writing_through() {
        let d = tmp("create");
        let o = OutputDir::new(&d).unwrap();
        let victim = d.join("victim");
        std::fs::write(&victim, b"keep me").unwrap();
        std::os::unix::fs::symlink(&victim, d.join("out.pcap")).unwrap();
        let (mut f, p) = o.create("out.pcap").unwrap();
        f.write_all(b"pcap").unwrap();
        assert_eq!(p, d.join("out.pcap"));
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
        let m = std::fs::symlink_metadata(&p).unwrap();
        assert!(m.is_file(), "the symlink was replaced by a file");
        assert_eq!(m.mode() & 0o777, 0o600);
        assert_eq!(std::fs::read(&p).unwrap(), b"pcap");
        // An existing file is replaced (a new inode), not truncated in place.
        let ino = m.ino();
        let mut keep = File::open(&p).unwrap();
        let (_f2, _) = o.create("out.pcap").unwrap();
        assert_ne!(std::fs::metadata(&p).unwrap().ino(), ino);
        let mut old = String::new();
        keep.read_to_string(&mut old).unwrap();
        assert_eq!(old, "pcap", "the old file's content is untouched");
        // No temporaries left behind.
        let names: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn create_into_a_directory_name_fails_cleanly() {
        let d = tmp("dirname");
        std::fs::create_dir(d.join("sub")).unwrap();
        let o = OutputDir::new(&d).unwrap();
        let e = o.create("sub").unwrap_err();
        assert!(e.to_string().starts_with("cannot create"), "{e}");
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1, "temp removed");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
