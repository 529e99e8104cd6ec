//! CoMb's network-wide evaluation (Sekar et al., §7.3-7.4) on real topologies.
//!
//! Four applications (flow monitor, IDS, load balancer, cache) subscribe to traffic kinds;
//! each origin-destination pair carries one class per hyperapp along its shortest path.
//! Mean volumes follow a gravity model; every epoch scales each (pair, kind) volume by a
//! draw from the empirical Abilene variability distribution.

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr_free::exp1;
use sluice_optimizer::comb::{
    derive_hyperapps, min_max_load_model_aggregated, min_provisioning, min_provisioning_two_step,
    strawman_min_max_load, Application, Hyperapp, KindClass, Module, NetworkProblem, NodeFootprint,
    NodeId, PinnedPart, ProvisioningProblem, Strategy, TrafficClass, TransportProblem, WorkGroup,
};
use sluice_optimizer::graph::Graph;
use sluice_optimizer::lp::SolverOptions;

use crate::topology::Topology;
use crate::SimError;

/// Exponential sampling without another dependency.
mod rand_distr_free {
    use rand::Rng;

    /// A draw from Exp(1).
    pub fn exp1(rng: &mut impl Rng) -> f64 {
        // 1 - u lies in (0, 1], so the logarithm is finite.
        -(1.0 - rng.gen::<f64>()).ln()
    }
}

/// The traffic kinds and their share of every OD pair's mean volume.
pub const KINDS: [(&str, f64); 4] = [
    ("http", 0.5),
    ("nfs", 0.1),
    ("udp", 0.15),
    ("other-tcp", 0.25),
];

/// The four applications of §7.3 with footprints derived from Table 3.
///
/// The session-reconstruction module costs 1 unit per session and the HTTP parser 0.5
/// (assumed: the paper gives only relative shares). Each application's specific part is
/// chosen so that its reusable modules make up Table 3's share of its total: flow monitor
/// 73%, signature IDS 26%, load balancer 88%, cache 54%.
pub fn paper_apps() -> (Vec<Application>, Vec<Module>, Vec<(String, String)>) {
    let session = 1.0;
    let http = 0.5;
    let app =
        |name: &str, kinds: &[&str], reusable: f64, share: f64, modules: &[&str]| Application {
            name: name.to_string(),
            subscribes: kinds.iter().map(|k| k.to_string()).collect(),
            specific: vec![reusable / share - reusable],
            modules: modules.iter().map(|m| m.to_string()).collect(),
        };
    let apps = vec![
        app(
            "flowmon",
            &["http", "nfs", "udp", "other-tcp"],
            session,
            0.73,
            &["session"],
        ),
        app(
            "ids",
            &["http", "udp", "other-tcp"],
            session,
            0.26,
            &["session"],
        ),
        app(
            "loadbalancer",
            &["http"],
            session + http,
            0.88,
            &["session", "http"],
        ),
        app(
            "cache",
            &["http", "nfs"],
            session + http,
            0.54,
            &["session", "http"],
        ),
    ];
    let modules = vec![
        Module {
            name: "session".into(),
            footprint: vec![session],
        },
        Module {
            name: "http".into(),
            footprint: vec![http],
        },
    ];
    // Policy: monitor, then IDS, then the HTTP services.
    let order = vec![
        ("flowmon".to_string(), "ids".to_string()),
        ("ids".to_string(), "loadbalancer".to_string()),
        ("loadbalancer".to_string(), "cache".to_string()),
    ];
    (apps, modules, order)
}

/// Inverse-CDF sampler over the quantile table of `abilene-od-variability.csv`.
#[derive(Debug, Clone, PartialEq)]
pub struct Variability {
    quantiles: Vec<(f64, f64)>,
}

impl Variability {
    /// Parses `quantile,volume_over_mean` rows (header first).
    pub fn parse(text: &str) -> Result<Self, SimError> {
        let err = |d: String| SimError::Parse {
            what: "variability CSV".into(),
            detail: d,
        };
        let mut q = Vec::new();
        for (i, line) in text.lines().enumerate().skip(1) {
            if line.trim().is_empty() {
                continue;
            }
            let mut f = line.split(',');
            let mut num = || -> Result<f64, SimError> {
                f.next()
                    .and_then(|x| x.trim().parse::<f64>().ok())
                    .filter(|x| x.is_finite() && *x >= 0.0)
                    .ok_or_else(|| {
                        err(format!("line {}: expected two non-negative numbers", i + 1))
                    })
            };
            q.push((num()?, num()?));
        }
        if q.len() < 2 || q.windows(2).any(|w| w[1].0 <= w[0].0 || w[1].1 < w[0].1) {
            return Err(err(
                "need at least two rows with increasing quantiles and values".into(),
            ));
        }
        Ok(Self { quantiles: q })
    }

