//! vnet's API messages (`api/interface.api`, `api/ip.api`, `api/l2.api`): each handler
//! converts the message to the arguments of the action the CLI calls too, and the action's
//! [`VnetError`] to the API's code and text. Dumps read the same state the `show` commands
//! print. Events: interface admin/link changes and deletions (found by comparing the
//! interface table with what was last sent), neighbours and routes (from [`crate::events`]).

use crate::error::{VnetError, VnetResult};
use crate::interface::{Interfaces, SwIfIndex};
use crate::ip4::Ip4Control;
use crate::ip6::Ip6Control;
use crate::ip_family::IpControl;
use crate::routes::{RoutePaths, Source};
use sluice_api::types::{MacAddress, Prefix};
use sluice_api::{ApiError, ApiRegistry, Ctx, Events, Stream};
use sluice_graph::{RxMode, Vlib};
use std::net::{IpAddr, Ipv4Addr};

/// Types generated from `api/interface.api`.
pub mod interface {
    sluice_api::include_api!("interface");
}

/// Types generated from `api/ip.api`.
pub mod ip {
    sluice_api::include_api!("ip");
}

/// Types generated from `api/l2.api`.
pub mod l2 {
    sluice_api::include_api!("l2");
}

/// Types generated from `api/pg.api`.
pub mod pg {
    sluice_api::include_api!("pg");
}

/// Types generated from `api/trace.api`.
pub mod trace {
    sluice_api::include_api!("trace");
}

use interface as ifm;

type R<T> = Result<T, ApiError>;

/// Registers vnet's modules, handlers and event sources.
pub fn register(r: &mut ApiRegistry) {
    r.module(&interface::MODULE);
    r.module(&ip::MODULE);
    r.module(&l2::MODULE);
    r.module(&pg::MODULE);
    r.module(&trace::MODULE);

    r.dump(sw_interface_dump);
    r.request(sw_interface_set_flags);
    r.request(sw_interface_set_mtu);
    r.request(sw_interface_set_mac_address);
    r.request(sw_interface_set_promisc);
    r.request(sw_interface_clear_counters);
    r.request(create_loopback);
    r.request(delete_loopback);
    r.request(create_subif);
    r.request(delete_subif);
    r.request(feature_enable_disable);
    r.dump(feature_dump);
    r.request(sw_interface_set_rx_mode);
    r.request(sw_interface_set_rx_placement);
    r.dump(sw_interface_rx_placement_dump);
    r.request(want_interface_events);

    r.request(sw_interface_add_del_address);
    r.dump(ip_address_dump);
    r.request(sw_interface_ip6_enable);
    r.request(sw_interface_set_table);
    r.request(ip_table_add_del);
    r.dump(ip_table_dump);
    r.request(ip_route_add_del);
    r.request(ip_route_add_del_multi);
    r.dump(ip_route_dump);
    r.request(ip_neighbor_add_del);
    r.dump(ip_neighbor_dump);
    r.request(ip_neighbor_config);
    r.request(want_ip_neighbor_events);
    r.request(want_ip_route_events);

    r.request(bridge_domain_add_del);
    r.dump(bridge_domain_dump);
    r.request(sw_interface_set_l2_bridge);
    r.request(sw_interface_set_l2_xconnect);
    r.request(l2fib_add_del);
    r.dump(l2_fib_table_dump);
    r.request(l2_patch_add_del);

    r.request(pg_create_interface);
    r.request(pg_stream_add);
    r.request(pg_stream_add_packets);
    r.request(pg_stream_delete);
    r.request(pg_enable_disable);
    r.request(pg_capture);
    r.dump(pg_stream_dump);

    r.request(trace_add);
    r.request(trace_clear);
    r.dump(trace_dump);
    r.request(pcap_trace_on);
    r.request(pcap_trace_off);
    r.request(save_running_config);

    r.poller(poll_events);
}

fn sw(i: u32) -> SwIfIndex {
    SwIfIndex(i)
}

fn ok<T>(r: VnetResult, reply: T) -> R<T> {
    r.map(|_| reply).map_err(ApiError::from)
}

// ---- interface -----------------------------------------------------------------------------

