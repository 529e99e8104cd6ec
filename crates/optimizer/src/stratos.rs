//! Stratos's flow distribution among middlebox instances (Gember et al., §4.2).
//!
//! A chain has stages `1..M`; stage `r` has `k_r` instances, each at a location (a rack).
//! Flows entering the chain must be spread so that every instance of a stage receives
//! `N / k_r` flows. The *uniform* scheme splits equally; the *network-aware* LP chooses
//! `x_{r,i,j}` (share of `m_{r,i}`'s flows sent to `m_{r+1,j}`) minimising flows that
//! cross racks, with reverse-path variables `y` tied to `x` by the bi-directional
//! constraint `N/k_r * x_{r,i,j} = N/k_{r+1} * y_{r+1,j,i}`.

use crate::lp::{Direction, LinearProgram, LpError, Var};

/// Constraint family: the shares leaving an instance sum to 1.
pub const FAMILY_SPLIT: &str = "outgoing shares sum to 1";
/// Constraint family: every instance of a stage receives `N / k` flows.
pub const FAMILY_BALANCE: &str = "per-instance load balance";
/// Constraint family: forward and reverse paths traverse the same instances.
pub const FAMILY_BIDIR: &str = "bi-directional symmetry";

/// Errors from the flow-distribution formulations.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StratosError {
    /// A chain needs at least two stages for there to be anything to distribute.
    #[error("a chain needs at least two stages, got {0}")]
    TooFewStages(usize),
    /// A stage has no instance.
    #[error("stage {0} has no instances")]
    EmptyStage(usize),
    /// The number of flows is negative or not finite.
    #[error("flow count {0} must be finite and non-negative")]
    BadFlowCount(f64),
    /// A cost matrix has the wrong shape or a bad entry.
    #[error("cost matrix between stage {stage} and the next is malformed")]
    BadCosts {
        /// Stage whose outgoing costs are malformed.
        stage: usize,
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
}

impl From<LpError> for StratosError {
    fn from(e: LpError) -> Self {
        match e {
            LpError::Infeasible { families } => StratosError::Infeasible { families },
            other => StratosError::Solver(other),
        }
    }
}

/// A chain of middlebox stages with instance locations.
#[derive(Debug, Clone, PartialEq)]
pub struct Chain {
    /// `locations[r][i]`: location (rack) of instance `i` of stage `r`.
    pub locations: Vec<Vec<usize>>,
    /// Number of flows `N` entering the chain.
    pub flows: f64,
}

impl Chain {
    fn check(&self) -> Result<(), StratosError> {
        if self.locations.len() < 2 {
            return Err(StratosError::TooFewStages(self.locations.len()));
        }
        if let Some(r) = self.locations.iter().position(Vec::is_empty) {
            return Err(StratosError::EmptyStage(r));
        }
        if !self.flows.is_finite() || self.flows < 0.0 {
            return Err(StratosError::BadFlowCount(self.flows));
        }
        Ok(())
    }

    /// Cost `c_{r,i,j}`: 1 if the two instances are in different locations, else 0.
    pub fn inter_rack_costs(&self) -> Vec<Vec<Vec<f64>>> {
        self.locations
            .windows(2)
            .map(|w| {
                w[0].iter()
                    .map(|a| {
                        w[1].iter()
                            .map(|b| if a == b { 0.0 } else { 1.0 })
                            .collect()
                    })
                    .collect()
            })
            .collect()
    }
}

/// Shares of flows between consecutive stages, in both directions.
#[derive(Debug, Clone, PartialEq)]
pub struct Distribution {
    /// `forward[r][i][j]`: share of `m_{r,i}`'s flows sent to `m_{r+1,j}`.
    pub forward: Vec<Vec<Vec<f64>>>,
    /// `reverse[r][i][j]`: share of `m_{r+1,i}`'s reverse flows sent to `m_{r,j}`
    /// (indexed by the lower stage `r` of the hop).
    pub reverse: Vec<Vec<Vec<f64>>>,
}

impl Distribution {
    /// Flows crossing locations in the forward direction under `costs`.
    pub fn forward_cost(&self, chain: &Chain, costs: &[Vec<Vec<f64>>]) -> f64 {
        let mut total = 0.0;
        for (r, hop) in self.forward.iter().enumerate() {
            let per = chain.flows / chain.locations[r].len() as f64;
            for (i, row) in hop.iter().enumerate() {
                for (j, x) in row.iter().enumerate() {
                    total += per * costs[r][i][j] * x;
                }
            }
        }
        total
    }
}

