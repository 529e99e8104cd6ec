//! Exact min-max load by parametric maximum flow, for problems that are transportation
//! problems.
//!
//! With one resource, the min-max-load LP of [`super::min_max_load`] asks for the
//! smallest `λ` such that every class's work can be spread over its eligible nodes
//! with no node above `λ` times its capacity. When a class's work at node `n` is
//! `volume × a_h × b_n` (a per-hyperapp footprint times a per-node factor, which
//! includes every node-independent footprint), measuring work in units of `b_n`
//! makes it the same at every node, and the problem becomes a transportation problem:
//! source → class group (capacity: its work) → eligible node → sink (capacity:
//! `λ × capacity_n / b_n`). `λ` is feasible iff the maximum flow saturates every source
//! arc, i.e. (Hall) iff `W(T) ≤ λ C(T)` for every node set `T`, where `W(T)` is the work
//! of the groups whose eligible nodes all lie in `T`. So `λ* = max_T W(T) / C(T)`, found
//! here by Newton's (Dinkelbach's) iteration on that ratio: at a `λ` below `λ*` the
//! minimum cut names the set `T` that is worst at that `λ`, and its ratio is the next
//! `λ`. Every iterate is the ratio of an actual node set, so it is a certified lower
//! bound; it rises monotonically and reaches `λ*` after a few maximum flows, each
//! continuing from the previous flow since capacities only grow.
//!
//! Node-dependent footprints that are not of that product form (e.g. an accelerator
//! that cuts one hyperapp's footprint but not the others' at the same node) make it a
//! generalised flow problem (arcs with gains), for which a maximum flow is not exact;
//! they, and several resources, are rejected with [`CombError::NotTransportation`] so
//! that callers use the LP.

use std::collections::{HashMap, HashSet};

use super::{
    check_classes, node_loads, CombError, Footprints, LoadAssignment, NetworkProblem, NodeId,
    Strategy, FAMILY_CAPACITY,
};
use crate::maxflow::FlowNet;

/// Work that can only be processed at some nodes: a group of classes with the same
/// eligible nodes, in node-normalised units (see [`TransportProblem`]).
#[derive(Debug, Clone, PartialEq)]
pub struct WorkGroup {
    /// Nodes that may process the work (a node listed twice counts once).
    pub eligible: Vec<NodeId>,
    /// Amount of work, finite and non-negative.
    pub work: f64,
}

/// The transportation form of the one-resource min-max-load problem: spread every
/// group's work over its eligible nodes so that the largest `assigned_n / capacity[n]`
/// is as small as possible.
#[derive(Debug, Clone, PartialEq)]
pub struct TransportProblem {
    /// Capacity per node in the same units as the work; a node with capacity zero
    /// takes no work.
    pub capacity: Vec<f64>,
    /// The work to place.
    pub groups: Vec<WorkGroup>,
}

/// Output of [`min_max_load_transport`].
#[derive(Debug, Clone, PartialEq)]
pub struct TransportSolution {
    /// The largest node load of the returned split. The search stops once the flow is
    /// short of the total work by at most 1e-11 of it, and that remainder is spread over
    /// the groups' own splits, so this exceeds `lower_bound` by rounding only (below
    /// 1e-9 relative on every test and benchmark network; bisection adds its 1e-10).
    pub max_load: f64,
    /// With the Newton searches, `W(T) / C(T)` for the node set `T` found last: no split
    /// can do better, so `max_load - lower_bound` bounds the distance from the optimum.
    /// With [`Search::Bisection`], the largest `λ` found infeasible.
    pub lower_bound: f64,
    /// `splits[g]`: `(node, fraction)` for every entry of group `g`'s eligible list, in
    /// that order; the fractions sum to 1 (all zero for an empty list).
    pub splits: Vec<Vec<(NodeId, f64)>>,
    /// `load[n]`: work assigned to node `n` over its capacity (0 if it has none).
    pub load: Vec<f64>,
    /// Maximum-flow runs the parametric search needed.
    pub flow_runs: usize,
}

