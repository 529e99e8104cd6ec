//! CoMb's network-wide split of consolidated groups in the running controller
//! ([`crate::consolidation`]): every [`REBALANCE_EVERY`] the CPU time the
//! agents report for each instance process becomes cores in use, the split of
//! every group over its hosts is solved again, and a better one (by
//! [`crate::consolidation::MIN_GAIN`], or one that fits hosts that changed)
//! replaces the installed shares, with a `consolidation` event saying what
//! the most loaded host was predicted to carry before and after.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use sluice_tenant::consolidate::HYPERAPP;
use sluice_tenant::Element;

use crate::consolidation::{self, GroupKey, Inputs};
use crate::desired::instance_name;
use crate::distribution::Distribution;

use super::{event, Reconciler};

/// How often the splits are solved again.
pub const REBALANCE_EVERY: Duration = Duration::from_secs(5);

/// CPU counters as last sampled, and when.
#[derive(Debug, Default)]
pub(crate) struct CpuSampler {
    last: Option<Instant>,
    /// Instance name -> CPU ms, as last sampled.
    cpu_ms: BTreeMap<String, u64>,
}

/// The last solve's prediction, for `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CombView {
    /// The most loaded host's predicted utilisation under the installed
    /// shares.
    pub installed: f64,
    /// The same under even shares.
    pub even: f64,
}

impl Reconciler {
    /// The last solve's prediction (none before a group's load is measured).
    pub fn consolidation_view(&self) -> Option<CombView> {
        self.comb_view
    }

    /// Records an instance's cumulative CPU time from its host's heartbeat.
    pub(super) fn instance_cpu(&mut self, name: &str, cpu_ms: u64) {
        self.cpu_reports.insert(name.to_string(), cpu_ms);
    }

