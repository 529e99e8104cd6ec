//! Network-aware distribution in the running controller
//! ([`crate::distribution`]): every [`REDISTRIBUTE_EVERY`] the agents'
//! cumulative chain counters become bytes per second entering each chain from
//! each rack, each tenant's split is solved again, and a better one (by
//! [`crate::distribution::MIN_GAIN`], or one that fits instances whose racks
//! changed) replaces the installed shares, with a `distribution` event saying
//! what the uplinks were predicted to carry before and after.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::distribution::{self, ChainRates, Distribution, Inputs};

use super::{event, Reconciler};

/// How often the splits are solved again.
pub const REDISTRIBUTE_EVERY: Duration = Duration::from_secs(5);

/// Byte counters as last sampled, and when.
#[derive(Debug, Default)]
pub(crate) struct Sampler {
    last: Option<Instant>,
    /// `(host, vni, chain id)` -> bytes.
    bytes: BTreeMap<(u32, u32, u16), u64>,
}

/// A tenant's decision, for `sluice get distribution` and the metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantDistribution {
    /// Racks in layout order.
    pub racks: Vec<String>,
    /// Worst uplink utilisation predicted for the installed shares (a
    /// fraction of the declared capacity; relative when none is declared).
    pub predicted_worst: f64,
    /// The same for even shares.
    pub even_worst: f64,
    /// Predicted traffic out of and into each rack, bytes per second.
    pub uplink: Vec<(f64, f64)>,
    /// The part of the hash space the installed shares keep away from even
    /// (averaged over middleboxes).
    pub imbalance: f64,
    /// The uplinks' target utilisation, when capacities are declared.
    pub target: Option<f64>,
}

impl Reconciler {
    /// Solves the splits again when due (see the module docs).
    pub(super) fn check_distribution(&mut self, now: Instant) {
        if self.desired.distribution != Distribution::NetworkAware {
            return;
        }
        if self
            .dist
            .last
            .is_some_and(|t| now.saturating_duration_since(t) < REDISTRIBUTE_EVERY)
        {
            return;
        }
        let elapsed = self
            .dist
            .last
            .map(|t| now.saturating_duration_since(t).as_secs_f64());
        self.dist.last = Some(now);
        // Bytes per second per (vni, chain id, rack) since the last sample.
        let mut rates: BTreeMap<(u32, u16), BTreeMap<String, f64>> = BTreeMap::new();
        let mut seen = BTreeMap::new();
        for (host, reports) in &self.chain_reports {
            for m in reports {
                let key = (*host, m.vni, m.chain);
                let before = self.dist.bytes.get(&key).copied();
                seen.insert(key, m.bytes);
                let (Some(secs), Some(before)) = (elapsed, before) else {
                    continue;
                };
                // A counter that went down restarted: all of it is new.
                let delta = if m.bytes >= before {
                    m.bytes - before
                } else {
                    m.bytes
                };
                if secs > 0.0 && delta > 0 {
                    *rates
                        .entry((m.vni, m.chain))
                        .or_default()
                        .entry(self.desired.rack_of(*host).to_string())
                        .or_default() += delta as f64 / secs;
                }
            }
        }
        self.dist.bytes = seen;
        let mut next = None;
        let mut events = Vec::new();
        let mut decided = BTreeMap::new();
        let uplinks = self.uplink_capacities();
        let declared = !uplinks.is_empty();
        for (name, t) in &self.desired.tenants {
            let inputs = self.distribution_inputs(name, &rates, &uplinks);
            let plan = match distribution::plan(&t.spec, &inputs) {
                Ok(Some(p)) => p,
                Ok(None) => continue,
                Err(e) => {
                    let mut ev = event(
                        "error",
                        format!("distribution of tenant {name} not solved: {e}"),
                    );
                    ev.tenant = Some(name.clone());
                    events.push(ev);
                    continue;
                }
            };
            let installed: BTreeMap<String, BTreeMap<String, u32>> = self
                .desired
                .shares
                .iter()
                .filter(|((tn, _), _)| tn == name)
                .map(|((_, mb), v)| (mb.clone(), v.clone()))
                .collect();
            let installed_classes: BTreeMap<(String, String), BTreeMap<String, u32>> = self
                .desired
                .class_shares
                .iter()
                .filter(|((tn, _, _), _)| tn == name)
                .map(|((_, mb, c), v)| ((mb.clone(), c.clone()), v.clone()))
                .collect();
            let current =
                distribution::evaluate_installed(&t.spec, &inputs, &installed, &installed_classes);
            let adopt = distribution::adopt(current.as_ref(), &plan);
            let shown = if adopt {
                &plan.predicted
            } else {
                current.as_ref().unwrap_or(&plan.predicted)
            };
            decided.insert(
                name.clone(),
                TenantDistribution {
                    racks: plan.racks.clone(),
                    predicted_worst: shown.worst,
                    even_worst: plan.even.worst,
                    uplink: shown.uplink.clone(),
                    imbalance: shown.imbalance,
                    target: declared.then_some(self.uplink_target),
                },
            );
            if !adopt {
                continue;
            }
            let n = next.get_or_insert_with(|| self.desired.clone());
            n.shares.retain(|(tn, _), _| tn != name);
            for (mb, ppm) in plan.ppm() {
                n.shares.insert((name.clone(), mb), ppm);
            }
            n.class_shares.retain(|(tn, _, _), _| tn != name);
            for ((mb, class), ppm) in plan.class_ppm() {
                n.class_shares.insert((name.clone(), mb, class), ppm);
            }
            let target = if declared {
                format!(", target {:.0}%", self.uplink_target * 100.0)
            } else {
                String::new()
            };
            let basis = if inputs.rates.is_empty() {
                "; nothing measured yet: the VMs' racks stand in for the traffic"
            } else {
                ""
            };
            let mut ev = event(
                "distribution",
                format!(
                    "shares per rack ({}) now {}{}; worst uplink load predicted {} (was {}, even shares {}{target}){basis}",
                    plan.racks.join(", "),
                    plan.shares
                        .iter()
                        .map(|(mb, row)| format!(
                            "{mb} [{}]",
                            row.iter().map(|s| format!("{:.0}%", s * 100.0)).collect::<Vec<_>>().join(" ")
                        ))
                        .collect::<Vec<_>>()
                        .join(", "),
                    fmt_classes(&plan),
                    fmt_load(plan.predicted.worst, declared),
                    current
                        .as_ref()
                        .map_or("none installed".to_string(), |c| fmt_load(c.worst, declared)),
                    fmt_load(plan.even.worst, declared),
                ),
            );
            ev.tenant = Some(name.clone());
            events.push(ev);
        }
        self.distributions = decided;
        for e in events {
            self.push_event(e, now);
        }
        if let Some(next) = next {
            if let Err(e) = self.commit(next, now) {
                self.push_event(
                    event("error", format!("new distribution not committed: {e}")),
                    now,
                );
            }
        }
    }

