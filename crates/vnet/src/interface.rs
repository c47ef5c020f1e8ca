//! Interfaces: the sw/hw interface table, per-interface counters summed over threads, and the
//! CLI to show and change them.

use crate::error::{VnetError, VnetResult};
use sluice_graph::stats::Counter;
use sluice_graph::{NodeIndex, Vlib};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// Interfaces the per-interface tables (attributes, feature arcs, counters) can hold.
pub const MAX_IFS: usize = 16384;

/// Index of a software interface (`sw_if_index`); `local0` is 0.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SwIfIndex(pub u32);

/// Per-interface counters (`show interface` rows), one set per thread.
pub mod counter {
    /// rx packets.
    pub const RX_PACKETS: usize = 0;
    /// rx bytes.
    pub const RX_BYTES: usize = 1;
    /// tx packets.
    pub const TX_PACKETS: usize = 2;
    /// tx bytes.
    pub const TX_BYTES: usize = 3;
    /// drops.
    pub const DROPS: usize = 4;
    /// punt.
    pub const PUNT: usize = 5;
    /// ip4 packets received.
    pub const IP4: usize = 6;
    /// ip6 packets received.
    pub const IP6: usize = 7;
    /// rx-miss (ring full, buffer exhaustion).
    pub const RX_MISS: usize = 8;
    /// tx-error.
    pub const TX_ERROR: usize = 9;
    /// Number of counters.
    pub const N: usize = 10;
    /// Names as printed by `show interface`.
    pub const NAMES: [&str; N] = [
        "rx packets",
        "rx bytes",
        "tx packets",
        "tx bytes",
        "drops",
        "punt",
        "ip4",
        "ip6",
        "rx-miss",
        "tx-error",
    ];
}

/// Counters of one interface for every thread. Each thread writes only its own slot.
#[derive(Debug)]
pub struct IfCounters {
    per_thread: Box<[[Counter; counter::N]]>,
}

impl IfCounters {
    /// Zeroed counters for `threads` threads.
    pub fn new(threads: usize) -> Self {
        IfCounters {
            per_thread: (0..threads.max(1))
                .map(|_| std::array::from_fn(|_| Counter::default()))
                .collect(),
        }
    }
    /// Adds to counter `c` of thread `t`.
    #[inline(always)]
    pub fn add(&self, t: usize, c: usize, n: u64) {
        if let Some(s) = self.per_thread.get(t) {
            s[c].add(n);
        }
    }
    /// A tx node could not send `n` packets (`bytes` bytes) that `interface-output` counted
    /// as sent on this thread: they move from `tx packets`/`tx bytes` to `tx-error`, so the
    /// tx counters say what the driver handed to the device.
    pub fn tx_failed(&self, t: usize, n: u64, bytes: u64) {
        if let Some(s) = self.per_thread.get(t) {
            s[counter::TX_PACKETS].sub(n);
            s[counter::TX_BYTES].sub(bytes);
            s[counter::TX_ERROR].add(n);
        }
    }
    /// Thread `t`'s row (a node that counts for many interfaces may keep it beside its
    /// per-thread state: one dependent load less per packet than [`Self::add`]).
    #[inline(always)]
    pub fn row(&self, t: usize) -> Option<&[Counter; counter::N]> {
        self.per_thread.get(t)
    }
    /// Counter `c` of thread `t` alone.
    #[inline(always)]
    pub fn get(&self, t: usize, c: usize) -> u64 {
        self.per_thread.get(t).map_or(0, |s| s[c].get())
    }
    /// Sum over threads.
    pub fn total(&self, c: usize) -> u64 {
        self.per_thread.iter().map(|s| s[c].get()).sum()
    }
    /// Resets every counter.
    pub fn clear(&self) {
        for s in self.per_thread.iter() {
            for c in s {
                c.clear();
            }
        }
    }
}

/// One thread's row of an interface's counters, reached directly, with the counters that own
/// it: a node counting for thousands of interfaces (a tunnel per packet) loads the row's
/// address from its own table instead of the `Arc`'s record and then the row (one dependent
/// cache miss less a packet). The tunnels plugin's `RxRow` (decap's rx counting) is the
/// same row without the owning `Arc` (its table keeps the counters alive beside it): a
/// candidate to become this type.
#[derive(Clone)]
pub struct IfRow {
    /// The row: into `_owner`'s boxed slice, never reallocated.
    row: std::ptr::NonNull<[Counter; counter::N]>,
    _owner: Arc<IfCounters>,
}

// SAFETY: the row is atomics (`Counter`: one thread adds, any thread reads), kept alive by
// the `Arc` beside it; the pointer itself is only an address.
unsafe impl Send for IfRow {}
// SAFETY: as for `Send`: shared access is atomic loads and stores.
unsafe impl Sync for IfRow {}

