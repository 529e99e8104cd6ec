//! Network-aware flow distribution that a hash-splitting data plane can install
//! as **one split per middlebox, the same on every host**.
//!
//! Stratos's LP ([`crate::stratos::network_aware`]) chooses, for every instance
//! `i` of a stage, the share of its flows sent to each instance `j` of the next
//! stage. A data plane that picks the next instance by the flow's hash on the
//! host where the packet is would realise that with a different split per
//! previous hop, and then the reply of a flow, hashed on other hosts, would not
//! retrace its request through the same instances. Sluice keeps one split per
//! middlebox on every host (both directions of a flow hash alike, and the
//! ownership leases of `state: cached` middleboxes are ranges of that split),
//! and gets locality another way: every middlebox's split lists its instances
//! **rack by rack, in one rack order**, so the hashes a stage sends to rack `k`
//! are, as far as the shares allow, the hashes the next stage keeps in rack `k`.
//! A flow whose hash falls in rack `k`'s range at every stage never leaves rack
//! `k` between middleboxes.
//!
//! What is left to choose is each stage's share per rack (`s[g][k]`, the part
//! of the hash space its rack-`k` instances own). With equal shares per
//! instance (Stratos's balance) they are fixed by the placement; with some
//! headroom per instance ([`Stage::max_share`]) this LP moves shares towards the
//! racks where the traffic enters and leaves, minimising the worst uplink
//! utilisation, the objective the issue and Stratos's §4.2 footnote name, then
//! the traffic crossing racks, then the distance from an even split.
//!
//! With a **target utilisation** ([`Problem::target`]) the LP only relieves:
//! it minimises how far the worst uplink exceeds the target, then the
//! distance from the even split, then the crossing traffic. Minimising the
//! worst utilisation outright moves flows towards the racks where traffic
//! enters even when the uplinks are idle, and piles a middlebox's flows on
//! the instances (and the hosts' data planes) of one rack: measured on the
//! testbed, that cost 3-6% of the served throughput with free uplinks
//! (docs/REPRODUCTION.md). An uplink below its target is not a bottleneck,
//! so below it balance wins.
//!
//! Traffic between two stages crossing from rack `i` to rack `j` is the overlap
//! of the first stage's rack-`i` interval with the second's rack-`j` interval
//! ([`evaluate`], exact for the layout). The LP uses `max(0, s[a][k] - s[b][k])`
//! for what leaves rack `k` at such a hop, which is exact with two racks and a
//! lower bound with more (intervals of other racks may sit between); hysteresis
//! and reports use [`evaluate`]. Traffic from an endpoint whose choice does not
//! depend on the hash (the clients' VMs, the service a packet is addressed to)
//! is independent of it: `e[i] * s[j]` goes from rack `i` to rack `j`.

use crate::lp::{Direction, LinearProgram, LpError, Var};

/// Constraint family: a stage's shares cover the hash space.
pub const FAMILY_COVER: &str = "stage shares sum to 1";
/// Constraint family: traffic leaving or entering a rack at a hop.
pub const FAMILY_CROSSING: &str = "rack crossing";
/// Constraint family: the worst uplink utilisation bounds every uplink.
pub const FAMILY_UPLINK: &str = "uplink utilisation";
/// Constraint family: the worst utilisation's excess over the target.
pub const FAMILY_TARGET: &str = "excess over the target";
/// Constraint family: distance from the even split.
pub const FAMILY_EVEN: &str = "distance from even";
/// Constraint family: a pool's stages within their instances' bound.
pub const FAMILY_POOL: &str = "pool share bound";

/// One middlebox: how many of its instances run in each rack, and the most of
/// the hash space each rack's instances may take.
#[derive(Debug, Clone, PartialEq)]
pub struct Stage {
    /// Instances per rack.
    pub instances: Vec<u32>,
    /// Upper bound of each rack's share (0 where it has no instance; the even
    /// share, `instances[k] / total`, for Stratos's exact balance).
    pub max_share: Vec<f64>,
}

impl Stage {
    /// A stage whose instances may each take up to `1 + slack` times an even
    /// share of its flows.
    pub fn with_slack(instances: Vec<u32>, slack: f64) -> Stage {
        let total: u32 = instances.iter().sum();
        let max_share = instances
            .iter()
            .map(|&n| {
                if total == 0 {
                    0.0
                } else {
                    (f64::from(n) / f64::from(total) * (1.0 + slack.max(0.0))).min(1.0)
                }
            })
            .collect();
        Stage {
            instances,
            max_share,
        }
    }

    /// Each rack's share when every instance takes the same.
    pub fn even(&self) -> Vec<f64> {
        let total: u32 = self.instances.iter().sum();
        self.instances
            .iter()
            .map(|&n| {
                if total == 0 {
                    0.0
                } else {
                    f64::from(n) / f64::from(total)
                }
            })
            .collect()
    }
}

/// One end of a hop.
#[derive(Debug, Clone, PartialEq)]
pub enum End {
    /// A middlebox (index into [`Problem::stages`]).
    Stage(usize),
    /// An endpoint whose choice of rack does not depend on the flow's hash:
    /// the share of the hop's traffic at each rack (summing to 1).
    Fixed(Vec<f64>),
}