/// How [`min_max_load_transport_with`] searches for the smallest feasible `λ`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Search {
    /// Newton's iteration on the minimum cut's ratio (exact in a few steps; default),
    /// started from the best of some Hall ratios that need no flow (often exact).
    Newton,
    /// The same iteration started from the weakest bound, the whole network's ratio,
    /// so that every step is a cut step (to measure the iteration; same result).
    NewtonCold,
    /// Bisection on `λ` with a maximum flow per step, to a relative width of 1e-10
    /// (slower; kept as an independent check of the Newton iteration).
    Bisection,
}

/// Work and capacities are scaled so that the total work is 1; flows below this count
/// as zero (f64 noise on sums of O(1) values is ~1e-16).
const EPS: f64 = 1e-15;
/// A flow short of the total work by at most this (relative) saturates it.
const DEFICIT_TOL: f64 = 1e-11;
/// Relative width at which bisection stops.
const BISECTION_TOL: f64 = 1e-10;
/// Relative tolerance of the per-node-factor check on node-dependent footprints.
const FACTOR_TOL: f64 = 1e-10;

/// [`min_max_load_transport_with`] using [`Search::Newton`].
pub fn min_max_load_transport(problem: &TransportProblem) -> Result<TransportSolution, CombError> {
    min_max_load_transport_with(problem, Search::Newton)
}

/// Solves the transportation form exactly (to floating-point precision): the smallest
/// maximum load and a split reaching it.
///
/// Errors: a capacity that is negative or not finite ([`CombError::InvalidCapacity`],
/// resource 0), a work that is negative or not finite ([`CombError::InvalidVolume`],
/// `class` = group index), an eligible node out of range ([`CombError::UnknownNode`]),
/// or a group with work whose eligible nodes all lack capacity
/// ([`CombError::NoCapacity`]). A group without work is put on its first eligible node.
pub fn min_max_load_transport_with(
    problem: &TransportProblem,
    search: Search,
) -> Result<TransportSolution, CombError> {
    let nodes = problem.capacity.len();
    for (n, &c) in problem.capacity.iter().enumerate() {
        if !c.is_finite() || c < 0.0 {
            return Err(CombError::InvalidCapacity {
                node: n,
                resource: 0,
                value: c,
            });
        }
    }
    let mut total = 0.0;
    for (g, group) in problem.groups.iter().enumerate() {
        if !group.work.is_finite() || group.work < 0.0 {
            return Err(CombError::InvalidVolume {
                class: g,
                value: group.work,
            });
        }
        if let Some(&node) = group.eligible.iter().find(|&&n| n >= nodes) {
            return Err(CombError::UnknownNode {
                class: g,
                node,
                nodes,
            });
        }
        if group.work > 0.0 && !group.eligible.iter().any(|&n| problem.capacity[n] > 0.0) {
            return Err(CombError::NoCapacity { class: g });
        }
        total += group.work;
        if !total.is_finite() {
            // The solver scales by the total work, which must stay finite.
            return Err(CombError::InvalidVolume {
                class: g,
                value: group.work,
            });
        }
    }
    let mut splits: Vec<Vec<(NodeId, f64)>> = problem
        .groups
        .iter()
        .map(|g| g.eligible.iter().map(|&n| (n, 0.0)).collect())
        .collect();
    for (g, group) in problem.groups.iter().enumerate() {
        if group.work == 0.0 {
            if let Some(first) = splits[g].first_mut() {
                first.1 = 1.0;
            }
        }
    }
    if total == 0.0 {
        return Ok(TransportSolution {
            max_load: 0.0,
            lower_bound: 0.0,
            splits,
            load: vec![0.0; nodes],
            flow_runs: 0,
        });
    }
    let mut net = Network::new(problem, total);
    let (lower_bound, flow_runs) = match search {
        Search::Newton => net.newton(),
        Search::NewtonCold => net.newton_from(1.0),
        Search::Bisection => {
            let lo = net.initial_bound();
            let hi = net.greedy_bound();
            net.bisect(lo, hi, 0)
        }
    };
    let load = net.extract(problem, &mut splits);
    let max_load = load.iter().copied().fold(0.0, f64::max);
    let scale = total / net.cap_total;
    Ok(TransportSolution {
        max_load,
        lower_bound: lower_bound * scale,
        splits,
        load,
        flow_runs,
    })
}

