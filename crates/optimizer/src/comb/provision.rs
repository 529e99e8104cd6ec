//! The provisioning variant: minimum resources so that every traffic epoch fits.

use super::*;

/// Inputs of the provisioning LP: classes (their `volume` is ignored) and the per-epoch
/// volume of every class.
#[derive(Debug, Clone, PartialEq)]
pub struct ProvisioningProblem {
    /// Number of nodes.
    pub nodes: usize,
    /// `footprints[h][r]`: per-unit-volume footprint of hyperapp `h` on resource `r`.
    pub footprints: Vec<Vec<f64>>,
    /// Paths and hyperapps of the classes.
    pub classes: Vec<TrafficClass>,
    /// `epochs[e][c]`: volume of class `c` in epoch `e`.
    pub epochs: Vec<Vec<f64>>,
}

/// Output of [`min_provisioning`].
#[derive(Debug, Clone, PartialEq)]
pub struct Provisioning {
    /// `prov[n][r]`: resources to provision at node `n`.
    pub prov: Vec<Vec<f64>>,
    /// Total cost `sum_{n,r} prov[n][r]`.
    pub cost: f64,
}

/// Minimises `sum_{n,r} Prov_{n,r}` such that, in every epoch, some assignment `d^e`
/// (recomputed per epoch, as the controller would) keeps every node within capacity.
///
/// Solved by epoch generation, with the same optimum as
/// [`min_provisioning_monolithic`] (up to a relative tolerance of 1e-7): the LP holds
/// the assignments of a few epochs only; every other epoch is checked against its
/// provisioning and the worst violators join it, until every epoch fits. Only the
/// provisioning couples epochs, so each check is independent and small. With one
/// resource a check is a maximum flow (class groups to nodes): an epoch fits iff every
/// node set `T` has `Prov(T) >=` the work of the classes that can only be processed
/// inside `T` (Hall's condition), and the minimum cut of a violated epoch is also
/// added to the LP as such a cut. With several resources the check is the epoch's
/// min-max-load LP (after trying assignments already known to fit).
pub fn min_provisioning(
    problem: &ProvisioningProblem,
    strategy: Strategy,
) -> Result<Provisioning, CombError> {
    EpochGroups::new(problem, strategy, None)?.solve_by_epochs()
}

/// [`min_provisioning`] as one LP holding every epoch's assignment (classes with the
/// same eligible nodes and footprint profile share split variables). Its size grows
/// with the number of epochs; the decomposed solver avoids that.
pub fn min_provisioning_monolithic(
    problem: &ProvisioningProblem,
    strategy: Strategy,
) -> Result<Provisioning, CombError> {
    let g = EpochGroups::new(problem, strategy, None)?;
    let all: Vec<usize> = (0..g.vol.len()).collect();
    Ok(g.master(&all, &[])?.0)
}

/// The ingress-pinned part of a class for the two-step formulation (§7.3).
#[derive(Debug, Clone, PartialEq)]
pub struct PinnedPart {
    /// Per-unit-volume footprint (per resource) of the applications that must run at the
    /// ingress; always charged to the ingress (step one).
    pub fixed: Vec<f64>,
    /// Footprint of the distributable applications when they run at the ingress, where
    /// they reuse the pinned applications' modules; elsewhere the class's hyperapp
    /// footprint applies.
    pub at_ingress: Vec<f64>,
}

/// CoMb's two-step provisioning for topologically constrained applications (§7.3): step
/// one charges `pinned[c].fixed` to each class's ingress; step two distributes the rest as
/// in [`min_provisioning`], with the reduced footprint `pinned[c].at_ingress` at the
/// ingress. `problem.footprints` holds the distributable part's footprint elsewhere.
///
/// Solved by epoch generation: an LP over a few epochs gives a provisioning; every other
/// epoch is checked against it (first by reusing a known assignment, else by its own
/// min-max-load LP) and the worst violators join the LP, until every epoch fits (within
/// a relative tolerance of 1e-7).
pub fn min_provisioning_two_step(
    problem: &ProvisioningProblem,
    pinned: &[PinnedPart],
    strategy: Strategy,
) -> Result<Provisioning, CombError> {
    EpochGroups::new(problem, strategy, Some(pinned))?.solve_by_epochs()
}

