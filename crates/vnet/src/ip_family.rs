//! What IPv4 and IPv6 share above the route tables, written once: the control-plane trait
//! [`IpControl`] (implemented by `ip4::Ip4Control` and `ip6::Ip6Control`) whose provided
//! methods are the neighbour and adjacency control (neighbour, glean, local and
//! point-to-point adjacencies; neighbour add/delete, learning and aging; address removal),
//! the actions over it (static routes, neighbours, tables, interface deletion, `ping`,
//! `show ip[6] fib`, `show adj`, route dumps) and the `ip4-neighbor-process` /
//! `ip6-neighbor-process` node ([`NeighborProcess`]). The families differ only in the
//! address type, the LPM ([`Lpm`]) and the hooks [`IpControl`] names.

use crate::error::{VnetError, VnetResult};
use crate::ethernet::{eth_wide, mtu_limit};
use crate::events::EventLog;
use crate::interface::{IfAttr, SwIfIndex};
use crate::neighbor::{Aging, Entries, Learned};
use crate::own_source::OwnKeys;
use crate::routes::{no_table, Hop, Lpm, RoutePaths, Source, Vrfs};
use sluice_buffer::flags::{LOCALLY_ORIGINATED, TOTAL_LENGTH_VALID};
use sluice_buffer::{Arena, BufIdx, Buffer, BufferHeader, FrameAddrs, HeadLen};
use sluice_cli::{Args, CliError};
use sluice_fib::adj::{Adj, AdjKind, AdjRewrite, AdjTable, Adjacencies};
use sluice_fib::lb::LoadBalances;
use sluice_graph::{
    Cx, FrameScratch, Next, NodeFn, PacketNode, Suspend, Vlib, Wake, FRAME_SIZE, PREFETCH_AHEAD,
    SCRATCH_AHEAD,
};
use sluice_wire::ethernet::HEADER_LEN as ETH_HEADER_LEN;
use std::any::Any;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// `ip4-input` / `ip6-input`: a frame leaves its fast-path loop for the per-packet loop
/// (`process_one` for every packet left) once at least this many of its packets have left
/// the fast path...
pub(crate) const SLOW_SWITCH_MIN: usize = 4;
/// ...and more than one in this many of the packets so far: a packet off the fast path costs
/// ≈ 65 instructions more in the fast-path loop than in the per-packet one, a fast packet
/// ≈ 13 fewer (break-even near 16 % off the fast path; docs/benchmarking.md, round 2's
/// fourteenth step).
pub(crate) const SLOW_SWITCH_SHARE: usize = 6;

/// From packet `i` on, the packets of `frame` that `fast` takes (the fast paths of
/// `ip4-input`, `ip6-input`, `ip4-rewrite` and `ip6-rewrite`, `ethernet-input`'s runs:
/// `fast` changes a packet only when it returns `true`, and may keep state, the rewrite
/// nodes' adjacency): the index of the first it does not, or the frame's length. Headers
/// and data are prefetched [`PREFETCH_AHEAD`] on, as `PerPacket` does. Out of line, so
/// that its loop has the registers to itself (inlined in `ip4-input`'s frame loop, the FIB
/// hint and a constant were reloaded from the stack every packet).
///
/// # Safety
///
/// The caller owns every buffer of `frame` (one node's frame) and resolved `addrs` from it;
/// no other view of them is alive.
#[inline(never)]
pub(crate) unsafe fn fast_run<F: FnMut(&mut Buffer<'_>) -> bool>(
    arena: Arena<'_>,
    addrs: &FrameAddrs<{ FRAME_SIZE + SCRATCH_AHEAD }>,
    frame: &[BufIdx],
    mut i: usize,
    mut fast: F,
) -> usize {
    let n = frame.len().min(FRAME_SIZE);
    while i < n {
        // SAFETY: `i < n <= FRAME_SIZE`. Said again for the compiler: in ethernet-input's
        // runs it tested the prefetch's index against the scratch every packet (2
        // instructions).
        unsafe { core::hint::assert_unchecked(i < FRAME_SIZE) };
        addrs.prefetch(i + PREFETCH_AHEAD, true);
        // SAFETY: the caller's contract (`frame` is owned, `addrs` resolved from it); the
        // view lives only for this iteration.
        let mut b = unsafe { arena.buffer_at(addrs, i, frame[i]) };
        if !fast(&mut b) {
            break;
        }
        i += 1;
    }
    i
}