impl IfRow {
    /// Thread `t`'s row of `c` (None: `c` has no row for `t`).
    pub fn new(c: Arc<IfCounters>, t: usize) -> Option<Self> {
        let row = std::ptr::NonNull::from(c.row(t)?);
        Some(IfRow { row, _owner: c })
    }
    /// The row.
    #[inline(always)]
    pub fn get(&self) -> &[Counter; counter::N] {
        // SAFETY: `row` points into `_owner`'s boxed slice, which is never reallocated and
        // lives at least as long as this `IfRow` (it holds the `Arc`).
        unsafe { self.row.as_ref() }
    }
    /// Adds `n` to counter `c` (this row's thread only).
    #[inline(always)]
    pub fn add(&self, c: usize, n: u64) {
        self.get()[c].add(n);
    }
}

/// One interface.
pub struct Interface {
    /// Index.
    pub sw_if_index: SwIfIndex,
    /// Name (`pg0`, `local0`, `host-eth0`, ...).
    pub name: String,
    /// Driver / device class shown by `show hardware-interfaces`.
    pub driver: String,
    /// Admin state.
    pub admin_up: bool,
    /// Link state, shared with the driver: a driver keeps a clone ([`Interface::link_handle`])
    /// and publishes carrier changes from any thread (memif's control plane does it as it
    /// connects and disconnects), so `show hardware-interfaces` is current without a
    /// main-thread round trip.
    pub link: Arc<AtomicBool>,
    /// MAC address.
    pub mac: [u8; 6],
    /// L3 MTU.
    pub mtu: u32,
    /// `set interface promiscuous on`: the L3 MAC filter of `ethernet-input` is off.
    pub promisc: bool,
    /// Node that transmits on this interface (`interface-output` sends here), if any.
    pub tx_node: Option<NodeIndex>,
    /// Counters.
    pub counters: Arc<IfCounters>,
    /// Deleted (the index is not reused while packets may still carry it).
    pub deleted: bool,
}

impl Interface {
    /// Link (carrier) state.
    pub fn link_up(&self) -> bool {
        self.link.load(Ordering::Acquire)
    }
    /// Sets the link state (any thread may; see [`Interface::link_handle`]).
    pub fn set_link_up(&self, up: bool) {
        self.link.store(up, Ordering::Release);
    }
    /// The link state for a driver to publish changes from its own thread.
    pub fn link_handle(&self) -> Arc<AtomicBool> {
        self.link.clone()
    }
}

/// Every interface's counters by index, read lock-free by `error-drop` and `punt` to count
/// `drops` and `punt` on the receiving interface. A slot is set once, when the interface is
/// created (indices are never reused).
pub struct IfCounterTable {
    slots: Box<[std::sync::OnceLock<Arc<IfCounters>>]>,
}

impl Default for IfCounterTable {
    fn default() -> Self {
        IfCounterTable {
            slots: (0..MAX_IFS).map(|_| std::sync::OnceLock::new()).collect(),
        }
    }
}

impl IfCounterTable {
    fn set(&self, i: SwIfIndex, c: Arc<IfCounters>) {
        if let Some(s) = self.slots.get(i.0 as usize) {
            let _ = s.set(c);
        }
    }

    /// The counters of interface `sw_if` (indices are never reused, so a deleted
    /// interface's counters stay reachable for packets still in flight).
    #[inline]
    pub fn get(&self, sw_if: u32) -> Option<&Arc<IfCounters>> {
        self.slots.get(sw_if as usize).and_then(|s| s.get())
    }

    /// A tx node could not send the packet with header `hdr`, which `interface-output`
    /// counted as sent: if it went out through a VLAN sub-interface (`flags::TX_SUB`), that
    /// interface's tx counters are corrected as well (its bytes exclude the tags). The
    /// parent's, which the tx node knows, are corrected by the caller
    /// ([`IfCounters::tx_failed`]).
    #[inline]
    pub fn sub_tx_failed(&self, t: usize, hdr: &sluice_buffer::BufferHeader) {
        if hdr.flags & sluice_buffer::flags::TX_SUB == 0 {
            return;
        }
        if let Some(c) = self.get(hdr.tx_sub_if) {
            let bytes = hdr.total_len().saturating_sub(hdr.tx_sub_tags as usize);
            c.tx_failed(t, 1, bytes as u64);
        }
    }
}

impl sluice_graph::nodes::IfDropSink for IfCounterTable {
    fn drops(&self, thread: usize, sw_if: u32, n: u64) {
        if let Some(c) = self.get(sw_if) {
            c.add(thread, counter::DROPS, n);
        }
    }
    fn punts(&self, thread: usize, sw_if: u32, n: u64) {
        if let Some(c) = self.get(sw_if) {
            c.add(thread, counter::PUNT, n);
        }
    }
}

