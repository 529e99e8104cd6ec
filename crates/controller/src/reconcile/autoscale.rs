//! Autoscaling: each chain may have a Stratos greedy scaler (`crates/scaling`),
//! fed either samples a tenant reports (`POST .../metrics`) or what the agents
//! measure of the chain (handshake time, connections/s, Mbit/s), sampled every
//! `metric_interval_ms`. Its decisions add or remove instances through the same
//! commit as every other change.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use sluice_scaling::{Decision, Scaler};

use super::events::event;
use super::Reconciler;
use crate::desired::{instance_name, Desired, InstanceKey};
use crate::error::ApiError;
use crate::measure::{chain_totals, AgentMetric, ChainSampler, Totals};
use crate::model::{
    Deleted, MeasuredSample, MetricSample, ScalingAck, ScalingConfig, ScalingInfo, ScalingRequest,
};

/// A chain whose scaler follows an agent metric.
pub(crate) struct AgentSampler {
    sampler: ChainSampler,
    last: Instant,
    pub(crate) latest: Option<MeasuredSample>,
}

/// The scaler of one chain, with its bookkeeping.
pub(crate) struct ChainScaler {
    scaler: Scaler,
    pub(crate) middleboxes: Vec<String>,
    /// Scaler events already copied to the event log.
    seen: usize,
    /// Last time fed, ns (the scaler must never see time go back).
    last_ns: u64,
}

/// The middleboxes of a tenant's chain, in order.
pub(crate) fn chain_middleboxes(
    d: &Desired,
    tenant: &str,
    chain: &str,
) -> Result<Vec<String>, ApiError> {
    let t = d
        .tenants
        .get(tenant)
        .ok_or_else(|| ApiError::not_found(format!("tenant `{tenant}` is not applied")))?;
    let c = t
        .spec
        .chains
        .iter()
        .find(|c| c.name == chain)
        .ok_or_else(|| ApiError::not_found(format!("tenant `{tenant}` has no chain `{chain}`")))?;
    Ok(c.middleboxes(&t.spec).map(str::to_string).collect())
}

fn counts_of(d: &Desired, tenant: &str, mbs: &[String]) -> BTreeMap<String, u32> {
    mbs.iter()
        .map(|m| (m.clone(), d.count(tenant, m).unwrap_or(0)))
        .collect()
}

fn key(tenant: &str, chain: &str) -> (String, String) {
    (tenant.to_string(), chain.to_string())
}

impl Reconciler {
    /// Feeds the scalers that follow an agent metric: every
    /// `metric_interval_ms`, the agents' counters of the chain since the last
    /// sample.
    pub(super) fn sample_agent_metrics(&mut self, now: Instant) {
        let wanted: Vec<((String, String), AgentMetric, u64)> = self
            .desired
            .scaling
            .iter()
            .filter_map(|(k, c)| {
                let m = AgentMetric::parse(&c.metric).ok()??;
                Some((k.clone(), m, c.metric_interval_ms.max(1)))
            })
            .collect();
        self.samplers
            .retain(|k, _| wanted.iter().any(|(w, _, _)| w == k));
        for ((tenant, chain), metric, every) in wanted {
            let k = key(&tenant, &chain);
            let Some(t) = self.desired.tenants.get(&tenant) else {
                continue;
            };
            let Some(index) = t.spec.chains.iter().position(|c| c.name == chain) else {
                continue;
            };
            let vni = t.vni;
            let due = self.samplers.get(&k).is_none_or(|s| {
                now.saturating_duration_since(s.last) >= Duration::from_millis(every)
            });
            if !due {
                continue;
            }
            let totals: BTreeMap<u32, Totals> = self
                .chain_reports
                .iter()
                .map(|(h, r)| (*h, chain_totals(r, vni, index)))
                .collect();
            let at_ms = self.unix_ms(now);
            let s = self.samplers.entry(k).or_insert(AgentSampler {
                sampler: ChainSampler::default(),
                last: now,
                latest: None,
            });
            let interval_ms = now.saturating_duration_since(s.last).as_millis() as u64;
            s.last = now;
            let Some(m) = s.sampler.sample(&totals, interval_ms) else {
                continue;
            };
            let value = m.value(metric);
            s.latest = Some(MeasuredSample {
                at_ms,
                value,
                sample: m,
            });
            let Some(v) = value else {
                continue;
            };
            let clock = self.clock_ns(now);
            let decisions = match self.scaler_of(&tenant, &chain, now) {
                Ok(Some(cs)) => {
                    let ns = clock.max(cs.last_ns);
                    cs.last_ns = ns;
                    cs.scaler.observe(ns, v)
                }
                Ok(None) => continue,
                Err(e) => {
                    let e = event("error", format!("scaler of {tenant}/{chain}: {}", e.msg));
                    self.push_event(e, now);
                    continue;
                }
            };
            self.run_decisions(&tenant, &chain, &decisions, now);
        }
    }