fn sw_interface_dump(
    vm: &mut Vlib,
    q: ifm::SwInterfaceDump,
    out: &mut Stream<'_, '_, ifm::SwInterfaceDetails>,
) -> R<()> {
    crate::interface::ensure_local0(vm);
    let rows: Vec<_> = vm
        .ext_mut::<Interfaces>()
        .list
        .iter()
        .filter(|i| !i.deleted && (q.name_filter.is_empty() || i.name == q.name_filter))
        .map(|i| {
            use crate::interface::counter as c;
            (
                i.sw_if_index,
                i.name.clone(),
                i.driver.clone(),
                i.mac,
                i.admin_up,
                i.link_up(),
                i.promisc,
                i.mtu,
                [
                    c::RX_PACKETS,
                    c::RX_BYTES,
                    c::TX_PACKETS,
                    c::TX_BYTES,
                    c::DROPS,
                ]
                .map(|k| i.counters.total(k)),
            )
        })
        .collect();
    for (idx, name, driver, mac, admin_up, link_up, promisc, mtu, cnt) in rows {
        let sub = vm
            .ext_mut::<crate::subif::SubIfs>()
            .subs
            .get(&idx.0)
            .map(|s| s.0);
        let xc = crate::interface::xconnect_peer(vm, idx);
        let bd = crate::interface::with_if_attr(vm, idx.0, |x| {
            x.l2_bd.load(std::sync::atomic::Ordering::Relaxed)
        })
        .unwrap_or(0);
        out.send(&ifm::SwInterfaceDetails {
            sw_if_index: idx.0,
            interface_name: name,
            driver,
            l2_address: MacAddress(mac),
            admin_up,
            link_up,
            promisc,
            mtu,
            sup_sw_if_index: sub.map_or(idx.0, |s| s.parent),
            outer_vlan_id: sub.map_or(0, |s| s.outer),
            inner_vlan_id: sub.map_or(0, |s| s.inner),
            dot1ad: sub.is_some_and(|s| s.dot1ad),
            ip4_table_id: crate::ip4::if_table_id(vm, idx.0),
            ip6_table_id: crate::ip6::if_table_id(vm, idx.0),
            l2_mode: if xc.is_some() {
                ifm::L2Mode::Xconnect
            } else if bd != 0 {
                ifm::L2Mode::Bridge
            } else {
                ifm::L2Mode::L3
            },
            xconnect_sw_if_index: xc.map_or(0, |x| x.0),
            bd_id: if bd == 0 {
                0
            } else {
                crate::l2::bd_id_shown(bd as u16)
            },
            rx_packets: cnt[0],
            rx_bytes: cnt[1],
            tx_packets: cnt[2],
            tx_bytes: cnt[3],
            drops: cnt[4],
        });
    }
    Ok(())
}

fn sw_interface_set_flags(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: ifm::SwInterfaceSetFlags,
) -> R<ifm::SwInterfaceSetFlagsReply> {
    ok(
        crate::interface::set_admin_state(vm, sw(q.sw_if_index), q.admin_up),
        ifm::SwInterfaceSetFlagsReply {},
    )
}

fn sw_interface_set_mtu(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: ifm::SwInterfaceSetMtu,
) -> R<ifm::SwInterfaceSetMtuReply> {
    ok(
        crate::interface::set_mtu(vm, sw(q.sw_if_index), q.mtu),
        ifm::SwInterfaceSetMtuReply {},
    )
}

fn sw_interface_set_mac_address(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: ifm::SwInterfaceSetMacAddress,
) -> R<ifm::SwInterfaceSetMacAddressReply> {
    ok(
        crate::interface::set_mac(vm, sw(q.sw_if_index), q.mac_address.0),
        ifm::SwInterfaceSetMacAddressReply {},
    )
}

fn sw_interface_set_promisc(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: ifm::SwInterfaceSetPromisc,
) -> R<ifm::SwInterfaceSetPromiscReply> {
    ok(
        crate::interface::set_promisc(vm, sw(q.sw_if_index), q.enable),
        ifm::SwInterfaceSetPromiscReply {},
    )
}

fn sw_interface_clear_counters(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    _: ifm::SwInterfaceClearCounters,
) -> R<ifm::SwInterfaceClearCountersReply> {
    crate::interface::clear_counters(vm);
    Ok(ifm::SwInterfaceClearCountersReply {})
}

fn create_loopback(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: ifm::CreateLoopback,
) -> R<ifm::CreateLoopbackReply> {
    let mac = (q.mac_address.0 != [0; 6]).then_some(q.mac_address.0);
    let inst = q.is_specified.then_some(q.user_instance);
    let i = crate::loopback::create(vm, mac, inst)?;
    Ok(ifm::CreateLoopbackReply { sw_if_index: i.0 })
}

fn delete_loopback(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: ifm::DeleteLoopback,
) -> R<ifm::DeleteLoopbackReply> {
    ok(
        crate::loopback::delete(vm, sw(q.sw_if_index)),
        ifm::DeleteLoopbackReply {},
    )
}

fn create_subif(vm: &mut Vlib, _: &mut Ctx<'_>, q: ifm::CreateSubif) -> R<ifm::CreateSubifReply> {
    let outer = (q.outer_vlan_id != 0).then_some(q.outer_vlan_id);
    let i = crate::subif::create(
        vm,
        sw(q.sw_if_index),
        q.sub_id,
        outer,
        q.inner_vlan_id,
        q.dot1ad,
    )?;
    Ok(ifm::CreateSubifReply { sw_if_index: i.0 })
}

fn delete_subif(vm: &mut Vlib, _: &mut Ctx<'_>, q: ifm::DeleteSubif) -> R<ifm::DeleteSubifReply> {
    ok(
        crate::subif::delete(vm, sw(q.sw_if_index)),
        ifm::DeleteSubifReply {},
    )
}

