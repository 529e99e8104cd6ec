//! The Stratos UtC simulation (Gember et al., §7.2).
//!
//! All tenants' initial instances are placed first (*rand* or *pack*), then every tenant in
//! turn runs the greedy scaling heuristic of §4.1.1, placing each trial instance *rand*omly
//! or network-*aware* (§5.2) and distributing flows *uniform*ly or with the network-aware
//! LP (§4.2). Throughput comes from weighted max-min fair sharing of directed links and
//! middlebox instance capacity among all tenants' flows.

use std::collections::HashMap;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use sluice_optimizer::stratos::{
    self as flowdist, min_cut_subset, rack_for_instance, Chain, Distribution, RackDemand,
};

use crate::datacenter::{Datacenter, RackId, TreeSpec};
use crate::maxmin::{max_min_rates, Flow};
use crate::SimError;

/// How a tenant's initial VMs are placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitialPlacement {
    /// Each VM in a uniformly random rack with a free slot.
    Rand,
    /// Min-cut clustering of the tenant's VM graph, clusters to racks by bandwidth (§5.1).
    Pack,
}

/// How a scaled (new) middlebox instance is placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstancePlacement {
    /// A uniformly random rack with a free slot.
    Rand,
    /// Next to its input/output VMs if possible, else the rack with the most available
    /// bandwidth to them, reserving the bandwidth it will use (§5.2).
    Aware,
}

/// How flows are spread over the instances of the next stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DistributionScheme {
    /// Equal split.
    Uniform,
    /// The network-aware LP of §4.2 (bi-directional).
    Aware,
    /// What the running controller installs (`network-aware`): one hash
    /// split per stage laid out rack by rack, even shares
    /// ([`sluice_optimizer::aligned::layout_distribution`]).
    Aligned,
}

/// One combination of the three policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scenario {
    /// Initial placement.
    pub initial: InitialPlacement,
    /// Scaled-instance placement.
    pub instance: InstancePlacement,
    /// Flow distribution.
    pub distribution: DistributionScheme,
}

impl Scenario {
    /// Short label such as `pack/aware uniform`.
    pub fn label(&self) -> String {
        let i = match self.initial {
            InitialPlacement::Rand => "rand",
            InitialPlacement::Pack => "pack",
        };
        let s = match self.instance {
            InstancePlacement::Rand => "rand",
            InstancePlacement::Aware => "aware",
        };
        let d = match self.distribution {
            DistributionScheme::Uniform => "uniform",
            DistributionScheme::Aware => "aware",
            DistributionScheme::Aligned => "aligned",
        };
        format!("{i}/{s} {d}")
    }
}

/// One stage of the tenant chain.
#[derive(Debug, Clone, PartialEq)]
pub struct StageSpec {
    /// Name (client, WAN optimiser, ...).
    pub name: String,
    /// Instances at the start.
    pub initial: usize,
    /// Mbps one instance can process; infinite for endpoints.
    pub capacity_mbps: f64,
    /// Whether the scaling heuristic may add instances of this stage.
    pub scalable: bool,
}

/// Parameters of the simulation.
#[derive(Debug, Clone, PartialEq)]
pub struct StratosConfig {
    /// Datacenter shape.
    pub tree: TreeSpec,
    /// Number of tenants.
    pub tenants: usize,
    /// The chain every tenant uses, clients first and servers last.
    pub stages: Vec<StageSpec>,
    /// Total application demand per tenant (Mbps).
    pub demand_mbps: f64,
    /// A trial instance is kept only if served demand grows by more than this (Mbps).
    pub improvement_mbps: f64,
    /// Scaling stops once this fraction of demand is served.
    pub satisfied_fraction: f64,
    /// RNG seed.
    pub seed: u64,
}

impl StratosConfig {
    /// The setup of §7.2: 50 racks under one switch, 7 slots per rack, 500 Mbps
    /// links, 20 tenants with the Fig. 12 chain (WAN optimiser 100, IPS 120, cache 220
    /// Mbps), 2 client-server pairs at 180 Mbps each.
    pub fn paper(seed: u64) -> Self {
        let stage = |name: &str, initial, capacity_mbps, scalable| StageSpec {
            name: name.to_string(),
            initial,
            capacity_mbps,
            scalable,
        };
        Self {
            tree: TreeSpec {
                racks: 50,
                // The paper does not give the tree's fan-out; with 500 Mbps aggregation
                // uplinks shared by several racks no tenant can be served (see the
                // reproduction notes), so the default is a single switch over all racks.
                racks_per_agg: 50,
                slots_per_rack: 7,
                link_mbps: 500.0,
            },
            tenants: 20,
            stages: vec![
                stage("client", 2, f64::INFINITY, false),
                stage("wan-optimizer", 1, 100.0, true),
                stage("ips", 1, 120.0, true),
                stage("cache", 1, 220.0, true),
                stage("server", 2, f64::INFINITY, false),
            ],
            demand_mbps: 360.0,
            improvement_mbps: 1.0,
            satisfied_fraction: 0.99,
            seed,
        }
    }

