//! `show running-config` and `save running-config <file>`: the configuration as CLI lines that
//! recreate it when run as an `exec` script on a fresh daemon started with the same
//! startup.conf (threads matter for rx placement).
//!
//! Order: neighbour policy, tables, bridge domains; then every interface in index order —
//! its creation (drivers say how, [`register_creator`]), MAC, MTU, promiscuous mode, tables,
//! addresses, admin state; then what refers to other interfaces (bridge membership in member
//! order, cross-connects but those a creator line makes itself
//! ([`register_implied_xconnect`]), patches), static L2 FIB entries, static neighbours,
//! static routes of every table (all paths of a route on one line), the plugins' sections
//! ([`register_section`]: NAT, ACLs, policers, in plugin order), features and rx queues. What the
//! daemon made itself is left out: local0, link-local addresses (`enable ip6 interface` when
//! IPv6 has no global address), connected/local/adjacency routes, learned neighbours and MACs,
//! a BVI's own L2 FIB entry. Packet-generator streams are runtime state, not configuration.

use crate::error::{VnetError, VnetResult};
use crate::interface::{Interfaces, SwIfIndex};
use crate::ip4::Ip4Control;
use crate::ip6::Ip6Control;
use sluice_cli::{Args, CliError, CommandTree};
use sluice_graph::Vlib;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};

/// The CLI line creating an interface of a driver (None: it cannot be recreated).
pub type CreatorFn = fn(&mut Vlib, SwIfIndex) -> Option<String>;

/// Whether the creator line of interface `peer` cross-connects `rx` to it itself (then no
/// `set interface l2 xconnect <rx> <peer>` line is printed).
pub type ImpliedXconnectFn = fn(&mut Vlib, SwIfIndex, SwIfIndex) -> bool;

/// Creators by driver name (a `Vlib` extension).
#[derive(Default)]
pub struct Creators {
    list: Vec<(&'static str, CreatorFn)>,
    implied_xc: Vec<(&'static str, ImpliedXconnectFn)>,
}

/// Says how to recreate the interfaces of `driver` (drivers call this from `init`).
pub fn register_creator(vm: &mut Vlib, driver: &'static str, f: CreatorFn) {
    let l = &mut vm.ext_mut::<Creators>().list;
    l.retain(|(d, _)| *d != driver);
    l.push((driver, f));
}

/// Says which cross-connects to interfaces of `driver` their creator lines make already.
pub fn register_implied_xconnect(vm: &mut Vlib, driver: &'static str, f: ImpliedXconnectFn) {
    let l = &mut vm.ext_mut::<Creators>().implied_xc;
    l.retain(|(d, _)| *d != driver);
    l.push((driver, f));
}

/// A plugin's part of the running configuration: the lines recreating what it owns, run
/// after interfaces, tables and routes exist. `features` are the feature nodes its lines
/// enable themselves (`set interface nat44 in pg0` enables `nat44-ed-in2out`): they are left
/// out of the generic `set interface feature` lines.
#[derive(Clone, Copy)]
pub struct Section {
    /// The plugin (one section each; registering again replaces it).
    pub name: &'static str,
    /// The lines.
    pub lines: fn(&mut Vlib) -> Vec<String>,
    /// Feature nodes the lines enable.
    pub features: &'static [&'static str],
}

/// The plugins' sections (a `Vlib` extension).
#[derive(Default)]
pub struct Sections {
    list: Vec<Section>,
}

/// Adds plugin `name`'s section to `show running-config` (plugins call this from `init`):
/// `lines` recreates its configuration, `features` are the feature nodes those lines enable.
pub fn register_section(
    vm: &mut Vlib,
    name: &'static str,
    lines: fn(&mut Vlib) -> Vec<String>,
    features: &'static [&'static str],
) {
    let l = &mut vm.ext_mut::<Sections>().list;
    l.retain(|x| x.name != name);
    l.push(Section {
        name,
        lines,
        features,
    });
}