/// The frame loop of `ip4-input`, `ip6-input`, `ip4-rewrite` and `ip6-rewrite` (the
/// families differ only in `fast`): `PerPacket`'s (addresses resolved once, headers and
/// data prefetched [`PREFETCH_AHEAD`] on) with the fast path in a loop of its own
/// ([`fast_run`]) that writes no next: a frame whose packets all take it goes to `lookup`
/// (the one next of the fast path) whole ([`Cx::enqueue_all`]). Otherwise the packets
/// before the first that did not are given `lookup`, that one goes through
/// `slow.process_one` and the fast path resumes after it, until [`SLOW_SWITCH_MIN`] and
/// one in [`SLOW_SWITCH_SHARE`] have left it (then the rest of the frame goes through
/// `process_one`). With features on the arc (`features_any`), every packet goes through
/// `process_one`. The caller has called `slow.begin_frame` (it reads `features_any` after
/// it); `end_frame` is not called (these nodes have `PacketNode`'s default, nothing).
#[inline(always)]
pub(crate) fn fast_frame<S, F>(
    cx: &mut Cx,
    frame: &[BufIdx],
    slow: &mut S,
    features_any: bool,
    lookup: Next,
    mut fast: F,
) where
    S: PacketNode,
    F: FnMut(&mut Buffer<'_>) -> bool,
{
    let (arena, frame, mut s) = cx.resolve_frame(frame);
    let n = frame.len();
    let FrameScratch { addrs, nexts } = &mut *s;
    let addrs = &*addrs;
    // The per-packet loop's first packet: 0 with features on the arc.
    let mut start = 0;
    if !features_any {
        // SAFETY: this node owns `frame` (the dispatcher's contract), `addrs` was resolved
        // from it above, and no view of its buffers is alive.
        let mut i = unsafe { fast_run(arena, addrs, frame, 0, &mut fast) };
        if i == n {
            cx.enqueue_all(lookup, frame);
            cx.put_frame_scratch(s);
            return;
        }
        nexts[..i].fill(lookup.0);
        // Packets off the fast path so far: past `SLOW_SWITCH_MIN` and one in
        // `SLOW_SWITCH_SHARE`, the rest of the frame takes the per-packet loop.
        let mut off = 0;
        while i < n {
            if off >= SLOW_SWITCH_MIN && off * SLOW_SWITCH_SHARE > i {
                break;
            }
            off += 1;
            nexts[i] = {
                // SAFETY: as above; the view ends with this block, before `fast_run` makes
                // its own.
                let mut b = unsafe { arena.buffer_at(addrs, i, frame[i]) };
                slow.process_one(cx, &mut b).0
            };
            // SAFETY: as above.
            let j = unsafe { fast_run(arena, addrs, frame, i + 1, &mut fast) };
            nexts[i + 1..j].fill(lookup.0);
            i = j;
        }
        start = i;
    }
    for (k, (next, &bi)) in nexts[start..n].iter_mut().zip(&frame[start..]).enumerate() {
        let i = start + k;
        addrs.prefetch(i + PREFETCH_AHEAD, true);
        // SAFETY: as above; the view lives only for this iteration.
        let mut b = unsafe { arena.buffer_at(addrs, i, bi) };
        *next = slow.process_one(cx, &mut b).0;
    }
    cx.enqueue_to_next(frame, &s.nexts[..n]);
    cx.put_frame_scratch(s);
}

/// `ip4-lookup`'s and `ip6-lookup`'s remembered adjacency before the frame's first
/// resolution: neither an LPM value (24-bit) nor a miss (`u32::MAX`).
pub(crate) const NO_ADJ: u32 = u32::MAX - 1;

/// The arcs of `ip4-lookup` and `ip6-lookup` by adjacency kind ([`adj_arc`]).
#[derive(Copy, Clone)]
pub(crate) struct AdjArcs {
    pub rewrite: u16,
    pub local: u16,
    /// Glean and incomplete adjacencies.
    pub glean: u16,
    pub drop: u16,
}

/// The [`AdjArcs`] of a lookup node's next-arc enum `$next` (its `Rewrite`, `Local`,
/// `Glean` and `Drop` arcs).
macro_rules! adj_arcs {
    ($next:ident) => {
        AdjArcs {
            rewrite: $next::Rewrite as u16,
            local: $next::Local as u16,
            glean: $next::Glean as u16,
            drop: $next::Drop as u16,
        }
    };
}
pub(crate) use adj_arcs;

/// `ip4-lookup` / `ip6-lookup`: the arc of a packet whose adjacency `a` (stored in its
/// `adj_index`) is not known to be the remembered one: `last`'s arc when it is, else the
/// arc of its kind in `table`, which is then remembered in `last` (not a drop adjacency:
/// its packet's `error` is set to `drop_error`, and every packet of it is counted).
#[inline(always)]
pub(crate) fn adj_arc(
    table: &AdjTable,
    hdr: &mut BufferHeader,
    a: u32,
    last: &mut (u32, u16),
    arcs: AdjArcs,
    drop_error: impl FnOnce() -> u16,
) -> u16 {
    if a == last.0 {
        return last.1;
    }
    let next = match table.kind(a) {
        AdjKind::Rewrite => arcs.rewrite,
        AdjKind::Local => arcs.local,
        AdjKind::Glean | AdjKind::Incomplete => arcs.glean,
        // The lookup node's arc to the adjacency's node (`IfAttr::lookup_node4/6`).
        AdjKind::Node => table.get(a).nh as u16,
        AdjKind::Drop => {
            hdr.error = drop_error();
            return arcs.drop;
        }
    };
    *last = (a, next);
    next
}

/// The frame of a rewrite node (`ip4-rewrite`, `ip6-rewrite`): [`fast_frame`] with
/// [`FastAdj::rewrite_any`] as the fast path (the adjacency a local of its loop, read from
/// `table` when a packet's differs; `hop` the family's TTL / hop-limit test and decrement),
/// every packet it takes sent to `output`; the others, and all of them with features on
/// the output arc (`out_any`), through `slow.process_one`. The caller has called
/// `slow.begin_frame`.
#[inline(always)]
pub(crate) fn rewrite_frame<S: PacketNode, const N: usize, const W: usize>(
    cx: &mut Cx,
    frame: &[BufIdx],
    (slow, out_any): (&mut S, bool),
    table: &AdjTable,
    output: Next,
    hop: impl Fn(&mut [u8]) -> bool + Copy,
) {
    let mut adj = FastAdj::<N>::NONE;
    let fast = move |b: &mut Buffer<'_>| adj.rewrite_any::<W>(table, b, hop);
    fast_frame(cx, frame, slow, out_any, output, fast);
}

/// What the rewrite nodes' fast path (`ip4-rewrite`, `ip6-rewrite`) keeps of the last
/// adjacency, in the form it uses; `N` is its window (the Ethernet header pushed and the L3
/// header behind it). Both the fast-path loop ([`fast_frame`]'s `fast`, which owns one and
/// reloads it when a packet's adjacency differs) and the nodes' `process_one` (with their
/// checked path's fields beside it) hold one.
#[derive(Copy, Clone)]
pub(crate) struct FastAdj<const N: usize> {
    /// The adjacency's index (`u32::MAX`: none loaded, no length accepted).
    pub index: u32,
    /// Its interface.
    pub tx_if: u32,
    /// Its Ethernet header after two zero bytes: written as one 16-byte store
    /// (`Buffer::prepend_head_wide`), the two zeros landing in the headroom.
    pub eth: [u8; 16],
    /// The lengths the fast path takes: a whole L3 header to the MTU (one compare).
    pub len: HeadLen<ETH_HEADER_LEN, N>,
}

impl<const N: usize> FastAdj<N> {
    /// Nothing loaded: matches no adjacency index but `u32::MAX`, and takes no length.
    pub const NONE: Self = FastAdj {
        index: u32::MAX,
        tx_if: 0,
        eth: [0; 16],
        len: HeadLen::up_to(0),
    };

    /// Adjacency `index` (`a`) in the fast path's form.
    #[inline(always)]
    pub fn new(index: u32, a: &Adj) -> Self {
        FastAdj {
            index,
            tx_if: a.tx_if,
            eth: eth_wide(&a.rewrite),
            len: HeadLen::up_to(mtu_limit(a.mtu)),
        }
    }

    /// Adjacency `index` from its rewrite form (as the table stores it: nothing converted).
    #[inline(always)]
    pub fn from_rewrite(index: u32, w: AdjRewrite) -> Self {
        let AdjRewrite { tx_if, mtu, eth } = w;
        FastAdj {
            index,
            tx_if,
            eth,
            len: HeadLen::up_to(mtu_limit(mtu)),
        }
    }

    /// Reads adjacency `index` from `table`: out of line, so that the fast-path loop keeps
    /// its registers.
    #[cold]
    #[inline(never)]
    fn load(table: &AdjTable, index: u32) -> Self {
        // The table holds the Ethernet header in this form: two words copied.
        Self::from_rewrite(index, table.rewrite(index))
    }

    /// `fast_frame`'s fast path of a rewrite node: reloads the adjacency when the packet's
    /// differs, then [`FastAdj::rewrite`].
    #[inline(always)]
    pub fn rewrite_any<const W: usize>(
        &mut self,
        table: &AdjTable,
        b: &mut Buffer<'_>,
        hop: impl FnOnce(&mut [u8]) -> bool,
    ) -> bool {
        let ai = b.hdr.ip.adj_index;
        if ai != self.index {
            *self = Self::load(table, ai);
        }
        self.rewrite::<W>(b, hop)
    }

    /// The rewrite of a packet of this adjacency on the fast path: a single buffer, not
    /// built here (one flag test); the Ethernet header pushed and the L3 header behind it
    /// in one window of `W` = 2 + `N` bytes, its length (a whole header, at most the MTU)
    /// and the window checked with one compare each; `hop` checks and decrements the TTL /
    /// hop limit in the L3 header (`false`: expired, nothing changed). Then the Ethernet
    /// header is one 16-byte store and `tx_if` is set. `false`, the packet as it was, when
    /// any check fails: the node's checked path takes it, in the usual order.
    #[inline(always)]
    pub fn rewrite<const W: usize>(
        &self,
        b: &mut Buffer<'_>,
        hop: impl FnOnce(&mut [u8]) -> bool,
    ) -> bool {
        // The window holds the 16-byte store (`prepend_head_wide` asserts `W == 2 + N`).
        const { assert!(W >= 16) };
        if b.hdr.flags & (LOCALLY_ORIGINATED | TOTAL_LENGTH_VALID) != 0 {
            return false;
        }
        let Some(fr) = b.prepend_head_wide::<2, ETH_HEADER_LEN, N, W>(self.len) else {
            return false;
        };
        // Never `None` (`W >= 16`, asserted above): no run-time panic, and were it reached,
        // the packet left as it was.
        let Some((eth, h)) = fr.split_first_chunk_mut::<16>() else {
            b.advance(ETH_HEADER_LEN);
            return false;
        };
        if !hop(h) {
            b.advance(ETH_HEADER_LEN);
            return false;
        }
        *eth = self.eth;
        b.hdr.tx_if = self.tx_if;
        true
    }
}

/// The host-order address of a family's control plane (`u32`, `u128`).
pub type Addr<C> = <<C as IpControl>::L as Lpm>::Addr;

/// A family's interface addresses: (interface, address, length).
pub type AddrList<C> = Vec<(u32, Addr<C>, u8)>;

/// A family's neighbour aging state, by (interface, address).
pub type NbrAging<C> = Aging<(u32, Addr<C>)>;

/// LPM values at or above this are load-balance indices (ECMP); below, adjacency indices.
/// (Both families; `ip4::LB_FLAG` is the same constant.)
pub use crate::routes::LB_FLAG;

/// A family's forwarding read side (`ip4::Ip4Shared`, `ip6::Ip6Shared`: its FIBs,
/// adjacencies and load-balances) for a node that resolves an address itself rather than
/// sending the packet through `ip4-lookup`/`ip6-lookup`: the tunnel encap (stacking on the
/// underlay's adjacency) and NAT44 (is the destination behind an outside interface?).
pub trait FibRead {
    /// The family's address (host order: `u32`, `u128`).
    type Addr: Copy;
    /// Longest-prefix match of `a` in FIB index `fib`: an adjacency, or [`LB_FLAG`] | a
    /// load-balance (None: no route, or no such table).
    fn lookup(&self, fib: u32, a: Self::Addr) -> Option<u32>;
    /// The adjacency read side.
    fn adjs(&self) -> &sluice_fib::adj::AdjTable;
    /// The load-balance read side.
    fn lbs(&self) -> &sluice_fib::lb::LbTable;

    /// The adjacency a packet to `a` with flow hash `hash` leaves by: the lookup, and for
    /// ECMP the load-balance's bucket for `hash`.
    #[inline(always)]
    fn resolve(&self, fib: u32, a: Self::Addr, hash: u32) -> Option<u32> {
        let v = self.lookup(fib, a)?;
        Some(crate::routes::adj_for(self.lbs(), v, hash))
    }

    /// The flow hash the family's lookup node picks an ECMP bucket with, of the IP packet
    /// (or outer header) `ip`: addresses, protocol, ports (IPv6: and flow label).
    fn flow_hash(ip: &[u8]) -> u32;

    /// What `a` resolves to in `fib` when a packet to it can go straight to
    /// `ip4-rewrite`/`ip6-rewrite`: a single path to a resolved neighbour (a Rewrite
    /// adjacency), its index. ECMP (a load-balance): with `hash` (a flow fixed for every
    /// packet of the caller's, e.g. a GRE tunnel's outer header), the bucket for `hash` when
    /// that is a Rewrite adjacency; without (the caller hashes each packet), [`LB_FLAG`] | the
    /// load-balance when every bucket is a Rewrite adjacency — the caller picks the bucket
    /// per packet (`lbs().pick`). None for everything the lookup node does more with: no
    /// route (counted there), a drop route, a local destination, a neighbour not resolved
    /// yet (glean), a load-balance with such a bucket.
    #[inline]
    fn stacked(&self, fib: u32, a: Self::Addr, hash: Option<u32>) -> Option<u32> {
        let rewrite = |v: u32| self.adjs().kind(v) == AdjKind::Rewrite;
        let v = self.lookup(fib, a)?;
        if v < LB_FLAG {
            return rewrite(v).then_some(v);
        }
        let lb = v & (LB_FLAG - 1);
        match hash {
            Some(h) => Some(self.lbs().pick(lb, h)).filter(|&a| rewrite(a)),
            None => {
                let n = self.lbs().bucket_count(lb);
                (n > 0 && (0..n).all(|k| rewrite(self.lbs().pick(lb, k)))).then_some(v)
            }
        }
    }
}

impl FibRead for crate::ip4::Ip4Shared {
    type Addr = u32;
    #[inline(always)]
    fn lookup(&self, fib: u32, a: u32) -> Option<u32> {
        crate::ip4::Ip4Shared::lookup(self, fib, a)
    }
    #[inline(always)]
    fn adjs(&self) -> &sluice_fib::adj::AdjTable {
        &self.adj
    }
    #[inline(always)]
    fn lbs(&self) -> &sluice_fib::lb::LbTable {
        &self.lb
    }
    #[inline(always)]
    fn flow_hash(ip: &[u8]) -> u32 {
        crate::ip4::nodes::flow_hash(ip)
    }
}

impl FibRead for crate::ip6::Ip6Shared {
    type Addr = u128;
    #[inline(always)]
    fn lookup(&self, fib: u32, a: u128) -> Option<u32> {
        crate::ip6::Ip6Shared::lookup(self, fib, a)
    }
    #[inline(always)]
    fn adjs(&self) -> &sluice_fib::adj::AdjTable {
        &self.adj
    }
    #[inline(always)]
    fn lbs(&self) -> &sluice_fib::lb::LbTable {
        &self.lb
    }
    #[inline(always)]
    fn flow_hash(ip: &[u8]) -> u32 {
        crate::ip6::nodes::flow_hash(ip)
    }
}

/// Locks a control-plane mutex, recovering it if a holder panicked.
pub(crate) fn lock<T>(c: &Mutex<T>) -> MutexGuard<'_, T> {
    match c.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// The handle to a family's control plane (a `Vlib` extension: `ip4::Ip4Main`,
/// `ip6::Ip6Main`), set by the family's `init`.
pub struct IpMain<C> {
    ctl: Option<Arc<Mutex<C>>>,
}

impl<C> Default for IpMain<C> {
    fn default() -> Self {
        IpMain { ctl: None }
    }
}

/// One address family's control plane (main thread): its tables, interface addresses,
/// neighbours and adjacencies. The neighbour and adjacency control is written here once
/// (the provided methods); a family gives its fields (`ip_control_fields!`) and the few
/// hooks where IPv4 and IPv6 differ (how a neighbour adjacency is keyed and names its next
/// hop, which neighbours have a host route or may be learned, the aging probe).
pub trait IpControl: Send + Sized + 'static {
    /// The family's LPM.
    type L: Lpm + Send;
    /// The standard address type (`Ipv4Addr`, `Ipv6Addr`).
    type Ip: Copy + std::fmt::Display + From<Addr<Self>> + Into<Addr<Self>> + Into<IpAddr> + 'static;
    /// The read side the family's nodes share.
    type Shared: Send + Sync + 'static;
    /// An aging probe frame (Ethernet header included).
    type Probe: AsRef<[u8]>;
    /// `IPv4` / `IPv6`, as errors name the family.
    const NAME: &'static str;
    /// `ip4` / `ip6`, as the runtime names the family.
    const SHORT: &'static str;
    /// The Ethernet type of the family (its adjacencies' rewrite).
    const ETHERTYPE: u16;

    /// The tables.
    fn vrfs(&self) -> &Vrfs<Self::L>;
    /// The tables, to edit.
    fn vrfs_mut(&mut self) -> &mut Vrfs<Self::L>;
    /// The adjacencies.
    fn adjs(&self) -> &Adjacencies;
    /// The adjacencies, to add to.
    fn adjs_mut(&mut self) -> &mut Adjacencies;
    /// The interface addresses (interface, address, length), in the order they were added.
    fn addrs(&self) -> &[(u32, Addr<Self>, u8)];
    /// The interface addresses and their keys in the shared source filter, to edit.
    fn addrs_mut(&mut self) -> (&mut AddrList<Self>, &mut OwnKeys);
    /// The neighbours.
    fn neighbors(&self) -> &Entries<Addr<Self>>;
    /// The neighbours and their aging state, to edit.
    fn neighbors_mut(&mut self) -> (&mut Entries<Addr<Self>>, &mut NbrAging<Self>);
    /// The neighbours' aging state.
    fn aging(&self) -> &Aging<(u32, Addr<Self>)>;
    /// The neighbour adjacency of each (interface, next hop) made by [`Self::nbr_adj`].
    fn nbr_adjs(&self) -> &NbrAdjs<Addr<Self>>;
    /// [`Self::nbr_adjs`], to edit.
    fn nbr_adjs_mut(&mut self) -> &mut NbrAdjs<Addr<Self>>;
    /// The event log (API `want_*_events`).
    fn events(&self) -> &EventLog;
    /// The neighbours the data plane learned, waiting for [`Self::apply_learned`].
    fn learned(&self) -> &Mutex<Vec<Learned<Addr<Self>>>>;
    /// The read side the family's nodes share.
    fn shared(&self) -> &Arc<Self::Shared>;
    /// The entries VPP shows in every table of the family beside its routes, for table
    /// `fib` (`show ip[6] fib`).
    fn fib_specials(&self, fib: u32) -> Vec<((Addr<Self>, u8), String)>;
    /// What `show ip[6] fib summary` says of a table's LPM under its header line.
    fn fib_summary_head(_rt: &crate::routes::RouteTable<Self::L>, _out: &mut String) {}
    /// The echo replies `ping` waits for, in the shared read side.
    fn ping_state(s: &Self::Shared) -> &crate::ping::PingState<Self::Ip>;
    /// The attributes of interface `i` (the vnet interface table).
    fn if_attr(&self, i: u32) -> &IfAttr;
    /// The family's FIB index in an interface's attributes (`fib4`, `fib6`).
    fn fib_field(a: &IfAttr) -> &AtomicU32;
    /// The family's lookup arc (+ 1) to the node of an interface's Node adjacency
    /// (`lookup_node4`, `lookup_node6`; 0: none).
    fn node_field(a: &IfAttr) -> &AtomicU32;
    /// The key of a new neighbour adjacency to `nh` in the adjacency table (IPv4: the
    /// address itself; IPv6: a serial number, its address being wider than a key).
    fn nbr_adj_key(&mut self, nh: Addr<Self>) -> u32;
    /// The next hop a neighbour adjacency records in [`Adj::nh`] (IPv6: 0, too wide).
    fn adj_nh(nh: Addr<Self>) -> u32;
    /// The next hop of adjacency `ai` (`a`) if it has one (`show adj`, `show ip fib`, route
    /// dumps); constant time, as it is asked per route.
    fn adj_via(&self, ai: u32, a: &Adj) -> Option<Self::Ip>;
    /// The next hop a glean adjacency records in [`Adj::nh`] (IPv4: the interface's first
    /// address, the source of its ARP requests; IPv6: 0).
    fn glean_nh(&self, i: u32) -> u32;
    /// The aging probe to neighbour (`i`, `ip`, `mac`), None without a source address.
    fn probe(&self, i: u32, ip: Addr<Self>, mac: [u8; 6]) -> Option<Self::Probe>;
    /// What else goes with address `addr`/`len` of interface `i` in table `fib` once it
    /// and its connected and local routes are removed.
    fn address_gone(&mut self, i: u32, fib: u32, addr: Addr<Self>, len: u8) -> VnetResult;
    /// Clears what the family publishes of deleted interface `i` once its addresses,
    /// neighbours and adjacencies are gone.
    fn interface_gone(&mut self, i: u32);
    /// Records that neighbour adjacency `a` resolves `nh` (Some) or is complete (None), for
    /// a family whose glean node cannot read the next hop from the adjacency (IPv6).
    fn set_incomplete(&self, _a: u32, _nh: Option<Addr<Self>>) {}
    /// Whether neighbour `ip` gets a host route (IPv6 link-local ones do not: their scope is
    /// the link, and the same address may exist on several links).
    fn has_host_route(_ip: Addr<Self>) -> bool {
        true
    }
    /// Whether a neighbour heard on `i` may be learned: it is on a connected subnet of `i`.
    fn may_learn(&self, i: u32, ip: Addr<Self>) -> bool {
        self.connected_if(self.if_fib(i), ip) == Some(i)
    }
    /// Why `nh` cannot be a recursive next hop (IPv6 link-local: it needs its interface).
    fn check_recursive(_nh: Addr<Self>) -> VnetResult {
        Ok(())
    }
    /// The Ethernet address of multicast group `g` (IPv4: 01:00:5e and the low 23 bits,
    /// RFC 1112 §6.4; IPv6: 33:33 and the low 32 bits, RFC 2464 §7).
    fn mcast_mac(g: Addr<Self>) -> [u8; 6];

    /// The control plane of the running daemon.
    fn control(vm: &mut Vlib) -> VnetResult<Arc<Mutex<Self>>> {
        vm.ext_mut::<IpMain<Self>>()
            .ctl
            .clone()
            .ok_or_else(|| VnetError::System(format!("{} not initialised", Self::SHORT)))
    }

    /// The MAC of interface `i` (its adjacencies' source).
    fn if_mac(&self, i: u32) -> [u8; 6] {
        self.if_attr(i).mac_bytes()
    }

    /// The MTU of interface `i` (for its adjacencies).
    fn if_mtu(&self, i: u32) -> u16 {
        self.if_attr(i).mtu.load(Ordering::Relaxed).min(65535) as u16
    }

    /// The FIB index of interface `i`'s table.
    fn if_fib(&self, i: u32) -> u32 {
        Self::fib_field(self.if_attr(i)).load(Ordering::Relaxed)
    }

    /// The standard address of `a`, None if `a` is of the other family.
    fn from_ip(a: IpAddr) -> Option<Self::Ip> {
        let v: u128 = match a {
            IpAddr::V4(x) if Self::L::BITS == 32 => u32::from(x).into(),
            IpAddr::V6(x) if Self::L::BITS == 128 => u128::from(x),
            _ => return None,
        };
        Some(Self::Ip::from(Self::L::from_u128(v)))
    }

    /// The interface whose subnet in table `fib` holds `nh` (the longest).
    fn connected_if(&self, fib: u32, nh: Addr<Self>) -> Option<u32> {
        let m = <Self::L as Lpm>::mask;
        self.addrs()
            .iter()
            .filter(|&&(i, a, l)| m(a, l) == m(nh, l) && self.if_fib(i) == fib)
            .max_by_key(|&&(_, _, l)| l)
            .map(|&(i, _, _)| i)
    }

    /// The adjacency `key` of kind `kind` on interface `i`, made by `make` if new.
    fn adj(
        &mut self,
        kind: AdjKind,
        i: u32,
        key: u32,
        make: impl FnOnce() -> Adj,
    ) -> VnetResult<u32> {
        self.adjs_mut()
            .find_or_add((kind, i, key), make)
            .ok_or_else(|| VnetError::Full("adjacency table full".into()))
    }

    /// The receive adjacency of interface `i` (`via local`, an interface's own address).
    fn local_adj(&mut self, i: u32) -> VnetResult<u32> {
        let mtu = self.if_mtu(i);
        self.adj(AdjKind::Local, i, 0, || Adj {
            kind: AdjKind::Local,
            tx_if: i,
            mtu,
            rewrite: [0; 14],
            nh: 0,
        })
    }

    /// The one adjacency of point-to-point interface `i` (`IfAttr::p2p`); neighbour
    /// adjacencies never use key 0. An interface whose packets the lookup hands straight to
    /// a node ([`crate::set_lookup_node`]) has a Node adjacency instead.
    fn p2p_adj(&mut self, i: u32) -> VnetResult<u32> {
        let mtu = self.if_mtu(i);
        let arc = Self::node_field(self.if_attr(i)).load(Ordering::Relaxed);
        if arc != 0 {
            return self.adj(AdjKind::Node, i, 0, || Adj {
                kind: AdjKind::Node,
                tx_if: i,
                mtu,
                rewrite: [0; 14],
                nh: arc - 1,
            });
        }
        self.adj(AdjKind::Rewrite, i, 0, || {
            crate::interface::p2p_adj(i, mtu, Self::ETHERTYPE)
        })
    }

    /// The adjacency of neighbour `nh` on interface `i` with MAC `mac` (None: unresolved,
    /// Incomplete).
    fn neighbor_rewrite(&self, i: u32, nh: Addr<Self>, mac: Option<[u8; 6]>) -> Adj {
        let mut rw = [0u8; 14];
        rw[6..12].copy_from_slice(&self.if_mac(i));
        rw[12..14].copy_from_slice(&Self::ETHERTYPE.to_be_bytes());
        let kind = match mac {
            Some(m) => {
                rw[..6].copy_from_slice(&m);
                AdjKind::Rewrite
            }
            None => AdjKind::Incomplete,
        };
        Adj {
            kind,
            tx_if: i,
            mtu: self.if_mtu(i),
            rewrite: rw,
            nh: Self::adj_nh(nh),
        }
    }

    /// The neighbour adjacency for (interface, next hop): Rewrite when the MAC is known,
    /// Incomplete otherwise; a point-to-point interface's one adjacency.
    fn nbr_adj(&mut self, i: u32, nh: Addr<Self>) -> VnetResult<u32> {
        if self.if_attr(i).p2p.load(Ordering::Relaxed) {
            return self.p2p_adj(i);
        }
        if let Some(a) = self.nbr_adjs().get(i, nh) {
            return Ok(a);
        }
        let mac = self.neighbors().get(&(i, nh)).map(|n| n.0);
        let adj = self.neighbor_rewrite(i, nh, mac);
        let key = self.nbr_adj_key(nh);
        let a = self.adj(AdjKind::Rewrite, i, key, || adj)?;
        self.nbr_adjs_mut().insert(i, nh, a);
        self.set_incomplete(a, mac.is_none().then_some(nh));
        Ok(a)
    }

    /// The adjacency sending to multicast group `g` on interface `i`: a Rewrite to the
    /// group's MAC ([`Self::mcast_mac`]), kept with the neighbour adjacencies (a group is
    /// never a learned neighbour); a point-to-point interface's one adjacency.
    fn mcast_adj(&mut self, i: u32, g: Addr<Self>) -> VnetResult<u32> {
        if self.if_attr(i).p2p.load(Ordering::Relaxed) {
            return self.p2p_adj(i);
        }
        if let Some(a) = self.nbr_adjs().get(i, g) {
            return Ok(a);
        }
        let adj = self.neighbor_rewrite(i, g, Some(Self::mcast_mac(g)));
        let key = self.nbr_adj_key(g);
        let a = self.adj(AdjKind::Rewrite, i, key, || adj)?;
        self.nbr_adjs_mut().insert(i, g, a);
        Ok(a)
    }

    /// The glean adjacency of interface `i`, which resolves each destination (ARP request,
    /// neighbor solicitation), whatever kind of interface `i` is.
    fn glean_adj_of(&mut self, i: u32) -> VnetResult<u32> {
        let (src, mtu, nh) = (self.if_mac(i), self.if_mtu(i), self.glean_nh(i));
        self.adj(AdjKind::Glean, i, 0, || {
            let mut rewrite = [0u8; 14];
            rewrite[6..12].copy_from_slice(&src);
            Adj {
                kind: AdjKind::Glean,
                tx_if: i,
                mtu,
                rewrite,
                nh,
            }
        })
    }

    /// The adjacency through which a route `via <interface>` reaches the destinations of
    /// a prefix: the glean adjacency, or a point-to-point interface's one adjacency.
    fn glean_adj(&mut self, i: u32) -> VnetResult<u32> {
        if self.if_attr(i).p2p.load(Ordering::Relaxed) {
            return self.p2p_adj(i);
        }
        self.glean_adj_of(i)
    }

    /// Removes address `addr`/`len` of interface `i`: its connected and local routes and
    /// [`Self::address_gone`]; false if absent.
    /// Every step runs even if one fails (the address is gone either way); the first FIB
    /// error is returned.
    fn del_address(&mut self, i: u32, addr: Addr<Self>, len: u8) -> VnetResult<bool> {
        let (addrs, own) = self.addrs_mut();
        let before = addrs.len();
        addrs.retain(|&(j, x, l)| !(j == i && x == addr && l == len));
        if addrs.len() == before {
            return Ok(false);
        }
        own.remove(addr);
        let fib = self.if_fib(i);
        let vrfs = self.vrfs_mut();
        let connected = vrfs.set_route(fib, addr, len, Source::Connected, None);
        let local = vrfs.set_route(fib, addr, Self::L::BITS, Source::Local, None);
        let gone = self.address_gone(i, fib, addr, len);
        connected?;
        local?;
        gone?;
        Ok(true)
    }

    /// Records a neighbour and updates its adjacency and host route (an unchanged entry is
    /// left alone; a learned entry never overrides a static one).
    fn add_neighbor(
        &mut self,
        i: u32,
        ip: Addr<Self>,
        mac: [u8; 6],
        is_static: bool,
    ) -> VnetResult {
        if let Some(&(m, st)) = self.neighbors().get(&(i, ip)) {
            if (st && !is_static) || (m == mac && st == is_static) {
                return Ok(());
            }
        }
        self.neighbors_mut().0.insert((i, ip), (mac, is_static));
        self.push_neighbor_event(i, ip, mac, is_static, true);
        let a = self.nbr_adj(i, ip)?;
        let adj = self.neighbor_rewrite(i, ip, Some(mac));
        self.adjs_mut().update(a, adj);
        self.set_incomplete(a, None);
        if !Self::has_host_route(ip) {
            return Ok(());
        }
        let fib = self.if_fib(i);
        Ok(self
            .vrfs_mut()
            .set_route(fib, ip, Self::L::BITS, Source::Adjacency, Some(a))?)
    }

    /// Removes a neighbour: its adjacency becomes Incomplete, its host route goes; false if
    /// there is no such neighbour.
    fn del_neighbor(&mut self, i: u32, ip: Addr<Self>) -> bool {
        let (entries, aging) = self.neighbors_mut();
        let Some((_, is_static)) = entries.remove(&(i, ip)) else {
            return false;
        };
        aging.forget(&(i, ip));
        self.push_neighbor_event(i, ip, [0; 6], is_static, false);
        if let Some(a) = self.nbr_adjs().get(i, ip) {
            let adj = self.neighbor_rewrite(i, ip, None);
            self.adjs_mut().update(a, adj);
            self.set_incomplete(a, Some(ip));
        }
        if Self::has_host_route(ip) {
            let fib = self.if_fib(i);
            let _ = self
                .vrfs_mut()
                .set_route(fib, ip, Self::L::BITS, Source::Adjacency, None);
        }
        true
    }

    /// Logs a neighbour's addition or removal.
    fn push_neighbor_event(
        &self,
        i: u32,
        ip: Addr<Self>,
        mac: [u8; 6],
        is_static: bool,
        added: bool,
    ) {
        self.events().push(crate::events::VnetEvent::Neighbor {
            sw_if: i,
            ip: Self::Ip::from(ip).into(),
            mac,
            is_static,
            added,
        });
    }

    /// Applies the neighbours the data plane learned (those [`Self::may_learn`] accepts);
    /// returns how many it took.
    fn apply_learned(&mut self) -> usize {
        let learned = std::mem::take(&mut *lock(self.learned()));
        let n = learned.len();
        let now = std::time::Instant::now();
        for l in learned {
            if self.may_learn(l.sw_if, l.ip) {
                crate::neighbor::apply(self, l, now);
            }
        }
        n
    }

    /// Neighbour aging: removes dynamic entries still stale after their probe and returns
    /// the probes to send now (interface, frame).
    fn age_neighbors(&mut self) -> Vec<(u32, Self::Probe)> {
        crate::neighbor::age(self, std::time::Instant::now())
            .into_iter()
            .filter_map(|(i, ip, mac)| Some((i, self.probe(i, ip, mac)?)))
            .collect()
    }
}

