//! Loopback interfaces (`create loopback interface`, `delete loopback interface`).
//!
//! `loop-tx` (internal): what is sent out of a loopback comes back in on it, as in VPP.
//! - uses: `tx_if`.
//! - sets: `rx_if` = `tx_if`; the frame is unchanged.
//! - next: `ethernet-input` (0).
//! - counters: `looped` (info).

use crate::error::{VnetError, VnetResult};
use crate::interface::{Interfaces, SwIfIndex};
use sluice_buffer::Buffer;
use sluice_cli::{Args, CliError, CommandTree};
use sluice_graph::{
    Cx, GraphBuilder, Next, NodeKind, NodeRegistration, PacketNode, PerPacket, Vlib,
};

/// Node name.
pub const TX: &str = "loop-tx";

/// `loop-tx` instance.
pub struct LoopTx;

sluice_graph::arcs! {
    /// `loopN-tx`'s next arcs.
    pub enum LoopNext {
        /// Every frame, received again on the loopback.
        EthernetInput => crate::ethernet::ETHERNET_INPUT,
    }
}

sluice_graph::counters! {
    /// `loopN-tx`'s counters.
    pub enum LoopCounter {
        /// Frames looped back.
        Looped => info("looped", "frames looped back"),
    }
}

impl PacketNode for LoopTx {
    const PREFETCH_DATA: bool = false;

    #[inline(always)]
    fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        b.hdr.rx_if = b.hdr.tx_if;
        cx.count(LoopCounter::Looped, 1);
        LoopNext::EthernetInput.next()
    }
}

/// Registers `loop-tx`.
pub fn register(b: &mut GraphBuilder) {
    b.register(
        NodeRegistration::new(TX, NodeKind::Internal, |_| Box::new(PerPacket::new(LoopTx)))
            .nexts(LoopNext::NAMES)
            .counters(LoopCounter::DESCS),
    );
}

/// Registers the loopback CLI.
pub fn register_cli(t: &mut CommandTree<Vlib>) {
    t.add(
        "create loopback interface",
        "create loopback interface [mac <mac-address>] [instance <n>]",
        cli_create,
    );
    t.add(
        "delete loopback interface",
        "delete loopback interface intfc <interface>",
        cli_delete,
    );
    // VPP's older names, which its scripts abbreviate as `loop create`.
    t.alias("loopback create-interface", "create loopback interface");
    t.alias("loopback delete-interface", "delete loopback interface");
}

fn cli_create(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let mut mac = None;
    let mut instance = None;
    while !a.is_empty() {
        if a.keyword("mac") {
            let w = a.word("MAC address")?;
            mac = Some(
                w.parse::<sluice_wire::Mac>()
                    .map_err(|_| CliError::new(format!("bad MAC address `{w}'")))?
                    .0,
            );
        } else if a.keyword("instance") {
            instance = Some(a.u32("instance")?);
        } else {
            a.finish()?;
        }
    }
    let i = create(vm, mac, instance)?;
    let name = vm
        .ext_mut::<Interfaces>()
        .get(i)
        .map(|x| x.name.clone())
        .unwrap_or_default();
    Ok(format!("{name}\n"))
}

/// `create loopback interface [mac <mac>] [instance <n>]`: `loop<n>` (the first free
/// instance when not given; MAC de:ad:00:00:nn:nn when not given).
pub fn create(vm: &mut Vlib, mac: Option<[u8; 6]>, instance: Option<u32>) -> VnetResult<SwIfIndex> {
    let n = match instance {
        Some(n) => n,
        None => {
            let ifs = vm.ext_mut::<Interfaces>();
            (0..)
                .find(|n| ifs.find(&format!("loop{n}")).is_none())
                .unwrap_or(0)
        }
    };
    let name = format!("loop{n}");
    let mac = mac.unwrap_or([0xde, 0xad, 0, 0, (n >> 8) as u8, n as u8]);
    let tx = vm.registry.find(TX);
    crate::interface::create(vm, &name, "loopback", mac, tx)
}

fn cli_delete(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let _ = a.keyword("intfc");
    let i = crate::cli::interface_arg(vm, a)?;
    a.finish()?;
    delete(vm, i)?;
    Ok(String::new())
}

/// `delete loopback interface intfc <if>`.
pub fn delete(vm: &mut Vlib, i: SwIfIndex) -> VnetResult {
    crate::interface::check(vm, i)?;
    let is_loop = vm
        .ext_mut::<Interfaces>()
        .get(i)
        .is_some_and(|x| x.driver == "loopback");
    if !is_loop {
        return Err(VnetError::invalid("not a loopback interface"));
    }
    delete_interface(vm, i);
    Ok(())
}

/// Deletes an interface while traffic may be flowing: it stops transmitting at once (packets
/// still carrying its index are dropped as `unknown_interface`), its addresses and the routes
/// through it are removed, its VLAN sub-interfaces are deleted with it, and its index is
/// never reused.
pub fn delete_interface(vm: &mut Vlib, i: SwIfIndex) {
    crate::subif::parent_deleted(vm, i);
    crate::output::detach(vm, i);
    crate::l2::leave_bridge(vm, i);
    crate::ip4::interface_deleted(vm, i.0);
    crate::ip6::interface_deleted(vm, i.0);
    if let Some(x) = vm.ext_mut::<Interfaces>().list.get_mut(i.0 as usize) {
        x.deleted = true;
        x.admin_up = false;
    }
    crate::interface::sync_rx_flags(vm, i);
    vm.ext_mut::<crate::l2patch::L2Patches>()
        .map
        .retain(|&rx, &mut tx| rx != i.0 && tx != i.0);
    // The record is down and out of any L2 mode and redirect now (`interface_deleted`
    // cleared them): one report for all of it.
    crate::interface::changed(vm, i, crate::interface::IfChange::AdminState);
}