    /// Constant 1 (no variability), for tests and ablations.
    pub fn constant() -> Self {
        Self {
            quantiles: vec![(0.0, 1.0), (1.0, 1.0)],
        }
    }

    /// Value at probability `u` in [0, 1], linear between quantiles.
    pub fn at(&self, u: f64) -> f64 {
        let q = &self.quantiles;
        let u = u.clamp(q[0].0, q[q.len() - 1].0);
        let i = q.partition_point(|p| p.0 <= u).clamp(1, q.len() - 1);
        let (a, b) = (q[i - 1], q[i]);
        a.1 + (b.1 - a.1) * (u - a.0) / (b.0 - a.0)
    }
}

/// Classes and per-epoch volumes for one topology.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Hyperapps with reuse and standalone footprints.
    pub hyperapps: Vec<Hyperapp>,
    /// Per-application standalone footprint (its specific part plus its own modules).
    pub app_footprint: Vec<f64>,
    /// One class per (OD pair, hyperapp); `volume` holds the mean.
    pub classes: Vec<TrafficClass>,
    /// `epochs[e][c]`.
    pub epochs: Vec<Vec<f64>>,
    /// Number of PoPs.
    pub nodes: usize,
    /// The applications behind the hyperapps.
    pub apps: Vec<Application>,
    /// Their reusable modules.
    pub modules: Vec<Module>,
    /// Policy order between applications.
    pub order: Vec<(String, String)>,
    /// Epoch 0 split by traffic kind (for the strawman relaxation).
    pub kind_classes: Vec<KindClass>,
}

/// Builds the workload: gravity-model means (exponential masses, Roughan 2005), shortest
/// paths, and `epochs` variability draws per (pair, kind).
pub fn build_workload(
    topo: &Topology,
    var: &Variability,
    epochs: usize,
    seed: u64,
) -> Result<Workload, SimError> {
    let n = topo.nodes.len();
    if n < 2 {
        return Err(SimError::Config(format!(
            "{} has fewer than two PoPs",
            topo.name
        )));
    }
    let graph = Graph::new(n, &topo.edges)?;
    let paths = graph.all_pairs_paths()?;
    let (apps, modules, order) = paper_apps();
    let hyperapps = derive_hyperapps(&apps, &modules, &order, 1)?;
    let app_footprint: Vec<f64> = apps
        .iter()
        .map(|a| {
            a.specific[0]
                + a.modules
                    .iter()
                    .map(|m| {
                        modules
                            .iter()
                            .find(|x| &x.name == m)
                            .map_or(0.0, |x| x.footprint[0])
                    })
                    .sum::<f64>()
        })
        .collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let out_mass: Vec<f64> = (0..n).map(|_| exp1(&mut rng)).collect();
    let in_mass: Vec<f64> = (0..n).map(|_| exp1(&mut rng)).collect();
    let total_in: f64 = in_mass.iter().sum();
    let kind_h: Vec<usize> = KINDS
        .iter()
        .map(|(k, _)| {
            hyperapps
                .iter()
                .position(|h| h.kinds.iter().any(|x| x == k))
                .expect("every kind has an app")
        })
        .collect();
    let mut classes = Vec::new();
    // For every class, the (kind share) components that make it up.
    let mut parts: Vec<Vec<(usize, f64)>> = Vec::new();
    for s in 0..n {
        for d in 0..n {
            if s == d {
                continue;
            }
            // 1000 units of traffic per unit of source mass, split by destination mass.
            let mean = 1000.0 * out_mass[s] * in_mass[d] / (total_in - in_mass[s]).max(1e-12);
            for (h, _) in hyperapps.iter().enumerate() {
                let shares: Vec<(usize, f64)> = KINDS
                    .iter()
                    .enumerate()
                    .zip(&kind_h)
                    .filter(|(_, &kh)| kh == h)
                    .map(|((k, (_, sh)), _)| (k, mean * sh))
                    .collect();
                if shares.is_empty() {
                    continue;
                }
                classes.push(TrafficClass {
                    path: paths[s][d].clone(),
                    volume: shares.iter().map(|x| x.1).sum(),
                    hyperapp: h,
                });
                parts.push(shares);
            }
        }
    }
    let mut kind_classes = Vec::new();
    let epochs: Vec<Vec<f64>> = (0..epochs)
        .map(|e| {
            parts
                .iter()
                .zip(&classes)
                .map(|(p, c)| {
                    p.iter()
                        .map(|&(k, m)| {
                            let v = m * var.at(rng.gen());
                            if e == 0 {
                                kind_classes.push(KindClass {
                                    path: c.path.clone(),
                                    volume: v,
                                    kind: KINDS[k].0.to_string(),
                                });
                            }
                            v
                        })
                        .sum()
                })
                .collect()
        })
        .collect();
    Ok(Workload {
        hyperapps,
        app_footprint,
        classes,
        epochs,
        nodes: n,
        apps,
        modules,
        order,
        kind_classes,
    })
}

