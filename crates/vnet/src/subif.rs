//! VLAN sub-interfaces (VPP's `create sub-interfaces`): `<parent>.<id>` matching 802.1Q or
//! 802.1ad (outer) tags with an optional inner 802.1Q tag, exact match.
//!
//! Receive: `ethernet-input` looks the (parent, outer, inner) triple up in its per-thread
//! table, strips the tags and continues as if the frame arrived untagged on the
//! sub-interface (L3, cross-connect or bridge, like any interface). Transmit:
//! `interface-output` pushes the tags back and hands the frame to the parent's tx node. Tags
//! are thus always popped on input and pushed on output (VPP's `l2 tag-rewrite pop` behaviour,
//! which Sluice applies by default so bridged and routed sub-interfaces behave alike).

use crate::error::{VnetError, VnetResult};
use crate::interface::{IfCounters, Interfaces, SwIfIndex};
use crate::output::SubTx;
use sluice_cli::{Args, CliError, CommandTree};
use sluice_graph::Vlib;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// A sub-interface's match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubIf {
    /// Parent interface.
    pub parent: u32,
    /// Outer VLAN.
    pub outer: u16,
    /// Inner VLAN (0 = single tag).
    pub inner: u16,
    /// Outer tag is 802.1ad (TPID 0x88a8) rather than 802.1Q.
    pub dot1ad: bool,
}

/// The sub-interface table (a `Vlib` extension).
#[derive(Default)]
pub struct SubIfs {
    /// By sub-interface index.
    pub subs: BTreeMap<u32, (SubIf, Arc<IfCounters>)>,
}

/// Registers the CLI.
pub fn register_cli(t: &mut CommandTree<Vlib>) {
    t.add(
        "create sub-interfaces",
        "create sub-interfaces <interface> <id> [dot1q|dot1ad <vlan> [inner-dot1q <vlan>] [exact-match]]",
        cli_create,
    );
    t.add(
        "delete sub-interface",
        "delete sub-interface <interface>",
        cli_delete,
    );
}

fn vlan(a: &mut Args, what: &str) -> Result<u16, CliError> {
    let v = a.u32(what)?;
    if v == 0 || v > 4094 {
        return Err(CliError::new(format!("{what} {v} out of range 1-4094")));
    }
    Ok(v as u16)
}

fn cli_create(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let parent = crate::cli::interface_arg(vm, a)?;
    let id = a.u32("sub-interface id")?;
    let (mut dot1ad, mut outer, mut inner) = (false, None, 0u16);
    while !a.is_empty() {
        if a.keyword("dot1q") {
            outer = Some(vlan(a, "vlan")?);
        } else if a.keyword("dot1ad") {
            dot1ad = true;
            outer = Some(vlan(a, "vlan")?);
        } else if a.keyword("inner-dot1q") {
            inner = vlan(a, "inner vlan")?;
        } else if a.keyword("exact-match") {
            // Matching is always exact.
        } else {
            a.finish()?;
        }
    }
    let idx = create(vm, parent, id, outer, inner, dot1ad)?;
    let name = vm
        .ext_mut::<Interfaces>()
        .get(idx)
        .map(|x| x.name.clone())
        .unwrap_or_default();
    Ok(format!("{name}\n"))
}

