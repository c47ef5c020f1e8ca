//! The host stack's API messages (`api/hoststack.api`): the same actions the CLI calls.

use sluice_api::{ApiError, ApiRegistry, Ctx, Retval};
use sluice_graph::Vlib;

/// Types generated from `api/hoststack.api`.
pub mod hoststack {
    sluice_api::include_api!("hoststack");
}
use hoststack as m;

/// Registers the module and its handler.
pub fn register(r: &mut ApiRegistry) {
    r.module(&m::MODULE);
    r.request(enable_disable);
}

fn enable_disable(
    vm: &mut Vlib,
    _: &mut Ctx<'_>,
    q: m::SessionEnableDisable,
) -> Result<m::SessionEnableDisableReply, ApiError> {
    if q.is_enable {
        crate::enable(vm).map_err(|e| ApiError::new(Retval::SystemError, e.to_string()))?;
    } else {
        crate::disable(vm);
    }
    Ok(m::SessionEnableDisableReply {})
}
