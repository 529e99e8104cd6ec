//! `/v1/tenants/{name}/middleboxes/{middlebox}` (instance counts: the scale
//! API) and `/v1/tenants/{name}/chains/{chain}/...` (a chain's scaler, the
//! metric samples that feed it, and explicit scaling requests).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use super::tenants::instance_infos;
use super::{body, json, Params, Reply};
use crate::desired::{instance_name, Desired, InstanceKey};
use crate::error::ApiError;
use crate::model::{MetricSample, MiddleboxInfo, ScaleRequest, ScalingConfig, ScalingRequest};
use crate::reconcile::Reconciler;

/// A middlebox-scaling, scaler or metric request on one tenant's object.
#[derive(Debug, Clone)]
pub struct ScalingAction {
    /// The tenant.
    pub tenant: String,
    /// The middlebox or chain named in the path.
    pub object: String,
    /// What to do with it.
    pub what: ScalingWhat,
}

/// What a [`ScalingAction`] does.
#[derive(Debug, Clone)]
pub enum ScalingWhat {
    /// `GET .../middleboxes/{middlebox}`.
    GetMiddlebox,
    /// `PUT .../middleboxes/{middlebox}`.
    ScaleMiddlebox(ScaleRequest),
    /// `POST .../chains/{chain}/metrics`.
    Metric(MetricSample),
    /// `GET .../chains/{chain}/scaling`.
    GetScaler,
    /// `PUT .../chains/{chain}/scaling`.
    PutScaler(ScalingConfig),
    /// `DELETE .../chains/{chain}/scaling`.
    DeleteScaler,
    /// `POST .../chains/{chain}/scaling/request`.
    Request(ScalingRequest),
}

/// Parses a request on the scaling paths.
pub fn parse(method: &str, tpl: &str, p: &Params, text: &str) -> Result<ScalingAction, ApiError> {
    let what = match (method, tpl.rsplit('/').next().unwrap_or("")) {
        ("GET", "{middlebox}") => ScalingWhat::GetMiddlebox,
        ("PUT", "{middlebox}") => ScalingWhat::ScaleMiddlebox(body(text)?),
        ("POST", "metrics") => {
            let m: MetricSample = body(text)?;
            if !m.value.is_finite() {
                return Err(ApiError::bad("value: must be a finite number"));
            }
            ScalingWhat::Metric(m)
        }
        ("GET", "scaling") => ScalingWhat::GetScaler,
        ("PUT", "scaling") => ScalingWhat::PutScaler(if text.trim().is_empty() {
            ScalingConfig::default()
        } else {
            body(text)?
        }),
        ("DELETE", "scaling") => ScalingWhat::DeleteScaler,
        ("POST", "request") => ScalingWhat::Request(body(text)?),
        _ => return Err(super::unknown(tpl)),
    };
    Ok(ScalingAction {
        tenant: p.get(0),
        object: p.get(1),
        what,
    })
}

/// Carries out a scaling request.
pub fn execute(r: &mut Reconciler, a: ScalingAction, now: Instant) -> Result<Reply, ApiError> {
    let (t, o) = (a.tenant.as_str(), a.object.as_str());
    match a.what {
        ScalingWhat::GetMiddlebox => json(200, &middlebox_info(r.desired(), t, o)?),
        ScalingWhat::ScaleMiddlebox(req) => {
            let pushed = r.scale_middlebox(t, o, req.instances, req.drain_timeout_ms, now)?;
            let mut info = middlebox_info(r.desired(), t, o)?;
            info.pushed = pushed;
            json(200, &info)
        }
        ScalingWhat::Metric(m) => json(200, &r.post_metric(t, o, m, now)?),
        ScalingWhat::GetScaler => json(200, &r.scaling_info(t, o)?),
        ScalingWhat::PutScaler(cfg) => json(200, &r.put_scaling(t, o, cfg, now)?),
        ScalingWhat::DeleteScaler => json(200, &r.delete_scaling(t, o, now)?),
        ScalingWhat::Request(req) => json(200, &r.scaling_request(t, o, req, now)?),
    }
}

/// A middlebox's counts, modes and instances.
fn middlebox_info(d: &Desired, tenant: &str, mb: &str) -> Result<MiddleboxInfo, ApiError> {
    let t = d
        .tenants
        .get(tenant)
        .ok_or_else(|| ApiError::not_found(format!("tenant `{tenant}` is not applied")))?;
    let (spec_instances, pipeline, workers, functions) = match t.spec.elements.get(mb) {
        Some(sluice_tenant::Element::Middlebox {
            function,
            config,
            instances,
            pipeline,
            workers,
            ..
        }) => (
            *instances,
            *pipeline,
            *workers,
            sluice_tenant::consolidate::functions_of(mb, function, config),
        ),
        _ => {
            return Err(ApiError::not_found(format!(
                "tenant `{tenant}` has no middlebox `{mb}`"
            )))
        }
    };
    let names = |set: &BTreeSet<InstanceKey>| {
        set.iter()
            .filter(|k| k.0 == tenant && k.1 == mb)
            .map(|k| instance_name(&k.0, &k.1, k.2))
            .collect::<Vec<_>>()
    };
    let function = match t.spec.elements.get(mb) {
        Some(sluice_tenant::Element::Middlebox { function, .. }) => function.clone(),
        _ => String::new(),
    };
    let members = if function == sluice_tenant::consolidate::HYPERAPP {
        functions
            .into_iter()
            .map(|f| format!("{}:{}", f.name, f.function))
            .collect()
    } else {
        Vec::new()
    };
    Ok(MiddleboxInfo {
        tenant: tenant.to_string(),
        middlebox: mb.to_string(),
        function,
        members,
        instances: d.count(tenant, mb).unwrap_or(spec_instances),
        spec_instances,
        scaled: d.scaled.contains_key(&(tenant.to_string(), mb.to_string())),
        state: if d.local_state(tenant, mb) {
            "local"
        } else if d.cached_state(tenant, mb) {
            "cached"
        } else {
            "shared"
        }
        .into(),
        affinity: if d.pinned(tenant, mb) {
            "pinned"
        } else {
            "hash"
        }
        .into(),
        pipeline,
        workers,
        placed: instance_infos(d, Some(tenant))
            .into_iter()
            .filter(|i| i.middlebox == mb)
            .collect(),
        draining: names(&d.draining),
        down: names(&d.down),
        pushed: BTreeMap::new(),
    })
}