impl Workload {
    fn footprints(&self, reuse: bool) -> Vec<Vec<f64>> {
        self.hyperapps
            .iter()
            .map(|h| {
                if reuse {
                    h.footprint_reuse.clone()
                } else {
                    h.footprint_standalone.clone()
                }
            })
            .collect()
    }

    /// `work[n][app]` in epoch `e`: standalone work of each app at each ingress.
    fn ingress_app_work(&self, vols: &[f64]) -> Vec<Vec<f64>> {
        let apps = self.app_footprint.len();
        let mut w = vec![vec![0.0; apps]; self.nodes];
        for (c, &v) in self.classes.iter().zip(vols) {
            for &a in &self.hyperapps[c.hyperapp].apps {
                w[c.path[0]][a] += v * self.app_footprint[a];
            }
        }
        w
    }

    /// Today's deployment: one standalone box per (ingress, app), each provisioned for
    /// its own peak. Returns `prov[n][app]`.
    pub fn standalone_ingress(&self) -> Vec<Vec<f64>> {
        let apps = self.app_footprint.len();
        let mut prov = vec![vec![0.0; apps]; self.nodes];
        for vols in &self.epochs {
            for (n, row) in self.ingress_app_work(vols).iter().enumerate() {
                for (a, &w) in row.iter().enumerate() {
                    prov[n][a] = f64::max(prov[n][a], w);
                }
            }
        }
        prov
    }

    /// CoMb's minimum provisioning over all epochs.
    pub fn comb_provisioning(&self, strategy: Strategy, reuse: bool) -> Result<Vec<f64>, SimError> {
        let p = ProvisioningProblem {
            nodes: self.nodes,
            footprints: self.footprints(reuse),
            classes: self.classes.clone(),
            epochs: self.epochs.clone(),
        };
        Ok(min_provisioning(&p, strategy)?
            .prov
            .into_iter()
            .map(|r| r[0])
            .collect())
    }

    /// Footprint of a set of applications sharing modules, minus modules in `already`.
    fn group_footprint(&self, apps: &[usize], already: &[&str]) -> f64 {
        let mut used: Vec<&str> = already.to_vec();
        let mut f = 0.0;
        for &a in apps {
            f += self.apps[a].specific[0];
            for m in &self.apps[a].modules {
                if !used.contains(&m.as_str()) {
                    used.push(m);
                    f += self
                        .modules
                        .iter()
                        .find(|x| &x.name == m)
                        .map_or(0.0, |x| x.footprint[0]);
                }
            }
        }
        f
    }

    /// CoMb's two-step provisioning cost (Table 5) with the named applications pinned
    /// to the ingress.
    pub fn two_step_cost(&self, pinned: &[&str], strategy: Strategy) -> Result<f64, SimError> {
        let is_pinned = |a: usize| pinned.contains(&self.apps[a].name.as_str());
        let mut distributable = Vec::new();
        let mut parts = Vec::new();
        for h in &self.hyperapps {
            let p: Vec<usize> = h.apps.iter().copied().filter(|&a| is_pinned(a)).collect();
            let q: Vec<usize> = h.apps.iter().copied().filter(|&a| !is_pinned(a)).collect();
            let p_modules: Vec<&str> = p
                .iter()
                .flat_map(|&a| self.apps[a].modules.iter().map(String::as_str))
                .collect();
            distributable.push(vec![self.group_footprint(&q, &[])]);
            parts.push(PinnedPart {
                fixed: vec![self.group_footprint(&p, &[])],
                at_ingress: vec![self.group_footprint(&q, &p_modules)],
            });
        }
        let problem = ProvisioningProblem {
            nodes: self.nodes,
            footprints: distributable,
            classes: self.classes.clone(),
            epochs: self.epochs.clone(),
        };
        let pinned_parts: Vec<PinnedPart> = self
            .classes
            .iter()
            .map(|c| parts[c.hyperapp].clone())
            .collect();
        Ok(min_provisioning_two_step(&problem, &pinned_parts, strategy)?.cost)
    }