    fn validate(&self) -> Result<(), SimError> {
        if self.stages.len() < 2 {
            return Err(SimError::Config(
                "the chain needs at least two stages".into(),
            ));
        }
        if let Some(s) = self.stages.iter().find(|s| s.initial == 0) {
            return Err(SimError::Config(format!(
                "stage '{}' needs at least one initial instance",
                s.name
            )));
        }
        if let Some(s) = self
            .stages
            .iter()
            .find(|s| s.capacity_mbps.is_nan() || s.capacity_mbps <= 0.0)
        {
            return Err(SimError::Config(format!(
                "stage '{}' capacity must be positive",
                s.name
            )));
        }
        if !(self.demand_mbps.is_finite() && self.demand_mbps > 0.0) {
            return Err(SimError::Config(format!(
                "demand {} Mbps must be positive",
                self.demand_mbps
            )));
        }
        let vms = self.tenants * self.stages.iter().map(|s| s.initial).sum::<usize>();
        let slots = self.tree.racks * self.tree.slots_per_rack;
        if vms > slots {
            return Err(SimError::Config(format!(
                "{vms} initial VMs do not fit in {slots} slots"
            )));
        }
        Ok(())
    }
}

/// Final state of one tenant.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantOutcome {
    /// Demand served (Mbps).
    pub served_mbps: f64,
    /// Demand (Mbps).
    pub demand_mbps: f64,
    /// VMs used, endpoints included.
    pub instances: usize,
    /// Share of the tenant's hop traffic that crosses inter-rack links.
    pub inter_rack_fraction: f64,
    /// Demand served (Mbps) when the tenant's own scaling ended, before later tenants
    /// scaled and competed for the same links.
    pub served_after_scaling_mbps: f64,
}

impl TenantOutcome {
    /// Served demand in percent.
    pub fn served_pct(&self) -> f64 {
        100.0 * self.served_mbps / self.demand_mbps
    }
}

/// Final state of a scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioOutcome {
    /// The scenario.
    pub scenario: Scenario,
    /// Per tenant, in tenant order.
    pub tenants: Vec<TenantOutcome>,
    /// Utilisation (0..1) of every directed link.
    pub link_utilization: Vec<f64>,
    /// VM slots in use.
    pub slots_used: usize,
    /// VM slots in the datacenter.
    pub slots_total: usize,
}

#[derive(Debug, Clone)]
struct Instance {
    stage: usize,
    rack: RackId,
}

#[derive(Debug, Clone, Default)]
struct Tenant {
    instances: Vec<Instance>,
    dist: Option<Distribution>,
}

impl Tenant {
    fn stage_members(&self, stages: usize) -> Vec<Vec<usize>> {
        let mut out = vec![Vec::new(); stages];
        for (i, inst) in self.instances.iter().enumerate() {
            out[inst.stage].push(i);
        }
        out
    }
}

/// A tenant's instance paths, rebuilt only when its instances change.
#[derive(Debug, Clone, Default)]
struct TenantFlows {
    /// Resources are global link ids below `num_links`, and `num_links + instance index`
    /// for the tenant's own instances.
    flows: Vec<Flow>,
    /// Per flow, its hops as (from rack, to rack).
    hops: Vec<Vec<(RackId, RackId)>>,
}

/// A tenant's share of the current max-min allocation.
#[derive(Debug, Clone, Default)]
struct TenantRates {
    served: f64,
    inter_rack: f64,
    /// `(link, load)` sorted by link.
    link_loads: Vec<(usize, f64)>,
}

/// A trial allocation for a set of tenants, committed only if the trial is kept.
struct Delta {
    tenant: usize,
    flows: TenantFlows,
    rates: Vec<(usize, TenantRates)>,
}

/// Relative slack under which a link counts as saturated when deciding which tenants a
/// change can affect; looser than max-min's own 1e-9 so coupling is never missed.
const COUPLING_TOL: f64 = 1e-7;

struct World<'a> {
    cfg: &'a StratosConfig,
    scenario: Scenario,
    dc: Datacenter,
    free: Vec<usize>,
    tenants: Vec<Tenant>,
    rng: ChaCha8Rng,
    link_load: Vec<f64>,
    reserved: Vec<f64>,
    /// Committed flows and rates per tenant (the max-min allocation of the current state).
    flows: Vec<TenantFlows>,
    rates: Vec<TenantRates>,
    /// Tenants with load on each link, sorted.
    link_tenants: Vec<Vec<usize>>,
    /// Recompute every tenant on every trial (the original, quadratic evaluation);
    /// kept to check that the incremental evaluation reaches the same results.
    full_eval: bool,
    /// Scratch: local index of each link in the current max-min subproblem.
    local_link: Vec<usize>,
    /// Network-aware distributions by co-location pattern and demand.
    lp_cache: HashMap<(Vec<Vec<usize>>, u64), Distribution>,
}

/// Runs one scenario end to end.
pub fn run_scenario(cfg: &StratosConfig, scenario: Scenario) -> Result<ScenarioOutcome, SimError> {
    run_scenario_with(cfg, scenario, &mut |_| true)?
        .ok_or_else(|| SimError::Config("scenario stopped early".into()))
}

