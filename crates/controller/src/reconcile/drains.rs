//! Drains and catch-ups of pinned middleboxes. A removed instance of a pinned
//! middlebox drains: it gets no new flows and is removed once no host has a
//! flow pinned to it (or its timeout passed). A new instance gets most new
//! flows until it holds its share of the pinned ones ([`caught_up`]). An
//! operator's drain of one instance (`instance_drains`) ends here too, in a
//! stop rather than a removal.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use sluice_switch::{HostId, Output, PortId};

use super::events::event;
use super::{Reconciler, CATCH_UP_TIMEOUT, DRAIN_TIMEOUT};
use crate::desired::{instance_name, InstanceKey};
use crate::error::ApiError;

/// A catching-up instance is done once it holds this fraction of its share of
/// the group's pinned flows.
const CATCH_UP_DONE: f64 = 0.9;

/// Whether a catching-up instance holding `mine` of `total` pinned flows over
/// `instances` serving ones has reached its share.
pub fn caught_up(mine: u64, total: u64, instances: usize) -> bool {
    let share = total as f64 / instances.max(1) as f64;
    mine as f64 >= CATCH_UP_DONE * share
}

impl Reconciler {
    /// Sets a middlebox's count and commits; logs the drains it starts (a
    /// drain's timeout is `drain_timeout_ms` if given, else [`DRAIN_TIMEOUT`]).
    pub(crate) fn scale_to(
        &mut self,
        tenant: &str,
        mb: &str,
        n: u64,
        drain_timeout_ms: Option<u64>,
        now: Instant,
    ) -> Result<std::collections::BTreeMap<u32, u64>, ApiError> {
        let mut next = self.desired.clone();
        next.scale(tenant, mb, n)?;
        let started: Vec<InstanceKey> = next
            .draining
            .difference(&self.desired.draining)
            .cloned()
            .collect();
        let pushed = self.commit(next, now)?;
        for k in started {
            if let Some(ms) = drain_timeout_ms {
                self.drain_timeouts
                    .insert(k.clone(), Duration::from_millis(ms));
            }
            let name = instance_name(&k.0, &k.1, k.2);
            let e = super::events::instance_event(
                "drain",
                &k,
                format!("{name} draining: no new flows; removed once no flow is pinned to it"),
            );
            self.push_event(e, now);
        }
        Ok(pushed)
    }

    /// The (host, vni, target) triples whose pinned flows keep a draining
    /// instance.
    fn drain_pairs(&self, key: &InstanceKey) -> Vec<(u32, u32, Output)> {
        let (Some(inst), Some(t)) = (
            self.desired.instances.get(key),
            self.desired.tenants.get(&key.0),
        ) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (h, cfg) in &self.configs {
            let o = if *h == inst.host {
                Output::Port(PortId(inst.port))
            } else {
                Output::Host(HostId(inst.host))
            };
            if cfg
                .group_policies
                .iter()
                .any(|gp| gp.vni == t.vni && gp.draining.contains(&o))
            {
                out.push((*h, t.vni, o));
            }
        }
        out
    }

    /// Ends drains whose pinned flows are gone or whose timeout passed (an
    /// operator's drain: its delay, and it also waits for every host of the
    /// tenant to run the current configuration); returns the hosts to ask
    /// for their pinned flows.
    pub(super) fn check_drains(&mut self, now: Instant) -> BTreeSet<u32> {
        for k in self.desired.draining.clone() {
            if !self.drains.contains_key(&k) {
                let timeout = match self.desired.instance_drains.get(&k) {
                    // An operator's drain ends with its delay, wherever the
                    // controller (re)started: what is left of it.
                    Some(until) => Duration::from_millis(until.saturating_sub(self.unix_ms(now))),
                    None => self.drain_timeouts.remove(&k).unwrap_or(DRAIN_TIMEOUT),
                };
                self.drains.insert(k, (now, timeout));
            }
        }
        let draining = self.desired.draining.clone();
        self.drains.retain(|k, _| draining.contains(k));
        let mut finished = Vec::new();
        let mut polls = BTreeSet::new();
        for (k, (started, timeout)) in &self.drains {
            if now.saturating_duration_since(*started) >= *timeout {
                let why = if self.desired.instance_drains.contains_key(k) {
                    "its drain's delay passed with flows possibly still on it".to_string()
                } else {
                    format!(
                        "drain timeout of {} ms passed with flows possibly still pinned",
                        timeout.as_millis()
                    )
                };
                finished.push((k.clone(), why));
                continue;
            }
            let mut clear = true;
            let pairs = self.drain_pairs(k);
            let pinned = !pairs.is_empty();
            for (h, vni, o) in pairs {
                let want = self.configs.get(&h).map_or(0, |c| c.version);
                let zero = match self.pinned.get(&h) {
                    Some((v, flows, at)) if *v >= want && *at >= *started => !flows
                        .iter()
                        .any(|f| f.vni == vni && f.target == o && f.flows > 0),
                    _ => false,
                };
                if !zero {
                    clear = false;
                    polls.insert(h);
                }
            }
            // An operator's drain also waits for every host of the tenant
            // to run the configuration without it (a shared-state middlebox
            // pins nothing: its flows move, with their state in the store,
            // once the hosts have the new split).
            // (A cached group's lease gate holds the stop back with the new
            // split: the interim configuration it pushes keeps the process.)
            let operator = self.desired.instance_drains.contains_key(k);
            if clear && operator && !self.tenant_hosts_current(&k.0) {
                clear = false;
            }
            if clear {
                let why = if pinned || !operator {
                    "no flow is pinned to it any more"
                } else {
                    "every host of its tenant runs the configuration that sends it no flow"
                };
                finished.push((k.clone(), why.to_string()));
            }
        }
        if !finished.is_empty() {
            let mut next = self.desired.clone();
            let mut stops = BTreeSet::new();
            for (k, _) in &finished {
                // An operator's drain of an instance its middlebox still
                // counts ends in a stop; one scaled away is removed.
                let counted = next.count(&k.0, &k.1).is_some_and(|n| k.2 < n);
                if counted && next.stop_drained(k) {
                    stops.insert(k.clone());
                } else {
                    next.finish_drain(k);
                }
            }
            match self.commit(next, now) {
                Ok(_) => {
                    for (k, why) in finished {
                        self.drains.remove(&k);
                        self.down_reason.remove(&k);
                        let name = instance_name(&k.0, &k.1, k.2);
                        let reason = if stops.contains(&k) {
                            format!(
                                "{name} stopped after draining: {why}; it keeps its place and \
                                 runs no process until undrained"
                            )
                        } else {
                            format!("{name} removed after draining: {why}")
                        };
                        let e = super::events::instance_event("drain", &k, reason);
                        self.push_event(e, now);
                    }
                }
                Err(e) => {
                    let e = event("error", format!("drain end not applied: {}", e.msg));
                    self.push_event(e, now);
                }
            }
        }
        polls
    }

