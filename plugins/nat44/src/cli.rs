//! The NAT44 CLI, VPP's syntax (docs/nat.md lists every command).

use crate::config::{
    ip, proto_name, role, AddrSrc, Control, NatError, PoolAddr, StaticMapping, Timeouts,
};
use crate::session::{sflags, Class, Table};
use crate::{lock, NatMain, NatShared, Worker, DEFAULT_SESSIONS};
use sluice_cli::{Args, CliError};
use sluice_graph::Vlib;
use sluice_vnet::plugin::Registrar;
use sluice_vnet::Interfaces;
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::sync::Arc;

/// Registers the commands.
pub fn register(r: &mut Registrar) {
    r.cli(
        "nat44 plugin",
        "nat44 plugin <enable [sessions <max-number>]>|disable",
        cli_plugin,
    );
    r.cli(
        "nat44 add address",
        "nat44 add address <ip4-range-start> [- <ip4-range-end>] [tenant-vrf <vrf-id>] [del]",
        cli_address,
    );
    r.cli(
        "nat44 add interface address",
        "nat44 add interface address <interface> [del]",
        cli_interface_address,
    );
    r.cli(
        "set interface nat44",
        "set interface nat44 in <intfc> out <intfc> [del]",
        cli_interface,
    );
    r.cli(
        "nat44 add static mapping",
        "nat44 add static mapping tcp|udp|icmp local <addr> [<port>] external <addr>|<interface> [<port>] [vrf <table-id>] [del]",
        cli_static,
    );
    r.cli(
        "nat44 add identity mapping",
        "nat44 add identity mapping <ip4-addr>|external <interface> [<protocol> <port>] [vrf <table-id>] [del]",
        cli_identity,
    );
    r.cli(
        "set nat timeout",
        "set nat timeout [udp <sec> | tcp-established <sec> | tcp-transitory <sec> | icmp <sec> | reset]",
        cli_timeout,
    );
    r.cli("show nat timeouts", "show nat timeouts", cli_show_timeouts);
    r.cli(
        "show nat44 sessions",
        "show nat44 sessions [detail]",
        cli_show_sessions,
    );
    r.cli("show nat44 summary", "show nat44 summary", cli_show_summary);
    r.cli(
        "show nat44 addresses",
        "show nat44 addresses",
        cli_show_addresses,
    );
    r.cli(
        "show nat44 interfaces",
        "show nat44 interfaces",
        cli_show_interfaces,
    );
    r.cli(
        "show nat44 static mappings",
        "show nat44 static mappings",
        cli_show_static,
    );
    r.cli(
        "clear nat44 sessions",
        "clear nat44 sessions — delete every dynamic and static session",
        cli_clear_sessions,
    );
}

fn shared(vm: &mut Vlib) -> Arc<NatShared> {
    vm.ext_mut::<NatMain>().shared.clone()
}

fn err(e: NatError) -> CliError {
    CliError::new(e.to_string())
}

/// Runs `f` on the configuration if NAT is enabled, then publishes it.
fn edit<R>(
    vm: &mut Vlib,
    f: impl FnOnce(&mut Control, &NatShared) -> Result<R, CliError>,
) -> Result<R, CliError> {
    let sh = shared(vm);
    let mut c = lock(&sh.ctl);
    if c.max_sessions.is_none() {
        return Err(err(NatError::Disabled));
    }
    let r = f(&mut c, &sh)?;
    c.generation += 1;
    sh.publish(&c);
    Ok(r)
}

/// Frees, on every thread, the sessions `f` selects.
fn free_sessions(sh: &NatShared, f: impl Fn(&crate::session::Session) -> bool) -> usize {
    let mut n = 0;
    for w in sh.workers() {
        if let Some(w) = lock(w).as_mut() {
            n += w.table.free_where(&w.epochs, &f);
        }
    }
    n
}

fn addr(w: &str) -> Result<u32, CliError> {
    w.parse::<Ipv4Addr>()
        .map(u32::from)
        .map_err(|_| CliError::new(format!("expected an IPv4 address, got `{w}'")))
}

fn interface(vm: &mut Vlib, w: &str) -> Result<u32, CliError> {
    vm.ext_mut::<Interfaces>()
        .find(w)
        .map(|i| i.0)
        .ok_or_else(|| CliError::new(format!("unknown interface `{w}'")))
}

