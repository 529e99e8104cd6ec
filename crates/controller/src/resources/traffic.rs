//! `GET /v1/traffic`: every chain drawn from its tenant's spec (the elements
//! of its path and mirrors, a middlebox with its instance counts and rates),
//! with its packet and drop rates over the last minutes ([`crate::traffic`]).
//! What the dashboard draws; a tenant's token sees its own chains.

use serde::{Deserialize, Serialize};
use sluice_tenant::Element;

use super::{json, Reply};
use crate::error::ApiError;
use crate::reconcile::Reconciler;
use crate::traffic::{Rates, Sample};

/// One chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChainTraffic {
    /// Tenant.
    pub tenant: String,
    /// Chain name.
    pub chain: String,
    /// Replies cross the chain in reverse.
    pub bidirectional: bool,
    /// The path's elements, in order.
    pub hops: Vec<Hop>,
    /// Middleboxes that get a copy.
    pub mirror: Vec<Hop>,
    /// Packets per second entering the chain at the latest sample.
    pub packets_per_s: f64,
    /// Packets per second its middleboxes dropped at the latest sample.
    pub drops_per_s: f64,
    /// Median time the chain added to its packets at the latest sample,
    /// seconds (none without packets delivered).
    pub latency_p50_s: Option<f64>,
    /// Their 99th percentile, seconds.
    pub latency_p99_s: Option<f64>,
    /// Samples, oldest first, one a second for up to five minutes (with
    /// `since_ms`, those after it).
    pub history: Vec<Sample>,
}

/// One element of a chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hop {
    /// Element name in the spec.
    pub name: String,
    /// `external`, `service`, `middlebox` or `select` (`unknown` for a name
    /// the spec lacks, which its validation refuses).
    pub kind: String,
    /// A middlebox's function.
    #[serde(default)]
    pub function: Option<String>,
    /// A middlebox's placed instances.
    #[serde(default)]
    pub instances: Option<u32>,
    /// Of those, how many are in their groups (not down, not draining).
    #[serde(default)]
    pub up: Option<u32>,
    /// A middlebox's rates, summed over its instances (a middlebox shared by
    /// chains shows its whole traffic in each).
    #[serde(default)]
    pub rates: Option<Rates>,
    /// A service's VMs.
    #[serde(default)]
    pub vms: Option<u32>,
}

/// The route's query: `since_ms=T` asks only for the samples taken after
/// Unix time T (ms), so a poller gets each sample once.
pub fn parse(query: &str) -> Result<TrafficQuery, ApiError> {
    let mut q = TrafficQuery::default();
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        match k {
            "since_ms" => {
                q.since_ms = Some(v.parse().map_err(|_| {
                    ApiError::bad(format!("since_ms: `{v}` is not a time (Unix milliseconds)"))
                })?)
            }
            _ => {
                return Err(ApiError::bad(format!(
                    "`{k}`: unknown query parameter (known: since_ms)"
                )))
            }
        }
    }
    Ok(q)
}

/// `GET /v1/traffic`'s query.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrafficQuery {
    /// Only samples taken after this Unix time (ms) in `history`.
    pub since_ms: Option<u64>,
}

/// Every chain of every tenant, tenants by name, chains in spec order.
pub fn view(r: &Reconciler, q: TrafficQuery) -> Vec<ChainTraffic> {
    let d = r.desired();
    let hop = |tenant: &str, name: &str| -> Hop {
        let mut h = Hop {
            name: name.to_string(),
            kind: String::new(),
            function: None,
            instances: None,
            up: None,
            rates: None,
            vms: None,
        };
        let el = d
            .tenants
            .get(tenant)
            .and_then(|t| t.spec.elements.get(name));
        h.kind = match el {
            Some(Element::External { .. }) => "external",
            Some(Element::Service { vms }) => {
                h.vms = Some(vms.len() as u32);
                "service"
            }
            Some(Element::Middlebox { function, .. }) => {
                h.function = Some(function.clone());
                let placed: Vec<_> = d
                    .instances
                    .keys()
                    .filter(|(t, mb, _)| t == tenant && mb == name)
                    .collect();
                h.instances = Some(placed.len() as u32);
                h.up = Some(
                    placed
                        .iter()
                        .filter(|k| !d.down.contains(**k) && !d.draining.contains(**k))
                        .count() as u32,
                );
                h.rates = Some(placed.iter().fold(Rates::default(), |acc, (t, mb, k)| {
                    acc.plus(&r.traffic.rates(&crate::desired::instance_name(t, mb, *k)))
                }));
                "middlebox"
            }
            Some(Element::Select(_)) => "select",
            None => "unknown",
        }
        .to_string();
        h
    };
    let mut out = Vec::new();
    for (name, t) in &d.tenants {
        for c in &t.spec.chains {
            let key = (name.clone(), c.name.clone());
            let history = r.traffic.history_since(&key, q.since_ms);
            let last = r.traffic.latest(&key);
            out.push(ChainTraffic {
                tenant: name.clone(),
                chain: c.name.clone(),
                bidirectional: c.bidirectional,
                hops: c.path.iter().map(|e| hop(name, e)).collect(),
                mirror: c.mirror.iter().map(|e| hop(name, e)).collect(),
                packets_per_s: last.map_or(0.0, |s| s.packets_per_s),
                drops_per_s: last.map_or(0.0, |s| s.drops_per_s),
                latency_p50_s: last.and_then(|s| s.latency_p50_s),
                latency_p99_s: last.and_then(|s| s.latency_p99_s),
                history,
            });
        }
    }
    out
}

/// The reply to `GET /v1/traffic`.
pub fn execute(r: &Reconciler, q: TrafficQuery) -> Result<Reply, ApiError> {
    json(200, &view(r, q))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_is_since_ms_or_nothing() {
        assert_eq!(parse(""), Ok(TrafficQuery::default()));
        assert_eq!(parse("since_ms=17").unwrap().since_ms, Some(17));
        let e = parse("tenant=acme").unwrap_err();
        assert_eq!(e.status, 400);
        assert!(e.msg.contains("`tenant`"), "{e}");
        let e = parse("since_ms=yesterday").unwrap_err();
        assert!(e.msg.contains("`yesterday`"), "{e}");
    }
}