/// Every family's control plane is a neighbour table for [`crate::neighbor`]'s policy.
impl<C: IpControl> crate::neighbor::Table<Addr<C>> for C {
    fn split(&mut self) -> (&Entries<Addr<C>>, &mut Aging<(u32, Addr<C>)>) {
        let (e, a) = self.neighbors_mut();
        (e, a)
    }
    fn add(&mut self, i: u32, ip: Addr<C>, mac: [u8; 6], is_static: bool) -> VnetResult {
        self.add_neighbor(i, ip, mac, is_static)
    }
    fn remove(&mut self, i: u32, ip: Addr<C>) -> bool {
        self.del_neighbor(i, ip)
    }
}

/// The [`IpControl`] methods a family's control plane provides by its fields (`vrfs`,
/// `adjs`, `addrs`, `neighbors`, `aging`, `nbr_adjs`, `events`, `shared` with `learned`
/// and `if_attr`): used inside its `impl IpControl`, with its LPM and address types.
macro_rules! ip_control_fields {
    ($lpm:ty, $addr:ty) => {
        fn vrfs(&self) -> &$crate::routes::Vrfs<$lpm> {
            &self.vrfs
        }
        fn vrfs_mut(&mut self) -> &mut $crate::routes::Vrfs<$lpm> {
            &mut self.vrfs
        }
        fn adjs(&self) -> &sluice_fib::adj::Adjacencies {
            &self.adjs
        }
        fn adjs_mut(&mut self) -> &mut sluice_fib::adj::Adjacencies {
            &mut self.adjs
        }
        fn addrs(&self) -> &[(u32, $addr, u8)] {
            &self.addrs
        }
        fn addrs_mut(&mut self) -> (&mut Vec<(u32, $addr, u8)>, &mut $crate::own_source::OwnKeys) {
            (&mut self.addrs, &mut self.own_keys)
        }
        fn neighbors(&self) -> &$crate::neighbor::Entries<$addr> {
            &self.neighbors
        }
        fn neighbors_mut(
            &mut self,
        ) -> (
            &mut $crate::neighbor::Entries<$addr>,
            &mut $crate::neighbor::Aging<(u32, $addr)>,
        ) {
            (&mut self.neighbors, &mut self.aging)
        }
        fn aging(&self) -> &$crate::neighbor::Aging<(u32, $addr)> {
            &self.aging
        }
        fn nbr_adjs(&self) -> &$crate::ip_family::NbrAdjs<$addr> {
            &self.nbr_adjs
        }
        fn nbr_adjs_mut(&mut self) -> &mut $crate::ip_family::NbrAdjs<$addr> {
            &mut self.nbr_adjs
        }
        fn events(&self) -> &$crate::events::EventLog {
            &self.events
        }
        fn learned(&self) -> &std::sync::Mutex<Vec<$crate::neighbor::Learned<$addr>>> {
            &self.shared.learned
        }
        fn shared(&self) -> &std::sync::Arc<Self::Shared> {
            &self.shared
        }
        fn if_attr(&self, i: u32) -> &$crate::interface::IfAttr {
            self.shared.if_attr(i)
        }
    };
}
pub(crate) use ip_control_fields;