/// Registers the commands.
pub fn register_cli(t: &mut CommandTree<Vlib>) {
    t.add(
        "show running-config",
        "show running-config — the configuration as CLI lines that recreate it",
        cli_show,
    );
    t.add(
        "save running-config",
        "save running-config <file> — write show running-config to a file of the capture directory (an exec script)",
        cli_save,
    );
    // VPP users type `sh run` for `show runtime`: keep it that.
    t.alias("show run", "show runtime");
}

fn cli_show(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    Ok(running_config(vm))
}

fn cli_save(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let file = a.word("file name")?;
    a.finish()?;
    let path = save(vm, &file)?;
    Ok(format!("{}\n", path.display()))
}

/// Writes the running configuration to `name`, a file of the capture directory (`unix {
/// capture-dir }`, the same rules as pcap files: a file name or `<dir>/<file>`, created
/// owner-only under a fresh name and renamed into place, never written through a symlink).
/// Returns the path written.
pub fn save(vm: &mut Vlib, name: &str) -> VnetResult<std::path::PathBuf> {
    let text = running_config(vm);
    let dir = vm
        .ext::<sluice_graph::pcap::CaptureDir>()
        .cloned()
        .unwrap_or_default();
    let (mut f, path) = dir
        .0
        .create(name)
        .map_err(|e| VnetError::invalid(e.to_string()))?;
    std::io::Write::write_all(&mut f, text.as_bytes())
        .and_then(|_| f.sync_all())
        .map_err(|e| VnetError::System(format!("cannot write `{}': {e}", path.display())))?;
    Ok(path)
}

/// index, name, driver, MAC, MTU, promiscuous, admin up.
type IfRow = (u32, String, String, [u8; 6], u32, bool, bool);

fn mac(m: [u8; 6]) -> String {
    sluice_wire::Mac(m).to_string()
}

