//! IPv4 forwarding: shared lock-free state read by the nodes, the main-thread control plane
//! (interface addresses, routes, neighbours) and its CLI.
//!
//! Nodes (`nodes`): `ip4-input` → `ip4-lookup` → `ip4-rewrite` → `interface-output` after
//! `ethernet-input` ([`crate::ethernet`]), plus `ip4-local` (echo replies), `ip4-icmp-error`
//! (TTL exceeded, unreachable, frag needed), `ip4-glean` (ARP requests for unresolved next
//! hops; `arp-input` is [`crate::arp`]), and the `ip4-neighbor-process` process node that
//! applies learned neighbours.

pub mod nodes;

use crate::error::{VnetError, VnetResult};
use crate::interface::{Interfaces, SwIfIndex};
use crate::ip_family::IpControl;
use crate::routes::{no_table, FibSlots, RoutePaths, Vrfs};
use sluice_cli::{Args, CliError, CommandTree};
use sluice_fib::adj::{AdjTable, Adjacencies};
use sluice_fib::ip4::{mask, Ip4Lpm, Ip4Table};
use sluice_fib::lb::{LbTable, LoadBalances};
use sluice_graph::Vlib;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

pub use crate::interface::MAX_IFS;

pub use crate::interface::IfAttr;

/// An interface's IPv4 addresses as the nodes read them (written by the control plane; one
/// per `sw_if_index`, [`Ip4Shared::if_addr`]).
#[derive(Default)]
pub struct If4Addr {
    /// The first address (host order), 0 = none.
    first: AtomicU32,
    /// The directed broadcast of the first address's subnet (host order), 0 = none (no
    /// address, a /31 or a /32): `ip4-glean` never resolves it.
    broadcast: AtomicU32,
}

impl If4Addr {
    /// The first address (host order), 0 = none: the source of the interface's ARP requests
    /// and ICMP errors.
    #[inline]
    pub fn first(&self) -> u32 {
        self.first.load(Ordering::Relaxed)
    }

    /// The directed broadcast of the first address's subnet, 0 = none.
    #[inline]
    pub fn broadcast(&self) -> u32 {
        self.broadcast.load(Ordering::Relaxed)
    }

    /// Publishes `addr`/`len` as the first address (0: none).
    fn set(&self, addr: u32, len: u8) {
        self.first.store(addr, Ordering::Relaxed);
        let bcast = if addr != 0 && len <= 30 {
            addr | (u32::MAX >> len)
        } else {
            0
        };
        self.broadcast.store(bcast, Ordering::Relaxed);
    }
}

/// State shared by every thread's IPv4 nodes.
pub struct Ip4Shared {
    /// The LPM read side of table 0.
    pub fib: Arc<Ip4Table>,
    /// Every table's LPM by FIB index (`fib_index` of the buffer; 0 is `fib`).
    pub fibs: Arc<FibSlots<Ip4Table>>,
    /// The adjacency read side.
    pub adj: Arc<AdjTable>,
    /// Per-interface attributes (the vnet interface table, [`crate::interface::IfAttrs`]).
    pub ifs: crate::interface::IfAttrs,
    /// Per-interface IPv4 addresses by `sw_if_index` ([`MAX_IFS`] entries).
    addrs: Box<[If4Addr]>,
    /// The load-balance read side.
    pub lb: Arc<LbTable>,
    /// Feature-arc next table.
    pub features: Arc<crate::feature::FeatureNext>,
    /// Neighbours learned by `arp-input` on any thread, applied by the main thread:
    /// (interface, address, MAC). A control-plane path, not the fast path.
    pub learned: Mutex<Vec<crate::neighbor::Learned<u32>>>,
    /// Echo replies for the CLI `ping` (recorded by `ip4-local` while a ping runs).
    pub ping: crate::ping::PingState<Ipv4Addr>,
    /// `ip4-input`'s and `ip6-input`'s source tests (martian first octets, the interfaces'
    /// addresses by their last two bytes).
    pub own: Arc<crate::own_source::SourceFilter>,
}

