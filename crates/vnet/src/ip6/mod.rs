//! IPv6 forwarding: shared lock-free state read by the nodes, the main-thread control plane
//! (interface addresses with their link-local, routes, neighbours) and its CLI.
//!
//! Nodes: `ethernet-input` → `ip6-input` → `ip6-lookup` → `ip6-rewrite` → `interface-output`,
//! plus `ip6-local` (echo replies, Neighbor Discovery), `ip6-icmp-error` (hop limit exceeded,
//! unreachable, packet too big), `ip6-glean` (neighbor solicitations for unresolved next
//! hops) and the `ip6-neighbor-process` process node that applies learned neighbours.
//!
//! The IPv6 FIB has its own LPM ([`sluice_fib::ip6`]), adjacency and load-balance tables; the
//! per-interface record is the vnet interface table's ([`crate::interface::IfAttr`]); the
//! feature-arc table is shared with IPv4.

pub mod nodes;

use crate::error::{VnetError, VnetResult};
use crate::interface::SwIfIndex;
use crate::ip4::Ip4Shared;
use crate::ip_family::IpControl;
use crate::routes::no_table;
use crate::routes::{FibSlots, RoutePaths, Source, Vrfs};
use sluice_cli::{Args, CliError, CommandTree};
use sluice_fib::adj::{AdjTable, Adjacencies};
use sluice_fib::ip6::{mask, Ip6Lpm, Ip6Table};
use sluice_fib::lb::{LbTable, LoadBalances};
use sluice_graph::Vlib;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::Ipv6Addr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// Addresses of one interface as the slow-path nodes need them.
#[derive(Copy, Clone, Default, Debug)]
pub struct If6Addrs {
    /// Link-local address (0 = IPv6 not enabled on the interface).
    pub ll: u128,
    /// First global address (0 = none).
    pub global: u128,
}

/// State shared by every thread's IPv6 nodes.
pub struct Ip6Shared {
    /// The LPM read side of table 0.
    pub fib: Arc<Ip6Table>,
    /// Every table's LPM by FIB index (`fib_index` of the buffer; 0 is `fib`).
    pub fibs: Arc<FibSlots<Ip6Table>>,
    /// The adjacency read side.
    pub adj: Arc<AdjTable>,
    /// The load-balance read side.
    pub lb: Arc<LbTable>,
    /// IPv4's shared state: the feature table.
    pub v4: Arc<Ip4Shared>,
    /// Per-interface attributes (the vnet interface table, [`crate::interface::IfAttrs`]).
    pub ifs: crate::interface::IfAttrs,
    /// Interface addresses, read by the slow-path nodes (ND, ICMP errors) only.
    pub addrs: RwLock<Vec<If6Addrs>>,
    /// Next hops of Incomplete adjacencies (adjacency index → address), for `ip6-glean`.
    pub incomplete: RwLock<HashMap<u32, u128>>,
    /// Neighbours learned from NS/NA on any thread, applied by the main thread:
    /// (interface, address, MAC).
    pub learned: Mutex<Vec<crate::neighbor::Learned<u128>>>,
    /// Echo replies for the CLI `ping` (recorded by `ip6-local` while a ping runs).
    pub ping: crate::ping::PingState<Ipv6Addr>,
    /// `ip6-input`'s own-source test (IPv4's filter, shared: the interfaces' addresses of
    /// both families, link-local included, by their last two bytes).
    pub own: Arc<crate::own_source::SourceFilter>,
}

impl Ip6Shared {
    /// Longest-prefix match of `a` in FIB index `fib` (None: no route, or no such table).
    #[inline(always)]
    pub fn lookup(&self, fib: u32, a: u128) -> Option<u32> {
        if fib == 0 {
            self.fib.lookup(a)
        } else {
            self.fibs.get(fib)?.lookup(a)
        }
    }

    /// Attributes of an interface (a dummy zero entry for out-of-range indices).
    #[inline(always)]
    pub fn if_attr(&self, i: u32) -> &crate::interface::IfAttr {
        crate::interface::attr(&self.ifs, i)
    }

    /// The addresses of an interface (zeros when IPv6 is not enabled on it).
    pub fn if_addrs(&self, i: u32) -> If6Addrs {
        match self.addrs.read() {
            Ok(a) => a.get(i as usize).copied().unwrap_or_default(),
            Err(p) => p.into_inner().get(i as usize).copied().unwrap_or_default(),
        }
    }
}