    /// Whether every host whose configuration carries `tenant` reported
    /// running its current version.
    fn tenant_hosts_current(&self, tenant: &str) -> bool {
        self.configs
            .iter()
            .filter(|(_, c)| c.tenants.iter().any(|t| t.tenant == tenant))
            .all(|(h, c)| {
                self.live
                    .get(h)
                    .and_then(|l| l.reported)
                    .is_some_and(|v| v >= c.version)
            })
    }

    /// Flows pinned to the instance `key` on its own host (where every flow it
    /// serves is pinned to its port), if that host reported since `since` with a
    /// configuration at least as new as the one pushed to it.
    fn pinned_on_own_host(&self, key: &InstanceKey, since: Instant) -> Option<u64> {
        let inst = self.desired.instances.get(key)?;
        let vni = self.desired.tenants.get(&key.0)?.vni;
        let want = self.configs.get(&inst.host).map_or(0, |c| c.version);
        let (v, flows, at) = self.pinned.get(&inst.host)?;
        if *v < want || *at < since {
            return None;
        }
        let o = Output::Port(PortId(inst.port));
        Some(
            flows
                .iter()
                .filter(|f| f.vni == vni && f.target == o)
                .map(|f| f.flows)
                .sum(),
        )
    }

    /// Ends the catch-up of new instances of pinned middleboxes that hold their
    /// share of pinned flows (or ran out of time); returns the hosts to ask for
    /// their pinned flows.
    pub(super) fn check_catch_ups(&mut self, now: Instant) -> BTreeSet<u32> {
        let catching = self.desired.catching_up.clone();
        self.catch_ups.retain(|k, _| catching.contains(k));
        let mut finished = Vec::new();
        let mut polls = BTreeSet::new();
        for k in &catching {
            let started = match self.catch_ups.get(k) {
                Some(t) => *t,
                None => {
                    self.catch_ups.insert(k.clone(), now);
                    let name = instance_name(&k.0, &k.1, k.2);
                    let e = super::events::instance_event(
                        "catch-up",
                        k,
                        format!(
                            "{name} gets {:.0}% of new flows until it holds its share of pinned flows",
                            crate::desired::CATCH_UP_SHARE * 100.0
                        ),
                    );
                    self.push_event(e, now);
                    now
                }
            };
            if now.saturating_duration_since(started) >= CATCH_UP_TIMEOUT {
                finished.push((
                    k.clone(),
                    format!(
                        "{} s passed (flows pinned elsewhere last long)",
                        CATCH_UP_TIMEOUT.as_secs()
                    ),
                ));
                continue;
            }
            let serving: Vec<InstanceKey> = self
                .desired
                .instances
                .keys()
                .filter(|j| j.0 == k.0 && j.1 == k.1)
                .filter(|j| !self.desired.draining.contains(*j) && !self.desired.down.contains(*j))
                .cloned()
                .collect();
            let mut counts = Vec::new();
            for j in &serving {
                match self.pinned_on_own_host(j, started) {
                    Some(n) => counts.push((j == k, n)),
                    None => {
                        if let Some(i) = self.desired.instances.get(j) {
                            polls.insert(i.host);
                        }
                    }
                }
            }
            if counts.len() < serving.len() {
                continue;
            }
            let mine: u64 = counts.iter().filter(|c| c.0).map(|c| c.1).sum();
            let total: u64 = counts.iter().map(|c| c.1).sum();
            if caught_up(mine, total, serving.len()) {
                finished.push((
                    k.clone(),
                    format!(
                        "it holds {mine} of {total} pinned flows over {} instances",
                        serving.len()
                    ),
                ));
            } else {
                for j in &serving {
                    if let Some(i) = self.desired.instances.get(j) {
                        polls.insert(i.host);
                    }
                }
            }
        }
        if !finished.is_empty() {
            let mut next = self.desired.clone();
            for (k, _) in &finished {
                next.end_catch_up(k);
            }
            match self.commit(next, now) {
                Ok(_) => {
                    for (k, why) in finished {
                        self.catch_ups.remove(&k);
                        let name = instance_name(&k.0, &k.1, k.2);
                        let e = super::events::instance_event(
                            "catch-up",
                            &k,
                            format!("{name} caught up, its group back to the target split: {why}"),
                        );
                        self.push_event(e, now);
                    }
                }
                Err(e) => {
                    let e = event("error", format!("catch-up end not applied: {}", e.msg));
                    self.push_event(e, now);
                }
            }
        }
        polls
    }
}