/// `count` consecutive prefixes of length `len` from `p`: the k-th (None past the end of the
/// address space).
fn nth_prefix<L: Lpm>(p: L::Addr, len: u8) -> impl Fn(u32) -> Option<L::Addr> {
    let base: u128 = L::mask(p, len).into();
    let step: u128 = if len == 0 {
        0
    } else {
        1u128 << (L::BITS - len) as u32
    };
    move |k| {
        let a = (k as u128).checked_mul(step)?.checked_add(base)?;
        (L::BITS == 128 || a >> L::BITS as u32 == 0).then(|| L::from_u128(a))
    }
}

/// A prefix as errors name it: `address/length`.
struct Shown<T>(T, u8);

impl<T: std::fmt::Display> std::fmt::Display for Shown<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.0, self.1)
    }
}

/// Why a route edit of several prefixes stopped: the error and, when it concerns one
/// prefix, its position in the list (the prefixes before it stay edited).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixError {
    /// The prefix the error concerns (None: the paths or the table, before any prefix).
    pub index: Option<usize>,
    /// The error.
    pub error: VnetError,
}

/// `ip route [add|del] [count <n>] <p>/<len> <paths>`: [`routes_add_del`] of one prefix.
pub fn route_add_del<C: IpControl>(
    vm: &mut Vlib,
    is_add: bool,
    count: u32,
    p: Addr<C>,
    len: u8,
    paths: &RoutePaths<C::Ip>,
) -> VnetResult {
    routes_add_del::<C>(vm, is_add, count, &[(p, len)], paths).map_err(|e| e.error)
}

