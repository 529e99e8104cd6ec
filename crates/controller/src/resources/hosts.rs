//! `/v1/hosts`, `/v1/vms` and `/v1/instances`: host registration and heartbeats,
//! each host's configuration, VM registration, and where instances run.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use serde_json::Value;
use sluice_proto::{AgentStatus, HostHeartbeat, PinnedFlows, VmRegistration};

use super::tenants::instance_infos;
use super::{body, json, Params, Reply};
use crate::desired::{Desired, Vm};
use crate::error::ApiError;
use crate::model::{Deleted, HostFibInfo, HostInfo, InstanceInfo, PlacementInfo, VmInfo};
use crate::reconcile::{Heartbeat, Reconciler, ALIVE};

/// A host, VM or instance request.
#[derive(Debug, Clone)]
pub enum HostAction {
    /// `GET /v1/hosts`.
    List,
    /// `POST /v1/hosts`: a heartbeat (which registers the host).
    Heartbeat(Box<Heartbeat>),
    /// `GET /v1/hosts/{id}/fib`.
    Fib(u32),
    /// `GET /v1/hosts/{id}/config`.
    Config(u32),
    /// `GET /v1/vms`.
    ListVms,
    /// `PUT /v1/vms/{tenant}/{name}`.
    PutVm(VmRegistration),
    /// `DELETE /v1/vms/{tenant}/{name}`.
    DeleteVm {
        /// Tenant.
        tenant: String,
        /// VM name.
        name: String,
    },
    /// `GET /v1/instances`: the placement, completed by the HTTP edge with what
    /// the agents report (see [`instance_listing`]).
    Instances,
    /// `GET /v1/placement[?tenant=NAME]`: where each instance runs and why.
    Placement(Option<String>),
    /// `GET /v1/containment`: hosts accused by others, and contained ones.
    Containment,
    /// `DELETE /v1/hosts/{id}/containment`: an operator releases a host.
    Release(u32),
    /// `POST /v1/hosts/{id}/revoke`: an operator revokes a host's
    /// credentials (certificates and tokens) and contains it. The HTTP edge
    /// revokes the credentials (they live with the tokens) before this runs.
    Revoke(u32),
    /// `PUT /v1/hosts/{id}/drain`: an operator drains a host for
    /// maintenance (body `{"force": bool}`, optional).
    Drain {
        /// Host id.
        host: u32,
        /// Move `state: local` instances too, and leave instances without
        /// room elsewhere unplaced.
        force: bool,
    },
    /// `DELETE /v1/hosts/{id}/drain`: an operator ends a host's drain.
    Undrain(u32),
    /// `GET /v1/fabric`: the fabric's key ids and a rotation's progress.
    Fabric,
    /// `GET /v1/fabric/uplinks`: every rack uplink's traffic, measured and
    /// predicted.
    Uplinks,
    /// `POST /v1/fabric/rotate`: an operator starts a rotation of the
    /// fabric's keys. The HTTP edge draws the new secret.
    RotateFabric(FreshSecret),
}

/// A fabric secret drawn by the HTTP edge for a rotation (none yet when
/// parsed); its `Debug` never shows it.
#[derive(Clone, Default)]
pub struct FreshSecret(pub Option<[u8; 32]>);

impl std::fmt::Debug for FreshSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "FreshSecret(..)"
        } else {
            "FreshSecret(none)"
        })
    }
}

/// Parses a request on the hosts', VMs' and instances' paths.
pub fn parse(method: &str, tpl: &str, p: &Params, text: &str) -> Result<HostAction, ApiError> {
    match (method, tpl) {
        ("GET", "/v1/hosts") => Ok(HostAction::List),
        ("POST", "/v1/hosts") => parse_heartbeat(text).map(|h| HostAction::Heartbeat(Box::new(h))),
        ("GET", "/v1/hosts/{id}/fib") => host_id(&p.get(0)).map(HostAction::Fib),
        ("GET", "/v1/hosts/{id}/config") => host_id(&p.get(0)).map(HostAction::Config),
        ("GET", "/v1/vms") => Ok(HostAction::ListVms),
        ("DELETE", "/v1/hosts/{id}/containment") => host_id(&p.get(0)).map(HostAction::Release),
        ("POST", "/v1/hosts/{id}/revoke") => host_id(&p.get(0)).map(HostAction::Revoke),
        ("PUT", "/v1/hosts/{id}/drain") => Ok(HostAction::Drain {
            host: host_id(&p.get(0))?,
            force: parse_drain(text)?,
        }),
        ("DELETE", "/v1/hosts/{id}/drain") => host_id(&p.get(0)).map(HostAction::Undrain),
        ("GET", "/v1/fabric") => Ok(HostAction::Fabric),
        ("GET", "/v1/fabric/uplinks") => Ok(HostAction::Uplinks),
        ("POST", "/v1/fabric/rotate") => Ok(HostAction::RotateFabric(FreshSecret(None))),
        ("PUT", _) => parse_vm(&p.get(0), &p.get(1), text).map(HostAction::PutVm),
        ("DELETE", _) => Ok(HostAction::DeleteVm {
            tenant: p.get(0),
            name: p.get(1),
        }),
        ("GET", "/v1/instances") => Ok(HostAction::Instances),
        _ => Err(super::unknown(tpl)),
    }
}

