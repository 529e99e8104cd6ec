//! CoMb's consolidated-middlebox formulations (Sekar et al.).
//!
//! * [`derive_hyperapps`]: from application specs (which traffic kinds each application
//!   subscribes to, and the policy order between applications) to the hyperapp of each
//!   traffic kind (§4.3), with reuse-aware footprints.
//! * [`min_max_load`]: the network-wide load-balancing LP, eqs. (5)-(8).
//! * [`min_provisioning`]: the provisioning variant over several traffic epochs, solved
//!   by epoch generation (max-flow checks, Hall cuts) so that hundreds of epochs fit.
//! * [`assign_cores`]: the per-box LP, eqs. (9)-(12).
//! * [`min_max_load_flow`]: the same optimum as [`min_max_load`] with one resource, as
//!   a parametric maximum flow ([`flow`]), for networks too large for the LP.
//!
//! Spatial strategies restrict which on-path nodes may process a class: the whole path,
//! its two edges, or only the ingress (§7.3, Fig. 13).

use std::collections::BTreeSet;

use crate::lp::{Direction, LinearProgram, LpError, SolverOptions, Var};

pub mod flow;
mod provision;
mod strawman;

pub use provision::*;
pub use strawman::*;

pub use flow::{
    min_max_load_flow, min_max_load_transport, min_max_load_transport_with, Search,
    TransportProblem, TransportSolution, WorkGroup,
};

/// Index of a network node (a CoMb box location).
pub type NodeId = usize;

/// Errors from building or solving a CoMb formulation.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CombError {
    /// A provisioned capacity is negative or not finite.
    #[error("node {node} resource {resource}: capacity {value} is negative or not finite")]
    InvalidCapacity {
        /// Node with the bad capacity.
        node: NodeId,
        /// Resource index.
        resource: usize,
        /// Offending value.
        value: f64,
    },
    /// A traffic volume is negative or not finite.
    #[error("traffic class {class}: volume {value} is negative or not finite")]
    InvalidVolume {
        /// Class index.
        class: usize,
        /// Offending value.
        value: f64,
    },
    /// A footprint is negative or not finite, or has the wrong number of resources.
    #[error("hyperapp {hyperapp}: footprint must have {expected} non-negative finite entries")]
    InvalidFootprint {
        /// Hyperapp index.
        hyperapp: usize,
        /// Number of resources expected.
        expected: usize,
    },
    /// A class has an empty routing path.
    #[error("traffic class {class} has an empty path")]
    EmptyPath {
        /// Class index.
        class: usize,
    },
    /// A path names a node that does not exist.
    #[error("traffic class {class}: path node {node} is out of range (network has {nodes} nodes)")]
    UnknownNode {
        /// Class index.
        class: usize,
        /// Offending node.
        node: NodeId,
        /// Number of nodes in the network.
        nodes: usize,
    },
    /// A class refers to a hyperapp that does not exist.
    #[error("traffic class {class} refers to unknown hyperapp {hyperapp}")]
    UnknownHyperapp {
        /// Class index.
        class: usize,
        /// Offending hyperapp index.
        hyperapp: usize,
    },
    /// Epoch volume vectors do not match the number of classes.
    #[error("epoch {epoch} has {got} volumes but there are {expected} classes")]
    EpochShape {
        /// Epoch index.
        epoch: usize,
        /// Volumes given.
        got: usize,
        /// Classes defined.
        expected: usize,
    },
    /// A node-dependent footprint names a node that does not exist.
    #[error("node footprint {index}: node {node} is out of range (network has {nodes} nodes)")]
    NodeFootprintNode {
        /// Index into [`NetworkProblem::node_footprints`].
        index: usize,
        /// Offending node.
        node: NodeId,
        /// Number of nodes in the network.
        nodes: usize,
    },
    /// A node-dependent footprint names a hyperapp that does not exist.
    #[error("node footprint {index} refers to unknown hyperapp {hyperapp}")]
    NodeFootprintHyperapp {
        /// Index into [`NetworkProblem::node_footprints`].
        index: usize,
        /// Offending hyperapp index.
        hyperapp: usize,
    },
    /// A node-dependent footprint is negative, not finite or has the wrong length.
    #[error(
        "node {node}, hyperapp {hyperapp}: footprint must have {expected} non-negative finite entries"
    )]
    InvalidNodeFootprint {
        /// Node of the override.
        node: NodeId,
        /// Hyperapp of the override.
        hyperapp: usize,
        /// Number of resources expected.
        expected: usize,
    },
    /// Two node-dependent footprints for the same node and hyperapp.
    #[error("node {node}, hyperapp {hyperapp}: footprint given twice")]
    DuplicateNodeFootprint {
        /// Node of the override.
        node: NodeId,
        /// Hyperapp of the override.
        hyperapp: usize,
    },
    /// Application specs are inconsistent (unknown names or a policy cycle).
    #[error("application spec: {0}")]
    AppSpec(String),
    /// The per-box problem has no cores or a non-positive core capacity.
    #[error("core {core}: capacity {value} must be positive and finite")]
    InvalidCore {
        /// Core index.
        core: usize,
        /// Offending value.
        value: f64,
    },
    /// The LP is infeasible; the named constraint families conflict.
    #[error("infeasible: constraint families {families:?} cannot all be satisfied")]
    Infeasible {
        /// Conflicting constraint families.
        families: Vec<String>,
    },
    /// The solver failed for a reason other than infeasibility.
    #[error("LP solver: {0}")]
    Solver(LpError),
    /// The problem is not a transportation problem, so the max-flow solver
    /// ([`min_max_load_flow`]) cannot solve it exactly; use the LP ([`min_max_load`]).
    #[error("not a transportation problem, use the LP: {0}")]
    NotTransportation(String),
    /// A class (or, in [`TransportProblem`], a group) has work but none of its eligible
    /// nodes has capacity for it, so no assignment exists.
    #[error("traffic class {class} has work but none of its eligible nodes has capacity")]
    NoCapacity {
        /// Class (or group) index.
        class: usize,
    },
}

