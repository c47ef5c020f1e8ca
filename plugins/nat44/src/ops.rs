//! NAT44's control-plane actions: what the CLI (`cli.rs`) and the API (`api.rs`) both call,
//! with typed errors ([`VnetError`]; the CLI prints their text, the API sends their code).

use crate::config::{ip, role, AddrSrc, Control, NatError, PoolAddr, StaticMapping, Timeouts};
use crate::session::{sflags, Session, Table};
use crate::{lock, NatMain, NatShared, Worker};
use sluice_graph::Vlib;
use sluice_vnet::error::{VnetError, VnetResult};
use sluice_vnet::SwIfIndex;
use std::sync::Arc;

impl From<NatError> for VnetError {
    fn from(e: NatError) -> Self {
        let t = e.to_string();
        match e {
            NatError::Disabled => VnetError::NotSupported(t),
            NatError::AlreadyEnabled | NatError::Exists(_) => VnetError::Exists(t),
            NatError::NotFound(_) => VnetError::NotFound(t),
            NatError::Invalid(_) | NatError::TooManySessions { .. } => VnetError::Invalid(t),
        }
    }
}

/// The shared state.
pub fn shared(vm: &mut Vlib) -> Arc<NatShared> {
    vm.ext_mut::<NatMain>().shared.clone()
}

/// Whether `nat44 plugin enable` ran.
pub fn enabled(vm: &mut Vlib) -> bool {
    lock(&shared(vm).ctl).max_sessions.is_some()
}

fn check_enabled(vm: &mut Vlib) -> VnetResult {
    if enabled(vm) {
        Ok(())
    } else {
        Err(NatError::Disabled.into())
    }
}

/// Runs `f` on the configuration if NAT is enabled, then publishes it.
fn edit<R>(
    vm: &mut Vlib,
    f: impl FnOnce(&mut Control, &NatShared) -> VnetResult<R>,
) -> VnetResult<R> {
    let sh = shared(vm);
    let mut c = lock(&sh.ctl);
    if c.max_sessions.is_none() {
        return Err(NatError::Disabled.into());
    }
    let r = f(&mut c, &sh)?;
    c.generation += 1;
    sh.publish(&c);
    Ok(r)
}

/// Frees, on every thread, the sessions `f` selects; returns how many.
pub fn free_sessions(sh: &NatShared, f: impl Fn(&Session) -> bool) -> usize {
    let mut n = 0;
    for w in sh.workers() {
        if let Some(w) = lock(w).as_mut() {
            n += w.table.free_where(&f);
        }
    }
    n
}

/// The FIB index of IPv4 table `id`.
pub fn vrf(vm: &mut Vlib, id: u32) -> VnetResult<u32> {
    sluice_vnet::ip4::fib_index(vm, id)
        .ok_or_else(|| VnetError::NoTable(format!("no IPv4 table `{id}' (ip table add {id})")))
}

/// `nat44 plugin enable sessions <n>`: sessions per thread.
pub fn enable(vm: &mut Vlib, sessions: u32) -> VnetResult {
    if sessions == 0 {
        return Err(VnetError::invalid("sessions `0' must be at least 1"));
    }
    // A table's values (session index × 2 + flow) are `u32`s: no silent clamp below.
    if sessions as usize > crate::session::MAX_SESSIONS {
        return Err(NatError::TooManySessions {
            asked: sessions,
            max: crate::session::MAX_SESSIONS,
        }
        .into());
    }
    let sh = shared(vm);
    let mut c = lock(&sh.ctl);
    if c.max_sessions.is_some() {
        return Err(NatError::AlreadyEnabled.into());
    }
    c.max_sessions = Some(sessions);
    c.generation += 1;
    let snap = Arc::new(sh.snapshot(&c));
    for (t, w) in sh.workers().iter().enumerate() {
        let owner = snap.threads.contains(&t);
        let max = if owner { sessions as usize } else { 0 };
        *lock(w) = Some(Worker {
            cfg: snap.clone(),
            table: Table::new(
                max,
                0x9e37_79b9 ^ (t as u64) << 32 ^ vm.shared.clock.now_tsc(),
            ),
        });
    }
    Ok(())
}

