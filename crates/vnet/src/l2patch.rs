//! `l2-patch`: sends every packet received on an interface out of its patched peer, unchanged
//! (VPP's `test l2patch rx <if> tx <if>`). The simplest real forwarding path: it is what the
//! pg end-to-end test and the default demo use until ethernet-input exists.
//!
//! - uses: `rx_if`.
//! - sets: `tx_if` (the patch peer); `error` on drops.
//! - next: `interface-output` (arc 0) when a patch exists; `error-drop` (arc 1) otherwise.
//! - counters: `patched` (info: packets patched), `no_patch` (error: rx interface has no patch).

use crate::error::{VnetError, VnetResult};
use crate::interface::{Interfaces, SwIfIndex};
use sluice_buffer::Buffer;
use sluice_cli::{Args, CliError};
use sluice_graph::{
    Cx, GraphBuilder, Next, NodeKind, NodeRegistration, PacketNode, PerPacket, TraceRecord, Vlib,
};

/// Node name.
pub const NAME: &str = "l2-patch";

sluice_graph::arcs! {
    /// `l2-patch`'s next arcs.
    pub enum PatchNext {
        /// Patched packets.
        Output => crate::output::NAME,
        /// Packets of an interface without a patch.
        Drop => "error-drop",
    }
}

sluice_graph::counters! {
    /// `l2-patch`'s counters.
    pub enum PatchCounter {
        /// Packets patched.
        Patched => info("patched", "L2 patch packets"),
        /// Packets of an interface without a patch.
        NoPatch => error("no_patch", "no l2 patch for rx interface"),
    }
}

/// Per-thread instance: rx interface -> tx interface.
#[derive(Default)]
pub struct L2Patch {
    map: Vec<Option<u32>>,
}

#[derive(Copy, Clone)]
struct PatchTrace {
    rx: u32,
    tx: u32,
}

impl TraceRecord for PatchTrace {
    fn format(&self, out: &mut String) {
        out.push_str(&format!("L2_PATCH: rx {} -> tx {}", self.rx, self.tx));
    }
}

impl PacketNode for L2Patch {
    // Reads and writes buffer metadata only.
    const PREFETCH_DATA: bool = false;

    #[inline(always)]
    fn process_one(&mut self, cx: &mut Cx, b: &mut Buffer<'_>) -> Next {
        match self.map.get(b.hdr.rx_if as usize).copied().flatten() {
            Some(tx) => {
                b.hdr.tx_if = tx;
                cx.count(PatchCounter::Patched, 1);
                if b.hdr.is_traced() {
                    cx.trace(
                        b,
                        PatchTrace {
                            rx: b.hdr.rx_if,
                            tx,
                        },
                    );
                }
                PatchNext::Output.next()
            }
            None => {
                b.hdr.error = cx.error(PatchCounter::NoPatch);
                PatchNext::Drop.next()
            }
        }
    }
}

/// Registers `l2-patch`.
pub fn register(b: &mut GraphBuilder) {
    b.register(
        NodeRegistration::new(NAME, NodeKind::Internal, |_| {
            Box::new(PerPacket::new(L2Patch::default()))
        })
        .nexts(PatchNext::NAMES)
        .counters(PatchCounter::DESCS),
    );
}

/// `test l2patch rx <if> tx <if> [del]`.
pub fn cli_l2patch(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    let mut rx = None;
    let mut tx = None;
    let mut del = false;
    while !args.is_empty() {
        if args.keyword("rx") {
            rx = Some(crate::cli::interface_arg(vm, args)?);
        } else if args.keyword("tx") {
            tx = Some(crate::cli::interface_arg(vm, args)?);
        } else if args.keyword("del") {
            del = true;
        } else {
            args.finish()?;
        }
    }
    let rx: SwIfIndex = rx.ok_or_else(|| CliError::new("missing rx interface"))?;
    let tx = match (tx, del) {
        (_, true) => None,
        (Some(t), false) => Some(t),
        (None, false) => return Err(CliError::new("missing tx interface")),
    };
    set_patch(vm, rx, tx)?;
    Ok(String::new())
}

/// The configured patches (a `Vlib` extension): rx interface → tx interface.
#[derive(Default)]
pub struct L2Patches {
    /// rx → tx.
    pub map: std::collections::BTreeMap<u32, u32>,
}

/// Patches what `rx` receives straight to `tx` (`None`: removes the patch).
pub fn set_patch(vm: &mut Vlib, rx: SwIfIndex, tx: Option<SwIfIndex>) -> VnetResult {
    crate::interface::check(vm, rx)?;
    if let Some(t) = tx {
        crate::interface::check(vm, t)?;
        crate::interface::check_l2(vm, rx)?;
        crate::interface::check_l2(vm, t)?;
    } else if !vm.ext_mut::<L2Patches>().map.contains_key(&rx.0) {
        return Err(VnetError::NotFound(format!(
            "no l2 patch from sw_if_index {}",
            rx.0
        )));
    }
    let node = vm
        .registry
        .find(NAME)
        .ok_or_else(|| VnetError::System("l2-patch node missing".into()))?;
    let txi = tx.map(|t| t.0);
    vm.foreach_thread(move |tg| {
        if let Some(p) = tg.node_mut::<L2Patch>(node) {
            let i = rx.0 as usize;
            if p.map.len() <= i {
                p.map.resize(i + 1, None);
            }
            p.map[i] = txi;
        }
    });
    let m = &mut vm.ext_mut::<L2Patches>().map;
    match txi {
        Some(t) => m.insert(rx.0, t),
        None => m.remove(&rx.0),
    };
    Ok(())
}

/// `show l2patch`: `<rx> -> <tx>` per patched interface, as VPP.
pub fn cli_show(vm: &mut Vlib, args: &mut Args) -> Result<String, CliError> {
    args.finish()?;
    let node = vm
        .registry
        .find(NAME)
        .ok_or_else(|| CliError::new("l2-patch node missing"))?;
    let map = vm
        .main
        .node_mut::<L2Patch>(node)
        .map(|p| p.map.clone())
        .unwrap_or_default();
    let ifs = vm.ext_mut::<Interfaces>();
    let name = |i: u32| {
        ifs.get(SwIfIndex(i))
            .map(|x| x.name.clone())
            .unwrap_or_else(|| format!("if{i}"))
    };
    let mut out = String::new();
    for (rx, tx) in map.iter().enumerate() {
        if let Some(tx) = tx {
            out.push_str(&format!("{:>30} -> {}\n", name(rx as u32), name(*tx)));
        }
    }
    if out.is_empty() {
        out.push_str("no l2patch mappings\n");
    }
    Ok(out)
}