/// [`min_provisioning_two_step`] as one LP over all epochs (for tests and comparisons).
pub fn min_provisioning_two_step_monolithic(
    problem: &ProvisioningProblem,
    pinned: &[PinnedPart],
    strategy: Strategy,
) -> Result<Provisioning, CombError> {
    let g = EpochGroups::new(problem, strategy, Some(pinned))?;
    let all: Vec<usize> = (0..g.vol.len()).collect();
    Ok(g.master(&all, &[])?.0)
}

/// Relative tolerance of the decomposed provisioning solvers.
const PROV_TOL: f64 = 1e-7;

/// Classes of a provisioning problem grouped for all epochs at once: members of a group
/// have the same eligible nodes and per-node footprints proportional to their volume,
/// so only their summed volume matters.
pub(super) struct EpochGroups {
    nodes: usize,
    resources: usize,
    /// `(eligible nodes, footprint per eligible node and resource)`.
    groups: Vec<(Vec<NodeId>, Vec<Vec<f64>>)>,
    /// `vol[e][g]`: summed volume of group `g` in epoch `e`.
    vol: Vec<Vec<f64>>,
    /// `fixed[e][n * resources + r]`: pinned work charged to node `n` in epoch `e`.
    fixed: Vec<Vec<f64>>,
}

/// A split of every group over its eligible nodes (`split[g][i]`).
type Split = Vec<Vec<f64>>;

impl EpochGroups {
    pub(super) fn new(
        problem: &ProvisioningProblem,
        strategy: Strategy,
        pinned: Option<&[PinnedPart]>,
    ) -> Result<Self, CombError> {
        let nodes = problem.nodes;
        let resources = problem.footprints.first().map_or(0, Vec::len);
        check_classes(nodes, &problem.footprints, resources, &problem.classes)?;
        if let Some(pinned) = pinned {
            if pinned.len() != problem.classes.len() {
                return Err(CombError::AppSpec(format!(
                    "{} pinned parts for {} classes",
                    pinned.len(),
                    problem.classes.len()
                )));
            }
            for (c, p) in pinned.iter().enumerate() {
                let ok = |v: &Vec<f64>| {
                    v.len() == resources && v.iter().all(|x| x.is_finite() && *x >= 0.0)
                };
                if !ok(&p.fixed) || !ok(&p.at_ingress) {
                    return Err(CombError::AppSpec(format!(
                        "class {c}: pinned footprints need {resources} non-negative finite entries"
                    )));
                }
            }
        }
        for (e, vols) in problem.epochs.iter().enumerate() {
            if vols.len() != problem.classes.len() {
                return Err(CombError::EpochShape {
                    epoch: e,
                    got: vols.len(),
                    expected: problem.classes.len(),
                });
            }
            if let Some((c, &v)) = vols
                .iter()
                .enumerate()
                .find(|(_, v)| !v.is_finite() || **v < 0.0)
            {
                return Err(CombError::InvalidVolume { class: c, value: v });
            }
        }
        // Group key: sorted eligible nodes and a footprint profile. With one resource
        // and no pinned part every profile is proportional (volume is scaled by the
        // footprint instead); otherwise the profile is the footprint itself, plus the
        // ingress and its reduced footprint when part of the work is pinned.
        let mut profiles: std::collections::HashMap<Vec<u64>, usize> =
            std::collections::HashMap::new();
        let mut keys: std::collections::HashMap<(Vec<NodeId>, usize), usize> =
            std::collections::HashMap::new();
        let mut groups: Vec<(Vec<NodeId>, Vec<Vec<f64>>)> = Vec::new();
        // Per class: (group, volume scale).
        let mut member: Vec<(usize, f64)> = Vec::with_capacity(problem.classes.len());
        let scalar = resources == 1 && pinned.is_none();
        for (c, class) in problem.classes.iter().enumerate() {
            let f = &problem.footprints[class.hyperapp];
            let eligible = strategy.eligible(&class.path);
            let ingress = class.path[0];
            let (profile_bits, scale): (Vec<u64>, f64) = if scalar {
                (Vec::new(), f[0])
            } else {
                let mut bits: Vec<u64> = f.iter().map(|x| x.to_bits()).collect();
                if let Some(p) = pinned {
                    bits.push(ingress as u64);
                    bits.extend(p[c].at_ingress.iter().map(|x| x.to_bits()));
                }
                (bits, 1.0)
            };
            let next = profiles.len();
            let profile = *profiles.entry(profile_bits).or_insert(next);
            let mut sorted = eligible.clone();
            sorted.sort_unstable();
            let next = groups.len();
            let g = *keys.entry((sorted, profile)).or_insert(next);
            if g == next {
                let foot = eligible
                    .iter()
                    .map(|&n| {
                        if scalar {
                            vec![1.0]
                        } else {
                            match pinned {
                                Some(p) if n == ingress => p[c].at_ingress.clone(),
                                _ => f.clone(),
                            }
                        }
                    })
                    .collect();
                groups.push((eligible, foot));
            }
            member.push((g, scale));
        }
        let mut vol = Vec::with_capacity(problem.epochs.len());
        let mut fixed = Vec::with_capacity(problem.epochs.len());
        for vols in &problem.epochs {
            let mut v = vec![0.0; groups.len()];
            for (&(g, scale), &x) in member.iter().zip(vols) {
                v[g] += x * scale;
            }
            vol.push(v);
            let mut fx = vec![0.0; nodes * resources];
            if let Some(p) = pinned {
                for ((class, &x), pin) in problem.classes.iter().zip(vols).zip(p) {
                    let n = class.path[0];
                    for (r, f) in pin.fixed.iter().enumerate() {
                        fx[n * resources + r] += x * f;
                    }
                }
            }
            fixed.push(fx);
        }
        Ok(Self {
            nodes,
            resources,
            groups,
            vol,
            fixed,
        })
    }