/// The uniform scheme: every instance splits equally among the next stage's instances.
pub fn uniform(chain: &Chain) -> Result<Distribution, StratosError> {
    chain.check()?;
    let hops = |fwd: bool| {
        chain
            .locations
            .windows(2)
            .map(|w| {
                let (from, to) = if fwd {
                    (w[0].len(), w[1].len())
                } else {
                    (w[1].len(), w[0].len())
                };
                vec![vec![1.0 / to as f64; to]; from]
            })
            .collect()
    };
    Ok(Distribution {
        forward: hops(true),
        reverse: hops(false),
    })
}

/// The network-aware LP of §4.2. `costs[r][i][j]` defaults to
/// [`Chain::inter_rack_costs`]; pass link-aware costs to weigh scarce paths more (the
/// paper's footnote 4). With `bidirectional`, reverse flows retrace forward flows.
pub fn network_aware(
    chain: &Chain,
    costs: Option<&[Vec<Vec<f64>>]>,
    bidirectional: bool,
) -> Result<Distribution, StratosError> {
    chain.check()?;
    let default_costs;
    let costs = match costs {
        Some(c) => c,
        None => {
            default_costs = chain.inter_rack_costs();
            &default_costs
        }
    };
    let locs = &chain.locations;
    if costs.len() != locs.len() - 1 {
        return Err(StratosError::BadCosts {
            stage: costs.len().min(locs.len() - 1),
        });
    }
    for (r, m) in costs.iter().enumerate() {
        let ok = m.len() == locs[r].len()
            && m.iter().all(|row| {
                row.len() == locs[r + 1].len() && row.iter().all(|c| c.is_finite() && *c >= 0.0)
            });
        if !ok {
            return Err(StratosError::BadCosts { stage: r });
        }
    }
    let n = chain.flows;
    let k = |r: usize| locs[r].len() as f64;
    let mut lp = LinearProgram::new(Direction::Minimise);
    // x[r][i][j] and y[r][j][i] for the hop between stages r and r+1.
    let mut x: Vec<Vec<Vec<Var>>> = Vec::new();
    let mut y: Vec<Vec<Vec<Var>>> = Vec::new();
    for r in 0..locs.len() - 1 {
        let per_fwd = n / k(r);
        let per_rev = n / k(r + 1);
        x.push(
            (0..locs[r].len())
                .map(|i| {
                    (0..locs[r + 1].len())
                        .map(|j| lp.add_var(per_fwd * costs[r][i][j], 0.0, 1.0))
                        .collect()
                })
                .collect(),
        );
        y.push(
            (0..locs[r + 1].len())
                .map(|j| {
                    (0..locs[r].len())
                        .map(|i| lp.add_var(per_rev * costs[r][i][j], 0.0, 1.0))
                        .collect()
                })
                .collect(),
        );
    }
    for r in 0..locs.len() - 1 {
        for row in &x[r] {
            lp.add_constraint(FAMILY_SPLIT, 1.0, 1.0, row.iter().map(|&v| (v, 1.0)));
        }
        for row in &y[r] {
            lp.add_constraint(FAMILY_SPLIT, 1.0, 1.0, row.iter().map(|&v| (v, 1.0)));
        }
        // Forward arrivals at stage r+1 and reverse arrivals at stage r are balanced.
        for j in 0..locs[r + 1].len() {
            let target = n / k(r + 1);
            lp.add_constraint(
                FAMILY_BALANCE,
                target,
                target,
                x[r].iter().map(|row| (row[j], n / k(r))),
            );
        }
        for i in 0..locs[r].len() {
            let target = n / k(r);
            lp.add_constraint(
                FAMILY_BALANCE,
                target,
                target,
                y[r].iter().map(|row| (row[i], n / k(r + 1))),
            );
        }
        if bidirectional {
            for i in 0..locs[r].len() {
                for j in 0..locs[r + 1].len() {
                    lp.add_constraint(
                        FAMILY_BIDIR,
                        0.0,
                        0.0,
                        [(x[r][i][j], n / k(r)), (y[r][j][i], -n / k(r + 1))],
                    );
                }
            }
        }
    }
    let sol = lp.solve()?;
    let read = |m: &Vec<Vec<Vec<Var>>>| -> Vec<Vec<Vec<f64>>> {
        m.iter()
            .map(|hop| {
                hop.iter()
                    .map(|row| row.iter().map(|&v| sol.value(v).clamp(0.0, 1.0)).collect())
                    .collect()
            })
            .collect()
    };
    Ok(Distribution {
        forward: read(&x),
        reverse: read(&y),
    })
}