fn feature_enable_disable(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: ifm::FeatureEnableDisable,
) -> R<ifm::FeatureEnableDisableReply> {
    ok(
        crate::feature::set_feature(vm, q.sw_if_index, &q.arc_name, &q.feature_name, q.enable),
        ifm::FeatureEnableDisableReply {},
    )
}

fn feature_dump(
    vm: &mut Vlib,
    q: ifm::FeatureDump,
    out: &mut Stream<'_, '_, ifm::FeatureDetails>,
) -> R<()> {
    crate::interface::check(vm, sw(q.sw_if_index))?;
    for (arc, f) in crate::feature::enabled(vm, q.sw_if_index) {
        out.send(&ifm::FeatureDetails {
            sw_if_index: q.sw_if_index,
            arc_name: arc.to_string(),
            feature_name: f,
        });
    }
    Ok(())
}

fn queue(valid: bool, id: u32) -> VnetResult<Option<u16>> {
    if !valid {
        return Ok(None);
    }
    u16::try_from(id)
        .map(Some)
        .map_err(|_| VnetError::invalid(format!("queue `{id}' out of range")))
}

fn sw_interface_set_rx_mode(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: ifm::SwInterfaceSetRxMode,
) -> R<ifm::SwInterfaceSetRxModeReply> {
    let mode = match q.mode {
        ifm::RxMode::Polling => RxMode::Polling,
        ifm::RxMode::Interrupt => RxMode::Interrupt,
        ifm::RxMode::Adaptive => RxMode::Adaptive,
    };
    let r = queue(q.queue_id_valid, q.queue_id)
        .and_then(|qu| crate::rxq::set_rx_mode(vm, sw(q.sw_if_index), qu, mode));
    ok(r, ifm::SwInterfaceSetRxModeReply {})
}

fn sw_interface_set_rx_placement(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: ifm::SwInterfaceSetRxPlacement,
) -> R<ifm::SwInterfaceSetRxPlacementReply> {
    let thread = if q.is_main {
        0
    } else {
        q.worker_id as usize + 1
    };
    let r = queue(q.queue_id_valid, q.queue_id)
        .and_then(|qu| crate::rxq::set_rx_placement(vm, sw(q.sw_if_index), qu, thread));
    ok(r, ifm::SwInterfaceSetRxPlacementReply {})
}

fn sw_interface_rx_placement_dump(
    vm: &mut Vlib,
    _: ifm::SwInterfaceRxPlacementDump,
    out: &mut Stream<'_, '_, ifm::SwInterfaceRxPlacementDetails>,
) -> R<()> {
    for (d, q) in crate::rxq::all_queues(vm) {
        out.send(&ifm::SwInterfaceRxPlacementDetails {
            sw_if_index: q.sw_if.0,
            queue_id: q.queue as u32,
            thread_index: q.thread as u32,
            mode: match q.mode {
                RxMode::Polling => ifm::RxMode::Polling,
                RxMode::Interrupt => ifm::RxMode::Interrupt,
                RxMode::Adaptive => ifm::RxMode::Adaptive,
            },
            input_node: d.node.to_string(),
        });
    }
    Ok(())
}

fn want_interface_events(
    vm: &mut Vlib,
    ctx: &mut Ctx<'_>,
    q: ifm::WantInterfaceEvents,
) -> R<ifm::WantInterfaceEventsReply> {
    ctx.subscribe::<ifm::SwInterfaceEvent>(q.enable);
    // Start from the current state: only changes after the subscription are sent.
    let seen = if_states(vm);
    vm.ext_mut::<EventState>().ifs = seen;
    Ok(ifm::WantInterfaceEventsReply {})
}

// ---- ip --------------------------------------------------------------------------------------

fn sw_interface_add_del_address(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: ip::SwInterfaceAddDelAddress,
) -> R<ip::SwInterfaceAddDelAddressReply> {
    let i = sw(q.sw_if_index);
    let r = match q.prefix.addr {
        IpAddr::V4(a) => crate::ip4::address_add_del(vm, i, q.is_add, a.into(), q.prefix.len),
        IpAddr::V6(a) => crate::ip6::address_add_del(vm, i, q.is_add, a.into(), q.prefix.len),
    };
    ok(r, ip::SwInterfaceAddDelAddressReply {})
}

fn ip_address_dump(
    vm: &mut Vlib,
    q: ip::IpAddressDump,
    out: &mut Stream<'_, '_, ip::IpAddressDetails>,
) -> R<()> {
    let ifs: Vec<u32> = if q.sw_if_index == u32::MAX {
        vm.ext_mut::<Interfaces>()
            .list
            .iter()
            .filter(|i| !i.deleted)
            .map(|i| i.sw_if_index.0)
            .collect()
    } else {
        crate::interface::check(vm, sw(q.sw_if_index))?;
        vec![q.sw_if_index]
    };
    for i in ifs {
        let v = if q.is_ipv6 {
            address_prefixes::<Ip6Control>(vm, i)
        } else {
            address_prefixes::<Ip4Control>(vm, i)
        };
        for prefix in v {
            out.send(&ip::IpAddressDetails {
                sw_if_index: i,
                prefix,
            });
        }
    }
    Ok(())
}