impl Ip4Shared {
    /// Longest-prefix match of `a` in FIB index `fib` (None: no route, or no such table).
    #[inline(always)]
    pub fn lookup(&self, fib: u32, a: u32) -> Option<u32> {
        if fib == 0 {
            self.fib.lookup(a)
        } else {
            self.fibs.get(fib)?.lookup(a)
        }
    }

    /// Attributes of an interface (a dummy zero entry for out-of-range indices).
    #[inline(always)]
    pub fn if_attr(&self, i: u32) -> &IfAttr {
        crate::interface::attr(&self.ifs, i)
    }

    /// The IPv4 addresses of an interface (`local0`'s, none, for out-of-range indices).
    #[inline]
    pub fn if_addr(&self, i: u32) -> &If4Addr {
        self.addrs.get(i as usize).unwrap_or(&self.addrs[0])
    }
}

pub use crate::routes::{Route, Source, LB_FLAG};

/// The control plane (main thread; shared with the neighbour process node). Its neighbour
/// and adjacency control is [`IpControl`]'s, shared with IPv6.
pub struct Ip4Control {
    vrfs: Vrfs<Ip4Lpm>,
    adjs: Adjacencies,
    shared: Arc<Ip4Shared>,
    addrs: Vec<(u32, u32, u8)>,
    /// `addrs` in the shared source filter.
    own_keys: crate::own_source::OwnKeys,
    neighbors: crate::neighbor::Entries<u32>,
    nbr_adjs: crate::ip_family::NbrAdjs<u32>,
    aging: crate::neighbor::Aging<(u32, u32)>,
    events: Arc<crate::events::EventLog>,
}

/// Handle to the control plane (a `Vlib` extension).
pub type Ip4Main = crate::ip_family::IpMain<Ip4Control>;

pub(crate) use crate::ip_family::lock;

impl IpControl for Ip4Control {
    /// Removes the subnet's drop routes and republishes the interface's first address.
    fn address_gone(&mut self, i: u32, fib: u32, addr: u32, len: u8) -> VnetResult {
        let drops = subnet_drops(self, fib, addr, len, false);
        let first = self.addrs.iter().find(|&&(j, _, _)| j == i);
        let (a, l) = first.map_or((0, 32), |x| (x.1, x.2));
        self.shared.if_addr(i).set(a, l);
        Ok(drops?)
    }
    /// Clears the interface's published address and its attributes.
    fn interface_gone(&mut self, i: u32) {
        self.shared.if_addr(i).set(0, 32);
        if let Some(x) = self.shared.ifs.get(i as usize) {
            x.mac.store(0, Ordering::Relaxed);
            x.l2_xc.store(0, Ordering::Relaxed);
            x.l2_bd.store(0, Ordering::Relaxed);
            x.fib4.store(0, Ordering::Relaxed);
            x.rx_redirect.store(0, Ordering::Relaxed);
        }
    }
    type L = Ip4Lpm;
    type Ip = Ipv4Addr;
    type Shared = Ip4Shared;
    type Probe = [u8; 14 + sluice_wire::arp::LEN];
    const NAME: &'static str = "IPv4";
    const SHORT: &'static str = "ip4";
    const ETHERTYPE: u16 = 0x0800;
    fn mcast_mac(g: u32) -> [u8; 6] {
        let b = g.to_be_bytes();
        [0x01, 0x00, 0x5e, b[1] & 0x7f, b[2], b[3]]
    }
    crate::ip_family::ip_control_fields!(Ip4Lpm, u32);
    fn fib_specials(&self, fib: u32) -> Vec<((u32, u8), String)> {
        special_entries(self, fib)
    }
    fn ping_state(s: &Ip4Shared) -> &crate::ping::PingState<Ipv4Addr> {
        &s.ping
    }
    fn fib_field(a: &IfAttr) -> &AtomicU32 {
        &a.fib4
    }
    fn node_field(a: &IfAttr) -> &AtomicU32 {
        &a.lookup_node4
    }
    fn nbr_adj_key(&mut self, nh: u32) -> u32 {
        nh
    }
    fn adj_nh(nh: u32) -> u32 {
        nh
    }
    /// Every adjacency's but the drop adjacency's: IPv4 ones name their next hop.
    fn adj_via(&self, ai: u32, a: &sluice_fib::adj::Adj) -> Option<Ipv4Addr> {
        (ai != 0).then(|| Ipv4Addr::from(a.nh))
    }
    fn glean_nh(&self, i: u32) -> u32 {
        self.addrs.iter().find(|x| x.0 == i).map_or(0, |x| x.1)
    }
    /// A unicast ARP request to the neighbour from our address on its subnet.
    fn probe(&self, i: u32, ip: u32, mac: [u8; 6]) -> Option<Self::Probe> {
        let src = self
            .addrs
            .iter()
            .find(|&&(j, a, l)| j == i && mask(a, l) == mask(ip, l))?;
        let me = sluice_wire::Mac(self.if_mac(i));
        Some(crate::arp::arp_request(
            sluice_wire::Mac(mac),
            me,
            src.1,
            ip,
        ))
    }
}