/// Traffic between two consecutive elements of a chain.
#[derive(Debug, Clone, PartialEq)]
pub struct Hop {
    /// Where it comes from.
    pub from: End,
    /// Where it goes.
    pub to: End,
    /// Traffic in the chain's direction (any unit, the same for every hop).
    pub forward: f64,
    /// Traffic of the replies, which retrace the hop backwards.
    pub reverse: f64,
}

/// Stages that are one middlebox's splits for different classes of its
/// flows (the flows to each rack's servers, each class with a split of its
/// own): they share the middlebox's instances, so their loads add up per
/// rack, and it is the sum that must respect the instances' bounds and
/// stays near the even split. A stage in a pool takes its bound from the
/// pool (its own [`Stage::max_share`] is 1 wherever it has instances).
#[derive(Debug, Clone, PartialEq)]
pub struct Pool {
    /// The pool's stages, each with its part of the pool's traffic (the
    /// parts sum to 1).
    pub stages: Vec<(usize, f64)>,
    /// Upper bound of each rack's share of the pool's traffic.
    pub max_share: Vec<f64>,
}

impl Pool {
    /// Its stages with their parts of the traffic summing to 1 (equal
    /// parts when none has traffic).
    fn parts(&self) -> impl Iterator<Item = (usize, f64)> + '_ {
        let total: f64 = self.stages.iter().map(|x| x.1).sum();
        let n = self.stages.len() as f64;
        self.stages
            .iter()
            .map(move |&(g, w)| (g, if total > 0.0 { w / total } else { 1.0 / n }))
    }
}

/// A tenant's distribution problem.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// Capacity of each rack's uplink, both ways (same unit as the traffic per
    /// second; equal capacities weigh crossings alike).
    pub uplinks: Vec<f64>,
    /// Middleboxes.
    pub stages: Vec<Stage>,
    /// Hops of every chain.
    pub hops: Vec<Hop>,
    /// The uplink utilisation below which an uplink is no bottleneck (a
    /// fraction of its capacity): `Some(t)` minimises the worst excess over
    /// `t`, then the distance from even shares, then the crossing traffic;
    /// `None` minimises the worst utilisation itself, then the crossing,
    /// then the distance from even (Stratos's objective; meaningful only
    /// when the capacities are real, which they are not when the caller
    /// weighs every uplink alike).
    pub target: Option<f64>,
    /// Stages sharing instances ([`Pool`]); every other stage is a
    /// middlebox of its own.
    pub pools: Vec<Pool>,
}

/// Errors of the aligned distribution.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AlignedError {
    /// Shapes disagree (a stage, an endpoint or the uplinks with the racks).
    #[error("malformed problem: {0}")]
    Malformed(String),
    /// The solver failed.
    #[error("LP solver: {0}")]
    Solver(#[from] LpError),
}

/// What a distribution puts on each uplink.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// Traffic out of and into each rack.
    pub uplink: Vec<(f64, f64)>,
    /// The worst of `max(out, in) / capacity` over racks (0 with no traffic).
    pub worst: f64,
    /// Traffic crossing racks, both ways, summed over hops.
    pub crossing: f64,
    /// How far the shares are from even: the part of the hash space moved
    /// away from an even split, averaged over stages (0 for even shares, at
    /// most 1).
    pub imbalance: f64,
    /// How far the worst utilisation exceeds [`Problem::target`] (0 within
    /// it; the worst utilisation itself when there is no target).
    pub excess: f64,
}

/// Rack shares per stage.
#[derive(Debug, Clone, PartialEq)]
pub struct Solution {
    /// `shares[g][k]`: the part of stage `g`'s hash space its rack-`k` instances own.
    pub shares: Vec<Vec<f64>>,
    /// Its uplink loads.
    pub evaluation: Evaluation,
}

impl Problem {
    fn racks(&self) -> usize {
        self.uplinks.len()
    }

    fn check(&self) -> Result<(), AlignedError> {
        let r = self.racks();
        if r == 0 {
            return Err(AlignedError::Malformed("no rack".into()));
        }
        if self.target.is_some_and(|t| !(t.is_finite() && t >= 0.0)) {
            return Err(AlignedError::Malformed(
                "the target utilisation must be a finite fraction, 0 or more".into(),
            ));
        }
        if self.uplinks.iter().any(|c| !(c.is_finite() && *c > 0.0)) {
            return Err(AlignedError::Malformed(
                "every uplink needs a positive capacity".into(),
            ));
        }
        for (g, s) in self.stages.iter().enumerate() {
            if s.instances.len() != r || s.max_share.len() != r {
                return Err(AlignedError::Malformed(format!(
                    "stage {g} describes {} racks, not {r}",
                    s.instances.len()
                )));
            }
            if s.instances.iter().sum::<u32>() == 0 {
                return Err(AlignedError::Malformed(format!(
                    "stage {g} has no instance"
                )));
            }
            if s.max_share.iter().any(|m| !m.is_finite() || *m < 0.0) {
                return Err(AlignedError::Malformed(format!(
                    "stage {g}: bad share bound"
                )));
            }
        }
        let mut pooled = vec![false; self.stages.len()];
        for (i, pool) in self.pools.iter().enumerate() {
            if pool.max_share.len() != r
                || pool.max_share.iter().any(|m| !m.is_finite() || *m < 0.0)
            {
                return Err(AlignedError::Malformed(format!(
                    "pool {i}: bad share bound"
                )));
            }
            for &(g, w) in &pool.stages {
                if g >= self.stages.len() || pooled[g] {
                    return Err(AlignedError::Malformed(format!(
                        "pool {i} names stage {g}, of {}, or one already pooled",
                        self.stages.len()
                    )));
                }
                if !(w.is_finite() && w >= 0.0) {
                    return Err(AlignedError::Malformed(format!(
                        "pool {i}: a stage's part of the traffic must be finite and non-negative"
                    )));
                }
                pooled[g] = true;
            }
        }
        for (h, hop) in self.hops.iter().enumerate() {
            for end in [&hop.from, &hop.to] {
                match end {
                    End::Stage(g) if *g >= self.stages.len() => {
                        return Err(AlignedError::Malformed(format!(
                            "hop {h} names stage {g}, of {}",
                            self.stages.len()
                        )))
                    }
                    End::Fixed(e)
                        if e.len() != r || e.iter().any(|x| !x.is_finite() || *x < 0.0) =>
                    {
                        return Err(AlignedError::Malformed(format!(
                            "hop {h}: an endpoint's rack shares are malformed"
                        )))
                    }
                    _ => {}
                }
            }
            let ok = |x: f64| x.is_finite() && x >= 0.0;
            if !ok(hop.forward) || !ok(hop.reverse) {
                return Err(AlignedError::Malformed(format!(
                    "hop {h}: traffic must be finite and non-negative"
                )));
            }
        }
        Ok(())
    }