/// Runs one scenario, calling `after_tenant(tenants scaled so far)` after the initial
/// placement (with 0) and after each tenant's scaling; when it returns `false` the run
/// stops and `Ok(None)` is returned (benchmarks use this for progress and time budgets).
pub fn run_scenario_with(
    cfg: &StratosConfig,
    scenario: Scenario,
    after_tenant: &mut dyn FnMut(usize) -> bool,
) -> Result<Option<ScenarioOutcome>, SimError> {
    run_inner(cfg, scenario, after_tenant, false)
}

fn run_inner(
    cfg: &StratosConfig,
    scenario: Scenario,
    after_tenant: &mut dyn FnMut(usize) -> bool,
    full_eval: bool,
) -> Result<Option<ScenarioOutcome>, SimError> {
    cfg.validate()?;
    let dc = Datacenter::new(cfg.tree.clone())?;
    let links = dc.num_links();
    let mut w = World {
        cfg,
        scenario,
        free: vec![cfg.tree.slots_per_rack; cfg.tree.racks],
        dc,
        tenants: vec![Tenant::default(); cfg.tenants],
        rng: ChaCha8Rng::seed_from_u64(cfg.seed),
        link_load: vec![0.0; links],
        reserved: vec![0.0; links],
        flows: vec![TenantFlows::default(); cfg.tenants],
        rates: vec![TenantRates::default(); cfg.tenants],
        link_tenants: vec![Vec::new(); links],
        full_eval,
        local_link: vec![usize::MAX; links],
        lp_cache: HashMap::new(),
    };
    w.place_initial()?;
    // Tenants join the allocation one at a time; each join is an exact max-min update.
    for t in 0..cfg.tenants {
        let d = w.evaluate_change(t)?;
        w.commit(d);
    }
    if !after_tenant(0) {
        return Ok(None);
    }
    let mut after_scaling = Vec::with_capacity(cfg.tenants);
    for t in 0..cfg.tenants {
        after_scaling.push(w.scale_tenant(t)?);
        if !after_tenant(t + 1) {
            return Ok(None);
        }
    }
    let caps = w.dc.link_capacities();
    let slots_total = cfg.tree.racks * cfg.tree.slots_per_rack;
    Ok(Some(ScenarioOutcome {
        scenario,
        tenants: w
            .tenants
            .iter()
            .enumerate()
            .map(|(t, ten)| TenantOutcome {
                served_mbps: w.rates[t].served,
                demand_mbps: cfg.demand_mbps,
                instances: ten.instances.len(),
                inter_rack_fraction: w.rates[t].inter_rack,
                served_after_scaling_mbps: after_scaling[t],
            })
            .collect(),
        link_utilization: w.link_load.iter().zip(&caps).map(|(l, c)| l / c).collect(),
        slots_used: slots_total - w.free.iter().sum::<usize>(),
        slots_total,
    }))
}

