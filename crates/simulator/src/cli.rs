//! Reproduction runners, mounted by the `sluice` binary as `sluice sim <NAME>`.
//!
//! Each runner writes the paper's figures and tables as CSV plus SVG into `--out` and
//! prints a short summary.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressStyle};

use crate::comb::{build_workload, provisioning_summary_with, Variability};
use crate::nfaas::{count_servers, mixed_customers, CustomerType, ServerType};
use crate::stratos::{
    run_scenario, DistributionScheme, InitialPlacement, InstancePlacement, Scenario,
    ScenarioOutcome, StratosConfig,
};
use crate::svg::{bar_chart, cdf_points, line_chart, scatter_chart, Labels, Series};
use crate::topology::{self, Topology};
use crate::SimError;

/// The reproductions.
#[derive(Debug, Clone, PartialEq, clap::Subcommand)]
pub enum SimCommand {
    /// Stratos Fig. 13-16 and Table 3: placement and flow distribution in a 50-rack tree.
    StratosPlacement {
        /// Output directory.
        #[arg(long, default_value = "out/sim/stratos-placement")]
        out: PathBuf,
        /// RNG seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Number of tenants.
        #[arg(long, default_value_t = 20)]
        tenants: usize,
        /// Number of racks.
        #[arg(long, default_value_t = 50)]
        racks: usize,
        /// Racks per aggregation switch.
        #[arg(long, default_value_t = 50)]
        racks_per_agg: usize,
        /// Initial instances of client, WAN optimiser, IPS, cache and server.
        #[arg(long, value_delimiter = ',', default_value = "2,1,1,1,2")]
        initial: Vec<usize>,
    },
    /// CoMb Fig. 12-14, Tables 6-7: network-wide provisioning and load balancing.
    CombNetwork {
        /// Output directory.
        #[arg(long, default_value = "out/sim/comb-network")]
        out: PathBuf,
        /// RNG seed (gravity masses and variability draws).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Topology files (.graphml or Rocketfuel .intra); repeat for several.
        #[arg(long = "topology", default_values = ["data/topology-zoo/Abilene.graphml", "data/topology-zoo/Geant2001.graphml"])]
        topologies: Vec<PathBuf>,
        /// Empirical variability quantiles (quantile,volume_over_mean).
        #[arg(long, default_value = "data/traffic/abilene-od-variability.csv")]
        variability: PathBuf,
        /// Traffic epochs (the paper uses 200).
        #[arg(long, default_value_t = 200)]
        epochs: usize,
        /// Accelerator experiment: put an IDS signature-matching accelerator at this
        /// many PoPs (the busiest by mean traffic) and compare per-epoch max loads
        /// (volume provisioning); 0 skips it.
        #[arg(long, default_value_t = 0)]
        ids_accel: usize,
        /// Share of the IDS-specific work an accelerator takes off the CPU.
        #[arg(long, default_value_t = 0.9)]
        accel_offload: f64,
    },
    /// NFaaS Fig. 5: servers needed by tenant- vs service-centric placement.
    NfaasPlacement {
        /// Output directory.
        #[arg(long, default_value = "out/sim/nfaas-placement")]
        out: PathBuf,
        /// RNG seed for the mixed-customer workload.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Number of customers.
        #[arg(long, default_value_t = 1000)]
        customers: usize,
    },
    /// Seawall (HotCloud 2010) Fig. 1, Fig. 2 and §3.1: VM-level fair sharing of one
    /// drop-tail bottleneck, with and without Seawall's rate controllers, and VMs that
    /// reach several hosts through it (one contender per destination or per link).
    Seawall {
        /// Output directory.
        #[arg(long, default_value = "out/sim/seawall")]
        out: PathBuf,
        /// RNG seed (order of arrivals within a time step).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Bottleneck rates, Mb/s.
        #[arg(long, value_delimiter = ',', default_value = "100,1000")]
        capacities: Vec<u64>,
        /// Simulated seconds per run.
        #[arg(long, default_value_t = 10.0)]
        duration: f64,
        /// Seconds of each run before measurements start.
        #[arg(long, default_value_t = 2.0)]
        warmup: f64,
        /// Seawall feedback period, ms (default: the seawall crate's).
        #[arg(long)]
        period_ms: Option<f64>,
        /// Seawall additive increase per period, Mb/s (default: the crate's).
        #[arg(long)]
        increase_mbps: Option<f64>,
        /// Seawall multiplicative decrease, 0-1 (default: the crate's).
        #[arg(long)]
        decrease: Option<f64>,
        /// Bottleneck queue, KB (default: two base round trips' worth, at least 64).
        #[arg(long)]
        queue_kb: Option<u64>,
    },
    /// Scale benchmarks (issue 6): CoMb LP time vs Topology Zoo network size, Stratos
    /// wall time vs datacenter size.
    BenchScale {
        /// Few networks and small datacenters only (about a minute).
        #[arg(long)]
        quick: bool,
        /// Output directory.
        #[arg(long, default_value = "out/sim/bench-scale")]
        out: PathBuf,
        /// Directory of Topology Zoo .graphml files (default
        /// /work/shared/data/topology-zoo if it exists, else data/topology-zoo).
        #[arg(long)]
        zoo: Option<PathBuf>,
        /// Networks spread from smallest to largest (the one nearest 52 PoPs is added).
        #[arg(long)]
        networks: Option<usize>,
        /// Skip networks with more PoPs than this.
        #[arg(long)]
        max_pops: Option<usize>,
        /// Solve the full (non-aggregated) CoMb model only up to this many PoPs.
        #[arg(long)]
        full_max_pops: Option<usize>,
        /// Build the CoMb workload and run any LP only up to this many PoPs (default
        /// 300); the max-flow solver runs on every network.
        #[arg(long)]
        lp_max_pops: Option<usize>,
        /// Stratos sizes as racks:tenants, comma separated (the first should be 50:20).
        #[arg(long, value_delimiter = ',')]
        sizes: Vec<String>,
        /// Seconds after which a Stratos run is stopped (larger sizes are then skipped).
        #[arg(long)]
        budget: Option<f64>,
        /// RNG seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Run only one benchmark: `comb` or `stratos`.
        #[arg(long)]
        only: Option<String>,
    },
}

