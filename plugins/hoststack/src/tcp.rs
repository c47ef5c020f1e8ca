//! TCP connection state machine (RFC 9293) with retransmission timing per RFC 6298, used by
//! `tcp4-input` (segments in) and `session-queue` (segments out, timers). The send buffer is
//! the application's tx FIFO (stream mode: bytes stay there until acknowledged, so a
//! retransmission peeks them again), the receive buffer its rx FIFO (the window advertised
//! is the FIFO's free space, so a slow reader throttles the peer and accepted data is never
//! dropped). Out-of-order data is written into the rx FIFO at its place past the head
//! (inside the advertised window, so it fits) and published when the hole fills; the
//! connection keeps only its ranges, which it reports to the peer as SACK blocks (RFC 2018).
//! Congestion control: slow start and congestion avoidance; loss recovery per RFC 6675 when
//! both ends permit SACK (a scoreboard of the ranges the peer reported; only the holes it
//! shows lost are retransmitted, paced by the pipe estimate), otherwise a NewReno-style
//! reaction to three duplicate ACKs (go back to the first unacknowledged byte); an RTO
//! shrinks the window to one segment and forgets the scoreboard. Window scaling and
//! timestamps per RFC 7323 (both offered on every SYN, used when the peer offers them too;
//! timestamps protect against wrapped sequence numbers, PAWS). Delayed ACKs (RFC 9293
//! 3.8.6.3, RFC 5681 4.2): an ACK for in-order data waits until two full segments are
//! unacknowledged or the delayed-ACK timer fires; out-of-order data, a filled hole, a FIN,
//! a duplicate and a window update are acknowledged at once. Keepalive (RFC 1122 4.2.3.6):
//! after the idle time with nothing in flight, probes (sequence one below `snd_una`) at the
//! interval; the connection is reset when that many go unanswered. After the peer's FIN
//! no window update goes, and an exact RST in TIME-WAIT ends the connection without a
//! reset for the application, counted as `time_wait_rst` (issue 19's half-close flake,
//! `docs/hoststack.md`; RFC 1337's ignoring of that RST is not adopted).

use sluice_session::seg::Fifo;
pub use sluice_wire::tcp::TcpFlags;
use std::time::{Duration, Instant};

/// Our MSS over IPv4 (1500-byte MTU).
pub const MSS4: u16 = 1460;
/// Our MSS over IPv6 (1500-byte MTU).
pub const MSS6: u16 = 1440;
/// Bytes the timestamp option takes in every segment once negotiated (NOP NOP TS).
const TS_LEN: u32 = 12;
/// Largest window-scale shift (RFC 7323 2.3).
const MAX_SHIFT: u8 = 14;
/// Initial RTO (RFC 6298 2.1).
const RTO_INIT: Duration = Duration::from_secs(1);
/// Lower bound of the RTO (Linux's 200 ms, below RFC 6298's conservative 1 s).
const RTO_MIN: Duration = Duration::from_millis(200);
/// Upper bound of the RTO.
const RTO_MAX: Duration = Duration::from_secs(60);
/// Retransmissions of one segment before the connection is given up.
const MAX_RETRIES: u32 = 12;
/// SYN retransmissions before an open fails.
const MAX_SYN_RETRIES: u32 = 5;
/// How long TIME-WAIT lasts (2 × MSL with a short MSL, as many stacks).
pub const TIME_WAIT: Duration = Duration::from_secs(2);
/// How long an orphaned connection (its application gone) waits in FIN-WAIT-2 for the
/// peer's FIN (Linux's tcp_fin_timeout).
const FIN_TIMEOUT: Duration = Duration::from_secs(60);
/// Most separate ranges of out-of-order data held per connection.
const OOO_RANGES: usize = 8;
/// Most ranges the peer reported received (SACK scoreboard); a block past them is ignored
/// (its bytes count as not received: a redundant retransmission at worst).
const SACK_RANGES: usize = 16;
/// Duplicate ACKs (or SACKed segments above a hole) that mark loss (RFC 5681, RFC 6675).
const DUP_THRESH: u32 = 3;

const FIN: TcpFlags = TcpFlags::FIN;
const SYN: TcpFlags = TcpFlags::SYN;
const RST: TcpFlags = TcpFlags::RST;
const PSH: TcpFlags = TcpFlags::PSH;
const ACK: TcpFlags = TcpFlags::ACK;

/// The window-scale shift that lets a window of `bytes` be advertised (RFC 7323 2.3).
pub fn wscale_for(bytes: u32) -> u8 {
    let mut s = 0;
    while s < MAX_SHIFT && (bytes >> s) > 65535 {
        s += 1;
    }
    s
}

/// This end's parameters: what its SYNs offer (MSS, window-scale shift, SACK permitted)
/// and its ACK and keepalive timing.
#[derive(Clone, Copy, Debug)]
pub struct Local {
    /// Our MSS ([`MSS4`], [`MSS6`]).
    pub mss: u16,
    /// Our window-scale shift ([`wscale_for`] the rx FIFO size).
    pub wscale: u8,
    /// Offer SACK (RFC 2018); used when the peer offers it too.
    pub sack: bool,
    /// Longest an ACK for in-order data waits (zero: every ACK at once).
    pub delack: Duration,
    /// Keepalive (None: off).
    pub keepalive: Option<Keepalive>,
    /// TSO (`tcp-tso on`): most payload bytes of one new-data segment handed to the
    /// output as one aggregate of MSS-sized segments ([`Out::gso`]); 0: one segment each.
    pub tso: u32,
}

/// Most payload bytes of one TSO aggregate: with an IPv6 header and 60 bytes of TCP header
/// its IP length stays below 64 KiB.
pub const TSO_MAX: u32 = 65000;

/// Keepalive timing (RFC 1122 4.2.3.6; Linux's `tcp_keepalive_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keepalive {
    /// Quiet time before the first probe.
    pub idle: Duration,
    /// Time between unanswered probes.
    pub interval: Duration,
    /// Unanswered probes before the connection is reset.
    pub probes: u32,
}

/// Sorted, disjoint, non-touching sequence ranges [start, end), at most `N`.
#[derive(Clone, Copy, Debug)]
struct Ranges<const N: usize> {
    r: [(u32, u32); N],
    n: usize,
}

impl<const N: usize> Ranges<N> {
    const EMPTY: Self = Ranges {
        r: [(0, 0); N],
        n: 0,
    };

    fn as_slice(&self) -> &[(u32, u32)] {
        &self.r[..self.n]
    }

    fn is_empty(&self) -> bool {
        self.n == 0
    }

    fn clear(&mut self) {
        self.n = 0;
    }

    /// Adds [s, e), merged with the ranges it overlaps or touches; false when every slot
    /// is taken (nothing changes).
    fn insert(&mut self, mut s: u32, mut e: u32) -> bool {
        let mut keep = [(0u32, 0u32); N];
        let mut k = 0;
        for &(a, b) in self.as_slice() {
            if le(a, e) && le(s, b) {
                if lt(a, s) {
                    s = a;
                }
                if lt(e, b) {
                    e = b;
                }
            } else {
                keep[k] = (a, b);
                k += 1;
            }
        }
        if k == N {
            return false;
        }
        let pos = keep[..k].iter().position(|&(a, _)| lt(s, a)).unwrap_or(k);
        keep.copy_within(pos..k, pos + 1);
        keep[pos] = (s, e);
        self.r = keep;
        self.n = k + 1;
        true
    }

    /// Drops the first range.
    fn pop_front(&mut self) {
        self.r.copy_within(1..self.n, 0);
        self.n -= 1;
    }

    /// Forgets everything below `seq`.
    fn trim_below(&mut self, seq: u32) {
        while self.n > 0 && le(self.r[0].1, seq) {
            self.pop_front();
        }
        if self.n > 0 && lt(self.r[0].0, seq) {
            self.r[0].0 = seq;
        }
    }
}

/// Connection states (RFC 9293 3.3.2; LISTEN is a listener session, not a connection).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// Active open, SYN sent.
    SynSent,
    /// Passive open, SYN-ACK sent.
    SynRcvd,
    /// Data flows both ways.
    Established,
    /// We sent FIN.
    FinWait1,
    /// Our FIN was acknowledged.
    FinWait2,
    /// The peer sent FIN; the application may still send.
    CloseWait,
    /// Both sent FIN at once.
    Closing,
    /// Our FIN after the peer's.
    LastAck,
    /// Waiting out old duplicates.
    TimeWait,
    /// Gone (the session is freed).
    Closed,
}

impl State {
    /// VPP-like name for `show session`.
    pub fn name(self) -> &'static str {
        match self {
            State::SynSent => "SYN_SENT",
            State::SynRcvd => "SYN_RCVD",
            State::Established => "ESTABLISHED",
            State::FinWait1 => "FIN_WAIT_1",
            State::FinWait2 => "FIN_WAIT_2",
            State::CloseWait => "CLOSE_WAIT",
            State::Closing => "CLOSING",
            State::LastAck => "LAST_ACK",
            State::TimeWait => "TIME_WAIT",
            State::Closed => "CLOSED",
        }
    }
}

/// A received segment (the header checked by `tcp4-input`).
#[derive(Clone, Copy, Debug)]
pub struct Seg<'a> {
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgement number.
    pub ack: u32,
    /// Flags.
    pub flags: TcpFlags,
    /// Window (as sent: scaled by the peer's shift except on a SYN).
    pub wnd: u16,
    /// MSS option.
    pub mss: Option<u16>,
    /// Window-scale option.
    pub wscale: Option<u8>,
    /// Timestamps option (TSval, TSecr).
    pub ts: Option<(u32, u32)>,
    /// SACK-permitted option (on a SYN).
    pub sack_ok: bool,
    /// SACK option: the blocks as sent (pairs of big-endian left and right edges).
    pub sack: &'a [u8],
    /// Payload.
    pub data: &'a [u8],
}

impl Seg<'_> {
    fn has(&self, f: TcpFlags) -> bool {
        self.flags.intersects(f)
    }
    /// Sequence space the segment occupies.
    fn len(&self) -> u32 {
        self.data.len() as u32 + self.has(SYN) as u32 + self.has(FIN) as u32
    }
}

