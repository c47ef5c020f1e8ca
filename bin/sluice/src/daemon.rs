//! Process life as VPP's `unix` section describes it: daemonising (unless `nodaemon`), the
//! pidfile, the log file and syslog, the effective group, core size.
//!
//! - **Daemonising** forks twice (the daemon is not a session leader and never gets a
//!   controlling terminal), changes to `/` and points stdin/stdout/stderr at `/dev/null`. The
//!   command that started it waits on a pipe until the daemon is ready (CLI socket bound,
//!   `exec` script run) and exits 0, or prints the daemon's one-line start-up error and exits
//!   1, so `sluice -c startup.conf && sluicectl show int` works.
//! - **Log**: `unix { log <file> }` is appended to (created `0640`, a symlink refused) with a
//!   UTC timestamp per line; a foreground daemon also writes to stderr; a daemonised one also
//!   to syslog (facility daemon) unless `nosyslog`. SIGHUP reopens the log file (for
//!   logrotate).
//! - **Pidfile**: written once the daemon runs (created under a fresh name and renamed into
//!   place), removed at a clean exit if it still holds this pid.

use sluice_infra::files::OutputDir;
use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Opens the log file for appending: created `0640`, never through a symlink, regular files
/// only.
pub fn open_log(path: &Path) -> Result<File, String> {
    let f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o640)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("log {}: {e}", path.display()))?;
    let m = f
        .metadata()
        .map_err(|e| format!("log {}: {e}", path.display()))?;
    if !m.is_file() {
        return Err(format!("log {}: not a regular file", path.display()));
    }
    Ok(f)
}

/// The daemon's logger: stderr (foreground), the log file, syslog (daemonised).
pub struct Logger {
    stderr: bool,
    syslog: bool,
    path: Option<PathBuf>,
    file: Mutex<Option<File>>,
    ring: std::sync::Arc<crate::logging::LogRing>,
}

impl Logger {
    /// A logger with the given sinks; `file` is the opened `log` file and its path.
    pub fn new(stderr: bool, syslog: bool, file: Option<(PathBuf, File)>) -> Logger {
        if syslog {
            // SAFETY: the ident is a static C string that outlives every syslog call.
            unsafe { libc::openlog(c"sluice".as_ptr(), libc::LOG_PID, libc::LOG_DAEMON) };
        }
        let (path, file) = match file {
            Some((p, f)) => (Some(p), Some(f)),
            None => (None, None),
        };
        Logger {
            stderr,
            syslog,
            path,
            file: Mutex::new(file),
            ring: Default::default(),
        }
    }

    /// Reopens the log file (SIGHUP). Returns a line for the log.
    pub fn reopen(&self) -> Option<String> {
        let path = self.path.as_ref()?;
        let mut g = self.file.lock().unwrap_or_else(|p| p.into_inner());
        match open_log(path) {
            Ok(f) => {
                *g = Some(f);
                Some(format!("SIGHUP: reopened log file {}", path.display()))
            }
            Err(e) => Some(format!(
                "SIGHUP: cannot reopen the log file, keeping the old one: {e}"
            )),
        }
    }
}

/// `YYYY/MM/DD HH:MM:SS` (UTC) for `secs` since the epoch.
pub fn utc_stamp(secs: u64) -> String {
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    // Civil-from-days (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}/{m:02}/{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

impl Logger {
    /// The ring of recent entries and class levels (`show log`, `set logging class`).
    pub fn ring(&self) -> std::sync::Arc<crate::logging::LogRing> {
        self.ring.clone()
    }
}

impl log::Log for Logger {
    fn enabled(&self, m: &log::Metadata) -> bool {
        self.ring.enabled(m.target(), m.level())
    }

    fn log(&self, r: &log::Record) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let level = r.level().as_str().to_lowercase();
        let mut msg = r.args().to_string();
        let sinks = self.ring.admit(r.target(), r.level(), &msg);
        if sinks.throttled {
            msg = "--- message(s) throttled ---".to_string();
        }
        if sinks.log {
            self.write_log(&level, &msg);
        }
        if self.syslog && sinks.syslog {
            let prio = match r.level() {
                log::Level::Error => libc::LOG_ERR,
                log::Level::Warn => libc::LOG_WARNING,
                _ => libc::LOG_INFO,
            };
            if let Ok(c) = CString::new(msg.replace('\0', " ")) {
                // SAFETY: a constant "%s" format with one NUL-terminated string argument.
                unsafe { libc::syslog(prio, c"%s".as_ptr(), c.as_ptr()) };
            }
        }
    }

    fn flush(&self) {}
}

impl Logger {
    /// Writes a record to stderr and the log file (the sinks `level` covers).
    fn write_log(&self, level: &str, msg: &str) {
        if self.stderr {
            eprintln!("sluice: {level}: {msg}");
        }
        {
            let mut g = self.file.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(f) = g.as_mut() {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                let _ = writeln!(f, "{} sluice: {level}: {msg}", utc_stamp(now));
            }
        }
    }
}

/// The pipe to the process that started a daemonised sluice.
pub struct Readiness(Option<OwnedFd>);

impl Readiness {
    /// Nothing to tell (foreground).
    pub fn foreground() -> Readiness {
        Readiness(None)
    }

    /// Start-up finished: the starting process exits 0.
    pub fn ok(&mut self) {
        if let Some(fd) = self.0.take() {
            let mut f = File::from(fd);
            let _ = f.write_all(b"ok\n");
        }
    }

    /// Start-up failed with `msg`: the starting process prints it and exits 1.
    pub fn fail(&mut self, msg: &str) {
        if let Some(fd) = self.0.take() {
            let mut f = File::from(fd);
            let _ = f.write_all(format!("{msg}\n").as_bytes());
        }
    }

