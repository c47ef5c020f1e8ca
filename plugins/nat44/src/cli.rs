//! The NAT44 CLI, VPP's syntax (docs/nat.md lists every command).

use crate::config::{ip, proto_name, role, AddrSrc, NatError, Timeouts};
use crate::session::{sflags, Class};
use crate::{lock, ops, NatShared, DEFAULT_SESSIONS};
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
        "nat44 del session",
        "nat44 del session in|out <addr>:<port> tcp|udp|icmp [vrf <id>] [external-host <addr>:<port>]",
        cli_del_session,
    );
    r.cli(
        "clear nat44 sessions",
        "clear nat44 sessions — delete every dynamic and static session",
        cli_clear_sessions,
    );
}

fn shared(vm: &mut Vlib) -> Arc<NatShared> {
    ops::shared(vm)
}

fn err(e: NatError) -> CliError {
    CliError::new(e.to_string())
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

fn cli_plugin(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    if a.keyword("disable") {
        a.finish()?;
        ops::disable(vm)?;
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
        } else {
            let t = a.word("option")?;
            return Err(CliError::unknown_input(&t));
        }
    }
    ops::enable(vm, sessions)?;
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
    ops::address_add_del(vm, lo, hi, tenant, del)?;
    Ok(String::new())
}

fn cli_interface_address(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let w = a.word("interface")?;
    let i = interface(vm, &w)?;
    let del = a.keyword("del");
    a.finish()?;
    ops::interface_address_add_del(vm, i, del)?;
    Ok(String::new())
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
    ops::interface_add_del(vm, &set, del)?;
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
    ops::static_mapping_add_del(
        vm,
        proto,
        local,
        local_port,
        external,
        external_port,
        vrf_id,
        del,
    )?;
    Ok(String::new())
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
    ops::identity_mapping_add_del(vm, src, proto.zip(p), vrf_id, del)?;
    Ok(String::new())
}

fn cli_timeout(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let mut t = ops::timeouts(vm);
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
        *field = a.u32("seconds")?;
    }
    ops::set_timeouts(vm, t)?;
    Ok(String::new())
}

fn cli_show_timeouts(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    let t = ops::timeouts(vm);
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
                let act = w.table.activity(i);
                let _ = writeln!(out, "     last heard {:.2}", act.last);
                let _ = writeln!(
                    out,
                    "     timeout in {:.2} ({})",
                    (act.last + s.class.timeout(&to) - now).max(0.0),
                    class_name(s.class)
                );
                if k.proto == 6 {
                    let _ = writeln!(out, "     tcp state {}", s.tcp_state());
                }
                let _ = writeln!(
                    out,
                    "     total pkts {}, total bytes {}",
                    act.pkts, act.bytes
                );
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

/// `<addr>:<port>`.
fn addr_port(w: &str) -> Result<(u32, u16), CliError> {
    let bad = || CliError::new(format!("expected <addr>:<port>, got `{w}'"));
    let (a, p) = w.rsplit_once(':').ok_or_else(bad)?;
    let a = a.parse::<Ipv4Addr>().map_err(|_| bad())?;
    Ok((a.into(), p.parse::<u16>().map_err(|_| bad())?))
}

fn cli_del_session(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let side = a.word("in|out")?;
    let inside = match side.as_str() {
        "in" => true,
        "out" => false,
        _ => return Err(CliError::new(format!("expected in|out, got `{side}'"))),
    };
    let (addr, port) = addr_port(&a.word("<addr>:<port>")?)?;
    let pw = a.word("tcp|udp|icmp")?;
    let proto = proto_word(&pw)
        .ok_or_else(|| CliError::new(format!("expected tcp|udp|icmp, got `{pw}'")))?;
    let mut e = ops::SessionEnd {
        inside,
        addr,
        port,
        proto,
        vrf: 0,
        ext_host: None,
    };
    while !a.is_empty() {
        if a.keyword("vrf") {
            e.vrf = a.u32("vrf id")?;
        } else if a.keyword("external-host") {
            e.ext_host = Some(addr_port(&a.word("<addr>:<port>")?)?);
        } else {
            let t = a.word("option")?;
            return Err(CliError::unknown_input(&t));
        }
    }
    ops::del_session(vm, e)?;
    Ok(String::new())
}

fn cli_clear_sessions(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    ops::clear_sessions(vm)?;
    Ok(String::new())
}

fn proto_cli(p: u8) -> &'static str {
    match p {
        6 => "tcp",
        17 => "udp",
        _ => "icmp",
    }
}