impl From<LpError> for CombError {
    fn from(e: LpError) -> Self {
        match e {
            LpError::Infeasible { families } => CombError::Infeasible { families },
            other => CombError::Solver(other),
        }
    }
}

/// Constraint family: each class must be fully processed (eq. 7).
pub const FAMILY_COVERAGE: &str = "class coverage (eq. 7)";
/// Constraint family: per-node, per-resource load definition (eq. 6).
pub const FAMILY_LOAD: &str = "node load (eq. 6)";
/// Constraint family: load may not exceed provisioned capacity (eq. 4).
pub const FAMILY_CAPACITY: &str = "node capacity (load <= 1)";
/// Constraint family: per-box hyperapp work must be fully assigned (eq. 11).
pub const FAMILY_CORE_ASSIGN: &str = "hyperapp assignment (eq. 11)";
/// Constraint family: per-core load definition (eq. 10).
pub const FAMILY_CORE_LOAD: &str = "core load (eq. 10)";

/// Where along its path a class may be processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// Any node on the path.
    Path,
    /// The ingress or the egress.
    Edge,
    /// Only the ingress.
    Ingress,
}

impl Strategy {
    /// The nodes of `path` eligible under this strategy, in path order, deduplicated.
    pub fn eligible(self, path: &[NodeId]) -> Vec<NodeId> {
        let mut out: Vec<NodeId> = match self {
            Strategy::Path => path.to_vec(),
            Strategy::Edge => path
                .first()
                .into_iter()
                .chain(path.last())
                .copied()
                .collect(),
            Strategy::Ingress => path.first().copied().into_iter().collect(),
        };
        // Paths are short: a linear scan dedups without allocating (the max-flow
        // solver calls this for each of KDL's 1.7 million classes).
        if out.len() <= 64 {
            let mut kept = 0;
            for i in 0..out.len() {
                let n = out[i];
                if !out[..kept].contains(&n) {
                    out[kept] = n;
                    kept += 1;
                }
            }
            out.truncate(kept);
        } else {
            let mut seen = BTreeSet::new();
            out.retain(|n| seen.insert(*n));
        }
        out
    }
}