    /// What tenant `name`'s split is computed from.
    fn distribution_inputs(
        &self,
        name: &str,
        rates: &BTreeMap<(u32, u16), BTreeMap<String, f64>>,
        uplinks: &BTreeMap<String, f64>,
    ) -> Inputs {
        let d = &self.desired;
        let t = &d.tenants[name];
        let mut inputs = Inputs {
            uplinks: uplinks.clone(),
            target: self.uplink_target,
            classes: self.distribution_classes,
            ..Inputs::default()
        };
        for (k, i) in &d.instances {
            if k.0 != name
                || d.down.contains(k)
                || d.draining.contains(k)
                || d.instance_drains.contains_key(k)
            {
                continue;
            }
            inputs
                .instances
                .entry(k.1.clone())
                .or_default()
                .push(d.rack_of(i.host).to_string());
        }
        for ((tn, vm), v) in &d.vms {
            if tn != name {
                continue;
            }
            inputs
                .vms
                .insert(vm.clone(), d.rack_of(v.reg.host).to_string());
            if v.reg.gateway {
                inputs.gateway = Some(d.rack_of(v.reg.host).to_string());
            }
        }
        for i in 0..t.spec.chains.len() {
            let id = |dir: usize| (t.vni, (2 * i + dir) as u16);
            let r = ChainRates {
                forward: rates.get(&id(0)).cloned().unwrap_or_default(),
                reverse: rates.get(&id(1)).cloned().unwrap_or_default(),
            };
            if !r.forward.is_empty() || !r.reverse.is_empty() {
                inputs.rates.insert(i, r);
            }
        }
        inputs
    }

    /// Declares the rack uplinks' capacities, bytes per second (the
    /// controller's `--rack-uplink RACK=MBIT`).
    pub fn set_uplinks(&mut self, uplinks: BTreeMap<String, f64>) {
        self.uplinks = uplinks;
    }

    /// Sets the utilisation of a declared uplink below which it is no
    /// bottleneck (the controller's `--uplink-target`).
    pub fn set_uplink_target(&mut self, target: f64) {
        self.uplink_target = target;
    }

