//! Health of the backends behind the tenants' load balancers (issue 22, item
//! 4): one [`Health`] state machine per backend of every `lb` middlebox.
//!
//! Inputs: the passive signal (a backend that is a VM on a host silent for
//! [`HOST_SILENT`](super::HOST_SILENT), or six heartbeat intervals in a large fleet, is down until the host is heard again; the same silence
//! that suspects the host's NF instances, with the same "everyone silent"
//! guard) and operators' drains (`PUT .../backends/{addr}/drain`). The
//! backends that are not up go to every instance of their middlebox in
//! [`sluice_proto::InstanceConfig::backends`], which the agents hand to the
//! running instances without restarting them; a change is one commit and one
//! `backend` event per backend. Active checks (a service's `health_check:`)
//! run in the agent of each backend VM's host, which the controller tells
//! what to check ([`sluice_proto::AgentConfig::health_checks`], from
//! [`lb_backends`]); their results come back in the heartbeats
//! ([`Reconciler::backend_checks`]) and count against the rise and fall
//! thresholds here. Health is live state, like instance health: a
//! restarted controller starts from "all up"; operators' drains are kept in
//! the desired state ([`Desired::backend_drains`], when each delay ends) and
//! resume after a restart.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use sluice_lb::health::{BackendState, Cause, Health, Transition};
use sluice_proto::{BackendHealthState, BackendOverride};
use sluice_tenant::Element;

use super::events::event;
use super::Reconciler;
use crate::desired::Desired;
use crate::error::ApiError;
use crate::model::BackendInfo;

/// `(tenant, middlebox, backend address as configured)`.
pub(crate) type BackendKey = (String, String, String);

/// One load-balancer backend as a tenant's spec names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Configured {
    /// The `lb` middlebox.
    pub(crate) middlebox: String,
    /// The backend as configured.
    pub(crate) addr: String,
    /// Its address.
    pub(crate) ip: std::net::IpAddr,
    /// Its service's active check and the port it checks, if any.
    pub(crate) check: Option<(sluice_lb::HealthCheckConfig, u16)>,
}

/// The backends' health and what it was computed from.
#[derive(Debug, Default)]
pub(crate) struct Backends {
    /// Per tenant: the spec generation its backends were read at, and them.
    index: BTreeMap<String, (u64, Vec<Configured>)>,
    /// Every backend's state machine.
    pub(crate) health: BTreeMap<BackendKey, Health>,
    /// Transitions by the state entered (`/metrics`).
    pub(crate) transitions: BTreeMap<&'static str, u64>,
    /// The check counters last reported per (host, backend): what a new
    /// report is counted from.
    seen: BTreeMap<(u32, BackendKey), (u64, u64)>,
    /// The last check result reported per backend (`sluice get backends`).
    pub(crate) last_check: BTreeMap<BackendKey, String>,
    /// The applied tenants as last synced (a shared copy): while the desired
    /// state's are still this very map, no tenant changed (see
    /// [`crate::desired::PMap::same`]).
    synced: Option<crate::desired::PMap<String, std::sync::Arc<crate::desired::Tenant>>>,
}

/// Whether any `lb` middlebox of `spec` has a service with a `health_check:`
/// (a look at the YAML tree, no parse: what every configuration build asks
/// first, so tenants without checks cost nothing).
pub(crate) fn has_health_checks(spec: &sluice_tenant::TenantSpec) -> bool {
    spec.elements.values().any(|e| match e {
        Element::Middlebox {
            function, config, ..
        } if function == "lb" => config
            .get("services")
            .and_then(|s| s.as_sequence())
            .is_some_and(|list| list.iter().any(|s| s.get("health_check").is_some())),
        _ => false,
    })
}