fn vrf(vm: &mut Vlib, id: u32) -> Result<u32, CliError> {
    sluice_vnet::ip4::fib_index(vm, id)
        .ok_or_else(|| CliError::new(format!("no IPv4 table `{id}' (ip table add {id})")))
}

fn cli_plugin(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let sh = shared(vm);
    if a.keyword("disable") {
        a.finish()?;
        let roles = {
            let c = lock(&sh.ctl);
            if c.max_sessions.is_none() {
                return Err(err(NatError::Disabled));
            }
            c.roles.clone()
        };
        for (i, r) in roles {
            if r & role::INSIDE != 0 {
                sluice_vnet::feature::set_feature(vm, i, "ip4-unicast", crate::IN2OUT, false)?;
            }
            if r & role::OUTSIDE != 0 {
                sluice_vnet::feature::set_feature(vm, i, "ip4-unicast", crate::OUT2IN, false)?;
            }
        }
        let mut c = lock(&sh.ctl);
        for w in sh.workers() {
            *lock(w) = None;
        }
        *c = Control {
            generation: c.generation + 1,
            ..Control::default()
        };
        return Ok(String::new());
    }
    let w = a.word("enable|disable")?;
    if w != "enable" {
        return Err(CliError::new(format!("expected enable|disable, got `{w}'")));
    }
    let mut sessions = DEFAULT_SESSIONS;
    while !a.is_empty() {
        if a.keyword("sessions") {
            sessions = a.u32("max sessions")?;
            if sessions == 0 {
                return Err(CliError::new("sessions `0' must be at least 1"));
            }
        } else {
            let t = a.word("option")?;
            return Err(CliError::unknown_input(&t));
        }
    }
    let mut c = lock(&sh.ctl);
    if c.max_sessions.is_some() {
        return Err(err(NatError::AlreadyEnabled));
    }
    c.max_sessions = Some(sessions);
    c.generation += 1;
    let snap = Arc::new(sh.snapshot(&c));
    let epochs = vm.shared.epochs.clone();
    for (t, w) in sh.workers().iter().enumerate() {
        let owner = snap.threads.contains(&t);
        let max = if owner { sessions as usize } else { 0 };
        *lock(w) = Some(Worker {
            cfg: snap.clone(),
            table: Table::new(
                max,
                0x9e37_79b9 ^ (t as u64) << 32 ^ vm.shared.clock.now_tsc(),
            ),
            epochs: epochs.clone(),
        });
    }
    Ok(String::new())
}

fn cli_address(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let w = a.word("address")?;
    let (lo, hi) = match w.split_once('-') {
        Some((x, y)) => (addr(x)?, addr(y)?),
        None => {
            let lo = addr(&w)?;
            if a.keyword("-") {
                let h = a.word("range end")?;
                (lo, addr(&h)?)
            } else {
                (lo, lo)
            }
        }
    };
    if hi < lo {
        return Err(CliError::new(format!(
            "range `{}' - `{}': end before start",
            ip(lo),
            ip(hi)
        )));
    }
    if hi - lo >= 65536 {
        return Err(CliError::new("address range larger than 65536 addresses"));
    }
    let mut tenant = None;
    let mut del = false;
    while !a.is_empty() {
        if a.keyword("tenant-vrf") {
            tenant = Some(a.u32("vrf id")?);
        } else if a.keyword("del") {
            del = true;
        } else {
            let t = a.word("option")?;
            return Err(CliError::unknown_input(&t));
        }
    }
    let tenant_fib = tenant.map(|id| vrf(vm, id)).transpose()?;
    edit(vm, |c, sh| {
        for x in lo..=hi {
            let pos = c.pool.iter().position(|p| p.src == AddrSrc::Fixed(x));
            match (del, pos) {
                (false, Some(_)) => {
                    return Err(err(NatError::Exists(format!("address {}", ip(x)))))
                }
                (true, None) => return Err(err(NatError::NotFound(format!("address {}", ip(x))))),
                _ => {}
            }
        }
        for x in lo..=hi {
            if del {
                c.pool.retain(|p| p.src != AddrSrc::Fixed(x));
                free_sessions(sh, |s| s.flags & sflags::STATIC == 0 && s.i2o.rw.src == x);
            } else {
                c.pool.push(PoolAddr {
                    src: AddrSrc::Fixed(x),
                    tenant_fib,
                    tenant_vrf: tenant,
                });
            }
        }
        Ok(String::new())
    })
}