/// Runs one reproduction.
pub fn run(cmd: SimCommand) -> Result<(), SimError> {
    match cmd {
        SimCommand::StratosPlacement {
            out,
            seed,
            tenants,
            racks,
            racks_per_agg,
            initial,
        } => {
            let mut cfg = StratosConfig::paper(seed);
            cfg.tenants = tenants;
            cfg.tree.racks = racks;
            cfg.tree.racks_per_agg = racks_per_agg;
            if initial.len() != cfg.stages.len() {
                return Err(SimError::Config(format!(
                    "--initial needs {} counts (client, WAN optimiser, IPS, cache, server)",
                    cfg.stages.len()
                )));
            }
            for (s, n) in cfg.stages.iter_mut().zip(initial) {
                s.initial = n;
            }
            let outcomes = stratos_scenarios(&cfg)?;
            write_stratos(&out, &outcomes)?;
            say(&format!(
                "{}wrote {}\n",
                stratos_summary(&outcomes),
                out.display()
            ));
            Ok(())
        }
        SimCommand::CombNetwork {
            out,
            seed,
            topologies,
            variability,
            epochs,
            ids_accel,
            accel_offload,
        } => {
            let text = std::fs::read_to_string(&variability).map_err(io_err(&variability))?;
            let var = Variability::parse(&text)?;
            let mut topos = Vec::new();
            for p in &topologies {
                topos.push(topology::load(p)?);
            }
            let accel = (ids_accel > 0).then_some((ids_accel, accel_offload));
            let report = comb_report(&topos, &var, epochs, seed, accel)?;
            write_files(&out, &report.files)?;
            say(&format!("{}wrote {}\n", report.summary, out.display()));
            Ok(())
        }
        SimCommand::NfaasPlacement {
            out,
            seed,
            customers,
        } => {
            let report = nfaas_report(customers, seed)?;
            write_files(&out, &report.files)?;
            say(&format!("{}wrote {}\n", report.summary, out.display()));
            Ok(())
        }
        SimCommand::Seawall {
            out,
            seed,
            capacities,
            duration,
            warmup,
            period_ms,
            increase_mbps,
            decrease,
            queue_kb,
        } => {
            let mut sw = sluice_seawall::Config::default();
            if let Some(p) = period_ms {
                sw.period_ns = (p * 1e6) as u64;
            }
            if let Some(i) = increase_mbps {
                sw.increase_bps = (i * 1e6) as u64;
            }
            if let Some(d) = decrease {
                sw.decrease = d;
            }
            let plan = SeawallPlan {
                seed,
                capacities_bps: capacities.iter().map(|c| c * 1_000_000).collect(),
                duration_ns: secs_to_ns(duration, "--duration")?,
                warmup_ns: secs_to_ns(warmup, "--warmup")?,
                seawall: sw,
                queue_bytes: queue_kb.map(|k| k * 1024),
            };
            let report = seawall_report(&plan)?;
            write_files(&out, &report.files)?;
            say(&format!("{}wrote {}\n", report.summary, out.display()));
            Ok(())
        }
        SimCommand::BenchScale {
            quick,
            out,
            zoo,
            networks,
            max_pops,
            full_max_pops,
            lp_max_pops,
            sizes,
            budget,
            seed,
            only,
        } => {
            let zoo = zoo.unwrap_or_else(|| {
                let shared = PathBuf::from("/work/shared/data/topology-zoo");
                if shared.is_dir() {
                    shared
                } else {
                    PathBuf::from("data/topology-zoo")
                }
            });
            let mut plan = crate::bench::BenchPlan::new(quick, zoo, seed);
            if let Some(n) = networks {
                plan.networks = n;
            }
            if let Some(m) = max_pops {
                plan.max_pops = m;
            }
            if let Some(m) = full_max_pops {
                plan.full_max_pops = m;
            }
            if let Some(m) = lp_max_pops {
                plan.lp_max_pops = m;
            }
            if let Some(b) = budget {
                plan.budget_s = b;
            }
            match only.as_deref() {
                None => {}
                Some("comb") => plan.stratos = false,
                Some("stratos") => plan.comb = false,
                Some(o) => {
                    return Err(SimError::Config(format!(
                        "--only {o}: expected comb or stratos"
                    )))
                }
            }
            if !sizes.is_empty() {
                plan.stratos_sizes = sizes
                    .iter()
                    .map(|s| parse_size(s))
                    .collect::<Result<_, _>>()?;
            }
            let report = crate::bench::run_bench(&plan)?;
            write_files(&out, &report.files)?;
            say(&format!("{}wrote {}\n", report.summary, out.display()));
            Ok(())
        }
    }
}

/// Parses `racks:tenants`.
fn parse_size(s: &str) -> Result<(usize, usize), SimError> {
    let bad = || SimError::Config(format!("--sizes: \"{s}\" is not racks:tenants"));
    let (r, t) = s.split_once(':').ok_or_else(bad)?;
    Ok((
        r.trim().parse().map_err(|_| bad())?,
        t.trim().parse().map_err(|_| bad())?,
    ))
}

