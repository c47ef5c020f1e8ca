//! policer's API messages (`api/policer.api`): add/delete, apply on input/output, dump —
//! the same actions as the CLI.

use crate::bucket::{Kind, Params, RateType};
use crate::{lock, policer_add, policer_apply, policer_del, Action, Config, PolicerMain};
use sluice_api::{ApiError, ApiRegistry, Ctx, Stream};
use sluice_graph::Vlib;
use sluice_vnet::error::VnetError;

/// Types generated from `api/policer.api`.
pub mod policer {
    sluice_api::include_api!("policer");
}
use policer as m;

/// Registers the module and its handlers.
pub fn register(r: &mut ApiRegistry) {
    r.module(&m::MODULE);
    r.request(add_del);
    r.request(input);
    r.request(output);
    r.dump(dump);
}

fn action(a: &m::PolicerAction, what: &str) -> Result<Action, VnetError> {
    Ok(match a.r#type {
        m::PolicerActionType::Drop => Action::Drop,
        m::PolicerActionType::Transmit => Action::Transmit,
        m::PolicerActionType::MarkAndTransmit => {
            if a.dscp > 63 {
                return Err(VnetError::invalid(format!(
                    "{what} dscp `{}' out of range 0..63",
                    a.dscp
                )));
            }
            Action::MarkAndTransmit(a.dscp)
        }
    })
}

fn action_out(a: Action) -> m::PolicerAction {
    match a {
        Action::Drop => m::PolicerAction {
            r#type: m::PolicerActionType::Drop,
            dscp: 0,
        },
        Action::Transmit => m::PolicerAction {
            r#type: m::PolicerActionType::Transmit,
            dscp: 0,
        },
        Action::MarkAndTransmit(d) => m::PolicerAction {
            r#type: m::PolicerActionType::MarkAndTransmit,
            dscp: d,
        },
    }
}

fn add_del(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: m::PolicerAddDel,
) -> Result<m::PolicerAddDelReply, ApiError> {
    if !q.is_add {
        policer_del(vm, &q.name)?;
        return Ok(m::PolicerAddDelReply {});
    }
    let kind = match q.r#type {
        m::PolicerType::Type1r2c => Kind::OneRateTwoColor,
        m::PolicerType::Type1r3c => Kind::OneRateThreeColor,
        m::PolicerType::Type2r3c2698 => Kind::TwoRate2698,
        m::PolicerType::Type2r3c4115 => Kind::TwoRate4115,
    };
    let rate_type = match q.rate_type {
        m::PolicerRateType::Kbps => RateType::Kbps,
        m::PolicerRateType::Pps => RateType::Pps,
    };
    let cfg = Config {
        params: Params {
            kind,
            rate_type,
            cir: q.cir,
            eir: q.eir,
            cb: q.cb,
            eb: q.eb,
        },
        actions: [
            action(&q.conform_action, "conform_action")?,
            action(&q.exceed_action, "exceed_action")?,
            action(&q.violate_action, "violate_action")?,
        ],
    };
    policer_add(vm, &q.name, cfg)?;
    Ok(m::PolicerAddDelReply {})
}

fn input(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: m::PolicerInput,
) -> Result<m::PolicerInputReply, ApiError> {
    policer_apply(vm, &q.name, q.sw_if_index, false, q.apply)?;
    Ok(m::PolicerInputReply {})
}

fn output(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: m::PolicerOutput,
) -> Result<m::PolicerOutputReply, ApiError> {
    policer_apply(vm, &q.name, q.sw_if_index, true, q.apply)?;
    Ok(m::PolicerOutputReply {})
}

fn dump(
    vm: &mut Vlib,
    q: m::PolicerDump,
    out: &mut Stream<'_, '_, m::PolicerDetails>,
) -> Result<(), ApiError> {
    let clock = vm.shared.clock;
    let pm = vm.ext_mut::<PolicerMain>();
    let (now, _) = pm.shared.time.now(&clock);
    for (name, p) in &pm.policers {
        if !q.name.is_empty() && q.name != *name {
            continue;
        }
        let pr = &p.cfg.params;
        let st = lock(&p.state);
        let (tc, te) = st.bucket.tokens_at(now);
        out.send(&m::PolicerDetails {
            name: name.clone(),
            r#type: match pr.kind {
                Kind::OneRateTwoColor => m::PolicerType::Type1r2c,
                Kind::OneRateThreeColor => m::PolicerType::Type1r3c,
                Kind::TwoRate2698 => m::PolicerType::Type2r3c2698,
                Kind::TwoRate4115 => m::PolicerType::Type2r3c4115,
            },
            rate_type: match pr.rate_type {
                RateType::Kbps => m::PolicerRateType::Kbps,
                RateType::Pps => m::PolicerRateType::Pps,
            },
            cir: pr.cir,
            eir: pr.eir,
            cb: pr.cb,
            eb: pr.eb,
            conform_action: action_out(p.cfg.actions[0]),
            exceed_action: action_out(p.cfg.actions[1]),
            violate_action: action_out(p.cfg.actions[2]),
            committed_tokens: tc,
            excess_tokens: te,
            conform_packets: st.pkts[0],
            conform_bytes: st.bytes[0],
            exceed_packets: st.pkts[1],
            exceed_bytes: st.bytes[1],
            violate_packets: st.pkts[2],
            violate_bytes: st.bytes[2],
        });
    }
    Ok(())
}