/// Creates the shared state (called by `register`, before the graph is built).
pub fn new_shared(
    features: Arc<crate::feature::FeatureNext>,
    ifs: crate::interface::IfAttrs,
) -> (Arc<Ip4Shared>, Ip4Lpm, Adjacencies, LoadBalances) {
    let lpm = Ip4Lpm::new();
    let adjs = Adjacencies::new();
    let lbs = LoadBalances::new();
    let shared = Arc::new(Ip4Shared {
        fib: lpm.table().clone(),
        fibs: Arc::new(FibSlots::default()),
        adj: adjs.table().clone(),
        lb: lbs.table().clone(),
        features,
        ifs,
        addrs: (0..MAX_IFS).map(|_| If4Addr::default()).collect(),
        learned: Mutex::new(Vec::new()),
        ping: Default::default(),
        own: crate::own_source::SourceFilter::new_shared(),
    });
    (shared, lpm, adjs, lbs)
}

/// Control-plane pieces created at registration and completed by [`init`]; held by the
/// main-thread instance of `ip4-neighbor-process`.
pub type CtlSlot = crate::ip_family::CtlSlot<Ip4Control>;

/// Registers the IPv4 nodes. The control plane is completed by [`init`] once the runtime
/// (and its epochs) exists.
pub fn register(
    r: &mut crate::plugin::Registrar,
    ifs: crate::interface::IfAttrs,
) -> Arc<Ip4Shared> {
    let (shared, lpm, adjs, lbs) = new_shared(r.feature_table(), ifs);
    let slot = Arc::new(Mutex::new(CtlSlot::new((lpm, adjs, lbs, shared.clone()))));
    nodes::register(r, shared.clone(), slot);
    shared
}

/// Completes the control plane once the runtime exists.
pub fn init(vm: &mut Vlib) {
    let build = |vm: &mut Vlib, (lpm, adjs, lbs, shared): (_, _, _, Arc<Ip4Shared>), events| {
        let fibs = shared.fibs.clone();
        Ip4Control {
            vrfs: Vrfs::new(lpm, lbs, vm.shared.epochs.clone(), fibs),
            adjs,
            own_keys: crate::own_source::OwnKeys::new(shared.own.clone()),
            shared,
            addrs: Vec::new(),
            neighbors: HashMap::default(),
            nbr_adjs: crate::ip_family::NbrAdjs::new(false),
            aging: Default::default(),
            events,
        }
    };
    if crate::ip_family::init_slot(vm, nodes::NEIGHBOR_PROCESS, build).is_some() {
        sync_all_interfaces(vm);
    }
}

fn control(vm: &mut Vlib) -> VnetResult<Arc<Mutex<Ip4Control>>> {
    Ip4Control::control(vm)
}

/// Copies interface MAC/MTU into the interface table and the adjacencies (see
/// [`crate::interface::sync_all`], which drivers call).
pub fn sync_all_interfaces(vm: &mut Vlib) {
    crate::interface::sync_all(vm);
}