fn cli_interface_address(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let w = a.word("interface")?;
    let i = interface(vm, &w)?;
    let del = a.keyword("del");
    a.finish()?;
    edit(vm, |c, sh| {
        let pos = c.pool.iter().position(|p| p.src == AddrSrc::Interface(i));
        match (del, pos) {
            (false, Some(_)) => Err(err(NatError::Exists(format!("interface address of `{w}'")))),
            (true, None) => Err(err(NatError::NotFound(format!(
                "interface address of `{w}'"
            )))),
            (false, None) => {
                c.pool.push(PoolAddr {
                    src: AddrSrc::Interface(i),
                    tenant_fib: None,
                    tenant_vrf: None,
                });
                Ok(String::new())
            }
            (true, Some(p)) => {
                c.pool.remove(p);
                if let Some(x) = sh.if_addr(i) {
                    free_sessions(sh, |s| s.flags & sflags::STATIC == 0 && s.i2o.rw.src == x);
                }
                Ok(String::new())
            }
        }
    })
}

fn cli_interface(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let mut set: Vec<(u32, u8)> = Vec::new();
    let mut del = false;
    while !a.is_empty() {
        if a.keyword("in") {
            let w = a.word("inside interface")?;
            set.push((interface(vm, &w)?, role::INSIDE));
        } else if a.keyword("out") {
            let w = a.word("outside interface")?;
            set.push((interface(vm, &w)?, role::OUTSIDE));
        } else if a.keyword("del") {
            del = true;
        } else {
            let t = a.word("option")?;
            return Err(CliError::unknown_input(&t));
        }
    }
    if set.is_empty() {
        return Err(CliError::new("expected in <intfc> and/or out <intfc>"));
    }
    let sh = shared(vm);
    if lock(&sh.ctl).max_sessions.is_none() {
        return Err(err(NatError::Disabled));
    }
    for &(i, r) in &set {
        let node = if r == role::INSIDE {
            crate::IN2OUT
        } else {
            crate::OUT2IN
        };
        let has = lock(&sh.ctl).roles.get(&i).copied().unwrap_or(0) & r != 0;
        if has != del {
            continue;
        }
        sluice_vnet::feature::set_feature(vm, i, "ip4-unicast", node, !del)?;
        let mut c = lock(&sh.ctl);
        let e = c.roles.entry(i).or_insert(0);
        if del {
            *e &= !r;
        } else {
            *e |= r;
        }
        if *e == 0 {
            c.roles.remove(&i);
        }
    }
    let mut c = lock(&sh.ctl);
    c.generation += 1;
    sh.publish(&c);
    Ok(String::new())
}

fn proto_word(w: &str) -> Option<u8> {
    match w {
        "tcp" => Some(6),
        "udp" => Some(17),
        "icmp" => Some(1),
        _ => None,
    }
}

fn port(w: &str) -> Option<u16> {
    w.parse::<u16>().ok().filter(|&p| p > 0)
}

/// Adds or deletes a mapping (identical local/external/protocol/vrf) and its sessions.
fn set_mapping(vm: &mut Vlib, m: StaticMapping, del: bool) -> Result<String, CliError> {
    edit(vm, |c, sh| {
        let same = |x: &StaticMapping| {
            x.local == m.local
                && x.local_port == m.local_port
                && x.proto == m.proto
                && x.fib == m.fib
                && x.external == m.external
                && x.external_port == m.external_port
        };
        let found = c.mappings.values().find(|x| same(x)).map(|x| x.id);
        if del {
            let id = found.ok_or_else(|| err(NatError::NotFound("static mapping".into())))?;
            c.mappings.remove(&id);
            free_sessions(sh, |s| s.mapping == Some(id));
            return Ok(String::new());
        }
        if found.is_some() {
            return Err(err(NatError::Exists("static mapping".into())));
        }
        // One mapping per local side and per external side.
        if let Some(x) = c.mappings.values().find(|x| {
            (x.local == m.local
                && x.local_port == m.local_port
                && x.proto == m.proto
                && x.fib == m.fib)
                || (x.external == m.external
                    && x.external_port == m.external_port
                    && x.proto == m.proto)
        }) {
            return Err(err(NatError::Exists(format!(
                "a mapping of local {} or external {}",
                ip(x.local),
                x.external
            ))));
        }
        let id = c.next_id;
        c.next_id += 1;
        c.mappings.insert(id, StaticMapping { id, ..m });
        Ok(String::new())
    })
}