/// Link-local address from a MAC (modified EUI-64, RFC 4291 appendix A).
pub fn link_local(mac: [u8; 6]) -> u128 {
    let iid = [
        mac[0] ^ 0x02,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ];
    (0xfe80u128 << 112) | u64::from_be_bytes(iid) as u128
}

/// Solicited-node multicast address of `a` (RFC 4291 §2.7.1).
pub fn solicited_node(a: u128) -> u128 {
    0xff02_0000_0000_0000_0000_0001_ff00_0000u128 | (a & 0xff_ffff)
}

/// Whether `a` is link-local (fe80::/10).
pub fn is_link_local(a: u128) -> bool {
    (a >> 118) == 0x3fa
}

/// The control plane (main thread; shared with the neighbour process node).
pub struct Ip6Control {
    vrfs: Vrfs<Ip6Lpm>,
    adjs: Adjacencies,
    shared: Arc<Ip6Shared>,
    addrs: Vec<(u32, u128, u8)>,
    /// `addrs` in the shared source filter.
    own_keys: crate::own_source::OwnKeys,
    neighbors: crate::neighbor::Entries<u128>,
    nbr_adjs: crate::ip_family::NbrAdjs<u128>,
    serial: u32,
    aging: crate::neighbor::Aging<(u32, u128)>,
    events: Arc<crate::events::EventLog>,
}

/// Handle to the control plane (a `Vlib` extension).
pub type Ip6Main = crate::ip_family::IpMain<Ip6Control>;

pub(crate) use crate::ip_family::lock;

impl Ip6Control {
    fn publish_addrs(&self, i: u32) {
        let ll = self
            .addrs
            .iter()
            .find(|x| x.0 == i && is_link_local(x.1))
            .map(|x| x.1)
            .unwrap_or(0);
        let global = self
            .addrs
            .iter()
            .find(|x| x.0 == i && !is_link_local(x.1))
            .map(|x| x.1)
            .unwrap_or(0);
        let mut v = match self.shared.addrs.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if v.len() <= i as usize {
            v.resize(i as usize + 1, If6Addrs::default());
        }
        v[i as usize] = If6Addrs { ll, global };
    }

    /// Adds an address (and, with the first one, the interface's link-local address).
    fn add_address(&mut self, i: u32, addr: u128, len: u8) -> VnetResult {
        if self
            .addrs
            .iter()
            .any(|&(j, x, l)| j == i && x == addr && l == len)
        {
            return Ok(());
        }
        let fib = self.if_fib(i);
        if !is_link_local(addr) {
            // Subnets may overlap across tables (VRFs), not within one.
            if let Some(&(j, _, _)) = self.addrs.iter().find(|&&(j, x, l)| {
                !is_link_local(x)
                    && j != i
                    && mask(x, l.min(len)) == mask(addr, l.min(len))
                    && self.if_fib(j) == fib
            }) {
                return Err(VnetError::Exists(format!(
                    "overlaps a subnet of interface index {j}"
                )));
            }
        }
        if !is_link_local(addr) && !self.addrs.iter().any(|x| x.0 == i && is_link_local(x.1)) {
            self.enable(i)?;
        }
        self.addrs.push((i, addr, len));
        self.own_keys.add(addr);
        let local = self.local_adj(i)?;
        if len < 128 && !is_link_local(addr) {
            let glean = self.glean_adj_of(i)?;
            self.vrfs
                .set_route(fib, addr, len, Source::Connected, Some(glean))?;
        }
        self.vrfs
            .set_route(fib, addr, 128, Source::Local, Some(local))?;
        self.publish_addrs(i);
        Ok(())
    }

    /// Enables IPv6 on an interface: its link-local address (EUI-64 of the MAC).
    fn enable(&mut self, i: u32) -> VnetResult {
        if self.addrs.iter().any(|x| x.0 == i && is_link_local(x.1)) {
            return Ok(());
        }
        let ll = link_local(self.if_mac(i));
        self.add_address(i, ll, 128)
    }
}

/// Control-plane pieces created at registration and completed by [`init`]; held by the
/// main-thread instance of `ip6-neighbor-process`.
pub type CtlSlot = crate::ip_family::CtlSlot<Ip6Control>;

