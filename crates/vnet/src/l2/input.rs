//! `l2-input` (internal): frames of L2 interfaces (set by `ethernet-input`), a frame at a
//! time in three passes: the frame's distinct keys and their home buckets
//! (`bihash::Snapshot::home_only`), the L2 FIB lookups of those keys in a loop of their own
//! (`Snapshot::get_many`, each bucket prefetched [`BUCKETS_AHEAD`] keys ahead), then the
//! decisions; a destination (source) equal to the packet before's is neither hashed nor
//! looked up again.
//! - uses: `l2.bd_index` (0: cross-connect, `tx_if` = peer), `rx_if`, the Ethernet header.
//! - sets: `tx_if` (known destination or each flood member); allocates copies for floods;
//!   for frames to the bridge's BVI: `rx_if` = the BVI and the `L2_TO_BVI` flag.
//! - next: `interface-output` (0), or the first feature enabled on the tx interface's
//!   `l2-output` arc (flooded copies included); `error-drop` (1); `ethernet-input` (2) for
//!   frames to the BVI (routed from there: the bridge's L3 interface; not an output).
//! - counters: `xconnect`, `forwarded`, `flooded` (info), `filtered` (destination on the rx
//!   interface), `split_horizon` (destination in the rx interface's split-horizon group; floods
//!   skip those members), `uu_dropped` (unknown unicast, uu-flood off), `flood_dropped`
//!   (broadcast or multicast, flood off), `no_member` (nothing to flood to, or a bridge
//!   domain deleted under traffic), `no_buffer` (copy for flooding failed), `learn_events`
//!   (info), `runt` (shorter than an Ethernet header: never from `ethernet-input`, counted
//!   rather than trusted).

use super::{BdCfg, L2Shared, STATIC};
use sluice_buffer::{BufIdx, Buffer};
use sluice_graph::{Cx, FrameScratch, Next, NodeFn, PREFETCH_AHEAD};
use sluice_infra::bihash::{Home, Snapshot};
use std::any::Any;
use std::sync::Arc;

/// What `l2-input` reads per packet of a bridge domain's settings (a copy of its [`BdCfg`]'s
/// flags, kept next to it).
#[derive(Copy, Clone, Debug, Default)]
pub(super) struct BdFlags {
    /// The bridge domain exists.
    on: bool,
    learn: bool,
    forward: bool,
    flood: bool,
    uu_flood: bool,
    /// Some member is in a split-horizon group.
    shg: bool,
    /// The BVI, `u32::MAX` for none.
    bvi: u32,
}

impl BdFlags {
    pub(super) fn of(c: Option<&BdCfg>) -> BdFlags {
        match c {
            None => BdFlags::default(),
            Some(c) => BdFlags {
                on: true,
                learn: c.learn,
                forward: c.forward,
                flood: c.flood,
                uu_flood: c.uu_flood,
                shg: c.shg.iter().any(|&g| g != 0),
                bvi: c.bvi.unwrap_or(u32::MAX),
            },
        }
    }
}

/// `l2-input`'s per-packet plan from its first pass: which FIB lookups the packet needs.
const LOOK_DST: u8 = 1;
const LOOK_SRC: u8 = 2;
/// Finished in the first pass.
const CROSS_CONNECTED: u8 = 4;
/// The destination (source) key differs from the packet before's: it is the next of the
/// frame's distinct destination (source) keys (`State::keys`), looked up in pass 2.
const NEW_DST: u8 = 8;
const NEW_SRC: u8 = 16;
/// How many keys ahead of its lookups pass 2 (`Snapshot::get_many`) prefetches buckets
/// (pass 1 prefetches the first ones): enough misses in flight to hide the memory's
/// latency, few enough that the buckets are still in L1 when read.
const BUCKETS_AHEAD: usize = sluice_infra::bihash::BATCH;

/// `l2-input` instance.
pub struct L2Input {
    /// The L2 FIB and the learning queue. `frame` borrows it beside `st` (disjoint fields)
    /// rather than cloning the `Arc`: a clone per frame would write the refcount's cache
    /// line, which every worker's `l2-input` shares.
    shared: Arc<L2Shared>,
    pub(super) st: State,
}

