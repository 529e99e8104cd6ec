//! Scale benchmarks (`sluice-sim bench-scale`): CoMb's network-wide LP, and the exact
//! max-flow solver of the same problem, against topology size; the Stratos simulation
//! against datacenter size.
//!
//! This is the one module besides [`crate::cli`] that reads clocks: it measures wall
//! time around the (deterministic) library calls.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use sluice_optimizer::comb::{
    min_max_load_flow, min_max_load_model, min_max_load_model_aggregated, min_max_load_transport,
    min_max_load_transport_with, Search, Strategy, TransportProblem,
};
use sluice_optimizer::lp::{Method, SolverOptions};

use crate::comb::{build_workload, stream_epoch_transport, Variability};
use crate::stratos::{
    run_scenario_with, DistributionScheme, InitialPlacement, InstancePlacement, Scenario,
    StratosConfig,
};
use crate::svg::{line_chart, Labels, Series};
use crate::topology::{self, Topology};
use crate::SimError;

/// CoMb's §7.4 reference: a 52-PoP topology solved in 1.58 s with CPLEX.
pub const COMB_PAPER_POPS: usize = 52;
/// CoMb's published solve time at 52 PoPs (CPLEX), seconds.
pub const COMB_PAPER_SECONDS: f64 = 1.58;
/// Issue 6 target for the 52-PoP LP, seconds.
pub const COMB_TARGET_SECONDS: f64 = 0.1;
/// Issue 6 target for the paper's Stratos scenario, seconds.
pub const STRATOS_TARGET_SECONDS: f64 = 1.0;
/// Issue 6 target for 10,000 racks and 5,000 tenants, seconds.
pub const STRATOS_LARGE_TARGET_SECONDS: f64 = 60.0;

/// Above this size only the interior-point solve of the aggregated model is timed.
pub const AGG_SIMPLEX_MAX_POPS: usize = 150;
/// Above this size interior point on the aggregated model runs only without crossover
/// (which doubles the time; the max load needs no vertex) and without presolve (which
/// needs more than 12 GiB on KDL).
const AGG_CROSSOVER_MAX_POPS: usize = 300;
/// Default for [`BenchPlan::lp_max_pops`]: HiGHS did not finish on KDL (754 PoPs), the
/// only Topology Zoo network above this size, so larger networks get the max-flow
/// solver only.
pub const LP_MAX_POPS: usize = 300;
/// Label of the max-flow solver in the summary, CSV and chart.
pub const MAX_FLOW_LABEL: &str = "max-flow";

/// The model/solver variants tried on every small-enough network: label, whether the
/// model is the aggregated one, and the HiGHS options. The first is today's default.
pub fn solver_variants() -> Vec<(&'static str, bool, SolverOptions)> {
    let d = SolverOptions::default();
    let ipm = SolverOptions {
        method: Method::Ipm,
        ..d
    };
    vec![
        ("default", false, d),
        (
            "dual simplex",
            false,
            SolverOptions {
                method: Method::DualSimplex,
                ..d
            },
        ),
        (
            "primal simplex",
            false,
            SolverOptions {
                method: Method::PrimalSimplex,
                ..d
            },
        ),
        ("ipm", false, ipm),
        (
            "no presolve",
            false,
            SolverOptions {
                presolve: false,
                ..d
            },
        ),
        ("aggregated", true, d),
        ("aggregated ipm", true, ipm),
        (
            "aggregated ipm no-crossover",
            true,
            SolverOptions {
                crossover: false,
                ..ipm
            },
        ),
        (
            "aggregated ipm no-crossover no-presolve",
            true,
            SolverOptions {
                crossover: false,
                presolve: false,
                ..ipm
            },
        ),
    ]
}

/// Picks up to `count` topologies whose sizes are spread geometrically from the smallest
/// to the largest (the nearest network to each target size), plus the one closest to
/// [`COMB_PAPER_POPS`] PoPs. Input order does not matter; the result is sorted by size,
/// then name.
pub fn pick_networks(mut all: Vec<Topology>, count: usize) -> Vec<Topology> {
    all.sort_by(|a, b| a.nodes.len().cmp(&b.nodes.len()).then(a.name.cmp(&b.name)));
    let (Some(first), Some(last)) = (all.first(), all.last()) else {
        return Vec::new();
    };
    if count == 0 {
        return Vec::new();
    }
    let (lo, hi) = (first.nodes.len() as f64, last.nodes.len() as f64);
    let nearest = |target: f64| {
        (0..all.len()).min_by(|&a, &b| {
            let d = |i: usize| (all[i].nodes.len() as f64 - target).abs();
            d(a).total_cmp(&d(b))
        })
    };
    let mut idx: Vec<usize> = (0..count)
        .filter_map(|i| {
            let f = if count == 1 {
                1.0
            } else {
                i as f64 / (count - 1) as f64
            };
            nearest(lo * (hi / lo).powf(f))
        })
        .collect();
    idx.extend(nearest(COMB_PAPER_POPS as f64));
    idx.sort_unstable();
    idx.dedup();
    idx.into_iter().map(|i| all[i].clone()).collect()
}