    /// The chain's scaler, (re)built if the chain's middleboxes or their counts
    /// changed outside it; None if no scaler is configured.
    fn scaler_of(
        &mut self,
        tenant: &str,
        chain: &str,
        now: Instant,
    ) -> Result<Option<&mut ChainScaler>, ApiError> {
        let k = key(tenant, chain);
        let mbs = chain_middleboxes(&self.desired, tenant, chain)?;
        let Some(cfg) = self.desired.scaling.get(&k).cloned() else {
            self.scalers.remove(&k);
            return Ok(None);
        };
        let counts = counts_of(&self.desired, tenant, &mbs);
        let rebuild = self
            .scalers
            .get(&k)
            .is_none_or(|s| s.middleboxes != mbs || s.scaler.counts() != &counts);
        if rebuild {
            let config = cfg.to_config().map_err(ApiError::bad)?;
            let list: Vec<(String, u32)> = mbs.iter().map(|m| (m.clone(), counts[m])).collect();
            let scaler = Scaler::new(config, &list)
                .map_err(|e| ApiError::conflict(format!("scaler of {tenant}/{chain}: {e}")))?;
            let old = self.scalers.remove(&k);
            if old.is_some() {
                let mut e = event(
                    "scaler",
                    format!(
                        "scaler of {tenant}/{chain} restarted: instance counts {counts:?} changed outside it"
                    ),
                );
                e.tenant = Some(tenant.to_string());
                e.chain = Some(chain.to_string());
                self.push_event(e, now);
            }
            self.scalers.insert(
                k.clone(),
                ChainScaler {
                    scaler,
                    middleboxes: mbs,
                    seen: 0,
                    last_ns: old.map_or(0, |o| o.last_ns),
                },
            );
        }
        Ok(self.scalers.get_mut(&k))
    }

