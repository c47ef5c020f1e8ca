//! `acl`: stateless access control lists with VPP's acl-plugin CLI.
//!
//! ```text
//! set acl-plugin acl [index <n>] permit|deny src <prefix> dst <prefix> [proto <p>]
//!     [sport <a>[-<b>]] [dport <a>[-<b>]] [tcpflags <v> mask <m>] [tag <t>] [, <rule> ...]
//! set acl-plugin interface <if> input|output acl <n> [del]
//! show acl-plugin acl [index <n>]      # rules with their hit counts
//! show acl-plugin interface
//! delete acl-plugin acl index <n>
//! ```
//!
//! An interface's input (or output) list is its ACLs in the order applied; a packet takes
//! the action of the first rule that matches across the list, and is dropped when none does
//! (VPP's implicit deny). For ICMP rules `sport`/`dport` are the type and code ranges.
//! Non-first fragments and packets with a truncated L4 header match only rules that look at
//! no L4 field. The rules of a list are compiled into a tuple-space-search classifier
//! ([`rules::Classifier`]). `permit+reflect` (stateful sessions) is not implemented and is
//! refused.
//!
//! Nodes, one per family and direction, each a feature of the arc named:
//! `acl-plugin-in-ip4-fa` (`ip4-unicast`), `acl-plugin-in-ip6-fa` (`ip6-unicast`),
//! `acl-plugin-out-ip4-fa` (`ip4-output`), `acl-plugin-out-ip6-fa` (`ip6-output`).
//! - uses: input: the IP header at `current_data` and `rx_if`; output: the IP header after
//!   the 14-byte Ethernet header the rewrite wrote, and `tx_if`.
//! - next: `error-drop` (0) for denied packets; the arc's next feature or its end
//!   (`ip4-lookup`/`ip6-lookup`, or `interface-output` for the output arcs) (1).
//! - counters: `permit` (info), `deny` (rule said deny), `no_match` (implicit deny),
//!   `malformed` (no IP header).

pub mod rules;

use rules::{Action, Classifier, Key, Rule};
use sluice_buffer::Buffer;
use sluice_cli::{Args, CliError};
use sluice_graph::{Cx, Next, NodeKind, NodeRegistration, PacketNode, PerPacket, Vlib, FRAME_SIZE};
use sluice_vnet::feature::{FeatureDef, FeatureNext};
use sluice_vnet::plugin::{Plugin, RegisterError, Registrar};
use sluice_vnet::Interfaces;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// The nodes: (name, arc, IPv6, output, arc end).
const NODES: [(&str, &str, bool, bool, &str); 4] = [
    (
        "acl-plugin-in-ip4-fa",
        "ip4-unicast",
        false,
        false,
        "ip4-lookup",
    ),
    (
        "acl-plugin-in-ip6-fa",
        "ip6-unicast",
        true,
        false,
        "ip6-lookup",
    ),
    (
        "acl-plugin-out-ip4-fa",
        "ip4-output",
        false,
        true,
        "interface-output",
    ),
    (
        "acl-plugin-out-ip6-fa",
        "ip6-output",
        true,
        true,
        "interface-output",
    ),
];

mod counter {
    use sluice_graph::CounterDesc;
    pub const PERMIT: usize = 0;
    pub const DENY: u16 = 1;
    pub const NO_MATCH: u16 = 2;
    pub const MALFORMED: u16 = 3;
    pub const DESCS: [CounterDesc; 4] = [
        CounterDesc::info("permit", "ACL permit packets"),
        CounterDesc::error("deny", "ACL deny packets"),
        CounterDesc::error("no_match", "no ACL rule matched (implicit deny)"),
        CounterDesc::error("malformed", "packet too short for its IP header"),
    ];
}

const DROP: Next = Next(0);
const END: Next = Next(1);

/// An ACL.
#[derive(Clone, Debug, Default)]
pub struct Acl {
    /// Its rules in order.
    pub rules: Vec<Rule>,
    /// `tag`.
    pub tag: String,
}