/// `ip route [add|del] [count <n>] <p>/<len> <paths>` of each prefix of `prefixes`
/// (`count` consecutive ones from each) with the same paths, resolved once:
/// `ip_route_add_del_multi`. The first failure stops the edit (the prefixes before it stay
/// edited). A next hop with an interface, or on a connected subnet, is attached (its
/// neighbour's adjacency); any other resolves recursively through the table.
pub fn routes_add_del<C: IpControl>(
    vm: &mut Vlib,
    is_add: bool,
    count: u32,
    prefixes: &[(Addr<C>, u8)],
    paths: &RoutePaths<C::Ip>,
) -> Result<(), PrefixError> {
    let bits = C::L::BITS;
    if let Some(k) = prefixes.iter().position(|&(_, len)| len > bits) {
        let (p, len) = prefixes[k];
        return Err(PrefixError {
            index: Some(k),
            error: VnetError::invalid(format!(
                "bad prefix length in `{}'",
                Shown(C::Ip::from(p), len)
            )),
        });
    }
    let at = |index: usize| {
        move |error| PrefixError {
            index: Some(index),
            error,
        }
    };
    let none = |error| PrefixError { index: None, error };
    for &(_, i, wt) in &paths.paths {
        if let Some(i) = i {
            crate::interface::check(vm, i).map_err(none)?;
        }
        if wt == 0 {
            return Err(none(VnetError::invalid("weight must be at least 1")));
        }
    }
    if count > 1 {
        crate::routes::check_route_count(count, !is_add)
            .map_err(|e| none(VnetError::invalid(e.msg)))?;
    }
    let intr = vm
        .ext::<sluice_cli::Interrupt>()
        .copied()
        .unwrap_or_default();
    let c = C::control(vm).map_err(none)?;
    let mut ctl = lock(&c);
    let fib = ctl
        .vrfs()
        .fib_of(paths.table)
        .ok_or_else(|| none(no_table(paths.table)))?;
    let mut resolved = paths
        .resolve(!is_add, |nh, intf| {
            let nh: Addr<C> = nh.into();
            match intf.map(|i| i.0).or_else(|| ctl.connected_if(fib, nh)) {
                Some(i) => ctl.nbr_adj(i, nh).map(Hop::Adj),
                None => {
                    C::check_recursive(nh)?;
                    crate::routes::check_resolve_via(paths, ctl.vrfs(), fib, nh, bits)?;
                    Ok(Hop::Via(nh))
                }
            }
        })
        .map_err(none)?;
    // `via <interface>`: a host route's neighbour is the destination itself; a wider
    // prefix gleans (resolves each destination) on the interface. `via local`: receive.
    let local = if paths.local {
        Some(ctl.local_adj(0).map_err(none)?)
    } else {
        None
    };
    if paths.via_if.is_empty() {
        resolved.extend(local.map(|l| (Hop::Adj(l), 1)));
    }
    for (k, &(p, len)) in prefixes.iter().enumerate() {
        let mut r;
        let resolved = if paths.via_if.is_empty() {
            &resolved
        } else {
            r = resolved.clone();
            for &(i, wt) in &paths.via_if {
                let adj = if len == bits {
                    ctl.nbr_adj(i.0, p)
                } else {
                    ctl.glean_adj(i.0)
                };
                let adj = adj.map_err(at(k))?;
                r.push((Hop::Adj(adj), wt));
            }
            r.extend(local.map(|l| (Hop::Adj(l), 1)));
            &r
        };
        ctl.vrfs_mut()
            .apply_static(
                fib,
                count.max(1),
                nth_prefix::<C::L>(p, len),
                len,
                !is_add,
                paths.drop,
                resolved,
                &Shown(C::Ip::from(p), len),
                &|| intr.requested(),
            )
            .map_err(at(k))?;
    }
    Ok(())
}