/// Registers the IPv4 CLI.
pub fn register_cli(t: &mut CommandTree<Vlib>) {
    t.add(
        "set interface ip address",
        "set interface ip address [del] <interface> <ip4-or-ip6-address>/<width>",
        cli_address,
    );
    t.add(
        "ip table",
        "ip table [add|del] <table-id> — create or delete an IPv4 table (VRF)",
        crate::ip_family::cli_table::<Ip4Control>,
    );
    t.add(
        "set interface ip table",
        "set interface ip table <interface> <table-id> — route the interface's IPv4 in a table",
        cli_if_table,
    );
    t.add(
        "ip route",
        "ip route [add|del] [count <n>] <dst>/<width> [table <id>] via <next-hop> [<interface>] [weight <w>] | drop",
        cli_route,
    );
    t.add(
        "ip neighbor",
        "ip neighbor [del] <interface> <ip4-or-ip6-address> <mac-address> [static]",
        cli_neighbor,
    );
    t.add(
        "ping",
        "ping <ip4-or-ip6-address> [source <interface>] [table <id>] [repeat <n>] [size <bytes>] [interval <sec>]",
        cli_ping,
    );
    t.add(
        "show ip fib",
        "show ip fib [table <id>] [<prefix>[/<width>]] [summary] [detail] — routes and their adjacencies",
        cli_show_fib,
    );
    t.add(
        "show adj",
        "show adj — IPv4 and IPv6 adjacencies",
        cli_show_adj,
    );
    t.add(
        "show interface address",
        "show interface address — interface IP addresses",
        cli_show_addr,
    );
}

fn parse_prefix(w: &str) -> Result<(u32, u8), CliError> {
    crate::routes::parse_prefix::<Ipv4Addr>(w, 32, "IPv4").map(|(a, l)| (u32::from(a), l))
}

fn parse_ip(w: &str) -> Result<u32, CliError> {
    crate::routes::parse_addr::<Ipv4Addr>(w, "IPv4").map(u32::from)
}

fn cli_address(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let del = a.keyword("del");
    let i = crate::cli::interface_arg(vm, a)?;
    let w = a.word("address/width")?;
    if w.contains(':') {
        a.finish()?;
        let (addr, len) = crate::ip6::parse_prefix(&w)?;
        if !w.contains('/') {
            return Err(CliError::new(format!(
                "expected <address>/<width>, got `{w}'"
            )));
        }
        crate::ip6::address_add_del(vm, i, !del, addr, len)?;
        return Ok(String::new());
    }
    let (addr, len) = parse_prefix(&w)?;
    a.finish()?;
    if len == 32 && !w.contains('/') {
        return Err(CliError::new(format!(
            "expected <address>/<width>, got `{w}'"
        )));
    }
    address_add_del(vm, i, !del, addr, len)?;
    Ok(String::new())
}

/// Why an IPv4 address may not be an interface's or a neighbour's (RFC 1812 §5.3.7):
/// 0/8, 127/8 (but on a loopback when `loopback_ok`), multicast 224/4, class E 240/4
/// (incl. the limited broadcast). `None` for a usable unicast address.
pub fn martian_address(a: u32, loopback_ok: bool) -> Option<&'static str> {
    match (a >> 24) as u8 {
        0 => Some("0.0.0.0/8 is \"this network\""),
        127 if !loopback_ok => Some("127.0.0.0/8 is loopback"),
        224..=239 => Some("multicast"),
        240..=255 if a == u32::MAX => Some("limited broadcast"),
        240..=255 => Some("class E, reserved"),
        _ => None,
    }
}