/// Registers the IPv6 nodes (IPv4's shared state holds the feature table; `ifs` is the
/// interface table).
pub fn register(
    r: &mut crate::plugin::Registrar,
    v4: Arc<Ip4Shared>,
    ifs: crate::interface::IfAttrs,
) -> Arc<Ip6Shared> {
    let lpm = Ip6Lpm::new();
    let adjs = Adjacencies::new();
    let lbs = LoadBalances::new();
    let shared = Arc::new(Ip6Shared {
        fib: lpm.table().clone(),
        fibs: Arc::new(FibSlots::default()),
        adj: adjs.table().clone(),
        lb: lbs.table().clone(),
        ifs,
        addrs: RwLock::new(Vec::new()),
        incomplete: RwLock::new(HashMap::new()),
        learned: Mutex::new(Vec::new()),
        ping: Default::default(),
        own: v4.own.clone(),
        v4,
    });
    let slot = Arc::new(Mutex::new(CtlSlot::new((lpm, adjs, lbs, shared.clone()))));
    nodes::register(r, shared.clone(), slot);
    shared
}

/// Completes the control plane once the runtime exists.
pub fn init(vm: &mut Vlib) {
    let build =
        |vm: &mut Vlib, (lpm, adjs, lbs, shared): (_, _, _, Arc<Ip6Shared>), events| Ip6Control {
            vrfs: Vrfs::new(lpm, lbs, vm.shared.epochs.clone(), shared.fibs.clone()),
            adjs,
            own_keys: crate::own_source::OwnKeys::new(shared.own.clone()),
            shared,
            addrs: Vec::new(),
            neighbors: HashMap::default(),
            nbr_adjs: crate::ip_family::NbrAdjs::new(true),
            serial: 0,
            aging: Default::default(),
            events,
        };
    crate::ip_family::init_slot(vm, nodes::NEIGHBOR_PROCESS, build);
}

/// The FIB index of IPv6 table `id` (`ip6 table add <id>`; table 0 is FIB index 0), for
/// plugins that take a table argument.
pub fn fib_index(vm: &mut Vlib, id: u32) -> Option<u32> {
    crate::ip_family::fib_index::<Ip6Control>(vm, id)
}

fn control(vm: &mut Vlib) -> VnetResult<Arc<Mutex<Ip6Control>>> {
    Ip6Control::control(vm)
}

/// The state every thread's IPv6 nodes share (FIB and adjacency read sides), for plugins
/// that resolve a next hop themselves (SRv6 End.DX6), as [`crate::ip4::shared`].
pub fn shared(vm: &mut Vlib) -> Option<Arc<Ip6Shared>> {
    let c = control(vm).ok()?;
    let ctl = lock(&c);
    Some(ctl.shared.clone())
}

/// Registers the IPv6-only CLI (the shared commands — `set interface ip address`,
/// `ip route`, `ip neighbor`, `ping` — dispatch here when given an IPv6 address).
pub fn register_cli(t: &mut CommandTree<Vlib>) {
    t.add(
        "show ip6 fib",
        "show ip6 fib [table <id>] [<prefix>[/<width>]] [summary] [detail] — IPv6 routes and their adjacencies",
        cli_show_fib,
    );
    t.add(
        "ip6 table",
        "ip6 table [add|del] <table-id> — create or delete an IPv6 table (VRF)",
        crate::ip_family::cli_table::<Ip6Control>,
    );
    t.add(
        "set interface ip6 table",
        "set interface ip6 table <interface> <table-id> — route the interface's IPv6 in a table",
        cli_if_table,
    );
    t.add(
        "enable ip6 interface",
        "enable ip6 interface <interface> — link-local address, neighbour discovery",
        cli_enable,
    );
}

/// Parses `<ip6>[/<len>]`; without a length, /128.
pub fn parse_prefix(w: &str) -> Result<(u128, u8), CliError> {
    crate::routes::parse_prefix::<Ipv6Addr>(w, 128, "IPv6").map(|(a, l)| (u128::from(a), l))
}

/// Parses an IPv6 address; errors name the word.
pub fn parse_ip(w: &str) -> Result<u128, CliError> {
    crate::routes::parse_addr::<Ipv6Addr>(w, "IPv6").map(u128::from)
}