/// An interface's compiled list: the classifier and, per rule, (ACL index, rule index).
pub struct IfList {
    c: Classifier,
    owner: Vec<(u32, u32)>,
}

/// What the nodes read: compiled lists per interface and direction.
#[derive(Default)]
pub struct Compiled {
    input: Vec<Option<Arc<IfList>>>,
    output: Vec<Option<Arc<IfList>>>,
}

/// A thread's view: the compiled lists in force and its rule hit counts.
#[derive(Default)]
pub struct ThreadAcl {
    compiled: Arc<Compiled>,
    /// hits[acl][rule].
    hits: Vec<Vec<u64>>,
}

/// Shared state (a `Vlib` extension through [`AclMain`]).
#[derive(Default)]
pub struct AclShared {
    threads: OnceLock<Box<[Mutex<ThreadAcl>]>>,
}

/// The control plane.
#[derive(Default)]
pub struct AclMain {
    /// Shared with the nodes.
    pub shared: Arc<AclShared>,
    /// ACLs by index.
    pub acls: BTreeMap<u32, Acl>,
    /// Input lists by sw_if_index.
    pub input: BTreeMap<u32, Vec<u32>>,
    /// Output lists.
    pub output: BTreeMap<u32, Vec<u32>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl AclShared {
    fn threads(&self) -> &[Mutex<ThreadAcl>] {
        self.threads.get().map(|t| &t[..]).unwrap_or(&[])
    }
}

/// Parses the IP packet at `d` into a [`Key`] (`None`: no complete IP header).
#[inline(always)]
pub fn key_of(d: &[u8], v6: bool) -> Option<Key> {
    let (src, dst, proto, l4, first) = if v6 {
        let h = d.get(..40)?;
        let p = sluice_wire::ipv6::Ipv6Packet::new_unchecked(d);
        let (nh, off, first) = match p.walk_extensions() {
            Ok((44, off)) => (44, off, false),
            Ok((nh, off)) => (nh, off, true),
            Err(_) => (h[6], 40, false),
        };
        let a = |o: usize| u128::from_be_bytes(h[o..o + 16].try_into().unwrap_or([0; 16]));
        (a(8), a(24), nh, off, first)
    } else {
        let h = d.get(..20)?;
        let ihl = (h[0] as usize & 0xf) * 4;
        let a = |o: usize| u32::from_be_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]) as u128;
        let frag = u16::from_be_bytes([h[6], h[7]]) & 0x1fff;
        (a(12), a(16), h[9], ihl, frag == 0)
    };
    let mut k = Key {
        v6,
        src,
        dst,
        proto,
        ..Key::default()
    };
    let be = |o: usize| Some(u16::from_be_bytes([*d.get(o)?, *d.get(o + 1)?]));
    if first {
        match proto {
            6 if d.len() >= l4 + 14 => {
                k.sport = be(l4)?;
                k.dport = be(l4 + 2)?;
                k.tcp_flags = d[l4 + 13];
                k.l4 = true;
            }
            17 if d.len() >= l4 + 4 => {
                k.sport = be(l4)?;
                k.dport = be(l4 + 2)?;
                k.l4 = true;
            }
            1 | 58 if d.len() >= l4 + 2 => {
                k.sport = d[l4] as u16;
                k.dport = d[l4 + 1] as u16;
                k.l4 = true;
            }
            6 | 17 | 1 | 58 => {}
            _ => k.l4 = true,
        }
    }
    Some(k)
}

struct AclNode {
    v6: bool,
    out: bool,
    shared: Arc<AclShared>,
    features: Arc<FeatureNext>,
    slot: usize,
    cur: Arc<Compiled>,
    hits: Vec<(u32, u32)>,
}

