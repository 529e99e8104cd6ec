//! `/v1/tenants` and `/v1/chains`: apply, read and delete tenant specs.

use std::collections::BTreeMap;
use std::time::Instant;

use sluice_proto::AgentConfig;
use sluice_tenant::TenantSpec;

use super::{json, Params, Reply};
use crate::change::Conditions;
use crate::desired::{instance_name, Desired};
use crate::error::ApiError;
use crate::model::{ApplySummary, ChainInfo, Deleted, InstanceInfo, TenantDetail, TenantSummary};
use crate::reconcile::Reconciler;

/// A tenant request.
#[derive(Debug, Clone)]
pub enum TenantAction {
    /// `GET /v1/tenants`.
    List,
    /// `POST /v1/tenants`, `PUT /v1/tenants/{name}`: a parsed, validated spec.
    Apply {
        /// The spec's text, kept for `GET`.
        yaml: String,
        /// The spec.
        spec: Box<TenantSpec>,
        /// `If-Match`, `?dry_run`, `?force`.
        cond: Conditions,
    },
    /// `GET /v1/tenants/{name}`.
    Get(String),
    /// `DELETE /v1/tenants/{name}`.
    Delete(String, Conditions),
    /// `GET /v1/chains`.
    Chains,
}

/// Content types a tenant spec may be sent as.
const SPEC_TYPES: &[&str] = &[
    "text/yaml",
    "application/yaml",
    "application/x-yaml",
    "text/x-yaml",
    "text/plain",
    "application/json",
    "",
];

/// A change's conditions from its query (`dry_run`, `force`: `true`, `1` or
/// empty; `false`, `0`) and its `If-Match` header (a generation, quoted or not;
/// `0`: the tenant must not exist yet). Reads take none.
pub fn conditions(
    method: &str,
    query: &str,
    if_match: Option<&str>,
) -> Result<Conditions, ApiError> {
    let mut c = Conditions::default();
    if method == "GET" {
        return Ok(c);
    }
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, "true"));
        let flag = match v {
            "" | "true" | "1" => true,
            "false" | "0" => false,
            _ => return Err(ApiError::bad(format!("{k}: `{v}` is not true or false"))),
        };
        match k {
            "dry_run" => c.dry_run = flag,
            "force" => c.force = flag,
            _ => {
                return Err(ApiError::bad(format!(
                    "`{kv}`: unknown query parameter (known: dry_run, force)"
                )))
            }
        }
    }
    if let Some(m) = if_match {
        let g = m.trim().trim_start_matches("W/").trim_matches('"');
        c.if_generation = Some(g.parse().map_err(|_| {
            ApiError::bad(format!(
                "If-Match: `{m}` is not a tenant generation (a number, 0 for none)"
            ))
        })?);
    }
    Ok(c)
}

/// Parses a request on the tenants' paths.
pub fn parse(
    method: &str,
    tpl: &str,
    p: &Params,
    ctype: Option<&str>,
    body: &str,
    cond: Conditions,
) -> Result<TenantAction, ApiError> {
    match (method, tpl) {
        ("GET", "/v1/tenants") => Ok(TenantAction::List),
        ("GET", "/v1/chains") => Ok(TenantAction::Chains),
        ("GET", _) => Ok(TenantAction::Get(p.get(0))),
        ("DELETE", _) => Ok(TenantAction::Delete(p.get(0), cond)),
        ("POST", _) => parse_spec(None, ctype, body, cond),
        ("PUT", _) => parse_spec(Some(&p.get(0)), ctype, body, cond),
        _ => Err(super::unknown(tpl)),
    }
}

fn parse_spec(
    url_name: Option<&str>,
    ctype: Option<&str>,
    body: &str,
    cond: Conditions,
) -> Result<TenantAction, ApiError> {
    if let Some(ct) = ctype {
        let base = ct.split(';').next().unwrap_or("").trim();
        if !SPEC_TYPES.contains(&base) {
            return Err(ApiError::bad(format!(
                "Content-Type: `{base}` is not a tenant spec (send text/yaml or application/yaml)"
            )));
        }
    }
    let registry = sluice_builtin::registry();
    let spec = TenantSpec::parse(body, "spec", Some(&registry))
        .map_err(|e| ApiError::bad(e.to_string()))?;
    if let Some(n) = url_name {
        if n != spec.tenant {
            return Err(ApiError::bad(format!(
                "tenant: the spec is for tenant `{}` but the URL names `{n}`",
                spec.tenant
            )));
        }
    }
    Ok(TenantAction::Apply {
        yaml: body.to_string(),
        spec: Box::new(spec),
        cond,
    })
}