fn cli_static(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let mut proto = None;
    let mut local = None;
    let mut local_port = None;
    let mut external = None;
    let mut external_port = None;
    let mut vrf_id = 0;
    let mut del = false;
    while !a.is_empty() {
        let w = a.word("option")?;
        if let Some(p) = proto_word(&w) {
            proto = Some(p);
        } else if w == "local" {
            local = Some(addr(&a.word("local address")?)?);
            if let Some(p) = a.peek().and_then(port) {
                a.word("port")?;
                local_port = Some(p);
            }
        } else if w == "external" {
            let x = a.word("external address or interface")?;
            external = Some(match x.parse::<Ipv4Addr>() {
                Ok(v) => AddrSrc::Fixed(v.into()),
                Err(_) => AddrSrc::Interface(interface(vm, &x)?),
            });
            if let Some(p) = a.peek().and_then(port) {
                a.word("port")?;
                external_port = Some(p);
            }
        } else if w == "vrf" {
            vrf_id = a.u32("vrf id")?;
        } else if w == "del" {
            del = true;
        } else {
            return Err(CliError::unknown_input(&w));
        }
    }
    let local = local.ok_or_else(|| CliError::new("expected local <addr>"))?;
    let external = external.ok_or_else(|| CliError::new("expected external <addr>|<interface>"))?;
    if local_port.is_some() != external_port.is_some() {
        return Err(CliError::new(
            "give both the local and the external port, or neither",
        ));
    }
    if local_port.is_some() && proto.is_none() {
        return Err(CliError::new("a port mapping needs tcp|udp|icmp"));
    }
    let proto = if local_port.is_some() { proto } else { None };
    let fib = vrf(vm, vrf_id)?;
    set_mapping(
        vm,
        StaticMapping {
            local,
            local_port,
            external,
            external_port,
            proto,
            fib,
            vrf: vrf_id,
            identity: false,
            id: 0,
        },
        del,
    )
}

fn cli_identity(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let mut src = None;
    let mut proto = None;
    let mut p = None;
    let mut vrf_id = 0;
    let mut del = false;
    while !a.is_empty() {
        let w = a.word("option")?;
        if let Some(pr) = proto_word(&w) {
            proto = Some(pr);
            let pw = a.word("port")?;
            p = Some(port(&pw).ok_or_else(|| CliError::new(format!("bad port `{pw}'")))?);
        } else if w == "external" {
            let x = a.word("interface")?;
            src = Some(AddrSrc::Interface(interface(vm, &x)?));
        } else if w == "vrf" {
            vrf_id = a.u32("vrf id")?;
        } else if w == "del" {
            del = true;
        } else if let Ok(v) = w.parse::<Ipv4Addr>() {
            src = Some(AddrSrc::Fixed(v.into()));
        } else {
            return Err(CliError::unknown_input(&w));
        }
    }
    let src = src.ok_or_else(|| CliError::new("expected <ip4-addr> or external <interface>"))?;
    let local = match src {
        AddrSrc::Fixed(x) => x,
        AddrSrc::Interface(i) => shared(vm)
            .if_addr(i)
            .ok_or_else(|| CliError::new("the interface has no IPv4 address"))?,
    };
    let fib = vrf(vm, vrf_id)?;
    set_mapping(
        vm,
        StaticMapping {
            local,
            local_port: p,
            external: src,
            external_port: p,
            proto,
            fib,
            vrf: vrf_id,
            identity: true,
            id: 0,
        },
        del,
    )
}