/// The backends of the `lb` middleboxes of a spec. A configuration that does
/// not parse has none here (the spec was validated when applied).
pub(crate) fn lb_backends(spec: &sluice_tenant::TenantSpec) -> Vec<Configured> {
    let mut out = Vec::new();
    for (mb, e) in &spec.elements {
        let Element::Middlebox {
            function, config, ..
        } = e
        else {
            continue;
        };
        if function != "lb" {
            continue;
        }
        let Ok(c) = sluice_builtin::config::<sluice_lb::Config>(config) else {
            continue;
        };
        for s in &c.services {
            for b in &s.backends {
                let at = b
                    .addr
                    .parse::<std::net::IpAddr>()
                    .ok()
                    .map(|ip| (ip, s.port))
                    .or_else(|| {
                        b.addr
                            .parse::<std::net::SocketAddr>()
                            .ok()
                            .map(|a| (a.ip(), a.port()))
                    });
                if let Some((ip, port)) = at {
                    out.push(Configured {
                        middlebox: mb.clone(),
                        addr: b.addr.clone(),
                        ip,
                        check: s
                            .health_check
                            .as_ref()
                            .map(|hc| (hc.clone(), hc.port.unwrap_or(port))),
                    });
                }
            }
        }
    }
    out
}

fn wire(s: BackendState) -> BackendHealthState {
    match s {
        BackendState::Up => BackendHealthState::Up,
        BackendState::Down => BackendHealthState::Down,
        BackendState::Draining => BackendHealthState::Draining,
        BackendState::Removed => BackendHealthState::Removed,
    }
}

/// Every backend state, for metrics that show each with 0 or 1.
pub const BACKEND_STATES: [BackendState; 4] = [
    BackendState::Up,
    BackendState::Down,
    BackendState::Draining,
    BackendState::Removed,
];

/// The VM of `tenant` at `ip` and its host.
fn vm_at(d: &Desired, tenant: &str, ip: std::net::IpAddr) -> Option<(String, u32)> {
    d.vms
        .iter()
        .find(|((t, _), vm)| t == tenant && vm.reg.addr == ip && !vm.reg.gateway)
        .map(|((_, n), vm)| (n.clone(), vm.reg.host))
}

impl Reconciler {
    /// Hosts that report health and have been silent longer than six of the
    /// heartbeat intervals they may be using ([`HOST_SILENT`] in a small
    /// fleet, [`crate::liveness::silent_after`]), with their silence; empty
    /// when every watched host (two or more) is silent at once (the
    /// controller, not they, is the likelier culprit).
    pub(super) fn silent_hosts(&self, now: Instant) -> BTreeMap<u32, Duration> {
        let watched = self.live.values().filter(|l| l.reports_health).count();
        let current = self.heartbeat_interval();
        let silent: BTreeMap<u32, Duration> = self
            .live
            .iter()
            .filter(|(_, l)| l.reports_health)
            .filter_map(|(h, l)| {
                let every = Self::beats_every(l, current);
                let quiet = now.saturating_duration_since(l.last_heard?);
                (quiet > crate::liveness::silent_after(every)).then_some((*h, quiet))
            })
            .collect();
        if watched >= 2 && silent.len() == watched {
            return BTreeMap::new();
        }
        silent
    }

    /// Brings the backends' state machines in line with the specs, feeds them
    /// the passive signal (`silent`: hosts down now; `None`: the controller
    /// stalled, so silence proves nothing and the signal stays as it was) and
    /// time, and commits the states that changed.
    pub(super) fn check_backends(
        &mut self,
        silent: Option<&BTreeMap<u32, Duration>>,
        now: Instant,
    ) {
        let now_ns = self.clock_ns(now);
        let mut moves = self.sync_backends(now_ns);
        // The common case, every 20 ms: no host silent, no backend held down
        // by silence, no drain under way. Nothing can change: no allocation,
        // no lookup of VMs. (Active checks' results arrive with heartbeats,
        // not with time: the agents time their checks.)
        let passive = silent.is_some_and(|s| !s.is_empty())
            || self.backends.health.values().any(Health::passive_down);
        let timed = self.backends.health.values().any(|h| h.drain().is_some());
        if !passive && !timed && self.desired.backend_states.is_empty() && moves.is_empty() {
            return;
        }
        let silent = if passive { silent } else { None };
        let keys: Vec<BackendKey> = self.backends.health.keys().cloned().collect();
        // Each VM's host by (tenant, address), once, not once per backend.
        let vms: BTreeMap<(&str, std::net::IpAddr), (String, u32)> = if silent.is_some() {
            self.desired
                .vms
                .iter()
                .filter(|(_, vm)| !vm.reg.gateway)
                .map(|((t, n), vm)| ((t.as_str(), vm.reg.addr), (n.clone(), vm.reg.host)))
                .collect()
        } else {
            BTreeMap::new()
        };
        for key in keys {
            let host = self
                .backend_ip(&key)
                .and_then(|ip| vms.get(&(key.0.as_str(), ip)).cloned());
            let Some(h) = self.backends.health.get_mut(&key) else {
                continue;
            };
            if let Some(silent) = silent {
                let down = host
                    .as_ref()
                    .and_then(|(_, host)| silent.get(host).map(|d| (*host, *d)));
                if let Some(t) = h.set_passive_down(down.is_some(), now_ns) {
                    let why = match down {
                        Some((host, d)) => format!(
                            "host {host} silent for {} ms (its agent may be gone)",
                            d.as_millis()
                        ),
                        None => match &host {
                            Some((_, host)) => format!("host {host} is heard from again"),
                            None => "its VM is no longer registered".to_string(),
                        },
                    };
                    moves.push((key.clone(), t, why));
                }
            }
            if let Some(t) = h.poll(now_ns) {
                moves.push((key.clone(), t, String::new()));
            }
        }
        self.commit_backends(moves, now);
    }

