//! hoststack: Sluice's host stack, first increment — the session layer and UDP (VPP's
//! session layer with its UDP transport; TCP follows, see docs/hoststack.md).
//!
//! - **Data path** ([`node`]): `ip4-local`/`ip6-local` hand UDP for a port a session bound
//!   to `udp4-input`/`udp6-input` (ports registered through `sluice_vnet::ip_local`),
//!   which copy the payload into the session's rx FIFO; `session-queue` turns what
//!   applications queued in their tx FIFOs into IPv4/IPv6 UDP packets for
//!   `ip4-lookup`/`ip6-lookup`.
//! - **Applications** ([`session`]) attach over a Unix socket (`session { app-socket }`),
//!   get a memfd segment with per-session FIFOs and event queues (`sluice_session`, the
//!   client library) and exchange datagrams with no system call per datagram.
//!
//! CLI: `session enable|disable`, `show session [verbose]`; API: `session_enable_disable`
//! (`api/hoststack.api`). startup.conf:
//! `session { enable event-queue-length <n> app-socket <path> fifo-size <bytes>
//! sessions-per-app <n> tcp-syn-backlog <n> tcp-syn-cookies on|off tcp-delayed-ack <ms>
//! tcp-keepalive <idle s> <interval s> <probes> tcp-tso on|off|<bytes> use-app-socket-api }`.

pub mod api;
pub mod node;
pub mod session;
pub mod tcp;
pub mod tcpsess;

use node::Shared;
use session::{PortChange, SessionError, SessionMain};
use sluice_cli::conf::{ConfError, Section, SectionCursor};
use sluice_cli::{Args, CliError};
use sluice_graph::{Cx, NodeFn, NodeKind, NodeRegistration, Suspend, Vlib, Wake};
use sluice_vnet::interface::Interfaces;
use sluice_vnet::plugin::{Plugin, RegisterError, Registrar, Staged};
use std::any::Any;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The plugin.
pub struct HoststackPlugin;

/// This plugin, for the daemon's plugin list (`sluice_plugins::all()`).
pub static PLUGIN: HoststackPlugin = HoststackPlugin;

const PROCESS: &str = "session-process";

/// Staged startup configuration.
#[derive(Default)]
struct Staging {
    cfg: Option<session::Config>,
}

/// The plugin's `Vlib` extension: the state the nodes share.
#[derive(Default)]
pub struct Hoststack {
    /// Sessions, applications, configuration.
    pub sm: Option<Shared>,
    enabled: Arc<AtomicBool>,
    tcp_registered: bool,
}