/// `set interface ip address [del] <if> <addr>/<len>` (IPv4): the connected and local routes
/// of the address; an address overlapping another interface's subnet in the same table is
/// refused.
pub fn address_add_del(
    vm: &mut Vlib,
    i: SwIfIndex,
    is_add: bool,
    addr: u32,
    len: u8,
) -> VnetResult {
    crate::interface::check(vm, i)?;
    let w = format!("{}/{len}", Ipv4Addr::from(addr));
    if len == 0 || len > 32 {
        return Err(VnetError::invalid(format!(
            "expected <address>/<width>, got `{w}'"
        )));
    }
    if is_add {
        let lo = vm
            .ext::<crate::interface::Interfaces>()
            .and_then(|t| t.get(i))
            .is_some_and(|x| x.name.starts_with("loop"));
        if let Some(why) = martian_address(addr, lo) {
            return Err(VnetError::invalid(format!(
                "`{w}' is not a usable interface address ({why})"
            )));
        }
    }
    let c = control(vm)?;
    let mut ctl = lock(&c);
    let fib = ctl.if_fib(i.0);
    let exists = ctl
        .addrs
        .iter()
        .any(|&(j, x, l)| j == i.0 && x == addr && l == len);
    if !is_add {
        if !ctl.del_address(i.0, addr, len)? {
            return Err(VnetError::NotFound(format!(
                "address `{w}' not configured on the interface"
            )));
        }
        return Ok(());
    }
    if exists {
        return Ok(());
    }
    // Subnets may overlap across tables (VRFs), not within one.
    if let Some(&(j, _, _)) = ctl
        .addrs
        .iter()
        .find(|&&(j, x, l)| mask(x, l.min(len)) == mask(addr, l.min(len)) && ctl.if_fib(j) == fib)
    {
        if j != i.0 {
            return Err(VnetError::Exists(format!(
                "`{w}' overlaps a subnet of interface index {j}"
            )));
        }
    }
    ctl.addrs.push((i.0, addr, len));
    ctl.own_keys.add(addr);
    if ctl.shared.if_addr(i.0).first() == 0 {
        ctl.shared.if_addr(i.0).set(addr, len);
    }
    let glean = ctl.glean_adj_of(i.0)?;
    let local = ctl.local_adj(i.0)?;
    if len < 32 {
        ctl.vrfs
            .set_route(fib, addr, len, Source::Connected, Some(glean))?;
    }
    ctl.vrfs
        .set_route(fib, addr, 32, Source::Local, Some(local))?;
    subnet_drops(&mut ctl, fib, addr, len, true)?;
    Ok(())
}

/// VPP's network and broadcast /32s of a connected subnet up to /30: drop while no route has
/// them (a packet to the subnet's broadcast address is not gleaned).
fn subnet_drops(
    ctl: &mut Ip4Control,
    fib: u32,
    addr: u32,
    len: u8,
    add: bool,
) -> Result<(), crate::routes::RouteError> {
    if len > 30 {
        return Ok(());
    }
    let net = mask(addr, len);
    ctl.vrfs.set_drop(fib, net, 32, add)?;
    ctl.vrfs.set_drop(fib, net | (u32::MAX >> len), 32, add)
}

fn cli_route(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    // VPP takes `add`/`del`, `count` and `table` in any order, before or after the prefix.
    let mut del = false;
    let mut count = 1u32;
    let mut table = None;
    loop {
        if a.keyword("del") {
            del = true;
        } else if a.keyword("add") {
            del = false;
        } else if a.keyword("count") {
            count = a.u32("count")?.max(1);
        } else if a.keyword("table") {
            table = Some(a.u32("table id")?);
        } else {
            break;
        }
    }
    let w = a.word("destination prefix")?;
    if w.contains(':') {
        let (p, len) = crate::ip6::parse_prefix(&w)?;
        let paths = crate::routes::parse_paths(vm, a, table, |t| {
            crate::ip6::parse_ip(t).map(std::net::Ipv6Addr::from)
        })?;
        let del = paths.del.unwrap_or(del);
        let count = paths.count.unwrap_or(count);
        crate::ip6::route_add_del(vm, !del, count, p, len, &paths)?;
        return Ok(String::new());
    }
    let (p, len) = parse_prefix(&w)?;
    let paths = crate::routes::parse_paths(vm, a, table, |t| parse_ip(t).map(Ipv4Addr::from))?;
    let del = paths.del.unwrap_or(del);
    let count = paths.count.unwrap_or(count);
    route_add_del(vm, !del, count, p, len, &paths)?;
    Ok(String::new())
}

/// `ip route [add|del] [count <n>] <p>/<len> <paths>` (IPv4): `count` consecutive prefixes
/// of length `len` from `p`. A next hop with an interface, or on a connected subnet, is
/// attached (its neighbour's adjacency); any other resolves recursively through the table.
pub fn route_add_del(
    vm: &mut Vlib,
    is_add: bool,
    count: u32,
    p: u32,
    len: u8,
    paths: &RoutePaths<Ipv4Addr>,
) -> VnetResult {
    crate::ip_family::route_add_del::<Ip4Control>(vm, is_add, count, p, len, paths)
}