    /// Whether flows to servers in several racks are split by their
    /// server's rack (the controller's `--distribution-classes`).
    pub fn set_distribution_classes(&mut self, on: bool) {
        self.distribution_classes = on;
    }

    /// Each tenant's last distribution decision (network-aware only).
    pub fn distributions(&self) -> &BTreeMap<String, TenantDistribution> {
        &self.distributions
    }

    /// What each rack's uplink carried, measured from the agents' per-peer
    /// fabric counters ([`crate::uplinks`]; empty with fewer than two racks).
    pub fn measured_uplinks(&self) -> &BTreeMap<String, crate::uplinks::Uplink> {
        self.uplink_meter.uplinks()
    }

    /// The declared rack uplink capacities, bytes per second: the
    /// controller's `rack_uplink` for the racks it names, and for the others
    /// the largest capacity a host of the rack declared at registration
    /// (`HostCapacity::rack_uplink_mbit`: the operator's word over a host's).
    pub fn uplink_capacities(&self) -> BTreeMap<String, f64> {
        let mut out: BTreeMap<String, f64> = BTreeMap::new();
        for h in self.desired.hosts.values() {
            let Some(c) = &h.capacity else { continue };
            let (Some(rack), Some(mbit)) = (&c.rack, c.rack_uplink_mbit) else {
                continue;
            };
            let bytes = mbit as f64 * 1e6 / 8.0;
            let e = out.entry(rack.clone()).or_insert(bytes);
            *e = e.max(bytes);
        }
        out.extend(self.uplinks.iter().map(|(k, v)| (k.clone(), *v)));
        out
    }

    /// Every rack's uplink, measured and predicted (`GET
    /// /v1/fabric/uplinks`, `/metrics`): the racks measured (every rack of a
    /// fabric of two or more), predicted or declared, in name order.
    pub fn uplink_report(&self) -> Vec<crate::model::RackUplink> {
        let measured = self.measured_uplinks();
        let mut predicted: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
        for d in self.distributions.values() {
            for (rack, (up, down)) in d.racks.iter().zip(&d.uplink) {
                let e = predicted.entry(rack.as_str()).or_default();
                e.0 += up;
                e.1 += down;
            }
        }
        let mut racks: std::collections::BTreeSet<&str> =
            measured.keys().map(String::as_str).collect();
        racks.extend(predicted.keys().copied());
        let caps = self.uplink_capacities();
        racks.extend(caps.keys().map(String::as_str));
        racks
            .into_iter()
            .map(|rack| {
                let m = measured.get(rack).copied().unwrap_or_default();
                let p = predicted.get(rack).copied();
                let cap = caps.get(rack).copied().filter(|c| *c > 0.0);
                crate::model::RackUplink {
                    rack: rack.to_string(),
                    capacity_bytes_per_s: cap,
                    up_bytes_per_s: m.out_per_s,
                    down_bytes_per_s: m.in_per_s,
                    up_bytes_total: m.out_total,
                    down_bytes_total: m.in_total,
                    predicted_up_bytes_per_s: p.map(|p| p.0),
                    predicted_down_bytes_per_s: p.map(|p| p.1),
                    utilisation: cap.map(|c| m.out_per_s.max(m.in_per_s) / c),
                    predicted_utilisation: cap.and_then(|c| p.map(|p| p.0.max(p.1) / c)),
                }
            })
            .collect()
    }
}

/// A worst uplink load: a percentage of the declared capacity, or Mbit/s
/// when no uplink was declared (the LP then weighs every uplink alike).
fn fmt_load(x: f64, declared: bool) -> String {
    if declared {
        format!("{:.1}%", x * 100.0)
    } else {
        format!("{:.2} Mbit/s", x * 8.0 / 1e6)
    }
}

/// The classes' splits of a plan for its event: `; flows to rack R's
/// servers: MB [..], ...`, or nothing when no flow is classed.
fn fmt_classes(plan: &distribution::Plan) -> String {
    if plan.classes.is_empty() {
        return String::new();
    }
    let mut by_class: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for ((mb, class), row) in &plan.classes {
        by_class.entry(class).or_default().push(format!(
            "{mb} [{}]",
            row.iter()
                .map(|s| format!("{:.0}%", s * 100.0))
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    by_class
        .iter()
        .map(|(c, v)| format!("; flows to rack {c}'s servers: {}", v.join(", ")))
        .collect()
}
