//! The changes operators and tenants ask for through the API: apply or delete a
//! tenant, register or remove a VM, scale a middlebox. Each works on a copy of
//! the desired state and commits it whole, or changes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use sluice_proto::VmRegistration;
use sluice_tenant::TenantSpec;

use super::events::event;
use super::{Derived, Reconciler};
use crate::audit::{AuditEntry, AuditQuery};
use crate::change::{self, needs_force, ChangePlan, Conditions};
use crate::desired::Desired;
use crate::error::ApiError;
use crate::store::Touched;

/// What a change to `tenant` alone touches of the stored state: its rows.
fn tenant_rows(tenant: &str) -> Touched {
    Touched {
        tenants: BTreeSet::from([tenant.to_string()]),
        ..Touched::default()
    }
}

/// What applying (or deleting) a tenant did, or would do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The tenant existed before.
    pub existed: bool,
    /// The spec differed from the applied one.
    pub changed: bool,
    /// Hosts given a new configuration, and its version (none on a dry run).
    pub pushed: BTreeMap<u32, u64>,
    /// What the change does to the tenant's spec, instances and FIB entries.
    pub plan: ChangePlan,
}

/// The hosts whose configuration a change to `tenant` alone (its spec, its
/// VMs, its instances, its blocks) can alter: where it has a VM (registered,
/// applied or not) or an NF instance, before or after. A host's FIBs, ports
/// and peers come from the tenants it holds, and a tenant's FIBs go to its
/// own hosts only.
fn tenant_scope(old: &Desired, new: &Desired, tenant: &str) -> BTreeSet<u32> {
    let mut scope = BTreeSet::new();
    for d in [old, new] {
        scope.extend(d.tenant_vms(tenant).map(|(_, v)| v.reg.host));
        scope.extend(d.tenant_instances(tenant).map(|(_, i)| i.host));
    }
    scope
}

impl Reconciler {
    /// Applies a validated tenant spec (`yaml` is its text, kept for `GET`),
    /// under the request's conditions: its generation must still be
    /// `if_generation` (409 naming what changed since), a spec that removes
    /// every chain or instance needs `force`, and a dry run only says what the
    /// change would do.
    pub fn apply_tenant(
        &mut self,
        yaml: &str,
        spec: TenantSpec,
        cond: Conditions,
        now: Instant,
    ) -> Result<Applied, ApiError> {
        let name = spec.tenant.clone();
        self.check_generation(&name, cond)?;
        let existed = self.desired.tenants.contains_key(&name);
        let mut next = self.desired.clone();
        let changed = next.apply_tenant(yaml, spec)?;
        let (plan, cfgs) = self.plan_of(&name, &next)?;
        if let Some(why) = needs_force(&self.desired, &next, &name).filter(|_| !cond.force) {
            // What it would have done goes with the refusal (the problem's
            // `plan` member), as a dry run would answer it.
            let e = ApiError::conflict(format!(
                "{why}: send it again with force (`sluice apply --force`) if that is what you mean"
            ));
            return Err(match serde_json::to_value(&plan) {
                Ok(p) => e.with("plan", p),
                Err(_) => e,
            });
        }
        if cond.dry_run {
            return Ok(Applied {
                existed,
                changed,
                pushed: BTreeMap::new(),
                plan,
            });
        }
        let pushed = if changed {
            self.commit_derived(next, cfgs, tenant_rows(&name), now)?
        } else {
            BTreeMap::new()
        };
        if changed {
            tracing::info!(tenant = %name, "tenant applied");
        } else {
            tracing::info!(tenant = %name, "tenant re-applied unchanged");
        }
        Ok(Applied {
            existed,
            changed,
            pushed,
            plan,
        })
    }

    /// Deletes a tenant: its chains, instances and FIB entries on every host
    /// (under the request's generation condition; a dry run changes nothing).
    pub fn delete_tenant(
        &mut self,
        name: &str,
        cond: Conditions,
        now: Instant,
    ) -> Result<Applied, ApiError> {
        let mut next = self.desired.clone();
        if !next.remove_tenant(name) {
            return Err(ApiError::not_found(format!(
                "tenant `{name}` is not applied"
            )));
        }
        self.check_generation(name, cond)?;
        let (plan, cfgs) = self.plan_of(name, &next)?;
        let pushed = if cond.dry_run {
            BTreeMap::new()
        } else {
            let pushed = self.commit_derived(next, cfgs, tenant_rows(name), now)?;
            tracing::info!(tenant = %name, "tenant deleted");
            pushed
        };
        Ok(Applied {
            existed: true,
            changed: true,
            pushed,
            plan,
        })
    }