/// A host drain's body: empty, or `{"force": bool}`.
fn parse_drain(text: &str) -> Result<bool, ApiError> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct DrainBody {
        #[serde(default)]
        force: bool,
    }
    if text.trim().is_empty() {
        return Ok(false);
    }
    let b: DrainBody = body(text)?;
    Ok(b.force)
}

fn host_id(id: &str) -> Result<u32, ApiError> {
    id.parse()
        .map_err(|_| ApiError::bad(format!("id: `{id}` is not a host id")))
}

fn parse_heartbeat(text: &str) -> Result<Heartbeat, ApiError> {
    let raw: Value = body(text)?;
    // Pinned-flow counts ride along if the agent sends them (else drains poll
    // its status).
    let pinned: Option<Vec<PinnedFlows>> = raw
        .get("pinned_flows")
        .and_then(|v| serde_json::from_value(v.clone()).ok());
    let reports_health = raw.get("instances").is_some();
    let hb: HostHeartbeat =
        serde_json::from_value(raw).map_err(|e| ApiError::bad(format!("body: {e}")))?;
    let reg = &hb.registration;
    if reg.host == 0 {
        return Err(ApiError::bad("host: ids start at 1"));
    }
    if !reg.api.starts_with("http://") && !reg.api.starts_with("https://") {
        return Err(ApiError::bad(format!(
            "api: `{}` is not an http:// or https:// URL",
            reg.api
        )));
    }
    if reg.api_csr.is_some() && !reg.api.starts_with("https://") {
        return Err(ApiError::bad(format!(
            "api_csr: a certificate request for a plain http:// API (`{}`)",
            reg.api
        )));
    }
    Ok(Heartbeat {
        hb,
        pinned,
        reports_health,
    })
}

fn parse_vm(tenant: &str, name: &str, text: &str) -> Result<VmRegistration, ApiError> {
    let reg: VmRegistration = body(text)?;
    if reg.tenant != tenant {
        return Err(ApiError::bad(format!(
            "tenant: the body names tenant `{}` but the URL names `{tenant}`",
            reg.tenant
        )));
    }
    if reg.name != name {
        return Err(ApiError::bad(format!(
            "name: the body names VM `{}` but the URL names `{name}`",
            reg.name
        )));
    }
    if reg.host == 0 {
        return Err(ApiError::bad("host: ids start at 1"));
    }
    if reg.iface.is_empty() {
        return Err(ApiError::bad("iface: must not be empty"));
    }
    Ok(reg)
}

