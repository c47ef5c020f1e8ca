//! Letting long-running commands stop when the daemon is asked to.
//!
//! A handler that loops for a long time (`ping ... repeat`, `ip route add count N`) checks
//! [`Interrupt::requested`] between steps and returns early, so SIGTERM stops the daemon
//! promptly. The daemon installs the flag its signal handler sets as a context extension
//! (`vm.ext_mut::<Interrupt>()`); without one nothing is ever interrupted.

use std::sync::atomic::{AtomicBool, Ordering};

/// A stop request visible to CLI handlers.
#[derive(Clone, Copy, Debug, Default)]
pub struct Interrupt(Option<&'static AtomicBool>);

impl Interrupt {
    /// Watches `flag` (set from a signal handler: it must be a `static`).
    pub fn new(flag: &'static AtomicBool) -> Self {
        Interrupt(Some(flag))
    }

    /// True once a stop was requested.
    pub fn requested(&self) -> bool {
        self.0.is_some_and(|f| f.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_its_flag_and_defaults_to_never() {
        static FLAG: AtomicBool = AtomicBool::new(false);
        let i = Interrupt::new(&FLAG);
        assert!(!i.requested());
        FLAG.store(true, Ordering::Relaxed);
        assert!(i.requested());
        assert!(!Interrupt::default().requested());
    }
}