/// `l2-input`'s per-thread state: everything but the shared FIB.
pub(super) struct State {
    pub(super) bds: Vec<Option<BdCfg>>,
    /// `bds`' flags, same index.
    pub(super) flags: Vec<BdFlags>,
    recent: [(u64, u32, u32); 64],
    features: Arc<crate::feature::FeatureNext>,
    slot: usize,
    // Per-frame: whether any interface has `l2-output` features, and the last tx interface
    // with its `l2-output` arc next.
    out_any: bool,
    out: Option<(u32, Next)>,
    /// Learning events of the current frame (capacity one frame: never reallocates).
    pending: Vec<(u64, u32)>,
    /// Per frame, by packet: its lookups (`LOOK_*`, `NEW_*`).
    plan: [u8; sluice_graph::FRAME_SIZE],
    /// Per frame, the distinct keys in packet order (one for each run of a MAC), their
    /// home buckets in the FIB snapshot of the frame and what the FIB holds for them: the
    /// destination keys from 0, the source keys from `FRAME_SIZE` in pass 1, moved down
    /// to follow the destination keys for pass 2, which looks them all up in one loop (its
    /// look-ahead runs on from the destination keys into the source keys).
    keys: [u64; 2 * sluice_graph::FRAME_SIZE],
    homes: [Home; 2 * sluice_graph::FRAME_SIZE],
    vals: [Option<u64>; 2 * sluice_graph::FRAME_SIZE],
    /// Per frame: packets forwarded to a known MAC (counted once per frame).
    forwarded: u64,
}

impl L2Input {
    pub(super) fn new(
        shared: Arc<L2Shared>,
        features: Arc<crate::feature::FeatureNext>,
        slot: usize,
    ) -> L2Input {
        const F: usize = sluice_graph::FRAME_SIZE;
        L2Input {
            shared,
            st: State {
                bds: Vec::new(),
                flags: Vec::new(),
                recent: [(0, 0, 0); 64],
                features,
                slot,
                out_any: false,
                out: None,
                pending: Vec::with_capacity(F),
                plan: [0; F],
                keys: [0; 2 * F],
                homes: [Home::default(); 2 * F],
                vals: [None; 2 * F],
                forwarded: 0,
            },
        }
    }
}

impl State {
    /// The flags of bridge domain `bd` (not 0), through `last` (the last bridge domain
    /// looked at and its flags: a frame usually comes from one interface, so one bridge
    /// domain).
    #[inline(always)]
    fn flags_of(flags: &[BdFlags], last: &mut (u16, BdFlags), bd: u16) -> BdFlags {
        if last.0 != bd {
            *last = (bd, flags.get(bd as usize).copied().unwrap_or_default());
        }
        last.1
    }

    /// The arc towards `interface-output` for a frame sent on `tx` (through the features
    /// enabled on its `l2-output` arc).
    #[inline(always)]
    fn output(&mut self, tx: u32) -> Next {
        if !self.out_any {
            return L2Next::Output.next();
        }
        match self.out {
            Some((i, n)) if i == tx => n,
            _ => {
                let n = self.features.next(self.slot, tx, L2Next::Output.next());
                self.out = Some((tx, n));
                n
            }
        }
    }
}

sluice_graph::arcs! {
    /// `l2-input`'s next arcs.
    pub enum L2Next {
        /// To `interface-output`.
        Output => crate::output::NAME,
        /// To `error-drop`.
        Drop => "error-drop",
        /// To `ethernet-input`.
        EthernetInput => crate::ethernet::ETHERNET_INPUT,
    }
}

sluice_graph::counters! {
    /// `l2-input`'s counters.
    pub enum L2Counter {
        /// L2 cross-connect frames.
        Xconnect => info("xconnect", "L2 cross-connect frames"),
        /// L2 frames forwarded to a learned MAC.
        Forwarded => info("forwarded", "L2 frames forwarded to a learned MAC"),
        /// L2 frames flooded.
        Flooded => info("flooded", "L2 frames flooded"),
        /// L2 destination on the receiving interface.
        Filtered => error("filtered", "L2 destination on the receiving interface"),
        /// L2 unknown unicast dropped (uu-flood off).
        UuDropped => error("uu_dropped", "L2 unknown unicast dropped (uu-flood off)"),
        /// L2 broadcast or multicast dropped (flood off).
        FloodDropped => error("flood_dropped", "L2 broadcast or multicast dropped (flood off)"),
        /// L2 no bridge member to send to.
        NoMember => error("no_member", "L2 no bridge member to send to"),
        /// L2 flood copy: no buffer.
        NoBuffer => error("no_buffer", "L2 flood copy: no buffer"),
        /// L2 MAC learning events.
        LearnEvents => info("learn_events", "L2 MAC learning events"),
        /// L2 destination in the source's split-horizon group.
        SplitHorizon => error("split_horizon", "L2 destination in the source's split-horizon group"),
        /// L2 frame shorter than an Ethernet header.
        Runt => error("runt", "L2 frame shorter than an Ethernet header"),
    }
}