fn cli_timeout(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let sh = shared(vm);
    let mut t = lock(&sh.ctl).timeouts;
    if a.is_empty() {
        return Err(CliError::new(
            "expected udp|tcp-established|tcp-transitory|icmp <sec> or reset",
        ));
    }
    while !a.is_empty() {
        let w = a.word("timeout")?;
        let field = match w.as_str() {
            "udp" => &mut t.udp,
            "tcp-established" => &mut t.tcp_established,
            "tcp-transitory" => &mut t.tcp_transitory,
            "icmp" => &mut t.icmp,
            "reset" => {
                t = Timeouts::default();
                continue;
            }
            _ => return Err(CliError::unknown_input(&w)),
        };
        let v = a.u32("seconds")?;
        if v == 0 {
            return Err(CliError::new(format!("{w} timeout `0' must be at least 1")));
        }
        *field = v;
    }
    let mut c = lock(&sh.ctl);
    c.timeouts = t;
    c.generation += 1;
    sh.publish(&c);
    Ok(String::new())
}

fn cli_show_timeouts(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    let t = lock(&shared(vm).ctl).timeouts;
    Ok(format!(
        "udp timeout: {}sec\ntcp-established timeout: {}sec\ntcp-transitory timeout: {}sec\nicmp timeout: {}sec\n",
        t.udp, t.tcp_established, t.tcp_transitory, t.icmp
    ))
}

fn class_name(c: Class) -> &'static str {
    match c {
        Class::Udp => "udp",
        Class::TcpEstablished => "tcp-established",
        Class::TcpTransitory => "tcp-transitory",
        Class::Icmp => "icmp",
    }
}

fn cli_show_sessions(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let detail = a.keyword("detail");
    a.finish()?;
    let sh = shared(vm);
    if lock(&sh.ctl).max_sessions.is_none() {
        return Err(err(NatError::Disabled));
    }
    let now = vm.shared.clock.now_secs();
    let mut out = String::from("NAT44 ED sessions:\n");
    for (t, w) in sh.workers().iter().enumerate() {
        let g = lock(w);
        let Some(w) = g.as_ref() else { continue };
        let _ = writeln!(
            out,
            "-------- thread {t} {}: {} sessions --------",
            vm.thread_name(t),
            w.table.len()
        );
        let to = w.cfg.timeouts;
        for (i, s) in w.table.iter() {
            let (k, r) = (s.i2o.key, s.o2i.key);
            let p = proto_name(k.proto);
            let _ = writeln!(
                out,
                "  i2o {} proto {p} port {} fib {}",
                ip(k.src),
                k.src_port_or_id(),
                s.fib
            );
            let _ = writeln!(
                out,
                "  o2i {} proto {p} port {} fib 0",
                ip(r.dst),
                r.dst_port_or_id()
            );
            let _ = writeln!(
                out,
                "     external host {}:{}",
                ip(s.o2i.key.src),
                s.o2i.key.src_port_or_id()
            );
            if detail {
                for (name, f) in [("i2o", &s.i2o), ("o2i", &s.o2i)] {
                    let _ = writeln!(
                        out,
                        "     {name} flow: match: saddr {} sport {} daddr {} dport {} proto {p} rewrite: saddr {} sport {} daddr {} dport {}",
                        ip(f.key.src),
                        f.key.sport,
                        ip(f.key.dst),
                        f.key.dport,
                        ip(f.rw.src),
                        f.rw.sport,
                        ip(f.rw.dst),
                        f.rw.dport
                    );
                }
                let _ = writeln!(out, "     index {i}");
                let _ = writeln!(out, "     last heard {:.2}", s.last);
                let _ = writeln!(
                    out,
                    "     timeout in {:.2} ({})",
                    (s.last + s.class.timeout(&to) - now).max(0.0),
                    class_name(s.class)
                );
                if k.proto == 6 {
                    let _ = writeln!(out, "     tcp state {}", s.tcp_state());
                }
                let _ = writeln!(out, "     total pkts {}, total bytes {}", s.pkts, s.bytes);
                let kind = if s.flags & sflags::IDENTITY != 0 {
                    "identity translation"
                } else if s.flags & sflags::STATIC != 0 {
                    "static translation"
                } else {
                    "dynamic translation"
                };
                let _ = writeln!(out, "     {kind}");
                if s.flags & sflags::HAIRPIN != 0 {
                    let _ = writeln!(out, "     hairpinning");
                }
            }
        }
    }
    Ok(out)
}