/// Building block of Stratos's initial placement (§5.1, min-cut clustering): the subset of
/// `take` vertices of `vs` with the least edge weight (`weight(a, b)`) to the rest of `vs`,
/// i.e. the VMs to co-locate in a rack with `take` free slots. Exhaustive for up to 16
/// vertices, greedy growth from the first vertex beyond.
pub fn min_cut_subset(
    vs: &[usize],
    take: usize,
    weight: &dyn Fn(usize, usize) -> f64,
) -> Vec<usize> {
    if take >= vs.len() {
        return vs.to_vec();
    }
    let cut = |s: &[usize]| -> f64 {
        s.iter()
            .map(|&a| {
                vs.iter()
                    .filter(|v| !s.contains(v))
                    .map(|&b| weight(a, b))
                    .sum::<f64>()
            })
            .sum()
    };
    if vs.len() <= 16 {
        let mut best: Option<(f64, Vec<usize>)> = None;
        for mask in 0u32..(1 << vs.len()) {
            if mask.count_ones() as usize != take {
                continue;
            }
            let s: Vec<usize> = (0..vs.len())
                .filter(|&i| mask >> i & 1 == 1)
                .map(|i| vs[i])
                .collect();
            let c = cut(&s);
            if best.as_ref().is_none_or(|(bc, _)| c < *bc - 1e-12) {
                best = Some((c, s));
            }
        }
        return best.expect("take < len so a subset exists").1;
    }
    let mut s = vec![vs[0]];
    while s.len() < take {
        let next = vs
            .iter()
            .copied()
            .filter(|v| !s.contains(v))
            .max_by(|&a, &b| {
                let wa: f64 = s.iter().map(|&x| weight(x, a)).sum();
                let wb: f64 = s.iter().map(|&x| weight(x, b)).sum();
                wa.total_cmp(&wb).then(b.cmp(&a))
            })
            .expect("fewer than len chosen");
        s.push(next);
    }
    s
}

/// One rack (locality domain) as Stratos's instance placement (§5.2) sees it when a
/// middlebox gets one more instance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RackDemand {
    /// The middlebox's traffic sources and sinks (its chains' VMs) in the rack.
    pub endpoints: u32,
    /// The middlebox's instances already in the rack.
    pub instances: u32,
    /// Whether one more instance fits in the rack.
    pub room: bool,
    /// How loaded the rack is (e.g. instances per host): the lower wins when demand
    /// ties.
    pub load: f64,
}

/// The rack [`rack_for_instance`] chose, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RackChoice {
    /// Index of the chosen rack.
    pub rack: usize,
    /// Whether it holds endpoints of the middlebox (else no rack with room does,
    /// and it is the least loaded).
    pub local: bool,
    /// Racks it would have preferred but that have no room, best first.
    pub full: Vec<usize>,
}

/// Whether rack `a` is preferred to rack `b` for the next instance: the most demand
/// not yet served, `endpoints / (instances + 1)` (so that instances are shared out
/// among racks in proportion to their endpoints, as seats by the highest averages),
/// then the most endpoints, then the least load, then the lowest index. Exact: the
/// quotients are compared by cross-multiplying integers.
fn rack_order(racks: &[RackDemand], a: usize, b: usize) -> std::cmp::Ordering {
    let (x, y) = (&racks[a], &racks[b]);
    let qa = u64::from(x.endpoints) * (u64::from(y.instances) + 1);
    let qb = u64::from(y.endpoints) * (u64::from(x.instances) + 1);
    qb.cmp(&qa)
        .then(y.endpoints.cmp(&x.endpoints))
        .then(x.load.total_cmp(&y.load))
        .then(a.cmp(&b))
}