/// The addresses of interface `i` in family `C`.
fn address_prefixes<C: IpControl>(vm: &mut Vlib, i: u32) -> Vec<Prefix> {
    crate::ip_family::addresses::<C>(vm, i)
        .into_iter()
        .map(|(a, len)| Prefix {
            addr: C::Ip::from(a).into(),
            len,
        })
        .collect()
}

fn sw_interface_ip6_enable(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: ip::SwInterfaceIp6Enable,
) -> R<ip::SwInterfaceIp6EnableReply> {
    ok(
        crate::ip6::enable(vm, sw(q.sw_if_index)),
        ip::SwInterfaceIp6EnableReply {},
    )
}

fn sw_interface_set_table(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: ip::SwInterfaceSetTable,
) -> R<ip::SwInterfaceSetTableReply> {
    let r = if q.is_ipv6 {
        crate::ip6::set_interface_table(vm, sw(q.sw_if_index), q.table_id)
    } else {
        crate::ip4::set_interface_table(vm, sw(q.sw_if_index), q.table_id)
    };
    ok(r, ip::SwInterfaceSetTableReply {})
}

fn ip_table_add_del(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: ip::IpTableAddDel,
) -> R<ip::IpTableAddDelReply> {
    let r = if q.is_ipv6 {
        crate::ip6::table_add_del(vm, q.table_id, q.is_add)
    } else {
        crate::ip4::table_add_del(vm, q.table_id, q.is_add)
    };
    ok(r, ip::IpTableAddDelReply {})
}

fn ip_table_dump(
    vm: &mut Vlib,
    _: ip::IpTableDump,
    out: &mut Stream<'_, '_, ip::IpTableDetails>,
) -> R<()> {
    for (v6, t) in [
        (false, crate::ip_family::tables::<Ip4Control>(vm)),
        (true, crate::ip_family::tables::<Ip6Control>(vm)),
    ] {
        for (id, fib, n) in t {
            out.send(&ip::IpTableDetails {
                table_id: id,
                is_ipv6: v6,
                fib_index: fib,
                route_count: n as u32,
            });
        }
    }
    Ok(())
}

/// The paths of an `ip_route_add_del[_multi]` in family `C`'s form (next hops of the other
/// family are refused, naming `prefix`).
fn paths<C: IpControl>(
    fib_paths: &[ip::FibPath],
    is_drop: bool,
    table_id: u32,
    prefix: &dyn std::fmt::Display,
) -> VnetResult<RoutePaths<C::Ip>> {
    let mut out = Vec::with_capacity(fib_paths.len());
    let (mut via_if, mut local) = (Vec::new(), false);
    for p in fib_paths {
        // No next hop: an attached path on `sw_if_index`, or receive (`LOCAL_PATH`), as
        // `ip_route_dump` gives them.
        if p.next_hop.is_unspecified() && p.sw_if_index == LOCAL_PATH {
            local = true;
            continue;
        }
        if p.next_hop.is_unspecified() && p.sw_if_index != 0 {
            via_if.push((sw(p.sw_if_index), p.weight.max(1)));
            continue;
        }
        let nh = C::from_ip(p.next_hop).ok_or_else(|| {
            VnetError::invalid(format!(
                "next hop {} is not {} like the prefix {prefix}",
                p.next_hop,
                C::NAME
            ))
        })?;
        let i = (p.sw_if_index != 0).then_some(sw(p.sw_if_index));
        out.push((nh, i, p.weight.max(1)));
    }
    Ok(RoutePaths {
        paths: out,
        drop: is_drop,
        table: table_id,
        via_if,
        local,
        ..Default::default()
    })
}

/// A `fib_path`'s `sw_if_index` with an unspecified next hop meaning `via local`.
const LOCAL_PATH: u32 = u32::MAX;

/// Adds or deletes `prefixes` (all of family `C`, else an error naming the odd one by
/// `name(k)`) with the same paths; `first` names the family's prefix in path errors.
#[allow(clippy::too_many_arguments)]
fn add_del_prefixes<C: IpControl>(
    vm: &mut Vlib,
    is_add: bool,
    prefixes: &[Prefix],
    fib_paths: &[ip::FibPath],
    is_drop: bool,
    table_id: u32,
    first: &dyn std::fmt::Display,
    name: &dyn Fn(usize) -> String,
) -> VnetResult {
    let mut v = Vec::with_capacity(prefixes.len());
    for (k, p) in prefixes.iter().enumerate() {
        let a = C::from_ip(p.addr).ok_or_else(|| {
            VnetError::invalid(format!("{} is not {} like prefixes[0]", name(k), C::NAME))
        })?;
        v.push((a.into(), p.len));
    }
    let p = paths::<C>(fib_paths, is_drop, table_id, first)?;
    crate::ip_family::routes_add_del::<C>(vm, is_add, 1, &v, &p).map_err(|e| match e.index {
        Some(k) if prefixes.len() > 1 => e.error.context(&name(k)),
        _ => e.error,
    })
}