    fn provisioning(&self, prov: Vec<Vec<f64>>) -> Provisioning {
        let cost = prov.iter().flatten().sum();
        Provisioning { prov, cost }
    }

    /// The provisioning LP over the epochs in `subset`; also returns each epoch's split.
    /// `cuts` (one resource only): Hall cuts `Prov(T) >= W` from epochs not in `subset`.
    fn master(
        &self,
        subset: &[usize],
        cuts: &[(Vec<bool>, f64)],
    ) -> Result<(Provisioning, Vec<Split>), CombError> {
        let (nodes, resources) = (self.nodes, self.resources);
        let mut lp = LinearProgram::new(Direction::Minimise);
        let prov: Vec<Var> = (0..nodes * resources)
            .map(|_| lp.add_var(1.0, 0.0, f64::INFINITY))
            .collect();
        let mut split_vars: Vec<Vec<Vec<Var>>> = Vec::with_capacity(subset.len());
        let mut terms: Vec<Vec<(Var, f64)>> = vec![Vec::new(); nodes * resources];
        for &e in subset {
            let mut ev = Vec::with_capacity(self.groups.len());
            for ((eligible, foot), &v) in self.groups.iter().zip(&self.vol[e]) {
                let mut gv = Vec::with_capacity(eligible.len());
                for (&n, f) in eligible.iter().zip(foot) {
                    let x = lp.add_var(0.0, 0.0, 1.0);
                    for (r, &fr) in f.iter().enumerate() {
                        if fr * v > 0.0 {
                            terms[n * resources + r].push((x, fr * v));
                        }
                    }
                    gv.push(x);
                }
                lp.add_constraint(FAMILY_COVERAGE, 1.0, 1.0, gv.iter().map(|&x| (x, 1.0)));
                ev.push(gv);
            }
            for (k, t) in terms.iter_mut().enumerate() {
                let fx = self.fixed[e][k];
                if t.is_empty() && fx == 0.0 {
                    continue;
                }
                // Pinned work is a constant load: it moves to the right-hand side.
                let t = std::mem::take(t);
                lp.add_constraint(
                    FAMILY_CAPACITY,
                    f64::NEG_INFINITY,
                    -fx,
                    t.into_iter().chain([(prov[k], -1.0)]),
                );
            }
            split_vars.push(ev);
        }
        for (t, w) in cuts {
            lp.add_constraint(
                FAMILY_CAPACITY,
                *w,
                f64::INFINITY,
                (0..nodes)
                    .filter(|&n| t[n])
                    .map(|n| (prov[n * resources], 1.0)),
            );
        }
        let sol = lp.solve()?;
        let prov = (0..nodes)
            .map(|n| {
                (0..resources)
                    .map(|r| sol.value(prov[n * resources + r]).max(0.0))
                    .collect()
            })
            .collect();
        let splits = split_vars
            .iter()
            .map(|ev| {
                ev.iter()
                    .map(|gv| gv.iter().map(|&x| sol.value(x).clamp(0.0, 1.0)).collect())
                    .collect()
            })
            .collect();
        Ok((self.provisioning(prov), splits))
    }