/// NAT44's part of `show running-config`: enable, timeouts, pool (consecutive addresses of
/// one tenant as a range), interface roles, static and identity mappings in the order added.
pub fn running_config(vm: &mut Vlib) -> Vec<String> {
    let c = lock(&shared(vm).ctl).clone();
    let mut out = Vec::new();
    let t = c.timeouts;
    let d = Timeouts::default();
    let mut l = String::new();
    for (w, v, dv) in [
        ("udp", t.udp, d.udp),
        ("tcp-established", t.tcp_established, d.tcp_established),
        ("tcp-transitory", t.tcp_transitory, d.tcp_transitory),
        ("icmp", t.icmp, d.icmp),
    ] {
        if v != dv {
            let _ = write!(l, " {w} {v}");
        }
    }
    if !l.is_empty() {
        out.push(format!("set nat timeout{l}"));
    }
    let Some(max) = c.max_sessions else {
        return out;
    };
    out.push(format!("nat44 plugin enable sessions {max}"));
    let mut i = 0;
    while i < c.pool.len() {
        let p = c.pool[i];
        match p.src {
            AddrSrc::Fixed(lo) => {
                let mut hi = lo;
                while c.pool.get(i + 1).is_some_and(|n| {
                    n.src == AddrSrc::Fixed(hi.wrapping_add(1)) && n.tenant_vrf == p.tenant_vrf
                }) {
                    hi += 1;
                    i += 1;
                }
                let range = if hi != lo {
                    format!(" - {}", ip(hi))
                } else {
                    String::new()
                };
                let vrf = p
                    .tenant_vrf
                    .map_or(String::new(), |v| format!(" tenant-vrf {v}"));
                out.push(format!("nat44 add address {}{range}{vrf}", ip(lo)));
            }
            AddrSrc::Interface(sw) => {
                out.push(format!("nat44 add interface address {}", if_name(vm, sw)))
            }
        }
        i += 1;
    }
    for (&sw, &r) in &c.roles {
        let n = if_name(vm, sw);
        let mut l = String::from("set interface nat44");
        if r & role::INSIDE != 0 {
            let _ = write!(l, " in {n}");
        }
        if r & role::OUTSIDE != 0 {
            let _ = write!(l, " out {n}");
        }
        out.push(l);
    }
    for m in c.mappings.values() {
        let vrf = if m.vrf != 0 {
            format!(" vrf {}", m.vrf)
        } else {
            String::new()
        };
        if m.identity {
            let src = match m.external {
                AddrSrc::Fixed(x) => ip(x).to_string(),
                AddrSrc::Interface(i) => format!("external {}", if_name(vm, i)),
            };
            let pp = m
                .proto
                .zip(m.local_port)
                .map_or(String::new(), |(p, port)| {
                    format!(" {} {port}", proto_cli(p))
                });
            out.push(format!("nat44 add identity mapping {src}{pp}{vrf}"));
            continue;
        }
        let proto = m
            .proto
            .map_or(String::new(), |p| format!(" {}", proto_cli(p)));
        let lp = m.local_port.map_or(String::new(), |p| format!(" {p}"));
        let ep = m.external_port.map_or(String::new(), |p| format!(" {p}"));
        let ext = match m.external {
            AddrSrc::Fixed(x) => ip(x).to_string(),
            AddrSrc::Interface(i) => if_name(vm, i),
        };
        out.push(format!(
            "nat44 add static mapping{proto} local {}{lp} external {ext}{ep}{vrf}",
            ip(m.local)
        ));
    }
    out
}
