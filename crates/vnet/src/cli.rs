//! Interface CLI: `show interface`, `show hardware-interfaces`, `set interface state`,
//! `clear interfaces`, `test l2patch`.

use crate::interface::{counter, fmt_mac, Interfaces, SwIfIndex};
use sluice_cli::{Args, CliError, CommandTree};
use sluice_graph::Vlib;
use std::fmt::Write;

/// Registers the interface commands.
pub fn register(t: &mut CommandTree<Vlib>) {
    t.add(
        "show interface",
        "show interface [<interface> ...] — interfaces and counters",
        show_interface,
    );
    t.add(
        "show hardware-interfaces",
        "show hardware-interfaces [brief] [<interface> ...] — drivers and link state",
        show_hardware,
    );
    t.add(
        "set interface state",
        "set interface state <interface> up|down",
        set_state,
    );
    t.add(
        "set interface mac address",
        "set interface mac address <interface> <mac-address>",
        set_mac,
    );
    t.add(
        "set interface promiscuous",
        "set interface promiscuous on|off <interface>",
        set_promiscuous,
    );
    t.add(
        "set interface mtu",
        "set interface mtu [packet|ip4|ip6] <value> <interface>",
        set_mtu,
    );
    t.add(
        "set interface l2 xconnect",
        "set interface l2 xconnect <interface> <peer interface>",
        set_xconnect,
    );
    t.add(
        "set interface l3",
        "set interface l3 <interface> — back to routed mode",
        set_l3,
    );
    t.add(
        "clear interfaces",
        "clear interfaces — reset interface counters (and the feature-arc counters)",
        clear_interfaces,
    );
    t.add(
        "test l2patch",
        "test l2patch rx <interface> tx <interface> [del]",
        crate::l2patch::cli_l2patch,
    );
    t.add(
        "show l2patch",
        "show l2patch — patched interfaces (rx -> tx)",
        crate::l2patch::cli_show,
    );
}

/// Parses an interface name argument.
pub fn interface_arg(vm: &mut Vlib, args: &mut Args) -> Result<SwIfIndex, CliError> {
    let name = args.word("interface name")?;
    vm.ext_mut::<Interfaces>()
        .find(&name)
        .ok_or_else(|| CliError::new(format!("unknown interface `{name}'")))
}

fn show_interface(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    let mut only = Vec::new();
    while !args.is_empty() {
        if args.keyword("verbose") {
            continue;
        }
        only.push(interface_arg(vm, args)?);
    }
    crate::interface::ensure_local0(vm);
    let ifs = vm.ext_mut::<Interfaces>();
    let mut out = format!(
        "{:<25}{:>5}{:>8}  {:<22}  {:<16}{:>16}\n",
        "Name", "Idx", "State", "MTU (L3/IP4/IP6/MPLS)", "Counter", "Count"
    );
    for i in ifs.list.iter().filter(|i| !i.deleted) {
        if !only.is_empty() && !only.contains(&i.sw_if_index) {
            continue;
        }
        let mtu = format!("{}/0/0/0", i.mtu);
        let state = if i.admin_up { "up" } else { "down" };
        let mut first = true;
        for (c, name) in counter::NAMES.iter().enumerate() {
            let v = i.counters.total(c);
            if v == 0 {
                continue;
            }
            if first {
                let _ = writeln!(
                    out,
                    "{:<25}{:>5}{:>8}  {:<22}  {:<16}{:>16}",
                    i.name, i.sw_if_index.0, state, mtu, name, v
                );
                first = false;
            } else {
                let _ = writeln!(out, "{:<62}  {:<16}{:>16}", "", name, v);
            }
        }
        if first {
            let _ = writeln!(
                out,
                "{:<25}{:>5}{:>8}  {:<22}",
                i.name, i.sw_if_index.0, state, mtu
            );
        }
    }
    Ok(out)
}