fn cli_neighbor(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    // VPP takes `static` and `del`/`delete` before the interface too.
    let (mut del, mut is_static) = (false, false);
    loop {
        if a.keyword("del") || a.keyword("delete") {
            del = true;
        } else if a.keyword("static") {
            is_static = true;
        } else {
            break;
        }
    }
    let i = crate::cli::interface_arg(vm, a)?;
    let w = a.word("IP address")?;
    let v6 = w.contains(':');
    let ip: std::net::IpAddr = if v6 {
        std::net::Ipv6Addr::from(crate::ip6::parse_ip(&w)?).into()
    } else {
        Ipv4Addr::from(parse_ip(&w)?).into()
    };
    // `del` takes the MAC address too (VPP's form), but does not need it.
    let mac = match (del, a.peek()) {
        (true, Some(m)) if m != "static" => {
            a.word("MAC address")?;
            [0; 6]
        }
        (true, _) => [0; 6],
        (false, _) => {
            let w = a.word("MAC address")?;
            w.parse::<sluice_wire::Mac>()
                .map_err(|_| CliError::new(format!("bad MAC address `{w}'")))?
                .0
        }
    };
    let is_static = a.keyword("static") || is_static;
    a.finish()?;
    crate::neighbor::add_del(vm, !del, i, ip, mac, is_static)?;
    Ok(String::new())
}

/// VPP's header line of a table in `show ip[6] fib`.
pub(crate) const FIB_HEADER_TAIL: &str =
    "flow hash:[src dst sport dport proto flowlabel ] epoch:0 flags:none locks:[default-route:1, ]";

/// The entries VPP creates in every IPv4 table that Sluice shows beside its routes:
/// 0.0.0.0/0, 0.0.0.0/32, 224.0.0.0/4, 240.0.0.0/4, 255.255.255.255/32 and, for each
/// connected subnet of table `fib` up to /30, its network and broadcast /32s (all drop).
/// All but 0.0.0.0/0 (a miss drops) are installed in the LPM as drop: the fixed ones as
/// `Lpm::DROP_SPECIALS`, the subnets' by `subnet_drops`.
fn special_entries(ctl: &Ip4Control, fib: u32) -> Vec<((u32, u8), String)> {
    let drop = "[@0]: dpo-drop ip4".to_string();
    let mut v: Vec<((u32, u8), String)> = [
        (0, 0),
        (0, 32),
        (0xe000_0000, 4),
        (0xf000_0000, 4),
        (u32::MAX, 32),
    ]
    .into_iter()
    .map(|k| (k, drop.clone()))
    .collect();
    for &(i, a, l) in &ctl.addrs {
        if l <= 30 && ctl.if_fib(i) == fib {
            let net = sluice_fib::ip4::mask(a, l);
            v.push(((net, 32), drop.clone()));
            v.push(((net | (u32::MAX >> l), 32), drop.clone()));
        }
    }
    v
}

/// Routes per piece of a streamed `show ip[6] fib`.
pub(crate) const FIB_CHUNK: usize = 4096;

fn cli_show_fib(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let sa = crate::routes::parse_show_args(a, parse_prefix)?;
    crate::routes::stream_show(vm, sa, crate::ip_family::show_fib_part::<Ip4Control>)
}