    /// Copies the scaler's new log lines to the event log and carries out its
    /// decisions (one commit); returns what was done (`add fw`, `remove ips`).
    fn run_decisions(
        &mut self,
        tenant: &str,
        chain: &str,
        decisions: &[Decision],
        now: Instant,
    ) -> Vec<String> {
        let k = key(tenant, chain);
        let mut last_why = String::new();
        let mut new = Vec::new();
        if let Some(cs) = self.scalers.get_mut(&k) {
            new = cs.scaler.events()[cs.seen..].to_vec();
            cs.seen = cs.scaler.events().len();
        }
        for se in new {
            last_why = se.what.clone();
            let mut e = event("scaler", se.what);
            e.tenant = Some(tenant.to_string());
            e.chain = Some(chain.to_string());
            e.counts = Some(se.counts);
            self.push_event(e, now);
        }
        if decisions.is_empty() {
            return Vec::new();
        }
        let mut next = self.desired.clone();
        let mut done = Vec::new();
        for d in decisions {
            let (mb, up) = match d {
                Decision::Add(m) => (m, true),
                Decision::Remove(m) => (m, false),
            };
            let n = next.count(tenant, mb).unwrap_or(0) as u64;
            let n = if up { n + 1 } else { n.saturating_sub(1) };
            if let Err(e) = next.scale(tenant, mb, n) {
                let e = event(
                    "error",
                    format!("scaler decision {d:?} for {tenant}/{chain} not carried out: {e}"),
                );
                self.push_event(e, now);
                return Vec::new();
            }
            done.push((mb.clone(), up, n));
        }
        let started: Vec<InstanceKey> = next
            .draining
            .difference(&self.desired.draining)
            .cloned()
            .collect();
        if let Err(e) = self.commit(next, now) {
            let e = event(
                "error",
                format!(
                    "scaler decisions for {tenant}/{chain} not carried out: {}",
                    e.msg
                ),
            );
            self.push_event(e, now);
            return Vec::new();
        }
        for k in started {
            let name = instance_name(&k.0, &k.1, k.2);
            let e = super::events::instance_event("drain", &k, format!("{name} draining (scaler)"));
            self.push_event(e, now);
        }
        let mut out = Vec::new();
        for (mb, up, n) in done {
            let what = format!("{} {mb}", if up { "add" } else { "remove" });
            let mut e = event(
                "scale",
                format!(
                    "{tenant}/{mb}: {what} -> {n} instances (scaler of chain {chain}: {last_why})"
                ),
            );
            e.tenant = Some(tenant.to_string());
            e.chain = Some(chain.to_string());
            e.middlebox = Some(mb.clone());
            self.push_event(e, now);
            out.push(what);
        }
        out
    }

    fn scaling_ack(&self, tenant: &str, chain: &str, decisions: Vec<String>) -> ScalingAck {
        let k = key(tenant, chain);
        let mbs = self
            .scalers
            .get(&k)
            .map(|s| s.middleboxes.clone())
            .or_else(|| chain_middleboxes(&self.desired, tenant, chain).ok())
            .unwrap_or_default();
        ScalingAck {
            tenant: tenant.to_string(),
            chain: chain.to_string(),
            decisions,
            counts: counts_of(&self.desired, tenant, &mbs),
            scaling: self.scalers.get(&k).is_some_and(|s| s.scaler.scaling()),
            enabled: self.desired.scaling.contains_key(&k),
        }
    }

    /// Feeds a chain's scaler a reported sample (`POST .../metrics`).
    pub fn post_metric(
        &mut self,
        tenant: &str,
        chain: &str,
        m: MetricSample,
        now: Instant,
    ) -> Result<ScalingAck, ApiError> {
        let clock = self.clock_ns(now);
        if let Some(c) = self.desired.scaling.get(&key(tenant, chain)) {
            if c.metric != "reported" {
                return Err(ApiError::conflict(format!(
                    "the scaler of {tenant}/{chain} follows `{}`, which the agents measure; \
                     set `metric: reported` to feed it samples",
                    c.metric
                )));
            }
        }
        let Some(cs) = self.scaler_of(tenant, chain, now)? else {
            return Ok(self.scaling_ack(tenant, chain, Vec::new()));
        };
        let ns = m
            .at_ms
            .map_or(clock, |ms| ms.saturating_mul(1_000_000))
            .max(cs.last_ns);
        cs.last_ns = ns;
        let decisions = cs.scaler.observe(ns, m.value);
        let done = self.run_decisions(tenant, chain, &decisions, now);
        Ok(self.scaling_ack(tenant, chain, done))
    }