/// A driver's extra lines for `show hardware-interfaces` (indented, newline-terminated).
pub type HwDetailFn = fn(&mut Vlib, SwIfIndex) -> String;

/// The interface table (a `Vlib` extension).
#[derive(Default)]
pub struct Interfaces {
    /// Indexed by `sw_if_index`.
    pub list: Vec<Interface>,
    /// Counters by index for the drop/punt nodes.
    pub counter_table: Arc<IfCounterTable>,
    /// Driver name -> its `show hardware-interfaces` detail lines.
    pub hw_details: Vec<(&'static str, HwDetailFn)>,
    /// Called after an interface's admin state, L2 mode or input redirect changes
    /// ([`on_change`]).
    change_hooks: Vec<IfChangeFn>,
}

/// What changed on an interface ([`on_change`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IfChange {
    /// `set interface state` (VPP's `VNET_SW_INTERFACE_ADMIN_UP_DOWN_FUNCTION`), and an
    /// interface's deletion ([`crate::loopback::delete_interface`]: down, its L2 mode and
    /// input redirect cleared).
    AdminState,
    /// `set interface l2 bridge|xconnect`, `set interface l3`: the [`IfAttr`] fields
    /// `l2_xc` and `l2_bd`.
    L2Mode,
    /// [`set_rx_redirect`].
    RxRedirect,
    /// `set interface ip table`, `set interface ip6 table`: the [`IfAttr`] fields `fib4`
    /// and `fib6`.
    Table,
}

/// A hook called on the main thread after interface `sw`'s [`IfChange`] has been
/// published to [`IfAttr`] (so reading the record gives the new state).
pub type IfChangeFn = fn(&mut Vlib, SwIfIndex, IfChange);

/// Registers `f` to be called after every interface's admin state, L2 mode, input
/// redirect or tables change: for a plugin that keeps a copy of those in its own per-thread tables
/// (a tunnel decap entry), as VPP's admin-up/down and L2 mode callbacks. Registering the
/// same function twice calls it once.
pub fn on_change(vm: &mut Vlib, f: IfChangeFn) {
    let hooks = &mut vm.ext_mut::<Interfaces>().change_hooks;
    if !hooks.iter().any(|&h| h as usize == f as usize) {
        hooks.push(f);
    }
}

/// Calls the [`on_change`] hooks for interface `sw`.
pub fn changed(vm: &mut Vlib, sw: SwIfIndex, what: IfChange) {
    let hooks = vm.ext_mut::<Interfaces>().change_hooks.clone();
    for h in hooks {
        h(vm, sw, what);
    }
}

impl Interfaces {
    /// Finds a live interface by name.
    pub fn find(&self, name: &str) -> Option<SwIfIndex> {
        self.list
            .iter()
            .find(|i| !i.deleted && i.name == name)
            .map(|i| i.sw_if_index)
    }

    /// A live interface.
    pub fn get(&self, i: SwIfIndex) -> Option<&Interface> {
        self.list.get(i.0 as usize).filter(|i| !i.deleted)
    }

    /// A live interface, mutable.
    pub fn get_mut(&mut self, i: SwIfIndex) -> Option<&mut Interface> {
        self.list.get_mut(i.0 as usize).filter(|i| !i.deleted)
    }
}

/// Creates an interface and wires `interface-output` to its tx node on every thread:
/// [`VnetError::Exists`] if the name is taken, [`VnetError::Full`] once [`MAX_IFS`]
/// indices were given out (deleted interfaces keep theirs: no index reaches `MAX_IFS`, so
/// every per-interface table covers every `rx_if`/`tx_if`), [`VnetError::System`] if the
/// graph refuses the arc.
pub fn create(
    vm: &mut Vlib,
    name: &str,
    driver: &str,
    mac: [u8; 6],
    tx_node: Option<NodeIndex>,
) -> VnetResult<SwIfIndex> {
    if vm.ext_mut::<Interfaces>().find(name).is_some() {
        return Err(VnetError::Exists(format!(
            "interface `{name}' already exists"
        )));
    }
    ensure_local0(vm);
    let n_threads = vm.n_threads();
    let ifs = vm.ext_mut::<Interfaces>();
    if ifs.list.len() >= MAX_IFS {
        return Err(VnetError::Full(format!(
            "interface `{name}': no interface index left (at most {MAX_IFS}, deleted ones included)"
        )));
    }
    let idx = SwIfIndex(ifs.list.len() as u32);
    let counters = Arc::new(IfCounters::new(n_threads));
    ifs.list.push(Interface {
        sw_if_index: idx,
        name: name.to_string(),
        driver: driver.to_string(),
        admin_up: false,
        link: Arc::new(AtomicBool::new(true)),
        mac,
        mtu: 1500,
        promisc: false,
        tx_node,
        counters: counters.clone(),
        deleted: false,
    });
    ifs.counter_table.set(idx, counters.clone());
    crate::output::attach(vm, idx, tx_node, counters)?;
    // A new index has no adjacencies yet: publish its attributes only, so creating an
    // interface does not walk every adjacency (N creations would cost N × adjacencies).
    if let Some(i) = vm.ext_mut::<Interfaces>().get(idx) {
        let (mac, mtu) = (i.mac, i.mtu);
        publish_attrs(vm, idx.0, mac, mtu);
    }
    Ok(idx)
}

