//! CoMb's strawman formulation (application-level, no hyperapps, eqs. (1)-(4)) and the
//! per-box core assignment LP, eqs. (9)-(12).

use super::*;

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