/// `set interface ip address [del] <if> <ip6>/<len>`: the connected and local routes (and,
/// with the first global address, the link-local address).
pub fn address_add_del(
    vm: &mut Vlib,
    i: SwIfIndex,
    is_add: bool,
    addr: u128,
    len: u8,
) -> VnetResult {
    crate::interface::check(vm, i)?;
    let w = format!("{}/{len}", Ipv6Addr::from(addr));
    if len == 0 || len > 128 {
        return Err(VnetError::invalid(format!(
            "expected <address>/<width>, got `{w}'"
        )));
    }
    if addr >> 120 == 0xff || addr == 0 {
        return Err(VnetError::invalid(format!(
            "`{w}' is not a unicast address"
        )));
    }
    let c = control(vm)?;
    let mut ctl = lock(&c);
    if !is_add {
        if !ctl.del_address(i.0, addr, len)? {
            return Err(VnetError::NotFound(format!(
                "address `{w}' not configured on the interface"
            )));
        }
        return Ok(());
    }
    ctl.add_address(i.0, addr, len)
        .map_err(|e| e.context(&format_args!("`{w}'")))
}

fn cli_enable(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let i = crate::cli::interface_arg(vm, a)?;
    a.finish()?;
    enable(vm, i)?;
    Ok(String::new())
}

/// `enable ip6 interface <if>`: its link-local address and neighbour discovery.
pub fn enable(vm: &mut Vlib, i: SwIfIndex) -> VnetResult {
    crate::interface::check(vm, i)?;
    let c = control(vm)?;
    let r = lock(&c).enable(i.0);
    r
}

/// Whether IPv6 is enabled on `i` (it has a link-local address).
pub fn enabled(vm: &mut Vlib, i: u32) -> bool {
    control(vm).is_ok_and(|c| {
        lock(&c)
            .addrs
            .iter()
            .any(|x| x.0 == i && is_link_local(x.1))
    })
}

/// `ip route [add|del] [count n] [table <id>] <ip6>/<len> via <nh> [<if>] [weight w] |
/// drop` (see [`crate::ip4::route_add_del`]); link-local next hops need their interface.
pub fn route_add_del(
    vm: &mut Vlib,
    is_add: bool,
    count: u32,
    p: u128,
    len: u8,
    paths: &RoutePaths<Ipv6Addr>,
) -> VnetResult {
    crate::ip_family::route_add_del::<Ip6Control>(vm, is_add, count, p, len, paths)
}

fn cli_show_fib(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let sa = crate::routes::parse_show_args(a, parse_prefix)?;
    crate::routes::stream_show(vm, sa, crate::ip_family::show_fib_part::<Ip6Control>)
}

/// The IPv6 addresses of an interface (for `show interface address`).
pub fn addresses(vm: &mut Vlib, i: u32) -> Vec<(u128, u8)> {
    crate::ip_family::addresses::<Ip6Control>(vm, i)
}

/// FIB index → table id of the live IPv6 tables.
pub fn table_ids(vm: &mut Vlib) -> HashMap<u32, u32> {
    control(vm)
        .map(|c| lock(&c).vrfs.iter().map(|(id, f, _)| (f, id)).collect())
        .unwrap_or_default()
}