    /// Refuses a request made against another generation of the tenant than
    /// the one it has (0: not applied), saying what changed since.
    fn check_generation(&self, name: &str, cond: Conditions) -> Result<(), ApiError> {
        let Some(want) = cond.if_generation else {
            return Ok(());
        };
        let have = self.desired.tenants.get(name).map_or(0, |t| t.generation);
        if want == have {
            return Ok(());
        }
        let since: Vec<String> = self
            .audit(&AuditQuery {
                tenant: Some(name.to_string()),
                limit: 20,
                ..AuditQuery::default()
            })
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e.status < 300)
            .rev()
            .take(3)
            .map(|e| {
                format!(
                    "{} by {} at {} ms: {}",
                    e.action,
                    e.actor,
                    e.at_ms,
                    if e.changes.is_empty() {
                        "no change".to_string()
                    } else {
                        e.changes.join(", ")
                    }
                )
            })
            .collect();
        let what = if have == 0 {
            format!("tenant `{name}` is not applied")
        } else {
            format!("tenant `{name}` is at generation {have}")
        };
        Err(ApiError::conflict(format!(
            "{what}, not {want}: it changed since you read it{}; read it again (`sluice get tenant {name}`) and re-apply",
            if since.is_empty() {
                String::new()
            } else {
                format!(" ({})", since.join("; "))
            }
        ))
        .with("generation", have.into())
        .with("recent_changes", since.into()))
    }

    /// Appends a change request to the audit log (stamped at `now`). A log that
    /// cannot be written is reported, not fatal: the change itself is already
    /// committed.
    pub fn record(&mut self, mut e: AuditEntry, now: Instant) {
        e.at_ms = self.unix_ms(now);
        if let Err(err) = self.store.append_audit(&e) {
            tracing::error!(action = %e.action, error = %err, "cannot append to the audit log");
        }
    }

    /// The audit entries `q` selects.
    pub fn audit(&self, q: &AuditQuery) -> Result<Vec<AuditEntry>, ApiError> {
        self.store
            .audit(q)
            .map_err(|e| ApiError::internal(format!("audit log: {e}")))
    }

    /// What replacing the desired state with `next` does to `tenant`, and
    /// `next`'s configurations (for the commit that may follow).
    /// Only the tenant's hosts are derived again (see [`tenant_scope`]); the
    /// plan's FIB changes are all on those.
    fn plan_of(
        &self,
        tenant: &str,
        next: &crate::desired::Desired,
    ) -> Result<(ChangePlan, Derived), ApiError> {
        let scope = tenant_scope(&self.desired, next, tenant);
        let cfgs = self.derive(next, Some(&scope))?;
        let partial = matches!(cfgs, Derived::Partial(_));
        let plan = change::plan(
            tenant,
            &self.desired,
            &self.configs,
            next,
            cfgs.map(),
            partial,
        );
        Ok((plan, cfgs))
    }

    /// Registers (or moves) a VM; returns whether it was registered before.
    pub fn put_vm(&mut self, reg: VmRegistration, now: Instant) -> Result<bool, ApiError> {
        let existed = self
            .desired
            .vms
            .contains_key(&(reg.tenant.clone(), reg.name.clone()));
        let tenant = reg.tenant.clone();
        let mut next = self.desired.clone();
        next.register_vm(reg)?;
        let scope = tenant_scope(&self.desired, &next, &tenant);
        self.commit_scoped(next, &scope, tenant_rows(&tenant), now)?;
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
        let scope = tenant_scope(&self.desired, &next, tenant);
        self.commit_scoped(next, &scope, tenant_rows(tenant), now)
            .map_err(|e| {
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
        let pushed = match self.scale_to(tenant, mb, instances, drain_timeout_ms, now) {
            Ok(p) => p,
            Err(e) => {
                if e.ext.contains_key("shortfall") {
                    // Out of capacity is worth an event (the scalers' refusals
                    // are events too); a bad request is not.
                    let mut ev = event(
                        "error",
                        format!(
                            "{tenant}/{mb}: scale to {instances} instances refused (scale API): {}",
                            e.msg
                        ),
                    );
                    ev.tenant = Some(tenant.to_string());
                    ev.middlebox = Some(mb.to_string());
                    self.push_event(ev, now);
                }
                return Err(e);
            }
        };
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