    /// Whether `split` serves epoch `e` within `prov` (flattened, with tolerance).
    fn split_fits(&self, e: usize, split: &Split, prov: &[f64]) -> bool {
        let mut load = self.fixed[e].clone();
        for (((eligible, foot), &v), sg) in self.groups.iter().zip(&self.vol[e]).zip(split) {
            for ((&n, f), &d) in eligible.iter().zip(foot).zip(sg) {
                for (r, &fr) in f.iter().enumerate() {
                    load[n * self.resources + r] += d * v * fr;
                }
            }
        }
        load.iter()
            .zip(prov)
            .all(|(&l, &p)| l <= p * (1.0 + PROV_TOL) + 1e-9)
    }

    /// Epoch `e`'s minimum of the maximum load relative to `prov` (infinite if it cannot
    /// be served at all), with the split that reaches it.
    pub(super) fn epoch_max_load(
        &self,
        e: usize,
        prov: &[f64],
    ) -> Result<(f64, Option<Split>), CombError> {
        let resources = self.resources;
        let scale = prov.iter().copied().fold(0.0, f64::max).max(1e-300);
        let tiny = |p: f64| p <= 1e-12 * scale;
        for (k, &fx) in self.fixed[e].iter().enumerate() {
            if fx > 0.0 && tiny(prov[k]) {
                return Ok((f64::INFINITY, None));
            }
        }
        let mut lp = LinearProgram::new(Direction::Minimise);
        let lambda = lp.add_var(1.0, 0.0, f64::INFINITY);
        let mut terms: Vec<Vec<(Var, f64)>> = vec![Vec::new(); prov.len()];
        let mut vars = Vec::with_capacity(self.groups.len());
        for ((eligible, foot), &v) in self.groups.iter().zip(&self.vol[e]) {
            let mut gv = Vec::with_capacity(eligible.len());
            for (&n, f) in eligible.iter().zip(foot) {
                let blocked = f
                    .iter()
                    .enumerate()
                    .any(|(r, &fr)| fr * v > 0.0 && tiny(prov[n * resources + r]));
                let x = lp.add_var(0.0, 0.0, if blocked { 0.0 } else { 1.0 });
                for (r, &fr) in f.iter().enumerate() {
                    let k = n * resources + r;
                    if fr * v > 0.0 && !tiny(prov[k]) {
                        terms[k].push((x, fr * v / prov[k]));
                    }
                }
                gv.push(x);
            }
            lp.add_constraint(FAMILY_COVERAGE, 1.0, 1.0, gv.iter().map(|&x| (x, 1.0)));
            vars.push(gv);
        }
        for (k, t) in terms.into_iter().enumerate() {
            let fx = self.fixed[e][k];
            if t.is_empty() && fx == 0.0 {
                continue;
            }
            let rhs = if tiny(prov[k]) { 0.0 } else { -fx / prov[k] };
            lp.add_constraint(
                FAMILY_LOAD,
                f64::NEG_INFINITY,
                rhs,
                t.into_iter().chain([(lambda, -1.0)]),
            );
        }
        match lp.solve() {
            Ok(sol) => {
                let split = vars
                    .iter()
                    .map(|gv| gv.iter().map(|&x| sol.value(x).clamp(0.0, 1.0)).collect())
                    .collect();
                Ok((sol.value(lambda), Some(split)))
            }
            Err(LpError::Infeasible { .. }) => Ok((f64::INFINITY, None)),
            Err(other) => Err(other.into()),
        }
    }