impl IpControl for Ip6Control {
    type L = Ip6Lpm;
    type Ip = Ipv6Addr;
    type Shared = Ip6Shared;
    type Probe = [u8; 86];
    const NAME: &'static str = "IPv6";
    const SHORT: &'static str = "ip6";
    const ETHERTYPE: u16 = 0x86dd;
    fn mcast_mac(g: u128) -> [u8; 6] {
        let b = (g as u32).to_be_bytes();
        [0x33, 0x33, b[0], b[1], b[2], b[3]]
    }
    crate::ip_family::ip_control_fields!(Ip6Lpm, u128);
    /// VPP's entries of every IPv6 table: the default route (drop) and link-local.
    fn fib_specials(&self, _fib: u32) -> Vec<((u128, u8), String)> {
        vec![
            ((0u128, 0u8), "[@0]: dpo-drop ip6".to_string()),
            ((0xfe80u128 << 112, 10), "[@14]: ip6-link-local".to_string()),
        ]
    }
    /// The LPM's size.
    fn fib_summary_head(rt: &crate::routes::RouteTable<Ip6Lpm>, out: &mut String) {
        let _ = writeln!(
            out,
            "  routes {}, groups {} ({} KiB), host table {} slots ({} KiB), first level {} MiB (backed where written)",
            rt.routes.len(),
            rt.lpm.groups_in_use(),
            (rt.lpm.memory_bytes() - rt.lpm.host_table_bytes()) / 1024,
            rt.lpm.host_slots(),
            rt.lpm.host_table_bytes().div_ceil(1024),
            rt.lpm.first_level_bytes() >> 20
        );
    }
    fn ping_state(s: &Ip6Shared) -> &crate::ping::PingState<Ipv6Addr> {
        &s.ping
    }
    fn fib_field(a: &crate::interface::IfAttr) -> &AtomicU32 {
        &a.fib6
    }
    fn node_field(a: &crate::interface::IfAttr) -> &AtomicU32 {
        &a.lookup_node6
    }
    fn nbr_adj_key(&mut self, _nh: u128) -> u32 {
        self.serial += 1;
        self.serial
    }
    fn adj_nh(_nh: u128) -> u32 {
        0
    }
    /// The neighbour adjacencies' (`nbr_adjs`).
    fn adj_via(&self, ai: u32, _a: &sluice_fib::adj::Adj) -> Option<Ipv6Addr> {
        self.nbr_adjs.via(ai).map(Ipv6Addr::from)
    }
    fn glean_nh(&self, _i: u32) -> u32 {
        0
    }
    /// A unicast neighbor solicitation to the neighbour from our link-local or, without
    /// one, global address.
    fn probe(&self, i: u32, ip: u128, mac: [u8; 6]) -> Option<Self::Probe> {
        let a = self.shared.if_addrs(i);
        let src = if a.ll != 0 { a.ll } else { a.global };
        (src != 0).then(|| nodes::neighbor_solicit(self.if_mac(i), src, mac, ip, ip))
    }
    /// `Ip6Shared::incomplete`, which `ip6-glean` reads.
    fn set_incomplete(&self, a: u32, nh: Option<u128>) {
        let mut m = match self.shared.incomplete.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        match nh {
            Some(nh) => m.insert(a, nh),
            None => m.remove(&a),
        };
    }
    fn has_host_route(ip: u128) -> bool {
        !is_link_local(ip)
    }
    /// Neighbours on a connected subnet of the interface, or link-local ones of an
    /// interface with IPv6 enabled.
    fn may_learn(&self, i: u32, ip: u128) -> bool {
        if is_link_local(ip) {
            self.shared.if_addrs(i).ll != 0
        } else {
            self.connected_if(self.if_fib(i), ip) == Some(i)
        }
    }
    fn check_recursive(nh: u128) -> VnetResult {
        if is_link_local(nh) {
            return Err(VnetError::invalid(format!(
                "link-local next hop {} needs an interface",
                Ipv6Addr::from(nh)
            )));
        }
        Ok(())
    }
    /// Republishes the interface's link-local and first global address.
    fn address_gone(&mut self, i: u32, _fib: u32, _addr: u128, _len: u8) -> VnetResult {
        self.publish_addrs(i);
        Ok(())
    }
    fn interface_gone(&mut self, i: u32) {
        self.shared.if_attr(i).fib6.store(0, Ordering::Relaxed);
    }
}

/// `ping <ip6> [source <if>] [repeat n] [size n] [interval s]`; `a` after the address.
pub fn cli_ping(vm: &mut Vlib, a: &mut Args, w: &str) -> Result<String, CliError> {
    let dst = parse_ip(w)?;
    let o = crate::ping::PingArgs::parse(vm, a)?;
    let size = o.size;
    let src_of = |c: &Ip6Control, i| {
        let x = c.shared.if_addrs(i);
        if is_link_local(dst) || x.global == 0 {
            x.ll
        } else {
            x.global
        }
    };
    crate::ip_family::ping::<Ip6Control>(
        vm,
        &o,
        dst,
        (nodes::IP6_LOOKUP, "IPv6 address"),
        src_of,
        |src, id, seq| {
            let (s6, d6) = (Ipv6Addr::from(src), Ipv6Addr::from(dst));
            let mut pkt = vec![0u8; 40 + 8 + size];
            sluice_wire::ipv6::Ipv6Repr {
                src: s6,
                dst: d6,
                next_header: sluice_wire::IpProtocol(sluice_wire::ipv6::next_header::ICMPV6),
                hop_limit: 64,
                payload_len: 8 + size,
            }
            .emit(&mut sluice_wire::ipv6::Ipv6Packet::new_unchecked(
                &mut pkt[..],
            ));
            let icmp = &mut pkt[40..];
            icmp[0] = sluice_wire::icmpv6::kind::ECHO_REQUEST;
            icmp[4..6].copy_from_slice(&id.to_be_bytes());
            icmp[6..8].copy_from_slice(&seq.to_be_bytes());
            for (k, x) in icmp[8..].iter_mut().enumerate() {
                *x = k as u8;
            }
            sluice_wire::icmpv6::Icmpv6Packet::new_unchecked(icmp).fill_checksum(s6, d6);
            pkt
        },
    )
}