/// Prints to stdout; a closed pipe (e.g. `| head`) is not an error worth a panic.
fn say(text: &str) {
    use std::io::Write;
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// The five placement/distribution combinations of §7.2, in table order.
pub fn stratos_scenario_list() -> Vec<Scenario> {
    use DistributionScheme as D;
    use InitialPlacement as I;
    use InstancePlacement as P;
    vec![
        Scenario {
            initial: I::Rand,
            instance: P::Rand,
            distribution: D::Uniform,
        },
        Scenario {
            initial: I::Pack,
            instance: P::Rand,
            distribution: D::Uniform,
        },
        Scenario {
            initial: I::Pack,
            instance: P::Aware,
            distribution: D::Uniform,
        },
        Scenario {
            initial: I::Pack,
            instance: P::Rand,
            distribution: D::Aware,
        },
        Scenario {
            initial: I::Pack,
            instance: P::Aware,
            distribution: D::Aware,
        },
    ]
}

fn stratos_scenarios(cfg: &StratosConfig) -> Result<Vec<ScenarioOutcome>, SimError> {
    let list = stratos_scenario_list();
    let bar = ProgressBar::new(list.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut out = Vec::new();
    for s in list {
        bar.set_message(s.label());
        out.push(run_scenario(cfg, s)?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(out)
}

fn find<'a>(o: &'a [ScenarioOutcome], label: &str) -> Option<&'a ScenarioOutcome> {
    o.iter().find(|x| x.scenario.label() == label)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Human summary of the Stratos scenarios.
pub fn stratos_summary(outcomes: &[ScenarioOutcome]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<20} {:>7} {:>7} {:>8} {:>8} {:>9} {:>9} {:>9} {:>7}",
        "scenario",
        ">=99%",
        ">=95%",
        "min srv%",
        "mean VMs",
        "med xrk%",
        "links>0%",
        "med util",
        "slots%"
    );
    for o in outcomes {
        let share = |p: f64| {
            o.tenants.iter().filter(|t| t.served_pct() >= p).count() as f64
                / o.tenants.len().max(1) as f64
        };
        let min = o
            .tenants
            .iter()
            .map(|t| t.served_pct())
            .fold(f64::INFINITY, f64::min);
        let inst = o.tenants.iter().map(|t| t.instances as f64).sum::<f64>()
            / o.tenants.len().max(1) as f64;
        let xr = median(
            o.tenants
                .iter()
                .map(|t| 100.0 * t.inter_rack_fraction)
                .collect(),
        );
        let used = o.link_utilization.iter().filter(|&&u| u > 1e-9).count() as f64
            / o.link_utilization.len() as f64;
        let mu = median(o.link_utilization.iter().map(|u| 100.0 * u).collect());
        let _ = writeln!(
            s,
            "{:<20} {:>7.0} {:>7.0} {:>8.1} {:>8.2} {:>9.1} {:>9.0} {:>9.1} {:>7.0}",
            o.scenario.label(),
            100.0 * share(99.0),
            100.0 * share(95.0),
            min,
            inst,
            xr,
            100.0 * used,
            mu,
            100.0 * o.slots_used as f64 / o.slots_total as f64
        );
    }
    s
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> SimError + '_ {
    move |source| SimError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn write_files(dir: &Path, files: &[(String, String)]) -> Result<(), SimError> {
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    for (name, body) in files {
        let p = dir.join(name);
        std::fs::write(&p, body).map_err(io_err(&p))?;
    }
    Ok(())
}

/// CSV and SVG files for Stratos Fig. 13-16 and Table 3.
pub fn stratos_files(outcomes: &[ScenarioOutcome]) -> Vec<(String, String)> {
    let mut files = Vec::new();
    let cdf =
        |labels: &[&str], f: &dyn Fn(&ScenarioOutcome) -> Vec<f64>| -> (String, Vec<Series>) {
            let mut csv = String::from("scenario,index,value\n");
            let mut series = Vec::new();
            for l in labels {
                if let Some(o) = find(outcomes, l) {
                    let vals = f(o);
                    for (i, v) in vals.iter().enumerate() {
                        let _ = writeln!(csv, "{l},{i},{v:.4}");
                    }
                    series.push(Series {
                        label: l.to_string(),
                        points: cdf_points(&vals),
                    });
                }
            }
            (csv, series)
        };
    let served = |o: &ScenarioOutcome| o.tenants.iter().map(|t| t.served_pct()).collect::<Vec<_>>();
    let placement = [
        "rand/rand uniform",
        "pack/rand uniform",
        "pack/aware uniform",
    ];
    let dist = [
        "pack/rand uniform",
        "pack/rand aware",
        "pack/aware uniform",
        "pack/aware aware",
    ];

    let (csv, series) = cdf(&placement, &served);
    files.push(("fig13_demand_served_cdf.csv".into(), csv));
    files.push((
        "fig13_demand_served_cdf.svg".into(),
        line_chart(
            &Labels {
                title: "Fig. 13: tenant demand served".into(),
                x: "% of demand served".into(),
                y: "CDF of tenants".into(),
            },
            &series,
        ),
    ));

    let mut csv =
        String::from("scenario,tenant,instances,served_pct,served_after_own_scaling_pct\n");
    let mut series = Vec::new();
    for l in placement {
        if let Some(o) = find(outcomes, l) {
            for (i, t) in o.tenants.iter().enumerate() {
                let _ = writeln!(
                    csv,
                    "{l},{i},{},{:.4},{:.4}",
                    t.instances,
                    t.served_pct(),
                    100.0 * t.served_after_scaling_mbps / t.demand_mbps
                );
            }
            series.push(Series {
                label: l.into(),
                points: o
                    .tenants
                    .iter()
                    .map(|t| (t.instances as f64, t.served_pct()))
                    .collect(),
            });
        }
    }
    files.push(("fig14_served_vs_instances.csv".into(), csv));
    files.push((
        "fig14_served_vs_instances.svg".into(),
        scatter_chart(
            &Labels {
                title: "Fig. 14: demand served vs instances".into(),
                x: "instances (VMs)".into(),
                y: "% of demand served".into(),
            },
            &series,
        ),
    ));

    let (csv, series) = cdf(&dist, &served);
    files.push(("fig15a_demand_served_cdf.csv".into(), csv));
    files.push((
        "fig15a_demand_served_cdf.svg".into(),
        line_chart(
            &Labels {
                title: "Fig. 15a: demand served by distribution".into(),
                x: "% of demand served".into(),
                y: "CDF of tenants".into(),
            },
            &series,
        ),
    ));
    let inter = |o: &ScenarioOutcome| {
        o.tenants
            .iter()
            .map(|t| 100.0 * t.inter_rack_fraction)
            .collect::<Vec<_>>()
    };
    let (csv, series) = cdf(&dist, &inter);
    files.push(("fig15b_inter_rack_cdf.csv".into(), csv));
    files.push((
        "fig15b_inter_rack_cdf.svg".into(),
        line_chart(
            &Labels {
                title: "Fig. 15b: traffic crossing inter-rack links".into(),
                x: "% of tenant traffic".into(),
                y: "CDF of tenants".into(),
            },
            &series,
        ),
    ));
    let all: Vec<String> = outcomes.iter().map(|o| o.scenario.label()).collect();
    let all_refs: Vec<&str> = all.iter().map(String::as_str).collect();
    let util = |o: &ScenarioOutcome| {
        o.link_utilization
            .iter()
            .map(|u| 100.0 * u)
            .collect::<Vec<_>>()
    };
    let (csv, series) = cdf(&all_refs, &util);
    files.push(("fig16_link_utilization_cdf.csv".into(), csv));
    files.push((
        "fig16_link_utilization_cdf.svg".into(),
        line_chart(
            &Labels {
                title: "Fig. 16: network link utilisation".into(),
                x: "% of link bandwidth used".into(),
                y: "CDF of links".into(),
            },
            &series,
        ),
    ));

    let mut csv =
        String::from("placement,distribution,slots_used,slots_total,utilization_pct,paper_pct\n");
    let paper = |l: &str| match l {
        "rand/rand uniform" => "87",
        "pack/rand uniform" => "90",
        "pack/aware uniform" => "97",
        "pack/rand aware" => "78",
        "pack/aware aware" => "77",
        _ => "",
    };
    for o in outcomes {
        let l = o.scenario.label();
        let (p, d) = l.split_once(' ').unwrap_or((&l, ""));
        let _ = writeln!(
            csv,
            "{p},{d},{},{},{:.1},{}",
            o.slots_used,
            o.slots_total,
            100.0 * o.slots_used as f64 / o.slots_total as f64,
            paper(&l)
        );
    }
    files.push(("table3_slot_utilization.csv".into(), csv));
    files
}

fn write_stratos(dir: &Path, outcomes: &[ScenarioOutcome]) -> Result<(), SimError> {
    write_files(dir, &stratos_files(outcomes))
}

/// CoMb's published numbers: (Fig. 12 reuse, Fig. 12 no reuse) are read off the figure
/// only approximately; Table 6 is exact. Keyed by our topology names.
fn comb_paper(name: &str) -> Option<[f64; 3]> {
    // Table 6 (Path, Edge, Ingress) largest-box ratios.
    match name {
        "Abilene" => Some([0.87, 0.87, 0.54]),
        "Geant2001" => Some([1.49, 1.25, 0.55]),
        "AS1221" => Some([1.33, 1.33, 0.54]),
        "AS3257" => Some([0.68, 0.68, 0.55]),
        "AS1239" => Some([1.26, 1.26, 0.55]),
        _ => None,
    }
}

/// Topologies up to this size also get the strawman relaxation (its LP grows quickly).
const STRAWMAN_MAX_POPS: usize = 30;

/// Computes CoMb Fig. 12-14 and Tables 5-7 for every topology; with
/// `accel = Some((k, offload))` also the IDS-accelerator experiment at the `k` busiest
/// PoPs (`accel_ids.csv`).
pub fn comb_report(
    topos: &[Topology],
    var: &Variability,
    epochs: usize,
    seed: u64,
    accel: Option<(usize, f64)>,
) -> Result<NfaasReport, SimError> {
    if epochs == 0 {
        return Err(SimError::Config("--epochs must be at least 1".into()));
    }
    let bar = ProgressBar::new(topos.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut fig12 = String::from("topology,pops,savings_reuse,savings_no_reuse\n");
    let mut fig13 = String::from("topology,path,edge,ingress\n");
    let mut table5 = String::from("topology,unconstrained,two_step,ingress_only,paper_unconstrained,paper_two_step,paper_ingress_only\n");
    let mut table6 =
        String::from("topology,path,edge,ingress,paper_path,paper_edge,paper_ingress\n");
    let mut fig14 = String::from("topology,provisioning,epoch,ratio\n");
    let mut fig14s = String::from("topology,provisioning,min,p25,median,p75,max\n");
    let mut table7 = String::from(
        "topology,pops,classes,hyperapp_lp_seconds,strawman_lp_seconds,strawman_max_load,hyperapp_max_load,gap_pct\n",
    );
    let mut accel_csv =
        String::from("topology,accel_pops,offload,epoch,max_load,max_load_accel,reduction\n");
    let mut accel_summary = String::new();
    let mut summary = String::new();
    let _ = writeln!(
        summary,
        "{:<12} {:>5} {:>7} {:>7} {:>7} {:>8} {:>8} {:>9} {:>9} {:>8}",
        "topology",
        "PoPs",
        "Path",
        "Edge",
        "Ingress",
        "noReuse",
        "2-step",
        "load med",
        "load max",
        "LP s"
    );
    let (mut cats, mut v12, mut v13) = (Vec::new(), vec![Vec::new(); 2], vec![Vec::new(); 3]);
    let mut cdfs = Vec::new();
    for t in topos {
        bar.set_message(format!("{}: workload", t.name));
        let w = build_workload(t, var, epochs, seed)?;
        let s = provisioning_summary_with(t, &w, |stage| {
            bar.set_message(format!("{}: {stage}", t.name));
        })?;
        let _ = writeln!(
            fig12,
            "{},{},{:.4},{:.4}",
            t.name, s.pops, s.savings[0], s.savings_no_reuse
        );
        let _ = writeln!(
            fig13,
            "{},{:.4},{:.4},{:.4}",
            t.name, s.savings[0], s.savings[1], s.savings[2]
        );
        let p5 = match t.name.as_str() {
            "Abilene" => "1.81,1.62,1.41",
            "Geant2001" => "2.20,1.71,1.42",
            "AS1221" => "2.17,1.69,1.41",
            "AS3257" => "1.85,1.63,1.42",
            "AS1239" => "2.11,1.69,1.43",
            _ => ",,",
        };
        let _ = writeln!(
            table5,
            "{},{:.4},{:.4},{:.4},{p5}",
            t.name, s.savings[0], s.constrained[0], s.constrained[1]
        );
        let p = comb_paper(&t.name)
            .map(|p| p.map(|x| format!("{x}")))
            .unwrap_or_default();
        let _ = writeln!(
            table6,
            "{},{:.3},{:.3},{:.3},{}",
            t.name,
            s.largest_box_ratio[0],
            s.largest_box_ratio[1],
            s.largest_box_ratio[2],
            p.join(",")
        );
        cats.push(t.name.clone());
        v12[0].push(s.savings[0]);
        v12[1].push(s.savings_no_reuse);
        for (col, &x) in v13.iter_mut().zip(&s.savings) {
            col.push(x);
        }
        let volume = w.mean_node_volume();
        let mut med = 0.0;
        let mut max = 0.0;
        for (label, prov) in [("uniform", vec![1000.0; w.nodes]), ("volume", volume)] {
            let mut r = w.load_ratios_with(&prov, |e| {
                bar.set_message(format!("{}: Fig. 14 {label} epoch {e}/{epochs}", t.name));
            })?;
            for (e, x) in r.iter().enumerate() {
                let _ = writeln!(fig14, "{},{label},{e},{x:.4}", t.name);
            }
            cdfs.push(Series {
                label: format!("{} {label}", t.name),
                points: cdf_points(&r),
            });
            r.sort_by(f64::total_cmp);
            let q = |p: f64| r[((r.len() - 1) as f64 * p).round() as usize];
            let _ = writeln!(
                fig14s,
                "{},{label},{:.3},{:.3},{:.3},{:.3},{:.3}",
                t.name,
                q(0.0),
                q(0.25),
                q(0.5),
                q(0.75),
                q(1.0)
            );
            if label == "volume" {
                med = q(0.5);
                max = q(1.0);
            }
        }
        if let Some((k, offload)) = accel {
            let volume = w.mean_node_volume();
            let mut busiest: Vec<usize> = (0..w.nodes).collect();
            busiest.sort_by(|&a, &b| volume[b].total_cmp(&volume[a]));
            busiest.truncate(k);
            let mut gains = Vec::with_capacity(w.epochs.len());
            for e in 0..w.epochs.len() {
                let base = crate::comb::max_load(&w.epoch_problem(e, &volume))?;
                let fast = crate::comb::max_load(&w.accel_problem(e, &volume, &busiest, offload)?)?;
                let _ = writeln!(
                    accel_csv,
                    "{},{k},{offload},{e},{base:.6},{fast:.6},{:.4}",
                    t.name,
                    base / fast.max(1e-12)
                );
                gains.push(base / fast.max(1e-12));
            }
            let m = median(gains.clone());
            let lo = gains.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = gains.iter().copied().fold(0.0, f64::max);
            let _ = writeln!(
                accel_summary,
                "{}: IDS accelerators at {k} PoPs ({offload} of IDS work offloaded): max load / {m:.3} median ({lo:.3}-{hi:.3})",
                t.name
            );
        }
        // Table 7: the model the simulator uses (aggregated), build + solve.
        let problem = w.epoch_problem(0, &w.mean_node_volume());
        let start = std::time::Instant::now();
        crate::comb::max_load(&problem)?;
        let secs = start.elapsed().as_secs_f64();
        let mut straw_cols = ",,,".to_string();
        if t.nodes.len() <= STRAWMAN_MAX_POPS {
            let start = std::time::Instant::now();
            let (straw, hyper) = w.strawman_gap(&w.mean_node_volume())?;
            let straw_secs = start.elapsed().as_secs_f64();
            straw_cols = format!(
                "{straw_secs:.4},{straw:.6},{hyper:.6},{:.4}",
                100.0 * (hyper / straw - 1.0)
            );
        }
        let _ = writeln!(
            table7,
            "{},{},{},{secs:.4},{straw_cols}",
            t.name,
            s.pops,
            problem.classes.len()
        );
        let _ = writeln!(
            summary,
            "{:<12} {:>5} {:>7.2} {:>7.2} {:>7.2} {:>8.2} {:>8.2} {:>9.2} {:>9.2} {:>8.3}",
            t.name,
            s.pops,
            s.savings[0],
            s.savings[1],
            s.savings[2],
            s.savings_no_reuse,
            s.constrained[0],
            med,
            max,
            secs
        );
        bar.inc(1);
    }
    bar.finish_and_clear();
    summary.push_str(&accel_summary);
    let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut files = vec![
        ("fig12_provisioning_savings.csv".to_string(), fig12),
        (
            "fig12_provisioning_savings.svg".to_string(),
            bar_chart(
                &Labels {
                    title: "Fig. 12: provisioning savings vs standalone ingress".into(),
                    x: "topology".into(),
                    y: "Cost_standalone / Cost_CoMb".into(),
                },
                &cats,
                &names(&["CoMb (reuse)", "CoMb (no reuse)"]),
                &v12,
            ),
        ),
        ("fig13_spatial_strategies.csv".to_string(), fig13),
        (
            "fig13_spatial_strategies.svg".to_string(),
            bar_chart(
                &Labels {
                    title: "Fig. 13: spatial distribution strategies".into(),
                    x: "topology".into(),
                    y: "Cost_standalone / Cost_CoMb".into(),
                },
                &cats,
                &names(&["Path", "Edge", "Ingress"]),
                &v13,
            ),
        ),
        ("table5_constrained.csv".to_string(), table5),
        ("table6_largest_box.csv".to_string(), table6),
        ("fig14_max_load_ratio.csv".to_string(), fig14),
        ("fig14_max_load_ratio_summary.csv".to_string(), fig14s),
        (
            "fig14_max_load_ratio.svg".to_string(),
            line_chart(
                &Labels {
                    title: "Fig. 14: max-load reduction per epoch".into(),
                    x: "MaxLoad_standalone / MaxLoad_CoMb".into(),
                    y: "CDF of epochs".into(),
                },
                &cdfs,
            ),
        ),
        ("table7_solve_time.csv".to_string(), table7),
    ];
    if accel.is_some() {
        files.push(("accel_ids.csv".to_string(), accel_csv));
    }
    Ok(NfaasReport { files, summary })
}

/// Files and summary of a reproduction.
pub struct NfaasReport {
    /// `(file name, contents)`.
    pub files: Vec<(String, String)>,
    /// Human summary.
    pub summary: String,
}

/// Computes NFaaS Fig. 5 (a: small servers, large customers, growing count; b: large
/// servers per customer type; c: mixed customers per server type).
pub fn nfaas_report(customers: usize, seed: u64) -> Result<NfaasReport, SimError> {
    let mut files = Vec::new();
    let mut summary = String::new();
    let names = vec![
        "tenant-centric".to_string(),
        "service-centric".to_string(),
        "service-centric (dedicated)".to_string(),
    ];
    let header = "tenant_centric,service_centric,service_dedicated,saving_pct\n";

    // (a)
    let steps: Vec<usize> = (1..=10)
        .map(|i| customers * i / 10)
        .filter(|&n| n > 0)
        .collect();
    let mut csv = format!("customers,{header}");
    let mut vals = vec![Vec::new(); 3];
    let mut cats = Vec::new();
    for &n in &steps {
        let c = count_servers(&vec![CustomerType::Large; n], ServerType::Small)?;
        let _ = writeln!(
            csv,
            "{n},{},{},{},{:.1}",
            c.tenant,
            c.service,
            c.service_dedicated,
            c.saving_pct()
        );
        vals[0].push(c.tenant as f64);
        vals[1].push(c.service as f64);
        vals[2].push(c.service_dedicated as f64);
        cats.push(n.to_string());
    }
    files.push(("fig5a_small_servers_large_customers.csv".into(), csv));
    files.push((
        "fig5a_small_servers_large_customers.svg".into(),
        bar_chart(
            &Labels {
                title: "Fig. 5a: small servers, large customers".into(),
                x: "customers".into(),
                y: "servers".into(),
            },
            &cats,
            &names,
            &vals,
        ),
    ));

    // (b)
    let mut csv = format!("customer_type,{header}");
    let mut vals = vec![Vec::new(); 3];
    let mut cats = Vec::new();
    let _ = writeln!(summary, "Fig. 5b: {customers} customers on large servers");
    let _ = writeln!(
        summary,
        "{:<10} {:>8} {:>8} {:>10} {:>9}",
        "customer", "tenant", "service", "dedicated", "saving%"
    );
    for t in CustomerType::ALL {
        let c = count_servers(&vec![t; customers], ServerType::Large)?;
        let _ = writeln!(
            csv,
            "{},{},{},{},{:.1}",
            t.name(),
            c.tenant,
            c.service,
            c.service_dedicated,
            c.saving_pct()
        );
        let _ = writeln!(
            summary,
            "{:<10} {:>8} {:>8} {:>10} {:>9.1}",
            t.name(),
            c.tenant,
            c.service,
            c.service_dedicated,
            c.saving_pct()
        );
        vals[0].push(c.tenant as f64);
        vals[1].push(c.service as f64);
        vals[2].push(c.service_dedicated as f64);
        cats.push(t.name().to_string());
    }
    files.push(("fig5b_large_servers_by_customer_type.csv".into(), csv));
    files.push((
        "fig5b_large_servers_by_customer_type.svg".into(),
        bar_chart(
            &Labels {
                title: "Fig. 5b: large servers by customer type".into(),
                x: "customer type".into(),
                y: "servers".into(),
            },
            &cats,
            &names,
            &vals,
        ),
    ));

    // (c)
    let mix = mixed_customers(customers, seed);
    let mut csv = format!("server_type,{header}");
    let mut vals = vec![Vec::new(); 3];
    let mut cats = Vec::new();
    let _ = writeln!(
        summary,
        "Fig. 5c: {customers} mixed customers (seed {seed})"
    );
    let _ = writeln!(
        summary,
        "{:<10} {:>8} {:>8} {:>10} {:>9}",
        "server", "tenant", "service", "dedicated", "saving%"
    );
    for s in ServerType::ALL {
        let c = count_servers(&mix, s)?;
        let _ = writeln!(
            csv,
            "{},{},{},{},{:.1}",
            s.name(),
            c.tenant,
            c.service,
            c.service_dedicated,
            c.saving_pct()
        );
        let _ = writeln!(
            summary,
            "{:<10} {:>8} {:>8} {:>10} {:>9.1}",
            s.name(),
            c.tenant,
            c.service,
            c.service_dedicated,
            c.saving_pct()
        );
        vals[0].push(c.tenant as f64);
        vals[1].push(c.service as f64);
        vals[2].push(c.service_dedicated as f64);
        cats.push(s.name().to_string());
    }
    files.push(("fig5c_mixed_customers_by_server_type.csv".into(), csv));
    files.push((
        "fig5c_mixed_customers_by_server_type.svg".into(),
        bar_chart(
            &Labels {
                title: "Fig. 5c: mixed customers by server type".into(),
                x: "server type".into(),
                y: "servers".into(),
            },
            &cats,
            &names,
            &vals,
        ),
    ));
    let a = count_servers(&vec![CustomerType::Large; customers], ServerType::Small)?;
    summary.insert_str(
        0,
        &format!(
            "Fig. 5a: {customers} large customers on small servers: tenant {} service {} (saving {:.1}%)\n",
            a.tenant,
            a.service,
            a.saving_pct()
        ),
    );
    Ok(NfaasReport { files, summary })
}

fn secs_to_ns(s: f64, what: &str) -> Result<u64, SimError> {
    if !(s.is_finite() && (0.0..1e6).contains(&s)) {
        return Err(SimError::Config(format!(
            "{what}: {s} is not a number of seconds"
        )));
    }
    Ok((s * 1e9).round() as u64)
}

/// What `sluice-sim seawall` runs.
#[derive(Debug, Clone, PartialEq)]
pub struct SeawallPlan {
    /// Seeds the order of arrivals within a step.
    pub seed: u64,
    /// Bottleneck rates, bits per second.
    pub capacities_bps: Vec<u64>,
    /// Simulated time per run, ns.
    pub duration_ns: u64,
    /// Warm-up per run, ns.
    pub warmup_ns: u64,
    /// Seawall's parameters.
    pub seawall: sluice_seawall::Config,
    /// Bottleneck queue, bytes (None: [`LinkConfig::new`](crate::seawall::LinkConfig::new)'s).
    pub queue_bytes: Option<u64>,
}

/// Flows of Fig. 1's selfish VM.
const SEAWALL_FIG1_K: [usize; 6] = [1, 2, 4, 8, 16, 32];
/// Flows in each of Fig. 2's three VMs of the large tenant.
const SEAWALL_FIG2_FLOWS: [usize; 4] = [1, 2, 4, 8];
/// UDP floods of §3.1, as multiples of the link rate.
const SEAWALL_UDP_TIMES: [u64; 2] = [2, 10];
/// Receiving hosts of the one VM of the many-destinations case.
const SEAWALL_MANY_HOSTS: usize = 4;
/// VMs of the all-pairs tenant, each reaching as many hosts.
const SEAWALL_ALL_PAIRS: usize = 3;

/// Runs the Seawall reproduction: Fig. 1 (one flow against k), §3.1 (TCP against a UDP
/// flood), Fig. 2 (VM-level shares of a 1-VM and a 3-VM tenant), work conservation and
/// the time a newcomer takes to get its share, each without and with Seawall; and VMs
/// sending to several hosts through the bottleneck (§3's rate per (senderVM, link)),
/// without Seawall and with a contender per destination or per link.
pub fn seawall_report(plan: &SeawallPlan) -> Result<NfaasReport, SimError> {
    use crate::seawall::{
        all_pairs_scenario, fig1_scenario, fig2_scenario, many_destinations_scenario,
        simulate_with_paths, udp_only_controlled_scenario, udp_scenario, LinkConfig, Outcome,
        Paths, Scenario, Vm,
    };
    if plan.capacities_bps.is_empty() || plan.capacities_bps.contains(&0) {
        return Err(SimError::Config(
            "--capacities: rates above zero, Mb/s".into(),
        ));
    }
    if plan.warmup_ns >= plan.duration_ns {
        return Err(SimError::Config(
            "--warmup must be shorter than --duration".into(),
        ));
    }
    // Both modes of every scenario (3 work-conservation and 2 convergence cases among
    // them), plus the UDP floods with the controller on the UDP source only, plus three
    // modes of the 2 destination cases.
    let runs_per_link = 2
        * (SEAWALL_FIG1_K.len() + SEAWALL_FIG2_FLOWS.len() + SEAWALL_UDP_TIMES.len() + 3 + 2)
        + SEAWALL_UDP_TIMES.len()
        + 3 * 2;
    let bar = ProgressBar::new((runs_per_link * plan.capacities_bps.len()) as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut per_vm = String::from(
        "experiment,capacity_mbps,param,mode,vm,tenant,tcp_flows,throughput_mbps,share,ideal_share,policed_bytes,dropped_bytes,final_rate_mbps,decreases\n",
    );
    // Runs `sc` once per mode ("without" Seawall, "with" it, or with it and the paths
    // naming the bottleneck, "per-link"), logging every VM.
    let mut run = |link: &LinkConfig, exp: &str, param: &str, sc: &Scenario, modes: &[&str]| {
        let mut out = Vec::new();
        for &mode in modes {
            let (sw, paths) = match mode {
                "without" => (None, Paths::PerDestination),
                "per-link" => (Some(&plan.seawall), Paths::PerLink),
                _ => (Some(&plan.seawall), Paths::PerDestination),
            };
            bar.set_message(format!(
                "{} Mb/s {exp} {param} {mode}",
                link.capacity_bps / 1_000_000
            ));
            let o = simulate_with_paths(link, sc, sw, paths)?;
            for (i, v) in o.vms.iter().enumerate() {
                let _ = writeln!(
                    per_vm,
                    "{exp},{},{param},{mode},{i},{},{},{:.3},{:.4},{:.4},{},{},{},{}",
                    link.capacity_bps / 1_000_000,
                    sc.tenants[v.tenant],
                    v.tcp_flows,
                    v.throughput_bps / 1e6,
                    v.share,
                    v.ideal_share,
                    v.policed_bytes,
                    v.dropped_bytes,
                    v.final_rate_bps
                        .map(|r| format!("{:.3}", r as f64 / 1e6))
                        .unwrap_or_default(),
                    v.decreases
                );
            }
            out.push(o);
            bar.inc(1);
        }
        Ok::<Vec<Outcome>, SimError>(out)
    };
    const BOTH: [&str; 2] = ["without", "with"];
    const PATHS: [&str; 3] = ["without", "per-destination", "per-link"];
    let two = |mut v: Vec<Outcome>| {
        let with = v.pop();
        match (v.pop(), with) {
            (Some(a), Some(b)) => Ok((a, b)),
            _ => Err(SimError::Config("seawall: a run is missing".into())),
        }
    };

    let mut files = Vec::new();
    let mut fig1 = String::from("capacity_mbps,k,a_share_without,a_share_with,a_share_flow_fair,a_share_vm_fair,jain_without,jain_with,utilisation_without,utilisation_with\n");
    let mut fig2 = String::from("capacity_mbps,flows_per_b_vm,a_share_without,a_share_with,a_share_flow_fair,a_share_vm_fair,jain_without,jain_with,utilisation_without,utilisation_with\n");
    let mut udp = String::from("capacity_mbps,udp_times_link,tcp_share_without,tcp_share_with,tcp_share_udp_only_controlled,tcp_share_vm_fair,utilisation_without,utilisation_with,utilisation_udp_only_controlled,udp_loss_at_sender_pct_with\n");
    let mut work =
        String::from("capacity_mbps,case,mode,utilisation,vm0_mbps,vm1_mbps,vm1_ideal_mbps\n");
    let mut conv = String::from(
        "capacity_mbps,case,mode,join_s,seconds_to_80pct_of_fair_share,newcomer_share_second_half\n",
    );
    let mut series_csv = String::from("capacity_mbps,case,mode,vm,time_s,throughput_mbps\n");
    let mut dest = String::from("capacity_mbps,a_vms,hosts_per_a_vm,b_share_without,b_share_per_destination,b_share_per_link,b_share_pair_fair,b_share_vm_fair,jain_without,jain_per_destination,jain_per_link,utilisation_without,utilisation_per_destination,utilisation_per_link\n");
    let mut links = String::new();
    let mut s1 = String::new();
    let mut s2 = String::new();
    let mut s3 = String::new();
    let mut s4 = String::new();
    let mut s5 = String::new();
    let mut s6 = String::new();
    let _ = writeln!(s1, "Fig. 1: tenant A (1 VM, 1 TCP flow) vs tenant B (1 VM, k flows), A's share of the link's bytes");
    let _ = writeln!(
        s1,
        "{:>6} {:>3} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9}",
        "Mb/s",
        "k",
        "without",
        "1/(k+1)",
        "with",
        "VM-fair",
        "Jain w/o",
        "Jain with",
        "util w/o",
        "util with"
    );
    let _ = writeln!(
        s2,
        "§3.1: 1 TCP flow vs 1 UDP source at x times the link rate, TCP's share (\"UDP only\": Seawall on the UDP VM's host alone, as the paper ran it)"
    );
    let _ = writeln!(
        s2,
        "{:>6} {:>3} {:>8} {:>8} {:>9} {:>8} {:>9} {:>9} {:>9} {:>11}",
        "Mb/s",
        "x",
        "without",
        "with",
        "UDP only",
        "VM-fair",
        "util w/o",
        "util with",
        "util UDPo",
        "UDP at src"
    );
    let _ = writeln!(
        s3,
        "Fig. 2: tenant A (1 VM, 1 flow) vs tenant B (3 VMs, n flows each), A's share"
    );
    let _ = writeln!(
        s3,
        "{:>6} {:>3} {:>8} {:>9} {:>8} {:>8} {:>9} {:>9} {:>9}",
        "Mb/s", "n", "without", "1/(3n+1)", "with", "VM-fair", "Jain with", "util w/o", "util with"
    );
    let _ = writeln!(
        s4,
        "Work conservation: utilisation (and what the second VM got, Mb/s)"
    );
    let _ = writeln!(
        s4,
        "{:>6} {:<28} {:>9} {:>9} {:>10} {:>10}",
        "Mb/s", "case", "util w/o", "util with", "VM 2 with", "VM 2 fair"
    );
    let _ = writeln!(
        s5,
        "Convergence: seconds until the newcomer averages 80% of its fair share (0.5) over 200 ms; its share of the delivered bytes over the second half of the run"
    );
    let _ = writeln!(
        s5,
        "{:>6} {:<24} {:>9} {:>9} {:>11} {:>11}",
        "Mb/s", "case", "without", "with", "share w/o", "share with"
    );
    let _ = writeln!(
        s6,
        "Destinations (§3, a rate per (senderVM, link)): tenant B (1 VM, 1 flow to host 0) vs tenant A, whose VMs send 1 flow to each of several hosts behind the bottleneck; B's share without Seawall, with a contender per (VM, destination host) (\"per dest\", the default paths) and per (VM, link) (\"per link\": every path names the bottleneck as shared link 0)"
    );
    let _ = writeln!(
        s6,
        "{:>6} {:<16} {:>8} {:>9} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "Mb/s",
        "A",
        "without",
        "pair-fair",
        "per dest",
        "per link",
        "VM-fair",
        "Jain w/o",
        "Jain dest",
        "Jain link",
        "util dest",
        "util link"
    );

    for &cap in &plan.capacities_bps {
        let mbps = cap / 1_000_000;
        let mut link = LinkConfig {
            duration_ns: plan.duration_ns,
            warmup_ns: plan.warmup_ns,
            ..LinkConfig::new(cap, plan.seed)
        };
        if let Some(q) = plan.queue_bytes {
            link.queue_bytes = q;
        }
        let _ = writeln!(
            links,
            "{mbps} Mb/s: drop-tail queue {} KB, base round trip {} us, feedback delay {} us, step {} us",
            link.queue_bytes / 1024,
            link.base_rtt_ns / 1000,
            link.feedback_delay_ns / 1000,
            link.step_ns / 1000
        );
        let (mut v1, mut v2) = (vec![Vec::new(); 4], vec![Vec::new(); 4]);
        for k in SEAWALL_FIG1_K {
            let (a, b) = two(run(
                &link,
                "fig1",
                &k.to_string(),
                &fig1_scenario(k),
                &BOTH,
            )?)?;
            let flow_fair = 1.0 / (k as f64 + 1.0);
            let vm_fair = b.vms[0].ideal_share;
            let _ = writeln!(
                fig1,
                "{mbps},{k},{:.4},{:.4},{flow_fair:.4},{vm_fair:.4},{:.4},{:.4},{:.4},{:.4}",
                a.vms[0].share, b.vms[0].share, a.jain, b.jain, a.utilisation, b.utilisation
            );
            let _ = writeln!(
                s1,
                "{mbps:>6} {k:>3} {:>8.3} {flow_fair:>8.3} {:>8.3} {vm_fair:>8.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
                a.vms[0].share, b.vms[0].share, a.jain, b.jain, a.utilisation, b.utilisation
            );
            for (col, x) in v1
                .iter_mut()
                .zip([a.vms[0].share, b.vms[0].share, flow_fair, vm_fair])
            {
                col.push(x);
            }
        }
        for x in SEAWALL_UDP_TIMES {
            let (a, b) = two(run(
                &link,
                "udp",
                &x.to_string(),
                &udp_scenario(&link, x),
                &BOTH,
            )?)?;
            let sc = udp_only_controlled_scenario(&link, x);
            let p = run(&link, "udp-paper", &x.to_string(), &sc, &["with"])?
                .pop()
                .ok_or_else(|| SimError::Config("seawall: a run is missing".into()))?;
            let u = &b.vms[1];
            let policed =
                u.policed_bytes as f64 / (u.policed_bytes + u.dropped_bytes).max(1) as f64 * 100.0;
            let _ = writeln!(
                udp,
                "{mbps},{x},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{policed:.1}",
                a.vms[0].share,
                b.vms[0].share,
                p.vms[0].share,
                b.vms[0].ideal_share,
                a.utilisation,
                b.utilisation,
                p.utilisation
            );
            let _ = writeln!(
                s2,
                "{mbps:>6} {x:>3} {:>8.3} {:>8.3} {:>9.3} {:>8.3} {:>9.3} {:>9.3} {:>9.3} {policed:>10.1}%",
                a.vms[0].share,
                b.vms[0].share,
                p.vms[0].share,
                b.vms[0].ideal_share,
                a.utilisation,
                b.utilisation,
                p.utilisation
            );
        }
        for n in SEAWALL_FIG2_FLOWS {
            let (a, b) = two(run(
                &link,
                "fig2",
                &n.to_string(),
                &fig2_scenario(n),
                &BOTH,
            )?)?;
            let flow_fair = 1.0 / (3.0 * n as f64 + 1.0);
            let vm_fair = b.tenants[0].ideal_share;
            let _ = writeln!(
                fig2,
                "{mbps},{n},{:.4},{:.4},{flow_fair:.4},{vm_fair:.4},{:.4},{:.4},{:.4},{:.4}",
                a.tenants[0].share,
                b.tenants[0].share,
                a.jain,
                b.jain,
                a.utilisation,
                b.utilisation
            );
            let _ = writeln!(
                s3,
                "{mbps:>6} {n:>3} {:>8.3} {flow_fair:>9.3} {:>8.3} {vm_fair:>8.3} {:>9.3} {:>9.3} {:>9.3}",
                a.tenants[0].share, b.tenants[0].share, b.jain, a.utilisation, b.utilisation
            );
            for (col, x) in
                v2.iter_mut()
                    .zip([a.tenants[0].share, b.tenants[0].share, flow_fair, vm_fair])
            {
                col.push(x);
            }
        }
        let one = |vms: Vec<Vm>| Scenario {
            tenants: vec!["A".into(), "B".into()],
            vms,
        };
        for (case, sc) in [
            ("1 VM with 1 TCP flow", one(vec![Vm::tcp(0, 1)])),
            ("1 VM with UDP at 0.9x", one(vec![Vm::udp(0, cap / 10 * 9)])),
            (
                "UDP at 0.2x + 1 TCP VM",
                one(vec![Vm::udp(0, cap / 5), Vm::tcp(1, 1)]),
            ),
        ] {
            let (a, b) = two(run(&link, "work", case, &sc, &BOTH)?)?;
            for (mode, o) in [("without", &a), ("with", &b)] {
                let mb = |i: usize| o.vms.get(i).map(|v| v.throughput_bps / 1e6);
                let _ = writeln!(
                    work,
                    "{mbps},{case},{mode},{:.4},{:.3},{},{}",
                    o.utilisation,
                    mb(0).unwrap_or(0.0),
                    mb(1).map(|x| format!("{x:.3}")).unwrap_or_default(),
                    o.vms
                        .get(1)
                        .map(|v| format!("{:.3}", v.ideal_bps / 1e6))
                        .unwrap_or_default()
                );
            }
            let second = |o: &Outcome, f: &dyn Fn(&crate::seawall::VmResult) -> f64| {
                o.vms
                    .get(1)
                    .map(|v| format!("{:.1}", f(v)))
                    .unwrap_or_else(|| "-".into())
            };
            let _ = writeln!(
                s4,
                "{mbps:>6} {case:<28} {:>9.3} {:>9.3} {:>10} {:>10}",
                a.utilisation,
                b.utilisation,
                second(&b, &|v| v.throughput_bps / 1e6),
                second(&b, &|v| v.ideal_bps / 1e6)
            );
        }
        let join = plan.warmup_ns + (plan.duration_ns - plan.warmup_ns) / 4;
        let mut lines = Vec::new();
        for (case, first) in [("1 flow joins 1 flow", 1), ("1 flow joins 8 flows", 8)] {
            let sc = one(vec![Vm::tcp(0, first), Vm::tcp(1, 1).starting_at(join)]);
            let (a, b) = two(run(&link, "convergence", case, &sc, &BOTH)?)?;
            let mut t = Vec::new();
            let mut shares = Vec::new();
            for (mode, o) in [("without", &a), ("with", &b)] {
                let secs = o
                    .time_to_reach(1, join, cap as f64 / 2.0, 0.8, 4)
                    .map(|ns| ns as f64 / 1e9);
                let shown = secs
                    .map(|x| format!("{x:.2}"))
                    .unwrap_or_else(|| "never".into());
                let from = o.series[1].len() / 2;
                let sum = |v: &[f64]| v[from..].iter().sum::<f64>();
                let late = sum(&o.series[1]) / (sum(&o.series[0]) + sum(&o.series[1])).max(1.0);
                let _ = writeln!(
                    conv,
                    "{mbps},{case},{mode},{:.2},{shown},{late:.4}",
                    join as f64 / 1e9
                );
                t.push(shown);
                shares.push(late);
                for (vm, s) in o.series.iter().enumerate() {
                    for (i, x) in s.iter().enumerate() {
                        let _ = writeln!(
                            series_csv,
                            "{mbps},{case},{mode},{vm},{:.3},{:.3}",
                            (i as u64 * o.bin_ns) as f64 / 1e9,
                            x / 1e6
                        );
                    }
                    if first > 1 {
                        lines.push(Series {
                            label: format!(
                                "{} {mode}",
                                if vm == 0 { "8-flow VM" } else { "newcomer" }
                            ),
                            points: s
                                .iter()
                                .enumerate()
                                .map(|(i, x)| ((i as u64 * o.bin_ns) as f64 / 1e9, x / cap as f64))
                                .collect(),
                        });
                    }
                }
            }
            let _ = writeln!(
                s5,
                "{mbps:>6} {case:<24} {:>9} {:>9} {:>11.3} {:>11.3}",
                t[0], t[1], shares[0], shares[1]
            );
        }
        let mut v3 = vec![Vec::new(); 5];
        let mut cases = Vec::new();
        for (vms, hosts, sc) in [
            (
                1,
                SEAWALL_MANY_HOSTS,
                many_destinations_scenario(SEAWALL_MANY_HOSTS),
            ),
            (
                SEAWALL_ALL_PAIRS,
                SEAWALL_ALL_PAIRS,
                all_pairs_scenario(SEAWALL_ALL_PAIRS),
            ),
        ] {
            let param = format!("{vms}x{hosts}");
            let o = run(&link, "destinations", &param, &sc, &PATHS)?;
            let [a, d, l] = &o[..] else {
                return Err(SimError::Config("seawall: a run is missing".into()));
            };
            let b = |o: &Outcome| o.tenants[1].share;
            // Every (VM, host) pair a contender, as TCP makes every flow one.
            let pair_fair = 1.0 / ((vms * hosts) as f64 + 1.0);
            let vm_fair = l.tenants[1].ideal_share;
            let _ = writeln!(
                dest,
                "{mbps},{vms},{hosts},{:.4},{:.4},{:.4},{pair_fair:.4},{vm_fair:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4}",
                b(a), b(d), b(l), a.jain, d.jain, l.jain, a.utilisation, d.utilisation, l.utilisation
            );
            let case = format!(
                "{vms} VM{} x {hosts} hosts",
                if vms == 1 { "" } else { "s" }
            );
            let _ = writeln!(
                s6,
                "{mbps:>6} {case:<16} {:>8.3} {pair_fair:>9.3} {:>8.3} {:>8.3} {vm_fair:>8.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
                b(a), b(d), b(l), a.jain, d.jain, l.jain, d.utilisation, l.utilisation
            );
            for (col, x) in v3.iter_mut().zip([b(a), b(d), b(l), pair_fair, vm_fair]) {
                col.push(x);
            }
            cases.push(case);
        }
        files.push((
            format!("destinations_{mbps}mbps.svg"),
            bar_chart(
                &Labels {
                    title: format!("A tenant's VMs reach several hosts, {mbps} Mb/s"),
                    x: "tenant A's VMs x hosts each reaches".into(),
                    y: "share of the 1-VM, 1-host tenant".into(),
                },
                &cases,
                &[
                    "without Seawall".to_string(),
                    "Seawall, per destination".to_string(),
                    "Seawall, per link".to_string(),
                    "(VM, host)-pair fair".to_string(),
                    "VM-level fair".to_string(),
                ],
                &v3,
            ),
        ));
        let names = vec![
            "without Seawall".to_string(),
            "with Seawall".to_string(),
            "flow-level fair".to_string(),
            "VM-level fair".to_string(),
        ];
        let cats = |v: &[usize]| v.iter().map(|k| k.to_string()).collect::<Vec<_>>();
        files.push((
            format!("fig1_{mbps}mbps.svg"),
            bar_chart(
                &Labels {
                    title: format!("Fig. 1 at {mbps} Mb/s: 1 flow vs a VM with k"),
                    x: "k (flows of the other VM)".into(),
                    y: "share of the 1-flow VM".into(),
                },
                &cats(&SEAWALL_FIG1_K),
                &names,
                &v1,
            ),
        ));
        files.push((
            format!("fig2_{mbps}mbps.svg"),
            bar_chart(
                &Labels {
                    title: format!("Fig. 2 at {mbps} Mb/s: 1-VM tenant vs 3-VM tenant"),
                    x: "flows per VM of the 3-VM tenant".into(),
                    y: "share of the 1-VM tenant".into(),
                },
                &cats(&SEAWALL_FIG2_FLOWS),
                &names,
                &v2,
            ),
        ));
        files.push((
            format!("convergence_{mbps}mbps.svg"),
            line_chart(
                &Labels {
                    title: format!("A 1-flow VM joins an 8-flow VM, {mbps} Mb/s"),
                    x: "time (s)".into(),
                    y: "share of the link (50 ms bins)".into(),
                },
                &lines,
            ),
        ));
    }
    bar.finish_and_clear();
    files.push(("fig1_flows.csv".into(), fig1));
    files.push(("fig2_vms.csv".into(), fig2));
    files.push(("udp_flood.csv".into(), udp));
    files.push(("work_conservation.csv".into(), work));
    files.push(("convergence.csv".into(), conv));
    files.push(("convergence_series.csv".into(), series_csv));
    files.push(("destinations.csv".into(), dest));
    files.push(("per_vm.csv".into(), per_vm));
    let sw = &plan.seawall;
    let summary = format!(
        "Seawall: period {} ms, +{} Mb/s per period, x{} on loss; {} s runs, {} s warm-up, seed {}\n{links}\n{s1}\n{s2}\n{s3}\n{s4}\n{s5}\n{s6}",
        sw.period_ns as f64 / 1e6,
        sw.increase_bps as f64 / 1e6,
        1.0 - sw.decrease,
        plan.duration_ns as f64 / 1e9,
        plan.warmup_ns as f64 / 1e9,
        plan.seed
    );
    Ok(NfaasReport { files, summary })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: SimCommand,
    }

    #[test]
    fn subcommands_parse_with_defaults() {
        let c = Cli::try_parse_from([
            "x",
            "stratos-placement",
            "--seed",
            "3",
            "--initial",
            "2,2,1,1,2",
        ])
        .unwrap();
        match c.cmd {
            SimCommand::StratosPlacement {
                seed, initial, out, ..
            } => {
                assert_eq!(seed, 3);
                assert_eq!(initial, vec![2, 2, 1, 1, 2]);
                assert_eq!(out, PathBuf::from("out/sim/stratos-placement"));
            }
            other => panic!("{other:?}"),
        }
        assert!(Cli::try_parse_from(["x", "nfaas-placement", "--customers", "10"]).is_ok());
        assert!(Cli::try_parse_from(["x", "nope"]).is_err());
        let c = Cli::try_parse_from(["x", "bench-scale", "--quick", "--sizes", "50:20,100:50"])
            .unwrap();
        match c.cmd {
            SimCommand::BenchScale { quick, sizes, .. } => {
                assert!(quick);
                assert_eq!(sizes, vec!["50:20", "100:50"]);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(parse_size("100:50").unwrap(), (100, 50));
        assert!(matches!(parse_size("100x50"), Err(SimError::Config(_))));
    }

    #[test]
    fn nfaas_report_has_every_figure() {
        let r = nfaas_report(100, 1).unwrap();
        assert_eq!(r.files.len(), 6);
        let b = &r
            .files
            .iter()
            .find(|f| f.0.starts_with("fig5b") && f.0.ends_with(".csv"))
            .unwrap()
            .1;
        // Header plus three customer types.
        assert_eq!(b.lines().count(), 4);
        assert!(r.summary.contains("saving"));
    }

    #[test]
    fn seawall_report_writes_every_figure_with_consistent_csv() {
        let plan = SeawallPlan {
            seed: 1,
            capacities_bps: vec![100_000_000],
            duration_ns: 1_500_000_000,
            warmup_ns: 500_000_000,
            seawall: sluice_seawall::Config::default(),
            queue_bytes: None,
        };
        let r = seawall_report(&plan).unwrap();
        // Four charts per link rate, eight CSV files.
        assert_eq!(r.files.len(), 4 + 8);
        for (name, body) in r.files.iter().filter(|f| f.0.ends_with(".csv")) {
            let mut lines = body.lines();
            let fields = lines.next().unwrap().split(',').count();
            let mut rows = 0;
            for l in lines {
                assert_eq!(l.split(',').count(), fields, "{name}: {l}");
                rows += 1;
            }
            assert!(rows > 0, "{name} is empty");
        }
        let fig1 = &r.files.iter().find(|f| f.0 == "fig1_flows.csv").unwrap().1;
        assert_eq!(fig1.lines().count(), 1 + SEAWALL_FIG1_K.len());
        // Both destination cases, each run without Seawall, per destination and per link.
        let dest = &r
            .files
            .iter()
            .find(|f| f.0 == "destinations.csv")
            .unwrap()
            .1;
        assert_eq!(dest.lines().count(), 1 + 2);
        let per_vm = &r.files.iter().find(|f| f.0 == "per_vm.csv").unwrap().1;
        let link_runs = per_vm.lines().filter(|l| l.contains(",per-link,")).count();
        // 2 VMs in one case, 3 + 1 in the other.
        assert_eq!(link_runs, 2 + 4);
        for part in [
            "Fig. 1",
            "§3.1",
            "Fig. 2",
            "Work conservation",
            "Convergence",
            "Destinations",
        ] {
            assert!(r.summary.contains(part), "summary lacks {part}");
        }
        for bad in [
            SeawallPlan {
                capacities_bps: vec![],
                ..plan.clone()
            },
            SeawallPlan {
                warmup_ns: plan.duration_ns,
                ..plan
            },
        ] {
            assert!(matches!(seawall_report(&bad), Err(SimError::Config(_))));
        }
    }

    #[test]
    fn seawall_flags_reach_the_controller() {
        let c = Cli::try_parse_from([
            "x",
            "seawall",
            "--capacities",
            "10,40",
            "--increase-mbps",
            "2",
        ])
        .unwrap();
        match c.cmd {
            SimCommand::Seawall {
                capacities,
                increase_mbps,
                period_ms,
                ..
            } => {
                assert_eq!(capacities, vec![10, 40]);
                assert_eq!(increase_mbps, Some(2.0));
                assert_eq!(period_ms, None);
            }
            other => panic!("{other:?}"),
        }
        assert!(secs_to_ns(-1.0, "--duration").is_err());
        assert_eq!(secs_to_ns(1.5, "--duration").unwrap(), 1_500_000_000);
    }

    #[test]
    fn wrong_initial_count_is_a_config_error() {
        let cmd = SimCommand::StratosPlacement {
            out: std::env::temp_dir().join("sluice-sim-never-written"),
            seed: 1,
            tenants: 1,
            racks: 2,
            racks_per_agg: 1,
            initial: vec![1, 1],
        };
        assert!(matches!(run(cmd), Err(SimError::Config(_))));
    }
}