/// `ip neighbor [del] <if> <ip> <mac> [static]`: a neighbour is never one of the router's
/// own addresses.
pub fn neighbor_add_del<C: IpControl>(
    vm: &mut Vlib,
    is_add: bool,
    i: SwIfIndex,
    ip: Addr<C>,
    mac: [u8; 6],
    is_static: bool,
) -> VnetResult {
    crate::interface::check(vm, i)?;
    let c = C::control(vm)?;
    let mut ctl = lock(&c);
    let shown = C::Ip::from(ip);
    if !is_add {
        if !ctl.del_neighbor(i.0, ip) {
            return Err(VnetError::NotFound(format!("no neighbor {shown}")));
        }
        return Ok(());
    }
    if ctl.addrs().iter().any(|&(_, a, _)| a == ip) {
        return Err(VnetError::invalid(format!(
            "`{shown}' is one of this router's addresses, not a neighbour's"
        )));
    }
    crate::neighbor::add(&mut *ctl, i.0, ip, mac, is_static, &shown.to_string())
}

/// Forgets a deleted interface: its addresses (connected and local routes), neighbours,
/// the static paths through it (its adjacencies drop) and what the family publishes of it.
pub fn interface_deleted<C: IpControl>(vm: &mut Vlib, i: u32) {
    let Ok(c) = C::control(vm) else { return };
    let mut ctl = lock(&c);
    let addrs: Vec<(Addr<C>, u8)> = ctl
        .addrs()
        .iter()
        .filter(|x| x.0 == i)
        .map(|x| (x.1, x.2))
        .collect();
    // Best effort: the interface goes whatever a route removal says (the old code did the
    // same); a user's `set interface ip address del` gets the error instead.
    for (a, l) in addrs {
        let _ = ctl.del_address(i, a, l);
    }
    let nbrs: Vec<Addr<C>> = ctl
        .neighbors()
        .keys()
        .filter(|k| k.0 == i)
        .map(|k| k.1)
        .collect();
    for ip in nbrs {
        ctl.del_neighbor(i, ip);
    }
    let adjs = ctl.adjs();
    let mut on_if: Vec<u32> = adjs
        .iter()
        .filter(|(k, _)| k.1 == i)
        .map(|(k, _)| adjs.find(k).unwrap_or(0))
        .chain(
            ctl.nbr_adjs()
                .iter()
                .filter(|&(j, _, _)| j == i)
                .map(|(_, _, a)| a),
        )
        .collect();
    on_if.sort_unstable();
    on_if.dedup();
    ctl.vrfs_mut().drop_static_paths(&on_if);
    for a in on_if {
        ctl.adjs_mut().update(a, Adj::DROP);
        ctl.set_incomplete(a, None);
    }
    ctl.nbr_adjs_mut().forget_interface(i);
    ctl.interface_gone(i);
}

/// FIB index → the first interface (by index) routed in that table, for every table other
/// than 0 that has one.
fn tables_in_use<C: IpControl>(vm: &mut Vlib) -> std::collections::BTreeMap<u32, String> {
    let names = crate::interface::names(vm);
    let Ok(c) = C::control(vm) else {
        return Default::default();
    };
    let ctl = lock(&c);
    let mut ids: Vec<&u32> = names.keys().collect();
    ids.sort();
    let mut out = std::collections::BTreeMap::new();
    for &i in ids {
        let fib = ctl.if_fib(i);
        if fib != 0 {
            out.entry(fib).or_insert_with(|| names[&i].clone());
        }
    }
    out
}

/// Creates (no-op if it exists) or deletes table `id`; a table an interface is routed in
/// cannot be deleted, nor can table 0.
pub fn table_add_del<C: IpControl>(vm: &mut Vlib, id: u32, is_add: bool) -> VnetResult {
    let bound = tables_in_use::<C>(vm);
    let c = C::control(vm)?;
    let mut ctl = lock(&c);
    crate::routes::table_add_del(ctl.vrfs_mut(), &bound, id, is_add)
}

/// `ip table [add|del] <id>`, `ip6 table [add|del] <id>`.
pub(crate) fn cli_table<C: IpControl>(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let (is_add, id) = crate::routes::parse_table(a)?;
    table_add_del::<C>(vm, id, is_add)?;
    Ok(String::new())
}

/// `set interface ip[6] table <interface> <id>` by the family's `set`.
pub(crate) fn cli_if_table(
    vm: &mut Vlib,
    a: &mut Args,
    set: fn(&mut Vlib, SwIfIndex, u32) -> VnetResult,
) -> Result<String, CliError> {
    let i = crate::cli::interface_arg(vm, a)?;
    let id = a.u32("table id")?;
    a.finish()?;
    set(vm, i, id)?;
    Ok(String::new())
}

/// Calls `f` with every route of table `id`.
pub fn for_each_route<C: IpControl>(
    vm: &mut Vlib,
    id: u32,
    f: impl FnMut(&crate::routes::RouteInfo),
) -> VnetResult {
    let c = C::control(vm)?;
    let ctl = lock(&c);
    let adjs = ctl.adjs();
    ctl.vrfs().for_each_route(
        id,
        |ai| {
            use crate::routes::StaticPath;
            let a = adjs.get(ai)?;
            match a.kind {
                AdjKind::Drop => None,
                AdjKind::Local => Some(StaticPath::Local),
                AdjKind::Glean => Some(StaticPath::Interface(a.tx_if)),
                _ if ctl.if_attr(a.tx_if).p2p.load(Ordering::Relaxed) => {
                    Some(StaticPath::Interface(a.tx_if))
                }
                _ => Some(StaticPath::Via(ctl.adj_via(ai, a)?.into(), Some(a.tx_if))),
            }
        },
        f,
    )
}