fn cli_show_addr(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    // Deleted interfaces are gone; the mark is the admin state, as VPP's `(up)`/`(dn)`.
    let up: HashMap<u32, bool> = vm
        .ext_mut::<Interfaces>()
        .list
        .iter()
        .filter(|i| !i.deleted)
        .map(|i| (i.sw_if_index.0, i.admin_up))
        .collect();
    let mut names = crate::interface::names(vm);
    names.retain(|i, _| up.contains_key(i));
    let v6: HashMap<u32, Vec<(u128, u8)>> = names
        .keys()
        .map(|&i| (i, crate::ip6::addresses(vm, i)))
        .collect();
    let v6ids = crate::ip6::table_ids(vm);
    let c = control(vm)?;
    let ctl = lock(&c);
    let mut out = String::new();
    let mut ifs: Vec<u32> = names.keys().copied().collect();
    ifs.sort();
    for i in ifs {
        let _ = writeln!(
            out,
            "{} ({}):",
            names[&i],
            if up.get(&i).copied().unwrap_or(false) {
                "up"
            } else {
                "dn"
            }
        );
        let attr = ctl.shared.if_attr(i);
        let fib4 = attr.fib4.load(Ordering::Relaxed);
        let fib6 = attr.fib6.load(Ordering::Relaxed);
        // VPP's suffix for addresses outside table 0; an interface in a table without
        // addresses shows the table alone.
        let in_table = |fam: &str, fib: u32, id: Option<u32>| {
            if fib == 0 {
                String::new()
            } else {
                format!(" {fam} table-id {} fib-idx {fib}", id.unwrap_or(0))
            }
        };
        let t4 = in_table("ip4", fib4, ctl.vrfs.id_of(fib4));
        let t6 = in_table("ip6", fib6, v6ids.get(&fib6).copied());
        let mine: Vec<_> = ctl.addrs.iter().filter(|x| x.0 == i).collect();
        for &&(_, addr, len) in &mine {
            let _ = writeln!(out, "  L3 {}/{}{t4}", Ipv4Addr::from(addr), len);
        }
        if mine.is_empty() && fib4 != 0 {
            let _ = writeln!(out, " {t4}");
        }
        let theirs = v6.get(&i).map(|v| v.as_slice()).unwrap_or_default();
        for (addr, len) in theirs {
            let _ = writeln!(out, "  L3 {}/{}{t6}", std::net::Ipv6Addr::from(*addr), len);
        }
        if theirs.is_empty() && fib6 != 0 {
            let _ = writeln!(out, " {t6}");
        }
    }
    Ok(out)
}

/// Runs `f` on an interface's data-plane attributes (for L2/L3 mode changes).
pub fn with_if_attr<R>(vm: &mut Vlib, i: u32, f: impl FnOnce(&IfAttr) -> R) -> Option<R> {
    crate::interface::with_if_attr(vm, i, f)
}

/// The read side the IPv4 nodes share (FIB, adjacencies, interface attributes), for a
/// plugin's nodes that look routes up or read interface addresses (NAT44 asks whether a
/// destination is reached through an outside interface). None before [`init`].
pub fn shared(vm: &mut Vlib) -> Option<Arc<Ip4Shared>> {
    let c = control(vm).ok()?;
    let ctl = lock(&c);
    Some(ctl.shared.clone())
}

/// The FIB index of IPv4 table `id` (`ip table add <id>`; table 0 is FIB index 0), for
/// plugins that take a `vrf <id>` argument.
pub fn fib_index(vm: &mut Vlib, id: u32) -> Option<u32> {
    crate::ip_family::fib_index::<Ip4Control>(vm, id)
}

fn cli_ping(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let _ = a.keyword("ipv4");
    let _ = a.keyword("ipv6");
    let w = a.word("IP address")?;
    if w.contains(':') {
        return crate::ip6::cli_ping(vm, a, &w);
    }
    let dst = parse_ip(&w)?;
    let o = crate::ping::PingArgs::parse(vm, a)?;
    let size = o.size;
    let src_of = |c: &Ip4Control, i| c.shared.if_addr(i).first();
    crate::ip_family::ping::<Ip4Control>(
        vm,
        &o,
        dst,
        (nodes::IP4_LOOKUP, "address"),
        src_of,
        |src, id, seq| {
            let mut icmp = vec![8u8, 0, 0, 0];
            icmp.extend_from_slice(&id.to_be_bytes());
            icmp.extend_from_slice(&seq.to_be_bytes());
            icmp.extend((0..size).map(|k| k as u8));
            let ck = sluice_wire::checksum::internet_checksum(&icmp);
            icmp[2..4].copy_from_slice(&ck.to_be_bytes());
            let mut pkt = vec![0u8; 20];
            sluice_wire::ipv4::Ipv4Repr {
                src: Ipv4Addr::from(src),
                dst: Ipv4Addr::from(dst),
                protocol: sluice_wire::IpProtocol::ICMP,
                ttl: 64,
                payload_len: icmp.len(),
            }
            .emit(&mut sluice_wire::ipv4::Ipv4Packet::new_unchecked(
                &mut pkt[..],
            ));
            pkt.extend_from_slice(&icmp);
            pkt
        },
    )
}

/// Forgets a deleted interface (see [`crate::ip_family::interface_deleted`]).
pub fn interface_deleted(vm: &mut Vlib, i: u32) {
    crate::ip_family::interface_deleted::<Ip4Control>(vm, i)
}