    /// Every stage's even shares (what the uniform split gives, laid out rack
    /// by rack).
    pub fn even(&self) -> Vec<Vec<f64>> {
        self.stages.iter().map(Stage::even).collect()
    }

    /// The middleboxes as balance sees them: each pool, as its stages'
    /// traffic-weighted sum, and each stage in no pool; `(shares, even)`.
    fn balance_units(&self, shares: &[Vec<f64>]) -> Vec<(Vec<f64>, Vec<f64>)> {
        let r = self.racks();
        let mut pooled = vec![false; self.stages.len()];
        let mut units = Vec::new();
        for pool in &self.pools {
            let mut sum = vec![0.0; r];
            for (g, w) in pool.parts() {
                pooled[g] = true;
                for (k, x) in shares[g].iter().enumerate() {
                    sum[k] += w * x;
                }
            }
            if let Some(&(g, _)) = pool.stages.first() {
                units.push((sum, self.stages[g].even()));
            }
        }
        for (g, st) in self.stages.iter().enumerate() {
            if !pooled[g] {
                units.push((shares[g].clone(), st.even()));
            }
        }
        units
    }
}

/// The share of a hop's traffic going from rack `i` to rack `j`, for every
/// pair, under `shares` laid out as consecutive intervals in rack order.
fn matrix(from: &End, to: &End, shares: &[Vec<f64>], racks: usize) -> Vec<Vec<f64>> {
    let dist = |e: &End| match e {
        End::Stage(g) => shares[*g].clone(),
        End::Fixed(v) => v.clone(),
    };
    let mut m = vec![vec![0.0; racks]; racks];
    match (from, to) {
        (End::Stage(a), End::Stage(b)) => {
            let bounds = |s: &[f64]| {
                let mut lo = 0.0;
                s.iter()
                    .map(|x| {
                        let iv = (lo, lo + x);
                        lo += x;
                        iv
                    })
                    .collect::<Vec<_>>()
            };
            let (ia, ib) = (bounds(&shares[*a]), bounds(&shares[*b]));
            for (i, x) in ia.iter().enumerate() {
                for (j, y) in ib.iter().enumerate() {
                    m[i][j] = (x.1.min(y.1) - x.0.max(y.0)).max(0.0);
                }
            }
        }
        _ => {
            let (e, s) = (dist(from), dist(to));
            for i in 0..racks {
                for j in 0..racks {
                    m[i][j] = e[i] * s[j];
                }
            }
        }
    }
    m
}

/// The uplink loads of `shares` (exact for the rack-by-rack layout).
pub fn evaluate(p: &Problem, shares: &[Vec<f64>]) -> Evaluation {
    let r = p.racks();
    let mut uplink = vec![(0.0, 0.0); r];
    let mut crossing = 0.0;
    for hop in &p.hops {
        let m = matrix(&hop.from, &hop.to, shares, r);
        for (i, row) in m.iter().enumerate() {
            for (j, x) in row.iter().enumerate() {
                if i == j || *x <= 0.0 {
                    continue;
                }
                // Requests go i -> j; their replies j -> i.
                uplink[i].0 += x * hop.forward;
                uplink[j].1 += x * hop.forward;
                uplink[j].0 += x * hop.reverse;
                uplink[i].1 += x * hop.reverse;
                crossing += x * (hop.forward + hop.reverse);
            }
        }
    }
    let worst = uplink
        .iter()
        .zip(&p.uplinks)
        .map(|((o, i), c)| o.max(*i) / c)
        .fold(0.0, f64::max);
    let units = p.balance_units(shares);
    let imbalance = if units.is_empty() {
        0.0
    } else {
        units
            .iter()
            .map(|(s, e)| s.iter().zip(e).map(|(a, b)| (a - b).abs()).sum::<f64>() / 2.0)
            .sum::<f64>()
            / units.len() as f64
    };
    let excess = match p.target {
        Some(t) => (worst - t).max(0.0),
        None => worst,
    };
    Evaluation {
        uplink,
        worst,
        crossing,
        imbalance,
        excess,
    }
}