/// The flow network of a transportation problem with positive total work, scaled so
/// that the total work and the total capacity of the nodes in use are both 1.
struct Network {
    net: FlowNet,
    /// Per group with work: its index in the problem, scaled work, source arc, and
    /// the first of its arcs to nodes (consecutive ids, step 2, in eligible order
    /// restricted to usable nodes).
    groups: Vec<ActiveGroup>,
    /// Nodes in use: problem node id, scaled capacity, sink arc.
    nodes: Vec<(NodeId, f64, usize)>,
    /// Node positions of every group's arcs, group after group.
    usable: Vec<u32>,
    /// Flow-network vertex of the first node (groups come before).
    first_node: usize,
    /// Sum of the capacities of the nodes in use (problem units).
    cap_total: f64,
    /// `λ` of the current flow (scaled units).
    lambda: f64,
}

struct ActiveGroup {
    index: usize,
    work: f64,
    source_arc: usize,
    first_arc: usize,
    /// Its arcs' node positions (into `Network::nodes`) are `Network::usable[range]`
    /// (one flat list: KDL has 343,589 groups, and one allocation each showed up).
    range: std::ops::Range<usize>,
}

const SRC: usize = 0;
const SINK: usize = 1;

impl Network {
    fn new(problem: &TransportProblem, total: f64) -> Self {
        let n_all = problem.capacity.len();
        // Compact ids for the nodes that some group with work may use.
        let mut pos = vec![u32::MAX; n_all];
        let mut used: Vec<NodeId> = Vec::new();
        let mut active = 0usize;
        let mut arcs = 0usize;
        for g in problem.groups.iter().filter(|g| g.work > 0.0) {
            active += 1;
            for &n in &g.eligible {
                if problem.capacity[n] > 0.0 {
                    arcs += 1;
                    if pos[n] == u32::MAX {
                        pos[n] = used.len() as u32;
                        used.push(n);
                    }
                }
            }
        }
        let cap_total: f64 = used.iter().map(|&n| problem.capacity[n]).sum();
        let first_node = 2 + active;
        // Exact sizes: KDL's network has ~10 million edges.
        let mut net = FlowNet::with_capacity(first_node + used.len(), active + arcs + used.len());
        let mut groups = Vec::with_capacity(active);
        let mut usable: Vec<u32> = Vec::with_capacity(arcs);
        // Marks the nodes already given an arc from the current group (duplicates).
        let mut seen = vec![usize::MAX; used.len()];
        for (index, g) in problem.groups.iter().enumerate() {
            if g.work <= 0.0 {
                continue;
            }
            let v = 2 + groups.len();
            let source_arc = net.add_edge(SRC, v, g.work / total);
            let mut first_arc = usize::MAX;
            let from = usable.len();
            for &n in &g.eligible {
                let p = pos[n];
                if problem.capacity[n] <= 0.0 || seen[p as usize] == index {
                    continue;
                }
                seen[p as usize] = index;
                let id = net.add_edge(v, first_node + p as usize, f64::INFINITY);
                if first_arc == usize::MAX {
                    first_arc = id;
                }
                usable.push(p);
            }
            groups.push(ActiveGroup {
                index,
                work: g.work / total,
                source_arc,
                first_arc,
                range: from..usable.len(),
            });
        }
        let nodes = used
            .iter()
            .enumerate()
            .map(|(p, &n)| {
                let arc = net.add_edge(first_node + p, SINK, 0.0);
                (n, problem.capacity[n] / cap_total, arc)
            })
            .collect();
        Self {
            net,
            groups,
            nodes,
            usable,
            first_node,
            cap_total,
            lambda: 0.0,
        }
    }

    fn usable(&self, g: &ActiveGroup) -> &[u32] {
        &self.usable[g.range.clone()]
    }

    /// The best of three kinds of Hall ratios that need no flow: all nodes (ratio 1
    /// after scaling), each group on its own nodes, and each node with the groups that
    /// can only go there.
    fn initial_bound(&self) -> f64 {
        let mut best = 1.0f64;
        let mut single = vec![0.0; self.nodes.len()];
        for g in &self.groups {
            let c: f64 = self
                .usable(g)
                .iter()
                .map(|&p| self.nodes[p as usize].1)
                .sum();
            best = best.max(g.work / c);
            if let [p] = self.usable(g)[..] {
                single[p as usize] += g.work;
            }
        }
        for (w, node) in single.iter().zip(&self.nodes) {
            best = best.max(w / node.1);
        }
        best
    }