/// Every adjacency as `show adj` prints it, by index.
pub fn adj_lines<C: IpControl>(vm: &mut Vlib) -> Vec<(u32, String)> {
    let names = crate::interface::names(vm);
    let Ok(c) = C::control(vm) else {
        return Vec::new();
    };
    let ctl = lock(&c);
    let adjs = ctl.adjs();
    let family = C::NAME.to_lowercase();
    let mut v: Vec<(u32, String)> = adjs
        .iter()
        .filter_map(|(k, a)| {
            let i = adjs.find(k)?;
            let ifn = names
                .get(&a.tx_if)
                .cloned()
                .unwrap_or_else(|| format!("if{}", a.tx_if));
            let via = ctl.adj_via(i, a).map(|n| n.to_string()).unwrap_or_default();
            Some((i, crate::routes::fmt_adj(&family, a, i, &via, &ifn)))
        })
        .collect();
    v.sort();
    v
}

/// `ping <dst> [source <if>] [table <id>] ...` of one family (`o`): sends the echo requests
/// `packet(src, id, seq)` builds into the family's lookup node (`node.0`). The source is
/// `src_of` the source interface or of the interface the route to `dst` uses (an ECMP
/// route: the path its first bucket uses); without one the error says the interface has
/// no `node.1`.
pub(crate) fn ping<C: IpControl>(
    vm: &mut Vlib,
    o: &crate::ping::PingArgs,
    dst: Addr<C>,
    node: (&str, &str),
    src_of: impl Fn(&C, u32) -> Addr<C>,
    packet: impl Fn(Addr<C>, u16, u16) -> Vec<u8>,
) -> Result<String, CliError> {
    let c = C::control(vm)?;
    let (shared, src, fib) = {
        let ctl = lock(&c);
        let fib = match o.table {
            Some(t) => ctl.vrfs().fib_of(t).ok_or_else(|| no_table(t))?,
            None => o.src_if.map(|i| ctl.if_fib(i)).unwrap_or(0),
        };
        let out_if = o.src_if.or_else(|| {
            let a = ctl.vrfs().lookup_adj(fib, dst)?;
            Some(ctl.adjs().get(a).map_or(0, |a| a.tx_if))
        });
        let src = out_if.map(|i| src_of(&ctl, i));
        (ctl.shared().clone(), src, fib)
    };
    let Some(src) = src.filter(|&s| Into::<u128>::into(s) != 0) else {
        return Err(CliError::new(format!(
            "no source address to ping {} from (no route, or the interface has no {})",
            C::Ip::from(dst),
            node.1
        )));
    };
    let lookup = vm
        .registry
        .find(node.0)
        .ok_or_else(|| CliError::new(format!("{} missing", node.0)))?;
    Ok(crate::ping::run(
        vm,
        lookup,
        C::ping_state(&shared),
        o,
        fib,
        |id, seq| packet(src, id, seq),
    ))
}

/// One piece of `show ip fib` / `show ip6 fib`: at most `budget` routes from `cur`.
pub(crate) fn show_fib_part<C: IpControl>(
    vm: &mut Vlib,
    sa: &crate::routes::ShowArgs<Addr<C>>,
    cur: &mut crate::routes::FibCursor<Addr<C>>,
    budget: usize,
) -> Result<String, CliError> {
    use std::fmt::Write as _;
    let names = crate::interface::names(vm);
    let c = C::control(vm)?;
    let ctl = lock(&c);
    let family = C::NAME.to_lowercase();
    let prefix = |p: Addr<C>, l: u8| format!("{}/{l}", C::Ip::from(p));
    let dpo = |ai: u32, p: Addr<C>, l: u8| {
        let a = ctl.adjs().get(ai).copied();
        let via = a.and_then(|a| ctl.adj_via(ai, &a));
        let via = via.map(|n| n.to_string()).unwrap_or_default();
        let a = a.unwrap_or(Adj::DROP);
        let ifn = names
            .get(&a.tx_if)
            .cloned()
            .unwrap_or_else(|| format!("if{}", a.tx_if));
        let addr = C::Ip::from(p).to_string();
        crate::routes::fmt_dpo(&family, &a, &via, &ifn, &addr, &prefix(p, l))
    };
    ctl.vrfs().show_tables(
        sa.table,
        cur,
        budget,
        |out, id, fib, rt| {
            let tail = crate::ip4::FIB_HEADER_TAIL;
            let _ = writeln!(out, "{family}-VRF:{id}, fib_index:{fib}, {tail}");
            if sa.summary {
                C::fib_summary_head(rt, out);
            }
        },
        |out, fib, rt, after, budget| {
            if sa.summary {
                rt.summary(out);
                return None;
            }
            let f = crate::routes::ShowFib {
                proto: C::SHORT,
                filter: sa.filter,
                detail: sa.detail || sa.filter.is_some(),
                specials: ctl.fib_specials(fib),
                after,
                budget,
                prefix: &prefix,
                dpo: &dpo,
            };
            rt.show(out, &f)
        },
    )
}

/// Runs `f` on the control plane; None before it is initialised.
fn with<C: IpControl, R>(vm: &mut Vlib, f: impl FnOnce(&mut C) -> R) -> Option<R> {
    let c = C::control(vm).ok()?;
    let mut ctl = lock(&c);
    Some(f(&mut ctl))
}

/// The FIB index of table `id`.
pub fn fib_index<C: IpControl>(vm: &mut Vlib, id: u32) -> Option<u32> {
    with::<C, _>(vm, |c| c.vrfs().fib_of(id)).flatten()
}

/// The adjacency of neighbour `nh` on interface `i`, created if needed (VPP's
/// `adj_nbr_add_or_lock`): Rewrite when the neighbour's MAC is known, else Incomplete,
/// which `ip4-glean`/`ip6-glean` resolve and which turns Rewrite in place when the
/// neighbour is learned. For cross-connects that name their next hop (SRv6 End.DX4/DX6).
pub fn neighbor_adjacency<C: IpControl>(vm: &mut Vlib, i: u32, nh: Addr<C>) -> VnetResult<u32> {
    let c = C::control(vm)?;
    let mut ctl = lock(&c);
    ctl.nbr_adj(i, nh)
}

/// The adjacency sending to multicast group `g` on interface `i` ([`IpControl::mcast_adj`];
/// a VXLAN tunnel to a group: its encap bypasses the lookup, which has no multicast FIB).
pub fn mcast_adjacency<C: IpControl>(vm: &mut Vlib, i: u32, g: C::Ip) -> VnetResult<u32> {
    if !Into::<IpAddr>::into(g).is_multicast() {
        return Err(VnetError::invalid(format!("{g} is not a multicast group")));
    }
    let c = C::control(vm)?;
    let mut ctl = lock(&c);
    ctl.mcast_adj(i, g.into())
}

/// Number of routes (benchmarks, tests).
pub fn route_count<C: IpControl>(vm: &mut Vlib) -> usize {
    with::<C, _>(vm, |c| c.vrfs().route_count()).unwrap_or(0)
}

/// The tables: (table id, FIB index, routes).
pub fn tables<C: IpControl>(vm: &mut Vlib) -> Vec<(u32, u32, usize)> {
    with::<C, _>(vm, |c| c.vrfs().tables()).unwrap_or_default()
}

/// The table id of an interface.
pub fn if_table_id<C: IpControl>(vm: &mut Vlib, i: u32) -> u32 {
    with::<C, _>(vm, |c| c.vrfs().id_of(c.if_fib(i)))
        .flatten()
        .unwrap_or(0)
}

/// The addresses of an interface, in the order they were added.
pub fn addresses<C: IpControl>(vm: &mut Vlib, i: u32) -> Vec<(Addr<C>, u8)> {
    with::<C, _>(vm, |c| {
        c.addrs()
            .iter()
            .filter(|x| x.0 == i)
            .map(|x| (x.1, x.2))
            .collect()
    })
    .unwrap_or_default()
}

/// The neighbours: (interface, address, MAC, static), sorted.
pub fn neighbors<C: IpControl>(vm: &mut Vlib) -> Vec<(u32, IpAddr, [u8; 6], bool)> {
    let mut v: Vec<_> = with::<C, _>(vm, |c| {
        c.neighbors()
            .iter()
            .map(|(&(i, ip), &(mac, st))| (i, C::Ip::from(ip).into(), mac, st))
            .collect()
    })
    .unwrap_or_default();
    v.sort();
    v
}