/// Loads every `.graphml` file of `dir` that parses and has at least two PoPs.
pub fn load_zoo(dir: &Path) -> Result<Vec<Topology>, SimError> {
    let io = |e| SimError::Io {
        path: dir.display().to_string(),
        source: e,
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "graphml"))
        .collect();
    files.sort();
    // Malformed or tiny networks are skipped rather than failing the whole benchmark.
    Ok(files
        .iter()
        .filter_map(|p| topology::load(p).ok())
        .filter(|t| t.nodes.len() >= 2)
        .collect())
}

/// One CoMb measurement.
#[derive(Debug, Clone, PartialEq)]
pub struct CombRow {
    /// Topology name.
    pub name: String,
    /// PoPs.
    pub pops: usize,
    /// Traffic classes.
    pub classes: usize,
    /// LP variables (0 when the full model was not built).
    pub vars: usize,
    /// LP constraints (0 when the full model was not built).
    pub rows: usize,
    /// Seconds to build the workload (routing and gravity traffic); not part of the LP.
    pub workload_s: f64,
    /// Seconds to build the LP model (NaN when it was not built).
    pub build_s: f64,
    /// Seconds to build the aggregated LP model.
    pub build_agg_s: f64,
    /// Variables of the aggregated model.
    pub vars_agg: usize,
    /// Seconds to solve it, per variant label (default first).
    pub solve_s: Vec<(String, f64)>,
    /// Optimal max load per variant (must agree).
    pub objective: Vec<f64>,
    /// The max-flow solver on groups streamed from the topology (every network).
    pub flow: FlowRow,
}

/// The max-flow measurements of one network.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowRow {
    /// Groups (distinct eligible-node sets) of the transportation form.
    pub groups: usize,
    /// Seconds to route every pair and build the groups by streaming (no per-class
    /// workload); includes what `workload_s` and the LP build time cover.
    pub build_s: f64,
    /// Seconds of the parametric maximum flow.
    pub solve_s: f64,
    /// Max load of its split.
    pub max_load: f64,
    /// Certified lower bound (`max_load` is optimal to within the difference).
    pub lower_bound: f64,
    /// Maximum flows run.
    pub flow_runs: usize,
    /// Newton's iteration from the weakest start (the whole network's ratio), where
    /// every step is a cut step.
    pub cold: SearchTiming,
    /// Plain bisection (to 1e-10), an independent check.
    pub bisection: SearchTiming,
    /// Default Newton, cold Newton and bisection with every PoP given the same capacity
    /// (the mean), where hot spots make the optimum a proper subset's ratio; with
    /// traffic-proportional capacities the load balances perfectly and one flow
    /// suffices from any start.
    pub uniform: [SearchTiming; 3],
    /// The aggregated LP's max load with uniform capacities (NaN when no LP ran).
    pub uniform_lp_max_load: f64,
    /// Largest relative difference between the max loads of the three searches, over
    /// both provisionings, and between the streamed and the per-class solve.
    pub search_rel_diff: f64,
    /// Seconds of `min_max_load_flow` on the per-class problem (reduction, solve and
    /// per-class fractions).
    pub classes_s: f64,
    /// Its max load.
    pub classes_max_load: f64,
    /// Peak resident memory of the process (MB, Linux `VmHWM`) after the streamed
    /// solves, before the per-class workload is built (NaN where unavailable).
    pub rss_stream_mb: f64,
    /// The same after the per-class workload and solve.
    pub rss_classes_mb: f64,
    /// Largest relative difference between the max-flow max loads and every LP
    /// variant's optimum, over both provisionings (NaN when no LP ran).
    pub lp_rel_diff: f64,
}

/// One run of the parametric search.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SearchTiming {
    /// Wall seconds (one run).
    pub seconds: f64,
    /// Maximum flows.
    pub flow_runs: usize,
    /// Max load found.
    pub max_load: f64,
}

/// The process's peak resident memory so far, in MB (NaN if `/proc` is unavailable).
fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn time_search(t: &TransportProblem, search: Search) -> Result<SearchTiming, SimError> {
    let start = Instant::now();
    let s = min_max_load_transport_with(t, search)?;
    Ok(SearchTiming {
        seconds: start.elapsed().as_secs_f64(),
        flow_runs: s.flow_runs,
        max_load: s.max_load,
    })
}

fn median_time(runs: usize, mut f: impl FnMut() -> Result<f64, SimError>) -> Result<f64, SimError> {
    let mut t = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        f()?;
        t.push(start.elapsed().as_secs_f64());
    }
    t.sort_by(f64::total_cmp);
    Ok(t[t.len() / 2])
}