/// Every interface's name by `sw_if_index` (deleted ones included).
pub(crate) fn names(vm: &mut Vlib) -> std::collections::HashMap<u32, String> {
    vm.ext_mut::<Interfaces>()
        .list
        .iter()
        .map(|i| (i.sw_if_index.0, i.name.clone()))
        .collect()
}

/// Creates `local0` (index 0) if it does not exist yet.
pub fn ensure_local0(vm: &mut Vlib) {
    let n_threads = vm.n_threads();
    let ifs = vm.ext_mut::<Interfaces>();
    if ifs.list.is_empty() {
        let counters = Arc::new(IfCounters::new(n_threads));
        ifs.counter_table.set(SwIfIndex(0), counters.clone());
        ifs.list.push(Interface {
            sw_if_index: SwIfIndex(0),
            name: "local0".to_string(),
            driver: "local".to_string(),
            admin_up: false,
            link: Arc::new(AtomicBool::new(false)),
            mac: [0; 6],
            mtu: 0,
            promisc: false,
            tx_node: None,
            counters,
            deleted: false,
        });
    }
}

/// The per-interface record the nodes read (written by the main thread): one per
/// `sw_if_index` in [`IfAttrs`], whatever the protocol: the link's values and the FIB index
/// of each family, which `ethernet-input` stamps on what it receives. A family's addresses
/// are its own (`ip4::Ip4Shared::if_addr`, `ip6::Ip6Shared::if_addrs`).
#[derive(Default)]
pub struct IfAttr {
    /// MAC address in the low 48 bits (big-endian byte order), 0 = unknown interface.
    pub mac: AtomicU64,
    /// L3 MTU.
    pub mtu: AtomicU32,
    /// L2 mode: 0 = L3 (routed); otherwise cross-connected to `sw_if_index` = value - 1.
    pub l2_xc: AtomicU32,
    /// Bridge domain the interface is a member of (0 = none).
    pub l2_bd: AtomicU32,
    /// IPv4 FIB index (`set interface ip table`; 0 = the default table).
    pub fib4: AtomicU32,
    /// IPv6 FIB index (`set interface ip6 table`).
    pub fib6: AtomicU32,
    /// Input redirect: 0 = none; otherwise every frame received on the interface goes from
    /// `ethernet-input` straight to its next arc `value - 1` (see [`crate::set_rx_redirect`]).
    pub rx_redirect: AtomicU32,
    /// Admin state (`set interface state`): `ethernet-input` drops what a down interface
    /// receives.
    pub admin_up: AtomicBool,
    /// `set interface promiscuous on`: an L3 interface accepts unicast frames for any MAC.
    pub promisc: AtomicBool,
    /// A host stack takes this interface's punted traffic (linux-cp's tap twin, see
    /// [`crate::set_punt_host`]): `ip4-local`/`ip6-local` punt UDP to a port Sluice does not
    /// serve instead of answering port unreachable, and `arp-input`/`ip6-local` copy the ARP
    /// and ND packets for the interface's addresses to `punt` so the host learns its
    /// neighbours too.
    pub punt_host: AtomicBool,
    /// Point-to-point (an L3 tunnel, [`crate::set_p2p`]): no ARP/ND on it. Every next hop
    /// through it and every destination of its connected prefixes share one Rewrite
    /// adjacency whose Ethernet header is a placeholder (zero MACs, the family's EtherType)
    /// that the interface's tx node strips. Read by the control plane only.
    pub p2p: AtomicBool,
    /// `ip4-lookup`'s next arc + 1 to the node its point-to-point adjacency sends to
    /// ([`crate::set_lookup_node`]; 0: none, the placeholder Rewrite). Control plane only.
    pub lookup_node4: AtomicU32,
    /// The same for `ip6-lookup`.
    pub lookup_node6: AtomicU32,
}