    /// Epoch generation: solve over a few epochs, add the worst violated ones, repeat.
    /// With one resource and no pinned work, epochs are checked by a maximum flow, whose
    /// minimum cut also gives a Hall cut `Prov(T) >= W_e(T)` for the LP; otherwise by
    /// reusing a known split or solving the epoch's min-max-load LP.
    fn solve_by_epochs(&self) -> Result<Provisioning, CombError> {
        let epochs = self.vol.len();
        if epochs == 0 {
            return Ok(self.provisioning(vec![vec![0.0; self.resources]; self.nodes]));
        }
        let mut flow = (self.resources == 1).then(|| FlowCheck::new(self));
        // Start from the epoch with the most work.
        let total = |e: usize| -> f64 {
            self.vol[e].iter().sum::<f64>() + self.fixed[e].iter().sum::<f64>()
        };
        let first = (0..epochs)
            .max_by(|&a, &b| total(a).total_cmp(&total(b)))
            .unwrap_or(0);
        let mut subset = vec![first];
        let mut in_subset = vec![false; epochs];
        in_subset[first] = true;
        let mut cuts: Vec<(Vec<bool>, f64)> = Vec::new();
        // Splits known to be valid for some epoch, tried on the others first.
        let mut pool: Vec<Split> = Vec::new();
        loop {
            let (prov, splits) = self.master(&subset, &cuts)?;
            let flat: Vec<f64> = prov.prov.iter().flatten().copied().collect();
            let mut violated: Vec<(f64, usize)> = Vec::new();
            pool.extend(splits);
            for e in (0..epochs).filter(|&e| !in_subset[e]) {
                if let Some(fc) = flow.as_mut() {
                    match fc.check(self, e, &flat) {
                        FlowVerdict::Fits => continue,
                        FlowVerdict::Short { deficit, cut } => {
                            violated.push((deficit, e));
                            cuts.push(cut);
                            continue;
                        }
                        FlowVerdict::Unknown => {}
                    }
                }
                // Most recent splits first: they come from the current provisioning.
                if pool
                    .iter()
                    .rev()
                    .take(16)
                    .any(|s| self.split_fits(e, s, &flat))
                {
                    continue;
                }
                let (lambda, split) = self.epoch_max_load(e, &flat)?;
                if lambda > 1.0 + PROV_TOL {
                    violated.push((lambda - 1.0, e));
                } else if let Some(s) = split {
                    pool.push(s);
                }
            }
            if violated.is_empty() {
                return Ok(prov);
            }
            violated.sort_by(|a, b| b.0.total_cmp(&a.0));
            for &(_, e) in violated.iter().take(4) {
                subset.push(e);
                in_subset[e] = true;
            }
        }
    }
}

/// Outcome of [`FlowCheck::check`].
enum FlowVerdict {
    /// The epoch fits the provisioning.
    Fits,
    /// It does not: relative deficit and a violated cut `(T, W)`, `Prov(T) >= W`.
    Short { deficit: f64, cut: (Vec<bool>, f64) },
    /// Undecided (footprints differ between nodes and the bounds disagree).
    Unknown,
}

/// Feasibility of one epoch under a given provisioning (one resource): a maximum flow
/// from the source through class groups (capacity: their work) to their eligible nodes
/// and on to the sink (capacity: the node's provisioning minus its pinned work). When a
/// group's footprint differs between nodes (the two-step ingress discount), charging
/// every node the group's smallest footprint is a relaxation and charging the largest a
/// restriction: if the relaxation is short the epoch does not fit (and its cut is
/// valid), if the restriction fits it does.
struct FlowCheck {
    net: crate::maxflow::FlowNet,
    src_edges: Vec<usize>,
    sink_edges: Vec<usize>,
    first_node: usize,
    /// Per group: smallest and largest footprint over its eligible nodes.
    bounds: Vec<(f64, f64)>,
}