fn ip_route_add_del(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: ip::IpRouteAddDel,
) -> R<ip::IpRouteAddDelReply> {
    let w = q.prefix;
    let name = |_: usize| w.to_string();
    let (d, t) = (q.is_drop, q.table_id);
    let r = if w.addr.is_ipv4() {
        add_del_prefixes::<Ip4Control>(vm, q.is_add, &[w], &q.paths, d, t, &w, &name)
    } else {
        add_del_prefixes::<Ip6Control>(vm, q.is_add, &[w], &q.paths, d, t, &w, &name)
    };
    ok(r, ip::IpRouteAddDelReply {})
}

/// Many prefixes with the same change in one message (see `ip.api`): the batch form a
/// pipelining client uses to load a large table.
fn ip_route_add_del_multi(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: ip::IpRouteAddDelMulti,
) -> R<ip::IpRouteAddDelMultiReply> {
    let Some(first) = q.prefixes.first() else {
        return Ok(ip::IpRouteAddDelMultiReply { count: 0 });
    };
    let name = |k: usize| format!("prefixes[{k}] {}", q.prefixes[k]);
    let (d, t, ps) = (q.is_drop, q.table_id, &q.prefixes);
    let r = if first.addr.is_ipv4() {
        add_del_prefixes::<Ip4Control>(vm, q.is_add, ps, &q.paths, d, t, first, &name)
    } else {
        add_del_prefixes::<Ip6Control>(vm, q.is_add, ps, &q.paths, d, t, first, &name)
    };
    ok(
        r,
        ip::IpRouteAddDelMultiReply {
            count: q.prefixes.len() as u32,
        },
    )
}

fn source(s: Source) -> ip::RouteSource {
    match s {
        Source::Local => ip::RouteSource::Local,
        Source::Connected => ip::RouteSource::Connected,
        Source::Adjacency => ip::RouteSource::Adjacency,
        Source::Static => ip::RouteSource::Static,
    }
}

fn ip_route_dump(
    vm: &mut Vlib,
    q: ip::IpRouteDump,
    out: &mut Stream<'_, '_, ip::IpRouteDetails>,
) -> R<()> {
    let table_id = q.table_id;
    let send = |r: &crate::routes::RouteInfo| {
        out.send(&ip::IpRouteDetails {
            table_id,
            prefix: Prefix {
                addr: r.addr.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
                len: r.len,
            },
            sources: r.sources.iter().map(|&s| source(s)).collect(),
            is_drop: r.drop,
            paths: r
                .paths
                .iter()
                .map(|&(p, w)| {
                    // An attached or local path: no next hop (VPP's zero address).
                    let none = match r.addr {
                        Some(IpAddr::V6(_)) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
                        _ => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                    };
                    let (next_hop, i) = match p {
                        crate::routes::StaticPath::Via(nh, i) => (nh, i),
                        crate::routes::StaticPath::Interface(i) => (none, Some(i)),
                        crate::routes::StaticPath::Local => (none, Some(LOCAL_PATH)),
                    };
                    ip::FibPath {
                        next_hop,
                        sw_if_index: i.unwrap_or(0),
                        weight: w,
                    }
                })
                .collect(),
            installed_paths: r.installed as u32,
        })
    };
    if q.is_ipv6 {
        crate::ip6::for_each_route(vm, q.table_id, send)?;
    } else {
        crate::ip4::for_each_route(vm, q.table_id, send)?;
    }
    Ok(())
}

fn ip_neighbor_add_del(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: ip::IpNeighborAddDel,
) -> R<ip::IpNeighborAddDelReply> {
    ok(
        crate::neighbor::add_del(
            vm,
            q.is_add,
            sw(q.sw_if_index),
            q.ip_address,
            q.mac_address.0,
            q.is_static,
        ),
        ip::IpNeighborAddDelReply {},
    )
}

fn ip_neighbor_dump(
    vm: &mut Vlib,
    q: ip::IpNeighborDump,
    out: &mut Stream<'_, '_, ip::IpNeighborDetails>,
) -> R<()> {
    let rows = if q.is_ipv6 {
        crate::ip_family::neighbors::<Ip6Control>(vm)
    } else {
        crate::ip_family::neighbors::<Ip4Control>(vm)
    };
    for (i, a, m, s) in rows {
        out.send(&ip::IpNeighborDetails {
            sw_if_index: i,
            ip_address: a,
            mac_address: MacAddress(m),
            is_static: s,
        });
    }
    Ok(())
}

fn ip_neighbor_config(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: ip::IpNeighborConfig,
) -> R<ip::IpNeighborConfigReply> {
    let cfg = crate::neighbor::NeighborConfig {
        limit: q.max_number as usize,
        age: q.max_age,
        recycle: q.recycle,
    };
    ok(
        crate::neighbor::set_config(vm, q.is_ipv6, cfg),
        ip::IpNeighborConfigReply {},
    )
}

fn want_ip_neighbor_events(
    _: &mut Vlib,
    ctx: &mut Ctx<'_>,
    q: ip::WantIpNeighborEvents,
) -> R<ip::WantIpNeighborEventsReply> {
    ctx.subscribe::<ip::IpNeighborEvent>(q.enable);
    Ok(ip::WantIpNeighborEventsReply {})
}