/// `create sub-interfaces <parent> <id> [dot1q|dot1ad <outer> [inner-dot1q <inner>]]`:
/// `<parent>.<id>` matching the tags exactly (outer = id when not given; inner 0: single
/// tag).
pub fn create(
    vm: &mut Vlib,
    parent: SwIfIndex,
    id: u32,
    outer: Option<u16>,
    inner: u16,
    dot1ad: bool,
) -> VnetResult<SwIfIndex> {
    crate::interface::check(vm, parent)?;
    for v in outer.into_iter().chain((inner != 0).then_some(inner)) {
        if v == 0 || v > 4094 {
            return Err(VnetError::invalid(format!("vlan {v} out of range 1-4094")));
        }
    }
    let outer = match outer {
        Some(o) => o,
        None if inner != 0 => {
            return Err(VnetError::invalid("`inner-dot1q' needs dot1q or dot1ad"))
        }
        None => {
            if id == 0 || id > 4094 {
                return Err(VnetError::invalid(format!(
                    "sub-interface id {id} is not a VLAN (give dot1q <vlan>)"
                )));
            }
            id as u16
        }
    };
    let (pname, pmac, ptx, pdriver) = {
        let ifs = vm.ext_mut::<Interfaces>();
        let p = ifs
            .get(parent)
            .ok_or(VnetError::NoSuchInterface(parent.0))?;
        (p.name.clone(), p.mac, p.tx_node, p.driver.clone())
    };
    if pdriver == "sub" {
        return Err(VnetError::invalid(format!(
            "`{pname}' is itself a sub-interface"
        )));
    }
    let m = SubIf {
        parent: parent.0,
        outer,
        inner,
        dot1ad,
    };
    if vm
        .ext_mut::<SubIfs>()
        .subs
        .values()
        .any(|(s, _)| s.parent == m.parent && s.outer == m.outer && s.inner == m.inner)
    {
        return Err(VnetError::Exists(format!(
            "a sub-interface of `{pname}' already matches these tags"
        )));
    }
    let name = format!("{pname}.{id}");
    let idx = crate::interface::create(vm, &name, "sub", pmac, ptx)?;
    let counters = vm
        .ext_mut::<Interfaces>()
        .get(idx)
        .map(|i| i.counters.clone())
        .ok_or(VnetError::NoSuchInterface(idx.0))?;
    let mut tags = [0u8; 8];
    let tpid: u16 = if dot1ad { 0x88a8 } else { 0x8100 };
    tags[0..2].copy_from_slice(&tpid.to_be_bytes());
    tags[2..4].copy_from_slice(&outer.to_be_bytes());
    let len = if inner != 0 {
        tags[4..6].copy_from_slice(&0x8100u16.to_be_bytes());
        tags[6..8].copy_from_slice(&inner.to_be_bytes());
        8
    } else {
        4
    };
    crate::output::set_sub(
        vm,
        idx,
        SubTx {
            parent: parent.0,
            tags,
            len,
        },
    );
    vm.ext_mut::<SubIfs>().subs.insert(idx.0, (m, counters));
    publish(vm);
    Ok(idx)
}

fn cli_delete(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let i = crate::cli::interface_arg(vm, a)?;
    a.finish()?;
    delete(vm, i)?;
    Ok(String::new())
}

/// `delete sub-interface <if>`.
pub fn delete(vm: &mut Vlib, i: SwIfIndex) -> VnetResult {
    crate::interface::check(vm, i)?;
    if !vm.ext_mut::<SubIfs>().subs.contains_key(&i.0) {
        return Err(VnetError::invalid("not a sub-interface"));
    }
    remove(vm, i);
    Ok(())
}

fn remove(vm: &mut Vlib, i: SwIfIndex) {
    vm.ext_mut::<SubIfs>().subs.remove(&i.0);
    publish(vm);
    crate::loopback::delete_interface(vm, i);
}

/// Deletes the sub-interfaces of a parent being deleted.
pub fn parent_deleted(vm: &mut Vlib, parent: SwIfIndex) {
    let subs: Vec<u32> = vm
        .ext_mut::<SubIfs>()
        .subs
        .iter()
        .filter(|(_, (s, _))| s.parent == parent.0)
        .map(|(&k, _)| k)
        .collect();
    for s in subs {
        remove(vm, SwIfIndex(s));
    }
}

/// Installs the current match table in every thread's `ethernet-input`.
fn publish(vm: &mut Vlib) {
    let table: HashMap<(u32, u16, u16), (u32, Arc<IfCounters>)> = vm
        .ext_mut::<SubIfs>()
        .subs
        .iter()
        .map(|(&k, (s, c))| ((s.parent, s.outer, s.inner), (k, c.clone())))
        .collect();
    let Some(node) = vm.registry.find(crate::ethernet::ETHERNET_INPUT) else {
        return;
    };
    vm.foreach_thread(move |tg| {
        if let Some(n) = tg.node_mut::<crate::ethernet::EthernetInput>(node) {
            n.subs = table.clone();
        }
    });
}