    /// Adds state machines for backends new in the specs, forgets those no
    /// spec names any more, and gives each its service's checks (returns the
    /// transitions that made: checks removed from a backend they held down).
    fn sync_backends(&mut self, now_ns: u64) -> Vec<(BackendKey, Transition, String)> {
        let b = &mut self.backends;
        if b.synced
            .as_ref()
            .is_some_and(|t| t.same(&self.desired.tenants))
        {
            return Vec::new();
        }
        b.synced = Some(self.desired.tenants.clone());
        // The tenants applied, changed or deleted since the last sync: one
        // merge of two lists ordered by name (this runs at every tick; a
        // lookup per tenant, and then a pass over every tenant's backends
        // after any apply, was a twentieth of the controller's time at
        // 2,000 tenants). Only their backends are looked at again.
        let mut changed: BTreeSet<String> = BTreeSet::new();
        {
            let mut old = b.index.iter().peekable();
            for (name, t) in self.desired.tenants.iter() {
                while let Some((o, _)) = old.next_if(|(o, _)| o.as_str() < name.as_str()) {
                    changed.insert(o.clone());
                }
                match old.next_if(|(o, _)| *o == name) {
                    Some((_, (g, _))) if *g == t.generation => {}
                    _ => {
                        changed.insert(name.clone());
                    }
                }
            }
            changed.extend(old.map(|(o, _)| o.clone()));
        }
        if changed.is_empty() {
            return Vec::new();
        }
        for name in &changed {
            match self.desired.tenants.get(name) {
                Some(t) => {
                    b.index
                        .insert(name.clone(), (t.generation, lb_backends(&t.spec)));
                }
                None => {
                    b.index.remove(name);
                }
            }
        }
        let wanted: BTreeSet<BackendKey> = changed
            .iter()
            .filter_map(|t| b.index.get_key_value(t))
            .flat_map(|(t, (_, list))| {
                list.iter()
                    .map(move |c| (t.clone(), c.middlebox.clone(), c.addr.clone()))
            })
            .collect();
        // Forget the changed tenants' backends that are gone (ranges of
        // the maps ordered by tenant).
        for t in &changed {
            let of_t = |m: &BTreeMap<BackendKey, _>| -> Vec<BackendKey> {
                m.range((t.clone(), String::new(), String::new())..)
                    .take_while(|(k, _)| &k.0 == t)
                    .filter(|(k, _)| !wanted.contains(*k))
                    .map(|(k, _)| k.clone())
                    .collect()
            };
            for k in of_t(&b.health) {
                b.health.remove(&k);
            }
            let gone: Vec<BackendKey> = b
                .last_check
                .range((t.clone(), String::new(), String::new())..)
                .take_while(|(k, _)| &k.0 == t)
                .filter(|(k, _)| !wanted.contains(*k))
                .map(|(k, _)| k.clone())
                .collect();
            for k in gone {
                b.last_check.remove(&k);
            }
        }
        if !b.seen.is_empty() {
            b.seen
                .retain(|(_, k), _| !changed.contains(&k.0) || wanted.contains(k));
        }
        let started_ms = self.started_unix_ms;
        for k in wanted {
            let drain = self.desired.backend_drains.get(&k).copied();
            b.health.entry(k).or_insert_with(|| {
                let mut h = Health::new(None, now_ns);
                // A drain from before a restart resumes with what is left of
                // its delay (none: the backend is removed at once).
                if let Some(until_ms) = drain {
                    let until_ns = until_ms
                        .saturating_sub(started_ms)
                        .saturating_mul(1_000_000);
                    h.start_drain(now_ns, until_ns.saturating_sub(now_ns));
                }
                h
            });
        }
        let mut moves = Vec::new();
        for (t, (_, list)) in changed.iter().filter_map(|t| b.index.get_key_value(t)) {
            for c in list {
                let k = (t.clone(), c.middlebox.clone(), c.addr.clone());
                let Some(h) = b.health.get_mut(&k) else {
                    continue;
                };
                let params = c.check.as_ref().map(|(hc, _)| hc.params());
                if let Some(tr) = h.set_checks(params, now_ns) {
                    moves.push((k.clone(), tr, "its health check was removed".to_string()));
                }
                if params.is_none() {
                    b.seen.retain(|(_, s), _| *s != k);
                    b.last_check.remove(&k);
                }
            }
        }
        moves
    }