fn want_ip_route_events(
    _: &mut Vlib,
    ctx: &mut Ctx<'_>,
    q: ip::WantIpRouteEvents,
) -> R<ip::WantIpRouteEventsReply> {
    ctx.subscribe::<ip::IpRouteEvent>(q.enable);
    Ok(ip::WantIpRouteEventsReply {})
}

// ---- l2 --------------------------------------------------------------------------------------

fn bridge_domain_add_del(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: l2::BridgeDomainAddDel,
) -> R<l2::BridgeDomainAddDelReply> {
    let st = q.is_add.then_some(crate::l2::BdSettings {
        learn: q.learn,
        forward: q.forward,
        flood: q.flood,
        uu_flood: q.uu_flood,
        mac_age: q.mac_age,
    });
    ok(
        crate::l2::bridge_domain_add_del(vm, q.bd_id, st),
        l2::BridgeDomainAddDelReply {},
    )
}

fn bridge_domain_dump(
    vm: &mut Vlib,
    q: l2::BridgeDomainDump,
    out: &mut Stream<'_, '_, l2::BridgeDomainDetails>,
) -> R<()> {
    let all = crate::l2::bridge_domains(vm);
    if q.bd_id != 0 && !all.iter().any(|b| b.0 as u32 == q.bd_id) {
        return Err(VnetError::NotFound(format!("no bridge domain {}", q.bd_id)).into());
    }
    for (id, st, members, bvi) in all {
        // VPP's default domain (0) is not listed, as in `show bridge-domain`.
        if id == crate::l2::BD0 || (q.bd_id != 0 && id as u32 != q.bd_id) {
            continue;
        }
        out.send(&l2::BridgeDomainDetails {
            bd_id: id as u32,
            learn: st.learn,
            forward: st.forward,
            flood: st.flood,
            uu_flood: st.uu_flood,
            mac_age: st.mac_age,
            bvi_sw_if_index: bvi.unwrap_or(0),
            members: members
                .into_iter()
                .map(|(m, g)| l2::BridgeDomainMember {
                    sw_if_index: m,
                    shg: g,
                })
                .collect(),
        });
    }
    Ok(())
}

fn sw_interface_set_l2_bridge(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: l2::SwInterfaceSetL2Bridge,
) -> R<l2::SwInterfaceSetL2BridgeReply> {
    let i = sw(q.rx_sw_if_index);
    let r = if q.enable {
        crate::l2::set_bridge(vm, i, q.bd_id, q.bvi, q.shg)
    } else {
        crate::interface::set_l3(vm, i)
    };
    ok(r, l2::SwInterfaceSetL2BridgeReply {})
}

fn sw_interface_set_l2_xconnect(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: l2::SwInterfaceSetL2Xconnect,
) -> R<l2::SwInterfaceSetL2XconnectReply> {
    let r = if q.enable {
        crate::interface::set_xconnect(vm, sw(q.rx_sw_if_index), sw(q.tx_sw_if_index))
    } else {
        crate::interface::set_l3(vm, sw(q.rx_sw_if_index))
    };
    ok(r, l2::SwInterfaceSetL2XconnectReply {})
}

fn l2fib_add_del(vm: &mut Vlib, _: &mut Ctx<'_>, q: l2::L2fibAddDel) -> R<l2::L2fibAddDelReply> {
    let r = if q.is_add {
        crate::l2::l2fib_add(vm, q.mac.0, q.bd_id, sw(q.sw_if_index), q.static_mac)
    } else {
        crate::l2::l2fib_del(vm, q.mac.0, q.bd_id)
    };
    ok(r, l2::L2fibAddDelReply {})
}

fn l2_fib_table_dump(
    vm: &mut Vlib,
    q: l2::L2FibTableDump,
    out: &mut Stream<'_, '_, l2::L2FibTableDetails>,
) -> R<()> {
    let only = if q.bd_id == 0 {
        None
    } else {
        Some(crate::l2::bd_id(q.bd_id)?)
    };
    for (mac, bd, i, st) in crate::l2::l2fib_entries(vm, only) {
        out.send(&l2::L2FibTableDetails {
            bd_id: bd as u32,
            mac: MacAddress(mac),
            sw_if_index: i,
            static_mac: st,
        });
    }
    Ok(())
}

fn l2_patch_add_del(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: l2::L2PatchAddDel,
) -> R<l2::L2PatchAddDelReply> {
    let tx = q.is_add.then_some(sw(q.tx_sw_if_index));
    ok(
        crate::l2patch::set_patch(vm, sw(q.rx_sw_if_index), tx),
        l2::L2PatchAddDelReply {},
    )
}

// ---- pg --------------------------------------------------------------------------------------

fn pg_create_interface(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: pg::PgCreateInterface,
) -> R<pg::PgCreateInterfaceReply> {
    let i = crate::pg::create_interface(vm, q.interface_id)?;
    Ok(pg::PgCreateInterfaceReply { sw_if_index: i.0 })
}