/// A segment to send: header fields and which bytes of the tx FIFO (offset past its tail).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Out {
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgement number (sent with ACK).
    pub ack: u32,
    /// Flags.
    pub flags: TcpFlags,
    /// Window field.
    pub wnd: u16,
    /// MSS option (SYN, SYN-ACK).
    pub mss: Option<u16>,
    /// Window-scale option (SYN, SYN-ACK).
    pub wscale: Option<u8>,
    /// Timestamps option (TSval, TSecr).
    pub ts: Option<(u32, u32)>,
    /// SACK-permitted option (SYN, SYN-ACK).
    pub sack_ok: bool,
    /// SACK blocks (the first `sack_n`).
    pub sack: [(u32, u32); 4],
    /// How many SACK blocks.
    pub sack_n: u8,
    /// Payload: offset into the tx FIFO past its tail.
    pub off: u32,
    /// Payload bytes.
    pub len: u32,
    /// TSO: payload bytes of each segment when `len` is more than one segment's (the
    /// output builds one aggregate, cut by the NIC, the kernel or `gso-segment`); 0: one
    /// segment.
    pub gso: u16,
}

impl Out {
    /// A segment with these header fields and no options or payload.
    pub fn bare(seq: u32, ack: u32, flags: TcpFlags, wnd: u16) -> Out {
        Out {
            seq,
            ack,
            flags,
            wnd,
            mss: None,
            wscale: None,
            ts: None,
            sack_ok: false,
            sack: [(0, 0); 4],
            sack_n: 0,
            off: 0,
            len: 0,
            gso: 0,
        }
    }

    /// Bytes the SACK blocks take in the header (NOP NOP kind len, 8 per block).
    pub fn sack_len(&self) -> u32 {
        if self.sack_n == 0 {
            0
        } else {
            4 + 8 * self.sack_n as u32
        }
    }
}

/// What a segment or a timer did that the session layer must act on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Effect {
    /// Something to send (ACK, data, SYN-ACK, ...).
    pub output: bool,
    /// The application should look (data, end of stream, state change).
    pub notify: bool,
    /// Acknowledged data left the tx FIFO (an application waiting for room is told).
    pub tx_space: bool,
    /// The handshake's final ACK carried data or a FIN that had no FIFO to go to: hand
    /// the segment in again once the connection has its slot (after `accepted`).
    pub replay: bool,
    /// A passive open completed (SYN-RCVD → ESTABLISHED): hand it to the listener's app.
    pub accepted: bool,
    /// The connection was reset or given up.
    pub reset: bool,
    /// Free the connection (CLOSED).
    pub free: bool,
    /// Answer with this RST (seq, ack, flags) instead.
    pub rst: Option<(u32, u32, TcpFlags)>,
    /// The reset is a keepalive timeout (the peer stopped answering probes).
    pub keepalive_dead: bool,
    /// An exact RST ended TIME-WAIT (no reset for the application; counted apart).
    pub time_wait_rst: bool,
}

/// Per-connection counters.
#[derive(Clone, Copy, Debug, Default)]
pub struct TcpStats {
    /// Segments retransmitted after an RTO.
    pub rto_retrans: u64,
    /// Fast retransmissions (three duplicate ACKs).
    pub fast_retrans: u64,
    /// Segments received out of order (held).
    pub ooo: u64,
    /// Segments outside the window (answered with an ACK, dropped).
    pub out_of_window: u64,
    /// Out-of-order segments not kept (every range slot taken).
    pub ooo_dropped: u64,
    /// Segments with an old timestamp (PAWS, RFC 7323 5: answered with an ACK, dropped).
    pub paws: u64,
    /// SACK loss recoveries entered (RFC 6675).
    pub sack_recoveries: u64,
    /// Segments retransmitted from the SACK scoreboard (holes only).
    pub sack_retrans: u64,
    /// ACKs sent carrying SACK blocks.
    pub sack_acks: u64,
    /// ACKs that waited (delayed ACK).
    pub acks_delayed: u64,
    /// Delayed ACKs sent by the timer (no segment to ride on, fewer than two full segments).
    pub delack_timeouts: u64,
    /// Keepalive probes sent.
    pub keepalive_probes: u64,
    /// TSO aggregates the emitter refused, for any reason; single segments were tried
    /// instead. The node's `tcp_tso_fallback` counts only those refused for want of
    /// buffers, so the two can differ (a corrupt tx FIFO refuses the retry too).
    pub tso_fallbacks: u64,
}

/// A connection (transmission control block).
#[derive(Debug)]
pub struct Tcb {
    /// State.
    pub state: State,
    iss: u32,
    snd_una: u32,
    snd_nxt: u32,
    /// Highest sequence sent (snd_nxt goes back on a retransmission).
    snd_max: u32,
    snd_wnd: u32,
    snd_wl1: u32,
    snd_wl2: u32,
    rcv_nxt: u32,
    /// Right edge of the window last advertised.
    rcv_adv: u32,
    /// Payload bytes per segment (the peer's MSS bounded by ours, less the timestamp
    /// option when negotiated).
    pub mss: u32,
    /// What we offer in our SYN.
    local: Local,
    /// The peer's window-scale shift (applied to the windows it sends; 0: no scaling).
    snd_shift: u8,
    /// Our shift (applied to the windows we send).
    rcv_shift: u8,
    /// Window scaling in use (on a SYN-SENT connection: offered).
    ws_ok: bool,
    /// Timestamps in use (on a SYN-SENT connection: offered).
    ts_ok: bool,
    /// The peer's latest timestamp to echo (RFC 7323 4.3).
    ts_recent: u32,
    /// The acknowledgement number last sent.
    last_ack_sent: u32,
    /// Our timestamp clock: milliseconds since this, plus the ISS as offset.
    ts_base: Instant,
    cwnd: u32,
    ssthresh: u32,
    dupacks: u32,
    srtt: Option<Duration>,
    rttvar: Duration,
    rto: Duration,
    /// (sequence that must be acknowledged, when it was sent) for one RTT sample.
    rtt_probe: Option<(u32, Instant)>,
    /// Retransmission (or persist) timer.
    pub rto_at: Option<Instant>,
    retries: u32,
    /// TIME-WAIT end.
    pub tw_at: Option<Instant>,
    /// Out-of-order data held in the rx FIFO past its head.
    ooo: Ranges<OOO_RANGES>,
    /// Start of the latest out-of-order segment (its range is the first SACK block).
    ooo_last: u32,
    ooo_fin: Option<u32>,
    /// SACK in use (on a SYN-SENT connection: offered).
    sack_ok: bool,
    /// What the peer reported received above `snd_una` (the scoreboard).
    sacked: Ranges<SACK_RANGES>,
    /// SACK loss recovery (RFC 6675): its end (`snd_max` when it began).
    recovery: Option<u32>,
    /// Highest sequence retransmitted in this recovery (HighRxt).
    high_rxt: u32,
    /// In recovery, bytes below this are taken as lost (the first segment at the start and
    /// after each partial ACK, as NewReno would resend it).
    lost_floor: u32,
    /// In-order data not yet acknowledged: the ACK may wait ([`Local::delack`]).
    ack_pending: bool,
    /// When the delayed ACK goes out at the latest.
    delack_at: Option<Instant>,
    /// Keepalive timing (None: off).
    keepalive: Option<Keepalive>,
    /// Next keepalive check.
    ka_at: Option<Instant>,
    /// Probes sent since the peer was last heard.
    ka_sent: u32,
    /// Send a keepalive probe.
    ka_probe: bool,
    /// When the last acceptable segment arrived.
    last_heard: Instant,
    /// The application closed: send FIN after the data.
    pub app_closed: bool,
    fin_sent: bool,
    need_ack: bool,
    /// Send SYN / SYN-ACK.
    need_syn: bool,
    /// Send one byte into a zero window.
    probe: bool,
    /// The peer's FIN was received in order.
    pub peer_fin: bool,
    /// The application is gone (the connection lingers to deliver its data and FIN).
    pub orphan: bool,
    /// Counters.
    pub stats: TcpStats,
}

fn lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}
fn le(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) <= 0
}

impl Tcb {
    fn new(state: State, iss: u32, local: Local, now: Instant) -> Tcb {
        Tcb {
            state,
            iss,
            snd_una: iss,
            snd_nxt: iss,
            snd_max: iss,
            snd_wnd: 0,
            snd_wl1: 0,
            snd_wl2: 0,
            rcv_nxt: 0,
            rcv_adv: 0,
            mss: 536,
            local,
            snd_shift: 0,
            rcv_shift: local.wscale.min(MAX_SHIFT),
            ws_ok: true,
            ts_ok: true,
            ts_recent: 0,
            last_ack_sent: 0,
            ts_base: now,
            cwnd: 0,
            ssthresh: u32::MAX,
            dupacks: 0,
            srtt: None,
            rttvar: Duration::ZERO,
            rto: RTO_INIT,
            rtt_probe: None,
            rto_at: Some(now + RTO_INIT),
            retries: 0,
            tw_at: None,
            ooo: Ranges::EMPTY,
            ooo_last: 0,
            ooo_fin: None,
            sack_ok: local.sack,
            sacked: Ranges::EMPTY,
            recovery: None,
            high_rxt: iss,
            lost_floor: iss,
            ack_pending: false,
            delack_at: None,
            keepalive: local.keepalive,
            ka_at: None,
            ka_sent: 0,
            ka_probe: false,
            last_heard: now,
            app_closed: false,
            fin_sent: false,
            need_ack: false,
            need_syn: true,
            probe: false,
            peer_fin: false,
            orphan: false,
            stats: TcpStats::default(),
        }
    }

    /// An active open: SYN to send (offering window scaling and timestamps).
    pub fn connect(iss: u32, local: Local, now: Instant) -> Tcb {
        Tcb::new(State::SynSent, iss, local, now)
    }

    /// A passive open from the SYN `syn`: SYN-ACK to send.
    pub fn accept(iss: u32, syn: &Seg<'_>, local: Local, now: Instant) -> Tcb {
        let mut t = Tcb::new(State::SynRcvd, iss, local, now);
        t.rcv_nxt = syn.seq.wrapping_add(1);
        t.snd_wnd = syn.wnd as u32;
        t.snd_wl1 = syn.seq;
        t.negotiate(syn);
        t
    }

    /// A passive open rebuilt from a valid SYN cookie: SYN-RCVD, its SYN-ACK (ISS `iss`,
    /// window `wnd`, unscaled) already sent; `syn` stands for the peer's SYN (the cookie
    /// keeps only the MSS, so no window scaling, timestamps or SACK).
    pub fn from_cookie(iss: u32, syn: &Seg<'_>, local: Local, wnd: u32, now: Instant) -> Tcb {
        let mut t = Tcb::accept(iss, syn, local, now);
        t.need_syn = false;
        t.snd_nxt = iss.wrapping_add(1);
        t.snd_max = t.snd_nxt;
        t.rcv_adv = t.rcv_nxt.wrapping_add(wnd);
        t.last_ack_sent = t.rcv_nxt;
        t
    }