impl World<'_> {
    fn stages(&self) -> usize {
        self.cfg.stages.len()
    }

    fn place_initial(&mut self) -> Result<(), SimError> {
        // Estimated inter-rack load, used by pack to steer clusters to well-provisioned paths.
        let mut est = vec![0.0; self.dc.num_links()];
        for t in 0..self.cfg.tenants {
            let vm_stages: Vec<usize> = self
                .cfg
                .stages
                .iter()
                .enumerate()
                .flat_map(|(s, spec)| std::iter::repeat_n(s, spec.initial))
                .collect();
            let racks = match self.scenario.initial {
                InitialPlacement::Rand => vm_stages
                    .iter()
                    .map(|_| {
                        self.random_free_rack()
                            .ok_or(SimError::OutOfSlots { tenant: t })
                    })
                    .collect::<Result<Vec<_>, _>>()?,
                InitialPlacement::Pack => self.pack(t, &vm_stages, &mut est)?,
            };
            for (&stage, &rack) in vm_stages.iter().zip(&racks) {
                if self.scenario.initial == InitialPlacement::Pack {
                    self.free[rack] -= 1;
                }
                self.tenants[t].instances.push(Instance { stage, rack });
            }
        }
        Ok(())
    }

    fn random_free_rack(&mut self) -> Option<RackId> {
        let racks: Vec<RackId> = (0..self.free.len()).filter(|&r| self.free[r] > 0).collect();
        let r = *racks.choose(&mut self.rng)?;
        self.free[r] -= 1;
        Some(r)
    }

    /// §5.1, simplified to a tree with one path between racks: repeatedly take the rack
    /// with the best bandwidth to the tenant's racks so far and fill it with the
    /// minimum-cut subset of the remaining VMs.
    fn pack(
        &mut self,
        tenant: usize,
        vm_stages: &[usize],
        est: &mut [f64],
    ) -> Result<Vec<RackId>, SimError> {
        let n = vm_stages.len();
        let counts: Vec<usize> = self.cfg.stages.iter().map(|s| s.initial).collect();
        let demand = self.cfg.demand_mbps;
        // Uniform-distribution estimate of traffic between two VMs of adjacent stages.
        let weight = |a: usize, b: usize| {
            let (sa, sb) = (vm_stages[a], vm_stages[b]);
            if sa + 1 == sb || sb + 1 == sa {
                demand / (counts[sa] * counts[sb]) as f64
            } else {
                0.0
            }
        };
        let mut rack_of = vec![usize::MAX; n];
        let mut remaining: Vec<usize> = (0..n).collect();
        let mut used_racks: Vec<RackId> = Vec::new();
        let caps = self.dc.link_capacities();
        let mut scratch = self.free.clone();
        while !remaining.is_empty() {
            let candidates: Vec<RackId> = (0..scratch.len())
                .filter(|&r| scratch[r] > 0 && !used_racks.contains(&r))
                .collect();
            if candidates.is_empty() {
                return Err(SimError::OutOfSlots { tenant });
            }
            let rack = if used_racks.is_empty() {
                // Best fit: the fullest rack that still takes every VM, else the emptiest.
                candidates
                    .iter()
                    .copied()
                    .filter(|&r| scratch[r] >= remaining.len())
                    .min_by_key(|&r| (scratch[r], r))
                    .unwrap_or_else(|| {
                        *candidates
                            .iter()
                            .max_by_key(|&&r| (scratch[r], std::cmp::Reverse(r)))
                            .expect("non-empty")
                    })
            } else {
                let avail = |r: RackId| {
                    used_racks
                        .iter()
                        .flat_map(|&u| self.dc.path(u, r).into_iter().chain(self.dc.path(r, u)))
                        .map(|l| caps[l] - est[l])
                        .fold(f64::INFINITY, f64::min)
                };
                let hops = |r: RackId| {
                    used_racks
                        .iter()
                        .map(|&u| self.dc.path(u, r).len())
                        .sum::<usize>()
                };
                *candidates
                    .iter()
                    .max_by(|&&a, &&b| {
                        avail(a)
                            .total_cmp(&avail(b))
                            .then(hops(b).cmp(&hops(a)))
                            .then(scratch[a].cmp(&scratch[b]))
                            .then(b.cmp(&a))
                    })
                    .expect("non-empty")
            };
            let take = scratch[rack].min(remaining.len());
            let subset = min_cut_subset(&remaining, take, &weight);
            for &v in &subset {
                rack_of[v] = rack;
            }
            remaining.retain(|v| !subset.contains(v));
            scratch[rack] -= take;
            used_racks.push(rack);
        }
        for a in 0..n {
            for b in 0..n {
                if vm_stages[a] + 1 == vm_stages[b] && rack_of[a] != rack_of[b] {
                    for l in self.dc.path(rack_of[a], rack_of[b]) {
                        est[l] += weight(a, b);
                    }
                }
            }
        }
        Ok(rack_of)
    }

    /// Runs the greedy heuristic for tenant `t`; returns the demand it served at the end.
    fn scale_tenant(&mut self, t: usize) -> Result<f64, SimError> {
        let goal = self.cfg.satisfied_fraction * self.cfg.demand_mbps;
        let mut served = self.rates[t].served;
        let scalable: Vec<usize> = (0..self.stages())
            .filter(|&s| self.cfg.stages[s].scalable)
            .collect();
        loop {
            let mut added = false;
            for &stage in &scalable {
                loop {
                    if served >= goal {
                        return Ok(served);
                    }
                    let Some(rack) = self.choose_rack(t, stage) else {
                        // No free slot anywhere: scaling cannot continue.
                        return Ok(served);
                    };
                    self.free[rack] -= 1;
                    self.tenants[t].instances.push(Instance { stage, rack });
                    self.tenants[t].dist = None;
                    let d = self.evaluate_change(t)?;
                    self.reserved.iter_mut().for_each(|r| *r = 0.0);
                    let trial = d
                        .rates
                        .iter()
                        .find(|(u, _)| *u == t)
                        .map_or(0.0, |(_, r)| r.served);
                    if trial > served + self.cfg.improvement_mbps {
                        served = trial;
                        self.commit(d);
                        added = true;
                    } else {
                        self.tenants[t].instances.pop();
                        self.tenants[t].dist = None;
                        self.free[rack] += 1;
                        break;
                    }
                }
            }
            if !added {
                return Ok(served);
            }
        }
    }

    fn choose_rack(&mut self, t: usize, stage: usize) -> Option<RackId> {
        match self.scenario.instance {
            InstancePlacement::Rand => {
                let racks: Vec<RackId> =
                    (0..self.free.len()).filter(|&r| self.free[r] > 0).collect();
                racks.choose(&mut self.rng).copied()
            }
            InstancePlacement::Aware => self.aware_rack(t, stage),
        }
    }

    fn aware_rack(&mut self, t: usize, stage: usize) -> Option<RackId> {
        let ten = &self.tenants[t];
        let inputs: Vec<RackId> = ten
            .instances
            .iter()
            .filter(|i| i.stage + 1 == stage)
            .map(|i| i.rack)
            .collect();
        let outputs: Vec<RackId> = ten
            .instances
            .iter()
            .filter(|i| i.stage == stage + 1)
            .map(|i| i.rack)
            .collect();
        let neighbours: Vec<RackId> = inputs.iter().chain(&outputs).copied().collect();
        // Same rack as its input/output VMs when a slot is free there: the rule the
        // controller's rack-aware placement uses too. The instance being placed is
        // counted against no rack here: its neighbours are the VMs of one stage hop.
        let mut racks: Vec<RackDemand> = self
            .free
            .iter()
            .map(|&f| RackDemand {
                endpoints: 0,
                instances: 0,
                room: f > 0,
                load: 0.0,
            })
            .collect();
        for &n in &neighbours {
            racks[n].endpoints += 1;
        }
        let local = rack_for_instance(&racks).filter(|c| c.local);
        let rack = match local {
            Some(c) => c.rack,
            None => self.best_connected_rack(&neighbours)?,
        };
        // Reserve what the instance is expected to carry so that decisions made before
        // this traffic is measured (other tenants' concurrent requests) avoid these links.
        let cap = self.cfg.stages[stage]
            .capacity_mbps
            .min(self.cfg.demand_mbps);
        for (set, inbound) in [(&inputs, true), (&outputs, false)] {
            for &n in set.iter() {
                let path = if inbound {
                    self.dc.path(n, rack)
                } else {
                    self.dc.path(rack, n)
                };
                for l in path {
                    self.reserved[l] += cap / set.len() as f64;
                }
            }
        }
        Some(rack)
    }

    /// Among racks with a free slot (none of them in `neighbours`), the one with the most
    /// available bandwidth on its paths to and from every neighbour, then the fewest
    /// hops, then the lowest index. In the tree, a path between racks of different
    /// aggregation switches is both racks' links plus both switches' core links, so the
    /// bottleneck splits into a part common to all candidates, a per-switch part and the
    /// candidate's own links: one pass over the racks instead of building every path.
    fn best_connected_rack(&self, neighbours: &[RackId]) -> Option<RackId> {
        let caps = self.dc.link_capacities();
        let g = |l: usize| caps[l] - self.link_load[l] - self.reserved[l];
        let pair = |ls: [usize; 2]| g(ls[0]).min(g(ls[1]));
        let mut nb_min = f64::INFINITY;
        // (aggregation switch, neighbours under it, its core links' bottleneck)
        let mut aggs: Vec<(usize, usize, f64)> = Vec::new();
        for &n in neighbours {
            nb_min = nb_min.min(pair(self.dc.rack_links(n)));
            let a = self.dc.agg_of_rack(n);
            match aggs.iter_mut().find(|x| x.0 == a) {
                Some(x) => x.1 += 1,
                None => aggs.push((a, 1, pair(self.dc.agg_links(a)))),
            }
        }
        let total = neighbours.len();
        let mut best: Option<(f64, usize, RackId)> = None;
        for r in (0..self.free.len()).filter(|&r| self.free[r] > 0) {
            let ar = self.dc.agg_of_rack(r);
            let same = aggs.iter().find(|x| x.0 == ar).map_or(0, |x| x.1);
            let mut avail = if total == 0 {
                f64::INFINITY
            } else {
                nb_min.min(pair(self.dc.rack_links(r)))
            };
            if same < total {
                for x in aggs.iter().filter(|x| x.0 != ar) {
                    avail = avail.min(x.2);
                }
                avail = avail.min(pair(self.dc.agg_links(ar)));
            }
            let hops = 2 * same + 4 * (total - same);
            // Larger avail wins, then fewer hops, then the lower index (first seen).
            let better = match best {
                None => true,
                Some((ba, bh, _)) => avail.total_cmp(&ba).then(bh.cmp(&hops)).is_gt(),
            };
            if better {
                best = Some((avail, hops, r));
            }
        }
        best.map(|b| b.2)
    }

    fn distribution(&mut self, t: usize) -> Result<Distribution, SimError> {
        if let Some(d) = &self.tenants[t].dist {
            return Ok(d.clone());
        }
        let members = self.tenants[t].stage_members(self.stages());
        let chain = Chain {
            locations: members
                .iter()
                .map(|m| {
                    m.iter()
                        .map(|&i| self.tenants[t].instances[i].rack)
                        .collect()
                })
                .collect(),
            flows: self.cfg.demand_mbps,
        };
        let d = match self.scenario.distribution {
            DistributionScheme::Uniform => flowdist::uniform(&chain)?,
            DistributionScheme::Aligned => sluice_optimizer::aligned::layout_distribution(&chain)?,
            DistributionScheme::Aware => {
                // The LP only sees which instances share a rack, so chains with the same
                // co-location pattern (racks renamed in order of first appearance) have
                // the same LP and, HiGHS being deterministic, the same solution.
                let mut names: Vec<RackId> = Vec::new();
                let pattern: Vec<Vec<usize>> = chain
                    .locations
                    .iter()
                    .map(|stage| {
                        stage
                            .iter()
                            .map(|r| match names.iter().position(|x| x == r) {
                                Some(i) => i,
                                None => {
                                    names.push(*r);
                                    names.len() - 1
                                }
                            })
                            .collect()
                    })
                    .collect();
                let key = (pattern, chain.flows.to_bits());
                match self.lp_cache.get(&key) {
                    Some(d) => d.clone(),
                    None => {
                        let canonical = Chain {
                            locations: key.0.clone(),
                            flows: chain.flows,
                        };
                        let d = flowdist::network_aware(&canonical, None, true)?;
                        self.lp_cache.insert(key, d.clone());
                        d
                    }
                }
            }
        };
        self.tenants[t].dist = Some(d.clone());
        Ok(d)
    }

    /// Enumerates tenant `t`'s instance paths with their share of the demand.
    fn build_flows(&mut self, t: usize) -> Result<TenantFlows, SimError> {
        let links = self.dc.num_links();
        let dist = self.distribution(t)?;
        let members = self.tenants[t].stage_members(self.stages());
        let mut out = TenantFlows::default();
        let first = members[0].len() as f64;
        // Depth-first enumeration of instance paths with their share of the demand.
        let mut stack: Vec<(Vec<usize>, f64)> = (0..members[0].len())
            .map(|i| (vec![i], 1.0 / first))
            .collect();
        while let Some((path, share)) = stack.pop() {
            let r = path.len() - 1;
            if r + 1 == members.len() {
                let insts: Vec<usize> = path
                    .iter()
                    .enumerate()
                    .map(|(s, &i)| members[s][i])
                    .collect();
                let racks: Vec<RackId> = insts
                    .iter()
                    .map(|&i| self.tenants[t].instances[i].rack)
                    .collect();
                let mut res: Vec<usize> = insts.iter().map(|&i| links + i).collect();
                let hops: Vec<(RackId, RackId)> = racks.windows(2).map(|w| (w[0], w[1])).collect();
                for &(a, b) in &hops {
                    res.extend(self.dc.path(a, b));
                }
                let demand = self.cfg.demand_mbps * share;
                out.flows.push(Flow {
                    resources: res,
                    demand,
                    weight: demand,
                });
                out.hops.push(hops);
                continue;
            }
            let Some(&i) = path.last() else { continue };
            for (j, &x) in dist.forward[r][i].iter().enumerate() {
                if x > 1e-9 {
                    let mut p = path.clone();
                    p.push(j);
                    stack.push((p, share * x));
                }
            }
        }
        Ok(out)
    }

    fn saturated(&self, link: usize) -> bool {
        let cap = self.dc.spec().link_mbps;
        self.link_load[link] >= cap - COUPLING_TOL * cap.max(1.0)
    }

    /// Adds to `set` every tenant reachable from `set[from..]` through links saturated in
    /// the committed allocation.
    fn close_over_saturated(&self, set: &mut Vec<usize>, in_set: &mut [bool], from: usize) {
        let mut i = from;
        while i < set.len() {
            let u = set[i];
            i += 1;
            for &(l, _) in &self.rates[u].link_loads {
                if self.saturated(l) {
                    for &v in &self.link_tenants[l] {
                        if !in_set[v] {
                            in_set[v] = true;
                            set.push(v);
                        }
                    }
                }
            }
        }
    }

    /// The max-min allocation after tenant `t`'s instances changed. Only tenants coupled
    /// to `t` through saturated links can change rate: everyone else keeps their
    /// committed rates, which stay max-min fair because their bottlenecks are untouched
    /// (the set grows until no link it shares with the others saturates).
    fn evaluate_change(&mut self, t: usize) -> Result<Delta, SimError> {
        let links = self.dc.num_links();
        let new_flows = self.build_flows(t)?;
        let n = self.tenants.len();
        let mut in_set = vec![false; n];
        let mut set = vec![t];
        in_set[t] = true;
        if self.full_eval {
            set = (0..n).collect();
            in_set.iter_mut().for_each(|x| *x = true);
        }
        // Links of t's new flows that are saturated now also couple.
        for f in &new_flows.flows {
            for &l in f.resources.iter().filter(|&&l| l < links) {
                if self.saturated(l) {
                    for &v in &self.link_tenants[l] {
                        if !in_set[v] {
                            in_set[v] = true;
                            set.push(v);
                        }
                    }
                }
            }
        }
        self.close_over_saturated(&mut set, &mut in_set, 0);
        let cap = self.dc.spec().link_mbps;
        loop {
            set.sort_unstable();
            let flows_of = |u: usize| -> &TenantFlows {
                if u == t {
                    &new_flows
                } else {
                    &self.flows[u]
                }
            };
            // Local subproblem: the links the set touches, then every set tenant's instances.
            let mut touched: Vec<usize> = Vec::new();
            for &u in &set {
                for f in &flows_of(u).flows {
                    for &l in f.resources.iter().filter(|&&l| l < links) {
                        if self.local_link[l] == usize::MAX {
                            self.local_link[l] = touched.len();
                            touched.push(l);
                        }
                    }
                }
            }
            let mut capacity: Vec<f64> = touched
                .iter()
                .map(|&l| {
                    let outside: f64 = self.link_tenants[l]
                        .iter()
                        .filter(|&&v| !in_set[v])
                        .map(|&v| tenant_link_load(&self.rates[v], l))
                        .sum();
                    cap - outside
                })
                .collect();
            let mut flows: Vec<Flow> = Vec::new();
            let mut owner: Vec<usize> = Vec::new();
            for &u in &set {
                let base = capacity.len();
                for inst in &self.tenants[u].instances {
                    capacity.push(self.cfg.stages[inst.stage].capacity_mbps);
                }
                for f in &flows_of(u).flows {
                    flows.push(Flow {
                        resources: f
                            .resources
                            .iter()
                            .map(|&r| {
                                if r < links {
                                    self.local_link[r]
                                } else {
                                    base + (r - links)
                                }
                            })
                            .collect(),
                        demand: f.demand,
                        weight: f.weight,
                    });
                    owner.push(u);
                }
            }
            let rates = max_min_rates(&capacity, &flows);
            // Links shared with tenants outside the set that the new allocation saturates
            // pull those tenants in.
            let mut used = vec![0.0; touched.len()];
            for (f, &r) in flows.iter().zip(&rates) {
                for &x in &f.resources {
                    if x < touched.len() {
                        used[x] += r;
                    }
                }
            }
            let before = set.len();
            for (i, &l) in touched.iter().enumerate() {
                if used[i] >= capacity[i] - COUPLING_TOL * cap.max(1.0) {
                    for &v in &self.link_tenants[l] {
                        if !in_set[v] {
                            in_set[v] = true;
                            set.push(v);
                        }
                    }
                }
            }
            for &l in &touched {
                self.local_link[l] = usize::MAX;
            }
            if set.len() > before {
                self.close_over_saturated(&mut set, &mut in_set, before);
                continue;
            }
            let mut out = Vec::with_capacity(set.len());
            let mut k = 0;
            for &u in &set {
                let tf = flows_of(u);
                let r = &rates[k..k + tf.flows.len()];
                k += tf.flows.len();
                out.push((u, tenant_rates(tf, r, links)));
            }
            return Ok(Delta {
                tenant: t,
                flows: new_flows,
                rates: out,
            });
        }
    }

    /// Makes a trial allocation the current one.
    fn commit(&mut self, d: Delta) {
        let mut dirty: Vec<usize> = Vec::new();
        let t = d.tenant;
        for &(l, _) in &self.rates[t].link_loads {
            dirty.push(l);
            self.link_tenants[l].retain(|&v| v != t);
        }
        for (u, r) in d.rates {
            dirty.extend(r.link_loads.iter().map(|x| x.0));
            if u == t {
                for &(l, _) in &r.link_loads {
                    if let Err(pos) = self.link_tenants[l].binary_search(&t) {
                        self.link_tenants[l].insert(pos, t);
                    }
                }
            }
            self.rates[u] = r;
        }
        self.flows[t] = d.flows;
        dirty.sort_unstable();
        dirty.dedup();
        for l in dirty {
            self.link_load[l] = self.link_tenants[l]
                .iter()
                .map(|&v| tenant_link_load(&self.rates[v], l))
                .sum();
        }
    }
}