    /// A feasible `λ`: every group on its largest eligible node.
    fn greedy_bound(&self) -> f64 {
        let mut load = vec![0.0; self.nodes.len()];
        for g in &self.groups {
            let best = self
                .usable(g)
                .iter()
                .copied()
                .max_by(|&a, &b| {
                    self.nodes[a as usize]
                        .1
                        .total_cmp(&self.nodes[b as usize].1)
                })
                .expect("groups with work have a usable node");
            load[best as usize] += g.work;
        }
        load.iter()
            .zip(&self.nodes)
            .map(|(w, n)| w / n.1)
            .fold(0.0, f64::max)
    }

    /// Work not yet routed by the current flow.
    fn deficit(&self) -> f64 {
        self.groups
            .iter()
            .map(|g| g.work - self.net.flow(g.source_arc))
            .sum::<f64>()
            .max(0.0)
    }

    /// Raises every node's sink arc to `lambda` × capacity and augments the current flow.
    fn raise_to(&mut self, lambda: f64) {
        for &(_, c, arc) in &self.nodes {
            self.net.raise_cap(arc, lambda * c);
        }
        self.lambda = lambda;
        self.net.augment(SRC, SINK, EPS);
    }

    /// A maximum flow from scratch with sink arcs at `lambda` × capacity.
    fn reset_to(&mut self, lambda: f64) {
        for &(_, c, arc) in &self.nodes {
            self.net.set_cap(arc, lambda * c);
        }
        self.lambda = lambda;
        self.net.max_flow(SRC, SINK, EPS);
    }

    /// Newton's iteration from the initial bound; returns the certified lower bound
    /// (scaled) and the number of maximum flows. Falls back to bisection above it if
    /// rounding stops the iteration before the flow saturates.
    fn newton(&mut self) -> (f64, usize) {
        self.newton_from(self.initial_bound())
    }

    /// Newton's iteration from `lambda`, which must be at most the optimum (the ratio
    /// of some node set).
    fn newton_from(&mut self, mut lambda: f64) -> (f64, usize) {
        let mut runs = 0;
        loop {
            self.raise_to(lambda);
            runs += 1;
            if self.deficit() <= DEFICIT_TOL {
                return (lambda, runs);
            }
            let ratio = self.cut_ratio();
            // Exact arithmetic gives ratio = lambda + deficit / C(T) > lambda; no
            // progress means the deficit is rounding noise the cut cannot resolve.
            if ratio.is_nan() || ratio <= lambda * (1.0 + 1e-14) || runs > 100 {
                let hi = self.greedy_bound().max(lambda);
                let (lb, more) = self.bisect(lambda, hi, runs);
                return (lb, more);
            }
            lambda = ratio;
        }
    }

    /// `W(T) / C(T)` for the node set `T` on the source side of the current minimum
    /// cut, with `W(T)` the work of every group whose usable nodes all lie in `T`.
    fn cut_ratio(&self) -> f64 {
        let side = self.net.source_side(SRC, EPS);
        let in_t = |p: u32| side[self.first_node + p as usize];
        let c: f64 = (0..self.nodes.len() as u32)
            .filter(|&p| in_t(p))
            .map(|p| self.nodes[p as usize].1)
            .sum();
        if c <= 0.0 {
            return 0.0;
        }
        let w: f64 = self
            .groups
            .iter()
            .filter(|g| self.usable(g).iter().all(|&p| in_t(p)))
            .map(|g| g.work)
            .sum();
        w / c
    }

    /// Bisection between an infeasible-or-optimal `lo` and a feasible `hi`; leaves the
    /// flow of `hi` in the network. Returns `(lo, runs)`.
    fn bisect(&mut self, mut lo: f64, mut hi: f64, mut runs: usize) -> (f64, usize) {
        let mut flow_at_hi = false;
        while hi > lo * (1.0 + BISECTION_TOL) {
            let mid = 0.5 * (lo + hi);
            self.reset_to(mid);
            runs += 1;
            if self.deficit() <= DEFICIT_TOL {
                hi = mid;
                flow_at_hi = true;
            } else {
                // Plain bisection (no cut ratios), so that it checks Newton's iteration
                // independently.
                lo = mid;
                flow_at_hi = false;
            }
        }
        if !flow_at_hi {
            self.reset_to(hi);
            runs += 1;
        }
        (lo, runs)
    }