/// Measures the one-epoch min-max-load problem (Path strategy) on `topo`: the max-flow
/// solver on streamed groups, then the per-class workload and the max-flow solver on
/// it, and with `lp` the LP variants; checks that all optima agree.
/// Solver variants other than the default are tried only when the default solve took
/// at most `variants_below_s` seconds. With `full` false only the aggregated model is
/// solved (the full one is too slow on large networks).
pub fn bench_comb(
    topo: &Topology,
    seed: u64,
    variants_below_s: f64,
    full: bool,
    lp: bool,
) -> Result<CombRow, SimError> {
    let var = Variability::constant();
    let start = Instant::now();
    let transport = stream_epoch_transport(topo, &var, seed, Strategy::Path)?;
    let once = start.elapsed().as_secs_f64();
    let build_s = if once < 0.2 {
        median_time(5, || {
            stream_epoch_transport(topo, &var, seed, Strategy::Path)?;
            Ok(0.0)
        })?
    } else {
        once
    };
    let start = Instant::now();
    let sol = min_max_load_transport(&transport)?;
    let once = start.elapsed().as_secs_f64();
    let solve_s = if once < 0.2 {
        median_time(5, || Ok(min_max_load_transport(&transport)?.max_load))?
    } else {
        once
    };
    let cold = time_search(&transport, Search::NewtonCold)?;
    let bisection = time_search(&transport, Search::Bisection)?;
    let mut transport = transport;
    let mean = transport.capacity.iter().sum::<f64>() / transport.capacity.len() as f64;
    let uniform_prov = vec![mean; transport.capacity.len()];
    transport.capacity.clone_from(&uniform_prov);
    let uniform = [
        time_search(&transport, Search::Newton)?,
        time_search(&transport, Search::NewtonCold)?,
        time_search(&transport, Search::Bisection)?,
    ];
    let rel = |a: f64, b: f64| (a - b).abs() / b;
    let search_rel_diff = [cold.max_load, bisection.max_load]
        .iter()
        .map(|&m| rel(m, sol.max_load))
        .chain(uniform.iter().map(|u| rel(u.max_load, uniform[0].max_load)))
        .fold(0.0, f64::max);
    let mut flow = FlowRow {
        groups: transport.groups.len(),
        build_s,
        solve_s,
        max_load: sol.max_load,
        lower_bound: sol.lower_bound,
        flow_runs: sol.flow_runs,
        cold,
        bisection,
        uniform,
        uniform_lp_max_load: f64::NAN,
        search_rel_diff,
        classes_s: f64::NAN,
        classes_max_load: f64::NAN,
        lp_rel_diff: f64::NAN,
        rss_stream_mb: f64::NAN,
        rss_classes_mb: f64::NAN,
    };
    drop(transport);
    flow.rss_stream_mb = peak_rss_mb();
    let start = Instant::now();
    let w = build_workload(topo, &var, 1, seed)?;
    let workload_s = start.elapsed().as_secs_f64();
    let problem = w.epoch_problem(0, &w.mean_node_volume());
    // The drop-in API on the per-class problem: comparable with the aggregated LP's
    // build + solve, and a check that the streamed groups are the workload's.
    let start = Instant::now();
    let per_class = min_max_load_flow(&problem, Strategy::Path, false)?.max_load;
    let once = start.elapsed().as_secs_f64();
    flow.classes_s = if once < 0.2 {
        median_time(5, || {
            Ok(min_max_load_flow(&problem, Strategy::Path, false)?.max_load)
        })?
    } else {
        once
    };
    flow.classes_max_load = per_class;
    flow.search_rel_diff = flow.search_rel_diff.max(rel(per_class, flow.max_load));
    flow.rss_classes_mb = peak_rss_mb();
    if !lp {
        return Ok(CombRow {
            name: topo.name.clone(),
            pops: topo.nodes.len(),
            classes: problem.classes.len(),
            vars: 0,
            rows: 0,
            workload_s,
            build_s: f64::NAN,
            build_agg_s: f64::NAN,
            vars_agg: 0,
            solve_s: Vec::new(),
            objective: Vec::new(),
            flow,
        });
    }
    // Short runs are repeated so the median is not one scheduler hiccup.
    // The full model of the largest networks does not fit in memory; it is built only
    // when it will be solved.
    let first = Instant::now();
    let model = if full {
        Some(min_max_load_model(&problem, Strategy::Path, false)?)
    } else {
        None
    };
    let once = first.elapsed().as_secs_f64();
    let runs = if once < 0.2 { 5 } else { 1 };
    let build_s = if !full {
        f64::NAN
    } else if runs > 1 {
        median_time(runs, || {
            min_max_load_model(&problem, Strategy::Path, false)?;
            Ok(0.0)
        })?
    } else {
        once
    };
    let agg = min_max_load_model_aggregated(&problem, Strategy::Path, false)?;
    let build_agg_s = median_time(runs, || {
        min_max_load_model_aggregated(&problem, Strategy::Path, false)?;
        Ok(0.0)
    })?;
    let mut solve_s = Vec::new();
    let mut objective = Vec::new();
    for (label, aggregated, opts) in solver_variants() {
        let slow = solve_s.first().is_some_and(|(_, s)| *s > variants_below_s);
        // The slow full-model variants are skipped on big networks; the aggregated
        // model is always timed since it is the candidate replacement.
        if (!full || (label != "default" && slow)) && !aggregated {
            continue;
        }
        // Above AGG_CROSSOVER_MAX_POPS only the no-crossover, no-presolve variant runs
        // (HiGHS presolve ran out of 12 GiB on KDL); below it that variant is skipped.
        let huge = topo.nodes.len() > AGG_CROSSOVER_MAX_POPS;
        if aggregated
            && label.starts_with("aggregated ipm")
            && huge != label.ends_with("no-presolve")
        {
            continue;
        }
        // Simplex on the aggregated model already takes minutes at ~200 PoPs.
        if aggregated
            && !label.starts_with("aggregated ipm")
            && topo.nodes.len() > AGG_SIMPLEX_MAX_POPS
        {
            continue;
        }
        let model = match (aggregated, &model) {
            (true, _) => &agg,
            (false, Some(m)) => m,
            (false, None) => continue,
        };
        let first = Instant::now();
        let obj = model.solve(&opts)?.max_load;
        let once = first.elapsed().as_secs_f64();
        let secs = if once < 0.2 {
            median_time(5, || Ok(model.solve(&opts)?.max_load))?
        } else {
            once
        };
        solve_s.push((label.to_string(), secs));
        objective.push(obj);
    }
    // Uniform capacities through the aggregated LP (simplex where it is fastest, IPM
    // without crossover above).
    let uniform_problem = w.epoch_problem(0, &uniform_prov);
    let opts = if topo.nodes.len() > AGG_SIMPLEX_MAX_POPS {
        SolverOptions {
            method: Method::Ipm,
            crossover: false,
            ..SolverOptions::default()
        }
    } else {
        SolverOptions::default()
    };
    flow.uniform_lp_max_load =
        min_max_load_model_aggregated(&uniform_problem, Strategy::Path, false)?
            .solve(&opts)?
            .max_load;
    flow.lp_rel_diff = objective
        .iter()
        .flat_map(|&o| [flow.max_load, flow.classes_max_load].map(|m| (m - o).abs() / o))
        .chain([rel(flow.uniform[0].max_load, flow.uniform_lp_max_load)])
        .fold(0.0, f64::max);
    Ok(CombRow {
        name: topo.name.clone(),
        pops: topo.nodes.len(),
        classes: problem.classes.len(),
        vars: model.as_ref().map_or(0, |m| m.num_vars()),
        rows: model.as_ref().map_or(0, |m| m.num_constraints()),
        workload_s,
        build_s,
        build_agg_s,
        vars_agg: agg.num_vars(),
        solve_s,
        objective,
        flow,
    })
}