impl IfAttr {
    /// The MAC as bytes.
    #[inline(always)]
    pub fn mac_bytes(&self) -> [u8; 6] {
        let v = self.mac.load(Ordering::Relaxed).to_be_bytes();
        [v[2], v[3], v[4], v[5], v[6], v[7]]
    }
}

/// The interface table the nodes read: [`MAX_IFS`] records by `sw_if_index` (created by
/// `vnet::register`, shared by every thread; a `Vlib` extension as [`IfAttrTable`]).
pub type IfAttrs = Arc<[IfAttr]>;

/// Interface `i`'s record in `ifs` (entry 0, `local0`'s, for an out-of-range index).
#[inline(always)]
pub fn attr(ifs: &[IfAttr], i: u32) -> &IfAttr {
    ifs.get(i as usize).unwrap_or(&ifs[0])
}

/// A new, zeroed interface table.
pub fn new_attr_table() -> IfAttrs {
    (0..MAX_IFS).map(|_| IfAttr::default()).collect()
}

/// The interface table as a `Vlib` extension (None in a runtime without vnet).
#[derive(Default)]
pub struct IfAttrTable(pub Option<IfAttrs>);

/// Runs `f` on an interface's data-plane record; None if the index is out of range.
pub fn with_if_attr<R>(vm: &mut Vlib, i: u32, f: impl FnOnce(&IfAttr) -> R) -> Option<R> {
    vm.ext_mut::<IfAttrTable>()
        .0
        .as_ref()?
        .get(i as usize)
        .map(f)
}

/// Copies every interface's MAC and MTU into the interface table and the IPv4 and IPv6
/// adjacencies through it (after an interface is created or its MAC or MTU changes; drivers
/// call it after changing them).
pub fn sync_all(vm: &mut Vlib) {
    let ifs: Vec<(u32, [u8; 6], u32)> = vm
        .ext_mut::<Interfaces>()
        .list
        .iter()
        .filter(|i| !i.deleted)
        .map(|i| (i.sw_if_index.0, i.mac, i.mtu))
        .collect();
    sync_ifs(vm, &ifs);
}

/// [`sync_all`] for interface `sw` only (the one changed): publishes its attributes and
/// refreshes the adjacencies (a walk over all of them, keeping those on `sw`'s). Creation
/// skips the walk (see [`create`]), so it costs the same however many interfaces exist.
pub fn sync_one(vm: &mut Vlib, sw: SwIfIndex) {
    let one = vm
        .ext_mut::<Interfaces>()
        .get(sw)
        .map(|i| (sw.0, i.mac, i.mtu));
    sync_ifs(vm, one.as_slice());
}

/// Publishes interface `i`'s MAC and MTU to the nodes.
fn publish_attrs(vm: &mut Vlib, i: u32, mac: [u8; 6], mtu: u32) {
    with_if_attr(vm, i, |a| {
        let mut m = [0u8; 8];
        m[2..].copy_from_slice(&mac);
        a.mac.store(u64::from_be_bytes(m), Ordering::Relaxed);
        a.mtu.store(mtu, Ordering::Relaxed);
    });
}

fn sync_ifs(vm: &mut Vlib, ifs: &[(u32, [u8; 6], u32)]) {
    let mut attrs: HashMap<u32, ([u8; 6], u16)> = HashMap::new();
    for &(i, mac, mtu) in ifs {
        publish_attrs(vm, i, mac, mtu);
        attrs.insert(i, (mac, mtu.min(65535) as u16));
    }
    crate::ip_family::refresh_adjs::<crate::ip4::Ip4Control>(vm, &attrs);
    crate::ip_family::refresh_adjs::<crate::ip6::Ip6Control>(vm, &attrs);
}

/// Redirects every frame received on `sw_if` from `ethernet-input`, unchanged and before any
/// check, to `node` (`None`: back to normal input processing) — VPP's
/// `vnet_hw_interface_rx_redirect_to_node`, driver-independent because every driver hands
/// Ethernet frames to `ethernet-input`. The arc is added on every thread before the redirect
/// is published, so no thread can see an arc index it does not have.
pub fn set_rx_redirect(vm: &mut Vlib, sw_if: SwIfIndex, node: Option<NodeIndex>) -> VnetResult {
    let v = match node {
        Some(n) => {
            let graph = |e: sluice_graph::GraphError| VnetError::System(e.to_string());
            let eth = vm
                .registry
                .lookup(crate::ethernet::ETHERNET_INPUT)
                .map_err(graph)?;
            vm.add_next(eth, n).map_err(graph)?.0 as u32 + 1
        }
        None => 0,
    };
    with_if_attr(vm, sw_if.0, |x| {
        x.rx_redirect.store(v, std::sync::atomic::Ordering::Relaxed)
    })
    .ok_or(VnetError::NoSuchInterface(sw_if.0))?;
    changed(vm, sw_if, IfChange::RxRedirect);
    Ok(())
}