impl PacketNode for AclNode {
    #[inline(always)]
    fn begin_frame(&mut self, cx: &mut Cx) {
        if let Some(t) = self.shared.threads().get(cx.thread()) {
            self.cur = lock(t).compiled.clone();
        }
    }

    #[inline(always)]
    fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        let (sw_if, off) = if self.out {
            (b.hdr.tx_if, 14)
        } else {
            (b.hdr.rx_if, 0)
        };
        let lists = if self.out {
            &self.cur.output
        } else {
            &self.cur.input
        };
        let pass = self.features.next(self.slot, sw_if, END);
        let Some(list) = lists.get(sw_if as usize).and_then(|l| l.as_ref()) else {
            cx.count(counter::PERMIT, 1);
            return pass;
        };
        let Some(k) = b.data().get(off..).and_then(|d| key_of(d, self.v6)) else {
            b.hdr.error = cx.error(counter::MALFORMED);
            return DROP;
        };
        match list.c.lookup(&k) {
            Some(i) => {
                if self.hits.len() < FRAME_SIZE {
                    self.hits.push(list.owner[i as usize]);
                }
                match list.c.rules()[i as usize].action {
                    Action::Permit => {
                        cx.count(counter::PERMIT, 1);
                        pass
                    }
                    Action::Deny => {
                        b.hdr.error = cx.error(counter::DENY);
                        DROP
                    }
                }
            }
            None => {
                b.hdr.error = cx.error(counter::NO_MATCH);
                DROP
            }
        }
    }

    #[inline(always)]
    fn end_frame(&mut self, cx: &mut Cx) {
        if self.hits.is_empty() {
            return;
        }
        if let Some(t) = self.shared.threads().get(cx.thread()) {
            let mut t = lock(t);
            for &(a, r) in &self.hits {
                if let Some(h) = t
                    .hits
                    .get_mut(a as usize)
                    .and_then(|v| v.get_mut(r as usize))
                {
                    *h += 1;
                }
            }
        }
        self.hits.clear();
    }
}

/// The plugin.
pub struct AclPlugin;

/// This plugin, for the daemon's plugin list.
pub static PLUGIN: AclPlugin = AclPlugin;

impl Plugin for AclPlugin {
    fn name(&self) -> &'static str {
        "acl"
    }
    fn version(&self) -> &'static str {
        env!("CARGO_PKG_VERSION")
    }
    fn description(&self) -> &'static str {
        "Access Control Lists (stateless, tuple-space search)"
    }
    fn register(&self, r: &mut Registrar) -> Result<(), RegisterError> {
        let shared = r.staged.get_mut::<AclMain>().shared.clone();
        let features = r.feature_table();
        for (name, arc, v6, out, end) in NODES {
            let slot = r.feature(FeatureDef {
                arc,
                node: name,
                runs_before: &[],
                runs_after: &[],
            })?;
            let (sh, f) = (shared.clone(), features.clone());
            r.node(
                NodeRegistration::new(name, NodeKind::Internal, move |_| {
                    Box::new(PerPacket::new(AclNode {
                        v6,
                        out,
                        shared: sh.clone(),
                        features: f.clone(),
                        slot,
                        cur: Arc::default(),
                        hits: Vec::with_capacity(FRAME_SIZE),
                    }))
                })
                .nexts(&["error-drop", end])
                .counters(&counter::DESCS),
            );
        }
        r.cli(
            "set acl-plugin acl",
            "set acl-plugin acl [index <idx>] <permit|deny> src <PREFIX> dst <PREFIX> [proto X] [sport X[-Y]] [dport X[-Y]] [tcpflags <int> mask <int>] [tag FOO] {use comma separated list for multiple rules}",
            cli_set_acl,
        );
        r.cli(
            "set acl-plugin interface",
            "set acl-plugin interface <interface> <input|output> <acl INDEX> [del]",
            cli_interface,
        );
        r.cli(
            "delete acl-plugin acl",
            "delete acl-plugin acl index <idx>",
            cli_delete,
        );
        r.cli(
            "show acl-plugin acl",
            "show acl-plugin acl [index N]",
            cli_show_acl,
        );
        r.cli(
            "show acl-plugin interface",
            "show acl-plugin interface",
            cli_show_interface,
        );
        Ok(())
    }
    fn init(&self, vm: &mut Vlib) -> Result<(), String> {
        let n = vm.n_threads();
        let _ = vm
            .ext_mut::<AclMain>()
            .shared
            .threads
            .set((0..n).map(|_| Mutex::new(ThreadAcl::default())).collect());
        Ok(())
    }
}