    /// Takes the peer's SYN options: MSS, window scaling and timestamps are used only when
    /// both ends offered them (RFC 7323 2.2, 3.2).
    fn negotiate(&mut self, syn: &Seg<'_>) {
        self.mss = syn.mss.unwrap_or(536).min(self.local.mss) as u32;
        match syn.wscale {
            Some(s) => self.snd_shift = s.min(MAX_SHIFT),
            None => {
                self.ws_ok = false;
                self.rcv_shift = 0;
            }
        }
        match syn.ts {
            Some((v, _)) => {
                self.ts_recent = v;
                self.mss = self.mss.saturating_sub(TS_LEN).max(64);
            }
            None => self.ts_ok = false,
        }
        self.sack_ok &= syn.sack_ok;
    }

    /// Our timestamp clock (1 ms ticks, RFC 7323 5.4).
    fn ts_val(&self, now: Instant) -> u32 {
        (now.saturating_duration_since(self.ts_base).as_millis() as u32).wrapping_add(self.iss)
    }

    /// The window the peer sent, in bytes (a SYN's is never scaled).
    fn peer_wnd(&self, seg: &Seg<'_>) -> u32 {
        if seg.has(SYN) {
            seg.wnd as u32
        } else {
            (seg.wnd as u32) << self.snd_shift
        }
    }

    /// The application is gone: the connection lingers until its FIN is acknowledged and
    /// the peer's arrives, at most [`FIN_TIMEOUT`] in FIN-WAIT-2.
    pub fn orphan(&mut self, now: Instant) {
        self.orphan = true;
        if self.state == State::FinWait2 {
            self.tw_at = Some(now + FIN_TIMEOUT);
        }
    }

    /// Whether `seg` carries data past what was received.
    pub fn takes_new_data(&self, seg: &Seg<'_>) -> bool {
        !seg.data.is_empty() && lt(self.rcv_nxt, seg.seq.wrapping_add(seg.data.len() as u32))
    }

    /// Bytes in flight (sent, not acknowledged), SYN and FIN included.
    pub fn in_flight(&self) -> u32 {
        self.snd_nxt.wrapping_sub(self.snd_una)
    }

    /// Whether the connection is synchronized (past the handshake).
    fn synced(&self) -> bool {
        !matches!(self.state, State::SynSent | State::SynRcvd)
    }

    /// Bytes of the tx FIFO already sent (the sequence space past the SYN, before a FIN).
    fn data_sent(&self) -> u32 {
        let syn = (self.synced() && self.snd_una == self.iss) as u32;
        let mut n = self.snd_nxt.wrapping_sub(self.snd_una).wrapping_sub(syn);
        if self.fin_sent && self.snd_nxt == self.snd_max {
            n = n.saturating_sub(1);
        }
        n
    }

    /// Current retransmission timeout.
    pub fn rto(&self) -> Duration {
        self.rto
    }

    /// Smoothed RTT.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// Window and send-sequence summary for `show session verbose`.
    pub fn summary(&self) -> String {
        format!(
            "snd_una {} snd_nxt {} snd_wnd {} cwnd {} rcv_nxt {} mss {} wscale {}/{} ts {} sack {} rto {} ms srtt {} us, rto-retrans {} fast-retrans {} ooo {} out-of-window {} paws {} sack-recoveries {} sack-retrans {} sack-acks {} acks-delayed {} delack-timeouts {} keepalive-probes {} tso-fallbacks {}",
            self.snd_una.wrapping_sub(self.iss),
            self.snd_nxt.wrapping_sub(self.iss),
            self.snd_wnd,
            self.cwnd,
            self.rcv_nxt,
            self.mss,
            self.snd_shift,
            self.rcv_shift,
            if self.ts_ok { "on" } else { "off" },
            if self.sack_ok { "on" } else { "off" },
            self.rto.as_millis(),
            self.srtt.map(|d| d.as_micros()).unwrap_or(0),
            self.stats.rto_retrans,
            self.stats.fast_retrans,
            self.stats.ooo,
            self.stats.out_of_window,
            self.stats.paws,
            self.stats.sack_recoveries,
            self.stats.sack_retrans,
            self.stats.sack_acks,
            self.stats.acks_delayed,
            self.stats.delack_timeouts,
            self.stats.keepalive_probes,
            self.stats.tso_fallbacks,
        )
    }