    /// Per-epoch ratio of the standalone-ingress maximum load to CoMb's (Path, reuse),
    /// with `node_prov[n]` total resources per node split among standalone apps in
    /// proportion to their mean workload there.
    pub fn load_ratios(&self, node_prov: &[f64]) -> Result<Vec<f64>, SimError> {
        self.load_ratios_with(node_prov, |_| {})
    }

    /// [`Self::load_ratios`], calling `on_epoch(e)` after each epoch (progress).
    pub fn load_ratios_with(
        &self,
        node_prov: &[f64],
        mut on_epoch: impl FnMut(usize),
    ) -> Result<Vec<f64>, SimError> {
        let apps = self.app_footprint.len();
        let mut mean_work = vec![vec![0.0; apps]; self.nodes];
        for vols in &self.epochs {
            for (n, row) in self.ingress_app_work(vols).iter().enumerate() {
                for (a, &w) in row.iter().enumerate() {
                    mean_work[n][a] += w / self.epochs.len() as f64;
                }
            }
        }
        let footprints = self.footprints(true);
        let mut out = Vec::with_capacity(self.epochs.len());
        for vols in &self.epochs {
            let work = self.ingress_app_work(vols);
            let mut standalone = 0.0f64;
            for n in 0..self.nodes {
                let total: f64 = mean_work[n].iter().sum();
                for a in 0..apps {
                    if work[n][a] > 0.0 {
                        let prov = node_prov[n] * mean_work[n][a] / total.max(1e-12);
                        standalone = standalone.max(if prov > 0.0 {
                            work[n][a] / prov
                        } else {
                            f64::INFINITY
                        });
                    }
                }
            }
            let classes: Vec<TrafficClass> = self
                .classes
                .iter()
                .zip(vols)
                .map(|(c, &v)| TrafficClass {
                    volume: v,
                    ..c.clone()
                })
                .collect();
            let problem = NetworkProblem {
                prov: node_prov.iter().map(|&p| vec![p]).collect(),
                footprints: footprints.clone(),
                classes,
                node_footprints: Vec::new(),
            };
            let comb = max_load(&problem)?;
            out.push(standalone / comb.max(1e-12));
            on_epoch(out.len());
        }
        Ok(out)
    }

    /// Mean traffic traversing each node (ingress, transit and egress).
    pub fn mean_node_volume(&self) -> Vec<f64> {
        let mut v = vec![0.0; self.nodes];
        for vols in &self.epochs {
            for (c, &x) in self.classes.iter().zip(vols) {
                for &n in &c.path {
                    v[n] += x / self.epochs.len() as f64;
                }
            }
        }
        v
    }

    /// Epoch 0's optimum under the strawman relaxation and under the hyperapp model
    /// (Path, reuse), with `node_prov` per node: `(strawman, hyperapp)`. The relative gap
    /// `hyperapp / strawman - 1` bounds the hyperapp model's suboptimality (§7.4).
    pub fn strawman_gap(&self, node_prov: &[f64]) -> Result<(f64, f64), SimError> {
        let prov: Vec<Vec<f64>> = node_prov.iter().map(|&p| vec![p]).collect();
        let straw = strawman_min_max_load(
            &prov,
            &self.apps,
            &self.modules,
            &self.order,
            &self.kind_classes,
        )?;
        let hyper = max_load(&self.epoch_problem(0, node_prov))?;
        Ok((straw, hyper))
    }

    /// The single-epoch load-balancing problem of epoch `e` (for timing, Table 7).
    pub fn epoch_problem(&self, e: usize, node_prov: &[f64]) -> NetworkProblem {
        NetworkProblem {
            prov: node_prov.iter().map(|&p| vec![p]).collect(),
            footprints: self.footprints(true),
            classes: self
                .classes
                .iter()
                .zip(&self.epochs[e])
                .map(|(c, &v)| TrafficClass {
                    volume: v,
                    ..c.clone()
                })
                .collect(),
            node_footprints: Vec::new(),
        }
    }