    /// Turns the final flow into `splits` (problem order) and returns per-node loads in
    /// problem units. A group the flow left short (by rounding) is scaled up to its
    /// full work; one with no flow at all (work below the flow tolerance) goes to its
    /// usable node with the most room.
    fn extract(&self, problem: &TransportProblem, splits: &mut [Vec<(NodeId, f64)>]) -> Vec<f64> {
        let mut assigned = vec![0.0; self.nodes.len()];
        let mut orphans = Vec::new();
        let mut flows: Vec<f64> = Vec::new();
        for (gi, g) in self.groups.iter().enumerate() {
            flows.clear();
            flows.extend((0..g.range.len()).map(|i| self.net.flow(g.first_arc + 2 * i).max(0.0)));
            let sum: f64 = flows.iter().sum();
            if sum <= 0.0 {
                orphans.push(gi);
                continue;
            }
            let split = &mut splits[g.index];
            // Usable nodes are the eligible list's first occurrences of nodes with
            // capacity, in order, so one forward scan finds each one's entry.
            let mut i = 0;
            for (&p, &f) in self.usable(g).iter().zip(&flows) {
                let d = f / sum;
                assigned[p as usize] += d * g.work;
                let n = self.nodes[p as usize].0;
                while split[i].0 != n {
                    i += 1;
                }
                split[i].1 = d;
                i += 1;
            }
        }
        for gi in orphans {
            let g = &self.groups[gi];
            let room = |p: u32| {
                let (_, c, _) = self.nodes[p as usize];
                self.lambda * c - assigned[p as usize]
            };
            let best = self
                .usable(g)
                .iter()
                .copied()
                .max_by(|&a, &b| room(a).total_cmp(&room(b)))
                .expect("groups with work have a usable node");
            assigned[best as usize] += g.work;
            let n = self.nodes[best as usize].0;
            if let Some(slot) = splits[g.index].iter_mut().find(|x| x.0 == n) {
                slot.1 = 1.0;
            }
        }
        let mut load = vec![0.0; problem.capacity.len()];
        for (&(n, c, _), &a) in self.nodes.iter().zip(&assigned) {
            // Both were scaled; the ratio is back in problem units after one factor.
            load[n] = a / c;
        }
        let scale = {
            let total: f64 = problem.groups.iter().map(|g| g.work).sum();
            total / self.cap_total
        };
        load.iter_mut().for_each(|l| *l *= scale);
        load
    }
}

/// How each class of a [`NetworkProblem`] maps onto the transportation form.
enum ClassPlace {
    /// All of the class goes to this node (no work, or zero footprint there).
    Whole(NodeId),
    /// The class takes its group's split.
    Group(usize),
}

/// The transportation form of `problem` under `strategy`, and where each class goes.
struct Reduction {
    transport: TransportProblem,
    place: Vec<ClassPlace>,
}