/// Every neighbour, for `show ip neighbors` (`crate::neighbor`).
pub fn neighbor_rows<C: IpControl>(vm: &mut Vlib) -> Vec<crate::neighbor::Row> {
    let now = std::time::Instant::now();
    with::<C, _>(vm, |c| {
        c.neighbors()
            .iter()
            .map(|(&(i, ip), &(mac, is_static))| crate::neighbor::Row {
                sw_if: i,
                ip: C::Ip::from(ip).into(),
                mac,
                is_static,
                age: c.aging().updated(&(i, ip)).map(|t| now.duration_since(t)),
            })
            .collect()
    })
    .unwrap_or_default()
}

/// Runs `f` on the neighbour aging state (`set ip neighbor-config ip4|ip6`).
pub fn with_aging<C: IpControl, R>(
    vm: &mut Vlib,
    f: impl FnOnce(&mut Aging<(u32, Addr<C>)>) -> R,
) -> VnetResult<R> {
    let c = C::control(vm)?;
    let mut ctl = lock(&c);
    Ok(f(ctl.neighbors_mut().1))
}

/// Applies learned neighbours now (the process node does this every 10 ms).
pub fn apply_learned<C: IpControl>(vm: &mut Vlib) -> usize {
    with::<C, _>(vm, |c| c.apply_learned()).unwrap_or(0)
}

/// Gives the family's adjacencies their interface's current MAC (the rewrite's source) and
/// MTU: `attrs` by interface.
pub(crate) fn refresh_adjs<C: IpControl>(vm: &mut Vlib, attrs: &HashMap<u32, ([u8; 6], u16)>) {
    with::<C, _>(vm, |c| c.adjs_mut().refresh(|a| refresh_adj(a, attrs)));
}

/// An adjacency with its interface's current MAC and MTU (None: not an interface adjacency).
fn refresh_adj(a: &Adj, attrs: &HashMap<u32, ([u8; 6], u16)>) -> Option<Adj> {
    if a.kind == AdjKind::Drop {
        return None;
    }
    let &(mac, mtu) = attrs.get(&a.tx_if)?;
    let mut n = *a;
    n.mtu = mtu;
    if a.kind != AdjKind::Local {
        n.rewrite[6..12].copy_from_slice(&mac);
    }
    Some(n)
}

/// What a family's control plane is built from: its LPM, adjacencies, load balances and the
/// nodes' shared state, made at registration.
pub type Pending<C> = (
    <C as IpControl>::L,
    Adjacencies,
    LoadBalances,
    Arc<<C as IpControl>::Shared>,
);

/// The neighbour adjacency of each (interface, next hop), and (if made with `reverse`) the
/// next hop of each such adjacency, for a family whose adjacencies do not record it (IPv6).
pub struct NbrAdjs<A> {
    by_nh: HashMap<(u32, A), u32>,
    nh_of: Option<HashMap<u32, A>>,
}

impl<A: Copy + Eq + std::hash::Hash> NbrAdjs<A> {
    /// An empty set; `reverse`: also map each adjacency to its next hop ([`Self::via`]).
    pub fn new(reverse: bool) -> Self {
        NbrAdjs {
            by_nh: HashMap::new(),
            nh_of: reverse.then(HashMap::new),
        }
    }

    /// The adjacency of (`i`, `nh`).
    pub fn get(&self, i: u32, nh: A) -> Option<u32> {
        self.by_nh.get(&(i, nh)).copied()
    }

    /// Records adjacency `a` for (`i`, `nh`).
    pub fn insert(&mut self, i: u32, nh: A, a: u32) {
        self.by_nh.insert((i, nh), a);
        if let Some(m) = &mut self.nh_of {
            m.insert(a, nh);
        }
    }

    /// The next hop of adjacency `a` (None without `reverse`).
    pub fn via(&self, a: u32) -> Option<A> {
        self.nh_of.as_ref()?.get(&a).copied()
    }

    /// Every (interface, next hop, adjacency).
    pub fn iter(&self) -> impl Iterator<Item = (u32, A, u32)> + '_ {
        self.by_nh.iter().map(|(&(i, nh), &a)| (i, nh, a))
    }

    /// Forgets the adjacencies of interface `i`.
    pub fn forget_interface(&mut self, i: u32) {
        let nh_of = &mut self.nh_of;
        self.by_nh.retain(|&(j, _), a| {
            if j == i {
                if let Some(m) = nh_of.as_mut() {
                    m.remove(a);
                }
            }
            j != i
        });
    }
}

/// Control-plane pieces created at registration and completed by the family's `init`; held
/// by the main-thread instance of its `*-neighbor-process` node.
pub struct CtlSlot<C: IpControl> {
    /// What the control plane is built from (taken by `init`).
    pub(crate) pending: Option<Pending<C>>,
    /// The control plane once initialised.
    pub ctl: Option<Arc<Mutex<C>>>,
}

impl<C: IpControl> Default for CtlSlot<C> {
    fn default() -> Self {
        CtlSlot {
            pending: None,
            ctl: None,
        }
    }
}

impl<C: IpControl> CtlSlot<C> {
    /// A slot holding what `init` builds the control plane from.
    pub(crate) fn new(pending: Pending<C>) -> Self {
        CtlSlot {
            pending: Some(pending),
            ctl: None,
        }
    }
}

/// Takes what the control plane is built from out of the `node` process node's slot (None
/// if the node is absent or `init` ran already); `build` makes the control plane from it and
/// the event log, which is stored in the slot and in the `Vlib` (`IpMain`) and returned.
pub(crate) fn init_slot<C: IpControl>(
    vm: &mut Vlib,
    node: &str,
    build: impl FnOnce(&mut Vlib, Pending<C>, Arc<EventLog>) -> C,
) -> Option<Arc<Mutex<C>>> {
    let idx = vm.registry.find(node)?;
    let slot = vm
        .main
        .node_mut::<NeighborProcess<C>>(idx)
        .map(|n| n.slot.clone())?;
    let mut s = lock(&slot);
    let pending = s.pending.take()?;
    let log = crate::events::log(vm);
    let mut c = build(vm, pending, log.clone());
    c.vrfs_mut().set_events(log);
    let ctl = Arc::new(Mutex::new(c));
    s.ctl = Some(ctl.clone());
    vm.ext_mut::<IpMain<C>>().ctl = Some(ctl.clone());
    Some(ctl)
}

// ---------------------------------------------------------------------------------------
/// `ip4-neighbor-process` / `ip6-neighbor-process`: every 10 ms applies the neighbours the
/// data plane learned (`arp-input`, `ip6-local`: adjacency update + host route); every
/// 100 ms ages dynamic neighbours (`set ip neighbor-config ip4|ip6 age`): sends unicast
/// probes (ARP request, neighbor solicitation) to stale ones, removes those still stale
/// after their probe. Main thread only.
///
/// - next: `interface-output` (0) for probes (`tx_if` = the neighbour's interface).
/// - counters: `learned` (info), `probes_sent` (info), `no_buffer` (probe not sent).
pub struct NeighborProcess<C: IpControl> {
    /// Control-plane slot (see the family's `init`).
    pub slot: Arc<Mutex<CtlSlot<C>>>,
    last_age: f64,
}

impl<C: IpControl> NeighborProcess<C> {
    /// The node over `slot`.
    pub fn new(slot: Arc<Mutex<CtlSlot<C>>>) -> Self {
        NeighborProcess {
            slot,
            last_age: 0.0,
        }
    }
}

impl<C: IpControl> NodeFn for NeighborProcess<C> {
    fn process(&mut self, cx: &mut Cx, _wake: Wake) -> Suspend {
        let ctl = lock(&self.slot).ctl.clone();
        if let Some(c) = ctl {
            crate::neighbor::process_tick(
                cx,
                &mut self.last_age,
                || lock(&c).apply_learned(),
                || lock(&c).age_neighbors(),
            );
        }
        Suspend::Timeout(0.01)
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::nth_prefix;
    use sluice_fib::ip4::Ip4Lpm;
    use sluice_fib::ip6::Ip6Lpm;

    #[test]
    fn consecutive_prefixes_stop_at_the_end_of_the_address_space() {
        let n = nth_prefix::<Ip4Lpm>(0xffff_fe05, 24);
        assert_eq!(n(0), Some(0xffff_fe00));
        assert_eq!(n(1), Some(0xffff_ff00));
        assert_eq!(n(2), None);
        let n = nth_prefix::<Ip4Lpm>(0x0a00_0001, 0);
        assert_eq!((n(0), n(7)), (Some(0), Some(0)));
        let n = nth_prefix::<Ip6Lpm>(u128::MAX, 127);
        assert_eq!(n(0), Some(u128::MAX - 1));
        assert_eq!(n(1), None);
        let n = nth_prefix::<Ip6Lpm>(1 << 64, 64);
        assert_eq!(n(3), Some(4 << 64));
    }
}