    /// Counts the results of the health checks `host`'s agent ran since its
    /// last heartbeat against each backend's thresholds, and commits the
    /// states that changed. A report for a backend whose VM is not on `host`
    /// (any more) is ignored.
    pub(super) fn backend_checks(
        &mut self,
        host: u32,
        reports: &[sluice_proto::BackendCheck],
        now: Instant,
    ) {
        if reports.is_empty() {
            return;
        }
        let now_ns = self.clock_ns(now);
        let mut moves = self.sync_backends(now_ns);
        for r in reports {
            let key = (r.tenant.clone(), r.middlebox.clone(), r.backend.clone());
            let on_host = self
                .backend_ip(&key)
                .and_then(|ip| vm_at(&self.desired, &key.0, ip))
                .is_some_and(|(_, h)| h == host);
            if !on_host {
                continue;
            }
            let b = &mut self.backends;
            let Some(h) = b.health.get_mut(&key) else {
                continue;
            };
            let Some(c) = h.checks() else {
                continue;
            };
            if let Some(last) = r.last {
                b.last_check.insert(
                    key.clone(),
                    format!("{}: {last} (ok {}, failed {})", r.target, r.ok, r.failed),
                );
            }
            let before = b.seen.insert((host, key.clone()), (r.ok, r.failed));
            // First report since this controller started (or since the
            // checks were configured): a baseline only, since what the
            // counters hold is from an unknown past.
            let Some((ok0, failed0)) = before else {
                continue;
            };
            // Counters that went back: the agent (or the check) started
            // over, so they count from zero.
            let (d_ok, d_failed) = if r.ok < ok0 || r.failed < failed0 {
                (r.ok, r.failed)
            } else {
                (r.ok - ok0, r.failed - failed0)
            };
            // Only the order inside one heartbeat is lost (50 ms apart,
            // checks 100 ms apart at least): the last result goes last. More
            // than a threshold's worth in a row changes nothing more.
            let cap = u64::from(c.rise.max(c.fall));
            let (d_ok, d_failed) = (d_ok.min(cap), d_failed.min(cap));
            let last_ok = r.last == Some(sluice_proto::CheckOutcome::Ok);
            let timed_out = r.last == Some(sluice_proto::CheckOutcome::Timeout);
            let runs = if last_ok {
                [(false, d_failed), (true, d_ok)]
            } else {
                [(true, d_ok), (false, d_failed)]
            };
            let why = match r.last {
                Some(l) => format!("{}: {l}", r.target),
                None => format!("{}: no result", r.target),
            };
            for (ok, n) in runs {
                for _ in 0..n {
                    if let Some(t) = h.record(now_ns, ok, timed_out) {
                        moves.push((key.clone(), t, why.clone()));
                    }
                }
            }
        }
        if !moves.is_empty() {
            self.commit_backends(moves, now);
        }
    }