fn tenant_link_load(r: &TenantRates, link: usize) -> f64 {
    r.link_loads
        .binary_search_by_key(&link, |x| x.0)
        .map_or(0.0, |i| r.link_loads[i].1)
}

/// Served demand, inter-rack share and per-link load of one tenant's flows at `rates`.
fn tenant_rates(tf: &TenantFlows, rates: &[f64], links: usize) -> TenantRates {
    let mut served = 0.0;
    let mut inter = 0.0;
    let mut hop_total = 0.0;
    let mut loads: Vec<(usize, f64)> = Vec::new();
    for ((flow, hops), &rate) in tf.flows.iter().zip(&tf.hops).zip(rates) {
        served += rate;
        for &(a, b) in hops {
            hop_total += rate;
            if a != b {
                inter += rate;
            }
        }
        for &r in &flow.resources {
            // Kept at rate 0 too: a link the tenant crosses couples it to others.
            if r < links {
                loads.push((r, rate));
            }
        }
    }
    loads.sort_by_key(|x| x.0);
    let mut link_loads: Vec<(usize, f64)> = Vec::new();
    for (l, x) in loads {
        match link_loads.last_mut() {
            Some(last) if last.0 == l => last.1 += x,
            _ => link_loads.push((l, x)),
        }
    }
    TenantRates {
        served,
        inter_rack: if hop_total > 0.0 {
            inter / hop_total
        } else {
            0.0
        },
        link_loads,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(seed: u64) -> StratosConfig {
        let mut c = StratosConfig::paper(seed);
        c.tree.racks = 10;
        c.tenants = 4;
        c
    }

    #[test]
    fn an_unconstrained_tenant_reaches_the_ideal_instance_count() {
        // One tenant, huge links: the heuristic must find 4 WAN, 3 IPS, 2 cache (13 VMs).
        let mut c = small(1);
        c.tenants = 1;
        c.tree.link_mbps = 1e6;
        for scenario in [
            Scenario {
                initial: InitialPlacement::Pack,
                instance: InstancePlacement::Aware,
                distribution: DistributionScheme::Uniform,
            },
            Scenario {
                initial: InitialPlacement::Rand,
                instance: InstancePlacement::Rand,
                distribution: DistributionScheme::Aware,
            },
        ] {
            let o = run_scenario(&c, scenario).unwrap();
            assert_eq!(o.tenants[0].instances, 13, "{}", scenario.label());
            assert!(o.tenants[0].served_pct() > 99.0);
        }
    }

    #[test]
    fn runs_are_deterministic_for_a_seed() {
        let s = Scenario {
            initial: InitialPlacement::Rand,
            instance: InstancePlacement::Rand,
            distribution: DistributionScheme::Uniform,
        };
        let a = run_scenario(&small(7), s).unwrap();
        let b = run_scenario(&small(7), s).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn pack_aware_runs_keep_capacity_and_slot_accounting() {
        let c = small(3);
        let s = Scenario {
            initial: InitialPlacement::Pack,
            instance: InstancePlacement::Aware,
            distribution: DistributionScheme::Aware,
        };
        let o = run_scenario(&c, s).unwrap();
        // Every tenant keeps its 7 initial VMs; nothing exceeds demand or link capacity.
        assert!(o.slots_used <= o.slots_total);
        assert_eq!(
            o.slots_used,
            o.tenants.iter().map(|t| t.instances).sum::<usize>()
        );
        for t in &o.tenants {
            assert!(t.instances >= 7);
            assert!(t.served_mbps <= t.demand_mbps + 1e-6);
            assert!((0.0..=1.0).contains(&t.inter_rack_fraction));
        }
        assert!(o.link_utilization.iter().all(|&u| u <= 1.0 + 1e-9));
    }

    #[test]
    fn incremental_evaluation_matches_full_recomputation() {
        // Thin links so that tenants saturate links and couple, which is what the
        // incremental update must get right.
        let mut c = small(5);
        c.tree.racks = 12;
        c.tree.racks_per_agg = 4;
        c.tree.link_mbps = 300.0;
        c.tenants = 6;
        for scenario in [
            Scenario {
                initial: InitialPlacement::Rand,
                instance: InstancePlacement::Rand,
                distribution: DistributionScheme::Uniform,
            },
            Scenario {
                initial: InitialPlacement::Pack,
                instance: InstancePlacement::Aware,
                distribution: DistributionScheme::Aware,
            },
            Scenario {
                initial: InitialPlacement::Pack,
                instance: InstancePlacement::Aware,
                distribution: DistributionScheme::Uniform,
            },
        ] {
            let fast = run_inner(&c, scenario, &mut |_| true, false)
                .unwrap()
                .unwrap();
            let full = run_inner(&c, scenario, &mut |_| true, true)
                .unwrap()
                .unwrap();
            let label = scenario.label();
            // Some tenant must be short of demand, or no link was contended.
            assert!(
                full.tenants.iter().any(|t| t.served_pct() < 99.0),
                "{label}"
            );
            assert_eq!(fast.slots_used, full.slots_used, "{label}");
            for (a, b) in fast.tenants.iter().zip(&full.tenants) {
                assert_eq!(a.instances, b.instances, "{label}");
                for (x, y) in [
                    (a.served_mbps, b.served_mbps),
                    (a.served_after_scaling_mbps, b.served_after_scaling_mbps),
                    (a.inter_rack_fraction, b.inter_rack_fraction),
                ] {
                    assert!((x - y).abs() <= 1e-6, "{label}: {x} vs {y}");
                }
            }
            for (x, y) in fast.link_utilization.iter().zip(&full.link_utilization) {
                assert!((x - y).abs() <= 1e-9, "{label}: {x} vs {y}");
            }
        }
    }

    #[test]
    fn the_aware_lp_depends_only_on_which_instances_share_a_rack() {
        // Why distributions can be cached by co-location pattern.
        let a = Chain {
            locations: vec![vec![5, 5], vec![9], vec![5, 2], vec![9, 7], vec![2, 5]],
            flows: 360.0,
        };
        let b = Chain {
            locations: vec![vec![0, 0], vec![1], vec![0, 2], vec![1, 3], vec![2, 0]],
            flows: 360.0,
        };
        assert_eq!(
            flowdist::network_aware(&a, None, true).unwrap(),
            flowdist::network_aware(&b, None, true).unwrap()
        );
    }

    #[test]
    fn stopping_early_returns_none_after_the_requested_tenant() {
        let c = small(2);
        let mut seen = Vec::new();
        let o = run_scenario_with(
            &c,
            Scenario {
                initial: InitialPlacement::Pack,
                instance: InstancePlacement::Aware,
                distribution: DistributionScheme::Aware,
            },
            &mut |done| {
                seen.push(done);
                done < 2
            },
        )
        .unwrap();
        assert!(o.is_none());
        assert_eq!(seen, vec![0, 1, 2]);
    }

    #[test]
    fn bad_configs_are_rejected() {
        let mut c = small(1);
        c.tenants = 100;
        assert!(matches!(
            run_scenario(
                &c,
                Scenario {
                    initial: InitialPlacement::Rand,
                    instance: InstancePlacement::Rand,
                    distribution: DistributionScheme::Uniform
                }
            ),
            Err(SimError::Config(_))
        ));
        let mut c = small(1);
        c.stages[1].capacity_mbps = -5.0;
        assert!(run_scenario(
            &c,
            Scenario {
                initial: InitialPlacement::Pack,
                instance: InstancePlacement::Rand,
                distribution: DistributionScheme::Uniform
            }
        )
        .is_err());
    }
}