/// Stratos's rack for one more instance of a middlebox (§5.2, initial placement and
/// scale-out alike): next to its input/output VMs, in the rack with the most of its
/// endpoints not yet served by an instance there, among racks with room; else (no
/// rack with room holds an endpoint) the least-loaded rack with room. `None`: no rack
/// has room. Pure and deterministic.
pub fn rack_for_instance(racks: &[RackDemand]) -> Option<RackChoice> {
    let mut order: Vec<usize> = (0..racks.len()).collect();
    order.sort_by(|&a, &b| rack_order(racks, a, b));
    let pos = order.iter().position(|&r| racks[r].room)?;
    let rack = order[pos];
    Some(RackChoice {
        rack,
        local: racks[rack].endpoints > 0,
        full: order[..pos]
            .iter()
            .copied()
            .filter(|&r| racks[r].endpoints > 0)
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fig. 7: 3 IPS and 4 RE instances over two racks.
    fn fig7() -> Chain {
        Chain {
            locations: vec![vec![0, 0, 1], vec![0, 0, 1, 1]],
            flows: 3.0,
        }
    }

    #[test]
    fn uniform_crosses_racks_three_halves_n() {
        let c = fig7();
        let d = uniform(&c).unwrap();
        // N = flows per IPS in the paper; here total 3 -> N = 1, uniform = 3N/2.
        assert!((d.forward_cost(&c, &c.inter_rack_costs()) - 1.5).abs() < 1e-9);
    }

    #[test]
    fn network_aware_crosses_racks_half_n_and_stays_balanced() {
        let c = fig7();
        let d = network_aware(&c, None, true).unwrap();
        assert!((d.forward_cost(&c, &c.inter_rack_costs()) - 0.5).abs() < 1e-7);
        // Each RE still receives 3N/4.
        for j in 0..4 {
            let got: f64 = (0..3).map(|i| d.forward[0][i][j]).sum::<f64>();
            assert!((got - 0.75).abs() < 1e-7, "RE {j} got {got}");
        }
        // Reverse retraces forward: N/3 x_{ij} = N/4 y_{ji}.
        for i in 0..3 {
            for j in 0..4 {
                assert!((d.forward[0][i][j] / 3.0 - d.reverse[0][j][i] / 4.0).abs() < 1e-7);
            }
        }
    }

    #[test]
    fn min_cut_subset_cuts_the_chain_at_a_thin_edge() {
        // Path 0-1-2-3 with a thin middle edge: taking 2 should pick {0,1} or {2,3}.
        let w = |a: usize, b: usize| match (a.min(b), a.max(b)) {
            (0, 1) | (2, 3) => 10.0,
            (1, 2) => 1.0,
            _ => 0.0,
        };
        let s = min_cut_subset(&[0, 1, 2, 3], 2, &w);
        assert!(s == vec![0, 1] || s == vec![2, 3], "{s:?}");
    }

    fn rd(endpoints: u32, instances: u32, room: bool, load: f64) -> RackDemand {
        RackDemand {
            endpoints,
            instances,
            room,
            load,
        }
    }

    #[test]
    fn instances_go_where_the_endpoints_are_in_proportion() {
        // 3 endpoints in rack 0, 1 in rack 1, none in the emptier rack 2.
        let mut racks = vec![
            rd(3, 0, true, 2.0),
            rd(1, 0, true, 1.0),
            rd(0, 0, true, 0.0),
        ];
        let mut got = Vec::new();
        for _ in 0..4 {
            let c = rack_for_instance(&racks).unwrap();
            assert!(c.local && c.full.is_empty(), "{c:?}");
            racks[c.rack].instances += 1;
            got.push(c.rack);
        }
        // Quotients 3, 1 -> 1.5, 1 -> 1, 1 (tie: more endpoints) -> 0.75, 1.
        assert_eq!(got, vec![0, 0, 0, 1]);
    }

    #[test]
    fn a_full_rack_spills_to_the_next_and_no_endpoint_means_least_loaded() {
        let racks = vec![
            rd(3, 0, false, 0.0),
            rd(1, 0, true, 5.0),
            rd(0, 0, true, 0.0),
        ];
        let c = rack_for_instance(&racks).unwrap();
        assert_eq!((c.rack, c.local, c.full), (1, true, vec![0]));
        let racks = vec![
            rd(3, 0, false, 0.0),
            rd(0, 0, true, 5.0),
            rd(0, 0, true, 1.0),
        ];
        let c = rack_for_instance(&racks).unwrap();
        assert_eq!((c.rack, c.local, c.full), (2, false, vec![0]));
        assert_eq!(rack_for_instance(&[rd(3, 0, false, 0.0)]), None);
        assert_eq!(rack_for_instance(&[]), None);
    }

    #[test]
    fn rejects_degenerate_chains() {
        assert_eq!(
            uniform(&Chain {
                locations: vec![vec![0]],
                flows: 1.0
            })
            .unwrap_err(),
            StratosError::TooFewStages(1)
        );
        assert_eq!(
            network_aware(
                &Chain {
                    locations: vec![vec![0], vec![]],
                    flows: 1.0
                },
                None,
                true
            )
            .unwrap_err(),
            StratosError::EmptyStage(1)
        );
        assert_eq!(
            network_aware(
                &Chain {
                    locations: vec![vec![0], vec![1]],
                    flows: -1.0
                },
                None,
                true
            )
            .unwrap_err(),
            StratosError::BadFlowCount(-1.0)
        );
        let bad = vec![vec![vec![1.0, 2.0]]];
        assert_eq!(
            network_aware(&fig7(), Some(&bad), true).unwrap_err(),
            StratosError::BadCosts { stage: 0 }
        );
    }
}