/// One Stratos measurement.
#[derive(Debug, Clone, PartialEq)]
pub struct StratosRow {
    /// Racks.
    pub racks: usize,
    /// Tenants.
    pub tenants: usize,
    /// Wall seconds (up to the stop when not finished).
    pub seconds: f64,
    /// Tenants scaled when the run ended or was stopped.
    pub scaled: usize,
    /// Whether the run finished within its budget.
    pub finished: bool,
    /// Tenants with at least 99% of demand served (finished runs).
    pub satisfied: usize,
}

/// The scenario benchmarked: pack initial placement, aware instances, aware distribution.
pub fn bench_scenario() -> Scenario {
    Scenario {
        initial: InitialPlacement::Pack,
        instance: InstancePlacement::Aware,
        distribution: DistributionScheme::Aware,
    }
}

/// Runs the benchmark scenario at one size, stopping once `budget_s` is exceeded.
pub fn bench_stratos(
    racks: usize,
    tenants: usize,
    seed: u64,
    budget_s: f64,
    bar: &ProgressBar,
) -> Result<StratosRow, SimError> {
    let mut cfg = StratosConfig::paper(seed);
    cfg.tree.racks = racks;
    // One switch over all racks, as in the paper scenario (see the reproduction notes).
    cfg.tree.racks_per_agg = racks;
    cfg.tenants = tenants;
    bar.set_length(tenants as u64);
    bar.set_position(0);
    bar.set_message(format!("{racks} racks / {tenants} tenants"));
    let start = Instant::now();
    let mut scaled = 0;
    let out = run_scenario_with(&cfg, bench_scenario(), &mut |done| {
        scaled = done;
        bar.set_position(done as u64);
        start.elapsed().as_secs_f64() <= budget_s
    })?;
    let seconds = start.elapsed().as_secs_f64();
    Ok(StratosRow {
        racks,
        tenants,
        seconds,
        scaled,
        finished: out.is_some(),
        satisfied: out.map_or(0, |o| {
            o.tenants
                .iter()
                .filter(|t| t.served_mbps >= 0.99 * t.demand_mbps - 1e-6)
                .count()
        }),
    })
}