fn pg_stream_add(vm: &mut Vlib, _: &mut Ctx<'_>, q: pg::PgStreamAdd) -> R<pg::PgStreamAddReply> {
    let pkts = crate::pg::stream::read_pcap(std::path::Path::new(&q.pcap_file))
        .map_err(VnetError::invalid)?;
    if pkts.is_empty() {
        return Err(
            VnetError::invalid(format!("pcap file `{}' has no packets", q.pcap_file)).into(),
        );
    }
    let s = PgStream {
        name: q.name,
        sw_if_index: q.sw_if_index,
        node: q.node,
        limit: q.limit,
        rate: q.rate,
        maxframe: q.maxframe,
        worker: q.has_worker.then_some(q.worker),
    };
    ok(add_pg_stream(vm, s, pkts), pg::PgStreamAddReply {})
}

fn pg_stream_add_packets(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: pg::PgStreamAddPackets,
) -> R<pg::PgStreamAddPacketsReply> {
    let pkts: Vec<Vec<u8>> = q.packets.into_iter().map(|p| p.data).collect();
    if pkts.is_empty() {
        return Err(VnetError::invalid("stream needs at least one packet").into());
    }
    if let Some(k) = pkts.iter().position(|p| p.len() < 14 || p.len() > 9216) {
        return Err(VnetError::invalid(format!(
            "packets[{k}]: {} bytes (14 to 9216)",
            pkts[k].len()
        ))
        .into());
    }
    let s = PgStream {
        name: q.name,
        sw_if_index: q.sw_if_index,
        node: q.node,
        limit: q.limit,
        rate: q.rate,
        maxframe: q.maxframe,
        worker: q.has_worker.then_some(q.worker),
    };
    ok(add_pg_stream(vm, s, pkts), pg::PgStreamAddPacketsReply {})
}

/// The fields `pg_stream_add` and `pg_stream_add_packets` share.
struct PgStream {
    name: String,
    sw_if_index: u32,
    node: String,
    limit: u64,
    rate: f64,
    maxframe: u32,
    worker: Option<u32>,
}

/// `packet-generator new` of packets `pkts` (the action the CLI calls too).
fn add_pg_stream(vm: &mut Vlib, q: PgStream, pkts: Vec<Vec<u8>>) -> VnetResult {
    let ifname = vm
        .ext_mut::<Interfaces>()
        .get(sw(q.sw_if_index))
        .map(|i| i.name.clone())
        .ok_or(VnetError::NoSuchInterface(q.sw_if_index))?;
    if q.name.is_empty() {
        return Err(VnetError::invalid("stream needs a name"));
    }
    if !(q.rate >= 0.0 && q.rate.is_finite()) {
        return Err(VnetError::invalid(format!("bad rate `{}'", q.rate)));
    }
    let def = crate::pg::stream::StreamDef {
        name: q.name,
        interface: Some(ifname),
        node: (!q.node.is_empty()).then_some(q.node),
        limit: (q.limit != 0).then_some(q.limit),
        rate: (q.rate > 0.0).then_some(q.rate),
        maxframe: if q.maxframe == 0 {
            crate::pg::FRAME
        } else {
            (q.maxframe as usize).min(crate::pg::FRAME)
        },
        worker: q.worker.map(|w| w as usize),
        source: crate::pg::stream::Source::Pcap(std::sync::Arc::new(pkts)),
        tx_interface: None,
    };
    crate::pg::add_stream(vm, def)
}

fn pg_stream_delete(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: pg::PgStreamDelete,
) -> R<pg::PgStreamDeleteReply> {
    ok(
        crate::pg::delete_stream(vm, &q.name),
        pg::PgStreamDeleteReply {},
    )
}

fn pg_enable_disable(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: pg::PgEnableDisable,
) -> R<pg::PgEnableDisableReply> {
    let name = (!q.stream_name.is_empty()).then_some(q.stream_name.as_str());
    ok(
        crate::pg::enable_disable(vm, name, q.is_enabled),
        pg::PgEnableDisableReply {},
    )
}

fn pg_capture(vm: &mut Vlib, _: &mut Ctx<'_>, q: pg::PgCapture) -> R<pg::PgCaptureReply> {
    let r = if q.is_enabled {
        if q.pcap_file_name.is_empty() {
            Err(VnetError::invalid("missing pcap file name"))
        } else {
            crate::pg::capture(
                vm,
                sw(q.sw_if_index),
                Some(&q.pcap_file_name),
                (q.count != 0).then_some(q.count),
            )
        }
    } else {
        crate::pg::capture(vm, sw(q.sw_if_index), None, None)
    };
    ok(r, pg::PgCaptureReply {})
}

fn pg_stream_dump(
    vm: &mut Vlib,
    _: pg::PgStreamDump,
    out: &mut Stream<'_, '_, pg::PgStreamDetails>,
) -> R<()> {
    for (name, ifn, enabled, sent, limit) in crate::pg::streams(vm) {
        out.send(&pg::PgStreamDetails {
            name,
            interface_name: ifn,
            enabled,
            sent,
            limit,
        });
    }
    Ok(())
}