/// A middlebox application as the administrator describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Application {
    /// Name, used in policy order and hyperapp names.
    pub name: String,
    /// Traffic kinds (e.g. `"http"`) the application must process.
    pub subscribes: Vec<String>,
    /// Per-session footprint of the application-specific (non-reusable) part, per resource.
    pub specific: Vec<f64>,
    /// Reusable modules (e.g. session reconstruction) the application builds on.
    pub modules: Vec<String>,
}

/// A reusable module shared by applications in a consolidated box.
#[derive(Debug, Clone, PartialEq)]
pub struct Module {
    /// Name as referenced from [`Application::modules`].
    pub name: String,
    /// Per-session footprint per resource.
    pub footprint: Vec<f64>,
}

/// The hyperapp of one or more traffic kinds: an ordered application sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct Hyperapp {
    /// Indices into the application list, in policy order.
    pub apps: Vec<usize>,
    /// Traffic kinds that map to this hyperapp.
    pub kinds: Vec<String>,
    /// Per-session footprint per resource when modules are reused across its apps.
    pub footprint_reuse: Vec<f64>,
    /// Per-session footprint per resource when every app carries its own modules.
    pub footprint_standalone: Vec<f64>,
}

/// Derives the hyperapp of every traffic kind (§4.3): the applications subscribing to the
/// kind, ordered consistently with `order` (pairs `(before, after)` of application names).
/// Kinds with the same application set share a hyperapp; kinds no application subscribes
/// to have none and are omitted.
pub fn derive_hyperapps(
    apps: &[Application],
    modules: &[Module],
    order: &[(String, String)],
    resources: usize,
) -> Result<Vec<Hyperapp>, CombError> {
    let idx = |name: &str| {
        apps.iter().position(|a| a.name == name).ok_or_else(|| {
            CombError::AppSpec(format!("policy order names unknown application '{name}'"))
        })
    };
    let mut edges = Vec::new();
    for (a, b) in order {
        edges.push((idx(a)?, idx(b)?));
    }
    for a in apps {
        if a.specific.len() != resources || a.specific.iter().any(|v| !v.is_finite() || *v < 0.0) {
            return Err(CombError::AppSpec(format!(
                "application '{}' needs {resources} non-negative finite footprint entries",
                a.name
            )));
        }
        for m in &a.modules {
            if !modules.iter().any(|x| &x.name == m) {
                return Err(CombError::AppSpec(format!(
                    "application '{}' uses unknown module '{m}'",
                    a.name
                )));
            }
        }
    }
    for m in modules {
        if m.footprint.len() != resources || m.footprint.iter().any(|v| !v.is_finite() || *v < 0.0)
        {
            return Err(CombError::AppSpec(format!(
                "module '{}' needs {resources} non-negative finite footprint entries",
                m.name
            )));
        }
    }
    // A global topological order makes every hyperapp's order consistent with the policy.
    let topo = topological_order(apps.len(), &edges)
        .ok_or_else(|| CombError::AppSpec("policy order contains a cycle".to_string()))?;
    let kinds: BTreeSet<&str> = apps
        .iter()
        .flat_map(|a| a.subscribes.iter().map(String::as_str))
        .collect();
    let mut out: Vec<Hyperapp> = Vec::new();
    for kind in kinds {
        let members: Vec<usize> = topo
            .iter()
            .copied()
            .filter(|&i| apps[i].subscribes.iter().any(|k| k == kind))
            .collect();
        if let Some(h) = out.iter_mut().find(|h| h.apps == members) {
            h.kinds.push(kind.to_string());
            continue;
        }
        let mut reuse = vec![0.0; resources];
        let mut standalone = vec![0.0; resources];
        let mut used = BTreeSet::new();
        for &i in &members {
            add_into(&mut reuse, &apps[i].specific);
            add_into(&mut standalone, &apps[i].specific);
            for m in &apps[i].modules {
                let module = modules
                    .iter()
                    .find(|x| &x.name == m)
                    .expect("validated above");
                add_into(&mut standalone, &module.footprint);
                if used.insert(m.as_str()) {
                    add_into(&mut reuse, &module.footprint);
                }
            }
        }
        out.push(Hyperapp {
            apps: members,
            kinds: vec![kind.to_string()],
            footprint_reuse: reuse,
            footprint_standalone: standalone,
        });
    }
    Ok(out)
}