/// `nat44 plugin disable`: frees everything and removes the interface features.
pub fn disable(vm: &mut Vlib) -> VnetResult {
    let sh = shared(vm);
    let roles = {
        let c = lock(&sh.ctl);
        if c.max_sessions.is_none() {
            return Err(NatError::Disabled.into());
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
    Ok(())
}

/// `nat44 add address <lo> - <hi> [tenant-vrf <id>] [del]`: all or none of the range.
pub fn address_add_del(
    vm: &mut Vlib,
    lo: u32,
    hi: u32,
    tenant: Option<u32>,
    del: bool,
) -> VnetResult {
    if hi < lo {
        return Err(VnetError::Invalid(format!(
            "range `{}' - `{}': end before start",
            ip(lo),
            ip(hi)
        )));
    }
    if hi - lo >= 65536 {
        return Err(VnetError::invalid(
            "address range larger than 65536 addresses",
        ));
    }
    check_enabled(vm)?;
    let tenant_fib = tenant.map(|id| vrf(vm, id)).transpose()?;
    edit(vm, |c, sh| {
        for x in lo..=hi {
            let pos = c.pool.iter().position(|p| p.src == AddrSrc::Fixed(x));
            match (del, pos) {
                (false, Some(_)) => {
                    return Err(NatError::Exists(format!("address {}", ip(x))).into())
                }
                (true, None) => return Err(NatError::NotFound(format!("address {}", ip(x))).into()),
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
        Ok(())
    })
}

/// `nat44 add interface address <if> [del]`: the interface's first IPv4 address, followed
/// when it changes.
pub fn interface_address_add_del(vm: &mut Vlib, sw: u32, del: bool) -> VnetResult {
    sluice_vnet::interface::check(vm, SwIfIndex(sw))?;
    edit(vm, |c, sh| {
        let pos = c.pool.iter().position(|p| p.src == AddrSrc::Interface(sw));
        let what = || format!("interface address of sw_if_index {sw}");
        match (del, pos) {
            (false, Some(_)) => Err(NatError::Exists(what()).into()),
            (true, None) => Err(NatError::NotFound(what()).into()),
            (false, None) => {
                c.pool.push(PoolAddr {
                    src: AddrSrc::Interface(sw),
                    tenant_fib: None,
                    tenant_vrf: None,
                });
                Ok(())
            }
            (true, Some(p)) => {
                c.pool.remove(p);
                if let Some(x) = sh.if_addr(sw) {
                    free_sessions(sh, |s| s.flags & sflags::STATIC == 0 && s.i2o.rw.src == x);
                }
                Ok(())
            }
        }
    })
}

/// `set interface nat44 in <if> out <if> [del]`: gives (or takes) each interface its role
/// ([`role::INSIDE`] or [`role::OUTSIDE`]); a role it already has (has not) is left alone.
pub fn interface_add_del(vm: &mut Vlib, set: &[(u32, u8)], del: bool) -> VnetResult {
    check_enabled(vm)?;
    for &(i, _) in set {
        sluice_vnet::interface::check(vm, SwIfIndex(i))?;
    }
    let sh = shared(vm);
    for &(i, r) in set {
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
    Ok(())
}

/// Adds or deletes a mapping (identical local/external/protocol/vrf) and its sessions.
fn set_mapping(vm: &mut Vlib, m: StaticMapping, del: bool) -> VnetResult {
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
            let id = found.ok_or_else(|| NatError::NotFound("static mapping".into()))?;
            c.mappings.remove(&id);
            free_sessions(sh, |s| s.mapping == Some(id));
            return Ok(());
        }
        if found.is_some() {
            return Err(NatError::Exists("static mapping".into()).into());
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
            return Err(NatError::Exists(format!(
                "a mapping of local {} or external {}",
                ip(x.local),
                x.external
            ))
            .into());
        }
        let id = c.next_id;
        c.next_id += 1;
        c.mappings.insert(id, StaticMapping { id, ..m });
        Ok(())
    })
}

/// The protocols a port mapping may name.
fn check_proto(p: Option<u8>) -> VnetResult {
    match p {
        None | Some(1 | 6 | 17) => Ok(()),
        Some(x) => Err(VnetError::Invalid(format!(
            "protocol `{x}': mappings are for tcp (6), udp (17) or icmp (1)"
        ))),
    }
}

/// `nat44 add static mapping [tcp|udp|icmp] local <a> [<port>] external <a>|<if> [<port>]
/// [vrf <id>] [del]`: both ports or neither (address-only, any protocol).
#[allow(clippy::too_many_arguments)]
pub fn static_mapping_add_del(
    vm: &mut Vlib,
    proto: Option<u8>,
    local: u32,
    local_port: Option<u16>,
    external: AddrSrc,
    external_port: Option<u16>,
    vrf_id: u32,
    del: bool,
) -> VnetResult {
    if local_port.is_some() != external_port.is_some() {
        return Err(VnetError::invalid(
            "give both the local and the external port, or neither",
        ));
    }
    if local_port.is_some() && proto.is_none() {
        return Err(VnetError::invalid("a port mapping needs tcp|udp|icmp"));
    }
    check_proto(proto)?;
    if let AddrSrc::Interface(i) = external {
        sluice_vnet::interface::check(vm, SwIfIndex(i))?;
    }
    check_enabled(vm)?;
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

/// `nat44 add identity mapping <a>|external <if> [<proto> <port>] [vrf <id>] [del]`.
pub fn identity_mapping_add_del(
    vm: &mut Vlib,
    src: AddrSrc,
    proto_port: Option<(u8, u16)>,
    vrf_id: u32,
    del: bool,
) -> VnetResult {
    check_proto(proto_port.map(|x| x.0))?;
    check_enabled(vm)?;
    let local = match src {
        AddrSrc::Fixed(x) => x,
        AddrSrc::Interface(i) => {
            sluice_vnet::interface::check(vm, SwIfIndex(i))?;
            shared(vm)
                .if_addr(i)
                .ok_or_else(|| VnetError::invalid("the interface has no IPv4 address"))?
        }
    };
    let fib = vrf(vm, vrf_id)?;
    let p = proto_port.map(|x| x.1);
    set_mapping(
        vm,
        StaticMapping {
            local,
            local_port: p,
            external: src,
            external_port: p,
            proto: proto_port.map(|x| x.0),
            fib,
            vrf: vrf_id,
            identity: true,
            id: 0,
        },
        del,
    )
}

/// `set nat timeout ...`: every timeout at least a second.
pub fn set_timeouts(vm: &mut Vlib, t: Timeouts) -> VnetResult {
    for (w, v) in [
        ("udp", t.udp),
        ("tcp-established", t.tcp_established),
        ("tcp-transitory", t.tcp_transitory),
        ("icmp", t.icmp),
    ] {
        if v == 0 {
            return Err(VnetError::Invalid(format!(
                "{w} timeout `0' must be at least 1"
            )));
        }
    }
    let sh = shared(vm);
    let mut c = lock(&sh.ctl);
    c.timeouts = t;
    c.generation += 1;
    sh.publish(&c);
    Ok(())
}

/// The timeouts in force.
pub fn timeouts(vm: &mut Vlib) -> Timeouts {
    lock(&shared(vm).ctl).timeouts
}

/// `clear nat44 sessions`: frees every session; returns how many.
pub fn clear_sessions(vm: &mut Vlib) -> VnetResult<usize> {
    check_enabled(vm)?;
    Ok(free_sessions(&shared(vm), |_| true))
}

/// Which endpoint of a session `nat44 del session` names.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SessionEnd {
    /// `in`: the inside host's address and port (in table `vrf`); `out`: the outside
    /// address and port it is translated to.
    pub inside: bool,
    /// Address.
    pub addr: u32,
    /// Port (ICMP: the echo identifier).
    pub port: u16,
    /// 6, 17 or 1.
    pub proto: u8,
    /// The inside table id (`in` only; outside addresses are in table 0).
    pub vrf: u32,
    /// `external-host <addr>:<port>`: only the session with this remote host (None: every
    /// session of the endpoint).
    pub ext_host: Option<(u32, u16)>,
}

/// `nat44 del session in|out <addr>:<port> tcp|udp|icmp [vrf <id>] [external-host
/// <addr>:<port>]`: frees the sessions of that endpoint (dynamic or static) on every
/// thread; returns how many (none is an error).
pub fn del_session(vm: &mut Vlib, e: SessionEnd) -> VnetResult<usize> {
    check_proto(Some(e.proto))?;
    check_enabled(vm)?;
    let fib = vrf(vm, e.vrf)?;
    let n = free_sessions(&shared(vm), |s| {
        let (i, o) = (s.i2o.key, s.o2i.key);
        let end = if e.inside {
            i.src == e.addr && i.src_port_or_id() == e.port && s.fib == fib
        } else {
            o.dst == e.addr && o.dst_port_or_id() == e.port
        };
        i.proto == e.proto
            && end
            && e.ext_host
                .is_none_or(|(a, p)| o.src == a && o.src_port_or_id() == p)
    });
    if n == 0 {
        return Err(VnetError::NotFound(format!(
            "no {} session of {}:{} {}",
            if e.inside { "inside" } else { "outside" },
            ip(e.addr),
            e.port,
            crate::config::proto_name(e.proto)
        )));
    }
    Ok(n)
}