impl Plugin for HoststackPlugin {
    fn name(&self) -> &'static str {
        "hoststack"
    }
    fn version(&self) -> &'static str {
        env!("CARGO_PKG_VERSION")
    }
    fn description(&self) -> &'static str {
        "Host stack: session layer, UDP, applications over shared-memory FIFOs"
    }
    fn config_sections(&self) -> &'static [&'static str] {
        &["session"]
    }
    fn configure(&self, staged: &mut Staged, s: &Section, file: &str) -> Result<(), ConfError> {
        let mut cfg = session::Config::default();
        let mut c = SectionCursor::new(s, file);
        while let Some(k) = c.next_key() {
            match k.text.as_str() {
                "enable" => cfg.enabled = true,
                "use-app-socket-api" => {}
                "event-queue-length" => {
                    let v = c.value_u64(k)?;
                    if !(16..=1 << 20).contains(&v) || !v.is_power_of_two() {
                        return Err(c.error(
                            k,
                            &format!("event-queue-length {v}: a power of two in 16..1048576"),
                        ));
                    }
                    cfg.evq_len = v as u32;
                }
                "fifo-size" => {
                    let v = c.value_u64(k)?;
                    if !(4096..=1 << 26).contains(&v) || !v.is_power_of_two() {
                        return Err(c.error(
                            k,
                            &format!("fifo-size {v}: a power of two in 4096..67108864"),
                        ));
                    }
                    cfg.fifo_size = v as u32;
                }
                "tcp-syn-backlog" => {
                    let v = c.value_u64(k)?;
                    if !(1..=65536).contains(&v) {
                        return Err(
                            c.error(k, &format!("tcp-syn-backlog {v} out of range 1..65536"))
                        );
                    }
                    cfg.syn_backlog = v as u32;
                }
                "tcp-syn-cookies" => {
                    let v = c.value(k)?;
                    cfg.syn_cookies = match v.text.as_str() {
                        "on" => true,
                        "off" => false,
                        t => return Err(c.error(v, &format!("tcp-syn-cookies {t}: on or off"))),
                    };
                }
                "tcp-tso" => {
                    let v = c.value(k)?;
                    cfg.tso = match v.text.as_str() {
                        "on" => tcp::TSO_MAX,
                        "off" => 0,
                        t => match t.parse::<u32>() {
                            Ok(n) if n == 0 || (2048..=tcp::TSO_MAX).contains(&n) => {
                                // Rounded down to whole segments of the connection's MSS:
                                // below two, no aggregate at all.
                                if n != 0 && n < 2 * 1460 {
                                    log::warn!(
                                        "session: tcp-tso {n}: aggregates are whole segments, \
                                         so below two (2920 bytes at MSS 1460) there are none"
                                    );
                                }
                                n
                            }
                            _ => {
                                let e = format!(
                                    "tcp-tso {t}: on, off or the bytes of an aggregate \
                                     (2048..{})",
                                    tcp::TSO_MAX
                                );
                                return Err(c.error(v, &e));
                            }
                        },
                    };
                }
                "tcp-delayed-ack" => {
                    let v = c.value_u64(k)?;
                    if v > 500 {
                        return Err(c.error(
                            k,
                            &format!("tcp-delayed-ack {v}: milliseconds in 0..500 (0: off)"),
                        ));
                    }
                    cfg.delayed_ack = std::time::Duration::from_millis(v);
                }
                "tcp-keepalive" => {
                    let idle = c.value_u64(k)?;
                    let interval = c.value_u64(k)?;
                    let probes = c.value_u64(k)?;
                    if !(1..=86400).contains(&idle)
                        || !(1..=86400).contains(&interval)
                        || !(1..=255).contains(&probes)
                    {
                        return Err(c.error(
                            k,
                            &format!(
                                "tcp-keepalive {idle} {interval} {probes}: idle and interval seconds in 1..86400, probes in 1..255"
                            ),
                        ));
                    }
                    cfg.keepalive = Some(tcp::Keepalive {
                        idle: std::time::Duration::from_secs(idle),
                        interval: std::time::Duration::from_secs(interval),
                        probes: probes as u32,
                    });
                }
                "sessions-per-app" => {
                    let v = c.value_u64(k)?;
                    if !(1..=4096).contains(&v) {
                        return Err(
                            c.error(k, &format!("sessions-per-app {v} out of range 1..4096"))
                        );
                    }
                    cfg.sessions_per_app = v as u32;
                }
                "app-socket" => {
                    let v = c.value(k)?;
                    if v.text.is_empty() || v.text.len() > 100 {
                        return Err(c.error(v, "app-socket path empty or longer than 100 bytes"));
                    }
                    cfg.app_socket = v.text.clone();
                }
                _ => return Err(c.unknown(k)),
            }
        }
        staged.get_mut::<Staging>().cfg = Some(cfg);
        Ok(())
    }
    fn register(&self, r: &mut Registrar) -> Result<(), RegisterError> {
        let sm: Shared = Default::default();
        node::register(&mut r.graph, &sm);
        let enabled = Arc::new(AtomicBool::new(false));
        let e = enabled.clone();
        r.graph.register(
            NodeRegistration::new(PROCESS, NodeKind::Process, move |_| {
                Box::new(Process {
                    poster: None,
                    enabled: e.clone(),
                })
            })
            .counters(ProcessCounter::DESCS),
        );
        api::register(&mut r.api);
        let hs = r.staged.get_mut::<Hoststack>();
        hs.sm = Some(sm);
        hs.enabled = enabled;
        r.cli(
            "session enable",
            "session enable — start the session layer (bind the app socket)",
            cli_enable,
        );
        r.cli(
            "session disable",
            "session disable — detach every application, close the app socket",
            cli_disable,
        );
        r.cli(
            "show session",
            "show session [verbose] — sessions, attached applications",
            cli_show,
        );
        Ok(())
    }
    fn init(&self, vm: &mut Vlib) -> Result<(), String> {
        let cfg = vm.ext_mut::<Staging>().cfg.take().unwrap_or_default();
        if vm.n_threads() > session::SESSION_THREADS {
            return Err(format!(
                "session: cpu {{ workers {} }}: at most {} workers (a session segment has \
                 at most {} event-queue pairs, one per thread)",
                vm.n_workers(),
                session::SESSION_THREADS - 1,
                sluice_session::seg::MAX_QUEUES
            ));
        }
        let sm = shared(vm);
        let on = cfg.enabled;
        let poster = vm.main_poster();
        {
            let mut g = session_lock(&sm);
            g.set_cfg(cfg);
            g.poster = Some(poster.clone());
        }
        if let Some(p) = vm.registry.find(PROCESS) {
            if let Some(pr) = vm.main.node_mut::<Process>(p) {
                pr.poster = Some(poster);
            }
        }
        if on {
            enable(vm).map_err(|e| format!("session: {e}"))?;
        }
        Ok(())
    }
}

