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
struct EpochGroups {
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
    fn new(
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
    fn epoch_max_load(&self, e: usize, prov: &[f64]) -> Result<(f64, Option<Split>), CombError> {
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

/// Constraint family: an application action needs its modules on the same node (eq. 1).
pub const FAMILY_DEPENDENCY: &str = "action dependency (eq. 1)";
/// Constraint family: every subscribed application processes every session (eq. 2).
pub const FAMILY_APP_COVERAGE: &str = "application coverage (eq. 2)";
/// Constraint family: policy order along the path (eq. 3).
pub const FAMILY_ORDER: &str = "policy order (eq. 3)";

/// A class of the strawman model: a traffic kind on one path.
#[derive(Debug, Clone, PartialEq)]
pub struct KindClass {
    /// Routing path, ingress first.
    pub path: Vec<NodeId>,
    /// Volume.
    pub volume: f64,
    /// Traffic kind, matched against [`Application::subscribes`].
    pub kind: String,
}

/// The LP relaxation of CoMb's strawman (§4.2, eqs. 1-4) under the min-max load objective.
///
/// Sessions of a class are interchangeable, so the relaxation over sessions equals one
/// over class fractions: `x_{c,a,n}` is the share of class `c`'s sessions on which node
/// `n` runs action `a` (an application's specific part or a reusable module). Unlike the
/// hyperapp model, an application may run on a different node than the others of its
/// session, and a module may be replicated. Order (eq. 3) allows the preceding
/// application on the same node, since a box runs a session's applications in order.
/// Returns the optimal maximum load; with the same inputs it is a lower bound on
/// [`min_max_load`] over the derived hyperapps with reuse (Strategy::Path).
pub fn strawman_min_max_load(
    prov: &[Vec<f64>],
    apps: &[Application],
    modules: &[Module],
    order: &[(String, String)],
    classes: &[KindClass],
) -> Result<f64, CombError> {
    let nodes = prov.len();
    let resources = prov.first().map_or(0, Vec::len);
    // Reuse the validation of derive_hyperapps (names, footprint shapes, cycles).
    derive_hyperapps(apps, modules, order, resources)?;
    for (n, row) in prov.iter().enumerate() {
        for (r, &v) in row.iter().enumerate() {
            if !v.is_finite() || v < 0.0 || row.len() != resources {
                return Err(CombError::InvalidCapacity {
                    node: n,
                    resource: r,
                    value: v,
                });
            }
        }
    }
    let pos = |name: &str| apps.iter().position(|a| a.name == name).expect("validated");
    let order: Vec<(usize, usize)> = order.iter().map(|(a, b)| (pos(a), pos(b))).collect();
    let mut lp = LinearProgram::new(Direction::Minimise);
    let lambda = lp.add_var(1.0, 0.0, f64::INFINITY);
    let mut load: Vec<Vec<Vec<(Var, f64)>>> = vec![vec![Vec::new(); resources]; nodes];
    let mut add_load = |n: NodeId, v: Var, vol: f64, f: &[f64]| {
        for r in 0..resources {
            if prov[n][r] > 0.0 && f[r] > 0.0 {
                load[n][r].push((v, vol * f[r] / prov[n][r]));
            }
        }
    };
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
        if !class.volume.is_finite() || class.volume < 0.0 {
            return Err(CombError::InvalidVolume {
                class: c,
                value: class.volume,
            });
        }
        let path = Strategy::Path.eligible(&class.path);
        let members: Vec<usize> = (0..apps.len())
            .filter(|&a| apps[a].subscribes.contains(&class.kind))
            .collect();
        // Module variables per (module, node), shared by every member on that node.
        let mut module_vars: Vec<Vec<Var>> = Vec::new();
        for m in modules {
            let vars: Vec<Var> = path
                .iter()
                .map(|&n| {
                    let v = lp.add_var(0.0, 0.0, 1.0);
                    add_load(n, v, class.volume, &m.footprint);
                    v
                })
                .collect();
            module_vars.push(vars);
        }
        let mut app_vars: Vec<Option<Vec<Var>>> = vec![None; apps.len()];
        for &a in &members {
            let vars: Vec<Var> = path
                .iter()
                .map(|&n| {
                    let v = lp.add_var(0.0, 0.0, 1.0);
                    add_load(n, v, class.volume, &apps[a].specific);
                    v
                })
                .collect();
            lp.add_constraint(
                FAMILY_APP_COVERAGE,
                1.0,
                1.0,
                vars.iter().map(|&v| (v, 1.0)),
            );
            for m in &apps[a].modules {
                let mi = modules
                    .iter()
                    .position(|x| &x.name == m)
                    .expect("validated");
                for (k, &v) in vars.iter().enumerate() {
                    lp.add_constraint(
                        FAMILY_DEPENDENCY,
                        f64::NEG_INFINITY,
                        0.0,
                        [(v, 1.0), (module_vars[mi][k], -1.0)],
                    );
                }
            }
            app_vars[a] = Some(vars);
        }
        for &(before, after) in &order {
            if let (Some(b), Some(a)) = (&app_vars[before], &app_vars[after]) {
                for k in 0..path.len() {
                    lp.add_constraint(
                        FAMILY_ORDER,
                        f64::NEG_INFINITY,
                        0.0,
                        std::iter::once((a[k], 1.0)).chain(b[..=k].iter().map(|&v| (v, -1.0))),
                    );
                }
            }
        }
    }
    for node in &load {
        for terms in node {
            if !terms.is_empty() {
                lp.add_constraint(
                    FAMILY_LOAD,
                    f64::NEG_INFINITY,
                    0.0,
                    terms.iter().copied().chain([(lambda, -1.0)]),
                );
            }
        }
    }
    Ok(lp.solve()?.value(lambda))
}

/// Output of [`assign_cores`].
#[derive(Debug, Clone, PartialEq)]
pub struct CoreAssignment {
    /// `fractions[h][j]`: share g_{h,j} of hyperapp `h`'s work on core `j`.
    pub fractions: Vec<Vec<f64>>,
    /// Load of every core (work / capacity) at the optimum.
    pub core_load: Vec<f64>,
    /// Maximum core load.
    pub max_load: f64,
}

/// Solves the per-box LP, eqs. (9)-(12). `work[h]` is `|T_{h,n}| * F_{h,CPU,n}`, the
/// CPU work of hyperapp `h` at this box; `core_capacity[j]` is `Proc_j`. When
/// `enforce_capacity` is set a core load above 1 is infeasible (eq. 10's `<= 1`).
pub fn assign_cores(
    work: &[f64],
    core_capacity: &[f64],
    enforce_capacity: bool,
) -> Result<CoreAssignment, CombError> {
    if core_capacity.is_empty() {
        return Err(CombError::InvalidCore {
            core: 0,
            value: 0.0,
        });
    }
    if let Some((j, &v)) = core_capacity
        .iter()
        .enumerate()
        .find(|(_, v)| !v.is_finite() || **v <= 0.0)
    {
        return Err(CombError::InvalidCore { core: j, value: v });
    }
    if let Some((h, &v)) = work
        .iter()
        .enumerate()
        .find(|(_, v)| !v.is_finite() || **v < 0.0)
    {
        return Err(CombError::InvalidVolume { class: h, value: v });
    }
    let mut lp = LinearProgram::new(Direction::Minimise);
    let lambda = lp.add_var(1.0, 0.0, f64::INFINITY);
    let g: Vec<Vec<Var>> = work
        .iter()
        .map(|_| {
            core_capacity
                .iter()
                .map(|_| lp.add_var(0.0, 0.0, 1.0))
                .collect()
        })
        .collect();
    for row in &g {
        lp.add_constraint(FAMILY_CORE_ASSIGN, 1.0, 1.0, row.iter().map(|&v| (v, 1.0)));
    }
    for (j, &cap) in core_capacity.iter().enumerate() {
        let terms: Vec<(Var, f64)> = g
            .iter()
            .zip(work)
            .map(|(row, &w)| (row[j], w / cap))
            .collect();
        lp.add_constraint(
            FAMILY_CORE_LOAD,
            f64::NEG_INFINITY,
            0.0,
            terms.iter().copied().chain([(lambda, -1.0)]),
        );
        if enforce_capacity {
            lp.add_constraint(FAMILY_CAPACITY, f64::NEG_INFINITY, 1.0, terms);
        }
    }
    let sol = lp.solve()?;
    let fractions: Vec<Vec<f64>> = g
        .iter()
        .map(|row| row.iter().map(|&v| sol.value(v).clamp(0.0, 1.0)).collect())
        .collect();
    let core_load: Vec<f64> = (0..core_capacity.len())
        .map(|j| {
            fractions
                .iter()
                .zip(work)
                .map(|(row, &w)| row[j] * w)
                .sum::<f64>()
                / core_capacity[j]
        })
        .collect();
    let max_load = core_load.iter().copied().fold(0.0, f64::max);
    Ok(CoreAssignment {
        fractions,
        core_load,
        max_load,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6
    }

    /// Three nodes of capacity 100; class A on [0,2], B on [1,2], C on [2], 30 units each.
    fn triangle() -> NetworkProblem {
        NetworkProblem {
            prov: vec![vec![100.0]; 3],
            footprints: vec![vec![1.0]],
            classes: vec![
                TrafficClass {
                    path: vec![0, 2],
                    volume: 30.0,
                    hyperapp: 0,
                },
                TrafficClass {
                    path: vec![1, 2],
                    volume: 30.0,
                    hyperapp: 0,
                },
                TrafficClass {
                    path: vec![2],
                    volume: 30.0,
                    hyperapp: 0,
                },
            ],
            node_footprints: Vec::new(),
        }
    }

    /// A 5-node line with every ordered pair, three hyperapps and two resources, node 3
    /// short of resource 1: enough structure that aggregation actually merges classes.
    fn line_problem(resources: usize) -> NetworkProblem {
        let mut classes = Vec::new();
        for s in 0..5usize {
            for d in 0..5usize {
                if s == d {
                    continue;
                }
                let path: Vec<NodeId> = if s < d {
                    (s..=d).collect()
                } else {
                    (d..=s).rev().collect()
                };
                for h in 0..3 {
                    classes.push(TrafficClass {
                        path: path.clone(),
                        volume: (1 + (s * 7 + d * 3 + h) % 5) as f64,
                        hyperapp: h,
                    });
                }
            }
        }
        let foot = |h: usize| (0..resources).map(|r| 1.0 + (h + 2 * r) as f64).collect();
        NetworkProblem {
            prov: (0..5)
                .map(|n| {
                    (0..resources)
                        .map(|r| {
                            if n == 3 && r == 1 {
                                5.0
                            } else {
                                100.0 + n as f64
                            }
                        })
                        .collect()
                })
                .collect(),
            footprints: (0..3).map(foot).collect(),
            classes,
            node_footprints: Vec::new(),
        }
    }

    #[test]
    fn aggregated_model_reaches_the_same_optimum() {
        for resources in [1, 2] {
            let p = line_problem(resources);
            for strategy in [Strategy::Path, Strategy::Edge] {
                let full = min_max_load_model(&p, strategy, false).unwrap();
                let agg = min_max_load_model_aggregated(&p, strategy, false).unwrap();
                assert!(agg.num_vars() < full.num_vars());
                let a = full.solve(&SolverOptions::default()).unwrap();
                let b = agg.solve(&SolverOptions::default()).unwrap();
                assert!(
                    (a.max_load - b.max_load).abs() <= 1e-7 * a.max_load,
                    "{resources} resources, {strategy:?}: {} vs {}",
                    a.max_load,
                    b.max_load
                );
                // The same as the one-call API, and a valid split for every class.
                let c = min_max_load(&p, strategy, false).unwrap();
                assert_eq!(c.max_load, a.max_load);
                for (class, fr) in p.classes.iter().zip(&b.fractions) {
                    assert_eq!(
                        fr.iter().map(|x| x.0).collect::<Vec<_>>(),
                        strategy.eligible(&class.path)
                    );
                    assert!(close(fr.iter().map(|x| x.1).sum::<f64>(), 1.0));
                }
            }
        }
    }

    #[test]
    fn solver_options_do_not_change_the_optimum() {
        use crate::lp::Method;
        let p = line_problem(1);
        let m = min_max_load_model(&p, Strategy::Path, false).unwrap();
        let base = m.solve(&SolverOptions::default()).unwrap().max_load;
        for method in [Method::DualSimplex, Method::PrimalSimplex, Method::Ipm] {
            for presolve in [true, false] {
                let o = SolverOptions {
                    method,
                    presolve,
                    parallel: false,
                    crossover: method != Method::Ipm || presolve,
                };
                let x = m.solve(&o).unwrap().max_load;
                assert!((x - base).abs() <= 1e-7 * base, "{o:?}: {x} vs {base}");
            }
        }
    }

    #[test]
    fn eligible_nodes_keep_path_order_without_repeats() {
        assert_eq!(Strategy::Path.eligible(&[3, 1, 3, 2, 1]), vec![3, 1, 2]);
        assert_eq!(Strategy::Edge.eligible(&[4, 1, 4]), vec![4]);
        assert_eq!(Strategy::Ingress.eligible(&[2, 5]), vec![2]);
        // Long paths take the other dedup branch; same result.
        let long: Vec<NodeId> = (0..100).chain(0..50).chain(100..120).collect();
        assert_eq!(
            Strategy::Path.eligible(&long),
            (0..120).collect::<Vec<NodeId>>()
        );
    }

    #[test]
    fn path_strategy_balances_load() {
        let a = min_max_load(&triangle(), Strategy::Path, true).unwrap();
        // 90 units over 3 nodes of 100 -> 0.3 everywhere.
        assert!(close(a.max_load, 0.3), "{}", a.max_load);
        for fr in &a.fractions {
            assert!(close(fr.iter().map(|x| x.1).sum::<f64>(), 1.0));
        }
        for row in &a.load {
            assert!(close(row[0], 0.3));
        }
    }

    #[test]
    fn ingress_strategy_keeps_everything_at_the_ingress() {
        let a = min_max_load(&triangle(), Strategy::Ingress, true).unwrap();
        assert!(close(a.max_load, 0.3));
        assert_eq!(a.fractions[0], vec![(0, 1.0)]);
        // Make the ingress of class A hot: ingress-only cannot balance, edge can.
        let mut p = triangle();
        p.classes[0].volume = 90.0;
        p.classes[2].volume = 0.0;
        let ing = min_max_load(&p, Strategy::Ingress, true).unwrap();
        let edge = min_max_load(&p, Strategy::Edge, true).unwrap();
        assert!(close(ing.max_load, 0.9));
        // Edge: node 1 keeps all of B (0.3); A splits 45/45 over nodes 0 and 2.
        assert!(close(edge.max_load, 0.45), "{}", edge.max_load);
    }

    #[test]
    fn capacity_infeasibility_is_named() {
        let mut p = triangle();
        p.classes[0].volume = 500.0;
        match min_max_load(&p, Strategy::Ingress, true) {
            Err(CombError::Infeasible { families }) => {
                assert!(
                    families.iter().any(|f| f == FAMILY_CAPACITY),
                    "{families:?}"
                );
            }
            other => panic!("{other:?}"),
        }
        // Without the capacity rows the LP reports the overload instead.
        let a = min_max_load(&p, Strategy::Ingress, false).unwrap();
        assert!(close(a.max_load, 5.0));
    }

    #[test]
    fn zero_capacity_nodes_take_nothing() {
        let mut p = triangle();
        p.prov[2] = vec![0.0];
        let c = p.classes.pop().unwrap();
        let a = min_max_load(&p, Strategy::Path, false).unwrap();
        for fr in &a.fractions {
            assert!(fr.iter().all(|&(n, d)| n != 2 || d == 0.0));
        }
        assert!(close(a.max_load, 0.3));
        // Class C only has node 2: no capacity anywhere on its path.
        p.classes.push(c);
        let err = min_max_load(&p, Strategy::Path, false).map(|a| a.max_load);
        // Coverage of class C cannot be met since d_{C,2} is fixed to 0.
        assert!(
            matches!(err, Err(CombError::Infeasible { ref families }) if families.iter().any(|f| f == FAMILY_COVERAGE)),
            "{err:?}"
        );
    }

    #[test]
    fn bad_inputs_get_clear_errors() {
        let mut p = triangle();
        p.prov[1][0] = -1.0;
        assert_eq!(
            min_max_load(&p, Strategy::Path, true).unwrap_err(),
            CombError::InvalidCapacity {
                node: 1,
                resource: 0,
                value: -1.0
            }
        );
        let mut p = triangle();
        p.classes[1].path.clear();
        assert_eq!(
            min_max_load(&p, Strategy::Path, true).unwrap_err(),
            CombError::EmptyPath { class: 1 }
        );
        let mut p = triangle();
        p.classes[1].path = vec![1, 7];
        assert!(matches!(
            min_max_load(&p, Strategy::Path, true),
            Err(CombError::UnknownNode { node: 7, .. })
        ));
        let mut p = triangle();
        p.classes[0].volume = f64::NAN;
        assert!(matches!(
            min_max_load(&p, Strategy::Path, true),
            Err(CombError::InvalidVolume { class: 0, .. })
        ));
    }

    /// Two nodes with 10 CPU each; an IPS class (hyperapp 0) on [0, 1] and a monitor
    /// class (hyperapp 1) on [1, 0], 10 units each, 1 CPU per unit. Resource 1 is an
    /// accelerator, present (capacity 10) only when `accel` is set, at node 1, where
    /// the IPS then needs 0.25 CPU and 0.5 accelerator per unit.
    fn accel_problem(accel: bool) -> NetworkProblem {
        NetworkProblem {
            prov: vec![vec![10.0, 0.0], vec![10.0, if accel { 10.0 } else { 0.0 }]],
            footprints: vec![vec![1.0, 0.0], vec![1.0, 0.0]],
            classes: vec![
                TrafficClass {
                    path: vec![0, 1],
                    volume: 10.0,
                    hyperapp: 0,
                },
                TrafficClass {
                    path: vec![1, 0],
                    volume: 10.0,
                    hyperapp: 1,
                },
            ],
            node_footprints: if accel {
                vec![NodeFootprint {
                    node: 1,
                    hyperapp: 0,
                    footprint: vec![0.25, 0.5],
                }]
            } else {
                Vec::new()
            },
        }
    }

    #[test]
    fn accelerator_shifts_ips_load_and_lowers_the_max_load() {
        // Without the accelerator: 20 units of CPU work on 20 CPU, max load 1. With it,
        // all IPS work moves to node 1 (2.5 CPU + 5 accel) and the monitor splits so
        // that node 0 (10 - 10y) and node 1 (2.5 + 10y) balance: y = 3/8, load 5/8.
        for aggregate in [false, true] {
            let build = |p| {
                if aggregate {
                    min_max_load_model_aggregated(p, Strategy::Path, true)
                } else {
                    min_max_load_model(p, Strategy::Path, true)
                }
            };
            let plain = accel_problem(false);
            let a = build(&plain)
                .unwrap()
                .solve(&SolverOptions::default())
                .unwrap();
            assert!(close(a.max_load, 1.0), "{a:?}");
            let fast = accel_problem(true);
            let b = build(&fast)
                .unwrap()
                .solve(&SolverOptions::default())
                .unwrap();
            assert!(close(b.max_load, 0.625), "aggregate={aggregate}: {b:?}");
            assert_eq!(b.fractions[0][1].0, 1);
            assert!(close(b.fractions[0][1].1, 1.0), "{b:?}");
            assert!(close(b.fractions[1][0].1, 0.375), "{b:?}");
            // Loads are computed with the node's own footprint.
            assert!(
                close(b.load[1][0], 0.625) && close(b.load[1][1], 0.5),
                "{b:?}"
            );
            assert!(close(b.load[0][0], 0.625), "{b:?}");
        }
        // A node without accelerator capacity cannot take work that needs one.
        let mut p = accel_problem(true);
        p.node_footprints[0].node = 0;
        let c = min_max_load(&p, Strategy::Path, false).unwrap();
        assert!(
            close(c.fractions[0][0].1, 0.0) && close(c.max_load, 1.0),
            "{c:?}"
        );
    }

    #[test]
    fn aggregation_keeps_node_dependent_footprints_apart() {
        // With one resource, hyperapps normally share splits; an override on one of
        // them must not leak to the others.
        let mut p = line_problem(1);
        p.node_footprints = vec![NodeFootprint {
            node: 2,
            hyperapp: 1,
            footprint: vec![0.1],
        }];
        let full = min_max_load_model(&p, Strategy::Path, false)
            .unwrap()
            .solve(&SolverOptions::default())
            .unwrap();
        let agg = min_max_load_model_aggregated(&p, Strategy::Path, false)
            .unwrap()
            .solve(&SolverOptions::default())
            .unwrap();
        assert!(
            (full.max_load - agg.max_load).abs() <= 1e-7 * full.max_load,
            "{} vs {}",
            full.max_load,
            agg.max_load
        );
        let plain = min_max_load(&line_problem(1), Strategy::Path, false).unwrap();
        assert!(agg.max_load < plain.max_load - 1e-6);
    }

    #[test]
    fn bad_node_footprints_get_clear_errors() {
        let with = |o: NodeFootprint| {
            let mut p = accel_problem(true);
            p.node_footprints.push(o);
            min_max_load(&p, Strategy::Path, false).unwrap_err()
        };
        assert_eq!(
            with(NodeFootprint {
                node: 5,
                hyperapp: 0,
                footprint: vec![1.0, 0.0],
            }),
            CombError::NodeFootprintNode {
                index: 1,
                node: 5,
                nodes: 2
            }
        );
        assert_eq!(
            with(NodeFootprint {
                node: 0,
                hyperapp: 0,
                footprint: vec![-1.0, 0.0],
            }),
            CombError::InvalidNodeFootprint {
                node: 0,
                hyperapp: 0,
                expected: 2
            }
        );
        assert!(matches!(
            with(NodeFootprint {
                node: 0,
                hyperapp: 0,
                footprint: vec![1.0],
            }),
            CombError::InvalidNodeFootprint { .. }
        ));
        assert_eq!(
            with(NodeFootprint {
                node: 0,
                hyperapp: 9,
                footprint: vec![1.0, 0.0],
            }),
            CombError::NodeFootprintHyperapp {
                index: 1,
                hyperapp: 9
            }
        );
        assert_eq!(
            with(NodeFootprint {
                node: 1,
                hyperapp: 0,
                footprint: vec![1.0, 0.0],
            }),
            CombError::DuplicateNodeFootprint {
                node: 1,
                hyperapp: 0
            }
        );
        let msg = with(NodeFootprint {
            node: 5,
            hyperapp: 0,
            footprint: vec![1.0, 0.0],
        })
        .to_string();
        assert!(
            msg.contains("node 5") && msg.contains("out of range"),
            "{msg}"
        );
    }

    #[test]
    fn provisioning_exploits_spatial_distribution_over_time() {
        // Paper Fig. 3 spirit: two paths sharing node 2, peaking at different epochs.
        let p = ProvisioningProblem {
            nodes: 3,
            footprints: vec![vec![1.0]],
            classes: vec![
                TrafficClass {
                    path: vec![0, 2],
                    volume: 0.0,
                    hyperapp: 0,
                },
                TrafficClass {
                    path: vec![1, 2],
                    volume: 0.0,
                    hyperapp: 0,
                },
            ],
            epochs: vec![vec![30.0, 0.0], vec![0.0, 30.0]],
        };
        let ingress = min_provisioning(&p, Strategy::Ingress).unwrap();
        assert!(close(ingress.cost, 60.0));
        let path = min_provisioning(&p, Strategy::Path).unwrap();
        // Each epoch's 30 units split over 0/2 (resp. 1/2): prov0 + prov2 >= 30 and
        // prov1 + prov2 >= 30; optimum is prov2 = 30, cost 30.
        assert!(close(path.cost, 30.0), "{}", path.cost);
    }

    /// `line_problem`'s classes over `epochs` pseudo-random epochs.
    fn line_epochs(resources: usize, epochs: usize) -> ProvisioningProblem {
        let base = line_problem(resources);
        let mut x: u64 = 12345;
        let mut next = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        let epochs = (0..epochs)
            .map(|_| {
                base.classes
                    .iter()
                    .map(|c| c.volume * 3.0 * next() * next())
                    .collect()
            })
            .collect();
        ProvisioningProblem {
            nodes: 5,
            footprints: base.footprints,
            classes: base.classes,
            epochs,
        }
    }

    #[test]
    fn decomposed_provisioning_matches_the_monolithic_lp() {
        for resources in [1, 2] {
            let p = line_epochs(resources, 12);
            for s in [Strategy::Path, Strategy::Edge, Strategy::Ingress] {
                let a = min_provisioning(&p, s).unwrap();
                let b = min_provisioning_monolithic(&p, s).unwrap();
                assert!(
                    (a.cost - b.cost).abs() <= 1e-6 * b.cost,
                    "{resources} resources, {s:?}: {} vs {}",
                    a.cost,
                    b.cost
                );
                // The decomposed provisioning really serves every epoch.
                let g = EpochGroups::new(&p, s, None).unwrap();
                let flat: Vec<f64> = a.prov.iter().flatten().copied().collect();
                for e in 0..p.epochs.len() {
                    let (lambda, _) = g.epoch_max_load(e, &flat).unwrap();
                    assert!(lambda <= 1.0 + 1e-6, "{s:?} epoch {e}: {lambda}");
                }
            }
        }
        // Two-step, with per-hyperapp pinned parts.
        let p = line_epochs(1, 12);
        let pin: Vec<PinnedPart> = p
            .classes
            .iter()
            .map(|c| PinnedPart {
                fixed: vec![0.5 * (c.hyperapp + 1) as f64],
                at_ingress: vec![p.footprints[c.hyperapp][0] * 0.6],
            })
            .collect();
        for s in [Strategy::Path, Strategy::Edge, Strategy::Ingress] {
            let a = min_provisioning_two_step(&p, &pin, s).unwrap();
            let b = min_provisioning_two_step_monolithic(&p, &pin, s).unwrap();
            assert!(
                (a.cost - b.cost).abs() <= 1e-6 * b.cost,
                "two-step {s:?}: {} vs {}",
                a.cost,
                b.cost
            );
        }
    }

    #[test]
    fn two_step_pins_work_at_the_ingress_and_discounts_reuse() {
        // One class on [0, 1], volume 10. Pinned part costs 1 at the ingress; the
        // distributable part costs 2 elsewhere but only 1 at the ingress (reuse).
        let p = ProvisioningProblem {
            nodes: 2,
            footprints: vec![vec![2.0]],
            classes: vec![TrafficClass {
                path: vec![0, 1],
                volume: 0.0,
                hyperapp: 0,
            }],
            epochs: vec![vec![10.0]],
        };
        let pin = vec![PinnedPart {
            fixed: vec![1.0],
            at_ingress: vec![1.0],
        }];
        let a = min_provisioning_two_step(&p, &pin, Strategy::Path).unwrap();
        // Cheapest: everything at the ingress, 10 + 10 = 20 (elsewhere would cost 10 + 20).
        assert!(close(a.cost, 20.0), "{a:?}");
        assert!(close(a.prov[0][0], 20.0));
        let bad = vec![PinnedPart {
            fixed: vec![-1.0],
            at_ingress: vec![1.0],
        }];
        assert!(matches!(
            min_provisioning_two_step(&p, &bad, Strategy::Path),
            Err(CombError::AppSpec(_))
        ));
        assert!(matches!(
            min_provisioning_two_step(&p, &[], Strategy::Path),
            Err(CombError::AppSpec(_))
        ));
    }

    #[test]
    fn strawman_relaxation_lower_bounds_the_hyperapp_model() {
        // Appendix A flavour: two apps sharing a module, classes on overlapping paths.
        let apps = vec![
            Application {
                name: "a".into(),
                subscribes: vec!["x".into(), "y".into()],
                specific: vec![1.0],
                modules: vec!["s".into()],
            },
            Application {
                name: "b".into(),
                subscribes: vec!["x".into()],
                specific: vec![1.0],
                modules: vec!["s".into()],
            },
        ];
        let modules = vec![Module {
            name: "s".into(),
            footprint: vec![1.0],
        }];
        let order = vec![("a".to_string(), "b".to_string())];
        let prov = vec![vec![10.0]; 3];
        let kinds = vec![
            KindClass {
                path: vec![0, 1],
                volume: 6.0,
                kind: "x".into(),
            },
            KindClass {
                path: vec![1, 2],
                volume: 6.0,
                kind: "y".into(),
            },
            KindClass {
                path: vec![2],
                volume: 3.0,
                kind: "x".into(),
            },
        ];
        let straw = strawman_min_max_load(&prov, &apps, &modules, &order, &kinds).unwrap();
        let hs = derive_hyperapps(&apps, &modules, &order, 1).unwrap();
        let h_of = |k: &str| {
            hs.iter()
                .position(|h| h.kinds.iter().any(|x| x == k))
                .unwrap()
        };
        let problem = NetworkProblem {
            prov: prov.clone(),
            footprints: hs.iter().map(|h| h.footprint_reuse.clone()).collect(),
            classes: kinds
                .iter()
                .map(|k| TrafficClass {
                    path: k.path.clone(),
                    volume: k.volume,
                    hyperapp: h_of(&k.kind),
                })
                .collect(),
            node_footprints: Vec::new(),
        };
        let hyper = min_max_load(&problem, Strategy::Path, false)
            .unwrap()
            .max_load;
        assert!(straw <= hyper + 1e-9, "{straw} > {hyper}");
        // Total work is at least 6*3 + 6*2 + 3*3 = 39 over 30 capacity.
        assert!(straw >= 39.0 / 30.0 - 1e-9, "{straw}");
        let mut bad = kinds.clone();
        bad[0].path.clear();
        assert_eq!(
            strawman_min_max_load(&prov, &apps, &modules, &order, &bad).unwrap_err(),
            CombError::EmptyPath { class: 0 }
        );
    }

    #[test]
    fn random_instances_meet_coverage_and_strategy_order() {
        // A small LCG keeps the crate free of RNG dependencies.
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as f64 / (1u64 << 31) as f64
        };
        for _ in 0..20 {
            let nodes = 5;
            let prov: Vec<Vec<f64>> = (0..nodes)
                .map(|_| vec![50.0 + 100.0 * next(), 50.0 + 100.0 * next()])
                .collect();
            let footprints = vec![vec![1.0, 0.5], vec![0.2, 2.0]];
            let classes: Vec<TrafficClass> = (0..8)
                .map(|i| {
                    let a = (next() * nodes as f64) as usize % nodes;
                    let b = (a + 1 + (next() * 3.0) as usize) % nodes;
                    let path = if a < b {
                        (a..=b).collect()
                    } else {
                        (b..=a).rev().collect()
                    };
                    TrafficClass {
                        path,
                        volume: 10.0 + 40.0 * next(),
                        hyperapp: i % 2,
                    }
                })
                .collect();
            let p = NetworkProblem {
                prov,
                footprints,
                classes,
                node_footprints: Vec::new(),
            };
            let mut prev = f64::INFINITY;
            for s in [Strategy::Ingress, Strategy::Edge, Strategy::Path] {
                let a = min_max_load(&p, s, false).unwrap();
                for (c, fr) in a.fractions.iter().enumerate() {
                    assert!(close(fr.iter().map(|x| x.1).sum::<f64>(), 1.0), "class {c}");
                    let allowed = s.eligible(&p.classes[c].path);
                    assert!(fr.iter().all(|(n, _)| allowed.contains(n)));
                }
                assert!(a.load.iter().flatten().all(|&l| l <= a.max_load + 1e-7));
                // More freedom never hurts: Ingress >= Edge >= Path.
                assert!(a.max_load <= prev + 1e-7, "{s:?}: {} > {prev}", a.max_load);
                prev = a.max_load;
            }
        }
    }

    #[test]
    fn hyperapps_follow_policy_order_and_reuse_modules() {
        let apps = vec![
            Application {
                name: "proxy".into(),
                subscribes: vec!["http".into()],
                specific: vec![1.0],
                modules: vec!["session".into(), "http".into()],
            },
            Application {
                name: "ids".into(),
                subscribes: vec!["http".into(), "udp".into()],
                specific: vec![2.0],
                modules: vec!["session".into()],
            },
            Application {
                name: "wanopt".into(),
                subscribes: vec!["nfs".into()],
                specific: vec![3.0],
                modules: vec!["session".into()],
            },
        ];
        let modules = vec![
            Module {
                name: "session".into(),
                footprint: vec![4.0],
            },
            Module {
                name: "http".into(),
                footprint: vec![0.5],
            },
        ];
        let order = vec![("ids".to_string(), "proxy".to_string())];
        let hs = derive_hyperapps(&apps, &modules, &order, 1).unwrap();
        assert_eq!(hs.len(), 3);
        let http = hs
            .iter()
            .find(|h| h.kinds.contains(&"http".to_string()))
            .unwrap();
        assert_eq!(http.apps, vec![1, 0], "ids must precede proxy");
        // Reuse counts the session module once: 1 + 2 + 4 + 0.5.
        assert!(close(http.footprint_reuse[0], 7.5));
        // Standalone: proxy (1 + 4 + 0.5) + ids (2 + 4).
        assert!(close(http.footprint_standalone[0], 11.5));
        let cyc = vec![
            ("ids".to_string(), "proxy".to_string()),
            ("proxy".to_string(), "ids".to_string()),
        ];
        assert!(matches!(
            derive_hyperapps(&apps, &modules, &cyc, 1),
            Err(CombError::AppSpec(_))
        ));
    }

    #[test]
    fn per_box_lp_splits_a_heavy_hyperapp() {
        // Work 1.5 and 0.5 over two unit cores: optimum load 1.0 on both.
        let a = assign_cores(&[1.5, 0.5], &[1.0, 1.0], true).unwrap();
        assert!(close(a.max_load, 1.0));
        for row in &a.fractions {
            assert!(close(row.iter().sum::<f64>(), 1.0));
        }
        assert!(a.core_load.iter().all(|&l| close(l, 1.0)));
        match assign_cores(&[3.0], &[1.0, 1.0], true) {
            Err(CombError::Infeasible { families }) => {
                assert!(families.iter().any(|f| f == FAMILY_CAPACITY))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            assign_cores(&[1.0], &[], true),
            Err(CombError::InvalidCore { .. })
        ));
        assert!(matches!(
            assign_cores(&[1.0], &[-2.0], true),
            Err(CombError::InvalidCore { core: 0, .. })
        ));
    }
}