/// Recompiles every interface list and hands the result to every thread; `reset` clears
/// the hit counts of those ACLs.
fn publish(m: &AclMain, reset: &[u32]) {
    let compile = |lists: &BTreeMap<u32, Vec<u32>>| -> Vec<Option<Arc<IfList>>> {
        let mut v: Vec<Option<Arc<IfList>>> = Vec::new();
        for (&i, list) in lists {
            let mut rules = Vec::new();
            let mut owner = Vec::new();
            for &a in list {
                if let Some(acl) = m.acls.get(&a) {
                    for (j, r) in acl.rules.iter().enumerate() {
                        rules.push(*r);
                        owner.push((a, j as u32));
                    }
                }
            }
            if v.len() <= i as usize {
                v.resize(i as usize + 1, None);
            }
            v[i as usize] = Some(Arc::new(IfList {
                c: Classifier::new(rules),
                owner,
            }));
        }
        v
    };
    let c = Arc::new(Compiled {
        input: compile(&m.input),
        output: compile(&m.output),
    });
    let max = m.acls.keys().next_back().map_or(0, |&k| k as usize + 1);
    for t in m.shared.threads() {
        let mut t = lock(t);
        t.compiled = c.clone();
        if t.hits.len() < max {
            t.hits.resize(max, Vec::new());
        }
        for (&a, acl) in &m.acls {
            let h = &mut t.hits[a as usize];
            if reset.contains(&a) {
                h.clear();
            }
            h.resize(acl.rules.len(), 0);
        }
    }
}

fn prefix(w: &str) -> Result<(bool, u128, u8), CliError> {
    let bad = || CliError::new(format!("expected an IPv4 or IPv6 prefix, got `{w}'"));
    let (a, l) = w.split_once('/').unwrap_or((w, ""));
    if let Ok(x) = a.parse::<Ipv4Addr>() {
        let l = if l.is_empty() {
            32
        } else {
            l.parse::<u8>().map_err(|_| bad())?
        };
        if l > 32 {
            return Err(bad());
        }
        return Ok((false, rules::mask(u32::from(x) as u128, l, false), l));
    }
    if let Ok(x) = a.parse::<Ipv6Addr>() {
        let l = if l.is_empty() {
            128
        } else {
            l.parse::<u8>().map_err(|_| bad())?
        };
        if l > 128 {
            return Err(bad());
        }
        return Ok((true, rules::mask(u128::from(x), l, true), l));
    }
    Err(bad())
}

fn port_range(a: &mut Args, what: &str) -> Result<(u16, u16), CliError> {
    let (x, y) = a.range_u32(what)?;
    if y > 65535 {
        return Err(CliError::new(format!("{what} `{y}' out of range 0..65535")));
    }
    Ok((x as u16, y as u16))
}