    /// Whether a starting process waits (the daemon was forked).
    pub fn daemonised(&self) -> bool {
        self.0.is_some()
    }
}

fn fork() -> Result<libc::pid_t, String> {
    // SAFETY: called before any thread is started (the graph's threads come later), so the
    // child is a full copy with no lock held by a vanished thread.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    Ok(pid)
}

/// Forks into the background. Only the daemon returns; the starting process waits for
/// [`Readiness`] and exits. Must be called before any thread is started.
pub fn daemonize() -> Result<Readiness, String> {
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: both descriptors are fresh and owned here.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    if fork()? > 0 {
        drop(w);
        let mut msg = String::new();
        let _ = File::from(r).read_to_string(&mut msg);
        if msg == "ok\n" {
            std::process::exit(0);
        }
        let msg = msg.trim();
        if msg.is_empty() {
            eprintln!("sluice: the daemon exited during start-up (see its log)");
        } else {
            eprintln!("sluice: {msg}");
        }
        std::process::exit(1);
    }
    drop(r);
    // SAFETY: setsid has no memory preconditions.
    unsafe { libc::setsid() };
    if fork()? > 0 {
        // The intermediate process: the daemon continues in its child.
        // SAFETY: _exit skips atexit handlers and buffers the parent owns copies of.
        unsafe { libc::_exit(0) };
    }
    let _ = std::env::set_current_dir("/");
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(|e| format!("/dev/null: {e}"))?;
    for fd in 0..3 {
        // SAFETY: dup2 onto the standard descriptors from an open descriptor.
        unsafe { libc::dup2(null.as_raw_fd(), fd) };
    }
    Ok(Readiness(Some(w)))
}

/// The pidfile: written at start, removed at a clean exit if it still names this process.
pub struct Pidfile(PathBuf);

impl Pidfile {
    /// Writes `path` with this process's id (`0644`, created under a fresh name and renamed
    /// into place so a symlink at `path` is replaced, not followed).
    pub fn write(path: &Path) -> Result<Pidfile, String> {
        let dir = path.parent().unwrap_or(Path::new("/"));
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| format!("pidfile {}: bad file name", path.display()))?;
        let od = OutputDir::new(dir)
            .ok_or_else(|| format!("pidfile {}: not an absolute path", path.display()))?;
        let (mut f, p) = od.create(name).map_err(|e| format!("pidfile: {e}"))?;
        use std::os::unix::fs::PermissionsExt;
        let _ = f.set_permissions(std::fs::Permissions::from_mode(0o644));
        f.write_all(format!("{}\n", std::process::id()).as_bytes())
            .map_err(|e| format!("pidfile {}: {e}", p.display()))?;
        Ok(Pidfile(p))
    }
}

impl Drop for Pidfile {
    fn drop(&mut self) {
        if let Ok(s) = std::fs::read_to_string(&self.0) {
            if s.trim() == std::process::id().to_string() {
                let _ = std::fs::remove_file(&self.0);
            }
        }
    }
}

/// Sets the effective group (`unix { gid }`), as VPP does: files and sockets the daemon
/// creates belong to it.
pub fn set_group(gid: u32, name: &str) -> Result<(), String> {
    // SAFETY: setegid has no memory preconditions.
    if unsafe { libc::setegid(gid) } != 0 {
        return Err(format!(
            "gid {name}: cannot set the effective group: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Sets the core file size limit (`unix { coredump-size }`); `None` is unlimited.
pub fn set_core_limit(bytes: Option<u64>) -> Result<(), String> {
    let v = bytes.unwrap_or(libc::RLIM_INFINITY);
    let lim = libc::rlimit {
        rlim_cur: v,
        rlim_max: v,
    };
    // SAFETY: lim is a valid rlimit for the call.
    if unsafe { libc::setrlimit(libc::RLIMIT_CORE, &lim) } != 0 {
        // Raising the hard limit needs privilege; try the soft limit alone.
        let mut cur = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: cur is a valid out-parameter.
        unsafe { libc::getrlimit(libc::RLIMIT_CORE, &mut cur) };
        let soft = libc::rlimit {
            rlim_cur: v.min(cur.rlim_max),
            rlim_max: cur.rlim_max,
        };
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_CORE, &soft) } != 0 {
            return Err(format!(
                "coredump-size: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_stamps() {
        assert_eq!(utc_stamp(0), "1970/01/01 00:00:00");
        assert_eq!(utc_stamp(951_782_400), "2000/02/29 00:00:00");
        assert_eq!(utc_stamp(1_700_000_000), "2023/11/14 22:13:20");
    }

    #[test]
    fn log_file_refuses_symlinks_and_non_files() {
        let d = std::env::temp_dir().join(format!("sluice-log-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let l = d.join("link.log");
        std::os::unix::fs::symlink(d.join("target"), &l).unwrap();
        assert!(open_log(&l).is_err());
        assert!(!d.join("target").exists());
        assert!(open_log(&d).is_err(), "a directory is no log file");
        let f = d.join("ok.log");
        open_log(&f).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            std::fs::metadata(&f).unwrap().mode() & 0o137,
            0,
            "at most 0640"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn pidfile_replaces_a_symlink_and_is_removed_on_drop() {
        let d = std::env::temp_dir().join(format!("sluice-pid-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let victim = d.join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let p = d.join("sluice.pid");
        std::os::unix::fs::symlink(&victim, &p).unwrap();
        let pf = Pidfile::write(&p).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            format!("{}\n", std::process::id())
        );
        drop(pf);
        assert!(!p.exists());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