/// Appends key `k` to a frame's distinct destination (`at` 0) or source (`at`
/// `FRAME_SIZE`) keys in `keys`, `homes` (`i` of them so far): its home bucket,
/// prefetched for the first [`BUCKETS_AHEAD`] of each kind (`Snapshot::get_many`
/// prefetches the others).
#[inline(always)]
fn push_key(fib: &Snapshot<'_>, keys: &mut [u64], homes: &mut [Home], at: usize, i: usize, k: u64) {
    let h = fib.home_only(k);
    if i < BUCKETS_AHEAD {
        fib.prefetch(h);
    }
    if let (Some(kk), Some(hh)) = (keys.get_mut(at + i), homes.get_mut(at + i)) {
        (*kk, *hh) = (k, h);
    }
}

/// The L2 FIB key of the 6-byte MAC at `h[at..at + 6]` in bridge domain `bd`: one 8-byte
/// load (the two bytes after the MAC shifted out) instead of six byte moves.
#[inline(always)]
fn key_at(h: &[u8; 14], at: usize, bd: u16) -> u64 {
    let w = u64::from_be_bytes(*h[at..].first_chunk::<8>().unwrap_or(&[0; 8]));
    w >> 16 | (bd as u64) << 48
}

impl NodeFn for L2Input {
    /// Three passes over the frame, the L2 FIB lookups split from the parsing and the
    /// decisions (VPP's l2-input hashes and prefetches ahead the same way): (1) every
    /// packet's bridge domain and MACs; cross-connected packets are finished here; a
    /// bridged one's destination key (and its source key when the bridge domain learns),
    /// when it differs from the packet before's, is added to the frame's distinct keys and
    /// hashed to its home bucket; (2) the lookups of the distinct keys, a tight loop that
    /// finds its buckets in cache (prefetched [`BUCKETS_AHEAD`] keys ahead: with a FIB
    /// bigger than the caches, 16 misses overlap) and keeps few values live; (3) each
    /// bridged packet's decision.
    fn frame(&mut self, cx: &mut Cx, frame: &[BufIdx]) {
        const F: usize = sluice_graph::FRAME_SIZE;
        let L2Input { shared, st } = self;
        let (arena, frame, mut s) = cx.resolve_frame(frame);
        let n = frame.len();
        let FrameScratch { addrs, nexts } = &mut *s;
        let addrs = &*addrs;
        st.out_any = st.features.any(st.slot);
        st.out = None;
        // One array for the frame: the homes of pass 1 are its buckets.
        // SAFETY: `fib` and every `Home` from it live in this call only, and a worker reaches
        // a quiescent point only between frames (`Epochs::quiesce` at the top of the
        // dispatcher's `run_once`), never inside a node's `frame`: the array stays allocated
        // while they are in use, even if the main thread replaces it meanwhile.
        let fib = unsafe { shared.fib.snapshot() };
        let mut last = (0u16, BdFlags::default());
        let (mut xc, mut bridged, mut learns) = (0u64, false, false);
        // The last destination and source keys: a packet to (from) the MAC of the packet
        // before is not hashed again, nor looked up again in pass 2 (VPP's l2-fwd and
        // l2-learn keep such a cached key). 0 is never a bridged packet's key (its bridge
        // domain would be 0). `nd` (`ns`): the frame's distinct destination (source) keys.
        let (mut dk, mut sk, mut nd, mut ns) = (0u64, 0u64, 0usize, 0usize);
        for (j, (&bi, next)) in frame.iter().zip(nexts.iter_mut()).enumerate() {
            addrs.prefetch(j + PREFETCH_AHEAD, true);
            // SAFETY: the dispatcher hands this node exclusive ownership of every index in
            // `frame`, resolved into `addrs` above; the view lives for this iteration only.
            let v = unsafe { arena.buffer_at(addrs, j, bi) };
            let bd = v.hdr.l2.bd_index;
            if bd == 0 {
                xc += 1;
                st.plan[j] = CROSS_CONNECTED;
                *next = st.output(v.hdr.tx_if).0;
                continue;
            }
            bridged = true;
            let mut p = 0;
            let f = State::flags_of(&st.flags, &mut last, bd);
            if let (true, Some(h)) = (f.on, v.head::<14>()) {
                if h[0] & 1 == 0 {
                    let k = key_at(h, 0, bd);
                    if k != dk {
                        dk = k;
                        push_key(&fib, &mut st.keys, &mut st.homes, 0, nd, k);
                        nd += 1;
                        p |= NEW_DST;
                    }
                    p |= LOOK_DST;
                }
                if f.learn && h[6] & 1 == 0 {
                    let k = key_at(h, 6, bd);
                    if k != sk {
                        sk = k;
                        push_key(&fib, &mut st.keys, &mut st.homes, F, ns, k);
                        ns += 1;
                        p |= NEW_SRC;
                    }
                    p |= LOOK_SRC;
                    learns = true;
                }
            }
            st.plan[j] = p;
        }
        if xc != 0 {
            cx.count(L2Counter::Xconnect, xc);
        }
        if bridged {
            let now = if learns { cx.now_secs() as u32 } else { 0 };
            // The source keys follow the destination keys: one loop of lookups, whose
            // look-ahead prefetches the first source keys' buckets again (pass 1's
            // prefetches of them may be gone from L1 after the destination keys' lookups).
            if ns != 0 && nd != F {
                st.keys.copy_within(F..F + ns, nd);
                st.homes.copy_within(F..F + ns, nd);
            }
            let m = nd + ns;
            fib.get_many(&st.keys[..m], &st.homes[..m], &mut st.vals[..m]);
            // The current destination and source keys' places in the distinct keys, and what
            // the FIB held for them.
            let (mut di, mut dv, mut si, mut sv) = (0usize, None, nd, None);
            let mut sk = 0;
            for (j, (&bi, next)) in frame.iter().zip(nexts.iter_mut()).enumerate() {
                let p = st.plan[j];
                if p == CROSS_CONNECTED {
                    continue;
                }
                // SAFETY: as above.
                let mut v = unsafe { arena.buffer_at(addrs, j, bi) };
                let mut dst = None;
                if p & NEW_DST != 0 {
                    dv = st.vals.get(di).copied().flatten();
                    di += 1;
                }
                if p & LOOK_DST != 0 {
                    dst = Some(dv);
                }
                if p & NEW_SRC != 0 {
                    sk = st.keys.get(si).copied().unwrap_or(0);
                    sv = st.vals.get(si).copied().flatten();
                    si += 1;
                }
                if p & LOOK_SRC != 0 {
                    st.learn(cx, &v, sk, sv, now);
                }
                let f = State::flags_of(&st.flags, &mut last, v.hdr.l2.bd_index);
                *next = st.bridge(cx, &mut v, f, dst).0;
            }
            if st.forwarded != 0 {
                cx.count(L2Counter::Forwarded, st.forwarded);
                st.forwarded = 0;
            }
        }
        if !st.pending.is_empty() {
            if let Ok(mut l) = shared.learned.lock() {
                let room = 65536usize.saturating_sub(l.len());
                let n = st.pending.len().min(room);
                l.extend_from_slice(&st.pending[..n]);
            }
            st.pending.clear();
        }
        cx.enqueue_to_next(frame, &s.nexts[..n]);
        cx.put_frame_scratch(s);
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

impl State {
    /// Learning: queues an event for source key `k` (FIB value `v`) of a frame received on
    /// `b`'s rx interface, unless the entry is static or fresh for that interface.
    #[inline(always)]
    fn learn(&mut self, cx: &mut Cx, b: &Buffer<'_>, k: u64, v: Option<u64>, now: u32) {
        let rx = b.hdr.rx_if;
        let stale = match v {
            None => true,
            Some(v) => {
                v & STATIC == 0
                    && ((v as u32) != rx || now.wrapping_sub((v >> 40) as u32 & 0xff_ffff) > 10)
            }
        };
        if !stale {
            return;
        }
        // At most one event per MAC and interface per second per thread.
        let slot = &mut self.recent[(k.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as usize];
        if slot.0 != k || slot.1 != rx || now != slot.2 {
            *slot = (k, rx, now);
            // Published at the end of the frame: one lock per frame, not per event.
            if self.pending.len() < sluice_graph::FRAME_SIZE {
                self.pending.push((k, rx));
            }
            cx.count(L2Counter::LearnEvents, 1);
        }
    }

    /// A bridged packet (`l2.bd_index` non-zero): forward, flood, filter or drop.
    /// `dst` is what the FIB holds for its destination when it was looked up (`None`:
    /// not looked up: broadcast/multicast, runt or unknown bridge domain).
    #[inline(always)]
    fn bridge(
        &mut self,
        cx: &mut Cx,
        b: &mut Buffer<'_>,
        f: BdFlags,
        dst: Option<Option<u64>>,
    ) -> Next {
        let bd = b.hdr.l2.bd_index;
        if !f.on {
            b.hdr.error = cx.error(L2Counter::NoMember);
            return L2Next::Drop.next();
        }
        if b.len() < 14 {
            b.hdr.error = cx.error(L2Counter::Runt);
            return L2Next::Drop.next();
        }
        let rx = b.hdr.rx_if;
        let flood = match dst {
            // Broadcast or multicast.
            None => f.flood,
            Some(Some(v)) if f.forward => {
                let tx = v as u32;
                if tx == rx {
                    b.hdr.error = cx.error(L2Counter::Filtered);
                    return L2Next::Drop.next();
                }
                if f.shg {
                    if let Some(Some(c)) = self.bds.get(bd as usize) {
                        let g = c.shg_of(rx);
                        if g != 0 && c.shg_of(tx) == g {
                            b.hdr.error = cx.error(L2Counter::SplitHorizon);
                            return L2Next::Drop.next();
                        }
                    }
                }
                self.forwarded += 1;
                if tx == f.bvi {
                    return to_bvi(b, tx);
                }
                b.hdr.tx_if = tx;
                return self.output(tx);
            }
            Some(_) => f.uu_flood,
        };
        if !flood {
            // `dst` is `None` here only for a broadcast or multicast (runts and unknown
            // bridge domains returned above).
            let why = match dst {
                None => L2Counter::FloodDropped,
                Some(_) => L2Counter::UuDropped,
            };
            b.hdr.error = cx.error(why);
            return L2Next::Drop.next();
        }
        self.flood(cx, b)
    }

    /// Floods a bridged packet: copies to every member it may go to but the last, the
    /// packet itself to the last.
    #[inline(never)]
    fn flood(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        let bd = b.hdr.l2.bd_index;
        let rx = b.hdr.rx_if;
        let Some(Some(cfg)) = self.bds.get(bd as usize) else {
            b.hdr.error = cx.error(L2Counter::NoMember);
            return L2Next::Drop.next();
        };
        let g = cfg.shg_of(rx);
        let Some(last) = (0..cfg.members.len()).rposition(|k| cfg.may_send(k, rx, g)) else {
            b.hdr.error = cx.error(L2Counter::NoMember);
            return L2Next::Drop.next();
        };
        // Copies for every member but the last; the original goes to the last one.
        for (k, &m) in cfg.members.iter().enumerate() {
            if k == last || !cfg.may_send(k, rx, g) {
                continue;
            }
            match cx.bufs().alloc_with(b.data()) {
                Some(c) => {
                    // SAFETY: freshly allocated by this node; no other view exists.
                    let mut v = unsafe { cx.buffer(c) };
                    v.hdr.tx_if = m;
                    v.hdr.rx_if = rx;
                    let next = if cfg.bvi == Some(m) {
                        to_bvi(&mut v, m)
                    } else {
                        self.features.next(self.slot, m, L2Next::Output.next())
                    };
                    cx.enqueue(next, c);
                }
                None => cx.count(L2Counter::NoBuffer, 1),
            }
        }
        cx.count(L2Counter::Flooded, 1);
        let m = cfg.members[last];
        if cfg.bvi == Some(m) {
            return to_bvi(b, m);
        }
        b.hdr.tx_if = m;
        self.features.next(self.slot, m, L2Next::Output.next())
    }
}

/// Hands a bridged frame to the BVI's L3 side (through `ethernet-input`).
#[inline(always)]
fn to_bvi(b: &mut Buffer<'_>, bvi: u32) -> Next {
    b.hdr.rx_if = bvi;
    b.hdr.flags |= sluice_buffer::flags::L2_TO_BVI;
    L2Next::EthernetInput.next()
}