fn parse_rule(a: &mut Args, tag: &mut String) -> Result<Rule, CliError> {
    let act = a.word("permit|deny")?;
    let action = match act.as_str() {
        "permit" => Action::Permit,
        "deny" => Action::Deny,
        "permit+reflect" => {
            return Err(CliError::new(
                "`permit+reflect': stateful sessions are not implemented yet",
            ))
        }
        _ => return Err(CliError::new(format!("expected permit|deny, got `{act}'"))),
    };
    let mut src = None;
    let mut dst = None;
    let mut r = Rule::any(action, false);
    let mut ports = false;
    while !a.is_empty() {
        let w = a.word("option")?;
        match w.as_str() {
            "src" => src = Some(prefix(&a.word("source prefix")?)?),
            "dst" => dst = Some(prefix(&a.word("destination prefix")?)?),
            "proto" => {
                let p = a.u32("protocol")?;
                if p > 255 {
                    return Err(CliError::new(format!("proto `{p}' out of range 0..255")));
                }
                r.proto = (p != 0).then_some(p as u8);
            }
            "sport" => {
                r.sport = port_range(a, "source port")?;
                ports = true;
            }
            "dport" => {
                r.dport = port_range(a, "destination port")?;
                ports = true;
            }
            "tcpflags" => {
                let v = a.u32("tcp flags value")?;
                if !a.keyword("mask") {
                    return Err(CliError::new("expected tcpflags <value> mask <mask>"));
                }
                let m = a.u32("tcp flags mask")?;
                if v > 255 || m > 255 {
                    return Err(CliError::new("tcpflags value and mask are 0..255"));
                }
                r.tcp_flags = (v as u8, m as u8);
                ports = true;
            }
            "tag" => *tag = a.word("tag")?,
            _ => return Err(CliError::unknown_input(&w)),
        }
    }
    let any4 = (false, 0, 0);
    let (s, d) = match (src, dst) {
        (Some(s), Some(d)) => (s, d),
        (Some(s), None) => (s, (s.0, 0, 0)),
        (None, Some(d)) => ((d.0, 0, 0), d),
        (None, None) => (any4, any4),
    };
    if s.0 != d.0 {
        return Err(CliError::new("src and dst prefixes of different families"));
    }
    if ports && r.proto.is_none() {
        return Err(CliError::new("sport/dport/tcpflags need proto"));
    }
    if r.tcp_flags.1 != 0 && r.proto != Some(6) {
        return Err(CliError::new("tcpflags need proto 6"));
    }
    r.v6 = s.0;
    r.src = (s.1, s.2);
    r.dst = (d.1, d.2);
    Ok(r)
}

fn cli_set_acl(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let index = if a.keyword("index") {
        Some(a.u32("acl index")?)
    } else {
        None
    };
    let mut tag = String::from("cli");
    let mut rules = Vec::new();
    // Rules are separated by commas (`permit ... dport 80, deny ...`).
    let text = a.rest();
    for chunk in text.split(',') {
        let mut ra = Args::new(chunk);
        rules.push(parse_rule(&mut ra, &mut tag)?);
        ra.finish()?;
    }
    let m = vm.ext_mut::<AclMain>();
    let i = match index {
        Some(i) => i,
        None => (0..).find(|i| !m.acls.contains_key(i)).unwrap_or(0),
    };
    m.acls.insert(i, Acl { rules, tag });
    publish(m, &[i]);
    Ok(format!("ACL index:{i}\n"))
}

fn cli_delete(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    if !a.keyword("index") {
        return Err(CliError::new("expected index <idx>"));
    }
    let i = a.u32("acl index")?;
    a.finish()?;
    let m = vm.ext_mut::<AclMain>();
    if !m.acls.contains_key(&i) {
        return Err(CliError::new(format!("acl `{i}' does not exist")));
    }
    if m.input
        .values()
        .chain(m.output.values())
        .any(|l| l.contains(&i))
    {
        return Err(CliError::new(format!(
            "acl `{i}' is applied to an interface"
        )));
    }
    m.acls.remove(&i);
    publish(m, &[i]);
    Ok(String::new())
}