    /// Accelerator experiment (node-dependent footprints, §4.3): epoch `e`'s load
    /// balancing with a signature-matching accelerator at each of `accel_nodes`. There,
    /// every hyperapp containing the IDS moves `offload` (0..=1) of the IDS-specific work
    /// from the CPU to a second resource, the accelerator, whose capacity equals the
    /// node's CPU provisioning; elsewhere the accelerator capacity is zero.
    pub fn accel_problem(
        &self,
        e: usize,
        node_prov: &[f64],
        accel_nodes: &[usize],
        offload: f64,
    ) -> Result<NetworkProblem, SimError> {
        if !(0.0..=1.0).contains(&offload) {
            return Err(SimError::Config(format!(
                "accelerator offload {offload} must be within [0, 1]"
            )));
        }
        let ids = self
            .apps
            .iter()
            .position(|a| a.name == "ids")
            .ok_or_else(|| SimError::Config("no IDS application to accelerate".into()))?;
        let moved = offload * self.apps[ids].specific[0];
        let base = self.epoch_problem(e, node_prov);
        let mut node_footprints = Vec::new();
        for &n in accel_nodes {
            for (h, hyper) in self.hyperapps.iter().enumerate() {
                if hyper.apps.contains(&ids) {
                    node_footprints.push(NodeFootprint {
                        node: n,
                        hyperapp: h,
                        footprint: vec![hyper.footprint_reuse[0] - moved, moved],
                    });
                }
            }
        }
        Ok(NetworkProblem {
            prov: node_prov
                .iter()
                .enumerate()
                .map(|(n, &p)| vec![p, if accel_nodes.contains(&n) { p } else { 0.0 }])
                .collect(),
            footprints: base.footprints.iter().map(|f| vec![f[0], 0.0]).collect(),
            classes: base.classes,
            node_footprints,
        })
    }
}

/// The one-epoch load-balancing problem that
/// `build_workload(topo, var, 1, seed)?.epoch_problem(0, &w.mean_node_volume())` gives,
/// directly in the transportation form of the max-flow solver
/// ([`sluice_optimizer::comb::min_max_load_transport`]): one group per set of eligible
/// nodes under `strategy`, holding the work (volume × reuse footprint) of every class
/// with that set, and each node's capacity equal to the traffic through it.
///
/// It streams over sources and never holds every class or path at once: on KDL (567,762
/// PoP pairs, 1.7 million classes) it peaks at 0.8 GB with the solve, where the
/// [`Workload`] and the per-class solve reach 2.5 GB. Volumes, capacities and routes are
/// the same as the workload's: the same random draws in the same order, the same
/// shortest paths, the same summation order per node.
pub fn stream_epoch_transport(
    topo: &Topology,
    var: &Variability,
    seed: u64,
    strategy: Strategy,
) -> Result<TransportProblem, SimError> {
    let n = topo.nodes.len();
    if n < 2 {
        return Err(SimError::Config(format!(
            "{} has fewer than two PoPs",
            topo.name
        )));
    }
    let graph = Graph::new(n, &topo.edges)?;
    let (apps, modules, order) = paper_apps();
    let hyperapps = derive_hyperapps(&apps, &modules, &order, 1)?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let out_mass: Vec<f64> = (0..n).map(|_| exp1(&mut rng)).collect();
    let in_mass: Vec<f64> = (0..n).map(|_| exp1(&mut rng)).collect();
    let total_in: f64 = in_mass.iter().sum();
    // Per hyperapp: its traffic kinds' shares (build_workload's class order).
    let shares: Vec<Vec<f64>> = hyperapps
        .iter()
        .map(|h| {
            KINDS
                .iter()
                .filter(|(k, _)| h.kinds.iter().any(|x| x == k))
                .map(|&(_, sh)| sh)
                .collect()
        })
        .collect();
    let footprint: Vec<f64> = hyperapps.iter().map(|h| h.footprint_reuse[0]).collect();
    let mut capacity = vec![0.0; n];
    let mut groups: Vec<WorkGroup> = Vec::new();
    let mut keys: HashMap<Vec<NodeId>, usize> = HashMap::new();
    // The workload draws every class's variability after all masses, in class order
    // (source, destination, hyperapp, kind); streaming in that order draws the same.
    for s in 0..n {
        let paths = graph.paths_from(s)?;
        for (d, path) in paths.iter().enumerate() {
            if s == d {
                continue;
            }
            let mean = 1000.0 * out_mass[s] * in_mass[d] / (total_in - in_mass[s]).max(1e-12);
            let mut key: Option<usize> = None;
            for (h, sh) in shares.iter().enumerate() {
                if sh.is_empty() {
                    continue;
                }
                let volume: f64 = sh.iter().map(|&x| mean * x * var.at(rng.gen())).sum();
                for &v in path {
                    capacity[v] += volume;
                }
                if volume == 0.0 {
                    continue;
                }
                let g = *key.get_or_insert_with(|| {
                    let eligible = strategy.eligible(path);
                    let mut sorted = eligible.clone();
                    sorted.sort_unstable();
                    *keys.entry(sorted).or_insert_with(|| {
                        groups.push(WorkGroup {
                            eligible,
                            work: 0.0,
                        });
                        groups.len() - 1
                    })
                });
                groups[g].work += volume * footprint[h];
            }
        }
    }
    Ok(TransportProblem { capacity, groups })
}