/// What [`run_bench`] measures.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchPlan {
    /// Topology Zoo directory.
    pub zoo: PathBuf,
    /// How many networks to spread over the size range.
    pub networks: usize,
    /// Skip networks with more PoPs than this.
    pub max_pops: usize,
    /// Solve the full (non-aggregated) model only up to this many PoPs.
    pub full_max_pops: usize,
    /// Build the workload and run any LP only up to this many PoPs (the max-flow
    /// solver runs on every network).
    pub lp_max_pops: usize,
    /// `(racks, tenants)` in increasing size; the first is the paper scenario.
    pub stratos_sizes: Vec<(usize, usize)>,
    /// Per Stratos run, seconds before it is stopped.
    pub budget_s: f64,
    /// RNG seed.
    pub seed: u64,
    /// Run the CoMb benchmark.
    pub comb: bool,
    /// Run the Stratos benchmark.
    pub stratos: bool,
}

impl BenchPlan {
    /// The full benchmark, or a quick one (few networks, small datacenters).
    pub fn new(quick: bool, zoo: PathBuf, seed: u64) -> Self {
        if quick {
            Self {
                zoo,
                networks: 4,
                max_pops: 80,
                full_max_pops: 80,
                lp_max_pops: LP_MAX_POPS,
                stratos_sizes: vec![(50, 20), (100, 50), (200, 100)],
                budget_s: 20.0,
                seed,
                comb: true,
                stratos: true,
            }
        } else {
            Self {
                zoo,
                networks: 10,
                max_pops: usize::MAX,
                full_max_pops: 80,
                lp_max_pops: LP_MAX_POPS,
                stratos_sizes: vec![
                    (50, 20),
                    (100, 50),
                    (500, 250),
                    (1000, 500),
                    (2000, 1000),
                    (5000, 2500),
                    (10000, 5000),
                ],
                budget_s: 300.0,
                seed,
                comb: true,
                stratos: true,
            }
        }
    }
}

/// Result files and printed summary.
pub struct BenchReport {
    /// `(file name, contents)`.
    pub files: Vec<(String, String)>,
    /// Human summary.
    pub summary: String,
}