    /// Asks a chain's scaler to scale up or down now.
    pub fn scaling_request(
        &mut self,
        tenant: &str,
        chain: &str,
        r: ScalingRequest,
        now: Instant,
    ) -> Result<ScalingAck, ApiError> {
        let clock = self.clock_ns(now);
        let Some(cs) = self.scaler_of(tenant, chain, now)? else {
            return Err(ApiError::not_found(format!(
                "no scaler is configured for chain `{chain}` of tenant `{tenant}` (PUT one first)"
            )));
        };
        // On the chain's own clock: the last sample's time if samples carry theirs.
        let ns = cs.last_ns.max(clock);
        cs.last_ns = ns;
        let reason = if r.reason.is_empty() {
            format!("requested ({})", if r.up { "up" } else { "down" })
        } else {
            r.reason
        };
        let decisions = cs.scaler.request(ns, r.up, &reason);
        let done = self.run_decisions(tenant, chain, &decisions, now);
        Ok(self.scaling_ack(tenant, chain, done))
    }

    /// A chain's scaler: its configuration, counts and latest measured sample.
    pub fn scaling_info(&self, tenant: &str, chain: &str) -> Result<ScalingInfo, ApiError> {
        let k = key(tenant, chain);
        let mbs = chain_middleboxes(&self.desired, tenant, chain)?;
        let config = self.desired.scaling.get(&k).cloned().ok_or_else(|| {
            ApiError::not_found(format!(
                "no scaler is configured for chain `{chain}` of tenant `{tenant}` (PUT one first)"
            ))
        })?;
        Ok(ScalingInfo {
            tenant: tenant.to_string(),
            chain: chain.to_string(),
            config,
            counts: counts_of(&self.desired, tenant, &mbs),
            middleboxes: mbs,
            scaling: self.scalers.get(&k).is_some_and(|s| s.scaler.scaling()),
            measured: self.samplers.get(&k).and_then(|s| s.latest.clone()),
        })
    }

    /// Sets (or replaces) a chain's scaler.
    pub fn put_scaling(
        &mut self,
        tenant: &str,
        chain: &str,
        cfg: ScalingConfig,
        now: Instant,
    ) -> Result<ScalingInfo, ApiError> {
        let config = cfg.to_config().map_err(ApiError::bad)?;
        let mbs = chain_middleboxes(&self.desired, tenant, chain)?;
        let counts = counts_of(&self.desired, tenant, &mbs);
        let list: Vec<(String, u32)> = mbs.iter().map(|m| (m.clone(), counts[m])).collect();
        // Built once here so a bad configuration is refused now.
        let scaler = Scaler::new(config, &list).map_err(|e| ApiError::bad(e.to_string()))?;
        let k = key(tenant, chain);
        let mut next = self.desired.clone();
        next.scaling.insert(k.clone(), cfg.clone());
        self.commit(next, now)?;
        self.scalers.insert(
            k,
            ChainScaler {
                scaler,
                middleboxes: mbs.clone(),
                seen: 0,
                last_ns: 0,
            },
        );
        let mut e = event(
            "scaler",
            format!(
                "scaler of {tenant}/{chain} set: strategy {}, budget {}, middleboxes {mbs:?}",
                cfg.strategy, cfg.budget
            ),
        );
        e.tenant = Some(tenant.to_string());
        e.chain = Some(chain.to_string());
        e.counts = Some(counts);
        self.push_event(e, now);
        self.scaling_info(tenant, chain)
    }

    /// Removes a chain's scaler.
    pub fn delete_scaling(
        &mut self,
        tenant: &str,
        chain: &str,
        now: Instant,
    ) -> Result<Deleted, ApiError> {
        chain_middleboxes(&self.desired, tenant, chain)?;
        let k = key(tenant, chain);
        let mut next = self.desired.clone();
        if next.scaling.remove(&k).is_none() {
            return Err(ApiError::not_found(format!(
                "no scaler is configured for chain `{chain}` of tenant `{tenant}`"
            )));
        }
        let pushed = self.commit(next, now)?;
        self.scalers.remove(&k);
        let mut e = event("scaler", format!("scaler of {tenant}/{chain} removed"));
        e.tenant = Some(tenant.to_string());
        e.chain = Some(chain.to_string());
        self.push_event(e, now);
        Ok(Deleted {
            deleted: format!("scaler {tenant}/{chain}"),
            pushed,
            dry_run: false,
            plan: None,
        })
    }
}
