//! The one executor: carries out a parsed [`Action`] on the [`Reconciler`] at
//! `now` and shapes the reply. Pure: what the action requires of the outside
//! world (pushes, polls) is left in the reconciler's effects. Every change it
//! is asked for, carried out or refused, goes to the audit log.

use std::time::Instant;

use serde_json::Value;

use crate::audit::AuditEntry;
use crate::error::ApiError;
use crate::reconcile::Reconciler;
use crate::resources::backends::BackendAction;
use crate::resources::blocks::BlockWhat;
use crate::resources::hosts::HostAction;
use crate::resources::instances::InstanceAction;
use crate::resources::scaling::ScalingWhat;
use crate::resources::tenants::TenantAction;
use crate::resources::{self, json, Action, Reply, OPENAPI_YAML};

/// Carries out `action` for an unnamed caller.
pub fn execute(r: &mut Reconciler, action: Action, now: Instant) -> Result<Reply, ApiError> {
    execute_as(r, action, "anonymous", now)
}

/// Carries out `action` for `actor` (the name of the caller's credential),
/// recording it in the audit log if it asks for a change.
pub fn execute_as(
    r: &mut Reconciler,
    action: Action,
    actor: &str,
    now: Instant,
) -> Result<Reply, ApiError> {
    let audited = describe(&action);
    let reply = run(r, action, actor, now);
    if let Some((tenant, what)) = audited {
        let (status, changes) = match &reply {
            Ok(Reply::Json(code, v)) => (*code, changes_of(v)),
            Ok(Reply::Text(..)) => (200, Vec::new()),
            Err(e) => (e.status, vec![e.msg.clone()]),
        };
        r.record(
            AuditEntry {
                seq: 0,
                at_ms: 0,
                actor: actor.to_string(),
                tenant,
                action: what,
                status,
                changes,
            },
            now,
        );
    }
    reply
}

fn run(r: &mut Reconciler, action: Action, actor: &str, now: Instant) -> Result<Reply, ApiError> {
    match action {
        Action::Health => health(r),
        Action::Status => json(
            200,
            &crate::model::StatusInfo {
                store: r.store_health().status(),
                leader: r.leader().cloned(),
                controllers: r.controllers().to_vec(),
            },
        ),
        Action::OpenApi => Ok(Reply::Text("application/yaml", OPENAPI_YAML.into())),
        Action::Metrics => Ok(Reply::Text(
            "text/plain; version=0.0.4; charset=utf-8",
            crate::metrics::render(r, now, true),
        )),
        Action::Tenant(a) => resources::tenants::execute(r, a, now),
        Action::Host(a) => resources::hosts::execute(r, a, now),
        Action::Scaling(a) => resources::scaling::execute(r, a, now),
        Action::Block(a) => resources::blocks::execute(r, a, actor, now),
        Action::Backend(a) => resources::backends::execute(r, a, now),
        Action::Instance(a) => resources::instances::execute(r, a, now),
        Action::Events(q) => resources::events::execute(r, &q),
        Action::Audit(q) => resources::audit::execute(r, &q),
        Action::Traffic(q) => resources::traffic::execute(r, q),
        // The HTTP edge answers these (they ask every agent); without it there
        // are no agents to ask.
        Action::Eve(_) => json(200, &Vec::<serde_json::Value>::new()),
        // Tokens live outside the reconciler's state; the edge serves them.
        Action::Token(_) => Err(ApiError::internal(
            "token requests are served by the HTTP edge, not the reconciler",
        )),
    }
}

/// `GET /healthz`: 200 while the controller runs and its state store
/// serves; 503 naming the store nodes at fault when no node answers, or (in
/// a cluster) a slot range has no reachable primary.
fn health(r: &Reconciler) -> Result<Reply, ApiError> {
    let failing = r.store_health().failing();
    if failing.is_empty() {
        return json(200, &serde_json::json!({ "status": "ok" }));
    }
    json(
        503,
        &serde_json::json!({
            "status": "store unavailable",
            "store_failing": failing,
        }),
    )
}

