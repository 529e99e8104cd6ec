//! The changes operators and tenants ask for through the API: apply or delete a
//! tenant, register or remove a VM, scale a middlebox. Each works on a copy of
//! the desired state and commits it whole, or changes nothing.

use std::collections::BTreeMap;
use std::time::Instant;

use sluice_proto::VmRegistration;
use sluice_tenant::TenantSpec;

use super::events::event;
use super::{log, Reconciler};
use crate::error::ApiError;

/// What applying a tenant did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The tenant existed before.
    pub existed: bool,
    /// The spec differed from the applied one.
    pub changed: bool,
    /// Hosts given a new configuration, and its version.
    pub pushed: BTreeMap<u32, u64>,
}

impl Reconciler {
    /// Applies a validated tenant spec (`yaml` is its text, kept for `GET`).
    pub fn apply_tenant(
        &mut self,
        yaml: &str,
        spec: TenantSpec,
        now: Instant,
    ) -> Result<Applied, ApiError> {
        let name = spec.tenant.clone();
        let existed = self.desired.tenants.contains_key(&name);
        let mut next = self.desired.clone();
        let changed = next.apply_tenant(yaml, spec)?;
        let pushed = if changed {
            self.commit(next, now)?
        } else {
            BTreeMap::new()
        };
        log(&format!(
            "tenant {name}: {}",
            if changed {
                "applied"
            } else {
                "re-applied unchanged"
            }
        ));
        Ok(Applied {
            existed,
            changed,
            pushed,
        })
    }

    /// Deletes a tenant: its chains, instances and FIB entries on every host.
    pub fn delete_tenant(
        &mut self,
        name: &str,
        now: Instant,
    ) -> Result<BTreeMap<u32, u64>, ApiError> {
        let mut next = self.desired.clone();
        if !next.remove_tenant(name) {
            return Err(ApiError::not_found(format!(
                "tenant `{name}` is not applied"
            )));
        }
        let pushed = self.commit(next, now)?;
        log(&format!("tenant {name}: deleted"));
        Ok(pushed)
    }

    /// Registers (or moves) a VM; returns whether it was registered before.
    pub fn put_vm(&mut self, reg: VmRegistration, now: Instant) -> Result<bool, ApiError> {
        let existed = self
            .desired
            .vms
            .contains_key(&(reg.tenant.clone(), reg.name.clone()));
        let mut next = self.desired.clone();
        next.register_vm(reg)?;
        self.commit(next, now)?;
        Ok(existed)
    }

    /// Removes a VM, unless its tenant's chains still need it.
    pub fn delete_vm(
        &mut self,
        tenant: &str,
        name: &str,
        now: Instant,
    ) -> Result<BTreeMap<u32, u64>, ApiError> {
        let mut next = self.desired.clone();
        if next
            .vms
            .remove(&(tenant.to_string(), name.to_string()))
            .is_none()
        {
            return Err(ApiError::not_found(format!(
                "VM `{name}` of tenant `{tenant}` is not registered"
            )));
        }
        self.commit(next, now).map_err(|e| {
            if e.status == 409 {
                ApiError::conflict(format!(
                    "cannot delete VM `{tenant}/{name}` while tenant `{tenant}` needs it: {}",
                    e.msg
                ))
            } else {
                e
            }
        })
    }

    /// Sets a middlebox's instance count (the scale API); removed instances of a
    /// pinned middlebox drain first.
    pub fn scale_middlebox(
        &mut self,
        tenant: &str,
        mb: &str,
        instances: u64,
        drain_timeout_ms: Option<u64>,
        now: Instant,
    ) -> Result<BTreeMap<u32, u64>, ApiError> {
        let before = self.desired.count(tenant, mb);
        let pushed = self.scale_to(tenant, mb, instances, drain_timeout_ms, now)?;
        let after = self.desired.count(tenant, mb);
        let mut e = event(
            "scale",
            format!(
                "{tenant}/{mb}: {} -> {} instances (scale API)",
                before.unwrap_or(0),
                after.unwrap_or(0)
            ),
        );
        e.tenant = Some(tenant.to_string());
        e.middlebox = Some(mb.to_string());
        self.push_event(e, now);
        Ok(pushed)
    }
}