fn add_into(acc: &mut [f64], v: &[f64]) {
    for (a, x) in acc.iter_mut().zip(v) {
        *a += x;
    }
}

fn topological_order(n: usize, edges: &[(usize, usize)]) -> Option<Vec<usize>> {
    let mut indeg = vec![0usize; n];
    for &(_, b) in edges {
        indeg[b] += 1;
    }
    let mut ready: BTreeSet<usize> = (0..n).filter(|&i| indeg[i] == 0).collect();
    let mut out = Vec::with_capacity(n);
    while let Some(i) = ready.pop_first() {
        out.push(i);
        for &(a, b) in edges {
            if a == i {
                indeg[b] -= 1;
                if indeg[b] == 0 {
                    ready.insert(b);
                }
            }
        }
    }
    (out.len() == n).then_some(out)
}

/// One traffic class: a volume of sessions on one path, processed by one hyperapp.
#[derive(Debug, Clone, PartialEq)]
pub struct TrafficClass {
    /// Routing path, ingress first.
    pub path: Vec<NodeId>,
    /// Volume |T_c| (sessions or any consistent unit).
    pub volume: f64,
    /// Index of the hyperapp that must process every session of the class.
    pub hyperapp: usize,
}

/// Inputs of the network-wide load-balancing LP.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkProblem {
    /// `prov[n][r]`: provisioned amount of resource `r` at node `n`.
    pub prov: Vec<Vec<f64>>,
    /// `footprints[h][r]`: per-unit-volume footprint F of hyperapp `h` on resource `r`.
    pub footprints: Vec<Vec<f64>>,
    /// Traffic classes.
    pub classes: Vec<TrafficClass>,
    /// Node-dependent footprints overriding `footprints` (e.g. a node with a regex or
    /// crypto accelerator runs the IPS hyperapp with less CPU and some load on an extra
    /// "accelerator" resource whose capacity is zero at nodes without one).
    pub node_footprints: Vec<NodeFootprint>,
}

/// Footprint of hyperapp `hyperapp` at node `node`, replacing its default
/// [`NetworkProblem::footprints`] entry there (§4.3: "accelerators as node-dependent
/// footprints").
#[derive(Debug, Clone, PartialEq)]
pub struct NodeFootprint {
    /// Node where this footprint applies.
    pub node: NodeId,
    /// Hyperapp whose footprint is overridden.
    pub hyperapp: usize,
    /// Per-unit-volume footprint per resource at that node.
    pub footprint: Vec<f64>,
}

/// Resolves `F[h][n][r]`: per-node overrides on top of per-hyperapp defaults.
struct Footprints<'a> {
    default: &'a [Vec<f64>],
    overrides: std::collections::HashMap<(usize, NodeId), &'a [f64]>,
    /// `overridden[h]`: some node has its own footprint for hyperapp `h`.
    overridden: Vec<bool>,
}