/// Carries out a tenant request.
pub fn execute(r: &mut Reconciler, a: TenantAction, now: Instant) -> Result<Reply, ApiError> {
    match a {
        TenantAction::List => json(200, &list(r)),
        TenantAction::Chains => json(200, &chains(r.desired())),
        TenantAction::Get(name) => json(200, &detail(r, &name)?),
        TenantAction::Delete(name, cond) => {
            let done = r.delete_tenant(&name, cond, now)?;
            json(
                200,
                &Deleted {
                    deleted: format!("tenant {name}"),
                    pushed: done.pushed,
                    dry_run: cond.dry_run,
                    plan: Some(done.plan),
                },
            )
        }
        TenantAction::Apply { yaml, spec, cond } => {
            let name = spec.tenant.clone();
            let done = r.apply_tenant(&yaml, *spec, cond, now)?;
            if cond.dry_run {
                let summary = ApplySummary {
                    tenant: name,
                    vni: 0,
                    generation: done.plan.generation_after,
                    changed: done.changed,
                    chains: Vec::new(),
                    instances: Vec::new(),
                    entries: BTreeMap::new(),
                    pushed: BTreeMap::new(),
                    dry_run: true,
                    plan: Some(done.plan),
                };
                return json(200, &summary);
            }
            let d = r.desired();
            let t = &d.tenants[&name];
            let summary = ApplySummary {
                tenant: name.clone(),
                vni: t.vni,
                generation: t.generation,
                changed: done.changed,
                chains: t.spec.chains.iter().map(|c| c.name.clone()).collect(),
                instances: instance_infos(d, Some(&name)),
                entries: entries_of(r.configs(), &name),
                pushed: done.pushed,
                dry_run: false,
                plan: Some(done.plan),
            };
            json(if done.existed { 200 } else { 201 }, &summary)
        }
    }
}

/// Every placed instance (of `tenant` if given), as the desired state has it.
pub fn instance_infos(d: &Desired, tenant: Option<&str>) -> Vec<InstanceInfo> {
    d.instances
        .iter()
        .filter(|(k, _)| tenant.is_none_or(|t| t == k.0))
        .map(|(key @ (t, mb, k), i)| InstanceInfo {
            name: instance_name(t, mb, *k),
            tenant: t.clone(),
            middlebox: mb.clone(),
            host: i.host,
            port: i.port,
            state: if d.draining.contains(key) {
                "draining"
            } else if d.stopped(key) {
                "stopped"
            } else if d.down.contains(key) {
                "down"
            } else {
                "placed"
            }
            .into(),
            alive: None,
            pid: None,
            drain_until_ms: d.instance_drains.get(key).copied(),
        })
        .collect()
}

/// FIB entries of `tenant` per host.
fn entries_of(configs: &BTreeMap<u32, AgentConfig>, tenant: &str) -> BTreeMap<u32, usize> {
    configs
        .iter()
        .filter_map(|(h, c)| {
            c.tenants
                .iter()
                .find(|t| t.tenant == tenant)
                .map(|t| (*h, t.entries.len()))
        })
        .collect()
}

fn list(r: &Reconciler) -> Vec<TenantSummary> {
    let d = r.desired();
    d.tenants
        .values()
        .map(|t| TenantSummary {
            tenant: t.name.clone(),
            vni: t.vni,
            generation: t.generation,
            chains: t.spec.chains.len(),
            instances: d.instances.keys().filter(|k| k.0 == t.name).count(),
            entries: entries_of(r.configs(), &t.name).values().sum(),
        })
        .collect()
}

fn detail(r: &Reconciler, name: &str) -> Result<TenantDetail, ApiError> {
    let d = r.desired();
    let t = d
        .tenants
        .get(name)
        .ok_or_else(|| ApiError::not_found(format!("tenant `{name}` is not applied")))?;
    Ok(TenantDetail {
        tenant: t.name.clone(),
        vni: t.vni,
        generation: t.generation,
        labels: t.spec.labels.clone(),
        spec: t.yaml.clone(),
        chains: t.spec.chains.iter().map(|c| c.name.clone()).collect(),
        instances: instance_infos(d, Some(name)),
        entries: entries_of(r.configs(), name),
        vms: d
            .vms
            .keys()
            .filter(|k| k.0 == name)
            .map(|k| k.1.clone())
            .collect(),
    })
}

fn chains(d: &Desired) -> Vec<ChainInfo> {
    let mut v = Vec::new();
    for t in d.tenants.values() {
        for (i, c) in t.spec.chains.iter().enumerate() {
            v.push(ChainInfo {
                tenant: t.name.clone(),
                chain: c.name.clone(),
                id: (2 * i) as u16,
                reverse_id: c.bidirectional.then_some((2 * i + 1) as u16),
                path: c.path.clone(),
                bidirectional: c.bidirectional,
                mirror: c.mirror.clone(),
            });
        }
    }
    v
}