impl FlowCheck {
    const SRC: usize = 0;
    const SINK: usize = 1;

    fn new(g: &EpochGroups) -> Self {
        let groups = g.groups.len();
        let first_node = 2 + groups;
        let mut net = crate::maxflow::FlowNet::new(first_node + g.nodes);
        let src_edges = (0..groups)
            .map(|i| net.add_edge(Self::SRC, 2 + i, 0.0))
            .collect();
        for (i, (eligible, _)) in g.groups.iter().enumerate() {
            for &n in eligible {
                net.add_edge(2 + i, first_node + n, f64::INFINITY);
            }
        }
        let sink_edges = (0..g.nodes)
            .map(|n| net.add_edge(first_node + n, Self::SINK, 0.0))
            .collect();
        let bounds = g
            .groups
            .iter()
            .map(|(_, foot)| {
                foot.iter()
                    .map(|f| f[0])
                    .fold((f64::INFINITY, 0.0f64), |(lo, hi), x| {
                        (lo.min(x), hi.max(x))
                    })
            })
            .collect();
        Self {
            net,
            src_edges,
            sink_edges,
            first_node,
            bounds,
        }
    }

    /// Maximum flow with each group's work scaled by its low or high footprint; returns
    /// `(total work, flow)`.
    fn flow(&mut self, g: &EpochGroups, e: usize, prov: &[f64], high: bool) -> (f64, f64) {
        let mut total = 0.0;
        for ((&id, &v), &(lo, hi)) in self.src_edges.iter().zip(&g.vol[e]).zip(&self.bounds) {
            let w = v * if high { hi } else { lo };
            total += w;
            self.net.set_cap(id, w);
        }
        for (n, (&id, &p)) in self.sink_edges.iter().zip(prov).enumerate() {
            self.net.set_cap(id, (p - g.fixed[e][n]).max(0.0));
        }
        let f = self
            .net
            .max_flow(Self::SRC, Self::SINK, 1e-12 * total.max(1e-300));
        (total, f)
    }

    fn check(&mut self, g: &EpochGroups, e: usize, prov: &[f64]) -> FlowVerdict {
        let fixed = &g.fixed[e];
        let scale: f64 = g.vol[e].iter().sum::<f64>() + fixed.iter().sum::<f64>();
        if scale <= 0.0 {
            return FlowVerdict::Fits;
        }
        // Pinned work alone must fit.
        if let Some(n) =
            (0..g.nodes).max_by(|&a, &b| (fixed[a] - prov[a]).total_cmp(&(fixed[b] - prov[b])))
        {
            if fixed[n] - prov[n] > PROV_TOL * scale {
                let mut t = vec![false; g.nodes];
                t[n] = true;
                return FlowVerdict::Short {
                    deficit: (fixed[n] - prov[n]) / scale,
                    cut: (t, fixed[n]),
                };
            }
        }
        let (total, f) = self.flow(g, e, prov, false);
        if f < total - PROV_TOL * scale {
            let side = self.net.source_side(Self::SRC, 1e-12 * total);
            let t: Vec<bool> = (0..g.nodes).map(|n| side[self.first_node + n]).collect();
            let w: f64 = g
                .groups
                .iter()
                .zip(&g.vol[e])
                .zip(&self.bounds)
                .filter(|(((el, _), _), _)| el.iter().all(|&n| t[n]))
                .map(|((_, &v), &(lo, _))| v * lo)
                .sum::<f64>()
                + (0..g.nodes)
                    .filter(|&n| t[n])
                    .map(|n| fixed[n])
                    .sum::<f64>();
            return FlowVerdict::Short {
                deficit: (total - f) / scale,
                cut: (t, w),
            };
        }
        if self.bounds.iter().all(|&(lo, hi)| lo == hi) {
            return FlowVerdict::Fits;
        }
        let (total, f) = self.flow(g, e, prov, true);
        if f >= total - PROV_TOL * scale {
            FlowVerdict::Fits
        } else {
            FlowVerdict::Unknown
        }
    }
}