/// Creates (no-op if it exists) or deletes IPv4 table `id` (see
/// [`crate::ip_family::table_add_del`]).
pub fn table_add_del(vm: &mut Vlib, id: u32, is_add: bool) -> VnetResult {
    crate::ip_family::table_add_del::<Ip4Control>(vm, id, is_add)
}

fn cli_if_table(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    crate::ip_family::cli_if_table(vm, a, set_interface_table)
}

/// `set interface ip table <interface> <id>`: the interface's IPv4 routes and neighbours
/// move to the table (it must have no IPv4 address, as in VPP).
pub fn set_interface_table(vm: &mut Vlib, i: SwIfIndex, id: u32) -> VnetResult {
    crate::interface::check(vm, i)?;
    let c = control(vm)?;
    let mut ctl = lock(&c);
    let fib = ctl.vrfs.fib_of(id).ok_or_else(|| no_table(id))?;
    let old = ctl.if_fib(i.0);
    if old == fib {
        return Ok(());
    }
    if ctl.addrs.iter().any(|x| x.0 == i.0) {
        return Err(VnetError::InUse(
            "the interface has IPv4 addresses: delete them before changing its table".into(),
        ));
    }
    let nbrs: Vec<u32> = ctl
        .neighbors
        .keys()
        .filter(|k| k.0 == i.0)
        .map(|k| k.1)
        .collect();
    for &ip in &nbrs {
        let _ = ctl.vrfs.set_route(old, ip, 32, Source::Adjacency, None);
    }
    ctl.shared.if_attr(i.0).fib4.store(fib, Ordering::Relaxed);
    // The hooks see the new table even if a neighbour's route fails below.
    let r = nbrs.into_iter().try_for_each(|ip| {
        let a = ctl.nbr_adj(i.0, ip)?;
        let _ = ctl.vrfs.set_route(fib, ip, 32, Source::Adjacency, Some(a));
        Ok(())
    });
    drop(ctl);
    crate::interface::changed(vm, i, crate::interface::IfChange::Table);
    r
}

/// Calls `f` with every route of IPv4 table `id`.
pub fn for_each_route(
    vm: &mut Vlib,
    id: u32,
    f: impl FnMut(&crate::routes::RouteInfo),
) -> VnetResult {
    crate::ip_family::for_each_route::<Ip4Control>(vm, id, f)
}

/// The adjacency of neighbour `nh` on interface `i` (see
/// [`crate::ip_family::neighbor_adjacency`]).
pub fn neighbor_adjacency(vm: &mut Vlib, i: u32, nh: Ipv4Addr) -> VnetResult<u32> {
    crate::ip_family::neighbor_adjacency::<Ip4Control>(vm, i, u32::from(nh))
}

/// The adjacency sending to multicast group `g` on interface `i` (a VXLAN tunnel to a
/// group: its encap bypasses the lookup, which has no multicast FIB).
pub fn mcast_adjacency(vm: &mut Vlib, i: u32, g: Ipv4Addr) -> VnetResult<u32> {
    crate::ip_family::mcast_adjacency::<Ip4Control>(vm, i, g)
}

/// The IPv4 table id of an interface.
pub fn if_table_id(vm: &mut Vlib, i: u32) -> u32 {
    crate::ip_family::if_table_id::<Ip4Control>(vm, i)
}

/// The IPv4 addresses of an interface, in the order they were added.
pub fn addresses(vm: &mut Vlib, i: u32) -> Vec<(u32, u8)> {
    crate::ip_family::addresses::<Ip4Control>(vm, i)
}

/// Every IPv4 adjacency as `show adj` prints it, by index.
pub fn adj_lines(vm: &mut Vlib) -> Vec<(u32, String)> {
    crate::ip_family::adj_lines::<Ip4Control>(vm)
}

/// `show adj`: the IPv4 then the IPv6 adjacencies.
fn cli_show_adj(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    let mut out = String::new();
    for (_, l) in adj_lines(vm).into_iter().chain(crate::ip6::adj_lines(vm)) {
        out.push_str(&l);
        out.push('\n');
    }
    Ok(out)
}