fn show_hardware(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    let brief = args.keyword("brief");
    let mut only = Vec::new();
    while !args.is_empty() {
        if args.keyword("verbose") || args.keyword("detail") {
            continue;
        }
        only.push(interface_arg(vm, args)?);
    }
    crate::interface::ensure_local0(vm);
    let ifs = vm.ext_mut::<Interfaces>();
    let details = ifs.hw_details.clone();
    let mut out = format!("{:<25}{:>5}{:>6}  {}\n", "Name", "Idx", "Link", "Hardware");
    let mut rows = Vec::new();
    for i in ifs.list.iter().filter(|i| !i.deleted) {
        if !only.is_empty() && !only.contains(&i.sw_if_index) {
            continue;
        }
        let link = if i.admin_up && i.link_up() {
            "up"
        } else {
            "down"
        };
        let mut row = format!(
            "{:<25}{:>5}{:>6}  {}\n",
            i.name, i.sw_if_index.0, link, i.name
        );
        if !brief {
            let _ = writeln!(row, "  Link speed: unknown");
            let _ = writeln!(row, "  Ethernet address {}", fmt_mac(&i.mac));
            if i.promisc {
                let _ = writeln!(row, "  promiscuous: on");
            }
            let _ = writeln!(row, "  driver: {}", i.driver);
        }
        let detail = details
            .iter()
            .find(|(d, _)| *d == i.driver)
            .map(|(_, f)| *f);
        rows.push((row, i.sw_if_index, detail.filter(|_| !brief)));
    }
    for (row, sw, detail) in rows {
        out.push_str(&row);
        if let Some(f) = detail {
            out.push_str(&f(vm, sw));
        }
    }
    Ok(out)
}

/// `yes` (true) or `no` (false); otherwise an error naming the token found.
fn either(args: &mut Args, yes: &str, no: &str) -> Result<bool, CliError> {
    if args.keyword(yes) {
        Ok(true)
    } else if args.keyword(no) {
        Ok(false)
    } else {
        match args.peek() {
            Some(t) => Err(CliError::new(format!("expected {yes} or {no}, got `{t}'"))),
            None => Err(CliError::new(format!("expected {yes} or {no}"))),
        }
    }
}

fn set_state(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    let idx = interface_arg(vm, args)?;
    let up = either(args, "up", "down")?;
    args.finish()?;
    crate::interface::set_admin_state(vm, idx, up)?;
    Ok(String::new())
}

/// `set interface promiscuous on|off <interface>` (VPP): an L3 interface in promiscuous mode
/// accepts unicast frames whatever their destination MAC (`ethernet-input` skips its
/// `l3 mac mismatch` check). af_packet and af_xdp keep their Linux interface promiscuous
/// for as long as Sluice uses it anyway (Sluice's MAC is not the Linux one), so this switch
/// is Sluice's filter only.
fn set_promiscuous(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    let on = either(args, "on", "off")?;
    let idx = interface_arg(vm, args)?;
    args.finish()?;
    crate::interface::set_promisc(vm, idx, on)?;
    Ok(String::new())
}

fn clear_interfaces(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    args.finish()?;
    crate::interface::clear_counters(vm);
    Ok(String::new())
}

fn set_mac(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    let idx = interface_arg(vm, args)?;
    let w = args.word("MAC address")?;
    let mac: sluice_wire::Mac = w
        .parse()
        .map_err(|_| CliError::new(format!("bad MAC address `{w}'")))?;
    args.finish()?;
    crate::interface::set_mac(vm, idx, mac.0)?;
    Ok(String::new())
}

fn set_mtu(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    let _ = args.keyword("packet") || args.keyword("ip4") || args.keyword("ip6");
    let mtu = args.u32("MTU")?;
    if !crate::interface::MTU_RANGE.contains(&mtu) {
        return Err(CliError::new(format!("MTU {mtu} out of range 64..9216")));
    }
    let idx = interface_arg(vm, args)?;
    args.finish()?;
    crate::interface::set_mtu(vm, idx, mtu)?;
    Ok(String::new())
}

fn set_xconnect(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    let a = interface_arg(vm, args)?;
    let b = interface_arg(vm, args)?;
    args.finish()?;
    crate::interface::set_xconnect(vm, a, b)?;
    Ok(String::new())
}

fn set_l3(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    let a = interface_arg(vm, args)?;
    args.finish()?;
    crate::interface::set_l3(vm, a)?;
    Ok(String::new())
}