fn cli_interface(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let name = a.word("interface")?;
    let sw = vm
        .ext_mut::<Interfaces>()
        .find(&name)
        .ok_or_else(|| CliError::new(format!("unknown interface `{name}'")))?
        .0;
    let dir = a.word("input|output")?;
    let out = match dir.as_str() {
        "input" => false,
        "output" => true,
        _ => return Err(CliError::new(format!("expected input|output, got `{dir}'"))),
    };
    if !a.keyword("acl") {
        return Err(CliError::new("expected acl <index>"));
    }
    let i = a.u32("acl index")?;
    let del = a.keyword("del");
    a.finish()?;
    let m = vm.ext_mut::<AclMain>();
    if !del && !m.acls.contains_key(&i) {
        return Err(CliError::new(format!("acl `{i}' does not exist")));
    }
    let lists = if out { &mut m.output } else { &mut m.input };
    let l = lists.entry(sw).or_default();
    let was_empty = l.is_empty();
    if del {
        let Some(p) = l.iter().position(|&x| x == i) else {
            return Err(CliError::new(format!("acl `{i}' is not applied there")));
        };
        l.remove(p);
    } else if l.contains(&i) {
        return Err(CliError::new(format!("acl `{i}' is already applied there")));
    } else {
        l.push(i);
    }
    let now_empty = l.is_empty();
    if now_empty {
        lists.remove(&sw);
    }
    publish(m, &[]);
    if was_empty != now_empty {
        for (node, arc, _, o, _) in NODES {
            if o == out {
                sluice_vnet::feature::set_feature(vm, sw, arc, node, !now_empty)?;
            }
        }
    }
    Ok(String::new())
}

fn cli_show_acl(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let only = if a.keyword("index") {
        Some(a.u32("acl index")?)
    } else {
        None
    };
    a.finish()?;
    let m = vm.ext_mut::<AclMain>();
    let mut out = String::new();
    for (&i, acl) in &m.acls {
        if only.is_some_and(|o| o != i) {
            continue;
        }
        let _ = writeln!(
            out,
            "acl-index {i} count {} tag {{{}}}",
            acl.rules.len(),
            acl.tag
        );
        for (j, r) in acl.rules.iter().enumerate() {
            let hits: u64 = m
                .shared
                .threads()
                .iter()
                .map(|t| {
                    lock(t)
                        .hits
                        .get(i as usize)
                        .and_then(|h| h.get(j))
                        .copied()
                        .unwrap_or(0)
                })
                .sum();
            let fam = if r.v6 { "ipv6" } else { "ipv4" };
            let _ = writeln!(out, "    {j:>6}: {fam} {r} hits {hits}");
        }
        let on = |l: &BTreeMap<u32, Vec<u32>>| -> String {
            l.iter()
                .filter(|(_, v)| v.contains(&i))
                .map(|(k, _)| k.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        };
        let _ = writeln!(out, "  applied inbound on sw_if_index: {}", on(&m.input));
        let _ = writeln!(out, "  applied outbound on sw_if_index: {}", on(&m.output));
    }
    if let Some(o) = only {
        if out.is_empty() {
            return Err(CliError::new(format!("acl `{o}' does not exist")));
        }
    }
    Ok(out)
}

fn cli_show_interface(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    let m = vm.ext_mut::<AclMain>();
    let mut out = String::new();
    let mut ifs: Vec<u32> = m.input.keys().chain(m.output.keys()).copied().collect();
    ifs.sort_unstable();
    ifs.dedup();
    for i in ifs {
        let _ = writeln!(out, "sw_if_index {i}:");
        let compiled = m.shared.threads().first().map(|t| lock(t).compiled.clone());
        let types = |out_dir: bool| {
            compiled
                .as_ref()
                .and_then(|c| {
                    if out_dir { &c.output } else { &c.input }
                        .get(i as usize)
                        .cloned()
                })
                .flatten()
                .map_or(0, |l| l.c.mask_types())
        };
        if let Some(l) = m.input.get(&i) {
            let _ = writeln!(out, "  input acl(s): {l:?} ({} mask types)", types(false));
        }
        if let Some(l) = m.output.get(&i) {
            let _ = writeln!(out, "  output acl(s): {l:?} ({} mask types)", types(true));
        }
    }
    Ok(out)
}