    /// Solves the groups' splits again when due (see the module docs).
    pub(super) fn check_consolidation(&mut self, now: Instant) {
        if self
            .cpu
            .last
            .is_some_and(|t| now.saturating_duration_since(t) < REBALANCE_EVERY)
        {
            return;
        }
        let elapsed = self
            .cpu
            .last
            .map(|t| now.saturating_duration_since(t).as_secs_f64());
        self.cpu.last = Some(now);
        self.cpu_reports
            .retain(|n, _| self.desired.instance_by_name(n).is_some());
        // Cores each instance used since the last sample.
        let mut used: BTreeMap<String, f64> = BTreeMap::new();
        for (name, ms) in &self.cpu_reports {
            let before = self.cpu.cpu_ms.get(name).copied();
            if let (Some(secs), Some(before)) = (elapsed, before) {
                // A counter that went down is a new process: all of it is new.
                let delta = if *ms >= before { ms - before } else { *ms };
                if secs > 0.0 {
                    used.insert(name.clone(), delta as f64 / 1000.0 / secs);
                }
            }
        }
        self.cpu.cpu_ms = self.cpu_reports.clone();
        let Some(inputs) = self.consolidation_inputs(&used) else {
            return;
        };
        if elapsed.is_none() {
            // The first sample only sets the counters' base.
            return;
        }
        // Under network-aware distribution the racks' parts are the
        // distribution's; CoMb only splits each rack's part among its hosts.
        let racked = self.desired.distribution == Distribution::NetworkAware;
        let rack_of = |h: u32| self.desired.rack_of(h).to_string();
        let racks: BTreeMap<GroupKey, BTreeMap<String, f64>> = if racked {
            inputs
                .groups
                .iter()
                .map(|(k, (on, _))| {
                    let names: Vec<&str> = on.iter().map(|h| self.desired.rack_of(*h)).collect();
                    (
                        k.clone(),
                        consolidation::rack_fractions(&names, self.desired.shares.get(k)),
                    )
                })
                .collect()
        } else {
            BTreeMap::new()
        };
        let solved = if racked {
            consolidation::plan_within_racks(&inputs, &rack_of, &racks)
        } else {
            consolidation::plan(&inputs)
        };
        let plan = match solved {
            Ok(Some(p)) => p,
            Ok(None) => return,
            Err(e) => {
                self.push_event(
                    event(
                        "error",
                        format!("consolidated groups' split not solved: {e}"),
                    ),
                    now,
                );
                return;
            }
        };
        // Shares for other hosts than the groups' now do not count as installed.
        let installed: BTreeMap<GroupKey, BTreeMap<u32, u32>> = self
            .desired
            .comb_shares
            .iter()
            .filter(|(k, s)| {
                inputs.groups.get(*k).is_some_and(|(hosts, _)| {
                    let mut hs = hosts.clone();
                    hs.sort_unstable();
                    hs.dedup();
                    s.keys().copied().eq(hs)
                })
            })
            .map(|(k, s)| (k.clone(), s.clone()))
            .collect();
        let fits = installed.len() == self.desired.comb_shares.len()
            && inputs.groups.keys().all(|k| installed.contains_key(k));
        let installed: BTreeMap<GroupKey, BTreeMap<u32, u32>> = if racked {
            // What the agents run: the installed split inside each rack, at
            // the racks' current parts.
            installed
                .into_iter()
                .map(|(k, row)| {
                    let on = &inputs.groups[&k].0;
                    let row = consolidation::within_racks(&row, on, &rack_of, &racks[&k]);
                    (k, row)
                })
                .collect()
        } else {
            installed
        };
        let current = fits.then(|| consolidation::evaluate(&inputs, &installed));
        let adopt = consolidation::adopt(current, &plan) && plan.shares != self.desired.comb_shares;
        self.comb_view = Some(CombView {
            installed: if adopt {
                plan.worst
            } else {
                current.unwrap_or(plan.worst)
            },
            even: plan.even,
        });
        if !adopt {
            return;
        }
        let mut next = self.desired.clone();
        next.comb_shares = plan.shares.clone();
        let text = plan
            .shares
            .iter()
            .map(|((t, mb), row)| {
                format!(
                    "{t}/{mb} [{}]",
                    row.iter()
                        .map(|(h, ppm)| format!("h{h} {:.0}%", f64::from(*ppm) / 1e4))
                        .collect::<Vec<_>>()
                        .join(" ")
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        let ev = event(
            "consolidation",
            format!(
                "shares per host now {text}; most loaded host predicted at {:.0}% of its cores (was {}, even shares {:.0}%)",
                plan.worst * 100.0,
                current.map_or("none installed".to_string(), |c| format!("{:.0}%", c * 100.0)),
                plan.even * 100.0,
            ),
        );
        self.push_event(ev, now);
        if let Err(e) = self.commit(next, now) {
            self.push_event(
                event(
                    "error",
                    format!("new consolidated split not committed: {e}"),
                ),
                now,
            );
        }
    }

    /// The LP's inputs: every consolidated group's serving instances and the
    /// cores they used, the rest of their hosts' instances as background, and
    /// the hosts' declared cores. `None` without any group.
    fn consolidation_inputs(&self, used: &BTreeMap<String, f64>) -> Option<Inputs> {
        let d = &self.desired;
        let grouped = |tn: &str, mb: &str| {
            d.tenants.get(tn).is_some_and(|t| {
                matches!(t.spec.elements.get(mb), Some(Element::Middlebox { function, .. }) if function == HYPERAPP)
            })
        };
        let mut inputs = Inputs::default();
        for (k, i) in &d.instances {
            if !grouped(&k.0, &k.1) {
                continue;
            }
            let e = inputs
                .groups
                .entry((k.0.clone(), k.1.clone()))
                .or_insert_with(|| (Vec::new(), 0.0));
            e.1 += used
                .get(&instance_name(&k.0, &k.1, k.2))
                .copied()
                .unwrap_or(0.0);
            if !(d.down.contains(k) || d.draining.contains(k) || d.instance_drains.contains_key(k))
            {
                e.0.push(i.host);
            }
        }
        if inputs.groups.is_empty() {
            return None;
        }
        let hosts: std::collections::BTreeSet<u32> = inputs
            .groups
            .values()
            .flat_map(|(h, _)| h.iter().copied())
            .collect();
        for (k, i) in &d.instances {
            if hosts.contains(&i.host) && !grouped(&k.0, &k.1) {
                *inputs.background.entry(i.host).or_default() += used
                    .get(&instance_name(&k.0, &k.1, k.2))
                    .copied()
                    .unwrap_or(0.0);
            }
        }
        for h in hosts {
            if let Some(c) = d
                .hosts
                .get(&h)
                .and_then(|h| h.capacity.as_ref())
                .and_then(|c| c.cores)
            {
                inputs.cores.insert(h, f64::from(c));
            }
        }
        Some(inputs)
    }
}