/// Makes point-to-point interface `sw_if`'s adjacency in family `v6` a Node adjacency
/// ([`sluice_fib::adj::AdjKind::Node`]): `ip4-lookup`/`ip6-lookup` hand the packets of every
/// route through it straight to `node`, as they are (no `ip4-rewrite`/`ip6-rewrite`, no
/// `interface-output`, no TTL / hop-limit decrement, no interface tx counters: the node
/// counts them) — VPP's DPO to a node, e.g. an SRv6 local SID's. The node finds the
/// interface as the adjacency's `tx_if` (`ip.adj_index`). Set it with [`set_p2p`], before
/// the interface gets routes. The arc is added on every thread before it is published.
pub fn set_lookup_node(vm: &mut Vlib, sw_if: SwIfIndex, v6: bool, node: NodeIndex) -> VnetResult {
    let graph = |e: sluice_graph::GraphError| VnetError::System(e.to_string());
    let name = if v6 {
        crate::ip6::nodes::IP6_LOOKUP
    } else {
        crate::ip4::nodes::IP4_LOOKUP
    };
    let lookup = vm.registry.lookup(name).map_err(graph)?;
    let v = vm.add_next(lookup, node).map_err(graph)?.0 as u32 + 1;
    with_if_attr(vm, sw_if.0, |x| {
        let f = if v6 { &x.lookup_node6 } else { &x.lookup_node4 };
        f.store(v, std::sync::atomic::Ordering::Relaxed)
    })
    .ok_or(VnetError::NoSuchInterface(sw_if.0))
}

/// Marks `sw_if` as having a host stack behind `punt` (linux-cp; see
/// [`IfAttr::punt_host`]).
pub fn set_punt_host(vm: &mut Vlib, sw_if: SwIfIndex, on: bool) -> VnetResult {
    with_if_attr(vm, sw_if.0, |x| {
        x.punt_host.store(on, std::sync::atomic::Ordering::Relaxed)
    })
    .ok_or(VnetError::NoSuchInterface(sw_if.0))
}

/// Marks `sw_if` point-to-point (an L3 tunnel: no ARP/ND; see [`IfAttr::p2p`]). Set it
/// before the interface gets addresses or routes: adjacencies made earlier are not redone.
/// [`VnetError::Full`] when the index is beyond the interface table.
pub fn set_p2p(vm: &mut Vlib, sw_if: SwIfIndex, on: bool) -> VnetResult {
    with_if_attr(vm, sw_if.0, |x| {
        x.p2p.store(on, std::sync::atomic::Ordering::Relaxed)
    })
    .ok_or_else(|| VnetError::Full("interface table full".into()))
}

/// The adjacency of a point-to-point interface: a Rewrite whose Ethernet header (zero MACs,
/// EtherType `et`) the interface's tx node strips.
pub(crate) fn p2p_adj(i: u32, mtu: u16, et: u16) -> sluice_fib::adj::Adj {
    let mut rewrite = [0u8; 14];
    rewrite[12..14].copy_from_slice(&et.to_be_bytes());
    sluice_fib::adj::Adj {
        kind: sluice_fib::adj::AdjKind::Rewrite,
        tx_if: i,
        mtu,
        rewrite,
        nh: 0,
    }
}

/// Copies the frame of `b` — from its Ethernet header (`l2.l2_hdr_offset`) to its end, at
/// most 512 bytes — into a new buffer with the same `rx_if` and FIB index, at its Ethernet
/// header (`l2_hdr_offset` = `current_data`), for `punt`. `None` when the frame is longer,
/// its L2 header is not in the buffer or no buffer is free.
pub(crate) fn copy_frame(
    cx: &mut sluice_graph::Cx,
    b: &mut sluice_buffer::Buffer<'_>,
) -> Option<sluice_buffer::BufIdx> {
    let back = b.hdr.current_data as isize - b.hdr.l2.l2_hdr_offset as isize;
    if !(0..=64).contains(&back) || b.len() + back as usize > 512 || b.hdr.next().is_some() {
        return None;
    }
    let back = back as usize;
    let mut tmp = [0u8; 512];
    b.push_front(back)?;
    let n = b.len();
    tmp[..n].copy_from_slice(b.data());
    b.advance(back);
    let c = cx.bufs().alloc_with(&tmp[..n])?;
    // SAFETY: `c` was just allocated here and has no other view.
    let v = unsafe { cx.buffer(c) };
    v.hdr.rx_if = b.hdr.rx_if;
    v.hdr.ip.fib_index = b.hdr.ip.fib_index;
    v.hdr.l2.l2_hdr_offset = v.hdr.current_data;
    Some(c)
}