impl<'a> Footprints<'a> {
    /// Validates the overrides against the defaults (already checked by
    /// `check_classes`) and the node count.
    fn new(
        default: &'a [Vec<f64>],
        node_footprints: &'a [NodeFootprint],
        nodes: usize,
        resources: usize,
    ) -> Result<Self, CombError> {
        let mut overrides = std::collections::HashMap::new();
        let mut overridden = vec![false; default.len()];
        for (i, o) in node_footprints.iter().enumerate() {
            if o.node >= nodes {
                return Err(CombError::NodeFootprintNode {
                    index: i,
                    node: o.node,
                    nodes,
                });
            }
            if o.hyperapp >= default.len() {
                return Err(CombError::NodeFootprintHyperapp {
                    index: i,
                    hyperapp: o.hyperapp,
                });
            }
            if o.footprint.len() != resources
                || o.footprint.iter().any(|v| !v.is_finite() || *v < 0.0)
            {
                return Err(CombError::InvalidNodeFootprint {
                    node: o.node,
                    hyperapp: o.hyperapp,
                    expected: resources,
                });
            }
            if overrides
                .insert((o.hyperapp, o.node), o.footprint.as_slice())
                .is_some()
            {
                return Err(CombError::DuplicateNodeFootprint {
                    node: o.node,
                    hyperapp: o.hyperapp,
                });
            }
            overridden[o.hyperapp] = true;
        }
        Ok(Self {
            default,
            overrides,
            overridden,
        })
    }

    fn at(&self, h: usize, n: NodeId) -> &[f64] {
        if self.overridden[h] {
            if let Some(f) = self.overrides.get(&(h, n)) {
                return f;
            }
        }
        &self.default[h]
    }
}

/// Output of [`min_max_load`].
#[derive(Debug, Clone, PartialEq)]
pub struct LoadAssignment {
    /// The optimal maximum load over all nodes and resources.
    pub max_load: f64,
    /// `fractions[c]`: `(node, d_{c,n})` for every eligible node of class `c`, path order.
    pub fractions: Vec<Vec<(NodeId, f64)>>,
    /// `load[n][r]` at the optimum.
    pub load: Vec<Vec<f64>>,
}

fn check_classes(
    nodes: usize,
    footprints: &[Vec<f64>],
    resources: usize,
    classes: &[TrafficClass],
) -> Result<(), CombError> {
    for (h, f) in footprints.iter().enumerate() {
        if f.len() != resources || f.iter().any(|v| !v.is_finite() || *v < 0.0) {
            return Err(CombError::InvalidFootprint {
                hyperapp: h,
                expected: resources,
            });
        }
    }
    for (c, class) in classes.iter().enumerate() {
        if class.path.is_empty() {
            return Err(CombError::EmptyPath { class: c });
        }
        if let Some(&node) = class.path.iter().find(|&&n| n >= nodes) {
            return Err(CombError::UnknownNode {
                class: c,
                node,
                nodes,
            });
        }
        if class.hyperapp >= footprints.len() {
            return Err(CombError::UnknownHyperapp {
                class: c,
                hyperapp: class.hyperapp,
            });
        }
        if !class.volume.is_finite() || class.volume < 0.0 {
            return Err(CombError::InvalidVolume {
                class: c,
                value: class.volume,
            });
        }
    }
    Ok(())
}

/// Solves eqs. (5)-(8): choose `d_{c,n}` to minimise the maximum load over nodes and
/// resources. With `enforce_capacity`, loads above 1 are infeasible (eq. 4) and the error
/// names the capacity family; without it the optimum may exceed 1 (an overloaded network).
pub fn min_max_load(
    problem: &NetworkProblem,
    strategy: Strategy,
    enforce_capacity: bool,
) -> Result<LoadAssignment, CombError> {
    min_max_load_model(problem, strategy, enforce_capacity)?.solve(&SolverOptions::default())
}

/// The LP of [`min_max_load`], built but not solved, so that model construction and
/// solving can be timed (and solver options tried) separately.
#[derive(Debug, Clone)]
pub struct MinMaxModel<'a> {
    problem: &'a NetworkProblem,
    lp: LinearProgram,
    vars: Vec<Vec<(NodeId, Var)>>,
    resources: usize,
}