fn cli_show_summary(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    let sh = shared(vm);
    let max = lock(&sh.ctl).max_sessions;
    let Some(max) = max else {
        return Err(err(NatError::Disabled));
    };
    let mut out = String::new();
    let _ = writeln!(out, "max translations per thread: {max}");
    let (mut total, mut tcp, mut est, mut trans, mut udp, mut icmp) = (0, 0, 0, 0, 0, 0);
    let (mut created, mut expired, mut deleted, mut mem) = (0, 0, 0, 0);
    for (t, w) in sh.workers().iter().enumerate() {
        let g = lock(w);
        let Some(w) = g.as_ref() else { continue };
        if w.table.max() == 0 {
            continue;
        }
        let _ = writeln!(
            out,
            "thread {t} {}: {} sessions",
            vm.thread_name(t),
            w.table.len()
        );
        total += w.table.len();
        for (_, s) in w.table.iter() {
            match s.class {
                Class::TcpEstablished => {
                    tcp += 1;
                    est += 1
                }
                Class::TcpTransitory => {
                    tcp += 1;
                    trans += 1
                }
                Class::Udp => udp += 1,
                Class::Icmp => icmp += 1,
            }
        }
        created += w.table.stats.created;
        expired += w.table.stats.expired;
        deleted += w.table.stats.deleted;
        mem += w.table.memory_bytes();
    }
    let _ = writeln!(out, "total sessions: {total}");
    let _ = writeln!(out, "total tcp sessions: {tcp}");
    let _ = writeln!(out, "total tcp established sessions: {est}");
    let _ = writeln!(out, "total tcp transitory sessions: {trans}");
    let _ = writeln!(out, "total udp sessions: {udp}");
    let _ = writeln!(out, "total icmp sessions: {icmp}");
    let _ = writeln!(out, "total sessions created: {created}");
    let _ = writeln!(out, "total timed out sessions: {expired}");
    let _ = writeln!(out, "total deleted sessions: {deleted}");
    let _ = writeln!(out, "session table memory: {mem} bytes");
    Ok(out)
}

fn if_name(vm: &mut Vlib, i: u32) -> String {
    vm.ext_mut::<Interfaces>()
        .get(sluice_vnet::SwIfIndex(i))
        .map(|x| x.name.clone())
        .unwrap_or_else(|| format!("sw_if_index {i}"))
}

fn cli_show_addresses(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    let sh = shared(vm);
    let c = lock(&sh.ctl).clone();
    let mut out = String::from("NAT44 pool addresses:\n");
    for p in &c.pool {
        let (a, from) = match p.src {
            AddrSrc::Fixed(x) => (Some(x), String::new()),
            AddrSrc::Interface(i) => (sh.if_addr(i), format!(" (interface {})", if_name(vm, i))),
        };
        let a = a.map_or("unresolved".to_string(), |x| ip(x).to_string());
        let vrf = p
            .tenant_vrf
            .map_or(String::new(), |v| format!(" tenant VRF: {v}"));
        let _ = writeln!(out, "{a}{from}{vrf}");
    }
    Ok(out)
}

fn cli_show_interfaces(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    let roles = lock(&shared(vm).ctl).roles.clone();
    let mut out = String::from("NAT44 interfaces:\n");
    for (i, r) in roles {
        let what = match r {
            role::INSIDE => "in",
            role::OUTSIDE => "out",
            _ => "in out",
        };
        let _ = writeln!(out, " {} {what}", if_name(vm, i));
    }
    Ok(out)
}

fn cli_show_static(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    let c = lock(&shared(vm).ctl).clone();
    let mut out = String::from("NAT44 static mappings:\n");
    for m in c.mappings.values() {
        let kind = if m.identity { "identity" } else { "static" };
        let p = m.proto.map_or("", proto_name);
        let lp = m.local_port.map_or(String::new(), |p| format!(":{p}"));
        let ep = m.external_port.map_or(String::new(), |p| format!(":{p}"));
        let ext = match m.external {
            AddrSrc::Fixed(x) => ip(x).to_string(),
            AddrSrc::Interface(i) => if_name(vm, i),
        };
        let _ = writeln!(
            out,
            " {kind} {p} local {}{lp} external {ext}{ep} vrf {}",
            ip(m.local),
            m.vrf
        );
    }
    Ok(out)
}

fn cli_clear_sessions(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    let sh = shared(vm);
    if lock(&sh.ctl).max_sessions.is_none() {
        return Err(err(NatError::Disabled));
    }
    free_sessions(&sh, |_| true);
    Ok(String::new())
}