/// Carries out a host, VM or instance request.
pub fn execute(r: &mut Reconciler, a: HostAction, now: Instant) -> Result<Reply, ApiError> {
    match a {
        HostAction::List => json(200, &host_infos(r, now)),
        HostAction::Heartbeat(hb) => json(200, &r.heartbeat(*hb, now)?),
        HostAction::Fib(h) => {
            let cfg = registered(r, h)?;
            json(
                200,
                &HostFibInfo {
                    host: h,
                    version: cfg.version,
                    tenants: cfg.tenants,
                },
            )
        }
        HostAction::Config(h) => json(200, &registered(r, h)?),
        HostAction::ListVms => {
            let d = r.desired();
            let v: Vec<VmInfo> = d.vms.values().map(|vm| vm_info(d, vm)).collect();
            json(200, &v)
        }
        HostAction::PutVm(reg) => {
            let key = (reg.tenant.clone(), reg.name.clone());
            let existed = r.put_vm(reg, now)?;
            let d = r.desired();
            json(if existed { 200 } else { 201 }, &vm_info(d, &d.vms[&key]))
        }
        HostAction::DeleteVm { tenant, name } => {
            let pushed = r.delete_vm(&tenant, &name, now)?;
            json(
                200,
                &Deleted {
                    deleted: format!("vm {tenant}/{name}"),
                    pushed,
                    dry_run: false,
                    plan: None,
                },
            )
        }
        HostAction::Instances => json(200, &instance_listing(r).0),
        HostAction::Placement(tenant) => {
            json(200, &placement_infos(r.desired(), tenant.as_deref()))
        }
        HostAction::Containment => json(200, &r.containment(now)),
        HostAction::Release(h) => {
            let released = r.release_host(h, now)?;
            json(200, &serde_json::json!({ "host": h, "released": released }))
        }
        HostAction::Drain { host, force } => json(200, &r.drain_host(host, force, now)?),
        HostAction::Undrain(h) => {
            let was = r.undrain_host(h, now)?;
            json(200, &serde_json::json!({ "host": h, "undrained": was }))
        }
        HostAction::Fabric => json(200, &r.fabric_status()),
        HostAction::Uplinks => json(200, &r.uplink_report()),
        HostAction::RotateFabric(fresh) => {
            let Some(secret) = fresh.0 else {
                return Err(ApiError::new(
                    500,
                    "internal error: no fresh secret was drawn for the rotation",
                ));
            };
            json(202, &r.rotate_fabric_key(secret, now)?)
        }
        HostAction::Revoke(h) => {
            let contained = r.revoke_host(h, now)?;
            json(
                200,
                &serde_json::json!({ "host": h, "revoked": true, "contained": contained }),
            )
        }
    }
}

/// `GET /v1/placement`'s query: `tenant=NAME` narrows it to one tenant.
pub fn parse_placement(query: &str) -> Result<HostAction, ApiError> {
    let mut tenant = None;
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        match kv.split_once('=') {
            Some(("tenant", v)) => tenant = Some(super::percent_decode(v)),
            _ => {
                return Err(ApiError::bad(format!(
                    "unknown query parameter `{kv}`: use tenant=NAME"
                )))
            }
        }
    }
    Ok(HostAction::Placement(tenant))
}

/// Every placed instance (of `tenant` only, if given): its host, rack, and
/// the placement decision's policy and reason.
pub fn placement_infos(d: &Desired, tenant: Option<&str>) -> Vec<PlacementInfo> {
    // Each instance's share of its group, from the tenant's placement as
    // compiled (order, weights, instances out of their groups).
    let mut shares: std::collections::BTreeMap<(&str, String, u32, u16), f64> = Default::default();
    type ClassShares = std::collections::BTreeMap<String, f64>;
    let mut class_shares: std::collections::BTreeMap<(&str, String, u32, u16), ClassShares> =
        Default::default();
    for t in d.tenants.keys().filter(|t| tenant.is_none_or(|x| x == *t)) {
        let Ok(p) = d.placement(t) else { continue };
        for (mb, classes) in &p.classes {
            let list = &p.instances[mb];
            for class in classes.keys() {
                let w = |hp| p.class_weight(mb, Some(class), list, hp);
                let total: u32 = list.iter().map(|hp| w(*hp)).sum();
                for hp in list.iter().filter(|_| total > 0) {
                    class_shares
                        .entry((t.as_str(), mb.clone(), hp.0 .0, hp.1 .0))
                        .or_default()
                        .insert(class.clone(), f64::from(w(*hp)) / f64::from(total));
                }
            }
        }
        for (mb, list) in &p.instances {
            let total: u32 = list.iter().map(|hp| p.weight(list, *hp)).sum();
            for hp in list {
                if total > 0 {
                    shares.insert(
                        (t.as_str(), mb.clone(), hp.0 .0, hp.1 .0),
                        f64::from(p.weight(list, *hp)) / f64::from(total),
                    );
                }
            }
        }
    }
    d.instances
        .iter()
        .filter(|(k, _)| tenant.is_none_or(|t| t == k.0))
        .map(|(key @ (t, mb, k), i)| {
            let host = d.hosts.get(&i.host);
            let why = d.why.get(key);
            PlacementInfo {
                name: crate::desired::instance_name(t, mb, *k),
                tenant: t.clone(),
                middlebox: mb.clone(),
                host: i.host,
                host_name: host.map(|h| h.name.clone()).unwrap_or_default(),
                rack: host.and_then(|h| h.capacity.as_ref()?.rack.clone()),
                policy: why.map(|w| w.policy.as_str().to_string()),
                reason: why.map_or_else(
                    || "placed before the controller kept placement reasons".to_string(),
                    |w| w.reason.clone(),
                ),
                share: shares
                    .get(&(t.as_str(), mb.clone(), i.host, i.port))
                    .copied(),
                class_shares: class_shares
                    .remove(&(t.as_str(), mb.clone(), i.host, i.port))
                    .unwrap_or_default(),
            }
        })
        .collect()
}