/// CoMb's min-max load (Path) through the aggregated model, which has the same optimum
/// as the per-class one with several times fewer variables.
pub fn max_load(problem: &NetworkProblem) -> Result<f64, SimError> {
    Ok(
        min_max_load_model_aggregated(problem, Strategy::Path, false)?
            .solve(&SolverOptions::default())?
            .max_load,
    )
}

/// Provisioning results for one topology (Fig. 12, Fig. 13, Table 6).
#[derive(Debug, Clone, PartialEq)]
pub struct ProvisioningSummary {
    /// Topology name.
    pub topology: String,
    /// PoPs.
    pub pops: usize,
    /// Standalone-ingress cost.
    pub standalone_cost: f64,
    /// Savings `Cost_standalone / Cost_CoMb` for Path, Edge, Ingress (with reuse).
    pub savings: [f64; 3],
    /// Savings with Path and no module reuse (Fig. 12's second bar).
    pub savings_no_reuse: f64,
    /// Largest standalone box over the largest CoMb box, for Path, Edge, Ingress.
    pub largest_box_ratio: [f64; 3],
    /// Table 5 savings with cache and load balancer pinned to the ingress: two-step
    /// (Path for the rest) and ingress-only.
    pub constrained: [f64; 2],
}

/// Runs the provisioning comparison for one workload.
pub fn provisioning_summary(
    topo: &Topology,
    w: &Workload,
) -> Result<ProvisioningSummary, SimError> {
    provisioning_summary_with(topo, w, |_| {})
}