    fn rtt_sample(&mut self, r: Duration) {
        // RFC 6298 2.2 / 2.3, with K = 4, alpha 1/8, beta 1/4, G = 1 ms.
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(s) => {
                let d = s.abs_diff(r);
                self.rttvar = self.rttvar * 3 / 4 + d / 4;
                self.srtt = Some(s * 7 / 8 + r / 8);
            }
        }
        let s = self.srtt.unwrap_or(r);
        self.rto = (s + (self.rttvar * 4).max(Duration::from_millis(1))).clamp(RTO_MIN, RTO_MAX);
    }

    fn established(&mut self, now: Instant) {
        self.state = State::Established;
        self.cwnd = 10 * self.mss; // RFC 6928 initial window
        self.retries = 0;
        self.rto_at = None;
        self.ka_at = self.keepalive.map(|k| now + k.idle);
    }

    /// The RST answering a segment no connection takes (RFC 9293 3.10.7.1).
    pub fn rst_for(seg: &Seg<'_>) -> (u32, u32, TcpFlags) {
        if seg.has(ACK) {
            (seg.ack, 0, RST)
        } else {
            (0, seg.seq.wrapping_add(seg.len()), RST | ACK)
        }
    }

    /// Processes a segment (RFC 9293 3.10.7). `rx` takes in-order data, `tx` loses what is
    /// acknowledged (both `None` before the application has a slot).
    pub fn input(
        &mut self,
        seg: &Seg<'_>,
        rx: Option<&Fifo<'_>>,
        tx: Option<&Fifo<'_>>,
        now: Instant,
    ) -> Effect {
        let mut e = Effect::default();
        if self.state == State::SynSent {
            if seg.has(ACK) && seg.ack != self.iss.wrapping_add(1) {
                if !seg.has(RST) {
                    e.rst = Some(Self::rst_for(seg));
                }
                return e;
            }
            if seg.has(RST) {
                if seg.has(ACK) {
                    self.state = State::Closed;
                    e.reset = true;
                    e.notify = true;
                    e.free = true;
                }
                return e;
            }
            if !seg.has(SYN) {
                return e;
            }
            self.rcv_nxt = seg.seq.wrapping_add(1);
            self.rcv_adv = self.rcv_nxt;
            self.negotiate(seg);
            self.snd_wnd = seg.wnd as u32;
            self.snd_wl1 = seg.seq;
            self.snd_wl2 = seg.ack;
            if seg.has(ACK) {
                self.snd_una = seg.ack;
                if let Some((_, t0)) = self.rtt_probe.take() {
                    if self.retries == 0 {
                        self.rtt_sample(now - t0);
                    }
                }
                self.established(now);
                self.need_ack = true;
                e.output = true;
                e.notify = true;
            } else {
                // Simultaneous open.
                self.state = State::SynRcvd;
                self.snd_nxt = self.iss;
                self.need_syn = true;
                e.output = true;
            }
            return e;
        }
        // PAWS (RFC 7323 5.3 R1): a timestamp older than the last one taken marks an old
        // duplicate (wrapped sequence numbers): acknowledge and drop it.
        if let (true, Some((v, _)), false) = (self.ts_ok, seg.ts, seg.has(RST)) {
            if lt(v, self.ts_recent) {
                self.stats.paws += 1;
                self.need_ack = true;
                e.output = true;
                return e;
            }
        }
        let rcv_wnd = self.rcv_adv.wrapping_sub(self.rcv_nxt);
        // 1. Sequence acceptability.
        let slen = seg.len();
        let acceptable = match (slen, rcv_wnd) {
            (0, 0) => seg.seq == self.rcv_nxt,
            (0, _) => le(self.rcv_nxt, seg.seq) && lt(seg.seq, self.rcv_adv),
            (_, 0) => false,
            (_, _) => {
                let last = seg.seq.wrapping_add(slen - 1);
                (le(self.rcv_nxt, seg.seq) && lt(seg.seq, self.rcv_adv))
                    || (le(self.rcv_nxt, last) && lt(last, self.rcv_adv))
            }
        };
        // A zero window still takes ACKs and RSTs: process the header with no data.
        let zero_wnd_hdr = !acceptable && rcv_wnd == 0 && seg.seq == self.rcv_nxt;
        if !acceptable && !zero_wnd_hdr {
            if !seg.has(RST) {
                self.stats.out_of_window += 1;
                self.need_ack = true;
                e.output = true;
                if self.state == State::TimeWait && seg.has(FIN) {
                    self.tw_at = Some(now + TIME_WAIT);
                }
            }
            return e;
        }
        // The peer is alive (keepalive).
        self.last_heard = now;
        self.ka_sent = 0;
        // RFC 7323 4.3: remember the timestamp of a segment that starts at or before what we
        // last acknowledged (the one to echo).
        if let (true, Some((v, _))) = (self.ts_ok, seg.ts) {
            if le(seg.seq, self.last_ack_sent) && le(self.ts_recent, v) {
                self.ts_recent = v;
            }
        }
        // 2. RST (RFC 5961 3.2: exact match resets, otherwise a challenge ACK).
        if seg.has(RST) {
            if seg.seq == self.rcv_nxt {
                // In SYN-RECEIVED the application never saw the connection; in TIME-WAIT
                // both streams ended in order (every byte and the peer's FIN are in the rx
                // FIFO): the connection ends, the application reads to the end of stream
                // (Linux's TIME-WAIT socket is no longer the application's either).
                // The RST still ends TIME-WAIT early and frees the 4-tuple, as RFC 9293
                // 3.10.7.4 and Linux with tcp_rfc1337=0 do: RFC 1337's "ignore RST in
                // TIME-WAIT" is not adopted. CLOSING and LAST-ACK still report a reset:
                // our FIN (and maybe data before it) is not acknowledged there, so the
                // application cannot know its stream arrived whole.
                let quiet = matches!(self.state, State::SynRcvd | State::TimeWait);
                e.time_wait_rst = self.state == State::TimeWait;
                self.state = State::Closed;
                e.reset = !quiet;
                e.notify = !quiet;
                e.free = true;
            } else {
                self.need_ack = true;
                e.output = true;
            }
            return e;
        }
        // 3. SYN in a synchronized state: challenge ACK (RFC 5961 4.2).
        if seg.has(SYN) {
            if self.state == State::SynRcvd && seg.seq.wrapping_add(1) == self.rcv_nxt {
                // Our SYN-ACK was lost: send it again.
                self.need_syn = true;
                self.snd_nxt = self.iss;
            } else {
                self.need_ack = true;
            }
            e.output = true;
            return e;
        }
        // 4. ACK.
        if !seg.has(ACK) {
            return e;
        }
        if self.state == State::SynRcvd {
            if lt(self.snd_una, seg.ack) && le(seg.ack, self.snd_max) {
                self.snd_una = seg.ack;
                self.snd_nxt = self.snd_max.max(seg.ack);
                if let Some((_, t0)) = self.rtt_probe.take() {
                    if self.retries == 0 {
                        self.rtt_sample(now - t0);
                    }
                }
                self.snd_wnd = self.peer_wnd(seg);
                self.snd_wl1 = seg.seq;
                self.snd_wl2 = seg.ack;
                self.established(now);
                e.accepted = true;
                if rx.is_none() && (!seg.data.is_empty() || seg.has(FIN)) {
                    e.replay = true;
                    return e;
                }
            } else {
                e.rst = Some(Self::rst_for(seg));
                return e;
            }
        } else {
            if lt(self.snd_max, seg.ack) {
                // Acknowledges something not sent.
                self.need_ack = true;
                e.output = true;
                return e;
            }
            if self.sack_ok && !seg.sack.is_empty() {
                self.take_sack(seg);
            }
            if lt(self.snd_una, seg.ack) {
                let acked = seg.ack.wrapping_sub(self.snd_una);
                // Sequence space that is data (not the FIN).
                let fin_acked = self.fin_sent && seg.ack == self.snd_max;
                let data = acked - fin_acked as u32;
                if let Some(tx) = tx {
                    tx.drop_front(data);
                }
                self.snd_una = seg.ack;
                if lt(self.snd_nxt, self.snd_una) {
                    self.snd_nxt = self.snd_una;
                }
                if let Some((s, t0)) = self.rtt_probe {
                    if le(s, seg.ack) {
                        self.rtt_probe = None;
                        self.rtt_sample(now - t0);
                    }
                }
                self.retries = 0;
                self.dupacks = 0;
                self.sacked.trim_below(self.snd_una);
                if let Some(end) = self.recovery {
                    if le(end, self.snd_una) {
                        // Recovery over (RFC 6675 5.1): continue from ssthresh.
                        self.recovery = None;
                        self.cwnd = self.ssthresh;
                    } else {
                        // A partial ACK: the next hole's first segment is presumed lost too.
                        if lt(self.high_rxt, self.snd_una) {
                            self.high_rxt = self.snd_una;
                        }
                        self.lost_floor = self.snd_una.wrapping_add(self.mss);
                    }
                } else if self.cwnd < self.ssthresh {
                    // Slow start, then congestion avoidance (RFC 5681).
                    self.cwnd = self.cwnd.saturating_add(acked.min(self.mss));
                } else {
                    self.cwnd = self
                        .cwnd
                        .saturating_add((self.mss * self.mss / self.cwnd.max(1)).max(1));
                }
                self.rto_at = (self.snd_una != self.snd_max).then(|| now + self.rto);
                e.output = true; // the window moved: more may go
                e.tx_space = data > 0;
                if fin_acked {
                    match self.state {
                        State::FinWait1 => {
                            self.state = State::FinWait2;
                            if self.orphan {
                                self.tw_at = Some(now + FIN_TIMEOUT);
                            }
                        }
                        State::Closing => {
                            self.state = State::TimeWait;
                            self.tw_at = Some(now + TIME_WAIT);
                        }
                        State::LastAck => {
                            self.state = State::Closed;
                            e.free = true;
                            return e;
                        }
                        _ => {}
                    }
                }
            } else if seg.ack == self.snd_una
                && seg.data.is_empty()
                && !seg.has(FIN)
                && self.peer_wnd(seg) == self.snd_wnd
                && self.snd_una != self.snd_max
            {
                self.dupacks += 1;
                if self.recovery.is_none()
                    && (self.dupacks == DUP_THRESH || (self.sack_ok && self.first_hole_lost()))
                {
                    // Fast retransmit (RFC 5681 3.2, RFC 6675 5).
                    let flight = self.snd_max.wrapping_sub(self.snd_una);
                    self.ssthresh = (flight / 2).max(2 * self.mss);
                    self.cwnd = self.ssthresh;
                    self.stats.fast_retrans += 1;
                    if self.sack_ok {
                        // Only the holes the scoreboard shows lost go again, from the first.
                        self.recovery = Some(self.snd_max);
                        self.high_rxt = self.snd_una;
                        self.lost_floor = self.snd_una.wrapping_add(self.mss);
                        self.rtt_probe = None;
                        self.stats.sack_recoveries += 1;
                    } else {
                        // Without SACK: go-back-N from the hole.
                        self.go_back();
                    }
                    e.output = true;
                }
            }
        }
        // Window update (RFC 9293 3.10.7.4).
        if lt(self.snd_wl1, seg.seq) || (self.snd_wl1 == seg.seq && le(self.snd_wl2, seg.ack)) {
            let wnd = self.peer_wnd(seg);
            if self.snd_wnd == 0 && wnd > 0 {
                e.output = true;
            }
            self.snd_wnd = wnd;
            self.snd_wl1 = seg.seq;
            self.snd_wl2 = seg.ack;
        }
        // 5. Data.
        let can_take = matches!(
            self.state,
            State::Established | State::FinWait1 | State::FinWait2
        );
        if !seg.data.is_empty() && can_take && acceptable {
            self.take_data(seg, rx, &mut e);
        }
        // 6. FIN.
        if seg.has(FIN) && acceptable {
            let fin_seq = seg.seq.wrapping_add(seg.data.len() as u32);
            if fin_seq == self.rcv_nxt {
                self.fin_in(now, &mut e);
            } else if lt(self.rcv_nxt, fin_seq) {
                self.ooo_fin = Some(fin_seq);
            } else if self.state == State::TimeWait {
                self.need_ack = true;
                self.tw_at = Some(now + TIME_WAIT);
                e.output = true;
            }
        }
        e
    }

    fn fin_in(&mut self, now: Instant, e: &mut Effect) {
        if self.peer_fin {
            self.need_ack = true;
            e.output = true;
            return;
        }
        self.rcv_nxt = self.rcv_nxt.wrapping_add(1);
        self.peer_fin = true;
        self.need_ack = true;
        e.output = true;
        e.notify = true;
        match self.state {
            State::Established => self.state = State::CloseWait,
            State::FinWait1 => {
                if self.fin_sent && self.snd_una == self.snd_max {
                    self.state = State::TimeWait;
                    self.tw_at = Some(now + TIME_WAIT);
                } else {
                    self.state = State::Closing;
                }
            }
            State::FinWait2 => {
                self.state = State::TimeWait;
                self.tw_at = Some(now + TIME_WAIT);
            }
            _ => {}
        }
    }

    fn take_data(&mut self, seg: &Seg<'_>, rx: Option<&Fifo<'_>>, e: &mut Effect) {
        let Some(rx) = rx else { return };
        e.output = true;
        // Anything but new in-order data into no hole is acknowledged at once (RFC 5681
        // 4.2); that one may wait (delayed ACK, in `output`).
        let mut seq = seg.seq;
        let mut d = seg.data;
        // Trim what we already have.
        if lt(seq, self.rcv_nxt) {
            let skip = self.rcv_nxt.wrapping_sub(seq) as usize;
            if skip >= d.len() {
                self.need_ack = true;
                return;
            }
            d = &d[skip..];
            seq = self.rcv_nxt;
        }
        // And what lies past the window.
        let room = self.rcv_adv.wrapping_sub(seq) as usize;
        d = &d[..d.len().min(room)];
        if d.is_empty() {
            self.need_ack = true;
            return;
        }
        if seq != self.rcv_nxt {
            self.need_ack = true;
            // Out of order: written into the rx FIFO at its place past the head (the window
            // we advertised has room for it), its range remembered (a SACK block); a
            // duplicate ACK.
            self.stats.ooo += 1;
            let end = seq.wrapping_add(d.len() as u32);
            if rx.write_ahead(seq.wrapping_sub(self.rcv_nxt), d) && self.ooo.insert(seq, end) {
                self.ooo_last = seq;
            } else {
                self.stats.ooo_dropped += 1;
            }
            return;
        }
        self.need_ack |= !self.ooo.is_empty(); // fills (part of) a hole
        self.ack_pending = true;
        let n = rx.push_bytes(d);
        self.rcv_nxt = self.rcv_nxt.wrapping_add(n as u32);
        e.notify |= n > 0;
        // Held ranges the new bytes reach join the stream (their bytes are in place).
        while let Some(&(start, end)) = self.ooo.as_slice().first() {
            if lt(self.rcv_nxt, start) {
                break;
            }
            if lt(self.rcv_nxt, end) {
                let want = end.wrapping_sub(self.rcv_nxt);
                let m = rx.advance(want);
                self.rcv_nxt = self.rcv_nxt.wrapping_add(m);
                if m < want {
                    self.ooo.r[0].0 = self.rcv_nxt; // the rest stays held
                    break;
                }
            }
            self.ooo.pop_front();
        }
        if self.ooo_fin == Some(self.rcv_nxt) {
            self.ooo_fin = None;
            let now = Instant::now();
            self.fin_in(now, e);
        }
    }

    /// Takes the peer's SACK blocks into the scoreboard (RFC 2018 4: only blocks above
    /// the cumulative ACK and within what was sent; a D-SACK below it is ignored).
    fn take_sack(&mut self, seg: &Seg<'_>) {
        let lo = if lt(seg.ack, self.snd_una) {
            self.snd_una
        } else {
            seg.ack
        };
        for b in seg.sack.chunks_exact(8) {
            let s = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
            let e = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
            if lt(s, e) && lt(lo, e) && le(e, self.snd_max) {
                self.sacked.insert(if lt(s, lo) { lo } else { s }, e);
            }
        }
    }

    /// Walks the holes of the scoreboard in [snd_una, snd_max), lowest first, with whether
    /// each is lost (RFC 6675 IsLost: more than (DupThresh − 1) × MSS bytes or DupThresh
    /// ranges SACKed above it; in recovery also what lies below `lost_floor`). `f` returns
    /// false to stop.
    fn for_holes(&self, mut f: impl FnMut(u32, u32, bool) -> bool) {
        let r = self.sacked.as_slice();
        let mut above = [0u32; SACK_RANGES + 1];
        for i in (0..r.len()).rev() {
            above[i] = above[i + 1] + r[i].1.wrapping_sub(r[i].0);
        }
        let floor = self.recovery.map(|_| self.lost_floor);
        let mut start = self.snd_una;
        for (i, &sacked_above) in above.iter().enumerate().take(r.len() + 1) {
            let end = r.get(i).map_or(self.snd_max, |x| x.0);
            if lt(start, end) {
                let sacked_lost = sacked_above > (DUP_THRESH - 1) * self.mss
                    || (r.len() - i) as u32 >= DUP_THRESH;
                let split = match floor {
                    Some(fl) if !sacked_lost && lt(start, fl) => {
                        if lt(fl, end) {
                            fl
                        } else {
                            end
                        }
                    }
                    _ => start,
                };
                if split != start && !f(start, split, true) {
                    return;
                }
                if lt(split, end) && !f(split, end, sacked_lost) {
                    return;
                }
            }
            if let Some(x) = r.get(i) {
                start = x.1;
            }
        }
    }

    /// Whether the first unacknowledged byte is lost by the scoreboard.
    fn first_hole_lost(&self) -> bool {
        if self.sacked.is_empty() {
            return false;
        }
        let mut lost = false;
        self.for_holes(|s, _, l| {
            lost = l && s == self.snd_una;
            false
        });
        lost
    }

    /// RFC 6675 SetPipe: bytes presumed in the network (not SACKed and not lost, plus what
    /// was retransmitted).
    fn pipe(&self) -> u32 {
        let mut pipe = 0u32;
        self.for_holes(|s, e, lost| {
            if !lost {
                pipe += e.wrapping_sub(s);
            }
            if lt(s, self.high_rxt) {
                let r = if lt(e, self.high_rxt) {
                    e
                } else {
                    self.high_rxt
                };
                pipe += r.wrapping_sub(s);
            }
            true
        });
        pipe
    }

    /// RFC 6675 NextSeg (1): the first lost, not yet retransmitted range, at most a segment.
    fn next_hole(&self) -> Option<(u32, u32)> {
        let mut found = None;
        self.for_holes(|s, e, lost| {
            let s = if lt(s, self.high_rxt) {
                self.high_rxt
            } else {
                s
            };
            if lost && lt(s, e) {
                let m = s.wrapping_add(self.mss);
                found = Some((s, if lt(m, e) { m } else { e }));
                return false;
            }
            true
        });
        found
    }

    /// The SACK blocks for an ACK (RFC 2018 4): the range holding the latest out-of-order
    /// segment first, then the others; three when timestamps take their room, else four.
    fn sack_blocks(&self, o: &mut Out) {
        if !self.sack_ok || self.ooo.is_empty() {
            return;
        }
        let max = if self.ts_ok { 3 } else { 4 };
        let r = self.ooo.as_slice();
        let first = r
            .iter()
            .position(|&(a, b)| le(a, self.ooo_last) && lt(self.ooo_last, b))
            .unwrap_or(0);
        o.sack[0] = r[first];
        let mut n = 1;
        for (i, &x) in r.iter().enumerate() {
            if n == max {
                break;
            }
            if i != first {
                o.sack[n] = x;
                n += 1;
            }
        }
        o.sack_n = n as u8;
    }

    fn go_back(&mut self) {
        self.snd_nxt = self.snd_una;
        self.rtt_probe = None;
        if self.fin_sent && self.snd_una != self.snd_max {
            self.fin_sent = false;
        }
    }

    /// Timers: TIME-WAIT, delayed ACK, keepalive, retransmission / persist.
    pub fn timer(&mut self, now: Instant) -> Effect {
        let mut e = Effect::default();
        if let Some(t) = self.tw_at {
            if now >= t {
                self.state = State::Closed;
                e.free = true;
                return e;
            }
        }
        if self.delack_at.is_some_and(|t| now >= t) {
            self.delack_at = None;
            if self.ack_pending {
                self.need_ack = true;
                self.stats.delack_timeouts += 1;
                e.output = true;
            }
        }
        if self.ka_at.is_some_and(|t| now >= t) {
            self.keepalive_timer(now, &mut e);
            if e.free {
                return e;
            }
        }
        let Some(t) = self.rto_at else { return e };
        if now < t {
            return e;
        }
        self.retries += 1;
        let limit = if self.synced() {
            MAX_RETRIES
        } else {
            MAX_SYN_RETRIES
        };
        if self.retries > limit {
            self.state = State::Closed;
            e.reset = true;
            e.notify = true;
            e.free = true;
            return e;
        }
        self.rto = (self.rto * 2).min(RTO_MAX);
        self.rto_at = Some(now + self.rto);
        e.output = true;
        if !self.synced() {
            self.need_syn = true;
            self.snd_nxt = self.iss;
            self.rtt_probe = None;
            return e;
        }
        if self.snd_una == self.snd_max {
            // Nothing in flight: the persist timer of a zero window.
            self.probe = true;
            return e;
        }
        let flight = self.snd_max.wrapping_sub(self.snd_una);
        self.ssthresh = (flight / 2).max(2 * self.mss);
        self.cwnd = self.mss;
        self.stats.rto_retrans += 1;
        // RFC 2018 8 / RFC 6675 5.1: after a timeout the scoreboard is not trusted.
        self.recovery = None;
        self.sacked.clear();
        self.go_back();
        e
    }

    /// The keepalive timer: a probe once the connection was quiet for the idle time with
    /// nothing in flight, then one per interval; reset after that many unanswered.
    fn keepalive_timer(&mut self, now: Instant, e: &mut Effect) {
        let Some(k) = self.keepalive else {
            self.ka_at = None;
            return;
        };
        if !matches!(self.state, State::Established | State::CloseWait) {
            self.ka_at = None;
            return;
        }
        if self.snd_una != self.snd_max {
            // Data in flight: the retransmission timer watches the peer.
            self.ka_sent = 0;
            self.ka_at = Some(now + k.idle);
            return;
        }
        if self.ka_sent == 0 {
            let quiet_until = self.last_heard + k.idle;
            if now < quiet_until {
                self.ka_at = Some(quiet_until);
                return;
            }
        }
        if self.ka_sent >= k.probes {
            self.state = State::Closed;
            self.ka_at = None;
            e.rst = Some((self.snd_nxt, self.rcv_nxt, RST | ACK));
            e.reset = true;
            e.notify = true;
            e.free = true;
            e.keepalive_dead = true;
            return;
        }
        self.ka_sent += 1;
        self.ka_probe = true;
        self.stats.keepalive_probes += 1;
        self.ka_at = Some(now + k.interval);
        e.output = true;
    }

    /// Our receive window, the rx FIFO's free space: (the header's field, the bytes it
    /// advertises). Scaled by our shift except on a SYN (RFC 7323 2.2).
    fn wnd(&self, rx_free: u32, syn: bool) -> (u16, u32) {
        let free = rx_free;
        if syn {
            let f = free.min(65535);
            return (f as u16, f);
        }
        let f = (free >> self.rcv_shift).min(65535);
        (f as u16, f << self.rcv_shift)
    }

    /// Whether reading has opened the window enough to tell the peer: never after the
    /// peer's FIN (no more data comes; in TIME-WAIT the peer may be gone, and would answer
    /// the update with a RST; Linux likewise stops updating at RCV_SHUTDOWN).
    pub fn window_update_due(&self, rx_free: u32) -> bool {
        if self.peer_fin {
            return false;
        }
        let adv = self.rcv_adv.wrapping_sub(self.rcv_nxt);
        let now = self.wnd(rx_free, false).1;
        now > adv && now - adv >= (2 * self.mss).min(32768)
    }

    /// Builds the segments to send now into `emit` (false from `emit`: no buffer, stop).
    /// `tx_used` is what the tx FIFO holds, `rx_free` the rx FIFO's free space.
    pub fn output(
        &mut self,
        tx_used: u32,
        rx_free: u32,
        now: Instant,
        mut emit: impl FnMut(Out) -> bool,
    ) -> u32 {
        let mut sent = 0;
        if self.window_update_due(rx_free) {
            self.need_ack = true;
        }
        // Delayed ACK: in-order data is acknowledged at once every second full segment,
        // else by the timer unless a segment carries the ACK first.
        if self.ack_pending && !self.need_ack {
            if self.local.delack.is_zero()
                || self.rcv_nxt.wrapping_sub(self.last_ack_sent) >= 2 * self.mss
            {
                self.need_ack = true;
            } else if self.delack_at.is_none() {
                self.delack_at = Some(now + self.local.delack);
                self.stats.acks_delayed += 1;
            }
        }
        let hdr = |t: &mut Tcb, seq: u32, flags: TcpFlags| {
            let (wnd, bytes) = t.wnd(rx_free, flags.intersects(SYN));
            let edge = t.rcv_nxt.wrapping_add(bytes);
            // The right edge never moves left (RFC 9293 3.8.6.2.2).
            if lt(t.rcv_adv, edge) || flags.intersects(SYN) {
                t.rcv_adv = edge;
            }
            let mut o = Out::bare(seq, t.rcv_nxt, flags, wnd);
            o.ts = t.ts_ok.then(|| (t.ts_val(now), t.ts_recent));
            if !flags.intersects(SYN) {
                t.sack_blocks(&mut o);
            }
            o
        };
        // After a segment carrying the ACK went out.
        let acked = |t: &mut Tcb, o: &Out| {
            t.last_ack_sent = o.ack;
            t.need_ack = false;
            t.ack_pending = false;
            t.delack_at = None;
            t.stats.sack_acks += (o.sack_n > 0) as u64;
        };
        match self.state {
            State::Closed | State::TimeWait if !self.need_ack => return 0,
            State::SynSent | State::SynRcvd => {
                if self.need_syn {
                    let f = if self.state == State::SynSent {
                        SYN
                    } else {
                        SYN | ACK
                    };
                    let mut o = hdr(self, self.iss, f);
                    o.mss = Some(self.local.mss);
                    o.wscale = self.ws_ok.then_some(self.rcv_shift);
                    o.sack_ok = self.sack_ok;
                    if !emit(o) {
                        return 0;
                    }
                    self.last_ack_sent = o.ack;
                    self.need_syn = false;
                    self.snd_nxt = self.iss.wrapping_add(1);
                    self.snd_max = self.snd_nxt;
                    if self.retries == 0 {
                        self.rtt_probe = Some((self.snd_nxt, now));
                    }
                    self.rto_at.get_or_insert(now + self.rto);
                    sent += 1;
                }
                return sent;
            }
            _ => {}
        }
        // SACK loss recovery (RFC 6675 5, steps C.1-C.5): holes first, while the pipe has
        // room for a segment.
        let mut pipe = 0;
        if self.recovery.is_some() {
            pipe = self.pipe();
            while pipe.saturating_add(self.mss) <= self.cwnd.max(self.mss) {
                let Some((s, mut e)) = self.next_hole() else {
                    break;
                };
                let data_end = self.snd_max.wrapping_sub(self.fin_sent as u32);
                let mut o = hdr(self, s, ACK);
                let room = self.mss.saturating_sub(o.sack_len()).max(1);
                let len = if lt(s, data_end) {
                    let end = if lt(e, data_end) { e } else { data_end };
                    end.wrapping_sub(s).min(room)
                } else {
                    0
                };
                if self.fin_sent && e == self.snd_max && s.wrapping_add(len) == data_end {
                    o.flags = o.flags | FIN;
                } else {
                    e = s.wrapping_add(len);
                }
                o.off = s.wrapping_sub(self.snd_una);
                o.len = len;
                if !emit(o) {
                    return sent;
                }
                acked(self, &o);
                sent += 1;
                self.stats.sack_retrans += 1;
                self.high_rxt = e;
                pipe += e.wrapping_sub(s);
                self.rto_at.get_or_insert(now + self.rto);
            }
        }
        // Data. `single`: an aggregate was refused (no buffers for its chain): the rest of
        // this call sends single segments.
        let mut single = false;
        loop {
            let sent_data = self.data_sent();
            let unsent = tx_used.saturating_sub(sent_data);
            if unsent == 0 || self.fin_sent {
                break;
            }
            let flight = self.in_flight();
            // In recovery the congestion window holds the pipe, not everything unacknowledged.
            let used = if self.recovery.is_some() {
                pipe
            } else {
                flight
            };
            let mut room = self
                .snd_wnd
                .saturating_sub(flight)
                .min(self.cwnd.max(self.mss).saturating_sub(used));
            if room == 0 && self.probe && flight == 0 {
                room = 1; // zero-window probe
            }
            if room == 0 {
                if self.snd_wnd == 0 && self.rto_at.is_none() {
                    self.rto_at = Some(now + self.rto); // persist timer
                }
                break;
            }
            let mut o = hdr(self, self.snd_nxt, ACK);
            // One segment, or with TSO whole segments up to `tso` bytes in one aggregate
            // (loss recovery above still resends single segments).
            let seg = self.mss.saturating_sub(o.sack_len()).max(1);
            let most = if single {
                seg
            } else {
                seg.max(self.local.tso / seg * seg)
            };
            let mut len = unsent.min(room).min(most);
            o.off = sent_data;
            o.len = len;
            if len > seg {
                o.gso = seg as u16;
            }
            if len == unsent {
                o.flags = o.flags | PSH;
            }
            if !emit(o) {
                if o.gso == 0 {
                    return sent;
                }
                // The aggregate was not built: its first segment alone (a short buffer
                // pool need not wait until a whole chain's worth is free).
                single = true;
                self.stats.tso_fallbacks += 1;
                len = seg;
                o.len = seg;
                o.gso = 0;
                // PSH only marked the aggregate's end; keep whatever else `hdr` set.
                o.flags = TcpFlags(o.flags.0 & !PSH.0);
                if !emit(o) {
                    return sent;
                }
            }
            acked(self, &o);
            self.probe = false;
            sent += 1;
            pipe += len;
            if self.snd_nxt == self.snd_max && self.rtt_probe.is_none() {
                self.rtt_probe = Some((self.snd_nxt.wrapping_add(len), now));
            }
            self.snd_nxt = self.snd_nxt.wrapping_add(len);
            if lt(self.snd_max, self.snd_nxt) {
                self.snd_max = self.snd_nxt;
            }
            self.rto_at.get_or_insert(now + self.rto);
        }
        // FIN once every byte was sent.
        let all_sent = self.data_sent() >= tx_used;
        if self.app_closed
            && !self.fin_sent
            && all_sent
            && matches!(
                self.state,
                State::Established
                    | State::CloseWait
                    | State::FinWait1
                    | State::Closing
                    | State::LastAck
            )
        {
            let o = hdr(self, self.snd_nxt, FIN | ACK);
            if !emit(o) {
                return sent;
            }
            acked(self, &o);
            sent += 1;
            self.fin_sent = true;
            self.snd_nxt = self.snd_nxt.wrapping_add(1);
            if lt(self.snd_max, self.snd_nxt) {
                self.snd_max = self.snd_nxt;
            }
            self.rto_at.get_or_insert(now + self.rto);
            self.state = match self.state {
                State::Established => State::FinWait1,
                State::CloseWait => State::LastAck,
                s => s,
            };
        }
        if self.need_ack {
            let o = hdr(self, self.snd_nxt, ACK);
            if emit(o) {
                acked(self, &o);
                sent += 1;
            }
        }
        if self.ka_probe {
            // Keepalive probe: one byte below what the peer acknowledged draws its ACK.
            let o = hdr(self, self.snd_una.wrapping_sub(1), ACK);
            if emit(o) {
                self.ka_probe = false;
                sent += 1;
            }
        }
        sent
    }

    /// The earliest armed timer.
    pub fn next_deadline(&self) -> Option<Instant> {
        [self.rto_at, self.tw_at, self.delack_at, self.ka_at]
            .into_iter()
            .flatten()
            .min()
    }

    /// The sequence numbers of an abortive RST (seq = snd_nxt).
    pub fn rst_seq(&self) -> (u32, u32) {
        (self.snd_nxt, self.rcv_nxt)
    }

    /// Whether the window is small enough that the application should tell us after reading.
    pub fn wants_window_request(&self, rx_free: u32, fifo_size: u32) -> bool {
        rx_free < fifo_size / 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Local = Local {
        mss: MSS4,
        wscale: 0,
        sack: true,
        delack: Duration::ZERO,
        keepalive: None,
        tso: 0,
    };

    fn seg(seq: u32, ack: u32, flags: TcpFlags, data: &[u8]) -> Seg<'_> {
        Seg {
            seq,
            ack,
            flags,
            wnd: 65535,
            mss: None,
            wscale: None,
            ts: None,
            sack_ok: false,
            sack: &[],
            data,
        }
    }

    /// The geometry of the test segments: one slot of two 16 KiB FIFOs.
    const G: sluice_session::seg::Geometry = sluice_session::seg::Geometry {
        n_slots: 1,
        fifo_size: 16384,
        evq_len: 16,
        n_queues: 1,
    };

    /// A segment with one slot (see [`slot`]).
    fn fifos(name: &str) -> sluice_infra::shm::Region {
        let r = sluice_infra::shm::Region::create(name, G.size()).unwrap();
        sluice_session::seg::init_header(&r, &G);
        r
    }

    /// The (rx, tx) FIFOs of the segment's slot.
    fn slot(r: &sluice_infra::shm::Region) -> (Fifo<'_>, Fifo<'_>) {
        sluice_session::seg::slot_fifos(r, &G, 0).unwrap()
    }

    #[test]
    fn passive_open_then_data_and_close() {
        let now = Instant::now();
        let syn = Seg {
            mss: Some(1000),
            ..seg(100, 0, SYN, &[])
        };
        let mut t = Tcb::accept(5000, &syn, L, now);
        assert_eq!(t.mss, 1000);
        let mut out = vec![];
        t.output(0, 65536, now, |o| {
            out.push(o);
            true
        });
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].flags, SYN | ACK);
        assert_eq!((out[0].seq, out[0].ack), (5000, 101));
        let e = t.input(&seg(101, 5001, ACK, &[]), None, None, now);
        assert!(e.accepted);
        assert_eq!(t.state, State::Established);
        t.app_closed = true;
        out.clear();
        t.output(0, 65536, now, |o| {
            out.push(o);
            true
        });
        assert_eq!(out[0].flags, FIN | ACK);
        assert_eq!(t.state, State::FinWait1);
        t.input(&seg(101, 5002, ACK, &[]), None, None, now);
        assert_eq!(t.state, State::FinWait2);
        t.input(&seg(101, 5002, ACK | FIN, &[]), None, None, now);
        assert_eq!(t.state, State::TimeWait);
        assert!(t.timer(now + TIME_WAIT).free);
    }

    #[test]
    fn data_and_fin_on_the_final_ack_are_replayed_into_the_slot() {
        let r = fifos("tcp-test");
        let (rx, tx) = slot(&r);
        let now = Instant::now();
        let mut t = Tcb::accept(5000, &seg(100, 0, SYN, &[]), L, now);
        t.output(0, 4096, now, |_| true);
        let ack = seg(101, 5001, ACK | PSH | FIN, b"hello");
        // No slot yet: nothing taken, the session layer is asked to hand it in again.
        let e = t.input(&ack, None, None, now);
        assert!(e.accepted && e.replay);
        assert_eq!(t.rcv_nxt, 101);
        // With the slot it has after the accept: data and FIN taken, nothing retransmitted.
        let e = t.input(&ack, Some(&rx), Some(&tx), now);
        assert!(e.notify && !e.replay && !e.accepted);
        assert_eq!(t.rcv_nxt, 107);
        assert_eq!(t.state, State::CloseWait);
        let mut got = [0u8; 16];
        let n = rx.pop_bytes(&mut got);
        assert_eq!(&got[..n], b"hello");
        assert_eq!(t.stats.fast_retrans, 0);
    }

    #[test]
    fn held_segments_drain_across_the_wrap_of_sequence_space() {
        let r = fifos("tcp-test");
        let (rx, _tx) = slot(&r);
        let now = Instant::now();
        // The peer's first data byte is 0xffff_ff00: 0x180 bytes end past 2^32.
        let mut t = Tcb::accept(5000, &seg(0xffff_feff, 0, SYN, &[]), L, now);
        t.output(0, 4096, now, |_| true);
        t.input(&seg(0xffff_ff00, 5001, ACK, &[]), Some(&rx), None, now);
        assert_eq!(t.state, State::Established);
        let data: Vec<u8> = (0..0x180u32).map(|i| i as u8 ^ 0x5a).collect();
        // Held out of order: [0xffff_ff80, 0) and [0, 0x80) — raw keys out of sequence order.
        t.input(&seg(0, 5001, ACK, &data[0x100..]), Some(&rx), None, now);
        t.input(
            &seg(0xffff_ff80, 5001, ACK, &data[0x80..0x100]),
            Some(&rx),
            None,
            now,
        );
        assert!(rx.is_empty());
        // The hole fills: everything drains in order.
        t.input(
            &seg(0xffff_ff00, 5001, ACK, &data[..0x80]),
            Some(&rx),
            None,
            now,
        );
        assert_eq!(t.rcv_nxt, 0x80);
        let mut got = vec![0u8; 0x200];
        let n = rx.pop_bytes(&mut got);
        assert_eq!(&got[..n], &data[..]);
    }

    #[test]
    fn out_of_order_ranges_wait_in_the_fifo_and_merge() {
        let r = fifos("tcp-ooo");
        let (rx, _tx) = slot(&r);
        let now = Instant::now();
        let mut t = Tcb::accept(5000, &seg(99, 0, SYN, &[]), L, now);
        t.output(0, 4096, now, |_| true);
        t.input(&seg(100, 5001, ACK, &[]), Some(&rx), None, now);
        let data: Vec<u8> = (0..2000u32).map(|i| (i * 7 + i / 256) as u8).collect();
        let put = |t: &mut Tcb, a: usize, b: usize| {
            t.input(
                &seg(100 + a as u32, 5001, ACK, &data[a..b]),
                Some(&rx),
                None,
                now,
            );
        };
        put(&mut t, 900, 1000);
        put(&mut t, 700, 800);
        put(&mut t, 500, 600);
        put(&mut t, 800, 900); // joins 700..1000
        assert_eq!(t.ooo.as_slice(), [(600, 700), (800, 1100)]);
        put(&mut t, 0, 100);
        assert_eq!(rx.used(), Some(100), "only in-order bytes are published");
        put(&mut t, 100, 700); // overlaps the held 500..600
        assert_eq!((t.rcv_nxt, t.ooo.n), (100 + 1000, 0));
        // Nine separate holes: the ninth range has no slot and is not kept.
        for k in 0..9 {
            let a = 1100 + 100 * k;
            put(&mut t, a, a + 50);
        }
        assert_eq!((t.ooo.n, t.stats.ooo_dropped), (8, 1));
        let mut got = vec![0u8; 4096];
        let n = rx.pop_bytes(&mut got);
        assert_eq!(&got[..n], &data[..1000]);
    }

    #[test]
    fn window_scaling_and_timestamps_are_negotiated_and_used() {
        let now = Instant::now();
        let big = Local {
            wscale: wscale_for(1 << 20),
            ..L
        };
        assert_eq!(big.wscale, 5);
        // The peer offers both: our SYN-ACK carries both, the SYN-ACK's window unscaled.
        let syn = Seg {
            wscale: Some(7),
            ts: Some((1000, 0)),
            mss: Some(1460),
            ..seg(100, 0, SYN, &[])
        };
        let mut t = Tcb::accept(5000, &syn, big, now);
        let mut out = vec![];
        t.output(0, 1 << 20, now, |o| {
            out.push(o);
            true
        });
        assert_eq!(out[0].wscale, Some(5));
        assert_eq!(out[0].wnd, 65535);
        assert_eq!(out[0].ts.map(|x| x.1), Some(1000));
        assert_eq!(
            t.mss,
            1460 - 12,
            "the timestamp option comes off every segment"
        );
        // The handshake's ACK: its window is scaled by the peer's shift.
        let ack = Seg {
            wnd: 100,
            ts: Some((1001, out[0].ts.unwrap().0)),
            ..seg(101, 5001, ACK, &[])
        };
        t.input(&ack, None, None, now);
        assert_eq!(t.state, State::Established);
        assert_eq!(t.snd_wnd, 100 << 7);
        // Our window: a 1 MiB FIFO advertised through the shift.
        out.clear();
        t.need_ack = true;
        t.output(0, 1 << 20, now, |o| {
            out.push(o);
            true
        });
        assert_eq!(out[0].wnd as u32, (1 << 20) >> 5);
        assert_eq!(t.rcv_adv.wrapping_sub(t.rcv_nxt), 1 << 20);
        assert_eq!(
            out[0].ts.map(|x| x.1),
            Some(1001),
            "echoes the latest TSval"
        );
        // PAWS: an older timestamp is a duplicate, acknowledged and dropped.
        let old = Seg {
            ts: Some((900, 0)),
            ..seg(101, 5001, ACK, b"old")
        };
        let e = t.input(&old, None, None, now);
        assert!(e.output && !e.notify);
        assert_eq!((t.stats.paws, t.rcv_nxt), (1, 101));
    }

    #[test]
    fn no_scaling_or_timestamps_unless_both_offer() {
        let now = Instant::now();
        let big = Local {
            mss: MSS6,
            wscale: 5,
            ..L
        };
        let mut t = Tcb::accept(5000, &seg(100, 0, SYN, &[]), big, now);
        let mut out = vec![];
        t.output(0, 1 << 20, now, |o| {
            out.push(o);
            true
        });
        assert_eq!(
            (out[0].wscale, out[0].ts, out[0].mss),
            (None, None, Some(MSS6))
        );
        t.input(&seg(101, 5001, ACK, &[]), None, None, now);
        assert_eq!(t.snd_wnd, 65535);
        out.clear();
        t.need_ack = true;
        t.output(0, 1 << 20, now, |o| {
            out.push(o);
            true
        });
        assert_eq!((out[0].wnd, out[0].ts), (65535, None));
        // An active open offers both; a SYN-ACK without them turns them off.
        let mut c = Tcb::connect(7, big, now);
        out.clear();
        c.output(0, 1 << 20, now, |o| {
            out.push(o);
            true
        });
        assert_eq!(out[0].wscale, Some(5));
        assert!(out[0].ts.is_some());
        c.input(&seg(300, 8, SYN | ACK, &[]), None, None, now);
        assert_eq!(c.state, State::Established);
        assert!(!c.ws_ok && !c.ts_ok && c.rcv_shift == 0);
    }

    #[test]
    fn rtt_and_rto_follow_rfc6298() {
        let now = Instant::now();
        let mut t = Tcb::connect(1, L, now);
        t.rtt_sample(Duration::from_millis(100));
        assert_eq!(t.srtt, Some(Duration::from_millis(100)));
        assert_eq!(t.rto, Duration::from_millis(300));
        t.rtt_sample(Duration::from_millis(100));
        // rttvar 3/4 × 50 = 37.5 ms: rto 100 + 150 = 250 ms.
        assert_eq!(t.rto, Duration::from_micros(250_000));
    }

    /// A SACK-permitted passive open with MSS 1000, established, FIFOs of 16 KiB.
    fn sack_conn<'a>(local: Local, rx: &Fifo<'a>, tx: &Fifo<'a>, now: Instant) -> Tcb {
        let syn = Seg {
            sack_ok: true,
            mss: Some(1000),
            ..seg(99, 0, SYN, &[])
        };
        let mut t = Tcb::accept(5000, &syn, local, now);
        let mut out = vec![];
        t.output(0, 16384, now, |o| {
            out.push(o);
            true
        });
        assert!(out[0].sack_ok, "SACK permitted is offered back");
        t.input(&seg(100, 5001, ACK, &[]), Some(rx), Some(tx), now);
        assert_eq!((t.state, t.sack_ok), (State::Established, true));
        t
    }

    /// [`sack_conn`] with `n` bytes queued in its tx FIFO, and what its first output sent.
    fn queued<'a>(
        local: Local,
        (rx, tx): (&Fifo<'a>, &Fifo<'a>),
        n: u32,
        now: Instant,
    ) -> (Tcb, Vec<Out>) {
        let mut t = sack_conn(local, rx, tx, now);
        let data: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        assert_eq!(tx.push_bytes(&data), n as usize);
        let mut out = vec![];
        t.output(n, 16384, now, |o| {
            out.push(o);
            true
        });
        (t, out)
    }

    fn sack_bytes(blocks: &[(u32, u32)]) -> Vec<u8> {
        blocks
            .iter()
            .flat_map(|&(a, b)| a.to_be_bytes().into_iter().chain(b.to_be_bytes()))
            .collect()
    }

    #[test]
    fn sack_blocks_report_the_held_ranges_latest_first() {
        let r = fifos("tcp-sack-rx");
        let (rx, tx) = slot(&r);
        let now = Instant::now();
        let mut t = sack_conn(L, &rx, &tx, now);
        let data = [7u8; 100];
        for a in [300u32, 600, 450] {
            t.input(&seg(100 + a, 5001, ACK, &data), Some(&rx), Some(&tx), now);
        }
        let mut out = vec![];
        t.output(0, rx.free_bytes(), now, |o| {
            out.push(o);
            true
        });
        assert_eq!(
            out.len(),
            1,
            "one duplicate ACK for the three held segments"
        );
        let o = out[0];
        assert_eq!(o.ack, 100);
        // The latest segment's range first, then the others in order.
        assert_eq!(
            o.sack[..o.sack_n as usize],
            [(550, 650), (400, 500), (700, 800)]
        );
        // Joining two ranges: the merged one leads.
        t.input(&seg(650, 5001, ACK, &data[..50]), Some(&rx), Some(&tx), now);
        out.clear();
        t.output(0, rx.free_bytes(), now, |o| {
            out.push(o);
            true
        });
        assert_eq!(
            out[0].sack[..out[0].sack_n as usize],
            [(550, 800), (400, 500)]
        );
        assert_eq!(t.stats.sack_acks, 2);
    }

    /// A GRO aggregate (the kernel's veth, af_packet's vnet header) is one segment of
    /// many MSS: taken whole, acknowledged at once (more than two MSS unacknowledged).
    #[test]
    fn an_aggregate_larger_than_the_mss_is_one_segment() {
        let (r, now) = (fifos("tcp-gro-rx"), Instant::now());
        let (rx, tx) = slot(&r);
        let delack = Duration::from_millis(40);
        let mut t = sack_conn(Local { delack, ..L }, &rx, &tx, now);
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 253) as u8).collect();
        let e = t.input(&seg(100, 5001, ACK | PSH, &data), Some(&rx), Some(&tx), now);
        assert!(e.notify && e.output);
        assert_eq!(t.rcv_nxt, 10_100);
        let mut got = vec![0u8; 10_000];
        assert_eq!(rx.peek_at(0, &mut got), 10_000);
        assert_eq!(got, data);
        let mut acks = vec![];
        t.output(0, rx.free_bytes(), now, |o| {
            acks.push((o.ack, o.len));
            true
        });
        assert_eq!(acks, [(10_100, 0)]);
    }

    #[test]
    fn tso_sends_one_aggregate_and_resends_single_segments_of_it() {
        let r = fifos("tcp-tso-tx");
        let (rx, tx) = slot(&r);
        let now = Instant::now();
        let (mut t, mut out) = queued(Local { tso: TSO_MAX, ..L }, (&rx, &tx), 12_500, now);
        let sent: Vec<_> = out.iter().map(|o| (o.seq, o.off, o.len, o.gso)).collect();
        assert_eq!(
            sent,
            [(5001, 0, 10_000, 1000)],
            "the initial window in one aggregate of 1000-byte segments"
        );
        // Segments 0 and 4 of the aggregate lost: each is resent alone, then new data
        // as the pipe allows.
        let blocks = sack_bytes(&[(10_001, 15_001), (6001, 9001)]);
        let dup = Seg {
            sack: &blocks,
            ..seg(100, 5001, ACK, &[])
        };
        t.input(&dup, Some(&rx), Some(&tx), now);
        assert!(t.recovery.is_some());
        out.clear();
        t.output(12_500, 16384, now, |o| {
            out.push(o);
            true
        });
        let sent: Vec<_> = out.iter().map(|o| (o.seq, o.off, o.len, o.gso)).collect();
        assert_eq!(
            sent,
            [
                (5001, 0, 1000, 0),
                (9001, 4000, 1000, 0),
                (15_001, 10_000, 2500, 1000)
            ],
            "the holes alone, then the rest of the data in one aggregate as the pipe allows"
        );
        t.input(&seg(100, 15_001, ACK, &[]), Some(&rx), Some(&tx), now);
        assert!(t.recovery.is_none());
        // A timeout resends one segment of the last aggregate: the window drops to one MSS.
        let e = t.timer(now + Duration::from_secs(2));
        assert!(e.output);
        out.clear();
        t.output(2500, 16384, now + Duration::from_secs(2), |o| {
            out.push(o);
            true
        });
        let sent: Vec<_> = out.iter().map(|o| (o.seq, o.off, o.len, o.gso)).collect();
        assert_eq!(sent, [(15_001, 0, 1000, 0)]);
    }

    #[test]
    fn a_tso_aggregate_without_buffers_goes_out_as_single_segments() {
        let r = fifos("tcp-tso-nobuf");
        let (rx, tx) = slot(&r);
        let now = Instant::now();
        let mut t = sack_conn(Local { tso: TSO_MAX, ..L }, &rx, &tx, now);
        let data: Vec<u8> = (0..4500u32).map(|i| (i % 251) as u8).collect();
        assert_eq!(tx.push_bytes(&data), 4500);
        // The emitter refuses every aggregate (no buffers for its chain), takes single
        // segments.
        let mut out = vec![];
        let mut refused = 0;
        t.output(4500, 16384, now, |o| {
            if o.gso != 0 {
                refused += 1;
                return false;
            }
            out.push(o);
            true
        });
        let sent: Vec<_> = out.iter().map(|o| (o.seq, o.off, o.len)).collect();
        assert_eq!(refused, 1, "one aggregate tried, then single segments");
        assert_eq!(
            sent,
            [
                (5001, 0, 1000),
                (6001, 1000, 1000),
                (7001, 2000, 1000),
                (8001, 3000, 1000),
                (9001, 4000, 500)
            ],
            "every byte sent, none held back for a retry"
        );
        assert!(out[4].flags.intersects(PSH) && !out[0].flags.intersects(PSH));
        assert_eq!(t.stats.tso_fallbacks, 1);
        // The next call tries an aggregate again.
        t.input(&seg(100, 9501, ACK, &[]), Some(&rx), Some(&tx), now);
        assert_eq!(tx.push_bytes(&data[..3000]), 3000);
        out.clear();
        t.output(3000, 16384, now, |o| {
            out.push(o);
            true
        });
        let sent: Vec<_> = out.iter().map(|o| (o.seq, o.len, o.gso)).collect();
        assert_eq!(sent, [(9501, 3000, 1000)]);
        // A single segment the emitter refuses too stops the call (retried later).
        let mut t = sack_conn(Local { tso: TSO_MAX, ..L }, &rx, &tx, now);
        let mut tries = 0;
        let n = t.output(3000, 16384, now, |_| {
            tries += 1;
            false
        });
        assert_eq!((n, tries), (0, 2), "the aggregate, then its first segment");
    }

    #[test]
    fn sack_recovery_retransmits_only_the_holes() {
        let r = fifos("tcp-sack-tx");
        let (rx, tx) = slot(&r);
        let now = Instant::now();
        let (mut t, mut out) = queued(L, (&rx, &tx), 10_000, now);
        assert_eq!(out.len(), 10, "the initial window: ten segments of 1000");
        // Segments 0 and 4 lost: the peer SACKs the rest.
        let blocks = sack_bytes(&[(10_001, 15_001), (6001, 9001)]);
        let dup = Seg {
            sack: &blocks,
            ..seg(100, 5001, ACK, &[])
        };
        let e = t.input(&dup, Some(&rx), Some(&tx), now);
        assert!(
            e.output && t.recovery.is_some(),
            "8 segments SACKed above the hole"
        );
        out.clear();
        t.output(10_000, 16384, now, |o| {
            out.push(o);
            true
        });
        let sent: Vec<(u32, u32, u32)> = out.iter().map(|o| (o.seq, o.off, o.len)).collect();
        assert_eq!(sent, [(5001, 0, 1000), (9001, 4000, 1000)]);
        // More duplicates send nothing new.
        t.input(&dup, Some(&rx), Some(&tx), now);
        assert_eq!(t.output(10_000, 16384, now, |_| true), 0);
        // A partial ACK, then the whole: recovery ends.
        let rest = sack_bytes(&[(10_001, 15_001)]);
        let partial = Seg {
            sack: &rest,
            ..seg(100, 9001, ACK, &[])
        };
        t.input(&partial, Some(&rx), Some(&tx), now);
        assert!(t.recovery.is_some());
        assert_eq!(t.output(6000, 16384, now, |_| true), 0, "9001.. was resent");
        t.input(&seg(100, 15_001, ACK, &[]), Some(&rx), Some(&tx), now);
        assert!(t.recovery.is_none() && tx.is_empty());
        assert_eq!(
            (
                t.stats.sack_recoveries,
                t.stats.sack_retrans,
                t.stats.rto_retrans
            ),
            (1, 2, 0)
        );
    }

    #[test]
    fn delayed_ack_waits_for_two_segments_or_the_timer() {
        let r = fifos("tcp-delack");
        let (rx, tx) = slot(&r);
        let now = Instant::now();
        let local = Local {
            delack: Duration::from_millis(40),
            ..L
        };
        let mut t = sack_conn(local, &rx, &tx, now);
        let d = [1u8; 1000];
        let put = |t: &mut Tcb, seq: u32, at: Instant| {
            t.input(&seg(seq, 5001, ACK, &d), Some(&rx), Some(&tx), at);
            let mut n = vec![];
            t.output(0, 16384, at, |o| {
                n.push(o.ack);
                true
            });
            n
        };
        let acks: Vec<_> = [100, 1100, 2100].map(|q| put(&mut t, q, now)).into();
        assert_eq!(acks, [vec![], vec![2100], vec![]], "every second segment");
        assert_eq!(t.next_deadline(), Some(now + Duration::from_millis(40)));
        let e = t.timer(now + Duration::from_millis(40));
        assert!(e.output);
        let mut out = vec![];
        t.output(0, 16384, now, |o| {
            out.push(o.ack);
            true
        });
        assert_eq!(out, [3100]);
        assert_eq!((t.stats.acks_delayed, t.stats.delack_timeouts), (2, 1));
        // Out of order: acknowledged at once, as is the segment that fills the hole.
        let acks: Vec<_> = [4100, 3100].map(|q| put(&mut t, q, now)).into();
        assert_eq!(acks, [vec![3100], vec![5100]]);
    }

    #[test]
    fn keepalive_probes_then_resets() {
        let now = Instant::now();
        let s = Duration::from_secs;
        let local = Local {
            keepalive: Some(Keepalive {
                idle: s(10),
                interval: s(1),
                probes: 2,
            }),
            ..L
        };
        let mut t = Tcb::accept(5000, &seg(99, 0, SYN, &[]), local, now);
        t.output(0, 4096, now, |_| true);
        t.input(&seg(100, 5001, ACK, &[]), None, None, now);
        assert_eq!(t.next_deadline(), Some(now + s(10)));
        let probe = |t: &mut Tcb, at: Instant| {
            let e = t.timer(at);
            let mut out = vec![];
            t.output(0, 4096, at, |o| {
                out.push((o.seq, o.len));
                true
            });
            (e, out)
        };
        let (e, out) = probe(&mut t, now + s(10));
        assert!(e.output);
        assert_eq!(out, [(5000, 0)], "one below snd_una");
        // The peer answers: quiet again for the idle time.
        t.input(&seg(100, 5001, ACK, &[]), None, None, now + s(10));
        let (_, out) = probe(&mut t, now + s(11));
        assert!(out.is_empty());
        assert_eq!(t.next_deadline(), Some(now + s(20)));
        // Unanswered: two probes, then the reset.
        assert_eq!(probe(&mut t, now + s(20)).1.len(), 1);
        assert_eq!(probe(&mut t, now + s(21)).1.len(), 1);
        let e = t.timer(now + s(22));
        assert!(e.free && e.reset && e.keepalive_dead && e.rst.is_some());
        assert_eq!(t.stats.keepalive_probes, 3);
    }

    #[test]
    fn syn_sent_refused_by_rst() {
        let now = Instant::now();
        let mut t = Tcb::connect(10, L, now);
        t.output(0, 65536, now, |_| true);
        let e = t.input(&seg(0, 11, RST | ACK, &[]), None, None, now);
        assert!(e.reset && e.free);
    }

    #[test]
    fn syn_retries_give_up() {
        let mut now = Instant::now();
        let mut t = Tcb::connect(10, L, now);
        t.output(0, 65536, now, |_| true);
        let mut gave_up = false;
        for _ in 0..10 {
            now += Duration::from_secs(120);
            let e = t.timer(now);
            if e.free {
                gave_up = true;
                break;
            }
            t.output(0, 65536, now, |_| true);
        }
        assert!(gave_up);
    }
}