/// Reduces `problem` to its transportation form: classes with the same eligible nodes
/// (after dropping nodes without capacity) form one group, whatever their hyperapp.
/// Node-dependent footprints are accepted when they factor as a per-hyperapp
/// footprint times a per-node factor on every (hyperapp, node) pair that carries work.
fn reduce(problem: &NetworkProblem, strategy: Strategy) -> Result<Reduction, CombError> {
    let nodes = problem.prov.len();
    let resources = problem.footprints.first().map_or(1, Vec::len);
    if resources != 1 {
        return Err(CombError::NotTransportation(format!(
            "{resources} resources (the max-flow form needs exactly one)"
        )));
    }
    for (n, row) in problem.prov.iter().enumerate() {
        if row.len() != 1 {
            return Err(CombError::NotTransportation(format!(
                "node {n} has {} resources (the max-flow form needs exactly one)",
                row.len()
            )));
        }
        if !row[0].is_finite() || row[0] < 0.0 {
            return Err(CombError::InvalidCapacity {
                node: n,
                resource: 0,
                value: row[0],
            });
        }
    }
    check_classes(nodes, &problem.footprints, 1, &problem.classes)?;
    let table = Footprints::new(&problem.footprints, &problem.node_footprints, nodes, 1)?;
    let prov = |n: NodeId| problem.prov[n][0];
    let f = |h: usize, n: NodeId| table.at(h, n)[0];
    let overrides = !problem.node_footprints.is_empty();

    // Group by usable node set; works are summed once the footprints are factored.
    let mut place: Vec<ClassPlace> = Vec::with_capacity(problem.classes.len());
    let mut keys: HashMap<Vec<NodeId>, usize> = HashMap::new();
    let mut groups: Vec<WorkGroup> = Vec::new();
    // (hyperapp, node) pairs that carry work, for the factorisation.
    let mut pairs: HashSet<(usize, NodeId)> = HashSet::new();
    let mut usable: Vec<NodeId> = Vec::new();
    for (c, class) in problem.classes.iter().enumerate() {
        let eligible = strategy.eligible(&class.path);
        let h = class.hyperapp;
        // No work, or a node where the class costs nothing: it all goes there, as
        // the LP would put it (such a node is never blocked, not even by zero
        // capacity, since the class adds no load).
        let free = if class.volume == 0.0 {
            Some(eligible[0])
        } else {
            eligible.iter().copied().find(|&n| f(h, n) == 0.0)
        };
        if let Some(n) = free {
            place.push(ClassPlace::Whole(n));
            continue;
        }
        usable.clear();
        usable.extend(eligible.into_iter().filter(|&n| prov(n) > 0.0));
        if usable.is_empty() {
            return Err(CombError::NoCapacity { class: c });
        }
        usable.sort_unstable();
        if overrides {
            pairs.extend(usable.iter().map(|&n| (h, n)));
        }
        let g = match keys.get(usable.as_slice()) {
            Some(&g) => g,
            None => {
                keys.insert(usable.clone(), groups.len());
                groups.push(WorkGroup {
                    eligible: usable.clone(),
                    work: 0.0,
                });
                groups.len() - 1
            }
        };
        place.push(ClassPlace::Group(g));
    }
    drop(keys);

    // Per-hyperapp footprint a[h] and per-node factor b[n] with f(h, n) = a[h] b[n].
    let hyperapps = problem.footprints.len();
    let (a, b) = if overrides {
        factor(problem, pairs, &f)?
    } else {
        (
            (0..hyperapps).map(|h| problem.footprints[h][0]).collect(),
            vec![1.0; nodes],
        )
    };
    for (class, p) in problem.classes.iter().zip(&place) {
        if let ClassPlace::Group(g) = *p {
            groups[g].work += class.volume * a[class.hyperapp];
        }
    }
    let capacity = (0..nodes).map(|n| prov(n) / b[n]).collect();
    Ok(Reduction {
        transport: TransportProblem { capacity, groups },
        place,
    })
}

/// Factors node-dependent footprints as `f(h, n) = a[h] b[n]` over the (hyperapp, node)
/// pairs that carry work, propagating along the bipartite graph of those pairs; fails
/// if some pair does not fit. Nodes without such a pair get factor 1 (unused).
fn factor(
    problem: &NetworkProblem,
    pairs: HashSet<(usize, NodeId)>,
    f: &impl Fn(usize, NodeId) -> f64,
) -> Result<(Vec<f64>, Vec<f64>), CombError> {
    let hyperapps = problem.footprints.len();
    let nodes = problem.prov.len();
    let mut by_h: Vec<Vec<NodeId>> = vec![Vec::new(); hyperapps];
    let mut by_n: Vec<Vec<usize>> = vec![Vec::new(); nodes];
    // Sorted, so that the propagation order (hence rounding) is deterministic.
    let mut sorted: Vec<(usize, NodeId)> = pairs.into_iter().collect();
    sorted.sort_unstable();
    for &(h, n) in &sorted {
        by_h[h].push(n);
        by_n[n].push(h);
    }
    let mut a: Vec<Option<f64>> = vec![None; hyperapps];
    let mut b: Vec<Option<f64>> = vec![None; nodes];
    for root in 0..hyperapps {
        if a[root].is_some() || by_h[root].is_empty() {
            continue;
        }
        // Anchor each component on a hyperapp's default footprint, so that nodes
        // without overrides get factor 1 and work equals volume × footprint exactly.
        let d = problem.footprints[root][0];
        a[root] = Some(if d > 0.0 { d } else { f(root, by_h[root][0]) });
        let mut stack = vec![(true, root)];
        while let Some((is_h, i)) = stack.pop() {
            if is_h {
                let ah = a[i].expect("set before push");
                for &n in &by_h[i] {
                    if b[n].is_none() {
                        b[n] = Some(f(i, n) / ah);
                        stack.push((false, n));
                    }
                }
            } else {
                let bn = b[i].expect("set before push");
                for &h in &by_n[i] {
                    if a[h].is_none() {
                        a[h] = Some(f(h, i) / bn);
                        stack.push((true, h));
                    }
                }
            }
        }
    }
    for &(h, n) in &sorted {
        let (ah, bn) = (a[h].expect("in a component"), b[n].expect("in a component"));
        let want = f(h, n);
        if (ah * bn - want).abs() > FACTOR_TOL * want {
            return Err(CombError::NotTransportation(format!(
                "hyperapp {h} at node {n}: footprint {want} is not its footprint elsewhere \
                 scaled by a per-node factor (would be {}); node-dependent footprints that \
                 differ by hyperapp make it a generalised flow",
                ah * bn
            )));
        }
    }
    Ok((
        a.into_iter().map(|x| x.unwrap_or(0.0)).collect(),
        b.into_iter().map(|x| x.unwrap_or(1.0)).collect(),
    ))
}