/// Publishes an interface's admin state and promiscuous flag to the data path
/// (`ethernet-input` reads them; `interface-output` has its own copy of the admin state).
pub fn sync_rx_flags(vm: &mut Vlib, sw_if: SwIfIndex) {
    let (up, promisc) = vm
        .ext_mut::<Interfaces>()
        .get(sw_if)
        .map_or((false, false), |i| (i.admin_up, i.promisc));
    with_if_attr(vm, sw_if.0, |x| {
        x.admin_up.store(up, std::sync::atomic::Ordering::Relaxed);
        x.promisc
            .store(promisc, std::sync::atomic::Ordering::Relaxed);
    });
}

/// Installs the per-interface drop/punt counting in every thread's `error-drop` and `punt`.
pub fn install_drop_counting(vm: &mut Vlib) {
    let table: Arc<dyn sluice_graph::nodes::IfDropSink> =
        vm.ext_mut::<Interfaces>().counter_table.clone();
    let drop = vm.registry.find("error-drop");
    let punt = vm.registry.find("punt");
    vm.foreach_thread(move |tg| {
        if let Some(n) = drop.and_then(|d| tg.node_mut::<sluice_graph::nodes::ErrorDrop>(d)) {
            n.sink = Some(table.clone());
        }
        if let Some(n) = punt.and_then(|p| tg.node_mut::<sluice_graph::nodes::Punt>(p)) {
            n.sink = Some(table.clone());
        }
    });
}

/// Resolves an interface name (for `pcap trace intfc` and driver CLIs).
pub fn resolve(vm: &Vlib, name: &str) -> Option<u32> {
    vm.ext::<Interfaces>()?.find(name).map(|i| i.0)
}