/// Runs both benchmarks.
pub fn run_bench(plan: &BenchPlan) -> Result<BenchReport, SimError> {
    let style = ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    let nets: Vec<Topology> = if plan.comb {
        pick_networks(load_zoo(&plan.zoo)?, plan.networks)
            .into_iter()
            .filter(|t| t.nodes.len() <= plan.max_pops)
            .collect()
    } else {
        Vec::new()
    };
    if plan.comb && nets.is_empty() {
        return Err(SimError::Config(format!(
            "no usable .graphml topology in {}",
            plan.zoo.display()
        )));
    }
    let bar = ProgressBar::new(nets.len() as u64);
    bar.set_style(style.clone());
    let labels: Vec<&str> = solver_variants().iter().map(|v| v.0).collect();
    let mut csv = format!(
        "topology,pops,classes,vars,rows,vars_aggregated,workload_s,build_s,build_aggregated_s,{},max_load,max_load_aggregated,maxflow_groups,maxflow_build_s,maxflow_solve_s,maxflow_runs,max_load_maxflow,maxflow_lower_bound,maxflow_classes_s,max_load_maxflow_classes,maxflow_lp_rel_diff,maxflow_cold_s,maxflow_cold_runs,maxflow_bisection_s,maxflow_bisection_runs,uniform_maxflow_s,uniform_maxflow_runs,uniform_cold_s,uniform_cold_runs,uniform_bisection_s,uniform_bisection_runs,uniform_max_load_maxflow,uniform_max_load_lp,maxflow_search_rel_diff,peak_rss_after_maxflow_mb,peak_rss_after_classes_mb\n",
        labels
            .iter()
            .map(|l| format!("solve_{}_s", l.replace(' ', "_")))
            .collect::<Vec<_>>()
            .join(",")
    );
    let mut summary = String::new();
    if plan.comb {
        let _ = writeln!(
        summary,
        "CoMb network-wide LP (one epoch, min-max load, Path strategy); full = today's model, agg = aggregated,\nmf = {MAX_FLOW_LABEL} on streamed groups (build = routing + grouping), mf/cls = max-flow on the per-class problem,\ndiff = largest relative difference between max-flow and LP max loads\n{:<16} {:>5} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "topology", "PoPs", "classes", "vars", "build s", "solve s", "agg vars", "build s", "solve s", "ipm s", "ipm-nx s", "mf grps", "mf bld s", "mf slv s", "mf/cls s", "diff"
    );
    }
    let mut build_pts = Vec::new();
    let mut solve_pts = Vec::new();
    let mut agg_pts = Vec::new();
    let mut ipm_pts = Vec::new();
    let mut flow_pts = Vec::new();
    let mut flow_build_pts = Vec::new();
    let mut flow_uniform_pts = Vec::new();
    let mut rows_diff = Vec::new();
    let mut searches = format!(
        "\n{MAX_FLOW_LABEL} searches (maximum flows, seconds): Newton from the flow-free bounds (default), from the network ratio (cold), plain bisection;\nwith traffic-proportional capacities (the benchmark's), then with every PoP the same capacity (uniform); diff: largest relative\ndifference of their max loads (and the per-class solve's); peak RSS (MB, whole process so far) after the streamed solves and after the per-class one\n{:<16} {:>5} {:>8} {:>12} {:>12} {:>12}   {:>12} {:>12} {:>12} {:>8} {:>6} {:>6}\n",
        "topology", "PoPs", "groups", "newton", "cold", "bisection", "uni newton", "uni cold", "uni bisect", "diff", "rss", "rss cl"
    );
    let mut near52: Option<CombRow> = None;
    let time_of = |row: &CombRow, l: &str| row.solve_s.iter().find(|x| x.0 == l).map(|x| x.1);
    let fmt = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.4}"));
    for t in &nets {
        bar.set_message(format!("{} ({} PoPs)", t.name, t.nodes.len()));
        let full = t.nodes.len() <= plan.full_max_pops;
        let lp = t.nodes.len() <= plan.lp_max_pops;
        let row = match bench_comb(t, plan.seed, 2.0, full, lp) {
            Ok(r) => r,
            // Disconnected networks cannot be routed; they are listed but not timed.
            Err(SimError::Graph(e)) => {
                let _ = writeln!(summary, "{:<16} {:>5} skipped: {e}", t.name, t.nodes.len());
                bar.inc(1);
                continue;
            }
            Err(e) => return Err(e),
        };
        let cols: Vec<String> = labels
            .iter()
            .map(|l| time_of(&row, l).map_or(String::new(), |x| format!("{x:.5}")))
            .collect();
        let obj = |l: &str| {
            row.solve_s
                .iter()
                .zip(&row.objective)
                .find(|(x, _)| x.0 == l)
                .map_or(String::new(), |(_, o)| format!("{o:.6}"))
        };
        let built = row.build_s.is_finite();
        let (vars, rows, build) = if built {
            (
                row.vars.to_string(),
                row.rows.to_string(),
                format!("{:.5}", row.build_s),
            )
        } else {
            ("".into(), "".into(), "".into())
        };
        let agg_obj = if time_of(&row, "aggregated").is_some() {
            obj("aggregated")
        } else {
            obj("aggregated ipm")
        };
        let f = &row.flow;
        let num = |x: f64, digits: usize| {
            if x.is_finite() {
                format!("{x:.digits$}")
            } else {
                String::new()
            }
        };
        let _ = writeln!(
            csv,
            "{},{},{},{vars},{rows},{},{},{build},{},{},{},{agg_obj},{},{:.5},{:.5},{},{:.9},{:.9},{},{},{},{:.5},{},{:.5},{},{:.5},{},{:.5},{},{:.5},{},{:.9},{},{:.2e},{},{}",
            row.name,
            row.pops,
            row.classes,
            if row.vars_agg > 0 { row.vars_agg.to_string() } else { String::new() },
            num(row.workload_s, 4),
            num(row.build_agg_s, 5),
            cols.join(","),
            obj("default"),
            f.groups,
            f.build_s,
            f.solve_s,
            f.flow_runs,
            f.max_load,
            f.lower_bound,
            num(f.classes_s, 5),
            num(f.classes_max_load, 9),
            if f.lp_rel_diff.is_finite() { format!("{:.2e}", f.lp_rel_diff) } else { String::new() },
            f.cold.seconds,
            f.cold.flow_runs,
            f.bisection.seconds,
            f.bisection.flow_runs,
            f.uniform[0].seconds,
            f.uniform[0].flow_runs,
            f.uniform[1].seconds,
            f.uniform[1].flow_runs,
            f.uniform[2].seconds,
            f.uniform[2].flow_runs,
            f.uniform[0].max_load,
            num(f.uniform_lp_max_load, 9),
            f.search_rel_diff,
            num(f.rss_stream_mb, 0),
            num(f.rss_classes_mb, 0),
        );
        let agg_built = row.build_agg_s.is_finite();
        let _ = writeln!(
            summary,
            "{:<16} {:>5} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8.4} {:>8.4} {:>8} {:>8}",
            row.name,
            row.pops,
            row.classes,
            if built {
                row.vars.to_string()
            } else {
                "-".into()
            },
            fmt(built.then_some(row.build_s)),
            fmt(time_of(&row, "default")),
            if agg_built {
                row.vars_agg.to_string()
            } else {
                "-".into()
            },
            fmt(agg_built.then_some(row.build_agg_s)),
            fmt(time_of(&row, "aggregated")),
            fmt(time_of(&row, "aggregated ipm")),
            fmt(time_of(&row, "aggregated ipm no-crossover")),
            f.groups,
            f.build_s,
            f.solve_s,
            fmt(f.classes_s.is_finite().then_some(f.classes_s)),
            if f.lp_rel_diff.is_finite() {
                format!("{:.1e}", f.lp_rel_diff)
            } else {
                "-".into()
            },
        );
        // Times span six decades, so the chart plots log10 seconds.
        let pt = |x: f64| (row.pops as f64, x.max(1e-6).log10());
        if agg_built {
            build_pts.push(pt(row.build_agg_s));
        }
        let cell = |t: &SearchTiming| format!("{:>3} {:>8.4}", t.flow_runs, t.seconds);
        let _ = writeln!(
            searches,
            "{:<16} {:>5} {:>8} {:>3} {:>8.4} {} {} | {} {} {} {:>8.1e} {:>6.0} {:>6.0}",
            row.name,
            row.pops,
            f.groups,
            f.flow_runs,
            f.solve_s,
            cell(&f.cold),
            cell(&f.bisection),
            cell(&f.uniform[0]),
            cell(&f.uniform[1]),
            cell(&f.uniform[2]),
            f.search_rel_diff,
            f.rss_stream_mb,
            f.rss_classes_mb,
        );
        flow_pts.push(pt(f.solve_s));
        flow_uniform_pts.push(pt(f.uniform[0].seconds));
        rows_diff.push(f.lp_rel_diff);
        flow_build_pts.push(pt(f.build_s));
        if let Some(x) = time_of(&row, "default") {
            solve_pts.push(pt(x));
        }
        if let Some(x) = time_of(&row, "aggregated") {
            agg_pts.push(pt(x));
        }
        if let Some(x) = time_of(&row, "aggregated ipm") {
            ipm_pts.push(pt(x));
        }
        if lp
            && near52.as_ref().is_none_or(|n| {
                row.pops.abs_diff(COMB_PAPER_POPS) < n.pops.abs_diff(COMB_PAPER_POPS)
            })
        {
            near52 = Some(row);
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    if plan.comb {
        summary.push_str(&searches);
    }
    if let Some(n) = &near52 {
        for (label, build) in [
            ("default", n.build_s),
            ("aggregated", n.build_agg_s),
            ("aggregated ipm no-crossover", n.build_agg_s),
        ] {
            if let Some(solve) = time_of(n, label) {
                let total = build + solve;
                let _ = writeln!(
                    summary,
                    "{} ({} PoPs), {label} model: build + solve {total:.3} s (target <= {COMB_TARGET_SECONDS} s: {}; paper {COMB_PAPER_SECONDS} s with CPLEX)",
                    n.name,
                    n.pops,
                    if total <= COMB_TARGET_SECONDS { "met" } else { "NOT met" }
                );
            }
        }
        let f = &n.flow;
        if f.classes_s.is_finite() {
            let _ = writeln!(
                summary,
                "{} ({} PoPs), {MAX_FLOW_LABEL} on the per-class problem: {:.4} s; on streamed groups: {:.4} s routing + groups, {:.4} s solve",
                n.name, n.pops, f.classes_s, f.build_s, f.solve_s
            );
        }
    }
    if plan.comb {
        let diffs: Vec<f64> = rows_diff
            .iter()
            .copied()
            .filter(|d| d.is_finite())
            .collect();
        let worst = diffs.iter().copied().fold(0.0, f64::max);
        if diffs.is_empty() {
            let _ = writeln!(
                summary,
                "{MAX_FLOW_LABEL} vs LP max load: no network had both (LP up to {} PoPs)",
                plan.lp_max_pops
            );
        } else {
            let _ = writeln!(
                summary,
                "{MAX_FLOW_LABEL} vs LP max load: compared on {} networks, largest relative difference {worst:.1e} ({})",
                diffs.len(),
                if worst <= 1e-6 { "agree to 1e-6" } else { "DISAGREE" }
            );
        }
    }

    let mut scsv =
        String::from("racks,tenants,seconds,tenants_scaled,finished,tenants_satisfied\n");
    if plan.stratos {
        let _ = writeln!(
            summary,
            "\nStratos pack/aware + aware distribution\n{:>7} {:>8} {:>9} {:>8} {:>10}",
            "racks", "tenants", "seconds", "scaled", "satisfied"
        );
    }
    let bar = ProgressBar::new(0);
    bar.set_style(style);
    let mut pts = Vec::new();
    let sizes: &[(usize, usize)] = if plan.stratos {
        &plan.stratos_sizes
    } else {
        &[]
    };
    for &(racks, tenants) in sizes {
        let r = bench_stratos(racks, tenants, plan.seed, plan.budget_s, &bar)?;
        let _ = writeln!(
            scsv,
            "{},{},{:.3},{},{},{}",
            r.racks, r.tenants, r.seconds, r.scaled, r.finished, r.satisfied
        );
        let _ = writeln!(
            summary,
            "{:>7} {:>8} {:>9.3} {:>8} {:>10}{}",
            r.racks,
            r.tenants,
            r.seconds,
            r.scaled,
            if r.finished {
                r.satisfied.to_string()
            } else {
                "-".into()
            },
            if r.finished {
                ""
            } else {
                "  (stopped at the time budget)"
            }
        );
        if r.finished {
            pts.push((r.racks as f64, r.seconds));
        }
        if !r.finished {
            // Larger sizes would only take longer.
            break;
        }
    }
    bar.finish_and_clear();
    let mut files = Vec::new();
    let comb_files = vec![
        ("comb_lp_scale.csv".to_string(), csv),
        (
            "comb_lp_scale.svg".to_string(),
            line_chart(
                &Labels {
                    title: "CoMb min-max load (one epoch, Path): LP and max-flow vs size".into(),
                    x: "PoPs".into(),
                    y: "log10 seconds".into(),
                },
                &[
                    Series {
                        label: "build (aggregated)".into(),
                        points: build_pts,
                    },
                    Series {
                        label: "solve (full model)".into(),
                        points: solve_pts,
                    },
                    Series {
                        label: "solve (aggregated)".into(),
                        points: agg_pts,
                    },
                    Series {
                        label: "solve (aggregated, ipm)".into(),
                        points: ipm_pts,
                    },
                    Series {
                        label: format!("solve ({MAX_FLOW_LABEL})"),
                        points: flow_pts,
                    },
                    Series {
                        label: format!("solve ({MAX_FLOW_LABEL}, uniform capacities)"),
                        points: flow_uniform_pts,
                    },
                    Series {
                        label: format!("routing + groups ({MAX_FLOW_LABEL})"),
                        points: flow_build_pts,
                    },
                ],
            ),
        ),
    ];
    let stratos_files = vec![
        ("stratos_scale.csv".to_string(), scsv),
        (
            "stratos_scale.svg".to_string(),
            line_chart(
                &Labels {
                    title: "Stratos pack/aware + aware: wall time vs size".into(),
                    x: "racks".into(),
                    y: "seconds".into(),
                },
                &[Series {
                    label: "wall time".into(),
                    points: pts,
                }],
            ),
        ),
    ];
    if plan.comb {
        files.extend(comb_files);
    }
    if plan.stratos {
        files.extend(stratos_files);
    }
    Ok(BenchReport { files, summary })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topo(name: &str, n: usize) -> Topology {
        Topology {
            name: name.into(),
            nodes: (0..n).map(|i| format!("n{i}")).collect(),
            edges: (1..n).map(|i| (i - 1, i, 1.0)).collect(),
        }
    }

    #[test]
    fn picks_spread_networks_and_the_one_nearest_52() {
        let all: Vec<Topology> = [3, 90, 10, 50, 20, 60, 5]
            .iter()
            .map(|&n| topo(&format!("t{n}"), n))
            .collect();
        let p = pick_networks(all, 3);
        let sizes: Vec<usize> = p.iter().map(|t| t.nodes.len()).collect();
        // Geometric targets 3, ~16.4, 90 and 52 map to 3, 20 (nearest 16.4 is 20), 90, 50.
        assert_eq!(sizes, vec![3, 20, 50, 90]);
        assert!(pick_networks(Vec::new(), 3).is_empty());
    }

    #[test]
    fn every_solver_variant_finds_the_same_optimum() {
        let row = bench_comb(&topo("line", 6), 1, f64::INFINITY, true, true).unwrap();
        // All but the no-presolve variant, which only runs above 300 PoPs.
        assert_eq!(row.solve_s.len(), solver_variants().len() - 1);
        assert!(row.objective[0] > 0.0);
        for o in &row.objective {
            assert!(
                (o - row.objective[0]).abs() <= 1e-6 * row.objective[0],
                "{o}"
            );
        }
        assert_eq!(row.pops, 6);
        assert!(row.vars > row.classes);
        // The max-flow solver, on streamed groups and on the per-class problem, agrees.
        let f = &row.flow;
        assert!(f.lp_rel_diff <= 1e-6, "{f:?}");
        assert!((f.max_load - f.classes_max_load).abs() <= 1e-9 * f.max_load);
        assert!(f.max_load <= f.lower_bound * (1.0 + 1e-9));
        assert!(
            f.search_rel_diff <= 1e-9 && f.bisection.flow_runs >= f.flow_runs,
            "{f:?}"
        );
        // A line routes each unordered pair over the same nodes both ways.
        assert_eq!(f.groups, 15);
    }

    #[test]
    fn networks_above_the_lp_limit_get_the_max_flow_solver_only() {
        let row = bench_comb(&topo("line", 7), 1, f64::INFINITY, false, false).unwrap();
        assert!(row.solve_s.is_empty() && row.build_agg_s.is_nan());
        assert_eq!(row.classes, 7 * 6 * 3);
        assert!(row.flow.max_load > 0.0 && row.flow.lp_rel_diff.is_nan());
        assert!((row.flow.classes_max_load - row.flow.max_load).abs() <= 1e-9 * row.flow.max_load);
        let with_lp = bench_comb(&topo("line", 7), 1, f64::INFINITY, false, true).unwrap();
        assert_eq!(with_lp.classes, row.classes);
        assert!((with_lp.objective[0] - row.flow.max_load).abs() <= 1e-6 * row.flow.max_load);
    }
}