/// The running configuration.
pub fn running_config(vm: &mut Vlib) -> String {
    let mut out: Vec<String> = Vec::new();
    let ifs: Vec<IfRow> = vm
        .ext_mut::<Interfaces>()
        .list
        .iter()
        .filter(|i| !i.deleted && i.sw_if_index.0 != 0)
        .map(|i| {
            (
                i.sw_if_index.0,
                i.name.clone(),
                i.driver.clone(),
                i.mac,
                i.mtu,
                i.promisc,
                i.admin_up,
            )
        })
        .collect();
    let names: BTreeMap<u32, String> = ifs.iter().map(|i| (i.0, i.1.clone())).collect();
    let name = |i: u32| {
        names
            .get(&i)
            .cloned()
            .unwrap_or_else(|| format!("sw_if_index-{i}"))
    };

    // Neighbour policy.
    for (fam, v6) in [("ip4", false), ("ip6", true)] {
        if let Ok(c) = crate::neighbor::config(vm, v6) {
            if c != crate::neighbor::NeighborConfig::default() {
                out.push(format!(
                    "set ip neighbor-config {fam} limit {} age {} {}",
                    c.limit,
                    c.age,
                    if c.recycle { "recycle" } else { "norecycle" }
                ));
            }
        }
    }
    // Tables.
    for (id, _, _) in crate::ip_family::tables::<Ip4Control>(vm)
        .into_iter()
        .filter(|t| t.0 != 0)
    {
        out.push(format!("ip table add {id}"));
    }
    for (id, _, _) in crate::ip_family::tables::<Ip6Control>(vm)
        .into_iter()
        .filter(|t| t.0 != 0)
    {
        out.push(format!("ip6 table add {id}"));
    }
    // Bridge domains.
    let bds = crate::l2::bridge_domains(vm);
    for (id, s, _, _) in &bds {
        out.push(format!(
            "create bridge-domain {id} learn {} forward {} flood {} uu-flood {} mac-age {}",
            s.learn as u8, s.forward as u8, s.flood as u8, s.uu_flood as u8, s.mac_age
        ));
    }
    // Interfaces, in index order.
    let creators = vm.ext_mut::<Creators>().list.clone();
    for (i, ifname, driver, m, mtu, promisc, up) in &ifs {
        let sw = SwIfIndex(*i);
        let create = match driver.as_str() {
            "loopback" => {
                let n = ifname.strip_prefix("loop").unwrap_or("0");
                Some(format!(
                    "create loopback interface mac {} instance {n}",
                    mac(*m)
                ))
            }
            "sub" => vm
                .ext_mut::<crate::subif::SubIfs>()
                .subs
                .get(i)
                .map(|(s, _)| *s)
                .map(|s| {
                    let id = ifname.rsplit('.').next().unwrap_or("0");
                    let tag = if s.dot1ad { "dot1ad" } else { "dot1q" };
                    let inner = if s.inner != 0 {
                        format!(" inner-dot1q {}", s.inner)
                    } else {
                        String::new()
                    };
                    format!(
                        "create sub-interfaces {} {id} {tag} {}{inner} exact-match",
                        name(s.parent),
                        s.outer
                    )
                }),
            d => creators
                .iter()
                .find(|(c, _)| *c == d)
                .and_then(|(_, f)| f(vm, sw)),
        };
        match create {
            Some(c) => out.push(c),
            None => out.push(format!(
                "# interface {ifname} (driver {driver}) is not recreated"
            )),
        }
        if driver != "loopback" {
            out.push(format!("set interface mac address {ifname} {}", mac(*m)));
        }
        if *mtu != 1500 {
            out.push(format!("set interface mtu {mtu} {ifname}"));
        }
        if *promisc {
            out.push(format!("set interface promiscuous on {ifname}"));
        }
        let t4 = crate::ip4::if_table_id(vm, *i);
        if t4 != 0 {
            out.push(format!("set interface ip table {ifname} {t4}"));
        }
        let t6 = crate::ip6::if_table_id(vm, *i);
        if t6 != 0 {
            out.push(format!("set interface ip6 table {ifname} {t6}"));
        }
        for (a, l) in crate::ip4::addresses(vm, *i) {
            out.push(format!(
                "set interface ip address {ifname} {}/{l}",
                Ipv4Addr::from(a)
            ));
        }
        let v6 = crate::ip6::addresses(vm, *i);
        let globals: Vec<_> = v6
            .iter()
            .filter(|(a, _)| !crate::ip6::is_link_local(*a))
            .collect();
        if globals.is_empty() && !v6.is_empty() {
            out.push(format!("enable ip6 interface {ifname}"));
        }
        for (a, l) in globals {
            out.push(format!(
                "set interface ip address {ifname} {}/{l}",
                Ipv6Addr::from(*a)
            ));
        }
        if *up {
            out.push(format!("set interface state {ifname} up"));
        }
    }
    // L2 membership and what refers to other interfaces.
    for (id, _, members, bvi) in &bds {
        for (m, shg) in members {
            let b = if *bvi == Some(*m) { " bvi" } else { "" };
            let g = if *shg != 0 {
                format!(" shg {shg}")
            } else {
                String::new()
            };
            out.push(format!("set interface l2 bridge {} {id}{b}{g}", name(*m)));
        }
    }
    let implied = vm.ext_mut::<Creators>().implied_xc.clone();
    for (i, ..) in &ifs {
        if let Some(p) = crate::interface::xconnect_peer(vm, SwIfIndex(*i)) {
            let peer_driver = ifs.iter().find(|x| x.0 == p.0).map(|x| x.2.as_str());
            if implied
                .iter()
                .any(|(d, f)| Some(*d) == peer_driver && f(vm, SwIfIndex(*i), p))
            {
                continue;
            }
            out.push(format!(
                "set interface l2 xconnect {} {}",
                name(*i),
                name(p.0)
            ));
        }
    }
    let patches: Vec<(u32, u32)> = vm
        .ext_mut::<crate::l2patch::L2Patches>()
        .map
        .iter()
        .map(|(&a, &b)| (a, b))
        .collect();
    for (rx, tx) in patches {
        out.push(format!("test l2patch rx {} tx {}", name(rx), name(tx)));
    }
    let bvis: Vec<(u16, u32)> = bds
        .iter()
        .filter_map(|(id, _, _, b)| b.map(|b| (*id, b)))
        .collect();
    for (m, bd, i, st) in crate::l2::l2fib_entries(vm, None) {
        let own_bvi = bvis.contains(&(bd, i))
            && vm
                .ext_mut::<Interfaces>()
                .get(SwIfIndex(i))
                .is_some_and(|x| x.mac == m);
        if st && !own_bvi {
            out.push(format!("l2fib add {} {bd} {} static", mac(m), name(i)));
        }
    }
    // Static neighbours.
    let mut nbrs = crate::ip_family::neighbors::<Ip4Control>(vm);
    nbrs.extend(crate::ip_family::neighbors::<Ip6Control>(vm));
    for (i, a, m, st) in nbrs {
        if st {
            out.push(format!("ip neighbor {} {a} {} static", name(i), mac(m)));
        }
    }
    // Static routes.
    let mut tables: Vec<(u32, bool)> = crate::ip_family::tables::<Ip4Control>(vm)
        .into_iter()
        .map(|t| (t.0, false))
        .collect();
    tables.extend(
        crate::ip_family::tables::<Ip6Control>(vm)
            .into_iter()
            .map(|t| (t.0, true)),
    );
    for (id, v6) in tables {
        let mut lines = Vec::new();
        use crate::routes::StaticPath;
        let mut emit = |r: &crate::routes::RouteInfo| {
            if !r.sources.contains(&crate::routes::Source::Static) {
                return;
            }
            let Some(addr) = r.addr else { return };
            let table = if id != 0 {
                format!(" table {id}")
            } else {
                String::new()
            };
            let mut l = format!("ip route add{table} {addr}/{}", r.len);
            if r.drop {
                l.push_str(" drop");
            } else {
                for (p, w) in &r.paths {
                    match p {
                        StaticPath::Via(nh, i) => {
                            l.push_str(&format!(" via {nh}"));
                            if let Some(i) = i {
                                l.push(' ');
                                l.push_str(&name(*i));
                            }
                        }
                        StaticPath::Interface(i) => {
                            l.push_str(" via ");
                            l.push_str(&name(*i));
                        }
                        StaticPath::Local => l.push_str(" via local"),
                    }
                    if *w != 1 {
                        l.push_str(&format!(" weight {w}"));
                    }
                }
            }
            lines.push(l);
        };
        let _ = if v6 {
            crate::ip6::for_each_route(vm, id, &mut emit)
        } else {
            crate::ip4::for_each_route(vm, id, &mut emit)
        };
        out.extend(lines);
    }
    // Plugins' sections.
    let sections = vm.ext_mut::<Sections>().list.clone();
    for s in &sections {
        out.extend((s.lines)(vm));
    }
    // Features and rx queues.
    for (i, ifname, ..) in &ifs {
        for (arc, f) in crate::feature::enabled(vm, *i) {
            if sections.iter().any(|s| s.features.contains(&f.as_str())) {
                continue;
            }
            out.push(format!("set interface feature {ifname} {f} arc {arc}"));
        }
    }
    let mut qs = crate::rxq::all_queues(vm);
    qs.sort_by_key(|(_, q)| (q.sw_if.0, q.queue));
    for (_, q) in qs {
        let n = name(q.sw_if.0);
        out.push(format!(
            "set interface rx-mode {n} queue {} {}",
            q.queue,
            q.mode.as_str()
        ));
        let t = if q.thread == 0 {
            "main".to_string()
        } else {
            format!("worker {}", q.thread - 1)
        };
        out.push(format!(
            "set interface rx-placement {n} queue {} {t}",
            q.queue
        ));
    }
    let mut s = out.join("\n");
    s.push('\n');
    s
}