/// Rack shares per stage minimising the worst uplink utilisation (or its
/// excess over [`Problem::target`]), then the traffic crossing racks and the
/// distance from the even split (in that order without a target, the other
/// way round with one).
pub fn solve(p: &Problem) -> Result<Solution, AlignedError> {
    p.check()?;
    let original = p;
    // Scaling every hop's traffic, or every uplink, by one factor scales the
    // worst utilisation by it and leaves the best shares alone: solve with
    // the traffic summing to 1 and the largest uplink 1, so that the
    // utilisation is of order 1 and the secondary terms below stay
    // secondary whatever the units (bytes per second, or the unit demand
    // that stands in before anything is measured).
    let volume: f64 = p.hops.iter().map(|h| h.forward + h.reverse).sum();
    let biggest = p.uplinks.iter().copied().fold(0.0, f64::max);
    let mut scaled = p.clone();
    for h in &mut scaled.hops {
        if volume > 0.0 {
            h.forward /= volume;
            h.reverse /= volume;
        }
    }
    for c in &mut scaled.uplinks {
        *c /= biggest;
    }
    let p = &scaled;
    let r = p.racks();
    let even = p.even();
    // Ties on the worst utilisation break towards fewer bytes crossing,
    // then towards the even split; with a target, towards the even split
    // first: below the target the uplinks are no bottleneck, the instances
    // may be.
    let (eps_cross, eps_even) = if p.target.is_some() {
        (1e-5, 1e-3)
    } else {
        (1e-3, 1e-5)
    };
    let mut lp = LinearProgram::new(Direction::Minimise);
    // `u` is the worst (normalised) utilisation; only its excess over the
    // (normalised) target costs: `excess >= u - target`, `excess >= 0`.
    let (u, target) = match p.target {
        Some(t) => {
            // Utilisation scales by volume / biggest under the normalisation.
            let tn = if volume > 0.0 {
                t * biggest / volume
            } else {
                0.0
            };
            (lp.add_var(0.0, 0.0, f64::INFINITY), Some(tn))
        }
        None => (lp.add_var(1.0, 0.0, f64::INFINITY), None),
    };
    if let Some(tn) = target {
        let excess = lp.add_var(1.0, 0.0, f64::INFINITY);
        lp.add_constraint(
            FAMILY_TARGET,
            -tn,
            f64::INFINITY,
            [(excess, 1.0), (u, -1.0)],
        );
    }
    let s: Vec<Vec<Var>> = p
        .stages
        .iter()
        .map(|st| {
            st.max_share
                .iter()
                .zip(&st.instances)
                .map(|(&m, &n)| lp.add_var(0.0, 0.0, if n == 0 { 0.0 } else { m.min(1.0) }))
                .collect()
        })
        .collect();
    for row in &s {
        lp.add_constraint(FAMILY_COVER, 1.0, 1.0, row.iter().map(|&v| (v, 1.0)));
    }
    // Each middlebox's load per rack as a form over the shares: a stage's
    // own, or its pool's traffic-weighted sum.
    let mut pooled = vec![false; s.len()];
    // Per middlebox: its load in each rack (terms over the shares), and
    // its even shares.
    type Load = (Vec<Vec<(Var, f64)>>, Vec<f64>);
    let mut loads: Vec<Load> = Vec::new();
    for pool in &p.pools {
        let mut rows = vec![Vec::new(); r];
        for (g, w) in pool.parts() {
            pooled[g] = true;
            for (k, row) in rows.iter_mut().enumerate() {
                row.push((s[g][k], w));
            }
        }
        for (k, row) in rows.iter().enumerate() {
            lp.add_constraint(
                FAMILY_POOL,
                f64::NEG_INFINITY,
                pool.max_share[k],
                row.iter().copied(),
            );
        }
        if let Some(&(g, _)) = pool.stages.first() {
            loads.push((rows, even[g].clone()));
        }
    }
    for (g, row) in s.iter().enumerate() {
        if !pooled[g] {
            loads.push((
                row.iter().map(|&v| vec![(v, 1.0)]).collect(),
                even[g].clone(),
            ));
        }
    }
    // Distance from even: dev >= |load - even|.
    for (rows, ev) in &loads {
        for (k, row) in rows.iter().enumerate() {
            let dev = lp.add_var(eps_even, 0.0, f64::INFINITY);
            lp.add_constraint(
                FAMILY_EVEN,
                ev[k],
                f64::INFINITY,
                std::iter::once((dev, 1.0)).chain(row.iter().copied()),
            );
            lp.add_constraint(
                FAMILY_EVEN,
                -ev[k],
                f64::INFINITY,
                std::iter::once((dev, 1.0)).chain(row.iter().map(|&(v, c)| (v, -c))),
            );
        }
    }
    // Per rack, out and in traffic as affine forms: constant + terms.
    type Affine = (f64, Vec<(Var, f64)>);
    let mut up: Vec<Affine> = vec![(0.0, Vec::new()); r];
    let mut down: Vec<Affine> = vec![(0.0, Vec::new()); r];
    for hop in &p.hops {
        let (f, b) = (hop.forward, hop.reverse);
        if f + b <= 0.0 {
            continue;
        }
        for k in 0..r {
            // out_k, in_k of this hop in the chain's direction, as affine forms.
            let (out, inn): (Affine, Affine) = match (&hop.from, &hop.to) {
                (End::Stage(a), End::Stage(bb)) => {
                    let o = lp.add_var(eps_cross * (f + b), 0.0, f64::INFINITY);
                    let i = lp.add_var(eps_cross * (f + b), 0.0, f64::INFINITY);
                    // o >= s_a - s_b, i >= s_b - s_a.
                    lp.add_constraint(
                        FAMILY_CROSSING,
                        0.0,
                        f64::INFINITY,
                        [(o, 1.0), (s[*a][k], -1.0), (s[*bb][k], 1.0)],
                    );
                    lp.add_constraint(
                        FAMILY_CROSSING,
                        0.0,
                        f64::INFINITY,
                        [(i, 1.0), (s[*bb][k], -1.0), (s[*a][k], 1.0)],
                    );
                    ((0.0, vec![(o, 1.0)]), (0.0, vec![(i, 1.0)]))
                }
                (End::Fixed(e), End::Stage(g)) => {
                    // e_k (1 - s_k) leaves; s_k (1 - e_k) arrives. Both
                    // cost as a crossing between stages does (there, what
                    // leaves one rack and what enters another).
                    let o = lp.add_var(eps_cross * (f + b), 0.0, f64::INFINITY);
                    lp.add_constraint(
                        FAMILY_CROSSING,
                        e[k],
                        f64::INFINITY,
                        [(o, 1.0), (s[*g][k], e[k])],
                    );
                    let i = lp.add_var(eps_cross * (f + b), 0.0, f64::INFINITY);
                    lp.add_constraint(
                        FAMILY_CROSSING,
                        0.0,
                        f64::INFINITY,
                        [(i, 1.0), (s[*g][k], -(1.0 - e[k]))],
                    );
                    (
                        (e[k], vec![(s[*g][k], -e[k])]),
                        (0.0, vec![(s[*g][k], 1.0 - e[k])]),
                    )
                }
                (End::Stage(g), End::Fixed(x)) => {
                    let o = lp.add_var(eps_cross * (f + b), 0.0, f64::INFINITY);
                    lp.add_constraint(
                        FAMILY_CROSSING,
                        0.0,
                        f64::INFINITY,
                        [(o, 1.0), (s[*g][k], -(1.0 - x[k]))],
                    );
                    let i = lp.add_var(eps_cross * (f + b), 0.0, f64::INFINITY);
                    lp.add_constraint(
                        FAMILY_CROSSING,
                        x[k],
                        f64::INFINITY,
                        [(i, 1.0), (s[*g][k], x[k])],
                    );
                    (
                        (0.0, vec![(s[*g][k], 1.0 - x[k])]),
                        (x[k], vec![(s[*g][k], -x[k])]),
                    )
                }
                (End::Fixed(e), End::Fixed(x)) => {
                    let o = e[k] * (1.0 - x[k]);
                    let i = x[k] * (1.0 - e[k]);
                    ((o, Vec::new()), (i, Vec::new()))
                }
            };
            let add = |acc: &mut Affine, a: &Affine, w: f64| {
                acc.0 += a.0 * w;
                acc.1.extend(a.1.iter().map(|&(v, c)| (v, c * w)));
            };
            // Requests leave by the uplink, replies come back by it.
            add(&mut up[k], &out, f);
            add(&mut up[k], &inn, b);
            add(&mut down[k], &inn, f);
            add(&mut down[k], &out, b);
        }
    }
    // u * cap_k >= load_k  <=>  u * cap_k - terms >= constant.
    for k in 0..r {
        for load in [&up[k], &down[k]] {
            // HiGHS refuses a row naming a variable twice: merge the terms.
            let mut merged: Vec<(Var, f64)> = Vec::with_capacity(load.1.len() + 1);
            for &(v, c) in std::iter::once(&(u, -p.uplinks[k])).chain(&load.1) {
                match merged.iter_mut().find(|m| m.0 == v) {
                    Some(m) => m.1 += c,
                    None => merged.push((v, c)),
                }
            }
            let terms = merged.into_iter().map(|(v, c)| (v, -c));
            lp.add_constraint(FAMILY_UPLINK, load.0, f64::INFINITY, terms);
        }
    }
    let sol = lp.solve()?;
    let mut shares: Vec<Vec<f64>> = s
        .iter()
        .map(|row| row.iter().map(|&v| sol.value(v).max(0.0)).collect())
        .collect();
    for row in &mut shares {
        let t: f64 = row.iter().sum();
        if t > 0.0 {
            row.iter_mut().for_each(|x| *x /= t);
        }
    }
    let evaluation = evaluate(original, &shares);
    Ok(Solution { shares, evaluation })
}