/// [`provisioning_summary`], calling `stage(name)` before each LP (progress).
pub fn provisioning_summary_with(
    topo: &Topology,
    w: &Workload,
    mut stage: impl FnMut(&str),
) -> Result<ProvisioningSummary, SimError> {
    let standalone = w.standalone_ingress();
    let standalone_cost: f64 = standalone.iter().flatten().sum();
    let largest_standalone = standalone.iter().flatten().copied().fold(0.0, f64::max);
    let mut savings = [0.0; 3];
    let mut largest = [0.0; 3];
    for (i, s) in [Strategy::Path, Strategy::Edge, Strategy::Ingress]
        .into_iter()
        .enumerate()
    {
        stage(&format!("provisioning {s:?}"));
        let prov = w.comb_provisioning(s, true)?;
        savings[i] = standalone_cost / prov.iter().sum::<f64>();
        largest[i] = largest_standalone / prov.iter().copied().fold(0.0, f64::max);
    }
    stage("provisioning without reuse");
    let no_reuse: f64 = w.comb_provisioning(Strategy::Path, false)?.iter().sum();
    let pinned = ["cache", "loadbalancer"];
    stage("two-step provisioning (Path)");
    let two_step = w.two_step_cost(&pinned, Strategy::Path)?;
    stage("two-step provisioning (Ingress)");
    let ingress_only = w.two_step_cost(&pinned, Strategy::Ingress)?;
    let constrained = [standalone_cost / two_step, standalone_cost / ingress_only];
    Ok(ProvisioningSummary {
        topology: topo.name.clone(),
        pops: topo.nodes.len(),
        standalone_cost,
        savings,
        savings_no_reuse: standalone_cost / no_reuse,
        largest_box_ratio: largest,
        constrained,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(n: usize) -> Topology {
        Topology {
            name: "line".into(),
            nodes: (0..n).map(|i| format!("n{i}")).collect(),
            edges: (1..n).map(|i| (i - 1, i, 1.0)).collect(),
        }
    }

    #[test]
    fn hyperapps_and_footprints_follow_table_3() {
        let (apps, modules, order) = paper_apps();
        let hs = derive_hyperapps(&apps, &modules, &order, 1).unwrap();
        // http: all four; nfs: flowmon+cache; udp and other-tcp share flowmon+ids.
        assert_eq!(hs.len(), 3);
        let http = hs
            .iter()
            .find(|h| h.kinds.contains(&"http".to_string()))
            .unwrap();
        assert_eq!(http.apps, vec![0, 1, 2, 3]);
        assert!(http.footprint_reuse[0] < http.footprint_standalone[0]);
        // Flow monitor: session is 73% of its standalone cost.
        let fm = 1.0 / (1.0 + apps[0].specific[0]);
        assert!((fm - 0.73).abs() < 1e-9);
    }

    #[test]
    fn variability_interpolates_quantiles() {
        let v = Variability::parse("quantile,volume_over_mean\n0,0.5\n0.5,1.0\n1,3.0\n").unwrap();
        assert!((v.at(0.25) - 0.75).abs() < 1e-12);
        assert!((v.at(0.75) - 2.0).abs() < 1e-12);
        assert!(Variability::parse("q,v\n0,1\n").is_err());
        assert!(Variability::parse("q,v\n0,1\n0.5,x\n").is_err());
    }

    #[test]
    fn comb_beats_standalone_ingress_and_path_beats_ingress() {
        let topo = line(4);
        let w = build_workload(&topo, &Variability::constant(), 3, 5).unwrap();
        let s = provisioning_summary(&topo, &w).unwrap();
        // Reuse alone must save (same epochs, same locations) and Path >= Edge >= Ingress.
        assert!(s.savings[2] > 1.0, "{s:?}");
        assert!(
            s.savings[0] + 1e-9 >= s.savings[1] && s.savings[1] + 1e-9 >= s.savings[2],
            "{s:?}"
        );
        assert!(s.savings[0] > s.savings_no_reuse);
        // Pinning apps can only cost more than distributing everything, and two-step
        // is at least as good as pinning everything to the ingress.
        assert!(
            s.constrained[0] <= s.savings[0] + 1e-9 && s.constrained[0] + 1e-9 >= s.constrained[1],
            "{s:?}"
        );
        // Ingress-only two-step equals the plain Ingress strategy (same boxes, same reuse).
        assert!((s.constrained[1] - s.savings[2]).abs() < 1e-6, "{s:?}");
        let r = w.load_ratios(&[1000.0; 4]).unwrap();
        let (straw, hyper) = w.strawman_gap(&[1000.0; 4]).unwrap();
        assert!(straw <= hyper + 1e-9 && straw > 0.0, "{straw} {hyper}");
        assert!(r.iter().all(|&x| x >= 1.0 - 1e-9), "{r:?}");
    }

    #[test]
    fn ids_accelerators_lower_the_max_load() {
        let topo = line(4);
        let w = build_workload(&topo, &Variability::constant(), 1, 5).unwrap();
        let prov = w.mean_node_volume();
        let base = max_load(&w.epoch_problem(0, &prov)).unwrap();
        // No offload: same optimum as without the accelerator resource.
        let same = max_load(&w.accel_problem(0, &prov, &[1, 2], 0.0).unwrap()).unwrap();
        assert!((same - base).abs() <= 1e-7 * base, "{same} vs {base}");
        let fast = max_load(&w.accel_problem(0, &prov, &[1, 2], 0.9).unwrap()).unwrap();
        assert!(fast < base * 0.99, "{fast} vs {base}");
        // More accelerators never hurt.
        let all = max_load(&w.accel_problem(0, &prov, &[0, 1, 2, 3], 0.9).unwrap()).unwrap();
        assert!(all <= fast + 1e-9, "{all} vs {fast}");
        assert!(matches!(
            w.accel_problem(0, &prov, &[1], 1.5),
            Err(SimError::Config(_))
        ));
        assert!(matches!(
            w.accel_problem(0, &prov, &[9], 0.5)
                .map(|p| max_load(&p))
                .unwrap(),
            Err(SimError::Comb(_))
        ));
    }

    fn zoo(name: &str) -> Topology {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../data/topology-zoo")
            .join(format!("{name}.graphml"));
        crate::topology::load(&path).unwrap()
    }

    fn rel(a: f64, b: f64) -> f64 {
        (a - b).abs() / a.abs().max(b.abs())
    }

    #[test]
    fn max_flow_matches_the_lp_on_real_topologies() {
        use sluice_optimizer::comb::{
            min_max_load, min_max_load_flow, min_max_load_transport, CombError,
        };
        // The Abilene-like spread of volumes exercises the random draws' order.
        let spread =
            Variability::parse("quantile,volume_over_mean\n0,0.2\n0.5,0.9\n0.9,2.0\n1,4.0\n")
                .unwrap();
        for topo in [zoo("Abilene"), zoo("Geant2001"), line(5)] {
            for (var, seed) in [(Variability::constant(), 1), (spread.clone(), 7)] {
                let w = build_workload(&topo, &var, 1, seed).unwrap();
                let prov = w.mean_node_volume();
                let p = w.epoch_problem(0, &prov);
                for strategy in [Strategy::Path, Strategy::Edge] {
                    let name = format!("{} seed {seed} {strategy:?}", topo.name);
                    let full = min_max_load(&p, strategy, false).unwrap();
                    let agg = min_max_load_model_aggregated(&p, strategy, false)
                        .unwrap()
                        .solve(&SolverOptions::default())
                        .unwrap()
                        .max_load;
                    let flow = min_max_load_flow(&p, strategy, false).unwrap();
                    assert!(rel(flow.max_load, full.max_load) <= 1e-6, "{name}");
                    assert!(rel(flow.max_load, agg) <= 1e-6, "{name}");
                    for fr in &flow.fractions {
                        assert!((fr.iter().map(|x| x.1).sum::<f64>() - 1.0).abs() < 1e-9);
                    }
                    // Streaming builds the same problem without the classes.
                    let t = stream_epoch_transport(&topo, &var, seed, strategy).unwrap();
                    assert_eq!(t.capacity, prov, "{name}");
                    let work: f64 = t.groups.iter().map(|g| g.work).sum();
                    let want: f64 = p
                        .classes
                        .iter()
                        .map(|c| c.volume * p.footprints[c.hyperapp][0])
                        .sum();
                    assert!(rel(work, want) < 1e-12, "{name}: {work} vs {want}");
                    assert!(t.groups.len() * 3 <= p.classes.len(), "{name}");
                    let s = min_max_load_transport(&t).unwrap();
                    assert!(rel(s.max_load, flow.max_load) < 1e-9, "{name}");
                    assert!(s.max_load <= s.lower_bound * (1.0 + 1e-9), "{name}");
                }
            }
            // Node-dependent footprints: a uniformly faster PoP factors exactly; an
            // accelerator (a second resource) is left to the LP.
            let w = build_workload(&topo, &Variability::constant(), 1, 3).unwrap();
            let prov = w.mean_node_volume();
            let mut p = w.epoch_problem(0, &prov);
            p.node_footprints = (0..p.footprints.len())
                .map(|h| NodeFootprint {
                    node: 1,
                    hyperapp: h,
                    footprint: vec![p.footprints[h][0] / 3.0],
                })
                .collect();
            let lp = max_load(&p).unwrap();
            let flow = min_max_load_flow(&p, Strategy::Path, false).unwrap();
            assert!(rel(flow.max_load, lp) <= 1e-6, "{}", topo.name);
            let accel = w.accel_problem(0, &prov, &[1], 0.5).unwrap();
            assert!(matches!(
                min_max_load_flow(&accel, Strategy::Path, false),
                Err(CombError::NotTransportation(_))
            ));
        }
    }

    #[test]
    fn disconnected_topologies_are_reported() {
        let mut t = line(4);
        t.edges.pop();
        assert!(matches!(
            build_workload(&t, &Variability::constant(), 1, 1),
            Err(SimError::Graph(_))
        ));
        assert!(matches!(
            stream_epoch_transport(&t, &Variability::constant(), 1, Strategy::Path),
            Err(SimError::Graph(_))
        ));
    }
}
