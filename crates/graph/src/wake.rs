//! Thread sleep and wake-up: one `epoll` instance per graph thread and one `eventfd` per
//! thread that other threads (control plane, handoff producers) write to wake it.
//!
//! A thread with nothing to poll sleeps in `epoll_wait` on its epoll fd, which holds its own
//! wake-up eventfd and the file descriptors input nodes in interrupt or adaptive rx mode
//! registered (an af_packet socket, a memif ring's interrupt eventfd, a tap fd). The main
//! thread adds its epoll fd to the `poll(2)` set of its CLI sockets, so it wakes for both.
//!
//! Lost wake-ups are prevented by a `sleeping` flag and two sequentially consistent fences
//! (Dekker): the sleeper sets the flag, fences, re-checks for work and only then waits; a
//! producer publishes its work, fences, and writes the eventfd if the flag is set.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{fence, AtomicBool, Ordering};

/// epoll user data of a thread's own wake-up eventfd.
pub(crate) const WAKE_TOKEN: u64 = u64::MAX;

/// An epoll instance (level-triggered `EPOLLIN` registrations).
pub struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    /// A new epoll instance.
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: plain syscall; the result is checked and then owned.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Epoll {
            // SAFETY: fd was just created and is owned by nobody else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// The epoll fd (readable when a registered fd is).
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Watches `fd` for input, reporting `data`; replaces an earlier registration of `fd`.
    pub fn add(&self, fd: RawFd, data: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: data,
        };
        // SAFETY: `ev` is a valid epoll_event; the kernel only reads it.
        let r = unsafe { libc::epoll_ctl(self.raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EEXIST) {
            return Err(e);
        }
        // SAFETY: as above.
        let r = unsafe { libc::epoll_ctl(self.raw_fd(), libc::EPOLL_CTL_MOD, fd, &mut ev) };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Stops watching `fd` (no error if it was not watched or is closed).
    pub fn del(&self, fd: RawFd) {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: as in `add` (a non-null event pointer for pre-2.6.9 compatibility).
        unsafe { libc::epoll_ctl(self.raw_fd(), libc::EPOLL_CTL_DEL, fd, &mut ev) };
    }

    /// Waits up to `timeout_ms` (-1: forever, 0: just check) and fills `events`; returns how
    /// many are ready (0 on timeout or signal).
    pub fn wait(&self, events: &mut [libc::epoll_event], timeout_ms: i32) -> usize {
        // SAFETY: `events` is a valid writable array of its length.
        let n = unsafe {
            libc::epoll_wait(
                self.raw_fd(),
                events.as_mut_ptr(),
                events.len().min(i32::MAX as usize) as i32,
                timeout_ms,
            )
        };
        n.max(0) as usize
    }
}

/// A thread's wake-up eventfd and its `sleeping` flag.
pub struct Waker {
    fd: OwnedFd,
    sleeping: AtomicBool,
}

impl Waker {
    /// A new non-blocking eventfd.
    pub fn new() -> io::Result<Waker> {
        // SAFETY: plain syscall; the result is checked and then owned.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Waker {
            // SAFETY: fd was just created and is owned by nobody else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            sleeping: AtomicBool::new(false),
        })
    }

    /// The eventfd.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Wakes the thread (or makes its next sleep return at once). Call after publishing the
    /// work it should see.
    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a local to an eventfd we own. EAGAIN (counter
        // saturated) means a wake-up is pending anyway.
        unsafe { libc::write(self.raw_fd(), &one as *const u64 as *const libc::c_void, 8) };
    }

    /// Wakes the thread only if it is asleep or about to sleep: cheap enough to call after
    /// every handed-off frame.
    #[inline]
    pub fn wake_if_sleeping(&self) {
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) {
            self.wake();
        }
    }

    /// Whether the thread announced it is going to sleep.
    pub fn is_sleeping(&self) -> bool {
        self.sleeping.load(Ordering::Relaxed)
    }

    /// The sleeper's side: announce (then re-check for work) or withdraw.
    pub(crate) fn set_sleeping(&self, on: bool) {
        self.sleeping.store(on, Ordering::Relaxed);
        if on {
            fence(Ordering::SeqCst);
        }
    }

    /// Resets the eventfd counter.
    pub(crate) fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a local from an eventfd we own (non-blocking).
        unsafe { libc::read(self.raw_fd(), &mut v as *mut u64 as *mut libc::c_void, 8) };
    }
}

/// Converts a sleep in seconds (None: until woken) into an epoll timeout in milliseconds,
/// rounding up so a timer is never woken for early.
pub fn timeout_ms(secs: Option<f64>) -> i32 {
    match secs {
        None => -1,
        Some(s) if s <= 0.0 => 0,
        Some(s) => (s * 1000.0).ceil().min(i32::MAX as f64) as i32,
    }
}