/// The per-instance shares Stratos's formulation speaks of
/// ([`crate::stratos::Distribution`]) that the rack-by-rack layout realises
/// with every instance of a stage taking an even share: instance `i` of
/// stage `r` sends to instance `j` of stage `r + 1` the part of its hash
/// range that `j` owns. Instances are laid out by location (then by index),
/// in one order for every stage. The simulator uses it to compare the layout
/// with the per-hop LP ([`crate::stratos::network_aware`]).
pub fn layout_distribution(
    chain: &crate::stratos::Chain,
) -> Result<crate::stratos::Distribution, crate::stratos::StratosError> {
    let uniform = crate::stratos::uniform(chain)?;
    // Each stage's instance intervals: instance index -> (start, end).
    let intervals: Vec<Vec<(f64, f64)>> = chain
        .locations
        .iter()
        .map(|locs| {
            let mut order: Vec<usize> = (0..locs.len()).collect();
            order.sort_by_key(|&i| (locs[i], i));
            let w = 1.0 / locs.len() as f64;
            let mut iv = vec![(0.0, 0.0); locs.len()];
            for (k, &i) in order.iter().enumerate() {
                iv[i] = (k as f64 * w, (k + 1) as f64 * w);
            }
            iv
        })
        .collect();
    let overlap = |a: (f64, f64), b: (f64, f64)| (a.1.min(b.1) - a.0.max(b.0)).max(0.0);
    let mut d = uniform;
    for r in 0..chain.locations.len() - 1 {
        let (lo, hi) = (&intervals[r], &intervals[r + 1]);
        for (i, a) in lo.iter().enumerate() {
            for (j, b) in hi.iter().enumerate() {
                let o = overlap(*a, *b);
                d.forward[r][i][j] = o / (a.1 - a.0);
                d.reverse[r][j][i] = o / (b.1 - b.0);
            }
        }
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6
    }

    /// Two racks; clients in rack 0; a chain of three middleboxes with one
    /// instance per rack; the service in both racks (half the traffic each).
    fn two_racks(slack: f64) -> Problem {
        let st = || Stage::with_slack(vec![1, 1], slack);
        Problem {
            uplinks: vec![1.0, 1.0],
            stages: vec![st(), st(), st()],
            hops: vec![
                Hop {
                    from: End::Fixed(vec![1.0, 0.0]),
                    to: End::Stage(0),
                    forward: 1.0,
                    reverse: 4.0,
                },
                Hop {
                    from: End::Stage(0),
                    to: End::Stage(1),
                    forward: 1.0,
                    reverse: 4.0,
                },
                Hop {
                    from: End::Stage(1),
                    to: End::Stage(2),
                    forward: 1.0,
                    reverse: 4.0,
                },
                Hop {
                    from: End::Stage(2),
                    to: End::Fixed(vec![0.5, 0.5]),
                    forward: 1.0,
                    reverse: 4.0,
                },
            ],
            target: None,
            pools: Vec::new(),
        }
    }

    /// The near layout: clients in rack 0, one server in rack 0 and two in
    /// rack 1, a chain of three middleboxes with one instance per rack.
    /// With `classes`, each middlebox has a split for the flows to each
    /// rack's servers (stages `2g` and `2g + 1`), pooled.
    fn near(classes: bool) -> Problem {
        let st = || Stage::with_slack(vec![1, 1], 1.0);
        let chain = |first: usize, step: usize, to: Vec<f64>, t: f64| {
            let mut hops = Vec::new();
            let mut prev = End::Fixed(vec![1.0, 0.0]);
            for g in 0..3 {
                hops.push(Hop {
                    from: prev,
                    to: End::Stage(first + g * step),
                    forward: t,
                    reverse: 4.0 * t,
                });
                prev = End::Stage(first + g * step);
            }
            hops.push(Hop {
                from: prev,
                to: End::Fixed(to),
                forward: t,
                reverse: 4.0 * t,
            });
            hops
        };
        if !classes {
            return Problem {
                uplinks: vec![1.0, 1.0],
                stages: vec![st(), st(), st()],
                hops: chain(0, 1, vec![1.0 / 3.0, 2.0 / 3.0], 1.0),
                target: None,
                pools: Vec::new(),
            };
        }
        let mut hops = chain(0, 2, vec![1.0, 0.0], 1.0 / 3.0);
        hops.extend(chain(1, 2, vec![0.0, 1.0], 2.0 / 3.0));
        Problem {
            uplinks: vec![1.0, 1.0],
            stages: (0..6).map(|_| Stage::with_slack(vec![1, 1], 1.0)).collect(),
            hops,
            target: None,
            pools: (0..3)
                .map(|g| Pool {
                    stages: vec![(2 * g, 1.0 / 3.0), (2 * g + 1, 2.0 / 3.0)],
                    max_share: vec![1.0, 1.0],
                })
                .collect(),
        }
    }

    #[test]
    fn classes_of_a_middlebox_balance_its_instances_without_crossing_more() {
        let one = solve(&near(false)).unwrap();
        // One split: every flow stays in the clients' rack, and the rack-1
        // instances idle.
        assert!(one.shares.iter().all(|r| close(r[0], 1.0)), "{one:?}");
        assert!(close(one.evaluation.imbalance, 0.5), "{one:?}");
        let p = near(true);
        let two = solve(&p).unwrap();
        // A split per class: the flows to rack 0 stay there, those to rack 1
        // (which cross once whatever the split) balance the instances.
        assert!(close(two.evaluation.worst, one.evaluation.worst), "{two:?}");
        assert!(
            close(two.evaluation.crossing, one.evaluation.crossing),
            "{two:?}"
        );
        for g in 0..3 {
            assert!(close(two.shares[2 * g][0], 1.0), "{:?}", two.shares);
            assert!(close(two.shares[2 * g + 1][1], 0.75), "{:?}", two.shares);
        }
        assert!(close(two.evaluation.imbalance, 0.0), "{two:?}");
    }

    #[test]
    fn a_pool_bounds_the_sum_of_its_stages() {
        let mut p = near(true);
        // Flows towards rack 0 piling up on its instances would be cheaper;
        // the instances there may take at most 40% of each middlebox's
        // flows, however they are classed.
        for pool in &mut p.pools {
            pool.max_share = vec![0.4, 1.0];
        }
        let s = solve(&p).unwrap();
        for g in 0..3 {
            let r0 = s.shares[2 * g][0] / 3.0 + s.shares[2 * g + 1][0] * 2.0 / 3.0;
            assert!(r0 <= 0.4 + 1e-6, "{:?}", s.shares);
        }
        // A pool naming a stage twice, or one out of range, is refused.
        let mut bad = near(true);
        bad.pools[1].stages.push((0, 0.1));
        assert!(matches!(solve(&bad), Err(AlignedError::Malformed(m)) if m.contains("pool")));
        let mut bad = near(true);
        bad.pools[0].stages.push((9, 0.1));
        assert!(matches!(solve(&bad), Err(AlignedError::Malformed(m)) if m.contains("pool")));
    }

    #[test]
    fn below_the_target_the_shares_stay_even() {
        // The even split's worst utilisation is 5 (unit uplinks, 10 units
        // crossing): uplinks of 100 put it at 5%, well within a 50% target.
        let mut p = two_racks(1.0);
        p.uplinks = vec![100.0, 100.0];
        p.target = Some(0.5);
        let even = evaluate(&p, &p.even());
        assert!(even.worst < 0.5 && close(even.excess, 0.0), "{even:?}");
        let s = solve(&p).unwrap();
        for row in &s.shares {
            assert!(close(row[0], 0.5), "balance wins: {:?}", s.shares);
        }
        assert!(close(s.evaluation.imbalance, 0.0), "{s:?}");
        // Without a target the same uplinks pull the shares to rack 0.
        p.target = None;
        let s = solve(&p).unwrap();
        assert!(s.shares.iter().all(|row| row[0] > 0.5 + 1e-6), "{s:?}");
        assert!(s.evaluation.imbalance > 0.0);
    }

    #[test]
    fn above_the_target_shares_move_only_as_far_as_needed() {
        let mut p = two_racks(1.0);
        let even = evaluate(&p, &p.even());
        let best = solve(&p).unwrap().evaluation.worst;
        // A target between the best and the even split's utilisation: the
        // LP reaches it, and no further (closer to even than the best).
        let t = (even.worst + best) / 2.0;
        p.target = Some(t);
        let s = solve(&p).unwrap();
        assert!(s.evaluation.worst <= t + 1e-6, "{s:?}, target {t}");
        assert!(close(s.evaluation.excess, 0.0));
        let p_none = Problem {
            target: None,
            ..p.clone()
        };
        let all_in = solve(&p_none).unwrap();
        assert!(
            s.evaluation.imbalance < all_in.evaluation.imbalance - 1e-6,
            "{s:?} vs {all_in:?}"
        );
        // A target nothing reaches: the worst utilisation is minimised as
        // without one.
        p.target = Some(best / 2.0);
        let s = solve(&p).unwrap();
        assert!(close(s.evaluation.worst, best), "{s:?}, best {best}");
        assert!(close(s.evaluation.excess, best / 2.0));
    }

    #[test]
    fn a_bad_target_is_refused() {
        for t in [f64::NAN, -0.1, f64::INFINITY] {
            let mut p = two_racks(1.0);
            p.target = Some(t);
            assert!(
                matches!(solve(&p), Err(AlignedError::Malformed(m)) if m.contains("target")),
                "{t}"
            );
        }
    }

    #[test]
    fn aligned_even_shares_cross_only_at_the_ends() {
        let p = two_racks(0.0);
        let even = p.even();
        let e = evaluate(&p, &even);
        // Entry: half the clients' flows go to rack 1; exit: from each rack half
        // go to the other. Between middleboxes nothing crosses.
        assert!(close(e.crossing, 5.0 * (0.5 + 0.5)), "{e:?}");
        // With balance imposed the LP can only keep these shares.
        let s = solve(&p).unwrap();
        for row in &s.shares {
            assert!(close(row[0], 0.5) && close(row[1], 0.5), "{:?}", s.shares);
        }
    }

    #[test]
    fn uniform_per_instance_choice_crosses_at_every_hop() {
        // What a split that ignores racks costs: model it as every stage's
        // choice independent of the previous one's rack.
        let p = two_racks(0.0);
        let mut indep = p.clone();
        for h in &mut indep.hops {
            if let (End::Stage(_), End::Stage(_)) = (&h.from, &h.to) {
                h.from = End::Fixed(vec![0.5, 0.5]);
            }
        }
        let aligned = evaluate(&p, &p.even());
        let uniform = evaluate(&indep, &indep.even());
        assert!(
            uniform.crossing > aligned.crossing * 1.9,
            "{uniform:?} vs {aligned:?}"
        );
    }

    #[test]
    fn headroom_moves_shares_to_the_clients_rack() {
        let p = two_racks(1.0);
        let s = solve(&p).unwrap();
        let even = evaluate(&p, &p.even());
        assert!(s.evaluation.worst < even.worst - 1e-6, "{s:?} vs {even:?}");
        for row in &s.shares {
            assert!(row[0] > 0.5 + 1e-6, "rack 0 gains: {:?}", s.shares);
        }
        // The stages stay aligned: nothing crosses between middleboxes.
        let between = Problem {
            hops: p.hops[1..3].to_vec(),
            ..p.clone()
        };
        assert!(close(evaluate(&between, &s.shares).crossing, 0.0));
    }

    #[test]
    fn a_smaller_uplink_takes_less() {
        // Clients in both racks, service in both; rack 1's uplink is a tenth of
        // rack 0's: the worst utilisation is rack 1's, and the LP keeps what
        // crosses it small by giving rack 1's instances its own traffic only.
        let mut p = two_racks(1.0);
        p.uplinks = vec![10.0, 1.0];
        p.hops[0].from = End::Fixed(vec![0.5, 0.5]);
        let s = solve(&p).unwrap();
        let even = evaluate(&p, &p.even());
        assert!(s.evaluation.worst <= even.worst + 1e-9, "{s:?} vs {even:?}");
    }

    #[test]
    fn a_rack_without_instances_gets_no_share() {
        let mut p = two_racks(1.0);
        p.stages[1] = Stage::with_slack(vec![2, 0], 1.0);
        let s = solve(&p).unwrap();
        assert!(close(s.shares[1][1], 0.0), "{:?}", s.shares);
        assert!(close(s.shares[1][0], 1.0));
    }

    #[test]
    fn the_units_do_not_change_the_answer() {
        // Bytes per second against Mbit/s-sized uplinks: the same shares as
        // unit traffic on unit uplinks.
        let unit = solve(&two_racks(1.0)).unwrap();
        let mut big = two_racks(1.0);
        big.uplinks = vec![12.5e6, 12.5e6];
        let small = solve(&big).unwrap();
        for (a, b) in unit.shares.iter().zip(&small.shares) {
            for (x, y) in a.iter().zip(b) {
                assert!(close(*x, *y), "{:?} vs {:?}", unit.shares, small.shares);
            }
        }
        assert!(
            small.evaluation.worst < 1e-5,
            "evaluated in the original units"
        );
    }

    #[test]
    fn the_layout_as_stratos_shares_keeps_racks_together() {
        use crate::stratos::{uniform, Chain};
        // Two stages, instances in racks [1, 0] and [0, 1]: the layout
        // sorts both by rack, so each instance sends everything to the
        // next stage's instance in its own rack.
        let c = Chain {
            locations: vec![vec![1, 0], vec![0, 1]],
            flows: 10.0,
        };
        let d = layout_distribution(&c).unwrap();
        assert_eq!(d.forward[0], vec![vec![0.0, 1.0], vec![1.0, 0.0]]);
        assert_eq!(d.reverse[0], vec![vec![0.0, 1.0], vec![1.0, 0.0]]);
        let costs = c.inter_rack_costs();
        assert_eq!(d.forward_cost(&c, &costs), 0.0);
        assert!(uniform(&c).unwrap().forward_cost(&c, &costs) > 0.0);
        // Uneven stages: rows still sum to 1 and loads stay balanced.
        let c = Chain {
            locations: vec![vec![0, 0, 1], vec![0, 1]],
            flows: 6.0,
        };
        let d = layout_distribution(&c).unwrap();
        for row in &d.forward[0] {
            assert!(close(row.iter().sum::<f64>(), 1.0), "{row:?}");
        }
        for j in 0..2 {
            let got: f64 = (0..3).map(|i| d.forward[0][i][j] * 2.0).sum();
            assert!(close(got, 3.0), "instance {j} of stage 1 gets half");
        }
    }

    #[test]
    fn malformed_problems_are_named() {
        let mut p = two_racks(0.0);
        p.stages[0].instances = vec![1];
        assert!(matches!(solve(&p), Err(AlignedError::Malformed(m)) if m.contains("stage 0")));
        let mut p = two_racks(0.0);
        p.uplinks[1] = 0.0;
        assert!(matches!(solve(&p), Err(AlignedError::Malformed(m)) if m.contains("uplink")));
        let mut p = two_racks(0.0);
        p.hops[0].to = End::Stage(9);
        assert!(matches!(solve(&p), Err(AlignedError::Malformed(m)) if m.contains("stage 9")));
    }

    #[test]
    fn no_traffic_keeps_the_even_split() {
        let mut p = two_racks(1.0);
        for h in &mut p.hops {
            h.forward = 0.0;
            h.reverse = 0.0;
        }
        let s = solve(&p).unwrap();
        assert_eq!(s.evaluation.worst, 0.0);
        for row in &s.shares {
            assert!(close(row[0], 0.5), "{:?}", s.shares);
        }
    }

    #[test]
    fn the_lp_matches_the_exact_evaluation_with_two_racks() {
        // Random-ish instance counts and slack: the LP's optimum, evaluated
        // exactly, is never worse than the even split.
        for (a, b, slack) in [(1, 2, 0.5), (3, 1, 0.25), (2, 2, 1.0), (1, 3, 2.0)] {
            let mut p = two_racks(slack);
            p.stages[1] = Stage::with_slack(vec![a, b], slack);
            let s = solve(&p).unwrap();
            let even = evaluate(&p, &p.even());
            assert!(s.evaluation.worst <= even.worst + 1e-9, "{a} {b} {slack}");
            for (g, row) in s.shares.iter().enumerate() {
                for (k, x) in row.iter().enumerate() {
                    assert!(*x <= p.stages[g].max_share[k] + 1e-6);
                }
            }
        }
    }
}
