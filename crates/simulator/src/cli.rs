//! Reproduction runners: the `sluice-sim` binary (`cargo run --release -p sluice-simulator
//! --bin sluice-sim -- <NAME>`). They are not mounted in `sluice`, which would then link
//! the LP solver (HiGHS) the reproductions need and the data plane does not.
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

mod comb;
mod nfaas;
mod seawall;
mod stratos;

pub use comb::*;
pub use nfaas::*;
pub use seawall::*;
pub use stratos::*;

#[cfg(test)]
mod tests;