/// Drop-in alternative to [`super::min_max_load`] for one resource: the same optimum
/// (to rounding, instead of the LP's ~1e-9 tolerance) from a parametric maximum flow,
/// much faster on large networks. Classes with the same eligible nodes get the same
/// split (as in [`super::min_max_load_model_aggregated`]); `load` is computed from the
/// fractions with each node's own footprint, and `max_load` is its maximum.
///
/// Errors, besides those of the LP for malformed input: [`CombError::NotTransportation`]
/// for several resources or node-dependent footprints that are not a per-node factor
/// times a per-hyperapp footprint (use the LP then), [`CombError::NoCapacity`] for a
/// class with work and no eligible node with capacity (the LP reports it as
/// infeasible coverage), and with `enforce_capacity` [`CombError::Infeasible`] naming
/// [`FAMILY_CAPACITY`] when the optimum exceeds 1.
pub fn min_max_load_flow(
    problem: &NetworkProblem,
    strategy: Strategy,
    enforce_capacity: bool,
) -> Result<LoadAssignment, CombError> {
    let Reduction { transport, place } = reduce(problem, strategy)?;
    let sol = min_max_load_transport(&transport)?;
    drop(transport);
    if enforce_capacity && sol.lower_bound > 1.0 + 1e-9 {
        return Err(CombError::Infeasible {
            families: vec![FAMILY_CAPACITY.to_string()],
        });
    }
    // Built only now (not kept from the reduction) so that 1.7 million classes' lists
    // on KDL do not sit in memory next to the flow network.
    let mut fractions: Vec<Vec<(NodeId, f64)>> = problem
        .classes
        .iter()
        .map(|c| {
            strategy
                .eligible(&c.path)
                .into_iter()
                .map(|n| (n, 0.0))
                .collect()
        })
        .collect();
    for (fr, p) in fractions.iter_mut().zip(&place) {
        match *p {
            ClassPlace::Whole(w) => {
                if let Some(x) = fr.iter_mut().find(|x| x.0 == w) {
                    x.1 = 1.0;
                }
            }
            ClassPlace::Group(g) => {
                // The group's list is sorted, so look each node up.
                let split = &sol.splits[g];
                for x in fr.iter_mut() {
                    if let Ok(i) = split.binary_search_by(|y| y.0.cmp(&x.0)) {
                        x.1 = split[i].1;
                    }
                }
            }
        }
    }
    let nodes = problem.prov.len();
    let table = Footprints::new(&problem.footprints, &problem.node_footprints, nodes, 1)?;
    let load = node_loads(
        nodes,
        1,
        &problem.classes,
        |h, n| table.at(h, n),
        &fractions,
        |n, r| problem.prov[n][r],
    );
    let max_load = load.iter().flatten().copied().fold(0.0, f64::max);
    Ok(LoadAssignment {
        max_load,
        fractions,
        load,
    })
}

#[cfg(test)]
mod tests;