/// Forgets a deleted interface (see [`crate::ip_family::interface_deleted`]).
pub fn interface_deleted(vm: &mut Vlib, i: u32) {
    crate::ip_family::interface_deleted::<Ip6Control>(vm, i)
}

/// Creates (no-op if it exists) or deletes IPv6 table `id` (see
/// [`crate::ip_family::table_add_del`]).
pub fn table_add_del(vm: &mut Vlib, id: u32, is_add: bool) -> VnetResult {
    crate::ip_family::table_add_del::<Ip6Control>(vm, id, is_add)
}

fn cli_if_table(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    crate::ip_family::cli_if_table(vm, a, set_interface_table)
}

/// `set interface ip6 table <interface> <id>`: the interface's IPv6 (its link-local address
/// included) moves to the table; it must have no global IPv6 address.
pub fn set_interface_table(vm: &mut Vlib, i: SwIfIndex, id: u32) -> VnetResult {
    crate::interface::check(vm, i)?;
    let c = control(vm)?;
    let mut ctl = lock(&c);
    let fib = ctl.vrfs.fib_of(id).ok_or_else(|| no_table(id))?;
    if ctl.if_fib(i.0) == fib {
        return Ok(());
    }
    if ctl.addrs.iter().any(|x| x.0 == i.0 && !is_link_local(x.1)) {
        return Err(VnetError::InUse(
            "the interface has IPv6 addresses: delete them before changing its table".into(),
        ));
    }
    let lls: Vec<(u128, u8)> = ctl
        .addrs
        .iter()
        .filter(|x| x.0 == i.0)
        .map(|x| (x.1, x.2))
        .collect();
    let nbrs: Vec<(u128, [u8; 6], bool)> = ctl
        .neighbors
        .iter()
        .filter(|(k, _)| k.0 == i.0)
        .map(|(k, v)| (k.1, v.0, v.1))
        .collect();
    for &(a, l) in &lls {
        ctl.del_address(i.0, a, l)?;
    }
    for &(ip, _, _) in &nbrs {
        ctl.del_neighbor(i.0, ip);
    }
    ctl.shared.if_attr(i.0).fib6.store(fib, Ordering::Relaxed);
    // The hooks see the new table even if an address or neighbour fails below.
    let r = (|| {
        for (a, l) in lls {
            ctl.add_address(i.0, a, l)?;
        }
        for (ip, mac, st) in nbrs {
            ctl.add_neighbor(i.0, ip, mac, st)?;
        }
        Ok(())
    })();
    drop(ctl);
    crate::interface::changed(vm, i, crate::interface::IfChange::Table);
    r
}

/// Calls `f` with every route of IPv6 table `id`.
pub fn for_each_route(
    vm: &mut Vlib,
    id: u32,
    f: impl FnMut(&crate::routes::RouteInfo),
) -> VnetResult {
    crate::ip_family::for_each_route::<Ip6Control>(vm, id, f)
}

/// The adjacency of neighbour `nh` on interface `i` (see
/// [`crate::ip_family::neighbor_adjacency`]).
pub fn neighbor_adjacency(vm: &mut Vlib, i: u32, nh: Ipv6Addr) -> VnetResult<u32> {
    crate::ip_family::neighbor_adjacency::<Ip6Control>(vm, i, u128::from(nh))
}

/// The adjacency sending to multicast group `g` on interface `i` (see
/// [`crate::ip_family::mcast_adjacency`]).
pub fn mcast_adjacency(vm: &mut Vlib, i: u32, g: Ipv6Addr) -> VnetResult<u32> {
    crate::ip_family::mcast_adjacency::<Ip6Control>(vm, i, g)
}

/// The IPv6 table id of an interface.
pub fn if_table_id(vm: &mut Vlib, i: u32) -> u32 {
    crate::ip_family::if_table_id::<Ip6Control>(vm, i)
}

/// Every IPv6 adjacency as `show adj` prints it, by index.
pub fn adj_lines(vm: &mut Vlib) -> Vec<(u32, String)> {
    crate::ip_family::adj_lines::<Ip6Control>(vm)
}