impl MinMaxModel<'_> {
    /// Number of LP variables.
    pub fn num_vars(&self) -> usize {
        self.lp.num_vars()
    }

    /// Number of LP constraints.
    pub fn num_constraints(&self) -> usize {
        self.lp.num_constraints()
    }

    /// Solves the model with the given HiGHS options.
    pub fn solve(&self, options: &SolverOptions) -> Result<LoadAssignment, CombError> {
        let problem = self.problem;
        let nodes = problem.prov.len();
        let resources = self.resources;
        let vars = &self.vars;
        let sol = self.lp.solve_with(options)?;
        let table = Footprints::new(
            &problem.footprints,
            &problem.node_footprints,
            nodes,
            resources,
        )?;
        let fractions: Vec<Vec<(NodeId, f64)>> = vars
            .iter()
            .map(|cv| {
                cv.iter()
                    .map(|&(n, v)| (n, sol.value(v).clamp(0.0, 1.0)))
                    .collect()
            })
            .collect();
        let load = node_loads(
            nodes,
            resources,
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
}

/// Builds the LP of [`min_max_load`] without solving it.
pub fn min_max_load_model(
    problem: &NetworkProblem,
    strategy: Strategy,
    enforce_capacity: bool,
) -> Result<MinMaxModel<'_>, CombError> {
    build_min_max(problem, strategy, enforce_capacity, false)
}

/// A smaller LP with the same optimum as [`min_max_load_model`]: classes with the same
/// set of eligible nodes (and, with several resources, the same hyperapp) share one set
/// of split variables, since only their summed work reaches each node's load. Every
/// class of a group gets the group's split, which is one of the optimal solutions of the
/// full LP; the maximum load is the same.
pub fn min_max_load_model_aggregated(
    problem: &NetworkProblem,
    strategy: Strategy,
    enforce_capacity: bool,
) -> Result<MinMaxModel<'_>, CombError> {
    build_min_max(problem, strategy, enforce_capacity, true)
}

/// One split of the min-max LP: eligible nodes and the volume per member hyperapp.
type Unit = (Vec<NodeId>, Vec<(usize, f64)>);