/// A registered host's configuration (empty if none was derived yet).
fn registered(r: &Reconciler, h: u32) -> Result<sluice_proto::AgentConfig, ApiError> {
    if !r.desired().hosts.contains_key(&h) {
        return Err(ApiError::not_found(format!("host {h} is not registered")));
    }
    // Fabric keys never leave through the API.
    let mut cfg = r.configs().get(&h).cloned().unwrap_or_default();
    cfg.fabric_auth = cfg.fabric_auth.map(|f| f.redacted());
    Ok(cfg)
}

pub(crate) fn host_infos(r: &Reconciler, now: Instant) -> Vec<HostInfo> {
    // Rooms for no middlebox: only what every instance takes matters here.
    let used: std::collections::BTreeMap<u32, u32> = r
        .desired()
        .rooms("", "")
        .iter()
        .map(|room| (room.id, room.used.slots))
        .collect();
    r.desired()
        .hosts
        .values()
        .map(|h| {
            let live = r.live.get(&h.id);
            let heard = r.heard_ago(h.id, now);
            let desired = r.configs().get(&h.id).map(|c| c.version).unwrap_or(0);
            let reported = live.and_then(|l| l.reported);
            HostInfo {
                id: h.id,
                name: h.name.clone(),
                underlay: h.underlay.to_string(),
                api: h.api.clone(),
                last_heartbeat_ms: heard.map(|d| d.as_millis() as u64),
                // A second, or the host's silence threshold in a large fleet
                // (whose agents heartbeat less often).
                alive: heard.is_some_and(|d| d <= ALIVE.max(r.silent_after(h.id))),
                desired_version: desired,
                reported_version: reported,
                in_sync: reported == Some(desired),
                push_error: live.and_then(|l| l.push_error.clone()),
                slots_used: used.get(&h.id).copied().unwrap_or(0),
                slots_total: h.capacity.as_ref().and_then(|c| c.instance_slots),
                rack: h.capacity.as_ref().and_then(|c| c.rack.clone()),
                drained: r.desired().cordoned.contains(&h.id),
            }
        })
        .collect()
}

fn vm_info(d: &Desired, vm: &Vm) -> VmInfo {
    VmInfo {
        tenant: vm.reg.tenant.clone(),
        name: vm.reg.name.clone(),
        host: vm.reg.host,
        port: vm.port,
        iface: vm.reg.iface.clone(),
        mac: vm.reg.mac.clone(),
        addr: vm.reg.addr.to_string(),
        gateway: vm.reg.gateway,
        applied: d.tenants.contains_key(&vm.reg.tenant),
    }
}

/// Every placed instance, and the API of each host running one (to ask for
/// their status).
pub fn instance_listing(r: &Reconciler) -> (Vec<InstanceInfo>, Vec<(u32, String)>) {
    let d = r.desired();
    let list = instance_infos(d, None);
    let hosts: BTreeSet<u32> = list.iter().map(|i| i.host).collect();
    let apis = hosts
        .into_iter()
        .filter_map(|h| d.hosts.get(&h).map(|x| (h, x.api.clone())))
        .collect();
    (list, apis)
}

/// Completes the listing with what the agents reported (`alive`, `dead`, or
/// `unknown` for an instance its agent did not report).
pub fn with_status(
    mut list: Vec<InstanceInfo>,
    statuses: &BTreeMap<u32, AgentStatus>,
) -> Vec<InstanceInfo> {
    for i in &mut list {
        let found = statuses
            .get(&i.host)
            .and_then(|st| st.instances.iter().find(|x| x.name == i.name));
        // A drain says more than "alive"; a stopped instance runs nowhere.
        let drained = matches!(i.state.as_str(), "draining" | "stopped");
        match found {
            Some(x) => {
                i.alive = Some(x.alive);
                i.pid = x.pid;
                if !drained {
                    i.state = if x.alive { "alive" } else { "dead" }.into();
                }
            }
            None if drained => {}
            None => i.state = "unknown".into(),
        }
    }
    list
}