// ---- trace, pcap, running-config ------------------------------------------------------------

fn trace_add(vm: &mut Vlib, _: &mut Ctx<'_>, q: trace::TraceAdd) -> R<trace::TraceAddReply> {
    sluice_graph::cli::trace_add_node(vm, &q.node_name, q.count)
        .map_err(|e| ApiError::from(VnetError::from(e)))?;
    Ok(trace::TraceAddReply {})
}

fn trace_clear(vm: &mut Vlib, _: &mut Ctx<'_>, _: trace::TraceClear) -> R<trace::TraceClearReply> {
    vm.shared.trace.clear();
    Ok(trace::TraceClearReply {})
}

fn trace_dump(
    vm: &mut Vlib,
    q: trace::TraceDump,
    out: &mut Stream<'_, '_, trace::TraceDetails>,
) -> R<()> {
    let max = if q.max == 0 { 50 } else { q.max as usize };
    for p in sluice_graph::cli::traced_packets(vm, max) {
        out.send(&trace::TraceDetails {
            thread_index: p.thread as u32,
            packet_number: p.number as u32,
            trace_data: p.text,
        });
    }
    Ok(())
}

fn pcap_trace_on(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: trace::PcapTraceOn,
) -> R<trace::PcapTraceOnReply> {
    use sluice_graph::pcap::point;
    let intfc = match q.sw_if_index {
        u32::MAX => None,
        i => {
            crate::interface::check(vm, sw(i))?;
            Some(i)
        }
    };
    let cfg = sluice_graph::pcap::PcapTraceConfig {
        points: (if q.capture_rx { point::RX } else { 0 })
            | (if q.capture_tx { point::TX } else { 0 })
            | (if q.capture_drop { point::DROP } else { 0 }),
        max: if q.max_packets == 0 {
            100
        } else {
            q.max_packets.into()
        },
        max_bytes_per_pkt: if q.max_bytes_per_packet == 0 {
            512
        } else {
            q.max_bytes_per_packet.clamp(32, 65536)
        },
        intfc,
        file: q.filename,
    };
    sluice_graph::cli::pcap_trace_on(vm, cfg).map_err(|e| ApiError::from(VnetError::from(e)))?;
    Ok(trace::PcapTraceOnReply {})
}

fn pcap_trace_off(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    _: trace::PcapTraceOff,
) -> R<trace::PcapTraceOffReply> {
    Ok(trace::PcapTraceOffReply {
        message: sluice_graph::cli::pcap_trace_off(vm),
    })
}

fn save_running_config(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: trace::SaveRunningConfig,
) -> R<trace::SaveRunningConfigReply> {
    let path = crate::runconf::save(vm, &q.filename)?;
    Ok(trace::SaveRunningConfigReply {
        path: path.display().to_string(),
    })
}

// ---- events ----------------------------------------------------------------------------------

/// What the interface events were last computed from (a `Vlib` extension).
#[derive(Default)]
pub struct EventState {
    /// By index: (admin up, link up, deleted).
    ifs: Vec<(bool, bool, bool)>,
}

fn if_states(vm: &mut Vlib) -> Vec<(bool, bool, bool)> {
    vm.ext_mut::<Interfaces>()
        .list
        .iter()
        .map(|i| (i.admin_up, i.link_up(), i.deleted))
        .collect()
}

fn poll_events(vm: &mut Vlib, ev: &mut Events<'_>) {
    if ev.wanted::<ifm::SwInterfaceEvent>() {
        let now = if_states(vm);
        let mut st = std::mem::take(&mut vm.ext_mut::<EventState>().ifs);
        for (i, &s) in now.iter().enumerate() {
            // A new interface counts as a change from (down, down, live).
            let before = st.get(i).copied().unwrap_or((false, false, false));
            if before != s {
                ev.send(&ifm::SwInterfaceEvent {
                    sw_if_index: i as u32,
                    admin_up: s.0,
                    link_up: s.1,
                    deleted: s.2,
                });
            }
        }
        st = now;
        vm.ext_mut::<EventState>().ifs = st;
    }
    let log = crate::events::log(vm);
    let want_nbr = ev.wanted::<ip::IpNeighborEvent>();
    let want_route = ev.wanted::<ip::IpRouteEvent>();
    let on = want_nbr || want_route;
    if log.enabled() != on {
        log.set_enabled(on);
    }
    if !on {
        return;
    }
    for e in log.drain() {
        match e {
            crate::events::VnetEvent::Neighbor {
                sw_if,
                ip: a,
                mac,
                is_static,
                added,
            } if want_nbr => ev.send(&ip::IpNeighborEvent {
                is_add: added,
                sw_if_index: sw_if,
                ip_address: a,
                mac_address: MacAddress(mac),
                is_static,
            }),
            crate::events::VnetEvent::Route {
                table_id,
                addr,
                len,
                added,
            } if want_route => ev.send(&ip::IpRouteEvent {
                is_add: added,
                table_id,
                prefix: Prefix { addr, len },
            }),
            _ => {}
        }
    }
}