    /// When each drain under way ends, Unix ms (what
    /// [`Desired::backend_drains`] keeps).
    fn backend_drain_ends(&self) -> BTreeMap<BackendKey, u64> {
        self.backends
            .health
            .iter()
            .filter_map(|(k, h)| {
                h.drain()
                    .map(|d| (k.clone(), self.started_unix_ms + d.until_ns / 1_000_000))
            })
            .collect()
    }

    fn backend_ip(&self, key: &BackendKey) -> Option<std::net::IpAddr> {
        self.backends
            .index
            .get(&key.0)?
            .1
            .iter()
            .find(|c| c.middlebox == key.1 && c.addr == key.2)
            .map(|c| c.ip)
    }

    /// The backends that are not up, per `(tenant, middlebox)`.
    fn backend_overrides(&self) -> BTreeMap<(String, String), Vec<BackendOverride>> {
        let mut out: BTreeMap<(String, String), Vec<BackendOverride>> = BTreeMap::new();
        for ((t, mb, addr), h) in &self.backends.health {
            if h.state() != BackendState::Up {
                out.entry((t.clone(), mb.clone()))
                    .or_default()
                    .push(BackendOverride {
                        addr: addr.clone(),
                        state: wire(h.state()),
                    });
            }
        }
        out
    }

    /// Commits the backends' states if they differ from what the instances
    /// have, and logs one `backend` event per transition in `moves`.
    fn commit_backends(&mut self, moves: Vec<(BackendKey, Transition, String)>, now: Instant) {
        let states = self.backend_overrides();
        let drains = self.backend_drain_ends();
        let mut pushed = BTreeMap::new();
        if states != self.desired.backend_states || drains != self.desired.backend_drains {
            let mut next = self.desired.clone();
            next.backend_states = states;
            next.backend_drains = drains;
            match self.commit(next, now) {
                Ok(p) => pushed = p,
                Err(e) => {
                    let e = event("error", format!("backend states not applied: {}", e.msg));
                    self.push_event(e, now);
                    return;
                }
            }
        }
        for ((t, mb, addr), tr, why) in moves {
            *self.backends.transitions.entry(tr.to.as_str()).or_default() += 1;
            let detail = if why.is_empty() {
                String::new()
            } else {
                format!(" ({why})")
            };
            let cause = match tr.cause {
                Cause::ChecksFailed { n, .. } => {
                    format!("{n} health checks failed in a row{detail}")
                }
                Cause::ChecksPassed { n: 0 } => why,
                Cause::ChecksPassed { n } => {
                    format!("{n} health checks passed in a row{detail}")
                }
                Cause::Passive(_) => why,
                Cause::Drained => "drained by an operator".to_string(),
                Cause::DelayPassed => "its deregistration delay passed".to_string(),
                Cause::Undrained => "undrained by an operator".to_string(),
            };
            let effect = match tr.to {
                BackendState::Up => "it takes new connections",
                BackendState::Down => "no new connections to it; its connections keep it",
                BackendState::Draining => {
                    "no new connections to it; its connections continue until the delay passes"
                }
                BackendState::Removed => {
                    "out of consideration: its remaining connections are dropped"
                }
            };
            let hosts = if pushed.is_empty() {
                String::new()
            } else {
                format!(" (hosts {:?} pushed)", pushed.keys().collect::<Vec<_>>())
            };
            let mut e = event(
                "backend",
                format!(
                    "{t}/{mb} backend {addr}: {} -> {}: {cause}; {effect}{hosts}",
                    tr.from, tr.to
                ),
            );
            e.host = self
                .backend_ip(&(t.clone(), mb.clone(), addr.clone()))
                .and_then(|ip| vm_at(&self.desired, &t, ip))
                .map(|(_, h)| h);
            e.tenant = Some(t);
            e.middlebox = Some(mb);
            self.push_event(e, now);
        }
    }