fn build_min_max(
    problem: &NetworkProblem,
    strategy: Strategy,
    enforce_capacity: bool,
    aggregate: bool,
) -> Result<MinMaxModel<'_>, CombError> {
    let nodes = problem.prov.len();
    let resources = problem.footprints.first().map_or(0, Vec::len);
    for (n, row) in problem.prov.iter().enumerate() {
        if row.len() != resources {
            return Err(CombError::AppSpec(format!(
                "node {n} has {} resources, footprints have {resources}",
                row.len()
            )));
        }
        for (r, &v) in row.iter().enumerate() {
            if !v.is_finite() || v < 0.0 {
                return Err(CombError::InvalidCapacity {
                    node: n,
                    resource: r,
                    value: v,
                });
            }
        }
    }
    check_classes(nodes, &problem.footprints, resources, &problem.classes)?;

    let table = Footprints::new(
        &problem.footprints,
        &problem.node_footprints,
        nodes,
        resources,
    )?;

    let mut lp = LinearProgram::new(Direction::Minimise);
    let lambda = lp.add_var(1.0, 0.0, f64::INFINITY);
    let mut vars: Vec<Vec<(NodeId, Var)>> = Vec::with_capacity(problem.classes.len());
    let mut load_terms: Vec<Vec<Vec<(Var, f64)>>> = vec![vec![Vec::new(); resources]; nodes];
    // One split per class, or per group of classes: (eligible nodes, volume per member
    // hyperapp). A group's work at node n is sum_h volume_h * F[h][n], so members must
    // have footprints proportional at every node: the same hyperapp, or (one resource,
    // no node-dependent footprint) any hyperapp.
    let mut units: Vec<Unit> = Vec::new();
    let mut unit_of: Vec<usize> = Vec::with_capacity(problem.classes.len());
    let mut groups: std::collections::BTreeMap<(Vec<NodeId>, usize), usize> =
        std::collections::BTreeMap::new();
    for class in &problem.classes {
        let h = class.hyperapp;
        let eligible = strategy.eligible(&class.path);
        if !aggregate {
            unit_of.push(units.len());
            units.push((eligible, vec![(h, class.volume)]));
            continue;
        }
        let mut key_nodes = eligible.clone();
        key_nodes.sort_unstable();
        let shared = resources == 1 && !table.overridden[h];
        let key = (key_nodes, if shared { 0 } else { h + 1 });
        let next = units.len();
        let u = *groups.entry(key).or_insert(next);
        if u == next {
            units.push((eligible, vec![(h, class.volume)]));
        } else if let Some(m) = units[u].1.iter_mut().find(|m| m.0 == h) {
            m.1 += class.volume;
        } else {
            units[u].1.push((h, class.volume));
        }
        unit_of.push(u);
    }
    let mut unit_vars: Vec<Vec<(NodeId, Var)>> = Vec::with_capacity(units.len());
    let mut work = vec![0.0; resources];
    let mut needs = vec![false; resources];
    for (eligible, members) in &units {
        let mut uv = Vec::with_capacity(eligible.len());
        for &n in eligible {
            // `needs[r]`: some member's footprint here uses resource r (zero-volume
            // classes still appear in the load rows, as they always have).
            work.iter_mut().for_each(|w| *w = 0.0);
            needs.iter_mut().for_each(|x| *x = false);
            for &(h, vol) in members {
                for (r, &f) in table.at(h, n).iter().enumerate() {
                    work[r] += f * vol;
                    needs[r] |= f > 0.0;
                }
            }
            // A node with no capacity for a resource the hyperapp needs there cannot
            // take any of this class (its load would be infinite).
            let blocked = (0..resources).any(|r| problem.prov[n][r] == 0.0 && work[r] > 0.0);
            let v = lp.add_var(0.0, 0.0, if blocked { 0.0 } else { 1.0 });
            for r in 0..resources {
                let p = problem.prov[n][r];
                if p > 0.0 && needs[r] {
                    load_terms[n][r].push((v, work[r] / p));
                }
            }
            uv.push((n, v));
        }
        lp.add_constraint(FAMILY_COVERAGE, 1.0, 1.0, uv.iter().map(|&(_, v)| (v, 1.0)));
        unit_vars.push(uv);
    }
    for (class, &u) in problem.classes.iter().zip(&unit_of) {
        if !aggregate {
            vars.push(unit_vars[u].clone());
            continue;
        }
        let uv = &unit_vars[u];
        vars.push(
            strategy
                .eligible(&class.path)
                .into_iter()
                .filter_map(|n| uv.iter().find(|x| x.0 == n).copied())
                .collect(),
        );
    }
    for node_terms in &load_terms {
        for terms in node_terms {
            if terms.is_empty() {
                continue;
            }
            lp.add_constraint(
                FAMILY_LOAD,
                f64::NEG_INFINITY,
                0.0,
                terms.iter().copied().chain([(lambda, -1.0)]),
            );
            if enforce_capacity {
                lp.add_constraint(
                    FAMILY_CAPACITY,
                    f64::NEG_INFINITY,
                    1.0,
                    terms.iter().copied(),
                );
            }
        }
    }
    Ok(MinMaxModel {
        problem,
        lp,
        vars,
        resources,
    })
}

fn node_loads<'f>(
    nodes: usize,
    resources: usize,
    classes: &[TrafficClass],
    footprint: impl Fn(usize, NodeId) -> &'f [f64],
    fractions: &[Vec<(NodeId, f64)>],
    prov: impl Fn(usize, usize) -> f64,
) -> Vec<Vec<f64>> {
    let mut load = vec![vec![0.0; resources]; nodes];
    for (class, fr) in classes.iter().zip(fractions) {
        for &(n, d) in fr {
            let f = footprint(class.hyperapp, n);
            for r in 0..resources {
                let p = prov(n, r);
                if p > 0.0 {
                    load[n][r] += d * class.volume * f[r] / p;
                }
            }
        }
    }
    load
}

#[cfg(test)]
mod tests;
