//! Rx modes of input queues (`set interface rx-mode <if> [queue <n>] polling|interrupt|adaptive`)
//! and the per-queue state machine every driver shares.
//!
//! - **polling** (default): the queue is polled on every dispatcher loop while it has packets
//!   and for [`BUSY_SECS`] after the last one; when idle, the thread naps and polls it again at
//!   least every [`POLL_TICK_SECS`] (its driver returns that from `NodeFn::poll_interval`).
//!   A driver whose peer can signal a file descriptor lets it wake the sleeping thread
//!   (memif unmasks its rings in `NodeFn::prepare_sleep` and masks them at the next poll);
//!   elsewhere the first packet after an idle period waits up to a tick.
//! - **interrupt**: the driver registers the queue's fd with the thread's epoll (and, for
//!   memif, unmasks the peer's interrupts); the queue is polled only when the fd fires and
//!   while it still holds packets. An idle thread sleeps in `epoll_wait` without ticks.
//! - **adaptive**: starts in interrupt mode; once a queue receives at least
//!   [`ADAPTIVE_PACKETS`] packets within one [`ADAPTIVE_WINDOW_SECS`] window it is polled on
//!   every loop (interrupts masked where the driver can), and it returns to interrupt mode
//!   after a window with fewer packets.

/// Rx mode of a queue.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum RxMode {
    /// Polled on every loop while busy, at ticks while idle.
    #[default]
    Polling,
    /// Woken by its file descriptor.
    Interrupt,
    /// Interrupt while idle, polling under load.
    Adaptive,
}

impl RxMode {
    /// VPP's name.
    pub fn as_str(self) -> &'static str {
        match self {
            RxMode::Polling => "polling",
            RxMode::Interrupt => "interrupt",
            RxMode::Adaptive => "adaptive",
        }
    }

    /// Parses VPP's name.
    pub fn parse(s: &str) -> Option<RxMode> {
        match s {
            "polling" => Some(RxMode::Polling),
            "interrupt" => Some(RxMode::Interrupt),
            "adaptive" => Some(RxMode::Adaptive),
            _ => None,
        }
    }

    /// Compact encoding (for atomics shared with the data path).
    pub fn code(self) -> u8 {
        match self {
            RxMode::Polling => 0,
            RxMode::Interrupt => 1,
            RxMode::Adaptive => 2,
        }
    }

    /// Inverse of [`RxMode::code`] (unknown codes: polling).
    pub fn from_code(c: u8) -> RxMode {
        match c {
            1 => RxMode::Interrupt,
            2 => RxMode::Adaptive,
            _ => RxMode::Polling,
        }
    }
}

/// Polling mode: how long a queue keeps its thread polling after its last packet.
pub const BUSY_SECS: f64 = 0.010;
/// Polling mode: how often an idle queue is still polled.
pub const POLL_TICK_SECS: f64 = 0.010;
/// Adaptive mode: the measurement window.
pub const ADAPTIVE_WINDOW_SECS: f64 = 0.010;
/// Adaptive mode: packets per window that switch a queue to polling (≈ 3,200 packets/s).
pub const ADAPTIVE_PACKETS: u64 = 32;

/// One queue's mode and, in adaptive mode, its current state.
#[derive(Clone, Debug)]
pub struct RxModeState {
    mode: RxMode,
    polling: bool,
    last_rx: u64,
    win_start: u64,
    win_pkts: u64,
    busy_tsc: u64,
    win_tsc: u64,
}

impl RxModeState {
    /// A queue in `mode` on a clock of `hz` TSC ticks per second.
    pub fn new(mode: RxMode, hz: f64) -> RxModeState {
        RxModeState {
            mode,
            polling: false,
            last_rx: 0,
            win_start: 0,
            win_pkts: 0,
            busy_tsc: (hz * BUSY_SECS) as u64,
            win_tsc: (hz * ADAPTIVE_WINDOW_SECS) as u64,
        }
    }

    /// The configured mode.
    pub fn mode(&self) -> RxMode {
        self.mode
    }

    /// Changes the mode (adaptive restarts in interrupt state).
    pub fn set_mode(&mut self, mode: RxMode) {
        self.mode = mode;
        self.polling = false;
        self.win_pkts = 0;
    }

    /// Whether the queue cannot receive without its fd registered (interrupt or adaptive
    /// mode). A driver may watch it in polling mode too (memif does, while the thread
    /// sleeps).
    pub fn wants_fd(&self) -> bool {
        self.mode != RxMode::Polling
    }