    /// The backends of `tenant`'s load balancer `mb` that `addr` names: its
    /// address as configured, or an IP naming every backend at it.
    fn matching_backends(
        &self,
        tenant: &str,
        mb: &str,
        addr: &str,
    ) -> Result<Vec<BackendKey>, ApiError> {
        let t = self
            .desired
            .tenants
            .get(tenant)
            .ok_or_else(|| ApiError::not_found(format!("tenant `{tenant}` is not applied")))?;
        match t.spec.elements.get(mb) {
            Some(Element::Middlebox { function, .. }) if function == "lb" => {}
            _ => {
                return Err(ApiError::not_found(format!(
                    "tenant `{tenant}` has no load balancer `{mb}`"
                )))
            }
        }
        let ip = addr.parse::<std::net::IpAddr>().ok();
        let keys: Vec<BackendKey> = lb_backends(&t.spec)
            .into_iter()
            .filter(|c| c.middlebox == mb && (c.addr == addr || Some(c.ip) == ip))
            .map(|c| (tenant.to_string(), mb.to_string(), c.addr))
            .collect();
        if keys.is_empty() {
            return Err(ApiError::not_found(format!(
                "load balancer `{tenant}/{mb}` has no backend `{addr}`"
            )));
        }
        Ok(keys)
    }

    /// An operator drains the backends `addr` names (see
    /// [`Reconciler::matching_backends`]) with a deregistration delay of
    /// `delay`: no new connections at once, removal after the delay.
    pub fn drain_backend(
        &mut self,
        tenant: &str,
        mb: &str,
        addr: &str,
        delay: Duration,
        now: Instant,
    ) -> Result<Vec<BackendInfo>, ApiError> {
        self.admin_backend(tenant, mb, addr, Some(delay), now)
    }

    /// An operator ends the drain of the backends `addr` names.
    pub fn undrain_backend(
        &mut self,
        tenant: &str,
        mb: &str,
        addr: &str,
        now: Instant,
    ) -> Result<Vec<BackendInfo>, ApiError> {
        self.admin_backend(tenant, mb, addr, None, now)
    }

    fn admin_backend(
        &mut self,
        tenant: &str,
        mb: &str,
        addr: &str,
        drain: Option<Duration>,
        now: Instant,
    ) -> Result<Vec<BackendInfo>, ApiError> {
        let keys = self.matching_backends(tenant, mb, addr)?;
        let now_ns = self.clock_ns(now);
        let mut moves = self.sync_backends(now_ns);
        for k in &keys {
            let Some(h) = self.backends.health.get_mut(k) else {
                continue;
            };
            let t = match drain {
                Some(d) => h.start_drain(now_ns, d.as_nanos().min(u64::MAX as u128) as u64),
                None => h.undrain(now_ns),
            };
            if let Some(t) = t {
                moves.push((k.clone(), t, String::new()));
            }
        }
        self.commit_backends(moves, now);
        Ok(self
            .backend_infos(Some(tenant), now)
            .into_iter()
            .filter(|b| b.middlebox == mb && keys.iter().any(|k| k.2 == b.backend))
            .collect())
    }

    /// Brings the backends in line with the specs now, as the next tick
    /// would: a listing right after an apply (which answers within
    /// milliseconds) shows the applied load balancers' backends.
    pub(crate) fn refresh_backends(&mut self, now: Instant) {
        self.check_backends(None, now);
    }

    /// Every backend's state (of `tenant` only, if given).
    pub fn backend_infos(&self, tenant: Option<&str>, now: Instant) -> Vec<BackendInfo> {
        let ms = |ns: u64| self.started_unix_ms + ns / 1_000_000;
        let _ = now;
        self.backends
            .health
            .iter()
            .filter(|(k, _)| tenant.is_none_or(|t| k.0 == t))
            .map(|(k, h)| {
                let vm = self
                    .backend_ip(k)
                    .and_then(|ip| vm_at(&self.desired, &k.0, ip));
                BackendInfo {
                    tenant: k.0.clone(),
                    middlebox: k.1.clone(),
                    backend: k.2.clone(),
                    state: h.state().as_str().to_string(),
                    since_ms: ms(h.since_ns()),
                    healthy: h.healthy(),
                    host_down: h.passive_down(),
                    vm: vm.as_ref().map(|(n, _)| n.clone()),
                    host: vm.map(|(_, h)| h),
                    drain_until_ms: h.drain().map(|d| ms(d.until_ns)),
                    last_check: self.backends.last_check.get(k).cloned(),
                }
            })
            .collect()
    }
}