/// The tenant and words of an action the audit log records: every change an
/// operator or tenant asks for. Reads, dry runs, heartbeats and metric samples
/// (the agents' and scalers' routine traffic) are not recorded.
pub fn describe(action: &Action) -> Option<(Option<String>, String)> {
    match action {
        Action::Tenant(TenantAction::Apply { spec, cond, .. }) if !cond.dry_run => Some((
            Some(spec.tenant.clone()),
            format!("apply tenant {}", spec.tenant),
        )),
        Action::Tenant(TenantAction::Delete(name, cond)) if !cond.dry_run => {
            Some((Some(name.clone()), format!("delete tenant {name}")))
        }
        Action::Host(HostAction::PutVm(v)) => Some((
            Some(v.tenant.clone()),
            format!("register vm {}/{} on host {}", v.tenant, v.name, v.host),
        )),
        Action::Host(HostAction::RotateFabric(_)) => {
            Some((None, "start a rotation of the fabric's keys".to_string()))
        }
        Action::Host(HostAction::DeleteVm { tenant, name }) => {
            Some((Some(tenant.clone()), format!("delete vm {tenant}/{name}")))
        }
        Action::Block(b) => {
            let t = &b.tenant;
            let what = match &b.what {
                BlockWhat::List => return None,
                BlockWhat::Create(q) => format!("block traffic from {} to vm {t}/{}", q.from, q.vm),
                BlockWhat::Delete(id) => format!("remove block {id} of tenant {t}"),
            };
            Some((Some(t.clone()), what))
        }
        Action::Backend(BackendAction::Drain {
            tenant,
            middlebox,
            addr,
            delay,
        }) => Some((
            Some(tenant.clone()),
            format!(
                "drain backend {addr} of {tenant}/{middlebox} (deregistration delay {} ms)",
                delay.as_millis()
            ),
        )),
        Action::Backend(BackendAction::Undrain {
            tenant,
            middlebox,
            addr,
        }) => Some((
            Some(tenant.clone()),
            format!("undrain backend {addr} of {tenant}/{middlebox}"),
        )),
        Action::Instance(a) => Some((
            Some(a.tenant().to_string()),
            match a {
                InstanceAction::Drain { delay, force, .. } => format!(
                    "drain instance {} (delay {} ms{})",
                    a.instance(),
                    delay.as_millis(),
                    if *force { ", forced" } else { "" }
                ),
                InstanceAction::Undrain { .. } => format!("undrain instance {}", a.instance()),
            },
        )),
        Action::Scaling(s) => {
            let (t, o) = (&s.tenant, &s.object);
            let what = match &s.what {
                ScalingWhat::ScaleMiddlebox(q) => {
                    format!("scale middlebox {t}/{o} to {}", q.instances)
                }
                ScalingWhat::PutScaler(_) => format!("set scaler of chain {t}/{o}"),
                ScalingWhat::DeleteScaler => format!("remove scaler of chain {t}/{o}"),
                ScalingWhat::Request(q) => format!(
                    "request scaling {} of chain {t}/{o}",
                    if q.up { "up" } else { "down" }
                ),
                ScalingWhat::GetMiddlebox | ScalingWhat::GetScaler | ScalingWhat::Metric(_) => {
                    return None
                }
            };
            Some((Some(t.clone()), what))
        }
        _ => None,
    }
}

/// What a change's reply says it changed, in lines: the spec's changes, the
/// instances placed and removed, and how many FIB entries changed on how
/// many hosts.
fn changes_of(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(p) = v.get("plan").filter(|p| p.is_object()) {
        let strs = |k: &str| -> Vec<String> {
            p.get(k)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
        out.extend(strs("spec"));
        out.extend(
            strs("instances_added")
                .into_iter()
                .map(|i| format!("+ instance {i}")),
        );
        out.extend(
            strs("instances_removed")
                .into_iter()
                .map(|i| format!("- instance {i}")),
        );
        if let Some(f) = p.get("fib").and_then(Value::as_object) {
            let n = |k: &str| -> usize {
                f.values()
                    .filter_map(|h| h.get(k).and_then(Value::as_array))
                    .map(Vec::len)
                    .sum()
            };
            if !f.is_empty() {
                out.push(format!(
                    "FIB: +{} -{} entries on {} host(s)",
                    n("added"),
                    n("removed"),
                    f.len()
                ));
            }
        }
        if let Some(g) = p.get("generation_after").and_then(Value::as_u64) {
            if g > 0 && !out.is_empty() {
                out.push(format!("generation {g}"));
            }
        }
    }
    if let Some(pushed) = v.get("pushed").and_then(Value::as_object) {
        if !pushed.is_empty() && out.is_empty() {
            out.push(format!("new configuration for {} host(s)", pushed.len()));
        }
    }
    out
}