fn shared(vm: &mut Vlib) -> Shared {
    vm.ext_mut::<Hoststack>()
        .sm
        .get_or_insert_with(Default::default)
        .clone()
}

fn session_lock(s: &Shared) -> std::sync::MutexGuard<'_, SessionMain> {
    node::lock(s)
}

/// `session-process`: every 10 ms while the session layer is on, has the main loop serve
/// the application socket ([`poll_control`]) — a fallback and the clock of attach
/// timeouts: a readable control socket has `session-queue` post the same at once; while
/// the layer is off, waits for `session enable`'s signal. next: none. counters: `polls`
/// (info).
struct Process {
    poster: Option<sluice_graph::MainPoster>,
    enabled: Arc<AtomicBool>,
}

sluice_graph::counters! {
    /// The session process node's counters.
    enum ProcessCounter {
        /// Application sockets polled.
        Polls => info("polls", "application socket polls"),
    }
}

impl NodeFn for Process {
    fn process(&mut self, cx: &mut Cx, _wake: Wake) -> Suspend {
        if !self.enabled.load(Ordering::Relaxed) {
            // Off: sleep until `session enable` signals.
            return Suspend::Event;
        }
        if let Some(p) = &self.poster {
            cx.count(ProcessCounter::Polls, 1);
            p.post(Box::new(poll_control));
        }
        Suspend::EventOrTimeout(0.01)
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// Sluice's interface addresses with their prefix lengths, both families.
fn local_addrs(vm: &mut Vlib) -> Vec<(IpAddr, u8)> {
    let ifs: Vec<u32> = vm
        .ext_mut::<Interfaces>()
        .list
        .iter()
        .filter(|i| !i.deleted)
        .map(|i| i.sw_if_index.0)
        .collect();
    let mut out = Vec::new();
    for i in ifs {
        for (a, l) in sluice_vnet::ip4::addresses(vm, i) {
            out.push((IpAddr::V4(Ipv4Addr::from(a)), l));
        }
        for (a, l) in sluice_vnet::ip6::addresses(vm, i) {
            out.push((IpAddr::V6(Ipv6Addr::from(a)), l));
        }
    }
    out
}

/// The UDP ports another node than the host stack's serves through `ip4-local`/`ip6-local`:
/// (IPv6?, port).
fn foreign_udp_ports(vm: &Vlib) -> Vec<(bool, u16)> {
    use sluice_vnet::ip_local::{LocalKey, LocalRegistrations};
    vm.ext::<LocalRegistrations>()
        .map(|r| {
            r.list
                .iter()
                .filter_map(|(v6, k, node, _)| match k {
                    LocalKey::UdpPort(p)
                        if node != node::UDP4_INPUT && node != node::UDP6_INPUT =>
                    {
                        Some((*v6, *p))
                    }
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Applies the UDP port changes on every thread; returns the registrations that failed
/// (IPv6?, port, why), for [`SessionMain::refuse_unregistered`].
fn apply_ports(vm: &mut Vlib, ports: Vec<PortChange>) -> Vec<(bool, u16, SessionError)> {
    use sluice_vnet::ip_local::{register, unregister_node, LocalKey};
    let mut failed = Vec::new();
    for (v6, port, on) in ports {
        let node = if v6 {
            node::UDP6_INPUT
        } else {
            node::UDP4_INPUT
        };
        let key = LocalKey::UdpPort(port);
        let r = if on {
            register(vm, v6, key, node)
        } else {
            unregister_node(vm, v6, key, node)
        };
        if let Err(e) = r {
            log::warn!("session: udp port {port}: {e}");
            if on {
                failed.push((v6, port, SessionError::from_registration(&e)));
            }
        }
    }
    failed
}

/// Serves the application socket once (attaches, binds, connects, closes, dead
/// applications), applies the port registrations that changed on every thread, and only
/// then replies to the requests: a bind or listen returns once every thread's
/// `ip4-local`/`ip6-local` hands its packets to the host stack.
pub fn poll_control(vm: &mut Vlib) {
    let sm = shared(vm);
    let locals = local_addrs(vm);
    let foreign = foreign_udp_ports(vm);
    let mut ports = Vec::new();
    let (tcp, replies, applied) = {
        let mut g = session_lock(&sm);
        g.foreign_udp = foreign;
        g.poll(locals, &mut ports);
        let tcp = g.tcp_wanted();
        (tcp, g.has_replies(), g.tcp_applied())
    };
    let failed = apply_ports(vm, ports);
    // Only a failed registration refuses replies: a failed unregistration (nothing left to
    // serve) was logged and is tried again on the next poll.
    let tcp_failed = apply_tcp(vm, tcp).err().filter(|_| tcp);
    // Protocol 6 newly registered: the connections held since are sent (`set_tcp_applied`).
    let newly = tcp && !applied && tcp_failed.is_none();
    if !replies && !newly {
        return;
    }
    // The sessions whose registration failed are closed and their replies say why; an
    // application detached because its socket refused a reply releases its ports.
    let mut ports = Vec::new();
    let tcp = {
        let mut g = session_lock(&sm);
        g.refuse_unregistered(&failed, tcp_failed.as_ref(), &mut ports);
        if newly {
            g.set_tcp_applied(true);
        }
        g.send_replies(&mut ports);
        g.tcp_wanted()
    };
    apply_ports(vm, ports);
    // A failure here was logged; no reply waits on it.
    let _ = apply_tcp(vm, tcp);
}

/// Sends TCP to `tcp4-input`/`tcp6-input` while TCP sessions exist (otherwise
/// `ip4-local`/`ip6-local` punt it, as before: linux-cp's host keeps its TCP). A failed
/// registration is undone (both families or neither) and returned.
fn apply_tcp(vm: &mut Vlib, want: bool) -> Result<(), SessionError> {
    use sluice_vnet::ip_local::{register, unregister_node, LocalKey};
    if vm.ext_mut::<Hoststack>().tcp_registered == want {
        return Ok(());
    }
    let mut err = None;
    for (v6, node) in [(false, node::TCP4_INPUT), (true, node::TCP6_INPUT)] {
        let r = if want {
            register(vm, v6, LocalKey::Protocol(6), node)
        } else {
            unregister_node(vm, v6, LocalKey::Protocol(6), node)
        };
        if let Err(e) = r {
            log::warn!("session: {node}: {e}");
            err.get_or_insert(SessionError::from_registration(&e));
        }
    }
    match err {
        None => {
            vm.ext_mut::<Hoststack>().tcp_registered = want;
            Ok(())
        }
        Some(e) => {
            if want {
                for (v6, node) in [(false, node::TCP4_INPUT), (true, node::TCP6_INPUT)] {
                    let _ = unregister_node(vm, v6, LocalKey::Protocol(6), node);
                }
            }
            Err(e)
        }
    }
}

/// `session enable`: binds the application socket.
pub fn enable(vm: &mut Vlib) -> Result<(), SessionError> {
    let sm = shared(vm);
    session_lock(&sm).enable()?;
    vm.ext_mut::<Hoststack>()
        .enabled
        .store(true, Ordering::Relaxed);
    Ok(())
}

/// `session disable`: detaches every application and closes the socket.
pub fn disable(vm: &mut Vlib) {
    let sm = shared(vm);
    let mut ports = Vec::new();
    {
        let mut g = session_lock(&sm);
        g.disable(&mut ports);
        g.set_tcp_applied(false);
    }
    vm.ext_mut::<Hoststack>()
        .enabled
        .store(false, Ordering::Relaxed);
    apply_ports(vm, ports);
    // Unregistrations only: a failure was logged.
    let _ = apply_tcp(vm, false);
}

fn cli_enable(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    enable(vm).map_err(|e| CliError::new(e.to_string()))?;
    Ok(String::new())
}

fn cli_disable(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    disable(vm);
    Ok(String::new())
}

/// `show session`'s heading of thread `t`'s sessions.
fn thread_header(o: &mut String, sm: &SessionMain, t: usize) {
    let n = sm.workers[t].sessions.iter().flatten().count();
    let _ = writeln!(o, "Thread {t}: {n} active sessions");
    let _ = writeln!(
        o,
        "{:<52} {:<8} {:>10} {:>10}",
        "Connection", "State", "Rx-f", "Tx-f"
    );
}

fn cli_show(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let verbose = a.keyword("verbose");
    a.finish()?;
    let sm = shared(vm);
    let sm = session_lock(&sm);
    let mut o = String::new();
    if !sm.enabled() {
        return Ok("session layer is disabled\n".into());
    }
    let _ = writeln!(o, "app socket {}", sm.cfg().app_socket);
    let mut thread = usize::MAX;
    for (sid, s) in sm.iter() {
        let t = session::handle_thread(sid);
        if t != thread {
            // Every thread up to this one (those with no session too).
            for u in thread.wrapping_add(1)..=t {
                thread_header(&mut o, &sm, u);
            }
            thread = t;
        }
        let app = sm.apps.get(s.app as usize).and_then(|a| a.as_ref());
        let (rxf, txf) = app
            .and_then(|a| a.fifos(s.slot))
            .map(|(r, t)| {
                let g = app.map(|a| a.g.fifo_size).unwrap_or(0);
                (g - r.free_bytes(), g - t.free_bytes())
            })
            .unwrap_or((0, 0));
        let (remote, state) = match (s.remote, &s.proto) {
            (Some(r), session::Proto::Tcp(t, _)) => (r.to_string(), t.state.name()),
            (Some(r), _) => (r.to_string(), "OPENED"),
            (None, _) => ("0.0.0.0:0".to_string(), "LISTEN"),
        };
        let kind = if s.proto.is_tcp() { 'T' } else { 'U' };
        let conn = format!(
            "[{t}:{}][{kind}] {}->{remote}",
            session::handle_index(sid),
            s.local
        );
        let _ = writeln!(o, "{conn:<52} {state:<8} {rxf:>10} {txf:>10}");
        if verbose {
            let st = s.stats;
            let _ = writeln!(
                o,
                "    app {} `{}' slot {}: rx {} dgrams {} bytes ({} dropped, fifo full), tx {} dgrams {} bytes",
                s.app,
                app.map(|a| a.name.as_str()).unwrap_or("?"),
                s.slot,
                st.rx,
                st.rx_bytes,
                st.rx_full,
                st.tx,
                st.tx_bytes
            );
            if let session::Proto::Tcp(t, _) = &s.proto {
                let _ = writeln!(o, "    tcp {}", t.summary());
            }
        }
    }
    for u in thread.wrapping_add(1)..sm.n_threads() {
        thread_header(&mut o, &sm, u);
    }
    if verbose {
        let t = sm.tcp_stats();
        let _ = writeln!(
            o,
            "tcp: {} accepted, {} connected, {} resets ({} keepalive timeouts), {} TIME-WAIT ended by RST, {} SYNs dropped (backlog full), {} SYNs dropped (session table full), {} accepts without a free slot, syn cookies {} sent {} accepted {} bad",
            t.accepted,
            t.connected,
            t.resets,
            t.keepalive_timeouts,
            t.time_wait_rst,
            t.backlog_full,
            t.table_full,
            t.no_slot,
            t.syn_cookies_sent,
            t.syn_cookies_ok,
            t.syn_cookies_bad
        );
        let _ = writeln!(
            o,
            "applications: {} attached ({} attaches, {} detaches, {} bad control messages, \
             {} events refused by a full queue, {} awaiting retry)",
            sm.apps.iter().flatten().count(),
            sm.attached,
            sm.detached,
            sm.bad_msgs,
            sm.evq_refused,
            sm.evq_awaiting()
        );
        let _ = writeln!(
            o,
            "control requests: {} forwarded to the connection's owner thread, {} stale dropped",
            sm.ctl_forwarded, sm.ctl_stale
        );
        for (i, a) in sm.apps.iter().enumerate() {
            if let Some(a) = a {
                let _ = writeln!(
                    o,
                    "  app {i} `{}': segment {} bytes, {} slots x 2 FIFOs of {} bytes, event queues {}",
                    a.name,
                    a.g.size(),
                    a.g.n_slots,
                    a.g.fifo_size,
                    a.g.evq_len
                );
            }
        }
    }
    Ok(o)
}