    /// Whether the peer/device should signal the fd now (interrupt, or adaptive while idle);
    /// false means interrupts may be masked.
    pub fn interrupts(&self) -> bool {
        match self.mode {
            RxMode::Polling => false,
            RxMode::Interrupt => true,
            RxMode::Adaptive => !self.polling,
        }
    }

    /// Whether the queue keeps its thread polling although nothing is ready now.
    #[inline]
    pub fn busy(&self, now_tsc: u64) -> bool {
        match self.mode {
            RxMode::Polling => now_tsc.wrapping_sub(self.last_rx) < self.busy_tsc,
            RxMode::Interrupt => false,
            RxMode::Adaptive => self.polling,
        }
    }

    /// Whether the queue is polled now (`show runtime` state): polling mode, or adaptive
    /// mode while it is in its polling state.
    pub fn is_polling(&self) -> bool {
        match self.mode {
            RxMode::Polling => true,
            RxMode::Interrupt => false,
            RxMode::Adaptive => self.polling,
        }
    }

    /// Whether the idle queue must be polled at ticks (polling mode).
    pub fn needs_tick(&self) -> bool {
        self.mode == RxMode::Polling
    }

    /// Accounts the packets one poll returned. Returns true when [`RxModeState::interrupts`]
    /// changed (the driver then masks or unmasks interrupts).
    #[inline]
    pub fn account(&mut self, n: usize, now_tsc: u64) -> bool {
        if n > 0 {
            self.last_rx = now_tsc;
        }
        if self.mode != RxMode::Adaptive {
            return false;
        }
        let before = self.polling;
        if now_tsc.wrapping_sub(self.win_start) >= self.win_tsc {
            if self.polling && self.win_pkts < ADAPTIVE_PACKETS {
                self.polling = false;
            }
            self.win_start = now_tsc;
            self.win_pkts = 0;
        }
        self.win_pkts += n as u64;
        if !self.polling && self.win_pkts >= ADAPTIVE_PACKETS {
            self.polling = true;
            self.win_start = now_tsc;
            self.win_pkts = 0;
        }
        before != self.polling
    }

    /// Adaptive mode: whether the queue is in its polling state.
    pub fn adaptive_polling(&self) -> bool {
        self.mode == RxMode::Adaptive && self.polling
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HZ: f64 = 1e9;
    const MS: u64 = 1_000_000;

    #[test]
    fn names_round_trip() {
        for m in [RxMode::Polling, RxMode::Interrupt, RxMode::Adaptive] {
            assert_eq!(RxMode::parse(m.as_str()), Some(m));
            assert_eq!(RxMode::from_code(m.code()), m);
        }
        assert_eq!(RxMode::parse("poll"), None);
    }

    #[test]
    fn polling_stays_busy_after_a_packet() {
        let mut s = RxModeState::new(RxMode::Polling, HZ);
        assert!(!s.wants_fd() && !s.interrupts() && s.needs_tick());
        assert!(!s.account(1, 100 * MS));
        assert!(s.busy(105 * MS));
        assert!(!s.busy(111 * MS));
    }

    #[test]
    fn interrupt_never_busy() {
        let mut s = RxModeState::new(RxMode::Interrupt, HZ);
        assert!(!s.account(256, 100 * MS));
        assert!(s.wants_fd() && s.interrupts() && !s.busy(100 * MS) && !s.needs_tick());
    }

    #[test]
    fn adaptive_switches_under_load_and_back_when_idle() {
        let mut s = RxModeState::new(RxMode::Adaptive, HZ);
        assert!(s.interrupts() && !s.busy(0));
        // A trickle (one packet per wake-up) stays in interrupt mode.
        for i in 0..20 {
            assert!(!s.account(1, 100 * MS + i * MS));
        }
        assert!(s.interrupts());
        // A burst switches to polling.
        assert!(s.account(64, 200 * MS));
        assert!(!s.interrupts() && s.busy(200 * MS) && s.adaptive_polling());
        // Load continues: stays polling across windows.
        for i in 1..=5 {
            assert!(!s.account(40, 200 * MS + i * 5 * MS));
        }
        assert!(s.busy(230 * MS));
        // Idle: empty polls until a window closes with too few packets.
        assert!(!s.account(0, 232 * MS));
        let mut switched = false;
        for i in 0..30 {
            switched |= s.account(0, 233 * MS + i * MS);
        }
        assert!(switched && s.interrupts() && !s.busy(300 * MS));
        // Mode changes restart in interrupt state.
        s.account(64, 400 * MS);
        s.set_mode(RxMode::Adaptive);
        assert!(s.interrupts());
    }
}