/// Formats a MAC address.
pub fn fmt_mac(m: &[u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

// ---- Actions (called by the CLI and the API) -------------------------------------------------

/// Checks that `sw` is a live interface.
pub fn check(vm: &mut Vlib, sw: SwIfIndex) -> VnetResult {
    match vm.ext_mut::<Interfaces>().get(sw) {
        Some(_) => Ok(()),
        None => Err(VnetError::NoSuchInterface(sw.0)),
    }
}

/// `set interface state <if> up|down`.
pub fn set_admin_state(vm: &mut Vlib, sw: SwIfIndex, up: bool) -> VnetResult {
    check(vm, sw)?;
    if let Some(i) = vm.ext_mut::<Interfaces>().get_mut(sw) {
        i.admin_up = up;
    }
    crate::output::set_up(vm, sw, up);
    sync_rx_flags(vm, sw);
    changed(vm, sw, IfChange::AdminState);
    Ok(())
}

/// `set interface promiscuous on|off <if>` (see `cli::set_promiscuous`).
pub fn set_promisc(vm: &mut Vlib, sw: SwIfIndex, on: bool) -> VnetResult {
    check(vm, sw)?;
    if let Some(i) = vm.ext_mut::<Interfaces>().get_mut(sw) {
        i.promisc = on;
    }
    sync_rx_flags(vm, sw);
    Ok(())
}

/// `set interface mac address <if> <mac>`.
pub fn set_mac(vm: &mut Vlib, sw: SwIfIndex, mac: [u8; 6]) -> VnetResult {
    check(vm, sw)?;
    if let Some(i) = vm.ext_mut::<Interfaces>().get_mut(sw) {
        i.mac = mac;
    }
    sync_one(vm, sw);
    Ok(())
}

/// Smallest and largest L3 MTU.
pub const MTU_RANGE: std::ops::RangeInclusive<u32> = 64..=9216;

/// `set interface mtu <mtu> <if>`.
pub fn set_mtu(vm: &mut Vlib, sw: SwIfIndex, mtu: u32) -> VnetResult {
    if !MTU_RANGE.contains(&mtu) {
        return Err(VnetError::invalid(format!(
            "MTU {mtu} out of range 64..9216"
        )));
    }
    check(vm, sw)?;
    if let Some(i) = vm.ext_mut::<Interfaces>().get_mut(sw) {
        i.mtu = mtu;
    }
    sync_one(vm, sw);
    Ok(())
}

/// Refuses L2 mode (a bridge, a cross-connect, an l2 patch) on an interface whose
/// adjacency hands packets to a node ([`set_lookup_node`], e.g. a local SID): that node
/// tells what `ip6-lookup` hands it from what `interface-output` brings by the first byte,
/// which an Ethernet frame's destination MAC could mimic.
pub(crate) fn check_l2(vm: &mut Vlib, i: SwIfIndex) -> VnetResult {
    let node = with_if_attr(vm, i.0, |x| {
        x.lookup_node4.load(Ordering::Relaxed) | x.lookup_node6.load(Ordering::Relaxed)
    });
    if node.unwrap_or(0) == 0 {
        return Ok(());
    }
    let name = vm
        .ext_mut::<Interfaces>()
        .get(i)
        .map_or_else(|| i.0.to_string(), |x| x.name.clone());
    Err(VnetError::invalid(format!(
        "interface {name} hands its packets to a node: no L2 mode"
    )))
}

/// `set interface l2 xconnect <a> <b>`: what `a` receives is sent out of `b`.
pub fn set_xconnect(vm: &mut Vlib, a: SwIfIndex, b: SwIfIndex) -> VnetResult {
    check(vm, a)?;
    check(vm, b)?;
    check_l2(vm, a)?;
    check_l2(vm, b)?;
    if a == b {
        return Err(VnetError::invalid(
            "cannot cross-connect an interface to itself",
        ));
    }
    crate::l2::leave_bridge(vm, a);
    with_if_attr(vm, a.0, |x| x.l2_xc.store(b.0 + 1, Ordering::Relaxed))
        .ok_or_else(|| VnetError::Full("interface table full".into()))?;
    changed(vm, a, IfChange::L2Mode);
    Ok(())
}

/// `set interface l3 <if>`: back to routed mode (leaves a bridge or cross-connect).
pub fn set_l3(vm: &mut Vlib, a: SwIfIndex) -> VnetResult {
    check(vm, a)?;
    crate::l2::leave_bridge(vm, a);
    with_if_attr(vm, a.0, |x| x.l2_xc.store(0, Ordering::Relaxed));
    changed(vm, a, IfChange::L2Mode);
    Ok(())
}

/// The cross-connect peer of `a`, if it is cross-connected.
pub fn xconnect_peer(vm: &mut Vlib, a: SwIfIndex) -> Option<SwIfIndex> {
    with_if_attr(vm, a.0, |x| x.l2_xc.load(Ordering::Relaxed))
        .filter(|&v| v != 0)
        .map(|v| SwIfIndex(v - 1))
}

/// `clear interfaces`: every interface counter and the feature-arc counters.
pub fn clear_counters(vm: &mut Vlib) {
    for i in &vm.ext_mut::<Interfaces>().list {
        i.counters.clear();
    }
    crate::feature::clear_counts(vm);
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_buffer::{flags, BufferHeader};

    #[test]
    fn refused_packets_come_off_the_sub_interface_they_were_counted_on() {
        let t = IfCounterTable::default();
        let sub = Arc::new(IfCounters::new(1));
        t.set(SwIfIndex(7), sub.clone());
        sub.add(0, counter::TX_PACKETS, 2);
        sub.add(0, counter::TX_BYTES, 200);
        let mut h = BufferHeader::TEMPLATE;
        h.current_length = 104;
        // Not sent through a sub-interface: nothing to correct.
        t.sub_tx_failed(0, &h);
        assert_eq!(sub.total(counter::TX_PACKETS), 2);
        h.flags |= flags::TX_SUB;
        h.tx_sub_if = 7;
        h.tx_sub_tags = 4;
        t.sub_tx_failed(0, &h);
        assert_eq!(sub.total(counter::TX_PACKETS), 1);
        assert_eq!(sub.total(counter::TX_BYTES), 100);
        assert_eq!(sub.total(counter::TX_ERROR), 1);
        // An index without counters is ignored.
        h.tx_sub_if = 9;
        t.sub_tx_failed(0, &h);
        assert_eq!(sub.total(counter::TX_ERROR), 1);
    }

    /// The last index below `MAX_IFS` is given out, none past it (deleted interfaces keep
    /// theirs), so every per-interface table covers every interface.
    #[test]
    fn no_interface_index_reaches_max_ifs() {
        let (mut vm, _cli) = crate::testing::configured(&[], 0, 256, &[]);
        // Every index up to the last but one, taken by interfaces since deleted.
        for i in 1..MAX_IFS - 1 {
            let sw = create(&mut vm, &format!("if{i}"), "test", [2, 0, 0, 0, 0, 3], None);
            assert_eq!(sw.ok(), Some(SwIfIndex(i as u32)));
            vm.ext_mut::<Interfaces>().list[i].deleted = true;
        }
        let last = create(&mut vm, "last", "test", [2, 0, 0, 0, 0, 1], None);
        assert_eq!(last.ok(), Some(SwIfIndex(MAX_IFS as u32 - 1)));
        let past = create(&mut vm, "past", "test", [2, 0, 0, 0, 0, 2], None);
        assert!(matches!(past, Err(VnetError::Full(_))), "{past:?}");
        assert!(vm.ext_mut::<Interfaces>().find("past").is_none());
    }
}
